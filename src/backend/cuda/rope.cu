// RoPE and fused q/k-norm + RoPE, in place over [n_tokens, n_heads, head_dim]
// views (heads and tokens may be strided, e.g. slices of a fused QKV output).
// Angles are pos * inv_freq in f32 with full-range sincosf, as the reference.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/rope.cuh"

#define ROPE_THREADS 256
#define QK_NORM_WARPS 4

// Rotates pair (x[a], x[b]) of one head by angle pos * inv_freq.
__device__ __forceinline__ void rope_rotate(float *x, int a, int b, float pos, float inv_freq)
{
    float s, co;
    sincosf(pos * inv_freq, &s, &co);
    const float xa = x[a], xb = x[b];
    x[a] = xa * co - xb * s;
    x[b] = xb * co + xa * s;
}

// ---- kernels ----

// x [n_tokens, n_heads, head_dim] with strides head_stride, tok_stride
// (elements); one block per token, one thread per rotated pair.
static __global__ void rope_kernel(float *x, int64_t head_stride, int64_t tok_stride,
                                   int n_heads, const int32_t *pos, const float *inv_freq,
                                   int rope_dim, bool neox)
{
    cuda_pdl_sync();
    const int tok = blockIdx.x, half = rope_dim / 2;
    const float p = (float)pos[tok];
    float *xt = x + (int64_t)tok * tok_stride;
    for (int idx = threadIdx.x; idx < n_heads * half; idx += blockDim.x) {
        const int h = idx / half, i = idx % half;
        float *xh = xt + (int64_t)h * head_stride;
        if (neox)
            rope_rotate(xh, i, i + half, p, inv_freq[i]);
        else
            rope_rotate(xh, 2 * i, 2 * i + 1, p, inv_freq[i]);
    }
}

// One warp per (token, head): RMSNorm over head_dim with weight w, then RoPE.
// Each lane rotates the pairs whose both elements it normalised itself.
template <typename TW>
static __global__ void rope_qk_norm_kernel(float *x, int64_t head_stride, int64_t tok_stride,
                                           int n_heads, int head_dim, const int32_t *pos,
                                           const float *inv_freq, const TW *w, float eps,
                                           int rope_dim, bool neox)
{
    cuda_pdl_sync();
    const int lane = threadIdx.x % CUDA_WARP;
    const int h = blockIdx.x * QK_NORM_WARPS + threadIdx.x / CUDA_WARP;
    const int tok = blockIdx.y;
    if (h >= n_heads)
        return;
    float *xh = x + (int64_t)tok * tok_stride + (int64_t)h * head_stride;
    float ss = 0.0f;
    for (int i = lane; i < head_dim; i += CUDA_WARP)
        ss += xh[i] * xh[i];
    ss = cuda_warp_sum(ss);
    const float scale = rsqrtf(ss / (float)head_dim + eps);
    __syncwarp();
    const int half = rope_dim / 2;
    const float p = (float)pos[tok];
    for (int i = lane; i < half; i += CUDA_WARP) {
        const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        xh[a] = xh[a] * scale * cuda_to_f32(w[a]);
        xh[b] = xh[b] * scale * cuda_to_f32(w[b]);
        rope_rotate(xh, a, b, p, inv_freq[i]);
    }
    for (int i = rope_dim + lane; i < head_dim; i += CUDA_WARP)
        xh[i] = xh[i] * scale * cuda_to_f32(w[i]);
}

// ---- launchers ----

static void rope_launch(float *x, int64_t head_stride, int64_t tok_stride, int n_heads,
                        int64_t n_tokens, const int32_t *pos, const float *inv_freq, int rope_dim,
                        bool neox, cudaStream_t stream)
{
    int threads = 32;
    while (threads < ROPE_THREADS && threads < n_heads * rope_dim / 2)
        threads *= 2;
    cuda_launch(rope_kernel, (unsigned)n_tokens, threads, 0, stream, x, head_stride, tok_stride,
                n_heads, pos, inv_freq, rope_dim, neox);
}

template <typename TW>
static void rope_qk_norm_launch(float *x, int64_t head_stride, int64_t tok_stride, int n_heads,
                                int head_dim, int64_t n_tokens, const int32_t *pos,
                                const float *inv_freq, const void *w, float eps, int rope_dim,
                                bool neox, cudaStream_t stream)
{
    const dim3 grid((unsigned)((n_heads + QK_NORM_WARPS - 1) / QK_NORM_WARPS), (unsigned)n_tokens);
    cuda_launch(rope_qk_norm_kernel<TW>, grid, QK_NORM_WARPS * CUDA_WARP, 0, stream, x, head_stride,
                tok_stride, n_heads, head_dim, pos, inv_freq, (const TW *)w, eps, rope_dim, neox);
}

// ---- providers ----

// dst is [n_tokens, n_heads, head_dim] f32 on the device with dense heads;
// positions i32 [n_tokens]; inv_freq f32 [rope_dim / 2].
static bool rope_common_ok(const struct op_call *c)
{
    const struct tensor *x = c->dst, *pos = c->src[0], *freq = c->src[1];
    if (!x || x->location != TENSOR_DEVICE || x->dtype != DTYPE_F32 || x->nb[0] != sizeof(float))
        return false;
    if (x->nb[1] % sizeof(float) || x->nb[2] % sizeof(float) || x->ne[3] != 1)
        return false;
    const int rd = c->p.rope_dim;
    return rd > 0 && rd % 2 == 0 && rd <= x->ne[0] && cuda_tensor_dense_ok(pos, DTYPE_I32) &&
           tensor_n_elements(pos) == x->ne[2] && cuda_tensor_dense_ok(freq, DTYPE_F32) &&
           tensor_n_elements(freq) == rd / 2 && x->ne[2] <= INT32_MAX &&
           x->ne[1] * x->ne[0] <= INT32_MAX;
}

extern "C" bool cuda_rope_supports(const struct op_call *c)
{
    return c->op == OP_ROPE && rope_common_ok(c);
}

extern "C" enum vllmc_status cuda_rope_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct tensor *x = c->dst;
    if (x->ne[2] == 0 || x->ne[1] == 0)
        return VLLMC_OK;
    rope_launch((float *)x->data, (int64_t)(x->nb[1] / sizeof(float)),
                (int64_t)(x->nb[2] / sizeof(float)), (int)x->ne[1], x->ne[2],
                (const int32_t *)c->src[0]->data, (const float *)c->src[1]->data, c->p.rope_dim,
                c->p.rope_neox, dev->stream);
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}

extern "C" bool cuda_qk_norm_rope_supports(const struct op_call *c)
{
    const struct tensor *w = c->src[2];
    return c->op == OP_QK_NORM_ROPE && rope_common_ok(c) && w && cuda_dtype_is_float(w->dtype) &&
           cuda_tensor_dense_ok(w, w->dtype) && tensor_n_elements(w) == c->dst->ne[0];
}

extern "C" enum vllmc_status cuda_qk_norm_rope_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct tensor *x = c->dst, *w = c->src[2];
    if (x->ne[2] == 0 || x->ne[1] == 0)
        return VLLMC_OK;
    float *xp = (float *)x->data;
    const int64_t hs = (int64_t)(x->nb[1] / sizeof(float)), ts = (int64_t)(x->nb[2] / sizeof(float));
    const int32_t *pos = (const int32_t *)c->src[0]->data;
    const float *freq = (const float *)c->src[1]->data;
    const int nh = (int)x->ne[1], hd = (int)x->ne[0];
    switch (w->dtype) {
    case DTYPE_F16:
        rope_qk_norm_launch<__half>(xp, hs, ts, nh, hd, x->ne[2], pos, freq, w->data, c->p.eps,
                                    c->p.rope_dim, c->p.rope_neox, dev->stream);
        break;
    case DTYPE_BF16:
        rope_qk_norm_launch<__nv_bfloat16>(xp, hs, ts, nh, hd, x->ne[2], pos, freq, w->data,
                                           c->p.eps, c->p.rope_dim, c->p.rope_neox, dev->stream);
        break;
    default:
        rope_qk_norm_launch<float>(xp, hs, ts, nh, hd, x->ne[2], pos, freq, w->data, c->p.eps,
                                   c->p.rope_dim, c->p.rope_neox, dev->stream);
        break;
    }
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}
