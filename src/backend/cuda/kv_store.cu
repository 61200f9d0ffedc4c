// KV store: one block per token copies its [n_kv_heads, head_dim] keys and
// values into slot `slot_mapping[t]` of the paged caches
// [n_blocks, block_size, n_kv_heads, head_dim], converting to the cache dtype.
// A slot outside the cache is skipped like a negative one.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kv_store.cuh"

#define KV_STORE_THREADS 256

// ---- kernels ----

template <typename TC>
static __global__ void kv_store_kernel(TC *k_cache, TC *v_cache, const float *k, int64_t k_pitch,
                                       const float *v, int64_t v_pitch, const int32_t *slots,
                                       int64_t n_slots, int row)
{
    cuda_pdl_sync();
    const int64_t tok = blockIdx.x;
    const int32_t slot = slots[tok];
    if (slot < 0 || slot >= n_slots)
        return;
    const float *ks = k + tok * k_pitch, *vs = v + tok * v_pitch;
    TC *kd = k_cache + (int64_t)slot * row, *vd = v_cache + (int64_t)slot * row;
    for (int i = threadIdx.x; i < row; i += blockDim.x) {
        kd[i] = cuda_from_f32<TC>(ks[i]);
        vd[i] = cuda_from_f32<TC>(vs[i]);
    }
}

// ---- launchers ----

template <typename TC>
static void kv_store_launch(const struct tensor *kc, const struct tensor *vc, const float *k,
                            int64_t k_pitch, const float *v, int64_t v_pitch, const int32_t *slots,
                            int64_t n_tokens, int row, cudaStream_t stream)
{
    const int64_t n_slots = kc->ne[3] * kc->ne[2];
    cuda_launch(kv_store_kernel<TC>, (unsigned)n_tokens, KV_STORE_THREADS, 0, stream,
                (TC *)kc->data, (TC *)vc->data, k, k_pitch, v, v_pitch, slots, n_slots, row);
}

// ---- provider ----

// k, v [n_tokens, n_kv_heads, head_dim] f32 with the heads of a token dense
// and any token pitch nb[2] (slices of a fused QKV output); caches dense 4-D
// of one float dtype.
static bool kv_store_src_ok(const struct tensor *t)
{
    return t && t->location == TENSOR_DEVICE && t->dtype == DTYPE_F32 &&
           t->nb[0] == sizeof(float) && t->nb[1] == (size_t)t->ne[0] * sizeof(float) &&
           t->nb[2] % sizeof(float) == 0 && t->ne[3] == 1;
}

extern "C" bool cuda_kv_store_supports(const struct op_call *c)
{
    const struct tensor *k = c->src[0], *v = c->src[1], *kc = c->src[2], *vc = c->src[3];
    const struct tensor *slots = c->src[4];
    if (c->op != OP_KV_STORE || !kv_store_src_ok(k) || !kv_store_src_ok(v) || !kc || !vc)
        return false;
    return cuda_dtype_is_float(kc->dtype) && cuda_tensor_dense_ok(kc, kc->dtype) &&
           cuda_tensor_dense_ok(vc, kc->dtype) && tensor_same_shape(kc, vc) &&
           tensor_same_shape(k, v) && kc->ne[0] == k->ne[0] && kc->ne[1] == k->ne[1] &&
           cuda_tensor_dense_ok(slots, DTYPE_I32) && tensor_n_elements(slots) == k->ne[2] &&
           kc->ne[3] * kc->ne[2] <= INT32_MAX && k->ne[0] * k->ne[1] <= INT32_MAX;
}

extern "C" enum vllmc_status cuda_kv_store_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct tensor *k = c->src[0], *v = c->src[1], *kc = c->src[2], *vc = c->src[3];
    const int32_t *slots = (const int32_t *)c->src[4]->data;
    const int64_t n = k->ne[2];
    const int row = (int)(k->ne[0] * k->ne[1]);
    const int64_t kp = (int64_t)(k->nb[2] / sizeof(float)), vp = (int64_t)(v->nb[2] / sizeof(float));
    if (n == 0)
        return VLLMC_OK;
    switch (kc->dtype) {
    case DTYPE_F16:
        kv_store_launch<__half>(kc, vc, (const float *)k->data, kp, (const float *)v->data, vp,
                                slots, n, row, dev->stream);
        break;
    case DTYPE_BF16:
        kv_store_launch<__nv_bfloat16>(kc, vc, (const float *)k->data, kp,
                                       (const float *)v->data, vp, slots, n, row, dev->stream);
        break;
    default:
        kv_store_launch<float>(kc, vc, (const float *)k->data, kp, (const float *)v->data, vp,
                               slots, n, row, dev->stream);
        break;
    }
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}
