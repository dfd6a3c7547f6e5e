"""helpers.sgemm's host time per call, without a GPU: what Python does between two launches.

CuPy's arrays, the current device and stream, the compiler and the launches are replaced by
stand-ins that do nothing (:func:`stand_ins`), so that what is timed is the plan lookup, the
checks of the operands and the writing of the launch parameters: the part of a call's host
time that the library itself adds. A real launch adds the driver's few microseconds per kernel
(scripts/calls_check.py measures whole calls on a GPU).

    python scripts/calls_host_profile.py [--calls 20000]

tests/test_gemm_plans.py uses the same stand-ins to check, without a GPU, what each plan
launches: kernels, grids and arguments.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import itertools
import re
import statistics
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers import hardware, settings  # noqa: E402
from helpers.hardware import Device  # noqa: E402
from helpers.measure.calls import path_of  # noqa: E402
from helpers.runtime import gemm, pack, reduce  # noqa: E402

REFERENCE = Device.from_datasheet("NVIDIA H200")
_next_ptr = itertools.count(1 << 32, 1 << 24)


class Memory:
    def __init__(self, ptr: int, device_id: int = 0):
        self.ptr, self.device_id = ptr, device_id


class Array:
    """A float32 CuPy array as the library sees it: shape, strides, dtype and a device pointer."""

    def __init__(self, shape, strides=None, dtype=np.float32, ptr=None, device_id=0):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        if strides is None:
            strides, step = [], self.dtype.itemsize
            for n in reversed(self.shape):
                strides.insert(0, step)
                step *= max(n, 1)
        self.strides = tuple(strides)
        self.data = Memory(next(_next_ptr) if ptr is None else ptr, device_id)
        self.filled = None

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape)))

    @property
    def T(self):
        return Array(self.shape[::-1], self.strides[::-1], self.dtype, self.data.ptr, self.data.device_id)

    def transpose(self, *axes):
        return Array([self.shape[a] for a in axes], [self.strides[a] for a in axes], self.dtype, self.data.ptr)

    def fill(self, value):
        self.filled = value


_FUNCTIONS: dict = {}        # a stand-in CUDA function's address -> the function
_next_function = itertools.count(0x7000)


class Function:
    """A CUDA function that records the launches CuPy makes of it (``RawKernel.kernel``)."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log
        self.ptr = next(_next_function)
        _FUNCTIONS[self.ptr] = self

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        self.log.append((self.name, grid, block, args, shared_mem))


class RawKernel:
    def __init__(self, name: str, log: list):
        self.kernel = Function(name, log)


_C_TYPES = {"int": ctypes.c_int32, "unsigned": ctypes.c_uint32, "float": ctypes.c_float,
            "long long": ctypes.c_int64, "ptr": ctypes.c_uint64}


@functools.lru_cache(maxsize=None)
def kernel_parameters(name: str) -> tuple:
    """The parameter list of kernel ``name`` (a template's name without its arguments), read from
    its signature in kernels/12_*.cu: (name, type) in order, type "int", "float", "long long"
    or "ptr" (any pointer)."""
    pattern = re.compile(r"__global__\s+void\s+(?:\w+(?:\([^)]*\))?\s+)*" + re.escape(name) + r"\s*\(([^)]*)\)")
    for path in sorted(settings.KERNEL_DIR.glob("12_*.cu")):
        found = pattern.search(path.read_text())
        if found:
            out = []
            for param in found.group(1).split(","):
                words = param.replace("*", " * ").split()
                kind = "ptr" if "*" in words else " ".join(w for w in words[:-1] if w != "const")
                out.append((words[-1], kind))
            return tuple(out)
    raise LookupError(f"no kernel {name} in {settings.KERNEL_DIR}/12_*.cu")


def read_parameters(params: int, signature: tuple) -> list:
    """The values a ``cuLaunchKernel`` parameter array (the address of an array of pointers, one
    per parameter) points to, read as the kernel's parameter list types them."""
    pointers = (ctypes.c_void_p * len(signature)).from_address(params)
    return [_C_TYPES[kind].from_address(pointers[i]).value for i, (_, kind) in enumerate(signature)]


def driver_launch(log: list, decode: bool = True):
    """A stand-in for CuPy's ``driver.launchKernel`` that records each launch as
    (name, grid, block, values, shared memory): the values read from the parameter array through
    the kernel's own parameter list (``decode=False``: only the function's address, for timing)."""

    def launch_kernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        fn = _FUNCTIONS[f]
        values = read_parameters(params, kernel_parameters(fn.name.split("<")[0]))
        log.append((fn.name, (gx, gy, gz), (bx, by, bz), values, smem))
    return launch_kernel if decode else (lambda f, *args: log.append(f))


class Stream:
    ptr = 0

    @staticmethod
    def is_capturing() -> bool:
        return False


class LaunchGraph:
    """A stand-in for :class:`helpers.runtime.graphs.LaunchGraph`: its own copies of the launches'
    parameters, as the real one keeps them; launching it launches each kernel in turn through
    ``gemm._launch_kernel`` (the driver stand-in) with the copy's values."""

    def __init__(self, launches: list, stream_ptr: int):
        self.launches, self.stream_ptr = launches, stream_ptr
        self.args, self.pointers = map(list, zip(*(L.copy_parameters() for L in launches)))
        self.lock = threading.Lock()
        self.workspace = None

    def launch(self) -> int:
        for L, pointers in zip(self.launches, self.pointers):
            gemm._launch_kernel(L.ptr, *L.grid, *L.block, L.smem, self.stream_ptr, ctypes.addressof(pointers), 0)
        return 0


def stand_ins(log: list | None = None, device: Device = REFERENCE, driver: bool = True, decode: bool = True,
              graphs: bool = False):
    """A context in which helpers.runtime.gemm runs on stand-ins; launches go to ``log``, through
    the driver's launch (:func:`driver_launch`), or with ``driver=False`` through CuPy's Function
    (the path of a CuPy without ``launchKernel``); ``graphs``: each call's kernels as one graph
    (:class:`LaunchGraph`, whose kernels go to the driver's launch)."""
    log = [] if log is None else log

    def prepare(spec, M, N, K, params=None, device=None, geometry=None, expression=None):
        full = spec.validate(params, device=device)
        spec.check_shape(full, M, N, K, device)
        grid, ws = spec.geometry(full, M, N, K, device, **(geometry or {}))
        return SimpleNamespace(params=full, kernel=RawKernel(expression or spec.name_expression(full), log),
                               grid=grid, block=spec.block(full), smem=spec.smem_bytes(full), ws_sizes=ws)

    fake_cupy = SimpleNamespace(ndarray=Array, float32=np.float32, uint32=np.uint32,
                                empty=lambda shape, dtype=np.float32: Array(np.atleast_1d(shape), dtype=dtype),
                                zeros=lambda shape, dtype=np.float32: _zeros(shape, dtype),
                                multiply=lambda C, beta, out: log.append(("multiply", float(beta), out)))

    def _zeros(shape, dtype):
        a = Array(np.atleast_1d(shape), dtype=dtype)
        a.filled = 0
        return a

    @contextlib.contextmanager
    def patched():
        saved = dict(cupy=gemm.cupy, prepare=gemm.prepare, _device_id=gemm._device_id,
                     _current_stream=gemm._current_stream,
                     _launch_kernel=gemm._launch_kernel, USE_GRAPHS=gemm.USE_GRAPHS, graphs=gemm.graphs)
        current, default, pack_kernel, reduce_kernel = hardware.current, hardware.default, pack._kernel, reduce._kernel
        gemm.cupy, gemm.prepare = fake_cupy, prepare
        gemm._device_id, gemm._current_stream = (lambda: 0), (lambda: Stream)
        gemm._launch_kernel = driver_launch(log, decode) if driver else None
        gemm.USE_GRAPHS = graphs                      # else every kernel launched on its own
        gemm.graphs = SimpleNamespace(available=lambda: True, LaunchGraph=LaunchGraph,
                                      GraphError=saved["graphs"].GraphError)
        hardware.current = hardware.default = lambda: device
        pack._kernel = lambda along_k, device: RawKernel(f"pack_kmajor<{along_k}>", log)
        reduce._kernel = lambda device: RawKernel("add_parts", log)
        gemm.clear_plans()
        try:
            yield log
        finally:
            gemm.clear_plans()
            for k, v in saved.items():
                setattr(gemm, k, v)
            hardware.current, hardware.default, pack._kernel, reduce._kernel = current, default, pack_kernel, reduce_kernel
    return patched()


# (name, A's shape, B's shape): the dispatcher's choice for each (the line printed says what it launches);
# "T4096": B a transposed view, which the dispatcher packs at that size
CASES = [
    ("128x128x128", (128, 128), (128, 128)),
    ("1209x86x1898", (1209, 1898), (1898, 86)),
    ("64x64x8192", (64, 8192), (8192, 64)),
    ("451x434x319", (451, 319), (319, 434)),
    ("4096x4096x4096, B^T", (4096, 4096), "T4096"),
    ("64 x 128x128x128", (64, 128, 128), (64, 128, 128)),
    ("32 x 256x64x256, B shared", (32, 256, 256), (256, 64)),
]


def operands(a_shape, b_shape, sets: int = 8):
    out = []
    for _ in range(sets):
        A = Array(a_shape)
        B = Array((int(b_shape[1:]),) * 2).T if isinstance(b_shape, str) else Array(b_shape)
        M, N = A.shape[-2], B.shape[-1]
        batch = max([X.shape[0] for X in (A, B) if X.ndim == 3], default=None)
        out.append((A, B, Array((M, N) if batch is None else (batch, M, N))))
    return out


def profile(calls: int = 20000, log=print, graphs: bool = False) -> list[dict]:
    """Median CPU microseconds per sgemm call on stand-ins, per case (5 rounds of ``calls``): the
    process's own CPU time, so that other work on the machine does not count. ``graphs``: the
    kernels of a call launched as one graph (a stand-in graph that hands each to the launch stand-in)."""
    rows = []
    sets = operands((128, 128), (128, 128))

    def bare(A, B, C=None, alpha=1.0, beta=0.0, params=None):      # a call that does nothing
        return C
    times = []
    for _ in range(5):
        t0 = time.process_time()
        for i in range(calls):
            A, B, C = sets[i % 8]
            bare(A, B, C)
        times.append((time.process_time() - t0) / calls * 1e6)
    rows.append(dict(case="a Python call that does nothing", us=statistics.median(times), launches=0, label=""))
    log(f"{rows[-1]['case']:38s} {rows[-1]['us']:6.2f} us per call (this machine's pace)")
    with stand_ins(decode=False, graphs=graphs) as launches:
        for name, a_shape, b_shape in CASES:
            sets = operands(a_shape, b_shape)
            for A, B, C in sets:                      # plan once (the first call of each set finds it)
                gemm.sgemm(A, B, C)
            plan = gemm.plan_for(*sets[0])
            per = len(launches) // len(sets)
            times = []
            for _ in range(5):
                launches.clear()
                t0 = time.process_time()
                for i in range(calls):
                    A, B, C = sets[i % 8]
                    gemm.sgemm(A, B, C)
                times.append((time.process_time() - t0) / calls * 1e6)
            launches.clear()
            rows.append(dict(case=name, us=statistics.median(times), launches=per, path=path_of(plan),
                             label=gemm.final.label(plan.params)))
            log(f"{name:38s} {rows[-1]['us']:6.2f} us per call, {path_of(plan)}, {per} launch(es): {rows[-1]['label']}")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--graphs", action="store_true", help="launch each call's kernels as one graph")
    args = ap.parse_args(argv)
    print(f"helpers.sgemm on stand-ins (no launches), {args.calls} calls over 8 operand sets, median of 5"
          f"{', kernels as one graph' if args.graphs else ''}:")
    profile(args.calls, graphs=args.graphs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
