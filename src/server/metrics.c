// Prometheus text exposition of vLLM's metric names and histogram buckets.
#include "server/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"

// Bucket bounds are vLLM's (vllm/v1/metrics/loggers.py), so quantiles computed
// by existing dashboards line up.
static const double ttft_buckets[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                      0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                      20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double itl_buckets[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                     0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                     7.5,  10.0,  20.0, 40.0,  80.0};
static const double request_buckets[] = {0.3,  0.5,  0.8,   1.0,   1.5,   2.0,   2.5,
                                         5.0,  10.0, 15.0,  20.0,  30.0,  40.0,  50.0,
                                         60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

#define MAX_BUCKETS 24
#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

struct histogram {
    const char *name;
    const char *help;
    const double *bounds;
    size_t n_bounds;
    uint64_t counts[MAX_BUCKETS + 1]; // per bucket (not cumulative); last is +Inf
    double sum;
    uint64_t count;
};

enum { HIST_TTFT, HIST_ITL, HIST_E2E, HIST_QUEUE, HIST_COUNT };

struct metrics {
    pthread_mutex_t lock;
    char *model_name; // owned, label-escaped
    int64_t prompt_tokens;
    int64_t generation_tokens;
    int64_t success[METRICS_FINISH_COUNT];
    int64_t http_by_class[6]; // 1xx..5xx
    struct histogram hist[HIST_COUNT];
};

// Prometheus label values escape backslash, quote and newline.
static char *escape_label(const char *s)
{
    size_t n = strlen(s);
    char *out = mem_alloc(2 * n + 1);
    if (!out)
        return NULL;
    char *p = out;
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') {
            *p++ = '\\';
            *p++ = *s;
        } else if (*s == '\n') {
            *p++ = '\\';
            *p++ = 'n';
        } else {
            *p++ = *s;
        }
    }
    *p = '\0';
    return out;
}

static void histogram_init(struct histogram *h, const char *name, const char *help,
                           const double *bounds, size_t n_bounds)
{
    *h = (struct histogram){.name = name, .help = help, .bounds = bounds, .n_bounds = n_bounds};
}

struct metrics *metrics_create(const char *model_name)
{
    struct metrics *m = mem_calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->model_name = escape_label(model_name);
    if (!m->model_name) {
        mem_free(m);
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    histogram_init(&m->hist[HIST_TTFT], "vllm:time_to_first_token_seconds",
                   "Histogram of time to first token in seconds.", ttft_buckets,
                   COUNT_OF(ttft_buckets));
    histogram_init(&m->hist[HIST_ITL], "vllm:inter_token_latency_seconds",
                   "Histogram of inter-token latency in seconds.", itl_buckets,
                   COUNT_OF(itl_buckets));
    histogram_init(&m->hist[HIST_E2E], "vllm:e2e_request_latency_seconds",
                   "Histogram of e2e request latency in seconds.", request_buckets,
                   COUNT_OF(request_buckets));
    histogram_init(&m->hist[HIST_QUEUE], "vllm:request_queue_time_seconds",
                   "Histogram of time spent in WAITING phase for request.", request_buckets,
                   COUNT_OF(request_buckets));
    return m;
}

void metrics_free(struct metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->lock);
    mem_free(m->model_name);
    mem_free(m);
}

static void histogram_observe(struct histogram *h, double v)
{
    if (v < 0)
        return;
    size_t i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void metrics_observe_request(struct metrics *m, enum metrics_finish finish, int64_t prompt_tokens,
                             int64_t generation_tokens, double queue_s, double ttft_s,
                             double e2e_s)
{
    pthread_mutex_lock(&m->lock);
    m->success[finish]++;
    m->prompt_tokens += prompt_tokens;
    m->generation_tokens += generation_tokens;
    histogram_observe(&m->hist[HIST_QUEUE], queue_s);
    histogram_observe(&m->hist[HIST_TTFT], ttft_s);
    histogram_observe(&m->hist[HIST_E2E], e2e_s);
    pthread_mutex_unlock(&m->lock);
}

void metrics_observe_inter_token(struct metrics *m, double seconds)
{
    pthread_mutex_lock(&m->lock);
    histogram_observe(&m->hist[HIST_ITL], seconds);
    pthread_mutex_unlock(&m->lock);
}

void metrics_count_http(struct metrics *m, int status)
{
    int cls = status / 100;
    if (cls < 1 || cls > 5)
        return;
    pthread_mutex_lock(&m->lock);
    m->http_by_class[cls]++;
    pthread_mutex_unlock(&m->lock);
}

// ---- rendering into a growing buffer ----

struct text {
    char *buf;
    size_t len, cap;
    bool failed;
};

static void text_printf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void text_printf(struct text *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = 2 * t->cap + (size_t)n;
        char *b = mem_realloc(t->buf, cap);
        if (!b) {
            t->failed = true;
            return;
        }
        t->buf = b;
        t->cap = cap;
    }
}

static void render_scalar(struct text *t, const struct metrics *m, const char *type,
                          const char *name, const char *help, double v)
{
    text_printf(t, "# HELP %s %s\n# TYPE %s %s\n%s{model_name=\"%s\"} %.17g\n", name, help, name,
                type, name, m->model_name, v);
}

static void render_histogram(struct text *t, const struct metrics *m, const struct histogram *h)
{
    text_printf(t, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
    uint64_t cum = 0;
    for (size_t i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        text_printf(t, "%s_bucket{le=\"%g\",model_name=\"%s\"} %llu\n", h->name, h->bounds[i],
                    m->model_name, (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    text_printf(t, "%s_bucket{le=\"+Inf\",model_name=\"%s\"} %llu\n", h->name, m->model_name,
                (unsigned long long)cum);
    text_printf(t, "%s_sum{model_name=\"%s\"} %.17g\n", h->name, m->model_name, h->sum);
    text_printf(t, "%s_count{model_name=\"%s\"} %llu\n", h->name, m->model_name,
                (unsigned long long)h->count);
}

char *metrics_render(struct metrics *m, const struct metrics_engine_snapshot *s)
{
    struct text t = {.buf = mem_alloc(8192), .cap = 8192};
    if (!t.buf)
        return NULL;
    t.buf[0] = '\0';
    pthread_mutex_lock(&m->lock);
    render_scalar(&t, m, "gauge", "vllm:num_requests_running",
                  "Number of requests in model execution batches.", (double)s->n_running);
    render_scalar(&t, m, "gauge", "vllm:num_requests_waiting",
                  "Number of requests waiting to be processed.", (double)s->n_waiting);
    render_scalar(&t, m, "gauge", "vllm:kv_cache_usage_perc",
                  "KV-cache usage. 1 means 100 percent usage.", s->kv_cache_usage);
    render_scalar(&t, m, "counter", "vllm:num_preemptions_total",
                  "Cumulative number of preemption from the engine.", (double)s->n_preemptions);
    render_scalar(&t, m, "counter", "vllm:prefix_cache_queries_total",
                  "Prefix cache queries, in terms of number of queried tokens.",
                  (double)s->prefix_cache_queries);
    render_scalar(&t, m, "counter", "vllm:prefix_cache_hits_total",
                  "Prefix cache hits, in terms of number of cached tokens.",
                  (double)s->prefix_cache_hits);
    render_scalar(&t, m, "counter", "vllm:prompt_tokens_total",
                  "Number of prefill tokens processed.", (double)m->prompt_tokens);
    render_scalar(&t, m, "counter", "vllm:generation_tokens_total",
                  "Number of generation tokens processed.", (double)m->generation_tokens);
    static const char *const reasons[METRICS_FINISH_COUNT] = {"stop", "length", "abort"};
    text_printf(&t, "# HELP vllm:request_success_total Count of successfully processed "
                    "requests.\n# TYPE vllm:request_success_total counter\n");
    for (int i = 0; i < METRICS_FINISH_COUNT; i++)
        text_printf(&t, "vllm:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} "
                        "%lld\n",
                    reasons[i], m->model_name, (long long)m->success[i]);
    for (int i = 0; i < HIST_COUNT; i++)
        render_histogram(&t, m, &m->hist[i]);
    text_printf(&t, "# HELP vllmc:http_responses_total HTTP responses by status class.\n"
                    "# TYPE vllmc:http_responses_total counter\n");
    for (int c = 1; c <= 5; c++)
        text_printf(&t, "vllmc:http_responses_total{status=\"%dxx\"} %lld\n", c,
                    (long long)m->http_by_class[c]);
    pthread_mutex_unlock(&m->lock);
    if (t.failed) {
        mem_free(t.buf);
        return NULL;
    }
    return t.buf;
}
