// 07_bank_conflicts.cu -- four ways to lay out shared memory, one kernel.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
// Block tile 128 x 128 x BK, 256 threads, 8 x 8 results per thread, float4
// global loads and A's tile transposed as in 06_vectorized.cu.
//
// Template parameters (the variants compared in chapter "Bank conflicts")
//   BK       k-slice per step (8 or 16)
//   SPLIT    0: thread (trow, tcol) owns rows trow*8..+7 and columns tcol*8..+7.
//               A quarter-warp's LDS.128 of B then hits addresses 8 words apart:
//               lanes 0 and 4 share banks, a 2-way conflict.
//            1: the 8 x 8 tile is split into four 4 x 4 pieces 64 rows / columns
//               apart: rows trow*4..+3 and 64+trow*4..+3, same for columns. A
//               quarter-warp then reads 8 consecutive float4 = 32 banks, no conflict.
//   PAD      extra floats at the end of each row of As (0, 1 or 4). The
//            transposed store As[k][m] of 32 lanes lands on a stride-128 layout
//            (a multiple of 32 banks): 2-way conflicted for BK = 8. PAD = 4
//            shifts each k-row by 4 banks and removes it while keeping rows
//            16-byte aligned; PAD = 1 removes it too but misaligns the rows, so
//            the A reads must be four 32-bit LDS instead of one LDS.128.
//   SWIZZLE  1: store and read As[k][m ^ x(k)] with x(k) = (k / 4) * (32 / (BK / 4)),
//            a multiple of 4: the lanes that collide without it move to the other
//            banks, and each aligned float4 stays contiguous. No padding needed.
//
// Preconditions: none on M, N, K >= 1; float4 paths only where aligned and
//   inside the matrices (K % 4, N % 4 as in 06), scalar with zero fill elsewhere.
// Shared memory: BK * (128 + PAD) * 4 + BK * 128 * 4 bytes, static.

template <int BK, int SPLIT, int PAD, int SWIZZLE>
__global__ void __launch_bounds__(256)
sgemm_bank_conflicts(int M, int N, int K,
                     const float* __restrict__ A,
                     const float* __restrict__ B,
                     float* __restrict__ C)
{
    constexpr int BM = 128, BN = 128, TM = 8, TN = 8, THREADS = 256;
    constexpr int ROWS_PER_WARP_STORE = 32 / (BK / 4);    // A rows one warp stores at once
    static_assert(BK % 4 == 0 && BK <= 32, "BK: a multiple of 4, at most 32");
    static_assert(!(PAD && SWIZZLE), "pad or swizzle, not both");

    __shared__ __align__(16) float As[BK][BM + PAD];   // (BK, BM + PAD): A's tile, transposed
    __shared__ __align__(16) float Bs[BK][BN];         // (BK, BN)

    // Where element (k, m) of the transposed A tile lives in its row.
    auto a_col = [](int k, int m) {
        return SWIZZLE ? (m ^ ((k / 4) * ROWS_PER_WARP_STORE % 32)) : m;
    };

    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN);    // 0..15
    const int trow = tid / (BN / TN);    // 0..15
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;
    const bool a_vec = (K % 4) == 0, b_vec = (N % 4) == 0;

    // The four-float groups this thread owns along m and along n.
    auto m_of = [&](int g) { return SPLIT ? trow * 4 + g * (BM / 2) : trow * TM + g * 4; };
    auto n_of = [&](int g) { return SPLIT ? tcol * 4 + g * (BN / 2) : tcol * TN + g * 4; };

    float acc[TM][TN] = {};
    float a[TM], b[TN];

    for (int k0 = 0; k0 < K; k0 += BK) {
        // ---- load A (float4 along k) and store it transposed ----
        for (int i = tid; i < BM * BK / 4; i += THREADS) {
            const int r = i / (BK / 4), c = (i % (BK / 4)) * 4;
            const int gr = row0 + r, gc = k0 + c;
            float v[4];
            if (a_vec && gr < M && gc + 3 < K) {
                const float4 t = *reinterpret_cast<const float4*>(&A[gr * K + gc]);
                v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
            } else {
                #pragma unroll
                for (int j = 0; j < 4; ++j) v[j] = (gr < M && gc + j < K) ? A[gr * K + gc + j] : 0.0f;
            }
            #pragma unroll
            for (int j = 0; j < 4; ++j) As[c + j][a_col(c + j, r)] = v[j];
        }
        // ---- load B (float4 along n), stored as is ----
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

        // ---- compute ----
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            #pragma unroll
            for (int g = 0; g < 2; ++g) {
                const float* pa = &As[k][a_col(k, m_of(g))];
                if (PAD % 4 == 0) {                    // rows stay 16-byte aligned: LDS.128
                    *reinterpret_cast<float4*>(&a[4 * g]) = *reinterpret_cast<const float4*>(pa);
                } else {                               // misaligned rows: four 32-bit loads
                    #pragma unroll
                    for (int j = 0; j < 4; ++j) a[4 * g + j] = pa[j];
                }
                *reinterpret_cast<float4*>(&b[4 * g]) = *reinterpret_cast<const float4*>(&Bs[k][n_of(g)]);
            }
            #pragma unroll
            for (int m = 0; m < TM; ++m)
                #pragma unroll
                for (int n = 0; n < TN; ++n) acc[m][n] += a[m] * b[n];
        }
        __syncthreads();
    }

    // ---- store: float4 where aligned and inside C ----
    #pragma unroll
    for (int m = 0; m < TM; ++m) {
        const int row = row0 + m_of(m / 4) + m % 4;
        if (row >= M) continue;
        #pragma unroll
        for (int g = 0; g < 2; ++g) {
            const int col = col0 + n_of(g);
            if (b_vec && col + 3 < N) {
                *reinterpret_cast<float4*>(&C[row * N + col]) =
                    make_float4(acc[m][4 * g], acc[m][4 * g + 1], acc[m][4 * g + 2], acc[m][4 * g + 3]);
            } else {
                #pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (col + j < N) C[row * N + col + j] = acc[m][4 * g + j];
            }
        }
    }
}
