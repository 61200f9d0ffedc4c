// AWQ/GPTQ int4g weights on the GPU, kept packed: a fused dequantizing GEMV
// for decode and dequantization to bf16 into cuBLASLt for prefill. Both read
// x through the act-order permutation when the call carries one.
#ifndef VLLMC_BACKEND_CUDA_INT4G_CUH
#define VLLMC_BACKEND_CUDA_INT4G_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/op.h"

// Largest token count of the int4g GEMV.
#define CUDA_INT4G_GEMV_MAX_M 8

bool cuda_int4g_gemv_supports(const struct op_call *c);
enum vllmc_status cuda_int4g_gemv_run(const struct op_call *c);
bool cuda_int4g_gemm_supports(const struct op_call *c);
enum vllmc_status cuda_int4g_gemm_run(const struct op_call *c);

#ifdef __cplusplus
}
#endif
#endif
