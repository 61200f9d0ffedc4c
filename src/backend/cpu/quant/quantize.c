// Row quantizers. The legacy types follow the reference rounding of the
// format (round half up after an offset, first largest magnitude wins), so
// they reproduce files made by llama-quantize byte for byte. The k-quants and
// IQ4 types search per sub-block for the scale (and min) with the least
// weighted squared error, then quantize the sub-block scales themselves.
#include "backend/cpu/quant/quantize.h"

#include <float.h>
#include <math.h>
#include <string.h>

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static int nearest_int(float f)
{
    return (int)lrintf(f);
}

// ---- legacy 32-weight types ----

// The value of largest magnitude (the first one on ties) and that magnitude.
static float signed_absmax(const float *x, int n, float *amax_out)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    if (amax_out)
        *amax_out = amax;
    return max;
}

void quantize_row_q4_0(const float *src, void *dst, int64_t n)
{
    struct block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / QK32; i++, b++, src += QK32) {
        const float d = signed_absmax(src, QK32, NULL) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f32_to_fp16(d);
        for (int j = 0; j < QK32 / 2; j++) {
            // The cast truncates: x * id + 8.5 is in [0.5, 16.5].
            int lo = (int)(int8_t)(src[j] * id + 8.5f);
            int hi = (int)(int8_t)(src[j + 16] * id + 8.5f);
            lo = lo > 15 ? 15 : lo;
            hi = hi > 15 ? 15 : hi;
            b->qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

static void minmax(const float *x, int n, float *min_out, float *max_out)
{
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < min)
            min = x[j];
        if (x[j] > max)
            max = x[j];
    }
    *min_out = min;
    *max_out = max;
}

void quantize_row_q4_1(const float *src, void *dst, int64_t n)
{
    struct block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / QK32; i++, b++, src += QK32) {
        float min, max;
        minmax(src, QK32, &min, &max);
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f32_to_fp16(d);
        b->m = f32_to_fp16(min);
        for (int j = 0; j < QK32 / 2; j++) {
            int lo = (int)(int8_t)((src[j] - min) * id + 0.5f);
            int hi = (int)(int8_t)((src[j + 16] - min) * id + 0.5f);
            lo = lo > 15 ? 15 : lo;
            hi = hi > 15 ? 15 : hi;
            b->qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

static void store_u32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

void quantize_row_q5_0(const float *src, void *dst, int64_t n)
{
    struct block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / QK32; i++, b++, src += QK32) {
        const float d = signed_absmax(src, QK32, NULL) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK32 / 2; j++) {
            int lo = (int)(int8_t)(src[j] * id + 16.5f);
            int hi = (int)(int8_t)(src[j + 16] * id + 16.5f);
            lo = lo > 31 ? 31 : lo;
            hi = hi > 31 ? 31 : hi;
            b->qs[j] = (uint8_t)((lo & 0xF) | (hi & 0xF) << 4);
            qh |= (uint32_t)(lo >> 4) << j | (uint32_t)(hi >> 4) << (j + 16);
        }
        store_u32(b->qh, qh);
    }
}

void quantize_row_q5_1(const float *src, void *dst, int64_t n)
{
    struct block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / QK32; i++, b++, src += QK32) {
        float min, max;
        minmax(src, QK32, &min, &max);
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f32_to_fp16(d);
        b->m = f32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK32 / 2; j++) {
            int lo = (int)(uint8_t)((src[j] - min) * id + 0.5f);
            int hi = (int)(uint8_t)((src[j + 16] - min) * id + 0.5f);
            lo = lo > 31 ? 31 : lo;
            hi = hi > 31 ? 31 : hi;
            b->qs[j] = (uint8_t)((lo & 0xF) | (hi & 0xF) << 4);
            qh |= (uint32_t)(lo >> 4) << j | (uint32_t)(hi >> 4) << (j + 16);
        }
        store_u32(b->qh, qh);
    }
}

void quantize_row_q8_0(const float *src, void *dst, int64_t n)
{
    struct block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK32; i++, b++, src += QK32) {
        float amax;
        signed_absmax(src, QK32, &amax);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f32_to_fp16(d);
        for (int j = 0; j < QK32; j++)
            b->qs[j] = (int8_t)roundf(src[j] * id);
    }
}

// ---- scale search for the k-quants ----

// Importance of each weight in a sub-block: its square plus the sub-block's
// mean square, so large weights count more but small ones are not ignored.
static void importance(const float *x, int n, float *w)
{
    float sum2 = 0.0f;
    for (int j = 0; j < n; j++)
        sum2 += x[j] * x[j];
    const float sigma2 = sum2 / (float)n;
    for (int j = 0; j < n; j++)
        w[j] = sigma2 + x[j] * x[j];
}

// Fits x ~= scale * L - mmin with L in [0, nmax] and mmin >= 0 (the min is
// never above zero, so zero stays representable), minimizing the weighted
// squared error over a sweep of candidate step sizes with a least-squares
// refit of (scale, mmin) at each. Writes L; returns scale, *mmin_out.
static float fit_scale_min(const float *x, const float *w, int n, int nmax, uint8_t *L,
                           float *mmin_out)
{
    float min = x[0], max = x[0];
    for (int j = 1; j < n; j++) {
        min = x[j] < min ? x[j] : min;
        max = x[j] > max ? x[j] : max;
    }
    if (min > 0.0f)
        min = 0.0f;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *mmin_out = -min;
        return 0.0f;
    }
    float best_scale = (max - min) / (float)nmax, best_min = min;
    float best_err = 0.0f;
    for (int j = 0; j < n; j++) {
        int l = clampi(nearest_int((x[j] - min) / best_scale), 0, nmax);
        L[j] = (uint8_t)l;
        float e = best_scale * (float)l + min - x[j];
        best_err += w[j] * e * e;
    }
    uint8_t Ltry[QK_K];
    for (int step = -10; step <= 10; step++) {
        const float iscale = ((float)nmax + 0.1f * (float)step) / (max - min);
        float sw = 0, swl = 0, swl2 = 0, swx = 0, swlx = 0;
        for (int j = 0; j < n; j++) {
            int l = clampi(nearest_int(iscale * (x[j] - min)), 0, nmax);
            Ltry[j] = (uint8_t)l;
            sw += w[j];
            swl += w[j] * (float)l;
            swl2 += w[j] * (float)(l * l);
            swx += w[j] * x[j];
            swlx += w[j] * (float)l * x[j];
        }
        const float det = sw * swl2 - swl * swl;
        if (det <= 0.0f)
            continue;
        float scale = (sw * swlx - swl * swx) / det;
        float off = (swl2 * swx - swl * swlx) / det;
        if (off > 0.0f) { // keep the min at or below zero
            off = 0.0f;
            scale = swlx / swl2;
        }
        if (scale <= 0.0f)
            continue;
        float err = 0.0f;
        for (int j = 0; j < n; j++) {
            float e = scale * (float)Ltry[j] + off - x[j];
            err += w[j] * e * e;
        }
        if (err < best_err) {
            best_err = err;
            best_scale = scale;
            best_min = off;
            memcpy(L, Ltry, (size_t)n);
        }
    }
    *mmin_out = -best_min;
    return best_scale;
}

// Fits x ~= scale * L with L in [-nmax, nmax - 1] the same way; returns scale
// (signed: it takes the sign that maps the largest magnitude to -nmax).
static float fit_scale_sym(const float *x, const float *w, int n, int nmax)
{
    float amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax == 0.0f)
        return 0.0f;
    float best_scale = 0.0f, best_err = FLT_MAX;
    // Steps 0, -1, 1, -2, 2, ...: on ties the plainest candidate wins, which
    // keeps a constant sub-block exact after its scale is quantized.
    for (int k = 0; k < 19; k++) {
        const int step = (k + 1) / 2 * (k % 2 ? -1 : 1);
        const float iscale = -((float)nmax + 0.1f * (float)step) / max;
        float swlx = 0, swl2 = 0;
        for (int j = 0; j < n; j++) {
            int l = clampi(nearest_int(iscale * x[j]), -nmax, nmax - 1);
            swlx += w[j] * (float)l * x[j];
            swl2 += w[j] * (float)(l * l);
        }
        if (swl2 <= 0.0f)
            continue;
        const float scale = swlx / swl2;
        float err = 0.0f;
        for (int j = 0; j < n; j++) {
            int l = scale != 0.0f ? clampi(nearest_int(x[j] / scale), -nmax, nmax - 1) : 0;
            float e = scale * (float)l - x[j];
            err += w[j] * e * e;
        }
        if (err < best_err) {
            best_err = err;
            best_scale = scale;
        }
    }
    return best_scale;
}

// Quantizes non-negative sub-block values v[n_sub] to integers in [0, qmax]
// with one step d = max / qmax; returns d (0 when all are 0).
static float quantize_scales_unsigned(const float *v, int n_sub, int qmax, uint8_t *q)
{
    float max = 0.0f;
    for (int j = 0; j < n_sub; j++)
        max = v[j] > max ? v[j] : max;
    const float d = max / (float)qmax;
    for (int j = 0; j < n_sub; j++)
        q[j] = (uint8_t)(d > 0.0f ? clampi(nearest_int(v[j] / d), 0, qmax) : 0);
    return d;
}

// Signed sub-block scales to integers in [-qmax, qmax - 1]: the largest
// magnitude maps to -qmax. Returns the step (0 when all are 0).
static float quantize_scales_signed(const float *v, int n_sub, int qmax, int *q)
{
    float amax;
    const float max = signed_absmax(v, n_sub, &amax);
    if (amax == 0.0f) {
        for (int j = 0; j < n_sub; j++)
            q[j] = 0;
        return 0.0f;
    }
    const float iscale = -(float)qmax / max;
    for (int j = 0; j < n_sub; j++)
        q[j] = clampi(nearest_int(iscale * v[j]), -qmax, qmax - 1);
    return 1.0f / iscale;
}

// Packs eight 6-bit scales and mins into the 12-byte Q4_K/Q5_K layout
// (the inverse of kquant_scale_min).
static void kquant_pack_scales(const uint8_t *ls, const uint8_t *lm, uint8_t *q)
{
    memset(q, 0, K_SCALE_BYTES);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            q[j] |= ls[j] & 63;
            q[j + 4] |= lm[j] & 63;
        } else {
            q[j + 4] = (uint8_t)((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
            q[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            q[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

// Q4_K / Q5_K: eight 32-sub-blocks with unsigned levels in [0, nmax].
// Writes the scales, d, dmin and the final levels L[256].
static void kquant_asym_256(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out,
                            uint8_t *scales, uint8_t *L)
{
    float w[32], sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        importance(x + 32 * j, 32, w);
        sc[j] = fit_scale_min(x + 32 * j, w, 32, nmax, L + 32 * j, &mn[j]);
    }
    uint8_t ls[8], lm[8];
    const float d = quantize_scales_unsigned(sc, 8, 63, ls);
    const float dmin = quantize_scales_unsigned(mn, 8, 63, lm);
    *d_out = f32_to_fp16(d);
    *dmin_out = f32_to_fp16(dmin);
    kquant_pack_scales(ls, lm, scales);
    // Requantize with the scales as stored, rounded through half precision.
    const float dq = fp16_to_f32(*d_out), mq = fp16_to_f32(*dmin_out);
    for (int j = 0; j < 8; j++) {
        uint8_t s, m;
        kquant_scale_min(j, scales, &s, &m);
        const float dl = dq * (float)s, ml = mq * (float)m;
        for (int k = 0; k < 32; k++) {
            int l = dl > 0.0f ? nearest_int((x[32 * j + k] + ml) / dl) : 0;
            L[32 * j + k] = (uint8_t)clampi(l, 0, nmax);
        }
    }
}

void quantize_row_q4_k(const float *src, void *dst, int64_t n)
{
    struct block_q4_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b++, src += QK_K) {
        uint8_t L[QK_K];
        kquant_asym_256(src, 15, &b->d, &b->dmin, b->scales, L);
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++)
                b->qs[32 * p + l] = (uint8_t)(L[64 * p + l] | L[64 * p + 32 + l] << 4);
    }
}

void quantize_row_q5_k(const float *src, void *dst, int64_t n)
{
    struct block_q5_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b++, src += QK_K) {
        uint8_t L[QK_K];
        kquant_asym_256(src, 31, &b->d, &b->dmin, b->scales, L);
        memset(b->qh, 0, sizeof b->qh);
        for (int p = 0; p < 4; p++) {
            for (int l = 0; l < 32; l++) {
                int lo = L[64 * p + l], hi = L[64 * p + 32 + l];
                b->qs[32 * p + l] = (uint8_t)((lo & 0xF) | (hi & 0xF) << 4);
                b->qh[l] |= (uint8_t)((lo >> 4) << (2 * p) | (hi >> 4) << (2 * p + 1));
            }
        }
    }
}

void quantize_row_q2_k(const float *src, void *dst, int64_t n)
{
    struct block_q2_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b++, src += QK_K) {
        float w[16], sc[16], mn[16];
        uint8_t L[QK_K], ls[16], lm[16];
        for (int j = 0; j < 16; j++) {
            importance(src + 16 * j, 16, w);
            sc[j] = fit_scale_min(src + 16 * j, w, 16, 3, L + 16 * j, &mn[j]);
        }
        b->d = f32_to_fp16(quantize_scales_unsigned(sc, 16, 15, ls));
        b->dmin = f32_to_fp16(quantize_scales_unsigned(mn, 16, 15, lm));
        const float dq = fp16_to_f32(b->d), mq = fp16_to_f32(b->dmin);
        for (int j = 0; j < 16; j++) {
            b->scales[j] = (uint8_t)(ls[j] | lm[j] << 4);
            const float dl = dq * (float)ls[j], ml = mq * (float)lm[j];
            for (int k = 0; k < 16; k++) {
                int l = dl > 0.0f ? nearest_int((src[16 * j + k] + ml) / dl) : 0;
                L[16 * j + k] = (uint8_t)clampi(l, 0, 3);
            }
        }
        // Weight 128 h + 32 j + l goes to bits 2j of qs[32 h + l].
        memset(b->qs, 0, sizeof b->qs);
        for (int wi = 0; wi < QK_K; wi++) {
            int h = wi / 128, j = (wi % 128) / 32, l = wi % 32;
            b->qs[32 * h + l] |= (uint8_t)(L[wi] << (2 * j));
        }
    }
}

void quantize_row_q3_k(const float *src, void *dst, int64_t n)
{
    struct block_q3_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b++, src += QK_K) {
        float w[16], sc[16];
        int ls[16];
        for (int j = 0; j < 16; j++) {
            importance(src + 16 * j, 16, w);
            sc[j] = fit_scale_sym(src + 16 * j, w, 16, 4);
        }
        b->d = f32_to_fp16(quantize_scales_signed(sc, 16, 32, ls));
        const float dq = fp16_to_f32(b->d);
        memset(b->scales, 0, sizeof b->scales);
        for (int j = 0; j < 16; j++) {
            int u = ls[j] + 32;
            if (j < 8)
                b->scales[j] |= (uint8_t)(u & 0xF);
            else
                b->scales[j - 8] |= (uint8_t)((u & 0xF) << 4);
            b->scales[8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
        }
        memset(b->qs, 0, sizeof b->qs);
        memset(b->hmask, 0, sizeof b->hmask);
        for (int wi = 0; wi < QK_K; wi++) {
            int h = wi / 128, j = (wi % 128) / 32, l = wi % 32;
            const float dl = dq * (float)ls[8 * h + 2 * j + l / 16];
            int q = dl != 0.0f ? clampi(nearest_int(src[wi] / dl), -4, 3) : 0;
            int u = q + 4;
            b->qs[32 * h + l] |= (uint8_t)((u & 3) << (2 * j));
            b->hmask[l] |= (uint8_t)((u >> 2) << (4 * h + j));
        }
    }
}

void quantize_row_q6_k(const float *src, void *dst, int64_t n)
{
    struct block_q6_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b++, src += QK_K) {
        float w[16], sc[16];
        int ls[16];
        for (int j = 0; j < 16; j++) {
            importance(src + 16 * j, 16, w);
            sc[j] = fit_scale_sym(src + 16 * j, w, 16, 32);
        }
        b->d = f32_to_fp16(quantize_scales_signed(sc, 16, 128, ls));
        const float dq = fp16_to_f32(b->d);
        for (int j = 0; j < 16; j++)
            b->scales[j] = (int8_t)ls[j];
        memset(b->ql, 0, sizeof b->ql);
        memset(b->qh, 0, sizeof b->qh);
        for (int wi = 0; wi < QK_K; wi++) {
            int h = wi / 128, g = (wi % 128) / 32, l = wi % 32;
            const float dl = dq * (float)ls[8 * h + 2 * g + l / 16];
            int u = (dl != 0.0f ? clampi(nearest_int(src[wi] / dl), -32, 31) : 0) + 32;
            b->ql[64 * h + l + 32 * (g & 1)] |= (uint8_t)((u & 0xF) << (4 * (g >> 1)));
            b->qh[32 * h + l] |= (uint8_t)((u >> 4) << (2 * g));
        }
    }
}

// ---- IQ4: a fixed non-uniform 16-level grid ----

static int iq4_nearest(float v)
{
    int best = 0;
    float best_e = fabsf(v - (float)iq4nl_values[0]);
    for (int k = 1; k < 16; k++) {
        float e = fabsf(v - (float)iq4nl_values[k]);
        if (e < best_e) {
            best_e = e;
            best = k;
        }
    }
    return best;
}

// Best scale for 32 values on the grid: candidates around max / -127, each
// refit by least squares; writes the grid indices of the winner.
static float iq4_fit(const float *x, uint8_t *idx)
{
    float amax, w[32];
    const float max = signed_absmax(x, 32, &amax);
    memset(idx, 8, 32); // iq4nl_values[8] = 1: the smallest magnitude
    if (amax == 0.0f)
        return 0.0f;
    importance(x, 32, w);
    float best_d = 0.0f, best_err = FLT_MAX;
    uint8_t cand[32];
    for (int step = -7; step <= 7; step++) {
        const float id = ((float)iq4nl_values[0] + 0.5f * (float)step) / max;
        float swvx = 0, swv2 = 0;
        for (int j = 0; j < 32; j++) {
            cand[j] = (uint8_t)iq4_nearest(id * x[j]);
            float v = (float)iq4nl_values[cand[j]];
            swvx += w[j] * v * x[j];
            swv2 += w[j] * v * v;
        }
        const float d = swv2 > 0.0f ? swvx / swv2 : 0.0f;
        float err = 0.0f;
        for (int j = 0; j < 32; j++) {
            float e = d * (float)iq4nl_values[cand[j]] - x[j];
            err += w[j] * e * e;
        }
        if (err < best_err) {
            best_err = err;
            best_d = d;
            memcpy(idx, cand, 32);
        }
    }
    return best_d;
}

static void iq4_pack(const float *x, float d, uint8_t *qs)
{
    for (int j = 0; j < 16; j++) {
        int lo = d != 0.0f ? iq4_nearest(x[j] / d) : 8;
        int hi = d != 0.0f ? iq4_nearest(x[j + 16] / d) : 8;
        qs[j] = (uint8_t)(lo | hi << 4);
    }
}

void quantize_row_iq4_nl(const float *src, void *dst, int64_t n)
{
    struct block_iq4_nl *b = dst;
    for (int64_t i = 0; i < n / QK32; i++, b++, src += QK32) {
        uint8_t idx[32];
        b->d = f32_to_fp16(iq4_fit(src, idx));
        iq4_pack(src, fp16_to_f32(b->d), b->qs);
    }
}

void quantize_row_iq4_xs(const float *src, void *dst, int64_t n)
{
    struct block_iq4_xs *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b++, src += QK_K) {
        float sc[8];
        int ls[8];
        uint8_t idx[32];
        for (int j = 0; j < 8; j++)
            sc[j] = iq4_fit(src + 32 * j, idx);
        b->d = f32_to_fp16(quantize_scales_signed(sc, 8, 32, ls));
        const float dq = fp16_to_f32(b->d);
        b->scales_h = 0;
        memset(b->scales_l, 0, sizeof b->scales_l);
        for (int j = 0; j < 8; j++) {
            int u = ls[j] + 32;
            b->scales_l[j / 2] |= (uint8_t)((u & 0xF) << (4 * (j % 2)));
            b->scales_h |= (uint16_t)((u >> 4) << (2 * j));
            iq4_pack(src + 32 * j, dq * (float)ls[j], b->qs + 16 * j);
        }
    }
}

quant_quantize_fn quant_quantize_row_fn(enum dtype t)
{
    switch (t) {
    case DTYPE_Q4_0: return quantize_row_q4_0;
    case DTYPE_Q4_1: return quantize_row_q4_1;
    case DTYPE_Q5_0: return quantize_row_q5_0;
    case DTYPE_Q5_1: return quantize_row_q5_1;
    case DTYPE_Q8_0: return quantize_row_q8_0;
    case DTYPE_Q2_K: return quantize_row_q2_k;
    case DTYPE_Q3_K: return quantize_row_q3_k;
    case DTYPE_Q4_K: return quantize_row_q4_k;
    case DTYPE_Q5_K: return quantize_row_q5_k;
    case DTYPE_Q6_K: return quantize_row_q6_k;
    case DTYPE_IQ4_NL: return quantize_row_iq4_nl;
    case DTYPE_IQ4_XS: return quantize_row_iq4_xs;
    case DTYPE_INT4G: return quantize_row_int4g;
    default: return NULL;
    }
}

// ---- activations ----

void quantize_act_a8_32(const float *src, struct block_a8_32 *dst, int64_t n)
{
    for (int64_t i = 0; i < n / QK32; i++, dst++, src += QK32) {
        float amax;
        signed_absmax(src, QK32, &amax);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK32; j++) {
            int q = nearest_int(src[j] * id);
            dst->qs[j] = (int8_t)q;
            sum += q;
        }
        dst->d = d;
        dst->s = d * (float)sum;
    }
}

void quantize_act_a8_k(const float *src, struct block_a8_k *dst, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++, dst++, src += QK_K) {
        float amax;
        signed_absmax(src, QK_K, &amax);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int j = 16 * g; j < 16 * g + 16; j++) {
                int q = nearest_int(src[j] * id);
                dst->qs[j] = (int8_t)q;
                sum += q;
            }
            dst->bsums[g] = (int16_t)sum;
        }
        dst->d = d;
    }
}
