// 04_smem_tiling.cu -- blocks stage TILE x TILE tiles of A and B in shared memory.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
//
// Two kernels:
//   sgemm_smem_tiling_unguarded  the textbook form: no bounds checks, so it is only
//                                correct when M, N and K are multiples of TILE
//                                (its spec refuses every other shape).
//   sgemm_smem_tiling            the same loop with edges handled: correct for any
//                                M, N, K >= 1. This is the chapter's kernel.
//
// Template parameters
//   TILE    the block computes a TILE x TILE tile of C with TILE x TILE threads,
//           one element each, and walks K in steps of TILE.
//   SWAP    (guarded kernel) 1: blockIdx.x walks the rows of C, the faster grid
//           order of chapter "Coalescing"; 0: blockIdx.x walks the columns.
//           The unguarded kernel always uses the order of SWAP = 1.
//
// Thread -> element mapping (as in 03_coalescing.cu, x along a row of C)
//   row = (block row) * TILE + threadIdx.y,  col = (block column) * TILE + threadIdx.x
//
// What changed from 03_coalescing.cu
//   Each step, the block's threads copy one TILE x TILE tile of A and one of B
//   into shared memory (each thread one float of each), wait, then each thread
//   reads TILE floats of each from shared memory. A float loaded from global
//   memory is now used by TILE threads instead of one: global traffic drops by
//   a factor of TILE.
//
// Edges (guarded kernel, any M, N, K >= 1): a tile that sticks out of A or B is
//   filled with zeros instead of loading past the end, so the extra products add
//   0; threads outside C compute but do not store. They must not return early:
//   every thread of the block takes part in the loads and the __syncthreads().
//
// Preconditions: M*K, K*N, M*N < 2^31: indices are 32-bit ints (larger shapes
//   are refused before launch).
//
// Shared memory: 2 * TILE * TILE * 4 bytes (8 KB for TILE = 32), static.

// ============================================================================
// The textbook kernel: correct only when M, N, K are multiples of TILE.
// ============================================================================
template <int TILE>
__global__ void sgemm_smem_tiling_unguarded(int M, int N, int K,
                                            const float* __restrict__ A,
                                            const float* __restrict__ B,
                                            float* __restrict__ C)
{
    static_assert(TILE * TILE <= 1024, "one thread per element of a TILE x TILE tile");

    __shared__ float As[TILE][TILE];   // (TILE rows of A, TILE columns of the k-slice)
    __shared__ float Bs[TILE][TILE];   // (TILE rows of the k-slice, TILE columns of B)

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.x * TILE + ty;
    const int col = blockIdx.y * TILE + tx;

    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // ---- load: no checks. If K % TILE != 0, k0 + tx runs past the end of a
        //      row of A into the next row (wrong numbers) and, on the last row,
        //      past the end of A; the same for rows of B and the columns of C. ----
        As[ty][tx] = A[row * K + (k0 + tx)];
        Bs[ty][tx] = B[(k0 + ty) * N + col];
        __syncthreads();

        // ---- compute ----
        #pragma unroll
        for (int kk = 0; kk < TILE; ++kk) {
            acc += As[ty][kk] * Bs[kk][tx];
        }
        __syncthreads();
    }

    // ---- store: no check either ----
    C[row * N + col] = acc;
}

// ============================================================================
// The chapter's kernel: zero-filled edge tiles and a guarded store.
// ============================================================================
template <int TILE, int SWAP>
__global__ void sgemm_smem_tiling(int M, int N, int K,
                                  const float* __restrict__ A,
                                  const float* __restrict__ B,
                                  float* __restrict__ C)
{
    static_assert(TILE * TILE <= 1024, "one thread per element of a TILE x TILE tile");
    static_assert(SWAP == 0 || SWAP == 1, "SWAP is a flag");

    // region tiles: the two tiles in shared memory
    __shared__ float As[TILE][TILE];   // (TILE rows of A, TILE columns of the k-slice)
    __shared__ float Bs[TILE][TILE];   // (TILE rows of the k-slice, TILE columns of B)
    // endregion tiles

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = (SWAP ? blockIdx.x : blockIdx.y) * TILE + ty;
    const int col = (SWAP ? blockIdx.y : blockIdx.x) * TILE + tx;

    float acc = 0.0f;
    // region loop: copy, wait, compute, wait
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // ---- load: each thread copies one float of each tile (zero outside) ----
        const int a_col = k0 + tx;
        const int b_row = k0 + ty;
        As[ty][tx] = (row < M && a_col < K) ? A[row * K + a_col] : 0.0f;
        Bs[ty][tx] = (b_row < K && col < N) ? B[b_row * N + col] : 0.0f;
        __syncthreads();               // the tiles are complete before anyone reads them

        // ---- compute: TILE products from shared memory ----
        #pragma unroll
        for (int kk = 0; kk < TILE; ++kk) {
            acc += As[ty][kk] * Bs[kk][tx];
        }
        __syncthreads();               // everyone is done before the tiles are overwritten
    }

    // ---- store ----
    if (row < M && col < N) C[row * N + col] = acc;
    // endregion loop
}
