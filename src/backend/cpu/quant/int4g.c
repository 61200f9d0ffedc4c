// The INT4G weight type (AWQ/GPTQ checkpoints repacked per output row, see
// blocks.h): its reference dequantization and a min/max quantizer for tests.
// w = d * (q - z) in f32, as the formats' own dequantization computes it.
#include <math.h>

#include "backend/cpu/quant/blocks.h"
#include "backend/cpu/quant/dequant.h"
#include "backend/cpu/quant/quantize.h"

void dequant_row_int4g(const void *src, float *dst, int64_t n)
{
    const struct block_int4g *b = src;
    for (int64_t i = 0; i < n / QK32; i++, b++) {
        const float d = fp16_to_f32(b->d);
        const int z = b->z;
        for (int j = 0; j < QK32 / 2; j++) {
            dst[j] = d * (float)((b->qs[j] & 0xF) - z);
            dst[j + 16] = d * (float)((b->qs[j] >> 4) - z);
        }
        dst += QK32;
    }
}

void quantize_row_int4g(const float *src, void *dst, int64_t n)
{
    struct block_int4g *b = dst;
    for (int64_t i = 0; i < n / QK32; i++, b++, src += QK32) {
        float lo = src[0], hi = src[0];
        for (int j = 1; j < QK32; j++) {
            lo = src[j] < lo ? src[j] : lo;
            hi = src[j] > hi ? src[j] : hi;
        }
        // The range always holds 0 so that z stays inside 0..15.
        lo = lo > 0.0f ? 0.0f : lo;
        hi = hi < 0.0f ? 0.0f : hi;
        b->d = f32_to_fp16((hi - lo) / 15.0f);
        const float d = fp16_to_f32(b->d);
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        float zf = roundf(-lo * id);
        b->z = (uint8_t)(zf < 0.0f ? 0 : zf > 15.0f ? 15 : zf);
        b->pad = 0;
        for (int j = 0; j < QK32 / 2; j++) {
            int q[2];
            for (int h = 0; h < 2; h++) {
                float v = roundf(src[j + 16 * h] * id) + (float)b->z;
                q[h] = v < 0.0f ? 0 : v > 15.0f ? 15 : (int)v;
            }
            b->qs[j] = (uint8_t)(q[0] | (q[1] << 4));
        }
    }
}
