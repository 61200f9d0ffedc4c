// Fuzz target: request body bytes -> validated OpenAI request (both endpoints).
#include <stdint.h>
#include <stdlib.h>

#include "server/openai_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct oai_request r;
    struct oai_error err;
    for (int kind = 0; kind < 2; kind++) {
        if (oai_request_parse((const char *)data, size, (enum oai_kind)kind, &r, &err)) {
            oai_request_deinit(&r);
        } else {
            char *s = oai_error_json(&err);
            free(s);
        }
    }
    return 0;
}
