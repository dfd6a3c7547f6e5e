"""The GPU tests' configs of the final kernel, fitted to the GPU at hand or the emulated target
(a T4 allows 64 KB of shared memory per block, less than some of the configs the tests name)."""
from helpers import hardware
from helpers.runtime.specs.final import SPEC

# what a test is about: fitting a config to the GPU must leave these as they are
FEATURES = ("SPLITK", "STREAMK", "REDUCE", "KU", "A_T", "B_T", "PACK_A", "PACK_B", "GROUP")


def fit(params: dict) -> dict:
    """``params`` resolved, or the nearest config the GPU allows, with the same :data:`FEATURES`."""
    full = SPEC.resolve(params)
    fitted = SPEC.fitting(full, hardware.current())
    assert all(fitted[k] == full[k] for k in FEATURES), (full, fitted)
    return fitted
