// 06_thread_tile_2d.cu -- each thread computes a TM x TN tile of C.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
//
// Template parameters
//   BM, BN  the block computes a BM x BN tile of C
//   BK      the k-slice staged in shared memory per step
//   TM, TN  each thread computes TM x TN results: threads = (BM / TM) * (BN / TN)
//
// Thread -> tile mapping (compute)
//   tid = threadIdx.x;  tcol = tid % (BN / TN),  trow = tid / (BN / TN)
//   thread (trow, tcol) owns rows trow*TM .. +TM-1 and columns tcol*TN .. +TN-1.
//   Per k it reads TM values of A and TN values of B from shared memory into
//   registers, then does TM * TN multiply-adds with them (an outer product):
//   TM*TN FMAs per TM+TN shared loads, 4 per load for 8 x 8 against 8/9 for the
//   1D tile of 05. The price: TM*TN accumulators + TM + TN operands in registers
//   (4*TM of A in practice: the compiler reads four k of a row of As at once).
//   Up to 256 threads, two blocks must fit an SM (__launch_bounds__): at most 128
//   registers per thread; the spec refuses tiles that would not fit.
//
// Thread -> tile mapping (loads)
//   The threads sweep each tile row by row, consecutive threads on consecutive
//   columns (consecutive addresses), one float per load: thread tid loads column
//   tid % BK of A-tile rows tid / BK + l * (THREADS / BK), and column tid % BN of
//   B-tile rows tid / BN + l * (THREADS / BN), l = 0, 1, ... All of a thread's
//   loads are issued before the barrier. A sweep must cover whole rows (a rule:
//   BN <= THREADS; BK <= 32 <= THREADS always holds).
//
// Bounds: tiles wholly inside A, B and C take a fast path with no tests (the
//   same choice for every thread of a block, so no divergence); edge tiles store
//   zeros for elements outside A and B, and the final stores are guarded.
//   Correct for any M, N, K >= 1.
// Preconditions: M*K, K*N, M*N < 2^31: indices are 32-bit ints (larger shapes
//   are refused before launch).
// Shared memory: (BM * BK + BK * BN) * 4 bytes, static (16 KB for 128, 128, 16).
// What changed from 05_thread_tile_1d.cu: a 2D register tile instead of a column.

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), (BM / TM) * (BN / TN) <= 256 ? 2 : 1)
sgemm_thread_tile_2d(int M, int N, int K,
                     const float* __restrict__ A,
                     const float* __restrict__ B,
                     float* __restrict__ C)
{
    constexpr int THREADS = (BM / TM) * (BN / TN);
    // Loads: THREADS threads sweep a tile row by row, consecutive threads on
    // consecutive columns, THREADS / width rows per sweep.
    constexpr int A_ROW_STEP = THREADS / BK;                      // rows of As per sweep
    constexpr int B_ROW_STEP = THREADS / BN;                      // rows of Bs per sweep
    constexpr int A_LOADS = (BM + A_ROW_STEP - 1) / A_ROW_STEP;   // sweeps over As
    constexpr int B_LOADS = (BK + B_ROW_STEP - 1) / B_ROW_STEP;   // sweeps over Bs
    constexpr bool A_EXACT = BM % A_ROW_STEP == 0;   // else the last sweep sticks out of As
    constexpr bool B_EXACT = BK % B_ROW_STEP == 0;
    static_assert(BM % TM == 0 && BN % TN == 0, "thread tiles must tile the block tile");
    static_assert(THREADS <= 1024 && THREADS % 32 == 0, "1..32 whole warps per block");
    static_assert(THREADS % BK == 0 && THREADS % BN == 0, "a sweep covers whole rows of As and Bs");

    __shared__ float As[BM][BK];   // (BM rows of A, BK of the k-slice)
    __shared__ float Bs[BK][BN];   // (BK of the k-slice, BN columns of B)

    // region mapping
    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN);
    const int trow = tid / (BN / TN);
    // endregion mapping
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;
    const bool inside = row0 + BM <= M && col0 + BN <= N;   // the whole tile of C is inside
    const int a_row = tid / BK, a_col = tid % BK;           // this thread's first element of As
    const int b_row = tid / BN, b_col = tid % BN;           // and of Bs

    float acc[TM][TN] = {};        // (TM, TN) results, in registers
    float a[TM], b[TN];            // this k's operands, in registers

    for (int k0 = 0; k0 < K; k0 += BK) {
        // region load
        // ---- load: one float per element, zeros outside A and B ----
        if (inside && k0 + BK <= K) {                  // fast path: no tests
            #pragma unroll
            for (int l = 0; l < A_LOADS; ++l) {
                const int r = a_row + l * A_ROW_STEP;
                if (A_EXACT || r < BM) As[r][a_col] = A[(row0 + r) * K + k0 + a_col];
            }
            #pragma unroll
            for (int l = 0; l < B_LOADS; ++l) {
                const int r = b_row + l * B_ROW_STEP;
                if (B_EXACT || r < BK) Bs[r][b_col] = B[(k0 + r) * N + col0 + b_col];
            }
        } else {                                       // edge tiles: guarded, zero fill
            #pragma unroll
            for (int l = 0; l < A_LOADS; ++l) {
                const int r = a_row + l * A_ROW_STEP, gr = row0 + r, gc = k0 + a_col;
                if (A_EXACT || r < BM) As[r][a_col] = (gr < M && gc < K) ? A[gr * K + gc] : 0.0f;
            }
            #pragma unroll
            for (int l = 0; l < B_LOADS; ++l) {
                const int r = b_row + l * B_ROW_STEP, gr = k0 + r, gc = col0 + b_col;
                if (B_EXACT || r < BK) Bs[r][b_col] = (gr < K && gc < N) ? B[gr * N + gc] : 0.0f;
            }
        }
        __syncthreads();
        // endregion load

        // region outer_product
        // ---- compute: an outer product per k ----
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            #pragma unroll
            for (int m = 0; m < TM; ++m) a[m] = As[trow * TM + m][k];
            #pragma unroll
            for (int n = 0; n < TN; ++n) b[n] = Bs[k][tcol * TN + n];
            #pragma unroll
            for (int m = 0; m < TM; ++m)
                #pragma unroll
                for (int n = 0; n < TN; ++n) acc[m][n] += a[m] * b[n];
        }
        __syncthreads();
        // endregion outer_product
    }

    // ---- store: guarded ----
    #pragma unroll
    for (int m = 0; m < TM; ++m) {
        const int row = row0 + trow * TM + m;
        #pragma unroll
        for (int n = 0; n < TN; ++n) {
            const int col = col0 + tcol * TN + n;
            if (inside || (row < M && col < N)) C[row * N + col] = acc[m][n];
        }
    }
}
