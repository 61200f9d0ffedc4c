// libcurl client of `vllmc bench serve` (see bench_http.h). Server-Sent
// Events are split on blank lines as they arrive; each "data:" event is
// parsed with jansson and timed when its bytes reach us.
#include "tools/bench_http.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"

#define BENCH_HTTP_TIMEOUT_S (6L * 60 * 60) // as vLLM's client

struct bench_http_buf {
    char *p;
    size_t n;
    size_t cap;
    bool oom;
};

static bool buf_append(struct bench_http_buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = mem_realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return false;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

struct bench_http_stream_ctx {
    struct bench_http_result *r;
    struct bench_http_buf pending; // bytes of an event not yet complete
    double last_s;                 // timestamp of the newest chunk with choices
    bool done;                     // saw data: [DONE]
};

static void stream_add_itl(struct bench_http_result *r, double v)
{
    if (r->n_itl == r->cap_itl) {
        int cap = r->cap_itl ? 2 * r->cap_itl : 64;
        double *p = mem_realloc(r->itl_s, (size_t)cap * sizeof(*p));
        if (!p)
            return;
        r->itl_s = p;
        r->cap_itl = cap;
    }
    r->itl_s[r->n_itl++] = v;
}

// One SSE event (its lines, without the blank separator line).
static void stream_event(struct bench_http_stream_ctx *ctx, char *ev, double now)
{
    struct bench_http_result *r = ctx->r;
    for (char *line = ev; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r')
            line[--len] = '\0';
        if (!strncmp(line, "data:", 5)) {
            const char *data = line + 5;
            while (*data == ' ')
                data++;
            if (!strcmp(data, "[DONE]")) {
                ctx->done = true;
            } else {
                json_t *o = json_loads(data, 0, NULL);
                json_t *choices = json_object_get(o, "choices");
                json_t *usage = json_object_get(o, "usage");
                if (json_is_array(choices) && json_array_size(choices) > 0) {
                    if (r->n_chunks == 0)
                        r->ttft_s = now - r->start_s;
                    else
                        stream_add_itl(r, now - ctx->last_s);
                    ctx->last_s = now;
                    r->n_chunks++;
                    json_t *c0 = json_array_get(choices, 0);
                    json_t *text = json_object_get(c0, "text");
                    if (!text) // chat completions
                        text = json_object_get(json_object_get(c0, "delta"), "content");
                    if (json_is_string(text)) {
                        struct bench_http_buf b = {r->text, r->text_len, r->text_len + 1, false};
                        if (!r->text)
                            b.cap = 0;
                        buf_append(&b, json_string_value(text), json_string_length(text));
                        r->text = b.p;
                        r->text_len = b.n;
                    }
                } else if (json_is_object(usage)) {
                    json_t *ct = json_object_get(usage, "completion_tokens");
                    json_t *pt = json_object_get(usage, "prompt_tokens");
                    if (json_is_integer(ct))
                        r->output_tokens = (int)json_integer_value(ct);
                    if (json_is_integer(pt))
                        r->prompt_tokens = (int)json_integer_value(pt);
                } else if (json_is_object(json_object_get(o, "error")) && !r->error[0]) {
                    json_t *msg = json_object_get(json_object_get(o, "error"), "message");
                    snprintf(r->error, sizeof(r->error), "stream error: %s",
                             json_is_string(msg) ? json_string_value(msg) : "(no message)");
                }
                json_decref(o);
            }
        }
        line = nl ? nl + 1 : NULL;
    }
}

static size_t stream_write(char *data, size_t size, size_t nmemb, void *user)
{
    struct bench_http_stream_ctx *ctx = user;
    size_t n = size * nmemb;
    double now = time_now_s();
    if (!buf_append(&ctx->pending, data, n))
        return 0;
    // Events end with a blank line ("\n\n", or "\r\n\r\n").
    for (;;) {
        char *p = ctx->pending.p;
        char *end = strstr(p, "\n\n");
        char *end_crlf = strstr(p, "\r\n\r\n");
        size_t sep = 2;
        if (end_crlf && (!end || end_crlf < end)) {
            end = end_crlf;
            sep = 4;
        }
        if (!end)
            break;
        *end = '\0';
        stream_event(ctx, p, now);
        size_t used = (size_t)(end - p) + sep;
        memmove(p, p + used, ctx->pending.n - used + 1);
        ctx->pending.n -= used;
    }
    return n;
}

static struct curl_slist *http_headers(const char *api_key, bool json)
{
    struct curl_slist *h = NULL;
    if (json)
        h = curl_slist_append(h, "Content-Type: application/json");
    if (api_key && *api_key) {
        char auth[512];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", api_key);
        h = curl_slist_append(h, auth);
    }
    return h;
}

void bench_http_stream(const char *url, const char *api_key, const char *body,
                       struct bench_http_result *r)
{
    memset(r, 0, sizeof(*r));
    r->prompt_tokens = -1;
    r->output_tokens = -1;
    struct bench_http_stream_ctx ctx = {.r = r};
    CURL *c = curl_easy_init();
    if (!c) {
        snprintf(r->error, sizeof(r->error), "curl_easy_init failed");
        return;
    }
    struct curl_slist *h = http_headers(api_key, true);
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, stream_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &ctx);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, BENCH_HTTP_TIMEOUT_S);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    r->start_s = time_now_s();
    ctx.last_s = r->start_s;
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK) {
        snprintf(r->error, sizeof(r->error), "%s", curl_err[0] ? curl_err : curl_easy_strerror(rc));
    } else if (status != 200) {
        // The body of an error reply is one JSON object, not an event stream.
        snprintf(r->error, sizeof(r->error), "HTTP %ld: %.200s", status,
                 ctx.pending.p ? ctx.pending.p : "");
    } else if (r->n_chunks == 0) {
        if (!r->error[0])
            snprintf(r->error, sizeof(r->error),
                     "never received a chunk with choices to calculate TTFT");
    } else {
        r->success = !r->error[0];
    }
    r->latency_s = ctx.last_s - r->start_s;
    mem_free(ctx.pending.p);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
}

static size_t plain_write(char *data, size_t size, size_t nmemb, void *user)
{
    size_t n = size * nmemb;
    return buf_append(user, data, n) ? n : 0;
}

int bench_http_request(const char *url, const char *api_key, const char *body, long *status,
                       char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    *status = 0;
    CURL *c = curl_easy_init();
    if (!c)
        return 1;
    struct bench_http_buf b = {0};
    struct curl_slist *h = http_headers(api_key, body != NULL);
    curl_easy_setopt(c, CURLOPT_URL, url);
    if (body)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, plain_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, BENCH_HTTP_TIMEOUT_S);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK || b.oom) {
        mem_free(b.p);
        return 1;
    }
    *out = b.p;
    *out_len = b.n;
    return 0;
}

void bench_http_result_deinit(struct bench_http_result *r)
{
    mem_free(r->itl_s);
    mem_free(r->text);
    r->itl_s = NULL;
    r->text = NULL;
}

int bench_http_global_init(void)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : 1;
}

void bench_http_global_cleanup(void)
{
    curl_global_cleanup();
}
