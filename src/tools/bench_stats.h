// Summary statistics shared by the benchmarks: mean, sample standard
// deviation, median and percentiles with numpy's default (linear) rule, so
// figures match llama-bench and `vllm bench serve` computed on the same data.
#ifndef VLLMC_TOOLS_BENCH_STATS_H
#define VLLMC_TOOLS_BENCH_STATS_H

struct bench_summary {
    double mean;
    double stddev; // sample standard deviation (n - 1), 0 for one value
    double median;
    double min;
    double max;
};

// Summarizes x[0, n); n 0 gives zeros. x is left as it was.
void bench_summarize(const double *x, int n, struct bench_summary *out);

// The p-th percentile (0..100) of x[0, n), linear interpolation between the
// two nearest ranks (numpy.percentile's default). Sorts x in place. 0 for n 0.
double bench_percentile(double *x, int n, double p);

// Sub-commands of `vllmc bench`.
int bench_serve_main(int argc, char **argv);      // bench_serve.c
int bench_throughput_main(int argc, char **argv); // bench_throughput.c

#endif
