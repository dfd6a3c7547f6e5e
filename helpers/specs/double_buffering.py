"""Specs for kernels/08_double_buffering.cu (chapter "Double buffering").

Three kernels: the two-stage register-prefetch kernel, the same kernel with its
first barrier missing (kept because it is racy: the chapter studies the race),
and the multi-stage cp.async pipeline.
"""
from ..registry import KernelSpec, Param, cdiv, register


def _grid(p, M, N, K):
    return (cdiv(N, 128), cdiv(M, 128), 1)


def async_smem_bytes(p: dict) -> int:
    """Dynamic shared memory of the cp.async kernel: STAGES tiles of A (128 x BK) and B (BK x 128)."""
    return p["STAGES"] * (128 * p["BK"] + p["BK"] * 128) * 4


COMMON = dict(file="08_double_buffering.cu", chapter="double_buffering", block=lambda p: (256, 1, 1),
              grid=_grid, tile=lambda p: (128, 128))

SPECS = [
    register(KernelSpec(
        name="double_buffering", function="sgemm_double_buffering",
        title="Double buffering (2 shared stages, register prefetch)",
        params=(Param("BK", 8, (8, 16), "k-slice per step"),
                Param("FIXED", 1, (1,), "1: the barrier after the first tile is there")),
        label=lambda p: f"BK={p['BK']}",
        summary="load the next tile into registers while computing on the current shared-memory stage",
        **COMMON)),
    register(KernelSpec(
        name="double_buffering_racy", function="sgemm_double_buffering",
        title="Double buffering, racy (one barrier missing)",
        params=(Param("BK", 8, (8, 16), "k-slice per step"),
                Param("FIXED", 0, (0,), "0: the barrier after the first tile is missing")),
        label=lambda p: f"BK={p['BK']} racy",
        broken="no barrier between storing the first tile and computing on it: a shared-memory race",
        summary="the same kernel without the barrier after the first tile, kept to study the race",
        **COMMON)),
    register(KernelSpec(
        name="double_buffering_async", function="sgemm_double_buffering_async",
        title="cp.async pipeline",
        params=(Param("BK", 16, (8, 16, 32), "k-slice per stage"),
                Param("STAGES", 3, (2, 3, 4), "pipeline depth: tiles in shared memory at once")),
        smem_bytes=async_smem_bytes,
        label=lambda p: f"BK={p['BK']}, {p['STAGES']} stages",
        summary="a multi-stage cp.async pipeline: global -> shared memory without registers",
        **COMMON)),
]
SPEC = SPECS[0]

SIZES = (1024, 2048, 4096)
# The previous step (bank_conflicts) is measured by its own chapter's sweep.
SWEEP = (
    [("double_buffering", {"BK": 8}, (n, n, n)) for n in SIZES]
    + [("double_buffering", {"BK": 16}, (4096, 4096, 4096))]
    + [("double_buffering_racy", {"BK": 8}, (n, n, n)) for n in SIZES]
    + [("double_buffering_async", {"BK": 16, "STAGES": s}, (n, n, n)) for s in (2, 3, 4) for n in SIZES]
    + [("double_buffering_async", {"BK": bk, "STAGES": s}, (4096, 4096, 4096)) for bk in (8, 32) for s in (2, 3, 4)]
)
TEST_CONFIGS = [("double_buffering", {"BK": 16}),
                ("double_buffering_async", {"BK": 8, "STAGES": 2}),
                ("double_buffering_async", {"BK": 32, "STAGES": 4})]
