// Quantization of float32 rows into GGUF block types (for `vllmc quantize`
// and tests) and of activation rows into the 8-bit blocks the fast dot
// products read. Pure math on rows; no allocation.
#ifndef VLLMC_BACKEND_CPU_QUANT_QUANTIZE_H
#define VLLMC_BACKEND_CPU_QUANT_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/cpu/quant/blocks.h"
#include "core/dtype.h"

// dst = the n values of src packed as type t; n a multiple of its block size.
typedef void (*quant_quantize_fn)(const float *src, void *dst, int64_t n);

// The weight quantizer of t, or NULL when this build cannot write t.
// The legacy types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) give the same bytes as the
// GGUF project's reference quantizer; the k-quants and IQ4 types fit their
// scales by a weighted least-squares search of our own.
quant_quantize_fn quant_quantize_row_fn(enum dtype t);

void quantize_row_q4_0(const float *src, void *dst, int64_t n);
void quantize_row_q4_1(const float *src, void *dst, int64_t n);
void quantize_row_q5_0(const float *src, void *dst, int64_t n);
void quantize_row_q5_1(const float *src, void *dst, int64_t n);
void quantize_row_q8_0(const float *src, void *dst, int64_t n);
void quantize_row_q2_k(const float *src, void *dst, int64_t n);
void quantize_row_q3_k(const float *src, void *dst, int64_t n);
void quantize_row_q4_k(const float *src, void *dst, int64_t n);
void quantize_row_q5_k(const float *src, void *dst, int64_t n);
void quantize_row_q6_k(const float *src, void *dst, int64_t n);
void quantize_row_iq4_nl(const float *src, void *dst, int64_t n);
void quantize_row_iq4_xs(const float *src, void *dst, int64_t n);
// Asymmetric 4-bit per 32-block (min/max), for tests and op parity of the
// AWQ/GPTQ kernels; real INT4 weights come from the checkpoints.
void quantize_row_int4g(const float *src, void *dst, int64_t n);

// ---- activations ----
// Symmetric 8-bit: d = max|x| / 127, q = round(x / d). The rounding error of
// each value is at most d / 2 = max|x| / 254 of its block.

// dst [n / 32] from src [n]; n a multiple of 32.
void quantize_act_a8_32(const float *src, struct block_a8_32 *dst, int64_t n);
// dst [n / 256] from src [n]; n a multiple of 256.
void quantize_act_a8_k(const float *src, struct block_a8_k *dst, int64_t n);

#endif
