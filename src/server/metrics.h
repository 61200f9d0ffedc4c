// Prometheus metrics with vLLM's names, so existing vLLM dashboards work.
// Counters and histograms are fed by the server threads as requests finish;
// gauges (running, waiting, KV usage, preemptions, prefix cache) are read from
// the engine's stats when /metrics is scraped. Thread-safe.
#ifndef VLLMC_SERVER_METRICS_H
#define VLLMC_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct metrics;

// Gauges and engine-side counters, copied from the engine at scrape time.
struct metrics_engine_snapshot {
    int64_t n_running;
    int64_t n_waiting;
    double kv_cache_usage;        // 0..1
    int64_t n_preemptions;
    int64_t prefix_cache_queries; // tokens looked up
    int64_t prefix_cache_hits;    // tokens found
};

enum metrics_finish { METRICS_FINISH_STOP, METRICS_FINISH_LENGTH, METRICS_FINISH_ABORT,
                      METRICS_FINISH_COUNT };

// model_name is copied. NULL on allocation failure.
struct metrics *metrics_create(const char *model_name);
void metrics_free(struct metrics *m);

// One finished request: its token counts and latencies in seconds (negative
// latencies are not observed, e.g. no first token).
void metrics_observe_request(struct metrics *m, enum metrics_finish finish, int64_t prompt_tokens,
                             int64_t generation_tokens, double queue_s, double ttft_s,
                             double e2e_s);
void metrics_observe_inter_token(struct metrics *m, double seconds);
void metrics_count_http(struct metrics *m, int status);

// Renders the text exposition format (version 0.0.4). Owned string; mem_free().
char *metrics_render(struct metrics *m, const struct metrics_engine_snapshot *s);

#endif
