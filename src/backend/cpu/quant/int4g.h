// The int4g weight type on the CPU (AWQ/GPTQ 4-bit weights repacked per output
// row, see blocks.h): its fast matmul provider. Dequantization and the test
// quantizer are listed with the other types in dequant.h and quantize.h.
#ifndef VLLMC_BACKEND_CPU_QUANT_INT4G_H
#define VLLMC_BACKEND_CPU_QUANT_INT4G_H

#include "backend/op.h"

// int4g x f32 with 8-bit activations on the quantized-matmul driver (qmatmul.h);
// reads x through the optional act-order permutation. Needs AVX2, FMA, F16C.
extern const struct op_provider cpu_int4g_avx2_matmul;

#endif
