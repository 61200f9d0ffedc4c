// AWQ and GPTQ 4-bit checkpoints (Hugging Face safetensors with a
// "quantization_config"): reading the config, checking a layer's packed
// tensors and repacking them into the int4g weight type, a row of 32-weight
// blocks per output feature, still 4 bits a weight (backend/cpu/quant/blocks.h).
// GPTQ act-order layers also get the input permutation their matmul needs.
#ifndef VLLMC_MODEL_INT4_CKPT_H
#define VLLMC_MODEL_INT4_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

struct st_tensor;
struct block_int4g;

enum int4_method { INT4_METHOD_AWQ, INT4_METHOD_GPTQ };

struct int4_config {
    enum int4_method method;
    int bits;          // 4 (the only width read)
    int group_size;    // weights per group along the input; -1 = the whole row
    bool desc_act;     // GPTQ: act-order, groups follow g_idx
    bool sym;          // GPTQ: symmetric (the zero points are stored all the same)
    bool zeros_stored; // GPTQ checkpoint_format "gptq_v2": zero points stored as is, not minus one
};

// Parses a quantization_config object (compact JSON as hf_config keeps it).
// doc names the file in errors. Unknown quant_method, bits other than 4, a
// group size that is not -1 or a positive multiple of 32, AWQ versions other
// than "gemm" and AWQ without zero points are VLLMC_ERR_UNSUPPORTED.
enum vllmc_status int4_config_parse(const char *json, const char *doc, struct int4_config *cfg,
                                    struct err *err);

// The packed tensors of one linear layer `<prefix>.qweight` and friends.
struct int4_layer {
    const struct st_tensor *qweight; // AWQ i32 [k, n / 8]; GPTQ i32 [k / 8, n]
    const struct st_tensor *qzeros;  // i32 [n_groups, n / 8]
    const struct st_tensor *scales;  // f16 (or bf16, f32) [n_groups, n]
    const struct st_tensor *g_idx;   // GPTQ i32 [k], optional
};

// Checks the layer's dtypes and shapes against k inputs and n outputs, and
// its g_idx (every entry a group, every group group_size inputs). *needs_perm
// is true when g_idx does not simply follow the input order. name is the
// layer prefix for errors.
enum vllmc_status int4_layer_check(const struct int4_config *cfg, const struct int4_layer *ly,
                                   int64_t k, int64_t n, const char *name, bool *needs_perm,
                                   struct err *err);

// Writes the layer checked above as out [n, k / 32] int4g blocks and, when
// perm is not NULL, perm [k]: the input feature of each stored column.
void int4_layer_repack(const struct int4_config *cfg, const struct int4_layer *ly, int64_t k,
                       int64_t n, struct block_int4g *out, int32_t *perm);

#endif
