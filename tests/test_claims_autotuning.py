"""The chapter "Autotuning" (book/11_autotuning.md) and its deep dive against the search and the
recorded data (data source ``autotuning``). Sentences computed in the page are not repeated here."""
import pytest

from helpers import hardware
from helpers.figures import autotuning as fig_tune
from helpers.measure import autotune as tuning
from helpers.measure.results import recorded
from helpers.runtime.specs import get

SPEC = get("warptiling")


@pytest.fixture(scope="module")
def rows():
    return recorded("autotuning").rows


def current(rows):
    if fig_tune.searched_kernel(rows) != tuning.TUNED_KERNEL or tuning.compared(rows, "tuned") is None:
        pytest.skip("the recorded search predates the warp-tiling search with its side-by-side comparison")


def test_the_chapter_tunes_the_previous_chapters_kernel_from_its_defaults():
    # "The kernel we tune is the previous chapter's ... Its defaults are ... 128 × 128 blocks of four 64 × 64 warp tiles"
    assert tuning.TUNED_KERNEL == "warptiling"
    d = SPEC.defaults()
    assert (d["BM"], d["BN"], d["WM"], d["WN"]) == (128, 128, 64, 64) and SPEC.threads(d) == 4 * 32


def test_the_tuned_config_beats_the_default_in_the_same_run(rows):
    # "the default and the tuned config are timed again, back to back, at the same shape"
    current(rows)
    default, tuned = tuning.compared(rows, "default"), tuning.compared(rows, "tuned")
    assert default["params"] == SPEC.defaults() and (default["M"], default["N"], default["K"]) == (
        tuned["M"], tuned["N"], tuned["K"])
    assert tuned["ok"] and default["ok"] and tuned["tflops"] > default["tflops"]


def test_the_search_sampled_then_searched_locally(rows):
    # "First a random sample of the survivors, the default among them ... Then a local search"
    current(rows)
    timed = tuning.timed_rows(rows)
    assert any(r["default"] and r.get("phase") == "sample" for r in timed)
    assert any(r.get("phase") == "local" for r in timed)


def test_exercise_3_tiles_at_1024():
    # "a 128 × 256 tile gives 8 × 4 = 32 blocks, far fewer than the H200's 132 SMs; 64 × 64 tiles give 256"
    h200 = next(d for d in hardware.KNOWN.values() if d.name == "NVIDIA H200") if hasattr(hardware, "KNOWN") else None
    device = h200 or recorded("autotuning").device
    sms = device.sm_count
    assert sms == 132
    g = SPEC.grid(SPEC.resolve(dict(BM=128, BN=256)), 1024, 1024, 1024, device)
    assert g[0] * g[1] == 32 and (g[1], g[0]) == (8, 4)
    g = SPEC.grid(SPEC.resolve(dict(BM=64, BN=64, WM=32, WN=32, TM=4, TN=8)), 1024, 1024, 1024, device)
    assert g[0] * g[1] == 256 > sms


def test_exercise_1_halving_wm_alone_leaves_16_lanes():
    d = SPEC.defaults()
    assert (d["WM"] // 2 // d["TM"]) * (d["WN"] // d["TN"]) == 16
    assert SPEC.is_valid(dict(d, WM=d["WM"] // 2, TM=d["TM"] // 2))
