// `cpu-q-avx2`: quantized-weight matmul with AVX2 int8 dot products
// (vpmaddubsw + vpmaddwd: unsigned weight bytes x signed activation bytes).
// Same activation layout and lane arithmetic as the AVX-512 kernels, in
// 32-weight chunks. Weight bytes stay below 64 so the 16-bit pair sums of
// vpmaddubsw cannot saturate; Q8_0 and the IQ4 types use the sign trick
// instead (|w| x sign(a, w)) with zero point 0.
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/quant/blocks.h"
#include "backend/cpu/quant/qmatmul.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
// The tile loops run over compile-time bounds of at most 4: unrolled fully,
// their accumulators stay in registers.
#define UNROLL _Pragma("GCC unroll 4")

// Bytes ahead of the current chunk to prefetch in each weight row.
#define PREFETCH_BYTES 1024

ALWAYS_INLINE void prefetch_row(const void *p)
{
    _mm_prefetch((const char *)p + PREFETCH_BYTES, _MM_HINT_T0);
}

// ---- activation quantization ----

static void quantize_act(const float *x, int64_t k, int zp, uint8_t *dst)
{
    int8_t *q = (int8_t *)dst;
    float *dax = (float *)(dst + qmm_act_dax_off(k));
    int32_t *corr = (int32_t *)(dst + qmm_act_corr_off(k));
    float *asum = (float *)(dst + qmm_act_asum_off(k));
    float *asum16 = (float *)(dst + qmm_act_asum16_off(k));
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    const __m256i neg_zp = _mm256_set1_epi32(-zp);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t j = 0; j < k / 32; j++) {
        const float *xb = x + 32 * j;
        __m256 v[4], amax = _mm256_setzero_ps();
        UNROLL
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            amax = _mm256_max_ps(amax, _mm256_and_ps(v[i], abs_mask));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float d = _mm_cvtss_f32(m4) / 127.0f;
        const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], id));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], id));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], id));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], id));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        p = _mm256_permutevar8x32_epi32(p, order);
        _mm256_store_si256((__m256i *)(q + 32 * j), p);
        __m256i lane_sums = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, p), ones16);
        _mm256_store_si256((__m256i *)(corr + 8 * j), _mm256_mullo_epi32(lane_sums, neg_zp));
        _mm256_store_ps(dax + 8 * j, _mm256_set1_ps(d));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(lane_sums),
                                   _mm256_extracti128_si256(lane_sums, 1));
        s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
        asum[j] = d * (float)_mm_cvtsi128_si32(s4);
        int32_t ls[8];
        _mm256_storeu_si256((__m256i *)ls, lane_sums);
        asum16[2 * j] = d * (float)(ls[0] + ls[1] + ls[2] + ls[3]);
        asum16[2 * j + 1] = d * (float)(ls[4] + ls[5] + ls[6] + ls[7]);
    }
}

// ---- shared pieces ----

struct act_chunk {
    __m256i q, corr;
    __m256 d;
};

ALWAYS_INLINE struct act_chunk act_load(const uint8_t *a, int64_t k, int64_t j)
{
    struct act_chunk ac;
    ac.q = _mm256_load_si256((const __m256i *)(a + 32 * j));
    ac.d = _mm256_load_ps((const float *)(a + qmm_act_dax_off(k)) + 8 * j);
    ac.corr = _mm256_load_si256((const __m256i *)((const int32_t *)(a + qmm_act_corr_off(k)) + 8 * j));
    return ac;
}

// acc += (d_w * d_a) * (per-lane sum of 4 products + correction).
ALWAYS_INLINE __m256 dot_chunk(__m256 acc, __m256i wq, __m256 wd, struct act_chunk ac)
{
    __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(wq, ac.q), _mm256_set1_epi16(1));
    s = _mm256_add_epi32(s, ac.corr);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(wd, ac.d), acc);
}

// Signed weights: |w| x sign(a, w) keeps vpmaddubsw's first operand unsigned.
ALWAYS_INLINE __m256 dot_chunk_signed(__m256 acc, __m256i wq, __m256 wd, struct act_chunk ac)
{
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(ac.q, wq));
    __m256i s = _mm256_add_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)), ac.corr);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(wd, ac.d), acc);
}

ALWAYS_INLINE float fp16(uint16_t h)
{
    return _cvtsh_ss(h);
}

ALWAYS_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#define TILE_STORE(acc, R, C, out)                                                                 \
    for (int r = 0; r < (R); r++)                                                                  \
        for (int c = 0; c < (C); c++)                                                              \
            (out)[r * QMM_TILE + c] = hsum8((acc)[r][c]);


#define TILE_ZERO(acc, R, C)                                                                       \
    for (int r = 0; r < (R); r++)                                                                  \
        for (int c = 0; c < (C); c++)                                                              \
            (acc)[r][c] = _mm256_setzero_ps();

// ---- Q4_0 (zp 8) ----

ALWAYS_INLINE void q4_0_tile(const int R, const int C, const uint8_t *const *w,
                             const uint8_t *const *a, int64_t k, float *out)
{
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m256 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t j = 0; j < k / 32; j++) {
        __m256i wq[4];
        __m256 wd[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            const struct block_q4_0 *b = (const struct block_q4_0 *)w[r] + j;
            prefetch_row(b);
            __m128i x = _mm_loadu_si128((const __m128i *)b->qs);
            wq[r] = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
            wd[r] = _mm256_set1_ps(fp16(b->d));
        }
        UNROLL
        for (int c = 0; c < C; c++) {
            struct act_chunk ac = act_load(a[c], k, j);
            UNROLL
            for (int r = 0; r < R; r++)
                acc[r][c] = dot_chunk(acc[r][c], wq[r], wd[r], ac);
        }
    }
    TILE_STORE(acc, R, C, out)
}

static void q4_0_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                          int64_t k, float *out)
{
    QMM_TILE_DISPATCH(q4_0_tile, R, C, w, a, k, out)
}

// ---- Q8_0 (signed weights, zp 0) ----

ALWAYS_INLINE void q8_0_tile(const int R, const int C, const uint8_t *const *w,
                             const uint8_t *const *a, int64_t k, float *out)
{
    __m256 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t j = 0; j < k / 32; j++) {
        __m256i wq[4];
        __m256 wd[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            const struct block_q8_0 *b = (const struct block_q8_0 *)w[r] + j;
            prefetch_row(b);
            wq[r] = _mm256_loadu_si256((const __m256i *)b->qs);
            wd[r] = _mm256_set1_ps(fp16(b->d));
        }
        UNROLL
        for (int c = 0; c < C; c++) {
            struct act_chunk ac = act_load(a[c], k, j);
            UNROLL
            for (int r = 0; r < R; r++)
                acc[r][c] = dot_chunk_signed(acc[r][c], wq[r], wd[r], ac);
        }
    }
    TILE_STORE(acc, R, C, out)
}

static void q8_0_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                          int64_t k, float *out)
{
    QMM_TILE_DISPATCH(q8_0_tile, R, C, w, a, k, out)
}

// ---- Q4_K (zp 0, mins per super-block) ----

ALWAYS_INLINE void q4k_scales(const struct block_q4_k *b, float *sc, __m256 *mn)
{
    uint32_t u[3];
    memcpy(u, b->scales, 12);
    uint32_t s[2] = {u[0] & 0x3f3f3f3fu, (u[2] & 0x0f0f0f0fu) | ((u[0] >> 6) & 0x03030303u) << 4};
    uint32_t m[2] = {u[1] & 0x3f3f3f3fu,
                     ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 6) & 0x03030303u) << 4};
    __m256 sv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)s[1], (int)s[0])));
    __m256 mv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)m[1], (int)m[0])));
    _mm256_storeu_ps(sc, _mm256_mul_ps(sv, _mm256_set1_ps(fp16(b->d))));
    *mn = _mm256_mul_ps(mv, _mm256_set1_ps(-fp16(b->dmin)));
}

ALWAYS_INLINE void q4_k_tile(const int R, const int C, const uint8_t *const *w,
                             const uint8_t *const *a, int64_t k, float *out)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t s = 0; s < k / QK_K; s++) {
        float sc[4][8];
        __m256 mn[4];
        UNROLL
        for (int r = 0; r < R; r++)
            q4k_scales((const struct block_q4_k *)w[r] + s, sc[r], &mn[r]);
        UNROLL
        for (int sub = 0; sub < 8; sub++) {
            __m256i wq[4];
            __m256 wd[4];
            UNROLL
            for (int r = 0; r < R; r++) {
                const struct block_q4_k *b = (const struct block_q4_k *)w[r] + s;
                prefetch_row(b->qs + 16 * sub);
                __m256i x = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (sub / 2)));
                wq[r] = _mm256_and_si256(sub % 2 ? _mm256_srli_epi16(x, 4) : x, m4);
                wd[r] = _mm256_set1_ps(sc[r][sub]);
            }
            UNROLL
            for (int c = 0; c < C; c++) {
                struct act_chunk ac = act_load(a[c], k, 8 * s + sub);
                UNROLL
                for (int r = 0; r < R; r++)
                    acc[r][c] = dot_chunk(acc[r][c], wq[r], wd[r], ac);
            }
        }
        UNROLL
        for (int c = 0; c < C; c++) {
            __m256 as = _mm256_loadu_ps((const float *)(a[c] + qmm_act_asum_off(k)) + 8 * s);
            UNROLL
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm256_fmadd_ps(mn[r], as, acc[r][c]);
        }
    }
    TILE_STORE(acc, R, C, out)
}

static void q4_k_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                          int64_t k, float *out)
{
    QMM_TILE_DISPATCH(q4_k_tile, R, C, w, a, k, out)
}

// ---- Q6_K (zp 32) ----

ALWAYS_INLINE void q6_k_tile(const int R, const int C, const uint8_t *const *w,
                             const uint8_t *const *a, int64_t k, float *out)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    __m256 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t s = 0; s < k / QK_K; s++) {
        UNROLL
        for (int g8 = 0; g8 < 8; g8++) {
            // Weights 128h + 32g + l: nibble g / 2 of ql[64h + 32 (g % 2) + l],
            // bits 2g of qh[32h + l]; sub-blocks 8h + 2g (l < 16) and + 1.
            const int h = g8 / 4, g = g8 % 4;
            __m256i wq[4];
            __m256 wd[4];
            UNROLL
            for (int r = 0; r < R; r++) {
                const struct block_q6_k *b = (const struct block_q6_k *)w[r] + s;
                prefetch_row(b->ql + 32 * g8);
                __m256i lo = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (g % 2)));
                lo = _mm256_and_si256(_mm256_srli_epi16(lo, 4 * (g / 2)), m4);
                __m256i hi = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
                hi = _mm256_and_si256(_mm256_srli_epi16(hi, 2 * g), m2);
                wq[r] = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
                const float d = fp16(b->d);
                const int sub = 8 * h + 2 * g;
                wd[r] = _mm256_set_m128(_mm_set1_ps(d * (float)b->scales[sub + 1]),
                                        _mm_set1_ps(d * (float)b->scales[sub]));
            }
            UNROLL
            for (int c = 0; c < C; c++) {
                struct act_chunk ac = act_load(a[c], k, 8 * s + g8);
                UNROLL
                for (int r = 0; r < R; r++)
                    acc[r][c] = dot_chunk(acc[r][c], wq[r], wd[r], ac);
            }
        }
    }
    TILE_STORE(acc, R, C, out)
}

static void q6_k_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                          int64_t k, float *out)
{
    QMM_TILE_DISPATCH(q6_k_tile, R, C, w, a, k, out)
}

// ---- Q5_0 (zp 16), Q4_1 and Q5_1 (zp 0, min per block) ----

// 0x10 in byte w where bit w of the 32-bit word qh is set.
ALWAYS_INLINE __m256i q5_bit4(const uint8_t *qh)
{
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                            0x0303030303030303);
    __m256i x = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), shuf);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    x = _mm256_cmpeq_epi8(_mm256_and_si256(x, bits), bits);
    return _mm256_and_si256(x, _mm256_set1_epi8(0x10));
}

ALWAYS_INLINE __m256i nibbles_32(const uint8_t *qs)
{
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m128i x = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
}

ALWAYS_INLINE void q5_0_tile(const int R, const int C, const uint8_t *const *w,
                             const uint8_t *const *a, int64_t k, float *out)
{
    __m256 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t j = 0; j < k / 32; j++) {
        __m256i wq[4];
        __m256 wd[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            const struct block_q5_0 *b = (const struct block_q5_0 *)w[r] + j;
            prefetch_row(b);
            wq[r] = _mm256_or_si256(nibbles_32(b->qs), q5_bit4(b->qh));
            wd[r] = _mm256_set1_ps(fp16(b->d));
        }
        UNROLL
        for (int c = 0; c < C; c++) {
            struct act_chunk ac = act_load(a[c], k, j);
            UNROLL
            for (int r = 0; r < R; r++)
                acc[r][c] = dot_chunk(acc[r][c], wq[r], wd[r], ac);
        }
    }
    TILE_STORE(acc, R, C, out)
}

static void q5_0_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                          int64_t k, float *out)
{
    QMM_TILE_DISPATCH(q5_0_tile, R, C, w, a, k, out)
}

// Lane 0: m (the rest 0); times the block's d * sum(q) of the activations.
ALWAYS_INLINE __m256 lane0(float v)
{
    return _mm256_blend_ps(_mm256_setzero_ps(), _mm256_set1_ps(v), 1);
}

ALWAYS_INLINE void q_1_tile(const int bits, const int R, const int C, const uint8_t *const *w,
                            const uint8_t *const *a, int64_t k, float *out)
{
    __m256 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t j = 0; j < k / 32; j++) {
        __m256i wq[4];
        __m256 wd[4], wm[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            if (bits == 4) {
                const struct block_q4_1 *b = (const struct block_q4_1 *)w[r] + j;
                prefetch_row(b);
                wq[r] = nibbles_32(b->qs);
                wd[r] = _mm256_set1_ps(fp16(b->d));
                wm[r] = lane0(fp16(b->m));
            } else {
                const struct block_q5_1 *b = (const struct block_q5_1 *)w[r] + j;
                prefetch_row(b);
                wq[r] = _mm256_or_si256(nibbles_32(b->qs), q5_bit4(b->qh));
                wd[r] = _mm256_set1_ps(fp16(b->d));
                wm[r] = lane0(fp16(b->m));
            }
        }
        UNROLL
        for (int c = 0; c < C; c++) {
            struct act_chunk ac = act_load(a[c], k, j);
            __m256 as = _mm256_set1_ps(((const float *)(a[c] + qmm_act_asum_off(k)))[j]);
            UNROLL
            for (int r = 0; r < R; r++) {
                acc[r][c] = dot_chunk(acc[r][c], wq[r], wd[r], ac);
                acc[r][c] = _mm256_fmadd_ps(wm[r], as, acc[r][c]);
            }
        }
    }
    TILE_STORE(acc, R, C, out)
}

ALWAYS_INLINE void q4_1_tile(const int R, const int C, const uint8_t *const *w,
                             const uint8_t *const *a, int64_t k, float *out)
{
    q_1_tile(4, R, C, w, a, k, out);
}

ALWAYS_INLINE void q5_1_tile(const int R, const int C, const uint8_t *const *w,
                             const uint8_t *const *a, int64_t k, float *out)
{
    q_1_tile(5, R, C, w, a, k, out);
}

static void q4_1_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                          int64_t k, float *out)
{
    QMM_TILE_DISPATCH(q4_1_tile, R, C, w, a, k, out)
}

static void q5_1_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                          int64_t k, float *out)
{
    QMM_TILE_DISPATCH(q5_1_tile, R, C, w, a, k, out)
}

// ---- IQ4_NL and IQ4_XS: signed table values, sign trick (zp 0) ----

ALWAYS_INLINE __m256i iq4_lookup(const uint8_t *qs)
{
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4nl_values));
    return _mm256_shuffle_epi8(table, nibbles_32(qs));
}

ALWAYS_INLINE void iq4_nl_tile(const int R, const int C, const uint8_t *const *w,
                               const uint8_t *const *a, int64_t k, float *out)
{
    __m256 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t j = 0; j < k / 32; j++) {
        __m256i wq[4];
        __m256 wd[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            const struct block_iq4_nl *b = (const struct block_iq4_nl *)w[r] + j;
            prefetch_row(b);
            wq[r] = iq4_lookup(b->qs);
            wd[r] = _mm256_set1_ps(fp16(b->d));
        }
        UNROLL
        for (int c = 0; c < C; c++) {
            struct act_chunk ac = act_load(a[c], k, j);
            UNROLL
            for (int r = 0; r < R; r++)
                acc[r][c] = dot_chunk_signed(acc[r][c], wq[r], wd[r], ac);
        }
    }
    TILE_STORE(acc, R, C, out)
}

static void iq4_nl_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                            int64_t k, float *out)
{
    QMM_TILE_DISPATCH(iq4_nl_tile, R, C, w, a, k, out)
}

ALWAYS_INLINE void iq4_xs_tile(const int R, const int C, const uint8_t *const *w,
                               const uint8_t *const *a, int64_t k, float *out)
{
    __m256 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t s = 0; s < k / QK_K; s++) {
        UNROLL
        for (int ib = 0; ib < 8; ib++) {
            __m256i wq[4];
            __m256 wd[4];
            UNROLL
            for (int r = 0; r < R; r++) {
                const struct block_iq4_xs *b = (const struct block_iq4_xs *)w[r] + s;
                prefetch_row(b->qs + 16 * ib);
                int ls = ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                         (((b->scales_h >> (2 * ib)) & 3) << 4);
                wq[r] = iq4_lookup(b->qs + 16 * ib);
                wd[r] = _mm256_set1_ps(fp16(b->d) * (float)(ls - 32));
            }
            UNROLL
            for (int c = 0; c < C; c++) {
                struct act_chunk ac = act_load(a[c], k, 8 * s + ib);
                UNROLL
                for (int r = 0; r < R; r++)
                    acc[r][c] = dot_chunk_signed(acc[r][c], wq[r], wd[r], ac);
            }
        }
    }
    TILE_STORE(acc, R, C, out)
}

static void iq4_xs_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                            int64_t k, float *out)
{
    QMM_TILE_DISPATCH(iq4_xs_tile, R, C, w, a, k, out)
}

// ---- Q5_K: Q4_K plus bit `sub` of qh[l] ----

ALWAYS_INLINE void q5_k_tile(const int R, const int C, const uint8_t *const *w,
                             const uint8_t *const *a, int64_t k, float *out)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t s = 0; s < k / QK_K; s++) {
        float sc[4][8];
        __m256 mn[4];
        UNROLL
        for (int r = 0; r < R; r++)
            q4k_scales((const struct block_q4_k *)((const struct block_q5_k *)w[r] + s), sc[r],
                       &mn[r]);
        UNROLL
        for (int sub = 0; sub < 8; sub++) {
            __m256i wq[4];
            __m256 wd[4];
            UNROLL
            for (int r = 0; r < R; r++) {
                const struct block_q5_k *b = (const struct block_q5_k *)w[r] + s;
                prefetch_row(b->qs + 16 * sub);
                __m256i x = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (sub / 2)));
                x = _mm256_and_si256(sub % 2 ? _mm256_srli_epi16(x, 4) : x, m4);
                __m256i h = _mm256_loadu_si256((const __m256i *)b->qh);
                h = _mm256_and_si256(_mm256_srli_epi16(h, sub), one);
                wq[r] = _mm256_or_si256(x, _mm256_slli_epi16(h, 4));
                wd[r] = _mm256_set1_ps(sc[r][sub]);
            }
            UNROLL
            for (int c = 0; c < C; c++) {
                struct act_chunk ac = act_load(a[c], k, 8 * s + sub);
                UNROLL
                for (int r = 0; r < R; r++)
                    acc[r][c] = dot_chunk(acc[r][c], wq[r], wd[r], ac);
            }
        }
        UNROLL
        for (int c = 0; c < C; c++) {
            __m256 as = _mm256_loadu_ps((const float *)(a[c] + qmm_act_asum_off(k)) + 8 * s);
            UNROLL
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm256_fmadd_ps(mn[r], as, acc[r][c]);
        }
    }
    TILE_STORE(acc, R, C, out)
}

static void q5_k_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                          int64_t k, float *out)
{
    QMM_TILE_DISPATCH(q5_k_tile, R, C, w, a, k, out)
}

// ---- Q3_K (zp 4) and Q2_K (zp 0, mins): chunk g8 = 4h + j holds weights
// 128h + 32j + l, bits 2j of qs[32h + l]; sub-blocks 8h + 2j (l < 16) and + 1 ----

ALWAYS_INLINE __m256 two_sub_scales(float lo, float hi)
{
    return _mm256_set_m128(_mm_set1_ps(hi), _mm_set1_ps(lo));
}

ALWAYS_INLINE void q3_k_tile(const int R, const int C, const uint8_t *const *w,
                             const uint8_t *const *a, int64_t k, float *out)
{
    const __m256i m2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t s = 0; s < k / QK_K; s++) {
        float sc[4][16];
        UNROLL
        for (int r = 0; r < R; r++) {
            const struct block_q3_k *b = (const struct block_q3_k *)w[r] + s;
            const float d = fp16(b->d);
            for (int i = 0; i < 16; i++) {
                int lo = i < 8 ? b->scales[i] & 0xF : b->scales[i - 8] >> 4;
                int hi = (b->scales[8 + i % 4] >> (2 * (i / 4))) & 3;
                sc[r][i] = d * (float)((lo | hi << 4) - 32);
            }
        }
        UNROLL
        for (int g8 = 0; g8 < 8; g8++) {
            const int h = g8 / 4, j = g8 % 4;
            __m256i wq[4];
            __m256 wd[4];
            UNROLL
            for (int r = 0; r < R; r++) {
                const struct block_q3_k *b = (const struct block_q3_k *)w[r] + s;
                prefetch_row(b->qs + 8 * g8);
                __m256i lo = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
                lo = _mm256_and_si256(_mm256_srli_epi16(lo, 2 * j), m2);
                __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
                hm = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), one);
                wq[r] = _mm256_or_si256(lo, _mm256_slli_epi16(hm, 2));
                wd[r] = two_sub_scales(sc[r][8 * h + 2 * j], sc[r][8 * h + 2 * j + 1]);
            }
            UNROLL
            for (int c = 0; c < C; c++) {
                struct act_chunk ac = act_load(a[c], k, 8 * s + g8);
                UNROLL
                for (int r = 0; r < R; r++)
                    acc[r][c] = dot_chunk(acc[r][c], wq[r], wd[r], ac);
            }
        }
    }
    TILE_STORE(acc, R, C, out)
}

static void q3_k_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                          int64_t k, float *out)
{
    QMM_TILE_DISPATCH(q3_k_tile, R, C, w, a, k, out)
}

ALWAYS_INLINE void q2_k_tile(const int R, const int C, const uint8_t *const *w,
                             const uint8_t *const *a, int64_t k, float *out)
{
    const __m256i m2 = _mm256_set1_epi8(3);
    __m256 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t s = 0; s < k / QK_K; s++) {
        float sc[4][16];
        __m256 mn[4][2];
        UNROLL
        for (int r = 0; r < R; r++) {
            const struct block_q2_k *b = (const struct block_q2_k *)w[r] + s;
            const float d = fp16(b->d), dmin = fp16(b->dmin);
            float m[16];
            for (int i = 0; i < 16; i++) {
                sc[r][i] = d * (float)(b->scales[i] & 0xF);
                m[i] = -dmin * (float)(b->scales[i] >> 4);
            }
            mn[r][0] = _mm256_loadu_ps(m);
            mn[r][1] = _mm256_loadu_ps(m + 8);
        }
        UNROLL
        for (int g8 = 0; g8 < 8; g8++) {
            const int h = g8 / 4, j = g8 % 4;
            __m256i wq[4];
            __m256 wd[4];
            UNROLL
            for (int r = 0; r < R; r++) {
                const struct block_q2_k *b = (const struct block_q2_k *)w[r] + s;
                prefetch_row(b->qs + 8 * g8);
                __m256i lo = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
                wq[r] = _mm256_and_si256(_mm256_srli_epi16(lo, 2 * j), m2);
                wd[r] = two_sub_scales(sc[r][8 * h + 2 * j], sc[r][8 * h + 2 * j + 1]);
            }
            UNROLL
            for (int c = 0; c < C; c++) {
                struct act_chunk ac = act_load(a[c], k, 8 * s + g8);
                UNROLL
                for (int r = 0; r < R; r++)
                    acc[r][c] = dot_chunk(acc[r][c], wq[r], wd[r], ac);
            }
        }
        UNROLL
        for (int c = 0; c < C; c++) {
            const float *as16 = (const float *)(a[c] + qmm_act_asum16_off(k)) + 16 * s;
            __m256 as0 = _mm256_loadu_ps(as16), as1 = _mm256_loadu_ps(as16 + 8);
            UNROLL
            for (int r = 0; r < R; r++) {
                acc[r][c] = _mm256_fmadd_ps(mn[r][0], as0, acc[r][c]);
                acc[r][c] = _mm256_fmadd_ps(mn[r][1], as1, acc[r][c]);
            }
        }
    }
    TILE_STORE(acc, R, C, out)
}

static void q2_k_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                          int64_t k, float *out)
{
    QMM_TILE_DISPATCH(q2_k_tile, R, C, w, a, k, out)
}

// ---- the provider ----

static const struct qmm_type_kernel avx2_kernels[] = {
    {DTYPE_Q4_0, 8, 64, q4_0_tile_any},
    {DTYPE_Q8_0, 0, 64, q8_0_tile_any},
    {DTYPE_Q4_K, 0, QK_K, q4_k_tile_any},
    {DTYPE_Q6_K, 32, QK_K, q6_k_tile_any},
    {DTYPE_Q5_0, 16, 64, q5_0_tile_any},
    {DTYPE_Q4_1, 0, 64, q4_1_tile_any},
    {DTYPE_Q5_1, 0, 64, q5_1_tile_any},
    {DTYPE_IQ4_NL, 0, 64, iq4_nl_tile_any},
    {DTYPE_IQ4_XS, 0, QK_K, iq4_xs_tile_any},
    {DTYPE_Q5_K, 0, QK_K, q5_k_tile_any},
    {DTYPE_Q3_K, 4, QK_K, q3_k_tile_any},
    {DTYPE_Q2_K, 0, QK_K, q2_k_tile_any},
};

const struct qmm_isa qmm_isa_avx2 = {
    .name = "cpu-q-avx2",
    .quantize = quantize_act,
    .kernels = avx2_kernels,
    .n_kernels = (int)(sizeof avx2_kernels / sizeof avx2_kernels[0]),
};

static bool q_avx2_supports(const struct op_call *c)
{
    return qmm_supports(&qmm_isa_avx2, c);
}

static enum vllmc_status q_avx2_run(const struct op_call *c)
{
    return qmm_run(&qmm_isa_avx2, c);
}

const struct op_provider cpu_q_avx2_matmul = {
    .name = "cpu-q-avx2",
    .op = OP_MATMUL,
    .priority = 60,
    .supports = q_avx2_supports,
    .run = q_avx2_run,
};
