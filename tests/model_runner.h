// Test helper shared by the model golden tests (CPU and GPU): reads
// shared/testdata/golden files and drives a model on one backend with
// contiguous KV blocks, checking first-step logits and greedy tokens.
#ifndef VLLMC_TESTS_MODEL_RUNNER_H
#define VLLMC_TESTS_MODEL_RUNNER_H

#include <jansson.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "check.h"
#include "core/alloc.h"
#include "model/batch_builder.h"
#include "model/kv_cache.h"
#include "model/model.h"

#define BLOCK_SIZE 16
#define N_BLOCKS 16 // 256 tokens per sequence: prompt + 128 generated fit
#define MAX_SEQS 4

struct golden_case {
    int32_t prompt[64];
    int n_prompt;
    int32_t gen[256];
    int n_gen;
    double margin[256];   // top1 - top2 logit per generated step
    double logits[32000]; // first-step logits, where given
    int n_logits;         // 0 when the golden has only top10
    int32_t top_ids[10];
    double top_logits[10];
    int n_top;
};

struct runner {
    struct backend *be;
    struct model *m;
    struct kv_cache *kv;
    struct batch_builder bb;
    float *logits;    // [MAX_SEQS, n_vocab] on the host
    void *logits_dev; // the same in device memory, device backends only
};

// The backend every runner uses ("cpu" unless a test sets it first).
static const char *runner_backend = "cpu";
// Providers the runner's backend leaves out (NULL: VLLMC_OP_PROVIDER_DISABLE).
static const char *runner_disable = NULL;
// Load parameters of the runner's model (NULL: model_load_params_default).
static const struct model_load_params *runner_load_params = NULL;

static inline int load_golden(const char *name, struct golden_case *cases, int max_cases)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/testdata/golden/%s", VLLMC_SHARED_DIR, name);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        return 0;
    }
    json_t *arr = json_object_get(root, "cases");
    int n = 0;
    for (size_t i = 0; i < json_array_size(arr) && n < max_cases; i++, n++) {
        json_t *c = json_array_get(arr, i), *v;
        struct golden_case *g = &cases[n];
        memset(g, 0, sizeof(*g));
        size_t j;
        json_array_foreach(json_object_get(c, "prompt_token_ids"), j, v) g->prompt[g->n_prompt++] =
            (int32_t)json_integer_value(v);
        json_array_foreach(json_object_get(c, "generated_token_ids"), j, v) g->gen[g->n_gen++] =
            (int32_t)json_integer_value(v);
        json_array_foreach(json_object_get(c, "top1_minus_top2_logit_margin_per_step"), j, v)
            g->margin[j] = json_number_value(v);
        json_array_foreach(json_object_get(c, "first_step_logits"), j, v) g->logits[g->n_logits++] =
            json_number_value(v);
        json_array_foreach(json_object_get(c, "first_step_top10"), j, v)
        {
            g->top_ids[g->n_top] = (int32_t)json_integer_value(json_array_get(v, 0));
            g->top_logits[g->n_top++] = json_number_value(json_array_get(v, 1));
        }
    }
    json_decref(root);
    return n;
}

// Loads the model at path on runner_backend with a KV cache of kv_dtype.
static inline bool runner_init_path(struct runner *r, const char *path, enum dtype kv_dtype)
{
    struct err err = {0};
    struct backend_options o;
    backend_options_default(&o);
    o.n_threads = 1;
    o.disable = runner_disable;
    memset(r, 0, sizeof(*r));
    if (backend_create(runner_backend, &o, &r->be, &err) ||
        model_load(path, r->be, runner_load_params, &r->m, &err)) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        return false;
    }
    struct kv_cache_params kp;
    kv_cache_params_default(&kp);
    kp.block_size = BLOCK_SIZE;
    kp.n_blocks = N_BLOCKS * MAX_SEQS;
    kp.dtype = kv_dtype;
    CHECK_EQ_INT(kv_cache_create(r->m, &kp, &r->kv, &err), VLLMC_OK);
    CHECK_EQ_INT(batch_builder_init(&r->bb, r->be, 512, MAX_SEQS, N_BLOCKS), VLLMC_OK);
    size_t logits_bytes = (size_t)MAX_SEQS * (size_t)r->m->hp.n_vocab * sizeof(float);
    r->logits = mem_calloc(1, logits_bytes);
    if (backend_location(r->be) == TENSOR_DEVICE)
        CHECK_EQ_INT(backend_buffer_alloc(r->be, logits_bytes, &r->logits_dev), VLLMC_OK);
    return r->kv && r->logits;
}

// Loads shared/models/<model_rel>.
static inline bool runner_init_kv(struct runner *r, const char *model_rel, enum dtype kv_dtype)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/%s", VLLMC_SHARED_DIR, model_rel);
    return runner_init_path(r, path, kv_dtype);
}

static inline bool runner_init(struct runner *r, const char *model_rel)
{
    return runner_init_kv(r, model_rel, DTYPE_F32);
}

static inline void runner_deinit(struct runner *r)
{
    if (r->logits_dev)
        backend_buffer_free(r->be, r->logits_dev);
    mem_free(r->logits);
    batch_builder_deinit(&r->bb);
    kv_cache_free(r->kv);
    model_free(r->m);
    backend_free(r->be);
}

// Runs a finished batch and brings its n_logits rows of logits to r->logits.
static inline bool runner_forward(struct runner *r, const struct model_batch *b)
{
    struct err err = {0};
    struct tensor lt;
    tensor_init_2d(&lt, DTYPE_F32, r->logits_dev ? r->logits_dev : r->logits, r->m->hp.n_vocab,
                   b->n_logits);
    lt.location = backend_location(r->be);
    if (model_forward(r->m, b, r->kv, &lt, &err)) {
        fprintf(stderr, "forward: %s\n", err.msg);
        return false;
    }
    size_t n = (size_t)b->n_logits * (size_t)r->m->hp.n_vocab * sizeof(float);
    if (r->logits_dev &&
        (backend_download(r->be, r->logits, r->logits_dev, n) || backend_sync(r->be))) {
        fprintf(stderr, "download: %s\n", backend_err(r->be)->msg);
        return false;
    }
    return true;
}

// Runs n tokens of sequence seq (its own range of blocks) from position pos0
// and leaves the logits of the last token in r->logits.
static inline bool runner_step(struct runner *r, int seq, const int32_t *ids, int n, int pos0)
{
    int32_t table[N_BLOCKS];
    for (int i = 0; i < N_BLOCKS; i++)
        table[i] = seq * N_BLOCKS + i;
    struct err err = {0};
    struct model_batch b;
    batch_builder_clear(&r->bb);
    if (batch_builder_add(&r->bb, ids, n, pos0, table, N_BLOCKS, BLOCK_SIZE, BATCH_LOGITS_LAST,
                          &err) ||
        batch_builder_finish(&r->bb, &b, &err)) {
        fprintf(stderr, "batch: %s\n", err.msg);
        return false;
    }
    return runner_forward(r, &b);
}

static inline int32_t argmax(const float *x, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

// Greedy decoding after the prompt; returns how many tokens matched before
// the first divergence, and checks the first n_strict strictly.
static inline int check_greedy(struct runner *r, int seq, const struct golden_case *g, int n_strict)
{
    int n_vocab = r->m->hp.n_vocab;
    if (!runner_step(r, seq, g->prompt, g->n_prompt, 0)) {
        CHECK(0 && "prefill failed");
        return 0;
    }
    int matched = 0;
    bool diverged = false;
    for (int i = 0; i < g->n_gen; i++) {
        int32_t tok = argmax(r->logits, n_vocab);
        if (!diverged && tok == g->gen[i]) {
            matched++;
        } else if (!diverged) {
            diverged = true;
            fprintf(stderr, "  diverges at step %d: %d vs golden %d (golden margin %.4f)\n", i, tok,
                    g->gen[i], g->margin[i]);
            if (i < n_strict)
                CHECK(0 && "greedy token differs inside the strict prefix");
            else
                // Past the strict prefix only a near-tie in the reference may flip.
                CHECK(g->margin[i] < 0.1);
        }
        if (!runner_step(r, seq, &tok, 1, g->n_prompt + i)) {
            CHECK(0 && "decode failed");
            break;
        }
    }
    return matched;
}

// |logit - golden| <= atol + rtol * max|golden logit|: K/V rounding shifts
// every logit by about the same amount, whatever its own size.
static inline void check_first_logits(struct runner *r, int seq, const struct golden_case *g,
                                      double atol, double rtol)
{
    CHECK(runner_step(r, seq, g->prompt, g->n_prompt, 0));
    double scale = 0, max_err = 0;
    for (int i = 0; i < g->n_logits; i++)
        scale = fabs(g->logits[i]) > scale ? fabs(g->logits[i]) : scale;
    for (int i = 0; i < g->n_top; i++)
        scale = fabs(g->top_logits[i]) > scale ? fabs(g->top_logits[i]) : scale;
    double tol = atol + rtol * scale;
    for (int i = 0; i < g->n_logits; i++) {
        CHECK_NEAR(r->logits[i], g->logits[i], tol, 0);
        double e = fabs(r->logits[i] - g->logits[i]);
        max_err = e > max_err ? e : max_err;
    }
    for (int i = 0; i < g->n_top; i++) {
        CHECK_NEAR(r->logits[g->top_ids[i]], g->top_logits[i], tol, 0);
        double e = fabs(r->logits[g->top_ids[i]] - g->top_logits[i]);
        max_err = e > max_err ? e : max_err;
    }
    printf("  prompt of %d tokens: max |logit - golden| = %.2e (bound %.2e) over %d logits\n",
           g->n_prompt, max_err, tol, g->n_logits + g->n_top);
}

// First-step logits within atol + rtol * max|golden logit| and greedy tokens,
// for every case of golden.
static inline void run_golden_tol(const char *model_rel, const char *golden, double atol,
                                  double rtol, int n_strict, enum dtype kv_dtype)
{
    static struct golden_case cases[8];
    int n = load_golden(golden, cases, 8);
    CHECK(n > 0);
    struct runner r;
    if (!runner_init_kv(&r, model_rel, kv_dtype)) {
        CHECK(0 && "model did not load");
        runner_deinit(&r);
        return;
    }
    for (int c = 0; c < n; c++) {
        check_first_logits(&r, c % MAX_SEQS, &cases[c], atol, rtol);
        int matched = check_greedy(&r, c % MAX_SEQS, &cases[c], n_strict);
        printf("  case %d: %d of %d greedy tokens match\n", c, matched, cases[c].n_gen);
    }
    runner_deinit(&r);
}

// rtol is twice the epsilon of the KV cache dtype (1e-5 for f32 arithmetic
// against the float64 reference).
static inline void run_golden_kv(const char *model_rel, const char *golden, double atol,
                                 int n_strict, enum dtype kv_dtype)
{
    double rtol = kv_dtype == DTYPE_F16    ? 2 * 0x1p-10
                  : kv_dtype == DTYPE_BF16 ? 2 * 0x1p-7
                                           : 1e-5;
    run_golden_tol(model_rel, golden, atol, rtol, n_strict, kv_dtype);
}

static inline void run_golden(const char *model_rel, const char *golden, double atol, int n_strict)
{
    run_golden_kv(model_rel, golden, atol, n_strict, DTYPE_F32);
}

#endif
