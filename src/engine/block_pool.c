// Block pool: reference-counted KV blocks, an LRU free queue and the hash map
// of cached full blocks. The map uses linear probing with backward-shift
// deletion, so it never needs tombstones or rehashing.
#include "engine/block_pool.h"

#include <string.h>

#include "core/alloc.h"
#include "core/status.h"

// ---- free queue (doubly linked through the block array) ----

static void free_queue_push_tail(struct block_pool *bp, int32_t id)
{
    struct kv_block *b = &bp->blocks[id];
    b->prev_free = bp->free_tail;
    b->next_free = -1;
    if (bp->free_tail >= 0)
        bp->blocks[bp->free_tail].next_free = id;
    else
        bp->free_head = id;
    bp->free_tail = id;
    bp->n_free++;
}

static void free_queue_remove(struct block_pool *bp, int32_t id)
{
    struct kv_block *b = &bp->blocks[id];
    if (b->prev_free >= 0)
        bp->blocks[b->prev_free].next_free = b->next_free;
    else
        bp->free_head = b->next_free;
    if (b->next_free >= 0)
        bp->blocks[b->next_free].prev_free = b->prev_free;
    else
        bp->free_tail = b->prev_free;
    b->prev_free = b->next_free = -1;
    bp->n_free--;
}

// ---- hash map: block hash -> block id ----

static uint32_t map_home(const struct block_pool *bp, const struct block_hash *h)
{
    // The hash is SHA-256, so any 4 bytes of it are uniformly distributed.
    uint32_t v;
    memcpy(&v, h->bytes, sizeof v);
    return v & bp->map_mask;
}

static uint32_t map_find_slot(const struct block_pool *bp, const struct block_hash *h)
{
    uint32_t i = map_home(bp, h);
    while (bp->map[i] >= 0) {
        if (!memcmp(bp->blocks[bp->map[i]].hash.bytes, h->bytes, BLOCK_HASH_BYTES))
            return i;
        i = (i + 1) & bp->map_mask;
    }
    return i; // empty slot: not present
}

static void map_remove(struct block_pool *bp, int32_t id)
{
    uint32_t i = map_find_slot(bp, &bp->blocks[id].hash);
    VLLMC_ASSERT(bp->map[i] == id);
    bp->map[i] = -1;
    // Backward-shift: move later entries of the probe run into the hole when
    // their home slot does not lie cyclically in (hole, j].
    uint32_t hole = i;
    for (uint32_t j = (i + 1) & bp->map_mask; bp->map[j] >= 0; j = (j + 1) & bp->map_mask) {
        uint32_t home = map_home(bp, &bp->blocks[bp->map[j]].hash);
        bool home_in_range = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!home_in_range) {
            bp->map[hole] = bp->map[j];
            bp->map[j] = -1;
            hole = j;
        }
    }
}

static void block_drop_hash(struct block_pool *bp, int32_t id)
{
    map_remove(bp, id);
    bp->blocks[id].has_hash = false;
    bp->n_cached--;
}

// ---- public ----

enum vllmc_status block_pool_create(int n_blocks, bool enable_caching, struct block_pool **out)
{
    *out = NULL;
    if (n_blocks < 1 || n_blocks > (1 << 29))
        return VLLMC_ERR_INVALID_ARG;
    struct block_pool *bp = mem_calloc(1, sizeof *bp);
    if (!bp)
        return VLLMC_ERR_NOMEM;
    uint32_t map_cap = 1;
    while (map_cap < 2u * (uint32_t)n_blocks)
        map_cap <<= 1;
    bp->blocks = mem_calloc((size_t)n_blocks, sizeof *bp->blocks);
    bp->map = mem_alloc(map_cap * sizeof *bp->map);
    if (!bp->blocks || !bp->map) {
        block_pool_free(bp);
        return VLLMC_ERR_NOMEM;
    }
    memset(bp->map, 0xff, map_cap * sizeof *bp->map);
    bp->map_mask = map_cap - 1;
    bp->n_blocks = n_blocks;
    bp->enable_caching = enable_caching;
    bp->free_head = bp->free_tail = -1;
    for (int32_t i = 0; i < n_blocks; i++)
        free_queue_push_tail(bp, i);
    *out = bp;
    return VLLMC_OK;
}

void block_pool_free(struct block_pool *bp)
{
    if (!bp)
        return;
    mem_free(bp->map);
    mem_free(bp->blocks);
    mem_free(bp);
}

bool block_pool_alloc(struct block_pool *bp, int n, int32_t *out_ids)
{
    if (n > bp->n_free)
        return false;
    for (int i = 0; i < n; i++) {
        int32_t id = bp->free_head;
        free_queue_remove(bp, id);
        if (bp->blocks[id].has_hash) {
            block_drop_hash(bp, id);
            bp->n_evictions++;
        }
        bp->blocks[id].ref_cnt = 1;
        out_ids[i] = id;
    }
    return true;
}

void block_pool_touch(struct block_pool *bp, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++) {
        struct kv_block *b = &bp->blocks[ids[i]];
        if (b->ref_cnt == 0)
            free_queue_remove(bp, ids[i]);
        b->ref_cnt++;
    }
}

void block_pool_release(struct block_pool *bp, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++) {
        struct kv_block *b = &bp->blocks[ids[i]];
        VLLMC_ASSERT(b->ref_cnt > 0);
        if (--b->ref_cnt == 0)
            free_queue_push_tail(bp, ids[i]);
    }
}

int32_t block_pool_lookup(const struct block_pool *bp, const struct block_hash *h)
{
    if (!bp->enable_caching)
        return -1;
    return bp->map[map_find_slot(bp, h)];
}

void block_pool_cache(struct block_pool *bp, int32_t id, const struct block_hash *h)
{
    struct kv_block *b = &bp->blocks[id];
    if (!bp->enable_caching || b->has_hash)
        return;
    uint32_t slot = map_find_slot(bp, h);
    if (bp->map[slot] >= 0)
        return; // another block already holds these tokens; this one stays private
    b->hash = *h;
    b->has_hash = true;
    bp->map[slot] = id;
    bp->n_cached++;
}

void block_pool_uncache(struct block_pool *bp, int32_t id)
{
    if (bp->blocks[id].has_hash)
        block_drop_hash(bp, id);
}

bool block_pool_reset_cache(struct block_pool *bp)
{
    if (bp->n_free != bp->n_blocks)
        return false;
    for (int32_t i = 0; i < bp->n_blocks; i++)
        if (bp->blocks[i].has_hash) {
            bp->blocks[i].has_hash = false;
            bp->n_cached--;
        }
    memset(bp->map, 0xff, (bp->map_mask + 1) * sizeof *bp->map);
    return true;
}

double block_pool_usage(const struct block_pool *bp)
{
    return (double)(bp->n_blocks - bp->n_free) / (double)bp->n_blocks;
}
