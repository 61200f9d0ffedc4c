// cpu-ref rope: in place on dst [n_tokens, n_heads, head_dim], rotating the
// first rope_dim dims of each head by position * inv_freq, with the neox
// (rotate-half) or the adjacent-pair layout.
#include <math.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"

void ref_rope_head(float *head, int rope_dim, bool neox, int32_t pos, const float *inv_freq)
{
    int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        float theta = (float)pos * inv_freq[i];
        float cs = cosf(theta), sn = sinf(theta);
        int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = head[a], x1 = head[b];
        head[a] = x0 * cs - x1 * sn;
        head[b] = x0 * sn + x1 * cs;
    }
}

static bool rope_supports(const struct op_call *c)
{
    return cpu_f32_rows(c->dst);
}

static enum vllmc_status rope_run(const struct op_call *c)
{
    const struct tensor *d = c->dst;
    const int32_t *pos = c->src[0]->data;
    for (int64_t t = 0; t < d->ne[2]; t++)
        for (int64_t h = 0; h < d->ne[1]; h++)
            ref_rope_head(cpu_at(d, 0, t, h), c->p.rope_dim, c->p.rope_neox, pos[t],
                          c->src[1]->data);
    return VLLMC_OK;
}

const struct op_provider cpu_ref_rope = {
    .name = "cpu-ref",
    .op = OP_ROPE,
    .priority = CPU_REF_PRIORITY,
    .supports = rope_supports,
    .run = rope_run,
};
