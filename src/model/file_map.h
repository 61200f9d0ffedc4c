// A whole file mapped read-only. Model files are read through mappings so the
// weights stay in the page cache and are never copied or written.
#ifndef VLLMC_MODEL_FILE_MAP_H
#define VLLMC_MODEL_FILE_MAP_H

#include <stddef.h>

#include "core/status.h"

struct file_map {
    const void *addr; // owned mapping; NULL for an empty file
    size_t n_bytes;
};

// Maps the regular file at path. On failure *fm is zeroed and err says why,
// naming the file (VLLMC_ERR_IO; VLLMC_ERR_NOT_FOUND when it does not exist).
enum vllmc_status file_map_open(const char *path, struct file_map *fm, struct err *err);
// Unmaps; a zeroed file_map is a no-op.
void file_map_close(struct file_map *fm);
// Drops the pages wholly inside [p, p + n) (clamped to the mapping) from the
// process: bytes read once and kept elsewhere. The mapping is never written,
// so a later read brings the same bytes back from the file.
void file_map_drop(const struct file_map *fm, const void *p, size_t n);

#endif
