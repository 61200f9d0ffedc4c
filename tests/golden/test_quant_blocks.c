// Dequantization of every GGUF block type against the reference vectors in
// shared/testdata/quant/blocks (made by the GGUF project's own dequantizer):
// every float must be bit-identical. Also checks that the reference
// quantizers of the legacy types reproduce llama-quantize's bytes.
#include "check.h"

#include <stdlib.h>

#include "backend/cpu/quant/dequant.h"
#include "backend/cpu/quant/quantize.h"
#include "core/alloc.h"
#include "core/dtype.h"

#define BLOCKS_DIR VLLMC_SHARED_DIR "/testdata/quant/blocks/"
#define N_WEIGHTS 8192
#define ROW 256

static void check_type(const char *name, enum dtype t)
{
    char path[512];
    size_t n_blocks_bytes = 0, n_f32_bytes = 0;
    snprintf(path, sizeof path, BLOCKS_DIR "%s.blocks", name);
    uint8_t *blocks = check_read_file(path, &n_blocks_bytes);
    snprintf(path, sizeof path, BLOCKS_DIR "%s.f32", name);
    float *expect = check_read_file(path, &n_f32_bytes);
    if (!blocks || !expect)
        goto done;
    size_t row_bytes = dtype_row_bytes(t, ROW);
    CHECK_EQ_INT(n_blocks_bytes, row_bytes * (N_WEIGHTS / ROW));
    CHECK_EQ_INT(n_f32_bytes, N_WEIGHTS * sizeof(float));
    quant_dequant_fn fn = quant_dequant_row_fn(t);
    CHECK(fn != NULL);
    if (!fn || n_blocks_bytes != row_bytes * (N_WEIGHTS / ROW))
        goto done;

    // Row by row (as the matmul reference uses it) and in one call.
    static float got[N_WEIGHTS], got_all[N_WEIGHTS];
    for (int r = 0; r < N_WEIGHTS / ROW; r++)
        fn(blocks + (size_t)r * row_bytes, got + r * ROW, ROW);
    fn(blocks, got_all, N_WEIGHTS);
    int n_diff = 0;
    for (int i = 0; i < N_WEIGHTS; i++) {
        if (memcmp(&got[i], &expect[i], 4) || memcmp(&got_all[i], &expect[i], 4)) {
            if (n_diff < 5)
                fprintf(stderr, "%s: weight %d (row %d): got %.9g, expected %.9g\n", name, i,
                        i / ROW, (double)got[i], (double)expect[i]);
            n_diff++;
        }
    }
    if (n_diff)
        fprintf(stderr, "%s: %d of %d values differ\n", name, n_diff, N_WEIGHTS);
    CHECK_EQ_INT(n_diff, 0);
done:
    mem_free(blocks);
    mem_free(expect);
}

static void test_q4_0(void) { check_type("Q4_0", DTYPE_Q4_0); }
static void test_q4_1(void) { check_type("Q4_1", DTYPE_Q4_1); }
static void test_q5_0(void) { check_type("Q5_0", DTYPE_Q5_0); }
static void test_q5_1(void) { check_type("Q5_1", DTYPE_Q5_1); }
static void test_q8_0(void) { check_type("Q8_0", DTYPE_Q8_0); }
static void test_q2_k(void) { check_type("Q2_K", DTYPE_Q2_K); }
static void test_q3_k(void) { check_type("Q3_K", DTYPE_Q3_K); }
static void test_q4_k(void) { check_type("Q4_K", DTYPE_Q4_K); }
static void test_q5_k(void) { check_type("Q5_K", DTYPE_Q5_K); }
static void test_q6_k(void) { check_type("Q6_K", DTYPE_Q6_K); }
static void test_iq4_nl(void) { check_type("IQ4_NL", DTYPE_IQ4_NL); }
static void test_iq4_xs(void) { check_type("IQ4_XS", DTYPE_IQ4_XS); }

static void test_no_dequant_for_plain_types(void)
{
    CHECK(quant_dequant_row_fn(DTYPE_F32) == NULL);
    CHECK(quant_dequant_row_fn(DTYPE_Q8_K) == NULL);
}

// The legacy quantizers follow the format's reference rounding: quantizing
// source.f32 must give llama-quantize's bytes exactly.
static void check_quantize_exact(const char *name, enum dtype t)
{
    char path[512];
    size_t n_src = 0, n_blocks = 0;
    float *src = check_read_file(BLOCKS_DIR "source.f32", &n_src);
    snprintf(path, sizeof path, BLOCKS_DIR "%s.blocks", name);
    uint8_t *expect = check_read_file(path, &n_blocks);
    static uint8_t got[N_WEIGHTS * 2];
    quant_quantize_fn fn = quant_quantize_row_fn(t);
    CHECK(fn != NULL);
    if (src && expect && fn && n_blocks <= sizeof got) {
        size_t row_bytes = dtype_row_bytes(t, ROW);
        for (int r = 0; r < N_WEIGHTS / ROW; r++)
            fn(src + r * ROW, got + (size_t)r * row_bytes, ROW);
        size_t first = n_blocks;
        for (size_t i = 0; i < n_blocks && first == n_blocks; i++)
            if (got[i] != expect[i])
                first = i;
        if (first != n_blocks)
            fprintf(stderr, "%s: first differing byte %zu (row %zu): %u vs %u\n", name, first,
                    first / row_bytes, got[first], expect[first]);
        CHECK_EQ_INT(first, n_blocks);
    }
    mem_free(src);
    mem_free(expect);
}

static void test_quantize_q4_0(void) { check_quantize_exact("Q4_0", DTYPE_Q4_0); }
static void test_quantize_q4_1(void) { check_quantize_exact("Q4_1", DTYPE_Q4_1); }
static void test_quantize_q5_0(void) { check_quantize_exact("Q5_0", DTYPE_Q5_0); }
static void test_quantize_q5_1(void) { check_quantize_exact("Q5_1", DTYPE_Q5_1); }
static void test_quantize_q8_0(void) { check_quantize_exact("Q8_0", DTYPE_Q8_0); }

// The searched quantizers (k-quants, IQ4) need not give llama-quantize's
// bytes, but their error on each source row must be close to its error: at
// most 1.25x its RMSE plus 1e-6 of the row's RMS (for the rows whose scales
// underflow in half precision).
static void check_quantize_error(const char *name, enum dtype t)
{
    char path[512];
    size_t n_src = 0, n_blocks = 0;
    float *src = check_read_file(BLOCKS_DIR "source.f32", &n_src);
    snprintf(path, sizeof path, BLOCKS_DIR "%s.blocks", name);
    uint8_t *ref_blocks = check_read_file(path, &n_blocks);
    quant_quantize_fn q = quant_quantize_row_fn(t);
    quant_dequant_fn dq = quant_dequant_row_fn(t);
    CHECK(q != NULL && dq != NULL);
    if (src && ref_blocks && q && dq) {
        size_t row_bytes = dtype_row_bytes(t, ROW);
        static uint8_t mine[N_WEIGHTS * 2];
        float ours[ROW], theirs[ROW];
        double worst = 0.0;
        for (int r = 0; r < N_WEIGHTS / ROW; r++) {
            const float *x = src + r * ROW;
            q(x, mine + (size_t)r * row_bytes, ROW);
            dq(mine + (size_t)r * row_bytes, ours, ROW);
            dq(ref_blocks + (size_t)r * row_bytes, theirs, ROW);
            double e_ours = 0, e_theirs = 0, rms = 0;
            for (int j = 0; j < ROW; j++) {
                e_ours += ((double)ours[j] - x[j]) * ((double)ours[j] - x[j]);
                e_theirs += ((double)theirs[j] - x[j]) * ((double)theirs[j] - x[j]);
                rms += (double)x[j] * x[j];
            }
            e_ours = sqrt(e_ours / ROW);
            e_theirs = sqrt(e_theirs / ROW);
            rms = sqrt(rms / ROW);
            double ratio = e_ours / (e_theirs + 1e-30);
            if (!(e_ours <= 1.25 * e_theirs + 1e-6 * rms)) {
                fprintf(stderr, "%s row %d: rmse %.6g vs llama-quantize %.6g (row rms %.3g)\n",
                        name, r, e_ours, e_theirs, rms);
                check_failures++;
            }
            if (e_theirs > 1e-6 * rms && ratio > worst)
                worst = ratio;
        }
        printf("  %s: worst row rmse ratio vs llama-quantize %.3f\n", name, worst);
    }
    mem_free(src);
    mem_free(ref_blocks);
}

static void test_quantize_q2_k(void) { check_quantize_error("Q2_K", DTYPE_Q2_K); }
static void test_quantize_q3_k(void) { check_quantize_error("Q3_K", DTYPE_Q3_K); }
static void test_quantize_q4_k(void) { check_quantize_error("Q4_K", DTYPE_Q4_K); }
static void test_quantize_q5_k(void) { check_quantize_error("Q5_K", DTYPE_Q5_K); }
static void test_quantize_q6_k(void) { check_quantize_error("Q6_K", DTYPE_Q6_K); }
static void test_quantize_iq4_nl(void) { check_quantize_error("IQ4_NL", DTYPE_IQ4_NL); }
static void test_quantize_iq4_xs(void) { check_quantize_error("IQ4_XS", DTYPE_IQ4_XS); }

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"dequant_q4_0", test_q4_0},
        {"dequant_q4_1", test_q4_1},
        {"dequant_q5_0", test_q5_0},
        {"dequant_q5_1", test_q5_1},
        {"dequant_q8_0", test_q8_0},
        {"dequant_q2_k", test_q2_k},
        {"dequant_q3_k", test_q3_k},
        {"dequant_q4_k", test_q4_k},
        {"dequant_q5_k", test_q5_k},
        {"dequant_q6_k", test_q6_k},
        {"dequant_iq4_nl", test_iq4_nl},
        {"dequant_iq4_xs", test_iq4_xs},
        {"no_dequant_for_plain_types", test_no_dequant_for_plain_types},
        {"quantize_q4_0", test_quantize_q4_0},
        {"quantize_q4_1", test_quantize_q4_1},
        {"quantize_q5_0", test_quantize_q5_0},
        {"quantize_q5_1", test_quantize_q5_1},
        {"quantize_q8_0", test_quantize_q8_0},
        {"quantize_q2_k", test_quantize_q2_k},
        {"quantize_q3_k", test_quantize_q3_k},
        {"quantize_q4_k", test_quantize_q4_k},
        {"quantize_q5_k", test_quantize_q5_k},
        {"quantize_q6_k", test_quantize_q6_k},
        {"quantize_iq4_nl", test_quantize_iq4_nl},
        {"quantize_iq4_xs", test_quantize_iq4_xs},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
