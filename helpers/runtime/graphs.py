"""A call's kernels as one CUDA graph: one launch for the host, whatever the call runs.

A kernel launch costs the host a few microseconds in the driver, and a call of
``helpers.sgemm`` may run two or three kernels (packing, the product, adding slabs). A CUDA
graph holds a fixed sequence of kernels, each with its grid, block and shared memory; once
instantiated, it is launched with one driver call, however many kernels it holds. What changes from call to call (the operands' addresses, alpha, beta)
is written into each kernel node before the launch, with ``cuGraphExecKernelNodeSetParams``:
that updates the graph for its next launches only, so launches already queued keep the
values they were given.

The driver's graph functions are reached through ctypes (CuPy makes graphs only by capturing
a stream, which would cost more than a launch to redo at every call). Where the driver library
or one of these functions is missing, :func:`available` says so and calls launch their kernels
one by one, as before.
"""
from __future__ import annotations

import ctypes
import sys
import threading
import weakref

CUDA_SUCCESS = 0


class NodeParams(ctypes.Structure):
    """``CUDA_KERNEL_NODE_PARAMS`` (v2; v1 is its first ten fields): a kernel node's function,
    grid, block, shared memory and the array of pointers to its parameters."""

    _fields_ = [("func", ctypes.c_void_p),
                ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("kernelParams", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


_P, _U, _ULL, _SZ = ctypes.c_void_p, ctypes.c_uint, ctypes.c_ulonglong, ctypes.c_size_t
# (name, v2 name or None, argument types); every function returns a CUresult
_FUNCTIONS = (
    ("cuGraphCreate", None, [ctypes.POINTER(_P), _U]),
    ("cuGraphAddKernelNode", "cuGraphAddKernelNode_v2", [ctypes.POINTER(_P), _P, ctypes.POINTER(_P), _SZ, _P]),
    ("cuGraphInstantiateWithFlags", None, [ctypes.POINTER(_P), _P, _ULL]),
    ("cuGraphExecKernelNodeSetParams", "cuGraphExecKernelNodeSetParams_v2", [_P, _P, _P]),
    ("cuGraphLaunch", None, [_P, _P]),
    ("cuGraphExecDestroy", None, [_P]),
    ("cuGraphDestroy", None, [_P]),
    ("cuGetErrorName", None, [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
)


class _Driver:
    """The driver's graph functions, their argument types set (a call then converts plain ints)."""

    def __init__(self, lib):
        for name, v2, argtypes in _FUNCTIONS:
            fn = getattr(lib, v2, None) if v2 else None
            fn = fn or getattr(lib, name)            # AttributeError: the driver lacks it
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
            setattr(self, name, fn)

    def error_name(self, code: int) -> str:
        name = ctypes.c_char_p()
        if self.cuGetErrorName(code, ctypes.byref(name)) == CUDA_SUCCESS and name.value:
            return name.value.decode()
        return f"CUresult {code}"


_driver: _Driver | None | bool = None        # None: not looked for yet; False: not there


def driver() -> _Driver | None:
    """The driver's graph functions, or None where the driver library or one of them is missing."""
    global _driver
    if _driver is None:
        try:
            _driver = _Driver(ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"))
        except (OSError, AttributeError):
            _driver = False
    return _driver or None


def available() -> bool:
    return driver() is not None


class GraphError(RuntimeError):
    """A graph function failed; ``status`` is its CUresult."""

    def __init__(self, what: str, status: int):
        d = driver()
        super().__init__(f"{what} failed: {d.error_name(status) if d else status}")
        self.status = status


def _check(status: int, what: str) -> None:
    if status != CUDA_SUCCESS:
        raise GraphError(what, status)


def _destroy(d: _Driver, graph: int, graph_exec: int) -> None:
    d.cuGraphExecDestroy(graph_exec)
    d.cuGraphDestroy(graph)


class LaunchGraph:
    """The kernels of ``launches`` (:class:`helpers.runtime.gemm.Launch`), each after the one
    before, as one instantiated graph for one stream. The graph has its own copies of the
    launches' parameter structures, ``args`` (in the launches' order): a call writes its values
    there, and :meth:`launch` copies each into its node and launches the graph on the stream."""

    def __init__(self, launches: list, stream_ptr: int):
        d = self.d = driver()
        graph = _P()
        _check(d.cuGraphCreate(ctypes.byref(graph), 0), "cuGraphCreate")
        # the structures and pointer arrays the nodes point to live as long as the graph
        self.args, self.pointers, self.params, nodes = [], [], [], []
        try:
            before = None
            for L in launches:
                args, pointers = L.copy_parameters()
                p = NodeParams(L.ptr, *L.grid, *L.block, L.smem, ctypes.addressof(pointers), None, None, None)
                node = _P()
                _check(d.cuGraphAddKernelNode(ctypes.byref(node), graph, None if before is None else ctypes.byref(before),
                                              0 if before is None else 1, ctypes.addressof(p)), "cuGraphAddKernelNode")
                self.args.append(args)
                self.pointers.append(pointers)
                self.params.append(p)
                nodes.append(node)
                before = node
            graph_exec = _P()
            _check(d.cuGraphInstantiateWithFlags(ctypes.byref(graph_exec), graph, 0), "cuGraphInstantiate")
        except Exception:
            d.cuGraphDestroy(graph)
            raise
        self.exec = graph_exec.value
        # a launch passes these as they are: ctypes objects, which ctypes hands on without converting
        self.updates = [(graph_exec, node, ctypes.c_void_p(ctypes.addressof(p))) for node, p in zip(nodes, self.params)]
        self.start = (graph_exec, ctypes.c_void_p(stream_ptr))
        self.lock = threading.Lock()             # held by a caller while it writes ``args`` and launches
        self.workspace = None                    # the workspace whose addresses ``args`` holds (set by the caller)
        self._finalizer = weakref.finalize(self, _destroy, d, graph.value, self.exec)
        self._finalizer.atexit = False           # at exit the driver frees what the process holds

    def launch(self) -> int:
        """Copy every node's parameters from ``args`` into the graph and launch it on its stream;
        the CUresult (0: launched)."""
        set_params = self.d.cuGraphExecKernelNodeSetParams
        for update in self.updates:
            status = set_params(*update)
            if status:
                return status
        return self.d.cuGraphLaunch(*self.start)
