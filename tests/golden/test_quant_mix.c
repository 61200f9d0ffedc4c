// Tensor type rules of the quantization targets against files llama-quantize
// wrote (shared/testdata/quant/models): for every tensor of every file, the
// type our rules pick for that target equals the type in the file.
#include "check.h"

#include <string.h>

#include "model/gguf.h"
#include "model/quant_mix.h"

#define MODELS VLLMC_SHARED_DIR "/testdata/quant/models/"

static void check_file(const char *target)
{
    char path[512];
    snprintf(path, sizeof path, MODELS "randllama-h256.%s.gguf", target);
    struct gguf_file *g = NULL;
    struct err err = {0};
    CHECK_EQ_INT(gguf_open(path, &g, &err), VLLMC_OK);
    struct quant_mix mix;
    CHECK(quant_mix_parse(target, false, &mix));
    if (!g)
        return;
    int n_diff = 0;
    for (size_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        bool is_output = !strcmp(name, "output.weight") ||
                         (!gguf_find_tensor(g, "output.weight") &&
                          !strcmp(name, "token_embd.weight"));
        enum dtype wanted;
        enum dtype want = quant_mix_tensor_type(&mix, name, t->n_dims, t->ne[0], 4, is_output,
                                                &wanted);
        CHECK_EQ_INT(want, wanted);
        if (want != t->dtype && n_diff++ < 5)
            fprintf(stderr, "%s: %s: ours %s, llama-quantize %s\n", target, name,
                    dtype_name(want), dtype_name(t->dtype));
    }
    CHECK_EQ_INT(n_diff, 0);
    gguf_free(g);
}

static void test_q8_0(void) { check_file("Q8_0"); }
static void test_q4_0(void) { check_file("Q4_0"); }
static void test_q4_k_m(void) { check_file("Q4_K_M"); }
static void test_q5_k_m(void) { check_file("Q5_K_M"); }
static void test_q3_k_m(void) { check_file("Q3_K_M"); }
static void test_q2_k(void) { check_file("Q2_K"); }
static void test_q6_k(void) { check_file("Q6_K"); }
static void test_iq4_xs(void) { check_file("IQ4_XS"); }

static void test_fallback_and_pure(void)
{
    struct quant_mix mix;
    enum dtype wanted;
    CHECK(quant_mix_parse("q4_k_m", false, &mix));
    CHECK_EQ_STR(mix.name, "Q4_K_M");
    CHECK_EQ_INT(mix.file_type, 15);
    // Rows of 64: Q4_K's 256-block does not fit, Q5_0's 32-block does.
    CHECK_EQ_INT(quant_mix_tensor_type(&mix, "blk.0.attn_q.weight", 2, 64, 5, false, &wanted),
                 DTYPE_Q5_0);
    CHECK_EQ_INT(wanted, DTYPE_Q4_K);
    // Rows of 172: nothing quantized fits; F16.
    CHECK_EQ_INT(quant_mix_tensor_type(&mix, "blk.0.ffn_down.weight", 2, 172, 5, false, &wanted),
                 DTYPE_F16);
    CHECK_EQ_INT(wanted, DTYPE_Q4_K);
    CHECK_EQ_INT(quant_mix_tensor_type(&mix, "blk.0.attn_norm.weight", 1, 64, 5, false, &wanted),
                 DTYPE_F32);
    // 28 layers: attn_v gets Q6_K in layers 0-2, 5, 8, ..., 23, 24-27.
    int n_q6 = 0;
    for (int l = 0; l < 28; l++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
        n_q6 += quant_mix_tensor_type(&mix, name, 2, 1024, 28, false, &wanted) == DTYPE_Q6_K;
    }
    CHECK_EQ_INT(n_q6, 3 + 4 + 7);
    CHECK(quant_mix_parse("Q4_0", true, &mix));
    CHECK_EQ_INT(quant_mix_tensor_type(&mix, "output.weight", 2, 256, 4, true, &wanted), DTYPE_Q4_0);
    CHECK(!quant_mix_parse("Q4_K_X", false, &mix));
    CHECK(!quant_mix_parse("a-very-long-unknown-name", false, &mix));
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"q8_0", test_q8_0},         {"q4_0", test_q4_0},     {"q4_k_m", test_q4_k_m},
        {"q5_k_m", test_q5_k_m},     {"q3_k_m", test_q3_k_m}, {"q2_k", test_q2_k},
        {"q6_k", test_q6_k},         {"iq4_xs", test_iq4_xs},
        {"fallback_and_pure", test_fallback_and_pure},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
