// Hugging Face model folders: config.json (architecture and shapes) and
// generation_config.json (sampling defaults) read into plain structs. Keys
// keep their Hugging Face names. A key of the wrong JSON type is an error;
// a missing key takes the transformers default noted beside it (0 = unset).
#ifndef VLLMC_MODEL_HF_CONFIG_H
#define VLLMC_MODEL_HF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

#define HF_MAX_EOS 16 // eos_token_id lists longer than this are rejected

enum hf_rope_scaling_type {
    HF_ROPE_SCALING_NONE = 0, // absent or null
    HF_ROPE_SCALING_LINEAR,   // positions divided by factor
    HF_ROPE_SCALING_LLAMA3,   // Llama 3.1 frequency-band scaling
    HF_ROPE_SCALING_DYNAMIC,  // dynamic NTK
    HF_ROPE_SCALING_YARN,
    HF_ROPE_SCALING_OTHER, // a type this reader does not know; see type_name
};

struct hf_rope_scaling {
    enum hf_rope_scaling_type type;
    char type_name[32];                       // "rope_type" (or the older "type"), as written
    double factor;                            // 0 when absent
    double low_freq_factor;                   // llama3; 0 when absent
    double high_freq_factor;                  // llama3; 0 when absent
    int64_t original_max_position_embeddings; // 0 when absent
};

struct hf_config {
    char architecture[64]; // architectures[0], e.g. "LlamaForCausalLM"; "" when absent
    int n_architectures;   // length of the architectures list
    char model_type[32];   // "llama", "qwen2", ...; "" when absent
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t num_key_value_heads; // default num_attention_heads
    int64_t head_dim;            // default hidden_size / num_attention_heads
    int64_t vocab_size;
    int64_t max_position_embeddings;
    double rms_norm_eps; // default 1e-6 (LlamaConfig)
    double rope_theta;   // default 10000
    struct hf_rope_scaling rope_scaling;
    bool tie_word_embeddings; // default false (LlamaConfig, Qwen2Config)
    bool attention_bias;      // default false
    bool has_torch_dtype;
    enum dtype torch_dtype; // "torch_dtype" or the newer "dtype": F32, F16, BF16
    bool has_bos;
    int64_t bos_token_id;
    int n_eos;
    int64_t eos_token_ids[HF_MAX_EOS]; // eos_token_id, an integer or a list
    char *quantization_config;         // owned: the object as compact JSON, or NULL
};

struct hf_generation_config {
    bool has_temperature;
    double temperature;
    bool has_top_p;
    double top_p;
    bool has_top_k;
    int64_t top_k;
    bool has_repetition_penalty;
    double repetition_penalty;
    bool has_max_new_tokens;
    int64_t max_new_tokens;
    bool has_do_sample;
    bool do_sample; // false means greedy whatever the temperature
    bool has_bos;
    int64_t bos_token_id;
    int n_eos;
    int64_t eos_token_ids[HF_MAX_EOS];
};

// Parses config.json from n bytes. On success *c is filled (release with
// hf_config_deinit); on failure *c is zeroed and err names the key.
enum vllmc_status hf_config_parse(const char *json, size_t n, struct hf_config *c, struct err *err);
// Reads path (a config.json file, or a folder holding one).
enum vllmc_status hf_config_load(const char *path, struct hf_config *c, struct err *err);
void hf_config_deinit(struct hf_config *c);

// generation_config.json; nothing to release.
enum vllmc_status hf_generation_config_parse(const char *json, size_t n,
                                             struct hf_generation_config *g, struct err *err);
// Reads path (a generation_config.json file, or a folder holding one).
enum vllmc_status hf_generation_config_load(const char *path, struct hf_generation_config *g,
                                            struct err *err);

#endif
