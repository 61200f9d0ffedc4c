// cpu-avx512 paged attention: the cpu-avx2 scheme (one task per query token
// and kv head, keys in chunks of at most 16 inside each cache block, online
// softmax) on 16-lane vectors. A chunk's scores for one head come out of one
// transposed sum, and each 16-lane slice of the output takes all the chunk's
// values in a register. Chunks depend only on key positions, so a query's
// result does not depend on the rest of the batch.
#include <math.h>

#include "backend/cpu/avx2/avx2.h"
#include "backend/cpu/avx512/avx512.h"
#include "backend/cpu/cpu_ops.h"

#define ATTN_MAX_HEAD_DIM 256
#define ATTN_MAX_GROUP 16
#define ATTN_CHUNK 16

struct attn_ctx {
    const struct op_call *c;
    int64_t n_seqs, group, head_dim, block_size, max_blocks;
    int dtype; // cache dtype
};

// Query token tok (position pos of sequence s) against the keys [0, pos] of
// kv head kvh, for the group of query heads that share it.
// nd = head_dim / 16 slices: a constant, so the slices of a value row and
// the chunk's 16 key dot products stay in registers as independent chains.
static inline __attribute__((always_inline)) void attend_one(const int dtype, const int nd,
                                                             const struct attn_ctx *ctx, int64_t s,
                                                             int64_t tok, int32_t pos, int64_t kvh)
{
    const struct op_call *c = ctx->c;
    const struct tensor *kc = c->src[1], *vc = c->src[2];
    const int32_t *table = (const int32_t *)c->src[3]->data + s * ctx->max_blocks;
    int64_t G = ctx->group, D = nd * 16, bs = ctx->block_size;
    size_t esz = dtype == DTYPE_F32 ? 4 : 2;
    float acc[ATTN_MAX_GROUP * ATTN_MAX_HEAD_DIM]; // [G, D]
    float m[ATTN_MAX_GROUP], l[ATTN_MAX_GROUP];
    float sc[ATTN_MAX_GROUP][ATTN_CHUNK]; // [G, chunk] scores, then probabilities
    const float *q[ATTN_MAX_GROUP];
    const char *kp[ATTN_CHUNK], *vp[ATTN_CHUNK];
    for (int64_t g = 0; g < G; g++) {
        q[g] = cpu_at(c->src[0], 0, tok, kvh * G + g);
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    for (int64_t i = 0; i < G * D; i++)
        acc[i] = 0.0f;
    int64_t chunk = ATTN_CHUNK < bs ? ATTN_CHUNK : bs;
    for (int64_t t0 = 0; t0 <= pos; t0 += chunk) {
        // Keys [t0, t1) lie in one cache block.
        int64_t block_end = (t0 / bs + 1) * bs;
        int64_t t1 = t0 + chunk;
        if (t1 > block_end)
            t1 = block_end;
        if (t1 > pos + 1)
            t1 = pos + 1;
        int n = (int)(t1 - t0);
        int64_t block = table[t0 / bs], off = t0 % bs;
        for (int j = 0; j < n; j++) {
            kp[j] = cpu_at(kc, block, off + j, kvh);
            vp[j] = cpu_at(vc, block, off + j, kvh);
        }
        for (int64_t g = 0; g < G; g++) {
            // dots[j] = q . k_j, 16 slices in order, then one fixed sum.
            __m512 dots[ATTN_CHUNK];
#pragma GCC unroll 16
            for (int j = 0; j < ATTN_CHUNK; j++)
                dots[j] = _mm512_setzero_ps();
            for (int i = 0; i < nd; i++) {
                __m512 qv = _mm512_loadu_ps(q[g] + i * 16);
#pragma GCC unroll 16
                for (int j = 0; j < ATTN_CHUNK; j++)
                    if (j < n)
                        dots[j] = _mm512_fmadd_ps(
                            qv, avx512_load16(dtype, kp[j] + (size_t)i * 16 * esz, 0xffff),
                            dots[j]);
            }
            avx512_sums16(dots, n, sc[g]);
            for (int j = 0; j < n; j++)
                sc[g][j] *= c->p.scale;
        }
        for (int64_t g = 0; g < G; g++) {
            float mc = m[g];
            for (int j = 0; j < n; j++)
                mc = sc[g][j] > mc ? sc[g][j] : mc;
            for (int j = n; j % 8; j++)
                sc[g][j] = mc;            // padding lanes of the vector exp below
            float corr = expf(m[g] - mc); // 0 on the first chunk (m = -inf)
            m[g] = mc;
            __m256 mv = _mm256_set1_ps(mc);
            for (int j = 0; j < n; j += 8)
                _mm256_storeu_ps(&sc[g][j],
                                 avx2_exp(_mm256_sub_ps(_mm256_loadu_ps(&sc[g][j]), mv)));
            float sum = 0.0f;
            for (int j = 0; j < n; j++)
                sum += sc[g][j];
            l[g] = l[g] * corr + sum;
            // acc = acc * corr + sum_j p_j v_j, the nd slices side by side.
            __m512 cv = _mm512_set1_ps(corr), a[16];
#pragma GCC unroll 16
            for (int i = 0; i < nd; i++)
                a[i] = _mm512_mul_ps(_mm512_loadu_ps(acc + g * D + i * 16), cv);
            for (int j = 0; j < n; j++) {
                __m512 pv = _mm512_set1_ps(sc[g][j]);
#pragma GCC unroll 16
                for (int i = 0; i < nd; i++)
                    a[i] = _mm512_fmadd_ps(
                        pv, avx512_load16(dtype, vp[j] + (size_t)i * 16 * esz, 0xffff), a[i]);
            }
#pragma GCC unroll 16
            for (int i = 0; i < nd; i++)
                _mm512_storeu_ps(acc + g * D + i * 16, a[i]);
        }
    }
    for (int64_t g = 0; g < G; g++) {
        float *out = cpu_at(c->dst, 0, tok, kvh * G + g);
        __m512 inv = _mm512_set1_ps(1.0f / l[g]);
        for (int64_t i = 0; i < D; i += 16)
            _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(acc + g * D + i), inv));
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
    // The head sizes of current models; others take cpu-avx2 (see the gate).
#define ATTEND(dt)                                                                                 \
    do {                                                                                           \
        if (ctx->head_dim == 64)                                                                   \
            attend_one(dt, 4, ctx, s, tok, pos, kvh);                                              \
        else if (ctx->head_dim == 128)                                                             \
            attend_one(dt, 8, ctx, s, tok, pos, kvh);                                              \
        else                                                                                       \
            attend_one(dt, 16, ctx, s, tok, pos, kvh);                                             \
    } while (0)
    switch (ctx->dtype) {
    case DTYPE_F16:
        ATTEND(DTYPE_F16);
        break;
    case DTYPE_BF16:
        ATTEND(DTYPE_BF16);
        break;
    default:
        ATTEND(DTYPE_F32);
        break;
    }
#undef ATTEND
}

static bool attention_supports(const struct op_call *c)
{
    const struct tensor *kc = c->src[1], *vc = c->src[2];
    int64_t group = c->src[0]->ne[1] / (kc->ne[1] ? kc->ne[1] : 1);
    return cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) && cpu_is_plain_float(kc->dtype) &&
           vc->dtype == kc->dtype && tensor_rows_contiguous(kc) && tensor_rows_contiguous(vc) &&
           (kc->ne[0] == 64 || kc->ne[0] == 128 || kc->ne[0] == 256) && group <= ATTN_MAX_GROUP;
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
    const int32_t *qsl = c->src[5]->data, *seq_lens = c->src[4]->data;
    struct attn_ctx ctx = {
        .c = c,
        .n_seqs = n_seqs,
        .group = c->src[0]->ne[1] / c->src[1]->ne[1],
        .head_dim = c->src[0]->ne[0],
        .block_size = c->src[1]->ne[2],
        .max_blocks = c->src[3]->ne[0],
        .dtype = c->src[1]->dtype,
    };
    // Small calls (a tiny model, a short context) run inline: waking the
    // workers would cost more than the work. Tokens before qsl[0] belong to
    // no sequence; attn_task skips them.
    int64_t n_kv = c->src[1]->ne[1], work = 0;
    for (int64_t s = 0; s < n_seqs; s++)
        work += (int64_t)(qsl[s + 1] - qsl[s]) * seq_lens[s];
    work *= c->src[0]->ne[1] * ctx.head_dim;
    struct threadpool *pool = work < (1 << 17) ? NULL : op_call_pool(c);
    threadpool_run(pool, attn_task, &ctx, (int)(qsl[n_seqs] * n_kv));
    return VLLMC_OK;
}

const struct op_provider cpu_avx512_attention = {
    .name = "cpu-avx512",
    .op = OP_ATTENTION,
    .priority = CPU_AVX512_PRIORITY,
    .supports = attention_supports,
    .run = attention_run,
};
