// Byte layouts of the GGUF quantized blocks (ggml's formats) and of the 8-bit
// activation blocks the fast dot products use. Every multi-byte field is
// little-endian; `d`/`m`/`dmin` fields are IEEE half floats kept as raw bits.
// A row of n weights is n / QK consecutive blocks; rows never share a block.
#ifndef VLLMC_BACKEND_CPU_QUANT_BLOCKS_H
#define VLLMC_BACKEND_CPU_QUANT_BLOCKS_H

#include <stdint.h>

#define QK32 32   // weights per block of the legacy types and IQ4_NL
#define QK_K 256  // weights per super-block of the k-quants and IQ4_XS
#define K_SCALE_BYTES 12

// ---- legacy 32-weight blocks: weight j of the block is nibble/byte j ----
// The 4-bit types store weight j (j < 16) in the low nibble of qs[j] and
// weight j + 16 in its high nibble. The 5-bit types add bit j of the 32-bit
// word qh as bit 4 of weight j.

struct block_q4_0 { // w = d * (q - 8)
    uint16_t d;
    uint8_t qs[QK32 / 2];
};

struct block_q4_1 { // w = d * q + m
    uint16_t d;
    uint16_t m;
    uint8_t qs[QK32 / 2];
};

struct block_q5_0 { // w = d * (q - 16)
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QK32 / 2];
};

struct block_q5_1 { // w = d * q + m
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[QK32 / 2];
};

struct block_q8_0 { // w = d * q
    uint16_t d;
    int8_t qs[QK32];
};

struct block_iq4_nl { // w = d * iq4nl_values[q]
    uint16_t d;
    uint8_t qs[QK32 / 2];
};

// ---- k-quant super-blocks of 256 weights ----

// 16 sub-blocks of 16. Weight w = 128 h + 32 j + l (h < 2, j < 4, l < 32)
// holds bits 2j..2j+1 of qs[32 h + l]; its sub-block is 8 h + 2 j + l / 16,
// whose byte in scales has a 4-bit scale (low nibble) and 4-bit min (high).
// w = d * scale * q - dmin * min.
struct block_q2_k {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d;
    uint16_t dmin;
};

// 16 sub-blocks of 16, the same 2-bit placement as Q2_K; weight w also has a
// "high" bit, bit 4 h + j of hmask[l], and q = low2 - (high ? 0 : 4). The 16
// 6-bit scales s: low 4 bits of s_i in scales[i % 8] (low nibble for i < 8,
// high nibble otherwise), high 2 bits in scales[8 + i % 4] at bit 2 (i / 4).
// w = d * (s - 32) * q.
struct block_q3_k {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[K_SCALE_BYTES];
    uint16_t d;
};

// 8 sub-blocks of 32 with 6-bit scale and min each, packed in 12 bytes (see
// kquant_scale_min). Weight w = 64 p + 32 hi + l holds the low (hi = 0) or
// high (hi = 1) nibble of qs[32 p + l]; sub-block 2 p + hi.
// w = (d * sc) * q - (dmin * m).
struct block_q4_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_BYTES];
    uint8_t qs[QK_K / 2];
};

// As Q4_K plus a fifth bit: bit (2 p + hi) of qh[l] for weight 64 p + 32 hi + l.
struct block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_BYTES];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};

// 16 sub-blocks of 16 with int8 scales. Weight w = 128 h + 32 g + l (g < 4,
// l < 32): low 4 bits from ql[64 h + l + 32 (g & 1)] (low nibble for g < 2),
// high 2 bits from qh[32 h + l] at bit 2 g; q = 6-bit value - 32; sub-block
// 8 h + 2 g + l / 16. w = (d * scale) * q.
struct block_q6_k {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
};

// 8 sub-blocks of 32 with 6-bit scales: low 4 bits in scales_l (nibble
// ib % 2 of byte ib / 2), high 2 bits at bit 2 ib of scales_h; the values
// are IQ4_NL's table, packed per sub-block like Q4_0. w = (d * (s - 32)) * v.
struct block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
};

// ---- AWQ/GPTQ INT4 weights, repacked per output row (model/int4_ckpt.c) ----
// One 32-weight slice of a row; every block of a quantization group repeats
// the group's scale and zero point, so any group size that is a multiple of
// 32 (and a whole row, group_size -1) fits. Nibbles are placed as in Q4_0.
// w = d * (q - z); z is 0..16 (GPTQ v1 zero points are stored minus one).
struct block_int4g {
    uint16_t d;           // the checkpoint's f16 scale, bit for bit
    uint8_t z;            // integer zero point
    uint8_t pad;          // 0
    uint8_t qs[QK32 / 2]; // weight j (j < 16) low nibble of qs[j], j + 16 high nibble
};

_Static_assert(sizeof(struct block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(struct block_int4g) == 20, "int4g block");
_Static_assert(sizeof(struct block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(struct block_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(struct block_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(struct block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(struct block_iq4_nl) == 18, "iq4_nl block");
_Static_assert(sizeof(struct block_q2_k) == 84, "q2_K block");
_Static_assert(sizeof(struct block_q3_k) == 110, "q3_K block");
_Static_assert(sizeof(struct block_q4_k) == 144, "q4_K block");
_Static_assert(sizeof(struct block_q5_k) == 176, "q5_K block");
_Static_assert(sizeof(struct block_q6_k) == 210, "q6_K block");
_Static_assert(sizeof(struct block_iq4_xs) == 136, "iq4_xs block");

// The 16 non-uniform levels of IQ4_NL and IQ4_XS.
extern const int8_t iq4nl_values[16];

// Scale and min of sub-block j (< 8) of a Q4_K/Q5_K super-block: for j < 4
// the low 6 bits of bytes j and j + 4; for j >= 4 the nibbles of byte j + 4
// with the top 2 bits of bytes j - 4 (scale) and j (min) above them.
static inline void kquant_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// ---- 8-bit activation blocks (our own layout; never stored in files) ----

// One 32-block of an activation row: x ~= d * qs; s = d * sum(qs) serves the
// types with an offset or min (Q4_0's -8, Q4_1's m).
struct block_a8_32 {
    float d;
    float s;
    int8_t qs[QK32];
};

// One 256-block: x ~= d * qs; bsums[i] = sum of qs[16 i .. 16 i + 15], for
// the k-quant mins.
struct block_a8_k {
    float d;
    int16_t bsums[QK_K / 16];
    int8_t qs[QK_K];
};

_Static_assert(sizeof(struct block_a8_32) == 40, "a8_32 block");
_Static_assert(sizeof(struct block_a8_k) == 292, "a8_k block");

#endif
