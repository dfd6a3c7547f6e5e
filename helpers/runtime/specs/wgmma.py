"""kernels/15_wgmma.cu: C = A @ B on Hopper's warpgroup MMA (wgmma), TF32 and 3xTF32 (chapter
"Float32 accuracy at tensor-core speed", section "On Hopper: warpgroup MMA").

Two specs of one kernel: ``wgmma_tf32`` (SPLIT = 0: TF32's error) and ``wgmma_tf32x3``
(SPLIT = 1, the 3xTF32 split: float32-level results). wgmma exists only in code built for
exactly compute capability 9.0 (the target sm_90a), so every other GPU, and every emulated
target, is refused with that rule.

Each launch runs a pre-pass first (``wgmma_prepass`` of the same file, timed with the
product): the .tf32 wgmma reads both operands K-major, so B is transposed into the launch's
workspace, its rows padded with zeros to a multiple of 32; for 3xTF32 the small parts of B
are written there too, and those of A where A comes from shared memory (AREG = 0).
"""
from __future__ import annotations

import numpy as np

from ...hardware import INT32_LIMIT, MAX_GRID_YZ, Device
from ..spec import KernelSpec, Param, Tiles, cdiv
from .tensor_cores import TensorCoreSpec

TARGET = "sm_90a"
CC = (9, 0)
BK = 32                      # floats of K per stage: one 128-byte swizzled row (wg::BK)
WARPGROUP = 128              # threads
ALIGN = 1024                 # bytes: each shared tile starts on a 1024-byte boundary (the 128-byte swizzle's period)
CC_RULE = ("wgmma needs compute capability 9.0 (H100, H200): the instruction exists only in code built for "
           "exactly that GPU (sm_90a)")
PREPASS_BLOCK = (32, 8, 1)

# The compiler, handed over by helpers.runtime.launch (the specs sit below it in the layers).
COMPILE = None


class WgmmaSpec(TensorCoreSpec):
    """A wgmma kernel: refused on every GPU but compute capability 9.0 (and on emulated targets)."""

    def limit_problems(self, full: dict, device: Device) -> list[str]:
        if device.cc_tuple != CC or device.emulated:
            where = f"{device.label} has compute capability {device.cc}"
            return [f"{CC_RULE}; {where}" + (" and is emulated" if device.emulated and device.cc_tuple == CC else "")]
        return KernelSpec.limit_problems(self, full, device)


def threads(p: dict) -> int:
    return p["WGS"] * WARPGROUP


def slices(p: dict) -> int:
    """64-row slices of the block tile each warpgroup computes (one wgmma of 64 x BN each per k-step)."""
    return p["BM"] // p["WGS"] // 64


def stage_rows(p: dict) -> int:
    """Rows of 32 floats in one stage: A and Bt; with the split Bts, and As unless A is split in registers."""
    return p["BM"] + p["BN"] + p["SPLIT"] * (p["BN"] + (1 - p["AREG"]) * p["BM"])


def smem_bytes(p: dict) -> int:
    """STAGES x the stage's tiles of 32 floats a row, 1 KB for alignment."""
    return p["STAGES"] * stage_rows(p) * BK * 4 + ALIGN


def registers(p: dict) -> int:
    """BN / 2 accumulators per 64-row slice (twice that with PROMOTE > 0), a third as many again,
    about 64 for addresses, descriptors and the loop, and with AREG 8 per slice for the split
    fragments of A. Fitted to the offline compile (sm_90a): 128 x 256 TF32 with 2 warpgroups
    uses 236, 128 x 128 TF32 140, 128 x 128 3xTF32 promoted 207 (A in registers: 242)."""
    acc = (2 if p["PROMOTE"] else 1) * slices(p) * p["BN"] // 2
    return acc + acc // 3 + 64 + 8 * slices(p) * p["AREG"]


def whole_slices(p: dict) -> str | None:
    if p["BM"] % (p["WGS"] * 64):
        return f"BM={p['BM']} does not split into {p['WGS']} warpgroups of whole 64-row slices"
    return None


def label(p: dict) -> str:
    promote = {0: "", 1: ", promoted"}.get(p["PROMOTE"], f", promoted every {p['PROMOTE']}") if p["SPLIT"] else ""
    areg = ", A in registers" if p["AREG"] else ""
    return f"{p['BM']}x{p['BN']} {p['WGS']} warpgroups {p['STAGES']} stages{promote}{areg}"


def tiles(p: dict) -> Tiles:
    """A thread holds BN / 2 accumulators per slice: 2 rows x BN / 4 columns of it."""
    return Tiles(p["BM"], p["BN"], BK, 2 * slices(p), p["BN"] // 4)


def params(split: int) -> tuple[Param, ...]:
    return (Param("BM", 128, (64, 128, 256), "rows of C per block"),
            Param("BN", 128 if split else 256, (64, 128, 256), "columns of C per block: wgmma's N"),
            Param("WGS", 2, (1, 2), "warpgroups (128 threads) per block"),
            Param("STAGES", 4, (3, 4, 5, 6), "shared-memory stages"),
            Param("GROUP", 16 if split else 8, (1, 4, 8, 16), "tile-rows that consecutive blocks cover, column by column"),
            Param("SPLIT", split, (split,), "0: TF32; 1: 3xTF32 (big + small, three wgmma)"),
            Param("PROMOTE", split, (0, 1, 2, 4) if split else (0,),
                  "k-tiles whose wgmma add into a zeroed accumulator before one rounded FADD into C (0: none)"),
            Param("AREG", split, (0, 1) if split else (0,),
                  "1: A's fragments loaded into registers and split there (no As tile, no A pre-pass)"))


def ldk(K: int) -> int:
    """Floats per row of the pre-pass's operands: K rounded up to a multiple of BK."""
    return cdiv(K, BK) * BK


def parts(p: dict, M: int, N: int, K: int) -> tuple[int, int, int]:
    """Floats of Bt, As and Bts in the workspace (0: not written)."""
    return N * ldk(K), p["SPLIT"] * (1 - p["AREG"]) * M * ldk(K), p["SPLIT"] * N * ldk(K)


def workspace(p: dict, M: int, N: int, K: int, device: Device) -> tuple[int, int]:
    """(floats of Bt, As and Bts, no counters): the same on every device."""
    return sum(parts(p, M, N, K)), 0


def prepass_fits(p: dict, M: int, N: int, K: int) -> str | None:
    if cdiv(max(M, N), 32) > MAX_GRID_YZ:
        return f"the pre-pass's grid has one row of blocks per 32 rows of A or B, at most {MAX_GRID_YZ}"
    if ldk(K) >= INT32_LIMIT:
        return "K rounded up to a multiple of 32 must stay below 2^31"
    return None


def _prepass(expr: str, R: int, K: int, X, big, small, ld: int) -> None:
    if COMPILE is None:
        raise RuntimeError("the wgmma pre-pass needs helpers.runtime.launch imported (it hands over the compiler)")
    from ... import hardware, settings   # noqa: PLC0415
    from ..spec import inline_includes   # noqa: PLC0415

    kernel = COMPILE(inline_includes(settings.KERNEL_DIR / "15_wgmma.cu"), "15_wgmma.cu", expr,
                     hardware.current(), TARGET)
    kernel((ld // 32, cdiv(R, 32), 1), PREPASS_BLOCK, (np.int32(R), np.int32(K), X, big, small, np.int32(ld)))


def arguments(p, M, N, K, A, B, C, workspace=()) -> tuple:
    """Run the pre-pass into the workspace, then the kernel's arguments
    (M, N, K, A, Bt, As, Bts, C, LDK). A, B and C must be C-contiguous."""
    for name, X in (("A", A), ("B", B), ("C", C)):
        if not X.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous (row-major, no strides); use cupy.ascontiguousarray({name})")
    if not workspace:
        raise ValueError(f"wgmma {label(p)} writes B transposed into its workspace: pass launcher.workspace()")
    buf = workspace[0]
    fb, fa, _ = parts(p, M, N, K)
    ld = ldk(K)
    null = np.uint64(0)
    bt = np.uint64(buf.data.ptr)
    as_ = np.uint64(buf.data.ptr + 4 * fb) if fa else null
    bts = np.uint64(buf.data.ptr + 4 * (fb + fa)) if p["SPLIT"] else null
    _prepass(f"wg::wgmma_prepass<1, 1, {p['SPLIT']}>", N, K, B, bt, bts, ld)
    if p["SPLIT"] and not p["AREG"]:
        _prepass("wg::wgmma_prepass<0, 0, 1>", M, K, A, null, as_, ld)
    return (np.int32(M), np.int32(N), np.int32(K), A, bt, as_, bts, C, np.int32(ld))


COMMON = dict(file="15_wgmma.cu", function="sgemm_wgmma", block=lambda p: (threads(p), 1, 1),
              grid=lambda p, M, N, K, device: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), 1), tiles=tiles, label=label,
              smem_bytes=smem_bytes, registers=registers, rules=(whole_slices,), shape_rules=(prepass_fits,),
              int32_indices=False, uses_cp_async=True, load_width=4, workspace=workspace, args=arguments,
              target=TARGET)

WGMMA_TF32 = WgmmaSpec(
    name="wgmma_tf32", title="TF32 on Hopper's warpgroup MMA (wgmma)", chapter="tf32x3", params=params(0),
    summary="a warpgroup's wgmma reads A and B from swizzled shared memory; B transposed by a pre-pass",
    precision="tf32", **COMMON)
WGMMA_TF32X3 = WgmmaSpec(
    name="wgmma_tf32x3", title="3xTF32 on Hopper's warpgroup MMA (wgmma)", chapter="tf32x3", params=params(1),
    summary="three wgmma per k-step on the big and small parts the pre-pass writes",
    precision="fp32", **COMMON)
SPECS = [WGMMA_TF32, WGMMA_TF32X3]

VARIANTS_OF = {
    "wgmma_tf32": [dict(), dict(BN=128), dict(STAGES=3), dict(BM=256, BN=128)],
    "wgmma_tf32x3": [dict(), dict(PROMOTE=2), dict(PROMOTE=4), dict(AREG=0, STAGES=3), dict(AREG=0, STAGES=3, PROMOTE=2),
                     dict(AREG=0, BN=64), dict(AREG=0, BM=64, WGS=1)],
}
TEST_CONFIGS = [(s, v) for s in SPECS for v in VARIANTS_OF[s.name][1:]]
