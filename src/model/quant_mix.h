// Which quantized type each tensor of a model gets for a `vllmc quantize`
// target: a plain type (every weight matrix in it) or one of llama.cpp's
// mixtures (Q4_K_M, ...), whose rules are written out in quant_mix.c.
#ifndef VLLMC_MODEL_QUANT_MIX_H
#define VLLMC_MODEL_QUANT_MIX_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"

enum quant_mix_kind {
    QUANT_MIX_PLAIN, // every matrix in base (output: Q6_K unless base is Q8_0/Q6_K/F16/BF16/F32)
    QUANT_MIX_K_S,   // Q3_K_S / Q4_K_S / Q5_K_S: as PLAIN with a k-quant base
    QUANT_MIX_K_M,   // Q3_K_M / Q4_K_M / Q5_K_M: more bits for attn_v and ffn_down
    QUANT_MIX_Q2_K,  // Q2_K: Q3_K for attn_v, attn_output and ffn_down
};

struct quant_mix {
    char name[16];          // as given, upper case: "Q4_K_M"
    enum quant_mix_kind kind;
    enum dtype base;
    uint32_t file_type;     // general.file_type (llama.cpp's LLAMA_FTYPE_* value)
    bool pure;              // every matrix in base, no exceptions
};

// Parses a target name ("Q4_K_M", "q8_0", "F16", ...). False when unknown.
bool quant_mix_parse(const char *name, bool pure, struct quant_mix *out);

// The names quant_mix_parse() accepts, space-separated, for usage text.
const char *quant_mix_names(void);

// The type of tensor `name` (GGUF naming: token_embd, output, blk.N.attn_q, ...)
// with n_dims dimensions and rows of ne0 values, in a model of n_layers;
// is_output: the tensor is the output projection (output.weight, or
// token_embd.weight when the embeddings are tied). 1-D tensors stay F32. When
// the type's block does not divide ne0, a fallback whose block does is taken
// (k-quant -> legacy 32-block type -> F16); *wanted is the type the rules
// chose before any fallback.
enum dtype quant_mix_tensor_type(const struct quant_mix *mix, const char *name, int n_dims,
                                 int64_t ne0, int n_layers, bool is_output, enum dtype *wanted);

#endif
