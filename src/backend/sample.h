// The records of an OP_SAMPLE call (see op.h): what each row asks for, the
// sparse per-token logit adjustments computed on the host (logit_bias,
// min_tokens masks, penalties) and the logprobs a row may get back. A device
// provider samples where the logits are, so only ids (and logprobs) move.
#ifndef VLLMC_BACKEND_SAMPLE_H
#define VLLMC_BACKEND_SAMPLE_H

#include <stdint.h>

// Temperatures below this are greedy (vLLM's _SAMPLING_EPS).
#define SAMPLE_GREEDY_EPS 1e-5f
// Most top alternatives a row may ask for (vLLM's default max_logprobs).
#define SAMPLE_MAX_LOGPROBS 20

// One row to sample. Passed as i32 words: sizeof is a multiple of 8.
struct sample_row {
    double u;                 // random rows: the uniform draw in [0, 1) of the request's rng
    int32_t logits_row;       // row of the logits to sample (distinct rows per call)
    float temperature;        // < SAMPLE_GREEDY_EPS: greedy (argmax, lowest id on ties)
    int32_t top_k;            // <= 0: off
    float top_p;              // >= 1: off
    float min_p;              // <= 0: off
    float repetition_penalty; // applied to entries flagged SAMPLE_ADJ_SEEN
    float frequency_penalty;  // times an entry's count
    float presence_penalty;   // for entries with count > 0
    int32_t adj_first;        // this row's adjustments: [adj_first, adj_first + n_adj)
    int32_t n_adj;
    int32_t n_logprobs;       // -1: none; else 0..SAMPLE_MAX_LOGPROBS top alternatives
    int32_t reserved;
};

enum {
    SAMPLE_ADJ_MASK = 1, // -inf after the bias (min_tokens masks the stop ids)
    SAMPLE_ADJ_SEEN = 2, // in the prompt or output: repetition penalty applies
};

// One token's adjustment, at most one per (row, id). In vLLM's order:
// l += bias; masked -> -inf; seen -> repetition penalty; l -= frequency *
// count; l -= presence * (count > 0).
struct sample_adj {
    int32_t id;
    float bias;
    int32_t count; // occurrences in the output
    uint32_t flags;
    float saved;   // the provider's: the logit it replaced, put back before returning
};

// Logprobs of the raw logits (before any adjustment), as vLLM reports them.
struct sample_logprob {
    float logprob;  // of the sampled token
    int32_t rank;   // 1 = most likely; ties share the worse rank
    int32_t n_top;
    int32_t reserved;
    int32_t top_id[SAMPLE_MAX_LOGPROBS];      // most likely first, ties by lower id
    float top_logprob[SAMPLE_MAX_LOGPROBS];
};

#endif
