// cpu-avx2 paged attention: one task per (query token, kv head) so the heads
// of a GQA group share each K and V load; keys are visited in chunks of at
// most 16 inside each cache block with an online softmax (running max and
// sum, accumulator rescaled per chunk). The chunking depends only on key
// positions, so a query's result does not depend on the rest of the batch.
#include <math.h>

#include "backend/cpu/avx2/avx2.h"
#include "backend/cpu/cpu_ops.h"

#define ATTN_MAX_HEAD_DIM 256
#define ATTN_MAX_GROUP 16
#define ATTN_CHUNK 16

struct attn_ctx {
    const struct op_call *c;
    int64_t n_seqs, group, head_dim, block_size, max_blocks;
    int dtype; // cache dtype
};

static inline __attribute__((always_inline)) float dot_k(int dtype, const float *q, const void *k,
                                                         int64_t n)
{
    size_t esz = dtype == DTYPE_F32 ? 4 : 2;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), avx2_load8(dtype, (const char *)k + i * esz),
                              acc);
    return avx2_hsum(acc);
}

static inline __attribute__((always_inline)) void attend_one(const int dtype,
                                                             const struct attn_ctx *ctx, int64_t s,
                                                             int64_t tok, int32_t pos, int64_t kvh)
{
    const struct op_call *c = ctx->c;
    const struct tensor *kc = c->src[1], *vc = c->src[2];
    const int32_t *table = (const int32_t *)c->src[3]->data + s * ctx->max_blocks;
    int64_t G = ctx->group, D = ctx->head_dim, bs = ctx->block_size;
    size_t esz = dtype == DTYPE_F32 ? 4 : 2;
    float acc[ATTN_MAX_GROUP * ATTN_MAX_HEAD_DIM];
    float m[ATTN_MAX_GROUP], l[ATTN_MAX_GROUP];
    float sc[ATTN_MAX_GROUP][ATTN_CHUNK];
    const float *q[ATTN_MAX_GROUP];
    for (int64_t g = 0; g < G; g++) {
        q[g] = cpu_at(c->src[0], 0, tok, kvh * G + g);
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    for (int64_t i = 0; i < G * D; i++)
        acc[i] = 0.0f;
    // The next chunk starts at t1, not t0 + chunk: with blocks of more than
    // 16 keys that are no multiple of 16, a chunk can end at its block's end.
    for (int64_t t0 = 0, t1; t0 <= pos; t0 = t1) {
        // Keys [t0, t1) lie in one cache block.
        int64_t chunk = ATTN_CHUNK < bs ? ATTN_CHUNK : bs;
        int64_t block_end = (t0 / bs + 1) * bs;
        t1 = t0 + chunk;
        if (t1 > block_end)
            t1 = block_end;
        if (t1 > pos + 1)
            t1 = pos + 1;
        int64_t n = t1 - t0, block = table[t0 / bs], off = t0 % bs;
        for (int64_t j = 0; j < n; j++) {
            const void *k = cpu_at(kc, block, off + j, kvh);
            for (int64_t g = 0; g < G; g++)
                sc[g][j] = dot_k(dtype, q[g], k, D) * c->p.scale;
        }
        for (int64_t g = 0; g < G; g++) {
            float mc = m[g];
            for (int64_t j = 0; j < n; j++)
                mc = sc[g][j] > mc ? sc[g][j] : mc;
            for (int64_t j = n; j % 8; j++)
                sc[g][j] = mc;            // padding lanes of the vector exp below
            float corr = expf(m[g] - mc); // 0 on the first chunk (m = -inf)
            m[g] = mc;
            float sum = 0.0f;
            __m256 mv = _mm256_set1_ps(mc);
            for (int64_t j = 0; j < n; j += 8) {
                __m256 p = avx2_exp(_mm256_sub_ps(_mm256_loadu_ps(&sc[g][j]), mv));
                _mm256_storeu_ps(&sc[g][j], p);
            }
            for (int64_t j = 0; j < n; j++)
                sum += sc[g][j];
            l[g] = l[g] * corr + sum;
            __m256 cv = _mm256_set1_ps(corr);
            for (int64_t i = 0; i < D; i += 8)
                _mm256_storeu_ps(acc + g * D + i,
                                 _mm256_mul_ps(_mm256_loadu_ps(acc + g * D + i), cv));
        }
        for (int64_t j = 0; j < n; j++) {
            const char *v = cpu_at(vc, block, off + j, kvh);
            for (int64_t i = 0; i < D; i += 8) {
                __m256 vv = avx2_load8(dtype, v + (size_t)i * esz);
                for (int64_t g = 0; g < G; g++) {
                    float *a = acc + g * D + i;
                    _mm256_storeu_ps(
                        a, _mm256_fmadd_ps(_mm256_set1_ps(sc[g][j]), vv, _mm256_loadu_ps(a)));
                }
            }
        }
    }
    for (int64_t g = 0; g < G; g++) {
        float *out = cpu_at(c->dst, 0, tok, kvh * G + g);
        __m256 inv = _mm256_set1_ps(1.0f / l[g]);
        for (int64_t i = 0; i < D; i += 8)
            _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(acc + g * D + i), inv));
    }
}

static void attn_task(void *p, int task, int thread)
{
    (void)thread;
    const struct attn_ctx *ctx = p;
    const int32_t *qsl = ctx->c->src[5]->data, *seq_lens = ctx->c->src[4]->data;
    int64_t n_kv = ctx->c->src[1]->ne[1];
    int64_t tok = task / n_kv, kvh = task % n_kv;
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
    if (tok < qsl[s])
        return;
    int32_t n_q = qsl[s + 1] - qsl[s];
    int32_t pos = seq_lens[s] - n_q + (int32_t)(tok - qsl[s]);
    switch (ctx->dtype) {
    case DTYPE_F16:
        attend_one(DTYPE_F16, ctx, s, tok, pos, kvh);
        break;
    case DTYPE_BF16:
        attend_one(DTYPE_BF16, ctx, s, tok, pos, kvh);
        break;
    default:
        attend_one(DTYPE_F32, ctx, s, tok, pos, kvh);
        break;
    }
}

static bool attention_supports(const struct op_call *c)
{
    const struct tensor *kc = c->src[1], *vc = c->src[2];
    int64_t group = c->src[0]->ne[1] / (kc->ne[1] ? kc->ne[1] : 1);
    return !c->p.prologue && cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) &&
           cpu_is_plain_float(kc->dtype) && vc->dtype == kc->dtype && tensor_rows_contiguous(kc) &&
           tensor_rows_contiguous(vc) && kc->ne[0] % 8 == 0 && kc->ne[0] <= ATTN_MAX_HEAD_DIM &&
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
        .group = c->src[0]->ne[1] / c->src[1]->ne[1],
        .head_dim = c->src[0]->ne[0],
        .block_size = c->src[1]->ne[2],
        .max_blocks = c->src[3]->ne[0],
        .dtype = c->src[1]->dtype,
    };
    // Tokens before qsl[0] belong to no sequence; attn_task skips them.
    int64_t n_kv = c->src[1]->ne[1];
    // Small calls (a tiny model, a short context) run inline: waking the
    // workers would cost more than the work.
    struct threadpool *pool = cpu_attention_work(c) < (1 << 17) ? NULL : op_call_pool(c);
    threadpool_run(pool, attn_task, &ctx, (int)(qsl[n_seqs] * n_kv));
    return VLLMC_OK;
}

const struct op_provider cpu_avx2_attention = {
    .name = "cpu-avx2",
    .op = OP_ATTENTION,
    .priority = CPU_AVX2_PRIORITY,
    .supports = attention_supports,
    .run = attention_run,
};
