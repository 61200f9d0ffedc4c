// Device sampling: host-built rows and adjustments, one OP_SAMPLE call per
// step, sampled ids and logprobs back through the backend's pinned staging.
#include "engine/device_sampler.h"

#include <string.h>

#include "core/alloc.h"

#define WORDS(type) ((int64_t)(sizeof(type) / sizeof(int32_t)))

// Whether the backend would run OP_SAMPLE for a call of this shape.
static bool backend_samples(struct backend *be, int n_vocab)
{
    struct tensor dst, logits, rows;
    static char dummy[64];
    tensor_init_2d(&dst, DTYPE_I32, dummy, 1, 1);
    tensor_init_2d(&logits, DTYPE_F32, dummy, n_vocab, 1);
    tensor_init_2d(&rows, DTYPE_I32, dummy, WORDS(struct sample_row), 1);
    dst.location = logits.location = rows.location = backend_location(be);
    struct op_call c = {.op = OP_SAMPLE, .dst = &dst, .src = {&logits, &rows}, .backend = be};
    return backend_select_provider(be, &c) != NULL;
}

enum vllmc_status device_sampler_create(struct backend *be, int n_vocab, int n_rows_max,
                                        struct device_sampler **out, struct err *err)
{
    *out = NULL;
    if (!backend_samples(be, n_vocab))
        return VLLMC_OK;
    struct device_sampler *ds = mem_calloc(1, sizeof *ds);
    if (!ds)
        return err_set(err, VLLMC_ERR_NOMEM, "device sampler: out of memory");
    ds->be = be;
    ds->n_vocab = n_vocab;
    ds->n_rows_max = n_rows_max;
    size_t nr = (size_t)n_rows_max;
    ds->rows = mem_calloc(nr, sizeof *ds->rows);
    ds->slot = mem_alloc((size_t)n_vocab * sizeof *ds->slot);
    enum vllmc_status rc = VLLMC_ERR_NOMEM;
    if (!ds->rows || !ds->slot) {
        err_set(err, rc, "device sampler: out of memory");
        goto fail;
    }
    for (int i = 0; i < n_vocab; i++)
        ds->slot[i] = -1;
    // Pinned, so that the results' copy runs without the host waiting on it.
    void *ids = NULL, *lps = NULL;
    rc = backend_host_alloc(be, nr * sizeof *ds->ids, &ids);
    ds->ids = ids;
    if (!rc)
        rc = backend_host_alloc(be, nr * sizeof *ds->lps, &lps);
    ds->lps = lps;
    if (!rc)
        rc = backend_buffer_alloc(be, nr * sizeof *ds->rows, &ds->rows_dev);
    if (!rc)
        rc = backend_buffer_alloc(be, nr * sizeof *ds->ids, &ds->ids_dev);
    if (!rc)
        rc = backend_buffer_alloc(be, nr * sizeof *ds->lps, &ds->lps_dev);
    if (rc) {
        err_set(err, rc, "device sampler: %s", backend_err(be)->msg);
        goto fail;
    }
    *out = ds;
    return VLLMC_OK;
fail:
    device_sampler_free(ds);
    return rc;
}

void device_sampler_free(struct device_sampler *ds)
{
    if (!ds)
        return;
    if (ds->rows_dev)
        backend_buffer_free(ds->be, ds->rows_dev);
    if (ds->ids_dev)
        backend_buffer_free(ds->be, ds->ids_dev);
    if (ds->lps_dev)
        backend_buffer_free(ds->be, ds->lps_dev);
    if (ds->adj_dev)
        backend_buffer_free(ds->be, ds->adj_dev);
    mem_free(ds->rows);
    mem_free(ds->adj);
    mem_free(ds->slot);
    backend_host_free(ds->be, ds->ids);
    backend_host_free(ds->be, ds->lps);
    mem_free(ds);
}

bool device_sampler_covers(const struct vllmc_sampling_params *sp)
{
    return sp->logprobs <= SAMPLE_MAX_LOGPROBS;
}

void device_sampler_clear(struct device_sampler *ds)
{
    ds->n_rows = 0;
    ds->n_adj = 0;
    ds->any_logprobs = false;
}

// The entry of token id in the row being built, created on first use; NULL
// when out of memory.
static struct sample_adj *adj_entry(struct device_sampler *ds, int32_t id)
{
    if (ds->slot[id] >= 0)
        return &ds->adj[ds->slot[id]];
    if (ds->n_adj == ds->adj_cap) {
        int cap = ds->adj_cap ? 2 * ds->adj_cap : 1024;
        struct sample_adj *a = mem_realloc(ds->adj, (size_t)cap * sizeof *a);
        if (!a)
            return NULL;
        ds->adj = a;
        ds->adj_cap = cap;
    }
    ds->slot[id] = ds->n_adj;
    struct sample_adj *e = &ds->adj[ds->n_adj++];
    *e = (struct sample_adj){.id = id};
    return e;
}

// Builds the row's adjustments in the host sampler's terms
// (sampler_apply_processors): false when out of memory.
static bool adj_build(struct device_sampler *ds, const struct sampler *sm,
                      const struct sample_input *in)
{
    const struct vllmc_sampling_params *sp = in->sp;
    int n_vocab = ds->n_vocab;
    struct sample_adj *e;
#define VALID(id) ((id) >= 0 && (id) < n_vocab)
    for (int i = 0; i < sp->n_logit_bias; i++) {
        int32_t id = sp->logit_bias[i].token_id;
        if (!VALID(id))
            continue;
        if (!(e = adj_entry(ds, id)))
            return false;
        e->bias += sp->logit_bias[i].bias;
    }
    if (in->n_output < sp->min_tokens) {
        int n_end = 1 + sm->n_extra_eos + sp->n_stop_token_ids;
        for (int i = 0; i < n_end; i++) {
            int32_t id = i == 0                  ? sm->eos_id
                         : i <= sm->n_extra_eos ? sm->extra_eos_ids[i - 1]
                                                 : sp->stop_token_ids[i - 1 - sm->n_extra_eos];
            if (!VALID(id))
                continue;
            if (!(e = adj_entry(ds, id)))
                return false;
            e->flags |= SAMPLE_ADJ_MASK;
        }
    }
    bool rep = sp->repetition_penalty != 1.0f;
    if (!rep && sp->frequency_penalty == 0.0f && sp->presence_penalty == 0.0f)
        return true;
    for (int i = 0; i < in->n_output; i++) {
        int32_t id = in->output_ids[i];
        if (!VALID(id))
            continue;
        if (!(e = adj_entry(ds, id)))
            return false;
        e->count++;
        if (rep)
            e->flags |= SAMPLE_ADJ_SEEN;
    }
    for (int i = 0; rep && i < in->n_prompt; i++) {
        int32_t id = in->prompt_ids[i];
        if (!VALID(id))
            continue;
        if (!(e = adj_entry(ds, id)))
            return false;
        e->flags |= SAMPLE_ADJ_SEEN;
    }
#undef VALID
    return true;
}

enum vllmc_status device_sampler_add(struct device_sampler *ds, const struct sampler *sm,
                                     const struct sample_input *in, int logits_row,
                                     int n_logprobs, int *row)
{
    VLLMC_ASSERT(ds->n_rows < ds->n_rows_max);
    const struct vllmc_sampling_params *sp = in->sp;
    int first = ds->n_adj;
    bool ok = adj_build(ds, sm, in);
    for (int i = first; i < ds->n_adj; i++)
        ds->slot[ds->adj[i].id] = -1;
    if (!ok) {
        ds->n_adj = first;
        return err_set(&ds->err, VLLMC_ERR_NOMEM, "device sampler: out of memory");
    }
    bool greedy = sp->temperature < SAMPLE_GREEDY_EPS;
    struct sample_row *r = &ds->rows[ds->n_rows];
    *r = (struct sample_row){
        // One uniform draw per sampled token of a random row, as on the host.
        .u = greedy ? 0.0 : rng_uniform(in->rng),
        .logits_row = logits_row,
        .temperature = sp->temperature,
        .top_k = sp->top_k,
        .top_p = sp->top_p,
        .min_p = sp->min_p,
        .repetition_penalty = sp->repetition_penalty,
        .frequency_penalty = sp->frequency_penalty,
        .presence_penalty = sp->presence_penalty,
        .adj_first = first,
        .n_adj = ds->n_adj - first,
        .n_logprobs = n_logprobs,
    };
    ds->any_logprobs |= n_logprobs >= 0;
    *row = ds->n_rows++;
    return VLLMC_OK;
}

enum vllmc_status device_sampler_run(struct device_sampler *ds, void *logits_dev, int n_logits)
{
    enum vllmc_status rc = device_sampler_launch(ds, logits_dev, n_logits);
    if (!rc && backend_sync(ds->be))
        rc = err_set(&ds->err, VLLMC_ERR_BACKEND, "device sampler: %s",
                     backend_err(ds->be)->msg);
    return rc;
}

enum vllmc_status device_sampler_launch(struct device_sampler *ds, void *logits_dev, int n_logits)
{
    struct backend *be = ds->be;
    int n = ds->n_rows;
    if (n == 0)
        return VLLMC_OK;
    if (ds->n_adj > ds->adj_dev_cap) {
        if (ds->adj_dev)
            backend_buffer_free(be, ds->adj_dev);
        ds->adj_dev = NULL;
        ds->adj_dev_cap = 0;
        if (backend_buffer_alloc(be, (size_t)ds->adj_cap * sizeof *ds->adj, &ds->adj_dev))
            return err_set(&ds->err, VLLMC_ERR_NOMEM, "device sampler: %s", backend_err(be)->msg);
        ds->adj_dev_cap = ds->adj_cap;
    }
    enum vllmc_status rc = backend_upload(be, ds->rows_dev, ds->rows, (size_t)n * sizeof *ds->rows);
    if (!rc && ds->n_adj)
        rc = backend_upload(be, ds->adj_dev, ds->adj, (size_t)ds->n_adj * sizeof *ds->adj);
    if (rc)
        return err_set(&ds->err, rc, "device sampler: %s", backend_err(be)->msg);
    enum tensor_location loc = backend_location(be);
    struct tensor ids, logits, rows, adj, lps;
    tensor_init_2d(&ids, DTYPE_I32, ds->ids_dev, n, 1);
    tensor_init_2d(&logits, DTYPE_F32, logits_dev, ds->n_vocab, n_logits);
    tensor_init_2d(&rows, DTYPE_I32, ds->rows_dev, WORDS(struct sample_row), n);
    tensor_init_2d(&adj, DTYPE_I32, ds->adj_dev, WORDS(struct sample_adj), ds->n_adj);
    tensor_init_2d(&lps, DTYPE_I32, ds->lps_dev, WORDS(struct sample_logprob), n);
    ids.location = logits.location = rows.location = adj.location = lps.location = loc;
    struct op_call c = {.op = OP_SAMPLE,
                        .dst = &ids,
                        .src = {&logits, &rows, ds->n_adj ? &adj : NULL,
                                ds->any_logprobs ? &lps : NULL},
                        .backend = be};
    rc = backend_run_op(be, &c);
    if (!rc)
        rc = backend_download_async(be, ds->ids, ds->ids_dev, (size_t)n * sizeof *ds->ids);
    if (!rc && ds->any_logprobs)
        rc = backend_download_async(be, ds->lps, ds->lps_dev, (size_t)n * sizeof *ds->lps);
    if (rc)
        return err_set(&ds->err, rc, "device sampler: %s", backend_err(be)->msg);
    return VLLMC_OK;
}
