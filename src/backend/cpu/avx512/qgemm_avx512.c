// `cpu-q-gemm-avx512`: token-lane kernels for Q8_0, Q4_0, Q4_K and Q6_K (layouts and
// arithmetic in qgemm.h). The tile runs on unpacked panels: per 4 values, one
// 64-byte load of 16 tokens' activations feeds every row of the tile, each
// unsigned weight dword is broadcast to all lanes for vpdpbusd, and each lane
// ends a block with the exact int32 dot product of one token (the group's
// per-token correction removes the zero point). The decode kernels
// read packed rows, 4 at a time with the rows in the lanes, and reduce to the
// same exact block sums before the same float steps; a lone token over Q8_0
// or Q4_K rows takes 16 rows at a time, a row per float lane, so the float
// steps run at full width and the rows' chains of block steps overlap.
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/avx512/avx512.h"
#include "backend/cpu/avx512/kquant_avx512.h"
#include "backend/cpu/avx512/qgemm_amx.h"
#include "backend/cpu/quant/blocks.h"
#include "backend/cpu/quant/qgemm.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")

// ---- activation quantization ----

// The 32 values at x as int8 q with x ~= d * q: d = max|x| / 127, q = round(x / d).
ALWAYS_INLINE __m256i quant_block(const float *x, float *d_out)
{
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    __m512 amax = _mm512_max_ps(_mm512_and_ps(v0, abs_mask), _mm512_and_ps(v1, abs_mask));
    const float d = _mm512_reduce_max_ps(amax) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    __m128i q0 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id))));
    __m128i q1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id))));
    *d_out = d;
    return _mm256_set_m128i(q1, q0);
}

// Sum of the 16 signed bytes of q, in every lane.
ALWAYS_INLINE __m128i sum_i8x16(__m128i q)
{
    __m128i h = _mm_dpbusd_epi32(_mm_setzero_si128(), _mm_set1_epi8(1), q);
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
    return _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
}

// The tokens x[0..n-1] of a group, block by block, each token's values as
// quant_block makes them; the per-token scalars (the scale, its inverse, the
// sums of q) of a block are computed for the 16 tokens at once in the lanes.
// The lanes of missing tokens stay zero.
static void quantize_group(const float *const *x, int n, int64_t k, int zp, int sb, uint8_t *dst)
{
    float *dd = (float *)(dst + qgemm_group_d_off(k));
    float *asum = (float *)(dst + qgemm_group_asum_off(k));
    int32_t *corr = (int32_t *)(dst + qgemm_group_corr_off(k));
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t b = 0; b < k / 32; b++) {
        __m512 amax[QGEMM_LANES];
        for (int t = 0; t < QGEMM_LANES; t++) {
            if (t >= n) {
                amax[t] = _mm512_setzero_ps();
                continue;
            }
            __m512 v0 = _mm512_loadu_ps(x[t] + 32 * b), v1 = _mm512_loadu_ps(x[t] + 32 * b + 16);
            amax[t] = _mm512_max_ps(_mm512_and_ps(v0, abs_mask), _mm512_and_ps(v1, abs_mask));
        }
        // d = max|x| / 127, q = round(x / d) as x * (1 / d): quant_block's steps.
        const __m512 d = _mm512_div_ps(avx512_max16(amax), _mm512_set1_ps(127.0f));
        const __mmask16 nz = _mm512_cmpneq_ps_mask(d, _mm512_setzero_ps());
        _Alignas(64) float id[QGEMM_LANES];
        _mm512_store_ps(id, _mm512_maskz_div_ps(nz, _mm512_set1_ps(1.0f), d));
        uint8_t *q = dst + 512 * b;
        for (int t = 0; t < n; t++) {
            const __m512 it = _mm512_set1_ps(id[t]);
            __m128i q0 = _mm512_cvtsepi32_epi8(
                _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x[t] + 32 * b), it)));
            __m128i q1 = _mm512_cvtsepi32_epi8(
                _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x[t] + 32 * b + 16), it)));
            // Dword s of the block goes to lane t of 4-value step s: 64 bytes
            // apart. Plain stores: a scatter is microcoded here and costs
            // several times more.
            uint32_t qw[8];
            _mm_storeu_si128((__m128i *)qw, q0);
            _mm_storeu_si128((__m128i *)(qw + 4), q1);
            UNROLL
            for (int s = 0; s < 8; s++)
                memcpy(q + 64 * s + 4 * t, &qw[s], 4);
        }
        // The sums of q by halves, lane t = token t, from the steps just written.
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        UNROLL
        for (int s = 0; s < 4; s++) {
            s0 = _mm512_dpbusd_epi32(s0, ones, _mm512_load_si512(q + 64 * s));
            s1 = _mm512_dpbusd_epi32(s1, ones, _mm512_load_si512(q + 64 * (s + 4)));
        }
        const __m512i sum = _mm512_add_epi32(s0, s1);
        _mm512_store_ps(dd + 16 * b, d);
        _mm512_store_ps(asum + 16 * b, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sum)));
        const __m512i nzp = _mm512_set1_epi32(-zp);
        if (sb == 32) {
            _mm512_store_si512(corr + 16 * b, _mm512_mullo_epi32(nzp, sum));
        } else {
            _mm512_store_si512(corr + 32 * b, _mm512_mullo_epi32(nzp, s0));
            _mm512_store_si512(corr + 32 * b + 16, _mm512_mullo_epi32(nzp, s1));
        }
    }
}

static void quantize_row(const float *x, int64_t k, uint8_t *dst)
{
    float *dd = (float *)(dst + qgemm_row_d_off(k));
    float *asum = (float *)(dst + qgemm_row_asum_off(k));
    int32_t *qsum = (int32_t *)(dst + qgemm_row_qsum_off(k));
    int32_t *qsum16 = (int32_t *)(dst + qgemm_row_qsum16_off(k));
    for (int64_t b = 0; b < k / 32; b++) {
        float d;
        __m256i q = quant_block(x + 32 * b, &d);
        _mm256_storeu_si256((__m256i *)(dst + 32 * b), q);
        int32_t s0 = _mm_cvtsi128_si32(sum_i8x16(_mm256_castsi256_si128(q)));
        int32_t s1 = _mm_cvtsi128_si32(sum_i8x16(_mm256_extracti128_si256(q, 1)));
        dd[b] = d;
        asum[b] = d * (float)(s0 + s1);
        qsum[b] = s0 + s1;
        qsum16[2 * b] = s0;
        qsum16[2 * b + 1] = s1;
    }
}

// ---- the tile: R panel rows x G token groups per pass over k ----

ALWAYS_INLINE int32_t load_i32(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

// Rows v0..v3 of 16 tokens each into out[t * QGEMM_PANEL + r] (t < 16, r < 4).
ALWAYS_INLINE void store_4x16(__m512 v0, __m512 v1, __m512 v2, __m512 v3, float *out)
{
    __m512 t0 = _mm512_unpacklo_ps(v0, v1), t1 = _mm512_unpackhi_ps(v0, v1);
    __m512 t2 = _mm512_unpacklo_ps(v2, v3), t3 = _mm512_unpackhi_ps(v2, v3);
    // o[j] lane L: the 4 rows of token 4 L + j.
    __m512 o[4];
    o[0] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
    o[1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
    o[2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
    o[3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
    UNROLL
    for (int j = 0; j < 4; j++) {
        _mm_storeu_ps(out + (0 + j) * QGEMM_PANEL, _mm512_castps512_ps128(o[j]));
        _mm_storeu_ps(out + (4 + j) * QGEMM_PANEL, _mm512_extractf32x4_ps(o[j], 1));
        _mm_storeu_ps(out + (8 + j) * QGEMM_PANEL, _mm512_extractf32x4_ps(o[j], 2));
        _mm_storeu_ps(out + (12 + j) * QGEMM_PANEL, _mm512_extractf32x4_ps(o[j], 3));
    }
}

// SUB values per weight scale (32 or 16). GRP 0: panel is a panel; else
// (SUB 32, no min) it is a Q8_0 group read in place, GRP bytes a block (16
// fp16 scales, then 8 lines of the 16 rows' dwords).
ALWAYS_INLINE void lanes_tile(const int R, const int G, const int SUB, const bool has_min,
                              const int GRP, const uint8_t *panel, int64_t k,
                              const uint8_t *const *a, float *out, const uint8_t *pf,
                              size_t pf_bytes)
{
    // Prefetch the lines of pf a few per block step, spread over the tile's run.
    const size_t n_steps = (size_t)(QGEMM_PANEL / R) * (size_t)(k / SUB);
    const size_t per_step = ((pf_bytes + 63) / 64 + n_steps - 1) / n_steps;
    const char *pf_at = (const char *)pf, *pf_end = (const char *)pf + pf_bytes;
    const size_t prb = qgemm_panel_row_bytes(k);
    const float *ad[QGEMM_GROUPS], *as[QGEMM_GROUPS];
    const int32_t *ac[QGEMM_GROUPS];
    for (int g = 0; g < G; g++) {
        ad[g] = (const float *)(a[g] + qgemm_group_d_off(k));
        as[g] = (const float *)(a[g] + qgemm_group_asum_off(k));
        ac[g] = (const int32_t *)(a[g] + qgemm_group_corr_off(k));
    }
    for (int r0 = 0; r0 < QGEMM_PANEL; r0 += R) {
        const uint8_t *wq[8];
        const float *ws[8], *wm[8];
        UNROLL
        for (int r = 0; r < R; r++) {
            const uint8_t *row = panel + (size_t)(r0 + r) * prb;
            wq[r] = row;
            ws[r] = (const float *)(row + qgemm_panel_ws_off(k));
            wm[r] = (const float *)(row + qgemm_panel_wm_off(k));
        }
        __m512 acc[8][QGEMM_GROUPS];
        UNROLL
        for (int r = 0; r < R; r++)
            UNROLL
            for (int g = 0; g < G; g++)
                acc[r][g] = _mm512_setzero_ps();
        for (int64_t j = 0; j < k / SUB; j++) {
            for (size_t i = 0; i < per_step && pf_at < pf_end; i++, pf_at += 64)
                _mm_prefetch(pf_at, _MM_HINT_T1);
            _Alignas(64) float gws[QGEMM_PANEL]; // GRP: the block's row scales
            if (GRP)
                _mm512_store_ps(gws, _mm512_cvtph_ps(_mm256_loadu_si256(
                                         (const __m256i *)(panel + (size_t)j * GRP))));
            __m512i ia[8][QGEMM_GROUPS];
            UNROLL
            for (int g = 0; g < G; g++) {
                __m512i c = _mm512_load_si512(ac[g] + 16 * j);
                UNROLL
                for (int r = 0; r < R; r++)
                    ia[r][g] = c;
            }
            UNROLL
            for (int s = 0; s < SUB / 4; s++) {
                __m512i A[QGEMM_GROUPS];
                UNROLL
                for (int g = 0; g < G; g++)
                    A[g] = _mm512_load_si512(a[g] + 16 * SUB * j + 64 * s);
                UNROLL
                for (int r = 0; r < R; r++) {
                    __m512i W = _mm512_set1_epi32(
                        GRP ? load_i32(panel + (size_t)j * GRP + 32 + 64 * s + 4 * (r0 + r))
                            : load_i32(wq[r] + SUB * j + 4 * s));
                    UNROLL
                    for (int g = 0; g < G; g++)
                        ia[r][g] = _mm512_dpbusd_epi32(ia[r][g], W, A[g]);
                }
            }
            UNROLL
            for (int g = 0; g < G; g++) {
                const int64_t b = j * SUB / 32; // the activation block
                __m512 D = _mm512_load_ps(ad[g] + 16 * b);
                __m512 AS = has_min ? _mm512_load_ps(as[g] + 16 * b) : _mm512_setzero_ps();
                UNROLL
                for (int r = 0; r < R; r++) {
                    acc[r][g] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(ia[r][g]),
                        _mm512_mul_ps(_mm512_set1_ps(GRP ? gws[r0 + r] : ws[r][j]), D), acc[r][g]);
                    if (has_min)
                        acc[r][g] = _mm512_fmadd_ps(_mm512_set1_ps(wm[r][j]), AS, acc[r][g]);
                }
            }
        }
        UNROLL
        for (int g = 0; g < G; g++)
            UNROLL
            for (int r = 0; r < R; r += 4)
                store_4x16(acc[r][g], acc[r + 1][g], acc[r + 2][g], acc[r + 3][g],
                           out + (size_t)(16 * g) * QGEMM_PANEL + r0 + r);
    }
}

_Static_assert(QGEMM_GROUPS == 2, "the tiles cover 1 or 2 groups");

static void tile_32(const uint8_t *panel, int64_t k, int n_groups, const uint8_t *const *a,
                    float *out, const uint8_t *pf, size_t pf_bytes)
{
    if (n_groups == 2)
        lanes_tile(4, 2, 32, false, 0, panel, k, a, out, pf, pf_bytes);
    else
        lanes_tile(8, 1, 32, false, 0, panel, k, a, out, pf, pf_bytes);
}

static void tile_32_min(const uint8_t *panel, int64_t k, int n_groups, const uint8_t *const *a,
                        float *out, const uint8_t *pf, size_t pf_bytes)
{
    if (n_groups == 2)
        lanes_tile(4, 2, 32, true, 0, panel, k, a, out, pf, pf_bytes);
    else
        lanes_tile(8, 1, 32, true, 0, panel, k, a, out, pf, pf_bytes);
}

static void tile_16(const uint8_t *panel, int64_t k, int n_groups, const uint8_t *const *a,
                    float *out, const uint8_t *pf, size_t pf_bytes)
{
    if (n_groups == 2)
        lanes_tile(4, 2, 16, false, 0, panel, k, a, out, pf, pf_bytes);
    else
        lanes_tile(8, 1, 16, false, 0, panel, k, a, out, pf, pf_bytes);
}

// ---- weight panels ----


struct panel_row {
    uint8_t *w;
    float *ws, *wm;
};

ALWAYS_INLINE struct panel_row panel_row_at(uint8_t *dst, int64_t k)
{
    struct panel_row p = {
        .w = dst,
        .ws = (float *)(dst + qgemm_panel_ws_off(k)),
        .wm = (float *)(dst + qgemm_panel_wm_off(k)),
    };
    return p;
}

static void q8_0_unpack(const uint8_t *w, int64_t k, uint8_t *dst)
{
    const struct block_q8_0 *b = (const struct block_q8_0 *)w;
    struct panel_row p = panel_row_at(dst, k);
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int64_t j = 0; j < k / 32; j++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)b[j].qs);
        _mm256_storeu_si256((__m256i *)(p.w + 32 * j), _mm256_xor_si256(q, flip));
        p.ws[j] = fp16(b[j].d);
    }
}

static void q4_0_unpack(const uint8_t *w, int64_t k, uint8_t *dst)
{
    const struct block_q4_0 *b = (const struct block_q4_0 *)w;
    struct panel_row p = panel_row_at(dst, k);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (int64_t j = 0; j < k / 32; j++) {
        __m128i x = _mm_loadu_si128((const __m128i *)b[j].qs);
        __m128i lo = _mm_and_si128(x, m4), hi = _mm_and_si128(_mm_srli_epi16(x, 4), m4);
        _mm256_storeu_si256((__m256i *)(p.w + 32 * j), _mm256_set_m128i(hi, lo));
        p.ws[j] = fp16(b[j].d);
    }
}

static void q4_k_unpack(const uint8_t *w, int64_t k, uint8_t *dst)
{
    const struct block_q4_k *b = (const struct block_q4_k *)w;
    struct panel_row p = panel_row_at(dst, k);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t s = 0; s < k / QK_K; s++) {
        __m256 sc, mn;
        q4k_scales(&b[s], &sc, &mn);
        _mm256_storeu_ps(p.ws + 8 * s, sc);
        _mm256_storeu_ps(p.wm + 8 * s, mn);
        for (int c = 0; c < 4; c++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(b[s].qs + 32 * c));
            __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
            _mm256_storeu_si256((__m256i *)(p.w + 256 * s + 64 * c), lo);
            _mm256_storeu_si256((__m256i *)(p.w + 256 * s + 64 * c + 32), hi);
        }
    }
}

// Q6_K: 16 sub-blocks of 16 values, int8 scales; the values of half h (128
// each) are the nibbles of ql[64h..64h+63] (low: values 0-63, high: 64-127)
// with 2 high bits from qh[32h + l % 32] at bit 2 (value / 32 % 4).
ALWAYS_INLINE void q6_k_half(const struct block_q6_k *b, int h, __m512i *lo, __m512i *hi)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x03);
    const __m512i sh_lo = _mm512_mask_mov_epi32(_mm512_setzero_si512(), 0xFF00, _mm512_set1_epi16(2));
    const __m512i sh_hi = _mm512_mask_mov_epi32(_mm512_set1_epi16(4), 0xFF00, _mm512_set1_epi16(6));
    __m512i x = _mm512_loadu_si512(b->ql + 64 * h);
    __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
    __m512i h_lo = _mm512_and_si512(_mm512_srlv_epi16(qh, sh_lo), m2);
    __m512i h_hi = _mm512_and_si512(_mm512_srlv_epi16(qh, sh_hi), m2);
    *lo = _mm512_or_si512(_mm512_and_si512(x, m4), _mm512_slli_epi16(h_lo, 4));
    *hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(x, 4), m4), _mm512_slli_epi16(h_hi, 4));
}

static void q6_k_unpack(const uint8_t *w, int64_t k, uint8_t *dst)
{
    const struct block_q6_k *b = (const struct block_q6_k *)w;
    struct panel_row p = panel_row_at(dst, k);
    for (int64_t s = 0; s < k / QK_K; s++) {
        __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b[s].scales)));
        _mm512_storeu_ps(p.ws + 16 * s, _mm512_mul_ps(sc, _mm512_set1_ps(fp16(b[s].d))));
        for (int h = 0; h < 2; h++) {
            __m512i lo, hi;
            q6_k_half(&b[s], h, &lo, &hi);
            _mm512_storeu_si512(p.w + QK_K * s + 128 * h, lo);
            _mm512_storeu_si512(p.w + QK_K * s + 128 * h + 64, hi);
        }
    }
}

// ---- decode: 4 packed rows, the rows in the lanes ----

// Decode prefetches the rows of the next tiles, in step with the reading of
// the current ones, into L1: the tile's loads then hit L1 instead of waiting
// on L2. On Zen 5 (2 threads, 0.6B shape, tg128 alternating with prefetches
// into L2) Q4_0 decode rose 9-17%, Q4_K_M 2-9%, Q8_0 2-8% (bench/RESULTS.md).
ALWAYS_INLINE void prefetch_span(const uint8_t *pf, size_t off, size_t len)
{
    for (size_t o = 0; o < len; o += 64)
        _mm_prefetch((const char *)pf + off + o, _MM_HINT_T0);
}

// Lanes of a and b pairwise: per 128-bit lane [a0 + a2, b0 + b2, a1 + a3, b1 + b3].
ALWAYS_INLINE __m512i sum_pair(__m512i a, __m512i b)
{
    return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}

// Of two sum_pair results of (a, b) and (c, d): per 128-bit lane L the sums
// of lane L of a, b, c, d.
ALWAYS_INLINE __m512i sum_quad(__m512i ab, __m512i cd)
{
    return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}

// v[0..7], each two groups of 8 lanes (g0: lanes 0-7, g1: lanes 8-15):
// returns [v0..3 g0 | v0..3 g1 | v4..7 g0 | v4..7 g1], each 4 lanes of sums.
ALWAYS_INLINE __m512i sum_groups8(const __m512i *v)
{
    __m512i u0 = sum_quad(sum_pair(v[0], v[1]), sum_pair(v[2], v[3]));
    __m512i u1 = sum_quad(sum_pair(v[4], v[5]), sum_pair(v[6], v[7]));
    return _mm512_add_epi32(_mm512_shuffle_i64x2(u0, u1, 0x88), _mm512_shuffle_i64x2(u0, u1, 0xDD));
}

// [v0 x 4, v1 x 4, v2 x 4, v3 x 4]
ALWAYS_INLINE __m512i spread4_i32(const int32_t *v)
{
    const __m512i idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    return _mm512_permutexvar_epi32(idx, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)v)));
}

ALWAYS_INLINE __m512 spread4_f32(const float *v)
{
    const __m512i idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_loadu_ps(v)));
}

// acc += F.L * P.L for the 128-bit lanes L in the given order.
ALWAYS_INLINE __m128 fma_lanes(__m128 acc, __m512 f, __m512 p)
{
    acc = _mm_fmadd_ps(_mm512_castps512_ps128(f), _mm512_castps512_ps128(p), acc);
    acc = _mm_fmadd_ps(_mm512_extractf32x4_ps(f, 1), _mm512_extractf32x4_ps(p, 1), acc);
    acc = _mm_fmadd_ps(_mm512_extractf32x4_ps(f, 2), _mm512_extractf32x4_ps(p, 2), acc);
    return _mm_fmadd_ps(_mm512_extractf32x4_ps(f, 3), _mm512_extractf32x4_ps(p, 3), acc);
}

// The fp16 scales d of blocks j..j+3 of rows b0..b3 as [block][row] floats.
#define BLOCK_SCALES16(b0, b1, b2, b3, j)                                                          \
    _mm512_cvtph_ps(_mm256_set_epi16(                                                              \
        (short)b3[j + 3].d, (short)b2[j + 3].d, (short)b1[j + 3].d, (short)b0[j + 3].d,            \
        (short)b3[j + 2].d, (short)b2[j + 2].d, (short)b1[j + 2].d, (short)b0[j + 2].d,            \
        (short)b3[j + 1].d, (short)b2[j + 1].d, (short)b1[j + 1].d, (short)b0[j + 1].d,            \
        (short)b3[j].d, (short)b2[j].d, (short)b1[j].d, (short)b0[j].d))

// Lone-token sections.
struct row_act {
    const int8_t *q;
    const float *d, *asum;
    const int32_t *qsum;
};

ALWAYS_INLINE struct row_act row_act_at(const uint8_t *a, int64_t k)
{
    struct row_act s = {
        .q = (const int8_t *)a,
        .d = (const float *)(a + qgemm_row_d_off(k)),
        .asum = (const float *)(a + qgemm_row_asum_off(k)),
        .qsum = (const int32_t *)(a + qgemm_row_qsum_off(k)),
    };
    return s;
}

// Q8_0 decode reads the 136 bytes of 4 blocks of a row as 68 words (x0:
// words 0-31, x1: 32-63, x2: 64-67): block i's d is word 17i, its qs words
// 17i + 1..17i + 16. QS01 (from x0, x1) and QS23 (from x1, x2): the qs of
// blocks 0, 1 and 2, 3. D01 (x0 of two rows) and D23 (x1 of two rows): word
// 4i + r = the d of block i (< 2, >= 2) of row r % 2.
static const uint16_t q8_0_qs01_words[32] = {
    1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
    18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33};
static const uint16_t q8_0_qs23_words[32] = {
    3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18,
    20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35};
static const uint16_t q8_0_d01_words[32] = {0, 32, 0, 32, 17, 49, 17, 49};
static const uint16_t q8_0_d23_words[32] = {0, 0, 0, 0, 0, 0, 0, 0, 2, 34, 2, 34, 19, 51, 19, 51};

ALWAYS_INLINE void q8_0_gemv_t(const int T, const uint8_t *const *w, const uint8_t *a,
                               size_t a_stride, int64_t k, const uint8_t *pf, float *out)
{
    struct row_act ra[QGEMM_GEMV_TOKENS];
    __m128 acc[QGEMM_GEMV_TOKENS];
    UNROLL
    for (int t = 0; t < T; t++) {
        ra[t] = row_act_at(a + (size_t)t * a_stride, k);
        acc[t] = _mm_setzero_ps();
    }
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __m512i qs01 = _mm512_loadu_si512(q8_0_qs01_words);
    const __m512i qs23 = _mm512_loadu_si512(q8_0_qs23_words);
    const __m512i d01 = _mm512_loadu_si512(q8_0_d01_words);
    const __m512i d23 = _mm512_loadu_si512(q8_0_d23_words);
    const size_t step = 4 * 4 * sizeof(struct block_q8_0);
    for (int64_t c = 0; c < k / 128; c++) {
        prefetch_span(pf, (size_t)c * step, step);
        const int64_t j = 4 * c;
        __m512i x0[4], x1[4], wq[8];
        UNROLL
        for (int r = 0; r < 4; r++) {
            const uint8_t *p = w[r] + (size_t)j * sizeof(struct block_q8_0);
            x0[r] = _mm512_loadu_si512(p);
            x1[r] = _mm512_loadu_si512(p + 64);
            __m512i x2 = _mm512_maskz_loadu_epi16(0xF, p + 128); // the row may end at byte 136
            // Weights + 128 as unsigned bytes: the sum drops 128 * sum(q).
            wq[r] = _mm512_xor_si512(_mm512_permutex2var_epi16(x0[r], qs01, x1[r]), flip);
            wq[4 + r] = _mm512_xor_si512(_mm512_permutex2var_epi16(x1[r], qs23, x2), flip);
        }
        // Words 0-7 (blocks 0, 1) from the x0, 8-15 from the x1; rows 2, 3 at 4i + 2, 4i + 3.
        __m512i d_r01 = _mm512_mask_blend_epi16(0xFF00, _mm512_permutex2var_epi16(x0[0], d01, x0[1]),
                                                _mm512_permutex2var_epi16(x1[0], d23, x1[1]));
        __m512i d_r23 = _mm512_mask_blend_epi16(0xFF00, _mm512_permutex2var_epi16(x0[2], d01, x0[3]),
                                                _mm512_permutex2var_epi16(x1[2], d23, x1[3]));
        const __m512 wd = _mm512_cvtph_ps(
            _mm512_castsi512_si256(_mm512_mask_blend_epi16(0xCCCC, d_r01, d_r23)));
        UNROLL
        for (int t = 0; t < T; t++) {
            __m512i a0 = _mm512_loadu_si512(ra[t].q + 128 * c);
            __m512i a1 = _mm512_loadu_si512(ra[t].q + 128 * c + 64);
            __m512i v[8];
            UNROLL
            for (int r = 0; r < 4; r++) {
                v[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[r], a0);
                v[4 + r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[4 + r], a1);
            }
            __m512i s = sum_groups8(v); // [block j + i][row]
            s = _mm512_sub_epi32(s, _mm512_slli_epi32(spread4_i32(ra[t].qsum + j), 7));
            __m512 p = _mm512_mul_ps(wd, spread4_f32(ra[t].d + j));
            acc[t] = fma_lanes(acc[t], _mm512_cvtepi32_ps(s), p);
        }
    }
    UNROLL
    for (int t = 0; t < T; t++)
        _mm_storeu_ps(out + 4 * t, acc[t]);
}

// ---- decode of a lone Q8_0 token over 16 rows, a row in each float lane ----

// 128-bit lane i of g[q] into lane q of s[i] (a 4 x 4 transpose of lanes):
// from 4-row groups' [block][row] sums to one vector of 16 rows per block.
ALWAYS_INLINE void transpose_lanes4(const __m512i g[4], __m512i s[4])
{
    const __m512i t0 = _mm512_shuffle_i64x2(g[0], g[1], 0x44);
    const __m512i t1 = _mm512_shuffle_i64x2(g[0], g[1], 0xEE);
    const __m512i t2 = _mm512_shuffle_i64x2(g[2], g[3], 0x44);
    const __m512i t3 = _mm512_shuffle_i64x2(g[2], g[3], 0xEE);
    s[0] = _mm512_shuffle_i64x2(t0, t2, 0x88);
    s[1] = _mm512_shuffle_i64x2(t0, t2, 0xDD);
    s[2] = _mm512_shuffle_i64x2(t1, t3, 0x88);
    s[3] = _mm512_shuffle_i64x2(t1, t3, 0xDD);
}

// The 16-row kernels' step over activation blocks j..j + 3: s[i] lane r =
// row r's integer sum of block j + i with its weights + zp, words i of
// d01 (blocks 0, 1: words 0-15, 16-31) and d23 the rows' fp16 d. Per row and
// block in order: acc = fma(float(s - zp * qsum), d_w * d_a, acc).
ALWAYS_INLINE __m512 gemv16_blocks4(const __m512i s[4], __m512i d01, __m512i d23,
                                    const struct row_act *ra, int64_t j, int zp, __m512 acc)
{
    const __m512 wd[4] = {
        _mm512_cvtph_ps(_mm512_castsi512_si256(d01)),
        _mm512_cvtph_ps(_mm512_extracti64x4_epi64(d01, 1)),
        _mm512_cvtph_ps(_mm512_castsi512_si256(d23)),
        _mm512_cvtph_ps(_mm512_extracti64x4_epi64(d23, 1)),
    };
    UNROLL
    for (int i = 0; i < 4; i++) {
        __m512i si = _mm512_sub_epi32(s[i], _mm512_set1_epi32(ra->qsum[j + i] * zp));
        __m512 pd = _mm512_mul_ps(wd[i], _mm512_set1_ps(ra->d[j + i]));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), pd, acc);
    }
    return acc;
}

// Of a and b, lane i where bit D of i is clear: a[i] + a[i ^ D]; where it is
// set: b[i] + b[i ^ D]. D = 2 stays inside the 128-bit lanes (an in-lane
// shuffle, which runs beside vpdpbusd); D = 4 swaps 128-bit lanes pairwise.
ALWAYS_INLINE __m512i merge_lanes_d2(__m512i a, __m512i b)
{
    __m512i x = _mm512_mask_blend_epi32(0xCCCC, a, b), y = _mm512_mask_blend_epi32(0xCCCC, b, a);
    return _mm512_add_epi32(x, _mm512_shuffle_epi32(y, _MM_PERM_BADC));
}

ALWAYS_INLINE __m512i merge_lanes_d4(__m512i a, __m512i b)
{
    __m512i x = _mm512_mask_blend_epi32(0xF0F0, a, b), y = _mm512_mask_blend_epi32(0xF0F0, b, a);
    return _mm512_add_epi32(x, _mm512_shuffle_i64x2(y, y, _MM_SHUFFLE(2, 3, 0, 1)));
}

// The d of blocks (0, 1) at words 0 and 17 of x0, of blocks (2, 3) at words 2
// and 19 of x1 (as q8_0_gemv_t loads them): for rows 2q and 2q + 1, word 2q + h
// of the result takes the first block's d of row 2q + h, word 16 + 2q + h the
// second's.
static const uint16_t q8_0_d16_words01[32] = {
    0,  32, 0,  32, 0,  32, 0,  32, 0,  32, 0,  32, 0,  32, 0,  32,
    17, 49, 17, 49, 17, 49, 17, 49, 17, 49, 17, 49, 17, 49, 17, 49};
static const uint16_t q8_0_d16_words23[32] = {
    2,  34, 2,  34, 2,  34, 2,  34, 2,  34, 2,  34, 2,  34, 2,  34,
    19, 51, 19, 51, 19, 51, 19, 51, 19, 51, 19, 51, 19, 51, 19, 51};

struct q8_0_step16 {
    __m512i a01, a23, a01s, a23s; // the token's 128 values, and with dword lanes swapped pairwise
    __m512i qs01, qs23, flip;
};

// Of rows a, b (their signed weights in wa, wb): lane i holds row a (i even)
// or b (i odd), the sum of its dword lanes i and i ^ 1 against the token's act
// (acts: act with dword lanes swapped pairwise), so pairs of rows are merged
// by the products themselves. Weights + 128 as unsigned bytes: the sums drop
// 128 * sum(q).
ALWAYS_INLINE __m512i q8_0_dot_pair(__m512i wa, __m512i wb, __m512i act, __m512i acts, __m512i flip)
{
    __m512i t = _mm512_xor_si512(_mm512_mask_blend_epi32(0xAAAA, wa, wb), flip);
    __m512i u = _mm512_xor_si512(
        _mm512_shuffle_epi32(_mm512_mask_blend_epi32(0xAAAA, wb, wa), _MM_PERM_CDAB), flip);
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), t, act), u, acts);
}

// Rows p0, p1 at the current 4 blocks: lane i of *v01 (*v23), from row
// 2q + (i & 1), the sum of dword lanes i and i ^ 1 of blocks 0, 1 (2, 3);
// their d into words 2q, 2q + 1, 16 + 2q, 17 + 2q of *d01 and *d23.
ALWAYS_INLINE void q8_0_pair16(const struct q8_0_step16 *st, const uint8_t *p0, const uint8_t *p1,
                               __m512i *v01, __m512i *v23, __m512i *d01, __m512i *d23, __mmask32 mq)
{
    __m512i x0[2], x1[2], w01[2], w23[2];
    const uint8_t *p[2] = {p0, p1};
    UNROLL
    for (int h = 0; h < 2; h++) {
        x0[h] = _mm512_loadu_si512(p[h]);
        x1[h] = _mm512_loadu_si512(p[h] + 64);
        // The last 8 bytes (the row may end there) as a plain 8-byte load,
        // cheaper than a masked one.
        __m512i x2 = _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(p[h] + 128)));
        w01[h] = _mm512_permutex2var_epi16(x0[h], st->qs01, x1[h]);
        w23[h] = _mm512_permutex2var_epi16(x1[h], st->qs23, x2);
    }
    *d01 = _mm512_mask2_permutex2var_epi16(x0[0], *d01, mq, x0[1]);
    *d23 = _mm512_mask2_permutex2var_epi16(x1[0], *d23, mq, x1[1]);
    *v01 = q8_0_dot_pair(w01[0], w01[1], st->a01, st->a01s, st->flip);
    *v23 = q8_0_dot_pair(w23[0], w23[1], st->a23, st->a23s, st->flip);
}

// Q8_0: per block j of each row, acc = fma(float(isum_j), ws_j * d_j, acc),
// as the tile's lanes do. 4 blocks of a row (136 bytes) per step as
// q8_0_gemv_t reads them; the 8 dword partial sums of each block of 16 rows
// fold into one lane per row (pairs of rows already in the products, then
// in-lane merges, then one across 128-bit lanes), the d of 16 rows gather
// into one vector per block.
static void q8_0_gemv16(const uint8_t *const *w, const uint8_t *a, int64_t k,
                        const uint8_t *const *pf, float *out)
{
    const struct row_act ra = row_act_at(a, k);
    struct q8_0_step16 st = {
        .qs01 = _mm512_loadu_si512(q8_0_qs01_words),
        .qs23 = _mm512_loadu_si512(q8_0_qs23_words),
        .flip = _mm512_set1_epi8((char)0x80),
    };
    const __m512i dw01 = _mm512_loadu_si512(q8_0_d16_words01);
    const __m512i dw23 = _mm512_loadu_si512(q8_0_d16_words23);
    const size_t step = 4 * sizeof(struct block_q8_0);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t c = 0; c < k / 128; c++) {
        if (pf) // the same 136 bytes of each next row: 3 points no line falls between
            for (int r = 0; r < QGEMM_GEMV16_ROWS; r++) {
                const char *q = (const char *)pf[r] + (size_t)c * step;
                _mm_prefetch(q, _MM_HINT_T1);
                _mm_prefetch(q + 64, _MM_HINT_T1);
                _mm_prefetch(q + 127, _MM_HINT_T1);
            }
        const int64_t j = 4 * c;
        st.a01 = _mm512_loadu_si512(ra.q + 128 * c);
        st.a23 = _mm512_loadu_si512(ra.q + 128 * c + 64);
        st.a01s = _mm512_shuffle_epi32(st.a01, _MM_PERM_CDAB);
        st.a23s = _mm512_shuffle_epi32(st.a23, _MM_PERM_CDAB);
        const size_t off = (size_t)j * sizeof(struct block_q8_0);
        __m512i d01 = dw01, d23 = dw23; // the index words become the d words, pair by pair
        __m512i h01[2], h23[2];
        UNROLL
        for (int g = 0; g < 2; g++) {
            __m512i q01[2], q23[2];
            UNROLL
            for (int e = 0; e < 2; e++) {
                __m512i p01[2], p23[2];
                UNROLL
                for (int f = 0; f < 2; f++) {
                    const int q = 4 * g + 2 * e + f;
                    q8_0_pair16(&st, w[2 * q] + off, w[2 * q + 1] + off, &p01[f], &p23[f], &d01, &d23,
                                (__mmask32)(0x00030003u << (2 * q)));
                }
                q01[e] = merge_lanes_d2(p01[0], p01[1]);
                q23[e] = merge_lanes_d2(p23[0], p23[1]);
            }
            // Lane i: row 8 g + (i & 7), the first block (i < 8) or the second.
            h01[g] = merge_lanes_d4(q01[0], q01[1]);
            h23[g] = merge_lanes_d4(q23[0], q23[1]);
        }
        __m512i s[4] = {
            _mm512_shuffle_i64x2(h01[0], h01[1], 0x44), _mm512_shuffle_i64x2(h01[0], h01[1], 0xEE),
            _mm512_shuffle_i64x2(h23[0], h23[1], 0x44), _mm512_shuffle_i64x2(h23[0], h23[1], 0xEE),
        };
        acc = gemv16_blocks4(s, d01, d23, &ra, j, 128, acc);
    }
    _mm512_storeu_ps(out, acc);
}

// Q4_0 decode reads the 72 bytes of 4 blocks of a row as 36 words (x: words
// 0-31, y: 32-35): block i's d is word 9i, its qs words 9i + 1..9i + 8.
// QS_WORDS: the qs of block i into 128-bit lane i. D_WORDS01 (D_WORDS23):
// word 4i + r = the d of block i of row r from x of rows 0, 1 (2, 3).
static const uint16_t q4_0_qs_words[32] = {
    1,  2,  3,  4,  5,  6,  7,  8,  10, 11, 12, 13, 14, 15, 16, 17,
    19, 20, 21, 22, 23, 24, 25, 26, 28, 29, 30, 31, 32, 33, 34, 35};
static const uint16_t q4_0_d_words01[32] = {0, 32, 0, 0, 9, 41, 0, 0, 18, 50, 0, 0, 27, 59, 0, 0};
static const uint16_t q4_0_d_words23[32] = {0, 0, 0, 32, 0, 0, 9, 41, 0, 0, 18, 50, 0, 0, 27, 59};

ALWAYS_INLINE void q4_0_gemv_t(const int T, const uint8_t *const *w, const uint8_t *a,
                               size_t a_stride, int64_t k, const uint8_t *pf, float *out)
{
    struct row_act ra[QGEMM_GEMV_TOKENS];
    __m128 acc[QGEMM_GEMV_TOKENS];
    UNROLL
    for (int t = 0; t < T; t++) {
        ra[t] = row_act_at(a + (size_t)t * a_stride, k);
        acc[t] = _mm_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i qs_words = _mm512_loadu_si512(q4_0_qs_words);
    const __m512i d_words01 = _mm512_loadu_si512(q4_0_d_words01);
    const __m512i d_words23 = _mm512_loadu_si512(q4_0_d_words23);
    const size_t step = 4 * 4 * sizeof(struct block_q4_0);
    for (int64_t c = 0; c < k / 128; c++) {
        prefetch_span(pf, (size_t)c * step, step);
        const int64_t j = 4 * c;
        __m512i x[4], lo[4], hi[4];
        UNROLL
        for (int r = 0; r < 4; r++) {
            const uint8_t *p = w[r] + (size_t)j * sizeof(struct block_q4_0);
            x[r] = _mm512_loadu_si512(p);
            __m512i y = _mm512_maskz_loadu_epi16(0xF, p + 64); // the row may end at byte 72
            __m512i q = _mm512_permutex2var_epi16(x[r], qs_words, y);
            lo[r] = _mm512_and_si512(q, m4);
            hi[r] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        }
        __m512i dh = _mm512_mask_blend_epi16(0xCCCC, _mm512_permutex2var_epi16(x[0], d_words01, x[1]),
                                             _mm512_permutex2var_epi16(x[2], d_words23, x[3]));
        const __m512 wd = _mm512_cvtph_ps(_mm512_castsi512_si256(dh));
        UNROLL
        for (int t = 0; t < T; t++) {
            __m512i z0 = _mm512_loadu_si512(ra[t].q + 128 * c);
            __m512i z1 = _mm512_loadu_si512(ra[t].q + 128 * c + 64);
            // Per 128-bit lane i: values 0-15 (a_lo) and 16-31 (a_hi) of block j + i.
            __m512i a_lo = _mm512_shuffle_i64x2(z0, z1, 0x88), a_hi = _mm512_shuffle_i64x2(z0, z1, 0xDD);
            __m512i v[4];
            UNROLL
            for (int r = 0; r < 4; r++)
                v[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[r], a_lo),
                                           hi[r], a_hi);
            // [block j + i][row]; the nibbles are q + 8: drop 8 * sum(q).
            __m512i s = sum_quad(sum_pair(v[0], v[1]), sum_pair(v[2], v[3]));
            s = _mm512_sub_epi32(s, _mm512_slli_epi32(spread4_i32(ra[t].qsum + j), 3));
            __m512 p = _mm512_mul_ps(wd, spread4_f32(ra[t].d + j));
            acc[t] = fma_lanes(acc[t], _mm512_cvtepi32_ps(s), p);
        }
    }
    UNROLL
    for (int t = 0; t < T; t++)
        _mm_storeu_ps(out + 4 * t, acc[t]);
}

// ---- decode of a lone Q4_0 token over 16 rows, a row in each float lane ----

// The d of block i of 16 rows (q4_0_gemv_t's words 0, 9, 18, 27 of x): for
// rows 2q and 2q + 1, word 2q + h of the result takes block 0's (2's) d of
// row 2q + h, word 16 + 2q + h block 1's (3's).
static const uint16_t q4_0_d16_words01[32] = {0,  32, 0,  32, 0,  32, 0,  32, 0,  32, 0,
                                              32, 0,  32, 0,  32, 9,  41, 9,  41, 9,  41,
                                              9,  41, 9,  41, 9,  41, 9,  41, 9,  41};
static const uint16_t q4_0_d16_words23[32] = {18, 50, 18, 50, 18, 50, 18, 50, 18, 50, 18,
                                              50, 18, 50, 18, 50, 27, 59, 27, 59, 27, 59,
                                              27, 59, 27, 59, 27, 59, 27, 59, 27, 59};

// Q4_0: per block j of each row, acc = fma(float(isum_j - 8 qsum_j), d_j * ad_j,
// acc), as q4_0_gemv_t and the tile compute it. Each 4-row group's sums come
// out as q4_0_gemv_t's [block][row] lanes, and a transpose of their 128-bit
// lanes makes one vector of 16 rows per block. The rows are 16 streams read
// side by side (qgemm_decode16), where the 4-row kernel reads 4 at a time.
static void q4_0_gemv16(const uint8_t *const *w, const uint8_t *a, int64_t k,
                        const uint8_t *const *pf, float *out)
{
    const struct row_act ra = row_act_at(a, k);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i qs_words = _mm512_loadu_si512(q4_0_qs_words);
    const __m512i dw01 = _mm512_loadu_si512(q4_0_d16_words01);
    const __m512i dw23 = _mm512_loadu_si512(q4_0_d16_words23);
    const size_t step = 4 * sizeof(struct block_q4_0);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t c = 0; c < k / 128; c++) {
        if (pf) // the same 72 bytes of each next row: 2 points, no line between
            for (int r = 0; r < QGEMM_GEMV16_ROWS; r++) {
                const char *q = (const char *)pf[r] + (size_t)c * step;
                _mm_prefetch(q, _MM_HINT_T1);
                _mm_prefetch(q + step - 1, _MM_HINT_T1);
            }
        const int64_t j = 4 * c;
        const size_t off = (size_t)j * sizeof(struct block_q4_0);
        __m512i z0 = _mm512_loadu_si512(ra.q + 128 * c);
        __m512i z1 = _mm512_loadu_si512(ra.q + 128 * c + 64);
        // Per 128-bit lane i: values 0-15 (a_lo) and 16-31 (a_hi) of block j + i.
        const __m512i a_lo = _mm512_shuffle_i64x2(z0, z1, 0x88);
        const __m512i a_hi = _mm512_shuffle_i64x2(z0, z1, 0xDD);
        __m512i d01 = dw01, d23 = dw23; // the index words become the d words, pair by pair
        __m512i grp[4];                 // lane 4i + r: block j + i of row 4g + r
        UNROLL
        for (int g = 0; g < 4; g++) {
            __m512i v[4], x[4];
            UNROLL
            for (int r = 0; r < 4; r++) {
                const uint8_t *p = w[4 * g + r] + off;
                x[r] = _mm512_loadu_si512(p);
                __m512i y = _mm512_maskz_loadu_epi16(0xF, p + 64); // the row may end at byte 72
                __m512i q = _mm512_permutex2var_epi16(x[r], qs_words, y);
                __m512i lo = _mm512_and_si512(q, m4);
                __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
                v[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, a_lo),
                                           hi, a_hi);
            }
            UNROLL
            for (int h = 0; h < 2; h++) {
                const int q = 2 * g + h;
                const __mmask32 mq = (__mmask32)(0x00030003u << (2 * q));
                d01 = _mm512_mask2_permutex2var_epi16(x[2 * h], d01, mq, x[2 * h + 1]);
                d23 = _mm512_mask2_permutex2var_epi16(x[2 * h], d23, mq, x[2 * h + 1]);
            }
            grp[g] = sum_quad(sum_pair(v[0], v[1]), sum_pair(v[2], v[3]));
        }
        __m512i s[4];
        transpose_lanes4(grp, s);
        acc = gemv16_blocks4(s, d01, d23, &ra, j, 8, acc); // the nibbles are q + 8
    }
    _mm512_storeu_ps(out, acc);
}

// The 16 header bytes (d, dmin, 12 scale bytes) of 4 Q4_K super-blocks,
// decoded together as q4k_scales does one: sc[h] lane 4i + r = row r's
// d * scale of sub-block 4h + i, mn[h] the same of -dmin * min.
ALWAYS_INLINE void q4k_scales4(const struct block_q4_k *const *b, __m512 *sc, __m512 *mn)
{
    // Lane r: row r's header; scale byte q[i] is byte 4 + i.
    __m512i x = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)b[0]));
    x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)b[1]), 1);
    x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)b[2]), 2);
    x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)b[3]), 3);
    // Per lane, bytes [sc 0-3 | sc 4-7 | min 0-3 | min 4-7]: the low 6 bits of
    // q[0..3] and q[4..7], then the nibbles of q[8..11] under the top 2 bits
    // of q[0..3] (scales) and q[4..7] (mins).
    const __m512i lo_src = _mm512_broadcast_i32x4(
        _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15));
    const __m512i top_src = _mm512_broadcast_i32x4(
        _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11));
    const __m512i lo_mask = _mm512_broadcast_i32x4(
        _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
    const __m512i nib_mask = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
    __m512i p1 = _mm512_shuffle_epi8(x, lo_src), p2 = _mm512_shuffle_epi8(x, top_src);
    __m512i v = _mm512_and_si512(p1, lo_mask);
    v = _mm512_or_si512(v, _mm512_and_si512(_mm512_srli_epi16(p1, 4), nib_mask));
    v = _mm512_or_si512(v, _mm512_and_si512(_mm512_srli_epi16(p2, 2), _mm512_set1_epi8(0x30)));
    // 128-bit lane k: dword k of rows 0..3, its bytes transposed to [i][row].
    const __m512i dw = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    const __m512i tr = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    __m512i u = _mm512_shuffle_epi8(_mm512_permutexvar_epi32(dw, v), tr);
    // Words 0-15: d of row p % 4; 16-31: dmin of row p % 4 (header words 0 and 1 of lane r).
    const __m512i hw = _mm512_set_epi32(0x00190011, 0x00090001, 0x00190011, 0x00090001,
                                        0x00190011, 0x00090001, 0x00190011, 0x00090001,
                                        0x00180010, 0x00080000, 0x00180010, 0x00080000,
                                        0x00180010, 0x00080000, 0x00180010, 0x00080000);
    __m512i dd = _mm512_permutexvar_epi16(hw, x);
    __m512 d = _mm512_cvtph_ps(_mm512_castsi512_si256(dd));
    __m512 dmin = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dd, 1));
    __m512 neg_dmin = _mm512_xor_ps(dmin, _mm512_set1_ps(-0.0f));
    sc[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(u))), d);
    sc[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(u, 1))), d);
    mn[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(u, 2))),
                          neg_dmin);
    mn[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(u, 3))),
                          neg_dmin);
}

ALWAYS_INLINE void q4_k_gemv_t(const int T, const uint8_t *const *w, const uint8_t *a,
                               size_t a_stride, int64_t k, const uint8_t *pf, float *out)
{
    struct row_act ra[QGEMM_GEMV_TOKENS];
    __m128 acc[QGEMM_GEMV_TOKENS];
    UNROLL
    for (int t = 0; t < T; t++) {
        ra[t] = row_act_at(a + (size_t)t * a_stride, k);
        acc[t] = _mm_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const size_t step = 4 * sizeof(struct block_q4_k) / 2;
    for (int64_t s = 0; s < k / QK_K; s++) {
        const struct block_q4_k *b[4];
        UNROLL
        for (int r = 0; r < 4; r++)
            b[r] = (const struct block_q4_k *)w[r] + s;
        __m512 sc[2], mn[2];
        q4k_scales4(b, sc, mn);
        UNROLL
        for (int h = 0; h < 2; h++) {
            prefetch_span(pf, (size_t)(2 * s + h) * step, step);
            __m512i lo[4], hi[4];
            UNROLL
            for (int r = 0; r < 4; r++) {
                __m512i x = _mm512_loadu_si512(b[r]->qs + 64 * h);
                lo[r] = _mm512_and_si512(x, m4);
                hi[r] = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
            }
            const int64_t sub0 = 8 * s + 4 * h;
            const __m512 m = mn[h];
            UNROLL
            for (int t = 0; t < T; t++) {
                // Sub-blocks 4h..4h+3: a_lo holds 4h and 4h + 2, a_hi 4h + 1 and
                // 4h + 3, as the low and high nibbles of qs[64h..64h+63] do.
                const int8_t *aq = ra[t].q + QK_K * s + 128 * h;
                __m512i z0 = _mm512_loadu_si512(aq), z1 = _mm512_loadu_si512(aq + 64);
                __m512i a_lo = _mm512_shuffle_i64x2(z0, z1, 0x44);
                __m512i a_hi = _mm512_shuffle_i64x2(z0, z1, 0xEE);
                __m512i v[8];
                UNROLL
                for (int r = 0; r < 4; r++) {
                    v[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[r], a_lo);
                    v[4 + r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[r], a_hi);
                }
                // Lanes: [sub 4h][row], [4h + 2], [4h + 1], [4h + 3].
                __m512 f = _mm512_cvtepi32_ps(sum_groups8(v));
                // [sub 4h + i][row] in natural order.
                __m512 p = _mm512_mul_ps(sc[h], spread4_f32(ra[t].d + sub0));
                const float *as = ra[t].asum + sub0;
                const __m128 f0 = _mm512_castps512_ps128(f), f1 = _mm512_extractf32x4_ps(f, 2);
                const __m128 f2 = _mm512_extractf32x4_ps(f, 1), f3 = _mm512_extractf32x4_ps(f, 3);
                __m128 e = acc[t];
                e = _mm_fmadd_ps(f0, _mm512_castps512_ps128(p), e);
                e = _mm_fmadd_ps(_mm512_castps512_ps128(m), _mm_set1_ps(as[0]), e);
                e = _mm_fmadd_ps(f1, _mm512_extractf32x4_ps(p, 1), e);
                e = _mm_fmadd_ps(_mm512_extractf32x4_ps(m, 1), _mm_set1_ps(as[1]), e);
                e = _mm_fmadd_ps(f2, _mm512_extractf32x4_ps(p, 2), e);
                e = _mm_fmadd_ps(_mm512_extractf32x4_ps(m, 2), _mm_set1_ps(as[2]), e);
                e = _mm_fmadd_ps(f3, _mm512_extractf32x4_ps(p, 3), e);
                acc[t] = _mm_fmadd_ps(_mm512_extractf32x4_ps(m, 3), _mm_set1_ps(as[3]), e);
            }
        }
    }
    UNROLL
    for (int t = 0; t < T; t++)
        _mm_storeu_ps(out + 4 * t, acc[t]);
}

// ---- decode of a lone token over 16 rows, a row in each float lane ----

// Inside each 128-bit lane, dwords transposed: lane L of out[q] = dword q of
// lane L of y[0], y[1], y[2], y[3].
ALWAYS_INLINE void transpose_dwords4(const __m512i *y, __m512i *out)
{
    __m512i t0 = _mm512_unpacklo_epi32(y[0], y[1]), t1 = _mm512_unpackhi_epi32(y[0], y[1]);
    __m512i t2 = _mm512_unpacklo_epi32(y[2], y[3]), t3 = _mm512_unpackhi_epi32(y[2], y[3]);
    out[0] = _mm512_unpacklo_epi64(t0, t2);
    out[1] = _mm512_unpackhi_epi64(t0, t2);
    out[2] = _mm512_unpacklo_epi64(t1, t3);
    out[3] = _mm512_unpackhi_epi64(t1, t3);
}

// Dword q of the first 16 bytes of each of p[0..15] (q < 4), dword lane r from p[r].
ALWAYS_INLINE void dwords16(const void *const *p, __m512i *out)
{
    __m512i y[4];
    UNROLL
    for (int g = 0; g < 4; g++) {
        // Lane L: p[4L + g], so that after the transpose dword lane 4L + g is p[4L + g].
        __m512i x = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p[g]));
        x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)p[4 + g]), 1);
        x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)p[8 + g]), 2);
        y[g] = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)p[12 + g]), 3);
    }
    transpose_dwords4(y, out);
}

// Byte i of each dword lane, as floats.
ALWAYS_INLINE __m512 byte_ps(__m512i x, int i)
{
    __m512i v = i == 3 ? _mm512_srli_epi32(x, 24)
                       : _mm512_and_si512(_mm512_srli_epi32(x, 8 * i), _mm512_set1_epi32(0xFF));
    return _mm512_cvtepi32_ps(v);
}

// The headers of 16 Q4_K super-blocks, decoded as q4k_scales does one:
// lane r of ws[j] = d * scale j of b[r], of wm[j] = -dmin * min j.
ALWAYS_INLINE void q4k_scales16(const struct block_q4_k *const *b, __m512 *ws, __m512 *wm)
{
    __m512i h[4]; // per row: d | dmin, scales[0..3], scales[4..7], scales[8..11]
    dwords16((const void *const *)b, h);
    const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f), m4 = _mm512_set1_epi32(0x0f0f0f0f);
    const __m512i m2 = _mm512_set1_epi32(0x03030303);
    __m512i sc03 = _mm512_and_si512(h[1], m6), mn03 = _mm512_and_si512(h[2], m6);
    __m512i sc47 = _mm512_or_si512(_mm512_and_si512(h[3], m4),
                                   _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h[1], 6), m2), 4));
    __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(h[3], 4), m4),
                                   _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h[2], 6), m2), 4));
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h[0]));
    const __m512 neg_dmin = _mm512_xor_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h[0], 16))),
                                          _mm512_set1_ps(-0.0f));
    UNROLL
    for (int i = 0; i < 4; i++) {
        ws[i] = _mm512_mul_ps(byte_ps(sc03, i), d);
        ws[4 + i] = _mm512_mul_ps(byte_ps(sc47, i), d);
        wm[i] = _mm512_mul_ps(byte_ps(mn03, i), neg_dmin);
        wm[4 + i] = _mm512_mul_ps(byte_ps(mn47, i), neg_dmin);
    }
}

// Per 128-bit lane [a0 + a1, a2 + a3, b0 + b1, b2 + b3], exact for |lanes| < 2^15
// (through 16-bit words: one shuffle per two vectors instead of two).
ALWAYS_INLINE __m512i merge_pairs(__m512i a, __m512i b)
{
    return _mm512_madd_epi16(_mm512_packs_epi32(a, b), _mm512_set1_epi16(1));
}

// Of q[0..3] (group g: lane L = 4 sums of rows 4g..4g+3), the sums of lanes
// 0 + 1 in *s01 and of lanes 2 + 3 in *s23, 128-bit lane g from q[g].
ALWAYS_INLINE void fold_groups(const __m512i *q, __m512i *s01, __m512i *s23)
{
    __m512i x01 = _mm512_add_epi32(_mm512_shuffle_i64x2(q[0], q[1], 0x88),
                                   _mm512_shuffle_i64x2(q[0], q[1], 0xDD));
    __m512i x23 = _mm512_add_epi32(_mm512_shuffle_i64x2(q[2], q[3], 0x88),
                                   _mm512_shuffle_i64x2(q[2], q[3], 0xDD));
    *s01 = _mm512_shuffle_i64x2(x01, x23, 0x88);
    *s23 = _mm512_shuffle_i64x2(x01, x23, 0xDD);
}

// Q4_K: per sub-block j, acc = fma(float(isum_j), ws_j * d_b, acc), then
// acc = fma(wm_j, asum_b, acc), as the tile's lanes do. A vpdpbusd lane holds
// 4 products of nibble and activation (|.| <= 4 * 15 * 127), so the sums of
// up to 4 lanes merge exactly in 16-bit words.
static void q4_k_gemv16(const uint8_t *const *w, const uint8_t *a, int64_t k,
                        const uint8_t *const *pf, float *out)
{
    const struct row_act ra = row_act_at(a, k);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t s = 0; s < k / QK_K; s++) {
        const struct block_q4_k *b[QGEMM_GEMV16_ROWS];
        UNROLL
        for (int r = 0; r < QGEMM_GEMV16_ROWS; r++)
            b[r] = (const struct block_q4_k *)w[r] + s;
        __m512 ws[8], wm[8];
        q4k_scales16(b, ws, wm);
        UNROLL
        for (int h = 0; h < 2; h++) {
            if (pf) // the same 72 bytes of each next row: its first and last line
                for (int r = 0; r < QGEMM_GEMV16_ROWS; r++) {
                    const char *q = (const char *)pf[r] + (size_t)(2 * s + h) * (sizeof(struct block_q4_k) / 2);
                    _mm_prefetch(q, _MM_HINT_T1);
                    _mm_prefetch(q + sizeof(struct block_q4_k) / 2 - 1, _MM_HINT_T1);
                }
            // Sub-blocks 4h..4h+3: a_lo holds 4h and 4h + 2, a_hi 4h + 1 and
            // 4h + 3, as the low and high nibbles of qs[64h..64h+63] do.
            const int8_t *aq = ra.q + QK_K * s + 128 * h;
            __m512i z0 = _mm512_loadu_si512(aq), z1 = _mm512_loadu_si512(aq + 64);
            const __m512i a_lo = _mm512_shuffle_i64x2(z0, z1, 0x44);
            const __m512i a_hi = _mm512_shuffle_i64x2(z0, z1, 0xEE);
            __m512i q_lo[4], q_hi[4]; // group g, lane L: the 4 rows' sums of 16 values
            UNROLL
            for (int g = 0; g < 4; g++) {
                __m512i v[8];
                UNROLL
                for (int r = 0; r < 4; r++) {
                    __m512i x = _mm512_loadu_si512(b[4 * g + r]->qs + 64 * h);
                    v[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(x, m4), a_lo);
                    v[4 + r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                                   _mm512_and_si512(_mm512_srli_epi16(x, 4), m4), a_hi);
                }
                q_lo[g] = merge_pairs(merge_pairs(v[0], v[1]), merge_pairs(v[2], v[3]));
                q_hi[g] = merge_pairs(merge_pairs(v[4], v[5]), merge_pairs(v[6], v[7]));
            }
            __m512i sums[4]; // sub-blocks 4h + i, lane r = row r
            fold_groups(q_lo, &sums[0], &sums[2]);
            fold_groups(q_hi, &sums[1], &sums[3]);
            UNROLL
            for (int i = 0; i < 4; i++) {
                const int64_t sub = 8 * s + 4 * h + i;
                __m512 p = _mm512_mul_ps(ws[4 * h + i], _mm512_set1_ps(ra.d[sub]));
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[i]), p, acc);
                acc = _mm512_fmadd_ps(wm[4 * h + i], _mm512_set1_ps(ra.asum[sub]), acc);
            }
        }
    }
    _mm512_storeu_ps(out, acc);
}

// Of merge_pairs results p01 (rows a, b) and p23 (rows c, d): per 128-bit
// lane the 4 sums [a, b, c, d], in 32 bits.
ALWAYS_INLINE __m512i sum_merged(__m512i p01, __m512i p23)
{
    __m512 x = _mm512_castsi512_ps(p01), y = _mm512_castsi512_ps(p23);
    return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(x, y, 0x88)),
                            _mm512_castps_si512(_mm512_shuffle_ps(x, y, 0xDD)));
}

// q6_k_half for the decode kernels, one bit-select per 64 values: the qh
// bits are masked, then shifted to bits 4-5 (16-bit shifts, which move
// nothing else into a byte once masked), and merged under the nibbles.
struct q6k_sel {
    __m512i m4, lo_mask, hi_mask, lo_shl, hi_shr;
};

ALWAYS_INLINE struct q6k_sel q6k_sel_init(void)
{
    // Values 0-31 of a half take qh bits 0-1 (low nibbles) and 4-5 (high),
    // values 32-63 bits 2-3 and 6-7.
    struct q6k_sel c = {
        .m4 = _mm512_set1_epi8(0x0F),
        .lo_mask = _mm512_mask_mov_epi32(_mm512_set1_epi8(0x03), 0xFF00, _mm512_set1_epi8(0x0C)),
        .hi_mask = _mm512_mask_mov_epi32(_mm512_set1_epi8(0x30), 0xFF00, _mm512_set1_epi8((char)0xC0)),
        .lo_shl = _mm512_mask_mov_epi32(_mm512_set1_epi16(4), 0xFF00, _mm512_set1_epi16(2)),
        .hi_shr = _mm512_mask_mov_epi32(_mm512_setzero_si512(), 0xFF00, _mm512_set1_epi16(2)),
    };
    return c;
}

ALWAYS_INLINE void q6_k_half_sel(const struct q6k_sel *c, const struct block_q6_k *b, int h,
                                 __m512i *lo, __m512i *hi)
{
    __m512i x = _mm512_loadu_si512(b->ql + 64 * h);
    __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
    __m512i t_lo = _mm512_sllv_epi16(_mm512_and_si512(qh, c->lo_mask), c->lo_shl);
    __m512i t_hi = _mm512_srlv_epi16(_mm512_and_si512(qh, c->hi_mask), c->hi_shr);
    *lo = _mm512_ternarylogic_epi32(t_lo, x, c->m4, 0xF8);                        // t | (x & m4)
    *hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(x, 4), t_hi, c->m4, 0xEC);   // (x' & m4) | t
}

ALWAYS_INLINE void q6_k_gemv_t(const int T, const uint8_t *const *w, const uint8_t *a,
                               size_t a_stride, int64_t k, const uint8_t *pf, float *out)
{
    struct row_act ra[QGEMM_GEMV_TOKENS];
    const int32_t *qsum16[QGEMM_GEMV_TOKENS];
    __m128 acc[QGEMM_GEMV_TOKENS];
    UNROLL
    for (int t = 0; t < T; t++) {
        ra[t] = row_act_at(a + (size_t)t * a_stride, k);
        qsum16[t] = (const int32_t *)(a + (size_t)t * a_stride + qgemm_row_qsum16_off(k));
        acc[t] = _mm_setzero_ps();
    }
    const size_t step = 4 * sizeof(struct block_q6_k) / 2;
    const struct q6k_sel sel = q6k_sel_init();
    for (int64_t s = 0; s < k / QK_K; s++) {
        const struct block_q6_k *b[4];
        UNROLL
        for (int r = 0; r < 4; r++)
            b[r] = (const struct block_q6_k *)w[r] + s;
        // The 16 int8 scales of the 4 rows as [sub-block][row], 4 sub-blocks per vector.
        __m128i t0 = _mm_loadu_si128((const __m128i *)b[0]->scales);
        __m128i t1 = _mm_loadu_si128((const __m128i *)b[1]->scales);
        __m128i t2 = _mm_loadu_si128((const __m128i *)b[2]->scales);
        __m128i t3 = _mm_loadu_si128((const __m128i *)b[3]->scales);
        __m128i u01l = _mm_unpacklo_epi8(t0, t1), u01h = _mm_unpackhi_epi8(t0, t1);
        __m128i u23l = _mm_unpacklo_epi8(t2, t3), u23h = _mm_unpackhi_epi8(t2, t3);
        __m128i sc[4] = {_mm_unpacklo_epi16(u01l, u23l), _mm_unpackhi_epi16(u01l, u23l),
                         _mm_unpacklo_epi16(u01h, u23h), _mm_unpackhi_epi16(u01h, u23h)};
        __m512 dv = _mm512_broadcast_f32x4(_mm_cvtph_ps(
            _mm_setr_epi16((short)b[0]->d, (short)b[1]->d, (short)b[2]->d, (short)b[3]->d, 0, 0, 0, 0)));
        UNROLL
        for (int h = 0; h < 2; h++) {
            prefetch_span(pf, (size_t)(2 * s + h) * step, step);
            __m512i lo[4], hi[4]; // the 6-bit values q + 32
            UNROLL
            for (int r = 0; r < 4; r++)
                q6_k_half_sel(&sel, b[r], h, &lo[r], &hi[r]);
            __m512 ws[2];
            UNROLL
            for (int i = 0; i < 2; i++)
                ws[i] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc[2 * h + i])), dv);
            UNROLL
            for (int t = 0; t < T; t++) {
                const int8_t *aq = ra[t].q + QK_K * s + 128 * h;
                __m512i a0 = _mm512_loadu_si512(aq), a1 = _mm512_loadu_si512(aq + 64);
                __m512i v[8];
                UNROLL
                for (int r = 0; r < 4; r++) {
                    v[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[r], a0);
                    v[4 + r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[r], a1);
                }
                UNROLL
                for (int i = 0; i < 2; i++) {
                    // Sub-blocks 8h + 4i + L (128-bit lane L) of the 4 rows; a
                    // vpdpbusd lane is 4 products (|.| <= 4 * 63 * 127 < 2^15), so
                    // lane pairs merge exactly in 16-bit words.
                    const int64_t sub = 16 * s + 8 * h + 4 * i;
                    __m512i sum = sum_merged(merge_pairs(v[4 * i], v[4 * i + 1]),
                                             merge_pairs(v[4 * i + 2], v[4 * i + 3]));
                    sum = _mm512_sub_epi32(sum, _mm512_slli_epi32(spread4_i32(qsum16[t] + sub), 5));
                    // Activation blocks sub / 2: [b x 8, b + 1 x 8].
                    const float *d = ra[t].d + sub / 2;
                    __m512 ad = _mm512_mask_mov_ps(_mm512_set1_ps(d[0]), 0xFF00, _mm512_set1_ps(d[1]));
                    acc[t] = fma_lanes(acc[t], _mm512_cvtepi32_ps(sum), _mm512_mul_ps(ws[i], ad));
                }
            }
        }
    }
    UNROLL
    for (int t = 0; t < T; t++)
        _mm_storeu_ps(out + 4 * t, acc[t]);
}

// Q6_K over 16 rows, a row in each float lane: per 4-row group the sums of
// q6_k_gemv_t (sum_merged's [sub-block][row] lanes), a transpose of 128-bit
// lanes into one vector of 16 rows per sub-block, and per row and sub-block
// in order q6_k_gemv_t's steps: acc = fma(float(sum - 32 qsum16),
// (float(scale) * d) * d_act, acc).
static void q6_k_gemv16(const uint8_t *const *w, const uint8_t *a, int64_t k,
                        const uint8_t *const *pf, float *out)
{
    const struct row_act ra = row_act_at(a, k);
    const int32_t *qsum16 = (const int32_t *)(a + qgemm_row_qsum16_off(k));
    const struct q6k_sel sel = q6k_sel_init();
    __m512 acc = _mm512_setzero_ps();
    for (int64_t s = 0; s < k / QK_K; s++) {
        if (pf) // the next rows' super-block: 4 points, no line between
            for (int r = 0; r < QGEMM_GEMV16_ROWS; r++) {
                const char *q = (const char *)((const struct block_q6_k *)pf[r] + s);
                for (int o = 0; o < 4; o++)
                    _mm_prefetch(q + o * 64, _MM_HINT_T1);
                _mm_prefetch(q + sizeof(struct block_q6_k) - 1, _MM_HINT_T1);
            }
        // ws[j] lane r: row r's float(scale j) * d, sub-blocks j in 16 vectors.
        __m512 ws[16];
        UNROLL
        for (int r = 0; r < QGEMM_GEMV16_ROWS; r++) {
            const struct block_q6_k *b = (const struct block_q6_k *)w[r] + s;
            ws[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                      _mm_loadu_si128((const __m128i *)b->scales))),
                                  _mm512_set1_ps(fp16(b->d)));
        }
        avx512_transpose16(ws);
        UNROLL
        for (int h = 0; h < 2; h++) {
            const int8_t *aq = ra.q + QK_K * s + 128 * h;
            const __m512i a0 = _mm512_loadu_si512(aq), a1 = _mm512_loadu_si512(aq + 64);
            __m512i grp[2][4]; // [i][g] lane 4 L + r: sub-block 8 h + 4 i + L of row 4 g + r
            UNROLL
            for (int g = 0; g < 4; g++) {
                __m512i v[8];
                UNROLL
                for (int r = 0; r < 4; r++) {
                    __m512i lo, hi;
                    q6_k_half_sel(&sel, (const struct block_q6_k *)w[4 * g + r] + s, h, &lo, &hi);
                    v[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, a0);
                    v[4 + r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, a1);
                }
                UNROLL
                for (int i = 0; i < 2; i++)
                    grp[i][g] = sum_merged(merge_pairs(v[4 * i], v[4 * i + 1]),
                                           merge_pairs(v[4 * i + 2], v[4 * i + 3]));
            }
            UNROLL
            for (int i = 0; i < 2; i++) {
                __m512i sums[4];
                transpose_lanes4(grp[i], sums);
                UNROLL
                for (int L = 0; L < 4; L++) {
                    const int j = 8 * h + 4 * i + L; // sub-block of the super-block
                    const int64_t sub = 16 * s + j;
                    __m512i si = _mm512_sub_epi32(sums[L], _mm512_set1_epi32(qsum16[sub] * 32));
                    __m512 p = _mm512_mul_ps(ws[j], _mm512_set1_ps(ra.d[sub / 2]));
                    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), p, acc);
                }
            }
        }
    }
    _mm512_storeu_ps(out, acc);
}

// The decode kernels for 1..QGEMM_GEMV_TOKENS tokens, each a compile-time count.
#define GEMV_DISPATCH(NAME)                                                                        \
    static void NAME##_gemv(const uint8_t *const *w, const uint8_t *a, size_t a_stride,           \
                            int n_tokens, int64_t k, const uint8_t *pf, float *out)                \
    {                                                                                              \
        switch (n_tokens) {                                                                        \
        case 1: NAME##_gemv_t(1, w, a, a_stride, k, pf, out); break;                              \
        case 2: NAME##_gemv_t(2, w, a, a_stride, k, pf, out); break;                              \
        case 3: NAME##_gemv_t(3, w, a, a_stride, k, pf, out); break;                              \
        default: NAME##_gemv_t(4, w, a, a_stride, k, pf, out); break;                             \
        }                                                                                          \
    }

_Static_assert(QGEMM_GEMV_TOKENS == 4, "GEMV_DISPATCH covers 1..4 tokens");

GEMV_DISPATCH(q8_0)
GEMV_DISPATCH(q4_0)
GEMV_DISPATCH(q4_k)
GEMV_DISPATCH(q6_k)

// A group kernel's start: the T tokens' activations and its S x T
// accumulators, zero.
ALWAYS_INLINE void group_gemv_begin(const int T, const int S, const uint8_t *a, size_t a_stride,
                                    int64_t k, struct row_act *ra, __m512 acc[][QGEMM_GEMV_TOKENS])
{
    UNROLL
    for (int t = 0; t < T; t++) {
        ra[t] = row_act_at(a + (size_t)t * a_stride, k);
        UNROLL
        for (int st = 0; st < S; st++)
            acc[st][t] = _mm512_setzero_ps();
    }
}

// A group kernel's end: group st's sums for token t to out + 16 (T st + t).
ALWAYS_INLINE void group_gemv_store(const int T, const int S, __m512 acc[][QGEMM_GEMV_TOKENS],
                                    float *out)
{
    UNROLL
    for (int st = 0; st < S; st++)
        UNROLL
    for (int t = 0; t < T; t++)
        _mm512_storeu_ps(out + 16 * (T * st + t), acc[st][t]);
}

// The group kernels for 1..QGEMM_GEMV_TOKENS tokens and 1..QGEMM_GROUP_STREAMS
// groups read side by side, each a compile-time count.
#define GROUP_GEMV_CASES(NAME, S)                                                                  \
    switch (n_tokens) {                                                                            \
    case 1:                                                                                        \
        NAME##_group_gemv_t(1, S, g, a, a_stride, k, ahead, out);                                  \
        break;                                                                                     \
    case 2:                                                                                        \
        NAME##_group_gemv_t(2, S, g, a, a_stride, k, ahead, out);                                  \
        break;                                                                                     \
    case 3:                                                                                        \
        NAME##_group_gemv_t(3, S, g, a, a_stride, k, ahead, out);                                  \
        break;                                                                                     \
    default:                                                                                       \
        NAME##_group_gemv_t(4, S, g, a, a_stride, k, ahead, out);                                  \
        break;                                                                                     \
    }
// S_MAX: the most groups NAME's decode reads side by side; the other cases
// are not compiled. NAME##_group_streams carries it into the kernel table
// (group_streams), so the driver never hands this kernel more groups.
#define GROUP_GEMV_DISPATCH(NAME, S_MAX)                                                           \
    enum { NAME##_group_streams = S_MAX };                                                         \
    static void NAME##_group_gemv(const uint8_t *const *g, int n_groups, const uint8_t *a,         \
                                  size_t a_stride, int n_tokens, int64_t k, size_t ahead,          \
                                  float *out)                                                      \
    {                                                                                              \
        if (S_MAX == 1 || n_groups == 1)                                                           \
            GROUP_GEMV_CASES(NAME, 1)                                                              \
        else                                                                                       \
            GROUP_GEMV_CASES(NAME, 2)                                                              \
    }

_Static_assert(QGEMM_GROUP_STREAMS == 2, "GROUP_GEMV_DISPATCH covers 1..2 groups");

// ---- Q4_K in 16-row groups (qgemm.h, "groups"): a lane per row ----
//
// A group's super-block (QGEMM_Q4K_GROUP_SB_BYTES): d [16] and dmin [16]
// (fp16, row r at r), the 6-bit scales sc [8][16] and mins mn [8][16] as
// bytes ([sub-block][row]), then for sub-block j and h < 4 64 bytes of qs:
// byte 4r + t holds weight 32j + 8h + t of row r in its low nibble and
// weight 32j + 8h + 4 + t in its high one. So one load gives 16 rows x 8
// weights, its two nibble planes meet two broadcast activation dwords in two
// vpdpbusd, and a sub-block's sums come out one row a lane: no horizontal
// sums, no scale unpacking at run time.
#define Q4K_GROUP_SC_OFF 64
#define Q4K_GROUP_MN_OFF 192
#define Q4K_GROUP_QS_OFF 320
_Static_assert(Q4K_GROUP_QS_OFF + 8 * 4 * 64 == QGEMM_Q4K_GROUP_SB_BYTES, "Q4_K group layout");

// Of 64 bytes of 4-bit values (8 runs of 8): per run the dword whose byte t
// holds value t low and value t + 4 high.
ALWAYS_INLINE __m256i nibble_pairs(__m512i v)
{
    // Byte t of the qword | (qword >> 28): value t | value t + 4 << 4 (the
    // values fill only their low 4 bits).
    return _mm512_cvtepi64_epi32(_mm512_or_si512(v, _mm512_srli_epi64(v, 28)));
}

// rows [16] (natural Q4_K rows of k values) into one group at dst: per row
// the 32 line dwords (nibble_pairs of the values in order), then a 16 x 16
// transpose per 16 lines.
static void q4_k_group_pack(const uint8_t *const *rows, int64_t k, uint8_t *dst)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t s = 0; s < k / QK_K; s++) {
        uint8_t *g = dst + (size_t)s * QGEMM_Q4K_GROUP_SB_BYTES;
        __m512 lines[2][16]; // [half of the 32 lines][row]
        for (int r = 0; r < QGEMM_PANEL; r++) {
            const struct block_q4_k *b = (const struct block_q4_k *)rows[r] + s;
            memcpy(g + 2 * r, &b->d, 2);
            memcpy(g + 32 + 2 * r, &b->dmin, 2);
            for (int j = 0; j < 8; j++)
                kquant_scale_min(j, b->scales, g + Q4K_GROUP_SC_OFF + 16 * j + r,
                                 g + Q4K_GROUP_MN_OFF + 16 * j + r);
            // qs[32c + l]: value 64c + l low (sub-block 2c), 64c + 32 + l high (2c + 1).
            __m512i x0 = _mm512_loadu_si512(b->qs), x1 = _mm512_loadu_si512(b->qs + 64);
            __m256i sb02 = nibble_pairs(_mm512_and_si512(x0, m4));                       // j 0, 2
            __m256i sb13 = nibble_pairs(_mm512_and_si512(_mm512_srli_epi16(x0, 4), m4)); // j 1, 3
            __m256i sb46 = nibble_pairs(_mm512_and_si512(x1, m4));                       // j 4, 6
            __m256i sb57 = nibble_pairs(_mm512_and_si512(_mm512_srli_epi16(x1, 4), m4)); // j 5, 7
            // Line 4j + h: [j0 | j1 | j2 | j3] and [j4 | j5 | j6 | j7], 4 dwords
            // each; 0xD8 takes 128-bit lanes 0, 2, 1, 3.
            __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(sb02), sb13, 1);
            __m512i c = _mm512_inserti64x4(_mm512_castsi256_si512(sb46), sb57, 1);
            lines[0][r] = _mm512_castsi512_ps(_mm512_shuffle_i32x4(a, a, 0xD8));
            lines[1][r] = _mm512_castsi512_ps(_mm512_shuffle_i32x4(c, c, 0xD8));
        }
        for (int half = 0; half < 2; half++) {
            avx512_transpose16(lines[half]); // lines[half][i]: line 16 half + i, a row a lane
            for (int i = 0; i < 16; i++)
                _mm512_storeu_ps(g + Q4K_GROUP_QS_OFF + (16 * half + i) * 64, lines[half][i]);
        }
    }
}

// out[16 t + r] = dot(row r of the group at g, token t) for t < T: per row
// q4_k_gemv_t's arithmetic (per sub-block in order the exact integer sum,
// then fma(sum, sc d_w d_a, acc) and fma(-mn dmin, asum, acc)), so the bits
// are those of every other path. Fetches the bytes at pf + the bytes it
// reads (into L1) as it goes.
ALWAYS_INLINE void q4_k_group_gemv_t(const int T, const int S, const uint8_t *const *g,
                                     const uint8_t *a, size_t a_stride, int64_t k, size_t ahead,
                                     float *out)
{
    struct row_act ra[QGEMM_GEMV_TOKENS];
    __m512 acc[QGEMM_GROUP_STREAMS][QGEMM_GEMV_TOKENS];
    group_gemv_begin(T, S, a, a_stride, k, ra, acc);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t s = 0; s < k / QK_K; s++) {
        __m512 d[QGEMM_GROUP_STREAMS], neg_dmin[QGEMM_GROUP_STREAMS];
        UNROLL
        for (int st = 0; st < S; st++) {
            const uint8_t *b = g[st] + (size_t)s * QGEMM_Q4K_GROUP_SB_BYTES;
            prefetch_span(g[st] + ahead, (size_t)s * QGEMM_Q4K_GROUP_SB_BYTES,
                          QGEMM_Q4K_GROUP_SB_BYTES);
            d[st] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b));
            neg_dmin[st] =
                _mm512_xor_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + 32))),
                              _mm512_set1_ps(-0.0f));
        }
        for (int j = 0; j < 8; j++) {
            const int64_t sub = 8 * s + j;
            UNROLL
            for (int st = 0; st < S; st++) {
                const uint8_t *b = g[st] + (size_t)s * QGEMM_Q4K_GROUP_SB_BYTES;
                const __m512 sc =
                    _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                      (const __m128i *)(b + Q4K_GROUP_SC_OFF + 16 * j)))),
                                  d[st]);
                const __m512 mn =
                    _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                      (const __m128i *)(b + Q4K_GROUP_MN_OFF + 16 * j)))),
                                  neg_dmin[st]);
                __m512i lo[4], hi[4];
                UNROLL
                for (int h = 0; h < 4; h++) {
                    __m512i x = _mm512_loadu_si512(b + Q4K_GROUP_QS_OFF + (4 * j + h) * 64);
                    lo[h] = _mm512_and_si512(x, m4);
                    hi[h] = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
                }
                UNROLL
                for (int t = 0; t < T; t++) {
                    const int32_t *q = (const int32_t *)(ra[t].q + 32 * sub);
                    __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
                    UNROLL
                    for (int h = 0; h < 4; h++) {
                        i0 = _mm512_dpbusd_epi32(i0, lo[h], _mm512_set1_epi32(q[2 * h]));
                        i1 = _mm512_dpbusd_epi32(i1, hi[h], _mm512_set1_epi32(q[2 * h + 1]));
                    }
                    __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1));
                    acc[st][t] = _mm512_fmadd_ps(f, _mm512_mul_ps(sc, _mm512_set1_ps(ra[t].d[sub])),
                                                 acc[st][t]);
                    acc[st][t] = _mm512_fmadd_ps(mn, _mm512_set1_ps(ra[t].asum[sub]), acc[st][t]);
                }
            }
        }
    }
    group_gemv_store(T, S, acc, out);
}

GROUP_GEMV_DISPATCH(q4_k, 1)

// v[0..7] (lane r: row r's dword i of v[i]) as 16 rows of 8 dwords: row r's
// 32 bytes at dst + r * stride.
ALWAYS_INLINE void store_rows_16x8(const __m512i v[8], uint8_t *dst, size_t stride)
{
    __m512i t[8], u[8];
    UNROLL
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]); // lane L: rows 4L, 4L + 1 of v[i], v[i + 1]
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]); // rows 4L + 2, 4L + 3
    }
    // u[e] (e < 4) lane L: dwords 0-3 of row 4L + e; u[4 + e]: dwords 4-7.
    UNROLL
    for (int h = 0; h < 2; h++) {
        u[4 * h + 0] = _mm512_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
        u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
        u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
        u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
    }
    UNROLL
    for (int e = 0; e < 4; e++) {
        // [row e | row 4 + e] and [row 8 + e | row 12 + e], each row's two halves together.
        __m512i lo = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x44); // [u.0, u.1, u4.0, u4.1]
        __m512i hi = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xEE); // [u.2, u.3, u4.2, u4.3]
        lo = _mm512_shuffle_i32x4(lo, lo, 0xD8);                 // [u.0, u4.0, u.1, u4.1]
        hi = _mm512_shuffle_i32x4(hi, hi, 0xD8);
        _mm256_storeu_si256((__m256i *)(dst + (size_t)e * stride), _mm512_castsi512_si256(lo));
        _mm256_storeu_si256((__m256i *)(dst + (size_t)(4 + e) * stride),
                            _mm512_extracti64x4_epi64(lo, 1));
        _mm256_storeu_si256((__m256i *)(dst + (size_t)(8 + e) * stride),
                            _mm512_castsi512_si256(hi));
        _mm256_storeu_si256((__m256i *)(dst + (size_t)(12 + e) * stride),
                            _mm512_extracti64x4_epi64(hi, 1));
    }
}

// The group at g into 16 panel rows at panel, prb bytes apart (q4_k_unpack's
// panel: weights 0-15 as bytes in order, ws = sc d, wm = -mn dmin).
static void q4_k_group_unpack(const uint8_t *g, int64_t k, uint8_t *panel, size_t prb)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const struct panel_row p0 = panel_row_at(panel, k);
    for (int64_t s = 0; s < k / QK_K; s++) {
        const uint8_t *b = g + (size_t)s * QGEMM_Q4K_GROUP_SB_BYTES;
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b));
        const __m512 neg_dmin = _mm512_xor_ps(
            _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + 32))), _mm512_set1_ps(-0.0f));
        __m512i sc[8], mn[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = _mm512_castps_si512(
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                  (const __m128i *)(b + Q4K_GROUP_SC_OFF + 16 * j)))),
                              d));
            mn[j] = _mm512_castps_si512(
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                  (const __m128i *)(b + Q4K_GROUP_MN_OFF + 16 * j)))),
                              neg_dmin));
            // Sub-block j of each row: 8 dwords, lo then hi nibbles of each line.
            __m512i v[8];
            UNROLL
            for (int h = 0; h < 4; h++) {
                __m512i x = _mm512_loadu_si512(b + Q4K_GROUP_QS_OFF + (4 * j + h) * 64);
                v[2 * h] = _mm512_and_si512(x, m4);
                v[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
            }
            store_rows_16x8(v, panel + QK_K * s + 32 * j, prb);
        }
        store_rows_16x8(sc, (uint8_t *)(p0.ws + 8 * s), prb);
        store_rows_16x8(mn, (uint8_t *)(p0.wm + 8 * s), prb);
    }
}

// ---- Q6_K in 16-row groups: a lane per row ----
//
// A group's super-block (QGEMM_Q6K_GROUP_SB_BYTES): d [16] (fp16), the
// int8 scales sc [16][16] ([sub-block][row]), then for each 16-value
// sub-block j two 64-byte lines of the values' low 4 bits (line h: byte 4r +
// t holds value 16j + 8h + t of row r low, 16j + 8h + 4 + t high), and at
// the end one 64-byte line a sub-block of their top 2 bits (byte 4r + t:
// values 16j + t, + 4, + 8, + 12 at bits 0, 2, 4, 6). Values are q + 32
// (0..63), as the panel holds them.
#define Q6K_GROUP_SC_OFF 32
#define Q6K_GROUP_LO_OFF 288
#define Q6K_GROUP_HI_OFF (Q6K_GROUP_LO_OFF + 16 * 2 * 64)
_Static_assert(Q6K_GROUP_HI_OFF + 16 * 64 == QGEMM_Q6K_GROUP_SB_BYTES, "Q6_K group layout");

// rows [16] (natural Q6_K rows) into one group at dst: per row the values
// (q6_k_half), their line dwords (nibble_pairs of the low nibbles; the top
// 2 bits of 4 runs of 4 folded into one dword), then 16 x 16 transposes.
static void q6_k_group_pack(const uint8_t *const *rows, int64_t k, uint8_t *dst)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(0x03);
    for (int64_t s = 0; s < k / QK_K; s++) {
        uint8_t *g = dst + (size_t)s * QGEMM_Q6K_GROUP_SB_BYTES;
        __m512 lines[3][16]; // [low lines 0-15, 16-31, top-bit lines][row]
        for (int r = 0; r < QGEMM_PANEL; r++) {
            const struct block_q6_k *b = (const struct block_q6_k *)rows[r] + s;
            memcpy(g + 2 * r, &b->d, 2);
            for (int j = 0; j < 16; j++)
                g[Q6K_GROUP_SC_OFF + 16 * j + r] = (uint8_t)b->scales[j];
            __m512i v[4]; // values 64q .. 64q + 63: sub-blocks 4q .. 4q + 3
            q6_k_half(b, 0, &v[0], &v[1]);
            q6_k_half(b, 1, &v[2], &v[3]);
            __m256i lo[4];
            __m128i hb[4];
            for (int q = 0; q < 4; q++) {
                lo[q] = nibble_pairs(_mm512_and_si512(v[q], m4)); // lines 8q .. 8q + 7
                // Top bits x (0..3): per qword byte t = x[t] | x[t + 4] << 2,
                // then per pair of those byte t = first | second << 4.
                __m512i x = _mm512_and_si512(_mm512_srli_epi16(v[q], 4), m3);
                __m256i e = _mm512_cvtepi64_epi32(_mm512_or_si512(x, _mm512_srli_epi64(x, 30)));
                hb[q] = _mm256_cvtepi64_epi32(_mm256_or_si256(e, _mm256_srli_epi64(e, 28)));
            }
            lines[0][r] =
                _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(lo[0]), lo[1], 1));
            lines[1][r] =
                _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(lo[2]), lo[3], 1));
            __m256i h01 = _mm256_inserti128_si256(_mm256_castsi128_si256(hb[0]), hb[1], 1);
            __m256i h23 = _mm256_inserti128_si256(_mm256_castsi128_si256(hb[2]), hb[3], 1);
            lines[2][r] =
                _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(h01), h23, 1));
        }
        for (int i = 0; i < 3; i++)
            avx512_transpose16(lines[i]);
        for (int l = 0; l < 16; l++) {
            _mm512_storeu_ps(g + Q6K_GROUP_LO_OFF + l * 64, lines[0][l]);
            _mm512_storeu_ps(g + Q6K_GROUP_LO_OFF + (16 + l) * 64, lines[1][l]);
            _mm512_storeu_ps(g + Q6K_GROUP_HI_OFF + l * 64, lines[2][l]);
        }
    }
}

// Sub-block j of a Q6_K group super-block b: quad[i] lane r = row r's values
// 16j + 4i .. 16j + 4i + 3 (q + 32) as bytes.
ALWAYS_INLINE void q6_k_group_quads(const uint8_t *b, int j, __m512i quad[4])
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    __m512i x0 = _mm512_loadu_si512(b + Q6K_GROUP_LO_OFF + (2 * j) * 64);
    __m512i x1 = _mm512_loadu_si512(b + Q6K_GROUP_LO_OFF + (2 * j + 1) * 64);
    __m512i xh = _mm512_loadu_si512(b + Q6K_GROUP_HI_OFF + j * 64);
    quad[0] =
        _mm512_or_si512(_mm512_and_si512(x0, m4), _mm512_and_si512(_mm512_slli_epi16(xh, 4), m30));
    quad[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(x0, 4), m4),
                              _mm512_and_si512(_mm512_slli_epi16(xh, 2), m30));
    quad[2] = _mm512_or_si512(_mm512_and_si512(x1, m4), _mm512_and_si512(xh, m30));
    quad[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(x1, 4), m4),
                              _mm512_and_si512(_mm512_srli_epi16(xh, 2), m30));
}

// q6_k_gemv_t's arithmetic per row (per sub-block in order the exact sum of
// (q + 32) a minus 32 sum(a), then fma(sum, sc d_w d_a, acc)), one row a lane.
ALWAYS_INLINE void q6_k_group_gemv_t(const int T, const int S, const uint8_t *const *g,
                                     const uint8_t *a, size_t a_stride, int64_t k, size_t ahead,
                                     float *out)
{
    struct row_act ra[QGEMM_GEMV_TOKENS];
    const int32_t *qsum16[QGEMM_GEMV_TOKENS];
    __m512 acc[QGEMM_GROUP_STREAMS][QGEMM_GEMV_TOKENS];
    group_gemv_begin(T, S, a, a_stride, k, ra, acc);
    UNROLL
    for (int t = 0; t < T; t++)
        qsum16[t] = (const int32_t *)(a + (size_t)t * a_stride + qgemm_row_qsum16_off(k));
    for (int64_t s = 0; s < k / QK_K; s++) {
        __m512 d[QGEMM_GROUP_STREAMS];
        UNROLL
        for (int st = 0; st < S; st++) {
            const uint8_t *b = g[st] + (size_t)s * QGEMM_Q6K_GROUP_SB_BYTES;
            prefetch_span(g[st] + ahead, (size_t)s * QGEMM_Q6K_GROUP_SB_BYTES,
                          QGEMM_Q6K_GROUP_SB_BYTES);
            d[st] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b));
        }
        for (int j = 0; j < 16; j++) {
            const int64_t sub = 16 * s + j;
            UNROLL
            for (int st = 0; st < S; st++) {
                const uint8_t *b = g[st] + (size_t)s * QGEMM_Q6K_GROUP_SB_BYTES;
                const __m512 ws =
                    _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                      (const __m128i *)(b + Q6K_GROUP_SC_OFF + 16 * j)))),
                                  d[st]);
                __m512i quad[4];
                q6_k_group_quads(b, j, quad);
                UNROLL
                for (int t = 0; t < T; t++) {
                    const int32_t *q = (const int32_t *)(ra[t].q + 16 * sub);
                    __m512i i0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), quad[0],
                                                     _mm512_set1_epi32(q[0]));
                    __m512i i1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), quad[1],
                                                     _mm512_set1_epi32(q[1]));
                    i0 = _mm512_dpbusd_epi32(i0, quad[2], _mm512_set1_epi32(q[2]));
                    i1 = _mm512_dpbusd_epi32(i1, quad[3], _mm512_set1_epi32(q[3]));
                    __m512i sum = _mm512_sub_epi32(_mm512_add_epi32(i0, i1),
                                                   _mm512_set1_epi32(qsum16[t][sub] * 32));
                    acc[st][t] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(sum),
                        _mm512_mul_ps(ws, _mm512_set1_ps(ra[t].d[sub / 2])), acc[st][t]);
                }
            }
        }
    }
    group_gemv_store(T, S, acc, out);
}

GROUP_GEMV_DISPATCH(q6_k, 1)

// The group at g into 16 panel rows (q6_k_unpack's panel: the values q + 32
// as bytes in order, ws = sc d).
static void q6_k_group_unpack(const uint8_t *g, int64_t k, uint8_t *panel, size_t prb)
{
    const struct panel_row p0 = panel_row_at(panel, k);
    for (int64_t s = 0; s < k / QK_K; s++) {
        const uint8_t *b = g + (size_t)s * QGEMM_Q6K_GROUP_SB_BYTES;
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b));
        __m512i ws[16];
        for (int j = 0; j < 16; j += 2) {
            __m512i v[8];
            q6_k_group_quads(b, j, v);
            q6_k_group_quads(b, j + 1, v + 4);
            store_rows_16x8(v, panel + QK_K * s + 16 * j, prb);
        }
        for (int j = 0; j < 16; j++)
            ws[j] = _mm512_castps_si512(
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                  (const __m128i *)(b + Q6K_GROUP_SC_OFF + 16 * j)))),
                              d));
        store_rows_16x8(ws, (uint8_t *)(p0.ws + 16 * s), prb);
        store_rows_16x8(ws + 8, (uint8_t *)(p0.ws + 16 * s + 8), prb);
    }
}

// The block scales d of blocks j0 .. j0 + n - 1 (n = 4 or 8) of a group,
// blocks bb bytes apart, into the panel rows' ws.
static void group_block_scales(const uint8_t *g, size_t bb, int64_t k, int64_t j0, int n,
                               uint8_t *panel, size_t prb)
{
    __m512i ws[8];
    for (int j = 0; j < n; j++)
        ws[j] = _mm512_castps_si512(
            _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + (size_t)(j0 + j) * bb))));
    if (n == 8) {
        store_rows_16x8(ws, panel + qgemm_panel_ws_off(k) + 4 * (size_t)j0, prb);
        return;
    }
    _Alignas(64) float d[8][16];
    for (int j = 0; j < n; j++)
        _mm512_store_si512(d[j], ws[j]);
    for (int r = 0; r < QGEMM_PANEL; r++)
        for (int j = 0; j < n; j++)
            memcpy(panel + (size_t)r * prb + qgemm_panel_ws_off(k) + 4 * (size_t)(j0 + j), &d[j][r],
                   4);
}

// ---- Q8_0 in 16-row groups: a lane per row ----
//
// A group's block (QGEMM_Q80_GROUP_BLOCK_BYTES, 32 values): d [16] (fp16),
// then 8 lines of 64 bytes, line i byte 4r + t = value 4i + t of row r plus
// 128 (the panel's unsigned bytes). The tiles read a group in place
// (lanes_tile with GRP), so a Q8_0 panel is never unpacked.
_Static_assert(32 + 8 * 64 == QGEMM_Q80_GROUP_BLOCK_BYTES, "Q8_0 group layout");

static void q8_0_group_pack(const uint8_t *const *rows, int64_t k, uint8_t *dst)
{
    for (int64_t j = 0; j < k / 32; j++) {
        uint8_t *g = dst + (size_t)j * QGEMM_Q80_GROUP_BLOCK_BYTES;
        for (int r = 0; r < QGEMM_PANEL; r++) {
            const struct block_q8_0 *b = (const struct block_q8_0 *)rows[r] + j;
            memcpy(g + 2 * r, &b->d, 2);
            for (int i = 0; i < 8; i++)
                for (int t = 0; t < 4; t++)
                    g[32 + 64 * i + 4 * r + t] = (uint8_t)(b->qs[4 * i + t] ^ 0x80);
        }
    }
}

// The group at g into 16 panel rows (q8_0_unpack's panel: w + 128 as bytes,
// ws = d), for the tile units that take panels (AMX).
static void q8_0_group_unpack(const uint8_t *g, int64_t k, uint8_t *panel, size_t prb)
{
    const int64_t nb = k / 32;
    for (int64_t j = 0; j < nb; j++) {
        const uint8_t *b = g + (size_t)j * QGEMM_Q80_GROUP_BLOCK_BYTES;
        __m512i v[8];
        for (int i = 0; i < 8; i++)
            v[i] = _mm512_loadu_si512(b + 32 + 64 * i);
        store_rows_16x8(v, panel + 32 * j, prb);
    }
    for (int64_t j0 = 0; j0 < nb; j0 += 8) // k % 128 == 0: runs of 4 or 8 blocks
        group_block_scales(g, QGEMM_Q80_GROUP_BLOCK_BYTES, k, j0, nb - j0 < 8 ? (int)(nb - j0) : 8,
                           panel, prb);
}

static void q8_0_group_tile(const uint8_t *g, int64_t k, int n_groups, const uint8_t *const *a,
                            float *out, const uint8_t *pf, size_t pf_bytes)
{
    if (n_groups == 2)
        lanes_tile(4, 2, 32, false, QGEMM_Q80_GROUP_BLOCK_BYTES, g, k, a, out, pf, pf_bytes);
    else
        lanes_tile(8, 1, 32, false, QGEMM_Q80_GROUP_BLOCK_BYTES, g, k, a, out, pf, pf_bytes);
}

// ---- Q4_0 in 16-row groups: a lane per row ----
//
// A group's block (QGEMM_Q40_GROUP_BLOCK_BYTES, 32 values): d [16] (fp16),
// then 4 lines of 64 bytes, line h byte 4r + t = value 8h + t of row r in the
// low nibble and 8h + 4 + t in the high one (values q + 8, as in the file).
_Static_assert(32 + 4 * 64 == QGEMM_Q40_GROUP_BLOCK_BYTES, "Q4_0 group layout");

static void q4_0_group_pack(const uint8_t *const *rows, int64_t k, uint8_t *dst)
{
    for (int64_t j = 0; j < k / 32; j++) {
        uint8_t *g = dst + (size_t)j * QGEMM_Q40_GROUP_BLOCK_BYTES;
        for (int r = 0; r < QGEMM_PANEL; r++) {
            const struct block_q4_0 *b = (const struct block_q4_0 *)rows[r] + j;
            uint8_t v[32]; // value l: the low nibble of qs[l], l + 16 the high one
            for (int l = 0; l < 16; l++) {
                v[l] = b->qs[l] & 15;
                v[l + 16] = b->qs[l] >> 4;
            }
            memcpy(g + 2 * r, &b->d, 2);
            for (int h = 0; h < 4; h++)
                for (int t = 0; t < 4; t++)
                    g[32 + 64 * h + 4 * r + t] = (uint8_t)(v[8 * h + t] | v[8 * h + 4 + t] << 4);
        }
    }
}

// Block j's values of a Q4_0 group block b: quad[i] lane r = row r's values
// 4i .. 4i + 3 (q + 8) as bytes.
ALWAYS_INLINE void q4_0_group_quads(const uint8_t *b, __m512i quad[8])
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    UNROLL
    for (int h = 0; h < 4; h++) {
        __m512i x = _mm512_loadu_si512(b + 32 + 64 * h);
        quad[2 * h] = _mm512_and_si512(x, m4);
        quad[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
    }
}

// q8_0_gemv_t's and q4_0_gemv_t's arithmetic per row (per block in order the
// exact sum of (w + zp) a minus zp sum(a), then fma(sum, d_w d_a, acc)), one
// row a lane, for the groups of 32-value blocks: Q8_0's (nib false: 8 lines
// of bytes, zp 128) and Q4_0's (nib true: 4 lines of nibbles, zp 8).
ALWAYS_INLINE void block32_group_gemv_t(const int T, const int S, const bool nib,
                                        const uint8_t *const *g, const uint8_t *a, size_t a_stride,
                                        int64_t k, size_t ahead, float *out)
{
    const size_t bb = nib ? QGEMM_Q40_GROUP_BLOCK_BYTES : QGEMM_Q80_GROUP_BLOCK_BYTES;
    const int32_t zp = nib ? 8 : 128;
    struct row_act ra[QGEMM_GEMV_TOKENS];
    __m512 acc[QGEMM_GROUP_STREAMS][QGEMM_GEMV_TOKENS];
    group_gemv_begin(T, S, a, a_stride, k, ra, acc);
    for (int64_t j = 0; j < k / 32; j++) {
        UNROLL
        for (int st = 0; st < S; st++) {
            const uint8_t *b = g[st] + (size_t)j * bb;
            prefetch_span(g[st] + ahead, (size_t)j * bb, bb);
            const __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b));
            __m512i w[8];
            if (nib) {
                q4_0_group_quads(b, w);
            } else {
                UNROLL
                for (int i = 0; i < 8; i++)
                    w[i] = _mm512_loadu_si512(b + 32 + 64 * i);
            }
            UNROLL
            for (int t = 0; t < T; t++) {
                const int32_t *q = (const int32_t *)(ra[t].q + 32 * j);
                __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
                UNROLL
                for (int i = 0; i < 8; i += 2) {
                    i0 = _mm512_dpbusd_epi32(i0, w[i], _mm512_set1_epi32(q[i]));
                    i1 = _mm512_dpbusd_epi32(i1, w[i + 1], _mm512_set1_epi32(q[i + 1]));
                }
                __m512i sum = _mm512_sub_epi32(_mm512_add_epi32(i0, i1),
                                               _mm512_set1_epi32(ra[t].qsum[j] * zp));
                acc[st][t] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                                    _mm512_mul_ps(wd, _mm512_set1_ps(ra[t].d[j])), acc[st][t]);
            }
        }
    }
    group_gemv_store(T, S, acc, out);
}

#define q8_0_group_gemv_t(T, S, ...) block32_group_gemv_t(T, S, false, __VA_ARGS__)
#define q4_0_group_gemv_t(T, S, ...) block32_group_gemv_t(T, S, true, __VA_ARGS__)

GROUP_GEMV_DISPATCH(q8_0, 2)
GROUP_GEMV_DISPATCH(q4_0, 2)

// The group at g into 16 panel rows (q4_0_unpack's panel: q + 8 as bytes, ws = d).
static void q4_0_group_unpack(const uint8_t *g, int64_t k, uint8_t *panel, size_t prb)
{
    const int64_t nb = k / 32;
    for (int64_t j = 0; j < nb; j++) {
        __m512i v[8];
        q4_0_group_quads(g + (size_t)j * QGEMM_Q40_GROUP_BLOCK_BYTES, v);
        store_rows_16x8(v, panel + 32 * j, prb);
    }
    for (int64_t j0 = 0; j0 < nb; j0 += 8) // k % 128 == 0: runs of 4 or 8 blocks
        group_block_scales(g, QGEMM_Q40_GROUP_BLOCK_BYTES, k, j0, nb - j0 < 8 ? (int)(nb - j0) : 8,
                           panel, prb);
}

static void store_rows(const float *out, const float *bias, int n_tokens, int n_rows,
                       bool stream, float *const *y)
{
    const __mmask16 mask = (__mmask16)((1u << n_rows) - 1);
    const __m512 b = _mm512_maskz_loadu_ps(mask, bias);
    if (stream && n_rows == QGEMM_PANEL) {
        for (int c = 0; c < n_tokens; c++)
            _mm512_stream_ps(y[c], _mm512_add_ps(_mm512_loadu_ps(out + c * QGEMM_PANEL), b));
        return;
    }
    // A masked 512-bit store costs many times a plain one here: whole
    // panels (all but the last) take the plain store.
    if (n_rows == QGEMM_PANEL) {
        for (int c = 0; c < n_tokens; c++)
            _mm512_storeu_ps(y[c], _mm512_add_ps(_mm512_loadu_ps(out + c * QGEMM_PANEL), b));
        return;
    }
    for (int c = 0; c < n_tokens; c++)
        _mm512_mask_storeu_ps(y[c], mask, _mm512_add_ps(_mm512_loadu_ps(out + c * QGEMM_PANEL), b));
}

static void store_fence(void)
{
    _mm_sfence();
}

// ---- the provider ----

static const struct qgemm_kernel kernels[] = {
    {DTYPE_Q8_0, 128, 128, 32, q8_0_unpack, tile_32, q8_0_gemv, q8_0_gemv16, qgemm_amx_tile_32,
     qgemm_amx_tile_q8_0_rows, QGEMM_Q80_GROUP_BLOCK_BYTES * 4, q8_0_group_pack, q8_0_group_gemv,
     q8_0_group_unpack, q8_0_group_tile, q8_0_group_streams},
    {DTYPE_Q4_0, 128, 8, 32, q4_0_unpack, tile_32, q4_0_gemv, q4_0_gemv16, qgemm_amx_tile_32, NULL,
     QGEMM_Q40_GROUP_BLOCK_BYTES * 4, q4_0_group_pack, q4_0_group_gemv, q4_0_group_unpack, NULL,
     q4_0_group_streams},
    {DTYPE_Q4_K, QK_K, 0, 32, q4_k_unpack, tile_32_min, q4_k_gemv, q4_k_gemv16,
     qgemm_amx_tile_32_min, NULL, QGEMM_Q4K_GROUP_SB_BYTES, q4_k_group_pack, q4_k_group_gemv,
     q4_k_group_unpack, NULL, q4_k_group_streams},
    {DTYPE_Q6_K, QK_K, 32, 16, q6_k_unpack, tile_16, q6_k_gemv, q6_k_gemv16, qgemm_amx_tile_16,
     NULL, QGEMM_Q6K_GROUP_SB_BYTES, q6_k_group_pack, q6_k_group_gemv, q6_k_group_unpack, NULL,
     q6_k_group_streams},
};

const struct qgemm_isa qgemm_isa_avx512 = {
    .name = "cpu-q-gemm-avx512",
    .quantize_group = quantize_group,
    .quantize_row = quantize_row,
    .store = store_rows,
    .store_fence = store_fence,
    .kernels = kernels,
    .n_kernels = (int)(sizeof kernels / sizeof kernels[0]),
};

static bool qgemm_avx512_supports(const struct op_call *c)
{
    return qgemm_supports(&qgemm_isa_avx512, c);
}

static enum vllmc_status qgemm_avx512_run(const struct op_call *c)
{
    return qgemm_run(&qgemm_isa_avx512, c);
}

const struct op_provider cpu_qgemm_avx512_matmul = {
    .name = "cpu-q-gemm-avx512",
    .op = OP_MATMUL,
    .priority = 75,
    .supports = qgemm_avx512_supports,
    .run = qgemm_avx512_run,
};
