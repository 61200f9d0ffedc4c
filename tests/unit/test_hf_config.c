// config.json and generation_config.json: the stories260K folders of
// ../shared, published configs of Llama 3.1, Qwen2.5 and Qwen3 (as released on
// the Hugging Face hub), wrong JSON types, and out-of-memory.
#include <stdlib.h>

#include "check.h"
#include "core/alloc.h"
#include "model/hf_config.h"

#define MODELS VLLMC_SHARED_DIR "/models/"

// meta-llama/Llama-3.1-8B-Instruct config.json and generation_config.json.
static const char llama31_config[] =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,"
    "\"attention_dropout\":0.0,\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009],"
    "\"hidden_act\":\"silu\",\"hidden_size\":4096,\"initializer_range\":0.02,"
    "\"intermediate_size\":14336,\"max_position_embeddings\":131072,\"mlp_bias\":false,"
    "\"model_type\":\"llama\",\"num_attention_heads\":32,\"num_hidden_layers\":32,"
    "\"num_key_value_heads\":8,\"pretraining_tp\":1,\"rms_norm_eps\":1e-05,"
    "\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
    "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},"
    "\"rope_theta\":500000.0,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\","
    "\"transformers_version\":\"4.42.3\",\"use_cache\":true,\"vocab_size\":128256}";
static const char llama31_generation[] =
    "{\"bos_token_id\":128000,\"do_sample\":true,\"eos_token_id\":[128001,128008,128009],"
    "\"temperature\":0.6,\"top_p\":0.9,\"transformers_version\":\"4.42.3\"}";

// Qwen/Qwen2.5-0.5B-Instruct config.json (no head_dim: hidden_size / heads).
static const char qwen25_config[] =
    "{\"architectures\":[\"Qwen2ForCausalLM\"],\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"eos_token_id\":151645,\"hidden_act\":\"silu\",\"hidden_size\":896,"
    "\"initializer_range\":0.02,\"intermediate_size\":4864,\"max_position_embeddings\":32768,"
    "\"max_window_layers\":21,\"model_type\":\"qwen2\",\"num_attention_heads\":14,"
    "\"num_hidden_layers\":24,\"num_key_value_heads\":2,\"rms_norm_eps\":1e-06,"
    "\"rope_theta\":1000000.0,\"sliding_window\":32768,\"tie_word_embeddings\":true,"
    "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.43.1\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":151936}";

// Qwen/Qwen3-0.6B config.json (explicit head_dim, rope_scaling null).
static const char qwen3_config[] =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"silu\","
    "\"hidden_size\":1024,\"initializer_range\":0.02,\"intermediate_size\":3072,"
    "\"max_position_embeddings\":40960,\"max_window_layers\":28,\"model_type\":\"qwen3\","
    "\"num_attention_heads\":16,\"num_hidden_layers\":28,\"num_key_value_heads\":8,"
    "\"rms_norm_eps\":1e-06,\"rope_scaling\":null,\"rope_theta\":1000000,"
    "\"sliding_window\":null,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\","
    "\"transformers_version\":\"4.51.0\",\"use_cache\":true,\"use_sliding_window\":false,"
    "\"vocab_size\":151936}";

static void test_stories260k(void)
{
    struct hf_config c;
    struct hf_generation_config g;
    struct err e = {0};
    CHECK_EQ_INT(hf_config_load(MODELS "stories260K-hf", &c, &e), VLLMC_OK);
    CHECK_EQ_STR(c.architecture, "LlamaForCausalLM");
    CHECK_EQ_INT(c.n_architectures, 1);
    CHECK_EQ_STR(c.model_type, "llama");
    CHECK_EQ_INT(c.hidden_size, 64);
    CHECK_EQ_INT(c.intermediate_size, 172);
    CHECK_EQ_INT(c.num_hidden_layers, 5);
    CHECK_EQ_INT(c.num_attention_heads, 8);
    CHECK_EQ_INT(c.num_key_value_heads, 4);
    CHECK_EQ_INT(c.head_dim, 8);
    CHECK_EQ_INT(c.vocab_size, 512);
    CHECK_EQ_INT(c.max_position_embeddings, 512);
    CHECK_NEAR(c.rms_norm_eps, 1e-5, 0, 1e-12);
    CHECK_NEAR(c.rope_theta, 10000, 0, 0);
    CHECK_EQ_INT(c.rope_scaling.type, HF_ROPE_SCALING_NONE);
    CHECK(!c.tie_word_embeddings && !c.attention_bias);
    CHECK(c.has_torch_dtype && c.torch_dtype == DTYPE_F32);
    CHECK(c.has_bos && c.bos_token_id == 1);
    CHECK(c.n_eos == 1 && c.eos_token_ids[0] == 2);
    CHECK(c.quantization_config == NULL);
    hf_config_deinit(&c);

    CHECK_EQ_INT(hf_config_load(MODELS "stories260K-hf-bf16/config.json", &c, &e), VLLMC_OK);
    CHECK(c.has_torch_dtype && c.torch_dtype == DTYPE_BF16);
    hf_config_deinit(&c);

    CHECK_EQ_INT(hf_generation_config_load(MODELS "stories260K-hf", &g, &e), VLLMC_OK);
    CHECK(g.has_do_sample && !g.do_sample);
    CHECK(g.has_bos && g.bos_token_id == 1);
    CHECK(g.n_eos == 1 && g.eos_token_ids[0] == 2);
    CHECK(!g.has_temperature && !g.has_top_p && !g.has_top_k && !g.has_max_new_tokens);
}

static void test_llama31(void)
{
    struct hf_config c;
    struct err e = {0};
    CHECK_EQ_INT(hf_config_parse(llama31_config, strlen(llama31_config), &c, &e), VLLMC_OK);
    CHECK_EQ_INT(c.hidden_size, 4096);
    CHECK_EQ_INT(c.num_key_value_heads, 8);
    CHECK_EQ_INT(c.head_dim, 128); // not in the file: 4096 / 32
    CHECK_EQ_INT(c.vocab_size, 128256);
    CHECK_NEAR(c.rope_theta, 500000, 0, 0);
    CHECK_EQ_INT(c.rope_scaling.type, HF_ROPE_SCALING_LLAMA3);
    CHECK_EQ_STR(c.rope_scaling.type_name, "llama3");
    CHECK_NEAR(c.rope_scaling.factor, 8, 0, 0);
    CHECK_NEAR(c.rope_scaling.low_freq_factor, 1, 0, 0);
    CHECK_NEAR(c.rope_scaling.high_freq_factor, 4, 0, 0);
    CHECK_EQ_INT(c.rope_scaling.original_max_position_embeddings, 8192);
    CHECK(c.n_eos == 3 && c.eos_token_ids[0] == 128001 && c.eos_token_ids[2] == 128009);
    CHECK(c.torch_dtype == DTYPE_BF16);
    hf_config_deinit(&c);

    struct hf_generation_config g;
    CHECK_EQ_INT(hf_generation_config_parse(llama31_generation, strlen(llama31_generation), &g, &e),
                 VLLMC_OK);
    CHECK(g.has_temperature && g.temperature == 0.6);
    CHECK(g.has_top_p && g.top_p == 0.9);
    CHECK(g.has_do_sample && g.do_sample);
    CHECK(!g.has_top_k && !g.has_repetition_penalty);
    CHECK(g.n_eos == 3 && g.eos_token_ids[1] == 128008);
}

static void test_qwen(void)
{
    struct hf_config c;
    struct err e = {0};
    CHECK_EQ_INT(hf_config_parse(qwen25_config, strlen(qwen25_config), &c, &e), VLLMC_OK);
    CHECK_EQ_STR(c.model_type, "qwen2");
    CHECK_EQ_INT(c.head_dim, 64);
    CHECK(c.tie_word_embeddings);
    CHECK(!c.attention_bias); // Qwen2's QKV bias is implied by the architecture
    CHECK(c.n_eos == 1 && c.eos_token_ids[0] == 151645);
    CHECK_NEAR(c.rms_norm_eps, 1e-6, 0, 1e-12);
    hf_config_deinit(&c);
    CHECK_EQ_INT(hf_config_parse(qwen3_config, strlen(qwen3_config), &c, &e), VLLMC_OK);
    CHECK_EQ_STR(c.architecture, "Qwen3ForCausalLM");
    CHECK_EQ_INT(c.head_dim, 128);       // explicit, not 1024 / 16
    CHECK_NEAR(c.rope_theta, 1e6, 0, 0); // an integer in the file
    CHECK_EQ_INT(c.rope_scaling.type, HF_ROPE_SCALING_NONE);
    hf_config_deinit(&c);
}

static void test_defaults_and_variants(void)
{
    static const char minimal[] = "{\"hidden_size\":64,\"num_attention_heads\":4}";
    static const char linear[] =
        "{\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0},\"dtype\":\"float16\"}";
    static const char params[] =
        "{\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":250000.0}}";
    static const char quant[] =
        "{\"quantization_config\":{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":128,"
        "\"zero_point\":true,\"version\":\"gemm\"},\"torch_dtype\":\"auto\"}";
    struct hf_config c;
    struct err e = {0};
    CHECK_EQ_INT(hf_config_parse(minimal, strlen(minimal), &c, &e), VLLMC_OK);
    CHECK_EQ_INT(c.num_key_value_heads, 4);
    CHECK_EQ_INT(c.head_dim, 16);
    CHECK_NEAR(c.rms_norm_eps, 1e-6, 0, 0);
    CHECK_NEAR(c.rope_theta, 10000, 0, 0);
    CHECK(!c.has_torch_dtype && !c.has_bos && c.n_eos == 0 && c.architecture[0] == '\0');
    hf_config_deinit(&c);
    CHECK_EQ_INT(hf_config_parse(linear, strlen(linear), &c, &e), VLLMC_OK);
    CHECK_EQ_INT(c.rope_scaling.type, HF_ROPE_SCALING_LINEAR);
    CHECK_NEAR(c.rope_scaling.factor, 2, 0, 0);
    CHECK(c.has_torch_dtype && c.torch_dtype == DTYPE_F16);
    hf_config_deinit(&c);
    CHECK_EQ_INT(hf_config_parse(params, strlen(params), &c, &e), VLLMC_OK);
    CHECK_EQ_INT(c.rope_scaling.type, HF_ROPE_SCALING_NONE);
    CHECK_NEAR(c.rope_theta, 250000, 0, 0);
    hf_config_deinit(&c);
    CHECK_EQ_INT(hf_config_parse(quant, strlen(quant), &c, &e), VLLMC_OK);
    CHECK_EQ_STR(c.quantization_config, "{\"bits\":4,\"group_size\":128,\"quant_method\":\"awq\","
                                        "\"version\":\"gemm\",\"zero_point\":true}");
    CHECK(!c.has_torch_dtype);
    hf_config_deinit(&c);
}

static void test_wrong_types(void)
{
    static const struct {
        const char *json;
        const char *msg;
    } cases[] = {
        {"[1]", "config.json: must be a JSON object (found array)"},
        {"{\"hidden_size\":", "config.json: invalid JSON"},
        {"{\"hidden_size\":64,\"hidden_size\":64}", "duplicate"},
        {"{\"hidden_size\":\"64\"}", "\"hidden_size\" must be an integer (found string)"},
        {"{\"hidden_size\":64.0}", "\"hidden_size\" must be an integer (found real)"},
        {"{\"num_hidden_layers\":-1}", "\"num_hidden_layers\" is -1, below 0"},
        {"{\"rms_norm_eps\":\"1e-5\"}", "\"rms_norm_eps\" must be a number (found string)"},
        {"{\"tie_word_embeddings\":1}",
         "\"tie_word_embeddings\" must be true or false (found integer)"},
        {"{\"model_type\":7}", "\"model_type\" must be a string (found integer)"},
        {"{\"architectures\":\"LlamaForCausalLM\"}",
         "\"architectures\" must be a list (found string)"},
        {"{\"architectures\":[1]}", "\"architectures\"[0] is not a class name string"},
        {"{\"eos_token_id\":\"2\"}",
         "\"eos_token_id\" must be a token id or a list of them (found string)"},
        {"{\"eos_token_id\":[2,\"3\"]}", "\"eos_token_id\"[1] is not a token id"},
        {"{\"eos_token_id\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}",
         "lists 17 ids, more than 16"},
        {"{\"rope_scaling\":[]}", "\"rope_scaling\" must be an object (found array)"},
        {"{\"rope_scaling\":{\"factor\":2.0}}", "\"rope_scaling\" needs a \"rope_type\" string"},
        {"{\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":\"8\"}}",
         "\"factor\" must be a number"},
        {"{\"quantization_config\":\"awq\"}",
         "\"quantization_config\" must be an object (found string)"},
        {"{\"torch_dtype\":16}", "\"torch_dtype\" must be a string (found integer)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct hf_config c;
        struct err e = {0};
        enum vllmc_status rc = hf_config_parse(cases[i].json, strlen(cases[i].json), &c, &e);
        if (rc != VLLMC_ERR_FORMAT || !strstr(e.msg, cases[i].msg)) {
            fprintf(stderr, "  case %zu: rc %d, expected '%s' in '%s'\n", i, rc, cases[i].msg,
                    e.msg);
            check_failures++;
        }
        CHECK(c.quantization_config == NULL);
    }
    static const struct {
        const char *json;
        const char *msg;
    } gen_cases[] = {
        {"{\"temperature\":\"0.6\"}", "generation_config.json: \"temperature\" must be a number"},
        {"{\"top_k\":40.5}", "\"top_k\" must be an integer (found real)"},
        {"{\"do_sample\":\"true\"}", "\"do_sample\" must be true or false (found string)"},
        {"{\"max_new_tokens\":-5}", "\"max_new_tokens\" is -5, below 0"},
        {"{\"eos_token_id\":{}}", "\"eos_token_id\" must be a token id or a list of them"},
        {"null", "generation_config.json: invalid JSON"},
        {"[]", "generation_config.json: must be a JSON object (found array)"},
    };
    for (size_t i = 0; i < sizeof gen_cases / sizeof gen_cases[0]; i++) {
        struct hf_generation_config g;
        struct err e = {0};
        enum vllmc_status rc =
            hf_generation_config_parse(gen_cases[i].json, strlen(gen_cases[i].json), &g, &e);
        if (rc != VLLMC_ERR_FORMAT || !strstr(e.msg, gen_cases[i].msg)) {
            fprintf(stderr, "  gen case %zu: rc %d, expected '%s' in '%s'\n", i, rc,
                    gen_cases[i].msg, e.msg);
            check_failures++;
        }
    }
    // null means absent.
    struct hf_generation_config g;
    struct err e = {0};
    static const char nulls[] = "{\"max_new_tokens\":null,\"top_k\":50,\"repetition_penalty\":1.1}";
    CHECK_EQ_INT(hf_generation_config_parse(nulls, strlen(nulls), &g, &e), VLLMC_OK);
    CHECK(!g.has_max_new_tokens && g.has_top_k && g.top_k == 50);
    CHECK(g.has_repetition_penalty && g.repetition_penalty == 1.1);
}

static void test_load_errors(void)
{
    struct hf_config c;
    struct err e = {0};
    CHECK_EQ_INT(hf_config_load(MODELS "no-such-model", &c, &e), VLLMC_ERR_NOT_FOUND);
    CHECK(strstr(e.msg, "no-such-model") != NULL);
    // A folder without config.json names the file it looked for.
    CHECK_EQ_INT(hf_config_load(MODELS, &c, &e), VLLMC_ERR_NOT_FOUND);
    CHECK(strstr(e.msg, "models//config.json") || strstr(e.msg, "models/config.json"));
    // A file that is not JSON names itself.
    CHECK_EQ_INT(hf_config_load(MODELS "stories260K.gguf", &c, &e), VLLMC_ERR_FORMAT);
    CHECK(strstr(e.msg, "stories260K.gguf: invalid JSON") != NULL);
}

static void test_oom(void)
{
    static const char quant[] = "{\"quantization_config\":{\"bits\":4}}";
    int n_fail = 0;
    for (long k = 1; k < 100; k++) {
        struct hf_config c;
        struct err e = {0};
        mem_fail_after(k);
        enum vllmc_status rc = hf_config_parse(quant, strlen(quant), &c, &e);
        mem_fail_after(0);
        if (rc == VLLMC_OK) {
            CHECK_EQ_STR(c.quantization_config, "{\"bits\":4}");
            hf_config_deinit(&c);
            break;
        }
        CHECK_EQ_INT(rc, VLLMC_ERR_NOMEM);
        CHECK(c.quantization_config == NULL);
        n_fail++;
    }
    CHECK_EQ_INT(n_fail, 1);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"stories260k", test_stories260k},
        {"llama31", test_llama31},
        {"qwen", test_qwen},
        {"defaults_and_variants", test_defaults_and_variants},
        {"wrong_types", test_wrong_types},
        {"load_errors", test_load_errors},
        {"oom", test_oom},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
