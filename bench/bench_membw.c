// Memory read bandwidth of this machine: a read-only reduction over a buffer
// far larger than the last-level cache with the widest vector loads the CPU
// has (the probe `vllmc bench` runs before its decode test).
//
//   bench_membw [--threads N] [--mib SIZE] [--reps N]     (defaults 2, 1024, 10)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/membw.h"

int main(int argc, char **argv)
{
    long n_threads = 2, mib = 1024, reps = 10;
    for (int i = 1; i < argc; i++) {
        long *dst = !strcmp(argv[i], "--threads") ? &n_threads
                    : !strcmp(argv[i], "--mib")   ? &mib
                    : !strcmp(argv[i], "--reps")  ? &reps
                                                  : NULL;
        char *end = NULL;
        if (!dst || i + 1 >= argc || (*dst = strtol(argv[++i], &end, 10)) < 1 || *end) {
            fprintf(stderr, "usage: bench_membw [--threads N] [--mib SIZE] [--reps N]\n");
            return 2;
        }
    }
    struct membw_result r;
    if (membw_measure((int)n_threads, (size_t)mib << 20, (int)reps, &r)) {
        fprintf(stderr, "bench_membw: cannot allocate %ld MiB or start %ld threads\n", mib,
                n_threads);
        return 1;
    }
    printf("read bandwidth: %.1f GB/s (best of %d; median %.1f GB/s), %d threads, %zu MiB, %s "
           "loads\n",
           r.best_gbps, r.n_reps, r.median_gbps, r.n_threads, r.n_bytes >> 20, r.isa);
    return 0;
}
