// libmicrohttpd plumbing: body accumulation with a size limit, one handler
// call per request, full and streamed replies, graceful quiesce.
#include "server/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"

#define MAX_REPLY_HEADERS 8

struct http_server {
    struct MHD_Daemon *daemon;
    struct http_server_options opt;
    uint16_t port;
    atomic_uint n_active;
};

// Per-connection state, created on the first access-handler call.
struct http_exchange {
    struct http_server *server;
    struct MHD_Connection *conn;
    char *body;            // owned, NUL-terminated
    size_t body_len;
    bool too_large;
    struct MHD_Response *response; // set by a reply
    int status;
    char *header_names[MAX_REPLY_HEADERS];
    char *header_values[MAX_REPLY_HEADERS];
    int n_headers;
    bool counted;          // counted in n_active
};

struct stream_ctx {
    struct http_server *server;
    http_stream_fn produce;
    http_stream_done_fn done;
    void *ctx;
    bool finished; // produce returned -1
};

const char *http_header(struct http_exchange *x, const char *name)
{
    return MHD_lookup_connection_value(x->conn, MHD_HEADER_KIND, name);
}

const char *http_query(struct http_exchange *x, const char *name)
{
    return MHD_lookup_connection_value(x->conn, MHD_GET_ARGUMENT_KIND, name);
}

void http_add_header(struct http_exchange *x, const char *name, const char *value)
{
    if (x->n_headers == MAX_REPLY_HEADERS)
        return;
    char *n = mem_strdup(name), *v = mem_strdup(value);
    if (!n || !v) {
        mem_free(n);
        mem_free(v);
        return;
    }
    x->header_names[x->n_headers] = n;
    x->header_values[x->n_headers++] = v;
}

static void attach_headers(struct http_exchange *x, const char *content_type)
{
    if (!x->response)
        return;
    if (content_type)
        MHD_add_response_header(x->response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    for (int i = 0; i < x->n_headers; i++)
        MHD_add_response_header(x->response, x->header_names[i], x->header_values[i]);
}

void http_reply(struct http_exchange *x, int status, const char *content_type, const char *body,
                size_t len)
{
    if (x->response)
        return;
    x->response = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    x->status = status;
    attach_headers(x, content_type);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct stream_ctx *s = cls;
    for (;;) {
        ssize_t n = s->produce(s->ctx, buf, max);
        if (n < 0) {
            s->finished = true;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        // In thread-per-connection mode returning 0 makes MHD call again at
        // once; the producer itself waits briefly, so this does not spin.
        if (n > 0)
            return n;
    }
}

static void stream_free(void *cls)
{
    struct stream_ctx *s = cls;
    if (s->done)
        s->done(s->ctx, !s->finished);
    atomic_fetch_sub(&s->server->n_active, 1);
    mem_free(s);
}

void http_reply_stream(struct http_exchange *x, int status, const char *content_type,
                       http_stream_fn produce, http_stream_done_fn done, void *ctx)
{
    if (x->response)
        return;
    struct stream_ctx *s = mem_calloc(1, sizeof *s);
    if (!s) {
        if (done)
            done(ctx, true);
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"InternalServerError\",\"param\":null,\"code\":500}}";
        http_reply(x, 500, "application/json", oom, sizeof oom - 1);
        return;
    }
    *s = (struct stream_ctx){x->server, produce, done, ctx, false};
    x->response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, s,
                                                    stream_free);
    if (!x->response) {
        stream_free(s);
        return;
    }
    atomic_fetch_add(&x->server->n_active, 1); // released in stream_free
    x->status = status;
    attach_headers(x, content_type);
    MHD_add_response_header(x->response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
}

static enum MHD_Result queue_error(struct MHD_Connection *conn, unsigned status, const char *msg)
{
    char body[512];
    int n = snprintf(body, sizeof body,
                     "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":%u}}",
                     msg, status == 413 ? "RequestEntityTooLarge" : "InternalServerError",
                     status);
    struct MHD_Response *r =
        MHD_create_response_from_buffer((size_t)n, body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    (void)version;
    struct http_server *srv = cls;
    struct http_exchange *x = *con_cls;
    if (!x) {
        x = mem_calloc(1, sizeof *x);
        if (!x)
            return MHD_NO;
        x->server = srv;
        x->conn = conn;
        *con_cls = x;
        atomic_fetch_add(&srv->n_active, 1);
        x->counted = true;
        // Refuse early when the declared length is already over the limit.
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > srv->opt.max_body_bytes)
            x->too_large = true;
        return MHD_YES;
    }
    if (*upload_size) {
        // Keep reading (and dropping) an oversized body so the reply is seen.
        if (!x->too_large && x->body_len + *upload_size > srv->opt.max_body_bytes)
            x->too_large = true;
        if (!x->too_large) {
            char *b = mem_realloc(x->body, x->body_len + *upload_size + 1);
            if (!b)
                return MHD_NO;
            memcpy(b + x->body_len, upload, *upload_size);
            x->body = b;
            x->body_len += *upload_size;
            x->body[x->body_len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (x->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "request body exceeds the limit of %zu bytes",
                 srv->opt.max_body_bytes);
        return queue_error(conn, 413, msg);
    }
    srv->opt.handler(srv->opt.user, x, method, url, x->body ? x->body : "", x->body_len);
    if (!x->response)
        return queue_error(conn, 500, "handler produced no response");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)x->status, x->response);
    MHD_destroy_response(x->response);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    (void)toe;
    struct http_server *srv = cls;
    struct http_exchange *x = *con_cls;
    if (!x)
        return;
    for (int i = 0; i < x->n_headers; i++) {
        mem_free(x->header_names[i]);
        mem_free(x->header_values[i]);
    }
    if (x->counted)
        atomic_fetch_sub(&srv->n_active, 1);
    mem_free(x->body);
    mem_free(x);
    *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n')
        line[--n] = '\0';
    log_warn("http: %s", line);
}

enum vllmc_status http_server_start(const struct http_server_options *o, struct http_server **out,
                                    char *err_msg, size_t err_len)
{
    *out = NULL;
    struct http_server *s = mem_calloc(1, sizeof *s);
    if (!s)
        return VLLMC_ERR_NOMEM;
    s->opt = *o;
    struct sockaddr_storage addr = {0};
    const char *host = o->host ? o->host : "0.0.0.0";
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&addr;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(o->port);
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(o->port);
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err_msg, err_len, "--host '%s' is not an IPv4 or IPv6 address", host);
        mem_free(s);
        return VLLMC_ERR_INVALID_ARG;
    }
    // The logger goes first so that messages about the other options reach it.
    s->daemon = MHD_start_daemon(
        flags, o->port, NULL, NULL, on_access, s, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        s, MHD_OPTION_CONNECTION_LIMIT, o->max_connections ? o->max_connections : 1024u,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_END);
    if (!s->daemon) {
        snprintf(err_msg, err_len, "cannot listen on %s:%u (address in use or not permitted)",
                 host, o->port);
        mem_free(s);
        return VLLMC_ERR_IO;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : o->port;
    *out = s;
    return VLLMC_OK;
}

uint16_t http_server_port(const struct http_server *s)
{
    return s->port;
}

void http_server_quiesce(struct http_server *s)
{
    if (s && s->daemon)
        MHD_quiesce_daemon(s->daemon);
}

unsigned http_server_active(const struct http_server *s)
{
    return atomic_load(&((struct http_server *)s)->n_active);
}

void http_server_stop(struct http_server *s)
{
    if (!s)
        return;
    if (s->daemon)
        MHD_stop_daemon(s->daemon);
    mem_free(s);
}
