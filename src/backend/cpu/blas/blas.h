// The OpenBLAS provider, present when the build found OpenBLAS.
#ifndef VLLMC_BACKEND_CPU_BLAS_BLAS_H
#define VLLMC_BACKEND_CPU_BLAS_BLAS_H

#include "backend/op.h"

// Below cpu-avx2 and cpu-avx512 on purpose: see matmul.c.
#define CPU_BLAS_PRIORITY 40
// Smallest m the gate accepts: below it our kernels win (bench/ops).
#define CPU_BLAS_MIN_M 32

#ifdef VLLMC_HAVE_OPENBLAS
extern const struct op_provider cpu_blas_matmul;
#endif

#endif
