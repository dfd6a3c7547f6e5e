// 12_final.cu -- the final kernel: C = alpha * op(A) @ op(B) + beta * C for any layout of A and B,
// warp tiles fed by a multi-stage cp.async pipeline.
//
// Contract
//   op(A) is (M, K), op(B) is (K, N), C is (M, N) row-major with row stride ldc >= N.
//   A_T = 0: A is row-major,             op(A)(m, k) = A[m * lda + k]   (lda >= K)
//   A_T = 1: A is a transposed view,     op(A)(m, k) = A[k * lda + m]   (lda >= M)
//   B_T = 0: B is row-major,             op(B)(k, n) = B[k * ldb + n]   (ldb >= N)
//   B_T = 1: B is a transposed view,     op(B)(k, n) = B[n * ldb + k]   (ldb >= K)
//   beta == 0: C is only written (it may hold NaN); otherwise each element is read once.
//   A column-major C is the caller's: C^T = op(B)^T op(A)^T is the same call with A and B
//   swapped and A_T, B_T flipped.
//   M, N, K >= 1, each below 2^31; offsets into A, B, C are 64-bit. Any 4-byte alignment
//   and any ld: 16-byte copies and stores only where rows start 16-byte aligned.
//   sgemm_final_batched: a batch of such products in one launch, product z at A + z * batch_a,
//   B + z * batch_b, C + z * batch_c (64-bit strides, in floats); plain and split-K blocks only.
//
// Template parameters
//   BM, BN   block tile: a block computes BM x BN of C (both multiples of 32)
//   BK       k-slice per pipeline stage (a multiple of 8)
//   WM, WN   warp tile: each warp computes WM x WN of the block tile
//   TM, TN   thread tile: TM x TN results per thread, as (TM/4) x (TN/4) sub-tiles of 4 x 4
//   STAGES   shared-memory stages, 2..5: STAGES - 1 k-tiles are in flight while one is used
//   SPLITK   blocks along K (blockIdx.z), 1: no split
//   GROUP    rasterisation: 0 = row by row; G > 0 = G block-rows of C walked column by column
//   KU       k-steps per trip of the inner loop (even, divides BK); 0: the whole k-slice
//            unrolled. A short trip keeps the main loop inside the instruction cache.
//   STREAMK  0: one block per tile (and split). 1: stream-K (SPLITK = 1): grid (g, 1 + w);
//            the g blocks of row y = 0 share the first T - g * w tiles' k-tiles equally
//            (contiguous ranges, so a block may end one tile and start the next), and the
//            blocks of rows y >= 1 each compute one of the last g * w tiles whole (T: tiles
//            of C; needs g <= (T - g * w) * ceil(K / BK), and that times g below 2^31).
//   A_T, B_T the layouts above.
//   REDUCE   0: split-K parts added by the last block (below); 1: stored as slabs for a second kernel
//   EDGES    1: a tile over C's last row or column moves back to end at M or N (fin::origin), a whole
//            tile, and stores only its own rows and columns; 0: such a tile takes the guarded edge path
//   Block (BM/WM) * (BN/WN) * 32 threads ((WM/TM) * (WN/TN) = 32 lanes per warp);
//   grid (ceil(N/BN), ceil(M/BM), SPLITK), or the stream-K grid.
//   Plain and split-K blocks number their tile b = blockIdx.y * gridDim.x + blockIdx.x, so a grid
//   of (ceil(N/BN) * ceil(M/BM), 1, SPLITK) does the same work (M beyond 65535 tiles' rows).
//
// Thread -> tile mapping. Warp w owns the warp tile at rows wm0 = (w / (BN/WN)) * WM,
//   columns wn0 = (w % (BN/WN)) * WN; lane l sits at tr = l / (WN/TN), tc = l % (WN/TN)
//   and holds the rows wm0 + i * (WM/(TM/4)) + 4*tr + a and the columns
//   wn0 + j * (WN/(TN/4)) + 4*tc + b of the block tile (i < TM/4, j < TN/4, a, b < 4).
//   Copies (fin::TileCopy): both tiles are k-major in shared memory. An operand stored
//   along the tile's M (or N) is copied 16 bytes at a time; one stored along K, 4 bytes at
//   a time, each float to its transposed place.
//
// Shared memory (dynamic): STAGES * BK * (BM + PA + BN + PB) * 4 bytes; per stage
//   As (BK, BM + PA) then Bs (BK, BN + PB), k-major; PA = 4 when A_T = 0, PB = 4 when B_T = 1
//   (transposed stores: 4 floats of padding per row keep them free of bank conflicts; A's WIDE
//   copies also swizzle, TileCopy::swizzle). A stage's
//   B tile sits at a fixed offset from its A tile, so one pointer addresses both.
//
// Partial tiles (SPLITK > 1 or STREAMK; both pointers may be nullptr otherwise), one
//   workspace per concurrent launch: partials: BM * BN floats per slot, 16-byte aligned,
//   SPLITK slots per tile (split-K) or 2 per row-0 block (stream-K: its first and its last
//   tile); arrivals: one unsigned per tile, zero before the first launch (the kernel leaves
//   them zero, so the next launch on the same stream may reuse both). A block that computes
//   part of a tile writes its slot, fences, and counts itself in the tile's counter; the block
//   that arrives last adds the parts in k order and stores C (alpha and beta applied once).
//   No block waits for another, and the order of the sums is fixed: reproducible bit for bit.
//   REDUCE = 1 (split-K only; arrivals unused): no block adds anything; split z stores its part
//   whole (alpha 1, beta 0) to the slab partials + z * M * NP (row-major, M x N, row stride
//   NP = N rounded up to a multiple of 4, so that the slab's rows are 16-byte aligned), and the
//   caller launches kernels/12_reduce.cu to add the slabs in k order into C, alpha and beta applied.
//
// What changed from 10_warptiling.cu: a STAGES-deep cp.async pipeline instead of the
//   register-staged double buffer; any layout of A and B, alpha and beta; grouped
//   rasterisation; split-K and stream-K; a partly unrolled main loop; FFMA order and C
//   store arranged against register bank clashes; rows of C that are not 16-byte aligned
//   stored a warp's row at a time through shared memory.

#include "common.cuh"   // rows_aligned16, cp_async4/16, cp_async_commit, cp_async_wait

namespace fin {

__host__ __device__ constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }

// Four results for one 16-byte store, in registers of their own. A float4 store of the
// accumulators themselves makes the compiler keep each four in four aligned registers, whose
// banks alternate like those of the B fragment; with the row-by-row FFMA order, an FFMA then
// reads its accumulator and its B value from the same register bank. Stored as x + 0, the
// parts leave the accumulators where the FFMAs want them. x + 0 is a new value the compiler may not fold away (-0 + 0 is +0); a part of -0 is +0
// anyway once the parts are added.
__device__ __forceinline__ float4 fresh4(const float* r)
{
    return make_float4(r[0] + 0.0f, r[1] + 0.0f, r[2] + 0.0f, r[3] + 0.0f);
}

// ---------------------------------------------------------------- copies into shared memory
// Copies of one operand X into its k-major shared tile Xs (BK, LD) of a stage (the stages are
// STRIDE floats apart): Xs[k][r] = X(r0 + r, k0 + k) for r < R (R = BM for A, BN for B).
// X is `extent` long along r and K long along k.
//   ALONG_K, X(r, k) = X[r * ld + k]: TPR = 8 threads share a row (WIDE: 16); thread t copies
//     k = t % TPR (+ TPR h) of the rows t / TPR + p * (THREADS/TPR), 4 bytes each, straight to the
//     transposed place. A warp's 32 copies read 4 rows x 8 k (WIDE: 2 rows x 16 k, and the shared
//     memory takes 2 wavefronts instead of 4: one per row, 32 bytes or 64 from each).
//   otherwise, X(r, k) = X[k * ld + r]: TPR threads share a k-row; thread t copies the float4
//     at r = 4 * (t % TPR) + 4 * TPR * j (j < CHUNKS/TPR) of the k-rows t / TPR + p * (THREADS/TPR):
//     16 bytes when X's rows are 16-byte aligned, else 4 x 4 bytes (LANE_COPIES, in the fast
//     path: the columns c + TPR * i of c = t % TPR, so that consecutive lanes read consecutive
//     floats; otherwise the edge path). A thread's copies in a k-row are a fixed distance apart,
//     so one address per k-row serves them all: the integer work per k-tile is a few adds, off the
//     FMA pipe the FFMAs need. TPR >= 8: 8 threads' 16-byte stores fill the 32 banks once.
// Fast path (the tile wholly inside X, 16-byte aligned where it matters unless LANE_COPIES):
// one address per k-row (per row along K), no guards. Edge path: r clamped into X (results
// never stored), k >= K zero-filled. SHIFT (EDGES = 1): the tile may start at any column (a tile
// moved back to end at X's edge), so its 16-byte copies also need a start that is a multiple of 4.
// copy_problem() in helpers/runtime/specs/final.py refuses the tiles the static_asserts refuse
// (tests/test_final_rules.py).
template <int R, int BK, int THREADS, bool ALONG_K, int STRIDE, bool LANE_COPIES, bool SHIFT = false,
          bool WIDE_ = false>
struct TileCopy {
    static constexpr bool WIDE = WIDE_;               // 4-byte copies 16 threads to a row, swizzled (below)
    static constexpr int PAD = ALONG_K ? 4 : 0;       // LD = 4 (mod 32): conflict-free transposed stores
    static constexpr int LD = R + PAD;                // floats per k-row of the shared tile
    static constexpr int CHUNKS = R / 4;              // float4 per k-row (16-byte copies)
    static constexpr int TPR = ALONG_K ? (WIDE ? 16 : 8) : (THREADS / BK > 8 ? THREADS / BK : 8);  // threads per (k-)row
    static constexpr int CPT = ALONG_K ? BK / TPR : CHUNKS / TPR;   // copies per thread and (k-)row
    static constexpr int STEP = THREADS / TPR;        // rows (k-rows) per pass
    static constexpr int PASSES = ALONG_K ? R / STEP : BK / STEP;
    static_assert(R % 32 == 0, "BM, BN: multiples of 32");
    static_assert(!ALONG_K || (THREADS % TPR == 0 && R % STEP == 0 && BK % 8 == 0),
                  "4-byte copies: THREADS/8 (WIDE: THREADS/16) rows per pass must cover R exactly; BK a multiple of 8");
    static_assert(!WIDE || (ALONG_K && BK % 16 == 0 && STEP % 4 == 0), "WIDE: 4-byte copies, BK a multiple of 16");
    static_assert(ALONG_K || (CHUNKS % TPR == 0 && BK % STEP == 0),
                  "16-byte copies: max(8, THREADS/BK) threads per k-row must divide R/4, and THREADS cover BK k-rows exactly");

    // Where X(r, k) sits in k-row k of the tile: column r ^ swizzle(k). WIDE: a row's 16 floats
    // would fall in 8 banks twice over (LD = 4 mod 32), so the k-rows 8..15 of every 16 hold row
    // r in column r ^ 2, inside its float4: a warp's 32 stores land in 32 banks. A fragment read
    // from such a k-row holds its four values in the order 2, 3, 0, 1 (fma_step swaps them back).
    static constexpr __host__ __device__ int swizzle(int k) { return WIDE ? (k & 8) >> 2 : 0; }

    const float* X;
    int ld, extent, K;
    int r, tk;             // this thread's first element: X(r, k0 + tk)
    unsigned dst;          // shared-window byte address of this thread's first slot in stage 0
    bool vec, inside;

    // k0: where the copies start along K (0, or a stream-K segment's first k: see the kernel);
    // X and K are taken from there on.
    __device__ TileCopy(const float* X_, int ld_, int extent_, int K_, int r0, int k0, float* Xs)
        : X(ALONG_K ? X_ + k0 : X_ + (size_t)k0 * ld_), ld(ld_), extent(extent_), K(K_ - k0)
    {
        // region transpose: where this thread's copies go
        const int t = threadIdx.x;
        const int tr = ALONG_K ? t / TPR : (t % TPR) * 4;
        tk = ALONG_K ? t % TPR : t / TPR;
        r = r0 + tr;
        vec = !ALONG_K && rows_aligned16(X, ld);
        if constexpr (SHIFT) vec = vec && r0 % 4 == 0;   // a tile moved back (EDGES = 1) may start mid-float4
        inside = r0 + R <= extent && (ALONG_K || vec || LANE_COPIES);
        dst = static_cast<unsigned>(__cvta_generic_to_shared(Xs + tk * LD + (tr ^ swizzle(tk))));
        // endregion transpose
    }

    // region fast_path: A's copies, fast and guarded
    // Start the copies of the k-tile at k0 into `stage`.
    __device__ void issue(int k0, int stage) const
    {
        const unsigned d = dst + stage * (STRIDE * 4);
        const bool fast = inside && k0 + BK <= K;
        if constexpr (ALONG_K) {
            if (fast) {
                const float* src = X + (size_t)r * ld + k0 + tk;
                #pragma unroll
                for (int p = 0; p < PASSES; ++p, src += (size_t)STEP * ld)
                    #pragma unroll
                    for (int h = 0; h < CPT; ++h)
                        cp_async4(d + (TPR * h * LD + p * STEP) * 4, src + TPR * h);
            } else {
                #pragma unroll
                for (int p = 0; p < PASSES; ++p) {
                    const float* row = X + (size_t)min(r + p * STEP, extent - 1) * ld;
                    #pragma unroll
                    for (int h = 0; h < CPT; ++h) {
                        const int k = k0 + tk + TPR * h;
                        cp_async4(d + (TPR * h * LD + p * STEP) * 4, row + (k < K ? k : 0), k < K ? 4 : 0);
                    }
                }
            }
    // endregion fast_path
        } else {
            if (fast && vec) {
                const float* src = X + (size_t)(k0 + tk) * ld + r;
                #pragma unroll
                for (int p = 0; p < PASSES; ++p, src += (size_t)STEP * ld)
                    #pragma unroll
                    for (int j = 0; j < CPT; ++j)
                        cp_async16(d + (p * STEP * LD + 4 * TPR * j) * 4, src + 4 * TPR * j);
            } else if (LANE_COPIES && fast) {
                // rows not 16-byte aligned: 4-byte copies, consecutive lanes on consecutive floats:
                // thread c of a k-row copies its columns c + TPR * i instead of 4c .. 4c + 3
                const int shift = 3 * (threadIdx.x % TPR);
                const float* src = X + (size_t)(k0 + tk) * ld + r - shift;
                const unsigned du = d - shift * 4;
                #pragma unroll
                for (int p = 0; p < PASSES; ++p, src += (size_t)STEP * ld)
                    #pragma unroll
                    for (int i = 0; i < 4 * CPT; ++i)
                        cp_async4(du + (p * STEP * LD + i * TPR) * 4, src + i * TPR);
            } else {
                // rolled loops: the edge path's addresses stay out of the main loop's registers
                #pragma unroll 1
                for (int p = 0; p < PASSES; ++p) {
                    const int k = k0 + tk + p * STEP;
                    const float* row = X + (size_t)(k < K ? k : 0) * ld;
                    #pragma unroll 1
                    for (int j = 0; j < CPT; ++j) {
                        const int c = r + 4 * TPR * j;
                        const unsigned dj = d + (p * STEP * LD + 4 * TPR * j) * 4;
                        if (vec && c + 4 <= extent) {
                            cp_async16(dj, row + c, k < K ? 16 : 0);
                        } else {
                            #pragma unroll
                            for (int b = 0; b < 4; ++b)
                                cp_async4(dj + b * 4, row + min(c + b, extent - 1), k < K ? 4 : 0);
                        }
                    }
                }
            }
        }
    }
};

// ---------------------------------------------------------------- which work a block does
// A piece of a block's work: k-tiles [kt0, kt0 + count) of output tile pid (rasterised order),
// a tile that `parts` blocks share (1: this block alone); this block computes part `part`
// (parts in k order), and part c keeps its partial tile in slot c ? base + STEP * c : base0.
struct Segment {
    int pid, kt0, count, parts, part, base0, base;
};

// Plain and split-K blocks do one segment; stream-K blocks of row 0 a run of consecutive
// k-tiles that may end one tile and start the next.
template <int BM, int BN, int BK, int SPLITK, int STREAMK, int GROUP, bool BATCHED = false>
struct Schedule {
    static constexpr int STEP = STREAMK ? 2 : 1;     // slots between consecutive parts of a tile
    int M, N, K;

    __device__ int tiles_n() const { return cdiv(N, BN); }
    // this block's part of a split of K (a batch: blockIdx.z = product * SPLITK + split)
    __device__ int split() const { return BATCHED ? (int)(blockIdx.z % SPLITK) : (int)blockIdx.z; }
    __device__ int k_tiles() const { return cdiv(K, BK); }
    // stream-K: tiles 0 .. sk_tiles() - 1 are shared by the gridDim.x blocks of row 0; their
    // k-tiles are numbered i = pid * k_tiles() + kt, and block b starts at begin(b)
    // (32-bit: sk_iters() * gridDim.x < 2^31, a rule of the launch)
    __device__ int sk_tiles() const { return cdiv(M, BM) * tiles_n() - gridDim.x * (gridDim.y - 1); }
    __device__ int sk_iters() const { return sk_tiles() * k_tiles(); }
    __device__ int begin(int b) const { return b * sk_iters() / (int)gridDim.x; }
    __device__ int owner(int i) const { return ((i + 1) * (int)gridDim.x - 1) / sk_iters(); }

    __device__ Segment first() const
    {
        const int b = blockIdx.y * gridDim.x + blockIdx.x;
        if (STREAMK && blockIdx.y == 0) return at(begin(blockIdx.x));
        if (STREAMK) return {sk_tiles() + b - (int)gridDim.x, 0, k_tiles(), 1, 0, 0, 0};
        if (SPLITK == 1) return {b, 0, k_tiles(), 1, 0, 0, 0};
        const int per = cdiv(k_tiles(), SPLITK), kt0 = min(k_tiles(), split() * per);
        return {b, kt0, min(k_tiles() - kt0, per), SPLITK, split(), b * SPLITK, b * SPLITK};   // may be empty
    }
    // stream-K: this block's segment that starts at iteration i. Row-0 block b writes its first
    // tile to slot 2b (its last too, when it is the same) and its last tile to 2b + 1: part 0 of
    // a tile is the last tile of a block that began in an earlier one, or the first of one that
    // begins with it.
    __device__ Segment at(int i) const
    {
        const int pid = i / k_tiles(), kt0 = i - pid * k_tiles(), i0 = pid * k_tiles();
        const int first = owner(i0), last = owner(i0 + k_tiles() - 1);
        return {pid, kt0, min(k_tiles() - kt0, begin(blockIdx.x + 1) - i), last - first + 1,
                (int)blockIdx.x - first, 2 * first + (begin(first) < i0 ? 1 : 0), 2 * first};
    }
    // The block's next segment, if any.
    __device__ bool next(Segment& s) const
    {
        if (!STREAMK || blockIdx.y > 0) return false;
        const int i = s.pid * k_tiles() + s.kt0 + s.count;
        if (i >= begin(blockIdx.x + 1)) return false;
        s = at(i);
        return true;
    }
    // region rasterise
    // (tile row, tile column) of tile pid: row by row, or GROUP block-rows column by column
    __device__ void tile(int pid, int& tm, int& tn) const
    {
        if (GROUP > 0) {
            const int per_group = GROUP * tiles_n(), g = pid / per_group, first_m = g * GROUP;
            const int rows_here = min(cdiv(M, BM) - first_m, GROUP), r = pid - g * per_group;
            tm = first_m + r % rows_here;
            tn = r / rows_here;
        } else {
            tm = pid / tiles_n();
            tn = pid % tiles_n();
        }
    }
    // endregion rasterise
};

// region launch_bounds
// Blocks per SM that __launch_bounds__ asks for (0: no request). A thread tile of 64 results
// (8 x 8 or 4 x 16) compiles to more than 128 registers when left alone: three blocks of 128
// threads per SM. Asked for four, ptxas fits it in 128 registers without spilling where B is read
// row-major and no block shares a tile; the fourth block hides the pipeline fill of blocks with
// few k-tiles. Split-K and stream-K blocks are slower at 128 registers, a transposed B spills, and
// with A row-major (NN) so do 3 stages and k-slices of 8 (sm_90, NVRTC 13): those keep the
// compiler's own count. bounded() in helpers/runtime/specs/final.py states the same rule
// (tests/test_final_rules.py).
__host__ __device__ constexpr int min_blocks(int TM, int TN, int THREADS, int BK, int STAGES, int SPLITK,
                                             int STREAMK, int A_T, int B_T)
{
    const bool plain = SPLITK == 1 && STREAMK == 0 && B_T == 0;
    const bool fits = A_T == 1 || (BK >= 16 && STAGES != 3);
    return TM * TN == 64 && THREADS == 128 && plain && fits ? 4 : 0;
}
// endregion launch_bounds

// EDGES = 1: the first row (column) of a tile of T rows (columns) at tile index t. A tile over the
// edge of a matrix that holds a whole tile moves back to end at the edge: it overlaps the tile
// before it, copies as a whole tile does, and stores only from t * T on (the rows before are the
// other tile's: computed twice, stored once, so that beta reads each element of C once). On the
// guarded path such a tile costs its block more per k-tile, and where the last row or column of
// tiles finishes last it sets the time.
// region edges
__device__ __forceinline__ int origin(int t, int T, int extent, bool shift)
{
    const int o = t * T;
    return shift && o + T > extent && extent >= T ? extent - T : o;
}
// endregion edges

// ---------------------------------------------------------------- the configuration
// The kernel's template parameters as one type, with the sizes that follow from them and the
// rules they must keep. BATCHED: one product of a batch (sgemm_final_batched).
template <int BM_, int BN_, int BK_, int WM_, int WN_, int TM_, int TN_, int STAGES_, int SPLITK_, int GROUP_,
          int KU_, int STREAMK_, int A_T_, int B_T_, int REDUCE_, int EDGES_, bool BATCHED_>
struct Config {
    static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, TM = TM_, TN = TN_;
    static constexpr int STAGES = STAGES_, SPLITK = SPLITK_, GROUP = GROUP_, KU = KU_, STREAMK = STREAMK_;
    static constexpr int A_T = A_T_, B_T = B_T_, REDUCE = REDUCE_, EDGES = EDGES_;
    static constexpr bool BATCHED = BATCHED_;

    static constexpr int WARPS_N = BN / WN;
    static constexpr int THREADS = (BM / WM) * WARPS_N * 32;
    static constexpr int WMITER = TM / 4, WNITER = TN / 4;   // 4x4 sub-tiles per thread
    static constexpr int WTR = WM / TM, WTC = WN / TN;       // lanes along M and N in a warp
    static constexpr int WSUB_M = WM / WMITER, WSUB_N = WN / WNITER;  // sub-tile pitch: 4*WTR, 4*WTC
    static constexpr int KSTEP = KU ? KU : BK;               // k-steps per trip of the inner loop
    static constexpr int SLOT = BM * BN / 4;                 // float4 per partial tile, (TM*TN/4, THREADS)
    static constexpr int LDA = BM + (A_T == 0 ? 4 : 0), LDB = BN + (B_T == 1 ? 4 : 0);   // padded when transposed
    static constexpr int STAGE = BK * (LDA + LDB);           // floats per stage: (BK, LDA) of A, then (BK, LDB) of B
    // Unaligned C: each warp stages WSUB_M rows of WN floats (pitch SROW: float4 writes of a warp's
    // 8 rows x 4 lanes free of bank conflicts) in the stages' memory, where that fits. Thread tiles
    // of 64 results or fewer only: with 128, the staging takes registers from stream-K (spills), and
    // in plain and split-K blocks of the 64 x 256 tile it moves the accumulators into registers
    // whose banks clash with the B fragment's on nearly every FFMA (tests/test_sass.py). Not for
    // slabs: their rows are padded to 16 bytes (REDUCE below), so they store float4 whatever N is.
    static constexpr int SROW = WN + 4;
    static constexpr bool STAGE_C = TM * TN <= 64 && !REDUCE && (BM / WM) * WARPS_N * WSUB_M * SROW <= STAGES * STAGE;
    // TM x TN FFMA row by row (128 results per thread, or rows of 16) or column by column
    static constexpr bool ROWS = TM * TN >= 128 || TN >= 16;

    // A_T = 0: A's rows run along K; B_T = 1: B's. Only B has a fast path for unaligned rows:
    // one for A costs the TN main loop registers, and packing gives A aligned rows.
    // A row-major A is copied 16 threads to a row (TileCopy's WIDE) where a thread holds 128 results
    // and no block shares its tile by stream-K (wide_a() in helpers/runtime/specs/final.py): twice
    // the rows per thread, each a pointer kept through the main loop, cost smaller thread tiles
    // blocks per SM, and stream-K's main loop (at the register cap) spills. A transposed B keeps
    // 8 threads to a row: slower with 16 in NT (book/97_tuning_log.md).
    static constexpr bool WIDE_A = A_T == 0 && BK % 16 == 0 && TM * TN >= 128 && STREAMK == 0
                                   && THREADS % 64 == 0 && BM % (THREADS / 16) == 0;
    using CopyA = TileCopy<BM, BK, THREADS, A_T == 0, STAGE, false, EDGES == 1, WIDE_A>;
    using CopyB = TileCopy<BN, BK, THREADS, B_T == 1, STAGE, true, EDGES == 1>;
    using Sched = Schedule<BM, BN, BK, SPLITK, STREAMK, GROUP, BATCHED>;
    using Acc = float[TM][TN];                               // (TM, TN) results of a thread

    static_assert(CopyA::LD == LDA && CopyB::LD == LDB, "padding: 4 floats where the copies transpose");
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are made of 4x4 sub-tiles");
    static_assert(WM % TM == 0 && WN % TN == 0 && WTR * WTC == 32, "(WM/TM) * (WN/TN) must be 32 lanes");
    static_assert(BK % 8 == 0, "BK: a multiple of 8");
    static_assert(KSTEP % 2 == 0 && BK % KSTEP == 0, "KU: even and a divisor of BK (fragments alternate)");
    static_assert(STAGES >= 2 && STAGES <= 5, "STAGES: 2..5");
    static_assert(SPLITK >= 1 && (STREAMK == 0 || SPLITK == 1), "SPLITK >= 1; stream-K does not split further");
    static_assert((A_T == 0 || A_T == 1) && (B_T == 0 || B_T == 1) && (STREAMK == 0 || STREAMK == 1)
                  && (EDGES == 0 || EDGES == 1), "flags: 0 or 1");
    static_assert(!BATCHED || (STREAMK == 0 && REDUCE == 0),
                  "a batch: plain or split-K blocks, the parts added by the last block");
};

// ---------------------------------------------------------------- split-K and stream-K fix-up
// A tile that seg.parts blocks share (split-K, stream-K; REDUCE = 0). Each block publishes its
// part in its slot; the block that arrives last adds every part in k order into acc and stores
// the tile. (REDUCE = 1 publishes nothing here: each part is stored whole, as a slab of M x N,
// rows padded, of its own in `partials`, and a second kernel adds them: kernels/12_reduce.cu.)
template <class Cfg>
__device__ __forceinline__ float4* part_slot(const Segment& seg, float* partials, int tid, int c)
{
    return reinterpret_cast<float4*>(partials) + tid      // slot s: float4 s * SLOT + ...
           + (size_t)(c ? seg.base + Cfg::Sched::STEP * c : seg.base0) * Cfg::SLOT;
}

// Publish this block's part; true for the block that arrives last (it adds the parts).
template <class Cfg>
__device__ __forceinline__ bool publish_part(const Segment& seg, float* partials, unsigned* arrivals, int tid,
                                             const typename Cfg::Acc& acc)
{
    constexpr int TM = Cfg::TM, WNITER = Cfg::WNITER, THREADS = Cfg::THREADS;
    // region split_k
    // ---- a shared tile: publish this part; the block that arrives last adds them all ----
    float4* mine = part_slot<Cfg>(seg, partials, tid, seg.part);
    #pragma unroll
    for (int m = 0; m < TM; ++m)
        #pragma unroll
        for (int j = 0; j < WNITER; ++j)            // consecutive threads, consecutive float4
            mine[(m * WNITER + j) * THREADS] = Cfg::ROWS ? fresh4(acc[m] + 4 * j)
                                                         : make_float4(acc[m][4 * j], acc[m][4 * j + 1],
                                                                       acc[m][4 * j + 2], acc[m][4 * j + 3]);
    __threadfence();                                // this thread's part visible GPU-wide ...
    __syncthreads();                                // ... for every thread of the block
    unsigned before = 0;                            // parts of this tile that arrived earlier
    if (tid == 0) {
        before = atomicAdd(&arrivals[seg.pid], 1u);
        __threadfence();                            // their slots are visible to this block from here
    }
    if (!__syncthreads_or(before == seg.parts - 1)) return false;   // not the last: next segment
    if (tid == 0) arrivals[seg.pid] = 0;            // every part has arrived: reset for the next launch
    return true;
    // endregion split_k
}

// The last block: acc = the sum of the parts, in k order.
template <class Cfg>
__device__ __forceinline__ void sum_parts(const Segment& seg, float* partials, int tid, typename Cfg::Acc& acc)
{
    constexpr int TM = Cfg::TM, TN = Cfg::TN, WNITER = Cfg::WNITER, THREADS = Cfg::THREADS;
    // region add_parts: the last block adds the parts in k order
    #pragma unroll
    for (int m = 0; m < TM; ++m)
        #pragma unroll
        for (int n = 0; n < TN; ++n) acc[m][n] = 0.0f;
    // the parts in k order, from L2 (never a stale L1 line), RB rows of the thread tile at
    // a time: with 128 results per thread, all rows at once (128 floats in flight on top of
    // the 128 accumulators) would take the kernel to the 255-register cap, where the
    // compiler places the main loop's fragment loads late
    constexpr int RB = TM * TN >= 128 ? TM / 2 : TM;
    #pragma unroll
    for (int m0 = 0; m0 < TM; m0 += RB) {
        #pragma unroll 1
        for (int c = 0; c < seg.parts; ++c) {
            const float4* part = part_slot<Cfg>(seg, partials, tid, c);
            #pragma unroll
            for (int m = m0; m < m0 + RB; ++m)
                #pragma unroll
                for (int j = 0; j < WNITER; ++j) {
                    const float4 w = __ldcg(part + (m * WNITER + j) * THREADS);
                    acc[m][4 * j] += w.x; acc[m][4 * j + 1] += w.y;
                    acc[m][4 * j + 2] += w.z; acc[m][4 * j + 3] += w.w;
                }
        }
    }
    // endregion add_parts
}

// ---------------------------------------------------------------- the epilogue
// Store C = alpha * acc + beta * C for the tile at (tile_m, tile_n): float4 where aligned, else
// staged, one float per lane. alpha * acc lands in fresh registers: the accumulators need not sit
// in aligned groups of four for the float4 store, so the allocator can keep FFMA operands apart.
// REDUCE = 1: this part's slab instead of C (alpha 1, beta 0).
template <class Cfg>
__device__ __forceinline__ void store_tile(const typename Cfg::Acc& acc, int tile_m, int tile_n, int part,
                                           int M, int N, float alpha, float beta, float* C, int ldc,
                                           float* partials, float* smem, int lane, int warp, int wm0, int wn0,
                                           int tr, int tc)
{
    constexpr int BM = Cfg::BM, BN = Cfg::BN, WN = Cfg::WN, WMITER = Cfg::WMITER, WNITER = Cfg::WNITER;
    constexpr int WSUB_M = Cfg::WSUB_M, WSUB_N = Cfg::WSUB_N, SROW = Cfg::SROW, EDGES = Cfg::EDGES;
    const int row0 = origin(tile_m, BM, M, EDGES == 1), col0 = origin(tile_n, BN, N, EDGES == 1);
    // x in [lo, hi): EDGES = 1 stores a tile moved back from its own first row (column) lo on, one
    // unsigned compare as for the upper bound alone
    const int row_lo = tile_m * BM, col_lo = tile_n * BN;
    auto in = [](int x, int lo, int hi) { return EDGES == 1 ? (unsigned)(x - lo) < (unsigned)(hi - lo) : x < hi; };
    float* out = C;                                 // C, or (REDUCE = 1) this part's slab
    int ldo = ldc;
    float a_out = alpha, b_out = beta;
    if constexpr (Cfg::REDUCE) {
        // slab rows padded to 16 bytes: float4 stores whatever N is (rows N floats apart would
        // take one 4-byte store per result where N % 4 != 0)
        ldo = (N + 3) / 4 * 4;
        out = partials + (size_t)part * M * ldo;
        a_out = 1.0f;
        b_out = 0.0f;
    }
    const bool c_vec = rows_aligned16(out, ldo);
    if (Cfg::STAGE_C && !c_vec) {
        // Rows not 16-byte aligned: 4-byte stores. A thread's own four columns would spread each
        // store instruction of a warp over 8 rows x 64 bytes, four times the sectors it fills; so
        // each warp stages one row of its sub-tiles at a time (WSUB_M rows, WN columns) in shared
        // memory, and stores a row's WN floats with consecutive lanes.
        __syncthreads();                            // every warp is done reading the stages
        float* staged = smem + warp * WSUB_M * SROW;
        #pragma unroll
        for (int i = 0; i < WMITER; ++i) {
            #pragma unroll
            for (int a = 0; a < 4; ++a)
                #pragma unroll
                for (int j = 0; j < WNITER; ++j) {
                    const float* r = acc[4 * i + a] + 4 * j;
                    *reinterpret_cast<float4*>(staged + (4 * tr + a) * SROW + j * WSUB_N + 4 * tc) =
                        make_float4(a_out * r[0], a_out * r[1], a_out * r[2], a_out * r[3]);
                }
            __syncwarp();
            #pragma unroll 4
            for (int r = 0; r < WSUB_M; ++r) {
                const int row = row0 + wm0 + i * WSUB_M + r;
                #pragma unroll
                for (int c = lane; c < WN; c += 32) {
                    const int col = col0 + wn0 + c;
                    if (in(row, row_lo, M) && in(col, col_lo, N)) {
                        float* dst = out + (size_t)row * ldo + col;
                        const float v = staged[r * SROW + c];
                        *dst = b_out != 0.0f ? fmaf(b_out, *dst, v) : v;
                    }
                }
            }
            __syncwarp();                           // the warp's reads done before the next sub-tile row
        }
        return;
    }
    #pragma unroll
    for (int i = 0; i < WMITER; ++i)
        #pragma unroll
        for (int a = 0; a < 4; ++a) {
            const int row = row0 + wm0 + i * WSUB_M + 4 * tr + a;
            if (!in(row, row_lo, M)) continue;
            #pragma unroll
            for (int j = 0; j < WNITER; ++j) {
                const int col = col0 + wn0 + j * WSUB_N + 4 * tc;
                const float* r = acc[4 * i + a] + 4 * j;
                float4 v = Cfg::REDUCE && Cfg::ROWS ? fresh4(r)      // a_out = 1 would store acc itself
                                                    : make_float4(a_out * r[0], a_out * r[1], a_out * r[2], a_out * r[3]);
                float* dst = out + (size_t)row * ldo + col;
                // (a tile moved back by other than a multiple of 4 columns stores one float at a time)
                if (EDGES == 1 ? c_vec && col0 % 4 == 0 && in(col + 3, col_lo + 3, N) : c_vec && col + 3 < N) {
                    if (b_out != 0.0f) {
                        const float4 c = *reinterpret_cast<const float4*>(dst);
                        v = make_float4(fmaf(b_out, c.x, v.x), fmaf(b_out, c.y, v.y),
                                        fmaf(b_out, c.z, v.z), fmaf(b_out, c.w, v.w));
                    }
                    *reinterpret_cast<float4*>(dst) = v;
                } else {
                    const float vs[4] = {v.x, v.y, v.z, v.w};
                    #pragma unroll
                    for (int b = 0; b < 4; ++b)
                        if (in(col + b, col_lo, N)) dst[b] = b_out != 0.0f ? fmaf(b_out, dst[b], vs[b]) : vs[b];
                }
            }
        }
}

// ---------------------------------------------------------------- the block
// One product (sgemm_final), or one product of a batch (sgemm_final_batched, at the end of the
// file). BATCHED: blockIdx.z = product * SPLITK + split, and product z reads A + z * batch_a,
// B + z * batch_b and writes C + z * batch_c (a batch stride of 0: every product reads the same
// matrix); its partial tiles and arrival counters are its own.
template <class Cfg>
__device__ __forceinline__ void body(int M, int N, int K, float alpha,
                                     const float* __restrict__ A, int lda,
                                     const float* __restrict__ B, int ldb,
                                     float beta, float* __restrict__ C, int ldc,
                                     float* partials, unsigned* arrivals,
                                     long long batch_a, long long batch_b, long long batch_c)
{
    constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, WM = Cfg::WM, WN = Cfg::WN;
    constexpr int SPLITK = Cfg::SPLITK, STREAMK = Cfg::STREAMK, EDGES = Cfg::EDGES;
    extern __shared__ __align__(16) float smem[];
    float* As = smem;                               // stage s: As + s * STAGE, (BK, LDA), k-major
    float* Bs = smem + BK * Cfg::LDA;               // stage s: Bs + s * STAGE, (BK, LDB), k-major

    // region warp_tile
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm0 = (warp / Cfg::WARPS_N) * WM, wn0 = (warp % Cfg::WARPS_N) * WN;
    const int tr = lane / Cfg::WTC, tc = lane % Cfg::WTC;
    // endregion warp_tile

    if constexpr (Cfg::BATCHED) {                   // this block's product of the batch
        const long long z = blockIdx.z / SPLITK;
        A += z * batch_a;
        B += z * batch_b;
        C += z * batch_c;
        if constexpr (SPLITK > 1) {                 // SPLITK partial tiles and one counter per tile
            const long long tiles = (long long)cdiv(M, BM) * cdiv(N, BN);
            partials += z * tiles * SPLITK * (BM * BN);
            arrivals += z * tiles;
        }
    }

    const typename Cfg::Sched sched{M, N, K};
    // Stream-K: the segment waits in shared memory while the main loop runs (that needs every
    // register); plain and split-K segments are a function of blockIdx, cheap to keep.
    __shared__ Segment current;
    Segment seg = sched.first();
    do {                                            // one segment: plain and split-K blocks have one
        int tile_m, tile_n;
        sched.tile(seg.pid, tile_m, tile_n);
        __syncthreads();                            // the previous segment's readers are done with the stages
        if (STREAMK && tid == 0) current = seg;     // read back after the main loop

        // Stream-K with 128 results per thread: the copies start at the segment's first k-tile,
        // so that no k offset stays live through the main loop, which runs at the register cap.
        // Smaller thread tiles keep the offset in the loop (a pointer per segment costs the 8 x 8
        // tile a block per SM), and so does split-K (no faster this way).
        constexpr bool FOLD = STREAMK && Cfg::TM * Cfg::TN >= 128;
        const int k_from = FOLD ? seg.kt0 * BK : 0, kt_loop = FOLD ? 0 : seg.kt0;
        const typename Cfg::CopyA copy_a(A, lda, M, K, origin(tile_m, BM, M, EDGES == 1), k_from, As);
        const typename Cfg::CopyB copy_b(B, ldb, N, K, origin(tile_n, BN, N, EDGES == 1), k_from, Bs);

        // ---- the main loop: the segment's k-tiles into acc, through STAGES shared stages ----
        constexpr int TM = Cfg::TM, TN = Cfg::TN, KSTEP = Cfg::KSTEP, STAGES = Cfg::STAGES;
        constexpr int LDA = Cfg::LDA, LDB = Cfg::LDB, STAGE = Cfg::STAGE, ROWS = Cfg::ROWS;
        using CopyA = typename Cfg::CopyA;
        const int count = seg.count;
        auto issue = [&](int t, int s) {            // copies of this segment's k-tile t into stage s
            copy_a.issue((kt_loop + t) * BK, s);
            copy_b.issue((kt_loop + t) * BK, s);
        };

        float acc[TM][TN];                          // (TM, TN) results of this thread
        #pragma unroll
        for (int m = 0; m < TM; ++m)
            #pragma unroll
            for (int n = 0; n < TN; ++n) acc[m][n] = 0.0f;
        float fa[2][TM], fb[2][TN];                 // fragments, double-buffered in registers
        // This lane's fragments of the stage being read, as byte offsets into smem: A's at pa,
        // B's at pb, step k at pa + 4 k LDA and pb + 4 k LDB. A trip adds to these two and
        // compares one; the loads take smem's base as an operand. Index arithmetic runs on the
        // FMA pipe, which the FFMAs need, so the loop keeps it to these adds.
        const char* sbytes = reinterpret_cast<const char*>(smem);
        int pa = 4 * (wm0 + 4 * tr);
        int pb = 4 * (BK * LDA + wn0 + 4 * tc);

        // region inner_loop
        auto load_frag = [&](int buf, int k) {          // step k's column of A and row of B, this lane's part
            #pragma unroll
            for (int i = 0; i < Cfg::WMITER; ++i)
                *reinterpret_cast<float4*>(&fa[buf][4 * i]) =
                    *reinterpret_cast<const float4*>(sbytes + pa + 4 * (k * LDA + i * Cfg::WSUB_M));
            #pragma unroll
            for (int j = 0; j < Cfg::WNITER; ++j)
                *reinterpret_cast<float4*>(&fb[buf][4 * j]) =
                    *reinterpret_cast<const float4*>(sbytes + pb + 4 * (k * LDB + j * Cfg::WSUB_N));
        };
        // TM x TN FFMA in a snake: 128 results per thread, and rows of 16, go row by row (one A
        // value feeds TN FFMAs in a row from the operand reuse cache, so fewer register reads can
        // clash in a bank), smaller thread tiles column by column; each row (column) starts on
        // the value the last one ended with. Which order suits which thread tile is measured
        // (book/97_tuning_log.md).
        // s: the step's swizzle (TileCopy::swizzle): A's fragment value m holds row m ^ s.
        auto fma_step = [&](int buf, int s) {
            #pragma unroll
            for (int i = 0; i < (ROWS ? TM : TN); ++i)
                #pragma unroll
                for (int jj = 0; jj < (ROWS ? TN : TM); ++jj) {
                    const int j = (i % 2) ? (ROWS ? TN : TM) - 1 - jj : jj;
                    const int m = ROWS ? i : j, n = ROWS ? j : i;
                    acc[m][n] = fmaf(fa[buf][m ^ s], fb[buf][n], acc[m][n]);
                }
        };
        // endregion inner_loop

        // region pipeline: the prologue and the main loop
        // ---- prologue: STAGES - 1 k-tiles in flight, the first one waited for ----
        #pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < count) issue(s, s);
            cp_async_commit();                          // one group per k-tile, empty ones too
        }
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        int s_read = 0;                                 // the stage k-tile t is in: t % STAGES
        if (count > 0) load_frag(0, 0);

        // ---- main loop over the segment's k-tiles ----
        #pragma unroll 1
        for (int t = 0; t < count; ++t) {
            // refill the stage that k-tile t - 1 used (everyone passed the barrier after it)
            if (t + STAGES - 1 < count) issue(t + STAGES - 1, s_read == 0 ? STAGES - 1 : s_read - 1);
            cp_async_commit();
            // k-steps 0 .. BK - KSTEP - 1, KSTEP per trip: fragments of step k + 1 load during step k
            // A trip's steps share a swizzle s where KSTEP divides 8; with KSTEP a multiple of 16,
            // a trip starts at a multiple of 16 and step k's swizzle is swizzle(k).
            auto trip = [&](int s) {
                #pragma unroll
                for (int k = 0; k < KSTEP; ++k) {
                    load_frag((k + 1) % 2, k + 1);
                    fma_step(k % 2, KSTEP % 16 == 0 ? CopyA::swizzle(k) : s);
                }
                pa += 4 * KSTEP * LDA;
                pb += 4 * KSTEP * LDB;
            };
            if constexpr (!CopyA::WIDE || KSTEP % 16 == 0) {
                #pragma unroll 1
                for (const int pa_end = pa + 4 * (BK - KSTEP) * LDA; pa != pa_end;)   // no counter: pa counts
                    trip(0);
            } else {
                // of every 16 k-steps, 8 with swizzle 0, then 8 with swizzle 2 (of the last 16,
                // the last KSTEP are the tail's, below)
                #pragma unroll 1
                for (int g = BK / 16; g > 0; --g) {
                    #pragma unroll 1
                    for (const int e = pa + 4 * 8 * LDA; pa != e;) trip(0);
                    #pragma unroll 1
                    for (const int e = pa + 4 * (g > 1 ? 8 : 8 - KSTEP) * LDA; pa != e;) trip(2);
                }
            }
            // the last KSTEP steps; the last one waits for k-tile t + 1 and loads its first step
            #pragma unroll
            for (int k = 0; k < KSTEP; ++k) {
                if (k == KSTEP - 1) {
                    cp_async_wait<STAGES - 2>();
                    __syncthreads();
                    // on to the next stage: back from the last trip's steps, and one stage on
                    const int next = (s_read + 1 == STAGES) ? -s_read * STAGE : STAGE;
                    s_read = (s_read + 1 == STAGES) ? 0 : s_read + 1;
                    pa += 4 * (next - (BK - KSTEP) * LDA);
                    pb += 4 * (next - (BK - KSTEP) * LDB);
                    if (t + 1 < count) load_frag(0, 0);
                } else {
                    load_frag((k + 1) % 2, k + 1);
                }
                fma_step(k % 2, CopyA::swizzle(BK - KSTEP + k));
            }
        }
        // endregion pipeline
        cp_async_wait<0>();                         // no copy may outlive the segment
        if (STREAMK) {
            __syncthreads();
            seg = current;
        }
        if (seg.parts > 1 && !Cfg::REDUCE) {       // a shared tile: the block that arrives last adds the parts
            if (!publish_part<Cfg>(seg, partials, arrivals, tid, acc)) continue;
            sum_parts<Cfg>(seg, partials, tid, acc);
        }

        sched.tile(seg.pid, tile_m, tile_n);        // again: fewer registers live through the main loop
        store_tile<Cfg>(acc, tile_m, tile_n, seg.part, M, N, alpha, beta, C, ldc, partials, smem,
                        lane, warp, wm0, wn0, tr, tc);
    } while (sched.next(seg));
}

}  // namespace fin

// ---------------------------------------------------------------- the kernels
#define FINAL_LAUNCH_BOUNDS                                                                              \
    __launch_bounds__((BM / WM) * (BN / WN) * 32,                                                        \
                      fin::min_blocks(TM, TN, (BM / WM) * (BN / WN) * 32, BK, STAGES, SPLITK, STREAMK, A_T, B_T))

template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int STAGES, int SPLITK, int GROUP,
          int KU, int STREAMK, int A_T, int B_T, int REDUCE = 0, int EDGES = 0>
__global__ void FINAL_LAUNCH_BOUNDS
sgemm_final(int M, int N, int K, float alpha,
            const float* __restrict__ A, int lda,
            const float* __restrict__ B, int ldb,
            float beta, float* __restrict__ C, int ldc,
            float* partials, unsigned* arrivals)
{
    using Cfg = fin::Config<BM, BN, BK, WM, WN, TM, TN, STAGES, SPLITK, GROUP, KU, STREAMK, A_T, B_T, REDUCE, EDGES, false>;
    fin::body<Cfg>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, partials, arrivals, 0, 0, 0);
}

// A batch of products of one shape in one launch: grid (tiles along N, tiles along M, products * SPLITK).
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int STAGES, int SPLITK, int GROUP,
          int KU, int STREAMK, int A_T, int B_T, int REDUCE = 0, int EDGES = 0>
__global__ void FINAL_LAUNCH_BOUNDS
sgemm_final_batched(int M, int N, int K, float alpha,
                    const float* __restrict__ A, int lda,
                    const float* __restrict__ B, int ldb,
                    float beta, float* __restrict__ C, int ldc,
                    float* partials, unsigned* arrivals,
                    long long batch_a, long long batch_b, long long batch_c)
{
    using Cfg = fin::Config<BM, BN, BK, WM, WN, TM, TN, STAGES, SPLITK, GROUP, KU, STREAMK, A_T, B_T, REDUCE, EDGES, true>;
    fin::body<Cfg>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, partials, arrivals, batch_a, batch_b, batch_c);
}
