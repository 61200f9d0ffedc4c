// The CUDA decode GEMV's integer dot products (backend/cuda/quant_dot.h,
// compiled here for the host) against the reference vectors in
// shared/testdata/quant/blocks: each row of reference weights dotted with
// activations that 8-bit blocks hold exactly (multiples of 1/128 with an
// extreme of 127/128), so the unpacked bytes, scales and mins must give the
// reference dot product up to float rounding.
#include "check.h"

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

static void *read_file(const char *path, size_t *n_out)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        CHECK(f != NULL);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = mem_alloc(n > 0 ? (size_t)n : 1);
    CHECK(buf != NULL);
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    CHECK_EQ_INT(got, n);
    *n_out = got;
    return buf;
}

static uint32_t rng_state = 12345u;
static uint32_t rng_next(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}

// x [ROW]: multiples of 1/128 in [-127/128, 127/128], each 32-block with an
// element of magnitude 127/128, so its 8-bit block is exact (d = 1/128).
static void exact_activations(float *x)
{
    for (int l = 0; l < ROW; l++)
        x[l] = (float)((int)(rng_next() % 255u) - 127) / 128.0f;
    for (int s = 0; s < ROW / 32; s++)
        x[32 * s + (int)(rng_next() % 32u)] = (rng_next() & 1u) ? 127.0f / 128.0f : -127.0f / 128.0f;
}

// Every row's dot product through units of `subs` sub-blocks, `units` a block.
static void check_type(const char *name, enum dtype t, unit_fn fn, int units, int subs)
{
    char path[512];
    size_t n_blocks_bytes = 0, n_f32_bytes = 0;
    snprintf(path, sizeof path, BLOCKS_DIR "%s.blocks", name);
    uint8_t *blocks = read_file(path, &n_blocks_bytes);
    snprintf(path, sizeof path, BLOCKS_DIR "%s.f32", name);
    float *expect = read_file(path, &n_f32_bytes);
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
        int8_t xq[ROW];
        exact_activations(x);
        for (int s = 0; s < ROW / 32; s++) {
            qdot_quantize32(x + 32 * s, xq + 32 * s, &xd[s], &xs[s]);
            CHECK(xd[s] == 1.0f / 128.0f);
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
                uint32_t xw[16];
                memcpy(xw, xq + 32 * s, (size_t)(32 * subs));
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
    CHECK_EQ_INT(qdot_dp4a(0xFF02FE7Fu, 0x807F0301u, 5), 5 + 127 * 1 - 2 * 3 + 2 * 127 + 128);
}

// Random activations: each byte within half a step of x, the extreme at +-127.
static void test_quantize32(void)
{
    for (int trial = 0; trial < 200; trial++) {
        float x[32], d, s;
        int8_t q[32];
        const float range = ldexpf(1.0f, (int)(rng_next() % 40u) - 20);
        double sum = 0.0;
        for (int l = 0; l < 32; l++) {
            x[l] = range * ((float)(rng_next() % 20001u) / 10000.0f - 1.0f);
            sum += x[l];
        }
        qdot_quantize32(x, q, &d, &s);
        int qmax = 0;
        for (int l = 0; l < 32; l++) {
            CHECK(fabsf((float)q[l] * d - x[l]) <= 0.5f * d * 1.0001f);
            qmax = abs(q[l]) > qmax ? abs(q[l]) : qmax;
        }
        CHECK_EQ_INT(qmax, 127);
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
        {"byte_helpers", test_byte_helpers},
        {"quantize32", test_quantize32},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
