// Allocation funnel with a failure-injection hook for out-of-memory tests.
#include "core/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if !defined(MAP_ANONYMOUS) && defined(MAP_ANON)
#define MAP_ANONYMOUS MAP_ANON
#endif

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

// The mapping is n_bytes + align bytes long; the aligned block sits in it,
// the unused head and tail go back at once, and one page after the block
// stays mapped without access, so a write past the end faults instead of
// landing in whatever mapping comes next.
void *mem_pages_alloc(size_t align, size_t n_bytes)
{
    if (inject_failure())
        return NULL;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (align < page)
        align = page;
    if (n_bytes > SIZE_MAX - 2 * align)
        return NULL;
    size_t n = (n_bytes + page - 1) / page * page;
    if (n == 0)
        n = page;
    size_t span = n + align; // the block, its guard page, and room to align
    char *base = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    char *p = (char *)(((uintptr_t)base + align - 1) & ~(uintptr_t)(align - 1));
    char *end = p + n + page; // past the guard page
    if (p > base)
        munmap(base, (size_t)(p - base));
    if (base + span > end)
        munmap(end, (size_t)(base + span - end));
    if (mprotect(p + n, page, PROT_NONE)) {
        munmap(p, n + page);
        return NULL;
    }
    return p;
}

void mem_pages_free(void *p, size_t n_bytes)
{
    if (!p)
        return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t n = (n_bytes + page - 1) / page * page;
    munmap(p, (n ? n : page) + page);
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
