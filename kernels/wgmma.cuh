// wgmma.cuh -- Hopper's warpgroup matrix multiply, the instructions kernels/15_wgmma.cu uses.
//
// A warpgroup is 4 consecutive warps (128 threads, the first warp's index a multiple of 4).
// wgmma.mma_async has the 4 warps compute D (64 x N) += A (64 x 8) * B (8 x N) together: the
// tensor cores read A and B straight from shared memory, each described by a 64-bit matrix
// descriptor, and add into float32 accumulators spread over the warpgroup's registers.
//
//   smem_desc       the descriptor of a K-major tile in the 128-byte swizzled layout
//   wgmma_fence     orders this thread's accumulator accesses before the next wgmma
//   wgmma_commit    closes the group of wgmma issued since the last commit
//   wgmma_wait<N>   waits until at most N groups are still running
//   wgmma_tf32<N>   one m64nNk8 instruction on TF32 operands (N = 64, 128 or 256)
//   wgmma_tf32_rs<N> the same with A from registers: a fragment of 4 values per thread
//   fence_operands  keeps the compiler from moving accumulator reads and writes across
//                   the asynchronous instructions (it does not know they touch them)
//
// Accumulator layout (PTX ISA, "Register Fragments and Shared Memory Matrix Layouts", the
// 64 x N D of wgmma): thread t of the warpgroup, w = t / 32, g = (t % 32) / 4, q = t % 4,
// holds N / 2 floats; d[i] is D(16 w + g + 8 ((i / 2) % 2), 8 (i / 4) + 2 q + i % 2).
//
// A fragment layout (the register form's A, 64 x 8): thread t as above holds
// a[0] = A(16 w + g, q), a[1] = A(16 w + g + 8, q), a[2] = A(16 w + g, q + 4),
// a[3] = A(16 w + g + 8, q + 4): each warp's 16 rows as in mma.sync's m16n8k8.
//
// TF32 operands are float32 bit patterns; the tensor cores ignore their low 13 bits. Both
// A and B must be K-major (each row of A, and each column of B, contiguous along K): the
// .tf32 forms have no transpose. Needs compute capability 9.0 and the sm_90a target.
#pragma once

typedef unsigned long long uint64_t;   // NVRTC has no <cstdint> without the toolkit headers

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wgmma.cuh: wgmma needs the arch-specific target sm_90a (compute capability 9.0)"
#endif

// region descriptor
// A tile of rows x 32 floats, K-major, 128-byte swizzle: row r is the 128 bytes at r * 128,
// and its 16-byte chunk c sits at chunk position c ^ (r % 8). The tile must start on a
// 1024-byte boundary (the swizzle repeats every 8 rows). Fields of the descriptor:
//   bits  0-13  start address / 16 (a shared-memory address)
//   bits 16-29  leading byte offset / 16: unused by swizzled K-major tiles, set to 1
//   bits 32-45  stride byte offset / 16: from one group of 8 rows to the next, 1024 bytes
//   bits 62-63  layout: 1 = 128-byte swizzle
// Stepping along K inside the 128-byte row is adding the byte offset to the start address:
// the swizzle is a function of the address bits, so the chunks are found where they were put.
__device__ __forceinline__ uint64_t smem_desc(unsigned smem_addr)
{
    return (uint64_t)((smem_addr & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32
           | (uint64_t)1 << 62;
}
// endregion descriptor

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}

// Shared memory written by ordinary stores or cp.async (the generic proxy) that wgmma (the
// async proxy) reads next: each writing thread fences before the barrier that publishes it.
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

template <int COUNT>
__device__ __forceinline__ void fence_operands(float* d)
{
    #pragma unroll
    for (int i = 0; i < COUNT; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

// region wgmma
// D (64 x N, d: N / 2 floats per thread) += A (64 x 8) * B (8 x N), A and B in shared memory.
// scale_d = 0: D = A * B, the accumulators' old values ignored.
template <int N>
__device__ __forceinline__ void wgmma_tf32(float* d, uint64_t a_desc, uint64_t b_desc, int scale_d);

#define R8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                 "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

template <>
__device__ __forceinline__ void wgmma_tf32<64>(float* d, uint64_t a_desc, uint64_t b_desc, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, %32, %33, p, 1, 1;\n}\n"
                 : R8(d, 0), R8(d, 8), R8(d, 16), R8(d, 24)
                 : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

template <>
__device__ __forceinline__ void wgmma_tf32<128>(float* d, uint64_t a_desc, uint64_t b_desc, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1;\n}\n"
                 : R8(d, 0), R8(d, 8), R8(d, 16), R8(d, 24), R8(d, 32), R8(d, 40), R8(d, 48), R8(d, 56)
                 : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

template <>
__device__ __forceinline__ void wgmma_tf32<256>(float* d, uint64_t a_desc, uint64_t b_desc, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
                 "}, %128, %129, p, 1, 1;\n}\n"
                 : R8(d, 0), R8(d, 8), R8(d, 16), R8(d, 24), R8(d, 32), R8(d, 40), R8(d, 48), R8(d, 56), R8(d, 64), R8(d, 72), R8(d, 80), R8(d, 88), R8(d, 96), R8(d, 104), R8(d, 112), R8(d, 120)
                 : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}
// endregion wgmma

// region wgmma_rs
// D (64 x N) += A (64 x 8, a: 4 TF32 bit patterns per thread) * B (8 x N, in shared memory).
// The registers of a stay in use until the wgmma is waited for: they must not change before.
template <int N>
__device__ __forceinline__ void wgmma_tf32_rs(float* d, const unsigned* a, uint64_t b_desc, int scale_d);

template <>
__device__ __forceinline__ void wgmma_tf32_rs<128>(float* d, const unsigned* a, uint64_t b_desc, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
                 : R8(d, 0), R8(d, 8), R8(d, 16), R8(d, 24), R8(d, 32), R8(d, 40), R8(d, 48), R8(d, 56)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d));
}

template <>
__device__ __forceinline__ void wgmma_tf32_rs<64>(float* d, const unsigned* a, uint64_t b_desc, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
                 : R8(d, 0), R8(d, 8), R8(d, 16), R8(d, 24)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d));
}

template <>
__device__ __forceinline__ void wgmma_tf32_rs<256>(float* d, const unsigned* a, uint64_t b_desc, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
                 "}, {%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
                 : R8(d, 0), R8(d, 8), R8(d, 16), R8(d, 24), R8(d, 32), R8(d, 40), R8(d, 48), R8(d, 56), R8(d, 64), R8(d, 72), R8(d, 80), R8(d, 88), R8(d, 96), R8(d, 104), R8(d, 112), R8(d, 120)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d));
}
#undef R8
// endregion wgmma_rs
