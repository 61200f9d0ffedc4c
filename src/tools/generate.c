// `vllmc generate`: completes one prompt through the engine's public API
// (include/vllmc.h only), streaming text to stdout and a stats line to
// stderr. Greedy at temperature 0; else vLLM's sampling with top-k/top-p.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "vllmc.h"

struct gen_opts {
    const char *model;
    const char *prompt;
    const char *prompt_ids;
    const char *device;
    long max_tokens;
    double temperature;
    long top_k;
    double top_p;
    unsigned long long seed;
    long threads;
    bool log_providers;
    bool print_ids;
    bool weights_f16; // --dtype float16
};

static void gen_usage(FILE *f)
{
    fprintf(f,
            "usage: vllmc generate [options]\n"
            "  -m, --model PATH       GGUF file or Hugging Face folder (default: bundled model)\n"
            "  -p, --prompt TEXT      prompt text (default: empty, i.e. BOS only)\n"
            "      --prompt-ids LIST  prompt as token ids, e.g. 1,403,407 (no tokenizer needed)\n"
            "  -n, --max-tokens N     tokens to generate (default 256)\n"
            "      --temperature T    0 = greedy (default 0)\n"
            "      --top-k K          sample among the K best (0 = all)\n"
            "      --top-p P          nucleus sampling mass (default 1)\n"
            "      --seed S           random seed for sampling (default 0)\n"
            "      --device cpu|cuda  backend (default cpu)\n"
            "      --dtype auto|bfloat16|float16  float16 rewrites bf16 weights as f16 (cuda)\n"
            "  -t, --threads N        CPU threads (default: all cores)\n"
            "      --log-providers    log which op provider runs each op shape\n"
            "      --print-ids        print the generated ids as a JSON array instead of text\n");
}

static int gen_parse(struct gen_opts *o, int argc, char **argv)
{
    *o = (struct gen_opts){.device = "cpu", .max_tokens = 256, .top_p = 1.0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        long seed;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            gen_usage(stdout);
            return -1;
        } else if (!strcmp(a, "--log-providers")) {
            o->log_providers = true;
        } else if (!strcmp(a, "--print-ids")) {
            o->print_ids = true;
        } else if (cli_opt(argc, argv, &i, "--model", "-m", &v)) {
            o->model = v;
        } else if (cli_opt(argc, argv, &i, "--prompt", "-p", &v)) {
            o->prompt = v;
        } else if (cli_opt(argc, argv, &i, "--prompt-ids", NULL, &v)) {
            o->prompt_ids = v;
        } else if (cli_opt(argc, argv, &i, "--device", NULL, &v)) {
            o->device = v;
        } else if (cli_opt(argc, argv, &i, "--dtype", NULL, &v)) {
            ok = v && cli_parse_dtype(a, v, &o->weights_f16);
        } else if (cli_opt(argc, argv, &i, "--max-tokens", "-n", &v)) {
            ok = v && cli_parse_int(a, v, 0, 1 << 24, &o->max_tokens);
        } else if (cli_opt(argc, argv, &i, "--temperature", "--temp", &v)) {
            ok = v && cli_parse_float_in(a, v, 0, INFINITY, CLI_CLOSED, &o->temperature);
        } else if (cli_opt(argc, argv, &i, "--top-k", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 0, 1 << 30, &o->top_k);
        } else if (cli_opt(argc, argv, &i, "--top-p", NULL, &v)) {
            ok = v && cli_parse_float_in(a, v, 0, 1, CLI_OPEN_LO, &o->top_p);
        } else if (cli_opt(argc, argv, &i, "--seed", "-s", &v)) {
            ok = v && cli_parse_int(a, v, 0, 0x7fffffffL, &seed);
            o->seed = ok ? (unsigned long long)seed : 0;
        } else if (cli_opt(argc, argv, &i, "--threads", "-t", &v)) {
            ok = v && cli_parse_int(a, v, 0, 1024, &o->threads);
        } else {
            fprintf(stderr, "vllmc generate: unknown option '%s'\n", a);
            gen_usage(stderr);
            return 2;
        }
        // Flags leave v NULL on purpose; an option that takes a value needs one.
        bool is_flag = !strcmp(a, "--log-providers") || !strcmp(a, "--print-ids");
        if (!ok || (!is_flag && !v))
            return 2;
    }
    if (o->prompt && o->prompt_ids) {
        fprintf(stderr, "vllmc generate: give --prompt or --prompt-ids, not both\n");
        return 2;
    }
    if (!o->model)
        o->model = cli_default_model();
    return 0;
}

// Starts an engine sized for one sequence of about max_model_len tokens; 0
// takes the model's context.
static enum vllmc_status gen_engine(const struct gen_opts *o, int max_model_len,
                                    struct vllmc_engine **out)
{
    struct vllmc_engine_params p;
    vllmc_engine_params_default(&p);
    p.model_path = o->model;
    p.device = o->device;
    p.dtype = o->weights_f16 ? "f16" : "auto";
    p.n_threads = (int)o->threads;
    p.log_providers = o->log_providers;
    p.seed = o->seed;
    p.max_num_seqs = 1;
    p.max_model_len = max_model_len;
    p.enable_prefix_caching = false;
    return vllmc_engine_create(&p, out);
}

// Creates the engine with a context just long enough for the prompt and the
// tokens to generate, or the model's whole context when that is shorter.
static int gen_start(const struct gen_opts *o, int n_prompt_max, struct vllmc_engine **e)
{
    long want = (long)n_prompt_max + o->max_tokens + 1;
    enum vllmc_status st = gen_engine(o, want < (1L << 30) ? (int)want : 0, e);
    if (st == VLLMC_ERR_CAPACITY) {
        st = gen_engine(o, 0, e);
        if (!st)
            fprintf(stderr, "vllmc: generation stops at the model's context of %d tokens\n",
                    vllmc_engine_max_model_len(*e));
    }
    if (st) {
        fprintf(stderr, "vllmc: %s\n",
                vllmc_last_error()[0] ? vllmc_last_error() : vllmc_status_str(st));
        return 1;
    }
    return 0;
}

struct gen_run {
    int32_t *ids; // generated ids, for --print-ids
    int n_ids;
    int n_prompt;
    // When the engine queued the first and the latest output (set on the
    // engine thread; read once the engine is freed and its thread joined).
    double t_first;
    double t_end;
};

// Timestamps each output as the engine queues it: the reader may drain
// several steps at once, so its own clock would merge them.
static void gen_on_output(void *user_data)
{
    struct gen_run *run = user_data;
    double now = time_now_s();
    if (!run->t_first)
        run->t_first = now;
    run->t_end = now;
}

static int gen_stream(const struct gen_opts *o, struct vllmc_request *r, bool has_tok,
                      struct gen_run *run)
{
    run->ids = malloc((size_t)(o->max_tokens + 1) * sizeof *run->ids);
    if (!run->ids) {
        fprintf(stderr, "vllmc: out of memory\n");
        return 1;
    }
    for (;;) {
        struct vllmc_output *out = NULL;
        enum vllmc_status st = vllmc_request_next_output(r, -1, &out);
        if (st || !out) {
            fprintf(stderr, "vllmc: generation ended early: %s\n", vllmc_status_str(st));
            return 1;
        }
        run->n_prompt = out->usage.prompt_tokens;
        for (int i = 0; i < out->n_token_ids; i++) {
            // The token that ended generation (EOS, an end-of-turn id) is not shown.
            bool ender = out->finish_reason == VLLMC_FINISH_STOP && i == out->n_token_ids - 1;
            if (ender)
                break;
            run->ids[run->n_ids++] = out->token_ids[i];
            if (!o->print_ids && !has_tok)
                printf("%s%d", run->n_ids > 1 ? " " : "", out->token_ids[i]);
        }
        if (!o->print_ids && has_tok)
            fwrite(out->text, 1, out->text_len, stdout);
        fflush(stdout);
        bool final = out->final;
        vllmc_output_free(out);
        if (final)
            break;
    }
    if (o->print_ids) {
        printf("[");
        for (int i = 0; i < run->n_ids; i++)
            printf("%s%d", i ? ", " : "", run->ids[i]);
        printf("]\n");
    } else {
        printf("\n");
    }
    fflush(stdout);
    return 0;
}

int generate_main(int argc, char **argv)
{
    struct gen_opts o;
    int rc = gen_parse(&o, argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
    int32_t *prompt_ids = NULL;
    int n_prompt_ids = 0;
    if (o.prompt_ids && !cli_parse_ids(o.prompt_ids, &prompt_ids, &n_prompt_ids))
        return 2;
    // A text prompt has at most one token per byte, plus BOS and a leading space.
    int n_prompt_max = o.prompt_ids ? n_prompt_ids : (int)strlen(o.prompt ? o.prompt : "") + 2;
    struct vllmc_engine *e = NULL;
    if (gen_start(&o, n_prompt_max, &e)) {
        free(prompt_ids);
        return 1;
    }
    bool has_tok = vllmc_engine_token_text(e, 0) != NULL;
    struct vllmc_request_params rp;
    vllmc_request_params_default(&rp);
    int32_t bos = vllmc_engine_bos_id(e);
    if (o.prompt_ids && n_prompt_ids > 0) {
        rp.prompt_token_ids = prompt_ids;
        rp.n_prompt_token_ids = n_prompt_ids;
    } else if (has_tok && !o.prompt_ids) {
        // An empty prompt starts from BOS, as llama.cpp and llama2.c do.
        rp.prompt = o.prompt ? o.prompt : "";
    } else if (o.prompt) {
        fprintf(stderr, "vllmc: %s has no tokenizer; give the prompt with --prompt-ids\n", o.model);
        vllmc_engine_free(e);
        return 2;
    } else {
        rp.prompt_token_ids = &bos;
        rp.n_prompt_token_ids = bos >= 0 ? 1 : 0;
    }
    rp.sampling.max_tokens = o.max_tokens > 0 ? (int)o.max_tokens : 1;
    rp.sampling.temperature = (float)o.temperature;
    rp.sampling.top_k = (int)o.top_k;
    rp.sampling.top_p = (float)o.top_p;
    rp.sampling.has_seed = true;
    rp.sampling.seed = o.seed;
    struct vllmc_request *r = NULL;
    struct gen_run run = {0};
    rp.on_output = gen_on_output;
    rp.user_data = &run;
    double t0 = time_now_s();
    enum vllmc_status st = o.max_tokens > 0 ? vllmc_engine_add_request(e, &rp, &r) : VLLMC_OK;
    if (st) {
        fprintf(stderr, "vllmc: %s\n",
                vllmc_last_error()[0] ? vllmc_last_error() : vllmc_status_str(st));
        rc = 2;
    } else if (r) {
        rc = gen_stream(&o, r, has_tok, &run);
    } else {
        printf("%s\n", o.print_ids ? "[]" : "");
    }
    vllmc_request_free(r);
    vllmc_engine_free(e);
    if (!rc) {
        // Prefill: until the first token; decode: the tokens after it.
        double t_prefill = run.t_first > t0 ? run.t_first - t0 : 0;
        double t_decode = run.t_end > run.t_first ? run.t_end - run.t_first : 0;
        int n_decode = run.n_ids > 0 ? run.n_ids - 1 : 0;
        fprintf(stderr,
                "prompt tokens: %d, generated tokens: %d, prefill: %.1f tok/s, decode: %.1f "
                "tok/s\n",
                run.n_prompt, run.n_ids, t_prefill > 0 ? run.n_prompt / t_prefill : 0.0,
                t_decode > 0 ? n_decode / t_decode : 0.0);
    }
    free(run.ids);
    free(prompt_ids);
    return rc;
}
