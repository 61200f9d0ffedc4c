// Rotary position embedding on the GPU, in place: both pairings (rotate-half
// and interleaved), and the Qwen3 fusion of per-head RMSNorm with RoPE.
#ifndef VLLMC_BACKEND_CUDA_ROPE_CUH
#define VLLMC_BACKEND_CUDA_ROPE_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/op.h"

bool cuda_rope_supports(const struct op_call *c);
enum vllmc_status cuda_rope_run(const struct op_call *c);
bool cuda_qk_norm_rope_supports(const struct op_call *c);
enum vllmc_status cuda_qk_norm_rope_run(const struct op_call *c);

#ifdef __cplusplus
}
#endif
#endif
