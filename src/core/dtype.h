// Element types. Values of the GGUF/ggml types equal their ggml type ids, so a
// GGUF tensor's type field maps to enum dtype directly; types of our own start
// at 64. Quantized types pack block_size elements into type_size bytes.
#ifndef VLLMC_CORE_DTYPE_H
#define VLLMC_CORE_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum dtype {
    DTYPE_F32 = 0,
    DTYPE_F16 = 1,
    DTYPE_Q4_0 = 2,
    DTYPE_Q4_1 = 3,
    DTYPE_Q5_0 = 6,
    DTYPE_Q5_1 = 7,
    DTYPE_Q8_0 = 8,
    DTYPE_Q8_1 = 9,
    DTYPE_Q2_K = 10,
    DTYPE_Q3_K = 11,
    DTYPE_Q4_K = 12,
    DTYPE_Q5_K = 13,
    DTYPE_Q6_K = 14,
    DTYPE_Q8_K = 15,
    DTYPE_IQ2_XXS = 16,
    DTYPE_IQ2_XS = 17,
    DTYPE_IQ3_XXS = 18,
    DTYPE_IQ1_S = 19,
    DTYPE_IQ4_NL = 20,
    DTYPE_IQ3_S = 21,
    DTYPE_IQ2_S = 22,
    DTYPE_IQ4_XS = 23,
    DTYPE_I8 = 24,
    DTYPE_I16 = 25,
    DTYPE_I32 = 26,
    DTYPE_I64 = 27,
    DTYPE_F64 = 28,
    DTYPE_IQ1_M = 29,
    DTYPE_BF16 = 30,
    DTYPE_TQ1_0 = 34,
    DTYPE_TQ2_0 = 35,
    DTYPE_GGML_COUNT = 39, // first id past the ggml range we know of
    DTYPE_U8 = 64,         // raw bytes (safetensors U8, packed AWQ/GPTQ helpers)
    DTYPE_INT4G = 65,      // AWQ/GPTQ 4-bit weights repacked in 32-blocks (backend/cpu/quant/blocks.h)
    DTYPE_COUNT = 66,
};

struct dtype_info {
    const char *name;  // "f32", "q4_K", ... as llama.cpp spells them; NULL for unknown ids
    int block_size;    // elements per block; 1 for plain types
    size_t type_size;  // bytes per block
    bool is_quantized;
};

// Info for a dtype; NULL when the id is not a type this build knows.
const struct dtype_info *dtype_info(enum dtype t);
// Name or "unknown"; never NULL.
const char *dtype_name(enum dtype t);
// Looks up by name (case-insensitive, e.g. "Q4_K_M" is not a dtype; "q4_k" is). False if unknown.
bool dtype_from_name(const char *name, enum dtype *out);
// Bytes for one row of n elements; 0 when n is not a multiple of the block size.
size_t dtype_row_bytes(enum dtype t, int64_t n);

// ---- scalar conversions (exact IEEE rounding: round to nearest even) ----
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

#endif
