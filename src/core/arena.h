// Bump allocator for per-step scratch: sized once, reset at the start of each
// step, so the hot path never calls the allocator.
#ifndef VLLMC_CORE_ARENA_H
#define VLLMC_CORE_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "vllmc.h"

struct arena {
    uint8_t *base;     // owned, 64-byte aligned
    size_t cap_bytes;
    size_t used_bytes;
    size_t peak_bytes; // high-water mark since init, for sizing
};

enum vllmc_status arena_init(struct arena *a, size_t cap_bytes);
void arena_deinit(struct arena *a);
// Returns n_bytes of scratch aligned to align (power of two), or NULL when full.
// Valid until the next arena_reset().
void *arena_alloc(struct arena *a, size_t n_bytes, size_t align);
void arena_reset(struct arena *a);

#endif
