// AWQ/GPTQ int4g weights on the GPU (see int4g.cuh). A block is 20 bytes:
// f16 scale d, zero point z, a pad byte, 16 bytes of nibbles (weight l < 16
// in the low nibble of byte l, l + 16 in its high nibble); w = d * (q - z) in
// f32, the arithmetic of the CPU reference. Act-order layers store their
// columns in group order: the GEMV gathers x[perm[l]], the dequantization
// scatters column l to perm[l], so cuBLASLt then sees W in input order.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/int4g.cuh"
#include "backend/cuda/matmul.cuh"

#define I4_WARPS 4
#define I4_BLOCK_BYTES 20

// The 32 weights of the block at b (4-byte aligned: rows are k / 32 * 20 bytes).
__device__ __forceinline__ void i4_block(const uint8_t *b, float *v)
{
    const uint32_t head = *(const uint32_t *)b;
    const float d = __half2float(__ushort_as_half((unsigned short)(head & 0xffff)));
    const float z = (float)((head >> 16) & 0xff);
    const uint32_t *qs = (const uint32_t *)(b + 4);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t w = qs[i];
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const uint32_t q = (w >> (8 * t)) & 0xff;
            v[4 * i + t] = d * ((float)(q & 0xF) - z);
            v[4 * i + t + 16] = d * ((float)(q >> 4) - z);
        }
    }
}

// dst [M, n] = x [M, k] . W^T: a warp per output row, lanes stride over the
// row's blocks; each block is decoded once for all M tokens.
template <int M, bool PERM>
static __global__ void __launch_bounds__(I4_WARPS *CUDA_WARP)
    i4_gemv_kernel(float *dst, int64_t dst_pitch, const float *x, int64_t x_pitch, const uint8_t *w,
                   int64_t w_pitch, const int32_t *perm, const void *bias, int bias_type, int n,
                   int k)
{
    cuda_pdl_sync();
    const int row = blockIdx.x * I4_WARPS + threadIdx.x / CUDA_WARP;
    const int lane = threadIdx.x % CUDA_WARP;
    if (row >= n)
        return;
    const uint8_t *wr = w + (int64_t)row * w_pitch;
    float acc[M];
#pragma unroll
    for (int t = 0; t < M; t++)
        acc[t] = 0.0f;
    for (int s = lane; s < k / 32; s += CUDA_WARP) {
        float v[32];
        i4_block(wr + (int64_t)s * I4_BLOCK_BYTES, v);
#pragma unroll
        for (int t = 0; t < M; t++) {
            const float *xt = x + t * x_pitch;
            float a = 0.0f;
            if (PERM) {
                const int32_t *p = perm + (int64_t)s * 32;
#pragma unroll
                for (int l = 0; l < 32; l++)
                    a += v[l] * __ldg(xt + p[l]);
            } else {
                a = cuda_dot32(v, xt + (int64_t)s * 32);
            }
            acc[t] += a;
        }
    }
#pragma unroll
    for (int t = 0; t < M; t++) {
        float sum = cuda_warp_sum(acc[t]);
        if (lane == 0) {
            if (bias)
                sum += cuda_bias_at(bias, bias_type, row);
            dst[t * dst_pitch + row] = sum;
        }
    }
}

// out [n, k] bf16 (dense) = W in input order: a thread per block.
static __global__ void i4_dequant_kernel(__nv_bfloat16 *out, const uint8_t *w, int64_t w_pitch,
                                         const int32_t *perm, int k)
{
    const int64_t r = blockIdx.x;
    const int s = blockIdx.y * blockDim.x + threadIdx.x;
    if (s >= k / 32)
        return;
    float v[32];
    i4_block(w + r * w_pitch + (int64_t)s * I4_BLOCK_BYTES, v);
    __nv_bfloat16 *o = out + r * k;
#pragma unroll
    for (int l = 0; l < 32; l++)
        o[perm ? perm[s * 32 + l] : s * 32 + l] = __float2bfloat16(v[l]);
}

// ---- launchers ----

template <int M, bool PERM> static void i4_gemv_launch_m(const struct op_call *c, cudaStream_t st)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2], *p = c->src[3];
    const int n = (int)w->ne[1];
    cuda_launch(i4_gemv_kernel<M, PERM>, (unsigned)((n + I4_WARPS - 1) / I4_WARPS),
                I4_WARPS * CUDA_WARP, 0, st, (float *)c->dst->data, cuda_row_pitch(c->dst),
                (const float *)x->data, cuda_row_pitch(x), (const uint8_t *)w->data,
                (int64_t)w->nb[1], p ? (const int32_t *)p->data : nullptr, b ? b->data : nullptr,
                b ? (int)b->dtype : (int)DTYPE_F32, n, (int)x->ne[0]);
}

template <bool PERM> static void i4_gemv_launch(const struct op_call *c, int m, cudaStream_t st)
{
    switch (m) {
    case 1:
        i4_gemv_launch_m<1, PERM>(c, st);
        break;
    case 2:
        i4_gemv_launch_m<2, PERM>(c, st);
        break;
    case 3:
        i4_gemv_launch_m<3, PERM>(c, st);
        break;
    case 4:
        i4_gemv_launch_m<4, PERM>(c, st);
        break;
    case 5:
        i4_gemv_launch_m<5, PERM>(c, st);
        break;
    case 6:
        i4_gemv_launch_m<6, PERM>(c, st);
        break;
    case 7:
        i4_gemv_launch_m<7, PERM>(c, st);
        break;
    default:
        i4_gemv_launch_m<8, PERM>(c, st);
        break;
    }
}

// ---- providers ----

static bool i4_matmul_ok(const struct op_call *c)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2], *p = c->src[3];
    if (c->op != OP_MATMUL || !w || w->dtype != DTYPE_INT4G || w->location != TENSOR_DEVICE ||
        !tensor_rows_contiguous(w) || tensor_n_rows(w) != w->ne[1] || w->ne[0] % 32 ||
        w->nb[1] % 4 || (uintptr_t)w->data % 4 || !cuda_tensor_rows_ok(x, DTYPE_F32) ||
        !cuda_tensor_rows_ok(c->dst, DTYPE_F32))
        return false;
    if (b && (!cuda_dtype_is_float(b->dtype) || !cuda_tensor_dense_ok(b, b->dtype) ||
              tensor_n_elements(b) != w->ne[1]))
        return false;
    if (p && (!cuda_tensor_dense_ok(p, DTYPE_I32) || tensor_n_elements(p) != w->ne[0]))
        return false;
    return w->ne[0] == x->ne[0] && c->dst->ne[0] == w->ne[1] &&
           tensor_n_rows(c->dst) == tensor_n_rows(x) && w->ne[1] <= INT32_MAX &&
           x->ne[0] <= INT32_MAX;
}

extern "C" bool cuda_int4g_gemv_supports(const struct op_call *c)
{
    const struct tensor *x = c->src[0];
    // Without a permutation x is read in 16-byte vectors.
    return i4_matmul_ok(c) && tensor_n_rows(x) >= 1 && tensor_n_rows(x) <= CUDA_INT4G_GEMV_MAX_M &&
           (c->src[3] || ((uintptr_t)x->data % 16 == 0 && x->nb[1] % 16 == 0));
}

extern "C" enum vllmc_status cuda_int4g_gemv_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const int m = (int)tensor_n_rows(c->src[0]);
    if (m == 0 || c->src[1]->ne[1] == 0)
        return VLLMC_OK;
    if (m > CUDA_INT4G_GEMV_MAX_M)
        return op_fail(c, VLLMC_ERR_UNSUPPORTED, "cuda-int4g-gemv: m=%d above %d", m,
                       CUDA_INT4G_GEMV_MAX_M);
    if (c->src[3])
        i4_gemv_launch<true>(c, m, dev->stream);
    else
        i4_gemv_launch<false>(c, m, dev->stream);
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}

extern "C" bool cuda_int4g_gemm_supports(const struct op_call *c)
{
    return i4_matmul_ok(c) && c->src[0]->ne[0] % 8 == 0 && (uintptr_t)c->dst->data % 16 == 0 &&
           c->dst->nb[1] % 16 == 0;
}

// W is dequantized to bf16 in input order into the first part of the
// scratch; the activations' bf16 copy for cuBLASLt follows it.
extern "C" enum vllmc_status cuda_int4g_gemm_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct tensor *w = c->src[1], *p = c->src[3];
    const int64_t m = tensor_n_rows(c->src[0]), n = w->ne[1], k = w->ne[0];
    if (m == 0 || n == 0)
        return VLLMC_OK;
    void *scratch = nullptr;
    enum vllmc_status rc = cuda_matmul_lt_bf16_scratch(c, &scratch);
    if (rc)
        return rc;
    const int n_blocks = (int)(k / 32);
    const dim3 grid((unsigned)n, (unsigned)((n_blocks + 127) / 128));
    i4_dequant_kernel<<<grid, 128, 0, dev->stream>>>(
        (__nv_bfloat16 *)scratch, (const uint8_t *)w->data, (int64_t)w->nb[1],
        p ? (const int32_t *)p->data : nullptr, (int)k);
    CUDA_TRY_LAUNCH();
    return cuda_matmul_lt_bf16(c, scratch);
}
