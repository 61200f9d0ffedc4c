// Token-quad kernels of `cpu-q-avx512` for Q4_0, Q8_0 and Q4_K (layout in
// qmatmul.h): 16 weight bytes broadcast to the four 128-bit lanes meet 16
// activations of 4 tokens in one vpdpbusd, so a weight block is unpacked once
// for every token of the tile and each float scale step covers 4 tokens.
// Every kernel has a decode twin (one token, 4 weight rows in the lanes) that
// runs the same per-lane arithmetic, so results never depend on the batch.
// cpu-q-gemm-avx512 (qgemm_avx512.c, priority 75) takes these types first;
// these kernels serve when it is disabled.
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/avx512/kquant_avx512.h"
#include "backend/cpu/quant/blocks.h"
#include "backend/cpu/quant/qmatmul.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")

// Bytes ahead to prefetch in each weight row: the rows of a tile are separate
// streams the hardware prefetcher picks up late.
#define PREFETCH_BYTES 1024

ALWAYS_INLINE void prefetch_row(const void *p)
{
    _mm_prefetch((const char *)p + PREFETCH_BYTES, _MM_HINT_T0);
}

// Decode: the weight rows of the next tiles, read in step with the current
// one (len bytes at pf + off per step): one sequential stream ahead of the
// four row streams, which the hardware prefetcher alone picks up late.
ALWAYS_INLINE void prefetch_span(const uint8_t *pf, size_t off, size_t len)
{
    for (size_t o = 0; o < len; o += 64)
        _mm_prefetch((const char *)pf + off + o, _MM_HINT_T0);
}

// The same into L2 only: Q8_0 rows, at twice the bytes, would crowd L1.
ALWAYS_INLINE void prefetch_span_l2(const uint8_t *pf, size_t off, size_t len)
{
    for (size_t o = 0; o < len; o += 64)
        _mm_prefetch((const char *)pf + off + o, _MM_HINT_T1);
}

// Section pointers of one quad.
struct quad {
    const uint8_t *q;      // [k / 16][4][16] int8
    const int32_t *corr32; // [k / 32][4][4]
    const float *d;        // [k / 32][4][4]
    const float *asum;     // [k / 256][2][4][4]
};

ALWAYS_INLINE struct quad quad_at(const uint8_t *a, int64_t k)
{
    struct quad s = {
        .q = a,
        .corr32 = (const int32_t *)(a + qmm_quad_corr32_off(k)),
        .d = (const float *)(a + qmm_quad_d_off(k)),
        .asum = (const float *)(a + qmm_quad_asum_off(k)),
    };
    return s;
}

// Sums the 4 lanes of each 128-bit lane as (l0 + l2) + (l1 + l3) into its lane
// 0 and stores those 4 sums: the one reduction every kernel ends with.
ALWAYS_INLINE void reduce4_store(__m512 v, float *out)
{
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
    __m128 r = _mm512_castps512_ps128(_mm512_permutexvar_ps(
        _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), v));
    _mm_storeu_ps(out, r);
}

// 16 bytes at p in all four 128-bit lanes.
ALWAYS_INLINE __m512i bcast16(const void *p)
{
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p));
}

ALWAYS_INLINE __m512 bcast16f(const float *p)
{
    return _mm512_broadcast_f32x4(_mm_loadu_ps(p));
}

// 16 bytes from each of p0..p3, one per 128-bit lane.
ALWAYS_INLINE __m512i gather4x16(const void *p0, const void *p1, const void *p2, const void *p3)
{
    __m512i x = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p0));
    x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)p1), 1);
    x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)p2), 2);
    return _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)p3), 3);
}

// The first 16 of the 32 bytes at each of p0..p3 in *lo, the second 16 in
// *hi, one row per 128-bit lane: two 32-byte loads per vector, one shuffle.
ALWAYS_INLINE void gather4x32(const void *p0, const void *p1, const void *p2, const void *p3,
                              __m512i *lo, __m512i *hi)
{
    __m512i x01 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                                     _mm256_loadu_si256((const __m256i *)p1), 1);
    __m512i x23 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p2)),
                                     _mm256_loadu_si256((const __m256i *)p3), 1);
    *lo = _mm512_shuffle_i64x2(x01, x23, 0x88);
    *hi = _mm512_shuffle_i64x2(x01, x23, 0xDD);
}

// [f0 x 4, f1 x 4, f2 x 4, f3 x 4]
ALWAYS_INLINE __m512 spread4(__m128 f)
{
    const __m512i idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

// The four half floats as [h0 x 4, h1 x 4, h2 x 4, h3 x 4].
ALWAYS_INLINE __m512 spread4_fp16(uint16_t h0, uint16_t h1, uint16_t h2, uint16_t h3)
{
    __m128i h = _mm_setr_epi16((short)h0, (short)h1, (short)h2, (short)h3, 0, 0, 0, 0);
    return spread4(_mm_cvtph_ps(h));
}

// Tile shapes: 4 weight rows x G quads (G <= QMM_QUAD_G), G a compile-time constant.
#define QUAD_DISPATCH(f, G, w, a, k, out)                                                          \
    switch (G) {                                                                                   \
    case 1: f(1, w, a, k, out); break;                                                             \
    case 2: f(2, w, a, k, out); break;                                                             \
    default: f(3, w, a, k, out); break;                                                            \
    }

_Static_assert(QMM_QUAD_G == 3, "QUAD_DISPATCH covers 1..3 quads");

#define ACC_ZERO(acc, G)                                                                           \
    UNROLL for (int r = 0; r < 4; r++) UNROLL for (int g = 0; g < (G); g++) (acc)[r][g] =         \
        _mm512_setzero_ps();

#define ACC_STORE(acc, G, out)                                                                     \
    UNROLL for (int r = 0; r < 4; r++) UNROLL for (int g = 0; g < (G); g++)                       \
        reduce4_store((acc)[r][g], (out) + r * 4 * QMM_QUAD_G + 4 * g);

// ---- Q4_0 and Q8_0: block b is 16-groups 2b, 2b+1; zero points 8 and 128 ----

// The two 16-groups of block j of a Q4_0 row as unsigned bytes, broadcast.
ALWAYS_INLINE void q4_0_unpack(const struct block_q4_0 *b, __m512i *lo, __m512i *hi)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i x = bcast16(b->qs);
    *lo = _mm512_and_si512(x, m4);
    *hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
}

ALWAYS_INLINE void q8_0_unpack(const struct block_q8_0 *b, __m512i *lo, __m512i *hi)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    *lo = _mm512_xor_si512(bcast16(b->qs), flip);
    *hi = _mm512_xor_si512(bcast16(b->qs + 16), flip);
}

// acc += float(corr + w_lo . a_lo + w_hi . a_hi) * (wd * ad), lane by lane.
ALWAYS_INLINE __m512 block_step(__m512 acc, __m512i corr, __m512i lo, __m512i hi, __m512i a_lo,
                                __m512i a_hi, __m512 wd, __m512 ad)
{
    __m512i s = _mm512_dpbusd_epi32(corr, lo, a_lo);
    s = _mm512_dpbusd_epi32(s, hi, a_hi);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wd, ad), acc);
}

#define LEGACY_TILE(NAME, BLOCK, UNPACK, PF)                                                         \
    ALWAYS_INLINE void NAME##_quad(const int G, const uint8_t *const *w, const uint8_t *const *a,  \
                                   int64_t k, float *out)                                          \
    {                                                                                              \
        __m512 acc[4][QMM_QUAD_G];                                                                 \
        ACC_ZERO(acc, G)                                                                           \
        struct quad qa[QMM_QUAD_G];                                                                \
        UNROLL for (int g = 0; g < G; g++) qa[g] = quad_at(a[g], k);                               \
        for (int64_t j = 0; j < k / 32; j++) {                                                     \
            __m512i lo[4], hi[4];                                                                  \
            __m512 wd[4];                                                                          \
            UNROLL for (int r = 0; r < 4; r++)                                                     \
            {                                                                                      \
                const struct BLOCK *b = (const struct BLOCK *)w[r] + j;                            \
                prefetch_row(b);                                                                   \
                UNPACK(b, &lo[r], &hi[r]);                                                         \
                wd[r] = _mm512_cvtph_ps(_mm256_set1_epi16((short)b->d));                           \
            }                                                                                      \
            UNROLL for (int g = 0; g < G; g++)                                                     \
            {                                                                                      \
                __m512i corr = _mm512_load_si512(qa[g].corr32 + 16 * j);                           \
                __m512i a_lo = _mm512_load_si512(qa[g].q + 128 * j);                               \
                __m512i a_hi = _mm512_load_si512(qa[g].q + 128 * j + 64);                          \
                __m512 ad = _mm512_load_ps(qa[g].d + 16 * j);                                      \
                UNROLL for (int r = 0; r < 4; r++) acc[r][g] =                                     \
                    block_step(acc[r][g], corr, lo[r], hi[r], a_lo, a_hi, wd[r], ad);              \
            }                                                                                      \
        }                                                                                          \
        ACC_STORE(acc, G, out)                                                                     \
    }                                                                                              \
                                                                                                   \
    static void NAME##_quad_any(int G, const uint8_t *const *w, const uint8_t *const *a,          \
                                int64_t k, float *out)                                             \
    {                                                                                              \
        QUAD_DISPATCH(NAME##_quad, G, w, a, k, out)                                                \
    }                                                                                              \
                                                                                                   \
    /* Decode twin: rows in the lanes, the token's 16 bytes broadcast. */                          \
    static void NAME##_gemv(const uint8_t *const *w, const uint8_t *a, int64_t k,                  \
                            const uint8_t *pf, float *out)                                         \
    {                                                                                              \
        const struct BLOCK *b0 = (const struct BLOCK *)w[0], *b1 = (const struct BLOCK *)w[1];     \
        const struct BLOCK *b2 = (const struct BLOCK *)w[2], *b3 = (const struct BLOCK *)w[3];     \
        const struct quad qa = quad_at(a, k);                                                      \
        __m512 acc = _mm512_setzero_ps();                                                          \
        for (int64_t j = 0; j < k / 32; j++) {                                                     \
            PF(pf, (size_t)j * 4 * sizeof(struct BLOCK), 4 * sizeof(struct BLOCK));                \
            __m512i lo, hi;                                                                        \
            NAME##_unpack4(b0 + j, b1 + j, b2 + j, b3 + j, &lo, &hi);                              \
            __m512 wd = spread4_fp16(b0[j].d, b1[j].d, b2[j].d, b3[j].d);                          \
            acc = block_step(acc, bcast16(qa.corr32 + 16 * j), lo, hi, bcast16(qa.q + 128 * j),    \
                             bcast16(qa.q + 128 * j + 64), wd, _mm512_set1_ps(qa.d[16 * j]));      \
        }                                                                                          \
        reduce4_store(acc, out);                                                                   \
    }

ALWAYS_INLINE void q4_0_unpack4(const struct block_q4_0 *b0, const struct block_q4_0 *b1,
                                const struct block_q4_0 *b2, const struct block_q4_0 *b3,
                                __m512i *lo, __m512i *hi)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i x = gather4x16(b0->qs, b1->qs, b2->qs, b3->qs);
    *lo = _mm512_and_si512(x, m4);
    *hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
}

ALWAYS_INLINE void q8_0_unpack4(const struct block_q8_0 *b0, const struct block_q8_0 *b1,
                                const struct block_q8_0 *b2, const struct block_q8_0 *b3,
                                __m512i *lo, __m512i *hi)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    gather4x32(b0->qs, b1->qs, b2->qs, b3->qs, lo, hi);
    *lo = _mm512_xor_si512(*lo, flip);
    *hi = _mm512_xor_si512(*hi, flip);
}

LEGACY_TILE(q4_0, block_q4_0, q4_0_unpack, prefetch_span)
LEGACY_TILE(q8_0, block_q8_0, q8_0_unpack, prefetch_span_l2)

// ---- Q4_K: sub-block 2p + hi of a super-block is block 8s + 2p + hi ----
// Chunk p: 16-groups 4p, 4p + 1 are the low nibbles of qs[32p..], qs[32p + 16..],
// groups 4p + 2, 4p + 3 their high nibbles. The mins add per super-block.

// acc += float(w_0 . a_0 + w_1 . a_1) * (wd * ad), lane by lane (zero point 0).
ALWAYS_INLINE __m512 sub_step(__m512 acc, __m512i w0, __m512i w1, __m512i a0, __m512i a1,
                              __m512 wd, __m512 ad)
{
    __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w0, a0);
    s = _mm512_dpbusd_epi32(s, w1, a1);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wd, ad), acc);
}

ALWAYS_INLINE void q4_k_quad(const int G, const uint8_t *const *w, const uint8_t *const *a,
                             int64_t k, float *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[4][QMM_QUAD_G];
    ACC_ZERO(acc, G)
    struct quad qa[QMM_QUAD_G];
    UNROLL
    for (int g = 0; g < G; g++)
        qa[g] = quad_at(a[g], k);
    for (int64_t s = 0; s < k / QK_K; s++) {
        float sc[4][8];
        __m256 mn[4];
        UNROLL
        for (int r = 0; r < 4; r++) {
            __m256 scv;
            q4k_scales((const struct block_q4_k *)w[r] + s, &scv, &mn[r]);
            _mm256_storeu_ps(sc[r], scv);
        }
        for (int p = 0; p < 4; p++) {
            __m512i x0[4], x1[4];
            UNROLL
            for (int r = 0; r < 4; r++) {
                const struct block_q4_k *b = (const struct block_q4_k *)w[r] + s;
                prefetch_row(b->qs + 32 * p);
                x0[r] = bcast16(b->qs + 32 * p);
                x1[r] = bcast16(b->qs + 32 * p + 16);
            }
            const int64_t grp = 16 * s + 4 * p, blk = 8 * s + 2 * p;
            UNROLL
            for (int g = 0; g < G; g++) {
                const __m512i *aq = (const __m512i *)(qa[g].q + 64 * grp);
                __m512 ad0 = _mm512_load_ps(qa[g].d + 16 * blk);
                __m512 ad1 = _mm512_load_ps(qa[g].d + 16 * blk + 16);
                UNROLL
                for (int r = 0; r < 4; r++) {
                    acc[r][g] = sub_step(acc[r][g], _mm512_and_si512(x0[r], m4),
                                         _mm512_and_si512(x1[r], m4), aq[0], aq[1],
                                         _mm512_set1_ps(sc[r][2 * p]), ad0);
                    acc[r][g] = sub_step(acc[r][g], _mm512_and_si512(_mm512_srli_epi16(x0[r], 4), m4),
                                         _mm512_and_si512(_mm512_srli_epi16(x1[r], 4), m4), aq[2],
                                         aq[3], _mm512_set1_ps(sc[r][2 * p + 1]), ad1);
                }
            }
        }
        UNROLL
        for (int g = 0; g < G; g++) {
            __m512 as0 = _mm512_load_ps(qa[g].asum + 32 * s);
            __m512 as1 = _mm512_load_ps(qa[g].asum + 32 * s + 16);
            UNROLL
            for (int r = 0; r < 4; r++) {
                __m512 m = _mm512_castps256_ps512(mn[r]);
                acc[r][g] = _mm512_fmadd_ps(_mm512_shuffle_f32x4(m, m, 0x00), as0, acc[r][g]);
                acc[r][g] = _mm512_fmadd_ps(_mm512_shuffle_f32x4(m, m, 0x55), as1, acc[r][g]);
            }
        }
    }
    ACC_STORE(acc, G, out)
}

static void q4_k_quad_any(int G, const uint8_t *const *w, const uint8_t *const *a, int64_t k,
                          float *out)
{
    QUAD_DISPATCH(q4_k_quad, G, w, a, k, out)
}

static void q4_k_gemv(const uint8_t *const *w, const uint8_t *a, int64_t k, const uint8_t *pf,
                      float *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const struct quad qa = quad_at(a, k);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t s = 0; s < k / QK_K; s++) {
        const struct block_q4_k *b[4];
        __m256 scv[4], mnv[4];
        UNROLL
        for (int r = 0; r < 4; r++) {
            b[r] = (const struct block_q4_k *)w[r] + s;
            q4k_scales(b[r], &scv[r], &mnv[r]);
        }
        // Row r's sub-block scales in lanes 4r..4r+3: [sc 0-7 of rows 0,1], [rows 2,3].
        __m512 sc01 = _mm512_insertf32x8(_mm512_castps256_ps512(scv[0]), scv[1], 1);
        __m512 sc23 = _mm512_insertf32x8(_mm512_castps256_ps512(scv[2]), scv[3], 1);
        for (int p = 0; p < 4; p++) {
            prefetch_span(pf, (size_t)(4 * s + p) * sizeof(struct block_q4_k), sizeof(struct block_q4_k));
            __m512i x0, x1;
            gather4x32(b[0]->qs + 32 * p, b[1]->qs + 32 * p, b[2]->qs + 32 * p, b[3]->qs + 32 * p,
                       &x0, &x1);
            const int64_t grp = 16 * s + 4 * p, blk = 8 * s + 2 * p;
            UNROLL
            for (int hi = 0; hi < 2; hi++) {
                const int sub = 2 * p + hi;
                // [row 0's scale x 4, row 1's, row 2's, row 3's] of this sub-block.
                const __m512i idx = _mm512_set_epi32(
                    24 + sub, 24 + sub, 24 + sub, 24 + sub, 16 + sub, 16 + sub, 16 + sub, 16 + sub,
                    8 + sub, 8 + sub, 8 + sub, 8 + sub, sub, sub, sub, sub);
                __m512 wd = _mm512_permutex2var_ps(sc01, idx, sc23);
                __m512i w0 = hi ? _mm512_srli_epi16(x0, 4) : x0;
                __m512i w1 = hi ? _mm512_srli_epi16(x1, 4) : x1;
                acc = sub_step(acc, _mm512_and_si512(w0, m4), _mm512_and_si512(w1, m4),
                               bcast16(qa.q + 64 * (grp + 2 * hi)),
                               bcast16(qa.q + 64 * (grp + 2 * hi + 1)), wd,
                               _mm512_set1_ps(qa.d[16 * (blk + hi)]));
            }
        }
        // Mins: lane 4r + i gets row r's min of sub-block i (then 4 + i).
        __m512 mn01 = _mm512_insertf32x8(_mm512_castps256_ps512(mnv[0]), mnv[1], 1);
        __m512 mn23 = _mm512_insertf32x8(_mm512_castps256_ps512(mnv[2]), mnv[3], 1);
        const __m512i lo_idx = _mm512_set_epi32(27, 26, 25, 24, 19, 18, 17, 16, 11, 10, 9, 8, 3, 2,
                                                1, 0);
        const __m512i hi_idx = _mm512_add_epi32(lo_idx, _mm512_set1_epi32(4));
        acc = _mm512_fmadd_ps(_mm512_permutex2var_ps(mn01, lo_idx, mn23),
                              bcast16f(qa.asum + 32 * s), acc);
        acc = _mm512_fmadd_ps(_mm512_permutex2var_ps(mn01, hi_idx, mn23),
                              bcast16f(qa.asum + 32 * s + 16), acc);
    }
    reduce4_store(acc, out);
}

// ---- activation quantization into a quad ----

// Token t of the quad at dst (slot t) from x [k], for a weight type with
// zero point zp: per 32-block d = max|x| / 127, q = round(x / d).
static void quad_quantize(const float *x, int t, int64_t k, int zp, uint8_t *dst)
{
    int8_t *q = (int8_t *)dst;
    int32_t *corr32 = (int32_t *)(dst + qmm_quad_corr32_off(k));
    float *dd = (float *)(dst + qmm_quad_d_off(k));
    float *asum = (float *)(dst + qmm_quad_asum_off(k));
    const __m128i ones = _mm_set1_epi8(1);
    const __m128i neg_zp = _mm_set1_epi32(-zp);
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int64_t j = 0; j < k / 32; j++) {
        const float *xb = x + 32 * j;
        __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
        __m512 amax = _mm512_max_ps(_mm512_and_ps(v0, abs_mask), _mm512_and_ps(v1, abs_mask));
        const float d = _mm512_reduce_max_ps(amax) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        __m128i q0 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id))));
        __m128i q1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id))));
        _mm_store_si128((__m128i *)(q + 128 * j + 16 * t), q0);
        _mm_store_si128((__m128i *)(q + 128 * j + 64 + 16 * t), q1);
        __m128i l0 = _mm_dpbusd_epi32(_mm_setzero_si128(), ones, q0);
        __m128i l1 = _mm_dpbusd_epi32(_mm_setzero_si128(), ones, q1);
        __m128i c0 = _mm_mullo_epi32(l0, neg_zp), c1 = _mm_mullo_epi32(l1, neg_zp);
        _mm_store_si128((__m128i *)(corr32 + 16 * j + 4 * t), _mm_add_epi32(c0, c1));
        _mm_store_ps(dd + 16 * j + 4 * t, _mm_set1_ps(d));
        if (k % QK_K == 0) {
            // asum [k / 256][2][4 tokens][4]: block j is 4h + i of its super-block.
            __m128i l = _mm_add_epi32(l0, l1);
            l = _mm_add_epi32(l, _mm_shuffle_epi32(l, 0x4E));
            l = _mm_add_epi32(l, _mm_shuffle_epi32(l, 0xB1));
            const int64_t s = j / 8, h = (j % 8) / 4, i = j % 4;
            asum[32 * s + 16 * h + 4 * t + i] = d * (float)_mm_cvtsi128_si32(l);
        }
    }
}

// ---- the table ----

static const struct qmm_quad_kernel quad_kernels[] = {
    {DTYPE_Q4_0, 8, 64, q4_0_quad_any, q4_0_gemv},
    {DTYPE_Q8_0, 128, 64, q8_0_quad_any, q8_0_gemv},
    {DTYPE_Q4_K, 0, QK_K, q4_k_quad_any, q4_k_gemv},
};

const struct qmm_quad_isa qmm_quad_isa_avx512 = {
    .quantize = quad_quantize,
    .kernels = quad_kernels,
    .n_kernels = (int)(sizeof quad_kernels / sizeof quad_kernels[0]),
};
