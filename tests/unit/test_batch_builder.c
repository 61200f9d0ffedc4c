// Flat varlen batches: slot mapping through block tables, query_start_loc,
// seq_lens, logits rows, capacity errors; KV cache sizing.
#include "backend/backend.h"
#include "check.h"
#include "model/batch_builder.h"
#include "model/kv_cache.h"
#include "model/model.h"

static struct backend *cpu(void)
{
    struct backend_options o;
    backend_options_default(&o);
    o.n_threads = 1;
    struct backend *be = NULL;
    struct err err = {0};
    VLLMC_ASSERT(!backend_create("cpu", &o, &be, &err));
    return be;
}

static void test_two_sequences(void)
{
    struct backend *be = cpu();
    struct batch_builder bb;
    struct err err = {0};
    CHECK_EQ_INT(batch_builder_init(&bb, be, 16, 4, 3), VLLMC_OK);
    batch_builder_clear(&bb);
    // Sequence A: a 3-token chunk at positions 3..5 of blocks {7, 2} (block size 4).
    int32_t a_ids[3] = {10, 11, 12}, a_table[2] = {7, 2};
    // Sequence B: one decode token at position 8 of blocks {0, 1, 5}.
    int32_t b_ids[1] = {20}, b_table[3] = {0, 1, 5};
    CHECK_EQ_INT(batch_builder_add(&bb, a_ids, 3, 3, a_table, 2, 4, BATCH_LOGITS_ALL, &err),
                 VLLMC_OK);
    CHECK_EQ_INT(batch_builder_add(&bb, b_ids, 1, 8, b_table, 3, 4, BATCH_LOGITS_LAST, &err),
                 VLLMC_OK);
    struct model_batch b;
    CHECK_EQ_INT(batch_builder_finish(&bb, &b, &err), VLLMC_OK);
    CHECK_EQ_INT(b.n_tokens, 4);
    CHECK_EQ_INT(b.n_seqs, 2);
    CHECK_EQ_INT(b.n_logits, 4);
    CHECK_EQ_INT(b.max_seq_len, 9);
    CHECK_EQ_INT(b.max_q_len, 3);
    const int32_t *pos = b.positions.data, *slot = b.slot_mapping.data;
    const int32_t *qsl = b.query_start_loc.data, *lens = b.seq_lens.data;
    const int32_t *li = b.logits_indices.data, *bt = b.block_tables.data;
    // Position 3 -> block 7 offset 3; 4 -> block 2 offset 0; 5 -> block 2 offset 1; 8 -> block 5
    // offset 0.
    CHECK_EQ_INT(pos[0], 3);
    CHECK_EQ_INT(slot[0], 7 * 4 + 3);
    CHECK_EQ_INT(slot[1], 2 * 4 + 0);
    CHECK_EQ_INT(slot[2], 2 * 4 + 1);
    CHECK_EQ_INT(slot[3], 5 * 4 + 0);
    CHECK_EQ_INT(qsl[0], 0);
    CHECK_EQ_INT(qsl[1], 3);
    CHECK_EQ_INT(qsl[2], 4);
    CHECK_EQ_INT(lens[0], 6);
    CHECK_EQ_INT(lens[1], 9);
    CHECK_EQ_INT(li[3], 3);
    CHECK_EQ_INT(b.block_tables.ne[0], 3);
    CHECK_EQ_INT(b.block_tables.ne[1], 2);
    CHECK_EQ_INT(bt[0], 7);
    CHECK_EQ_INT(bt[2], 0); // unused entries are zero
    CHECK_EQ_INT(bt[3 + 2], 5);
    CHECK_EQ_INT(b.input_ids.ne[0], 4);
    CHECK_EQ_INT(b.query_start_loc.ne[0], 3);
    batch_builder_deinit(&bb);
    backend_free(be);
}

// The device copy of the block table is as wide as the batch's longest
// context needs, whatever max_blocks_per_seq allows; a raised max_seq_len (a
// decode graph's context bucket) widens it, and finishing twice is harmless.
static void test_table_width(void)
{
    struct backend *be = cpu();
    struct batch_builder bb;
    struct err err = {0};
    CHECK_EQ_INT(batch_builder_init(&bb, be, 8, 3, 64), VLLMC_OK);
    batch_builder_clear(&bb);
    int32_t ids[2] = {1, 2}, a_table[3] = {9, 4, 6}, b_table[1] = {3};
    // A: one token at position 9 of blocks {9, 4, 6} of 4 (needs 3 blocks);
    // B: two tokens at 0..1 of block {3}.
    CHECK_EQ_INT(batch_builder_add(&bb, ids, 1, 9, a_table, 3, 4, BATCH_LOGITS_LAST, &err),
                 VLLMC_OK);
    CHECK_EQ_INT(batch_builder_add(&bb, ids, 2, 0, b_table, 1, 4, BATCH_LOGITS_LAST, &err),
                 VLLMC_OK);
    CHECK_EQ_INT(batch_builder_add(&bb, ids, 1, 0, b_table, 1, 8, BATCH_LOGITS_LAST, &err),
                 VLLMC_ERR_INVALID_ARG); // one block size per batch
    struct model_batch b;
    for (int round = 0; round < 2; round++) {
        CHECK_EQ_INT(batch_builder_finish(&bb, &b, &err), VLLMC_OK);
        const int32_t *bt = b.block_tables.data;
        CHECK_EQ_INT(b.block_tables.ne[0], 3);
        CHECK_EQ_INT(b.block_tables.ne[1], 2);
        CHECK_EQ_INT(b.max_blocks_per_seq, 3);
        CHECK_EQ_INT(bt[0], 9);
        CHECK_EQ_INT(bt[1], 4);
        CHECK_EQ_INT(bt[2], 6);
        CHECK_EQ_INT(bt[3], 3);
        CHECK_EQ_INT(bt[4], 0);
        CHECK_EQ_INT(bt[5], 0);
    }
    bb.max_seq_len = 17; // a context bucket: 5 blocks of 4
    CHECK_EQ_INT(batch_builder_finish(&bb, &b, &err), VLLMC_OK);
    const int32_t *bt = b.block_tables.data;
    CHECK_EQ_INT(b.block_tables.ne[0], 5);
    CHECK_EQ_INT(bt[2], 6);
    CHECK_EQ_INT(bt[3], 0);
    CHECK_EQ_INT(bt[5], 3);
    CHECK_EQ_INT(bt[9], 0);
    // A lowered max_seq_len (0: the kernels compute it) still leaves every
    // sequence its blocks.
    bb.max_seq_len = 0;
    CHECK_EQ_INT(batch_builder_finish(&bb, &b, &err), VLLMC_OK);
    bt = b.block_tables.data;
    CHECK_EQ_INT(b.block_tables.ne[0], 3);
    CHECK_EQ_INT(bt[2], 6);
    CHECK_EQ_INT(bt[3], 3);
    CHECK_EQ_INT(bt[5], 0);
    batch_builder_deinit(&bb);
    backend_free(be);
}

static void test_capacity(void)
{
    struct backend *be = cpu();
    struct batch_builder bb;
    struct err err = {0};
    CHECK_EQ_INT(batch_builder_init(&bb, be, 4, 1, 1), VLLMC_OK);
    batch_builder_clear(&bb);
    int32_t ids[5] = {1, 2, 3, 4, 5}, table[1] = {0};
    CHECK_EQ_INT(batch_builder_add(&bb, ids, 5, 0, table, 1, 16, BATCH_LOGITS_LAST, &err),
                 VLLMC_ERR_CAPACITY);
    // Position 16 needs a second block of 16.
    CHECK_EQ_INT(batch_builder_add(&bb, ids, 1, 16, table, 1, 16, BATCH_LOGITS_LAST, &err),
                 VLLMC_ERR_CAPACITY);
    CHECK_EQ_INT(batch_builder_add(&bb, ids, 2, 0, table, 1, 16, BATCH_LOGITS_NONE, &err),
                 VLLMC_OK);
    CHECK_EQ_INT(batch_builder_add(&bb, ids, 1, 0, table, 1, 16, BATCH_LOGITS_NONE, &err),
                 VLLMC_ERR_CAPACITY); // one sequence only
    struct model_batch b;
    CHECK_EQ_INT(batch_builder_finish(&bb, &b, &err), VLLMC_OK);
    CHECK_EQ_INT(b.n_logits, 0);
    batch_builder_clear(&bb);
    CHECK_EQ_INT(batch_builder_finish(&bb, &b, &err), VLLMC_ERR_INVALID_ARG);
    batch_builder_deinit(&bb);
    backend_free(be);
}

static void test_kv_cache_sizing(void)
{
    // Llama-2-7B: 32 layers, 32 kv heads of 128; 16 tokens per block in f16:
    // 2 (K, V) * 32 * 16 * 32 * 128 * 2 bytes = 8 MiB.
    struct model_hparams hp = {.n_layers = 32, .n_kv_heads = 32, .head_dim = 128};
    CHECK_EQ_INT(kv_cache_bytes_per_block(&hp, 16, DTYPE_F16), 8 << 20);
    CHECK_EQ_INT(kv_cache_bytes_per_block(&hp, 16, DTYPE_F32), 16 << 20);
    // stories260K: 5 layers, 4 kv heads of 8, f32: 1280 bytes per token.
    struct model_hparams s = {.n_layers = 5, .n_kv_heads = 4, .head_dim = 8};
    CHECK_EQ_INT(kv_cache_bytes_per_block(&s, 1, DTYPE_F32), 1280);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"two_sequences", test_two_sequences},
        {"table_width", test_table_width},
        {"capacity", test_capacity},
        {"kv_cache_sizing", test_kv_cache_sizing},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
