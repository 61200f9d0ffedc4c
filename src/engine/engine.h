// The engine behind include/vllmc.h: one engine thread owns the model, the KV
// cache, the scheduler and every request's tokens; client threads only queue
// new requests, raise abort flags and read their requests' output queues.
//
// Locks: engine->mu guards the inbox, the wake-up flags and the stats
// snapshot; request->mu guards that request's output queue and its link to
// the engine. A thread holding request->mu may take engine->mu, never the
// reverse, and the engine thread takes each one alone.
#ifndef VLLMC_ENGINE_ENGINE_H
#define VLLMC_ENGINE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>

#include "backend/backend.h"
#include "engine/device_sampler.h"
#include "engine/kv_manager.h"
#include "engine/output.h"
#include "engine/request.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"
#include "vllmc.h"

// Most logprobs (and prompt logprobs) alternatives a request may ask for (vLLM's max_logprobs).
#define ENGINE_MAX_LOGPROBS 20
// Prompt tokens scored for prompt logprobs in one step (each needs a logits row).
#define ENGINE_PROMPT_LOGPROB_TOKENS 128
#define ENGINE_MAX_EXTRA_EOS 16

struct output_node {
    struct output_node *next;
    struct vllmc_output *out; // owned
};

// One of a request's n samples, engine thread only.
struct engine_seq {
    struct request *req; // owned
    struct detok *detok; // owned; NULL without a tokenizer
    struct output_text text;
    bool finished;
};

struct vllmc_request {
    uint64_t id;
    atomic_int n_refs; // the client's handle and the engine's
    atomic_bool abort_requested;
    int n_samples;
    int n_prompt;
    int logprobs;        // k, or -1
    int prompt_logprobs; // k, or -1
    void (*on_output)(void *user_data);
    void *user_data;

    pthread_mutex_t mu; // guards the fields down to `attached`
    pthread_cond_t cv;
    struct output_node *head; // queued outputs, oldest first
    struct output_node *tail;
    bool final_queued;
    bool final_taken;
    bool attached;               // engine still running this request
    struct vllmc_engine *engine; // borrowed while attached

    // Engine thread only.
    struct engine_seq *seqs; // owned [n_samples]
    int n_unfinished;
    int n_completion_tokens;
    int n_cached_tokens;
    int64_t arrival_us;         // clock of the add call
    int64_t first_scheduled_us; // 0 until the first step that runs it
    bool counted_prompt;               // prompt tokens added to the stats
    struct vllmc_logprob *plp;         // owned [n_prompt] prompt logprobs, NULL unless asked
    struct vllmc_top_logprob *plp_top; // owned [n_prompt, prompt_logprobs]
    int n_plp_done;                    // leading entries filled
    bool plp_sent;
    struct vllmc_request *next_inbox;
    int n_inflight; // steps in flight that compute one of its samples
};

// A model step between its launch and the reading of its tokens.
struct engine_inflight {
    int n_reqs; // 0: no step here
    enum vllmc_status status;
    bool decode_only; // every request computes one token
    bool sampled;     // sampling queued: ev_sampling and ev_end recorded
    // Owned arrays of [max_num_seqs] entries, per scheduled request:
    struct request **reqs;              // borrowed requests, in the step's order
    int *n_new;                         // tokens computed
    int *row_first;                     // its first logits row
    int *n_rows;                        // its logits rows
    bool *sample;                       // the step samples it
    int *dev_row;                       // its row in the device sampler, or -1
    int32_t *host_tok;                  // the token sampled on the host, or -1
    struct vllmc_logprob *host_lp;      // its logprobs when asked
    struct vllmc_top_logprob *host_top; // [max_num_seqs, ENGINE_MAX_LOGPROBS]
    // Owned: the forward pass runs from ev_start to ev_forwarded, sampling
    // from ev_sampling to ev_end (after the copy of the results).
    struct backend_event *ev_start, *ev_forwarded, *ev_sampling, *ev_end;
    double t_schedule_s, t_prepare_s, t_forward_s, t_sample_s; // engine thread
};

struct vllmc_engine {
    struct vllmc_engine_params params; // strings point into the copies below
    char *model_path;                  // owned
    char *model_name;                  // owned
    char *token_texts;                 // owned: every token's vocabulary string, NUL-terminated
    size_t *token_text_off;            // owned [n_vocab]: offsets into token_texts
    struct backend *be;                // owned
    struct model *model;               // owned
    struct tokenizer *tok;             // owned; NULL when the model has none
    struct kv_cache *kv;               // owned
    struct kv_manager *km;             // owned
    struct scheduler *sched;           // owned
    struct sampler *sampler;           // owned
    struct runner *runner;             // owned
    struct device_sampler *dsampler;   // owned; NULL when sampling runs on the host
    int max_model_len;
    int block_size;
    int n_vocab;
    int32_t eos_id;

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu; // guards the fields down to `stats`
    pthread_cond_t cv;
    struct vllmc_request *inbox_head; // new requests, in submission order
    struct vllmc_request *inbox_tail;
    bool abort_pending; // some request's abort flag went up
    bool stop;
    bool closed; // no more requests accepted
    uint64_t next_id;
    struct vllmc_engine_stats stats;

    // Engine thread only.
    struct vllmc_request **live; // owned array of admitted, unfinished requests
    int n_live;
    int cap_live;
    uint64_t next_arrival;
    struct vllmc_top_logprob *lp_scratch; // owned [ENGINE_MAX_LOGPROBS]
    struct engine_counters {
        int64_t n_prompt_tokens;
        int64_t n_generation_tokens;
        int64_t n_finished;
        int64_t n_steps;
        int64_t n_async_steps;
        int64_t n_decode_steps;
        double decode_schedule_s, decode_prepare_s, decode_forward_s, decode_output_s;
        int64_t host_us;     // step time on the engine thread, less device waits
        int64_t wait_us;     // waiting for the device's results
        int64_t idle_us;     // device time with nothing queued between and within steps
        int64_t n_idle;      // steps measured in idle_us
        // Device time of decode-only steps: forward pass, sampling.
        int64_t n_decode_device;
        double decode_device_forward_s, decode_device_sample_s;
        double decode_cpu_s;
    } counters;
    // Steps in flight (see engine_step.c): steps[step_cur] is the one whose
    // tokens come next; with asynchronous scheduling the other may be
    // launched before it is read.
    bool async_scheduling;
    struct engine_inflight steps[2];
    int step_cur;
    bool prev_end_valid; // the other step's end event times a back-to-back step
};

// The engine thread's body (engine_step.c).
void *engine_thread_main(void *arg);

// Drops one reference to a request; the last one frees it.
void engine_request_unref(struct vllmc_request *h);
// Frees the engine-thread state of a request (its samples).
void engine_request_free_seqs(struct vllmc_request *h);

// Records the detail of a failed call for vllmc_last_error() of this thread.
void engine_set_last_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
