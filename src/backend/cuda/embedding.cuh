// Token embedding lookup on the GPU: rows of an f32/f16/bf16 table gathered
// into f32 activations; and the select of sampled ids into input ids.
#ifndef VLLMC_BACKEND_CUDA_EMBEDDING_CUH
#define VLLMC_BACKEND_CUDA_EMBEDDING_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/op.h"

bool cuda_embedding_supports(const struct op_call *c);
enum vllmc_status cuda_embedding_run(const struct op_call *c);
// OP_SELECT_IDS
bool cuda_select_ids_supports(const struct op_call *c);
enum vllmc_status cuda_select_ids_run(const struct op_call *c);

#ifdef __cplusplus
}
#endif
#endif
