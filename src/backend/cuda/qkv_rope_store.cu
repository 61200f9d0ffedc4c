// QKV_ROPE_STORE: one warp per (token, head) over the fused qkv output
// [n_tokens, (n_heads + 2 n_kv_heads) head_dim]. A q warp norms and rotates
// its head into the q buffer; a k warp does the same into the key cache row
// of the token's slot and copies the matching v head into the value cache.
// The input is only read, so lanes may read any element of their head. Angles
// are pos * inv_freq in f32 with full-range sincosf, as in rope.cu.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/qkv_rope_store.cuh"

#define QKV_WARPS 4

// ---- kernel ----

// Grid: x = token, y = group of QKV_WARPS heads (q heads first, then k heads).
// wq and wk are NULL together (no per-head norm). A slot outside the cache
// is skipped like a negative one, as kv_store does.
template <typename TC, typename TW>
static __global__ void
qkv_rope_store_kernel(const float *qkv, int64_t qkv_pitch, float *q, int64_t q_head_stride,
                      int64_t q_tok_stride, TC *k_cache, TC *v_cache, const int32_t *slots,
                      int64_t n_slots, int n_heads, int n_kv_heads, int head_dim,
                      const int32_t *pos, const float *inv_freq, const TW *wq, const TW *wk,
                      float eps, int rope_dim, bool neox)
{
    cuda_pdl_sync();
    const int lane = threadIdx.x % CUDA_WARP;
    const int h = blockIdx.y * QKV_WARPS + threadIdx.x / CUDA_WARP;
    const int64_t tok = blockIdx.x;
    if (h >= n_heads + n_kv_heads)
        return; // the whole warp: h is uniform across it
    const float *row = qkv + tok * qkv_pitch;
    const float *xs = row + (int64_t)h * head_dim; // q head h, or k head h - n_heads
    const bool is_q = h < n_heads;
    float *qd = NULL;
    TC *kd = NULL;
    if (is_q) {
        qd = q + tok * q_tok_stride + (int64_t)h * q_head_stride;
    } else {
        const int32_t slot = slots[tok];
        if (slot < 0 || slot >= n_slots)
            return; // the whole warp
        const int kvh = h - n_heads;
        const int64_t at = ((int64_t)slot * n_kv_heads + kvh) * head_dim;
        kd = k_cache + at;
        const float *vs = row + (int64_t)(n_heads + n_kv_heads + kvh) * head_dim;
        TC *vd = v_cache + at;
        for (int i = lane; i < head_dim; i += CUDA_WARP)
            vd[i] = cuda_from_f32<TC>(vs[i]);
    }
    const TW *w = is_q ? wq : wk;
    float scale = 1.0f;
    if (w) {
        float ss = 0.0f;
        for (int i = lane; i < head_dim; i += CUDA_WARP)
            ss += xs[i] * xs[i];
        ss = cuda_warp_sum(ss);
        scale = rsqrtf(ss / (float)head_dim + eps);
    }
    const float p = (float)pos[tok];
    const int half = rope_dim / 2;
    for (int i = lane; i < half; i += CUDA_WARP) {
        const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float xa = xs[a], xb = xs[b];
        if (w) {
            xa = xa * scale * cuda_to_f32(w[a]);
            xb = xb * scale * cuda_to_f32(w[b]);
        }
        float s, co;
        sincosf(p * inv_freq[i], &s, &co);
        const float ra = xa * co - xb * s, rb = xb * co + xa * s;
        if (is_q) {
            qd[a] = ra;
            qd[b] = rb;
        } else {
            kd[a] = cuda_from_f32<TC>(ra);
            kd[b] = cuda_from_f32<TC>(rb);
        }
    }
    for (int i = rope_dim + lane; i < head_dim; i += CUDA_WARP) {
        float x = xs[i];
        if (w)
            x = x * scale * cuda_to_f32(w[i]);
        if (is_q)
            qd[i] = x;
        else
            kd[i] = cuda_from_f32<TC>(x);
    }
}

// ---- launcher ----

struct qkv_args {
    const float *qkv;
    int64_t qkv_pitch;
    float *q;
    int64_t q_head_stride, q_tok_stride;
    void *k_cache, *v_cache;
    const int32_t *slots;
    int64_t n_slots;
    int n_heads, n_kv_heads, head_dim;
    int64_t n_tokens;
    const int32_t *pos;
    const float *inv_freq;
    const void *wq, *wk;
    float eps;
    int rope_dim;
    bool neox;
};

template <typename TC, typename TW>
static void qkv_rope_store_launch(const struct qkv_args *a, cudaStream_t stream)
{
    const int n_groups = (a->n_heads + a->n_kv_heads + QKV_WARPS - 1) / QKV_WARPS;
    const dim3 grid((unsigned)a->n_tokens, (unsigned)n_groups);
    cuda_launch(qkv_rope_store_kernel<TC, TW>, grid, QKV_WARPS * CUDA_WARP, 0, stream, a->qkv,
                a->qkv_pitch, a->q, a->q_head_stride, a->q_tok_stride, (TC *)a->k_cache,
                (TC *)a->v_cache, a->slots, a->n_slots, a->n_heads, a->n_kv_heads, a->head_dim,
                a->pos, a->inv_freq, (const TW *)a->wq, (const TW *)a->wk, a->eps, a->rope_dim,
                a->neox);
}

template <typename TC>
static void qkv_rope_store_dispatch(const struct qkv_args *a, enum dtype w, cudaStream_t stream)
{
    switch (w) {
    case DTYPE_F16:
        qkv_rope_store_launch<TC, __half>(a, stream);
        break;
    case DTYPE_BF16:
        qkv_rope_store_launch<TC, __nv_bfloat16>(a, stream);
        break;
    default:
        qkv_rope_store_launch<TC, float>(a, stream);
        break;
    }
}

// ---- provider ----

// q [n_tokens, n_heads, head_dim] f32 with dense heads and any head and token
// pitch; qkv f32 rows with any pitch; caches dense of one float dtype; both
// norm weights or neither, dense, of one float dtype.
extern "C" bool cuda_qkv_rope_store_supports(const struct op_call *c)
{
    const struct tensor *q = c->dst, *qkv = c->src[0], *kc = c->src[5], *vc = c->src[6];
    const struct tensor *wq = c->src[3], *wk = c->src[4];
    if (c->op != OP_QKV_ROPE_STORE || !q || q->location != TENSOR_DEVICE || q->dtype != DTYPE_F32 ||
        q->nb[0] != sizeof(float) || q->nb[1] % sizeof(float) || q->nb[2] % sizeof(float) ||
        q->ne[3] != 1)
        return false;
    if (!cuda_tensor_rows_ok(qkv, DTYPE_F32) || !kc || !vc || !cuda_dtype_is_float(kc->dtype) ||
        !cuda_tensor_dense_ok(kc, kc->dtype) || !cuda_tensor_dense_ok(vc, kc->dtype))
        return false;
    if (wq && (!wk || !cuda_dtype_is_float(wq->dtype) || !cuda_tensor_dense_ok(wq, wq->dtype) ||
               !cuda_tensor_dense_ok(wk, wq->dtype)))
        return false;
    const int64_t n_heads = q->ne[1] + kc->ne[1];
    return cuda_tensor_dense_ok(c->src[1], DTYPE_I32) &&
           cuda_tensor_dense_ok(c->src[2], DTYPE_F32) &&
           cuda_tensor_dense_ok(c->src[7], DTYPE_I32) && q->ne[2] <= INT32_MAX &&
           (n_heads + QKV_WARPS - 1) / QKV_WARPS <= 65535 && kc->ne[3] * kc->ne[2] <= INT32_MAX &&
           n_heads * q->ne[0] <= INT32_MAX;
}

extern "C" enum vllmc_status cuda_qkv_rope_store_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct tensor *q = c->dst, *kc = c->src[5], *wq = c->src[3];
    struct qkv_args a;
    a.qkv = (const float *)c->src[0]->data;
    a.qkv_pitch = cuda_row_pitch(c->src[0]);
    a.q = (float *)q->data;
    a.q_head_stride = (int64_t)(q->nb[1] / sizeof(float));
    a.q_tok_stride = (int64_t)(q->nb[2] / sizeof(float));
    a.k_cache = kc->data;
    a.v_cache = c->src[6]->data;
    a.slots = (const int32_t *)c->src[7]->data;
    a.n_slots = kc->ne[3] * kc->ne[2];
    a.n_heads = (int)q->ne[1];
    a.n_kv_heads = (int)kc->ne[1];
    a.head_dim = (int)q->ne[0];
    a.n_tokens = q->ne[2];
    a.pos = (const int32_t *)c->src[1]->data;
    a.inv_freq = (const float *)c->src[2]->data;
    a.wq = wq ? wq->data : NULL;
    a.wk = wq ? c->src[4]->data : NULL;
    a.eps = c->p.eps;
    a.rope_dim = c->p.rope_dim;
    a.neox = c->p.rope_neox;
    if (a.n_tokens == 0)
        return VLLMC_OK;
    const enum dtype wt = wq ? wq->dtype : DTYPE_F32;
    switch (kc->dtype) {
    case DTYPE_F16:
        qkv_rope_store_dispatch<__half>(&a, wt, dev->stream);
        break;
    case DTYPE_BF16:
        qkv_rope_store_dispatch<__nv_bfloat16>(&a, wt, dev->stream);
        break;
    default:
        qkv_rope_store_dispatch<float>(&a, wt, dev->stream);
        break;
    }
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}
