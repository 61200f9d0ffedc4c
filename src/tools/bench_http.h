// HTTP client side of `vllmc bench serve` (libcurl): one streaming OpenAI
// completion with the per-chunk timestamps vLLM's benchmark records, and the
// plain GET/POST the set-up needs. Blocking calls; one per thread at a time.
#ifndef VLLMC_TOOLS_BENCH_HTTP_H
#define VLLMC_TOOLS_BENCH_HTTP_H

#include <stdbool.h>
#include <stddef.h>

// What one streamed request gave, with vLLM's definitions: ttft is from
// sending to the first chunk that carries choices, each later such chunk adds
// one inter-token latency, latency ends at the last such chunk.
struct bench_http_result {
    bool success;
    double start_s;        // time_now_s() when the request was sent
    double ttft_s;
    double latency_s;
    double *itl_s;         // owned, [n_itl]
    int n_itl;
    int cap_itl;
    int prompt_tokens;     // from the usage chunk; -1 when the server sent none
    int output_tokens;     // from the usage chunk; -1 when the server sent none
    int n_chunks;          // chunks that carried choices
    char *text;            // owned: the generated text
    size_t text_len;
    char error[256];
};

void bench_http_result_deinit(struct bench_http_result *r);

// Process-wide set-up and tear-down of libcurl; call once from main.
int bench_http_global_init(void);
void bench_http_global_cleanup(void);

// POSTs body (JSON, stream: true) to url and reads the Server-Sent Events.
// api_key may be NULL. *r is filled in every case.
void bench_http_stream(const char *url, const char *api_key, const char *body,
                       struct bench_http_result *r);

// GET (body NULL) or POST (JSON body) with the whole response in *out
// (mem_free); *status the HTTP status. 0 on a transfer that completed.
int bench_http_request(const char *url, const char *api_key, const char *body, long *status,
                       char **out, size_t *out_len);

#endif
