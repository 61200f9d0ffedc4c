// RMSNorm and fused residual-add + RMSNorm on the GPU: one block per row,
// f32 activations, f32/f16/bf16 weights, f32 sums.
#ifndef VLLMC_BACKEND_CUDA_NORM_CUH
#define VLLMC_BACKEND_CUDA_NORM_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/op.h"

bool cuda_rmsnorm_supports(const struct op_call *c);
enum vllmc_status cuda_rmsnorm_run(const struct op_call *c);
bool cuda_add_rmsnorm_supports(const struct op_call *c);
enum vllmc_status cuda_add_rmsnorm_run(const struct op_call *c);

#ifdef __cplusplus
}
#endif
#endif
