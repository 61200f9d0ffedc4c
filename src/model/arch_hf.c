// Hyper-parameters of a Hugging Face checkpoint, from its config.json as
// hf_config reads it (transformers' LlamaConfig, MistralConfig, Qwen2Config,
// Qwen3Config). HF checkpoints keep q/k in the rotate-half RoPE layout.
#include "model/arch.h"

#include <string.h>

#include "model/hf_config.h"

static int hf_count(int64_t v)
{
    return v > 0 && v <= (1 << 30) ? (int)v : 0;
}

static int hf_id(bool has, int64_t v)
{
    return has && v >= 0 && v < (1 << 30) ? (int)v : -1;
}

static enum vllmc_status hf_rope(const struct hf_config *c, const char *dir,
                                 struct model_hparams *hp, struct err *err)
{
    const struct hf_rope_scaling *rs = &c->rope_scaling;
    hp->rope_factor = 1.0f;
    switch (rs->type) {
    case HF_ROPE_SCALING_NONE:
        return VLLMC_OK;
    case HF_ROPE_SCALING_LINEAR:
        hp->rope_scaling = ROPE_SCALING_LINEAR;
        hp->rope_factor = (float)rs->factor;
        return VLLMC_OK;
    case HF_ROPE_SCALING_LLAMA3:
        hp->rope_scaling = ROPE_SCALING_LLAMA3;
        hp->rope_factor = (float)rs->factor;
        hp->rope_low_freq_factor = (float)rs->low_freq_factor;
        hp->rope_high_freq_factor = (float)rs->high_freq_factor;
        hp->rope_orig_ctx = hf_count(rs->original_max_position_embeddings);
        return VLLMC_OK;
    default:
        if (!strcmp(rs->type_name, "default"))
            return VLLMC_OK;
        return err_set(err, VLLMC_ERR_UNSUPPORTED,
                       "%s/config.json: rope_scaling type '%s' is not supported (linear, llama3)",
                       dir, rs->type_name);
    }
}

enum vllmc_status arch_hparams_from_hf(const char *dir, struct model_hparams *hp, struct err *err)
{
    struct hf_config c;
    enum vllmc_status rc = hf_config_load(dir, &c, err);
    if (rc)
        return rc;
    const struct arch_desc *d = arch_find(c.model_type, strlen(c.model_type));
    if (!d) {
        rc = err_set(err, VLLMC_ERR_UNSUPPORTED,
                     "%s/config.json: unsupported model_type '%s' (supported: llama, mistral, "
                     "qwen2, qwen3)",
                     dir, c.model_type);
        goto out;
    }
    *hp = (struct model_hparams){
        .arch = d->arch,
        .n_layers = hf_count(c.num_hidden_layers),
        .dim = hf_count(c.hidden_size),
        .n_heads = hf_count(c.num_attention_heads),
        .n_kv_heads = hf_count(c.num_key_value_heads),
        .head_dim = hf_count(c.head_dim),
        .ff_dim = hf_count(c.intermediate_size),
        .n_vocab = hf_count(c.vocab_size),
        .n_ctx_train = hf_count(c.max_position_embeddings),
        .rms_eps = (float)c.rms_norm_eps,
        .rope_theta = (float)c.rope_theta,
        .rope_neox = true,
        // attention_bias switches llama's q/k/v biases on; qwen2 always has them.
        .qkv_bias = d->qkv_bias || c.attention_bias,
        .qk_norm = d->qk_norm,
        .tied_embeddings = c.tie_word_embeddings,
        .bos_id = hf_id(c.has_bos, c.bos_token_id),
        .eos_id = hf_id(c.n_eos > 0, c.n_eos > 0 ? c.eos_token_ids[0] : -1),
    };
    hp->rope_dim = hp->head_dim;
    rc = hf_rope(&c, dir, hp, err);
out:
    hf_config_deinit(&c);
    return rc;
}
