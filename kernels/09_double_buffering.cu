// 08_double_buffering.cu -- load the next tile while computing on this one.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
// Block tile 128 x 128 x BK, 256 threads, 8 x 8 results per thread, float4
// global loads, A's tile transposed and XOR-swizzled in shared memory, split
// thread tile (all as in 07_bank_conflicts.cu).
//
// Thread -> tile mapping (compute), as in 07 with SPLIT = 1:
//   tcol = tid % 16, trow = tid / 16; thread (trow, tcol) owns rows
//   trow*4 .. +3 and 64 + trow*4 .. +3, columns tcol*4 .. +3 and 64 + tcol*4 .. +3.
// Thread -> tile mapping (loads), as in 06: float4 number i = tid + l * 256 of a
//   tile belongs to thread tid; A: row i / (BK/4), k-columns 4 * (i % (BK/4));
//   B: k-row i / 32, columns 4 * (i % 32).
//
// Three kernels.
//
// sgemm_double_buffering<BK, FIXED>: two shared-memory stages and two register
//   fragments. Each tile step issues the global loads of the NEXT tile into
//   registers first, computes on the current stage while they are in flight,
//   then stores them into the other stage; one barrier per tile. Inside a tile
//   the fragments (8 floats of A, 8 of B) for k + 1 are read from shared memory
//   while the 64 FFMAs of k run, and the first fragment of the next tile is read
//   right after the barrier, before the last 64 FFMAs of this tile.
//   The first tile is stored before the loop, and a barrier must follow it.
//   FIXED = 0 leaves that barrier out, like a widely copied version of this
//   kernel: fast warps read stage 0 before slow warps have written it, a
//   read-after-write race on shared memory that compute-sanitizer's racecheck
//   reports and that gives wrong results. It reads only memory it owns (no
//   out-of-bounds access), it just reads it too early. FIXED = 1 is the
//   one-line fix. The racy form exists only to be studied.
//
// sgemm_double_buffering_async<BK, STAGES>: a STAGES-deep pipeline of cp.async
//   copies (global -> shared memory without passing through registers, 16 bytes
//   each). STAGES - 1 tiles are in flight while the block computes on one.
//   cp.async cannot transpose, so A's tile stays row-major in shared memory,
//   (BM, BK); the inner loop reads 4 k-values of each of its 8 rows as one
//   float4 (LDS.128), then does 4 outer products: the same number of LDS.128 per
//   FFMA as the transposed tile.
//
// Preconditions: none on M, N, K >= 1. float4 (or 16-byte cp.async) only where
//   aligned (K % 4 == 0 for A, N % 4 == 0 for B and C, and each matrix starting
//   on a 16-byte boundary, which a view into a bigger array may not) and inside;
//   elsewhere one float at a time, with zeros for what lies outside A or B
//   (cp.async: the "src-size" operand, 0 bytes read and 16 or 4 bytes zeroed).
//   The choice is the same for every thread of the grid: warps never diverge.
//
// Shared memory: sgemm_double_buffering: 2 * (BK * 128 + BK * 128) * 4 bytes,
//   static (16 KB for BK = 8). sgemm_double_buffering_async: STAGES * (128 * BK
//   + BK * 128) * 4 bytes, dynamic (48 KB for BK = 16, STAGES = 3).
//
// What changed from 07_bank_conflicts.cu
//   * 07 loads a tile, waits at a barrier, computes, waits again: while a warp
//     waits for global memory it has nothing to compute. Here the loads of tile
//     t + 1 overlap the arithmetic of tile t (two stages), and one barrier per
//     tile is enough instead of two.

namespace db {
constexpr int BM = 128, BN = 128, TM = 8, TN = 8, THREADS = 256;

// Column of As where element (k, m) of the transposed A tile lives (07, SWIZZLE = 1):
// the k-rows one warp stores at once land in different banks. x has no low bits,
// so an aligned float4 stays contiguous and aligned.
template <int BK>
__device__ __forceinline__ int swz(int k, int m) { return m ^ ((k / 4) * (32 / (BK / 4)) % 32); }

// Every row of a row-major matrix with `cols` columns starting at X is 16-byte
// aligned when cols % 4 == 0 and X itself is (cupy allocations are; a view that
// starts inside another array may not be).
__device__ __forceinline__ bool aligned4(const float* X, int cols)
{
    return cols % 4 == 0 && reinterpret_cast<size_t>(X) % 16 == 0;
}

// Four consecutive floats p[0..3]; element j exists when ok && first + j < limit.
// vec: one 16-byte load (then first % 4 == 0 == limit % 4: all four exist or none).
// Missing elements are 0; nothing outside the matrix is read.
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

// Write the 8 x 8 results of thread (trow, tcol): float4 where aligned and inside C.
__device__ __forceinline__ void store_c(const float (&acc)[TM][TN], float* C, int M, int N,
                                        int row0, int col0, int trow, int tcol)
{
    const bool vec = aligned4(C, N);
    #pragma unroll
    for (int m = 0; m < TM; ++m) {
        const int row = row0 + trow * 4 + (m / 4) * (BM / 2) + m % 4;
        if (row >= M) continue;
        #pragma unroll
        for (int g = 0; g < 2; ++g) {
            const int col = col0 + tcol * 4 + g * (BN / 2);
            float* p = C + (size_t)row * N + col;
            if (vec && col < N) {
                *reinterpret_cast<float4*>(p) =
                    make_float4(acc[m][4 * g], acc[m][4 * g + 1], acc[m][4 * g + 2], acc[m][4 * g + 3]);
            } else {
                #pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (col + j < N) p[j] = acc[m][4 * g + j];
            }
        }
    }
}
}  // namespace db

template <int BK, int FIXED>
__global__ void __launch_bounds__(256, 2)
sgemm_double_buffering(int M, int N, int K,
                       const float* __restrict__ A,
                       const float* __restrict__ B,
                       float* __restrict__ C)
{
    using namespace db;
    static_assert(BK == 8 || BK == 16, "BK: 8 or 16");
    constexpr int A_ROW_STEP = THREADS / (BK / 4);   // rows between a thread's float4 of A (128, 64)
    constexpr int B_ROW_STEP = THREADS / (BN / 4);   // k-rows between its float4 of B (8)
    constexpr int A_LOADS = BM / A_ROW_STEP;         // float4 of A per thread per tile (1, 2)
    constexpr int B_LOADS = BK / B_ROW_STEP;         // float4 of B per thread per tile (1, 2)

    __shared__ __align__(16) float As[2][BK][BM];   // (stage, BK, BM): A's tile, transposed, swizzled
    __shared__ __align__(16) float Bs[2][BK][BN];   // (stage, BK, BN)

    const int tid = threadIdx.x;
    const int tcol = tid % 16, trow = tid / 16;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const bool a_vec = aligned4(A, K), b_vec = aligned4(B, N);
    const int a_row = tid / (BK / 4), a_col = 4 * (tid % (BK / 4));
    const int b_row = tid / (BN / 4), b_col = 4 * (tid % (BN / 4));

    // This thread's first float4 of A and of B; both move on by one tile per step.
    // A row of A (or a k-row of B) outside the matrix is never read.
    const float* pa = A + (size_t)min(row0 + a_row, M - 1) * K + a_col;
    const float* pb = B + (size_t)b_row * N + col0 + b_col;

    float4 ra[A_LOADS], rb[B_LOADS];  // the next tile, on its way from global memory
    float acc[TM][TN] = {};           // (TM, TN): rows trow*4 + {0..3, 64..67}, same for columns
    float a[2][TM], b[2][TN];         // two register fragments: k (in use) and k + 1 (loading)

    auto load_tile = [&](int k0) {    // ---- global -> registers: tile k0 .. k0+BK-1 ----
        #pragma unroll
        for (int l = 0; l < A_LOADS; ++l)
            ra[l] = ldg4(pa + l * A_ROW_STEP * K, row0 + a_row + l * A_ROW_STEP < M, k0 + a_col, K, a_vec);
        #pragma unroll
        for (int l = 0; l < B_LOADS; ++l)
            rb[l] = ldg4(pb + l * B_ROW_STEP * N, k0 + b_row + l * B_ROW_STEP < K, col0 + b_col, N, b_vec);
        pa += BK;                     // the next tile: BK columns of A further,
        pb += BK * N;                 // BK rows of B further
    };
    auto store_tile = [&](int s) {    // ---- registers -> shared stage s ----
        #pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int m = a_row + l * A_ROW_STEP;
            As[s][a_col + 0][swz<BK>(a_col + 0, m)] = ra[l].x;
            As[s][a_col + 1][swz<BK>(a_col + 1, m)] = ra[l].y;
            As[s][a_col + 2][swz<BK>(a_col + 2, m)] = ra[l].z;
            As[s][a_col + 3][swz<BK>(a_col + 3, m)] = ra[l].w;
        }
        #pragma unroll
        for (int l = 0; l < B_LOADS; ++l)
            *reinterpret_cast<float4*>(&Bs[s][b_row + l * B_ROW_STEP][b_col]) = rb[l];
    };
    auto load_frag = [&](int s, int k, int f) {   // ---- shared stage s, row k -> fragment f ----
        #pragma unroll
        for (int g = 0; g < 2; ++g) {
            *reinterpret_cast<float4*>(&a[f][4 * g]) =
                *reinterpret_cast<const float4*>(&As[s][k][swz<BK>(k, trow * 4) + g * (BM / 2)]);
            *reinterpret_cast<float4*>(&b[f][4 * g]) =
                *reinterpret_cast<const float4*>(&Bs[s][k][tcol * 4 + g * (BN / 2)]);
        }
    };
    auto outer_product = [&](int f) {   // ---- 64 FFMA on fragment f ----
        #pragma unroll
        for (int m = 0; m < TM; ++m)
            #pragma unroll
            for (int n = 0; n < TN; ++n) acc[m][n] += a[f][m] * b[f][n];
    };

    // ---- prologue: the first tile into stage 0 ----
    load_tile(0);
    store_tile(0);
    if (FIXED) __syncthreads();       // <- the barrier the racy version lacks
    load_frag(0, 0, 0);

    const int tiles = (K + BK - 1) / BK;
    for (int t = 0; t < tiles; ++t) {
        const int s = t & 1;
        const bool more = t + 1 < tiles;          // the same for the whole block
        if (more) load_tile((t + 1) * BK);        // issue the next tile's loads, don't wait

        // ---- compute on stage s while those loads are in flight ----
        #pragma unroll
        for (int k = 0; k < BK - 1; ++k) {
            load_frag(s, k + 1, (k + 1) % 2);     // fragment k + 1 ...
            outer_product(k % 2);                 // ... loads during the FFMAs of k
        }
        // ---- the next tile goes into the other stage ----
        if (more) {
            store_tile(s ^ 1);
            __syncthreads();                      // stage s^1 complete; everyone is done reading stage s
            load_frag(s ^ 1, 0, 0);               // its first fragment, during the last FFMAs
        }
        outer_product((BK - 1) % 2);
    }

    store_c(acc, C, M, N, row0, col0, trow, tcol);
}

// ------------------------------------------------------------------ cp.async
namespace db {
// Start a 16-byte copy global -> shared; only src_bytes (16 or 0) are read, the
// rest of the 16 bytes is zero-filled.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// The same for 4 bytes (any 4-byte-aligned address), src_bytes 4 or 0.
__device__ __forceinline__ void cp_async4(unsigned dst, const void* src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// Close the group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Wait until at most N groups of this thread are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }

// Copy p[0..3] to shared address dst; element j exists when ok && first + j < limit,
// missing ones become 0. vec: one 16-byte copy (first % 4 == 0 == limit % 4). When
// nothing is to be read, src is the matrix's first element: always a valid address.
struct yes_t { static constexpr bool value = true; };
struct no_t { static constexpr bool value = false; };
constexpr yes_t yes{};
constexpr no_t no{};

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
}  // namespace db

template <int BK, int STAGES>
__global__ void __launch_bounds__(256, 2)
sgemm_double_buffering_async(int M, int N, int K,
                             const float* __restrict__ A,
                             const float* __restrict__ B,
                             float* __restrict__ C)
{
    using namespace db;
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
    const bool a_vec = aligned4(A, K), b_vec = aligned4(B, N);
    const int a_row = tid / (BK / 4), a_col = 4 * (tid % (BK / 4));
    const int b_row = tid / (BN / 4), b_col = 4 * (tid % (BN / 4));
    const int tiles = (K + BK - 1) / BK;

    // This thread's first chunk of A and of B; both move on by one tile per issue.
    const float* pa = A + (size_t)min(row0 + a_row, M - 1) * K + a_col;
    const float* pb = B + (size_t)b_row * N + col0 + b_col;
    // Shared-memory byte addresses of this thread's chunks in stage 0.
    const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(As + a_row * BK + a_col));
    const unsigned sb = static_cast<unsigned>(__cvta_generic_to_shared(Bs + b_row * BN + b_col));

    auto copy_a = [&](auto vec, int k0, int stage) {
        #pragma unroll
        for (int l = 0; l < A_LOADS; ++l)
            cp4<decltype(vec)::value>(sa + 4 * (stage * A_STAGE + l * A_ROW_STEP * BK), pa + l * A_ROW_STEP * K,
                                      A, row0 + a_row + l * A_ROW_STEP < M, k0 + a_col, K);
    };
    auto copy_b = [&](auto vec, int k0, int stage) {
        #pragma unroll
        for (int l = 0; l < B_LOADS; ++l)
            cp4<decltype(vec)::value>(sb + 4 * (stage * B_STAGE + l * B_ROW_STEP * BN), pb + l * B_ROW_STEP * N,
                                      B, k0 + b_row + l * B_ROW_STEP < K, col0 + b_col, N);
    };
    auto issue = [&](int t, int stage) {     // ---- start copying tile t into a stage ----
        if (t < tiles) {
            const int k0 = t * BK;
            if (a_vec) copy_a(yes, k0, stage); else copy_a(no, k0, stage);
            if (b_vec) copy_b(yes, k0, stage); else copy_b(no, k0, stage);
            pa += BK;                        // the next tile: BK columns of A further,
            pb += BK * N;                    // BK rows of B further
        }
        cp_async_commit();                   // one group per tile (empty past the end)
    };

    float acc[TM][TN] = {};
    float a4[TM][4];                         // 4 k-values of each of the thread's 8 rows
    float b[TN];

    // ---- prologue: STAGES - 1 tiles in flight ----
    #pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) issue(s, s);

    int rd = 0, wr = STAGES - 1;             // stage to compute on, stage to refill
    for (int t = 0; t < tiles; ++t) {
        cp_async_wait<STAGES - 2>();         // this thread's copies of tile t have landed
        __syncthreads();                     // everyone's have; and everyone is done with tile t - 1
        issue(t + STAGES - 1, wr);           // refill the stage tile t - 1 used

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

    store_c(acc, C, M, N, row0, col0, trow, tcol);
}
