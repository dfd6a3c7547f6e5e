"""Specs for kernels/08_double_buffering.cu (chapter "Double buffering")."""
from ..registry import KernelSpec, Param, cdiv, register


def _grid(p, M, N, K):
    return (cdiv(N, 128), cdiv(M, 128), 1)


COMMON = dict(file="08_double_buffering.cu", chapter="double_buffering", block=lambda p: (256, 1, 1),
              grid=_grid, tile=lambda p: (128, 128))

SPECS = [
    register(KernelSpec(
        name="double_buffering", function="sgemm_double_buffering",
        title="Double buffering (registers + 2 shared stages)",
        params=(Param("BK", 8, (8, 16), "k-slice per step"),
                Param("FIXED", 1, (1,), "the barrier after the first tile is present")),
        label=lambda p: f"BK={p['BK']}",
        summary="prefetch the next tile into registers while computing on the current shared stage",
        **COMMON)),
    register(KernelSpec(
        name="double_buffering_racy", function="sgemm_double_buffering",
        title="Double buffering, racy (barrier missing)",
        params=(Param("BK", 8, (8, 16), "k-slice per step"),
                Param("FIXED", 0, (0,), "0: the barrier after the first tile is missing")),
        label=lambda p: f"BK={p['BK']} racy",
        broken="no barrier between storing the first tile and computing on it: a shared-memory race",
        summary="the published structure's race, kept to study it",
        **COMMON)),
    register(KernelSpec(
        name="double_buffering_async", function="sgemm_double_buffering_async",
        title="cp.async pipeline",
        params=(Param("BK", 8, (8, 16, 32), "k-slice per stage"),
                Param("STAGES", 3, (2, 3, 4, 5), "tiles in flight")),
        smem_bytes=lambda p: p["STAGES"] * 2 * 128 * p["BK"] * 4,
        label=lambda p: f"BK={p['BK']} {p['STAGES']} stages",
        summary="multi-stage cp.async pipeline: global -> shared without registers",
        **COMMON)),
]
SPEC = SPECS[0]

SWEEP = (
    [("double_buffering", {"BK": 8}, (n, n, n)) for n in (1024, 2048, 4096)]
    + [("double_buffering", {"BK": 16}, (4096, 4096, 4096))]
    + [("double_buffering_racy", {"BK": 8}, (n, n, n)) for n in (1024, 4096)]
    + [("bank_conflicts", {}, (n, n, n)) for n in (1024, 2048, 4096)]
    + [("double_buffering_async", {"BK": bk, "STAGES": s}, (4096, 4096, 4096))
       for bk in (8, 16, 32) for s in (2, 3, 4)]
    + [("double_buffering_async", {"BK": 16, "STAGES": 3}, (n, n, n)) for n in (1024, 2048)]
)
TEST_CONFIGS = [("double_buffering", {"BK": 16}),
                ("double_buffering_async", {"BK": 16, "STAGES": 2}),
                ("double_buffering_async", {"BK": 32, "STAGES": 4})]
