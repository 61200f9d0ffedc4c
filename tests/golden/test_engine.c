// The engine end to end on stories260K: greedy outputs equal the golden
// tokens (alone, concurrently, chunked), concurrent requests through a KV
// cache so small that they are preempted finish exactly as they do alone
// (greedy and seeded sampling), prefix-cache hits leave outputs unchanged,
// aborts return every block, n > 1 samples match single seeded requests,
// stop strings cut the text, bad requests are refused, creation survives
// allocation failures.
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "core/alloc.h"
#include "vllmc.h"

#define MODEL VLLMC_SHARED_DIR "/models/stories260K.gguf"
#define GOLDEN VLLMC_SHARED_DIR "/testdata/golden/stories260K.greedy.json"

// stories260K: 5 layers, 4 KV heads of 8 dims, f32: bytes of one 16-token block.
#define BLOCK_BYTES (2 * 5 * 16 * 4 * 8 * 4)

struct golden_case {
    char prompt[128];
    int32_t prompt_ids[64];
    int n_prompt;
    int32_t gen[256];
    int n_gen;
    char text[2048];
};

static struct golden_case golden[8];
static int n_golden;

static void golden_load(void)
{
    json_error_t jerr;
    json_t *root = json_load_file(GOLDEN, 0, &jerr);
    CHECK(root != NULL);
    if (!root)
        return;
    json_t *cases = json_object_get(root, "cases"), *c, *v;
    size_t i, j;
    json_array_foreach(cases, i, c)
    {
        struct golden_case *g = &golden[n_golden++];
        snprintf(g->prompt, sizeof g->prompt, "%s",
                 json_string_value(json_object_get(c, "prompt")));
        snprintf(g->text, sizeof g->text, "%s",
                 json_string_value(json_object_get(c, "generated_text")));
        json_array_foreach(json_object_get(c, "prompt_token_ids"), j, v) g->prompt_ids[j] =
            (int32_t)json_integer_value(v);
        g->n_prompt = (int)json_array_size(json_object_get(c, "prompt_token_ids"));
        json_array_foreach(json_object_get(c, "generated_token_ids"), j, v) g->gen[j] =
            (int32_t)json_integer_value(v);
        g->n_gen = (int)json_array_size(json_object_get(c, "generated_token_ids"));
    }
    json_decref(root);
}

// Asynchronous scheduling of the engines engine_new() makes (the default).
static bool engine_async = true;

static struct vllmc_engine *engine_new(int max_model_len, int64_t kv_bytes, int max_num_seqs,
                                       int max_batched, bool prefix_caching)
{
    struct vllmc_engine_params p;
    vllmc_engine_params_default(&p);
    CHECK(p.async_scheduling);
    p.async_scheduling = engine_async;
    p.model_path = MODEL;
    p.n_threads = 1;
    p.max_model_len = max_model_len;
    p.kv_cache_memory_bytes = kv_bytes;
    p.max_num_seqs = max_num_seqs;
    p.max_num_batched_tokens = max_batched;
    p.enable_prefix_caching = prefix_caching;
    struct vllmc_engine *e = NULL;
    enum vllmc_status st = vllmc_engine_create(&p, &e);
    if (st != VLLMC_OK)
        fprintf(stderr, "engine: %s: %s\n", vllmc_status_str(st), vllmc_last_error());
    CHECK_EQ_INT(st, VLLMC_OK);
    return e;
}

// Everything a request produced, sample by sample.
struct result {
    int32_t ids[4][512];
    int n_ids[4];
    char text[4][4096];
    size_t n_text[4];
    enum vllmc_finish_reason finish[4];
    char stop_str[4][32];
    int n_outputs;
    struct vllmc_usage usage;
    bool got_final;
};

static struct vllmc_request *submit(struct vllmc_engine *e, const char *prompt, const int32_t *ids,
                                    int n_ids, const struct vllmc_sampling_params *sp)
{
    struct vllmc_request_params rp;
    vllmc_request_params_default(&rp);
    rp.prompt = prompt;
    rp.prompt_token_ids = ids;
    rp.n_prompt_token_ids = n_ids;
    rp.sampling = *sp;
    struct vllmc_request *r = NULL;
    enum vllmc_status st = vllmc_engine_add_request(e, &rp, &r);
    if (st != VLLMC_OK)
        fprintf(stderr, "add_request: %s: %s\n", vllmc_status_str(st), vllmc_last_error());
    CHECK_EQ_INT(st, VLLMC_OK);
    return r;
}

// Reads a request's stream to its final output.
static void drain(struct vllmc_request *r, struct result *res)
{
    memset(res, 0, sizeof *res);
    for (;;) {
        struct vllmc_output *o = NULL;
        enum vllmc_status st = vllmc_request_next_output(r, 20000, &o);
        CHECK_EQ_INT(st, VLLMC_OK);
        CHECK(o != NULL);
        if (st != VLLMC_OK || !o)
            return;
        int k = o->index;
        for (int i = 0; i < o->n_token_ids; i++)
            res->ids[k][res->n_ids[k]++] = o->token_ids[i];
        memcpy(res->text[k] + res->n_text[k], o->text, o->text_len);
        res->n_text[k] += o->text_len;
        CHECK(o->text[o->text_len] == '\0');
        if (o->finish_reason != VLLMC_FINISH_NONE) {
            res->finish[k] = o->finish_reason;
            if (o->stop_str)
                snprintf(res->stop_str[k], sizeof res->stop_str[k], "%s", o->stop_str);
        }
        res->usage = o->usage;
        res->n_outputs++;
        bool final = o->final;
        vllmc_output_free(o);
        if (final) {
            res->got_final = true;
            break;
        }
    }
    struct vllmc_output *o = NULL;
    CHECK_EQ_INT(vllmc_request_next_output(r, 0, &o), VLLMC_ERR_CLOSED);
}

static struct vllmc_sampling_params greedy(int max_tokens)
{
    struct vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.temperature = 0;
    sp.max_tokens = max_tokens;
    sp.ignore_eos = true;
    return sp;
}

static void check_golden(const struct result *res, const struct golden_case *g, int n)
{
    CHECK_EQ_INT(res->n_ids[0], n);
    int n_same = 0;
    for (int i = 0; i < n && i < res->n_ids[0]; i++)
        n_same += res->ids[0][i] == g->gen[i];
    CHECK_EQ_INT(n_same, n);
}

// Waits until the engine has no requests left (stats are published per step).
static void wait_idle(struct vllmc_engine *e, struct vllmc_engine_stats *st)
{
    for (int i = 0; i < 2000; i++) {
        vllmc_engine_stats(e, st);
        if (st->n_running == 0 && st->n_waiting == 0 && st->n_blocks_free == st->n_blocks_total)
            return;
        usleep(1000);
    }
}

// ---- cases ----

static void test_golden_greedy(void)
{
    // All golden prompts at once, as text: 128 tokens each, token for token.
    struct vllmc_engine *e = engine_new(512, 64 * BLOCK_BYTES, 16, 256, true);
    if (!e)
        return;
    struct vllmc_sampling_params sp = greedy(128);
    struct vllmc_request *r[8];
    for (int i = 0; i < n_golden; i++)
        r[i] = submit(e, golden[i].prompt, NULL, 0, &sp);
    for (int i = 0; i < n_golden; i++) {
        struct result res;
        drain(r[i], &res);
        check_golden(&res, &golden[i], 128);
        CHECK_EQ_INT(res.finish[0], VLLMC_FINISH_LENGTH);
        CHECK_EQ_INT(res.usage.prompt_tokens, golden[i].n_prompt);
        CHECK_EQ_INT(res.usage.completion_tokens, 128);
        // The streamed text continues the prompt (its leading space kept).
        // After a BOS-only prompt the text starts the document, and the
        // SentencePiece decoder drops the first piece's leading space, as
        // vLLM's detokenizer (Hugging Face's) does; the golden text is the
        // plain concatenation of pieces.
        res.text[0][res.n_text[0]] = '\0';
        const char *want = golden[i].text;
        if (golden[i].n_prompt == 1 && want[0] == ' ')
            want++;
        CHECK_EQ_STR(res.text[0], want);
        vllmc_request_free(r[i]);
    }
    vllmc_engine_free(e);
}

static void test_chunked_prefill(void)
{
    // A step budget of 4 tokens splits every prompt into chunks and mixes
    // them with decodes; the tokens do not change.
    struct vllmc_engine *e = engine_new(512, 64 * BLOCK_BYTES, 4, 4, false);
    if (!e)
        return;
    struct vllmc_sampling_params sp = greedy(48);
    struct vllmc_request *r[8];
    for (int i = 0; i < n_golden; i++)
        r[i] = submit(e, NULL, golden[i].prompt_ids, golden[i].n_prompt, &sp);
    for (int i = 0; i < n_golden; i++) {
        struct result res;
        drain(r[i], &res);
        check_golden(&res, &golden[i], 48);
        vllmc_request_free(r[i]);
    }
    vllmc_engine_free(e);
}

static struct vllmc_sampling_params mixed_params(int i, int max_tokens)
{
    struct vllmc_sampling_params sp = greedy(max_tokens);
    if (i % 2) {
        // Seeded sampling must not depend on batching or preemption either.
        sp.temperature = 0.9f;
        sp.top_p = 0.9f;
        sp.top_k = 40;
        sp.has_seed = true;
        sp.seed = 1000 + (uint64_t)i;
        sp.repetition_penalty = 1.1f;
    }
    return sp;
}

static const char *const story_prompts[8] = {
    "Once upon a time", "The little dog", "Lily and Tom were friends.", "One day",
    "The sun was",      "A big red ball", "Tom had a toy car",          "She was happy"};

// Runs n requests one at a time on an engine that reads each step's tokens
// before scheduling the next, then all at once on a second engine (with
// asynchronous scheduling unless async is false), and checks that every
// request's tokens and text are the same both ways.
static void run_alone_vs_together(int n, int max_model_len, int64_t kv_bytes, int max_batched,
                                  int max_tokens_base, bool expect_preemption, bool async)
{
    struct result *alone = calloc((size_t)n, sizeof *alone);
    struct result *res = calloc(1, sizeof *res);
    struct vllmc_request **r = calloc((size_t)n, sizeof *r);
    engine_async = false;
    struct vllmc_engine *e = engine_new(max_model_len, 64 * BLOCK_BYTES, 16, 256, true);
    engine_async = async;
    if (!e || !alone || !res || !r)
        goto out;
    for (int i = 0; i < n; i++) {
        struct vllmc_sampling_params sp = mixed_params(i, max_tokens_base + 3 * (i % 11));
        struct vllmc_request *one = submit(e, story_prompts[i % 8], NULL, 0, &sp);
        drain(one, &alone[i]);
        vllmc_request_free(one);
    }
    vllmc_engine_free(e);

    e = engine_new(max_model_len, kv_bytes, n, max_batched, true);
    if (!e)
        goto out;
    for (int i = 0; i < n; i++) {
        struct vllmc_sampling_params sp = mixed_params(i, max_tokens_base + 3 * (i % 11));
        r[i] = submit(e, story_prompts[i % 8], NULL, 0, &sp);
    }
    int n_same = 0;
    for (int i = 0; i < n; i++) {
        drain(r[i], res);
        n_same += res->n_ids[0] == alone[i].n_ids[0] &&
                  !memcmp(res->ids[0], alone[i].ids[0], sizeof(int32_t) * (size_t)res->n_ids[0]) &&
                  res->n_text[0] == alone[i].n_text[0] &&
                  !memcmp(res->text[0], alone[i].text[0], res->n_text[0]);
        vllmc_request_free(r[i]);
    }
    CHECK_EQ_INT(n_same, n);
    struct vllmc_engine_stats st;
    wait_idle(e, &st);
    if (expect_preemption)
        CHECK(st.n_preemptions > 0);
    // Asynchronous scheduling ran most steps ahead of the previous one's tokens.
    if (async)
        CHECK(st.n_async_steps > st.n_steps / 2);
    else
        CHECK_EQ_INT(st.n_async_steps, 0);
    CHECK_EQ_INT(st.n_blocks_free, st.n_blocks_total);
    CHECK_EQ_INT(st.n_requests_finished, n);
    vllmc_engine_free(e);
out:
    engine_async = true;
    free(r);
    free(res);
    free(alone);
}

static void test_concurrent_equals_alone(void)
{
    // 16 requests of different lengths sharing steps in a roomy cache.
    run_alone_vs_together(16, 256, 64 * BLOCK_BYTES, 256, 40, false, true);
}

static void test_preemption_identical(void)
{
    // 32 requests of up to 64 tokens through 6 blocks (96 tokens): most wait,
    // many are preempted and recomputed, all finish as they do alone.
    run_alone_vs_together(32, 64, 6 * BLOCK_BYTES, 64, 20, true, true);
}

static void test_preemption_identical_sync(void)
{
    // The same without asynchronous scheduling: each step's tokens are read
    // before the next step is scheduled.
    run_alone_vs_together(32, 64, 6 * BLOCK_BYTES, 64, 20, true, false);
}

static void test_prefix_cache_hits(void)
{
    struct vllmc_engine *e = engine_new(512, 64 * BLOCK_BYTES, 16, 256, true);
    if (!e)
        return;
    // golden[2] has 10 prompt tokens; repeat it to span full blocks.
    int32_t ids[40];
    for (int i = 0; i < 40; i++)
        ids[i] = golden[2].prompt_ids[i % 10];
    struct vllmc_sampling_params sp = greedy(20);
    struct result a, b;
    struct vllmc_request *r = submit(e, NULL, ids, 40, &sp);
    drain(r, &a);
    vllmc_request_free(r);
    struct vllmc_engine_stats s1, s2;
    wait_idle(e, &s1);
    CHECK_EQ_INT(s1.prefix_cache_queries, 40);
    CHECK_EQ_INT(s1.prefix_cache_hits, 0);
    r = submit(e, NULL, ids, 40, &sp);
    drain(r, &b);
    vllmc_request_free(r);
    wait_idle(e, &s2);
    CHECK_EQ_INT(s2.prefix_cache_queries, 80);
    CHECK_EQ_INT(s2.prefix_cache_hits, 32); // two full blocks of 16
    CHECK_EQ_INT(b.usage.cached_tokens, 32);
    CHECK_EQ_INT(a.usage.cached_tokens, 0);
    CHECK_EQ_INT(a.n_ids[0], b.n_ids[0]);
    CHECK(!memcmp(a.ids[0], b.ids[0], sizeof(int32_t) * (size_t)a.n_ids[0]));
    vllmc_engine_free(e);
}

static void test_abort_frees_blocks(void)
{
    struct vllmc_engine *e = engine_new(512, 64 * BLOCK_BYTES, 16, 256, true);
    if (!e)
        return;
    struct vllmc_sampling_params sp = greedy(400);
    struct vllmc_request *r[3];
    for (int i = 0; i < 3; i++)
        r[i] = submit(e, golden[i].prompt, NULL, 0, &sp);
    // Let them generate a little, then abort two and free the third's handle.
    for (int k = 0; k < 3; k++) {
        struct vllmc_output *o = NULL;
        CHECK_EQ_INT(vllmc_request_next_output(r[0], 20000, &o), VLLMC_OK);
        vllmc_output_free(o);
    }
    vllmc_request_abort(r[0]);
    vllmc_request_abort(r[1]);
    vllmc_request_abort(r[1]); // idempotent
    vllmc_request_free(r[2]);
    for (int i = 0; i < 2; i++) {
        struct vllmc_output *o = NULL;
        enum vllmc_finish_reason last = VLLMC_FINISH_NONE;
        while (vllmc_request_next_output(r[i], 20000, &o) == VLLMC_OK && o) {
            bool final = o->final;
            last = o->finish_reason;
            vllmc_output_free(o);
            if (final)
                break;
        }
        CHECK_EQ_INT(last, VLLMC_FINISH_ABORT);
        vllmc_request_free(r[i]);
    }
    struct vllmc_engine_stats st;
    wait_idle(e, &st);
    CHECK_EQ_INT(st.n_running, 0);
    CHECK_EQ_INT(st.n_blocks_free, st.n_blocks_total);
    CHECK_EQ_INT(st.n_requests_finished, 3);
    vllmc_engine_free(e);
}

static void test_parallel_samples(void)
{
    // n = 3 with seed s gives sample i what a single request with seed s + i gives.
    struct vllmc_engine *e = engine_new(256, 64 * BLOCK_BYTES, 16, 256, true);
    if (!e)
        return;
    struct vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.max_tokens = 30;
    sp.ignore_eos = true;
    sp.temperature = 1.0f;
    sp.has_seed = true;
    sp.seed = 77;
    sp.n = 3;
    struct result *multi = calloc(1, sizeof *multi), *one = calloc(1, sizeof *one);
    struct vllmc_request *r = submit(e, "Once upon a time, there was a", NULL, 0, &sp);
    drain(r, multi);
    vllmc_request_free(r);
    CHECK_EQ_INT(multi->usage.completion_tokens, 90);
    bool all_same = true;
    for (int i = 0; i < 3; i++) {
        struct vllmc_sampling_params s1 = sp;
        s1.n = 1;
        s1.seed = 77 + (uint64_t)i;
        r = submit(e, "Once upon a time, there was a", NULL, 0, &s1);
        drain(r, one);
        vllmc_request_free(r);
        CHECK_EQ_INT(multi->n_ids[i], 30);
        CHECK(!memcmp(multi->ids[i], one->ids[0], sizeof(int32_t) * 30));
        all_same &= !memcmp(multi->ids[i], multi->ids[0], sizeof(int32_t) * 30);
        CHECK_EQ_INT(multi->finish[i], VLLMC_FINISH_LENGTH);
    }
    CHECK(!all_same);
    vllmc_engine_free(e);
    free(multi);
    free(one);
}

static void test_stop_strings_and_tokens(void)
{
    struct vllmc_engine *e = engine_new(256, 64 * BLOCK_BYTES, 16, 256, true);
    if (!e)
        return;
    // Golden text: ", there was a little girl named Lily. She loved ..."
    struct vllmc_sampling_params sp = greedy(100);
    const char *stop[2] = {"park", "Lily"};
    sp.stop = stop;
    sp.n_stop = 2;
    struct result res;
    struct vllmc_request *r = submit(e, "Once upon a time", NULL, 0, &sp);
    drain(r, &res);
    vllmc_request_free(r);
    res.text[0][res.n_text[0]] = '\0';
    CHECK_EQ_STR(res.text[0], ", there was a little girl named ");
    CHECK_EQ_INT(res.finish[0], VLLMC_FINISH_STOP);
    CHECK_EQ_STR(res.stop_str[0], "Lily");

    // include_stop_str_in_output keeps it.
    sp.include_stop_str_in_output = true;
    r = submit(e, "Once upon a time", NULL, 0, &sp);
    drain(r, &res);
    vllmc_request_free(r);
    res.text[0][res.n_text[0]] = '\0';
    CHECK_EQ_STR(res.text[0], ", there was a little girl named Lily");

    // A stop token id: the 4th generated token (261 " a") ends the sample.
    struct vllmc_sampling_params st = greedy(100);
    int32_t stop_ids[1] = {golden[0].gen[3]};
    st.stop_token_ids = stop_ids;
    st.n_stop_token_ids = 1;
    r = submit(e, NULL, golden[0].prompt_ids, golden[0].n_prompt, &st);
    drain(r, &res);
    vllmc_request_free(r);
    CHECK_EQ_INT(res.n_ids[0], 4);
    CHECK_EQ_INT(res.finish[0], VLLMC_FINISH_STOP);
    res.text[0][res.n_text[0]] = '\0';
    CHECK_EQ_STR(res.text[0], ", there was"); // the stop token's text is left out
    vllmc_engine_free(e);
}

static void test_logprobs(void)
{
    struct vllmc_engine *e = engine_new(256, 64 * BLOCK_BYTES, 16, 256, true);
    if (!e)
        return;
    struct vllmc_sampling_params sp = greedy(3);
    sp.logprobs = 2;
    sp.prompt_logprobs = 1;
    struct vllmc_request *r = submit(e, NULL, golden[0].prompt_ids, golden[0].n_prompt, &sp);
    struct vllmc_output *o = NULL;
    CHECK_EQ_INT(vllmc_request_next_output(r, 20000, &o), VLLMC_OK);
    CHECK(o && o->logprobs && o->prompt_logprobs);
    if (o && o->logprobs && o->prompt_logprobs) {
        // Greedy: the sampled token is the most likely one.
        CHECK_EQ_INT(o->logprobs[0].token_id, golden[0].gen[0]);
        CHECK_EQ_INT(o->logprobs[0].rank, 1);
        CHECK_EQ_INT(o->logprobs[0].n_top, 2);
        CHECK_EQ_INT(o->logprobs[0].top[0].token_id, golden[0].gen[0]);
        CHECK(o->logprobs[0].top[0].logprob <= 0);
        CHECK(o->logprobs[0].top[1].logprob <= o->logprobs[0].top[0].logprob);
        CHECK_EQ_INT(o->n_prompt_logprobs, golden[0].n_prompt);
        CHECK(isnan(o->prompt_logprobs[0].logprob));
        for (int i = 1; i < golden[0].n_prompt; i++) {
            CHECK_EQ_INT(o->prompt_logprobs[i].token_id, golden[0].prompt_ids[i]);
            CHECK(o->prompt_logprobs[i].logprob <= 0 && o->prompt_logprobs[i].rank >= 1);
            CHECK_EQ_INT(o->prompt_logprobs[i].n_top, 1);
        }
    }
    vllmc_output_free(o);
    vllmc_request_free(r);
    vllmc_engine_free(e);
}

static void test_bad_requests(void)
{
    struct vllmc_engine *e = engine_new(64, 8 * BLOCK_BYTES, 16, 256, true);
    if (!e)
        return;
    struct vllmc_request_params rp;
    vllmc_request_params_default(&rp);
    struct vllmc_request *r = NULL;
    rp.prompt = "";
    rp.add_special_tokens = false;
    CHECK_EQ_INT(vllmc_engine_add_request(e, &rp, &r), VLLMC_ERR_INVALID_ARG);
    CHECK(strstr(vllmc_last_error(), "empty") != NULL);
    rp.prompt = "Once upon a time";
    rp.add_special_tokens = true;
    rp.sampling.top_p = 0;
    CHECK_EQ_INT(vllmc_engine_add_request(e, &rp, &r), VLLMC_ERR_INVALID_ARG);
    vllmc_request_params_default(&rp);
    int32_t ids[80];
    for (int i = 0; i < 80; i++)
        ids[i] = 300;
    rp.prompt_token_ids = ids;
    rp.n_prompt_token_ids = 80; // longer than max_model_len 64
    CHECK_EQ_INT(vllmc_engine_add_request(e, &rp, &r), VLLMC_ERR_CAPACITY);
    ids[0] = 512; // out of vocab
    rp.n_prompt_token_ids = 4;
    CHECK_EQ_INT(vllmc_engine_add_request(e, &rp, &r), VLLMC_ERR_INVALID_ARG);
    CHECK(r == NULL);
    vllmc_engine_free(e);

    // A KV budget below one max_model_len request is a start-up error.
    struct vllmc_engine_params p;
    vllmc_engine_params_default(&p);
    p.model_path = MODEL;
    p.max_model_len = 256;
    p.kv_cache_memory_bytes = 4 * BLOCK_BYTES;
    e = NULL;
    CHECK_EQ_INT(vllmc_engine_create(&p, &e), VLLMC_ERR_CAPACITY);
    CHECK(e == NULL);
    CHECK(strstr(vllmc_last_error(), "--kv-cache-memory-bytes") != NULL);
    CHECK(strstr(vllmc_last_error(), "--max-model-len") != NULL);
}

static void test_free_with_requests_in_flight(void)
{
    struct vllmc_engine *e = engine_new(512, 64 * BLOCK_BYTES, 16, 256, true);
    if (!e)
        return;
    struct vllmc_sampling_params sp = greedy(400);
    struct vllmc_request *r = submit(e, "Once upon a time", NULL, 0, &sp);
    vllmc_engine_free(e);
    // The handle outlives the engine; its stream ends with an abort.
    enum vllmc_finish_reason last = VLLMC_FINISH_NONE;
    struct vllmc_output *o = NULL;
    while (vllmc_request_next_output(r, 20000, &o) == VLLMC_OK && o) {
        bool final = o->final;
        last = o->finish_reason;
        vllmc_output_free(o);
        if (final)
            break;
    }
    CHECK_EQ_INT(last, VLLMC_FINISH_ABORT);
    vllmc_request_abort(r); // harmless now
    vllmc_request_free(r);
}

static void test_create_oom(void)
{
    struct vllmc_engine_params p;
    vllmc_engine_params_default(&p);
    p.model_path = MODEL;
    p.n_threads = 1;
    p.max_model_len = 64;
    p.max_num_seqs = 4;
    p.max_num_batched_tokens = 64;
    p.kv_cache_memory_bytes = 8 * BLOCK_BYTES;
    long before = mem_alloc_count();
    struct vllmc_engine *e = NULL;
    CHECK_EQ_INT(vllmc_engine_create(&p, &e), VLLMC_OK);
    vllmc_engine_free(e);
    long n_allocs = mem_alloc_count() - before;
    CHECK(n_allocs > 10);
    // Fail each allocation of creation in turn (every one up to 400, then
    // every 7th): each failure is VLLMC_ERR_NOMEM and leaks nothing (ASan).
    int n_checked = 0;
    for (long n = 1; n <= n_allocs; n += n <= 400 ? 1 : 7) {
        e = NULL;
        mem_fail_after(n);
        enum vllmc_status st = vllmc_engine_create(&p, &e);
        mem_fail_after(0);
        if (st == VLLMC_OK) {
            vllmc_engine_free(e);
            continue;
        }
        CHECK(e == NULL);
        if (st != VLLMC_ERR_NOMEM)
            fprintf(stderr, "allocation %ld: %s: %s\n", n, vllmc_status_str(st),
                    vllmc_last_error());
        CHECK_EQ_INT(st, VLLMC_ERR_NOMEM);
        n_checked++;
    }
    CHECK(n_checked > 10);
}

int main(int argc, char **argv)
{
    golden_load();
    CHECK(n_golden >= 4);
    static const struct check_case cases[] = {
        {"golden_greedy", test_golden_greedy},
        {"chunked_prefill", test_chunked_prefill},
        {"concurrent_equals_alone", test_concurrent_equals_alone},
        {"preemption_identical", test_preemption_identical},
        {"preemption_identical_sync", test_preemption_identical_sync},
        {"prefix_cache_hits", test_prefix_cache_hits},
        {"abort_frees_blocks", test_abort_frees_blocks},
        {"parallel_samples", test_parallel_samples},
        {"stop_strings_and_tokens", test_stop_strings_and_tokens},
        {"logprobs", test_logprobs},
        {"bad_requests", test_bad_requests},
        {"free_with_requests_in_flight", test_free_with_requests_in_flight},
        {"create_oom", test_create_oom},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
