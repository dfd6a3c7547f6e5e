"""The final kernel as a library call: ``C = alpha * op(A) @ op(B) + beta * C``, one product or a batch.

:func:`sgemm` takes float32 CuPy views: row-major matrices with a row stride (``X[:, :n]``
of a wider array) and transposed ones (``X.T``, i.e. column-major), and hands them to the
kernel as they lie in memory: the layout of A and B becomes two template flags (``A_T``,
``B_T``) and the strides leading dimensions. The one copy it may make is packing
(:mod:`helpers.runtime.pack`): where the model says it pays, an operand whose copies into
shared memory would be 4 bytes wide is first rewritten k-major with aligned rows. A
column-major C is computed as ``C^T = op(B)^T op(A)^T`` (the operands swapped, still no
copy). Everything else (a negative stride within a matrix, two non-unit strides, float64,
mismatched shapes, ``beta != 0`` without a C) is refused with an error that names the fix.

The BLAS contract, as cuBLAS keeps it: with ``beta = 0`` C is never read, so it may hold
anything, NaN included; an empty C (M or N of 0) returns at once; K = 0 or ``alpha = 0``
computes ``C = beta * C`` without reading A or B (``beta = 0`` writes zeros, even over NaN).

A batch: 3-D operands ``(batch, rows, cols)`` are that many independent products in one
launch (the kernel's ``sgemm_final_batched``), with the batch strides of any view; a 2-D
operand, or a 3-D one with a batch of 1, is used by every product (broadcast, as
``cupy.matmul`` does). C is ``(batch, M, N)``, its products apart in memory.

A call costs the host little: everything that follows from the shapes, strides, dtypes,
``params`` and the device (the checks, the config the dispatcher chooses, the compiled kernels,
grids, workspace sizes and the constant arguments) is worked out once, kept as a
:class:`Plan`, and found again by a dictionary lookup; a call then checks that the operands
are float32 CuPy arrays on the current device, writes their addresses, alpha and beta into
ready parameter structures (:class:`Launch`), and launches, with no conversion of arguments at
each launch: the call's kernels (packing, the product, adding slabs) as one CUDA graph per
stream (:mod:`helpers.runtime.graphs`, with its own copies of the structures), one driver launch
whatever number of kernels the call runs; kernel by kernel through the driver's
``cuLaunchKernel`` in a stream capture, or where the driver has no graphs.
``python -m helpers bench --suite calls`` measures what a call costs the host.

Taught in the chapter "The final kernel" (book/12_final.md).
"""
from __future__ import annotations

import contextlib
import ctypes
import math
import threading
from dataclasses import dataclass

import cupy
import numpy as np

from .. import hardware, settings
from ..hardware import INT32_LIMIT, MAX_GRID_YZ, Device
from ..shapes import SUITE
from . import graphs
from . import pack as pack_module
from . import reduce as reduce_module
from .launch import prepare
from .layout import layout, leading_dimension
from .spec import ConfigError
from .specs import final
from .specs.final import choose_config

F32 = np.dtype(np.float32)


# ------------------------------------------------------------------ what the kernel gets
@dataclass(frozen=True)
class Call:
    """What the kernel is handed for one ``sgemm``: operands in the kernel's order (A and B
    swapped, and all three transposed, where C is column-major; for a batch, one product's
    views), shape, layouts, and the batch: its size and each operand's batch stride in
    floats (0: broadcast), in the kernel's order. ``kind``: "gemm"; "scale" (K = 0: C = beta
    * C); "empty" (C has no elements)."""

    A: object
    B: object
    C: object
    M: int
    N: int
    K: int
    a_t: int
    b_t: int
    swapped: bool
    batch: int = 1
    strides: tuple = (0, 0, 0)
    out_shape: tuple = ()
    kind: str = "gemm"
    batched: bool = False       # the operands are 3-D (C and the result are (batch, M, N))


def _scalar(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
    if not math.isfinite(float(v)):
        raise ValueError(f"{name} must be finite, got {v}")
    return float(v)


@dataclass(frozen=True)
class _Operand:
    """What :func:`plan_call` reads of a matrix: its shape, strides and dtype (and ``.T``)."""

    shape: tuple
    strides: tuple
    dtype: object

    @property
    def T(self):
        return _Operand(self.shape[::-1], self.strides[::-1], self.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)


def _operand(X):
    return None if X is None else _Operand(tuple(X.shape), tuple(X.strides), X.dtype)


def _dims(name: str, X) -> tuple:
    shape = tuple(getattr(X, "shape", ()))
    if len(shape) not in (2, 3):
        raise ValueError(f"{name} must be a 2-D matrix or a 3-D batch of them, got shape {shape}")
    if np.dtype(X.dtype) != np.float32:
        raise TypeError(f"{name} must be float32, got {np.dtype(X.dtype)} (use {name}.astype(cupy.float32))")
    return shape


def _matrix(X) -> _Operand:
    """One product's matrix of a 3-D operand (its last two dimensions)."""
    return _Operand(tuple(X.shape[-2:]), tuple(X.strides[-2:]), X.dtype)


def _batch_stride(name: str, X, batch: int) -> int:
    """X's stride between products, in floats (0: every product reads the same matrix)."""
    if len(X.shape) == 2 or X.shape[0] == 1 or batch == 1:
        return 0
    if X.strides[0] % 4:
        raise ValueError(f"{name}'s batch stride {X.strides[0]} is not a whole number of float32 elements: "
                         f"pass cupy.ascontiguousarray({name})")
    return X.strides[0] // 4


def _products_apart(shape: tuple, strides: tuple) -> bool:
    """Whether no two elements of a (batch, M, N) view share memory: sorted by stride, each
    stride steps over everything the smaller ones reach."""
    reach = 0
    for n, s in sorted(((n, abs(s)) for n, s in zip(shape, strides) if n > 1), key=lambda t: t[1]):
        if s <= reach:
            return False
        reach += (n - 1) * s
    return True


def plan_call(A, B, C, alpha: float = 1.0, beta: float = 0.0) -> Call:
    """Check the operands and work out what the kernel gets (no GPU needed: only shapes,
    strides and dtypes are read, so NumPy arrays and stand-ins work too)."""
    _scalar("alpha", alpha)
    beta = _scalar("beta", beta)
    sa, sb = _dims("A", A), _dims("B", B)
    (M, K), (K2, N) = sa[-2:], sb[-2:]
    if K != K2:
        raise ValueError(f"inner dimensions differ: A is {sa}, B is {sb}; A's columns ({K}) must equal B's "
                         f"rows ({K2}); transpose one of them (X.T, or X.transpose(0, 2, 1) for a batch) if that "
                         "was meant")
    batched = len(sa) == 3 or len(sb) == 3
    counts = [s[0] for s in (sa, sb) if len(s) == 3]
    batch = max(counts, default=1)
    if any(c not in (1, batch) for c in counts):
        raise ValueError(f"batches of {sa[0]} and {sb[0]} products cannot be paired: give both the same "
                         "batch, or one a batch of 1 (or a 2-D matrix) to use it for every product")
    out = (batch, M, N) if batched else (M, N)
    if C is None:
        if beta != 0:
            raise ValueError(f"beta={beta} adds beta * C, but no C was given: pass C (of shape {out}, float32), "
                             "or beta=0")
    else:
        sc = _dims("C", C)
        if sc != out:
            raise ValueError(f"C has shape {sc}, but A @ B is {' x '.join(map(str, out))}; pass a C of shape {out}")
    if 0 in out:                                     # nothing to compute, nothing to read
        return Call(A, B, C, M, N, K, 0, 0, False, batch, (0, 0, 0), out, "empty", batched)
    if K == 0:                                       # C = beta * C
        return Call(A, B, C, M, N, K, 0, 0, False, batch, (0, 0, 0), out, "scale", batched)
    a, b = (_matrix(A), _matrix(B)) if batched else (A, B)
    la, lb = layout(a, "A"), layout(b, "B")
    strides = (_batch_stride("A", A, batch), _batch_stride("B", B, batch), 0)
    c = None
    if C is not None:
        c = _matrix(C) if batched else C
        lc = layout(c, "C")
        if batched and batch > 1:
            strides = strides[:2] + (_batch_stride("C", C, batch),)
            if not _products_apart(tuple(C.shape), tuple(s // 4 for s in C.strides)):
                raise ValueError(f"C's products overlap in memory (shape {sc}, strides {tuple(C.strides)}): each "
                                 "product needs its own C; pass cupy.empty of that shape, or a copy")
        if lc.transposed:
            # C column-major: C^T (N x M) is row-major; C^T = op(B)^T op(A)^T
            return Call(b.T, a.T, c.T, N, M, K, int(not lb.transposed), int(not la.transposed), True, batch,
                        (strides[1], strides[0], strides[2]), out, "gemm", batched)
    elif batched and batch > 1:
        strides = strides[:2] + (M * N,)             # a new C: products one after another
    return Call(a, b, c, M, N, K, int(la.transposed), int(lb.transposed), False, batch, strides, out, "gemm",
                batched)


# ------------------------------------------------------------------ launching a kernel
# The kernels' parameter lists, as in their signatures (kernels/12_final.cu, 12_pack.cu,
# 12_reduce.cu): (name, type) in order; "ptr" is any pointer.
FINAL_PARAMS = (("M", "int"), ("N", "int"), ("K", "int"), ("alpha", "float"), ("A", "ptr"), ("lda", "int"),
                ("B", "ptr"), ("ldb", "int"), ("beta", "float"), ("C", "ptr"), ("ldc", "int"),
                ("partials", "ptr"), ("arrivals", "ptr"))
BATCHED_PARAMS = FINAL_PARAMS + (("batch_a", "long long"), ("batch_b", "long long"), ("batch_c", "long long"))
PACK_PARAMS = (("R", "int"), ("K", "int"), ("X", "ptr"), ("ld", "int"), ("dst", "ptr"), ("ldd", "int"))
ADD_PARAMS = (("M", "int"), ("N", "int"), ("parts", "int"), ("alpha", "float"), ("W", "ptr"), ("ldw", "int"),
              ("beta", "float"), ("C", "ptr"), ("ldc", "int"))
_CTYPES = {"int": ctypes.c_int32, "float": ctypes.c_float, "long long": ctypes.c_int64, "ptr": ctypes.c_uint64}
_NUMPY = {"int": np.int32, "float": np.float32, "long long": np.int64, "ptr": np.uint64}

_driver = getattr(getattr(cupy, "cuda", None), "driver", None)
# cuLaunchKernel as CuPy exposes it: (function, grid x, y, z, block x, y, z, shared memory bytes,
# stream, kernel parameters, extra). None (a CuPy without it): launches go through CuPy's Function.
_launch_kernel = getattr(_driver, "launchKernel", None)
_DriverError = getattr(_driver, "CUDADriverError", RuntimeError)
CUDA_ERROR_INVALID_CONTEXT = 201     # the calling thread has no CUDA context current
USE_GRAPHS = True            # launch a call's kernels as one CUDA graph where the driver offers graphs
STREAM_GRAPHS = 8            # graphs a plan keeps, one per stream; beyond, the oldest is dropped (the
                             # driver frees a dropped graph once its launches in flight are done)


class Launch:
    """One launch of a plan: a compiled CUDA function, its grid, block and shared memory, and its
    parameters as ``cuLaunchKernel`` takes them: the values in a ctypes structure ``args``, a
    field per parameter named as in the kernel's signature, and an array of pointers to them.
    The plan fills in the values that never change once; a call writes the ones that do
    (operands, alpha, beta, the workspace) and launches. The driver copies the values at the
    launch, so the structure may be written again as soon as :meth:`launch` returns."""

    def __init__(self, fn, grid, block, smem: int, signature: tuple, **values):
        self.fn, self.signature = fn, signature
        self.grid = tuple(max(1, int(g)) for g in (tuple(grid) + (1, 1))[:3])
        self.block = tuple(max(1, int(b)) for b in (tuple(block) + (1, 1))[:3])
        self.smem = int(smem)
        fields = [(name, _CTYPES[kind]) for name, kind in signature]
        self.args = type("Args", (ctypes.Structure,), {"_fields_": fields})(**values)
        for name, v in values.items():          # ctypes wraps a value its type cannot hold: refuse it
            if getattr(self.args, name) != v:
                raise ValueError(f"{name} = {v} does not fit the kernel's {dict(signature)[name]} parameter")
        self.pointers = self._pointers(self.args)
        self.params = ctypes.addressof(self.pointers)
        self.ptr = fn.ptr

    def _pointers(self, args):
        """The array of pointers to the fields of ``args``, in the signature's order."""
        base, kind = ctypes.addressof(args), type(args)
        return (ctypes.c_void_p * len(self.signature))(*(base + getattr(kind, name).offset
                                                         for name, _ in self.signature))

    def copy_parameters(self) -> tuple:
        """A copy of the parameter structure, as it holds now, and the array of pointers to its fields."""
        args = type(self.args).from_buffer_copy(self.args)
        return args, self._pointers(args)

    def launch(self, stream, grid=None) -> None:
        """Launch on ``stream`` (a CuPy stream) with the values the structure holds now (``grid``:
        another grid than the plan's)."""
        gx, gy, gz = grid or self.grid
        if _launch_kernel is None:
            self.fn((gx, gy, gz), self.block, tuple(_NUMPY[kind](getattr(self.args, name))
                                                    for name, kind in self.signature),
                    shared_mem=self.smem, stream=stream)
            return
        bx, by, bz = self.block
        _launch_kernel(self.ptr, gx, gy, gz, bx, by, bz, self.smem, stream.ptr, self.params, 0)


# ------------------------------------------------------------------ the plan of a call
_CHECKED: set = set()        # alpha and beta values (Python floats) found finite already


def _f32(name: str, v) -> float:
    """alpha or beta, checked to be a finite real number."""
    if type(v) is float and v in _CHECKED:
        return v
    v = _scalar(name, v)
    if len(_CHECKED) < 64:
        _CHECKED.add(v)
    return v


class _Workspace:
    """Partial tiles (and packed operands) and arrival counters of the launches on one stream
    of one device. Launches on one stream run one after another, so they share it; the kernel
    leaves the counters zero. It grows to the largest plan that used it. A call's launches
    (packing, the product, adding the slabs) reach the stream together, under ``lock``: another
    thread's call on the same stream, of any plan, would otherwise land between them and
    overwrite the parts or packed operands they pass on. A workspace that grows into a larger
    one passes its lock on. ``shared``: the stream's (False: a big product's own, for one call)."""

    def __init__(self, floats: int, counters: int, shared: bool = True, lock=None):
        self.lock = lock or threading.Lock()
        self.shared = shared
        self.n_floats, self.n_counters = max(floats, 1), counters
        self.floats = cupy.empty(self.n_floats, dtype=cupy.float32)
        self.counters = cupy.zeros(counters, dtype=cupy.uint32) if counters else None
        self.base = self.floats.data.ptr
        self.counters_at = self.counters.data.ptr if counters else 0

    def fits(self, floats: int, counters: int) -> bool:
        return floats <= self.n_floats and counters <= self.n_counters

    def at(self, offset: int) -> int:
        """The address of float ``offset``."""
        return self.base + 4 * offset


_NO_LOCK = contextlib.nullcontext()     # a call without a workspace shares nothing with other plans
_WORKSPACES: dict = {}       # (device id, stream pointer) -> _Workspace
KEEP_BYTES = 256 * 2**20     # a stream keeps a workspace up to this size; a bigger one lives for its call
_WS_LOCK = threading.Lock()


# the current stream and device, as CuPy keeps them (tests put stand-ins here)
_current_stream = cupy.cuda.get_current_stream
_device_id = cupy.cuda.runtime.getDevice


def _make_context_current() -> None:
    """Make the current device's CUDA context current in this thread (a thread that has made no
    CUDA runtime call yet has none, and a driver launch needs one), as CuPy does before its launches."""
    cupy.cuda.runtime.memGetInfo()


class Plan:
    """Everything a call with these shapes, strides, dtypes, ``params`` and device launches,
    worked out once: the config, the compiled kernels, grids, workspace sizes, and the
    arguments that do not change from call to call. Calling it launches."""

    def __init__(self, call: Call, device: Device, device_id: int, params: dict | None):
        self.call, self.device, self.device_id = call, device, device_id
        self.kind, self.out_shape, self.swapped = call.kind, call.out_shape, call.swapped
        self.params = None
        self.captured: list = []          # workspaces of launches recorded into CUDA graphs
        # a call launched kernel by kernel writes its operands into the kernels' parameter
        # structures, then launches: one such call of this plan at a time does so
        self.lock = threading.Lock()
        self.computes = call.kind == "gemm"       # else: no kernel of ours (an empty C, or K = 0)
        if not self.computes:
            return
        M, N, K = call.M, call.N, call.K
        p = dict(params or choose_config(M, N, K, device, call.a_t, call.b_t, batch=call.batch))
        # the kernel reads an operand as it lies, or its packed copy (A transposed, B row-major)
        p.update(A_T=1 if p.get("PACK_A") else call.a_t, B_T=0 if p.get("PACK_B") else call.b_t)
        batch = call.batch
        per_launch = batch
        if batch > 1:
            p = final.SPEC.resolve(p)
            why = final.batch_problem(p)
            if why:
                raise ConfigError(f"final {final.label(p)}: {why}")
            per_launch = min(batch, MAX_GRID_YZ // p["SPLITK"])
        launcher = prepare(final.SPEC, M, N, K, p, device, geometry=dict(batch=per_launch),
                           expression=final.batched_expression(final.SPEC.resolve(p)) if batch > 1 else None)
        self.params = p = launcher.params
        self.floats, self.counters = launcher.ws_sizes
        a, b, c = call.A, call.B, call.C
        lda = pack_module.row_floats(M) if p["PACK_A"] else leading_dimension(a, "A", bool(p["A_T"]))
        ldb = pack_module.row_floats(N) if p["PACK_B"] else leading_dimension(b, "B", bool(p["B_T"]))
        ldc = N if c is None else leading_dimension(c, "C", False)
        self.batch_strides = call.strides
        strides = dict(zip(("batch_a", "batch_b", "batch_c"), call.strides)) if batch > 1 else {}
        self.main = Launch(launcher.kernel.kernel, launcher.grid, launcher.block, launcher.smem,
                           BATCHED_PARAMS if batch > 1 else FINAL_PARAMS,
                           M=M, N=N, K=K, lda=lda, ldb=ldb, ldc=ldc, **strides)
        # a batch of more products than a grid holds along z: launches of per_launch products,
        # each with its operands' pointers moved to its first product; (first product, grid)
        self.launches = []
        for start in range(0, batch, per_launch):
            count = min(per_launch, batch - start)     # the last launch may hold fewer: a smaller grid
            grid = self.main.grid if count == per_launch else self.main.grid[:2] + (p["SPLITK"] * count,)
            self.launches.append((start, grid))
        # packing: the operands as the kernel reads them (op(A), op(B)) copied into the workspace
        fa, fb = final.packed_floats(p, M, N, K)
        self.packs = []
        for op, X, R, offset in (("A", a, M, 0), ("B", b, N, fa)):
            if p[f"PACK_{op}"]:
                along_k, ld = pack_module.source_layout(X, op)
                if max(R, K) >= INT32_LIMIT:
                    raise ValueError(f"{op} ({R} x {K}) does not fit the packing kernel's int arguments")
                self.packs.append((op, offset, Launch(pack_module._kernel(along_k, device).kernel,
                                                      pack_module.grid(R, K), pack_module.BLOCK, 0, PACK_PARAMS,
                                                      R=R, K=K, ld=ld, ldd=pack_module.row_floats(R))))
        self.pack_a, self.pack_b = 0 if p["PACK_A"] else None, fa if p["PACK_B"] else None   # offsets in floats
        self.partials_at = fa + fb if self.floats > fa + fb else None
        # slabs: a second kernel adds them into C
        self.reduce = None
        if p["REDUCE"]:
            self.reduce = Launch(reduce_module._kernel(device).kernel, reduce_module.grid(M, N, device),
                                 (reduce_module.THREADS, 1, 1), 0, ADD_PARAMS,
                                 M=M, N=N, parts=p["SPLITK"], ldw=reduce_module.pitch(N), ldc=ldc)
        # the kernels of a call, in order; one graph holds them all (a batch in several launches: none)
        self.kernels = [pack for _, _, pack in self.packs] + [self.main] + ([self.reduce] if self.reduce else [])
        self.args = [L.args for L in self.kernels]
        self.in_graph = len(self.launches) == 1
        self.uses_workspace = bool(self.floats or self.counters)
        self.own_workspace = 4 * self.floats > KEEP_BYTES
        # what a call writes into the packing kernels' parameters: (kernel's index, reads A)
        self.pack_reads = [(i, op == "A") for i, (op, _, _) in enumerate(self.packs)]
        self.graphs: dict = {}          # stream pointer -> its graphs.LaunchGraph (False: launch one by one)

    def workspace(self, stream, capturing: bool) -> _Workspace | None:
        """This call's workspace: the stream's own, or (in a CUDA graph capture) one kept with the plan."""
        if not self.uses_workspace:
            return None
        if capturing:
            ws = _Workspace(self.floats, self.counters, shared=False)
            self.captured.append(ws)
            return ws
        if self.own_workspace:                       # a big product: its own, freed after it (on this stream)
            return _Workspace(self.floats, self.counters, shared=False)
        key = (self.device_id, stream.ptr)
        ws = _WORKSPACES.get(key)
        if ws is None or ws.n_floats < self.floats or ws.n_counters < self.counters:
            with _WS_LOCK:
                ws = _WORKSPACES.get(key)
                if ws is None or not ws.fits(self.floats, self.counters):
                    old = (ws.n_floats, ws.n_counters) if ws else (0, 0)
                    ws = _WORKSPACES[key] = _Workspace(max(self.floats, old[0]), max(self.counters, old[1]),
                                                       lock=ws.lock if ws else None)
        return ws

    def __call__(self, A, B, C, alpha, beta):
        if alpha.__class__ is not float or alpha not in _CHECKED:
            alpha = _f32("alpha", alpha)
        if beta.__class__ is not float or beta not in _CHECKED:
            beta = _f32("beta", beta)
        if C is None:
            if beta != 0:
                raise ValueError(f"beta={beta} adds beta * C, but no C was given: pass C (of shape "
                                 f"{self.out_shape}, float32), or beta=0")
            if not self.computes or alpha == 0:
                return cupy.zeros(self.out_shape, dtype=cupy.float32)
            C = cupy.empty(self.out_shape, dtype=cupy.float32)
        if not self.computes or alpha == 0:
            return _scale(C, beta, self.kind == "empty")
        # the addresses the launches get; A, B and C are held by this frame until they return
        a, b, c = A.data.ptr, B.data.ptr, C.data.ptr
        if self.swapped:
            a, b = b, a
        stream = _current_stream()
        graph = self.graphs.get(stream.ptr)
        if graph and not stream.is_capturing():      # the common case: the stream's graph, made before
            ws = self.workspace(stream, False) if self.uses_workspace else None
            status = self._launch_graph(graph, ws, a, b, c, alpha, beta)
            if status == CUDA_ERROR_INVALID_CONTEXT:    # this thread has no context yet
                _make_context_current()
                status = self._launch_graph(graph, ws, a, b, c, alpha, beta)
            if status:
                raise graphs.GraphError("launching the graph of a call", status)
            return C
        try:
            self._launch(a, b, c, alpha, beta, stream)
        except (_DriverError, graphs.GraphError) as e:     # no context in this thread: the first launch failed
            if getattr(e, "status", None) != CUDA_ERROR_INVALID_CONTEXT:
                raise
            _make_context_current()
            self._launch(a, b, c, alpha, beta, stream)
        return C

    def graph(self, stream):
        """The graph of this plan's kernels for ``stream``, made at its first call there; None
        where the kernels launch one by one (a batch in several launches, no graphs in the driver)."""
        g = self.graphs.get(stream.ptr)
        if g is None:
            with self.lock:                          # one thread at a time adds a stream's graph
                g = self.graphs.get(stream.ptr)
                if g is None:
                    g = self._new_graph(stream)
        return g or None

    def _new_graph(self, stream):
        """Make and keep the stream's graph (False: the kernels launch one by one there)."""
        g = False
        if USE_GRAPHS and self.in_graph and graphs.available():
            try:
                g = graphs.LaunchGraph(self.kernels, stream.ptr)
            except graphs.GraphError as e:
                if e.status == CUDA_ERROR_INVALID_CONTEXT:
                    raise                            # made again once the thread has a context
        if len(self.graphs) >= STREAM_GRAPHS:        # a program that makes a stream per call keeps only a few
            self.graphs.pop(next(iter(self.graphs)))
        self.graphs[stream.ptr] = g
        return g

    def _write_workspace(self, args: list, ws: _Workspace) -> None:
        """Write the workspace's addresses into the parameter structures ``args`` of :attr:`kernels`
        (the launches' own, or a graph's copies): where the operands are packed to, the partial
        tiles, the arrival counters."""
        base = ws.base
        partials = 0 if self.partials_at is None else base + 4 * self.partials_at
        for i, (_, offset, _) in enumerate(self.packs):
            args[i].dst = base + 4 * offset
        main = args[len(self.packs)]
        if self.pack_a is not None:
            main.A = base + 4 * self.pack_a
        if self.pack_b is not None:
            main.B = base + 4 * self.pack_b
        main.partials, main.arrivals = partials, ws.counters_at
        if self.reduce is not None:
            args[-1].W = partials

    def _write_operands(self, args: list, a: int, b: int, c: int, alpha: float, beta: float) -> None:
        """Write a call's operands, alpha and beta into the parameter structures ``args``."""
        for i, reads_a in self.pack_reads:                    # the packing kernels read the operands
            args[i].X = a if reads_a else b
        main = args[len(self.packs)]
        if self.pack_a is None:
            main.A = a
        if self.pack_b is None:
            main.B = b
        main.alpha, main.beta, main.C = alpha, beta, c
        if self.reduce is not None:
            add = args[-1]
            add.alpha, add.beta, add.C = alpha, beta, c

    def _launch_graph(self, graph, ws, a: int, b: int, c: int, alpha: float, beta: float) -> int:
        """Write the call's values into the graph's copies of the parameters and launch it; the
        CUresult (0: launched). The graph keeps the workspace whose addresses its copies hold, so
        they are written again only when the stream's workspace changes."""
        # the stream's lock: a call launched one by one there (another plan's) passes its workspace
        # from kernel to kernel, and a graph must not land between them
        with ws.lock if ws is not None and ws.shared else graph.lock:
            if ws is not graph.workspace:
                self._write_workspace(graph.args, ws)
                graph.workspace = ws if ws.shared else None     # a big product's own is freed after its call
            self._write_operands(graph.args, a, b, c, alpha, beta)
            return graph.launch()

    def _launch(self, a: int, b: int, c: int, alpha: float, beta: float, stream) -> None:
        """Launch the call's kernels in order (the packing kernels, the product, in parts where the
        batch exceeds a grid, the adding of slabs): as the stream's graph where there is one (not in
        a capture; made at its first call there); else one by one."""
        capturing = stream.is_capturing()
        ws = self.workspace(stream, capturing) if self.uses_workspace else None
        graph = None if capturing else self.graph(stream)
        if graph is not None:
            status = self._launch_graph(graph, ws, a, b, c, alpha, beta)
            if status:
                raise graphs.GraphError("launching the graph of a call", status)
            return
        with self.lock, (_NO_LOCK if ws is None else ws.lock):
            if ws is not None:
                self._write_workspace(self.args, ws)
            self._write_operands(self.args, a, b, c, alpha, beta)
            for _, _, pack in self.packs:
                pack.launch(stream)
            if len(self.launches) == 1:
                self.main.launch(stream)
            else:
                args = self.main.args
                sa, sb, sc = self.batch_strides
                a, b = args.A, args.B                # the product's operands, as written above
                for start, grid in self.launches:
                    args.A, args.B, args.C = a + 4 * start * sa, b + 4 * start * sb, c + 4 * start * sc
                    self.main.launch(stream, grid)
            if self.reduce is not None:
                self.reduce.launch(stream)


def _scale(C, beta: float, empty: bool):
    """What BLAS does without a product: an empty C as it is; else C = beta * C (beta = 0: zeros,
    whatever C held)."""
    if empty or beta == 1:
        return C
    if beta == 0:
        C.fill(0)
    else:
        cupy.multiply(C, np.float32(beta), out=C)
    return C


_PLANS: dict = {}            # (device id, target, shapes, strides, C's, params) -> Plan
MAX_PLANS = 1024             # plans kept; beyond, the oldest are dropped


def _key(A, B, C, params: dict | None, device_id: int) -> tuple:
    # the emulated target (SGEMM_BOOK_TARGET) decides the device model: its raw value is part of the key
    return (device_id, settings.target_as_set(), A.shape, A.strides, B.shape, B.strides,
            None if C is None else (C.shape, C.strides), tuple(sorted(params.items())) if params else None)


def plan_for(A, B, C=None, params: dict | None = None) -> Plan:
    """The plan of ``sgemm(A, B, C, params=params)``: checked, chosen and compiled the first
    time, remembered after (a ValueError/TypeError names what is wrong with the operands)."""
    operands = (("A", A), ("B", B)) + ((("C", C),) if C is not None else ())
    for name, X in operands:
        if not isinstance(X, cupy.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray on the GPU, got {type(X).__name__} "
                            "(cupy.asarray copies a NumPy array over)")
    device_id = _device_id()
    for name, X in operands:
        if X.data.device_id != device_id:
            raise ValueError(f"{name} lives on GPU {X.data.device_id}, the kernel runs on GPU {device_id}; "
                             f"use cupy.cuda.Device({X.data.device_id}) or copy it over")
    key = _key(A, B, C, params, device_id)
    plan = _PLANS.get(key)
    if plan is None:
        call = plan_call(_operand(A), _operand(B), _operand(C))
        plan = Plan(call, hardware.current(), device_id, dict(params) if params else None)
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.pop(next(iter(_PLANS), None), None)
        _PLANS[key] = plan
    return plan


def clear_plans() -> None:
    """Forget every plan and free the streams' workspaces (the next calls plan again)."""
    _PLANS.clear()
    _WORKSPACES.clear()


def sgemm(A, B, C=None, alpha: float = 1.0, beta: float = 0.0, params: dict | None = None):
    """``C = alpha * op(A) @ op(B) + beta * C`` with the final kernel; returns C.

    ``A`` (M x K) and ``B`` (K x N) may be row-major views with any row stride or
    transposed views (``X.T``); ``C`` (M x N) row-major or column-major, or None for a
    new one (then ``beta`` must be 0). 3-D operands are a batch (a 2-D one is used by every
    product); C is then (batch, M, N). ``params`` overrides the chosen config (its layout
    flags are set from the operands, or to the packed layout where it packs one).
    BLAS semantics at the edges: an empty C returns at once; K = 0 or ``alpha = 0`` gives
    ``C = beta * C``. The checks and the choice are worked out once per shapes, strides,
    dtypes, ``params`` and device (:func:`plan_for`), so a call in a loop costs the host
    little more than its launches.
    """
    ndarray = cupy.ndarray
    if (A.__class__ is ndarray and B.__class__ is ndarray and A.dtype is F32 and B.dtype is F32
            and (C is None or (C.__class__ is ndarray and C.dtype is F32))):
        device_id = _device_id()
        plan = _PLANS.get(_key(A, B, C, params, device_id))
        if (plan is not None and A.data.device_id == device_id and B.data.device_id == device_id
                and (C is None or C.data.device_id == device_id)):
            return plan(A, B, C, alpha, beta)
    if C is None and beta != 0:
        plan_call(_operand(A), _operand(B), None, alpha, beta)      # raises: beta * C without a C
    return plan_for(A, B, C, params)(A, B, C, alpha, beta)


def chosen(A, B, C=None) -> dict:
    """The template parameters ``sgemm(A, B, C)`` launches with (as the kernel reads the
    operands: swapped where C is column-major, the packed layout where it packs one; empty where
    the call launches nothing)."""
    return dict(plan_for(A, B, C).params or {})


def matmul(A, B, params: dict | None = None):
    """C = A @ B with the final kernel and the config :func:`choose_config` picks for the
    shape (or ``params``); C starts as NaN, so an element the kernel never writes shows."""

    M, N = A.shape[-2], B.shape[-1]
    batch = max([X.shape[0] for X in (A, B) if X.ndim == 3], default=None)
    C = cupy.full((M, N) if batch is None else (batch, M, N), np.nan, dtype=cupy.float32)
    return sgemm(A, B, C, params=params)


def chapter_sweep(device: Device) -> list:
    """What the final chapter records: the default at three sizes, the choice at 4096,
    8192 and every suite shape, and one knob at a time around the 4096/8192 choices."""
    spec = final.SPEC
    c4, c8 = choose_config(4096, 4096, 4096, device), choose_config(8192, 8192, 8192, device)
    items = ([(spec.defaults(), (n, n, n)) for n in (1024, 2048, 4096)]
             + [(c4, (4096,) * 3), (c8, (8192,) * 3)]
             + [(choose_config(*s, device), s) for s in SUITE]
             + [(dict(c4, STAGES=st), (4096,) * 3) for st in (2, 3, 4) if st != c4["STAGES"]]
             + [(dict(c8, GROUP=0), (8192,) * 3)])
    out = []
    for params, shape in items:
        if (params, shape) not in out and spec.is_valid(params, device):
            out.append((params, shape))
    return [(spec, p, s) for p, s in out]
