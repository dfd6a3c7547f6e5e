"""The experiments behind the final kernel's choices: what each question times.

scripts/final_experiments.py runs them on a GPU, timed against cuBLAS in one run:

    python scripts/final_experiments.py OUT.json [--before FILE.cu] [--only rows,streamk,squares,pack,reduce,candidates,occupancy,ku,parts,splits,stages,chosen,tiles,holdout,small,edges,unaligned,big,unseen,fill,micro]
        [--tiles NAME,...] [--choices OTHER.json]
    python scripts/final_experiments.py --write-choices OTHER.json

Twenty-one questions (QUESTIONS), each a function below whose docstring says what it asks, and
each a table of % of cuBLAS (measured as scripts/tune_final.py measures: every config checked on
fresh random data first, cuBLAS timed before and after each shape). A question returns its work:
(question, shape, items to time, seconds per config[, layout]).
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


from . import datafile
from ..hardware import Device
from ..runtime.specs import final
from ..runtime.spec import cdiv
from ..runtime.specs.final import CANDIDATES, SPEC
from ..shapes import broad_suite

D = SPEC.defaults()
L = dict(D, BM=128, BN=256, BK=32, WM=64, WN=64, TM=16, TN=8, STAGES=3, GROUP=8, KU=4)
W = dict(D, BM=64, BN=256, BK=16, WM=64, WN=64, TM=8, TN=16, STAGES=5, GROUP=8, KU=2)
SQUARE_VARIANTS = {
    "L.s3.u4": L,
    "L.s3.u2": dict(L, KU=2),
    "L.s4.u4": dict(L, STAGES=4),
    "L.k16.s5.u2": dict(L, BK=16, STAGES=5, KU=2),
    "L.k16.s4.u2": dict(L, BK=16, STAGES=4, KU=2),
    "L.t8x16.s3.u4": dict(L, TM=8, TN=16),
    "L.t8x16.k16.s5.u2": dict(L, TM=8, TN=16, BK=16, STAGES=5, KU=2),   # the candidate "big"
    "L.t8x16.k16.s4.u2": dict(L, TM=8, TN=16, BK=16, STAGES=4, KU=2),
    "L.t8x16.k32.s3.u2": dict(L, TM=8, TN=16, KU=2),
    "W.s5.u2": W,
    "W.s4.u2": dict(W, STAGES=4),
    "W.s5.u4": dict(W, KU=4),
    "W.s3.u2": dict(W, STAGES=3),
    "W.k32.s3.u2": dict(W, BK=32, STAGES=3),
    "M.s4.u4": dict(L, BN=128, BK=16, STAGES=4, KU=4),
    "M.s5.u2": dict(L, BN=128, BK=16, STAGES=5, KU=2),
}
ROW_SHAPES = ((4096, 4096, 4096), (4096, 4095, 4096), (4096, 4094, 4096), (4095, 4096, 4095),
              (2692, 8292, 2991), (2692, 8290, 2991), (2528, 14267, 667), (2528, 14268, 667))
PARTS = (2, 4, 8, 16, 32, 64, 1 << 30)
OFF_SQUARES = ((1500, 1500, 1500), (3000, 3000, 3000), (4097, 4097, 4097), (6000, 6000, 6000), (2048, 2048, 8192))
REDUCE_SHAPES = tuple(tuple(map(int, s.split("x"))) for s in
                      "104x66x14030 110x422x14493 305x1192x9533 132x540x12017 1409x204x12124 6227x70x6504".split())
# 8 warps of 32 x 32 or 64 x 32 (4 x 8 or 8 x 8 per thread): twice the warps of the 4-warp candidates
EIGHT_WARPS = {
    "wide8": dict(D, BM=64, BN=128, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, KU=0),
    "narrow8": dict(D, BM=128, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, KU=0),
    "medium8": dict(D, BM=128, BN=128, WM=64, WN=32, TM=8, TN=8, BK=16, STAGES=3, KU=4),
}
# Block tiles and arrangements besides the candidates (question "tiles"): the 64 x 128 tile as
# 4 warps of 32 x 64 with 4 x 16 per thread (wide's former arrangement; wide now has cuBLAS's, 4 warps
# of 64 x 32 side by side, 8 x 8 per thread), k-slices of 8 and 32, and blocks smaller than 64 x 64
# for the smallest products (one or two warps of 32 x 32)
TILES = {
    "wide.t4x16": dict(D, BM=64, BN=128, WM=32, WN=64, TM=4, TN=16, BK=16, STAGES=4, KU=2),
    "wide.k8s4": dict(D, BM=64, BN=128, WM=64, WN=32, TM=8, TN=8, BK=8, STAGES=4, KU=0),
    "wide.k32s3": dict(D, BM=64, BN=128, WM=64, WN=32, TM=8, TN=8, BK=32, STAGES=3, KU=0),
    "narrow.k32s3": dict(D, BN=64, WN=32, TM=8, TN=8, BK=32, STAGES=3, KU=0),
    "narrow.k8s4": dict(D, BN=64, WN=32, TM=8, TN=8, BK=8, STAGES=4, KU=0),
    "warp.32x32": dict(D, BM=32, BN=32, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, KU=0),
    "warp.32x64": dict(D, BM=32, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, KU=0),
    "warp.64x32": dict(D, BM=64, BN=32, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, KU=0),   # the tiny candidate's
    # the warp tile of large and medium (64 x 64, 16 x 8 per thread) in blocks of two warps and of one:
    # the main loop of the big tiles at the grain of the small ones
    "pair.64x128": dict(D, BM=64, BN=128, WM=64, WN=64, TM=16, TN=8, BK=16, STAGES=4, KU=2),
    "pair.128x64": dict(D, BM=128, BN=64, WM=64, WN=64, TM=16, TN=8, BK=16, STAGES=4, KU=2),
    "solo.64x64": dict(D, BM=64, BN=64, WM=64, WN=64, TM=16, TN=8, BK=16, STAGES=3, KU=2),
    # a row (column) of four 32 x 32 warps: an M (N) of 65-96 fills 96 rows of 32-row tiles, where the
    # candidates' 64- and 128-row tiles compute 128
    "row.32x128": dict(D, BM=32, BN=128, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, KU=0),
    "row.32x256": dict(D, BM=32, BN=256, WM=32, WN=64, TM=4, TN=16, BK=16, STAGES=3, KU=2),
    "col.128x32": dict(D, BM=128, BN=32, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, KU=0),
}
# question fill: the options each of these versions of the model ranks first (how far the other blocks
# on an SM hide a block's pipeline fill, and what a fill costs; "none": the model before fill_hidden)
FILL_MODELS = {name: dataclasses.replace(final.CONSTANTS, fill_hidden=hidden, pipeline_tiles=tiles)
               for name, hidden, tiles in (("none", 0.0, 0.47), ("hidden", 1.0, 0.47), ("hidden.x2", 1.0, 0.94),
                                           ("half", 0.5, 0.705))}
FILL_TOP = 5
MICRO_GFLOP = 0.4   # question micro: products of at most this many GFLOP (2 M N K)
MICRO_TOP = 5
HOLDOUT_SEEDS = (1, 2)
UNSEEN_SEEDS = (3, 4)   # question unseen: suites that no fit uses
SMALL_GFLOP = 5.0   # question "small": products of at most this many GFLOP (2 M N K)
# broad-suite shapes of every kind: small, skinny, long K, large and unaligned
SHORT_K = ((8174, 407, 180), (9023, 901, 125), (5725, 215, 386), (1304, 7621, 143), (8128, 100, 178),
           (3464, 1998, 169))
SAMPLE_SHAPES = ((185, 320, 89), (184, 595, 404), (248, 1635, 310), (8128, 100, 178), (5725, 215, 386),
                 (8174, 407, 180), (9023, 901, 125), (3464, 1998, 169), (1304, 7621, 143), (2146, 1036, 1320),
                 (13998, 182, 1720), (170, 4584, 2952), (222, 5752, 1903), (2528, 14267, 667),
                 (4208, 9281, 2423), (80, 10472, 1281))
SMALL_SQUARES = ((512, 512, 512), (768, 768, 768), (1024, 1024, 1024), (1536, 1536, 1536))
PACK_SIZES = ((4096, 4096), (8192, 8192), (4095, 4096), (1000, 777), (14267, 667), (66, 14030), (512, 512))
PACK_SHAPES = [((n, n, n), lay) for n in (2048, 4096, 8192) for lay in ("NN", "NT", "TN", "TT")] + \
    [(s, "NN") for s in ROW_SHAPES if s[1] % 4]      # blocks per shared tile at most; the last: one per slot


def broad_and_holdout() -> list[tuple[int, int, int]]:
    """The broad suite's shapes, then those of the holdout suites (other seeds)."""
    return broad_suite() + [s for seed in HOLDOUT_SEEDS for s in broad_suite(seed=seed)]


def versions(name: str, params: dict, specs: dict, **extra) -> list[dict]:
    """One item per version of the kernel (``--before``: this one and the other), named
    "name:now" and "name:before"; just "name" when there is one."""
    return [dict(name=name if len(specs) == 1 else f"{name}:{w}", params=params, spec=s, **extra)
            for w, s in specs.items()]


def ranked_by_model(c, shape, device, packing=True, a_t=0, b_t=0) -> list[tuple[float, dict]]:
    """(the model's ms, config) of every option of the candidate at ``shape`` (A and B in the
    layouts ``a_t``, ``b_t``), fastest first by the model."""
    return [(e.ms, e.params) for e in final.ranked_options(*shape, device, a_t, b_t, (c,), packing=packing)]


def best_by_model(c, shape, device, packing=True, a_t=0, b_t=0) -> tuple[float, dict] | None:
    """The option of the candidate the model ranks first at ``shape`` (None: none fits)."""
    return next(iter(ranked_by_model(c, shape, device, packing, a_t, b_t)), None)


def unseen_shapes() -> list[tuple[int, int, int]]:
    """The shapes of question unseen: broad suites drawn from seeds no fit uses."""
    return [s for seed in UNSEEN_SEEDS for s in broad_suite(seed=seed)]


def write_choices(path: Path, devices: list[Device], shapes=None) -> None:
    """This dispatcher's choice on every unseen shape (``shapes``: those) for each of ``devices``:
    what ``--choices`` reads in another version's run."""
    doc = {d.name: {"x".join(map(str, s)): final.choose_config(*s, d) for s in shapes or unseen_shapes()}
           for d in devices}
    path.write_text(json.dumps(doc, indent=1))


def other_choice(other: dict, device, shape) -> dict:
    """Another dispatcher's choice for ``shape`` on ``device``, from a ``--write-choices`` file."""
    if device.name not in other:
        raise SystemExit(f"--choices has no choices for {device.name}; it has {sorted(other)}")
    return other[device.name]["x".join(map(str, shape))]


def distinct(ranked) -> list[dict]:
    """Items to time from (tag, params, model's ms or None), each config once, under the candidate's
    name and the tag it first came with."""
    items, seen = [], []
    for tag, params, ms in ranked:
        if SPEC.resolve(params) not in seen:
            seen.append(SPEC.resolve(params))
            items.append(dict(name=f"{final.candidate_of(params).name} {tag}", params=params,
                              **({"model_ms": ms} if ms is not None else {})))
    return items


@dataclass(frozen=True)
class Setup:
    """What a question plans for: the device; the versions of the kernel to time ("now", and
    with ``--before`` "before"); the dispatcher whose choices it times; the entries of TILES
    question tiles times (None: all); another dispatcher's choices (question unseen)."""
    device: Device
    specs: dict = field(default_factory=lambda: {"now": SPEC})
    choose: Callable = final.choose_config
    tiles: tuple | None = None
    other: dict | None = None


def rows(ctx: Setup) -> list[tuple]:
    """B's rows are 16-byte aligned only when N is a multiple of 4. How much does an odd N cost, with the
    kernel in kernels/12_final.cu and (``--before``) another version of it?"""
    specs = ctx.specs
    out = []
    cands = [(c.name, c.params) for c in CANDIDATES]
    for shape in ROW_SHAPES:
        out.append(("rows", shape, [dict(name=f"{n}:{w}", params=p, spec=s) for n, p in cands
                                    for w, s in specs.items()], 0.1))
    return out


def streamk(ctx: Setup) -> list[tuple]:
    """When the output has fewer tiles than the GPU has block slots, how many blocks should share each
    tile's k-tiles (final.MAX_PARTS)? The block that finishes a tile adds the parts one after
    another."""
    device = ctx.device
    out = []
    for shape in broad_suite() + [(1024, 1024, 1024), (1536, 1536, 1536), (2048, 2048, 2048)]:
        items = []
        for c in CANDIDATES:
            p = dict(c.params, STREAMK=1)
            if not SPEC.is_valid(p, device) or not final.stream_k_fits(p, *shape, device):
                continue
            g, waves = final.stream_k_grid(p, *shape, device, max_parts=PARTS[-1])   # one block per slot
            if waves or g <= final.tiles_of(p, *shape[:2]) * 2:
                continue                                   # the cap would change nothing
            items.append(dict(name=c.name, params=c.params))                # no sharing
            items += [dict(name=f"{c.name}/{m}", params=p, max_parts=m) for m in PARTS]
        if items:
            out.append(("streamk", shape, items, 0.05))
    return out


def pack(ctx: Setup) -> list[tuple]:
    """What packing an operand first (kernels/12_pack.cu) costs and gains. The packing kernel alone (GB/s,
    both source layouts: the constants pack_speed and pack_us), then at square, odd and broad-suite
    shapes in every layout, the dispatcher's choice without packing and with each packing of the
    operands that would be copied 4 bytes at a time."""
    device, choose = ctx.device, ctx.choose
    out = []
    shapes = PACK_SHAPES + [(s, "NN") for s in broad_suite()]
    for shape, lay in shapes:
        a_t, b_t = final.LAYOUTS[lay]
        plain = choose(*shape, device, a_t, b_t, packing=False)
        items = [dict(name="chosen", params=choose(*shape, device, a_t, b_t)),
                 dict(name="unpacked", params=plain)]
        bases = [("unpacked", plain)]
        if (shape, lay) in PACK_SHAPES:           # the large candidates as well, every way
            bases += [(c.name, dict(c.params, A_T=a_t, B_T=b_t)) for c in CANDIDATES]
        items += [dict(name=f"{name}+pack{'A' * pa}{'B' * pb}" if pa or pb else name,
                       params=dict(p, PACK_A=pa, PACK_B=pb, A_T=1 if pa else a_t, B_T=0 if pb else b_t))
                  for name, p in bases for pa, pb in final.pack_choices(*shape[:2], a_t, b_t)]
        seen, kept = [], []
        for it in items:
            if it["params"] not in seen and SPEC.is_valid(it["params"], device):
                seen.append(it["params"])
                kept.append(it)
        out.append(("pack", shape, kept, 0.1 if shape[0] * shape[1] * shape[2] >= 2048 ** 3 else 0.05, lay))
    return out


def reduce(ctx: Setup) -> list[tuple]:
    """The block that finishes a shared tile reads the parts one after another, each a wait on L2. On the
    long-K shapes with few output tiles, the kernel against ``--before`` with the small candidates'
    split-K and stream-K at several caps."""
    device, specs = ctx.device, ctx.specs
    out = []
    for shape in REDUCE_SHAPES:
        items = []
        for c in (c for c in CANDIDATES if c.name in ("narrow", "wide", "small")):   # stream-K fits their registers
            opts = [(f"{c.name} k/{s}", dict(c.params, SPLITK=s), None) for s in (8, 16)]
            opts += [(f"{c.name} sk/{m}", dict(c.params, STREAMK=1), m) for m in (32, 64, 128)]
            for name, p, m in opts:
                if SPEC.is_valid(p, device):
                    items += [dict(name=f"{name}:{w}", params=p, spec=s, **({"max_parts": m} if m else {}))
                              for w, s in specs.items()]
        out.append(("reduce", shape, items, 0.05))
    return out


def candidates(ctx: Setup) -> list[tuple]:
    """Does the model rank the candidates as they measure? On the broad and holdout suites and a few
    squares off the powers of two, each candidate's best option by the model (split, stream-K,
    packing), with the model's time, beside the model's choice; with ``--before``, each also with
    the other version of the kernel (how much a kernel change moved each candidate)."""
    device, specs = ctx.device, ctx.specs
    out = []
    for shape in broad_and_holdout() + list(OFF_SQUARES):
        items = []
        for c in CANDIDATES:
            best = best_by_model(c, shape, device)
            if best:
                items += versions(c.name, best[1], specs, model_ms=best[0])
        out.append(("candidates", shape, items, 0.05))
    return out


def occupancy(ctx: Setup) -> list[tuple]:
    """Small and short-K shapes run 4-12 warps per SM, latency-bound. Blocks of 8 warps with small thread
    tiles (32 or 64 results per thread), so a tile has twice the warps, beside the dispatcher's
    choice: each at the option the model ranks first for it (with a guessed efficiency), without a
    split, and with stream-K, on the broad suite and small squares."""
    device, choose = ctx.device, ctx.choose
    out = []
    for shape in broad_suite() + list(SMALL_SQUARES):
        items = [dict(name="chosen", params=choose(*shape, device))]
        for name, base in EIGHT_WARPS.items():
            guess = final.Candidate(name, base, 0.6)           # no measured efficiency yet
            opts = list(final.options(guess, *shape, device=device, packing=False))
            best = best_by_model(guess, shape, device, packing=False)
            picks = [(f"{name} model", [best[1]] if best else []),
                     (f"{name} plain", [o for o in opts if o["SPLITK"] == 1 and not o["STREAMK"]]),
                     (f"{name} sk", [o for o in opts if o["STREAMK"]])]
            seen = [it["params"] for it in items]
            for label, found in picks:
                if found and found[0] not in seen:
                    items.append(dict(name=label, params=found[0]))
                    seen.append(found[0])
        out.append(("occupancy", shape, items, 0.05))
    return out


def holdout(ctx: Setup) -> list[tuple]:
    """How does the dispatcher do beyond the broad suite? Its choice on two more broad suites, drawn as the
    broad suite is but from other seeds (HOLDOUT_SEEDS). Fits of question candidates use these
    shapes too; question unseen has suites that no fit uses."""
    device, choose = ctx.device, ctx.choose
    out = []
    for seed in HOLDOUT_SEEDS:
        for shape in broad_suite(seed=seed):
            chosen = choose(*shape, device)
            out.append(("holdout", shape, [dict(name=f"chosen seed {seed}", params=chosen)], 0.05))
    return out


def unseen(ctx: Setup) -> list[tuple]:
    """Does a change to the dispatcher pay on shapes no fit has used? Its choice on the broad suites of
    UNSEEN_SEEDS (the fits use the broad and holdout suites) and, with ``--choices``, the choice of
    another version of the dispatcher wherever it differs, in one run. That version writes its
    choices with ``--write-choices OTHER.json`` (for every GPU with a datasheet, in
    helpers/hardware.py)."""
    device, choose = ctx.device, ctx.choose
    out = []
    for shape in unseen_shapes():
        chosen = choose(*shape, device)
        items = [dict(name="chosen", params=chosen)]
        if ctx.other is not None:
            theirs = other_choice(ctx.other, device, shape)
            if SPEC.resolve(theirs) != SPEC.resolve(chosen):
                items.append(dict(name="other", params=theirs))
        out.append(("unseen", shape, items, 0.05))
    return out


def tiles(ctx: Setup) -> list[tuple]:
    """At low occupancy (a wave of split-K blocks, a few per SM, or a product too small to fill the GPU),
    does another block tile, arrangement of warps or k-slice run faster? On the broad suite, the
    holdout suites (question 14) and n = 4096 and 8192, beside the dispatcher's choice, narrow,
    wide, small and each of TILES (``--tiles``: some of them) at the two options the model ranks
    first for it (TILES with a guessed efficiency)."""
    device, choose = ctx.device, ctx.choose
    out = []
    guesses = [final.Candidate(name, base, 0.6) for name, base in TILES.items()
               if ctx.tiles is None or name in ctx.tiles]       # no measured efficiency yet
    tiles = [c for c in CANDIDATES if c.name in ("narrow", "wide", "small")] + guesses
    for shape in broad_and_holdout() + [(n, n, n) for n in (4096, 8192)]:
        items = [dict(name="chosen", params=choose(*shape, device, packing=False))]
        for c in tiles:
            items += [dict(name=f"{c.name} {final.label(p)}", params=p)
                      for _, p in ranked_by_model(c, shape, device, packing=False)[:2]]
        out.append(("tiles", shape, items, 0.05))
    return out


def small(ctx: Setup) -> list[tuple]:
    """On the smallest products (at most SMALL_GFLOP) of the broad and holdout suites, a launch takes a few
    microseconds and a split of K saves or costs about as much. Every option of the two smallest
    candidates (tiny, small: each split of K, slabs) and the three options the model ranks first for
    narrow, narrow2 and wide, beside the dispatcher's choice."""
    device, choose = ctx.device, ctx.choose
    out = []
    every = [c for c in CANDIDATES if c.name in ("tiny", "small")]
    top = [c for c in CANDIDATES if c.name in ("narrow", "narrow2", "wide")]
    for shape in broad_and_holdout():
        if 2 * shape[0] * shape[1] * shape[2] > SMALL_GFLOP * 1e9:
            continue
        items = [dict(name="chosen", params=choose(*shape, device, packing=False))]
        for c in every + top:
            ranked = ranked_by_model(c, shape, device, packing=False)
            items += [dict(name=f"{c.name} {final.label(p)}", params=p) for _, p in ranked[:None if c in every else 3]]
        out.append(("small", shape, items, 0.05))
    return out


def edges(ctx: Setup) -> list[tuple]:
    """What do the tiles over an edge of C cost? On the broad and holdout suites, the dispatcher's choice
    (``--before``: beside the other version of the kernel), and the same with EDGES = 0 where it
    moves its tiles over an edge back (final.edges); and on the broad suite the choice (EDGES = 0)
    at the shape with M and N rounded up to whole tiles: more work, but no tile over an edge, and
    rows of B and C 16-byte aligned."""
    device, specs, choose = ctx.device, ctx.specs, ctx.choose
    out = []
    for shape in broad_and_holdout():
        chosen = choose(*shape, device)
        items = versions("chosen", chosen, specs)
        if chosen["EDGES"]:                        # the choice with its tiles over an edge guarded
            items += versions("chosen EDGES=0", dict(chosen, EDGES=0), specs)
        out.append(("edges", shape, items, 0.05))
    for shape in broad_suite():
        chosen = choose(*shape, device)
        whole = (cdiv(shape[0], chosen["BM"]) * chosen["BM"], cdiv(shape[1], chosen["BN"]) * chosen["BN"], shape[2])
        if whole != shape:
            out.append(("edges", whole, versions(f"chosen for {'x'.join(map(str, shape))}", dict(chosen, EDGES=0),
                                                 specs), 0.05))
    return out


def unaligned(ctx: Setup) -> list[tuple]:
    """What do rows of B and C that are not 16-byte aligned cost, and would packing B pay? On the broad and
    holdout shapes whose N is not a multiple of 4, the dispatcher's choice; the same with only B's
    rows, or only C's, 16 bytes apart (views of buffers with padded rows: which rows cost); with B
    packed first (PACK_B = 1, its time included); and the choice at N rounded up to a multiple of 4
    (aligned rows, no packing: the time a free packing would leave)."""
    device, specs, choose = ctx.device, ctx.specs, ctx.choose
    out = []
    for shape in broad_and_holdout():
        chosen = choose(*shape, device)
        if shape[1] % 4 == 0 or chosen["B_T"]:
            continue
        unpacked = dict(chosen, PACK_B=0)
        # which rows cost: B's (copies), C's (stores), as views of row-padded buffers
        pads = [dict(name=f"unpacked, {w} rows aligned", params=unpacked, pad=w) for w in ("B", "C")]
        out.append(("unaligned", shape, versions("unpacked", unpacked, specs) + pads
                    + versions("packB", dict(chosen, PACK_B=1), specs), 0.05))
        aligned = (shape[0], cdiv(shape[1], 4) * 4, shape[2])
        p = dict(unpacked, EDGES=final.edges(unpacked, *aligned[:2]))
        out.append(("unaligned", aligned, versions(f"unpacked for {'x'.join(map(str, shape))}", p, specs), 0.05))
    return out


def ku(ctx: Setup) -> list[tuple]:
    """How many k-steps per trip of the inner loop (KU)? Every candidate at KU = 0 (the whole k-slice), 2,
    4, 8 and its own, at n = 4096 and 8192 (NN and TN) and, at its option the model ranks first, on
    sixteen broad-suite shapes of every kind (SAMPLE_SHAPES) and the long-K shapes with few output
    tiles (REDUCE_SHAPES), where few blocks share an SM."""
    device = ctx.device
    out = []
    def kus(c):
        bk = c.params["BK"]
        return sorted({c.params["KU"], 0, 2, 4, 8} & {k for k in (0, 2, 4, 8, 16) if k == 0 or (bk % k == 0 and k < bk)})
    for n in (4096, 8192):
        for lay in ("NN", "TN"):
            a_t, b_t = final.LAYOUTS[lay]
            items = [dict(name=f"{c.name}.u{k}", params=dict(c.params, KU=k, A_T=a_t, B_T=b_t))
                     for c in CANDIDATES for k in kus(c)]
            out.append(("ku", (n, n, n), items, 0.2, lay))
    for shape in SAMPLE_SHAPES + REDUCE_SHAPES:
        items = []
        for c in CANDIDATES:
            best = best_by_model(c, shape, device, packing=False)
            if best:
                items += [dict(name=f"{c.name}.u{k}", params=dict(best[1], KU=k)) for k in kus(c)]
        out.append(("ku", shape, items, 0.06))
    return out


def parts(ctx: Setup) -> list[tuple]:
    """Split-K and stream-K blocks of 128 results per thread store their partial tiles and (stream-K) start
    their copies at a segment's first k-tile. With ``--before``, every such option of large, flat
    and medium that the rules allow, on SAMPLE_SHAPES, a long-K square and n = 4096, beside the
    other version of the kernel."""
    device, specs, choose = ctx.device, ctx.specs, ctx.choose
    out = []
    for shape in SAMPLE_SHAPES + ((2048, 2048, 8192), (4096, 4096, 4096)):
        items = [dict(name=f"chosen:{w}", params=choose(*shape, device), spec=s)
                 for w, s in specs.items()]
        for c in (c for c in CANDIDATES if c.params["TM"] * c.params["TN"] == 128):   # large, flat, medium
            for p in final.options(c, *shape, device=device, packing=False):
                if (p["SPLITK"] > 1 or p["STREAMK"]) and SPEC.is_valid(p, device):
                    items += [dict(name=f"{c.name} {final.label(p)}:{w}", params=p, spec=s) for w, s in specs.items()]
        out.append(("parts", shape, items, 0.06))
    return out


def splits(ctx: Setup) -> list[tuple]:
    """Does a split of K pay on big squares, where the model's last wave and shared tiles are nearly even?
    At n = 4096 and 8192 and the squares off the powers of two, in every layout: the dispatcher's
    choice, its block tile with every split of K and stream-K (the same packing), and each other
    candidate's option the model ranks first."""
    device, choose = ctx.device, ctx.choose
    out = []
    for shape in ((4096, 4096, 4096), (8192, 8192, 8192)) + OFF_SQUARES:
        for lay, (a_t, b_t) in final.LAYOUTS.items():
            chosen = choose(*shape, device, a_t, b_t)
            mine = final.candidate_of(chosen)
            items = [dict(name="chosen", params=chosen)]
            items += [dict(name=final.label(p), params=p) for p in final.options(mine, *shape, a_t, b_t, device)
                      if (p["PACK_A"], p["PACK_B"]) == (chosen["PACK_A"], chosen["PACK_B"])
                      and SPEC.resolve(p) != SPEC.resolve(chosen)]
            for c in CANDIDATES:
                best = best_by_model(c, shape, device, True, a_t, b_t) if c is not mine else None
                if best and best[1] not in [it["params"] for it in items]:
                    items.append(dict(name=f"{c.name} {final.label(best[1])}", params=best[1]))
            out.append(("splits", shape, items, 0.1, lay))
    return out


def stages(ctx: Setup) -> list[tuple]:
    """With few k-tiles per block, does a shallower pipeline pay? On short-K shapes in NN and TN, the
    dispatcher's choice (without packing) and every candidate's plain config at 2, 3 and its own
    number of stages, and at the other k-slices of 8, 16 and 32 floats with 3, 4 and 5 stages; with
    ``--before``, each beside the other version."""
    device, specs, choose = ctx.device, ctx.specs, ctx.choose
    out = []
    for shape in SHORT_K:
        for lay in ("NN", "TN"):
            a_t, b_t = final.LAYOUTS[lay]
            items = [dict(name="chosen", params=choose(*shape, device, a_t, b_t, packing=False))]
            for c in CANDIDATES:
                own = c.params["BK"]
                depths = [(own, st) for st in sorted({c.params["STAGES"], 2, 3})]
                depths += [(bk, st) for bk in (8, 16, 32) if bk != own for st in (3, 4, 5)]
                for bk, st in depths:
                    p = dict(c.params, A_T=a_t, B_T=b_t, BK=bk, STAGES=st)
                    name = f"{c.name}.s{st}" if bk == own else f"{c.name}.k{bk}s{st}"
                    if SPEC.is_valid(p, device):
                        items += versions(name, p, specs)
            out.append(("stages", shape, items, 0.05, lay))
    return out


def chosen(ctx: Setup) -> list[tuple]:
    """Does a change to the dispatcher pay? On the broad suite, wherever the dispatcher now chooses another
    config than the one recorded for this GPU in book/data, both, in one run."""
    device, choose = ctx.device, ctx.choose
    out = []
    recorded = {(r["M"], r["N"], r["K"]): r["params"] for r in datafile.load(device.name).chapter("broad_suite")["rows"]
                if r["kernel"] == SPEC.name and r.get("params")}
    for shape in broad_suite():
        now, then = choose(*shape, device), recorded.get(shape)
        if then and SPEC.resolve(then) != SPEC.resolve(now):
            out.append(("chosen", shape, [dict(name="recorded", params=then), dict(name="chosen", params=now)], 0.1))
    return out


def big(ctx: Setup) -> list[tuple]:
    """The dispatcher's choice at n = 4096 and 8192 in every layout (``--before``: beside the other version
    of the kernel): does a kernel change move the big squares?"""
    device, specs, choose = ctx.device, ctx.specs, ctx.choose
    out = []
    for n in (4096, 8192):
        for lay, (a_t, b_t) in final.LAYOUTS.items():
            out.append(("big", (n, n, n), versions("chosen", choose(n, n, n, device, a_t, b_t), specs),
                        0.25, lay))
    return out


def fill(ctx: Setup, shapes=None) -> list[tuple]:
    """Do the other blocks on an SM hide a block's pipeline fill (final.Constants.fill_hidden)? On the
    broad, holdout and unseen suites and the squares off the powers of two, the options each version
    of the model in FILL_MODELS ranks among its first FILL_TOP: the table scripts/fit_dispatch.py
    fits pipeline_tiles and fill_hidden on (the unseen shapes left out). ``shapes``: others instead."""
    device = ctx.device
    out = []
    for shape in shapes or broad_and_holdout() + unseen_shapes() + list(OFF_SQUARES):
        out.append(("fill", shape, distinct(
            (f"{name}#{rank + 1}", e.params, e.ms) for name, constants in FILL_MODELS.items()
            for rank, e in enumerate(final.ranked_options(*shape, device, constants=constants)[:FILL_TOP])), 0.05))
    return out


def micro(ctx: Setup) -> list[tuple]:
    """Do thread tiles of 4 x 4 pay on the smallest products? On the products of the broad, holdout and
    unseen suites of at most MICRO_GFLOP, every option of the candidate "micro" (32 x 32 blocks of
    two warps), and the options the model ranks first with it (MICRO_TOP) and without it (the first
    three): the table scripts/fit_dispatch.py fits its efficiency on."""
    device = ctx.device
    out = []
    micro = next(c for c in final.CANDIDATES if c.name == "micro")
    without = tuple(c for c in final.CANDIDATES if c is not micro)
    for shape in sorted(set(broad_and_holdout() + unseen_shapes()), key=lambda s: s[0] * s[1] * s[2]):
        if 2 * shape[0] * shape[1] * shape[2] > MICRO_GFLOP * 1e9:
            continue
        ranked = [(f"with#{i + 1}", e.params, e.ms) for i, e in
                  enumerate(final.ranked_options(*shape, device)[:MICRO_TOP])]
        ranked += [(f"without#{i + 1}", e.params, e.ms) for i, e in
                   enumerate(final.ranked_options(*shape, device, candidates=without)[:3])]
        ranked += [("every", p, None) for p in final.options(micro, *shape, device=device, packing=False)]
        out.append(("micro", shape, distinct(ranked), 0.05))
    return out


def squares(ctx: Setup) -> list[tuple]:
    """Block tiles, stages and inner loops at n = 4096 and 8192, and the dispatcher's choice; with
    ``--before``, each beside the other version of the kernel."""
    device, specs, choose = ctx.device, ctx.specs, ctx.choose
    out = []
    for n in (4096, 8192):
        items = [dict(name=f"chosen:{w}", params=choose(n, n, n, device), spec=s)
                 for w, s in specs.items()]
        items += [dict(name=f"{k}:{w}", params=v, spec=s) for k, v in SQUARE_VARIANTS.items()
                  for w, s in specs.items()]
        out.append(("squares", (n, n, n), items, 0.25))
    return out


# the questions by name, in the order a run asks them
QUESTIONS = {"rows": rows, "streamk": streamk, "pack": pack, "reduce": reduce, "candidates": candidates,
             "occupancy": occupancy, "holdout": holdout, "unseen": unseen, "tiles": tiles, "small": small,
             "edges": edges, "unaligned": unaligned, "ku": ku, "parts": parts, "splits": splits,
             "stages": stages, "chosen": chosen, "big": big, "fill": fill, "micro": micro,
             "squares": squares}


def plan(questions, ctx: Setup) -> list[tuple]:
    """(question, shape, items, seconds per config[, layout]) of the named questions, in the
    order they run."""
    unknown = set(questions) - set(QUESTIONS)
    if unknown:
        raise ValueError(f"unknown question(s) {sorted(unknown)}; known: {list(QUESTIONS)}")
    return [w for name, ask in QUESTIONS.items() if name in questions for w in ask(ctx)]


def time_packing(tuner, log) -> list[dict]:
    """The packing kernel alone: GB/s (one read and one write of R x K floats) per source layout."""
    from ..runtime import launch, pack  # noqa: F401  (launch hands the packing its compiler)
    from ..runtime.timing import time_fn

    cp, rows = tuner.cupy, []
    for R, K in PACK_SIZES:
        for along_k in (1, 0):
            X = tuner.rng.random((R, K) if along_k else (K, R), dtype=cp.float32)
            X = X if along_k else X.T                      # op(A), M x K, rows along K or along M
            dst = cp.empty(pack.floats(R, K), dtype=cp.float32)
            pack.pack(X, "A", dst)
            ok = bool(cp.array_equal(pack.packed_view("A", dst, R, K), X))
            t = time_fn(lambda X, dst: pack.pack(X, "A", dst), [(X, dst)], target_s=0.05)
            gbs = 8 * R * K / (t.ms * 1e-3) / 1e9
            rows.append(dict(R=R, K=K, along_k=along_k, ms=t.ms, gbs=gbs, ok=ok))
            log(f"  pack {R}x{K} {'along K' if along_k else 'along R'}: {t.ms * 1e3:8.1f} us, {gbs:7.1f} GB/s"
                f"{'' if ok else '  WRONG'}")
            del X, dst
    return rows
