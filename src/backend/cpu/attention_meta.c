// What the CPU providers share about a paged attention call: data checks
// (the metadata come from the scheduler, but a bad block id must give a
// status, not a read outside the cache) and the call's size.
#include "backend/cpu/cpu_ops.h"

enum vllmc_status cpu_attention_check_meta(const struct op_call *c, int32_t *max_seq_len)
{
    const struct tensor *q = c->src[0], *kc = c->src[1], *bt = c->src[3];
    const int32_t *seq_lens = c->src[4]->data, *qsl = c->src[5]->data, *tables = bt->data;
    int64_t n_seqs = c->src[4]->ne[0], max_blocks = bt->ne[0];
    int64_t block_size = kc->ne[2], n_blocks = kc->ne[3];
    *max_seq_len = 0;
    if (n_seqs > 0 && (qsl[0] < 0 || qsl[n_seqs] > q->ne[2]))
        return op_fail(c, VLLMC_ERR_INVALID_ARG, "query_start_loc spans [%d, %d), n_tokens %lld",
                       (int)qsl[0], (int)qsl[n_seqs], (long long)q->ne[2]);
    for (int64_t s = 0; s < n_seqs; s++) {
        int32_t n_q = qsl[s + 1] - qsl[s];
        if (n_q < 0 || n_q > seq_lens[s])
            return op_fail(c, VLLMC_ERR_INVALID_ARG, "sequence %lld: %d queries, seq_len %d",
                           (long long)s, (int)n_q, (int)seq_lens[s]);
        if (n_q == 0)
            continue;
        int64_t n_used = (seq_lens[s] + block_size - 1) / block_size;
        if (n_used > max_blocks)
            return op_fail(c, VLLMC_ERR_INVALID_ARG,
                           "sequence %lld: seq_len %d needs %lld blocks, table has %lld",
                           (long long)s, (int)seq_lens[s], (long long)n_used,
                           (long long)max_blocks);
        for (int64_t b = 0; b < n_used; b++) {
            int32_t id = tables[s * max_blocks + b];
            if (id < 0 || id >= n_blocks)
                return op_fail(c, VLLMC_ERR_INVALID_ARG,
                               "sequence %lld: block %lld is %d, cache has %lld", (long long)s,
                               (long long)b, (int)id, (long long)n_blocks);
        }
        if (seq_lens[s] > *max_seq_len)
            *max_seq_len = seq_lens[s];
    }
    return VLLMC_OK;
}

int64_t cpu_attention_work(const struct op_call *c)
{
    const int32_t *seq_lens = c->src[4]->data, *qsl = c->src[5]->data;
    int64_t work = 0;
    for (int64_t s = 0; s < c->src[4]->ne[0]; s++)
        work += (int64_t)(qsl[s + 1] - qsl[s]) * seq_lens[s];
    return work * c->src[0]->ne[1] * c->src[0]->ne[0];
}
