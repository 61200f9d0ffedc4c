// Model forward pass against float64 reference outputs (shared/testdata/golden):
// first-step logits and greedy tokens of every copy of stories260K (GGUF v3,
// GGUF v1, HF safetensors single, sharded, BF16) and of the F16 random Llama;
// chunked prefill and batching give bit-identical logits on the CPU.
#include "model_runner.h"

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

// A BF16 checkpoint runs with its activations rounded to bf16 on the way into
// each matmul (as Hugging Face transformers and llama.cpp run one), so its
// logits get the bound of the bf16 KV cache: twice bf16's epsilon; greedy
// tokens stay exact (on AMX tiles too, where the CPU has them). With fp32
// activations (cpu-avx512bf16 and cpu-amx-bf16 left out, or a CPU without
// AVX512_BF16) the f32 bound holds.
static void test_stories_hf_bf16(void)
{
    run_golden_tol("stories260K-hf-bf16", "stories260K-hf-bf16.greedy.json", 1e-4, 2 * 0x1p-7,
                   32, DTYPE_F32);
    runner_disable = "cpu-avx512bf16,cpu-amx-bf16";
    run_golden("stories260K-hf-bf16", "stories260K-hf-bf16.greedy.json", 1e-4, 32);
    runner_disable = NULL;
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
        CHECK(0 && "model did not load");
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
    batch_builder_clear(&r.bb);
    CHECK_EQ_INT(batch_builder_add(&r.bb, other->prompt, other->n_prompt, 0, t2, N_BLOCKS,
                                   BLOCK_SIZE, BATCH_LOGITS_LAST, &err),
                 VLLMC_OK);
    CHECK_EQ_INT(batch_builder_add(&r.bb, g->prompt, g->n_prompt, 0, t3, N_BLOCKS, BLOCK_SIZE,
                                   BATCH_LOGITS_LAST, &err),
                 VLLMC_OK);
    CHECK_EQ_INT(batch_builder_finish(&r.bb, &b, &err), VLLMC_OK);
    CHECK(runner_forward(&r, &b));
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
