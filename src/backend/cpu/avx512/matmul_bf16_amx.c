// cpu-amx-bf16 matmul: bf16 weights on the AMX tile unit (Intel Xeon from
// Sapphire Rapids on), y [m, n] = x [m, k] . W [n, k]^T (+ bias), with x
// rounded to bf16 once per call as cpu-avx512bf16 does. One TDPBF16PS
// multiplies a 16 x 32 bf16 tile by a 32 x 16 one into 16 x 16 f32 sums: 16
// times the products of a vdpbf16ps, which is what prefill and batched
// decode are bound by.
//
// The weights stay as they are in the file: a tile of 16 weight rows x 32
// k (64 bytes a row, row_bytes apart) is the A operand, so the unit computes
// y^T: C [16 n][16 m] = W tile . X^T tile. X^T's tile (B) wants k in pairs:
// row i holds (x[t][2i], x[t][2i + 1]) for the tile's tokens t, so x is
// packed per call into [m tiles][k / 2][tokens][2] bf16 (a token tile of mc
// < 16 tokens, the last one, is mc columns wide). A lone token's B is its
// bf16 row itself.
//
// Each output element is one chain over k in pairs, the same whichever
// tokens share its tile and however many columns the tile has, so every m,
// m = 1 included, gives the same bits (batch-invariant; test_cpu_ops). The
// sums differ from cpu-avx512bf16's (lanes over k, then a horizontal sum)
// by f32 rounding only.
#include <immintrin.h>

#include "backend/backend_impl.h"
#include "backend/cpu/avx512/avx512.h"
#include "backend/cpu/cpu_ops.h"
#include "core/threadpool.h"

#define AMX_K 32        // bf16 values of k a tile step takes (64 bytes a row)
#define AMX_ROWS 16     // weight rows (outputs) of a tile
#define AMX_TOKENS 16   // tokens of a tile
#define AMX_M_BLOCK 128 // tokens a task runs: their packed x (<= 768 KiB at k = 3072) stays in L2

// Tiles: C00..C11 = 0..3 (C rc: weight tile r, token tile c), A0, A1 = 4, 5
// (weight rows n0 .., n0 + 16 ..), B0, B1 = 6, 7 (token tiles).
// Every tile 16 rows; the A tiles (bits of a_tiles) 64 bytes wide, the C
// and B tiles mc tokens (4 bytes each).
static void amx_configure(int mc, unsigned a_tiles)
{
    const unsigned char rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
    unsigned short colsb[8];
    for (int t = 0; t < 8; t++)
        colsb[t] = (unsigned short)(a_tiles >> t & 1 ? 64 : 4 * mc);
    avx512_amx_configure(rows, colsb);
}
#define AMX_A_TILES (1u << 4 | 1u << 5)

struct amx_ctx {
    const struct op_call *c;
    const uint16_t *xp; // packed x: token tile t at xp + t * 16 * k ([k / 2][mc][2] bf16)
    int64_t m, n, k;
    size_t w_row_bytes;
    int n_m_blocks, n_n_blocks; // tasks: n_m_blocks x n_n_blocks, n blocks of 32 rows
};

// Output column n's bias as f32 (0 without one).
static inline float amx_bias(const struct amx_ctx *ctx, int64_t n)
{
    const struct tensor *b = ctx->c->src[2];
    return b ? cpu_load(b->dtype, b->data, n) : 0.0f;
}

// The k loop of weight tiles n_w (1 or 2) against token tiles n_t (1 or 2),
// into C tiles 0..3; then each C tile to ct[r * 2 + c] ([16 n][16 m] f32).
#define AMX_LOOP(NW, NT)                                                                           \
    static void amx_loop_##NW##NT(const uint8_t *w0, size_t w_stride, const uint16_t *b0,          \
                                  const uint16_t *b1, size_t b_stride, int64_t k, float *ct)       \
    {                                                                                              \
        const uint8_t *w1 = w0 + AMX_ROWS * w_stride;                                              \
        _tile_zero(0);                                                                             \
        if (NT == 2)                                                                               \
            _tile_zero(1);                                                                         \
        if (NW == 2) {                                                                             \
            _tile_zero(2);                                                                         \
            if (NT == 2)                                                                           \
                _tile_zero(3);                                                                     \
        }                                                                                          \
        /* token tile step j: its 16 pairs of k at 16 * j rows of b_stride bytes */                \
        for (int64_t j = 0; j < k / AMX_K; j++) {                                                  \
            const size_t bo = (size_t)j * 16 * b_stride;                                           \
            _tile_loadd(4, w0 + (size_t)j * 64, w_stride);                                         \
            _tile_loadd(6, (const uint8_t *)b0 + bo, b_stride);                                    \
            _tile_dpbf16ps(0, 4, 6);                                                               \
            if (NT == 2) {                                                                         \
                _tile_loadd(7, (const uint8_t *)b1 + bo, b_stride);                                \
                _tile_dpbf16ps(1, 4, 7);                                                           \
            }                                                                                      \
            if (NW == 2) {                                                                         \
                _tile_loadd(5, w1 + (size_t)j * 64, w_stride);                                     \
                _tile_dpbf16ps(2, 5, 6);                                                           \
                if (NT == 2)                                                                       \
                    _tile_dpbf16ps(3, 5, 7);                                                       \
            }                                                                                      \
        }                                                                                          \
        _tile_stored(0, ct, 64);                                                                   \
        if (NT == 2)                                                                               \
            _tile_stored(1, ct + 256, 64);                                                         \
        if (NW == 2) {                                                                             \
            _tile_stored(2, ct + 512, 64);                                                         \
            if (NT == 2)                                                                           \
                _tile_stored(3, ct + 768, 64);                                                     \
        }                                                                                          \
    }
AMX_LOOP(1, 1)
AMX_LOOP(1, 2)
AMX_LOOP(2, 1)
AMX_LOOP(2, 2)

// C tile ct ([16 n][16 m], mc tokens valid) into y rows t0 .. t0 + mc - 1 at
// columns n0 .. n0 + 15, plus bias16 (those columns' bias as f32).
static void amx_store(const struct op_call *c, const float *ct, int64_t t0, int mc, int64_t n0,
                      const float *bias16)
{
    const __m512 b = _mm512_loadu_ps(bias16);
    __m512 r[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_ps(ct + 16 * i);
    avx512_transpose16(r);
    for (int t = 0; t < mc; t++)
        _mm512_storeu_ps((float *)cpu_row(c->dst, t0 + t) + n0, _mm512_add_ps(r[t], b));
}

static void amx_task(void *p, int task, int thread)
{
    (void)thread;
    const struct amx_ctx *ctx = p;
    const struct op_call *c = ctx->c;
    const struct tensor *w = c->src[1];
    const int mb = task / ctx->n_n_blocks, nb = task % ctx->n_n_blocks;
    const int64_t t0 = (int64_t)mb * AMX_M_BLOCK;
    const int64_t t1 = t0 + AMX_M_BLOCK < ctx->m ? t0 + AMX_M_BLOCK : ctx->m;
    const int64_t n0 = (int64_t)nb * 2 * AMX_ROWS;
    const int nw = n0 + 2 * AMX_ROWS <= ctx->n ? 2 : 1;
    float bias_v[2 * AMX_ROWS]; // the block's bias as f32 (any plain-float bias)
    for (int i = 0; i < nw * AMX_ROWS; i++)
        bias_v[i] = amx_bias(ctx, n0 + i);
    const uint8_t *w0 = (const uint8_t *)w->data + (size_t)n0 * ctx->w_row_bytes;
    const int64_t k = ctx->k;
    float ct[4 * 256] __attribute__((aligned(64)));
    const int64_t full = (t1 - t0) / AMX_TOKENS; // full token tiles of the block
    const int mc = (int)((t1 - t0) % AMX_TOKENS);
    if (full > 0) {
        amx_configure(AMX_TOKENS, AMX_A_TILES);
        for (int64_t i = 0; i < full; i += 2) {
            const int64_t ta = t0 + i * AMX_TOKENS;
            const uint16_t *b0 = ctx->xp + (size_t)ta * k;
            const int nt = i + 1 < full ? 2 : 1;
            if (nw == 2 && nt == 2)
                amx_loop_22(w0, ctx->w_row_bytes, b0, b0 + 16 * k, 64, k, ct);
            else if (nw == 2)
                amx_loop_21(w0, ctx->w_row_bytes, b0, NULL, 64, k, ct);
            else if (nt == 2)
                amx_loop_12(w0, ctx->w_row_bytes, b0, b0 + 16 * k, 64, k, ct);
            else
                amx_loop_11(w0, ctx->w_row_bytes, b0, NULL, 64, k, ct);
            for (int r = 0; r < nw; r++)
                for (int q = 0; q < nt; q++)
                    amx_store(c, ct + 256 * (2 * r + q), ta + q * AMX_TOKENS, AMX_TOKENS,
                              n0 + r * AMX_ROWS, bias_v + r * AMX_ROWS);
        }
    }
    if (mc > 0) {
        const int64_t ta = t0 + full * AMX_TOKENS;
        const uint16_t *b0 = ctx->xp + (size_t)ta * k;
        amx_configure(mc, AMX_A_TILES);
        if (nw == 2)
            amx_loop_21(w0, ctx->w_row_bytes, b0, NULL, (size_t)4 * mc, k, ct);
        else
            amx_loop_11(w0, ctx->w_row_bytes, b0, NULL, (size_t)4 * mc, k, ct);
        for (int r = 0; r < nw; r++)
            amx_store(c, ct + 256 * 2 * r, ta, mc, n0 + r * AMX_ROWS, bias_v + r * AMX_ROWS);
    }
    _tile_release();
}

// ---- few tokens (m < 16): one token tile, the weights read once ----

// C tile 0, and two sets of A and B tiles, (4; 6) and (1; 7), that alternate
// by k step, so that a step's loads need not wait for the previous step's
// product to free their tiles (tile registers are not renamed).
#define AMX_FEW_A_TILES (1u << 1 | 1u << 4)

// One weight tile's k loop on those tiles: amx_loop_11's sums in its order.
static void amx_loop_few(const uint8_t *w0, size_t w_stride, const uint16_t *b0, size_t b_stride,
                         int64_t k, float *ct)
{
    const uint8_t *b = (const uint8_t *)b0;
    const int64_t steps = k / AMX_K;
    _tile_zero(0);
    int64_t j = 0;
    for (; j + 2 <= steps; j += 2) {
        _tile_loadd(4, w0 + (size_t)j * 64, w_stride);
        _tile_loadd(6, b + (size_t)j * 16 * b_stride, b_stride);
        _tile_loadd(1, w0 + (size_t)(j + 1) * 64, w_stride);
        _tile_loadd(7, b + (size_t)(j + 1) * 16 * b_stride, b_stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(0, 1, 7);
    }
    if (j < steps) {
        _tile_loadd(4, w0 + (size_t)j * 64, w_stride);
        _tile_loadd(6, b + (size_t)j * 16 * b_stride, b_stride);
        _tile_dpbf16ps(0, 4, 6);
    }
    _tile_stored(0, ct, 64);
}

// The mc tokens over a panel of 16 G weight rows from p0: pass g multiplies
// rows p0 + r G + g (r = 0..15, a tile of stride G rows), so that tile row r
// walks G adjacent weight rows, pass by pass: 16 long streams the hardware
// prefetcher follows. 16 adjacent rows a tile are 16 streams of one short
// row each, a decode about 7% slower (Xeon, 0.6B BF16 tg32 21.2 against
// 23.1-23.3 tok/s). Which rows share a tile does not change a row's sums.
static void amx_few_panel(const struct amx_ctx *ctx, int64_t p0, int64_t G)
{
    const struct op_call *c = ctx->c;
    const int mc = (int)ctx->m;
    const size_t row_bytes = ctx->w_row_bytes;
    const uint8_t *w = (const uint8_t *)c->src[1]->data;
    float ct[256] __attribute__((aligned(64)));
    amx_configure(mc, AMX_FEW_A_TILES);
    for (int64_t g = 0; g < G; g++) {
        amx_loop_few(w + (size_t)(p0 + g) * row_bytes, (size_t)G * row_bytes, ctx->xp,
                     (size_t)4 * mc, ctx->k, ct);
        for (int t = 0; t < mc; t++) {
            float *y = cpu_row(c->dst, t);
            for (int r = 0; r < AMX_ROWS; r++) {
                const int64_t n = p0 + r * G + g;
                y[n] = ct[16 * r + t] + amx_bias(ctx, n);
            }
        }
    }
    _tile_release();
}

// Panels of AMX_FEW_G rows a stream.
#define AMX_FEW_G 16

static void few_task(void *p, int task, int thread)
{
    (void)thread;
    const struct amx_ctx *ctx = p;
    const int64_t p0 = (int64_t)task * AMX_ROWS * AMX_FEW_G;
    const int64_t rows = ctx->n - p0 < AMX_ROWS * AMX_FEW_G ? ctx->n - p0 : AMX_ROWS * AMX_FEW_G;
    amx_few_panel(ctx, p0, rows / AMX_ROWS);
}

// ---- x packed for the B tiles ----

struct pack_ctx {
    const struct tensor *x; // [m, k] f32
    int64_t m, k;
    uint16_t *xp;
};

// Token tile `task`: its rows rounded to bf16 (RNE, as cpu-avx512bf16's
// round_task), pair i of token t at 32-bit word i * mc + t.
static void pack_task(void *p, int task, int thread)
{
    (void)thread;
    const struct pack_ctx *ctx = p;
    const int64_t t0 = (int64_t)task * AMX_TOKENS, k = ctx->k;
    const int mc = (int)(ctx->m - t0 < AMX_TOKENS ? ctx->m - t0 : AMX_TOKENS);
    uint32_t *dst = (uint32_t *)(void *)(ctx->xp + (size_t)t0 * k);
    // Lane i of a step (pair l / 2 + i) goes to word (l / 2 + i) mc + t.
    const __m512i lane_words =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(mc));
    for (int t = 0; t < mc; t++) {
        const float *xr = cpu_row(ctx->x, t0 + t);
        // 16 pairs (32 values) a step: k is a multiple of 32.
        for (int64_t l = 0; l < k; l += 32) {
            __m512i v =
                (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + l + 16), _mm512_loadu_ps(xr + l));
            const __m512i idx =
                _mm512_add_epi32(lane_words, _mm512_set1_epi32((int)(l / 2 * mc + t)));
            _mm512_i32scatter_epi32(dst, idx, v, 4);
        }
    }
}

// cpu-avx512bf16's calls whose k is whole tile steps and whose weight rows
// whole tiles.
static bool matmul_supports(const struct op_call *c)
{
    const struct tensor *w = c->src[1];
    return avx512bf16_matmul_supports(c) && tensor_n_rows(w) == w->ne[1] &&
           c->src[0]->ne[0] % AMX_K == 0 && w->ne[1] % AMX_ROWS == 0;
}

static enum vllmc_status matmul_run(const struct op_call *c)
{
    const struct tensor *x = c->src[0], *w = c->src[1];
    const int64_t m = tensor_n_rows(x), k = x->ne[0], n = w->ne[1];
    if (m == 0)
        return VLLMC_OK;
    const int n_tiles = (int)((m + AMX_TOKENS - 1) / AMX_TOKENS);
    uint16_t *xp = op_scratch(c, (size_t)n_tiles * AMX_TOKENS * (size_t)k * 2);
    if (!xp)
        return op_fail(c, VLLMC_ERR_NOMEM, "out of memory for %lld x %lld bf16 activations",
                       (long long)m, (long long)k);
    struct pack_ctx pc = {.x = x, .m = m, .k = k, .xp = xp};
    threadpool_run(n_tiles > 1 ? op_call_pool(c) : NULL, pack_task, &pc, n_tiles);
    struct amx_ctx ctx = {
        .c = c,
        .xp = xp,
        .m = m,
        .n = n,
        .k = k,
        .w_row_bytes = (size_t)w->nb[1],
        .n_m_blocks = (int)((m + AMX_M_BLOCK - 1) / AMX_M_BLOCK),
        .n_n_blocks = (int)((n + 2 * AMX_ROWS - 1) / (2 * AMX_ROWS)),
    };
    if (m < AMX_TOKENS) { // each thread walks its share of the panels in order
        const int n_panels = (int)((n + AMX_ROWS * AMX_FEW_G - 1) / (AMX_ROWS * AMX_FEW_G));
        threadpool_run_shares(op_call_pool(c), few_task, &ctx, n_panels);
    } else {
        threadpool_run(op_call_pool(c), amx_task, &ctx, ctx.n_m_blocks * ctx.n_n_blocks);
    }
    return VLLMC_OK;
}

const struct op_provider cpu_amx_bf16_matmul = {
    .name = "cpu-amx-bf16",
    .op = OP_MATMUL,
    .priority = CPU_AVX512_PRIORITY + 6,
    .supports = matmul_supports,
    .run = matmul_run,
    .parity_bar = 1e-5,
};
