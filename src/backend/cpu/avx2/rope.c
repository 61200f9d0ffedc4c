// cpu-avx2 rope and qk_norm_rope: cos and sin computed once per token with
// the same scalar formula as cpu-ref, then applied to every head 8 lanes at
// a time (rotate-half directly; adjacent pairs via a lane swap).
#include <math.h>

#include "backend/cpu/avx2/avx2.h"
#include "backend/cpu/cpu_ops.h"

#define ROPE_MAX_DIM 1024

struct rope_tables {
    float cos[ROPE_MAX_DIM]; // neox: [half] per pair; pairs: duplicated per lane
    float sin[ROPE_MAX_DIM]; // neox: [half]; pairs: -sin, +sin per lane pair
};

static void rope_tables_fill(struct rope_tables *t, int rope_dim, bool neox, int32_t pos,
                             const float *inv_freq)
{
    for (int i = 0; i < rope_dim / 2; i++) {
        float theta = (float)pos * inv_freq[i];
        float cs = cosf(theta), sn = sinf(theta);
        if (neox) {
            t->cos[i] = cs;
            t->sin[i] = sn;
        } else {
            t->cos[2 * i] = t->cos[2 * i + 1] = cs;
            t->sin[2 * i] = -sn;
            t->sin[2 * i + 1] = sn;
        }
    }
}

static void rope_apply(float *head, int rope_dim, bool neox, const struct rope_tables *t)
{
    if (neox) {
        int half = rope_dim / 2;
        for (int i = 0; i < half; i += 8) {
            __m256 x0 = _mm256_loadu_ps(head + i), x1 = _mm256_loadu_ps(head + half + i);
            __m256 cs = _mm256_loadu_ps(t->cos + i), sn = _mm256_loadu_ps(t->sin + i);
            _mm256_storeu_ps(head + i, _mm256_fmsub_ps(x0, cs, _mm256_mul_ps(x1, sn)));
            _mm256_storeu_ps(head + half + i, _mm256_fmadd_ps(x0, sn, _mm256_mul_ps(x1, cs)));
        }
        return;
    }
    for (int i = 0; i < rope_dim; i += 8) {
        __m256 x = _mm256_loadu_ps(head + i);
        __m256 swapped = _mm256_permute_ps(x, 0xB1); // (x1, x0) per pair
        _mm256_storeu_ps(head + i,
                         _mm256_fmadd_ps(x, _mm256_loadu_ps(t->cos + i),
                                         _mm256_mul_ps(swapped, _mm256_loadu_ps(t->sin + i))));
    }
}

// Lanes come 8 at a time: rotate-half needs rope_dim / 2 % 8, pairs rope_dim % 8.
static bool rope_shape_ok(const struct op_call *c)
{
    int rd = c->p.rope_dim;
    return cpu_f32_rows(c->dst) && rd <= ROPE_MAX_DIM && (c->p.rope_neox ? rd % 16 : rd % 8) == 0;
}

static void rope_rows(const struct op_call *c, int64_t t0, int64_t t1)
{
    const struct tensor *d = c->dst;
    const int32_t *pos = c->src[0]->data;
    struct rope_tables tab;
    for (int64_t t = t0; t < t1; t++) {
        rope_tables_fill(&tab, c->p.rope_dim, c->p.rope_neox, pos[t], c->src[1]->data);
        for (int64_t h = 0; h < d->ne[1]; h++)
            rope_apply(cpu_at(d, 0, t, h), c->p.rope_dim, c->p.rope_neox, &tab);
    }
}

static enum vllmc_status rope_run(const struct op_call *c)
{
    avx2_parallel_rows(c, c->dst->ne[2], c->dst->ne[1] * c->dst->ne[0], rope_rows);
    return VLLMC_OK;
}

const struct op_provider cpu_avx2_rope = {
    .name = "cpu-avx2",
    .op = OP_ROPE,
    .priority = CPU_AVX2_PRIORITY,
    .supports = rope_shape_ok,
    .run = rope_run,
};

// One head [n] (n % 8 == 0) in place: x * rsqrt(mean(x^2) + eps) * w.
static void head_rmsnorm(float *head, int64_t n, const float *w, float eps)
{
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        __m256 v = _mm256_loadu_ps(head + i);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    __m256 s = _mm256_set1_ps(1.0f / sqrtf(avx2_hsum(acc) / (float)n + eps));
    for (int64_t i = 0; i < n; i += 8)
        _mm256_storeu_ps(head + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(head + i), s),
                                                 _mm256_loadu_ps(w + i)));
}

static bool qk_norm_rope_supports(const struct op_call *c)
{
    return rope_shape_ok(c) && c->dst->ne[0] % 8 == 0 && c->src[2]->dtype == DTYPE_F32;
}

static void qk_norm_rope_rows(const struct op_call *c, int64_t t0, int64_t t1)
{
    const struct tensor *d = c->dst;
    const int32_t *pos = c->src[0]->data;
    const float *w = c->src[2]->data;
    int64_t n = d->ne[0];
    struct rope_tables tab;
    for (int64_t t = t0; t < t1; t++) {
        rope_tables_fill(&tab, c->p.rope_dim, c->p.rope_neox, pos[t], c->src[1]->data);
        for (int64_t h = 0; h < d->ne[1]; h++) {
            float *head = cpu_at(d, 0, t, h);
            head_rmsnorm(head, n, w, c->p.eps);
            rope_apply(head, c->p.rope_dim, c->p.rope_neox, &tab);
        }
    }
}

static enum vllmc_status qk_norm_rope_run(const struct op_call *c)
{
    avx2_parallel_rows(c, c->dst->ne[2], c->dst->ne[1] * c->dst->ne[0], qk_norm_rope_rows);
    return VLLMC_OK;
}

const struct op_provider cpu_avx2_qk_norm_rope = {
    .name = "cpu-avx2",
    .op = OP_QK_NORM_ROPE,
    .priority = CPU_AVX2_PRIORITY,
    .supports = qk_norm_rope_supports,
    .run = qk_norm_rope_run,
};

// qkv_rope_store: the q heads of each fused qkv row are copied to dst and
// normed/rotated there, the k heads in a stack row before they are stored;
// the arithmetic per head is that of rope / qk_norm_rope above and the cache
// rounding that of cpu-ref kv_store, so a fused layer matches the split one
// bit for bit. The gate is the split ops' gates together.
static bool qkv_rope_store_supports(const struct op_call *c)
{
    const struct tensor *kc = c->src[5], *vc = c->src[6], *wq = c->src[3], *wk = c->src[4];
    bool norm_ok = !wq || (c->dst->ne[0] % 8 == 0 && wq->dtype == DTYPE_F32 &&
                           wk->dtype == DTYPE_F32);
    return rope_shape_ok(c) && c->dst->ne[0] <= ROPE_MAX_DIM && norm_ok &&
           cpu_f32_rows(c->src[0]) && cpu_is_plain_float(kc->dtype) && vc->dtype == kc->dtype &&
           tensor_rows_contiguous(kc) && tensor_rows_contiguous(vc);
}

static void qkv_rope_store_rows(const struct op_call *c, int64_t t0, int64_t t1)
{
    const struct tensor *q = c->dst, *kc = c->src[5], *vc = c->src[6];
    const int32_t *pos = c->src[1]->data, *slots = c->src[7]->data;
    const float *wq = c->src[3] ? c->src[3]->data : NULL;
    const float *wk = c->src[4] ? c->src[4]->data : NULL;
    int64_t hd = q->ne[0], nh = q->ne[1], nkv = kc->ne[1], block_size = kc->ne[2];
    struct rope_tables tab;
    float k[ROPE_MAX_DIM];
    for (int64_t t = t0; t < t1; t++) {
        const float *row = cpu_row(c->src[0], t);
        rope_tables_fill(&tab, c->p.rope_dim, c->p.rope_neox, pos[t], c->src[2]->data);
        for (int64_t h = 0; h < nh; h++) {
            float *head = cpu_at(q, 0, t, h);
            memcpy(head, row + h * hd, (size_t)hd * sizeof(float));
            if (wq)
                head_rmsnorm(head, hd, wq, c->p.eps);
            rope_apply(head, c->p.rope_dim, c->p.rope_neox, &tab);
        }
        if (slots[t] < 0)
            continue;
        int64_t block = slots[t] / block_size, offset = slots[t] % block_size;
        for (int64_t h = 0; h < nkv; h++) {
            const float *v = row + (nh + nkv + h) * hd;
            memcpy(k, row + (nh + h) * hd, (size_t)hd * sizeof(float));
            if (wk)
                head_rmsnorm(k, hd, wk, c->p.eps);
            rope_apply(k, c->p.rope_dim, c->p.rope_neox, &tab);
            avx2_store_row(kc->dtype, cpu_at(kc, block, offset, h), k, hd);
            avx2_store_row(vc->dtype, cpu_at(vc, block, offset, h), v, hd);
        }
    }
}

static enum vllmc_status qkv_rope_store_run(const struct op_call *c)
{
    const int32_t *slots = c->src[7]->data;
    int64_t n = c->dst->ne[2], n_slots = c->src[5]->ne[2] * c->src[5]->ne[3];
    for (int64_t t = 0; t < n; t++)
        if (slots[t] >= n_slots)
            return op_fail(c, VLLMC_ERR_INVALID_ARG, "slot %d of token %lld outside [0, %lld)",
                           (int)slots[t], (long long)t, (long long)n_slots);
    avx2_parallel_rows(c, n, c->src[0]->ne[0], qkv_rope_store_rows);
    return VLLMC_OK;
}

const struct op_provider cpu_avx2_qkv_rope_store = {
    .name = "cpu-avx2",
    .op = OP_QKV_ROPE_STORE,
    .priority = CPU_AVX2_PRIORITY,
    .supports = qkv_rope_store_supports,
    .run = qkv_rope_store_run,
};
