// `vllmc generate`: completes a prompt with the model driven directly (one
// sequence, contiguous KV blocks, chunked prefill), streaming text to stdout
// and a stats line to stderr. Greedy at temperature 0; else top-k/top-p sampling.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "engine/tokenizer_load.h"
#include "model/batch_builder.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"
#include "tools/cli.h"
#include "tools/commands.h"

#define GEN_BLOCK_SIZE 16

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
};

struct gen_candidate {
    float logit;
    int32_t id;
};

struct gen {
    struct gen_opts o;
    struct backend *be;
    struct model *m;
    struct tokenizer *tok; // NULL when the model has none
    struct detok *detok;   // streaming text of the generated ids, with tok
    struct kv_cache *kv;
    struct batch_builder bb;
    float *logits;    // [n_vocab] on the host
    void *logits_dev; // [n_vocab] in device memory, device backends only
    int32_t *ids;     // prompt then generated tokens, [n_ctx]
    int n_prompt;
    int n_ids;
    int n_ctx;
    int32_t *block_table; // [n_blocks]: 0, 1, 2, ...
    int n_blocks;
    struct gen_candidate *cands; // [n_vocab] sampling scratch
    uint64_t rng;
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
        } else if (cli_opt(argc, argv, &i, "--max-tokens", "-n", &v)) {
            ok = v && cli_parse_int(a, v, 0, 1 << 24, &o->max_tokens);
        } else if (cli_opt(argc, argv, &i, "--temperature", "--temp", &v)) {
            ok = v && cli_parse_float(a, v, &o->temperature) && o->temperature >= 0;
        } else if (cli_opt(argc, argv, &i, "--top-k", NULL, &v)) {
            ok = v && cli_parse_int(a, v, 0, 1 << 30, &o->top_k);
        } else if (cli_opt(argc, argv, &i, "--top-p", NULL, &v)) {
            ok = v && cli_parse_float(a, v, &o->top_p) && o->top_p > 0 && o->top_p <= 1;
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

// ---- sampling ----

static uint64_t gen_rand(uint64_t *s)
{
    // splitmix64
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int cand_cmp(const void *a, const void *b)
{
    const struct gen_candidate *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}

static int32_t gen_sample(struct gen *g)
{
    int n = g->m->hp.n_vocab;
    const float *logits = g->logits;
    if (g->o.temperature <= 0 || g->o.top_k == 1) {
        int32_t best = 0;
        for (int i = 1; i < n; i++)
            if (logits[i] > logits[best])
                best = i;
        return best;
    }
    for (int i = 0; i < n; i++)
        g->cands[i] = (struct gen_candidate){logits[i], i};
    qsort(g->cands, (size_t)n, sizeof(*g->cands), cand_cmp);
    int k = g->o.top_k > 0 && g->o.top_k < n ? (int)g->o.top_k : n;
    double sum = 0, max = g->cands[0].logit;
    double *p = mem_alloc((size_t)k * sizeof(double));
    if (!p)
        return g->cands[0].id;
    for (int i = 0; i < k; i++) {
        p[i] = exp(((double)g->cands[i].logit - max) / g->o.temperature);
        sum += p[i];
    }
    // Keep the smallest prefix whose mass reaches top_p.
    double mass = 0;
    int keep = k;
    for (int i = 0; i < k; i++) {
        mass += p[i] / sum;
        if (mass >= g->o.top_p) {
            keep = i + 1;
            break;
        }
    }
    double kept = 0;
    for (int i = 0; i < keep; i++)
        kept += p[i];
    double r = (double)(gen_rand(&g->rng) >> 11) * 0x1.0p-53 * kept;
    int32_t pick = g->cands[keep - 1].id;
    for (int i = 0; i < keep; i++) {
        r -= p[i];
        if (r < 0) {
            pick = g->cands[i].id;
            break;
        }
    }
    mem_free(p);
    return pick;
}

// ---- running the model ----

// Runs ids[pos0, pos0 + n) and leaves the last token's logits in g->logits.
static int gen_forward(struct gen *g, int pos0, int n)
{
    struct err err = {0};
    struct model_batch b;
    struct tensor lt;
    batch_builder_clear(&g->bb);
    if (batch_builder_add(&g->bb, g->ids + pos0, n, pos0, g->block_table, g->n_blocks,
                          GEN_BLOCK_SIZE, BATCH_LOGITS_LAST, &err) ||
        batch_builder_finish(&g->bb, &b, &err)) {
        fprintf(stderr, "vllmc: %s\n", err.msg);
        return 1;
    }
    void *dst = g->logits_dev ? g->logits_dev : g->logits;
    tensor_init_2d(&lt, DTYPE_F32, dst, g->m->hp.n_vocab, 1);
    lt.location = backend_location(g->be);
    if (model_forward(g->m, &b, g->kv, &lt, &err)) {
        fprintf(stderr, "vllmc: forward: %s\n", err.msg);
        return 1;
    }
    if (g->logits_dev &&
        (backend_download(g->be, g->logits, g->logits_dev, (size_t)g->m->hp.n_vocab * 4) ||
         backend_sync(g->be))) {
        fprintf(stderr, "vllmc: %s\n", backend_err(g->be)->msg);
        return 1;
    }
    return 0;
}

// Prefills the prompt in chunks the model's scratch can hold.
static int gen_prefill(struct gen *g)
{
    for (int pos = 0; pos < g->n_prompt;) {
        int n = g->n_prompt - pos;
        if (n > g->m->n_tokens_max)
            n = g->m->n_tokens_max;
        if (gen_forward(g, pos, n))
            return 1;
        pos += n;
    }
    return 0;
}

// Prints the text the newest token completes (held back while a multi-byte
// character is still incomplete).
static void gen_emit(struct gen *g)
{
    if (g->o.print_ids)
        return;
    int32_t id = g->ids[g->n_ids - 1];
    if (!g->detok) {
        printf("%s%d", g->n_ids - 1 > g->n_prompt ? " " : "", id);
        fflush(stdout);
        return;
    }
    const char *text;
    size_t n;
    if (!detok_push(g->detok, id, &text, &n) && n) {
        fwrite(text, 1, n, stdout);
        fflush(stdout);
    }
}

static bool gen_is_end(const struct gen *g, int32_t id)
{
    if (g->tok)
        return tokenizer_is_eog(g->tok, id);
    return id == g->m->hp.eos_id;
}

static int gen_prompt(struct gen *g)
{
    int32_t *ids = NULL;
    int n = 0;
    if (g->o.prompt_ids) {
        if (!cli_parse_ids(g->o.prompt_ids, &ids, &n))
            return 2;
    } else if (g->tok) {
        const char *text = g->o.prompt ? g->o.prompt : "";
        size_t n_ids;
        if (tokenizer_encode(g->tok, text, strlen(text), TOKENIZER_ENCODE_ADD_SPECIAL, &ids,
                             &n_ids)) {
            fprintf(stderr, "vllmc: cannot tokenize the prompt\n");
            return 1;
        }
        n = (int)n_ids;
    } else if (g->o.prompt) {
        fprintf(stderr, "vllmc: %s has no tokenizer; give the prompt with --prompt-ids\n",
                g->m->path);
        return 2;
    }
    if (!n) {
        // An empty prompt starts from BOS, as llama.cpp and llama2.c do.
        mem_free(ids);
        ids = mem_alloc(sizeof(*ids));
        int32_t bos = g->tok ? tokenizer_bos_id(g->tok) : g->m->hp.bos_id;
        if (!ids || bos < 0) {
            mem_free(ids);
            fprintf(stderr, "vllmc: empty prompt and the model has no BOS token\n");
            return 2;
        }
        ids[0] = bos;
        n = 1;
    }
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= g->m->hp.n_vocab) {
            fprintf(stderr, "vllmc: prompt token %d is outside the vocabulary of %d\n", ids[i],
                    g->m->hp.n_vocab);
            mem_free(ids);
            return 2;
        }
    }
    g->n_prompt = n;
    g->n_ctx = n + (int)g->o.max_tokens;
    int n_ctx_train = g->m->hp.n_ctx_train;
    if (n_ctx_train > 0 && g->n_ctx > n_ctx_train) {
        g->n_ctx = n_ctx_train > n ? n_ctx_train : n;
        fprintf(stderr, "vllmc: generation stops at the model's context of %d tokens\n",
                n_ctx_train);
    }
    g->ids = mem_alloc((size_t)(g->n_ctx + 1) * sizeof(*g->ids));
    if (!g->ids) {
        mem_free(ids);
        return 1;
    }
    memcpy(g->ids, ids, (size_t)n * sizeof(*ids));
    g->n_ids = n;
    mem_free(ids);
    return 0;
}

static int gen_setup(struct gen *g)
{
    int rc = cli_backend_create(g->o.device, (int)g->o.threads, g->o.log_providers, &g->be);
    if (rc)
        return rc;
    struct err err = {0};
    if (model_load(g->o.model, g->be, NULL, &g->m, &err)) {
        fprintf(stderr, "vllmc: %s\n", err.msg);
        return 1;
    }
    enum vllmc_status st = g->m->gguf ? tokenizer_load_gguf(g->m->gguf, &g->tok, &err)
                                      : tokenizer_load_path(g->m->path, &g->tok, &err);
    if (st && st != VLLMC_ERR_NOT_FOUND) {
        fprintf(stderr, "vllmc: tokenizer: %s\n", err.msg);
        return 1;
    }
    if ((rc = gen_prompt(g)))
        return rc;
    if (g->tok && (detok_create(g->tok, TOKENIZER_DECODE_SKIP_SPECIAL, &g->detok) ||
                   detok_prime(g->detok, g->ids, (size_t)g->n_prompt))) {
        fprintf(stderr, "vllmc: out of memory\n");
        return 1;
    }
    g->n_blocks = (g->n_ctx + GEN_BLOCK_SIZE - 1) / GEN_BLOCK_SIZE;
    struct kv_cache_params kp;
    kv_cache_params_default(&kp);
    kp.block_size = GEN_BLOCK_SIZE;
    kp.n_blocks = g->n_blocks;
    if (kv_cache_create(g->m, &kp, &g->kv, &err)) {
        fprintf(stderr, "vllmc: %s\n", err.msg);
        return 1;
    }
    int n_vocab = g->m->hp.n_vocab;
    g->block_table = mem_alloc((size_t)g->n_blocks * sizeof(*g->block_table));
    g->logits = mem_alloc((size_t)n_vocab * sizeof(float));
    g->cands = mem_alloc((size_t)n_vocab * sizeof(*g->cands));
    if (!g->block_table || !g->logits || !g->cands ||
        batch_builder_init(&g->bb, g->be, g->m->n_tokens_max, 1, g->n_blocks)) {
        fprintf(stderr, "vllmc: out of memory\n");
        return 1;
    }
    if (backend_location(g->be) == TENSOR_DEVICE &&
        backend_buffer_alloc(g->be, (size_t)n_vocab * sizeof(float), &g->logits_dev)) {
        fprintf(stderr, "vllmc: %s\n", backend_err(g->be)->msg);
        return 1;
    }
    for (int i = 0; i < g->n_blocks; i++)
        g->block_table[i] = i;
    g->rng = g->o.seed;
    return 0;
}

static void gen_teardown(struct gen *g)
{
    if (g->logits_dev)
        backend_buffer_free(g->be, g->logits_dev);
    if (g->bb.host)
        batch_builder_deinit(&g->bb);
    mem_free(g->cands);
    mem_free(g->logits);
    mem_free(g->block_table);
    mem_free(g->ids);
    kv_cache_free(g->kv);
    detok_free(g->detok);
    tokenizer_free(g->tok);
    model_free(g->m);
    backend_free(g->be);
}

static int gen_run(struct gen *g)
{
    double t0 = time_now_s();
    if (gen_prefill(g))
        return 1;
    double t_prefill = time_now_s() - t0, t_decode = 0;
    int n_gen = 0;
    while (g->n_ids < g->n_ctx) {
        int32_t id = gen_sample(g);
        if (gen_is_end(g, id))
            break;
        g->ids[g->n_ids++] = id;
        n_gen++;
        gen_emit(g);
        if (g->n_ids == g->n_ctx)
            break;
        double t = time_now_s();
        if (gen_forward(g, g->n_ids - 1, 1))
            return 1;
        t_decode += time_now_s() - t;
    }
    if (g->o.print_ids) {
        printf("[");
        for (int i = g->n_prompt; i < g->n_ids; i++)
            printf("%s%d", i > g->n_prompt ? ", " : "", g->ids[i]);
        printf("]\n");
    } else {
        const char *text;
        size_t n;
        if (g->detok && !detok_flush(g->detok, &text, &n))
            fwrite(text, 1, n, stdout);
        printf("\n");
    }
    fflush(stdout);
    int n_decode = n_gen > 0 ? n_gen - 1 : 0;
    fprintf(stderr,
            "prompt tokens: %d, generated tokens: %d, prefill: %.1f tok/s, decode: %.1f tok/s\n",
            g->n_prompt, n_gen, t_prefill > 0 ? g->n_prompt / t_prefill : 0.0,
            t_decode > 0 ? n_decode / t_decode : 0.0);
    return 0;
}

int generate_main(int argc, char **argv)
{
    struct gen g = {0};
    int rc = gen_parse(&g.o, argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
    rc = gen_setup(&g);
    if (!rc)
        rc = gen_run(&g);
    gen_teardown(&g);
    return rc;
}
