// AVX-512 (F, BW, VL) providers, compiled with those flags and listed only
// when the CPU has them.
#ifndef VLLMC_BACKEND_CPU_AVX512_AVX512_H
#define VLLMC_BACKEND_CPU_AVX512_AVX512_H

#include <stddef.h>

#include "backend/op.h"

#define CPU_AVX512_PRIORITY 60

extern const struct op_provider cpu_avx512_matmul;
extern const struct op_provider cpu_avx512bf16_matmul; // needs AVX512_BF16 too
extern const struct op_provider cpu_amx_bf16_matmul;   // needs AMX-TILE and AMX-BF16 too
// The calls cpu-avx512bf16 takes: f32 rows of x and y, dense bf16 weight
// rows, an even k, a plain-float bias; cpu-amx-bf16 takes a subset.
bool avx512bf16_matmul_supports(const struct op_call *c);
extern const struct op_provider cpu_avx512_attention;

#ifdef __AVX512F__
#include <immintrin.h>

// 16 values (fewer under mask m) of dtype (f32, f16 or bf16) at p as f32;
// masked-off lanes are 0.
static inline __attribute__((always_inline)) __m512 avx512_load16(int dtype, const void *p,
                                                                  __mmask16 m)
{
    if (dtype == DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
    if (dtype == DTYPE_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
    return _mm512_maskz_loadu_ps(m, p);
}

// avx512_sums16's first two levels for the four vectors v4 = v[4p .. 4p + 3]:
// lanes i + i+8, then + i+4, with v[4p + j] in 128-bit lane j. A caller
// that has a quad's vectors early reduces them at once (the same bits).
static inline __attribute__((always_inline)) __m512 avx512_sums16_quad(const __m512 *v4)
{
    __m512 s1[2];
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++) { // lanes i + i+8: v4[2p] in 0..7, v4[2p+1] in 8..15
        __m512 a = v4[2 * p], b = v4[2 * p + 1];
        s1[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    }
    return _mm512_add_ps(_mm512_shuffle_f32x4(s1[0], s1[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(s1[0], s1[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// The rest of avx512_sums16's tree from its four quads s2 [4]: lane i of the
// result = the sum of the 16 lanes of v[i].
static inline __attribute__((always_inline)) __m512 avx512_sums16_finish(const __m512 *s2)
{
    __m512 s3[2];
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++) { // + lanes i+2: per 128-bit lane j, v[8p + j] then v[8p + 4 + j]
        __m512d a = _mm512_castps_pd(s2[2 * p]), b = _mm512_castps_pd(s2[2 * p + 1]);
        s3[p] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                              _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    // + lane i+1: lane 4j + t holds the sum of v[4t + j].
    __m512 s4 = _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, s4);
}

// out[i] (and lane i of the result; lanes from n on are 0) = the sum of the
// 16 lanes of v[i] for i < n (n <= 16), four vectors
// at a time through shuffles: about 3 instructions per sum instead of 8. Every
// sum adds its lanes in one fixed tree, ((e[i] + e[i+8]) + (e[i+4] + e[i+12]))
// for i < 4 and so on, whatever n is and whichever vectors share the call, so
// a dot product's result never depends on the tile it was computed in.
static inline __attribute__((always_inline)) __m512 avx512_sums16(const __m512 *v, int n,
                                                                  float *out)
{
    __m512 z = _mm512_setzero_ps(), w[16], s2[4];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        w[i] = i < n ? v[i] : z;
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++)
        s2[p] = avx512_sums16_quad(w + 4 * p);
    __m512 sums = avx512_sums16_finish(s2);
    if (out)
        _mm512_mask_storeu_ps(out, (__mmask16)((1u << n) - 1u), sums);
    return sums;
}

// Lane i = the largest lane of v[i], for 16 vectors: avx512_sums16's
// transposed reduction with max for add (a maximum is exact in any order).
static inline __attribute__((always_inline)) __m512 avx512_max16(const __m512 *v)
{
    __m512 s1[8], s2[4], s3[2];
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        const __m512 a = v[2 * p], b = v[2 * p + 1];
        s1[p] = _mm512_max_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        const __m512 a = s1[2 * p], b = s1[2 * p + 1];
        s2[p] = _mm512_max_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    }
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++) {
        __m512d a = _mm512_castps_pd(s2[2 * p]), b = _mm512_castps_pd(s2[2 * p + 1]);
        s3[p] = _mm512_max_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                              _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    __m512 s4 = _mm512_max_ps(_mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, s4);
}

// Decode (one row of x): a tile's C weight rows stream from memory once,
// each a short stream the hardware prefetcher picks up late. Byte off of each
// row of the next tile (next, rows with the same stride: w[c] + ahead, ahead
// = next - w[0]) is fetched into L2 while this tile computes.
static inline __attribute__((always_inline)) void
avx512_prefetch_next_tile(const int C, const void *const *w, ptrdiff_t ahead, size_t off)
{
#pragma GCC unroll 8
    for (int c = 0; c < C; c++)
        _mm_prefetch((const char *)w[c] + ahead + off, _MM_HINT_T1);
}

// Decode (one row of x) reads a block of n adjacent weight rows as 8
// streams of G = n / 8 adjacent rows each: pass g computes rows c * G + g
// for c < 8 (8 accumulators, the loads of 8 rows in flight) and fetches each
// stream's next row into L2 as it goes. Each stream is then G rows of
// memory in order (tens of KiB), which the hardware prefetcher keeps up
// with; 8 rows side by side, as a tile reads them, are 8 streams of one row
// each (2 KiB for bf16 at k = 1024) that it never gets going on: 16-bit
// decode read ~25% less per second than the probe's 8 long streams.
// Which rows share a pass never changes a row's result.
//
// The 8 dot products of pass g (acc[c] for block row c * G + g) to
// y[c * G + g] + bias[c * G + g]: the sum tree and the add of
// avx512_store_rows, so the bits of a tile.
static inline __attribute__((always_inline)) void avx512_store_pass(const __m512 *acc, int G,
                                                                    int g, float *y,
                                                                    const float *bias)
{
    float s[16];
    _mm512_storeu_ps(s, avx512_sums16(acc, 8, NULL));
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++)
        y[c * G + g] = s[c] + bias[c * G + g];
}

// The dot products of an R x C tile (R * C <= 32), flat r * C + c in lanes
// of sums [2], to their rows: y[r][c] = sums + bias[c] for c < C. One
// permute per row brings its C sums to lanes 0..C-1.
static inline __attribute__((always_inline)) void
avx512_store_rows(const int R, const int C, const __m512 *sums, float *const *y, const float *bias)
{
    __mmask16 mc = (__mmask16)((1u << C) - 1u);
    __m512 b = _mm512_maskz_loadu_ps(mc, bias);
    __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        __m512 v = r == 0 ? sums[0]
                          : _mm512_permutex2var_ps(
                                sums[0], _mm512_add_epi32(lane, _mm512_set1_epi32(r * C)), sums[1]);
        _mm512_mask_storeu_ps(y[r], mc, _mm512_add_ps(v, b));
    }
}

// AMX tile configuration (palette 1) of tiles 0..7: rows and bytes a row
// (0, 0: unused). ldtilecfg takes the whole 64-byte block as its operand:
// GCC 12's _tile_loadconfig names only its first 8 bytes, so the compiler
// may drop or sink the stores of the rest (seen: tilezero faulting on a
// half-written configuration). For the AMX files, after the CPU check.
static inline void avx512_amx_configure(const unsigned char rows[8], const unsigned short colsb[8])
{
    struct {
        unsigned char palette, start_row, reserved[14];
        unsigned short colsb[16];
        unsigned char rows[16];
    } cfg = {.palette = 1};
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = rows[t];
        cfg.colsb[t] = colsb[t];
    }
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

// 16 x 16 floats: r[i] lane j -> r[j] lane i.
static inline __attribute__((always_inline)) void avx512_transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // Per 128-bit lane L, rows a..d = 4g..4g + 3: t[4g] = [a0 b0 a1 b1],
    // t[4g + 1] = [a2 b2 a3 b3], the same of c, d in t[4g + 2], t[4g + 3];
    // r[4g + e] = [a_e b_e c_e d_e], element e of the lane (column 4L + e).
    for (int g = 0; g < 16; g += 4) {
        const __m512d t0 = _mm512_castps_pd(t[g]), t1 = _mm512_castps_pd(t[g + 1]);
        const __m512d t2 = _mm512_castps_pd(t[g + 2]), t3 = _mm512_castps_pd(t[g + 3]);
        r[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        r[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        r[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        r[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    // Column 4L + e is lane L of r[e], r[4 + e], r[8 + e], r[12 + e] (rows
    // 0-3, 4-7, 8-11, 12-15): a 4 x 4 transpose of 128-bit lanes per e.
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xDD);
        t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xDD);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
        r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
        r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xDD);
    }
}

#endif

#endif
