// The OpenAI-compatible server: HTTP threads parse and validate requests,
// render chat templates and tokenize, then hand token ids to the engine
// through the public API; each connection thread streams its own request's
// outputs. The engine thread never waits on a client.
#ifndef VLLMC_SERVER_SERVER_H
#define VLLMC_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllmc.h"

struct server_options {
    const char *host;                // NULL = 0.0.0.0
    uint16_t port;                   // default 8000
    const char *const *served_model_names; // names accepted in "model"; the first is reported
    int n_served_model_names;        // 0 = the engine's model name
    const char *api_key;             // NULL = no authentication
    const char *chat_template;       // Jinja source overriding the model's, or NULL
    const char *generation_config;   // JSON text of default sampling params, or NULL
    size_t max_body_bytes;           // default 4 MiB
    int max_waiting_requests;        // 503 beyond this many waiting; default 1024
    int grace_period_s;              // shutdown: time given to in-flight requests
};

void server_options_default(struct server_options *o);

struct server;

// Starts listening; the engine is borrowed and must outlive the server.
enum vllmc_status server_start(const struct server_options *o, struct vllmc_engine *engine,
                               struct server **out, char *err_msg, size_t err_len);
uint16_t server_port(const struct server *s);
// Stops accepting, lets in-flight requests finish for up to the grace period,
// aborts the rest, and frees the server. NULL is a no-op.
void server_stop(struct server *s);

#endif
