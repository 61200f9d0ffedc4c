// Scale decoding shared by the AVX-512 quantized-matmul kernels.
#ifndef VLLMC_BACKEND_CPU_AVX512_KQUANT_AVX512_H
#define VLLMC_BACKEND_CPU_AVX512_KQUANT_AVX512_H

#include <immintrin.h>
#include <string.h>

#include "backend/cpu/quant/blocks.h"

static inline float fp16(uint16_t h)
{
    return _cvtsh_ss(h);
}

// d * scale of the 8 sub-blocks and -dmin * min, from the 12 packed bytes.
static inline void q4k_scales(const struct block_q4_k *b, __m256 *sc, __m256 *mn)
{
    uint32_t u[3];
    memcpy(u, b->scales, 12);
    uint32_t sc03 = u[0] & 0x3f3f3f3fu, mn03 = u[1] & 0x3f3f3f3fu;
    uint32_t sc47 = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 6) & 0x03030303u) << 4;
    uint32_t mn47 = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 6) & 0x03030303u) << 4;
    __m256 s = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)sc47, (int)sc03)));
    __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)mn47, (int)mn03)));
    *sc = _mm256_mul_ps(s, _mm256_set1_ps(fp16(b->d)));
    *mn = _mm256_mul_ps(m, _mm256_set1_ps(-fp16(b->dmin)));
}

#endif
