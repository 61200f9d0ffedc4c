// cpu-ref kv_store: writes k and v [n_tokens, n_kv_heads, head_dim] (f32) into
// the paged caches [n_blocks, block_size, n_kv_heads, head_dim] (f32, f16 or
// bf16, rounded to nearest even) at slot_mapping; negative slots are skipped.
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"

static bool kv_store_supports(const struct op_call *c)
{
    const struct tensor *kc = c->src[2], *vc = c->src[3];
    return cpu_f32_rows(c->src[0]) && cpu_f32_rows(c->src[1]) && cpu_is_plain_float(kc->dtype) &&
           vc->dtype == kc->dtype && tensor_rows_contiguous(kc) && tensor_rows_contiguous(vc);
}

static enum vllmc_status kv_store_run(const struct op_call *c)
{
    const struct tensor *k = c->src[0], *v = c->src[1], *kc = c->src[2], *vc = c->src[3];
    const int32_t *slots = c->src[4]->data;
    int64_t block_size = kc->ne[2], n_slots = kc->ne[2] * kc->ne[3];
    for (int64_t t = 0; t < k->ne[2]; t++) {
        if (slots[t] < 0)
            continue;
        if (slots[t] >= n_slots)
            return op_fail(c, VLLMC_ERR_INVALID_ARG, "slot %d of token %lld outside [0, %lld)",
                           (int)slots[t], (long long)t, (long long)n_slots);
        int64_t block = slots[t] / block_size, offset = slots[t] % block_size;
        for (int64_t h = 0; h < k->ne[1]; h++) {
            const float *kr = cpu_at(k, 0, t, h), *vr = cpu_at(v, 0, t, h);
            void *kd = cpu_at(kc, block, offset, h), *vd = cpu_at(vc, block, offset, h);
            for (int64_t i = 0; i < k->ne[0]; i++) {
                cpu_store(kc->dtype, kd, i, kr[i]);
                cpu_store(vc->dtype, vd, i, vr[i]);
            }
        }
    }
    return VLLMC_OK;
}

const struct op_provider cpu_ref_kv_store = {
    .name = "cpu-ref",
    .op = OP_KV_STORE,
    .priority = CPU_REF_PRIORITY,
    .supports = kv_store_supports,
    .run = kv_store_run,
};
