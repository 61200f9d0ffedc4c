// Persistent worker threads with a parallel-for. The calling thread takes part
// in every run, so a pool of n threads starts n - 1 workers and n = 1 runs
// everything inline. Idle workers spin briefly, then sleep on a condition
// variable, so thousands of runs per second stay cheap.
#ifndef VLLMC_CORE_THREADPOOL_H
#define VLLMC_CORE_THREADPOOL_H

#include "core/status.h"

struct threadpool;

// Runs task `task` (0 <= task < n_tasks) on thread `thread` (0 = the caller,
// 0 <= thread < threadpool_n_threads()), e.g. to pick per-thread scratch.
typedef void (*threadpool_fn)(void *ctx, int task, int thread);

// Starts n_threads - 1 workers (n_threads 0 = the CPUs this process may use).
// *out owns the pool; free with threadpool_free().
enum vllmc_status threadpool_create(int n_threads, struct threadpool **out, struct err *err);
void threadpool_free(struct threadpool *pool); // NULL is a no-op; joins the workers

int threadpool_n_threads(const struct threadpool *pool); // 1 for a NULL pool

// Calls fn(ctx, task, thread) once for every task in [0, n_tasks) (n_tasks at
// most about a million) and returns
// when all are done. Tasks are handed out dynamically, so fn must not depend on
// which thread runs which task. A NULL pool runs inline. One run at a time:
// not reentrant, and only one thread may call it on a given pool.
void threadpool_run(struct threadpool *pool, threadpool_fn fn, void *ctx, int n_tasks);

// Calls fn(ctx, item, thread) once for every item in [0, n_items), like
// threadpool_run, but in order within shares: the items are cut into one
// contiguous share per thread, each share is walked from its first item up,
// and a thread whose share is done takes the back half of what is left of the
// largest other share and walks that. So a thread's items follow each other in
// memory order (one stream the hardware prefetcher keeps up with, and whatever
// an item prefetched past its end is what the thread does next), yet a thread
// that falls behind is helped. Which items share a thread still changes
// nothing that fn computes.
void threadpool_run_shares(struct threadpool *pool, threadpool_fn fn, void *ctx, int n_items);

// The number of CPUs this process may run on (sched affinity), at least 1.
int threadpool_cpu_count(void);

#endif
