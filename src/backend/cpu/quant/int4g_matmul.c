// The int4g matmul providers' shared driver (see int4g.h). GPTQ act-order
// layers store their columns in group order, so x is read through perm:
// each row is gathered once into scratch, then the quantized-matmul driver
// runs as for any other weight; rows stay independent (batch invariance).
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/quant/int4g.h"
#include "core/alloc.h"

bool int4g_qmm_supports(const struct qmm_isa *isa, const struct op_call *c)
{
    const struct tensor *p = c->src[3];
    return qmm_supports(isa, c) && (!p || (p->dtype == DTYPE_I32 && tensor_is_contiguous(p) &&
                                           tensor_n_elements(p) == c->src[0]->ne[0]));
}

enum vllmc_status int4g_qmm_run(const struct qmm_isa *isa, const struct op_call *c)
{
    const struct tensor *x = c->src[0], *perm = c->src[3];
    if (!perm)
        return qmm_run(isa, c);
    int64_t m = tensor_n_rows(x), k = x->ne[0];
    const int32_t *p = perm->data; // [k]
    for (int64_t l = 0; l < k; l++)
        if (p[l] < 0 || p[l] >= k)
            return op_fail(c, VLLMC_ERR_INVALID_ARG, "matmul: permutation entry %lld is %d",
                           (long long)l, (int)p[l]);
    float *xp = mem_alloc_aligned(64, (size_t)(m ? m : 1) * (size_t)k * sizeof(float)); // [m, k]
    if (!xp)
        return op_fail(c, VLLMC_ERR_NOMEM, "%s: out of memory for %lld rows", isa->name,
                       (long long)m);
    for (int64_t i = 0; i < m; i++) {
        const float *xr = cpu_row(x, i);
        float *yr = xp + i * k;
        for (int64_t l = 0; l < k; l++)
            yr[l] = xr[p[l]];
    }
    struct tensor xt;
    tensor_init_2d(&xt, DTYPE_F32, xp, k, m);
    struct op_call cp = *c;
    cp.src[0] = &xt;
    cp.src[3] = NULL;
    enum vllmc_status rc = qmm_run(isa, &cp);
    mem_free(xp);
    return rc;
}
