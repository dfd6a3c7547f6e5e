// 10_final.cu -- the final kernel: warp tiles fed by a multi-stage cp.async pipeline.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
//
// Template parameters
//   BM, BN   block tile: the block computes a BM x BN tile of C
//   BK       k-slice per pipeline stage (a multiple of 8)
//   WM, WN   warp tile: each warp computes a WM x WN piece of the block tile
//   TM, TN   thread tile: each thread computes TM x TN results, as (TM/4) x (TN/4)
//            sub-tiles of 4 x 4 spaced a "warp row" apart (see 09_warptiling.cu)
//   STAGES   shared-memory stages in flight (2..5): STAGES - 1 tiles are being copied
//            while the block computes on one
//   SPLITK   blocks along K (blockIdx.z); > 1 adds the partial tiles in a fixed order
//   GROUP    block rasterisation: 0 = row by row; G > 0 = walk G block-rows of C
//            column by column, so blocks running together share A and B panels in L2
//   Threads per block: (BM / WM) * (BN / WN) * 32.  Lanes per warp: (WM / TM) along M
//   times (WN / TN) along N, which must make 32.
//
// Thread -> tile mapping (compute). warp w sits at warp row w / (BN/WN), warp column
// w % (BN/WN). Lane l has tr = l / (WN/TN), tc = l % (WN/TN). Its results are the rows
//   wm0 + i * (WM/(TM/4)) + 4 * tr + a    (i < TM/4, a < 4)
// and the columns
//   wn0 + j * (WN/(TN/4)) + 4 * tc + b    (j < TN/4, b < 4)
// of the block tile. One k step reads TM/4 + TN/4 float4 from shared memory (LDS.128
// only) and does TM * TN FFMA; the fragments are double-buffered in registers so the
// loads for step k + 1 are in flight while step k multiplies.
//
// Shared memory (dynamic), per stage:
//   As (BK, BM + 4): A's tile transposed, so a thread's TM/4 float4 run along M. The
//                    pad of 4 floats makes LDA = 4 (mod 32) banks: see "A copies".
//   Bs (BK, BN):     B's tile as it is in memory.
//   STAGES * (BK * (BM + 4) + BK * BN) * 4 bytes in all.
//
// Copies (global -> shared, cp.async, no registers on the way)
//   A: the fragments need A along M (k-major tile), A is stored along K, and
//      cp.async cannot transpose a 16-byte chunk. Alternatives: (1) keep A row-major
//      in shared memory and read 4 k of a row per LDS.128 -- a thread would then hold
//      4 * TM values of A (64 for TM = 16) next to 128 accumulators; (2) stage A
//      through registers and store it transposed (09_warptiling.cu) -- staging
//      registers and STS in the loop, one tile of look-ahead; (3) move A one float at
//      a time with cp.async.ca 4 bytes, each float straight to its transposed place.
//      This kernel does (3). Thread t copies column k = t % 8 (+ 8h) of rows
//      t / 8 + p * (threads / 8). One warp instruction reads 4 rows x 8 consecutive
//      floats (four 32-byte sectors, fully used) and writes As[k][m] for 8 k x 4 m:
//      banks (4k + m) mod 32, all different: conflict-free. No alignment is needed.
//   B: 16-byte cp.async.cg along N (one warp = 512 contiguous bytes) when N % 4 == 0
//      and B starts 16-byte aligned (cupy allocations do; a view may not); otherwise
//      four 4-byte copies per float4. C is stored as float4 under the same condition.
//   Outside the matrices: k >= K is zero-filled (src-size 0); rows m >= M and columns
//   n >= N are clamped to the last row/column (finite data whose products land only in
//   results that are never stored). Every address read lies inside A or B. Tiles wholly
//   inside A and B (and N % 4 == 0) take an unguarded path with running pointers; the
//   branch between the two is uniform across the block.
//
// Pipeline (one barrier per k-slice): tile t lives in stage t % STAGES. At the start of
//   tile t the block issues the copies of tile t + STAGES - 1 into the stage tile t - 1
//   used (free: every warp passed the barrier after reading it). At its last k step it
//   waits until tile t + 1 has landed (cp.async.wait_group STAGES - 2), syncs, and loads
//   the first fragments of tile t + 1 before the last FFMA block of tile t.
//
// Register banks: an FFMA reads three registers, and two of them from the same bank
//   (on this reading, even or odd register numbers) cost the warp an extra cycle at
//   dispatch, which shows in Nsight Compute as "dispatch stall". The loop runs column by
//   column: fb[n] is held in the operand reuse cache and the FFMA reads fa[m] and
//   acc[m][n] from the register file. If C were stored straight from the accumulators
//   as float4, each group acc[m][4j..4j+3] would have to sit in four aligned registers,
//   and so would each float4 fragment fa[4i..4i+3]: half of all pairs would clash
//   whatever the allocator did. The store therefore builds its float4 from fresh copies
//   (fin::fresh, 128 FADD once per block), which frees the allocator to place the
//   accumulators where they do not clash: about 13% of the FFMA of the loop read two
//   registers of one parity instead of 92% (128x128, 16x8 per thread, in the sm_90
//   SASS), 3 to 4% more TFLOP/s at n = 4096. The serpentine order (down column n, up
//   column n + 1) lets the reuse cache also keep fa[m] at each turn.
//   Results are unchanged except that a result of -0 is stored as +0.
//
// Split-K (SPLITK > 1): block z computes the k-tiles [z * T, (z + 1) * T) of its output
//   tile (T = ceil(tiles / SPLITK)). The SPLITK blocks of one output tile then take turns
//   through a per-tile counter in global memory: block z waits for the counter to read
//   z, adds its partial sums to C (block 0 stores), and hands over to z + 1; the last
//   block resets the counter to 0 for the next launch. The order is fixed, so results
//   are bit-for-bit reproducible. This relies on what GPUs do in practice: blocks start
//   in order of their linear index (z slowest), so a waiting block's predecessor has
//   always started already.
//
// Preconditions: M, N, K >= 1; M*K, K*N, M*N < 2^31 (32-bit indexing); with SPLITK > 1,
//   at most 65536 output tiles per launch (size of the counter array).
//
// What changed from 09_warptiling.cu: register-staged double buffering becomes a
//   STAGES-deep cp.async pipeline in dynamic shared memory (no staging registers, no
//   stores from registers); A is transposed by 4-byte copies; blocks are rasterised in
//   groups for L2 reuse; optional deterministic split-K for shapes with few tiles; the
//   FFMA loop and the store are arranged to avoid register bank clashes.

namespace fin {

// Shared-memory operands are 32-bit shared-window addresses (byte offsets), computed
// once, so a copy costs no address conversion.
// 4-byte asynchronous copy global -> shared; src_bytes = 0 writes a zero.
__device__ __forceinline__ void cp_async4(unsigned smem, const float* gmem, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(smem), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async4(unsigned smem, const float* gmem)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(smem), "l"(gmem));
}
// 16-byte asynchronous copy global -> shared (L2 only); src_bytes = 0 writes zeros.
__device__ __forceinline__ void cp_async16(unsigned smem, const float* gmem, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(smem), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async16(unsigned smem, const float* gmem)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(smem), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

// A fresh register holding x (x + 0, which the compiler may not fold: -0 + 0 = +0).
// Used to build the float4 of C, so that the accumulators need not sit in aligned
// groups of four registers: see "Register banks" in the header.
__device__ __forceinline__ float fresh(float x)
{
    return __fadd_rn(x, 0.0f);
}

// Split-K turn counters, one per output tile; zero at module load, reset after use.
constexpr int MAX_SPLIT_TILES = 65536;
__device__ int split_turn[MAX_SPLIT_TILES];

__device__ __forceinline__ int load_acquire(const int* p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void store_release(int* p, int v)
{
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" :: "l"(p), "r"(v) : "memory");
}
}  // namespace fin

template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int STAGES, int SPLITK, int GROUP>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
sgemm_final(int M, int N, int K,
            const float* __restrict__ A,
            const float* __restrict__ B,
            float* __restrict__ C)
{
    using namespace fin;
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
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are made of 4x4 sub-tiles");
    static_assert(WM % TM == 0 && WN % TN == 0 && WTR * WTC == 32, "(WM/TM) * (WN/TN) must be 32 lanes");
    static_assert(BK % 8 == 0, "BK: a multiple of 8 (A is copied in groups of 8 k)");
    static_assert(BM % 32 == 0, "BM: a multiple of 32 (keeps LDA = 4 mod 32 banks)");
    static_assert(BM % A_ROWS == 0, "A's copy passes must cover BM rows exactly");
    static_assert(THREADS % B_CHUNKS_ROW == 0 && (BK * BN / 4) % THREADS == 0,
                  "B's float4 copies must split evenly over the threads, same column each pass");
    static_assert(STAGES >= 2 && STAGES <= 8, "2..8 stages");
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
    const bool b_vec = (N % 4) == 0 && reinterpret_cast<size_t>(B) % 16 == 0;   // rows 16-byte aligned
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

    // ---- split-K: wait for this tile's turn ----
    int* turn = nullptr;
    if (SPLITK > 1) {
        turn = &split_turn[blockIdx.y * gridDim.x + blockIdx.x];
        if (tid == 0)
            while (load_acquire(turn) != (int)blockIdx.z) __nanosleep(64);
        __syncthreads();
    }
    const bool add = (SPLITK > 1) && blockIdx.z > 0;

    // ---- store (or add to) C: float4 where aligned and inside, else one by one ----
    const bool c_vec = (N % 4) == 0 && reinterpret_cast<size_t>(C) % 16 == 0;
    #pragma unroll
    for (int i = 0; i < WMITER; ++i)
        #pragma unroll
        for (int a = 0; a < 4; ++a) {
            const int row = row0 + wm0 + i * WSUB_M + 4 * tr + a;
            if (row >= M) continue;
            #pragma unroll
            for (int j = 0; j < WNITER; ++j) {
                const int col = col0 + wn0 + j * WSUB_N + 4 * tc;
                float4 v = make_float4(fin::fresh(acc[4 * i + a][4 * j + 0]), fin::fresh(acc[4 * i + a][4 * j + 1]),
                                       fin::fresh(acc[4 * i + a][4 * j + 2]), fin::fresh(acc[4 * i + a][4 * j + 3]));
                float* dst = &C[row * N + col];
                if (c_vec && col + 3 < N) {
                    if (add) {
                        const float4 old = __ldcg(reinterpret_cast<const float4*>(dst));
                        v.x += old.x; v.y += old.y; v.z += old.z; v.w += old.w;
                    }
                    *reinterpret_cast<float4*>(dst) = v;
                } else {
                    const float vs[4] = {v.x, v.y, v.z, v.w};
                    #pragma unroll
                    for (int b = 0; b < 4; ++b)
                        if (col + b < N) dst[b] = add ? __ldcg(dst + b) + vs[b] : vs[b];
                }
            }
        }

    // ---- split-K: hand the tile to the next block (the last one resets the counter) ----
    if (SPLITK > 1) {
        __threadfence();
        __syncthreads();
        if (tid == 0) store_release(turn, (blockIdx.z + 1 == SPLITK) ? 0 : (int)blockIdx.z + 1);
    }
}
