// `vllmc bench serve`: the online serving benchmark of `vllm bench serve`
// against any OpenAI-compatible server. Random-dataset prompts are sent as
// token ids to /v1/completions with streaming; TTFT, TPOT, ITL and E2EL follow
// vLLM's definitions and the summary prints in vLLM's layout. One client
// thread per concurrent request; arrivals follow a Poisson process at
// --request-rate (all at once for inf, the default).
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "tools/bench_http.h"
#include "tools/bench_stats.h"
#include "tools/cli.h"

#define SERVE_MAX_THREADS 1024
#define SERVE_MAX_PERCENTILES 16

struct serve_opts {
    const char *base_url;
    const char *host;
    long port;
    const char *endpoint;
    const char *model;          // NULL: the first model of GET /v1/models
    const char *served_name;    // the "model" field sent; default model
    const char *dataset;
    long input_len;
    long output_len;
    double range_ratio;
    long prefix_len;
    long vocab_size;            // 0: probe the server
    long num_prompts;
    long max_concurrency;       // 0 = unlimited
    double request_rate;        // INFINITY = all at time 0
    long num_warmups;
    bool ignore_eos;
    double temperature;
    long seed;
    const char *percentile_metrics;
    const char *metric_percentiles;
    bool save_result;
    bool save_detailed;
    const char *result_dir;
    const char *result_filename;
    const char *label;
    bool disable_tqdm;
};

struct serve_request {
    int32_t *ids;               // owned prompt, [prompt_len]
    int prompt_len;
    int output_len;
    double arrival_s;           // offset from the benchmark start
    char *body;                 // owned JSON
    struct bench_http_result res;
};

struct serve {
    struct serve_opts o;
    char url[1024];             // the completions URL
    char base[1024];
    const char *api_key;
    char model_id[512];
    struct serve_request *reqs; // owned, [num_prompts]
    int n_reqs;
    double percentiles[SERVE_MAX_PERCENTILES];
    int n_percentiles;
    bool metric_on[4];          // ttft, tpot, itl, e2el
    // Run state shared by the client threads.
    pthread_mutex_t mu;
    int next;                   // next request index to take
    int n_done;
    double t0;
    bool tty;
};

enum { SERVE_TTFT, SERVE_TPOT, SERVE_ITL, SERVE_E2EL };
static const char *const serve_metric_keys[4] = {"ttft", "tpot", "itl", "e2el"};
static const char *const serve_metric_names[4] = {"TTFT", "TPOT", "ITL", "E2EL"};
static const char *const serve_metric_headers[4] = {
    "Time to First Token", "Time per Output Token (excl. 1st token)", "Inter-token Latency",
    "End-to-end Latency"};

static void serve_usage(FILE *f)
{
    fprintf(f,
            "usage: vllmc bench serve [options]   (the options and output of vllm bench serve)\n"
            "  --base-url URL               server base URL (default http://HOST:PORT)\n"
            "  --host H / --port P          (default 127.0.0.1:8000)\n"
            "  --endpoint PATH              (default /v1/completions)\n"
            "  --model NAME                 model name (default: first of GET /v1/models)\n"
            "  --served-model-name NAME     name sent in requests (default --model)\n"
            "  --dataset-name random        the only dataset: random token ids\n"
            "  --random-input-len N         (default 1024)\n"
            "  --random-output-len N        (default 128)\n"
            "  --random-range-ratio R       lengths uniform in [L(1-R), L(1+R)] (default 0)\n"
            "  --random-prefix-len N        shared prefix tokens (default 0)\n"
            "  --random-vocab-size N        token ids drawn below N (default: probed on the server)\n"
            "  --input-len / --output-len   the same as --random-input-len / -output-len\n"
            "  --num-prompts N              (default 1000)\n"
            "  --max-concurrency N          requests in flight at most (default unlimited)\n"
            "  --request-rate R             requests/s, Poisson arrivals; inf = all at once "
            "(default)\n"
            "  --num-warmups N              warm-up requests before the run (default 0)\n"
            "  --ignore-eos                 generate exactly the output length\n"
            "  --temperature T              (default 0, greedy)\n"
            "  --seed S                     dataset and arrival seed (default 0)\n"
            "  --percentile-metrics LIST    of ttft,tpot,itl,e2el (default ttft,tpot,itl)\n"
            "  --metric-percentiles LIST    e.g. 50,90,99 (default 99)\n"
            "  --save-result                write the result as JSON\n"
            "  --save-detailed              include per-request arrays in it\n"
            "  --result-dir DIR / --result-filename NAME / --label LABEL\n"
            "  --disable-tqdm               no progress bar\n"
            "The API key comes from OPENAI_API_KEY, as in vLLM.\n");
}

static int serve_parse(struct serve_opts *o, int argc, char **argv)
{
    *o = (struct serve_opts){.host = "127.0.0.1", .port = 8000, .endpoint = "/v1/completions",
                             .dataset = "random", .input_len = 1024, .output_len = 128,
                             .num_prompts = 1000, .request_rate = INFINITY,
                             .percentile_metrics = "ttft,tpot,itl", .metric_percentiles = "99",
                             .label = "openai"};
    static const char *const flags[] = {"--ignore-eos", "--save-result", "--save-detailed",
                                        "--disable-tqdm"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        bool ok = true, flag = false;
        for (size_t k = 0; k < sizeof(flags) / sizeof(flags[0]); k++)
            flag |= !strcmp(a, flags[k]);
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage(stdout);
            return -1;
        } else if (flag) {
            if (!strcmp(a, "--ignore-eos"))
                o->ignore_eos = true;
            else if (!strcmp(a, "--save-result"))
                o->save_result = true;
            else if (!strcmp(a, "--save-detailed"))
                o->save_detailed = true;
            else
                o->disable_tqdm = true;
            continue;
        } else if (cli_opt(argc, argv, &i, "--base-url", NULL, &v)) {
            o->base_url = v;
        } else if (cli_opt(argc, argv, &i, "--host", NULL, &v)) {
            o->host = v;
        } else if (cli_opt(argc, argv, &i, "--port", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, 65535, &o->port);
        } else if (cli_opt(argc, argv, &i, "--endpoint", NULL, &v)) {
            o->endpoint = v;
        } else if (cli_opt(argc, argv, &i, "--model", NULL, &v)) {
            o->model = v;
        } else if (cli_opt(argc, argv, &i, "--served-model-name", NULL, &v)) {
            o->served_name = v;
        } else if (cli_opt(argc, argv, &i, "--dataset-name", NULL, &v)) {
            o->dataset = v;
            if (v && strcmp(v, "random")) {
                fprintf(stderr, "vllmc bench serve: dataset '%s' is not supported (random)\n", v);
                return 2;
            }
        } else if (cli_opt(argc, argv, &i, "--random-input-len", "--input-len", &v)) {
            ok = v && cli_parse_int(a, v, 1, 1 << 24, &o->input_len);
        } else if (cli_opt(argc, argv, &i, "--random-output-len", "--output-len", &v)) {
            ok = v && cli_parse_int(a, v, 1, 1 << 24, &o->output_len);
        } else if (cli_opt(argc, argv, &i, "--random-range-ratio", NULL, &v)) {
            ok = v && cli_parse_float_in(a, v, 0, 1, CLI_OPEN_HI, &o->range_ratio);
        } else if (cli_opt(argc, argv, &i, "--random-prefix-len", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 0, 1 << 24, &o->prefix_len);
        } else if (cli_opt(argc, argv, &i, "--random-vocab-size", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, 1L << 30, &o->vocab_size);
        } else if (cli_opt(argc, argv, &i, "--num-prompts", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, 1 << 24, &o->num_prompts);
        } else if (cli_opt(argc, argv, &i, "--max-concurrency", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, 1 << 24, &o->max_concurrency);
        } else if (cli_opt(argc, argv, &i, "--request-rate", NULL, &v)) {
            if (v && (!strcmp(v, "inf") || !strcmp(v, "Infinity")))
                o->request_rate = INFINITY;
            else
                ok = v && cli_parse_float_in(a, v, 0, INFINITY, CLI_OPEN_LO, &o->request_rate);
        } else if (cli_opt(argc, argv, &i, "--num-warmups", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 0, 1 << 20, &o->num_warmups);
        } else if (cli_opt(argc, argv, &i, "--temperature", NULL, &v)) {
            ok = v && cli_parse_float_in(a, v, 0, INFINITY, CLI_CLOSED, &o->temperature);
        } else if (cli_opt(argc, argv, &i, "--seed", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 0, 0x7fffffffL, &o->seed);
        } else if (cli_opt(argc, argv, &i, "--percentile-metrics", NULL, &v)) {
            o->percentile_metrics = v;
        } else if (cli_opt(argc, argv, &i, "--metric-percentiles", NULL, &v)) {
            o->metric_percentiles = v;
        } else if (cli_opt(argc, argv, &i, "--result-dir", NULL, &v)) {
            o->result_dir = v;
        } else if (cli_opt(argc, argv, &i, "--result-filename", NULL, &v)) {
            o->result_filename = v;
        } else if (cli_opt(argc, argv, &i, "--label", NULL, &v)) {
            o->label = v;
        } else {
            fprintf(stderr, "vllmc bench serve: unknown option '%s'\n", a);
            serve_usage(stderr);
            return 2;
        }
        if (!ok || !v) {
            if (v)
                fprintf(stderr, "vllmc bench serve: bad value for %s: '%s'\n", a, v);
            return 2;
        }
    }
    return 0;
}

static int serve_parse_lists(struct serve *s)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s->o.percentile_metrics);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < 4 && strcmp(t, serve_metric_keys[k]))
            k++;
        if (k == 4) {
            fprintf(stderr, "vllmc bench serve: unknown metric '%s' (ttft, tpot, itl, e2el)\n", t);
            return 2;
        }
        s->metric_on[k] = true;
    }
    snprintf(buf, sizeof(buf), "%s", s->o.metric_percentiles);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        double p;
        if (s->n_percentiles == SERVE_MAX_PERCENTILES || !cli_parse_float("--metric-percentiles",
                                                                          t, &p) ||
            p < 0 || p > 100) {
            fprintf(stderr, "vllmc bench serve: bad percentile '%s'\n", t);
            return 2;
        }
        s->percentiles[s->n_percentiles++] = p;
    }
    return 0;
}

// ---- the random dataset (vLLM's RandomDataset on token ids) ----

static uint64_t serve_rng;

static uint64_t serve_rand(void)
{
    uint64_t z = (serve_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double serve_uniform(void)
{
    return (double)(serve_rand() >> 11) * 0x1.0p-53;
}

// An integer uniform in [lo, hi].
static long serve_randint(long lo, long hi)
{
    return hi <= lo ? lo : lo + (long)(serve_rand() % (uint64_t)(hi - lo + 1));
}

static int serve_build_body(struct serve *s, struct serve_request *r)
{
    json_t *o = json_object();
    json_t *prompt = json_array();
    for (int i = 0; i < r->prompt_len; i++)
        json_array_append_new(prompt, json_integer(r->ids[i]));
    json_object_set_new(o, "model", json_string(s->o.served_name ? s->o.served_name
                                                                 : s->model_id));
    json_object_set_new(o, "prompt", prompt);
    json_object_set_new(o, "repetition_penalty", json_real(1.0));
    json_object_set_new(o, "max_tokens", json_integer(r->output_len));
    json_object_set_new(o, "temperature", json_real(s->o.temperature));
    json_object_set_new(o, "stream", json_true());
    json_t *so = json_object();
    json_object_set_new(so, "include_usage", json_true());
    json_object_set_new(o, "stream_options", so);
    if (s->o.ignore_eos)
        json_object_set_new(o, "ignore_eos", json_true());
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!text)
        return 1;
    r->body = mem_strdup(text);
    free(text); // jansson's allocation
    return r->body ? 0 : 1;
}

static int serve_make_dataset(struct serve *s)
{
    const struct serve_opts *o = &s->o;
    serve_rng = (uint64_t)o->seed;
    long in_lo = (long)floor((double)o->input_len * (1 - o->range_ratio));
    long in_hi = (long)ceil((double)o->input_len * (1 + o->range_ratio));
    long out_lo = (long)floor((double)o->output_len * (1 - o->range_ratio));
    long out_hi = (long)ceil((double)o->output_len * (1 + o->range_ratio));
    in_lo = in_lo < 0 ? 0 : in_lo;
    out_lo = out_lo < 1 ? 1 : out_lo;
    long vocab = o->vocab_size;
    int32_t *prefix = mem_alloc((size_t)(o->prefix_len + 1) * sizeof(*prefix));
    s->reqs = mem_calloc((size_t)o->num_prompts, sizeof(*s->reqs));
    if (!prefix || !s->reqs) {
        mem_free(prefix);
        return 1;
    }
    for (long i = 0; i < o->prefix_len; i++)
        prefix[i] = (int32_t)serve_randint(0, vocab - 1);
    double t = 0;
    for (long i = 0; i < o->num_prompts; i++) {
        struct serve_request *r = &s->reqs[i];
        long in_len = serve_randint(in_lo, in_hi), out_len = serve_randint(out_lo, out_hi);
        long offset = serve_randint(0, vocab - 1);
        r->prompt_len = (int)(o->prefix_len + in_len);
        r->output_len = (int)out_len;
        r->ids = mem_alloc((size_t)(r->prompt_len + 1) * sizeof(*r->ids));
        if (!r->ids) {
            mem_free(prefix);
            return 1;
        }
        memcpy(r->ids, prefix, (size_t)o->prefix_len * sizeof(*prefix));
        // As vLLM: consecutive ids from a random offset, shifted by the index.
        for (long j = 0; j < in_len; j++)
            r->ids[o->prefix_len + j] = (int32_t)((offset + i + j) % vocab);
        if (isfinite(o->request_rate)) {
            // Exponential inter-arrival times: a Poisson process.
            t += -log(1.0 - serve_uniform()) / o->request_rate;
            r->arrival_s = t;
        }
        if (serve_build_body(s, r)) {
            mem_free(prefix);
            return 1;
        }
    }
    s->n_reqs = (int)o->num_prompts;
    mem_free(prefix);
    return 0;
}

// ---- talking to the server ----

// One blocking completion of prompt [id] with max_tokens 1: true when accepted.
static bool serve_id_ok(struct serve *s, long id)
{
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"prompt\":[%ld],\"max_tokens\":1,\"temperature\":0}",
             s->o.served_name ? s->o.served_name : s->model_id, id);
    long status;
    char *out;
    size_t n;
    if (bench_http_request(s->url, s->api_key, body, &status, &out, &n))
        return false;
    mem_free(out);
    return status == 200;
}

// The vocabulary size, found as the first token id the server refuses
// (exponential then binary search; about 2 log2(vocab) one-token requests).
static int serve_probe_vocab(struct serve *s)
{
    if (!serve_id_ok(s, 0)) {
        fprintf(stderr, "vllmc bench serve: the server refuses the prompt [0]; give "
                        "--random-vocab-size\n");
        return 1;
    }
    long lo = 0, hi = 1; // lo accepted, hi refused (once found)
    while (hi < (1L << 30) && serve_id_ok(s, hi)) {
        lo = hi;
        hi *= 2;
    }
    while (hi - lo > 1) {
        long mid = lo + (hi - lo) / 2;
        if (serve_id_ok(s, mid))
            lo = mid;
        else
            hi = mid;
    }
    s->o.vocab_size = lo + 1;
    printf("Vocabulary size (probed): %ld\n", s->o.vocab_size);
    return 0;
}

static int serve_first_model(struct serve *s)
{
    char url[1100];
    snprintf(url, sizeof(url), "%s/v1/models", s->base);
    long status;
    char *out = NULL;
    size_t n;
    if (bench_http_request(url, s->api_key, NULL, &status, &out, &n) || status != 200) {
        fprintf(stderr, "vllmc bench serve: failed to fetch models from %s (HTTP %ld); is the "
                        "server running?\n", url, status);
        mem_free(out);
        return 1;
    }
    json_t *o = json_loadb(out, n, 0, NULL);
    json_t *id = json_object_get(json_array_get(json_object_get(o, "data"), 0), "id");
    int rc = 0;
    if (json_is_string(id)) {
        snprintf(s->model_id, sizeof(s->model_id), "%s", json_string_value(id));
    } else {
        fprintf(stderr, "vllmc bench serve: no models found on the server at %s\n", s->base);
        rc = 1;
    }
    json_decref(o);
    mem_free(out);
    return rc;
}

// ---- the run ----

static void serve_progress(struct serve *s, int done, int total)
{
    if (!s->tty || s->o.disable_tqdm)
        return;
    double el = time_now_s() - s->t0;
    double rate = el > 0 ? done / el : 0;
    int width = 40, fill = total ? done * width / total : width;
    char bar[3 * 40 + 1];
    size_t k = 0;
    for (int i = 0; i < width; i++) {
        const char *c = i < fill ? "\xe2\x96\x88" : " "; // U+2588 full block
        size_t cl = strlen(c);
        memcpy(bar + k, c, cl);
        k += cl;
    }
    bar[k] = '\0';
    double eta = rate > 0 ? (total - done) / rate : 0;
    fprintf(stderr, "\r%3d%%|%s| %d/%d [%02d:%02d<%02d:%02d, %.2fit/s]",
            total ? 100 * done / total : 100, bar, done, total, (int)el / 60, (int)el % 60,
            (int)eta / 60, (int)eta % 60, rate);
    if (done == total)
        fprintf(stderr, "\n");
    fflush(stderr);
}

static void serve_sleep_until(double t)
{
    double d = t - time_now_s();
    if (d <= 0)
        return;
    struct timespec ts = {(time_t)d, (long)((d - floor(d)) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

static void *serve_client(void *arg)
{
    struct serve *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int i = s->next < s->n_reqs ? s->next++ : -1;
        pthread_mutex_unlock(&s->mu);
        if (i < 0)
            return NULL;
        struct serve_request *r = &s->reqs[i];
        serve_sleep_until(s->t0 + r->arrival_s);
        bench_http_stream(s->url, s->api_key, r->body, &r->res);
        pthread_mutex_lock(&s->mu);
        int done = ++s->n_done;
        serve_progress(s, done, s->n_reqs);
        pthread_mutex_unlock(&s->mu);
    }
}

// Runs requests [0, n) of reqs with n_threads clients; returns the wall time.
static double serve_run(struct serve *s, struct serve_request *reqs, int n, int n_threads)
{
    struct serve_request *saved = s->reqs;
    int saved_n = s->n_reqs;
    s->reqs = reqs;
    s->n_reqs = n;
    s->next = 0;
    s->n_done = 0;
    pthread_t *tids = mem_calloc((size_t)n_threads, sizeof(*tids));
    int n_started = 0;
    s->t0 = time_now_s();
    for (int i = 0; tids && i < n_threads; i++) {
        if (pthread_create(&tids[i], NULL, serve_client, s))
            break;
        n_started++;
    }
    if (!n_started)
        serve_client(s); // no threads to be had: run them one by one here
    for (int i = 0; i < n_started; i++)
        pthread_join(tids[i], NULL);
    double dur = time_now_s() - s->t0;
    mem_free(tids);
    s->reqs = saved;
    s->n_reqs = saved_n;
    return dur;
}

// ---- metrics and the summary ----

struct serve_metric {
    double *v;    // owned, seconds
    int n;
    double mean, median, std;
    double pct[SERVE_MAX_PERCENTILES];
};

static void serve_metric_finish(struct serve *s, struct serve_metric *m)
{
    struct bench_summary sum;
    bench_summarize(m->v, m->n, &sum);
    m->mean = sum.mean;
    m->median = sum.median;
    // numpy.std: the population deviation.
    m->std = m->n > 1 ? sum.stddev * sqrt((double)(m->n - 1) / m->n) : 0;
    for (int k = 0; k < s->n_percentiles; k++)
        m->pct[k] = bench_percentile(m->v, m->n, s->percentiles[k]);
}

static void serve_pword(double p, char *buf, size_t n)
{
    if ((double)(long)p == p)
        snprintf(buf, n, "%ld", (long)p);
    else
        snprintf(buf, n, "%g", p);
}

static void serve_line_int(const char *label, long v)
{
    printf("%-40s %-10ld\n", label, v);
}

static void serve_line_f(const char *label, double v)
{
    printf("%-40s %-10.2f\n", label, v);
}

static void serve_header(const char *title, char c)
{
    int len = (int)strlen(title), left = (50 - len) / 2, right = 50 - len - left;
    for (int i = 0; i < left; i++)
        putchar(c);
    fputs(title, stdout);
    for (int i = 0; i < right; i++)
        putchar(c);
    putchar('\n');
}

// Python's repr of a float, as vLLM prints rates and names its files: the
// shortest digits that read back the same, "1.0" for whole numbers, "inf".
static void serve_float_repr(double v, char *buf, size_t n)
{
    if (!isfinite(v)) {
        snprintf(buf, n, "inf");
        return;
    }
    // Python's repr: the fewest significant digits that read back as v,
    // written positionally for exponents -4 to 15 ("50.0", "0.25"), else in
    // scientific notation ("1e+16").
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(buf, n, "%.*e", prec - 1, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    const char *e = strchr(buf, 'e');
    int exp10 = e ? atoi(e + 1) : 0;
    if (exp10 < -4 || exp10 >= 16) {
        snprintf(buf, n, "%.*g", prec, v);
        return;
    }
    int decimals = prec - 1 - exp10;
    snprintf(buf, n, "%.*f", decimals > 0 ? decimals : 0, v);
    if (!strchr(buf, '.'))
        snprintf(buf + strlen(buf), n - strlen(buf), ".0");
}

static json_t *serve_json_array(const double *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_real(v[i]));
    return a;
}

static int serve_save(struct serve *s, json_t *result)
{
    char dt[32], name[1024], path[2048];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(dt, sizeof(dt), "%Y%m%d-%H%M%S", &tm);
    json_object_set_new(result, "date", json_string(dt));
    const char *base_model = strrchr(s->model_id, '/') ? strrchr(s->model_id, '/') + 1
                                                       : s->model_id;
    char rate[32], conc[48] = "";
    serve_float_repr(s->o.request_rate, rate, sizeof(rate));
    if (s->o.max_concurrency)
        snprintf(conc, sizeof(conc), "-concurrency%ld", s->o.max_concurrency);
    if (s->o.result_filename)
        snprintf(name, sizeof(name), "%s", s->o.result_filename);
    else
        snprintf(name, sizeof(name), "%s-%sqps%s-%s-%s.json", s->o.label, rate, conc, base_model,
                 dt);
    if (s->o.result_dir) {
        if (mkdir(s->o.result_dir, 0755) && errno != EEXIST) {
            fprintf(stderr, "vllmc bench serve: %s: %s\n", s->o.result_dir, strerror(errno));
            return 1;
        }
        snprintf(path, sizeof(path), "%s/%s", s->o.result_dir, name);
    } else {
        snprintf(path, sizeof(path), "%s", name);
    }
    if (json_dump_file(result, path, JSON_INDENT(2))) {
        fprintf(stderr, "vllmc bench serve: cannot write %s\n", path);
        return 1;
    }
    fprintf(stderr, "vllmc bench serve: result saved to %s\n", path);
    return 0;
}

static int serve_report(struct serve *s, double duration)
{
    int n = s->n_reqs, completed = 0, failed = 0;
    long total_in = 0, total_out = 0;
    struct serve_metric m[4] = {{0}};
    size_t n_itl_all = 0;
    for (int i = 0; i < n; i++)
        n_itl_all += (size_t)s->reqs[i].res.n_itl;
    for (int k = 0; k < 4; k++) {
        m[k].v = mem_alloc((k == SERVE_ITL ? n_itl_all + 1 : (size_t)n + 1) * sizeof(double));
        if (!m[k].v)
            return 1;
    }
    int *out_lens = mem_calloc((size_t)n + 1, sizeof(int));
    if (!out_lens)
        return 1;
    double t_first = INFINITY, t_last = 0;
    for (int i = 0; i < n; i++) {
        const struct bench_http_result *r = &s->reqs[i].res;
        if (!r->success) {
            failed++;
            continue;
        }
        // vLLM counts output tokens from the usage chunk; a server without one
        // gets one token per chunk.
        int out_len = r->output_tokens >= 0 ? r->output_tokens : r->n_chunks;
        out_lens[i] = out_len;
        completed++;
        total_in += r->prompt_tokens >= 0 ? r->prompt_tokens : s->reqs[i].prompt_len;
        total_out += out_len;
        m[SERVE_TTFT].v[m[SERVE_TTFT].n++] = r->ttft_s;
        if (out_len > 1)
            m[SERVE_TPOT].v[m[SERVE_TPOT].n++] = (r->latency_s - r->ttft_s) / (out_len - 1);
        for (int j = 0; j < r->n_itl; j++)
            m[SERVE_ITL].v[m[SERVE_ITL].n++] = r->itl_s[j];
        m[SERVE_E2EL].v[m[SERVE_E2EL].n++] = r->latency_s;
        t_first = r->start_s < t_first ? r->start_s : t_first;
        t_last = r->start_s + r->latency_s > t_last ? r->start_s + r->latency_s : t_last;
    }
    // Peak output tokens in any one-second bucket and peak concurrency (sweep
    // over [start, end) intervals), as vLLM computes them.
    double peak_tps = 0;
    int peak_conc = 0;
    if (completed) {
        int n_buckets = (int)ceil(t_last - t_first) + 1;
        double *buckets = mem_calloc((size_t)n_buckets, sizeof(double));
        for (int i = 0; buckets && i < n; i++) {
            const struct bench_http_result *r = &s->reqs[i].res;
            if (!r->success)
                continue;
            double t = r->start_s + r->ttft_s;
            int b = (int)(t - t_first);
            if (b >= 0 && b < n_buckets)
                buckets[b] += 1;
            for (int j = 0; j < r->n_itl; j++) {
                t += r->itl_s[j];
                b = (int)(t - t_first);
                if (b >= 0 && b < n_buckets)
                    buckets[b] += 1;
            }
        }
        for (int b = 0; buckets && b < n_buckets; b++)
            peak_tps = buckets[b] > peak_tps ? buckets[b] : peak_tps;
        mem_free(buckets);
        for (int i = 0; i < n; i++) {
            const struct bench_http_result *ri = &s->reqs[i].res;
            if (!ri->success)
                continue;
            int c = 0;
            for (int j = 0; j < n; j++) {
                const struct bench_http_result *rj = &s->reqs[j].res;
                if (rj->success && rj->start_s <= ri->start_s &&
                    rj->start_s + rj->latency_s > ri->start_s)
                    c++;
            }
            peak_conc = c > peak_conc ? c : peak_conc;
        }
    }
    if (failed) {
        printf("Failed requests during benchmark run detected (capping to 10):\n");
        for (int i = 0, shown = 0; i < n && shown < 10; i++)
            if (!s->reqs[i].res.success)
                printf("Error %d: %s\n", shown++, s->reqs[i].res.error);
    }
    for (int k = 0; k < 4; k++)
        serve_metric_finish(s, &m[k]);

    serve_header(" Serving Benchmark Result ", '=');
    serve_line_int("Successful requests:", completed);
    serve_line_int("Failed requests:", failed);
    if (s->o.max_concurrency)
        serve_line_int("Maximum request concurrency:", s->o.max_concurrency);
    if (isfinite(s->o.request_rate))
        serve_line_f("Request rate configured (RPS):", s->o.request_rate);
    serve_line_f("Benchmark duration (s):", duration);
    serve_line_int("Total input tokens:", total_in);
    serve_line_int("Total generated tokens:", total_out);
    serve_line_f("Request throughput (req/s):", completed / duration);
    serve_line_f("Output token throughput (tok/s):", (double)total_out / duration);
    serve_line_f("Peak output token throughput (tok/s):", peak_tps);
    serve_line_f("Peak concurrent requests:", peak_conc);
    serve_line_f("Total token throughput (tok/s):", (double)(total_in + total_out) / duration);

    json_t *res = json_object();
    json_object_set_new(res, "backend", json_string("openai"));
    json_object_set_new(res, "label", json_string(s->o.label));
    json_object_set_new(res, "model_id", json_string(s->model_id));
    json_object_set_new(res, "tokenizer_id", json_null());
    json_object_set_new(res, "num_prompts", json_integer(n));
    json_object_set_new(res, "request_rate", isfinite(s->o.request_rate)
                                                 ? json_real(s->o.request_rate)
                                                 : json_string("inf"));
    json_object_set_new(res, "burstiness", json_real(1.0));
    json_object_set_new(res, "max_concurrency",
                        s->o.max_concurrency ? json_integer(s->o.max_concurrency) : json_null());
    json_object_set_new(res, "duration", json_real(duration));
    json_object_set_new(res, "completed", json_integer(completed));
    json_object_set_new(res, "failed", json_integer(failed));
    json_object_set_new(res, "total_input_tokens", json_integer(total_in));
    json_object_set_new(res, "total_output_tokens", json_integer(total_out));
    json_object_set_new(res, "request_throughput", json_real(completed / duration));
    json_object_set_new(res, "request_goodput", json_null());
    json_object_set_new(res, "output_throughput", json_real((double)total_out / duration));
    json_object_set_new(res, "total_token_throughput",
                        json_real((double)(total_in + total_out) / duration));
    json_object_set_new(res, "max_output_tokens_per_s", json_real(peak_tps));
    json_object_set_new(res, "max_concurrent_requests", json_integer(peak_conc));
    for (int k = 0; k < 4; k++) {
        if (!s->metric_on[k])
            continue;
        char key[64], label[96], pw[32];
        serve_header(serve_metric_headers[k], '-');
        snprintf(label, sizeof(label), "Mean %s (ms):", serve_metric_names[k]);
        serve_line_f(label, m[k].mean * 1e3);
        snprintf(label, sizeof(label), "Median %s (ms):", serve_metric_names[k]);
        serve_line_f(label, m[k].median * 1e3);
        snprintf(key, sizeof(key), "mean_%s_ms", serve_metric_keys[k]);
        json_object_set_new(res, key, json_real(m[k].mean * 1e3));
        snprintf(key, sizeof(key), "median_%s_ms", serve_metric_keys[k]);
        json_object_set_new(res, key, json_real(m[k].median * 1e3));
        snprintf(key, sizeof(key), "std_%s_ms", serve_metric_keys[k]);
        json_object_set_new(res, key, json_real(m[k].std * 1e3));
        for (int p = 0; p < s->n_percentiles; p++) {
            serve_pword(s->percentiles[p], pw, sizeof(pw));
            snprintf(label, sizeof(label), "P%s %s (ms):", pw, serve_metric_names[k]);
            serve_line_f(label, m[k].pct[p] * 1e3);
            snprintf(key, sizeof(key), "p%s_%s_ms", pw, serve_metric_keys[k]);
            json_object_set_new(res, key, json_real(m[k].pct[p] * 1e3));
        }
    }
    for (int i = 0; i < 50; i++)
        putchar('=');
    putchar('\n');
    fflush(stdout);

    int rc = 0;
    if (s->o.save_result || s->o.result_filename) {
        if (s->o.save_detailed) {
            json_t *in_lens = json_array(), *o_lens = json_array(), *ttfts = json_array();
            json_t *itls = json_array(), *lats = json_array(), *texts = json_array();
            json_t *errors = json_array();
            for (int i = 0; i < n; i++) {
                const struct bench_http_result *r = &s->reqs[i].res;
                json_array_append_new(in_lens, json_integer(r->prompt_tokens >= 0
                                                                ? r->prompt_tokens
                                                                : s->reqs[i].prompt_len));
                json_array_append_new(o_lens, json_integer(out_lens[i]));
                json_array_append_new(ttfts, json_real(r->ttft_s));
                json_array_append_new(itls, serve_json_array(r->itl_s, r->n_itl));
                json_array_append_new(lats, json_real(r->latency_s));
                json_array_append_new(texts, json_stringn(r->text ? r->text : "", r->text_len));
                json_array_append_new(errors, json_string(r->error));
            }
            json_object_set_new(res, "input_lens", in_lens);
            json_object_set_new(res, "output_lens", o_lens);
            json_object_set_new(res, "ttfts", ttfts);
            json_object_set_new(res, "itls", itls);
            json_object_set_new(res, "latencies", lats);
            json_object_set_new(res, "generated_texts", texts);
            json_object_set_new(res, "errors", errors);
        }
        rc = serve_save(s, res);
    }
    json_decref(res);
    mem_free(out_lens);
    for (int k = 0; k < 4; k++)
        mem_free(m[k].v);
    return rc;
}

// ---- main ----

static void serve_free(struct serve *s)
{
    for (int i = 0; s->reqs && i < (int)s->o.num_prompts; i++) {
        mem_free(s->reqs[i].ids);
        mem_free(s->reqs[i].body);
        bench_http_result_deinit(&s->reqs[i].res);
    }
    mem_free(s->reqs);
}

static int serve_main_run(struct serve *s)
{
    if (s->o.base_url) {
        snprintf(s->base, sizeof(s->base), "%s", s->o.base_url);
        size_t len = strlen(s->base);
        while (len && s->base[len - 1] == '/')
            s->base[--len] = '\0';
    } else {
        snprintf(s->base, sizeof(s->base), "http://%s:%ld", s->o.host, s->o.port);
    }
    snprintf(s->url, sizeof(s->url), "%s%s", s->base, s->o.endpoint);
    s->api_key = getenv("OPENAI_API_KEY");
    if (s->o.model)
        snprintf(s->model_id, sizeof(s->model_id), "%s", s->o.model);
    else if (serve_first_model(s))
        return 1;
    if (!s->o.vocab_size && serve_probe_vocab(s))
        return 1;
    if (serve_make_dataset(s)) {
        fprintf(stderr, "vllmc bench serve: out of memory\n");
        return 1;
    }
    printf("Starting initial single prompt test run...\n");
    struct serve_request test = s->reqs[0];
    memset(&test.res, 0, sizeof(test.res));
    bench_http_stream(s->url, s->api_key, test.body, &test.res);
    if (!test.res.success) {
        fprintf(stderr,
                "vllmc bench serve: initial test run failed - make sure the benchmark "
                "arguments are correct. Error: %s\n",
                test.res.error);
        bench_http_result_deinit(&test.res);
        return 1;
    }
    bench_http_result_deinit(&test.res);
    printf("Initial test run completed.\n");
    if (s->o.num_warmups > 0) {
        printf("Warming up with %ld requests...\n", s->o.num_warmups);
        fflush(stdout);
        struct serve_request *w = mem_calloc((size_t)s->o.num_warmups, sizeof(*w));
        if (!w)
            return 1;
        for (long i = 0; i < s->o.num_warmups; i++)
            w[i].body = s->reqs[0].body; // borrowed
        long nt = s->o.max_concurrency ? s->o.max_concurrency : s->o.num_warmups;
        serve_run(s, w, (int)s->o.num_warmups, (int)(nt < SERVE_MAX_THREADS ? nt
                                                                             : SERVE_MAX_THREADS));
        for (long i = 0; i < s->o.num_warmups; i++)
            bench_http_result_deinit(&w[i].res);
        mem_free(w);
        printf("Warmup run completed.\n");
    }
    printf("Starting main benchmark run...\n");
    char rate[32];
    serve_float_repr(s->o.request_rate, rate, sizeof(rate));
    printf("Traffic request rate: %s\n", rate);
    printf("Burstiness factor: 1.0 (Poisson process)\n");
    if (s->o.max_concurrency)
        printf("Maximum request concurrency: %ld\n", s->o.max_concurrency);
    else
        printf("Maximum request concurrency: None\n");
    fflush(stdout);
    long nt = s->o.max_concurrency ? s->o.max_concurrency : s->o.num_prompts;
    if (nt > SERVE_MAX_THREADS) {
        fprintf(stderr, "vllmc bench serve: note: at most %d requests in flight (client threads)\n",
                SERVE_MAX_THREADS);
        nt = SERVE_MAX_THREADS;
    }
    double dur = serve_run(s, s->reqs, s->n_reqs, (int)nt);
    return serve_report(s, dur);
}

int bench_serve_main(int argc, char **argv)
{
    struct serve s = {0};
    int rc = serve_parse(&s.o, argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
    if ((rc = serve_parse_lists(&s)))
        return rc;
    if (bench_http_global_init()) {
        fprintf(stderr, "vllmc bench serve: libcurl failed to initialize\n");
        return 1;
    }
    s.tty = isatty(STDERR_FILENO);
    pthread_mutex_init(&s.mu, NULL);
    rc = serve_main_run(&s);
    pthread_mutex_destroy(&s.mu);
    serve_free(&s);
    bench_http_global_cleanup();
    return rc;
}
