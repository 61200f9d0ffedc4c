// Metrics: vLLM's names, the model_name label, cumulative histogram buckets.
#include "check.h"
#include "core/alloc.h"
#include "server/metrics.h"

static void test_render(void)
{
    struct metrics *m = metrics_create("stories\"260K");
    CHECK(m != NULL);
    metrics_observe_request(m, METRICS_FINISH_STOP, 5, 10, 0.001, 0.03, 0.9);
    metrics_observe_request(m, METRICS_FINISH_LENGTH, 7, 16, 0.002, 3.0, 12.0);
    metrics_observe_inter_token(m, 0.02);
    struct metrics_engine_snapshot s = {.n_running = 2, .n_waiting = 3, .kv_cache_usage = 0.25,
                                        .n_preemptions = 1, .prefix_cache_queries = 64,
                                        .prefix_cache_hits = 32};
    char *text = metrics_render(m, &s);
    CHECK(text != NULL);
    const char *expect[] = {
        "vllm:num_requests_running{model_name=\"stories\\\"260K\"} 2\n",
        "vllm:num_requests_waiting{model_name=\"stories\\\"260K\"} 3\n",
        "vllm:kv_cache_usage_perc{model_name=\"stories\\\"260K\"} 0.25\n",
        "vllm:num_preemptions_total{model_name=\"stories\\\"260K\"} 1\n",
        "vllm:prefix_cache_queries_total{model_name=\"stories\\\"260K\"} 64\n",
        "vllm:prefix_cache_hits_total{model_name=\"stories\\\"260K\"} 32\n",
        "vllm:prompt_tokens_total{model_name=\"stories\\\"260K\"} 12\n",
        "vllm:generation_tokens_total{model_name=\"stories\\\"260K\"} 26\n",
        "vllm:request_success_total{finished_reason=\"stop\",model_name=\"stories\\\"260K\"} 1\n",
        "vllm:request_success_total{finished_reason=\"length\",model_name=\"stories\\\"260K\"} 1\n",
        "# TYPE vllm:time_to_first_token_seconds histogram\n",
        // 0.03 falls in le=0.04; 3.0 in le=5: cumulative counts 1 then 2.
        "vllm:time_to_first_token_seconds_bucket{le=\"0.02\",model_name=\"stories\\\"260K\"} 0\n",
        "vllm:time_to_first_token_seconds_bucket{le=\"0.04\",model_name=\"stories\\\"260K\"} 1\n",
        "vllm:time_to_first_token_seconds_bucket{le=\"2.5\",model_name=\"stories\\\"260K\"} 1\n",
        "vllm:time_to_first_token_seconds_bucket{le=\"5\",model_name=\"stories\\\"260K\"} 2\n",
        "vllm:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"stories\\\"260K\"} 2\n",
        "vllm:time_to_first_token_seconds_count{model_name=\"stories\\\"260K\"} 2\n",
        "vllm:inter_token_latency_seconds_bucket{le=\"0.025\",model_name=\"stories\\\"260K\"} 1\n",
        "vllm:e2e_request_latency_seconds_bucket{le=\"1\",model_name=\"stories\\\"260K\"} 1\n",
        "vllm:e2e_request_latency_seconds_bucket{le=\"15\",model_name=\"stories\\\"260K\"} 2\n",
        "vllm:request_queue_time_seconds_count{model_name=\"stories\\\"260K\"} 2\n",
    };
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++)
        if (!strstr(text, expect[i])) {
            fprintf(stderr, "missing: %s", expect[i]);
            CHECK(0);
        }
    mem_free(text);
    metrics_free(m);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"render", test_render},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
