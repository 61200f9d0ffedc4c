// KV-cache writes on the GPU: new keys and values scattered into paged
// f32/f16/bf16 caches by slot.
#ifndef VLLMC_BACKEND_CUDA_KV_STORE_CUH
#define VLLMC_BACKEND_CUDA_KV_STORE_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/op.h"

bool cuda_kv_store_supports(const struct op_call *c);
enum vllmc_status cuda_kv_store_run(const struct op_call *c);

#ifdef __cplusplus
}
#endif
#endif
