// The CUDA kernels' sub-block decoders (backend/cuda/quant_decode.h, compiled
// here for the host) against the reference vectors in
// shared/testdata/quant/blocks: every GGUF type the CUDA backend keeps packed,
// every float bit-identical, so the bit layouts are checked without a GPU.
#include "check.h"

#include <stdlib.h>

#include "backend/cuda/quant_decode.h"
#include "core/alloc.h"
#include "core/dtype.h"

#define BLOCKS_DIR VLLMC_SHARED_DIR "/testdata/quant/blocks/"
#define N_WEIGHTS 8192
#define ROW 256

typedef void (*decode_fn)(const uint8_t *b, int j, float *v);

// Decodes the 32 rows of 256 weights sub-block by sub-block, as the GEMV's
// lanes do (sub-block s of a row is sub-block s % per_block of block s / per_block).
static void check_type(const char *name, enum dtype t, decode_fn decode)
{
    char path[512];
    size_t n_blocks_bytes = 0, n_f32_bytes = 0;
    snprintf(path, sizeof path, BLOCKS_DIR "%s.blocks", name);
    uint8_t *blocks = check_read_file(path, &n_blocks_bytes);
    snprintf(path, sizeof path, BLOCKS_DIR "%s.f32", name);
    float *expect = check_read_file(path, &n_f32_bytes);
    const struct dtype_info *info = dtype_info(t);
    size_t row_bytes = dtype_row_bytes(t, ROW);
    if (!blocks || !expect || !info || n_blocks_bytes != row_bytes * (N_WEIGHTS / ROW) ||
        n_f32_bytes != N_WEIGHTS * sizeof(float)) {
        CHECK(!"block or reference file of the wrong size");
        goto done;
    }
    const int per_block = (int)info->block_size / 32;
    int n_diff = 0;
    for (int r = 0; r < N_WEIGHTS / ROW; r++) {
        for (int s = 0; s < ROW / 32; s++) {
            float v[32];
            decode(blocks + (size_t)r * row_bytes + (size_t)(s / per_block) * info->type_size,
                   s % per_block, v);
            for (int l = 0; l < 32; l++) {
                const float *e = &expect[r * ROW + s * 32 + l];
                if (memcmp(&v[l], e, sizeof(float))) {
                    if (n_diff < 5)
                        fprintf(stderr, "%s: row %d weight %d: got %.9g, expected %.9g\n", name, r,
                                s * 32 + l, (double)v[l], (double)*e);
                    n_diff++;
                }
            }
        }
    }
    if (n_diff)
        fprintf(stderr, "%s: %d of %d values differ\n", name, n_diff, N_WEIGHTS);
    CHECK_EQ_INT(n_diff, 0);
done:
    mem_free(blocks);
    mem_free(expect);
}

static void test_q4_0(void) { check_type("Q4_0", DTYPE_Q4_0, quant_decode_q4_0); }
static void test_q4_1(void) { check_type("Q4_1", DTYPE_Q4_1, quant_decode_q4_1); }
static void test_q5_0(void) { check_type("Q5_0", DTYPE_Q5_0, quant_decode_q5_0); }
static void test_q5_1(void) { check_type("Q5_1", DTYPE_Q5_1, quant_decode_q5_1); }
static void test_q8_0(void) { check_type("Q8_0", DTYPE_Q8_0, quant_decode_q8_0); }
static void test_iq4_nl(void) { check_type("IQ4_NL", DTYPE_IQ4_NL, quant_decode_iq4_nl); }
static void test_q2_k(void) { check_type("Q2_K", DTYPE_Q2_K, quant_decode_q2_k); }
static void test_q3_k(void) { check_type("Q3_K", DTYPE_Q3_K, quant_decode_q3_k); }
static void test_q4_k(void) { check_type("Q4_K", DTYPE_Q4_K, quant_decode_q4_k); }
static void test_q5_k(void) { check_type("Q5_K", DTYPE_Q5_K, quant_decode_q5_k); }
static void test_q6_k(void) { check_type("Q6_K", DTYPE_Q6_K, quant_decode_q6_k); }
static void test_iq4_xs(void) { check_type("IQ4_XS", DTYPE_IQ4_XS, quant_decode_iq4_xs); }

// The packed level table gives IQ4_NL's 16 published values in order.
static void test_iq4nl_levels(void)
{
    static const int levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};
    for (int i = 0; i < 16; i++)
        CHECK_EQ_INT((int)quant_decode_iq4nl(i), levels[i]);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"decode_q4_0", test_q4_0},
        {"decode_q4_1", test_q4_1},
        {"decode_q5_0", test_q5_0},
        {"decode_q5_1", test_q5_1},
        {"decode_q8_0", test_q8_0},
        {"decode_iq4_nl", test_iq4_nl},
        {"decode_q2_k", test_q2_k},
        {"decode_q3_k", test_q3_k},
        {"decode_q4_k", test_q4_k},
        {"decode_q5_k", test_q5_k},
        {"decode_q6_k", test_q6_k},
        {"decode_iq4_xs", test_iq4_xs},
        {"iq4nl_levels", test_iq4nl_levels},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
