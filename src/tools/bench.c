// `vllmc bench`: llama-bench's prompt-processing and generation tests on the
// model alone (no scheduler, no sampler), plus the memory read bandwidth
// measured in the same run so decode speed can be read as a fraction of it.
// `vllmc bench throughput` and `vllmc bench serve` live in their own files.
//
// Definitions follow llama-bench: ppN processes a prompt of N random tokens as
// one batch into an empty KV cache; tgN decodes N tokens one at a time from an
// empty cache, each step computing the last token's logits. Each test runs once
// untimed, then -r times; t/s is tokens / wall seconds per repeat.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "model/batch_builder.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tools/bench_stats.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/membw.h"

#define BENCH_BLOCK_SIZE 16

struct bench_opts {
    const char *model;
    const char *device;
    long n_prompt;      // pp test size; 0 = skip
    long n_gen;         // tg test size; 0 = skip
    long n_reps;
    long n_threads;     // 0 = all cores
    long bw_mib;        // bandwidth probe buffer; 0 = skip the probe
    enum dtype kv_dtype; // --kv-cache-dtype; f32, as the engine's auto
    bool weights_f16;    // --dtype float16
    bool log_providers;
};

struct bench {
    struct bench_opts o;
    struct backend *be;
    struct model *m;
    struct kv_cache *kv;
    struct batch_builder bb;
    int32_t *block_table;  // [n_blocks]: 0, 1, 2, ...
    int n_blocks;
    int32_t *ids;          // [max(n_prompt, 1)] random tokens
    void *logits;          // [n_vocab] f32 in backend memory
    int n_threads;         // what the backend runs with
    // Decode steps replayed from graphs where the backend has them, as in the
    // engine (VLLMC_CUDA_GRAPHS=0 runs them eagerly):
    // one per context bucket (powers of two from 64), captured on its second
    // step; a bucket whose capture fails runs eagerly.
    bool use_graphs;
    struct bench_graph {
        int ctx;
        bool warmed, failed;
        struct backend_graph *g;
    } graphs[24];
    int n_graphs;
    long n_graph_steps;
};

static void bench_usage(FILE *f)
{
    fprintf(
        f, "usage: vllmc bench [options]                 prompt processing / generation speed\n"
           "       vllmc bench throughput [options]      offline throughput through the engine\n"
           "       vllmc bench serve [options]           online serving benchmark over HTTP\n"
           "\n"
           "  -m, --model PATH        GGUF file or Hugging Face folder (default: bundled model)\n"
           "  -p, --n-prompt N        prompt tokens of the pp test (default 512; 0 = skip)\n"
           "  -n, --n-gen N           generated tokens of the tg test (default 128; 0 = skip)\n"
           "  -r, --repetitions N     timed repeats of each test (default 5)\n"
           "  -t, --threads N         CPU threads (default: all cores)\n"
           "      --device cpu|cuda   backend (default cpu)\n"
           "      --bandwidth-mib N   buffer of the read-bandwidth probe (default 1024; 0 = skip)\n"
           "      --kv-cache-dtype auto|f32|f16|bf16  KV cache element type (default auto: f32)\n"
           "      --dtype auto|bfloat16|float16  float16 rewrites bf16 weights as f16 (cuda)\n"
           "      --log-providers     log which op provider runs each op shape\n");
}

static int bench_parse(struct bench_opts *o, int argc, char **argv)
{
    *o = (struct bench_opts){.device = "cpu",
                             .n_prompt = 512,
                             .n_gen = 128,
                             .n_reps = 5,
                             .bw_mib = 1024,
                             .kv_dtype = DTYPE_F32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            return -1;
        } else if (!strcmp(a, "--log-providers")) {
            o->log_providers = true;
            continue;
        } else if (cli_opt(argc, argv, &i, "--model", "-m", &v)) {
            o->model = v;
        } else if (cli_opt(argc, argv, &i, "--device", NULL, &v)) {
            o->device = v;
        } else if (cli_opt(argc, argv, &i, "--n-prompt", "-p", &v)) {
            ok = v && cli_parse_int(a, v, 0, 1 << 20, &o->n_prompt);
        } else if (cli_opt(argc, argv, &i, "--n-gen", "-n", &v)) {
            ok = v && cli_parse_int(a, v, 0, 1 << 20, &o->n_gen);
        } else if (cli_opt(argc, argv, &i, "--repetitions", "-r", &v)) {
            ok = v && cli_parse_int(a, v, 1, 1 << 20, &o->n_reps);
        } else if (cli_opt(argc, argv, &i, "--threads", "-t", &v)) {
            ok = v && cli_parse_int(a, v, 0, 1024, &o->n_threads);
        } else if (cli_opt(argc, argv, &i, "--bandwidth-mib", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 0, 1 << 20, &o->bw_mib);
        } else if (cli_opt(argc, argv, &i, "--dtype", NULL, &v)) {
            ok = v && cli_parse_dtype(a, v, &o->weights_f16);
        } else if (cli_opt(argc, argv, &i, "--kv-cache-dtype", NULL, &v)) {
            if (v && strcmp(v, "auto") &&
                (!dtype_from_name(v, &o->kv_dtype) ||
                 (o->kv_dtype != DTYPE_F32 && o->kv_dtype != DTYPE_F16 &&
                  o->kv_dtype != DTYPE_BF16))) {
                fprintf(stderr, "vllmc bench: --kv-cache-dtype %s (use auto, f32, f16, bf16)\n", v);
                ok = false;
            }
            if (v && !strcmp(v, "auto"))
                o->kv_dtype = DTYPE_F32;
        } else {
            fprintf(stderr, "vllmc bench: unknown option '%s'\n", a);
            bench_usage(stderr);
            return 2;
        }
        if (!ok || !v)
            return 2;
    }
    if (!o->model)
        o->model = cli_default_model();
    return 0;
}

static int bench_setup(struct bench *b)
{
    const struct bench_opts *o = &b->o;
    long n_cpus = sysconf(_SC_NPROCESSORS_ONLN);
    b->n_threads = o->n_threads > 0 ? (int)o->n_threads : n_cpus > 0 ? (int)n_cpus : 1;
    int rc = cli_backend_create(o->device, b->n_threads, o->log_providers, &b->be);
    if (rc)
        return rc;
    const char *graphs = getenv("VLLMC_CUDA_GRAPHS");
    b->use_graphs = backend_has_graphs(b->be) && !(graphs && !strcmp(graphs, "0"));
    struct err err = {0};
    struct model_load_params lp;
    model_load_params_default(&lp);
    lp.n_tokens_max = o->n_prompt > 1 ? (int)o->n_prompt : 1;
    lp.weights_f16 = o->weights_f16;
    if (model_load(o->model, b->be, &lp, &b->m, &err)) {
        fprintf(stderr, "vllmc: %s\n", err.msg);
        return 1;
    }
    long n_ctx = o->n_prompt > o->n_gen ? o->n_prompt : o->n_gen;
    if (b->m->hp.n_ctx_train > 0 && n_ctx > b->m->hp.n_ctx_train)
        fprintf(stderr, "vllmc bench: note: %ld tokens exceed the model's context of %d\n", n_ctx,
                b->m->hp.n_ctx_train);
    b->n_blocks = (int)((n_ctx + BENCH_BLOCK_SIZE - 1) / BENCH_BLOCK_SIZE);
    if (b->n_blocks < 1)
        b->n_blocks = 1;
    struct kv_cache_params kp;
    kv_cache_params_default(&kp);
    kp.block_size = BENCH_BLOCK_SIZE;
    kp.n_blocks = b->n_blocks;
    kp.dtype = o->kv_dtype;
    if (kv_cache_create(b->m, &kp, &b->kv, &err)) {
        fprintf(stderr, "vllmc: %s\n", err.msg);
        return 1;
    }
    b->block_table = mem_alloc((size_t)b->n_blocks * sizeof(*b->block_table));
    b->ids = mem_alloc((size_t)lp.n_tokens_max * sizeof(*b->ids));
    if (!b->block_table || !b->ids ||
        batch_builder_init(&b->bb, b->be, lp.n_tokens_max, 1, b->n_blocks) ||
        backend_buffer_alloc(b->be, (size_t)b->m->hp.n_vocab * sizeof(float), &b->logits)) {
        fprintf(stderr, "vllmc: out of memory\n");
        return 1;
    }
    for (int i = 0; i < b->n_blocks; i++)
        b->block_table[i] = i;
    // Random tokens, as llama-bench feeds; a fixed seed keeps runs comparable.
    uint64_t s = 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < lp.n_tokens_max; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        b->ids[i] = (int32_t)(s % (uint64_t)b->m->hp.n_vocab);
    }
    return 0;
}

static void bench_teardown(struct bench *b)
{
    for (int i = 0; i < b->n_graphs; i++)
        backend_graph_free(b->be, b->graphs[i].g);
    if (b->logits)
        backend_buffer_free(b->be, b->logits);
    if (b->bb.host)
        batch_builder_deinit(&b->bb);
    mem_free(b->ids);
    mem_free(b->block_table);
    kv_cache_free(b->kv);
    model_free(b->m);
    backend_free(b->be);
}

// The context bucket of a decode step whose context is n_ctx tokens: its
// graph's batch has this max_seq_len, so that every step of a bucket launches
// the same attention grid over a block table of the same width (keys past the
// context are masked by the sequence length).
static int bench_graph_ctx(const struct bench *b, int n_ctx)
{
    int ctx = 64;
    while (ctx < n_ctx)
        ctx *= 2;
    if (ctx > b->n_blocks * BENCH_BLOCK_SIZE)
        ctx = b->n_blocks * BENCH_BLOCK_SIZE;
    return ctx < n_ctx ? n_ctx : ctx;
}

// One decode step through the graph of its context bucket (mb->max_seq_len).
static int bench_decode_graph(struct bench *b, struct model_batch *mb, struct tensor *lt)
{
    struct err err = {0};
    int ctx = mb->max_seq_len;
    struct bench_graph *g = NULL;
    for (int i = 0; i < b->n_graphs && !g; i++)
        if (b->graphs[i].ctx == ctx)
            g = &b->graphs[i];
    if (!g && b->n_graphs < (int)(sizeof b->graphs / sizeof b->graphs[0])) {
        g = &b->graphs[b->n_graphs++];
        *g = (struct bench_graph){.ctx = ctx};
    }
    enum vllmc_status rc = VLLMC_OK;
    if (g && g->g && !backend_graph_valid(b->be, g->g)) {
        backend_graph_free(b->be, g->g);
        g->g = NULL;
        g->warmed = false;
    }
    if (g && !g->g && !g->failed && g->warmed &&
        model_forward_record(b->m, mb, b->kv, lt, &g->g, &err)) {
        fprintf(stderr, "vllmc bench: decode graph for context %d: capture failed (%s); "
                        "running it eagerly\n",
                ctx, err.msg);
        g->failed = true;
        memset(&err, 0, sizeof err);
    }
    if (g && g->g) {
        rc = backend_graph_launch(b->be, g->g);
        b->n_graph_steps += !rc;
    } else {
        if (g)
            g->warmed = true;
        rc = model_forward(b->m, mb, b->kv, lt, &err);
    }
    if (rc || backend_sync(b->be)) {
        fprintf(stderr, "vllmc: forward: %s\n", err.msg[0] ? err.msg : backend_err(b->be)->msg);
        return 1;
    }
    return 0;
}

// One forward call over ids[0, n) at positions pos0.. with the last row's logits.
static int bench_forward(struct bench *b, const int32_t *ids, int n, int pos0)
{
    struct err err = {0};
    struct model_batch mb;
    struct tensor lt;
    bool graph = n == 1 && b->use_graphs;
    batch_builder_clear(&b->bb);
    if (batch_builder_add(&b->bb, ids, n, pos0, b->block_table, b->n_blocks, BENCH_BLOCK_SIZE,
                          BATCH_LOGITS_LAST, &err)) {
        fprintf(stderr, "vllmc: %s\n", err.msg);
        return 1;
    }
    if (graph)
        b->bb.max_seq_len = bench_graph_ctx(b, b->bb.max_seq_len);
    if (batch_builder_finish(&b->bb, &mb, &err)) {
        fprintf(stderr, "vllmc: %s\n", err.msg);
        return 1;
    }
    tensor_init_2d(&lt, DTYPE_F32, b->logits, b->m->hp.n_vocab, 1);
    lt.location = backend_location(b->be);
    if (graph)
        return bench_decode_graph(b, &mb, &lt);
    if (model_forward(b->m, &mb, b->kv, &lt, &err)) {
        fprintf(stderr, "vllmc: forward: %s\n", err.msg);
        return 1;
    }
    if (backend_sync(b->be)) {
        fprintf(stderr, "vllmc: %s\n", backend_err(b->be)->msg);
        return 1;
    }
    return 0;
}

// Seconds for one run of the test: pp (one batch of n) or tg (n single steps).
static int bench_run_once(struct bench *b, bool pp, int n, double *seconds)
{
    double t0 = time_now_s();
    if (pp) {
        if (bench_forward(b, b->ids, n, 0))
            return 1;
    } else {
        for (int i = 0; i < n; i++)
            if (bench_forward(b, &b->ids[i % b->m->n_tokens_max], 1, i))
                return 1;
    }
    *seconds = time_now_s() - t0;
    return 0;
}

static double bench_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// Runs a test once untimed and n_reps times timed; fills tok/s per repeat and
// the share of its threads' wall time the process got a core (on a shared
// machine, what is left to it by other work; spinning workers count as used).
// Runs the test n_reps times after one warm-up; tps[r] gets each repeat's
// tokens/s. With probe_gbps, a short bandwidth probe (3 passes, the best
// kept) runs right before each repeat: a shared machine's bandwidth moves
// within seconds, so each repeat is judged against what the memory gave then.
static int bench_test(struct bench *b, bool pp, int n, double *tps, double *probe_gbps,
                      double *cpu_share)
{
    double s, wall = 0, cpu = 0;
    if (bench_run_once(b, pp, pp ? n : 1, &s))
        return 1;
    for (long r = 0; r < b->o.n_reps; r++) {
        struct membw_result bw = {0};
        if (probe_gbps) {
            if (membw_measure(b->n_threads, (size_t)b->o.bw_mib << 20, 3, &bw))
                return 1;
            probe_gbps[r] = bw.best_gbps;
        }
        double cpu0 = bench_cpu_s();
        if (bench_run_once(b, pp, n, &s))
            return 1;
        cpu += bench_cpu_s() - cpu0;
        tps[r] = s > 0 ? n / s : 0;
        wall += s;
    }
    *cpu_share = wall > 0 ? cpu / (wall * b->n_threads) : 0;
    return 0;
}

// Bytes one decode step reads: every weight once, except that only one row of
// an untied embedding table is touched.
static double bench_bytes_per_token(const struct model *m)
{
    double bytes = (double)m->info.weight_bytes;
    if (!m->hp.tied_embeddings && m->token_embd.data) {
        const struct tensor *e = &m->token_embd;
        bytes -= (double)e->nb[1] * (double)(e->ne[1] - 1);
    }
    return bytes;
}

static void bench_print_row(const struct bench *b, const char *test, const double *tps)
{
    const struct model *m = b->m;
    struct bench_summary s;
    bench_summarize(tps, (int)b->o.n_reps, &s);
    char desc[96], size[32], params[32], ts[48], med[24], type[16];
    // llama-bench spells types in capitals: F32, BF16, Q4_K.
    snprintf(type, sizeof(type), "%s", dtype_name(m->layers[0].wq.dtype));
    for (char *c = type; *c; c++)
        *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
    snprintf(desc, sizeof(desc), "%s %.2f%s %s", model_arch_name(m->hp.arch),
             m->info.n_params >= 1000000000ull ? (double)m->info.n_params / 1e9
                                               : (double)m->info.n_params / 1e6,
             m->info.n_params >= 1000000000ull ? "B" : "M", type);
    double gib = (double)m->info.weight_bytes / (1024.0 * 1024.0 * 1024.0);
    if (gib >= 0.1)
        snprintf(size, sizeof(size), "%.2f GiB", gib);
    else
        snprintf(size, sizeof(size), "%.2f MiB", gib * 1024.0);
    double p = (double)m->info.n_params;
    if (p >= 1e9)
        snprintf(params, sizeof(params), "%.2f B", p / 1e9);
    else
        snprintf(params, sizeof(params), "%.2f M", p / 1e6);
    snprintf(ts, sizeof(ts), "%.2f ± %.2f", s.mean, s.stddev); // "±" is 2 bytes: width 21
    snprintf(med, sizeof(med), "%.2f", s.median);
    printf("| %-30s | %10s | %10s | %-10s | %7d | %15s | %21s | %10s |\n", desc, size, params,
           b->o.device[0] == 'c' && b->o.device[1] == 'u' ? "CUDA" : "CPU", b->n_threads, test, ts,
           med);
    fflush(stdout);
}

static int bench_pp_tg(struct bench *b)
{
    const struct bench_opts *o = &b->o;
    struct membw_result bw = {0};
    if (o->bw_mib > 0 && membw_measure(b->n_threads, (size_t)o->bw_mib << 20, 10, &bw)) {
        fprintf(stderr, "vllmc bench: the bandwidth probe could not run\n");
        return 1;
    }
    printf("| %-30s | %10s | %10s | %-10s | %7s | %15s | %20s | %10s |\n", "model", "size",
           "params", "backend", "threads", "test", "t/s", "median t/s");
    printf("| ------------------------------ | ---------: | ---------: | ---------- | ------: | "
           "--------------: | -------------------: | ---------: |\n");
    // Paired probes judge decode against host memory: on the CPU only.
    bool paired = o->bw_mib > 0 && !strcmp(o->device, "cpu");
    double *tps = mem_calloc((size_t)o->n_reps, sizeof(double));
    double *probe = mem_calloc((size_t)o->n_reps, sizeof(double));
    double *ratio = mem_calloc((size_t)o->n_reps, sizeof(double));
    if (!tps || !probe || !ratio) {
        mem_free(tps);
        mem_free(probe);
        mem_free(ratio);
        return 1;
    }
    char name[32], shares[128] = "";
    int rc = 0;
    double tg_median = 0, share = 0;
    if (o->n_prompt > 0) {
        snprintf(name, sizeof(name), "pp%ld", o->n_prompt);
        rc = bench_test(b, true, (int)o->n_prompt, tps, NULL, &share);
        if (!rc) {
            bench_print_row(b, name, tps);
            snprintf(shares, sizeof(shares), "%s %.0f%%", name, 100 * share);
        }
    }
    if (!rc && o->n_gen > 0) {
        snprintf(name, sizeof(name), "tg%ld", o->n_gen);
        rc = bench_test(b, false, (int)o->n_gen, tps, paired ? probe : NULL, &share);
        if (!rc) {
            bench_print_row(b, name, tps);
            size_t len = strlen(shares);
            snprintf(shares + len, sizeof(shares) - len, "%s%s %.0f%%", len ? ", " : "", name,
                     100 * share);
            struct bench_summary s;
            bench_summarize(tps, (int)o->n_reps, &s);
            tg_median = s.median;
        }
    }
    double bpt = bench_bytes_per_token(b->m);
    struct bench_summary ps = {0}, rs = {0};
    if (!rc && o->n_gen > 0 && paired) {
        for (long r = 0; r < o->n_reps; r++)
            ratio[r] = probe[r] > 0 ? bpt * tps[r] * 1e-9 / probe[r] : 0;
        bench_summarize(probe, (int)o->n_reps, &ps);
        bench_summarize(ratio, (int)o->n_reps, &rs);
    }
    mem_free(tps);
    mem_free(probe);
    mem_free(ratio);
    if (rc)
        return rc;
    printf("\n");
    if (bw.n_bytes)
        printf("read bandwidth: %.1f GB/s (best of %d passes over %zu MiB, %d threads, %s loads; "
               "median %.1f GB/s)\n",
               bw.best_gbps, bw.n_reps, bw.n_bytes >> 20, bw.n_threads, bw.isa, bw.median_gbps);
    double load[3];
    if (getloadavg(load, 3) == 3)
        printf("load average: %.2f %.2f %.2f (%ld CPUs online); CPU time / (wall time x %d "
               "threads): %s\n",
               load[0], load[1], load[2], sysconf(_SC_NPROCESSORS_ONLN), b->n_threads, shares);
    if (o->n_gen > 0) {
        double gbps = bpt * tg_median * 1e-9;
        printf("decode: %.1f MB of weights read per token x %.2f tok/s (median) = %.1f GB/s",
               bpt * 1e-6, tg_median, gbps);
        // The probe measures host memory: a ratio to it means something only
        // when the weights are read from host memory.
        if (bw.n_bytes && bw.best_gbps > 0 && !strcmp(o->device, "cpu"))
            printf(" = %.1f%% of the read bandwidth", 100.0 * gbps / bw.best_gbps);
        printf("\n");
        if (paired && rs.median > 0)
            printf("decode, each repeat against a probe just before it: median %.1f%% of the read "
                   "bandwidth (%.1f-%.1f%% over %ld repeats; probes %.1f-%.1f GB/s)\n",
                   100 * rs.median, 100 * rs.min, 100 * rs.max, o->n_reps, ps.min, ps.max);
    }
    return 0;
}

int bench_main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "throughput"))
        return bench_throughput_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "serve")) {
#ifdef VLLMC_HAVE_CURL
        return bench_serve_main(argc - 1, argv + 1);
#else
        fprintf(stderr, "vllmc bench serve: this build has no libcurl (install "
                        "libcurl4-openssl-dev and rebuild)\n");
        return 1;
#endif
    }
    struct bench b = {0};
    int rc = bench_parse(&b.o, argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
    rc = bench_setup(&b);
    if (!rc && b.o.kv_dtype != DTYPE_F32)
        fprintf(stderr, "KV cache: %s\n", dtype_name(b.o.kv_dtype));
    if (!rc)
        rc = bench_pp_tg(&b);
    if (b.use_graphs)
        fprintf(stderr, "decode graphs: %ld steps replayed from %d context buckets\n",
                b.n_graph_steps, b.n_graphs);
    bench_teardown(&b);
    return rc;
}
