// The forward pass with fused q|k|v and gate|up weights (MODEL_FUSE_ON, the
// layout device backends get) against the split one on the CPU: stories260K
// and small GGUF files written here for every architecture (Llama with GQA,
// Qwen2 with q/k/v biases, Qwen3 with q/k norms) must give the same logits
// bit for bit, prefill and decode. Layers whose projections differ in dtype
// stay split.
#include <math.h>
#include <unistd.h>

#include "core/alloc.h"
#include "model/gguf_write.h"
#include "model_runner.h"

enum { L_LAYERS = 2, L_DIM = 64, L_FF = 88, L_HEADS = 4, L_KV = 2, L_HD = 16, L_VOCAB = 96 };

struct synth {
    const char *arch;
    bool bias, qk_norm;
    enum dtype wq_type; // the other matrices are f32
};

static float srand_f(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

// One tensor of the file: random values, or gains around 1 for norms.
struct synth_tensor {
    char name[64];
    enum dtype dtype;
    int n_dims;
    int64_t ne[2];
    bool gain;
};

static void synth_add(struct synth_tensor *ts, int *n, const char *fmt, int layer, enum dtype dtype,
                      int n_dims, int64_t ne0, int64_t ne1, bool gain)
{
    struct synth_tensor *t = &ts[(*n)++];
    *t = (struct synth_tensor){.dtype = dtype, .n_dims = n_dims, .ne = {ne0, ne1}, .gain = gain};
    snprintf(t->name, sizeof t->name, fmt, layer);
}

static bool synth_write(const char *path, const struct synth *sy)
{
    struct synth_tensor ts[64];
    int n = 0;
    const enum dtype F = DTYPE_F32;
    synth_add(ts, &n, "token_embd.weight", 0, F, 2, L_DIM, L_VOCAB, false);
    synth_add(ts, &n, "output_norm.weight", 0, F, 1, L_DIM, 1, true);
    synth_add(ts, &n, "output.weight", 0, F, 2, L_DIM, L_VOCAB, false);
    for (int l = 0; l < L_LAYERS; l++) {
        synth_add(ts, &n, "blk.%d.attn_norm.weight", l, F, 1, L_DIM, 1, true);
        synth_add(ts, &n, "blk.%d.attn_q.weight", l, sy->wq_type, 2, L_DIM, L_HEADS * L_HD, false);
        synth_add(ts, &n, "blk.%d.attn_k.weight", l, F, 2, L_DIM, L_KV * L_HD, false);
        synth_add(ts, &n, "blk.%d.attn_v.weight", l, F, 2, L_DIM, L_KV * L_HD, false);
        if (sy->bias) {
            synth_add(ts, &n, "blk.%d.attn_q.bias", l, F, 1, L_HEADS * L_HD, 1, false);
            synth_add(ts, &n, "blk.%d.attn_k.bias", l, F, 1, L_KV * L_HD, 1, false);
            synth_add(ts, &n, "blk.%d.attn_v.bias", l, F, 1, L_KV * L_HD, 1, false);
        }
        if (sy->qk_norm) {
            synth_add(ts, &n, "blk.%d.attn_q_norm.weight", l, F, 1, L_HD, 1, true);
            synth_add(ts, &n, "blk.%d.attn_k_norm.weight", l, F, 1, L_HD, 1, true);
        }
        synth_add(ts, &n, "blk.%d.attn_output.weight", l, F, 2, L_HEADS * L_HD, L_DIM, false);
        synth_add(ts, &n, "blk.%d.ffn_norm.weight", l, F, 1, L_DIM, 1, true);
        synth_add(ts, &n, "blk.%d.ffn_gate.weight", l, F, 2, L_DIM, L_FF, false);
        synth_add(ts, &n, "blk.%d.ffn_up.weight", l, F, 2, L_DIM, L_FF, false);
        synth_add(ts, &n, "blk.%d.ffn_down.weight", l, F, 2, L_FF, L_DIM, false);
    }
    struct err err = {0};
    struct gguf_writer *w = NULL;
    if (gguf_writer_create(&w, &err))
        return false;
    char key[96];
    bool ok = !gguf_writer_set_str(w, "general.architecture", sy->arch);
#define U32(k, v)                                                                                  \
    (snprintf(key, sizeof key, "%s." k, sy->arch), ok = ok && !gguf_writer_set_u32(w, key, v))
#define F32(k, v)                                                                                  \
    (snprintf(key, sizeof key, "%s." k, sy->arch), ok = ok && !gguf_writer_set_f32(w, key, v))
    U32("block_count", L_LAYERS);
    U32("embedding_length", L_DIM);
    U32("feed_forward_length", L_FF);
    U32("attention.head_count", L_HEADS);
    U32("attention.head_count_kv", L_KV);
    U32("attention.key_length", L_HD);
    U32("attention.value_length", L_HD);
    U32("context_length", 256);
    U32("vocab_size", L_VOCAB);
    F32("attention.layer_norm_rms_epsilon", 1e-6f);
    F32("rope.freq_base", 10000.0f);
#undef U32
#undef F32
    for (int i = 0; i < n && ok; i++)
        ok = !gguf_writer_add_tensor(w, ts[i].name, ts[i].dtype, ts[i].n_dims, ts[i].ne);
    ok = ok && !gguf_writer_open(w, path);
    unsigned st = 12345;
    for (int i = 0; i < n && ok; i++) {
        int64_t cnt = ts[i].ne[0] * ts[i].ne[1];
        size_t bytes = gguf_writer_tensor_bytes(w, (size_t)i);
        void *buf = mem_alloc(bytes);
        ok = buf != NULL;
        for (int64_t j = 0; ok && j < cnt; j++) {
            float x = ts[i].gain ? 1.0f + 0.2f * srand_f(&st) : 0.3f * srand_f(&st);
            if (ts[i].dtype == DTYPE_F16)
                ((uint16_t *)buf)[j] = f32_to_fp16(x);
            else
                ((float *)buf)[j] = x;
        }
        ok = ok && !gguf_writer_write_tensor(w, (size_t)i, buf, bytes);
        mem_free(buf);
    }
    ok = ok && !gguf_writer_close(w);
    gguf_writer_free(w);
    return ok;
}

// What the fused load of a model must give each layer: q|k|v split, all
// fused, or every layer fused q|k|v or (wv of another dtype) q|k, both kinds present.
enum want_qkv { QKV_SPLIT, QKV_FUSED, QKV_OR_QK };

// Loads path twice (split and fused), runs a prompt and a few greedy steps
// on both and compares every logit bit for bit.
static void check_fused_same(const char *path, enum want_qkv want_qkv, bool want_gu)
{
    struct model_load_params off, on;
    model_load_params_default(&off);
    model_load_params_default(&on);
    off.fuse = MODEL_FUSE_OFF;
    on.fuse = MODEL_FUSE_ON;
    struct runner a, b;
    runner_load_params = &off;
    bool ok_a = runner_init_path(&a, path, DTYPE_F32);
    runner_load_params = &on;
    bool ok_b = runner_init_path(&b, path, DTYPE_F32);
    runner_load_params = NULL;
    CHECK(ok_a && ok_b);
    if (!ok_a || !ok_b)
        goto out;
    // Default on the CPU: no fused views; forced: every layer that can.
    CHECK(a.m->layers[0].wqkv.data == NULL && a.m->layers[0].w_gate_up.data == NULL);
    int n_qkv = 0, n_qk = 0;
    for (int l = 0; l < b.m->hp.n_layers; l++) {
        const struct model_layer *L = &b.m->layers[l];
        n_qkv += L->wqkv.data != NULL;
        n_qk += L->wqk.data != NULL;
        CHECK((L->wqkv.data != NULL) == (want_qkv == QKV_FUSED) || want_qkv == QKV_OR_QK);
        CHECK(!L->wqk.data || (!L->wqkv.data && L->wv.dtype != L->wq.dtype));
        CHECK((L->w_gate_up.data != NULL) == want_gu);
        CHECK((L->bqkv.data != NULL) == (L->wqkv.data && L->bq.data));
    }
    if (want_qkv == QKV_OR_QK)
        CHECK(n_qkv > 0 && n_qk > 0 && n_qkv + n_qk == b.m->hp.n_layers);
    int n_vocab = a.m->hp.n_vocab;
    int32_t prompt[9] = {1, 5, 9, 14, 3, 27, 8, 41, 2};
    for (int seq = 0; seq < 2; seq++) {
        int np = seq ? 9 : 4;
        CHECK(runner_step(&a, seq, prompt, np, 0) && runner_step(&b, seq, prompt, np, 0));
        CHECK(!memcmp(a.logits, b.logits, (size_t)n_vocab * sizeof(float)));
        for (int i = 0; i < 6; i++) {
            int32_t tok = argmax(a.logits, n_vocab);
            CHECK(runner_step(&a, seq, &tok, 1, np + i) && runner_step(&b, seq, &tok, 1, np + i));
            bool same = !memcmp(a.logits, b.logits, (size_t)n_vocab * sizeof(float));
            if (!same)
                fprintf(stderr, "  %s: seq %d step %d: logits differ\n", path, seq, i);
            CHECK(same);
        }
    }
    printf("  %s: fused q|k|v in %d layers, q|k in %d, gate|up %s: logits identical\n", path, n_qkv,
           n_qk, b.m->layers[0].w_gate_up.data ? "yes" : "no");
out:
    runner_deinit(&a);
    runner_deinit(&b);
}

static void check_synth(const struct synth *sy, enum want_qkv want_qkv)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/vllmc_test_fused_%ld_%s%s%s.gguf", (long)getpid(), sy->arch,
             sy->bias ? "_bias" : "", sy->wq_type != DTYPE_F32 ? "_mixed" : "");
    CHECK(synth_write(path, sy));
    check_fused_same(path, want_qkv, true);
    unlink(path);
}

static void test_stories260k(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", VLLMC_SHARED_DIR);
    check_fused_same(path, QKV_FUSED, true);
    snprintf(path, sizeof path, "%s/models/stories260K-hf", VLLMC_SHARED_DIR);
    check_fused_same(path, QKV_FUSED, true);
}

static void test_llama_gqa(void)
{
    check_synth(&(struct synth){"llama", false, false, DTYPE_F32}, QKV_FUSED);
}

static void test_qwen2_bias(void)
{
    check_synth(&(struct synth){"qwen2", true, false, DTYPE_F32}, QKV_FUSED);
}

static void test_qwen3_qk_norm(void)
{
    check_synth(&(struct synth){"qwen3", false, true, DTYPE_F32}, QKV_FUSED);
}

// wq in f16 beside f32 wk, wv: q|k|v stays split, gate|up still fuses.
static void test_mixed_dtypes(void)
{
    check_synth(&(struct synth){"qwen3", false, true, DTYPE_F16}, QKV_SPLIT);
}

// llama.cpp's Q4_K_M: some layers' wv is Q6_K beside Q4_K wq and wk, so those
// layers fuse q|k (model_layer.wqk) and fill the fused output in two matmuls.
static void test_q4_k_m_qk(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/testdata/quant/models/randllama-h256.Q4_K_M.gguf",
             VLLMC_SHARED_DIR);
    check_fused_same(path, QKV_OR_QK, true);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"stories260k", test_stories260k},
        {"llama_gqa", test_llama_gqa},
        {"qwen2_bias", test_qwen2_bias},
        {"qwen3_qk_norm", test_qwen3_qk_norm},
        {"mixed_dtypes", test_mixed_dtypes},
        {"q4_k_m_qk", test_q4_k_m_qk},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
