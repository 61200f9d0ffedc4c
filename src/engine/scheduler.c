// Scheduler: token budget, decode-first, chunked prefill, priority order and
// preemption by recompute (vLLM V1's Scheduler.schedule()).
#include "engine/scheduler.h"

#include <string.h>

#include "core/alloc.h"
#include "core/status.h"

// True when a should run before b: lower priority value, then earlier arrival.
static bool request_before(const struct request *a, const struct request *b)
{
    if (a->priority != b->priority)
        return a->priority < b->priority;
    return a->arrival_seq < b->arrival_seq;
}

static void waiting_insert(struct scheduler *s, struct request *req)
{
    int i = s->n_waiting;
    while (i > 0 && request_before(req, s->waiting[i - 1]))
        i--;
    memmove(s->waiting + i + 1, s->waiting + i, (size_t)(s->n_waiting - i) * sizeof *s->waiting);
    s->waiting[i] = req;
    s->n_waiting++;
}

static bool array_remove(struct request **a, int *n, const struct request *req)
{
    for (int i = 0; i < *n; i++)
        if (a[i] == req) {
            memmove(a + i, a + i + 1, (size_t)(*n - i - 1) * sizeof *a);
            (*n)--;
            return true;
        }
    return false;
}

enum vllmc_status scheduler_create(const struct scheduler_config *cfg, struct kv_manager *kv,
                                   struct scheduler **out)
{
    *out = NULL;
    if (cfg->max_num_seqs < 1 || cfg->max_num_batched_tokens < 1 || cfg->max_model_len < 2)
        return VLLMC_ERR_INVALID_ARG;
    struct scheduler *s = mem_calloc(1, sizeof *s);
    if (!s)
        return VLLMC_ERR_NOMEM;
    s->cfg = *cfg;
    s->kv = kv;
    size_t n_seqs = (size_t)cfg->max_num_seqs;
    int max_blocks = (cfg->max_model_len + kv->block_size - 1) / kv->block_size;
    s->cap_requests = 16;
    s->waiting = mem_alloc((size_t)s->cap_requests * sizeof *s->waiting);
    s->running = mem_alloc(n_seqs * sizeof *s->running);
    s->out.reqs = mem_alloc(n_seqs * sizeof *s->out.reqs);
    s->out.n_new_tokens = mem_alloc(n_seqs * sizeof *s->out.n_new_tokens);
    s->out.preempted = mem_alloc(n_seqs * sizeof *s->out.preempted);
    s->hit_ids = mem_alloc((size_t)max_blocks * sizeof *s->hit_ids);
    if (!s->waiting || !s->running || !s->out.reqs || !s->out.n_new_tokens || !s->out.preempted ||
        !s->hit_ids) {
        scheduler_free(s);
        return VLLMC_ERR_NOMEM;
    }
    *out = s;
    return VLLMC_OK;
}

void scheduler_free(struct scheduler *s)
{
    if (!s)
        return;
    mem_free(s->hit_ids);
    mem_free(s->out.preempted);
    mem_free(s->out.n_new_tokens);
    mem_free(s->out.reqs);
    mem_free(s->running);
    mem_free(s->waiting);
    mem_free(s);
}

enum vllmc_status scheduler_add(struct scheduler *s, struct request *req)
{
    // The waiting array holds every live request at most (all may be preempted).
    int n_live = s->n_waiting + s->n_running + 1;
    if (n_live > s->cap_requests) {
        int cap = s->cap_requests * 2;
        struct request **w = mem_realloc(s->waiting, (size_t)cap * sizeof *w);
        if (!w)
            return VLLMC_ERR_NOMEM;
        s->waiting = w;
        s->cap_requests = cap;
    }
    req->status = REQUEST_WAITING;
    waiting_insert(s, req);
    return VLLMC_OK;
}

// Frees the request's blocks and puts it back in the waiting queue to be
// recomputed from its first token (prompt and generated tokens alike).
static void scheduler_preempt(struct scheduler *s, struct request *req)
{
    kv_manager_free_request(s->kv, req);
    req->status = REQUEST_PREEMPTED;
    req->n_computed_tokens = 0;
    req->n_preemptions++;
    s->n_preemptions++;
    waiting_insert(s, req);
    s->out.preempted[s->out.n_preempted++] = req;
}

// The running request to preempt: lowest priority, then latest arrival.
static int scheduler_pick_victim(const struct scheduler *s)
{
    int v = 0;
    for (int i = 1; i < s->n_running; i++)
        if (request_before(s->running[v], s->running[i]))
            v = i;
    return v;
}

static void out_push(struct scheduler_output *o, struct request *req, int n_new)
{
    o->reqs[o->n_reqs] = req;
    o->n_new_tokens[o->n_reqs] = n_new;
    o->n_reqs++;
    o->n_tokens += n_new;
}

// Takes a request preempted in this step back out of the step's plan.
static void out_unschedule(struct scheduler_output *o, const struct request *req, int *budget)
{
    for (int i = 0; i < o->n_reqs; i++)
        if (o->reqs[i] == req) {
            *budget += o->n_new_tokens[i];
            o->n_tokens -= o->n_new_tokens[i];
            memmove(o->reqs + i, o->reqs + i + 1, (size_t)(o->n_reqs - i - 1) * sizeof *o->reqs);
            memmove(o->n_new_tokens + i, o->n_new_tokens + i + 1,
                    (size_t)(o->n_reqs - i - 1) * sizeof *o->n_new_tokens);
            o->n_reqs--;
            return;
        }
}

// Requests computing prompt tokens whose logprobs were asked for need a
// logits row per token, which the per-step prompt-logprob budget bounds.
static bool scores_prompt(const struct request *req)
{
    return req->sp.prompt_logprobs >= 0 && req->n_computed_tokens < req->n_prompt_tokens - 1;
}

static int clamp_prompt_logprobs(const struct scheduler *s, const struct request *req, int n_new,
                                 int plp_budget)
{
    if (s->cfg.max_prompt_logprob_tokens > 0 && scores_prompt(req) && n_new > plp_budget)
        return plp_budget;
    return n_new;
}

// ---- running requests: decodes and continuing prefills ----

static void schedule_running(struct scheduler *s, int *budget, int *plp_budget)
{
    int i = 0;
    while (i<s->n_running && * budget> 0) {
        struct request *req = s->running[i];
        // A pending token (asynchronous scheduling) is computed like a known one.
        int n_new = req->n_tokens + req->n_pending - req->n_computed_tokens;
        if (n_new > *budget)
            n_new = *budget;
        n_new = clamp_prompt_logprobs(s, req, n_new, *plp_budget);
        if (n_new == 0) {
            i++;
            continue;
        }
        bool scheduled = false;
        for (;;) {
            if (kv_manager_allocate_slots(s->kv, req, n_new, NULL, 0)) {
                scheduled = true;
                break;
            }
            int v = scheduler_pick_victim(s);
            struct request *victim = s->running[v];
            memmove(s->running + v, s->running + v + 1,
                    (size_t)(s->n_running - v - 1) * sizeof *s->running);
            s->n_running--;
            if (v < i)
                i--; // the victim ran earlier in this loop: undo its share of the step
            out_unschedule(&s->out, victim, budget);
            scheduler_preempt(s, victim);
            if (victim == req)
                break;
        }
        if (!scheduled)
            break;
        if (scores_prompt(req))
            *plp_budget -= n_new;
        out_push(&s->out, req, n_new);
        *budget -= n_new;
        i++;
    }
}

// ---- waiting requests: new and preempted, in (priority, arrival) order ----

static void schedule_waiting(struct scheduler *s, int *budget, int *plp_budget)
{
    struct kv_manager *kv = s->kv;
    while (s->n_waiting > 0 && *budget > 0 && s->n_running < s->cfg.max_num_seqs) {
        struct request *req = s->waiting[0];
        // Preempted while its last sample was in flight: it resumes once the
        // engine has the token (the next step), keeping arrival order.
        if (req->n_pending)
            break;
        int n_hit = kv_manager_get_computed_blocks(kv, req, s->hit_ids);
        int n_computed = n_hit * kv->block_size;
        int n_new = req->n_tokens - n_computed;
        if (n_new > *budget)
            n_new = *budget;
        n_new = clamp_prompt_logprobs(s, req, n_new, *plp_budget);
        if (n_new == 0)
            break;
        // Head-of-line: a request that does not fit now waits, and so do the
        // ones behind it, so that arrival order is kept.
        if (!kv_manager_allocate_slots(kv, req, n_new, s->hit_ids, n_hit))
            break;
        kv_manager_record_lookup(kv, req, n_hit);
        memmove(s->waiting, s->waiting + 1, (size_t)(s->n_waiting - 1) * sizeof *s->waiting);
        s->n_waiting--;
        s->running[s->n_running++] = req;
        req->status = REQUEST_RUNNING;
        req->n_computed_tokens = n_computed;
        if (scores_prompt(req))
            *plp_budget -= n_new;
        if (req->n_cached_tokens < 0)
            req->n_cached_tokens = n_computed;
        out_push(&s->out, req, n_new);
        *budget -= n_new;
    }
}

const struct scheduler_output *scheduler_schedule(struct scheduler *s)
{
    struct scheduler_output *o = &s->out;
    o->n_reqs = 0;
    o->n_tokens = 0;
    o->n_preempted = 0;
    int budget = s->cfg.max_num_batched_tokens;
    int plp_budget = s->cfg.max_prompt_logprob_tokens;
    schedule_running(s, &budget, &plp_budget);
    // As in vLLM, a step that had to preempt admits nobody new: memory is short.
    if (o->n_preempted == 0)
        schedule_waiting(s, &budget, &plp_budget);
    for (int i = 0; i < o->n_reqs; i++)
        o->reqs[i]->n_computed_tokens += o->n_new_tokens[i];
    return o;
}

void scheduler_finish(struct scheduler *s, struct request *req, enum vllmc_finish_reason r)
{
    if (!array_remove(s->running, &s->n_running, req))
        array_remove(s->waiting, &s->n_waiting, req);
    kv_manager_free_request(s->kv, req);
    req->status = REQUEST_FINISHED;
    req->finish_reason = r;
}
