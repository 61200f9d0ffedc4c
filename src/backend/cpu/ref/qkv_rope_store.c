// cpu-ref qkv_rope_store: the step after a fused q|k|v matmul, composed of the
// reference semantics of qk_norm_rope (or rope) for q and k and of kv_store
// for k and v: q [n_tokens, n_heads, head_dim] goes to dst, k and v into the
// paged caches at slot_mapping (negative slots are skipped).
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"
#include "core/alloc.h"

static bool qkv_rope_store_supports(const struct op_call *c)
{
    const struct tensor *kc = c->src[5], *vc = c->src[6];
    return cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) && cpu_is_plain_float(kc->dtype) &&
           vc->dtype == kc->dtype && tensor_rows_contiguous(kc) && tensor_rows_contiguous(vc) &&
           (!c->src[3] ||
            (cpu_is_plain_float(c->src[3]->dtype) && cpu_is_plain_float(c->src[4]->dtype)));
}

// Per-head norm (when w) and RoPE of one head in place.
static void head_norm_rope(const struct op_call *c, float *head, const struct tensor *w,
                           int64_t head_dim, int32_t pos)
{
    if (w)
        ref_rmsnorm_row(head, head, w->data, w->dtype, head_dim, c->p.eps);
    ref_rope_head(head, c->p.rope_dim, c->p.rope_neox, pos, c->src[2]->data);
}

static enum vllmc_status qkv_rope_store_run(const struct op_call *c)
{
    const struct tensor *q = c->dst, *qkv = c->src[0], *kc = c->src[5], *vc = c->src[6];
    const int32_t *pos = c->src[1]->data, *slots = c->src[7]->data;
    int64_t hd = q->ne[0], nh = q->ne[1], n = q->ne[2], nkv = kc->ne[1];
    int64_t block_size = kc->ne[2], n_slots = kc->ne[2] * kc->ne[3];
    for (int64_t t = 0; t < n; t++)
        if (slots[t] >= n_slots)
            return op_fail(c, VLLMC_ERR_INVALID_ARG, "slot %d of token %lld outside [0, %lld)",
                           (int)slots[t], (long long)t, (long long)n_slots);
    float *k = mem_alloc((size_t)hd * sizeof(float));
    if (!k)
        return op_fail(c, VLLMC_ERR_NOMEM, "out of memory");
    for (int64_t t = 0; t < n; t++) {
        const float *row = cpu_row(qkv, t);
        for (int64_t h = 0; h < nh; h++) {
            float *head = cpu_at(q, 0, t, h);
            memcpy(head, row + h * hd, (size_t)hd * sizeof(float));
            head_norm_rope(c, head, c->src[3], hd, pos[t]);
        }
        if (slots[t] < 0)
            continue;
        int64_t block = slots[t] / block_size, offset = slots[t] % block_size;
        for (int64_t h = 0; h < nkv; h++) {
            const float *v = row + (nh + nkv + h) * hd;
            memcpy(k, row + (nh + h) * hd, (size_t)hd * sizeof(float));
            head_norm_rope(c, k, c->src[4], hd, pos[t]);
            void *kd = cpu_at(kc, block, offset, h), *vd = cpu_at(vc, block, offset, h);
            for (int64_t i = 0; i < hd; i++) {
                cpu_store(kc->dtype, kd, i, k[i]);
                cpu_store(vc->dtype, vd, i, v[i]);
            }
        }
    }
    mem_free(k);
    return VLLMC_OK;
}

const struct op_provider cpu_ref_qkv_rope_store = {
    .name = "cpu-ref",
    .op = OP_QKV_ROPE_STORE,
    .priority = CPU_REF_PRIORITY,
    .supports = qkv_rope_store_supports,
    .run = qkv_rope_store_run,
};
