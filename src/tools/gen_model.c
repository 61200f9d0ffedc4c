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
#include "model/gguf_write.h"
#include "tools/cli.h"
#include "tools/commands.h"

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
    for (int i = 0; i < g->n_t; i++) {
        int64_t cols = g->t[i].cols ? g->t[i].cols : g->t[i].rows;
        max_cols = cols > max_cols ? cols : max_cols;
    }
    g->row = mem_alloc((size_t)max_cols * sizeof(float));
    g->row_out = mem_alloc((size_t)max_cols * sizeof(float));
    return g->row && g->row_out ? 0 : 1;
}

// Where a tensor's rows go: put(ctx, bytes, n) returns nonzero on failure.
typedef int (*genm_put_fn)(void *ctx, const void *p, size_t n);

static int genm_put_file(void *ctx, const void *p, size_t n)
{
    return fwrite(p, 1, n, (FILE *)ctx) != n;
}

// Streams tensor ti row by row in dtype (GGUF row order when gguf).
static int genm_write_tensor(struct genm *g, int ti, bool gguf, enum dtype dtype, genm_put_fn put,
                             void *ctx)
{
    const struct genm_tensor *t = &g->t[ti];
    int64_t n_rows = t->cols ? t->rows : 1, n_cols = t->cols ? t->cols : t->rows;
    for (int64_t r = 0; r < n_rows; r++) {
        genm_fill_row(g, ti, gguf ? genm_gguf_row_source(t, r) : r, g->row);
        const void *src = g->row;
        if (dtype != DTYPE_F32) {
            uint16_t *h = g->row_out;
            for (int64_t i = 0; i < n_cols; i++)
                h[i] = dtype == DTYPE_F16 ? f32_to_fp16(g->row[i]) : f32_to_bf16(g->row[i]);
            src = h;
        }
        if (put(ctx, src, dtype_row_bytes(dtype, n_cols)))
            return 1;
    }
    return 0;
}

// ---- GGUF ----

// The bundled model's SentencePiece vocabulary (its specials, byte tokens and
// pieces), padded with unused tokens to n_vocab.
static enum vllmc_status genm_set_vocab(struct genm *g, struct gguf_writer *w)
{
    const struct gguf_file *v = g->vocab;
    enum gguf_type et;
    uint64_t n_src = 0;
    gguf_get_arr(v, "tokenizer.ggml.tokens", &et, &n_src);
    uint64_t n = (uint64_t)g->o.n_vocab, n_copy = n_src < n ? n_src : n;
    struct gguf_str *tokens = mem_calloc((size_t)n, sizeof(*tokens));
    char *pads = mem_alloc((size_t)(n - n_copy) * 24 + 1);
    float *scores = mem_alloc((size_t)n * sizeof(*scores));
    int32_t *types = mem_alloc((size_t)n * sizeof(*types));
    enum vllmc_status rc = VLLMC_ERR_NOMEM;
    if (!tokens || !pads || !scores || !types)
        goto out;
    for (uint64_t i = 0; i < n; i++) {
        double d = 0;
        int64_t t = 5; // unused
        if (i < n_copy && gguf_arr_str(v, "tokenizer.ggml.tokens", i, &tokens[i])) {
            scores[i] = gguf_arr_f64(v, "tokenizer.ggml.scores", i, &d) ? (float)d : -1e9f;
            if (!gguf_arr_i64(v, "tokenizer.ggml.token_type", i, &t))
                t = 1;
        } else {
            char *pad = pads + (i - n_copy) * 24;
            int len = snprintf(pad, 24, "<unused%llu>", (unsigned long long)(i - n_copy));
            tokens[i] = (struct gguf_str){pad, (uint64_t)len};
            scores[i] = -1e9f;
        }
        types[i] = (int32_t)t;
    }
    rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (!rc)
        rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, n);
    if (!rc)
        rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, n);
    if (!rc)
        rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n);
    const char *ids[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                         "tokenizer.ggml.unknown_token_id"};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]) && !rc; i++) {
        uint64_t id;
        if (gguf_get_u64(v, ids[i], &id) && id < n)
            rc = gguf_writer_set_u32(w, ids[i], (uint32_t)id);
    }
    if (!rc)
        rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
out:
    mem_free(types);
    mem_free(scores);
    mem_free(pads);
    mem_free(tokens);
    return rc;
}

struct genm_gguf_put {
    struct gguf_writer *w;
    size_t tensor;
};

static int genm_put_gguf(void *ctx, const void *p, size_t n)
{
    struct genm_gguf_put *g = ctx;
    return gguf_writer_write_tensor_part(g->w, g->tensor, p, n) != VLLMC_OK;
}

static int genm_write_gguf(struct genm *g)
{
    const struct genm_opts *o = &g->o;
    struct err err = {0};
    struct gguf_writer *w;
    if (gguf_writer_create(&w, &err)) {
        fprintf(stderr, "vllmc gen-model: %s\n", err.msg);
        return 1;
    }
    char name[96];
    snprintf(name, sizeof(name), "random-llama-%ldL-%ld-%s", o->n_layers, o->dim,
             dtype_name(o->dtype));
    struct {
        const char *key;
        uint32_t v;
    } u32s[] = {
        {"general.file_type", o->dtype == DTYPE_F32 ? 0u : o->dtype == DTYPE_F16 ? 1u : 32u},
        {"llama.block_count", (uint32_t)o->n_layers},
        {"llama.context_length", GEN_CONTEXT},
        {"llama.embedding_length", (uint32_t)o->dim},
        {"llama.feed_forward_length", (uint32_t)o->ff_dim},
        {"llama.attention.head_count", (uint32_t)o->n_heads},
        {"llama.attention.head_count_kv", (uint32_t)o->n_kv_heads},
        {"llama.attention.key_length", (uint32_t)o->head_dim},
        {"llama.attention.value_length", (uint32_t)o->head_dim},
        {"llama.rope.dimension_count", (uint32_t)o->head_dim},
        {"llama.vocab_size", (uint32_t)o->n_vocab},
    };
    enum vllmc_status rc = gguf_writer_set_str(w, "general.architecture", "llama");
    if (!rc)
        rc = gguf_writer_set_str(w, "general.name", name);
    for (size_t i = 0; i < sizeof(u32s) / sizeof(u32s[0]) && !rc; i++)
        rc = gguf_writer_set_u32(w, u32s[i].key, u32s[i].v);
    if (!rc)
        rc = gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-6f);
    if (!rc)
        rc = gguf_writer_set_f32(w, "llama.rope.freq_base", 1000000.0f);
    if (!rc && g->vocab)
        rc = genm_set_vocab(g, w);
    for (int i = 0; i < g->n_t && !rc; i++) {
        const struct genm_tensor *t = &g->t[i];
        // Norm weights stay F32, as llama.cpp's converter keeps 1-D tensors.
        int64_t ne[2] = {t->cols ? t->cols : t->rows, t->rows}; // ne[0]: innermost
        rc = gguf_writer_add_tensor(w, t->gguf_name, t->cols ? o->dtype : DTYPE_F32,
                                    t->cols ? 2 : 1, ne);
    }
    if (!rc)
        rc = gguf_writer_open(w, o->out);
    for (int i = 0; i < g->n_t && !rc; i++) {
        struct genm_gguf_put put = {w, (size_t)i};
        if (genm_write_tensor(g, i, true, g->t[i].cols ? o->dtype : DTYPE_F32, genm_put_gguf,
                              &put))
            rc = gguf_writer_err(w)->code ? gguf_writer_err(w)->code : VLLMC_ERR_IO;
    }
    if (!rc)
        rc = gguf_writer_close(w);
    if (rc)
        fprintf(stderr, "vllmc gen-model: %s: %s\n", o->out,
                gguf_writer_err(w)->msg[0] ? gguf_writer_err(w)->msg : "out of memory");
    gguf_writer_free(w);
    return rc ? 1 : 0;
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
        rc = genm_write_tensor(g, i, false, o->dtype, genm_put_file, f);
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
