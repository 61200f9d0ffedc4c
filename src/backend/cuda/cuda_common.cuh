// Device helpers shared by the CUDA op families: element loads that widen
// f16/bf16 to f32, warp and block reductions, and the C headers made safe for
// CUDA C++. Every .cu of the backend includes this first.
#ifndef VLLMC_BACKEND_CUDA_CUDA_COMMON_CUH
#define VLLMC_BACKEND_CUDA_CUDA_COMMON_CUH

// The C headers use C11's _Noreturn, which C++ spells as an attribute.
#ifndef _Noreturn
#define _Noreturn __attribute__((noreturn))
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <stdint.h>
#include <string.h>

// The core headers are C without linkage guards of their own.
extern "C" {
#include "backend/backend_impl.h"
#include "backend/op.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
}
#include "backend/cuda/cuda_device.h"

// Checks the launch just queued (bad configuration, missing kernel image).
#define CUDA_TRY_LAUNCH() CUDA_TRY(cudaGetLastError())

#define CUDA_WARP 32

// ---- element conversion ----

__device__ __forceinline__ float cuda_to_f32(float x) { return x; }
__device__ __forceinline__ float cuda_to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float cuda_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T cuda_from_f32(float x);
template <> __device__ __forceinline__ float cuda_from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half cuda_from_f32<__half>(float x)
{
    return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 cuda_from_f32<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

// Widens one 16-byte load (4 f32, or 8 f16/bf16 elements) to floats; the
// last argument only selects the element type. GEMV weights and paged K/V
// rows are both read this way.
__device__ __forceinline__ void cuda_widen16(const uint4 &u, float *f, const float *)
{
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
}

__device__ __forceinline__ void cuda_widen16(const uint4 &u, float *f, const __nv_bfloat16 *)
{
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

__device__ __forceinline__ void cuda_widen16(const uint4 &u, float *f, const __half *)
{
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        __half2 h;
        memcpy(&h, &w[i], sizeof h);
        const float2 v = __half22float2(h);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}

// ---- reductions ----

// Element j of an optional bias of dtype bias_type (f32, f16 or bf16).
__device__ __forceinline__ float cuda_bias_at(const void *bias, int bias_type, int j)
{
    switch (bias_type) {
    case DTYPE_F16:
        return __half2float(((const __half *)bias)[j]);
    case DTYPE_BF16:
        return __bfloat162float(((const __nv_bfloat16 *)bias)[j]);
    default:
        return ((const float *)bias)[j];
    }
}

// dot(v[0..32), x[0..32)) with x 16-byte aligned: one decoded 32-weight
// block of a quantized row against the activations it multiplies.
__device__ __forceinline__ float cuda_dot32(const float *v, const float *x)
{
    const float4 *xv = (const float4 *)x;
    float a = 0.0f;
#pragma unroll
    for (int q = 0; q < 8; q++) {
        const float4 xq = xv[q];
        a += v[4 * q] * xq.x + v[4 * q + 1] * xq.y + v[4 * q + 2] * xq.z + v[4 * q + 3] * xq.w;
    }
    return a;
}

__device__ __forceinline__ float cuda_warp_sum(float v)
{
#pragma unroll
    for (int off = CUDA_WARP / 2; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float cuda_warp_max(float v)
{
#pragma unroll
    for (int off = CUDA_WARP / 2; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// Sum over the block; every thread gets the result. shared: >= 32 floats.
// blockDim.x must be a multiple of 32.
// acc[t] += wf [VEC] . x[t][col .. col + VEC) for the M token rows of x (row
// pitch x_pitch, col a multiple of 4): the inner product of the GEMV kernels,
// in one fixed order per element.
template <int M, int VEC>
__device__ __forceinline__ void cuda_dot_rows(float *acc, const float *wf, const float *x,
                                              int64_t x_pitch, int64_t col)
{
#pragma unroll
    for (int t = 0; t < M; t++) {
        const float4 *xv = (const float4 *)(x + t * x_pitch + col);
#pragma unroll
        for (int q = 0; q < VEC / 4; q++) {
            const float4 xq = xv[q];
            acc[t] += wf[4 * q] * xq.x + wf[4 * q + 1] * xq.y + wf[4 * q + 2] * xq.z +
                      wf[4 * q + 3] * xq.w;
        }
    }
}

__device__ __forceinline__ float cuda_block_sum(float v, float *shared)
{
    const int lane = threadIdx.x % CUDA_WARP, warp = threadIdx.x / CUDA_WARP;
    const int n_warps = blockDim.x / CUDA_WARP;
    v = cuda_warp_sum(v);
    __syncthreads(); // shared may still be read by a previous reduction
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    v = lane < n_warps ? shared[lane] : 0.0f;
    return cuda_warp_sum(v);
}

__device__ __forceinline__ float cuda_block_max(float v, float *shared)
{
    const int lane = threadIdx.x % CUDA_WARP, warp = threadIdx.x / CUDA_WARP;
    const int n_warps = blockDim.x / CUDA_WARP;
    v = cuda_warp_max(v);
    __syncthreads();
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    v = lane < n_warps ? shared[lane] : -INFINITY;
    return cuda_warp_max(v);
}

// NORM_MATMUL's prologue for one token, run by the whole block in one pass:
// v [k] (shared memory) = h * w with h = x + add (add may be NULL), sum [k]
// = h when sum is not NULL (pass it to one block only), and the return value
// is the norm's scale rsqrt(mean(h^2) + eps), which the caller applies to its
// dot products (W . (h * w * scale) = scale * (W . v)). k % 4 == 0; x, add,
// sum and v 16-byte aligned; w any float dtype (cuda_bias_at). The block
// reduction's barriers leave v ready for every warp.
__device__ __forceinline__ float cuda_stage_rmsnorm(float *v, const float *x, const float *add,
                                                    const void *w, int w_type, float *sum, int k,
                                                    float eps, float *red)
{
    float ss = 0.0f;
    for (int i = 4 * (int)threadIdx.x; i < k; i += 4 * (int)blockDim.x) {
        float4 h = *(const float4 *)(x + i);
        if (add) {
            const float4 a = *(const float4 *)(add + i);
            h.x += a.x;
            h.y += a.y;
            h.z += a.z;
            h.w += a.w;
        }
        if (sum)
            *(float4 *)(sum + i) = h;
        ss += h.x * h.x + h.y * h.y + h.z * h.z + h.w * h.w;
        *(float4 *)(v + i) =
            make_float4(h.x * cuda_bias_at(w, w_type, i), h.y * cuda_bias_at(w, w_type, i + 1),
                        h.z * cuda_bias_at(w, w_type, i + 2), h.w * cuda_bias_at(w, w_type, i + 3));
    }
    return rsqrtf(cuda_block_sum(ss, red) / (float)k + eps);
}

// The NORM_MATMUL operands a decode kernel stages with cuda_stage_rmsnorm.
struct cuda_norm_in {
    const float *add; // [k] or NULL
    const void *w;    // [k], dtype w_type
    int w_type;
    float *sum; // [k] or NULL: receives x + add (written by block 0)
    float eps;
};

// Those operands of a NORM_MATMUL call (op.h: src1 add, src2 w, src5 sum).
static inline struct cuda_norm_in cuda_norm_in_of(const struct op_call *c)
{
    const struct tensor *add = c->src[1], *w = c->src[2], *sum = c->src[5];
    return {add ? (const float *)add->data : nullptr, w->data, (int)w->dtype,
            sum ? (float *)sum->data : nullptr, c->p.eps};
}

// ---- programmatic dependent launch (sm_90+) ----
//
// At batch 1 a decode step is a chain of ~10 small kernels a layer; replayed
// from a graph they follow each other with no idle gap (bench's
// libkernel_trace.so), but each kernel still ramps up from an empty GPU and
// drains to one. Kernels launched by cuda_launch with cuda_pdl set start
// while the kernel before them on the stream is still running: each first
// issues work that needs nothing from it (a GEMV queues an L2 prefetch of its
// first cuda_pdl_prefetch_bytes of weights), then waits in cuda_pdl_sync for
// the previous kernel to finish and flush. The sync also lets the next kernel
// launch, so at most one kernel waits ahead. Every kernel launched this way
// must call cuda_pdl_sync before it reads or writes anything another kernel
// touches, in every thread that can do so (weights and the batch's metadata,
// block tables, lengths, starts, positions and slots, excepted: only
// uploads, stream-ordered copies that never overlap a kernel, write them).
// What kernels that have finished wrote may be read before it too, through
// L2 (__ldcg), where the previous kernel writes none of it: the previous
// kernel passed its own sync only once they had finished (decode attention's
// KV rows behind its prologue, attention.cu).

__device__ __forceinline__ void cuda_pdl_sync()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Queues a prefetch of bytes (a multiple of 16) at p (16-byte aligned) into
// L2 with one instruction; nothing waits for it.
__device__ __forceinline__ void cuda_prefetch_l2(const void *p, uint32_t bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
    (void)p;
    (void)bytes;
#endif
}

// What a GEMV over matrix_bytes of weights prefetches before its sync: the
// whole matrix when it fits cuda_pdl_prefetch_bytes, else nothing. On the
// H200 whole 0.6B-shape matrices (4-13 MB) gained (tg128 1,099 -> 1,110
// tok/s) while the first 16 MiB of the 8B shape's larger ones cost more than
// they saved (bf16 216 -> 212, Q8_0 255 -> 247 tok/s): the prefetch then
// competes with the previous GEMV's own stream for the same bandwidth.
static inline int64_t cuda_gemv_prefetch(int64_t matrix_bytes)
{
    return matrix_bytes <= cuda_pdl_prefetch_bytes ? matrix_bytes : 0;
}

// cuda_gemv_load_early: a GEMV's weights need nothing from the kernel before
// it, so each warp issues its first pass of 16-byte weight loads into
// registers before cuda_pdl_sync, and that round trip to memory overlaps the
// previous kernel's tail (and, in the quantized GEMV, the activations'
// quantization) instead of following it. Unlike the L2 prefetch it asks only
// for what the warps already resident will consume first. H200: 0.6B bf16
// tg128 1,068-1,077 -> 1,101-1,105 tok/s, 8B Q4_K_M 247 -> 255; 8B bf16 and
// Q8_0 level (bench/RESULTS.md).

// Launch attribute: thread-block clusters of dims c (sm_90+).
static inline cudaLaunchAttribute cuda_cluster_attr(dim3 c)
{
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = c.x;
    attr.val.clusterDim.y = c.y;
    attr.val.clusterDim.z = c.z;
    return attr;
}

// kernel<<<grid, block, smem, stream>>>(args...) in thread-block clusters of
// dims cluster (none when it is 1 x 1 x 1), as a programmatic dependent
// launch when cuda_pdl is set. Errors are also left for cudaGetLastError.
template <typename... Params, typename... Args>
static inline cudaError_t cuda_launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block,
                                              size_t smem, cudaStream_t stream, dim3 cluster,
                                              Args... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    unsigned n_attr = 0;
    if (cluster.x * cluster.y * cluster.z > 1)
        attr[n_attr++] = cuda_cluster_attr(cluster);
    if (cuda_pdl) {
        attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n_attr].val.programmaticStreamSerializationAllowed = 1;
        n_attr++;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n_attr;
    return cudaLaunchKernelEx(&cfg, kernel, ((Params)args)...);
}

// The same without clusters.
template <typename... Params, typename... Args>
static inline cudaError_t cuda_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                      cudaStream_t stream, Args... args)
{
    return cuda_launch_cluster(kernel, grid, block, smem, stream, dim3(1, 1, 1), args...);
}

// ---- activations split into bf16 terms (matmul.cu) ----
// v as hi + lo, each bf16: hi its rounding, lo the rounding of the rest, so
// hi + lo keeps 16 significant bits. Stored at hi and at hi + lo_off. lo_off
// 0 asks for one f16 term instead (the operand of a GEMM over f16 weights),
// saturated at +-65504 as the f16 GEMM's own conversion does.
__device__ __forceinline__ __half cuda_f16_sat(float v)
{
    return __float2half_rn(fminf(fmaxf(v, -65504.0f), 65504.0f));
}

__device__ __forceinline__ void cuda_split_store(__nv_bfloat16 *hi, int64_t lo_off, float v)
{
    if (!lo_off) {
        *(__half *)hi = cuda_f16_sat(v);
        return;
    }
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    hi[0] = h;
    hi[lo_off] = __float2bfloat16_rn(v - __bfloat162float(h));
}

// The same for two consecutive values (hi 4-byte aligned).
__device__ __forceinline__ void cuda_split_store2(__nv_bfloat16 *hi, int64_t lo_off, float2 v)
{
    if (!lo_off) {
        *(__half2 *)hi = __halves2half2(cuda_f16_sat(v.x), cuda_f16_sat(v.y));
        return;
    }
    const __nv_bfloat16 h0 = __float2bfloat16_rn(v.x), h1 = __float2bfloat16_rn(v.y);
    __nv_bfloat162 h, l;
    h.x = h0;
    h.y = h1;
    l.x = __float2bfloat16_rn(v.x - __bfloat162float(h0));
    l.y = __float2bfloat16_rn(v.y - __bfloat162float(h1));
    *(__nv_bfloat162 *)hi = h;
    *(__nv_bfloat162 *)(hi + lo_off) = l;
}

// The same for four consecutive values (hi 8-byte aligned).
__device__ __forceinline__ void cuda_split_store4(__nv_bfloat16 *hi, int64_t lo_off, float4 v)
{
    if (!lo_off) {
        __half2 h[2] = {__halves2half2(cuda_f16_sat(v.x), cuda_f16_sat(v.y)),
                        __halves2half2(cuda_f16_sat(v.z), cuda_f16_sat(v.w))};
        uint2 w;
        memcpy(&w, h, sizeof w);
        *(uint2 *)hi = w;
        return;
    }
    const float f[4] = {v.x, v.y, v.z, v.w};
    __nv_bfloat16 h[4], l[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        h[i] = __float2bfloat16_rn(f[i]);
        l[i] = __float2bfloat16_rn(f[i] - __bfloat162float(h[i]));
    }
    uint2 hw, lw;
    memcpy(&hw, h, sizeof hw);
    memcpy(&lw, l, sizeof lw);
    *(uint2 *)hi = hw;
    *(uint2 *)(hi + lo_off) = lw;
}

// Row pitch of t in elements of its dtype (rows dense, see cuda_tensor_rows_ok).
static inline int64_t cuda_row_pitch(const struct tensor *t)
{
    const struct dtype_info *info = dtype_info(t->dtype);
    return (int64_t)(t->nb[1] / info->type_size);
}

#endif
