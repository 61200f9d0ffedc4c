// Shared state of the server's files (server.c, routes.c, generation.c).
#ifndef VLLMC_SERVER_SERVER_INTERNAL_H
#define VLLMC_SERVER_SERVER_INTERNAL_H

#include <jansson.h>
#include <stdatomic.h>

#include "server/http.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/server.h"

struct jinja_template;

struct server {
    struct server_options opt;
    struct vllmc_engine *engine;  // borrowed
    struct http_server *http;     // owned
    struct metrics *metrics;      // owned
    const char *model_name;       // the first served name; borrowed from opt or the engine
    json_t *generation_defaults;  // owned or NULL: default sampling fields
    struct jinja_template *chat_template; // owned compiled template, or NULL
    atomic_bool shutting_down;    // no new generation requests
    atomic_bool abort_all;        // in-flight requests must abort now
    atomic_llong next_id;
};

// Replies with OpenAI's error shape.
void server_reply_error(struct server *srv, struct http_exchange *x, const struct oai_error *e);
void server_reply_json(struct server *srv, struct http_exchange *x, int status, json_t *body);
// A random-looking unique id with the given prefix ("cmpl-", "chatcmpl-").
void server_make_id(struct server *srv, const char *prefix, char *out, size_t cap);

// Compiles the --chat-template override or the model's template (none is fine:
// chat requests then fail with a clear 400).
enum vllmc_status chat_template_init(struct server *srv, char *err_msg, size_t err_len);
void chat_template_deinit(struct server *srv);
// Renders the chat template for r's messages into an owned string (mem_free).
bool chat_render(struct server *srv, const struct oai_request *r, char **out,
                 struct oai_error *err);

#endif
