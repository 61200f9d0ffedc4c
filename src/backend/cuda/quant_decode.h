// Decoding of one 32-weight sub-block of every packed GGUF type, written once
// for two compilers: nvcc makes device functions of it for the CUDA kernels
// (quant.cu), a C compiler makes host functions of it so that a test checks
// the bit layouts against the formats' reference vectors without a GPU.
// Byte offsets and arithmetic follow cpu/quant/blocks.h and dequant.c.
#ifndef VLLMC_BACKEND_CUDA_QUANT_DECODE_H
#define VLLMC_BACKEND_CUDA_QUANT_DECODE_H

#include <stdint.h>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define QUANT_DECODE_FN static __device__ __forceinline__
#define QUANT_DECODE_UNROLL _Pragma("unroll")
#else
#include "core/dtype.h"
#define QUANT_DECODE_FN static inline
#define QUANT_DECODE_UNROLL
#endif

// The little-endian IEEE half at p (block scales; blocks are byte-aligned).
QUANT_DECODE_FN float quant_decode_half(const uint8_t *p)
{
#ifdef __CUDACC__
    return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
#else
    return fp16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
#endif
}

// The little-endian 32-bit word at p (the 5-bit types' qh, not 4-aligned).
QUANT_DECODE_FN uint32_t quant_decode_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// Byte s (< 8) of the eight bytes x (0..3), y (4..7), in the low byte of the
// result: the GPU's byte permute with one selector; the host computes that byte.
QUANT_DECODE_FN uint32_t quant_decode_byte(uint32_t x, uint32_t y, unsigned s)
{
#ifdef __CUDACC__
    return __byte_perm(x, y, s);
#else
    return ((s < 4 ? x : y) >> (8 * (s % 4))) & 0xFFu;
#endif
}

// IQ4_NL's 16 levels {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38,
// 53, 69, 89, 113} as bytes, four to a word: a byte permute picks level i
// without a memory lookup per weight.
QUANT_DECODE_FN float quant_decode_iq4nl(int i)
{
    const unsigned s = (unsigned)(i & 7);
    const uint32_t lo = quant_decode_byte(0xBFAD9881u, 0xF6EADDCFu, s);
    const uint32_t hi = quant_decode_byte(0x26190D01u, 0x71594535u, s);
    return (float)(int8_t)(uint8_t)((i & 8) ? hi : lo);
}

// Each quant_decode_<type>(b, j, v) writes the 32 weights of sub-block j of
// the block at b into v (j is 0 for the 32-weight types, < 8 for the others).

// Q4_0: d (0..1), qs (2..17); weight l (< 16) is the low nibble of qs[l],
// weight l + 16 its high nibble. w = d * (q - 8).
QUANT_DECODE_FN void quant_decode_q4_0(const uint8_t *b, int j, float *v)
{
    (void)j;
    const float d = quant_decode_half(b);
    QUANT_DECODE_UNROLL
    for (int l = 0; l < 16; l++) {
        v[l] = (float)((b[2 + l] & 0xF) - 8) * d;
        v[l + 16] = (float)((b[2 + l] >> 4) - 8) * d;
    }
}

// Q4_1: d (0..1), m (2..3), qs (4..19) as Q4_0. w = d * q + m.
QUANT_DECODE_FN void quant_decode_q4_1(const uint8_t *b, int j, float *v)
{
    (void)j;
    const float d = quant_decode_half(b), m = quant_decode_half(b + 2);
    QUANT_DECODE_UNROLL
    for (int l = 0; l < 16; l++) {
        v[l] = (float)(b[4 + l] & 0xF) * d + m;
        v[l + 16] = (float)(b[4 + l] >> 4) * d + m;
    }
}

// Q5_0: d (0..1), qh (2..5), qs (6..21); bit l of qh is bit 4 of weight l.
// w = d * (q - 16).
QUANT_DECODE_FN void quant_decode_q5_0(const uint8_t *b, int j, float *v)
{
    (void)j;
    const float d = quant_decode_half(b);
    const uint32_t qh = quant_decode_u32(b + 2);
    QUANT_DECODE_UNROLL
    for (int l = 0; l < 16; l++) {
        const int lo = (b[6 + l] & 0xF) | (int)(((qh >> l) & 1u) << 4);
        const int hi = (b[6 + l] >> 4) | (int)(((qh >> (l + 16)) & 1u) << 4);
        v[l] = (float)(lo - 16) * d;
        v[l + 16] = (float)(hi - 16) * d;
    }
}

// Q5_1: d (0..1), m (2..3), qh (4..7), qs (8..23) as Q5_0. w = d * q + m.
QUANT_DECODE_FN void quant_decode_q5_1(const uint8_t *b, int j, float *v)
{
    (void)j;
    const float d = quant_decode_half(b), m = quant_decode_half(b + 2);
    const uint32_t qh = quant_decode_u32(b + 4);
    QUANT_DECODE_UNROLL
    for (int l = 0; l < 16; l++) {
        const int lo = (b[8 + l] & 0xF) | (int)(((qh >> l) & 1u) << 4);
        const int hi = (b[8 + l] >> 4) | (int)(((qh >> (l + 16)) & 1u) << 4);
        v[l] = (float)lo * d + m;
        v[l + 16] = (float)hi * d + m;
    }
}

// Q8_0: d (0..1), int8 qs (2..33). w = d * q.
QUANT_DECODE_FN void quant_decode_q8_0(const uint8_t *b, int j, float *v)
{
    (void)j;
    const float d = quant_decode_half(b);
    QUANT_DECODE_UNROLL
    for (int l = 0; l < 32; l++)
        v[l] = (float)(int8_t)b[2 + l] * d;
}

// IQ4_NL: d (0..1), qs (2..17) placed as in Q4_0. w = d * level[q].
QUANT_DECODE_FN void quant_decode_iq4_nl(const uint8_t *b, int j, float *v)
{
    (void)j;
    const float d = quant_decode_half(b);
    QUANT_DECODE_UNROLL
    for (int l = 0; l < 16; l++) {
        v[l] = d * quant_decode_iq4nl(b[2 + l] & 0xF);
        v[l + 16] = d * quant_decode_iq4nl(b[2 + l] >> 4);
    }
}

// Q2_K: scales (0..15), qs (16..79), d (80..81), dmin (82..83). Sub-block j
// takes bits 2 (j % 4) of qs[32 (j / 4) + l]; each half of it has its own
// scale byte, 8 (j / 4) + 2 (j % 4) + l / 16, with the scale in the low
// nibble and the min in the high one. w = (d * scale) * q - (dmin * min).
QUANT_DECODE_FN void quant_decode_q2_k(const uint8_t *b, int j, float *v)
{
    const int h = j / 4, g = j % 4;
    const uint8_t *sc = b + 8 * h + 2 * g, *q = b + 16 + 32 * h;
    const float d = quant_decode_half(b + 80), dmin = quant_decode_half(b + 82);
    QUANT_DECODE_UNROLL
    for (int half = 0; half < 2; half++) {
        const float dl = d * (float)(sc[half] & 0xF), ml = dmin * (float)(sc[half] >> 4);
        QUANT_DECODE_UNROLL
        for (int l = 16 * half; l < 16 * half + 16; l++)
            v[l] = dl * (float)((q[l] >> (2 * g)) & 3) - ml;
    }
}

// Signed 6-bit scale i (< 16) of a Q3_K block: low 4 bits in nibble i / 8 of
// s[i % 8], high 2 bits at bit 2 (i / 4) of s[8 + i % 4]; minus 32.
QUANT_DECODE_FN int quant_decode_q3k_scale(const uint8_t *s, int i)
{
    const int lo = i < 8 ? s[i] & 0xF : s[i - 8] >> 4;
    const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    return (lo | hi << 4) - 32;
}

// Q3_K: hmask (0..31), qs (32..95), scales (96..107), d (108..109). The low
// 2 bits as in Q2_K; the high bit of weight 32 j + l is bit j of hmask[l], and
// its absence subtracts 4. w = (d * scale) * q.
QUANT_DECODE_FN void quant_decode_q3_k(const uint8_t *b, int j, float *v)
{
    const int h = j / 4, g = j % 4;
    const uint8_t *hm = b, *q = b + 32 + 32 * h;
    const float d = quant_decode_half(b + 108);
    const int mask = 1 << j; // 1 << (4 h + g)
    QUANT_DECODE_UNROLL
    for (int half = 0; half < 2; half++) {
        const float dl = d * (float)quant_decode_q3k_scale(b + 96, 8 * h + 2 * g + half);
        QUANT_DECODE_UNROLL
        for (int l = 16 * half; l < 16 * half + 16; l++) {
            const int q3 = ((q[l] >> (2 * g)) & 3) - ((hm[l] & mask) ? 0 : 4);
            v[l] = dl * (float)q3;
        }
    }
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (scales at s):
// for j < 4 the low 6 bits of bytes j and j + 4; above, the nibbles of byte
// j + 4 with the top 2 bits of bytes j - 4 (scale) and j (min).
QUANT_DECODE_FN void quant_decode_k4_scale_min(int j, const uint8_t *s, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Q4_K: d (0..1), dmin (2..3), scales (4..15), qs (16..143); sub-block j is
// nibble j % 2 of qs[32 (j / 2) + l]. w = (d * sc) * q - (dmin * m).
QUANT_DECODE_FN void quant_decode_q4_k(const uint8_t *b, int j, float *v)
{
    const float d = quant_decode_half(b), dmin = quant_decode_half(b + 2);
    int sc, m;
    quant_decode_k4_scale_min(j, b + 4, &sc, &m);
    const float d1 = d * (float)sc, m1 = dmin * (float)m;
    const uint8_t *q = b + 16 + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    QUANT_DECODE_UNROLL
    for (int l = 0; l < 32; l++)
        v[l] = d1 * (float)((q[l] >> shift) & 0xF) - m1;
}

// Q5_K: d (0..1), dmin (2..3), scales (4..15), qh (16..47), qs (48..175):
// Q4_K with bit j of qh[l] as bit 4 of weight 32 j + l.
QUANT_DECODE_FN void quant_decode_q5_k(const uint8_t *b, int j, float *v)
{
    const float d = quant_decode_half(b), dmin = quant_decode_half(b + 2);
    int sc, m;
    quant_decode_k4_scale_min(j, b + 4, &sc, &m);
    const float d1 = d * (float)sc, m1 = dmin * (float)m;
    const uint8_t *qh = b + 16, *q = b + 48 + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    QUANT_DECODE_UNROLL
    for (int l = 0; l < 32; l++) {
        const int q5 = ((q[l] >> shift) & 0xF) | (((qh[l] >> j) & 1) << 4);
        v[l] = d1 * (float)q5 - m1;
    }
}

// Q6_K: ql (0..127), qh (128..191), int8 scales (192..207), d (208..209).
// Weight 128 h + 32 g + l: low 4 bits from ql[64 h + 32 (g & 1) + l] (high
// nibble for g >= 2), high 2 bits at bit 2 g of qh[32 h + l]; minus 32; scale
// 8 h + 2 g + l / 16. w = (d * scale) * q.
QUANT_DECODE_FN void quant_decode_q6_k(const uint8_t *b, int j, float *v)
{
    const int h = j / 4, g = j % 4;
    const uint8_t *ql = b + 64 * h + 32 * (g & 1), *qh = b + 128 + 32 * h;
    const int8_t *sc = (const int8_t *)(b + 192) + 8 * h + 2 * g;
    const float d = quant_decode_half(b + 208);
    const int shift_l = 4 * (g >> 1), shift_h = 2 * g;
    QUANT_DECODE_UNROLL
    for (int l = 0; l < 32; l++) {
        const int lo = (ql[l] >> shift_l) & 0xF;
        const int q = (lo | ((qh[l] >> shift_h) & 3) << 4) - 32;
        v[l] = d * (float)sc[l / 16] * (float)q;
    }
}

// IQ4_XS: d (0..1), scales_h (2..3), scales_l (4..7), qs (8..135). Sub-block
// j's 6-bit scale: nibble j % 2 of scales_l[j / 2] below bits 2 j, 2 j + 1 of
// scales_h; its 16 bytes qs[16 j ..] hold IQ4_NL levels placed as in Q4_0.
// w = (d * (scale - 32)) * level[q].
QUANT_DECODE_FN void quant_decode_iq4_xs(const uint8_t *b, int j, float *v)
{
    const float d = quant_decode_half(b);
    const int scales_h = b[2] | b[3] << 8;
    const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((scales_h >> (2 * j)) & 3) << 4);
    const float dl = d * (float)(ls - 32);
    const uint8_t *q = b + 8 + 16 * j;
    QUANT_DECODE_UNROLL
    for (int l = 0; l < 16; l++) {
        v[l] = dl * quant_decode_iq4nl(q[l] & 0xF);
        v[l + 16] = dl * quant_decode_iq4nl(q[l] >> 4);
    }
}

#endif
