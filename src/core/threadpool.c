// Thread pool: one atomic word announces each run and hands out its tasks;
// whoever finishes the last task wakes the caller.
// Waiting is a short spin (runs arrive back to back during a forward pass)
// followed by a condition-variable sleep, so an idle pool costs no CPU.
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "core/alloc.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

// Spin iterations before sleeping: a few microseconds, about the gap between
// two ops of a decode step.
#define THREADPOOL_SPIN 4000

// The work word packs the run's generation, its task count and the next
// unclaimed task, so a claim (one CAS) can never take a task of a run other
// than the one whose generation the claimer saw, and a worker that wakes late
// finds nothing to do instead of being waited for.
#define WORK_IDX_BITS 20
#define WORK_N_BITS 20
#define WORK_GEN_BITS (64 - WORK_IDX_BITS - WORK_N_BITS)
#define WORK_MAX_TASKS ((1 << WORK_IDX_BITS) - 1)
#define WORK_GEN(w) ((w) >> (WORK_IDX_BITS + WORK_N_BITS))
#define WORK_N(w) (((w) >> WORK_IDX_BITS) & WORK_MAX_TASKS)
#define WORK_IDX(w) ((w)&WORK_MAX_TASKS)

// One thread's share of a threadpool_run_shares run: items [lo, hi), packed
// in one word (lo in the low half) so that the owner taking lo and a thief
// cutting hi never both succeed on the same item. A cache line each.
struct share {
    _Atomic uint64_t range;
    char pad[64 - sizeof(uint64_t)];
};

struct threadpool {
    int n_threads;      // including the caller
    struct share *shares; // owned [n_threads]
    pthread_t *workers; // owned [n_threads - 1]
    int n_started;      // workers actually running (for cleanup)
    pthread_mutex_t mu;
    pthread_cond_t cv_work; // a new generation or stop
    pthread_cond_t cv_done; // n_done reached the task count
    _Atomic uint64_t work;  // generation | n_tasks | next task, see above
    atomic_int n_done;      // tasks of the current run finished
    atomic_bool stop;
    atomic_bool running; // catches reentrant or concurrent use
    threadpool_fn fn;    // valid while a run is in flight
    void *ctx;
};

struct worker_arg {
    struct threadpool *pool;
    int thread;
};

// Claims and runs tasks of generation gen until none is left.
static void threadpool_do_tasks(struct threadpool *pool, uint64_t gen, int thread)
{
    uint64_t w = atomic_load_explicit(&pool->work, memory_order_acquire);
    for (;;) {
        if (WORK_GEN(w) != gen || WORK_IDX(w) >= WORK_N(w))
            return;
        if (!atomic_compare_exchange_weak_explicit(&pool->work, &w, w + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        // The run cannot end while this task is unfinished, so fn and ctx
        // still belong to generation gen.
        int task = (int)WORK_IDX(w);
        pool->fn(pool->ctx, task, thread);
        if (atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_acq_rel) + 1 ==
            (int)WORK_N(w)) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->cv_done);
            pthread_mutex_unlock(&pool->mu);
        }
        w = atomic_load_explicit(&pool->work, memory_order_acquire);
    }
}

static void *threadpool_worker(void *p)
{
    struct threadpool *pool = ((struct worker_arg *)p)->pool;
    int thread = ((struct worker_arg *)p)->thread;
    mem_free(p);
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen = WORK_GEN(atomic_load_explicit(&pool->work, memory_order_acquire));
        for (int spin = 0; gen == seen && spin < THREADPOOL_SPIN; spin++) {
            if (atomic_load_explicit(&pool->stop, memory_order_relaxed))
                return NULL;
            cpu_relax();
            gen = WORK_GEN(atomic_load_explicit(&pool->work, memory_order_acquire));
        }
        if (gen == seen) {
            pthread_mutex_lock(&pool->mu);
            while ((gen = WORK_GEN(atomic_load_explicit(&pool->work, memory_order_acquire))) ==
                       seen &&
                   !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv_work, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop))
            return NULL;
        seen = gen;
        threadpool_do_tasks(pool, gen, thread);
    }
}

int threadpool_cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0)
            return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

enum vllmc_status threadpool_create(int n_threads, struct threadpool **out, struct err *err)
{
    *out = NULL;
    if (n_threads < 0 || n_threads > 1024)
        return err_set(err, VLLMC_ERR_INVALID_ARG, "threadpool: %d threads", n_threads);
    if (n_threads == 0)
        n_threads = threadpool_cpu_count();
    struct threadpool *pool = mem_calloc(1, sizeof *pool);
    if (!pool)
        return err_set(err, VLLMC_ERR_NOMEM, "threadpool: out of memory");
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pool->shares = mem_alloc_aligned(64, (size_t)n_threads * sizeof *pool->shares);
    pthread_cond_init(&pool->cv_work, NULL);
    pthread_cond_init(&pool->cv_done, NULL);
    enum vllmc_status rc = VLLMC_OK;
    if (!pool->shares) {
        rc = err_set(err, VLLMC_ERR_NOMEM, "threadpool: out of memory");
        goto fail;
    }
    if (n_threads > 1) {
        pool->workers = mem_calloc((size_t)n_threads - 1, sizeof *pool->workers);
        if (!pool->workers) {
            rc = err_set(err, VLLMC_ERR_NOMEM, "threadpool: out of memory");
            goto fail;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *arg = mem_alloc(sizeof *arg);
        if (!arg) {
            rc = err_set(err, VLLMC_ERR_NOMEM, "threadpool: out of memory");
            goto fail;
        }
        *arg = (struct worker_arg){.pool = pool, .thread = i};
        if (pthread_create(&pool->workers[i - 1], NULL, threadpool_worker, arg)) {
            mem_free(arg);
            rc = err_set(err, VLLMC_ERR_BACKEND, "threadpool: cannot start worker %d", i);
            goto fail;
        }
        pool->n_started++;
    }
    *out = pool;
    return VLLMC_OK;
fail:
    threadpool_free(pool);
    return rc;
}

void threadpool_free(struct threadpool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, true);
    pthread_cond_broadcast(&pool->cv_work);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_started; i++)
        pthread_join(pool->workers[i], NULL);
    pthread_cond_destroy(&pool->cv_done);
    pthread_cond_destroy(&pool->cv_work);
    pthread_mutex_destroy(&pool->mu);
    mem_free(pool->workers);
    mem_free(pool->shares);
    mem_free(pool);
}

int threadpool_n_threads(const struct threadpool *pool)
{
    return pool ? pool->n_threads : 1;
}

void threadpool_run(struct threadpool *pool, threadpool_fn fn, void *ctx, int n_tasks)
{
    if (n_tasks <= 0)
        return;
    if (!pool || pool->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    VLLMC_ASSERT(n_tasks <= WORK_MAX_TASKS);
    VLLMC_ASSERT(!atomic_exchange(&pool->running, true));
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store_explicit(&pool->n_done, 0, memory_order_relaxed);
    // The generation wraps after 2^24 runs; a worker would have to sleep
    // through all of them to mistake one run for another.
    uint64_t gen = (WORK_GEN(atomic_load_explicit(&pool->work, memory_order_relaxed)) + 1) &
                   ((1u << WORK_GEN_BITS) - 1);
    atomic_store_explicit(&pool->work,
                          gen << (WORK_IDX_BITS + WORK_N_BITS) | (uint64_t)n_tasks << WORK_IDX_BITS,
                          memory_order_release);
    // Workers that gave up spinning check the generation under the mutex, so
    // taking it here before the broadcast cannot lose a wake-up.
    pthread_mutex_lock(&pool->mu);
    pthread_cond_broadcast(&pool->cv_work);
    pthread_mutex_unlock(&pool->mu);

    threadpool_do_tasks(pool, gen, 0);

    for (int spin = 0; spin < THREADPOOL_SPIN; spin++) {
        if (atomic_load_explicit(&pool->n_done, memory_order_acquire) == n_tasks)
            goto done;
        cpu_relax();
    }
    pthread_mutex_lock(&pool->mu);
    while (atomic_load_explicit(&pool->n_done, memory_order_acquire) != n_tasks)
        pthread_cond_wait(&pool->cv_done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
done:
    atomic_store(&pool->running, false);
}

// ---- runs in shares ----

#define SHARE_LO(r) ((uint32_t)(r))
#define SHARE_HI(r) ((uint32_t)((r) >> 32))
#define SHARE(lo, hi) ((uint64_t)(lo) | (uint64_t)(hi) << 32)

struct shares_run {
    struct threadpool *pool;
    threadpool_fn fn;
    void *ctx;
};

// Takes the first item of share s into *item; false once it is empty.
static bool share_take_front(struct share *s, int *item)
{
    uint64_t r = atomic_load_explicit(&s->range, memory_order_acquire);
    while (SHARE_LO(r) < SHARE_HI(r)) {
        if (atomic_compare_exchange_weak_explicit(&s->range, &r, r + 1, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            *item = (int)SHARE_LO(r);
            return true;
        }
    }
    return false;
}

// Cuts the back half (rounded up) of the largest share other than own off
// into [*lo, *hi); false when every other share is empty.
static bool share_steal(struct threadpool *pool, int own, uint32_t *lo, uint32_t *hi)
{
    for (;;) {
        int victim = -1;
        uint32_t most = 0;
        uint64_t seen = 0;
        for (int i = 0; i < pool->n_threads; i++) {
            uint64_t r = atomic_load_explicit(&pool->shares[i].range, memory_order_acquire);
            uint32_t left = SHARE_HI(r) > SHARE_LO(r) ? SHARE_HI(r) - SHARE_LO(r) : 0;
            if (i != own && left > most) {
                most = left;
                victim = i;
                seen = r;
            }
        }
        if (victim < 0)
            return false;
        uint32_t mid = SHARE_HI(seen) - (most + 1) / 2;
        if (atomic_compare_exchange_strong_explicit(&pool->shares[victim].range, &seen,
                                                    SHARE(SHARE_LO(seen), mid),
                                                    memory_order_acq_rel, memory_order_acquire)) {
            *lo = mid;
            *hi = SHARE_HI(seen);
            return true;
        }
    }
}

// Pool task s: walks share s, then what it steals, in order. Only the task
// that owns a share moves its lo (taking items) or refills it (after a
// steal, when it is empty), so a refill never races an owner; thieves only
// lower hi, and an empty share is never cut.
static void shares_task(void *p, int task, int thread)
{
    const struct shares_run *run = p;
    struct share *own = &run->pool->shares[task];
    for (;;) {
        int item;
        while (share_take_front(own, &item))
            run->fn(run->ctx, item, thread);
        uint32_t lo, hi;
        if (!share_steal(run->pool, task, &lo, &hi))
            return;
        atomic_store_explicit(&own->range, SHARE(lo, hi), memory_order_release);
    }
}

void threadpool_run_shares(struct threadpool *pool, threadpool_fn fn, void *ctx, int n_items)
{
    int n = threadpool_n_threads(pool);
    if (n_items <= 0)
        return;
    if (n == 1 || n_items < 2 * n) {
        threadpool_run(pool, fn, ctx, n_items);
        return;
    }
    for (int i = 0; i < n; i++) {
        uint32_t lo = (uint32_t)((int64_t)n_items * i / n);
        uint32_t hi = (uint32_t)((int64_t)n_items * (i + 1) / n);
        atomic_store_explicit(&pool->shares[i].range, SHARE(lo, hi), memory_order_relaxed);
    }
    struct shares_run run = {.pool = pool, .fn = fn, .ctx = ctx};
    // threadpool_run's release store of the run publishes the shares.
    threadpool_run(pool, shares_task, &run, n);
}
