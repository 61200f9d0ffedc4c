// cpu-ref silu_mul: dst [n, ff] = silu(gate) * up, silu(x) = x / (1 + e^-x);
// gate and up are two tensors, or the two halves of one packed [n, 2 ff] row.
#include <math.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"

static bool silu_mul_supports(const struct op_call *c)
{
    return cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) &&
           (!c->src[1] || cpu_f32_rows(c->src[1]));
}

static enum vllmc_status silu_mul_run(const struct op_call *c)
{
    const struct tensor *g = c->src[0], *d = c->dst;
    for (int64_t r = 0; r < tensor_n_rows(g); r++) {
        const float *gr = cpu_row(g, r);
        const float *ur = c->src[1] ? cpu_row(c->src[1], r) : gr + d->ne[0];
        float *dr = cpu_row(d, r);
        for (int64_t i = 0; i < d->ne[0]; i++)
            dr[i] = gr[i] / (1.0f + expf(-gr[i])) * ur[i];
    }
    return VLLMC_OK;
}

const struct op_provider cpu_ref_silu_mul = {
    .name = "cpu-ref",
    .op = OP_SILU_MUL,
    .priority = CPU_REF_PRIORITY,
    .supports = silu_mul_supports,
    .run = silu_mul_run,
};
