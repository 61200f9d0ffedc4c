// The one allocation funnel. Nothing else calls malloc, so tests can make the
// Nth allocation fail (mem_fail_after) and check every error path.
#ifndef VLLMC_CORE_ALLOC_H
#define VLLMC_CORE_ALLOC_H

#include <stddef.h>

void *mem_alloc(size_t n_bytes);                 // NULL on failure; n_bytes 0 gives a unique pointer
void *mem_calloc(size_t n, size_t size);         // zeroed; NULL on failure or overflow
void *mem_realloc(void *p, size_t n_bytes);      // like realloc; p stays valid on failure
void *mem_alloc_aligned(size_t align, size_t n_bytes); // align: power of two >= sizeof(void*)
void mem_free(void *p);                          // NULL is a no-op
char *mem_strdup(const char *s);                 // owned copy, NULL on failure

// Whole pages straight from the kernel: n_bytes of zeros starting on an align
// boundary (a power of two, at least the page size), committed page by page as
// they are first touched, so a large buffer costs no time or memory until it
// is used. NULL on failure. Free with mem_pages_free(p, n_bytes), the same
// n_bytes.
void *mem_pages_alloc(size_t align, size_t n_bytes);
void mem_pages_free(void *p, size_t n_bytes);    // NULL is a no-op
char *mem_strndup(const char *s, size_t n);      // copies at most n bytes and adds NUL

// Test hook: the n-th allocation from now fails (1 = the next one); 0 disables.
// Process-wide; not for concurrent use.
void mem_fail_after(long n);
// Number of allocations made since start (for tests counting allocation sites).
long mem_alloc_count(void);

#endif
