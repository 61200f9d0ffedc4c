// cpu-ref select_ids: dst[i] = values[index[i]] where index[i] >= 0.
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"

static bool dense_i32(const struct tensor *t)
{
    return t && t->dtype == DTYPE_I32 && t->location == TENSOR_HOST && tensor_is_contiguous(t);
}

static bool select_ids_supports(const struct op_call *c)
{
    return dense_i32(c->dst) && dense_i32(c->src[0]) && dense_i32(c->src[1]) &&
           tensor_n_elements(c->src[1]) == tensor_n_elements(c->dst);
}

static enum vllmc_status select_ids_run(const struct op_call *c)
{
    int32_t *dst = c->dst->data;
    const int32_t *values = c->src[0]->data, *index = c->src[1]->data;
    int64_t n = tensor_n_elements(c->dst), m = tensor_n_elements(c->src[0]);
    for (int64_t i = 0; i < n; i++)
        if (index[i] >= 0 && index[i] < m)
            dst[i] = values[index[i]];
    return VLLMC_OK;
}

const struct op_provider cpu_ref_select_ids = {
    .name = "cpu-ref",
    .op = OP_SELECT_IDS,
    .priority = CPU_REF_PRIORITY,
    .supports = select_ids_supports,
    .run = select_ids_run,
};
