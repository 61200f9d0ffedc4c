// Paged KV cache: per layer one K and one V allocation on the model's backend,
// [n_blocks, block_size, n_kv_heads, head_dim]. Which block holds which
// tokens is the engine's business (block manager); this is only the memory.
#ifndef VLLMC_MODEL_KV_CACHE_H
#define VLLMC_MODEL_KV_CACHE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
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
    // The background prefault (kv_cache_prefault_start), joined by kv_cache_free.
    pthread_t prefault_thread;
    bool prefault_started;
    atomic_bool prefault_stop;
    atomic_int n_blocks_prefaulted; // blocks [0, n) resident in every layer
};

// Bytes one block takes over all layers, K and V together: what the engine
// divides its memory budget by.
size_t kv_cache_bytes_per_block(const struct model_hparams *hp, int block_size, enum dtype dtype);

// Allocates the cache for m on m's backend. *out owned; kv_cache_free().
enum vllmc_status kv_cache_create(const struct model *m, const struct kv_cache_params *p,
                                  struct kv_cache **out, struct err *err);
void kv_cache_free(struct kv_cache *kv); // stops the prefault first; NULL is a no-op

// Where the backend commits memory on first touch (the CPU's mapped
// buffers), starts a thread of the lowest priority that makes the blocks
// resident in block order, every layer's K and V of a run of blocks at a
// time, until all are or kv_cache_free() stops it: the block pool hands out
// low block ids first, so a step rarely stops to fault a page in, and the
// work falls in the machine's idle time. Nothing happens where the backend
// has nothing to do or the thread cannot start: pages then come in as used.
void kv_cache_prefault_start(struct kv_cache *kv);

#endif
