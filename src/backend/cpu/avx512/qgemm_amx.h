// The quantized token-lane tile on AMX-INT8 tiles (qgemm_amx.c): the same
// contract and the same bits as the lanes tile of qgemm_avx512.c, for scale
// blocks of 32 values (Q8_0, Q4_0), 32 with a min (Q4_K) and 16 (Q6_K).
// Callers check cpu_features_get()->amx_int8 first.
#ifndef VLLMC_BACKEND_CPU_AVX512_QGEMM_AMX_H
#define VLLMC_BACKEND_CPU_AVX512_QGEMM_AMX_H

#include <stddef.h>
#include <stdint.h>

void qgemm_amx_tile_32(const uint8_t *panel, int64_t k, int n_groups, const uint8_t *const *a,
                       float *out, const uint8_t *pf, size_t pf_bytes);
void qgemm_amx_tile_32_min(const uint8_t *panel, int64_t k, int n_groups, const uint8_t *const *a,
                           float *out, const uint8_t *pf, size_t pf_bytes);
void qgemm_amx_tile_16(const uint8_t *panel, int64_t k, int n_groups, const uint8_t *const *a,
                       float *out, const uint8_t *pf, size_t pf_bytes);
// Q8_0 through qgemm_tile_rows_fn: the A tiles are the packed rows in place.
void qgemm_amx_tile_q8_0_rows(const uint8_t *w0, size_t w_pitch, uint8_t *scratch, int64_t k,
                              int n_groups, const uint8_t *const *a, float *out, const uint8_t *pf,
                              size_t pf_bytes);

#endif
