"""The warp-tiling kernel's candidate configs against cuBLAS on the GPU (``pytest -m gpu``), on
shapes where interior blocks take the path without checks and the last row and column of blocks
the checked one, on odd shapes (checked everywhere), and on views 4 bytes off (checked)."""
import pytest

from helpers.runtime.check import check
from helpers.runtime.specs import warptiling as ws

pytestmark = pytest.mark.gpu
SHAPES = [(4100, 4100, 4096), (1000, 3000, 777), (513, 260, 72), (256, 512, 32)]


@pytest.mark.parametrize("params", ws.VARIANTS, ids=[ws.SPEC.label(ws.SPEC.resolve(v)) for v in ws.VARIANTS])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_candidate_matches_cublas(params, shape):
    r = check(ws.SPEC, *shape, params)
    assert r.ok, r
