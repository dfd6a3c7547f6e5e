"""Spec for kernels/04_thread_tile_1d.cu (chapter "1D thread tiles")."""
from ..registry import KernelSpec, Param, cdiv, divides, register

SPEC = register(
    KernelSpec(
        name="thread_tile_1d",
        file="04_thread_tile_1d.cu",
        function="sgemm_thread_tile_1d",
        title="1D thread tiles",
        chapter="thread_tile_1d",
        params=(
            Param("BM", 64, (16, 32, 64, 128, 256), "rows of C per block"),
            Param("BN", 64, (16, 32, 64, 128, 256), "columns of C per block"),
            Param("BK", 32, (4, 8, 16, 32, 64), "k-slice staged per step"),
            Param("TM", 8, (1, 2, 4, 8, 16, 32), "results per thread (a column)"),
            Param("LOOP", 1, (0, 1), "1: k outer with B in a register; 0: dot product per result"),
        ),
        block=lambda p: (p["BM"] * p["BN"] // p["TM"], 1, 1),
        grid=lambda p, M, N, K: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), 1),
        rules=(divides("TM", "BM"),
               lambda p: (f"shared memory {4 * (p['BM'] + p['BN']) * p['BK']} B exceeds the 48 KB static limit"
                          if 4 * (p["BM"] + p["BN"]) * p["BK"] > 48 * 1024 else None)),
        label=lambda p: f"{p['BM']}x{p['BN']}x{p['BK']} TM={p['TM']}" + ("" if p["LOOP"] else " dot-order"),
        tile=lambda p: (p["BM"], p["BN"]),
        summary="each thread computes TM results in a column; B values reused from a register",
    )
)

SWEEP = (
    [(SPEC.defaults(), (n, n, n)) for n in (512, 1024, 2048, 4096)]
    + [(dict(SPEC.defaults(), TM=tm), (4096, 4096, 4096)) for tm in (4, 16)]
    + [(dict(SPEC.defaults(), BK=bk), (4096, 4096, 4096)) for bk in (4, 8, 16)]
    + [(dict(SPEC.defaults(), BM=128, BN=128, BK=8, TM=16), (4096, 4096, 4096)),
       (dict(SPEC.defaults(), BM=128, BN=64, BK=16, TM=8), (4096, 4096, 4096)),
       (dict(SPEC.defaults(), BK=8, LOOP=0), (4096, 4096, 4096)),
       (dict(SPEC.defaults(), LOOP=0), (4096, 4096, 4096))]
)
TEST_CONFIGS = [dict(SPEC.defaults(), LOOP=0), dict(SPEC.defaults(), BK=8), dict(SPEC.defaults(), BM=128, BN=32, BK=16, TM=4)]
