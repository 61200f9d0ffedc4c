// Helpers shared by the CPU providers: addressing rows of possibly strided
// tensors and reading the small f32/f16/bf16 values that gates let through.
#ifndef VLLMC_BACKEND_CPU_CPU_OPS_H
#define VLLMC_BACKEND_CPU_CPU_OPS_H

#include <stdint.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "backend/cpu/quant.h"
#include "core/tensor.h"

// Row i of t, counting rows over dims 1..3 (each row is ne[0] elements).
static inline void *cpu_row(const struct tensor *t, int64_t i)
{
    int64_t i1 = i % t->ne[1], r = i / t->ne[1];
    int64_t i2 = r % t->ne[2], i3 = r / t->ne[2];
    return (char *)t->data + (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] + (size_t)i3 * t->nb[3];
}

// Element [i3][i2][i1][0] of t.
static inline void *cpu_at(const struct tensor *t, int64_t i3, int64_t i2, int64_t i1)
{
    return (char *)t->data + (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] + (size_t)i3 * t->nb[3];
}

// Element i of a plain (f32, f16, bf16) row.
static inline float cpu_load(enum dtype t, const void *row, int64_t i)
{
    switch (t) {
    case DTYPE_F16:
        return fp16_to_f32(((const uint16_t *)row)[i]);
    case DTYPE_BF16:
        return bf16_to_f32(((const uint16_t *)row)[i]);
    default:
        return ((const float *)row)[i];
    }
}

static inline void cpu_store(enum dtype t, void *row, int64_t i, float v)
{
    switch (t) {
    case DTYPE_F16:
        ((uint16_t *)row)[i] = f32_to_fp16(v);
        break;
    case DTYPE_BF16:
        ((uint16_t *)row)[i] = f32_to_bf16(v);
        break;
    default:
        ((float *)row)[i] = v;
        break;
    }
}

static inline bool cpu_is_plain_float(enum dtype t)
{
    return t == DTYPE_F32 || t == DTYPE_F16 || t == DTYPE_BF16;
}

// f32 with each row dense (rows themselves may be strided).
static inline bool cpu_f32_rows(const struct tensor *t)
{
    return t && t->dtype == DTYPE_F32 && tensor_rows_contiguous(t);
}

// Validates the data of an attention call's metadata (query_start_loc
// ordering, n_q <= seq_len, block ids inside the cache) and returns the
// largest seq_len in *max_seq_len. VLLMC_ERR_INVALID_ARG via op_fail.
enum vllmc_status cpu_attention_check_meta(const struct op_call *c, int32_t *max_seq_len);
// Multiply-adds of an attention call's q.k products: query tokens x their
// keys x query heads x head_dim, what the providers weigh against waking
// their workers.
int64_t cpu_attention_work(const struct op_call *c);

#endif
