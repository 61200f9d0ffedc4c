// cpu-ref attention: paged, causal, varlen, grouped-query. For each query
// token and head: scores over every visible key, a max-subtracted softmax,
// then the weighted sum of values, all in f32 and in key order. With a
// qkv_rope_store prologue, that op's cpu-ref runs first.
#include <math.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"
#include "core/alloc.h"

static bool attention_supports(const struct op_call *c)
{
    const struct tensor *kc = c->src[1], *vc = c->src[2];
    return cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) && cpu_is_plain_float(kc->dtype) &&
           vc->dtype == kc->dtype && tensor_rows_contiguous(kc) && tensor_rows_contiguous(vc) &&
           (!c->p.prologue || cpu_ref_qkv_rope_store.supports(c->p.prologue));
}

static enum vllmc_status attention_run(const struct op_call *c)
{
    if (c->p.prologue) { // the composition: q and the new keys first
        struct op_call pro = *c->p.prologue;
        pro.backend = c->backend;
        enum vllmc_status rc = cpu_ref_qkv_rope_store.run(&pro);
        if (rc)
            return rc;
    }
    const struct tensor *q = c->src[0], *kc = c->src[1], *vc = c->src[2];
    const int32_t *tables = c->src[3]->data, *seq_lens = c->src[4]->data;
    const int32_t *qsl = c->src[5]->data;
    int64_t n_seqs = c->src[4]->ne[0], max_blocks = c->src[3]->ne[0];
    int64_t head_dim = q->ne[0], n_heads = q->ne[1], group = n_heads / kc->ne[1];
    int64_t block_size = kc->ne[2];
    int32_t max_seq_len;
    enum vllmc_status rc = cpu_attention_check_meta(c, &max_seq_len);
    if (rc)
        return rc;
    float *scores = mem_alloc((size_t)(max_seq_len > 0 ? max_seq_len : 1) * sizeof(float));
    float *out = mem_alloc((size_t)head_dim * sizeof(float));
    if (!scores || !out) {
        mem_free(scores);
        mem_free(out);
        return op_fail(c, VLLMC_ERR_NOMEM, "out of memory");
    }
    for (int64_t s = 0; s < n_seqs; s++) {
        int32_t n_q = qsl[s + 1] - qsl[s];
        for (int32_t j = 0; j < n_q; j++) {
            int64_t tok = qsl[s] + j;
            int32_t pos = seq_lens[s] - n_q + j; // keys 0..pos are visible
            for (int64_t h = 0; h < n_heads; h++) {
                const float *qh = cpu_at(q, 0, tok, h);
                int64_t kvh = h / group;
                float max = -INFINITY;
                for (int32_t t = 0; t <= pos; t++) {
                    int32_t block = tables[s * max_blocks + t / block_size];
                    const void *kr = cpu_at(kc, block, t % block_size, kvh);
                    float dot = 0.0f;
                    for (int64_t i = 0; i < head_dim; i++)
                        dot += qh[i] * cpu_load(kc->dtype, kr, i);
                    scores[t] = dot * c->p.scale;
                    if (scores[t] > max)
                        max = scores[t];
                }
                float sum = 0.0f;
                for (int32_t t = 0; t <= pos; t++) {
                    scores[t] = expf(scores[t] - max);
                    sum += scores[t];
                }
                for (int64_t i = 0; i < head_dim; i++)
                    out[i] = 0.0f;
                for (int32_t t = 0; t <= pos; t++) {
                    int32_t block = tables[s * max_blocks + t / block_size];
                    const void *vr = cpu_at(vc, block, t % block_size, kvh);
                    for (int64_t i = 0; i < head_dim; i++)
                        out[i] += scores[t] * cpu_load(vc->dtype, vr, i);
                }
                float *dh = cpu_at(c->dst, 0, tok, h);
                for (int64_t i = 0; i < head_dim; i++)
                    dh[i] = out[i] / sum;
            }
        }
    }
    mem_free(out);
    mem_free(scores);
    return VLLMC_OK;
}

const struct op_provider cpu_ref_attention = {
    .name = "cpu-ref",
    .op = OP_ATTENTION,
    .priority = CPU_REF_PRIORITY,
    .supports = attention_supports,
    .run = attention_run,
};
