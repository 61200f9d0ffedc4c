// The token-lane quantized tile (qgemm.h's qgemm_tile_fn) on the AMX tile
// unit: where the CPU has AMX-INT8, prefill and batched decode of Q8_0,
// Q4_0, Q4_K and Q6_K run their integer dot products as TDPBUSD, 16 panel
// rows x 16 tokens x one weight scale block per instruction, instead of 64
// products per vpdpbusd.
//
// The operands need no new layout. A panel row is the unsigned bytes
// w_i + zp (qgemm_unpack_fn), so 16 rows of one scale block (SUB bytes each,
// a panel row pitch apart) are the A tile; a token group's q section is
// [k / 4][16 tokens][4], which is the B tile's own layout (a row: 4
// consecutive values of each of 16 tokens). C [16 rows][16 tokens] int32 is
// then exactly the sum the lanes tile (qgemm_avx512.c's lanes_tile) builds
// with vpdpbusd; after it the float steps are that tile's, element for
// element, in the same block order:
//     ia  = C + corr_j                      (int32, exact)
//     acc = fma(float(ia), ws_j * d_b, acc)
//     acc = fma(wm_j, asum_b, acc)          (types with a min)
// so every output has the bits of the other tile and of the decode kernels
// (test_qmatmul's batch invariance holds across them).
//
// Q8_0 skips the panel altogether (qgemm_amx_tile_q8_0_rows): its blocks
// hold signed bytes at a fixed offset, so 16 rows' block j is an A tile
// where it lies, one row pitch apart, and TDPBSSD multiplies it signed by
// signed; the sums are (w + 128) . q - 128 sum(q) without the correction,
// the same integers. With one or two token groups a panel (batched decode)
// the copy had cost as much as the tile; the scales, converted one at a time
// in a pass of their own, still cost 13% of a 16-token product, so the tile
// gathers each block's 16 scales itself as it goes.
#include <immintrin.h>

#include "backend/cpu/avx512/avx512.h"
#include "backend/cpu/avx512/qgemm_amx.h"
#include "backend/cpu/quant/qgemm.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

// Tiles: C 0 / 1 (16 rows x 16 int32), A 4 / 5 (16 rows x SUB bytes), B 6 / 7
// (SUB / 4 rows x 64 bytes), the two sets alternating by block so that one
// block's products run while the previous block's sums are scaled.
static void amx_configure(int sub)
{
    const unsigned char rows[8] = {
        16, 16, 0, 0, 16, 16, (unsigned char)(sub / 4), (unsigned char)(sub / 4)};
    const unsigned short colsb[8] = {64, 64, 0, 0, (unsigned short)sub, (unsigned short)sub,
                                     64, 64};
    avx512_amx_configure(rows, colsb);
}

// Block j's integer sums into C tile CT from A tile AT (16 rows a_stride
// apart from a_base + j a_step) and B tile BT: unsigned panel bytes times
// signed activations, or with SIGNED_A the packed rows' own signed bytes.
#define AMX_ISSUE(CT, AT, BT, j)                                                                   \
    do {                                                                                           \
        _tile_zero(CT);                                                                            \
        _tile_loadd(AT, a_base + (size_t)(j)*a_step, a_stride);                                    \
        _tile_loadd(BT, q + (size_t)(j)*16 * SUB, 64);                                             \
        if (SIGNED_A)                                                                              \
            _tile_dpbssd(CT, AT, BT);                                                              \
        else                                                                                       \
            _tile_dpbusd(CT, AT, BT);                                                              \
    } while (0)

// Block j's sums in ci [16 rows][16 tokens] into the 16 rows' accumulators
// acc0 .. acc15 of amx_tile, with its corr (NULL: signed weights, the sums
// need no zero-point correction), ad, as, ws and wm; wsj: with SIGNED_A the
// block's 16 row scales (else the panel rows' ws serve). Named variables,
// not an array: the tile instructions are asm statements that clobber
// memory, and GCC kept an array of accumulators in memory across them, a
// load and a store per row and block (a loop over one Q8_0 panel in L1:
// 36.9 ns a block, 33.0 with the accumulators in registers).
#define AMX_SCALE_ROW(r)                                                                           \
    do {                                                                                           \
        const __m512i ia = _mm512_add_epi32(_mm512_load_si512(ci_ + 16 * (r)), c_);                \
        const float w_scale = SIGNED_A ? wsj_[r] : ws[r][j_];                                      \
        acc##r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia),                                           \
                                 _mm512_mul_ps(_mm512_set1_ps(w_scale), D_), acc##r);              \
        if (has_min)                                                                               \
            acc##r = _mm512_fmadd_ps(_mm512_set1_ps(wm[r][j_]), AS_, acc##r);                      \
    } while (0)
#define AMX_SCALE(ci_in, j_in, wsj_in)                                                             \
    do {                                                                                           \
        const int32_t *ci_ = (ci_in);                                                              \
        const int64_t j_ = (j_in);                                                                 \
        const float *wsj_ = (wsj_in);                                                              \
        const int64_t b_ = j_ * SUB / 32; /* the activation block */                               \
        const __m512i c_ = corr ? _mm512_load_si512(corr + 16 * j_) : _mm512_setzero_si512();     \
        const __m512 D_ = _mm512_load_ps(ad + 16 * b_);                                            \
        const __m512 AS_ = has_min ? _mm512_load_ps(as + 16 * b_) : _mm512_setzero_ps();           \
        AMX_SCALE_ROW(0);                                                                          \
        AMX_SCALE_ROW(1);                                                                          \
        AMX_SCALE_ROW(2);                                                                          \
        AMX_SCALE_ROW(3);                                                                          \
        AMX_SCALE_ROW(4);                                                                          \
        AMX_SCALE_ROW(5);                                                                          \
        AMX_SCALE_ROW(6);                                                                          \
        AMX_SCALE_ROW(7);                                                                          \
        AMX_SCALE_ROW(8);                                                                          \
        AMX_SCALE_ROW(9);                                                                          \
        AMX_SCALE_ROW(10);                                                                         \
        AMX_SCALE_ROW(11);                                                                         \
        AMX_SCALE_ROW(12);                                                                         \
        AMX_SCALE_ROW(13);                                                                         \
        AMX_SCALE_ROW(14);                                                                         \
        AMX_SCALE_ROW(15);                                                                         \
    } while (0)

// Block j's scales of 16 Q8_0 rows read in place, row r in lane r: the
// halves at d0 + r stride (a block's first two bytes), widened as fp16() does.
ALWAYS_INLINE __m512 q8_0_block_scales(const uint8_t *d0, __m512i row_offsets)
{
    const __m512i h = _mm512_i32gather_epi32(row_offsets, d0, 1); // the half and 2 bytes past it
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
}

// The tile over the A tiles at a_base (a_stride, a_step as AMX_ISSUE). With
// SIGNED_A these are Q8_0 rows in place, whose scales the first token group
// gathers (q8_0_block_scales) into wsb [k / 32][16 rows] for the others;
// else the scales are the panel rows'.
ALWAYS_INLINE void amx_tile(const int SUB, const bool has_min, const bool SIGNED_A,
                            const uint8_t *a_base, size_t a_stride, size_t a_step,
                            const uint8_t *panel, float *wsb, int64_t k, int n_groups,
                            const uint8_t *const *a, float *out, const uint8_t *pf, size_t pf_bytes)
{
    const size_t prb = qgemm_panel_row_bytes(k);
    const float *ws[16] = {NULL}, *wm[16] = {NULL};
    for (int r = 0; r < 16 && !SIGNED_A; r++) {
        ws[r] = (const float *)(panel + (size_t)r * prb + qgemm_panel_ws_off(k));
        wm[r] = (const float *)(panel + (size_t)r * prb + qgemm_panel_wm_off(k));
    }
    const __m512i row_offsets =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32((int)a_stride));
    // The next panel's rows into L2, a few lines a block, spread over the run.
    const int64_t steps = k / SUB;
    const size_t per_step =
        ((pf_bytes + 63) / 64 + (size_t)(steps * n_groups) - 1) / (size_t)(steps * n_groups);
    const char *pf_at = (const char *)pf, *pf_end = (const char *)pf + pf_bytes;
    int32_t ci[2][256] __attribute__((aligned(64)));
    amx_configure(SUB);
    for (int g = 0; g < n_groups; g++) {
        const uint8_t *q = a[g];
        const float *ad = (const float *)(a[g] + qgemm_group_d_off(k));
        const float *as = (const float *)(a[g] + qgemm_group_asum_off(k));
        const int32_t *corr = SIGNED_A ? NULL : (const int32_t *)(a[g] + qgemm_group_corr_off(k));
        __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4 = acc0,
               acc5 = acc0, acc6 = acc0, acc7 = acc0, acc8 = acc0, acc9 = acc0, acc10 = acc0,
               acc11 = acc0, acc12 = acc0, acc13 = acc0, acc14 = acc0, acc15 = acc0;
// Block jj's sums from C tile CT into the accumulators; the first token
// group of in-place Q8_0 rows gathers the block's scales for every group.
#define AMX_FINISH(CT, jj)                                                                         \
    do {                                                                                           \
        if (SIGNED_A && g == 0)                                                                    \
            _mm512_store_ps(wsb + 16 * (jj),                                                       \
                            q8_0_block_scales(a_base - 2 + (size_t)(jj)*a_step, row_offsets));     \
        _tile_stored(CT, ci[CT], 64);                                                              \
        AMX_SCALE(ci[CT], jj, SIGNED_A ? wsb + 16 * (jj) : NULL);                                  \
    } while (0)
        AMX_ISSUE(0, 4, 6, 0);
        for (int64_t j = 0; j < steps; j += 2) {
            for (size_t i = 0; i < 2 * per_step && pf_at < pf_end; i++, pf_at += 64)
                _mm_prefetch(pf_at, _MM_HINT_T1);
            if (j + 1 < steps)
                AMX_ISSUE(1, 5, 7, j + 1);
            AMX_FINISH(0, j);
            if (j + 1 < steps) {
                if (j + 2 < steps)
                    AMX_ISSUE(0, 4, 6, j + 2);
                AMX_FINISH(1, j + 1);
            }
        }
        // acc r lane t -> out[(16 g + t) * 16 + r].
        __m512 acc[16] = {acc0, acc1, acc2,  acc3,  acc4,  acc5,  acc6,  acc7,
                          acc8, acc9, acc10, acc11, acc12, acc13, acc14, acc15};
        avx512_transpose16(acc);
        for (int t = 0; t < 16; t++)
            _mm512_storeu_ps(out + (size_t)(16 * g + t) * QGEMM_PANEL, acc[t]);
    }
    _tile_release();
}
#undef AMX_FINISH
#undef AMX_SCALE
#undef AMX_SCALE_ROW

_Static_assert(QGEMM_PANEL == 16 && QGEMM_LANES == 16, "a tile is 16 rows x 16 tokens");

void qgemm_amx_tile_32(const uint8_t *panel, int64_t k, int n_groups, const uint8_t *const *a,
                       float *out, const uint8_t *pf, size_t pf_bytes)
{
    amx_tile(32, false, false, panel, qgemm_panel_row_bytes(k), 32, panel, NULL, k, n_groups, a,
             out, pf, pf_bytes);
}

void qgemm_amx_tile_32_min(const uint8_t *panel, int64_t k, int n_groups, const uint8_t *const *a,
                           float *out, const uint8_t *pf, size_t pf_bytes)
{
    amx_tile(32, true, false, panel, qgemm_panel_row_bytes(k), 32, panel, NULL, k, n_groups, a, out,
             pf, pf_bytes);
}

void qgemm_amx_tile_16(const uint8_t *panel, int64_t k, int n_groups, const uint8_t *const *a,
                       float *out, const uint8_t *pf, size_t pf_bytes)
{
    amx_tile(16, false, false, panel, qgemm_panel_row_bytes(k), 16, panel, NULL, k, n_groups, a,
             out, pf, pf_bytes);
}

// Q8_0 rows in place: block j of a row is its half scale and 32 signed bytes
// at 34 j + 2, so 16 rows' bytes of block j are an A tile as they lie
// (stride w_pitch), multiplied signed by signed; the integer sums equal the
// panel's (w + 128) . q - 128 sum(q) exactly.
void qgemm_amx_tile_q8_0_rows(const uint8_t *w0, size_t w_pitch, uint8_t *scratch, int64_t k,
                              int n_groups, const uint8_t *const *a, float *out, const uint8_t *pf,
                              size_t pf_bytes)
{
    amx_tile(32, false, true, w0 + 2, w_pitch, 34, NULL, (float *)scratch, k, n_groups, a, out, pf,
             pf_bytes);
}
