// A Hugging Face folder (config.json + F32/F16/BF16 safetensors, tokenizer
// files) seen as the GGUF file `vllmc quantize` writes from it: llama.cpp's
// tensor names and metadata keys, llama q/k rows in GGUF's RoPE layout, and
// the tokenizer as the GGUF spec's tokenizer.huggingface.json (with
// tokenizer_config.json beside it as tokenizer.huggingface.config_json).
#ifndef VLLMC_MODEL_HF_GGUF_H
#define VLLMC_MODEL_HF_GGUF_H

#include <stdint.h>

#include "core/status.h"
#include "model/gguf_write.h"
#include "model/model.h"

struct st_tensor;

struct hf_gguf_tensor {
    char name[96];               // GGUF name: token_embd.weight, blk.N.attn_q.weight, ...
    const struct st_tensor *src; // borrowed from the folder's safetensors
    int n_dims;
    int64_t ne[4];    // innermost first, as the source
    int32_t *row_map; // owned: GGUF row r is source row row_map[r]; NULL = same row
};

struct hf_gguf {
    struct model_hparams hp;
    const char *arch_name;          // GGUF general.architecture
    char name[128];                 // general.name: the folder's name
    struct safetensors *st;         // owned
    struct hf_gguf_tensor *tensors; // owned, [n_tensors], in load order
    int n_tensors;
    char *tokenizer_json;   // owned: tokenizer.json, or NULL when the folder has none
    char *tokenizer_config; // owned: tokenizer_config.json, or NULL
    char *chat_template;    // owned: from tokenizer_config.json, or NULL
};

// Opens dir. Quantized checkpoints (a quantization_config), weight dtypes
// other than F32/F16/BF16 and RoPE scalings GGUF cannot say without extra
// tensors (llama3) are VLLMC_ERR_UNSUPPORTED. *out owned; hf_gguf_free().
enum vllmc_status hf_gguf_open(const char *dir, struct hf_gguf **out, struct err *err);
void hf_gguf_free(struct hf_gguf *h); // NULL is a no-op

// Sets general.*, <arch>.* hyper-parameters and the tokenizer keys on w.
enum vllmc_status hf_gguf_set_metadata(const struct hf_gguf *h, struct gguf_writer *w);

#endif
