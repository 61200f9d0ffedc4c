// The engine thread: admits new requests, applies aborts, runs model steps
// (schedule, batch, forward, sample), decides when samples finish, and queues
// each request's outputs on its own channel. It never waits for a client.
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"

// ---- output channel ----

static size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

// What one output carries before it is packed into one allocation.
struct output_parts {
    int index;
    const int32_t *token_ids;
    int n_token_ids;
    const char *text;
    size_t text_len;
    const struct vllmc_logprob *logprobs; // [n_token_ids] or NULL
    const struct vllmc_logprob *plp;      // [n_plp] or NULL
    int n_plp;
    enum vllmc_finish_reason finish_reason;
    const char *stop_str;
    int32_t stop_token_id;
    bool final;
    struct vllmc_usage usage;
};

static size_t logprobs_bytes(const struct vllmc_logprob *lp, int n)
{
    size_t b = align8((size_t)n * sizeof *lp);
    for (int i = 0; i < n; i++)
        b += align8((size_t)lp[i].n_top * sizeof *lp[i].top);
    return b;
}

// Copies lp [n] (and their top lists) to dst and the memory after it.
static uint8_t *logprobs_pack(struct vllmc_logprob *dst, const struct vllmc_logprob *lp, int n)
{
    uint8_t *p = (uint8_t *)dst + align8((size_t)n * sizeof *dst);
    for (int i = 0; i < n; i++) {
        dst[i] = lp[i];
        if (lp[i].n_top) {
            memcpy(p, lp[i].top, (size_t)lp[i].n_top * sizeof *lp[i].top);
            dst[i].top = (const struct vllmc_top_logprob *)p;
            p += align8((size_t)lp[i].n_top * sizeof *lp[i].top);
        } else {
            dst[i].top = NULL;
        }
    }
    return p;
}

// One allocation holding the output and everything it points at, so the
// client frees it with one call and it outlives the request handle.
static struct vllmc_output *output_pack(const struct output_parts *o)
{
    size_t n_stop = o->stop_str ? strlen(o->stop_str) + 1 : 0;
    size_t size =
        align8(sizeof(struct vllmc_output)) + align8((size_t)o->n_token_ids * sizeof(int32_t)) +
        (o->logprobs ? logprobs_bytes(o->logprobs, o->n_token_ids) : 0) +
        (o->plp ? logprobs_bytes(o->plp, o->n_plp) : 0) + align8(o->text_len + 1) + n_stop;
    uint8_t *base = mem_alloc(size);
    if (!base)
        return NULL;
    struct vllmc_output *out = (struct vllmc_output *)base;
    uint8_t *p = base + align8(sizeof *out);
    *out = (struct vllmc_output){.index = o->index,
                                 .n_token_ids = o->n_token_ids,
                                 .finish_reason = o->finish_reason,
                                 .stop_token_id = o->stop_token_id,
                                 .final = o->final,
                                 .usage = o->usage};
    int32_t *ids = (int32_t *)p;
    if (o->n_token_ids)
        memcpy(ids, o->token_ids, (size_t)o->n_token_ids * sizeof *ids);
    out->token_ids = ids;
    p += align8((size_t)o->n_token_ids * sizeof(int32_t));
    if (o->logprobs) {
        struct vllmc_logprob *lp = (struct vllmc_logprob *)p;
        p = logprobs_pack(lp, o->logprobs, o->n_token_ids);
        out->logprobs = lp;
    }
    if (o->plp) {
        struct vllmc_logprob *lp = (struct vllmc_logprob *)p;
        p = logprobs_pack(lp, o->plp, o->n_plp);
        out->prompt_logprobs = lp;
        out->n_prompt_logprobs = o->n_plp;
    }
    char *text = (char *)p;
    if (o->text_len)
        memcpy(text, o->text, o->text_len);
    text[o->text_len] = '\0';
    out->text = text;
    out->text_len = o->text_len;
    p += align8(o->text_len + 1);
    if (o->stop_str) {
        memcpy(p, o->stop_str, n_stop);
        out->stop_str = (const char *)p;
    }
    return out;
}

// Queues an output on the request's channel and wakes its reader. When the
// output cannot be allocated, a final one still ends the stream (the reader
// gets VLLMC_ERR_CLOSED) so that nobody waits forever.
static void channel_push(struct vllmc_request *h, const struct output_parts *parts)
{
    struct vllmc_output *out = output_pack(parts);
    struct output_node *node = out ? mem_alloc(sizeof *node) : NULL;
    if (!node) {
        mem_free(out);
        out = NULL;
        log_error("engine: out of memory for an output of request %llu", (unsigned long long)h->id);
    }
    pthread_mutex_lock(&h->mu);
    if (node) {
        node->out = out;
        node->next = NULL;
        if (h->tail)
            h->tail->next = node;
        else
            h->head = node;
        h->tail = node;
    }
    if (parts->final)
        h->final_queued = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (h->on_output)
        h->on_output(h->user_data);
}

static struct vllmc_usage request_usage(const struct vllmc_request *h)
{
    double queue_s = h->first_scheduled_us ? (double)(h->first_scheduled_us - h->arrival_us) * 1e-6
                                           : -1.0;
    return (struct vllmc_usage){.prompt_tokens = h->n_prompt,
                                .completion_tokens = h->n_completion_tokens,
                                .cached_tokens = h->n_cached_tokens,
                                .queue_time_s = queue_s};
}

// ---- finishing ----

// Ends one sample: frees its blocks and queues its last output.
static void seq_finish(struct vllmc_engine *eng, struct vllmc_request *h, struct engine_seq *s,
                       enum vllmc_finish_reason reason)
{
    scheduler_finish(eng->sched, s->req, reason);
    s->finished = true;
    h->n_unfinished--;
    eng->counters.n_finished += h->n_unfinished == 0;
}

// Detaches a request whose samples have all finished and drops the engine's reference.
static void request_retire(struct vllmc_request *h)
{
    engine_request_free_seqs(h);
    pthread_mutex_lock(&h->mu);
    h->attached = false;
    h->engine = NULL;
    pthread_mutex_unlock(&h->mu);
    engine_request_unref(h);
}

// Finishes every unfinished sample of h with reason abort.
static void request_abort_all(struct vllmc_engine *eng, struct vllmc_request *h)
{
    for (int i = 0; i < h->n_samples; i++) {
        struct engine_seq *s = &h->seqs[i];
        if (s->finished)
            continue;
        seq_finish(eng, h, s, VLLMC_FINISH_ABORT);
        struct output_parts o = {.index = i,
                                 .finish_reason = VLLMC_FINISH_ABORT,
                                 .stop_token_id = -1,
                                 .final = h->n_unfinished == 0,
                                 .usage = request_usage(h)};
        channel_push(h, &o);
    }
}

static void live_remove_finished(struct vllmc_engine *eng)
{
    int k = 0;
    for (int i = 0; i < eng->n_live; i++) {
        struct vllmc_request *h = eng->live[i];
        // A request still in a step in flight is retired once that step is read.
        if (h->n_unfinished == 0 && h->n_inflight == 0)
            request_retire(h);
        else
            eng->live[k++] = h;
    }
    eng->n_live = k;
}

static void process_aborts(struct vllmc_engine *eng)
{
    for (int i = 0; i < eng->n_live; i++) {
        struct vllmc_request *h = eng->live[i];
        if (atomic_load(&h->abort_requested) && h->n_unfinished > 0)
            request_abort_all(eng, h);
    }
    live_remove_finished(eng);
}

// ---- admission ----

static void admit(struct vllmc_engine *eng, struct vllmc_request *inbox)
{
    while (inbox) {
        struct vllmc_request *h = inbox;
        inbox = h->next_inbox;
        h->next_inbox = NULL;
        if (eng->n_live == eng->cap_live) {
            int cap = eng->cap_live ? 2 * eng->cap_live : 64;
            struct vllmc_request **live = mem_realloc(eng->live, (size_t)cap * sizeof *live);
            if (!live) {
                log_error("engine: out of memory admitting request %llu",
                          (unsigned long long)h->id);
                request_abort_all(eng, h);
                request_retire(h);
                continue;
            }
            eng->live = live;
            eng->cap_live = cap;
        }
        eng->live[eng->n_live++] = h;
        for (int i = 0; i < h->n_samples; i++) {
            struct request *req = h->seqs[i].req;
            req->arrival_seq = eng->next_arrival++;
            if (scheduler_add(eng->sched, req)) {
                log_error("engine: out of memory queueing request %llu", (unsigned long long)h->id);
                atomic_store(&h->abort_requested, true);
            }
        }
    }
}

// ---- one model step ----

// Fills prompt logprobs from the logits rows of a chunk that scored prompt
// tokens: row j of a chunk starting at pos0 predicts the token at pos0 + j + 1.
static void fill_prompt_logprobs(struct vllmc_engine *eng, struct vllmc_request *h,
                                 const struct request *req, int n_new, const float *rows)
{
    int pos0 = req->n_computed_tokens - n_new;
    int k = h->prompt_logprobs;
    int last = pos0 + n_new; // highest predicted position
    if (last > req->n_prompt_tokens - 1)
        last = req->n_prompt_tokens - 1;
    // Samples compute the prompt from its start, so one that reaches past the
    // filled part covers the gap too.
    if (pos0 + 1 > h->n_plp_done)
        return;
    for (int p = h->n_plp_done; p <= last; p++) {
        const float *row = rows + (size_t)(p - pos0 - 1) * (size_t)eng->n_vocab;
        sampler_logprobs(row, eng->n_vocab, req->token_ids[p], k, &h->plp[p],
                         h->plp_top + (size_t)p * (size_t)k);
    }
    if (last + 1 > h->n_plp_done)
        h->n_plp_done = last + 1;
}

// vLLM's check_stop: length first, then (past min_tokens) EOS and stop ids.
static enum vllmc_finish_reason check_stop_token(const struct vllmc_engine *eng,
                                                 const struct request *req, int32_t tok,
                                                 int32_t *stop_token_id)
{
    *stop_token_id = -1;
    int n_out = request_n_output_tokens(req);
    if (req->n_tokens >= eng->max_model_len || n_out >= req->n_output_max)
        return VLLMC_FINISH_LENGTH;
    if (n_out < req->sp.min_tokens)
        return VLLMC_FINISH_NONE;
    if (!req->sp.ignore_eos && tok == eng->eos_id)
        return VLLMC_FINISH_STOP;
    if (sampler_is_stop_token(eng->sampler, &req->sp, tok)) {
        *stop_token_id = tok;
        return VLLMC_FINISH_STOP;
    }
    return VLLMC_FINISH_NONE;
}

static struct sample_input sample_input_of(struct request *req)
{
    return (struct sample_input){.sp = &req->sp,
                                 .prompt_ids = req->token_ids,
                                 .n_prompt = req->n_prompt_tokens,
                                 .output_ids = req->token_ids + req->n_prompt_tokens,
                                 .n_output = request_n_output_tokens(req),
                                 .rng = &req->rng};
}

// Appends the token sampled for one sample (with its logprobs when the
// request asked, else lp is NULL), decides whether it finished, detokenizes
// and queues the output.
static void seq_advance(struct vllmc_engine *eng, struct vllmc_request *h, struct engine_seq *s,
                        int32_t tok, const struct vllmc_logprob *lp)
{
    struct request *req = s->req;
    const struct vllmc_sampling_params *sp = &req->sp;
    request_append_token(req, tok);
    h->n_completion_tokens++;
    eng->counters.n_generation_tokens++;
    if (!h->counted_prompt) {
        h->counted_prompt = true;
        eng->counters.n_prompt_tokens += h->n_prompt;
        h->n_cached_tokens = req->n_cached_tokens > 0 ? req->n_cached_tokens : 0;
    }

    int32_t stop_token_id;
    enum vllmc_finish_reason reason = check_stop_token(eng, req, tok, &stop_token_id);
    bool stopped_by_token = reason == VLLMC_FINISH_STOP;
    const char *stop_str = NULL;
    if (s->detok) {
        const char *t = "";
        size_t n = 0;
        // A stop token's own text stays out of the output, as in vLLM.
        if (!(stopped_by_token && !sp->include_stop_str_in_output) &&
            detok_push(s->detok, tok, &t, &n) != VLLMC_OK)
            n = 0;
        bool check = request_n_output_tokens(req) > sp->min_tokens;
        if (output_text_append(&s->text, t, n, check))
            log_error("engine: out of memory for the text of request %llu",
                      (unsigned long long)h->id);
        if (s->text.stop_index >= 0) {
            reason = VLLMC_FINISH_STOP;
            stop_token_id = -1;
            stop_str = sp->stop[s->text.stop_index];
        }
        if (reason != VLLMC_FINISH_NONE && detok_flush(s->detok, &t, &n) == VLLMC_OK)
            output_text_append(&s->text, t, n, false);
    }
    if (reason != VLLMC_FINISH_NONE)
        seq_finish(eng, h, s, reason);

    const char *delta = "";
    size_t n_delta = 0;
    if (s->detok)
        output_text_take_delta(&s->text, reason != VLLMC_FINISH_NONE, &delta, &n_delta);
    struct output_parts o = {.index = req->sample_index,
                             .token_ids = &tok,
                             .n_token_ids = 1,
                             .text = delta,
                             .text_len = n_delta,
                             .logprobs = lp,
                             .finish_reason = reason,
                             .stop_str = stop_str,
                             .stop_token_id = stop_token_id,
                             .final = h->n_unfinished == 0,
                             .usage = request_usage(h)};
    if (h->prompt_logprobs >= 0 && !h->plp_sent && h->n_plp_done >= h->n_prompt) {
        o.plp = h->plp;
        o.n_plp = h->n_prompt;
        h->plp_sent = true;
    }
    channel_push(h, &o);
}

// seq_advance with a token the device sampled, and its logprobs (d) when the
// request asked.
static void seq_advance_device(struct vllmc_engine *eng, struct vllmc_request *h,
                               struct engine_seq *s, int32_t tok, const struct sample_logprob *d)
{
    if (!d) {
        seq_advance(eng, h, s, tok, NULL);
        return;
    }
    int n_top = d->n_top < ENGINE_MAX_LOGPROBS ? d->n_top : ENGINE_MAX_LOGPROBS;
    for (int j = 0; j < n_top; j++)
        eng->lp_scratch[j] = (struct vllmc_top_logprob){d->top_id[j], d->top_logprob[j]};
    struct vllmc_logprob lp = {.token_id = tok,
                               .logprob = d->logprob,
                               .rank = d->rank,
                               .n_top = n_top,
                               .top = eng->lp_scratch};
    seq_advance(eng, h, s, tok, &lp);
}

// ---- steps in flight ----
//
// A step runs in two halves: engine_step_launch() queues its forward pass,
// and engine_step_sample() queues (device) or runs (host) its sampling; the
// tokens are read and processed by engine_step_finish(). With asynchronous
// scheduling (vLLM's --async-scheduling) the next step is scheduled and
// launched between the two halves' ends: every request sampled in step N
// takes its token as pending (request.n_pending), the scheduler counts it,
// and the runner copies it into step N+1's input ids on the device, so the
// device never waits while the host reads step N's tokens, detokenizes and
// queues outputs. A request that step N finishes has already been put in
// step N+1: that row computes and is dropped (its blocks are freed once the
// engine knows; the stream order keeps any later owner's writes after it).

// True when the request may take its sample of this step as pending: it
// cannot end by length with this token (a stop token or string ends it one
// step late, and its extra row is dropped).
static bool seq_may_pend(const struct vllmc_engine *eng, const struct request *req)
{
    return req->n_tokens + 1 < eng->max_model_len &&
           request_n_output_tokens(req) + 1 < req->n_output_max;
}

// Schedules a step and queues its forward pass into eng->steps[slot].
// False when the scheduler had nothing to run.
static bool engine_step_launch(struct vllmc_engine *eng, int slot)
{
    struct engine_inflight *st = &eng->steps[slot];
    double t0 = time_now_s();
    const struct scheduler_output *so = scheduler_schedule(eng->sched);
    if (so->n_reqs == 0)
        return false;
    double t_scheduled = time_now_s();
    int64_t now_us = time_now_us();
    st->n_reqs = so->n_reqs;
    st->decode_only = true;
    st->sampled = false;
    st->status = VLLMC_OK;
    for (int i = 0; i < so->n_reqs; i++) {
        struct request *req = so->reqs[i];
        struct vllmc_request *h = req->engine_data;
        if (!h->first_scheduled_us)
            h->first_scheduled_us = now_us;
        h->n_inflight++;
        st->reqs[i] = req;
        st->n_new[i] = so->n_new_tokens[i];
        st->decode_only &= so->n_new_tokens[i] == 1;
    }
    struct runner *r = eng->runner;
    if (eng->dsampler) {
        r->pending_ids = eng->dsampler->ids_dev;
        r->n_pending_ids = eng->dsampler->n_rows;
    }
    if (backend_event_record(eng->be, st->ev_start))
        st->status = VLLMC_ERR_BACKEND;
    if (!st->status)
        st->status = runner_execute(r, so);
    if (!st->status && backend_event_record(eng->be, st->ev_forwarded))
        st->status = VLLMC_ERR_BACKEND;
    for (int i = 0; i < st->n_reqs; i++) {
        st->row_first[i] = r->row_first[i];
        st->n_rows[i] = r->n_rows[i];
    }
    eng->counters.n_steps++;
    st->t_schedule_s = t_scheduled - t0;
    st->t_prepare_s = r->t_prepare_s;
    st->t_forward_s = time_now_s() - t_scheduled - r->t_prepare_s;
    return true;
}

// Rows of the step sampled on the host (parameters the device sampler does
// not cover), and prompt logprobs: their logits come to the host now, before
// a later step's forward pass overwrites them.
static enum vllmc_status step_sample_host(struct vllmc_engine *eng, struct engine_inflight *st,
                                          int i, bool plp, bool sample)
{
    struct runner *r = eng->runner;
    struct request *req = st->reqs[i];
    struct vllmc_request *h = req->engine_data;
    const float *rows;
    int64_t t = time_now_us();
    enum vllmc_status rc = runner_host_rows(r, st->row_first[i], st->n_rows[i], &rows);
    eng->counters.wait_us += time_now_us() - t;
    if (rc)
        return rc;
    if (plp)
        fill_prompt_logprobs(eng, h, req, st->n_new[i], rows);
    if (!sample || st->dev_row[i] >= 0)
        return VLLMC_OK;
    const float *row = rows + (size_t)(st->n_rows[i] - 1) * (size_t)eng->n_vocab;
    struct sample_input in = sample_input_of(req);
    int32_t tok = sampler_sample(eng->sampler, &in, row);
    st->host_tok[i] = tok;
    if (h->logprobs >= 0)
        sampler_logprobs(row, eng->n_vocab, tok, h->logprobs, &st->host_lp[i],
                         st->host_top + (size_t)i * ENGINE_MAX_LOGPROBS);
    return VLLMC_OK;
}

// Queues the device sampling of the step in `slot` and samples the rest on
// the host; marks pending tokens when pend.
static void engine_step_sample(struct vllmc_engine *eng, int slot, bool pend)
{
    struct engine_inflight *st = &eng->steps[slot];
    struct runner *r = eng->runner;
    struct device_sampler *ds = eng->dsampler;
    double t0 = time_now_s();
    if (ds)
        device_sampler_clear(ds);
    for (int i = 0; i < st->n_reqs; i++) {
        struct request *req = st->reqs[i];
        struct vllmc_request *h = req->engine_data;
        struct engine_seq *s = &h->seqs[req->sample_index];
        st->sample[i] = !st->status && scheduler_samples(req) && !s->finished;
        st->dev_row[i] = -1;
        st->host_tok[i] = -1;
        if (!st->sample[i] || !ds || st->n_rows[i] != 1 ||
            runner_wants_all_logits(req, st->n_new[i]) || !device_sampler_covers(&req->sp))
            continue;
        struct sample_input in = sample_input_of(req);
        if (device_sampler_add(ds, eng->sampler, &in, st->row_first[i], h->logprobs,
                               &st->dev_row[i]))
            st->dev_row[i] = -1; // out of memory for its adjustments: the host samples it
    }
    if (!st->status && backend_event_record(eng->be, st->ev_sampling))
        st->status = VLLMC_ERR_BACKEND;
    if (!st->status && ds) {
        st->status = device_sampler_launch(ds, r->logits_dev, r->n_logits);
        if (st->status)
            err_set(&r->err, st->status, "%s", ds->err.msg);
    }
    for (int i = 0; i < st->n_reqs && !st->status; i++) {
        struct request *req = st->reqs[i];
        struct vllmc_request *h = req->engine_data;
        bool plp = h->prompt_logprobs >= 0 && st->n_rows[i] == st->n_new[i] &&
                   runner_wants_all_logits(req, st->n_new[i]);
        if (plp || (st->sample[i] && st->dev_row[i] < 0))
            st->status = step_sample_host(eng, st, i, plp, st->sample[i]);
    }
    if (!st->status && backend_event_record(eng->be, st->ev_end))
        st->status = VLLMC_ERR_BACKEND;
    st->sampled = !st->status;
    for (int i = 0; i < st->n_reqs && pend && !st->status; i++) {
        struct request *req = st->reqs[i];
        if (!st->sample[i] || !seq_may_pend(eng, req))
            continue;
        req->n_pending = 1;
        req->pending_token = st->host_tok[i];
        req->pending_row = st->dev_row[i];
    }
    st->t_sample_s = time_now_s() - t0;
}

// Adds the device time between two finished events to the idle counters.
static void idle_add(struct vllmc_engine *eng, const struct backend_event *from,
                     const struct backend_event *to)
{
    double ms;
    if (!backend_event_elapsed_ms(eng->be, from, to, &ms) && ms > 0)
        eng->counters.idle_us += (int64_t)(ms * 1e3);
}

// Waits for the step in `slot`, reads its tokens and queues the outputs.
// True when it was a decode-only step (counted in the decode timings).
static bool engine_step_finish(struct vllmc_engine *eng, int slot)
{
    struct engine_inflight *st = &eng->steps[slot];
    const struct engine_inflight *prev = &eng->steps[!slot];
    struct runner *r = eng->runner;
    struct engine_counters *ct = &eng->counters;
    double t0 = time_now_s();
    if (st->sampled) {
        int64_t t = time_now_us();
        if (backend_event_wait(eng->be, st->ev_end))
            st->status = err_set(&r->err, VLLMC_ERR_BACKEND, "%s", backend_err(eng->be)->msg);
        ct->wait_us += time_now_us() - t;
    }
    if (st->sampled && !st->status) {
        // Device idle time: between the previous step's end and this step's
        // start, and between this forward pass and its sampling.
        idle_add(eng, st->ev_forwarded, st->ev_sampling);
        if (eng->prev_end_valid)
            idle_add(eng, prev->ev_end, st->ev_start);
        ct->n_idle++;
        eng->prev_end_valid = true;
    }
    const struct device_sampler *ds = eng->dsampler;
    for (int i = 0; i < st->n_reqs; i++) {
        struct request *req = st->reqs[i];
        struct vllmc_request *h = req->engine_data;
        struct engine_seq *s = &h->seqs[req->sample_index];
        h->n_inflight--;
        if (!st->sample[i])
            continue;
        req->n_pending = 0; // its token joins the known ones now
        if (s->finished || st->status)
            continue;
        if (st->dev_row[i] >= 0) {
            seq_advance_device(eng, h, s, ds->ids[st->dev_row[i]],
                               h->logprobs >= 0 ? &ds->lps[st->dev_row[i]] : NULL);
        } else {
            seq_advance(eng, h, s, st->host_tok[i], h->logprobs >= 0 ? &st->host_lp[i] : NULL);
        }
    }
    if (st->status) {
        // A failing forward pass or sampler is a device or model error: end
        // the requests of this step rather than retry them forever.
        log_error("engine: model step failed: %s", r->err.msg);
        for (int i = 0; i < st->n_reqs; i++) {
            struct vllmc_request *h = st->reqs[i]->engine_data;
            if (h->n_unfinished > 0)
                request_abort_all(eng, h);
        }
    }
    double t_output = time_now_s() - t0;
    bool decode = st->decode_only && !st->status;
    if (decode) {
        ct->n_decode_steps++;
        ct->decode_schedule_s += st->t_schedule_s;
        ct->decode_prepare_s += st->t_prepare_s;
        ct->decode_forward_s += st->t_forward_s;
        ct->decode_output_s += st->t_sample_s + t_output;
        double fwd_ms, sample_ms;
        if (st->sampled &&
            !backend_event_elapsed_ms(eng->be, st->ev_start, st->ev_forwarded, &fwd_ms) &&
            !backend_event_elapsed_ms(eng->be, st->ev_sampling, st->ev_end, &sample_ms)) {
            ct->n_decode_device++;
            ct->decode_device_forward_s += fwd_ms * 1e-3;
            ct->decode_device_sample_s += sample_ms * 1e-3;
        }
    }
    st->n_reqs = 0;
    return decode;
}

// One turn of the engine loop: with asynchronous scheduling, the next step
// is launched before the one in flight is finished.
static void engine_step(struct vllmc_engine *eng)
{
    double t_start = time_now_s(), cpu_start = time_process_cpu_s();
    int64_t wait_before = eng->counters.wait_us;
    int cur = eng->step_cur, next = !cur;
    bool in_flight = eng->steps[cur].n_reqs > 0, decode = false;
    if (!in_flight) {
        // The slots alternate, so that the other one holds the previous step's events.
        if (engine_step_launch(eng, next)) {
            engine_step_sample(eng, next, eng->async_scheduling);
            if (!eng->async_scheduling)
                decode = engine_step_finish(eng, next);
            eng->step_cur = next;
        }
    } else {
        bool launched = engine_step_launch(eng, next);
        eng->counters.n_async_steps += launched;
        decode = engine_step_finish(eng, cur);
        if (launched) {
            engine_step_sample(eng, next, true);
            eng->step_cur = next;
        }
    }
    live_remove_finished(eng);
    int64_t waited = eng->counters.wait_us - wait_before;
    eng->counters.host_us += (int64_t)((time_now_s() - t_start) * 1e6) - waited;
    // A turn finishes at most one step: its CPU time is that step's.
    if (decode)
        eng->counters.decode_cpu_s += time_process_cpu_s() - cpu_start;
}

static void publish_stats(struct vllmc_engine *eng)
{
    const struct block_pool *bp = eng->km->pool;
    struct vllmc_engine_stats st = {
        .n_running = eng->sched->n_running,
        .n_waiting = eng->sched->n_waiting,
        .n_blocks_total = bp->n_blocks,
        .n_blocks_free = bp->n_free,
        .kv_cache_usage = block_pool_usage(bp),
        .block_size = eng->block_size,
        .max_model_len = eng->max_model_len,
        .prefix_cache_queries = eng->km->stats.n_query_tokens,
        .prefix_cache_hits = eng->km->stats.n_hit_tokens,
        .n_preemptions = eng->sched->n_preemptions,
        .prompt_tokens_total = eng->counters.n_prompt_tokens,
        .generation_tokens_total = eng->counters.n_generation_tokens,
        .n_requests_finished = eng->counters.n_finished,
        .n_steps = eng->counters.n_steps,
        .n_async_steps = eng->counters.n_async_steps,
        .n_decode_steps = eng->counters.n_decode_steps,
        .decode_schedule_s = eng->counters.decode_schedule_s,
        .decode_prepare_s = eng->counters.decode_prepare_s,
        .decode_forward_s = eng->counters.decode_forward_s,
        .decode_output_s = eng->counters.decode_output_s,
        .n_graph_steps = eng->runner->n_graph_steps,
        .step_host_s = (double)eng->counters.host_us * 1e-6,
        .device_wait_s = (double)eng->counters.wait_us * 1e-6,
        .device_idle_s = (double)eng->counters.idle_us * 1e-6,
        .n_device_idle = eng->counters.n_idle,
        .decode_cpu_s = eng->counters.decode_cpu_s,
        .n_decode_device = eng->counters.n_decode_device,
        .decode_device_forward_s = eng->counters.decode_device_forward_s,
        .decode_device_sample_s = eng->counters.decode_device_sample_s,
    };
    pthread_mutex_lock(&eng->mu);
    eng->stats = st;
    pthread_mutex_unlock(&eng->mu);
}

void *engine_thread_main(void *arg)
{
    struct vllmc_engine *eng = arg;
    publish_stats(eng);
    for (;;) {
        pthread_mutex_lock(&eng->mu);
        while (!eng->stop && !eng->inbox_head && !eng->abort_pending &&
               eng->sched->n_running + eng->sched->n_waiting == 0 &&
               eng->steps[eng->step_cur].n_reqs == 0) {
            eng->prev_end_valid = false; // a pause is not idle time between steps
            pthread_cond_wait(&eng->cv, &eng->mu);
        }
        struct vllmc_request *inbox = eng->inbox_head;
        eng->inbox_head = eng->inbox_tail = NULL;
        eng->abort_pending = false;
        bool stop = eng->stop;
        pthread_mutex_unlock(&eng->mu);

        admit(eng, inbox);
        if (stop)
            break;
        process_aborts(eng);
        if (eng->sched->n_running + eng->sched->n_waiting > 0 ||
            eng->steps[eng->step_cur].n_reqs > 0)
            engine_step(eng);
        publish_stats(eng);
    }
    // Shutdown: the step in flight is read, then every request still here
    // ends with reason abort.
    if (eng->steps[eng->step_cur].n_reqs > 0)
        (void)engine_step_finish(eng, eng->step_cur);
    for (int i = 0; i < eng->n_live; i++)
        request_abort_all(eng, eng->live[i]);
    live_remove_finished(eng);
    publish_stats(eng);
    return NULL;
}
