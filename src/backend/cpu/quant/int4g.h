// The int4g weight type on the CPU (AWQ/GPTQ 4-bit weights repacked per output
// row, see blocks.h): its fast matmul provider. Dequantization and the test
// quantizer are listed with the other types in dequant.h and quantize.h.
#ifndef VLLMC_BACKEND_CPU_QUANT_INT4G_H
#define VLLMC_BACKEND_CPU_QUANT_INT4G_H

#include "backend/cpu/quant/qmatmul.h"
#include "backend/op.h"

// int4g x f32 with 8-bit activations on the quantized-matmul driver (qmatmul.h);
// they read x through the optional act-order permutation.
extern const struct op_provider cpu_int4g_avx2_matmul;   // needs AVX2, FMA, F16C
extern const struct op_provider cpu_int4g_avx512_matmul; // also AVX-512 F/BW/VL/VNNI

// The ISA-independent half of those providers (int4g_matmul.c): qmm_supports
// plus the permutation's shape; qmm_run over x gathered through the
// permutation into scratch when the call has one.
bool int4g_qmm_supports(const struct qmm_isa *isa, const struct op_call *c);
enum vllmc_status int4g_qmm_run(const struct qmm_isa *isa, const struct op_call *c);

#endif
