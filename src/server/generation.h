// The generation endpoints, /v1/completions and /v1/chat/completions: from a
// validated request to engine requests, and from engine outputs to OpenAI
// responses, whole or streamed as Server-Sent Events.
#ifndef VLLMC_SERVER_GENERATION_H
#define VLLMC_SERVER_GENERATION_H

#include "server/http.h"
#include "server/openai_request.h"
#include "server/server_internal.h"

// Takes ownership of *r (deinitialised before return). Replies on x.
void generation_handle(struct server *srv, struct http_exchange *x, struct oai_request *r,
                       int32_t **prompt_ids, const int *prompt_lens, int n_prompts);

#endif
