// Matmul on packed quantized weights with 8-bit activations: the ISA-independent
// driver (gate, activation quantization, tiling, threading) shared by the
// `cpu-q-avx2` and `cpu-q-avx512` providers, which supply the kernels.
//
// Activations are quantized per 32-block (x ~= d * q, q int8, d = max|x| / 127)
// into a layout the kernels read with aligned vector loads. A 64-weight chunk
// of a weight row is unpacked to unsigned bytes u with per-lane scales, so
// w = d_w * (u - zp) (+ m_w for the types with a min); one int32 lane holds
// the dot product of 4 consecutive weights, exact in integers.
//
// Batch invariance: an output element is one dot product over the whole k,
// computed by the same instruction sequence whatever the tile shape, the
// number of rows in the call or the thread, so results never depend on batching.
#ifndef VLLMC_BACKEND_CPU_QUANT_QMATMUL_H
#define VLLMC_BACKEND_CPU_QUANT_QMATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/op.h"
#include "core/dtype.h"

#define QMM_TILE 4 // largest tile: QMM_TILE weight rows x QMM_TILE tokens

// Expands a tile body f(R, C, w, a, k, out), written for R and C known at
// compile time, into the QMM_TILE x QMM_TILE shapes, so each is compiled with
// constant bounds and its accumulators live in registers.
#define QMM_TILE_DISPATCH(f, R, C, w, a, k, out)                                                   \
    switch (((R) - 1) * 4 + (C) - 1) {                                                             \
    case 0: f(1, 1, w, a, k, out); break;                                                          \
    case 1: f(1, 2, w, a, k, out); break;                                                          \
    case 2: f(1, 3, w, a, k, out); break;                                                          \
    case 3: f(1, 4, w, a, k, out); break;                                                          \
    case 4: f(2, 1, w, a, k, out); break;                                                          \
    case 5: f(2, 2, w, a, k, out); break;                                                          \
    case 6: f(2, 3, w, a, k, out); break;                                                          \
    case 7: f(2, 4, w, a, k, out); break;                                                          \
    case 8: f(3, 1, w, a, k, out); break;                                                          \
    case 9: f(3, 2, w, a, k, out); break;                                                          \
    case 10: f(3, 3, w, a, k, out); break;                                                         \
    case 11: f(3, 4, w, a, k, out); break;                                                         \
    case 12: f(4, 1, w, a, k, out); break;                                                         \
    case 13: f(4, 2, w, a, k, out); break;                                                         \
    case 14: f(4, 3, w, a, k, out); break;                                                         \
    default: f(4, 4, w, a, k, out); break;                                                         \
    }

// Byte layout of one quantized activation row of k values (k % 64 == 0),
// 64-byte aligned sections:
//   q    int8    [k]       the quantized values
//   dax  float   [k / 4]   per int32 lane (4 values): d of the lane's 32-block
//   corr int32   [k / 4]   per lane: -zp * (sum of the lane's 4 q)
//   asum float   [k / 32]  per 32-block: d * sum(q) (for the types with a min)
//   asum16 float [k / 16]  per 16 values: d * their sum (mins of 16-sub-blocks)
static inline size_t qmm_act_dax_off(int64_t k) { return (size_t)k; }
static inline size_t qmm_act_corr_off(int64_t k) { return 2 * (size_t)k; }
static inline size_t qmm_act_asum_off(int64_t k) { return 3 * (size_t)k; }
static inline size_t qmm_act_asum16_off(int64_t k) { return 3 * (size_t)k + (size_t)k / 8; }
static inline size_t qmm_act_row_bytes(int64_t k)
{
    return (3 * (size_t)k + (size_t)k / 8 + (size_t)k / 4 + 63) / 64 * 64;
}

// Quantizes x [k] into one activation row at dst (64-byte aligned) for a
// weight type with zero point zp.
typedef void (*qmm_quantize_fn)(const float *x, int64_t k, int zp, uint8_t *dst);

// out[r * QMM_TILE + c] = dot(weight row w[r], activation row a[c]) for
// r < R, c < C (1 <= R, C <= QMM_TILE), over k values.
typedef void (*qmm_tile_fn)(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                            int64_t k, float *out);

struct qmm_type_kernel {
    enum dtype dtype;
    int zp;            // zero point of the unpacked weight bytes
    int k_multiple;    // k must be a multiple of this (64 or 256)
    qmm_tile_fn tile;
};

// ---- token-quad layout: the activations of 4 tokens interleaved ----
// One quad (tokens 4i..4i+3 of the call; missing ones zero) keeps the same 16
// positions of its 4 tokens in one 64-byte vector, so 16 weight bytes
// broadcast to the four 128-bit lanes meet all 4 tokens in one vpdpbusd.
// Lane i (< 4) of token t covers values 16v + 4i..16v + 4i + 3 of 16-group v.
// 64-byte aligned sections of a quad of k values (k % 64 == 0):
//   q      int8  [k / 16][4 tokens][16]
//   corr32 int32 [k / 32][4][4 lanes]  -zp * (sum of the lane's 8 q: 4 in each
//                                      16-group of the 32-block)
//   d      float [k / 32][4][4]   the token's d of the 32-block in its 4 lanes
//   asum   float [k / 256][2][4][4]  [h][t][i]: d * sum(q) of 32-block 4h + i of
//                                    the super-block (k % 256 == 0 only)
#define QMM_QUAD_G 3 // largest tile: 4 weight rows x QMM_QUAD_G quads
static inline size_t qmm_quad_corr32_off(int64_t k) { return 4 * (size_t)k; }
static inline size_t qmm_quad_d_off(int64_t k) { return 6 * (size_t)k; }
static inline size_t qmm_quad_asum_off(int64_t k) { return 8 * (size_t)k; }
static inline size_t qmm_quad_bytes(int64_t k)
{
    return (8 * (size_t)k + (size_t)k / 2 + 63) / 64 * 64;
}

// Quantizes x [k] into token slot t (< 4) of the quad at dst.
typedef void (*qmm_quad_quantize_fn)(const float *x, int t, int64_t k, int zp, uint8_t *dst);

// out[r * 4 * QMM_QUAD_G + 4 g + t] = dot(weight row w[r], token t of quad a[g])
// for r < 4, g < G (1 <= G <= QMM_QUAD_G), t < 4.
typedef void (*qmm_quad_tile_fn)(int G, const uint8_t *const *w, const uint8_t *const *a,
                                 int64_t k, float *out);

// Decode: out[r] = dot(weight row w[r], token 0 of quad a) for r < 4, with the
// same per-lane arithmetic as the tile, so the bits match it. Prefetches as
// many bytes at pf as the 4 rows hold (the rows of the tiles that follow).
typedef void (*qmm_quad_gemv_fn)(const uint8_t *const *w, const uint8_t *a, int64_t k,
                                 const uint8_t *pf, float *out);

struct qmm_quad_kernel {
    enum dtype dtype;
    int zp;
    int k_multiple;
    qmm_quad_tile_fn tile;
    qmm_quad_gemv_fn gemv;
};

struct qmm_quad_isa {
    qmm_quad_quantize_fn quantize;
    const struct qmm_quad_kernel *kernels; // [n_kernels]
    int n_kernels;
};

struct qmm_isa {
    const char *name;                      // provider name
    qmm_quantize_fn quantize;
    const struct qmm_type_kernel *kernels; // [n_kernels]
    int n_kernels;
    const struct qmm_quad_isa *quad;       // optional; its types take precedence
};

// The kernel of isa for weight dtype t, or NULL.
const struct qmm_type_kernel *qmm_find_kernel(const struct qmm_isa *isa, enum dtype t);

// Whether isa computes on weight dtype t (with either kind of kernel).
bool qmm_has_type(const struct qmm_isa *isa, enum dtype t);

// The gate: f32 x and dst rows, a weight dtype isa has a kernel for, k a
// multiple of its block, optional plain-float bias.
bool qmm_supports(const struct qmm_isa *isa, const struct op_call *c);

// Runs an OP_MATMUL the gate accepted, threaded on the backend's pool.
enum vllmc_status qmm_run(const struct qmm_isa *isa, const struct op_call *c);

// The providers built on this driver (src/backend/cpu/avx2/, avx512/).
extern const struct qmm_isa qmm_isa_avx2;
extern const struct qmm_isa qmm_isa_avx512;
extern const struct qmm_quad_isa qmm_quad_isa_avx512;
extern const struct op_provider cpu_q_avx2_matmul;   // needs AVX2, FMA, F16C
extern const struct op_provider cpu_q_avx512_matmul; // also AVX-512 F/BW/VL/VNNI

#endif
