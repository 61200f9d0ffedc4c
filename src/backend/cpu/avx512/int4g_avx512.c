// `cpu-int4g-avx512`: int4g weights (AWQ/GPTQ) with AVX-512 VNNI int8 dot
// products (vpdpbusd) on the quantized-matmul driver: two 32-blocks per
// 512-bit chunk. As in the AVX2 kernel, w = d * q + m with m = -d * z, the
// arithmetic of cpu-q-avx512's Q4_1 (the nibbles sit at the same offset).
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/quant/blocks.h"
#include "backend/cpu/quant/int4g.h"
#include "backend/cpu/quant/qmatmul.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")
#define PREFETCH_BYTES 1024

// [a x 8 lanes, b x 8 lanes]
ALWAYS_INLINE __m512 two_scales(float a, float b)
{
    return _mm512_mask_mov_ps(_mm512_set1_ps(a), 0xFF00, _mm512_set1_ps(b));
}

// The 64 weights of blocks b[0], b[1] as bytes 0..15 in weight order.
ALWAYS_INLINE __m512i int4g_nibbles(const struct block_int4g *b)
{
    const __m512i hi_shift = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0,
                                              0x0004000400040004, 0x0004000400040004, 0, 0);
    __m512i x = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)b[0].qs));
    x = _mm512_mask_broadcast_i32x4(x, 0xFF00, _mm_loadu_si128((const __m128i *)b[1].qs));
    return _mm512_and_si512(_mm512_srlv_epi16(x, hi_shift), _mm512_set1_epi8(0x0F));
}

ALWAYS_INLINE void int4g_tile(const int R, const int C, const uint8_t *const *w,
                              const uint8_t *const *a, int64_t k, float *out)
{
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < k / 64; j++) {
        __m512i wq[4];
        __m512 wd[4], wm[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            const struct block_int4g *b = (const struct block_int4g *)w[r] + 2 * j;
            _mm_prefetch((const char *)b + PREFETCH_BYTES, _MM_HINT_T0);
            wq[r] = int4g_nibbles(b);
            const float d0 = _cvtsh_ss(b[0].d), d1 = _cvtsh_ss(b[1].d);
            wd[r] = two_scales(d0, d1);
            // m of each block on its first lane only (lanes 0 and 8).
            wm[r] =
                _mm512_maskz_mov_ps(0x0101, two_scales(-d0 * (float)b[0].z, -d1 * (float)b[1].z));
        }
        UNROLL
        for (int c = 0; c < C; c++) {
            const __m512i aq = _mm512_load_si512(a[c] + 64 * j);
            const __m512 ad = _mm512_load_ps((const float *)(a[c] + qmm_act_dax_off(k)) + 16 * j);
            const __m512 as = _mm512_maskz_expandloadu_ps(
                0x0101, (const float *)(a[c] + qmm_act_asum_off(k)) + 2 * j);
            UNROLL
            for (int r = 0; r < R; r++) {
                __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[r], aq);
                acc[r][c] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wd[r], ad), acc[r][c]);
                acc[r][c] = _mm512_fmadd_ps(wm[r], as, acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            out[r * QMM_TILE + c] = _mm512_reduce_add_ps(acc[r][c]);
}

static void int4g_tile_any(int R, int C, const uint8_t *const *w, const uint8_t *const *a,
                           int64_t k, float *out)
{
    QMM_TILE_DISPATCH(int4g_tile, R, C, w, a, k, out)
}

static const struct qmm_type_kernel int4g_kernel = {DTYPE_INT4G, 0, 64, int4g_tile_any};

// cpu-q-avx512's activation quantizer with zero point 0 (see the AVX2 kernel).
static struct qmm_isa int4g_isa(void)
{
    return (struct qmm_isa){.name = "cpu-int4g-avx512",
                            .quantize = qmm_isa_avx512.quantize,
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

const struct op_provider cpu_int4g_avx512_matmul = {
    .name = "cpu-int4g-avx512",
    .op = OP_MATMUL,
    .priority = 70,
    .supports = int4g_supports,
    .run = int4g_run,
};
