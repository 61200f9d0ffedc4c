// Flat varlen batch from host arrays; one allocation for all arrays, mirrored
// once in backend memory when the backend is a device.
#include "model/batch_builder.h"

#include <string.h>

#include "backend/backend.h"
#include "core/alloc.h"

// Array order inside the host and device allocations. BB_TABLES_ADDED, the
// block tables as added (max_blocks_per_seq wide), lives only on the host;
// finish() copies them into BB_TABLES as wide as the batch needs.
enum bb_array {
    BB_IDS,
    BB_POS,
    BB_SLOTS,
    BB_LOGITS,
    BB_TABLES,
    BB_SEQ_LENS,
    BB_QSL,
    BB_TABLES_ADDED,
    BB_COUNT
};

static size_t bb_count(const struct batch_builder *bb, enum bb_array a)
{
    switch (a) {
    case BB_TABLES:
    case BB_TABLES_ADDED:
        return (size_t)bb->n_seqs_max * (size_t)bb->max_blocks_per_seq;
    case BB_SEQ_LENS:
        return (size_t)bb->n_seqs_max;
    case BB_QSL:
        return (size_t)bb->n_seqs_max + 1;
    default:
        return (size_t)bb->n_tokens_max;
    }
}

static size_t bb_offset(const struct batch_builder *bb, enum bb_array a)
{
    size_t off = 0;
    for (int i = 0; i < (int)a; i++)
        off += (bb_count(bb, (enum bb_array)i) * 4 + 63) / 64 * 64;
    return off;
}

enum vllmc_status batch_builder_init(struct batch_builder *bb, struct backend *be, int n_tokens_max,
                                     int n_seqs_max, int max_blocks_per_seq)
{
    *bb = (struct batch_builder){.backend = be,
                                 .n_tokens_max = n_tokens_max,
                                 .n_seqs_max = n_seqs_max,
                                 .max_blocks_per_seq = max_blocks_per_seq};
    if (n_tokens_max < 1 || n_seqs_max < 1 || max_blocks_per_seq < 1)
        return VLLMC_ERR_INVALID_ARG;
    size_t total = bb_offset(bb, BB_COUNT);
    bb->host = mem_alloc_aligned(64, total);
    if (!bb->host)
        return VLLMC_ERR_NOMEM;
    memset(bb->host, 0, total);
    if (backend_location(be) == TENSOR_DEVICE) {
        enum vllmc_status rc = backend_buffer_alloc(be, bb_offset(bb, BB_TABLES_ADDED), &bb->dev);
        if (rc) {
            batch_builder_deinit(bb);
            return rc;
        }
    }
    uint8_t *h = bb->host;
    bb->input_ids = (int32_t *)(h + bb_offset(bb, BB_IDS));
    bb->positions = (int32_t *)(h + bb_offset(bb, BB_POS));
    bb->slot_mapping = (int32_t *)(h + bb_offset(bb, BB_SLOTS));
    bb->logits_indices = (int32_t *)(h + bb_offset(bb, BB_LOGITS));
    bb->block_tables = (int32_t *)(h + bb_offset(bb, BB_TABLES_ADDED));
    bb->seq_lens = (int32_t *)(h + bb_offset(bb, BB_SEQ_LENS));
    bb->query_start_loc = (int32_t *)(h + bb_offset(bb, BB_QSL));
    return VLLMC_OK;
}

void batch_builder_deinit(struct batch_builder *bb)
{
    if (bb->dev)
        backend_buffer_free(bb->backend, bb->dev);
    mem_free(bb->host);
    *bb = (struct batch_builder){0};
}

void batch_builder_clear(struct batch_builder *bb)
{
    bb->n_tokens = bb->n_seqs = bb->n_logits = 0;
    bb->max_seq_len = bb->max_q_len = 0;
    bb->query_start_loc[0] = 0;
}

enum vllmc_status batch_builder_add(struct batch_builder *bb, const int32_t *ids, int n, int pos0,
                                    const int32_t *block_table, int n_blocks, int block_size,
                                    enum batch_logits want, struct err *err)
{
    if (n < 1 || pos0 < 0 || block_size < 1)
        return err_set(err, VLLMC_ERR_INVALID_ARG, "batch: %d tokens at position %d", n, pos0);
    if (bb->n_tokens + n > bb->n_tokens_max || bb->n_seqs + 1 > bb->n_seqs_max)
        return err_set(err, VLLMC_ERR_CAPACITY, "batch: full (%d + %d tokens, %d sequences)",
                       bb->n_tokens, n, bb->n_seqs);
    if (n_blocks > bb->max_blocks_per_seq || (int64_t)n_blocks * block_size < (int64_t)pos0 + n)
        return err_set(err, VLLMC_ERR_CAPACITY,
                       "batch: %d blocks of %d tokens cannot hold %d tokens", n_blocks, block_size,
                       pos0 + n);
    if (bb->n_seqs && block_size != bb->block_size)
        return err_set(err, VLLMC_ERR_INVALID_ARG, "batch: block size %d after %d", block_size,
                       bb->block_size);
    bb->block_size = block_size;
    // The entries its keys need; finish() gives every row the batch's width.
    int s = bb->n_seqs;
    memcpy(bb->block_tables + (size_t)s * (size_t)bb->max_blocks_per_seq, block_table,
           (size_t)((pos0 + n + block_size - 1) / block_size) * sizeof *block_table);
    for (int i = 0; i < n; i++) {
        int t = bb->n_tokens + i, pos = pos0 + i;
        bb->input_ids[t] = ids[i];
        bb->positions[t] = pos;
        bb->slot_mapping[t] = block_table[pos / block_size] * block_size + pos % block_size;
        if (want == BATCH_LOGITS_ALL || (want == BATCH_LOGITS_LAST && i == n - 1))
            bb->logits_indices[bb->n_logits++] = t;
    }
    bb->n_tokens += n;
    bb->seq_lens[s] = pos0 + n;
    bb->query_start_loc[s + 1] = bb->n_tokens;
    bb->n_seqs++;
    if (pos0 + n > bb->max_seq_len)
        bb->max_seq_len = pos0 + n;
    if (n > bb->max_q_len)
        bb->max_q_len = n;
    return VLLMC_OK;
}

static void bb_tensor(struct batch_builder *bb, struct tensor *t, enum bb_array a, int64_t ne0,
                      int64_t ne1)
{
    uint8_t *base = bb->dev ? bb->dev : bb->host;
    VLLMC_ASSERT(tensor_init_2d(t, DTYPE_I32, base + bb_offset(bb, a), ne0, ne1));
    if (ne1 == 1)
        t->n_dims = 1;
    t->location = bb->dev ? TENSOR_DEVICE : TENSOR_HOST;
}

// Block-table entries sequence s's keys need.
static int bb_blocks_used(const struct batch_builder *bb, int s)
{
    return (bb->seq_lens[s] + bb->block_size - 1) / bb->block_size;
}

enum vllmc_status batch_builder_finish(struct batch_builder *bb, struct model_batch *out,
                                       struct err *err)
{
    if (!bb->n_seqs)
        return err_set(err, VLLMC_ERR_INVALID_ARG, "batch: empty");
    // The block table is as wide as the batch's longest context needs
    // (max_seq_len, which a replayed decode graph pins to its context bucket),
    // not max_blocks_per_seq: at 64 sequences and a long --max-model-len the
    // full width is hundreds of KB to copy to the device each step.
    // A caller may have lowered max_seq_len (0: "let the kernels compute it"),
    // so every sequence's own blocks count too.
    int width = (bb->max_seq_len + bb->block_size - 1) / bb->block_size;
    for (int s = 0; s < bb->n_seqs; s++)
        width = bb_blocks_used(bb, s) > width ? bb_blocks_used(bb, s) : width;
    if (width > bb->max_blocks_per_seq)
        width = bb->max_blocks_per_seq;
    int32_t *tables = (int32_t *)((uint8_t *)bb->host + bb_offset(bb, BB_TABLES));
    for (int s = 0; s < bb->n_seqs; s++) {
        int32_t *row = tables + (size_t)s * (size_t)width;
        int n_used = bb_blocks_used(bb, s);
        memcpy(row, bb->block_tables + (size_t)s * (size_t)bb->max_blocks_per_seq,
               (size_t)n_used * sizeof *row);
        memset(row + n_used, 0, (size_t)(width - n_used) * sizeof *row);
    }
    *out = (struct model_batch){.n_tokens = bb->n_tokens,
                                .n_seqs = bb->n_seqs,
                                .n_logits = bb->n_logits,
                                .max_blocks_per_seq = width,
                                .max_seq_len = bb->max_seq_len,
                                .max_q_len = bb->max_q_len};
    bb_tensor(bb, &out->input_ids, BB_IDS, bb->n_tokens, 1);
    bb_tensor(bb, &out->positions, BB_POS, bb->n_tokens, 1);
    bb_tensor(bb, &out->slot_mapping, BB_SLOTS, bb->n_tokens, 1);
    bb_tensor(bb, &out->logits_indices, BB_LOGITS, bb->n_logits, 1);
    bb_tensor(bb, &out->block_tables, BB_TABLES, width, bb->n_seqs);
    out->block_tables.n_dims = 2;
    bb_tensor(bb, &out->seq_lens, BB_SEQ_LENS, bb->n_seqs, 1);
    bb_tensor(bb, &out->query_start_loc, BB_QSL, bb->n_seqs + 1, 1);
    if (!bb->dev)
        return VLLMC_OK;
    const struct {
        enum bb_array a;
        size_t n;
    } used[] = {{BB_IDS, (size_t)bb->n_tokens},
                {BB_POS, (size_t)bb->n_tokens},
                {BB_SLOTS, (size_t)bb->n_tokens},
                {BB_LOGITS, (size_t)bb->n_logits},
                {BB_SEQ_LENS, (size_t)bb->n_seqs},
                {BB_QSL, (size_t)bb->n_seqs + 1},
                {BB_TABLES, (size_t)bb->n_seqs * (size_t)width}};
    for (size_t i = 0; i < sizeof(used) / sizeof(used[0]); i++) {
        size_t off = bb_offset(bb, used[i].a);
        if (!used[i].n)
            continue;
        enum vllmc_status rc = backend_upload(bb->backend, (uint8_t *)bb->dev + off,
                                              (uint8_t *)bb->host + off, used[i].n * 4);
        if (rc)
            return err_set(err, rc, "batch: upload: %s", backend_err(bb->backend)->msg);
    }
    return VLLMC_OK;
}
