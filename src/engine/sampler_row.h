// Whole-row kernels of the sampler (vectorized; the same result on every
// path): the largest logit, the greedy argmax and a draw's weights.
#ifndef VLLMC_ENGINE_SAMPLER_ROW_H
#define VLLMC_ENGINE_SAMPLER_ROW_H

#include <stdint.h>

// Tokens per block of a draw's weight sums (a partial sum per block lets the
// inverse-CDF search skip whole blocks).
#define SAMPLER_BLOCK 64

// The largest of x [n] (NaN ignored; -inf when there is nothing else).
float sampler_row_max(const float *x, int n);

// The first index of the largest of x [n]: the greedy token.
int32_t sampler_row_argmax(const float *x, int n);

// w[i] = exp(x[i] * scale - vmax) for i < n, with vmax >= every x[i] * scale
// (0 for -inf); bsum [n / SAMPLER_BLOCK + 1] gets each block's sum, in double.
// Returns the sum of the block sums, in block order.
double sampler_row_weights(const float *x, int n, float scale, float vmax, float *w,
                           double *bsum);

#endif
