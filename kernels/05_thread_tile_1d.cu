// 05_thread_tile_1d.cu -- each thread computes TM elements of a column of C.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
//
// Template parameters
//   BM, BN  the block computes a BM x BN tile of C
//   BK      the k-slice staged in shared memory per step
//   TM      results per thread, stacked in a column: threads = BM * BN / TM
//   LOOP    1: k outer, the B value kept in a register across the TM products;
//           0: result outer, k inner (a dot product per result, re-reading B
//              from shared memory each time). Same arithmetic; chapter
//              "1D thread tiles" compares the machine code the compiler makes.
//
// Thread -> tile mapping
//   tid = threadIdx.x;  tcol = tid % BN  (a column of the tile)
//                       trow = tid / BN  (rows trow*TM .. trow*TM + TM-1)
//   Consecutive threads hold consecutive columns: a warp reads Bs[k][tcol]
//   as 32 consecutive words (no bank conflict) and As[r][k] as one word
//   (a broadcast), since all its threads share trow when BN >= 32.
//
// Loads: each step, the block copies a BM x BK tile of A and a BK x BN tile of
//   B. Thread tid copies elements tid, tid + THREADS, tid + 2*THREADS, ... of
//   each tile in row-major order: consecutive threads read consecutive
//   addresses. A_LOADS = ceil(BM*BK / THREADS) per thread (B_LOADS likewise);
//   when THREADS does not divide the tile, the last round is partial and
//   guarded. Elements outside A or B are stored as zeros (any M, N, K >= 1).
//
// Preconditions (also rules of the spec): TM divides BM; THREADS = BM*BN/TM is
//   a whole number of warps and at most 1024; static shared memory <= 48 KB.
//   M*K, K*N, M*N < 2^31: indices are 32-bit ints (larger shapes are refused before launch).
// Shared memory: (BM * BK + BK * BN) * 4 bytes, static (16 KB for 64, 64, 32).
// What changed from 04_smem_tiling.cu: TM results per thread, so each value of
//   B read from shared memory feeds TM multiply-adds instead of one, and the
//   block tile (BM x BN) no longer has to equal the thread count.

// __launch_bounds__: the block size is fixed, so the compiler may budget
// registers for it. For 1024-thread blocks we also promise only one block per
// SM (up to 64 registers per thread) rather than letting it squeeze the kernel
// into 32 registers with spills; 0 leaves the choice to the compiler.
template <int BM, int BN, int BK, int TM, int LOOP>
__global__ void __launch_bounds__(BM * BN / TM, (BM * BN / TM == 1024) ? 1 : 0)
sgemm_thread_tile_1d(int M, int N, int K,
                     const float* __restrict__ A,
                     const float* __restrict__ B,
                     float* __restrict__ C)
{
    constexpr int THREADS = BM * BN / TM;
    constexpr int A_LOADS = (BM * BK + THREADS - 1) / THREADS;   // floats of A per thread per step
    constexpr int B_LOADS = (BK * BN + THREADS - 1) / THREADS;   // floats of B per thread per step
    constexpr bool A_EVEN = (BM * BK) % THREADS == 0;             // no thread is left over
    constexpr bool B_EVEN = (BK * BN) % THREADS == 0;
    static_assert(BM % TM == 0, "TM must divide BM");
    static_assert(THREADS <= 1024 && THREADS % 32 == 0, "1..32 whole warps per block");

    __shared__ float As[BM][BK];   // (BM rows of A, BK columns of the k-slice)
    __shared__ float Bs[BK][BN];   // (BK rows of the k-slice, BN columns of B)

    // region mapping: which column and which TM rows a thread owns
    const int tid = threadIdx.x;
    const int tcol = tid % BN;
    const int trow = tid / BN;
    const int row0 = blockIdx.y * BM;   // first row of the block's tile
    const int col0 = blockIdx.x * BN;   // first column
    // endregion mapping

    float acc[TM] = {0.0f};

    for (int k0 = 0; k0 < K; k0 += BK) {
        // region copy: the threads share the copy of both tiles
        // ---- load: thread tid copies elements tid, tid + THREADS, ... of each
        //      tile (consecutive threads, consecutive addresses); zeros outside ----
        #pragma unroll
        for (int j = 0; j < A_LOADS; ++j) {
            const int i = tid + j * THREADS;           // element of the (BM, BK) tile
            if (A_EVEN || i < BM * BK) {
                const int r = i / BK, c = i % BK;
                const int gr = row0 + r, gc = k0 + c;
                As[r][c] = (gr < M && gc < K) ? A[gr * K + gc] : 0.0f;
            }
        }
        #pragma unroll
        for (int j = 0; j < B_LOADS; ++j) {
            const int i = tid + j * THREADS;           // element of the (BK, BN) tile
            if (B_EVEN || i < BK * BN) {
                const int r = i / BN, c = i % BN;
                const int gr = k0 + r, gc = col0 + c;
                Bs[r][c] = (gr < K && gc < N) ? B[gr * N + gc] : 0.0f;
            }
        }
        __syncthreads();
        // endregion copy

        // region compute: one shared load of B feeds TM multiply-adds
        // ---- compute: TM results per thread ----
        if (LOOP == 1) {
            #pragma unroll
            for (int k = 0; k < BK; ++k) {
                const float b = Bs[k][tcol];            // one shared load feeds TM FMAs
                #pragma unroll
                for (int m = 0; m < TM; ++m) acc[m] += As[trow * TM + m][k] * b;
            }
        } else {
            #pragma unroll
            for (int m = 0; m < TM; ++m) {
                #pragma unroll
                for (int k = 0; k < BK; ++k) acc[m] += As[trow * TM + m][k] * Bs[k][tcol];
            }
        }
        __syncthreads();
        // endregion compute
    }

    // region store: TM guarded stores
    // ---- store: guarded ----
    const int col = col0 + tcol;
    #pragma unroll
    for (int m = 0; m < TM; ++m) {
        const int row = row0 + trow * TM + m;
        if (row < M && col < N) C[row * N + col] = acc[m];
    }
    // endregion store
}
