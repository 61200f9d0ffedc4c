// cpu-ref matmul: dst [m, n] = x [m, k] . (W [n, k])^T (+ bias [n]). W is any
// dtype with a row converter; each W row is converted once (and scattered to
// input order when a permutation comes with it), then dotted with every x row
// in index order with an f32 accumulator.
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"
#include "core/alloc.h"

static bool matmul_supports(const struct op_call *c)
{
    const struct tensor *b = c->src[2];
    return cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) && cpu_dequant_row(c->src[1]->dtype) &&
           tensor_rows_contiguous(c->src[1]) && (!b || cpu_is_plain_float(b->dtype));
}

static enum vllmc_status matmul_run(const struct op_call *c)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *bias = c->src[2], *perm = c->src[3];
    int64_t m = tensor_n_rows(x), n = w->ne[1], k = x->ne[0];
    dequant_row_fn dequant = cpu_dequant_row(w->dtype);
    const int32_t *p = perm ? perm->data : NULL; // [k]
    for (int64_t l = 0; p && l < k; l++)
        if (p[l] < 0 || p[l] >= k)
            return op_fail(c, VLLMC_ERR_INVALID_ARG, "matmul: permutation entry %lld is %d",
                           (long long)l, (int)p[l]);
    float *w_row = mem_alloc((size_t)(p ? 2 : 1) * (size_t)k * sizeof(float)); // [k] (+ [k])
    if (!w_row)
        return op_fail(c, VLLMC_ERR_NOMEM, "out of memory");
    for (int64_t j = 0; j < n; j++) {
        if (p) {
            dequant(tensor_row(w, j), w_row + k, k);
            for (int64_t l = 0; l < k; l++)
                w_row[p[l]] = w_row[k + l];
        } else {
            dequant(tensor_row(w, j), w_row, k);
        }
        float b = bias ? cpu_load(bias->dtype, bias->data, j) : 0.0f;
        for (int64_t i = 0; i < m; i++) {
            const float *xr = cpu_row(x, i);
            float sum = 0.0f;
            for (int64_t l = 0; l < k; l++)
                sum += xr[l] * w_row[l];
            ((float *)cpu_row(c->dst, i))[j] = sum + b;
        }
    }
    mem_free(w_row);
    return VLLMC_OK;
}

const struct op_provider cpu_ref_matmul = {
    .name = "cpu-ref",
    .op = OP_MATMUL,
    .priority = CPU_REF_PRIORITY,
    .supports = matmul_supports,
    .run = matmul_run,
};
