// HTTP front on libmicrohttpd: a thread per connection reads the request,
// enforces the body limit, and hands a complete exchange to one handler,
// which answers once with a full body or a stream. It knows nothing of
// OpenAI or the engine (routes.c does).
#ifndef VLLMC_SERVER_HTTP_H
#define VLLMC_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vllmc.h"

struct http_exchange;
struct http_server;

// Called on the connection's thread once the whole body is in. It must call
// exactly one http_reply_*() before returning. body is valid during the call.
typedef void (*http_handler_fn)(void *user, struct http_exchange *x, const char *method,
                                const char *path, const char *body, size_t body_len);

// Stream producer: writes up to max bytes into buf and returns the count, 0 to
// be called again later (it may block a little), or -1 at end of stream.
// Runs on the connection's thread.
typedef ssize_t (*http_stream_fn)(void *ctx, char *buf, size_t max);
// Called once when the stream ends, normally or because the client went away
// (client_gone true): the place to abort work for that client.
typedef void (*http_stream_done_fn)(void *ctx, bool client_gone);

struct http_server_options {
    const char *host;          // "0.0.0.0", "127.0.0.1", "::" ...; NULL = all IPv4
    uint16_t port;             // 0 picks a free port (see http_server_port)
    size_t max_body_bytes;     // larger bodies get 413
    unsigned max_connections;
    http_handler_fn handler;
    void *user;
};

enum vllmc_status http_server_start(const struct http_server_options *o, struct http_server **out,
                                    char *err_msg, size_t err_len);
uint16_t http_server_port(const struct http_server *s);
// Stops accepting new connections; in-flight exchanges continue.
void http_server_quiesce(struct http_server *s);
// Number of exchanges in flight (handlers running or streams open).
unsigned http_server_active(const struct http_server *s);
void http_server_stop(struct http_server *s); // NULL is a no-op; closes everything

// Request accessors, valid during the handler call.
const char *http_header(struct http_exchange *x, const char *name); // NULL when absent
const char *http_query(struct http_exchange *x, const char *name);

// Replies. Headers added before the reply go on it.
void http_add_header(struct http_exchange *x, const char *name, const char *value);
void http_reply(struct http_exchange *x, int status, const char *content_type, const char *body,
                size_t len);
void http_reply_stream(struct http_exchange *x, int status, const char *content_type,
                       http_stream_fn produce, http_stream_done_fn done, void *ctx);

#endif
