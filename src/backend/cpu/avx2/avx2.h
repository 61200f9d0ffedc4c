// AVX2 + FMA + F16C providers (compiled with those flags, listed only when the
// CPU has them) and the 8-lane helpers they share.
#ifndef VLLMC_BACKEND_CPU_AVX2_AVX2_H
#define VLLMC_BACKEND_CPU_AVX2_AVX2_H

#include "backend/op.h"

#define CPU_AVX2_PRIORITY 50

extern const struct op_provider cpu_avx2_matmul;
extern const struct op_provider cpu_avx2_rmsnorm;
extern const struct op_provider cpu_avx2_add_rmsnorm;
extern const struct op_provider cpu_avx2_silu_mul;
extern const struct op_provider cpu_avx2_rope;
extern const struct op_provider cpu_avx2_qk_norm_rope;
extern const struct op_provider cpu_avx2_qkv_rope_store;
extern const struct op_provider cpu_avx2_kv_store;
extern const struct op_provider cpu_avx2_attention;

#ifdef __AVX2__
#include <immintrin.h>
#include <string.h>

#include "core/dtype.h"

// Sum of the 8 lanes in a fixed order.
static inline float avx2_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// 8 values of dtype DTYPE_F32 (0), DTYPE_F16 (1) or DTYPE_BF16 (30) as f32.
static inline __attribute__((always_inline)) __m256 avx2_load8(int dtype, const void *p)
{
    if (dtype == 1)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    if (dtype == 30)
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    return _mm256_loadu_ps((const float *)p);
}

// dst[0 .. n) = src[0 .. n) stored as dtype (f32, f16 or bf16), 8 values at
// a time, the bits cpu_store writes value by value: round to nearest even
// (vcvtps2ph; bf16: the carry added to the low half), a NaN kept quiet with
// its sign and no payload (f16: 0x7e00) or its top half | 0x40 (bf16). A
// kv_store into an f16 cache spent ~1.4% of a 16-sequence decode step of
// the 0.6B shape in f32_to_fp16 value by value.
static inline void avx2_store_row(int dtype, void *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    if (dtype == DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    for (; dtype == DTYPE_F16 && i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(src + i);
        __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q), sign = _mm256_set1_ps(-0.0f);
        __m256 qnan = _mm256_or_ps(_mm256_and_ps(x, sign), _mm256_set1_ps(__builtin_nanf("")));
        x = _mm256_blendv_ps(x, qnan, nan); // payload bits dropped, as f32_to_fp16 does
        _mm_storeu_si128((__m128i *)((uint16_t *)dst + i),
                         _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; dtype == DTYPE_BF16 && i + 8 <= n; i += 8) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_srli_epi32(
            _mm256_add_epi32(x, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
        __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
        r = _mm256_blendv_epi8(r, quiet, nan);
        // 16-bit halves of lanes 0-3 and 4-7 of each 128-bit lane, then the
        // two 64-bit results together.
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)((uint16_t *)dst + i), _mm256_castsi256_si128(packed));
    }
    for (; i < n; i++)
        ((uint16_t *)dst)[i] = dtype == DTYPE_F16 ? f32_to_fp16(src[i]) : f32_to_bf16(src[i]);
}

// e^x for 8 lanes: Cody-Waite range reduction and a degree-5 polynomial
// (Cephes expf), relative error about 2e-7; x is clamped to [-88.37, 88.37].
static inline __m256 avx2_exp(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f)),
                      _mm256_set1_ps(88.3762626647949f));
    __m256 fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f));
    fx = _mm256_floor_ps(fx);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i n =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(n));
}

// Runs fn over n_rows rows on the pool when the work is large enough to pay
// for waking threads, inline otherwise. Each row is computed by one thread
// with the same code either way.
void avx2_parallel_rows(const struct op_call *c, int64_t n_rows, int64_t row_elems,
                        void (*fn)(const struct op_call *c, int64_t row0, int64_t row1));
#endif

#endif
