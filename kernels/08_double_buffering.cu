// 08_double_buffering.cu -- overlap loading the next tile with computing this one.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
// Block tile 128 x 128 x BK, 256 threads, 8 x 8 results per thread, split
// thread tile and XOR-swizzled transposed A tile (07_bank_conflicts.cu).
//
// Two kernels:
//
// sgemm_double_buffering<BK, FIXED>: two shared-memory stages. While the block
//   computes on stage s, each thread has already issued the global loads of the
//   next tile into registers; it stores them into stage s^1 after computing, and
//   one barrier per tile separates the two. The first tile is stored before the
//   loop, and a barrier must follow it: with FIXED = 0 that barrier is missing
//   (as in a widely copied version of this kernel), so fast warps start reading
//   stage 0 before slow warps have written it -- a shared-memory race that
//   compute-sanitizer's racecheck reports and that gives wrong results. FIXED = 1
//   is the one-line fix. The racy form exists only to be studied.
//
// sgemm_double_buffering_async<BK, STAGES>: a STAGES-deep pipeline of cp.async
//   copies (global -> shared without passing through registers, 16 bytes each,
//   zero-filling whatever lies outside A or B). A stays row-major in shared
//   memory (cp.async cannot transpose); the inner loop reads it four k at a time
//   as float4, so it still issues only LDS.128. Dynamic shared memory:
//   STAGES * (128 * BK + BK * 128) * 4 bytes.
//
// Preconditions: none on M, N, K >= 1; vector paths only where aligned (K % 4,
//   N % 4 as in 06) and inside the matrices, scalar with zero fill elsewhere.

namespace db {
constexpr int BM = 128, BN = 128, TM = 8, TN = 8, THREADS = 256;

// The four-float groups thread (trow, tcol) owns, 64 apart (the split tile).
__device__ __forceinline__ int m_of(int trow, int g) { return trow * 4 + g * (BM / 2); }
__device__ __forceinline__ int n_of(int tcol, int g) { return tcol * 4 + g * (BN / 2); }

// Column of element (k, m) in the swizzled, transposed A tile (see 07).
template <int BK>
__device__ __forceinline__ int a_col(int k, int m) { return m ^ ((k / 4) * (32 / (BK / 4)) % 32); }

// Store the 8 x 8 accumulators: float4 where aligned and inside C, else scalar.
__device__ __forceinline__ void store_tile(float (&acc)[TM][TN], float* C, int M, int N,
                                           int row0, int col0, int trow, int tcol)
{
    const bool vec = (N % 4) == 0;
    #pragma unroll
    for (int m = 0; m < TM; ++m) {
        const int row = row0 + m_of(trow, m / 4) + m % 4;
        if (row >= M) continue;
        #pragma unroll
        for (int g = 0; g < 2; ++g) {
            const int col = col0 + n_of(tcol, g);
            if (vec && col + 3 < N) {
                *reinterpret_cast<float4*>(&C[row * N + col]) =
                    make_float4(acc[m][4 * g], acc[m][4 * g + 1], acc[m][4 * g + 2], acc[m][4 * g + 3]);
            } else {
                #pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (col + j < N) C[row * N + col + j] = acc[m][4 * g + j];
            }
        }
    }
}

// Four floats of a row-major matrix at (r, c), c % 4 == 0: one float4 when
// aligned and inside, else one at a time with zeros outside.
__device__ __forceinline__ float4 load4(const float* X, int rows, int cols, int r, int c, bool vec)
{
    if (vec && r < rows && c + 3 < cols) return *reinterpret_cast<const float4*>(&X[r * cols + c]);
    float4 v;
    v.x = (r < rows && c + 0 < cols) ? X[r * cols + c + 0] : 0.0f;
    v.y = (r < rows && c + 1 < cols) ? X[r * cols + c + 1] : 0.0f;
    v.z = (r < rows && c + 2 < cols) ? X[r * cols + c + 2] : 0.0f;
    v.w = (r < rows && c + 3 < cols) ? X[r * cols + c + 3] : 0.0f;
    return v;
}
}  // namespace db

template <int BK, int FIXED>
__global__ void __launch_bounds__(256)
sgemm_double_buffering(int M, int N, int K,
                       const float* __restrict__ A,
                       const float* __restrict__ B,
                       float* __restrict__ C)
{
    using namespace db;
    static_assert(BK % 4 == 0 && BK <= 32, "BK: a multiple of 4, at most 32");
    constexpr int A_LOADS = BM * BK / 4 / THREADS;    // float4 of A per thread per tile
    constexpr int B_LOADS = BK * BN / 4 / THREADS;    // float4 of B per thread per tile
    static_assert(A_LOADS >= 1 && B_LOADS >= 1, "every thread loads at least one float4");

    __shared__ __align__(16) float As[2][BK][BM];   // (stage, BK, BM): transposed, swizzled
    __shared__ __align__(16) float Bs[2][BK][BN];   // (stage, BK, BN)

    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN), trow = tid / (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const bool a_vec = (K % 4) == 0, b_vec = (N % 4) == 0;

    float4 ra[A_LOADS], rb[B_LOADS];   // the next tile, on its way from global memory
    float acc[TM][TN] = {};
    float a[TM], b[TN];

    auto load_tile = [&](int k0) {     // global -> registers
        #pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int i = tid + l * THREADS, r = i / (BK / 4), c = (i % (BK / 4)) * 4;
            ra[l] = load4(A, M, K, row0 + r, k0 + c, a_vec);
        }
        #pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int i = tid + l * THREADS, r = i / (BN / 4), c = (i % (BN / 4)) * 4;
            rb[l] = load4(B, K, N, k0 + r, col0 + c, b_vec);
        }
    };
    auto store_tile_smem = [&](int s) {   // registers -> shared stage s
        #pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int i = tid + l * THREADS, r = i / (BK / 4), c = (i % (BK / 4)) * 4;
            As[s][c + 0][a_col<BK>(c + 0, r)] = ra[l].x;
            As[s][c + 1][a_col<BK>(c + 1, r)] = ra[l].y;
            As[s][c + 2][a_col<BK>(c + 2, r)] = ra[l].z;
            As[s][c + 3][a_col<BK>(c + 3, r)] = ra[l].w;
        }
        #pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int i = tid + l * THREADS, r = i / (BN / 4), c = (i % (BN / 4)) * 4;
            *reinterpret_cast<float4*>(&Bs[s][r][c]) = rb[l];
        }
    };

    // ---- prologue: the first tile into stage 0 ----
    load_tile(0);
    store_tile_smem(0);
    if (FIXED) __syncthreads();        // <- the line the racy version lacks

    const int tiles = (K + BK - 1) / BK;
    for (int t = 0; t < tiles; ++t) {
        const int s = t & 1;
        if (t + 1 < tiles) load_tile((t + 1) * BK);   // issue next loads; don't wait for them

        // ---- compute on stage s while the loads are in flight ----
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            #pragma unroll
            for (int g = 0; g < 2; ++g) {
                *reinterpret_cast<float4*>(&a[4 * g]) =
                    *reinterpret_cast<const float4*>(&As[s][k][a_col<BK>(k, m_of(trow, g))]);
                *reinterpret_cast<float4*>(&b[4 * g]) =
                    *reinterpret_cast<const float4*>(&Bs[s][k][n_of(tcol, g)]);
            }
            #pragma unroll
            for (int m = 0; m < TM; ++m)
                #pragma unroll
                for (int n = 0; n < TN; ++n) acc[m][n] += a[m] * b[n];
        }

        // ---- the next tile goes into the other stage ----
        if (t + 1 < tiles) store_tile_smem(s ^ 1);
        __syncthreads();               // stage s^1 complete; stage s free for reuse
    }

    store_tile(acc, C, M, N, row0, col0, trow, tcol);
}

// ------------------------------------------------------------------ cp.async
namespace db {
// 16-byte asynchronous copy global -> shared; bytes beyond src_bytes are zero-filled.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(gmem), "r"(src_bytes));
}
// 4-byte asynchronous copy (any 4-byte-aligned address), zero-filled when src_bytes == 0.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, int src_bytes)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(s), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

// Copy four floats of row-major X (rows x cols) at (r, c) into dst, zeros outside.
__device__ __forceinline__ void copy4(float* dst, const float* X, int rows, int cols, int r, int c, bool vec)
{
    if (vec) {                                     // c % 4 == 0 and cols % 4 == 0: aligned
        const bool in = r < rows && c < cols;      // c < cols implies c + 3 < cols here
        cp_async16(dst, in ? &X[r * cols + c] : X, in ? 16 : 0);
    } else {
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            const bool in = r < rows && c + j < cols;
            cp_async4(dst + j, in ? &X[r * cols + c + j] : X, in ? 4 : 0);
        }
    }
}
}  // namespace db

template <int BK, int STAGES>
__global__ void __launch_bounds__(256)
sgemm_double_buffering_async(int M, int N, int K,
                             const float* __restrict__ A,
                             const float* __restrict__ B,
                             float* __restrict__ C)
{
    using namespace db;
    static_assert(STAGES >= 2 && STAGES <= 8, "2..8 stages");
    static_assert(BK % 4 == 0 && BK <= 32, "BK: a multiple of 4, at most 32");
    constexpr int A_STAGE = BM * BK, B_STAGE = BK * BN;   // floats per stage
    constexpr int A_CHUNKS = BM * BK / 4, B_CHUNKS = BK * BN / 4;

    extern __shared__ __align__(16) float smem[];
    float* As = smem;                        // (STAGES, BM, BK): A's tile, row-major
    float* Bs = smem + STAGES * A_STAGE;     // (STAGES, BK, BN)

    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN), trow = tid / (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const bool a_vec = (K % 4) == 0, b_vec = (N % 4) == 0;
    const int tiles = (K + BK - 1) / BK;

    auto issue = [&](int t) {                // start copying tile t into stage t % STAGES
        if (t < tiles) {
            const int s = t % STAGES, k0 = t * BK;
            for (int i = tid; i < A_CHUNKS; i += THREADS) {
                const int r = i / (BK / 4), c = (i % (BK / 4)) * 4;
                copy4(&As[s * A_STAGE + r * BK + c], A, M, K, row0 + r, k0 + c, a_vec);
            }
            for (int i = tid; i < B_CHUNKS; i += THREADS) {
                const int r = i / (BN / 4), c = (i % (BN / 4)) * 4;
                copy4(&Bs[s * B_STAGE + r * BN + c], B, K, N, k0 + r, col0 + c, b_vec);
            }
        }
        cp_async_commit();                   // one group per tile, empty past the end
    };

    float acc[TM][TN] = {};
    float a4[TM][4];                         // 4 k-values for each of the thread's 8 rows
    float b[TN];

    // ---- prologue: STAGES - 1 tiles in flight ----
    for (int t = 0; t < STAGES - 1; ++t) issue(t);

    for (int t = 0; t < tiles; ++t) {
        cp_async_wait<STAGES - 2>();         // tile t has landed (for this thread's copies)
        __syncthreads();                     // ... and for everyone's; stage (t-1) is free
        issue(t + STAGES - 1);               // refill the stage computed on last iteration

        const float* as = &As[(t % STAGES) * A_STAGE];
        const float* bs = &Bs[(t % STAGES) * B_STAGE];
        #pragma unroll
        for (int kk = 0; kk < BK; kk += 4) {
            #pragma unroll
            for (int m = 0; m < TM; ++m)     // row m of the thread, k = kk .. kk+3
                *reinterpret_cast<float4*>(a4[m]) =
                    *reinterpret_cast<const float4*>(&as[(m_of(trow, m / 4) + m % 4) * BK + kk]);
            #pragma unroll
            for (int k = 0; k < 4; ++k) {
                #pragma unroll
                for (int g = 0; g < 2; ++g)
                    *reinterpret_cast<float4*>(&b[4 * g]) =
                        *reinterpret_cast<const float4*>(&bs[(kk + k) * BN + n_of(tcol, g)]);
                #pragma unroll
                for (int m = 0; m < TM; ++m)
                    #pragma unroll
                    for (int n = 0; n < TN; ++n) acc[m][n] += a4[m][k] * b[n];
            }
        }
    }
    cp_async_wait<0>();                      // no copy may outlive the block

    store_tile(acc, C, M, N, row0, col0, trow, tcol);
}
