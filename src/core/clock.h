// Monotonic clock.
#ifndef VLLMC_CORE_CLOCK_H
#define VLLMC_CORE_CLOCK_H

#include <stdint.h>

int64_t time_now_us(void); // CLOCK_MONOTONIC in microseconds
double time_now_s(void);

#endif
