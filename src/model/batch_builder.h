// Builds a struct model_batch from host arrays, one sequence at a time: the
// plain runner of the CLI, tests and tools. The engine's runner builds its
// batches from the block manager instead.
#ifndef VLLMC_MODEL_BATCH_BUILDER_H
#define VLLMC_MODEL_BATCH_BUILDER_H

#include <stdint.h>

#include "model/model.h"

struct backend;

enum batch_logits { BATCH_LOGITS_NONE, BATCH_LOGITS_LAST, BATCH_LOGITS_ALL };

struct batch_builder {
    struct backend *backend; // borrowed
    int n_tokens_max;
    int n_seqs_max;
    int max_blocks_per_seq;
    void *host;               // owned: the arrays below, carved from one allocation
    void *dev;                // owned backend memory of the same layout up to the tables as
                              // added (host only); NULL on host backends
    int32_t *input_ids;       // [n_tokens_max]
    int32_t *positions;       // [n_tokens_max]
    int32_t *slot_mapping;    // [n_tokens_max]
    int32_t *logits_indices;  // [n_tokens_max]
    int32_t *block_tables;    // [n_seqs_max, max_blocks_per_seq] as added (host only)
    int32_t *seq_lens;        // [n_seqs_max]
    int32_t *query_start_loc; // [n_seqs_max + 1]
    int n_tokens;
    int n_seqs;
    int n_logits;
    int max_seq_len;
    int max_q_len;
    int block_size; // of the added sequences' tables
};

enum vllmc_status batch_builder_init(struct batch_builder *bb, struct backend *be, int n_tokens_max,
                                     int n_seqs_max, int max_blocks_per_seq);
void batch_builder_deinit(struct batch_builder *bb);
void batch_builder_clear(struct batch_builder *bb);

// Appends n tokens of one sequence at positions pos0 .. pos0 + n - 1 (the
// sequence's earlier tokens are already in the cache). block_table lists its
// n_blocks KV blocks of block_size tokens. want says which of these tokens get
// logits; their rows follow in the order they were added.
enum vllmc_status batch_builder_add(struct batch_builder *bb, const int32_t *ids, int n, int pos0,
                                    const int32_t *block_table, int n_blocks, int block_size,
                                    enum batch_logits want, struct err *err);

// Fills *out with tensors over the builder's arrays (uploaded on a device
// backend). Valid until the next batch_builder_clear() or _add(). The block
// table is as wide as the longest context needs (max_seq_len, which a caller
// may raise to a graph's context bucket, or a longer sequence's own blocks),
// entries past a sequence's blocks 0.
enum vllmc_status batch_builder_finish(struct batch_builder *bb, struct model_batch *out,
                                       struct err *err);

#endif
