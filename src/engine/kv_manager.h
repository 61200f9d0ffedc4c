// KV cache manager: which blocks each request holds. It admits requests with
// the longest cached prefix, grows their block lists as tokens are scheduled,
// registers full blocks in the prefix cache and returns blocks on free
// (vLLM V1's KVCacheManager). Engine thread only.
#ifndef VLLMC_ENGINE_KV_MANAGER_H
#define VLLMC_ENGINE_KV_MANAGER_H

#include <stdbool.h>

#include "engine/block_pool.h"
#include "engine/prefix_cache.h"
#include "engine/request.h"

struct kv_manager {
    struct block_pool *pool; // owned
    int block_size;
    int max_model_len;
    bool enable_caching;
    struct prefix_cache_stats stats;
};

// Creates a manager over a new pool of n_blocks. *out owns it; free with kv_manager_free().
enum vllmc_status kv_manager_create(int n_blocks, int block_size, int max_model_len,
                                    bool enable_caching, struct kv_manager **out);
void kv_manager_free(struct kv_manager *km); // NULL is a no-op

// Looks up the longest cached prefix of a request that holds no blocks, leaving
// at least its last token to compute. Writes the hit block ids to out_ids (room
// for req->n_blocks_max) and returns their count; the hit covers count *
// block_size tokens. Takes no reference and records nothing: the scheduler
// calls kv_manager_record_lookup() once the request is admitted, so a request
// that waits for blocks is counted once.
int kv_manager_get_computed_blocks(struct kv_manager *km, struct request *req, int32_t *out_ids);
void kv_manager_record_lookup(struct kv_manager *km, const struct request *req, int n_hit_blocks);

// Makes room for n_new_tokens more tokens after req->n_computed_tokens plus the
// n_hit_blocks prefix hit found for it (n_hit_blocks is 0 for a running
// request). Takes references on the hit blocks, allocates new blocks as
// needed and offers the full blocks computed by the end of this step to the
// prefix cache. False, with nothing changed, when too few blocks are free.
bool kv_manager_allocate_slots(struct kv_manager *km, struct request *req, int n_new_tokens,
                               const int32_t *hit_ids, int n_hit_blocks);

// Returns all of req's blocks to the pool, last block first.
void kv_manager_free_request(struct kv_manager *km, struct request *req);

// Free blocks (including cached ones that may be evicted).
int kv_manager_n_free_blocks(const struct kv_manager *km);

#endif
