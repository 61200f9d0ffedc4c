// Block pool: fixed-size KV blocks with reference counts, a free queue in
// eviction order, and the map from block hash to cached block (prefix
// caching). It hands out block ids; the memory behind them is the model's KV
// cache. Engine thread only.
#ifndef VLLMC_ENGINE_BLOCK_POOL_H
#define VLLMC_ENGINE_BLOCK_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "vllmc.h"

#define BLOCK_HASH_BYTES 32

// SHA-256 of (parent hash, token ids, extra keys); see prefix_cache.h.
struct block_hash {
    uint8_t bytes[BLOCK_HASH_BYTES];
};

struct kv_block {
    int32_t ref_cnt;   // requests holding the block; 0 = in the free queue
    int32_t prev_free; // free-queue links (block ids), -1 at the ends
    int32_t next_free;
    bool has_hash;          // full block registered in the prefix cache
    struct block_hash hash; // valid when has_hash
};

// Free blocks sit in one queue: allocation takes from the head, release appends
// to the tail. A cached block stays cached while free and is evicted (its hash
// dropped) only when allocation reaches it, so the least recently freed cached
// block goes first, as in vLLM.
struct block_pool {
    int n_blocks;
    struct kv_block *blocks; // owned [n_blocks]
    int32_t free_head;       // -1 when empty
    int32_t free_tail;
    int n_free;
    bool enable_caching;
    int32_t *map;        // owned [map_cap]: open addressing by hash, -1 = empty slot
    uint32_t map_mask;   // map_cap - 1 (map_cap a power of two >= 2 * n_blocks)
    int n_cached;        // blocks with has_hash
    int64_t n_evictions; // cached blocks whose hash was dropped to reuse them
};

// Creates a pool of n_blocks (>= 1) free blocks. *out owns it; free with block_pool_free().
enum vllmc_status block_pool_create(int n_blocks, bool enable_caching, struct block_pool **out);
void block_pool_free(struct block_pool *bp); // NULL is a no-op

// Takes n blocks from the head of the free queue into out_ids with ref_cnt 1,
// evicting any cached hash they carried. False (and nothing taken) when fewer
// than n blocks are free.
bool block_pool_alloc(struct block_pool *bp, int n, int32_t *out_ids);
// Adds a reference to each block; a block with ref_cnt 0 leaves the free queue.
void block_pool_touch(struct block_pool *bp, const int32_t *ids, int n);
// Drops one reference from each block, in the order given; a block reaching 0
// goes to the tail of the free queue (keeping its hash). Callers pass a
// request's blocks last-first, so its tail blocks are evicted before its head.
void block_pool_release(struct block_pool *bp, const int32_t *ids, int n);

// The cached block with this hash, or -1.
int32_t block_pool_lookup(const struct block_pool *bp, const struct block_hash *h);
// Registers full block id under h. A block already cached, or a hash already
// owned by another block (the same tokens computed twice), is left as is.
void block_pool_cache(struct block_pool *bp, int32_t id, const struct block_hash *h);
// Drops block id's hash, if any (its KV will not be written after all).
void block_pool_uncache(struct block_pool *bp, int32_t id);
// Drops every cached hash; false (nothing done) unless all blocks are free.
bool block_pool_reset_cache(struct block_pool *bp);

// Fraction of blocks in use (ref_cnt > 0), 0..1.
double block_pool_usage(const struct block_pool *bp);

#endif
