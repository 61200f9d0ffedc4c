// Model runner: batch building from scheduled requests and the forward call.
#include "engine/runner.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/clock.h"

enum vllmc_status runner_create(struct model *m, struct kv_cache *kv, int n_tokens_max,
                                int n_seqs_max, int n_logits_max, int max_model_len,
                                struct runner **out, struct err *err)
{
    *out = NULL;
    struct runner *r = mem_calloc(1, sizeof *r);
    if (!r)
        return err_set(err, VLLMC_ERR_NOMEM, "runner: out of memory");
    r->model = m;
    r->kv = kv;
    r->block_size = kv->block_size;
    r->n_vocab = m->hp.n_vocab;
    r->n_tokens_max = n_tokens_max;
    r->n_seqs_max = n_seqs_max;
    r->n_logits_max = n_logits_max;
    int max_blocks = (max_model_len + kv->block_size - 1) / kv->block_size;
    // The dummy step of runner_profile() may split its tokens into more
    // sequences than a real step holds.
    int n_seqs_cap = n_seqs_max;
    int n_profile_seqs = (n_tokens_max + max_model_len - 2) / (max_model_len - 1);
    if (n_profile_seqs > n_seqs_cap)
        n_seqs_cap = n_profile_seqs;
    struct backend *be = m->backend;
    size_t logits_bytes = (size_t)n_logits_max * (size_t)r->n_vocab * sizeof(float);
    enum vllmc_status rc = batch_builder_init(&r->bb, be, n_tokens_max, n_seqs_cap, max_blocks);
    if (rc) {
        err_set(err, rc, "runner: cannot allocate the batch for %d tokens", n_tokens_max);
        goto fail;
    }
    rc = backend_buffer_alloc(be, logits_bytes, &r->logits_dev);
    if (rc) {
        err_set(err, rc, "runner: cannot allocate %zu bytes of logits on %s", logits_bytes,
                backend_name(be));
        goto fail;
    }
    if (backend_location(be) == TENSOR_HOST) {
        r->logits_host = r->logits_dev;
    } else {
        r->logits_host = mem_alloc(logits_bytes);
        if (!r->logits_host) {
            rc = err_set(err, VLLMC_ERR_NOMEM, "runner: out of memory");
            goto fail;
        }
    }
    r->select_host = mem_alloc((size_t)n_tokens_max * sizeof *r->select_host);
    if (!r->select_host) {
        rc = err_set(err, VLLMC_ERR_NOMEM, "runner: out of memory");
        goto fail;
    }
    rc = backend_buffer_alloc(be, (size_t)n_tokens_max * sizeof *r->select_host, &r->select_dev);
    if (rc) {
        err_set(err, rc, "runner: %s", backend_err(be)->msg);
        goto fail;
    }
    rc = arena_init(&r->arena, 4 * (size_t)n_seqs_cap * sizeof(int) + 256);
    if (rc) {
        err_set(err, rc, "runner: out of memory");
        goto fail;
    }
    // Decode steps are padded to buckets and replayed from graphs where the
    // backend has them (CUDA). VLLMC_CUDA_GRAPHS=0 runs them eagerly and
    // unpadded, =pad padded and eagerly (what the graph test compares
    // against). On the H200 graphs took the 0.6B shape's batch-1 decode from
    // 551 to 685 tok/s and its 64-sequence decode from 8,270 to 8,783.
    const char *env = getenv("VLLMC_CUDA_GRAPHS");
    bool graphs = backend_has_graphs(be);
    bool off = env && (!strcmp(env, "0") || !strcmp(env, "pad"));
    r->use_graphs = graphs && !off;
    r->pad_decode = r->use_graphs || (graphs && env && !strcmp(env, "pad"));
    *out = r;
    return VLLMC_OK;
fail:
    runner_free(r);
    return rc;
}

void runner_free(struct runner *r)
{
    if (!r)
        return;
    runner_graphs_free(r);
    arena_deinit(&r->arena);
    if (r->select_dev)
        backend_buffer_free(r->model->backend, r->select_dev);
    mem_free(r->select_host);
    if (r->logits_host && r->logits_host != r->logits_dev)
        mem_free(r->logits_host);
    if (r->logits_dev)
        backend_buffer_free(r->model->backend, r->logits_dev);
    if (r->bb.host)
        batch_builder_deinit(&r->bb);
    mem_free(r);
}

bool runner_wants_all_logits(const struct request *req, int n_new_tokens)
{
    // Before this chunk, at least one more prompt token remained to be scored.
    int pos0 = req->n_computed_tokens - n_new_tokens;
    return req->sp.prompt_logprobs >= 0 && pos0 < req->n_prompt_tokens - 1;
}

enum vllmc_status runner_select_pending(struct runner *r, const struct model_batch *b)
{
    if (!r->n_select)
        return VLLMC_OK;
    struct backend *be = r->model->backend;
    int n = b->n_tokens;
    for (int i = 0; i < n; i++)
        r->select_host[i] = -1;
    for (int i = 0; i < r->n_select; i++)
        r->select_host[r->select_token[i]] = r->select_row[i];
    enum vllmc_status rc =
        backend_upload(be, r->select_dev, r->select_host, (size_t)n * sizeof *r->select_host);
    if (rc)
        return err_set(&r->err, rc, "runner: %s", backend_err(be)->msg);
    struct tensor values, index;
    tensor_init_1d(&values, DTYPE_I32, r->pending_ids, r->n_pending_ids);
    tensor_init_1d(&index, DTYPE_I32, r->select_dev, n);
    values.location = index.location = backend_location(be);
    struct op_call c = {.op = OP_SELECT_IDS,
                        .dst = (struct tensor *)&b->input_ids,
                        .src = {&values, &index},
                        .backend = be};
    rc = backend_run_op(be, &c);
    if (rc)
        return err_set(&r->err, rc, "runner: %s", backend_err(be)->msg);
    return VLLMC_OK;
}

// Launches the batch in r->bb; the logits stay where the backend has them.
// n_layers: the first layers only (0: all), for runner_profile.
static enum vllmc_status runner_forward(struct runner *r, int n_layers)
{
    struct model_batch b;
    double t0 = time_now_s();
    enum vllmc_status rc = batch_builder_finish(&r->bb, &b, &r->err);
    b.n_layers = n_layers;
    if (!rc)
        rc = runner_select_pending(r, &b);
    r->t_prepare_s += time_now_s() - t0; // the upload of the batch on a device
    if (rc)
        return rc;
    struct tensor lt;
    int n_logits = b.n_logits;
    if (n_logits > 0)
        tensor_init_2d(&lt, DTYPE_F32, r->logits_dev, r->n_vocab, n_logits);
    lt.location = backend_location(r->model->backend);
    r->n_logits = n_logits;
    return model_forward(r->model, &b, r->kv, n_logits ? &lt : NULL, &r->err);
}

enum vllmc_status runner_host_rows(struct runner *r, int first, int n, const float **rows)
{
    VLLMC_ASSERT(first >= 0 && n >= 0 && first + n <= r->n_logits);
    struct backend *be = r->model->backend;
    size_t off = (size_t)first * (size_t)r->n_vocab;
    enum vllmc_status rc = VLLMC_OK;
    if (r->logits_host != r->logits_dev && n > 0)
        rc = backend_download(be, r->logits_host + off, (const float *)r->logits_dev + off,
                              (size_t)n * (size_t)r->n_vocab * sizeof(float));
    if (!rc)
        rc = backend_sync(be);
    if (rc)
        return err_set(&r->err, rc, "runner: logits download: %s", backend_err(be)->msg);
    *rows = r->logits_host + off;
    return VLLMC_OK;
}

enum vllmc_status runner_execute(struct runner *r, const struct scheduler_output *o)
{
    double t0 = time_now_s();
    arena_reset(&r->arena);
    batch_builder_clear(&r->bb);
    r->row_first = arena_alloc(&r->arena, (size_t)o->n_reqs * sizeof(int), sizeof(int));
    r->n_rows = arena_alloc(&r->arena, (size_t)o->n_reqs * sizeof(int), sizeof(int));
    r->select_token = arena_alloc(&r->arena, (size_t)o->n_reqs * sizeof(int), sizeof(int));
    r->select_row = arena_alloc(&r->arena, (size_t)o->n_reqs * sizeof(int), sizeof(int));
    VLLMC_ASSERT(r->row_first && r->n_rows && r->select_token && r->select_row);
    int n_rows_total = 0;
    bool decode = r->pad_decode;
    r->n_select = 0;
    for (int i = 0; i < o->n_reqs; i++) {
        const struct request *req = o->reqs[i];
        int n_new = o->n_new_tokens[i];
        int pos0 = req->n_computed_tokens - n_new; // the scheduler advanced it already
        enum batch_logits want = BATCH_LOGITS_NONE;
        int rows = 0;
        if (runner_wants_all_logits(req, n_new)) {
            want = BATCH_LOGITS_ALL;
            rows = n_new;
        } else if (scheduler_samples(req)) {
            want = BATCH_LOGITS_LAST;
            rows = 1;
        }
        VLLMC_ASSERT(n_rows_total + rows <= r->n_logits_max);
        if (req->n_pending && pos0 + n_new > req->n_tokens) {
            // The pending token sits past the known ones: its id is on the
            // host already, or the device copies it in after the upload.
            VLLMC_ASSERT(pos0 + n_new == req->n_tokens + 1 && req->n_tokens < req->n_tokens_max);
            bool on_device = req->pending_token < 0;
            req->token_ids[req->n_tokens] = on_device ? 0 : req->pending_token;
            if (on_device) {
                VLLMC_ASSERT(req->pending_row >= 0 && req->pending_row < r->n_pending_ids);
                r->select_token[r->n_select] = r->bb.n_tokens + n_new - 1;
                r->select_row[r->n_select++] = req->pending_row;
            }
        }
        enum vllmc_status rc =
            batch_builder_add(&r->bb, req->token_ids + pos0, n_new, pos0, req->block_ids,
                              req->n_blocks, r->block_size, want, &r->err);
        if (rc)
            return rc;
        r->row_first[i] = n_rows_total;
        r->n_rows[i] = rows;
        n_rows_total += rows;
        decode = decode && n_new == 1 && rows == 1;
    }
    r->t_prepare_s = time_now_s() - t0;
    return decode ? runner_forward_decode(r) : runner_forward(r, 0);
}

enum vllmc_status runner_profile(struct runner *r, int n_tokens, int max_model_len)
{
    batch_builder_clear(&r->bb);
    int32_t *zeros = mem_calloc((size_t)r->bb.max_blocks_per_seq + (size_t)n_tokens, sizeof *zeros);
    if (!zeros)
        return err_set(&r->err, VLLMC_ERR_NOMEM, "runner: out of memory");
    int32_t *ids = zeros + r->bb.max_blocks_per_seq;
    // Every token of every dummy sequence maps into block 0: the whole table
    // is block 0, so no slot leaves the one block the cache surely has.
    int seq_len_max = max_model_len - 1;
    int n_seqs = (n_tokens + seq_len_max - 1) / seq_len_max;
    int n_logits = 0;
    enum vllmc_status rc = VLLMC_OK;
    for (int done = 0, seq = 0; done < n_tokens && !rc; seq++) {
        int n = n_tokens - done < seq_len_max ? n_tokens - done : seq_len_max;
        int n_blocks = (n + r->block_size - 1) / r->block_size;
        // As many logits rows as the real steps may use, keeping one for each
        // sequence still to come.
        int left = n_seqs - seq - 1;
        enum batch_logits want = BATCH_LOGITS_NONE;
        if (n_logits + n + left <= r->n_logits_max)
            want = BATCH_LOGITS_ALL;
        else if (n_logits + 1 + left <= r->n_logits_max)
            want = BATCH_LOGITS_LAST;
        rc = batch_builder_add(&r->bb, ids, n, 0, zeros, n_blocks, r->block_size, want, &r->err);
        n_logits += want == BATCH_LOGITS_ALL ? n : want == BATCH_LOGITS_LAST;
        done += n;
    }
    // Every dummy token maps into block 0, so their K/V writes would land on
    // the same slots from several threads: they write nothing instead (the
    // store still runs at its full shape).
    for (int i = 0; i < r->bb.n_tokens && !rc; i++)
        r->bb.slot_mapping[i] = -1;
    // On the host, one layer: every op kind runs at the step's largest shape
    // and grows its scratch to what serving needs, and the other layers
    // would only repeat it (a 2,048-token prefill of every layer took 5-6 s
    // of a 0.6B model's start-up on two cores). A device runs them all, as
    // vLLM does, since its peak memory is read after this pass.
    bool host = backend_location(r->model->backend) == TENSOR_HOST;
    if (!rc)
        rc = runner_forward(r, host ? 1 : 0);
    if (!rc && backend_sync(r->model->backend))
        rc = err_set(&r->err, VLLMC_ERR_BACKEND, "runner: %s", backend_err(r->model->backend)->msg);
    mem_free(zeros);
    return rc;
}
