"""Offline sm_90 compile: registers, shared memory, spills, SASS (CPU only, no GPU)."""
import pytest

from helpers.registry import all_specs
from helpers.resources import inner_loop, opcode_counts, resources, sass


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.name)
def test_default_config_compiles_for_sm90_without_spills(spec):
    r = resources(spec, spec.defaults())
    assert 16 <= r.registers <= 255
    assert not r.spills, str(r)
    assert r.arch == "sm_90"


def test_naive_report_values():
    r = resources("naive", {"BX": 16, "BY": 16})
    assert r.static_smem == 0 and r.dynamic_smem == 0
    assert r.registers < 64


def test_naive_sass_reads_global_memory_in_its_loop():
    text = sass("naive")
    counts = opcode_counts(text)
    assert counts["FFMA"] >= 1 and counts["LDG"] >= 2
    loop = inner_loop(text)
    assert "FFMA" in loop and "LDG" in loop
    assert "LDS" not in loop  # no shared memory in the naive kernel


def test_compile_error_carries_log(tmp_path, monkeypatch):
    from helpers import resources as R
    from helpers.registry import get

    spec = get("naive")
    with pytest.raises(RuntimeError, match="error"):
        R._compile_cubin("this is not C++", spec.file, "sgemm_naive<32, 32>", ("-std=c++17",), "sm_90")
