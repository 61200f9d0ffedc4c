// cpu-avx2 silu_mul: dst = gate / (1 + e^-gate) * up, with a vector exp; gate
// and up are two tensors or the halves of one packed gate|up row.
#include <math.h>

#include "backend/cpu/avx2/avx2.h"
#include "backend/cpu/cpu_ops.h"

static bool silu_mul_supports(const struct op_call *c)
{
    return cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) &&
           (!c->src[1] || cpu_f32_rows(c->src[1]));
}

static void silu_mul_rows(const struct op_call *c, int64_t r0, int64_t r1)
{
    int64_t n = c->dst->ne[0];
    __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (int64_t r = r0; r < r1; r++) {
        const float *g = cpu_row(c->src[0], r);
        const float *u = c->src[1] ? cpu_row(c->src[1], r) : g + n;
        float *d = cpu_row(c->dst, r);
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            __m256 gv = _mm256_loadu_ps(g + i);
            __m256 e = avx2_exp(_mm256_sub_ps(zero, gv));
            __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
            _mm256_storeu_ps(d + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
        }
        for (; i < n; i++)
            d[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

static enum vllmc_status silu_mul_run(const struct op_call *c)
{
    avx2_parallel_rows(c, tensor_n_rows(c->dst), c->dst->ne[0], silu_mul_rows);
    return VLLMC_OK;
}

const struct op_provider cpu_avx2_silu_mul = {
    .name = "cpu-avx2",
    .op = OP_SILU_MUL,
    .priority = CPU_AVX2_PRIORITY,
    .supports = silu_mul_supports,
    .run = silu_mul_run,
};
