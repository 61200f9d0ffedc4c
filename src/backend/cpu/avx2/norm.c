// cpu-avx2 rmsnorm and add_rmsnorm: 8-lane sum of squares with one
// accumulator (fixed order per row), scale, multiply by the f32 weight.
#include <math.h>

#include "backend/cpu/avx2/avx2.h"
#include "backend/cpu/cpu_ops.h"

struct rows_ctx {
    const struct op_call *c;
    void (*fn)(const struct op_call *c, int64_t row0, int64_t row1);
    int64_t n_rows, rows_per_task;
};

static void rows_task(void *p, int task, int thread)
{
    (void)thread;
    const struct rows_ctx *ctx = p;
    int64_t r0 = (int64_t)task * ctx->rows_per_task;
    int64_t r1 = r0 + ctx->rows_per_task < ctx->n_rows ? r0 + ctx->rows_per_task : ctx->n_rows;
    ctx->fn(ctx->c, r0, r1);
}

void avx2_parallel_rows(const struct op_call *c, int64_t n_rows, int64_t row_elems,
                        void (*fn)(const struct op_call *c, int64_t row0, int64_t row1))
{
    struct threadpool *pool = op_call_pool(c);
    int n_threads = threadpool_n_threads(pool);
    // Below ~32k elements a wake-up costs more than the work.
    if (n_threads == 1 || n_rows < 2 || n_rows * row_elems < 32768) {
        fn(c, 0, n_rows);
        return;
    }
    int64_t n_tasks = 4 * (int64_t)n_threads < n_rows ? 4 * (int64_t)n_threads : n_rows;
    struct rows_ctx ctx = {c, fn, n_rows, (n_rows + n_tasks - 1) / n_tasks};
    threadpool_run(pool, rows_task, &ctx,
                   (int)((n_rows + ctx.rows_per_task - 1) / ctx.rows_per_task));
}

// dst [n] = x * rsqrt(mean(x^2) + eps) * w; the last n % 8 values are summed
// after the vector part, in the same order for every row.
static void rmsnorm_row(float *dst, const float *x, const float *w, int64_t n, float eps)
{
    int64_t n8 = n & ~(int64_t)7;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n8; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    float sum = avx2_hsum(acc);
    for (int64_t i = n8; i < n; i++)
        sum += x[i] * x[i];
    float scale = 1.0f / sqrtf(sum / (float)n + eps);
    __m256 s = _mm256_set1_ps(scale);
    for (int64_t i = 0; i < n8; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s),
                                                _mm256_loadu_ps(w + i)));
    for (int64_t i = n8; i < n; i++)
        dst[i] = x[i] * scale * w[i];
}

static bool rmsnorm_supports(const struct op_call *c)
{
    return cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) && c->src[1]->dtype == DTYPE_F32;
}

static void rmsnorm_rows(const struct op_call *c, int64_t r0, int64_t r1)
{
    for (int64_t r = r0; r < r1; r++)
        rmsnorm_row(cpu_row(c->dst, r), cpu_row(c->src[0], r), c->src[1]->data, c->src[0]->ne[0],
                    c->p.eps);
}

static enum vllmc_status rmsnorm_run(const struct op_call *c)
{
    avx2_parallel_rows(c, tensor_n_rows(c->src[0]), c->src[0]->ne[0], rmsnorm_rows);
    return VLLMC_OK;
}

const struct op_provider cpu_avx2_rmsnorm = {
    .name = "cpu-avx2",
    .op = OP_RMSNORM,
    .priority = CPU_AVX2_PRIORITY,
    .supports = rmsnorm_supports,
    .run = rmsnorm_run,
};

static bool add_rmsnorm_supports(const struct op_call *c)
{
    return rmsnorm_supports(c) && cpu_f32_rows(c->src[2]);
}

static void add_rmsnorm_rows(const struct op_call *c, int64_t r0, int64_t r1)
{
    int64_t n = c->src[0]->ne[0];
    for (int64_t r = r0; r < r1; r++) {
        const float *x = cpu_row(c->src[0], r);
        float *res = cpu_row(c->src[2], r);
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(res + i,
                             _mm256_add_ps(_mm256_loadu_ps(res + i), _mm256_loadu_ps(x + i)));
        for (; i < n; i++)
            res[i] += x[i];
        rmsnorm_row(cpu_row(c->dst, r), res, c->src[1]->data, n, c->p.eps);
    }
}

static enum vllmc_status add_rmsnorm_run(const struct op_call *c)
{
    avx2_parallel_rows(c, tensor_n_rows(c->src[0]), c->src[0]->ne[0], add_rmsnorm_rows);
    return VLLMC_OK;
}

const struct op_provider cpu_avx2_add_rmsnorm = {
    .name = "cpu-avx2",
    .op = OP_ADD_RMSNORM,
    .priority = CPU_AVX2_PRIORITY,
    .supports = add_rmsnorm_supports,
    .run = add_rmsnorm_run,
};
