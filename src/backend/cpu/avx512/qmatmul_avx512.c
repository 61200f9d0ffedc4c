// `cpu-q-avx512`: quantized-weight matmul with AVX-512 VNNI int8 dot products
// (vpdpbusd: unsigned weight bytes x signed activation bytes, 64 per
// instruction). Each kernel unpacks a 64-weight chunk of up to four weight
// rows once and reuses it for up to four tokens. Q4_0, Q8_0 and Q4_K run on
// the token-quad kernels (qmatmul_quad_avx512.c). Listed only on CPUs with
// AVX-512 F/BW/VL/VNNI (cpu_backend.c), where cpu-q-gemm-avx512 (priority 75)
// takes Q4_0, Q8_0, Q4_K and Q6_K first.
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/avx512/kquant_avx512.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/quant/blocks.h"
#include "backend/cpu/quant/qmatmul.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
// The tile loops run over compile-time bounds of at most 4: unrolled fully,
// their accumulators stay in registers.
#define UNROLL _Pragma("GCC unroll 4")

// Bytes ahead of the current chunk to prefetch in each weight row: the rows
// of a tile are separate short streams the hardware prefetcher picks up late.
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
    const __m512i ones = _mm512_set1_epi8(1);
    const __m512i neg_zp = _mm512_set1_epi32(-zp);
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int64_t j = 0; j < k / 64; j++) {
        __m512i q32[2];
        float d[2];
        UNROLL
        for (int b = 0; b < 2; b++) {
            const float *xb = x + 64 * j + 32 * b;
            __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
            __m512 amax = _mm512_max_ps(_mm512_and_ps(v0, abs_mask), _mm512_and_ps(v1, abs_mask));
            d[b] = _mm512_reduce_max_ps(amax) / 127.0f;
            const float id = d[b] != 0.0f ? 1.0f / d[b] : 0.0f;
            __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
            __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
            __m128i b0 = _mm512_cvtsepi32_epi8(i0), b1 = _mm512_cvtsepi32_epi8(i1);
            q32[b] = _mm512_castsi256_si512(_mm256_set_m128i(b1, b0));
        }
        __m512i qv = _mm512_inserti64x4(q32[0], _mm512_castsi512_si256(q32[1]), 1);
        _mm512_store_si512(q + 64 * j, qv);
        __m512i lane_sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, qv);
        _mm512_store_si512(corr + 16 * j, _mm512_mullo_epi32(lane_sums, neg_zp));
        __m512 dv = _mm512_mask_mov_ps(_mm512_set1_ps(d[0]), 0xFF00, _mm512_set1_ps(d[1]));
        _mm512_store_ps(dax + 16 * j, dv);
        int32_t ls[16];
        _mm512_storeu_si512(ls, lane_sums);
        for (int g = 0; g < 4; g++)
            asum16[4 * j + g] = d[g / 2] * (float)(ls[4 * g] + ls[4 * g + 1] + ls[4 * g + 2] +
                                                   ls[4 * g + 3]);
        asum[2 * j] = d[0] * (float)(ls[0] + ls[1] + ls[2] + ls[3] + ls[4] + ls[5] + ls[6] + ls[7]);
        asum[2 * j + 1] =
            d[1] * (float)(ls[8] + ls[9] + ls[10] + ls[11] + ls[12] + ls[13] + ls[14] + ls[15]);
    }
}

// ---- shared pieces of the tile kernels ----

// Activation chunk j of one token: bytes, per-lane d and zero-point correction.
struct act_chunk {
    __m512i q, corr;
    __m512 d;
};

ALWAYS_INLINE struct act_chunk act_load(const uint8_t *a, int64_t k, int64_t j)
{
    struct act_chunk ac;
    ac.q = _mm512_load_si512(a + 64 * j);
    ac.d = _mm512_load_ps((const float *)(a + qmm_act_dax_off(k)) + 16 * j);
    ac.corr = _mm512_load_si512((const int32_t *)(a + qmm_act_corr_off(k)) + 16 * j);
    return ac;
}

// acc += (d_w * d_a) * (sum over each lane's 4 products - zp * sum of the 4 q_a).
ALWAYS_INLINE __m512 dot_chunk(__m512 acc, __m512i wq, __m512 wd, struct act_chunk ac)
{
    __m512i s = _mm512_dpbusd_epi32(ac.corr, wq, ac.q);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wd, ac.d), acc);
}

// [a x 8 lanes, b x 8 lanes]
ALWAYS_INLINE __m512 two_scales(float a, float b)
{
    return _mm512_mask_mov_ps(_mm512_set1_ps(a), 0xFF00, _mm512_set1_ps(b));
}

#define TILE_ZERO(acc, R, C)                                                                       \
    for (int r = 0; r < (R); r++)                                                                  \
        for (int c = 0; c < (C); c++)                                                              \
            (acc)[r][c] = _mm512_setzero_ps();

// Writes the R x C tile sums in fixed lane order.
#define TILE_STORE(acc, R, C, out)                                                                 \
    for (int r = 0; r < (R); r++)                                                                  \
        for (int c = 0; c < (C); c++)                                                              \
            (out)[r * QMM_TILE + c] = _mm512_reduce_add_ps((acc)[r][c]);


// ---- Q6_K: super-blocks of 256, 16 sub-blocks of 16; zp 32 ----

ALWAYS_INLINE void q6_k_tile(const int R, const int C, const uint8_t *const *w,
                             const uint8_t *const *a, int64_t k, float *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x03);
    // Lane i of a chunk covers weights 4i..4i+3, in sub-block i / 4.
    const __m512i expand4 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512 acc[4][4];
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm512_setzero_ps();
    for (int64_t s = 0; s < k / QK_K; s++) {
        UNROLL
        for (int p = 0; p < 4; p++) {
            const int h = p / 2, gg = p % 2;
            // Low nibbles: byte l of ql[64h..] holds weight 64gg + l (and
            // 64gg + 32 + l - 32 for l >= 32) in nibble gg. High 2 bits: bits
            // 4gg (first 32 weights) and 4gg + 2 (last 32) of qh[32h + l].
            const __m512i lo_shift = _mm512_set1_epi16((short)(4 * gg));
            const __m512i hi_shift = _mm512_mask_mov_epi32(_mm512_set1_epi16((short)(4 * gg)),
                                                           0xFF00,
                                                           _mm512_set1_epi16((short)(4 * gg + 2)));
            __m512i wq[4];
            __m512 wd[4];
            UNROLL
            for (int r = 0; r < R; r++) {
                const struct block_q6_k *b = (const struct block_q6_k *)w[r] + s;
                prefetch_row(b->ql + 64 * p);
                __m512i lo = _mm512_loadu_si512(b->ql + 64 * h);
                lo = _mm512_and_si512(_mm512_srlv_epi16(lo, lo_shift), m4);
                __m512i hi = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
                hi = _mm512_and_si512(_mm512_srlv_epi16(hi, hi_shift), m2);
                wq[r] = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
                int32_t sc4;
                memcpy(&sc4, b->scales + 8 * h + 4 * gg, 4);
                __m128 scf = _mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(sc4)));
                scf = _mm_mul_ps(scf, _mm_set1_ps(fp16(b->d)));
                wd[r] = _mm512_permutexvar_ps(expand4, _mm512_castps128_ps512(scf));
            }
            UNROLL
            for (int c = 0; c < C; c++) {
                struct act_chunk ac = act_load(a[c], k, 4 * s + p);
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

// ---- Q5_0 (zp 16) and Q5_1 (zp 0, min): Q4_0's nibbles plus bit w of qh ----

// The 64 fifth bits of blocks b[0], b[1] as a byte mask over the chunk.
ALWAYS_INLINE __mmask64 q5_high_bits(const uint8_t *qh0, const uint8_t *qh1)
{
    uint32_t h0, h1;
    memcpy(&h0, qh0, 4);
    memcpy(&h1, qh1, 4);
    return (__mmask64)h0 | (__mmask64)h1 << 32;
}

ALWAYS_INLINE __m512i nibbles_2x16(const uint8_t *qs0, const uint8_t *qs1, __m512i hi_shift)
{
    __m512i x = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)qs0));
    x = _mm512_mask_broadcast_i32x4(x, 0xFF00, _mm_loadu_si128((const __m128i *)qs1));
    return _mm512_and_si512(_mm512_srlv_epi16(x, hi_shift), _mm512_set1_epi8(0x0F));
}

// Lanes 0 and 8 of a chunk's min term: m of block 0 and block 1 (zero elsewhere),
// and the matching activation sums d * sum(q) of the two 32-blocks.
ALWAYS_INLINE __m512 two_mins(float m0, float m1)
{
    return _mm512_maskz_mov_ps(0x0101, two_scales(m0, m1));
}

ALWAYS_INLINE __m512 asum_pair(const uint8_t *a, int64_t k, int64_t j)
{
    return _mm512_maskz_expandloadu_ps(0x0101, (const float *)(a + qmm_act_asum_off(k)) + 2 * j);
}

#define Q4_0_HI_SHIFT                                                                              \
    _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0, 0x0004000400040004,            \
                     0x0004000400040004, 0, 0)

ALWAYS_INLINE void q5_0_tile(const int R, const int C, const uint8_t *const *w,
                             const uint8_t *const *a, int64_t k, float *out)
{
    const __m512i hi_shift = Q4_0_HI_SHIFT, bit4 = _mm512_set1_epi8(0x10);
    __m512 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t j = 0; j < k / 64; j++) {
        __m512i wq[4];
        __m512 wd[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            const struct block_q5_0 *b = (const struct block_q5_0 *)w[r] + 2 * j;
            prefetch_row(b);
            __m512i q = nibbles_2x16(b[0].qs, b[1].qs, hi_shift);
            wq[r] = _mm512_mask_blend_epi8(q5_high_bits(b[0].qh, b[1].qh), q,
                                           _mm512_or_si512(q, bit4));
            wd[r] = two_scales(fp16(b[0].d), fp16(b[1].d));
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

// Q4_1 (bits 4) and Q5_1 (bits 5): w = d * q + m.
ALWAYS_INLINE void q_1_tile(const int bits, const int R, const int C, const uint8_t *const *w,
                            const uint8_t *const *a, int64_t k, float *out)
{
    const __m512i hi_shift = Q4_0_HI_SHIFT, bit4 = _mm512_set1_epi8(0x10);
    __m512 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t j = 0; j < k / 64; j++) {
        __m512i wq[4];
        __m512 wd[4], wm[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            uint16_t d0, d1, m0, m1;
            if (bits == 4) {
                const struct block_q4_1 *b = (const struct block_q4_1 *)w[r] + 2 * j;
                prefetch_row(b);
                wq[r] = nibbles_2x16(b[0].qs, b[1].qs, hi_shift);
                d0 = b[0].d, d1 = b[1].d, m0 = b[0].m, m1 = b[1].m;
            } else {
                const struct block_q5_1 *b = (const struct block_q5_1 *)w[r] + 2 * j;
                prefetch_row(b);
                __m512i q = nibbles_2x16(b[0].qs, b[1].qs, hi_shift);
                wq[r] = _mm512_mask_blend_epi8(q5_high_bits(b[0].qh, b[1].qh), q,
                                               _mm512_or_si512(q, bit4));
                d0 = b[0].d, d1 = b[1].d, m0 = b[0].m, m1 = b[1].m;
            }
            wd[r] = two_scales(fp16(d0), fp16(d1));
            wm[r] = two_mins(fp16(m0), fp16(m1));
        }
        UNROLL
        for (int c = 0; c < C; c++) {
            struct act_chunk ac = act_load(a[c], k, j);
            __m512 as = asum_pair(a[c], k, j);
            UNROLL
            for (int r = 0; r < R; r++) {
                acc[r][c] = dot_chunk(acc[r][c], wq[r], wd[r], ac);
                acc[r][c] = _mm512_fmadd_ps(wm[r], as, acc[r][c]);
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

// ---- IQ4_NL and IQ4_XS: nibbles index the 16-level table, + 128 (zp 128) ----

ALWAYS_INLINE __m512i iq4_table(void)
{
    __m128i t = _mm_loadu_si128((const __m128i *)iq4nl_values);
    return _mm512_broadcast_i32x4(_mm_xor_si128(t, _mm_set1_epi8((char)0x80)));
}

ALWAYS_INLINE void iq4_nl_tile(const int R, const int C, const uint8_t *const *w,
                               const uint8_t *const *a, int64_t k, float *out)
{
    const __m512i hi_shift = Q4_0_HI_SHIFT, table = iq4_table();
    __m512 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t j = 0; j < k / 64; j++) {
        __m512i wq[4];
        __m512 wd[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            const struct block_iq4_nl *b = (const struct block_iq4_nl *)w[r] + 2 * j;
            prefetch_row(b);
            wq[r] = _mm512_shuffle_epi8(table, nibbles_2x16(b[0].qs, b[1].qs, hi_shift));
            wd[r] = two_scales(fp16(b[0].d), fp16(b[1].d));
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

static void iq4_nl_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                            int64_t k, float *out)
{
    QMM_TILE_DISPATCH(iq4_nl_tile, R, C, w, a, k, out)
}

ALWAYS_INLINE void iq4_xs_tile(const int R, const int C, const uint8_t *const *w,
                               const uint8_t *const *a, int64_t k, float *out)
{
    const __m512i hi_shift = Q4_0_HI_SHIFT, table = iq4_table();
    __m512 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t s = 0; s < k / QK_K; s++) {
        float sc[4][8];
        UNROLL
        for (int r = 0; r < R; r++) {
            const struct block_iq4_xs *b = (const struct block_iq4_xs *)w[r] + s;
            const float d = fp16(b->d);
            for (int ib = 0; ib < 8; ib++) {
                int ls = ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                         (((b->scales_h >> (2 * ib)) & 3) << 4);
                sc[r][ib] = d * (float)(ls - 32);
            }
        }
        UNROLL
        for (int p = 0; p < 4; p++) {
            __m512i wq[4];
            __m512 wd[4];
            UNROLL
            for (int r = 0; r < R; r++) {
                const struct block_iq4_xs *b = (const struct block_iq4_xs *)w[r] + s;
                prefetch_row(b->qs + 32 * p);
                const uint8_t *q = b->qs + 32 * p;
                wq[r] = _mm512_shuffle_epi8(table, nibbles_2x16(q, q + 16, hi_shift));
                wd[r] = two_scales(sc[r][2 * p], sc[r][2 * p + 1]);
            }
            UNROLL
            for (int c = 0; c < C; c++) {
                struct act_chunk ac = act_load(a[c], k, 4 * s + p);
                UNROLL
                for (int r = 0; r < R; r++)
                    acc[r][c] = dot_chunk(acc[r][c], wq[r], wd[r], ac);
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

// ---- Q5_K: Q4_K plus bit (2p + hi) of qh[l] ----

ALWAYS_INLINE void q5_k_tile(const int R, const int C, const uint8_t *const *w,
                             const uint8_t *const *a, int64_t k, float *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    const __m512i hi_shift = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004,
                                              0x0004000400040004, 0x0004000400040004, 0, 0, 0, 0);
    __m512 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t s = 0; s < k / QK_K; s++) {
        __m256 sc[4], mn[4];
        UNROLL
        for (int r = 0; r < R; r++)
            q4k_scales((const struct block_q4_k *)((const struct block_q5_k *)w[r] + s), &sc[r],
                       &mn[r]);
        UNROLL
        for (int p = 0; p < 4; p++) {
            const __m512i idx = _mm512_mask_mov_epi32(_mm512_set1_epi32(2 * p), 0xFF00,
                                                      _mm512_set1_epi32(2 * p + 1));
            const __m512i qh_shift = _mm512_mask_mov_epi32(_mm512_set1_epi16((short)(2 * p)),
                                                           0xFF00,
                                                           _mm512_set1_epi16((short)(2 * p + 1)));
            __m512i wq[4];
            __m512 wd[4];
            UNROLL
            for (int r = 0; r < R; r++) {
                const struct block_q5_k *b = (const struct block_q5_k *)w[r] + s;
                prefetch_row(b->qs + 32 * p);
                __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * p)));
                __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->qh));
                h = _mm512_and_si512(_mm512_srlv_epi16(h, qh_shift), one);
                wq[r] = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi16(x, hi_shift), m4),
                                        _mm512_slli_epi16(h, 4));
                wd[r] = _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(sc[r]));
            }
            UNROLL
            for (int c = 0; c < C; c++) {
                struct act_chunk ac = act_load(a[c], k, 4 * s + p);
                UNROLL
                for (int r = 0; r < R; r++)
                    acc[r][c] = dot_chunk(acc[r][c], wq[r], wd[r], ac);
            }
        }
        UNROLL
        for (int c = 0; c < C; c++) {
            const float *asum = (const float *)(a[c] + qmm_act_asum_off(k)) + 8 * s;
            __m512 as = _mm512_zextps256_ps512(_mm256_loadu_ps(asum));
            UNROLL
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm512_fmadd_ps(_mm512_zextps256_ps512(mn[r]), as, acc[r][c]);
        }
    }
    TILE_STORE(acc, R, C, out)
}

static void q5_k_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                          int64_t k, float *out)
{
    QMM_TILE_DISPATCH(q5_k_tile, R, C, w, a, k, out)
}

// ---- Q3_K (zp 4) and Q2_K (zp 0, mins): 2-bit fields of qs, sub-blocks of 16 ----

// Chunk p covers weights 64p..64p+63 = 128h + 32j + l for h = p / 2 and
// j = 2 (p % 2) + (l >= 32): bits 2j of qs[32h + l % 32]; sub-blocks 4p..4p+3.
ALWAYS_INLINE __m512i two_bit_fields(const uint8_t *qs32, int p)
{
    const int j0 = 2 * (p % 2);
    const __m512i sh = _mm512_mask_mov_epi32(_mm512_set1_epi16((short)(2 * j0)), 0xFF00,
                                             _mm512_set1_epi16((short)(2 * j0 + 2)));
    __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qs32));
    return _mm512_and_si512(_mm512_srlv_epi16(x, sh), _mm512_set1_epi8(3));
}

// [v[4p] x 4 lanes, v[4p+1] x 4, v[4p+2] x 4, v[4p+3] x 4]
ALWAYS_INLINE __m512 four_scales(__m512 v16, int p)
{
    const __m512i idx = _mm512_add_epi32(
        _mm512_set1_epi32(4 * p), _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0));
    return _mm512_permutexvar_ps(idx, v16);
}

ALWAYS_INLINE void q3_k_tile(const int R, const int C, const uint8_t *const *w,
                             const uint8_t *const *a, int64_t k, float *out)
{
    __m512 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t s = 0; s < k / QK_K; s++) {
        __m512 sc16[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            const struct block_q3_k *b = (const struct block_q3_k *)w[r] + s;
            int8_t sc[16];
            for (int i = 0; i < 16; i++) {
                int lo = i < 8 ? b->scales[i] & 0xF : b->scales[i - 8] >> 4;
                int hi = (b->scales[8 + i % 4] >> (2 * (i / 4))) & 3;
                sc[i] = (int8_t)((lo | hi << 4) - 32);
            }
            __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)sc)));
            sc16[r] = _mm512_mul_ps(v, _mm512_set1_ps(fp16(b->d)));
        }
        UNROLL
        for (int p = 0; p < 4; p++) {
            const int h = p / 2, j0 = 2 * (p % 2);
            const __m512i hsh = _mm512_mask_mov_epi32(_mm512_set1_epi16((short)(4 * h + j0)),
                                                      0xFF00,
                                                      _mm512_set1_epi16((short)(4 * h + j0 + 1)));
            __m512i wq[4];
            __m512 wd[4];
            UNROLL
            for (int r = 0; r < R; r++) {
                const struct block_q3_k *b = (const struct block_q3_k *)w[r] + s;
                prefetch_row(b->qs + 16 * p);
                __m512i lo = two_bit_fields(b->qs + 32 * h, p);
                __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->hmask));
                hm = _mm512_and_si512(_mm512_srlv_epi16(hm, hsh), _mm512_set1_epi8(1));
                wq[r] = _mm512_or_si512(lo, _mm512_slli_epi16(hm, 2));
                wd[r] = four_scales(sc16[r], p);
            }
            UNROLL
            for (int c = 0; c < C; c++) {
                struct act_chunk ac = act_load(a[c], k, 4 * s + p);
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
    __m512 acc[4][4];
    TILE_ZERO(acc, R, C)
    for (int64_t s = 0; s < k / QK_K; s++) {
        __m512 sc16[4], mn16[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            const struct block_q2_k *b = (const struct block_q2_k *)w[r] + s;
            __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)b->scales));
            sc16[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15))),
                                    _mm512_set1_ps(fp16(b->d)));
            mn16[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)),
                                    _mm512_set1_ps(-fp16(b->dmin)));
        }
        UNROLL
        for (int p = 0; p < 4; p++) {
            __m512i wq[4];
            __m512 wd[4];
            UNROLL
            for (int r = 0; r < R; r++) {
                const struct block_q2_k *b = (const struct block_q2_k *)w[r] + s;
                prefetch_row(b->qs + 16 * p);
                wq[r] = two_bit_fields(b->qs + 32 * (p / 2), p);
                wd[r] = four_scales(sc16[r], p);
            }
            UNROLL
            for (int c = 0; c < C; c++) {
                struct act_chunk ac = act_load(a[c], k, 4 * s + p);
                UNROLL
                for (int r = 0; r < R; r++)
                    acc[r][c] = dot_chunk(acc[r][c], wq[r], wd[r], ac);
            }
        }
        UNROLL
        for (int c = 0; c < C; c++) {
            __m512 as = _mm512_loadu_ps((const float *)(a[c] + qmm_act_asum16_off(k)) + 16 * s);
            UNROLL
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm512_fmadd_ps(mn16[r], as, acc[r][c]);
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

static const struct qmm_type_kernel avx512_kernels[] = {
    {DTYPE_Q6_K, 32, QK_K, q6_k_tile_any},
    {DTYPE_Q5_0, 16, 64, q5_0_tile_any},
    {DTYPE_Q4_1, 0, 64, q4_1_tile_any},
    {DTYPE_Q5_1, 0, 64, q5_1_tile_any},
    {DTYPE_IQ4_NL, 128, 64, iq4_nl_tile_any},
    {DTYPE_IQ4_XS, 128, QK_K, iq4_xs_tile_any},
    {DTYPE_Q5_K, 0, QK_K, q5_k_tile_any},
    {DTYPE_Q3_K, 4, QK_K, q3_k_tile_any},
    {DTYPE_Q2_K, 0, QK_K, q2_k_tile_any},
};

const struct qmm_isa qmm_isa_avx512 = {
    .name = "cpu-q-avx512",
    .quantize = quantize_act,
    .kernels = avx512_kernels,
    .n_kernels = (int)(sizeof avx512_kernels / sizeof avx512_kernels[0]),
    .quad = &qmm_quad_isa_avx512,
};

static bool q_avx512_supports(const struct op_call *c)
{
    return qmm_supports(&qmm_isa_avx512, c);
}

static enum vllmc_status q_avx512_run(const struct op_call *c)
{
    return qmm_run(&qmm_isa_avx512, c);
}

const struct op_provider cpu_q_avx512_matmul = {
    .name = "cpu-q-avx512",
    .op = OP_MATMUL,
    .priority = 70,
    .supports = q_avx512_supports,
    .run = q_avx512_run,
};
