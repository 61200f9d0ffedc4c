// Prefix-cache hashing and lookup. SHA-256 (nettle) keeps accidental
// collisions out of reach: a collision would hand one user another's KV.
#include "engine/prefix_cache.h"

#include <nettle/sha2.h>
#include <string.h>

static void sha_u32(struct sha256_ctx *ctx, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    sha256_update(ctx, sizeof b, b);
}

void block_hash_compute(const struct block_hash *parent, const int32_t *tokens, int n_tokens,
                        const void *extra, size_t n_extra, struct block_hash *out)
{
    static const struct block_hash none_hash; // parent of the first block: all zeros
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, BLOCK_HASH_BYTES, (parent ? parent : &none_hash)->bytes);
    sha_u32(&ctx, (uint32_t)n_tokens);
    for (int i = 0; i < n_tokens; i++)
        sha_u32(&ctx, (uint32_t)tokens[i]);
    sha_u32(&ctx, (uint32_t)n_extra);
    if (n_extra)
        sha256_update(&ctx, n_extra, extra);
    sha256_digest(&ctx, BLOCK_HASH_BYTES, out->bytes);
}

int prefix_cache_find_longest(const struct block_pool *bp, const struct block_hash *hashes,
                              int n_hashes, int32_t *out_ids)
{
    int n = 0;
    while (n < n_hashes) {
        int32_t id = block_pool_lookup(bp, &hashes[n]);
        if (id < 0)
            break;
        out_ids[n++] = id;
    }
    return n;
}

void prefix_cache_stats_record(struct prefix_cache_stats *st, int n_query_tokens, int n_hit_tokens,
                               bool preempted)
{
    if (preempted) {
        st->n_preempted_requests++;
        st->n_preempted_query_tokens += n_query_tokens;
        st->n_preempted_hit_tokens += n_hit_tokens;
    } else {
        st->n_requests++;
        st->n_query_tokens += n_query_tokens;
        st->n_hit_tokens += n_hit_tokens;
    }
}
