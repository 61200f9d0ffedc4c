// cpu-ref qk_norm_rope: per-head RMSNorm with w [head_dim], then RoPE, in
// place on dst [n_tokens, n_heads, head_dim] (Qwen3's q and k norms).
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"

static bool qk_norm_rope_supports(const struct op_call *c)
{
    return cpu_f32_rows(c->dst) && cpu_is_plain_float(c->src[2]->dtype);
}

static enum vllmc_status qk_norm_rope_run(const struct op_call *c)
{
    const struct tensor *d = c->dst;
    const int32_t *pos = c->src[0]->data;
    for (int64_t t = 0; t < d->ne[2]; t++) {
        for (int64_t h = 0; h < d->ne[1]; h++) {
            float *head = cpu_at(d, 0, t, h);
            ref_rmsnorm_row(head, head, c->src[2]->data, c->src[2]->dtype, d->ne[0], c->p.eps);
            ref_rope_head(head, c->p.rope_dim, c->p.rope_neox, pos[t], c->src[1]->data);
        }
    }
    return VLLMC_OK;
}

const struct op_provider cpu_ref_qk_norm_rope = {
    .name = "cpu-ref",
    .op = OP_QK_NORM_ROPE,
    .priority = CPU_REF_PRIORITY,
    .supports = qk_norm_rope_supports,
    .run = qk_norm_rope_run,
};
