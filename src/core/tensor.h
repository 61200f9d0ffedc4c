// Tensors describe memory; they never own it. Dimensions follow ggml/GGUF
// order: ne[0] is the innermost, contiguous dimension. Shape comments in this
// code base are written outermost first, so "[n_tokens, dim]" means
// ne[0] = dim, ne[1] = n_tokens.
#ifndef VLLMC_CORE_TENSOR_H
#define VLLMC_CORE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"

#define TENSOR_MAX_DIMS 4

// Where a tensor's data lives; a backend only touches its own kind.
enum tensor_location { TENSOR_HOST = 0, TENSOR_DEVICE = 1 };

struct tensor {
    enum dtype dtype;
    int n_dims;                     // 1..TENSOR_MAX_DIMS; unused ne[] are 1
    int64_t ne[TENSOR_MAX_DIMS];    // elements per dimension, innermost first
    size_t nb[TENSOR_MAX_DIMS];     // byte stride per dimension; nb[0] = type_size,
                                    // nb[1] = row bytes (blocks * type_size) when contiguous
    void *data;                     // borrowed
    enum tensor_location location;
    const char *name;               // borrowed, may be NULL
    // optional: the same values laid out again for a backend's kernels (the
    // CPU's 16-row groups of quantized weights, qgemm_groups_make), borrowed,
    // NULL when none; its maker checks that it still describes this tensor.
    const void *alt;
};

// Fills *t as a contiguous tensor over data with the given shape (innermost first).
// Returns false when the shape is invalid for the dtype (ne[0] not a block multiple).
bool tensor_init(struct tensor *t, enum dtype dtype, void *data, int n_dims, const int64_t *ne);
bool tensor_init_1d(struct tensor *t, enum dtype dtype, void *data, int64_t ne0);
bool tensor_init_2d(struct tensor *t, enum dtype dtype, void *data, int64_t ne0, int64_t ne1);
bool tensor_init_3d(struct tensor *t, enum dtype dtype, void *data, int64_t ne0, int64_t ne1,
                    int64_t ne2);

int64_t tensor_n_elements(const struct tensor *t);
int64_t tensor_n_rows(const struct tensor *t);   // product of ne[1..]
size_t tensor_n_bytes(const struct tensor *t);   // for contiguous tensors
bool tensor_is_contiguous(const struct tensor *t);
bool tensor_rows_contiguous(const struct tensor *t); // each row dense, rows may be strided
bool tensor_same_shape(const struct tensor *a, const struct tensor *b);

// Pointer to row i (0 <= i < n_rows) of a tensor whose dims above 1 are contiguous.
static inline void *tensor_row(const struct tensor *t, int64_t i)
{
    return (char *)t->data + (size_t)i * t->nb[1];
}

#endif
