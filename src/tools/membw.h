// Memory read bandwidth probe: a read-only reduction over a buffer far larger
// than the last-level cache, split over threads, with the widest vector loads
// the CPU has. Decode speed is judged against this figure, measured in the
// same run because a shared machine's bandwidth moves with its neighbours.
#ifndef VLLMC_TOOLS_MEMBW_H
#define VLLMC_TOOLS_MEMBW_H

#include <stddef.h>

struct membw_result {
    double best_gbps;    // the fastest pass: bytes / seconds, 1 GB = 1e9 bytes
    double median_gbps;
    const char *isa;     // "avx512", "avx2" or "scalar"
    size_t n_bytes;
    int n_threads;
    int n_reps;
};

// Reads n_bytes (rounded down to a multiple of 4 KiB per thread) n_reps times
// with n_threads threads after one untimed pass. Returns 0, or 1 when memory
// or threads cannot be had.
int membw_measure(int n_threads, size_t n_bytes, int n_reps, struct membw_result *out);

#endif
