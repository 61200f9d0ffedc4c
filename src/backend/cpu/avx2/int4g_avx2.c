// `cpu-int4g-avx2`: int4g weights (AWQ/GPTQ) with AVX2 int8 dot products on
// the quantized-matmul driver. A block is w = d * (q - z) = d * q + m with
// m = -d * z, so its arithmetic is Q4_1's: unsigned nibbles times the int8
// activations (vpmaddubsw + vpmaddwd, exact in int32), scaled by d * d_x, plus
// m times the activation block's d_x * sum(q). The act-order permutation is
// the shared driver's (quant/int4g_matmul.c).
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/quant/blocks.h"
#include "backend/cpu/quant/int4g.h"
#include "backend/cpu/quant/qmatmul.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")
#define PREFETCH_BYTES 1024

ALWAYS_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// out[r * QMM_TILE + c] = dot(weight row r, activation row c): the 32 weights
// of a block as bytes 0..15 against the block's 32 int8 activations.
ALWAYS_INLINE void int4g_tile(const int R, const int C, const uint8_t *const *w,
                              const uint8_t *const *a, int64_t k, float *out)
{
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm256_setzero_ps();
    for (int64_t j = 0; j < k / 32; j++) {
        __m256i wq[4];
        __m256 wd[4], wm[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            const struct block_int4g *b = (const struct block_int4g *)w[r] + j;
            _mm_prefetch((const char *)b + PREFETCH_BYTES, _MM_HINT_T0);
            __m128i x = _mm_loadu_si128((const __m128i *)b->qs);
            wq[r] = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
            const float d = _cvtsh_ss(b->d);
            wd[r] = _mm256_set1_ps(d);
            // m on lane 0 only: the lanes are summed at the end.
            wm[r] = _mm256_blend_ps(_mm256_setzero_ps(), _mm256_set1_ps(-d * (float)b->z), 1);
        }
        UNROLL
        for (int c = 0; c < C; c++) {
            const __m256i aq = _mm256_load_si256((const __m256i *)(a[c] + 32 * j));
            const __m256 ad = _mm256_set1_ps(((const float *)(a[c] + qmm_act_dax_off(k)))[8 * j]);
            const __m256 as = _mm256_set1_ps(((const float *)(a[c] + qmm_act_asum_off(k)))[j]);
            UNROLL
            for (int r = 0; r < R; r++) {
                __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(wq[r], aq), ones16);
                acc[r][c] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(wd[r], ad), acc[r][c]);
                acc[r][c] = _mm256_fmadd_ps(wm[r], as, acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            out[r * QMM_TILE + c] = hsum8(acc[r][c]);
}

static void int4g_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                           int64_t k, float *out)
{
    QMM_TILE_DISPATCH(int4g_tile, R, C, w, a, k, out)
}

static const struct qmm_type_kernel int4g_kernel = {DTYPE_INT4G, 0, 64, int4g_tile_any};

// The driver's isa: this file's kernel with cpu-q-avx2's activation quantizer
// (zero point 0: the weights' own zero points are handled through m).
static struct qmm_isa int4g_isa(void)
{
    return (struct qmm_isa){.name = "cpu-int4g-avx2",
                            .quantize = qmm_isa_avx2.quantize,
                            .kernels = &int4g_kernel,
                            .n_kernels = 1};
}

static bool int4g_supports(const struct op_call *c)
{
    struct qmm_isa isa = int4g_isa();
    return int4g_qmm_supports(&isa, c);
}

static enum vllmc_status int4g_run(const struct op_call *c)
{
    struct qmm_isa isa = int4g_isa();
    return int4g_qmm_run(&isa, c);
}

const struct op_provider cpu_int4g_avx2_matmul = {
    .name = "cpu-int4g-avx2",
    .op = OP_MATMUL,
    .priority = 60,
    .supports = int4g_supports,
    .run = int4g_run,
};
