// Integer dot products of packed GGUF blocks with activations quantized to
// 16-bit blocks of 32 (scale d = amax / 32767, and the float sum of the
// block), for the CUDA decode GEMV (quant.cu). Written once for nvcc (device)
// and a C compiler (host), so a test checks the unpacking against the
// formats' reference vectors without a GPU. Arithmetic: 2-way int16 x int8
// dot products, one float scale per 16 weights, one float min per 32.
#ifndef VLLMC_BACKEND_CUDA_QUANT_DOT_H
#define VLLMC_BACKEND_CUDA_QUANT_DOT_H

#include <stdint.h>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define QDOT_FN static __device__ __forceinline__
#define QDOT_HD static __host__ __device__ __forceinline__
#define QDOT_UNROLL _Pragma("unroll")
#else
#include <math.h>
#include "core/dtype.h"
#include "core/status.h"
#define QDOT_FN static inline
#define QDOT_HD static inline
#define QDOT_UNROLL
#endif

// One unit of a block, 32 or 64 weights (one or two 32-weight sub-blocks),
// unpacked for byte dot products: weight 4 i + b is signed byte b of q[i] and
// meets activation byte 4 i + b. Weights 16 h .. 16 h + 15 are sc[h] * q;
// sub-block s subtracts mn[s] * (the sum of its activations). With half_mins
// (Q2_K: a min per 16 weights) a one-sub-block unit subtracts mh[h] * (the
// sum of the 16 activations) instead, from their bytes. Decoders set
// half_mins to a constant, so the compiler drops the branch.
struct qdot_unit {
    uint32_t q[16];
    float sc[4];
    float mn[2];
    float mh[2];
    int half_mins;
};

// ---- loads: blocks are byte-aligned in a file, 2-aligned where the GEMV stages them ----

// The little-endian IEEE half at p (p 2-aligned).
QDOT_FN float qdot_half(const uint8_t *p)
{
#ifdef __CUDACC__
    return __half2float(__ushort_as_half(*(const unsigned short *)p));
#else
    VLLMC_ASSERT((uintptr_t)p % 2 == 0);
    return fp16_to_f32((uint16_t)(p[0] | p[1] << 8));
#endif
}

// The little-endian word at p, p 2-aligned (two 16-bit loads).
QDOT_FN uint32_t qdot_u32_2(const uint8_t *p)
{
#ifdef __CUDACC__
    const unsigned short *h = (const unsigned short *)p;
    return (uint32_t)h[0] | (uint32_t)h[1] << 16;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
#endif
}

// The little-endian word at p, p 4-aligned (one load; the host checks the
// alignment the device needs).
QDOT_FN uint32_t qdot_u32_4(const uint8_t *p)
{
#ifdef __CUDACC__
    return *(const uint32_t *)p;
#else
    VLLMC_ASSERT((uintptr_t)p % 4 == 0);
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
#endif
}

// n consecutive little-endian words from p, p 2-aligned: on the device
// aligned loads and funnel shifts (one code path for either alignment; the
// word past the end is read only when p is not 4-aligned, so a read stays
// inside the block's 16-aligned tile).
QDOT_FN void qdot_words_2(const uint8_t *p, int n, uint32_t *out)
{
#ifdef __CUDACC__
    const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
    const unsigned sh = 8u * (unsigned)((uintptr_t)p & 3);
    uint32_t lo = a[0];
    QDOT_UNROLL
    for (int i = 0; i < n; i++) {
        const uint32_t hi = (i + 1 < n || sh) ? a[i + 1] : 0u;
        out[i] = __funnelshift_r(lo, hi, sh);
        lo = hi;
    }
#else
    VLLMC_ASSERT((uintptr_t)p % 2 == 0);
    const uint8_t *a = (const uint8_t *)((uintptr_t)p & ~(uintptr_t)3);
    const unsigned sh = 8u * (unsigned)((uintptr_t)p & 3);
    uint32_t lo = qdot_u32_4(a);
    for (int i = 0; i < n; i++) {
        const uint32_t hi = (i + 1 < n || sh) ? qdot_u32_4(a + 4 * (i + 1)) : 0u;
        out[i] = (uint32_t)((((uint64_t)hi << 32) | lo) >> sh);
        lo = hi;
    }
#endif
}

// Eight little-endian words from p, p 16-aligned (two 16-byte loads).
QDOT_FN void qdot_words8_16(const uint8_t *p, uint32_t *out)
{
#ifdef __CUDACC__
    const uint4 a = ((const uint4 *)p)[0], b = ((const uint4 *)p)[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
#else
    VLLMC_ASSERT((uintptr_t)p % 16 == 0);
    for (int i = 0; i < 8; i++)
        out[i] = qdot_u32_4(p + 4 * i);
#endif
}

// c + the dot product of the two signed 16-bit halves of a with signed bytes
// 0, 1 (lo) or 2, 3 (hi) of b.
QDOT_FN int qdot_dp2a_lo(uint32_t a, uint32_t b, int c)
{
#ifdef __CUDACC__
    return __dp2a_lo((int)a, (int)b, c);
#else
    return c + (int)(int16_t)(uint16_t)a * (int)(int8_t)(uint8_t)b +
           (int)(int16_t)(uint16_t)(a >> 16) * (int)(int8_t)(uint8_t)(b >> 8);
#endif
}

QDOT_FN int qdot_dp2a_hi(uint32_t a, uint32_t b, int c)
{
#ifdef __CUDACC__
    return __dp2a_hi((int)a, (int)b, c);
#else
    return c + (int)(int16_t)(uint16_t)a * (int)(int8_t)(uint8_t)(b >> 16) +
           (int)(int16_t)(uint16_t)(a >> 16) * (int)(int8_t)(uint8_t)(b >> 24);
#endif
}

// Each byte of q (all < 128) minus k (<= 128), wrapped to a signed byte: the
// top bit set first keeps a byte's borrow out of its neighbour.
QDOT_FN uint32_t qdot_sub_bytes(uint32_t q, uint32_t k)
{
    return ((q | 0x80808080u) - k * 0x01010101u) ^ 0x80808080u;
}

// Bits 0..3 of h moved to bit 0 of bytes 0..3 (the shifted copies do not overlap).
QDOT_FN uint32_t qdot_spread4(uint32_t h)
{
    return (h * 0x00204081u) & 0x01010101u;
}

// ---- unit decoders: qdot_unit_<type>(b, u, w) unpacks unit u of the block at b ----

QDOT_FN void qdot_scale_all(struct qdot_unit *w, float d, float m)
{
    w->sc[0] = w->sc[1] = w->sc[2] = w->sc[3] = d;
    w->mn[0] = w->mn[1] = m;
    w->mh[0] = w->mh[1] = 0.0f;
    w->half_mins = 0;
}

// The byte permute: byte b of the result is byte s_b of the eight bytes x
// (0..3), y (4..7), s_b the low 3 bits of nibble b of s.
QDOT_FN uint32_t qdot_prmt(uint32_t x, uint32_t y, uint32_t s)
{
#ifdef __CUDACC__
    return __byte_perm(x, y, s & 0x7777u);
#else
    uint32_t r = 0;
    for (int b = 0; b < 4; b++) {
        const unsigned i = (s >> (4 * b)) & 7u;
        r |= ((i < 4 ? x >> (8 * i) : y >> (8 * (i - 4))) & 0xFFu) << (8 * b);
    }
    return r;
#endif
}

// The IQ4_NL levels {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38,
// 53, 69, 89, 113} of the four indices (< 16) in the bytes of v, as signed
// bytes: two byte permutes over the table's halves, picked by index bit 3.
QDOT_FN uint32_t qdot_iq4nl_levels(uint32_t v)
{
    const uint32_t s = (v & 0xFu) | ((v >> 4) & 0xF0u) | ((v >> 8) & 0xF00u) | ((v >> 12) & 0xF000u);
    const uint32_t lo = qdot_prmt(0xBFAD9881u, 0xF6EADDCFu, s);
    const uint32_t hi = qdot_prmt(0x26190D01u, 0x71594535u, s);
    const uint32_t m = ((v >> 3) & 0x01010101u) * 0xFFu;
    return (hi & m) | (lo & ~m);
}

// Q4_0 (18 bytes): d (0..1), qs (2..17); weight l < 16 is the low nibble of
// qs[l], l + 16 the high one. w = d (q - 8). One unit.
QDOT_FN void qdot_unit_q4_0(const uint8_t *b, int u, struct qdot_unit *w)
{
    (void)u;
    uint32_t qs[4];
    qdot_words_2(b + 2, 4, qs);
    QDOT_UNROLL
    for (int i = 0; i < 4; i++) {
        const uint32_t v = qs[i];
        w->q[i] = qdot_sub_bytes(v & 0x0F0F0F0Fu, 8);
        w->q[4 + i] = qdot_sub_bytes((v >> 4) & 0x0F0F0F0Fu, 8);
    }
    qdot_scale_all(w, qdot_half(b), 0.0f);
}

// Q4_1 (20 bytes): d, m, qs (4..19) as Q4_0. w = d q + m.
QDOT_FN void qdot_unit_q4_1(const uint8_t *b, int u, struct qdot_unit *w)
{
    (void)u;
    QDOT_UNROLL
    for (int i = 0; i < 4; i++) {
        const uint32_t v = qdot_u32_4(b + 4 + 4 * i);
        w->q[i] = v & 0x0F0F0F0Fu;
        w->q[4 + i] = (v >> 4) & 0x0F0F0F0Fu;
    }
    qdot_scale_all(w, qdot_half(b), -qdot_half(b + 2));
}

// Q5_0 (22 bytes): d, qh (2..5), qs (6..21); bit l of qh is bit 4 of weight
// l. w = d (q - 16).
QDOT_FN void qdot_unit_q5_0(const uint8_t *b, int u, struct qdot_unit *w)
{
    (void)u;
    uint32_t h[5];
    qdot_words_2(b + 2, 5, h); // qh, then qs
    const uint32_t qh = h[0];
    QDOT_UNROLL
    for (int i = 0; i < 4; i++) {
        const uint32_t v = h[1 + i];
        const uint32_t lo = (v & 0x0F0F0F0Fu) | qdot_spread4((qh >> (4 * i)) & 0xFu) << 4;
        const uint32_t hi = ((v >> 4) & 0x0F0F0F0Fu) | qdot_spread4((qh >> (16 + 4 * i)) & 0xFu) << 4;
        w->q[i] = qdot_sub_bytes(lo, 16);
        w->q[4 + i] = qdot_sub_bytes(hi, 16);
    }
    qdot_scale_all(w, qdot_half(b), 0.0f);
}

// Q5_1 (24 bytes): d, m, qh (4..7), qs (8..23) as Q5_0. w = d q + m.
QDOT_FN void qdot_unit_q5_1(const uint8_t *b, int u, struct qdot_unit *w)
{
    (void)u;
    const uint32_t qh = qdot_u32_4(b + 4);
    QDOT_UNROLL
    for (int i = 0; i < 4; i++) {
        const uint32_t v = qdot_u32_4(b + 8 + 4 * i);
        w->q[i] = (v & 0x0F0F0F0Fu) | qdot_spread4((qh >> (4 * i)) & 0xFu) << 4;
        w->q[4 + i] = ((v >> 4) & 0x0F0F0F0Fu) | qdot_spread4((qh >> (16 + 4 * i)) & 0xFu) << 4;
    }
    qdot_scale_all(w, qdot_half(b), -qdot_half(b + 2));
}

// Q8_0 (34 bytes): d, int8 qs (2..33). w = d q. One unit.
QDOT_FN void qdot_unit_q8_0(const uint8_t *b, int u, struct qdot_unit *w)
{
    (void)u;
    qdot_words_2(b + 2, 8, w->q);
    qdot_scale_all(w, qdot_half(b), 0.0f);
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (scales at s).
QDOT_FN void qdot_k4_scale_min(int j, const uint8_t *s, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Scales of unit u (sub-blocks 2 u, 2 u + 1) of a Q4_K/Q5_K block.
QDOT_FN void qdot_k4_unit_scales(const uint8_t *b, int u, struct qdot_unit *w)
{
    const float d = qdot_half(b), dmin = qdot_half(b + 2);
    int sc0, m0, sc1, m1;
    qdot_k4_scale_min(2 * u, b + 4, &sc0, &m0);
    qdot_k4_scale_min(2 * u + 1, b + 4, &sc1, &m1);
    w->sc[0] = w->sc[1] = d * (float)sc0;
    w->sc[2] = w->sc[3] = d * (float)sc1;
    w->mn[0] = dmin * (float)m0;
    w->mn[1] = dmin * (float)m1;
    w->mh[0] = w->mh[1] = 0.0f;
    w->half_mins = 0;
}

// Q4_K (144 bytes, blocks 16-aligned): d, dmin, scales (4..15), qs (16..143).
// Four units of two sub-blocks: unit u is the low (sub-block 2 u) and high (2 u + 1) nibbles of
// qs[32 u ..]. w = (d sc) q - dmin m.
QDOT_FN void qdot_unit_q4_k(const uint8_t *b, int u, struct qdot_unit *w)
{
    uint32_t qs[8];
    qdot_words8_16(b + 16 + 32 * u, qs);
    QDOT_UNROLL
    for (int i = 0; i < 8; i++) {
        const uint32_t v = qs[i];
        w->q[i] = v & 0x0F0F0F0Fu;
        w->q[8 + i] = (v >> 4) & 0x0F0F0F0Fu;
    }
    qdot_k4_unit_scales(b, u, w);
}

// Q5_K (176 bytes, blocks 16-aligned): d, dmin, scales, qh (16..47), qs
// (48..175): Q4_K with bit j of qh[l] as bit 4 of weight 32 j + l.
QDOT_FN void qdot_unit_q5_k(const uint8_t *b, int u, struct qdot_unit *w)
{
    uint32_t qs[8], qh[8];
    qdot_words8_16(b + 48 + 32 * u, qs);
    qdot_words8_16(b + 16, qh);
    QDOT_UNROLL
    for (int i = 0; i < 8; i++) {
        const uint32_t v = qs[i], h = qh[i];
        w->q[i] = (v & 0x0F0F0F0Fu) | ((h >> (2 * u)) & 0x01010101u) << 4;
        w->q[8 + i] = ((v >> 4) & 0x0F0F0F0Fu) | ((h >> (2 * u + 1)) & 0x01010101u) << 4;
    }
    qdot_k4_unit_scales(b, u, w);
}

// Q6_K (210 bytes): ql (0..127), qh (128..191), int8 scales (192..207), d
// (208..209). Eight units of one sub-block j = 4 h + g: low 4 bits from
// ql[64 h + 32 (g & 1) + l] (high nibble for g >= 2), high 2 bits at bit 2 g of
// qh[32 h + l]; minus 32; scale 8 h + 2 g + l / 16. w = (d scale) q.
QDOT_FN void qdot_unit_q6_k(const uint8_t *b, int u, struct qdot_unit *w)
{
    const int h = u / 4, g = u % 4;
    const uint8_t *ql = b + 64 * h + 32 * (g & 1), *qh = b + 128 + 32 * h;
    const int shift_l = 4 * (g >> 1), shift_h = 2 * g;
    uint32_t wl[8], wh[8];
    qdot_words_2(ql, 8, wl);
    qdot_words_2(qh, 8, wh);
    QDOT_UNROLL
    for (int i = 0; i < 8; i++) {
        const uint32_t lo = (wl[i] >> shift_l) & 0x0F0F0F0Fu;
        const uint32_t hi = (wh[i] >> shift_h) & 0x03030303u;
        w->q[i] = qdot_sub_bytes(lo | hi << 4, 32);
    }
    const float d = qdot_half(b + 208);
    const int8_t *sc = (const int8_t *)(b + 192) + 8 * h + 2 * g;
    w->sc[0] = d * (float)sc[0];
    w->sc[1] = d * (float)sc[1];
    w->sc[2] = w->sc[3] = 0.0f;
    w->mn[0] = w->mn[1] = 0.0f;
    w->mh[0] = w->mh[1] = 0.0f;
    w->half_mins = 0;
}

// IQ4_NL (18 bytes): d, qs (2..17) placed as in Q4_0. w = d level[q].
QDOT_FN void qdot_unit_iq4_nl(const uint8_t *b, int u, struct qdot_unit *w)
{
    (void)u;
    uint32_t qs[4];
    qdot_words_2(b + 2, 4, qs);
    QDOT_UNROLL
    for (int i = 0; i < 4; i++) {
        w->q[i] = qdot_iq4nl_levels(qs[i] & 0x0F0F0F0Fu);
        w->q[4 + i] = qdot_iq4nl_levels((qs[i] >> 4) & 0x0F0F0F0Fu);
    }
    qdot_scale_all(w, qdot_half(b), 0.0f);
}

// IQ4_XS (136 bytes, blocks 8-aligned): d (0..1), scales_h (2..3), scales_l
// (4..7), qs (8..135). Eight units of one sub-block j: 6-bit scale from
// nibble j % 2 of scales_l[j / 2] below bits 2 j, 2 j + 1 of scales_h; its 16
// bytes qs[16 j ..] hold IQ4_NL levels placed as in Q4_0.
// w = (d (scale - 32)) level[q].
QDOT_FN void qdot_unit_iq4_xs(const uint8_t *b, int u, struct qdot_unit *w)
{
    QDOT_UNROLL
    for (int i = 0; i < 4; i++) {
        const uint32_t v = qdot_u32_4(b + 8 + 16 * u + 4 * i);
        w->q[i] = qdot_iq4nl_levels(v & 0x0F0F0F0Fu);
        w->q[4 + i] = qdot_iq4nl_levels((v >> 4) & 0x0F0F0F0Fu);
    }
    const int scales_h = b[2] | b[3] << 8;
    const int ls = ((b[4 + u / 2] >> (4 * (u % 2))) & 0xF) | (((scales_h >> (2 * u)) & 3) << 4);
    qdot_scale_all(w, qdot_half(b) * (float)(ls - 32), 0.0f);
}

// Q2_K (84 bytes, blocks 4-aligned): scales (0..15), qs (16..79), d (80..81),
// dmin (82..83). Eight units of one sub-block j = 4 h + g: bits 2 g of
// qs[16 + 32 h + l]; each half has scale byte 8 h + 2 g + l / 16, the scale in
// its low nibble, the min in its high one. w = (d scale) q - (dmin min).
QDOT_FN void qdot_unit_q2_k(const uint8_t *b, int u, struct qdot_unit *w)
{
    const int h = u / 4, g = u % 4;
    QDOT_UNROLL
    for (int i = 0; i < 8; i++)
        w->q[i] = (qdot_u32_4(b + 16 + 32 * h + 4 * i) >> (2 * g)) & 0x03030303u;
    const float d = qdot_half(b + 80), dmin = qdot_half(b + 82);
    const uint8_t *sc = b + 8 * h + 2 * g;
    w->sc[0] = d * (float)(sc[0] & 0xF);
    w->sc[1] = d * (float)(sc[1] & 0xF);
    w->sc[2] = w->sc[3] = 0.0f;
    w->mn[0] = w->mn[1] = 0.0f;
    w->mh[0] = dmin * (float)(sc[0] >> 4);
    w->mh[1] = dmin * (float)(sc[1] >> 4);
    w->half_mins = 1;
}

// Q3_K (110 bytes): hmask (0..31), qs (32..95), scales (96..107), d
// (108..109). Eight units of one sub-block j = 4 h + g: the low 2 bits as in
// Q2_K (qs[32 h + l]); bit j of hmask[l] is the high bit, whose absence
// subtracts 4; signed 6-bit scale 8 h + 2 g + l / 16 (quant_decode_q3k_scale).
// w = (d scale) q.
QDOT_FN void qdot_unit_q3_k(const uint8_t *b, int u, struct qdot_unit *w)
{
    const int h = u / 4, g = u % 4;
    uint32_t ql[8], hm[8];
    qdot_words_2(b + 32 + 32 * h, 8, ql);
    qdot_words_2(b, 8, hm);
    QDOT_UNROLL
    for (int i = 0; i < 8; i++) {
        const uint32_t lo = (ql[i] >> (2 * g)) & 0x03030303u;
        const uint32_t hi = (hm[i] >> u) & 0x01010101u;
        w->q[i] = qdot_sub_bytes(lo | hi << 2, 4);
    }
    const float d = qdot_half(b + 108);
    const uint8_t *s = b + 96;
    QDOT_UNROLL
    for (int half = 0; half < 2; half++) {
        const int i = 8 * h + 2 * g + half;
        const int lo = i < 8 ? s[i] & 0xF : s[i - 8] >> 4;
        const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        w->sc[half] = d * (float)((lo | hi << 4) - 32);
    }
    w->sc[2] = w->sc[3] = 0.0f;
    w->mn[0] = w->mn[1] = 0.0f;
    w->mh[0] = w->mh[1] = 0.0f;
    w->half_mins = 0;
}

// ---- the GEMV's walk over a row ----

// Every type with a unit decoder: dtype, decoder, units a block, sub-blocks a
// unit, blocks a tile (64 units, a multiple of 16 bytes; tile bytes noted).
#define QDOT_TYPES(X)                                                                              \
    X(DTYPE_Q4_0, qdot_unit_q4_0, 1, 1, 64)  /* 1152 */                                            \
    X(DTYPE_Q4_1, qdot_unit_q4_1, 1, 1, 64)  /* 1280 */                                            \
    X(DTYPE_Q5_0, qdot_unit_q5_0, 1, 1, 64)  /* 1408 */                                            \
    X(DTYPE_Q5_1, qdot_unit_q5_1, 1, 1, 64)  /* 1536 */                                            \
    X(DTYPE_Q8_0, qdot_unit_q8_0, 1, 1, 64)  /* 2176 */                                            \
    X(DTYPE_Q4_K, qdot_unit_q4_k, 4, 2, 16)  /* 2304 */                                            \
    X(DTYPE_Q5_K, qdot_unit_q5_k, 4, 2, 16)  /* 2816 */                                            \
    X(DTYPE_Q6_K, qdot_unit_q6_k, 8, 1, 8)   /* 1680 */                                            \
    X(DTYPE_IQ4_NL, qdot_unit_iq4_nl, 1, 1, 64) /* 1152 */                                         \
    X(DTYPE_IQ4_XS, qdot_unit_iq4_xs, 8, 1, 8)  /* 1088 */                                         \
    X(DTYPE_Q2_K, qdot_unit_q2_k, 8, 1, 8)   /* 672 */                                             \
    X(DTYPE_Q3_K, qdot_unit_q3_k, 8, 1, 8)   /* 880 */

// Tile t (of tile_bytes, a multiple of 16) of a row that starts at an
// address with misalignment mis (row_addr % 16) and is row_bytes long: the
// 16-byte pieces that cover it start at row offset first (<= t tile_bytes,
// 16-aligned in memory), n16 of them; the tile's bytes start mis bytes into
// the first piece.
struct qdot_span {
    int64_t first;
    int n16, mis, bytes;
};

QDOT_FN struct qdot_span qdot_tile_span(uintptr_t row_addr, int64_t row_bytes, int t,
                                        int tile_bytes)
{
    struct qdot_span sp;
    sp.mis = (int)(row_addr & 15);
    const int64_t left = row_bytes - (int64_t)t * tile_bytes;
    sp.bytes = (int)(left < tile_bytes ? left : tile_bytes);
    sp.n16 = (sp.mis + sp.bytes + 15) / 16;
    sp.first = (int64_t)t * tile_bytes - sp.mis;
    return sp;
}

// Where the GEMV keeps activation e of a token (k of them, 16-bit): units of
// unit_weights (32 or 64) go in groups of 8, a group's 16-byte pieces (8
// activations) piece-major, so the eight lanes of a 16-byte shared-memory
// load phase (consecutive units, the same piece) read 128 contiguous bytes,
// no bank conflicts. An element index; a token takes qdot_x_elems(k).
QDOT_HD int qdot_x_offset(int e, int unit_weights)
{
    const int u = e / unit_weights, p = (e % unit_weights) / 8;
    return ((u / 8) * (unit_weights / 8) + p) * 64 + (u % 8) * 8 + e % 8;
}

QDOT_HD int qdot_x_elems(int k, int unit_weights)
{
    return (k + 8 * unit_weights - 1) / (8 * unit_weights) * (8 * unit_weights);
}

// ---- the dot product ----

// Sum over the unit's `subs` sub-blocks (1 or 2) of w * x for one token: xw the
// unit's activations, two to a word (word j holds activations 2 j, 2 j + 1);
// xd, xs each sub-block's scale and float sum.
QDOT_FN float qdot_unit_dot(const struct qdot_unit *w, int subs, const uint32_t *xw,
                            const float *xd, const float *xs)
{
    float r = 0.0f;
    QDOT_UNROLL
    for (int s = 0; s < subs; s++) {
        int i0 = 0, i1 = 0;
        QDOT_UNROLL
        for (int i = 0; i < 4; i++) {
            i0 = qdot_dp2a_lo(xw[16 * s + 2 * i], w->q[8 * s + i], i0);
            i0 = qdot_dp2a_hi(xw[16 * s + 2 * i + 1], w->q[8 * s + i], i0);
            i1 = qdot_dp2a_lo(xw[16 * s + 8 + 2 * i], w->q[8 * s + 4 + i], i1);
            i1 = qdot_dp2a_hi(xw[16 * s + 8 + 2 * i + 1], w->q[8 * s + 4 + i], i1);
        }
        r += xd[s] * (w->sc[2 * s] * (float)i0 + w->sc[2 * s + 1] * (float)i1) - w->mn[s] * xs[s];
    }
    if (w->half_mins) {
        int s0 = 0, s1 = 0;
        QDOT_UNROLL
        for (int i = 0; i < 8; i++) {
            s0 = qdot_dp2a_lo(xw[i], 0x00000101u, s0);
            s1 = qdot_dp2a_lo(xw[8 + i], 0x00000101u, s1);
        }
        r -= xd[0] * (w->mh[0] * (float)s0 + w->mh[1] * (float)s1);
    }
    return r;
}

#ifndef __CUDACC__
// The activations' 16-bit blocks as the GEMV makes them (host copy of its
// formula, for tests): q = round(x * 32767 / amax), d = amax / 32767, s = sum x.
static inline void qdot_quantize32(const float *x, int16_t *q, float *d, float *s)
{
    float amax = 0.0f, sum = 0.0f;
    for (int l = 0; l < 32; l++) {
        amax = fmaxf(amax, fabsf(x[l]));
        sum += x[l];
    }
    const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
    for (int l = 0; l < 32; l++)
        q[l] = (int16_t)lrintf(x[l] * inv);
    *d = amax / 32767.0f;
    *s = sum;
}
#endif

#endif
