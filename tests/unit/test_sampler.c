// Sampler: processors and penalties against hand-computed logits, the
// temperature / min_p / top_k / top_p distributions against hand-computed
// softmaxes (values from Python's math module), seeded reproducibility
// whatever the batch, raw logprobs and ranks; the row maximum and greedy
// argmax against a plain loop.
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "core/alloc.h"
#include "engine/sampler.h"
#include "engine/sampler_row.h"

static const float base_logits[5] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f};

static void check_probs(const double *got, const double *want, int n)
{
    for (int i = 0; i < n; i++)
        CHECK_NEAR(got[i], want[i], 1e-6, 0);
}

static struct sampler *make_sampler(int n_vocab, int32_t eos)
{
    struct sampler *sm = NULL;
    CHECK_EQ_INT(sampler_create(n_vocab, eos, NULL, 0, &sm), VLLMC_OK);
    return sm;
}

static void test_distributions(void)
{
    struct sampler *sm = make_sampler(5, -1);
    struct vllmc_sampling_params sp;
    double p[5];

    vllmc_sampling_params_default(&sp);
    sampler_distribution(sm, &sp, base_logits, p);
    check_probs(p,
                (double[]){0.5630212318141845, 0.20712393612745927, 0.1256270176216652,
                           0.07619663787579924, 0.028031176560891775},
                5);

    sp.temperature = 0.5f;
    sampler_distribution(sm, &sp, base_logits, p);
    check_probs(p,
                (double[]){0.8292446440257714, 0.11222605877167184, 0.041285659785796076,
                           0.015188145450392949, 0.0020554919663678005},
                5);

    vllmc_sampling_params_default(&sp);
    sp.top_k = 2;
    sampler_distribution(sm, &sp, base_logits, p);
    check_probs(p, (double[]){0.7310585786300049, 0.2689414213699951, 0, 0, 0}, 5);

    // top_p 0.8: the two least likely (0.028 + 0.076 <= 0.2) go, the third
    // would bring the dropped mass to 0.23 > 0.2 and stays.
    vllmc_sampling_params_default(&sp);
    sp.top_p = 0.8f;
    sampler_distribution(sm, &sp, base_logits, p);
    check_probs(p, (double[]){0.6285317192117624, 0.23122389762214907, 0.14024438316608848, 0, 0},
                5);

    // min_p 0.2: keep p >= 0.2 * p_max, i.e. logit >= 2 + ln 0.2 = 0.39.
    vllmc_sampling_params_default(&sp);
    sp.min_p = 0.2f;
    sampler_distribution(sm, &sp, base_logits, p);
    check_probs(p, (double[]){0.6285317192117624, 0.23122389762214907, 0.14024438316608848, 0, 0},
                5);

    // All together, in vLLM's order: temperature 2, min_p 0.1 (keeps all),
    // top_k 3, then top_p 0.9 over those three (keeps all three).
    vllmc_sampling_params_default(&sp);
    sp.temperature = 2.0f;
    sp.min_p = 0.1f;
    sp.top_k = 3;
    sp.top_p = 0.9f;
    sampler_distribution(sm, &sp, base_logits, p);
    check_probs(p, (double[]){0.48102426325336967, 0.29175596372884977, 0.2272197730177806, 0, 0},
                5);

    // top_k keeps every token tied with the k-th.
    const float tied[5] = {1.0f, 1.0f, 1.0f, 0.0f, -INFINITY};
    vllmc_sampling_params_default(&sp);
    sp.top_k = 2;
    sampler_distribution(sm, &sp, tied, p);
    check_probs(p, (double[]){1.0 / 3, 1.0 / 3, 1.0 / 3, 0, 0}, 5);

    // Greedy: the first of equal maxima.
    vllmc_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sampler_distribution(sm, &sp, tied, p);
    check_probs(p, (double[]){1, 0, 0, 0, 0}, 5);
    sampler_free(sm);
}

static void test_penalties(void)
{
    struct sampler *sm = make_sampler(6, -1);
    struct vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.repetition_penalty = 2.0f;
    sp.frequency_penalty = 0.5f;
    sp.presence_penalty = 0.25f;
    float l[6] = {1.0f, -1.0f, 0.5f, 2.0f, -0.5f, 0.0f};
    int32_t prompt[2] = {0, 1}, output[3] = {2, 2, 3};
    struct sample_input in = {
        .sp = &sp, .prompt_ids = prompt, .n_prompt = 2, .output_ids = output, .n_output = 3};
    sampler_apply_processors(sm, &in, l);
    // Repetition (prompt and output) divides positive and multiplies negative
    // logits; frequency subtracts 0.5 per output occurrence; presence 0.25 once.
    const float want[6] = {0.5f, -2.0f, -1.0f, 0.25f, -0.5f, 0.0f};
    for (int i = 0; i < 6; i++)
        CHECK_NEAR(l[i], want[i], 1e-6, 0);
    // Scratch is clean for the next row: no penalties without tokens.
    float l2[6] = {1.0f, -1.0f, 0.5f, 2.0f, -0.5f, 0.0f};
    struct sample_input none = {.sp = &sp};
    sampler_apply_processors(sm, &none, l2);
    const float same[6] = {1.0f, -1.0f, 0.5f, 2.0f, -0.5f, 0.0f};
    for (int i = 0; i < 6; i++)
        CHECK_NEAR(l2[i], same[i], 0, 0);
    sampler_free(sm);
}

static void test_logit_bias_and_min_tokens(void)
{
    int32_t extra_eos = 2;
    struct sampler *sm = NULL;
    CHECK_EQ_INT(sampler_create(5, 4, &extra_eos, 1, &sm), VLLMC_OK);
    struct vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.temperature = 0;
    struct vllmc_logit_bias lb[2] = {{3, 5.0f}, {0, -1.5f}};
    sp.logit_bias = lb;
    sp.n_logit_bias = 2;
    struct sample_input in = {.sp = &sp};
    float l[5] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f};
    sampler_apply_processors(sm, &in, l);
    CHECK_NEAR(l[3], 5.0f, 0, 0);
    CHECK_NEAR(l[0], 0.5f, 0, 0);
    CHECK_EQ_INT(sampler_sample(sm, &in, base_logits), 3);

    // min_tokens masks EOS (4), the extra end id (2) and stop_token_ids (1),
    // even with ignore_eos, until enough tokens were generated.
    vllmc_sampling_params_default(&sp);
    sp.temperature = 0;
    sp.min_tokens = 2;
    sp.ignore_eos = true;
    int32_t stop_ids[1] = {1};
    sp.stop_token_ids = stop_ids;
    sp.n_stop_token_ids = 1;
    const float eos_wins[5] = {0.0f, 3.0f, 4.0f, 1.0f, 9.0f};
    int32_t out[2] = {0, 0};
    in = (struct sample_input){.sp = &sp, .output_ids = out, .n_output = 1};
    CHECK_EQ_INT(sampler_sample(sm, &in, eos_wins), 3);
    in.n_output = 2;
    CHECK_EQ_INT(sampler_sample(sm, &in, eos_wins), 4);

    // Stop ids: EOS and extra end ids unless ignore_eos; stop_token_ids always.
    CHECK(sampler_is_stop_token(sm, &sp, 1));
    CHECK(!sampler_is_stop_token(sm, &sp, 4));
    CHECK(!sampler_is_stop_token(sm, &sp, 2));
    sp.ignore_eos = false;
    CHECK(sampler_is_stop_token(sm, &sp, 4));
    CHECK(sampler_is_stop_token(sm, &sp, 2));
    CHECK(!sampler_is_stop_token(sm, &sp, 0));
    sampler_free(sm);
}

// Logits of step t for a request: a fixed function, so runs can be compared.
static void step_logits(float *l, int n, int t, int salt)
{
    for (int i = 0; i < n; i++)
        l[i] = (float)sin(0.37 * i + 0.11 * t + salt) * 2.0f;
}

static void test_seed_batch_invariance(void)
{
    enum { V = 64, T = 40 };
    struct sampler *sm = make_sampler(V, -1);
    struct vllmc_sampling_params a, b;
    vllmc_sampling_params_default(&a);
    a.top_p = 0.9f;
    a.top_k = 20;
    vllmc_sampling_params_default(&b);
    b.temperature = 1.3f;
    float l[V];
    int32_t alone[T], mixed[T];

    struct rng ra;
    rng_seed(&ra, 42);
    for (int t = 0; t < T; t++) {
        step_logits(l, V, t, 0);
        struct sample_input in = {.sp = &a, .output_ids = alone, .n_output = t, .rng = &ra};
        alone[t] = sampler_sample(sm, &in, l);
    }
    // The same request sharing steps with others, in varying order.
    struct rng ra2, rb, rc;
    rng_seed(&ra2, 42);
    rng_seed(&rb, 7);
    rng_seed(&rc, 42 + 1);
    int32_t other[T];
    for (int t = 0; t < T; t++) {
        struct sample_input ib = {.sp = &b, .output_ids = other, .n_output = 0, .rng = &rb};
        struct sample_input ic = {.sp = &a, .output_ids = other, .n_output = 0, .rng = &rc};
        if (t % 2) {
            step_logits(l, V, t, 5);
            sampler_sample(sm, &ib, l);
        }
        step_logits(l, V, t, 0);
        struct sample_input in = {.sp = &a, .output_ids = mixed, .n_output = t, .rng = &ra2};
        mixed[t] = sampler_sample(sm, &in, l);
        if (t % 3 == 0) {
            step_logits(l, V, t, 9);
            sampler_sample(sm, &ic, l);
        }
    }
    int n_same = 0;
    for (int t = 0; t < T; t++)
        n_same += alone[t] == mixed[t];
    CHECK_EQ_INT(n_same, T);
    // Another seed gives another sequence.
    struct rng r3;
    rng_seed(&r3, 43);
    int n_diff = 0;
    for (int t = 0; t < T; t++) {
        step_logits(l, V, t, 0);
        struct sample_input in = {.sp = &a, .output_ids = mixed, .n_output = t, .rng = &r3};
        n_diff += sampler_sample(sm, &in, l) != alone[t];
    }
    CHECK(n_diff > 0);
    sampler_free(sm);
}

static void test_sampling_frequencies(void)
{
    // Draws follow the distribution: 50000 draws, each frequency within 0.01.
    struct sampler *sm = make_sampler(5, -1);
    struct vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.top_p = 0.8f;
    struct rng r;
    rng_seed(&r, 1);
    int counts[5] = {0};
    struct sample_input in = {.sp = &sp, .rng = &r};
    for (int i = 0; i < 50000; i++)
        counts[sampler_sample(sm, &in, base_logits)]++;
    const double want[5] = {0.6285317192117624, 0.23122389762214907, 0.14024438316608848, 0, 0};
    for (int i = 0; i < 5; i++)
        CHECK_NEAR(counts[i] / 50000.0, want[i], 0.01, 0);
    sampler_free(sm);
}

static void test_full_vocab_frequencies(void)
{
    // Unfiltered draws over a vocabulary of several weight blocks plus a
    // partial one, masked tokens included: 100000 draws, each frequency
    // within 0.005 of the softmax computed here in double, masked ones never.
    enum { N = 3 * SAMPLER_BLOCK + 8 };
    float l[N];
    double want[N], total = 0;
    for (int i = 0; i < N; i++) {
        l[i] = i % 37 == 0 ? 2.0f : -0.5f * (float)(i % 11);
        if (i % 50 == 7)
            l[i] = -INFINITY;
    }
    l[N - 1] = 3.0f; // the largest logit in the partial block
    for (int i = 0; i < N; i++)
        total += want[i] = exp((double)l[i] - 3.0);
    struct sampler *sm = make_sampler(N, -1);
    struct vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    struct rng r;
    rng_seed(&r, 3);
    static int counts[N];
    struct sample_input in = {.sp = &sp, .rng = &r};
    for (int i = 0; i < 100000; i++)
        counts[sampler_sample(sm, &in, l)]++;
    for (int i = 0; i < N; i++) {
        CHECK_NEAR(counts[i] / 100000.0, want[i] / total, 0.005, 0);
        if (i % 50 == 7)
            CHECK_EQ_INT(counts[i], 0);
    }
    // Temperature 2 halves every logit: the same check against that softmax.
    sp.temperature = 2.0f;
    total = 0;
    for (int i = 0; i < N; i++) {
        total += want[i] = exp(((double)l[i] - 3.0) / 2.0);
        counts[i] = 0;
    }
    for (int i = 0; i < 100000; i++)
        counts[sampler_sample(sm, &in, l)]++;
    for (int i = 0; i < N; i++)
        CHECK_NEAR(counts[i] / 100000.0, want[i] / total, 0.005, 0);
    sampler_free(sm);
}

static int desc_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

static void test_top_p_large_vocab(void)
{
    // top_p over a vocabulary where most of the mass sits in the head: the
    // kept set and its renormalized probabilities against a full sort done
    // here in double (the ids are in descending logit order by construction).
    enum { N = 3 * SAMPLER_BLOCK + 8 };
    float l[N];
    double e[N], sorted[N], total = 0;
    for (int i = 0; i < N; i++) {
        l[i] = -0.05f * (float)i;
        total += e[i] = exp((double)l[i]);
        sorted[i] = e[i];
    }
    qsort(sorted, N, sizeof *sorted, desc_double);
    struct sampler *sm = make_sampler(N, -1);
    struct vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    static double p[N];
    const float top_ps[3] = {0.5f, 0.9f, 0.99999f};
    for (int c = 0; c < 3; c++) {
        sp.top_p = top_ps[c];
        // Keep the least likely tokens out while their mass is at most 1 - p.
        int keep = N;
        double tail = 0;
        for (int j = N - 1; j >= 1; j--) {
            tail += sorted[j] / total;
            if (tail > 1.0 - (double)sp.top_p)
                break;
            keep = j;
        }
        double kept = 0;
        for (int i = 0; i < keep; i++)
            kept += e[i];
        sampler_distribution(sm, &sp, l, p);
        for (int i = 0; i < N; i++)
            CHECK_NEAR(p[i], i < keep ? e[i] / kept : 0.0, 1e-6, 0);
    }
    sampler_free(sm);
}

static void test_logprobs(void)
{
    struct vllmc_logprob lp;
    struct vllmc_top_logprob top[3];
    sampler_logprobs(base_logits, 5, 2, 3, &lp, top);
    // log-softmax: logit - 2.574437939627796 (logsumexp by hand).
    CHECK_EQ_INT(lp.token_id, 2);
    CHECK_NEAR(lp.logprob, -2.074437939627796, 1e-6, 0);
    CHECK_EQ_INT(lp.rank, 3);
    CHECK_EQ_INT(lp.n_top, 3);
    CHECK(lp.top == top);
    CHECK_EQ_INT(top[0].token_id, 0);
    CHECK_NEAR(top[0].logprob, -0.5744379396277961, 1e-6, 0);
    CHECK_EQ_INT(top[1].token_id, 1);
    CHECK_NEAR(top[1].logprob, -1.574437939627796, 1e-6, 0);
    CHECK_EQ_INT(top[2].token_id, 2);
    // Ties: equal logits share the worse rank; the lower id is listed first.
    const float tied[4] = {1.0f, 1.0f, 0.0f, 3.0f};
    sampler_logprobs(tied, 4, 1, 2, &lp, top);
    CHECK_EQ_INT(lp.rank, 3);
    CHECK_EQ_INT(top[0].token_id, 3);
    CHECK_EQ_INT(top[1].token_id, 0);
    sampler_logprobs(tied, 4, 3, 0, &lp, top);
    CHECK_EQ_INT(lp.rank, 1);
    CHECK_EQ_INT(lp.n_top, 0);
}

static void test_oom(void)
{
    int32_t extra[2] = {5, 6};
    int n_fail = 0;
    for (long n = 1;; n++) {
        struct sampler *sm = NULL;
        mem_fail_after(n);
        enum vllmc_status rc = sampler_create(100, 1, extra, 2, &sm);
        mem_fail_after(0);
        if (rc == VLLMC_OK) {
            sampler_free(sm);
            break;
        }
        CHECK_EQ_INT(rc, VLLMC_ERR_NOMEM);
        CHECK(sm == NULL);
        n_fail++;
    }
    CHECK(n_fail >= 7);
}

// The plain definition: the largest non-NaN value, then its first index;
// the first -inf when nothing is larger, 0 for a row of NaN only.
static int32_t argmax_plain(const float *x, int n)
{
    float best = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > best)
            best = x[i];
    for (int i = 0; i < n; i++)
        if (x[i] == best)
            return i;
    return 0;
}

static void test_row_argmax(void)
{
    // Lengths around the kernel's 8- and 32-value steps, values from a small
    // set so that ties are common, with NaN and both infinities mixed in.
    float *x = mem_alloc(40000 * sizeof *x);
    CHECK(x != NULL);
    srand(7);
    for (int iter = 0; iter < 20000; iter++) {
        int n = 1 + rand() % (iter < 19000 ? 130 : 40000);
        int kind = rand() % 4; // 0: plain, 1: specials, 2: no finite value, 3: max at the end
        for (int i = 0; i < n; i++) {
            int r = rand() % 12;
            x[i] = (float)(rand() % 6) - 2.5f;
            if (kind == 1 && r == 0)
                x[i] = NAN;
            if (kind == 1 && r == 1)
                x[i] = -INFINITY;
            if (kind == 1 && r == 2 && rand() % 8 == 0)
                x[i] = INFINITY;
            if (kind == 2)
                x[i] = r < 6 ? NAN : -INFINITY;
            if (kind == 2 && iter % 5 == 0)
                x[i] = NAN;
        }
        if (kind == 3)
            x[n - 1] = 100.0f;
        int32_t want = argmax_plain(x, n), got = sampler_row_argmax(x, n);
        if (got != want) {
            fprintf(stderr, "  row_argmax: n %d kind %d: got %d, want %d\n", n, kind, (int)got,
                    (int)want);
            CHECK_EQ_INT(got, want);
        }
        float m = sampler_row_max(x, n), mw = -INFINITY;
        for (int i = 0; i < n; i++)
            mw = x[i] > mw ? x[i] : mw;
        CHECK(m == mw);
    }
    mem_free(x);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"distributions", test_distributions},
        {"full_vocab_frequencies", test_full_vocab_frequencies},
        {"top_p_large_vocab", test_top_p_large_vocab},
        {"penalties", test_penalties},
        {"logit_bias_and_min_tokens", test_logit_bias_and_min_tokens},
        {"seed_batch_invariance", test_seed_batch_invariance},
        {"sampling_frequencies", test_sampling_frequencies},
        {"logprobs", test_logprobs},
        {"row_argmax", test_row_argmax},
        {"oom", test_oom},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
