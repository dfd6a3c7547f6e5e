"""Occupancy: how many blocks of a kernel config fit on one SM, and what limits it.

Taught in the chapter "Shared-memory tiling". An SM keeps a block resident until
it finishes, so it can hold several at once only if their warps, registers and
shared memory all fit. The rules are those of CUDA's occupancy calculator
(``cuda_occupancy.h``):

* warps: at most ``max_threads_per_sm / 32`` resident warps (64 on sm_90);
* registers: a warp's registers are allocated in units of 256
  (``ceil(regs_per_thread * 32 / 256) * 256``), and the register file is split
  in 4 sub-partitions of 16384, each holding whole warps only;
* shared memory: per block, what the kernel declares plus 1 KB the driver
  reserves, rounded up to 128 bytes, out of 228 KB per SM;
* blocks: at most 32 resident blocks per SM.

The smallest of the four block counts wins; ``limiter`` names it. sm_90 (H100,
H200) limits are built in; with a GPU present, its own limits are used.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

SM90 = {
    "max_threads_per_block": 1024,
    "max_threads_per_sm": 2048,
    "max_warps_per_sm": 64,
    "max_blocks_per_sm": 32,
    "registers_per_sm": 65536,
    "registers_per_block": 65536,
    "register_alloc_unit": 256,       # registers are handed to warps in chunks of 256
    "register_sub_partitions": 4,     # the register file is split in 4; a warp lives in one
    "max_registers_per_thread": 255,
    "smem_per_sm": 228 * 1024,
    "smem_per_block_optin": 227 * 1024,
    "smem_reserved_per_block": 1024,  # the driver keeps 1 KB per block (sm_80 and later)
    "smem_alloc_unit": 128,
    "warp_size": 32,
}

LIMITERS = ("warps", "registers", "shared memory", "blocks per SM")


@dataclass
class Occupancy:
    """Resident blocks and warps per SM for one block size and resource use."""

    blocks_per_sm: int
    active_warps: int
    max_warps: int
    limiter: str                  # one of LIMITERS: the resource that runs out first
    by_limit: dict                # blocks per SM each resource alone would allow
    threads_per_block: int = 0
    registers_per_thread: int = 0
    smem_per_block: int = 0       # bytes the kernel asks for (without the driver's reserve)
    detail: dict = field(default_factory=dict)   # allocation sizes behind the counts

    @property
    def fraction(self) -> float:
        """Resident warps as a fraction of the SM's maximum (the usual "occupancy")."""
        return self.active_warps / self.max_warps

    @property
    def warps_per_block(self) -> int:
        return self.detail.get("warps_per_block", 0)

    def __str__(self):
        return (f"{self.blocks_per_sm} blocks/SM, {self.active_warps}/{self.max_warps} warps "
                f"({100 * self.fraction:.0f}%), limited by {self.limiter}")


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def sm90_limits() -> dict:
    return dict(SM90)


def device_limits() -> dict:
    """This GPU's limits in the keys of :data:`SM90` (needs a GPU)."""
    import cupy

    from .launch import device_limits as launch_limits

    L = launch_limits()
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    major = int(props.get("major", 9))
    return dict(SM90,
                max_threads_per_block=L["max_threads_per_block"],
                max_threads_per_sm=L["max_threads_per_sm"],
                max_warps_per_sm=L["max_threads_per_sm"] // L["warp_size"],
                max_blocks_per_sm=L["max_blocks_per_sm"],
                registers_per_sm=L["regs_per_sm"],
                registers_per_block=int(props.get("regsPerBlock", L["regs_per_sm"])),
                register_sub_partitions=4 if major >= 7 else 2,
                smem_per_sm=L["max_smem_per_sm"],
                smem_per_block_optin=L["max_smem_per_block"],
                smem_reserved_per_block=int(props.get("reservedSharedMemPerBlock", 1024 if major >= 8 else 0)),
                smem_alloc_unit=128 if major >= 8 else 256,
                warp_size=L["warp_size"])


def default_limits() -> dict:
    """The reader's GPU when one is present (live mode), else sm_90."""
    from .mode import gpu_available

    if gpu_available():
        try:
            return device_limits()
        except Exception:   # an old CuPy without some attribute: fall back
            pass
    return sm90_limits()


def occupancy(threads_per_block: int, registers_per_thread: int, smem_per_block: int,
              limits: dict | None = None) -> Occupancy:
    """Blocks per SM allowed by warps, registers, shared memory and the block limit.

    ``smem_per_block`` is what the kernel declares (static + dynamic), without the
    1 KB the driver adds; ``limits`` defaults to the reader's GPU or sm_90.
    A block that cannot fit at all gets 0 blocks, limited by the resource it
    exceeds.
    """
    L = dict(default_limits() if limits is None else SM90, **(limits or {}))
    ws = L["warp_size"]
    warps = -(-threads_per_block // ws)

    # warps: whole blocks of warps out of the SM's warp slots
    by_warps = L["max_warps_per_sm"] // warps if threads_per_block <= L["max_threads_per_block"] else 0

    # registers: per warp in allocation units; whole warps per sub-partition
    regs_per_warp = _round_up(max(registers_per_thread, 1) * ws, L["register_alloc_unit"])
    parts = L["register_sub_partitions"]
    regs_assumed_per_block = regs_per_warp * _round_up(warps, parts)   # the hardware's per-block check
    if (registers_per_thread > L["max_registers_per_thread"]
            or regs_assumed_per_block > L["registers_per_block"]):
        by_regs = 0
    else:
        warps_per_part = (L["registers_per_sm"] // parts) // regs_per_warp
        by_regs = (warps_per_part * parts) // warps

    # shared memory: declared + reserved, rounded to the allocation unit
    smem_alloc = _round_up(smem_per_block + L["smem_reserved_per_block"], L["smem_alloc_unit"])
    if smem_per_block > L["smem_per_block_optin"]:
        by_smem = 0
    else:
        by_smem = L["smem_per_sm"] // smem_alloc

    by = {"warps": by_warps, "registers": by_regs, "shared memory": by_smem,
          "blocks per SM": L["max_blocks_per_sm"]}
    limiter = min(LIMITERS, key=lambda k: by[k])    # ties: the first in LIMITERS order
    blocks = by[limiter]
    detail = {"warps_per_block": warps, "registers_per_warp": regs_per_warp,
              "registers_per_block": regs_per_warp * warps, "smem_allocated_per_block": smem_alloc,
              "limits": L}
    return Occupancy(blocks, blocks * warps, L["max_warps_per_sm"], limiter, by,
                     threads_per_block, registers_per_thread, smem_per_block, detail)


def declared_smem(res) -> int:
    """Shared memory a compiled kernel declares, from its offline resource report.

    On sm_90 the cubin's shared-memory size also counts the driver's 1 KB
    reservation; ptxas's own line ("N bytes smem") does not, so use it when present
    (``helpers.resources`` already reports it as ``static_smem``).
    """
    m = re.search(r"(\d+) bytes smem", res.log or "")
    static = int(m.group(1)) if m else res.static_smem
    return static + res.dynamic_smem


def occupancy_of(kernel: str, params: dict | None = None, limits: dict | None = None):
    """(Resources, Occupancy) of a registered kernel config, from the offline sm_90 compile."""
    from .registry import get
    from .resources import resources

    spec = get(kernel)
    full = spec.validate(params)
    res = resources(spec, full)
    bx, by, bz = spec.block(full)
    return res, occupancy(bx * by * bz, res.registers, declared_smem(res), limits)


# ------------------------------------------------------------------- figures
def register_curve(threads_per_block: int, smem_per_block: int = 0, regs=range(16, 256, 1),
                   limits: dict | None = None) -> list[Occupancy]:
    """Occupancy for each register count, one block size."""
    return [occupancy(threads_per_block, r, smem_per_block, limits) for r in regs]


def explorer(block_sizes=(64, 128, 256, 512, 1024), smem_per_block: int = 0, mark: dict | None = None):
    """Resident warps per SM against registers per thread, a menu over block sizes.

    The steps in each curve are the allocation rules at work. ``mark`` maps a
    label to (threads, registers, shared bytes) to place real kernels on their
    curve; a block size with a marked kernel is drawn with that kernel's shared
    memory, the others with ``smem_per_block``.
    """
    import plotly.graph_objects as go

    from .plots import PALETTE, TEMPLATE, with_menu

    regs = list(range(16, 256))
    marks = {label: (v + (smem_per_block,))[:3] for label, v in (mark or {}).items()}
    steps = []
    for t in block_sizes:
        smem = next((m[2] for m in marks.values() if m[0] == t), smem_per_block)
        occ = register_curve(t, smem, regs, limits=SM90)
        traces = [go.Scatter(x=regs, y=[o.active_warps for o in occ], mode="lines", line_shape="hv",
                             name=f"{t} threads, {smem} B shared per block", line=dict(color=PALETTE[0]),
                             hovertext=[f"{r} registers: {o}" for r, o in zip(regs, occ)], hoverinfo="text")]
        for i, (label, (mt, mr, ms)) in enumerate(marks.items()):
            if mt == t:
                o = occupancy(mt, mr, ms, SM90)
                traces.append(go.Scatter(x=[mr], y=[o.active_warps], mode="markers+text", text=[label],
                                         textposition="bottom right", name=label,
                                         marker=dict(size=11, color=PALETTE[(i + 1) % len(PALETTE)])))
        steps.append((f"{t} threads per block", traces))
    fig = with_menu(steps, active=len(block_sizes) - 1)
    fig.update_layout(template=TEMPLATE, height=420, xaxis_title="registers per thread",
                      yaxis=dict(title="resident warps per SM (of 64)", range=[0, 70]),
                      title="sm_90: resident warps per SM against registers per thread")
    return fig


def by_config_figure(kernel: str, rows: list[dict], source: str, vary: str, title: str = ""):
    """Occupancy (bars) and measured TFLOP/s (line) for the configs in ``rows``.

    ``rows`` are result rows of one kernel at one size; ``vary`` names the
    parameter on the x axis. Occupancy comes from the offline sm_90 compile.
    """
    import plotly.graph_objects as go

    from .plots import CUBLAS_COLOUR, PALETTE, TEMPLATE, _hover, label_source
    from .registry import get

    spec = get(kernel)
    rows = sorted(rows, key=lambda r: r["params"][vary])
    labels, occs, notes = [], [], []
    for r in rows:
        res, o = occupancy_of(kernel, r["params"], limits=SM90)
        labels.append(spec.label_of(r["params"]))
        occs.append(o)
        notes.append(f"{res.registers} registers, {declared_smem(res)} B shared, "
                     f"{o.threads_per_block} threads<br>{o}")
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=[100 * o.fraction for o in occs], name="occupancy (% of 64 warps per SM)",
                         marker_color="#c6dbef", hovertext=notes, hoverinfo="text",
                         text=[f"{o.active_warps} warps/SM<br>limit: {o.limiter}" for o in occs], textposition="inside"))
    fig.add_trace(go.Scatter(x=labels, y=[r["tflops"] for r in rows], name="measured TFLOP/s", yaxis="y2",
                             mode="lines+markers", line=dict(color=PALETTE[1]), marker=dict(size=10),
                             hovertext=[_hover(r) for r in rows], hoverinfo="text"))
    fig.add_trace(go.Scatter(x=labels, y=[r["cublas_tflops"] for r in rows], name="cuBLAS", yaxis="y2",
                             mode="lines", line=dict(color=CUBLAS_COLOUR, dash="dash")))
    top = max(r["cublas_tflops"] for r in rows) * 1.1
    fig.update_layout(template=TEMPLATE, height=440, title=title,
                      yaxis=dict(title="occupancy (%)", range=[0, 110]),
                      yaxis2=dict(title="TFLOP/s", overlaying="y", side="right", range=[0, top], showgrid=False),
                      legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0))
    return label_source(fig, source + "; occupancy from the offline sm_90 compile")
