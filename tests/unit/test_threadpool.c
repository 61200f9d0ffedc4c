// Thread pool: every task runs exactly once per run, for many back-to-back
// runs and for pools of 1..4 threads; thread ids stay in range.
#include <stdatomic.h>

#include "check.h"
#include "core/threadpool.h"

struct count_ctx {
    atomic_int hits[257];
    atomic_int bad_thread;
    int n_threads;
};

static void count_task(void *p, int task, int thread)
{
    struct count_ctx *ctx = p;
    atomic_fetch_add(&ctx->hits[task], 1);
    if (thread < 0 || thread >= ctx->n_threads)
        atomic_fetch_add(&ctx->bad_thread, 1);
}

static void run_many(int n_threads)
{
    struct threadpool *pool = NULL;
    struct err err = {0};
    CHECK_EQ_INT(threadpool_create(n_threads, &pool, &err), VLLMC_OK);
    CHECK_EQ_INT(threadpool_n_threads(pool), n_threads);
    static struct count_ctx ctx;
    ctx.n_threads = n_threads;
    int n_bad = 0;
    for (int run = 0; run < 3000; run++) {
        int n_tasks = 1 + run % 257;
        for (int i = 0; i < n_tasks; i++)
            atomic_store(&ctx.hits[i], 0);
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
    run_many(1);
}

static void test_two_threads(void)
{
    run_many(2);
}

static void test_four_threads(void)
{
    run_many(4);
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
        {"null_pool_and_defaults", test_null_pool_and_defaults},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
