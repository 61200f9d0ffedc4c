// Model loader: hand-made GGUF files with missing tensors, wrong shapes, bad
// dtypes, unknown architectures and bad hyper-parameters each get one clear
// error; qwen2/qwen3 variants load; allocation failures never leak; a qwen2
// file with zero biases computes exactly what the HF llama folder computes.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "check.h"
#include "core/alloc.h"
#include "model/arch.h"
#include "model/batch_builder.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/safetensors.h"

// ---- a minimal GGUF v3 writer ----

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static void buf_put(struct buf *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 1024;
        b->p = mem_realloc(b->p, b->cap);
        VLLMC_ASSERT(b->p);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_u32(struct buf *b, uint32_t v)
{
    buf_put(b, &v, 4);
}
static void put_u64(struct buf *b, uint64_t v)
{
    buf_put(b, &v, 8);
}

static void put_str(struct buf *b, const char *s)
{
    put_u64(b, strlen(s));
    buf_put(b, s, strlen(s));
}

#define MAX_KV 24
#define MAX_T 64

struct gguf_w {
    struct buf kv;
    int n_kv;
    struct {
        char name[64];
        int n_dims;
        uint64_t ne[2];
        uint32_t type;
        const void *data; // NULL: filled with small pseudo-random values
        size_t n_bytes;
    } t[MAX_T];
    int n_t;
};

static void w_kv_str(struct gguf_w *w, const char *k, const char *v)
{
    put_str(&w->kv, k);
    put_u32(&w->kv, 8);
    put_str(&w->kv, v);
    w->n_kv++;
}

static void w_kv_u32(struct gguf_w *w, const char *k, uint32_t v)
{
    put_str(&w->kv, k);
    put_u32(&w->kv, 4);
    put_u32(&w->kv, v);
    w->n_kv++;
}

static void w_kv_f32(struct gguf_w *w, const char *k, float v)
{
    put_str(&w->kv, k);
    put_u32(&w->kv, 6);
    buf_put(&w->kv, &v, 4);
    w->n_kv++;
}

static void w_tensor(struct gguf_w *w, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1,
                     const void *data)
{
    VLLMC_ASSERT(w->n_t < MAX_T);
    snprintf(w->t[w->n_t].name, sizeof(w->t[0].name), "%s", name);
    w->t[w->n_t].n_dims = ne1 ? 2 : 1;
    w->t[w->n_t].ne[0] = ne0;
    w->t[w->n_t].ne[1] = ne1 ? ne1 : 1;
    w->t[w->n_t].type = type;
    w->t[w->n_t].data = data;
    size_t esize = type == DTYPE_F32 || type == DTYPE_I32 ? 4 : 2;
    w->t[w->n_t].n_bytes = ne0 * (ne1 ? ne1 : 1) * esize;
    w->n_t++;
}

static void w_save(struct gguf_w *w, const char *path)
{
    struct buf b = {0};
    buf_put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, (uint64_t)w->n_t);
    put_u64(&b, (uint64_t)w->n_kv);
    buf_put(&b, w->kv.p, w->kv.n);
    uint64_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        put_str(&b, w->t[i].name);
        put_u32(&b, (uint32_t)w->t[i].n_dims);
        for (int d = 0; d < w->t[i].n_dims; d++)
            put_u64(&b, w->t[i].ne[d]);
        put_u32(&b, w->t[i].type);
        put_u64(&b, off);
        off += (w->t[i].n_bytes + 31) / 32 * 32;
    }
    static const uint8_t zeros[32];
    buf_put(&b, zeros, (32 - b.n % 32) % 32);
    uint32_t seed = 12345;
    for (int i = 0; i < w->n_t; i++) {
        size_t start = b.n;
        if (w->t[i].data) {
            buf_put(&b, w->t[i].data, w->t[i].n_bytes);
        } else {
            for (size_t j = 0; j < w->t[i].n_bytes / 4; j++) {
                seed = seed * 1664525u + 1013904223u;
                float v = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.5f;
                if (w->t[i].n_dims == 1)
                    v += 1.0f; // norm gains near 1
                if (w->t[i].type == DTYPE_I32)
                    v = 0;
                buf_put(&b, &v, 4);
            }
        }
        buf_put(&b, zeros, (32 - (b.n - start) % 32) % 32);
    }
    FILE *f = fopen(path, "wb");
    VLLMC_ASSERT(f);
    fwrite(b.p, 1, b.n, f);
    fclose(f);
    mem_free(b.p);
    mem_free(w->kv.p);
    memset(w, 0, sizeof(*w));
}

// ---- a tiny llama-shaped model: 1 layer, dim 8, 2 heads of 4, 1 kv head, ff 16, vocab 16 ----

struct tiny_opts {
    const char *arch;
    const char *skip;      // tensor name left out
    const char *bad_shape; // tensor written with one row too many
    const char *i32;       // tensor written as i32
    bool bias, qk_norm, no_block_count;
    int n_kv_heads;
};

static void tiny_write(const char *path, const struct tiny_opts *o)
{
    struct gguf_w w = {0};
    const char *a = o->arch ? o->arch : "llama";
    char k[96];
    w_kv_str(&w, "general.architecture", a);
#define KEY(s) (snprintf(k, sizeof(k), "%s.%s", a, s), k)
    if (!o->no_block_count)
        w_kv_u32(&w, KEY("block_count"), 1);
    w_kv_u32(&w, KEY("embedding_length"), 8);
    w_kv_u32(&w, KEY("feed_forward_length"), 16);
    w_kv_u32(&w, KEY("attention.head_count"), 2);
    w_kv_u32(&w, KEY("attention.head_count_kv"), o->n_kv_heads ? (uint32_t)o->n_kv_heads : 1);
    w_kv_u32(&w, KEY("context_length"), 64);
    w_kv_f32(&w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    w_kv_f32(&w, KEY("rope.freq_base"), 10000.0f);
    w_kv_u32(&w, KEY("vocab_size"), 16);
#undef KEY
    struct {
        const char *name;
        uint64_t ne0, ne1;
        bool want;
    } ts[] = {
        {"token_embd.weight", 8, 16, true},
        {"output_norm.weight", 8, 0, true},
        {"blk.0.attn_norm.weight", 8, 0, true},
        {"blk.0.attn_q.weight", 8, 8, true},
        {"blk.0.attn_k.weight", 8, 4, true},
        {"blk.0.attn_v.weight", 8, 4, true},
        {"blk.0.attn_q.bias", 8, 0, o->bias},
        {"blk.0.attn_k.bias", 4, 0, o->bias},
        {"blk.0.attn_v.bias", 4, 0, o->bias},
        {"blk.0.attn_q_norm.weight", 4, 0, o->qk_norm},
        {"blk.0.attn_k_norm.weight", 4, 0, o->qk_norm},
        {"blk.0.attn_output.weight", 8, 8, true},
        {"blk.0.ffn_norm.weight", 8, 0, true},
        {"blk.0.ffn_gate.weight", 8, 16, true},
        {"blk.0.ffn_up.weight", 8, 16, true},
        {"blk.0.ffn_down.weight", 16, 8, true},
    };
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        if (!ts[i].want || (o->skip && !strcmp(o->skip, ts[i].name)))
            continue;
        uint64_t ne1 = ts[i].ne1;
        if (o->bad_shape && !strcmp(o->bad_shape, ts[i].name))
            ne1 += 1;
        uint32_t type = o->i32 && !strcmp(o->i32, ts[i].name) ? DTYPE_I32 : DTYPE_F32;
        w_tensor(&w, ts[i].name, type, ts[i].ne0, ne1, NULL);
    }
    w_save(&w, path);
}

static struct backend *test_backend(void)
{
    struct backend_options o;
    backend_options_default(&o);
    o.n_threads = 1;
    struct backend *be = NULL;
    struct err err = {0};
    VLLMC_ASSERT(!backend_create("cpu", &o, &be, &err));
    return be;
}

static char tmp_path[256];

static enum vllmc_status tiny_load(const struct tiny_opts *o, struct model **m, struct err *err)
{
    snprintf(tmp_path, sizeof(tmp_path), "/tmp/vllmc_test_loader_%d.gguf", (int)getpid());
    tiny_write(tmp_path, o);
    struct backend *be = test_backend();
    enum vllmc_status rc = model_load(tmp_path, be, NULL, m, err);
    if (rc)
        backend_free(be);
    return rc;
}

static void tiny_free(struct model *m)
{
    if (!m)
        return;
    struct backend *be = m->backend;
    model_free(m);
    backend_free(be);
}

static void expect_error(const struct tiny_opts *o, enum vllmc_status code, const char *needle)
{
    struct model *m = NULL;
    struct err err = {0};
    CHECK_EQ_INT(tiny_load(o, &m, &err), code);
    CHECK(m == NULL);
    if (!strstr(err.msg, needle))
        fprintf(stderr, "  error was: %s\n  expected it to contain: %s\n", err.msg, needle);
    CHECK(strstr(err.msg, needle) != NULL);
    CHECK(strstr(err.msg, tmp_path) != NULL);
}

// Runs 3 tokens and checks the logits are finite.
static void run_three_tokens(struct model *m)
{
    struct kv_cache_params kp;
    kv_cache_params_default(&kp);
    kp.n_blocks = 1;
    kp.block_size = 16;
    struct kv_cache *kv = NULL;
    struct err err = {0};
    CHECK_EQ_INT(kv_cache_create(m, &kp, &kv, &err), VLLMC_OK);
    struct batch_builder bb;
    CHECK_EQ_INT(batch_builder_init(&bb, m->backend, 8, 1, 1), VLLMC_OK);
    int32_t ids[3] = {1, 5, 7}, table[1] = {0};
    struct model_batch b;
    float logits[3 * 16];
    struct tensor lt;
    tensor_init_2d(&lt, DTYPE_F32, logits, 16, 3);
    CHECK_EQ_INT(batch_builder_add(&bb, ids, 3, 0, table, 1, 16, BATCH_LOGITS_ALL, &err), VLLMC_OK);
    CHECK_EQ_INT(batch_builder_finish(&bb, &b, &err), VLLMC_OK);
    CHECK_EQ_INT(model_forward(m, &b, kv, &lt, &err), VLLMC_OK);
    for (int i = 0; i < 3 * 16; i++)
        CHECK(isfinite(logits[i]));
    batch_builder_deinit(&bb);
    kv_cache_free(kv);
}

static void test_tiny_llama_loads_tied(void)
{
    struct model *m = NULL;
    struct err err = {0};
    struct tiny_opts o = {0};
    CHECK_EQ_INT(tiny_load(&o, &m, &err), VLLMC_OK);
    if (!m)
        return;
    CHECK_EQ_INT(m->hp.arch, MODEL_ARCH_LLAMA);
    CHECK_EQ_INT(m->hp.n_layers, 1);
    CHECK_EQ_INT(m->hp.head_dim, 4);
    CHECK_EQ_INT(m->hp.n_kv_heads, 1);
    CHECK_EQ_INT(m->hp.rope_dim, 4);
    CHECK_EQ_INT(m->hp.n_vocab, 16);
    CHECK(!m->hp.rope_neox);
    CHECK(m->hp.tied_embeddings);
    CHECK(m->output.data == m->token_embd.data);
    CHECK(m->layers[0].bq.data == NULL);
    run_three_tokens(m);
    tiny_free(m);
}

// The background prefault: every block made resident while the cache is in
// use, what was written before stays, and freeing stops the thread.
static void test_kv_cache_prefault(void)
{
    struct model *m = NULL;
    struct err err = {0};
    struct tiny_opts o = {0};
    CHECK_EQ_INT(tiny_load(&o, &m, &err), VLLMC_OK);
    if (!m)
        return;
    struct kv_cache_params kp;
    kv_cache_params_default(&kp);
    kp.n_blocks = 16384; // 4 MiB a buffer: mapped memory on the CPU
    struct kv_cache *kv = NULL;
    CHECK_EQ_INT(kv_cache_create(m, &kp, &kv, &err), VLLMC_OK);
    if (!kv) {
        tiny_free(m);
        return;
    }
    float *k = kv->k[0].data, *v = kv->v[0].data;
    size_t block_floats = (size_t)kp.block_size * 4; // one kv head of 4
    for (size_t i = 0; i < block_floats; i++) {
        k[100 * block_floats + i] = (float)i + 1.0f;
        v[16000 * block_floats + i] = -(float)i - 1.0f;
    }
    kv_cache_prefault_start(kv);
    CHECK(kv->prefault_started);
    // An idle-priority thread: under a loaded test run it may take a while.
    for (int waited_ms = 0;
         waited_ms < 120000 && atomic_load(&kv->n_blocks_prefaulted) < kp.n_blocks; waited_ms++)
        usleep(1000);
    CHECK_EQ_INT(atomic_load(&kv->n_blocks_prefaulted), kp.n_blocks);
    size_t changed = 0, nonzero = 0;
    for (size_t i = 0; i < block_floats; i++) {
        changed += k[100 * block_floats + i] != (float)i + 1.0f;
        changed += v[16000 * block_floats + i] != -(float)i - 1.0f;
        nonzero += k[i] != 0.0f || v[(size_t)(kp.n_blocks - 1) * block_floats + i] != 0.0f;
    }
    CHECK(changed == 0);
    CHECK(nonzero == 0);
    kv_cache_free(kv);
    // Freed while the thread runs: it stops and is joined.
    kv = NULL;
    CHECK_EQ_INT(kv_cache_create(m, &kp, &kv, &err), VLLMC_OK);
    if (kv)
        kv_cache_prefault_start(kv);
    kv_cache_free(kv);
    tiny_free(m);
}

static void test_missing_tensor(void)
{
    expect_error(&(struct tiny_opts){.skip = "blk.0.ffn_down.weight"}, VLLMC_ERR_FORMAT,
                 "tensor blk.0.ffn_down.weight is missing");
}

static void test_shape_mismatch(void)
{
    expect_error(&(struct tiny_opts){.bad_shape = "blk.0.attn_k.weight"}, VLLMC_ERR_FORMAT,
                 "tensor blk.0.attn_k.weight has shape [5, 8], the hyper-parameters need [4, 8]");
    expect_error(&(struct tiny_opts){.bad_shape = "token_embd.weight"}, VLLMC_ERR_FORMAT,
                 "tensor token_embd.weight has shape [17, 8]");
}

static void test_bad_dtype(void)
{
    expect_error(&(struct tiny_opts){.i32 = "blk.0.ffn_up.weight"}, VLLMC_ERR_UNSUPPORTED,
                 "tensor blk.0.ffn_up.weight has dtype i32, which is not a weight type");
    expect_error(&(struct tiny_opts){.i32 = "blk.0.ffn_norm.weight"}, VLLMC_ERR_UNSUPPORTED,
                 "tensor blk.0.ffn_norm.weight has dtype i32");
}

static void test_bad_hparams(void)
{
    expect_error(&(struct tiny_opts){.arch = "gptj"}, VLLMC_ERR_UNSUPPORTED,
                 "unsupported architecture 'gptj'");
    expect_error(&(struct tiny_opts){.no_block_count = true}, VLLMC_ERR_FORMAT,
                 "metadata llama.block_count is missing");
    expect_error(&(struct tiny_opts){.n_kv_heads = 3}, VLLMC_ERR_FORMAT,
                 "2 query heads do not share 3 kv heads evenly");
}

static void test_qwen2_needs_biases(void)
{
    expect_error(&(struct tiny_opts){.arch = "qwen2"}, VLLMC_ERR_FORMAT,
                 "tensor blk.0.attn_q.bias is missing");
    struct model *m = NULL;
    struct err err = {0};
    CHECK_EQ_INT(tiny_load(&(struct tiny_opts){.arch = "qwen2", .bias = true}, &m, &err), VLLMC_OK);
    if (!m)
        return;
    CHECK_EQ_INT(m->hp.arch, MODEL_ARCH_QWEN2);
    CHECK(m->hp.rope_neox);
    CHECK(m->layers[0].bv.data != NULL);
    run_three_tokens(m);
    tiny_free(m);
}

static void test_qwen3_needs_qk_norm(void)
{
    expect_error(&(struct tiny_opts){.arch = "qwen3"}, VLLMC_ERR_FORMAT,
                 "tensor blk.0.attn_q_norm.weight is missing");
    struct model *m = NULL;
    struct err err = {0};
    CHECK_EQ_INT(tiny_load(&(struct tiny_opts){.arch = "qwen3", .qk_norm = true}, &m, &err),
                 VLLMC_OK);
    if (!m)
        return;
    CHECK(m->hp.qk_norm);
    CHECK(m->layers[0].k_norm.data != NULL);
    run_three_tokens(m);
    tiny_free(m);
}

static void test_load_out_of_memory(void)
{
    struct tiny_opts o = {.arch = "qwen2", .bias = true};
    snprintf(tmp_path, sizeof(tmp_path), "/tmp/vllmc_test_loader_%d.gguf", (int)getpid());
    tiny_write(tmp_path, &o);
    struct backend *be = test_backend();
    for (long n = 1; n < 1000; n++) {
        struct model *m = NULL;
        struct err err = {0};
        mem_fail_after(n);
        enum vllmc_status rc = model_load(tmp_path, be, NULL, &m, &err);
        mem_fail_after(0);
        if (rc == VLLMC_OK) {
            CHECK(m != NULL);
            model_free(m);
            break;
        }
        CHECK(m == NULL);
        CHECK(err.msg[0] != '\0');
    }
    backend_free(be);
}

// transformers' llama3 RoPE scaling, checked at the three regimes.
static void test_llama3_rope_frequencies(void)
{
    struct model_hparams hp = {.rope_theta = 500000.0f,
                               .rope_dim = 128,
                               .head_dim = 128,
                               .rope_scaling = ROPE_SCALING_LLAMA3,
                               .rope_factor = 8.0f,
                               .rope_low_freq_factor = 1.0f,
                               .rope_high_freq_factor = 4.0f,
                               .rope_orig_ctx = 8192};
    float f[64];
    arch_rope_inv_freq(&hp, NULL, f);
    // High frequencies (wavelength < 8192 / 4) stay as they are.
    CHECK_NEAR(f[0], 1.0, 0, 1e-7);
    CHECK_NEAR(f[10], pow(500000.0, -20.0 / 128), 0, 1e-6);
    // Low frequencies (wavelength > 8192) are divided by the factor.
    CHECK_NEAR(f[63], pow(500000.0, -126.0 / 128) / 8, 0, 1e-6);
    // In between: (1 - s) * f / 8 + s * f with s = (8192 / wavelength - 1) / 3.
    double f0 = pow(500000.0, -2.0 * 32 / 128), wl = 2 * M_PI / f0;
    CHECK(wl > 2048 && wl < 8192);
    double s = (8192 / wl - 1) / 3;
    CHECK_NEAR(f[32], (1 - s) * f0 / 8 + s * f0, 0, 1e-6);
    hp.rope_scaling = ROPE_SCALING_LINEAR;
    hp.rope_factor = 4.0f;
    arch_rope_inv_freq(&hp, NULL, f);
    CHECK_NEAR(f[10], pow(500000.0, -20.0 / 128) / 4, 0, 1e-6);
}

// A qwen2 GGUF (rotate-half RoPE) holding the HF copy of stories260K with zero
// biases must compute bit for bit what the HF folder itself computes.
static void test_qwen2_gguf_matches_hf_llama(void)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/models/stories260K-hf", VLLMC_SHARED_DIR);
    struct safetensors *st = NULL;
    struct err err = {0};
    CHECK_EQ_INT(safetensors_open(dir, &st, &err), VLLMC_OK);
    if (!st)
        return;
    struct gguf_w w = {0};
    w_kv_str(&w, "general.architecture", "qwen2");
    w_kv_u32(&w, "qwen2.block_count", 5);
    w_kv_u32(&w, "qwen2.embedding_length", 64);
    w_kv_u32(&w, "qwen2.feed_forward_length", 172);
    w_kv_u32(&w, "qwen2.attention.head_count", 8);
    w_kv_u32(&w, "qwen2.attention.head_count_kv", 4);
    w_kv_f32(&w, "qwen2.attention.layer_norm_rms_epsilon", 1e-5f);
    static const float zeros[64];
    static const struct {
        enum arch_weight w;
        bool per_layer;
    } names[] = {{ARCH_W_TOKEN_EMBD, false}, {ARCH_W_OUTPUT_NORM, false},
                 {ARCH_W_OUTPUT, false},     {ARCH_W_ATTN_NORM, true},
                 {ARCH_W_Q, true},           {ARCH_W_K, true},
                 {ARCH_W_V, true},           {ARCH_W_O, true},
                 {ARCH_W_FFN_NORM, true},    {ARCH_W_GATE, true},
                 {ARCH_W_UP, true},          {ARCH_W_DOWN, true}};
    for (int l = 0; l < 5; l++) {
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            if (!names[i].per_layer && l)
                continue;
            char hf[96], gg[96];
            arch_weight_name(MODEL_FORMAT_SAFETENSORS, names[i].w, l, hf, sizeof(hf));
            arch_weight_name(MODEL_FORMAT_GGUF, names[i].w, l, gg, sizeof(gg));
            const struct st_tensor *t = safetensors_find(st, hf);
            CHECK(t != NULL);
            if (t)
                w_tensor(&w, gg, DTYPE_F32, (uint64_t)t->ne[0],
                         t->n_dims > 1 ? (uint64_t)t->ne[1] : 0, t->data);
        }
        char name[64];
        snprintf(name, sizeof(name), "blk.%d.attn_q.bias", l);
        w_tensor(&w, name, DTYPE_F32, 64, 0, zeros);
        snprintf(name, sizeof(name), "blk.%d.attn_k.bias", l);
        w_tensor(&w, name, DTYPE_F32, 32, 0, zeros);
        snprintf(name, sizeof(name), "blk.%d.attn_v.bias", l);
        w_tensor(&w, name, DTYPE_F32, 32, 0, zeros);
    }
    char path[256];
    snprintf(path, sizeof(path), "/tmp/vllmc_test_qwen2_%d.gguf", (int)getpid());
    w_save(&w, path);
    safetensors_free(st);

    struct backend *be = test_backend();
    struct model *q = NULL, *h = NULL;
    CHECK_EQ_INT(model_load(path, be, NULL, &q, &err), VLLMC_OK);
    CHECK_EQ_INT(model_load(dir, be, NULL, &h, &err), VLLMC_OK);
    if (q && h) {
        CHECK(q->hp.rope_neox && h->hp.rope_neox);
        float lq[512], lh[512];
        struct model *ms[2] = {q, h};
        float *ls[2] = {lq, lh};
        for (int k = 0; k < 2; k++) {
            struct kv_cache_params kp;
            kv_cache_params_default(&kp);
            kp.n_blocks = 1;
            struct kv_cache *kv = NULL;
            struct batch_builder bb;
            struct model_batch b;
            struct tensor lt;
            int32_t ids[5] = {1, 403, 407, 261, 378}, table[1] = {0};
            CHECK_EQ_INT(kv_cache_create(ms[k], &kp, &kv, &err), VLLMC_OK);
            CHECK_EQ_INT(batch_builder_init(&bb, be, 8, 1, 1), VLLMC_OK);
            CHECK_EQ_INT(
                batch_builder_add(&bb, ids, 5, 0, table, 1, kp.block_size, BATCH_LOGITS_LAST, &err),
                VLLMC_OK);
            CHECK_EQ_INT(batch_builder_finish(&bb, &b, &err), VLLMC_OK);
            tensor_init_2d(&lt, DTYPE_F32, ls[k], 512, 1);
            CHECK_EQ_INT(model_forward(ms[k], &b, kv, &lt, &err), VLLMC_OK);
            batch_builder_deinit(&bb);
            kv_cache_free(kv);
        }
        CHECK(!memcmp(lq, lh, sizeof(lq)));
    }
    model_free(h);
    model_free(q);
    backend_free(be);
    unlink(path);
}

// A Hugging Face folder whose config.json disagrees with its weights, or names
// an architecture we do not run.
static void test_hf_config_mismatch(void)
{
    char dir[256], path[512], target[512];
    snprintf(dir, sizeof(dir), "/tmp/vllmc_test_hf_%d", (int)getpid());
    CHECK_EQ_INT(mkdir(dir, 0700), 0);
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    snprintf(target, sizeof(target), "%s/models/stories260K-hf/model.safetensors",
             VLLMC_SHARED_DIR);
    CHECK_EQ_INT(symlink(target, path), 0);
    const char *configs[][2] = {
        {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 172, "
         "\"num_hidden_layers\": 5, \"num_attention_heads\": 8, \"num_key_value_heads\": 2, "
         "\"vocab_size\": 512, \"rms_norm_eps\": 1e-5}",
         "tensor model.layers.0.self_attn.k_proj.weight has shape [32, 64], the hyper-parameters "
         "need [16, 64]"},
        {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 172, "
         "\"num_hidden_layers\": 6, \"num_attention_heads\": 8, \"num_key_value_heads\": 4, "
         "\"vocab_size\": 512}",
         "tensor model.layers.5.input_layernorm.weight is missing"},
        {"{\"model_type\": \"gpt2\", \"hidden_size\": 64}", "unsupported model_type 'gpt2'"},
        {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 172, "
         "\"num_hidden_layers\": 5, \"num_attention_heads\": 8, \"num_key_value_heads\": 4, "
         "\"vocab_size\": 512, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}",
         "rope_scaling type 'yarn' is not supported"},
    };
    struct backend *be = test_backend();
    for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); i++) {
        snprintf(path, sizeof(path), "%s/config.json", dir);
        FILE *f = fopen(path, "w");
        VLLMC_ASSERT(f);
        fputs(configs[i][0], f);
        fclose(f);
        struct model *m = NULL;
        struct err err = {0};
        CHECK(model_load(dir, be, NULL, &m, &err) != VLLMC_OK);
        CHECK(m == NULL);
        if (!strstr(err.msg, configs[i][1]))
            fprintf(stderr, "  error was: %s\n  expected: %s\n", err.msg, configs[i][1]);
        CHECK(strstr(err.msg, configs[i][1]) != NULL);
        unlink(path);
    }
    backend_free(be);
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"tiny_llama_loads_tied", test_tiny_llama_loads_tied},
        {"missing_tensor", test_missing_tensor},
        {"shape_mismatch", test_shape_mismatch},
        {"bad_dtype", test_bad_dtype},
        {"bad_hparams", test_bad_hparams},
        {"qwen2_needs_biases", test_qwen2_needs_biases},
        {"qwen3_needs_qk_norm", test_qwen3_needs_qk_norm},
        {"load_out_of_memory", test_load_out_of_memory},
        {"llama3_rope_frequencies", test_llama3_rope_frequencies},
        {"qwen2_gguf_matches_hf_llama", test_qwen2_gguf_matches_hf_llama},
        {"hf_config_mismatch", test_hf_config_mismatch},
        {"kv_cache_prefault", test_kv_cache_prefault},
        {NULL, NULL},
    };
    int rc = check_run(cases, argc, argv);
    unlink(tmp_path);
    return rc;
}
