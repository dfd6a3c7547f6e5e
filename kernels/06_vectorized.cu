// 06_vectorized.cu -- 16-byte (float4) global and shared-memory accesses.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
//
// Template parameters: BM, BN, BK, TM, TN as in 05_thread_tile_2d.cu
//   (TM and TN multiples of 4, BK a multiple of 4).
//
// What changed from 05_thread_tile_2d.cu
//   * Global loads are float4 (LDG.E.128): one instruction moves 4 floats.
//   * A's tile is stored TRANSPOSED in shared memory, As[k][m], so the TM values
//     a thread needs for one k are contiguous and come in TM/4 LDS.128 instead
//     of TM scalar LDS. B's tile is already k-major: TN/4 LDS.128 per k.
//
// Alignment (never a misaligned access)
//   A float4 load needs a 16-byte-aligned address. cupy allocations are aligned;
//   element (r, c) of a row-major matrix with `ld` columns is aligned when
//   ld % 4 == 0 and c % 4 == 0. So the vector path is taken only when K % 4 == 0
//   (for A) or N % 4 == 0 (for B and C) AND the four elements are inside the
//   matrix; everything else (edge tiles, odd K or N) takes a scalar path with
//   zero fill. Correct for any M, N, K >= 1.
//
// Thread -> tile mapping as in 05: tcol = tid % (BN/TN), trow = tid / (BN/TN).
// Shared memory: (BK * BM + BK * BN) * 4 bytes, static (8 KB for 128, 128, 8).

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
sgemm_vectorized(int M, int N, int K,
                 const float* __restrict__ A,
                 const float* __restrict__ B,
                 float* __restrict__ C)
{
    constexpr int THREADS = (BM / TM) * (BN / TN);
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "float4 granularity");
    static_assert(BM % TM == 0 && BN % TN == 0, "thread tiles must tile the block tile");
    static_assert(THREADS <= 1024 && THREADS % 32 == 0, "1..32 whole warps per block");

    __shared__ __align__(16) float As[BK][BM];   // (BK, BM): A's tile, transposed
    __shared__ __align__(16) float Bs[BK][BN];   // (BK, BN)

    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN);
    const int trow = tid / (BN / TN);
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;
    const bool a_vec = (K % 4) == 0;   // rows of A start 16-byte aligned
    const bool b_vec = (N % 4) == 0;   // rows of B and C start 16-byte aligned

    float acc[TM][TN] = {};
    float a[TM], b[TN];

    for (int k0 = 0; k0 < K; k0 += BK) {
        // ---- load A: a float4 along k, stored transposed into As[k][m] ----
        for (int i = tid; i < BM * BK / 4; i += THREADS) {
            const int r = i / (BK / 4), c = (i % (BK / 4)) * 4;
            const int gr = row0 + r, gc = k0 + c;
            float4 v;
            if (a_vec && gr < M && gc + 3 < K) {
                v = *reinterpret_cast<const float4*>(&A[gr * K + gc]);
            } else {                                   // edge or unaligned: one float at a time
                v.x = (gr < M && gc + 0 < K) ? A[gr * K + gc + 0] : 0.0f;
                v.y = (gr < M && gc + 1 < K) ? A[gr * K + gc + 1] : 0.0f;
                v.z = (gr < M && gc + 2 < K) ? A[gr * K + gc + 2] : 0.0f;
                v.w = (gr < M && gc + 3 < K) ? A[gr * K + gc + 3] : 0.0f;
            }
            As[c + 0][r] = v.x; As[c + 1][r] = v.y; As[c + 2][r] = v.z; As[c + 3][r] = v.w;
        }
        // ---- load B: a float4 along n, stored as is ----
        for (int i = tid; i < BK * BN / 4; i += THREADS) {
            const int r = i / (BN / 4), c = (i % (BN / 4)) * 4;
            const int gr = k0 + r, gc = col0 + c;
            float4 v;
            if (b_vec && gr < K && gc + 3 < N) {
                v = *reinterpret_cast<const float4*>(&B[gr * N + gc]);
            } else {
                v.x = (gr < K && gc + 0 < N) ? B[gr * N + gc + 0] : 0.0f;
                v.y = (gr < K && gc + 1 < N) ? B[gr * N + gc + 1] : 0.0f;
                v.z = (gr < K && gc + 2 < N) ? B[gr * N + gc + 2] : 0.0f;
                v.w = (gr < K && gc + 3 < N) ? B[gr * N + gc + 3] : 0.0f;
            }
            *reinterpret_cast<float4*>(&Bs[r][c]) = v;
        }
        __syncthreads();

        // ---- compute: operands come in LDS.128 ----
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            #pragma unroll
            for (int m = 0; m < TM; m += 4)
                *reinterpret_cast<float4*>(&a[m]) = *reinterpret_cast<const float4*>(&As[k][trow * TM + m]);
            #pragma unroll
            for (int n = 0; n < TN; n += 4)
                *reinterpret_cast<float4*>(&b[n]) = *reinterpret_cast<const float4*>(&Bs[k][tcol * TN + n]);
            #pragma unroll
            for (int m = 0; m < TM; ++m)
                #pragma unroll
                for (int n = 0; n < TN; ++n) acc[m][n] += a[m] * b[n];
        }
        __syncthreads();
    }

    // ---- store: float4 where aligned and inside C, else scalar ----
    #pragma unroll
    for (int m = 0; m < TM; ++m) {
        const int row = row0 + trow * TM + m;
        if (row >= M) continue;
        #pragma unroll
        for (int n = 0; n < TN; n += 4) {
            const int col = col0 + tcol * TN + n;
            if (b_vec && col + 3 < N) {
                *reinterpret_cast<float4*>(&C[row * N + col]) =
                    make_float4(acc[m][n], acc[m][n + 1], acc[m][n + 2], acc[m][n + 3]);
            } else {
                #pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (col + j < N) C[row * N + col + j] = acc[m][n + j];
            }
        }
    }
}
