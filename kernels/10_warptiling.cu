// 10_warptiling.cu -- warp tiles: a middle level between the block tile and the thread tile.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
//
// Template parameters
//   BM, BN   block tile: the block computes a BM x BN tile of C
//   BK       k-slice staged in shared memory per step (4, 8, 16 or 32)
//   WM, WN   warp tile: each warp computes a WM x WN piece of the block tile
//   TM, TN   thread tile: each thread computes TM x TN results, in (TM/4) x (TN/4)
//            sub-tiles of 4 x 4 ("WMITER x WNITER" iterations over the warp tile)
//   Threads per block: (BM / WM) * (BN / WN) * 32. The 32 lanes of a warp form a
//   (WM / TM) x (WN / TN) grid, which must have 32 cells.
//
// Thread -> tile mapping (compute). Warp w owns rows wm0 = (w / (BN/WN)) * WM and columns
//   wn0 = (w % (BN/WN)) * WN of the block tile. Lane l sits at tr = l / (WN/TN),
//   tc = l % (WN/TN). The warp tile is cut into WMITER x WNITER sub-tiles of
//   (4 * WM/TM) x (4 * WN/TN); in each one, lane (tr, tc) owns the 4 x 4 block at
//   (4 tr, 4 tc). So the thread's rows are  wm0 + i * (WM / WMITER) + 4 tr + a  and its
//   columns  wn0 + j * (WN / WNITER) + 4 tc + b  (i < WMITER, j < WNITER, a, b < 4).
// Thread -> tile mapping (loads), as in 09: float4 number i = tid + l * THREADS of a tile
//   belongs to thread tid; A: row i / (BK/4), k-columns 4 * (i % (BK/4)); B: k-row
//   i / (BN/4), columns 4 * (i % (BN/4)). THREADS is a multiple of BK/4 and of BN/4, so a
//   thread's float4 of one tile share their columns and sit a fixed number of rows apart.
//
// Why: at each k a warp reads only WM + WN distinct floats of the tiles (its lanes share
// rows and columns), as TM/4 + TN/4 LDS.128 per thread whose lanes hit a few contiguous
// 16-byte chunks: broadcasts, no bank conflicts. Each thread then does TM * TN independent
// FFMA on registers.
//
// Pipeline (09_double_buffering.cu's): two shared stages and two register fragments. Each
//   tile step issues the global loads of the next tile into registers, computes on the
//   current stage while they are in flight, then stores them into the other stage; one
//   barrier per tile. The fragments of step k + 1 are read while the FFMAs of step k run.
//
// Two paths, chosen per block (09's FAST_PATH, decided here by each block for itself):
//   fast: the block's tiles lie wholly inside A and B (row0 + BM <= M, col0 + BN <= N,
//         K % BK == 0) and both have 16-byte aligned rows: plain float4 loads, no checks;
//   checked: every other block (the last row and column of blocks, any K % BK != 0,
//         unaligned operands): each float4 checked against the edges, one float at a time
//         where a float4 would not be aligned or inside, zeros for what lies outside.
//   Both are compiled into the kernel; a block takes one of them for its whole life, so
//   the warps of a block never diverge.
//
// Preconditions: M, N, K >= 1; offsets into A, B and C are 64-bit (size_t).
//
// Shared memory (dynamic), two stages:
//   As (2, BK, BM + 4): A's tile transposed (k-major), so fragments along M are float4;
//                       the 4-float pad shifts each k-row by 4 banks (08's PAD = 4)
//   Bs (2, BK, BN):     B's tile as in memory
//   2 * (BK * (BM + 4) + BK * BN) * 4 bytes.
//
// What changed from 09_double_buffering.cu: the fixed 128 x 128 tile with a split 8 x 8
//   thread tile becomes a three-level hierarchy (block, warp, thread) with every level a
//   template parameter; the loads, the two stages and the fast path are 09's.

#include "common.cuh"   // rows_aligned16

namespace wt {
constexpr int PAD = 4;

// Four consecutive floats p[0..3]; element j exists when ok && first + j < limit.
// vec: one 16-byte load (then first % 4 == 0 == limit % 4: all four exist or none).
// Missing elements are 0; nothing outside the matrix is read. (09's ldg4.)
__device__ __forceinline__ float4 ldg4(const float* p, bool ok, int first, int limit, bool vec)
{
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (vec) {
        if (ok && first < limit) v = __ldg(reinterpret_cast<const float4*>(p));
    } else {
        if (ok && first + 0 < limit) v.x = __ldg(p + 0);
        if (ok && first + 1 < limit) v.y = __ldg(p + 1);
        if (ok && first + 2 < limit) v.z = __ldg(p + 2);
        if (ok && first + 3 < limit) v.w = __ldg(p + 3);
    }
    return v;
}

// Blocks per SM the launch bound asks for: two 256-thread blocks of 8 x 8 per thread, as
// 09 (128 registers a thread); every other config one block, up to 255 registers a thread.
__host__ __device__ constexpr int min_blocks(int threads, int results) { return threads == 256 && results <= 64 ? 2 : 1; }

// One block tile of C; FAST: no checks at all (the caller knows the tile is inside).
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, bool FAST>
__device__ __forceinline__ void block_tile(int M, int N, int K,
                                           const float* __restrict__ A,
                                           const float* __restrict__ B,
                                           float* __restrict__ C)
{
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = (BM / WM) * WARPS_N * 32;
    constexpr int WMITER = TM / 4, WNITER = TN / 4;              // 4x4 sub-tiles per thread
    constexpr int WTC = WN / TN;                                 // lanes along N
    constexpr int WSUB_M = WM / WMITER, WSUB_N = WN / WNITER;    // sub-tile pitch
    constexpr int LDA = BM + PAD, LDB = BN;
    constexpr int A_STAGE = BK * LDA, B_STAGE = BK * LDB;
    constexpr int A_ROW_STEP = THREADS / (BK / 4);   // rows of A between a thread's float4
    constexpr int B_ROW_STEP = THREADS / (BN / 4);   // k-rows of B between a thread's float4
    constexpr int A_LOADS = BM / A_ROW_STEP;         // float4 of A per thread per tile
    constexpr int B_LOADS = BK / B_ROW_STEP;         // float4 of B per thread per tile

    extern __shared__ __align__(16) float smem[];
    float* As = smem;                       // (2, BK, BM + 4): transposed A tiles
    float* Bs = smem + 2 * A_STAGE;         // (2, BK, BN)

    const int tid = threadIdx.x;
    // region warp_tile
    const int lane = tid % 32, warp = tid / 32;
    const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;   // the warp's corner
    const int tr = lane / WTC, tc = lane % WTC;                           // the lane's cell
    // endregion warp_tile
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const bool a_vec = rows_aligned16(A, K), b_vec = rows_aligned16(B, N);
    const int a_row = tid / (BK / 4), a_col = 4 * (tid % (BK / 4));
    const int b_row = tid / (BN / 4), b_col = 4 * (tid % (BN / 4));

    // This thread's first float4 of A and of B; both move on by one tile per step.
    // A row of A outside the matrix is never read (checked path: clamped, and not loaded).
    const float* pa = A + (size_t)min(row0 + a_row, M - 1) * K + a_col;
    const float* pb = B + (size_t)b_row * N + col0 + b_col;
    const size_t a_step = (size_t)A_ROW_STEP * K;    // from one of its float4 of A to the next
    const size_t b_step = (size_t)B_ROW_STEP * N;    // and of B

    float4 ra[A_LOADS], rb[B_LOADS];  // the next tile, on its way from global memory
    float acc[TM][TN] = {};           // (TM, TN) results of this thread
    float fa[2][TM], fb[2][TN];       // two register fragments: step k (in use) and k + 1

    // region loads
    // ---- global -> registers: the tile at k0; FAST: no checks ----
    auto load_tile = [&](int k0) {
        #pragma unroll
        for (int l = 0; l < A_LOADS; ++l)
            ra[l] = FAST ? __ldg(reinterpret_cast<const float4*>(pa + l * a_step))
                         : ldg4(pa + l * a_step, row0 + a_row + l * A_ROW_STEP < M, k0 + a_col, K, a_vec);
        #pragma unroll
        for (int l = 0; l < B_LOADS; ++l)
            rb[l] = FAST ? __ldg(reinterpret_cast<const float4*>(pb + l * b_step))
                         : ldg4(pb + l * b_step, k0 + b_row + l * B_ROW_STEP < K, col0 + b_col, N, b_vec);
        pa += BK;                     // the next tile: BK columns of A further,
        pb += (size_t)BK * N;         // BK rows of B further
    };
    // endregion loads
    auto store_tile = [&](int s) {    // ---- registers -> shared stage s (A transposed) ----
        float* as = As + s * A_STAGE;
        float* bs = Bs + s * B_STAGE;
        #pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int m = a_row + l * A_ROW_STEP;
            as[(a_col + 0) * LDA + m] = ra[l].x;
            as[(a_col + 1) * LDA + m] = ra[l].y;
            as[(a_col + 2) * LDA + m] = ra[l].z;
            as[(a_col + 3) * LDA + m] = ra[l].w;
        }
        #pragma unroll
        for (int l = 0; l < B_LOADS; ++l)
            *reinterpret_cast<float4*>(&bs[(b_row + l * B_ROW_STEP) * LDB + b_col]) = rb[l];
    };
    // region fragments
    // ---- shared stage s, step k -> fragment f: TM/4 + TN/4 LDS.128 ----
    auto load_frag = [&](int s, int k, int f) {
        const float* as = As + s * A_STAGE + k * LDA + wm0 + 4 * tr;
        const float* bs = Bs + s * B_STAGE + k * LDB + wn0 + 4 * tc;
        #pragma unroll
        for (int i = 0; i < WMITER; ++i)      // lanes with the same tr read the same float4
            *reinterpret_cast<float4*>(&fa[f][4 * i]) = *reinterpret_cast<const float4*>(as + i * WSUB_M);
        #pragma unroll
        for (int j = 0; j < WNITER; ++j)      // lanes with the same tc read the same float4
            *reinterpret_cast<float4*>(&fb[f][4 * j]) = *reinterpret_cast<const float4*>(bs + j * WSUB_N);
    };
    auto outer_product = [&](int f) { // ---- TM x TN FFMA on fragment f ----
        #pragma unroll
        for (int m = 0; m < TM; ++m)
            #pragma unroll
            for (int n = 0; n < TN; ++n) acc[m][n] = fmaf(fa[f][m], fb[f][n], acc[m][n]);
    };
    // endregion fragments

    // region main_loop
    // ---- prologue: the first tile into stage 0 ----
    load_tile(0);
    store_tile(0);
    __syncthreads();
    load_frag(0, 0, 0);

    // ---- every tile but the last: compute on stage s while the next one loads ----
    const int tiles = (K + BK - 1) / BK;
    int s = 0;                        // the stage being computed on
    #pragma unroll 1
    for (int t = 0; t + 1 < tiles; ++t, s ^= 1) {
        load_tile((t + 1) * BK);              // issue the next tile's loads, don't wait
        #pragma unroll
        for (int k = 0; k < BK - 1; ++k) {
            load_frag(s, k + 1, (k + 1) % 2); // fragment k + 1 ...
            outer_product(k % 2);             // ... loads during the FFMAs of k
        }
        store_tile(s ^ 1);                    // the next tile goes into the other stage
        __syncthreads();                      // stage s^1 complete; everyone is done reading stage s
        load_frag(s ^ 1, 0, 0);               // its first fragment, during the last FFMAs
        outer_product((BK - 1) % 2);
    }
    // ---- the last tile, on the stage the loop left in s: nothing more to load ----
    #pragma unroll
    for (int k = 0; k < BK - 1; ++k) {
        load_frag(s, k + 1, (k + 1) % 2);
        outer_product(k % 2);
    }
    outer_product((BK - 1) % 2);
    // endregion main_loop

    // region store
    // ---- store C: float4 where aligned and inside, else one by one ----
    const bool c_vec = rows_aligned16(C, N);
    #pragma unroll
    for (int i = 0; i < WMITER; ++i)
        #pragma unroll
        for (int a = 0; a < 4; ++a) {
            const int row = row0 + wm0 + i * WSUB_M + 4 * tr + a;
            if (!FAST && row >= M) continue;
            #pragma unroll
            for (int j = 0; j < WNITER; ++j) {
                const int col = col0 + wn0 + j * WSUB_N + 4 * tc;
                const float* r = acc[4 * i + a] + 4 * j;
                float* dst = C + (size_t)row * N + col;
                if (c_vec && (FAST || col < N)) {        // N % 4 == 0: col < N means col + 3 < N
                    *reinterpret_cast<float4*>(dst) = make_float4(r[0], r[1], r[2], r[3]);
                } else {
                    #pragma unroll
                    for (int b = 0; b < 4; ++b)
                        if (col + b < N) dst[b] = r[b];
                }
            }
        }
    // endregion store
}
}  // namespace wt

template <int BM, int BN, int BK, int WM, int WN, int TM, int TN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, wt::min_blocks((BM / WM) * (BN / WN) * 32, TM * TN))
sgemm_warptiling(int M, int N, int K,
                 const float* __restrict__ A,
                 const float* __restrict__ B,
                 float* __restrict__ C)
{
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are made of 4x4 sub-tiles");
    static_assert(WM % TM == 0 && WN % TN == 0 && (WM / TM) * (WN / TN) == 32, "(WM/TM) * (WN/TN) must be 32 lanes");
    static_assert(BK == 4 || BK == 8 || BK == 16 || BK == 32, "BK: 4, 8, 16 or 32");
    static_assert(BM % 4 == 0 && BN % 4 == 0, "BM, BN: multiples of 4");
    static_assert(THREADS % (BK / 4) == 0 && THREADS % (BN / 4) == 0,
                  "the threads must be a multiple of the float4 in a row of A's tile (BK/4) and of B's (BN/4)");
    static_assert((BM * BK / 4) % THREADS == 0 && (BK * BN / 4) % THREADS == 0,
                  "A's and B's float4 must split evenly over the threads");

    // region fast_path
    // A block whose tiles lie wholly inside A and B, with aligned rows, takes the path
    // without checks; the blocks on the last row and column of C take the checked one.
    const bool fast = rows_aligned16(A, K) && rows_aligned16(B, N) && K % BK == 0
                        && (int)(blockIdx.y + 1) * BM <= M && (int)(blockIdx.x + 1) * BN <= N;
    if (fast) wt::block_tile<BM, BN, BK, WM, WN, TM, TN, true>(M, N, K, A, B, C);
    else        wt::block_tile<BM, BN, BK, WM, WN, TM, TN, false>(M, N, K, A, B, C);
    // endregion fast_path
}
