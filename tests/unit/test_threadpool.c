// Thread pool: every task runs exactly once per run, for many back-to-back
// runs and for pools of 1..4 threads; thread ids stay in range; runs in
// shares walk each thread's items in order.
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/threadpool.h"

struct count_ctx {
    atomic_int hits[257];
    atomic_int bad_thread;
    int n_threads;
};

// Now and then an item is slow, so that in runs in shares the other threads
// steal.
static void count_task(void *p, int task, int thread)
{
    struct count_ctx *ctx = p;
    if (atomic_fetch_add(&ctx->hits[task], 1) == 0 && task % 7 == thread)
        for (volatile int spin = 0; spin < 2000; spin++) {
        }
    if (thread < 0 || thread >= ctx->n_threads)
        atomic_fetch_add(&ctx->bad_thread, 1);
}

// Back-to-back runs of 0..257 tasks through threadpool_run, or through
// threadpool_run_shares (item counts around the share sizes): each task
// exactly once.
static void run_many(int n_threads, bool in_shares)
{
    struct threadpool *pool = NULL;
    struct err err = {0};
    CHECK_EQ_INT(threadpool_create(n_threads, &pool, &err), VLLMC_OK);
    CHECK_EQ_INT(threadpool_n_threads(pool), n_threads);
    static struct count_ctx ctx;
    ctx.n_threads = n_threads;
    int n_bad = 0;
    for (int run = 0; run < 3000; run++) {
        int n_tasks = run % 258;
        for (int i = 0; i < n_tasks; i++)
            atomic_store(&ctx.hits[i], 0);
        if (in_shares)
            threadpool_run_shares(pool, count_task, &ctx, n_tasks);
        else
            threadpool_run(pool, count_task, &ctx, n_tasks);
        for (int i = 0; i < n_tasks; i++)
            n_bad += atomic_load(&ctx.hits[i]) != 1;
    }
    CHECK_EQ_INT(n_bad, 0);
    CHECK_EQ_INT(atomic_load(&ctx.bad_thread), 0);
    threadpool_free(pool);
}

static void test_one_thread_inline(void)
{
    run_many(1, false);
}

static void test_two_threads(void)
{
    run_many(2, false);
}

static void test_four_threads(void)
{
    run_many(4, false);
}

static void test_shares_run_every_item_once(void)
{
    for (int n_threads = 1; n_threads <= 4; n_threads++)
        run_many(n_threads, true);
}

// The order: two threads over 256 items of a few microseconds each. Each
// walks its own share of 128 items, then what it steals. A steal happens when
// one share is empty and takes half of the other's rest, so the largest rest
// halves with every steal: at most 8, and the two logs together come as at
// most 2 + 8 runs of consecutive items (one more if one thread ran both pool
// tasks). Items handed out one at a time from one counter, as threadpool_run
// does, alternate between the threads and make dozens of runs, so the test
// needs runs where both threads did a good part of the work.
#define ORDER_ITEMS 256
struct order_ctx {
    atomic_int hits[ORDER_ITEMS];
    int log[2][ORDER_ITEMS]; // each thread's items in the order it ran them
    int n_log[2];
};

static void order_task(void *p, int item, int thread)
{
    struct order_ctx *ctx = p;
    atomic_fetch_add(&ctx->hits[item], 1);
    ctx->log[thread][ctx->n_log[thread]++] = item;
    for (volatile int spin = 0; spin < 3000; spin++) {
    }
}

static void test_shares_walk_in_order(void)
{
    struct threadpool *pool = NULL;
    struct err err = {0};
    CHECK_EQ_INT(threadpool_create(2, &pool, &err), VLLMC_OK);
    int n_shared = 0, n_bad = 0, most_runs = 0;
    for (int run = 0; run < 200; run++) {
        static struct order_ctx ctx;
        memset(&ctx, 0, sizeof ctx);
        threadpool_run_shares(pool, order_task, &ctx, ORDER_ITEMS);
        for (int i = 0; i < ORDER_ITEMS; i++)
            n_bad += atomic_load(&ctx.hits[i]) != 1;
        int n_runs = 0;
        for (int t = 0; t < 2; t++)
            for (int i = 0; i < ctx.n_log[t]; i++)
                n_runs += i == 0 || ctx.log[t][i] != ctx.log[t][i - 1] + 1;
        if (ctx.n_log[0] >= ORDER_ITEMS / 8 && ctx.n_log[1] >= ORDER_ITEMS / 8) {
            n_shared++;
            most_runs = n_runs > most_runs ? n_runs : most_runs;
        }
    }
    CHECK_EQ_INT(n_bad, 0);
    CHECK(n_shared > 0);
    CHECK(most_runs <= 11);
    printf("  %d of 200 runs split between the threads; most runs of items: %d\n", n_shared,
           most_runs);
    threadpool_free(pool);
}

static void test_null_pool_and_defaults(void)
{
    static struct count_ctx ctx;
    ctx.n_threads = 1;
    threadpool_run(NULL, count_task, &ctx, 5);
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(atomic_load(&ctx.hits[i]), 1);
    CHECK_EQ_INT(threadpool_n_threads(NULL), 1);
    struct threadpool *pool = NULL;
    struct err err = {0};
    CHECK_EQ_INT(threadpool_create(0, &pool, &err), VLLMC_OK);
    CHECK_EQ_INT(threadpool_n_threads(pool), threadpool_cpu_count());
    threadpool_free(pool);
    CHECK_EQ_INT(threadpool_create(-1, &pool, &err), VLLMC_ERR_INVALID_ARG);
    CHECK(pool == NULL);
    threadpool_free(NULL);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"one_thread_inline", test_one_thread_inline},
        {"two_threads", test_two_threads},
        {"four_threads", test_four_threads},
        {"shares_run_every_item_once", test_shares_run_every_item_once},
        {"shares_walk_in_order", test_shares_walk_in_order},
        {"null_pool_and_defaults", test_null_pool_and_defaults},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
