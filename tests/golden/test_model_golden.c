// Model forward pass against float64 reference outputs (shared/testdata/golden):
// first-step logits and greedy tokens of every copy of stories260K (GGUF v3,
// GGUF v1, HF safetensors single, sharded, BF16) and of the F16 random Llama;
// chunked prefill and batching give bit-identical logits on the CPU.
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
    float *logits; // [MAX_SEQS, n_vocab]
};

static int load_golden(const char *name, struct golden_case *cases, int max_cases)
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

static bool runner_init_kv(struct runner *r, const char *model_rel, enum dtype kv_dtype)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/%s", VLLMC_SHARED_DIR, model_rel);
    struct err err = {0};
    struct backend_options o;
    backend_options_default(&o);
    o.n_threads = 1;
    memset(r, 0, sizeof(*r));
    if (backend_create("cpu", &o, &r->be, &err) || model_load(path, r->be, NULL, &r->m, &err)) {
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
    r->logits = mem_calloc((size_t)MAX_SEQS * (size_t)r->m->hp.n_vocab, sizeof(float));
    return r->kv && r->logits;
}

static bool runner_init(struct runner *r, const char *model_rel)
{
    return runner_init_kv(r, model_rel, DTYPE_F32);
}

static void runner_deinit(struct runner *r)
{
    mem_free(r->logits);
    batch_builder_deinit(&r->bb);
    kv_cache_free(r->kv);
    model_free(r->m);
    backend_free(r->be);
}

// Runs n tokens of sequence seq (its own range of blocks) from position pos0
// and leaves the logits of the last token in r->logits.
static bool runner_step(struct runner *r, int seq, const int32_t *ids, int n, int pos0)
{
    int32_t table[N_BLOCKS];
    for (int i = 0; i < N_BLOCKS; i++)
        table[i] = seq * N_BLOCKS + i;
    struct err err = {0};
    struct model_batch b;
    struct tensor lt;
    batch_builder_clear(&r->bb);
    if (batch_builder_add(&r->bb, ids, n, pos0, table, N_BLOCKS, BLOCK_SIZE, BATCH_LOGITS_LAST,
                          &err) ||
        batch_builder_finish(&r->bb, &b, &err)) {
        fprintf(stderr, "batch: %s\n", err.msg);
        return false;
    }
    tensor_init_2d(&lt, DTYPE_F32, r->logits, r->m->hp.n_vocab, 1);
    if (model_forward(r->m, &b, r->kv, &lt, &err)) {
        fprintf(stderr, "forward: %s\n", err.msg);
        return false;
    }
    return true;
}

static int32_t argmax(const float *x, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

// Greedy decoding after the prompt; returns how many tokens matched before
// the first divergence, and checks the first n_strict strictly.
static int check_greedy(struct runner *r, int seq, const struct golden_case *g, int n_strict)
{
    int n_vocab = r->m->hp.n_vocab;
    if (!runner_step(r, seq, g->prompt, g->n_prompt, 0)) {
        CHECK(!"prefill failed");
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
                CHECK(!"greedy token differs inside the strict prefix");
            else
                // Past the strict prefix only a near-tie in the reference may flip.
                CHECK(g->margin[i] < 0.1);
        }
        if (!runner_step(r, seq, &tok, 1, g->n_prompt + i)) {
            CHECK(!"decode failed");
            break;
        }
    }
    return matched;
}

// |logit - golden| <= atol + rtol * max|golden logit|: K/V rounding shifts
// every logit by about the same amount, whatever its own size.
static void check_first_logits(struct runner *r, int seq, const struct golden_case *g, double atol,
                               double rtol)
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

// rtol is twice the epsilon of the KV cache dtype (1e-5 for f32 arithmetic
// against the float64 reference).
static void run_golden_kv(const char *model_rel, const char *golden, double atol, int n_strict,
                          enum dtype kv_dtype)
{
    static struct golden_case cases[8];
    int n = load_golden(golden, cases, 8);
    CHECK(n > 0);
    struct runner r;
    if (!runner_init_kv(&r, model_rel, kv_dtype)) {
        CHECK(!"model did not load");
        runner_deinit(&r);
        return;
    }
    for (int c = 0; c < n; c++) {
        double rtol = kv_dtype == DTYPE_F16    ? 2 * 0x1p-10
                      : kv_dtype == DTYPE_BF16 ? 2 * 0x1p-7
                                               : 1e-5;
        check_first_logits(&r, c % MAX_SEQS, &cases[c], atol, rtol);
        int matched = check_greedy(&r, c % MAX_SEQS, &cases[c], n_strict);
        printf("  case %d: %d of %d greedy tokens match\n", c, matched, cases[c].n_gen);
    }
    runner_deinit(&r);
}

static void run_golden(const char *model_rel, const char *golden, double atol, int n_strict)
{
    run_golden_kv(model_rel, golden, atol, n_strict, DTYPE_F32);
}

static void test_stories_gguf_v3(void)
{
    run_golden("stories260K.gguf", "stories260K.greedy.json", 1e-4, 32);
}

static void test_stories_gguf_v1(void)
{
    run_golden("tinyllamas-stories-260k-f32.gguf", "stories260K.greedy.json", 1e-4, 32);
}

static void test_stories_hf(void)
{
    run_golden("stories260K-hf", "stories260K.greedy.json", 1e-4, 32);
}

static void test_stories_hf_sharded(void)
{
    run_golden("stories260K-hf-sharded", "stories260K.greedy.json", 1e-4, 32);
}

static void test_stories_hf_bf16(void)
{
    run_golden("stories260K-hf-bf16", "stories260K-hf-bf16.greedy.json", 1e-4, 32);
}

// A half-precision KV cache: logits within f16 rounding of K and V, the first
// 32 greedy tokens exact (later ones may flip only at near-ties).
static void test_stories_kv_f16(void)
{
    run_golden_kv("stories260K.gguf", "stories260K.greedy.json", 1e-4, 32, DTYPE_F16);
}

static void test_stories_kv_bf16(void)
{
    run_golden_kv("stories260K.gguf", "stories260K.greedy.json", 1e-4, 32, DTYPE_BF16);
}

// Random weights: the reference's margins fall to ~0.001 after a step or two.
static void test_llama2_tiny_random_f16(void)
{
    run_golden("llama-2-tiny-random.gguf", "llama-2-tiny-random.greedy.json", 1e-4, 2);
}

// Prefill in chunks (3 then 2 tokens) and prefill next to another sequence in
// one batch give the same logits, bit for bit, as one whole prefill.
static void test_chunked_and_batched_prefill(void)
{
    static struct golden_case cases[8];
    int n = load_golden("stories260K.greedy.json", cases, 8);
    CHECK(n >= 3);
    struct runner r;
    if (!runner_init(&r, "stories260K.gguf")) {
        CHECK(!"model did not load");
        runner_deinit(&r);
        return;
    }
    int n_vocab = r.m->hp.n_vocab;
    const struct golden_case *g = &cases[0], *other = &cases[2];
    CHECK_EQ_INT(g->n_prompt, 5);
    float *whole = mem_alloc((size_t)n_vocab * sizeof(float));
    CHECK(runner_step(&r, 0, g->prompt, g->n_prompt, 0));
    memcpy(whole, r.logits, (size_t)n_vocab * sizeof(float));

    CHECK(runner_step(&r, 1, g->prompt, 3, 0));
    CHECK(runner_step(&r, 1, g->prompt + 3, 2, 3));
    CHECK(!memcmp(whole, r.logits, (size_t)n_vocab * sizeof(float)));

    // Two sequences in one flat batch, logits for both last tokens.
    struct err err = {0};
    int32_t t2[N_BLOCKS], t3[N_BLOCKS];
    for (int i = 0; i < N_BLOCKS; i++) {
        t2[i] = 2 * N_BLOCKS + i;
        t3[i] = 3 * N_BLOCKS + i;
    }
    struct model_batch b;
    struct tensor lt;
    batch_builder_clear(&r.bb);
    CHECK_EQ_INT(batch_builder_add(&r.bb, other->prompt, other->n_prompt, 0, t2, N_BLOCKS,
                                   BLOCK_SIZE, BATCH_LOGITS_LAST, &err),
                 VLLMC_OK);
    CHECK_EQ_INT(batch_builder_add(&r.bb, g->prompt, g->n_prompt, 0, t3, N_BLOCKS, BLOCK_SIZE,
                                   BATCH_LOGITS_LAST, &err),
                 VLLMC_OK);
    CHECK_EQ_INT(batch_builder_finish(&r.bb, &b, &err), VLLMC_OK);
    tensor_init_2d(&lt, DTYPE_F32, r.logits, n_vocab, 2);
    CHECK_EQ_INT(model_forward(r.m, &b, r.kv, &lt, &err), VLLMC_OK);
    CHECK(!memcmp(whole, r.logits + n_vocab, (size_t)n_vocab * sizeof(float)));
    for (int i = 0; i < n_vocab; i++)
        CHECK_NEAR(r.logits[i], other->logits[i], 1e-4, 1e-5);
    mem_free(whole);
    runner_deinit(&r);
}

// The GGUF (adjacent-pair RoPE) and HF (rotate-half) copies agree closely.
static void test_gguf_and_hf_agree(void)
{
    static struct golden_case cases[8];
    int n = load_golden("stories260K.greedy.json", cases, 8);
    CHECK(n > 0);
    struct runner a, b;
    bool ok = runner_init(&a, "stories260K.gguf") && runner_init(&b, "stories260K-hf");
    CHECK(ok);
    if (ok) {
        CHECK(!a.m->hp.rope_neox);
        CHECK(b.m->hp.rope_neox);
        for (int c = 0; c < n; c++) {
            CHECK(runner_step(&a, 0, cases[c].prompt, cases[c].n_prompt, 0));
            CHECK(runner_step(&b, 0, cases[c].prompt, cases[c].n_prompt, 0));
            for (int i = 0; i < a.m->hp.n_vocab; i++)
                CHECK_NEAR(a.logits[i], b.logits[i], 2e-5, 1e-5);
        }
    }
    runner_deinit(&b);
    runner_deinit(&a);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"stories_gguf_v3", test_stories_gguf_v3},
        {"stories_gguf_v1", test_stories_gguf_v1},
        {"stories_hf", test_stories_hf},
        {"stories_hf_sharded", test_stories_hf_sharded},
        {"stories_hf_bf16", test_stories_hf_bf16},
        {"llama2_tiny_random_f16", test_llama2_tiny_random_f16},
        {"stories_kv_f16", test_stories_kv_f16},
        {"stories_kv_bf16", test_stories_kv_bf16},
        {"chunked_and_batched_prefill", test_chunked_and_batched_prefill},
        {"gguf_and_hf_agree", test_gguf_and_hf_agree},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
