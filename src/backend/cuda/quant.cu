// Quantized GGUF weights on the GPU, kept packed (Q4_0 .. Q8_0, IQ4_NL, the
// k-quants, IQ4_XS): the decode GEMV (m <= CUDA_QGEMV_MAX_M) dots x with the
// packed rows; larger m dequantizes W to bf16 in scratch for the cuBLASLt
// GEMM (where its alignment allows; else the GEMV, 8 tokens a launch); the
// embedding gathers and dequantizes rows (quant_decode.h, f32 arithmetic).
//
// Decode (m <= CUDA_QGEMV_MAX_M) is bound by reading W once: at the H200's
// ~4.4 TB/s a 24576 x 4096 Q4_K matrix (56.6 MB) takes 12.9 us. The packed
// GEMV (qgemv_packed_kernel) streams rows with 16-byte loads: a warp takes
// two rows at a time (one for Q4_K, Q5_K) and walks them in tiles of whole blocks (64
// units, a multiple of 16 bytes, so a row's tiles share its misalignment:
// the 16-byte pieces that cover a tile start up to 14 bytes before it). Each
// tile goes from registers into the warp's shared-memory slot, the next
// tiles' loads are issued, then the lanes decode the tile from shared memory
// (aligned words and funnel shifts), two units a lane; ~4.6 KB in flight a
// warp, more than Little's law asks of HBM latency (~30 KB an SM) at 16
// warps an SM. The activations are quantized once per block to 16-bit
// blocks of 32 in shared memory, so a lane dots two weights per dp2a
// (int16 x int8) instead of converting each weight to a float (the SM's
// conversion rate, 16 a clock, is below the ~32 weights a clock that 4-bit
// types at full bandwidth need); 16 bits keep the results within float
// rounding of the f32 kernel's (8-bit activations, as llama.cpp's q8_1,
// moved greedy tokens of the quantized parity models). An activation piece
// read from shared memory serves every row of the warp's group. Every packed
// type has a unit decoder (quant_dot.h); W not 16-aligned, x too large for
// shared memory and VLLMC_CUDA_QGEMV=0 take qgemv_kernel: a warp per output
// row, a lane per 32-weight sub-block, byte loads, f32 arithmetic.
//
// One token of Q4_K, Q6_K or Q8_0 (the types of Q4_K_M and Q8_0 files) takes
// qgemv_direct_kernel instead: no staging of W in shared memory, each lane
// reads its units' bytes straight into registers (16-byte loads through L1,
// whose hits serve the neighbouring lanes' halves of a sector) and decodes
// them there; on the H200 it doubled Q8_0's GEMV bandwidth (gate_up 1.6 ->
// 3.2 TB/s) and gave Q4_K and Q6_K 10-25% (bench/RESULTS.md). One token's
// Q4_K rows whose length is whole 256-weight blocks go further: in
// qgemv_lane_kernel a lane reads a whole 144-byte block (9 aligned loads)
// and unpacks it with compile-time offsets (H100: gate_up 29.3 -> 25.6 us,
// 8B Q4_K_M tg128 +1.5-2.3%). Both one-token kernels also run NORM_MATMUL
// (cuda-norm-qgemv): the residual add and RMSNorm go into the activations'
// quantization, and a gate|up W's rows pair up in a warp task so that it
// writes silu(gate) * up itself; two kernels a layer fewer (H100, 8B Q4_K_M
// tg128 250.2 -> 271.7-271.9 tok/s together with the q|k fusion of
// model_layer.wqk).
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/quant.cuh"
#include "backend/cuda/quant_decode.h"
#include "backend/cuda/quant_dot.h"

#define QGEMV_WARPS 4
#define QGEMV_P_WARPS 8 // warps per block of the packed GEMV
#define QK_K 256

// ---- the packed types ----

// Every packed type: dtype, decoder (quant_decode.h), weights and bytes per
// block. q_type_ok and the dispatch switches below are made from this list.
#define Q_TYPES(X)                                                                                 \
    X(DTYPE_Q4_0, quant_decode_q4_0, 32, 18)                                                       \
    X(DTYPE_Q4_1, quant_decode_q4_1, 32, 20)                                                       \
    X(DTYPE_Q5_0, quant_decode_q5_0, 32, 22)                                                       \
    X(DTYPE_Q5_1, quant_decode_q5_1, 32, 24)                                                       \
    X(DTYPE_Q8_0, quant_decode_q8_0, 32, 34)                                                       \
    X(DTYPE_IQ4_NL, quant_decode_iq4_nl, 32, 18)                                                   \
    X(DTYPE_Q2_K, quant_decode_q2_k, QK_K, 84)                                                     \
    X(DTYPE_Q3_K, quant_decode_q3_k, QK_K, 110)                                                    \
    X(DTYPE_Q4_K, quant_decode_q4_k, QK_K, 144)                                                    \
    X(DTYPE_Q5_K, quant_decode_q5_k, QK_K, 176)                                                    \
    X(DTYPE_Q6_K, quant_decode_q6_k, QK_K, 210)                                                    \
    X(DTYPE_IQ4_XS, quant_decode_iq4_xs, QK_K, 136)

// q_fmt<T>::sub(b, j, v) writes the 32 weights of sub-block j of the block at
// b into v; elems and bytes give the block's size.
template <int T> struct q_fmt;
#define Q_FMT(t, decode, n_elems, n_bytes)                                                         \
    template <> struct q_fmt<t> {                                                                  \
        static constexpr int elems = n_elems, bytes = n_bytes;                                     \
        static __device__ __forceinline__ void sub(const uint8_t *b, int j, float *v)              \
        {                                                                                          \
            decode(b, j, v);                                                                       \
        }                                                                                          \
    };
Q_TYPES(Q_FMT)
#undef Q_FMT

// The packed GEMV's layout of a type (QDOT_TYPES): unit decoder, units a
// block, sub-blocks a unit, blocks a tile. A tile is 64 units (two a lane)
// and a multiple of 16 bytes. Types absent there take qgemv_kernel.
template <int T> struct q_unit {
    static constexpr bool ok = false;
};
#define Q_UNIT(t, decode, n_units, n_subs, n_tile_blocks)                                          \
    template <> struct q_unit<t> {                                                                 \
        static constexpr bool ok = true;                                                           \
        static constexpr int units = n_units, subs = n_subs, tile_blocks = n_tile_blocks;          \
        static __device__ __forceinline__ void load(const uint8_t *b, int u, struct qdot_unit *w)  \
        {                                                                                          \
            decode(b, u, w);                                                                       \
        }                                                                                          \
    };
QDOT_TYPES(Q_UNIT)
#undef Q_UNIT

// ---- kernels ----

// dst [M, n] = x [M, k] . W^T: a warp per output row, lanes stride over the
// row's 32-weight sub-blocks; each sub-block is decoded once for all M tokens.
template <int T, int M>
static __global__ void __launch_bounds__(QGEMV_WARPS * CUDA_WARP)
    qgemv_kernel(float *dst, int64_t dst_pitch, const float *x, int64_t x_pitch,
                 const uint8_t *w, int64_t w_pitch, const void *bias, int bias_type, int n, int k)
{
    cuda_pdl_sync();
    constexpr int SUBS = q_fmt<T>::elems / 32;
    const int row = blockIdx.x * QGEMV_WARPS + threadIdx.x / CUDA_WARP;
    const int lane = threadIdx.x % CUDA_WARP;
    if (row >= n)
        return;
    const uint8_t *wr = w + (int64_t)row * w_pitch;
    const int n_subs = k / 32;
    float acc[M];
#pragma unroll
    for (int t = 0; t < M; t++)
        acc[t] = 0.0f;
    for (int s = lane; s < n_subs; s += CUDA_WARP) {
        float v[32];
        q_fmt<T>::sub(wr + (int64_t)(s / SUBS) * q_fmt<T>::bytes, s % SUBS, v);
#pragma unroll
        for (int t = 0; t < M; t++)
            acc[t] += cuda_dot32(v, x + t * x_pitch + (int64_t)s * 32);
    }
#pragma unroll
    for (int t = 0; t < M; t++) {
        float sum = cuda_warp_sum(acc[t]);
        if (lane == 0) {
            if (bias)
                sum += cuda_bias_at(bias, bias_type, row);
            dst[t * dst_pitch + row] = sum;
        }
    }
}

// The packed GEMV's tile bytes of a type and its shared memory for M tokens
// of rows of k: qgemv_rows tile slots per warp (a tile and the 16 bytes a row's
// misalignment adds), then the activations' 16-bit values [M, qdot_x_elems]
// laid out by qdot_x_offset, scales [M, k / 32] and sums [M, k / 32].
template <int T> static constexpr int qgemv_tile_bytes()
{
    return q_unit<T>::tile_blocks * q_fmt<T>::bytes;
}

// Rows a warp of the packed GEMV takes at a time: two, but one for the
// 64-weight units (Q4_K, Q5_K), whose second row would not fit 128 registers.
template <int T> static constexpr int qgemv_rows()
{
    return q_unit<T>::subs == 2 ? 1 : 2;
}

template <int T> static size_t qgemv_packed_smem(int m, int64_t k)
{
    const int uw = 32 * q_unit<T>::subs;
    return (size_t)QGEMV_P_WARPS * qgemv_rows<T>() * (qgemv_tile_bytes<T>() + 16) +
           (size_t)m * (2 * (size_t)qdot_x_elems((int)k, uw) + (size_t)k / 4);
}

// 16 bytes of W, read once: not kept in L1 (the tile goes on to shared
// memory; an L1 copy would only cost the SM's shared-memory bandwidth).
static __device__ __forceinline__ uint4 qgemv_load_stream(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// Tile t of a row into registers (qdot_tile_span): lane l takes 16-byte
// pieces l, l + 32, ...
// A piece that runs past end (the last row's last piece, when W's size is
// not a multiple of 16) is read in 2-byte words up to end, zeros after.
template <int TILE, int LOADS>
static __device__ __forceinline__ void qgemv_tile_load(uint4 *pre, const uint8_t *wr,
                                                       int64_t row_bytes, int t, int lane,
                                                       const uint8_t *end)
{
    const struct qdot_span sp = qdot_tile_span((uintptr_t)wr, row_bytes, t, TILE);
    const uint4 *first = (const uint4 *)(wr + sp.first);
#pragma unroll
    for (int i = 0; i < LOADS; i++) {
        const int c = lane + CUDA_WARP * i;
        if (c >= sp.n16)
            continue;
        const uint4 *p = first + c;
        if ((const uint8_t *)(p + 1) <= end) {
            pre[i] = qgemv_load_stream(p);
        } else {
            uint32_t v[4] = {0u, 0u, 0u, 0u};
            const unsigned short *h = (const unsigned short *)p;
#pragma unroll
            for (int j = 0; j < 8; j++)
                if ((const uint8_t *)(h + j) < end)
                    v[j / 2] |= (uint32_t)__ldg(h + j) << (16 * (j % 2));
            pre[i] = make_uint4(v[0], v[1], v[2], v[3]);
        }
    }
}

// x [M, k] (rows x_pitch apart) into the GEMV's shared memory: 16-bit blocks
// of 32, xq [M, kx] laid out by qdot_x_offset for units of uw weights, scales
// xd [M, k / 32] and sums xs [M, k / 32]. Every thread of the block takes
// part; the caller syncs before reading.
// NORM (NORM_MATMUL, one token): what goes in is v = h * w with h = x + add
// (nin; block 0 also writes h to nin->sum), and the return value is the
// norm's scale rsqrt(mean(h^2) + eps), which the caller applies to its sums
// (W . (v * scale) = scale * (W . v)), as cuda_stage_rmsnorm does for the
// 16-bit GEMVs; the 32-blocks' own scales absorb v's magnitude. red: 32
// floats of shared memory for the block's sum of squares.
template <int M, int THREADS = QGEMV_P_WARPS *CUDA_WARP, bool NORM = false>
static __device__ __forceinline__ float
qgemv_quantize_x(const float *x, int64_t x_pitch, int k, int uw, int16_t *xq, int kx, float *xd,
                 float *xs, const struct cuda_norm_in *nin = nullptr, float *red = nullptr)
{
    static_assert(!NORM || M == 1, "the norm prologue takes one token");
    float ss = 0.0f; // NORM: this thread's part of sum(h^2)
    const int n_sub = k / 32;
    // Eight threads a 32-block: q = round(x * 32767 / amax), d = amax / 32767, s = sum x
    // (qdot_quantize32). Four rounds of loads in flight at a time; every
    // thread of the block (THREADS) runs the same rounds (full-warp shuffles).
    constexpr int GROUPS = THREADS / 8, BATCH = 4;
    const int n_groups = M * n_sub, g8 = (int)threadIdx.x / 8, l8 = (int)threadIdx.x % 8;
    for (int base = 0; base < n_groups; base += BATCH * GROUPS) {
        float4 v[BATCH];
#pragma unroll
        for (int j = 0; j < BATCH; j++) {
            const int g = base + j * GROUPS + g8;
            v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (g < n_groups)
                v[j] = *(const float4 *)(x + (int64_t)(g / n_sub) * x_pitch + (g % n_sub) * 32 +
                                         4 * l8);
            if (NORM && g < n_groups) {
                const int i = g * 32 + 4 * l8; // M == 1: g is the 32-block
                if (nin->add) {
                    const float4 a = *(const float4 *)(nin->add + i);
                    v[j].x += a.x;
                    v[j].y += a.y;
                    v[j].z += a.z;
                    v[j].w += a.w;
                }
                if (nin->sum && blockIdx.x == 0)
                    *(float4 *)(nin->sum + i) = v[j];
                ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
                v[j].x *= cuda_bias_at(nin->w, nin->w_type, i);
                v[j].y *= cuda_bias_at(nin->w, nin->w_type, i + 1);
                v[j].z *= cuda_bias_at(nin->w, nin->w_type, i + 2);
                v[j].w *= cuda_bias_at(nin->w, nin->w_type, i + 3);
            }
        }
#pragma unroll
        for (int j = 0; j < BATCH; j++) {
            const int g = base + j * GROUPS + g8;
            float amax = fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)),
                               fmaxf(fabsf(v[j].z), fabsf(v[j].w)));
            float sum = (v[j].x + v[j].y) + (v[j].z + v[j].w);
#pragma unroll
            for (int off = 1; off < 8; off <<= 1) {
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
                sum += __shfl_xor_sync(0xffffffffu, sum, off);
            }
            if (g < n_groups) {
                const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
                *(short4 *)(xq + (int64_t)(g / n_sub) * kx +
                            qdot_x_offset((g % n_sub) * 32 + 4 * l8, uw)) =
                    make_short4((short)__float2int_rn(v[j].x * inv),
                                (short)__float2int_rn(v[j].y * inv),
                                (short)__float2int_rn(v[j].z * inv),
                                (short)__float2int_rn(v[j].w * inv));
                if (l8 == 0) {
                    xd[g] = amax / 32767.0f;
                    xs[g] = sum;
                }
            }
        }
    }
    if constexpr (NORM)
        return rsqrtf(cuda_block_sum(ss, red) / (float)k + nin->eps);
    return 1.0f;
}

// The 16-bit activations of one unit, its 32 SUBS values from element e0 of
// xq (qgemv_quantize_x's layout for units of uw weights), as the 16 SUBS
// words of two values that qdot_unit_dot takes.
template <int SUBS>
static __device__ __forceinline__ void qgemv_x_unit(const int16_t *xq, int e0, int uw,
                                                    uint32_t (&xw)[16 * SUBS])
{
#pragma unroll
    for (int i = 0; i < 4 * SUBS; i++) {
        const uint4 q = *(const uint4 *)(xq + qdot_x_offset(e0 + 8 * i, uw));
        xw[4 * i] = q.x;
        xw[4 * i + 1] = q.y;
        xw[4 * i + 2] = q.z;
        xw[4 * i + 3] = q.w;
    }
}

// dst [M, n] = x [M, k] . W^T, W 16-aligned with dense rows of w_pitch bytes
// (even; 4-aligned rows for Q4_1 and Q5_1, 16-aligned for Q4_K and Q5_K). A
// warp takes qgemv_rows rows at a time (a group), so each activation
// piece read from shared memory serves every row of the group. Warp slot
// warp * gridDim.x + blockIdx.x takes groups slot, slot + slots, ... (the
// groups left over after whole rounds spread over the blocks). x is
// quantized into shared memory first, while the first tiles' loads are in
// flight.
template <int T, int M>
static __global__ void __launch_bounds__(QGEMV_P_WARPS *CUDA_WARP, 2)
    qgemv_packed_kernel(float *dst, int64_t dst_pitch, const float *x, int64_t x_pitch,
                        const uint8_t *w, int64_t w_pitch, const void *bias, int bias_type, int n,
                        int k)
{
    cuda_pdl_sync();
    using Q = q_unit<T>;
    constexpr int R = qgemv_rows<T>();
    constexpr int BYTES = q_fmt<T>::bytes, SUBS_B = q_fmt<T>::elems / 32;
    constexpr int TILE = qgemv_tile_bytes<T>(), SLOT16 = TILE / 16 + 1;
    constexpr int LOADS = (SLOT16 + CUDA_WARP - 1) / CUDA_WARP;
    static_assert(TILE % 16 == 0 && Q::tile_blocks * Q::units == 2 * CUDA_WARP, "tile layout");
    extern __shared__ uint4 qgemv_smem[];
    const int warp = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int n_sub = k / 32;
    uint4 *slot = qgemv_smem + warp * R * SLOT16; // R slots of SLOT16 pieces
    constexpr int UW = 32 * Q::subs;               // weights a unit
    const int kx = qdot_x_elems(k, UW);
    int16_t *xq = (int16_t *)(qgemv_smem + QGEMV_P_WARPS * R * SLOT16); // [M, kx], qdot_x_offset
    float *xd = (float *)(xq + (int64_t)M * kx);                       // [M, n_sub]
    float *xs = xd + M * n_sub;                                        // [M, n_sub]
    const int64_t row_bytes = (int64_t)(k / q_fmt<T>::elems) * BYTES;
    const int n_tiles = (int)((row_bytes + TILE - 1) / TILE);
    const int slots = (int)gridDim.x * QGEMV_P_WARPS, n_groups_r = (n + R - 1) / R;
    int group = warp * (int)gridDim.x + (int)blockIdx.x;
    const uint8_t *w_end = w + (int64_t)n * w_pitch;

    uint4 pre[R][LOADS];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int i = 0; i < LOADS; i++)
            pre[r][i] = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int r = 0; r < R; r++)
        if (group * R + r < n)
            qgemv_tile_load<TILE, LOADS>(pre[r], w + (int64_t)(group * R + r) * w_pitch,
                                         row_bytes, 0, lane, w_end);

    qgemv_quantize_x<M>(x, x_pitch, k, UW, xq, kx, xd, xs);
    __syncthreads();

    for (; group < n_groups_r; group += slots) {
        const int row0 = group * R;
        const int n_rows = n - row0 < R ? n - row0 : R; // warp-uniform
        float acc[R][M];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int m = 0; m < M; m++)
                acc[r][m] = 0.0f;
        for (int t = 0; t < n_tiles; t++) {
            struct qdot_span sp[R];
            __syncwarp(); // every lane is done with the previous tiles
#pragma unroll
            for (int r = 0; r < R; r++) {
                sp[r] = qdot_tile_span((uintptr_t)(w + (int64_t)(row0 + r) * w_pitch), row_bytes,
                                       t, TILE);
                if (r < n_rows) {
#pragma unroll
                    for (int i = 0; i < LOADS; i++)
                        if (lane + CUDA_WARP * i < sp[r].n16)
                            slot[r * SLOT16 + lane + CUDA_WARP * i] = pre[r][i];
                }
            }
            __syncwarp();
            // The next tiles: this group's, or the first of the warp's next group.
            const int nt = t + 1 < n_tiles ? t + 1 : 0;
            const int nrow0 = t + 1 < n_tiles ? row0 : row0 + slots * R;
#pragma unroll
            for (int r = 0; r < R; r++)
                if (nrow0 + r < n)
                    qgemv_tile_load<TILE, LOADS>(pre[r], w + (int64_t)(nrow0 + r) * w_pitch,
                                                 row_bytes, nt, lane, w_end);
            const int units = sp[0].bytes / BYTES * Q::units;
            const int sub0 = t * Q::tile_blocks * SUBS_B; // the tile's first sub-block in the row
#pragma unroll 2
            for (int u = lane; u < units; u += CUDA_WARP) {
                const int bi = u / Q::units, uj = u % Q::units;
                struct qdot_unit wu[R];
#pragma unroll
                for (int r = 0; r < R; r++)
                    if (r < n_rows)
                        Q::load((const uint8_t *)(slot + r * SLOT16) + sp[r].mis + bi * BYTES, uj,
                                &wu[r]);
                const int s = sub0 + bi * SUBS_B + uj * Q::subs;
#pragma unroll
                for (int m = 0; m < M; m++) {
                    const int16_t *xt = xq + (int64_t)m * kx;
                    uint32_t xw[16 * Q::subs];
                    qgemv_x_unit<Q::subs>(xt, 32 * s, UW, xw);
#pragma unroll
                    for (int r = 0; r < R; r++)
                        if (r < n_rows)
                            acc[r][m] += qdot_unit_dot(&wu[r], Q::subs, xw, xd + m * n_sub + s,
                                                       xs + m * n_sub + s);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
#pragma unroll
            for (int m = 0; m < M; m++) {
                float sum = cuda_warp_sum(acc[r][m]);
                if (lane == 0 && r < n_rows) {
                    if (bias)
                        sum += cuda_bias_at(bias, bias_type, row0 + r);
                    dst[m * dst_pitch + row0 + r] = sum;
                }
            }
        }
    }
}

// ---- the direct GEMV (Q4_K, Q6_K, Q8_0), one token ----

// 16 bytes of W at p (16-aligned), zeros for the bytes at or past end (the
// last row's last piece may run past the tensor).
static __device__ __forceinline__ uint4 qgemv_ld16(const uint4 *p, const uint8_t *end)
{
    if ((const uint8_t *)(p + 1) <= end)
        return __ldg(p);
    uint32_t v[4] = {0u, 0u, 0u, 0u};
    const unsigned short *h = (const unsigned short *)p;
#pragma unroll
    for (int j = 0; j < 8; j++)
        if ((const uint8_t *)(h + j) < end)
            v[j / 2] |= (uint32_t)__ldg(h + j) << (16 * (j % 2));
    return make_uint4(v[0], v[1], v[2], v[3]);
}

// The 32 bytes at p (2-aligned) as eight little-endian words: the 16-byte
// pieces that cover them (two or three) into registers, then a shift by the
// lane's own word offset (two select stages, no indexed registers) and a
// funnel shift by its byte offset.
static __device__ __forceinline__ void qgemv_words32(const uint8_t *p, const uint8_t *end,
                                                     uint32_t *out)
{
    const uint4 *base = (const uint4 *)((uintptr_t)p & ~(uintptr_t)15);
    const int o = (int)((uintptr_t)p & 15);
    const uint4 v0 = qgemv_ld16(base, end), v1 = qgemv_ld16(base + 1, end);
    const uint4 v2 = o ? qgemv_ld16(base + 2, end) : make_uint4(0, 0, 0, 0);
    uint32_t a[12] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w, v2.x, v2.y, v2.z, v2.w};
    if (o & 4) {
#pragma unroll
        for (int i = 0; i < 11; i++)
            a[i] = a[i + 1];
    }
    if (o & 8) {
#pragma unroll
        for (int i = 0; i < 9; i++)
            a[i] = a[i + 2];
    }
    const unsigned sh = 8u * (unsigned)(o & 3);
#pragma unroll
    for (int i = 0; i < 8; i++)
        out[i] = __funnelshift_r(a[i], a[i + 1], sh);
}

static __device__ __forceinline__ float qgemv_half_at(const uint8_t *p)
{
    return __half2float(__ushort_as_half(__ldg((const unsigned short *)p)));
}

// Unit u of the block at b, read from global memory into registers; the same
// weights as the q_unit decoders (quant_dot.h) give from shared memory.
template <int T> struct q_direct {
    static constexpr bool ok = false;
};

// Q4_K (144-byte blocks, 16-aligned): the block's 16-byte head (d, dmin, the 12
// scale bytes) and the unit's 32 qs bytes, in three 16-byte loads. The 6-bit
// scale and min of sub-block j (qdot_k4_scale_min) come from byte j & 3 of
// the head's words 1 (bytes 4..7), 2 and 3.
template <> struct q_direct<DTYPE_Q4_K> {
    static constexpr bool ok = true;
    static __device__ __forceinline__ void load(const uint8_t *b, int u, const uint8_t *end,
                                                struct qdot_unit *w)
    {
        const uint4 *p = (const uint4 *)b;
        const uint4 h = qgemv_ld16(p, end), q0 = qgemv_ld16(p + 1 + 2 * u, end),
                    q1 = qgemv_ld16(p + 2 + 2 * u, end);
        const float d = __half2float(__ushort_as_half((unsigned short)(h.x & 0xffffu)));
        const float dmin = __half2float(__ushort_as_half((unsigned short)(h.x >> 16)));
        float sc[2], mn[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int j = 2 * u + i, sh = 8 * (j & 3);
            const int a = (int)((h.y >> sh) & 255u), bb = (int)((h.z >> sh) & 255u),
                      c = (int)((h.w >> sh) & 255u);
            const int s = j < 4 ? a & 63 : (c & 15) | ((a >> 6) << 4);
            const int m = j < 4 ? bb & 63 : (c >> 4) | ((bb >> 6) << 4);
            sc[i] = d * (float)s;
            mn[i] = dmin * (float)m;
        }
        const uint32_t qs[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            w->q[i] = qs[i] & 0x0F0F0F0Fu;
            w->q[8 + i] = (qs[i] >> 4) & 0x0F0F0F0Fu;
        }
        w->sc[0] = w->sc[1] = sc[0];
        w->sc[2] = w->sc[3] = sc[1];
        w->mn[0] = mn[0];
        w->mn[1] = mn[1];
        w->mh[0] = w->mh[1] = 0.0f;
        w->half_mins = 0;
    }
};

// Q8_0 (34-byte blocks, 2-aligned): qs through qgemv_words32, d on its own.
template <> struct q_direct<DTYPE_Q8_0> {
    static constexpr bool ok = true;
    static __device__ __forceinline__ void load(const uint8_t *b, int u, const uint8_t *end,
                                                struct qdot_unit *w)
    {
        (void)u;
        qgemv_words32(b + 2, end, w->q);
        qdot_scale_all(w, qgemv_half_at(b), 0.0f);
    }
};

// Q6_K (210-byte blocks, 2-aligned): as qdot_unit_q6_k, its ql and qh words
// through qgemv_words32.
template <> struct q_direct<DTYPE_Q6_K> {
    static constexpr bool ok = true;
    static __device__ __forceinline__ void load(const uint8_t *b, int u, const uint8_t *end,
                                                struct qdot_unit *w)
    {
        const int h = u / 4, g = u % 4;
        const int shift_l = 4 * (g >> 1), shift_h = 2 * g;
        uint32_t wl[8], wh[8];
        qgemv_words32(b + 64 * h + 32 * (g & 1), end, wl);
        qgemv_words32(b + 128 + 32 * h, end, wh);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t lo = (wl[i] >> shift_l) & 0x0F0F0F0Fu;
            const uint32_t hi = (wh[i] >> shift_h) & 0x03030303u;
            w->q[i] = qdot_sub_bytes(lo | hi << 4, 32);
        }
        const float d = qgemv_half_at(b + 208);
        const unsigned short sc2 = __ldg((const unsigned short *)(b + 192 + 8 * h + 2 * g));
        w->sc[0] = d * (float)(int8_t)(sc2 & 0xff);
        w->sc[1] = d * (float)(int8_t)(sc2 >> 8);
        w->sc[2] = w->sc[3] = 0.0f;
        w->mn[0] = w->mn[1] = 0.0f;
        w->mh[0] = w->mh[1] = 0.0f;
        w->half_mins = 0;
    }
};

// The row of W that a one-token kernel's row l of n reads: l, or with SILU
// (W the gate|up weight [2 ff, k], n = 2 ff) gate row l / 2 for even l and up
// row ff + l / 2 for odd l, so that the rows of a warp task (an even number)
// give both halves of their outputs.
template <bool SILU> static __device__ __forceinline__ int qgemv_w_row(int l, int n)
{
    return SILU ? (l & 1) * (n >> 1) + (l >> 1) : l;
}

// Queues rows l0 .. l0 + r - 1 (kernel rows, qgemv_w_row) of W into L2: the
// whole 16-byte lines inside each run of rows that lie together.
template <bool SILU>
static __device__ __forceinline__ void qgemv_prefetch_rows(const uint8_t *w, int64_t w_pitch,
                                                           int l0, int r, int n)
{
    r = min(r, n - l0);
    for (int i = 0; i < (SILU ? r : 1); i++) {
        const uintptr_t a = (uintptr_t)(w + (int64_t)qgemv_w_row<SILU>(l0 + i, n) * w_pitch);
        const uintptr_t e = a + (uintptr_t)((SILU ? 1 : r) * w_pitch);
        const uintptr_t a16 = (a + 15) & ~(uintptr_t)15, e16 = e & ~(uintptr_t)15;
        if (e16 > a16)
            cuda_prefetch_l2((const void *)a16, (uint32_t)(e16 - a16));
    }
}

// Writes a warp task's R row sums (lane 0's after cuda_warp_sum), scaled by
// the norm's scale: dst[row0 + r] (+ bias), or with SILU silu(gate) * up of
// each pair of rows into dst[(row0 + r) / 2].
template <int R, bool SILU>
static __device__ __forceinline__ void qgemv_write_rows(float *dst, const float (&acc)[R],
                                                        float nscale, int row0, int n,
                                                        const void *bias, int bias_type, int lane)
{
    float sum[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        sum[r] = cuda_warp_sum(acc[r]) * nscale;
    if (lane != 0)
        return;
    if constexpr (SILU) {
        static_assert(R % 2 == 0, "SILU pairs rows");
#pragma unroll
        for (int r = 0; r < R; r += 2)
            if (row0 + r + 1 < n)
                dst[(row0 + r) / 2] = sum[r] / (1.0f + expf(-sum[r])) * sum[r + 1];
    } else {
#pragma unroll
        for (int r = 0; r < R; r++)
            if (row0 + r < n)
                dst[row0 + r] = bias ? sum[r] + cuda_bias_at(bias, bias_type, row0 + r) : sum[r];
    }
}

// Units u0, u0 + 32, ... (UNROLL of them) of rows row0 .. row0 + R - 1 into
// wu; units past the row or rows past n are left as they are (never used).
template <int T, int R, int UNROLL, bool SILU>
static __device__ __forceinline__ void
qgemv_direct_load(const uint8_t *w, int64_t w_pitch, const uint8_t *w_end, int n, int units,
                  int row0, int u0, struct qdot_unit (*wu)[R])
{
    using Q = q_unit<T>;
#pragma unroll
    for (int j = 0; j < UNROLL; j++) {
        const int u = u0 + j * CUDA_WARP;
#pragma unroll
        for (int r = 0; r < R; r++)
            if (u < units && row0 + r < n)
                q_direct<T>::load(w + (int64_t)qgemv_w_row<SILU>(row0 + r, n) * w_pitch +
                                      (int64_t)(u / Q::units) * q_fmt<T>::bytes,
                                  u % Q::units, w_end, &wu[j][r]);
    }
}

// dst [n] = x [k] . W^T without staging W in shared memory: a lane takes
// units lane, lane + 32, ... of R rows at a time and reads each straight into
// registers (q_direct), two units a lane loaded before any is used. Only the
// activations (16-bit, quantized once per block as in qgemv_packed_kernel)
// come from shared memory, and each activation load serves the R rows.
// NORM: NORM_MATMUL's norm in the activations' quantization (qgemv_quantize_x);
// SILU: W is gate|up and dst [n / 2] the SiLU-mul of its halves: a warp task
// is 2 R rows (gate and up rows alternate, qgemv_w_row) taken in two passes
// of R rows, so that registers stay those of R rows.
template <int T, int R, bool NORM, bool SILU>
static __global__ void __launch_bounds__(QGEMV_P_WARPS *CUDA_WARP)
    qgemv_direct_kernel(float *dst, const float *x, const uint8_t *w, int64_t w_pitch,
                        const void *bias, int bias_type, int n, int k, int64_t prefetch, bool early,
                        struct cuda_norm_in nin)
{
    __shared__ float red[NORM ? 32 : 1];
    using Q = q_unit<T>;
    constexpr int UW = 32 * Q::subs, UNROLL = 2;
    constexpr int P = SILU ? 2 : 1, TR = P * R; // passes and rows a task
    extern __shared__ uint4 qgemv_smem[];
    const int warp = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int kx = qdot_x_elems(k, UW), n_sub = k / 32, units = k / UW;
    const int n_warps = (int)gridDim.x * QGEMV_P_WARPS;
    int16_t *xq = (int16_t *)qgemv_smem;
    float *xd = (float *)(xq + kx);
    float *xs = xd + n_sub;
    const uint8_t *w_end = w + (int64_t)n * w_pitch;
    const int row_first = ((int)blockIdx.x * QGEMV_P_WARPS + warp) * TR; // the warp's first task
    // The first `prefetch` bytes of W go to L2 while the kernel before this
    // one finishes: lane 0 of each warp queues its own tasks' rows, in the
    // order the loop below takes them, the whole 16-byte lines inside each.
    if (lane == 0)
        for (int r0 = row_first; r0 < n && (int64_t)r0 * w_pitch < prefetch; r0 += n_warps * TR)
            qgemv_prefetch_rows<SILU>(w, w_pitch, r0, TR, n);
    // The warp's first units, loaded before the wait and the activations'
    // quantization when early (cuda_common.cuh); `early` stays true until the
    // loop below has used them.
    struct qdot_unit wu[UNROLL][R];
    early = early && row_first < n && lane < units;
    if (early)
        qgemv_direct_load<T, R, UNROLL, SILU>(w, w_pitch, w_end, n, units, row_first, lane, wu);
    cuda_pdl_sync();
    const float nscale = qgemv_quantize_x<1, QGEMV_P_WARPS * CUDA_WARP, NORM>(x, 0, k, UW, xq, kx,
                                                                              xd, xs, &nin, red);
    __syncthreads();

    for (int task0 = row_first; task0 < n; task0 += n_warps * TR) {
        float acc[TR]; // row task0 + i at i
#pragma unroll
        for (int i = 0; i < TR; i++)
            acc[i] = 0.0f;
#pragma unroll
        for (int pass = 0; pass < P; pass++) {
            const int row0 = task0 + pass * R;
            for (int u0 = lane; u0 < units; u0 += UNROLL * CUDA_WARP) {
                if (!early)
                    qgemv_direct_load<T, R, UNROLL, SILU>(w, w_pitch, w_end, n, units, row0, u0,
                                                          wu);
                early = false;
#pragma unroll
                for (int j = 0; j < UNROLL; j++) {
                    const int u = u0 + j * CUDA_WARP;
                    if (u >= units)
                        break;
                    uint32_t xw[16 * Q::subs];
                    qgemv_x_unit<Q::subs>(xq, UW * u, UW, xw);
#pragma unroll
                    for (int r = 0; r < R; r++)
                        if (row0 + r < n)
                            acc[pass * R + r] += qdot_unit_dot(&wu[j][r], Q::subs, xw,
                                                               xd + Q::subs * u, xs + Q::subs * u);
                }
            }
        }
        qgemv_write_rows<TR, SILU>(dst, acc, nscale, task0, n, bias, bias_type, lane);
    }
}

// ---- the lane-item GEMV (Q4_K), one token ----

// A 256-weight item that one lane reads whole, with aligned 16-byte loads,
// into registers: one Q4_K block (144 bytes, 9 loads), every byte offset
// inside it a compile-time constant, where the direct kernel's lanes read a
// 64-weight unit each and reload the block's 16-byte head for every unit.
// dot() gives the item's sum with the activations xq (the item's 256 16-bit
// values, piece p of 8 at xq + 64 p as qdot_x_offset lays out units of
// 256), their 32-block scales xd [8] and float sums xs [8].
//
// Eight Q8_0 blocks (272 bytes, 17 loads, fixed funnel shifts for the
// 2-aligned blocks) made the same kind of item, but were slower than the
// direct kernel (bench/RESULTS.md), so Q8_0 stays there.
template <int T> struct q_item {
    static constexpr bool ok = false;
};

// The words of activation piece p of the item (8 values, two to a word).
static __device__ __forceinline__ void qgemv_x_piece(const int16_t *xq, int p, uint32_t *xw)
{
    const uint4 v = *(const uint4 *)(xq + 64 * p);
    xw[0] = v.x, xw[1] = v.y, xw[2] = v.z, xw[3] = v.w;
}

// Q4_K: d, dmin (word 0), the 12 scale bytes (words 1..3), qs (words 4..35);
// sub-blocks 2 j and 2 j + 1 are the low and high nibbles of qs words
// 8 j .. 8 j + 7, with the 6-bit scales and mins of qdot_k4_scale_min.
template <> struct q_item<DTYPE_Q4_K> {
    static constexpr bool ok = true;
    static constexpr int loads = 9;
    static __device__ __forceinline__ float dot(const uint32_t *wd, const int16_t *xq,
                                                const float *xd, const float *xs)
    {
        const float d = __half2float(__ushort_as_half((unsigned short)(wd[0] & 0xffffu)));
        const float dmin = __half2float(__ushort_as_half((unsigned short)(wd[0] >> 16)));
        const auto byte = [&](int i) { return (int)((wd[1 + i / 4] >> (8 * (i % 4))) & 255u); };
        float r = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int sc = j < 4 ? byte(j) & 63 : (byte(j + 4) & 15) | ((byte(j - 4) >> 6) << 4);
            const int mn = j < 4 ? byte(j + 4) & 63 : (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
            int s = 0;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint32_t xw[8];
                qgemv_x_piece(xq, 4 * j + 2 * h, xw);
                qgemv_x_piece(xq, 4 * j + 2 * h + 1, xw + 4);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const uint32_t v = wd[4 + 8 * (j / 2) + 4 * h + i];
                    const uint32_t q = (j % 2 ? v >> 4 : v) & 0x0F0F0F0Fu;
                    s = __dp2a_lo((int)xw[2 * i], (int)q, s);
                    s = __dp2a_hi((int)xw[2 * i + 1], (int)q, s);
                }
            }
            r += xd[j] * (d * (float)sc) * (float)s - dmin * (float)mn * xs[j];
        }
        return r;
    }
};

#define QGEMV_L_WARPS 16 // warps per block of the lane-item GEMV (one block an SM)

// dst [n] = x [k] . W^T, one token, k a multiple of 256, W and its rows
// 16-aligned. A warp task is R rows (qgemv_lane_rows); lane l of pass p
// takes item 32 p + l of the task's rows laid end to end, so a pass asks for
// 32 items (4.6 KB of Q4_K) at once. The block quantizes x into shared
// memory as the direct kernel does (uw 256) while the first pass's loads are
// in flight.
template <int T, int R, bool NORM, bool SILU>
static __global__ void __launch_bounds__(QGEMV_L_WARPS *CUDA_WARP, 1)
    qgemv_lane_kernel(float *dst, const float *x, const uint8_t *w, int64_t w_pitch,
                      const void *bias, int bias_type, int n, int k, int64_t prefetch, bool early,
                      struct cuda_norm_in nin)
{
    static_assert(!SILU || R % 2 == 0, "SILU pairs rows");
    __shared__ float red[NORM ? 32 : 1];
    using Q = q_item<T>;
    constexpr int ITEM_BYTES = q_fmt<T>::bytes;
    static_assert(Q::loads * 16 == ITEM_BYTES && q_fmt<T>::elems == 256,
                  "an item is one 256-weight block of whole 16-byte pieces");
    extern __shared__ uint4 qgemv_smem[];
    const int warp = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int kx = qdot_x_elems(k, 256), n_sub = k / 32, items = k / 256;
    const int per_task = R * items, n_tasks = (n + R - 1) / R;
    const int n_warps = (int)gridDim.x * QGEMV_L_WARPS;
    int16_t *xq = (int16_t *)qgemv_smem;
    float *xd = (float *)(xq + kx);
    float *xs = xd + n_sub;
    const int task_first = (int)blockIdx.x * QGEMV_L_WARPS + warp;
    if (lane == 0)
        for (int t = task_first; t < n_tasks && (int64_t)t * R * w_pitch < prefetch; t += n_warps)
            qgemv_prefetch_rows<SILU>(w, w_pitch, t * R, R, n);
    // Item i of task t: item i % items of row t R + i / items (a row past n
    // stays unread).
    const auto item_load = [&](int t, int i, uint4 *v) {
        const int row = t * R + i / items;
        if (row < n) {
            const uint4 *p = (const uint4 *)(w + (int64_t)qgemv_w_row<SILU>(row, n) * w_pitch +
                                             (int64_t)(i % items) * ITEM_BYTES);
#pragma unroll
            for (int j = 0; j < Q::loads; j++)
                v[j] = __ldcs(p + j);
        }
    };
    uint4 v[Q::loads];
    early = early && task_first < n_tasks && lane < per_task;
    if (early)
        item_load(task_first, lane, v);
    cuda_pdl_sync();
    const float nscale = qgemv_quantize_x<1, QGEMV_L_WARPS * CUDA_WARP, NORM>(x, 0, k, 256, xq, kx,
                                                                              xd, xs, &nin, red);
    __syncthreads();

    for (int t = task_first; t < n_tasks; t += n_warps) {
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[r] = 0.0f;
        for (int i = lane; i < per_task; i += CUDA_WARP) {
            if (!early)
                item_load(t, i, v);
            early = false;
            const int row_in = i / items, it = i % items;
            if (t * R + row_in >= n)
                continue;
            const float s = Q::dot((const uint32_t *)v, xq + (it / 8) * 32 * 64 + (it % 8) * 8,
                                   xd + 8 * it, xs + 8 * it);
#pragma unroll
            for (int r = 0; r < R; r++)
                if (r == row_in)
                    acc[r] += s;
        }
        qgemv_write_rows<R, SILU>(dst, acc, nscale, t * R, n, bias, bias_type, lane);
    }
}

// out rows [n_rows, k] (f32 or bf16, dense pitch out_pitch elements) from
// packed rows; rows[] picks table rows (embedding), or NULL for 0..n_rows-1.
// A row id outside the table gives zeros.
template <int T, typename TO>
static __global__ void qdequant_kernel(TO *out, int64_t out_pitch, const uint8_t *w,
                                       int64_t w_pitch, int64_t n_table, const int32_t *rows,
                                       int k)
{
    constexpr int SUBS = q_fmt<T>::elems / 32;
    const int64_t r = blockIdx.x;
    const int64_t src = rows ? rows[r] : r;
    const int n_subs = k / 32;
    const int s = blockIdx.y * blockDim.x + threadIdx.x;
    if (s >= n_subs)
        return;
    TO *o = out + r * out_pitch + (int64_t)s * 32;
    float v[32];
    if (src < 0 || src >= n_table) {
#pragma unroll
        for (int l = 0; l < 32; l++)
            v[l] = 0.0f;
    } else {
        q_fmt<T>::sub(w + src * w_pitch + (int64_t)(s / SUBS) * q_fmt<T>::bytes, s % SUBS, v);
    }
#pragma unroll
    for (int l = 0; l < 32; l++)
        o[l] = cuda_from_f32<TO>(v[l]);
}

// ---- launchers ----

// Tokens t0 .. t0 + M - 1 of the call.
template <int T, int M>
static void qgemv_launch_m(const struct op_call *c, int64_t t0, cudaStream_t stream)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2];
    const int n = (int)w->ne[1];
    const int64_t x_pitch = cuda_row_pitch(x), dst_pitch = cuda_row_pitch(c->dst);
    cuda_launch(qgemv_kernel<T, M>, (unsigned)((n + QGEMV_WARPS - 1) / QGEMV_WARPS),
                QGEMV_WARPS * CUDA_WARP, 0, stream, (float *)c->dst->data + t0 * dst_pitch,
                dst_pitch, (const float *)x->data + t0 * x_pitch, x_pitch, (const uint8_t *)w->data,
                (int64_t)w->nb[1], b ? b->data : nullptr, b ? (int)b->dtype : (int)DTYPE_F32, n,
                (int)x->ne[0]);
}

// Which decode GEMV applies (VLLMC_CUDA_QGEMV): 0 the byte-loading kernel,
// 1 the packed one, 2 (default) the direct one for Q4_K, Q6_K and Q8_0 at
// one token (else the packed one), 3 the same with two rows a warp. Under 2
// one token's Q4_K rows take the lane-item kernel instead (qgemv_lane).
static int qgemv_mode = 2;

extern "C" void cuda_qgemv_set_mode(int mode)
{
    qgemv_mode = mode;
}

// Resident blocks per SM of one packed-GEMV instance by shared-memory size (a
// model has few row lengths), and the size its limit was raised to. Filled
// on the engine thread, before a graph captures the shape.
struct qgemv_occupancy {
    size_t smem_raised;
    size_t smem[8];
    int blocks[8];
    int n;
};

template <typename K>
static cudaError_t qgemv_occupancy_get(K kernel, size_t smem, struct qgemv_occupancy *o,
                                       int *blocks, int threads = QGEMV_P_WARPS * CUDA_WARP)
{
    for (int i = 0; i < o->n; i++) {
        if (o->smem[i] == smem) {
            *blocks = o->blocks[i];
            return cudaSuccess;
        }
    }
    cudaError_t rc;
    if (smem > 48 * 1024 && smem > o->smem_raised) {
        rc = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (rc != cudaSuccess)
            return rc;
        o->smem_raised = smem;
    }
    int nb = 0;
    rc = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kernel, threads, smem);
    if (rc != cudaSuccess)
        return rc;
    *blocks = nb > 0 ? nb : 1;
    const int i = o->n < 8 ? o->n++ : 7;
    o->smem[i] = smem;
    o->blocks[i] = *blocks;
    return cudaSuccess;
}

// Blocks of a GEMV launch over n rows, rows_per_block a block: no more than
// are resident at once (per_sm a multiprocessor), since each block quantizes
// x once and then loops over its rows.
static unsigned qgemv_grid(const struct cuda_device *dev, int per_sm, int n,
                           int64_t rows_per_block)
{
    const int64_t want = ((int64_t)n + rows_per_block - 1) / rows_per_block;
    const int64_t most = (int64_t)dev->n_sms * per_sm;
    return (unsigned)(want < most ? want : most);
}

// The packed GEMV takes M tokens of the call when its type has a unit
// decoder, W is 16-aligned (its rows as aligned as their blocks' size allows)
// and x fits the block's shared memory.
template <int T> static bool qgemv_packed_ok(const struct op_call *c, int m, const struct cuda_device *dev)
{
    const struct tensor *w = c->src[1];
    const size_t align = q_fmt<T>::bytes % 16 == 0 ? 16 : q_fmt<T>::bytes % 8 == 0 ? 8 : q_fmt<T>::bytes % 4 == 0 ? 4 : 2;
    return q_unit<T>::ok && qgemv_mode >= 1 && (uintptr_t)w->data % 16 == 0 && w->nb[1] % align == 0 &&
           qgemv_packed_smem<T>(m, w->ne[0]) <= dev->smem_optin_bytes;
}

// Tokens t0 .. t0 + M - 1 through the packed GEMV: a block per 8 row groups, at
// most as many blocks as are resident at once (each quantizes x once).
template <int T, int M>
static enum vllmc_status qgemv_packed_launch(const struct op_call *c, int64_t t0,
                                             struct cuda_device *dev)
{
    struct err *err = dev->err;
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2];
    const int n = (int)w->ne[1], k = (int)x->ne[0];
    const int64_t x_pitch = cuda_row_pitch(x), dst_pitch = cuda_row_pitch(c->dst);
    const size_t smem = qgemv_packed_smem<T>(M, k);
    static struct qgemv_occupancy occ;
    int per_sm = 1;
    CUDA_TRY(qgemv_occupancy_get(qgemv_packed_kernel<T, M>, smem, &occ, &per_sm));
    cuda_launch(
        qgemv_packed_kernel<T, M>, qgemv_grid(dev, per_sm, n, QGEMV_P_WARPS * qgemv_rows<T>()),
        QGEMV_P_WARPS * CUDA_WARP, smem, dev->stream, (float *)c->dst->data + t0 * dst_pitch,
        dst_pitch, (const float *)x->data + t0 * x_pitch, x_pitch, (const uint8_t *)w->data,
        (int64_t)w->nb[1], b ? b->data : nullptr, b ? (int)b->dtype : (int)DTYPE_F32, n, k);
    return VLLMC_OK;
}

// Shared memory of a one-token kernel over rows of k: x's 16-bit values laid
// out for units of uw weights (qdot_x_offset), then its k / 32 scales and
// sums (qgemv_quantize_x).
static size_t qgemv_one_smem(int64_t k, int uw)
{
    return 2 * (size_t)qdot_x_elems((int)k, uw) + (size_t)k / 4;
}

template <int T> static size_t qgemv_direct_smem(int64_t k)
{
    return qgemv_one_smem(k, 32 * q_unit<T>::subs);
}

// One token through a one-token kernel (qgemv_direct_kernel or
// qgemv_lane_kernel, which take the same arguments) in blocks of `warps`
// warps: as many blocks as are resident at once, at most one for each
// per_block of the call's `units` (row groups or warp tasks).
// nin: NORM_MATMUL's norm operands for a NORM kernel (c is then the inner
// call, op_norm_matmul_inner), else NULL.
template <typename K>
static enum vllmc_status qgemv_one_launch(K kernel, struct qgemv_occupancy *occ, size_t smem,
                                          int warps, int64_t units, int64_t per_block,
                                          const struct op_call *c, int64_t t0,
                                          struct cuda_device *dev, const struct cuda_norm_in *nin)
{
    struct err *err = dev->err;
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2];
    const int n = (int)w->ne[1], k = (int)x->ne[0];
    const int64_t x_pitch = cuda_row_pitch(x), dst_pitch = cuda_row_pitch(c->dst);
    int per_sm = 1;
    CUDA_TRY(qgemv_occupancy_get(kernel, smem, occ, &per_sm, warps * CUDA_WARP));
    cuda_launch(kernel, qgemv_grid(dev, per_sm, (int)units, per_block), warps * CUDA_WARP, smem,
                dev->stream, (float *)c->dst->data + t0 * dst_pitch,
                (const float *)x->data + t0 * x_pitch, (const uint8_t *)w->data, (int64_t)w->nb[1],
                b ? b->data : nullptr, b ? (int)b->dtype : (int)DTYPE_F32, n, k,
                cuda_gemv_prefetch((int64_t)n * (int64_t)w->nb[1]), cuda_gemv_load_early,
                nin ? *nin : cuda_norm_in{});
    return VLLMC_OK;
}

template <int T, int R, bool NORM = false, bool SILU = false>
static enum vllmc_status qgemv_direct_launch(const struct op_call *c, int64_t t0,
                                             struct cuda_device *dev,
                                             const struct cuda_norm_in *nin = nullptr)
{
    static struct qgemv_occupancy occ;
    return qgemv_one_launch(qgemv_direct_kernel<T, R, NORM, SILU>, &occ,
                            qgemv_direct_smem<T>(c->src[0]->ne[0]), QGEMV_P_WARPS, c->src[1]->ne[1],
                            QGEMV_P_WARPS * R * (SILU ? 2 : 1), c, t0, dev, nin);
}

// Rows a warp task of the lane-item GEMV: the fewest (1, 2, 4, 8) whose
// items fill whole passes of 32 lanes, else the fewest that fill one pass.
static int qgemv_lane_rows(int64_t k)
{
    const int items = (int)(k / 256);
    for (int r = 1; r <= 8; r *= 2)
        if (r * items % CUDA_WARP == 0)
            return r;
    for (int r = 1; r < 8; r *= 2)
        if (r * items >= CUDA_WARP)
            return r;
    return 8;
}

// Whether one token's Q4_K rows take the lane-item GEMV (VLLMC_CUDA_QGEMV_LANE,
// default 1) where the direct one would.
static int qgemv_lane = 1;

extern "C" void cuda_qgemv_set_lane(int mode)
{
    qgemv_lane = mode;
}

template <int T> static bool qgemv_lane_ok(const struct op_call *c, const struct cuda_device *dev)
{
    const struct tensor *w = c->src[1];
    return q_item<T>::ok && qgemv_mode == 2 && qgemv_lane == 1 && w->ne[0] % 256 == 0 &&
           (uintptr_t)w->data % 16 == 0 && w->nb[1] % 16 == 0 &&
           qgemv_one_smem(w->ne[0], 256) <= dev->smem_optin_bytes;
}

template <int T, int R, bool NORM, bool SILU>
static enum vllmc_status qgemv_lane_launch_r(const struct op_call *c, int64_t t0,
                                             struct cuda_device *dev,
                                             const struct cuda_norm_in *nin)
{
    static struct qgemv_occupancy occ;
    return qgemv_one_launch(qgemv_lane_kernel<T, R, NORM, SILU>, &occ,
                            qgemv_one_smem(c->src[0]->ne[0], 256), QGEMV_L_WARPS,
                            (c->src[1]->ne[1] + R - 1) / R, QGEMV_L_WARPS, c, t0, dev, nin);
}

// SILU pairs rows, so its tasks take two rows or more.
template <int T, bool NORM = false, bool SILU = false>
static enum vllmc_status qgemv_lane_launch(const struct op_call *c, int64_t t0,
                                           struct cuda_device *dev,
                                           const struct cuda_norm_in *nin = nullptr)
{
    switch (qgemv_lane_rows(c->src[1]->ne[0])) {
    case 1:
        if constexpr (!SILU)
            return qgemv_lane_launch_r<T, 1, NORM, SILU>(c, t0, dev, nin);
        [[fallthrough]];
    case 2:
        return qgemv_lane_launch_r<T, 2, NORM, SILU>(c, t0, dev, nin);
    case 4:
        return qgemv_lane_launch_r<T, 4, NORM, SILU>(c, t0, dev, nin);
    default:
        return qgemv_lane_launch_r<T, 8, NORM, SILU>(c, t0, dev, nin);
    }
}

// The direct GEMV takes a token of the types q_direct has, W 16-aligned with
// rows as aligned as the packed GEMV asks (16 for Q4_K, 2 for the others).
template <int T>
static bool qgemv_direct_ok(const struct op_call *c, const struct cuda_device *dev)
{
    const struct tensor *w = c->src[1];
    const size_t align = q_fmt<T>::bytes % 16 == 0 ? 16 : 2;
    return q_direct<T>::ok && qgemv_mode >= 2 && (uintptr_t)w->data % 16 == 0 &&
           w->nb[1] % align == 0 && qgemv_direct_smem<T>(w->ne[0]) <= dev->smem_optin_bytes;
}

// Tokens t0 .. t0 + M - 1: the packed GEMV where it applies; where M tokens'
// activations do not fit its shared memory (long rows), 4 and M - 4 tokens
// in two passes over W, still faster than the byte-loading kernel.
template <int T, int M>
static enum vllmc_status qgemv_launch_chunk(const struct op_call *c, int64_t t0,
                                            struct cuda_device *dev)
{
    if constexpr (q_item<T>::ok && M == 1) {
        if (qgemv_lane_ok<T>(c, dev))
            return qgemv_lane_launch<T>(c, t0, dev);
    }
    if constexpr (q_direct<T>::ok && M == 1) {
        if (qgemv_direct_ok<T>(c, dev))
            return qgemv_mode == 3 ? qgemv_direct_launch<T, 2>(c, t0, dev)
                                   : qgemv_direct_launch<T, 1>(c, t0, dev);
    }
    if constexpr (q_unit<T>::ok) {
        if (qgemv_packed_ok<T>(c, M, dev))
            return qgemv_packed_launch<T, M>(c, t0, dev);
        if constexpr (M > 4) {
            if (qgemv_packed_ok<T>(c, 4, dev)) {
                enum vllmc_status rc = qgemv_packed_launch<T, 4>(c, t0, dev);
                return rc ? rc : qgemv_launch_chunk<T, M - 4>(c, t0 + 4, dev);
            }
        }
    }
    qgemv_launch_m<T, M>(c, t0, dev->stream);
    return VLLMC_OK;
}

// Every token of the call, CUDA_QGEMV_MAX_M at a time.
template <int T>
static enum vllmc_status qgemv_launch(const struct op_call *c, int64_t m, struct cuda_device *dev)
{
    enum vllmc_status rc = VLLMC_OK;
    for (int64_t t0 = 0; t0 < m && !rc; t0 += CUDA_QGEMV_MAX_M) {
        switch (m - t0) {
        case 1: rc = qgemv_launch_chunk<T, 1>(c, t0, dev); break;
        case 2: rc = qgemv_launch_chunk<T, 2>(c, t0, dev); break;
        case 3: rc = qgemv_launch_chunk<T, 3>(c, t0, dev); break;
        case 4: rc = qgemv_launch_chunk<T, 4>(c, t0, dev); break;
        case 5: rc = qgemv_launch_chunk<T, 5>(c, t0, dev); break;
        case 6: rc = qgemv_launch_chunk<T, 6>(c, t0, dev); break;
        case 7: rc = qgemv_launch_chunk<T, 7>(c, t0, dev); break;
        default: rc = qgemv_launch_chunk<T, 8>(c, t0, dev); break;
        }
    }
    return rc;
}

template <int T, typename TO>
static void qdequant_launch(TO *out, int64_t out_pitch, const struct tensor *w,
                            const int32_t *rows, int64_t n_rows, cudaStream_t stream)
{
    const int n_subs = (int)(w->ne[0] / 32);
    const dim3 grid((unsigned)n_rows, (unsigned)((n_subs + 127) / 128));
    qdequant_kernel<T, TO><<<grid, 128, 0, stream>>>(out, out_pitch, (const uint8_t *)w->data,
                                                     (int64_t)w->nb[1], tensor_n_rows(w), rows,
                                                     (int)w->ne[0]);
}

template <typename TO>
static void qdequant_any(TO *out, int64_t out_pitch, const struct tensor *w, const int32_t *rows,
                         int64_t n_rows, cudaStream_t stream)
{
    switch (w->dtype) {
#define Q_CASE(t, ...)                                                                             \
    case t: qdequant_launch<t, TO>(out, out_pitch, w, rows, n_rows, stream); break;
        Q_TYPES(Q_CASE)
#undef Q_CASE
    default: VLLMC_ASSERT(!"cuda-q: dtype outside q_type_ok"); break;
    }
}

// ---- providers ----

static bool q_type_ok(enum dtype t)
{
    switch (t) {
#define Q_CASE(t, ...) case t:
        Q_TYPES(Q_CASE)
#undef Q_CASE
        return true;
    default:
        return false;
    }
}

// W [n, k] packed, rows dense (row pitch nb[1] bytes), on the device.
static bool q_weight_ok(const struct tensor *w)
{
    return w && w->location == TENSOR_DEVICE && q_type_ok(w->dtype) &&
           tensor_rows_contiguous(w) && tensor_n_rows(w) == w->ne[1] &&
           w->ne[0] % dtype_info(w->dtype)->block_size == 0;
}

// x [m, k] f32 . W^T into dst [m, dst_cols] f32 (W's n rows, or n / 2 for
// the SiLU-mul of a gate|up W), with an optional float bias [n].
static bool q_matmul_shape_ok(const struct op_call *c, int64_t dst_cols)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2];
    if (!q_weight_ok(w) || !cuda_tensor_rows_ok(x, DTYPE_F32) ||
        !cuda_tensor_rows_ok(c->dst, DTYPE_F32))
        return false;
    if (b && (!cuda_dtype_is_float(b->dtype) || !cuda_tensor_dense_ok(b, b->dtype) ||
              tensor_n_elements(b) != w->ne[1]))
        return false;
    return w->ne[0] == x->ne[0] && c->dst->ne[0] == dst_cols &&
           tensor_n_rows(c->dst) == tensor_n_rows(x) && w->ne[1] <= INT32_MAX &&
           x->ne[0] <= INT32_MAX && (uintptr_t)x->data % 16 == 0 && x->nb[1] % 16 == 0;
}

static bool q_matmul_ok(const struct op_call *c)
{
    return c->op == OP_MATMUL && c->src[1] && q_matmul_shape_ok(c, c->src[1]->ne[1]);
}

// Up to CUDA_QGEMV_MAX_M tokens; more only where the dequantizing GEMM's
// alignment gate declines the call (e.g. an odd n makes dst rows unaligned),
// run CUDA_QGEMV_MAX_M tokens per launch.
extern "C" bool cuda_qgemv_supports(const struct op_call *c)
{
    const int64_t m = tensor_n_rows(c->src[0]);
    return q_matmul_ok(c) && m >= 1 && (m <= CUDA_QGEMV_MAX_M || !cuda_qgemm_supports(c));
}

extern "C" enum vllmc_status cuda_qgemv_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const int64_t m = tensor_n_rows(c->src[0]);
    if (m == 0 || c->src[1]->ne[1] == 0)
        return VLLMC_OK;
    enum vllmc_status rc = VLLMC_OK;
    switch (c->src[1]->dtype) {
#define Q_CASE(t, ...)                                                                             \
    case t: rc = qgemv_launch<t>(c, m, dev); break;
        Q_TYPES(Q_CASE)
#undef Q_CASE
    default: VLLMC_ASSERT(!"cuda-qgemv: dtype outside q_type_ok"); break;
    }
    if (rc)
        return rc;
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}

extern "C" bool cuda_qgemm_supports(const struct op_call *c)
{
    return q_matmul_ok(c) && c->src[0]->ne[0] % 8 == 0 && (uintptr_t)c->dst->data % 16 == 0 &&
           c->dst->nb[1] % 16 == 0;
}

// W is dequantized to bf16 into the first part of the scratch; the
// activations' bf16 copy for cuBLASLt follows it.
extern "C" enum vllmc_status cuda_qgemm_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct tensor *w = c->src[1];
    const int64_t m = tensor_n_rows(c->src[0]), n = w->ne[1], k = w->ne[0];
    if (m == 0 || n == 0)
        return VLLMC_OK;
    void *scratch = nullptr;
    enum vllmc_status rc = cuda_matmul_lt_bf16_scratch(c, &scratch);
    if (rc)
        return rc;
    qdequant_any<__nv_bfloat16>((__nv_bfloat16 *)scratch, k, w, nullptr, n, dev->stream);
    CUDA_TRY_LAUNCH();
    return cuda_matmul_lt_bf16(c, scratch);
}

// ---- NORM_MATMUL at one token: the norm (and the SiLU-mul) in the one-token kernels ----

// Whether W's type and layout take a one-token kernel (the lane-item or the
// direct one, as qgemv_launch_chunk picks) for the inner call mm. Q8_0's
// direct kernel takes the norm only with the SiLU-mul: before a plain
// projection (the 8B shape's q|k|v, 6144 rows, 528 blocks that each repeat
// the norm for ~12 rows) it made decode slower than the norm kernel (H100,
// 8B Q8_0 tg128: 239.0-239.9 -> 230.0-230.6 tok/s; bench/RESULTS.md).
template <int T>
static bool qgemv_norm_ok(const struct op_call *mm, bool silu, const struct cuda_device *dev)
{
    if constexpr (q_item<T>::ok) {
        if (qgemv_lane_ok<T>(mm, dev))
            return true;
    }
    if constexpr (q_direct<T>::ok)
        return (silu || T != DTYPE_Q8_0) && qgemv_direct_ok<T>(mm, dev);
    return false;
}

template <int T, bool SILU>
static enum vllmc_status qgemv_norm_launch(const struct op_call *mm, struct cuda_device *dev,
                                           const struct cuda_norm_in *nin)
{
    if constexpr (q_item<T>::ok) {
        if (qgemv_lane_ok<T>(mm, dev))
            return qgemv_lane_launch<T, true, SILU>(mm, 0, dev, nin);
    }
    if constexpr (!q_direct<T>::ok) {
        VLLMC_ASSERT(!"cuda-norm-qgemv: no one-token kernel for the type");
        return VLLMC_OK;
    } else {
        return qgemv_mode == 3 ? qgemv_direct_launch<T, 2, true, SILU>(mm, 0, dev, nin)
                               : qgemv_direct_launch<T, 1, true, SILU>(mm, 0, dev, nin);
    }
}

// One token of packed W after its norm: the inner projection (op.h,
// op_norm_matmul_inner) as cuda-qgemv would run it, with the norm's operands
// (cuda_norm_in_ok); with silu_mul, W [2 ff, k] and dst [1, ff].
extern "C" bool cuda_norm_qgemv_supports(const struct op_call *c)
{
    if (!cuda_norm_in_ok(c))
        return false;
    struct op_call mm = op_norm_matmul_inner(c, c->src[0]);
    const struct tensor *w = mm.src[1];
    if (!w || !q_matmul_shape_ok(&mm, c->p.silu_mul ? w->ne[1] / 2 : w->ne[1]) ||
        (c->p.silu_mul && w->ne[1] % 2 != 0) || tensor_n_rows(mm.src[0]) != 1)
        return false;
    const struct cuda_device *dev = cuda_device_of(c);
    switch (w->dtype) {
#define Q_CASE(t, ...)                                                                             \
    case t:                                                                                        \
        return qgemv_norm_ok<t>(&mm, c->p.silu_mul, dev);
        Q_TYPES(Q_CASE)
#undef Q_CASE
    default:
        return false;
    }
}

extern "C" enum vllmc_status cuda_norm_qgemv_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct op_call mm = op_norm_matmul_inner(c, c->src[0]);
    if (mm.src[1]->ne[1] == 0)
        return VLLMC_OK;
    const struct cuda_norm_in nin = cuda_norm_in_of(c);
    enum vllmc_status rc = VLLMC_OK;
    switch (mm.src[1]->dtype) {
#define Q_CASE(t, ...)                                                                             \
    case t:                                                                                        \
        rc = c->p.silu_mul ? qgemv_norm_launch<t, true>(&mm, dev, &nin)                            \
                           : qgemv_norm_launch<t, false>(&mm, dev, &nin);                          \
        break;
        Q_TYPES(Q_CASE)
#undef Q_CASE
    default:
        VLLMC_ASSERT(!"cuda-norm-qgemv: dtype outside q_type_ok");
        break;
    }
    if (rc)
        return rc;
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}

extern "C" bool cuda_qembedding_supports(const struct op_call *c)
{
    const struct tensor *d = c->dst, *t = c->src[0], *ids = c->src[1];
    return c->op == OP_EMBEDDING && cuda_tensor_rows_ok(d, DTYPE_F32) && q_weight_ok(t) &&
           cuda_tensor_dense_ok(ids, DTYPE_I32) && t->ne[0] == d->ne[0] &&
           tensor_n_elements(ids) == tensor_n_rows(d) && tensor_n_rows(d) <= INT32_MAX;
}

extern "C" enum vllmc_status cuda_qembedding_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const int64_t n = tensor_n_rows(c->dst);
    if (n == 0)
        return VLLMC_OK;
    qdequant_any<float>((float *)c->dst->data, cuda_row_pitch(c->dst), c->src[0],
                        (const int32_t *)c->src[1]->data, n, dev->stream);
    CUDA_TRY_LAUNCH();
    return VLLMC_OK;
}
