"""Run a kernel of ``kernels/`` on the CPU with g++: CUDA's index math, edge handling and
synchronisation checked without a GPU. It is not a timing model.

* Blocks run one after another (``block_order``: linear, reverse or shuffled). The threads
  of a block meet at ``__syncthreads()``; a barrier reached by some threads while others
  have left the kernel, or reached at different lines, aborts with a message.
* Two schedules for the threads of a block. ``"serial"`` (the default): each CUDA thread is
  a fiber on one OS thread, and they run one at a time, in order 0, 1, ..., each up to its
  next barrier: deterministic, fast, and adversarial (thread 0 runs ahead of all others,
  so a missing barrier shows up every time). ``"free"``: one std::thread per CUDA thread
  and a std::barrier, interleaved by the OS.
* Shared memory, dynamic and static, is filled with NaN (all bits set) before every block,
  so a read of something no thread wrote shows up in C.
* cp.async copies (the wrappers of ``kernels/common.cuh``) read global memory when issued
  and land in shared memory only at ``cp_async_wait``: a read that does not wait sees NaN.
* Every array is allocated with its exact size, ending at the end of its allocation, under
  AddressSanitizer (any access outside aborts) and UBSan (a misaligned float4, an int
  overflow abort). ``offset_floats=1`` starts arrays 4 bytes after a 256-byte boundary,
  like a view into a bigger array; the 4 bytes before hold NaN (AddressSanitizer cannot
  guard half of its 8-byte granule), so a read there shows up in the results and a
  write there aborts after the launch.
* Atomics are std::atomic_ref, ``__threadfence`` a fence, ``__ldcg``/``__ldg`` plain loads,
  ``__nanosleep`` a yield. ``__syncwarp()`` is a barrier of the whole block: stricter than
  CUDA (every warp must reach it, at the same line), enough for a kernel whose warps all take
  the same path there. Other warp intrinsics are not provided (they fail to compile).

``#include "common.cuh"`` is replaced by a CPU version: the file itself with each function
that holds inline asm (the cp.async wrappers) swapped for an emulation; any other inline
asm is refused. ``__shared__`` declarations become function-local statics (one per kernel
instantiation, shared by the block's threads), ``extern __shared__`` arrays a pointer to
the launch's dynamic shared memory.

Compile cost: the name expressions of a file are split into one group per job (one g++
per core by default); each group is one object file (against a precompiled header), so the
code the instantiations share (the launch glue, a file's helper functions) is compiled once
per group rather than once per expression. Objects are cached on disk under a hash of the
generated source and the flags (``$SGEMM_BOOK_CACHE`` or ``~/.cache/sgemm-book``,
subfolder ``cpu_cuda``), compiled in parallel, and made by one process at a time (a second
one waits, then reuses them); :func:`build_many` does several files in one pool. A binary
serves any number of launches and shapes: inputs and outputs go through files.

    binary = build("kernels/04_smem_tiling.cu", ["sgemm_smem_tiling<16, 1>"])
    out = binary.run("sgemm_smem_tiling<16, 1>", grid, block, 0,
                     [np.int32(M), np.int32(N), np.int32(K), A, B, C])
    C_after = out["arrays"][5]

Pure Python + numpy + g++ (C++20); no other module of ``helpers`` is imported.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["Binary", "CompilerMissing", "CpuCudaError", "build", "build_many", "run", "cpu_source", "cache_dir",
           "compile_errors"]


class CompilerMissing(RuntimeError):
    """g++ (with C++20 <barrier>, AddressSanitizer and UBSan) is not available: skip."""


class CpuCudaError(RuntimeError):
    """A kernel did not compile for the CPU, or its run aborted (sanitizer, emulation check)."""


# ----------------------------------------------------------------------------- C++ sources
PRELUDE = r'''// cpu_cuda.h -- the part of CUDA the kernels use, on the CPU (see helpers/runtime/cpu_cuda.py).
#ifndef CPU_CUDA_H
#define CPU_CUDA_H
#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

struct uint3 { unsigned x = 0, y = 0, z = 0; };
struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) int4 { int x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }

extern thread_local uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// __shared__ is rewritten by the runner; a form it does not know fails to compile.

namespace cpu_cuda {
[[noreturn]] void fatal(const char* fmt, ...);
int sync(int pred, int line);                    // __syncthreads*: the number of threads with pred
void cp_async(unsigned dst, const void* src, int bytes, int src_bytes);
void cp_commit();
void cp_wait(int n);
size_t cvta_shared(const void* p);
void shared_decl(void* p, size_t bytes);         // a static __shared__ variable, at its declaration
char* dyn_smem();
void nanosleep_();

struct Arg { int kind; uint32_t bits; void* ptr; int dtype; int64_t wide; };   // kind 0 i32, 1 u32, 2 f32, 3 array, 4 null, 5 i64
void register_kernel(const char* name, std::function<void(const std::vector<Arg>&)> launch);
void run_grid(const std::function<void()>& body);

template <class T> struct ArgConv { static_assert(sizeof(T) == 0, "unsupported kernel parameter type"); };
[[noreturn]] inline void arg_error(int i, const char* want, const Arg& a) {
    static const char* kinds[] = {"an int32", "a uint32", "a float32", "an array", "None", "an int64"};
    static const char* dtypes[] = {"float32", "uint32", "int32"};
    if (a.kind == 3) fatal("argument %d: the kernel takes %s, got a %s array", i, want, dtypes[a.dtype]);
    fatal("argument %d: the kernel takes %s, got %s", i, want, kinds[a.kind]);
}
template <> struct ArgConv<int> {
    static int get(const Arg& a, int i) {
        if (a.kind == 0 || (a.kind == 1 && a.bits < 0x80000000u)) return (int)a.bits;
        arg_error(i, "int", a);
    }
};
template <> struct ArgConv<unsigned> {
    static unsigned get(const Arg& a, int i) {
        if (a.kind == 1 || (a.kind == 0 && a.bits < 0x80000000u)) return a.bits;
        arg_error(i, "unsigned", a);
    }
};
template <> struct ArgConv<long long> {
    static long long get(const Arg& a, int i) {
        if (a.kind == 5) return a.wide;
        if (a.kind == 0) return (long long)(int32_t)a.bits;
        arg_error(i, "long long", a);
    }
};
template <> struct ArgConv<float> {
    static float get(const Arg& a, int i) {
        if (a.kind == 2) { float f; std::memcpy(&f, &a.bits, 4); return f; }
        arg_error(i, "float", a);
    }
};
template <class T> constexpr int dtype_of() {
    using U = std::remove_cv_t<T>;
    return std::is_same_v<U, float> ? 0 : std::is_same_v<U, unsigned> ? 1 : std::is_same_v<U, int> ? 2 : -1;
}
template <class T> struct ArgConv<T*> {
    static T* get(const Arg& a, int i) {
        static_assert(dtype_of<T>() >= 0, "pointer parameters: float, unsigned or int");
        static const char* names[] = {"a float pointer", "an unsigned pointer", "an int pointer"};
        if (a.kind == 4) return nullptr;
        if (a.kind == 3 && a.dtype == dtype_of<T>()) return static_cast<T*>(a.ptr);
        arg_error(i, names[dtype_of<T>()], a);
    }
};
template <class... P, size_t... I>
std::tuple<P...> convert(const std::vector<Arg>& a, std::index_sequence<I...>) {
    return std::tuple<P...>(ArgConv<P>::get(a[I], (int)I)...);
}
template <class... P> struct Registrar {
    Registrar(const char* name, void (*fn)(P...)) {
        register_kernel(name, [fn](const std::vector<Arg>& a) {
            if (a.size() != sizeof...(P)) fatal("the kernel takes %d arguments, got %d", (int)sizeof...(P), (int)a.size());
            const auto t = convert<P...>(a, std::index_sequence_for<P...>{});
            run_grid([&] { std::apply(fn, t); });
        });
    }
};
}  // namespace cpu_cuda

#define __syncthreads() ((void)::cpu_cuda::sync(0, __LINE__))
#define __syncthreads_count(p) ::cpu_cuda::sync(!!(p), __LINE__)
#define __syncthreads_or(p) (::cpu_cuda::sync(!!(p), __LINE__) != 0)
#define __syncthreads_and(p) (::cpu_cuda::sync(!!(p), __LINE__) == (int)(blockDim.x * blockDim.y * blockDim.z))
#define __syncwarp(...) ((void)::cpu_cuda::sync(0, __LINE__))   // the whole block: see the module's notes

inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __nanosleep(unsigned) { ::cpu_cuda::nanosleep_(); }
inline size_t __cvta_generic_to_shared(const void* p) { return ::cpu_cuda::cvta_shared(p); }

template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

#define CPU_CUDA_ATOMIC(T)                                                                         \
    inline T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }                 \
    inline T atomicSub(T* p, T v) { return std::atomic_ref<T>(*p).fetch_sub(v); }                 \
    inline T atomicExch(T* p, T v) { return std::atomic_ref<T>(*p).exchange(v); }                 \
    inline T atomicCAS(T* p, T cmp, T v) { std::atomic_ref<T>(*p).compare_exchange_strong(cmp, v); return cmp; } \
    inline T atomicMin(T* p, T v) { std::atomic_ref<T> r(*p); T o = r.load(); while (v < o && !r.compare_exchange_weak(o, v)) {} return o; } \
    inline T atomicMax(T* p, T v) { std::atomic_ref<T> r(*p); T o = r.load(); while (v > o && !r.compare_exchange_weak(o, v)) {} return o; } \
    inline T atomicAnd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_and(v); }                 \
    inline T atomicOr(T* p, T v) { return std::atomic_ref<T>(*p).fetch_or(v); }                   \
    inline T atomicXor(T* p, T v) { return std::atomic_ref<T>(*p).fetch_xor(v); }
CPU_CUDA_ATOMIC(int)
CPU_CUDA_ATOMIC(unsigned)
CPU_CUDA_ATOMIC(unsigned long long)
#undef CPU_CUDA_ATOMIC
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline float atomicExch(float* p, float v) { return std::atomic_ref<float>(*p).exchange(v); }
inline unsigned atomicInc(unsigned* p, unsigned v) {
    std::atomic_ref<unsigned> r(*p); unsigned o = r.load();
    while (!r.compare_exchange_weak(o, o >= v ? 0u : o + 1u)) {}
    return o;
}

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __ffs(int x) { return __builtin_ffs(x); }
#endif  // CPU_CUDA_H
'''

# The emulations of common.cuh's inline-asm functions, by name.
CP_ASYNC_CPU = r'''// CPU versions of the cp.async wrappers: the copy is read now and lands at cp_async_wait.
inline void cp_async4(unsigned smem, const float* gmem) { ::cpu_cuda::cp_async(smem, gmem, 4, 4); }
inline void cp_async4(unsigned smem, const float* gmem, int src_bytes) { ::cpu_cuda::cp_async(smem, gmem, 4, src_bytes); }
inline void cp_async16(unsigned smem, const float* gmem) { ::cpu_cuda::cp_async(smem, gmem, 16, 16); }
inline void cp_async16(unsigned smem, const float* gmem, int src_bytes) { ::cpu_cuda::cp_async(smem, gmem, 16, src_bytes); }
inline void cp_async_commit() { ::cpu_cuda::cp_commit(); }
template <int N> inline void cp_async_wait() { ::cpu_cuda::cp_wait(N); }
'''
CPU_REPLACED = {"cp_async4", "cp_async16", "cp_async_commit", "cp_async_wait"}

RUNTIME = r'''// The CPU runtime: blocks, threads, barriers, shared memory, cp.async, and main().
#include "cpu_cuda.h"
#include <barrier>
#include <cstdarg>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <sys/mman.h>
#include <thread>
#include <ucontext.h>
#if defined(CPU_CUDA_ASAN)             // the runtime itself is not instrumented; the binary is
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define POISON(p, n) __asan_poison_memory_region(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#endif

thread_local uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim, gridDim;

namespace cpu_cuda {
static std::string g_where;                    // the launch, for error messages

void fatal(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cpu_cuda error in %s: ", g_where.c_str());
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    abort();
}

static std::map<std::string, std::function<void(const std::vector<Arg>&)>>& kernels() {
    static std::map<std::string, std::function<void(const std::vector<Arg>&)>> m;
    return m;
}
void register_kernel(const char* name, std::function<void(const std::vector<Arg>&)> launch) {
    kernels()[name] = std::move(launch);
}

// ---- shared memory: the dynamic buffer (window 0) and static arrays (window i << 24) ----
struct Region { char* base; size_t bytes; };
static constexpr int MAX_REGIONS = 256;
static Region g_static[MAX_REGIONS];
static std::atomic<int> g_n_static{0};
static std::mutex g_static_mu;
static char* g_dyn = nullptr;
static size_t g_dyn_bytes = 0;

char* dyn_smem() { return g_dyn; }
static void poison_shared() {
    if (g_dyn_bytes) std::memset(g_dyn, 0xff, g_dyn_bytes);
    for (int i = 0, n = g_n_static.load(); i < n; ++i) std::memset(g_static[i].base, 0xff, g_static[i].bytes);
}
void shared_decl(void* p, size_t bytes) {
    for (int i = 0, n = g_n_static.load(std::memory_order_acquire); i < n; ++i)
        if (g_static[i].base == p) return;
    std::lock_guard<std::mutex> lock(g_static_mu);
    const int n = g_n_static.load();
    for (int i = 0; i < n; ++i)
        if (g_static[i].base == p) return;
    if (n == MAX_REGIONS) fatal("more than %d static __shared__ variables", MAX_REGIONS);
    std::memset(p, 0xff, bytes);                 // first block: poisoned before anyone writes it
    g_static[n] = {static_cast<char*>(p), bytes};
    g_n_static.store(n + 1, std::memory_order_release);
}
size_t cvta_shared(const void* p) {
    const char* c = static_cast<const char*>(p);
    if (g_dyn_bytes && c >= g_dyn && c <= g_dyn + g_dyn_bytes) return (size_t)(c - g_dyn);
    for (int i = 0, n = g_n_static.load(std::memory_order_acquire); i < n; ++i)
        if (c >= g_static[i].base && c <= g_static[i].base + g_static[i].bytes)
            return ((size_t)(i + 1) << 24) + (size_t)(c - g_static[i].base);
    fatal("__cvta_generic_to_shared of an address outside shared memory (%p)", p);
}
static char* shared_at(unsigned addr, int bytes) {
    const unsigned w = addr >> 24, off = addr & 0xffffffu;
    const Region r = w == 0 ? Region{g_dyn, g_dyn_bytes} : (w <= (unsigned)g_n_static.load() ? g_static[w - 1] : Region{nullptr, 0});
    if (!r.base || (size_t)off + bytes > r.bytes)
        fatal("cp.async of %d bytes to shared address 0x%x: outside shared memory", bytes, addr);
    return r.base + off;
}

// ---- a CUDA thread: its index, its cp.async groups and, in the serial schedule, its fiber ----
struct Copy { unsigned dst; int bytes, src_bytes; unsigned char data[16]; };
struct CudaThread {
    uint3 idx{};
    std::vector<Copy> open;                      // cp.async issued since the last commit
    std::deque<std::vector<Copy>> groups;        // committed, not yet waited for
    ucontext_t ctx{};
    void* sp = nullptr;
    char* stack = nullptr;
    bool done = false;
    void* fake = nullptr;                        // AddressSanitizer's fake stack while switched out
};
static thread_local CudaThread* t_self = nullptr;
static std::atomic<long> g_copies{0}, g_leftover{0}, g_barriers{0};

void cp_async(unsigned dst, const void* src, int bytes, int src_bytes) {
    if (dst % bytes) fatal("cp.async of %d bytes to shared address 0x%x: not %d-byte aligned", bytes, dst, bytes);
    if (reinterpret_cast<uintptr_t>(src) % bytes)
        fatal("cp.async of %d bytes from %p: not %d-byte aligned", bytes, src, bytes);
    if (src_bytes < 0 || src_bytes > bytes) fatal("cp.async src-size %d for a %d-byte copy", src_bytes, bytes);
    shared_at(dst, bytes);
    Copy c{dst, bytes, src_bytes, {}};
    if (src_bytes) std::memcpy(c.data, src, src_bytes);   // AddressSanitizer checks the source here
    t_self->open.push_back(c);
    g_copies.fetch_add(1, std::memory_order_relaxed);
}
void cp_commit() { t_self->groups.push_back(std::move(t_self->open)); t_self->open.clear(); }
void cp_wait(int n) {
    auto& groups = t_self->groups;
    while ((int)groups.size() > n) {
        for (const Copy& c : groups.front()) {
            char* d = shared_at(c.dst, c.bytes);
            std::memset(d, 0, c.bytes);
            std::memcpy(d, c.data, c.src_bytes);
        }
        groups.pop_front();
    }
}
void nanosleep_() { std::this_thread::yield(); }

// ---- the grid: blocks in a chosen order; a block's threads meet at barriers ----
struct Launch {
    dim3 grid, block;
    size_t dyn = 0;
    int serial = 0;                              // 1: fibers, one at a time, in order, to each barrier
    std::vector<uint3> order;                    // the blocks, in the order they run
};
static Launch g_launch;
static int g_threads = 0;
static size_t g_block = 0;                       // index into g_launch.order of the running block

struct Phase {                                    // what the threads brought to the current barrier
    std::atomic<int> in_kernel{0}, at_exit{0}, pred{0}, line{-1}, other_line{-1};
    int result = 0;
};
static Phase g_phase;
static void set_block(size_t i) {
    g_block = i;
    if (i < g_launch.order.size()) {
        blockIdx = g_launch.order[i];
        poison_shared();
    }
}
static bool complete_phase() noexcept {           // once per barrier, every thread arrived; true: all left
    const int k = g_phase.in_kernel.load(), e = g_phase.at_exit.load();
    const uint3 b = blockIdx;
    if (k && e)
        fatal("block (%u, %u, %u): %d threads wait at __syncthreads() (line %d) while %d have left the kernel: "
              "a return before a barrier, or a barrier in divergent code", b.x, b.y, b.z, k, g_phase.line.load(), e);
    if (g_phase.other_line.load() >= 0)
        fatal("block (%u, %u, %u): threads wait at different __syncthreads() (lines %d and %d)",
              b.x, b.y, b.z, g_phase.line.load(), g_phase.other_line.load());
    g_phase.result = g_phase.pred.load();
    g_phase.in_kernel = 0; g_phase.at_exit = 0; g_phase.pred = 0; g_phase.line = -1; g_phase.other_line = -1;
    if (k) g_barriers.fetch_add(1);
    return k == 0;
}
static void on_phase() noexcept { if (complete_phase()) set_block(g_block + 1); }
static void record(int pred, int line, bool exiting) {
    (exiting ? g_phase.at_exit : g_phase.in_kernel).fetch_add(1);
    if (pred) g_phase.pred.fetch_add(1);
    if (!exiting) {
        int expect = -1;
        if (!g_phase.line.compare_exchange_strong(expect, line) && expect != line) g_phase.other_line = line;
    }
}
static void end_of_kernel() {                     // a thread left the kernel
    if (!t_self->open.empty() || !t_self->groups.empty()) g_leftover.fetch_add(1);
    t_self->open.clear();
    t_self->groups.clear();
}

// free schedule: std::threads and a std::barrier
static std::unique_ptr<std::barrier<void (*)() noexcept>> g_bar;

// serial schedule: fibers on this thread, run in order 0, 1, ... each up to its next barrier.
// On x86-64 a fiber switch is six pushes and pops (swapcontext makes a system call, and
// AddressSanitizer's interceptor of it clears the shadow of the whole stack each time).
static const void* g_main_bottom = nullptr;
static size_t g_main_size = 0;
static constexpr size_t STACK = 256 << 10, GUARD = 4096;
static const std::function<void()>* g_body = nullptr;
static void fiber_main();
#if defined(__x86_64__)
extern "C" void cpu_cuda_switch(void** save_sp, void* new_sp);
asm(".text\n.globl cpu_cuda_switch\n.type cpu_cuda_switch,@function\ncpu_cuda_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
    ".size cpu_cuda_switch,.-cpu_cuda_switch\n");
static void* g_main_sp = nullptr;
static void fiber_start(CudaThread* f) {        // the first switch to f "returns" into fiber_main
    void** top = reinterpret_cast<void**>(f->stack + STACK);
    *--top = nullptr;                            // fiber_main's return address: it never returns
    *--top = reinterpret_cast<void*>(&fiber_main);
    for (int i = 0; i < 6; ++i) *--top = nullptr;   // rbp rbx r12 r13 r14 r15
    f->sp = top;
}
static void switch_main_to(CudaThread* f) { cpu_cuda_switch(&g_main_sp, f->sp); }
static void switch_to_main(CudaThread* f) { cpu_cuda_switch(&f->sp, g_main_sp); }
#else
static ucontext_t g_main_ctx;
static void fiber_start(CudaThread* f) {
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = STACK;
    f->ctx.uc_link = nullptr;
    makecontext(&f->ctx, fiber_main, 0);
}
static void switch_main_to(CudaThread* f) { swapcontext(&g_main_ctx, &f->ctx); }
static void switch_to_main(CudaThread* f) { swapcontext(&f->ctx, &g_main_ctx); }
#endif

static void to_main(CudaThread* me, bool finished) {
#if defined(CPU_CUDA_ASAN)
    __sanitizer_start_switch_fiber(finished ? nullptr : &me->fake, g_main_bottom, g_main_size);
#endif
    switch_to_main(me);
#if defined(CPU_CUDA_ASAN)
    __sanitizer_finish_switch_fiber(me->fake, &g_main_bottom, &g_main_size);
#endif
}
static void to_fiber(CudaThread* f) {
    t_self = f;
    threadIdx = f->idx;
#if defined(CPU_CUDA_ASAN)
    void* main_fake = nullptr;
    __sanitizer_start_switch_fiber(&main_fake, f->stack, STACK);
#endif
    switch_main_to(f);
#if defined(CPU_CUDA_ASAN)
    __sanitizer_finish_switch_fiber(main_fake, nullptr, nullptr);
#endif
}
static void fiber_main() {
    CudaThread* me = t_self;
#if defined(CPU_CUDA_ASAN)
    __sanitizer_finish_switch_fiber(nullptr, &g_main_bottom, &g_main_size);
#endif
    (*g_body)();
    end_of_kernel();
    me->done = true;
    record(0, -1, true);
    to_main(me, true);
    abort();                                     // a finished fiber is never resumed
}

int sync(int pred, int line) {
    record(pred, line, false);
    if (g_launch.serial) to_main(t_self, false);
    else g_bar->arrive_and_wait();
    return g_phase.result;
}

void run_grid(const std::function<void()>& body) {
    const dim3 blk = g_launch.block;
    g_threads = (int)(blk.x * blk.y * blk.z);
    blockDim = blk;
    gridDim = g_launch.grid;
    void* dyn = nullptr;                           // exact size: AddressSanitizer sees overruns
    if (g_launch.dyn) {
        if (posix_memalign(&dyn, 256, g_launch.dyn)) fatal("out of memory");
        fprintf(stderr, "cpu_cuda: dynamic shared memory at %p..%p\n", dyn, (void*)((char*)dyn + g_launch.dyn));
    }
    g_dyn = static_cast<char*>(dyn);
    g_dyn_bytes = g_launch.dyn;
    std::vector<CudaThread> threads(g_threads);
    for (int t = 0; t < g_threads; ++t)
        threads[t].idx = {t % blk.x, (t / blk.x) % blk.y, t / (blk.x * blk.y)};
    const size_t blocks = g_launch.order.size();
    set_block(0);
    if (g_launch.serial) {
        const size_t each = STACK + GUARD;
        char* stacks = static_cast<char*>(mmap(nullptr, each * g_threads, PROT_READ | PROT_WRITE,
                                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
        if (stacks == MAP_FAILED) fatal("no memory for %d fiber stacks", g_threads);
        for (int t = 0; t < g_threads; ++t) {
            mprotect(stacks + t * each, GUARD, PROT_NONE);       // a stack overflow faults
            threads[t].stack = stacks + t * each + GUARD;
        }
        g_body = &body;
        CudaThread* const main_self = t_self;
        const uint3 main_idx = threadIdx;
        for (size_t i = 0; i < blocks; ++i) {
            for (auto& f : threads) {
                f.done = false;
                fiber_start(&f);
            }
            for (bool left = false; !left;) {            // one round: every thread to its next barrier
                for (auto& f : threads)
                    if (!f.done) to_fiber(&f);
                left = complete_phase();
            }
            set_block(i + 1);
        }
        t_self = main_self;
        threadIdx = main_idx;
        munmap(stacks, each * g_threads);
    } else {
        g_bar = std::make_unique<std::barrier<void (*)() noexcept>>(g_threads, &on_phase);
        std::vector<std::thread> pool;
        pool.reserve(g_threads);
        for (int t = 0; t < g_threads; ++t)
            pool.emplace_back([&, t] {
                t_self = &threads[t];
                threadIdx = threads[t].idx;
                for (size_t i = 0; i < blocks; ++i) {
                    body();
                    end_of_kernel();
                    record(0, -1, true);
                    g_bar->arrive_and_wait();
                }
            });
        for (auto& th : pool) th.join();
        g_bar.reset();
    }
    free(dyn);
    g_dyn = nullptr;
    g_dyn_bytes = 0;
}
}  // namespace cpu_cuda

// ---- main: launches from a file, arrays back to a file ----
using namespace cpu_cuda;
struct Reader {
    FILE* f;
    template <class T> T get() {
        T v;
        if (fread(&v, sizeof v, 1, f) != 1) { fprintf(stderr, "cpu_cuda: truncated input\n"); exit(3); }
        return v;
    }
    std::string str() { std::string s(get<uint32_t>(), '\0'); if (!s.empty() && fread(&s[0], 1, s.size(), f) != s.size()) exit(3); return s; }
};
int main(int argc, char** argv) {
    if (argc == 2 && std::string(argv[1]) == "--list") {
        for (auto& kv : kernels()) printf("%s\n", kv.first.c_str());
        return 0;
    }
    if (argc != 3) { fprintf(stderr, "usage: %s input output | --list\n", argv[0]); return 2; }
    FILE* in = fopen(argv[1], "rb");
    FILE* out = fopen(argv[2], "wb");
    if (!in || !out) { fprintf(stderr, "cpu_cuda: cannot open %s or %s\n", argv[1], argv[2]); return 2; }
    Reader r{in};
    if (r.get<uint64_t>() != 0x3141554355434d43ull) { fprintf(stderr, "cpu_cuda: bad input\n"); return 2; }
    const uint32_t launches = r.get<uint32_t>();
    for (uint32_t li = 0; li < launches; ++li) {
        const std::string name = r.str();
        Launch L;
        L.grid = {r.get<uint32_t>(), r.get<uint32_t>(), r.get<uint32_t>()};
        L.block = {r.get<uint32_t>(), r.get<uint32_t>(), r.get<uint32_t>()};
        L.dyn = r.get<uint64_t>();
        L.serial = (int)r.get<uint32_t>();
        const uint32_t order = r.get<uint32_t>();
        const uint64_t seed = r.get<uint64_t>();
        for (unsigned z = 0; z < L.grid.z; ++z)
            for (unsigned y = 0; y < L.grid.y; ++y)
                for (unsigned x = 0; x < L.grid.x; ++x) L.order.push_back({x, y, z});
        if (order == 1) std::reverse(L.order.begin(), L.order.end());
        if (order == 2) { std::mt19937_64 rng(seed); std::shuffle(L.order.begin(), L.order.end(), rng); }
        const uint32_t nargs = r.get<uint32_t>();
        std::vector<Arg> args(nargs);
        std::vector<std::pair<void*, size_t>> arrays(nargs, {nullptr, 0});   // allocation, bytes of data
        std::vector<char*> data(nargs, nullptr);
        for (uint32_t i = 0; i < nargs; ++i) {
            Arg& a = args[i];
            a.kind = (int)r.get<uint32_t>();
            a.bits = 0; a.ptr = nullptr; a.dtype = -1; a.wide = 0;
            if (a.kind <= 2) a.bits = r.get<uint32_t>();
            if (a.kind == 5) a.wide = r.get<int64_t>();
            if (a.kind == 3) {
                a.dtype = (int)r.get<uint32_t>();
                const uint32_t offset = r.get<uint32_t>();
                const uint64_t count = r.get<uint64_t>();
                void* base = nullptr;      // count elements ending exactly at the end of the allocation
                if (posix_memalign(&base, 256, (count + offset) * 4)) { fprintf(stderr, "cpu_cuda: out of memory\n"); return 2; }
                char* p = static_cast<char*>(base) + 4 * offset;
                if (count && fread(p, 4, count, in) != count) { fprintf(stderr, "cpu_cuda: truncated input\n"); return 3; }
                // The bytes before an offset array: NaN, so that a read of element -1 shows up in
                // the results (AddressSanitizer cannot mark half of an 8-byte granule), and
                // checked after the launch for writes; whole 8-byte granules are poisoned too.
                std::memset(base, 0xff, 4 * offset);
                POISON(base, 4 * offset / 8 * 8);
                arrays[i] = {base, 4 * count};
                data[i] = p;
                a.ptr = p;
            }
        }
        g_where = name + " (launch " + std::to_string(li) + ")";
        fprintf(stderr, "cpu_cuda: launch %u: %s grid (%u, %u, %u) block (%u, %u, %u) dynamic shared %zu\n", li,
                name.c_str(), L.grid.x, L.grid.y, L.grid.z, L.block.x, L.block.y, L.block.z, (size_t)L.dyn);
        for (uint32_t i = 0; i < nargs; ++i)
            if (data[i]) fprintf(stderr, "cpu_cuda: argument %u at %p..%p\n", i, (void*)data[i], (void*)(data[i] + arrays[i].second));
        auto it = kernels().find(name);
        if (it == kernels().end()) fatal("this binary does not contain %s", name.c_str());
        g_launch = L;
        g_copies = 0; g_leftover = 0; g_barriers = 0;
        it->second(args);
        for (uint32_t i = 0; i < nargs; ++i)
            if (arrays[i].first) {
                const unsigned char* pad = static_cast<const unsigned char*>(arrays[i].first);
                for (const unsigned char* q = pad; q < reinterpret_cast<unsigned char*>(data[i]); ++q)
                    if (*q != 0xff) fatal("a write to the %d bytes before argument %u", (int)(reinterpret_cast<unsigned char*>(data[i]) - q), i);
                fwrite(data[i], 1, arrays[i].second, out);
                free(arrays[i].first);
            }
        printf("launch %u blocks=%zu threads=%d barriers=%ld copies=%ld leftover_cp_async=%ld\n", li,
               L.order.size(), (int)(L.block.x * L.block.y * L.block.z), g_barriers.load(), g_copies.load(),
               g_leftover.load());
        fflush(stdout);
    }
    fclose(out);
    return 0;
}
'''

TU_TEMPLATE = '''#include "cpu_cuda.h"
{system}
namespace {{
{body}
}}  // namespace
{registrars}
'''
REGISTRAR = 'static ::cpu_cuda::Registrar cpu_cuda_registrar{i}("{expr}", &{expr});'


def _batches(exprs: tuple, n: int) -> list[tuple]:
    """The expressions of one file in ``n`` groups (one object file each), the same groups
    for the same set of expressions whatever their order, so that the objects stay cached."""
    ordered = sorted(exprs)
    return [tuple(ordered[i::n]) for i in range(min(n, len(ordered)))]

# ----------------------------------------------------------------------------- source rewriting
_EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+|alignas\s*\(\s*\d+\s*\)\s+)?"
    r"([A-Za-z_][\w:]*)\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_]\w*)\s*\[\s*\]\s*;")
_STATIC_SHARED = re.compile(
    r"__shared__\s+(?:__align__\s*\(\s*(\d+)\s*\)\s+|alignas\s*\(\s*(\d+)\s*\)\s+)?"
    r"((?:(?:const|volatile|unsigned|signed|long|short)\s+)*[A-Za-z_][\w:]*)\s+([A-Za-z_]\w*)\s*((?:\[[^\]\n]+\]\s*)*);")
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[^\n]*$', re.M)
_SYSTEM_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*<[^>\n]+>[^\n]*$', re.M)
_FUNC = re.compile(r"(?:template\s*<[^>{};]*>\s*)?__device__[^;{}()]*?\b(\w+)\s*\(")


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    return re.sub(r"//[^\n]*", lambda m: " " * len(m.group(0)), text)


def _has_asm(text: str) -> bool:
    return re.search(r"\basm\b|__asm__", _strip_comments(text)) is not None


def _cpu_common(text: str, path: Path) -> str:
    """common.cuh for the CPU: each function with inline asm replaced by its emulation."""
    out, pos, removed = [], 0, []
    code = _strip_comments(text)
    for m in _FUNC.finditer(code):
        if m.start() < pos:
            continue
        brace = code.find("{", m.end())
        if brace < 0 or ";" in code[m.end():brace]:
            continue                                   # a declaration, not a definition
        depth, end = 0, brace
        for end in range(brace, len(code)):
            depth += {"{": 1, "}": -1}.get(code[end], 0)
            if depth == 0:
                break
        if _has_asm(text[m.start():end + 1]):
            if m.group(1) not in CPU_REPLACED:
                raise CpuCudaError(f"{path}: {m.group(1)}() holds inline asm and has no CPU version "
                                   f"(known: {', '.join(sorted(CPU_REPLACED))})")
            out.append(text[pos:m.start()])
            out.append("\n" * text.count("\n", m.start(), end + 1))   # keep the line numbers
            removed.append(m.group(1))
            pos = end + 1
    out.append(text[pos:])
    result = "".join(out)
    if _has_asm(result):
        raise CpuCudaError(f"{path}: inline asm outside a function the CPU build knows how to replace")
    result = re.sub(r"^[ \t]*#[ \t]*pragma[ \t]+once[^\n]*", "", result, flags=re.M)
    prefix = CP_ASYNC_CPU if removed else ""
    return f"{prefix}#line 1 \"{path}\"\n{result}"


def _rewrite_shared(text: str, path: Path) -> str:
    text = _EXTERN_SHARED.sub(
        lambda m: f"{m.group(1)}* const {m.group(2)} = reinterpret_cast<{m.group(1)}*>(::cpu_cuda::dyn_smem());",
        text)

    def static(m):
        align = m.group(1) or m.group(2)
        attr = f"__attribute__((aligned({align}))) " if align else ""
        return (f"static {attr}{m.group(3)} {m.group(4)}{m.group(5)}; "
                f"::cpu_cuda::shared_decl(&{m.group(4)}, sizeof({m.group(4)}));")

    text = _STATIC_SHARED.sub(static, text)
    for n, line in enumerate(_strip_comments(text).splitlines(), 1):
        if "__shared__" in line:
            raise CpuCudaError(f"{path}:{n}: a __shared__ declaration the CPU build does not understand: "
                               f"{line.strip()}")
    return text


def cpu_source(source_path, _seen=None) -> str:
    """The kernel file as C++ for g++: local includes inlined (common.cuh in its CPU
    version), __shared__ declarations rewritten, #line directives to the real files."""
    path = Path(source_path).resolve()
    seen = set() if _seen is None else _seen
    if path in seen:
        return ""
    seen.add(path)
    text = path.read_text()
    if path.name == "common.cuh":
        return _cpu_common(text, path)
    if _has_asm(text):
        raise CpuCudaError(f"{path}: inline asm in a kernel file; only common.cuh may hold it (its CPU "
                           "version replaces the wrappers)")
    pieces, pos = [f'#line 1 "{path}"\n'], 0
    for m in _INCLUDE.finditer(text):
        inc = path.parent / m.group(1)
        if not inc.exists():
            raise CpuCudaError(f"{path}: #include \"{m.group(1)}\" not found next to it")
        pieces.append(text[pos:m.start()])
        pieces.append(cpu_source(inc, seen))
        line = text.count("\n", 0, m.end()) + 2
        pieces.append(f'\n#line {line} "{path}"\n')
        pos = m.end() + 1 if text[m.end():m.end() + 1] == "\n" else m.end()
    pieces.append(text[pos:])
    return _rewrite_shared("".join(pieces), path)


# ----------------------------------------------------------------------------- compiling
SANITIZERS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all")
COMMON_FLAGS = ("-std=c++20", "-pthread", "-Wno-unknown-pragmas", "-Wno-unused-variable",
                "-Wno-unused-but-set-variable")


def _flags(sanitize: bool) -> dict:
    """g++ flags: kernels (instrumented, line tables for the reports), runtime, link."""
    if not sanitize:
        return {"kernel": COMMON_FLAGS + ("-O2",), "runtime": COMMON_FLAGS + ("-O2",), "link": ("-pthread",)}
    return {"kernel": COMMON_FLAGS + ("-O1", "-g1", "-fno-omit-frame-pointer") + SANITIZERS,
            # the runtime is not instrumented (memcpy and memset are still checked by the
            # sanitizer's interceptors); it only tells AddressSanitizer about fiber switches
            "runtime": COMMON_FLAGS + ("-O2", "-g1", "-DCPU_CUDA_ASAN"),
            "link": ("-pthread",) + SANITIZERS}


ENV = {"ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0",
       "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}


def cache_dir() -> Path:
    d = Path(os.environ.get("SGEMM_BOOK_CACHE") or Path.home() / ".cache" / "sgemm-book") / "cpu_cuda"
    d.mkdir(parents=True, exist_ok=True)
    return d


_GXX: dict = {}


def _gxx() -> str:
    """The g++ to use, with its version (part of every cache key)."""
    gxx = os.environ.get("CXX_FOR_CPU_CUDA") or shutil.which("g++")
    if not gxx:
        raise CompilerMissing("g++ is not installed: the CPU runs of the kernels need it")
    if gxx not in _GXX:
        try:
            version = subprocess.run([gxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        except (OSError, IndexError) as exc:
            raise CompilerMissing(f"{gxx} does not run: {exc}") from exc
        _GXX[gxx] = f"{gxx} {version}"
    return gxx


def _key(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def _first_lines(text: str, n: int = 30) -> str:
    lines = [l for l in text.splitlines() if l.strip()]
    return "\n".join(lines[:n]) + ("\n..." if len(lines) > n else "")


def _compile(args: list, what: str, out: Path, source: Path | None = None) -> None:
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    r = subprocess.run(args + ["-o", str(tmp)], capture_output=True, text=True)
    if r.returncode:
        tmp.unlink(missing_ok=True)
        err = r.stderr
        no_sanitizer = "cannot find" in err and ("asan" in err or "ubsan" in err)
        no_cxx20 = "No such file" in err and ("barrier" in err or "semaphore" in err)
        if no_sanitizer or no_cxx20:
            raise CompilerMissing(f"g++ without C++20 <barrier> or sanitizers: {_first_lines(err, 5)}")
        errors = [l for l in err.splitlines() if "error" in l] or err.splitlines()
        raise CpuCudaError(f"g++ could not compile {what}:\n" + _first_lines("\n".join(errors)) +
                           "\n---- first lines of the g++ output ----\n" + _first_lines(err, 15))
    os.replace(tmp, out)
    if source is not None:
        source.unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(out: Path):
    """One process at a time makes ``out``: two test workers that need the same object wait
    for each other instead of both compiling it (no lock where fcntl is missing)."""
    try:
        import fcntl  # noqa: PLC0415  (POSIX only)
    except ImportError:
        yield
        return
    with open(out.with_name(out.name + ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _compile_once(args: list, what: str, out: Path, source: Path | None = None) -> None:
    """:func:`_compile`, unless another process made ``out`` meanwhile."""
    with _locked(out):
        if out.exists():
            if source is not None:
                source.unlink(missing_ok=True)
            return
        _compile(args, what, out, source)


class Binary:
    """One executable holding one or more kernel instantiations of one source file."""

    def __init__(self, path: Path, source: Path, expressions: tuple, sanitize: bool):
        self.path, self.source, self.expressions, self.sanitize = path, source, expressions, sanitize

    def __repr__(self):
        return f"Binary({self.source.name}, {list(self.expressions)}, sanitize={self.sanitize})"

    def run(self, name_expression, grid, block, dyn_smem_bytes, args, **kw) -> dict:
        """One launch; see :func:`run` for the arguments and the result."""
        return self.run_many([dict(name_expression=name_expression, grid=grid, block=block,
                                   dyn_smem_bytes=dyn_smem_bytes, args=args, **kw)])[0]

    def run_many(self, launches: list, timeout: float = 600) -> list:
        """Several launches (dicts with the arguments of :meth:`run`) in one process."""
        blobs, shapes = [struct.pack("<QI", 0x3141554355434D43, len(launches))], []
        for i, L in enumerate(launches):
            blob, shape = _encode(self, i, **L)
            blobs.append(blob)
            shapes.append(shape)
        with tempfile.TemporaryDirectory(prefix="cpu_cuda_") as tmp:
            inp, outp = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
            inp.write_bytes(b"".join(blobs))
            env = dict(os.environ, **{k: v for k, v in ENV.items() if k not in os.environ})
            t0 = time.perf_counter()
            try:
                r = subprocess.run([str(self.path), str(inp), str(outp)], capture_output=True, text=True,
                                   timeout=timeout, env=env)
            except subprocess.TimeoutExpired as exc:
                raise CpuCudaError(f"{self.source.name}: no result after {timeout} s (a deadlock? blocks run "
                                   "one after another here, so a block that waits for another never ends)"
                                   ) from exc
            seconds = time.perf_counter() - t0
            if r.returncode:
                raise CpuCudaError(_abort_message(self, r))
            raw = outp.read_bytes()
        results, pos = [], 0
        stats = {int(m.group(1)): m.group(2) for m in re.finditer(r"^launch (\d+) (.*)$", r.stdout, re.M)}
        for i, shape in enumerate(shapes):
            arrays = []
            for item in shape:
                if item is None:
                    arrays.append(None)
                    continue
                dtype, n, original_shape = item
                arrays.append(np.frombuffer(raw, dtype=dtype, count=n, offset=pos).reshape(original_shape).copy())
                pos += 4 * n
            res = {"arrays": arrays, "seconds": seconds / len(launches)}
            for kv in stats[i].split():
                k, v = kv.split("=")
                res[k] = int(v)
            results.append(res)
        return results


_NOISE = ("/usr/include/", "cpu_cuda.h:", "/runtime_", "libsanitizer", "nptl/", "libstdc++", "clone3",
          "libc_start", "sysdeps/")


def _abort_message(binary: Binary, r) -> str:
    """The sanitizer's report, short: the error, the kernel's frames, which array was hit."""
    err = r.stderr
    done = re.findall(r"^cpu_cuda: launch (\d+): (.*)$", err, re.M)
    where = f"launch {done[-1][0]}: {done[-1][1]}" if done else "before the first launch"
    last = err.rfind("cpu_cuda: launch ")
    arrays = {}                                   # the arrays of the failing launch: address range -> arg
    for m in re.finditer(r"^cpu_cuda: (argument (\d+)|dynamic shared memory) at (0x[0-9a-f]+)\.\.(0x[0-9a-f]+)$",
                         err[last:], re.M):
        what = f"argument {m.group(2)}" if m.group(2) else "the dynamic shared memory"
        arrays[(int(m.group(3), 16), int(m.group(4), 16))] = what
    lines = [l for l in err.splitlines() if not l.startswith("cpu_cuda: ") or l.startswith("cpu_cuda error")]
    kind = ("AddressSanitizer" if "AddressSanitizer" in err else "UndefinedBehaviorSanitizer" if "runtime error" in err
            else "the CPU emulation" if "cpu_cuda error" in err else f"exit code {r.returncode}")
    summary = [l.strip() for l in lines if "ERROR: AddressSanitizer" in l or "runtime error" in l
               or l.startswith("cpu_cuda error") or re.match(r"(READ|WRITE) of size", l)]
    here = str(binary.source.parent)
    frames = [l.strip() for l in lines if re.match(r"\s*#\d+ ", l) and here in l][:4]
    region = re.search(r"located (\d+) bytes to the (left|right) of (\d+)-byte region \[(0x[0-9a-f]+),(0x[0-9a-f]+)\)", err)
    if region:
        lo, hi = int(region.group(4), 16), int(region.group(5), 16)
        for (a, b), what in arrays.items():
            if lo <= a and b <= hi:
                summary.append(f"{region.group(1)} bytes to the {region.group(2)} of {what} ({(b - a) // 4} "
                               "elements of 4 bytes)")
                break
        else:
            summary.append(region.group(0))
    rest = [l for l in lines if not any(n in l for n in _NOISE)]
    if any(l.startswith("Shadow bytes") for l in rest):
        rest = rest[:next(i for i, l in enumerate(rest) if l.startswith("Shadow bytes"))]
    return (f"{binary.source.name}, {where}: aborted ({kind}):\n  " + "\n  ".join(summary + frames) +
            "\n---- first lines of the report ----\n" + _first_lines("\n".join(rest), 25))


_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.uint32): 1, np.dtype(np.int32): 2}


def _encode(binary: Binary, index: int, name_expression, grid, block, dyn_smem_bytes, args, *,
            offset_floats=0, schedule="serial", block_order="linear", seed=0):
    if name_expression not in binary.expressions:
        raise CpuCudaError(f"{name_expression} is not in {binary} (build it with that expression)")
    grid = tuple(int(g) for g in (tuple(grid) + (1, 1, 1))[:3])
    block = tuple(int(b) for b in (tuple(block) + (1, 1, 1))[:3])
    if min(grid) < 1 or min(block) < 1 or block[0] * block[1] * block[2] > 1024:
        raise CpuCudaError(f"launch {index}: grid {grid} / block {block}: at least 1 each, at most 1024 threads")
    if schedule not in ("free", "serial") or block_order not in ("linear", "reverse", "shuffle"):
        raise CpuCudaError("schedule 'serial' or 'free'; block_order 'linear', 'reverse' or 'shuffle'")
    offsets = list(offset_floats) if isinstance(offset_floats, (list, tuple)) else [offset_floats] * len(args)
    if len(offsets) != len(args):
        raise CpuCudaError("offset_floats: one per argument, or a single int")
    name = name_expression.encode()
    parts = [struct.pack("<I", len(name)), name, struct.pack("<6IQII", *grid, *block, int(dyn_smem_bytes),
                                                            int(schedule == "serial"),
                                                            ("linear", "reverse", "shuffle").index(block_order)),
             struct.pack("<QI", int(seed), len(args))]
    shape = []
    for i, (a, off) in enumerate(zip(args, offsets)):
        if a is None:
            parts.append(struct.pack("<I", 4))
            shape.append(None)
        elif isinstance(a, np.ndarray):
            if a.dtype not in _DTYPES:
                raise CpuCudaError(f"argument {i}: arrays must be float32, uint32 or int32, not {a.dtype}")
            flat = np.ascontiguousarray(a).ravel()
            parts.append(struct.pack("<IIIQ", 3, _DTYPES[a.dtype], int(off or 0), flat.size))
            parts.append(flat.tobytes())
            shape.append((a.dtype, flat.size, a.shape))
        elif isinstance(a, (np.float32, float)):
            parts.append(struct.pack("<If", 2, float(a)))
            shape.append(None)
        elif isinstance(a, np.uint32):
            parts.append(struct.pack("<II", 1, int(a)))
            shape.append(None)
        elif isinstance(a, np.int64):
            parts.append(struct.pack("<Iq", 5, int(a)))
            shape.append(None)
        elif isinstance(a, (np.int32, int)) and not isinstance(a, bool):
            if not -2**31 <= int(a) < 2**31:
                raise CpuCudaError(f"argument {i}: {a} does not fit an int32")
            parts.append(struct.pack("<Ii", 0, int(a)))
            shape.append(None)
        else:
            raise CpuCudaError(f"argument {i}: numpy int32/uint32/int64/float32 scalars, arrays or None, not {type(a)}")
    return b"".join(parts), shape


def _header(gxx: str, flags: dict) -> Path:
    """cpu_cuda.h and its precompiled form (saves about a second per kernel object)."""
    header = cache_dir() / f"cpu_cuda_{_key(PRELUDE, flags['kernel'], _GXX[gxx])}"
    header.mkdir(exist_ok=True)
    if not (header / "cpu_cuda.h").exists():
        tmp = header / f"cpu_cuda.h.tmp{os.getpid()}"
        tmp.write_text(PRELUDE)
        os.replace(tmp, header / "cpu_cuda.h")
    gch = header / "cpu_cuda.h.gch"
    if not gch.exists():
        try:
            _compile_once([gxx, *flags["kernel"], "-x", "c++-header", str(header / "cpu_cuda.h")], "cpu_cuda.h", gch)
        except CpuCudaError:
            pass                                   # g++ then reads the header itself
    return header


def build_many(sources: dict, *, sanitize: bool = True, jobs: int | None = None) -> dict:
    """``{source_path: [expressions]}`` -> ``{source_path: Binary}``: every object of every
    file compiled in one pool (``jobs`` g++ at a time, default one per core), then linked.
    A file's expressions go into up to ``jobs`` objects (:func:`_batches`)."""
    gxx = _gxx()
    flags = _flags(sanitize)
    d = cache_dir()
    header = _header(gxx, flags)
    base = [gxx, *flags["kernel"], "-I", str(header), "-c", "-x", "c++"]
    workers = max(1, jobs or os.cpu_count() or 1)
    todo = []
    runtime_obj = d / f"runtime_{_key(PRELUDE, RUNTIME, flags['runtime'], _GXX[gxx])}.o"
    if not runtime_obj.exists():
        src = d / f"{runtime_obj.stem}.{os.getpid()}.cpp"
        src.write_text(RUNTIME)
        todo.append(([gxx, *flags["runtime"], "-I", str(header), "-c", "-x", "c++", str(src)],
                     "the CPU runtime", runtime_obj, src))
    plans = {}
    for source_path, expressions in sources.items():
        source = Path(source_path).resolve()
        exprs = tuple(dict.fromkeys(expressions))
        if not exprs:
            raise CpuCudaError(f"build: no name expression for {source.name}")
        body = cpu_source(source)
        # <...> includes go before the kernel's (anonymous) namespace
        system = "\n".join(m.group(0).strip() for m in _SYSTEM_INCLUDE.finditer(body))
        body = _SYSTEM_INCLUDE.sub("", body)
        objs = [runtime_obj]
        for group in _batches(exprs, workers):
            registrars = "\n".join(REGISTRAR.format(i=i, expr=e) for i, e in enumerate(group))
            tu = TU_TEMPLATE.format(body=body, registrars=registrars, system=system)
            obj = d / f"k_{_key(PRELUDE, tu, flags['kernel'], _GXX[gxx])}.o"
            objs.append(obj)
            if not obj.exists() and all(t[2] != obj for t in todo):
                src = d / f"{obj.stem}.{os.getpid()}.cpp"
                src.write_text(tu)
                todo.append((base + [str(src)], f"{', '.join(group)} from {source.name}", obj, src))
        plans[source_path] = (source, exprs, objs)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for f in [pool.submit(_compile_once, *t) for t in todo]:
            f.result()
        links = {}
        for key, (source, exprs, objs) in plans.items():
            exe = d / f"bin_{_key(*sorted(o.name for o in objs), flags['link'])}"
            if not exe.exists() and exe not in links.values():
                links[pool.submit(_compile_once, [gxx, *map(str, objs), *flags["link"]],
                                  f"the binary for {source.name}", exe)] = exe
        for f in links:
            f.result()
    out = {}
    for key, (source, exprs, objs) in plans.items():
        exe = d / f"bin_{_key(*sorted(o.name for o in objs), flags['link'])}"
        out[key] = Binary(exe, source, exprs, sanitize)
        _BUILT.setdefault((str(source), sanitize), []).append(out[key])
    return out


def build(source_path, expressions, *, sanitize: bool = True, jobs: int | None = None) -> Binary:
    """Compile the kernel file with the given name expressions into one binary (cached)."""
    return build_many({source_path: expressions}, sanitize=sanitize, jobs=jobs)[source_path]


_BUILT: dict = {}


PROBES = "probes"          # the file name g++ gives the lines of compile_errors' probes


def compile_errors(source_path, probes: list[str]) -> dict[int, list[str]]:
    """The kernel file's compile-time rules evaluated for many configs in one ``g++ -fsyntax-only``:
    ``probes`` are declarations placed after the file, one per line (e.g.
    ``static_assert(fin::Config<...>::STAGE == 4384, "python");``). Returns, for each probe that does
    not compile, its index and g++'s error messages, those raised inside the templates it
    instantiates included (a kernel's own static_assert: "static assertion failed: <its text>")."""
    gxx = _gxx()
    flags = _flags(False)
    header = _header(gxx, flags)
    body = cpu_source(source_path)
    system = "\n".join(m.group(0).strip() for m in _SYSTEM_INCLUDE.finditer(body))
    body = _SYSTEM_INCLUDE.sub("", body)
    tu = TU_TEMPLATE.format(body=body, system=system, registrars=f'#line 1 "{PROBES}"\n' + "\n".join(probes))
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probes.cpp"
        src.write_text(tu)
        r = subprocess.run([gxx, *flags["kernel"], "-I", str(header), "-fsyntax-only", "-fmax-errors=0",
                            "-x", "c++", str(src)], capture_output=True, text=True)
    # An error inside a template names the probe that instantiated it in "probes:LINE:COL: required
    # from here" before the error itself; an error in the probe's own line is "probes:LINE:COL: error:".
    found: dict[int, list[str]] = {}
    here = None
    for line in r.stderr.splitlines():
        m = re.match(rf"{PROBES}:(\d+):\d+:\s+(required from here|error: (.*))$", line)
        if "In instantiation of" in line:
            here = None
        if m and m.group(2) == "required from here":
            here = int(m.group(1)) - 1
        elif m:
            found.setdefault(int(m.group(1)) - 1, []).append(m.group(3))
        elif ": error: " in line:
            if here is None:
                raise CpuCudaError(f"g++: an error outside the probes:\n{_first_lines(r.stderr, 15)}")
            found.setdefault(here, []).append(line.split(": error: ", 1)[1])
    if r.returncode and not found:
        raise CpuCudaError(f"g++ could not check the probes:\n{_first_lines(r.stderr, 15)}")
    return found


def run(source_path, name_expression, grid, block, dyn_smem_bytes, args, *, offset_floats=0,
        sanitize: bool = True, schedule: str = "serial", block_order: str = "linear", seed: int = 0) -> dict:
    """Launch ``name_expression`` from ``source_path`` once on the CPU.

    ``args``: the kernel's arguments in order: numpy int32/uint32/int64/float32 scalars (a
    Python int or float is taken as int32 or float32), numpy arrays (float32, uint32 or
    int32; passed as device pointers to a copy) or None (a nullptr). ``offset_floats``:
    0, or 1 to start the arrays 4 bytes after a 256-byte boundary; a list gives one
    value per argument. ``schedule``: "serial" or "free" (module docstring);
    ``block_order``: "linear" (x fastest), "reverse" or "shuffle" (with ``seed``).

    Returns ``{"arrays": [...], ...}``: per argument a copy of the array after the
    launch (None for scalars and nullptrs), and the diagnostics ``blocks``,
    ``threads``, ``barriers`` (barrier phases), ``copies`` (cp.async issued),
    ``leftover_cp_async`` (threads of a block that ended with copies not waited for),
    ``seconds``. Reuses a binary of an earlier :func:`build` that holds the expression.
    """
    source = Path(source_path).resolve()
    binary = next((b for b in reversed(_BUILT.get((str(source), sanitize), []))
                   if name_expression in b.expressions and b.path.exists()), None)
    if binary is None:
        binary = build(source, [name_expression], sanitize=sanitize)
    return binary.run(name_expression, grid, block, dyn_smem_bytes, args, offset_floats=offset_floats,
                      schedule=schedule, block_order=block_order, seed=seed)
