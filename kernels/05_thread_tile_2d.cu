// 05_thread_tile_2d.cu -- each thread computes a TM x TN tile of C.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
//
// Template parameters
//   BM, BN  the block computes a BM x BN tile of C
//   BK      the k-slice staged in shared memory per step
//   TM, TN  each thread computes TM x TN results: threads = (BM / TM) * (BN / TN)
//
// Thread -> tile mapping
//   tid = threadIdx.x;  tcol = tid % (BN / TN),  trow = tid / (BN / TN)
//   thread (trow, tcol) owns rows trow*TM .. +TM-1 and columns tcol*TN .. +TN-1.
//
// Per k, a thread reads TM values of A and TN values of B from shared memory
// into registers, then does TM * TN multiply-adds with them (an outer product):
// TM*TN FMAs per TM+TN shared loads, 4 per load for 8 x 8, against 8/9 for 1D tiles.
// The price: TM*TN accumulators + TM + TN operands live in registers.
//
// Loads: strided over the tiles, consecutive threads on consecutive addresses,
//   zeros outside A and B (any M, N, K >= 1). Stores are guarded.
// Shared memory: (BM * BK + BK * BN) * 4 bytes, static (8 KB for 128, 128, 8).
// What changed from 04_thread_tile_1d.cu: a 2D register tile instead of a column.

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
sgemm_thread_tile_2d(int M, int N, int K,
                     const float* __restrict__ A,
                     const float* __restrict__ B,
                     float* __restrict__ C)
{
    constexpr int THREADS = (BM / TM) * (BN / TN);
    static_assert(BM % TM == 0 && BN % TN == 0, "thread tiles must tile the block tile");
    static_assert(THREADS <= 1024 && THREADS % 32 == 0, "1..32 whole warps per block");

    __shared__ float As[BM][BK];   // (BM rows of A, BK of the k-slice)
    __shared__ float Bs[BK][BN];   // (BK of the k-slice, BN columns of B)

    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN);
    const int trow = tid / (BN / TN);
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;

    float acc[TM][TN] = {};        // (TM, TN) results, in registers
    float a[TM], b[TN];            // this k's operands, in registers

    for (int k0 = 0; k0 < K; k0 += BK) {
        // ---- load: stride over the tiles, zeros outside A and B ----
        for (int i = tid; i < BM * BK; i += THREADS) {
            const int r = i / BK, c = i % BK;
            As[r][c] = (row0 + r < M && k0 + c < K) ? A[(row0 + r) * K + k0 + c] : 0.0f;
        }
        for (int i = tid; i < BK * BN; i += THREADS) {
            const int r = i / BN, c = i % BN;
            Bs[r][c] = (k0 + r < K && col0 + c < N) ? B[(k0 + r) * N + col0 + c] : 0.0f;
        }
        __syncthreads();

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
    }

    // ---- store: guarded ----
    #pragma unroll
    for (int m = 0; m < TM; ++m) {
        const int row = row0 + trow * TM + m;
        #pragma unroll
        for (int n = 0; n < TN; ++n) {
            const int col = col0 + tcol * TN + n;
            if (row < M && col < N) C[row * N + col] = acc[m][n];
        }
    }
}
