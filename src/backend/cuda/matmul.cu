// Matmul providers. Decode (m <= CUDA_GEMV_MAX_M) is bandwidth-bound: the
// GEMV reads each weight byte once with 16-byte loads and keeps all m tokens'
// sums in registers. Prefill goes to cuBLASLt on tensor cores (f32
// accumulation and output). Activations are f32 in this engine, so for bf16
// weights they are split into two bf16 terms, x = hi + lo, and multiplied
// twice (W.hi + W.lo): 16 significant bits instead of 8. Rounding x to bf16
// once (VLLMC_CUDA_BF16_ACTIVATIONS=1, what vLLM and llama.cpp compute) is
// faster (H200, 0.6B shape pp512: 112,800 against 84,200 tok/s) but took the
// Llama-3 shape's transformers parity from 32 to 22 EXACT of 32 at batch 1
// (14 at batch 8), under the 90% bar. f16 weights take x rounded to f16 (11
// bits) once. The tiled
// kernel serves any shape and alignment the other two refuse.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/norm.cuh"

#define GEMV_THREADS_MAX 128
#define TILED_BM 64
#define TILED_BN 64
#define TILED_BK 16

// ---- kernels ----

// One block computes ROWS output columns for all M tokens. Threads stride
// over k in 16-byte chunks of W (UNROLL chunks in flight per row), x comes
// through L1 (every block of an SM reads the same activations).
template <typename TW, int M, int ROWS, int UNROLL>
static __global__ void __launch_bounds__(GEMV_THREADS_MAX)
    gemv_kernel(float *dst, int64_t dst_pitch, const float *x, int64_t x_pitch, const TW *w,
                int64_t w_pitch, const void *bias, int bias_type, int n, int k, int64_t prefetch,
                bool early)
{
    constexpr int VEC = 16 / (int)sizeof(TW);
    __shared__ float red[GEMV_THREADS_MAX / CUDA_WARP][ROWS * M];
    const int row0 = blockIdx.x * ROWS;
    const int64_t row_bytes = (int64_t)k * (int64_t)sizeof(TW);
    if (threadIdx.x < ROWS && row0 + (int)threadIdx.x < n &&
        (int64_t)(row0 + (int)threadIdx.x) * row_bytes < prefetch)
        cuda_prefetch_l2(w + (int64_t)(row0 + threadIdx.x) * w_pitch, (uint32_t)row_bytes);
    const int n_chunks = k / VEC;
    const uint4 *wrow[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++)
        wrow[r] = (const uint4 *)(w + (int64_t)(row0 + r < n ? row0 + r : row0) * w_pitch);
    const int stride = blockDim.x;
    // The first pass's chunks, loaded before the wait when early (cuda_common.cuh).
    uint4 wv[UNROLL][ROWS];
    early = early && (int)threadIdx.x + (UNROLL - 1) * stride < n_chunks;
    if (early)
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                wv[u][r] = __ldcs(wrow[r] + threadIdx.x + u * stride);
    cuda_pdl_sync();

    float acc[ROWS][M];
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int t = 0; t < M; t++)
            acc[r][t] = 0.0f;

    int ch = threadIdx.x;
    for (; ch + (UNROLL - 1) * stride < n_chunks; ch += UNROLL * stride) {
        if (!early || ch != (int)threadIdx.x)
#pragma unroll
            for (int u = 0; u < UNROLL; u++)
#pragma unroll
                for (int r = 0; r < ROWS; r++)
                    wv[u][r] = __ldcs(wrow[r] + ch + u * stride);
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            float wf[ROWS][VEC];
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                cuda_widen16(wv[u][r], wf[r], (const TW *)nullptr);
            const int64_t col = (int64_t)(ch + u * stride) * VEC;
#pragma unroll
            for (int t = 0; t < M; t++) {
                const float4 *xv = (const float4 *)(x + t * x_pitch + col);
#pragma unroll
                for (int q = 0; q < VEC / 4; q++) {
                    const float4 xq = xv[q];
#pragma unroll
                    for (int r = 0; r < ROWS; r++) {
                        acc[r][t] += wf[r][4 * q] * xq.x + wf[r][4 * q + 1] * xq.y +
                                     wf[r][4 * q + 2] * xq.z + wf[r][4 * q + 3] * xq.w;
                    }
                }
            }
        }
    }
    for (; ch < n_chunks; ch += stride) {
        float wf[ROWS][VEC];
#pragma unroll
        for (int r = 0; r < ROWS; r++)
            cuda_widen16(__ldcs(wrow[r] + ch), wf[r], (const TW *)nullptr);
        const int64_t col = (int64_t)ch * VEC;
#pragma unroll
        for (int t = 0; t < M; t++) {
            const float4 *xv = (const float4 *)(x + t * x_pitch + col);
#pragma unroll
            for (int q = 0; q < VEC / 4; q++) {
                const float4 xq = xv[q];
#pragma unroll
                for (int r = 0; r < ROWS; r++)
                    acc[r][t] += wf[r][4 * q] * xq.x + wf[r][4 * q + 1] * xq.y +
                                 wf[r][4 * q + 2] * xq.z + wf[r][4 * q + 3] * xq.w;
            }
        }
    }

    const int lane = threadIdx.x % CUDA_WARP, warp = threadIdx.x / CUDA_WARP;
    const int n_warps = blockDim.x / CUDA_WARP;
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int t = 0; t < M; t++) {
            const float s = cuda_warp_sum(acc[r][t]);
            if (lane == 0)
                red[warp][r * M + t] = s;
        }
    __syncthreads();
    for (int i = threadIdx.x; i < ROWS * M; i += blockDim.x) {
        const int r = i / M, t = i % M, j = row0 + r;
        if (j >= n)
            continue;
        float s = 0.0f;
        for (int wi = 0; wi < n_warps; wi++)
            s += red[wi][i];
        if (bias)
            s += cuda_bias_at(bias, bias_type, j);
        dst[t * dst_pitch + j] = s;
    }
}

// One warp per output row, four rows per block (few tokens): no shared
// memory and no block barrier, each lane keeps UNROLL 16-byte loads of its
// row in flight, and the grid is n / 4 blocks of 128 threads, so small
// matrices still fill every SM with many independent loads.
// NORM (NORM_MATMUL, one token): the block first stages (x + add) * w in
// shared memory [k] (cuda_stage_rmsnorm, block 0 also writes the sum), the
// warps read the activations from there and scale their sums by the norm's
// scale: the norm kernel before the GEMV and its output's round trip through
// memory are gone.
#define GEMV_WARP_ROWS 4
template <typename TW, int M, int UNROLL, bool NORM, int WARPS = GEMV_WARP_ROWS>
static __global__ void __launch_bounds__(WARPS *CUDA_WARP)
    gemv_warp_kernel(float *dst, int64_t dst_pitch, const float *x, int64_t x_pitch, const TW *w,
                     int64_t w_pitch, const void *bias, int bias_type, int n, int k,
                     int64_t prefetch, bool early, struct cuda_norm_in nin)
{
    static_assert(!NORM || M == 1, "the norm prologue stages one token");
    extern __shared__ __align__(16) float gemv_staged[]; // [k] with NORM
    __shared__ float red[32];
    constexpr int VEC = 16 / (int)sizeof(TW);
    const int lane = threadIdx.x % CUDA_WARP;
    const int row = blockIdx.x * WARPS + threadIdx.x / CUDA_WARP;
    const int64_t row_bytes = (int64_t)k * (int64_t)sizeof(TW);
    if (lane == 0 && row < n && (int64_t)row * row_bytes < prefetch)
        cuda_prefetch_l2(w + (int64_t)row * w_pitch, (uint32_t)row_bytes);
    const uint4 *wrow = (const uint4 *)(w + (int64_t)(row < n ? row : 0) * w_pitch);
    const int n_chunks = k / VEC;
    // The first pass's chunks, loaded before the wait when early (cuda_common.cuh).
    uint4 wv[UNROLL];
    early = early && row < n && lane + (UNROLL - 1) * CUDA_WARP < n_chunks;
    if (early)
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            wv[u] = __ldcs(wrow + lane + u * CUDA_WARP);
    cuda_pdl_sync();
    float nscale = 1.0f; // the norm's scale, applied to the sums
    if (NORM) {
        nscale = cuda_stage_rmsnorm(gemv_staged, x, nin.add, nin.w, nin.w_type,
                                    blockIdx.x == 0 ? nin.sum : nullptr, k, nin.eps, red);
        x = gemv_staged;
    }
    if (row >= n)
        return; // the whole warp: no barrier follows
    float acc[M];
#pragma unroll
    for (int t = 0; t < M; t++)
        acc[t] = 0.0f;
    int ch = lane;
    for (; ch + (UNROLL - 1) * CUDA_WARP < n_chunks; ch += UNROLL * CUDA_WARP) {
        if (!early || ch != lane)
#pragma unroll
            for (int u = 0; u < UNROLL; u++)
                wv[u] = __ldcs(wrow + ch + u * CUDA_WARP);
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            float wf[VEC];
            cuda_widen16(wv[u], wf, (const TW *)nullptr);
            cuda_dot_rows<M, VEC>(acc, wf, x, x_pitch, (int64_t)(ch + u * CUDA_WARP) * VEC);
        }
    }
    for (; ch < n_chunks; ch += CUDA_WARP) {
        float wf[VEC];
        cuda_widen16(__ldcs(wrow + ch), wf, (const TW *)nullptr);
        cuda_dot_rows<M, VEC>(acc, wf, x, x_pitch, (int64_t)ch * VEC);
    }
#pragma unroll
    for (int t = 0; t < M; t++) {
        float s = cuda_warp_sum(acc[t]);
        if (NORM)
            s *= nscale;
        if (lane == 0) {
            if (bias)
                s += cuda_bias_at(bias, bias_type, row);
            dst[t * dst_pitch + row] = s;
        }
    }
}

// Plain tiled SIMT GEMM: 64x64 output tile per block, 4x4 per thread, any
// sizes and alignments, f32 accumulation.
template <typename TW>
static __global__ void __launch_bounds__(256)
    tiled_kernel(float *dst, int64_t dst_pitch, const float *x, int64_t x_pitch, const TW *w,
                 int64_t w_pitch, const void *bias, int bias_type, int m, int n, int k)
{
    __shared__ float xs[TILED_BK][TILED_BM + 4];
    __shared__ float ws[TILED_BK][TILED_BN + 4];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int m0 = blockIdx.y * TILED_BM, n0 = blockIdx.x * TILED_BN;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < k; k0 += TILED_BK) {
        for (int idx = threadIdx.x; idx < TILED_BM * TILED_BK; idx += blockDim.x) {
            const int rr = idx / TILED_BK, kk = idx % TILED_BK;
            const int gm = m0 + rr, gn = n0 + rr, gk = k0 + kk;
            xs[kk][rr] = gm < m && gk < k ? x[(int64_t)gm * x_pitch + gk] : 0.0f;
            ws[kk][rr] = gn < n && gk < k ? cuda_to_f32(w[(int64_t)gn * w_pitch + gk]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILED_BK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = xs[kk][ty * 4 + i];
                b[i] = ws[kk][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int gm = m0 + ty * 4 + i;
        if (gm >= m)
            continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int gn = n0 + tx * 4 + j;
            if (gn < n)
                dst[(int64_t)gm * dst_pitch + gn] =
                    acc[i][j] + (bias ? cuda_bias_at(bias, bias_type, gn) : 0.0f);
        }
    }
}

// y [m, k] (dense) = x [m, k] (pitched) in the weight dtype, for cuBLASLt.
template <typename T>
static __global__ void convert_kernel(T *y, const float *x, int64_t x_pitch, int k, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / k, c = i % k;
        y[i] = cuda_from_f32<T>(x[r * x_pitch + c]);
    }
}

// hi [m, k] and lo [m, k] (dense) with hi + lo = x to 16 significant bits,
// or with lo == hi one f16 term for an f16 W (saturated at +-65504, as the
// tensor-core decode kernels' operands, instead of infinities that would
// poison a whole output row; cuda_split_store): rows over grid y, four
// columns a thread (16-byte loads when vec: k and x_pitch multiples of 4, x
// 16-byte aligned). Launched by cuda_launch: it may start while the op that
// wrote x drains.
static __global__ void split_kernel(__nv_bfloat16 *hi, __nv_bfloat16 *lo, const float *x,
                                    int64_t x_pitch, int k, int m, bool vec)
{
    cuda_pdl_sync();
    const int64_t lo_off = lo - hi;
    for (int r = (int)blockIdx.y; r < m; r += (int)gridDim.y) {
        const float *xr = x + (int64_t)r * x_pitch;
        __nv_bfloat16 *hr = hi + (int64_t)r * k;
        for (int c = 4 * ((int)blockIdx.x * (int)blockDim.x + (int)threadIdx.x); c < k;
             c += 4 * (int)gridDim.x * (int)blockDim.x) {
            if (vec) {
                cuda_split_store4(hr + c, lo_off, *(const float4 *)(xr + c));
            } else {
                for (int i = 0; i < 4 && c + i < k; i++)
                    cuda_split_store(hr + c + i, lo_off, xr[c + i]);
            }
        }
    }
}

static __global__ void bias_add_kernel(float *dst, int64_t dst_pitch, const void *bias,
                                       int bias_type, int n, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / n;
        const int j = (int)(i % n);
        dst[r * dst_pitch + j] += cuda_bias_at(bias, bias_type, j);
    }
}

// ---- launchers ----

struct matmul_args {
    float *dst;
    int64_t dst_pitch;
    const float *x;
    int64_t x_pitch;
    const void *w;
    int64_t w_pitch;
    const void *bias; // may be NULL
    int bias_type;
    int m, n, k;
};

template <typename TW, int M, int ROWS, int UNROLL>
static void gemv_launch_one(const struct matmul_args *a, cudaStream_t stream)
{
    constexpr int VEC = 16 / (int)sizeof(TW);
    const int n_chunks = a->k / VEC;
    int threads = CUDA_WARP;
    while (threads < GEMV_THREADS_MAX && threads * UNROLL < n_chunks)
        threads *= 2;
    const unsigned grid = (unsigned)((a->n + ROWS - 1) / ROWS);
    cuda_launch(gemv_kernel<TW, M, ROWS, UNROLL>, grid, threads, 0, stream, a->dst, a->dst_pitch,
                a->x, a->x_pitch, (const TW *)a->w, a->w_pitch, a->bias, a->bias_type, a->n, a->k,
                cuda_gemv_prefetch((int64_t)a->n * a->k * (int64_t)sizeof(TW)),
                cuda_gemv_load_early);
}

// Whether one or two tokens take gemv_warp_kernel: -1 by shape (default),
// 0 never, 1 always (VLLMC_CUDA_GEMV_WARP).
static int gemv_warp = -1;

extern "C" void cuda_gemv_set_warp(int mode)
{
    gemv_warp = mode;
}

// Measured on the H200 (bench-ops gemv, bf16): one warp per row wins on rows
// up to 4096 elements (0.6B qkv 6.1 -> 4.1 us, lm_head 95.8 -> 73.6 us, 8B o
// 11.0 -> 8.3 us) and loses on long rows over few outputs (0.6B down, k 3072
// n 1024: 4.0 -> 4.3 us; 8B down, k 12288: 27.2 -> 28.6 us), where n / 4
// blocks of one-row warps leave the SMs with too few loads in flight.
static bool gemv_warp_wins(int n, int k)
{
    if (gemv_warp >= 0)
        return gemv_warp == 1;
    return k <= 4096 && (k <= 2048 || n >= 2048);
}

// More tokens share each weight load with more output rows per block, so the
// activations read through L1 stay a small multiple of the weight bytes.
template <typename TW, int M> static void gemv_launch_m(const struct matmul_args *a, cudaStream_t s)
{
    if (M <= 2 && gemv_warp_wins(a->n, a->k)) {
        const unsigned grid = (unsigned)((a->n + GEMV_WARP_ROWS - 1) / GEMV_WARP_ROWS);
        cuda_launch(gemv_warp_kernel<TW, M, 4, false>, grid, GEMV_WARP_ROWS * CUDA_WARP, 0, s,
                    a->dst, a->dst_pitch, a->x, a->x_pitch, (const TW *)a->w, a->w_pitch, a->bias,
                    a->bias_type, a->n, a->k,
                    cuda_gemv_prefetch((int64_t)a->n * a->k * (int64_t)sizeof(TW)),
                    cuda_gemv_load_early, cuda_norm_in{});
    } else if (M <= 2)
        gemv_launch_one<TW, M, 1, 4>(a, s);
    else if (M <= 6)
        gemv_launch_one<TW, M, 2, 2>(a, s);
    else
        gemv_launch_one<TW, M, 4, 1>(a, s);
}

template <typename TW> static void gemv_launch(const struct matmul_args *a, cudaStream_t stream)
{
    switch (a->m) {
    case 1: gemv_launch_m<TW, 1>(a, stream); break;
    case 2: gemv_launch_m<TW, 2>(a, stream); break;
    case 3: gemv_launch_m<TW, 3>(a, stream); break;
    case 4: gemv_launch_m<TW, 4>(a, stream); break;
    case 5: gemv_launch_m<TW, 5>(a, stream); break;
    case 6: gemv_launch_m<TW, 6>(a, stream); break;
    case 7: gemv_launch_m<TW, 7>(a, stream); break;
    case 8: gemv_launch_m<TW, 8>(a, stream); break;
    case 9: gemv_launch_m<TW, 9>(a, stream); break;
    case 10: gemv_launch_m<TW, 10>(a, stream); break;
    case 11: gemv_launch_m<TW, 11>(a, stream); break;
    case 12: gemv_launch_m<TW, 12>(a, stream); break;
    case 13: gemv_launch_m<TW, 13>(a, stream); break;
    case 14: gemv_launch_m<TW, 14>(a, stream); break;
    case 15: gemv_launch_m<TW, 15>(a, stream); break;
    default: gemv_launch_m<TW, 16>(a, stream); break;
    }
}

template <typename TW> static void tiled_launch(const struct matmul_args *a, cudaStream_t stream)
{
    const dim3 grid((unsigned)((a->n + TILED_BN - 1) / TILED_BN),
                    (unsigned)((a->m + TILED_BM - 1) / TILED_BM));
    tiled_kernel<TW><<<grid, 256, 0, stream>>>(a->dst, a->dst_pitch, a->x, a->x_pitch,
                                               (const TW *)a->w, a->w_pitch, a->bias,
                                               a->bias_type, a->m, a->n, a->k);
}

static unsigned matmul_grid_1d(int64_t total)
{
    int64_t blocks = (total + 255) / 256;
    return (unsigned)(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

// ---- providers ----

static void matmul_args_init(struct matmul_args *a, const struct op_call *c)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2];
    a->dst = (float *)c->dst->data;
    a->dst_pitch = cuda_row_pitch(c->dst);
    a->x = (const float *)x->data;
    a->x_pitch = cuda_row_pitch(x);
    a->w = w->data;
    a->w_pitch = cuda_row_pitch(w);
    a->bias = b ? b->data : nullptr;
    a->bias_type = b ? (int)b->dtype : (int)DTYPE_F32;
    a->m = (int)tensor_n_rows(x);
    a->n = (int)w->ne[1];
    a->k = (int)x->ne[0];
}

extern "C" bool cuda_matmul_shape_ok(const struct op_call *c)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2];
    if (c->op != OP_MATMUL || !cuda_tensor_rows_ok(x, DTYPE_F32) || !w ||
        !cuda_dtype_is_float(w->dtype) || !cuda_tensor_rows_ok(w, w->dtype) ||
        !cuda_tensor_rows_ok(c->dst, DTYPE_F32))
        return false;
    if (w->ne[0] != x->ne[0] || tensor_n_rows(w) != w->ne[1] || c->dst->ne[0] != w->ne[1] ||
        tensor_n_rows(c->dst) != tensor_n_rows(x))
        return false;
    if (b && (!cuda_dtype_is_float(b->dtype) || !cuda_tensor_dense_ok(b, b->dtype) ||
              tensor_n_elements(b) != w->ne[1]))
        return false;
    return x->ne[0] <= INT32_MAX && w->ne[1] <= INT32_MAX && tensor_n_rows(x) <= INT32_MAX;
}

static bool aligned16(const void *p, size_t pitch_bytes)
{
    return ((uintptr_t)p % 16) == 0 && pitch_bytes % 16 == 0;
}

// Token counts up to this go to the GEMV (cuda_gemv_set_max_m).
static int gemv_max_m = CUDA_GEMV_MAX_M;

extern "C" void cuda_gemv_set_max_m(int m)
{
    gemv_max_m = m < 0 ? 0 : (m > CUDA_GEMV_KERNEL_MAX_M ? CUDA_GEMV_KERNEL_MAX_M : m);
}

extern "C" int cuda_gemv_max_m(void)
{
    return gemv_max_m;
}

extern "C" bool cuda_gemv_supports(const struct op_call *c)
{
    if (!cuda_matmul_shape_ok(c))
        return false;
    const struct tensor *x = c->src[0], *w = c->src[1];
    const int64_t m = tensor_n_rows(x);
    const int vec = (int)(16 / dtype_info(w->dtype)->type_size);
    // Measured on the H200 (bench/RESULTS.md): one token always favours the
    // GEMV; for 2..gemv_max_m tokens it wins only on small matrices, where
    // cuBLASLt's fixed cost dominates.
    const bool small = w->ne[0] * w->ne[1] <= CUDA_GEMV_SMALL_ELEMS;
    return m >= 1 && m <= gemv_max_m && (m == 1 || small) && x->ne[0] % vec == 0 &&
           x->ne[0] > 0 &&
           aligned16(x->data, x->nb[1]) && aligned16(w->data, w->nb[1]);
}

extern "C" enum vllmc_status cuda_gemv_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    struct matmul_args a;
    matmul_args_init(&a, c);
    if (a.n == 0 || a.m == 0)
        return VLLMC_OK;
    if (a.m > CUDA_GEMV_KERNEL_MAX_M)
        return op_fail(c, VLLMC_ERR_UNSUPPORTED, "cuda-gemv: m=%d above %d", a.m,
                       CUDA_GEMV_KERNEL_MAX_M);
    switch (c->src[1]->dtype) {
    case DTYPE_F16:
        gemv_launch<__half>(&a, dev->stream);
        break;
    case DTYPE_BF16:
        gemv_launch<__nv_bfloat16>(&a, dev->stream);
        break;
    default:
        gemv_launch<float>(&a, dev->stream);
        break;
    }
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}

// NORM_MATMUL at one token where the one-warp-per-row GEMV is the kernel the
// projection alone would take (gemv_warp_wins): the block stages the norm.
extern "C" bool cuda_norm_gemv_supports(const struct op_call *c)
{
    if (c->p.silu_mul || !cuda_norm_in_ok(c))
        return false;
    const struct op_call mm = op_norm_matmul_inner(c, c->src[0]);
    return cuda_gemv_supports(&mm) && gemv_warp_wins((int)mm.src[1]->ne[1], (int)mm.src[0]->ne[0]);
}

// Each block stages the norm once for its rows, so blocks are larger than
// the plain GEMV's: GEMV_NORM_WARPS rows (norm.cuh).
template <typename TW>
static void norm_gemv_launch(const struct matmul_args *a, const struct cuda_norm_in &nin,
                             cudaStream_t s)
{
    const unsigned grid = (unsigned)((a->n + GEMV_NORM_WARPS - 1) / GEMV_NORM_WARPS);
    cuda_launch(gemv_warp_kernel<TW, 1, 4, true, GEMV_NORM_WARPS>, grid,
                GEMV_NORM_WARPS * CUDA_WARP, (size_t)a->k * sizeof(float), s, a->dst, a->dst_pitch,
                a->x, a->x_pitch, (const TW *)a->w, a->w_pitch, a->bias, a->bias_type, a->n, a->k,
                cuda_gemv_prefetch((int64_t)a->n * a->k * (int64_t)sizeof(TW)),
                cuda_gemv_load_early, nin);
}

extern "C" enum vllmc_status cuda_norm_gemv_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct op_call mm = op_norm_matmul_inner(c, c->src[0]);
    struct matmul_args a;
    matmul_args_init(&a, &mm);
    if (a.n == 0)
        return VLLMC_OK;
    const struct cuda_norm_in nin = cuda_norm_in_of(c);
    switch (mm.src[1]->dtype) {
    case DTYPE_F16:
        norm_gemv_launch<__half>(&a, nin, dev->stream);
        break;
    case DTYPE_BF16:
        norm_gemv_launch<__nv_bfloat16>(&a, nin, dev->stream);
        break;
    default:
        norm_gemv_launch<float>(&a, nin, dev->stream);
        break;
    }
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}

extern "C" bool cuda_matmul_tiled_supports(const struct op_call *c)
{
    return cuda_matmul_shape_ok(c);
}

extern "C" enum vllmc_status cuda_matmul_tiled_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    struct matmul_args a;
    matmul_args_init(&a, c);
    if (a.m == 0 || a.n == 0)
        return VLLMC_OK;
    switch (c->src[1]->dtype) {
    case DTYPE_F16:
        tiled_launch<__half>(&a, dev->stream);
        break;
    case DTYPE_BF16:
        tiled_launch<__nv_bfloat16>(&a, dev->stream);
        break;
    default:
        tiled_launch<float>(&a, dev->stream);
        break;
    }
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}

// ---- cuBLASLt ----

extern "C" bool cuda_cublaslt_supports(const struct op_call *c)
{
    if (!cuda_matmul_shape_ok(c))
        return false;
    const struct tensor *x = c->src[0], *w = c->src[1];
    // f32 weights keep the exact f32 path; f16/bf16 need k even for 16-byte rows.
    return x->ne[0] % 8 == 0 &&
           aligned16(w->data, w->nb[1]) && aligned16(x->data, x->nb[1]) &&
           aligned16(c->dst->data, c->dst->nb[1]);
}

static enum vllmc_status lt_algo_find(struct cuda_device *dev, cublasLtMatmulDesc_t desc,
                                      cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                      cublasLtMatrixLayout_t ld, const struct cuda_lt_algo *key,
                                      cublasLtMatmulAlgo_t *out)
{
    struct err *err = dev->err;
    for (int i = 0; i < CUDA_LT_ALGO_SLOTS; i++) {
        const struct cuda_lt_algo *e = &dev->lt_algos[i];
        if (e->m == key->m && e->n == key->n && e->k == key->k && e->lda == key->lda &&
            e->ldb == key->ldb && e->ldd == key->ldd && e->a_type == key->a_type) {
            *out = e->algo;
            return VLLMC_OK;
        }
    }
    cublasLtMatmulPreference_t pref;
    CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = dev->lt_workspace_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    cublasLtMatmulHeuristicResult_t res;
    int n_res = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(dev->lt, desc, la, lb, ld, ld, pref, 1,
                                                       &res, &n_res);
    cublasLtMatmulPreferenceDestroy(pref);
    CUBLAS_TRY(st);
    if (n_res < 1)
        return err_set(err, VLLMC_ERR_UNSUPPORTED, "cublaslt: no algorithm for m=%lld n=%lld k=%lld",
                       (long long)key->m, (long long)key->n, (long long)key->k);
    struct cuda_lt_algo *slot = &dev->lt_algos[dev->lt_algo_next];
    dev->lt_algo_next = (dev->lt_algo_next + 1) % CUDA_LT_ALGO_SLOTS;
    *slot = *key;
    slot->algo = res.algo;
    *out = res.algo;
    return VLLMC_OK;
}

// D^T [n, m] (column-major) = W^T . X^T: cuBLASLt sees our row-major
// dst [m, n] as the column-major n x m matrix it writes.
// beta = 1 adds to what dst holds (the second term of a split x).
static enum vllmc_status lt_matmul(struct cuda_device *dev, const struct matmul_args *a,
                                   cudaDataType_t ab_type, const void *b_ptr, int64_t ldb,
                                   float beta)
{
    struct err *err = dev->err;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    enum vllmc_status rc = VLLMC_OK;
    cublasStatus_t st = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t op_t = CUBLAS_OP_T;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&la, ab_type, (uint64_t)a->k, (uint64_t)a->n, a->w_pitch);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&lb, ab_type, (uint64_t)a->k, (uint64_t)a->m, ldb);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, (uint64_t)a->n, (uint64_t)a->m,
                                        a->dst_pitch);
    if (st != CUBLAS_STATUS_SUCCESS) {
        rc = cuda_fail(err, (int)st, true, "cublasLt descriptor setup", __FILE__, __LINE__);
        goto done;
    }
    {
        struct cuda_lt_algo key = {};
        key.m = a->m;
        key.n = a->n;
        key.k = a->k;
        key.lda = a->w_pitch;
        key.ldb = ldb;
        key.ldd = a->dst_pitch;
        key.a_type = (int)ab_type;
        cublasLtMatmulAlgo_t algo;
        rc = lt_algo_find(dev, desc, la, lb, ld, &key, &algo);
        if (rc)
            goto done;
        const float alpha = 1.0f;
        st = cublasLtMatmul(dev->lt, desc, &alpha, a->w, la, b_ptr, lb, &beta, a->dst, ld, a->dst,
                            ld, &algo, dev->lt_workspace, dev->lt_workspace_bytes, dev->stream);
        if (st != CUBLAS_STATUS_SUCCESS)
            rc = cuda_fail(err, (int)st, true, "cublasLtMatmul", __FILE__, __LINE__);
    }
done:
    if (ld)
        cublasLtMatrixLayoutDestroy(ld);
    if (lb)
        cublasLtMatrixLayoutDestroy(lb);
    if (la)
        cublasLtMatrixLayoutDestroy(la);
    if (desc)
        cublasLtMatmulDescDestroy(desc);
    return rc;
}

// dst [m, n] = y [m, n] + y [m + row, n] (+ bias): the two halves of a GEMM
// over stacked [hi; lo] activations. Grid (ceil(n / 1024), m): four
// consecutive columns a thread, 16-byte loads of y (its pitch is a multiple
// of 4 and its rows 16-byte aligned, lt_stack_bytes) and 16-byte stores when
// dst's rows allow them (vec). Launched by cuda_launch: it may start while
// the GEMM drains, and waits for it before reading y.
static __global__ void split_sum_kernel(float *dst, int64_t dst_pitch, const float *y,
                                        int64_t y_pitch, int m, int n, const void *bias,
                                        int bias_type, bool vec)
{
    cuda_pdl_sync();
    const int r = (int)blockIdx.y, j = 4 * ((int)blockIdx.x * (int)blockDim.x + (int)threadIdx.x);
    if (j >= n)
        return;
    const float *y0 = y + (int64_t)r * y_pitch + j, *y1 = y0 + (int64_t)m * y_pitch;
    float *d = dst + (int64_t)r * dst_pitch + j;
    if (vec) {
        const float4 a = *(const float4 *)y0, b = *(const float4 *)y1;
        float4 v = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
        if (bias) {
            v.x += cuda_bias_at(bias, bias_type, j);
            v.y += cuda_bias_at(bias, bias_type, j + 1);
            v.z += cuda_bias_at(bias, bias_type, j + 2);
            v.w += cuda_bias_at(bias, bias_type, j + 3);
        }
        *(float4 *)d = v;
        return;
    }
    for (int i = 0; i < 4 && j + i < n; i++) {
        float v = y0[i] + y1[i];
        if (bias)
            v += cuda_bias_at(bias, bias_type, j + i);
        d[i] = v;
    }
}

// Up to this many tokens the hi and lo terms go through one GEMM of 2m rows:
// small batches are bound by reading the weights, which two GEMMs read twice
// (H200, Qwen3-8B shape, 64 sequences: two GEMMs made each decode step read
// 30 GB of weights). VLLMC_CUDA_LT_STACK_MAX_M moves it.
static int lt_stack_max_m = 128;

extern "C" void cuda_matmul_set_stack_max_m(int m)
{
    if (m >= 0) // the sum kernel's rows are its grid's y (at most 65535)
        lt_stack_max_m = m < 65535 ? m : 65535;
}

// Scratch bytes of lt_run's stacked output, 256-byte aligned.
static size_t lt_stack_bytes(int m, int n)
{
    const size_t pitch = ((size_t)n + 3) & ~(size_t)3; // 16-byte rows, as cuBLASLt wants
    return m <= lt_stack_max_m
               ? ((size_t)2 * (size_t)m * pitch * sizeof(float) + 255) & ~(size_t)255
               : 0;
}

// ---- the stacked GEMM's sum, launched now or taken by the next op ----

static enum vllmc_status sum_launch(struct cuda_device *dev, const struct cuda_pending_sum *ps)
{
    struct err *err = dev->err;
    const bool vec = ps->n % 4 == 0 && ps->dst_pitch % 4 == 0 && (uintptr_t)ps->dst % 16 == 0;
    const dim3 grid((unsigned)((ps->n + 1023) / 1024), (unsigned)ps->m);
    CUDA_TRY(cuda_launch(split_sum_kernel, grid, 256, 0, dev->stream, ps->dst, ps->dst_pitch, ps->y,
                         ps->y_pitch, ps->m, ps->n, ps->bias, ps->bias_type, vec));
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}

extern "C" enum vllmc_status cuda_sum_flush(struct cuda_device *dev)
{
    if (!dev->pending_sum.active)
        return VLLMC_OK;
    dev->pending_sum.active = false;
    return sum_launch(dev, &dev->pending_sum);
}

extern "C" enum vllmc_status cuda_sum_before_op(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    const struct cuda_pending_sum *ps = &dev->pending_sum;
    if (!ps->active)
        return VLLMC_OK;
    bool taker = (c->op == OP_ADD_RMSNORM || (c->op == OP_SILU_MUL && !c->src[1])) && c->src[0] &&
                 c->src[0]->data == ps->dst;
    // The taker adds the halves where it reads src[0]: no other operand may
    // be the GEMM's output.
    for (int i = 1; taker && i < OP_MAX_SRC; i++)
        taker = !c->src[i] || c->src[i]->data != ps->dst;
    return taker ? VLLMC_OK : cuda_sum_flush(dev);
}

extern "C" enum vllmc_status cuda_sum_take(const struct op_call *c, const struct tensor *x,
                                           struct cuda_pending_sum *out, bool *taken)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct cuda_pending_sum *ps = &dev->pending_sum;
    *taken = false;
    if (!ps->active)
        return VLLMC_OK;
    if (x->data != ps->dst || tensor_n_rows(x) != ps->m || x->ne[0] != ps->n ||
        cuda_row_pitch(x) != ps->dst_pitch)
        return cuda_sum_flush(dev);
    ps->active = false;
    ps->n_taken++;
    *out = *ps;
    *taken = true;
    return VLLMC_OK;
}

// cuBLASLt over a->w of dtype wt (f32, f16, bf16); xc is scratch for the
// activations in a 16-bit wt (m * k elements; 2 * m * k with split_x, the
// hi + lo terms of bf16), unused for f32. split_ready, when not NULL, holds
// those terms (or f16 x) already (written by the op that made x,
// cuda_split_begin).
// defer_sum: a stacked GEMM may leave its sum pending (the caller's op ends
// with the GEMM).
static enum vllmc_status lt_run(struct cuda_device *dev, const struct matmul_args *a_in,
                                enum dtype wt, void *xc, bool split_x, const void *split_ready,
                                bool defer_sum)
{
    struct err *err = dev->err;
    struct matmul_args a = *a_in;
    enum vllmc_status rc;
    const int64_t total = (int64_t)a.m * a.k;
    if (wt == DTYPE_F32) {
        rc = lt_matmul(dev, &a, CUDA_R_32F, a.x, a.x_pitch, 0.0f);
    } else if (wt == DTYPE_BF16 && split_x) {
        __nv_bfloat16 *hi = (__nv_bfloat16 *)(split_ready ? split_ready : xc), *lo = hi + total;
        if (!split_ready) {
            const bool vec = a.k % 4 == 0 && a.x_pitch % 4 == 0 && (uintptr_t)a.x % 16 == 0;
            const int rows = a.m < 1 ? 1 : a.m < 65535 ? a.m : 65535; // grid y, rows stride
            const dim3 sgrid((unsigned)((a.k + 1023) / 1024), (unsigned)rows);
            CUDA_TRY(cuda_launch(split_kernel, sgrid, 256, 0, dev->stream, hi, lo, a.x, a.x_pitch,
                                 a.k, a.m, vec));
        }
        if (a.m <= lt_stack_max_m) {
            // [hi; lo] is one [2m, k] matrix (lo follows hi): one pass over W
            // into y [2m, n] after the activations, then the halves summed.
            float *y = (float *)((char *)xc + (((size_t)total * 4 + 255) & ~(size_t)255));
            struct matmul_args s2 = a;
            s2.m = 2 * a.m;
            s2.dst = y;
            s2.dst_pitch = (a.n + 3) & ~3;
            rc = lt_matmul(dev, &s2, CUDA_R_16BF, hi, a.k, 0.0f);
            if (rc)
                return rc;
            // None was pending: xc came from cuda_scratch, which settles it.
            struct cuda_pending_sum *ps = &dev->pending_sum;
            ps->dst = a.dst;
            ps->dst_pitch = a.dst_pitch;
            ps->y = y;
            ps->y_pitch = s2.dst_pitch;
            ps->m = (int)a.m;
            ps->n = (int)a.n;
            ps->bias = a.bias;
            ps->bias_type = a.bias_type;
            if (defer_sum && !ps->disabled) {
                ps->active = true;
                return VLLMC_OK;
            }
            return sum_launch(dev, ps);
        }
        rc = lt_matmul(dev, &a, CUDA_R_16BF, hi, a.k, 0.0f);
        if (!rc)
            rc = lt_matmul(dev, &a, CUDA_R_16BF, lo, a.k, 1.0f);
    } else {
        if (wt == DTYPE_BF16) {
            convert_kernel<__nv_bfloat16><<<matmul_grid_1d(total), 256, 0, dev->stream>>>(
                (__nv_bfloat16 *)xc, a.x, a.x_pitch, a.k, total);
            CUDA_TRY_LAUNCH();
        } else if (split_ready) {
            xc = (void *)split_ready; // the op that wrote x rounded it already
        } else {
            const bool vec = a.k % 4 == 0 && a.x_pitch % 4 == 0 && (uintptr_t)a.x % 16 == 0;
            const int rows = a.m < 1 ? 1 : a.m < 65535 ? a.m : 65535; // grid y, rows stride
            const dim3 grid((unsigned)((a.k + 1023) / 1024), (unsigned)rows);
            CUDA_TRY(cuda_launch(split_kernel, grid, 256, 0, dev->stream, (__nv_bfloat16 *)xc,
                                 (__nv_bfloat16 *)xc, a.x, a.x_pitch, a.k, a.m, vec));
        }
        rc = lt_matmul(dev, &a, wt == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F, xc, a.k, 0.0f);
    }
    if (rc)
        return rc;
    if (a.bias) {
        const int64_t n_out = (int64_t)a.m * a.n;
        bias_add_kernel<<<matmul_grid_1d(n_out), 256, 0, dev->stream>>>(
            a.dst, a.dst_pitch, a.bias, a.bias_type, a.n, n_out);
        CUDA_TRY_LAUNCH();
    }
    return VLLMC_OK;
}

static bool lt_split_x = true;

extern "C" void cuda_matmul_set_split_x(bool on)
{
    lt_split_x = on;
}

extern "C" enum vllmc_status cuda_cublaslt_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct matmul_args a;
    matmul_args_init(&a, c);
    if (a.m == 0 || a.n == 0)
        return VLLMC_OK;
    const enum dtype wt = c->src[1]->dtype;
    void *xc = nullptr;
    const void *split_ready = nullptr;
    if (wt != DTYPE_F32) {
        const bool split = wt == DTYPE_BF16 && lt_split_x;
        if (split || wt == DTYPE_F16)
            split_ready = cuda_split_find(c, a.x, a.m, a.k, a.x_pitch, wt == DTYPE_F16);
        const size_t x_bytes = (size_t)a.m * (size_t)a.k * 2 * (split ? 2 : 1);
        const size_t bytes =
            split ? ((x_bytes + 255) & ~(size_t)255) + lt_stack_bytes(a.m, a.n) : x_bytes;
        enum vllmc_status rc = cuda_scratch(dev, bytes, &xc);
        if (rc)
            return rc;
    }
    return lt_run(dev, &a, wt, xc, lt_split_x, split_ready, true);
}

// Bytes of the bf16 W [n, k] at the start of the scratch, rounded up so the
// activations after it start 256-byte aligned.
static size_t lt_bf16_w_bytes(const struct op_call *c)
{
    return ((size_t)c->src[1]->ne[1] * (size_t)c->src[1]->ne[0] * 2 + 255) & ~(size_t)255;
}

extern "C" enum vllmc_status cuda_matmul_lt_bf16_scratch(const struct op_call *c,
                                                         void **w_scratch)
{
    const size_t x_bytes = (size_t)tensor_n_rows(c->src[0]) * (size_t)c->src[1]->ne[0] * 2;
    return cuda_scratch(cuda_device_of(c), lt_bf16_w_bytes(c) + x_bytes, w_scratch);
}

extern "C" enum vllmc_status cuda_matmul_lt_bf16(const struct op_call *c, const void *w_scratch)
{
    struct matmul_args a;
    matmul_args_init(&a, c);
    a.w = w_scratch;
    a.w_pitch = a.k;
    void *x_scratch = (char *)w_scratch + lt_bf16_w_bytes(c);
    return lt_run(cuda_device_of(c), &a, DTYPE_BF16, x_scratch, false, nullptr, false);
}

// ---- bf16 matrices computed as f16 (--dtype float16) ----

// Adds to *n_out how many values of w [n] bf16 f16 cannot hold: magnitudes
// above 65504 (from 65520 they would round to infinity), infinities, NaNs.
static __global__ void bf16_outside_f16_kernel(const __nv_bfloat16 *w, int64_t n,
                                               unsigned long long *n_out)
{
    unsigned long long count = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        count += !(fabsf(__bfloat162float(w[i])) <= 65504.0f);
    for (int o = CUDA_WARP / 2; o > 0; o /= 2)
        count += __shfl_down_sync(0xffffffffu, count, o);
    if (count && threadIdx.x % CUDA_WARP == 0)
        atomicAdd(n_out, count);
}

// w [n] bf16 rewritten in place as f16, the same two bytes an element.
static __global__ void bf16_to_f16_kernel(void *w, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        ((__half *)w)[i] = __float2half_rn(__bfloat162float(((const __nv_bfloat16 *)w)[i]));
}

extern "C" enum vllmc_status cuda_weights_to_f16(struct cuda_device *dev, struct tensor *const *w,
                                                 int n, int64_t *n_outside)
{
    struct err *err = dev->err;
    *n_outside = 0;
    unsigned long long *count;
    enum vllmc_status rc = cuda_scratch(dev, sizeof *count, (void **)&count);
    if (rc)
        return rc;
    CUDA_TRY(cudaMemsetAsync(count, 0, sizeof *count, dev->stream));
    const unsigned blocks = (unsigned)dev->n_sms * 8;
    for (int i = 0; i < n; i++) {
        bf16_outside_f16_kernel<<<blocks, 256, 0, dev->stream>>>((const __nv_bfloat16 *)w[i]->data,
                                                                 tensor_n_elements(w[i]), count);
        CUDA_TRY_LAUNCH();
    }
    unsigned long long host_count = 0;
    CUDA_TRY(cudaMemcpyAsync(&host_count, count, sizeof host_count, cudaMemcpyDeviceToHost,
                             dev->stream));
    CUDA_TRY(cudaStreamSynchronize(dev->stream));
    if (host_count) {
        *n_outside = (int64_t)host_count;
        return VLLMC_OK;
    }
    for (int i = 0; i < n; i++) {
        bf16_to_f16_kernel<<<blocks, 256, 0, dev->stream>>>(w[i]->data, tensor_n_elements(w[i]));
        CUDA_TRY_LAUNCH();
        w[i]->dtype = DTYPE_F16;
    }
    CUDA_TRY(cudaStreamSynchronize(dev->stream));
    return VLLMC_OK;
}
