// Automatic prefix caching (vLLM V1): every full block of a request's tokens
// gets a hash chained to its parent's, H(parent hash, token ids, extra keys),
// so equal hashes mean equal whole prefixes. A new request reuses the longest
// run of leading blocks whose hashes are cached. Engine thread only.
#ifndef VLLMC_ENGINE_PREFIX_CACHE_H
#define VLLMC_ENGINE_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/block_pool.h"

// Token counts of prefix-cache lookups. Re-admissions of preempted requests
// are counted apart, as vLLM does, so hits measure reuse across requests.
struct prefix_cache_stats {
    int64_t n_requests;
    int64_t n_query_tokens;
    int64_t n_hit_tokens;
    int64_t n_preempted_requests;
    int64_t n_preempted_query_tokens;
    int64_t n_preempted_hit_tokens;
};

// SHA-256 over (parent hash or 32 zero bytes for the first block, n_tokens,
// token ids, n_extra, extra bytes), integers little-endian 32-bit. extra holds
// the extra keys (the request's cache salt on the first block), may be NULL.
void block_hash_compute(const struct block_hash *parent, const int32_t *tokens, int n_tokens,
                        const void *extra, size_t n_extra, struct block_hash *out);

// Counts the leading hashes[0..n_hashes) that are cached and writes their
// block ids to out_ids (room for n_hashes); stops at the first miss.
int prefix_cache_find_longest(const struct block_pool *bp, const struct block_hash *hashes,
                              int n_hashes, int32_t *out_ids);

void prefix_cache_stats_record(struct prefix_cache_stats *st, int n_query_tokens, int n_hit_tokens,
                               bool preempted);

#endif
