// The dtype -> f32 row converter table. A quantized format adds its entry here
// and its function under src/backend/cpu/quant/.
#include "backend/cpu/quant.h"

#include <string.h>

#include "backend/cpu/quant/dequant.h"

static void dequant_row_f32(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void dequant_row_f16(const void *src, float *dst, int64_t n)
{
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = fp16_to_f32(s[i]);
}

static void dequant_row_bf16(const void *src, float *dst, int64_t n)
{
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = bf16_to_f32(s[i]);
}

static const dequant_row_fn dequant_rows[DTYPE_COUNT] = {
    [DTYPE_F32] = dequant_row_f32,
    [DTYPE_F16] = dequant_row_f16,
    [DTYPE_BF16] = dequant_row_bf16,
};

dequant_row_fn cpu_dequant_row(enum dtype t)
{
    if ((unsigned)t >= DTYPE_COUNT)
        return NULL;
    return dequant_rows[t] ? dequant_rows[t] : quant_dequant_row_fn(t);
}
