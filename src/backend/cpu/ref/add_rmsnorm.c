// cpu-ref add_rmsnorm: residual [n, dim] += x; dst = rmsnorm(residual) * w.
// dst may alias x: each row of x is consumed before that row of dst is written.
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"

static bool add_rmsnorm_supports(const struct op_call *c)
{
    return cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) && cpu_f32_rows(c->src[2]) &&
           cpu_is_plain_float(c->src[1]->dtype);
}

static enum vllmc_status add_rmsnorm_run(const struct op_call *c)
{
    const struct tensor *x = c->src[0], *res = c->src[2];
    for (int64_t r = 0; r < tensor_n_rows(x); r++) {
        const float *xr = cpu_row(x, r);
        float *rr = cpu_row(res, r);
        for (int64_t i = 0; i < x->ne[0]; i++)
            rr[i] += xr[i];
        ref_rmsnorm_row(cpu_row(c->dst, r), rr, c->src[1]->data, c->src[1]->dtype, x->ne[0],
                        c->p.eps);
    }
    return VLLMC_OK;
}

const struct op_provider cpu_ref_add_rmsnorm = {
    .name = "cpu-ref",
    .op = OP_ADD_RMSNORM,
    .priority = CPU_REF_PRIORITY,
    .supports = add_rmsnorm_supports,
    .run = add_rmsnorm_run,
};
