"""kernels/12_final.cu: warp tiles fed by a multi-stage cp.async pipeline (chapter "The final kernel").

The spec, and :func:`choose_config`: which config an M x N x K product gets on a device.
"""
import dataclasses
import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...hardware import INT32_LIMIT, MAX_GRID_YZ, Device, occupancy
from .. import pack, reduce
from ..layout import leading_dimension
from ..rules import divides, warp_fragments, warp_lanes, warp_threads, warp_tile_label, warp_tile_registers
from ..spec import ConfigError, KernelSpec, Param, Tiles, cdiv

NULL = np.uint64(0)      # a null pointer argument
TILE_SIDES = (32, 64, 96, 128, 256)   # 96: an M or N of 65-96 (161-192, ...) fills fewer rows than with 64 or 128
WARP_SIDES = (16, 32, 48, 64, 96, 128)   # 48, 96: 4 or 8 lanes of 12 rows (columns) each; 16: 4 lanes of 4
PAD = 4          # floats of padding per k-row of a shared tile that is stored transposed
LAYOUTS = {"NN": (0, 0), "NT": (0, 1), "TN": (1, 0), "TT": (1, 1)}   # name -> (A_T, B_T)
MIN_K_TILES = 4  # a stream-K block keeps at least this many k-tiles (a split of K: at least one)
SPLITS = (2, 3, 4, 6, 8, 12, 16)   # the splits of K a config may have and the choice considers (besides none)
SLAB_SPLITS = (4, 8, 16, 32, 64)   # the splits whose parts a second kernel may add (REDUCE=1)
SLAB_BYTES = 256 * 2**20           # the most workspace the choice gives those parts (SPLITK x M x N floats)
SEGMENT_BYTES = 7 * 4   # static shared memory: fin::Segment, stream-K's segment through the main loop
BOUND_BLOCKS = 4 # blocks per SM the launch bound asks for where it applies (bounded)
MAX_PARTS = 32   # stream-K blocks per shared tile at most: the block that finishes a tile adds
                 # the parts one after another (measured by scripts/final_experiments.py)


def along_k(p, operand: str) -> bool:
    """Whether the operand's rows run along K in memory (A row-major, B transposed): its
    copies are 4 bytes wide and transpose on the way."""
    return p["A_T"] == 0 if operand == "A" else p["B_T"] == 1


def smem_bytes(p) -> int:
    """STAGES x (A tile + B tile), k-major, float32, dynamic; a transposed copy pads each k-row by 4
    (kernels/12_final.cu, Config::STAGE; tests/test_final_rules.py checks that both agree)."""
    a = p["BM"] + (PAD if along_k(p, "A") else 0)
    b = p["BN"] + (PAD if along_k(p, "B") else 0)
    return p["STAGES"] * p["BK"] * (a + b) * 4


def threads_per_row(threads: int, bk: int, along: bool, wide: bool = False) -> int:
    """Threads that share a row (along K) or a k-row of an operand's copies (kernels/12_final.cu,
    TileCopy::TPR): 8 along K (16 where the copies are ``wide``); otherwise max(8, threads / BK),
    as 8 threads' 16-byte stores fill the 32 banks once."""
    return (16 if wide else 8) if along else max(8, threads // bk)


def wide_a(p) -> bool:
    """Whether a row-major A is copied 16 threads to a row, 2 rows x 16 k per warp, swizzled
    (kernels/12_final.cu, Config::WIDE_A): 128 results per thread, no stream-K, k-slices of a
    multiple of 16, and a block whose threads, 16 to a row, cover a multiple of 4 rows per pass
    and BM in whole passes. tests/test_final_rules.py checks that both rules agree."""
    t = warp_threads(p)
    return (p["A_T"] == 0 and p["BK"] % 16 == 0 and p["TM"] * p["TN"] >= 128 and not p["STREAMK"]
            and t % 64 == 0 and p["BM"] % (t // 16) == 0)


def copy_problem(op: str, side: str, rows: int, threads: int, bk: int, along: bool) -> str | None:
    """Why ``threads`` threads cannot copy operand ``op``'s tile of ``rows`` (``side``) x BK evenly
    (None: they can); the static_asserts of kernels/12_final.cu, TileCopy, refuse the same tiles
    (tests/test_final_rules.py)."""
    per_row = threads_per_row(threads, bk, along)
    if along:
        if threads % 8 or rows % (threads // 8):
            return (f"{op}'s 4-byte copies: {threads} threads cover {threads // 8} rows per pass, which must divide "
                    f"{side}={rows}")
    elif (rows // 4) % per_row or bk % (threads // per_row):
        return (f"{op}'s 16-byte copies: {per_row} threads per k-row must divide its {rows // 4} float4, "
                f"and {threads} threads cover BK={bk} k-rows exactly")
    return None


def copies(p):
    """Both operands' copies must split evenly over the block's threads."""
    t = warp_threads(p)
    return next((why for op, side in (("A", "BM"), ("B", "BN"))
                 if (why := copy_problem(op, side, p[side], t, p["BK"], along_k(p, op)))), None)


def unroll(p):
    if p["KU"] and (p["KU"] >= p["BK"] or p["BK"] % p["KU"]):
        return f"KU={p['KU']} must divide BK={p['BK']} and be smaller (KU=0 unrolls the whole k-slice)"
    return None


def packed_layout(p):
    """A packed operand is read in the layout packing writes: A transposed, B row-major."""
    if p["PACK_A"] and not p["A_T"]:
        return "PACK_A=1 copies op(A) k-major first, so the kernel reads it as a transposed view: set A_T=1"
    if p["PACK_B"] and p["B_T"]:
        return "PACK_B=1 copies op(B) k-major first, so the kernel reads it row-major: set B_T=0"
    return None


def stream_k_alone(p):
    if p["STREAMK"] and p["SPLITK"] > 1:
        return "stream-K shares k-tiles between blocks already: SPLITK must be 1 with STREAMK=1"
    return None


def slabs_need_splits(p):
    if p["REDUCE"] and (p["SPLITK"] == 1 or p["STREAMK"]):
        return "REDUCE=1 adds the parts of a split of K in a second kernel: it needs SPLITK > 1 and STREAMK=0"
    return None


def registers_fit(p):
    """128 accumulators per thread leave few registers. On 128-thread blocks that copy both
    operands 4 bytes at a time (NT: 8 + 8 rows per thread) the kernel is refused: the
    dispatcher has no measured factor for it. Stream-K
    and split-K fit everywhere since the block that adds the parts reads half the thread tile at
    a time: offline (sm_90, NVRTC 13.0 as requirements-cuda13.txt pins it) every 128-result tile
    of the candidates compiles without spills in every layout and stage count
    (tests/test_sass.py); other compiler versions may allocate otherwise, and a spill costs
    speed, never a wrong result."""
    if p["TM"] * p["TN"] < 128:
        return None
    if warp_threads(p) == 128 and along_k(p, "A") and along_k(p, "B"):
        return ("128 results per thread on 128-thread blocks copying both A and B 4 bytes at a time "
                "(A row-major, B transposed) are not calibrated; use 256 threads or smaller thread tiles")
    return None


def bounded(p) -> bool:
    """Whether __launch_bounds__ asks for BOUND_BLOCKS blocks per SM (kernels/12_final.cu,
    fin::min_blocks): 64 results per thread on 128 threads, B row-major, no shared tiles, and,
    with A row-major, k-slices of 16 or more and a number of stages other than 3: where ptxas fits
    the tile in that budget without spilling (tests/test_sass.py). tests/test_final_rules.py checks
    that both rules agree."""
    plain = p["SPLITK"] == 1 and not p["STREAMK"] and p["B_T"] == 0
    fits = p["A_T"] == 1 or (p["BK"] >= 16 and p["STAGES"] != 3)
    return p["TM"] * p["TN"] == 64 and warp_threads(p) == 128 and plain and fits


def min_blocks(p) -> int:
    return BOUND_BLOCKS if bounded(p) else 1


def tiles_of(p, M, N) -> int:
    """Output tiles of the grid (split-K and stream-K blocks share some)."""
    return cdiv(M, p["BM"]) * cdiv(N, p["BN"])


def blocks_per_sm(params: dict, device: Device) -> int:
    """Resident blocks per SM, from the registers (the estimate, or the launch bound's budget)
    and the shared memory."""
    smem = SPEC.smem_bytes(params) + SPEC.static_smem(params)
    return occupancy(SPEC.threads(params), SPEC.registers_on(params, device), smem, device).blocks_per_sm


def stream_k_grid(p, M, N, K, device: Device, max_parts: int = MAX_PARTS) -> tuple[int, int]:
    """(g, w): g stream-K blocks, one per resident slot, share the k-tiles of the first
    T - g w tiles (between one and two slots' worth), and w full waves of one tile per
    block follow (T: output tiles). Each stream-K block gets at least MIN_K_TILES k-tiles,
    and at most ``max_parts`` blocks share a tile, so that few blocks share a tile when the
    tiles are few."""
    tiles, slots = tiles_of(p, M, N), device.sm_count * max(1, blocks_per_sm(p, device))
    waves = max(0, tiles // slots - 1)
    shared = tiles - waves * slots
    return max(1, min(slots, shared * cdiv(K, p["BK"]) // MIN_K_TILES, shared * max_parts)), waves


def stream_k_fits(p, M, N, K, device: Device, max_parts: int = MAX_PARTS) -> bool:
    """Stream-K numbers the shared k-tiles with 32-bit ints: k-tiles x blocks < 2^31."""
    g, waves = stream_k_grid(p, M, N, K, device, max_parts)
    return (tiles_of(p, M, N) - g * waves) * cdiv(K, p["BK"]) * g < INT32_LIMIT


def packed_floats(p, M, N, K) -> tuple[int, int]:
    """Floats of the packed copies of A and B (0 where not packed), each rounded up to 256 bytes
    so that what follows stays aligned."""
    return (cdiv(pack.floats(M, K), 64) * 64 if p["PACK_A"] else 0,
            cdiv(pack.floats(N, K), 64) * 64 if p["PACK_B"] else 0)


def plan(p, M, N, K, device: Device, batch: int = 1, max_parts: int = MAX_PARTS
         ) -> tuple[tuple[int, int, int], tuple[int, int]]:
    """(grid, (floats of the workspace, arrival counters)) of one launch on ``device``, of one
    product or (``batch`` > 1, kernels/12_final.cu, sgemm_final_batched) of ``batch`` products
    at once. The workspace holds the packed operands, then the partial tiles (each product its
    own); stream-K shares at most ``max_parts`` blocks per tile."""
    tiles, tile_floats, packed = tiles_of(p, M, N), p["BM"] * p["BN"], sum(packed_floats(p, M, N, K))
    if batch > 1:
        why = batch_problem(p)
        if why:
            raise ConfigError(f"final {label(p)}: {why}")
    if p["STREAMK"]:
        if not stream_k_fits(p, M, N, K, device, max_parts):
            raise ConfigError(f"final {label(p)} on {M}x{N}x{K}: stream-K numbers the shared k-tiles with 32-bit "
                              "ints, and k-tiles x blocks reaches 2^31 here; use STREAMK=0 (with SPLITK for a long K)")
        g, waves = stream_k_grid(p, M, N, K, device, max_parts)
        return (g, 1 + waves, 1), (packed + 2 * g * tile_floats, tiles - g * waves)
    if tiles * p["SPLITK"] * batch >= INT32_LIMIT:
        raise ConfigError(f"final {label(p)} on {M}x{N}x{K}: {tiles * p['SPLITK'] * batch:,} tiles x splits; "
                          "the kernel numbers them with 32-bit ints (below 2^31): choose bigger tiles")
    if p["SPLITK"] * batch > MAX_GRID_YZ:
        raise ConfigError(f"final {label(p)}: {batch} products x SPLITK={p['SPLITK']} exceed the grid's "
                          f"{MAX_GRID_YZ} blocks along z: launch fewer products at a time")
    # the blocks number their tile blockIdx.y * gridDim.x + blockIdx.x: past the grid's limit in y,
    # every tile goes along x
    rows = cdiv(M, p["BM"])
    grid = (cdiv(N, p["BN"]), rows, p["SPLITK"] * batch) if rows <= MAX_GRID_YZ else (tiles, 1, p["SPLITK"] * batch)
    if p["REDUCE"]:                                  # a slab of M x N (rows padded) per split, no counters
        return grid, (packed + p["SPLITK"] * M * reduce.pitch(N), 0)
    if p["SPLITK"] == 1:
        return grid, (packed, 0)
    return grid, (packed + batch * tiles * p["SPLITK"] * tile_floats, batch * tiles)


def batch_problem(p) -> str | None:
    """Why config ``p`` cannot compute a batch of products in one launch (None: it can)."""
    if p["STREAMK"] or p["REDUCE"]:
        return "a batch runs plain or split-K blocks (STREAMK=0, REDUCE=0)"
    if p["PACK_A"] or p["PACK_B"]:
        return "a batch reads its operands as they lie (PACK_A=0, PACK_B=0)"
    return None


def batched_expression(p) -> str:
    """The instantiation of the batched kernel for config ``p`` (kernels/12_final.cu)."""
    return SPEC.function + "_batched" + SPEC.name_expression(p)[len(SPEC.function):]


def grid(p, M, N, K, device: Device) -> tuple[int, int, int]:
    """The grid of one launch on ``device`` (stream-K: one block per resident slot)."""
    return plan(p, M, N, K, device)[0]


def workspace(p, M, N, K, device: Device) -> tuple[int, int]:
    """(floats of packed operands and partial tiles, arrival counters) one launch on ``device``
    needs; (0, 0) when nothing is packed and no tile is shared."""
    return plan(p, M, N, K, device)[1]


def arguments(p, M, N, K, A, B, C, workspace=(), alpha: float = 1.0, beta: float = 0.0) -> tuple:
    """The kernel's arguments: leading dimensions from the operands' strides, which must
    match the config's layouts (A_T, B_T; C row-major). A packed operand (PACK_A, PACK_B)
    may come in any layout: it is copied into the workspace first (a kernel launch), and the
    kernel reads the copy."""
    ws = tuple(workspace)
    if p["PACK_A"] or p["PACK_B"]:
        if not ws:
            raise ValueError(f"final {label(p)} packs an operand into its workspace: pass launcher.workspace()")
        buf, counters = ws
        fa, fb = packed_floats(p, M, N, K)
        # the packed copies are passed as pointers into the workspace (no views: host time counts)
        if p["PACK_A"]:
            lda, A = pack.pack(A, "A", buf), np.uint64(buf.data.ptr)
        if p["PACK_B"]:
            ldb, B = pack.pack(B, "B", buf, fa), np.uint64(buf.data.ptr + 4 * fa)
        ws = (np.uint64(buf.data.ptr + 4 * (fa + fb)) if buf.size > fa + fb else NULL, counters)
    if not p["PACK_A"]:
        lda = leading_dimension(A, "A", bool(p["A_T"]))
    if not p["PACK_B"]:
        ldb = leading_dimension(B, "B", bool(p["B_T"]))
    ldc = leading_dimension(C, "C", False)
    ws = ws or (NULL, NULL)
    return (np.int32(M), np.int32(N), np.int32(K), np.float32(alpha), A, np.int32(lda), B, np.int32(ldb),
            np.float32(beta), C, np.int32(ldc)) + ws


def after(p, M, N, K, args) -> None:
    """REDUCE=1: add the slabs the splits stored into C (kernels/12_reduce.cu), alpha and beta
    from the kernel's own arguments."""
    if p["REDUCE"]:
        alpha, beta, C, ldc, slabs = args[3], args[8], args[9], args[10], args[11]
        reduce.add_parts(M, N, p["SPLITK"], alpha, slabs, beta, C, ldc)


def layout_name(p) -> str:
    return next(k for k, v in LAYOUTS.items() if v == (p["A_T"], p["B_T"]))


def label(p) -> str:
    out = f"{warp_tile_label(p)} s{p['STAGES']}"
    if p["KU"]:
        out += f" u{p['KU']}"
    if p["SPLITK"] > 1:
        out += f" k/{p['SPLITK']}" + (" sum" if p.get("REDUCE") else "")
    if p["STREAMK"]:
        out += " sk"
    if p["GROUP"]:
        out += f" g{p['GROUP']}"
    if p["A_T"] or p["B_T"]:
        out += f" {layout_name(p)}"
    if p["PACK_A"] or p["PACK_B"]:
        out += " pack" + "A" * p["PACK_A"] + "B" * p["PACK_B"]
    if p.get("EDGES"):
        out += " edges"
    return out


SPEC = KernelSpec(
    name="final",
    file="12_final.cu",
    function="sgemm_final",
    title="Final: warp tiles + cp.async pipeline",
    chapter="final",
    params=(
        Param("BM", 128, TILE_SIDES, "rows of C per block"),
        Param("BN", 256, TILE_SIDES, "columns of C per block"),
        Param("BK", 32, (8, 16, 32), "k-slice per pipeline stage"),
        Param("WM", 64, WARP_SIDES, "rows of C per warp"),
        Param("WN", 64, WARP_SIDES, "columns of C per warp"),
        Param("TM", 16, (4, 8, 12, 16), "rows of C per thread (4x4 sub-tiles)"),
        Param("TN", 8, (4, 8, 12, 16), "columns of C per thread (4x4 sub-tiles)"),
        Param("STAGES", 2, (2, 3, 4, 5), "shared-memory stages in the cp.async pipeline"),
        Param("SPLITK", 1, tuple(sorted({1, *SPLITS, *SLAB_SPLITS})),
              "blocks along K; the last to finish adds them in a fixed order (or, REDUCE=1, a second kernel)"),
        Param("GROUP", 8, (0, 4, 8, 16), "block-rows per rasterisation group (0: row by row)"),
        Param("KU", 0, (0, 2, 4, 8, 16), "k-steps per trip of the inner loop (0: the whole k-slice unrolled)"),
        Param("STREAMK", 0, (0, 1), "stream-K: one block per resident slot shares the last tiles' k-tiles"),
        Param("A_T", 0, (0, 1), "A is a transposed view (op(A)(m, k) = A[k * lda + m])"),
        Param("B_T", 0, (0, 1), "B is a transposed view (op(B)(k, n) = B[n * ldb + k])"),
        Param("PACK_A", 0, (0, 1), "copy op(A) k-major with aligned rows first (kernels/12_pack.cu); then A_T=1",
              template=False),
        Param("PACK_B", 0, (0, 1), "copy op(B) k-major with aligned rows first (kernels/12_pack.cu); then B_T=0",
              template=False),
        Param("REDUCE", 0, (0, 1), "1: each split of K stores its part whole, a second kernel adds them "
              "(kernels/12_reduce.cu)"),
        Param("EDGES", 0, (0, 1), "1: tiles over C's last row or column move back to end at M or N, whole "
              "tiles that store only their own part (0: the guarded edge path)"),
    ),
    block=lambda p: (warp_threads(p), 1, 1),
    grid=grid,
    tiles=lambda p: Tiles(p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]),
    smem_bytes=smem_bytes,
    static_smem=lambda p: SEGMENT_BYTES,
    workspace=workspace,
    args=arguments,
    plan=plan,
    registers=warp_tile_registers(lambda p: 0),      # cp.async: nothing staged in registers
    min_blocks=min_blocks,
    fits_budget=bounded,
    fragments=warp_fragments,
    rules=(divides("WM", "BM"), divides("WN", "BN"), warp_lanes, copies, unroll, stream_k_alone, slabs_need_splits,
           registers_fit, packed_layout),
    uses_cp_async=True,
    int32_indices=False,                             # 64-bit offsets: operands of 2^31 elements or more
    also_runs=(pack.FILE, reduce.FILE),
    # the packing kernel where an operand is packed, the adding of slabs where there are slabs
    also_runs_for=lambda p: ((pack.FILE,) if p.get("PACK_A") or p.get("PACK_B") else ())
                            + ((reduce.FILE,) if p.get("REDUCE") else ()),
    after=after,
    choose=lambda M, N, K, device: choose_config(M, N, K, device),
    label=label,
    summary=("any layout of A and B, alpha and beta; warp tiles fed by a multi-stage cp.async pipeline; "
             "grouped rasterisation; split-K and stream-K"),
)
SPECS = [SPEC]

D = SPEC.defaults()
TEST_CONFIGS = [(SPEC, c) for c in (
    dict(D, BM=128, BN=128, WM=64, WN=64, TM=16, TN=8, BK=8, STAGES=4),            # 128 threads
    dict(D, BM=128, BN=256, WM=64, WN=64, TM=8, TN=16, BK=16, STAGES=3, GROUP=0),  # 8 x 16 thread tile
    dict(D, BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=2),              # small tile, 4 warps
    dict(D, BM=128, BN=128, WM=64, WN=32, TM=8, TN=8, BK=8, SPLITK=3, STAGES=4),   # split-K, 8 warps
    dict(D, BM=128, BN=128, WM=64, WN=64, TM=16, TN=8, SPLITK=8, BK=32, STAGES=2),
    dict(D, BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, SPLITK=8, REDUCE=1),  # slabs, a second kernel
    dict(D, BM=64, BN=128, WM=64, WN=32, TM=8, TN=8, BK=16, STAGES=4, SPLITK=2),   # one row of 4 warps, split-K
    dict(D, BM=64, BN=32, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, SPLITK=3),    # 2 warps, 64 threads, split-K
    dict(D, BM=64, BN=128, WM=64, WN=32, TM=8, TN=8, BK=16, STAGES=4, EDGES=1),    # tiles over an edge moved back
    dict(D, BM=128, BN=128, WM=64, WN=64, TM=16, TN=8, BK=16, STAGES=4, KU=2, STREAMK=1),  # stream-K, 128 results
    dict(D, BM=64, BN=32, WM=16, WN=32, TM=4, TN=4, BK=16, STAGES=3, SPLITK=3),    # 4 warps of 16 x 32, 4 x 4 each
)]


# ---------------------------------------------------------------- choosing a config
# The time of a config on a shape, from these facts (the chapter "The final kernel"
# explains them):
#   waves: a grid of tiles x SPLITK blocks runs SMs x blocks-per-SM at a time (blocks
#     per SM from the occupancy rules, with the register estimate), so its time is a
#     whole number of waves, the last one possibly half empty; stream-K spreads the k-tiles
#     of the last tiles evenly over one block per slot instead;
#   per-block work: a block computes BM x BN x BK multiply-adds per k-tile at the rate its
#     config sustains on a full SM (a candidate's efficiency, a fraction of the FP32 peak,
#     times its factors for stream-K, for tiles over an edge of C, for the layout, and for
#     rows that are not 16-byte aligned, which are copied 4 bytes at a time), plus the cost
#     of filling and draining its pipeline, counted in k-tiles;
#   company on an SM: blocks of a last wave that leaves SMs part empty run faster;
#   shared tiles: split-K and stream-K write partial tiles and re-read them once, and pay a
#     fixed cost per launch (the workspace and its counters); slabs a second kernel;
#   memory: no launch is faster than moving A, B and C once through device memory;
#   launch: every launch, and every packed operand, costs a fixed time.
# The numbers are data (DISPATCH_FILE, below): fitted to tables that scripts/tune_final.py
# measures on a GPU, by `python -m helpers refit`.

@dataclass(frozen=True)
class Candidate:
    name: str
    params: dict         # block and thread tiles, stages, inner loop; the rest is chosen per shape
    efficiency: float    # FP32 peak fraction one SM sustains when full of these blocks (NN)
    unaligned: float = 1.0   # its factor when B is read along N and its rows are not 16-byte aligned
    layouts: tuple = ()      # (layout name, factor against NN) as the kernel reads A and B
    unaligned_a: float = 1.0 # the same when A is read along M (a transposed view)
    stream_k: float | None = None  # its factor with stream-K, fitted on measurements (the segment bookkeeping
                                   # and shared tiles cost the main loop); None: not measured, not offered
    edge: float = 1.0        # its factor on tiles that cross an edge of C (guarded copies; fewer results stored)

    def efficiency_on(self, p: dict, M: int, N: int, K: int = 0, device: Device | None = None) -> float:
        """The efficiency of config ``p`` on contiguous operands of M x N x K. Two factors, both
        measured on squares where every tile lies wholly inside C and the waves are full, and
        both about the copies' fast path, which only whole tiles take (a tile over an edge
        copies with guards in any layout): so each counts in proportion to the tiles that are
        whole, as a power; with stream-K (given K and the device), only to the tiles of its
        full waves (on shapes whose tiles stream-K shares all, the layout measured no gain).
        - its stream-K factor, when the config has stream-K;
        - its edge factor, as a power of the share of tiles that cross an edge of C;
        - its layout's factor (how the kernel reads A and B);
        - the unaligned factors: an operand that is copied 16 bytes at a time (B row-major:
          rows of N floats; A transposed: rows of M) moves 4 bytes at a time when its rows
          are not a multiple of 4 floats (unless it is packed: its copy has aligned rows).
          B then takes a fast path of lane-consecutive copies (``unaligned``), A the guarded
          copies of an edge tile in every tile (``unaligned_a``)."""
        whole = (M // p["BM"]) * (N // p["BN"]) / tiles_of(p, M, N)
        if p["STREAMK"] and device is not None:
            g, waves = stream_k_grid(p, M, N, K, device)
            whole *= g * waves / tiles_of(p, M, N)
        def off(n, op):                 # op's rows run along n floats, unpacked, not a multiple of 4
            return n % 4 and not along_k(p, op) and not p[f"PACK_{op}"]

        unaligned = (self.unaligned if off(N, "B") else 1.0) * (self.unaligned_a if off(M, "A") else 1.0)
        stream_k = (self.stream_k or 1.0) if p["STREAMK"] else 1.0
        edge = self.edge ** (1 - (M // p["BM"]) * (N // p["BN"]) / tiles_of(p, M, N))
        return self.efficiency * stream_k * edge * dict(self.layouts).get(layout_name(p), 1.0) ** whole * unaligned


@dataclass(frozen=True)
class Constants:
    pipeline_tiles: float    # filling and draining a block's pipeline, in k-tiles
    shared_us: float         # cost of a launch whose blocks share tiles, microseconds per doubling of the parts
                             # of a tile: 2 parts cost it once, 8 parts three times
    reduce_gbs: float        # GB/s at which the last block of a shared tile reads the parts
    slab_us: float = 10.0    # fixed cost of adding slabs in a second kernel (REDUCE=1), microseconds
    slab_speed: float = 0.33 # fraction of the memory bandwidth at which the slabs are written and read
    layout: tuple = ()       # (layout name, factor against NN) for every candidate; missing: 1
    pack_us: float = 17.0    # fixed cost of packing one operand (launching it from Python), microseconds
    pack_speed: float = 0.69 # fraction of the memory bandwidth the packing kernel sustains
    alone: float = 1.0       # an SM running k of the blocks it could hold sustains (k / per SM) ** alone of its
                             # full rate: 1, each block's rate whatever its company; 0, the SM's rate whatever its load
    full_warps: float = 0.0  # but a block of w warps runs a k-tile no faster than w / full_warps of its SM's FP32
                             # peak, however few blocks share the SM: a few warps cannot issue for all four
                             # schedulers (0: no limit). A floor of its own, not scaled by the efficiency
    launch_us: float = 0.0   # fixed cost of every launch, microseconds
    exposed: float = 1.0     # share of the partial tiles' traffic not hidden under other blocks' compute
                             # (slabs: their writes; the second kernel's reads are all exposed)
    fill_hidden: float = 0.0 # how far the other blocks on an SM hide a block's pipeline fill: a fill costs
                             # pipeline_tiles / per_sm ** fill_hidden (0: the same whatever the company; 1: a
                             # block alone on its SM pays it all, one of four a quarter)

    def layout_factor(self, p: dict) -> float:
        return dict(self.layout).get(layout_name(p), 1.0)


D = SPEC.defaults()
# The candidates: a block tile with its stages and inner loop; the choice adds the rest per shape
# (a split of K, stream-K, packing). Their numbers (the fields of Candidate) and the model's
# constants are data, in DISPATCH_FILE: written by `python -m helpers refit` from the measured
# tables it names there (helpers/measure/dispatch_fit.py says how each number is obtained).
TILES = {
    # 128 x 256, 8 warps of 64 x 64 (16 x 8 per thread), k-slices of 32 in three stages
    "large": dict(D, STAGES=3, KU=4),
    # 64 x 256, 4 warps of 64 x 64 (8 x 16 per thread), k-slices of 16 in five stages, 2 k-steps
    # per trip: the warp tile of "large" in half the block, two blocks per SM
    "flat": dict(D, BM=64, BN=256, BK=16, TM=8, TN=16, STAGES=5, KU=2),
    # 128 x 256: flat's warps, eight to a block, one block per SM
    "big": dict(D, BK=16, TM=8, TN=16, STAGES=5, KU=2),
    # 128 x 128, 4 warps of 64 x 64: two blocks per SM, half the grain; 2 k-steps per trip
    "medium": dict(D, BN=128, BK=16, STAGES=4, KU=2),
    # 128 x 64, 4 warps of 64 x 32 (8 x 8 per thread); plain blocks four per SM (the launch bound)
    "narrow": dict(D, BN=64, WN=32, TM=8, TN=8, BK=16, STAGES=4),
    # 64 x 128, 4 warps of 64 x 32 side by side (8 x 8 per thread): few rows
    "wide": dict(D, BM=64, BN=128, WM=64, WN=32, TM=8, TN=8, BK=16, STAGES=4),
    # 64 x 64, 4 warps of 32 x 32 (4 x 8 per thread): many small blocks
    "small": dict(D, BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3),
    # 64 x 32, 2 warps of 32 x 32: for the smallest products, which leave SMs idle with 64 x 64 blocks
    "tiny": dict(D, BM=64, BN=32, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3),
    # 32 x 32, 2 warps of 16 x 32 (4 x 4 per thread): for products so small that a lone block's
    # chain of multiply-adds is the time (256 FFMAs in a row per k-tile, against tiny's 512)
    "micro": dict(D, BM=32, BN=32, WM=16, WN=32, TM=4, TN=4, BK=16, STAGES=3),
    # narrow in two stages: with few k-tiles per block (short K), a shallow pipeline fills sooner
    "narrow2": dict(D, BN=64, WN=32, TM=8, TN=8, BK=16, STAGES=2),
    # Blocks of 96 rows or columns, four warps, 12 rows (columns) per thread: where M (or N) is
    # 65-96, the 64- and 128-row tiles compute 128 rows and a 96-row tile 96 (161-192: 256 against 192).
    # 96 x 128: one warp of 96 x 32 per column of 32, 12 x 8 per thread
    "96x128": dict(D, BM=96, BN=128, WM=96, WN=32, TM=12, TN=8, BK=16, STAGES=4, KU=0),
    # 96 x 64: 2 x 2 warps of 48 x 32, 12 x 4 per thread
    "96x64": dict(D, BM=96, BN=64, WM=48, WN=32, TM=12, TN=4, BK=16, STAGES=4, KU=0),
    # 128 x 96: one warp of 32 x 96 per row of 32, 8 x 12 per thread
    "128x96": dict(D, BM=128, BN=96, WM=32, WN=96, TM=8, TN=12, BK=16, STAGES=4, KU=0),
    # 64 x 96: 2 x 2 warps of 32 x 48, 4 x 12 per thread
    "64x96": dict(D, BM=64, BN=96, WM=32, WN=48, TM=4, TN=12, BK=16, STAGES=4, KU=0),
}
DISPATCH_FILE = Path(__file__).with_name("final_dispatch.json")


def numbers(doc: dict) -> tuple[tuple[Candidate, ...], Constants]:
    """The candidates (TILES with their numbers) and the constants of a dispatch file's content."""
    def candidate(name, n):
        return Candidate(name, TILES[name], **dict(n, layouts=tuple(n["layouts"].items())))

    constants = doc["constants"]
    return (tuple(candidate(name, doc["candidates"][name]) for name in TILES),
            Constants(**dict(constants, layout=tuple(constants["layout"].items()))))


CANDIDATES, CONSTANTS = numbers(json.loads(DISPATCH_FILE.read_text()))


@dataclass(frozen=True)
class Terms:
    """What a config's time on a shape is made of, before the constants come in."""

    k_tiles: float       # k-tiles one slot works through, one after another (the critical path)
    fills: float         # pipeline fills along that path
    tile_ms: float       # one k-tile of one block when its slot's share of the FP32 peak is all used
    traffic_ms: float    # writing and re-reading the partial tiles at the memory's bandwidth
    reduce_bytes: float  # partial tiles the last block of a tile reads, one after another
    shared: bool         # tiles are shared (split-K, stream-K)
    memory_ms: float     # A, B and C once through device memory
    waves: int
    busy: float          # fraction of the last wave's slots that have a block
    packs: int = 0       # operands packed first
    pack_ms: float = 0.0 # reading and writing them once at the memory's bandwidth
    slabs: bool = False  # the parts are slabs a second kernel adds (traffic_ms: writing and reading them)
    last_k_tiles: float = 0.0  # k-tiles of the critical path in the last wave, which may leave SMs part empty
    last_share: float = 1.0    # blocks per SM in the last wave over blocks per SM it could hold
    parts: int = 0             # blocks that share a tile (the most of any tile), 0: none shared
    sm_warps: int = 0          # warps of an SM full of these blocks
    per_sm: int = 1            # blocks an SM holds


@dataclass(frozen=True)
class Estimate:
    params: dict
    ms: float
    waves: int
    last_wave_busy: float


def terms(p: dict, M: int, N: int, K: int, device: Device, batch: int = 1) -> Terms | None:
    """The model's terms for one config on one shape and device (None: no block fits an SM);
    ``batch`` products of that shape in one launch are ``batch`` times the tiles."""
    per_sm = blocks_per_sm(p, device)
    if per_sm == 0:
        return None
    slots, tiles, k_tiles = device.sm_count * per_sm, tiles_of(p, M, N) * batch, cdiv(K, p["BK"])
    tile_ms = 2 * p["BM"] * p["BN"] * p["BK"] / (device.fp32_tflops * 1e12 / slots) * 1e3
    tile_bytes = p["BM"] * p["BN"] * 4
    last_k_tiles, last_share = 0.0, 1.0              # stream-K: every slot has a block to the end
    if p["STREAMK"]:
        g, waves = stream_k_grid(p, M, N, K, device)
        sk_tiles = tiles - g * waves
        per_block = sk_tiles * k_tiles / g
        path, fills = per_block + waves * k_tiles, 1 + per_block / k_tiles + waves
        partials, parts, blocks, waves = min(2 * g, g + sk_tiles), cdiv(g, sk_tiles) + 1, g + g * waves, waves + 1
    else:
        s = p["SPLITK"]
        blocks = tiles * s
        waves = cdiv(blocks, slots)
        path, fills = waves * cdiv(k_tiles, s), waves
        partials, parts = (blocks, s) if s > 1 and not p["REDUCE"] else (0, 0)
        # the last wave's blocks spread over the SMs first: an SM may hold fewer than it could
        last = blocks - (waves - 1) * slots
        last_k_tiles, last_share = cdiv(k_tiles, s), min(per_sm, cdiv(last, device.sm_count)) / per_sm
    fills *= (p["STAGES"] - 1) / 2          # a fill issues STAGES - 1 k-tiles (the fit's unit: 3 stages)
    # every partial tile is written and read once; the last block of a tile reads its parts
    bandwidth = device.bandwidth_gbs * 1e9
    memory_ms = 4 * (M * K + K * N + M * N) * batch / bandwidth * 1e3
    packed = [R for R, op in ((M, "A"), (N, "B")) if p[f"PACK_{op}"]]
    traffic = 2 * partials * tile_bytes
    if p["REDUCE"]:
        traffic = 2 * p["SPLITK"] * M * N * 4       # every slab written once and read once
    return Terms(path, fills, tile_ms, traffic / bandwidth * 1e3, parts * tile_bytes,
                 partials > 0, memory_ms, waves, blocks / (waves * slots),
                 len(packed), sum(2 * 4 * R * K for R in packed) / bandwidth * 1e3, bool(p["REDUCE"]),
                 last_k_tiles, last_share, parts, per_sm * SPEC.threads(p) // 32, per_sm)


def fill_tiles(per_sm, constants: Constants):
    """What one pipeline fill costs, in k-tiles, on an SM that holds ``per_sm`` blocks (a number,
    or an array of them): the other blocks compute while it waits (``fill_hidden``)."""
    return constants.pipeline_tiles / per_sm ** constants.fill_hidden


def stack(many: list[Terms]) -> Terms:
    """The terms of many options as one Terms of arrays (one entry per option), for
    :func:`combine` to estimate them all at once."""
    return Terms(**{f.name: np.array([float(getattr(t, f.name)) for t in many])
                    for f in dataclasses.fields(Terms)})


def _value(x):
    """A float where ``x`` is one number, the array where it is many."""
    return float(x) if np.ndim(x) == 0 else x


def last_wave_pace(t: Terms, efficiency, constants: Constants):
    """A last-wave block's time per k-tile, in units of ``tile_ms``: a full wave's is
    1 / efficiency; less when its SM holds fewer blocks (``alone``), but no less than its warps
    need alone (``full_warps``). That floor is not divided by the efficiency, which is the rate
    of a full SM, where blocks also wait on each other's copies. ``t`` and ``efficiency``: one
    option's, or arrays of many (:func:`stack`)."""
    pace = t.last_share ** (1 - constants.alone) / efficiency
    if constants.full_warps:
        floor = constants.full_warps / np.maximum(t.sm_warps, 1)
        pace = np.where(np.greater(t.sm_warps, 0), np.maximum(pace, floor), pace)
    return _value(np.minimum(pace, 1 / efficiency))


def combine(t: Terms, efficiency, constants: Constants):
    """Milliseconds from the terms: compute at the sustained rate (faster in a last wave that
    leaves SMs part empty), plus the shared-tile costs, but never below the memory time; plus
    packing, which runs before, and the launch. The one cost model: the dispatcher calls it on
    one option's terms or on many at once (:func:`stack`), the fit (scripts/fit_dispatch.py) on
    a whole table of measured options."""
    full = (t.k_tiles - t.last_k_tiles + fill_tiles(t.per_sm, constants) * t.fills) / efficiency
    ms = (full + t.last_k_tiles * last_wave_pace(t, efficiency, constants)) * t.tile_ms
    shared = (constants.exposed * t.traffic_ms + t.reduce_bytes / (constants.reduce_gbs * 1e9) * 1e3
              + constants.shared_us * 1e-3 * np.log2(np.maximum(t.parts, 1)))
    ms = ms + np.where(t.shared, shared, 0.0)
    slabs = (1 + constants.exposed) / 2 * t.traffic_ms / constants.slab_speed + constants.slab_us * 1e-3
    ms = ms + np.where(t.slabs, slabs, 0.0)
    pack_ms = t.pack_ms / constants.pack_speed + t.packs * constants.pack_us * 1e-3
    return _value(np.maximum(ms, t.memory_ms) + pack_ms + constants.launch_us * 1e-3)


def estimate(params: dict, M: int, N: int, K: int, efficiency: float, device: Device,
             constants: Constants = CONSTANTS, batch: int = 1) -> Estimate | None:
    """The model's time for one config on one shape and device (None: it does not fit), for
    ``batch`` products of the shape in one launch."""
    t = terms(params, M, N, K, device, batch)
    if t is None:
        return None
    ms = combine(t, efficiency * constants.layout_factor(params), constants)
    return Estimate(params, ms, t.waves, t.busy)


def candidate_of(p: dict) -> Candidate | None:
    """The candidate whose block tile, stages and inner loop config ``p`` has (None: another tile)."""
    per_shape = ("SPLITK", "REDUCE", "STREAMK", "A_T", "B_T", "PACK_A", "PACK_B", "EDGES")
    p = SPEC.resolve(p)
    return next((c for c in CANDIDATES if all(v == p[k] for k, v in SPEC.resolve(c.params).items()
                                              if k not in per_shape)), None)


def pack_choices(M: int, N: int, a_t: int, b_t: int) -> list[tuple[int, int]]:
    """(PACK_A, PACK_B) worth considering: packing an operand helps only when its copies would
    be 4 bytes wide (it runs along K, or its rows are not a multiple of 4 floats)."""
    a = (0, 1) if (a_t == 0 or M % 4) else (0,)
    b = (0, 1) if (b_t == 1 or N % 4) else (0,)
    return [(pa, pb) for pa in a for pb in b]


def edges(p: dict, M: int, N: int) -> int:
    """EDGES for config ``p`` on an M x N C: 1 where C has a row or column of tiles over its edge
    and holds a whole tile that way (M >= BM, or N >= BN), so that those tiles move back to end at
    the edge and copy as whole tiles (what that gained: book/97_tuning_log.md). The candidates'
    edge factors are fitted on tiles that move back.
    """
    return int((M % p["BM"] != 0 and M >= p["BM"]) or (N % p["BN"] != 0 and N >= p["BN"]))


def options(c: Candidate, M: int, N: int, K: int, a_t: int = 0, b_t: int = 0, device: Device | None = None,
            packing: bool = True, batch: int = 1):
    """The configs a candidate offers for a shape: every split of K into no more parts than K
    has k-tiles (each part takes ceil(k-tiles / parts) of them, so the last parts may be short
    or empty), and stream-K (where its 32-bit numbering fits and the candidate has a measured
    stream-K factor), each with and without packing an operand first (``packing``); with a
    device, only those valid on it. For a batch of products in one launch (``batch`` > 1), the
    plain and split-K options without packing (:func:`batch_problem`)."""
    found = []
    for pa, pb in (pack_choices(M, N, a_t, b_t) if packing else [(0, 0)]):
        base = dict(c.params, A_T=1 if pa else a_t, B_T=0 if pb else b_t, PACK_A=pa, PACK_B=pb,
                    SPLITK=1, STREAMK=0)
        k_tiles = cdiv(K, base["BK"])
        found += [base] + [dict(base, SPLITK=s) for s in SPLITS if k_tiles >= s]
        found += [dict(base, SPLITK=s, REDUCE=1) for s in SLAB_SPLITS
                  if k_tiles >= s and 4 * s * M * reduce.pitch(N) <= SLAB_BYTES]
        if k_tiles >= MIN_K_TILES and c.stream_k is not None:
            found.append(dict(base, STREAMK=1))
    for p in found:
        p["EDGES"] = edges(p, M, N)
        if batch > 1 and batch_problem(p):
            continue
        if device is None or (SPEC.is_valid(p, device) and (not p["STREAMK"] or stream_k_fits(p, M, N, K, device))):
            yield p


def choose_config(M: int, N: int, K: int, device: Device, a_t: int = 0, b_t: int = 0,
                  candidates=CANDIDATES, constants: Constants = CONSTANTS, packing: bool = True,
                  batch: int = 1) -> dict:
    """Template parameters of the final kernel for an M x N x K product on ``device``, with
    A and B in the layouts ``a_t``, ``b_t`` (1: a transposed view).

    No table of shapes: the model above estimates the time of every option of every
    candidate (block tiles, splits of K, stream-K, packing an operand first) on the device
    and takes the fastest (``packing=False``: never packs). Each option's EDGES follows from
    its tile and the shape (:func:`edges`). ``batch`` products of the shape in one launch are
    more tiles to fill the GPU with.
    """
    if candidates is CANDIDATES and constants is CONSTANTS:
        return dict(_choose_cached(M, N, K, device, a_t, b_t, packing, batch))
    return _choose(M, N, K, device, a_t, b_t, candidates, constants, packing, batch)


def clear_choices() -> None:
    """Forget the choices made so far (the next one of each shape runs the model again)."""
    _choose_cached.cache_clear()


@functools.lru_cache(maxsize=4096)
def _choose_cached(M, N, K, device, a_t, b_t, packing, batch=1):
    return _choose(M, N, K, device, a_t, b_t, CANDIDATES, CONSTANTS, packing, batch)


def _choose(M, N, K, device, a_t, b_t, candidates, constants, packing=True, batch=1) -> dict:
    ranked = ranked_options(M, N, K, device, a_t, b_t, candidates, constants, packing, batch)
    if not ranked:
        raise RuntimeError(f"no final-kernel config fits {device.label}")
    return dict(ranked[0].params)


def ranked_options(M: int, N: int, K: int, device: Device, a_t: int = 0, b_t: int = 0,
                   candidates=CANDIDATES, constants: Constants = CONSTANTS, packing: bool = True,
                   batch: int = 1) -> list[Estimate]:
    """Every option of every candidate with the model's estimate, fastest first (ties keep the
    candidates' order): :func:`choose_config` takes the first, ``helpers.tune`` times a few."""
    found = []
    for c in candidates:
        for p in options(c, M, N, K, a_t, b_t, device, packing, batch):
            t = terms(p, M, N, K, device, batch)
            if t is not None:
                found.append((p, c.efficiency_on(p, M, N, K, device) * constants.layout_factor(p), t))
    if not found:
        return []
    ms = combine(stack([t for _, _, t in found]), np.array([e for _, e, _ in found]), constants)
    return [Estimate(found[i][0], float(ms[i]), found[i][2].waves, found[i][2].busy)
            for i in np.argsort(ms, kind="stable")]
