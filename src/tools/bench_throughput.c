// `vllmc bench throughput`: offline throughput through the public engine API,
// as `vllm bench throughput` measures it: random token-id prompts all
// submitted at once, ignore_eos so each request generates exactly its output
// length, temperature 1 unless --temperature says otherwise (0 is greedy, as
// llama-batched-bench's decode). Prints vLLM's lines (requests/s, total and output
// tokens/s) plus the aggregate decode speed: output tokens per second over the
// window in which every request had finished its prefill and none had yet
// finished, i.e. the steady state of max-num-seqs sequences decoding together.
// On a GPU a warm-up run comes first (--warmup): the first max-num-seqs
// requests' shapes with other token ids, untimed, so that the decode buckets'
// one-off work (an eager step, graph capture and its check) is done before the
// timer starts, as llama-batched-bench warms up and vLLM captures its graphs
// at start-up.
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "tools/bench_stats.h"
#include "tools/cli.h"
#include "vllmc.h"

struct tput_opts {
    const char *model;
    const char *device;
    long num_prompts;
    long input_len;
    long output_len;
    double range_ratio;
    long max_num_seqs;
    long max_num_batched_tokens;  // 0 = engine default
    long max_model_len;           // 0 = engine default
    long threads;
    long long kv_cache_memory_bytes;
    long block_size;            // 0 = engine default
    const char *kv_cache_dtype; // NULL = engine default
    bool weights_f16;           // --dtype float16
    bool sync_scheduling;       // --no-async-scheduling
    int warmup;                 // -1 = by device (on for GPUs), 0 off, 1 on
    long seed;
    double temperature;
    const char *output_json;
};

struct tput_req {
    struct vllmc_request *req;
    int32_t *ids;          // owned, [prompt_len]
    int prompt_len;
    int output_len;
    double *tok_s;         // owned, [output_len + 2]: when each output was queued
    _Atomic int n_cb;      // entries of tok_s written (by the engine thread's callback)
    struct tput *t;
    int n_out;
    bool done;
    bool failed;
};

struct tput {
    struct tput_opts o;
    struct vllmc_engine *engine;
    struct tput_req *reqs;  // owned, [num_prompts]
    int n;
    struct tput_req *warm; // owned, [n_warm]: the warm-up run's requests
    int n_warm;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_long n_signals;  // bumped by the engine thread on every output
};

static void tput_usage(FILE *f)
{
    fprintf(f,
            "usage: vllmc bench throughput [options]   (like vllm bench throughput)\n"
            "  -m, --model PATH               (default: bundled model)\n"
            "      --num-prompts N            (default 1000)\n"
            "      --input-len N              prompt tokens (default 1024, capped to fit)\n"
            "      --output-len N             generated tokens per request (default 128)\n"
            "      --random-range-ratio R     lengths uniform in [L(1-R), L(1+R)] (default 0)\n"
            "      --max-num-seqs N           sequences per step (default 256)\n"
            "      --max-num-batched-tokens N token budget per step (default: engine's)\n"
            "      --max-model-len N          (default: the model's context)\n"
            "      --kv-cache-memory-bytes N  KV cache size (default: engine's)\n"
            "      --kv-cache-dtype auto|f32|f16|bf16  (default auto)\n"
            "      --dtype auto|bfloat16|float16  float16 rewrites bf16 weights as f16 (cuda)\n"
            "      --block-size N             tokens per KV block (default: engine's)\n"
            "      --no-async-scheduling      read each step's tokens before the next step\n"
            "      --warmup, --no-warmup      an untimed run of the first max-num-seqs requests'\n"
            "                                 shapes first (default: on for GPUs, off on the CPU)\n"
            "  -t, --threads N                CPU threads (default: all cores)\n"
            "      --device cpu|cuda          (default cpu)\n"
            "      --seed S                   dataset seed (default 0)\n"
            "      --temperature T            sampling temperature (default 1, as vLLM; 0 greedy)\n"
            "      --output-json FILE         write the figures as JSON\n");
}

static int tput_parse(struct tput_opts *o, int argc, char **argv)
{
    *o = (struct tput_opts){.device = "cpu",
                            .num_prompts = 1000,
                            .input_len = 1024,
                            .output_len = 128,
                            .max_num_seqs = 256,
                            .temperature = 1.0,
                            .warmup = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        bool ok = true;
        long long kv = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            tput_usage(stdout);
            return -1;
        } else if (cli_opt(argc, argv, &i, "--model", "-m", &v)) {
            o->model = v;
        } else if (cli_opt(argc, argv, &i, "--device", NULL, &v)) {
            o->device = v;
        } else if (cli_opt(argc, argv, &i, "--num-prompts", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, 1 << 20, &o->num_prompts);
        } else if (cli_opt(argc, argv, &i, "--input-len", "--random-input-len", &v)) {
            ok = v && cli_parse_int(a, v, 1, 1 << 24, &o->input_len);
        } else if (cli_opt(argc, argv, &i, "--output-len", "--random-output-len", &v)) {
            ok = v && cli_parse_int(a, v, 1, 1 << 24, &o->output_len);
        } else if (cli_opt(argc, argv, &i, "--random-range-ratio", NULL, &v)) {
            ok = v && cli_parse_float_in(a, v, 0, 1, CLI_OPEN_HI, &o->range_ratio);
        } else if (cli_opt(argc, argv, &i, "--max-num-seqs", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, 1 << 20, &o->max_num_seqs);
        } else if (cli_opt(argc, argv, &i, "--max-num-batched-tokens", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, 1 << 24, &o->max_num_batched_tokens);
        } else if (cli_opt(argc, argv, &i, "--max-model-len", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, 1 << 24, &o->max_model_len);
        } else if (cli_opt(argc, argv, &i, "--kv-cache-memory-bytes", NULL, &v)) {
            char *end = NULL;
            kv = v ? strtoll(v, &end, 10) : 0;
            ok = v && end && !*end && kv > 0;
            o->kv_cache_memory_bytes = kv;
        } else if (cli_opt(argc, argv, &i, "--block-size", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 1, VLLMC_BLOCK_SIZE_MAX, &o->block_size);
        } else if (cli_opt(argc, argv, &i, "--kv-cache-dtype", NULL, &v)) {
            o->kv_cache_dtype = v;
        } else if (cli_opt(argc, argv, &i, "--dtype", NULL, &v)) {
            ok = v && cli_parse_dtype(a, v, &o->weights_f16);
        } else if (!strcmp(a, "--no-async-scheduling") || !strcmp(a, "--async-scheduling")) {
            o->sync_scheduling = a[2] == 'n';
            v = a;
        } else if (!strcmp(a, "--warmup") || !strcmp(a, "--no-warmup")) {
            o->warmup = a[2] != 'n';
            v = a;
        } else if (cli_opt(argc, argv, &i, "--threads", "-t", &v)) {
            ok = v && cli_parse_int(a, v, 0, 1024, &o->threads);
        } else if (cli_opt(argc, argv, &i, "--seed", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 0, 0x7fffffffL, &o->seed);
        } else if (cli_opt(argc, argv, &i, "--temperature", NULL, &v)) {
            ok = v && cli_parse_float_in(a, v, 0, INFINITY, CLI_CLOSED, &o->temperature);
        } else if (cli_opt(argc, argv, &i, "--output-json", NULL, &v)) {
            o->output_json = v;
        } else {
            fprintf(stderr, "vllmc bench throughput: unknown option '%s'\n", a);
            tput_usage(stderr);
            return 2;
        }
        if (!ok || !v) {
            if (v)
                fprintf(stderr, "vllmc bench throughput: bad value for %s: '%s'\n", a, v);
            return 2;
        }
    }
    if (!o->model)
        o->model = cli_default_model();
    return 0;
}

// Engine thread: one call per queued output, i.e. per step that gave this
// request a token, and one after its final output. The time is taken here, not
// when the reader gets to it, so a busy reader does not merge steps.
// The reader is woken only from a request's last token on (it drains the
// queues every 50 ms besides, and the elapsed time ends at the last call, so
// a request that ends early costs no accuracy): woken for every token, it
// took a core from the thread pool in every step on a 2-core machine, a cost
// vLLM's offline LLM.generate, which this measures like, does not have.
static void tput_on_output(void *user)
{
    struct tput_req *r = user;
    struct tput *t = r->t;
    int k = atomic_load_explicit(&r->n_cb, memory_order_relaxed);
    if (k < r->output_len + 2) {
        r->tok_s[k] = time_now_s();
        atomic_store_explicit(&r->n_cb, k + 1, memory_order_release);
    }
    if (k + 1 < r->output_len)
        return;
    atomic_fetch_add(&t->n_signals, 1);
    pthread_mutex_lock(&t->mu);
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static uint64_t tput_rng;

static long tput_randint(long lo, long hi)
{
    uint64_t z = (tput_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return hi <= lo ? lo : lo + (long)(z % (uint64_t)(hi - lo + 1));
}

// Sets up r with a prompt of prompt_len ids (offset + step j) % vocab and
// room for output_len queue times.
static int tput_req_init(struct tput *t, struct tput_req *r, int prompt_len, int output_len,
                         long offset, long step, int vocab)
{
    r->prompt_len = prompt_len;
    r->output_len = output_len;
    r->ids = mem_alloc((size_t)prompt_len * sizeof(*r->ids));
    r->tok_s = mem_alloc((size_t)(output_len + 2) * sizeof(*r->tok_s));
    r->t = t;
    if (!r->ids || !r->tok_s)
        return 1;
    for (int j = 0; j < prompt_len; j++)
        r->ids[j] = (int32_t)((offset + step * j) % vocab);
    return 0;
}

// Random prompts as vLLM's random dataset: consecutive ids from a random
// offset. Lengths are capped so prompt + output fits max_model_len.
static int tput_dataset(struct tput *t)
{
    const struct tput_opts *o = &t->o;
    int vocab = vllmc_engine_vocab_size(t->engine);
    int max_len = vllmc_engine_max_model_len(t->engine);
    tput_rng = (uint64_t)o->seed;
    t->n = (int)o->num_prompts;
    t->reqs = mem_calloc((size_t)t->n, sizeof(*t->reqs));
    if (!t->reqs)
        return 1;
    long in_lo = (long)floor((double)o->input_len * (1 - o->range_ratio));
    long in_hi = (long)ceil((double)o->input_len * (1 + o->range_ratio));
    long out_lo = (long)floor((double)o->output_len * (1 - o->range_ratio));
    long out_hi = (long)ceil((double)o->output_len * (1 + o->range_ratio));
    if (in_hi + out_hi > max_len) {
        fprintf(stderr,
                "vllmc bench throughput: input %ld + output %ld tokens exceed max_model_len %d\n",
                in_hi, out_hi, max_len);
        return 2;
    }
    for (int i = 0; i < t->n; i++) {
        int prompt_len = (int)tput_randint(in_lo < 1 ? 1 : in_lo, in_hi);
        int output_len = (int)tput_randint(out_lo < 1 ? 1 : out_lo, out_hi);
        long offset = tput_randint(0, vocab - 1);
        if (tput_req_init(t, &t->reqs[i], prompt_len, output_len, offset + i, 1, vocab))
            return 1;
    }
    return 0;
}

// The warm-up run's requests: the first min(n, max-num-seqs) requests'
// lengths, so that its decode steps take the same (sequences, context)
// buckets, with ids two apart (the timed prompts' are consecutive), so that
// no block of theirs is a prefix-cache hit for the timed run.
static int tput_warm_dataset(struct tput *t)
{
    int vocab = vllmc_engine_vocab_size(t->engine);
    t->n_warm = t->n < (int)t->o.max_num_seqs ? t->n : (int)t->o.max_num_seqs;
    t->warm = mem_calloc((size_t)t->n_warm, sizeof(*t->warm));
    if (!t->warm)
        return 1;
    for (int i = 0; i < t->n_warm; i++)
        if (tput_req_init(t, &t->warm[i], t->reqs[i].prompt_len, t->reqs[i].output_len,
                          tput_randint(0, vocab - 1), 2, vocab))
            return 1;
    return 0;
}

// Tokens of r with a queue time: one per step (one token per step per sequence).
static int tput_n_timed(struct tput_req *r)
{
    int n_cb = atomic_load_explicit(&r->n_cb, memory_order_acquire);
    return n_cb < r->n_out ? n_cb : r->n_out;
}

// Drains the queued outputs of reqs [n]; returns how many requests finished.
static int tput_drain(struct tput_req *reqs, int n)
{
    int n_done = 0;
    for (int i = 0; i < n; i++) {
        struct tput_req *r = &reqs[i];
        while (!r->done) {
            struct vllmc_output *out = NULL;
            enum vllmc_status st = vllmc_request_next_output(r->req, 0, &out);
            if (st != VLLMC_OK) {
                r->done = r->failed = true;
                break;
            }
            if (!out)
                break;
            r->n_out += out->n_token_ids;
            if (out->final) {
                r->done = true;
                r->failed = out->finish_reason == VLLMC_FINISH_ABORT;
            }
            vllmc_output_free(out);
        }
        n_done += r->done;
    }
    return n_done;
}

static double tput_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// Where a decode-only step's time went on the engine thread, and how loaded
// the machine was: on a shared machine the figures mean little without it.
static void tput_print_load(const struct tput *t, const struct vllmc_engine_stats *st,
                            double cpu_s, double elapsed)
{
    if (st->n_decode_steps > 0) {
        double n = (double)st->n_decode_steps;
        double host = st->decode_schedule_s + st->decode_prepare_s + st->decode_output_s;
        double step = host + st->decode_forward_s;
        printf("Decode step (mean of %lld decode-only steps): %.3f ms = forward %.3f ms + host "
               "%.3f ms (schedule %.3f, batch %.3f, sample+output %.3f); host %.1f%% of the "
               "step; CPU time %.3f ms per step\n",
               (long long)st->n_decode_steps, 1e3 * step / n, 1e3 * st->decode_forward_s / n,
               1e3 * host / n, 1e3 * st->decode_schedule_s / n, 1e3 * st->decode_prepare_s / n,
               1e3 * st->decode_output_s / n, step > 0 ? 100.0 * host / step : 0,
               1e3 * st->decode_cpu_s / n);
    }
    if (st->n_decode_device > 0) {
        double n = (double)st->n_decode_device;
        printf("Decode step on the device (mean of %lld): forward %.3f ms, sampling %.3f ms\n",
               (long long)st->n_decode_device, 1e3 * st->decode_device_forward_s / n,
               1e3 * st->decode_device_sample_s / n);
    }
    double load[3];
    long n_threads = t->o.threads > 0 ? t->o.threads : sysconf(_SC_NPROCESSORS_ONLN);
    if (getloadavg(load, 3) == 3)
        printf("load average: %.2f %.2f %.2f (%ld CPUs online); CPU time / (wall time x %ld "
               "threads): %.2f\n",
               load[0], load[1], load[2], sysconf(_SC_NPROCESSORS_ONLN), n_threads,
               elapsed > 0 && n_threads > 0 ? cpu_s / (elapsed * (double)n_threads) : 0);
}

// Submits reqs [n] at once and waits until every one has finished.
static int tput_submit_wait(struct tput *t, struct tput_req *reqs, int n)
{
    struct vllmc_request_params rp;
    vllmc_request_params_default(&rp);
    rp.sampling.temperature = (float)t->o.temperature;
    rp.sampling.ignore_eos = true;
    rp.on_output = tput_on_output;
    for (int i = 0; i < n; i++) {
        struct tput_req *r = &reqs[i];
        rp.prompt = NULL;
        rp.prompt_token_ids = r->ids;
        rp.n_prompt_token_ids = r->prompt_len;
        rp.sampling.max_tokens = r->output_len;
        rp.user_data = r;
        enum vllmc_status st = vllmc_engine_add_request(t->engine, &rp, &r->req);
        if (st) {
            fprintf(stderr, "vllmc bench throughput: request %d: %s: %s\n", i,
                    vllmc_status_str(st), vllmc_last_error());
            return 1;
        }
    }
    long seen = atomic_load(&t->n_signals);
    while (tput_drain(reqs, n) < n) {
        pthread_mutex_lock(&t->mu);
        if (atomic_load(&t->n_signals) == seen) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        }
        seen = atomic_load(&t->n_signals);
        pthread_mutex_unlock(&t->mu);
    }
    return 0;
}

// The engine's counters of the timed run: every cumulative field now less
// what the warm-up left (the gauges, running and waiting requests and free
// blocks, stay as read).
static void tput_stats_since(struct vllmc_engine_stats *s, const struct vllmc_engine_stats *w)
{
    s->prompt_tokens_total -= w->prompt_tokens_total;
    s->generation_tokens_total -= w->generation_tokens_total;
    s->n_requests_finished -= w->n_requests_finished;
    s->prefix_cache_queries -= w->prefix_cache_queries;
    s->prefix_cache_hits -= w->prefix_cache_hits;
    s->n_preemptions -= w->n_preemptions;
    s->n_steps -= w->n_steps;
    s->n_async_steps -= w->n_async_steps;
    s->n_decode_steps -= w->n_decode_steps;
    s->decode_schedule_s -= w->decode_schedule_s;
    s->decode_prepare_s -= w->decode_prepare_s;
    s->decode_forward_s -= w->decode_forward_s;
    s->decode_output_s -= w->decode_output_s;
    s->n_graph_steps -= w->n_graph_steps;
    s->step_host_s -= w->step_host_s;
    s->device_wait_s -= w->device_wait_s;
    s->device_idle_s -= w->device_idle_s;
    s->n_device_idle -= w->n_device_idle;
    s->decode_cpu_s -= w->decode_cpu_s;
    s->n_decode_device -= w->n_decode_device;
    s->decode_device_forward_s -= w->decode_device_forward_s;
    s->decode_device_sample_s -= w->decode_device_sample_s;
}

static int tput_run(struct tput *t)
{
    struct vllmc_engine_stats warm_st = {0};
    if (t->n_warm > 0) {
        double w0 = time_now_s();
        if (tput_submit_wait(t, t->warm, t->n_warm))
            return 1;
        for (int i = 0; i < t->n_warm; i++)
            if (t->warm[i].failed) {
                fprintf(stderr, "vllmc bench throughput: warm-up request %d failed\n", i);
                return 1;
            }
        vllmc_engine_stats(t->engine, &warm_st);
        printf("Warm-up: %d requests, %.2f s, %lld engine steps (not counted below)\n", t->n_warm,
               time_now_s() - w0, (long long)warm_st.n_steps);
    }
    double t0 = time_now_s(), cpu0 = tput_cpu_s();
    if (tput_submit_wait(t, t->reqs, t->n))
        return 1;
    double cpu_s = tput_cpu_s() - cpu0;
    // The run ends at the engine's last callback, not when this thread woke
    // to notice it (up to 50 ms later when a request ended early).
    double t_end = 0;
    for (int i = 0; i < t->n; i++) {
        int n_cb = atomic_load_explicit(&t->reqs[i].n_cb, memory_order_acquire);
        if (n_cb > 0 && t->reqs[i].tok_s[n_cb - 1] > t_end)
            t_end = t->reqs[i].tok_s[n_cb - 1];
    }
    double elapsed = (t_end > t0 ? t_end : time_now_s()) - t0;

    long total_in = 0, total_out = 0;
    int n_failed = 0;
    double t_all_prefilled = 0, t_first_finish = INFINITY;
    for (int i = 0; i < t->n; i++) {
        struct tput_req *r = &t->reqs[i];
        n_failed += r->failed;
        total_in += r->prompt_len;
        total_out += r->n_out;
        int n_tok = tput_n_timed(r);
        if (n_tok > 0) {
            t_all_prefilled = r->tok_s[0] > t_all_prefilled ? r->tok_s[0] : t_all_prefilled;
            double end = r->tok_s[n_tok - 1];
            t_first_finish = end < t_first_finish ? end : t_first_finish;
        }
    }
    // Steady-state decode: tokens that arrived after the last prefill ended,
    // up to the first request's end, over that window.
    long window_tokens = 0;
    double window = t_first_finish - t_all_prefilled;
    for (int i = 0; window > 0 && i < t->n; i++) {
        struct tput_req *r = &t->reqs[i];
        for (int k = 1; k < tput_n_timed(r); k++)
            window_tokens += r->tok_s[k] > t_all_prefilled && r->tok_s[k] <= t_first_finish;
    }
    struct vllmc_engine_stats st;
    vllmc_engine_stats(t->engine, &st);
    tput_stats_since(&st, &warm_st);
    double decode_tps = window > 0 ? (double)window_tokens / window : 0;
    printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n",
           t->n / elapsed, (double)(total_in + total_out) / elapsed, (double)total_out / elapsed);
    printf("Total num prompt tokens:  %ld\n", total_in);
    printf("Total num output tokens:  %ld\n", total_out);
    printf("Elapsed: %.2f s, %lld engine steps, %lld preemptions, %d failed requests, "
           "prefix-cache hits %lld of %lld prompt tokens\n",
           elapsed, (long long)st.n_steps, (long long)st.n_preemptions, n_failed,
           (long long)st.prefix_cache_hits, (long long)st.prefix_cache_queries);
    int n_seqs = t->n < (int)t->o.max_num_seqs ? t->n : (int)t->o.max_num_seqs;
    if (window > 0 && window_tokens > 0)
        printf("Decode (all %d sequences decoding): %.2f output tokens/s aggregate, "
               "%.2f tokens/s per sequence (%ld tokens in %.2f s)\n",
               n_seqs, decode_tps, decode_tps / n_seqs, window_tokens, window);
    else
        printf("Decode: no window where every request was decoding (more prompts than "
               "--max-num-seqs, or output length 1)\n");
    if (st.n_steps > 0)
        printf("Engine step: %.3f ms on the engine thread, %.3f ms waiting for the device; "
               "device idle %.3f ms per step (device-timed over %lld steps); "
               "%lld of %lld steps replayed from graphs, %lld queued ahead of the "
               "previous step's tokens (async scheduling)\n",
               1e3 * st.step_host_s / (double)st.n_steps,
               1e3 * st.device_wait_s / (double)st.n_steps,
               st.n_device_idle ? 1e3 * st.device_idle_s / (double)st.n_device_idle : 0.0,
               (long long)st.n_device_idle, (long long)st.n_graph_steps, (long long)st.n_steps,
               (long long)st.n_async_steps);
    tput_print_load(t, &st, cpu_s, elapsed);
    fflush(stdout);
    if (t->o.output_json) {
        FILE *f = fopen(t->o.output_json, "w");
        if (!f) {
            fprintf(stderr, "vllmc bench throughput: cannot write %s\n", t->o.output_json);
            return 1;
        }
        fprintf(f,
                "{\"elapsed_time\": %.6f, \"num_requests\": %d, \"total_num_tokens\": %ld, "
                "\"requests_per_second\": %.6f, \"tokens_per_second\": %.6f, "
                "\"output_tokens_per_second\": %.6f, \"decode_tokens_per_second\": %.6f, "
                "\"max_num_seqs\": %ld, \"num_preemptions\": %lld}\n",
                elapsed, t->n, total_in + total_out, t->n / elapsed,
                (double)(total_in + total_out) / elapsed, (double)total_out / elapsed,
                decode_tps, t->o.max_num_seqs, (long long)st.n_preemptions);
        fclose(f);
    }
    return n_failed ? 1 : 0;
}

// The engine handles of reqs [n] (before the engine goes), then their buffers.
static void tput_reqs_free_handles(struct tput_req *reqs, int n)
{
    for (int i = 0; reqs && i < n; i++)
        vllmc_request_free(reqs[i].req);
}

static void tput_reqs_free(struct tput_req *reqs, int n)
{
    for (int i = 0; reqs && i < n; i++) {
        mem_free(reqs[i].ids);
        mem_free(reqs[i].tok_s);
    }
    mem_free(reqs);
}

int bench_throughput_main(int argc, char **argv)
{
    struct tput t = {0};
    int rc = tput_parse(&t.o, argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
    struct vllmc_engine_params ep;
    vllmc_engine_params_default(&ep);
    ep.model_path = t.o.model;
    ep.device = t.o.device;
    ep.n_threads = (int)t.o.threads;
    ep.max_num_seqs = (int)t.o.max_num_seqs;
    ep.async_scheduling = !t.o.sync_scheduling;
    if (t.o.max_num_batched_tokens)
        ep.max_num_batched_tokens = (int)t.o.max_num_batched_tokens;
    if (t.o.max_model_len)
        ep.max_model_len = (int)t.o.max_model_len;
    if (t.o.kv_cache_memory_bytes)
        ep.kv_cache_memory_bytes = t.o.kv_cache_memory_bytes;
    if (t.o.block_size)
        ep.block_size = (int)t.o.block_size;
    if (t.o.kv_cache_dtype)
        ep.kv_cache_dtype = t.o.kv_cache_dtype;
    if (t.o.weights_f16)
        ep.dtype = "f16";
    enum vllmc_status st = vllmc_engine_create(&ep, &t.engine);
    if (st) {
        fprintf(stderr, "vllmc bench throughput: %s: %s\n", vllmc_status_str(st),
                vllmc_last_error());
        return 1;
    }
    pthread_mutex_init(&t.mu, NULL);
    pthread_cond_init(&t.cv, NULL);
    rc = tput_dataset(&t);
    bool warmup = t.o.warmup < 0 ? strcmp(t.o.device, "cpu") != 0 : t.o.warmup > 0;
    if (!rc && warmup)
        rc = tput_warm_dataset(&t);
    if (rc == 1)
        fprintf(stderr, "vllmc bench throughput: out of memory\n");
    if (!rc)
        rc = tput_run(&t);
    // Requests first: the engine must outlive their handles' last use.
    tput_reqs_free_handles(t.reqs, t.n);
    tput_reqs_free_handles(t.warm, t.n_warm);
    vllmc_engine_free(t.engine);
    tput_reqs_free(t.reqs, t.n);
    tput_reqs_free(t.warm, t.n_warm);
    pthread_cond_destroy(&t.cv);
    pthread_mutex_destroy(&t.mu);
    return rc;
}
