// Quantized GGUF weights on the GPU, kept packed: the legacy 32-weight types
// (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL), the k-quants (Q2_K .. Q6_K) and
// IQ4_XS. Decode (m <= CUDA_QGEMV_MAX_M) dots x directly against the blocks, a
// warp per output row and a lane per 32-weight sub-block, so each packed byte
// is read once; larger m dequantizes W to bf16 in scratch and runs the
// cuBLASLt GEMM; the embedding gathers and dequantizes rows. The arithmetic
// follows the formats' reference dequantization (cpu/quant/dequant.c), in f32.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/quant.cuh"

#define QGEMV_WARPS 4
#define QK_K 256

// ---- decoding one 32-weight sub-block ----

__device__ __forceinline__ float q_half(const uint8_t *p)
{
    return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
}

// Writes the 32 weights of sub-block j of the block at b into v.
template <int T> __device__ __forceinline__ void q_sub(const uint8_t *b, int j, float *v);

template <> __device__ __forceinline__ void q_sub<DTYPE_Q8_0>(const uint8_t *b, int, float *v)
{
    const float d = q_half(b);
#pragma unroll
    for (int l = 0; l < 32; l++)
        v[l] = (float)(int8_t)b[2 + l] * d;
}

template <> __device__ __forceinline__ void q_sub<DTYPE_Q4_0>(const uint8_t *b, int, float *v)
{
    const float d = q_half(b);
#pragma unroll
    for (int l = 0; l < 16; l++) {
        v[l] = (float)((b[2 + l] & 0xF) - 8) * d;
        v[l + 16] = (float)((b[2 + l] >> 4) - 8) * d;
    }
}

// The little-endian 32-bit word at p (the 5-bit types' qh, not 4-aligned).
__device__ __forceinline__ uint32_t q_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// d (0..1), m (2..3), qs (4..19): w = d * q + m.
template <> __device__ __forceinline__ void q_sub<DTYPE_Q4_1>(const uint8_t *b, int, float *v)
{
    const float d = q_half(b), m = q_half(b + 2);
#pragma unroll
    for (int l = 0; l < 16; l++) {
        v[l] = (float)(b[4 + l] & 0xF) * d + m;
        v[l + 16] = (float)(b[4 + l] >> 4) * d + m;
    }
}

// d (0..1), qh (2..5), qs (6..21): bit l of qh is bit 4 of weight l.
// w = d * (q - 16).
template <> __device__ __forceinline__ void q_sub<DTYPE_Q5_0>(const uint8_t *b, int, float *v)
{
    const float d = q_half(b);
    const uint32_t qh = q_u32(b + 2);
#pragma unroll
    for (int l = 0; l < 16; l++) {
        const int lo = (b[6 + l] & 0xF) | (int)(((qh >> l) & 1u) << 4);
        const int hi = (b[6 + l] >> 4) | (int)(((qh >> (l + 16)) & 1u) << 4);
        v[l] = (float)(lo - 16) * d;
        v[l + 16] = (float)(hi - 16) * d;
    }
}

// d (0..1), m (2..3), qh (4..7), qs (8..23): w = d * q + m.
template <> __device__ __forceinline__ void q_sub<DTYPE_Q5_1>(const uint8_t *b, int, float *v)
{
    const float d = q_half(b), m = q_half(b + 2);
    const uint32_t qh = q_u32(b + 4);
#pragma unroll
    for (int l = 0; l < 16; l++) {
        const int lo = (b[8 + l] & 0xF) | (int)(((qh >> l) & 1u) << 4);
        const int hi = (b[8 + l] >> 4) | (int)(((qh >> (l + 16)) & 1u) << 4);
        v[l] = (float)lo * d + m;
        v[l + 16] = (float)hi * d + m;
    }
}

// IQ4_NL's 16 levels {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38,
// 53, 69, 89, 113} as bytes, four to a word; a byte permute picks level i
// without a memory lookup per weight.
__device__ __forceinline__ float q_iq4nl(int i)
{
    const uint32_t lo = __byte_perm(0xBFAD9881u, 0xF6EADDCFu, (unsigned)(i & 7));
    const uint32_t hi = __byte_perm(0x26190D01u, 0x71594535u, (unsigned)(i & 7));
    return (float)(int8_t)(uint8_t)((i & 8) ? hi : lo);
}

// d (0..1), qs (2..17) placed as in Q4_0: w = d * level[q].
template <> __device__ __forceinline__ void q_sub<DTYPE_IQ4_NL>(const uint8_t *b, int, float *v)
{
    const float d = q_half(b);
#pragma unroll
    for (int l = 0; l < 16; l++) {
        v[l] = d * q_iq4nl(b[2 + l] & 0xF);
        v[l + 16] = d * q_iq4nl(b[2 + l] >> 4);
    }
}

// Q2_K: scales (0..15), qs (16..79), d (80..81), dmin (82..83). Sub-block j
// (weights 32 j ..) takes bits 2 (j % 4) of qs[32 (j / 4) + l]; each half of
// it has its own scale byte, 8 (j / 4) + 2 (j % 4) + l / 16: scale in the low
// nibble, min in the high one. w = (d * scale) * q - (dmin * min).
template <> __device__ __forceinline__ void q_sub<DTYPE_Q2_K>(const uint8_t *b, int j, float *v)
{
    const int h = j / 4, g = j % 4;
    const uint8_t *sc = b + 8 * h + 2 * g, *q = b + 16 + 32 * h;
    const float d = q_half(b + 80), dmin = q_half(b + 82);
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const float dl = d * (float)(sc[half] & 0xF), ml = dmin * (float)(sc[half] >> 4);
#pragma unroll
        for (int l = 16 * half; l < 16 * half + 16; l++)
            v[l] = dl * (float)((q[l] >> (2 * g)) & 3) - ml;
    }
}

// Signed 6-bit scale i (< 16) of a Q3_K block, layout in cpu/quant/blocks.h.
__device__ __forceinline__ int q3k_scale(const uint8_t *s, int i)
{
    const int lo = i < 8 ? s[i] & 0xF : s[i - 8] >> 4;
    const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    return (lo | hi << 4) - 32;
}

// Q3_K: hmask (0..31), qs (32..95), scales (96..107), d (108..109). The low
// 2 bits as in Q2_K; the high bit of weight 32 j + l is bit j of hmask[l] and
// its absence subtracts 4. w = (d * scale) * q.
template <> __device__ __forceinline__ void q_sub<DTYPE_Q3_K>(const uint8_t *b, int j, float *v)
{
    const int h = j / 4, g = j % 4;
    const uint8_t *hm = b, *q = b + 32 + 32 * h;
    const float d = q_half(b + 108);
    const uint8_t mask = (uint8_t)(1u << j); // 1 << (4 h + g)
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const float dl = d * (float)q3k_scale(b + 96, 8 * h + 2 * g + half);
#pragma unroll
        for (int l = 16 * half; l < 16 * half + 16; l++) {
            const int q3 = ((q[l] >> (2 * g)) & 3) - ((hm[l] & mask) ? 0 : 4);
            v[l] = dl * (float)q3;
        }
    }
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block.
__device__ __forceinline__ void q_scale_min_k4(int j, const uint8_t *s, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

template <> __device__ __forceinline__ void q_sub<DTYPE_Q4_K>(const uint8_t *b, int j, float *v)
{
    const float d = q_half(b), dmin = q_half(b + 2);
    int sc, m;
    q_scale_min_k4(j, b + 4, &sc, &m);
    const float d1 = d * (float)sc, m1 = dmin * (float)m;
    const uint8_t *q = b + 16 + 32 * (j / 2);
    const int shift = 4 * (j % 2);
#pragma unroll
    for (int l = 0; l < 32; l++)
        v[l] = d1 * (float)((q[l] >> shift) & 0xF) - m1;
}

// Q5_K: d (0..1), dmin (2..3), scales (4..15), qh (16..47), qs (48..175).
// As Q4_K with bit j of qh[l] as bit 4 of weight 32 j + l.
template <> __device__ __forceinline__ void q_sub<DTYPE_Q5_K>(const uint8_t *b, int j, float *v)
{
    const float d = q_half(b), dmin = q_half(b + 2);
    int sc, m;
    q_scale_min_k4(j, b + 4, &sc, &m);
    const float d1 = d * (float)sc, m1 = dmin * (float)m;
    const uint8_t *qh = b + 16, *q = b + 48 + 32 * (j / 2);
    const int shift = 4 * (j % 2);
#pragma unroll
    for (int l = 0; l < 32; l++) {
        const int q5 = ((q[l] >> shift) & 0xF) | (((qh[l] >> j) & 1) << 4);
        v[l] = d1 * (float)q5 - m1;
    }
}

template <> __device__ __forceinline__ void q_sub<DTYPE_Q6_K>(const uint8_t *b, int j, float *v)
{
    const int h = j / 4, g = j % 4;
    const uint8_t *ql = b + 64 * h + 32 * (g & 1), *qh = b + 128 + 32 * h;
    const int8_t *sc = (const int8_t *)(b + 192) + 8 * h + 2 * g;
    const float d = q_half(b + 208);
    const int shift_l = 4 * (g >> 1), shift_h = 2 * g;
#pragma unroll
    for (int l = 0; l < 32; l++) {
        const int lo = (ql[l] >> shift_l) & 0xF;
        const int q = (lo | ((qh[l] >> shift_h) & 3) << 4) - 32;
        v[l] = d * (float)sc[l / 16] * (float)q;
    }
}

// IQ4_XS: d (0..1), scales_h (2..3), scales_l (4..7), qs (8..135). Sub-block
// j's 6-bit scale: nibble j % 2 of scales_l[j / 2] below bits 2 j..2 j + 1 of
// scales_h; its 16 bytes qs[16 j ..] hold IQ4_NL levels placed as in Q4_0.
// w = (d * (scale - 32)) * level[q].
template <> __device__ __forceinline__ void q_sub<DTYPE_IQ4_XS>(const uint8_t *b, int j, float *v)
{
    const float d = q_half(b);
    const int scales_h = b[2] | b[3] << 8;
    const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((scales_h >> (2 * j)) & 3) << 4);
    const float dl = d * (float)(ls - 32);
    const uint8_t *q = b + 8 + 16 * j;
#pragma unroll
    for (int l = 0; l < 16; l++) {
        v[l] = dl * q_iq4nl(q[l] & 0xF);
        v[l + 16] = dl * q_iq4nl(q[l] >> 4);
    }
}

template <int T> struct q_fmt;
template <> struct q_fmt<DTYPE_Q4_0> { static constexpr int elems = 32, bytes = 18; };
template <> struct q_fmt<DTYPE_Q4_1> { static constexpr int elems = 32, bytes = 20; };
template <> struct q_fmt<DTYPE_Q5_0> { static constexpr int elems = 32, bytes = 22; };
template <> struct q_fmt<DTYPE_Q5_1> { static constexpr int elems = 32, bytes = 24; };
template <> struct q_fmt<DTYPE_Q8_0> { static constexpr int elems = 32, bytes = 34; };
template <> struct q_fmt<DTYPE_IQ4_NL> { static constexpr int elems = 32, bytes = 18; };
template <> struct q_fmt<DTYPE_Q2_K> { static constexpr int elems = QK_K, bytes = 84; };
template <> struct q_fmt<DTYPE_Q3_K> { static constexpr int elems = QK_K, bytes = 110; };
template <> struct q_fmt<DTYPE_Q4_K> { static constexpr int elems = QK_K, bytes = 144; };
template <> struct q_fmt<DTYPE_Q5_K> { static constexpr int elems = QK_K, bytes = 176; };
template <> struct q_fmt<DTYPE_Q6_K> { static constexpr int elems = QK_K, bytes = 210; };
template <> struct q_fmt<DTYPE_IQ4_XS> { static constexpr int elems = QK_K, bytes = 136; };

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
        q_sub<T>(wr + (int64_t)(s / SUBS) * q_fmt<T>::bytes, s % SUBS, v);
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
        q_sub<T>(w + src * w_pitch + (int64_t)(s / SUBS) * q_fmt<T>::bytes, s % SUBS, v);
    }
#pragma unroll
    for (int l = 0; l < 32; l++)
        o[l] = cuda_from_f32<TO>(v[l]);
}

// ---- launchers ----

template <int T, int M>
static void qgemv_launch_m(const struct op_call *c, cudaStream_t stream)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2];
    const int n = (int)w->ne[1];
    qgemv_kernel<T, M><<<(unsigned)((n + QGEMV_WARPS - 1) / QGEMV_WARPS),
                         QGEMV_WARPS * CUDA_WARP, 0, stream>>>(
        (float *)c->dst->data, cuda_row_pitch(c->dst), (const float *)x->data, cuda_row_pitch(x),
        (const uint8_t *)w->data, (int64_t)w->nb[1], b ? b->data : nullptr,
        b ? (int)b->dtype : (int)DTYPE_F32, n, (int)x->ne[0]);
}

template <int T> static void qgemv_launch(const struct op_call *c, int m, cudaStream_t stream)
{
    switch (m) {
    case 1: qgemv_launch_m<T, 1>(c, stream); break;
    case 2: qgemv_launch_m<T, 2>(c, stream); break;
    case 3: qgemv_launch_m<T, 3>(c, stream); break;
    case 4: qgemv_launch_m<T, 4>(c, stream); break;
    case 5: qgemv_launch_m<T, 5>(c, stream); break;
    case 6: qgemv_launch_m<T, 6>(c, stream); break;
    case 7: qgemv_launch_m<T, 7>(c, stream); break;
    default: qgemv_launch_m<T, 8>(c, stream); break;
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

// Every packed type, for the dispatch switches below (q_type_ok agrees).
#define Q_TYPES(X)                                                                                 \
    X(DTYPE_Q4_0) X(DTYPE_Q4_1) X(DTYPE_Q5_0) X(DTYPE_Q5_1) X(DTYPE_Q8_0) X(DTYPE_IQ4_NL)          \
        X(DTYPE_Q2_K) X(DTYPE_Q3_K) X(DTYPE_Q4_K) X(DTYPE_Q5_K) X(DTYPE_Q6_K) X(DTYPE_IQ4_XS)

template <typename TO>
static void qdequant_any(TO *out, int64_t out_pitch, const struct tensor *w, const int32_t *rows,
                         int64_t n_rows, cudaStream_t stream)
{
    switch (w->dtype) {
#define Q_CASE(t)                                                                                  \
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
#define Q_CASE(t) case t:
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

extern "C" bool cuda_qgemv_supports(const struct op_call *c)
{
    return q_matmul_ok(c) && tensor_n_rows(c->src[0]) >= 1 &&
           tensor_n_rows(c->src[0]) <= CUDA_QGEMV_MAX_M;
}

extern "C" enum vllmc_status cuda_qgemv_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const int m = (int)tensor_n_rows(c->src[0]);
    if (m == 0 || c->src[1]->ne[1] == 0)
        return VLLMC_OK;
    if (m > CUDA_QGEMV_MAX_M)
        return op_fail(c, VLLMC_ERR_UNSUPPORTED, "cuda-qgemv: m=%d above %d", m, CUDA_QGEMV_MAX_M);
    switch (c->src[1]->dtype) {
#define Q_CASE(t)                                                                                  \
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
