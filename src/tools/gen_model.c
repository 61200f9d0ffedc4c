// `vllmc gen-model`: writes a Llama model of any shape with random weights, as
// GGUF (F32, F16, BF16) or as a Hugging Face folder (config.json + one
// model.safetensors), for benchmarks at real shapes without downloads. Both
// formats hold the same numbers: rows come from a generator seeded per (tensor,
// row), and the GGUF copy of q/k is permuted to GGUF's adjacent-pair RoPE
// layout as llama.cpp's converter does.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/dtype.h"
#include "model/gguf.h"
#include "tools/cli.h"
#include "tools/commands.h"

#define GEN_ALIGN 32
#define GEN_CONTEXT 4096

struct genm_opts {
    const char *out;
    const char *format;      // "gguf" or "safetensors"
    const char *tokenizer;   // "bundled" (stories vocabulary, padded) or "none"
    enum dtype dtype;
    long n_layers, dim, ff_dim, n_heads, n_kv_heads, head_dim, n_vocab;
    long seed;
    bool tied;               // no output matrix: the embedding table is the lm_head
};

// One weight tensor: [rows, cols] (rows outermost); cols 0 for a vector.
struct genm_tensor {
    char gguf_name[64];
    char hf_name[96];
    int64_t rows;
    int64_t cols;            // 0 = vector of rows elements (norm weights: all ones)
    int rope_heads;          // > 0: q/k weight of this many heads, permuted in GGUF
    uint64_t offset;         // byte offset in the data section
    size_t n_bytes;
};

struct genm {
    struct genm_opts o;
    struct genm_tensor *t;   // owned, [n_t]
    int n_t;
    struct gguf_file *vocab; // owned: the bundled model, source of the tokenizer; or NULL
    float *row;              // [max cols] scratch
    void *row_out;           // [max cols] converted
};

static void genm_usage(FILE *f)
{
    fprintf(f,
            "usage: vllmc gen-model -o PATH [options]\n"
            "Writes a Llama model with random weights (default: the Qwen3-0.6B shape with a\n"
            "32000-token vocabulary, untied output, as llama.cpp's comparison model).\n"
            "  -o, --output PATH         .gguf file, or a folder for safetensors\n"
            "      --format gguf|safetensors   (default gguf)\n"
            "      --dtype f32|f16|bf16  weight type (default f32)\n"
            "      --layers N            (default 28)\n"
            "      --dim N               hidden size (default 1024)\n"
            "      --ffn N               feed-forward size (default 3072)\n"
            "      --heads N             query heads (default 16)\n"
            "      --kv-heads N          key/value heads (default 8)\n"
            "      --head-dim N          (default 128)\n"
            "      --vocab N             (default 32000)\n"
            "      --seed N              (default 1)\n"
            "      --tie-embeddings      no separate output matrix (as stories15M, Qwen3-0.6B)\n"
            "      --tokenizer bundled|none  GGUF only: the bundled model's vocabulary padded\n"
            "                            with unused tokens (default), or no tokenizer\n");
}

static int genm_parse(struct genm_opts *o, int argc, char **argv)
{
    *o = (struct genm_opts){.format = "gguf", .tokenizer = "bundled", .dtype = DTYPE_F32,
                            .n_layers = 28, .dim = 1024, .ff_dim = 3072, .n_heads = 16,
                            .n_kv_heads = 8, .head_dim = 128, .n_vocab = 32000, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            genm_usage(stdout);
            return -1;
        } else if (!strcmp(a, "--tie-embeddings")) {
            o->tied = true;
            continue;
        } else if (cli_opt(argc, argv, &i, "--output", "-o", &v)) {
            o->out = v;
        } else if (cli_opt(argc, argv, &i, "--format", NULL, &v)) {
            o->format = v;
            ok = v && (!strcmp(v, "gguf") || !strcmp(v, "safetensors"));
        } else if (cli_opt(argc, argv, &i, "--tokenizer", NULL, &v)) {
            o->tokenizer = v;
            ok = v && (!strcmp(v, "bundled") || !strcmp(v, "none"));
        } else if (cli_opt(argc, argv, &i, "--dtype", NULL, &v)) {
            ok = v && (!strcmp(v, "f32") || !strcmp(v, "f16") || !strcmp(v, "bf16"));
            if (ok)
                o->dtype = !strcmp(v, "f32") ? DTYPE_F32 : !strcmp(v, "f16") ? DTYPE_F16
                                                                             : DTYPE_BF16;
        } else if (cli_opt(argc, argv, &i, "--layers", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, 1024, &o->n_layers);
        } else if (cli_opt(argc, argv, &i, "--dim", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, 1 << 16, &o->dim);
        } else if (cli_opt(argc, argv, &i, "--ffn", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, 1 << 18, &o->ff_dim);
        } else if (cli_opt(argc, argv, &i, "--heads", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, 1024, &o->n_heads);
        } else if (cli_opt(argc, argv, &i, "--kv-heads", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, 1024, &o->n_kv_heads);
        } else if (cli_opt(argc, argv, &i, "--head-dim", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 2, 1024, &o->head_dim) && o->head_dim % 2 == 0;
        } else if (cli_opt(argc, argv, &i, "--vocab", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, 1 << 22, &o->n_vocab);
        } else if (cli_opt(argc, argv, &i, "--seed", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 0, 0x7fffffffL, &o->seed);
        } else {
            fprintf(stderr, "vllmc gen-model: unknown option '%s'\n", a);
            genm_usage(stderr);
            return 2;
        }
        if (!ok || !v) {
            if (v)
                fprintf(stderr, "vllmc gen-model: bad value for %s: '%s'\n", a, v);
            return 2;
        }
    }
    if (!o->out) {
        fprintf(stderr, "vllmc gen-model: -o PATH is required\n");
        genm_usage(stderr);
        return 2;
    }
    if (o->n_heads % o->n_kv_heads) {
        fprintf(stderr, "vllmc gen-model: --heads must be a multiple of --kv-heads\n");
        return 2;
    }
    return 0;
}

// ---- the weights ----

static uint64_t genm_mix(uint64_t z)
{
    // splitmix64 finalizer
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Row r of tensor ti, in the Hugging Face layout. Matrices are uniform with
// standard deviation 1/sqrt(cols), so activations stay O(1) through every
// layer and no value overflows F16; norm weights are 1.
static void genm_fill_row(const struct genm *g, int ti, int64_t r, float *row)
{
    const struct genm_tensor *t = &g->t[ti];
    if (!t->cols) {
        for (int64_t i = 0; i < t->rows; i++)
            row[i] = 1.0f;
        return;
    }
    uint64_t s = genm_mix(((uint64_t)g->o.seed << 40) ^ ((uint64_t)ti << 32) ^ (uint64_t)r) | 1;
    float scale = sqrtf(3.0f / (float)t->cols);
    for (int64_t i = 0; i < t->cols; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        float u = (float)(s >> 40) * 0x1.0p-24f; // [0, 1)
        row[i] = (2.0f * u - 1.0f) * scale;
    }
}

// GGUF row i of a q/k weight holds Hugging Face row perm(i): within a head,
// GGUF interleaves the two rotate-half halves (llama.cpp's converter).
static int64_t genm_gguf_row_source(const struct genm_tensor *t, int64_t i)
{
    if (t->rope_heads <= 0)
        return i;
    int64_t head_dim = t->rows / t->rope_heads, half = head_dim / 2;
    int64_t h = i / head_dim, j = i % head_dim;
    return h * head_dim + (j % 2) * half + j / 2;
}

static void genm_add(struct genm *g, const char *gguf_name, const char *hf_name, int64_t rows,
                     int64_t cols, int rope_heads)
{
    struct genm_tensor *t = &g->t[g->n_t++];
    snprintf(t->gguf_name, sizeof(t->gguf_name), "%s", gguf_name);
    snprintf(t->hf_name, sizeof(t->hf_name), "%s", hf_name);
    t->rows = rows;
    t->cols = cols;
    t->rope_heads = rope_heads;
}

static int genm_plan(struct genm *g)
{
    const struct genm_opts *o = &g->o;
    int64_t dim = o->dim, q_dim = o->n_heads * o->head_dim, kv_dim = o->n_kv_heads * o->head_dim;
    g->t = mem_calloc((size_t)(3 + 9 * o->n_layers), sizeof(*g->t));
    if (!g->t)
        return 1;
    genm_add(g, "token_embd.weight", "model.embed_tokens.weight", o->n_vocab, dim, 0);
    for (long l = 0; l < o->n_layers; l++) {
        char a[64], b[96];
#define GENM_LAYER(gg, hf, rows, cols, rope)                                                       \
    snprintf(a, sizeof(a), "blk.%ld.%s.weight", l, gg);                                            \
    snprintf(b, sizeof(b), "model.layers.%ld.%s.weight", l, hf);                                   \
    genm_add(g, a, b, rows, cols, rope)
        GENM_LAYER("attn_norm", "input_layernorm", dim, 0, 0);
        GENM_LAYER("attn_q", "self_attn.q_proj", q_dim, dim, (int)o->n_heads);
        GENM_LAYER("attn_k", "self_attn.k_proj", kv_dim, dim, (int)o->n_kv_heads);
        GENM_LAYER("attn_v", "self_attn.v_proj", kv_dim, dim, 0);
        GENM_LAYER("attn_output", "self_attn.o_proj", dim, q_dim, 0);
        GENM_LAYER("ffn_norm", "post_attention_layernorm", dim, 0, 0);
        GENM_LAYER("ffn_gate", "mlp.gate_proj", o->ff_dim, dim, 0);
        GENM_LAYER("ffn_up", "mlp.up_proj", o->ff_dim, dim, 0);
        GENM_LAYER("ffn_down", "mlp.down_proj", dim, o->ff_dim, 0);
#undef GENM_LAYER
    }
    genm_add(g, "output_norm.weight", "model.norm.weight", dim, 0, 0);
    if (!o->tied)
        genm_add(g, "output.weight", "lm_head.weight", o->n_vocab, dim, 0);
    int64_t max_cols = dim;
    uint64_t off = 0;
    size_t esize = dtype_row_bytes(o->dtype, 1);
    for (int i = 0; i < g->n_t; i++) {
        struct genm_tensor *t = &g->t[i];
        int64_t cols = t->cols ? t->cols : t->rows;
        max_cols = cols > max_cols ? cols : max_cols;
        // GGUF keeps 1-D tensors in F32.
        t->n_bytes = t->cols ? (size_t)(t->rows * t->cols) * esize : (size_t)t->rows * 4;
        t->offset = off;
        off += (t->n_bytes + GEN_ALIGN - 1) / GEN_ALIGN * GEN_ALIGN;
    }
    g->row = mem_alloc((size_t)max_cols * sizeof(float));
    g->row_out = mem_alloc((size_t)max_cols * sizeof(float));
    return g->row && g->row_out ? 0 : 1;
}

static int genm_write_tensor(struct genm *g, FILE *f, int ti, bool gguf)
{
    const struct genm_tensor *t = &g->t[ti];
    int64_t n_rows = t->cols ? t->rows : 1, n_cols = t->cols ? t->cols : t->rows;
    for (int64_t r = 0; r < n_rows; r++) {
        genm_fill_row(g, ti, gguf ? genm_gguf_row_source(t, r) : r, g->row);
        const void *src = g->row;
        if (g->o.dtype != DTYPE_F32) {
            uint16_t *h = g->row_out;
            for (int64_t i = 0; i < n_cols; i++)
                h[i] = g->o.dtype == DTYPE_F16 ? f32_to_fp16(g->row[i]) : f32_to_bf16(g->row[i]);
            src = h;
        }
        size_t n = dtype_row_bytes(g->o.dtype, n_cols);
        if (fwrite(src, 1, n, f) != n)
            return 1;
    }
    return 0;
}

// ---- GGUF ----

static void gguf_put_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void gguf_put_u64(FILE *f, uint64_t v) { fwrite(&v, 8, 1, f); }

static void gguf_put_str(FILE *f, const char *s, size_t n)
{
    gguf_put_u64(f, n);
    fwrite(s, 1, n, f);
}

static void gguf_put_key(FILE *f, const char *key, enum gguf_type type)
{
    gguf_put_str(f, key, strlen(key));
    gguf_put_u32(f, (uint32_t)type);
}

static void gguf_kv_u32(FILE *f, const char *key, uint32_t v)
{
    gguf_put_key(f, key, GGUF_TYPE_UINT32);
    gguf_put_u32(f, v);
}

static void gguf_kv_f32(FILE *f, const char *key, float v)
{
    gguf_put_key(f, key, GGUF_TYPE_FLOAT32);
    fwrite(&v, 4, 1, f);
}

static void gguf_kv_str(FILE *f, const char *key, const char *v)
{
    gguf_put_key(f, key, GGUF_TYPE_STRING);
    gguf_put_str(f, v, strlen(v));
}

static void gguf_kv_bool(FILE *f, const char *key, bool v)
{
    gguf_put_key(f, key, GGUF_TYPE_BOOL);
    uint8_t b = v;
    fwrite(&b, 1, 1, f);
}

// The bundled model's SentencePiece vocabulary (its specials, byte tokens and
// pieces), padded with unused tokens to n_vocab. Returns the kv count written.
static int genm_write_vocab(struct genm *g, FILE *f)
{
    const struct gguf_file *v = g->vocab;
    enum gguf_type et;
    uint64_t n_src = 0;
    gguf_get_arr(v, "tokenizer.ggml.tokens", &et, &n_src);
    uint64_t n = (uint64_t)g->o.n_vocab, n_copy = n_src < n ? n_src : n;
    gguf_kv_str(f, "tokenizer.ggml.model", "llama");
    gguf_put_key(f, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY);
    gguf_put_u32(f, GGUF_TYPE_STRING);
    gguf_put_u64(f, n);
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s;
        char pad[32];
        if (i < n_copy && gguf_arr_str(v, "tokenizer.ggml.tokens", i, &s)) {
            gguf_put_str(f, s.ptr, s.len);
        } else {
            int len = snprintf(pad, sizeof(pad), "<unused%llu>", (unsigned long long)(i - n_copy));
            gguf_put_str(f, pad, (size_t)len);
        }
    }
    gguf_put_key(f, "tokenizer.ggml.scores", GGUF_TYPE_ARRAY);
    gguf_put_u32(f, GGUF_TYPE_FLOAT32);
    gguf_put_u64(f, n);
    for (uint64_t i = 0; i < n; i++) {
        double d = 0;
        float s = i < n_copy && gguf_arr_f64(v, "tokenizer.ggml.scores", i, &d) ? (float)d : -1e9f;
        fwrite(&s, 4, 1, f);
    }
    gguf_put_key(f, "tokenizer.ggml.token_type", GGUF_TYPE_ARRAY);
    gguf_put_u32(f, GGUF_TYPE_INT32);
    gguf_put_u64(f, n);
    for (uint64_t i = 0; i < n; i++) {
        int64_t t = 5; // unused
        if (i < n_copy && !gguf_arr_i64(v, "tokenizer.ggml.token_type", i, &t))
            t = 1;
        int32_t t32 = (int32_t)t;
        fwrite(&t32, 4, 1, f);
    }
    uint64_t id;
    const char *ids[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                         "tokenizer.ggml.unknown_token_id"};
    int n_kv = 4;
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        if (gguf_get_u64(v, ids[i], &id) && id < n) {
            gguf_kv_u32(f, ids[i], (uint32_t)id);
            n_kv++;
        }
    }
    return n_kv;
}

static int genm_write_gguf(struct genm *g)
{
    const struct genm_opts *o = &g->o;
    FILE *f = fopen(o->out, "wb");
    if (!f) {
        fprintf(stderr, "vllmc gen-model: %s: %s\n", o->out, strerror(errno));
        return 1;
    }
    // The kv count precedes the kvs; write a placeholder and patch it.
    fwrite("GGUF", 1, 4, f);
    gguf_put_u32(f, 3);
    gguf_put_u64(f, (uint64_t)g->n_t);
    long n_kv_at = ftell(f);
    gguf_put_u64(f, 0);
    uint64_t n_kv = 0;
    char name[96];
    snprintf(name, sizeof(name), "random-llama-%ldL-%ld-%s", o->n_layers, o->dim,
             dtype_name(o->dtype));
    gguf_kv_str(f, "general.architecture", "llama"), n_kv++;
    gguf_kv_str(f, "general.name", name), n_kv++;
    gguf_kv_u32(f, "general.alignment", GEN_ALIGN), n_kv++;
    gguf_kv_u32(f, "general.file_type", o->dtype == DTYPE_F32 ? 0 : o->dtype == DTYPE_F16 ? 1 : 32),
        n_kv++;
    gguf_kv_u32(f, "llama.block_count", (uint32_t)o->n_layers), n_kv++;
    gguf_kv_u32(f, "llama.context_length", GEN_CONTEXT), n_kv++;
    gguf_kv_u32(f, "llama.embedding_length", (uint32_t)o->dim), n_kv++;
    gguf_kv_u32(f, "llama.feed_forward_length", (uint32_t)o->ff_dim), n_kv++;
    gguf_kv_u32(f, "llama.attention.head_count", (uint32_t)o->n_heads), n_kv++;
    gguf_kv_u32(f, "llama.attention.head_count_kv", (uint32_t)o->n_kv_heads), n_kv++;
    gguf_kv_u32(f, "llama.attention.key_length", (uint32_t)o->head_dim), n_kv++;
    gguf_kv_u32(f, "llama.attention.value_length", (uint32_t)o->head_dim), n_kv++;
    gguf_kv_u32(f, "llama.rope.dimension_count", (uint32_t)o->head_dim), n_kv++;
    gguf_kv_u32(f, "llama.vocab_size", (uint32_t)o->n_vocab), n_kv++;
    gguf_kv_f32(f, "llama.attention.layer_norm_rms_epsilon", 1e-6f), n_kv++;
    gguf_kv_f32(f, "llama.rope.freq_base", 1000000.0f), n_kv++;
    if (g->vocab) {
        n_kv += (uint64_t)genm_write_vocab(g, f);
        gguf_kv_bool(f, "tokenizer.ggml.add_bos_token", true), n_kv++;
    }
    for (int i = 0; i < g->n_t; i++) {
        const struct genm_tensor *t = &g->t[i];
        gguf_put_str(f, t->gguf_name, strlen(t->gguf_name));
        if (t->cols) {
            gguf_put_u32(f, 2);
            gguf_put_u64(f, (uint64_t)t->cols); // ne[0]: innermost
            gguf_put_u64(f, (uint64_t)t->rows);
        } else {
            gguf_put_u32(f, 1);
            gguf_put_u64(f, (uint64_t)t->rows);
        }
        // Norm weights stay F32, as llama.cpp's converter keeps 1-D tensors.
        gguf_put_u32(f, (uint32_t)(t->cols ? o->dtype : DTYPE_F32));
        gguf_put_u64(f, t->offset);
    }
    int rc = 0;
    enum dtype wanted = g->o.dtype;
    static const char zeros[GEN_ALIGN];
    long pos = ftell(f);
    fwrite(zeros, 1, (size_t)((GEN_ALIGN - pos % GEN_ALIGN) % GEN_ALIGN), f);
    long data0 = ftell(f);
    for (int i = 0; i < g->n_t && !rc; i++) {
        struct genm_tensor *t = &g->t[i];
        long at = ftell(f) - data0;
        if (at < (long)t->offset)
            fwrite(zeros, 1, (size_t)((long)t->offset - at), f);
        g->o.dtype = t->cols ? wanted : DTYPE_F32;
        rc = genm_write_tensor(g, f, i, true);
        g->o.dtype = wanted;
    }
    fseek(f, n_kv_at, SEEK_SET);
    gguf_put_u64(f, n_kv);
    if (ferror(f) || fclose(f) || rc) {
        fprintf(stderr, "vllmc gen-model: %s: write failed\n", o->out);
        return 1;
    }
    return 0;
}

// ---- Hugging Face folder ----

static int genm_write_config(const struct genm *g, const char *dir)
{
    const struct genm_opts *o = &g->o;
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "vllmc gen-model: %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f,
            "{\n"
            "  \"architectures\": [\"LlamaForCausalLM\"],\n"
            "  \"model_type\": \"llama\",\n"
            "  \"hidden_size\": %ld,\n"
            "  \"intermediate_size\": %ld,\n"
            "  \"num_hidden_layers\": %ld,\n"
            "  \"num_attention_heads\": %ld,\n"
            "  \"num_key_value_heads\": %ld,\n"
            "  \"head_dim\": %ld,\n"
            "  \"vocab_size\": %ld,\n"
            "  \"max_position_embeddings\": %d,\n"
            "  \"rms_norm_eps\": 1e-06,\n"
            "  \"rope_theta\": 1000000.0,\n"
            "  \"hidden_act\": \"silu\",\n"
            "  \"tie_word_embeddings\": %s,\n"
            "  \"bos_token_id\": 1,\n"
            "  \"eos_token_id\": 2,\n"
            "  \"torch_dtype\": \"%s\"\n"
            "}\n",
            o->dim, o->ff_dim, o->n_layers, o->n_heads, o->n_kv_heads, o->head_dim, o->n_vocab,
            GEN_CONTEXT, o->tied ? "true" : "false",
            o->dtype == DTYPE_F32 ? "float32" : o->dtype == DTYPE_F16 ? "float16" : "bfloat16");
    return fclose(f) ? 1 : 0;
}

static int genm_write_safetensors(struct genm *g)
{
    const struct genm_opts *o = &g->o;
    if (mkdir(o->out, 0755) && errno != EEXIST) {
        fprintf(stderr, "vllmc gen-model: %s: %s\n", o->out, strerror(errno));
        return 1;
    }
    if (genm_write_config(g, o->out))
        return 1;
    const char *st_dtype = o->dtype == DTYPE_F32 ? "F32" : o->dtype == DTYPE_F16 ? "F16" : "BF16";
    // Header: JSON padded with spaces to 8 bytes; offsets packed, no alignment.
    size_t cap = (size_t)g->n_t * 192 + 64, len = 0;
    char *hdr = mem_alloc(cap);
    if (!hdr)
        return 1;
    len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    size_t esize = dtype_row_bytes(o->dtype, 1);
    for (int i = 0; i < g->n_t; i++) {
        const struct genm_tensor *t = &g->t[i];
        uint64_t n = (uint64_t)(t->cols ? t->rows * t->cols : t->rows) * esize;
        if (t->cols)
            len += (size_t)snprintf(hdr + len, cap - len,
                                    ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],"
                                    "\"data_offsets\":[%llu,%llu]}",
                                    t->hf_name, st_dtype, (long long)t->rows, (long long)t->cols,
                                    (unsigned long long)off, (unsigned long long)(off + n));
        else
            len += (size_t)snprintf(hdr + len, cap - len,
                                    ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld],"
                                    "\"data_offsets\":[%llu,%llu]}",
                                    t->hf_name, st_dtype, (long long)t->rows,
                                    (unsigned long long)off, (unsigned long long)(off + n));
        off += n;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8)
        hdr[len++] = ' ';
    char path[4096];
    snprintf(path, sizeof(path), "%s/model.safetensors", o->out);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "vllmc gen-model: %s: %s\n", path, strerror(errno));
        mem_free(hdr);
        return 1;
    }
    uint64_t hlen = len;
    fwrite(&hlen, 8, 1, f);
    fwrite(hdr, 1, len, f);
    mem_free(hdr);
    int rc = 0;
    for (int i = 0; i < g->n_t && !rc; i++)
        rc = genm_write_tensor(g, f, i, false);
    if (ferror(f) || fclose(f) || rc) {
        fprintf(stderr, "vllmc gen-model: %s: write failed\n", path);
        return 1;
    }
    return 0;
}

int gen_model_main(int argc, char **argv)
{
    struct genm g = {0};
    int rc = genm_parse(&g.o, argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
    bool gguf = !strcmp(g.o.format, "gguf");
    if (gguf && !strcmp(g.o.tokenizer, "bundled")) {
        struct err err = {0};
        if (gguf_open(cli_default_model(), &g.vocab, &err)) {
            fprintf(stderr, "vllmc gen-model: tokenizer source: %s\n", err.msg);
            return 1;
        }
    }
    rc = genm_plan(&g);
    if (!rc)
        rc = gguf ? genm_write_gguf(&g) : genm_write_safetensors(&g);
    if (!rc) {
        uint64_t n_params = 0;
        for (int i = 0; i < g.n_t; i++)
            n_params += (uint64_t)(g.t[i].cols ? g.t[i].rows * g.t[i].cols : g.t[i].rows);
        fprintf(stderr, "vllmc gen-model: wrote %s (%s, %s, %.1fM parameters)\n", g.o.out,
                g.o.format, dtype_name(g.o.dtype), (double)n_params / 1e6);
    }
    gguf_free(g.vocab);
    mem_free(g.row);
    mem_free(g.row_out);
    mem_free(g.t);
    return rc;
}
