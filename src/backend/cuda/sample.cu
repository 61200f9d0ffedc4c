// Sampling on the GPU in the host sampler's order (engine/sampler.c):
// adjustments, then greedy argmax or temperature, min_p, top_k, top_p and an
// inverse-CDF draw with the row's uniform u. Greedy and temperature-only rows
// are cut into vocabulary chunks over the whole GPU ("plain rows in chunks"
// below); the others take one block a row, whose selections walk float keys
// by radix descent (4 levels of 8 bits, weights summed in double), so no row
// is ever sorted. Logits are restored before returning.
#include <climits>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/sample.cuh"
#include "backend/sample.h"

#define SAMPLE_THREADS 1024
#define SAMPLE_ADJ_THREADS 256

static_assert(sizeof(struct sample_row) % 8 == 0, "sample_row is passed as i32 words");
static_assert(sizeof(struct sample_adj) == 20, "sample_adj is i32 [5]");
static_assert(sizeof(struct sample_logprob) % 4 == 0, "sample_logprob is passed as i32 words");

// ---- keys and selections ----

// Order-preserving map of floats to unsigned keys (larger float, larger key).
static __device__ __forceinline__ uint32_t key_of(float f)
{
    const uint32_t b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The elements of a row in play: finite logits (scaled by inv_t when
// `scaled`) whose key is >= lo_key and, with `cut`, above (cut_key, cut_id) in
// descending order (key > cut_key, or key == cut_key and id <= cut_id).
struct sel {
    const float *x;
    int n;
    bool scaled;
    float inv_t;
    float vmax; // weights are expf(v - vmax), or 1 with `unit`
    bool unit;
    uint32_t lo_key;
    bool cut;
    uint32_t cut_key;
    int cut_id;
};

static __device__ __forceinline__ bool sel_get(const sel &s, int i, uint32_t *key, double *w)
{
    const float l = s.x[i];
    if (l == -INFINITY)
        return false;
    const float v = s.scaled ? l * s.inv_t : l;
    const uint32_t k = key_of(v);
    if (k < s.lo_key)
        return false;
    if (s.cut && (k < s.cut_key || (k == s.cut_key && i > s.cut_id)))
        return false;
    *key = k;
    *w = s.unit ? 1.0 : (double)expf(v - s.vmax);
    return true;
}

typedef cub::BlockReduce<double, SAMPLE_THREADS> reduce_d;
typedef cub::BlockReduce<float, SAMPLE_THREADS> reduce_f;
typedef cub::BlockReduce<int, SAMPLE_THREADS> reduce_i;
typedef cub::BlockReduce<unsigned, SAMPLE_THREADS> reduce_u;
typedef cub::BlockScan<double, SAMPLE_THREADS> scan_d;

union sample_tmp {
    reduce_d::TempStorage rd;
    reduce_f::TempStorage rf;
    reduce_i::TempStorage ri;
    reduce_u::TempStorage ru;
    typename scan_d::TempStorage sd;
};

// Sum of the weights of s over the block, returned to every thread.
static __device__ double sel_total(const sel &s, sample_tmp &tmp)
{
    __shared__ double total;
    double acc = 0;
    for (int i = threadIdx.x; i < s.n; i += blockDim.x) {
        uint32_t k;
        double w;
        if (sel_get(s, i, &k, &w))
            acc += w;
    }
    const double t = reduce_d(tmp.rd).Sum(acc);
    if (threadIdx.x == 0)
        total = t;
    __syncthreads();
    const double r = total;
    __syncthreads();
    return r;
}

// Walks the elements of s (only those with key `key` when `by_key`) in id
// order, ascending or not, summing weights, and returns the first id at
// which the sum exceeds target; the last id with a positive weight when none
// does; -1 when there is none. Each thread takes one contiguous chunk.
static __device__ int sel_walk(const sel &s, bool ids_ascending, bool by_key, uint32_t key,
                               double target, sample_tmp &tmp)
{
    __shared__ int found_pos, last_pos;
    const int n_threads = blockDim.x;
    const int chunk = (s.n + n_threads - 1) / n_threads;
    const int c = ids_ascending ? (int)threadIdx.x : n_threads - 1 - (int)threadIdx.x;
    const int lo = c * chunk, hi = min(s.n, lo + chunk);
    // pos: the place of id i in walking order.
    double sum = 0;
    int my_last = -1;
    for (int j = 0; j < hi - lo; j++) {
        const int i = ids_ascending ? lo + j : hi - 1 - j;
        uint32_t k;
        double w;
        if (sel_get(s, i, &k, &w) && (!by_key || k == key) && w > 0) {
            sum += w;
            my_last = ids_ascending ? i : s.n - 1 - i;
        }
    }
    if (threadIdx.x == 0) {
        found_pos = INT_MAX;
        last_pos = -1;
    }
    double excl;
    scan_d(tmp.sd).ExclusiveSum(sum, excl);
    __syncthreads();
    if (my_last >= 0)
        atomicMax(&last_pos, my_last);
    if (sum > 0 && excl <= target && target < excl + sum) {
        double acc = excl;
        int pick = my_last;
        for (int j = 0; j < hi - lo; j++) {
            const int i = ids_ascending ? lo + j : hi - 1 - j;
            uint32_t k;
            double w;
            if (sel_get(s, i, &k, &w) && (!by_key || k == key) && w > 0) {
                acc += w;
                if (acc > target) {
                    pick = ids_ascending ? i : s.n - 1 - i;
                    break;
                }
            }
        }
        atomicMin(&found_pos, pick);
    }
    __syncthreads();
    int pos = found_pos != INT_MAX ? found_pos : last_pos;
    __syncthreads();
    if (pos < 0)
        return -1;
    return ids_ascending ? pos : s.n - 1 - pos;
}

// Walks the elements of s in value order (descending: largest first, ties by
// lower id; else smallest first, ties by higher id) and returns the id at
// which the running weight first exceeds target (the last element when none
// does; -1 when s is empty); its key goes to *key_out.
static __device__ int sel_cross(const sel &s, bool descending, double target, uint32_t *key_out,
                                sample_tmp &tmp)
{
    __shared__ double hist[256];
    __shared__ uint32_t prefix, mask;
    __shared__ double rem;
    __shared__ bool empty;
    if (threadIdx.x == 0) {
        prefix = 0;
        mask = 0;
        rem = target;
        empty = false;
    }
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < 256; d += blockDim.x)
            hist[d] = 0;
        __syncthreads();
        const uint32_t p = prefix, m = mask;
        for (int i = threadIdx.x; i < s.n; i += blockDim.x) {
            uint32_t k;
            double w;
            if (sel_get(s, i, &k, &w) && (k & m) == p && w > 0)
                atomicAdd(&hist[(k >> shift) & 255u], w);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            double acc = 0;
            const double r = rem;
            int pick = -1, last = -1;
            for (int j = 0; j < 256; j++) {
                const int d = descending ? 255 - j : j;
                if (!(hist[d] > 0))
                    continue;
                last = d;
                if (acc + hist[d] > r) {
                    pick = d;
                    break;
                }
                acc += hist[d];
            }
            if (pick < 0) {
                // Rounding left the target past the end: take the last element.
                pick = last;
                rem = INFINITY;
            } else {
                rem = r - acc;
            }
            if (pick < 0)
                empty = true;
            else
                prefix = p | ((uint32_t)pick << shift);
            mask = m | (255u << shift);
        }
        __syncthreads();
        if (empty)
            return -1;
    }
    const uint32_t key = prefix;
    const double r = rem;
    __syncthreads();
    *key_out = key;
    return sel_walk(s, descending, true, key, r, tmp);
}

// ---- kernels ----

// Applies (or, with restore, undoes) each row's adjustments; each entry's
// `saved` keeps the logit it replaced. Ids are distinct within a row.
static __global__ void sample_adjust_kernel(float *logits, int64_t pitch,
                                            const struct sample_row *rows,
                                            struct sample_adj *adj, bool restore)
{
    cuda_pdl_sync();
    const struct sample_row rw = rows[blockIdx.x];
    float *x = logits + (int64_t)rw.logits_row * pitch;
    for (int j = threadIdx.x; j < rw.n_adj; j += blockDim.x) {
        struct sample_adj *e = &adj[rw.adj_first + j];
        const struct sample_adj a = *e;
        if (restore) {
            x[a.id] = a.saved;
            continue;
        }
        float l = x[a.id];
        e->saved = l;
        l += a.bias;
        if (a.flags & SAMPLE_ADJ_MASK)
            l = -INFINITY;
        if (a.flags & SAMPLE_ADJ_SEEN)
            l = l > 0 ? l / rw.repetition_penalty : l * rw.repetition_penalty;
        l -= rw.frequency_penalty * (float)a.count;
        l -= rw.presence_penalty * (float)(a.count > 0);
        x[a.id] = l;
    }
}

struct max_op {
    template <typename T> __device__ __forceinline__ T operator()(const T &a, const T &b) const
    {
        return a > b ? a : b;
    }
};

struct min_op {
    template <typename T> __device__ __forceinline__ T operator()(const T &a, const T &b) const
    {
        return a < b ? a : b;
    }
};

struct argmax_pair {
    float v;
    int i;
};

struct argmax_op {
    __device__ __forceinline__ argmax_pair operator()(const argmax_pair &a,
                                                      const argmax_pair &b) const
    {
        if (a.v > b.v || (a.v == b.v && a.i < b.i))
            return a;
        return b;
    }
};

// A row that is greedy, or draws with a temperature alone (no min_p, top_k or
// top_p: vLLM's defaults), needs only a max and one sum over the vocabulary.
static __device__ __forceinline__ bool sample_row_plain(const struct sample_row &rw, int n_vocab)
{
    return rw.temperature < SAMPLE_GREEDY_EPS ||
           (rw.min_p <= 0.0f && (rw.top_k <= 0 || rw.top_k >= n_vocab) && rw.top_p >= 1.0f);
}

static __global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_kernel(const float *logits, int64_t pitch, int n_vocab, const struct sample_row *rows,
                  int32_t *ids, bool skip_plain)
{
    cuda_pdl_sync();
    __shared__ sample_tmp tmp;
    __shared__ float sh_f;
    __shared__ int sh_i;
    __shared__ uint32_t sh_u;
    const struct sample_row rw = rows[blockIdx.x];
    if (skip_plain && sample_row_plain(rw, n_vocab))
        return; // the chunked kernels below sample it
    const float *x = logits + (int64_t)rw.logits_row * pitch;

    if (rw.temperature < SAMPLE_GREEDY_EPS) {
        // Lowest id among the largest logits, as the host's strict '>' scan.
        argmax_pair best = {-INFINITY, INT_MAX};
        for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
            const float v = x[i];
            if (v > best.v || (v == best.v && i < best.i))
                best = {v, i};
        }
        typedef cub::BlockReduce<argmax_pair, SAMPLE_THREADS> reduce_a;
        __shared__ reduce_a::TempStorage ta;
        const argmax_pair b = reduce_a(ta).Reduce(best, argmax_op());
        if (threadIdx.x == 0)
            ids[blockIdx.x] = b.i == INT_MAX ? 0 : b.i;
        return;
    }

    const float inv_t = 1.0f / rw.temperature;
    float vmax = -INFINITY;
    int count = 0;
    for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
        const float l = x[i];
        if (l != -INFINITY) {
            vmax = fmaxf(vmax, l * inv_t);
            count++;
        }
    }
    vmax = reduce_f(tmp.rf).Reduce(vmax, max_op());
    if (threadIdx.x == 0)
        sh_f = vmax;
    __syncthreads();
    count = reduce_i(tmp.ri).Sum(count);
    if (threadIdx.x == 0)
        sh_i = count;
    __syncthreads();
    vmax = sh_f;
    int m = sh_i;
    __syncthreads();
    if (m == 0) {
        if (threadIdx.x == 0)
            ids[blockIdx.x] = 0; // every logit masked: nothing sensible to draw
        return;
    }
    sel s = {x, n_vocab, true, inv_t, vmax, false, 0u, false, 0u, 0};

    // min_p keeps an upper set of values: its smallest key bounds the rest.
    if (rw.min_p > 0.0f) {
        uint32_t lo = 0xffffffffu;
        int kept = 0;
        for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
            const float l = x[i];
            if (l == -INFINITY)
                continue;
            const float v = l * inv_t;
            if (!(exp((double)v - vmax) < (double)rw.min_p)) {
                lo = min(lo, key_of(v));
                kept++;
            }
        }
        lo = reduce_u(tmp.ru).Reduce(lo, min_op());
        if (threadIdx.x == 0)
            sh_u = lo;
        __syncthreads();
        kept = reduce_i(tmp.ri).Sum(kept);
        if (threadIdx.x == 0)
            sh_i = kept;
        __syncthreads();
        s.lo_key = sh_u;
        m = sh_i;
        __syncthreads();
    }

    // top_k keeps every value reaching the k-th largest (ties stay).
    if (rw.top_k > 0 && rw.top_k < m) {
        uint32_t kth = 0;
        s.unit = true;
        sel_cross(s, true, (double)(rw.top_k - 1), &kth, tmp);
        s.unit = false;
        if (kth > s.lo_key)
            s.lo_key = kth;
    }

    const double u = rw.u;
    int tok;
    if (rw.top_p < 1.0f) {
        // The least likely tokens go while their mass stays within 1 - top_p:
        // the first token (ascending) that passes it is the last one kept.
        const double total = sel_total(s, tmp);
        uint32_t cut_key = 0;
        const int cut = sel_cross(s, false, (1.0 - (double)rw.top_p) * total, &cut_key, tmp);
        if (cut >= 0) {
            s.cut = true;
            s.cut_key = cut_key;
            s.cut_id = cut;
        }
        // The survivors in descending order, as the host draws after sorting.
        const double kept = sel_total(s, tmp);
        uint32_t k;
        tok = sel_cross(s, true, u * kept, &k, tmp);
    } else {
        // Candidates in id order.
        const double total = sel_total(s, tmp);
        tok = sel_walk(s, true, false, 0u, u * total, tmp);
    }
    if (threadIdx.x == 0)
        ids[blockIdx.x] = tok < 0 ? 0 : tok;
}

// ---- plain rows in chunks ----
//
// sample_kernel gives a row one block, which walks its 152k logits four times
// (max, sum, and a scan of per-thread runs that reads them out of order): at
// 64 rows ~170 us of a ~3.8 ms decode step on the H200, and 64 of 132 SMs. The
// plain rows (sample_row_plain) go through three kernels instead, over a grid
// of SAMPLE_CHUNK-wide chunks x rows: each chunk's max (with its lowest id)
// and finite count; each chunk's sum of weights expf(l / t - vmax) (double);
// then one block a row picks the chunk in which u * total falls (chunks in id
// order) and walks it in id order, as sel_walk does: the first id at which
// the running sum exceeds u * total, or the last id of positive weight.

#define SAMPLE_CHUNK 8192
#define SAMPLE_CHUNK_THREADS 256

struct sample_part {
    double sum; // the chunk's weights (temperature rows)
    float vmax; // the chunk's largest logit
    int arg;    // its lowest id (INT_MAX: none)
    int count;  // finite logits
    int pad;
};

typedef cub::BlockReduce<argmax_pair, SAMPLE_CHUNK_THREADS> chunk_reduce_a;
typedef cub::BlockReduce<int, SAMPLE_CHUNK_THREADS> chunk_reduce_i;
typedef cub::BlockReduce<double, SAMPLE_CHUNK_THREADS> chunk_reduce_d;

// Grid: x = chunk, y = row.
static __global__ void __launch_bounds__(SAMPLE_CHUNK_THREADS)
    sample_chunk_max_kernel(const float *logits, int64_t pitch, int n_vocab,
                            const struct sample_row *rows, struct sample_part *parts)
{
    cuda_pdl_sync();
    const struct sample_row rw = rows[blockIdx.y];
    if (!sample_row_plain(rw, n_vocab))
        return;
    __shared__ union {
        chunk_reduce_a::TempStorage a;
        chunk_reduce_i::TempStorage i;
    } tmp;
    const float *x = logits + (int64_t)rw.logits_row * pitch;
    const int lo = (int)blockIdx.x * SAMPLE_CHUNK, hi = min(n_vocab, lo + SAMPLE_CHUNK);
    argmax_pair best = {-INFINITY, INT_MAX};
    int count = 0;
    for (int i = lo + (int)threadIdx.x; i < hi; i += blockDim.x) {
        const float v = x[i];
        if (v > best.v || (v == best.v && i < best.i))
            best = {v, i};
        count += v != -INFINITY;
    }
    best = chunk_reduce_a(tmp.a).Reduce(best, argmax_op());
    __syncthreads();
    count = chunk_reduce_i(tmp.i).Sum(count);
    if (threadIdx.x == 0) {
        struct sample_part *pt = &parts[(int64_t)blockIdx.y * gridDim.x + blockIdx.x];
        pt->vmax = best.v;
        pt->arg = best.i;
        pt->count = count;
    }
}

// The row's largest scaled logit from its chunks' maxima: max(l) / t is
// max(l / t), as multiplying by a positive inv_t keeps the order.
static __device__ __forceinline__ float sample_row_vmax(const struct sample_part *p, int n_chunks,
                                                        float inv_t)
{
    float m = -INFINITY;
    for (int c = 0; c < n_chunks; c++)
        m = fmaxf(m, p[c].vmax);
    return m * inv_t;
}

static __device__ __forceinline__ double sample_weight(const float *x, int i, float inv_t,
                                                       float vmax)
{
    const float l = x[i];
    return l == -INFINITY ? 0.0 : (double)expf(l * inv_t - vmax);
}

static __global__ void __launch_bounds__(SAMPLE_CHUNK_THREADS)
    sample_chunk_sum_kernel(const float *logits, int64_t pitch, int n_vocab,
                            const struct sample_row *rows, struct sample_part *parts)
{
    cuda_pdl_sync();
    const struct sample_row rw = rows[blockIdx.y];
    if (!sample_row_plain(rw, n_vocab) || rw.temperature < SAMPLE_GREEDY_EPS)
        return;
    __shared__ chunk_reduce_d::TempStorage tmp;
    struct sample_part *p = parts + (int64_t)blockIdx.y * gridDim.x;
    const float inv_t = 1.0f / rw.temperature;
    const float vmax = sample_row_vmax(p, (int)gridDim.x, inv_t);
    const float *x = logits + (int64_t)rw.logits_row * pitch;
    const int lo = (int)blockIdx.x * SAMPLE_CHUNK, hi = min(n_vocab, lo + SAMPLE_CHUNK);
    double acc = 0.0;
    for (int i = lo + (int)threadIdx.x; i < hi; i += blockDim.x)
        acc += sample_weight(x, i, inv_t, vmax);
    acc = chunk_reduce_d(tmp).Sum(acc);
    if (threadIdx.x == 0)
        p[blockIdx.x].sum = acc;
}

// One block a row (SAMPLE_CHUNK_THREADS / 32 warps). A temperature row walks
// its chosen chunk in two levels: each warp sums a contiguous run of it, then
// the warp whose run holds the target scans it 32 ids at a time.
static __global__ void __launch_bounds__(SAMPLE_CHUNK_THREADS)
    sample_chunk_pick_kernel(const float *logits, int64_t pitch, int n_vocab, int n_chunks,
                             const struct sample_row *rows, const struct sample_part *parts,
                             int32_t *ids)
{
    constexpr int N_WARPS = SAMPLE_CHUNK_THREADS / CUDA_WARP;
    cuda_pdl_sync();
    const struct sample_row rw = rows[blockIdx.x];
    if (!sample_row_plain(rw, n_vocab))
        return;
    const struct sample_part *p = parts + (int64_t)blockIdx.x * n_chunks;
    const int lane = threadIdx.x % CUDA_WARP, warp = threadIdx.x / CUDA_WARP;
    __shared__ double run_sum[N_WARPS];
    __shared__ int sh_chunk, sh_warp, sh_done;
    __shared__ double sh_target;
    if (threadIdx.x == 0) {
        sh_done = 0;
        if (rw.temperature < SAMPLE_GREEDY_EPS) {
            // Lowest id among the largest logits: chunks in id order, strict '>'.
            argmax_pair best = {-INFINITY, INT_MAX};
            for (int c = 0; c < n_chunks; c++)
                if (p[c].vmax > best.v || (p[c].vmax == best.v && p[c].arg < best.i))
                    best = {p[c].vmax, p[c].arg};
            ids[blockIdx.x] = best.i == INT_MAX ? 0 : best.i;
            sh_done = 1;
        } else {
            int count = 0;
            double total = 0.0;
            for (int c = 0; c < n_chunks; c++) {
                count += p[c].count;
                total += p[c].sum;
            }
            const double target = rw.u * total;
            double excl = 0.0;
            int pick = -1, last = -1;
            for (int c = 0; c < n_chunks && pick < 0; c++) {
                if (p[c].sum > 0.0) {
                    last = c;
                    if (excl <= target && target < excl + p[c].sum)
                        pick = c;
                    else
                        excl += p[c].sum;
                }
            }
            if (count == 0 || last < 0) {
                ids[blockIdx.x] = 0; // every logit masked: nothing sensible to draw
                sh_done = 1;
            } else {
                // Rounding left the target past the end: the last positive id.
                sh_chunk = pick >= 0 ? pick : last;
                sh_target = pick >= 0 ? target - excl : INFINITY;
            }
        }
    }
    __syncthreads();
    if (sh_done)
        return;
    const float inv_t = 1.0f / rw.temperature;
    const float vmax = sample_row_vmax(p, n_chunks, inv_t);
    const float *x = logits + (int64_t)rw.logits_row * pitch;
    const int c = sh_chunk;
    const int lo = c * SAMPLE_CHUNK, hi = min(n_vocab, lo + SAMPLE_CHUNK);
    const int run = (hi - lo + N_WARPS - 1) / N_WARPS;
    const int wlo = min(hi, lo + warp * run), whi = min(hi, wlo + run);
    double s = 0.0;
    for (int i = wlo + lane; i < whi; i += CUDA_WARP)
        s += sample_weight(x, i, inv_t, vmax);
    for (int o = CUDA_WARP / 2; o > 0; o /= 2)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0)
        run_sum[warp] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        const double target = sh_target;
        double excl = 0.0;
        int pick = -1, last = -1;
        for (int w = 0; w < N_WARPS && pick < 0; w++) {
            if (run_sum[w] > 0.0) {
                last = w;
                if (excl <= target && target < excl + run_sum[w])
                    pick = w;
                else
                    excl += run_sum[w];
            }
        }
        sh_warp = pick >= 0 ? pick : last;
        sh_target = pick >= 0 ? target - excl : INFINITY;
    }
    __syncthreads();
    if (warp != sh_warp)
        return;
    const double target = sh_target;
    double acc = 0.0;
    int last_id = -1;
    for (int base = wlo; base < whi; base += CUDA_WARP) {
        const int i = base + lane;
        const double w = i < whi ? sample_weight(x, i, inv_t, vmax) : 0.0;
        double incl = w; // inclusive scan over the warp
        for (int o = 1; o < CUDA_WARP; o *= 2) {
            const double up = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o)
                incl += up;
        }
        const unsigned hit = __ballot_sync(0xffffffffu, w > 0.0 && acc + incl > target);
        if (hit) {
            if (lane == 0)
                ids[blockIdx.x] = base + __ffs(hit) - 1;
            return;
        }
        const unsigned pos = __ballot_sync(0xffffffffu, w > 0.0);
        if (pos)
            last_id = base + 31 - __clz(pos);
        acc += __shfl_sync(0xffffffffu, incl, CUDA_WARP - 1);
    }
    if (lane == 0)
        ids[blockIdx.x] = last_id < 0 ? 0 : last_id;
}

// Logprobs of the raw logits for rows with n_logprobs >= 0: the sampled
// token's logprob and rank, and the top alternatives.
static __global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_logprob_kernel(const float *logits, int64_t pitch, int n_vocab,
                          const struct sample_row *rows, const int32_t *ids,
                          struct sample_logprob *out)
{
    cuda_pdl_sync();
    __shared__ sample_tmp tmp;
    __shared__ float sh_f;
    __shared__ double sh_d;
    __shared__ int sh_i;
    __shared__ int top_id[SAMPLE_MAX_LOGPROBS];
    __shared__ float top_v[SAMPLE_MAX_LOGPROBS];
    const struct sample_row rw = rows[blockIdx.x];
    if (rw.n_logprobs < 0)
        return;
    const float *x = logits + (int64_t)rw.logits_row * pitch;
    const int32_t tok = ids[blockIdx.x];

    float vmax = -INFINITY;
    for (int i = threadIdx.x; i < n_vocab; i += blockDim.x)
        vmax = fmaxf(vmax, x[i]);
    vmax = reduce_f(tmp.rf).Reduce(vmax, max_op());
    if (threadIdx.x == 0)
        sh_f = vmax;
    __syncthreads();
    vmax = sh_f;
    const float lt = x[tok];
    double sum = 0;
    int rank = 0;
    for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
        const float v = x[i];
        sum += exp((double)v - vmax);
        rank += v >= lt;
    }
    sum = reduce_d(tmp.rd).Sum(sum);
    if (threadIdx.x == 0)
        sh_d = sum;
    __syncthreads();
    rank = reduce_i(tmp.ri).Sum(rank);
    if (threadIdx.x == 0)
        sh_i = rank;
    __syncthreads();
    const double lse = (double)vmax + log(sh_d);
    rank = sh_i;
    __syncthreads();

    int k = min(rw.n_logprobs, min(n_vocab, SAMPLE_MAX_LOGPROBS));
    int n_top = 0;
    if (k > 0) {
        // The k-th entry in (value desc, id asc) order bounds the top set.
        sel s = {x, n_vocab, false, 1.0f, vmax, true, 0u, false, 0u, 0};
        uint32_t kkey = 0;
        const int kid = sel_cross(s, true, (double)(k - 1), &kkey, tmp);
        if (threadIdx.x == 0)
            sh_i = 0;
        __syncthreads();
        if (kid >= 0) {
            s.cut = true;
            s.cut_key = kkey;
            s.cut_id = kid;
            for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
                uint32_t key;
                double w;
                if (sel_get(s, i, &key, &w)) {
                    const int slot = atomicAdd(&sh_i, 1);
                    if (slot < SAMPLE_MAX_LOGPROBS) {
                        top_id[slot] = i;
                        top_v[slot] = x[i];
                    }
                }
            }
        }
        __syncthreads();
        n_top = min(sh_i, k);
    }
    if (threadIdx.x != 0)
        return;
    // Insertion sort of at most SAMPLE_MAX_LOGPROBS entries.
    for (int a = 1; a < n_top; a++) {
        const int id = top_id[a];
        const float v = top_v[a];
        int b = a;
        while (b > 0 && (top_v[b - 1] < v || (top_v[b - 1] == v && top_id[b - 1] > id))) {
            top_id[b] = top_id[b - 1];
            top_v[b] = top_v[b - 1];
            b--;
        }
        top_id[b] = id;
        top_v[b] = v;
    }
    struct sample_logprob *o = out + blockIdx.x;
    o->logprob = (float)((double)lt - lse);
    o->rank = rank;
    o->n_top = n_top;
    o->reserved = 0;
    for (int a = 0; a < n_top; a++) {
        o->top_id[a] = top_id[a];
        o->top_logprob[a] = (float)((double)top_v[a] - lse);
    }
}

// ---- provider ----

static bool words_ok(const struct tensor *t, size_t record_bytes)
{
    return cuda_tensor_dense_ok(t, DTYPE_I32) && t->ne[0] == (int64_t)(record_bytes / 4);
}

extern "C" bool cuda_sample_supports(const struct op_call *c)
{
    const struct tensor *d = c->dst, *l = c->src[0];
    return c->op == OP_SAMPLE && cuda_tensor_dense_ok(d, DTYPE_I32) &&
           cuda_tensor_rows_ok(l, DTYPE_F32) && l->ne[0] <= INT32_MAX &&
           words_ok(c->src[1], sizeof(struct sample_row)) &&
           tensor_n_rows(c->src[1]) == tensor_n_elements(d) &&
           (!c->src[2] || words_ok(c->src[2], sizeof(struct sample_adj))) &&
           (!c->src[3] || (words_ok(c->src[3], sizeof(struct sample_logprob)) &&
                           tensor_n_rows(c->src[3]) == tensor_n_elements(d)));
}

extern "C" enum vllmc_status cuda_sample_run(const struct op_call *c)
{
    struct cuda_device *dev = cuda_device_of(c);
    struct err *err = dev->err;
    const struct tensor *l = c->src[0];
    const int64_t n_rows = tensor_n_elements(c->dst);
    const int64_t n_adj = c->src[2] ? tensor_n_rows(c->src[2]) : 0;
    if (n_rows == 0)
        return VLLMC_OK;
    if (n_rows > INT32_MAX)
        return op_fail(c, VLLMC_ERR_UNSUPPORTED, "%lld rows", (long long)n_rows);
    float *logits = (float *)l->data;
    const int64_t pitch = cuda_row_pitch(l);
    const int n_vocab = (int)l->ne[0];
    const struct sample_row *rows = (const struct sample_row *)c->src[1]->data;
    struct sample_adj *adj = n_adj ? (struct sample_adj *)c->src[2]->data : NULL;
    if (n_adj) {
        cuda_launch(sample_adjust_kernel, (unsigned)n_rows, SAMPLE_ADJ_THREADS, 0, dev->stream,
                    logits, pitch, rows, adj, false);
        CUDA_TRY_LAUNCH();
    }
    int32_t *ids = (int32_t *)c->dst->data;
    const int64_t n_chunks = ((int64_t)n_vocab + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK;
    struct sample_part *parts = NULL;
    if (cuda_sample_chunks && n_rows <= 65535 && n_chunks > 0) {
        void *scratch = NULL;
        enum vllmc_status rc =
            cuda_scratch(dev, (size_t)(n_rows * n_chunks) * sizeof(struct sample_part), &scratch);
        if (rc)
            return rc;
        parts = (struct sample_part *)scratch;
        const dim3 grid((unsigned)n_chunks, (unsigned)n_rows);
        cuda_launch(sample_chunk_max_kernel, grid, SAMPLE_CHUNK_THREADS, 0, dev->stream, logits,
                    pitch, n_vocab, rows, parts);
        CUDA_TRY_LAUNCH();
        cuda_launch(sample_chunk_sum_kernel, grid, SAMPLE_CHUNK_THREADS, 0, dev->stream, logits,
                    pitch, n_vocab, rows, parts);
        CUDA_TRY_LAUNCH();
        cuda_launch(sample_chunk_pick_kernel, (unsigned)n_rows, SAMPLE_CHUNK_THREADS, 0,
                    dev->stream, logits, pitch, n_vocab, (int)n_chunks, rows,
                    (const struct sample_part *)parts, ids);
        CUDA_TRY_LAUNCH();
    }
    cuda_launch(sample_kernel, (unsigned)n_rows, SAMPLE_THREADS, 0, dev->stream, logits, pitch,
                n_vocab, rows, ids, parts != NULL);
    CUDA_TRY_LAUNCH();
    if (n_adj) {
        cuda_launch(sample_adjust_kernel, (unsigned)n_rows, SAMPLE_ADJ_THREADS, 0, dev->stream,
                    logits, pitch, rows, adj, true);
        CUDA_TRY_LAUNCH();
    }
    if (c->src[3]) {
        cuda_launch(sample_logprob_kernel, (unsigned)n_rows, SAMPLE_THREADS, 0, dev->stream, logits,
                    pitch, n_vocab, rows, ids, (struct sample_logprob *)c->src[3]->data);
        CUDA_TRY_LAUNCH();
    }
    return VLLMC_OK;
}
