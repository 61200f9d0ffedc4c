// Peak of the CPU's dot-product instructions: vdpbf16ps (AVX512_BF16, 64
// FLOP per 512-bit instruction), vpdpbusd (AVX512_VNNI, 64 int8 products, counted
// as 128 operations) and vfmadd231ps (32 FLOP), on 512- and
// 256-bit registers, over N independent accumulators (register operands
// only), on 1 thread and on all. With too few accumulators a loop measures
// the latency, not the throughput. per_cycle counts instructions per cycle of
// the clock the thread got (a dependent add chain, run alongside), so it
// holds on a shared machine, as does per_cpu_s (GFLOP per CPU-second):
//   op=vdpbf16ps acc=12 threads=1 gflops=155.4 per_thread=155.4 per_cycle=1.00 per_cpu_s=233.8
// usage: bench_dp_peak [--threads N] [--ms MS]
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/threadpool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DP_X86 1
#endif

static double run_ms = 200;

#ifdef DP_X86
// 64 iterations of N chained-per-accumulator instructions; returns after
// `iters` outer iterations. The accumulators are summed into *sink so the
// compiler keeps the work.
#define DP_LOOP(NAME, N, INSN)                                                                     \
    __attribute__((target("avx512f,avx512bf16,avx512vnni"), noinline)) static void NAME(           \
        int64_t iters, float *sink)                                                                \
    {                                                                                              \
        __m512 acc[N];                                                                             \
        for (int i = 0; i < N; i++)                                                                \
            acc[i] = _mm512_set1_ps((float)i * 1e-3f);                                             \
        __m512 a = _mm512_set1_ps(1.0009765625f), b = _mm512_set1_ps(0.9990234375f);               \
        __asm__ volatile("" : "+v"(a), "+v"(b));                                                   \
        for (int64_t it = 0; it < iters; it++) {                                                   \
            _Pragma("GCC unroll 64") for (int i = 0; i < N; i++) INSN;                             \
            __asm__ volatile("" : "+v"(a), "+v"(b));                                               \
        }                                                                                          \
        __m512 s = acc[0];                                                                         \
        for (int i = 1; i < N; i++)                                                                \
            s = _mm512_add_ps(s, acc[i]);                                                          \
        *sink = _mm512_reduce_add_ps(s);                                                           \
    }

#define DPBF16(i) acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)a, (__m512bh)b)
#define FMA(i) acc[i] = _mm512_fmadd_ps(a, b, acc[i])
DP_LOOP(dp_1, 1, DPBF16(i))
DP_LOOP(dp_4, 4, DPBF16(i))
DP_LOOP(dp_8, 8, DPBF16(i))
DP_LOOP(dp_12, 12, DPBF16(i))
DP_LOOP(dp_16, 16, DPBF16(i))
DP_LOOP(dp_24, 24, DPBF16(i))
DP_LOOP(fma_12, 12, FMA(i))
DP_LOOP(fma_24, 24, FMA(i))
DP_LOOP(fma_1, 1, FMA(i))
// vpdpbusd (AVX512_VNNI, 64 int8 multiply-adds per 512-bit instruction): the
// quantized matmuls' inner step. Its accumulators are ints; the float
// registers travel as their bits.
#define DPBUSD(i)                                                                                  \
    acc[i] = _mm512_castsi512_ps(_mm512_dpbusd_epi32(                                              \
        _mm512_castps_si512(acc[i]), _mm512_castps_si512(a), _mm512_castps_si512(b)))
DP_LOOP(dpbusd_1, 1, DPBUSD(i))
DP_LOOP(dpbusd_4, 4, DPBUSD(i))
DP_LOOP(dpbusd_8, 8, DPBUSD(i))
DP_LOOP(dpbusd_12, 12, DPBUSD(i))

// The same on 256-bit registers: twice the 512-bit rate per cycle means the
// core splits a 512-bit instruction into two 256-bit halves.
#define DP_LOOP_Y(NAME, N, INSN)                                                                   \
    __attribute__((target("avx2,fma,avx512f,avx512vl,avx512bf16"), noinline)) static void NAME(    \
        int64_t iters, float *sink)                                                                \
    {                                                                                              \
        __m256 acc[N];                                                                             \
        for (int i = 0; i < N; i++)                                                                \
            acc[i] = _mm256_set1_ps((float)i * 1e-3f);                                             \
        __m256 a = _mm256_set1_ps(1.0009765625f), b = _mm256_set1_ps(0.9990234375f);               \
        __asm__ volatile("" : "+v"(a), "+v"(b));                                                   \
        for (int64_t it = 0; it < iters; it++) {                                                   \
            _Pragma("GCC unroll 64") for (int i = 0; i < N; i++) INSN;                             \
            __asm__ volatile("" : "+v"(a), "+v"(b));                                               \
        }                                                                                          \
        __m256 s = acc[0];                                                                         \
        for (int i = 1; i < N; i++)                                                                \
            s = _mm256_add_ps(s, acc[i]);                                                          \
        float f[8];                                                                                \
        _mm256_storeu_ps(f, s);                                                                    \
        *sink = f[0] + f[7];                                                                       \
    }
#define DPBF16_Y(i) acc[i] = _mm256_dpbf16_ps(acc[i], (__m256bh)a, (__m256bh)b)
#define FMA_Y(i) acc[i] = _mm256_fmadd_ps(a, b, acc[i])
DP_LOOP_Y(dp_y12, 12, DPBF16_Y(i))
DP_LOOP_Y(fma_y12, 12, FMA_Y(i))

// One dependent integer add per step, 64 per iteration: counts cycles (one
// add a cycle), so "per_cycle" below is instructions per cycle of the clock
// this thread actually got.
__attribute__((noinline)) static void clock_chain(int64_t iters, float *sink)
{
    uint64_t v = 1;
    for (int64_t it = 0; it < iters; it++) {
        _Pragma("GCC unroll 64") for (int i = 0; i < 64;
                                      i++) __asm__ volatile("add $1, %0" : "+r"(v));
    }
    *sink = (float)v;
}

struct dp_case {
    const char *op;
    int acc;
    double flop_per_insn;
    void (*fn)(int64_t iters, float *sink);
};

static const struct dp_case cases[] = {
    {"vdpbf16ps", 1, 64, dp_1},           {"vdpbf16ps", 4, 64, dp_4},
    {"vdpbf16ps", 8, 64, dp_8},           {"vdpbf16ps", 12, 64, dp_12},
    {"vdpbf16ps", 16, 64, dp_16},         {"vdpbf16ps", 24, 64, dp_24},
    {"vfmadd231ps", 1, 32, fma_1},        {"vfmadd231ps", 12, 32, fma_12},
    {"vfmadd231ps", 24, 32, fma_24},      {"vdpbf16ps-ymm", 12, 32, dp_y12},
    {"vfmadd231ps-ymm", 12, 16, fma_y12}, {"vpdpbusd", 1, 128, dpbusd_1},
    {"vpdpbusd", 4, 128, dpbusd_4},       {"vpdpbusd", 8, 128, dpbusd_8},
    {"vpdpbusd", 12, 128, dpbusd_12},
};

struct dp_ctx {
    const struct dp_case *c;
    int64_t iters;
    double seconds[64];
    float sink[64];
};

static void dp_task(void *p, int task, int thread)
{
    struct dp_ctx *ctx = p;
    (void)thread;
    double t0 = time_now_s();
    ctx->c->fn(ctx->iters, &ctx->sink[task]);
    ctx->seconds[task] = time_now_s() - t0;
}

// Returns the instructions per second per thread (best of 3 runs), and in
// *per_cpu_s those per CPU-second of the process.
static double dp_rate(const struct dp_case *c, int n_threads, double *per_cpu_s)
{
    struct threadpool *pool = NULL;
    struct err err = {0};
    if (n_threads > 1 && threadpool_create(n_threads, &pool, &err)) {
        fprintf(stderr, "bench_dp_peak: %s\n", err.msg);
        return 0;
    }
    // Calibrate on one thread: iterations for run_ms.
    struct dp_ctx ctx = {.c = c, .iters = 1 << 16};
    for (;;) {
        dp_task(&ctx, 0, 0);
        if (ctx.seconds[0] * 1e3 > run_ms / 8)
            break;
        ctx.iters *= 2;
    }
    ctx.iters = (int64_t)((double)ctx.iters * run_ms / (ctx.seconds[0] * 1e3));
    double best = 0;
    *per_cpu_s = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = time_now_s(), cpu0 = time_process_cpu_s();
        threadpool_run(pool, dp_task, &ctx, n_threads);
        double t = time_now_s() - t0, cpu = time_process_cpu_s() - cpu0;
        double rate = (double)ctx.iters * c->acc / t;
        double rate_cpu = (double)ctx.iters * c->acc * n_threads / cpu;
        if (rate > best)
            best = rate;
        if (rate_cpu > *per_cpu_s)
            *per_cpu_s = rate_cpu;
    }
    threadpool_free(pool);
    return best;
}

static void dp_bench(int n_threads)
{
    static const struct dp_case clock = {"add", 64, 1, clock_chain};
    double per_cpu_s;
    double hz = dp_rate(&clock, n_threads, &per_cpu_s);
    printf("threads=%d clock_ghz=%.2f (dependent adds per second per thread)\n", n_threads,
           hz * 1e-9);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct dp_case *c = &cases[i];
        if (!strcmp(c->op, "vpdpbusd") && !__builtin_cpu_supports("avx512vnni"))
            continue;
        double rate = dp_rate(c, n_threads, &per_cpu_s);
        printf("op=%s acc=%d threads=%d gflops=%.1f per_thread=%.1f per_cycle=%.2f "
               "per_cpu_s=%.1f\n",
               c->op, c->acc, n_threads, rate * c->flop_per_insn * n_threads * 1e-9,
               rate * c->flop_per_insn * 1e-9, rate / hz, per_cpu_s * c->flop_per_insn * 1e-9);
        fflush(stdout);
    }
}
#endif

int main(int argc, char **argv)
{
    int max_threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            max_threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--ms") && i + 1 < argc) {
            run_ms = atof(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_dp_peak [--threads N] [--ms MS]\n");
            return 2;
        }
    }
#ifdef DP_X86
    if (!__builtin_cpu_supports("avx512bf16")) {
        fprintf(stderr, "bench_dp_peak: this CPU has no AVX512_BF16\n");
        return 0;
    }
    if (max_threads <= 0)
        max_threads = threadpool_cpu_count();
    if (max_threads > 64)
        max_threads = 64;
    for (int t = 1; t <= max_threads;
         t = t * 2 > max_threads && t < max_threads ? max_threads : t * 2)
        dp_bench(t);
#else
    (void)max_threads;
    fprintf(stderr, "bench_dp_peak: x86-64 only\n");
#endif
    return 0;
}
