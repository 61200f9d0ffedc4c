// cpu-ref rmsnorm: dst [n, dim] = x * rsqrt(mean(x^2) + eps) * w [dim].
#include <math.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"

void ref_rmsnorm_row(float *dst, const float *x, const void *w, enum dtype w_type, int64_t n,
                     float eps)
{
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += x[i] * x[i];
    float scale = 1.0f / sqrtf(sum / (float)n + eps);
    for (int64_t i = 0; i < n; i++)
        dst[i] = x[i] * scale * cpu_load(w_type, w, i);
}

static bool rmsnorm_supports(const struct op_call *c)
{
    return cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) && cpu_is_plain_float(c->src[1]->dtype);
}

static enum vllmc_status rmsnorm_run(const struct op_call *c)
{
    const struct tensor *x = c->src[0];
    for (int64_t r = 0; r < tensor_n_rows(x); r++)
        ref_rmsnorm_row(cpu_row(c->dst, r), cpu_row(x, r), c->src[1]->data, c->src[1]->dtype,
                        x->ne[0], c->p.eps);
    return VLLMC_OK;
}

const struct op_provider cpu_ref_rmsnorm = {
    .name = "cpu-ref",
    .op = OP_RMSNORM,
    .priority = CPU_REF_PRIORITY,
    .supports = rmsnorm_supports,
    .run = rmsnorm_run,
};
