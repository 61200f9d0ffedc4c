// Matmul on the GPU, dst [m, n] = x [m, k] . W[n, k]^T (+ bias [n]), f32
// activations and output, f32/f16/bf16 weights: a bandwidth-bound GEMV for
// few tokens, a tensor-core kernel for decode batches of bf16 weights
// (matmul_mma.cu), cuBLASLt for many, and a tiled kernel for any shape left.
#ifndef VLLMC_BACKEND_CUDA_MATMUL_CUH
#define VLLMC_BACKEND_CUDA_MATMUL_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/op.h"

// Largest token count the GEMV provider takes by default; above it cuBLASLt
// wins (crossover measured on the H200, bench/RESULTS.md). The kernels exist
// up to CUDA_GEMV_KERNEL_MAX_M; VLLMC_CUDA_GEMV_MAX_M moves the gate.
#define CUDA_GEMV_MAX_M 8
#define CUDA_GEMV_KERNEL_MAX_M 16
// Weight elements (n * k) up to which the GEMV also takes 2..CUDA_GEMV_MAX_M tokens.
#define CUDA_GEMV_SMALL_ELEMS ((int64_t)8 << 20)

// Sets the gate (clamped to 0..CUDA_GEMV_KERNEL_MAX_M) for every backend; the
// cuBLASLt provider (lower priority) takes every call the GEMV declines.
void cuda_gemv_set_max_m(int m);
// Whether cuBLASLt takes bf16 weights' activations as hi + lo bf16 terms (two
// GEMMs, 16 significant bits; the default) or rounded to bf16 once (one GEMM,
// as vLLM and llama.cpp): VLLMC_CUDA_BF16_ACTIVATIONS=1 at backend creation.
void cuda_matmul_set_split_x(bool on);
// Split activations of up to m tokens go through one stacked GEMM of 2m rows
// (one pass over the weights, then a sum), more through two accumulating
// GEMMs (default 128, at most 65535; VLLMC_CUDA_LT_STACK_MAX_M).
void cuda_matmul_set_stack_max_m(int m);
// One- and two-token GEMVs: one warp per output row where that measured
// faster (mode -1, the default), never (0) or always (1):
// VLLMC_CUDA_GEMV_WARP at backend creation.
void cuda_gemv_set_warp(int mode);
int cuda_gemv_max_m(void);

// Largest token count matmul_mma.cu's kernel is built for.
#define CUDA_MMA_GEMM_KERNEL_MAX_M 128
// Token counts up to max_m (default 16, 0 = never) of bf16 weight matrices
// of at most 16 MiB (cuda_mma_gemm_set_max_weight_bytes, 0 = any size) take
// the tensor-core decode GEMM; rt (1 or 2: 16-row tiles a warp), stages (3 or
// 4) and wk (1 or 2 warps along a tile's k) override its shape heuristics, 0
// (or left out) leaves each to them: VLLMC_CUDA_MMA_GEMM=MAX_M[,RT,STAGES,WK] and
// VLLMC_CUDA_MMA_GEMM_MIB at backend creation.
void cuda_mma_gemm_set(int max_m, int rt, int stages, int wk);
int cuda_mma_gemm_max_m(void);
void cuda_mma_gemm_set_max_weight_bytes(int64_t bytes);
int64_t cuda_mma_gemm_max_weight_bytes(void);

// Shapes every matmul provider needs: x f32 [m, k], W [n, k] of a float
// dtype, dst f32 [m, n], bias (optional) a dense float vector of n.
bool cuda_matmul_shape_ok(const struct op_call *c);

bool cuda_gemv_supports(const struct op_call *c);
enum vllmc_status cuda_gemv_run(const struct op_call *c);
// NORM_MATMUL (not silu_mul) at one token: the one-warp-per-row GEMV with
// the norm staged in shared memory (norm.cuh).
bool cuda_norm_gemv_supports(const struct op_call *c);
enum vllmc_status cuda_norm_gemv_run(const struct op_call *c);
bool cuda_mma_gemm_supports(const struct op_call *c);
enum vllmc_status cuda_mma_gemm_run(const struct op_call *c);
bool cuda_cublaslt_supports(const struct op_call *c);
enum vllmc_status cuda_cublaslt_run(const struct op_call *c);
// For providers that make bf16 weights on the fly (dequantizing prefill):
// *w_scratch gets the device's scratch with room for W [n, k] bf16 (dense),
// which the provider fills; cuda_matmul_lt_bf16(c, w_scratch) then computes
// dst = x . W^T (+ bias) of call c through cuBLASLt, its bf16 copy of x in the
// same scratch after W.
enum vllmc_status cuda_matmul_lt_bf16_scratch(const struct op_call *c, void **w_scratch);
enum vllmc_status cuda_matmul_lt_bf16(const struct op_call *c, const void *w_scratch);

struct cuda_device;
// Rewrites the bf16 matrices w[0..n) (device memory) in place as f16 and sets
// their dtype, when every value of every one fits f16: |v| <= 65504, where
// bf16 values of magnitude 2^-17 and up convert exactly and smaller ones round
// to f16's subnormal step, 2^-24. Otherwise changes nothing and sets
// *n_outside to the count of values that do not fit. Synchronises the stream.
enum vllmc_status cuda_weights_to_f16(struct cuda_device *dev, struct tensor *const *w, int n,
                                      int64_t *n_outside);

bool cuda_matmul_tiled_supports(const struct op_call *c);
enum vllmc_status cuda_matmul_tiled_run(const struct op_call *c);

#ifdef __cplusplus
}
#endif
#endif
