// The ISA-independent half of the fast CPU matmuls: cache blocking and
// threading over output columns, around an ISA-specific tile kernel that
// computes R x C dot products over the whole k.
//
// Batch invariance: every output element is one dot product computed by the
// tile kernel with the same per-element instruction sequence whatever R and C
// are, and k is never split, so a row's result does not depend on how many
// rows share the call or which thread computed it.
#ifndef VLLMC_BACKEND_CPU_MATMUL_TILED_H
#define VLLMC_BACKEND_CPU_MATMUL_TILED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/op.h"

// out [R, C] (row-major) = dot(x[r][0..k), w[c][0..k)) for r < R, c < C.
// x rows are f32; w rows are of the dtype the kernel was built for.
typedef void (*cpu_mm_tile_fn)(int R, int C, const float *const *x, const void *const *w, int64_t k,
                               float *out);

// The same written straight into the output: y[r][c] = dot(...) + bias[c]
// (bias [C], zeros without a bias). Saves the round trip through out, whose
// reloads stall on the vector stores that wrote it (~5% of a prefill matmul).
// next: the first weight row of the tile the same thread runs next (its rows
// follow with w's stride), or NULL; a kernel may fetch them ahead.
typedef void (*cpu_mm_tile_store_fn)(int R, int C, const float *const *x, const void *const *w,
                                     int64_t k, float *const *y, const float *bias,
                                     const void *next);

// The tile over k elements [k0, k1) of k (k0 a multiple of the kernel's
// k_block): from the unsummed partial accumulators in acc unless k0 = 0, back
// into acc unless k1 = k, else summed into y as tile_store does. acc [R, C,
// CPU_MM_ACC_FLOATS] f32, 64-byte aligned. Each accumulator lane adds the
// same products in the same order as one tile_store over all of k, so the
// results are the same bits.
typedef void (*cpu_mm_tile_part_fn)(int R, int C, const float *const *x, const void *const *w,
                                    int64_t k0, int64_t k1, int64_t k, float *acc, float *const *y,
                                    const float *bias, const void *next);
#define CPU_MM_ACC_FLOATS 16

// Decode (x is one row): y[j] = dot(x, w row j) + bias[j] for j < n, the
// weight rows row_bytes apart from w (bias [n]). Each element gets the bits
// the kernel's tiles give it.
typedef void (*cpu_mm_decode_fn)(const float *x, const void *w, size_t row_bytes, int n,
                                 int64_t k, float *y, const float *bias);

// out [C, out_stride] (f32) = the weight rows w[0..C) converted; lanes past k
// may hold anything.
typedef void (*cpu_mm_panel_fn)(int C, const void *const *w, int64_t k, float *out,
                                size_t out_stride);

struct cpu_mm_kernel {
    cpu_mm_tile_fn tile; // one of tile and tile_store
    cpu_mm_tile_store_fn tile_store;
    int r_max, c_max; // largest tile the kernel handles
    int c_max_r1;     // largest C when R = 1 (decode: more columns in flight)
    // Optional, with tile_store: calls of more than r_max rows and k above
    // k_whole_max run each column tile in parts of k_block elements, every
    // row tile of a part before the next part, so that the part's weight
    // rows stay in L1 across the row tiles.
    cpu_mm_tile_part_fn tile_part;
    int64_t k_block, k_whole_max;
    // Optional: one-row calls go to decode, a task's whole column block (of
    // up to 128 rows, 8 of them in flight) at once, instead of to tiles.
    cpu_mm_decode_fn decode;
    // Optional, for calls of more than r_max rows: a column tile's weights are
    // converted once (panel) and every row tile runs panel_kernel's tile on
    // them. The converted values are exact, and panel_kernel computes each
    // element with the same sequence as tile, so results do not change.
    cpu_mm_panel_fn panel;
    const struct cpu_mm_kernel *panel_kernel;
};

// Runs c (an OP_MATMUL its gate accepted) with kernel, threaded over column
// blocks on the backend's pool. Adds the optional bias after the dot product.
enum vllmc_status cpu_matmul_tiled_run(const struct op_call *c, const struct cpu_mm_kernel *kernel);

// The gate shared by the float-weight tiled providers: f32 activations and
// output, f32/f16/bf16 weights with dense rows, optional float bias.
bool cpu_matmul_tiled_float_supports(const struct op_call *c);

// One kernel per float weight type; runs c with the one for its weights.
struct cpu_mm_float_kernels {
    const struct cpu_mm_kernel *f32, *f16, *bf16;
};
enum vllmc_status cpu_matmul_tiled_float_run(const struct op_call *c,
                                             const struct cpu_mm_float_kernels *kernels);

// The same with the kernel's x rows taken from x_base + i * x_row_bytes (x
// already converted by the caller, e.g. to bf16) instead of c->src[0].
enum vllmc_status cpu_matmul_tiled_run_x(const struct op_call *c,
                                         const struct cpu_mm_kernel *kernel, const void *x_base,
                                         size_t x_row_bytes);

#endif
