// Model runner: turns one scheduler step into the model's flat varlen batch
// (input ids, positions, slot mapping, block tables, sequence lengths, query
// start offsets, logits rows), runs the forward pass and hands back the
// logits rows of each scheduled request on the host. Buffers are sized once
// at creation; a step allocates nothing. Engine thread only.
#ifndef VLLMC_ENGINE_RUNNER_H
#define VLLMC_ENGINE_RUNNER_H

#include "core/arena.h"
#include "engine/scheduler.h"
#include "model/batch_builder.h"
#include "model/kv_cache.h"
#include "model/model.h"

// Decode steps on a backend with graphs: padded to a bucket of sequences and
// of context length, captured once per bucket, then replayed.
#define RUNNER_GRAPH_SLOTS 96
#define RUNNER_GRAPH_MIN_CTX 256 // smallest context bucket

struct runner_graph {
    int n_seqs;  // bucket: sequences = tokens = logits rows
    int max_ctx; // bucket of the longest context (the attention's split bound)
    bool warmed; // ran once eagerly at this shape: scratch and GEMM choices exist
    bool failed; // capture failed: this bucket stays eager
    struct backend_graph *g; // owned, NULL until captured
};

struct runner {
    struct model *model; // borrowed
    struct kv_cache *kv; // borrowed
    int block_size;
    int n_vocab;
    int n_tokens_max; // tokens of one step (max_num_batched_tokens)
    int n_seqs_max;   // sequences of one step (max_num_seqs)
    int n_logits_max; // logits rows of one step
    struct batch_builder bb;
    void *logits_dev;   // owned backend memory, f32 [n_logits_max, n_vocab]
    float *logits_host; // [n_logits_max, n_vocab]: logits_dev itself on the CPU,
                        // else owned host memory the rows are copied to
    struct arena arena; // per-step scratch, reset at the start of each step
    // Results of the last step, in the arena (valid until the next step):
    int *row_first; // [n_reqs]: first logits row of each scheduled request
    int *n_rows;    // [n_reqs]: its logits rows (0, 1, or its chunk with
                    // prompt logprobs)
    double t_prepare_s; // wall seconds of the last step's batch building and upload
    int n_logits;   // logits rows of the last step
    bool pad_decode;   // decode steps are padded to buckets (graphs, or VLLMC_CUDA_GRAPHS=pad)
    bool use_graphs;   // ... and captured and replayed (default on CUDA; VLLMC_CUDA_GRAPHS=0 off)
    struct runner_graph graphs[RUNNER_GRAPH_SLOTS];
    int n_graphs;
    int64_t n_graph_steps; // steps replayed from a graph
    // Tokens sampled on the device by a step whose results the host has not
    // read yet (asynchronous scheduling): the engine points pending_ids at
    // the device sampler's ids, and runner_execute takes a request's pending
    // token (request.pending_row) from there on the device (OP_SELECT_IDS).
    void *pending_ids;  // borrowed backend memory, i32 [n_pending_ids]
    int n_pending_ids;
    int n_select;         // tokens of the last step that take their id from pending_ids:
    int *select_token;    // [n_select] in the arena: the token's index in the batch
    int *select_row;      // [n_select] in the arena: its row in pending_ids
    int32_t *select_host; // owned [n_tokens_max]: OP_SELECT_IDS's index, a row or -1
    void *select_dev;     // owned backend memory, as select_host
    struct err err;
};

// Creates a runner for model m over KV cache kv. n_logits_max bounds the rows
// one step may ask for (one per sampling request plus prompt-logprob tokens).
enum vllmc_status runner_create(struct model *m, struct kv_cache *kv, int n_tokens_max,
                                int n_seqs_max, int n_logits_max, int max_model_len,
                                struct runner **out, struct err *err);
void runner_free(struct runner *r); // NULL is a no-op

// True when the step computing req's latest chunk needs logits for every
// token of the chunk: prompt logprobs while the prompt is being computed.
bool runner_wants_all_logits(const struct request *req, int n_new_tokens);

// Builds the batch of step o, launches the model and fills row_first /
// n_rows. On a device the pass may still run when this returns: the logits
// (logits_dev, f32 [n_logits, n_vocab]) are read in the backend's order.
enum vllmc_status runner_execute(struct runner *r, const struct scheduler_output *o);

// Logits rows [first, first + n) of the last step on the host, f32 [n, n_vocab]
// (borrowed, valid until the next step); copied from the device when the
// backend has memory of its own.
enum vllmc_status runner_host_rows(struct runner *r, int first, int n, const float **rows);

// Copies the pending tokens of the batch b (built from r->bb and uploaded)
// into its input ids on the device; nothing when the step has none.
enum vllmc_status runner_select_pending(struct runner *r, const struct model_batch *b);
// runner_graph.c: pads the decode batch in r->bb (n_reqs sequences of one
// token) to its bucket and runs it through the bucket's graph, capturing it
// on the second use; eager when capture fails.
enum vllmc_status runner_forward_decode(struct runner *r);
void runner_graphs_free(struct runner *r);

// Runs one forward pass of n_tokens dummy tokens over KV block 0 (the shape
// of the largest step) so that every buffer the forward pass touches exists
// before the KV cache is sized; on a host backend, of the first layer only
// (every op at that shape, without the cost of the rest). It writes no KV.
enum vllmc_status runner_profile(struct runner *r, int n_tokens, int max_model_len);

#endif
