// 02_naive.cu -- one thread computes one element of C.
//
// C = A @ B, all row-major float32:  A is (M, K), B is (K, N), C is (M, N).
//
// Template parameters
//   BX, BY   block shape: the block has BX * BY threads, arranged BX (x) by BY (y).
//
// Thread -> element mapping
//   row = blockIdx.x * BX + threadIdx.x      (x walks down the rows of C)
//   col = blockIdx.y * BY + threadIdx.y      (y walks along the columns of C)
//   The 32 threads of a warp have consecutive threadIdx.x, so they sit in 32
//   *different rows*: each of their loads of A[row][k] is K floats away from the
//   next thread's. Chapter "Coalescing" fixes exactly this.
//
// Preconditions
//   none on M, N, K (any size >= 1): threads outside C return early.
//   M*K, K*N, M*N < 2^31: indices are 32-bit ints (larger shapes are refused before launch).
//   BX * BY <= 1024 and a whole number of warps (checked by the spec).
//
// Shared memory: none. Every operand comes straight from global memory (or L1/L2).

template <int BX, int BY>
__global__ void sgemm_naive(int M, int N, int K,
                            const float* __restrict__ A,
                            const float* __restrict__ B,
                            float* __restrict__ C)
{
    static_assert(BX * BY <= 1024, "at most 1024 threads per block");
    static_assert((BX * BY) % 32 == 0, "a whole number of warps per block");

    // region index: one thread per element of C
    const int row = blockIdx.x * BX + threadIdx.x;   // in [0, M) when valid
    const int col = blockIdx.y * BY + threadIdx.y;   // in [0, N) when valid
    if (row >= M || col >= N) return;                // edge blocks stick out of C
    // endregion index

    // region dot: a dot product, then the store
    // ---- compute: a dot product of row `row` of A with column `col` of B ----
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc += A[row * K + k] * B[k * N + col];
    }

    // ---- store ----
    C[row * N + col] = acc;
    // endregion dot
}
