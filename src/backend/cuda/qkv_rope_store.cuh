// The step after a fused q|k|v matmul on the GPU, in one kernel: per-head
// q/k RMSNorm (Qwen3), RoPE of q and k, q to its buffer and k, v into the
// paged cache.
#ifndef VLLMC_BACKEND_CUDA_QKV_ROPE_STORE_CUH
#define VLLMC_BACKEND_CUDA_QKV_ROPE_STORE_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/op.h"

bool cuda_qkv_rope_store_supports(const struct op_call *c);
enum vllmc_status cuda_qkv_rope_store_run(const struct op_call *c);

#ifdef __cplusplus
}
#endif
#endif
