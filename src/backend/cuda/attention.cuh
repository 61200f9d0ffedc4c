// Paged causal attention on the GPU for varlen batches that mix prefill
// chunks and decode tokens: GQA-aware tiles, split-K for long decodes.
#ifndef VLLMC_BACKEND_CUDA_ATTENTION_CUH
#define VLLMC_BACKEND_CUDA_ATTENTION_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/op.h"

bool cuda_attention_supports(const struct op_call *c);
enum vllmc_status cuda_attention_run(const struct op_call *c);

#ifdef __cplusplus
}
#endif
#endif
