// 12_pack.cu -- packing: copy an operand into the layout the final kernel copies fastest.
//
// The final kernel copies an operand into shared memory 16 bytes at a time when the operand
// runs along M (or N) in memory with 16-byte aligned rows; an operand that runs along K, or
// whose rows are not 16-byte aligned, moves 4 bytes at a time. Packing rewrites the operand
// once, k-major with aligned rows, so that every copy of the main loop is 16 bytes wide. It
// costs one read and one write of the operand (R x K floats, against M x N x K multiply-adds),
// so it pays on large products and is skipped on small ones (helpers/runtime/specs/final.py).
//
// Contract
//   X(r, k), r < R, k < K, is the operand as the kernel reads it: op(A) with r = m, or op(B)
//   with r = n.
//   ALONG_K = 1: X(r, k) = X[r * ld + k]   (rows run along K: transposed on the way)
//   ALONG_K = 0: X(r, k) = X[k * ld + r]   (rows run along R: copied row by row)
//   dst(k, r) = dst[k * ldd + r] = X(r, k); the caller picks ldd >= R, a multiple of 4, and a
//   16-byte aligned dst, so every k-row of dst starts 16-byte aligned. dst[k * ldd + r] for
//   r >= R is not written (the final kernel never reads it).
//   Block (32, 8), grid (ceil(R / 32), min(ceil(K / 32), 65535)); blocks walk K in steps of
//   gridDim.y tiles. R, K below 2^31; offsets are 64-bit.
//
// One block moves a 32 x 32 tile: each warp reads rows of the source that are contiguous in
// memory and writes rows of dst that are contiguous in memory. The transpose goes through a
// shared tile of 32 x 33 floats: the extra column puts a column's 32 floats in 32 banks.

template <int ALONG_K>
__global__ void __launch_bounds__(256)
pack_kmajor(int R, int K, const float* __restrict__ X, int ld, float* __restrict__ dst, int ldd)
{
    __shared__ float tile[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;     // 32 lanes along the contiguous side, 8 rows
    const int r0 = blockIdx.x * 32;
    for (int k0 = blockIdx.y * 32; k0 < K; k0 += gridDim.y * 32) {
        if (ALONG_K) {
            // read: lanes along k (contiguous in X), rows r; write: lanes along r (contiguous in dst)
            for (int i = ty; i < 32; i += 8) {
                const int r = r0 + i, k = k0 + tx;
                if (r < R && k < K) tile[i][tx] = X[(size_t)r * ld + k];
            }
            __syncthreads();
            for (int i = ty; i < 32; i += 8) {
                const int k = k0 + i, r = r0 + tx;
                if (r < R && k < K) dst[(size_t)k * ldd + r] = tile[tx][i];
            }
            __syncthreads();                          // the tile is read before the next one lands
        } else {
            for (int i = ty; i < 32; i += 8) {        // both sides contiguous along r
                const int k = k0 + i, r = r0 + tx;
                if (r < R && k < K) dst[(size_t)k * ldd + r] = X[(size_t)k * ld + r];
            }
        }
    }
}
