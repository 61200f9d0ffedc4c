// cpu-ref norm_matmul: the composition it stands for. h = x (+ add) row by
// row, written to sum when given; rmsnorm(h) * w into a buffer [m, k]; then
// cpu-ref matmul (or matmul_silu_mul) of that buffer with W.
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"
#include "core/alloc.h"

static bool norm_matmul_supports(const struct op_call *c)
{
    const struct tensor *x = c->src[0], *add = c->src[1], *sum = c->src[5];
    if (!cpu_f32_rows(x) || (add && !cpu_f32_rows(add)) || (sum && !cpu_f32_rows(sum)) ||
        !cpu_is_plain_float(c->src[2]->dtype) || !tensor_is_contiguous(c->src[2]))
        return false;
    struct op_call mm = op_norm_matmul_inner(c, c->src[0]);
    return c->p.silu_mul ? cpu_ref_matmul_silu_mul.supports(&mm) : cpu_ref_matmul.supports(&mm);
}

static enum vllmc_status norm_matmul_run(const struct op_call *c)
{
    const struct tensor *x = c->src[0], *add = c->src[1], *w = c->src[2], *sum = c->src[5];
    const int64_t m = tensor_n_rows(x), k = x->ne[0];
    float *buf = mem_alloc((size_t)(m * k + k > 0 ? m * k + k : 1) * sizeof(float));
    if (!buf)
        return op_fail(c, VLLMC_ERR_NOMEM, "out of memory");
    float *h = buf + m * k; // [k], one row of x + add
    for (int64_t r = 0; r < m; r++) {
        const float *xr = cpu_row(x, r);
        for (int64_t i = 0; i < k; i++)
            h[i] = xr[i] + (add ? ((const float *)cpu_row(add, r))[i] : 0.0f);
        if (sum)
            memcpy(cpu_row(sum, r), h, (size_t)k * sizeof(float));
        ref_rmsnorm_row(buf + r * k, h, w->data, w->dtype, k, c->p.eps);
    }
    struct tensor xn;
    VLLMC_ASSERT(tensor_init_2d(&xn, DTYPE_F32, buf, k, m));
    struct op_call mm = op_norm_matmul_inner(c, &xn);
    enum vllmc_status rc =
        c->p.silu_mul ? cpu_ref_matmul_silu_mul.run(&mm) : cpu_ref_matmul.run(&mm);
    mem_free(buf);
    return rc;
}

const struct op_provider cpu_ref_norm_matmul = {
    .name = "cpu-ref",
    .op = OP_NORM_MATMUL,
    .priority = CPU_REF_PRIORITY,
    .supports = norm_matmul_supports,
    .run = norm_matmul_run,
};
