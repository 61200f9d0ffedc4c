// Sampling on the GPU (OP_SAMPLE through the engine's device sampler) against
// the host sampler on the same logits: greedy is the argmax; a seeded row
// draws the same token whatever shares its batch; temperature, min_p, top_k
// and top_p draw from the host's distribution; logit_bias, min_tokens and the
// penalties change the same tokens; logprobs equal the host's. Skips (exit
// 77) on a machine with no GPU.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_device.h"
#include "check.h"
#include "core/alloc.h"
#include "engine/device_sampler.h"
#include "engine/sampler.h"

#define SKIP_CODE 77
#define BIG_VOCAB 151936
#define SMALL_VOCAB 97

static struct backend *gpu;
static uint64_t test_rng = 0x243f6a8885a308d3ull;

static double uniform01(void)
{
    test_rng ^= test_rng << 13;
    test_rng ^= test_rng >> 7;
    test_rng ^= test_rng << 17;
    return (double)(test_rng >> 11) * 0x1.0p-53;
}

// Roughly normal logits with a spread like a language model's.
static void fill_logits(float *x, int n, float scale)
{
    for (int i = 0; i < n; i++)
        x[i] = (float)((uniform01() + uniform01() + uniform01() - 1.5) * 2.0 * scale);
}

struct setup {
    int n_vocab, n_rows;
    float *logits;   // host [n_rows, n_vocab]
    void *logits_d;  // device copy
    struct device_sampler *ds;
    struct sampler *sm;
};

static bool setup_init(struct setup *s, int n_vocab, int n_rows, int n_rows_max)
{
    memset(s, 0, sizeof *s);
    s->n_vocab = n_vocab;
    s->n_rows = n_rows;
    size_t bytes = (size_t)n_rows * (size_t)n_vocab * sizeof(float);
    s->logits = mem_alloc(bytes);
    struct err err = {0};
    if (!s->logits || backend_buffer_alloc(gpu, bytes, &s->logits_d) ||
        device_sampler_create(gpu, n_vocab, n_rows_max, &s->ds, &err) || !s->ds ||
        sampler_create(n_vocab, 2, NULL, 0, &s->sm)) {
        fprintf(stderr, "setup failed: %s\n", err.msg);
        return false;
    }
    return true;
}

static void setup_upload(struct setup *s)
{
    size_t bytes = (size_t)s->n_rows * (size_t)s->n_vocab * sizeof(float);
    CHECK_EQ_INT(backend_upload(gpu, s->logits_d, s->logits, bytes), VLLMC_OK);
}

static void setup_free(struct setup *s)
{
    mem_free(s->logits);
    if (s->logits_d)
        backend_buffer_free(gpu, s->logits_d);
    device_sampler_free(s->ds);
    sampler_free(s->sm);
}

static struct sample_input input_of(const struct vllmc_sampling_params *sp, struct rng *r)
{
    return (struct sample_input){.sp = sp, .rng = r};
}

// Greedy rows (with exact ties planted) return the lowest id of the largest
// logit, as the host sampler does.
static void test_greedy_is_argmax(void)
{
    struct setup s;
    int n_rows = 64;
    if (!setup_init(&s, BIG_VOCAB, n_rows, n_rows))
        return;
    fill_logits(s.logits, n_rows * BIG_VOCAB, 4.0f);
    for (int r = 0; r < n_rows; r += 3) { // a tie at the top: the lower id wins
        float *x = s.logits + (size_t)r * BIG_VOCAB;
        x[1000 + r] = 50.0f;
        x[90000 + r] = 50.0f;
    }
    setup_upload(&s);
    struct vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    device_sampler_clear(s.ds);
    struct rng rg;
    rng_seed(&rg, 1);
    for (int r = 0; r < n_rows; r++) {
        struct sample_input in = input_of(&sp, &rg);
        int row;
        CHECK_EQ_INT(device_sampler_add(s.ds, s.sm, &in, n_rows - 1 - r, -1, &row), VLLMC_OK);
    }
    CHECK_EQ_INT(device_sampler_run(s.ds, s.logits_d, n_rows), VLLMC_OK);
    for (int r = 0; r < n_rows; r++) {
        const float *x = s.logits + (size_t)(n_rows - 1 - r) * BIG_VOCAB;
        int best = 0;
        for (int i = 1; i < BIG_VOCAB; i++)
            if (x[i] > x[best])
                best = i;
        CHECK_EQ_INT(s.ds->ids[r], best);
    }
    setup_free(&s);
}

// The parameter sets the random-sampling tests go through.
static void params_case(struct vllmc_sampling_params *sp, int k)
{
    vllmc_sampling_params_default(sp);
    sp->temperature = 0.8f;
    switch (k) {
    case 1:
        sp->top_k = 20;
        break;
    case 2:
        sp->top_p = 0.9f;
        break;
    case 3:
        sp->min_p = 0.05f;
        break;
    case 4:
        sp->top_k = 50;
        sp->top_p = 0.8f;
        sp->min_p = 0.01f;
        sp->temperature = 1.3f;
        break;
    default:
        break;
    }
}

// A seeded row samples the same token alone, in a batch of 48 other rows,
// and at another logits row; and the host sampler with the same seed agrees.
static void test_seeded_batch_invariance(void)
{
    struct setup s;
    int n_rows = 49;
    if (!setup_init(&s, BIG_VOCAB, n_rows, n_rows))
        return;
    fill_logits(s.logits, n_rows * BIG_VOCAB, 3.0f);
    memcpy(s.logits + (size_t)30 * BIG_VOCAB, s.logits, BIG_VOCAB * sizeof(float));
    setup_upload(&s);
    int same_host = 0, total = 0;
    for (int k = 0; k < 5; k++) {
        struct vllmc_sampling_params sp;
        params_case(&sp, k);
        for (uint64_t seed = 1; seed <= 8; seed++) {
            struct rng a, b, h;
            rng_seed(&a, seed);
            rng_seed(&b, seed);
            rng_seed(&h, seed);
            int row;
            // Alone, from logits row 0.
            device_sampler_clear(s.ds);
            struct sample_input in = input_of(&sp, &a);
            CHECK_EQ_INT(device_sampler_add(s.ds, s.sm, &in, 0, -1, &row), VLLMC_OK);
            CHECK_EQ_INT(device_sampler_run(s.ds, s.logits_d, n_rows), VLLMC_OK);
            int32_t alone = s.ds->ids[0];
            // In the middle of a batch of other rows, from logits row 30 (a copy of row 0).
            device_sampler_clear(s.ds);
            struct vllmc_sampling_params other;
            params_case(&other, (k + 1) % 5);
            int mine = -1;
            for (int r = 1; r < n_rows; r++) {
                struct rng ro;
                rng_seed(&ro, 1000 + (uint64_t)r);
                struct sample_input oi = input_of(&other, &ro);
                if (r == 30) {
                    struct sample_input bi = input_of(&sp, &b);
                    CHECK_EQ_INT(device_sampler_add(s.ds, s.sm, &bi, 30, -1, &mine), VLLMC_OK);
                } else {
                    CHECK_EQ_INT(device_sampler_add(s.ds, s.sm, &oi, r, -1, &row), VLLMC_OK);
                }
            }
            CHECK_EQ_INT(device_sampler_run(s.ds, s.logits_d, n_rows), VLLMC_OK);
            CHECK_EQ_INT(s.ds->ids[mine], alone);
            struct sample_input hi = input_of(&sp, &h);
            int32_t host = sampler_sample(s.sm, &hi, s.logits);
            same_host += host == alone;
            total++;
        }
    }
    // Float sums in another order may move a draw across a boundary, rarely.
    printf("  device equals host for %d of %d seeded draws\n", same_host, total);
    CHECK(same_host >= total - 1);
    setup_free(&s);
}

// Over many draws of one small-vocabulary row, the device's frequencies
// match the host's distribution (total variation), never leave its support,
// and each draw equals the host's draw for the same uniform almost always.
static void test_distribution_matches_host(void)
{
    struct setup s;
    int n_draws = 20000;
    if (!setup_init(&s, SMALL_VOCAB, 1, n_draws))
        return;
    fill_logits(s.logits, SMALL_VOCAB, 2.0f);
    s.logits[5] = s.logits[6]; // a tie inside the top set
    setup_upload(&s);
    double *probs = mem_alloc(SMALL_VOCAB * sizeof *probs);
    int *hist = mem_alloc(SMALL_VOCAB * sizeof *hist);
    VLLMC_ASSERT(probs && hist);
    for (int k = 0; k < 5; k++) {
        struct vllmc_sampling_params sp;
        params_case(&sp, k);
        sampler_distribution(s.sm, &sp, s.logits, probs);
        memset(hist, 0, SMALL_VOCAB * sizeof *hist);
        device_sampler_clear(s.ds);
        for (int d = 0; d < n_draws; d++) {
            struct rng r;
            rng_seed(&r, (uint64_t)d * 7919 + 17);
            struct sample_input in = input_of(&sp, &r);
            int row;
            CHECK_EQ_INT(device_sampler_add(s.ds, s.sm, &in, 0, -1, &row), VLLMC_OK);
        }
        CHECK_EQ_INT(device_sampler_run(s.ds, s.logits_d, 1), VLLMC_OK);
        int same = 0, outside = 0;
        for (int d = 0; d < n_draws; d++) {
            int32_t t = s.ds->ids[d];
            CHECK(t >= 0 && t < SMALL_VOCAB);
            if (t < 0 || t >= SMALL_VOCAB)
                continue;
            hist[t]++;
            outside += probs[t] == 0;
            struct rng r;
            rng_seed(&r, (uint64_t)d * 7919 + 17);
            struct sample_input in = input_of(&sp, &r);
            same += sampler_sample(s.sm, &in, s.logits) == t;
        }
        double tv = 0;
        for (int i = 0; i < SMALL_VOCAB; i++)
            tv += fabs((double)hist[i] / n_draws - probs[i]);
        tv *= 0.5;
        printf("  params %d: total variation %.4f, %d of %d draws equal the host's, %d outside\n",
               k, tv, same, n_draws, outside);
        CHECK(tv < 0.05); // 20000 draws over <= 97 tokens: expected about 0.03 at most
        CHECK_EQ_INT(outside, 0);
        CHECK(same >= n_draws - n_draws / 1000);
    }
    mem_free(probs);
    mem_free(hist);
    setup_free(&s);
}

// Row r's parameters in test_chunked_rows_match_host: a temperature alone, seeded.
static void chunked_row_params(int r, struct vllmc_sampling_params *sp, struct rng *rg)
{
    vllmc_sampling_params_default(sp);
    sp->temperature = r % 3 == 0 ? 1.0f : r % 3 == 1 ? 0.7f : 1.5f;
    rng_seed(rg, 500 + (uint64_t)r);
}

// Temperature-only rows of a full vocabulary, 64 in one batch, go through the
// chunked kernels (sample.cu): each draw equals the host's for the same seed
// (float sums in another order may move a rare draw across a boundary) and
// the one-block kernel's (VLLMC_CUDA_SAMPLE_CHUNKS=0). Rows with whole
// chunks masked, mass only in the last chunk, one finite logit, and none.
static void test_chunked_rows_match_host(void)
{
    struct setup s;
    const int n_rows = 64;
    if (!setup_init(&s, BIG_VOCAB, n_rows, n_rows))
        return;
    fill_logits(s.logits, n_rows * BIG_VOCAB, 3.0f);
    for (int r = 0; r < n_rows; r++) {
        float *x = s.logits + (size_t)r * BIG_VOCAB;
        if (r % 8 == 1) // the first 3 chunks and then some masked
            for (int i = 0; i < 3 * 8192 + 100; i++)
                x[i] = -INFINITY;
        if (r % 8 == 2) // a peak in the last chunk
            x[BIG_VOCAB - 7] = 30.0f;
        if (r % 8 == 3 || r == 60) { // one finite logit (none at all in row 60)
            for (int i = 0; i < BIG_VOCAB; i++)
                x[i] = -INFINITY;
            if (r != 60)
                x[8192 * 5 + 3] = 1.0f;
        }
    }
    setup_upload(&s);
    int32_t got[2][64];
    const bool chunks_setting = cuda_sample_chunks;
    for (int mode = 0; mode < 2; mode++) { // chunked, then one block a row
        cuda_sample_chunks = mode == 0;
        device_sampler_clear(s.ds);
        for (int r = 0; r < n_rows; r++) {
            struct vllmc_sampling_params sp;
            struct rng rg;
            chunked_row_params(r, &sp, &rg);
            struct sample_input in = input_of(&sp, &rg);
            int row;
            CHECK_EQ_INT(device_sampler_add(s.ds, s.sm, &in, r, -1, &row), VLLMC_OK);
        }
        CHECK_EQ_INT(device_sampler_run(s.ds, s.logits_d, n_rows), VLLMC_OK);
        memcpy(got[mode], s.ds->ids, sizeof got[mode]);
    }
    cuda_sample_chunks = chunks_setting;
    int same_host = 0, same_block = 0;
    for (int r = 0; r < n_rows; r++) {
        struct vllmc_sampling_params sp;
        struct rng rg;
        chunked_row_params(r, &sp, &rg);
        struct sample_input in = input_of(&sp, &rg);
        const int32_t host = sampler_sample(s.sm, &in, s.logits + (size_t)r * BIG_VOCAB);
        const float *x = s.logits + (size_t)r * BIG_VOCAB;
        CHECK(got[0][r] >= 0 && got[0][r] < BIG_VOCAB);
        if (r != 60 && got[0][r] >= 0 && got[0][r] < BIG_VOCAB)
            CHECK(x[got[0][r]] != -INFINITY);
        if (r % 8 == 3 && r != 60)
            CHECK_EQ_INT(got[0][r], 8192 * 5 + 3);
        same_host += got[0][r] == host;
        same_block += got[0][r] == got[1][r];
    }
    printf("  chunked draws equal the host's for %d of %d rows, the one-block kernel's for %d\n",
           same_host, n_rows, same_block);
    CHECK(same_host >= n_rows - 1);
    CHECK(same_block >= n_rows - 1);
    setup_free(&s);
}

// logit_bias, min_tokens and the three penalties: greedy rows pick what the
// host picks after the same processors, and the logits come back unchanged.
static void test_processors_match_host(void)
{
    struct setup s;
    int n_rows = 8;
    if (!setup_init(&s, BIG_VOCAB, n_rows, n_rows))
        return;
    fill_logits(s.logits, n_rows * BIG_VOCAB, 1.0f);
    int32_t prompt[64], output[40];
    for (int r = 0; r < n_rows; r++) {
        float *x = s.logits + (size_t)r * BIG_VOCAB;
        x[2] = 9.0f; // EOS on top: min_tokens must mask it
        for (int i = 0; i < 64; i++)
            x[(i * 37 + r) % 5000] = 6.0f - 0.05f * (float)i; // prompt tokens near the top
        x[777] = -8.0f;
    }
    for (int i = 0; i < 64; i++)
        prompt[i] = (int32_t)((i * 37) % 5000);
    for (int i = 0; i < 40; i++)
        output[i] = prompt[i % 7];
    setup_upload(&s);
    struct vllmc_logit_bias bias[2] = {{777, 20.0f}, {prompt[3], -3.0f}};
    int32_t stop_ids[1] = {prompt[1]};
    struct vllmc_sampling_params sps[8];
    for (int r = 0; r < n_rows; r++) {
        struct vllmc_sampling_params *sp = &sps[r];
        vllmc_sampling_params_default(sp);
        sp->temperature = 0.0f;
        sp->min_tokens = r & 1 ? 50 : 0;
        sp->repetition_penalty = r & 2 ? 1.3f : 1.0f;
        sp->frequency_penalty = r & 4 ? 0.7f : 0.0f;
        sp->presence_penalty = r >= 4 ? 1.5f : 0.0f;
        sp->stop_token_ids = stop_ids;
        sp->n_stop_token_ids = 1;
        if (r == 7) {
            sp->logit_bias = bias;
            sp->n_logit_bias = 2;
        }
    }
    device_sampler_clear(s.ds);
    struct rng rg;
    rng_seed(&rg, 5);
    for (int r = 0; r < n_rows; r++) {
        struct sample_input in = {.sp = &sps[r],
                                  .prompt_ids = prompt,
                                  .n_prompt = 64,
                                  .output_ids = output,
                                  .n_output = 40,
                                  .rng = &rg};
        int row;
        CHECK_EQ_INT(device_sampler_add(s.ds, s.sm, &in, r, -1, &row), VLLMC_OK);
    }
    CHECK_EQ_INT(device_sampler_run(s.ds, s.logits_d, n_rows), VLLMC_OK);
    for (int r = 0; r < n_rows; r++) {
        struct sample_input in = {.sp = &sps[r],
                                  .prompt_ids = prompt,
                                  .n_prompt = 64,
                                  .output_ids = output,
                                  .n_output = 40,
                                  .rng = &rg};
        int32_t host = sampler_sample(s.sm, &in, s.logits + (size_t)r * BIG_VOCAB);
        CHECK_EQ_INT(s.ds->ids[r], host);
    }
    CHECK_EQ_INT(s.ds->ids[7], 777);
    // The logits are restored after the call.
    float *back = mem_alloc((size_t)n_rows * BIG_VOCAB * sizeof *back);
    VLLMC_ASSERT(back);
    CHECK_EQ_INT(backend_download(gpu, back, s.logits_d, (size_t)n_rows * BIG_VOCAB * sizeof *back),
                 VLLMC_OK);
    CHECK(memcmp(back, s.logits, (size_t)n_rows * BIG_VOCAB * sizeof *back) == 0);
    mem_free(back);
    setup_free(&s);
}

// Logprobs of the raw logits: the sampled token's logprob and rank and the
// top alternatives equal the host's, with penalties in play (they must not
// leak into logprobs).
static void test_logprobs_match_host(void)
{
    struct setup s;
    int n_rows = 6;
    if (!setup_init(&s, BIG_VOCAB, n_rows, n_rows))
        return;
    fill_logits(s.logits, n_rows * BIG_VOCAB, 3.0f);
    s.logits[100] = s.logits[200] = 12.0f; // tied top alternatives
    setup_upload(&s);
    int32_t output[3] = {100, 5, 6};
    int ks[6] = {0, 1, 5, 20, 20, 3};
    struct vllmc_sampling_params sps[6];
    device_sampler_clear(s.ds);
    struct rng rg;
    rng_seed(&rg, 9);
    for (int r = 0; r < n_rows; r++) {
        params_case(&sps[r], r % 5);
        sps[r].presence_penalty = 2.0f;
        struct sample_input in = {.sp = &sps[r], .output_ids = output, .n_output = 3, .rng = &rg};
        int row;
        CHECK_EQ_INT(device_sampler_add(s.ds, s.sm, &in, r, ks[r], &row), VLLMC_OK);
    }
    CHECK_EQ_INT(device_sampler_run(s.ds, s.logits_d, n_rows), VLLMC_OK);
    struct vllmc_top_logprob top[SAMPLE_MAX_LOGPROBS];
    for (int r = 0; r < n_rows; r++) {
        struct vllmc_logprob lp;
        const struct sample_logprob *d = &s.ds->lps[r];
        sampler_logprobs(s.logits + (size_t)r * BIG_VOCAB, BIG_VOCAB, s.ds->ids[r], ks[r], &lp,
                         top);
        CHECK_NEAR(d->logprob, lp.logprob, 1e-5, 1e-5);
        CHECK_EQ_INT(d->rank, lp.rank);
        CHECK_EQ_INT(d->n_top, lp.n_top);
        for (int j = 0; j < lp.n_top && j < d->n_top; j++) {
            CHECK_EQ_INT(d->top_id[j], top[j].token_id);
            CHECK_NEAR(d->top_logprob[j], top[j].logprob, 1e-5, 1e-5);
        }
    }
    setup_free(&s);
}

int main(int argc, char **argv)
{
    struct backend_options o;
    backend_options_default(&o);
    struct err err = {0};
    if (backend_create("cuda", &o, &gpu, &err)) {
        printf("SKIPPED: no CUDA device (%s)\n", err.msg);
        return SKIP_CODE;
    }
    static const struct check_case cases[] = {
        {"greedy_is_argmax", test_greedy_is_argmax},
        {"seeded_batch_invariance", test_seeded_batch_invariance},
        {"distribution_matches_host", test_distribution_matches_host},
        {"chunked_rows_match_host", test_chunked_rows_match_host},
        {"processors_match_host", test_processors_match_host},
        {"logprobs_match_host", test_logprobs_match_host},
        {NULL, NULL},
    };
    int rc = check_run(cases, argc, argv);
    backend_free(gpu);
    return rc;
}
