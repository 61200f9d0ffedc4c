// Allocation funnel with a failure-injection hook for out-of-memory tests.
#include "core/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static atomic_long fail_countdown;
static atomic_long n_allocs;

void mem_fail_after(long n)
{
    atomic_store(&fail_countdown, n);
}

long mem_alloc_count(void)
{
    return atomic_load(&n_allocs);
}

// True when the injected failure fires for this allocation.
static int inject_failure(void)
{
    atomic_fetch_add(&n_allocs, 1);
    long c = atomic_load(&fail_countdown);
    if (c <= 0)
        return 0;
    c = atomic_fetch_sub(&fail_countdown, 1);
    return c == 1;
}

void *mem_alloc(size_t n_bytes)
{
    if (inject_failure())
        return NULL;
    return malloc(n_bytes ? n_bytes : 1);
}

void *mem_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    if (inject_failure())
        return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}

void *mem_realloc(void *p, size_t n_bytes)
{
    if (inject_failure())
        return NULL;
    return realloc(p, n_bytes ? n_bytes : 1);
}

void *mem_alloc_aligned(size_t align, size_t n_bytes)
{
    if (inject_failure())
        return NULL;
    void *p = NULL;
    if (posix_memalign(&p, align, n_bytes ? n_bytes : 1))
        return NULL;
    return p;
}

void mem_free(void *p)
{
    free(p);
}

char *mem_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = mem_alloc(len + 1);
    if (!d)
        return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

char *mem_strdup(const char *s)
{
    return mem_strndup(s, SIZE_MAX);
}
