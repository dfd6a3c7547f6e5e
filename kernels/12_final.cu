// 12_final.cu -- the final kernel: warp tiles fed by a multi-stage cp.async pipeline.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
//
// Template parameters
//   BM, BN   block tile: the block computes a BM x BN tile of C (BM a multiple of 32)
//   BK       k-slice per pipeline stage (a multiple of 8)
//   WM, WN   warp tile: each warp computes a WM x WN piece of the block tile
//   TM, TN   thread tile: TM x TN results per thread, as (TM/4) x (TN/4) sub-tiles of 4 x 4
//   STAGES   shared-memory stages, 2..5: STAGES - 1 tiles are copied while one is used
//   SPLITK   blocks along K (blockIdx.z); 1: no split
//   GROUP    rasterisation: 0 = row by row; G > 0 = G block-rows of C column by column
//   Block (BM/WM) * (BN/WN) * 32 threads ((WM/TM) * (WN/TN) = 32 lanes per warp);
//   grid (ceil(N/BN), ceil(M/BM), SPLITK).
//
// Thread -> tile mapping. Warp w owns the warp tile at rows wm0 = (w / (BN/WN)) * WM,
//   columns wn0 = (w % (BN/WN)) * WN; lane l sits at tr = l / (WN/TN), tc = l % (WN/TN)
//   and holds the rows wm0 + i * (WM/(TM/4)) + 4*tr + a and the columns
//   wn0 + j * (WN/(TN/4)) + 4*tc + b of the block tile (i < TM/4, j < TN/4, a, b < 4).
//   Copies: thread t moves column k = t % 8 (+ 8h) of A-tile rows t/8 + p * (threads/8)
//   one float at a time (cp.async 4 bytes, straight to its transposed place), and the
//   B tile in float4 along N (cp.async 16 bytes; 4 x 4 bytes when B's rows are unaligned).
//
// Preconditions: M, N, K >= 1; M*K, K*N, M*N < 2^31 (32-bit indices). Any alignment of
//   A, B, C (float4 for B and C only where N % 4 == 0 and the matrix starts 16-byte aligned).
//
// Shared memory (dynamic): STAGES * (BK * (BM + 4) + BK * BN) * 4 bytes; per stage
//   As (BK, BM + 4): A's tile transposed, 4 floats of padding per row; Bs (BK, BN).
//
// Split-K workspace (SPLITK > 1; both may be nullptr when SPLITK == 1), one per concurrent
//   launch: partials: ceil(M/BM) * ceil(N/BN) * SPLITK * BM * BN floats, 16-byte aligned;
//   arrivals: ceil(M/BM) * ceil(N/BN) unsigned counters, zero before the first launch
//   (the kernel leaves them zero, so the next launch in the same stream may reuse both).
//   Block z adds k-tiles [z*T, (z+1)*T), T = ceil(ceil(K/BK) / SPLITK), writes them to its
//   slot of partials, fences, and counts itself in the tile's counter; the block that
//   arrives last adds the SPLITK slots in the order z = 0, 1, ... and stores C. No block
//   waits for another and the order is fixed: reproducible bit for bit, no global state.
//
// What changed from 10_warptiling.cu: a STAGES-deep cp.async pipeline instead of the
//   register-staged double buffer; grouped rasterisation; optional split-K; FFMA order
//   and C store arranged against register bank clashes (a result -0 is stored as +0).

#include "common.cuh"   // rows_aligned16, cp_async4/16, cp_async_commit, cp_async_wait

namespace fin {
// A fresh register holding x (x + 0, which the compiler may not fold: -0 + 0 = +0). The
// float4 stores of C are built from these copies, so the accumulators need not sit in
// aligned groups of four registers and the allocator can place them where FFMA operands
// do not collide in a register bank.
__device__ __forceinline__ float fresh(float x)
{
    return __fadd_rn(x, 0.0f);
}
}  // namespace fin

template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int STAGES, int SPLITK, int GROUP>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
sgemm_final(int M, int N, int K,
            const float* __restrict__ A,
            const float* __restrict__ B,
            float* __restrict__ C,
            float* partials,
            unsigned* arrivals)
{
    // ---- derived sizes and the rules they rely on ----
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = (BM / WM) * WARPS_N * 32;
    constexpr int WMITER = TM / 4, WNITER = TN / 4;   // 4x4 sub-tiles per thread
    constexpr int WTR = WM / TM, WTC = WN / TN;       // lanes along M and N in a warp
    constexpr int WSUB_M = WM / WMITER, WSUB_N = WN / WNITER;  // sub-tile pitch: 4*WTR, 4*WTC
    constexpr int LDA = BM + 4;                       // padded row of the transposed A tile
    constexpr int LDB = BN;
    constexpr int A_STAGE = BK * LDA, B_STAGE = BK * LDB;   // floats per stage
    constexpr int A_ROWS = THREADS / 8;               // rows of A one copy pass covers
    constexpr int A_PASSES = BM / A_ROWS;             // 4-byte copies per thread per k-group
    constexpr int A_KGROUPS = BK / 8;
    constexpr int B_CHUNKS_ROW = BN / 4;              // float4 per row of the B tile
    constexpr int B_PASSES = BK * BN / 4 / THREADS;   // float4 copies per thread
    constexpr int B_ROWS = THREADS / B_CHUNKS_ROW;    // rows of B one pass covers
    constexpr int SLOT = BM * BN / 4;                 // split-K: float4 per partial tile,
                                                      // (TM*TN/4, THREADS): thread-minor
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are made of 4x4 sub-tiles");
    static_assert(WM % TM == 0 && WN % TN == 0 && WTR * WTC == 32, "(WM/TM) * (WN/TN) must be 32 lanes");
    static_assert(BK % 8 == 0, "BK: a multiple of 8 (A is copied in groups of 8 k)");
    static_assert(BM % 32 == 0, "BM: a multiple of 32 (keeps LDA = 4 mod 32 banks)");
    static_assert(BM % A_ROWS == 0, "A's copy passes must cover BM rows exactly");
    static_assert(THREADS % B_CHUNKS_ROW == 0 && (BK * BN / 4) % THREADS == 0,
                  "B's float4 copies must split evenly over the threads, same column each pass");
    static_assert(STAGES >= 2 && STAGES <= 5, "STAGES: 2..5");
    static_assert(SPLITK >= 1, "SPLITK >= 1");

    extern __shared__ __align__(16) float smem[];
    float* As = smem;                           // (STAGES, BK, BM + 4): transposed A tiles
    float* Bs = smem + STAGES * A_STAGE;        // (STAGES, BK, BN)

    // ---- which output tile: optional grouped rasterisation ----
    int tile_m = blockIdx.y, tile_n = blockIdx.x;
    if (GROUP > 0) {
        const int tiles_n = gridDim.x, tiles_m = gridDim.y;
        const int pid = blockIdx.y * tiles_n + blockIdx.x;
        const int per_group = GROUP * tiles_n;
        const int g = pid / per_group, first_m = g * GROUP;
        const int rows_here = min(tiles_m - first_m, GROUP);
        const int r = pid - g * per_group;
        tile_m = first_m + r % rows_here;
        tile_n = r / rows_here;
    }
    const int row0 = tile_m * BM, col0 = tile_n * BN;

    // ---- this block's share of K ----
    const int k_tiles = (K + BK - 1) / BK;
    const int per_split = (k_tiles + SPLITK - 1) / SPLITK;
    const int t_begin = (SPLITK > 1) ? blockIdx.z * per_split : 0;
    const int n_tiles = (SPLITK > 1) ? max(0, min(k_tiles, t_begin + per_split) - t_begin) : k_tiles;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
    const int tr = lane / WTC, tc = lane % WTC;

    // ---- copy set-up ----
    // Fast path (tiles wholly inside A and B, N % 4 == 0): one running pointer per
    // operand, no guards. Edge path: every row/column clamped, k >= K zero-filled.
    const int a_k = tid % 8, a_m = tid / 8;
    const int b_r = tid / B_CHUNKS_ROW, b_c = (tid % B_CHUNKS_ROW) * 4;
    const bool b_vec = rows_aligned16(B, N);
    const bool a_inside = row0 + BM <= M;                 // all BM rows of A exist
    const bool b_inside = b_vec && col0 + BN <= N;        // all BN columns of B exist, aligned
    const float* a_base = A + (a_inside ? (row0 + a_m) * K + a_k : 0);
    const float* b_base = B + (b_inside ? b_r * N + col0 + b_c : 0);
    const int a_stride = A_ROWS * K, b_stride = B_ROWS * N;
    const unsigned a_slot = static_cast<unsigned>(__cvta_generic_to_shared(As + a_k * LDA + a_m));
    const unsigned b_slot = static_cast<unsigned>(__cvta_generic_to_shared(Bs + b_r * LDB + b_c));

    auto issue = [&](int t, int s) {            // copies of k-tile t_begin + t into stage s
        const int k0 = (t_begin + t) * BK;
        const bool k_inside = k0 + BK <= K;
        const unsigned as = a_slot + s * (A_STAGE * 4);     // this thread's first A slot (bytes)
        const unsigned bs = b_slot + s * (B_STAGE * 4);     // this thread's first B slot (bytes)
        if (a_inside && k_inside) {
            const float* src = a_base + k0;
            #pragma unroll
            for (int p = 0; p < A_PASSES; ++p, src += a_stride)
                #pragma unroll
                for (int h = 0; h < A_KGROUPS; ++h)
                    cp_async4(as + (8 * h * LDA + p * A_ROWS) * 4, src + 8 * h);
        } else {
            #pragma unroll
            for (int p = 0; p < A_PASSES; ++p) {
                const int row = min(row0 + a_m + p * A_ROWS, M - 1);
                #pragma unroll
                for (int h = 0; h < A_KGROUPS; ++h) {
                    const int k = k0 + a_k + 8 * h;
                    const bool in = k < K;
                    cp_async4(as + (8 * h * LDA + p * A_ROWS) * 4, A + row * K + (in ? k : 0), in ? 4 : 0);
                }
            }
        }
        if (b_inside && k_inside) {
            const float* src = b_base + k0 * N;
            #pragma unroll
            for (int p = 0; p < B_PASSES; ++p, src += b_stride)
                cp_async16(bs + p * B_ROWS * LDB * 4, src);
        } else {
            #pragma unroll
            for (int p = 0; p < B_PASSES; ++p) {
                const int k = k0 + b_r + p * B_ROWS;
                const bool in = k < K;
                const float* src = B + (in ? k : 0) * N;
                if (b_vec) {
                    const int col = min(col0 + b_c, N - 4);
                    cp_async16(bs + p * B_ROWS * LDB * 4, src + col, in ? 16 : 0);
                } else {
                    #pragma unroll
                    for (int j = 0; j < 4; ++j)
                        cp_async4(bs + (p * B_ROWS * LDB + j) * 4, src + min(col0 + b_c + j, N - 1), in ? 4 : 0);
                }
            }
        }
    };

    float acc[TM][TN];                          // (TM, TN) results of this thread
    #pragma unroll
    for (int m = 0; m < TM; ++m)
        #pragma unroll
        for (int n = 0; n < TN; ++n) acc[m][n] = 0.0f;
    float fa[2][TM], fb[2][TN];                 // fragments, double-buffered in registers

    auto load_frag = [&](int buf, const float* as, const float* bs, int k) {
        #pragma unroll
        for (int i = 0; i < WMITER; ++i)
            *reinterpret_cast<float4*>(&fa[buf][4 * i]) =
                *reinterpret_cast<const float4*>(&as[k * LDA + wm0 + i * WSUB_M + 4 * tr]);
        #pragma unroll
        for (int j = 0; j < WNITER; ++j)
            *reinterpret_cast<float4*>(&fb[buf][4 * j]) =
                *reinterpret_cast<const float4*>(&bs[k * LDB + wn0 + j * WSUB_N + 4 * tc]);
    };

    // ---- prologue: STAGES - 1 tiles in flight, the first one waited for ----
    #pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < n_tiles) issue(s, s);
        cp_async_commit();                      // one group per tile, empty ones too
    }
    cp_async_wait<STAGES - 2>();
    __syncthreads();

    int s_read = 0, s_write = STAGES - 1;
    const float* as = As;
    const float* bs = Bs;
    if (n_tiles > 0) load_frag(0, as, bs, 0);

    // ---- main loop over this block's k-tiles ----
    #pragma unroll 1
    for (int t = 0; t < n_tiles; ++t) {
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            if (k == BK - 1) {                  // next tile: landed for everyone, then switch
                cp_async_wait<STAGES - 2>();
                __syncthreads();
                s_read = (s_read + 1 == STAGES) ? 0 : s_read + 1;
                as = As + s_read * A_STAGE;
                bs = Bs + s_read * B_STAGE;
            }
            if (k < BK - 1) load_frag((k + 1) % 2, as, bs, k + 1);
            else if (t + 1 < n_tiles) load_frag(0, as, bs, 0);
            if (k == 0) {                       // refill the stage tile t - 1 used
                if (t + STAGES - 1 < n_tiles) issue(t + STAGES - 1, s_write);
                cp_async_commit();
                s_write = (s_write + 1 == STAGES) ? 0 : s_write + 1;
            }
            // ---- TM x TN FFMA on step k's fragments: column by column, down and up ----
            #pragma unroll
            for (int n = 0; n < TN; ++n)
                #pragma unroll
                for (int mm = 0; mm < TM; ++mm) {
                    const int m = (n % 2) ? TM - 1 - mm : mm;
                    acc[m][n] = fmaf(fa[k % 2][m], fb[k % 2][n], acc[m][n]);
                }
        }
    }
    cp_async_wait<0>();                         // no copy may outlive the block

    // ---- split-K: publish the partial tile; only the last block of the tile goes on ----
    float4* slots = nullptr;                    // this tile's SPLITK slots, offset by tid
    if (SPLITK > 1) {
        const int tile = tile_m * gridDim.x + tile_n;
        slots = reinterpret_cast<float4*>(partials) + (size_t)tile * SPLITK * SLOT + tid;
        float4* mine = slots + (size_t)blockIdx.z * SLOT;
        #pragma unroll
        for (int m = 0; m < TM; ++m)
            #pragma unroll
            for (int j = 0; j < WNITER; ++j)    // consecutive threads, consecutive float4
                mine[(m * WNITER + j) * THREADS] =
                    make_float4(acc[m][4 * j], acc[m][4 * j + 1], acc[m][4 * j + 2], acc[m][4 * j + 3]);
        __threadfence();                        // this thread's part visible GPU-wide ...
        __syncthreads();                        // ... for every thread of the block
        unsigned before = 0;                    // blocks of this tile that arrived earlier
        if (tid == 0) {
            before = atomicAdd(&arrivals[tile], 1u);
            __threadfence();                    // their slots are visible to this block from here
        }
        if (!__syncthreads_or(before == SPLITK - 1)) return;   // not the last: nothing to store
        if (tid == 0) arrivals[tile] = 0;       // every block has arrived: reset for the next launch
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
                float4 v;
                if (SPLITK > 1) {               // the SPLITK slots, added in the order z = 0, 1, ...
                    const float4* p = slots + ((4 * i + a) * WNITER + j) * THREADS;
                    v = __ldcg(p);              // L2: the other blocks' writes, never a stale L1 line
                    #pragma unroll 1
                    for (int z = 1; z < SPLITK; ++z) {
                        const float4 w = __ldcg(p + (size_t)z * SLOT);
                        v.x += w.x; v.y += w.y; v.z += w.z; v.w += w.w;
                    }
                } else {                        // this block's results, in fresh registers
                    v = make_float4(fin::fresh(acc[4 * i + a][4 * j + 0]), fin::fresh(acc[4 * i + a][4 * j + 1]),
                                    fin::fresh(acc[4 * i + a][4 * j + 2]), fin::fresh(acc[4 * i + a][4 * j + 3]));
                }
                float* dst = &C[row * N + col];
                if (c_vec && col + 3 < N) {
                    *reinterpret_cast<float4*>(dst) = v;
                } else {
                    const float vs[4] = {v.x, v.y, v.z, v.w};
                    #pragma unroll
                    for (int b = 0; b < 4; ++b)
                        if (col + b < N) dst[b] = vs[b];
                }
            }
        }
}
