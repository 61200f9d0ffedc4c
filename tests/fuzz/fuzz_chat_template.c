// Fuzz target for chat templates: compile the input as a template, then
// render it with a small fixed conversation (tools and a tool call included)
// under tight limits, so loops and recursion end quickly.
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/alloc.h"
#include "template/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char context_json[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"You are terse.\"},"
    "{\"role\": \"user\", \"content\": \"Weather in Paris? \\u00e9\\ud83d\\ude00\"},"
    "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"abc123def\","
    " \"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"arguments\": {\"city\": \"Paris\", \"unit\": null, \"days\": [1, 2.5, true]}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"abc123def\", \"content\": \"{\\\"t\\\": 21}\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"thanks\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"description\": \"Get weather\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    " \"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *ctx;
    if (!ctx)
        ctx = json_loads(context_json, 0, NULL);
    struct jinja_template *t = NULL;
    struct err e;
    if (jinja_compile((const char *)data, size, "fuzz", &t, &e))
        return 0;
    struct jinja_limits lim;
    jinja_limits_default(&lim);
    lim.output_bytes_max = 1 << 20;
    lim.n_steps_max = 200000;
    char *out = NULL;
    jinja_render_limited(t, ctx, &lim, &out, NULL, &e);
    mem_free(out);
    jinja_free(t);
    return 0;
}
