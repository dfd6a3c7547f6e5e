// 14_tf32.cu -- C = A @ B on the tensor cores: TF32 (SPLIT = 0) or 3xTF32 (SPLIT = 1).
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
//
// Template parameters
//   BM, BN   block tile: a block computes BM x BN of C
//   BK       k-slice per pipeline stage (a multiple of 8, the k of one mma)
//   WM, WN   warp tile: each warp computes WM x WN of the block tile, as (WM/16) x (WN/8)
//            tiles of 16 x 8, one mma.sync.m16n8k8 each per k-step of 8
//   STAGES   shared-memory stages (2..4): STAGES - 1 k-tiles are in flight while one is used
//   SPLIT    0: each operand rounded to TF32 (10 mantissa bits), one mma per tile and k-step.
//            1: 3xTF32: x = big + small, both TF32 (big = tf32(x), small = tf32(x - big));
//            a*b ~ a_small*b_big + a_big*b_small + a_big*b_big, three mma, float32 accumulator
//   PROMOTE  0: every mma adds into the result's accumulators. P > 0: the mma of P k-tiles add
//            into a second set, started at zero, which is then added into the result with an
//            ordinary float32 addition (round to nearest). The tensor cores' adder cuts
//            instead of rounding, so a long chain of mma into one accumulator drifts by a few
//            units in its last place per mma; short chains and rounded additions keep 3xTF32
//            at float32's accuracy. TF32 needs none: its 2^-11 input rounding is far larger.
//   Block (BM/WM) * (BN/WN) * 32 threads; grid (ceil(N/BN), ceil(M/BM)).
//
// Thread -> tile mapping. Warp w owns rows wm0 = (w / (BN/WN)) * WM and columns
//   wn0 = (w % (BN/WN)) * WN of the block tile. In each 16 x 8 tile of it, lane l holds the
//   elements the PTX ISA assigns (kernels/tensor_core.cuh): with g = l / 4, t = l % 4, A's
//   rows g and g + 8 at k-columns t and t + 4, B's k-rows t and t + 4 at column g, and C's
//   rows g and g + 8 at columns 2t and 2t + 1.
//   Copies: a tile is copied 16 bytes at a time, chunk c = tid + i * THREADS of it at row
//   c / (COLS/4), columns 4 * (c % (COLS/4)).
//
// Shared memory (dynamic): STAGES * (BM * (BK + 4) + BK * (BN + 8)) * 4 bytes; per stage
//   As (BM, BK + 4), rows of A as in global memory, then Bs (BK, BN + 8). The padding makes
//   every fragment load conflict-free: a warp reads As at rows g, columns t, which lie in
//   bank 4g + t (mod 32) when the row stride is 4 (mod 32) floats, and Bs at k-rows t,
//   columns g: bank 8t + g when the stride is 8 (mod 32). Both cover the 32 banks once.
//
// Preconditions: M, N, K >= 1, each operand below 2^31 elements' worth of int indices
//   per dimension; offsets into A, B and C are 64-bit. A tile wholly inside A (or B),
//   whose rows start on 16-byte boundaries (K % 4 == 0 and A aligned; N % 4 == 0 and B
//   aligned), is copied 16 bytes at a time with no checks; any other tile one float at
//   a time (or 16 bytes, where aligned), with zeros for what lies outside, so that the
//   k-steps past K add nothing. Needs compute capability 8.0 (mma.sync with TF32, cp.async).
//
// What changed from 12_final.cu: the arithmetic. The FFMA outer products become
//   mma.sync.m16n8k8 on the tensor cores, so the thread tile gives way to the fragment
//   layout the instruction prescribes, and the shared tiles are padded for its loads.
//   The cp.async pipeline is the final kernel's, in its plainest form.

#include "common.cuh"        // rows_aligned16, cp_async4/16, cp_async_commit, cp_async_wait
#include "tensor_core.cuh"   // to_tf32, mma_tf32

namespace tc {

constexpr int PAD_A = 4;     // floats after each row of As: row stride 4 (mod 32)
constexpr int PAD_B = 8;     // floats after each k-row of Bs: row stride 8 (mod 32)

// region copy
// Start copying the ROWS x COLS window at (r0, c0) of the row-major (rows, cols) matrix X
// into shared memory at byte address dst (row stride LD floats). Inside X with aligned rows:
// 16-byte copies, no checks. Otherwise each chunk checked, zeros for what lies outside.
template <int ROWS, int COLS, int LD, int THREADS>
__device__ __forceinline__ void copy_tile(unsigned dst, const float* __restrict__ X, int rows, int cols,
                                          int r0, int c0, bool aligned)
{
    constexpr int CHUNKS = ROWS * COLS / 4;                  // 16-byte chunks of the window
    static_assert(COLS % 4 == 0 && CHUNKS % THREADS == 0, "the threads must cover the tile's chunks exactly");
    const bool inside = aligned && r0 + ROWS <= rows && c0 + COLS <= cols;
    #pragma unroll
    for (int i = 0; i < CHUNKS / THREADS; ++i) {
        const int c = threadIdx.x + i * THREADS;
        const int r = c / (COLS / 4), q = 4 * (c % (COLS / 4));
        const unsigned d = dst + 4 * (r * LD + q);
        const int gr = r0 + r, gc = c0 + q;
        const float* src = X + (size_t)gr * cols + gc;
        if (inside) {
            cp_async16(d, src);
        } else if (aligned) {                                // cols % 4 == 0: all four inside, or none
            const bool in = gr < rows && gc < cols;
            cp_async16(d, in ? src : X, in ? 16 : 0);
        } else {
            #pragma unroll
            for (int j = 0; j < 4; ++j) {
                const bool in = gr < rows && gc + j < cols;
                cp_async4(d + 4 * j, in ? src + j : X, in ? 4 : 0);
            }
        }
    }
}
// endregion copy

}  // namespace tc

template <int BM, int BN, int BK, int WM, int WN, int STAGES, int SPLIT, int PROMOTE>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
sgemm_tf32(int M, int N, int K, const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C)
{
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int LDA = BK + tc::PAD_A, LDB = BN + tc::PAD_B;
    constexpr int STAGE = BM * LDA + BK * LDB;               // floats per stage
    constexpr int MI = WM / 16, NI = WN / 8;                 // 16 x 8 tiles per warp tile
    static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 8 == 0, "warp tiles of 16 x 8 tiles");
    static_assert(BK % 8 == 0 && STAGES >= 2 && STAGES <= 4, "BK a multiple of 8; 2 to 4 stages");
    static_assert(SPLIT == 0 || SPLIT == 1, "SPLIT: 0 (TF32) or 1 (3xTF32)");
    static_assert(PROMOTE >= 0, "PROMOTE: k-tiles per promotion, 0 for none");
    extern __shared__ __align__(16) float smem[];            // STAGES x (As (BM, LDA), Bs (BK, LDB))

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;                    // groupID, threadID_in_group
    const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const bool a_aligned = rows_aligned16(A, K), b_aligned = rows_aligned16(B, N);
    const unsigned smem0 = static_cast<unsigned>(__cvta_generic_to_shared(smem));

    auto issue = [&](int kt, int s) {                        // copies of k-tile kt into stage s
        const unsigned dst = smem0 + 4 * s * STAGE;
        tc::copy_tile<BM, BK, LDA, THREADS>(dst, A, M, K, row0, kt * BK, a_aligned);
        tc::copy_tile<BK, BN, LDB, THREADS>(dst + 4 * BM * LDA, B, K, N, kt * BK, col0, b_aligned);
    };

    float acc[MI][NI][4];                                    // (MI, NI) tiles of 16 x 8, 4 floats per lane
    #pragma unroll
    for (int i = 0; i < MI; ++i)
        #pragma unroll
        for (int j = 0; j < NI; ++j)
            #pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

    // region promote
    // PROMOTE > 0: the mma add into part, and every PROMOTE k-tiles part is added into acc
    // with FADD (round to nearest) and started again at zero. PROMOTE = 0: part is acc.
    constexpr int PI = PROMOTE ? MI : 1, PJ = PROMOTE ? NI : 1;
    float part_store[PI][PJ][4] = {};                        // zero, like acc
    float (&part)[MI][NI][4] = *reinterpret_cast<float (*)[MI][NI][4]>(PROMOTE ? &part_store[0][0][0] : &acc[0][0][0]);
    auto promote = [&]() {
        #pragma unroll
        for (int i = 0; i < MI; ++i)
            #pragma unroll
            for (int j = 0; j < NI; ++j)
                #pragma unroll
                for (int r = 0; r < 4; ++r) {
                    acc[i][j][r] += part[i][j][r];
                    part[i][j][r] = 0.0f;
                }
    };
    // endregion promote

    // region split
    // One float of a fragment, as TF32: its rounding (big) and, SPLIT = 1, what that
    // rounding left out (small = tf32(x - big); x - big is exact in float32).
    auto split = [](float x, unsigned& big, unsigned& small) {
        big = to_tf32(x);
        if (SPLIT) small = to_tf32(x - __uint_as_float(big));
    };
    // endregion split

    // region k_step
    // One k-step of 8 on stage (As, Bs) at column k: this lane's fragments, then the mma.
    auto k_step = [&](const float* As, const float* Bs, int k) {
        unsigned a[MI][4], b[NI][2];                         // big parts (TF32: the rounded values)
        unsigned as[MI][4], bs[NI][2];                       // small parts (SPLIT = 1 only)
        #pragma unroll
        for (int i = 0; i < MI; ++i) {
            const float* p = As + (wm0 + 16 * i + g) * LDA + k + t;
            split(p[0], a[i][0], as[i][0]);                  // A(g, t)
            split(p[8 * LDA], a[i][1], as[i][1]);            // A(g + 8, t)
            split(p[4], a[i][2], as[i][2]);                  // A(g, t + 4)
            split(p[8 * LDA + 4], a[i][3], as[i][3]);        // A(g + 8, t + 4)
        }
        #pragma unroll
        for (int j = 0; j < NI; ++j) {
            const float* p = Bs + (k + t) * LDB + wn0 + 8 * j + g;
            split(p[0], b[j][0], bs[j][0]);                  // B(t, g)
            split(p[4 * LDB], b[j][1], bs[j][1]);            // B(t + 4, g)
        }
        // 3xTF32: the two small products first, each over the whole warp tile, then the big
        // one; products of the same tile are MI * NI instructions apart
        if (SPLIT) {
            #pragma unroll
            for (int i = 0; i < MI; ++i)
                #pragma unroll
                for (int j = 0; j < NI; ++j) mma_tf32(part[i][j], as[i], b[j]);
            #pragma unroll
            for (int i = 0; i < MI; ++i)
                #pragma unroll
                for (int j = 0; j < NI; ++j) mma_tf32(part[i][j], a[i], bs[j]);
        }
        #pragma unroll
        for (int i = 0; i < MI; ++i)
            #pragma unroll
            for (int j = 0; j < NI; ++j) mma_tf32(part[i][j], a[i], b[j]);
    };
    // endregion k_step

    // region pipeline
    // ---- prologue: the first STAGES - 1 k-tiles in flight ----
    const int tiles = (K + BK - 1) / BK;
    #pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) issue(s, s);
        cp_async_commit();                                   // one group per k-tile, empty ones too
    }
    // ---- main loop: wait for k-tile kt, refill the stage kt - 1 used, compute on kt ----
    #pragma unroll 1
    for (int kt = 0; kt < tiles; ++kt) {
        cp_async_wait<STAGES - 2>();                         // this thread's copies of k-tile kt landed
        __syncthreads();                                     // everyone's; and everyone is done with kt - 1
        if (kt + STAGES - 1 < tiles) issue(kt + STAGES - 1, (kt + STAGES - 1) % STAGES);
        cp_async_commit();
        const float* As = smem + (kt % STAGES) * STAGE;
        const float* Bs = As + BM * LDA;
        #pragma unroll
        for (int k = 0; k < BK; k += 8) k_step(As, Bs, k);
        if (PROMOTE && ((kt + 1) % (PROMOTE ? PROMOTE : 1) == 0 || kt + 1 == tiles)) promote();
    }
    cp_async_wait<0>();                                      // no copy outlives the block
    // endregion pipeline

    // region store
    // ---- store C: lane holds (g, 2t), (g, 2t + 1) and the same 8 rows down, per 16 x 8 tile ----
    const bool pairs = N % 2 == 0 && reinterpret_cast<size_t>(C) % 8 == 0;
    #pragma unroll
    for (int i = 0; i < MI; ++i)
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + wm0 + 16 * i + g + 8 * h;
            if (row >= M) continue;
            #pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int col = col0 + wn0 + 8 * j + 2 * t;
                float* p = C + (size_t)row * N + col;
                const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                if (pairs && col + 1 < N) {
                    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
                } else {
                    if (col < N) p[0] = v0;
                    if (col + 1 < N) p[1] = v1;
                }
            }
        }
    // endregion store
}

// region peak
// The tensor cores' rate through mma.sync alone: each warp runs CHAINS independent
// accumulators through `iters` rounds of mma on operands in registers, no memory traffic.
// 2 * 16 * 8 * 8 FLOP per mma; each thread writes its sum so nothing is optimised away.
template <int CHAINS>
__global__ void __launch_bounds__(256)
tf32_mma_peak(float* out, int iters)
{
    unsigned a[4], b[2];
    #pragma unroll
    for (int r = 0; r < 4; ++r) a[r] = to_tf32(1e-3f * (threadIdx.x + r));
    #pragma unroll
    for (int r = 0; r < 2; ++r) b[r] = to_tf32(1e-3f * (threadIdx.x - r));
    float acc[CHAINS][4] = {};
    #pragma unroll 1
    for (int i = 0; i < iters; ++i)
        #pragma unroll
        for (int c = 0; c < CHAINS; ++c) mma_tf32(acc[c], a, b);
    float sum = 0.0f;
    #pragma unroll
    for (int c = 0; c < CHAINS; ++c) sum += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
// endregion peak
