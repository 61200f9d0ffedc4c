// Server lifecycle and routing: auth, method checks, the small endpoints
// (/health, /version, /v1/models, /tokenize, /detokenize, /metrics), and the
// prompt preparation in front of the generation endpoints.
#include "server/server.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "server/generation.h"
#include "server/server_internal.h"

void server_options_default(struct server_options *o)
{
    *o = (struct server_options){
        .port = 8000,
        .max_body_bytes = 4u << 20,
        .max_waiting_requests = 1024,
        .grace_period_s = 10,
    };
}

void server_reply_json(struct server *srv, struct http_exchange *x, int status, json_t *body)
{
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    metrics_count_http(srv->metrics, s ? status : 500);
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"InternalServerError\",\"param\":null,\"code\":500}}";
        http_reply(x, 500, "application/json", oom, sizeof oom - 1);
        return;
    }
    http_reply(x, status, "application/json", s, strlen(s));
    free(s);
}

void server_reply_error(struct server *srv, struct http_exchange *x, const struct oai_error *e)
{
    char *s = oai_error_json(e);
    metrics_count_http(srv->metrics, e->http_status);
    if (e->http_status >= 500)
        log_warn("%d %s", e->http_status, e->message);
    http_reply(x, e->http_status, "application/json", s ? s : "{}", s ? strlen(s) : 2);
    free(s);
}

// SplitMix64's output function: a bijective mix, so distinct inputs stay distinct.
static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void server_make_id(struct server *srv, const char *prefix, char *out, size_t cap)
{
    // Unique per process (counter) and unlikely to repeat across restarts (time).
    uint64_t n = (uint64_t)atomic_fetch_add(&srv->next_id, 1);
    uint64_t a = splitmix64((uint64_t)time_now_us() ^ ((uint64_t)getpid() << 40));
    uint64_t b = splitmix64(a ^ n);
    snprintf(out, cap, "%s%016llx%016llx", prefix, (unsigned long long)a, (unsigned long long)b);
}

static bool model_known(struct server *srv, const char *name)
{
    if (!name)
        return true;
    if (srv->opt.n_served_model_names == 0)
        return !strcmp(name, srv->model_name);
    for (int i = 0; i < srv->opt.n_served_model_names; i++)
        if (!strcmp(name, srv->opt.served_model_names[i]))
            return true;
    return false;
}

// ---- small endpoints ----

static void handle_models(struct server *srv, struct http_exchange *x)
{
    json_t *data = json_array();
    int n = srv->opt.n_served_model_names ? srv->opt.n_served_model_names : 1;
    for (int i = 0; i < n; i++) {
        const char *name = srv->opt.n_served_model_names ? srv->opt.served_model_names[i]
                                                         : srv->model_name;
        json_array_append_new(
            data, json_pack("{s:s, s:s, s:I, s:s, s:s, s:n, s:i}", "id", name, "object", "model",
                            "created", (json_int_t)time(NULL), "owned_by", "vllmc", "root",
                            vllmc_engine_model_name(srv->engine), "parent", "max_model_len",
                            vllmc_engine_max_model_len(srv->engine)));
    }
    server_reply_json(srv, x, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

static void handle_metrics(struct server *srv, struct http_exchange *x)
{
    struct vllmc_engine_stats es;
    vllmc_engine_stats(srv->engine, &es);
    struct metrics_engine_snapshot s = {
        .n_running = es.n_running,
        .n_waiting = es.n_waiting,
        .kv_cache_usage = es.kv_cache_usage,
        .n_preemptions = es.n_preemptions,
        .prefix_cache_queries = es.prefix_cache_queries,
        .prefix_cache_hits = es.prefix_cache_hits,
    };
    char *text = metrics_render(srv->metrics, &s);
    metrics_count_http(srv->metrics, 200);
    http_reply(x, 200, "text/plain; version=0.0.4; charset=utf-8", text ? text : "",
               text ? strlen(text) : 0);
    mem_free(text);
}

static bool tokenize_text(struct server *srv, const char *text, bool add_special, int32_t **ids,
                          int *n, struct oai_error *err)
{
    enum vllmc_status st = vllmc_tokenize(srv->engine, text, strlen(text), add_special, ids, n);
    if (st != VLLMC_OK)
        return oai_fail(err, 400, "BadRequestError", "prompt", "tokenization failed: %s",
                        vllmc_last_error()[0] ? vllmc_last_error() : vllmc_status_str(st));
    return true;
}

static void handle_tokenize(struct server *srv, struct http_exchange *x, const char *body,
                            size_t len)
{
    struct oai_error err = {0};
    json_error_t jerr;
    json_t *o = json_loadb(body, len, 0, &jerr);
    int32_t *ids = NULL;
    int n = 0;
    char *text = NULL;
    if (!json_is_object(o)) {
        oai_fail(&err, 400, "BadRequestError", NULL, "body must be a JSON object");
        goto fail;
    }
    bool add_special = true;
    json_t *as = json_object_get(o, "add_special_tokens");
    if (as && !json_is_boolean(as)) {
        oai_fail(&err, 400, "BadRequestError", "add_special_tokens", "must be a boolean");
        goto fail;
    }
    if (json_is_array(json_object_get(o, "messages"))) {
        struct oai_request r;
        if (!oai_request_parse(body, len, OAI_CHAT, &r, &err))
            goto fail;
        bool ok = chat_render(srv, &r, &text, &err);
        oai_request_deinit(&r);
        if (!ok)
            goto fail;
        add_special = as ? json_is_true(as) : false; // the template adds BOS itself
    } else {
        json_t *p = json_object_get(o, "prompt");
        if (!json_is_string(p)) {
            oai_fail(&err, 400, "BadRequestError", "prompt", "'prompt' must be a string");
            goto fail;
        }
        text = mem_strdup(json_string_value(p));
        add_special = as ? json_is_true(as) : true;
    }
    if (!tokenize_text(srv, text, add_special, &ids, &n, &err))
        goto fail;
    json_t *tokens = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(tokens, json_integer(ids[i]));
    server_reply_json(srv, x, 200,
                      json_pack("{s:i, s:i, s:o}", "count", n, "max_model_len",
                                vllmc_engine_max_model_len(srv->engine), "tokens", tokens));
    vllmc_tokens_free(ids);
    mem_free(text);
    json_decref(o);
    return;
fail:
    mem_free(text);
    json_decref(o);
    server_reply_error(srv, x, &err);
}

static void handle_detokenize(struct server *srv, struct http_exchange *x, const char *body,
                              size_t len)
{
    struct oai_error err = {0};
    json_t *o = json_loadb(body, len, 0, NULL);
    json_t *tokens = json_object_get(o, "tokens");
    int32_t *ids = NULL;
    size_t n = json_array_size(tokens);
    if (!json_is_array(tokens)) {
        oai_fail(&err, 400, "BadRequestError", "tokens", "'tokens' must be a list of token ids");
        goto fail;
    }
    ids = mem_calloc(n ? n : 1, sizeof *ids);
    int vocab = vllmc_engine_vocab_size(srv->engine);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(tokens, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= vocab) {
            oai_fail(&err, 400, "BadRequestError", "tokens",
                     "token ids must be integers in [0, %d)", vocab);
            goto fail;
        }
        ids[i] = (int32_t)json_integer_value(e);
    }
    char *text = NULL;
    if (vllmc_detokenize(srv->engine, ids, (int)n, false, &text) != VLLMC_OK) {
        oai_fail(&err, 400, "BadRequestError", "tokens", "detokenization failed");
        goto fail;
    }
    server_reply_json(srv, x, 200, json_pack("{s:s}", "prompt", text));
    vllmc_text_free(text);
    mem_free(ids);
    json_decref(o);
    return;
fail:
    mem_free(ids);
    json_decref(o);
    server_reply_error(srv, x, &err);
}

// ---- generation endpoints: validate, render, tokenize, check lengths ----

static bool check_lengths(struct server *srv, const struct oai_request *r, int prompt_len,
                          struct oai_error *err)
{
    int max_len = vllmc_engine_max_model_len(srv->engine);
    const char *what = r->kind == OAI_CHAT ? "messages" : "prompt";
    if (prompt_len >= max_len)
        return oai_fail(err, 400, "BadRequestError", what,
                        "This model's maximum context length is %d tokens. However, your request "
                        "has %d input tokens. Please reduce the length of the input %s.",
                        max_len, prompt_len, what);
    if (r->max_tokens >= 0 && prompt_len + r->max_tokens > max_len)
        return oai_fail(err, 400, "BadRequestError", "max_tokens",
                        "This model's maximum context length is %d tokens. However, you requested "
                        "%lld tokens (%d in the %s, %lld in the completion). Please reduce the "
                        "length of the %s or completion.",
                        max_len, (long long)(prompt_len + r->max_tokens), prompt_len, what,
                        (long long)r->max_tokens, what);
    return true;
}

static void handle_generation(struct server *srv, struct http_exchange *x, enum oai_kind kind,
                              const char *body, size_t len)
{
    struct oai_error err = {0};
    struct oai_request r;
    int32_t **ids = NULL;
    int *lens = NULL;
    int n_prompts = 0;
    if (!oai_request_parse(body, len, kind, &r, &err)) {
        server_reply_error(srv, x, &err);
        return;
    }
    if (!model_known(srv, r.model)) {
        oai_fail(&err, 404, "NotFoundError", "model", "The model `%s` does not exist.", r.model);
        goto fail;
    }
    if (atomic_load(&srv->shutting_down)) {
        oai_fail(&err, 503, "ServiceUnavailableError", NULL, "the server is shutting down");
        goto fail;
    }
    struct vllmc_engine_stats es;
    vllmc_engine_stats(srv->engine, &es);
    if (es.n_waiting >= srv->opt.max_waiting_requests) {
        http_add_header(x, "Retry-After", "1");
        oai_fail(&err, 503, "ServiceUnavailableError", NULL,
                 "the server is overloaded: %d requests are waiting", es.n_waiting);
        goto fail;
    }
    n_prompts = kind == OAI_CHAT ? 1 : (int)r.n_prompts;
    ids = mem_calloc((size_t)n_prompts, sizeof *ids);
    lens = mem_calloc((size_t)n_prompts, sizeof *lens);
    if (!ids || !lens) {
        oai_fail(&err, 500, "InternalServerError", NULL, "out of memory");
        goto fail;
    }
    int vocab = vllmc_engine_vocab_size(srv->engine);
    for (int p = 0; p < n_prompts; p++) {
        if (kind == OAI_CHAT) {
            char *text = NULL;
            if (!chat_render(srv, &r, &text, &err))
                goto fail;
            bool ok = tokenize_text(srv, text, false, &ids[p], &lens[p], &err);
            mem_free(text);
            if (!ok)
                goto fail;
        } else if (r.prompts[p].text) {
            if (!tokenize_text(srv, r.prompts[p].text, true, &ids[p], &lens[p], &err))
                goto fail;
        } else {
            for (size_t i = 0; i < r.prompts[p].n_ids; i++)
                if (r.prompts[p].ids[i] >= vocab) {
                    oai_fail(&err, 400, "BadRequestError", "prompt",
                             "token id %d is out of vocabulary (size %d)", r.prompts[p].ids[i],
                             vocab);
                    goto fail;
                }
            ids[p] = r.prompts[p].ids;
            lens[p] = (int)r.prompts[p].n_ids;
            r.prompts[p].ids = NULL; // ownership moves to ids[p]
        }
        if (!check_lengths(srv, &r, lens[p], &err))
            goto fail;
    }
    generation_handle(srv, x, &r, ids, lens, n_prompts);
    for (int p = 0; p < n_prompts; p++)
        mem_free(ids[p]);
    mem_free(ids);
    mem_free(lens);
    return;
fail:
    for (int p = 0; ids && p < n_prompts; p++)
        mem_free(ids[p]);
    mem_free(ids);
    mem_free(lens);
    oai_request_deinit(&r);
    server_reply_error(srv, x, &err);
}

// ---- routing ----

struct route {
    const char *path;
    const char *method;
    bool needs_key;
    int id;
};

enum { R_HEALTH, R_VERSION, R_MODELS, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE,
       R_METRICS };

static const struct route routes[] = {
    {"/health", "GET", false, R_HEALTH},
    {"/version", "GET", false, R_VERSION},
    {"/v1/models", "GET", true, R_MODELS},
    {"/v1/completions", "POST", true, R_COMPLETIONS},
    {"/v1/chat/completions", "POST", true, R_CHAT},
    {"/tokenize", "POST", false, R_TOKENIZE},
    {"/detokenize", "POST", false, R_DETOKENIZE},
    {"/metrics", "GET", false, R_METRICS},
};

static bool authorized(struct server *srv, struct http_exchange *x)
{
    if (!srv->opt.api_key)
        return true;
    const char *h = http_header(x, "Authorization");
    return h && !strncmp(h, "Bearer ", 7) && !strcmp(h + 7, srv->opt.api_key);
}

static void on_request(void *user, struct http_exchange *x, const char *method, const char *path,
                       const char *body, size_t body_len)
{
    struct server *srv = user;
    struct oai_error err = {0};
    const struct route *route = NULL;
    bool path_known = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(path, routes[i].path))
            continue;
        path_known = true;
        if (!strcmp(method, routes[i].method) ||
            (!strcmp(method, "HEAD") && !strcmp(routes[i].method, "GET")))
            route = &routes[i];
    }
    if (!route) {
        if (path_known) {
            for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
                if (!strcmp(path, routes[i].path))
                    http_add_header(x, "Allow", routes[i].method);
            oai_fail(&err, 405, "MethodNotAllowed", NULL, "method %s is not allowed on %s",
                     method, path);
        } else {
            oai_fail(&err, 404, "NotFoundError", NULL, "no route for %s %s", method, path);
        }
        server_reply_error(srv, x, &err);
        return;
    }
    if (route->needs_key && !authorized(srv, x)) {
        http_add_header(x, "WWW-Authenticate", "Bearer");
        oai_fail(&err, 401, "AuthenticationError", NULL,
                 "invalid or missing API key (send 'Authorization: Bearer <key>')");
        server_reply_error(srv, x, &err);
        return;
    }
    switch (route->id) {
    case R_HEALTH:
        metrics_count_http(srv->metrics, 200);
        http_reply(x, 200, "text/plain", "", 0);
        break;
    case R_VERSION:
        server_reply_json(srv, x, 200, json_pack("{s:s}", "version", vllmc_version()));
        break;
    case R_MODELS:
        handle_models(srv, x);
        break;
    case R_COMPLETIONS:
        handle_generation(srv, x, OAI_COMPLETION, body, body_len);
        break;
    case R_CHAT:
        handle_generation(srv, x, OAI_CHAT, body, body_len);
        break;
    case R_TOKENIZE:
        handle_tokenize(srv, x, body, body_len);
        break;
    case R_DETOKENIZE:
        handle_detokenize(srv, x, body, body_len);
        break;
    case R_METRICS:
        handle_metrics(srv, x);
        break;
    }
}

// ---- lifecycle ----

static enum vllmc_status load_generation_defaults(struct server *srv, char *err_msg,
                                                  size_t err_len)
{
    if (!srv->opt.generation_config)
        return VLLMC_OK;
    json_error_t jerr;
    json_t *o = json_loads(srv->opt.generation_config, 0, &jerr);
    if (!json_is_object(o)) {
        snprintf(err_msg, err_len, "generation config is not a JSON object: %s", jerr.text);
        json_decref(o);
        return VLLMC_ERR_INVALID_ARG;
    }
    srv->generation_defaults = o;
    return VLLMC_OK;
}

enum vllmc_status server_start(const struct server_options *o, struct vllmc_engine *engine,
                               struct server **out, char *err_msg, size_t err_len)
{
    *out = NULL;
    struct server *srv = mem_calloc(1, sizeof *srv);
    if (!srv)
        return VLLMC_ERR_NOMEM;
    srv->opt = *o;
    srv->engine = engine;
    srv->model_name = o->n_served_model_names ? o->served_model_names[0]
                                              : vllmc_engine_model_name(engine);
    enum vllmc_status st = VLLMC_ERR_NOMEM;
    srv->metrics = metrics_create(srv->model_name);
    if (!srv->metrics)
        goto fail;
    st = load_generation_defaults(srv, err_msg, err_len);
    if (st)
        goto fail;
    st = chat_template_init(srv, err_msg, err_len);
    if (st)
        goto fail;
    struct http_server_options ho = {
        .host = o->host,
        .port = o->port,
        .max_body_bytes = o->max_body_bytes,
        .handler = on_request,
        .user = srv,
    };
    st = http_server_start(&ho, &srv->http, err_msg, err_len);
    if (st)
        goto fail;
    *out = srv;
    return VLLMC_OK;
fail:
    server_stop(srv);
    return st;
}

uint16_t server_port(const struct server *s)
{
    return http_server_port(s->http);
}

void server_stop(struct server *s)
{
    if (!s)
        return;
    if (s->http) {
        atomic_store(&s->shutting_down, true);
        http_server_quiesce(s->http);
        double deadline = time_now_s() + s->opt.grace_period_s;
        while (http_server_active(s->http) && time_now_s() < deadline)
            usleep(20000);
        if (http_server_active(s->http))
            log_info("shutdown: aborting %u in-flight requests", http_server_active(s->http));
        atomic_store(&s->abort_all, true);
        deadline = time_now_s() + 5;
        while (http_server_active(s->http) && time_now_s() < deadline)
            usleep(20000);
        http_server_stop(s->http);
    }
    chat_template_deinit(s);
    json_decref(s->generation_defaults);
    metrics_free(s->metrics);
    mem_free(s);
}
