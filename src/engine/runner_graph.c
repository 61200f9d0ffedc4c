// Decode steps as replayed graphs: a decode batch (one token per sequence) is
// padded to a bucket of sequences (powers of two up to max_num_seqs) and of
// context length (powers of two from RUNNER_GRAPH_MIN_CTX), so that each
// bucket has fixed shapes and kernel arguments over the batch builder's
// fixed device arrays. A bucket runs eagerly once (scratch and GEMM choices
// settle), is captured on its second use and replayed after; a bucket whose
// capture fails stays eager. Padded sequences have one token at position 0
// that writes no KV (slot -1) and whose logits row nobody reads. A freshly
// captured graph is checked once against an eager run of the same step and
// dropped (the bucket stays eager) when their logits disagree.
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "engine/runner.h"

static int pow2_at_least(int n, int lo)
{
    int b = lo;
    while (b < n)
        b *= 2;
    return b;
}

static struct runner_graph *graph_slot(struct runner *r, int n_seqs, int max_ctx)
{
    for (int i = 0; i < r->n_graphs; i++)
        if (r->graphs[i].n_seqs == n_seqs && r->graphs[i].max_ctx == max_ctx)
            return &r->graphs[i];
    if (r->n_graphs == RUNNER_GRAPH_SLOTS)
        return NULL; // every slot taken: this shape runs eagerly
    struct runner_graph *g = &r->graphs[r->n_graphs++];
    *g = (struct runner_graph){.n_seqs = n_seqs, .max_ctx = max_ctx};
    return g;
}

void runner_graphs_free(struct runner *r)
{
    for (int i = 0; i < r->n_graphs; i++)
        backend_graph_free(r->model->backend, r->graphs[i].g);
    r->n_graphs = 0;
}

static enum vllmc_status forward_eager(struct runner *r, const struct model_batch *b,
                                       struct tensor *lt)
{
    return model_forward(r->model, b, r->kv, lt, &r->err);
}

// Captures the forward pass of b into slot g; false (and g->failed) when the
// backend cannot record it, leaving the backend ready for an eager run.
static bool graph_capture(struct runner *r, struct runner_graph *g, const struct model_batch *b,
                          struct tensor *lt)
{
    if (model_forward_record(r->model, b, r->kv, lt, &g->g, &r->err)) {
        g->failed = true;
        log_warn("runner: decode graph for %d sequences, context %d: capture failed (%s); "
                 "running it eagerly",
                 g->n_seqs, g->max_ctx, r->err.msg);
        memset(&r->err, 0, sizeof r->err);
        return false;
    }
    log_debug("runner: captured the decode graph for %d sequences, context %d", g->n_seqs,
              g->max_ctx);
    return true;
}

// Replays the fresh graph g and runs the same step eagerly (its KV writes are
// the same values at the same slots); true when the logits agree. The
// replay's rows come to the host's logits rows, then the eager pass's rows
// a few at a time for the comparison: a 64-sequence bucket of a
// 151,936-word vocabulary has 39 MB of logits, and a second host copy of them
// (freshly allocated, so every page faults in) cost more than the check.
#define GRAPH_VERIFY_ROWS 8
static bool graph_verify(struct runner *r, struct runner_graph *g, const struct model_batch *b,
                         struct tensor *lt)
{
    struct backend *be = r->model->backend;
    const size_t n_vocab = (size_t)r->n_vocab;
    int n_rows = b->n_logits;
    float *eager = mem_alloc(GRAPH_VERIFY_ROWS * n_vocab * sizeof *eager);
    if (!eager)
        return false;
    const float *replay = NULL;
    bool ok = !backend_graph_launch(be, g->g) && !runner_host_rows(r, 0, n_rows, &replay) &&
              !forward_eager(r, b, lt);
    double worst = 0;
    for (int row0 = 0; ok && row0 < n_rows; row0 += GRAPH_VERIFY_ROWS) {
        int n = n_rows - row0 < GRAPH_VERIFY_ROWS ? n_rows - row0 : GRAPH_VERIFY_ROWS;
        size_t off = (size_t)row0 * n_vocab, len = (size_t)n * n_vocab;
        ok = !backend_download(be, eager, (const float *)r->logits_dev + off, len * sizeof *eager);
        for (size_t i = 0; ok && i < len; i++) {
            double d = fabs((double)replay[off + i] - (double)eager[i]);
            if (!(d <= 1e-2 + 1e-3 * fabs((double)eager[i]))) // NaN fails too
                ok = false;
            worst = d > worst ? d : worst;
        }
    }
    mem_free(eager);
    if (ok)
        log_info("runner: decode graph for %d sequences, context %d: replay matches the eager "
                 "pass (largest |logit diff| %g)",
                 g->n_seqs, g->max_ctx, worst);
    if (!ok)
        log_error("runner: decode graph for %d sequences, context %d disagrees with the eager "
                  "pass (|diff| up to %g or a failed call); running it eagerly",
                  g->n_seqs, g->max_ctx, worst);
    return ok;
}

enum vllmc_status runner_forward_decode(struct runner *r)
{
    double t0 = time_now_s();
    struct batch_builder *bb = &r->bb;
    struct backend *be = r->model->backend;
    int n = bb->n_seqs;
    int n_seqs = pow2_at_least(n, 1);
    if (n_seqs > r->n_seqs_max)
        n_seqs = r->n_seqs_max;
    if (n_seqs < n)
        n_seqs = n;
    int ctx_cap = bb->max_blocks_per_seq * r->block_size;
    int max_ctx = pow2_at_least(bb->max_seq_len, RUNNER_GRAPH_MIN_CTX);
    if (max_ctx > ctx_cap)
        max_ctx = ctx_cap;
    if (max_ctx < bb->max_seq_len)
        max_ctx = bb->max_seq_len;
    static const int32_t zero = 0;
    for (int s = n; s < n_seqs; s++) {
        enum vllmc_status rc = batch_builder_add(bb, &zero, 1, 0, &zero, 1, r->block_size,
                                                 BATCH_LOGITS_LAST, &r->err);
        if (rc)
            return rc;
        bb->slot_mapping[bb->n_tokens - 1] = -1; // writes no KV
    }
    bb->max_seq_len = max_ctx; // every step of the bucket launches the same attention grid

    struct model_batch b;
    enum vllmc_status rc = batch_builder_finish(bb, &b, &r->err);
    if (!rc)
        rc = runner_select_pending(r, &b);
    // The padding and the upload of the batch count as preparing it, as on
    // the eager path (runner_forward): a copy that waits for the device
    // shows there, not in the graph's launch.
    r->t_prepare_s += time_now_s() - t0;
    if (rc)
        return rc;
    struct tensor lt;
    tensor_init_2d(&lt, DTYPE_F32, r->logits_dev, r->n_vocab, b.n_logits);
    lt.location = backend_location(be);
    r->n_logits = b.n_logits;
    struct runner_graph *g = r->use_graphs ? graph_slot(r, n_seqs, max_ctx) : NULL;
    if (!g || g->failed)
        return forward_eager(r, &b, &lt);
    if (g->g && !backend_graph_valid(be, g->g)) {
        // Memory the graph captured moved: settle the new shape eagerly, then capture again.
        backend_graph_free(be, g->g);
        g->g = NULL;
        g->warmed = false;
    }
    if (!g->g) {
        if (!g->warmed) {
            g->warmed = true;
            return forward_eager(r, &b, &lt);
        }
        if (!graph_capture(r, g, &b, &lt))
            return forward_eager(r, &b, &lt);
        if (!graph_verify(r, g, &b, &lt)) {
            backend_graph_free(be, g->g);
            g->g = NULL;
            g->failed = true;
            // Once more eagerly: the check may have failed before its own eager pass.
            return forward_eager(r, &b, &lt);
        }
        return VLLMC_OK; // the check's eager pass computed this step
    }
    rc = backend_graph_launch(be, g->g);
    if (rc)
        return err_set(&r->err, rc, "runner: graph launch: %s", backend_err(be)->msg);
    r->n_graph_steps++;
    return VLLMC_OK;
}
