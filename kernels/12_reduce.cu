// 12_reduce.cu -- the second half of a split-K product with many splits: add the parts.
//
// With many splits of K, the block that finishes a tile would read every part of it one after
// another (kernels/12_final.cu). Instead, each split stores its part whole, a slab of M x N
// floats, and this kernel adds the slabs with every thread of the GPU.
//
// Contract
//   W holds `parts` slabs of M x N floats, row-major with row stride ldw >= N:
//   W[p * M * ldw + m * ldw + n]. (The final kernel pads its slabs' rows to 16 bytes, ldw = N
//   rounded up to a multiple of 4, so that it stores them float4 at a time whatever N is.)
//   C(m, n) = C[m * ldc + n] (ldc >= N) becomes alpha * (W_0 + W_1 + ... + W_{parts-1})(m, n)
//   + beta * C(m, n), the slabs added in k order from 0: the same sums, in the same order, as
//   the final kernel's own reduction, so the result is the same bit for bit. beta == 0: C is
//   only written (it may hold NaN). 64-bit offsets; any M, N >= 1.
//   Block 256 threads; any grid: a grid-stride loop over the M * N elements, one per thread
//   per step, so consecutive threads read consecutive floats of each slab.

__global__ void __launch_bounds__(256)
add_parts(int M, int N, int parts, float alpha, const float* __restrict__ W, int ldw, float beta,
          float* __restrict__ C, int ldc)
{
    const size_t mn = (size_t)M * N, slab = (size_t)M * ldw;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < mn; i += (size_t)gridDim.x * blockDim.x) {
        const size_t m = i / N, n = i % N;
        const float* w = W + m * ldw + n;
        float sum = 0.0f;
        #pragma unroll 4
        for (int p = 0; p < parts; ++p) sum += __ldg(w + p * slab);    // the loads overlap; the adds keep their order
        float* c = C + m * ldc + n;
        *c = beta != 0.0f ? fmaf(beta, *c, alpha * sum) : alpha * sum;
    }
}
