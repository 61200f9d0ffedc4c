// Quantized GGUF weights on the GPU, kept packed: the legacy 32-weight types
// (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL), the k-quants (Q2_K .. Q6_K) and
// IQ4_XS. Decode (m <= CUDA_QGEMV_MAX_M) dots x directly against the blocks, a
// warp per output row and a lane per 32-weight sub-block, so each packed byte
// is read once; larger m dequantizes W to bf16 in scratch and runs the
// cuBLASLt GEMM (where its alignment allows; else the GEMV, 8 tokens a
// launch); the embedding gathers and dequantizes rows. The arithmetic
// follows the formats' reference dequantization (cpu/quant/dequant.c), in f32.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/quant.cuh"
#include "backend/cuda/quant_decode.h"

#define QGEMV_WARPS 4
#define QK_K 256

// ---- the packed types ----

// Every packed type: dtype, decoder (quant_decode.h), weights and bytes per
// block. q_type_ok and the dispatch switches below are made from this list.
#define Q_TYPES(X)                                                                                 \
    X(DTYPE_Q4_0, quant_decode_q4_0, 32, 18)                                                       \
    X(DTYPE_Q4_1, quant_decode_q4_1, 32, 20)                                                       \
    X(DTYPE_Q5_0, quant_decode_q5_0, 32, 22)                                                       \
    X(DTYPE_Q5_1, quant_decode_q5_1, 32, 24)                                                       \
    X(DTYPE_Q8_0, quant_decode_q8_0, 32, 34)                                                       \
    X(DTYPE_IQ4_NL, quant_decode_iq4_nl, 32, 18)                                                   \
    X(DTYPE_Q2_K, quant_decode_q2_k, QK_K, 84)                                                     \
    X(DTYPE_Q3_K, quant_decode_q3_k, QK_K, 110)                                                    \
    X(DTYPE_Q4_K, quant_decode_q4_k, QK_K, 144)                                                    \
    X(DTYPE_Q5_K, quant_decode_q5_k, QK_K, 176)                                                    \
    X(DTYPE_Q6_K, quant_decode_q6_k, QK_K, 210)                                                    \
    X(DTYPE_IQ4_XS, quant_decode_iq4_xs, QK_K, 136)

// q_fmt<T>::sub(b, j, v) writes the 32 weights of sub-block j of the block at
// b into v; elems and bytes give the block's size.
template <int T> struct q_fmt;
#define Q_FMT(t, decode, n_elems, n_bytes)                                                         \
    template <> struct q_fmt<t> {                                                                  \
        static constexpr int elems = n_elems, bytes = n_bytes;                                     \
        static __device__ __forceinline__ void sub(const uint8_t *b, int j, float *v)              \
        {                                                                                          \
            decode(b, j, v);                                                                       \
        }                                                                                          \
    };
Q_TYPES(Q_FMT)
#undef Q_FMT

// ---- kernels ----

// dst [M, n] = x [M, k] . W^T: a warp per output row, lanes stride over the
// row's 32-weight sub-blocks; each sub-block is decoded once for all M tokens.
template <int T, int M>
static __global__ void __launch_bounds__(QGEMV_WARPS * CUDA_WARP)
    qgemv_kernel(float *dst, int64_t dst_pitch, const float *x, int64_t x_pitch,
                 const uint8_t *w, int64_t w_pitch, const void *bias, int bias_type, int n, int k)
{
    constexpr int SUBS = q_fmt<T>::elems / 32;
    const int row = blockIdx.x * QGEMV_WARPS + threadIdx.x / CUDA_WARP;
    const int lane = threadIdx.x % CUDA_WARP;
    if (row >= n)
        return;
    const uint8_t *wr = w + (int64_t)row * w_pitch;
    const int n_subs = k / 32;
    float acc[M];
#pragma unroll
    for (int t = 0; t < M; t++)
        acc[t] = 0.0f;
    for (int s = lane; s < n_subs; s += CUDA_WARP) {
        float v[32];
        q_fmt<T>::sub(wr + (int64_t)(s / SUBS) * q_fmt<T>::bytes, s % SUBS, v);
#pragma unroll
        for (int t = 0; t < M; t++)
            acc[t] += cuda_dot32(v, x + t * x_pitch + (int64_t)s * 32);
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

// out rows [n_rows, k] (f32 or bf16, dense pitch out_pitch elements) from
// packed rows; rows[] picks table rows (embedding), or NULL for 0..n_rows-1.
// A row id outside the table gives zeros.
template <int T, typename TO>
static __global__ void qdequant_kernel(TO *out, int64_t out_pitch, const uint8_t *w,
                                       int64_t w_pitch, int64_t n_table, const int32_t *rows,
                                       int k)
{
    constexpr int SUBS = q_fmt<T>::elems / 32;
    const int64_t r = blockIdx.x;
    const int64_t src = rows ? rows[r] : r;
    const int n_subs = k / 32;
    const int s = blockIdx.y * blockDim.x + threadIdx.x;
    if (s >= n_subs)
        return;
    TO *o = out + r * out_pitch + (int64_t)s * 32;
    float v[32];
    if (src < 0 || src >= n_table) {
#pragma unroll
        for (int l = 0; l < 32; l++)
            v[l] = 0.0f;
    } else {
        q_fmt<T>::sub(w + src * w_pitch + (int64_t)(s / SUBS) * q_fmt<T>::bytes, s % SUBS, v);
    }
#pragma unroll
    for (int l = 0; l < 32; l++)
        o[l] = cuda_from_f32<TO>(v[l]);
}

// ---- launchers ----

// Tokens t0 .. t0 + M - 1 of the call.
template <int T, int M>
static void qgemv_launch_m(const struct op_call *c, int64_t t0, cudaStream_t stream)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2];
    const int n = (int)w->ne[1];
    const int64_t x_pitch = cuda_row_pitch(x), dst_pitch = cuda_row_pitch(c->dst);
    qgemv_kernel<T, M><<<(unsigned)((n + QGEMV_WARPS - 1) / QGEMV_WARPS),
                         QGEMV_WARPS * CUDA_WARP, 0, stream>>>(
        (float *)c->dst->data + t0 * dst_pitch, dst_pitch, (const float *)x->data + t0 * x_pitch,
        x_pitch, (const uint8_t *)w->data, (int64_t)w->nb[1], b ? b->data : nullptr,
        b ? (int)b->dtype : (int)DTYPE_F32, n, (int)x->ne[0]);
}

// Every token of the call, CUDA_QGEMV_MAX_M at a time.
template <int T> static void qgemv_launch(const struct op_call *c, int64_t m, cudaStream_t stream)
{
    for (int64_t t0 = 0; t0 < m; t0 += CUDA_QGEMV_MAX_M) {
        switch (m - t0) {
        case 1: qgemv_launch_m<T, 1>(c, t0, stream); break;
        case 2: qgemv_launch_m<T, 2>(c, t0, stream); break;
        case 3: qgemv_launch_m<T, 3>(c, t0, stream); break;
        case 4: qgemv_launch_m<T, 4>(c, t0, stream); break;
        case 5: qgemv_launch_m<T, 5>(c, t0, stream); break;
        case 6: qgemv_launch_m<T, 6>(c, t0, stream); break;
        case 7: qgemv_launch_m<T, 7>(c, t0, stream); break;
        default: qgemv_launch_m<T, 8>(c, t0, stream); break;
        }
    }
}

template <int T, typename TO>
static void qdequant_launch(TO *out, int64_t out_pitch, const struct tensor *w,
                            const int32_t *rows, int64_t n_rows, cudaStream_t stream)
{
    const int n_subs = (int)(w->ne[0] / 32);
    const dim3 grid((unsigned)n_rows, (unsigned)((n_subs + 127) / 128));
    qdequant_kernel<T, TO><<<grid, 128, 0, stream>>>(out, out_pitch, (const uint8_t *)w->data,
                                                     (int64_t)w->nb[1], tensor_n_rows(w), rows,
                                                     (int)w->ne[0]);
}

template <typename TO>
static void qdequant_any(TO *out, int64_t out_pitch, const struct tensor *w, const int32_t *rows,
                         int64_t n_rows, cudaStream_t stream)
{
    switch (w->dtype) {
#define Q_CASE(t, ...)                                                                             \
    case t: qdequant_launch<t, TO>(out, out_pitch, w, rows, n_rows, stream); break;
        Q_TYPES(Q_CASE)
#undef Q_CASE
    default: VLLMC_ASSERT(!"cuda-q: dtype outside q_type_ok"); break;
    }
}

// ---- providers ----

static bool q_type_ok(enum dtype t)
{
    switch (t) {
#define Q_CASE(t, ...) case t:
        Q_TYPES(Q_CASE)
#undef Q_CASE
        return true;
    default:
        return false;
    }
}

// W [n, k] packed, rows dense (row pitch nb[1] bytes), on the device.
static bool q_weight_ok(const struct tensor *w)
{
    return w && w->location == TENSOR_DEVICE && q_type_ok(w->dtype) &&
           tensor_rows_contiguous(w) && tensor_n_rows(w) == w->ne[1] &&
           w->ne[0] % dtype_info(w->dtype)->block_size == 0;
}

static bool q_matmul_ok(const struct op_call *c)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2];
    if (c->op != OP_MATMUL || !q_weight_ok(w) || !cuda_tensor_rows_ok(x, DTYPE_F32) ||
        !cuda_tensor_rows_ok(c->dst, DTYPE_F32))
        return false;
    if (b && (!cuda_dtype_is_float(b->dtype) || !cuda_tensor_dense_ok(b, b->dtype) ||
              tensor_n_elements(b) != w->ne[1]))
        return false;
    return w->ne[0] == x->ne[0] && c->dst->ne[0] == w->ne[1] &&
           tensor_n_rows(c->dst) == tensor_n_rows(x) && w->ne[1] <= INT32_MAX &&
           x->ne[0] <= INT32_MAX && (uintptr_t)x->data % 16 == 0 && x->nb[1] % 16 == 0;
}

// Up to CUDA_QGEMV_MAX_M tokens; more only where the dequantizing GEMM's
// alignment gate declines the call (e.g. an odd n makes dst rows unaligned),
// run CUDA_QGEMV_MAX_M tokens per launch.
extern "C" bool cuda_qgemv_supports(const struct op_call *c)
{
    const int64_t m = tensor_n_rows(c->src[0]);
    return q_matmul_ok(c) && m >= 1 && (m <= CUDA_QGEMV_MAX_M || !cuda_qgemm_supports(c));
}

extern "C" enum vllmc_status cuda_qgemv_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const int64_t m = tensor_n_rows(c->src[0]);
    if (m == 0 || c->src[1]->ne[1] == 0)
        return VLLMC_OK;
    switch (c->src[1]->dtype) {
#define Q_CASE(t, ...)                                                                             \
    case t: qgemv_launch<t>(c, m, dev->stream); break;
        Q_TYPES(Q_CASE)
#undef Q_CASE
    default: VLLMC_ASSERT(!"cuda-qgemv: dtype outside q_type_ok"); break;
    }
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}

extern "C" bool cuda_qgemm_supports(const struct op_call *c)
{
    return q_matmul_ok(c) && c->src[0]->ne[0] % 8 == 0 && (uintptr_t)c->dst->data % 16 == 0 &&
           c->dst->nb[1] % 16 == 0;
}

// W is dequantized to bf16 into the first part of the scratch; the
// activations' bf16 copy for cuBLASLt follows it.
extern "C" enum vllmc_status cuda_qgemm_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct tensor *w = c->src[1];
    const int64_t m = tensor_n_rows(c->src[0]), n = w->ne[1], k = w->ne[0];
    if (m == 0 || n == 0)
        return VLLMC_OK;
    void *scratch = nullptr;
    enum vllmc_status rc = cuda_matmul_lt_bf16_scratch(c, &scratch);
    if (rc)
        return rc;
    qdequant_any<__nv_bfloat16>((__nv_bfloat16 *)scratch, k, w, nullptr, n, dev->stream);
    CUDA_TRY_LAUNCH();
    return cuda_matmul_lt_bf16(c, scratch);
}

extern "C" bool cuda_qembedding_supports(const struct op_call *c)
{
    const struct tensor *d = c->dst, *t = c->src[0], *ids = c->src[1];
    return c->op == OP_EMBEDDING && cuda_tensor_rows_ok(d, DTYPE_F32) && q_weight_ok(t) &&
           cuda_tensor_dense_ok(ids, DTYPE_I32) && t->ne[0] == d->ne[0] &&
           tensor_n_elements(ids) == tensor_n_rows(d) && tensor_n_rows(d) <= INT32_MAX;
}

extern "C" enum vllmc_status cuda_qembedding_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const int64_t n = tensor_n_rows(c->dst);
    if (n == 0)
        return VLLMC_OK;
    qdequant_any<float>((float *)c->dst->data, cuda_row_pitch(c->dst), c->src[0],
                        (const int32_t *)c->src[1]->data, n, dev->stream);
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}
