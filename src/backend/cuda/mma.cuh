// Tensor-core operands and mma.sync m16n8k16 (f16/bf16 operands, f32
// accumulation), shared by the attention and matmul kernels. Device code
// only.
#ifndef VLLMC_BACKEND_CUDA_MMA_CUH
#define VLLMC_BACKEND_CUDA_MMA_CUH

#include "backend/cuda/cuda_common.cuh"

// ---- operand types: conversion and the mma itself ----

// Two f32 values as one register of two 16-bit operands, lo in the low half.
template <typename OT> __device__ __forceinline__ uint32_t tc_pack(float lo, float hi);

template <> __device__ __forceinline__ uint32_t tc_pack<__half>(float lo, float hi)
{
    // An f32 cache or query may hold values past f16's range: saturate them
    // instead of turning them into infinities (and the softmax into NaN).
    lo = fminf(fmaxf(lo, -65504.0f), 65504.0f);
    hi = fminf(fmaxf(hi, -65504.0f), 65504.0f);
    const __half2 h = __floats2half2_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &h, sizeof u);
    return u;
}

template <> __device__ __forceinline__ uint32_t tc_pack<__nv_bfloat16>(float lo, float hi)
{
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &h, sizeof u);
    return u;
}

// x as the nearest OT value (f16 saturating, as tc_pack), back in f32.
template <typename OT> __device__ __forceinline__ float tc_round(float x);

template <> __device__ __forceinline__ float tc_round<__half>(float x)
{
    return __half2float(__float2half_rn(fminf(fmaxf(x, -65504.0f), 65504.0f)));
}

template <> __device__ __forceinline__ float tc_round<__nv_bfloat16>(float x)
{
    return __bfloat162float(__float2bfloat16_rn(x));
}

// Two f32 values as two registers of operands, hi (the values rounded to OT)
// and lo (the rounding error, rounded to OT): an mma over hi and one over lo
// add up to 2 x 11 (f16) or 2 x 8 (bf16) significant bits of each value.
template <typename OT>
__device__ __forceinline__ void tc_split(float a, float b, uint32_t *hi, uint32_t *lo)
{
    const float ah = tc_round<OT>(a), bh = tc_round<OT>(b);
    *hi = tc_pack<OT>(ah, bh);
    *lo = tc_pack<OT>(a - ah, b - bh);
}

// c[16x8] += a[16x16] . b[16x8]. Fragments (PTX ISA, mma.m16n8k16), with
// g = lane / 4 and t = lane % 4: a[0] holds A(g, 2t..2t+1), a[1] A(g+8, 2t..),
// a[2] A(g, 2t+8..), a[3] A(g+8, 2t+8..); b0 holds B(2t..2t+1, g), b1
// B(2t+8..2t+9, g); c[0..1] C(g, 2t..2t+1), c[2..3] C(g+8, 2t..2t+1).
template <typename OT>
__device__ __forceinline__ void tc_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void tc_mma<__half>(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void tc_mma<__nv_bfloat16>(float c[4], const uint32_t a[4], uint32_t b0,
                                                      uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- operands from shared memory (ldmatrix, sm_75+) ----

// Four 8x8 matrices of 16-bit elements from shared memory: lane l gives the
// (16-byte aligned) address of row l % 8 of matrix l / 8, and r[i] gets
// matrix i's row g, columns 2t..2t+1 (PTX ISA, ldmatrix) — a B fragment when
// the rows run along n. The .trans form gives rows 2t..2t+1 of column g
// instead: a B fragment when the rows run along k.
__device__ __forceinline__ void tc_ldsm4(uint32_t r[4], const uint16_t *row)
{
    const uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void tc_ldsm4_trans(uint32_t r[4], const uint16_t *row)
{
    const uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// ---- asynchronous copies (cp.async, sm_80+) ----

// 16 bytes global -> shared without staging in registers; a zero fill
// (nothing read) when !valid.
__device__ __forceinline__ void tc_cp_async16(uint16_t *dst, const void *src, bool valid)
{
    const uint32_t addr = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(addr), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}

__device__ __forceinline__ void tc_cp_async_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits for every committed group of this thread but the most recent N.
template <int N> __device__ __forceinline__ void tc_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void tc_cp_async_wait_all_but_last()
{
    tc_cp_async_wait<1>();
}

#endif
