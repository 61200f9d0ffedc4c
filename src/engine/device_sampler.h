// Sampling where the logits are: the rows of a step's sampling requests and
// their sparse logit adjustments (logit_bias, min_tokens masks, penalties)
// are built on the host, OP_SAMPLE runs on the backend, and only the sampled
// ids (and requested logprobs) come back. Random rows take their uniform
// draw from the request's own rng, as the host sampler does, so a seeded
// request samples the same way whatever shares its step. Engine thread only.
#ifndef VLLMC_ENGINE_DEVICE_SAMPLER_H
#define VLLMC_ENGINE_DEVICE_SAMPLER_H

#include "backend/backend.h"
#include "backend/sample.h"
#include "engine/sampler.h"

struct device_sampler {
    struct backend *be; // borrowed
    int n_vocab;
    int n_rows_max;
    int n_rows; // rows added since the last clear
    int n_adj;
    int adj_cap;       // host entries
    int adj_dev_cap;   // device entries
    bool any_logprobs; // some row of this step asks for logprobs
    struct sample_row *rows;    // owned [n_rows_max]
    struct sample_adj *adj;     // owned [adj_cap]
    int32_t *slot;              // owned [n_vocab]: adj entry of a token in the row being built, or -1
    int32_t *ids;               // owned, pinned [n_rows_max]: sampled ids after a run
    struct sample_logprob *lps; // owned, pinned [n_rows_max]: logprobs after a run (rows that asked)
    void *rows_dev;             // backend memory, as rows
    void *adj_dev;              // backend memory [adj_dev_cap]
    void *ids_dev;              // backend memory, as ids
    void *lps_dev;              // backend memory, as lps
    struct err err;
};

// *out is NULL (and VLLMC_OK) when the backend has no enabled OP_SAMPLE
// provider: the engine then samples host logits.
enum vllmc_status device_sampler_create(struct backend *be, int n_vocab, int n_rows_max,
                                        struct device_sampler **out, struct err *err);
void device_sampler_free(struct device_sampler *ds); // NULL is a no-op

// True when a request with these parameters can be sampled on the device.
bool device_sampler_covers(const struct vllmc_sampling_params *sp);

void device_sampler_clear(struct device_sampler *ds);

// Adds one row: sample from logits row `logits_row` for in (draws in->rng
// once for a random row); n_logprobs is -1 or the top alternatives wanted.
// sm gives the end ids that min_tokens masks. Returns the row's index.
enum vllmc_status device_sampler_add(struct device_sampler *ds, const struct sampler *sm,
                                     const struct sample_input *in, int logits_row,
                                     int n_logprobs, int *row);

// Queues the sampling of every row added from logits_dev, f32 [n_logits,
// n_vocab] on the backend, and the copy of the results to the host: ids[]
// (and lps[] of rows that asked) are there once work queued after this call
// has completed (an event recorded after it, or backend_sync). The device
// copy of the ids (ids_dev) feeds the next step's input (OP_SELECT_IDS).
enum vllmc_status device_sampler_launch(struct device_sampler *ds, void *logits_dev, int n_logits);
// device_sampler_launch, then waits: ids[] and lps[] are on the host.
enum vllmc_status device_sampler_run(struct device_sampler *ds, void *logits_dev, int n_logits);

#endif
