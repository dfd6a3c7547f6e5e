"""The register models behind the spill rule, against the offline compile (CPU only).

tests/data/registers_<kernel>.jsonl holds what ptxas reported for configs of each kernel
(every config that spilled, and a sample of those that did not), written by
scripts/calibrate_registers.py. A config the validation accepts must not spill more than a
few words: the model may refuse a config that would have fit, never wave through one that
spills heavily.
"""
import json
from pathlib import Path

import pytest

from helpers.hardware import Device
from helpers.runtime.specs import get

DATA = Path(__file__).parent / "data"
H200 = Device.from_datasheet("NVIDIA H200")
HEAVY = 64           # bytes of spill stores that count as spilling, not as ptxas's stray words


def calibration(kernel):
    lines = (DATA / f"registers_{kernel}.jsonl").read_text().splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


@pytest.mark.parametrize("kernel", sorted(p.stem.removeprefix("registers_") for p in DATA.glob("registers_*.jsonl")))
def test_validation_refuses_every_config_that_spills_heavily(kernel):
    spec = get(kernel)
    meta, rows = calibration(kernel)
    accepted = [r for r in rows if not spec.problems(spec.resolve(r["params"]), H200)]
    heavy = [r for r in accepted if r["spill_stores"] > HEAVY]
    assert not heavy, f"{len(heavy)} accepted configs spill: {heavy[:3]}"
    clean = [r for r in rows if r["spill_stores"] == 0]
    refused = [r for r in clean if spec.problems(spec.resolve(r["params"]), H200)]
    assert len(refused) <= 0.2 * len(clean), f"the model refuses {len(refused)} of {len(clean)} configs that fit"
