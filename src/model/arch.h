// Architecture table: what each supported architecture adds to the plain
// llama block, how its hyper-parameters are read from GGUF metadata, and
// the tensor names of both file formats. Internal to the model module.
#ifndef VLLMC_MODEL_ARCH_H
#define VLLMC_MODEL_ARCH_H

#include <stdbool.h>
#include <stddef.h>

#include "model/model.h"

struct gguf_file;

struct arch_desc {
    enum model_arch arch;
    const char *gguf_name; // general.architecture
    bool qkv_bias;         // q/k/v biases are required
    bool qk_norm;          // per-head q/k RMSNorm weights are required
    bool gguf_rope_neox;   // GGUF files of this arch use rotate-half RoPE
};

// By GGUF general.architecture or HF model_type ("mistral" is llama). NULL if unknown.
const struct arch_desc *arch_find(const char *name, size_t len);
const struct arch_desc *arch_get(enum model_arch arch);

// The weights of a model, in load order. Per-layer ones take the layer number.
enum arch_weight {
    ARCH_W_TOKEN_EMBD,
    ARCH_W_OUTPUT_NORM,
    ARCH_W_OUTPUT,
    ARCH_W_ROPE_FREQS, // GGUF only: llama3 RoPE frequency factors [rope_dim / 2]
    ARCH_W_ATTN_NORM,
    ARCH_W_Q,
    ARCH_W_K,
    ARCH_W_V,
    ARCH_W_BQ,
    ARCH_W_BK,
    ARCH_W_BV,
    ARCH_W_Q_NORM,
    ARCH_W_K_NORM,
    ARCH_W_O,
    ARCH_W_FFN_NORM,
    ARCH_W_GATE,
    ARCH_W_UP,
    ARCH_W_DOWN,
    ARCH_W_COUNT
};
#define ARCH_W_FIRST_LAYER ARCH_W_ATTN_NORM

// Writes the tensor name of w (in layer, for per-layer weights) for the
// format into buf. False when the format has no such tensor.
bool arch_weight_name(enum model_format fmt, enum arch_weight w, int layer, char *buf, size_t n);

// Reads hyper-parameters from GGUF metadata ("<arch>.block_count", ...).
enum vllmc_status arch_hparams_from_gguf(const struct gguf_file *g, const char *path,
                                         struct model_hparams *hp, struct err *err);

// Reads hyper-parameters from a Hugging Face config.json in dir.
enum vllmc_status arch_hparams_from_hf(const char *dir, struct model_hparams *hp, struct err *err);

// Checks that the hyper-parameters are consistent and in range.
enum vllmc_status arch_hparams_check(const struct model_hparams *hp, const char *path,
                                     struct err *err);

// out [rope_dim / 2] = theta^(-2i / rope_dim), then the scaling of hp, then
// divided by freq_factors[i] when given (GGUF rope_freqs).
void arch_rope_inv_freq(const struct model_hparams *hp, const float *freq_factors, float *out);

#endif
