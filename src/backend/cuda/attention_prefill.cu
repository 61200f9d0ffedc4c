// Paged causal attention on tensor cores for calls with many query tokens
// (prefill, and chunked prefill mixed with decodes), FlashAttention-2 style:
// a warp owns 16 query rows and keeps S = Q.K^T, the online-softmax state and
// O in registers (mma.sync m16n8k16, f16/bf16 operands, f32 accumulation).
// Grids too small for the GPU split the keys (split-K) and merge. Decode-only
// calls stay on attention.cu's kernels.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/mma.cuh"

#define TC_WARPS 4
#define TC_THREADS (TC_WARPS * CUDA_WARP)
#define TC_ROWS (TC_WARPS * 16) // query rows per block: tokens x heads of one KV group
#define TC_KT 64                // keys per shared-memory tile
#define TC_PAD 8                // row padding (elements) that keeps fragment reads conflict-free

// The gate's threshold on query tokens per sequence. Below it the kernels of
// attention.cu are the better choice: decode-only calls (one query per
// sequence) have their own bandwidth-bound split-K kernel there, and for a
// handful of queries (speculative verification, a prompt's last short chunk)
// the tiled CUDA-core kernel's 16-row tiles waste less than this kernel's 64
// rows. From 16 tokens on, a sequence fills at least one m16 row fragment even
// without GQA, the score and P.V products dominate, and tensor cores win.
#define TC_MIN_Q_LEN 16

struct tc_params {
    float *dst; // [n_tokens, n_heads, head_dim], token stride dst_stride
    int64_t dst_stride;
    const float *q; // [n_tokens, n_heads, head_dim], token stride q_stride
    int64_t q_stride;
    const void *k_cache; // [n_blocks, block_size, n_kv_heads, head_dim]
    const void *v_cache;
    const int32_t *block_tables; // [n_seqs, bt_stride]
    int64_t bt_stride;
    const int32_t *seq_lens; // [n_seqs]
    const int32_t *q_start;  // [n_seqs + 1]
    int n_kv_heads, block_size;
    int group;        // n_heads / n_kv_heads
    int hc;           // heads of the group per block (divides group)
    int qt;           // tokens per block (hc * qt <= TC_ROWS)
    int n_hchunks;    // group / hc
    float scale_log2; // scale * log2(e): scores are kept in base 2
    int n_heads;
    int64_t n_tokens;
    int n_splits, split_len; // keys per split (multiple of TC_KT)
    float *part_o;           // [n_splits, n_tokens, n_heads, head_dim] when n_splits > 1
    float *part_ml;          // [n_splits, n_tokens, n_heads, 2]: max (base 2), sum
    __nv_bfloat16 *split_hi; // when set, dst's bf16 terms too (cuda_split_begin_rows):
    int64_t split_lo_off;    // [n_tokens, n_heads x D] at split_hi, lo at + split_lo_off
};

// Eight cache elements (16-byte aligned) as eight operands in one uint4.
template <typename TC, typename OT> __device__ __forceinline__ uint4 tc_load8(const TC *src)
{
    float f[8];
    if constexpr (sizeof(TC) == 4) {
        cuda_widen16(*(const uint4 *)src, f, (const TC *)nullptr);
        cuda_widen16(*(const uint4 *)(src + 4), f + 4, (const TC *)nullptr);
    } else {
        cuda_widen16(*(const uint4 *)src, f, (const TC *)nullptr);
    }
    uint4 u;
    u.x = tc_pack<OT>(f[0], f[1]);
    u.y = tc_pack<OT>(f[2], f[3]);
    u.z = tc_pack<OT>(f[4], f[5]);
    u.w = tc_pack<OT>(f[6], f[7]);
    return u;
}

// ---- asynchronous tile copies (the ldmatrix variant, f16/bf16 caches) ----

// Whether a kernel variant double-buffers its K/V tiles with cp.async: only
// the ldmatrix one, and only when the cache already holds the operand type.
template <typename TC, bool LDSM> __host__ __device__ constexpr bool tc_pipelined()
{
    return LDSM && sizeof(TC) == 2;
}

// Element offset in a paged cache [n_blocks, block_size, n_kv_heads, D] of
// dims 8c..8c+7 of key kp of KV head kvh (bt: the sequence's block table).
template <int D>
__device__ __forceinline__ int64_t tc_kv_offset(const int32_t *bt, int block_size, int64_t kv_row,
                                                int kvh, int kp, int c)
{
    return ((int64_t)bt[kp / block_size] * block_size + kp % block_size) * kv_row +
           (int64_t)kvh * D + c * 8;
}

// Queues the copy of keys kt0..kt0+TC_KT-1 of one KV head (zeros from
// k_end on) into kdst, vdst [TC_KT][D + TC_PAD]; each thread its share.
template <typename TC, int D>
__device__ __forceinline__ void tc_copy_tile(uint16_t *kdst, uint16_t *vdst, const TC *kc,
                                             const TC *vc, const int32_t *bt, int block_size,
                                             int64_t kv_row, int kvh, int kt0, int k_end)
{
    constexpr int LDS = D + TC_PAD;
    for (int e = (int)threadIdx.x; e < TC_KT * D / 8; e += TC_THREADS) {
        const int j = e / (D / 8), c = e % (D / 8), kp = kt0 + j;
        const bool valid = kp < k_end;
        const TC *ksrc = kc, *vsrc = vc; // a zero fill reads nothing, any address will do
        if (valid) {
            const int64_t off = tc_kv_offset<D>(bt, block_size, kv_row, kvh, kp, c);
            ksrc = kc + off;
            vsrc = vc + off;
        }
        tc_cp_async16(kdst + j * LDS + c * 8, ksrc, valid);
        tc_cp_async16(vdst + j * LDS + c * 8, vsrc, valid);
    }
}

// f32 caches, staged: each thread queues the raw f32 rows of its share of
// keys kt0..kt0+TC_KT-1 (zeros from k_end on) into its own slots of the
// staging area stage [K, V][TC_KT * D / 8][8] floats (slot e: key e / (D / 8),
// dims 8 (e % (D / 8))..+7), and later converts exactly those slots, so the
// copies need no barrier of their own: cp.async.wait_group makes a thread's
// copies visible to itself.
template <int D>
__device__ __forceinline__ void tc_stage_tile(float *stage, const float *kc, const float *vc,
                                              const int32_t *bt, int block_size, int64_t kv_row,
                                              int kvh, int kt0, int k_end)
{
    constexpr int SLOTS = TC_KT * D / 8;
    for (int e = (int)threadIdx.x; e < SLOTS; e += TC_THREADS) {
        const int j = e / (D / 8), c = e % (D / 8), kp = kt0 + j;
        const bool valid = kp < k_end;
        const float *ksrc = kc, *vsrc = vc;
        if (valid) {
            const int64_t off = tc_kv_offset<D>(bt, block_size, kv_row, kvh, kp, c);
            ksrc = kc + off;
            vsrc = vc + off;
        }
        uint16_t *kd = (uint16_t *)(stage + e * 8), *vd = (uint16_t *)(stage + (SLOTS + e) * 8);
        tc_cp_async16(kd, ksrc, valid);
        tc_cp_async16(kd + 8, ksrc + 4, valid);
        tc_cp_async16(vd, vsrc, valid);
        tc_cp_async16(vd + 8, vsrc + 4, valid);
    }
}

// This thread's staged slots as OT operands in the K and V tiles.
template <typename OT, int D>
__device__ __forceinline__ void tc_unstage_tile(uint16_t *ks, uint16_t *vs, const float *stage)
{
    constexpr int LDS = D + TC_PAD, SLOTS = TC_KT * D / 8;
    for (int e = (int)threadIdx.x; e < SLOTS; e += TC_THREADS) {
        const int j = e / (D / 8), c = e % (D / 8);
        uint4 kw, vw;
        kw = tc_load8<float, OT>(stage + e * 8);
        vw = tc_load8<float, OT>(stage + (SLOTS + e) * 8);
        *(uint4 *)&ks[j * LDS + c * 8] = kw;
        *(uint4 *)&vs[j * LDS + c * 8] = vw;
    }
}

__device__ __forceinline__ void tc_cp_async_wait_all()
{
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

// ---- the kernel ----

// One block per (query tile, head chunk of a KV group and sequence, key
// split). Its TC_ROWS rows are tokens x heads (row r: token r / hc, head
// r % hc of the chunk), so every K/V tile read from the paged cache serves the
// whole GQA group. Warp w owns rows 16w..16w+15; lane (g, t) holds rows g and
// g + 8. With several splits each block writes its unnormalised partial state
// (an empty split included) for att_tc_combine_kernel.
// STAGE (f32 caches only): the next tile's raw rows are copied into a
// staging area with cp.async while the warps compute on this one, instead of
// every thread loading, converting and storing its share before the compute.
template <typename TC, typename OT, int D, bool LDSM, bool STAGE>
static __global__ void __launch_bounds__(TC_THREADS) att_tc_kernel(const struct tc_params p)
{
    constexpr int LDS = D + TC_PAD;   // shared row stride in elements
    constexpr int TILE = TC_KT * LDS; // elements of one K or V tile
    constexpr bool PIPE = tc_pipelined<TC, LDSM>();
    static_assert(!STAGE || sizeof(TC) == 4, "only f32 caches are staged");
    __shared__ __align__(16) uint16_t ks_one[PIPE ? 8 : TILE]; // [TC_KT][D]: keys of the tile
    __shared__ __align__(16) uint16_t vs_one[PIPE ? 8 : TILE]; // [TC_KT][D]: values
    // PIPE: [2][K, V][TC_KT][D] 16-bit; STAGE: [K, V][TC_KT * D] f32 (tc_stage_tile)
    extern __shared__ __align__(16) uint16_t tc_stages[];

    cuda_pdl_sync(); // launched by cuda_launch: the q, K and V writers may still drain
    // Tiles late in a sequence see the most keys: start them first.
    const int tile = (int)(gridDim.x - 1 - blockIdx.x);
    const int seq = (int)blockIdx.y / (p.n_kv_heads * p.n_hchunks);
    const int rest = (int)blockIdx.y % (p.n_kv_heads * p.n_hchunks);
    const int kvh = rest / p.n_hchunks, hchunk = rest % p.n_hchunks;
    const int q0 = p.q_start[seq];
    const int q_len = p.q_start[seq + 1] - q0;
    if (tile * p.qt >= q_len)
        return;
    const int pos0 = p.seq_lens[seq] - q_len + tile * p.qt; // position of the tile's first token
    const int tile_tokens = min(p.qt, q_len - tile * p.qt);
    const int n_rows = tile_tokens * p.hc;
    // Keys some row of the tile sees, cut to this block's split.
    const int k_begin = (int)blockIdx.z * p.split_len;
    const int k_end = min(pos0 + tile_tokens, k_begin + p.split_len);

    const int lane = (int)threadIdx.x % CUDA_WARP, warp = (int)threadIdx.x / CUDA_WARP;
    const int g = lane >> 2, t = lane & 3;
    // The warp's last valid row bounds the keys it needs; a warp without rows
    // only helps load.
    const bool warp_rows = warp * 16 < n_rows;
    const int warp_last_pos = pos0 + (min(warp * 16 + 15, n_rows - 1)) / p.hc;

    // This lane's two rows: the last key each sees in this split (-1 for
    // padding: none), token, head.
    bool valid[2];
    int lim[2];
    int64_t tok[2];
    int head[2];
    for (int i = 0; i < 2; i++) {
        const int r = warp * 16 + g + 8 * i;
        valid[i] = r < n_rows;
        lim[i] = valid[i] ? min(pos0 + r / p.hc, k_end - 1) : -1;
        tok[i] = (int64_t)q0 + tile * p.qt + r / p.hc;
        head[i] = kvh * p.group + hchunk * p.hc + r % p.hc;
    }

    // Q as A fragments for the whole head, pre-scaled into base-2 logits.
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float2 v = make_float2(0.0f, 0.0f);
                if (valid[i])
                    v = *(const float2 *)(p.q + tok[i] * p.q_stride + (int64_t)head[i] * D +
                                          kk * 16 + 8 * h + 2 * t);
                qf[kk][i + 2 * h] = tc_pack<OT>(v.x * p.scale_log2, v.y * p.scale_log2);
            }
        }
    }

    float o[D / 8][4]; // O rows g, g + 8 at columns 8n + 2t, 8n + 2t + 1
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            o[n][i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}; // running max (base 2) of rows g, g + 8
    float l[2] = {0.0f, 0.0f};           // running sum over this lane's columns

    const TC *kc = (const TC *)p.k_cache, *vc = (const TC *)p.v_cache;
    const int64_t kv_row = (int64_t)p.n_kv_heads * D;
    const int32_t *bt = p.block_tables + (int64_t)seq * p.bt_stride;

    if (PIPE && k_begin < k_end) {
        tc_copy_tile<TC, D>(tc_stages, tc_stages + TILE, kc, vc, bt, p.block_size, kv_row, kvh,
                            k_begin, k_end);
        tc_cp_async_commit();
    }
    if constexpr (STAGE) {
        if (k_begin < k_end) {
            tc_stage_tile<D>((float *)tc_stages, (const float *)kc, (const float *)vc, bt,
                             p.block_size, kv_row, kvh, k_begin, k_end);
            tc_cp_async_commit();
        }
    }
    for (int kt0 = k_begin, it = 0; kt0 < k_end; kt0 += TC_KT, it++) {
        const uint16_t *ks = ks_one, *vs = vs_one;
        if constexpr (PIPE) {
            // Stage it & 1 holds this tile (copied one iteration ahead); the
            // next tile goes to the other stage, read by every warp in the
            // previous iteration, while this one is computed.
            __syncthreads();
            uint16_t *next = tc_stages + ((it + 1) & 1) * 2 * TILE;
            if (kt0 + TC_KT < k_end)
                tc_copy_tile<TC, D>(next, next + TILE, kc, vc, bt, p.block_size, kv_row, kvh,
                                    kt0 + TC_KT, k_end);
            tc_cp_async_commit();
            tc_cp_async_wait_all_but_last();
            __syncthreads();
            ks = tc_stages + (it & 1) * 2 * TILE;
            vs = ks + TILE;
        } else if constexpr (STAGE) {
            // This thread's slots of this tile have landed; once every warp
            // is done with the previous tile they become its operands, and
            // the slots take the next tile's rows during this one's compute.
            tc_cp_async_wait_all();
            __syncthreads();
            tc_unstage_tile<OT, D>(ks_one, vs_one, (const float *)tc_stages);
            if (kt0 + TC_KT < k_end) {
                tc_stage_tile<D>((float *)tc_stages, (const float *)kc, (const float *)vc, bt,
                                 p.block_size, kv_row, kvh, kt0 + TC_KT, k_end);
                tc_cp_async_commit();
            }
            __syncthreads();
        } else {
            __syncthreads(); // every warp is done with the previous tile
            // Keys past k_end are zeros: masked out of S, and 0 * V stays finite.
            for (int e = (int)threadIdx.x; e < TC_KT * D / 8; e += TC_THREADS) {
                const int j = e / (D / 8), c = e % (D / 8), kp = kt0 + j;
                uint4 kw = make_uint4(0, 0, 0, 0), vw = make_uint4(0, 0, 0, 0);
                if (kp < k_end) {
                    const int64_t off = tc_kv_offset<D>(bt, p.block_size, kv_row, kvh, kp, c);
                    kw = tc_load8<TC, OT>(kc + off);
                    vw = tc_load8<TC, OT>(vc + off);
                }
                *(uint4 *)&ks_one[j * LDS + c * 8] = kw;
                *(uint4 *)&vs_one[j * LDS + c * 8] = vw;
            }
            __syncthreads();
        }
        if (!warp_rows || kt0 > warp_last_pos)
            continue; // causal: this warp's rows see none of these keys

        // S = Q.K^T over the tile: B(d, key) = K[key][d], pairs along d.
        float s[TC_KT / 8][4];
#pragma unroll
        for (int n = 0; n < TC_KT / 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                s[n][i] = 0.0f;
        if (LDSM) {
            // One ldmatrix gives b0, b1 of key tiles 2np and 2np + 1: lane l
            // points at key 16np + l % 8 + 8 (l / 16), dims 16kk + 8 (l / 8 % 2).
#pragma unroll
            for (int np = 0; np < TC_KT / 16; np++) {
                const uint16_t *kr =
                    ks + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS + ((lane >> 3) & 1) * 8;
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) {
                    uint32_t b[4];
                    tc_ldsm4(b, kr + kk * 16);
                    tc_mma<OT>(s[2 * np], qf[kk], b[0], b[1]);
                    tc_mma<OT>(s[2 * np + 1], qf[kk], b[2], b[3]);
                }
            }
        } else {
#pragma unroll
            for (int n = 0; n < TC_KT / 8; n++) {
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) {
                    const uint16_t *kr = ks + (n * 8 + g) * LDS + kk * 16 + 2 * t;
                    tc_mma<OT>(s[n], qf[kk], *(const uint32_t *)kr, *(const uint32_t *)(kr + 8));
                }
            }
        }

        // Causal mask, then the online softmax; a row's four lanes (same g)
        // share its max through two shuffles.
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < TC_KT / 8; n++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int key = kt0 + n * 8 + 2 * t + (i & 1);
                if (key > lim[i >> 1])
                    s[n][i] = -INFINITY;
                mx[i >> 1] = fmaxf(mx[i >> 1], s[n][i]);
            }
        }
        float mu[2], alpha[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            const float m_new = fmaxf(m[i], mx[i]);
            // A row that has seen no key yet keeps exp2(-inf - 0) = 0.
            mu[i] = m_new == -INFINITY ? 0.0f : m_new;
            alpha[i] = exp2f(m[i] - mu[i]);
            m[i] = m_new;
            l[i] *= alpha[i];
        }
#pragma unroll
        for (int n = 0; n < TC_KT / 8; n++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                s[n][i] = exp2f(s[n][i] - mu[i >> 1]);
                l[i >> 1] += s[n][i];
            }
        }
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
#pragma unroll
            for (int i = 0; i < 4; i++)
                o[n][i] *= alpha[i >> 1];
        }

        // O += P.V: the C fragments of two adjacent 8-key column tiles of S
        // are exactly the A fragment of one 16-key step. B(key, d) = V[key][d],
        // pairs along the key.
#pragma unroll
        for (int kk = 0; kk < TC_KT / 16; kk++) {
            const uint32_t a[4] = {
                tc_pack<OT>(s[2 * kk][0], s[2 * kk][1]),
                tc_pack<OT>(s[2 * kk][2], s[2 * kk][3]),
                tc_pack<OT>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                tc_pack<OT>(s[2 * kk + 1][2], s[2 * kk + 1][3]),
            };
            if (LDSM) {
                // Transposed: b0, b1 of dim tiles 2np and 2np + 1; lane l points
                // at key 16kk + l % 16, dims 16np + 8 (l / 16).
                const uint16_t *vr = vs + (kk * 16 + (lane & 15)) * LDS + (lane >> 4) * 8;
#pragma unroll
                for (int np = 0; np < D / 16; np++) {
                    uint32_t b[4];
                    tc_ldsm4_trans(b, vr + np * 16);
                    tc_mma<OT>(o[2 * np], a, b[0], b[1]);
                    tc_mma<OT>(o[2 * np + 1], a, b[2], b[3]);
                }
            } else {
#pragma unroll
                for (int n = 0; n < D / 8; n++) {
                    const uint16_t *vr = vs + (kk * 16 + 2 * t) * LDS + n * 8 + g;
                    const uint32_t b0 = (uint32_t)vr[0] | (uint32_t)vr[LDS] << 16;
                    const uint32_t b1 = (uint32_t)vr[8 * LDS] | (uint32_t)vr[9 * LDS] << 16;
                    tc_mma<OT>(o[n], a, b0, b1);
                }
            }
        }
    }

    // Each lane summed its own columns; the row's sum spans its four lanes.
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (!valid[i])
            continue;
        if (p.n_splits > 1) {
            const int64_t row = ((int64_t)blockIdx.z * p.n_tokens + tok[i]) * p.n_heads + head[i];
            float *out = p.part_o + row * D + 2 * t;
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                *(float2 *)(out + n * 8) = make_float2(o[n][2 * i], o[n][2 * i + 1]);
            if (t == 0) {
                p.part_ml[row * 2] = m[i];
                p.part_ml[row * 2 + 1] = l[i];
            }
            continue;
        }
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        float *out = p.dst + tok[i] * p.dst_stride + (int64_t)head[i] * D + 2 * t;
        __nv_bfloat16 *hi =
            p.split_hi ? p.split_hi + tok[i] * (int64_t)p.n_heads * D + (int64_t)head[i] * D + 2 * t
                       : nullptr;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const float2 v = make_float2(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
            *(float2 *)(out + n * 8) = v;
            if (hi)
                cuda_split_store2(hi + n * 8, p.split_lo_off, v);
        }
    }
}

// Merges the split-K partial states: one warp per (token, head) row, lane l
// holding dims 4l..4l+3 (head_dim 64 or 128); a split that saw no key of the
// row holds max -inf and adds nothing. Splits are summed in order.
#define TC_COMBINE_ROWS 4 // warps (rows) per block
static __global__ void __launch_bounds__(TC_COMBINE_ROWS *CUDA_WARP)
    att_tc_combine_kernel(const struct tc_params p, int head_dim)
{
    cuda_pdl_sync(); // launched by cuda_launch right behind att_tc_kernel
    const int lane = (int)threadIdx.x % CUDA_WARP, D = head_dim;
    const int64_t row = (int64_t)blockIdx.x * TC_COMBINE_ROWS + (int64_t)threadIdx.x / CUDA_WARP;
    if (row >= p.n_tokens * p.n_heads)
        return;
    const int64_t split_rows = p.n_tokens * p.n_heads;
    float m = -INFINITY;
    for (int s = 0; s < p.n_splits; s++)
        m = fmaxf(m, p.part_ml[(s * split_rows + row) * 2]);
    const bool has_dims = 4 * lane < D;
    float l = 0.0f;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s = 0; s < p.n_splits; s++) {
        const int64_t r = s * split_rows + row;
        const float ms = p.part_ml[r * 2];
        if (ms == -INFINITY)
            continue;
        const float w = exp2f(ms - m);
        l += p.part_ml[r * 2 + 1] * w;
        if (has_dims) {
            const float4 v = *(const float4 *)(p.part_o + r * D + 4 * lane);
            o.x += v.x * w;
            o.y += v.y * w;
            o.z += v.z * w;
            o.w += v.w * w;
        }
    }
    if (!has_dims)
        return;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int64_t tok = row / p.n_heads;
    const int h = (int)(row % p.n_heads);
    float *out = p.dst + tok * p.dst_stride + (int64_t)h * D + 4 * lane; // 8-byte aligned
    const float4 v = make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
    *(float2 *)out = make_float2(v.x, v.y);
    *(float2 *)(out + 2) = make_float2(v.z, v.w);
    if (p.split_hi)
        cuda_split_store4(p.split_hi + tok * (int64_t)p.n_heads * D + (int64_t)h * D + 4 * lane,
                          p.split_lo_off, v);
}

// ---- launcher ----

// Launches one kernel variant; the double-buffered and the staged ones take
// their stages as dynamic shared memory, past the 48 KiB a block gets unasked
// for head_dim 128, so the limit is raised once (engine thread).
template <typename TC, typename OT, int D, bool LDSM, bool STAGE>
static cudaError_t att_tc_launch_one(const struct tc_params *p, dim3 grid, cudaStream_t stream)
{
    size_t smem = 0;
    if (tc_pipelined<TC, LDSM>())
        smem = 4 * (size_t)TC_KT * (D + TC_PAD) * sizeof(uint16_t);
    else if (STAGE)
        smem = 2 * (size_t)TC_KT * D * sizeof(float);
    if (smem) {
        static bool raised;
        if (!raised) {
            const cudaError_t rc =
                cudaFuncSetAttribute(att_tc_kernel<TC, OT, D, LDSM, STAGE>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
            if (rc != cudaSuccess)
                return rc;
            raised = true;
        }
    }
    return cuda_launch(att_tc_kernel<TC, OT, D, LDSM, STAGE>, grid, TC_THREADS, smem, stream, *p);
}

template <typename TC, typename OT, int D, bool STAGE>
static cudaError_t att_tc_launch_d(const struct tc_params *p, bool ldsm, dim3 grid,
                                   cudaStream_t stream)
{
    return ldsm ? att_tc_launch_one<TC, OT, D, true, STAGE>(p, grid, stream)
                : att_tc_launch_one<TC, OT, D, false, STAGE>(p, grid, stream);
}

template <typename TC, typename OT, bool STAGE>
static cudaError_t att_tc_launch(const struct tc_params *p, int head_dim, bool ldsm, int n_seqs,
                                 int n_tiles, cudaStream_t stream)
{
    const dim3 grid((unsigned)n_tiles, (unsigned)(n_seqs * p->n_kv_heads * p->n_hchunks),
                    (unsigned)p->n_splits);
    const cudaError_t rc = head_dim == 64
                               ? att_tc_launch_d<TC, OT, 64, STAGE>(p, ldsm, grid, stream)
                               : att_tc_launch_d<TC, OT, 128, STAGE>(p, ldsm, grid, stream);
    if (rc != cudaSuccess || p->n_splits == 1)
        return rc;
    const int64_t rows = p->n_tokens * p->n_heads;
    return cuda_launch(att_tc_combine_kernel,
                       (unsigned)((rows + TC_COMBINE_ROWS - 1) / TC_COMBINE_ROWS),
                       TC_COMBINE_ROWS * CUDA_WARP, 0, stream, *p, head_dim);
}

// Settings (VLLMC_CUDA_PREFILL_ATTENTION=STAGE,BELOW,COVER,MIN_KEYS): f32
// caches staged through cp.async (1) or loaded tile by tile (0); keys split
// when the blocks with rows number fewer than BELOW / 4 x n_sms, into enough
// splits for COVER x n_sms blocks, each walking at least MIN_KEYS keys.
// Staging took the 8B shape's pp512 attention call from 50.9 to 47.0 us and
// its pp512 from 18,958 to 19,983 tok/s (H200).
static bool att_tc_stage_f32 = true;
static int att_tc_split_below = 4, att_tc_cover = 2, att_tc_split_min = 256;

extern "C" void cuda_attention_set_prefill(int stage_f32, int below, int cover, int min_keys)
{
    if (stage_f32 >= 0)
        att_tc_stage_f32 = stage_f32 != 0;
    if (below > 0)
        att_tc_split_below = below;
    if (cover > 0)
        att_tc_cover = cover;
    if (min_keys >= TC_KT)
        att_tc_split_min = min_keys / TC_KT * TC_KT;
}

// ---- provider ----

static bool att_tc_aligned(const void *ptr, size_t stride_bytes, size_t align)
{
    return (uintptr_t)ptr % align == 0 && stride_bytes % align == 0;
}

extern "C" bool cuda_attention_tc_supports(const struct op_call *c)
{
    if (!cuda_attention_supports(c))
        return false;
    const struct tensor *q = c->src[0], *kc = c->src[1], *vc = c->src[2];
    const int64_t D = q->ne[0];
    const int64_t q_len = c->p.max_q_len > 0 ? c->p.max_q_len : q->ne[2];
    // 16-byte K/V row loads; 8-byte (float2) query reads and output writes.
    return (D == 64 || D == 128) && q_len >= TC_MIN_Q_LEN && att_tc_aligned(kc->data, 0, 16) &&
           att_tc_aligned(vc->data, 0, 16) && att_tc_aligned(q->data, q->nb[2], 8) &&
           att_tc_aligned(c->dst->data, c->dst->nb[2], 8);
}

// ldsm: fragments through ldmatrix (one instruction per two mma B operands)
// instead of 32- and 16-bit shared loads, and for f16/bf16 caches K/V tiles
// double-buffered with cp.async.
static enum vllmc_status att_tc_run(const struct op_call *c, bool ldsm)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct tensor *q = c->src[0], *kc = c->src[1], *bt = c->src[3];
    const int n_seqs = (int)tensor_n_elements(c->src[4]);
    const int64_t n_tokens = q->ne[2];
    if (n_tokens == 0 || n_seqs == 0)
        return VLLMC_OK;
    struct tc_params p = {};
    p.dst = (float *)c->dst->data;
    p.dst_stride = (int64_t)(c->dst->nb[2] / sizeof(float));
    p.q = (const float *)q->data;
    p.q_stride = (int64_t)(q->nb[2] / sizeof(float));
    p.k_cache = kc->data;
    p.v_cache = c->src[2]->data;
    p.block_tables = (const int32_t *)bt->data;
    p.bt_stride = cuda_row_pitch(bt);
    p.seq_lens = (const int32_t *)c->src[4]->data;
    p.q_start = (const int32_t *)c->src[5]->data;
    p.n_kv_heads = (int)kc->ne[1];
    p.block_size = (int)kc->ne[2];
    p.group = (int)q->ne[1] / p.n_kv_heads;
    p.hc = p.group;
    while (p.hc > TC_ROWS || p.group % p.hc)
        p.hc--;
    p.qt = TC_ROWS / p.hc;
    p.n_hchunks = p.group / p.hc;
    p.scale_log2 = c->p.scale * 1.44269504088896341f;
    p.n_heads = (int)q->ne[1];
    p.n_tokens = n_tokens;
    const int max_q = c->p.max_q_len > 0 ? c->p.max_q_len : (int)n_tokens;
    const int n_tiles = (max_q + p.qt - 1) / p.qt;
    const int D = (int)q->ne[0];

    // Split the keys when the blocks that have rows would leave SMs idle (a
    // short chunk after a long cached prefix, or a 512-token prompt's 128
    // blocks on 132 SMs, whose causal tiles differ eightfold in keys), into
    // enough splits to cover the GPU twice (two blocks fit an SM). The
    // partial states cost a write and a read of n_splits x the output and a
    // merge kernel; splitting only below n_sms / 2 blocks made Qwen3-0.6B's
    // pp512 slower on the H200 (100,200 against 109,100-110,300 tok/s).
    // Blocks with rows: at most n_tiles per sequence, and at most one per qt
    // tokens plus one per sequence.
    const int64_t max_seq =
        c->p.max_seq_len > 0 ? c->p.max_seq_len : bt->ne[0] * (int64_t)p.block_size;
    int64_t tiles = (n_tokens + p.qt - 1) / p.qt + n_seqs;
    if (tiles > (int64_t)n_tiles * n_seqs)
        tiles = (int64_t)n_tiles * n_seqs;
    const int64_t blocks = tiles * p.n_kv_heads * p.n_hchunks;
    int64_t n_splits = 1;
    if (4 * blocks < (int64_t)att_tc_split_below * dev->n_sms) {
        const int64_t want = ((int64_t)att_tc_cover * dev->n_sms + blocks - 1) / blocks;
        const int64_t most = (max_seq + att_tc_split_min - 1) / att_tc_split_min;
        n_splits = want < most ? want : most;
        if (n_splits < 1)
            n_splits = 1;
    }
    int64_t split_len = (max_seq + n_splits - 1) / n_splits;
    split_len = (split_len + TC_KT - 1) / TC_KT * TC_KT;
    if (split_len < TC_KT)
        split_len = TC_KT;
    n_splits = (max_seq + split_len - 1) / split_len;
    p.n_splits = n_splits > 1 ? (int)n_splits : 1;
    p.split_len = p.n_splits > 1 ? (int)split_len : INT32_MAX / 2;
    if (p.n_splits > 1) {
        const size_t rows = (size_t)p.n_splits * (size_t)n_tokens * (size_t)p.n_heads;
        void *scratch = nullptr;
        enum vllmc_status rc = cuda_scratch(dev, rows * ((size_t)D + 2) * sizeof(float), &scratch);
        if (rc)
            return rc;
        p.part_o = (float *)scratch;
        p.part_ml = p.part_o + rows * (size_t)D;
    }
    // The output is the o projection's input: its bf16 terms too when a bf16
    // GEMM will read it (cuda_split_begin_rows).
    p.split_hi = (__nv_bfloat16 *)cuda_split_begin_rows(c, p.dst, n_tokens, (int64_t)p.n_heads * D,
                                                        p.dst_stride, &p.split_lo_off);
    // f16 and bf16 caches keep their type; an f32 cache is rounded to f16,
    // whose 10-bit mantissa keeps scores closer than bf16's 7 bits (values
    // past f16's range saturate, see tc_pack).
    switch (kc->dtype) {
    case DTYPE_BF16:
        CUDA_TRY((att_tc_launch<__nv_bfloat16, __nv_bfloat16, false>(&p, D, ldsm, n_seqs, n_tiles,
                                                                     dev->stream)));
        break;
    case DTYPE_F16:
        CUDA_TRY((att_tc_launch<__half, __half, false>(&p, D, ldsm, n_seqs, n_tiles, dev->stream)));
        break;
    default:
        if (att_tc_stage_f32)
            CUDA_TRY(
                (att_tc_launch<float, __half, true>(&p, D, ldsm, n_seqs, n_tiles, dev->stream)));
        else
            CUDA_TRY(
                (att_tc_launch<float, __half, false>(&p, D, ldsm, n_seqs, n_tiles, dev->stream)));
        break;
    }
    return VLLMC_OK;
}

extern "C" enum vllmc_status cuda_attention_tc_run(const struct op_call *c)
{
    return att_tc_run(c, false);
}

extern "C" enum vllmc_status cuda_attention_tc_ldsm_run(const struct op_call *c)
{
    return att_tc_run(c, true);
}
