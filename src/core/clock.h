// Monotonic clock and process CPU time.
#ifndef VLLMC_CORE_CLOCK_H
#define VLLMC_CORE_CLOCK_H

#include <stdint.h>

int64_t time_now_us(void); // CLOCK_MONOTONIC in microseconds
double time_now_s(void);
double time_process_cpu_s(void); // CPU time of every thread of the process so far

#endif
