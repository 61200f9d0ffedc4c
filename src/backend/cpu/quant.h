// Row conversion of weight dtypes to f32 for the CPU providers. F32, F16 and
// BF16 live in quant.c; packed quantized formats are implemented under
// src/backend/cpu/quant/ and registered in quant.c's table.
#ifndef VLLMC_BACKEND_CPU_QUANT_H
#define VLLMC_BACKEND_CPU_QUANT_H

#include <stdint.h>

#include "core/dtype.h"

// Converts n elements (a multiple of the dtype's block size) at src to f32 at dst.
typedef void (*dequant_row_fn)(const void *src, float *dst, int64_t n);

// The converter for t, or NULL when this build has none.
dequant_row_fn cpu_dequant_row(enum dtype t);

#endif
