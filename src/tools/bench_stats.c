// Summary statistics of the benchmarks (see bench_stats.h).
#include "tools/bench_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

static int bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(double *x, int n, double p)
{
    if (n <= 0)
        return 0;
    qsort(x, (size_t)n, sizeof(*x), bench_cmp);
    double rank = p / 100.0 * (n - 1);
    if (rank <= 0)
        return x[0];
    if (rank >= n - 1)
        return x[n - 1];
    int lo = (int)floor(rank);
    double frac = rank - lo;
    return x[lo] + (x[lo + 1] - x[lo]) * frac;
}

void bench_summarize(const double *x, int n, struct bench_summary *out)
{
    memset(out, 0, sizeof(*out));
    if (n <= 0)
        return;
    double sum = 0, mn = x[0], mx = x[0];
    for (int i = 0; i < n; i++) {
        sum += x[i];
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    out->mean = sum / n;
    out->min = mn;
    out->max = mx;
    if (n > 1) {
        double ss = 0;
        for (int i = 0; i < n; i++)
            ss += (x[i] - out->mean) * (x[i] - out->mean);
        out->stddev = sqrt(ss / (n - 1));
    }
    double *copy = mem_alloc((size_t)n * sizeof(*copy));
    if (copy) {
        memcpy(copy, x, (size_t)n * sizeof(*copy));
        out->median = bench_percentile(copy, n, 50);
        mem_free(copy);
    }
}
