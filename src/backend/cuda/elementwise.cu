// SiLU-mul and add: a 2-D grid of (column chunk, row); rows carry their own
// pitch so gate/up halves of one fused matmul output need no copy (SiLU-mul
// also takes that output whole, its packed variant).
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/elementwise.cuh"

#define ELEM_THREADS 256

enum elem_kind { ELEM_SILU_MUL, ELEM_ADD };

// ---- kernels ----

// With hi set (SiLU-mul feeding a bf16 GEMM, cuda_split_begin), dst's bf16
// hi + lo terms also go to hi [rows, n_cols] and hi + lo_off.
template <int KIND>
static __global__ void elem_kernel(float *dst, int64_t dst_pitch, const float *a, int64_t a_pitch,
                                   const float *b, int64_t b_pitch, int n_cols, __nv_bfloat16 *hi,
                                   int64_t lo_off)
{
    cuda_pdl_sync();
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t row = blockIdx.y;
    if (col >= n_cols)
        return;
    const float x = a[row * a_pitch + col], y = b[row * b_pitch + col];
    float r;
    if (KIND == ELEM_SILU_MUL)
        r = x / (1.0f + expf(-x)) * y;
    else
        r = x + y;
    dst[row * dst_pitch + col] = r;
    if (hi)
        cuda_split_store(hi + row * n_cols + col, lo_off, r);
}

// Packed SiLU-mul over a stacked GEMM's output whose sum it took
// (cuda_sum_take): gate|up row r is y's row r + row r + m (+ bias), added as
// the sum kernel does, and also written to gu's row (the GEMM's dst) so that
// buffer means what it would have.
static __global__ void silu_mul_sum_kernel(float *dst, int64_t dst_pitch, const float *y,
                                           int64_t y_pitch, int64_t half_off, int ff,
                                           const void *bias, int bias_type, float *gu,
                                           int64_t gu_pitch, __nv_bfloat16 *hi, int64_t lo_off)
{
    cuda_pdl_sync();
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t row = blockIdx.y;
    if (col >= ff)
        return;
    const float *y0 = y + row * y_pitch, *y1 = y0 + half_off;
    float g = y0[col] + y1[col], u = y0[ff + col] + y1[ff + col];
    if (bias) {
        g += cuda_bias_at(bias, bias_type, col);
        u += cuda_bias_at(bias, bias_type, ff + col);
    }
    gu[row * gu_pitch + col] = g;
    gu[row * gu_pitch + ff + col] = u;
    const float r = g / (1.0f + expf(-g)) * u;
    dst[row * dst_pitch + col] = r;
    if (hi)
        cuda_split_store(hi + row * ff + col, lo_off, r);
}

// ---- launchers ----

template <int KIND>
static void elem_launch(float *dst, int64_t dst_pitch, const float *a, int64_t a_pitch,
                        const float *b, int64_t b_pitch, int n_cols, int64_t n_rows,
                        __nv_bfloat16 *hi, int64_t lo_off, cudaStream_t stream)
{
    // Rows go on grid y (at most 65535): larger batches are split into slabs.
    const unsigned gx = (unsigned)((n_cols + ELEM_THREADS - 1) / ELEM_THREADS);
    for (int64_t r0 = 0; r0 < n_rows; r0 += 65535) {
        const int64_t nr = n_rows - r0 < 65535 ? n_rows - r0 : 65535;
        cuda_launch(elem_kernel<KIND>, dim3(gx, (unsigned)nr), ELEM_THREADS, 0, stream,
                    dst + r0 * dst_pitch, dst_pitch, a + r0 * a_pitch, a_pitch, b + r0 * b_pitch,
                    b_pitch, n_cols, hi ? hi + r0 * n_cols : nullptr, lo_off);
    }
}

// ---- providers ----

static bool elem_ok(const struct op_call *c)
{
    const struct tensor *d = c->dst, *a = c->src[0], *b = c->src[1];
    return cuda_tensor_rows_ok(d, DTYPE_F32) && cuda_tensor_rows_ok(a, DTYPE_F32) &&
           cuda_tensor_rows_ok(b, DTYPE_F32) && tensor_same_shape(d, a) &&
           tensor_same_shape(a, b) && a->ne[0] <= INT32_MAX;
}

// SILU_MUL's packed variant: src0 [n, 2 ff] holds gate|up, dst [n, ff].
static bool elem_packed_ok(const struct op_call *c)
{
    const struct tensor *d = c->dst, *a = c->src[0];
    return !c->src[1] && cuda_tensor_rows_ok(d, DTYPE_F32) && cuda_tensor_rows_ok(a, DTYPE_F32) &&
           a->ne[0] == 2 * d->ne[0] && tensor_n_rows(a) == tensor_n_rows(d) &&
           d->ne[0] <= INT32_MAX;
}

template <int KIND> static enum vllmc_status elem_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct tensor *d = c->dst, *a = c->src[0], *b = c->src[1];
    const int64_t n_rows = tensor_n_rows(d), n_cols = d->ne[0];
    if (n_rows == 0 || n_cols == 0)
        return VLLMC_OK;
    const float *bp = b ? (const float *)b->data : (const float *)a->data + n_cols;
    struct cuda_pending_sum ps;
    bool taken = false;
    if (KIND == ELEM_SILU_MUL && !b) { // gate|up may be a stacked GEMM's, not summed yet
        enum vllmc_status rc = cuda_sum_take(c, a, &ps, &taken);
        if (rc)
            return rc;
    }
    // SiLU-mul's output is the down projection's input.
    int64_t lo_off = 0;
    __nv_bfloat16 *hi =
        KIND == ELEM_SILU_MUL ? (__nv_bfloat16 *)cuda_split_begin(c, d, &lo_off) : nullptr;
    if (taken) {
        // Rows on grid y: a stacked GEMM has at most 65535 (lt_stack_max_m).
        const dim3 grid((unsigned)((n_cols + ELEM_THREADS - 1) / ELEM_THREADS), (unsigned)n_rows);
        CUDA_TRY(cuda_launch(silu_mul_sum_kernel, grid, ELEM_THREADS, 0, dev->stream,
                             (float *)d->data, cuda_row_pitch(d), ps.y, ps.y_pitch,
                             (int64_t)ps.m * ps.y_pitch, (int)n_cols, ps.bias, ps.bias_type, ps.dst,
                             ps.dst_pitch, hi, lo_off));
        CUDA_TRY_LAUNCH();
        return VLLMC_OK;
    }
    elem_launch<KIND>((float *)d->data, cuda_row_pitch(d), (const float *)a->data,
                      cuda_row_pitch(a), bp, b ? cuda_row_pitch(b) : cuda_row_pitch(a), (int)n_cols,
                      n_rows, hi, lo_off, dev->stream);
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}

extern "C" bool cuda_silu_mul_supports(const struct op_call *c)
{
    return c->op == OP_SILU_MUL && (c->src[1] ? elem_ok(c) : elem_packed_ok(c));
}

extern "C" enum vllmc_status cuda_silu_mul_run(const struct op_call *c)
{
    return elem_run<ELEM_SILU_MUL>(c);
}

extern "C" bool cuda_add_supports(const struct op_call *c)
{
    return c->op == OP_ADD && elem_ok(c);
}

extern "C" enum vllmc_status cuda_add_run(const struct op_call *c)
{
    return elem_run<ELEM_ADD>(c);
}
