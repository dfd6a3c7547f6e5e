"""Double buffering (kernels/08_double_buffering.cu): specs, offline resources, SASS,
and the kernels themselves run on the CPU.

The last part compiles the .cu file with g++ and a small stand-in for CUDA: one
std::thread per CUDA thread, __syncthreads() as a std::barrier over the block,
shared arrays poisoned with NaN before every block, cp.async copies that land as
late as the PTX rules allow (at cp.async.wait_group), and exact-size global
buffers under AddressSanitizer (any read outside A or B aborts) and UBSan
(misaligned float4). It checks the index math, the edge handling and the
pipeline's waits and barriers without a GPU. It is not a timing model.
"""
import re
import shutil
import subprocess

import pytest

from helpers.registry import ConfigError, get
from helpers.specs import double_buffering as mod
from helpers.specs import sweeps
from helpers.specs import test_configs as checked_configs

KERNEL = get("double_buffering").path

PRELUDE = r'''
#include <algorithm>
#include <barrier>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>
using std::min; using std::max;
struct dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local dim3 threadIdx, blockIdx;
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
static std::barrier<>* g_bar = nullptr;
static char* g_dyn_smem = nullptr;
static size_t g_dyn_bytes = 0;
static size_t g_ldg_oob_checks = 0;
inline void __syncthreads() { g_bar->arrive_and_wait(); }
inline float __ldg(const float* p) { return *p; }
inline float4 __ldg(const float4* p) {
    if (reinterpret_cast<uintptr_t>(p) % 16) { fprintf(stderr, "misaligned float4 load\n"); abort(); }
    return *p;
}
inline size_t __cvta_generic_to_shared(const void* p) {
    const char* c = static_cast<const char*>(p);
    if (c < g_dyn_smem || c >= g_dyn_smem + g_dyn_bytes) { fprintf(stderr, "cvta outside shared memory\n"); abort(); }
    return (size_t)(c - g_dyn_smem);
}
// Shared arrays: registered at first touch of each block, poisoned by thread 0.
inline void smem_poison(void* p, size_t bytes) {
    if (threadIdx.x == 0) { float* f = (float*)p; for (size_t i = 0; i < bytes / 4; ++i) f[i] = NAN; }
    __syncthreads();
}
// cp.async: copies wait in per-thread groups and land at wait_group time.
struct Copy { unsigned dst; const char* src; int n, src_bytes; };
thread_local std::vector<Copy> t_open;
thread_local std::deque<std::vector<Copy>> t_groups;
inline void emu_cp(unsigned dst, const void* src, int n, int src_bytes) {
    if (dst % n || reinterpret_cast<uintptr_t>(src) % n) { fprintf(stderr, "misaligned cp.async\n"); abort(); }
    if (dst + n > g_dyn_bytes) { fprintf(stderr, "cp.async outside shared memory\n"); abort(); }
    if (src_bytes != 0 && src_bytes != n) { fprintf(stderr, "odd src-size\n"); abort(); }
    t_open.push_back({dst, (const char*)src, n, src_bytes});
}
inline void emu_land(const std::vector<Copy>& g) {
    for (auto& c : g) {
        std::memset(g_dyn_smem + c.dst, 0, c.n);
        if (c.src_bytes) std::memcpy(g_dyn_smem + c.dst, c.src, c.src_bytes);
    }
}
inline void emu_commit() { t_groups.push_back(t_open); t_open.clear(); }
inline void emu_wait(int n) { while ((int)t_groups.size() > n) { emu_land(t_groups.front()); t_groups.pop_front(); } }
'''

CP_FUNCS = {
    "cp_async16": "__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes) { emu_cp(dst, src, 16, src_bytes); }",
    "cp_async4": "__device__ __forceinline__ void cp_async4(unsigned dst, const void* src, int src_bytes) { emu_cp(dst, src, 4, src_bytes); }",
    "cp_async_commit": "__device__ __forceinline__ void cp_async_commit() { emu_commit(); }",
    "cp_async_wait": "template <int N>\n__device__ __forceinline__ void cp_async_wait() { emu_wait(N); }",
}

DRIVER = r'''
struct Cfg { std::string name; std::function<void(int, int, int, const float*, const float*, float*)> fn; size_t dyn; };
// n floats ending exactly at the end of their allocation; DB_OFFSET=1 starts them
// 4 bytes after a 256-byte boundary, like a view into a bigger array.
static int g_offset = 0;
static float* exact_alloc(size_t n) {
    void* p = nullptr;
    if (posix_memalign(&p, 256, (n + g_offset) * sizeof(float))) abort();
    return (float*)p + g_offset;
}
static void exact_free(float* p) { free(p - g_offset); }
int run(const Cfg& cfg, int M, int N, int K, unsigned seed) {
    float* A = exact_alloc((size_t)M * K); float* B = exact_alloc((size_t)K * N); float* C = exact_alloc((size_t)M * N);
    srand(seed);
    for (size_t i = 0; i < (size_t)M * K; ++i) A[i] = 2.0f * rand() / RAND_MAX - 1.0f;
    for (size_t i = 0; i < (size_t)K * N; ++i) B[i] = 2.0f * rand() / RAND_MAX - 1.0f;
    for (size_t i = 0; i < (size_t)M * N; ++i) C[i] = NAN;
    const int gx = (N + 127) / 128, gy = (M + 127) / 128;
    g_dyn_smem = cfg.dyn ? new char[cfg.dyn] : nullptr; g_dyn_bytes = cfg.dyn;
    std::barrier<> bar(256); g_bar = &bar;
    bool leftover = false;
    std::vector<std::thread> pool;
    for (int t = 0; t < 256; ++t) pool.emplace_back([&, t] {
        threadIdx.x = t;
        for (int by = 0; by < gy; ++by) for (int bx = 0; bx < gx; ++bx) {
            if (t == 0 && cfg.dyn) { float* f = (float*)g_dyn_smem; for (size_t i = 0; i < cfg.dyn / 4; ++i) f[i] = NAN; }
            bar.arrive_and_wait();
            blockIdx.x = bx; blockIdx.y = by;
            cfg.fn(M, N, K, A, B, C);
            for (auto& g : t_groups) if (!g.empty()) leftover = true;
            if (!t_open.empty()) leftover = true;
            t_groups.clear(); t_open.clear();
            bar.arrive_and_wait();
        }
    });
    for (auto& th : pool) th.join();
    double max_err = 0, max_ref = 0; long bad = 0, unwritten = 0;
    for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) {
        double ref = 0; for (int k = 0; k < K; ++k) ref += (double)A[(size_t)i * K + k] * B[(size_t)k * N + j];
        const float c = C[(size_t)i * N + j];
        if (std::isnan(c)) { ++unwritten; continue; }
        max_err = std::max(max_err, std::fabs(c - ref)); max_ref = std::max(max_ref, std::fabs(ref));
        if (std::fabs(c - ref) > 1e-4 * (1 + std::sqrt((double)K))) ++bad;
    }
    printf("%s %dx%dx%d: unwritten=%ld bad=%ld max_err=%.3g leftover_copies=%d\n",
           cfg.name.c_str(), M, N, K, unwritten, bad, max_err, (int)leftover);
    delete[] g_dyn_smem; g_dyn_smem = nullptr;
    exact_free(A); exact_free(B); exact_free(C);
    return (unwritten || bad || leftover) ? 1 : 0;
}
int main(int argc, char** argv) {
    std::vector<Cfg> cfgs = { CONFIGS };
    int rc = 0;
    const std::string want = argv[1];
    if (getenv("DB_OFFSET")) g_offset = atoi(getenv("DB_OFFSET"));
    for (auto& cfg : cfgs) {
        if (want != "all" && want != cfg.name) continue;
        for (int i = 2; i + 2 < argc; i += 3)
            rc |= run(cfg, atoi(argv[i]), atoi(argv[i + 1]), atoi(argv[i + 2]), 1234 + i);
    }
    return rc;
}
'''


def _cut_function(src: str, name: str, replacement: str) -> str:
    """Replace the definition of function `name` (with any template line) by `replacement`."""
    m = re.search(r"(template <int N>\s*\n)?__device__ __forceinline__ void " + name + r"\(", src)
    assert m, name
    i = src.index("{", m.end())
    depth = 0
    for j in range(i, len(src)):
        depth += {"{": 1, "}": -1}.get(src[j], 0)
        if depth == 0:
            return src[:m.start()] + replacement + src[j + 1:]
    raise ValueError(name)


def cpu_source(cu_text: str, configs: list[tuple[str, str, int]]) -> str:
    """The kernel file turned into a g++ program; configs: (name, C++ expression, dynamic smem bytes)."""
    src = cu_text
    for name, repl in CP_FUNCS.items():
        src = _cut_function(src, name, repl)
    src = src.replace("extern __shared__ __align__(16) float smem[];",
                      "float* smem = reinterpret_cast<float*>(g_dyn_smem);")
    src = re.sub(r"__shared__ __align__\(16\) float (\w+)((?:\[[^\]]+\])+);",
                 r"alignas(16) static float \1\2; smem_poison(\1, sizeof(\1));", src)
    assert "asm" not in re.sub(r"//.*", "", src), "inline PTX left in the CPU build"
    cfgs = ",\n".join(f'{{"{n}", [](int M, int N, int K, const float* A, const float* B, float* C) '
                      f'{{ {expr}(M, N, K, A, B, C); }}, {dyn}}}' for n, expr, dyn in configs)
    return PRELUDE + src + DRIVER.replace("CONFIGS", cfgs)


# --------------------------------------------------------------------- specs
def test_three_kernels_one_file_and_only_the_racy_one_is_broken():
    names = {s.name: s for s in mod.SPECS}
    assert set(names) == {"double_buffering", "double_buffering_racy", "double_buffering_async"}
    assert {s.file for s in mod.SPECS} == {"08_double_buffering.cu"}
    assert names["double_buffering_racy"].broken and "race" in names["double_buffering_racy"].broken
    assert not names["double_buffering"].broken and not names["double_buffering_async"].broken
    assert names["double_buffering"].defaults() == {"BK": 8, "FIXED": 1}
    assert names["double_buffering_racy"].defaults() == {"BK": 8, "FIXED": 0}


def test_racy_and_fixed_are_one_template_differing_in_fixed():
    fixed, racy = get("double_buffering"), get("double_buffering_racy")
    assert fixed.function == racy.function
    assert fixed.name_expression(fixed.defaults()) == "sgemm_double_buffering<8, 1>"
    assert racy.name_expression(racy.defaults()) == "sgemm_double_buffering<8, 0>"
    with pytest.raises(ConfigError, match="FIXED=0 is not allowed"):
        fixed.validate({"FIXED": 0})


def test_async_shared_memory_and_limits():
    spec = get("double_buffering_async")
    assert spec.smem_bytes({"BK": 16, "STAGES": 3}) == 49152
    assert spec.smem_bytes({"BK": 32, "STAGES": 4}) == 131072
    assert spec.smem_bytes({"BK": 8, "STAGES": 2}) == 16384
    assert len(list(spec.space())) == 9  # every BK x STAGES fits in 227 KB
    with pytest.raises(ConfigError, match="STAGES=5 is not allowed"):
        spec.validate({"STAGES": 5})


def test_every_shape_is_accepted():
    for spec in mod.SPECS:
        for shape in [(1, 1, 1), (7, 13, 5), (33, 4100, 300), (4097, 4097, 4097)]:
            spec.check_shape(spec.defaults(), *shape)


def test_sweep_has_every_default_at_the_three_sizes():
    rows = sweeps()["double_buffering"]
    assert len(rows) <= 30
    have = {(s.name, tuple(sorted(s.resolve(p).items())), shape[0]) for s, p, shape in rows}
    for name in ("double_buffering", "double_buffering_racy", "double_buffering_async"):
        spec = get(name)
        for n in (1024, 2048, 4096):
            assert (name, tuple(sorted(spec.defaults().items())), n) in have, (name, n)
    stages = {dict(p)["STAGES"] for name, p, n in have if name == "double_buffering_async" and n == 1024}
    assert stages == {2, 3, 4}  # the figure's menu over STAGES has every size
    for s, p, shape in rows:
        s.validate(p)


def test_test_configs_are_valid():
    mine = [(s, p) for s, p in checked_configs() if s.file == "08_double_buffering.cu"]
    assert len(mine) == 6
    for s, p in mine:
        s.validate(p)


# ------------------------------------------------------------ offline compile
def _resources(name, params):
    from helpers.resources import ToolMissing, resources

    try:
        return resources(name, params)
    except ToolMissing as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("name,params", [
    ("double_buffering", {"BK": 8}), ("double_buffering_racy", {"BK": 8}),
    *[("double_buffering_async", {"BK": bk, "STAGES": s}) for bk in (8, 16, 32) for s in (2, 3, 4)]])
def test_two_blocks_per_sm_fit_without_spills(name, params):
    r = _resources(name, params)
    assert r.registers <= 128, str(r)        # 256 threads x 128 x 2 blocks = the SM's 64K registers
    assert not r.spills, str(r)


def test_bk16_register_prefetch_does_not_fit_in_128_registers():
    """The cost the chapter shows: 16 more staging registers make BK=16 spill."""
    r = _resources("double_buffering", {"BK": 16})
    assert r.registers == 128 and r.spills


def _sass(name, params):
    from helpers.resources import ToolMissing, sass

    try:
        return sass(name, params)
    except ToolMissing as exc:
        pytest.skip(str(exc))


def test_the_racy_kernel_lacks_exactly_one_barrier():
    count = lambda text: len(re.findall(r"\bBAR\.SYNC", text))
    fixed, racy = _sass("double_buffering", {"BK": 8}), _sass("double_buffering_racy", {"BK": 8})
    assert count(fixed) == count(racy) + 1


def test_inner_loops_issue_lds128_and_the_async_loop_ldgsts():
    from helpers.resources import inner_loop, opcode_counts

    reg = opcode_counts(inner_loop(_sass("double_buffering", {"BK": 8})))
    assert reg["FFMA"] == 512 and reg["LDS.128"] == 32 and reg.get("LDS", 0) == 0
    loop = inner_loop(_sass("double_buffering_async", {"BK": 16, "STAGES": 3}))
    cp = opcode_counts(loop)
    assert cp["FFMA"] == 1024 and cp["LDS.128"] == 64
    assert "LDGSTS" in loop and "LDGDEPBAR" in loop and "DEPBAR" in loop


def test_source_shows_the_one_line_fix():
    src = KERNEL.read_text()
    assert src.count("if (FIXED) __syncthreads();") == 1
    assert "cp.async.cg.shared.global [%0], [%1], 16, %2;" in src   # zero-filling form


# ------------------------------------------------------------- CPU emulation
CPU_CONFIGS = [("db8", "sgemm_double_buffering<8, 1>", 0), ("db16", "sgemm_double_buffering<16, 1>", 0),
               ("racy8", "sgemm_double_buffering<8, 0>", 0)] + [
    (f"async{bk}_{s}", f"sgemm_double_buffering_async<{bk}, {s}>", mod.async_smem_bytes({"BK": bk, "STAGES": s}))
    for bk in (8, 16, 32) for s in (2, 3, 4)]
CPU_SHAPES = [(1, 1, 1), (7, 13, 5), (67, 45, 33), (130, 129, 17), (130, 132, 36), (129, 128, 16),
              (33, 260, 300), (200, 4, 12), (4, 200, 3), (256, 256, 64)]


@pytest.fixture(scope="module")
def cpu_binary(tmp_path_factory):
    if not shutil.which("g++"):
        pytest.skip("g++ is not installed")
    d = tmp_path_factory.mktemp("db_cpu")
    (d / "k.cpp").write_text(cpu_source(KERNEL.read_text(), CPU_CONFIGS))
    r = subprocess.run(["g++", "-std=c++20", "-O1", "-g", "-fsanitize=address,undefined",
                        "-fno-sanitize-recover=undefined", "-Wno-unknown-pragmas", "-pthread",
                        str(d / "k.cpp"), "-o", str(d / "k")], capture_output=True, text=True)
    if r.returncode and ("barrier" in r.stderr and "No such file" in r.stderr or "sanitizer" in r.stderr):
        pytest.skip("g++ without C++20 <barrier> or sanitizers: " + r.stderr[-300:])
    assert r.returncode == 0, r.stderr[-3000:]
    return d / "k"


def _run(binary, name, shapes, offset=0):
    import os

    args = [str(binary), name] + [str(x) for shape in shapes for x in shape]
    env = dict(os.environ, DB_OFFSET=str(offset))
    r = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize("name", [c[0] for c in CPU_CONFIGS if not c[0].startswith("racy")])
def test_kernel_on_cpu_is_correct_and_in_bounds(cpu_binary, name):
    rc, out, err = _run(cpu_binary, name, CPU_SHAPES)
    assert rc == 0, out + err[-3000:]
    assert "AddressSanitizer" not in err and "runtime error" not in err
    assert out.count("unwritten=0 bad=0") == len(CPU_SHAPES), out


@pytest.mark.parametrize("name", ["db8", "async16_3", "async8_2"])
def test_matrices_starting_4_bytes_off_alignment_take_the_scalar_path(cpu_binary, name):
    """A float4 or 16-byte cp.async from a misaligned view would abort (UBSan / the cp.async check)."""
    rc, out, err = _run(cpu_binary, name, [(130, 132, 36), (64, 64, 64)], offset=1)
    assert rc == 0, out + err[-3000:]
    assert out.count("unwritten=0 bad=0") == 2, out


def test_racy_kernel_on_cpu_reads_before_the_writes_but_never_out_of_bounds(cpu_binary):
    """Thread 0 computes on stage 0 while others have not stored it yet: NaN poison leaks into C."""
    rc, out, err = _run(cpu_binary, "racy8", [(130, 129, 17), (33, 260, 300)])
    assert "AddressSanitizer" not in err and "runtime error" not in err
    unwritten = [int(x) for x in re.findall(r"unwritten=(\d+)", out)]
    assert len(unwritten) == 2 and rc == 1  # wrong results, reported as such


# ------------------------------------------------------ helpers.pipeline
def test_load_to_use_counts_the_arithmetic_that_hides_a_load():
    from helpers.pipeline import load_to_use

    try:
        prev = load_to_use("bank_conflicts")
        two = load_to_use("double_buffering", {"BK": 8})
        deep = load_to_use("double_buffering_async", {"BK": 16, "STAGES": 3})
    except Exception as exc:  # no offline compiler
        if "not found" in str(exc) or "not installed" in str(exc):
            pytest.skip(str(exc))
        raise
    assert prev["max"] == 0                       # single-buffered: used right away
    assert two["per_iteration"] == 512 and two["min"] >= 400
    assert deep["min"] == 2 * deep["per_iteration"] == 2048


def test_dest_and_sources_of_sass_operands():
    from helpers.pipeline import _dest_and_sources

    assert _dest_and_sources("LDG.E.128.CONSTANT", "R88, desc[UR12][R106.64]") == ({88, 89, 90, 91}, {106})
    assert _dest_and_sources("STS.128", "[R124], R84") == (set(), {124, 84})
    assert _dest_and_sources("FFMA", "R1, R2, R3, R1") == ({1}, {2, 3, 1})


def test_fix_diff_is_one_added_barrier():
    from helpers.pipeline import fix_diff

    diff = fix_diff(KERNEL)
    added = [l for l in diff.splitlines() if l.startswith("+") and not l.startswith("+++")]
    removed = [l for l in diff.splitlines() if l.startswith("-") and not l.startswith("---")]
    assert removed == [] and len(added) == 1 and "__syncthreads();" in added[0]


def test_stages_figure_has_a_menu_entry_per_depth():
    from helpers.pipeline import stages_figure

    row = lambda k, p, n, t: dict(kernel=k, params=p, M=n, N=n, K=n, tflops=t, cublas_tflops=50.0)
    rows = [row("double_buffering", {"BK": 8, "FIXED": 1}, n, 40.0) for n in (1024, 4096)]
    rows += [row("double_buffering_async", {"BK": 16, "STAGES": s}, n, 30.0 + s) for s in (2, 3, 4) for n in (1024, 4096)]
    fig = stages_figure(rows, "test")
    assert [b.label for b in fig.layout.updatemenus[0].buttons] == ["2 stages", "3 stages", "4 stages"]
    assert len(fig.data) == 9 and sum(bool(t.visible) for t in fig.data) == 3
