// 09_double_buffering.cu -- load the next tile while computing on this one.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
// Block tile 128 x 128 x BK, 256 threads, 8 x 8 results per thread, float4
// global loads, A's tile transposed and XOR-swizzled in shared memory, split
// thread tile (all as in 08_bank_conflicts.cu).
//
// Template parameters
//   BK      k-slice per step: 8 or 16
//   FIXED   1: the barrier after the first tile is there; 0: it is missing (below)
//   FAST_PATH  0: every global load is checked against the edges of A and B (any
//           shape); 1: no checks at all, for shapes made of whole tiles (below)
//
// Thread -> tile mapping (compute), as in 08 with SPLIT = 1:
//   tcol = tid % 16, trow = tid / 16; thread (trow, tcol) owns rows
//   trow*4 .. +3 and 64 + trow*4 .. +3, columns tcol*4 .. +3 and 64 + tcol*4 .. +3.
// Thread -> tile mapping (loads), as in 07: float4 number i = tid + l * 256 of a
//   tile belongs to thread tid; A: row i / (BK/4), k-columns 4 * (i % (BK/4));
//   B: k-row i / 32, columns 4 * (i % 32).
//
// Pipeline: two shared-memory stages and two register fragments. Each tile step
//   issues the global loads of the NEXT tile into registers first, computes on
//   the current stage while they are in flight, then stores them into the other
//   stage; one barrier per tile. Inside a tile the fragments (8 floats of A, 8 of
//   B) for k + 1 are read from shared memory while the 64 FFMAs of k run, and the
//   first fragment of the next tile is read right after the barrier, before the
//   last 64 FFMAs of this tile. The loop runs over every tile but the last, so it
//   never asks whether there is a next one; the last tile is computed after it,
//   on the stage the loop left in s.
//   The first tile is stored before the loop, and a barrier must follow it.
//   FIXED = 0 leaves that barrier out, like a widely copied version of this
//   kernel: fast warps read stage 0 before slow warps have written it, a
//   read-after-write race on shared memory that compute-sanitizer's racecheck
//   reports and that gives wrong results. It reads only memory it owns (no
//   out-of-bounds access), it just reads it too early. FIXED = 1 is the
//   one-line fix. The racy form exists only to be studied.
//
// Preconditions: FAST_PATH = 0: none on M, N, K >= 1. float4 only where aligned
//   (K % 4 == 0 for A, N % 4 == 0 for B and C, and each matrix starting on a 16-byte
//   boundary, which a view into a bigger array may not) and inside; elsewhere one
//   float at a time, with zeros for what lies outside A or B. The choice is the same
//   for every thread of the grid: warps never diverge.
//   FAST_PATH = 1: M and N multiples of 128, K a multiple of BK, A and B starting on
//   16-byte boundaries (the spec refuses other shapes, the launcher other operands):
//   plain float4 loads, no checks. Both: offsets into A, B and C are 64-bit (size_t):
//   operands of 2^31 elements or more are fine.
//
// Shared memory: 2 * (BK * 128 + BK * 128) * 4 bytes, static (16 KB for BK = 8).
//
// What changed from 08_bank_conflicts.cu
//   * 08 loads a tile, waits at a barrier, computes, waits again: while a warp
//     waits for global memory it has nothing to compute. Here the loads of tile
//     t + 1 overlap the arithmetic of tile t (two stages), and one barrier per
//     tile is enough instead of two.
//   * The loop never asks whether there is a next tile: the last tile, which loads
//     nothing, is computed after it. With FAST_PATH = 1, which leaves the checks at
//     the edges out, its body has no branch at all.

#include "common.cuh"   // rows_aligned16, store_split_8x8

namespace db {
constexpr int BM = 128, BN = 128, TM = 8, TN = 8, THREADS = 256;

// Column of As where element (k, m) of the transposed A tile lives (08, SWIZZLE = 1):
// the k-rows one warp stores at once land in different banks. x has no low bits,
// so an aligned float4 stays contiguous and aligned.
template <int BK>
__device__ __forceinline__ int swz(int k, int m) { return m ^ ((k / 4) * (32 / (BK / 4)) % 32); }

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
}  // namespace db

template <int BK, int FIXED, int FAST_PATH>
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
    const bool a_vec = rows_aligned16(A, K), b_vec = rows_aligned16(B, N);
    const int a_row = tid / (BK / 4), a_col = 4 * (tid % (BK / 4));
    const int b_row = tid / (BN / 4), b_col = 4 * (tid % (BN / 4));

    // This thread's first float4 of A and of B; both move on by one tile per step.
    // A row of A (or a k-row of B) outside the matrix is never read.
    const float* pa = A + (size_t)min(row0 + a_row, M - 1) * K + a_col;
    const float* pb = B + (size_t)b_row * N + col0 + b_col;
    const size_t a_step = (size_t)A_ROW_STEP * K;    // from one of its float4 of A to the next
    const size_t b_step = (size_t)B_ROW_STEP * N;    // and of B

    float4 ra[A_LOADS], rb[B_LOADS];  // the next tile, on its way from global memory
    float acc[TM][TN] = {};           // (TM, TN): rows trow*4 + {0..3, 64..67}, same for columns
    float a[2][TM], b[2][TN];         // two register fragments: k (in use) and k + 1 (loading)

    // region load_tile
    // ---- global -> registers: tile k0 .. k0+BK-1 ----
    // Every float4 checked against the edges of A and B (ldg4), or, FAST_PATH = 1, none.
    auto load_tile = [&](int k0) {
        #pragma unroll
        for (int l = 0; l < A_LOADS; ++l)
            ra[l] = FAST_PATH ? __ldg(reinterpret_cast<const float4*>(pa + l * a_step))
                              : ldg4(pa + l * a_step, row0 + a_row + l * A_ROW_STEP < M, k0 + a_col, K, a_vec);
        #pragma unroll
        for (int l = 0; l < B_LOADS; ++l)
            rb[l] = FAST_PATH ? __ldg(reinterpret_cast<const float4*>(pb + l * b_step))
                              : ldg4(pb + l * b_step, k0 + b_row + l * B_ROW_STEP < K, col0 + b_col, N, b_vec);
        pa += BK;                     // the next tile: BK columns of A further,
        pb += (size_t)BK * N;         // BK rows of B further
    };
    // endregion load_tile
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

    // region prologue
    // ---- prologue: the first tile into stage 0 ----
    load_tile(0);
    store_tile(0);
    if (FIXED) __syncthreads();       // <- the barrier the racy version lacks
    load_frag(0, 0, 0);
    // endregion prologue

    // region main_loop
    // ---- every tile but the last: compute on stage s while the next one loads ----
    const int tiles = (K + BK - 1) / BK;
    int s = 0;                        // the stage being computed on
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
    // endregion main_loop
    // region last_tile
    // ---- the last tile, on the stage the loop left in s: nothing more to load ----
    #pragma unroll
    for (int k = 0; k < BK - 1; ++k) {
        load_frag(s, k + 1, (k + 1) % 2);
        outer_product(k % 2);
    }
    outer_product((BK - 1) % 2);
    // endregion last_tile

    // ---- store C ----
    store_split_8x8(acc, C, M, N, row0, col0, trow, tcol);
}
