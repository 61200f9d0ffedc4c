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

// Which decode GEMV the packed types take (VLLMC_CUDA_QGEMV at backend
// creation): 0 the byte-loading f32 kernel everywhere, 1 the packed one (16-byte
// loads through shared memory, 16-bit activations, integer dot products),
// 2 (the default) as 1 but Q4_K, Q6_K and Q8_0 at one token read W straight
// into registers, 3 the same two rows a warp.
void cuda_qgemv_set_mode(int mode);
// Under mode 2, whether one token's Q4_K rows take the lane-item GEMV, a
// whole block a lane (VLLMC_CUDA_QGEMV_LANE: 1, the default, or 0).
void cuda_qgemv_set_lane(int mode);
bool cuda_qgemv_supports(const struct op_call *c);
enum vllmc_status cuda_qgemv_run(const struct op_call *c);
bool cuda_qgemm_supports(const struct op_call *c);
enum vllmc_status cuda_qgemm_run(const struct op_call *c);
// NORM_MATMUL at one token over packed W (with silu_mul too): the norm, and
// the SiLU-mul of a gate|up W, inside the one-token GEMVs.
bool cuda_norm_qgemv_supports(const struct op_call *c);
enum vllmc_status cuda_norm_qgemv_run(const struct op_call *c);
bool cuda_qembedding_supports(const struct op_call *c);
enum vllmc_status cuda_qembedding_run(const struct op_call *c);

#ifdef __cplusplus
}
#endif
#endif
