// A request as the engine core sees it: one sequence (one of a prompt's n
// samples) with its tokens, its progress, its KV blocks and its sampling
// state. The engine thread owns it; nothing here is shared with clients.
#ifndef VLLMC_ENGINE_REQUEST_H
#define VLLMC_ENGINE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/block_pool.h"
#include "engine/rng.h"
#include "vllmc.h"

enum request_status {
    REQUEST_WAITING, // never scheduled yet
    REQUEST_RUNNING,
    REQUEST_PREEMPTED, // back in the waiting queue, blocks freed; recomputes on resume
    REQUEST_FINISHED,  // see finish_reason
};

struct request {
    uint64_t id;
    uint64_t arrival_seq; // admission order: the first-come-first-served tiebreak
    int priority;         // lower runs earlier
    enum request_status status;
    enum vllmc_finish_reason finish_reason;

    int32_t *token_ids; // owned [n_tokens_max]: the prompt, then generated tokens
    int n_prompt_tokens;
    int n_tokens;
    int n_tokens_max;      // max_model_len
    int n_output_max;      // generated tokens allowed (max_tokens within max_model_len)
    int n_computed_tokens; // tokens whose KV is in the cache (or is being written this step)
    int n_cached_tokens;   // prompt tokens served by the prefix cache at first scheduling;
                           // -1 until then
    int n_preemptions;
    // Asynchronous scheduling: a token sampled in a step whose results the
    // engine has not processed yet (0 or 1). The scheduler already counts it
    // as a token to compute; its id is pending_token when the host knows it,
    // else -1 and it sits in row pending_row of the device sampler's ids.
    int n_pending;
    int32_t pending_token;
    int pending_row;

    int32_t *block_ids; // owned [n_blocks_max]: KV blocks in order
    int n_blocks;
    int n_blocks_max;                // ceil(max_model_len / block_size)
    struct block_hash *block_hashes; // owned [n_blocks_max]: hashes of the full blocks of
    int n_block_hashes;              // token_ids, kept up to date by request_update_hashes()
    int n_cached_blocks;             // leading blocks already offered to the prefix cache
    int block_size;
    uint8_t *cache_salt; // owned, may be NULL: extra key of the first block
    size_t n_cache_salt;
    bool skip_prefix_cache; // prompt logprobs need every prompt position computed

    struct vllmc_sampling_params sp; // deep copy: stop_token_ids, stop, logit_bias owned
    struct rng rng;
    int sample_index;  // which of the prompt's n samples
    void *engine_data; // borrowed: the engine's per-request record
};

// Creates a request over a copy of prompt (1 <= n_prompt < max_model_len) and a
// deep copy of sp; cache_salt (may be NULL) is copied too. *out owns it; free
// with request_free(). The caller sets id, arrival_seq, priority and the rng.
enum vllmc_status request_create(const int32_t *prompt, int n_prompt,
                                 const struct vllmc_sampling_params *sp, const char *cache_salt,
                                 int max_model_len, int block_size, struct request **out);
void request_free(struct request *req); // NULL is a no-op

// Appends a generated token (the caller checks room: n_tokens < n_tokens_max)
// and hashes any block it completes.
void request_append_token(struct request *req, int32_t token_id);
// Hashes the full blocks of token_ids not hashed yet.
void request_update_hashes(struct request *req);

static inline int request_n_output_tokens(const struct request *req)
{
    return req->n_tokens - req->n_prompt_tokens;
}

static inline bool request_is_finished(const struct request *req)
{
    return req->status == REQUEST_FINISHED;
}

// Deep copy of sampling params (arrays and strings), and its release.
enum vllmc_status sampling_params_copy(struct vllmc_sampling_params *dst,
                                       const struct vllmc_sampling_params *src);
void sampling_params_free(struct vllmc_sampling_params *sp);

#endif
