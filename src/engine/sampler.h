// Sampler with vLLM V1's parameters and order. Per row: logit_bias, then
// min_tokens (stop ids masked), then repetition, frequency and presence
// penalties; greedy rows take the argmax there (lowest id on ties); random
// rows divide by the temperature, apply min_p, top_k, top_p and draw one
// token with the row's own generator. Logprobs are of the raw logits, before
// any of this, as vLLM reports by default. Engine thread only.
#ifndef VLLMC_ENGINE_SAMPLER_H
#define VLLMC_ENGINE_SAMPLER_H

#include <stdint.h>

#include "engine/rng.h"
#include "engine/sampler_row.h"
#include "vllmc.h"

// Temperatures below this are greedy (vLLM's _SAMPLING_EPS).
#define SAMPLER_GREEDY_EPS 1e-5f

struct sampler_cand {
    float logit; // after temperature
    int32_t id;
};

struct sampler {
    int n_vocab;
    int32_t eos_id;         // -1 when the model has none
    int32_t *extra_eos_ids; // owned [n_extra_eos]: more end ids (generation config)
    int n_extra_eos;
    float *logits;             // owned scratch [n_vocab]: the processed row
    struct sampler_cand *cand; // owned scratch [n_vocab]: tokens still in the running
    float *tmp;                // owned scratch [n_vocab]
    double *block_sum;         // owned scratch [n_vocab / SAMPLER_BLOCK + 1]: weight sums
    int32_t *counts;           // owned scratch [n_vocab]: output token counts, zero between rows
    uint8_t *seen;             // owned scratch [n_vocab]: in prompt or output, zero between rows
};

// One row to sample: the request's sampling params and tokens so far.
struct sample_input {
    const struct vllmc_sampling_params *sp; // borrowed
    const int32_t *prompt_ids;              // borrowed [n_prompt]
    int n_prompt;
    const int32_t *output_ids; // borrowed [n_output]
    int n_output;
    struct rng *rng; // borrowed; advanced once by a random draw
};

// eos_id may be -1; extra_eos_ids (copied) are more ids that end generation.
enum vllmc_status sampler_create(int n_vocab, int32_t eos_id, const int32_t *extra_eos_ids,
                                 int n_extra_eos, struct sampler **out);
void sampler_free(struct sampler *sm); // NULL is a no-op

// Samples one token from a row of raw logits [n_vocab] (left untouched).
int32_t sampler_sample(struct sampler *sm, const struct sample_input *in, const float *logits);

// Applies logit_bias, min_tokens and the penalties to logits [n_vocab] in place.
void sampler_apply_processors(struct sampler *sm, const struct sample_input *in, float *logits);

// Turns processed logits [n_vocab] into the distribution a random row draws
// from (temperature, min_p, top_k, top_p; masked entries 0), written to
// probs [n_vocab]. For tests and tools; sampling itself does not call it.
void sampler_distribution(struct sampler *sm, const struct vllmc_sampling_params *sp,
                          const float *logits, double *probs);

// Log-softmax of raw logits [n_vocab] for token: its logprob and rank (1 = most
// likely; tokens with an equal logit share the worse rank, as in vLLM), and
// the k most likely tokens written to top [k], most likely first (ties: lower
// id first). out->top points at top.
void sampler_logprobs(const float *logits, int n_vocab, int32_t token, int k,
                      struct vllmc_logprob *out, struct vllmc_top_logprob *top);

// True for the ids that end a sequence for this request (EOS unless
// ignore_eos, extra end ids unless ignore_eos, stop_token_ids).
bool sampler_is_stop_token(const struct sampler *sm, const struct vllmc_sampling_params *sp,
                           int32_t token);

#endif
