// `vllmc serve [MODEL]`: vLLM's command line in front of the engine and the
// OpenAI-compatible server. Flags keep vLLM's names; values this build cannot
// honour are refused with a message rather than ignored.
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "server/server.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "vllmc.h"

#define MAX_SERVED_NAMES 16

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

static void serve_usage(FILE *f)
{
    fprintf(f,
            "usage: vllmc serve [MODEL] [options]\n"
            "\n"
            "MODEL is a GGUF file or a Hugging Face folder (default: the bundled stories260K).\n"
            "\n"
            "  --host ADDR                    listen address (default 0.0.0.0)\n"
            "  --port N                       listen port (default 8000)\n"
            "  --served-model-name NAME...    names clients use in \"model\" (default: MODEL)\n"
            "  --api-key KEY                  require 'Authorization: Bearer KEY' on /v1\n"
            "                                 (default: $VLLM_API_KEY)\n"
            "  --device cpu|cuda              where the model runs (default cpu)\n"
            "  --dtype auto|float32|bfloat16|float16   weight compute type: float16 rewrites\n"
            "                                 bf16 weights as f16 on cuda (activations stay f32)\n"
            "  --kv-cache-dtype auto|float32|float16|bfloat16   KV cache element type\n"
            "  --max-model-len N              context length (default: the model's)\n"
            "  --max-num-seqs N               sequences per step (default 256)\n"
            "  --max-num-batched-tokens N     token budget per step\n"
            "  --gpu-memory-utilization F     fraction of device memory (CPU: of free RAM)\n"
            "  --kv-cache-memory-bytes N      KV cache size in bytes (overrides the fraction)\n"
            "  --block-size N                 tokens per KV block (default 16)\n"
            "  --enable-prefix-caching / --no-enable-prefix-caching   (default on)\n"
            "  --async-scheduling / --no-async-scheduling   (default on)\n"
            "  --seed N                       default seed for requests without one\n"
            "  --chat-template FILE|TEMPLATE  override the model's chat template\n"
            "  --generation-config auto|vllm|FOLDER  default sampling parameters from\n"
            "                                 generation_config.json (default auto)\n"
            "  --tensor-parallel-size N       only 1 is supported\n"
            "  --threads N                    CPU threads (default: all cores)\n"
            "  --max-body-bytes N             request body limit (default 4 MiB)\n"
            "  --max-waiting-requests N       503 beyond this queue length (default 1024)\n"
            "  --log-providers                log each op provider selection once\n");
}

static char *read_file(const char *path, size_t max_bytes)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = mem_alloc(max_bytes + 1);
    size_t n = buf ? fread(buf, 1, max_bytes, f) : 0;
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return !stat(path, &st) && S_ISDIR(st.st_mode);
}

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

struct serve_args {
    struct vllmc_engine_params engine;
    struct server_options server;
    const char *served_names[MAX_SERVED_NAMES];
    const char *chat_template_arg;
    const char *generation_config_arg;
};

// Returns 0 on success, 2 on a usage error (message printed).
static int parse_args(int argc, char **argv, struct serve_args *a)
{
    vllmc_engine_params_default(&a->engine);
    server_options_default(&a->server);
    a->server.api_key = getenv("VLLM_API_KEY");
    a->generation_config_arg = "auto";
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
#define NEED_VALUE()                                                                               \
    do {                                                                                           \
        if (!v) {                                                                                  \
            fprintf(stderr, "vllmc serve: %s needs a value\n", f);                                 \
            return 2;                                                                              \
        }                                                                                          \
        i++;                                                                                       \
    } while (0)
#define NEED_INT(lo, hi)                                                                           \
    do {                                                                                           \
        NEED_VALUE();                                                                              \
        if (!parse_long(v, lo, hi, &n)) {                                                          \
            fprintf(stderr, "vllmc serve: %s must be an integer in [%ld, %ld], got '%s'\n", f,     \
                    (long)(lo), (long)(hi), v);                                                    \
            return 2;                                                                              \
        }                                                                                          \
    } while (0)
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            serve_usage(stdout);
            exit(0);
        } else if (!strcmp(f, "--host")) {
            NEED_VALUE();
            a->server.host = v;
        } else if (!strcmp(f, "--port")) {
            NEED_INT(0, 65535);
            a->server.port = (uint16_t)n;
        } else if (!strcmp(f, "--served-model-name")) {
            NEED_VALUE();
            // vLLM takes one or more names after the flag.
            a->served_names[a->server.n_served_model_names++] = v;
            while (i + 1 < argc && argv[i + 1][0] != '-' &&
                   a->server.n_served_model_names < MAX_SERVED_NAMES)
                a->served_names[a->server.n_served_model_names++] = argv[++i];
        } else if (!strcmp(f, "--api-key")) {
            NEED_VALUE();
            a->server.api_key = v;
        } else if (!strcmp(f, "--device")) {
            NEED_VALUE();
            if (strcmp(v, "cpu") && strcmp(v, "cuda")) {
                fprintf(stderr, "vllmc serve: --device must be cpu or cuda, got '%s'\n", v);
                return 2;
            }
            a->engine.device = v;
        } else if (!strcmp(f, "--dtype")) {
            NEED_VALUE();
            // float16 rewrites bf16 weights as f16 on a GPU (the loader
            // refuses it on the CPU); the others keep them as stored.
            // Activations are f32 in every case.
            bool weights_f16;
            if (!cli_parse_dtype(f, v, &weights_f16))
                return 2;
            a->engine.dtype = weights_f16 ? "f16" : "auto";
        } else if (!strcmp(f, "--kv-cache-dtype")) {
            NEED_VALUE();
            static const char *const kv_names[][2] = {
                {"auto", "auto"}, {"float32", "f32"}, {"float16", "f16"}, {"bfloat16", "bf16"},
            };
            a->engine.kv_cache_dtype = NULL;
            for (size_t k = 0; k < sizeof kv_names / sizeof kv_names[0]; k++)
                if (!strcmp(v, kv_names[k][0]))
                    a->engine.kv_cache_dtype = kv_names[k][1];
            if (!a->engine.kv_cache_dtype) {
                fprintf(stderr, "vllmc serve: --kv-cache-dtype must be auto, float32, float16 or "
                                "bfloat16, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(f, "--max-model-len")) {
            NEED_INT(1, INT_MAX);
            a->engine.max_model_len = (int)n;
        } else if (!strcmp(f, "--max-num-seqs")) {
            NEED_INT(1, 65536);
            a->engine.max_num_seqs = (int)n;
        } else if (!strcmp(f, "--max-num-batched-tokens")) {
            NEED_INT(1, INT_MAX);
            a->engine.max_num_batched_tokens = (int)n;
        } else if (!strcmp(f, "--gpu-memory-utilization")) {
            NEED_VALUE();
            char *end;
            double d = strtod(v, &end);
            if (*end || !(d > 0 && d <= 1)) {
                fprintf(stderr, "vllmc serve: --gpu-memory-utilization must be in (0, 1], "
                                "got '%s'\n", v);
                return 2;
            }
            a->engine.gpu_memory_utilization = d;
        } else if (!strcmp(f, "--kv-cache-memory-bytes")) {
            NEED_INT(1, LONG_MAX);
            a->engine.kv_cache_memory_bytes = n;
        } else if (!strcmp(f, "--block-size")) {
            NEED_INT(1, VLLMC_BLOCK_SIZE_MAX);
            a->engine.block_size = (int)n;
        } else if (!strcmp(f, "--enable-prefix-caching")) {
            a->engine.enable_prefix_caching = true;
        } else if (!strcmp(f, "--no-enable-prefix-caching")) {
            a->engine.enable_prefix_caching = false;
        } else if (!strcmp(f, "--async-scheduling")) {
            a->engine.async_scheduling = true;
        } else if (!strcmp(f, "--no-async-scheduling")) {
            a->engine.async_scheduling = false;
        } else if (!strcmp(f, "--seed")) {
            NEED_INT(0, LONG_MAX);
            a->engine.seed = (uint64_t)n;
        } else if (!strcmp(f, "--chat-template")) {
            NEED_VALUE();
            a->chat_template_arg = v;
        } else if (!strcmp(f, "--generation-config")) {
            NEED_VALUE();
            a->generation_config_arg = v;
        } else if (!strcmp(f, "--tensor-parallel-size") || !strcmp(f, "-tp")) {
            NEED_INT(1, 1024);
            if (n != 1) {
                fprintf(stderr, "vllmc serve: --tensor-parallel-size %ld is not supported yet; "
                                "this build runs one model replica on one device (use 1)\n", n);
                return 2;
            }
        } else if (!strcmp(f, "--threads")) {
            NEED_INT(1, 1024);
            a->engine.n_threads = (int)n;
        } else if (!strcmp(f, "--max-body-bytes")) {
            NEED_INT(1024, LONG_MAX);
            a->server.max_body_bytes = (size_t)n;
        } else if (!strcmp(f, "--max-waiting-requests")) {
            NEED_INT(0, INT_MAX);
            a->server.max_waiting_requests = (int)n;
        } else if (!strcmp(f, "--log-providers")) {
            a->engine.log_providers = true;
        } else if (!strcmp(f, "--model")) {
            NEED_VALUE();
            a->engine.model_path = v;
        } else if (f[0] != '-' && !a->engine.model_path) {
            a->engine.model_path = f;
        } else {
            fprintf(stderr, "vllmc serve: unknown option '%s' (see vllmc serve --help)\n", f);
            return 2;
        }
#undef NEED_INT
#undef NEED_VALUE
    }
    if (a->server.n_served_model_names)
        a->server.served_model_names = a->served_names;
    return 0;
}

// The template text: a file's contents, or the argument itself (vLLM accepts both).
static char *load_chat_template(const char *arg)
{
    char *text = read_file(arg, 1u << 20);
    return text ? text : mem_strdup(arg);
}

// generation_config.json text for --generation-config, or NULL for "vllm".
static char *load_generation_config(const char *arg, const char *model_path)
{
    if (!strcmp(arg, "vllm"))
        return NULL;
    char path[PATH_MAX];
    const char *dir = !strcmp(arg, "auto") ? model_path : arg;
    if (!is_dir(dir))
        return NULL; // GGUF files carry no generation_config.json
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    return read_file(path, 1u << 20);
}

struct load_progress {
    const char *model;
    atomic_int done; // set by the loading thread when the engine is up (or failed)
};

// Prints an elapsed-time line while the model loads, so a slow load is visibly alive.
static void *progress_thread(void *arg)
{
    struct load_progress *p = arg;
    double t0 = time_now_s();
    bool tty = isatty(STDERR_FILENO);
    int ticks = 0;
    while (!atomic_load(&p->done)) {
        usleep(100000);
        if (++ticks % 5 || atomic_load(&p->done))
            continue;
        if (tty)
            fprintf(stderr, "\rloading %s ... %.1fs", p->model, time_now_s() - t0);
        else if (ticks % 50 == 0)
            fprintf(stderr, "loading %s ... %.0fs\n", p->model, time_now_s() - t0);
    }
    if (tty && ticks >= 5)
        fprintf(stderr, "\r\033[K");
    return NULL;
}

int serve_main(int argc, char **argv)
{
    struct serve_args a;
    memset(&a, 0, sizeof a);
    int rc = parse_args(argc - 1, argv + 1, &a);
    if (rc)
        return rc;
    if (!a.engine.model_path)
        a.engine.model_path = cli_default_model();

    log_info("vllmc %s: loading %s on %s", vllmc_version(), a.engine.model_path,
             a.engine.device ? a.engine.device : "cpu");
    struct load_progress progress = {.model = a.engine.model_path};
    pthread_t tid;
    bool have_thread = !pthread_create(&tid, NULL, progress_thread, &progress);
    double t0 = time_now_s();
    struct vllmc_engine *engine = NULL;
    enum vllmc_status st = vllmc_engine_create(&a.engine, &engine);
    atomic_store(&progress.done, 1);
    if (have_thread)
        pthread_join(tid, NULL);
    if (st != VLLMC_OK) {
        fprintf(stderr, "vllmc serve: cannot start the engine: %s\n",
                vllmc_last_error()[0] ? vllmc_last_error() : vllmc_status_str(st));
        return 1;
    }
    log_info("model ready in %.2fs", time_now_s() - t0);

    char *template_text = a.chat_template_arg ? load_chat_template(a.chat_template_arg) : NULL;
    char *gen_config = load_generation_config(a.generation_config_arg, a.engine.model_path);
    a.server.chat_template = template_text;
    a.server.generation_config = gen_config;

    struct server *srv = NULL;
    char msg[512] = "";
    st = server_start(&a.server, engine, &srv, msg, sizeof msg);
    if (st != VLLMC_OK) {
        fprintf(stderr, "vllmc serve: %s\n", msg[0] ? msg : vllmc_status_str(st));
        vllmc_engine_free(engine);
        mem_free(template_text);
        mem_free(gen_config);
        return 1;
    }

    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    const char *host = a.server.host ? a.server.host : "0.0.0.0";
    const char *shown = !strcmp(host, "0.0.0.0") || !strcmp(host, "::") ? "localhost" : host;
    const char *name = a.server.n_served_model_names ? a.served_names[0]
                                                     : vllmc_engine_model_name(engine);
    unsigned port = server_port(srv);
    fprintf(stderr,
            "\nvllmc is serving %s on http://%s:%u (OpenAI API at /v1). Try:\n\n"
            "  curl http://%s:%u/v1/completions -H 'Content-Type: application/json' %s%s%s"
            "-d '{\"model\": \"%s\", \"prompt\": \"Once upon a time\", \"max_tokens\": 32}'\n\n",
            name, shown, port, shown, port, a.server.api_key ? "-H 'Authorization: Bearer " : "",
            a.server.api_key ? a.server.api_key : "", a.server.api_key ? "' " : "", name);

    while (!stop_signal)
        pause();
    log_info("received %s: finishing in-flight requests (up to %ds)",
             stop_signal == SIGINT ? "SIGINT" : "SIGTERM", a.server.grace_period_s);
    server_stop(srv);
    vllmc_engine_free(engine);
    mem_free(template_text);
    mem_free(gen_config);
    log_info("stopped");
    return 0;
}
