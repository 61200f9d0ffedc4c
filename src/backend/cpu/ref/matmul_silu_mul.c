// cpu-ref matmul_silu_mul: the composition it stands for, cpu-ref matmul of x
// with the fused gate|up weight into a [m, 2 ff] buffer, then cpu-ref
// silu_mul over that packed output.
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"
#include "core/alloc.h"

static bool matmul_silu_mul_supports(const struct op_call *c)
{
    return cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) && cpu_dequant_row(c->src[1]->dtype) &&
           tensor_rows_contiguous(c->src[1]);
}

static enum vllmc_status matmul_silu_mul_run(const struct op_call *c)
{
    int64_t m = tensor_n_rows(c->src[0]), n = c->src[1]->ne[1];
    float *buf = mem_alloc((size_t)(m * n > 0 ? m * n : 1) * sizeof(float)); // [m, 2 ff]
    if (!buf)
        return op_fail(c, VLLMC_ERR_NOMEM, "out of memory");
    struct tensor gu;
    VLLMC_ASSERT(tensor_init_2d(&gu, DTYPE_F32, buf, n, m));
    struct op_call mm = {
        .op = OP_MATMUL, .dst = &gu, .src = {c->src[0], c->src[1]}, .backend = c->backend};
    struct op_call silu = {.op = OP_SILU_MUL, .dst = c->dst, .src = {&gu}, .backend = c->backend};
    enum vllmc_status rc = cpu_ref_matmul.run(&mm);
    if (!rc)
        rc = cpu_ref_silu_mul.run(&silu);
    mem_free(buf);
    return rc;
}

const struct op_provider cpu_ref_matmul_silu_mul = {
    .name = "cpu-ref",
    .op = OP_MATMUL_SILU_MUL,
    .priority = CPU_REF_PRIORITY,
    .supports = matmul_silu_mul_supports,
    .run = matmul_silu_mul_run,
};
