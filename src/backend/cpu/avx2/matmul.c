// cpu-avx2 matmul: f32, f16 and bf16 weights converted in registers, R x C
// tiles of 8-lane FMA dot products (one accumulator per output element, k in
// order, then a fixed horizontal sum and a scalar tail: batch-invariant).
#include "backend/cpu/avx2/avx2.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/matmul_tiled.h"

#define R_MAX 2
#define C_MAX 4
#define C_MAX_R1 8

static inline __attribute__((always_inline)) void tile(const int R, const int C, const int wt,
                                                       const float *const *x, const void *const *w,
                                                       int64_t k, float *out)
{
    size_t esz = wt == DTYPE_F32 ? 4 : 2;
    __m256 acc[R_MAX][C_MAX_R1];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm256_setzero_ps();
    int64_t l = 0;
    for (; l + 8 <= k; l += 8) {
        __m256 xv[R_MAX];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            xv[r] = _mm256_loadu_ps(x[r] + l);
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            __m256 wv = avx2_load8(wt, (const char *)w[c] + (size_t)l * esz);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            float s = avx2_hsum(acc[r][c]);
            for (int64_t t = l; t < k; t++)
                s += x[r][t] * cpu_load((enum dtype)wt, w[c], t);
            out[r * C + c] = s;
        }
    }
}

#define TILE_CASES(wt)                                                                             \
    switch (R * 8 + C) { /* R <= 2; C <= 8 only when R = 1 */                                      \
    case 8 + 1:                                                                                    \
        tile(1, 1, wt, x, w, k, out);                                                              \
        break;                                                                                     \
    case 8 + 2:                                                                                    \
        tile(1, 2, wt, x, w, k, out);                                                              \
        break;                                                                                     \
    case 8 + 3:                                                                                    \
        tile(1, 3, wt, x, w, k, out);                                                              \
        break;                                                                                     \
    case 8 + 4:                                                                                    \
        tile(1, 4, wt, x, w, k, out);                                                              \
        break;                                                                                     \
    case 8 + 5:                                                                                    \
        tile(1, 5, wt, x, w, k, out);                                                              \
        break;                                                                                     \
    case 8 + 6:                                                                                    \
        tile(1, 6, wt, x, w, k, out);                                                              \
        break;                                                                                     \
    case 8 + 7:                                                                                    \
        tile(1, 7, wt, x, w, k, out);                                                              \
        break;                                                                                     \
    case 8 + 8:                                                                                    \
        tile(1, 8, wt, x, w, k, out);                                                              \
        break;                                                                                     \
    case 16 + 1:                                                                                   \
        tile(2, 1, wt, x, w, k, out);                                                              \
        break;                                                                                     \
    case 16 + 2:                                                                                   \
        tile(2, 2, wt, x, w, k, out);                                                              \
        break;                                                                                     \
    case 16 + 3:                                                                                   \
        tile(2, 3, wt, x, w, k, out);                                                              \
        break;                                                                                     \
    default:                                                                                       \
        tile(2, 4, wt, x, w, k, out);                                                              \
        break;                                                                                     \
    }

static void tile_f32(int R, int C, const float *const *x, const void *const *w, int64_t k,
                     float *out)
{
    TILE_CASES(DTYPE_F32)
}

static void tile_f16(int R, int C, const float *const *x, const void *const *w, int64_t k,
                     float *out)
{
    TILE_CASES(DTYPE_F16)
}

static void tile_bf16(int R, int C, const float *const *x, const void *const *w, int64_t k,
                      float *out)
{
    TILE_CASES(DTYPE_BF16)
}

static const struct cpu_mm_kernel kernel_f32 = {
    .tile = tile_f32, .r_max = R_MAX, .c_max = C_MAX, .c_max_r1 = C_MAX_R1};
static const struct cpu_mm_kernel kernel_f16 = {
    .tile = tile_f16, .r_max = R_MAX, .c_max = C_MAX, .c_max_r1 = C_MAX_R1};
static const struct cpu_mm_kernel kernel_bf16 = {
    .tile = tile_bf16, .r_max = R_MAX, .c_max = C_MAX, .c_max_r1 = C_MAX_R1};

static const struct cpu_mm_float_kernels kernels = {&kernel_f32, &kernel_f16, &kernel_bf16};

static enum vllmc_status matmul_run(const struct op_call *c)
{
    return cpu_matmul_tiled_float_run(c, &kernels);
}

const struct op_provider cpu_avx2_matmul = {
    .name = "cpu-avx2",
    .op = OP_MATMUL,
    .priority = CPU_AVX2_PRIORITY,
    .supports = cpu_matmul_tiled_float_supports,
    .run = matmul_run,
};
