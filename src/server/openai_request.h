// OpenAI request bodies (/v1/completions, /v1/chat/completions) parsed and
// validated into a plain struct, with vLLM's extra sampling fields. Every
// rejection carries the HTTP status, the offending parameter and a message in
// OpenAI's error shape. Pure: bytes in, struct out, so it is fuzzed.
#ifndef VLLMC_SERVER_OPENAI_REQUEST_H
#define VLLMC_SERVER_OPENAI_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum oai_kind { OAI_COMPLETION, OAI_CHAT };

// One prompt of a completion request: text or token ids (exactly one set).
struct oai_prompt {
    char *text;       // owned, NUL-terminated; NULL when ids are given
    int32_t *ids;     // owned
    size_t n_ids;
};

struct oai_logit_bias {
    int32_t token_id;
    float bias;
};

#define OAI_MAX_LOGPROBS 20

struct oai_request {
    enum oai_kind kind;
    char *model;                 // owned; NULL when absent

    // completions
    struct oai_prompt *prompts;  // owned [n_prompts]
    size_t n_prompts;
    bool echo;

    // chat
    json_t *messages;            // owned reference: the array as sent
    json_t *tools;               // owned reference or NULL
    json_t *chat_template_kwargs;// owned reference or NULL (an object)
    char *chat_template;         // owned; per-request template override, or NULL
    bool add_generation_prompt;  // default true
    bool continue_final_message;

    // streaming
    bool stream;
    bool include_usage;          // stream_options.include_usage

    // sampling (vLLM's names and defaults; *_set says the client sent it, so the
    // model's generation_config.json can supply defaults otherwise)
    int n;                       // >= 1
    int64_t max_tokens;          // -1: as many as the context allows
    int64_t min_tokens;
    double temperature;
    bool temperature_set;
    double top_p;
    bool top_p_set;
    int top_k;                   // -1 or 0: disabled
    bool top_k_set;
    double min_p;
    bool min_p_set;
    double presence_penalty;
    double frequency_penalty;
    double repetition_penalty;
    bool repetition_penalty_set;
    bool has_seed;
    uint64_t seed;
    char **stop;                 // owned [n_stop]
    size_t n_stop;
    int32_t *stop_token_ids;     // owned [n_stop_token_ids]
    size_t n_stop_token_ids;
    bool ignore_eos;
    bool skip_special_tokens;    // default true
    struct oai_logit_bias *logit_bias; // owned [n_logit_bias]
    size_t n_logit_bias;
    int logprobs;                // -1: none; else number of top alternatives (completions
                                 // `logprobs`, chat `top_logprobs` when `logprobs` is true)
    int prompt_logprobs;         // -1: none
    int priority;                // lower is served earlier (vLLM)
};

struct oai_error {
    int http_status;             // 400, 404, 413, ...
    const char *type;            // "invalid_request_error", "not_found_error", ...
    char param[64];              // the offending field, "" when none
    char message[512];
};

// Parses body (n bytes, need not be NUL-terminated). On success fills *out
// (release with oai_request_deinit) and returns true; on failure fills *err,
// leaves *out empty and returns false.
bool oai_request_parse(const char *body, size_t n, enum oai_kind kind, struct oai_request *out,
                       struct oai_error *err);
void oai_request_deinit(struct oai_request *r);

// Fills *err and returns false, so callers can `return oai_fail(...)`.
bool oai_fail(struct oai_error *err, int http_status, const char *type, const char *param,
              const char *fmt, ...) __attribute__((format(printf, 5, 6)));

// {"error": {"message", "type", "param", "code"}} as an owned string (free with free()).
char *oai_error_json(const struct oai_error *err);

#endif
