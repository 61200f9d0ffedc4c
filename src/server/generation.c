// /v1/completions and /v1/chat/completions: engine requests in, OpenAI
// responses out. One engine request per prompt (n samples each); choice
// index = prompt index * n + sample index, as vLLM numbers them.
#include "server/generation.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "server/sse.h"

#define POLL_MS 20

struct gen_choice {
    char *text;        // owned: accumulated text (non-streaming)
    size_t text_len;
    size_t text_cap;
    int n_tokens;
    size_t n_chars;    // characters (code points) of the choice's text so far, echo included:
                       // where the next token's text_offset points
    json_t *logprobs;  // owned: completions {tokens, token_logprobs, top_logprobs, text_offset}
                       // or chat {content: [...]}; NULL when not requested
    enum vllmc_finish_reason finish;
    json_t *stop_reason; // owned: string, integer or null
    bool started;      // streaming: the first chunk (role / echo) went out
};

struct gen {
    struct server *srv;
    struct oai_request r;            // owned
    int n_prompts;
    struct vllmc_request **reqs;     // owned [n_prompts]
    bool *req_final;                 // [n_prompts]
    char **echo_text;                // owned [n_prompts]: prompt text for echo, or NULL
    json_t **prompt_lp;              // owned [n_prompts]: vLLM's prompt_logprobs, or NULL
    json_t **echo_lp;                // owned [n_prompts]: echo's prompt tokens in the
                                     // completions logprobs format, or NULL
    struct gen_choice *choices;      // owned [n_prompts * n]
    int n_choices;
    char id[64];
    int64_t created;
    int prompt_tokens;
    int completion_tokens;
    int cached_tokens;
    double t_arrival;
    double *t_first;                 // [n_prompts] first token time, 0 until then
    double *t_last;                  // [n_prompts] last token time
    double *queue_s;                 // [n_prompts] engine queue time, -1 until known
    int *prompt_lens;                // [n_prompts]
    struct sse_buffer sse;
    bool done_sent;
    bool metrics_recorded;
};

static const char *finish_str(enum vllmc_finish_reason f)
{
    const char *s = vllmc_finish_reason_str(f);
    return s ? s : "stop";
}

static bool text_append(struct gen_choice *c, const char *s, size_t n)
{
    if (c->text_len + n + 1 > c->text_cap) {
        size_t cap = c->text_cap ? 2 * c->text_cap : 256;
        while (cap < c->text_len + n + 1)
            cap *= 2;
        char *t = mem_realloc(c->text, cap);
        if (!t)
            return false;
        c->text = t;
        c->text_cap = cap;
    }
    memcpy(c->text + c->text_len, s, n);
    c->text_len += n;
    c->text[c->text_len] = '\0';
    return true;
}

// The text of one token as a client sees it (decoded, specials kept).
static json_t *token_string(struct server *srv, int32_t id)
{
    char *t = NULL;
    if (vllmc_detokenize(srv->engine, &id, 1, false, &t) != VLLMC_OK || !t)
        return json_string("");
    json_t *s = json_stringn_nocheck(t, strlen(t));
    vllmc_text_free(t);
    return s;
}

static json_t *utf8_bytes(const json_t *s)
{
    json_t *a = json_array();
    const unsigned char *p = (const unsigned char *)json_string_value(s);
    for (size_t i = 0; i < json_string_length(s); i++)
        json_array_append_new(a, json_integer(p[i]));
    return a;
}

static json_t *float_or_null(float v)
{
    return isfinite(v) ? json_real(v) : json_real(-9999.0);
}

// Characters (code points) of the UTF-8 text s[0..n): OpenAI's text_offset
// counts characters, as Python's len() does in vLLM.
static size_t utf8_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

// Adds one position's logprobs, with at most n_top alternatives, to a
// completions-style logprobs object. The token's text_offset is *offset,
// which then moves past the token's text, as vLLM counts it (the length of
// the token decoded alone).
static void completion_logprobs_add(struct server *srv, json_t *lp, const struct vllmc_logprob *l,
                                    int n_top, size_t *offset, bool is_first_prompt_token)
{
    json_t *tok = token_string(srv, l->token_id);
    json_array_append_new(json_object_get(lp, "tokens"), json_incref(tok));
    json_array_append_new(json_object_get(lp, "token_logprobs"),
                          is_first_prompt_token ? json_null() : float_or_null(l->logprob));
    json_t *top = json_null();
    if (!is_first_prompt_token) {
        top = json_object();
        json_object_set_new(top, json_string_value(tok), float_or_null(l->logprob));
        for (int k = 0; k < l->n_top && k < n_top; k++) {
            json_t *alt = token_string(srv, l->top[k].token_id);
            json_object_set_new(top, json_string_value(alt), float_or_null(l->top[k].logprob));
            json_decref(alt);
        }
    }
    json_array_append_new(json_object_get(lp, "top_logprobs"), top);
    json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)*offset));
    *offset += utf8_chars(json_string_value(tok), json_string_length(tok));
    json_decref(tok);
}

// One prompt position in vLLM's prompt_logprobs format: {"<token id>":
// {"logprob", "rank", "decoded_token"}} for the top alternatives and the
// prompt token itself; null for the first token, which has no logprob.
static json_t *prompt_logprob_entry(struct server *srv, const struct vllmc_logprob *l, bool first)
{
    if (first)
        return json_null();
    json_t *e = json_object();
    char key[16];
    bool seen = false;
    for (int k = 0; k < l->n_top; k++) {
        snprintf(key, sizeof key, "%d", (int)l->top[k].token_id);
        json_object_set_new(e, key,
                            json_pack("{s:o, s:i, s:o}", "logprob",
                                      float_or_null(l->top[k].logprob), "rank", k + 1,
                                      "decoded_token", token_string(srv, l->top[k].token_id)));
        seen = seen || l->top[k].token_id == l->token_id;
    }
    if (!seen) {
        snprintf(key, sizeof key, "%d", (int)l->token_id);
        json_object_set_new(e, key,
                            json_pack("{s:o, s:i, s:o}", "logprob", float_or_null(l->logprob),
                                      "rank", (int)l->rank, "decoded_token",
                                      token_string(srv, l->token_id)));
    }
    return e;
}

static json_t *chat_logprob_entry(struct server *srv, const struct vllmc_logprob *l)
{
    json_t *tok = token_string(srv, l->token_id);
    json_t *top = json_array();
    for (int k = 0; k < l->n_top; k++) {
        json_t *alt = token_string(srv, l->top[k].token_id);
        json_array_append_new(top, json_pack("{s:O, s:o, s:o}", "token", alt, "logprob",
                                             float_or_null(l->top[k].logprob), "bytes",
                                             utf8_bytes(alt)));
        json_decref(alt);
    }
    json_t *e = json_pack("{s:O, s:o, s:o, s:o}", "token", tok, "logprob",
                          float_or_null(l->logprob), "bytes", utf8_bytes(tok), "top_logprobs", top);
    json_decref(tok);
    return e;
}

static json_t *new_logprobs(enum oai_kind kind)
{
    if (kind == OAI_CHAT)
        return json_pack("{s:[]}", "content");
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs",
                     "text_offset");
}

// Logprobs of the tokens of one output, in the endpoint's format; the first
// token's text_offset is text_offset.
static json_t *output_logprobs(struct gen *g, const struct vllmc_output *o, size_t text_offset)
{
    if (g->r.logprobs < 0 || !o->logprobs)
        return NULL;
    json_t *lp = new_logprobs(g->r.kind);
    for (int i = 0; i < o->n_token_ids; i++) {
        if (g->r.kind == OAI_CHAT)
            json_array_append_new(json_object_get(lp, "content"),
                                  chat_logprob_entry(g->srv, &o->logprobs[i]));
        else
            completion_logprobs_add(g->srv, lp, &o->logprobs[i], g->r.logprobs, &text_offset,
                                    false);
    }
    return lp;
}

// The prompt's logprobs, which come once per request: kept in vLLM's
// prompt_logprobs format and, for echo with logprobs, as the completions
// logprobs of the echoed prompt tokens (their text_offset from 0).
static void keep_prompt_logprobs(struct gen *g, int p, const struct vllmc_output *o)
{
    if (!o->prompt_logprobs || g->prompt_lp[p])
        return;
    g->prompt_lp[p] = json_array();
    for (int i = 0; i < o->n_prompt_logprobs; i++)
        json_array_append_new(g->prompt_lp[p],
                              prompt_logprob_entry(g->srv, &o->prompt_logprobs[i], i == 0));
    if (!g->echo_text[p] || g->r.logprobs < 0)
        return;
    g->echo_lp[p] = new_logprobs(OAI_COMPLETION);
    size_t offset = 0;
    for (int i = 0; i < o->n_prompt_logprobs; i++)
        completion_logprobs_add(g->srv, g->echo_lp[p], &o->prompt_logprobs[i], g->r.logprobs,
                                &offset, i == 0);
}

static void merge_logprobs(json_t *into, json_t *from)
{
    const char *key;
    json_t *arr;
    json_object_foreach(from, key, arr) json_array_extend(json_object_get(into, key), arr);
}

static json_t *chunk_base(struct gen *g)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:[]}", "id", g->id, "object",
                     g->r.kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion",
                     "created", (json_int_t)g->created, "model", g->srv->model_name, "choices");
}

static void emit(struct gen *g, json_t *chunk)
{
    char *s = json_dumps(chunk, JSON_COMPACT);
    if (s)
        sse_append_event(&g->sse, s);
    free(s);
    json_decref(chunk);
}

static void emit_choice(struct gen *g, int index, const char *text, size_t len, json_t *logprobs,
                        struct gen_choice *c, bool first)
{
    json_t *chunk = chunk_base(g);
    json_t *choice;
    if (g->r.kind == OAI_CHAT) {
        json_t *delta = json_object();
        if (first)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (len || first)
            json_object_set_new(delta, "content", json_stringn(text, len));
        choice = json_pack("{s:i, s:o}", "index", index, "delta", delta);
    } else {
        choice = json_pack("{s:i, s:s%}", "index", index, "text", text, len);
    }
    json_object_set_new(choice, "logprobs", logprobs ? logprobs : json_null());
    if (c && c->finish != VLLMC_FINISH_NONE) {
        json_object_set_new(choice, "finish_reason", json_string(finish_str(c->finish)));
        json_object_set(choice, "stop_reason", c->stop_reason ? c->stop_reason : json_null());
    } else {
        json_object_set_new(choice, "finish_reason", json_null());
    }
    json_array_append_new(json_object_get(chunk, "choices"), choice);
    emit(g, chunk);
}

static json_t *usage_json(const struct gen *g)
{
    json_t *u = json_pack("{s:i, s:i, s:i}", "prompt_tokens", g->prompt_tokens,
                          "completion_tokens", g->completion_tokens, "total_tokens",
                          g->prompt_tokens + g->completion_tokens);
    json_object_set_new(u, "prompt_tokens_details",
                        g->cached_tokens ? json_pack("{s:i}", "cached_tokens", g->cached_tokens)
                                         : json_null());
    return u;
}

static void record_metrics(struct gen *g)
{
    if (g->metrics_recorded)
        return;
    g->metrics_recorded = true;
    double now = time_now_s();
    for (int p = 0; p < g->n_prompts; p++) {
        enum vllmc_finish_reason worst = VLLMC_FINISH_STOP;
        for (int s = 0; s < g->r.n; s++) {
            enum vllmc_finish_reason f = g->choices[p * g->r.n + s].finish;
            if (f == VLLMC_FINISH_ABORT || f == VLLMC_FINISH_NONE)
                worst = VLLMC_FINISH_ABORT;
            else if (f == VLLMC_FINISH_LENGTH && worst != VLLMC_FINISH_ABORT)
                worst = VLLMC_FINISH_LENGTH;
        }
        enum metrics_finish mf = worst == VLLMC_FINISH_ABORT    ? METRICS_FINISH_ABORT
                                 : worst == VLLMC_FINISH_LENGTH ? METRICS_FINISH_LENGTH
                                                                : METRICS_FINISH_STOP;
        int gen_tokens = 0;
        for (int s = 0; s < g->r.n; s++)
            gen_tokens += g->choices[p * g->r.n + s].n_tokens;
        double ttft = g->t_first[p] > 0 ? g->t_first[p] - g->t_arrival : -1;
        metrics_observe_request(g->srv->metrics, mf, g->prompt_lens[p], gen_tokens,
                                g->queue_s[p], ttft, now - g->t_arrival);
    }
}

// Folds one engine output into the response state (and the stream).
static void apply_output(struct gen *g, int p, const struct vllmc_output *o, bool stream)
{
    int index = p * g->r.n + o->index;
    if (o->index < 0 || o->index >= g->r.n)
        return;
    struct gen_choice *c = &g->choices[index];
    double now = time_now_s();
    if (o->n_token_ids > 0) {
        if (g->t_first[p] == 0)
            g->t_first[p] = now;
        else if (g->t_last[p] > 0)
            metrics_observe_inter_token(g->srv->metrics, (now - g->t_last[p]) / o->n_token_ids);
        g->t_last[p] = now;
    }
    c->n_tokens += o->n_token_ids;
    if (o->finish_reason != VLLMC_FINISH_NONE) {
        c->finish = o->finish_reason;
        json_decref(c->stop_reason);
        c->stop_reason = o->stop_str         ? json_string(o->stop_str)
                         : o->stop_token_id >= 0 ? json_integer(o->stop_token_id)
                                                 : json_null();
    }
    keep_prompt_logprobs(g, p, o);
    json_t *lp = output_logprobs(g, o, c->n_chars);
    c->n_chars += utf8_chars(o->text, o->text_len);
    bool first = !c->started;
    if (stream) {
        if (first && g->r.kind == OAI_COMPLETION && g->echo_text[p])
            emit_choice(g, index, g->echo_text[p], strlen(g->echo_text[p]),
                        g->echo_lp[p] ? json_deep_copy(g->echo_lp[p]) : NULL, NULL, false);
        // Chat streams open with a role-only delta, as OpenAI's do.
        if (first && g->r.kind == OAI_CHAT)
            emit_choice(g, index, "", 0, NULL, NULL, true);
        if (o->text_len || lp || c->finish != VLLMC_FINISH_NONE)
            emit_choice(g, index, o->text, o->text_len, lp, c, false);
        else
            json_decref(lp);
    } else {
        text_append(c, o->text, o->text_len);
        if (lp) {
            if (!c->logprobs)
                c->logprobs = new_logprobs(g->r.kind);
            merge_logprobs(c->logprobs, lp);
            json_decref(lp);
        }
    }
    c->started = true;
    if (o->usage.queue_time_s >= 0)
        g->queue_s[p] = o->usage.queue_time_s;
    if (o->final) {
        g->req_final[p] = true;
        g->prompt_tokens += o->usage.prompt_tokens;
        g->completion_tokens += o->usage.completion_tokens;
        g->cached_tokens += o->usage.cached_tokens;
    }
}

static bool all_final(const struct gen *g)
{
    for (int p = 0; p < g->n_prompts; p++)
        if (!g->req_final[p])
            return false;
    return true;
}

// Waits up to timeout_ms for outputs and applies what arrived. A request the
// engine can no longer serve (closed, or its channel failed) counts as final.
static void pump(struct gen *g, int timeout_ms, bool stream)
{
    if (atomic_load(&g->srv->abort_all))
        for (int p = 0; p < g->n_prompts; p++)
            vllmc_request_abort(g->reqs[p]);
    for (int p = 0; p < g->n_prompts; p++) {
        if (g->req_final[p])
            continue;
        struct vllmc_output *o = NULL;
        enum vllmc_status st = vllmc_request_next_output(g->reqs[p], timeout_ms, &o);
        if (st != VLLMC_OK) {
            g->req_final[p] = true;
            continue;
        }
        while (o) {
            apply_output(g, p, o, stream);
            vllmc_output_free(o);
            o = NULL;
            if (g->req_final[p] || vllmc_request_next_output(g->reqs[p], 0, &o) != VLLMC_OK)
                break;
        }
        timeout_ms = 0; // wait on the first pending request only
    }
}

static void gen_free(struct gen *g)
{
    if (!g)
        return;
    for (int p = 0; p < g->n_prompts; p++) {
        vllmc_request_free(g->reqs ? g->reqs[p] : NULL);
        mem_free(g->echo_text ? g->echo_text[p] : NULL);
        json_decref(g->prompt_lp ? g->prompt_lp[p] : NULL);
        json_decref(g->echo_lp ? g->echo_lp[p] : NULL);
    }
    for (int i = 0; i < g->n_choices; i++) {
        mem_free(g->choices[i].text);
        json_decref(g->choices[i].logprobs);
        json_decref(g->choices[i].stop_reason);
    }
    oai_request_deinit(&g->r);
    mem_free(g->reqs);
    mem_free(g->req_final);
    mem_free(g->echo_text);
    mem_free(g->prompt_lp);
    mem_free(g->echo_lp);
    mem_free(g->choices);
    mem_free(g->t_first);
    mem_free(g->t_last);
    mem_free(g->prompt_lens);
    mem_free(g->queue_s);
    sse_buffer_deinit(&g->sse);
    mem_free(g);
}

static json_t *full_response(struct gen *g)
{
    json_t *body = json_pack("{s:s, s:s, s:I, s:s, s:[]}", "id", g->id, "object",
                             g->r.kind == OAI_CHAT ? "chat.completion" : "text_completion",
                             "created", (json_int_t)g->created, "model", g->srv->model_name,
                             "choices");
    json_t *choices = json_object_get(body, "choices");
    for (int i = 0; i < g->n_choices; i++) {
        struct gen_choice *c = &g->choices[i];
        int p = i / g->r.n;
        json_t *choice;
        json_t *lp = c->logprobs ? json_incref(c->logprobs)
                                 : (g->r.logprobs >= 0 ? new_logprobs(g->r.kind) : json_null());
        if (g->echo_lp[p] && json_is_object(lp)) { // echo: the prompt's tokens first
            json_t *all = json_deep_copy(g->echo_lp[p]);
            merge_logprobs(all, lp);
            json_decref(lp);
            lp = all;
        }
        if (g->r.kind == OAI_CHAT) {
            json_t *msg = json_pack("{s:s, s:s%, s:[]}", "role", "assistant", "content",
                                    c->text ? c->text : "", c->text_len, "tool_calls");
            choice = json_pack("{s:i, s:o, s:o}", "index", i, "message", msg, "logprobs", lp);
        } else {
            // echo: the prompt text goes in front of the generated text. On
            // allocation failure the value is NULL and the choice is dropped
            // by json_pack, never dereferenced.
            const char *gen = c->text ? c->text : "";
            json_t *text = g->echo_text[p]
                               ? json_sprintf("%s%.*s", g->echo_text[p], (int)c->text_len, gen)
                               : json_stringn(gen, c->text_len);
            choice = json_pack("{s:i, s:o, s:o, s:O}", "index", i, "text", text, "logprobs", lp,
                               "prompt_logprobs", g->prompt_lp[p] ? g->prompt_lp[p] : json_null());
        }
        json_object_set_new(choice, "finish_reason", json_string(finish_str(c->finish)));
        json_object_set(choice, "stop_reason", c->stop_reason ? c->stop_reason : json_null());
        json_array_append_new(choices, choice);
    }
    json_object_set_new(body, "usage", usage_json(g));
    if (g->r.kind == OAI_CHAT) // vLLM's chat response carries them beside the choices
        json_object_set(body, "prompt_logprobs", g->prompt_lp[0] ? g->prompt_lp[0] : json_null());
    return body;
}

// ---- streaming ----

static ssize_t stream_produce(void *ctx, char *buf, size_t max)
{
    struct gen *g = ctx;
    for (int spins = 0; spins < 50; spins++) {
        if (sse_pending(&g->sse))
            return (ssize_t)sse_drain(&g->sse, buf, max);
        if (g->done_sent)
            return -1;
        if (all_final(g)) {
            if (g->r.include_usage) {
                json_t *chunk = chunk_base(g);
                json_object_set_new(chunk, "usage", usage_json(g));
                emit(g, chunk);
            }
            sse_append_done(&g->sse);
            g->done_sent = true;
            record_metrics(g);
            continue;
        }
        pump(g, POLL_MS, true);
    }
    return 0;
}

static void stream_done(void *ctx, bool client_gone)
{
    struct gen *g = ctx;
    if (client_gone) {
        log_info("%s: client disconnected, aborting", g->id);
        for (int p = 0; p < g->n_prompts; p++)
            vllmc_request_abort(g->reqs[p]);
        for (int i = 0; i < g->n_choices; i++)
            if (g->choices[i].finish == VLLMC_FINISH_NONE)
                g->choices[i].finish = VLLMC_FINISH_ABORT;
        record_metrics(g);
    }
    gen_free(g);
}

// ---- request construction ----

static float pick_f(bool set, double v, json_t *defaults, const char *key)
{
    json_t *d = defaults ? json_object_get(defaults, key) : NULL;
    if (!set && d && json_is_number(d))
        return (float)json_number_value(d);
    return (float)v;
}

static void fill_sampling(struct server *srv, const struct oai_request *r, int prompt_len,
                          struct vllmc_sampling_params *s)
{
    vllmc_sampling_params_default(s);
    json_t *d = srv->generation_defaults;
    s->n = r->n;
    s->temperature = pick_f(r->temperature_set, r->temperature, d, "temperature");
    s->top_p = pick_f(r->top_p_set, r->top_p, d, "top_p");
    s->top_k = (int)pick_f(r->top_k_set, r->top_k, d, "top_k");
    s->min_p = pick_f(r->min_p_set, r->min_p, d, "min_p");
    s->repetition_penalty =
        pick_f(r->repetition_penalty_set, r->repetition_penalty, d, "repetition_penalty");
    s->presence_penalty = (float)r->presence_penalty;
    s->frequency_penalty = (float)r->frequency_penalty;
    s->has_seed = r->has_seed;
    s->seed = r->seed;
    int64_t room = vllmc_engine_max_model_len(srv->engine) - prompt_len;
    s->max_tokens = (int)(r->max_tokens < 0 ? room : r->max_tokens);
    s->min_tokens = (int)r->min_tokens;
    s->ignore_eos = r->ignore_eos;
    s->stop_token_ids = r->stop_token_ids;
    s->n_stop_token_ids = (int)r->n_stop_token_ids;
    s->stop = (const char *const *)r->stop;
    s->n_stop = (int)r->n_stop;
    s->logit_bias = (const struct vllmc_logit_bias *)r->logit_bias;
    s->n_logit_bias = (int)r->n_logit_bias;
    s->logprobs = r->logprobs;
    // Echo with logprobs shows the prompt's tokens too, so it asks for the
    // prompt's logprobs, as vLLM does.
    s->prompt_logprobs = r->prompt_logprobs >= 0 ? r->prompt_logprobs
                         : r->kind == OAI_COMPLETION && r->echo && r->logprobs >= 0 ? r->logprobs
                                                                                    : -1;
    s->skip_special_tokens = r->skip_special_tokens;
}

void generation_handle(struct server *srv, struct http_exchange *x, struct oai_request *r,
                       int32_t **prompt_ids, const int *prompt_lens, int n_prompts)
{
    struct oai_error err = {0};
    struct gen *g = mem_calloc(1, sizeof *g);
    if (!g) {
        oai_request_deinit(r);
        oai_fail(&err, 500, "InternalServerError", NULL, "out of memory");
        server_reply_error(srv, x, &err);
        return;
    }
    g->srv = srv;
    g->r = *r;
    *r = (struct oai_request){.kind = g->r.kind};
    g->n_prompts = n_prompts;
    g->n_choices = n_prompts * g->r.n;
    g->created = (int64_t)time(NULL);
    g->t_arrival = time_now_s();
    server_make_id(srv, g->r.kind == OAI_CHAT ? "chatcmpl-" : "cmpl-", g->id, sizeof g->id);
    g->reqs = mem_calloc((size_t)n_prompts, sizeof *g->reqs);
    g->req_final = mem_calloc((size_t)n_prompts, sizeof *g->req_final);
    g->echo_text = mem_calloc((size_t)n_prompts, sizeof *g->echo_text);
    g->prompt_lp = mem_calloc((size_t)n_prompts, sizeof *g->prompt_lp);
    g->echo_lp = mem_calloc((size_t)n_prompts, sizeof *g->echo_lp);
    g->choices = mem_calloc((size_t)g->n_choices, sizeof *g->choices);
    g->t_first = mem_calloc((size_t)n_prompts, sizeof *g->t_first);
    g->t_last = mem_calloc((size_t)n_prompts, sizeof *g->t_last);
    g->prompt_lens = mem_calloc((size_t)n_prompts, sizeof *g->prompt_lens);
    g->queue_s = mem_calloc((size_t)n_prompts, sizeof *g->queue_s);
    if (!g->reqs || !g->req_final || !g->echo_text || !g->prompt_lp || !g->echo_lp || !g->choices ||
        !g->t_first || !g->t_last || !g->prompt_lens || !g->queue_s) {
        oai_fail(&err, 500, "InternalServerError", NULL, "out of memory");
        goto fail;
    }
    for (int p = 0; p < n_prompts; p++) {
        g->prompt_lens[p] = prompt_lens[p];
        g->queue_s[p] = -1;
        if (g->r.kind == OAI_COMPLETION && g->r.echo) {
            if (g->r.prompts[p].text) {
                g->echo_text[p] = mem_strdup(g->r.prompts[p].text);
            } else {
                char *t = NULL;
                vllmc_detokenize(srv->engine, prompt_ids[p], prompt_lens[p], false, &t);
                g->echo_text[p] = mem_strdup(t ? t : "");
                vllmc_text_free(t);
            }
            // The generated text's offsets start after the echoed prompt.
            size_t n = g->echo_text[p] ? utf8_chars(g->echo_text[p], strlen(g->echo_text[p])) : 0;
            for (int s = 0; s < g->r.n; s++)
                g->choices[p * g->r.n + s].n_chars = n;
        }
        struct vllmc_request_params rp;
        vllmc_request_params_default(&rp);
        rp.prompt_token_ids = prompt_ids[p];
        rp.n_prompt_token_ids = prompt_lens[p];
        rp.priority = g->r.priority;
        fill_sampling(srv, &g->r, prompt_lens[p], &rp.sampling);
        enum vllmc_status st = vllmc_engine_add_request(srv->engine, &rp, &g->reqs[p]);
        if (st != VLLMC_OK) {
            int status = st == VLLMC_ERR_CLOSED ? 503 : st == VLLMC_ERR_NOMEM ? 500 : 400;
            oai_fail(&err, status, status == 400 ? "BadRequestError" : "ServiceUnavailableError",
                     NULL, "%s", vllmc_last_error()[0] ? vllmc_last_error() : vllmc_status_str(st));
            goto fail;
        }
    }
    if (g->r.stream) {
        http_reply_stream(x, 200, "text/event-stream", stream_produce, stream_done, g);
        return;
    }
    while (!all_final(g))
        pump(g, 1000, false);
    record_metrics(g);
    server_reply_json(srv, x, 200, full_response(g));
    gen_free(g);
    return;
fail:
    for (int p = 0; p < n_prompts; p++)
        if (g->reqs && g->reqs[p])
            vllmc_request_abort(g->reqs[p]);
    gen_free(g);
    server_reply_error(srv, x, &err);
}
