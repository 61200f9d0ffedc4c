// cpu-avx512 matmul: f32, f16 and bf16 weights converted in registers, R x C
// tiles of 16-lane FMA dot products with masked loads for the k tail. One
// accumulator per output element, k in order, a fixed horizontal sum: a row's
// result is the same in any tile, so the op is batch-invariant.
#include <immintrin.h>

#include "backend/cpu/avx512/avx512.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/matmul_tiled.h"

#define R_MAX 4
#define C_MAX 6
#define C_MAX_R1 8
#define F16_R_MAX 6 // f16 tiles of several rows: 6 x 4 (see tile_f16)
#define F16_C_MAX 4
#define ACC_R 6 // accumulator rows any tile may use

// 16 values of dtype wt at p as f32: without a mask for full blocks (a
// masked load is markedly slower on Zen 4; with all lanes on it reads the
// same values), else under m.
static inline __attribute__((always_inline)) __m512 load16(const int wt, const void *p, __mmask16 m,
                                                           const bool full)
{
    if (!full)
        return avx512_load16(wt, p, m);
    if (wt == DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256(p));
    if (wt == DTYPE_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p)), 16));
    return _mm512_loadu_ps(p);
}

// acc[r][c] += x[r][l..l+16) * w[c][l..l+16) (lanes under m).
static inline __attribute__((always_inline)) void
tile_step(const int R, const int C, const int wt, const float *const *x, const void *const *w,
          int64_t l, __mmask16 m, const bool full, __m512 acc[ACC_R][C_MAX_R1])
{
    size_t esz = wt == DTYPE_F32 ? 4 : 2;
    __m512 xv[ACC_R];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        xv[r] = load16(DTYPE_F32, x[r] + l, m, full);
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) {
        __m512 wv = load16(wt, (const char *)w[c] + (size_t)l * esz, m, full);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
}

// acc[c] += x[l..l+32) * w[c][l..l+32) for one x row and 16-bit weights:
// the two halves of a row's 64-byte line one after the other. Split over two
// tile_steps, the 8 rows of a decode pass (which often share one L1 set,
// their rows a multiple of 4 KiB apart) evicted each other's lines between
// the halves: f16 decode computed at ~22 GB/s a core from L2, 34 this way.
// f16 lines come in with one 64-byte load and both halves convert from the
// register: one load a line to wait on instead of two streams ~5% more from
// memory on a core. The same products in the same order as two tile_steps.
static inline __attribute__((always_inline)) void
tile_step_line(const int C, const int wt, const float *x, const void *const *w, int64_t l,
               __m512 *acc)
{
    __m512 x0 = _mm512_loadu_ps(x + l), x1 = _mm512_loadu_ps(x + l + 16);
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) {
        const char *p = (const char *)w[c] + (size_t)l * 2;
        if (wt == DTYPE_F16) {
            __m512i line = _mm512_loadu_si512(p); // [32] f16
            acc[c] = _mm512_fmadd_ps(x0, _mm512_cvtph_ps(_mm512_castsi512_si256(line)), acc[c]);
            acc[c] =
                _mm512_fmadd_ps(x1, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(line, 1)), acc[c]);
            continue;
        }
        acc[c] = _mm512_fmadd_ps(x0, load16(wt, p, 0xffff, true), acc[c]);
        acc[c] = _mm512_fmadd_ps(x1, load16(wt, p + 32, 0xffff, true), acc[c]);
    }
}

// acc[r][c] = the dot products of the R x C tile before their horizontal
// sums. ahead: when pf, byte l of weight row c is fetched into L2 from
// w[c] + ahead + l while the tile reads w[c] + l.
static inline __attribute__((always_inline)) void
tile_dots(const int R, const int C, const int wt, const float *const *x, const void *const *w,
          int64_t k, const bool pf, ptrdiff_t ahead, __m512 acc[ACC_R][C_MAX_R1])
{
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm512_setzero_ps();
    int64_t l = 0;
    if (R == 1 && wt != DTYPE_F32)
        for (; l + 32 <= k; l += 32) {
            if (pf)
                avx512_prefetch_next_tile(C, w, ahead, (size_t)l * 2);
            // f16: each row's line 4 lines on fetched into L1 as well (the
            // lone-token decode read ~5% more a second on the shared host).
            if (wt == DTYPE_F16)
#pragma GCC unroll 8
                for (int c = 0; c < C; c++)
                    _mm_prefetch((const char *)w[c] + (size_t)l * 2 + 256, _MM_HINT_T0);
            tile_step_line(C, wt, x[0], w, l, acc[0]);
        }
    for (; l + 16 <= k; l += 16) {
        if (pf && (wt == DTYPE_F32 || l % 32 == 0)) // one per 64-byte line
            avx512_prefetch_next_tile(C, w, ahead, (size_t)l * (wt == DTYPE_F32 ? 4 : 2));
        tile_step(R, C, wt, x, w, l, 0xffff, true, acc);
    }
    if (l < k)
        tile_step(R, C, wt, x, w, l, (__mmask16)((1u << (k - l)) - 1u), false, acc);
}

static inline __attribute__((always_inline)) void tile(const int R, const int C, const int wt,
                                                       const float *const *x, const void *const *w,
                                                       int64_t k, float *const *y,
                                                       const float *bias, const void *next)
{
    __m512 acc[ACC_R][C_MAX_R1];
    tile_dots(R, C, wt, x, w, k, next != NULL, next ? (const char *)next - (const char *)w[0] : 0,
              acc);
    __m512 flat[ACC_R * C_MAX_R1], sums[2];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            flat[r * C + c] = acc[r][c];
#pragma GCC unroll 4
    for (int i = 0; i < R * C; i += 16)
        sums[i / 16] = avx512_sums16(flat + i, R * C - i < 16 ? R * C - i : 16, NULL);
    if (R * C <= 16)
        sums[1] = sums[0];
    avx512_store_rows(R, C, sums, y, bias);
}

#define T(r, c, wt) tile(r, c, wt, x, w, k, y, bias, next)
// Every tile shape any kernel asks for: one row of up to 8 columns, 2-4 rows
// of up to 6 (f32, bf16: kernel r_max 4, c_max 6), 5-6 rows of up to 4 (f16:
// 6 x 4, see tile_f16). Each kernel reaches only its own shapes.
#define TILE_CASES(wt)                                                                             \
    switch (R * 16 + C) {                                                                          \
    case 16 + 1:                                                                                   \
        T(1, 1, wt);                                                                               \
        break;                                                                                     \
    case 16 + 2:                                                                                   \
        T(1, 2, wt);                                                                               \
        break;                                                                                     \
    case 16 + 3:                                                                                   \
        T(1, 3, wt);                                                                               \
        break;                                                                                     \
    case 16 + 4:                                                                                   \
        T(1, 4, wt);                                                                               \
        break;                                                                                     \
    case 16 + 5:                                                                                   \
        T(1, 5, wt);                                                                               \
        break;                                                                                     \
    case 16 + 6:                                                                                   \
        T(1, 6, wt);                                                                               \
        break;                                                                                     \
    case 16 + 7:                                                                                   \
        T(1, 7, wt);                                                                               \
        break;                                                                                     \
    case 16 + 8:                                                                                   \
        T(1, 8, wt);                                                                               \
        break;                                                                                     \
    case 32 + 1:                                                                                   \
        T(2, 1, wt);                                                                               \
        break;                                                                                     \
    case 32 + 2:                                                                                   \
        T(2, 2, wt);                                                                               \
        break;                                                                                     \
    case 32 + 3:                                                                                   \
        T(2, 3, wt);                                                                               \
        break;                                                                                     \
    case 32 + 4:                                                                                   \
        T(2, 4, wt);                                                                               \
        break;                                                                                     \
    case 32 + 5:                                                                                   \
        T(2, 5, wt);                                                                               \
        break;                                                                                     \
    case 32 + 6:                                                                                   \
        T(2, 6, wt);                                                                               \
        break;                                                                                     \
    case 48 + 1:                                                                                   \
        T(3, 1, wt);                                                                               \
        break;                                                                                     \
    case 48 + 2:                                                                                   \
        T(3, 2, wt);                                                                               \
        break;                                                                                     \
    case 48 + 3:                                                                                   \
        T(3, 3, wt);                                                                               \
        break;                                                                                     \
    case 48 + 4:                                                                                   \
        T(3, 4, wt);                                                                               \
        break;                                                                                     \
    case 48 + 5:                                                                                   \
        T(3, 5, wt);                                                                               \
        break;                                                                                     \
    case 48 + 6:                                                                                   \
        T(3, 6, wt);                                                                               \
        break;                                                                                     \
    case 64 + 1:                                                                                   \
        T(4, 1, wt);                                                                               \
        break;                                                                                     \
    case 64 + 2:                                                                                   \
        T(4, 2, wt);                                                                               \
        break;                                                                                     \
    case 64 + 3:                                                                                   \
        T(4, 3, wt);                                                                               \
        break;                                                                                     \
    case 64 + 4:                                                                                   \
        T(4, 4, wt);                                                                               \
        break;                                                                                     \
    case 64 + 5:                                                                                   \
        T(4, 5, wt);                                                                               \
        break;                                                                                     \
    case 64 + 6:                                                                                   \
        T(4, 6, wt);                                                                               \
        break;                                                                                     \
    case 80 + 1:                                                                                   \
        T(5, 1, wt);                                                                               \
        break;                                                                                     \
    case 80 + 2:                                                                                   \
        T(5, 2, wt);                                                                               \
        break;                                                                                     \
    case 80 + 3:                                                                                   \
        T(5, 3, wt);                                                                               \
        break;                                                                                     \
    case 80 + 4:                                                                                   \
        T(5, 4, wt);                                                                               \
        break;                                                                                     \
    case 96 + 1:                                                                                   \
        T(6, 1, wt);                                                                               \
        break;                                                                                     \
    case 96 + 2:                                                                                   \
        T(6, 2, wt);                                                                               \
        break;                                                                                     \
    case 96 + 3:                                                                                   \
        T(6, 3, wt);                                                                               \
        break;                                                                                     \
    case 96 + 4:                                                                                   \
        T(6, 4, wt);                                                                               \
        break;                                                                                     \
    default:                                                                                       \
        VLLMC_ASSERT(!"a tile shape no kernel asks for");                                          \
        break;                                                                                     \
    }

static void tile_f32(int R, int C, const float *const *x, const void *const *w, int64_t k,
                     float *const *y, const float *bias, const void *next)
{
    TILE_CASES(DTYPE_F32)
}

// f16 tiles of several rows are 6 x 4 (R <= 6, C <= 4): a step converts
// each weight vector once (vcvtph2ps, two uops on the FMA ports of Intel
// cores) for R FMAs, so taller tiles leave the FMA ports more of their
// cycles: 4 conversions for 24 FMAs instead of 6 in a 4 x 6 tile.
static void tile_f16(int R, int C, const float *const *x, const void *const *w, int64_t k,
                     float *const *y, const float *bias, const void *next)
{
    TILE_CASES(DTYPE_F16)
}

static void tile_bf16(int R, int C, const float *const *x, const void *const *w, int64_t k,
                      float *const *y, const float *bias, const void *next)
{
    TILE_CASES(DTYPE_BF16)
}

// Decode: y[j] = dot(x, weight row j) + bias[j] for the n rows from w,
// row_bytes apart, as 8 streams (see avx512_store_pass); rows past the last
// multiple of 8 go through one 1 x rest tile of tail (the tile of wt).
static inline __attribute__((always_inline)) void decode(const int wt, cpu_mm_tile_store_fn tail,
                                                         const float *x, const void *w,
                                                         size_t row_bytes, int n, int64_t k,
                                                         float *y, const float *bias)
{
    int G = n / 8;
    for (int g = 0; g < G; g++) {
        const void *wp[8];
        __m512 acc[ACC_R][C_MAX_R1];
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++)
            wp[c] = (const char *)w + (size_t)(c * G + g) * row_bytes;
        tile_dots(1, 8, wt, &x, wp, k, g + 1 < G, (ptrdiff_t)row_bytes, acc);
        avx512_store_pass(acc[0], G, g, y, bias);
    }
    int rest = n - 8 * G;
    if (rest) {
        const void *wp[8];
        float *yr = y + 8 * G;
        for (int c = 0; c < rest; c++)
            wp[c] = (const char *)w + (size_t)(8 * G + c) * row_bytes;
        tail(1, rest, &x, wp, k, &yr, bias + 8 * G, NULL);
    }
}

static void decode_f32(const float *x, const void *w, size_t row_bytes, int n, int64_t k, float *y,
                       const float *bias)
{
    decode(DTYPE_F32, tile_f32, x, w, row_bytes, n, k, y, bias);
}

static void decode_f16(const float *x, const void *w, size_t row_bytes, int n, int64_t k, float *y,
                       const float *bias)
{
    decode(DTYPE_F16, tile_f16, x, w, row_bytes, n, k, y, bias);
}

static void decode_bf16(const float *x, const void *w, size_t row_bytes, int n, int64_t k,
                        float *y, const float *bias)
{
    decode(DTYPE_BF16, tile_bf16, x, w, row_bytes, n, k, y, bias);
}

// Prefill: 16-bit weights converted to f32 once per column tile (the f32 tile
// then reads them as f32, the same values the 16-bit tile converts in
// registers), which saves the conversion in every row tile.
static inline __attribute__((always_inline)) void panel(const int wt, int C, const void *const *w,
                                                        int64_t k, float *out, size_t out_stride)
{
    for (int c = 0; c < C; c++)
        for (int64_t l = 0; l < k; l += 16) {
            __mmask16 m = (__mmask16)(k - l >= 16 ? 0xffffu : (1u << (k - l)) - 1u);
            _mm512_store_ps(out + (size_t)c * out_stride + l,
                            avx512_load16(wt, (const char *)w[c] + (size_t)l * 2, m));
        }
}

static void panel_f16(int C, const void *const *w, int64_t k, float *out, size_t out_stride)
{
    panel(DTYPE_F16, C, w, k, out, out_stride);
}

static void panel_bf16(int C, const void *const *w, int64_t k, float *out, size_t out_stride)
{
    panel(DTYPE_BF16, C, w, k, out, out_stride);
}

static const struct cpu_mm_kernel kernel_f32 = {
    .tile_store = tile_f32, .decode = decode_f32, .r_max = R_MAX, .c_max = C_MAX, .c_max_r1 = C_MAX_R1};
static const struct cpu_mm_kernel kernel_f16 = {.tile_store = tile_f16,
                                                .decode = decode_f16,
                                                .r_max = F16_R_MAX,
                                                .c_max = F16_C_MAX,
                                                .c_max_r1 = C_MAX_R1,
                                                .panel = panel_f16,
                                                .panel_kernel = &kernel_f32};
static const struct cpu_mm_kernel kernel_bf16 = {.tile_store = tile_bf16,
                                                 .decode = decode_bf16,
                                                 .r_max = R_MAX,
                                                 .c_max = C_MAX,
                                                 .c_max_r1 = C_MAX_R1,
                                                 .panel = panel_bf16,
                                                 .panel_kernel = &kernel_f32};

static const struct cpu_mm_float_kernels kernels = {&kernel_f32, &kernel_f16, &kernel_bf16};

static enum vllmc_status matmul_run(const struct op_call *c)
{
    return cpu_matmul_tiled_float_run(c, &kernels);
}

const struct op_provider cpu_avx512_matmul = {
    .name = "cpu-avx512",
    .op = OP_MATMUL,
    .priority = CPU_AVX512_PRIORITY,
    .supports = cpu_matmul_tiled_float_supports,
    .run = matmul_run,
};
