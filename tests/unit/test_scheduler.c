// Scheduler: token budget, chunked prefill, decode-first order, max_num_seqs,
// preemption by recompute and resume, priority order. A fake model step
// appends a token that depends only on the request and its length, so a
// request's tokens never depend on scheduling.
#include <stdlib.h>

#include "check.h"
#include "core/alloc.h"
#include "engine/kv_manager.h"
#include "engine/scheduler.h"

struct sim {
    struct kv_manager *km;
    struct scheduler *s;
    struct request *reqs[64];
    int n_reqs;
    uint64_t next_seq;
};

static void sim_init(struct sim *sim, int n_blocks, int block_size, int max_num_seqs, int budget,
                     bool caching)
{
    *sim = (struct sim){0};
    CHECK_EQ_INT(kv_manager_create(n_blocks, block_size, 128, caching, &sim->km), VLLMC_OK);
    struct scheduler_config cfg = {
        .max_num_seqs = max_num_seqs, .max_num_batched_tokens = budget, .max_model_len = 128};
    CHECK_EQ_INT(scheduler_create(&cfg, sim->km, &sim->s), VLLMC_OK);
}

static void sim_deinit(struct sim *sim)
{
    for (int i = 0; i < sim->n_reqs; i++)
        request_free(sim->reqs[i]);
    scheduler_free(sim->s);
    kv_manager_free(sim->km);
}

// Adds a request whose prompt is n_prompt tokens of (base + i).
static struct request *sim_add(struct sim *sim, int n_prompt, int base, int max_tokens,
                               int priority)
{
    int32_t prompt[128];
    for (int i = 0; i < n_prompt; i++)
        prompt[i] = base + i;
    struct vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.max_tokens = max_tokens;
    struct request *req = NULL;
    CHECK_EQ_INT(request_create(prompt, n_prompt, &sp, NULL, 128, sim->km->block_size, &req),
                 VLLMC_OK);
    req->id = (uint64_t)sim->n_reqs;
    req->arrival_seq = sim->next_seq++;
    req->priority = priority;
    sim->reqs[sim->n_reqs++] = req;
    CHECK_EQ_INT(scheduler_add(sim->s, req), VLLMC_OK);
    return req;
}

static int32_t fake_token(const struct request *req)
{
    return (int32_t)(1000 + req->id * 100 + (uint64_t)req->n_tokens);
}

// Runs one step; returns the plan (valid until the next step).
static const struct scheduler_output *sim_step(struct sim *sim)
{
    const struct scheduler_output *o = scheduler_schedule(sim->s);
    CHECK(o->n_tokens <= sim->s->cfg.max_num_batched_tokens);
    CHECK(sim->s->n_running <= sim->s->cfg.max_num_seqs);
    for (int i = 0; i < o->n_reqs; i++) {
        struct request *req = o->reqs[i];
        if (!scheduler_samples(req))
            continue;
        request_append_token(req, fake_token(req));
        if (request_n_output_tokens(req) >= req->n_output_max)
            scheduler_finish(sim->s, req, VLLMC_FINISH_LENGTH);
    }
    return o;
}

static int find_n(const struct scheduler_output *o, const struct request *req)
{
    for (int i = 0; i < o->n_reqs; i++)
        if (o->reqs[i] == req)
            return o->n_new_tokens[i];
    return 0;
}

static void test_token_budget(void)
{
    struct sim sim;
    sim_init(&sim, 64, 4, 8, 16, false);
    struct request *a = sim_add(&sim, 10, 1, 4, 0);
    struct request *b = sim_add(&sim, 10, 101, 4, 0);
    struct request *c = sim_add(&sim, 10, 201, 4, 0);
    const struct scheduler_output *o = sim_step(&sim);
    CHECK_EQ_INT(o->n_tokens, 16);
    CHECK_EQ_INT(find_n(o, a), 10);
    CHECK_EQ_INT(find_n(o, b), 6);
    CHECK_EQ_INT(find_n(o, c), 0);
    CHECK_EQ_INT(request_n_output_tokens(a), 1);
    CHECK_EQ_INT(request_n_output_tokens(b), 0); // mid-prompt: nothing sampled
    o = sim_step(&sim);
    CHECK_EQ_INT(find_n(o, a), 1);
    CHECK_EQ_INT(find_n(o, b), 4);
    CHECK_EQ_INT(find_n(o, c), 10);
    CHECK_EQ_INT(o->n_tokens, 15);
    sim_deinit(&sim);
}

static void test_chunked_prefill(void)
{
    struct sim sim;
    sim_init(&sim, 64, 4, 8, 16, false);
    struct request *a = sim_add(&sim, 40, 1, 3, 0);
    int chunks[3] = {16, 16, 8};
    for (int i = 0; i < 3; i++) {
        const struct scheduler_output *o = sim_step(&sim);
        CHECK_EQ_INT(find_n(o, a), chunks[i]);
        CHECK_EQ_INT(request_n_output_tokens(a), i == 2 ? 1 : 0);
    }
    CHECK_EQ_INT(a->n_computed_tokens, 40);
    CHECK_EQ_INT(a->n_blocks, 10);
    const struct scheduler_output *o = sim_step(&sim);
    CHECK_EQ_INT(find_n(o, a), 1);
    sim_step(&sim);
    CHECK(request_is_finished(a));
    CHECK_EQ_INT(a->finish_reason, VLLMC_FINISH_LENGTH);
    CHECK_EQ_INT(request_n_output_tokens(a), 3);
    CHECK_EQ_INT(kv_manager_n_free_blocks(sim.km), 64);
    sim_deinit(&sim);
}

static void test_decode_first(void)
{
    struct sim sim;
    sim_init(&sim, 64, 4, 8, 4, false);
    struct request *r[3];
    for (int i = 0; i < 3; i++)
        r[i] = sim_add(&sim, 4, 10 * i + 1, 10, 0);
    while (request_n_output_tokens(r[2]) == 0) // prompts share the budget of 4
        sim_step(&sim);
    CHECK(!request_is_finished(r[0]));
    struct request *late = sim_add(&sim, 10, 500, 10, 0);
    const struct scheduler_output *o = sim_step(&sim);
    // The three decodes come first; the new prompt gets what is left.
    CHECK_EQ_INT(o->n_reqs, 4);
    for (int i = 0; i < 3; i++) {
        CHECK(o->reqs[i] == r[i]);
        CHECK_EQ_INT(o->n_new_tokens[i], 1);
    }
    CHECK(o->reqs[3] == late);
    CHECK_EQ_INT(o->n_new_tokens[3], 1);
    sim_deinit(&sim);
}

static void test_max_num_seqs(void)
{
    struct sim sim;
    sim_init(&sim, 64, 4, 2, 64, false);
    struct request *a = sim_add(&sim, 4, 1, 2, 0);
    struct request *b = sim_add(&sim, 4, 11, 2, 0);
    struct request *c = sim_add(&sim, 4, 21, 2, 0);
    const struct scheduler_output *o = sim_step(&sim);
    CHECK_EQ_INT(o->n_reqs, 2);
    CHECK_EQ_INT(find_n(o, c), 0);
    o = sim_step(&sim); // a and b finish here
    CHECK(request_is_finished(a) && request_is_finished(b));
    o = sim_step(&sim);
    CHECK_EQ_INT(find_n(o, c), 4);
    sim_deinit(&sim);
}

static void test_preemption_and_resume(void)
{
    // 4 blocks of 4 tokens; each request needs up to 4 blocks (6 + 8 tokens).
    struct sim sim;
    sim_init(&sim, 4, 4, 8, 64, false);
    struct request *a = sim_add(&sim, 6, 1, 8, 0);
    struct request *b = sim_add(&sim, 6, 101, 8, 0);
    int n_steps = 0;
    int64_t resumed_tokens = -1;
    while (!(request_is_finished(a) && request_is_finished(b)) && n_steps < 100) {
        bool b_waiting = b->status == REQUEST_PREEMPTED;
        int n_out_b = request_n_output_tokens(b);
        const struct scheduler_output *o = sim_step(&sim);
        for (int i = 0; i < o->n_preempted; i++)
            CHECK(o->preempted[i] == b); // the latest arrival goes first
        if (b_waiting && find_n(o, b) > 0 && resumed_tokens < 0) {
            // On resume the prompt and every generated token are recomputed.
            resumed_tokens = find_n(o, b);
            CHECK_EQ_INT(resumed_tokens, 6 + n_out_b);
        }
        n_steps++;
    }
    CHECK(request_is_finished(a) && request_is_finished(b));
    CHECK(sim.s->n_preemptions >= 1);
    CHECK(b->n_preemptions >= 1);
    CHECK(resumed_tokens > 6);
    CHECK_EQ_INT(request_n_output_tokens(a), 8);
    CHECK_EQ_INT(request_n_output_tokens(b), 8);
    // The generated tokens are the ones an unpreempted run produces.
    for (int k = 0; k < 8; k++)
        CHECK_EQ_INT(b->token_ids[6 + k], 1000 + 100 + 6 + k);
    CHECK_EQ_INT(kv_manager_n_free_blocks(sim.km), 4);
    sim_deinit(&sim);
}

static void test_priority_order(void)
{
    struct sim sim;
    sim_init(&sim, 64, 4, 1, 64, false);
    struct request *lo = sim_add(&sim, 4, 1, 1, 5);
    struct request *hi = sim_add(&sim, 4, 11, 1, -1);
    struct request *mid = sim_add(&sim, 4, 21, 1, 0);
    struct request *mid2 = sim_add(&sim, 4, 31, 1, 0);
    struct request *order[4] = {hi, mid, mid2, lo};
    for (int i = 0; i < 4; i++) {
        const struct scheduler_output *o = sim_step(&sim);
        CHECK_EQ_INT(o->n_reqs, 1);
        CHECK(o->reqs[0] == order[i]);
    }
    sim_deinit(&sim);
}

static void test_priority_preemption(void)
{
    // The victim is the lowest priority running request even if it came first.
    struct sim sim;
    sim_init(&sim, 4, 4, 8, 64, false);
    struct request *low = sim_add(&sim, 6, 1, 8, 3);
    struct request *high = sim_add(&sim, 6, 101, 8, 0);
    bool saw = false;
    for (int n = 0; n < 100 && !(request_is_finished(low) && request_is_finished(high)); n++) {
        const struct scheduler_output *o = sim_step(&sim);
        for (int i = 0; i < o->n_preempted; i++) {
            CHECK(o->preempted[i] == low);
            saw = true;
        }
    }
    CHECK(saw);
    CHECK(request_is_finished(low) && request_is_finished(high));
    sim_deinit(&sim);
}

static void test_same_step_prefix_sharing(void)
{
    struct sim sim;
    sim_init(&sim, 64, 4, 8, 64, true);
    struct request *a = sim_add(&sim, 10, 1, 2, 0);
    struct request *b = sim_add(&sim, 10, 1, 2, 0);
    const struct scheduler_output *o = sim_step(&sim);
    CHECK_EQ_INT(find_n(o, a), 10);
    CHECK_EQ_INT(find_n(o, b), 2); // 8 tokens shared with a
    CHECK_EQ_INT(b->n_cached_tokens, 8);
    CHECK_EQ_INT(b->block_ids[0], a->block_ids[0]);
    CHECK_EQ_INT(sim.km->stats.n_query_tokens, 20);
    CHECK_EQ_INT(sim.km->stats.n_hit_tokens, 8);
    sim_deinit(&sim);
}

static void test_nothing_lost_stress(void)
{
    // Many requests through a small cache: every one finishes with all its
    // tokens, and the pool ends empty.
    struct sim sim;
    sim_init(&sim, 12, 4, 6, 20, true);
    unsigned s = 7;
    for (int i = 0; i < 40; i++) {
        s = s * 1103515245u + 12345u;
        int n_prompt = 1 + (int)((s >> 8) % 20);
        int max_tokens = 1 + (int)((s >> 16) % 20);
        int base = (int)((s >> 4) % 3) * 7; // some shared prefixes
        sim_add(&sim, n_prompt, base, max_tokens, (int)((s >> 24) % 3));
    }
    int n_steps = 0;
    for (;;) {
        bool all = true;
        for (int i = 0; i < sim.n_reqs; i++)
            all &= request_is_finished(sim.reqs[i]);
        if (all || n_steps > 5000)
            break;
        sim_step(&sim);
        n_steps++;
    }
    for (int i = 0; i < sim.n_reqs; i++) {
        struct request *req = sim.reqs[i];
        CHECK(request_is_finished(req));
        CHECK_EQ_INT(request_n_output_tokens(req), req->sp.max_tokens);
        for (int k = req->n_prompt_tokens; k < req->n_tokens; k++)
            CHECK_EQ_INT(req->token_ids[k], 1000 + (int)req->id * 100 + k);
    }
    CHECK(sim.s->n_preemptions > 0);
    CHECK(sim.km->stats.n_hit_tokens > 0);
    CHECK_EQ_INT(kv_manager_n_free_blocks(sim.km), 12);
    sim_deinit(&sim);
}

static void test_oom(void)
{
    struct kv_manager *km;
    CHECK_EQ_INT(kv_manager_create(8, 4, 64, true, &km), VLLMC_OK);
    struct scheduler_config cfg = {
        .max_num_seqs = 4, .max_num_batched_tokens = 32, .max_model_len = 64};
    int n_fail = 0;
    for (long n = 1;; n++) {
        struct scheduler *s = NULL;
        mem_fail_after(n);
        enum vllmc_status rc = scheduler_create(&cfg, km, &s);
        mem_fail_after(0);
        if (rc == VLLMC_OK) {
            scheduler_free(s);
            break;
        }
        CHECK_EQ_INT(rc, VLLMC_ERR_NOMEM);
        CHECK(s == NULL);
        n_fail++;
    }
    CHECK(n_fail >= 6);
    kv_manager_free(km);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"token_budget", test_token_budget},
        {"chunked_prefill", test_chunked_prefill},
        {"decode_first", test_decode_first},
        {"max_num_seqs", test_max_num_seqs},
        {"preemption_and_resume", test_preemption_and_resume},
        {"priority_order", test_priority_order},
        {"priority_preemption", test_priority_preemption},
        {"same_step_prefix_sharing", test_same_step_prefix_sharing},
        {"nothing_lost_stress", test_nothing_lost_stress},
        {"oom", test_oom},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
