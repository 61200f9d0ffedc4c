// cpu-ref silu_mul: dst [n, ff] = silu(gate) * up, silu(x) = x / (1 + e^-x).
#include <math.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"

static bool silu_mul_supports(const struct op_call *c)
{
    return cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) && cpu_f32_rows(c->src[1]);
}

static enum vllmc_status silu_mul_run(const struct op_call *c)
{
    const struct tensor *g = c->src[0];
    for (int64_t r = 0; r < tensor_n_rows(g); r++) {
        const float *gr = cpu_row(g, r), *ur = cpu_row(c->src[1], r);
        float *dr = cpu_row(c->dst, r);
        for (int64_t i = 0; i < g->ne[0]; i++)
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
