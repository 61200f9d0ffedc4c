// Embedding gather: one block per token. Ids are validated by the engine
// against the vocabulary before they reach the device; an id outside the
// table still never reads out of bounds here: its row is written as zeros.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/embedding.cuh"

#define EMBED_THREADS 256

// ---- kernels ----

template <typename T>
static __global__ void embed_kernel(float *dst, int64_t dst_pitch, const T *table,
                                    int64_t table_pitch, int64_t n_vocab, const int32_t *ids,
                                    int dim)
{
    cuda_pdl_sync();
    const int64_t tok = blockIdx.x;
    const int32_t id = ids[tok];
    float *d = dst + tok * dst_pitch;
    if (id < 0 || id >= n_vocab) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x)
            d[i] = 0.0f;
        return;
    }
    const T *row = table + (int64_t)id * table_pitch;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        d[i] = cuda_to_f32(row[i]);
}

// ---- launchers ----

template <typename T>
static void embed_launch(const struct tensor *dst, const struct tensor *table, const int32_t *ids,
                         int64_t n_tokens, cudaStream_t stream)
{
    cuda_launch(embed_kernel<T>, (unsigned)n_tokens, EMBED_THREADS, 0, stream, (float *)dst->data,
                cuda_row_pitch(dst), (const T *)table->data, cuda_row_pitch(table),
                tensor_n_rows(table), ids, (int)dst->ne[0]);
}

// ---- provider ----

extern "C" bool cuda_embedding_supports(const struct op_call *c)
{
    const struct tensor *d = c->dst, *t = c->src[0], *ids = c->src[1];
    return c->op == OP_EMBEDDING && cuda_tensor_rows_ok(d, DTYPE_F32) && t &&
           cuda_dtype_is_float(t->dtype) && cuda_tensor_rows_ok(t, t->dtype) &&
           cuda_tensor_dense_ok(ids, DTYPE_I32) && t->ne[0] == d->ne[0] &&
           tensor_n_elements(ids) == tensor_n_rows(d) && tensor_n_rows(d) <= INT32_MAX;
}

extern "C" enum vllmc_status cuda_embedding_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct tensor *d = c->dst, *t = c->src[0];
    const int32_t *ids = (const int32_t *)c->src[1]->data;
    const int64_t n = tensor_n_rows(d);
    if (n == 0)
        return VLLMC_OK;
    switch (t->dtype) {
    case DTYPE_F16:
        embed_launch<__half>(d, t, ids, n, dev->stream);
        break;
    case DTYPE_BF16:
        embed_launch<__nv_bfloat16>(d, t, ids, n, dev->stream);
        break;
    default:
        embed_launch<float>(d, t, ids, n, dev->stream);
        break;
    }
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}

// ---- select_ids: ids sampled on the device into the next step's input ids ----

static __global__ void select_ids_kernel(int32_t *dst, const int32_t *values, const int32_t *index,
                                         int n, int m)
{
    cuda_pdl_sync();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && index[i] >= 0 && index[i] < m)
        dst[i] = values[index[i]];
}

extern "C" bool cuda_select_ids_supports(const struct op_call *c)
{
    return c->op == OP_SELECT_IDS && cuda_tensor_dense_ok(c->dst, DTYPE_I32) &&
           cuda_tensor_dense_ok(c->src[0], DTYPE_I32) &&
           cuda_tensor_dense_ok(c->src[1], DTYPE_I32) &&
           tensor_n_elements(c->src[1]) == tensor_n_elements(c->dst) &&
           tensor_n_elements(c->dst) <= INT32_MAX && tensor_n_elements(c->src[0]) <= INT32_MAX;
}

extern "C" enum vllmc_status cuda_select_ids_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const int n = (int)tensor_n_elements(c->dst);
    if (n == 0)
        return VLLMC_OK;
    cuda_launch(select_ids_kernel, (n + 255) / 256, 256, 0, dev->stream, (int32_t *)c->dst->data,
                (const int32_t *)c->src[0]->data, (const int32_t *)c->src[1]->data, n,
                (int)tensor_n_elements(c->src[0]));
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}
