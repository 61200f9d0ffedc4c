// OpenAI request parsing and validation with vLLM's ranges and defaults.
#include "server/openai_request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

#define MAX_STOP_STRINGS 64
#define MAX_PROMPTS 1024

bool oai_fail(struct oai_error *err, int http_status, const char *type, const char *param,
              const char *fmt, ...)
{
    err->http_status = http_status;
    err->type = type;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}

static bool bad_request(struct oai_error *err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool bad_request(struct oai_error *err, const char *param, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return oai_fail(err, 400, "BadRequestError", param, "%s", msg);
}

char *oai_error_json(const struct oai_error *err)
{
    json_t *inner = json_pack("{s:s, s:s, s:o, s:i}", "message", err->message, "type", err->type,
                              "param", err->param[0] ? json_string(err->param) : json_null(),
                              "code", err->http_status);
    json_t *root = json_pack("{s:o}", "error", inner);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

// ---- typed field readers: absent leaves the default, wrong type is a 400 ----

static bool get_bool(json_t *o, const char *key, bool *out, struct oai_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_boolean(v))
        return bad_request(err, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return true;
}

// Numbers: JSON integers and reals are both accepted, as pydantic does.
static bool get_number(json_t *o, const char *key, double *out, bool *set, struct oai_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_number(v))
        return bad_request(err, key, "'%s' must be a number", key);
    double d = json_number_value(v);
    if (!isfinite(d))
        return bad_request(err, key, "'%s' must be finite", key);
    *out = d;
    if (set)
        *set = true;
    return true;
}

// Integers: a real with no fractional part is accepted (pydantic's lax mode).
static bool get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *set,
                    struct oai_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return true;
    int64_t x;
    if (json_is_integer(v)) {
        x = (int64_t)json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9e15) {
        x = (int64_t)json_real_value(v);
    } else {
        return bad_request(err, key, "'%s' must be an integer", key);
    }
    if (x < lo || x > hi)
        return bad_request(err, key, "'%s' must be between %lld and %lld, got %lld", key,
                           (long long)lo, (long long)hi, (long long)x);
    *out = x;
    if (set)
        *set = true;
    return true;
}

static bool get_string(json_t *o, const char *key, char **out, struct oai_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_string(v))
        return bad_request(err, key, "'%s' must be a string", key);
    *out = mem_strndup(json_string_value(v), json_string_length(v));
    if (!*out)
        return oai_fail(err, 500, "InternalServerError", key, "out of memory");
    return true;
}

static bool in_range(double x, double lo, double hi, bool lo_open, bool hi_open)
{
    if (lo_open ? !(x > lo) : !(x >= lo))
        return false;
    return hi_open ? x < hi : x <= hi;
}

// ---- composite fields ----

static bool parse_token_ids(json_t *arr, const char *param, int32_t **ids, size_t *n,
                            struct oai_error *err)
{
    size_t len = json_array_size(arr);
    *ids = mem_calloc(len ? len : 1, sizeof **ids);
    if (!*ids)
        return oai_fail(err, 500, "InternalServerError", param, "out of memory");
    for (size_t i = 0; i < len; i++) {
        json_t *e = json_array_get(arr, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX)
            return bad_request(err, param, "'%s' must hold non-negative integer token ids", param);
        (*ids)[i] = (int32_t)json_integer_value(e);
    }
    *n = len;
    return true;
}

static bool add_prompt_text(struct oai_request *r, json_t *s, struct oai_error *err)
{
    struct oai_prompt *p = &r->prompts[r->n_prompts++];
    p->text = mem_strndup(json_string_value(s), json_string_length(s));
    if (!p->text)
        return oai_fail(err, 500, "InternalServerError", "prompt", "out of memory");
    return true;
}

// prompt: "text" | ["text", ...] | [ids...] | [[ids...], ...]
static bool parse_prompts(json_t *o, struct oai_request *r, struct oai_error *err)
{
    json_t *p = json_object_get(o, "prompt");
    if (!p || json_is_null(p))
        return bad_request(err, "prompt", "'prompt' is required");
    size_t n = json_is_array(p) ? json_array_size(p) : 1;
    bool ids_only = json_is_array(p) && n > 0 && json_is_integer(json_array_get(p, 0));
    if (ids_only)
        n = 1;
    if (json_is_array(p) && json_array_size(p) == 0)
        return bad_request(err, "prompt", "'prompt' must not be empty");
    if (n > MAX_PROMPTS)
        return bad_request(err, "prompt", "at most %d prompts per request", MAX_PROMPTS);
    r->prompts = mem_calloc(n, sizeof *r->prompts);
    if (!r->prompts)
        return oai_fail(err, 500, "InternalServerError", "prompt", "out of memory");
    if (json_is_string(p))
        return add_prompt_text(r, p, err);
    if (!json_is_array(p))
        return bad_request(err, "prompt", "'prompt' must be a string, a list of strings, a list "
                                          "of token ids or a list of such lists");
    if (ids_only) {
        struct oai_prompt *q = &r->prompts[r->n_prompts++];
        return parse_token_ids(p, "prompt", &q->ids, &q->n_ids, err);
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(p, i);
        if (json_is_string(e)) {
            if (!add_prompt_text(r, e, err))
                return false;
        } else if (json_is_array(e) && json_array_size(e) > 0) {
            struct oai_prompt *q = &r->prompts[r->n_prompts++];
            if (!parse_token_ids(e, "prompt", &q->ids, &q->n_ids, err))
                return false;
        } else {
            return bad_request(err, "prompt", "'prompt' list elements must be strings or "
                                              "non-empty lists of token ids");
        }
    }
    return true;
}

static bool parse_messages(json_t *o, struct oai_request *r, struct oai_error *err)
{
    json_t *m = json_object_get(o, "messages");
    if (!m || !json_is_array(m) || json_array_size(m) == 0)
        return bad_request(err, "messages", "'messages' must be a non-empty list");
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *msg = json_array_get(m, i);
        json_t *role = json_object_get(msg, "role");
        if (!json_is_object(msg) || !json_is_string(role))
            return bad_request(err, "messages", "messages[%zu] must be an object with a 'role'",
                               i);
        json_t *content = json_object_get(msg, "content");
        if (content && !json_is_null(content) && !json_is_string(content) &&
            !json_is_array(content))
            return bad_request(err, "messages",
                               "messages[%zu].content must be a string or a list of parts", i);
    }
    r->messages = json_incref(m);
    json_t *tools = json_object_get(o, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return bad_request(err, "tools", "'tools' must be a list");
        r->tools = json_incref(tools);
    }
    json_t *kw = json_object_get(o, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw))
            return bad_request(err, "chat_template_kwargs", "'chat_template_kwargs' must be an "
                                                            "object");
        r->chat_template_kwargs = json_incref(kw);
    }
    if (!get_string(o, "chat_template", &r->chat_template, err))
        return false;
    if (!get_bool(o, "add_generation_prompt", &r->add_generation_prompt, err))
        return false;
    return get_bool(o, "continue_final_message", &r->continue_final_message, err);
}

static bool parse_stop(json_t *o, struct oai_request *r, struct oai_error *err)
{
    json_t *s = json_object_get(o, "stop");
    if (s && !json_is_null(s)) {
        size_t n = json_is_string(s) ? 1 : json_array_size(s);
        if (!json_is_string(s) && !json_is_array(s))
            return bad_request(err, "stop", "'stop' must be a string or a list of strings");
        if (n > MAX_STOP_STRINGS)
            return bad_request(err, "stop", "at most %d stop strings", MAX_STOP_STRINGS);
        r->stop = mem_calloc(n ? n : 1, sizeof *r->stop);
        if (!r->stop)
            return oai_fail(err, 500, "InternalServerError", "stop", "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_is_string(s) ? s : json_array_get(s, i);
            if (!json_is_string(e) || json_string_length(e) == 0)
                return bad_request(err, "stop", "'stop' entries must be non-empty strings");
            r->stop[r->n_stop] = mem_strndup(json_string_value(e), json_string_length(e));
            if (!r->stop[r->n_stop++])
                return oai_fail(err, 500, "InternalServerError", "stop", "out of memory");
        }
    }
    json_t *ids = json_object_get(o, "stop_token_ids");
    if (ids && !json_is_null(ids)) {
        if (!json_is_array(ids))
            return bad_request(err, "stop_token_ids", "'stop_token_ids' must be a list");
        return parse_token_ids(ids, "stop_token_ids", &r->stop_token_ids, &r->n_stop_token_ids,
                               err);
    }
    return true;
}

static bool parse_logit_bias(json_t *o, struct oai_request *r, struct oai_error *err)
{
    json_t *lb = json_object_get(o, "logit_bias");
    if (!lb || json_is_null(lb))
        return true;
    if (!json_is_object(lb))
        return bad_request(err, "logit_bias", "'logit_bias' must be an object of token id to "
                                              "bias");
    size_t n = json_object_size(lb);
    r->logit_bias = mem_calloc(n ? n : 1, sizeof *r->logit_bias);
    if (!r->logit_bias)
        return oai_fail(err, 500, "InternalServerError", "logit_bias", "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(lb, key, v)
    {
        char *end;
        long id = strtol(key, &end, 10);
        if (!*key || *end || id < 0 || id > INT32_MAX)
            return bad_request(err, "logit_bias", "logit_bias key '%s' is not a token id", key);
        if (!json_is_number(v) || !in_range(json_number_value(v), -100, 100, false, false))
            return bad_request(err, "logit_bias", "logit_bias values must be numbers in "
                                                  "[-100, 100]");
        r->logit_bias[r->n_logit_bias++] =
            (struct oai_logit_bias){(int32_t)id, (float)json_number_value(v)};
    }
    return true;
}

static bool parse_logprobs(json_t *o, struct oai_request *r, struct oai_error *err)
{
    int64_t v = -1;
    if (r->kind == OAI_COMPLETION) {
        if (!get_int(o, "logprobs", 0, OAI_MAX_LOGPROBS, &v, NULL, err))
            return false;
        r->logprobs = (int)v;
    } else {
        bool want = false;
        if (!get_bool(o, "logprobs", &want, err))
            return false;
        int64_t top = 0;
        bool top_set = false;
        if (!get_int(o, "top_logprobs", 0, OAI_MAX_LOGPROBS, &top, &top_set, err))
            return false;
        if (top_set && !want && top > 0)
            return bad_request(err, "top_logprobs", "'top_logprobs' requires 'logprobs' to be "
                                                    "true");
        r->logprobs = want ? (int)top : -1;
    }
    v = -1;
    if (!get_int(o, "prompt_logprobs", 0, OAI_MAX_LOGPROBS, &v, NULL, err))
        return false;
    r->prompt_logprobs = (int)v;
    return true;
}

static bool parse_sampling(json_t *o, struct oai_request *r, struct oai_error *err)
{
    int64_t v;
    v = r->n;
    if (!get_int(o, "n", 1, 128, &v, NULL, err))
        return false;
    r->n = (int)v;
    // max_completion_tokens is the newer chat name; either is accepted.
    if (!get_int(o, "max_tokens", 1, INT32_MAX, &r->max_tokens, NULL, err) ||
        !get_int(o, "max_completion_tokens", 1, INT32_MAX, &r->max_tokens, NULL, err))
        return false;
    if (!get_int(o, "min_tokens", 0, INT32_MAX, &r->min_tokens, NULL, err))
        return false;
    if (r->max_tokens >= 0 && r->min_tokens > r->max_tokens)
        return bad_request(err, "min_tokens", "'min_tokens' must not exceed 'max_tokens'");
    if (!get_number(o, "temperature", &r->temperature, &r->temperature_set, err))
        return false;
    if (r->temperature < 0)
        return bad_request(err, "temperature", "'temperature' must be non-negative, got %g",
                           r->temperature);
    if (!get_number(o, "top_p", &r->top_p, &r->top_p_set, err))
        return false;
    if (!in_range(r->top_p, 0, 1, true, false))
        return bad_request(err, "top_p", "'top_p' must be in (0, 1], got %g", r->top_p);
    v = r->top_k;
    if (!get_int(o, "top_k", -1, INT32_MAX, &v, &r->top_k_set, err))
        return false;
    r->top_k = (int)v;
    if (!get_number(o, "min_p", &r->min_p, &r->min_p_set, err))
        return false;
    if (!in_range(r->min_p, 0, 1, false, false))
        return bad_request(err, "min_p", "'min_p' must be in [0, 1], got %g", r->min_p);
    if (!get_number(o, "presence_penalty", &r->presence_penalty, NULL, err) ||
        !get_number(o, "frequency_penalty", &r->frequency_penalty, NULL, err))
        return false;
    if (!in_range(r->presence_penalty, -2, 2, false, false))
        return bad_request(err, "presence_penalty", "'presence_penalty' must be in [-2, 2]");
    if (!in_range(r->frequency_penalty, -2, 2, false, false))
        return bad_request(err, "frequency_penalty", "'frequency_penalty' must be in [-2, 2]");
    if (!get_number(o, "repetition_penalty", &r->repetition_penalty, &r->repetition_penalty_set,
                    err))
        return false;
    if (!(r->repetition_penalty > 0))
        return bad_request(err, "repetition_penalty", "'repetition_penalty' must be positive");
    int64_t seed = 0;
    if (!get_int(o, "seed", INT64_MIN, INT64_MAX, &seed, &r->has_seed, err))
        return false;
    r->seed = (uint64_t)seed;
    if (!get_bool(o, "ignore_eos", &r->ignore_eos, err) ||
        !get_bool(o, "skip_special_tokens", &r->skip_special_tokens, err))
        return false;
    v = 0;
    if (!get_int(o, "priority", INT32_MIN, INT32_MAX, &v, NULL, err))
        return false;
    r->priority = (int)v;
    return parse_stop(o, r, err) && parse_logit_bias(o, r, err) && parse_logprobs(o, r, err);
}

static bool parse_stream(json_t *o, struct oai_request *r, struct oai_error *err)
{
    if (!get_bool(o, "stream", &r->stream, err))
        return false;
    json_t *so = json_object_get(o, "stream_options");
    if (!so || json_is_null(so))
        return true;
    if (!json_is_object(so))
        return bad_request(err, "stream_options", "'stream_options' must be an object");
    if (!r->stream)
        return bad_request(err, "stream_options", "'stream_options' is only allowed when "
                                                  "'stream' is true");
    return get_bool(so, "include_usage", &r->include_usage, err);
}

bool oai_request_parse(const char *body, size_t n, enum oai_kind kind, struct oai_request *out,
                       struct oai_error *err)
{
    *out = (struct oai_request){
        .kind = kind,
        .add_generation_prompt = true,
        .n = 1,
        .max_tokens = kind == OAI_COMPLETION ? 16 : -1, // OpenAI's and vLLM's defaults
        .temperature = 1.0,
        .top_p = 1.0,
        .top_k = 0,
        .min_p = 0.0,
        .repetition_penalty = 1.0,
        .skip_special_tokens = true,
        .logprobs = -1,
        .prompt_logprobs = -1,
    };
    json_error_t jerr;
    json_t *o = json_loadb(body, n, 0, &jerr);
    if (!o)
        return bad_request(err, "", "malformed JSON body: %s (line %d, column %d)", jerr.text,
                           jerr.line, jerr.column);
    bool ok = false;
    if (!json_is_object(o)) {
        bad_request(err, "", "the request body must be a JSON object");
        goto done;
    }
    if (!get_string(o, "model", &out->model, err))
        goto done;
    json_t *suffix = json_object_get(o, "suffix");
    if (kind == OAI_COMPLETION && suffix && !json_is_null(suffix)) {
        bad_request(err, "suffix", "'suffix' is not supported");
        goto done;
    }
    if (kind == OAI_COMPLETION) {
        if (!parse_prompts(o, out, err) || !get_bool(o, "echo", &out->echo, err))
            goto done;
    } else if (!parse_messages(o, out, err)) {
        goto done;
    }
    ok = parse_stream(o, out, err) && parse_sampling(o, out, err);
    // vLLM's rule: prompt logprobs come in the whole response only.
    if (ok && out->stream && out->prompt_logprobs > 0)
        ok = bad_request(err, "prompt_logprobs",
                         "`prompt_logprobs` are not available when `stream=True`.");
done:
    json_decref(o);
    if (!ok)
        oai_request_deinit(out);
    return ok;
}

void oai_request_deinit(struct oai_request *r)
{
    mem_free(r->model);
    for (size_t i = 0; i < r->n_prompts; i++) {
        mem_free(r->prompts[i].text);
        mem_free(r->prompts[i].ids);
    }
    mem_free(r->prompts);
    json_decref(r->messages);
    json_decref(r->tools);
    json_decref(r->chat_template_kwargs);
    mem_free(r->chat_template);
    for (size_t i = 0; i < r->n_stop; i++)
        mem_free(r->stop[i]);
    mem_free(r->stop);
    mem_free(r->stop_token_ids);
    mem_free(r->logit_bias);
    enum oai_kind kind = r->kind;
    *r = (struct oai_request){.kind = kind};
}
