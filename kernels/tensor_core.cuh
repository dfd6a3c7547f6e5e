// tensor_core.cuh -- the two tensor-core instructions of kernels/14_tf32.cu, one wrapper each.
//
//   to_tf32    float32 -> TF32: round to nearest, ties away from zero (cvt.rna), keeping
//              10 of the 23 mantissa bits; the result is a float32 bit pattern whose low
//              13 bits are zero, the form mma.sync reads a .tf32 operand in
//   mma_tf32   D = A * B + D for one warp: A 16 x 8, B 8 x 8, D 16 x 8 float32, each
//              spread over the 32 lanes (PTX ISA, "Matrix Fragments for mma.m16n8k8"):
//                g = lane / 4, t = lane % 4
//                a[0] = A(g, t)   a[1] = A(g + 8, t)   a[2] = A(g, t + 4)   a[3] = A(g + 8, t + 4)
//                b[0] = B(t, g)   b[1] = B(t + 4, g)
//                d[0] = D(g, 2t)  d[1] = D(g, 2t + 1)  d[2] = D(g + 8, 2t)  d[3] = D(g + 8, 2t + 1)
//
// Both need compute capability 8.0 (A100) or newer; the kernel specs refuse older GPUs.
// The tests run kernels/14_tf32.cu on the CPU with these two replaced by emulations
// (tests/test_tensor_cores_on_cpu.py).
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "tensor_core.cuh: mma.sync with TF32 operands needs compute capability 8.0 or newer"
#endif

__device__ __forceinline__ unsigned to_tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
