// 03_coalescing.cu -- one thread per element of C, with the warp laid along a row of C.
//
// C = A @ B, row-major float32: A is (M, K), B is (K, N), C is (M, N).
//
// Template parameters
//   BX, BY   block shape: BX threads along x, BY along y (BX * BY threads).
//   SWAP     0: blockIdx.x walks the columns of C and blockIdx.y its rows;
//            1: the other way round (the grid's x and y are swapped). Both are
//            correct, because each block still covers exactly one BY x BX tile of C;
//            only the order in which the hardware issues the blocks changes.
//
// Thread -> element mapping (what changed from 02_naive.cu)
//   col = (block column) * BX + threadIdx.x     <- x now walks along a ROW of C
//   row = (block row)    * BY + threadIdx.y
//   A warp is 32 consecutive linear thread ids, threadIdx.x fastest. With BX >= 32
//   its 32 threads share one row and hold 32 consecutive columns, so
//     B[k*N + col]  is 32 consecutive floats: one 128-byte line (coalesced),
//     A[row*K + k]  is one address for the whole warp (a broadcast),
//     C[row*N + col] is 32 consecutive floats (coalesced store).
//   With BX < 32 a warp spans 32/BX rows, each a run of BX consecutive floats.
//
// Preconditions: none on M, N, K >= 1 (threads outside C return early).
//   M*K, K*N, M*N < 2^31: indices are 32-bit ints (larger shapes are refused before launch).
//   BX * BY <= 1024 and a whole number of warps (checked by the spec).
// Shared memory: none.

template <int BX, int BY, int SWAP>
__global__ void sgemm_coalescing(int M, int N, int K,
                                 const float* __restrict__ A,
                                 const float* __restrict__ B,
                                 float* __restrict__ C)
{
    static_assert(BX * BY <= 1024, "at most 1024 threads per block");
    static_assert((BX * BY) % 32 == 0, "a whole number of warps per block");
    static_assert(SWAP == 0 || SWAP == 1, "SWAP is a flag");

    // region index: threadIdx.x walks the columns of C
    const int block_col = SWAP ? blockIdx.y : blockIdx.x;   // which BX-wide strip of columns
    const int block_row = SWAP ? blockIdx.x : blockIdx.y;   // which BY-tall strip of rows
    const int col = block_col * BX + threadIdx.x;           // in [0, N) when valid
    const int row = block_row * BY + threadIdx.y;           // in [0, M) when valid
    if (row >= M || col >= N) return;
    // endregion index

    // ---- compute: dot product of row `row` of A and column `col` of B ----
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc += A[row * K + k] * B[k * N + col];
    }

    // ---- store ----
    C[row * N + col] = acc;
}
