// Bump allocator.
#include "core/arena.h"

#include "core/alloc.h"

enum vllmc_status arena_init(struct arena *a, size_t cap_bytes)
{
    *a = (struct arena){0};
    a->base = mem_alloc_aligned(64, cap_bytes);
    if (!a->base)
        return VLLMC_ERR_NOMEM;
    a->cap_bytes = cap_bytes;
    return VLLMC_OK;
}

void arena_deinit(struct arena *a)
{
    mem_free(a->base);
    *a = (struct arena){0};
}

void *arena_alloc(struct arena *a, size_t n_bytes, size_t align)
{
    size_t start = (a->used_bytes + align - 1) & ~(align - 1);
    if (start > a->cap_bytes || n_bytes > a->cap_bytes - start)
        return NULL;
    a->used_bytes = start + n_bytes;
    if (a->used_bytes > a->peak_bytes)
        a->peak_bytes = a->used_bytes;
    return a->base + start;
}

void arena_reset(struct arena *a)
{
    a->used_bytes = 0;
}
