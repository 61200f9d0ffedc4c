// Reference dequantization of the GGUF quantized types to float32: plain C,
// the same float operations in the same order as the GGUF project's own
// reference, so results are bit-exact (see tests/golden/test_quant_blocks.c).
#ifndef VLLMC_BACKEND_CPU_QUANT_DEQUANT_H
#define VLLMC_BACKEND_CPU_QUANT_DEQUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"

// dst [n] = the n weights packed in src (n a multiple of the type's block size).
typedef void (*quant_dequant_fn)(const void *src, float *dst, int64_t n);

// The dequantizer of a quantized type, or NULL for types without one.
quant_dequant_fn quant_dequant_row_fn(enum dtype t);

void dequant_row_q4_0(const void *src, float *dst, int64_t n);
void dequant_row_q4_1(const void *src, float *dst, int64_t n);
void dequant_row_q5_0(const void *src, float *dst, int64_t n);
void dequant_row_q5_1(const void *src, float *dst, int64_t n);
void dequant_row_q8_0(const void *src, float *dst, int64_t n);
void dequant_row_q2_k(const void *src, float *dst, int64_t n);
void dequant_row_q3_k(const void *src, float *dst, int64_t n);
void dequant_row_q4_k(const void *src, float *dst, int64_t n);
void dequant_row_q5_k(const void *src, float *dst, int64_t n);
void dequant_row_q6_k(const void *src, float *dst, int64_t n);
void dequant_row_iq4_nl(const void *src, float *dst, int64_t n);
void dequant_row_iq4_xs(const void *src, float *dst, int64_t n);
void dequant_row_int4g(const void *src, float *dst, int64_t n);

#endif
