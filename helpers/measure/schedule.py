"""The order blocks really run in: a traced copy of the coalescing kernel (chapter "Global-memory coalescing").

Thread (0, 0) of each block writes the SM it ran on (``%smid``) and the GPU's
nanosecond clock (``%globaltimer``) when the block started and when all its threads
had finished. :func:`helpers.models.coalescing.schedule_summary` turns the trace into
which rows of A and columns of B the blocks running at one moment share.
``python -m helpers record --chapter coalescing_schedule`` records it.
"""
from __future__ import annotations

import cupy
import numpy as np

from .. import hardware
from ..models.coalescing import schedule_summary
from ..runtime.check import random_matrix, require_fp32_cublas
from ..runtime.specs.coalescing import SPEC

TRACE_SOURCE = r"""
// sgemm_coalescing from kernels/03_coalescing.cu, plus a trace.
template <int BX, int BY, int SWAP>
__global__ void sgemm_coalescing_traced(int M, int N, int K,
                                        const float* __restrict__ A,
                                        const float* __restrict__ B,
                                        float* __restrict__ C,
                                        unsigned long long* __restrict__ trace)
{
    unsigned long long t_start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_start));

    const int block_col = SWAP ? blockIdx.y : blockIdx.x;
    const int block_row = SWAP ? blockIdx.x : blockIdx.y;
    const int col = block_col * BX + threadIdx.x;
    const int row = block_row * BY + threadIdx.y;
    if (row < M && col < N) {                       // no early return: the barrier needs everyone
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }

    __syncthreads();                                // the block is done when its last warp is
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        unsigned int sm;
        unsigned long long t_end;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_end));
        const unsigned long long b = (unsigned long long)blockIdx.y * gridDim.x + blockIdx.x;  // launch order
        trace[3 * b + 0] = sm;
        trace[3 * b + 1] = t_start;
        trace[3 * b + 2] = t_end;
    }
}
"""

CONFIGS = ({"BX": 64, "BY": 4, "SWAP": 0}, {"BX": 64, "BY": 4, "SWAP": 1},
           {"BX": 32, "BY": 32, "SWAP": 0}, {"BX": 32, "BY": 32, "SWAP": 1})


def trace_schedule(params: dict, n: int = 4096):
    """Run the traced kernel once after a warm-up: (trace (blocks, 3), ms, relative error)."""
    require_fp32_cublas()
    device = hardware.current()
    p = SPEC.validate(params, device)
    expr = f"sgemm_coalescing_traced<{p['BX']}, {p['BY']}, {p['SWAP']}>"
    kern = cupy.RawModule(code=TRACE_SOURCE, options=("-std=c++17",), name_expressions=[expr]).get_function(expr)
    rng = cupy.random.default_rng(0)
    A, B = random_matrix(n, n, rng), random_matrix(n, n, rng)
    C = cupy.empty((n, n), dtype=cupy.float32)
    grid = SPEC.grid(p, n, n, n, device)
    trace = cupy.zeros((grid[0] * grid[1] * grid[2], 3), dtype=cupy.uint64)
    args = (np.int32(n), np.int32(n), np.int32(n), A, B, C, trace)
    kern(grid, SPEC.block(p), args)                 # warm-up: module load, clocks
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    kern(grid, SPEC.block(p), args)
    end.record()
    end.synchronize()
    ref = A @ B
    err = float(cupy.linalg.norm(C - ref) / cupy.linalg.norm(ref))
    return cupy.asnumpy(trace), cupy.cuda.get_elapsed_time(start, end), err


def record_rows(configs=CONFIGS, n: int = 4096, log=print) -> list[dict]:
    """Trace the block schedule of a few coalescing configs at n x n x n."""
    rows = []
    for p in configs:
        trace, ms, err = trace_schedule(p, n)
        row = schedule_summary(trace, p, n, n, n)
        row.update(kernel="coalescing", kernel_ms=ms, rel_err=err, source_hash=SPEC.source_hash())
        rows.append(row)
        m = row["median"]
        if log:
            log(f"   {p}: {ms:.2f} ms, {row['blocks']} blocks on {row['sms']} SMs; in flight {m['in_flight']:.0f}, "
                f"per SM {m['sm_blocks']:.1f} blocks over {m['sm_row_strips']:.1f} row / {m['sm_col_strips']:.1f} "
                f"column strips")
    return rows
