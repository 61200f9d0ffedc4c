// KV cache manager: per-request block lists over the block pool.
#include "engine/kv_manager.h"

#include "core/alloc.h"
#include "core/status.h"

enum vllmc_status kv_manager_create(int n_blocks, int block_size, int max_model_len,
                                    bool enable_caching, struct kv_manager **out)
{
    *out = NULL;
    if (block_size < 1 || max_model_len < 1)
        return VLLMC_ERR_INVALID_ARG;
    struct kv_manager *km = mem_calloc(1, sizeof *km);
    if (!km)
        return VLLMC_ERR_NOMEM;
    enum vllmc_status rc = block_pool_create(n_blocks, enable_caching, &km->pool);
    if (rc) {
        mem_free(km);
        return rc;
    }
    km->block_size = block_size;
    km->max_model_len = max_model_len;
    km->enable_caching = enable_caching;
    *out = km;
    return VLLMC_OK;
}

void kv_manager_free(struct kv_manager *km)
{
    if (!km)
        return;
    block_pool_free(km->pool);
    mem_free(km);
}

int kv_manager_get_computed_blocks(struct kv_manager *km, struct request *req, int32_t *out_ids)
{
    VLLMC_ASSERT(req->n_blocks == 0);
    if (!km->enable_caching || req->skip_prefix_cache)
        return 0;
    // The last token is always recomputed: its logits are needed to sample.
    int max_hit_tokens = req->n_tokens - 1;
    int n_max = max_hit_tokens / km->block_size;
    if (n_max > req->n_block_hashes)
        n_max = req->n_block_hashes;
    return prefix_cache_find_longest(km->pool, req->block_hashes, n_max, out_ids);
}

void kv_manager_record_lookup(struct kv_manager *km, const struct request *req, int n_hit_blocks)
{
    if (!km->enable_caching || req->skip_prefix_cache)
        return;
    prefix_cache_stats_record(&km->stats, req->n_tokens, n_hit_blocks * km->block_size,
                              req->n_preemptions > 0);
}

bool kv_manager_allocate_slots(struct kv_manager *km, struct request *req, int n_new_tokens,
                               const int32_t *hit_ids, int n_hit_blocks)
{
    struct block_pool *bp = km->pool;
    int bs = km->block_size;
    int n_computed = req->n_computed_tokens + n_hit_blocks * bs;
    int n_need_slot = n_computed + n_new_tokens;
    if (n_need_slot > km->max_model_len)
        n_need_slot = km->max_model_len;
    int n_blocks_need = (n_need_slot + bs - 1) / bs;
    int n_alloc = n_blocks_need - req->n_blocks - n_hit_blocks;
    if (n_alloc < 0)
        n_alloc = 0;
    // Hit blocks that sit free in the queue stop being free when touched.
    int n_hit_free = 0;
    for (int i = 0; i < n_hit_blocks; i++)
        n_hit_free += bp->blocks[hit_ids[i]].ref_cnt == 0;
    if (n_alloc + n_hit_free > bp->n_free)
        return false;
    VLLMC_ASSERT(req->n_blocks + n_hit_blocks + n_alloc <= req->n_blocks_max);

    block_pool_touch(bp, hit_ids, n_hit_blocks);
    for (int i = 0; i < n_hit_blocks; i++)
        req->block_ids[req->n_blocks++] = hit_ids[i];
    // Hit blocks are cached already.
    if (req->n_cached_blocks < req->n_blocks)
        req->n_cached_blocks = req->n_blocks;
    bool ok = block_pool_alloc(bp, n_alloc, req->block_ids + req->n_blocks);
    VLLMC_ASSERT(ok);
    req->n_blocks += n_alloc;

    // Offer the blocks that are full once this step has run. Their KV is
    // written by this step's forward pass before any attention reads it, so a
    // request admitted later in the same step may already share them.
    if (km->enable_caching) {
        int n_tokens_cached = n_computed + n_new_tokens;
        if (n_tokens_cached > req->n_tokens)
            n_tokens_cached = req->n_tokens;
        int n_full = n_tokens_cached / bs;
        if (n_full > req->n_block_hashes)
            n_full = req->n_block_hashes;
        for (int i = req->n_cached_blocks; i < n_full; i++)
            block_pool_cache(bp, req->block_ids[i], &req->block_hashes[i]);
        if (n_full > req->n_cached_blocks)
            req->n_cached_blocks = n_full;
    }
    return true;
}

void kv_manager_free_request(struct kv_manager *km, struct request *req)
{
    // Blocks registered for tokens this step was going to compute hold no KV
    // when the request is preempted before the step runs: forget their hashes
    // so nobody hits them. Blocks past the computed tokens are only ever
    // registered by their own request, in the current step.
    for (int i = req->n_computed_tokens / km->block_size; i < req->n_blocks; i++)
        if (km->pool->blocks[req->block_ids[i]].ref_cnt == 1)
            block_pool_uncache(km->pool, req->block_ids[i]);
    for (int i = req->n_blocks - 1; i >= 0; i--)
        block_pool_release(km->pool, &req->block_ids[i], 1);
    req->n_blocks = 0;
    req->n_cached_blocks = 0;
}

int kv_manager_n_free_blocks(const struct kv_manager *km)
{
    return km->pool->n_free;
}
