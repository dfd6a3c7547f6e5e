"""Published measurements of the same kernels on older GPUs, set beside the book's own.

Taught in the chapters "Shared-memory tiling" and "1D thread tiles".

:data:`GTX_1080_TI` is the speed table of the article "矩阵乘 Matmul 性能优化实践"
("Matmul performance optimisation in practice", part of the UNIVERSAL_SGEMM_CUDA
notes, github.com/AndSonder/UNIVERSAL_SGEMM_CUDA): a naive kernel, shared-memory tiles
and 1D thread tiles, timed on a GeForce GTX 1080 Ti (Pascal, 2017) at four square sizes.
The article does not state the unit of its numbers. They grow about eightfold per
doubling of n, as times do, but read in any one unit they give speeds that do not hold
together across the sizes (shared-memory tiles, as microseconds: 1.35 TFLOP/s at n = 512,
0.26 at 1024), so :func:`beside_ours` compares only what does not depend on the unit: each
kernel's speed-up over the naive kernel of the same table.
"""
from __future__ import annotations

from ..tables import Table, Text

SOURCE = ("“矩阵乘 Matmul 性能优化实践” (Matmul performance optimisation in practice), "
          "UNIVERSAL_SGEMM_CUDA notes, github.com/AndSonder/UNIVERSAL_SGEMM_CUDA")
DEVICE = "GeForce GTX 1080 Ti"
SIZES = (256, 512, 1024, 2048)
# kernel (the book's name for the same technique) -> the article's numbers at SIZES, as printed
GTX_1080_TI = {
    "naive": (95.5152, 724.396, 28424.0, 228681.0),
    "smem_tiling": (40.5293, 198.374, 8245.68, 59048.4),
    "thread_tile_1d": (20.6685, 35.8774, 894.779, 5880.03),
}
TITLES = {"naive": "naive", "smem_tiling": "shared-memory tiles", "thread_tile_1d": "1D thread tiles"}


def speedup(kernel: str, n: int) -> float:
    """How many times faster than the naive kernel at n, in the article's table (unit-free)."""
    i = SIZES.index(n)
    return GTX_1080_TI["naive"][i] / GTX_1080_TI[kernel][i]


def beside_ours(ours: dict, kernels=("smem_tiling", "thread_tile_1d")) -> Table:
    """The article's speed-ups over its naive kernel next to ours.

    ``ours`` maps (kernel, n) to a timing row of this book (square shapes, default configs,
    one run), and must hold ("naive", n) for every n compared.
    """
    rows = []
    for kernel in kernels:
        for n in SIZES:
            if (kernel, n) not in ours or ("naive", n) not in ours:
                continue
            mine, base = ours[(kernel, n)], ours[("naive", n)]
            rows.append({"kernel": TITLES[kernel], "n": n,
                         f"{DEVICE}: speed-up over naive": round(speedup(kernel, n), 1),
                         "ours: speed-up over naive": round(mine["tflops"] / base["tflops"], 1),
                         "ours: TFLOP/s": round(mine["tflops"], 2)})
    return Table(rows, caption=f"{DEVICE} numbers from {SOURCE}")


def beside_text(ours: dict, kernel: str) -> Text:
    """The range of one kernel's speed-up over the naive kernel, there and here, in words."""
    sizes = [n for n in SIZES if (kernel, n) in ours and ("naive", n) in ours]
    if not sizes:
        return Text("The recorded rows hold none of the article's sizes.")
    theirs = [speedup(kernel, n) for n in sizes]
    mine = [ours[(kernel, n)]["tflops"] / ours[("naive", n)]["tflops"] for n in sizes]
    return Text(f"At n = {', '.join(map(str, sizes))}, {TITLES[kernel]} ran {min(theirs):.1f}-{max(theirs):.1f} times "
                f"as fast as the naive kernel on the {DEVICE}, and {min(mine):.1f}-{max(mine):.1f} times as fast on "
                "the GPU of this page.")
