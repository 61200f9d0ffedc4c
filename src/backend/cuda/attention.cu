// Paged causal attention over a varlen batch that mixes prefill chunks and
// decode tokens. One block takes a tile of query rows (tokens x the query
// heads sharing one KV head, so each K/V byte read serves the whole GQA
// group) and walks the sequence's keys through its block table in tiles,
// with an online softmax in f32. Decode splits the keys across blocks
// (split-K) when the batch alone would leave the GPU idle; a second kernel
// merges the partial softmax states.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_common.cuh"

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
};

// ---- kernels ----

template <typename TC> static __global__ void __launch_bounds__(ATT_THREADS)
    att_kernel(const struct att_params p)
{
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

// Merges the split-K partial states of one (token, head) per block.
static __global__ void att_combine_kernel(const struct att_params p)
{
    const int64_t tok = blockIdx.x;
    const int h = blockIdx.y, D = p.head_dim;
    float m = -INFINITY;
    for (int s = 0; s < p.n_splits; s++)
        m = fmaxf(m, p.part_ml[((s * p.n_tokens + tok) * p.n_heads + h) * 2]);
    float l = 0.0f;
    for (int s = 0; s < p.n_splits; s++) {
        const float *ml = p.part_ml + ((s * p.n_tokens + tok) * p.n_heads + h) * 2;
        if (ml[0] != -INFINITY)
            l += ml[1] * expf(ml[0] - m);
    }
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.0f;
        for (int s = 0; s < p.n_splits; s++) {
            const int64_t row = (s * p.n_tokens + tok) * p.n_heads + h;
            const float ms = p.part_ml[row * 2];
            if (ms != -INFINITY)
                o += p.part_acc[row * D + d] * expf(ms - m);
        }
        p.dst[tok * p.dst_stride + (int64_t)h * D + d] = l > 0.0f ? o / l : 0.0f;
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

template <typename TC>
static cudaError_t att_launch(const struct att_params *p, int n_seqs, int n_tiles,
                              cudaStream_t stream)
{
    const size_t smem = att_smem_bytes(p->head_dim);
    cudaError_t rc =
        cudaFuncSetAttribute(att_kernel<TC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (rc != cudaSuccess)
        return rc;
    const dim3 grid((unsigned)n_tiles, (unsigned)(n_seqs * p->n_kv_heads * p->n_hchunks),
                    (unsigned)p->n_splits);
    att_kernel<TC><<<grid, ATT_THREADS, smem, stream>>>(*p);
    rc = cudaGetLastError();
    if (rc != cudaSuccess || p->n_splits == 1)
        return rc;
    att_combine_kernel<<<dim3((unsigned)p->n_tokens, (unsigned)p->n_heads), 64, 0, stream>>>(*p);
    return cudaGetLastError();
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
    if (c->op != OP_ATTENTION || !att_rows_ok(q) || !att_rows_ok(c->dst) || !kc || !vc)
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
