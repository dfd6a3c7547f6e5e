"""kernels/14_tf32.cu: C = A @ B on the tensor cores through mma.sync.m16n8k8 (chapters
"Tensor cores and TF32" and "Float32 accuracy at tensor-core speed").

Two specs of one kernel: ``tf32`` (SPLIT = 0, operands rounded to TF32: its results carry
TF32's error, not float32's) and ``tf32x3`` (SPLIT = 1, the 3xTF32 split: float32-level
results). Both need compute capability 8.0 (mma.sync with TF32 operands, cp.async): on an
older GPU every config is refused with that rule."""
from __future__ import annotations

from dataclasses import dataclass

from ...hardware import WARP_SIZE, Device
from ..rules import divides
from ..spec import KernelSpec, Param, Tiles, cdiv

MIN_CC = (8, 0)
PAD_A, PAD_B = 4, 8          # floats after each row of As and each k-row of Bs (the kernel's tc::PAD_A, PAD_B)
MMA_M, MMA_N, MMA_K = 16, 8, 8
CC_RULE = "mma.sync with TF32 operands needs compute capability 8.0 or newer (A100, RTX 30xx and later)"


@dataclass(frozen=True, eq=False)
class TensorCoreSpec(KernelSpec):
    """A kernel on the tensor cores: refused below compute capability 8.0, and with the
    accuracy its results have (``"tf32"``: TF32's; ``"fp32"``: float32's, the book's bound)."""

    precision: str = "fp32"

    def limit_problems(self, full: dict, device: Device) -> list[str]:
        if device.cc_tuple < MIN_CC:
            return [f"{CC_RULE}; {device.label} has compute capability {device.cc}"]
        return super().limit_problems(full, device)


def threads(p: dict) -> int:
    return (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * WARP_SIZE


def smem_bytes(p: dict) -> int:
    """STAGES x (As (BM, BK + 4) + Bs (BK, BN + 8)) floats, dynamic."""
    return p["STAGES"] * (p["BM"] * (p["BK"] + PAD_A) + p["BK"] * (p["BN"] + PAD_B)) * 4


def mma_tiles(p: dict) -> tuple[int, int]:
    """(MI, NI): the 16 x 8 tiles of one warp tile."""
    return p["WM"] // MMA_M, p["WN"] // MMA_N


def registers(p: dict) -> int:
    """4 accumulators per 16 x 8 tile (twice that with PROMOTE > 0: the result and the part the
    mma add into), the fragments of two k-steps (4 per A tile, 2 per B tile) and a third set of
    them with the split, and about 30 for addresses and the loop. Fitted to the offline compile
    (sm_90): 64 x 64 warp tiles need about 226 (TF32) and 254 (3xTF32 without promotion)."""
    mi, ni = mma_tiles(p)
    return (8 if p["PROMOTE"] else 4) * mi * ni + (2 + p["SPLIT"]) * (4 * mi + 2 * ni) + 30


def copies_cover(p: dict) -> str | None:
    t = threads(p)
    for name, chunks in (("A", p["BM"] * p["BK"] // 4), ("B", p["BK"] * p["BN"] // 4)):
        if chunks % t:
            return (f"{name}'s tile has {chunks} chunks of 16 bytes, not a multiple of the block's {t} threads "
                    "that copy them")
    return None


def label(p: dict) -> str:
    promote = {0: "", 1: ", promoted"}.get(p["PROMOTE"], f", promoted every {p['PROMOTE']}") if p["SPLIT"] else ""
    return f"{p['BM']}x{p['BN']}x{p['BK']} w{p['WM']}x{p['WN']} {p['STAGES']} stages{promote}"


def tiles(p: dict) -> Tiles:
    """Each lane holds 2 rows x 2 columns of every 16 x 8 tile of its warp tile."""
    mi, ni = mma_tiles(p)
    return Tiles(p["BM"], p["BN"], p["BK"], 2 * mi, 2 * ni)


def params(split: int) -> tuple[Param, ...]:
    # defaults: the fastest candidates of scripts/tensor_check.py on the H200; the 3xTF32 kernel's
    # second set of accumulators (PROMOTE) leaves room for 64 x 32 warp tiles only
    return (Param("BM", 128, (64, 128, 256), "rows of C per block"),
            Param("BN", 128, (64, 128, 256), "columns of C per block"),
            Param("BK", 32, (8, 16, 32), "k-slice per stage (a multiple of the mma's k = 8)"),
            Param("WM", 64, (16, 32, 64), "rows of C per warp (16 per mma)"),
            Param("WN", 32 if split else 64, (16, 32, 64), "columns of C per warp (8 per mma)"),
            Param("STAGES", 3, (2, 3, 4), "cp.async pipeline depth"),
            Param("SPLIT", split, (split,), "0: TF32; 1: 3xTF32 (big + small, three mma)"),
            Param("PROMOTE", split, (0, 1, 2, 4) if split else (0,),
                  "k-tiles whose mma add into a zeroed accumulator before one rounded FADD into C (0: none)"))


COMMON = dict(file="14_tf32.cu", function="sgemm_tf32", block=lambda p: (threads(p), 1, 1),
              grid=lambda p, M, N, K, device: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), 1), tiles=tiles, label=label,
              smem_bytes=smem_bytes, registers=registers, rules=(divides("WM", "BM"), divides("WN", "BN"), copies_cover),
              int32_indices=False, uses_cp_async=True, load_width=4)

# Where the defaults' shared memory (three stages of 32-deep k-slices, 105 KB) is more than a
# block may have (GPUs of compute capability 8.6 and 8.9 give a block at most 99 KB), the
# shallower pipelines in this order, the first that fits.
SHALLOWER = (dict(STAGES=2), dict(BK=16, STAGES=3), dict(BK=16, STAGES=2))


def fitting(name: str):
    """``choose`` of a tensor-core spec: its defaults where they fit the device, else the first of
    :data:`SHALLOWER` that does (the defaults again where none does: validation names the rule)."""
    def choose(M: int, N: int, K: int, device: Device) -> dict:
        spec = next(s for s in SPECS if s.name == name)
        for change in ({},) + SHALLOWER:
            p = spec.resolve(change)
            if spec.is_valid(p, device):
                return p
        return spec.defaults()
    return choose


TF32 = TensorCoreSpec(
    name="tf32", title="TF32 on tensor cores (mma.sync.m16n8k8)", chapter="tensor_cores", params=params(0),
    summary="the FFMA outer products become mma.sync.m16n8k8 on operands rounded to TF32", precision="tf32",
    choose=fitting("tf32"), **COMMON)
TF32X3 = TensorCoreSpec(
    name="tf32x3", title="3xTF32 on tensor cores (big + small, three mma)", chapter="tf32x3", params=params(1),
    summary="each operand split into two TF32 parts; three of the four products on the tensor cores",
    precision="fp32", choose=fitting("tf32x3"), **COMMON)
SPECS = [TF32, TF32X3]

# Configs the chapters compare (and the GPU tests check), the default first. TF32: a 64 x 64 warp
# tile with 4 warps, 8 warps of 64 x 64 over a 128 x 256 block, and a deeper k-slice. 3xTF32
# with promotion holds two sets of accumulators, so its warp tiles stay at 64 x 32 or 32 x 64
# (128 accumulator registers) and its blocks at 8 warps (about 230 registers each).
VARIANTS_OF = {
    "tf32": [dict(), dict(BK=16, WN=32, STAGES=4), dict(BN=256, BK=16), dict(WN=32)],
    "tf32x3": [dict(), dict(BK=16, STAGES=4), dict(WM=32, WN=64, BK=16), dict(PROMOTE=2),
               dict(BN=64, BK=16, STAGES=4), dict(PROMOTE=0)],
}
VARIANTS = VARIANTS_OF["tf32"]
TEST_CONFIGS = [(s, v) for s in SPECS for v in VARIANTS_OF[s.name][1:]] + [
    (TF32X3, dict(BM=64, BN=64, WM=32, WN=32, BK=16, STAGES=2))]
