// AVX-512 (F, BW, VL) providers, compiled with those flags and listed only
// when the CPU has them.
#ifndef VLLMC_BACKEND_CPU_AVX512_AVX512_H
#define VLLMC_BACKEND_CPU_AVX512_AVX512_H

#include "backend/op.h"

#define CPU_AVX512_PRIORITY 60

extern const struct op_provider cpu_avx512_matmul;
extern const struct op_provider cpu_avx512bf16_matmul; // needs AVX512_BF16 too

#endif
