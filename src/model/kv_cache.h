// Paged KV cache: per layer one K and one V allocation on the model's backend,
// [n_blocks, block_size, n_kv_heads, head_dim]. Which block holds which
// tokens is the engine's business (block manager); this is only the memory.
#ifndef VLLMC_MODEL_KV_CACHE_H
#define VLLMC_MODEL_KV_CACHE_H

#include <stddef.h>

#include "core/status.h"
#include "core/tensor.h"

struct backend;
struct model;
struct model_hparams;

struct kv_cache_params {
    int n_blocks;
    int block_size;   // tokens per block
    enum dtype dtype; // DTYPE_F32 (default), DTYPE_F16 or DTYPE_BF16
};

void kv_cache_params_default(struct kv_cache_params *p);


struct kv_cache {
    struct backend *backend; // borrowed
    int n_layers;
    int n_blocks;
    int block_size;
    int n_kv_heads;
    int head_dim;
    enum dtype dtype;
    struct tensor *k; // owned array [n_layers]; each [n_blocks, block_size, n_kv_heads, head_dim]
    struct tensor *v; // owned array [n_layers]; same shape
    void **bufs;      // owned backend memory, [2 * n_layers]
};

// Bytes one block takes over all layers, K and V together: what the engine
// divides its memory budget by.
size_t kv_cache_bytes_per_block(const struct model_hparams *hp, int block_size, enum dtype dtype);

// Allocates the cache for m on m's backend. *out owned; kv_cache_free().
enum vllmc_status kv_cache_create(const struct model *m, const struct kv_cache_params *p,
                                  struct kv_cache **out, struct err *err);
void kv_cache_free(struct kv_cache *kv); // NULL is a no-op

#endif
