// cpu-avx2 kv_store: cpu-ref's kv_store on the pool's threads, tokens split
// between them, and each cache row stored whole (avx2_store_row: an f32 row
// copied, an f16 or bf16 one rounded 8 values at a time to the bits cpu-ref
// writes). Prefill of the 0.6B shape (512 tokens, 8 kv heads of 128)
// spent ~1% of its samples in cpu-ref's copy, the other thread idle.
#include "backend/cpu/avx2/avx2.h"
#include "backend/cpu/cpu_ops.h"

static bool kv_store_supports(const struct op_call *c)
{
    const struct tensor *kc = c->src[2], *vc = c->src[3];
    return cpu_f32_rows(c->src[0]) && cpu_f32_rows(c->src[1]) && cpu_is_plain_float(kc->dtype) &&
           vc->dtype == kc->dtype && tensor_rows_contiguous(kc) && tensor_rows_contiguous(vc);
}

// Tokens [t0, t1): k and v [n_tokens, n_kv_heads, head_dim] to their slots.
static void kv_store_rows(const struct op_call *c, int64_t t0, int64_t t1)
{
    const struct tensor *k = c->src[0], *v = c->src[1], *kc = c->src[2], *vc = c->src[3];
    const int32_t *slots = c->src[4]->data;
    int64_t block_size = kc->ne[2], hd = k->ne[0];
    for (int64_t t = t0; t < t1; t++) {
        if (slots[t] < 0)
            continue;
        int64_t block = slots[t] / block_size, offset = slots[t] % block_size;
        for (int64_t h = 0; h < k->ne[1]; h++) {
            const float *kr = cpu_at(k, 0, t, h), *vr = cpu_at(v, 0, t, h);
            void *kd = cpu_at(kc, block, offset, h), *vd = cpu_at(vc, block, offset, h);
            avx2_store_row(kc->dtype, kd, kr, hd);
            avx2_store_row(vc->dtype, vd, vr, hd);
        }
    }
}

static enum vllmc_status kv_store_run(const struct op_call *c)
{
    const int32_t *slots = c->src[4]->data;
    int64_t n = c->src[0]->ne[2], n_slots = c->src[2]->ne[2] * c->src[2]->ne[3];
    // Every slot checked before any thread writes (cpu-ref has written the
    // tokens before a bad one by then; the call fails either way).
    for (int64_t t = 0; t < n; t++)
        if (slots[t] >= n_slots)
            return op_fail(c, VLLMC_ERR_INVALID_ARG, "slot %d of token %lld outside [0, %lld)",
                           (int)slots[t], (long long)t, (long long)n_slots);
    avx2_parallel_rows(c, n, c->src[0]->ne[0] * c->src[0]->ne[1], kv_store_rows);
    return VLLMC_OK;
}

const struct op_provider cpu_avx2_kv_store = {
    .name = "cpu-avx2",
    .op = OP_KV_STORE,
    .priority = CPU_AVX2_PRIORITY,
    .supports = kv_store_supports,
    .run = kv_store_run,
};
