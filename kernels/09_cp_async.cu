// 09_cp_async.cu -- a multi-stage pipeline of cp.async copies (global -> shared memory
// without passing through registers).
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
// Block tile 128 x 128 x BK, 256 threads, 8 x 8 results per thread in the split
// layout of 08_bank_conflicts.cu (SPLIT = 1).
//
// Template parameters
//   BK       k-slice per stage: 8, 16 or 32
//   STAGES   shared-memory stages: 2, 3 or 4. STAGES - 1 tiles are being copied
//            while the block computes on one.
//
// Thread -> tile mapping (compute), as in 09_double_buffering.cu: tcol = tid % 16,
//   trow = tid / 16; thread (trow, tcol) owns rows trow*4 .. +3 and 64 + trow*4 .. +3,
//   columns tcol*4 .. +3 and 64 + tcol*4 .. +3.
// Thread -> tile mapping (copies): 16-byte chunk number i = tid + l * 256 of a tile
//   belongs to thread tid; A: row i / (BK/4), k-columns 4 * (i % (BK/4));
//   B: k-row i / 32, columns 4 * (i % 32).
//
// What changed from 09_double_buffering.cu
//   * Tiles travel global -> shared memory by cp.async (16 bytes per copy): no staging
//     registers, no stores from registers, and up to STAGES - 1 tiles in flight.
//   * cp.async cannot transpose, so A's tile stays row-major in shared memory,
//     (BM, BK); the inner loop reads 4 k-values of each of its 8 rows as one float4
//     (LDS.128), then does 4 outer products: the same number of LDS.128 per FFMA as
//     the transposed tile.
//   * Pipeline: tile t lives in stage t % STAGES. At tile t, each thread waits for its
//     own copies of tile t (cp.async.wait_group STAGES - 2), a barrier makes everyone's
//     visible (and shows that everyone is done with tile t - 1), the copies of tile
//     t + STAGES - 1 go into the stage tile t - 1 used, and the block computes on t.
//     One commit group per tile, empty ones past the end, so the count stays exact.
//
// Preconditions: none on M, N, K >= 1. 16-byte copies only where aligned (K % 4 == 0
//   for A, N % 4 == 0 for B, each matrix starting on a 16-byte boundary) and wholly
//   inside; elsewhere four 4-byte copies. What lies outside A or B is zero-filled by
//   the "src-size" operand (0 bytes read). C is stored as in 09_double_buffering.cu.
//   Offsets into A, B and C are 64-bit (size_t): operands of 2^31 elements or more
//   are fine.
//
// Shared memory: STAGES * (128 * BK + BK * 128) * 4 bytes, dynamic (48 KB for BK = 16,
//   STAGES = 3; above 48 KB the launch must opt in).

#include "common.cuh"   // rows_aligned16, store_split_8x8, cp_async4/16, commit, wait

// Copy 4 floats p[0..3] to the shared address dst; float j exists when ok && first + j
// < limit, missing ones become 0 and are not read. VEC: one 16-byte copy (then first % 4
// == 0 == limit % 4: all four exist or none); else four 4-byte copies. A copy that reads
// nothing still needs a valid address: it gets `base`, the matrix's first element.
template <bool VEC>
__device__ __forceinline__ void cp4(unsigned dst, const float* p, const float* base,
                                    bool ok, int first, int limit)
{
    if (VEC) {
        const bool in = ok && first < limit;
        cp_async16(dst, in ? p : base, in ? 16 : 0);
    } else {
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            const bool in = ok && first + j < limit;
            cp_async4(dst + 4 * j, in ? p + j : base, in ? 4 : 0);
        }
    }
}

template <int BK, int STAGES>
__global__ void __launch_bounds__(256, 2)
sgemm_cp_async(int M, int N, int K,
               const float* __restrict__ A,
               const float* __restrict__ B,
               float* __restrict__ C)
{
    constexpr int BM = 128, BN = 128, TM = 8, TN = 8, THREADS = 256;
    static_assert(STAGES >= 2 && STAGES <= 4, "STAGES: 2, 3 or 4");
    static_assert(BK == 8 || BK == 16 || BK == 32, "BK: 8, 16 or 32");
    constexpr int A_ROW_STEP = THREADS / (BK / 4);   // rows between a thread's chunks of A
    constexpr int B_ROW_STEP = THREADS / (BN / 4);   // k-rows between its chunks of B (8)
    constexpr int A_LOADS = BM / A_ROW_STEP;         // 16-byte chunks of A per thread per tile
    constexpr int B_LOADS = BK / B_ROW_STEP;         // and of B
    constexpr int A_STAGE = BM * BK, B_STAGE = BK * BN;   // floats per stage

    extern __shared__ __align__(16) float smem[];
    float* As = smem;                        // (STAGES, BM, BK): A's tile, row-major
    float* Bs = smem + STAGES * A_STAGE;     // (STAGES, BK, BN)

    const int tid = threadIdx.x;
    const int tcol = tid % 16, trow = tid / 16;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const bool a_vec = rows_aligned16(A, K), b_vec = rows_aligned16(B, N);
    const int a_row = tid / (BK / 4), a_col = 4 * (tid % (BK / 4));
    const int b_row = tid / (BN / 4), b_col = 4 * (tid % (BN / 4));
    const int tiles = (K + BK - 1) / BK;

    // This thread's first chunk of A and of B; both move on by one tile per issue.
    const float* pa = A + (size_t)min(row0 + a_row, M - 1) * K + a_col;
    const float* pb = B + (size_t)b_row * N + col0 + b_col;
    const size_t a_step = (size_t)A_ROW_STEP * K;    // from one of its chunks of A to the next
    const size_t b_step = (size_t)B_ROW_STEP * N;    // and of B
    // Shared-memory byte addresses of this thread's chunks in stage 0.
    const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(As + a_row * BK + a_col));
    const unsigned sb = static_cast<unsigned>(__cvta_generic_to_shared(Bs + b_row * BN + b_col));

    // This thread's copies of tile k0 .. k0+BK-1 into a stage. `vec` is a constant at each
    // call site in `issue`, so each call compiles to its own loop with no test in it.
    auto copy_a = [&](bool vec, int k0, int stage) {   // rows row0 + a_row + l * A_ROW_STEP
        #pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const unsigned dst = sa + 4 * (stage * A_STAGE + l * A_ROW_STEP * BK);
            const bool ok = row0 + a_row + l * A_ROW_STEP < M;
            if (vec) cp4<true>(dst, pa + l * a_step, A, ok, k0 + a_col, K);
            else     cp4<false>(dst, pa + l * a_step, A, ok, k0 + a_col, K);
        }
    };
    auto copy_b = [&](bool vec, int k0, int stage) {   // k-rows k0 + b_row + l * B_ROW_STEP
        #pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const unsigned dst = sb + 4 * (stage * B_STAGE + l * B_ROW_STEP * BN);
            const bool ok = k0 + b_row + l * B_ROW_STEP < K;
            if (vec) cp4<true>(dst, pb + l * b_step, B, ok, col0 + b_col, N);
            else     cp4<false>(dst, pb + l * b_step, B, ok, col0 + b_col, N);
        }
    };
    auto issue = [&](int t, int stage) {     // ---- start copying tile t into a stage ----
        if (t < tiles) {
            const int k0 = t * BK;
            if (a_vec) copy_a(true, k0, stage); else copy_a(false, k0, stage);
            if (b_vec) copy_b(true, k0, stage); else copy_b(false, k0, stage);
            pa += BK;                        // the next tile: BK columns of A further,
            pb += (size_t)BK * N;            // BK rows of B further
        }
        cp_async_commit();                   // one group per tile (empty past the end)
    };

    float acc[TM][TN] = {};
    float a4[TM][4];                         // 4 k-values of each of the thread's 8 rows
    float b[TN];

    // region pipeline
    // ---- prologue: STAGES - 1 tiles in flight ----
    #pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) issue(s, s);

    int rd = 0, wr = STAGES - 1;             // stage to compute on, stage to refill
    for (int t = 0; t < tiles; ++t) {
        cp_async_wait<STAGES - 2>();         // this thread's copies of tile t have landed
        __syncthreads();                     // everyone's have; and everyone is done with tile t - 1
        issue(t + STAGES - 1, wr);           // refill the stage tile t - 1 used
    // endregion pipeline

        // ---- compute on stage rd ----
        const float* as = As + rd * A_STAGE + trow * 4 * BK;    // row trow*4 of A's tile
        const float* bs = Bs + rd * B_STAGE + tcol * 4;
        #pragma unroll
        for (int kk = 0; kk < BK; kk += 4) {
            #pragma unroll
            for (int m = 0; m < TM; ++m)     // rows trow*4 + m%4 (+ 64 for m >= 4), k = kk .. kk+3
                *reinterpret_cast<float4*>(a4[m]) =
                    *reinterpret_cast<const float4*>(&as[((m / 4) * (BM / 2) + m % 4) * BK + kk]);
            #pragma unroll
            for (int k = 0; k < 4; ++k) {
                #pragma unroll
                for (int g = 0; g < 2; ++g)
                    *reinterpret_cast<float4*>(&b[4 * g]) =
                        *reinterpret_cast<const float4*>(&bs[(kk + k) * BN + g * (BN / 2)]);
                #pragma unroll
                for (int m = 0; m < TM; ++m)
                    #pragma unroll
                    for (int n = 0; n < TN; ++n) acc[m][n] += a4[m][k] * b[n];
            }
        }
        rd = rd + 1 == STAGES ? 0 : rd + 1;
        wr = wr + 1 == STAGES ? 0 : wr + 1;
    }
    cp_async_wait<0>();                      // no copy outlives the block

    // ---- store C ----
    store_split_8x8(acc, C, M, N, row0, col0, trow, tcol);
}
