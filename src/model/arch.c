// Architecture table, tensor names and GGUF hyper-parameters. Every supported
// architecture is a llama block plus switches (biases, q/k norm, RoPE pairing),
// so one table describes them all.
#include "model/arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/gguf.h"

static const struct arch_desc arch_table[] = {
    {MODEL_ARCH_LLAMA, "llama", false, false, false},
    {MODEL_ARCH_QWEN2, "qwen2", true, false, true},
    {MODEL_ARCH_QWEN3, "qwen3", false, true, true},
};

static const char *const arch_names[] = {
#define MODEL_ARCH_NAME(name, text) text,
    MODEL_ARCH_LIST(MODEL_ARCH_NAME)
#undef MODEL_ARCH_NAME
};

const char *model_arch_name(enum model_arch arch)
{
    return (unsigned)arch < MODEL_ARCH_COUNT ? arch_names[arch] : "unknown";
}

const struct arch_desc *arch_find(const char *name, size_t len)
{
    // Mistral is a llama block with a sliding window that its released
    // checkpoints never reach; GGUF converters write it as "llama" anyway.
    if (len == 7 && !memcmp(name, "mistral", 7))
        return &arch_table[0];
    for (size_t i = 0; i < sizeof(arch_table) / sizeof(arch_table[0]); i++)
        if (strlen(arch_table[i].gguf_name) == len && !memcmp(arch_table[i].gguf_name, name, len))
            return &arch_table[i];
    return NULL;
}

const struct arch_desc *arch_get(enum model_arch arch)
{
    for (size_t i = 0; i < sizeof(arch_table) / sizeof(arch_table[0]); i++)
        if (arch_table[i].arch == arch)
            return &arch_table[i];
    return NULL;
}

// ---- tensor names ----

// GGUF (llama.cpp) and Hugging Face names; "%d" is the layer.
static const char *const weight_names[ARCH_W_COUNT][2] = {
    [ARCH_W_TOKEN_EMBD] = {"token_embd.weight", "model.embed_tokens.weight"},
    [ARCH_W_OUTPUT_NORM] = {"output_norm.weight", "model.norm.weight"},
    [ARCH_W_OUTPUT] = {"output.weight", "lm_head.weight"},
    [ARCH_W_ROPE_FREQS] = {"rope_freqs.weight", NULL},
    [ARCH_W_ATTN_NORM] = {"blk.%d.attn_norm.weight", "model.layers.%d.input_layernorm.weight"},
    [ARCH_W_Q] = {"blk.%d.attn_q.weight", "model.layers.%d.self_attn.q_proj.weight"},
    [ARCH_W_K] = {"blk.%d.attn_k.weight", "model.layers.%d.self_attn.k_proj.weight"},
    [ARCH_W_V] = {"blk.%d.attn_v.weight", "model.layers.%d.self_attn.v_proj.weight"},
    [ARCH_W_BQ] = {"blk.%d.attn_q.bias", "model.layers.%d.self_attn.q_proj.bias"},
    [ARCH_W_BK] = {"blk.%d.attn_k.bias", "model.layers.%d.self_attn.k_proj.bias"},
    [ARCH_W_BV] = {"blk.%d.attn_v.bias", "model.layers.%d.self_attn.v_proj.bias"},
    [ARCH_W_Q_NORM] = {"blk.%d.attn_q_norm.weight", "model.layers.%d.self_attn.q_norm.weight"},
    [ARCH_W_K_NORM] = {"blk.%d.attn_k_norm.weight", "model.layers.%d.self_attn.k_norm.weight"},
    [ARCH_W_O] = {"blk.%d.attn_output.weight", "model.layers.%d.self_attn.o_proj.weight"},
    [ARCH_W_FFN_NORM] = {"blk.%d.ffn_norm.weight",
                         "model.layers.%d.post_attention_layernorm.weight"},
    [ARCH_W_GATE] = {"blk.%d.ffn_gate.weight", "model.layers.%d.mlp.gate_proj.weight"},
    [ARCH_W_UP] = {"blk.%d.ffn_up.weight", "model.layers.%d.mlp.up_proj.weight"},
    [ARCH_W_DOWN] = {"blk.%d.ffn_down.weight", "model.layers.%d.mlp.down_proj.weight"},
};

bool arch_weight_name(enum model_format fmt, enum arch_weight w, int layer, char *buf, size_t n)
{
    const char *fmt_str = weight_names[w][fmt == MODEL_FORMAT_GGUF ? 0 : 1];
    if (!fmt_str)
        return false;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    int k = w >= ARCH_W_FIRST_LAYER ? snprintf(buf, n, fmt_str, layer)
                                    : snprintf(buf, n, "%s", fmt_str);
#pragma GCC diagnostic pop
    return k > 0 && (size_t)k < n;
}

// ---- GGUF hyper-parameters ----

static bool gguf_arch_u64(const struct gguf_file *g, const char *arch, const char *key,
                          uint64_t *out)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    return gguf_get_u64(g, full, out);
}

static bool gguf_arch_f64(const struct gguf_file *g, const char *arch, const char *key, double *out)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    return gguf_get_f64(g, full, out);
}

// Reads a positive count that must fit an int; missing keys keep *out unless required.
static enum vllmc_status gguf_read_count(const struct gguf_file *g, const char *path,
                                         const char *arch, const char *key, bool required, int *out,
                                         struct err *err)
{
    uint64_t v;
    if (!gguf_arch_u64(g, arch, key, &v)) {
        char full[128];
        snprintf(full, sizeof(full), "%s.%s", arch, key);
        if (!required && !gguf_find_kv(g, full))
            return VLLMC_OK;
        return err_set(err, VLLMC_ERR_FORMAT, "%s: metadata %s is %s", path, full,
                       gguf_find_kv(g, full) ? "not an unsigned integer" : "missing");
    }
    if (v == 0 || v > (1u << 30))
        return err_set(err, VLLMC_ERR_FORMAT, "%s: metadata %s.%s = %llu is out of range", path,
                       arch, key, (unsigned long long)v);
    *out = (int)v;
    return VLLMC_OK;
}

enum vllmc_status arch_hparams_from_gguf(const struct gguf_file *g, const char *path,
                                         struct model_hparams *hp, struct err *err)
{
    struct gguf_str s;
    if (!gguf_get_str(g, "general.architecture", &s))
        return err_set(err, VLLMC_ERR_FORMAT, "%s: metadata general.architecture is missing", path);
    char arch[64];
    if (s.len >= sizeof(arch))
        return err_set(err, VLLMC_ERR_UNSUPPORTED, "%s: unsupported architecture (name too long)",
                       path);
    memcpy(arch, s.ptr, s.len);
    arch[s.len] = '\0';
    const struct arch_desc *d = arch_find(arch, s.len);
    if (!d || strlen(arch) != s.len)
        return err_set(err, VLLMC_ERR_UNSUPPORTED,
                       "%s: unsupported architecture '%s' (supported: llama, qwen2, qwen3)", path,
                       arch);

    *hp = (struct model_hparams){.arch = d->arch,
                                 .rope_theta = 10000.0f,
                                 .bos_id = -1,
                                 .eos_id = -1,
                                 .rope_neox = d->gguf_rope_neox,
                                 .qkv_bias = d->qkv_bias,
                                 .qk_norm = d->qk_norm};
    enum vllmc_status rc;
    if ((rc = gguf_read_count(g, path, arch, "block_count", true, &hp->n_layers, err)) ||
        (rc = gguf_read_count(g, path, arch, "embedding_length", true, &hp->dim, err)) ||
        (rc = gguf_read_count(g, path, arch, "feed_forward_length", true, &hp->ff_dim, err)) ||
        (rc = gguf_read_count(g, path, arch, "attention.head_count", true, &hp->n_heads, err)))
        return rc;
    hp->n_kv_heads = hp->n_heads;
    if ((rc = gguf_read_count(g, path, arch, "attention.head_count_kv", false, &hp->n_kv_heads,
                              err)))
        return rc;
    hp->head_dim = hp->dim % hp->n_heads ? 0 : hp->dim / hp->n_heads;
    if ((rc = gguf_read_count(g, path, arch, "attention.key_length", false, &hp->head_dim, err)))
        return rc;
    int value_length = hp->head_dim;
    if ((rc = gguf_read_count(g, path, arch, "attention.value_length", false, &value_length, err)))
        return rc;
    if (value_length != hp->head_dim)
        return err_set(err, VLLMC_ERR_UNSUPPORTED,
                       "%s: attention.value_length %d differs from key_length %d", path,
                       value_length, hp->head_dim);
    hp->rope_dim = hp->head_dim;
    if ((rc = gguf_read_count(g, path, arch, "rope.dimension_count", false, &hp->rope_dim, err)) ||
        (rc = gguf_read_count(g, path, arch, "context_length", false, &hp->n_ctx_train, err)) ||
        (rc = gguf_read_count(g, path, arch, "vocab_size", false, &hp->n_vocab, err)))
        return rc;

    double f;
    if (!gguf_arch_f64(g, arch, "attention.layer_norm_rms_epsilon", &f))
        return err_set(err, VLLMC_ERR_FORMAT,
                       "%s: metadata %s.attention.layer_norm_rms_epsilon is missing", path, arch);
    hp->rms_eps = (float)f;
    if (gguf_arch_f64(g, arch, "rope.freq_base", &f))
        hp->rope_theta = (float)f;

    hp->rope_factor = 1.0f;
    char key[128];
    snprintf(key, sizeof(key), "%s.rope.scaling.type", arch);
    if (gguf_get_str(g, key, &s) && !gguf_str_eq(s, "none")) {
        if (!gguf_str_eq(s, "linear"))
            return err_set(err, VLLMC_ERR_UNSUPPORTED, "%s: RoPE scaling '%.*s' is not supported",
                           path, (int)(s.len > 32 ? 32 : s.len), s.ptr);
        if (!gguf_arch_f64(g, arch, "rope.scaling.factor", &f))
            return err_set(err, VLLMC_ERR_FORMAT, "%s: linear RoPE scaling without a factor", path);
        hp->rope_scaling = ROPE_SCALING_LINEAR;
        hp->rope_factor = (float)f;
    } else if (gguf_arch_f64(g, arch, "rope.scale_linear", &f) && f != 1.0) {
        hp->rope_scaling = ROPE_SCALING_LINEAR;
        hp->rope_factor = (float)f;
    }

    uint64_t id;
    if (gguf_get_u64(g, "tokenizer.ggml.bos_token_id", &id) && id < (1u << 30))
        hp->bos_id = (int)id;
    if (gguf_get_u64(g, "tokenizer.ggml.eos_token_id", &id) && id < (1u << 30))
        hp->eos_id = (int)id;
    return VLLMC_OK;
}

enum vllmc_status arch_hparams_check(const struct model_hparams *hp, const char *path,
                                     struct err *err)
{
    if (hp->n_layers < 1 || hp->n_layers > 4096 || hp->dim < 1 || hp->ff_dim < 1 ||
        hp->n_heads < 1 || hp->n_kv_heads < 1 || hp->n_vocab < 1)
        return err_set(err, VLLMC_ERR_FORMAT,
                       "%s: bad hyper-parameters (layers %d, dim %d, ff %d, heads %d/%d, vocab %d)",
                       path, hp->n_layers, hp->dim, hp->ff_dim, hp->n_heads, hp->n_kv_heads,
                       hp->n_vocab);
    if (hp->head_dim < 1)
        return err_set(err, VLLMC_ERR_FORMAT, "%s: dim %d is not a multiple of %d heads", path,
                       hp->dim, hp->n_heads);
    if (hp->n_heads % hp->n_kv_heads)
        return err_set(err, VLLMC_ERR_FORMAT, "%s: %d query heads do not share %d kv heads evenly",
                       path, hp->n_heads, hp->n_kv_heads);
    if (hp->rope_dim < 2 || hp->rope_dim % 2 || hp->rope_dim > hp->head_dim)
        return err_set(err, VLLMC_ERR_FORMAT, "%s: RoPE dimension %d for head_dim %d", path,
                       hp->rope_dim, hp->head_dim);
    if (!(hp->rms_eps > 0.0f && hp->rms_eps < 1.0f))
        return err_set(err, VLLMC_ERR_FORMAT, "%s: RMSNorm epsilon %g", path, (double)hp->rms_eps);
    if (!(hp->rope_theta > 1.0f) || !isfinite(hp->rope_theta))
        return err_set(err, VLLMC_ERR_FORMAT, "%s: RoPE theta %g", path, (double)hp->rope_theta);
    if (hp->rope_scaling != ROPE_SCALING_NONE && !(hp->rope_factor > 0.0f))
        return err_set(err, VLLMC_ERR_FORMAT, "%s: RoPE scaling factor %g", path,
                       (double)hp->rope_factor);
    if (hp->rope_scaling == ROPE_SCALING_LLAMA3 &&
        (hp->rope_orig_ctx < 1 || !(hp->rope_high_freq_factor > hp->rope_low_freq_factor) ||
         !(hp->rope_low_freq_factor > 0.0f)))
        return err_set(err, VLLMC_ERR_FORMAT,
                       "%s: llama3 RoPE scaling needs original_max_position_embeddings and "
                       "high_freq_factor > low_freq_factor > 0",
                       path);
    return VLLMC_OK;
}

// ---- RoPE frequencies ----

void arch_rope_inv_freq(const struct model_hparams *hp, const float *freq_factors, float *out)
{
    int half = hp->rope_dim / 2;
    for (int i = 0; i < half; i++) {
        // Double precision so the table matches references computed in float64.
        double freq = pow((double)hp->rope_theta, -2.0 * i / hp->rope_dim);
        if (hp->rope_scaling == ROPE_SCALING_LINEAR) {
            freq /= hp->rope_factor;
        } else if (hp->rope_scaling == ROPE_SCALING_LLAMA3) {
            // transformers' _compute_llama3_parameters: long wavelengths are
            // slowed by factor, short ones kept, the band between blended.
            double lo = hp->rope_low_freq_factor, hi = hp->rope_high_freq_factor;
            double low_freq_wavelen = hp->rope_orig_ctx / lo;
            double high_freq_wavelen = hp->rope_orig_ctx / hi;
            double wavelen = 2.0 * M_PI / freq;
            if (wavelen > low_freq_wavelen) {
                freq /= hp->rope_factor;
            } else if (wavelen >= high_freq_wavelen) {
                double smooth = (hp->rope_orig_ctx / wavelen - lo) / (hi - lo);
                freq = (1.0 - smooth) * freq / hp->rope_factor + smooth * freq;
            }
        }
        if (freq_factors)
            freq /= freq_factors[i];
        out[i] = (float)freq;
    }
}
