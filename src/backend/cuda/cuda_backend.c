// The CUDA backend: device memory, one stream that orders every copy and op,
// pinned staging for downloads, and the one table of CUDA op providers.
// A machine without a GPU or driver gets a clear error, never an abort.
#ifdef VLLMC_HAVE_CUDA

#include "backend/cuda/cuda_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_api.h>

#include "backend/backend_impl.h"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/embedding.cuh"
#include "backend/cuda/gemv_silu.cuh"
#include "backend/cuda/int4g.cuh"
#include "backend/cuda/kv_store.cuh"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/qkv_rope_store.cuh"
#include "backend/cuda/quant.cuh"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/sample.cuh"
#include "core/alloc.h"
#include "core/log.h"

#define CUDA_LT_WORKSPACE_BYTES ((size_t)32 << 20)
#define CUDA_PINNED_BYTES ((size_t)4 << 20)

// ---- the provider table ----

// Priority 100 for the CUDA kernels; the GEMV, tensor-core decode GEMM and
// cuBLASLt matmul providers split m by their gates (matmul.cu,
// matmul_mma.cu), the tiled kernel takes what they leave.
// Packed GGUF weights: a dequantizing GEMV for few tokens, dequantization to
// bf16 then cuBLASLt for many (quant.cu).
// Every provider's run first settles a stacked GEMM's pending sum
// (cuda_sum_before_op): CUDA_RUN_AFTER_SUM makes that run from the kernel's.
#define CUDA_RUN_AFTER_SUM(name, fn)                                                               \
    static enum vllmc_status name(const struct op_call *c)                                         \
    {                                                                                              \
        enum vllmc_status rc = cuda_sum_before_op(c);                                              \
        return rc ? rc : fn(c);                                                                    \
    }
#define CUDA_PROVIDER(var, pname, kind, prio, fn)                                                  \
    CUDA_RUN_AFTER_SUM(var##_run, fn##_run)                                                        \
    static const struct op_provider var = {                                                        \
        .name = pname,                                                                             \
        .op = kind,                                                                                \
        .priority = prio,                                                                          \
        .supports = fn##_supports,                                                                 \
        .run = var##_run,                                                                          \
    }

CUDA_PROVIDER(cuda_p_embedding, "cuda", OP_EMBEDDING, 100, cuda_embedding);
CUDA_PROVIDER(cuda_p_rmsnorm, "cuda", OP_RMSNORM, 100, cuda_rmsnorm);
CUDA_PROVIDER(cuda_p_add_rmsnorm, "cuda", OP_ADD_RMSNORM, 100, cuda_add_rmsnorm);
CUDA_PROVIDER(cuda_p_gemv, "cuda-gemv", OP_MATMUL, 100, cuda_gemv);
CUDA_PROVIDER(cuda_p_mma_gemm, "cuda-mma", OP_MATMUL, 95, cuda_mma_gemm);
CUDA_PROVIDER(cuda_p_cublaslt, "cublaslt", OP_MATMUL, 90, cuda_cublaslt);
CUDA_PROVIDER(cuda_p_matmul_tiled, "cuda-tiled", OP_MATMUL, 10, cuda_matmul_tiled);
CUDA_PROVIDER(cuda_p_rope, "cuda", OP_ROPE, 100, cuda_rope);
CUDA_PROVIDER(cuda_p_qk_norm_rope, "cuda", OP_QK_NORM_ROPE, 100, cuda_qk_norm_rope);
CUDA_PROVIDER(cuda_p_silu_mul, "cuda", OP_SILU_MUL, 100, cuda_silu_mul);
CUDA_PROVIDER(cuda_p_add, "cuda", OP_ADD, 100, cuda_add);
CUDA_PROVIDER(cuda_p_kv_store, "cuda", OP_KV_STORE, 100, cuda_kv_store);
CUDA_PROVIDER(cuda_p_qkv_rope_store, "cuda", OP_QKV_ROPE_STORE, 100, cuda_qkv_rope_store);
CUDA_PROVIDER(cuda_p_gemv_silu, "cuda-gemv-silu", OP_MATMUL_SILU_MUL, 100, cuda_gemv_silu);
// The norm before a decode projection, staged inside its GEMV (norm.cuh).
CUDA_PROVIDER(cuda_p_norm_gemv, "cuda-norm-gemv", OP_NORM_MATMUL, 100, cuda_norm_gemv);
CUDA_PROVIDER(cuda_p_norm_gemv_silu, "cuda-norm-gemv-silu", OP_NORM_MATMUL, 100,
              cuda_norm_gemv_silu);
CUDA_PROVIDER(cuda_p_attention, "cuda-paged", OP_ATTENTION, 100, cuda_attention);
// Decode attention that runs the q/k norm, RoPE and cache store before it.
CUDA_PROVIDER(cuda_p_attention_rope, "cuda-paged-rope", OP_ATTENTION, 100, cuda_attention_rope);
// Prefill attention on tensor cores wins calls with many query tokens by its
// gate (attention_prefill.cu); its f16/bf16 operands get the 5e-4 parity bar.
CUDA_RUN_AFTER_SUM(attention_tc_run, cuda_attention_tc_run)
static const struct op_provider cuda_p_attention_tc = {
    .name = "cuda-attn-prefill-tc",
    .op = OP_ATTENTION,
    .priority = 110,
    .supports = cuda_attention_tc_supports,
    .run = attention_tc_run,
    .parity_bar = 5e-4,
};
// The same kernel with ldmatrix operand loads and cp.async double-buffered
// K/V tiles, ranked above the plain one: on the H200 it passed op parity and
// ran the 8B shape's pp512 attention in 48.2 us against 59.4 (bench-ops).
CUDA_RUN_AFTER_SUM(attention_tc_ldsm_run, cuda_attention_tc_ldsm_run)
static const struct op_provider cuda_p_attention_tc_ldsm = {
    .name = "cuda-attn-prefill-tc-ldsm",
    .op = OP_ATTENTION,
    .priority = 115,
    .supports = cuda_attention_tc_supports,
    .run = attention_tc_ldsm_run,
    .parity_bar = 5e-4,
};
CUDA_PROVIDER(cuda_p_qembedding, "cuda-q", OP_EMBEDDING, 100, cuda_qembedding);
CUDA_PROVIDER(cuda_p_qgemv, "cuda-qgemv", OP_MATMUL, 100, cuda_qgemv);
CUDA_PROVIDER(cuda_p_qgemm, "cuda-qgemm", OP_MATMUL, 90, cuda_qgemm);
// The norm (and gate|up's SiLU-mul) inside the one-token quantized GEMVs.
CUDA_PROVIDER(cuda_p_norm_qgemv, "cuda-norm-qgemv", OP_NORM_MATMUL, 100, cuda_norm_qgemv);
// AWQ/GPTQ int4g weights, the same split as the GGUF types (int4g.cu).
CUDA_PROVIDER(cuda_p_int4g_gemv, "cuda-int4g-gemv", OP_MATMUL, 100, cuda_int4g_gemv);
CUDA_PROVIDER(cuda_p_int4g_gemm, "cuda-int4g-gemm", OP_MATMUL, 90, cuda_int4g_gemm);
CUDA_PROVIDER(cuda_p_sample, "cuda-sample", OP_SAMPLE, 100, cuda_sample);
CUDA_PROVIDER(cuda_p_select_ids, "cuda", OP_SELECT_IDS, 100, cuda_select_ids);

static const struct op_provider *const cuda_provider_table[] = {
    &cuda_p_embedding,
    &cuda_p_rmsnorm,
    &cuda_p_add_rmsnorm,
    &cuda_p_gemv,
    &cuda_p_mma_gemm,
    &cuda_p_cublaslt,
    &cuda_p_matmul_tiled,
    &cuda_p_rope,
    &cuda_p_qk_norm_rope,
    &cuda_p_silu_mul,
    &cuda_p_add,
    &cuda_p_kv_store,
    &cuda_p_attention,
    &cuda_p_attention_rope,
    &cuda_p_attention_tc,
    &cuda_p_attention_tc_ldsm,
    &cuda_p_qembedding,
    &cuda_p_qgemv,
    &cuda_p_qgemm,
    &cuda_p_int4g_gemv,
    &cuda_p_int4g_gemm,
    &cuda_p_sample,
    &cuda_p_select_ids,
    &cuda_p_qkv_rope_store,
    &cuda_p_gemv_silu,
    &cuda_p_norm_gemv,
    &cuda_p_norm_gemv_silu,
    &cuda_p_norm_qgemv,
};

#define CUDA_N_PROVIDERS (sizeof cuda_provider_table / sizeof cuda_provider_table[0])

// ---- errors and gate helpers ----

enum vllmc_status cuda_fail(struct err *e, int code, bool is_cublas, const char *stmt,
                            const char *file, int line)
{
    const char *what = is_cublas ? cublasLtGetStatusString((cublasStatus_t)code)
                                 : cudaGetErrorString((cudaError_t)code);
    // A failed launch leaves a sticky error only for faults; clear the rest.
    if (!is_cublas)
        (void)cudaGetLastError();
    return err_set(e, VLLMC_ERR_BACKEND, "cuda: %s failed: %s (%d) at %s:%d", stmt, what, code,
                   file, line);
}

bool cuda_dtype_is_float(enum dtype t)
{
    return t == DTYPE_F32 || t == DTYPE_F16 || t == DTYPE_BF16;
}

bool cuda_tensor_rows_ok(const struct tensor *t, enum dtype dtype)
{
    if (!t || t->location != TENSOR_DEVICE || t->dtype != dtype || !tensor_rows_contiguous(t))
        return false;
    const struct dtype_info *info = dtype_info(dtype);
    if (t->nb[1] % info->type_size)
        return false;
    for (int i = 2; i < TENSOR_MAX_DIMS; i++)
        if (t->ne[i] > 1 && t->nb[i] != t->nb[i - 1] * (size_t)t->ne[i - 1])
            return false;
    return true;
}

bool cuda_tensor_dense_ok(const struct tensor *t, enum dtype dtype)
{
    return t && t->location == TENSOR_DEVICE && t->dtype == dtype && tensor_is_contiguous(t);
}

struct cuda_device *cuda_device_of(const struct op_call *c)
{
    return (struct cuda_device *)c->backend->impl;
}

// Which of struct cuda_split's wants says a 16-bit GEMM converted x [.., k]
// itself lately, or -1.
static int split_wanted(const struct cuda_split *s, const void *x, int64_t k)
{
    for (int i = 0; i < CUDA_SPLIT_WANTS; i++)
        if (s->wants[i].x == x && s->wants[i].k == k)
            return i;
    return -1;
}

void *cuda_split_begin(const struct op_call *c, const struct tensor *dst, int64_t *lo_off)
{
    // f32 rows (the producers' gate)
    return cuda_split_begin_rows(c, dst->data, tensor_n_rows(dst), dst->ne[0],
                                 (int64_t)(dst->nb[1] / sizeof(float)), lo_off);
}

void *cuda_split_begin_rows(const struct op_call *c, const void *x, int64_t m, int64_t k,
                            int64_t x_pitch, int64_t *lo_off)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct cuda_split *s = &dev->split;
    s->x = NULL;
    *lo_off = 0;
    // The GEMV reads f32 activations as they are (so does the tensor-core
    // decode GEMM, which never splits x: its inputs are not wanted).
    const int wanted = split_wanted(s, x, k);
    if (wanted < 0 || s->disabled || m <= cuda_gemv_max_m())
        return NULL;
    const bool f16 = s->wants[wanted].f16;
    const size_t need = (size_t)m * (size_t)k * (f16 ? 1 : 2) * sizeof(uint16_t);
    if (need > s->bytes) {
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if ((s->failed_bytes && need >= s->failed_bytes) ||
            cudaStreamIsCapturing(dev->stream, &cs) != cudaSuccess ||
            cs != cudaStreamCaptureStatusNone)
            return NULL;
        // The new buffer first: when it does not fit, the old one stays.
        const size_t want = (need + 0xffff) & ~(size_t)0xffff;
        void *buf = NULL;
        if (cudaMalloc(&buf, want) != cudaSuccess) {
            cudaGetLastError();
            s->failed_bytes = need;
            return NULL;
        }
        if (s->buf) {
            cudaFree(s->buf);   // waits for the work in flight that may still read it
            dev->scratch_gen++; // graphs that captured the old buffer are stale
        }
        s->buf = buf;
        s->bytes = want;
    }
    s->x = x;
    s->m = m;
    s->k = k;
    s->x_pitch = x_pitch;
    s->f16 = f16;
    s->op = c->backend->n_ops_run;
    *lo_off = f16 ? 0 : m * k;
    return s->buf;
}

const void *cuda_split_find(const struct op_call *c, const void *x, int64_t m, int64_t k,
                            int64_t x_pitch, bool f16)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct cuda_split *s = &dev->split;
    if (!s->x || s->x != x || s->m != m || s->k != k || s->x_pitch != x_pitch || s->f16 != f16 ||
        c->backend->n_ops_run != s->op + 1) {
        // This GEMM converts x itself: the op that writes x next time may do it.
        int want = split_wanted(s, x, k);
        if (want < 0) {
            want = s->next_want;
            s->wants[want].x = x;
            s->wants[want].k = k;
            s->next_want = (s->next_want + 1) % CUDA_SPLIT_WANTS;
        }
        s->wants[want].f16 = f16;
        return NULL;
    }
    s->op = c->backend->n_ops_run; // the next GEMM over the same x may read it too
    s->n_handoffs++;
    return s->buf;
}

uint64_t cuda_backend_split_handoffs(const struct backend *be)
{
    return ((const struct cuda_device *)be->impl)->split.n_handoffs;
}

uint64_t cuda_backend_sum_handoffs(const struct backend *be)
{
    return ((const struct cuda_device *)be->impl)->pending_sum.n_taken;
}

enum vllmc_status cuda_scratch(struct cuda_device *dev, size_t n_bytes, void **out)
{
    struct err *err = dev->err;
    // A pending sum reads its GEMM's output halves from the scratch: summed
    // before anyone may write over or move them.
    enum vllmc_status rc = cuda_sum_flush(dev);
    if (rc)
        return rc;
    if (n_bytes > dev->scratch_bytes) {
        size_t grow = dev->scratch_bytes + dev->scratch_bytes / 2;
        size_t want = n_bytes > grow ? n_bytes : grow;
        want = (want + 0xffff) & ~(size_t)0xffff;
        if (dev->scratch) {
            // cudaFree waits for the work in flight that may still read it.
            CUDA_TRY(cudaFree(dev->scratch));
            dev->scratch = NULL;
            dev->scratch_bytes = 0;
        }
        CUDA_TRY(cudaMalloc(&dev->scratch, want));
        dev->scratch_bytes = want;
        dev->scratch_gen++;
    }
    *out = dev->scratch;
    return VLLMC_OK;
}

// ---- the device ----

void cuda_device_free(struct cuda_device *dev)
{
    if (!dev)
        return;
    cudaSetDevice(dev->index);
    if (dev->stream)
        cudaStreamSynchronize(dev->stream);
    if (dev->pinned)
        cudaFreeHost(dev->pinned);
    if (dev->split.buf)
        cudaFree(dev->split.buf);
    for (int i = 0; i < 2; i++)
        if (dev->staged[i])
            cudaEventDestroy(dev->staged[i]);
    if (dev->scratch)
        cudaFree(dev->scratch);
    if (dev->lt_workspace)
        cudaFree(dev->lt_workspace);
    if (dev->lt)
        cublasLtDestroy(dev->lt);
    if (dev->stream)
        cudaStreamDestroy(dev->stream);
    mem_free(dev);
}

enum vllmc_status cuda_device_create(int index, struct err *err, struct cuda_device **out)
{
    *out = NULL;
    int n_devices = 0;
    cudaError_t rc = cudaGetDeviceCount(&n_devices);
    if (rc != cudaSuccess || n_devices == 0) {
        (void)cudaGetLastError();
        return err_set(err, VLLMC_ERR_UNSUPPORTED,
                       "backend cuda: no usable GPU: %s (is an NVIDIA GPU and driver present?)",
                       rc != cudaSuccess ? cudaGetErrorString(rc) : "no CUDA device found");
    }
    if (index < 0 || index >= n_devices)
        return err_set(err, VLLMC_ERR_INVALID_ARG, "backend cuda: device %d not present (%d found)",
                       index, n_devices);
    struct cuda_device *dev = mem_calloc(1, sizeof *dev);
    if (!dev)
        return err_set(err, VLLMC_ERR_NOMEM, "backend cuda: out of memory");
    dev->index = index;
    enum vllmc_status st = VLLMC_OK;
#define CREATE_TRY(expr)                                                                           \
    do {                                                                                           \
        cudaError_t create_rc_ = (expr);                                                           \
        if (create_rc_ != cudaSuccess) {                                                           \
            st = cuda_fail(err, (int)create_rc_, false, #expr, __FILE__, __LINE__);                \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)
    CREATE_TRY(cudaSetDevice(index));
    struct cudaDeviceProp prop;
    CREATE_TRY(cudaGetDeviceProperties(&prop, index));
    snprintf(dev->name, sizeof dev->name, "%s", prop.name);
    dev->cc_major = prop.major;
    dev->cc_minor = prop.minor;
    dev->n_sms = prop.multiProcessorCount;
    dev->smem_optin_bytes = prop.sharedMemPerBlockOptin;
    if (prop.major < 8) {
        st = err_set(err, VLLMC_ERR_UNSUPPORTED,
                     "backend cuda: %s has compute capability %d.%d; sm_80 or newer is needed",
                     prop.name, prop.major, prop.minor);
        goto fail;
    }
    CREATE_TRY(cudaStreamCreateWithFlags(&dev->stream, cudaStreamNonBlocking));
    cublasStatus_t brc = cublasLtCreate(&dev->lt);
    if (brc != CUBLAS_STATUS_SUCCESS) {
        dev->lt = NULL;
        st = cuda_fail(err, (int)brc, true, "cublasLtCreate(&dev->lt)", __FILE__, __LINE__);
        goto fail;
    }
    dev->lt_workspace_bytes = CUDA_LT_WORKSPACE_BYTES;
    CREATE_TRY(cudaMalloc(&dev->lt_workspace, dev->lt_workspace_bytes));
    dev->pinned_bytes = CUDA_PINNED_BYTES;
    CREATE_TRY(cudaHostAlloc(&dev->pinned, dev->pinned_bytes, cudaHostAllocDefault));
    for (int i = 0; i < 2; i++)
        CREATE_TRY(cudaEventCreateWithFlags(&dev->staged[i], cudaEventDisableTiming));
#undef CREATE_TRY
    *out = dev;
    return VLLMC_OK;
fail:
    cuda_device_free(dev);
    return st;
}

// ---- memory vtable ----

static struct cuda_device *dev_of(struct backend *be)
{
    return (struct cuda_device *)be->impl;
}

static void cuda_destroy(struct backend *be)
{
    cuda_device_free(dev_of(be));
    be->impl = NULL;
}

static enum vllmc_status cuda_buffer_alloc(struct backend *be, size_t n_bytes, void **out)
{
    struct cuda_device *dev = dev_of(be);
    struct err *err = &be->err;
    *out = NULL;
    CUDA_TRY(cudaSetDevice(dev->index));
    cudaError_t rc = cudaMalloc(out, n_bytes ? n_bytes : 1);
    if (rc == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        *out = NULL;
        return err_set(err, VLLMC_ERR_NOMEM, "cuda: cannot allocate %zu bytes on %s", n_bytes,
                       dev->name);
    }
    CUDA_TRY(rc);
    return VLLMC_OK;
}

// A write to device memory other than by an op drops a split handoff in
// progress (cuda_split_find would hand over terms of the old contents).
static void split_drop(struct backend *be)
{
    dev_of(be)->split.x = NULL;
}

// Anything but an op that reads, writes, frees or waits on device memory, or
// opens or closes a graph, runs a stacked GEMM's pending sum first.
#define SUM_FLUSH(be)                                                                              \
    do {                                                                                           \
        enum vllmc_status sum_rc_ = cuda_sum_flush(dev_of(be));                                    \
        if (sum_rc_)                                                                               \
            return sum_rc_;                                                                        \
    } while (0)

static void cuda_buffer_free(struct backend *be, void *p)
{
    // A failed launch here would surface at the next call that checks.
    (void)cuda_sum_flush(dev_of(be));
    split_drop(be);
    // Frees wait for work in flight; a failure here has nobody to report to.
    (void)cudaFree(p);
}

static enum vllmc_status cuda_fill(struct backend *be, void *dst, int value, size_t n_bytes)
{
    struct err *err = &be->err;
    SUM_FLUSH(be);
    split_drop(be);
    CUDA_TRY(cudaMemsetAsync(dst, value, n_bytes, dev_of(be)->stream));
    return VLLMC_OK;
}

// Returns once the host buffer may be reused (the driver stages pageable memory).
static enum vllmc_status cuda_upload(struct backend *be, void *dst, const void *host_src, size_t n)
{
    struct err *err = &be->err;
    SUM_FLUSH(be);
    split_drop(be);
    if (!n)
        return VLLMC_OK;
    CUDA_TRY(cudaMemcpyAsync(dst, host_src, n, cudaMemcpyHostToDevice, dev_of(be)->stream));
    return VLLMC_OK;
}

static enum vllmc_status cuda_weights_to_f16_vt(struct backend *be, struct tensor *const *w, int n,
                                                int64_t *n_outside)
{
    SUM_FLUSH(be);
    split_drop(be);
    return cuda_weights_to_f16(dev_of(be), w, n, n_outside);
}

// Synchronous: the data is on the host when it returns. Every download goes
// through the pinned staging buffer, which skips the driver's pageable
// bounce: a small one (the sampled ids of a step) in one copy, a large one
// (rows of logits: 39 MB for 64 rows of a 151,936-word vocabulary) in chunks
// through the buffer's two halves, the next chunk's copy running while the
// host moves the last one out. A pageable copy of those 39 MB took 24 ms on
// the H200's host, more than the step it served.
static enum vllmc_status cuda_download(struct backend *be, void *host_dst, const void *src,
                                       size_t n)
{
    struct cuda_device *dev = dev_of(be);
    struct err *err = &be->err;
    SUM_FLUSH(be);
    if (!n)
        return VLLMC_OK;
    if (n <= dev->pinned_bytes) {
        CUDA_TRY(cudaMemcpyAsync(dev->pinned, src, n, cudaMemcpyDeviceToHost, dev->stream));
        CUDA_TRY(cudaStreamSynchronize(dev->stream));
        memcpy(host_dst, dev->pinned, n);
        return VLLMC_OK;
    }
    const size_t half = dev->pinned_bytes / 2;
    const size_t n_chunks = (n + half - 1) / half;
    uint8_t *dst = host_dst, *stage = dev->pinned;
    const uint8_t *from = src;
    for (size_t c = 0; c <= n_chunks; c++) {
        // Queue chunk c into half c % 2 (free: its last chunk was moved out
        // at step c - 1), then move chunk c - 1 out of the other half.
        if (c < n_chunks) {
            const size_t len = c + 1 < n_chunks ? half : n - c * half;
            CUDA_TRY(cudaMemcpyAsync(stage + (c % 2) * half, from + c * half, len,
                                     cudaMemcpyDeviceToHost, dev->stream));
            CUDA_TRY(cudaEventRecord(dev->staged[c % 2], dev->stream));
        }
        if (c > 0) {
            const size_t p = c - 1, len = p + 1 < n_chunks ? half : n - p * half;
            CUDA_TRY(cudaEventSynchronize(dev->staged[p % 2]));
            memcpy(dst + p * half, stage + (p % 2) * half, len);
        }
    }
    return VLLMC_OK;
}

static enum vllmc_status cuda_sync(struct backend *be)
{
    struct err *err = &be->err;
    SUM_FLUSH(be);
    CUDA_TRY(cudaStreamSynchronize(dev_of(be)->stream));
    return VLLMC_OK;
}

// ---- pinned host memory, downloads that do not wait, events ----

static enum vllmc_status cuda_host_alloc(struct backend *be, size_t n_bytes, void **out)
{
    struct err *err = &be->err;
    *out = NULL;
    CUDA_TRY(cudaHostAlloc(out, n_bytes ? n_bytes : 1, cudaHostAllocDefault));
    return VLLMC_OK;
}

static void cuda_host_free(struct backend *be, void *p)
{
    (void)be;
    (void)cudaFreeHost(p);
}

static enum vllmc_status cuda_download_async(struct backend *be, void *host_dst, const void *src,
                                             size_t n)
{
    struct err *err = &be->err;
    SUM_FLUSH(be);
    if (n)
        CUDA_TRY(cudaMemcpyAsync(host_dst, src, n, cudaMemcpyDeviceToHost, dev_of(be)->stream));
    return VLLMC_OK;
}

struct backend_event {
    cudaEvent_t ev;
};

static enum vllmc_status cuda_event_create(struct backend *be, struct backend_event **out)
{
    struct err *err = &be->err;
    *out = NULL;
    struct backend_event *e = mem_calloc(1, sizeof *e);
    if (!e)
        return err_set(err, VLLMC_ERR_NOMEM, "cuda: out of memory");
    cudaError_t rc = cudaEventCreate(&e->ev);
    if (rc != cudaSuccess) {
        mem_free(e);
        CUDA_TRY(rc);
    }
    *out = e;
    return VLLMC_OK;
}

static void cuda_event_free(struct backend *be, struct backend_event *ev)
{
    (void)be;
    (void)cudaEventDestroy(ev->ev);
    mem_free(ev);
}

static enum vllmc_status cuda_event_record(struct backend *be, struct backend_event *ev)
{
    struct err *err = &be->err;
    SUM_FLUSH(be);
    CUDA_TRY(cudaEventRecord(ev->ev, dev_of(be)->stream));
    return VLLMC_OK;
}

static enum vllmc_status cuda_event_wait(struct backend *be, struct backend_event *ev)
{
    struct err *err = &be->err;
    CUDA_TRY(cudaEventSynchronize(ev->ev));
    return VLLMC_OK;
}

static enum vllmc_status cuda_event_elapsed_ms(struct backend *be, const struct backend_event *from,
                                               const struct backend_event *to, double *ms)
{
    struct err *err = &be->err;
    float f = 0;
    CUDA_TRY(cudaEventElapsedTime(&f, from->ev, to->ev));
    *ms = f;
    return VLLMC_OK;
}

static enum vllmc_status cuda_memory_info(struct backend *be, size_t *free_bytes,
                                          size_t *total_bytes)
{
    struct err *err = &be->err;
    CUDA_TRY(cudaSetDevice(dev_of(be)->index));
    CUDA_TRY(cudaMemGetInfo(free_bytes, total_bytes));
    return VLLMC_OK;
}

// ---- graphs ----

// A captured stream, ready to launch, and the scratch it was captured over.
struct backend_graph {
    cudaGraphExec_t exec;
    uint64_t scratch_gen;
};

static enum vllmc_status cuda_graph_begin(struct backend *be)
{
    struct err *err = &be->err;
    SUM_FLUSH(be); // before the capture: launched inside it, every replay would repeat it
    split_drop(be);
    // Thread-local: only this thread's unsafe calls (e.g. a cudaFree) break it.
    CUDA_TRY(cudaStreamBeginCapture(dev_of(be)->stream, cudaStreamCaptureModeThreadLocal));
    return VLLMC_OK;
}

static enum vllmc_status cuda_graph_end(struct backend *be, bool keep, struct backend_graph **out)
{
    struct cuda_device *dev = dev_of(be);
    struct err *err = &be->err;
    // Inside the capture: the graph's last GEMM needs its sum. The capture
    // ends either way.
    const enum vllmc_status sum_rc = cuda_sum_flush(dev);
    split_drop(be);
    cudaGraph_t graph = NULL;
    cudaError_t rc = cudaStreamEndCapture(dev->stream, &graph);
    if (rc != cudaSuccess || !keep || sum_rc) {
        if (graph)
            cudaGraphDestroy(graph);
        CUDA_TRY(rc);
        return sum_rc;
    }
    cudaGraphExec_t exec = NULL;
    rc = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_TRY(rc);
    struct backend_graph *g = mem_calloc(1, sizeof *g);
    if (!g) {
        cudaGraphExecDestroy(exec);
        return err_set(err, VLLMC_ERR_NOMEM, "cuda: out of memory");
    }
    g->exec = exec;
    g->scratch_gen = dev->scratch_gen;
    *out = g;
    return VLLMC_OK;
}

static bool cuda_graph_valid(struct backend *be, const struct backend_graph *g)
{
    return g->scratch_gen == dev_of(be)->scratch_gen;
}

static enum vllmc_status cuda_graph_launch(struct backend *be, struct backend_graph *g)
{
    struct err *err = &be->err;
    SUM_FLUSH(be);
    split_drop(be);
    CUDA_TRY(cudaGraphLaunch(g->exec, dev_of(be)->stream));
    return VLLMC_OK;
}

static void cuda_graph_free(struct backend *be, struct backend_graph *g)
{
    (void)be;
    cudaGraphExecDestroy(g->exec);
    mem_free(g);
}

static const struct backend_vtable cuda_vtable = {
    .name = "cuda",
    .api_version = BACKEND_API_VERSION,
    .location = TENSOR_DEVICE,
    .destroy = cuda_destroy,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .fill = cuda_fill,
    .upload = cuda_upload,
    .weights_to_f16 = cuda_weights_to_f16_vt,
    .download = cuda_download,
    .sync = cuda_sync,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .download_async = cuda_download_async,
    .event_create = cuda_event_create,
    .event_free = cuda_event_free,
    .event_record = cuda_event_record,
    .event_wait = cuda_event_wait,
    .event_elapsed_ms = cuda_event_elapsed_ms,
    .memory_info = cuda_memory_info,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_valid = cuda_graph_valid,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
};

// ---- creation ----

bool cuda_pdl;
int64_t cuda_pdl_prefetch_bytes;
bool cuda_gemv_load_early = true;
bool cuda_norm_matmul = true;
bool cuda_sample_chunks = true;
bool cuda_attention_prologue = true;
bool cuda_attention_early_loads = true;

// An environment setting A[,B[,C[,D]]] as four ints (0 where missing); false
// when the variable is unset or empty.
static bool env_ints(const char *name, int out[4])
{
    const char *s = getenv(name);
    if (!s || !*s)
        return false;
    for (int i = 0; i < 4; i++) {
        out[i] = s ? atoi(s) : 0;
        s = s ? strchr(s, ',') : NULL;
        s = s ? s + 1 : NULL;
    }
    return true;
}

enum vllmc_status cuda_backend_create(const struct backend_options *o, struct backend **out,
                                      struct err *err)
{
    *out = NULL;
    struct cuda_device *dev = NULL;
    enum vllmc_status rc = cuda_device_create(o->device_index, err, &dev);
    if (rc)
        return rc;
    struct backend *be = mem_calloc(1, sizeof *be);
    if (!be) {
        cuda_device_free(dev);
        return err_set(err, VLLMC_ERR_NOMEM, "backend cuda: out of memory");
    }
    be->impl = dev;
    dev->err = &be->err;
    rc = backend_init(be, &cuda_vtable, o, cuda_provider_table, CUDA_N_PROVIDERS, err);
    if (rc) {
        backend_free(be);
        return rc;
    }
    // The GEMV/cuBLASLt crossover is measured per GPU; this moves it without a rebuild.
    const char *gemv_m = getenv("VLLMC_CUDA_GEMV_MAX_M");
    if (gemv_m && *gemv_m)
        cuda_gemv_set_max_m(atoi(gemv_m));
    const char *gemv_warp = getenv("VLLMC_CUDA_GEMV_WARP");
    if (gemv_warp && *gemv_warp)
        cuda_gemv_set_warp(atoi(gemv_warp) != 0);
    const char *qgemv = getenv("VLLMC_CUDA_QGEMV");
    if (qgemv && *qgemv)
        cuda_qgemv_set_mode(atoi(qgemv));
    const char *qgemv_lane = getenv("VLLMC_CUDA_QGEMV_LANE");
    if (qgemv_lane && *qgemv_lane)
        cuda_qgemv_set_lane(atoi(qgemv_lane));
    const char *bf16_x = getenv("VLLMC_CUDA_BF16_ACTIVATIONS");
    if (bf16_x && *bf16_x)
        cuda_matmul_set_split_x(atoi(bf16_x) == 0);
    const char *stack_m = getenv("VLLMC_CUDA_LT_STACK_MAX_M");
    if (stack_m && *stack_m)
        cuda_matmul_set_stack_max_m(atoi(stack_m));
    int v[4];
    if (env_ints("VLLMC_CUDA_MMA_GEMM", v))
        cuda_mma_gemm_set(v[0], v[1], v[2], v[3]);
    const char *mma_mib = getenv("VLLMC_CUDA_MMA_GEMM_MIB");
    if (mma_mib && *mma_mib)
        cuda_mma_gemm_set_max_weight_bytes((int64_t)atoi(mma_mib) << 20);
    if (env_ints("VLLMC_CUDA_DECODE_SPLIT", v))
        cuda_attention_set_decode_split(v[0], v[1], v[2]);
    const char *pdl = getenv("VLLMC_CUDA_PDL");
    cuda_pdl = dev->cc_major >= 9 && !(pdl && *pdl && atoi(pdl) == 0);
    // A third of the H200's L2: every weight matrix of a layer of the 0.6B
    // shape, none of the 8B shape's.
    const char *pf = getenv("VLLMC_CUDA_PDL_PREFETCH_MB");
    cuda_pdl_prefetch_bytes = cuda_pdl ? (int64_t)(pf && *pf ? atoi(pf) : 16) << 20 : 0;
    const char *early = getenv("VLLMC_CUDA_GEMV_EARLY");
    cuda_gemv_load_early = !(early && *early && atoi(early) == 0);
    const char *norm_mm = getenv("VLLMC_CUDA_NORM_MATMUL");
    cuda_norm_matmul = !(norm_mm && *norm_mm && atoi(norm_mm) == 0);
    const char *att_pro = getenv("VLLMC_CUDA_ATTENTION_PROLOGUE");
    cuda_attention_prologue = !(att_pro && *att_pro && atoi(att_pro) == 0);
    const char *att_early = getenv("VLLMC_CUDA_ATTENTION_EARLY");
    cuda_attention_early_loads = !(att_early && *att_early && atoi(att_early) == 0);
    const char *sample_chunks = getenv("VLLMC_CUDA_SAMPLE_CHUNKS");
    cuda_sample_chunks = !(sample_chunks && *sample_chunks && atoi(sample_chunks) == 0);
    const char *decode_att = getenv("VLLMC_CUDA_DECODE_ATTENTION");
    if (decode_att && *decode_att)
        cuda_attention_set_decode(atoi(decode_att));
    if (env_ints("VLLMC_CUDA_DECODE_MMA", v))
        cuda_attention_set_decode_mma(v[0], v[1], v[2], v[3]);
    if (env_ints("VLLMC_CUDA_PREFILL_ATTENTION", v))
        cuda_attention_set_prefill(v[0], v[1], v[2], v[3]);
    // Producers writing the split terms of their output (cuda_split_begin);
    // VLLMC_CUDA_SPLIT_HANDOFF=0 leaves the split to the GEMM, for comparisons.
    const char *handoff = getenv("VLLMC_CUDA_SPLIT_HANDOFF");
    dev->split.disabled = handoff && *handoff && atoi(handoff) == 0;
    // Stacked GEMMs' sums taken by the op after them (struct cuda_pending_sum);
    // VLLMC_CUDA_SUM_HANDOFF=0 launches each at once, for comparisons.
    const char *sum_handoff = getenv("VLLMC_CUDA_SUM_HANDOFF");
    dev->pending_sum.disabled = sum_handoff && *sum_handoff && atoi(sum_handoff) == 0;
    char mma_note[96] = "", mma_size[40] = "";
    const int64_t mma_mib_max = cuda_mma_gemm_max_weight_bytes() >> 20;
    if (mma_mib_max > 0)
        snprintf(mma_size, sizeof mma_size, " for weights up to %lld MiB", (long long)mma_mib_max);
    if (cuda_mma_gemm_max_m() > 0)
        snprintf(mma_note, sizeof mma_note, ", tensor-core decode GEMM up to m=%d%s",
                 cuda_mma_gemm_max_m(), mma_size);
    log_info("backend cuda: %s (sm_%d%d, %d SMs), GEMV up to m=%d%s%s", dev->name, dev->cc_major,
             dev->cc_minor, dev->n_sms, cuda_gemv_max_m(), mma_note,
             cuda_pdl ? ", programmatic dependent launch" : "");
    *out = be;
    return VLLMC_OK;
}

#endif
