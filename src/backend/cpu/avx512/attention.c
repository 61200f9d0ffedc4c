// cpu-avx512 paged attention: the cpu-avx2 scheme (keys in chunks of at most
// 16 inside each cache block, online softmax per query head) on 16-lane
// vectors. A task takes up to 64 query rows in prefill, 16 in decode
// (consecutive tokens of one sequence times the query heads of one kv head);
// with several tokens it copies each key chunk once into a contiguous f32
// buffer that all its rows read from L1 (cache rows of one head lie
// n_kv_heads * head_dim apart and would otherwise fall into the same few L1
// sets), a lone token reads the cache in place. A chunk's scores come out of
// one transposed sum of 16-lane dot products and each value slice
// accumulates in a register. A batch of lone tokens (decode) takes tasks of
// one sequence and several kv heads instead (attend_decode), reading each
// chunk's rows of all those heads together.
// Every row runs the same operations whatever rows share its task, and chunks
// depend only on key positions, so a query's result does not depend on the
// rest of the batch.
#include <math.h>

#include "backend/cpu/avx512/avx512.h"
#include "backend/cpu/cpu_ops.h"

#define ATTN_MAX_HEAD_DIM 256
#define ATTN_MAX_GROUP 16
#define ATTN_CHUNK 16
#define ATTN_MAX_ROWS 64    // query rows per task: tokens x group
#define ATTN_DECODE_ROWS 16 // the same where no sequence has that many query rows

struct attn_ctx {
    const struct op_call *c;
    int64_t n_seqs, n_tokens, group, head_dim, block_size, max_blocks;
    int64_t tokens_per_task, n_tok_tasks;
    int64_t heads_per_task; // decode batches: kv heads of one sequence per task
    int dtype; // cache dtype
};

// e^x for 16 lanes: avx2_exp's Cody-Waite range reduction and degree-5
// polynomial (relative error about 2e-7); x is clamped to [-88.37, 88.37].
static inline __attribute__((always_inline)) __m512 exp16(__m512 x)
{
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.3762626647949f)),
                      _mm512_set1_ps(88.3762626647949f));
    __m512 fx = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f));
    fx = _mm512_roundscale_ps(fx, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
    __m512 y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    __m512i n =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(fx), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(n));
}

// *v loaded once into a register: for two rows' multiply-adds GCC would
// otherwise fold the load into each of them, and the loads, not the
// multiply-adds, then set the pace.
static inline __attribute__((always_inline)) void in_register(__m512 *v)
{
    __asm__("" : "+v"(*v));
}

// Key j's slice i (16 dims): from the chunk's f32 copy or the cache.
static inline __attribute__((always_inline)) __m512 key_slice(const int dtype, const int nd,
                                                              const bool copy, const float *kf,
                                                              const char *const *kp, int j, int i)
{
    size_t esz = dtype == DTYPE_F32 ? 4 : 2;
    return copy ? _mm512_load_ps(kf + (j * nd + i) * 16)
                : avx512_load16(dtype, kp[j] + (size_t)i * 16 * esz, 0xffff);
}

// Beside key or value j's slice i: fetches the same place of row pf[j] (j <
// n_pf; the next chunk's row) where a cache line starts there, so the
// fetches spread over the loop's loads. pf NULL: none.
static inline __attribute__((always_inline)) void
fetch_slice(const int dtype, const char *const *pf, int n_pf, int j, int i)
{
    size_t at = (size_t)i * 16 * (dtype == DTYPE_F32 ? 4 : 2);
    if (pf && j < n_pf && at % 64 == 0)
        _mm_prefetch(pf[j] + at, _MM_HINT_T0);
}

// dots[j] = the 16 lane products of q and key j (j < n) summed over the nd
// slices in order; dots[j >= n] = 0. pf, n_pf: rows to fetch (fetch_slice).
static inline __attribute__((always_inline)) void
chunk_dots1(const int dtype, const int nd, const bool copy, const float *q, const float *kf,
            const char *const *kp, int n, __m512 *dots, const char *const *pf, int n_pf)
{
#pragma GCC unroll 16
    for (int j = 0; j < ATTN_CHUNK; j++)
        dots[j] = _mm512_setzero_ps();
    for (int i = 0; i < nd; i++) {
        __m512 qv = _mm512_loadu_ps(q + i * 16);
#pragma GCC unroll 16
        for (int j = 0; j < ATTN_CHUNK; j++) {
            if (j < n)
                dots[j] = _mm512_fmadd_ps(qv, key_slice(dtype, nd, copy, kf, kp, j, i), dots[j]);
            fetch_slice(dtype, pf, n_pf, j, i);
        }
    }
}

// chunk_dots1 for two query rows at once, eight keys at a time (32
// accumulators would not fit the registers); each row's sums are the same.
static inline __attribute__((always_inline)) void
chunk_dots2(const int dtype, const int nd, const bool copy, const float *q0, const float *q1,
            const float *kf, const char *const *kp, int n, __m512 dots[2][ATTN_CHUNK],
            const char *const *pf, int n_pf)
{
#pragma GCC unroll 2
    for (int h = 0; h < ATTN_CHUNK; h += 8) {
        __m512 d0[8], d1[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            d0[j] = d1[j] = _mm512_setzero_ps();
        for (int i = 0; h < n && i < nd; i++) {
            __m512 qv0 = _mm512_loadu_ps(q0 + i * 16), qv1 = _mm512_loadu_ps(q1 + i * 16);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                if (h + j < n) {
                    __m512 kv = key_slice(dtype, nd, copy, kf, kp, h + j, i);
                    in_register(&kv);
                    d0[j] = _mm512_fmadd_ps(qv0, kv, d0[j]);
                    d1[j] = _mm512_fmadd_ps(qv1, kv, d1[j]);
                    fetch_slice(dtype, pf, n_pf, h + j, i);
                }
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            dots[0][h + j] = d0[j];
            dots[1][h + j] = d1[j];
        }
    }
}

// The online softmax step of up to 16 rows over a chunk: row r (r < nrows)
// takes the first nk[r] scores of sc[r] (scaled q.k, [16]); sc[r] becomes
// e^(score - new max) there and 0 elsewhere, m[r] and l[r] (running max and
// sum) are updated, and corr[r] is the factor that rescales the row's
// earlier accumulation. A row with nk[r] = 0 is left as it is (corr 1).
// Each row's arithmetic is that of a row taken alone, in the same order
// (its sum in _mm512_reduce_add_ps's tree, which avx512_sums16 keeps), so
// no row's bits depend on the rows beside it. Taken together, the rows'
// maxima and sums come out of one transposed reduction each instead of a
// chain of shuffles per row, and e^(m_old - m_new) is computed only where a
// row's maximum moved (else it is e^0 = 1): row by row the softmax took a
// fifth of a 0.6B-shape prefill's attention (`bench_ops --op attention`,
// 512 tokens: 4.5-4.9 ms a call against 4.9-5.2).
static inline __attribute__((always_inline)) void
softmax_rows16(int nrows, const int *nk, float *m, float *l, float (*sc)[ATTN_CHUNK], float *corr)
{
    __m512 v[16], ninf = _mm512_set1_ps(-INFINITY);
    __mmask16 active = 0;
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        int n = r < nrows ? nk[r] : 0;
        if (n > 0)
            active |= (__mmask16)(1u << r);
        __mmask16 live = (__mmask16)(n > 0 ? (1u << n) - 1u : 0u);
        v[r] = n > 0 ? _mm512_mask_load_ps(ninf, live, sc[r]) : ninf;
    }
    __mmask16 rows_mask = (__mmask16)((1u << nrows) - 1u);
    __m512 m_old = _mm512_mask_loadu_ps(ninf, rows_mask, m);
    __m512 m_new = _mm512_mask_max_ps(m_old, active, avx512_max16(v), m_old);
    _Alignas(64) float mo[16], mn[16], cr[16];
    _mm512_store_ps(mo, m_old);
    _mm512_store_ps(mn, m_new);
    _mm512_store_ps(cr, _mm512_set1_ps(1.0f));
    for (unsigned moved = _mm512_mask_cmp_ps_mask(active, m_old, m_new, _CMP_NEQ_UQ); moved;
         moved &= moved - 1) {
        int r = __builtin_ctz(moved);
        cr[r] = expf(mo[r] - mn[r]); // 0 on the first chunk (m = -inf)
    }
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        int n = r < nrows ? nk[r] : 0;
        if (n > 0) {
            __mmask16 live = (__mmask16)((1u << n) - 1u);
            __m512 sv = _mm512_load_ps(sc[r]);
            v[r] = _mm512_maskz_mov_ps(live, exp16(_mm512_sub_ps(sv, _mm512_set1_ps(mn[r]))));
            _mm512_store_ps(sc[r], v[r]);
        } else
            v[r] = _mm512_setzero_ps();
    }
    __m512 sums = avx512_sums16(v, 16, NULL), cv = _mm512_load_ps(cr);
    __m512 l_old = _mm512_maskz_loadu_ps(rows_mask, l);
    _mm512_mask_storeu_ps(l, active, _mm512_add_ps(_mm512_mul_ps(l_old, cv), sums));
    _mm512_mask_storeu_ps(m, active, m_new);
    _mm512_mask_storeu_ps(corr, rows_mask, cv);
}

// Value j's slice i: from the chunk's f32 copy or the cache.
static inline __attribute__((always_inline)) __m512
value_slice(const int dtype, const int nd, const bool copy, const float *vf,
            const char *const *vp, int j, int i)
{
    size_t esz = dtype == DTYPE_F32 ? 4 : 2;
    return copy ? _mm512_load_ps(vf + (j * nd + i) * 16)
                : avx512_load16(dtype, vp[j] + (size_t)i * 16 * esz, 0xffff);
}

// acc [D] = acc * corr + sum_j p[j] v_j (j < n in order), the nd slices side
// by side in registers.
static inline __attribute__((always_inline)) void
chunk_values1(const int dtype, const int nd, const bool copy, const float *vf,
              const char *const *vp, int n, const float *p, float corr, float *acc,
              const char *const *pf, int n_pf)
{
    __m512 cv = _mm512_set1_ps(corr), a[16];
#pragma GCC unroll 16
    for (int i = 0; i < nd; i++)
        a[i] = _mm512_mul_ps(_mm512_load_ps(acc + i * 16), cv);
    for (int j = 0; j < n; j++) {
        __m512 pv = _mm512_set1_ps(p[j]);
#pragma GCC unroll 16
        for (int i = 0; i < nd; i++) {
            a[i] = _mm512_fmadd_ps(pv, value_slice(dtype, nd, copy, vf, vp, j, i), a[i]);
            fetch_slice(dtype, pf, n_pf, j, i);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < nd; i++)
        _mm512_store_ps(acc + i * 16, a[i]);
}

// chunk_values1 for two rows (nd <= 8) sharing each value load.
static inline __attribute__((always_inline)) void
chunk_values2(const int dtype, const int nd, const bool copy, const float *vf,
              const char *const *vp, int n, const float *p0, const float *p1, const float *corr,
              float *acc0, float *acc1, const char *const *pf, int n_pf)
{
    __m512 c0 = _mm512_set1_ps(corr[0]), c1 = _mm512_set1_ps(corr[1]), a0[8], a1[8];
#pragma GCC unroll 8
    for (int i = 0; i < nd; i++) {
        a0[i] = _mm512_mul_ps(_mm512_load_ps(acc0 + i * 16), c0);
        a1[i] = _mm512_mul_ps(_mm512_load_ps(acc1 + i * 16), c1);
    }
    for (int j = 0; j < n; j++) {
        __m512 pv0 = _mm512_set1_ps(p0[j]), pv1 = _mm512_set1_ps(p1[j]);
#pragma GCC unroll 8
        for (int i = 0; i < nd; i++) {
            __m512 vv = value_slice(dtype, nd, copy, vf, vp, j, i);
            in_register(&vv);
            a0[i] = _mm512_fmadd_ps(pv0, vv, a0[i]);
            a1[i] = _mm512_fmadd_ps(pv1, vv, a1[i]);
            fetch_slice(dtype, pf, n_pf, j, i);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < nd; i++) {
        _mm512_store_ps(acc0 + i * 16, a0[i]);
        _mm512_store_ps(acc1 + i * 16, a1[i]);
    }
}

// The end t1 of the chunk [t0, t1) that starts at t0: at most chunk keys, inside
// one cache block, up to pos_last.
static inline __attribute__((always_inline)) int64_t chunk_end(int64_t t0, int64_t chunk,
                                                               int64_t bs, int64_t pos_last)
{
    int64_t block_end = (t0 / bs + 1) * bs, t1 = t0 + chunk;
    if (t1 > block_end)
        t1 = block_end;
    return t1 < pos_last + 1 ? t1 : pos_last + 1;
}

// How many rows from row r take one pass over a chunk's loads: two when
// both are query heads of one kv head (rows grouped G to a kv head) and a
// head's slices fit the registers twice (nd <= 8), else one.
static inline __attribute__((always_inline)) int row_pair(int nd, int r, int rows, int G)
{
    return nd <= 8 && r + 1 < rows && (r + 1) / G == r / G ? 2 : 1;
}

// Fetches the key and value rows of the chunk that starts at t0 (up to
// pos_last) into L2 while this chunk computes: batched decode waited on these
// rows (n_kv_heads * head_dim apart in the cache), the copy of each chunk
// taking about half of the attention's time. Side by side on the 2-core
// machine: stories15M-shape F16 at 4 and 16 sequences +9-20% aggregate
// decode, 0.6B Q8_0 at 16 sequences +6%, one sequence unchanged.
static inline __attribute__((always_inline)) void
prefetch_chunk(const struct attn_ctx *ctx, const struct tensor *kc, const struct tensor *vc,
               const int32_t *table, int64_t t0, int64_t pos_last, int64_t chunk, int64_t kvh,
               size_t row_bytes)
{
    if (t0 > pos_last)
        return;
    int64_t bs = ctx->block_size, t1 = chunk_end(t0, chunk, bs, pos_last);
    int64_t block = table[t0 / bs], off = t0 % bs;
    for (int64_t j = 0; j < t1 - t0; j++) {
        const char *k = cpu_at(kc, block, off + j, kvh), *v = cpu_at(vc, block, off + j, kvh);
        for (size_t b = 0; b < row_bytes; b += 64) {
            _mm_prefetch(k + b, _MM_HINT_T1);
            _mm_prefetch(v + b, _MM_HINT_T1);
        }
    }
}

// sc[h] = scale * (q_h . k_j) for the chunk's n keys, rows q0 and (nr = 2)
// q1: 16 slices in order, one fixed sum.
static inline __attribute__((always_inline)) void
chunk_scores(const int dtype, const int nd, const bool copy, const int nr, const float *q0,
             const float *q1, const float *kf, const char *const *kp, const int n, float scale,
             float (*sc)[ATTN_CHUNK], const char *const *pf, int n_pf)
{
    __m512 dots[2][ATTN_CHUNK];
    if (nr == 1)
        chunk_dots1(dtype, nd, copy, q0, kf, kp, n, dots[0], pf, n_pf);
    else
        chunk_dots2(dtype, nd, copy, q0, q1, kf, kp, n, dots, pf, n_pf);
    for (int h = 0; h < nr; h++)
        _mm512_store_ps(sc[h],
                        _mm512_mul_ps(avx512_sums16(dots[h], n, NULL), _mm512_set1_ps(scale)));
}

// chunk_scores for four rows (q[0..3]) over a full chunk, four keys at a
// time: each key slice load serves four rows (16 accumulators) where a pair
// of rows shares it two ways, and each 4 keys' sums take avx512_sums16's
// first levels at once (avx512_sums16_quad, as full_dots does): the same
// bits as chunk_scores.
static inline __attribute__((always_inline)) void
chunk_scores4(const int dtype, const int nd, const bool copy, const float *const *q,
              const float *kf, const char *const *kp, float scale, float (*sc)[ATTN_CHUNK])
{
    __m512 quad[4][4];
#pragma GCC unroll 1
    for (int j0 = 0; j0 < ATTN_CHUNK; j0 += 4) {
        __m512 d[4][4];
#pragma GCC unroll 4
        for (int h = 0; h < 4; h++)
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                d[h][j] = _mm512_setzero_ps();
        for (int i = 0; i < nd; i++) {
            __m512 qv[4];
#pragma GCC unroll 4
            for (int h = 0; h < 4; h++)
                qv[h] = _mm512_loadu_ps(q[h] + i * 16);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                __m512 kv = key_slice(dtype, nd, copy, kf, kp, j0 + j, i);
                in_register(&kv);
#pragma GCC unroll 4
                for (int h = 0; h < 4; h++)
                    d[h][j] = _mm512_fmadd_ps(qv[h], kv, d[h][j]);
            }
        }
#pragma GCC unroll 4
        for (int h = 0; h < 4; h++)
            quad[h][j0 / 4] = avx512_sums16_quad(d[h]);
    }
#pragma GCC unroll 4
    for (int h = 0; h < 4; h++)
        _mm512_store_ps(sc[h], _mm512_mul_ps(avx512_sums16_finish(quad[h]), _mm512_set1_ps(scale)));
}

// Query tokens tok0 .. tok0 + nq - 1 of sequence s (positions pos0 ..) against
// their keys of kv head kvh, for the group of query heads that share it.
// nd = head_dim / 16 slices: a constant, so the slices of a value row and
// the chunk's 16 key dot products stay in registers as independent chains.
// copy: read the chunk from kf/vf rather than from the cache; the values, and
// so the results, are the same.
static inline __attribute__((always_inline)) void
attend_block(const int dtype, const int nd, const bool copy, const struct attn_ctx *ctx, int64_t s,
             int64_t tok0, int nq, int32_t pos0, int64_t kvh)
{
    const struct op_call *c = ctx->c;
    const struct tensor *kc = c->src[1], *vc = c->src[2];
    const int32_t *table = (const int32_t *)c->src[3]->data + s * ctx->max_blocks;
    int G = (int)ctx->group, D = nd * 16, rows = nq * G;
    int64_t bs = ctx->block_size;
    _Alignas(64) float acc[ATTN_MAX_ROWS * ATTN_MAX_HEAD_DIM]; // [rows, D]
    // The chunk's keys and values as f32, [ATTN_CHUNK][D] each: rows D apart,
    // so that they spread over the L1 sets (rows ATTN_MAX_HEAD_DIM apart put
    // 16 keys and values of head_dim 128 into 8 ways of 32 sets, filling them).
    _Alignas(64) float kf[ATTN_CHUNK * ATTN_MAX_HEAD_DIM];
    _Alignas(64) float vf[ATTN_CHUNK * ATTN_MAX_HEAD_DIM];
    float m[ATTN_MAX_ROWS], l[ATTN_MAX_ROWS];
    _Alignas(64) float sc[ATTN_MAX_ROWS][ATTN_CHUNK]; // [rows, chunk] scores, probabilities
    const float *q[ATTN_MAX_ROWS];                    // row r = token r / G, head r % G
    const char *kp[ATTN_CHUNK], *vp[ATTN_CHUNK];
    size_t esz = dtype == DTYPE_F32 ? 4 : 2;
    for (int r = 0; r < rows; r++) {
        q[r] = cpu_at(c->src[0], 0, tok0 + r / G, kvh * G + r % G);
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    for (int i = 0; i < rows * D; i++)
        acc[i] = 0.0f;
    int64_t chunk = ATTN_CHUNK < bs ? ATTN_CHUNK : bs;
    int64_t pos_last = pos0 + nq - 1;
    // The next chunk starts at t1, not t0 + chunk: with blocks of more than
    // 16 keys that are no multiple of 16, a chunk can end at its block's end.
    for (int64_t t0 = 0, t1; t0 <= pos_last; t0 = t1) {
        t1 = chunk_end(t0, chunk, bs, pos_last); // keys [t0, t1) lie in one cache block
        int64_t block = table[t0 / bs], off = t0 % bs;
        prefetch_chunk(ctx, kc, vc, table, t1, pos_last, chunk, kvh, (size_t)D * esz);
        for (int j = 0; j < (int)(t1 - t0); j++) {
            kp[j] = cpu_at(kc, block, off + j, kvh);
            vp[j] = cpu_at(vc, block, off + j, kvh);
            if (!copy)
                continue;
#pragma GCC unroll 16
            for (int i = 0; i < nd; i++) {
                _mm512_store_ps(kf + (j * nd + i) * 16,
                                avx512_load16(dtype, kp[j] + (size_t)i * 16 * esz, 0xffff));
                _mm512_store_ps(vf + (j * nd + i) * 16,
                                avx512_load16(dtype, vp[j] + (size_t)i * 16 * esz, 0xffff));
            }
        }
        // Three passes over the rows (scores, softmax, values) rather than
        // one row at a time: the softmax's chain of reductions and
        // exponentials then overlaps other rows' work instead of stalling.
        // Two query heads of one token see the same keys and share each key
        // and value load. Every row runs its own operations in the same
        // order whatever the grouping.
        int nk[ATTN_MAX_ROWS]; // keys row r sees in the chunk: up to its position
        float corr[ATTN_MAX_ROWS];
        for (int r = 0; r < rows; r++) {
            int64_t pos = pos0 + r / G;
            nk[r] = (int)((t1 < pos + 1 ? t1 : pos + 1) - t0);
        }
        for (int r = 0; r < rows;) {
            int n = nk[r], nr = row_pair(nd, r, rows, G);
            // Four rows that see the full chunk (nk grows with r) share its
            // key loads.
            if (nd <= 8 && r + 4 <= rows && n == ATTN_CHUNK) {
                chunk_scores4(dtype, nd, copy, q + r, kf, kp, c->p.scale, sc + r);
                r += 4;
                continue;
            }
            // A full chunk (all but a query's last) with n a constant: the
            // tests of a partial one's missing keys compile away.
            const float *q1 = nr == 2 ? q[r + 1] : NULL;
            if (n == ATTN_CHUNK && nr == 2)
                chunk_scores(dtype, nd, copy, 2, q[r], q1, kf, kp, ATTN_CHUNK, c->p.scale, sc + r,
                             NULL, 0);
            else if (n == ATTN_CHUNK)
                chunk_scores(dtype, nd, copy, 1, q[r], q1, kf, kp, ATTN_CHUNK, c->p.scale, sc + r,
                             NULL, 0);
            else if (n > 0)
                chunk_scores(dtype, nd, copy, nr, q[r], q1, kf, kp, n, c->p.scale, sc + r, NULL, 0);
            r += nr;
        }
        for (int r = 0; r < rows; r += 16)
            softmax_rows16(rows - r < 16 ? rows - r : 16, nk + r, m + r, l + r, sc + r, corr + r);
        for (int r = 0; r < rows;) {
            int n = nk[r], nr = row_pair(nd, r, rows, G);
            if (n == ATTN_CHUNK && nr == 2)
                chunk_values2(dtype, nd, copy, vf, vp, ATTN_CHUNK, sc[r], sc[r + 1], corr + r,
                              acc + r * D, acc + (r + 1) * D, NULL, 0);
            else if (n > 0 && nr == 1)
                chunk_values1(dtype, nd, copy, vf, vp, n, sc[r], corr[r], acc + r * D, NULL, 0);
            else if (n > 0)
                chunk_values2(dtype, nd, copy, vf, vp, n, sc[r], sc[r + 1], corr + r, acc + r * D,
                              acc + (r + 1) * D, NULL, 0);
            r += nr;
        }
    }
    for (int r = 0; r < rows; r++) {
        float *out = cpu_at(c->dst, 0, tok0 + r / G, kvh * G + r % G);
        __m512 inv = _mm512_set1_ps(1.0f / l[r]);
        for (int i = 0; i < D; i += 16)
            _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_load_ps(acc + r * D + i), inv));
    }
}

static inline __attribute__((always_inline)) void attend(const int dtype,
                                                         const struct attn_ctx *ctx, int64_t s,
                                                         int64_t tok0, int nq, int32_t pos0,
                                                         int64_t kvh)
{
    // The head sizes of current models; others take cpu-avx2 (see the gate).
    // One token's query rows read the cache rows in place, f32 ones too:
    // each row of a chunk is used by one or two query rows at once, so its
    // copy only added stores. Dropping it sped up 16-sequence decode of
    // f32 caches by 12-25% (head_dim 48 to 256, 1 to 8 query heads per kv
    // head, rows 1 to 4 KiB apart) and one sequence at 512-2048 keys by
    // 20-30%, though rows 4 KiB apart share L1 sets.
    bool copy = nq > 1;
    if (ctx->head_dim == 48 && copy) // stories-sized models
        attend_block(dtype, 3, true, ctx, s, tok0, nq, pos0, kvh);
    else if (ctx->head_dim == 48)
        attend_block(dtype, 3, false, ctx, s, tok0, nq, pos0, kvh);
    else if (ctx->head_dim == 64 && copy)
        attend_block(dtype, 4, true, ctx, s, tok0, nq, pos0, kvh);
    else if (ctx->head_dim == 64)
        attend_block(dtype, 4, false, ctx, s, tok0, nq, pos0, kvh);
    else if (ctx->head_dim == 128 && copy)
        attend_block(dtype, 8, true, ctx, s, tok0, nq, pos0, kvh);
    else if (ctx->head_dim == 128)
        attend_block(dtype, 8, false, ctx, s, tok0, nq, pos0, kvh);
    else if (copy)
        attend_block(dtype, 16, true, ctx, s, tok0, nq, pos0, kvh);
    else
        attend_block(dtype, 16, false, ctx, s, tok0, nq, pos0, kvh);
}

// ---- decode batches: one query token per sequence ----

// Where full_dots / full_values fetch the next chunk's rows.
enum attn_fetch { ATTN_FETCH_NONE, ATTN_FETCH_L1, ATTN_FETCH_L2 };

// One prefetch of p at level lvl (a constant: the hint must be one).
static inline __attribute__((always_inline)) void fetch_line(const int lvl, const char *p)
{
    if (lvl == ATTN_FETCH_L1)
        _mm_prefetch(p, _MM_HINT_T0);
    else if (lvl == ATTN_FETCH_L2)
        _mm_prefetch(p, _MM_HINT_T1);
}

// chunk_scores of nr (1 or 2) query rows of one head (chunk_dots1 or
// chunk_dots2, then the scaled sums into sc0 and sc1 [16]) over a full chunk
// of a decode task (16 keys of one cache block): key j at k + j * ks (ks: the
// block's key stride in bytes). The same operations in the same order (a
// key's sum runs over the nd slices in order, its lanes add up in
// avx512_sums16's tree), so the bits are chunk_scores'. What differs is the
// code: the rows come from one pointer and a stride instead of a table, keys
// go 8 / nr at a time (8 independent sums) with the slice loop inside, the
// next chunk's rows (pf + j * ks) are fetched beside the loads, one line
// each, with no test left in the loop, and each 4 keys' sums take the tree's
// first two levels at once instead of going through memory. chunk_dots2's
// per-key tests of its fetch table cost more than its loads and multiply-adds
// (0.6B shape, f16 cache in L2: ~24 cycles a key and head for the dot
// products where a loop of the same loads and multiply-adds takes ~10), and
// its 32 stored sums a chunk made some stack placements ~1.7x slower (4 KiB
// aliasing with the cache rows, by the look of it; seen as runs of a
// one-sequence decode bimodal in the stack's offset).
static inline __attribute__((always_inline)) void
full_dots(const int dtype, const int nd, const int fetch, const int nr, const float *q0,
          const float *q1, const char *k, const char *pf, size_t ks, float scale, float *sc0,
          float *sc1)
{
    const size_t esz = dtype == DTYPE_F32 ? 4 : 2;
    const int n_keys = 8 / nr; // keys a pass
    const float *q[2] = {q0, q1};
    __m512 quad[2][4]; // avx512_sums16's first levels of each 4 keys' sums
#pragma GCC unroll 1
    for (int j0 = 0; j0 < ATTN_CHUNK; j0 += n_keys) {
        const char *kj = k + (size_t)j0 * ks, *pj = fetch ? pf + (size_t)j0 * ks : NULL;
        __m512 d[2][8];
#pragma GCC unroll 2
        for (int h = 0; h < nr; h++)
#pragma GCC unroll 8
            for (int j = 0; j < n_keys; j++)
                d[h][j] = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int i = 0; i < nd; i++) {
            __m512 qv[2];
#pragma GCC unroll 2
            for (int h = 0; h < nr; h++)
                qv[h] = _mm512_loadu_ps(q[h] + i * 16);
#pragma GCC unroll 8
            for (int j = 0; j < n_keys; j++) {
                size_t at = (size_t)i * 16 * esz;
                __m512 kv = avx512_load16(dtype, kj + (size_t)j * ks + at, 0xffff);
                if (nr == 2) // one row: the load folds into its multiply-add
                    in_register(&kv);
#pragma GCC unroll 2
                for (int h = 0; h < nr; h++)
                    d[h][j] = _mm512_fmadd_ps(qv[h], kv, d[h][j]);
                if (at % 64 == 0)
                    fetch_line(fetch, pj + (size_t)j * ks + at);
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < nr; h++)
#pragma GCC unroll 2
            for (int j = 0; j < n_keys; j += 4)
                quad[h][(j0 + j) / 4] = avx512_sums16_quad(d[h] + j);
    }
    float *sc[2] = {sc0, sc1};
#pragma GCC unroll 2
    for (int h = 0; h < nr; h++)
        _mm512_store_ps(sc[h], _mm512_mul_ps(avx512_sums16_finish(quad[h]), _mm512_set1_ps(scale)));
}

// chunk_values1 or chunk_values2 for nr rows over a full chunk, values at
// v + j * vs, fetching the next chunk's at pf + j * vs as full_dots does; the
// same bits.
static inline __attribute__((always_inline)) void
full_values(const int dtype, const int nd, const int fetch, const int nr, const char *v,
            const char *pf, size_t vs, const float *p0, const float *p1, const float *corr,
            float *acc0, float *acc1)
{
    const size_t esz = dtype == DTYPE_F32 ? 4 : 2;
    const float *p[2] = {p0, p1};
    float *acc[2] = {acc0, acc1};
    __m512 a[2][16];
#pragma GCC unroll 2
    for (int h = 0; h < nr; h++)
#pragma GCC unroll 16
        for (int i = 0; i < nd; i++)
            a[h][i] = _mm512_mul_ps(_mm512_load_ps(acc[h] + i * 16), _mm512_set1_ps(corr[h]));
#pragma GCC unroll 2
    for (int j = 0; j < ATTN_CHUNK; j++) {
        const char *vj = v + (size_t)j * vs, *pj = fetch ? pf + (size_t)j * vs : NULL;
        __m512 pv[2];
#pragma GCC unroll 2
        for (int h = 0; h < nr; h++)
            pv[h] = _mm512_set1_ps(p[h][j]);
#pragma GCC unroll 16
        for (int i = 0; i < nd; i++) {
            size_t at = (size_t)i * 16 * esz;
            __m512 vv = avx512_load16(dtype, vj + at, 0xffff);
            if (nr == 2)
                in_register(&vv);
#pragma GCC unroll 2
            for (int h = 0; h < nr; h++)
                a[h][i] = _mm512_fmadd_ps(pv[h], vv, a[h][i]);
            if (at % 64 == 0)
                fetch_line(fetch, pj + at);
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < nr; h++)
#pragma GCC unroll 16
        for (int i = 0; i < nd; i++)
            _mm512_store_ps(acc[h] + i * 16, a[h][i]);
}

// Sequence s's lone query token against the keys of kv heads kvh0 ..
// kvh0 + n_h - 1, for all their query heads (rows = n_h * group, row r =
// query head kvh0 * group + r). Each row runs attend_block's operations for
// a lone token (copy = false) on the same values in the same order, so its
// results are the same bits whatever heads and sequences share its task.
// What differs is the memory traffic: a chunk's rows of all n_h heads (per
// key n_h * head_dim contiguous values; keys n_kv_heads * head_dim apart)
// are read while the chunk is current, and each head's dot products and
// value sums fetch the same places of the next chunk's rows beside their
// loads (fetch_slice), so the fetches spread over the chunk's work. Issued
// all at the chunk's start, or a head's rows at once, they stalled on the
// core's outstanding misses.
static inline __attribute__((always_inline)) void attend_decode(const int dtype, const int nd,
                                                                const int full_rows,
                                                                const struct attn_ctx *ctx,
                                                                int64_t s, int64_t kvh0, int n_h)
{
    const struct op_call *c = ctx->c;
    const struct tensor *kc = c->src[1], *vc = c->src[2];
    const int32_t *table = (const int32_t *)c->src[3]->data + s * ctx->max_blocks;
    const int32_t *qsl = c->src[5]->data, *seq_lens = c->src[4]->data;
    int G = (int)ctx->group, D = nd * 16, rows = n_h * G;
    int64_t bs = ctx->block_size, tok = qsl[s], pos_last = seq_lens[s] - 1;
    size_t head_bytes = kc->nb[1];
    size_t ks = kc->nb[2], vs = vc->nb[2]; // key (value) j of a block: ks (vs) bytes apart
    // Where the next chunk's rows of the task (keys and values, 2 x 16 x
    // n_h x head_dim values) would not fit the 48 KiB L1 beside the chunk
    // being read, full_dots / full_values fetch them into L2 only: fetched
    // into L1 they evict the current chunk's rows (0.6B shape at 16
    // sequences, 64 KiB of f16 rows a chunk, `bench_ops --cold`: 402-406 us
    // a call against 420-430 fetching into L1, the same code otherwise).
    size_t next_bytes = 2 * ATTN_CHUNK * (size_t)n_h * (size_t)D * (dtype == DTYPE_F32 ? 4 : 2);
    int fetch_lvl = next_bytes > 32 * 1024 ? ATTN_FETCH_L2 : ATTN_FETCH_L1;
    _Alignas(64) float acc[ATTN_MAX_ROWS * ATTN_MAX_HEAD_DIM]; // [rows, D]
    _Alignas(64) float sc[ATTN_MAX_ROWS][ATTN_CHUNK];          // [rows, chunk]
    float m[ATTN_MAX_ROWS], l[ATTN_MAX_ROWS], corr[ATTN_MAX_ROWS];
    const float *q[ATTN_MAX_ROWS];
    // Key j of the chunk, head kvh0 + h: k0[j] + h * head_bytes (values
    // v0); kn, vn the same for the next chunk; kp, vp one head's rows of the chunk, pn of the next.
    // A full chunk sets only entry 0 of k0, v0, kn, vn and none of kp, vp, pn.
    const char *k0[ATTN_CHUNK], *v0[ATTN_CHUNK], *kn[ATTN_CHUNK], *vn[ATTN_CHUNK];
    const char *kp[ATTN_CHUNK], *vp[ATTN_CHUNK], *pn[ATTN_CHUNK];
    for (int r = 0; r < rows; r++) {
        q[r] = cpu_at(c->src[0], 0, tok, kvh0 * G + r);
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    for (int i = 0; i < rows * D; i++)
        acc[i] = 0.0f;
    int64_t chunk = ATTN_CHUNK < bs ? ATTN_CHUNK : bs;
    for (int64_t t0 = 0, t1; t0 <= pos_last; t0 = t1) {
        t1 = chunk_end(t0, chunk, bs, pos_last);
        int64_t block = table[t0 / bs], off = t0 % bs;
        int n = (int)(t1 - t0), n_next = 0;
        int64_t nb = 0, noff = 0;
        if (t1 <= pos_last) {
            nb = table[t1 / bs];
            noff = t1 % bs;
            n_next = (int)(chunk_end(t1, chunk, bs, pos_last) - t1);
        }
        // A full chunk whose next one is full or absent takes full_dots and
        // full_values, for pairs of rows (full_rows 2) or lone rows (1): the
        // same operations, no per-key tests, and its keys (and the next
        // chunk's) are reached from the first one's row and the block's
        // stride, so only the tables' first entries are needed.
        bool full = full_rows && n == ATTN_CHUNK && (n_next == ATTN_CHUNK || n_next == 0);
        int n_tab = full ? 1 : n, n_next_tab = full && n_next ? 1 : n_next;
        for (int j = 0; j < n_tab; j++) {
            k0[j] = cpu_at(kc, block, off + j, kvh0);
            v0[j] = cpu_at(vc, block, off + j, kvh0);
        }
        for (int j = 0; j < n_next_tab; j++) {
            kn[j] = cpu_at(kc, nb, noff + j, kvh0);
            vn[j] = cpu_at(vc, nb, noff + j, kvh0);
        }
        // attend_block's three passes (scores, softmax, values) over the
        // rows of all n_h heads; pairs of rows share a head's loads.
        for (int r = 0; r < rows;) {
            int nr = row_pair(nd, r, rows, G);
            size_t h_off = (size_t)(r / G) * head_bytes;
            if (!full) { // a full chunk's rows: k0[0] + h_off and the stride
                for (int j = 0; j < n; j++)
                    kp[j] = k0[j] + h_off;
                for (int j = 0; j < n_next; j++)
                    pn[j] = kn[j] + h_off;
            }
            const char *const *pf = r % G == 0 ? pn : NULL; // a head's first rows fetch
            const float *q1 = nr == 2 ? q[r + 1] : NULL;
            if (full) { // nr is full_rows here
                int lvl = n_next && r % G == 0 ? fetch_lvl : ATTN_FETCH_NONE;
                const char *kr = k0[0] + h_off, *pr = lvl ? kn[0] + h_off : NULL;
                float scale = c->p.scale, *sc1 = sc[r + full_rows - 1];
                if (lvl == ATTN_FETCH_L2)
                    full_dots(dtype, nd, ATTN_FETCH_L2, full_rows, q[r], q1, kr, pr, ks, scale,
                              sc[r], sc1);
                else if (lvl == ATTN_FETCH_L1)
                    full_dots(dtype, nd, ATTN_FETCH_L1, full_rows, q[r], q1, kr, pr, ks, scale,
                              sc[r], sc1);
                else
                    full_dots(dtype, nd, ATTN_FETCH_NONE, full_rows, q[r], q1, kr, pr, ks, scale,
                              sc[r], sc1);
            } else if (n == ATTN_CHUNK && nr == 2)
                chunk_scores(dtype, nd, false, 2, q[r], q1, NULL, kp, ATTN_CHUNK, c->p.scale,
                             sc + r, pf, n_next);
            else if (n == ATTN_CHUNK)
                chunk_scores(dtype, nd, false, 1, q[r], q1, NULL, kp, ATTN_CHUNK, c->p.scale,
                             sc + r, pf, n_next);
            else
                chunk_scores(dtype, nd, false, nr, q[r], q1, NULL, kp, n, c->p.scale, sc + r, pf,
                             n_next);
            r += nr;
        }
        int nk[ATTN_MAX_ROWS]; // every row sees the chunk's n keys
        for (int r = 0; r < rows; r++)
            nk[r] = n;
        for (int r = 0; r < rows; r += 16)
            softmax_rows16(rows - r < 16 ? rows - r : 16, nk + r, m + r, l + r, sc + r, corr + r);
        for (int r = 0; r < rows;) {
            int nr = row_pair(nd, r, rows, G);
            size_t h_off = (size_t)(r / G) * head_bytes;
            if (!full) {
                for (int j = 0; j < n; j++)
                    vp[j] = v0[j] + h_off;
                for (int j = 0; j < n_next; j++)
                    pn[j] = vn[j] + h_off;
            }
            const char *const *pf = r % G == 0 ? pn : NULL;
            if (full) {
                int lvl = n_next && r % G == 0 ? fetch_lvl : ATTN_FETCH_NONE;
                const char *vr = v0[0] + h_off, *pr = lvl ? vn[0] + h_off : NULL;
                float *a0 = acc + r * D, *a1 = acc + (r + full_rows - 1) * D;
                const float *p1 = sc[r + full_rows - 1];
                if (lvl == ATTN_FETCH_L2)
                    full_values(dtype, nd, ATTN_FETCH_L2, full_rows, vr, pr, vs, sc[r], p1,
                                corr + r, a0, a1);
                else if (lvl == ATTN_FETCH_L1)
                    full_values(dtype, nd, ATTN_FETCH_L1, full_rows, vr, pr, vs, sc[r], p1,
                                corr + r, a0, a1);
                else
                    full_values(dtype, nd, ATTN_FETCH_NONE, full_rows, vr, pr, vs, sc[r], p1,
                                corr + r, a0, a1);
            } else if (n == ATTN_CHUNK && nr == 2)
                chunk_values2(dtype, nd, false, NULL, vp, ATTN_CHUNK, sc[r], sc[r + 1], corr + r,
                              acc + r * D, acc + (r + 1) * D, pf, n_next);
            else if (nr == 1)
                chunk_values1(dtype, nd, false, NULL, vp, n, sc[r], corr[r], acc + r * D, pf,
                              n_next);
            else
                chunk_values2(dtype, nd, false, NULL, vp, n, sc[r], sc[r + 1], corr + r,
                              acc + r * D, acc + (r + 1) * D, pf, n_next);
            r += nr;
        }
    }
    for (int r = 0; r < rows; r++) {
        float *out = cpu_at(c->dst, 0, tok, kvh0 * G + r);
        __m512 inv = _mm512_set1_ps(1.0f / l[r]);
        for (int i = 0; i < D; i += 16)
            _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_load_ps(acc + r * D + i), inv));
    }
}

// Task = (sequence, run of heads_per_task kv heads) of a batch where every
// sequence has one query token.
static void attn_decode_task(void *p, int task, int thread)
{
    (void)thread;
    const struct attn_ctx *ctx = p;
    int64_t n_kv = ctx->c->src[1]->ne[1];
    int64_t n_runs = (n_kv + ctx->heads_per_task - 1) / ctx->heads_per_task;
    int64_t s = task / n_runs, kvh0 = task % n_runs * ctx->heads_per_task;
    const int32_t *qsl = ctx->c->src[5]->data;
    if (qsl[s + 1] == qsl[s])
        return;
    int n_h = (int)(n_kv - kvh0 < ctx->heads_per_task ? n_kv - kvh0 : ctx->heads_per_task);
    int nd = (int)(ctx->head_dim / 16);
    // full_rows 2: every row pairs with the next (an even group, nd <= 8),
    // so the full-chunk code for pairs serves them all; 1: every row is
    // alone (group 1), and full_dots / full_values for one row serve them. The other
    // instances keep their code free of it (a stories-shaped decode, group
    // 1, ran ~5% slower with the pairs' code compiled in but never taken).
    // Not for bf16 caches: their widening (two shuffles a load) made the 0.6B
    // shape's call 8% slower with pairs (`bench_ops --cold`, 16 x 256 keys:
    // 427-435 us against 393-404).
    int full_rows = ctx->dtype == DTYPE_BF16         ? 0
                    : ctx->group % 2 == 0 && nd <= 8 ? 2
                    : ctx->group == 1                ? 1
                                                     : 0;
    switch (ctx->dtype * 64 + nd * 3 + full_rows) {
#define ATTN_DECODE_CASE(dt, nd_, full_rows_)                                                      \
    case dt * 64 + nd_ * 3 + full_rows_:                                                           \
        attend_decode(dt, nd_, full_rows_, ctx, s, kvh0, n_h);                                     \
        break;
        ATTN_DECODE_CASE(DTYPE_F32, 3, 0)
        ATTN_DECODE_CASE(DTYPE_F32, 3, 1)
        ATTN_DECODE_CASE(DTYPE_F32, 3, 2)
        ATTN_DECODE_CASE(DTYPE_F32, 4, 0)
        ATTN_DECODE_CASE(DTYPE_F32, 4, 1)
        ATTN_DECODE_CASE(DTYPE_F32, 4, 2)
        ATTN_DECODE_CASE(DTYPE_F32, 8, 0)
        ATTN_DECODE_CASE(DTYPE_F32, 8, 1)
        ATTN_DECODE_CASE(DTYPE_F32, 8, 2)
        ATTN_DECODE_CASE(DTYPE_F32, 16, 0)
        ATTN_DECODE_CASE(DTYPE_F32, 16, 1)
        ATTN_DECODE_CASE(DTYPE_F16, 3, 0)
        ATTN_DECODE_CASE(DTYPE_F16, 3, 1)
        ATTN_DECODE_CASE(DTYPE_F16, 3, 2)
        ATTN_DECODE_CASE(DTYPE_F16, 4, 0)
        ATTN_DECODE_CASE(DTYPE_F16, 4, 1)
        ATTN_DECODE_CASE(DTYPE_F16, 4, 2)
        ATTN_DECODE_CASE(DTYPE_F16, 8, 0)
        ATTN_DECODE_CASE(DTYPE_F16, 8, 1)
        ATTN_DECODE_CASE(DTYPE_F16, 8, 2)
        ATTN_DECODE_CASE(DTYPE_F16, 16, 0)
        ATTN_DECODE_CASE(DTYPE_F16, 16, 1)
        ATTN_DECODE_CASE(DTYPE_BF16, 3, 0)
        ATTN_DECODE_CASE(DTYPE_BF16, 4, 0)
        ATTN_DECODE_CASE(DTYPE_BF16, 8, 0)
        ATTN_DECODE_CASE(DTYPE_BF16, 16, 0)
#undef ATTN_DECODE_CASE
    default: // attention_supports admits no other head size or cache type
        break;
    }
}

// Task = (kv head, run of tokens_per_task tokens); the run is split where a
// sequence ends. Tasks of one kv head are consecutive, so the threads walk one
// head's cache together while it is in L2.
static void attn_task(void *p, int task, int thread)
{
    (void)thread;
    const struct attn_ctx *ctx = p;
    const int32_t *qsl = ctx->c->src[5]->data, *seq_lens = ctx->c->src[4]->data;
    int64_t kvh = task / ctx->n_tok_tasks;
    int64_t tok = task % ctx->n_tok_tasks * ctx->tokens_per_task;
    int64_t tok_end = tok + ctx->tokens_per_task;
    if (tok_end > ctx->n_tokens)
        tok_end = ctx->n_tokens;
    // The sequence whose query range holds tok: the last s with qsl[s] <= tok.
    int64_t lo = 0, hi = ctx->n_seqs - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (qsl[mid] <= tok)
            lo = mid;
        else
            hi = mid - 1;
    }
    int64_t s = lo;
    if (tok < qsl[s]) // tokens before qsl[0] belong to no sequence
        tok = qsl[s];
    for (; tok < tok_end && s < ctx->n_seqs; s++) {
        int64_t end = qsl[s + 1] < tok_end ? qsl[s + 1] : tok_end;
        if (tok >= end)
            continue;
        int32_t n_q = qsl[s + 1] - qsl[s];
        int32_t pos0 = seq_lens[s] - n_q + (int32_t)(tok - qsl[s]);
        switch (ctx->dtype) {
        case DTYPE_F16:
            attend(DTYPE_F16, ctx, s, tok, (int)(end - tok), pos0, kvh);
            break;
        case DTYPE_BF16:
            attend(DTYPE_BF16, ctx, s, tok, (int)(end - tok), pos0, kvh);
            break;
        default:
            attend(DTYPE_F32, ctx, s, tok, (int)(end - tok), pos0, kvh);
            break;
        }
        tok = end;
    }
}

static bool attention_supports(const struct op_call *c)
{
    const struct tensor *kc = c->src[1], *vc = c->src[2];
    int64_t group = c->src[0]->ne[1] / (kc->ne[1] ? kc->ne[1] : 1);
    return !c->p.prologue && cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) &&
           cpu_is_plain_float(kc->dtype) && vc->dtype == kc->dtype && tensor_rows_contiguous(kc) &&
           tensor_rows_contiguous(vc) &&
           (kc->ne[0] == 48 || kc->ne[0] == 64 || kc->ne[0] == 128 || kc->ne[0] == 256) &&
           group <= ATTN_MAX_GROUP;
}

static enum vllmc_status attention_run(const struct op_call *c)
{
    int32_t max_seq_len;
    enum vllmc_status rc = cpu_attention_check_meta(c, &max_seq_len);
    if (rc)
        return rc;
    int64_t n_seqs = c->src[4]->ne[0];
    if (n_seqs == 0)
        return VLLMC_OK;
    const int32_t *qsl = c->src[5]->data;
    struct attn_ctx ctx = {
        .c = c,
        .n_seqs = n_seqs,
        .n_tokens = qsl[n_seqs],
        .group = c->src[0]->ne[1] / c->src[1]->ne[1],
        .head_dim = c->src[0]->ne[0],
        .block_size = c->src[1]->ne[2],
        .max_blocks = c->src[3]->ne[0],
        .dtype = c->src[1]->dtype,
    };
    // A task copies each chunk of its keys and values once for all its rows,
    // and the cache rows of one head lie n_kv_heads * head_dim apart, so they
    // crowd a few L2 sets and come from L3 each time: prefill tasks take 64
    // rows (0.6B shape pp512: a third of the attention's time went to the
    // copies at 16). Tasks of decode tokens stay at 16 rows, for balance.
    int32_t max_q = 0;
    for (int64_t s = 0; s < n_seqs; s++)
        max_q = qsl[s + 1] - qsl[s] > max_q ? qsl[s + 1] - qsl[s] : max_q;
    int64_t task_rows = max_q * ctx.group >= ATTN_MAX_ROWS ? ATTN_MAX_ROWS : ATTN_DECODE_ROWS;
    ctx.tokens_per_task = task_rows / ctx.group;
    ctx.n_tok_tasks = (ctx.n_tokens + ctx.tokens_per_task - 1) / ctx.tokens_per_task;
    // Small calls (a tiny model, a short context) run inline: waking the
    // workers would cost more than the work. At 2^17 multiply-adds a lone
    // 0.6B-shape token's first 64 keys ran on one thread, reading its f32
    // cache from memory (the weights pass between layers) at half the rate
    // of two: Q4_K_M tg128 spent 0.21-0.22 s of 251 tokens in attention
    // against 0.17-0.18 at 2^15, the stories shape unchanged.
    int64_t n_kv = c->src[1]->ne[1];
    struct threadpool *pool = cpu_attention_work(c) < (1 << 15) ? NULL : op_call_pool(c);
    if (max_q == 1) {
        // Decode batch: tasks of one sequence's kv heads, all of them
        // unless that leaves fewer than 4 tasks per thread, and at most
        // ATTN_MAX_ROWS query rows. One sequence takes one task per thread,
        // which balance: each reads n_kv / n_thr heads' rows side by side
        // (a key's heads are contiguous), where a head a task read 512-byte
        // rows 4 KiB apart at the 0.6B shape (Q4_K_M tg128: attention
        // 0.24-0.25 against 0.21-0.22 s of 251 tokens). The split changes
        // no row's operations.
        int64_t n_thr = threadpool_n_threads(pool);
        int64_t n_runs = n_seqs == 1 ? n_thr : (4 * n_thr + n_seqs - 1) / n_seqs;
        n_runs = n_runs < 1 ? 1 : n_runs > n_kv ? n_kv : n_runs;
        ctx.heads_per_task = (n_kv + n_runs - 1) / n_runs;
        if (ctx.heads_per_task * ctx.group > ATTN_MAX_ROWS)
            ctx.heads_per_task = ATTN_MAX_ROWS / ctx.group;
        n_runs = (n_kv + ctx.heads_per_task - 1) / ctx.heads_per_task;
        threadpool_run(pool, attn_decode_task, &ctx, (int)(n_seqs * n_runs));
        return VLLMC_OK;
    }
    threadpool_run(pool, attn_task, &ctx, (int)(ctx.n_tok_tasks * n_kv));
    return VLLMC_OK;
}

const struct op_provider cpu_avx512_attention = {
    .name = "cpu-avx512",
    .op = OP_ATTENTION,
    .priority = CPU_AVX512_PRIORITY,
    .supports = attention_supports,
    .run = attention_run,
};
