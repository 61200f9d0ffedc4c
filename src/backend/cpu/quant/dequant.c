// Reference dequantization, one function per GGUF block type. Each value is
// computed with the float operations of the format's definition in the same
// order (scale products first, no fused multiply-add), so the results equal
// the GGUF project's reference dequantizer bit for bit.
#include "backend/cpu/quant/dequant.h"

#include "backend/cpu/quant/blocks.h"

const int8_t iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                 1,    13,   25,  38,  53,  69,  89,  113};

static uint32_t load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// ---- legacy 32-weight types ----

void dequant_row_q4_0(const void *src, float *dst, int64_t n)
{
    const struct block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK32; i++, b++, dst += QK32) {
        const float d = fp16_to_f32(b->d);
        for (int j = 0; j < QK32 / 2; j++) {
            dst[j] = (float)((b->qs[j] & 0xF) - 8) * d;
            dst[j + 16] = (float)((b->qs[j] >> 4) - 8) * d;
        }
    }
}

void dequant_row_q4_1(const void *src, float *dst, int64_t n)
{
    const struct block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK32; i++, b++, dst += QK32) {
        const float d = fp16_to_f32(b->d);
        const float m = fp16_to_f32(b->m);
        for (int j = 0; j < QK32 / 2; j++) {
            dst[j] = (float)(b->qs[j] & 0xF) * d + m;
            dst[j + 16] = (float)(b->qs[j] >> 4) * d + m;
        }
    }
}

void dequant_row_q5_0(const void *src, float *dst, int64_t n)
{
    const struct block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK32; i++, b++, dst += QK32) {
        const float d = fp16_to_f32(b->d);
        const uint32_t qh = load_u32(b->qh);
        for (int j = 0; j < QK32 / 2; j++) {
            int lo = (b->qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
            int hi = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            dst[j] = (float)(lo - 16) * d;
            dst[j + 16] = (float)(hi - 16) * d;
        }
    }
}

void dequant_row_q5_1(const void *src, float *dst, int64_t n)
{
    const struct block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK32; i++, b++, dst += QK32) {
        const float d = fp16_to_f32(b->d);
        const float m = fp16_to_f32(b->m);
        const uint32_t qh = load_u32(b->qh);
        for (int j = 0; j < QK32 / 2; j++) {
            int lo = (b->qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
            int hi = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            dst[j] = (float)lo * d + m;
            dst[j + 16] = (float)hi * d + m;
        }
    }
}

void dequant_row_q8_0(const void *src, float *dst, int64_t n)
{
    const struct block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK32; i++, b++, dst += QK32) {
        const float d = fp16_to_f32(b->d);
        for (int j = 0; j < QK32; j++)
            dst[j] = (float)b->qs[j] * d;
    }
}

void dequant_row_iq4_nl(const void *src, float *dst, int64_t n)
{
    const struct block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / QK32; i++, b++, dst += QK32) {
        const float d = fp16_to_f32(b->d);
        for (int j = 0; j < QK32 / 2; j++) {
            dst[j] = d * (float)iq4nl_values[b->qs[j] & 0xF];
            dst[j + 16] = d * (float)iq4nl_values[b->qs[j] >> 4];
        }
    }
}

// ---- k-quants ----

void dequant_row_q2_k(const void *src, float *dst, int64_t n)
{
    const struct block_q2_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = fp16_to_f32(b->d);
        const float dmin = fp16_to_f32(b->dmin);
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = b->qs + 32 * h;
            for (int j = 0; j < 4; j++) {
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = b->scales[8 * h + 2 * j + half];
                    const float dl = d * (float)(sc & 0xF);
                    const float ml = dmin * (float)(sc >> 4);
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *dst++ = dl * (float)((q[l] >> (2 * j)) & 3) - ml;
                }
            }
        }
    }
}

// The 16 signed 6-bit scales of a Q3_K super-block (layout in blocks.h).
static void q3k_scales(const uint8_t *s, int8_t out[16])
{
    for (int i = 0; i < 16; i++) {
        int lo = i < 8 ? s[i] & 0xF : s[i - 8] >> 4;
        int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        out[i] = (int8_t)((lo | hi << 4) - 32);
    }
}

void dequant_row_q3_k(const void *src, float *dst, int64_t n)
{
    const struct block_q3_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = fp16_to_f32(b->d);
        int8_t sc[16];
        q3k_scales(b->scales, sc);
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = b->qs + 32 * h;
            for (int j = 0; j < 4; j++) {
                const uint8_t mask = (uint8_t)(1u << (4 * h + j));
                for (int half = 0; half < 2; half++) {
                    const float dl = d * (float)sc[8 * h + 2 * j + half];
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        int v = ((q[l] >> (2 * j)) & 3) - ((b->hmask[l] & mask) ? 0 : 4);
                        *dst++ = dl * (float)v;
                    }
                }
            }
        }
    }
}

void dequant_row_q4_k(const void *src, float *dst, int64_t n)
{
    const struct block_q4_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = fp16_to_f32(b->d);
        const float dmin = fp16_to_f32(b->dmin);
        for (int p = 0; p < 4; p++) {
            const uint8_t *q = b->qs + 32 * p;
            for (int hi = 0; hi < 2; hi++) {
                uint8_t sc, m;
                kquant_scale_min(2 * p + hi, b->scales, &sc, &m);
                const float d1 = d * (float)sc;
                const float m1 = dmin * (float)m;
                for (int l = 0; l < 32; l++)
                    *dst++ = d1 * (float)((q[l] >> (4 * hi)) & 0xF) - m1;
            }
        }
    }
}

void dequant_row_q5_k(const void *src, float *dst, int64_t n)
{
    const struct block_q5_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = fp16_to_f32(b->d);
        const float dmin = fp16_to_f32(b->dmin);
        for (int p = 0; p < 4; p++) {
            const uint8_t *q = b->qs + 32 * p;
            for (int hi = 0; hi < 2; hi++) {
                const int sub = 2 * p + hi;
                uint8_t sc, m;
                kquant_scale_min(sub, b->scales, &sc, &m);
                const float d1 = d * (float)sc;
                const float m1 = dmin * (float)m;
                for (int l = 0; l < 32; l++) {
                    int v = ((q[l] >> (4 * hi)) & 0xF) | (((b->qh[l] >> sub) & 1) << 4);
                    *dst++ = d1 * (float)v - m1;
                }
            }
        }
    }
}

void dequant_row_q6_k(const void *src, float *dst, int64_t n)
{
    const struct block_q6_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = fp16_to_f32(b->d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b->ql + 64 * h;
            const uint8_t *qh = b->qh + 32 * h;
            for (int g = 0; g < 4; g++) {
                for (int l = 0; l < 32; l++) {
                    int lo = (ql[l + 32 * (g & 1)] >> (4 * (g >> 1))) & 0xF;
                    int v = (lo | ((qh[l] >> (2 * g)) & 3) << 4) - 32;
                    float s = (float)b->scales[8 * h + 2 * g + l / 16];
                    *dst++ = d * s * (float)v;
                }
            }
        }
    }
}

void dequant_row_iq4_xs(const void *src, float *dst, int64_t n)
{
    const struct block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = fp16_to_f32(b->d);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            int ls = ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                     (((b->scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            const uint8_t *q = b->qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)iq4nl_values[q[j] & 0xF];
                dst[j + 16] = dl * (float)iq4nl_values[q[j] >> 4];
            }
            dst += 32;
        }
    }
}

quant_dequant_fn quant_dequant_row_fn(enum dtype t)
{
    switch (t) {
    case DTYPE_Q4_0: return dequant_row_q4_0;
    case DTYPE_Q4_1: return dequant_row_q4_1;
    case DTYPE_Q5_0: return dequant_row_q5_0;
    case DTYPE_Q5_1: return dequant_row_q5_1;
    case DTYPE_Q8_0: return dequant_row_q8_0;
    case DTYPE_Q2_K: return dequant_row_q2_k;
    case DTYPE_Q3_K: return dequant_row_q3_k;
    case DTYPE_Q4_K: return dequant_row_q4_k;
    case DTYPE_Q5_K: return dequant_row_q5_k;
    case DTYPE_Q6_K: return dequant_row_q6_k;
    case DTYPE_IQ4_NL: return dequant_row_iq4_nl;
    case DTYPE_IQ4_XS: return dequant_row_iq4_xs;
    case DTYPE_INT4G: return dequant_row_int4g;
    default: return NULL;
    }
}
