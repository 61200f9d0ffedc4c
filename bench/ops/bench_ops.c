// Op micro-benchmarks: each case runs once per provider of its op, the
// others switched off through the backend's disable list, and prints
//   op=matmul dtype=bf16 m=1 n=4096 k=4096 provider=cpu-avx2 us=812.3 gflops=41.3 gbps=41.3
//   cpu_share=97% cpu_gflops=42.6
// (median of the repeats; gbps counts weight or cache bytes read once;
// cpu_gflops is per CPU-second, which other tenants of the cores disturb less).
// usage: bench_ops [--op NAME] [--dtype T] [--m ROWS] [--provider P] [--cold] [--case TEXT]
// [--threads N] [--min-ms MS]
// (--dtype and --m pick matmul cases: weight dtype, rows; --dtype also picks
// the attention's cache dtype; --cold reads the matmul weights and the
// attention's KV cache from memory on every call, as decode does, instead of
// from cache; --case TEXT runs the attention cases whose label holds TEXT,
// e.g. "n_seqs=16 n_q=1 seq_len=256 n_heads=16")
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/threadpool.h"

static int n_threads = 0;
static double min_ms = 300;
static const char *only_op;
static const char *only_dtype; // matmul: weights of this dtype only; attention: cache
static int64_t only_m;         // matmul: shapes of this many rows only
static const char *only_provider;
static const char *only_case; // attention: cases whose label holds this text
// --cold: matmul weights (attention: key and value caches) rotate through
// copies larger than the L3 cache, so every call reads them from memory as a
// decode step does.
static bool cold;
#define COLD_BYTES ((size_t)256 << 20)
static void *cold_copies[64], *cold_copies_v[64]; // src[1], src[2] (attention only)
static int n_cold_copies;

static float frand(void)
{
    return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
}

// A tensor over fresh memory filled with small random values.
static void *make(struct tensor *t, enum dtype dt, int n_dims, const int64_t *ne)
{
    if (!tensor_init(t, dt, NULL, n_dims, ne))
        return NULL;
    size_t n = tensor_n_bytes(t);
    t->data = mem_alloc_aligned(64, n ? n : 64);
    if (!t->data)
        return NULL;
    int64_t count = tensor_n_elements(t);
    for (int64_t i = 0; i < count; i++) {
        float v = frand() * 0.5f;
        if (dt == DTYPE_F32)
            ((float *)t->data)[i] = v;
        else if (dt == DTYPE_F16)
            ((uint16_t *)t->data)[i] = f32_to_fp16(v);
        else if (dt == DTYPE_BF16)
            ((uint16_t *)t->data)[i] = f32_to_bf16(v);
        else if (dt == DTYPE_I32)
            ((int32_t *)t->data)[i] = 0;
    }
    return t->data;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// Times c on a backend where only provider `name` of c's op is enabled.
static void bench_call(struct op_call *c, const char *label, double flops, double bytes)
{
    struct backend *probe = NULL;
    struct err err = {0};
    struct backend_options o;
    backend_options_default(&o);
    o.n_threads = n_threads;
    o.disable = "";
    if (backend_create("cpu", &o, &probe, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return;
    }
    size_t n_all;
    const struct op_provider *const *all = backend_providers(probe, &n_all);
    c->backend = probe; // gates may look at the backend
    for (size_t i = 0; i < n_all; i++) {
        if (all[i]->op != c->op || !all[i]->supports(c) ||
            (only_provider && strcmp(only_provider, all[i]->name)))
            continue;
        // Disable every other provider name of this op.
        char disable[512] = "";
        for (size_t j = 0; j < n_all; j++) {
            if (all[j]->op != c->op || !strcmp(all[j]->name, all[i]->name))
                continue;
            size_t len = strlen(disable);
            snprintf(disable + len, sizeof disable - len, "%s%s", len ? "," : "", all[j]->name);
        }
        o.disable = disable;
        struct backend *be = NULL;
        if (backend_create("cpu", &o, &be, &err)) {
            fprintf(stderr, "bench: %s\n", err.msg);
            continue;
        }
        double times[200];
        int n = 0;
        double start = time_now_s();
        enum vllmc_status rc = backend_run_op(be, c); // warm-up
        double wall0 = time_now_s(), cpu0 = time_process_cpu_s();
        while (!rc && n < 200 && (n < 3 || (time_now_s() - start) * 1e3 < min_ms)) {
            if (n_cold_copies)
                c->src[1]->data = cold_copies[n % n_cold_copies];
            if (n_cold_copies && cold_copies_v[0])
                c->src[2]->data = cold_copies_v[n % n_cold_copies];
            double t0 = time_now_s();
            rc = backend_run_op(be, c);
            times[n++] = time_now_s() - t0;
        }
        double wall = time_now_s() - wall0, cpu = time_process_cpu_s() - cpu0;
        if (rc) {
            fprintf(stderr, "bench: %s: %s\n", all[i]->name, backend_err(be)->msg);
        } else {
            qsort(times, (size_t)n, sizeof times[0], cmp_double);
            double t = times[n / 2];
            // On a shared machine the threads get part of the cores: cpu_share is
            // the CPU time the process got over wall time x threads, and
            // cpu_gflops the rate per CPU-second (x threads), what the op
            // would reach with the cores to itself.
            int nt = o.n_threads ? o.n_threads : threadpool_cpu_count();
            printf("op=%s %s provider=%s threads=%d us=%.1f gflops=%.1f gbps=%.1f cpu_share=%.0f%% "
                   "cpu_gflops=%.1f\n",
                   op_kind_name(c->op), label, all[i]->name, nt, t * 1e6, flops / t * 1e-9,
                   bytes / t * 1e-9, 100 * cpu / (wall * nt), flops * n / cpu * nt * 1e-9);
            fflush(stdout);
        }
        backend_free(be);
    }
    backend_free(probe);
}

static bool want(const char *op)
{
    return !only_op || !strcmp(only_op, op);
}

static void bench_matmul(void)
{
    // Decode (m = 1) and prefill shapes of Qwen3-0.6B- and Llama-8B-sized layers, and
    // batched decode of the stories15M shape.
    static const int64_t shapes[][3] = {
        {1, 1024, 1024},   {1, 3072, 1024},   {1, 4096, 4096},   {1, 151936, 1024},
        {16, 4096, 4096},  {8, 1024, 1024},   {32, 1024, 1024},  {64, 1024, 1024},
        {128, 3072, 1024}, {512, 1024, 1024}, {512, 2048, 1024}, {512, 3072, 1024},
        {512, 1024, 2048}, {512, 1024, 3072},
        // stories15M shape at 16 sequences: lm_head (32,000-token vocabulary), up, down.
        {16, 32000, 288},  {16, 768, 288},    {16, 288, 768},
    };
    static const enum dtype types[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
        for (size_t t = 0; t < 3; t++) {
            if ((n > 100000 && types[t] == DTYPE_F32) ||
                (only_dtype && strcmp(only_dtype, dtype_name(types[t]))) || (only_m && only_m != m))
                continue;
            struct tensor x, w, y;
            if (!make(&x, DTYPE_F32, 2, (int64_t[]){k, m}) ||
                !make(&w, types[t], 2, (int64_t[]){k, n}) ||
                !make(&y, DTYPE_F32, 2, (int64_t[]){n, m}))
                return;
            void *w_data = w.data;
            n_cold_copies = 0;
            for (size_t b = 0; cold && b < COLD_BYTES && n_cold_copies < 64;
                 b += tensor_n_bytes(&w)) {
                if (!(cold_copies[n_cold_copies] = mem_alloc_aligned(64, tensor_n_bytes(&w))))
                    break;
                memcpy(cold_copies[n_cold_copies++], w_data, tensor_n_bytes(&w));
            }
            struct op_call c = {.op = OP_MATMUL, .dst = &y, .src = {&x, &w}};
            char label[128];
            snprintf(label, sizeof label, "dtype=%s m=%lld n=%lld k=%lld", dtype_name(types[t]),
                     (long long)m, (long long)n, (long long)k);
            bench_call(&c, label, 2.0 * (double)m * (double)n * (double)k,
                       (double)tensor_n_bytes(&w));
            for (int b = 0; b < n_cold_copies; b++)
                mem_free(cold_copies[b]);
            n_cold_copies = 0;
            mem_free(x.data);
            mem_free(w_data);
            mem_free(y.data);
        }
    }
}

static void bench_rows(enum op_kind op)
{
    static const int64_t shapes[][2] = {{1, 1024}, {1, 4096}, {512, 1024}, {512, 3072}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t rows = shapes[i][0], dim = shapes[i][1];
        struct tensor a, b, d, r;
        bool norm = op == OP_RMSNORM || op == OP_ADD_RMSNORM;
        if (!make(&a, DTYPE_F32, 2, (int64_t[]){dim, rows}) ||
            !make(&b, DTYPE_F32, norm ? 1 : 2, norm ? (int64_t[]){dim} : (int64_t[]){dim, rows}) ||
            !make(&d, DTYPE_F32, 2, (int64_t[]){dim, rows}) ||
            !make(&r, DTYPE_F32, 2, (int64_t[]){dim, rows}))
            return;
        struct op_call c = {.op = op, .dst = &d, .src = {&a, &b}, .p.eps = 1e-6f};
        if (op == OP_ADD_RMSNORM)
            c.src[2] = &r;
        char label[96];
        snprintf(label, sizeof label, "dtype=f32 n=%lld dim=%lld", (long long)rows, (long long)dim);
        bench_call(&c, label, 3.0 * (double)rows * (double)dim,
                   (double)tensor_n_bytes(&a) * (norm ? 2 : 3));
        mem_free(a.data);
        mem_free(b.data);
        mem_free(d.data);
        mem_free(r.data);
    }
}

static void bench_rope(void)
{
    static const int64_t shapes[][3] = {{1, 16, 128}, {512, 16, 128}};
    for (size_t i = 0; i < 2; i++) {
        int64_t T = shapes[i][0], H = shapes[i][1], D = shapes[i][2];
        struct tensor x, pos, f;
        if (!make(&x, DTYPE_F32, 3, (int64_t[]){D, H, T}) ||
            !make(&pos, DTYPE_I32, 1, (int64_t[]){T}) ||
            !make(&f, DTYPE_F32, 1, (int64_t[]){D / 2}))
            return;
        for (int neox = 0; neox < 2; neox++) {
            struct op_call c = {.op = OP_ROPE,
                                .dst = &x,
                                .src = {&pos, &f},
                                .p = {.rope_dim = (int)D, .rope_neox = neox}};
            char label[96];
            snprintf(label, sizeof label, "dtype=f32 n_tokens=%lld n_heads=%lld head_dim=%lld %s",
                     (long long)T, (long long)H, (long long)D, neox ? "neox" : "pairs");
            bench_call(&c, label, 6.0 * (double)T * (double)H * (double)D / 2,
                       2.0 * (double)tensor_n_bytes(&x));
        }
        mem_free(x.data);
        mem_free(pos.data);
        mem_free(f.data);
    }
}

static void bench_attention(void)
{
    // n_seqs, n_q per seq, seq_len, n_heads, n_kv_heads, head_dim (block size 16)
    static const int64_t cfgs[][6] = {
        {1, 1, 1024, 16, 8, 128},  // Qwen3-0.6B shape, one sequence
        {8, 1, 1024, 16, 8, 128},  // 8 sequences
        {16, 1, 256, 16, 8, 128},  // 16 sequences
        {16, 1, 256, 6, 6, 48},    // stories15M shape, 16 sequences
        {16, 1, 192, 6, 6, 48},    // the mean context of 128 in, 128 out
        {16, 1, 1024, 6, 6, 48},   // long contexts
        {1, 512, 512, 16, 8, 128}, // 0.6B shape prefill
        {16, 128, 128, 6, 6, 48},  // stories15M shape prefill of 16 prompts
    };
    static const enum dtype caches[] = {DTYPE_F16, DTYPE_BF16, DTYPE_F32};
    struct backend *buf_be = NULL; // allocates the --cold copies
    struct backend_options bo;
    struct err err = {0};
    backend_options_default(&bo);
    if (backend_create("cpu", &bo, &buf_be, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return;
    }
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        int64_t S = cfgs[i][0], NQ = cfgs[i][1], L = cfgs[i][2], H = cfgs[i][3];
        int64_t KVH = cfgs[i][4], D = cfgs[i][5], BS = 16, MB = (L + BS - 1) / BS;
        for (size_t ct = 0; ct < 3; ct++) {
            if (only_dtype && strcmp(only_dtype, dtype_name(caches[ct])))
                continue;
            char label[160];
            snprintf(label, sizeof label,
                     "cache=%s n_seqs=%lld n_q=%lld seq_len=%lld n_heads=%lld n_kv_heads=%lld "
                     "head_dim=%lld",
                     dtype_name(caches[ct]), (long long)S, (long long)NQ, (long long)L,
                     (long long)H, (long long)KVH, (long long)D);
            if (only_case && !strstr(label, only_case))
                continue;
            struct tensor q, o, kc, vc, bt, sl, qsl;
            if (!make(&q, DTYPE_F32, 3, (int64_t[]){D, H, S * NQ}) ||
                !make(&o, DTYPE_F32, 3, (int64_t[]){D, H, S * NQ}) ||
                !make(&kc, caches[ct], 4, (int64_t[]){D, KVH, BS, S * MB}) ||
                !make(&vc, caches[ct], 4, (int64_t[]){D, KVH, BS, S * MB}) ||
                !make(&bt, DTYPE_I32, 2, (int64_t[]){MB, S}) ||
                !make(&sl, DTYPE_I32, 1, (int64_t[]){S}) ||
                !make(&qsl, DTYPE_I32, 1, (int64_t[]){S + 1}))
                return;
            for (int64_t s = 0; s < S; s++) {
                for (int64_t b = 0; b < MB; b++)
                    ((int32_t *)bt.data)[s * MB + b] = (int32_t)(s * MB + b);
                ((int32_t *)sl.data)[s] = (int32_t)L;
                ((int32_t *)qsl.data)[s + 1] = (int32_t)((s + 1) * NQ);
            }
            struct op_call c = {.op = OP_ATTENTION,
                                .dst = &o,
                                .src = {&q, &kc, &vc, &bt, &sl, &qsl},
                                .p.scale = 1.0f / sqrtf((float)D)};
            void *k_data = kc.data, *v_data = vc.data;
            size_t kv_bytes = tensor_n_bytes(&kc);
            // The copies come from the CPU backend's buffers, on huge pages
            // as the engine's KV cache is: on 4 KiB pages a cold cache
            // would also time TLB misses the engine does not have.
            n_cold_copies = 0;
            for (size_t b = 0; cold && b < COLD_BYTES && n_cold_copies < 64; b += 2 * kv_bytes) {
                void *kd = NULL, *vd = NULL;
                if (backend_buffer_alloc(buf_be, kv_bytes, &kd) ||
                    backend_buffer_alloc(buf_be, kv_bytes, &vd)) {
                    if (kd)
                        backend_buffer_free(buf_be, kd);
                    break; // fewer copies: the calls read partly from cache
                }
                cold_copies[n_cold_copies] = kd;
                cold_copies_v[n_cold_copies] = vd;
                memcpy(cold_copies[n_cold_copies], k_data, kv_bytes);
                memcpy(cold_copies_v[n_cold_copies++], v_data, kv_bytes);
            }
            double pairs = NQ == 1 ? (double)L : (double)L * (double)(L + 1) / 2;
            bench_call(&c, label, 4.0 * (double)S * pairs * (double)H * (double)D,
                       2.0 * (double)S * (double)L * (double)KVH * (double)D *
                           (double)(caches[ct] == DTYPE_F32 ? 4 : 2));
            for (int b = 0; b < n_cold_copies; b++) {
                backend_buffer_free(buf_be, cold_copies[b]);
                backend_buffer_free(buf_be, cold_copies_v[b]);
                cold_copies_v[b] = NULL;
            }
            n_cold_copies = 0;
            mem_free(q.data);
            mem_free(o.data);
            mem_free(k_data);
            mem_free(v_data);
            mem_free(bt.data);
            mem_free(sl.data);
            mem_free(qsl.data);
        }
    }
    backend_free(buf_be);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--op") && i + 1 < argc) {
            only_op = argv[++i];
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            n_threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            only_dtype = argv[++i];
        } else if (!strcmp(argv[i], "--provider") && i + 1 < argc) {
            only_provider = argv[++i];
        } else if (!strcmp(argv[i], "--cold")) {
            cold = true;
        } else if (!strcmp(argv[i], "--m") && i + 1 < argc) {
            only_m = atoll(argv[++i]);
        } else if (!strcmp(argv[i], "--case") && i + 1 < argc) {
            only_case = argv[++i];
        } else if (!strcmp(argv[i], "--min-ms") && i + 1 < argc) {
            min_ms = atof(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_ops [--op NAME] [--dtype T] [--m ROWS] [--provider P] "
                            "[--cold] [--case TEXT] [--threads N] [--min-ms MS]\n");
            return 2;
        }
    }
    srand(1);
    if (want("matmul"))
        bench_matmul();
    if (want("rmsnorm"))
        bench_rows(OP_RMSNORM);
    if (want("add_rmsnorm"))
        bench_rows(OP_ADD_RMSNORM);
    if (want("silu_mul"))
        bench_rows(OP_SILU_MUL);
    if (want("rope"))
        bench_rope();
    if (want("attention"))
        bench_attention();
    return 0;
}
