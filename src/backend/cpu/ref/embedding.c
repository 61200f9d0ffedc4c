// cpu-ref embedding: dst [n_tokens, dim] f32 = rows of table [n_vocab, dim]
// (any dtype with a row converter) at ids i32 [n_tokens].
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref/ref.h"

static bool embedding_supports(const struct op_call *c)
{
    return cpu_f32_rows(c->dst) && cpu_dequant_row(c->src[0]->dtype) &&
           tensor_rows_contiguous(c->src[0]) && c->src[0]->ne[2] == 1 && c->src[0]->ne[3] == 1;
}

static enum vllmc_status embedding_run(const struct op_call *c)
{
    const struct tensor *table = c->src[0];
    const int32_t *ids = c->src[1]->data;
    int64_t n_tokens = tensor_n_elements(c->src[1]);
    dequant_row_fn dequant = cpu_dequant_row(table->dtype);
    for (int64_t t = 0; t < n_tokens; t++) {
        if (ids[t] < 0 || ids[t] >= table->ne[1])
            return op_fail(c, VLLMC_ERR_INVALID_ARG, "token id %d at %lld outside [0, %lld)",
                           (int)ids[t], (long long)t, (long long)table->ne[1]);
        dequant(tensor_row(table, ids[t]), cpu_row(c->dst, t), table->ne[0]);
    }
    return VLLMC_OK;
}

const struct op_provider cpu_ref_embedding = {
    .name = "cpu-ref",
    .op = OP_EMBEDDING,
    .priority = CPU_REF_PRIORITY,
    .supports = embedding_supports,
    .run = embedding_run,
};
