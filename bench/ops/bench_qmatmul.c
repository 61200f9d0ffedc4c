// Quantized matmul speed at the Qwen3-0.6B shapes (hidden 1024, 16 q heads /
// 8 kv heads of 128, ffn 3072, 28 layers, 32000-token vocabulary, untied
// output): every weight matrix of the model in Q4_K_M, Q4_0 or Q8_0 on random
// blocks, run through the selected matmul provider at m = 1 (decode, GEMV)
// and m = 512 (prefill, GEMM). Prints the machine's read bandwidth measured
// in the same run, one line per op, and the tok/s the matmuls alone allow.
//
//   bench_qmatmul [--threads N] [--types q4_k_m,q4_0,q8_0] [--reps N] [--cpu-time] [--m M] [--hot]
//                 [--packed]
//
// --cpu-time times with the process's CPU time instead of the wall clock: on
// a machine shared with other work it shows what the kernels cost when they
// run, not how long they waited for a core (with one thread, the wall time an
// idle core would take).
//
// --hot runs every layer's matmuls on the first layer's matrices, which then
// come from the caches (a Q8_0 layer is 18 MB, in a 32 MiB L3): what the
// kernels give when memory is not the limit.
//
// --m M runs only m = M tokens (1 to 512; 16 is a batched decode step of 16
// sequences).
//
// Each matrix gets the backend's own layout where it has one, as a loaded
// model's do (backend_prepare_weight: the CPU's 16-row groups); --packed reads
// the packed rows instead.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend_impl.h"
#include "backend/cpu/quant/blocks.h"
#include "core/alloc.h"
#include "core/clock.h"

#define N_LAYERS 28
#define HIDDEN 1024
#define Q_DIM 2048
#define KV_DIM 1024
#define FFN 3072
#define VOCAB 32000
#define PREFILL 512

enum { W_Q, W_K, W_V, W_O, W_GATE, W_UP, W_DOWN, W_COUNT };
static const char *const w_names[W_COUNT] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                             "ffn_gate", "ffn_up", "ffn_down"};
static const int64_t w_rows[W_COUNT] = {Q_DIM, KV_DIM, KV_DIM, HIDDEN, FFN, FFN, HIDDEN};
static const int64_t w_cols[W_COUNT] = {HIDDEN, HIDDEN, HIDDEN, Q_DIM, HIDDEN, HIDDEN, FFN};

struct weight {
    struct tensor t;
    void *data; // owned
    void *alt;  // owned: t's alt (backend_prepare_weight), or NULL
};

static bool use_cpu_time;
static int only_m; // 0 = both decode and prefill
static bool hot;   // every layer runs on layer 0's matrices
static bool packed; // no backend_prepare_weight copies

static int64_t now_us(void)
{
    if (!use_cpu_time)
        return time_now_us();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

// Random bytes with every half-float scale field set to a small positive
// value, so the blocks decode to finite weights like real ones.
static void fill_blocks(enum dtype t, uint8_t *p, size_t n_bytes)
{
    for (size_t i = 0; i + 8 <= n_bytes; i += 8) {
        uint64_t v = next_u64();
        memcpy(p + i, &v, 8);
    }
    const struct dtype_info *info = dtype_info(t);
    const uint16_t d = f32_to_fp16(0.001f);
    for (size_t off = 0; off + info->type_size <= n_bytes; off += info->type_size) {
        uint8_t *b = p + off;
        switch (t) {
        case DTYPE_Q4_0: case DTYPE_Q8_0: memcpy(b, &d, 2); break;
        case DTYPE_Q4_K: memcpy(b, &d, 2); memcpy(b + 2, &d, 2); break;
        case DTYPE_Q6_K: memcpy(b + 208, &d, 2); break;
        default: break;
        }
    }
}

static bool weight_init(struct backend *be, struct weight *w, enum dtype t, int64_t rows,
                        int64_t cols)
{
    size_t n = dtype_row_bytes(t, cols) * (size_t)rows;
    w->alt = NULL;
    w->data = mem_alloc_aligned(64, n);
    if (!w->data)
        return false;
    fill_blocks(t, w->data, n);
    tensor_init_2d(&w->t, t, w->data, cols, rows);
    if (!packed && backend_prepare_weight(be, &w->t, &w->alt))
        return false;
    w->t.alt = w->alt;
    return true;
}

// llama.cpp's Q4_K_M rule for attn_v and ffn_down: Q6_K in the first and
// last eighth of the layers and every third layer between, Q4_K elsewhere.
static bool more_bits(int layer)
{
    int n = N_LAYERS;
    return layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2;
}

static enum dtype mix_type(const char *mix, int which, int layer)
{
    if (!strcmp(mix, "q4_0"))
        return DTYPE_Q4_0;
    if (!strcmp(mix, "q8_0"))
        return DTYPE_Q8_0;
    if ((which == W_V || which == W_DOWN) && more_bits(layer))
        return DTYPE_Q6_K;
    return DTYPE_Q4_K;
}

// Sequential read bandwidth over a buffer far larger than the caches, split
// over the pool's threads: bytes / seconds of the fastest of reps passes.
struct bw_ctx {
    const uint64_t *buf;
    size_t n_words;
    int n_tasks;
    uint64_t sums[64];
};

static void bw_task(void *p, int task, int thread)
{
    (void)thread;
    struct bw_ctx *ctx = p;
    size_t per = ctx->n_words / (size_t)ctx->n_tasks;
    const uint64_t *b = ctx->buf + per * (size_t)task;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    for (size_t i = 0; i + 8 <= per; i += 8) {
        s0 += b[i], s1 += b[i + 1], s2 += b[i + 2], s3 += b[i + 3];
        s4 += b[i + 4], s5 += b[i + 5], s6 += b[i + 6], s7 += b[i + 7];
    }
    ctx->sums[task % 64] = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
}

static double read_bandwidth(struct threadpool *pool, int reps)
{
    size_t n_bytes = (size_t)512 << 20;
    struct bw_ctx ctx = {.n_words = n_bytes / 8, .n_tasks = 2 * threadpool_n_threads(pool)};
    uint64_t *buf = mem_alloc_aligned(64, n_bytes);
    if (!buf)
        return 0.0;
    memset(buf, 1, n_bytes);
    ctx.buf = buf;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        int64_t t0 = now_us();
        threadpool_run(pool, bw_task, &ctx, ctx.n_tasks);
        double s = (double)(now_us() - t0) * 1e-6;
        best = s < best ? s : best;
    }
    mem_free(buf);
    return (double)n_bytes / best / 1e9;
}

struct op_stats {
    double us[W_COUNT + 1]; // summed over layers; [W_COUNT] = output
    double bytes[W_COUNT + 1];
};

// One matmul of x [m, k] with w; returns microseconds.
static double time_matmul(struct backend *be, const struct tensor *w, float *x, float *y, int64_t m,
                          const char **provider)
{
    struct tensor tx, ty;
    tensor_init_2d(&tx, DTYPE_F32, x, w->ne[0], m);
    tensor_init_2d(&ty, DTYPE_F32, y, w->ne[1], m);
    struct op_call c = {.op = OP_MATMUL, .dst = &ty, .src = {&tx, (struct tensor *)w}, .backend = be};
    const struct op_provider *p = backend_select_provider(be, &c);
    *provider = p ? p->name : "none";
    int64_t t0 = now_us();
    if (backend_run_op(be, &c)) {
        fprintf(stderr, "matmul failed: %s\n", backend_err(be)->msg);
        exit(1);
    }
    return (double)(now_us() - t0);
}

static void run_mix(struct backend *be, const char *mix, int reps)
{
    struct weight layers[N_LAYERS][W_COUNT], output;
    for (int l = 0; l < N_LAYERS; l++) {
        for (int i = 0; i < W_COUNT; i++) {
            if (!weight_init(be, &layers[l][i], mix_type(mix, i, l), w_rows[i], w_cols[i])) {
                fprintf(stderr, "out of memory\n");
                exit(1);
            }
        }
    }
    enum dtype out_t = !strcmp(mix, "q8_0") ? DTYPE_Q8_0 : DTYPE_Q6_K;
    if (!weight_init(be, &output, out_t, VOCAB, HIDDEN))
        exit(1);

    float *x = mem_alloc_aligned(64, (size_t)PREFILL * FFN * sizeof(float));
    float *y = mem_alloc_aligned(64, (size_t)PREFILL * VOCAB * sizeof(float));
    for (int64_t i = 0; i < (int64_t)PREFILL * FFN; i++)
        x[i] = (float)(next_u64() % 2001) / 1000.0f - 1.0f;
    // Written once before the timing: a first write to a fresh page faults
    // it in, which added 4-11 ms to the first matmul timed (m = 16 runs one
    // repeat).
    memset(y, 0, (size_t)PREFILL * VOCAB * sizeof(float));

    // Decode and prefill, or with --m the one token count asked for (e.g. 16,
    // a batched decode step).
    int64_t ms[2] = {1, PREFILL};
    int n_ms = 2;
    if (only_m > 0 && only_m <= PREFILL) {
        ms[0] = only_m;
        n_ms = 1;
    }
    for (int mi = 0; mi < n_ms; mi++) {
        int64_t m = ms[mi];
        int n_reps = m == 1 ? reps : (reps + 2) / 3;
        struct op_stats best = {{0}, {0}};
        double best_total = 1e30;
        const char *provider = "";
        for (int r = 0; r < n_reps; r++) {
            struct op_stats st = {{0}, {0}};
            double total = 0;
            for (int l = 0; l < N_LAYERS; l++) {
                for (int i = 0; i < W_COUNT; i++) {
                    const struct tensor *w = &layers[hot ? 0 : l][i].t;
                    double us = time_matmul(be, w, x, y, m, &provider);
                    st.us[i] += us;
                    st.bytes[i] += (double)tensor_n_bytes(w);
                    total += us;
                }
            }
            // The output projection runs on the last token only in decode and
            // prefill alike.
            double us = time_matmul(be, &output.t, x, y, 1, &provider);
            st.us[W_COUNT] = us;
            st.bytes[W_COUNT] = (double)tensor_n_bytes(&output.t);
            total += us;
            if (total < best_total) {
                best_total = total;
                best = st;
            }
        }
        for (int i = 0; i <= W_COUNT; i++) {
            const char *name = i < W_COUNT ? w_names[i] : "output";
            double flops = 2.0 * (double)(i < W_COUNT ? m : 1) *
                           (double)(i < W_COUNT ? w_rows[i] * w_cols[i] * N_LAYERS
                                                : (int64_t)VOCAB * HIDDEN);
            printf("op=matmul mix=%s w=%s m=%lld us=%.0f gbps=%.1f gflops=%.1f\n", mix, name,
                   (long long)(i < W_COUNT ? m : 1), best.us[i], best.bytes[i] / best.us[i] / 1e3,
                   flops / best.us[i] / 1e3);
        }
        // The bytes the timed pass read: with --hot, 28 times the first
        // layer's, which differ from the mix's average for Q4_K_M (its first
        // layer has Q6_K matrices).
        double read_bytes = 0;
        for (int i = 0; i <= W_COUNT; i++)
            read_bytes += best.bytes[i];
        double tok_s = (double)m / (best_total * 1e-6);
        printf("mix=%s m=%lld provider=%s weights_mb=%.1f matmul_ms=%.2f gbps=%.1f tok_s=%.1f\n",
               mix, (long long)m, provider, read_bytes / 1e6, best_total / 1e3,
               read_bytes / best_total / 1e3, tok_s);
        fflush(stdout);
    }
    mem_free(x);
    mem_free(y);
    for (int l = 0; l < N_LAYERS; l++) {
        for (int i = 0; i < W_COUNT; i++) {
            mem_free(layers[l][i].data);
            mem_free(layers[l][i].alt);
        }
    }
    mem_free(output.data);
    mem_free(output.alt);
}

int main(int argc, char **argv)
{
    int n_threads = 2, reps = 5;
    const char *types = "q4_k_m,q4_0,q8_0";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--types") && i + 1 < argc)
            types = argv[++i];
        else if (!strcmp(argv[i], "--m") && i + 1 < argc)
            only_m = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cpu-time"))
            use_cpu_time = true;
        else if (!strcmp(argv[i], "--hot"))
            hot = true;
        else if (!strcmp(argv[i], "--packed"))
            packed = true;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: %s [--threads N] [--types q4_k_m,q4_0,q8_0] [--reps N] "
                    "[--cpu-time] [--m M] [--hot] [--packed]\n",
                    argv[0]);
            return 2;
        }
    }
    struct backend_options o;
    backend_options_default(&o);
    o.n_threads = n_threads;
    struct backend *be = NULL;
    struct err err = {0};
    if (backend_create("cpu", &o, &be, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    double bw = read_bandwidth(be->pool, 5);
    printf("machine read_gbps=%.1f threads=%d clock=%s\n", bw, n_threads,
           use_cpu_time ? "process-cpu" : "wall");
    char list[128];
    snprintf(list, sizeof list, "%s", types);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ","))
        run_mix(be, tok, reps);
    printf("machine read_gbps=%.1f (after)\n", read_bandwidth(be->pool, 5));
    backend_free(be);
    return 0;
}
