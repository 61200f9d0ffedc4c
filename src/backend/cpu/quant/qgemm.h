// Token-lane quantized matmul: 16 tokens sit in the 16 int32 lanes of one
// vector, so a broadcast weight dword meets 16 tokens in one vpdpbusd, a
// lane's sum is a whole scale block's dot product, and one float
// multiply-add per block per row scales 16 tokens at once. The ISA-independent
// driver (gate, activation quantization, weight panels, threading); the
// kernels live in src/backend/cpu/avx512/qgemm_avx512.c.
//
// Arithmetic (every path, so a token's result never depends on its batch):
// for weight row r and token x, with the weight's scale blocks j (32 values,
// 16 for Q6_K) in order, inside activation 32-block b,
//     acc = fma((float)isum_j, ws_j * d_b, acc)      isum_j = sum w_i q_i, exact
//     acc = fma(wm_j, asum_b, acc)                   (types with a min only)
// where the weight value is ws_j * w_i (+ wm_j), x_i ~= d_b * q_i (q int8,
// d_b = max|x| / 127) and asum_b = d_b * sum q_i.
#ifndef VLLMC_BACKEND_CPU_QUANT_QGEMM_H
#define VLLMC_BACKEND_CPU_QUANT_QGEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/op.h"
#include "core/dtype.h"

struct threadpool;

#define QGEMM_LANES 16 // tokens per activation group
#define QGEMM_PANEL 16 // weight rows unpacked together into a panel
#define QGEMM_GROUPS 2 // largest number of token groups one tile pass covers
// Up to this many tokens read the packed rows directly, one pass over the
// weights for all of them: cheaper than a 16-lane group that is mostly empty.
#define QGEMM_GEMV_TOKENS 4

// One group of 16 tokens (missing ones zero), k values, nb = k / 32 blocks,
// for a weight type whose unsigned panel bytes are w_i + zp in scale blocks
// of sb values (ns = k / sb):
//   q    int8  [k / 4][16][4]  (4 consecutive values of a token per lane)
//   d    float [nb][16]
//   asum float [nb][16]        d * sum(q) of the block
//   corr int32 [ns][16]        -zp * sum(q) of the scale block
static inline size_t qgemm_group_d_off(int64_t k) { return 16 * (size_t)k; }
static inline size_t qgemm_group_asum_off(int64_t k) { return 18 * (size_t)k; }
static inline size_t qgemm_group_corr_off(int64_t k) { return 20 * (size_t)k; }
static inline size_t qgemm_group_bytes(int64_t k) { return 24 * (size_t)k; }

// One token alone (decode), sections 16-byte aligned:
//   q      int8  [k]
//   d      float [nb]
//   asum   float [nb]
//   qsum   int32 [nb]      sum(q) of the block
//   qsum16 int32 [k / 16]  sum(q) of each 16 values
static inline size_t qgemm_row_d_off(int64_t k) { return (size_t)k; }
static inline size_t qgemm_row_asum_off(int64_t k) { return (size_t)k + (size_t)k / 8; }
static inline size_t qgemm_row_qsum_off(int64_t k) { return (size_t)k + (size_t)k / 4; }
static inline size_t qgemm_row_qsum16_off(int64_t k) { return (size_t)k + 3 * (size_t)k / 8; }
static inline size_t qgemm_row_bytes(int64_t k) { return (size_t)k + 5 * (size_t)k / 8; }

// One weight row unpacked into a panel (k % 128 == 0), ns = k / sb <= k / 16:
//   w    uint8 [k]    the weight values plus the zero point, w_i + zp
//   ws   float [ns]
//   wm   float [ns]   (types with a min)
static inline size_t qgemm_panel_ws_off(int64_t k) { return (size_t)k; }
static inline size_t qgemm_panel_wm_off(int64_t k) { return (size_t)k + (size_t)k / 4; }
static inline size_t qgemm_panel_row_bytes(int64_t k)
{
    return ((size_t)k + (size_t)k / 2 + 63) / 64 * 64;
}

// The group at dst from tokens x[t] [k], t < n (<= 16), for zero point zp
// and scale blocks of sb values; the lanes of tokens n.. of the q section
// must be zero already, the other sections get zeros there.
typedef void (*qgemm_quantize_group_fn)(const float *const *x, int n, int64_t k, int zp, int sb,
                                        uint8_t *dst);
// A lone token at dst (decode layout) from x [k].
typedef void (*qgemm_quantize_row_fn)(const float *x, int64_t k, uint8_t *dst);
// Weight row w (packed, k values) into the panel row at dst.
typedef void (*qgemm_unpack_fn)(const uint8_t *w, int64_t k, uint8_t *dst);
// out[(16 g + t) * QGEMM_PANEL + r] = dot(panel row r, token t of group a[g])
// for r < QGEMM_PANEL, g < n_groups (<= QGEMM_GROUPS), t < 16. Prefetches the
// pf_bytes at pf (the packed rows of the next panel) into L2, spread over its
// run, so they stream in while it computes.
typedef void (*qgemm_tile_fn)(const uint8_t *panel, int64_t k, int n_groups,
                              const uint8_t *const *a, float *out, const uint8_t *pf,
                              size_t pf_bytes);
// qgemm_tile_fn over 16 packed rows read in place (row r at w0 + r w_pitch)
// rather than a panel, scales included: for a type whose blocks hold their
// values as signed bytes at a fixed offset, which a tile unit can multiply as
// they lie. scratch: a panel's bytes (16 x qgemm_panel_row_bytes(k)), which
// the tile may use for what it reads once and needs for every token group.
typedef void (*qgemm_tile_rows_fn)(const uint8_t *w0, size_t w_pitch, uint8_t *scratch, int64_t k,
                                   int n_groups, const uint8_t *const *a, float *out,
                                   const uint8_t *pf, size_t pf_bytes);
// y[c][r] = out[c * QGEMM_PANEL + r] + bias[r] for c < n_tokens, r < n_rows.
// stream: a whole panel's rows (n_rows = 16, each y[c] 64-byte aligned) go
// straight to memory with non-temporal stores, past the caches.
typedef void (*qgemm_store_fn)(const float *out, const float *bias, int n_tokens, int n_rows,
                               bool stream, float *const *y);
// Decode, a few tokens at a time: out[4 t + r] = dot(packed weight row w[r],
// token t) for r < 4 and t < n_tokens (<= QGEMM_GEMV_TOKENS), token t's
// decode layout at a + t * a_stride; per token the same arithmetic as the
// tile. Prefetches as many bytes at pf as the 4 rows hold (the rows of the
// tiles that follow).
typedef void (*qgemm_gemv_fn)(const uint8_t *const *w, const uint8_t *a, size_t a_stride,
                              int n_tokens, int64_t k, const uint8_t *pf, float *out);
// Decode of a lone token, QGEMM_GEMV16_ROWS rows at a time: out[r] = dot(packed
// weight row w[r], the token) for r < 16, with a row in each float lane, so a
// row's chain of block steps runs beside 15 others instead of alone; per row
// the same arithmetic as the tile. Prefetches rows pf[0..15] into L2 as it
// reads its own (pf NULL: none).
#define QGEMM_GEMV16_ROWS 16
typedef void (*qgemm_gemv16_fn)(const uint8_t *const *w, const uint8_t *a, int64_t k,
                                const uint8_t *const *pf, float *out);

// ---- 16-row groups: a weight laid out again once, at load ----
//
// A type with groups can also be read from a copy of the weight made when the
// model loads (qgemm_groups_make): each 16 rows (a panel's) become one group,
// whose bytes interleave the rows so that a vector lane holds one row, and the
// decode kernel sums a block one row a lane with broadcast activation dwords,
// without horizontal sums or run-time scale unpacking. Same arithmetic per
// row as the packed rows, so the same bits. The group of rows 16 g.. lies at
// group g x k / k_multiple x group_sb_bytes; the decode reads a thread's
// groups as one or two streams (group_streams), the tiles unpack a group into their panel (or,
// where the type has group_tile, read it in place).

// Bytes of one super-block (QK_K values) of a 16-row Q4_K or Q6_K group.
#define QGEMM_Q4K_GROUP_SB_BYTES 2368
#define QGEMM_Q6K_GROUP_SB_BYTES 3360
// Bytes of one 32-value block of a 16-row Q8_0 or Q4_0 group.
#define QGEMM_Q80_GROUP_BLOCK_BYTES 544
#define QGEMM_Q40_GROUP_BLOCK_BYTES 288

// rows[16] (packed rows of k values) into the group at dst.
typedef void (*qgemm_group_pack_fn)(const uint8_t *const *rows, int64_t k, uint8_t *dst);
// Groups a decode kernel reads side by side: two streams of groups a thread
// instead of one keep more of its reads in flight. Two Zen 5 cores, a
// scratch loop over a 512 MB Q8_0 weight: 50.9-54.0 GB/s one stream,
// 54.7-59.5 two (eight rounds alternating); `bench_qmatmul --m 1`, the
// 0.6B-shape matrices, four rounds: Q8_0 46.3-52.2 -> 50.1-55.4 GB/s, Q4_0
// 43.8-52.4 -> 50.9-54.5, but Q4_K_M 44.9-50.2 -> 41.8-45.8.
#define QGEMM_GROUP_STREAMS 2
// out[16 (n_tokens s + t) + r] = dot(row r of the group at g[s], token t) for
// s < n_groups (<= QGEMM_GROUP_STREAMS) and t < n_tokens (<=
// QGEMM_GEMV_TOKENS), token t's decode layout at a + t * a_stride; each group's
// reads fetch the bytes ahead bytes past them (the groups that follow) into L1.
typedef void (*qgemm_group_gemv_fn)(const uint8_t *const *g, int n_groups, const uint8_t *a,
                                    size_t a_stride, int n_tokens, int64_t k, size_t ahead,
                                    float *out);
// The group at g into 16 panel rows at panel, prb bytes apart.
typedef void (*qgemm_group_unpack_fn)(const uint8_t *g, int64_t k, uint8_t *panel, size_t prb);

struct qgemm_kernel {
    enum dtype dtype;
    int k_multiple; // k must be a multiple of this (128 or 256)
    int zp;         // of the panel bytes
    int sb;         // values per weight scale (32 or 16)
    qgemm_unpack_fn unpack;
    qgemm_tile_fn tile; // for the type's scale block and min
    qgemm_gemv_fn gemv;
    qgemm_gemv16_fn gemv16; // optional: a lone token takes it over gemv
    qgemm_tile_fn tile_amx; // optional: tile's bits on AMX-INT8, where the CPU has it
    // optional, with tile_amx: whole panels on AMX-INT8 read the packed rows
    // in place, without unpacking
    qgemm_tile_rows_fn tile_amx_rows;
    // optional, all four or none: 16-row groups (see above)
    size_t group_sb_bytes; // bytes of a group per k_multiple values
    qgemm_group_pack_fn group_pack;
    qgemm_group_gemv_fn group_gemv;
    qgemm_group_unpack_fn group_unpack;
    // optional, with groups: tile's bits from a group read in place (its
    // panel argument the group), for CPUs without AMX-INT8
    qgemm_tile_fn group_tile;
    // with groups: how many its decode reads side by side, 1 or
    // QGEMM_GROUP_STREAMS (Q4_K and Q6_K read one: Q4_K_M read slower with
    // two, above)
    int group_streams;
};

struct qgemm_isa {
    const char *name; // provider name
    qgemm_quantize_group_fn quantize_group;
    qgemm_quantize_row_fn quantize_row;
    qgemm_store_fn store;
    void (*store_fence)(void); // orders streamed stores before what follows
    const struct qgemm_kernel *kernels; // [n_kernels]
    int n_kernels;
};

// The gate: f32 x and dst rows, a weight dtype isa has a kernel for, k a
// multiple of its block, optional plain-float bias.
bool qgemm_supports(const struct qgemm_isa *isa, const struct op_call *c);

// Runs an OP_MATMUL the gate accepted, threaded on the backend's pool. A
// weight whose `alt` is a copy from qgemm_groups_make (for this weight as it
// is now) is read from the copy.
enum vllmc_status qgemm_run(const struct qgemm_isa *isa, const struct op_call *c);

// The 16-row groups of weight w (2-D, contiguous, rows a multiple of 16, a
// type with groups), packed on pool's threads (NULL: the caller's): *out owns
// them (mem_free), to be set as w's `alt` while w stays as it is. *out NULL
// and VLLMC_OK where w does not qualify.
enum vllmc_status qgemm_groups_make(const struct qgemm_isa *isa, struct threadpool *pool,
                                    const struct tensor *w, void **out);

extern const struct qgemm_isa qgemm_isa_avx512;
extern const struct op_provider cpu_qgemm_avx512_matmul; // AVX-512 F/BW/VL/VNNI

#endif
