// The CUDA backend's entry point, built only with VLLMC_CUDA (the build then
// defines VLLMC_HAVE_CUDA). backend_create("cuda") calls it.
#ifndef VLLMC_BACKEND_CUDA_CUDA_BACKEND_H
#define VLLMC_BACKEND_CUDA_CUDA_BACKEND_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// Creates a backend on GPU o->device_index. *out owns it (backend_free).
// VLLMC_ERR_UNSUPPORTED when no usable GPU is present, with the reason in err.
enum vllmc_status cuda_backend_create(const struct backend_options *o, struct backend **out,
                                      struct err *err);

// How many bf16 GEMMs of backend be took their activations already split by
// the op that wrote them (cuda_split_find), for tests.
uint64_t cuda_backend_split_handoffs(const struct backend *be);
// How many stacked GEMMs' sums of backend be an ADD_RMSNORM or SiLU-mul took
// into its own kernel (struct cuda_pending_sum), for tests.
uint64_t cuda_backend_sum_handoffs(const struct backend *be);

#ifdef __cplusplus
}
#endif
#endif
