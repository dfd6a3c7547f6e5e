// 08_bank_conflicts.cu -- six shared-memory layouts of one kernel, for bank conflicts.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
// Block tile 128 x 128 x BK, 256 threads, 8 x 8 results per thread, float4
// global loads and A's tile stored transposed, as in 07_vectorized.cu.
//
// Shared memory has 32 banks of 4-byte words: word w is in bank w % 32. A warp's
// access is served in "wavefronts"; two lanes that touch different words of the
// same bank need two. The bank model the chapter uses serves a 16-byte access
// (LDS.128/STS.128) 8 lanes per wavefront, so 4 at least; 32-bit accesses can take
// just 1. The hardware does better on broadcasts: Nsight Compute's counters decide.
//
// Template parameters (the variants compared in the chapter "Bank conflicts")
//   BK       k-slice per step (8 or 16).
//   SPLIT    0: thread (trow, tcol) owns rows trow*8..+7 and columns tcol*8..+7,
//               as in 07. Eight lanes reading their float4 of B start 8 words
//               apart, so lanes 0 and 4 share banks: 2 wavefronts per 8 lanes.
//            1: the 8 x 8 tile is split into four 4 x 4 quadrants 64 apart:
//               rows trow*4..+3 and 64+trow*4..+3, the same for columns. Eight
//               lanes then read 8 consecutive float4 = 32 banks: no conflict.
//   PAD      floats added to each row of As (0, 1, 2 or 4). The transposed
//            store As[k][m] of one warp writes BK/4 k-rows at once (k = c + j,
//            c = 0, 4, ...), each at 32/(BK/4) consecutive m; with PAD = 0 the
//            rows are 128 words apart, a multiple of 32 banks, so they collide.
//            PAD shifts row k by k * PAD banks: PAD = 4 separates the 2 rows of
//            BK = 8 (shift 16), PAD = 2 the 4 rows of BK = 16 (shifts 0, 8, 16,
//            24); the other pairings still conflict. Rows stay 16-byte aligned
//            only for PAD = 4: with PAD = 2 they are 8-byte aligned and with
//            PAD = 1 4-byte aligned, and the same source then compiles to LDS.64
//            or 32-bit LDS reads of A (see the SASS counts in the chapter).
//   SWIZZLE  1: element (k, m) of the A tile lives at As[k][m ^ x(k)], with
//            x(k) = (k / 4) * (32 / (BK / 4)) % 32, a multiple of 8: the k-rows a
//            warp stores at once land in different banks, and since x has no
//            low bits each aligned float4 stays contiguous and aligned. No
//            padding, no lost LDS.128.
//
// Thread -> tile mapping (loads) as in 07: thread tid loads A-tile row
//   tid / (BK/4) + l * 256 / (BK/4), k-columns 4 * (tid % (BK/4)) .. +3, and B-tile
//   row tid / 32 + 8 * l, columns 4 * (tid % 32) .. +3, for l = 0 .. BK/8 - 1.
// Preconditions: none on M, N, K >= 1. float4 global accesses only where aligned
//   and inside, as in 07 (K % 4 == 0 and A 16-byte aligned for A; N % 4 == 0 and
//   B, C aligned for B and C), scalar with zero fill elsewhere; tiles wholly
//   inside take a fast path with no tests.
//   M*K, K*N, M*N < 2^31: indices are 32-bit ints (larger shapes are refused before launch).
// Shared memory: (BK * (128 + PAD) + BK * 128) * 4 bytes, static
//   (16 KB for the default BK = 16, PAD = 0).

#include "common.cuh"   // rows_aligned16, load4_guarded

template <int BK, int SPLIT, int PAD, int SWIZZLE>
__global__ void __launch_bounds__(256, 2)
sgemm_bank_conflicts(int M, int N, int K,
                     const float* __restrict__ A,
                     const float* __restrict__ B,
                     float* __restrict__ C)
{
    constexpr int BM = 128, BN = 128, TM = 8, TN = 8, THREADS = 256;
    constexpr int A_ROW_STEP = THREADS / (BK / 4);        // rows of A's tile per sweep (128, 64)
    constexpr int B_ROW_STEP = THREADS / (BN / 4);        // rows of B's tile per sweep (8)
    constexpr int A_LOADS = BM / A_ROW_STEP;              // float4 of A per thread per tile
    constexpr int B_LOADS = BK / B_ROW_STEP;              // float4 of B per thread per tile
    constexpr int ROWS_PER_WARP_STORE = 32 / (BK / 4);    // rows of A one warp stores at once
    static_assert(BK == 8 || BK == 16, "BK: 8 or 16");
    static_assert(!(PAD && SWIZZLE), "pad or swizzle, not both");

    __shared__ __align__(16) float As[BK][BM + PAD];   // (BK, BM + PAD): A's tile, transposed
    __shared__ __align__(16) float Bs[BK][BN];         // (BK, BN)

    // region swizzle
    // Column of As where element (k, m) of the transposed A tile lives.
    auto a_idx = [](int k, int m) {
        return SWIZZLE ? m ^ ((k / 4) * ROWS_PER_WARP_STORE % 32) : m;
    };
    // endregion swizzle

    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN);    // 0..15
    const int trow = tid / (BN / TN);    // 0..15
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;
    // Rows start 16-byte aligned: width a multiple of 4 floats, matrix itself aligned.
    const bool a_vec = rows_aligned16(A, K);
    const bool b_vec = rows_aligned16(B, N);
    const bool c_vec = rows_aligned16(C, N);
    const bool inside = a_vec && b_vec && c_vec && row0 + BM <= M && col0 + BN <= N;
    const int a_row = tid / (BK / 4), a_col = 4 * (tid % (BK / 4));   // first float4 of A's tile
    const int b_row = tid / (BN / 4), b_col = 4 * (tid % (BN / 4));   // and of B's tile

    // region split
    // The thread's rows (and columns) come in two groups of four: m_of(0), m_of(1).
    auto m_of = [&](int g) { return SPLIT ? trow * 4 + g * (BM / 2) : trow * TM + g * 4; };
    auto n_of = [&](int g) { return SPLIT ? tcol * 4 + g * (BN / 2) : tcol * TN + g * 4; };
    // endregion split

    float acc[TM][TN] = {};        // (TM, TN) results; row 4g+i is m_of(g)+i, same for columns
    float a[TM], b[TN];

    for (int k0 = 0; k0 < K; k0 += BK) {
        // ---- load: float4 from global memory into registers ----
        float4 va[A_LOADS], vb[B_LOADS];
        if (inside && k0 + BK <= K) {                  // fast path: no tests
            #pragma unroll
            for (int l = 0; l < A_LOADS; ++l)
                va[l] = *reinterpret_cast<const float4*>(&A[(row0 + a_row + l * A_ROW_STEP) * K + k0 + a_col]);
            #pragma unroll
            for (int l = 0; l < B_LOADS; ++l)
                vb[l] = *reinterpret_cast<const float4*>(&B[(k0 + b_row + l * B_ROW_STEP) * N + col0 + b_col]);
        } else {                                       // edge tiles: guarded, zero fill
            #pragma unroll
            for (int l = 0; l < A_LOADS; ++l)
                va[l] = load4_guarded(A, M, K, row0 + a_row + l * A_ROW_STEP, k0 + a_col, a_vec);
            #pragma unroll
            for (int l = 0; l < B_LOADS; ++l)
                vb[l] = load4_guarded(B, K, N, k0 + b_row + l * B_ROW_STEP, col0 + b_col, b_vec);
        }
        // region store_a
        // ---- store into shared memory: A transposed (the conflicted store), B as is ----
        #pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int r = a_row + l * A_ROW_STEP;
            As[a_col + 0][a_idx(a_col + 0, r)] = va[l].x;
            As[a_col + 1][a_idx(a_col + 1, r)] = va[l].y;
            As[a_col + 2][a_idx(a_col + 2, r)] = va[l].z;
            As[a_col + 3][a_idx(a_col + 3, r)] = va[l].w;
        }
        // endregion store_a
        #pragma unroll
        for (int l = 0; l < B_LOADS; ++l)
            *reinterpret_cast<float4*>(&Bs[b_row + l * B_ROW_STEP][b_col]) = vb[l];
        __syncthreads();

        // ---- compute: 2 + 2 groups of four operands, then an outer product ----
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            #pragma unroll
            for (int g = 0; g < 2; ++g) {
                // Four floats from As, read one by one: the compiler turns them into
                // one LDS.128 when it can prove the address 16-byte aligned (PAD % 4
                // == 0), two LDS.64 when 8-byte aligned (PAD == 2), else four LDS.
                const float* pa = &As[k][a_idx(k, m_of(g))];
                #pragma unroll
                for (int j = 0; j < 4; ++j) a[4 * g + j] = pa[j];
                *reinterpret_cast<float4*>(&b[4 * g]) = *reinterpret_cast<const float4*>(&Bs[k][n_of(g)]);
            }
            #pragma unroll
            for (int m = 0; m < TM; ++m)
                #pragma unroll
                for (int n = 0; n < TN; ++n) acc[m][n] += a[m] * b[n];
        }
        __syncthreads();
    }

    // ---- store: float4 where aligned and inside C, else one float at a time ----
    #pragma unroll
    for (int m = 0; m < TM; ++m) {
        const int row = row0 + m_of(m / 4) + m % 4;
        #pragma unroll
        for (int g = 0; g < 2; ++g) {
            const int col = col0 + n_of(g);
            if (inside || (c_vec && row < M && col + 3 < N)) {
                *reinterpret_cast<float4*>(&C[row * N + col]) =
                    make_float4(acc[m][4 * g], acc[m][4 * g + 1], acc[m][4 * g + 2], acc[m][4 * g + 3]);
            } else if (row < M) {
                #pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (col + j < N) C[row * N + col + j] = acc[m][4 * g + j];
            }
        }
    }
}
