// Paged causal attention over a varlen batch that mixes prefill chunks and
// decode tokens. One block takes a tile of query rows (tokens x the query
// heads sharing one KV head, so each K/V byte read serves the whole GQA
// group) and walks the sequence's keys through its block table in tiles,
// with an online softmax in f32. Decode splits the keys across blocks
// (split-K) when the batch alone would leave the GPU idle; a second kernel
// merges the partial softmax states, or, for 2-8 short splits on sm_90, the
// splits' blocks form a cluster that merges them itself.
#include <cooperative_groups.h>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/qkv_rope_store.cuh"

namespace cg = cooperative_groups;

#define ATT_CLUSTER_MAX 8 // blocks of a cluster (the portable limit)

#define ATT_THREADS 128
#define ATT_ROWS 16         // query rows per block (tokens x heads of one KV group)
#define ATT_KT 32           // keys per tile
#define ATT_HEAD_DIM_MAX 256
#define ATT_SPLIT_MIN 256   // fewest keys one split-K block walks

struct att_params {
    float *dst;              // [n_tokens, n_heads, head_dim], token stride dst_stride
    int64_t dst_stride;
    const float *q;          // [n_tokens, n_heads, head_dim], token stride q_stride
    int64_t q_stride;
    const void *k_cache;     // [n_blocks, block_size, n_kv_heads, head_dim]
    const void *v_cache;
    const int32_t *block_tables; // [n_seqs, bt_stride]
    int64_t bt_stride;
    int bt_cols;                 // entries a row of block_tables holds
    const int32_t *seq_lens;     // [n_seqs]
    const int32_t *q_start;      // [n_seqs + 1]
    float *part_acc;         // [n_splits, n_tokens, n_heads, head_dim] when n_splits > 1
    float *part_ml;          // [n_splits, n_tokens, n_heads, 2]
    int64_t n_tokens;
    int n_heads, n_kv_heads, head_dim, block_size;
    int group;               // n_heads / n_kv_heads
    int hc;                  // heads of the group per block
    int qt;                  // tokens per block
    int n_hchunks;           // group / hc
    int n_splits, split_len; // keys per split (multiple of ATT_KT)
    float scale;
    int bs_shift;            // log2(block_size) when a power of two, else -1
    __nv_bfloat16 *split_hi; // when set, the merge also writes dst's bf16 terms here
    int64_t split_k;         // (cuda_split_begin_rows): [n_tokens, split_k], lo at
    int64_t split_lo_off;    // split_hi + split_lo_off
    bool cluster_merge;      // decode splits as one cluster, merged in it (att_split_merge_cluster)
    bool early_loads; // the short-split kernel's loads before its sync (att_decode_short_kernel)
    // ATTENTION's QKV_ROPE_STORE prologue, run by the short-split decode kernel
    // itself (att_decode_rope_prologue); qkv NULL otherwise.
    const float *qkv; // [n_tokens, (n_heads + 2 n_kv_heads) head_dim], row pitch qkv_pitch
    int64_t qkv_pitch;
    float *q_out;                         // the prologue's q, the same tensor as q
    const int32_t *rope_pos, *rope_slots; // [n_tokens]
    int64_t n_slots;                      // cache slots (n_blocks x block_size)
    const float *inv_freq;                // [head_dim / 2]
    const void *wq, *wk;                  // [head_dim] q/k norm weights, or both NULL
    int w_type;
    float rope_eps;
    bool rope_neox;
};

// ---- kernels ----

template <typename TC> static __global__ void __launch_bounds__(ATT_THREADS)
    att_kernel(const struct att_params p)
{
    cuda_pdl_sync();
    extern __shared__ float smem[];
    const int D = p.head_dim;
    float *qs = smem;                       // [ATT_ROWS][D]
    float *ks = qs + ATT_ROWS * D;          // [ATT_KT][D + 1]
    float *vs = ks + ATT_KT * (D + 1);      // [ATT_KT][D]
    float *ss = vs + ATT_KT * D;            // [ATT_ROWS][ATT_KT]
    float *acc = ss + ATT_ROWS * ATT_KT;    // [ATT_ROWS][D]
    float *ms = acc + ATT_ROWS * D;         // [ATT_ROWS]
    float *ls = ms + ATT_ROWS;              // [ATT_ROWS]
    float *al = ls + ATT_ROWS;              // [ATT_ROWS]

    const int tile = blockIdx.x, split = blockIdx.z;
    const int seq = blockIdx.y / (p.n_kv_heads * p.n_hchunks);
    const int rest = blockIdx.y % (p.n_kv_heads * p.n_hchunks);
    const int kvh = rest / p.n_hchunks, hchunk = rest % p.n_hchunks;
    const int q0 = p.q_start[seq];
    const int q_len = p.q_start[seq + 1] - q0;
    if (tile * p.qt >= q_len)
        return;
    const int ctx = p.seq_lens[seq];
    const int pos0 = ctx - q_len; // position of the sequence's first query
    const int n_rows = p.qt * p.hc;
    const int tile_tokens = min(p.qt, q_len - tile * p.qt);
    // Keys this tile may see: up to its last query's position, inside the split.
    const int k_visible = pos0 + tile * p.qt + tile_tokens;
    const int k_begin = split * p.split_len;
    const int k_end = min(k_visible, k_begin + p.split_len);

    for (int e = threadIdx.x; e < ATT_ROWS * D; e += blockDim.x) {
        const int r = e / D, d = e % D;
        const int ti = r / p.hc, h = kvh * p.group + hchunk * p.hc + r % p.hc;
        float v = 0.0f;
        if (r < n_rows && ti < tile_tokens)
            v = p.q[(int64_t)(q0 + tile * p.qt + ti) * p.q_stride + (int64_t)h * D + d];
        qs[e] = v;
        acc[e] = 0.0f;
    }
    for (int r = threadIdx.x; r < ATT_ROWS; r += blockDim.x) {
        ms[r] = -INFINITY;
        ls[r] = 0.0f;
    }
    const TC *kc = (const TC *)p.k_cache, *vc = (const TC *)p.v_cache;
    const int64_t kv_row = (int64_t)p.n_kv_heads * D;
    const int32_t *bt = p.block_tables + (int64_t)seq * p.bt_stride;

    for (int kt0 = k_begin; kt0 < k_end; kt0 += ATT_KT) {
        __syncthreads(); // previous tile fully consumed (and qs/acc initialised)
        for (int e = threadIdx.x; e < ATT_KT * D; e += blockDim.x) {
            const int j = e / D, d = e % D, kp = kt0 + j;
            float kv = 0.0f, vv = 0.0f;
            if (kp < k_end) {
                const int64_t blk = bt[kp / p.block_size];
                const int64_t off =
                    (blk * p.block_size + kp % p.block_size) * kv_row + (int64_t)kvh * D + d;
                kv = cuda_to_f32(kc[off]);
                vv = cuda_to_f32(vc[off]);
            }
            ks[j * (D + 1) + d] = kv;
            vs[j * D + d] = vv;
        }
        __syncthreads();
        // Scores: a warp covers the ATT_KT keys of one row.
        for (int e = threadIdx.x; e < ATT_ROWS * ATT_KT; e += blockDim.x) {
            const int r = e / ATT_KT, j = e % ATT_KT, kp = kt0 + j;
            const int ti = r / p.hc;
            float s = -INFINITY;
            if (r < n_rows && ti < tile_tokens && kp < k_end &&
                kp <= pos0 + tile * p.qt + ti) {
                const float *qr = qs + r * D, *kr = ks + j * (D + 1);
                float dot = 0.0f;
                for (int d = 0; d < D; d++)
                    dot += qr[d] * kr[d];
                s = dot * p.scale;
            }
            ss[e] = s;
        }
        __syncthreads();
        // Online softmax: one warp per row.
        const int lane = threadIdx.x % CUDA_WARP, warp = threadIdx.x / CUDA_WARP;
        for (int r = warp; r < ATT_ROWS; r += ATT_THREADS / CUDA_WARP) {
            const float s = ss[r * ATT_KT + lane];
            const float m_old = ms[r];
            const float m_new = fmaxf(m_old, cuda_warp_max(s));
            const float pr = m_new == -INFINITY ? 0.0f : expf(s - m_new);
            const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
            const float sum = cuda_warp_sum(pr);
            ss[r * ATT_KT + lane] = pr;
            // Every lane has read ms[r] above; order those reads before lane 0
            // overwrites it (a shuffle is no memory barrier).
            __syncwarp();
            if (lane == 0) {
                ls[r] = ls[r] * alpha + sum;
                ms[r] = m_new;
                al[r] = alpha;
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < ATT_ROWS * D; e += blockDim.x) {
            const int r = e / D, d = e % D;
            const float *pr = ss + r * ATT_KT;
            float a = acc[e] * al[r];
#pragma unroll 8
            for (int j = 0; j < ATT_KT; j++)
                a += pr[j] * vs[j * D + d];
            acc[e] = a;
        }
    }
    __syncthreads();

    for (int e = threadIdx.x; e < ATT_ROWS * D; e += blockDim.x) {
        const int r = e / D, d = e % D;
        const int ti = r / p.hc;
        if (r >= n_rows || ti >= tile_tokens)
            continue;
        const int h = kvh * p.group + hchunk * p.hc + r % p.hc;
        const int64_t tok = q0 + tile * p.qt + ti;
        if (p.n_splits == 1) {
            const float l = ls[r];
            p.dst[tok * p.dst_stride + (int64_t)h * D + d] = l > 0.0f ? acc[e] / l : 0.0f;
        } else {
            const int64_t row = ((int64_t)split * p.n_tokens + tok) * p.n_heads + h;
            p.part_acc[row * D + d] = acc[e];
            if (d == 0) {
                p.part_ml[row * 2] = ms[r];
                p.part_ml[row * 2 + 1] = ls[r];
            }
        }
    }
}

// ---- decode: the steps both decode kernels share ----

// Softmax of each of the G heads' scores over the split, in place (one warp
// per head): ps [G][split_len] becomes exp(s - m); ms [G] and ls [G] get each
// head's max and sum. Call between barriers.
static __device__ __forceinline__ void att_split_softmax(float *ps, int split_len, int n_keys,
                                                         int G, float *ms, float *ls)
{
    const int lane = threadIdx.x % CUDA_WARP, warp = threadIdx.x / CUDA_WARP;
    for (int h = warp; h < G; h += ATT_THREADS / CUDA_WARP) {
        float *row = ps + h * split_len;
        float m = -INFINITY;
        for (int k = lane; k < n_keys; k += CUDA_WARP)
            m = fmaxf(m, row[k]);
        m = cuda_warp_max(m);
        float l = 0.0f;
        for (int k = lane; k < n_keys; k += CUDA_WARP) {
            const float e = expf(row[k] - m);
            row[k] = e;
            l += e;
        }
        l = cuda_warp_sum(l);
        if (lane == 0) {
            ms[h] = m;
            ls[h] = l;
        }
    }
}

// The G heads of KV head kvh for the query token q0: red [n_kg][G][D] holds
// P.V per key group. One split writes the normalised result to dst; with
// several, the split's partial state goes to part_acc / part_ml for
// att_combine_kernel.
static __device__ __forceinline__ void att_split_write(const struct att_params &p,
                                                       const float *red, int n_kg, int kvh,
                                                       int q0, int split, int n_keys,
                                                       const float *ms, const float *ls)
{
    const int D = p.head_dim, G = p.group;
    for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
        const int h = e / D, d = e % D;
        float o = 0.0f;
        for (int g = 0; g < n_kg; g++)
            o += red[(g * G + h) * D + d];
        const int head = kvh * G + h;
        if (p.n_splits == 1) {
            p.dst[(int64_t)q0 * p.dst_stride + (int64_t)head * D + d] = ls[h] > 0.0f ? o / ls[h] : 0.0f;
        } else {
            const int64_t row = ((int64_t)split * p.n_tokens + q0) * p.n_heads + head;
            p.part_acc[row * D + d] = n_keys > 0 ? o : 0.0f;
            if (d == 0) {
                p.part_ml[row * 2] = n_keys > 0 ? ms[h] : -INFINITY;
                p.part_ml[row * 2 + 1] = n_keys > 0 ? ls[h] : 0.0f;
            }
        }
    }
}

// att_split_write for the splits of one (KV head, sequence) launched as one
// thread-block cluster (grid x = n_splits <= 8, rank = split): each block
// leaves its partial state in its own shared memory (P.V summed over key
// groups into red's first G x D floats, each thread its own elements; ms,
// ls), and after the cluster barrier block r merges the r-th blockDim-wide
// slice of the G x D outputs (and every n-th after it) from every rank's
// shared memory, splits in rank order, as att_combine_kernel would from
// global memory, with no kernel after it. H200, 0.6B shape, batch-1 tg128
// (up to 8 splits of 16 keys): 1,078 -> 1,103-1,124 tok/s.
static __device__ __forceinline__ void att_split_merge_cluster(const struct att_params &p,
                                                               float *red, int n_kg, int kvh,
                                                               int q0, int n_keys, float *ms,
                                                               float *ls)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const int D = p.head_dim, G = p.group;
    for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
        float o = 0.0f;
        for (int g = 0; g < n_kg; g++)
            o += red[g * G * D + e];
        red[e] = n_keys > 0 ? o : 0.0f;
    }
    if (n_keys <= 0 && (int)threadIdx.x < G) {
        ms[threadIdx.x] = -INFINITY;
        ls[threadIdx.x] = 0.0f;
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync(); // every split's state is written (release/acquire over the cluster)
    const int n = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    for (int e = rank * (int)blockDim.x + (int)threadIdx.x; e < G * D; e += n * (int)blockDim.x) {
        const int h = e / D;
        float m = -INFINITY;
        for (int s = 0; s < n; s++)
            m = fmaxf(m, cluster.map_shared_rank(ms, s)[h]);
        float l = 0.0f, o = 0.0f;
        for (int s = 0; s < n; s++) {
            const float m_s = cluster.map_shared_rank(ms, s)[h];
            if (m_s != -INFINITY) {
                const float w = expf(m_s - m);
                l += cluster.map_shared_rank(ls, s)[h] * w;
                o += cluster.map_shared_rank(red, s)[e] * w;
            }
        }
        const float v = l > 0.0f ? o / l : 0.0f;
        const int64_t col = (int64_t)(kvh * G + h) * D + e % D;
        p.dst[(int64_t)q0 * p.dst_stride + col] = v;
        if (p.split_hi)
            cuda_split_store(p.split_hi + (int64_t)q0 * p.split_k + col, p.split_lo_off, v);
    }
    cluster.sync(); // no block leaves while another may read its state
#else
    (void)p, (void)red, (void)n_kg, (void)kvh, (void)q0, (void)n_keys, (void)ms, (void)ls;
    __trap(); // the launcher makes no clusters before sm_90
#endif
}

// Merging the split-K partial states of query token tok, head `head`: one
// warp's lanes take the splits' maxima and sums (att_merge_ml), then each
// thread owns output elements and issues the splits' loads 4 at a time
// (att_merge_elem); the merge is bound by load latency. On the H200 this took
// batch-1 decode attention (pipelined kernel + merge, bench-ops) from 21.3 to
// 16.3 us at 512 keys and from 53 to 30 us at 4096. Merging in the decode
// kernel instead (the last block of each sequence and KV head, found with a
// device counter) measured slower, 21.6 and 59.3 us: one block's merge of
// all the group's heads and splits is a longer serial chain (the cluster
// merge above avoids it: its blocks share the merge and read each other's
// shared memory). At 64 sequences the tensor-core kernel's splits keep this
// kernel too: merged by the last block of each (sequence, KV head) they
// decoded 0.97x as fast, as clusters 0.83x (H100, 0.6B shape; a cluster's
// blocks hold their SM slots while they wait for the slowest). The partial
// states are read through L2 (__ldcg): other blocks wrote them.
static __device__ __forceinline__ float att_merge_ml(const struct att_params &p, int64_t tok,
                                                     int head, float *l_out)
{
    const int lane = threadIdx.x % CUDA_WARP;
    float m = -INFINITY;
    for (int s = lane; s < p.n_splits; s += CUDA_WARP)
        m = fmaxf(m, __ldcg(&p.part_ml[((s * p.n_tokens + tok) * p.n_heads + head) * 2]));
    m = cuda_warp_max(m);
    float l = 0.0f;
    for (int s = lane; s < p.n_splits; s += CUDA_WARP) {
        const float *ml = p.part_ml + ((s * p.n_tokens + tok) * p.n_heads + head) * 2;
        const float ms = __ldcg(&ml[0]);
        if (ms != -INFINITY)
            l += __ldcg(&ml[1]) * expf(ms - m);
    }
    *l_out = cuda_warp_sum(l);
    return m;
}

static __device__ __forceinline__ float att_merge_elem(const struct att_params &p, int64_t tok,
                                                       int head, int d, float m)
{
    const int D = p.head_dim;
    float o = 0.0f;
    int s = 0;
    for (; s + 4 <= p.n_splits; s += 4) {
        float a[4], ms[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int64_t row = ((s + u) * p.n_tokens + tok) * p.n_heads + head;
            a[u] = __ldcg(&p.part_acc[row * D + d]);
            ms[u] = __ldcg(&p.part_ml[row * 2]);
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (ms[u] != -INFINITY)
                o += a[u] * expf(ms[u] - m);
    }
    for (; s < p.n_splits; s++) {
        const int64_t row = (s * p.n_tokens + tok) * p.n_heads + head;
        const float ms = __ldcg(&p.part_ml[row * 2]);
        if (ms != -INFINITY)
            o += __ldcg(&p.part_acc[row * D + d]) * expf(ms - m);
    }
    return o;
}

// Decode (one query per sequence): one block per (key split, KV head,
// sequence) serves the GQA group's G query heads. Scores first: groups of
// D/32 lanes share a key, each lane dotting 32 elements read with 16-byte
// loads; then a softmax per head over the split; then P.V with each thread
// owning an 8-wide column chunk and a stride of keys, reduced across key
// groups in shared memory. GMAX bounds G at compile time.
template <typename TC, int GMAX> static __global__ void __launch_bounds__(ATT_THREADS)
    att_decode_kernel(const struct att_params p)
{
    cuda_pdl_sync();
    extern __shared__ float smem[];
    constexpr int VEC = 16 / (int)sizeof(TC); // cache elements per 16-byte load
    const int D = p.head_dim, G = p.group;
    const int split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
    const int q0 = p.q_start[seq];
    if (p.q_start[seq + 1] - q0 != 1)
        return; // a sequence with no query this step
    const int ctx = p.seq_lens[seq];
    const int k_begin = split * p.split_len;
    const int k_end = min(ctx, k_begin + p.split_len);
    const int n_keys = max(k_end - k_begin, 0);
    float *qs = smem;                          // [G][D], pre-scaled
    float *ps = qs + GMAX * D;                 // [G][split_len]: scores, then probabilities
    float *ms = ps + GMAX * p.split_len;       // [G]
    float *ls = ms + GMAX;                     // [G]
    float *red = ls + GMAX;                    // [key groups][G][D] partial P.V

    for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
        const int h = kvh * G + e / D;
        qs[e] = p.q[(int64_t)q0 * p.q_stride + (int64_t)h * D + e % D] * p.scale;
    }
    __syncthreads();

    const TC *kc = (const TC *)p.k_cache, *vc = (const TC *)p.v_cache;
    const int64_t kv_row = (int64_t)p.n_kv_heads * D;
    const int32_t *bt = p.block_tables + (int64_t)seq * p.bt_stride;

    // ---- scores ----
    const int lg = D / 32;                     // lanes per key
    const int lane_in = threadIdx.x % lg, key_slot = threadIdx.x / lg;
    const int keys_per_pass = blockDim.x / lg;
    for (int kk = key_slot; kk < ((n_keys + keys_per_pass - 1) / keys_per_pass) * keys_per_pass;
         kk += keys_per_pass) {
        float dot[GMAX];
#pragma unroll
        for (int h = 0; h < GMAX; h++)
            dot[h] = 0.0f;
        if (kk < n_keys) {
            const int kp = k_begin + kk;
            const int64_t blk = bt[kp / p.block_size];
            const TC *kr = kc + (blk * p.block_size + kp % p.block_size) * kv_row +
                           (int64_t)kvh * D + lane_in * 32;
#pragma unroll
            for (int c = 0; c < 32 / VEC; c++) {
                const uint4 u = *(const uint4 *)(kr + c * VEC);
                float f[VEC];
                cuda_widen16(u, f, (const TC *)nullptr);
                const int d0 = lane_in * 32 + c * VEC;
#pragma unroll
                for (int h = 0; h < GMAX; h++) {
                    if (h < G) {
                        const float *qh = qs + h * D + d0;
#pragma unroll
                        for (int i = 0; i < VEC; i++)
                            dot[h] += qh[i] * f[i];
                    }
                }
            }
        }
        // Reduce over the lg lanes of the key (lg is a power of two, <= 8).
#pragma unroll
        for (int h = 0; h < GMAX; h++)
            for (int off = lg / 2; off > 0; off >>= 1)
                dot[h] += __shfl_xor_sync(0xffffffffu, dot[h], off);
        if (kk < n_keys && lane_in == 0)
#pragma unroll
            for (int h = 0; h < GMAX; h++)
                if (h < G)
                    ps[h * p.split_len + kk] = dot[h];
    }
    __syncthreads();

    att_split_softmax(ps, p.split_len, n_keys, G, ms, ls);
    __syncthreads();

    // ---- P.V: thread = (key group, 8-wide column chunk) ----
    const int n_cc = D / 8, n_kg = blockDim.x / n_cc;
    const int cc = threadIdx.x % n_cc, kg = threadIdx.x / n_cc;
    float acc[GMAX][8];
#pragma unroll
    for (int h = 0; h < GMAX; h++)
#pragma unroll
        for (int i = 0; i < 8; i++)
            acc[h][i] = 0.0f;
    if (kg < n_kg) {
        for (int kk = kg; kk < n_keys; kk += n_kg) {
            const int kp = k_begin + kk;
            const int64_t blk = bt[kp / p.block_size];
            const TC *vr = vc + (blk * p.block_size + kp % p.block_size) * kv_row +
                           (int64_t)kvh * D + cc * 8;
            float f[8];
#pragma unroll
            for (int c = 0; c < 8 / VEC; c++) {
                const uint4 u = *(const uint4 *)(vr + c * VEC);
                cuda_widen16(u, f + c * VEC, (const TC *)nullptr);
            }
#pragma unroll
            for (int h = 0; h < GMAX; h++) {
                if (h < G) {
                    const float pr = ps[h * p.split_len + kk];
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        acc[h][i] += pr * f[i];
                }
            }
        }
#pragma unroll
        for (int h = 0; h < GMAX; h++)
            if (h < G)
#pragma unroll
                for (int i = 0; i < 8; i++)
                    red[(kg * G + h) * D + cc * 8 + i] = acc[h][i];
    }
    __syncthreads();
    att_split_write(p, red, n_kg, kvh, q0, split, n_keys, ms, ls);
}

// ---- the register-resident steps of the pipelined and short-split kernels ----
// A key's L = min(32, D / VEC) lanes are consecutive lanes of one warp, each
// holding CH 16-byte chunks (lane_in + c L) of the key's row; a P.V thread
// owns one 16-byte column chunk of every head of the group.

// Where key position r of a sequence sits: its block-table index and slot.
static __device__ __forceinline__ int att_key_block(const struct att_params &p, int r)
{
    return p.bs_shift >= 0 ? r >> p.bs_shift : r / p.block_size;
}

static __device__ __forceinline__ int att_key_slot(const struct att_params &p, int r)
{
    return p.bs_shift >= 0 ? r & (p.block_size - 1) : r % p.block_size;
}

// Keys of decode split `split` (from k_begin = split * split_len) that sequence
// seq holds: none past its length.
static __device__ __forceinline__ int att_split_n_keys(const struct att_params &p, int seq,
                                                       int k_begin)
{
    return max(min(p.seq_lens[seq], k_begin + p.split_len) - k_begin, 0);
}

// The split's block-table entries into bts (shared memory), by all the
// block's threads (a barrier must follow); returns the split's first key's
// place in its first block, so that key kk of the split is at r = first + kk
// of bts' blocks.
static __device__ __forceinline__ int att_split_table_load(const struct att_params &p, int seq,
                                                           int k_begin, int n_keys, int32_t *bts)
{
    const int bs = p.block_size, blk0 = k_begin / bs;
    const int n_blk = n_keys > 0 ? (k_begin + n_keys - 1) / bs - blk0 + 1 : 0;
    const int32_t *bt = p.block_tables + (int64_t)seq * p.bt_stride;
    for (int i = threadIdx.x; i < n_blk; i += blockDim.x)
        bts[i] = bt[blk0 + i];
    return k_begin - blk0 * bs;
}

// Row r of the split's blocks (att_split_table_load) in cache, at KV head offset head_off.
template <typename TC>
static __device__ __forceinline__ const TC *att_split_row(const struct att_params &p,
                                                          const TC *cache, const int32_t *bts,
                                                          int r, int64_t kv_row, int64_t head_off)
{
    return cache +
           ((int64_t)bts[att_key_block(p, r)] * p.block_size + att_key_slot(p, r)) * kv_row +
           head_off;
}

// This thread's partial P.V of the G heads at its column chunk cc, into
// red [n_kg][G][D] at key group kg.
template <int GMAX, int VEC>
static __device__ __forceinline__ void
att_decode_store_red(const float (&acc)[GMAX][VEC], float *red, int kg, int cc, int G, int D)
{
#pragma unroll
    for (int h = 0; h < GMAX; h++)
        if (h < G)
#pragma unroll
            for (int i = 0; i < VEC; i++)
                red[(kg * G + h) * D + cc * VEC + i] = acc[h][i];
}

// This lane's chunks of the G query vectors of KV head kvh, scaled.
template <typename TC, int GMAX, int CHMAX>
static __device__ __forceinline__ void
att_decode_load_q(const struct att_params &p, int q0, int kvh, int lane_in, int L, int CH,
                  float (&qr)[GMAX][CHMAX * (16 / sizeof(TC))])
{
    constexpr int VEC = 16 / (int)sizeof(TC);
    const int D = p.head_dim, G = p.group;
#pragma unroll
    for (int h = 0; h < GMAX; h++)
#pragma unroll
        for (int c = 0; c < CHMAX; c++)
#pragma unroll
            for (int i = 0; i < VEC; i++) {
                const int d = (lane_in + c * L) * VEC + i;
                qr[h][c * VEC + i] =
                    h < G && c < CH
                        ? p.q[(int64_t)q0 * p.q_stride + (int64_t)(kvh * G + h) * D + d] * p.scale
                        : 0.0f;
            }
}

// The G heads' scores of key kk (this lane's chunks kr of its K row) into
// ps [G][split_len], reduced over the key's L lanes (a power of two). Every
// lane of the warp calls it; `valid` says whether kk is a key of the split.
template <typename TC, int GMAX, int CHMAX>
static __device__ __forceinline__ void
att_decode_score(const uint4 (&kr)[CHMAX], const float (&qr)[GMAX][CHMAX * (16 / sizeof(TC))],
                 bool valid, int kk, int L, int CH, int lane_in, int G, float *ps, int split_len)
{
    constexpr int VEC = 16 / (int)sizeof(TC);
    float dot[GMAX];
#pragma unroll
    for (int h = 0; h < GMAX; h++)
        dot[h] = 0.0f;
    if (valid) {
#pragma unroll
        for (int c = 0; c < CHMAX; c++) {
            if (c < CH) {
                float f[VEC];
                cuda_widen16(kr[c], f, (const TC *)nullptr);
#pragma unroll
                for (int h = 0; h < GMAX; h++)
#pragma unroll
                    for (int i = 0; i < VEC; i++)
                        dot[h] += qr[h][c * VEC + i] * f[i];
            }
        }
    }
#pragma unroll
    for (int h = 0; h < GMAX; h++)
        for (int off = L / 2; off > 0; off >>= 1)
            dot[h] += __shfl_xor_sync(0xffffffffu, dot[h], off);
    if (valid && lane_in == 0)
#pragma unroll
        for (int h = 0; h < GMAX; h++)
            if (h < G)
                ps[h * split_len + kk] = dot[h];
}

// acc[h] += P[h][vk] * (this thread's chunk vr of V row vk), for the G heads.
template <typename TC, int GMAX>
static __device__ __forceinline__ void att_decode_pv(const uint4 &vr, const float *ps,
                                                     int split_len, int vk, int G,
                                                     float (&acc)[GMAX][16 / sizeof(TC)])
{
    constexpr int VEC = 16 / (int)sizeof(TC);
    float f[VEC];
    cuda_widen16(vr, f, (const TC *)nullptr);
#pragma unroll
    for (int h = 0; h < GMAX; h++) {
        if (h < G) {
            const float pr = ps[h * split_len + vk];
#pragma unroll
            for (int i = 0; i < VEC; i++)
                acc[h][i] += pr * f[i];
        }
    }
}

// Decode, pipelined: as att_decode_kernel, for GQA groups of up to GMAX = 8
// query heads and head_dim 32..256. What it changes is latency hiding,
// which is what decode attention is bound by: the split's block-table
// entries are read into shared memory once (no dependent global load per
// key), each lane keeps its slice of the G query vectors in registers, and
// both the score and the P.V loops issue ATT_UNROLL keys' loads before
// using any of them. Lanes per key L = D / (elements per 16-byte load),
// at most 32 (a key's lanes sit in one warp); CH 16-byte chunks per lane.
#define ATT_UNROLL 4
template <typename TC, int GMAX> static __global__ void __launch_bounds__(ATT_THREADS)
    att_decode_pipe_kernel(const struct att_params p)
{
    cuda_pdl_sync();
    extern __shared__ float smem[];
    constexpr int VEC = 16 / (int)sizeof(TC);
    constexpr int CHMAX = sizeof(TC) == 4 ? 2 : 1; // f32 at D = 256 needs two chunks
    const int D = p.head_dim, G = p.group;
    const int split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
    const int q0 = p.q_start[seq];
    if (p.q_start[seq + 1] - q0 != 1)
        return;
    const int k_begin = split * p.split_len;
    const int n_keys = att_split_n_keys(p, seq, k_begin);
    float *ps = smem;                          // [G][split_len]: scores, then probabilities
    float *ms = ps + GMAX * p.split_len;       // [G]
    float *ls = ms + GMAX;                     // [G]
    float *red = ls + GMAX;                    // [key groups][G][D] partial P.V
    const int n_cc = D / VEC, n_kg = ATT_THREADS / n_cc;
    int32_t *bts = (int32_t *)(red + (size_t)n_kg * GMAX * D); // [split blocks]

    const int first = att_split_table_load(p, seq, k_begin, n_keys, bts);

    const int L = min(32, n_cc), CH = n_cc / L;
    const int lane_in = threadIdx.x % L, key_slot = threadIdx.x / L;
    const int keys_per_pass = ATT_THREADS / L;
    float qr[GMAX][CHMAX * VEC];
    att_decode_load_q<TC, GMAX, CHMAX>(p, q0, kvh, lane_in, L, CH, qr);
    __syncthreads();

    const TC *kc = (const TC *)p.k_cache, *vc = (const TC *)p.v_cache;
    const int64_t kv_row = (int64_t)p.n_kv_heads * D;
    const int64_t head_off = (int64_t)kvh * D;

    // ---- scores: ATT_UNROLL keys in flight per key slot ----
    for (int base = 0; base < n_keys; base += keys_per_pass * ATT_UNROLL) {
        uint4 kr[ATT_UNROLL][CHMAX];
#pragma unroll
        for (int u = 0; u < ATT_UNROLL; u++) {
            const int kk = base + u * keys_per_pass + key_slot;
            if (kk < n_keys) {
                const TC *row = att_split_row(p, kc, bts, first + kk, kv_row, head_off);
#pragma unroll
                for (int c = 0; c < CHMAX; c++)
                    if (c < CH)
                        kr[u][c] = *(const uint4 *)(row + (lane_in + c * L) * VEC);
            }
        }
#pragma unroll
        for (int u = 0; u < ATT_UNROLL; u++) {
            const int kk = base + u * keys_per_pass + key_slot;
            att_decode_score<TC, GMAX, CHMAX>(kr[u], qr, kk < n_keys, kk, L, CH, lane_in, G, ps,
                                              p.split_len);
        }
    }
    __syncthreads();

    att_split_softmax(ps, p.split_len, n_keys, G, ms, ls);
    __syncthreads();

    // ---- P.V: thread = (key group, 16-byte column chunk), ATT_UNROLL keys in flight ----
    const int cc = threadIdx.x % n_cc, kg = threadIdx.x / n_cc;
    float acc[GMAX][VEC];
#pragma unroll
    for (int h = 0; h < GMAX; h++)
#pragma unroll
        for (int i = 0; i < VEC; i++)
            acc[h][i] = 0.0f;
    if (kg < n_kg) {
        for (int base = kg; base < n_keys; base += n_kg * ATT_UNROLL) {
            uint4 vr[ATT_UNROLL];
#pragma unroll
            for (int u = 0; u < ATT_UNROLL; u++) {
                const int kk = base + u * n_kg;
                if (kk < n_keys) {
                    vr[u] =
                        *(const uint4 *)(att_split_row(p, vc, bts, first + kk, kv_row, head_off) +
                                         cc * VEC);
                }
            }
#pragma unroll
            for (int u = 0; u < ATT_UNROLL; u++) {
                const int kk = base + u * n_kg;
                if (kk < n_keys)
                    att_decode_pv<TC, GMAX>(vr[u], ps, p.split_len, kk, G, acc);
            }
        }
        att_decode_store_red<GMAX, VEC>(acc, red, kg, cc, G, D);
    }
    __syncthreads();
    att_split_write(p, red, n_kg, kvh, q0, split, n_keys, ms, ls);
}

// ---- decode: the QKV_ROPE_STORE prologue inside the short-split kernel ----

// What the prologue of a lane needs besides the q|k|v rows, read before the
// kernel's sync: the q and k norm weights of its dims and the cos and sin of
// its dims' rotation. The weights and frequencies are the model's, the
// position and slot the step's upload: no kernel of the step writes them, so
// their round trips (two to three after the q|k|v rows before: the norm
// weights, then the frequencies) overlap the K and V loads instead.
template <int VEC> struct att_rope_lane {
    float wq[VEC], wk[VEC]; // norm weights of dims lane_in * VEC + i (1 without a norm)
    float freq[VEC];        // the inverse frequency of dim i's pair
    float co[VEC], sn[VEC]; // its rotation at the token's position
    int32_t slot;           // the new key's cache slot
};

// The position-free part: issued at the kernel's start.
template <int VEC>
static __device__ __forceinline__ void att_rope_lane_consts(const struct att_params &p, int lane_in,
                                                            int L, att_rope_lane<VEC> &r)
{
    const int D = L * VEC, half = D / 2;
#pragma unroll
    for (int i = 0; i < VEC; i++) {
        const int d = lane_in * VEC + i;
        r.wq[i] = p.wq ? cuda_bias_at(p.wq, p.w_type, d) : 1.0f;
        r.wk[i] = p.wk ? cuda_bias_at(p.wk, p.w_type, d) : 1.0f;
        r.freq[i] = p.inv_freq[p.rope_neox ? (d < half ? d : d - half) : d / 2];
    }
}

// The token's slot and rotation: once q0 is known (round trip 1).
template <int VEC>
static __device__ __forceinline__ void att_rope_lane_angles(const struct att_params &p, int q0,
                                                            att_rope_lane<VEC> &r)
{
    r.slot = __ldcg(p.rope_slots + q0);
    const float pos = (float)__ldcg(p.rope_pos + q0);
#pragma unroll
    for (int i = 0; i < VEC; i++)
        sincosf(pos * r.freq[i], &r.sn[i], &r.co[i]);
}

// One head [head_dim = L x VEC] spread over L consecutive lanes, VEC dims a
// lane (lane_in's dims lane_in * VEC ..): in place, its RMSNorm with the
// lane's weights w (when norm) and its RoPE with the lane's rotation, with
// qkv_rope_store's arithmetic. Every lane of the warp calls it (shuffles).
template <int VEC>
static __device__ __forceinline__ void att_rope_head(float (&x)[VEC], int lane_in, int L,
                                                     const struct att_params &p, bool norm,
                                                     const float (&w)[VEC],
                                                     const att_rope_lane<VEC> &r)
{
    const int D = L * VEC, half = D / 2;
    if (norm) {
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < VEC; i++)
            ss += x[i] * x[i];
        for (int off = L / 2; off > 0; off >>= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, off);
        const float scale = rsqrtf(ss / (float)D + p.rope_eps);
#pragma unroll
        for (int i = 0; i < VEC; i++)
            x[i] = x[i] * scale * w[i];
    }
    if (p.rope_neox) { // pairs (d, d + half): the partner is half / VEC lanes away
        float y[VEC];
#pragma unroll
        for (int i = 0; i < VEC; i++)
            y[i] = __shfl_xor_sync(0xffffffffu, x[i], half / VEC);
#pragma unroll
        for (int i = 0; i < VEC; i++) {
            const bool lo = lane_in * VEC + i < half;
            x[i] = lo ? x[i] * r.co[i] - y[i] * r.sn[i] : x[i] * r.co[i] + y[i] * r.sn[i];
        }
    } else { // pairs (2i, 2i + 1) within the lane
#pragma unroll
        for (int i = 0; i < VEC; i += 2) {
            const float a = x[i], b = x[i + 1];
            x[i] = a * r.co[i] - b * r.sn[i];
            x[i + 1] = b * r.co[i] + a * r.sn[i];
        }
    }
}

template <typename TC, int VEC>
static __device__ __forceinline__ uint4 att_pack16(const float (&x)[VEC])
{
    static_assert(VEC * sizeof(TC) == 16, "one 16-byte chunk");
    TC t[VEC];
#pragma unroll
    for (int i = 0; i < VEC; i++)
        t[i] = cuda_from_f32<TC>(x[i]);
    uint4 u;
    memcpy(&u, t, sizeof u);
    return u;
}

// The short-split kernel's q and new key from the q|k|v rows instead of the
// q buffer and the cache (ATTENTION with a QKV_ROPE_STORE prologue; one
// 16-byte chunk a lane, CH 1): every thread norms and rotates its chunk of
// the G query heads into qr (scaled) and split 0's first key slot writes them
// to q_out; the threads holding the sequence's last key (index `last` of
// this split) in kr and vr replace what they loaded from the cache with the
// rotated key and the value, rounded to the cache dtype, and store both at
// the token's slot, when that slot is the block table's place for the key
// (else the cache's row stays, as the two ops in turn would read it). No
// other key may sit in that slot (op.h): its split could read the row before
// this one writes it.
template <typename TC, int GMAX, int CHMAX>
static __device__ __forceinline__ void att_decode_rope_prologue(
    const struct att_params &p, int q0, int kvh, int split, int last, int first, int lane_in, int L,
    int key_slot, int keys_per_pass, int cc, int kg, int n_kg, const int (&kblk)[ATT_UNROLL],
    const int (&vblk)[ATT_UNROLL], const att_rope_lane<16 / sizeof(TC)> &rl,
    float (&qr)[GMAX][CHMAX * (16 / sizeof(TC))], uint4 (&kr)[ATT_UNROLL][CHMAX],
    uint4 (&vr)[ATT_UNROLL])
{
    constexpr int VEC = 16 / (int)sizeof(TC);
    const int D = p.head_dim, G = p.group, bs = p.block_size;
    const float *row = p.qkv + (int64_t)q0 * p.qkv_pitch;
    const int32_t slot = rl.slot;
    float qx[GMAX][VEC];
#pragma unroll
    for (int h = 0; h < GMAX; h++)
#pragma unroll
        for (int i = 0; i < VEC; i++)
            qx[h][i] = h < G ? row[(int64_t)(kvh * G + h) * D + lane_in * VEC + i] : 0.0f;
    int ku = -1, vu = -1;
#pragma unroll
    for (int u = 0; u < ATT_UNROLL; u++) {
        if (u * keys_per_pass + key_slot == last)
            ku = u;
        if (kg < n_kg && kg + u * n_kg == last)
            vu = u;
    }
    float kx[VEC], vx[VEC];
#pragma unroll
    for (int i = 0; i < VEC; i++) {
        kx[i] = ku >= 0 ? row[(int64_t)(p.n_heads + kvh) * D + lane_in * VEC + i] : 0.0f;
        vx[i] = vu >= 0 ? row[(int64_t)(p.n_heads + p.n_kv_heads + kvh) * D + cc * VEC + i] : 0.0f;
    }
#pragma unroll
    for (int h = 0; h < GMAX; h++)
#pragma unroll
        for (int i = 0; i < CHMAX * VEC; i++)
            qr[h][i] = 0.0f;
#pragma unroll
    for (int h = 0; h < GMAX; h++) {
        if (h < G) {
            att_rope_head<VEC>(qx[h], lane_in, L, p, p.wq != nullptr, rl.wq, rl);
#pragma unroll
            for (int i = 0; i < VEC; i++) {
                qr[h][i] = qx[h][i] * p.scale;
                if (split == 0 && key_slot == 0)
                    p.q_out[(int64_t)q0 * p.q_stride + (int64_t)(kvh * G + h) * D + lane_in * VEC +
                            i] = qx[h][i];
            }
        }
    }
    // The cache is written here (the op's prologue): its pointers are const for the attention.
    TC *kc = (TC *)p.k_cache, *vc = (TC *)p.v_cache;
    const int64_t at = ((int64_t)slot * p.n_kv_heads + kvh) * D;
    const bool slot_ok = slot >= 0 && slot < p.n_slots;
    const int r = first + last;
    if (__any_sync(0xffffffffu, ku >= 0)) { // this warp holds the new key's lanes
        att_rope_head<VEC>(kx, lane_in, L, p, p.wk != nullptr, rl.wk, rl);
        int blk = 0;
#pragma unroll
        for (int u = 0; u < ATT_UNROLL; u++)
            if (u == ku)
                blk = kblk[u];
        if (ku >= 0 && slot_ok && (int64_t)blk * bs + att_key_slot(p, r) == slot) {
            const uint4 k16 = att_pack16<TC, VEC>(kx);
#pragma unroll
            for (int u = 0; u < ATT_UNROLL; u++)
                if (u == ku)
                    kr[u][0] = k16;
            *(uint4 *)(kc + at + lane_in * VEC) = k16;
        }
    }
    int vblk_last = 0;
#pragma unroll
    for (int u = 0; u < ATT_UNROLL; u++)
        if (u == vu)
            vblk_last = vblk[u];
    if (vu >= 0 && slot_ok && (int64_t)vblk_last * bs + att_key_slot(p, r) == slot) {
        const uint4 v16 = att_pack16<TC, VEC>(vx);
#pragma unroll
        for (int u = 0; u < ATT_UNROLL; u++)
            if (u == vu)
                vr[u] = v16;
        *(uint4 *)(vc + at + cc * VEC) = v16;
    }
}

// Decode of splits short enough that each of the split's keys is one K load
// and one V load of some thread (att_decode_short_keys): what depends on no
// other load (q_start, seq_lens and the block-table entries of the thread's
// keys, read whatever the context length) goes out at once, then q and every
// K and V row of the split at once. A block so waits on two memory round
// trips before it computes, where att_decode_pipe_kernel waits on four
// (q_start, the table, K, V); at batch 1 decode attention is nothing but
// that latency. Round trip 1 reads the batch's metadata, which only uploads
// write (cuda_common.cuh), so it goes out before cuda_pdl_sync, during the
// q|k|v GEMV's tail. With the prologue so does round trip 2's K and V: the
// GEMV writes no cache, every other row of this layer's cache was written
// by kernels that have finished (the GEMV's own sync waited for them), and
// the new key's row this kernel writes itself. Loads before the sync go
// through L2 only (__ldcg), the point where other SMs' writes meet. Only q
// and the q|k|v rows then wait for the sync: one round trip after the GEMV
// (early_loads; without it the sync comes first).
template <typename TC, int GMAX, bool CLUSTER>
static __global__ void __launch_bounds__(ATT_THREADS)
    att_decode_short_kernel(const struct att_params p)
{
    // Where the sync goes: 0 first, 1 after the metadata, 2 after K and V too.
    const int sync_at = !p.early_loads ? 0 : p.qkv ? 2 : 1;
    if (sync_at == 0)
        cuda_pdl_sync();
    extern __shared__ float smem[];
    constexpr int VEC = 16 / (int)sizeof(TC);
    constexpr int CHMAX = sizeof(TC) == 4 ? 2 : 1;
    const int D = p.head_dim, G = p.group, bs = p.block_size;
    const int split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
    const int n_cc = D / VEC, n_kg = ATT_THREADS / n_cc;
    const int L = min(32, n_cc), CH = n_cc / L;
    const int lane_in = threadIdx.x % L, key_slot = threadIdx.x / L;
    const int keys_per_pass = ATT_THREADS / L;
    const int cc = threadIdx.x % n_cc, kg = threadIdx.x / n_cc;
    const int k_begin = split * p.split_len;
    const int blk0 = k_begin / bs, first = k_begin - blk0 * bs;
    const int32_t *bt = p.block_tables + (int64_t)seq * p.bt_stride;

    // The prologue's norm weights and frequencies go out first, with round
    // trip 1: they depend on nothing.
    att_rope_lane<VEC> rl;
    if (p.qkv)
        att_rope_lane_consts<VEC>(p, lane_in, L, rl);

    // Round trip 1. Key kk of the split sits at r = first + kk of its blocks.
    const int q0 = __ldcg(p.q_start + seq), q1 = __ldcg(p.q_start + seq + 1);
    const int ctx = __ldcg(p.seq_lens + seq);
    int kblk[ATT_UNROLL], vblk[ATT_UNROLL];
#pragma unroll
    for (int u = 0; u < ATT_UNROLL; u++) {
        const int kk = u * keys_per_pass + key_slot, vk = kg + u * n_kg;
        const int kb = blk0 + att_key_block(p, first + kk);
        const int vb = blk0 + att_key_block(p, first + vk);
        kblk[u] = kk < p.split_len && kb < p.bt_cols ? __ldcg(bt + kb) : 0;
        vblk[u] = vk < p.split_len && kg < n_kg && vb < p.bt_cols ? __ldcg(bt + vb) : 0;
    }
    if (sync_at == 1) // the new key's row comes from the kernel before (qkv_rope_store)
        cuda_pdl_sync();
    if (q1 - q0 != 1)
        return; // the whole cluster: q0, q1 are the sequence's
    const int n_keys = max(min(ctx, k_begin + p.split_len) - k_begin, 0);
    float *ps = smem;                    // [G][split_len]: scores, then probabilities
    float *ms = ps + GMAX * p.split_len; // [G]
    float *ls = ms + GMAX;               // [G]
    float *red = ls + GMAX;              // [key groups][G][D] partial P.V

    // Round trip 2: q, and the K and V rows of the thread's keys.
    const TC *kc = (const TC *)p.k_cache, *vc = (const TC *)p.v_cache;
    const int64_t kv_row = (int64_t)p.n_kv_heads * D, head_off = (int64_t)kvh * D;
    uint4 kr[ATT_UNROLL][CHMAX], vr[ATT_UNROLL];
#pragma unroll
    for (int u = 0; u < ATT_UNROLL; u++) {
        const int kk = u * keys_per_pass + key_slot, vk = kg + u * n_kg;
        if (kk < n_keys) {
            const int r = first + kk;
            const int slot = att_key_slot(p, r);
            const TC *row = kc + ((int64_t)kblk[u] * bs + slot) * kv_row + head_off;
#pragma unroll
            for (int c = 0; c < CHMAX; c++)
                if (c < CH)
                    kr[u][c] = __ldcg((const uint4 *)(row + (lane_in + c * L) * VEC));
        }
        if (kg < n_kg && vk < n_keys) {
            const int r = first + vk;
            const int slot = att_key_slot(p, r);
            vr[u] = __ldcg((const uint4 *)(vc + ((int64_t)vblk[u] * bs + slot) * kv_row + head_off +
                                           cc * VEC));
        }
    }
    // With the K and V rows in flight: the new token's slot and rotation.
    if (p.qkv)
        att_rope_lane_angles<VEC>(p, q0, rl);
    if (sync_at == 2) // q|k|v rows: the GEMV before writes them
        cuda_pdl_sync();
    float qr[GMAX][CHMAX * VEC];
    if (p.qkv) { // the prologue (one chunk a lane): q and the new key from the q|k|v rows
        att_decode_rope_prologue<TC, GMAX, CHMAX>(p, q0, kvh, split, ctx - 1 - k_begin, first,
                                                  lane_in, L, key_slot, keys_per_pass, cc, kg, n_kg,
                                                  kblk, vblk, rl, qr, kr, vr);
    } else {
        att_decode_load_q<TC, GMAX, CHMAX>(p, q0, kvh, lane_in, L, CH, qr);
    }

    // Scores.
#pragma unroll
    for (int u = 0; u < ATT_UNROLL; u++) {
        const int kk = u * keys_per_pass + key_slot;
        att_decode_score<TC, GMAX, CHMAX>(kr[u], qr, kk < n_keys, kk, L, CH, lane_in, G, ps,
                                          p.split_len);
    }
    __syncthreads();
    att_split_softmax(ps, p.split_len, n_keys, G, ms, ls);
    __syncthreads();

    // P.V from the V rows already in registers.
    if (kg < n_kg) {
        float acc[GMAX][VEC];
#pragma unroll
        for (int h = 0; h < GMAX; h++)
#pragma unroll
            for (int i = 0; i < VEC; i++)
                acc[h][i] = 0.0f;
#pragma unroll
        for (int u = 0; u < ATT_UNROLL; u++) {
            const int vk = kg + u * n_kg;
            if (vk < n_keys)
                att_decode_pv<TC, GMAX>(vr[u], ps, p.split_len, vk, G, acc);
        }
        att_decode_store_red<GMAX, VEC>(acc, red, kg, cc, G, D);
    }
    __syncthreads();
    if constexpr (CLUSTER)
        att_split_merge_cluster(p, red, n_kg, kvh, q0, n_keys, ms, ls);
    else
        att_split_write(p, red, n_kg, kvh, q0, split, n_keys, ms, ls);
}

// Decode on tensor cores, for f16/bf16 caches and batches that keep every
// split long (ATT_MMA_SPLIT_MIN keys or more): at many sequences the CUDA-core
// kernels above spend more time converting, multiplying and reducing than
// reading (H200, 64 sequences of ~600 keys: 73 us a layer at G = 2 and 122 us
// at G = 4 for what reads in 37 us). FlashAttention-2's decode in registers:
// each warp walks 16-key tiles of the split with its own online softmax,
//   S [16 heads (G used) x 8 keys] = Q [16 x 16 dims] . K^T [16 dims x 8 keys],
//      summed over the 16-dim chunks, for each 8-key half of the tile;
//   O^T [16 dims x 8 heads] += V^T [16 dims x 16 keys] . P^T [16 keys x 8 heads],
// the C fragment of S being, packed, the B fragment of P^T as it stands. Q and P go in
// as two operands each (tc_split: value and rounding error), so scores and
// weights keep ~16+ significant bits as in the f32 kernels; K and V enter as
// stored. Nothing passes through shared memory but the merge of the warps:
//   K: lane (n = lane / 4, t = lane % 4) loads 16 bytes of key rows n and
//      n + 8 at dims 32j + 8t .. + 7; since a dot product does not care in
//      which order its dims are summed, k-slots 2t, 2t+1 / 2t+8, 2t+9 of the
//      mma over chunk 2j (2j + 1) are dims 32j + 8t + 0,1 / 2,3 (4,5 / 6,7),
//      and q's fragments follow the same map;
//   V: lane (n, t) loads 16 bytes of key rows 2t, 2t+1, 2t+8, 2t+9 at dims
//      8(n + 8i) .. + 7; the mma over (i, q) takes elements q and q + 4 of
//      each as its A rows n and n + 8, so those output rows are dims
//      8(n + 8i) + q and + 4 (byte_perm pairs two keys' element).
// Rows 8-15 of Q are zero: m16 holds up to 8 heads of a group.
#define ATT_MMA_WARPS 4
#define ATT_MMA_SPLIT_MIN (16 * ATT_MMA_WARPS)
// MINB: blocks an SM must hold (registers: 2 leave 184 a thread at D = 128,
// 3 cap them at 168 with a few spills, for 12 warps with loads in flight;
// H200, 64 sequences of 576 keys, f16: 72.5 -> 66.3 us at G = 2, 76.8 ->
// 68.5 us at G = 4, so 3 is the default for splits of up to 512 keys;
// longer ones take 2, see att_decode_mma_launch).
// With STAGES > 0 the K and V rows of a warp's next tiles come through
// shared memory: each warp copies its own tiles with cp.async, STAGES - 1
// tiles ahead of the one it multiplies, so that its loads stay in flight
// while it computes (without, a warp waits for each tile's rows and then
// computes with nothing in flight: H200, 64 sequences of ~600 keys, 50% of
// the read bandwidth at 12 warps an SM). A stage is the tile's K [16 keys][D]
// and V [16 keys][D], 16-byte chunks XOR-swizzled per row so that the
// fragment loads below (the same lanes and chunks as the register path's
// global loads) hit distinct banks: K chunk c of key row r at c ^ 4(r & 1)
// (a quarter-warp reads rows g, g + 1 at chunks t + 4j), V at c ^ 2((r / 2) & 3)
// (rows 2t + const at chunks g + 8i).
template <int D> struct att_mma_stage {
    static constexpr int CHUNKS = D / 8;     // 16-byte chunks of a key row
    static constexpr int ELEMS = 2 * 16 * D; // 16-bit elements: K then V
    static __device__ __forceinline__ int k_at(int r, int c)
    {
        return r * D + 8 * (c ^ ((r & 1) << 2));
    }
    static __device__ __forceinline__ int v_at(int r, int c)
    {
        return 16 * D + r * D + 8 * (c ^ (((r >> 1) & 3) << 1));
    }
};

// Copies tile `tile` (16 keys from key 16 tile of the split) into stage st;
// keys past n_keys are zero (their V must not be NaN: P is 0 there).
template <typename TC, int D>
static __device__ __forceinline__ void
att_mma_copy_tile(const struct att_params &p, const TC *kc, const TC *vc, const int32_t *bts,
                  int first, int tile, int n_keys, uint16_t *st, int lane, int64_t kv_row,
                  int64_t head_off)
{
    using S = att_mma_stage<D>;
    constexpr int ROWS_PER_PASS = CUDA_WARP / S::CHUNKS; // 2 at D = 128, 4 at 64
#pragma unroll
    for (int u = 0; u < 16 / ROWS_PER_PASS; u++) {
        const int r = u * ROWS_PER_PASS + lane / S::CHUNKS, c = lane % S::CHUNKS;
        const int kk = tile * 16 + r;
        const bool valid = kk < n_keys;
        const int64_t off =
            valid ? (att_split_row(p, kc, bts, first + kk, kv_row, head_off) - kc) + 8 * c : 0;
        tc_cp_async16(st + S::k_at(r, c), kc + off, valid);
        tc_cp_async16(st + S::v_at(r, c), vc + off, valid);
    }
}

template <typename TC, int D, int MINB, int STAGES>
static __global__ void __launch_bounds__(ATT_MMA_WARPS *CUDA_WARP, MINB)
    att_decode_mma_kernel(const struct att_params p)
{
    cuda_pdl_sync();
    constexpr int NJ = D / 32; // 16-byte K loads per lane per key row
    constexpr int NI = D / 64; // 16-byte V loads per lane per key row
    using S = att_mma_stage<D>;
    // Floats before s_m: each warp's O for the merge, or the stages they
    // alias (the merge comes after a barrier that ends every warp's tiles).
    constexpr int O_FLOATS = ATT_MMA_WARPS * 8 * D;
    constexpr int STAGE_FLOATS = ATT_MMA_WARPS * STAGES * S::ELEMS / 2;
    constexpr int AREA = O_FLOATS > STAGE_FLOATS ? O_FLOATS : STAGE_FLOATS;
    extern __shared__ float smem[];
    const int G = p.group;
    const int split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
    const int q0 = p.q_start[seq];
    if (p.q_start[seq + 1] - q0 != 1)
        return;
    const int k_begin = split * p.split_len;
    const int n_keys = att_split_n_keys(p, seq, k_begin);
    const int lane = threadIdx.x % CUDA_WARP, warp = threadIdx.x / CUDA_WARP;
    const int g = lane >> 2, t = lane & 3;
    float *s_o = smem;                                   // [warps][8][D] each warp's O
    float *s_m = smem + AREA;                            // [warps][8] its running max
    float *s_l = s_m + ATT_MMA_WARPS * 8;                // [warps][8] its sum
    int32_t *bts = (int32_t *)(s_l + ATT_MMA_WARPS * 8); // [split blocks]
    uint16_t *stages = (uint16_t *)smem + (size_t)warp * STAGES * S::ELEMS; // this warp's
    const int first = att_split_table_load(p, seq, k_begin, n_keys, bts);

    // Q fragments of head g (zero past the group): qh/ql [j][0..1] feed the
    // mma over dim chunk 2j, [j][2..3] the one over 2j + 1 (a[0] and a[2]).
    uint32_t qh[NJ][4], ql[NJ][4];
    {
        const bool hv = g < G;
        const float *qrow =
            p.q + (int64_t)q0 * p.q_stride + (int64_t)(kvh * G + (hv ? g : 0)) * D + 8 * t;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            float4 a = hv ? *(const float4 *)(qrow + 32 * j) : make_float4(0, 0, 0, 0);
            float4 b = hv ? *(const float4 *)(qrow + 32 * j + 4) : make_float4(0, 0, 0, 0);
            tc_split<TC>(a.x * p.scale, a.y * p.scale, &qh[j][0], &ql[j][0]);
            tc_split<TC>(a.z * p.scale, a.w * p.scale, &qh[j][1], &ql[j][1]);
            tc_split<TC>(b.x * p.scale, b.y * p.scale, &qh[j][2], &ql[j][2]);
            tc_split<TC>(b.z * p.scale, b.w * p.scale, &qh[j][3], &ql[j][3]);
        }
    }
    __syncthreads();

    const TC *kc = (const TC *)p.k_cache, *vc = (const TC *)p.v_cache;
    const int64_t kv_row = (int64_t)p.n_kv_heads * D, head_off = (int64_t)kvh * D;
    float m_run = -INFINITY, l_run = 0.0f; // head g, over this lane's keys
    float o[NI][4][4]; // O^T fragments [V chunk i][element pair q]: heads 2t, 2t+1
#pragma unroll
    for (int i = 0; i < NI; i++)
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                o[i][q][c] = 0.0f;

    const int n_tiles = (n_keys + 15) / 16;
    if constexpr (STAGES > 0) {
#pragma unroll
        for (int s = 0; s + 1 < STAGES; s++) {
            const int tile = warp + s * ATT_MMA_WARPS;
            if (tile < n_tiles)
                att_mma_copy_tile<TC, D>(p, kc, vc, bts, first, tile, n_keys, stages + s * S::ELEMS,
                                         lane, kv_row, head_off);
            tc_cp_async_commit();
        }
    }
    for (int tile = warp, it = 0; tile < n_tiles; tile += ATT_MMA_WARPS, it++) {
        const int kt = tile * 16;
        uint4 kr[2][NJ], vr[4][NI];
        if constexpr (STAGES > 0) {
            const int ahead = tile + (STAGES - 1) * ATT_MMA_WARPS;
            if (ahead < n_tiles)
                att_mma_copy_tile<TC, D>(p, kc, vc, bts, first, ahead, n_keys,
                                         stages + ((it + STAGES - 1) % STAGES) * S::ELEMS, lane,
                                         kv_row, head_off);
            tc_cp_async_commit();
            tc_cp_async_wait<STAGES - 1>(); // this tile's copies, by this lane
            __syncwarp();                   // and by the warp's other lanes
            const uint16_t *st = stages + (it % STAGES) * S::ELEMS;
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int j = 0; j < NJ; j++)
                    kr[h][j] = *(const uint4 *)(st + S::k_at(g + 8 * h, t + 4 * j));
            // V's fragments are read after the scores (fewer live registers).
        } else {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int kk = kt + g + 8 * h;
            const TC *row = nullptr;
            if (kk < n_keys)
                row = att_split_row(p, kc, bts, first + kk, kv_row, head_off) + 8 * t;
#pragma unroll
            for (int j = 0; j < NJ; j++)
                kr[h][j] = row ? *(const uint4 *)(row + 32 * j) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int v = 0; v < 4; v++) {
            const int kk = kt + 2 * t + (v & 1) + 8 * (v >> 1);
            const TC *row = nullptr;
            if (kk < n_keys)
                row = att_split_row(p, vc, bts, first + kk, kv_row, head_off) + 8 * g;
#pragma unroll
            for (int i = 0; i < NI; i++)
                vr[v][i] = row ? *(const uint4 *)(row + 64 * i) : make_uint4(0, 0, 0, 0);
        }
        }

        // Scores of head g: s[h][0..1] for keys kt + 8h + 2t + 0..1.
        float s[2][4];
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
            for (int c = 0; c < 4; c++)
                s[h][c] = 0.0f;
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                const uint32_t ah0[4] = {qh[j][0], 0u, qh[j][1], 0u};
                const uint32_t al0[4] = {ql[j][0], 0u, ql[j][1], 0u};
                const uint32_t ah1[4] = {qh[j][2], 0u, qh[j][3], 0u};
                const uint32_t al1[4] = {ql[j][2], 0u, ql[j][3], 0u};
                tc_mma<TC>(s[h], ah0, kr[h][j].x, kr[h][j].y);
                tc_mma<TC>(s[h], al0, kr[h][j].x, kr[h][j].y);
                tc_mma<TC>(s[h], ah1, kr[h][j].z, kr[h][j].w);
                tc_mma<TC>(s[h], al1, kr[h][j].z, kr[h][j].w);
            }
        }
        float sv[4] = {s[0][0], s[0][1], s[1][0], s[1][1]};
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (kt + 2 * t + (e & 1) + 8 * (e >> 1) >= n_keys)
                sv[e] = -INFINITY;

        // Online softmax of head g over the tile; the tile's first key is
        // valid, so m_new is finite.
        float mx = fmaxf(fmaxf(sv[0], sv[1]), fmaxf(sv[2], sv[3]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run, mx);
        const float alpha = expf(m_run - m_new);
        float pv[4];
#pragma unroll
        for (int e = 0; e < 4; e++)
            pv[e] = expf(sv[e] - m_new);
        l_run = l_run * alpha + (pv[0] + pv[1]) + (pv[2] + pv[3]);
        m_run = m_new;
        // This lane's O^T columns are heads 2t and 2t + 1: their rescaling
        // factors come from lanes 8t and 8t + 4 (g = 2t, 2t + 1).
        const float alpha0 = __shfl_sync(0xffffffffu, alpha, 8 * t);
        const float alpha1 = __shfl_sync(0xffffffffu, alpha, 8 * t + 4);
#pragma unroll
        for (int i = 0; i < NI; i++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                o[i][q][0] *= alpha0;
                o[i][q][1] *= alpha1;
                o[i][q][2] *= alpha0;
                o[i][q][3] *= alpha1;
            }
        // P^T as B operands: b0 = P(g, keys 2t..2t+1), b1 = P(g, keys 2t+8..2t+9).
        uint32_t ph0, pl0, ph1, pl1;
        tc_split<TC>(pv[0], pv[1], &ph0, &pl0);
        tc_split<TC>(pv[2], pv[3], &ph1, &pl1);

        if constexpr (STAGES > 0) {
            const uint16_t *st = stages + (it % STAGES) * S::ELEMS;
#pragma unroll
            for (int v = 0; v < 4; v++)
#pragma unroll
                for (int i = 0; i < NI; i++)
                    vr[v][i] =
                        *(const uint4 *)(st + S::v_at(2 * t + (v & 1) + 8 * (v >> 1), g + 8 * i));
            __syncwarp(); // the stage is free for the copy the next tile issues
        }
        // O^T [16 dims x 8 heads] += V^T [16 dims x 16 keys] . P^T: the A rows
        // g and g + 8 are elements q and q + 4 of this lane's V chunk i.
#pragma unroll
        for (int i = 0; i < NI; i++) {
            const uint32_t *v0 = (const uint32_t *)&vr[0][i], *v1 = (const uint32_t *)&vr[1][i];
            const uint32_t *v2 = (const uint32_t *)&vr[2][i], *v3 = (const uint32_t *)&vr[3][i];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int w = q >> 1;
                const uint32_t sel = (q & 1) ? 0x7632u : 0x5410u;
                const uint32_t a[4] = {
                    __byte_perm(v0[w], v1[w], sel), __byte_perm(v0[w + 2], v1[w + 2], sel),
                    __byte_perm(v2[w], v3[w], sel), __byte_perm(v2[w + 2], v3[w + 2], sel)};
                tc_mma<TC>(o[i][q], a, ph0, ph1);
                tc_mma<TC>(o[i][q], a, pl0, pl1);
            }
        }
    }

    // Merge the warps: each writes its O (heads 2t, 2t + 1 at dims
    // 8(g + 8i) + q and + 4), its maxima and sums; then the block writes the
    // split's result.
    if constexpr (STAGES > 0)
        __syncthreads(); // s_o aliases the other warps' stages
    l_run += __shfl_xor_sync(0xffffffffu, l_run, 1);
    l_run += __shfl_xor_sync(0xffffffffu, l_run, 2);
#pragma unroll
    for (int i = 0; i < NI; i++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int d = 8 * (g + 8 * i) + q;
            float *w0 = s_o + (warp * 8 + 2 * t) * D, *w1 = w0 + D;
            w0[d] = o[i][q][0];
            w1[d] = o[i][q][1];
            w0[d + 4] = o[i][q][2];
            w1[d + 4] = o[i][q][3];
        }
    if (t == 0) {
        s_m[warp * 8 + g] = m_run;
        s_l[warp * 8 + g] = l_run;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
        const int h = idx / D, d = idx % D;
        float m = -INFINITY;
#pragma unroll
        for (int w = 0; w < ATT_MMA_WARPS; w++)
            m = fmaxf(m, s_m[w * 8 + h]);
        float acc = 0.0f, l = 0.0f;
        if (m != -INFINITY) {
#pragma unroll
            for (int w = 0; w < ATT_MMA_WARPS; w++) {
                const float mw = s_m[w * 8 + h];
                if (mw != -INFINITY) {
                    const float f = expf(mw - m);
                    acc += s_o[(w * 8 + h) * D + d] * f;
                    l += s_l[w * 8 + h] * f;
                }
            }
        }
        const int head = kvh * G + h;
        if (p.n_splits == 1) {
            const float v = l > 0.0f ? acc / l : 0.0f;
            p.dst[(int64_t)q0 * p.dst_stride + (int64_t)head * D + d] = v;
            if (p.split_hi)
                cuda_split_store(p.split_hi + (int64_t)q0 * p.split_k + (int64_t)head * D + d,
                                 p.split_lo_off, v);
        } else {
            const int64_t row = ((int64_t)split * p.n_tokens + q0) * p.n_heads + head;
            p.part_acc[row * D + d] = acc;
            if (d == 0) {
                p.part_ml[row * 2] = m;
                p.part_ml[row * 2 + 1] = l;
            }
        }
    }
}

// Merges the split-K partial states of one (token, head) per block.
static __global__ void att_combine_kernel(const struct att_params p)
{
    cuda_pdl_sync();
    __shared__ float m_l[2];
    const int64_t tok = blockIdx.x;
    const int h = blockIdx.y;
    if (threadIdx.x < CUDA_WARP) {
        float l;
        const float m = att_merge_ml(p, tok, h, &l);
        if (threadIdx.x == 0) {
            m_l[0] = m;
            m_l[1] = l;
        }
    }
    __syncthreads();
    for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
        const float o = att_merge_elem(p, tok, h, d, m_l[0]);
        const float v = m_l[1] > 0.0f ? o / m_l[1] : 0.0f;
        p.dst[tok * p.dst_stride + (int64_t)h * p.head_dim + d] = v;
        if (p.split_hi)
            cuda_split_store(p.split_hi + tok * p.split_k + (int64_t)h * p.head_dim + d,
                             p.split_lo_off, v);
    }
}

// ---- launchers ----

static size_t att_smem_bytes(int head_dim)
{
    const int D = head_dim;
    return sizeof(float) *
           (size_t)(ATT_ROWS * D + ATT_KT * (D + 1) + ATT_KT * D + ATT_ROWS * ATT_KT +
                    ATT_ROWS * D + 3 * ATT_ROWS);
}

// Raises a kernel's dynamic shared-memory limit once per size (engine thread).
template <typename K> static cudaError_t att_smem_optin(K kernel, size_t smem, size_t *done)
{
    if (smem <= *done)
        return cudaSuccess;
    cudaError_t rc =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (rc == cudaSuccess)
        *done = smem;
    return rc;
}

template <typename TC>
static cudaError_t att_launch(const struct att_params *p, int n_seqs, int n_tiles,
                              cudaStream_t stream)
{
    static size_t smem_done;
    const size_t smem = att_smem_bytes(p->head_dim);
    cudaError_t rc = att_smem_optin(att_kernel<TC>, smem, &smem_done);
    if (rc != cudaSuccess)
        return rc;
    const dim3 grid((unsigned)n_tiles, (unsigned)(n_seqs * p->n_kv_heads * p->n_hchunks),
                    (unsigned)p->n_splits);
    cuda_launch(att_kernel<TC>, grid, ATT_THREADS, smem, stream, *p);
    rc = cudaGetLastError();
    if (rc != cudaSuccess || p->n_splits == 1)
        return rc;
    cuda_launch(att_combine_kernel, dim3((unsigned)p->n_tokens, (unsigned)p->n_heads), 128, 0,
                stream, *p);
    return cudaGetLastError();
}

static size_t att_decode_smem_bytes(const struct att_params *p, int gmax)
{
    const int n_kg = ATT_THREADS / (p->head_dim / 8);
    return sizeof(float) * ((size_t)gmax * p->head_dim + (size_t)gmax * p->split_len +
                            2 * (size_t)gmax + (size_t)n_kg * p->group * p->head_dim);
}

// A decode kernel over (split, KV head, sequence) with smem bytes of dynamic
// shared memory (its limit raised once per size, *smem_done), then the merge
// of the splits when there are several.
template <typename K>
static cudaError_t att_decode_grid_launch(K kernel, size_t smem, size_t *smem_done,
                                          const struct att_params *p, int n_seqs,
                                          cudaStream_t stream)
{
    cudaError_t rc = att_smem_optin(kernel, smem, smem_done);
    if (rc != cudaSuccess)
        return rc;
    const dim3 grid((unsigned)p->n_splits, (unsigned)p->n_kv_heads, (unsigned)n_seqs);
    cuda_launch(kernel, grid, ATT_THREADS, smem, stream, *p);
    rc = cudaGetLastError();
    if (rc != cudaSuccess || p->n_splits == 1)
        return rc;
    cuda_launch(att_combine_kernel, dim3((unsigned)p->n_tokens, (unsigned)p->n_heads), 128, 0,
                stream, *p);
    return cudaGetLastError();
}

template <typename TC, int GMAX>
static cudaError_t att_decode_launch_g(const struct att_params *p, int n_seqs, cudaStream_t stream)
{
    static size_t smem_done;
    return att_decode_grid_launch(att_decode_kernel<TC, GMAX>, att_decode_smem_bytes(p, GMAX),
                                  &smem_done, p, n_seqs, stream);
}

static size_t att_decode_pipe_smem_bytes(const struct att_params *p, int gmax, int vec)
{
    const int n_kg = ATT_THREADS / (p->head_dim / vec);
    const size_t n_blk = (size_t)p->split_len / (size_t)p->block_size + 2;
    return sizeof(float) * ((size_t)gmax * p->split_len + 2 * (size_t)gmax +
                            (size_t)n_kg * gmax * p->head_dim) +
           sizeof(int32_t) * n_blk;
}

template <typename TC, int GMAX>
static cudaError_t att_decode_pipe_launch(const struct att_params *p, int n_seqs,
                                          cudaStream_t stream)
{
    static size_t smem_done;
    return att_decode_grid_launch(att_decode_pipe_kernel<TC, GMAX>,
                                  att_decode_pipe_smem_bytes(p, GMAX, 16 / (int)sizeof(TC)),
                                  &smem_done, p, n_seqs, stream);
}

template <typename TC, int GMAX>
static cudaError_t att_decode_short_launch(const struct att_params *p, int n_seqs,
                                           cudaStream_t stream)
{
    const size_t smem = att_decode_pipe_smem_bytes(p, GMAX, 16 / (int)sizeof(TC));
    if (!p->cluster_merge) {
        static size_t smem_done;
        return att_decode_grid_launch(att_decode_short_kernel<TC, GMAX, false>, smem, &smem_done, p,
                                      n_seqs, stream);
    }
    // Clusters of the n_splits blocks of each (KV head, sequence): no merge kernel.
    static size_t smem_done_cluster;
    void (*kernel)(const struct att_params) = att_decode_short_kernel<TC, GMAX, true>;
    cudaError_t rc = att_smem_optin(kernel, smem, &smem_done_cluster);
    if (rc != cudaSuccess)
        return rc;
    return cuda_launch_cluster(
        kernel, dim3((unsigned)p->n_splits, (unsigned)p->n_kv_heads, (unsigned)n_seqs),
        dim3(ATT_THREADS), smem, stream, dim3((unsigned)p->n_splits), *p);
}

static size_t att_decode_mma_smem_bytes(const struct att_params *p, int stages)
{
    const size_t n_blk = (size_t)p->split_len / (size_t)p->block_size + 2;
    const size_t o_bytes = sizeof(float) * ATT_MMA_WARPS * 8 * (size_t)p->head_dim;
    const size_t stage_bytes = (size_t)ATT_MMA_WARPS * stages * 2 * 16 * p->head_dim * 2;
    return (o_bytes > stage_bytes ? o_bytes : stage_bytes) + sizeof(float) * ATT_MMA_WARPS * 8 * 2 +
           sizeof(int32_t) * n_blk;
}

template <typename TC, int D, int MINB, int STAGES>
static cudaError_t att_decode_mma_launch_d(const struct att_params *p, int n_seqs,
                                           cudaStream_t stream)
{
    static_assert(ATT_MMA_WARPS * CUDA_WARP == ATT_THREADS, "att_decode_grid_launch's block");
    static size_t smem_done;
    return att_decode_grid_launch(att_decode_mma_kernel<TC, D, MINB, STAGES>,
                                  att_decode_mma_smem_bytes(p, STAGES), &smem_done, p, n_seqs,
                                  stream);
}

// Stages 2: each warp's next tile in flight while it computes (H200, 0.6B
// shape, 64 sequences: 15,656-16,067 -> 16,557-16,861 tok/s; 3 gained
// nothing at two blocks an SM, with splits of at most 256 keys). With
// splits of up to 1024 keys (att_decode_mma_split_max) a block walks a
// whole sequence of 640 keys, and there two blocks an SM with two tiles in
// flight a warp are the fastest (H100, 0.6B shape, 64 x 512 + 128 tokens,
// f16 cache, tok/s: MINB 2 / 3 with stages 1: 19,540 / 17,850, stages 2:
// 20,305 / 18,855, stages 3 (MINB 2 only): 20,433), where with 256-key
// splits three blocks and stages 2 stay ahead (19,281 against 18,702 for
// MINB 2, stages 3; level at 512 keys: 19,009 against 18,945). So splits
// longer than 512 keys take MINB 2 and stages 3, shorter ones MINB 3 and
// stages 2, unless VLLMC_CUDA_DECODE_MMA sets them (-1: chosen by length).
#define ATT_MMA_LONG_SPLIT 512 // keys: longer splits take MINB 2 and stages 3
static int att_decode_mma_min_blocks = -1, att_decode_mma_stages = -1;

template <typename TC>
static cudaError_t att_decode_mma_launch(const struct att_params *p, int n_seqs,
                                         cudaStream_t stream)
{
    const bool long_split = p->split_len > ATT_MMA_LONG_SPLIT;
    const int stages = att_decode_mma_stages >= 0 ? att_decode_mma_stages : long_split ? 3 : 2;
    const int min_blocks = att_decode_mma_min_blocks >= 0 ? att_decode_mma_min_blocks
                           : long_split                   ? 2
                                                          : 3;
    if (p->head_dim == 64)
        return stages >= 2 ? att_decode_mma_launch_d<TC, 64, 3, 2>(p, n_seqs, stream)
                           : att_decode_mma_launch_d<TC, 64, 3, 0>(p, n_seqs, stream);
    if (stages >= 3)
        return att_decode_mma_launch_d<TC, 128, 2, 3>(p, n_seqs, stream);
    if (stages == 2)
        return min_blocks >= 3 ? att_decode_mma_launch_d<TC, 128, 3, 2>(p, n_seqs, stream)
                               : att_decode_mma_launch_d<TC, 128, 2, 2>(p, n_seqs, stream);
    if (min_blocks >= 3)
        return att_decode_mma_launch_d<TC, 128, 3, 0>(p, n_seqs, stream);
    return att_decode_mma_launch_d<TC, 128, 2, 0>(p, n_seqs, stream);
}

// The longest split att_decode_short_kernel takes: the keys one pass of its
// K loads and of its V loads covers (16 for an f32 cache at head_dim 128, 32
// for f16/bf16).
static int att_decode_short_keys(int head_dim, int elem_bytes)
{
    const int n_cc = head_dim / (16 / elem_bytes);
    const int lanes = n_cc < 32 ? n_cc : 32;
    const int keys_per_pass = ATT_THREADS / lanes, n_kg = ATT_THREADS / n_cc;
    return (keys_per_pass < n_kg ? keys_per_pass : n_kg) * ATT_UNROLL;
}

// Which kernels decode batches take (VLLMC_CUDA_DECODE_ATTENTION): 4 (the
// default) as 3 with 2-8 short splits merged inside their cluster on sm_90;
// 3 the short-split kernel where the split fits it, else the pipelined one;
// 2 the pipelined one only; 1 the first decode kernel.
static bool att_decode_pipe_enabled = true, att_decode_short_enabled = true;
// Whether the short-split kernel's 2-8 splits of a (KV head, sequence) run as
// one thread-block cluster that merges them (sm_90+; mode 4, the default).
static bool att_decode_cluster_enabled = true;

// Whether a decode batch of these splits takes the short-split kernel
// (att_decode_launch), for a cache of elem-byte elements.
static bool att_decode_takes_short(const struct att_params *p, int elem)
{
    return att_decode_short_enabled && p->group <= 8 && p->head_dim >= 32 &&
           p->split_len <= att_decode_short_keys(p->head_dim, elem);
}

template <typename TC>
static cudaError_t att_decode_launch(const struct att_params *p, int n_seqs, cudaStream_t stream)
{
    if (att_decode_takes_short(p, (int)sizeof(TC))) {
        if (p->group <= 2)
            return att_decode_short_launch<TC, 2>(p, n_seqs, stream);
        if (p->group <= 4)
            return att_decode_short_launch<TC, 4>(p, n_seqs, stream);
        return att_decode_short_launch<TC, 8>(p, n_seqs, stream);
    }
    if (att_decode_pipe_enabled && p->group <= 8 && p->head_dim >= 32) {
        if (p->group <= 2)
            return att_decode_pipe_launch<TC, 2>(p, n_seqs, stream);
        if (p->group <= 4)
            return att_decode_pipe_launch<TC, 4>(p, n_seqs, stream);
        return att_decode_pipe_launch<TC, 8>(p, n_seqs, stream);
    }
    if (p->group <= 4)
        return att_decode_launch_g<TC, 4>(p, n_seqs, stream);
    if (p->group <= 8)
        return att_decode_launch_g<TC, 8>(p, n_seqs, stream);
    return att_decode_launch_g<TC, 16>(p, n_seqs, stream);
}

// ---- provider ----

// q or dst: [n_tokens, n_heads, head_dim] f32 with dense heads, any token stride.
static bool att_rows_ok(const struct tensor *t)
{
    return t && t->location == TENSOR_DEVICE && t->dtype == DTYPE_F32 &&
           t->nb[0] == sizeof(float) && t->nb[1] == (size_t)t->ne[0] * sizeof(float) &&
           t->nb[2] % sizeof(float) == 0 && t->ne[3] == 1;
}

extern "C" bool cuda_attention_supports(const struct op_call *c)
{
    const struct tensor *q = c->src[0], *kc = c->src[1], *vc = c->src[2];
    const struct tensor *bt = c->src[3], *sl = c->src[4], *qsl = c->src[5];
    if (c->op != OP_ATTENTION || c->p.prologue || !att_rows_ok(q) || !att_rows_ok(c->dst) || !kc ||
        !vc)
        return false;
    if (!cuda_dtype_is_float(kc->dtype) || !cuda_tensor_dense_ok(kc, kc->dtype) ||
        !cuda_tensor_dense_ok(vc, kc->dtype) || !tensor_same_shape(kc, vc))
        return false;
    if (!cuda_tensor_rows_ok(bt, DTYPE_I32) || !cuda_tensor_dense_ok(sl, DTYPE_I32) ||
        !cuda_tensor_dense_ok(qsl, DTYPE_I32))
        return false;
    const int64_t D = q->ne[0], n_heads = q->ne[1], n_kv = kc->ne[1];
    const int64_t n_seqs = tensor_n_elements(sl);
    return D == kc->ne[0] && D <= ATT_HEAD_DIM_MAX && n_kv > 0 && n_heads % n_kv == 0 &&
           tensor_same_shape(q, c->dst) && tensor_n_elements(qsl) == n_seqs + 1 &&
           tensor_n_rows(bt) == n_seqs && n_seqs * n_heads <= 65535 &&
           q->ne[2] <= INT32_MAX;
}

// Whether decode-only batches take att_decode_kernel (cuda_attention_set_decode).
static bool att_decode_enabled = true;

extern "C" void cuda_attention_set_decode(int mode)
{
    att_decode_enabled = mode != 0;
    att_decode_pipe_enabled = mode >= 2;
    att_decode_short_enabled = mode >= 3;
    att_decode_cluster_enabled = mode >= 4;
}

// Keys per decode split at most, and the blocks per SM the split aims for
// (VLLMC_CUDA_DECODE_SPLIT=MAX_KEYS,BLOCKS_PER_SM at backend creation). On
// the H200, 0.6B shape, 64 sequences of 512 + 128 tokens: splits of at most
// 128 keys decoded 11,595 tok/s against 10,851 with 512 (more blocks, each
// with a shorter serial walk); aiming at 8 blocks per SM instead of 2 cut a
// single 4096-token sequence into 32-key splits and slowed it 53 -> 88 us.
static int att_decode_split_max = 128, att_decode_waves = 2, att_decode_split_min = 0;

// When decode batches take att_decode_mma_kernel
// (VLLMC_CUDA_DECODE_MMA=MODE[,MAX_KEYS[,MINB[,STAGES]]]): 1 (default) where
// the cache is f16/bf16, head_dim 64 or 128, G <= 8 and the CUDA-core
// kernels' splits would stay ATT_MMA_SPLIT_MIN keys or longer (many
// sequences, or long contexts); 2 wherever it can; 0 never. Its own splits
// are at most att_decode_mma_split_max keys: 1024, so that at 64 sequences
// of a few hundred keys one split covers each (the grid of sequences x KV
// heads already covers the GPU twice) and no merge kernel runs (H100, 0.6B
// shape, 64 x 512 + 128 tokens, f16 cache: 19,272-19,304 tok/s with 256-key
// splits and their merge, 20,305-20,433 with one split; 512-key splits, two
// a sequence, 18,945-19,009).
#define ATT_MMA_SPLIT_MAX_DEFAULT 1024
static int att_decode_mma_mode = 1, att_decode_mma_split_max = ATT_MMA_SPLIT_MAX_DEFAULT;

extern "C" void cuda_attention_set_decode_mma(int mode, int max_keys, int min_blocks, int stages)
{
    if (stages == 1) // tiles straight into registers
        att_decode_mma_stages = 0;
    else if (stages >= 2 && stages <= 3)
        att_decode_mma_stages = stages;
    else if (stages == 0) // chosen by the split's length
        att_decode_mma_stages = -1;
    if (min_blocks >= 2 && min_blocks <= 3)
        att_decode_mma_min_blocks = min_blocks;
    else if (min_blocks == 0)
        att_decode_mma_min_blocks = -1;
    if (mode >= 0 && mode <= 2)
        att_decode_mma_mode = mode;
    if (max_keys == 0)
        att_decode_mma_split_max = ATT_MMA_SPLIT_MAX_DEFAULT;
    else if (max_keys >= ATT_MMA_SPLIT_MIN)
        for (att_decode_mma_split_max = ATT_MMA_SPLIT_MIN;
             att_decode_mma_split_max * 2 <= max_keys;)
            att_decode_mma_split_max *= 2;
}

static bool att_decode_mma_fits(const struct att_params *p, enum dtype cache_type)
{
    return att_decode_mma_mode > 0 && (cache_type == DTYPE_F16 || cache_type == DTYPE_BF16) &&
           p->group <= 8 && (p->head_dim == 64 || p->head_dim == 128) &&
           (uintptr_t)p->q % 16 == 0 && p->q_stride % 4 == 0;
}

extern "C" void cuda_attention_set_decode_split(int max_keys, int blocks_per_sm, int min_keys)
{
    if (max_keys >= 32)
        for (att_decode_split_max = 32; att_decode_split_max * 2 <= max_keys;)
            att_decode_split_max *= 2;
    if (blocks_per_sm >= 1)
        att_decode_waves = blocks_per_sm;
    if (min_keys >= 8)
        att_decode_split_min = min_keys;
}

// Keys per decode split: from max_keys, halved until the grid of (split, KV
// head, sequence) blocks covers the GPU att_decode_waves times, but not
// below min_keys.
static int att_decode_split_len(const struct cuda_device *dev, const struct att_params *p,
                                int n_seqs, int max_seq, int max_keys, int min_keys)
{
    int split_len = max_keys;
    while (split_len > min_keys &&
           (int64_t)n_seqs * p->n_kv_heads * ((max_seq + split_len - 1) / split_len) <
               att_decode_waves * dev->n_sms)
        split_len /= 2;
    return split_len;
}

// Whether the short-split kernel can run ATTENTION's prologue `pro` itself
// (att_decode_rope_prologue): one 16-byte chunk a lane, the whole head
// rotated, rotate-half partners a power-of-two lanes away, q the prologue's
// dst with q's strides.
static bool att_rope_prologue_fits(const struct att_params *p, const struct op_call *pro, int elem)
{
    const int vec = 16 / elem, n_cc = p->head_dim / vec, half_lanes = p->head_dim / 2 / vec;
    return n_cc <= 32 && pro->p.rope_dim == p->head_dim && p->head_dim % (2 * vec) == 0 &&
           (!pro->p.rope_neox || (half_lanes & (half_lanes - 1)) == 0);
}

// Points p at the prologue's operands (QKV_ROPE_STORE, op.h) for the kernel.
static void att_rope_prologue_set(struct att_params *p, const struct op_call *pro)
{
    const struct tensor *qkv = pro->src[0], *kc = pro->src[5], *wq = pro->src[3];
    p->qkv = (const float *)qkv->data;
    p->qkv_pitch = cuda_row_pitch(qkv);
    p->q_out = (float *)pro->dst->data;
    p->rope_pos = (const int32_t *)pro->src[1]->data;
    p->inv_freq = (const float *)pro->src[2]->data;
    p->wq = wq ? wq->data : nullptr;
    p->wk = wq ? pro->src[4]->data : nullptr;
    p->w_type = wq ? (int)wq->dtype : (int)DTYPE_F32;
    p->rope_slots = (const int32_t *)pro->src[7]->data;
    p->n_slots = kc->ne[3] * kc->ne[2];
    p->rope_eps = pro->p.eps;
    p->rope_neox = pro->p.rope_neox;
}

// ATTENTION's prologue as its own kernel, before the attention's (on the
// attention's backend, whatever the prologue's call names).
static enum vllmc_status att_prologue_run(const struct op_call *c)
{
    struct op_call store = *c->p.prologue;
    store.backend = c->backend;
    return cuda_qkv_rope_store_run(&store);
}

// Decode batches: keys split so that the grid covers the GPU about twice.
static enum vllmc_status att_decode_run(const struct op_call *c, struct cuda_device *dev,
                                        struct att_params *p, int n_seqs, int max_seq,
                                        enum dtype cache_type)
{
    struct err *err = dev->err;
    // The floor: what the short-split kernel takes in one pass (never under
    // 8 keys), or 32 keys where it is off, unless VLLMC_CUDA_DECODE_SPLIT sets one.
    const int elem = (int)dtype_info(cache_type)->type_size;
    int split_min = att_decode_split_min;
    if (split_min <= 0)
        split_min = att_decode_short_enabled ? att_decode_short_keys(p->head_dim, elem) : 32;
    if (split_min < 8)
        split_min = 8;
    int split_len = att_decode_split_len(dev, p, n_seqs, max_seq, att_decode_split_max, split_min);
    const bool mma = att_decode_mma_fits(p, cache_type) &&
                     (att_decode_mma_mode == 2 || split_len >= ATT_MMA_SPLIT_MIN);
    if (mma)
        split_len = att_decode_split_len(dev, p, n_seqs, max_seq, att_decode_mma_split_max,
                                         ATT_MMA_SPLIT_MIN);
    p->bs_shift = -1;
    for (int sh = 0; sh < 31; sh++)
        if (p->block_size == 1 << sh)
            p->bs_shift = sh;
    p->split_len = split_len;
    p->n_splits = (max_seq + split_len - 1) / split_len;
    if (p->n_splits < 1)
        p->n_splits = 1;
    if (p->n_splits > 1) {
        const size_t rows = (size_t)p->n_splits * (size_t)p->n_tokens * (size_t)p->n_heads;
        void *scratch = nullptr;
        enum vllmc_status rc =
            cuda_scratch(dev, rows * ((size_t)p->head_dim + 2) * sizeof(float), &scratch);
        if (rc)
            return rc;
        p->part_acc = (float *)scratch;
        p->part_ml = p->part_acc + rows * (size_t)p->head_dim;
    }
    if (p->n_splits > 1 || mma) {
        // The merge (or the tensor-core kernel, when one split covers every
        // sequence) writes the output: it also splits it for the o
        // projection's bf16 GEMM when that follows (at many sequences).
        const int64_t k = (int64_t)p->n_heads * p->head_dim;
        p->split_hi = (__nv_bfloat16 *)cuda_split_begin_rows(c, p->dst, p->n_tokens, k,
                                                             p->dst_stride, &p->split_lo_off);
        p->split_k = k;
    }
    p->early_loads = cuda_attention_early_loads;
    // Set for every decode kernel, taken by the short-split one only.
    p->cluster_merge = att_decode_cluster_enabled && dev->cc_major >= 9 && p->n_splits >= 2 &&
                       p->n_splits <= ATT_CLUSTER_MAX;
    // The prologue inside the short-split kernel, or its own kernel first.
    const struct op_call *pro = c->p.prologue;
    if (pro && !mma && att_decode_takes_short(p, elem) && att_rope_prologue_fits(p, pro, elem)) {
        att_rope_prologue_set(p, pro);
    } else if (pro) {
        enum vllmc_status rc = att_prologue_run(c);
        if (rc)
            return rc;
    }
    if (mma && cache_type == DTYPE_F16) {
        CUDA_TRY(att_decode_mma_launch<__half>(p, n_seqs, dev->stream));
        return VLLMC_OK;
    }
    if (mma) {
        CUDA_TRY(att_decode_mma_launch<__nv_bfloat16>(p, n_seqs, dev->stream));
        return VLLMC_OK;
    }
    switch (cache_type) {
    case DTYPE_F16:
        CUDA_TRY(att_decode_launch<__half>(p, n_seqs, dev->stream));
        break;
    case DTYPE_BF16:
        CUDA_TRY(att_decode_launch<__nv_bfloat16>(p, n_seqs, dev->stream));
        break;
    default:
        CUDA_TRY(att_decode_launch<float>(p, n_seqs, dev->stream));
        break;
    }
    return VLLMC_OK;
}

extern "C" enum vllmc_status cuda_attention_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct tensor *q = c->src[0], *kc = c->src[1], *bt = c->src[3];
    const int n_seqs = (int)tensor_n_elements(c->src[4]);
    struct att_params p = {};
    p.n_tokens = q->ne[2];
    if (p.n_tokens == 0 || n_seqs == 0)
        return VLLMC_OK;
    p.dst = (float *)c->dst->data;
    p.dst_stride = (int64_t)(c->dst->nb[2] / sizeof(float));
    p.q = (const float *)q->data;
    p.q_stride = (int64_t)(q->nb[2] / sizeof(float));
    p.k_cache = kc->data;
    p.v_cache = c->src[2]->data;
    p.block_tables = (const int32_t *)bt->data;
    p.bt_stride = cuda_row_pitch(bt);
    p.bt_cols = (int)bt->ne[0];
    p.seq_lens = (const int32_t *)c->src[4]->data;
    p.q_start = (const int32_t *)c->src[5]->data;
    p.head_dim = (int)q->ne[0];
    p.n_heads = (int)q->ne[1];
    p.n_kv_heads = (int)kc->ne[1];
    p.block_size = (int)kc->ne[2];
    p.group = p.n_heads / p.n_kv_heads;
    p.hc = p.group;
    while (p.hc > ATT_ROWS || p.group % p.hc)
        p.hc--;
    p.qt = ATT_ROWS / p.hc;
    p.n_hchunks = p.group / p.hc;
    p.scale = c->p.scale;

    const int64_t D = p.head_dim;
    const bool decode = att_decode_enabled && c->p.max_q_len == 1 && c->p.max_seq_len > 0 &&
                        p.group <= 16 &&
                        (D == 32 || D == 64 || D == 128 || D == 256) &&
                        (uintptr_t)kc->data % 16 == 0 && (uintptr_t)p.v_cache % 16 == 0;
    if (decode)
        return att_decode_run(c, dev, &p, n_seqs, c->p.max_seq_len, kc->dtype);
    if (c->p.prologue) {
        enum vllmc_status rc = att_prologue_run(c);
        if (rc)
            return rc;
    }

    // Bounds for the grid; callers that know them save idle blocks.
    const int max_q = c->p.max_q_len > 0 ? c->p.max_q_len : (int)p.n_tokens;
    const int64_t max_ctx_bound = bt->ne[0] * (int64_t)p.block_size;
    const int max_seq = c->p.max_seq_len > 0 ? c->p.max_seq_len : (int)max_ctx_bound;
    const int n_tiles = (max_q + p.qt - 1) / p.qt;
    const int64_t base_blocks = (int64_t)n_tiles * n_seqs * p.n_kv_heads * p.n_hchunks;
    int n_splits = 1;
    if (base_blocks < 2 * dev->n_sms) {
        const int64_t want = (2 * dev->n_sms + base_blocks - 1) / base_blocks;
        const int64_t most = (max_seq + ATT_SPLIT_MIN - 1) / ATT_SPLIT_MIN;
        n_splits = (int)(want < most ? want : most);
        if (n_splits < 1)
            n_splits = 1;
    }
    int split_len = (max_seq + n_splits - 1) / n_splits;
    split_len = (split_len + ATT_KT - 1) / ATT_KT * ATT_KT;
    if (split_len < ATT_KT)
        split_len = ATT_KT;
    n_splits = (max_seq + split_len - 1) / split_len;
    if (n_splits < 1)
        n_splits = 1;
    p.n_splits = n_splits;
    p.split_len = n_splits == 1 ? INT32_MAX / 2 : split_len;
    if (n_splits > 1) {
        const size_t rows = (size_t)n_splits * (size_t)p.n_tokens * (size_t)p.n_heads;
        void *scratch = nullptr;
        enum vllmc_status rc =
            cuda_scratch(dev, rows * ((size_t)p.head_dim + 2) * sizeof(float), &scratch);
        if (rc)
            return rc;
        p.part_acc = (float *)scratch;
        p.part_ml = p.part_acc + rows * (size_t)p.head_dim;
    }
    switch (kc->dtype) {
    case DTYPE_F16:
        CUDA_TRY(att_launch<__half>(&p, n_seqs, n_tiles, dev->stream));
        break;
    case DTYPE_BF16:
        CUDA_TRY(att_launch<__nv_bfloat16>(&p, n_seqs, n_tiles, dev->stream));
        break;
    default:
        CUDA_TRY(att_launch<float>(&p, n_seqs, n_tiles, dev->stream));
        break;
    }
    return VLLMC_OK;
}

// ---- ATTENTION with its QKV_ROPE_STORE prologue (decode batches) ----

// Decode-only calls whose attention and prologue the kernels above take; the
// short-split kernel runs the prologue itself where it fits
// (att_rope_prologue_fits), else its own kernel runs first.
extern "C" bool cuda_attention_rope_supports(const struct op_call *c)
{
    const struct op_call *pro = c->p.prologue;
    if (!pro || !cuda_attention_prologue || c->p.max_q_len != 1 ||
        !cuda_qkv_rope_store_supports(pro))
        return false;
    struct op_call inner = *c;
    inner.p.prologue = nullptr;
    const struct tensor *q = c->src[0];
    return cuda_attention_supports(&inner) && pro->dst->nb[1] == q->nb[1] &&
           pro->dst->nb[2] == q->nb[2];
}

extern "C" enum vllmc_status cuda_attention_rope_run(const struct op_call *c)
{
    return cuda_attention_run(c);
}
