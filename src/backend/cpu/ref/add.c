// cpu-ref add: dst = src0 + src1, elementwise; dst may alias src0.
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"

static bool add_supports(const struct op_call *c)
{
    return cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) && cpu_f32_rows(c->src[1]);
}

static enum vllmc_status add_run(const struct op_call *c)
{
    const struct tensor *a = c->src[0];
    for (int64_t r = 0; r < tensor_n_rows(a); r++) {
        const float *ar = cpu_row(a, r), *br = cpu_row(c->src[1], r);
        float *dr = cpu_row(c->dst, r);
        for (int64_t i = 0; i < a->ne[0]; i++)
            dr[i] = ar[i] + br[i];
    }
    return VLLMC_OK;
}

const struct op_provider cpu_ref_add = {
    .name = "cpu-ref",
    .op = OP_ADD,
    .priority = CPU_REF_PRIORITY,
    .supports = add_supports,
    .run = add_run,
};
