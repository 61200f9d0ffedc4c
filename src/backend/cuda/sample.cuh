// Sampling on the GPU (OP_SAMPLE): greedy, temperature, min_p, top_k, top_p
// and logprobs over logits that stay on the device.
#ifndef VLLMC_BACKEND_CUDA_SAMPLE_CUH
#define VLLMC_BACKEND_CUDA_SAMPLE_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/op.h"

bool cuda_sample_supports(const struct op_call *c);
enum vllmc_status cuda_sample_run(const struct op_call *c);

#ifdef __cplusplus
}
#endif
#endif
