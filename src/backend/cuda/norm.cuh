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

// NORM_MATMUL at one token: the 16-bit decode GEMVs (matmul.cu, gemv_silu.cu)
// stage (x + add) * w in shared memory, k floats of it.
#define CUDA_NORM_STAGE_MAX_K 12288
// Warps (output rows) a block of those GEMVs. Each block repeats the staging,
// so the plain GEMVs' 4 lost to the norm kernels (H200, 0.6B tg128 -5%);
// 8 was level, 16 gained 4-8%, 32 half of that.
#define GEMV_NORM_WARPS 16
// The norm's operands of a NORM_MATMUL call fit that (one token, k % 4 == 0,
// 16-byte aligned rows, a float norm weight) and cuda_norm_matmul is set;
// the projection's are for the caller's gate.
bool cuda_norm_in_ok(const struct op_call *c);

#ifdef __cplusplus
}
#endif
#endif
