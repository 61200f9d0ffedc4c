// Element type table and the fp16/bf16 scalar conversions.
#include "core/dtype.h"

#include <string.h>
#include <strings.h>

static const struct dtype_info infos[DTYPE_COUNT] = {
    [DTYPE_F32] = {"f32", 1, 4, false},
    [DTYPE_F16] = {"f16", 1, 2, false},
    [DTYPE_BF16] = {"bf16", 1, 2, false},
    [DTYPE_F64] = {"f64", 1, 8, false},
    [DTYPE_I8] = {"i8", 1, 1, false},
    [DTYPE_I16] = {"i16", 1, 2, false},
    [DTYPE_I32] = {"i32", 1, 4, false},
    [DTYPE_I64] = {"i64", 1, 8, false},
    [DTYPE_U8] = {"u8", 1, 1, false},
    [DTYPE_INT4G] = {"int4g", 32, 20, true},
    [DTYPE_Q4_0] = {"q4_0", 32, 18, true},
    [DTYPE_Q4_1] = {"q4_1", 32, 20, true},
    [DTYPE_Q5_0] = {"q5_0", 32, 22, true},
    [DTYPE_Q5_1] = {"q5_1", 32, 24, true},
    [DTYPE_Q8_0] = {"q8_0", 32, 34, true},
    [DTYPE_Q8_1] = {"q8_1", 32, 36, true},
    [DTYPE_Q2_K] = {"q2_K", 256, 84, true},
    [DTYPE_Q3_K] = {"q3_K", 256, 110, true},
    [DTYPE_Q4_K] = {"q4_K", 256, 144, true},
    [DTYPE_Q5_K] = {"q5_K", 256, 176, true},
    [DTYPE_Q6_K] = {"q6_K", 256, 210, true},
    [DTYPE_Q8_K] = {"q8_K", 256, 292, true},
    [DTYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, true},
    [DTYPE_IQ2_XS] = {"iq2_xs", 256, 74, true},
    [DTYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, true},
    [DTYPE_IQ1_S] = {"iq1_s", 256, 50, true},
    [DTYPE_IQ4_NL] = {"iq4_nl", 32, 18, true},
    [DTYPE_IQ3_S] = {"iq3_s", 256, 110, true},
    [DTYPE_IQ2_S] = {"iq2_s", 256, 82, true},
    [DTYPE_IQ4_XS] = {"iq4_xs", 256, 136, true},
    [DTYPE_IQ1_M] = {"iq1_m", 256, 56, true},
    [DTYPE_TQ1_0] = {"tq1_0", 256, 54, true},
    [DTYPE_TQ2_0] = {"tq2_0", 256, 66, true},
};

const struct dtype_info *dtype_info(enum dtype t)
{
    if ((unsigned)t >= DTYPE_COUNT || !infos[t].name)
        return NULL;
    return &infos[t];
}

const char *dtype_name(enum dtype t)
{
    const struct dtype_info *i = dtype_info(t);
    return i ? i->name : "unknown";
}

bool dtype_from_name(const char *name, enum dtype *out)
{
    for (int t = 0; t < DTYPE_COUNT; t++) {
        if (infos[t].name && !strcasecmp(infos[t].name, name)) {
            *out = (enum dtype)t;
            return true;
        }
    }
    return false;
}

size_t dtype_row_bytes(enum dtype t, int64_t n)
{
    const struct dtype_info *i = dtype_info(t);
    if (!i || n < 0 || n % i->block_size)
        return 0;
    return (size_t)(n / i->block_size) * i->type_size;
}

// ---- fp16 / bf16 ----

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        if (mant == 0)
            return bits_f32(sign);
        // Subnormal: value = mant * 2^-24.
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31)
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_fp16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) // inf or NaN
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
    if (absx >= 0x477ff000u) // rounds to >= 65520: overflow to inf
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) { // below the smallest normal half: subnormal or zero
        // Add 0.5 (as a float) so the FPU rounds the mantissa to nearest even.
        float v = bits_f32(absx) + 0.5f;
        return (uint16_t)(sign | (f32_bits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (absx >> 13) & 1u;
    absx += 0xc8000fffu + mant_odd; // rebias exponent (-112 << 23) and round
    return (uint16_t)(sign | (absx >> 13));
}

float bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
