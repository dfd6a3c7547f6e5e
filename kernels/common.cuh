// common.cuh -- device helpers that several kernels share, one definition each.
//
//   rows_aligned16    may a row-major matrix be read or written as float4?
//   load4_guarded     four floats of a row: one float4 when aligned and inside, else
//                     one at a time with zeros outside          (07, 08, 10)
//   store_split_8x8   the C store of the 128 x 128 tile with split 8 x 8 thread tiles (09)
//   cp_async4/16, cp_async_commit, cp_async_wait
//                     asynchronous copies global -> shared memory; before sm_80,
//                     ordinary loads and stores                 (09, 12)
#pragma once

// Every row of a row-major matrix X with `cols` columns starts on a 16-byte boundary:
// cols % 4 == 0 and X itself is aligned (cupy allocations are; a view into a bigger
// array may start anywhere). Then element (r, c) with c % 4 == 0 starts a float4.
__device__ __forceinline__ bool rows_aligned16(const float* X, int cols)
{
    return cols % 4 == 0 && reinterpret_cast<size_t>(X) % 16 == 0;
}

// Four floats of row r of a (rows, cols) row-major matrix, columns c .. c+3 (c % 4 == 0):
// one 16-byte load when `aligned` (rows_aligned16) and all four are inside, else one
// float at a time with zeros outside. Nothing outside the matrix is read.
// 32-bit indices: rows * cols < 2^31.
__device__ __forceinline__ float4 load4_guarded(const float* __restrict__ X, int rows, int cols,
                                                int r, int c, bool aligned)
{
    if (aligned && r < rows && c + 3 < cols)
        return *reinterpret_cast<const float4*>(&X[r * cols + c]);
    float4 v;
    v.x = (r < rows && c + 0 < cols) ? X[r * cols + c + 0] : 0.0f;
    v.y = (r < rows && c + 1 < cols) ? X[r * cols + c + 1] : 0.0f;
    v.z = (r < rows && c + 2 < cols) ? X[r * cols + c + 2] : 0.0f;
    v.w = (r < rows && c + 3 < cols) ? X[r * cols + c + 3] : 0.0f;
    return v;
}

// The 8 x 8 results acc of thread (trow, tcol) of a 16 x 16 grid, in a 128 x 128 tile of
// C at (row0, col0): rows trow*4 + {0..3, 64..67} and columns tcol*4 + {0..3, 64..67}
// (acc row 4g + i is tile row trow*4 + 64g + i, the same for columns). float4 stores when
// C's rows are aligned, guarded against the edges of C; 64-bit offsets.
__device__ __forceinline__ void store_split_8x8(const float (&acc)[8][8], float* C, int M, int N,
                                                int row0, int col0, int trow, int tcol)
{
    const bool vec = rows_aligned16(C, N);
    #pragma unroll
    for (int m = 0; m < 8; ++m) {
        const int row = row0 + trow * 4 + (m / 4) * 64 + m % 4;
        if (row >= M) continue;
        #pragma unroll
        for (int g = 0; g < 2; ++g) {
            const int col = col0 + tcol * 4 + g * 64;
            float* p = C + (size_t)row * N + col;
            if (vec && col < N) {             // N % 4 == 0: col < N means col + 3 < N
                *reinterpret_cast<float4*>(p) =
                    make_float4(acc[m][4 * g], acc[m][4 * g + 1], acc[m][4 * g + 2], acc[m][4 * g + 3]);
            } else {
                #pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (col + j < N) p[j] = acc[m][4 * g + j];
            }
        }
    }
}

// ---- cp.async: global -> shared memory without passing through registers ----
// `smem` is a shared-window byte address (from __cvta_generic_to_shared), computed once
// so that a copy costs no address conversion. A copy only starts here: it has landed
// after this thread's cp_async_wait<N>() that leaves at most N newer groups in flight,
// and other threads may read it after a __syncthreads() that follows that wait.
// Every asm has a "memory" clobber: the compiler must not move a shared-memory read of
// the copied data above the wait, nor a read of a stage being refilled below the copy
// that overwrites it (without it, the asm would be invisible to its memory analysis).
//
// GPUs before compute capability 8.0 (V100, T4) have no cp.async. There each copy is an
// ordinary load and a shared-memory store, done before the call returns, and commit and
// wait only keep the compiler from reordering. A copy that lands early breaks no rule
// above, so the pipelines stay correct; they lose the overlap that is their point.

// 4 bytes (any 4-byte-aligned address), cached in L1 (.ca).
__device__ __forceinline__ void cp_async4(unsigned smem, const float* gmem)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(smem), "l"(gmem) : "memory");
#else
    asm volatile("st.shared.f32 [%0], %1;\n" :: "r"(smem), "f"(*gmem) : "memory");
#endif
}
// The same reading only src_bytes (4 or 0) and zero-filling the rest: 0 writes a zero.
__device__ __forceinline__ void cp_async4(unsigned smem, const float* gmem, int src_bytes)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(smem), "l"(gmem), "r"(src_bytes) : "memory");
#else
    const float v = src_bytes ? *gmem : 0.0f;       // src_bytes 0: gmem is not read
    asm volatile("st.shared.f32 [%0], %1;\n" :: "r"(smem), "f"(v) : "memory");
#endif
}
// 16 bytes (both addresses 16-byte aligned), through L2 only (.cg).
__device__ __forceinline__ void cp_async16(unsigned smem, const float* gmem)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(smem), "l"(gmem) : "memory");
#else
    const float4 v = *reinterpret_cast<const float4*>(gmem);
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n"
                 :: "r"(smem), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
#endif
}
// The same reading only src_bytes (16 or 0): 0 writes 16 zero bytes.
__device__ __forceinline__ void cp_async16(unsigned smem, const float* gmem, int src_bytes)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(smem), "l"(gmem), "r"(src_bytes) : "memory");
#else
    const float4 v = src_bytes ? *reinterpret_cast<const float4*>(gmem) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n"
                 :: "r"(smem), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
#endif
}
// Close the group of copies this thread issued since its last commit.
__device__ __forceinline__ void cp_async_commit()
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
    asm volatile("" ::: "memory");
#endif
}
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait()
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#else
    asm volatile("" ::: "memory");
#endif
}
