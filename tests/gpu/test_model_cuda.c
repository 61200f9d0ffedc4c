// The forward pass on the CUDA backend (weights uploaded once, batches and
// logits moving between host and device): greedy tokens and logits of the
// bundled model agree with the CPU backend step by step; chunked prefill
// agrees with whole prefill; where shared/testdata is present, the float64
// goldens of the CPU suite hold on the GPU too. Skips (exit 77) without a GPU.
#include <sys/stat.h>

#include "model_runner.h"

#define SKIP_CODE 77

// Prompts of testdata/golden/stories260K.greedy.json.
static const int32_t prompt_once[] = {1, 403, 407, 261, 378};
static const int32_t prompt_bos[] = {1};
static const int32_t prompt_lily[] = {1, 317, 269, 274, 287, 382, 276, 374, 419, 426};
static const int32_t prompt_dog[] = {1, 291, 376, 400, 428};

// Greedy decoding on CUDA and CPU side by side from the bundled model.
static void test_cuda_matches_cpu(void)
{
    const struct {
        const int32_t *ids;
        int n;
    } prompts[] = {{prompt_once, 5}, {prompt_bos, 1}, {prompt_lily, 10}, {prompt_dog, 5}};
    char model[1024];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf", VLLMC_SOURCE_DIR);
    struct runner g, c;
    runner_backend = "cpu";
    bool ok = runner_init_path(&c, model, DTYPE_F32);
    runner_backend = "cuda";
    ok = runner_init_path(&g, model, DTYPE_F32) && ok;
    CHECK(ok);
    for (size_t p = 0; ok && p < sizeof(prompts) / sizeof(prompts[0]); p++) {
        int n_vocab = g.m->hp.n_vocab, pos = prompts[p].n;
        CHECK(runner_step(&g, (int)p, prompts[p].ids, prompts[p].n, 0));
        CHECK(runner_step(&c, (int)p, prompts[p].ids, prompts[p].n, 0));
        double max_err = 0;
        int same = 0;
        for (int step = 0; step < 64; step++, pos++) {
            for (int i = 0; i < n_vocab; i++) {
                double e = fabs(g.logits[i] - c.logits[i]);
                max_err = e > max_err ? e : max_err;
                CHECK_NEAR(g.logits[i], c.logits[i], 1e-3, 1e-4);
            }
            int32_t tg = argmax(g.logits, n_vocab), tc = argmax(c.logits, n_vocab);
            CHECK_EQ_INT(tg, tc);
            if (tg != tc)
                break;
            same++;
            CHECK(runner_step(&g, (int)p, &tg, 1, pos));
            CHECK(runner_step(&c, (int)p, &tc, 1, pos));
        }
        printf("  prompt %zu: %d greedy tokens equal, max |cuda - cpu| logit %.2e\n", p, same,
               max_err);
    }
    runner_deinit(&g);
    runner_deinit(&c);
}

// Prefill in chunks (3 + 2 tokens) against one whole prefill, on the GPU.
static void test_chunked_prefill(void)
{
    char model[1024];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf", VLLMC_SOURCE_DIR);
    struct runner g;
    runner_backend = "cuda";
    if (!runner_init_path(&g, model, DTYPE_F32)) {
        CHECK(0 && "model did not load");
        runner_deinit(&g);
        return;
    }
    int n_vocab = g.m->hp.n_vocab;
    float *whole = mem_alloc((size_t)n_vocab * sizeof(float));
    CHECK(runner_step(&g, 0, prompt_once, 5, 0));
    memcpy(whole, g.logits, (size_t)n_vocab * sizeof(float));
    CHECK(runner_step(&g, 1, prompt_once, 3, 0));
    CHECK(runner_step(&g, 1, prompt_once + 3, 2, 3));
    for (int i = 0; i < n_vocab; i++)
        CHECK_NEAR(g.logits[i], whole[i], 1e-4, 1e-5);
    mem_free(whole);
    runner_deinit(&g);
}

static bool have_shared(void)
{
    char p[1024];
    struct stat st;
    snprintf(p, sizeof(p), "%s/testdata/golden/stories260K.greedy.json", VLLMC_SHARED_DIR);
    if (stat(p, &st) == 0)
        return true;
    printf("  %s is absent: golden cases not run here\n", p);
    return false;
}

static void test_goldens(void)
{
    if (!have_shared())
        return;
    runner_backend = "cuda";
    run_golden("stories260K.gguf", "stories260K.greedy.json", 1e-4, 32);
    run_golden("stories260K-hf-sharded", "stories260K.greedy.json", 1e-4, 32);
    run_golden("stories260K-hf-bf16", "stories260K-hf-bf16.greedy.json", 1e-4, 32);
    run_golden("llama-2-tiny-random.gguf", "llama-2-tiny-random.greedy.json", 1e-4, 2);
    run_golden_kv("stories260K.gguf", "stories260K.greedy.json", 1e-4, 32, DTYPE_F16);
}

int main(int argc, char **argv)
{
    struct backend *be = NULL;
    struct backend_options o;
    backend_options_default(&o);
    struct err err = {0};
    if (backend_create("cuda", &o, &be, &err)) {
        printf("SKIPPED: no CUDA device (%s)\n", err.msg);
        return SKIP_CODE;
    }
    backend_free(be);
    static const struct check_case cases[] = {
        {"cuda_matches_cpu", test_cuda_matches_cpu},
        {"chunked_prefill", test_chunked_prefill},
        {"goldens", test_goldens},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
