// vllmc bench-ops: times op providers of a backend on model-sized shapes and
// prints one greppable line per case (op, shape, provider, us, GB/s). Sections:
// gemv (decode matmuls, bandwidth), crossover (GEMV against cuBLASLt by token
// count), decode_gemm (the tensor-core decode GEMM against cuBLASLt),
// attention (paged decode and prefill), and decode: the per-layer op sequence
// of a Qwen3-shaped model (random weights, every layer its own buffers) run as
// one decode step, giving step time and tokens per second of the kernels
// alone.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "tools/commands.h"

#define PATTERN_BYTES ((size_t)64 << 20)

struct bench {
    struct backend *be;
    int iters;
    void *pattern; // owned host buffer of random bytes (valid floats of every type)
    size_t n_alloc_bytes;
    const char *filter; // gemv/crossover cases: only "SHAPE.WTYPE" names containing it, or NULL
};

// ---- buffers ----

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint32_t rnd_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

// Host bytes that read as small finite values in f32, f16 and bf16 alike:
// every 16-bit half is the bf16 of a value in [-1, 1) (as f16 bits that is a
// value inside (-2, 2)), and each f32 word's high half is such a bf16 too.
static bool pattern_init(struct bench *b)
{
    b->pattern = mem_alloc(PATTERN_BYTES);
    if (!b->pattern)
        return false;
    uint16_t *h = b->pattern;
    for (size_t i = 0; i < PATTERN_BYTES / 2; i++) {
        float v = (float)(rnd_u32() & 0xffff) / 32768.0f - 1.0f;
        h[i] = f32_to_bf16(i % 2 ? v * 0.05f : v);
    }
    return true;
}

// A backend buffer of n_bytes filled from the pattern.
static enum vllmc_status buf_new(struct bench *b, size_t n_bytes, void **out)
{
    enum vllmc_status rc = backend_buffer_alloc(b->be, n_bytes, out);
    for (size_t off = 0; !rc && off < n_bytes; off += PATTERN_BYTES) {
        size_t n = n_bytes - off < PATTERN_BYTES ? n_bytes - off : PATTERN_BYTES;
        rc = backend_upload(b->be, (char *)*out + off, b->pattern, n);
    }
    if (!rc)
        b->n_alloc_bytes += n_bytes;
    return rc;
}

static void tensor_on(struct tensor *t, struct bench *b, enum dtype dt, int n_dims,
                      const int64_t *ne, void *data)
{
    VLLMC_ASSERT(tensor_init(t, dt, data, n_dims, ne));
    t->location = backend_location(b->be);
}

// A tensor with a fresh buffer (pattern-filled).
static enum vllmc_status tensor_new(struct bench *b, struct tensor *t, enum dtype dt, int n_dims,
                                    const int64_t *ne)
{
    tensor_on(t, b, dt, n_dims, ne, NULL);
    return buf_new(b, tensor_n_bytes(t), &t->data);
}

// A view of base: n_dims dims ne with byte strides nb, at byte offset off.
static struct tensor tensor_view(const struct tensor *base, int n_dims, const int64_t *ne,
                                 const size_t *nb, size_t off)
{
    struct tensor v = *base;
    v.n_dims = n_dims;
    for (int i = 0; i < TENSOR_MAX_DIMS; i++) {
        v.ne[i] = i < n_dims ? ne[i] : 1;
        v.nb[i] = i < n_dims ? nb[i] : nb[n_dims - 1] * (size_t)ne[n_dims - 1];
    }
    v.data = (char *)base->data + off;
    return v;
}

// ---- timing ----

static const struct op_provider *provider_named(struct backend *be, enum op_kind op,
                                                const char *name)
{
    size_t n;
    const struct op_provider *const *all = backend_providers(be, &n);
    for (size_t i = 0; i < n; i++)
        if (all[i]->op == op && !strcmp(all[i]->name, name))
            return all[i];
    return NULL;
}

// Median-free but warm: one untimed call, then iters calls between two syncs.
// Returns microseconds per call, or -1 on failure (message printed).
static double time_call(struct bench *b, struct op_call *c, const struct op_provider *p, int iters)
{
    c->backend = b->be;
    enum vllmc_status rc = p ? p->run(c) : backend_run_op(b->be, c);
    if (!rc)
        rc = backend_sync(b->be);
    if (rc) {
        fprintf(stderr, "bench-ops: %s: %s\n", op_kind_name(c->op), backend_err(b->be)->msg);
        return -1.0;
    }
    int64_t t0 = time_now_us();
    for (int i = 0; i < iters && !rc; i++)
        rc = p ? p->run(c) : backend_run_op(b->be, c);
    if (!rc)
        rc = backend_sync(b->be);
    int64_t t1 = time_now_us();
    if (rc) {
        fprintf(stderr, "bench-ops: %s: %s\n", op_kind_name(c->op), backend_err(b->be)->msg);
        return -1.0;
    }
    return (double)(t1 - t0) / iters;
}

// ---- sections ----

struct mm_shape {
    const char *name;
    int64_t n, k;
};

static const struct mm_shape qwen3_8b_mm[] = {
    {"8b.qkv", 6144, 4096},  {"8b.o", 4096, 4096},         {"8b.gate_up", 24576, 4096},
    {"8b.down", 4096, 12288}, {"8b.lm_head", 151936, 4096},
};
static const struct mm_shape qwen3_06b_mm[] = {
    {"0.6b.qkv", 4096, 1024},     {"0.6b.o", 1024, 2048},     {"0.6b.gate_up", 6144, 1024},
    {"0.6b.down", 1024, 3072},    {"0.6b.lm_head", 151936, 1024},
};

static int bench_matmul_case(struct bench *b, const struct mm_shape *s, int64_t m, enum dtype wt,
                             const char *provider, double *us_out)
{
    struct tensor x, w, y;
    int64_t ne_x[2] = {s->k, m}, ne_w[2] = {s->k, s->n}, ne_y[2] = {s->n, m};
    *us_out = -1.0;
    char case_name[96];
    snprintf(case_name, sizeof case_name, "%s.%s", s->name, dtype_name(wt));
    if (b->filter && !strstr(case_name, b->filter))
        return 0;
    if (tensor_new(b, &x, DTYPE_F32, 2, ne_x) || tensor_new(b, &w, wt, 2, ne_w) ||
        tensor_new(b, &y, DTYPE_F32, 2, ne_y)) {
        fprintf(stderr, "bench-ops: %s\n", backend_err(b->be)->msg);
        return 1;
    }
    struct op_call c = {.op = OP_MATMUL, .dst = &y, .src = {&x, &w}};
    const struct op_provider *p = provider ? provider_named(b->be, OP_MATMUL, provider) : NULL;
    if (provider && !p) {
        printf("op=matmul shape=%s provider=%s absent\n", s->name, provider);
    } else {
        if (!p)
            p = backend_select_provider(b->be, &c);
        double us = p ? time_call(b, &c, p, b->iters) : -1.0;
        double gb = (double)tensor_n_bytes(&w) / 1e9;
        double flop = 2.0 * (double)m * (double)s->n * (double)s->k;
        if (us > 0)
            printf("op=matmul shape=%s m=%lld n=%lld k=%lld wtype=%s provider=%s us=%.1f "
                   "gbps=%.0f tflops=%.1f\n",
                   s->name, (long long)m, (long long)s->n, (long long)s->k, dtype_name(wt),
                   p->name, us, gb / (us * 1e-6), flop / (us * 1e-6) / 1e12);
        *us_out = us;
    }
    backend_buffer_free(b->be, x.data);
    backend_buffer_free(b->be, w.data);
    backend_buffer_free(b->be, y.data);
    return *us_out > 0 ? 0 : 1;
}

static int section_gemv(struct bench *b)
{
    int fails = 0;
    double us;
    for (size_t i = 0; i < 5; i++)
        fails += bench_matmul_case(b, &qwen3_8b_mm[i], 1, DTYPE_BF16, NULL, &us);
    for (size_t i = 0; i < 5; i++)
        fails += bench_matmul_case(b, &qwen3_06b_mm[i], 1, DTYPE_BF16, NULL, &us);
    fails += bench_matmul_case(b, &qwen3_8b_mm[2], 1, DTYPE_F16, NULL, &us);
    fails += bench_matmul_case(b, &qwen3_8b_mm[2], 1, DTYPE_F32, NULL, &us);
    fails += bench_matmul_case(b, &qwen3_8b_mm[2], 8, DTYPE_BF16, NULL, &us);
    // Packed GGUF weights: bandwidth of the dequantizing GEMV over the packed
    // bytes, on the 8B layer's four matmuls for the types of Q8_0 and Q4_K_M
    // files (Q4_K with Q6_K, the type of a Q4_K_M file's lm_head), on gate_up
    // and down for the others. INT4G: AWQ/GPTQ 4-bit weights as the loader
    // repacks them.
    static const enum dtype qtypes[] = {DTYPE_Q8_0, DTYPE_Q4_K, DTYPE_Q6_K, DTYPE_Q4_0,
                                        DTYPE_Q5_K, DTYPE_INT4G};
    for (size_t t = 0; t < sizeof qtypes / sizeof qtypes[0]; t++) {
        bool all = t < 3;
        for (size_t i = all ? 0 : 2; i < 4; i++)
            fails += bench_matmul_case(b, &qwen3_8b_mm[i], 1, qtypes[t], NULL, &us);
        if (qtypes[t] == DTYPE_Q6_K)
            fails += bench_matmul_case(b, &qwen3_8b_mm[4], 1, qtypes[t], NULL, &us);
    }
    // Batched decode: 4 and 8 tokens through the same kernel.
    fails += bench_matmul_case(b, &qwen3_8b_mm[2], 4, DTYPE_Q4_K, NULL, &us);
    fails += bench_matmul_case(b, &qwen3_8b_mm[2], 8, DTYPE_Q4_K, NULL, &us);
    return fails;
}

// GEMV against cuBLASLt for m = 1..16 on three shapes; prints the winner per m.
static int section_crossover(struct bench *b)
{
    static const int64_t ms[] = {1, 2, 4, 6, 8, 10, 12, 16};
    const struct mm_shape *shapes[] = {&qwen3_8b_mm[0], &qwen3_8b_mm[3], &qwen3_06b_mm[2]};
    int fails = 0;
    for (size_t s = 0; s < 3; s++) {
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
            double us_g = -1, us_l = -1;
            fails += bench_matmul_case(b, shapes[s], ms[i], DTYPE_BF16, "cuda-gemv", &us_g);
            fails += bench_matmul_case(b, shapes[s], ms[i], DTYPE_BF16, "cublaslt", &us_l);
            if (us_g > 0 && us_l > 0)
                printf("crossover shape=%s m=%lld gemv_us=%.1f cublaslt_us=%.1f winner=%s\n",
                       shapes[s]->name, (long long)ms[i], us_g, us_l,
                       us_g <= us_l ? "cuda-gemv" : "cublaslt");
        }
    }
    return fails;
}

// The tensor-core decode GEMM against cuBLASLt (its stacked hi + lo GEMM and
// the sum of the halves) for batches of 16-128 tokens on both shapes' layer
// matrices and lm_heads. Back to back, a 0.6B matrix stays in L2 between calls.
static int section_decode_gemm(struct bench *b)
{
    static const int64_t ms[] = {16, 32, 64, 128};
    int fails = 0;
    for (int model = 0; model < 2; model++)
        for (size_t s = 0; s < 5; s++) {
            const struct mm_shape *sh = model ? &qwen3_8b_mm[s] : &qwen3_06b_mm[s];
            for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
                double us_m = -1, us_l = -1;
                fails += bench_matmul_case(b, sh, ms[i], DTYPE_BF16, "cuda-mma", &us_m);
                fails += bench_matmul_case(b, sh, ms[i], DTYPE_BF16, "cublaslt", &us_l);
                if (us_m > 0 && us_l > 0)
                    printf("decode_gemm shape=%s m=%lld mma_us=%.1f cublaslt_us=%.1f "
                           "ratio=%.2f\n",
                           sh->name, (long long)ms[i], us_m, us_l, us_l / us_m);
            }
        }
    return fails;
}

// Paged decode attention: n_seqs sequences of ctx keys, one query each.
static int bench_attention_case(struct bench *b, int n_seqs, int ctx, int n_heads, int n_kv,
                                int hd, enum dtype ct)
{
    const int bs = 16, max_blocks = (ctx + bs - 1) / bs;
    const int n_blocks = n_seqs * max_blocks;
    struct tensor q, o, kc, vc, bt, sl, qsl;
    int64_t ne_q[3] = {hd, n_heads, n_seqs}, ne_c[4] = {hd, n_kv, bs, n_blocks};
    int64_t ne_bt[2] = {max_blocks, n_seqs}, ne_sl[1] = {n_seqs}, ne_qsl[1] = {n_seqs + 1};
    int32_t *host = mem_alloc((size_t)(n_blocks + 2 * n_seqs + 1) * sizeof(int32_t));
    if (!host)
        return 1;
    int fails = 0;
    if (tensor_new(b, &q, DTYPE_F32, 3, ne_q) || tensor_new(b, &o, DTYPE_F32, 3, ne_q) ||
        tensor_new(b, &kc, ct, 4, ne_c) || tensor_new(b, &vc, ct, 4, ne_c) ||
        tensor_new(b, &bt, DTYPE_I32, 2, ne_bt) || tensor_new(b, &sl, DTYPE_I32, 1, ne_sl) ||
        tensor_new(b, &qsl, DTYPE_I32, 1, ne_qsl)) {
        fprintf(stderr, "bench-ops: %s\n", backend_err(b->be)->msg);
        mem_free(host);
        return 1;
    }
    for (int i = 0; i < n_blocks; i++)
        host[i] = (int32_t)((i * 7 + 1) % n_blocks);
    backend_upload(b->be, bt.data, host, (size_t)n_blocks * sizeof(int32_t));
    for (int s = 0; s < n_seqs; s++)
        host[s] = ctx;
    backend_upload(b->be, sl.data, host, (size_t)n_seqs * sizeof(int32_t));
    for (int s = 0; s <= n_seqs; s++)
        host[s] = s;
    backend_upload(b->be, qsl.data, host, (size_t)(n_seqs + 1) * sizeof(int32_t));
    struct op_call c = {.op = OP_ATTENTION, .dst = &o, .src = {&q, &kc, &vc, &bt, &sl, &qsl}};
    c.p.scale = 1.0f / sqrtf((float)hd);
    c.p.max_seq_len = ctx;
    c.p.max_q_len = 1;
    const struct op_provider *p = backend_select_provider(b->be, &c);
    double us = p ? time_call(b, &c, p, b->iters) : -1.0;
    double bytes = 2.0 * n_seqs * (double)ctx * n_kv * hd * (double)dtype_info(ct)->type_size;
    if (us > 0)
        printf("op=attention decode seqs=%d ctx=%d heads=%d/%d head_dim=%d cache=%s provider=%s "
               "us=%.1f gbps=%.0f\n",
               n_seqs, ctx, n_heads, n_kv, hd, dtype_name(ct), p->name, us,
               bytes / 1e9 / (us * 1e-6));
    else
        fails++;
    struct tensor *all[] = {&q, &o, &kc, &vc, &bt, &sl, &qsl};
    for (size_t i = 0; i < 7; i++)
        backend_buffer_free(b->be, all[i]->data);
    mem_free(host);
    return fails;
}

// Paged prefill attention: n_seqs sequences of n_q new tokens each at the end
// of ctx keys (ctx > n_q: a chunk after a cached prefix), on the named
// provider so the tensor-core kernel and the CUDA-core one print side by side.
// tflops counts the causal half only: 4 * head_dim * n_heads per visible key.
static int bench_attention_prefill_case(struct bench *b, const char *label, int n_seqs, int n_q,
                                        int ctx, int n_heads, int n_kv, int hd, enum dtype ct,
                                        const char *provider)
{
    const int bs = 16, max_blocks = (ctx + bs - 1) / bs;
    const int n_blocks = n_seqs * max_blocks, n_tokens = n_seqs * n_q;
    struct tensor q, o, kc, vc, bt, sl, qsl;
    int64_t ne_q[3] = {hd, n_heads, n_tokens}, ne_c[4] = {hd, n_kv, bs, n_blocks};
    int64_t ne_bt[2] = {max_blocks, n_seqs}, ne_sl[1] = {n_seqs}, ne_qsl[1] = {n_seqs + 1};
    const struct op_provider *p = provider_named(b->be, OP_ATTENTION, provider);
    if (!p) {
        printf("op=attention prefill shape=%s provider=%s absent\n", label, provider);
        return 0;
    }
    int32_t *host = mem_alloc((size_t)(n_blocks + 2 * n_seqs + 1) * sizeof(int32_t));
    if (!host)
        return 1;
    int fails = 0;
    if (tensor_new(b, &q, DTYPE_F32, 3, ne_q) || tensor_new(b, &o, DTYPE_F32, 3, ne_q) ||
        tensor_new(b, &kc, ct, 4, ne_c) || tensor_new(b, &vc, ct, 4, ne_c) ||
        tensor_new(b, &bt, DTYPE_I32, 2, ne_bt) || tensor_new(b, &sl, DTYPE_I32, 1, ne_sl) ||
        tensor_new(b, &qsl, DTYPE_I32, 1, ne_qsl)) {
        fprintf(stderr, "bench-ops: %s\n", backend_err(b->be)->msg);
        mem_free(host);
        return 1;
    }
    for (int i = 0; i < n_blocks; i++)
        host[i] = (int32_t)((i * 7 + 1) % n_blocks);
    backend_upload(b->be, bt.data, host, (size_t)n_blocks * sizeof(int32_t));
    for (int s = 0; s < n_seqs; s++)
        host[s] = ctx;
    backend_upload(b->be, sl.data, host, (size_t)n_seqs * sizeof(int32_t));
    for (int s = 0; s <= n_seqs; s++)
        host[s] = s * n_q;
    backend_upload(b->be, qsl.data, host, (size_t)(n_seqs + 1) * sizeof(int32_t));
    struct op_call c = {.op = OP_ATTENTION, .dst = &o, .src = {&q, &kc, &vc, &bt, &sl, &qsl}};
    c.p.scale = 1.0f / sqrtf((float)hd);
    c.p.max_seq_len = ctx;
    c.p.max_q_len = n_q;
    c.backend = b->be;
    if (!p->supports(&c)) {
        printf("op=attention prefill shape=%s provider=%s declined\n", label, provider);
    } else {
        double us = time_call(b, &c, p, b->iters);
        // Visible keys summed over the queries: ctx - n_q + 1 .. ctx.
        double keys = (double)n_seqs * n_q * (2.0 * ctx - n_q + 1) / 2.0;
        double flop = 4.0 * hd * n_heads * keys;
        if (us > 0)
            printf("op=attention prefill shape=%s seqs=%d q=%d ctx=%d heads=%d/%d head_dim=%d "
                   "cache=%s provider=%s us=%.1f tflops=%.1f\n",
                   label, n_seqs, n_q, ctx, n_heads, n_kv, hd, dtype_name(ct), p->name, us,
                   flop / (us * 1e-6) / 1e12);
        else
            fails++;
    }
    struct tensor *all[] = {&q, &o, &kc, &vc, &bt, &sl, &qsl};
    for (size_t i = 0; i < 7; i++)
        backend_buffer_free(b->be, all[i]->data);
    mem_free(host);
    return fails;
}

static int section_attention(struct bench *b)
{
    int fails = 0;
    fails += bench_attention_case(b, 1, 512, 32, 8, 128, DTYPE_BF16);
    fails += bench_attention_case(b, 1, 4096, 32, 8, 128, DTYPE_BF16);
    fails += bench_attention_case(b, 8, 4096, 32, 8, 128, DTYPE_BF16);
    fails += bench_attention_case(b, 64, 640, 32, 8, 128, DTYPE_BF16);
    // 64 sequences of 512 + 64 tokens: the 0.6B (16/8 heads) and 8B (32/8)
    // shapes' aggregate decode, for each cache type.
    fails += bench_attention_case(b, 64, 576, 16, 8, 128, DTYPE_F16);
    fails += bench_attention_case(b, 64, 576, 32, 8, 128, DTYPE_F16);
    fails += bench_attention_case(b, 64, 576, 32, 8, 128, DTYPE_BF16);
    fails += bench_attention_case(b, 64, 576, 32, 8, 128, DTYPE_F32);
    fails += bench_attention_case(b, 8, 4096, 16, 8, 128, DTYPE_BF16);
    // Prefill: Qwen3 0.6B (16/8 heads) and 8B (32/8) at 512 tokens, a 512-token
    // chunk after 1536 cached ones, and four sequences; each on both kernels.
    // The CPU's: Qwen3 0.6B at 512 tokens on the default f32 cache.
    fails += bench_attention_prefill_case(b, "0.6b.pp512.f32cache", 1, 512, 512, 16, 8, 128,
                                          DTYPE_F32, "cpu-avx512");
    static const char *const prefill_providers[] = {"cuda-attn-prefill-tc",
                                                    "cuda-attn-prefill-tc-ldsm", "cuda-paged"};
    for (size_t i = 0; i < 3; i++) {
        const char *pv = prefill_providers[i];
        fails +=
            bench_attention_prefill_case(b, "0.6b.pp512", 1, 512, 512, 16, 8, 128, DTYPE_BF16, pv);
        fails +=
            bench_attention_prefill_case(b, "8b.pp512", 1, 512, 512, 32, 8, 128, DTYPE_BF16, pv);
        fails += bench_attention_prefill_case(b, "8b.pp512.f32cache", 1, 512, 512, 32, 8, 128,
                                              DTYPE_F32, pv);
        fails += bench_attention_prefill_case(b, "8b.chunk512@2048", 1, 512, 2048, 32, 8, 128,
                                              DTYPE_BF16, pv);
        fails +=
            bench_attention_prefill_case(b, "8b.4x512", 4, 512, 512, 32, 8, 128, DTYPE_BF16, pv);
    }
    return fails;
}

// ---- a synthetic decode step over Qwen3 shapes ----

struct qwen3_shape {
    const char *name;
    int n_layers, hidden, n_heads, n_kv, head_dim, ff, vocab;
};

static const struct qwen3_shape qwen3_shapes[] = {
    {"qwen3-0.6b", 28, 1024, 16, 8, 128, 3072, 151936},
    {"qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936},
    {"tiny", 2, 256, 4, 2, 64, 512, 1000}, // only when asked for: a smoke test of the tool
};
#define N_QWEN3_SHAPES (sizeof qwen3_shapes / sizeof qwen3_shapes[0])

struct layer_w {
    struct tensor attn_norm, wqkv, q_norm, k_norm, wo, ffn_norm, wgu, wdown;
    struct tensor kc, vc;
};

// Runs the layer stack n_steps times over n_seqs sequences of ctx keys, the
// last q_len of them new this step (1 = decode, ctx = prefill), and prints ms
// per step. Weights bf16, activations f32, KV cache bf16; the lm_head runs on
// one row per sequence, as a runner asks for logits of last tokens only. The
// layer is the forward pass's with fused projections (9 ops): add_rmsnorm,
// fused q|k|v matmul, qkv_rope_store, attention, o-proj, add_rmsnorm, fused
// gate|up matmul, packed silu_mul, down; 8 where a device provider takes
// matmul_silu_mul for the gate|up matmul and silu_mul. split runs q/k
// norm-RoPE and kv_store as three ops and silu_mul over two views instead
// (11 ops), for a side-by-side figure.
static int bench_decode(struct bench *b, const struct qwen3_shape *m, int n_seqs, int ctx,
                        int q_len, bool split)
{
    const int n_tok = n_seqs * q_len;
    const int H = m->hidden, NQ = m->n_heads * m->head_dim, NKV = m->n_kv * m->head_dim;
    const int QKV = NQ + 2 * NKV, bs = 16, max_blocks = (ctx + bs) / bs + 1;
    const int n_blocks = n_seqs * max_blocks;
    struct layer_w *L = mem_calloc((size_t)m->n_layers, sizeof *L);
    int32_t *host = mem_alloc((size_t)(n_blocks + 4 * n_tok + 2) * sizeof(int32_t));
    float *freq = mem_alloc((size_t)m->head_dim / 2 * sizeof(float));
    if (!L || !host || !freq)
        return 1;
    b->n_alloc_bytes = 0;
    enum vllmc_status rc = VLLMC_OK;
    struct tensor emb = {0}, out_norm = {0}, lm_head = {0}, x = {0}, res = {0}, hn = {0};
    struct tensor qkv = {0}, att = {0}, gu = {0}, ff = {0}, logits = {0}, ids = {0}, pos = {0};
    struct tensor qb = {0};
    struct tensor fq = {0}, slots = {0}, bt = {0}, sl = {0}, qsl = {0};
#define NEW(t, dt, nd, ...)                                                                        \
    do {                                                                                           \
        if (!rc)                                                                                   \
            rc = tensor_new(b, &(t), dt, nd, (int64_t[]){__VA_ARGS__});                            \
    } while (0)
    NEW(emb, DTYPE_BF16, 2, H, m->vocab);
    NEW(out_norm, DTYPE_BF16, 1, H);
    NEW(lm_head, DTYPE_BF16, 2, H, m->vocab);
    for (int l = 0; l < m->n_layers; l++) {
        NEW(L[l].attn_norm, DTYPE_BF16, 1, H);
        NEW(L[l].wqkv, DTYPE_BF16, 2, H, QKV);
        NEW(L[l].q_norm, DTYPE_BF16, 1, m->head_dim);
        NEW(L[l].k_norm, DTYPE_BF16, 1, m->head_dim);
        NEW(L[l].wo, DTYPE_BF16, 2, NQ, H);
        NEW(L[l].ffn_norm, DTYPE_BF16, 1, H);
        NEW(L[l].wgu, DTYPE_BF16, 2, H, 2 * m->ff);
        NEW(L[l].wdown, DTYPE_BF16, 2, m->ff, H);
        NEW(L[l].kc, DTYPE_BF16, 4, m->head_dim, m->n_kv, bs, n_blocks);
        NEW(L[l].vc, DTYPE_BF16, 4, m->head_dim, m->n_kv, bs, n_blocks);
    }
    NEW(x, DTYPE_F32, 2, H, n_tok);
    NEW(res, DTYPE_F32, 2, H, n_tok);
    NEW(hn, DTYPE_F32, 2, H, n_tok);
    NEW(qkv, DTYPE_F32, 2, QKV, n_tok);
    NEW(att, DTYPE_F32, 3, m->head_dim, m->n_heads, n_tok);
    NEW(qb, DTYPE_F32, 3, m->head_dim, m->n_heads, n_tok);
    NEW(gu, DTYPE_F32, 2, 2 * m->ff, n_tok);
    NEW(ff, DTYPE_F32, 2, m->ff, n_tok);
    NEW(logits, DTYPE_F32, 2, m->vocab, n_seqs);
    NEW(ids, DTYPE_I32, 1, n_tok);
    NEW(pos, DTYPE_I32, 1, n_tok);
    NEW(fq, DTYPE_F32, 1, m->head_dim / 2);
    NEW(slots, DTYPE_I32, 1, n_tok);
    NEW(bt, DTYPE_I32, 2, max_blocks, n_seqs);
    NEW(sl, DTYPE_I32, 1, n_seqs);
    NEW(qsl, DTYPE_I32, 1, n_seqs + 1);
#undef NEW
    double weight_gb = 0;
    if (!rc) {
        weight_gb = (double)(tensor_n_bytes(&lm_head) +
                             (size_t)m->n_layers * (tensor_n_bytes(&L[0].wqkv) +
                                                    tensor_n_bytes(&L[0].wo) +
                                                    tensor_n_bytes(&L[0].wgu) +
                                                    tensor_n_bytes(&L[0].wdown))) /
                    1e9;
        for (int i = 0; i < n_blocks; i++)
            host[i] = (int32_t)((i * 7 + 1) % n_blocks);
        rc = backend_upload(b->be, bt.data, host, (size_t)n_blocks * sizeof(int32_t));
        for (int t = 0; t < n_tok; t++) {
            const int s = t / q_len, j = t % q_len, p = ctx - q_len + j;
            host[t] = (int32_t)(t * 1000 % m->vocab);                        // ids
            host[n_tok + t] = p;                                             // positions
            host[2 * n_tok + t] = (int32_t)(s * max_blocks * bs + p);        // slots
        }
        for (int s = 0; s < n_seqs; s++)
            host[3 * n_tok + s] = ctx; // seq_lens
        if (!rc)
            rc = backend_upload(b->be, ids.data, host, (size_t)n_tok * 4);
        if (!rc)
            rc = backend_upload(b->be, pos.data, host + n_tok, (size_t)n_tok * 4);
        if (!rc)
            rc = backend_upload(b->be, slots.data, host + 2 * n_tok, (size_t)n_tok * 4);
        if (!rc)
            rc = backend_upload(b->be, sl.data, host + 3 * n_tok, (size_t)n_seqs * 4);
        for (int s = 0; s <= n_seqs; s++)
            host[s] = s * q_len;
        if (!rc)
            rc = backend_upload(b->be, qsl.data, host, (size_t)(n_seqs + 1) * 4);
        for (int i = 0; i < m->head_dim / 2; i++)
            freq[i] = powf(1000000.0f, -2.0f * (float)i / (float)m->head_dim);
        if (!rc)
            rc = backend_upload(b->be, fq.data, freq, (size_t)m->head_dim / 2 * sizeof(float));
    }
    if (rc) {
        fprintf(stderr, "bench-ops: decode %s: %s\n", m->name, backend_err(b->be)->msg);
        goto done;
    }
    // Views into the fused projections: q, k, v heads inside each qkv row,
    // gate and up halves of each gate_up row.
    const size_t f4 = sizeof(float), qkv_row = (size_t)QKV * f4, gu_row = (size_t)2 * m->ff * f4;
    const int D = m->head_dim;
    struct tensor qv = tensor_view(&qkv, 3, (int64_t[]){D, m->n_heads, n_tok},
                                   (size_t[]){f4, (size_t)D * f4, qkv_row}, 0);
    struct tensor kv = tensor_view(&qkv, 3, (int64_t[]){D, m->n_kv, n_tok},
                                   (size_t[]){f4, (size_t)D * f4, qkv_row}, (size_t)NQ * f4);
    struct tensor vv = tensor_view(&qkv, 3, (int64_t[]){D, m->n_kv, n_tok},
                                   (size_t[]){f4, (size_t)D * f4, qkv_row},
                                   (size_t)(NQ + NKV) * f4);
    struct tensor gate = tensor_view(&gu, 2, (int64_t[]){m->ff, n_tok}, (size_t[]){f4, gu_row}, 0);
    struct tensor up = tensor_view(&gu, 2, (int64_t[]){m->ff, n_tok}, (size_t[]){f4, gu_row},
                                   (size_t)m->ff * f4);
    struct tensor att2 = tensor_view(&att, 2, (int64_t[]){NQ, n_tok}, (size_t[]){f4, NQ * f4}, 0);
    struct tensor hn_last = tensor_view(&hn, 2, (int64_t[]){H, n_seqs}, (size_t[]){f4, H * f4}, 0);
    const int n_steps = b->iters < 3 ? 3 : b->iters;
    int ops_per_layer = 0;
    struct op_call probe = {.op = OP_MATMUL_SILU_MUL, .dst = &ff, .src = {&hn, &L[0].wgu},
                            .backend = b->be};
    const bool fuse_gate_up = !rc && !split && backend_location(b->be) == TENSOR_DEVICE &&
                              backend_select_provider(b->be, &probe) != NULL;
    int64_t t0 = 0;
    for (int step = 0; step <= n_steps && !rc; step++) {
        if (step == 1) { // step 0 warms up (allocations, cuBLASLt heuristics)
            rc = backend_sync(b->be);
            t0 = time_now_us();
        }
        struct op_call c = {.op = OP_EMBEDDING, .dst = &x, .src = {&emb, &ids}};
        rc = backend_run_op(b->be, &c);
        for (int l = 0; l < m->n_layers && !rc; l++) {
            struct layer_w *w = &L[l];
            const struct op_params rope_p = {.eps = 1e-6f, .rope_dim = D, .rope_neox = true};
            struct op_call fused[] = {
                {.op = OP_ADD_RMSNORM, .dst = &hn, .src = {&x, &w->attn_norm, &res},
                 .p.eps = 1e-6f},
                {.op = OP_MATMUL, .dst = &qkv, .src = {&hn, &w->wqkv}},
                {.op = OP_QKV_ROPE_STORE, .dst = &qb,
                 .src = {&qkv, &pos, &fq, &w->q_norm, &w->k_norm, &w->kc, &w->vc, &slots},
                 .p = rope_p},
                {.op = OP_ATTENTION, .dst = &att, .src = {&qb, &w->kc, &w->vc, &bt, &sl, &qsl},
                 .p = {.scale = 1.0f / sqrtf((float)D), .max_seq_len = ctx, .max_q_len = q_len}},
                {.op = OP_MATMUL, .dst = &x, .src = {&att2, &w->wo}},
                {.op = OP_ADD_RMSNORM, .dst = &hn, .src = {&x, &w->ffn_norm, &res},
                 .p.eps = 1e-6f},
                {.op = OP_MATMUL, .dst = &gu, .src = {&hn, &w->wgu}},
                {.op = OP_SILU_MUL, .dst = &ff, .src = {&gu}},
                {.op = OP_MATMUL, .dst = &x, .src = {&ff, &w->wdown}},
            };
            struct op_call calls[] = {
                {.op = OP_ADD_RMSNORM, .dst = &hn, .src = {&x, &w->attn_norm, &res},
                 .p.eps = 1e-6f},
                {.op = OP_MATMUL, .dst = &qkv, .src = {&hn, &w->wqkv}},
                {.op = OP_QK_NORM_ROPE, .dst = &qv, .src = {&pos, &fq, &w->q_norm},
                 .p = {.eps = 1e-6f, .rope_dim = D, .rope_neox = true}},
                {.op = OP_QK_NORM_ROPE, .dst = &kv, .src = {&pos, &fq, &w->k_norm},
                 .p = {.eps = 1e-6f, .rope_dim = D, .rope_neox = true}},
                {.op = OP_KV_STORE, .src = {&kv, &vv, &w->kc, &w->vc, &slots}},
                {.op = OP_ATTENTION, .dst = &att, .src = {&qv, &w->kc, &w->vc, &bt, &sl, &qsl},
                 .p = {.scale = 1.0f / sqrtf((float)D), .max_seq_len = ctx, .max_q_len = q_len}},
                {.op = OP_MATMUL, .dst = &x, .src = {&att2, &w->wo}},
                {.op = OP_ADD_RMSNORM, .dst = &hn, .src = {&x, &w->ffn_norm, &res},
                 .p.eps = 1e-6f},
                {.op = OP_MATMUL, .dst = &gu, .src = {&hn, &w->wgu}},
                {.op = OP_SILU_MUL, .dst = &ff, .src = {&gate, &up}},
                {.op = OP_MATMUL, .dst = &x, .src = {&ff, &w->wdown}},
            };
            // As the forward pass: one matmul_silu_mul where a device provider takes it.
            struct op_call gate_up = {.op = OP_MATMUL_SILU_MUL, .dst = &ff,
                                      .src = {&hn, &w->wgu}, .backend = b->be};
            if (!split && fuse_gate_up) {
                fused[6] = gate_up;
                fused[7] = fused[8];
            }
            struct op_call *seq = split ? calls : fused;
            size_t n_ops = split ? sizeof calls / sizeof calls[0]
                                 : sizeof fused / sizeof fused[0] - (fuse_gate_up ? 1 : 0);
            ops_per_layer = (int)n_ops;
            for (size_t i = 0; i < n_ops && !rc; i++)
                rc = backend_run_op(b->be, &seq[i]);
        }
        struct op_call fin[] = {
            {.op = OP_ADD_RMSNORM, .dst = &hn, .src = {&x, &out_norm, &res}, .p.eps = 1e-6f},
            {.op = OP_MATMUL, .dst = &logits, .src = {&hn_last, &lm_head}},
        };
        for (size_t i = 0; i < 2 && !rc; i++)
            rc = backend_run_op(b->be, &fin[i]);
        // The step ends when its logits could be read back, as a sampler would.
        if (!rc)
            rc = backend_sync(b->be);
    }
    if (rc) {
        fprintf(stderr, "bench-ops: decode %s: %s\n", m->name, backend_err(b->be)->msg);
    } else {
        double ms = (double)(time_now_us() - t0) / 1e3 / n_steps;
        printf("%s model=%s batch=%d ctx=%d tokens=%d ms_per_step=%.3f tok_s=%.0f weight_gb=%.2f "
               "weight_gbps=%.0f ops_per_layer=%d%s\n",
               q_len == 1 ? "decode" : "prefill", m->name, n_seqs, ctx, n_tok, ms,
               n_tok * 1e3 / ms, weight_gb, weight_gb / (ms * 1e-3), ops_per_layer,
               split ? " split" : "");
    }
done:
    for (int l = 0; l < m->n_layers; l++) {
        struct tensor *ts[] = {&L[l].attn_norm, &L[l].wqkv, &L[l].q_norm, &L[l].k_norm, &L[l].wo,
                               &L[l].ffn_norm,  &L[l].wgu,  &L[l].wdown,  &L[l].kc,     &L[l].vc};
        for (size_t i = 0; i < 10; i++)
            if (ts[i]->data)
                backend_buffer_free(b->be, ts[i]->data);
    }
    struct tensor *g[] = {&emb, &out_norm, &lm_head, &x,   &res,   &hn,    &qkv, &att, &gu,
                          &ff,  &logits,   &ids,     &pos, &fq,    &slots, &bt,  &sl,  &qsl,
                          &qb};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        if (g[i]->data)
            backend_buffer_free(b->be, g[i]->data);
    mem_free(L);
    mem_free(host);
    mem_free(freq);
    return rc ? 1 : 0;
}

static int section_decode(struct bench *b, const char *only_model, int only_batch)
{
    int fails = 0;
    static const int batches[] = {1, 8, 64};
    for (size_t i = 0; i < N_QWEN3_SHAPES; i++) {
        if (only_model ? strcmp(only_model, qwen3_shapes[i].name) != 0
                       : !strcmp(qwen3_shapes[i].name, "tiny"))
            continue;
        if (only_batch) // any batch size, e.g. 16 or 32 beside the three below
            fails += bench_decode(b, &qwen3_shapes[i], only_batch, 512, 1, false);
        for (size_t j = 0; j < 3 && !only_batch; j++)
            fails += bench_decode(b, &qwen3_shapes[i], batches[j], 512, 1, false);
        // Batch-1 decode again with the split post-QKV ops, side by side
        // (not with --batch, whose runs profilers count kernels of).
        if (!only_batch)
            fails += bench_decode(b, &qwen3_shapes[i], 1, 512, 1, true);
        if (!only_batch)
            fails += bench_decode(b, &qwen3_shapes[i], 1, 512, 512, false); // pp512
    }
    return fails;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: vllmc bench-ops [--device cpu|cuda] [--section gemv|crossover|"
               "decode_gemm|attention|decode|all] [--model qwen3-0.6b|qwen3-8b|tiny] [--batch "
               "N (1, 8 and 64 when left out; up to 256)] [--iters N]\n"
               "       [--filter TEXT]   gemv and crossover: only cases whose SHAPE.WTYPE "
               "contains TEXT (e.g. gate_up.q8_0)\n");
}

int bench_ops_main(int argc, char **argv)
{
    const char *device = "cuda", *section = "all", *model = NULL;
    int batch = 0;
    struct bench b = {.iters = 50};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            device = argv[++i];
        } else if (!strcmp(argv[i], "--section") && i + 1 < argc) {
            section = argv[++i];
        } else if (!strcmp(argv[i], "--model") && i + 1 < argc) {
            model = argv[++i];
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            batch = atoi(argv[++i]);
            if (batch < 1 || batch > 256) {
                fprintf(stderr, "bench-ops: --batch takes 1 to 256 sequences\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            b.iters = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--filter") && i + 1 < argc) {
            b.filter = argv[++i];
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (b.iters < 1)
        b.iters = 1;
    struct err err = {0};
    struct backend_options o;
    backend_options_default(&o);
    if (backend_create(device, &o, &b.be, &err)) {
        fprintf(stderr, "bench-ops: %s\n", err.msg);
        return 1;
    }
    if (!pattern_init(&b)) {
        backend_free(b.be);
        return 1;
    }
    int fails = 0;
    bool all = !strcmp(section, "all");
    if (all || !strcmp(section, "gemv"))
        fails += section_gemv(&b);
    if (all || !strcmp(section, "crossover"))
        fails += section_crossover(&b);
    if (!strcmp(section, "decode_gemm")) // not in all: 80 shapes x providers
        fails += section_decode_gemm(&b);
    if (all || !strcmp(section, "attention"))
        fails += section_attention(&b);
    if (all || !strcmp(section, "decode"))
        fails += section_decode(&b, model, batch);
    mem_free(b.pattern);
    backend_free(b.be);
    return fails ? 1 : 0;
}
