// Scheduler with vLLM V1 semantics: each step has one token budget. Running
// requests go first (decodes, and the next chunk of prompts being prefilled),
// then waiting requests in (priority, arrival) order, each taking as many
// tokens as the budget leaves (chunked prefill). When KV blocks run out, the
// lowest-priority, latest-arrived running request is preempted: its blocks are
// freed and it goes back to the waiting queue to be recomputed later.
// Engine thread only.
#ifndef VLLMC_ENGINE_SCHEDULER_H
#define VLLMC_ENGINE_SCHEDULER_H

#include "engine/kv_manager.h"
#include "engine/request.h"

struct scheduler_config {
    int max_num_seqs;           // running requests at most
    int max_num_batched_tokens; // token budget of one step
    int max_model_len;
    int max_prompt_logprob_tokens; // tokens of prompts with prompt logprobs per step (each
                                   // needs a logits row); 0 = no limit
};

// One step's plan. Valid until the next scheduler_schedule().
struct scheduler_output {
    int n_reqs;
    struct request **reqs; // borrowed [n_reqs]: running ones first, then new/resumed
    int *n_new_tokens;     // [n_reqs]: tokens to compute this step, from
                           // req->n_computed_tokens - n_new_tokens (already advanced)
    int n_tokens;          // sum of n_new_tokens
    int n_preempted;
    struct request **preempted; // borrowed [n_preempted]: preempted during this step
};

struct scheduler {
    struct scheduler_config cfg;
    struct kv_manager *kv;    // borrowed
    struct request **waiting; // owned array of borrowed requests, [n_waiting], sorted by
    int n_waiting;            // (priority, arrival_seq)
    struct request **running; // owned array [n_running], in admission order
    int n_running;
    int cap_requests; // capacity of waiting (>= every live request)
    struct scheduler_output out;
    int32_t *hit_ids; // owned scratch [max blocks of one request]
    int64_t n_preemptions;
};

enum vllmc_status scheduler_create(const struct scheduler_config *cfg, struct kv_manager *kv,
                                   struct scheduler **out);
void scheduler_free(struct scheduler *s); // NULL is a no-op; requests are not freed

// Queues req (status WAITING, borrowed until it finishes). Fails with
// VLLMC_ERR_NOMEM only; the caller checks that the request can fit at all.
enum vllmc_status scheduler_add(struct scheduler *s, struct request *req);

// Plans the next step, allocating KV blocks and advancing each scheduled
// request's n_computed_tokens by its new tokens. The result is borrowed.
const struct scheduler_output *scheduler_schedule(struct scheduler *s);

// Removes a request from the running or waiting set, frees its blocks and
// marks it finished with reason r. The request itself stays with the caller.
void scheduler_finish(struct scheduler *s, struct request *req, enum vllmc_finish_reason r);

// True when the request is done computing its known tokens and this step
// produced logits for a new token (decode, or the last chunk of its prompt).
static inline bool scheduler_samples(const struct request *req)
{
    return req->n_computed_tokens == req->n_tokens + req->n_pending;
}

#endif
