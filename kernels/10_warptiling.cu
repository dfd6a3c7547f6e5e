// 10_warptiling.cu -- warp tiles: a middle level between the block tile and the thread tile.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
//
// Template parameters
//   BM, BN   block tile: the block computes a BM x BN tile of C
//   BK       k-slice staged in shared memory per step (a multiple of 4)
//   WM, WN   warp tile: each warp computes a WM x WN piece of the block tile
//   TM, TN   thread tile: each thread computes TM x TN results, in (TM/4) x (TN/4)
//            sub-tiles of 4 x 4 ("WMITER x WNITER" iterations over the warp tile)
//   Threads per block: (BM / WM) * (BN / WN) * 32. The 32 lanes of a warp form a
//   (WM / TM) x (WN / TN) grid, which must have 32 cells.
//
// Thread -> tile mapping. Warp w owns rows wm0 = (w / (BN/WN)) * WM and columns
// wn0 = (w % (BN/WN)) * WN of the block tile. Lane l sits at tr = l / (WN/TN),
// tc = l % (WN/TN). The warp tile is cut into WMITER x WNITER sub-tiles of
// (4 * WM/TM) x (4 * WN/TN); in each one, lane (tr, tc) owns the 4 x 4 block at
// (4 tr, 4 tc). So the thread's rows are  wm0 + i * (WM / WMITER) + 4 tr + a  and its
// columns  wn0 + j * (WN / WNITER) + 4 tc + b  (i < WMITER, j < WNITER, a, b < 4).
//
// Why: at each k a warp reads only WM + WN distinct floats of the tiles (its lanes
// share rows and columns), as TM/4 + TN/4 LDS.128 per thread whose lanes hit a few
// contiguous 16-byte chunks: broadcasts, no bank conflicts. Each thread then does
// TM * TN independent FFMA on registers. The fragments are double-buffered in
// registers: the LDS.128 of step k + 1 are issued before the FFMA of step k.
//
// Shared memory (dynamic), two stages:
//   As (2, BK, BM + 4): A's tile transposed (k-major), so fragments along M are float4;
//                       the 4-float pad keeps the transposing stores spread over banks
//   Bs (2, BK, BN):     B's tile as in memory
//   2 * (BK * (BM + 4) + BK * BN) * 4 bytes.
//
// Pipeline (as in 09_double_buffering.cu): the global loads of tile t + 1 go into
// registers at the start of tile t (float4 LDG where aligned and inside, else scalar
// with zeros outside), are stored into the other stage at its last k step, and one
// barrier per tile separates writing a stage from reading it.
//
// Preconditions: M, N, K >= 1 and M*K, K*N, M*N < 2^31. Float4 global loads need
// K % 4 == 0 (A) or N % 4 == 0 (B), the matrix starting 16-byte aligned, and a chunk
// wholly inside; otherwise scalar. C is stored as float4 under the same conditions.
//
// What changed from 09_double_buffering.cu: the fixed 128 x 128 tile with 8 x 8 per
// thread becomes a three-level hierarchy (block, warp, thread) with every level a
// template parameter, and fragments are double-buffered in registers.

#include "common.cuh"   // rows_aligned16, load4_guarded

template <int BM, int BN, int BK, int WM, int WN, int TM, int TN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
sgemm_warptiling(int M, int N, int K,
                 const float* __restrict__ A,
                 const float* __restrict__ B,
                 float* __restrict__ C)
{
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = (BM / WM) * WARPS_N * 32;
    constexpr int WMITER = TM / 4, WNITER = TN / 4;       // 4x4 sub-tiles per thread
    constexpr int WTR = WM / TM, WTC = WN / TN;           // lanes along M and N
    constexpr int WSUB_M = WM / WMITER, WSUB_N = WN / WNITER;   // sub-tile pitch
    constexpr int LDA = BM + 4, LDB = BN;
    constexpr int A_STAGE = BK * LDA, B_STAGE = BK * LDB;
    constexpr int A_LOADS = BM * BK / 4 / THREADS;        // float4 of A per thread per tile
    constexpr int B_LOADS = BK * BN / 4 / THREADS;        // float4 of B per thread per tile
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are made of 4x4 sub-tiles");
    static_assert(WM % TM == 0 && WN % TN == 0 && WTR * WTC == 32, "(WM/TM) * (WN/TN) must be 32 lanes");
    static_assert(BK % 4 == 0 && BM % 4 == 0, "BK and BM: multiples of 4");
    static_assert(A_LOADS >= 1 && A_LOADS * 4 * THREADS == BM * BK, "A's float4 must split evenly over the threads");
    static_assert(B_LOADS >= 1 && B_LOADS * 4 * THREADS == BK * BN, "B's float4 must split evenly over the threads");

    extern __shared__ __align__(16) float smem[];
    float* As = smem;                       // (2, BK, BM + 4): transposed A tiles
    float* Bs = smem + 2 * A_STAGE;         // (2, BK, BN)

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
    const int tr = lane / WTC, tc = lane % WTC;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    // float4 only where every row starts 16-byte aligned (a view may start anywhere)
    const bool a_vec = rows_aligned16(A, K);
    const bool b_vec = rows_aligned16(B, N);

    float4 ra[A_LOADS], rb[B_LOADS];        // the next tile, on its way from global memory
    // Blocks wholly inside A and B with aligned rows take a path with no checks.
    const bool inside = a_vec && b_vec && row0 + BM <= M && col0 + BN <= N;
    auto load_tile = [&](int k0) {          // global -> registers
        const bool fast = inside && k0 + BK <= K;
        #pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int i = tid + l * THREADS, r = i / (BK / 4), c = (i % (BK / 4)) * 4;
            if (fast) ra[l] = *reinterpret_cast<const float4*>(&A[(row0 + r) * K + k0 + c]);
            else      ra[l] = load4_guarded(A, M, K, row0 + r, k0 + c, a_vec);
        }
        #pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int i = tid + l * THREADS, r = i / (BN / 4), c = (i % (BN / 4)) * 4;
            if (fast) rb[l] = *reinterpret_cast<const float4*>(&B[(k0 + r) * N + col0 + c]);
            else      rb[l] = load4_guarded(B, K, N, k0 + r, col0 + c, b_vec);
        }
    };
    auto store_tile = [&](int s) {          // registers -> shared stage s (A transposed)
        float* as = As + s * A_STAGE;
        float* bs = Bs + s * B_STAGE;
        #pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int i = tid + l * THREADS, r = i / (BK / 4), c = (i % (BK / 4)) * 4;
            as[(c + 0) * LDA + r] = ra[l].x;
            as[(c + 1) * LDA + r] = ra[l].y;
            as[(c + 2) * LDA + r] = ra[l].z;
            as[(c + 3) * LDA + r] = ra[l].w;
        }
        #pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int i = tid + l * THREADS, r = i / (BN / 4), c = (i % (BN / 4)) * 4;
            *reinterpret_cast<float4*>(&bs[r * LDB + c]) = rb[l];
        }
    };

    float acc[TM][TN];                      // (TM, TN) results of this thread
    #pragma unroll
    for (int m = 0; m < TM; ++m)
        #pragma unroll
        for (int n = 0; n < TN; ++n) acc[m][n] = 0.0f;
    float fa[2][TM], fb[2][TN];             // fragments, double-buffered in registers

    auto load_frag = [&](int buf, const float* as, const float* bs, int k) {
        #pragma unroll
        for (int i = 0; i < WMITER; ++i)    // LDS.128: lanes with the same tr share it
            *reinterpret_cast<float4*>(&fa[buf][4 * i]) =
                *reinterpret_cast<const float4*>(&as[k * LDA + wm0 + i * WSUB_M + 4 * tr]);
        #pragma unroll
        for (int j = 0; j < WNITER; ++j)    // LDS.128: lanes with the same tc share it
            *reinterpret_cast<float4*>(&fb[buf][4 * j]) =
                *reinterpret_cast<const float4*>(&bs[k * LDB + wn0 + j * WSUB_N + 4 * tc]);
    };

    // ---- prologue: tile 0 into stage 0, first fragments ----
    const int tiles = (K + BK - 1) / BK;
    load_tile(0);
    store_tile(0);
    __syncthreads();
    int s = 0;
    const float* as = As;
    const float* bs = Bs;
    load_frag(0, as, bs, 0);

    // ---- main loop ----
    #pragma unroll 1
    for (int t = 0; t < tiles; ++t) {
        if (t + 1 < tiles) load_tile((t + 1) * BK);   // in flight during this tile's FFMA
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            if (k == BK - 1) {              // the next tile goes into the other stage
                if (t + 1 < tiles) store_tile(s ^ 1);
                __syncthreads();
                s ^= 1;
                as = As + s * A_STAGE;
                bs = Bs + s * B_STAGE;
            }
            if (k < BK - 1) load_frag((k + 1) % 2, as, bs, k + 1);
            else if (t + 1 < tiles) load_frag(0, as, bs, 0);
            // ---- TM x TN FFMA on step k's fragments ----
            #pragma unroll
            for (int m = 0; m < TM; ++m)
                #pragma unroll
                for (int n = 0; n < TN; ++n) acc[m][n] = fmaf(fa[k % 2][m], fb[k % 2][n], acc[m][n]);
        }
    }

    // ---- store C: float4 where aligned and inside, else one by one ----
    const bool c_vec = rows_aligned16(C, N);
    #pragma unroll
    for (int i = 0; i < WMITER; ++i)
        #pragma unroll
        for (int a = 0; a < 4; ++a) {
            const int row = row0 + wm0 + i * WSUB_M + 4 * tr + a;
            if (row >= M) continue;
            #pragma unroll
            for (int j = 0; j < WNITER; ++j) {
                const int col = col0 + wn0 + j * WSUB_N + 4 * tc;
                float* dst = &C[row * N + col];
                if (c_vec && col + 3 < N) {
                    *reinterpret_cast<float4*>(dst) =
                        make_float4(acc[4 * i + a][4 * j + 0], acc[4 * i + a][4 * j + 1],
                                    acc[4 * i + a][4 * j + 2], acc[4 * i + a][4 * j + 3]);
                } else {
                    #pragma unroll
                    for (int b = 0; b < 4; ++b)
                        if (col + b < N) dst[b] = acc[4 * i + a][4 * j + b];
                }
            }
        }
}
