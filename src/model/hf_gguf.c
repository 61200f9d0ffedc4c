// Hugging Face folder -> GGUF plan (see hf_gguf.h). Names and keys are
// llama.cpp's (convert_hf_to_gguf.py): the tensor map of arch.c, the
// hyper-parameters under "<arch>.", and for llama the q/k row permutation
// that turns transformers' rotate-half RoPE layout back into the adjacent
// pairs GGUF llama files use (LlamaModel.permute: rows [n_head, 2, hd / 2]
// become [n_head, hd / 2, 2]; k with n_kv_heads). Qwen2/Qwen3 GGUF files keep
// the rotate-half layout, so their rows are not moved.
#include "model/hf_gguf.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "model/arch.h"
#include "model/file_map.h"
#include "model/hf_config.h"
#include "model/safetensors.h"

// Reads dir/name as an owned NUL-terminated string; NULL (and VLLMC_OK) when absent.
static enum vllmc_status read_text(const char *dir, const char *name, char **out, struct err *err)
{
    char path[4096];
    struct file_map fm = {0};
    *out = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    enum vllmc_status rc = file_map_open(path, &fm, err);
    if (rc == VLLMC_ERR_NOT_FOUND)
        return VLLMC_OK;
    if (rc)
        return rc;
    *out = mem_alloc(fm.n_bytes + 1);
    if (!*out) {
        file_map_close(&fm);
        return err_set(err, VLLMC_ERR_NOMEM, "%s: out of memory", path);
    }
    if (fm.n_bytes)
        memcpy(*out, fm.addr, fm.n_bytes);
    (*out)[fm.n_bytes] = '\0';
    size_t n = fm.n_bytes;
    file_map_close(&fm);
    if (strlen(*out) != n) {
        mem_free(*out);
        *out = NULL;
        return err_set(err, VLLMC_ERR_FORMAT, "%s: holds a NUL byte", path);
    }
    return VLLMC_OK;
}

// The chat template of tokenizer_config.json (a string; a list of named
// templates takes the one named "default").
static enum vllmc_status read_chat_template(const char *dir, const char *text, char **out,
                                            struct err *err)
{
    enum vllmc_status rc = VLLMC_OK;
    *out = NULL;
    if (!text)
        return VLLMC_OK;
    json_t *root = json_loads(text, 0, NULL);
    if (!root)
        return err_set(err, VLLMC_ERR_FORMAT, "%s/tokenizer_config.json: not JSON", dir);
    const json_t *t = json_object_get(root, "chat_template");
    const char *s = json_string_value(t);
    if (json_is_array(t)) {
        size_t i;
        const json_t *e;
        json_array_foreach(t, i, e)
        {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (name && !strcmp(name, "default"))
                s = json_string_value(json_object_get(e, "template"));
        }
    }
    if (s && !(*out = mem_strdup(s)))
        rc = err_set(err, VLLMC_ERR_NOMEM, "out of memory");
    json_decref(root);
    return rc;
}

// GGUF row r of a llama q (n_head heads) or k (n_kv_heads) matrix of head_dim
// rows per head comes from source row map[r].
static int32_t *rope_row_map(int n_head, int head_dim)
{
    int32_t *map = mem_alloc((size_t)n_head * (size_t)head_dim * sizeof(*map));
    if (!map)
        return NULL;
    int half = head_dim / 2;
    for (int h = 0; h < n_head; h++)
        for (int i = 0; i < half; i++)
            for (int j = 0; j < 2; j++)
                map[h * head_dim + 2 * i + j] = h * head_dim + j * half + i;
    return map;
}

static enum vllmc_status plan_tensors(struct hf_gguf *h, const char *dir, struct err *err)
{
    const struct model_hparams *hp = &h->hp;
    int n_max = 3 + (ARCH_W_COUNT - ARCH_W_FIRST_LAYER) * hp->n_layers;
    h->tensors = mem_calloc((size_t)n_max, sizeof(*h->tensors));
    if (!h->tensors)
        return err_set(err, VLLMC_ERR_NOMEM, "%s: out of memory", dir);
    for (int w = 0; w < ARCH_W_COUNT; w++) {
        int n_layers = w >= ARCH_W_FIRST_LAYER ? hp->n_layers : 1;
        for (int l = 0; l < n_layers; l++) {
            char hf_name[96];
            if (!arch_weight_name(MODEL_FORMAT_SAFETENSORS, (enum arch_weight)w, l, hf_name,
                                  sizeof hf_name))
                continue;
            const struct st_tensor *t = safetensors_find(h->st, hf_name);
            if (!t)
                continue; // the loader of the written file says what it misses
            if (t->dtype != DTYPE_F32 && t->dtype != DTYPE_F16 && t->dtype != DTYPE_BF16)
                return err_set(err, VLLMC_ERR_UNSUPPORTED,
                               "%s: tensor %s is %s; quantize reads F32, F16 and BF16 weights", dir,
                               hf_name, dtype_name(t->dtype));
            VLLMC_ASSERT(h->n_tensors < n_max);
            struct hf_gguf_tensor *g = &h->tensors[h->n_tensors++];
            arch_weight_name(MODEL_FORMAT_GGUF, (enum arch_weight)w, l, g->name, sizeof g->name);
            g->src = t;
            g->n_dims = t->n_dims;
            memcpy(g->ne, t->ne, sizeof g->ne);
            bool rope_w = w == ARCH_W_Q || w == ARCH_W_K;
            if (hp->arch == MODEL_ARCH_LLAMA && rope_w) {
                int heads = w == ARCH_W_Q ? hp->n_heads : hp->n_kv_heads;
                if (t->n_dims != 2 || t->ne[1] != (int64_t)heads * hp->head_dim || hp->head_dim % 2)
                    return err_set(err, VLLMC_ERR_FORMAT,
                                   "%s: tensor %s does not hold %d heads of %d rows", dir, hf_name,
                                   heads, hp->head_dim);
                if (!(g->row_map = rope_row_map(heads, hp->head_dim)))
                    return err_set(err, VLLMC_ERR_NOMEM, "%s: out of memory", dir);
            }
        }
    }
    return VLLMC_OK;
}

enum vllmc_status hf_gguf_open(const char *dir, struct hf_gguf **out, struct err *err)
{
    struct hf_config c = {0};
    struct hf_gguf *h = mem_calloc(1, sizeof *h);
    *out = NULL;
    if (!h)
        return err_set(err, VLLMC_ERR_NOMEM, "%s: out of memory", dir);
    enum vllmc_status rc = hf_config_load(dir, &c, err);
    if (rc)
        goto fail;
    if (c.quantization_config) {
        rc = err_set(err, VLLMC_ERR_UNSUPPORTED,
                     "%s: the checkpoint is already quantized (quantization_config); quantize "
                     "reads F32, F16 and BF16 checkpoints",
                     dir);
        goto fail;
    }
    if ((rc = arch_hparams_from_hf(dir, &h->hp, err)) ||
        (rc = arch_hparams_check(&h->hp, dir, err)))
        goto fail;
    if (h->hp.rope_scaling == ROPE_SCALING_LLAMA3) {
        rc = err_set(err, VLLMC_ERR_UNSUPPORTED,
                     "%s: llama3 RoPE scaling needs a rope_freqs tensor, which quantize does not "
                     "write yet",
                     dir);
        goto fail;
    }
    h->arch_name = arch_get(h->hp.arch)->gguf_name;
    char trimmed[4096];
    snprintf(trimmed, sizeof trimmed, "%s", dir);
    size_t n = strlen(trimmed);
    while (n > 1 && trimmed[n - 1] == '/')
        trimmed[--n] = '\0';
    const char *base = strrchr(trimmed, '/');
    snprintf(h->name, sizeof h->name, "%.127s", base ? base + 1 : trimmed);
    if ((rc = safetensors_open(dir, &h->st, err)) || (rc = plan_tensors(h, dir, err)) ||
        (rc = read_text(dir, "tokenizer.json", &h->tokenizer_json, err)) ||
        (rc = read_text(dir, "tokenizer_config.json", &h->tokenizer_config, err)) ||
        (rc = read_chat_template(dir, h->tokenizer_config, &h->chat_template, err)))
        goto fail;
    hf_config_deinit(&c);
    *out = h;
    return VLLMC_OK;
fail:
    hf_config_deinit(&c);
    hf_gguf_free(h);
    return rc;
}

void hf_gguf_free(struct hf_gguf *h)
{
    if (!h)
        return;
    for (int i = 0; i < h->n_tensors; i++)
        mem_free(h->tensors[i].row_map);
    mem_free(h->tensors);
    mem_free(h->tokenizer_json);
    mem_free(h->tokenizer_config);
    mem_free(h->chat_template);
    safetensors_free(h->st);
    mem_free(h);
}

static enum vllmc_status set_u32(struct gguf_writer *w, const char *arch, const char *key, int v)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return gguf_writer_set_u32(w, full, (uint32_t)v);
}

static enum vllmc_status set_f32(struct gguf_writer *w, const char *arch, const char *key, float v)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return gguf_writer_set_f32(w, full, v);
}

enum vllmc_status hf_gguf_set_metadata(const struct hf_gguf *h, struct gguf_writer *w)
{
    const struct model_hparams *hp = &h->hp;
    const char *a = h->arch_name;
    enum vllmc_status rc;
    if ((rc = gguf_writer_set_str(w, "general.architecture", a)) ||
        (rc = gguf_writer_set_str(w, "general.name", h->name)) ||
        (rc = set_u32(w, a, "block_count", hp->n_layers)) ||
        (rc = set_u32(w, a, "embedding_length", hp->dim)) ||
        (rc = set_u32(w, a, "feed_forward_length", hp->ff_dim)) ||
        (rc = set_u32(w, a, "attention.head_count", hp->n_heads)) ||
        (rc = set_u32(w, a, "attention.head_count_kv", hp->n_kv_heads)) ||
        (rc = set_u32(w, a, "attention.key_length", hp->head_dim)) ||
        (rc = set_u32(w, a, "attention.value_length", hp->head_dim)) ||
        (rc = set_u32(w, a, "rope.dimension_count", hp->rope_dim)) ||
        (rc = set_u32(w, a, "vocab_size", hp->n_vocab)) ||
        (rc = set_f32(w, a, "attention.layer_norm_rms_epsilon", hp->rms_eps)) ||
        (rc = set_f32(w, a, "rope.freq_base", hp->rope_theta)))
        return rc;
    if (hp->n_ctx_train && (rc = set_u32(w, a, "context_length", hp->n_ctx_train)))
        return rc;
    if (hp->rope_scaling == ROPE_SCALING_LINEAR) {
        char key[128];
        snprintf(key, sizeof key, "%s.rope.scaling.type", a);
        if ((rc = gguf_writer_set_str(w, key, "linear")) ||
            (rc = set_f32(w, a, "rope.scaling.factor", hp->rope_factor)))
            return rc;
    }
    // The tokenizer: the whole tokenizer.json under the GGUF spec's key and
    // tokenizer_config.json under ours (vllm.c reads both back with its
    // tokenizer.json loader), plus the ids and the chat template under the
    // spec's keys for other readers.
    if (h->tokenizer_json &&
        (rc = gguf_writer_set_str(w, "tokenizer.huggingface.json", h->tokenizer_json)))
        return rc;
    if (h->tokenizer_json && h->tokenizer_config &&
        (rc = gguf_writer_set_str(w, "tokenizer.huggingface.config_json", h->tokenizer_config)))
        return rc;
    if (h->chat_template &&
        (rc = gguf_writer_set_str(w, "tokenizer.chat_template", h->chat_template)))
        return rc;
    if (hp->bos_id >= 0 &&
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)hp->bos_id)))
        return rc;
    if (hp->eos_id >= 0 &&
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)hp->eos_id)))
        return rc;
    return VLLMC_OK;
}
