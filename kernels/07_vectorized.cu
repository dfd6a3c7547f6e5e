// 07_vectorized.cu -- 16-byte (float4) global loads, A's tile transposed in shared memory.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
//
// Template parameters: BM, BN, BK, TM, TN as in 06_thread_tile_2d.cu, with
//   TM, TN and BK multiples of 4 (one float4 = 4 floats).
//
// Thread -> tile mapping (compute) as in 06:
//   tcol = tid % (BN / TN), trow = tid / (BN / TN); thread (trow, tcol) owns
//   rows trow*TM .. +TM-1 and columns tcol*TN .. +TN-1 of the block's tile.
//
// Thread -> tile mapping (loads): the threads sweep each tile row by row in
//   float4, consecutive threads on consecutive float4 of a row. Thread tid loads
//   A-tile row tid / (BK/4) + l * THREADS / (BK/4), k-columns 4 * (tid % (BK/4)) .. +3,
//   and B-tile row tid / (BN/4) + l * THREADS / (BN/4), columns 4 * (tid % (BN/4)) .. +3,
//   for l = 0, 1, ... while inside the tile (a rule: BN / 4 <= THREADS).
//
// What changed from 06_thread_tile_2d.cu
//   * Global loads are float4 (LDG.E.128): one instruction moves 4 floats.
//   * A's tile is stored TRANSPOSED, As[k][m]: the TM values of A a thread needs
//     for one k are contiguous, so they come in TM/4 LDS.128. B's tile is already
//     k-major: TN/4 LDS.128 per k. The C tile is written with float4 stores.
//
// Alignment (never a misaligned access)
//   A float4 access needs a 16-byte-aligned address. Element (r, c) of a row-major
//   matrix with `ld` columns is aligned when the matrix starts aligned (cupy
//   allocations do; a view into another array may not, so it is checked),
//   ld % 4 == 0 and c % 4 == 0 (c always is here). So a float4 is read from A only
//   when K % 4 == 0 and A is aligned, from B when N % 4 == 0 and B is aligned,
//   written to C when N % 4 == 0 and C is aligned, and only when all four floats
//   are inside the matrix. Everything else takes a scalar path with zero fill:
//   correct for any M, N, K >= 1.
//   Tiles that lie wholly inside A, B and C with everything aligned (all but the
//   edges for the usual sizes) take a fast path with no per-element tests; the
//   choice is the same for every thread of a block, so warps never diverge.
//
// Preconditions: M*K, K*N, M*N < 2^31: indices are 32-bit ints (larger shapes
//   are refused before launch).
//
// Shared memory: (BK * BM + BK * BN) * 4 bytes, static (16 KB for 128, 128, 16).

#include "common.cuh"   // rows_aligned16, load4_guarded

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), (BM / TM) * (BN / TN) <= 256 ? 2 : 1)
sgemm_vectorized(int M, int N, int K,
                 const float* __restrict__ A,
                 const float* __restrict__ B,
                 float* __restrict__ C)
{
    constexpr int THREADS = (BM / TM) * (BN / TN);
    // Loads: THREADS threads sweep a tile row by row in float4, consecutive
    // threads on consecutive float4 of a row, THREADS / (width / 4) rows per sweep.
    constexpr int A_ROW_STEP = THREADS / (BK / 4);                // rows of A's tile per sweep
    constexpr int B_ROW_STEP = THREADS / (BN / 4);                // rows of B's tile per sweep
    constexpr int A_LOADS = (BM + A_ROW_STEP - 1) / A_ROW_STEP;   // float4 of A per thread per tile
    constexpr int B_LOADS = (BK + B_ROW_STEP - 1) / B_ROW_STEP;   // float4 of B per thread per tile
    constexpr bool A_EXACT = BM % A_ROW_STEP == 0;   // else the last sweep sticks out of the tile
    constexpr bool B_EXACT = BK % B_ROW_STEP == 0;
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "float4 granularity");
    static_assert(BM % TM == 0 && BN % TN == 0, "thread tiles must tile the block tile");
    static_assert(THREADS <= 1024 && THREADS % 32 == 0, "1..32 whole warps per block");
    static_assert(THREADS % (BN / 4) == 0, "a sweep covers whole rows of B's tile");

    __shared__ __align__(16) float As[BK][BM];   // (BK, BM): A's tile, transposed
    __shared__ __align__(16) float Bs[BK][BN];   // (BK, BN)

    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN);
    const int trow = tid / (BN / TN);
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;
    // Every row of A (of B, of C) starts 16-byte aligned: the width is a multiple of 4
    // floats and the matrix itself starts aligned (a view into another array may not).
    const bool a_vec = rows_aligned16(A, K);
    const bool b_vec = rows_aligned16(B, N);
    const bool c_vec = rows_aligned16(C, N);
    // The whole BM x BN tile is inside C and every row is aligned (same for all threads).
    const bool inside = a_vec && b_vec && c_vec && row0 + BM <= M && col0 + BN <= N;
    const int a_row = tid / (BK / 4), a_col = 4 * (tid % (BK / 4));   // first float4 of A's tile
    const int b_row = tid / (BN / 4), b_col = 4 * (tid % (BN / 4));   // and of B's tile

    float acc[TM][TN] = {};        // (TM, TN) results, in registers
    float a[TM], b[TN];            // this k's operands, in registers

    for (int k0 = 0; k0 < K; k0 += BK) {
        // ---- load: float4 from global memory into registers ----
        float4 va[A_LOADS], vb[B_LOADS];
        // region load_float4
        if (inside && k0 + BK <= K) {                  // fast path: no tests
            #pragma unroll
            for (int l = 0; l < A_LOADS; ++l)
                if (A_EXACT || a_row + l * A_ROW_STEP < BM)
                    va[l] = *reinterpret_cast<const float4*>(&A[(row0 + a_row + l * A_ROW_STEP) * K + k0 + a_col]);
            #pragma unroll
            for (int l = 0; l < B_LOADS; ++l)
                if (B_EXACT || b_row + l * B_ROW_STEP < BK)
                    vb[l] = *reinterpret_cast<const float4*>(&B[(k0 + b_row + l * B_ROW_STEP) * N + col0 + b_col]);
        // endregion load_float4
        } else {                                       // edge tiles: guarded, zero fill
            #pragma unroll
            for (int l = 0; l < A_LOADS; ++l)
                va[l] = load4_guarded(A, M, K, row0 + a_row + l * A_ROW_STEP, k0 + a_col, a_vec);
            #pragma unroll
            for (int l = 0; l < B_LOADS; ++l)
                vb[l] = load4_guarded(B, K, N, k0 + b_row + l * B_ROW_STEP, col0 + b_col, b_vec);
        }
        // region store_transposed
        // ---- store into shared memory: A transposed (4 x STS.32), B as is (STS.128) ----
        #pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int r = a_row + l * A_ROW_STEP;
            if (A_EXACT || r < BM) {
                As[a_col + 0][r] = va[l].x;
                As[a_col + 1][r] = va[l].y;
                As[a_col + 2][r] = va[l].z;
                As[a_col + 3][r] = va[l].w;
            }
        }
        #pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int r = b_row + l * B_ROW_STEP;
            if (B_EXACT || r < BK) *reinterpret_cast<float4*>(&Bs[r][b_col]) = vb[l];
        }
        __syncthreads();
        // endregion store_transposed

        // region compute
        // ---- compute: operands come in LDS.128, then an outer product ----
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
        // endregion compute
    }

    // ---- store: float4 where aligned and inside C, else one float at a time ----
    #pragma unroll
    for (int m = 0; m < TM; ++m) {
        const int row = row0 + trow * TM + m;
        #pragma unroll
        for (int n = 0; n < TN; n += 4) {
            const int col = col0 + tcol * TN + n;
            if (inside || (c_vec && row < M && col + 3 < N)) {
                *reinterpret_cast<float4*>(&C[row * N + col]) =
                    make_float4(acc[m][n], acc[m][n + 1], acc[m][n + 2], acc[m][n + 3]);
            } else if (row < M) {
                #pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (col + j < N) C[row * N + col + j] = acc[m][n + j];
            }
        }
    }
}
