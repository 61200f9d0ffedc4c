// The device state behind a "cuda" backend (one GPU, one stream, cuBLASLt,
// scratch and pinned staging) and the CUDA_TRY error convention. Plain C,
// shared by cuda_backend.c and the .cu files of the op families.
#ifndef VLLMC_BACKEND_CUDA_CUDA_DEVICE_H
#define VLLMC_BACKEND_CUDA_CUDA_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "backend/op.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

// One remembered cuBLASLt algorithm choice for a GEMM shape.
struct cuda_lt_algo {
    int64_t m, n, k, lda, ldb, ldd; // 0 m = empty slot
    int a_type;                      // cudaDataType of A and B
    cublasLtMatmulAlgo_t algo;
};

#define CUDA_LT_ALGO_SLOTS 64

// A bf16 GEMM takes f32 activations as two bf16 terms, hi + lo, an f16 GEMM
// as one f16 term (matmul.cu). An op (RMSNorm, SiLU-mul, attention) whose
// output buffer such a GEMM had to convert before writes the terms beside its
// f32 output, so that the GEMM reading it next need not launch a kernel to
// convert them: one pass less over the activations, one kernel less. Nothing
// is written for outputs no 16-bit GEMM reads (quantized layers' inputs), and
// any upload, fill, free or graph launch between the two ops drops the record.
#define CUDA_SPLIT_WANTS 8
struct cuda_split {
    void *buf; // owned device [2, m, k] bf16: hi rows, then lo rows; or [m, k] f16
    size_t bytes;
    size_t failed_bytes; // smallest size cudaMalloc refused (0: none), not retried
    const void *x;       // the f32 activations [m, k] (row pitch x_pitch) they split
    int64_t m, k, x_pitch;
    uint64_t op; // the backend's n_ops_run when they were written or last read
    bool f16;    // buf holds one f16 term, not bf16 hi + lo
    struct {
        const void *x; // activations a 16-bit GEMM converted itself, k wide
        int64_t k;
        bool f16;              // for f16 weights: one f16 term
    } wants[CUDA_SPLIT_WANTS]; // the last few, replaced in turn
    int next_want;
    uint64_t n_handoffs; // GEMMs that found their terms written
    bool disabled;       // VLLMC_CUDA_SPLIT_HANDOFF=0
};

// A stacked GEMM's sum left to the op after it (lt_run): dst [m, n] = y
// [m, n] + y [m + row, n] (+ bias), y's rows y_pitch floats apart. The sum
// kernel is ~2 us of launch and ramp for a few hundred KB; ADD_RMSNORM and
// the packed SILU_MUL, which read the GEMM's output anyway, add the halves
// in their own kernels instead (cuda_sum_take). Any other op, and every
// copy, fill, free, sync, event and graph boundary, launches the sum first
// (cuda_sum_flush), so no one sees dst unsummed.
struct cuda_pending_sum {
    bool active;
    float *dst;
    int64_t dst_pitch;
    const float *y; // the GEMM's op scratch (cuda_scratch sums before handing it out again)
    int64_t y_pitch;
    int m, n;
    const void *bias; // NULL or [n] of bias_type
    int bias_type;
    bool disabled;    // VLLMC_CUDA_SUM_HANDOFF=0: lt_run sums at once, for comparisons
    uint64_t n_taken; // sums an op took into its kernel
};

struct cuda_device {
    int index;                      // CUDA ordinal
    char name[256];                 // from cudaGetDeviceProperties
    int cc_major, cc_minor;         // compute capability
    int n_sms;                      // multiprocessors
    size_t smem_optin_bytes;        // largest dynamic shared memory one block may opt into
    cudaStream_t stream;            // owned: every op and copy of the backend is ordered on it
    cublasLtHandle_t lt;            // owned
    void *lt_workspace;             // owned, device [lt_workspace_bytes]
    size_t lt_workspace_bytes;
    void *scratch;                  // owned, device [scratch_bytes]: per-op temporaries
    size_t scratch_bytes;
    uint64_t scratch_gen;           // bumped each time scratch moves (graphs holding it go stale)
    void *pinned;                   // owned, page-locked host staging [pinned_bytes]
    size_t pinned_bytes;
    cudaEvent_t staged[2];   // owned: the two halves of pinned hold a finished copy
    struct cuda_split split; // activations split by the op that wrote them
    struct cuda_pending_sum pending_sum;              // a stacked GEMM's sum not launched yet
    struct cuda_lt_algo lt_algos[CUDA_LT_ALGO_SLOTS]; // heuristic results by shape
    int lt_algo_next;                                 // next slot to replace
    struct err *err;                // borrowed: the backend's error slot
};

// Whether the kernels of cuda_launch start as programmatic dependent
// launches (cuda_common.cuh): set at backend creation, on for sm_90 and
// newer; VLLMC_CUDA_PDL=0 turns it off.
extern bool cuda_pdl;
// The largest weight matrix a GEMV prefetches whole into L2 before it waits
// for the kernel before it (cuda_gemv_prefetch): 16 MiB with cuda_pdl
// (VLLMC_CUDA_PDL_PREFETCH_MB), else 0.
extern int64_t cuda_pdl_prefetch_bytes;
// Whether the GEMVs load their first pass of weights into registers before
// they wait for the kernel before them (cuda_common.cuh): on unless
// VLLMC_CUDA_GEMV_EARLY=0.
extern bool cuda_gemv_load_early;
// Whether the decode GEMVs take NORM_MATMUL (norm.cuh): on unless
// VLLMC_CUDA_NORM_MATMUL=0, which leaves the norm its own kernel.
extern bool cuda_norm_matmul;
// Whether greedy and temperature-only rows are sampled in vocabulary chunks
// (sample.cu): on unless VLLMC_CUDA_SAMPLE_CHUNKS=0, which leaves every row
// to one block.
extern bool cuda_sample_chunks;
// Whether decode attention takes the QKV_ROPE_STORE before it as its
// prologue (attention.cuh): on unless VLLMC_CUDA_ATTENTION_PROLOGUE=0.
extern bool cuda_attention_prologue;
// Whether the short-split decode attention issues its metadata (and, behind
// its prologue, its K and V) loads before its dependent-launch sync
// (attention.cu): on unless VLLMC_CUDA_ATTENTION_EARLY=0.
extern bool cuda_attention_early_loads;

// Records a failed CUDA runtime (or cuBLAS, with is_cublas) call in e with the
// statement text, file and line, and returns VLLMC_ERR_BACKEND.
enum vllmc_status cuda_fail(struct err *e, int code, bool is_cublas, const char *stmt,
                            const char *file, int line);

// CUDA_TRY(expr): on a failed CUDA runtime call, record it and return
// VLLMC_ERR_BACKEND from the enclosing function. Expects `struct err *err` in
// scope (the backend's slot). Never aborts.
#define CUDA_TRY(expr)                                                                             \
    do {                                                                                           \
        cudaError_t cuda_try_rc_ = (expr);                                                         \
        if (cuda_try_rc_ != cudaSuccess)                                                           \
            return cuda_fail(err, (int)cuda_try_rc_, false, #expr, __FILE__, __LINE__);            \
    } while (0)

// CUBLAS_TRY(expr): the same for cuBLAS/cuBLASLt status codes.
#define CUBLAS_TRY(expr)                                                                           \
    do {                                                                                           \
        cublasStatus_t cublas_try_rc_ = (expr);                                                    \
        if (cublas_try_rc_ != CUBLAS_STATUS_SUCCESS)                                               \
            return cuda_fail(err, (int)cublas_try_rc_, true, #expr, __FILE__, __LINE__);           \
    } while (0)

// Opens GPU ordinal `index`: stream, cuBLASLt, workspaces; errors go to err.
// *out owns the device (cuda_device_free). VLLMC_ERR_UNSUPPORTED with the
// driver's reason when no usable GPU is present.
enum vllmc_status cuda_device_create(int index, struct err *err, struct cuda_device **out);
void cuda_device_free(struct cuda_device *dev); // NULL is a no-op

// The device of the backend running c (a "cuda" backend, by the provider's gate).
struct cuda_device *cuda_device_of(const struct op_call *c);

// Where a producer op c writes the split copy (hi rows, then lo rows, dense,
// lo at hi + *lo_off) of its output dst [m, k] f32, or NULL: no 16-bit GEMM
// converted this buffer itself before, m goes to the GEMV, the handoff is
// off, or the buffer cannot grow (during a graph capture, or cudaMalloc
// refused that size before). *lo_off 0: one f16 row each instead, for an f16
// GEMM (cuda_split_store). Replacing the buffer bumps scratch_gen like the
// scratch.
void *cuda_split_begin(const struct op_call *c, const struct tensor *dst, int64_t *lo_off);
// The same for an output the GEMM reads as x [m, k] with row pitch x_pitch
// (attention's [tokens, heads, head_dim] as [tokens, heads x head_dim]).
void *cuda_split_begin_rows(const struct op_call *c, const void *x, int64_t m, int64_t k,
                            int64_t x_pitch, int64_t *lo_off);
// The split copy of x [m, k] (row pitch x_pitch; bf16 hi + lo, or one f16
// term with f16) when the op just before c (or the GEMMs that read it since)
// wrote it, else NULL.
const void *cuda_split_find(const struct op_call *c, const void *x, int64_t m, int64_t k,
                            int64_t x_pitch, bool f16);

// Launches the pending sum, if any (struct cuda_pending_sum).
enum vllmc_status cuda_sum_flush(struct cuda_device *dev);
// Before op c runs: the pending sum stays for an op that may take it (an
// ADD_RMSNORM or packed SILU_MUL whose src[0] is its dst), else it is launched.
enum vllmc_status cuda_sum_before_op(const struct op_call *c);
// For op c reading x: *taken set and *out the pending sum when its dst is x
// (the caller's kernel then adds the halves and writes dst's rows where it
// says so); else any pending sum is launched first and *taken is false.
enum vllmc_status cuda_sum_take(const struct op_call *c, const struct tensor *x,
                                struct cuda_pending_sum *out, bool *taken);

// Per-op temporary device memory of at least n_bytes, valid until the next
// op. Grows by reallocation, which synchronises the device: run each batch
// shape once before capturing it in a graph.
enum vllmc_status cuda_scratch(struct cuda_device *dev, size_t n_bytes, void **out);

// Shared gate pieces. t is non-NULL, on the device, of dtype `dtype`, with
// dense rows and dims above 1 contiguous (row i at data + i * nb[1]).
bool cuda_tensor_rows_ok(const struct tensor *t, enum dtype dtype);
// As above and fully contiguous.
bool cuda_tensor_dense_ok(const struct tensor *t, enum dtype dtype);
// f32, f16 or bf16.
bool cuda_dtype_is_float(enum dtype t);

#ifdef __cplusplus
}
#endif
#endif
