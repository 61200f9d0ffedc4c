// cpu-avx512bf16 matmul: bf16 weights with AVX512_BF16 dot products
// (vdpbf16ps: 32 products per instruction, f32 accumulation). x is rounded to
// bf16 once per call, as llama.cpp and Hugging Face transformers run a BF16
// checkpoint: about 2e-6 NMSE against cpu-ref (parity_bar), logits within
// bf16 rounding of a float64 reference. It is the default for bf16 weights
// (priority 65, above cpu-avx512; cpu-amx-bf16 ranks above it where the CPU
// has AMX); VLLMC_OP_PROVIDER_DISABLE=cpu-avx512bf16,cpu-amx-bf16 gives fp32
// activations back. Every m, m = 1 included, runs the same
// per-element sequence, so it is batch-invariant too.
#include <immintrin.h>

#include "backend/cpu/avx512/avx512.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/matmul_tiled.h"

#define R_MAX 4
#define C_MAX 6
#define C_MAX_R1 8
// Prefill tiles run k in parts of K_BLOCK elements when k > K_WHOLE_MAX: a
// 4 x 6 tile reads (4 + 6) x k bf16, 60 KiB at k = 3072, more than the 48
// KiB L1, so its weight rows left L1 before the next row tile used them. A
// part of 1024 keeps them there (12 KiB). At k = 2048 (40 KiB) the whole k
// is faster: `bench_ops` 2 threads, cold weights, 512 x 1024 x 2048 630
// GFLOP/s whole against 566 in parts of 1024; 512 x 1024 x 3072 581 in
// parts of 1024 against 530 whole, 569 in parts of 1536, 534 of 768.
#define K_BLOCK 1024
#define K_WHOLE_MAX 2048

// Pairs of bf16 travel as 32-bit lanes, so masks count pairs. Full blocks
// load without a mask: a masked load costs about a fifth of the kernel's
// speed on Zen 4, and with all lanes on it reads the same values.
static inline __attribute__((always_inline)) __m512bh load_pairs(const void *p, __mmask16 m,
                                                                 const bool full)
{
    if (full)
        return (__m512bh)_mm512_loadu_si512(p);
    return (__m512bh)_mm512_maskz_loadu_epi32(m, p);
}

// acc[r][c] += the 16 pairs from pair p of x[r] and w[c] (lanes under m).
static inline __attribute__((always_inline)) void
tile_step(const int R, const int C, const float *const *x, const void *const *w, int64_t p,
          __mmask16 m, const bool full, __m512 acc[R_MAX][C_MAX_R1])
{
    __m512bh xv[R_MAX];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        xv[r] = load_pairs((const uint32_t *)(const void *)x[r] + p, m, full);
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) {
        __m512bh wv = load_pairs((const uint32_t *)w[c] + p, m, full);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv[r], wv);
    }
}

// acc[r][c] = the dot products of the R x C tile over the pairs [p0, p1)
// before their horizontal sums, continuing from the partial lanes in (acc
// element r * C + c at in + 16 * (r * C + c)) or from zero when in is NULL;
// x and w rows are bf16 (x passed as const float * by the tiled driver). A
// lane adds its products in the same order whether k runs in one call or in
// several (p0 a multiple of 16 pairs), so a split k gives the same bits.
// ahead: when pf, byte b of weight row c is fetched into L2 from
// w[c] + ahead + b while the tile reads w[c] + b.
static inline __attribute__((always_inline)) void
tile_dots(const int R, const int C, const float *const *x, const void *const *w, int64_t p0,
          int64_t p1, const float *in, const bool pf, ptrdiff_t ahead, __m512 acc[R_MAX][C_MAX_R1])
{
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            acc[r][c] = in ? _mm512_load_ps(in + 16 * (r * C + c)) : _mm512_setzero_ps();
    int64_t p = p0;
    for (; p + 16 <= p1; p += 16) {
        if (pf)
            avx512_prefetch_next_tile(C, w, ahead, (size_t)p * 4);
        tile_step(R, C, x, w, p, 0xffff, true, acc);
    }
    if (p < p1)
        tile_step(R, C, x, w, p, (__mmask16)((1u << (p1 - p)) - 1u), false, acc);
}

// The tile over k elements [k0, k1) of k: from the partial lanes in acc_io
// unless k0 = 0, back into acc_io unless k1 = k, else summed into y (+
// bias). part false: all of k in one call (k0 = 0, k1 = k), the compiler
// dropping the tests.
static inline __attribute__((always_inline)) void tile(const int R, const int C, const bool part,
                                                       const float *const *x, const void *const *w,
                                                       int64_t k0, int64_t k1, int64_t k,
                                                       float *acc_io, float *const *y,
                                                       const float *bias, const void *next)
{
    __m512 acc[R_MAX][C_MAX_R1];
    if (!part) {
        k0 = 0;
        k1 = k;
    }
    tile_dots(R, C, x, w, k0 / 2, k1 / 2, part && k0 ? acc_io : NULL, next != NULL,
              next ? (const char *)next - (const char *)w[0] : 0, acc);
    if (part && k1 < k) {
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 8
            for (int c = 0; c < C; c++)
                _mm512_store_ps(acc_io + 16 * (r * C + c), acc[r][c]);
        return;
    }
    __m512 flat[R_MAX * C_MAX_R1], sums[2];
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

// One case per tile shape: R <= 4; C <= 8 only when R = 1, else C <= 6.
#define TILE_SWITCH(T)                                                                             \
    switch (R * 16 + C) {                                                                          \
    case 16 + 1:                                                                                   \
        T(1, 1);                                                                                   \
        break;                                                                                     \
    case 16 + 2:                                                                                   \
        T(1, 2);                                                                                   \
        break;                                                                                     \
    case 16 + 3:                                                                                   \
        T(1, 3);                                                                                   \
        break;                                                                                     \
    case 16 + 4:                                                                                   \
        T(1, 4);                                                                                   \
        break;                                                                                     \
    case 16 + 5:                                                                                   \
        T(1, 5);                                                                                   \
        break;                                                                                     \
    case 16 + 6:                                                                                   \
        T(1, 6);                                                                                   \
        break;                                                                                     \
    case 16 + 7:                                                                                   \
        T(1, 7);                                                                                   \
        break;                                                                                     \
    case 16 + 8:                                                                                   \
        T(1, 8);                                                                                   \
        break;                                                                                     \
    case 32 + 1:                                                                                   \
        T(2, 1);                                                                                   \
        break;                                                                                     \
    case 32 + 2:                                                                                   \
        T(2, 2);                                                                                   \
        break;                                                                                     \
    case 32 + 3:                                                                                   \
        T(2, 3);                                                                                   \
        break;                                                                                     \
    case 32 + 4:                                                                                   \
        T(2, 4);                                                                                   \
        break;                                                                                     \
    case 32 + 5:                                                                                   \
        T(2, 5);                                                                                   \
        break;                                                                                     \
    case 32 + 6:                                                                                   \
        T(2, 6);                                                                                   \
        break;                                                                                     \
    case 48 + 1:                                                                                   \
        T(3, 1);                                                                                   \
        break;                                                                                     \
    case 48 + 2:                                                                                   \
        T(3, 2);                                                                                   \
        break;                                                                                     \
    case 48 + 3:                                                                                   \
        T(3, 3);                                                                                   \
        break;                                                                                     \
    case 48 + 4:                                                                                   \
        T(3, 4);                                                                                   \
        break;                                                                                     \
    case 48 + 5:                                                                                   \
        T(3, 5);                                                                                   \
        break;                                                                                     \
    case 48 + 6:                                                                                   \
        T(3, 6);                                                                                   \
        break;                                                                                     \
    case 64 + 1:                                                                                   \
        T(4, 1);                                                                                   \
        break;                                                                                     \
    case 64 + 2:                                                                                   \
        T(4, 2);                                                                                   \
        break;                                                                                     \
    case 64 + 3:                                                                                   \
        T(4, 3);                                                                                   \
        break;                                                                                     \
    case 64 + 4:                                                                                   \
        T(4, 4);                                                                                   \
        break;                                                                                     \
    case 64 + 5:                                                                                   \
        T(4, 5);                                                                                   \
        break;                                                                                     \
    default:                                                                                       \
        T(4, 6);                                                                                   \
        break;                                                                                     \
    }

static void tile_bf16(int R, int C, const float *const *x, const void *const *w, int64_t k,
                      float *const *y, const float *bias, const void *next)
{
#define T(r, c) tile(r, c, false, x, w, 0, k, k, NULL, y, bias, next)
    TILE_SWITCH(T)
#undef T
}

static void tile_part_bf16(int R, int C, const float *const *x, const void *const *w, int64_t k0,
                           int64_t k1, int64_t k, float *acc, float *const *y, const float *bias,
                           const void *next)
{
#define T(r, c) tile(r, c, true, x, w, k0, k1, k, acc, y, bias, next)
    TILE_SWITCH(T)
#undef T
}

// Decode: y[j] = dot(x, weight row j) + bias[j] for the n rows from w,
// row_bytes apart, as 8 streams (see avx512_store_pass); rows past the last
// multiple of 8 go through one tile. x is bf16, as in tile.
static void decode_bf16(const float *x, const void *w, size_t row_bytes, int n, int64_t k,
                        float *y, const float *bias)
{
    int G = n / 8;
    for (int g = 0; g < G; g++) {
        const void *wp[8];
        __m512 acc[R_MAX][C_MAX_R1];
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++)
            wp[c] = (const char *)w + (size_t)(c * G + g) * row_bytes;
        tile_dots(1, 8, &x, wp, 0, k / 2, NULL, g + 1 < G, (ptrdiff_t)row_bytes, acc);
        avx512_store_pass(acc[0], G, g, y, bias);
    }
    int rest = n - 8 * G;
    if (rest) {
        const void *wp[8];
        float *yr = y + 8 * G;
        for (int c = 0; c < rest; c++)
            wp[c] = (const char *)w + (size_t)(8 * G + c) * row_bytes;
        tile_bf16(1, rest, &x, wp, k, &yr, bias + 8 * G, NULL);
    }
}

static const struct cpu_mm_kernel kernel_bf16 = {.tile_store = tile_bf16,
                                                 .tile_part = tile_part_bf16,
                                                 .k_block = K_BLOCK,
                                                 .k_whole_max = K_WHOLE_MAX,
                                                 .decode = decode_bf16,
                                                 .r_max = R_MAX,
                                                 .c_max = C_MAX,
                                                 .c_max_r1 = C_MAX_R1};

bool avx512bf16_matmul_supports(const struct op_call *c)
{
    const struct tensor *w = c->src[1], *b = c->src[2];
    return c->backend && cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) &&
           w->dtype == DTYPE_BF16 && tensor_rows_contiguous(w) && c->src[0]->ne[0] % 2 == 0 &&
           (!b || cpu_is_plain_float(b->dtype));
}

// Rows of x rounded to bf16, ROUND_ROWS per task, on all threads: done on
// one thread it costs ~6% of a prefill matmul.
#define ROUND_ROWS 16

struct round_ctx {
    const struct tensor *x; // [m, k] f32
    int64_t m, k;
    uint16_t *xb; // [m, row_bytes / 2] bf16
    size_t row_bytes;
};

static void round_task(void *p, int task, int thread)
{
    const struct round_ctx *ctx = p;
    (void)thread;
    int64_t i1 =
        ((int64_t)task + 1) * ROUND_ROWS < ctx->m ? ((int64_t)task + 1) * ROUND_ROWS : ctx->m;
    int64_t k = ctx->k;
    for (int64_t i = (int64_t)task * ROUND_ROWS; i < i1; i++) {
        const float *xr = cpu_row(ctx->x, i);
        uint16_t *dst = (uint16_t *)(void *)((char *)ctx->xb + (size_t)i * ctx->row_bytes);
        // 32 values a step without masks (the same rounding as the masked
        // tail's): the masked loads and stores of 16 at a time were slower.
        int64_t l = 0;
        for (; l + 32 <= k; l += 32)
            _mm512_storeu_si512(dst + l, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + l + 16),
                                                                      _mm512_loadu_ps(xr + l)));
        for (; l < k; l += 16) {
            __mmask16 mk = (__mmask16)(k - l >= 16 ? 0xffffu : (1u << (k - l)) - 1u);
            __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, xr + l));
            _mm256_mask_storeu_epi16(dst + l, mk, (__m256i)v);
        }
    }
}

static enum vllmc_status matmul_run(const struct op_call *c)
{
    const struct tensor *x = c->src[0];
    int64_t m = tensor_n_rows(x), k = x->ne[0];
    size_t row_bytes = ((size_t)k * 2 + 63) & ~(size_t)63;
    uint16_t *xb = op_scratch(c, row_bytes * (size_t)(m ? m : 1)); // [m, k] bf16
    if (!xb)
        return op_fail(c, VLLMC_ERR_NOMEM, "out of memory for %lld x %lld bf16 activations",
                       (long long)m, (long long)k);
    struct round_ctx rc = {.x = x, .m = m, .k = k, .xb = xb, .row_bytes = row_bytes};
    int n_tasks = (int)((m + ROUND_ROWS - 1) / ROUND_ROWS);
    threadpool_run(n_tasks > 1 ? op_call_pool(c) : NULL, round_task, &rc, n_tasks);
    return cpu_matmul_tiled_run_x(c, &kernel_bf16, xb, row_bytes);
}

const struct op_provider cpu_avx512bf16_matmul = {
    .name = "cpu-avx512bf16",
    .op = OP_MATMUL,
    .priority = CPU_AVX512_PRIORITY + 5,
    .supports = avx512bf16_matmul_supports,
    .run = matmul_run,
    .parity_bar = 1e-5,
};
