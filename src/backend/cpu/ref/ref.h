// The reference CPU providers: plain C, fp32 accumulation in index order, no
// threads. They are the ground truth of op parity, so clarity beats speed.
#ifndef VLLMC_BACKEND_CPU_REF_REF_H
#define VLLMC_BACKEND_CPU_REF_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/op.h"

#define CPU_REF_PRIORITY 0

extern const struct op_provider cpu_ref_embedding;
extern const struct op_provider cpu_ref_rmsnorm;
extern const struct op_provider cpu_ref_add_rmsnorm;
extern const struct op_provider cpu_ref_matmul;
extern const struct op_provider cpu_ref_rope;
extern const struct op_provider cpu_ref_qk_norm_rope;
extern const struct op_provider cpu_ref_silu_mul;
extern const struct op_provider cpu_ref_matmul_silu_mul;
extern const struct op_provider cpu_ref_norm_matmul;
extern const struct op_provider cpu_ref_add;
extern const struct op_provider cpu_ref_kv_store;
extern const struct op_provider cpu_ref_qkv_rope_store;
extern const struct op_provider cpu_ref_attention;
extern const struct op_provider cpu_ref_select_ids;

// Rotates the first rope_dim values of one head (f32, dense) by position pos.
// Angle of pair i is pos * inv_freq[i] in f32; pairs are (i, i + rope_dim/2)
// when neox, else (2i, 2i + 1).
void ref_rope_head(float *head, int rope_dim, bool neox, int32_t pos, const float *inv_freq);

// x [n] scaled by 1 / sqrt(mean(x^2) + eps), times w (w_type plain float).
void ref_rmsnorm_row(float *dst, const float *x, const void *w, enum dtype w_type, int64_t n,
                     float eps);

#endif
