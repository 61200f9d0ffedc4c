// The fused gate|up decode GEMV on the GPU: one warp reads the gate and the
// up row of an output and writes silu(gate) * up (MATMUL_SILU_MUL).
#ifndef VLLMC_BACKEND_CUDA_GEMV_SILU_CUH
#define VLLMC_BACKEND_CUDA_GEMV_SILU_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/op.h"

// Token counts the kernel takes: decode of one or two sequences, where one
// warp per output row is the faster GEMV (matmul.cu) and a launch saved counts.
#define CUDA_GEMV_SILU_MAX_M 2

bool cuda_gemv_silu_supports(const struct op_call *c);
enum vllmc_status cuda_gemv_silu_run(const struct op_call *c);
// NORM_MATMUL with silu_mul at one token: the norm staged in the kernel.
bool cuda_norm_gemv_silu_supports(const struct op_call *c);
enum vllmc_status cuda_norm_gemv_silu_run(const struct op_call *c);

#ifdef __cplusplus
}
#endif
#endif
