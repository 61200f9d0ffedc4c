// MATMUL_SILU_MUL for few tokens: x [m, k] against the fused gate|up weight
// [2 ff, k]. One warp per output j streams gate row j and up row ff + j with
// 16-byte loads (UNROLL of each in flight per lane), keeps 2 m sums in
// registers and writes silu(g) * u, so the gate|up output never goes through
// memory and one kernel replaces the GEMV and the SiLU-mul. The arithmetic
// per row is matmul.cu's one-warp-per-row GEMV's; silu is elementwise.cu's.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gemv_silu.cuh"
#include "backend/cuda/norm.cuh"

#define GEMV_SILU_ROWS 4 // warps (outputs) per block
#define GEMV_SILU_UNROLL 4

// ---- kernel ----

// NORM (NORM_MATMUL with silu_mul, one token): the block first stages
// (x + add) * w in shared memory [k], the warps read it there and scale their
// sums by the norm's scale, as matmul.cu's one-warp-per-row GEMV does.
template <typename TW, int M, bool NORM, int WARPS = GEMV_SILU_ROWS>
static __global__ void __launch_bounds__(WARPS *CUDA_WARP)
    gemv_silu_kernel(float *dst, int64_t dst_pitch, const float *x, int64_t x_pitch, const TW *w,
                     int64_t w_pitch, int ff, int k, int64_t prefetch, bool early,
                     struct cuda_norm_in nin)
{
    static_assert(!NORM || M == 1, "the norm prologue stages one token");
    extern __shared__ __align__(16) float gemv_silu_staged[]; // [k] with NORM
    __shared__ float red[32];
    constexpr int VEC = 16 / (int)sizeof(TW);
    constexpr int U = GEMV_SILU_UNROLL;
    const int lane = threadIdx.x % CUDA_WARP;
    const int row = blockIdx.x * WARPS + threadIdx.x / CUDA_WARP;
    // Lanes 0 and 1 prefetch the gate and the up row of this output.
    const int64_t row_bytes = (int64_t)k * (int64_t)sizeof(TW);
    if (lane < 2 && row < ff && 2 * (int64_t)row * row_bytes < prefetch)
        cuda_prefetch_l2(w + (int64_t)(row + lane * ff) * w_pitch, (uint32_t)row_bytes);
    const int row_w = row < ff ? row : 0;
    const uint4 *wg = (const uint4 *)(w + (int64_t)row_w * w_pitch);
    const uint4 *wu = (const uint4 *)(w + (int64_t)(row_w + ff) * w_pitch);
    const int n_chunks = k / VEC;
    // The first pass's chunks, loaded before the wait when early (cuda_common.cuh).
    uint4 g[U], u[U];
    early = early && row < ff && lane + (U - 1) * CUDA_WARP < n_chunks;
    if (early)
#pragma unroll
        for (int i = 0; i < U; i++) {
            g[i] = __ldcs(wg + lane + i * CUDA_WARP);
            u[i] = __ldcs(wu + lane + i * CUDA_WARP);
        }
    cuda_pdl_sync();
    float nscale = 1.0f; // the norm's scale, applied to the sums
    if (NORM) {
        nscale = cuda_stage_rmsnorm(gemv_silu_staged, x, nin.add, nin.w, nin.w_type,
                                    blockIdx.x == 0 ? nin.sum : nullptr, k, nin.eps, red);
        x = gemv_silu_staged;
    }
    if (row >= ff)
        return; // the whole warp: no barrier follows
    float ag[M], au[M];
#pragma unroll
    for (int t = 0; t < M; t++)
        ag[t] = au[t] = 0.0f;
    int ch = lane;
    for (; ch + (U - 1) * CUDA_WARP < n_chunks; ch += U * CUDA_WARP) {
        if (!early || ch != lane)
#pragma unroll
            for (int i = 0; i < U; i++) {
                g[i] = __ldcs(wg + ch + i * CUDA_WARP);
                u[i] = __ldcs(wu + ch + i * CUDA_WARP);
            }
#pragma unroll
        for (int i = 0; i < U; i++) {
            float wf[VEC];
            const int64_t col = (int64_t)(ch + i * CUDA_WARP) * VEC;
            cuda_widen16(g[i], wf, (const TW *)nullptr);
            cuda_dot_rows<M, VEC>(ag, wf, x, x_pitch, col);
            cuda_widen16(u[i], wf, (const TW *)nullptr);
            cuda_dot_rows<M, VEC>(au, wf, x, x_pitch, col);
        }
    }
    for (; ch < n_chunks; ch += CUDA_WARP) {
        float wf[VEC];
        const int64_t col = (int64_t)ch * VEC;
        cuda_widen16(__ldcs(wg + ch), wf, (const TW *)nullptr);
        cuda_dot_rows<M, VEC>(ag, wf, x, x_pitch, col);
        cuda_widen16(__ldcs(wu + ch), wf, (const TW *)nullptr);
        cuda_dot_rows<M, VEC>(au, wf, x, x_pitch, col);
    }
#pragma unroll
    for (int t = 0; t < M; t++) {
        const float g = nscale * cuda_warp_sum(ag[t]), u = nscale * cuda_warp_sum(au[t]);
        if (lane == 0)
            dst[t * dst_pitch + row] = g / (1.0f + expf(-g)) * u;
    }
}

// ---- launcher ----

template <typename TW, int M, bool NORM = false, int WARPS = GEMV_SILU_ROWS>
static void gemv_silu_launch(float *dst, int64_t dst_pitch, const float *x, int64_t x_pitch,
                             const void *w, int64_t w_pitch, int ff, int k, cudaStream_t stream,
                             const struct cuda_norm_in &nin = cuda_norm_in{})
{
    const unsigned grid = (unsigned)((ff + WARPS - 1) / WARPS);
    cuda_launch(gemv_silu_kernel<TW, M, NORM, WARPS>, grid, WARPS * CUDA_WARP,
                NORM ? (size_t)k * sizeof(float) : 0, stream, dst, dst_pitch, x, x_pitch,
                (const TW *)w, w_pitch, ff, k,
                cuda_gemv_prefetch(2 * (int64_t)ff * k * (int64_t)sizeof(TW)), cuda_gemv_load_early,
                nin);
}

// m tokens; with nin (one token) the norm staged in the kernel, in blocks of
// GEMV_NORM_WARPS outputs, each staging it once (norm.cuh).
template <typename TW>
static void gemv_silu_launch_m(int m, float *dst, int64_t dst_pitch, const float *x,
                               int64_t x_pitch, const void *w, int64_t w_pitch, int ff, int k,
                               cudaStream_t stream, const struct cuda_norm_in *nin)
{
    if (nin)
        gemv_silu_launch<TW, 1, true, GEMV_NORM_WARPS>(dst, dst_pitch, x, x_pitch, w, w_pitch, ff,
                                                       k, stream, *nin);
    else if (m == 1)
        gemv_silu_launch<TW, 1>(dst, dst_pitch, x, x_pitch, w, w_pitch, ff, k, stream);
    else
        gemv_silu_launch<TW, 2>(dst, dst_pitch, x, x_pitch, w, w_pitch, ff, k, stream);
}

// dst [m, ff] from x [m, k] and W [2 ff, k], with the norm of nin when set.
static enum vllmc_status gemv_silu_run(const struct op_call *c, const struct tensor *x,
                                       const struct tensor *w, const struct cuda_norm_in *nin)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct tensor *d = c->dst;
    const int m = (int)tensor_n_rows(x), ff = (int)d->ne[0], k = (int)x->ne[0];
    if (m == 0 || ff == 0)
        return VLLMC_OK;
    float *dp = (float *)d->data;
    const float *xp = (const float *)x->data;
    const int64_t dpitch = cuda_row_pitch(d), xpitch = cuda_row_pitch(x),
                  wpitch = cuda_row_pitch(w);
    switch (w->dtype) {
    case DTYPE_F16:
        gemv_silu_launch_m<__half>(m, dp, dpitch, xp, xpitch, w->data, wpitch, ff, k, dev->stream,
                                   nin);
        break;
    case DTYPE_BF16:
        gemv_silu_launch_m<__nv_bfloat16>(m, dp, dpitch, xp, xpitch, w->data, wpitch, ff, k,
                                          dev->stream, nin);
        break;
    default:
        gemv_silu_launch_m<float>(m, dp, dpitch, xp, xpitch, w->data, wpitch, ff, k, dev->stream,
                                  nin);
        break;
    }
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}

// ---- provider ----

static bool aligned16(const void *p, size_t pitch_bytes)
{
    return ((uintptr_t)p % 16) == 0 && pitch_bytes % 16 == 0;
}

// x f32 [m <= CUDA_GEMV_SILU_MAX_M, k] and W [2 ff, k] of a float dtype with
// 16-byte aligned rows, k a multiple of one 16-byte load; dst f32 [m, ff].
extern "C" bool cuda_gemv_silu_supports(const struct op_call *c)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *d = c->dst;
    if (c->op != OP_MATMUL_SILU_MUL || !cuda_tensor_rows_ok(x, DTYPE_F32) || !w ||
        !cuda_dtype_is_float(w->dtype) || !cuda_tensor_rows_ok(w, w->dtype) ||
        !cuda_tensor_rows_ok(d, DTYPE_F32) || c->src[2] || c->src[3])
        return false;
    const int64_t m = tensor_n_rows(x);
    const int vec = (int)(16 / dtype_info(w->dtype)->type_size);
    return m >= 1 && m <= CUDA_GEMV_SILU_MAX_M && tensor_n_rows(d) == m &&
           w->ne[1] == 2 * d->ne[0] && tensor_n_rows(w) == w->ne[1] && w->ne[0] == x->ne[0] &&
           x->ne[0] > 0 && x->ne[0] % vec == 0 && x->ne[0] <= INT32_MAX && d->ne[0] <= INT32_MAX &&
           aligned16(x->data, x->nb[1]) && aligned16(w->data, w->nb[1]);
}

extern "C" enum vllmc_status cuda_gemv_silu_run(const struct op_call *c)
{
    return gemv_silu_run(c, c->src[0], c->src[1], nullptr);
}

// NORM_MATMUL with silu_mul at one token: the kernel above with the norm
// staged in shared memory (norm.cuh).
extern "C" bool cuda_norm_gemv_silu_supports(const struct op_call *c)
{
    if (!c->p.silu_mul || !cuda_norm_in_ok(c))
        return false;
    const struct op_call mm = op_norm_matmul_inner(c, c->src[0]);
    return cuda_gemv_silu_supports(&mm);
}

extern "C" enum vllmc_status cuda_norm_gemv_silu_run(const struct op_call *c)
{
    const struct cuda_norm_in nin = cuda_norm_in_of(c);
    return gemv_silu_run(c, c->src[0], c->src[3], &nin);
}
