// RMSNorm and fused residual-add + RMSNorm: one block per row. The fused form
// writes the new residual and reads it back once, so a layer's norm costs one
// pass over the hidden state instead of two. Rows of whole float4 chunks keep
// the row in registers (norm_rms_vec_kernel).
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/norm.cuh"

#define NORM_THREADS_MAX 1024

// ---- kernels ----

// x as the two halves of a stacked GEMM's output whose sum ADD_RMSNORM took
// (cuda_sum_take): x's row is x + x2's (+ bias), added as the sum kernel
// does, and written to xw's row where xw is set (the GEMM's dst, when the
// norm's dst is not that buffer). x2 NULL: x as it is.
struct norm_x2 {
    const float *x2; // row r at x2 + r * x_pitch
    const void *bias;
    int bias_type;
    float *xw;
    int64_t xw_pitch;
};

// dst [n, dim] = x * rsqrt(mean(x^2) + eps) * w. When res is set (fused add),
// res [n, dim] += x first and the norm is taken of the sum. dst may alias x.
// With hi set, dst's bf16 hi + lo terms also go to hi [n, dim] and
// hi + lo_off (cuda_split_begin).
template <typename TW, bool FUSED>
static __global__ void norm_rms_kernel(float *dst, int64_t dst_pitch, const float *x,
                                       int64_t x_pitch, float *res, int64_t res_pitch, const TW *w,
                                       int dim, float eps, __nv_bfloat16 *hi, int64_t lo_off,
                                       struct norm_x2 s2)
{
    __shared__ float red[32];
    cuda_pdl_sync();
    const int64_t row = blockIdx.x;
    const float *xr = x + row * x_pitch;
    float *dr = dst + row * dst_pitch;
    float *rr = FUSED ? res + row * res_pitch : nullptr;

    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xr[i];
        if (s2.x2) {
            v += s2.x2[row * x_pitch + i];
            if (s2.bias)
                v += cuda_bias_at(s2.bias, s2.bias_type, i);
            if (s2.xw)
                s2.xw[row * s2.xw_pitch + i] = v;
        }
        if (FUSED) {
            v += rr[i];
            rr[i] = v;
        }
        ss += v * v;
    }
    ss = cuda_block_sum(ss, red);
    const float scale = rsqrtf(ss / (float)dim + eps);
    // Each thread reads back only the elements it wrote above (a taken sum
    // comes with the residual: FUSED).
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = FUSED ? rr[i] : xr[i];
        const float o = v * scale * cuda_to_f32(w[i]);
        dr[i] = o;
        if (hi)
            cuda_split_store(hi + row * dim + i, lo_off, o);
    }
}

// The same for rows of dim % 4 == 0 on 16-byte boundaries: each thread
// holds CH float4 chunks in registers, so all of a row's loads (x, the
// residual and the weights) are in flight at once before the one block
// reduction. The loop above waits on each chunk in turn (its residual store
// may alias the next load); at batch 1 that made add + RMSNorm a chain of
// dependent loads, ~4 us a call on the H200 for a 1024-wide row.
template <typename TW, bool FUSED, int CH>
static __global__ void norm_rms_vec_kernel(float *dst, int64_t dst_pitch, const float *x,
                                           int64_t x_pitch, float *res, int64_t res_pitch,
                                           const TW *w, int dim, float eps, __nv_bfloat16 *hi,
                                           int64_t lo_off, struct norm_x2 s2)
{
    __shared__ float red[32];
    cuda_pdl_sync();
    const int64_t row = blockIdx.x;
    const int n4 = dim / 4;
    const float4 *xr = (const float4 *)(x + row * x_pitch);
    float4 *rr = FUSED ? (float4 *)(res + row * res_pitch) : nullptr;
    float4 v[CH];
    float wv[CH][4];
#pragma unroll
    for (int j = 0; j < CH; j++) {
        const int c = threadIdx.x + j * blockDim.x;
        v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (c < n4) {
            v[j] = xr[c];
            if (s2.x2) {
                const float4 b = ((const float4 *)(s2.x2 + row * x_pitch))[c];
                v[j].x += b.x;
                v[j].y += b.y;
                v[j].z += b.z;
                v[j].w += b.w;
                if (s2.bias) {
                    v[j].x += cuda_bias_at(s2.bias, s2.bias_type, 4 * c);
                    v[j].y += cuda_bias_at(s2.bias, s2.bias_type, 4 * c + 1);
                    v[j].z += cuda_bias_at(s2.bias, s2.bias_type, 4 * c + 2);
                    v[j].w += cuda_bias_at(s2.bias, s2.bias_type, 4 * c + 3);
                }
                if (s2.xw)
                    ((float4 *)(s2.xw + row * s2.xw_pitch))[c] = v[j];
            }
            if (FUSED) {
                const float4 r = rr[c];
                v[j].x += r.x;
                v[j].y += r.y;
                v[j].z += r.z;
                v[j].w += r.w;
            }
#pragma unroll
            for (int e = 0; e < 4; e++)
                wv[j][e] = cuda_to_f32(w[4 * c + e]);
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < CH; j++) {
        const int c = threadIdx.x + j * blockDim.x;
        ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
        if (FUSED && c < n4)
            rr[c] = v[j];
    }
    ss = cuda_block_sum(ss, red);
    const float scale = rsqrtf(ss / (float)dim + eps);
    float4 *dr = (float4 *)(dst + row * dst_pitch);
#pragma unroll
    for (int j = 0; j < CH; j++) {
        const int c = threadIdx.x + j * blockDim.x;
        if (c < n4) {
            const float4 o = make_float4(v[j].x * scale * wv[j][0], v[j].y * scale * wv[j][1],
                                         v[j].z * scale * wv[j][2], v[j].w * scale * wv[j][3]);
            dr[c] = o;
            if (hi)
                cuda_split_store4(hi + row * dim + 4 * c, lo_off, o);
        }
    }
}

// ---- launchers ----

static int norm_threads(int dim)
{
    int t = 32;
    while (t < NORM_THREADS_MAX && t * 4 < dim)
        t *= 2;
    return t;
}

static bool norm_aligned16(const void *p, int64_t pitch)
{
    return (uintptr_t)p % 16 == 0 && pitch % 4 == 0;
}

template <typename TW, bool FUSED, int CH>
static void norm_rms_vec_launch(float *dst, int64_t dst_pitch, const float *x, int64_t x_pitch,
                                float *res, int64_t res_pitch, const void *w, int dim,
                                int64_t n_rows, float eps, __nv_bfloat16 *hi, int64_t lo_off,
                                cudaStream_t stream, struct norm_x2 s2)
{
    const int n4 = dim / 4, per = (n4 + CH - 1) / CH;
    const int threads = (per + CUDA_WARP - 1) / CUDA_WARP * CUDA_WARP;
    cuda_launch(norm_rms_vec_kernel<TW, FUSED, CH>, (unsigned)n_rows, threads, 0, stream, dst,
                dst_pitch, x, x_pitch, res, res_pitch, (const TW *)w, dim, eps, hi, lo_off, s2);
}

template <typename TW, bool FUSED>
static void norm_rms_launch(float *dst, int64_t dst_pitch, const float *x, int64_t x_pitch,
                            float *res, int64_t res_pitch, const void *w, int dim, int64_t n_rows,
                            float eps, __nv_bfloat16 *hi, int64_t lo_off, cudaStream_t stream,
                            struct norm_x2 s2)
{
    const bool vec =
        dim % 4 == 0 && dim <= 8 * 4 * NORM_THREADS_MAX && norm_aligned16(dst, dst_pitch) &&
        norm_aligned16(x, x_pitch) && (!s2.x2 || norm_aligned16(s2.x2, x_pitch)) &&
        (!s2.xw || norm_aligned16(s2.xw, s2.xw_pitch)) &&
        (!FUSED || norm_aligned16(res, res_pitch)) && (uintptr_t)w % (4 * sizeof(TW)) == 0;
    if (vec) {
        const int n4 = dim / 4;
        if (n4 <= NORM_THREADS_MAX)
            norm_rms_vec_launch<TW, FUSED, 1>(dst, dst_pitch, x, x_pitch, res, res_pitch, w, dim,
                                              n_rows, eps, hi, lo_off, stream, s2);
        else if (n4 <= 2 * NORM_THREADS_MAX)
            norm_rms_vec_launch<TW, FUSED, 2>(dst, dst_pitch, x, x_pitch, res, res_pitch, w, dim,
                                              n_rows, eps, hi, lo_off, stream, s2);
        else if (n4 <= 4 * NORM_THREADS_MAX)
            norm_rms_vec_launch<TW, FUSED, 4>(dst, dst_pitch, x, x_pitch, res, res_pitch, w, dim,
                                              n_rows, eps, hi, lo_off, stream, s2);
        else
            norm_rms_vec_launch<TW, FUSED, 8>(dst, dst_pitch, x, x_pitch, res, res_pitch, w, dim,
                                              n_rows, eps, hi, lo_off, stream, s2);
        return;
    }
    cuda_launch(norm_rms_kernel<TW, FUSED>, (unsigned)n_rows, norm_threads(dim), 0, stream, dst,
                dst_pitch, x, x_pitch, res, res_pitch, (const TW *)w, dim, eps, hi, lo_off, s2);
}

// x's rows from x_data (row pitch x_pitch): the tensor's own, or a taken
// sum's first half (struct norm_x2).
template <bool FUSED>
static void norm_rms_dispatch(const struct tensor *dst, const struct tensor *x,
                              const struct tensor *w, const struct tensor *res, float eps,
                              __nv_bfloat16 *hi, int64_t lo_off, cudaStream_t stream,
                              const float *x_data, int64_t x_pitch, struct norm_x2 s2)
{
    const int dim = (int)x->ne[0];
    const int64_t n_rows = tensor_n_rows(x);
    float *rp = res ? (float *)res->data : nullptr;
    const int64_t res_pitch = res ? cuda_row_pitch(res) : 0;
    float *dp = (float *)dst->data;
    const int64_t dp_pitch = cuda_row_pitch(dst);
    switch (w->dtype) {
    case DTYPE_F16:
        norm_rms_launch<__half, FUSED>(dp, dp_pitch, x_data, x_pitch, rp, res_pitch, w->data, dim,
                                       n_rows, eps, hi, lo_off, stream, s2);
        break;
    case DTYPE_BF16:
        norm_rms_launch<__nv_bfloat16, FUSED>(dp, dp_pitch, x_data, x_pitch, rp, res_pitch, w->data,
                                              dim, n_rows, eps, hi, lo_off, stream, s2);
        break;
    default:
        norm_rms_launch<float, FUSED>(dp, dp_pitch, x_data, x_pitch, rp, res_pitch, w->data, dim,
                                      n_rows, eps, hi, lo_off, stream, s2);
        break;
    }
}

// ---- providers ----

static bool norm_common_ok(const struct op_call *c)
{
    const struct tensor *x = c->src[0], *w = c->src[1];
    return cuda_tensor_rows_ok(c->dst, DTYPE_F32) && cuda_tensor_rows_ok(x, DTYPE_F32) && w &&
           cuda_dtype_is_float(w->dtype) && cuda_tensor_dense_ok(w, w->dtype) &&
           tensor_n_elements(w) == x->ne[0] && tensor_same_shape(c->dst, x) &&
           tensor_n_rows(x) <= INT32_MAX && x->ne[0] > 0;
}

extern "C" bool cuda_rmsnorm_supports(const struct op_call *c)
{
    return c->op == OP_RMSNORM && norm_common_ok(c);
}

extern "C" enum vllmc_status cuda_rmsnorm_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    if (tensor_n_rows(c->src[0]) == 0)
        return VLLMC_OK;
    const struct norm_x2 none = {};
    int64_t lo_off;
    __nv_bfloat16 *hi = (__nv_bfloat16 *)cuda_split_begin(c, c->dst, &lo_off);
    norm_rms_dispatch<false>(c->dst, c->src[0], c->src[1], nullptr, c->p.eps, hi, lo_off,
                             dev->stream, (const float *)c->src[0]->data, cuda_row_pitch(c->src[0]),
                             none);
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}

extern "C" bool cuda_add_rmsnorm_supports(const struct op_call *c)
{
    return c->op == OP_ADD_RMSNORM && norm_common_ok(c) &&
           cuda_tensor_rows_ok(c->src[2], DTYPE_F32) && tensor_same_shape(c->src[2], c->src[0]);
}

extern "C" enum vllmc_status cuda_add_rmsnorm_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    if (tensor_n_rows(c->src[0]) == 0)
        return VLLMC_OK;
    // x may be a stacked GEMM's output whose halves are not summed yet.
    struct cuda_pending_sum ps;
    bool taken;
    enum vllmc_status rc = cuda_sum_take(c, c->src[0], &ps, &taken);
    if (rc)
        return rc;
    struct norm_x2 s2 = {};
    const float *x_data = (const float *)c->src[0]->data;
    int64_t x_pitch = cuda_row_pitch(c->src[0]);
    if (taken) {
        x_data = ps.y;
        x_pitch = ps.y_pitch;
        s2.x2 = ps.y + (int64_t)ps.m * ps.y_pitch;
        s2.bias = ps.bias;
        s2.bias_type = ps.bias_type;
        // The GEMM's dst keeps its meaning unless the norm overwrites it.
        if (c->dst->data != c->src[0]->data) {
            s2.xw = ps.dst;
            s2.xw_pitch = ps.dst_pitch;
        }
    }
    int64_t lo_off;
    __nv_bfloat16 *hi = (__nv_bfloat16 *)cuda_split_begin(c, c->dst, &lo_off);
    norm_rms_dispatch<true>(c->dst, c->src[0], c->src[1], c->src[2], c->p.eps, hi, lo_off,
                            dev->stream, x_data, x_pitch, s2);
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}

// ---- NORM_MATMUL's norm operands (the decode GEMVs stage the norm) ----

static bool aligned16_ptr(const void *p)
{
    return (uintptr_t)p % 16 == 0;
}

extern "C" bool cuda_norm_in_ok(const struct op_call *c)
{
    const struct tensor *x = c->src[0], *add = c->src[1], *w = c->src[2], *sum = c->src[5];
    if (c->op != OP_NORM_MATMUL || !cuda_norm_matmul || !cuda_tensor_rows_ok(x, DTYPE_F32) ||
        tensor_n_rows(x) != 1 || x->ne[0] % 4 != 0 || x->ne[0] > CUDA_NORM_STAGE_MAX_K ||
        !aligned16_ptr(x->data) || !w || !cuda_dtype_is_float(w->dtype) ||
        !cuda_tensor_dense_ok(w, w->dtype) || tensor_n_elements(w) != x->ne[0])
        return false;
    if (add && (!cuda_tensor_rows_ok(add, DTYPE_F32) || !tensor_same_shape(add, x) ||
                !aligned16_ptr(add->data)))
        return false;
    return !sum || (add && cuda_tensor_rows_ok(sum, DTYPE_F32) && tensor_same_shape(sum, x) &&
                    aligned16_ptr(sum->data));
}
