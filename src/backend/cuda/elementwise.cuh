// Element-wise ops on the GPU: SiLU-gated product and addition, over rows
// that may be strided (views into fused projections).
#ifndef VLLMC_BACKEND_CUDA_ELEMENTWISE_CUH
#define VLLMC_BACKEND_CUDA_ELEMENTWISE_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/op.h"

bool cuda_silu_mul_supports(const struct op_call *c);
enum vllmc_status cuda_silu_mul_run(const struct op_call *c);
bool cuda_add_supports(const struct op_call *c);
enum vllmc_status cuda_add_run(const struct op_call *c);

#ifdef __cplusplus
}
#endif
#endif
