// Memory read bandwidth probe (see membw.h). Each thread sums its own slice
// with 64-byte (AVX-512) or 32-byte (AVX2) loads as MEMBW_STREAMS interleaved
// streams, the way a matmul reads several weight rows at once: one sequential
// stream per thread leaves memory-level parallelism unused (27 against 36 GB/s
// on a 2-core Zen 5 guest, less than the decode itself reads). Each stream
// also asks for its line MEMBW_PREFETCH bytes ahead into L2, as the decode
// kernels do: the hardware prefetcher stops at each 4 KiB page and must
// learn the stream again, and without the hint the probe read ~20% less
// than the decode matmul on a 2-core Zen 4 guest (45 against 56 GB/s, the
// same run alternating both). The sum is kept so the compiler cannot drop
// the loads.
#include "tools/membw.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"

#define MEMBW_MAX_THREADS 256
#define MEMBW_STREAMS 8 // per thread; slices are multiples of 4096 bytes, so 512 per stream
#define MEMBW_PREFETCH 2048 // bytes ahead in each stream (1-8 KiB all read alike)

enum membw_isa { MEMBW_SCALAR, MEMBW_AVX2, MEMBW_AVX512 };

struct membw_ctx {
    const uint8_t *buf;
    size_t slice_bytes;         // per thread, a multiple of 4096
    enum membw_isa isa;
    // The calling thread reads slice 0 and times each pass; the others spin on
    // generation (a pass number, or -1 to exit) and count themselves in n_done.
    _Atomic int generation;
    _Atomic int n_done;
    uint64_t sums[MEMBW_MAX_THREADS];
};

struct membw_worker {
    struct membw_ctx *ctx;
    int index;
};

// p[0..n) as MEMBW_STREAMS streams of n / MEMBW_STREAMS bytes, two 64-byte
// lines of each per loop turn. A prefetch past the end of the slice is a
// hint only (it never faults).
__attribute__((target("avx512f"))) static uint64_t membw_sum_avx512(const uint8_t *p, size_t n)
{
    const size_t sub = n / MEMBW_STREAMS;
    __m512i acc[MEMBW_STREAMS];
    for (int s = 0; s < MEMBW_STREAMS; s++)
        acc[s] = _mm512_setzero_si512();
    for (size_t i = 0; i < sub; i += 128) {
#pragma GCC unroll 8
        for (int s = 0; s < MEMBW_STREAMS; s++) {
            const uint8_t *q = p + (size_t)s * sub + i;
            _mm_prefetch((const char *)(q + MEMBW_PREFETCH), _MM_HINT_T1);
            _mm_prefetch((const char *)(q + MEMBW_PREFETCH + 64), _MM_HINT_T1);
            acc[s] = _mm512_add_epi64(acc[s], _mm512_load_si512((const void *)q));
            acc[s] = _mm512_add_epi64(acc[s], _mm512_load_si512((const void *)(q + 64)));
        }
    }
    __m512i t = acc[0];
    for (int s = 1; s < MEMBW_STREAMS; s++)
        t = _mm512_add_epi64(t, acc[s]);
    return (uint64_t)_mm512_reduce_add_epi64(t);
}

// The same with 32-byte loads, four per stream and loop turn.
__attribute__((target("avx2"))) static uint64_t membw_sum_avx2(const uint8_t *p, size_t n)
{
    const size_t sub = n / MEMBW_STREAMS;
    __m256i acc[MEMBW_STREAMS];
    for (int s = 0; s < MEMBW_STREAMS; s++)
        acc[s] = _mm256_setzero_si256();
    for (size_t i = 0; i < sub; i += 128) {
#pragma GCC unroll 8
        for (int s = 0; s < MEMBW_STREAMS; s++) {
            const uint8_t *q = p + (size_t)s * sub + i;
            _mm_prefetch((const char *)(q + MEMBW_PREFETCH), _MM_HINT_T1);
            _mm_prefetch((const char *)(q + MEMBW_PREFETCH + 64), _MM_HINT_T1);
            for (int l = 0; l < 128; l += 32)
                acc[s] = _mm256_add_epi64(acc[s], _mm256_load_si256((const __m256i *)(q + l)));
        }
    }
    __m256i t = acc[0];
    for (int s = 1; s < MEMBW_STREAMS; s++)
        t = _mm256_add_epi64(t, acc[s]);
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, t);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

static uint64_t membw_sum_scalar(const uint8_t *p, size_t n)
{
    const uint64_t *w = (const uint64_t *)(const void *)p;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < n / 8; i += 4) {
        s0 += w[i];
        s1 += w[i + 1];
        s2 += w[i + 2];
        s3 += w[i + 3];
    }
    return s0 + s1 + s2 + s3;
}

static uint64_t membw_sum(const struct membw_ctx *ctx, int index)
{
    const uint8_t *p = ctx->buf + (size_t)index * ctx->slice_bytes;
    return ctx->isa == MEMBW_AVX512 ? membw_sum_avx512(p, ctx->slice_bytes)
           : ctx->isa == MEMBW_AVX2 ? membw_sum_avx2(p, ctx->slice_bytes)
                                    : membw_sum_scalar(p, ctx->slice_bytes);
}

static void *membw_thread(void *arg)
{
    struct membw_worker *w = arg;
    struct membw_ctx *ctx = w->ctx;
    int seen = 0;
    for (;;) {
        int gen;
        while ((gen = atomic_load(&ctx->generation)) == seen)
            _mm_pause();
        if (gen < 0)
            return NULL;
        seen = gen;
        ctx->sums[w->index] += membw_sum(ctx, w->index);
        atomic_fetch_add(&ctx->n_done, 1);
    }
}

static int membw_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int membw_measure(int n_threads, size_t n_bytes, int n_reps, struct membw_result *out)
{
    memset(out, 0, sizeof(*out));
    if (n_threads < 1 || n_threads > MEMBW_MAX_THREADS || n_reps < 1)
        return 1;
    struct membw_ctx *ctx = mem_calloc(1, sizeof(*ctx));
    pthread_t *tids = mem_calloc((size_t)n_threads, sizeof(*tids));
    struct membw_worker *workers = mem_calloc((size_t)n_threads, sizeof(*workers));
    double *gbps = mem_calloc((size_t)n_reps, sizeof(*gbps));
    ctx->slice_bytes = n_bytes / (size_t)n_threads / 4096 * 4096;
    uint8_t *buf = ctx->slice_bytes ? mem_alloc_aligned(4096, ctx->slice_bytes * (size_t)n_threads)
                                    : NULL;
    if (!ctx || !tids || !workers || !gbps || !buf) {
        mem_free(buf);
        mem_free(gbps);
        mem_free(workers);
        mem_free(tids);
        mem_free(ctx);
        return 1;
    }
    // Nonzero bytes: every page is backed by its own memory, none by the zero page.
    memset(buf, 1, ctx->slice_bytes * (size_t)n_threads);
    ctx->buf = buf;
    __builtin_cpu_init();
    ctx->isa = __builtin_cpu_supports("avx512f") ? MEMBW_AVX512
               : __builtin_cpu_supports("avx2")  ? MEMBW_AVX2
                                                 : MEMBW_SCALAR;
    int n_started = 1;
    for (int i = 1; i < n_threads; i++) {
        workers[i] = (struct membw_worker){ctx, i};
        if (pthread_create(&tids[i], NULL, membw_thread, &workers[i]))
            break;
        n_started++;
    }
    int rc = n_started < n_threads;
    size_t total = ctx->slice_bytes * (size_t)n_threads;
    for (int pass = 0; !rc && pass < n_reps + 1; pass++) {
        atomic_store(&ctx->n_done, 0);
        double t0 = time_now_s();
        atomic_store(&ctx->generation, pass + 1);
        ctx->sums[0] += membw_sum(ctx, 0);
        while (atomic_load(&ctx->n_done) < n_threads - 1)
            _mm_pause();
        double s = time_now_s() - t0;
        if (pass > 0)
            gbps[pass - 1] = s > 0 ? (double)total / s * 1e-9 : 0;
    }
    atomic_store(&ctx->generation, -1);
    for (int i = 1; i < n_started; i++)
        pthread_join(tids[i], NULL);
    if (!rc) {
        qsort(gbps, (size_t)n_reps, sizeof(*gbps), membw_cmp);
        *out = (struct membw_result){
            .best_gbps = gbps[n_reps - 1],
            .median_gbps = n_reps % 2 ? gbps[n_reps / 2]
                                      : 0.5 * (gbps[n_reps / 2 - 1] + gbps[n_reps / 2]),
            .isa = ctx->isa == MEMBW_AVX512 ? "avx512" : ctx->isa == MEMBW_AVX2 ? "avx2" : "scalar",
            .n_bytes = total,
            .n_threads = n_threads,
            .n_reps = n_reps,
        };
    }
    mem_free(buf);
    mem_free(gbps);
    mem_free(workers);
    mem_free(tids);
    mem_free(ctx);
    return rc;
}
