"""The problem shapes the book measures, defined once.

* :data:`SIZES`: square n x n x n products of the leaderboard;
* :data:`SUITE`: awkward shapes (thin, wide, odd, long K) every chapter's kernel runs on;
* :func:`broad_suite`: a larger public suite drawn from a fixed seed, for judging the final
  kernel's dispatcher on random shapes (its model's numbers were fitted on this seed's; other
  seeds give shapes it never saw).
"""
from __future__ import annotations

import math
import random

SIZES = (1024, 2048, 4096, 8192)
QUICK_SIZES = (1024, 2048)
SUITE = ((1000, 3000, 777), (4097, 4097, 4097), (8192, 128, 8192), (128, 8192, 8192),
         (2048, 2048, 8192), (3000, 3000, 3000), (512, 512, 512))

BROAD_SEED = 20261123
BROAD_RANGE = (64, 16384)


def flops(M: int, N: int, K: int) -> int:
    """A multiply and an add per (i, j, k)."""
    return 2 * M * N * K


def label(shape) -> str:
    M, N, K = shape
    return f"n={M}" if M == N == K else f"{M}x{N}x{K}"


def broad_suite(count: int = 48, seed: int = BROAD_SEED, max_gflop: float = 4400.0) -> list[tuple[int, int, int]]:
    """``count`` shapes, M, N and K log-uniform in [64, 16384], from a fixed seed.

    A third of them are drawn freely; a third are skinny (one of M, N at most 256, the
    others large); a third have a long K (K at least 8 times max(M, N) before the sizes are
    roughened, so about that or more). Sizes are made odd or not a multiple of 4 at
    random, so every edge path runs. Products above ``max_gflop`` GFLOP are redrawn: the
    suite is meant to take minutes, not hours.
    """
    rng = random.Random(seed)
    lo, hi = (math.log(x) for x in BROAD_RANGE)

    def draw(a=lo, b=hi):
        return int(round(math.exp(rng.uniform(a, b))))

    def roughen(x):
        return x if rng.random() < 0.4 else x + rng.choice((1, 3, -1, 5))

    out: list[tuple[int, int, int]] = []
    while len(out) < count:
        kind = len(out) % 3
        if kind == 0:
            M, N, K = draw(), draw(), draw()
        elif kind == 1:
            small = draw(lo, math.log(256))
            big1, big2 = draw(math.log(2048), hi), draw(math.log(1024), hi)
            M, N, K = (small, big1, big2) if rng.random() < 0.5 else (big1, small, big2)
        else:
            M, N = draw(lo, math.log(2048)), draw(lo, math.log(2048))
            K = min(BROAD_RANGE[1], max(8 * max(M, N), draw(math.log(4096), hi)))
        shape = tuple(min(BROAD_RANGE[1], max(BROAD_RANGE[0], roughen(x))) for x in (M, N, K))
        if flops(*shape) / 1e9 <= max_gflop and shape not in out:
            out.append(shape)
    return out
