// The CUDA decode GEMV's integer dot products (backend/cuda/quant_dot.h,
// compiled here for the host) against the reference vectors in
// shared/testdata/quant/blocks: each row of reference weights dotted with
// activations that 16-bit blocks hold exactly (multiples of 2^-15 with an
// extreme of 32767 / 2^15), so the unpacked bytes, scales and mins must give
// the reference dot product up to float rounding.
#include "check.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/quant_dot.h"
#include "core/alloc.h"
#include "core/dtype.h"

#define BLOCKS_DIR VLLMC_SHARED_DIR "/testdata/quant/blocks/"
#define N_WEIGHTS 8192
#define ROW 256
#define N_ROWS (N_WEIGHTS / ROW)

typedef void (*unit_fn)(const uint8_t *b, int u, struct qdot_unit *w);

static uint32_t rng_state = 12345u;
static uint32_t rng_next(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}

// x [ROW]: multiples of 2^-15 in [-32767, 32767] 2^-15, each 32-block with an
// element of magnitude 32767 2^-15, so its 16-bit block is exact (d = 2^-15).
static void exact_activations(float *x)
{
    const float step = 1.0f / 32768.0f;
    for (int l = 0; l < ROW; l++)
        x[l] = (float)((int)(rng_next() % 65535u) - 32767) * step;
    for (int s = 0; s < ROW / 32; s++)
        x[32 * s + (int)(rng_next() % 32u)] = (rng_next() & 1u) ? 32767.0f * step : -32767.0f * step;
}

// Every row's dot product through units of `subs` sub-blocks, `units` a block.
static void check_type(const char *name, enum dtype t, unit_fn fn, int units, int subs)
{
    char path[512];
    size_t n_blocks_bytes = 0, n_f32_bytes = 0;
    snprintf(path, sizeof path, BLOCKS_DIR "%s.blocks", name);
    uint8_t *blocks = check_read_file(path, &n_blocks_bytes);
    snprintf(path, sizeof path, BLOCKS_DIR "%s.f32", name);
    float *expect = check_read_file(path, &n_f32_bytes);
    const struct dtype_info *info = dtype_info(t);
    const size_t row_bytes = dtype_row_bytes(t, ROW);
    if (!blocks || !expect || !info || n_blocks_bytes != row_bytes * N_ROWS ||
        n_f32_bytes != N_WEIGHTS * sizeof(float)) {
        CHECK(!"block or reference file of the wrong size");
        goto done;
    }
    CHECK_EQ_INT(units * subs * 32, info->block_size);
    int n_bad = 0;
    for (int r = 0; r < N_ROWS; r++) {
        float x[ROW], xd[ROW / 32], xs[ROW / 32];
        int16_t xq[ROW];
        exact_activations(x);
        for (int s = 0; s < ROW / 32; s++) {
            qdot_quantize32(x + 32 * s, xq + 32 * s, &xd[s], &xs[s]);
            CHECK(xd[s] == 1.0f / 32768.0f);
        }
        double ref = 0.0, mag = 0.0;
        for (int l = 0; l < ROW; l++) {
            CHECK((float)xq[l] * xd[0] == x[l]);
            ref += (double)expect[r * ROW + l] * x[l];
            mag += fabs((double)expect[r * ROW + l] * x[l]);
        }
        float got = 0.0f;
        const int n_blocks = ROW / (int)info->block_size;
        for (int bi = 0; bi < n_blocks; bi++) {
            const uint8_t *b = blocks + (size_t)r * row_bytes + (size_t)bi * info->type_size;
            for (int u = 0; u < units; u++) {
                struct qdot_unit w;
                fn(b, u, &w);
                const int s = bi * units * subs + u * subs;
                uint32_t xw[32];
                memcpy(xw, xq + 32 * s, (size_t)(64 * subs));
                got += qdot_unit_dot(&w, subs, xw, xd + s, xs + s);
            }
        }
        if (fabs((double)got - ref) > 1e-5 * mag + 1e-30) {
            if (n_bad < 5)
                fprintf(stderr, "%s: row %d: got %.9g, expected %.9g (sum |w x| %.3g)\n", name, r,
                        (double)got, ref, mag);
            n_bad++;
        }
    }
    CHECK_EQ_INT(n_bad, 0);
done:
    mem_free(blocks);
    mem_free(expect);
}

static void test_q4_0(void) { check_type("Q4_0", DTYPE_Q4_0, qdot_unit_q4_0, 1, 1); }
static void test_q4_1(void) { check_type("Q4_1", DTYPE_Q4_1, qdot_unit_q4_1, 1, 1); }
static void test_q5_0(void) { check_type("Q5_0", DTYPE_Q5_0, qdot_unit_q5_0, 1, 1); }
static void test_q5_1(void) { check_type("Q5_1", DTYPE_Q5_1, qdot_unit_q5_1, 1, 1); }
static void test_q8_0(void) { check_type("Q8_0", DTYPE_Q8_0, qdot_unit_q8_0, 1, 1); }
static void test_q4_k(void) { check_type("Q4_K", DTYPE_Q4_K, qdot_unit_q4_k, 4, 2); }
static void test_q5_k(void) { check_type("Q5_K", DTYPE_Q5_K, qdot_unit_q5_k, 4, 2); }
static void test_q6_k(void) { check_type("Q6_K", DTYPE_Q6_K, qdot_unit_q6_k, 8, 1); }
static void test_q2_k(void) { check_type("Q2_K", DTYPE_Q2_K, qdot_unit_q2_k, 8, 1); }
static void test_q3_k(void) { check_type("Q3_K", DTYPE_Q3_K, qdot_unit_q3_k, 8, 1); }
static void test_iq4_nl(void) { check_type("IQ4_NL", DTYPE_IQ4_NL, qdot_unit_iq4_nl, 1, 1); }
static void test_iq4_xs(void) { check_type("IQ4_XS", DTYPE_IQ4_XS, qdot_unit_iq4_xs, 8, 1); }

// One type's layout in the GEMV (QDOT_TYPES).
struct walk_type {
    enum dtype t;
    const char *name;
    unit_fn fn;
    int units, subs, tile_blocks;
};

// The GEMV's walk over rows of blocks_per_row blocks (the reference blocks
// laid end to end in a buffer of exactly their size, so rows start
// misaligned), done as the kernel does it: each tile's 16-byte pieces
// (qdot_tile_span; the last piece of the buffer read only up to its end)
// copied into a slot of the kernel's size, units decoded from the slot at the
// row's misalignment, dotted with exact activations.
static void check_walk(const struct walk_type *wt, int blocks_per_row)
{
    char path[512];
    size_t n_file = 0, n_f32 = 0;
    snprintf(path, sizeof path, BLOCKS_DIR "%s.blocks", wt->name);
    uint8_t *file = check_read_file(path, &n_file);
    snprintf(path, sizeof path, BLOCKS_DIR "%s.f32", wt->name);
    float *expect = check_read_file(path, &n_f32);
    const struct dtype_info *info = dtype_info(wt->t);
    const int tile = wt->tile_blocks * (int)info->type_size, slot_bytes = tile + 16;
    const int n_blocks = (int)(n_file / info->type_size), n_rows = n_blocks / blocks_per_row;
    const int64_t row_bytes = (int64_t)blocks_per_row * (int64_t)info->type_size;
    const int k = blocks_per_row * (int)info->block_size, n_sub = k / 32;
    uint8_t *w = mem_alloc((size_t)(n_rows * row_bytes));
    uint8_t *slot = mem_alloc((size_t)slot_bytes);
    float *x = mem_alloc((size_t)k * sizeof(float)), *xd = mem_alloc((size_t)n_sub * sizeof(float));
    float *xs = mem_alloc((size_t)n_sub * sizeof(float));
    int16_t *xq = mem_alloc((size_t)k * sizeof(int16_t));
    int16_t *xlay = mem_alloc((size_t)qdot_x_elems(k, 32 * wt->subs) * sizeof(int16_t));
    if (!file || !expect || !w || !slot || !x || !xd || !xs || !xq || !xlay || n_rows < 1) {
        CHECK(!"setup");
        goto done;
    }
    CHECK(tile % 16 == 0 && wt->tile_blocks * wt->units == 64 && (uintptr_t)w % 16 == 0);
    memcpy(w, file, (size_t)(n_rows * row_bytes));
    const uint8_t *end = w + n_rows * row_bytes;
    int n_bad = 0;
    for (int r = 0; r < n_rows; r++) {
        for (int b = 0; b < k; b += ROW)
            exact_activations(x + b); // k is a multiple of 256 or of 32 * 8
        for (int s = 0; s < n_sub; s++)
            qdot_quantize32(x + 32 * s, xq + 32 * s, &xd[s], &xs[s]);
        for (int e = 0; e < k; e++) // the kernel's shared-memory layout
            xlay[qdot_x_offset(e, 32 * wt->subs)] = xq[e];
        double ref = 0.0, mag = 0.0;
        for (int l = 0; l < k; l++) {
            const double wx = (double)expect[(int64_t)r * k + l] * x[l];
            ref += wx;
            mag += fabs(wx);
        }
        const uint8_t *wr = w + r * row_bytes;
        const int n_tiles = (int)((row_bytes + tile - 1) / tile);
        float got = 0.0f;
        for (int t = 0; t < n_tiles; t++) {
            const struct qdot_span sp = qdot_tile_span((uintptr_t)wr, row_bytes, t, tile);
            CHECK(sp.n16 * 16 <= slot_bytes && ((uintptr_t)(wr + sp.first) & 15) == 0);
            CHECK(wr + sp.first >= w);
            memset(slot, 0xA5, (size_t)slot_bytes);
            for (int c = 0; c < sp.n16; c++) {
                const uint8_t *p = wr + sp.first + 16 * c;
                const int64_t avail = end - p;
                memcpy(slot + 16 * c, p, (size_t)(avail < 16 ? avail : 16));
            }
            const int units = sp.bytes / (int)info->type_size * wt->units;
            const int sub_b = (int)info->block_size / 32;
            for (int u = 0; u < units; u++) {
                const int bi = u / wt->units, uj = u % wt->units;
                struct qdot_unit wu;
                wt->fn(slot + sp.mis + bi * (int)info->type_size, uj, &wu);
                const int s = t * wt->tile_blocks * sub_b + bi * sub_b + uj * wt->subs;
                uint32_t xw[32];
                for (int pc = 0; pc < 4 * wt->subs; pc++)
                    memcpy(xw + 4 * pc, xlay + qdot_x_offset(32 * s + 8 * pc, 32 * wt->subs), 16);
                got += qdot_unit_dot(&wu, wt->subs, xw, xd + s, xs + s);
            }
        }
        if (fabs((double)got - ref) > 1e-5 * mag + 1e-30) {
            if (n_bad < 5)
                fprintf(stderr, "%s walk %d: row %d: got %.9g, expected %.9g\n", wt->name,
                        blocks_per_row, r, (double)got, ref);
            n_bad++;
        }
    }
    CHECK_EQ_INT(n_bad, 0);
done:
    mem_free(file);
    mem_free(expect);
    mem_free(w);
    mem_free(slot);
    mem_free(x);
    mem_free(xd);
    mem_free(xs);
    mem_free(xq);
    mem_free(xlay);
}

// Rows shorter than a tile, a tile and a part, misaligned and aligned.
static void test_walk(void)
{
    static const struct walk_type types[] = {
#define WALK_TYPE(t, fn, units, subs, tile_blocks) {t, NULL, fn, units, subs, tile_blocks},
        QDOT_TYPES(WALK_TYPE)
#undef WALK_TYPE
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        struct walk_type wt = types[i];
        char name[16];
        snprintf(name, sizeof name, "%s", dtype_info(wt.t)->name);
        for (char *c = name; *c; c++)
            *c = (char)toupper((unsigned char)*c);
        wt.name = name;
        const bool k_quant = dtype_info(wt.t)->block_size == 256;
        static const int small[] = {8, 24, 72, 104}, large[] = {1, 3, 10, 17};
        for (int j = 0; j < 4; j++)
            check_walk(&wt, k_quant ? large[j] : small[j]);
    }
}

// The activations' shared-memory layout: one slot per element inside the
// token's elements, 16-byte pieces (8 elements) kept whole, and the eight
// units of a load phase reading one piece each from 128 contiguous bytes.
static void test_x_layout(void)
{
    static const int ks[] = {32, 96, 256, 768, 1024, 4096, 12288};
    for (int uw = 32; uw <= 64; uw *= 2) {
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            const int k = ks[i];
            if (k % uw)
                continue;
            const int n = qdot_x_elems(k, uw);
            CHECK(n >= k && n % (8 * uw) == 0);
            uint8_t *seen = mem_calloc((size_t)n, 1);
            int bad = 0;
            for (int e = 0; e < k; e++) {
                const int o = qdot_x_offset(e, uw);
                bad += o < 0 || o >= n || seen[o]++ || (e % 8 && o != qdot_x_offset(e - 1, uw) + 1);
            }
            for (int u = 0; u + 8 <= k / uw; u += 8)
                for (int pc = 0; pc < uw / 8; pc++)
                    for (int l = 0; l < 8; l++)
                        bad += qdot_x_offset((u + l) * uw + 8 * pc, uw) !=
                               qdot_x_offset(u * uw + 8 * pc, uw) + 8 * l;
            CHECK_EQ_INT(bad, 0);
            mem_free(seen);
        }
    }
}

// The byte helpers: wrapped per-byte subtraction and the bit spread.
static void test_byte_helpers(void)
{
    for (uint32_t v = 0; v < 128; v += 5)
        for (uint32_t k = 0; k <= 128; k += 8) {
            const uint32_t q = v | (127u - v) << 8 | (v / 2) << 16 | 127u << 24;
            const uint32_t r = qdot_sub_bytes(q, k);
            for (int b = 0; b < 4; b++) {
                const int want = (int)((q >> (8 * b)) & 0xFFu) - (int)k;
                CHECK_EQ_INT((int8_t)(uint8_t)(r >> (8 * b)), (int8_t)(uint8_t)want);
            }
        }
    for (uint32_t h = 0; h < 16; h++)
        for (int b = 0; b < 4; b++)
            CHECK_EQ_INT((qdot_spread4(h) >> (8 * b)) & 0xFFu, (h >> b) & 1u);
    // a: int16 halves 0x7FFF = 32767, 0x8001 = -32767; b: bytes 0x01, 0xFE, 0x7F, 0x80.
    CHECK_EQ_INT(qdot_dp2a_lo(0x80017FFFu, 0x807FFE01u, 5), 5 + 32767 * 1 + 32767 * 2);
    CHECK_EQ_INT(qdot_dp2a_hi(0x80017FFFu, 0x807FFE01u, 5), 5 + 32767 * 127 + 32767 * 128);
}

// Random activations: each value within half a step of x, the extreme at +-32767.
static void test_quantize32(void)
{
    for (int trial = 0; trial < 200; trial++) {
        float x[32], d, s;
        int16_t q[32];
        const float range = ldexpf(1.0f, (int)(rng_next() % 40u) - 20);
        double sum = 0.0;
        for (int l = 0; l < 32; l++) {
            x[l] = range * ((float)(rng_next() % 20001u) / 10000.0f - 1.0f);
            sum += x[l];
        }
        qdot_quantize32(x, q, &d, &s);
        int qmax = 0;
        for (int l = 0; l < 32; l++) {
            CHECK(fabsf((float)q[l] * d - x[l]) <= 0.5f * d * 1.0001f + 1e-6f * fabsf(x[l]));
            qmax = abs(q[l]) > qmax ? abs(q[l]) : qmax;
        }
        CHECK_EQ_INT(qmax, 32767);
        CHECK(fabs((double)s - sum) <= 1e-5 * 32 * range);
    }
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"dot_q4_0", test_q4_0},
        {"dot_q4_1", test_q4_1},
        {"dot_q5_0", test_q5_0},
        {"dot_q5_1", test_q5_1},
        {"dot_q8_0", test_q8_0},
        {"dot_q4_k", test_q4_k},
        {"dot_q5_k", test_q5_k},
        {"dot_q6_k", test_q6_k},
        {"dot_q2_k", test_q2_k},
        {"dot_q3_k", test_q3_k},
        {"dot_iq4_nl", test_iq4_nl},
        {"dot_iq4_xs", test_iq4_xs},
        {"walk", test_walk},
        {"x_layout", test_x_layout},
        {"byte_helpers", test_byte_helpers},
        {"quantize32", test_quantize32},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
