"""The warp-tiling kernel's candidate configs (helpers/runtime/specs/warptiling.py, VARIANTS) on the
CPU (helpers/runtime/cpu_cuda.py), as tests/test_kernels_on_cpu.py runs the others: odd shapes that
take the checked path, shapes of whole tiles that take the path without checks (blocks wholly
inside A and B), and shapes where both meet: interior blocks fast, the last row and column of
blocks checked; aligned and 4 bytes off; element by element against a float64 reference."""
import functools

import pytest

from helpers.runtime import cpu_cuda
from helpers.runtime.specs import warptiling as ws
from test_kernels_on_cpu import KERNELS, SHAPES, _warp, run_shapes

ORDER = ("BM", "BN", "BK", "WM", "WN", "TM", "TN")
TESTED = {(128, 128, 8, 64, 64, 16, 8), (128, 128, 16, 64, 64, 16, 8), (256, 128, 8, 64, 64, 16, 8),
          (128, 128, 8, 64, 32, 8, 8), (64, 64, 16, 32, 32, 4, 8)}        # tests/test_kernels_on_cpu.py's
NEW = [c for c in dict.fromkeys(tuple(ws.SPEC.resolve(v)[k] for k in ORDER) for v in ws.VARIANTS) if c not in TESTED]


@functools.lru_cache(maxsize=None)
def binary():
    try:
        return cpu_cuda.build(KERNELS / "10_warptiling.cu", [_warp(*c)[1] for c in NEW])
    except cpu_cuda.CompilerMissing as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("config", NEW, ids=["x".join(map(str, c)) for c in NEW])
def test_candidate_on_cpu(config):
    file, expr, launch, whole = _warp(*config)
    bm, bn, bk = config[:3]
    mixed = (2 * bm + 3, bn + 1, 3 * bk)          # one block row and column past the whole tiles: both paths
    run_shapes(file, expr, launch, SHAPES[:3] + [whole, mixed], runner=binary())


def test_every_variant_is_checked_somewhere():
    assert {tuple(ws.SPEC.resolve(v)[k] for k in ORDER) for v in ws.VARIANTS} <= TESTED | set(NEW)
    assert len(NEW) >= 4
