// Packed GGUF weights (legacy, k-quant and IQ4 types) on the GPU: a dequantizing
// GEMV for decode, dequantization to bf16 into cuBLASLt for prefill, and the
// embedding lookup of quantized tables.
#ifndef VLLMC_BACKEND_CUDA_QUANT_CUH
#define VLLMC_BACKEND_CUDA_QUANT_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/op.h"

// Largest token count of the dequantizing GEMV.
#define CUDA_QGEMV_MAX_M 8

// Whether decode takes the packed GEMV (16-byte loads, 8-bit activations,
// byte dot products; the default) or the byte-loading f32 one everywhere:
// VLLMC_CUDA_QGEMV=0 at backend creation.
void cuda_qgemv_set_packed(bool on);
bool cuda_qgemv_supports(const struct op_call *c);
enum vllmc_status cuda_qgemv_run(const struct op_call *c);
bool cuda_qgemm_supports(const struct op_call *c);
enum vllmc_status cuda_qgemm_run(const struct op_call *c);
bool cuda_qembedding_supports(const struct op_call *c);
enum vllmc_status cuda_qembedding_run(const struct op_call *c);

#ifdef __cplusplus
}
#endif
#endif
