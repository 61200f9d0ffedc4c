// vllm.c public C API: one engine thread owns the model; any thread may add
// requests, read their streamed outputs and abort them.
//
// Ownership, for the whole header: a pointer you pass in is borrowed for the
// duration of the call unless the comment says otherwise; a pointer returned
// to you is owned by the library and valid until the event its comment names.
// Handles are opaque. Params structs are filled by *_params_default() first,
// so fields added later keep old callers working.
#ifndef VLLMC_H
#define VLLMC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Incremented on any incompatible change to a struct layout or signature.
// 3: async_scheduling in the params, n_async_steps in the stats;
// 4: decode steps' device time in the stats.
#define VLLMC_ABI_VERSION 4

#if defined(VLLMC_BUILDING)
#define VLLMC_API __attribute__((visibility("default")))
#else
#define VLLMC_API
#endif

// ---- status codes ----

#define VLLMC_STATUS_LIST(X)                                                                       \
    X(OK, "success")                                                                               \
    X(ERR_NOMEM, "out of memory")                                                                  \
    X(ERR_IO, "input/output error")                                                                \
    X(ERR_FORMAT, "malformed model file")                                                          \
    X(ERR_UNSUPPORTED, "not supported")                                                            \
    X(ERR_INVALID_ARG, "invalid argument")                                                         \
    X(ERR_NOT_FOUND, "not found")                                                                  \
    X(ERR_BACKEND, "backend error")                                                                \
    X(ERR_TEMPLATE, "chat template error")                                                         \
    X(ERR_TOKENIZER, "tokenizer error")                                                            \
    X(ERR_CAPACITY, "capacity exceeded")                                                           \
    X(ERR_ABORTED, "aborted")                                                                      \
    X(ERR_CLOSED, "engine is shutting down")

enum vllmc_status {
#define VLLMC_STATUS_ENUM(name, text) VLLMC_##name,
    VLLMC_STATUS_LIST(VLLMC_STATUS_ENUM)
#undef VLLMC_STATUS_ENUM
        VLLMC_STATUS_COUNT
};

// A static English text for a status; never NULL.
VLLMC_API const char *vllmc_status_str(enum vllmc_status status);

// The library version, "MAJOR.MINOR.PATCH". Static.
VLLMC_API const char *vllmc_version(void);

// ---- engine ----
//
// One engine owns one loaded model and one engine thread, which runs every
// model step (scheduling, batching, the forward pass, sampling and
// detokenization). All functions below may be called from any thread unless
// the comment says otherwise; none of them waits for a model step except
// vllmc_request_next_output() (by design) and vllmc_engine_free().

struct vllmc_engine;  // opaque
struct vllmc_request; // opaque: one submitted request (all n of its samples)

// The largest block_size an engine accepts.
#define VLLMC_BLOCK_SIZE_MAX 1024

struct vllmc_engine_params {
    const char *model_path;        // GGUF file or Hugging Face folder; borrowed for the call
    const char *device;            // "cpu" (default) or "cuda"
    int n_threads;                 // CPU worker threads; 0 = all cores
    int block_size;                // tokens per KV block, 1..VLLMC_BLOCK_SIZE_MAX; default 16
    int max_model_len;             // 0 = the model's context length
    int max_num_seqs;              // requests in one step; default 256
    int max_num_batched_tokens;    // token budget of one step (>= max_num_seqs); 0 = 2048,
                                   // vLLM's default on the CPU
    int64_t kv_cache_memory_bytes; // KV cache size; 0 = derive from gpu_memory_utilization
    double gpu_memory_utilization; // fraction of the device's memory (on the CPU: of the free
                                   // RAM) the engine may use in all: weights, activations, KV;
                                   // default 0.9
    bool enable_prefix_caching;    // default true
    uint64_t seed;                 // seeds requests that give no seed of their own; default 0
    const char *dtype;             // "auto" (default), "f32", "bf16": weights as stored;
                                   // "f16": bf16 matrices rewritten as f16 on a GPU (exact
                                   // for |w| in [2^-17, 65504]; a model with larger values
                                   // fails to load), so its tensor-core GEMMs round the
                                   // activations once to f16 instead of two bf16 terms.
                                   // Activations are f32 between the ops in every case.
    const char *kv_cache_dtype;    // "auto" (default: f32), "f32", "f16", "bf16"
    bool log_providers;            // log each distinct op provider selection once
    bool async_scheduling;         // default true: step N+1 is scheduled and queued while the
                                   // device runs step N (vLLM's --async-scheduling)
};

// Fills p with the defaults above. Call before setting fields.
VLLMC_API void vllmc_engine_params_default(struct vllmc_engine_params *p);

// Loads the model named in params, sizes the KV cache and starts the engine
// thread. On success *out owns the engine; release it with vllmc_engine_free().
// On failure *out is NULL, the status says why and vllmc_last_error() the detail;
// VLLMC_ERR_CAPACITY means max_model_len is longer than the model's context or
// the KV cache budget cannot hold one max_model_len request. Any thread; it
// blocks while the model loads.
VLLMC_API enum vllmc_status vllmc_engine_create(const struct vllmc_engine_params *params,
                                                struct vllmc_engine **out);

// Stops the engine thread, finishes every unfinished request with finish
// reason "abort" and releases the engine. Request handles stay valid (and must
// still be released with vllmc_request_free()). NULL is a no-op.
VLLMC_API void vllmc_engine_free(struct vllmc_engine *engine);

// ---- sampling parameters (vLLM's SamplingParams) ----

struct vllmc_logit_bias {
    int32_t token_id;
    float bias; // added to the raw logit, clamped by the server to [-100, 100]
};

struct vllmc_sampling_params {
    int n;                         // samples generated from the prompt; default 1
    float temperature;             // default 1; 0 (below 1e-5) = greedy
    float top_p;                   // (0, 1]; default 1 = off
    int top_k;                     // 0 or -1 = off (default)
    float min_p;                   // [0, 1]; default 0 = off
    float presence_penalty;        // [-2, 2]; default 0
    float frequency_penalty;       // [-2, 2]; default 0
    float repetition_penalty;      // > 0; default 1 = off
    bool has_seed;                 // default false: seeded from the engine seed
    uint64_t seed;                 // with has_seed: sample i of n uses seed + i
    int max_tokens;                // generated tokens at most; default 16, -1 = up to max_model_len
    int min_tokens;                // EOS and stop_token_ids are masked before this many; default 0
    bool ignore_eos;               // keep going past EOS; default false
    const int32_t *stop_token_ids; // borrowed for the add call (copied)
    int n_stop_token_ids;
    const char *const *stop; // stop strings; borrowed for the add call (copied)
    int n_stop;
    bool include_stop_str_in_output;           // default false
    const struct vllmc_logit_bias *logit_bias; // borrowed for the add call (copied)
    int n_logit_bias;
    int logprobs;             // -1 = none (default); k >= 0: the sampled token's logprob and
                              // the k most likely alternatives, per generated token
    int prompt_logprobs;      // -1 = none (default); k >= 0: the same for each prompt token
    bool skip_special_tokens; // leave special tokens out of the text; default true
};

// Fills p with vLLM's defaults (see the fields).
VLLMC_API void vllmc_sampling_params_default(struct vllmc_sampling_params *p);

// ---- requests ----

struct vllmc_request_params {
    const char *prompt;              // UTF-8 text, or NULL to use prompt_token_ids
    bool add_special_tokens;         // text prompts: add BOS as the model's tokenizer says;
                                     // default true
    const int32_t *prompt_token_ids; // used when prompt is NULL; borrowed for the call
    int n_prompt_token_ids;
    struct vllmc_sampling_params sampling;
    int priority;           // lower runs earlier (vLLM priority scheduling);
                            // default 0; ties are first come first served
    const char *cache_salt; // optional: only requests with the same salt share
                            // prefix-cache blocks; borrowed for the call
    // Optional: called on the engine thread each time an output is queued for
    // this request (and once more after the final one). It must not block nor
    // call back into the engine; it is meant to wake the consumer (an event
    // loop's pipe, a condition variable).
    void (*on_output)(void *user_data);
    void *user_data;
};

// Fills p with the defaults above (and the sampling defaults).
VLLMC_API void vllmc_request_params_default(struct vllmc_request_params *p);

// Validates, tokenizes (text prompts) and queues a request. On success *out
// owns a handle to it: read its outputs with vllmc_request_next_output() and
// release it with vllmc_request_free(). The request runs whether or not the
// handle is read. Errors: VLLMC_ERR_INVALID_ARG for bad parameters,
// VLLMC_ERR_CAPACITY for a prompt that can never fit (longer than
// max_model_len or than the whole KV cache), VLLMC_ERR_CLOSED once the engine
// is shutting down; the detail is in vllmc_last_error() of this thread.
VLLMC_API enum vllmc_status vllmc_engine_add_request(struct vllmc_engine *engine,
                                                     const struct vllmc_request_params *params,
                                                     struct vllmc_request **out);

// The engine-unique id of a request (increasing in order of submission).
VLLMC_API uint64_t vllmc_request_id(const struct vllmc_request *req);

// Asks the engine to stop the request; its KV blocks return to the pool on the
// next step, and the stream ends with an output whose finish reason is
// "abort" (for each unfinished sample). Idempotent; a finished request is left
// as is. Any thread; never blocks on the model.
VLLMC_API void vllmc_request_abort(struct vllmc_request *req);

// Releases the caller's handle; aborts the request if it has not finished.
// Outputs not read are dropped. NULL is a no-op.
VLLMC_API void vllmc_request_free(struct vllmc_request *req);

enum vllmc_finish_reason {
    VLLMC_FINISH_NONE = 0, // still running
    VLLMC_FINISH_STOP,     // EOS, a stop token id or a stop string
    VLLMC_FINISH_LENGTH,   // max_tokens or max_model_len reached
    VLLMC_FINISH_ABORT,    // aborted by the client or by engine shutdown
};

// "stop", "length", "abort" (OpenAI spelling); NULL for VLLMC_FINISH_NONE.
VLLMC_API const char *vllmc_finish_reason_str(enum vllmc_finish_reason r);

struct vllmc_top_logprob {
    int32_t token_id;
    float logprob;
};

// Log-probabilities of one position: those of the model's raw output (before
// penalties and temperature), as vLLM reports by default.
struct vllmc_logprob {
    int32_t token_id;                    // the sampled (or prompt) token
    float logprob;                       // its log-probability
    int32_t rank;                        // 1 = the most likely token
    int n_top;                           // entries in top
    const struct vllmc_top_logprob *top; // the n_top most likely tokens, most likely first
};

struct vllmc_usage {
    int prompt_tokens;
    int completion_tokens; // over all samples
    int cached_tokens;     // prompt tokens served from the prefix cache (first sample)
    double queue_time_s;    // seconds from the add call until the request was first
                            // scheduled; negative while it still waits
};

// One step's worth of new results for one sample of a request.
struct vllmc_output {
    int index;                // which of the n samples (0-based)
    const int32_t *token_ids; // new tokens since the previous output of this sample
    int n_token_ids;
    const char *text; // new text (UTF-8, never a split character), NUL-terminated
    size_t text_len;
    const struct vllmc_logprob *logprobs;        // [n_token_ids] when logprobs >= 0, else NULL
    const struct vllmc_logprob *prompt_logprobs; // [n_prompt_logprobs] in the first output of a
    int n_prompt_logprobs;                       // request when prompt_logprobs >= 0; entry 0
                                                 // (the first prompt token) has n_top 0 and
                                                 // logprob NAN, as vLLM's None
    enum vllmc_finish_reason finish_reason;      // set on the last output of this sample
    const char *stop_str;                        // the stop string that ended the sample, or NULL
    int32_t stop_token_id;                       // the stop token id that ended it, or -1
    bool final;               // the last output of the whole request: usage is final
    struct vllmc_usage usage; // totals so far
};

// Waits up to timeout_ms (-1 = no limit, 0 = poll) for the request's next
// output. On VLLMC_OK, *out is the next output (owned by the caller: release it
// with vllmc_output_free()), or NULL when the time ran out first. After the
// output with final set has been returned, further calls return
// VLLMC_ERR_CLOSED. Any one thread at a time per request.
VLLMC_API enum vllmc_status vllmc_request_next_output(struct vllmc_request *req, int timeout_ms,
                                                      struct vllmc_output **out);
VLLMC_API void vllmc_output_free(struct vllmc_output *out); // NULL is a no-op

// ---- statistics (for /metrics) ----

struct vllmc_engine_stats {
    int n_running;      // requests (samples) in the running set
    int n_waiting;      // waiting, including preempted ones
    int n_blocks_total; // KV blocks
    int n_blocks_free;
    double kv_cache_usage; // fraction of blocks in use, 0..1
    int block_size;
    int max_model_len;
    int64_t prefix_cache_queries; // prompt tokens looked up in the prefix cache
    int64_t prefix_cache_hits;    // of which found
    int64_t n_preemptions;
    int64_t prompt_tokens_total;     // prompt tokens of finished and running requests
    int64_t generation_tokens_total; // tokens generated
    int64_t n_requests_finished;     // by any reason
    int64_t n_steps;                 // model steps run
    int64_t n_async_steps;           // of which queued before the previous step's tokens
                                     // were read (asynchronous scheduling)
    // Where the engine thread's time goes in decode-only steps (every
    // scheduled request computes exactly one token): wall seconds summed over
    // those steps. Host work (scheduling, batch building, sampling and output
    // processing) against the forward pass, which includes the logits copy
    // and device sync on a GPU.
    int64_t n_decode_steps;
    double decode_schedule_s; // scheduler: which requests, KV blocks
    double decode_prepare_s;  // runner: the flat batch (ids, positions, slots, tables) and
                              // its upload to the device
    double decode_forward_s;  // model forward (on a GPU its launch: the wait is in device_wait_s)
    double decode_output_s;   // sampling (with the device wait), stop checks, detokenization,
                              // output queues
    int64_t n_graph_steps;           // of which replayed from a captured graph (decode on a GPU)
    double step_host_s;    // engine thread time of all steps, less the waits for the device
    double device_wait_s;  // engine thread time waiting for the device's results
    double device_idle_s;  // device time with nothing queued, between back-to-back steps
                           // and between a step's forward pass and its sampling (device
                           // events; the host clock on the CPU)
    int64_t n_device_idle; // steps measured in device_idle_s
    double decode_cpu_s;   // CPU time of all the process's threads in decode-only steps
    // Device time of decode-only steps (device events; the host clock on the CPU):
    // from the step's start to the end of its forward pass (lm_head included,
    // and any time the device waited there for the host to queue the pass),
    // and sampling with the copy of the tokens to the host.
    int64_t n_decode_device;        // decode-only steps measured here
    double decode_device_forward_s; // summed over those steps
    double decode_device_sample_s;
};

// Fills *out with a snapshot of the counters. Any thread.
VLLMC_API void vllmc_engine_stats(struct vllmc_engine *engine, struct vllmc_engine_stats *out);

// The detail of the last failed call made by this thread (thread-local),
// "" when none. Valid until this thread's next call into the library.
VLLMC_API const char *vllmc_last_error(void);

// ---- tokenizer helpers ----

// Tokenizes text with the engine model's tokenizer. *out_ids is owned by the
// caller (release with vllmc_tokens_free()). add_special_tokens adds BOS (and
// EOS) as the model's tokenizer config says. Any thread.
VLLMC_API enum vllmc_status vllmc_tokenize(struct vllmc_engine *engine, const char *text,
                                           size_t text_len, bool add_special_tokens,
                                           int32_t **out_ids, int *out_n);
VLLMC_API void vllmc_tokens_free(int32_t *ids); // NULL is a no-op

// Turns token ids into text; *out_text is owned by the caller (release with
// vllmc_text_free()), NUL-terminated. Any thread.
VLLMC_API enum vllmc_status vllmc_detokenize(struct vllmc_engine *engine, const int32_t *ids, int n,
                                             bool skip_special_tokens, char **out_text);
VLLMC_API void vllmc_text_free(char *text); // NULL is a no-op

// The model's chat template (Jinja source), or NULL when it has none. Valid
// until vllmc_engine_free().
VLLMC_API const char *vllmc_engine_chat_template(const struct vllmc_engine *engine);
// Special tokens: ids (-1 when absent) and their text (NULL when absent). Text
// valid until vllmc_engine_free().
VLLMC_API int32_t vllmc_engine_bos_id(const struct vllmc_engine *engine);
VLLMC_API int32_t vllmc_engine_eos_id(const struct vllmc_engine *engine);
VLLMC_API const char *vllmc_engine_token_text(const struct vllmc_engine *engine, int32_t id);
VLLMC_API int vllmc_engine_vocab_size(const struct vllmc_engine *engine);
VLLMC_API int vllmc_engine_max_model_len(const struct vllmc_engine *engine);
// The model name for listings (the file or folder name), valid until vllmc_engine_free().
VLLMC_API const char *vllmc_engine_model_name(const struct vllmc_engine *engine);

#ifdef __cplusplus
}
#endif
#endif // VLLMC_H
