// 15_wgmma.cu -- C = A @ B on Hopper's warpgroup MMA: TF32 (SPLIT = 0) or 3xTF32 (SPLIT = 1).
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
//
// The .tf32 forms of wgmma read both operands K-major from shared memory. A row-major A is
// K-major already; B is not, so a pre-pass (wgmma_prepass) writes its transpose Bt (N, LDK)
// first, each row padded with zeros to LDK, the next multiple of BK = 32. For 3xTF32 the
// pre-pass also writes the small parts of B, Bts (N, LDK), and with AREG = 0 those of A,
// As (M, LDK).
//
// Template parameters
//   BM, BN   block tile: a block computes BM x BN of C
//   WGS      warpgroups (128 threads each) per block; warpgroup w computes rows
//            w * BM / WGS ... of the block tile, as (BM / WGS) / 64 wgmma of 64 x BN
//   STAGES   shared-memory stages (3..6): STAGES - 2 k-tiles are being copied while the
//            tensor cores work on the current one and finish the one before (STAGES - 1
//            with PROMOTE = 1, whose k-tiles end with every wgmma done)
//   GROUP    launch order: consecutive blocks take GROUP rows of tiles, column by column
//            (1: row by row), so that the blocks running at once share panels of A and B in L2
//   SPLIT    0: TF32, one wgmma per 64-row slice and k-step of 8. The tensor cores read a
//            float32 as TF32 by dropping its low 13 bits.
//            1: 3xTF32: x = big + small, big = x itself (read as TF32: x truncated),
//            small = x - trunc(x) (exact in float32) rounded to TF32 by the pre-pass;
//            a*b ~ a_small*b_big + a_big*b_small + a_big*b_big, three wgmma
//   PROMOTE  0: every wgmma adds into the result's accumulators. P > 0: the wgmma of P
//            k-tiles add into a second set started at zero, which is then added into the
//            result with an ordinary float32 addition (round to nearest): the tensor cores'
//            adder cuts instead of rounding, and 3xTF32 needs short chains of it.
//   AREG     3xTF32 only. 0: A and As from shared memory, like B. 1: each thread loads its
//            fragment of A from the shared tile into registers and splits it there; the
//            wgmma take A from registers. No As tile, no As pre-pass: a stage holds three
//            tiles, and the tensor cores read only B from shared memory.
//   Block WGS * 128 threads; grid (ceil(N/BN), ceil(M/BM)).
//
// Shared memory (dynamic): STAGES x (A (BM, 32), Bt (BN, 32), and with SPLIT Bts (BN, 32),
//   and As (BM, 32) unless AREG) floats, each tile K-major in the 128-byte swizzled layout of
//   kernels/wgmma.cuh and starting on a 1024-byte boundary; 1 KB more for that alignment.
//
// Preconditions: M, N, K >= 1; offsets into the operands are 64-bit. A tile of A wholly
//   inside A, with 16-byte aligned rows (K % 4 == 0, A aligned), is copied 16 bytes at a
//   time with no checks; any other 16 bytes one float at a time (or 16 bytes, where
//   aligned), with zeros outside, so that k-steps past K add nothing. Bt, As and Bts come
//   from the pre-pass: aligned, zero past K. Needs compute capability 9.0 (sm_90a).
//
// What changed from 14_tf32.cu: the instruction. One wgmma makes a warpgroup compute a
//   64 x BN tile per k-step, reading A and B from shared memory itself, asynchronously:
//   no fragments in registers, no padding (a swizzle spreads the rows over the banks).

#include "common.cuh"        // rows_aligned16, cp_async4/16, cp_async_commit, cp_async_wait
#include "tensor_core.cuh"   // to_tf32
#include "wgmma.cuh"         // smem_desc, wgmma_tf32, wgmma_fence/commit/wait, fence_proxy_async

namespace wg {

constexpr int BK = 32;       // floats of K per stage: one 128-byte swizzled row per tile row

// region prepass
// Y = X k-major, LDK floats per row, zeros past K: Y[r * LDK + k] = X(r, k), with
// X(r, k) = X[k * R + r] (TRANSPOSE: X is B, K x R) or X[r * K + k] (X is A, R x K).
// BIG writes the values to big, SMALL their small parts to small. Block (32, 8): a 32 x 32
// tile goes through shared memory, read along X's rows and written along Y's.
__device__ __forceinline__ float small_part(float x)
{
    const float big = __uint_as_float(__float_as_uint(x) & 0xFFFFE000u);   // what the tensor cores read
    return __uint_as_float(to_tf32(x - big));
}

template <int TRANSPOSE, int BIG, int SMALL>
__global__ void __launch_bounds__(256)
wgmma_prepass(int R, int K, const float* __restrict__ X, float* __restrict__ big, float* __restrict__ small, int LDK)
{
    __shared__ float tile[32][33];                           // tile[k][r]; 33: no bank conflicts
    const int k0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    const int tx = threadIdx.x, ty = threadIdx.y;
    #pragma unroll
    for (int i = ty; i < 32; i += 8) {
        if (TRANSPOSE) {                                     // X(r, k) = X[k * R + r]: read along r
            const int k = k0 + i, r = r0 + tx;
            tile[i][tx] = (k < K && r < R) ? X[(size_t)k * R + r] : 0.0f;
        } else {                                             // X(r, k) = X[r * K + k]: read along k
            const int r = r0 + i, k = k0 + tx;
            tile[tx][i] = (k < K && r < R) ? X[(size_t)r * K + k] : 0.0f;
        }
    }
    __syncthreads();
    #pragma unroll
    for (int i = ty; i < 32; i += 8) {                       // write along k
        const int r = r0 + i, k = k0 + tx;
        if (r >= R) continue;
        const float x = tile[tx][i];
        if (BIG) big[(size_t)r * LDK + k] = x;
        if (SMALL) small[(size_t)r * LDK + k] = small_part(x);
    }
}
// endregion prepass

// region swizzle
// Byte offset of 16-byte chunk c (0..7) of row r in a tile of rows x 32 floats, K-major,
// 128-byte swizzle (kernels/wgmma.cuh): the chunk moves to position c ^ (r % 8), so the
// 8 rows that share a bank pattern put the same chunk in 8 different bank groups.
__device__ __forceinline__ unsigned swizzled(int r, int c)
{
    return r * 128 + ((c ^ (r & 7)) << 4);
}
// endregion swizzle

// region copy
// Start copying the ROWS x 32 window at (r0, k0) of the row-major (rows, ld) matrix X, whose
// first `cols` columns are data, into the swizzled tile at dst. Inside X with aligned rows:
// 16-byte copies, no checks. Otherwise each chunk checked, zeros for what lies outside.
template <int ROWS, int THREADS>
__device__ __forceinline__ void copy_tile(unsigned dst, const float* __restrict__ X, int rows, int cols, int ld,
                                          int r0, int k0, bool aligned)
{
    constexpr int CHUNKS = ROWS * BK / 4;
    static_assert(CHUNKS % THREADS == 0, "the threads must cover the tile's chunks exactly");
    const bool inside = aligned && r0 + ROWS <= rows && k0 + BK <= cols;
    #pragma unroll
    for (int i = 0; i < CHUNKS / THREADS; ++i) {
        const int c = threadIdx.x + i * THREADS;
        const int r = c / 8, q = c % 8;
        const unsigned d = dst + swizzled(r, q);
        const int gr = r0 + r, gk = k0 + 4 * q;
        const float* src = X + (size_t)gr * ld + gk;
        if (inside) {
            cp_async16(d, src);
        } else if (aligned) {                                // cols % 4 == 0: all four inside, or none
            const bool in = gr < rows && gk < cols;
            cp_async16(d, in ? src : X, in ? 16 : 0);
        } else {
            #pragma unroll
            for (int j = 0; j < 4; ++j) {
                const bool in = gr < rows && gk + j < cols;
                cp_async4(d + 4 * j, in ? src + j : X, in ? 4 : 0);
            }
        }
    }
}
// endregion copy

}  // namespace wg

template <int BM, int BN, int WGS, int STAGES, int GROUP, int SPLIT, int PROMOTE, int AREG>
__global__ void __launch_bounds__(WGS * 128, 1)
sgemm_wgmma(int M, int N, int K, const float* __restrict__ A, const float* __restrict__ Bt,
            const float* __restrict__ As, const float* __restrict__ Bts, float* __restrict__ C, int LDK)
{
    constexpr int THREADS = WGS * 128, WM = BM / WGS, MI = WM / 64;
    constexpr int ACC = BN / 2;                              // accumulators per thread per 64 x BN
    constexpr int TILE_A = BM * wg::BK * 4, TILE_B = BN * wg::BK * 4;    // bytes
    constexpr int STAGE = TILE_A + TILE_B + SPLIT * (TILE_B + (1 - AREG) * TILE_A);
    static_assert(BM % WGS == 0 && WM % 64 == 0, "each warpgroup computes whole 64-row slices");
    static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma's N: 64, 128 or 256");
    static_assert(STAGES >= 3 && STAGES <= 6, "3 to 6 stages");
    static_assert(SPLIT == 0 || SPLIT == 1, "SPLIT: 0 (TF32) or 1 (3xTF32)");
    static_assert(AREG == 0 || (AREG == 1 && SPLIT == 1), "AREG: 0, or 1 with the split");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const unsigned smem0 = (static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) + 1023) & ~1023u;

    const int wgi = threadIdx.x / 128;                       // this thread's warpgroup

    // region raster
    // Block b of the launch computes tile (tm, tn): bands of GROUP tile-rows, each walked
    // column by column, GROUP blocks down one column before the next.
    const int b = blockIdx.y * gridDim.x + blockIdx.x, band = GROUP * gridDim.x;
    const int first = b / band * GROUP, rows = min((int)gridDim.y - first, GROUP);
    const int tm = first + (b % band) % rows, tn = (b % band) / rows;
    const int row0 = tm * BM, col0 = tn * BN;
    // endregion raster
    const bool a_aligned = rows_aligned16(A, K);

    // region issue
    // Copies of k-tile kt into stage s: A (BM x 32) and Bt (BN x 32), then Bts, then As.
    auto issue = [&](int kt, int s) {
        const unsigned base = smem0 + s * STAGE;
        const int k0 = kt * wg::BK;
        wg::copy_tile<BM, THREADS>(base, A, M, K, K, row0, k0, a_aligned);
        wg::copy_tile<BN, THREADS>(base + TILE_A, Bt, N, LDK, LDK, col0, k0, true);
        if (SPLIT)
            wg::copy_tile<BN, THREADS>(base + TILE_A + TILE_B, Bts, N, LDK, LDK, col0, k0, true);
        if (SPLIT && !AREG)
            wg::copy_tile<BM, THREADS>(base + TILE_A + 2 * TILE_B, As, M, LDK, LDK, row0, k0, true);
    };
    // endregion issue

    float acc[MI][ACC];                                      // this warpgroup's 64 x BN slices of C
    #pragma unroll
    for (int i = 0; i < MI; ++i)
        #pragma unroll
        for (int j = 0; j < ACC; ++j) acc[i][j] = 0.0f;

    // region promote
    // PROMOTE > 0: the wgmma add into part, and every PROMOTE k-tiles part is added into acc
    // with FADD (round to nearest) and started again at zero. PROMOTE = 0: part is acc.
    constexpr int PI = PROMOTE ? MI : 1, PJ = PROMOTE ? ACC : 1;
    float part_store[PI][PJ] = {};
    float (&part)[MI][ACC] = *reinterpret_cast<float (*)[MI][ACC]>(PROMOTE ? &part_store[0][0] : &acc[0][0]);
    auto promote = [&]() {
        #pragma unroll
        for (int i = 0; i < MI; ++i)
            #pragma unroll
            for (int j = 0; j < ACC; ++j) {
                acc[i][j] += part[i][j];
                part[i][j] = 0.0f;
            }
    };
    // endregion promote

    // region k_tile
    // The wgmma of one k-tile on stage s: 4 k-steps of 8, each MI slices of 64 x BN. A k-step
    // moves the descriptors' start 32 bytes along the swizzled rows (8 floats).
    // 3xTF32: the two small products, then the big one, into the same accumulators.
    auto k_tile = [&](int s) {
        const unsigned a = smem0 + s * STAGE + wgi * WM * 128, b = smem0 + s * STAGE + TILE_A;
        const unsigned bs = b + TILE_B, as = b + 2 * TILE_B + wgi * WM * 128;
        #pragma unroll
        for (int i = 0; i < MI; ++i) fence_operands<ACC>(part[i]);
        wgmma_fence();
        #pragma unroll
        for (int k = 0; k < wg::BK / 8; ++k)
            #pragma unroll
            for (int i = 0; i < MI; ++i) {
                const unsigned ai = a + i * 64 * 128 + 32 * k, asi = as + i * 64 * 128 + 32 * k;
                if (SPLIT) {
                    wgmma_tf32<BN>(part[i], smem_desc(asi), smem_desc(b + 32 * k), 1);
                    wgmma_tf32<BN>(part[i], smem_desc(ai), smem_desc(bs + 32 * k), 1);
                }
                wgmma_tf32<BN>(part[i], smem_desc(ai), smem_desc(b + 32 * k), 1);
            }
        wgmma_commit();
        #pragma unroll
        for (int i = 0; i < MI; ++i) fence_operands<ACC>(part[i]);
    };
    // endregion k_tile

    // region k_tile_areg
    // AREG = 1: the same products with A from registers. Each k-step is its own group: its
    // fragments are loaded from the swizzled A tile (kernels/wgmma.cuh's fragment layout; row
    // 16 w + g (+ 8) has r % 8 = g, so column 8 k + q (+ 4) is in chunk (2 k (+ 1)) ^ g) and
    // split, big = x truncated and small = x - big rounded to TF32, as the pre-pass does.
    // Fragment registers are in use until their wgmma finish: before a k-step overwrites them
    // it waits for the group that read them four groups earlier (wgmma_wait<3>).
    const int lane = threadIdx.x % 32, w = (threadIdx.x % 128) / 32;
    const int g = lane / 4, q = lane % 4;
    const unsigned char* smem_gen = smem_raw + (smem0 - static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)));
    auto k_tile_areg = [&](int s) {
        const unsigned a = s * STAGE + wgi * WM * 128;                      // offsets from smem0
        const unsigned b = smem0 + s * STAGE + TILE_A, bs = b + TILE_B;
        #pragma unroll
        for (int k = 0; k < wg::BK / 8; ++k) {
            unsigned big[MI][4], small[MI][4];
            wgmma_wait<3>();
            #pragma unroll
            for (int i = 0; i < MI; ++i)
                #pragma unroll
                for (int v = 0; v < 4; ++v) {
                    const int r = 64 * i + 16 * w + g + 8 * (v % 2), chunk = 2 * k + v / 2;
                    const float x = *reinterpret_cast<const float*>(smem_gen + a + r * 128 + ((chunk ^ g) << 4) + 4 * q);
                    big[i][v] = __float_as_uint(x) & 0xFFFFE000u;
                    small[i][v] = to_tf32(x - __uint_as_float(big[i][v]));
                }
            #pragma unroll
            for (int i = 0; i < MI; ++i) fence_operands<ACC>(part[i]);
            wgmma_fence();
            #pragma unroll
            for (int i = 0; i < MI; ++i) {
                wgmma_tf32_rs<BN>(part[i], small[i], smem_desc(b + 32 * k), 1);
                wgmma_tf32_rs<BN>(part[i], big[i], smem_desc(bs + 32 * k), 1);
                wgmma_tf32_rs<BN>(part[i], big[i], smem_desc(b + 32 * k), 1);
            }
            wgmma_commit();
            #pragma unroll
            for (int i = 0; i < MI; ++i) fence_operands<ACC>(part[i]);
        }
    };
    // endregion k_tile_areg

    // region pipeline
    // LAG: k-tiles whose wgmma are still running when a k-tile's are issued. With PROMOTE = 1 every
    // k-tile ends with all of them done (the partial sums are added into acc), so the stage
    // of kt - 1 is free at kt; otherwise kt - 1's wgmma still read theirs, and kt - 2's is free.
    // The copies run STAGES - 1 - LAG k-tiles ahead.
    // GROUPS: commit groups per k-tile (AREG = 1: one per k-step).
    constexpr int LAG = PROMOTE == 1 ? 0 : 1, AHEAD = STAGES - 1 - LAG, GROUPS = AREG ? wg::BK / 8 : 1;
    // ---- prologue: the first AHEAD k-tiles in flight ----
    const int tiles = (K + wg::BK - 1) / wg::BK;
    #pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
        if (s < tiles) issue(s, s);
        cp_async_commit();                                   // one group per k-tile, empty ones too
    }
    // ---- main loop: wait for k-tile kt, start its wgmma, refill the stage of kt - 1 - LAG
    //      (free since the barrier: every warpgroup has waited for its wgmma) ----
    #pragma unroll 1
    for (int kt = 0; kt < tiles; ++kt) {
        cp_async_wait<AHEAD - 1>();                          // this thread's copies of k-tile kt landed
        fence_proxy_async();                                 // ... and are visible to the tensor cores
        __syncthreads();                                     // everyone's; every wgmma of kt - 1 - LAG is done
        if (AREG) k_tile_areg(kt % STAGES); else k_tile(kt % STAGES);
        const int next = kt + AHEAD;
        if (next < tiles) issue(next, next % STAGES);
        cp_async_commit();
        wgmma_wait<LAG * GROUPS>();                          // all but the last LAG k-tiles' done
        if (PROMOTE && ((kt + 1) % (PROMOTE ? PROMOTE : 1) == 0 || kt + 1 == tiles)) {
            wgmma_wait<0>();
            #pragma unroll
            for (int i = 0; i < MI; ++i) fence_operands<ACC>(part[i]);
            promote();
        }
    }
    wgmma_wait<0>();
    #pragma unroll
    for (int i = 0; i < MI; ++i) fence_operands<ACC>(acc[i]);
    cp_async_wait<0>();                                      // no copy outlives the block
    // endregion pipeline

    // region store
    // ---- store C: acc[i][4 j + h] sits at row 16 w + g (+ 8 for h >= 2), column 8 j + 2 q + h % 2
    //      of slice i (kernels/wgmma.cuh) ----
    const bool pairs = N % 2 == 0 && reinterpret_cast<size_t>(C) % 8 == 0;
    #pragma unroll
    for (int i = 0; i < MI; ++i)
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + wgi * WM + 64 * i + 16 * w + g + 8 * h;
            if (row >= M) continue;
            #pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int col = col0 + 8 * j + 2 * q;
                float* p = C + (size_t)row * N + col;
                const float v0 = acc[i][4 * j + 2 * h], v1 = acc[i][4 * j + 2 * h + 1];
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
