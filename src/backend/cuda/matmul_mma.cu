// Tensor-core GEMM for decode-sized batches over bf16 weights: dst [m, n] =
// x [m, k] . W [n, k]^T (+ bias [n]), x and dst f32, m up to 128. Each block
// streams its rows of W through shared memory once (cp.async, STAGES deep)
// and multiplies them with every token of the batch, whose f32 activations it
// splits into hi + lo bf16 terms in shared memory: 16 significant bits, as
// the cuBLASLt path's two terms, but without their buffers or the sum of a
// stacked GEMM's halves. Splits of k across the blocks of a thread-block
// cluster are summed through distributed shared memory in rank order, so the
// result does not depend on timing. Not for prefill: cuBLASLt's wgmma kernels
// win once the tensor cores, not W's bytes, set the pace.
#include <cooperative_groups.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/mma.cuh"

namespace cg = cooperative_groups;

#define MMA_WARPS 4 // warps along W's rows
#define MMA_KT 64   // k of a stage: one 128-byte row of W
#define MMA_MAX_SPLITS 8 // blocks of a cluster (the portable limit)

// One instance's shared memory. STAGES slots of W [BR][64] bf16 then X
// [MT][64] f32 as copied; after them X's terms of the stage in use, hi
// [MT][64] and lo [MT][64] bf16. The block's sums P [MT][BR + 4] f32 alias
// the slots once the last stage is done (row pitch BR + 4: a fragment's
// stores of tokens 2t, 2t + 1 at rows g land in distinct banks). WK warps
// share each 16-row tile, each taking 64 / WK of a stage's k: with WK = 2 a
// scheduler has two warps to switch between while one waits on ldmatrix or
// on its mma chain.
template <int TT, int RT, int STAGES, int WK> struct mma_shape {
    static constexpr int THREADS = MMA_WARPS * WK * CUDA_WARP;
    static constexpr int MT = 8 * TT;              // tokens, padded to the mma's n
    static constexpr int BR = MMA_WARPS * 16 * RT; // W rows of a block
    static constexpr int W_ELEMS = BR * MMA_KT;
    static constexpr int STAGE_BYTES = W_ELEMS * 2 + MT * MMA_KT * 4;
    static constexpr int PB = BR + 4;
    static constexpr int P_BYTES = MT * PB * 4;
    static constexpr int SLOTS_BYTES = STAGES * STAGE_BYTES;
    static constexpr int AREA = SLOTS_BYTES > P_BYTES ? SLOTS_BYTES : P_BYTES;
    static constexpr int SMEM = AREA + 2 * MT * MMA_KT * 2;
};

// Element offset of (row, k) in a [rows][64] 16-bit tile whose 16-byte
// chunks are XOR-swizzled by row: ldmatrix's eight row addresses of one
// matrix (rows r..r+7 at one chunk) then hit eight distinct bank groups.
__device__ __forceinline__ int mma_swz(int row, int k)
{
    return row * MMA_KT + ((((k >> 3) ^ row) & 7) << 3) + (k & 7);
}

// ---- the kernel ----

// Grid: (ceil(n / BR), n_splits), clusters of (1, n_splits, 1). Warp w owns
// W rows [16 RT wr, 16 RT (wr + 1)) of the block's BR (wr = w % 4) and the
// k slice wk = w / 4 of each stage; its mma per 16 k is
//   C^T [16 rows x 8 tokens] += W [16 rows x 16 k] . X^T [16 k x 8 tokens]
// twice, once with X's hi terms and once with its lo terms, for each of the
// TT token tiles, accumulating in f32. The WK slices' sums are added in
// slice order at the end.
template <int TT, int RT, int STAGES, int WK>
static __global__ void __launch_bounds__(mma_shape<TT, RT, STAGES, WK>::THREADS)
    mma_gemm_kernel(float *dst, int64_t dst_pitch, const float *x, int64_t x_pitch,
                    const __nv_bfloat16 *w, int64_t w_pitch, const void *bias, int bias_type, int m,
                    int n, int k)
{
    using S = mma_shape<TT, RT, STAGES, WK>;
    constexpr int MMA_THREADS = S::THREADS;
    extern __shared__ __align__(16) unsigned char smem[];
    uint16_t *xh = (uint16_t *)(smem + S::AREA), *xl = xh + S::MT * MMA_KT;
    const int tid = threadIdx.x, lane = tid % CUDA_WARP, warp = tid / CUDA_WARP;
    const int wr = warp % MMA_WARPS, wk = warp / MMA_WARPS;
    const int row0 = (int)blockIdx.x * S::BR;
    const int n_splits = (int)gridDim.y, split = (int)blockIdx.y;
    // This split's stages of k: [step0, step0 + n_steps).
    const int all_steps = (k + MMA_KT - 1) / MMA_KT;
    const int step0 = (int)((int64_t)split * all_steps / n_splits);
    const int n_steps = (int)((int64_t)(split + 1) * all_steps / n_splits) - step0;

    // Stage i of the split into slot `slot`: W's BR rows (8 chunks each) and
    // X's MT rows (16 chunks each); rows past n or m and k past its end are
    // zero-filled (k is a multiple of 8, so a chunk is all in or all out).
    auto copy_w = [&](int i, int slot) {
        uint16_t *ws = (uint16_t *)(smem + slot * S::STAGE_BYTES);
        const int k0 = (step0 + i) * MMA_KT;
#pragma unroll
        for (int u = 0; u < S::BR * 8 / MMA_THREADS; u++) {
            const int idx = tid + u * MMA_THREADS, r = idx >> 3, c = idx & 7;
            const bool valid = row0 + r < n && k0 + 8 * c < k;
            const __nv_bfloat16 *src = valid ? w + (int64_t)(row0 + r) * w_pitch + k0 + 8 * c : w;
            tc_cp_async16(ws + mma_swz(r, 8 * c), src, valid);
        }
    };
    auto copy_x = [&](int i, int slot) {
        float *xs = (float *)(smem + slot * S::STAGE_BYTES + S::W_ELEMS * 2);
        const int k0 = (step0 + i) * MMA_KT;
#pragma unroll
        for (int u = 0; u < S::MT * 16 / MMA_THREADS; u++) {
            const int idx = tid + u * MMA_THREADS, r = idx >> 4, c = idx & 15;
            const bool valid = r < m && k0 + 4 * c < k;
            const float *src = valid ? x + (int64_t)r * x_pitch + k0 + 4 * c : x;
            tc_cp_async16((uint16_t *)(xs + r * MMA_KT + 4 * c), src, valid);
        }
    };

    // W depends on no kernel before this one: its first stages load while
    // that kernel drains (programmatic dependent launch), X after the wait.
#pragma unroll
    for (int s = 0; s + 1 < STAGES; s++)
        if (s < n_steps)
            copy_w(s, s);
    cuda_pdl_sync();
#pragma unroll
    for (int s = 0; s + 1 < STAGES; s++) {
        if (s < n_steps)
            copy_x(s, s);
        tc_cp_async_commit(); // group s: stage s's X (and, in group 0, every prologue W)
    }

    float acc[RT][TT][4];
#pragma unroll
    for (int rt = 0; rt < RT; rt++)
#pragma unroll
        for (int j = 0; j < TT; j++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                acc[rt][j][c] = 0.0f;

    for (int i = 0; i < n_steps; i++) {
        tc_cp_async_wait<STAGES - 2>();
        __syncthreads(); // stage i is in for every thread; slot i - 1 and the terms are free
        const int ahead = i + STAGES - 1;
        if (ahead < n_steps) {
            copy_w(ahead, ahead % STAGES);
            copy_x(ahead, ahead % STAGES);
        }
        tc_cp_async_commit();

        // X of stage i as bf16 hi + lo terms, once for all the warps.
        const float *xs = (const float *)(smem + (i % STAGES) * S::STAGE_BYTES + S::W_ELEMS * 2);
#pragma unroll
        for (int u = 0; u < S::MT * 16 / MMA_THREADS; u++) {
            const int idx = tid + u * MMA_THREADS, r = idx >> 4, c = idx & 15;
            const float4 v = *(const float4 *)(xs + r * MMA_KT + 4 * c);
            cuda_split_store4((__nv_bfloat16 *)(xh + mma_swz(r, 4 * c)), xl - xh, v);
        }
        __syncthreads();

        const uint16_t *ws = (const uint16_t *)(smem + (i % STAGES) * S::STAGE_BYTES);
#pragma unroll
        for (int s = wk * (MMA_KT / 16 / WK); s < (wk + 1) * (MMA_KT / 16 / WK); s++) {
            // A: matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
            uint32_t a[RT][4];
#pragma unroll
            for (int rt = 0; rt < RT; rt++) {
                const int r = (wr * RT + rt) * 16 + (lane & 7) + 8 * ((lane >> 3) & 1);
                tc_ldsm4(a[rt], ws + mma_swz(r, 16 * s + 8 * (lane >> 4)));
            }
            // B of token tiles 2jj, 2jj + 1: matrices (tile 2jj, k 0-7), (2jj,
            // 8-15), (2jj + 1, 0-7), (2jj + 1, 8-15), i.e. b0, b1 of each.
#pragma unroll
            for (int jj = 0; jj < TT / 2; jj++) {
                const int r = 16 * jj + 8 * (lane >> 4) + (lane & 7);
                const int kk = 16 * s + 8 * ((lane >> 3) & 1);
                uint32_t bh[4], bl[4];
                tc_ldsm4(bh, xh + mma_swz(r, kk));
                tc_ldsm4(bl, xl + mma_swz(r, kk));
#pragma unroll
                for (int rt = 0; rt < RT; rt++) {
                    tc_mma<__nv_bfloat16>(acc[rt][2 * jj], a[rt], bh[0], bh[1]);
                    tc_mma<__nv_bfloat16>(acc[rt][2 * jj], a[rt], bl[0], bl[1]);
                    tc_mma<__nv_bfloat16>(acc[rt][2 * jj + 1], a[rt], bh[2], bh[3]);
                    tc_mma<__nv_bfloat16>(acc[rt][2 * jj + 1], a[rt], bl[2], bl[3]);
                }
            }
        }
    }

    // The block's sums into P [token][row]: acc[rt][j] holds rows g, g + 8 of
    // the warp's tile rt at tokens 8j + 2t, + 1; slice 0 stores, the next
    // slices add in turn.
    tc_cp_async_wait<0>();
    __syncthreads(); // P aliases slots other warps may still read
    float *P = (float *)smem;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int slice = 0; slice < WK; slice++) {
        if (slice > 0)
            __syncthreads(); // the slice before has stored
        if (wk != slice)
            continue;
#pragma unroll
        for (int rt = 0; rt < RT; rt++)
#pragma unroll
            for (int j = 0; j < TT; j++) {
                const int r = (wr * RT + rt) * 16 + g, c = 8 * j + 2 * t;
                float *p0 = &P[c * S::PB + r], *p1 = &P[(c + 1) * S::PB + r];
                if (slice == 0) {
                    p0[0] = acc[rt][j][0];
                    p1[0] = acc[rt][j][1];
                    p0[8] = acc[rt][j][2];
                    p1[8] = acc[rt][j][3];
                } else {
                    p0[0] += acc[rt][j][0];
                    p1[0] += acc[rt][j][1];
                    p0[8] += acc[rt][j][2];
                    p1[8] += acc[rt][j][3];
                }
            }
    }

    // Split s of the cluster writes rows [s BR / n_splits, (s + 1) BR /
    // n_splits) of the block's, each the sum of every split's P in rank order.
    const int rows = S::BR / n_splits;
    const int r_begin = split * rows;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::cluster_group cluster = cg::this_cluster();
    if (n_splits > 1)
        cluster.sync(); // every split's P is written (release/acquire over the cluster)
    else
        __syncthreads();
#else
    __syncthreads(); // the launcher makes no clusters before sm_90
#endif
    for (int idx = tid; idx < rows * m; idx += MMA_THREADS) {
        const int r = r_begin + idx % rows, tok = idx / rows, row = row0 + r;
        if (row >= n)
            continue;
        float v = P[tok * S::PB + r];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (n_splits > 1) {
            v = 0.0f;
            for (int s = 0; s < n_splits; s++)
                v += cluster.map_shared_rank(P, s)[tok * S::PB + r];
        }
#endif
        if (bias)
            v += cuda_bias_at(bias, bias_type, row);
        dst[(int64_t)tok * dst_pitch + row] = v;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (n_splits > 1)
        cluster.sync(); // no block leaves while another may read its P
#endif
}

// ---- launchers ----

// Token counts up to this take the kernel (cuda_mma_gemm_set), for weight
// matrices of at most mma_max_weight_bytes (0: any). Measured inside decode
// graphs (bench/RESULTS.md): 16 sequences of the 0.6B shape decode 1.07x
// faster than with cuBLASLt's stacked hi + lo GEMM and its sum; at 32 it is
// level, at 64 slower, and on larger matrices (the 8B shape's layers, the
// lm_heads: bound by W's bandwidth, not by a GEMM's fixed latency) cuBLASLt
// streams W faster.
static int mma_max_m = 16;
static int64_t mma_max_weight_bytes = (int64_t)16 << 20;
// Rows of W a warp owns (16 RT), pipeline depth and warps along k, 0 =
// chosen by shape.
static int mma_rt = 0, mma_stages = 0, mma_wk = 0;

extern "C" void cuda_mma_gemm_set(int max_m, int rt, int stages, int wk)
{
    mma_max_m =
        max_m < 0 ? 0 : (max_m > CUDA_MMA_GEMM_KERNEL_MAX_M ? CUDA_MMA_GEMM_KERNEL_MAX_M : max_m);
    mma_rt = rt == 1 || rt == 2 ? rt : 0;
    mma_stages = stages == 3 || stages == 4 ? stages : 0;
    mma_wk = wk == 1 || wk == 2 ? wk : 0;
}

extern "C" int cuda_mma_gemm_max_m(void)
{
    return mma_max_m;
}

extern "C" void cuda_mma_gemm_set_max_weight_bytes(int64_t bytes)
{
    mma_max_weight_bytes = bytes < 0 ? 0 : bytes;
}

extern "C" int64_t cuda_mma_gemm_max_weight_bytes(void)
{
    return mma_max_weight_bytes;
}

struct mma_launch {
    float *dst;
    int64_t dst_pitch;
    const float *x;
    int64_t x_pitch;
    const __nv_bfloat16 *w;
    int64_t w_pitch;
    const void *bias;
    int bias_type;
    int m, n, k;
    int n_sms, cc_major;
};

// What an instance's launches need to know once: its shared-memory opt-in
// (past 48 KiB), the blocks an SM holds, and how many clusters of 2, 4 and 8
// blocks can run at once (clusters live within one GPC, so fewer than the
// SMs / cluster size a naive count gives: 62 of 4 blocks on the H200, where
// 64 would have run as a second wave of two clusters).
struct mma_fit {
    bool done;
    int per_sm;
    int clusters[4]; // index log2(cluster size)
};

template <int TT, int RT, int STAGES, int WK>
static cudaError_t mma_fit_of(struct mma_fit *f, const void *kernel, const struct mma_launch *a)
{
    using S = mma_shape<TT, RT, STAGES, WK>;
    if (f->done)
        return cudaSuccess;
    cudaError_t rc =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
    if (rc == cudaSuccess)
        rc = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&f->per_sm, kernel, S::THREADS,
                                                           (size_t)S::SMEM);
    if (rc != cudaSuccess)
        return rc;
    f->clusters[0] = f->per_sm * a->n_sms;
    for (int e = 1; e < 4; e++) {
        f->clusters[e] = 0;
        if (a->cc_major < 9)
            continue;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(1, 1u << e);
        cfg.blockDim = dim3(S::THREADS);
        cfg.dynamicSmemBytes = (size_t)S::SMEM;
        cudaLaunchAttribute attr = cuda_cluster_attr(dim3(1, 1u << e));
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        rc = cudaOccupancyMaxActiveClusters(&f->clusters[e], kernel, &cfg);
        if (rc != cudaSuccess)
            return rc;
    }
    f->done = true;
    return cudaSuccess;
}

template <int TT, int RT, int STAGES, int WK>
static cudaError_t mma_launch_one(const struct mma_launch *a, cudaStream_t stream)
{
    using S = mma_shape<TT, RT, STAGES, WK>;
    static struct mma_fit fit;
    void (*kernel)(float *, int64_t, const float *, int64_t, const __nv_bfloat16 *, int64_t,
                   const void *, int, int, int, int) = mma_gemm_kernel<TT, RT, STAGES, WK>;
    cudaError_t rc = mma_fit_of<TT, RT, STAGES, WK>(&fit, (const void *)kernel, a);
    if (rc != cudaSuccess)
        return rc;
    const int row_blocks = (a->n + S::BR - 1) / S::BR;
    const int all_steps = (a->k + MMA_KT - 1) / MMA_KT;
    // Split k while the grid stays within one wave (blocks and clusters) and
    // each split keeps at least two stages: small matrices (n = 1024 of a 0.6B
    // shape's o and down projections: 16 blocks of rows) would leave most SMs
    // idle.
    int n_splits = 1, e = 0;
    while (n_splits < MMA_MAX_SPLITS && all_steps >= 4 * n_splits &&
           row_blocks * n_splits * 2 <= fit.clusters[0] && row_blocks <= fit.clusters[e + 1]) {
        n_splits *= 2;
        e++;
    }
    // Clusters of (1, n_splits, 1) blocks, a split of k each.
    return cuda_launch_cluster(kernel, dim3((unsigned)row_blocks, (unsigned)n_splits),
                               dim3(S::THREADS), (size_t)S::SMEM, stream,
                               dim3(1, (unsigned)n_splits), a->dst, a->dst_pitch, a->x, a->x_pitch,
                               a->w, a->w_pitch, a->bias, a->bias_type, a->m, a->n, a->k);
}

template <int TT, int RT, int STAGES>
static cudaError_t mma_launch_wk(const struct mma_launch *a, int wk, cudaStream_t s)
{
    return wk == 2 ? mma_launch_one<TT, RT, STAGES, 2>(a, s)
                   : mma_launch_one<TT, RT, STAGES, 1>(a, s);
}

template <int TT, int RT>
static cudaError_t mma_launch_stages(const struct mma_launch *a, int stages, int wk,
                                     cudaStream_t s)
{
    return stages == 3 ? mma_launch_wk<TT, RT, 3>(a, wk, s) : mma_launch_wk<TT, RT, 4>(a, wk, s);
}

template <int TT> static cudaError_t mma_launch_tt(const struct mma_launch *a, cudaStream_t s)
{
    // Two 16-row tiles a warp (128 rows a block) halve the activations'
    // shared-memory traffic per W byte; they pay only where the matrix has
    // enough rows to give every SM a block anyway (a 0.6B shape's lm_head).
    int rt = mma_rt;
    if (rt == 0)
        rt = (a->n + 127) / 128 >= a->n_sms ? 2 : 1;
    const int stages = mma_stages ? mma_stages : (TT >= 16 ? 3 : 4);
    const int wk = mma_wk ? mma_wk : 2;
    if constexpr (TT >= 16)
        return mma_launch_stages<TT, 1>(a, stages, wk, s); // 128 accumulators a thread at RT = 2
    else
        return rt == 2 ? mma_launch_stages<TT, 2>(a, stages, wk, s)
                       : mma_launch_stages<TT, 1>(a, stages, wk, s);
}

// ---- the provider ----

extern "C" bool cuda_mma_gemm_supports(const struct op_call *c)
{
    if (!cuda_matmul_shape_ok(c))
        return false;
    const struct tensor *x = c->src[0], *w = c->src[1];
    const int64_t m = tensor_n_rows(x), k = x->ne[0];
    if (mma_max_weight_bytes && w->ne[1] * k * 2 > mma_max_weight_bytes)
        return false;
    return w->dtype == DTYPE_BF16 && m >= 1 && m <= mma_max_m && k > 0 && k % 8 == 0 &&
           (uintptr_t)x->data % 16 == 0 && x->nb[1] % 16 == 0 && (uintptr_t)w->data % 16 == 0 &&
           w->nb[1] % 16 == 0;
}

extern "C" enum vllmc_status cuda_mma_gemm_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2];
    struct mma_launch a;
    a.dst = (float *)c->dst->data;
    a.dst_pitch = cuda_row_pitch(c->dst);
    a.x = (const float *)x->data;
    a.x_pitch = cuda_row_pitch(x);
    a.w = (const __nv_bfloat16 *)w->data;
    a.w_pitch = cuda_row_pitch(w);
    a.bias = b ? b->data : nullptr;
    a.bias_type = b ? (int)b->dtype : (int)DTYPE_F32;
    a.m = (int)tensor_n_rows(x);
    a.n = (int)w->ne[1];
    a.k = (int)x->ne[0];
    a.n_sms = dev->n_sms;
    a.cc_major = dev->cc_major;
    if (a.m == 0 || a.n == 0)
        return VLLMC_OK;
    if (a.m > CUDA_MMA_GEMM_KERNEL_MAX_M)
        return op_fail(c, VLLMC_ERR_UNSUPPORTED, "cuda-mma: m=%d above %d", a.m,
                       CUDA_MMA_GEMM_KERNEL_MAX_M);
    cudaError_t rc;
    if (a.m <= 16)
        rc = mma_launch_tt<2>(&a, dev->stream);
    else if (a.m <= 32)
        rc = mma_launch_tt<4>(&a, dev->stream);
    else if (a.m <= 64)
        rc = mma_launch_tt<8>(&a, dev->stream);
    else
        rc = mma_launch_tt<16>(&a, dev->stream);
    CUDA_TRY(rc);
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}
