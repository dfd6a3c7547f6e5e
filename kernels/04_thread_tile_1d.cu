// 04_thread_tile_1d.cu -- each thread computes TM elements of a column of C.
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
// Loads: the threads sweep the BM x BK tile of A and the BK x BN tile of B in
//   strides of the thread count, consecutive threads on consecutive addresses;
//   elements outside A or B are stored as zeros (any M, N, K >= 1).
//
// Shared memory: (BM * BK + BK * BN) * 4 bytes, static (4 KB for 64, 64, 8).
// What changed from 03_smem_tiling.cu: TM results per thread, so each value of
//   B read from shared memory feeds TM multiply-adds instead of one.

template <int BM, int BN, int BK, int TM, int LOOP>
__global__ void __launch_bounds__(BM * BN / TM)
sgemm_thread_tile_1d(int M, int N, int K,
                     const float* __restrict__ A,
                     const float* __restrict__ B,
                     float* __restrict__ C)
{
    constexpr int THREADS = BM * BN / TM;
    static_assert(BM % TM == 0, "TM must divide BM");
    static_assert(THREADS <= 1024 && THREADS % 32 == 0, "1..32 whole warps per block");

    __shared__ float As[BM][BK];   // (BM rows of A, BK columns of the k-slice)
    __shared__ float Bs[BK][BN];   // (BK rows of the k-slice, BN columns of B)

    const int tid = threadIdx.x;
    const int tcol = tid % BN;
    const int trow = tid / BN;
    const int row0 = blockIdx.y * BM;   // first row of the block's tile
    const int col0 = blockIdx.x * BN;   // first column

    float acc[TM] = {0.0f};

    for (int k0 = 0; k0 < K; k0 += BK) {
        // ---- load: stride over the tiles, zeros outside A and B ----
        for (int i = tid; i < BM * BK; i += THREADS) {
            const int r = i / BK, c = i % BK;
            const int gr = row0 + r, gc = k0 + c;
            As[r][c] = (gr < M && gc < K) ? A[gr * K + gc] : 0.0f;
        }
        for (int i = tid; i < BK * BN; i += THREADS) {
            const int r = i / BN, c = i % BN;
            const int gr = k0 + r, gc = col0 + c;
            Bs[r][c] = (gr < K && gc < N) ? B[gr * N + gc] : 0.0f;
        }
        __syncthreads();

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
    }

    // ---- store: guarded ----
    const int col = col0 + tcol;
    #pragma unroll
    for (int m = 0; m < TM; ++m) {
        const int row = row0 + trow * TM + m;
        if (row < M && col < N) C[row * N + col] = acc[m];
    }
}
