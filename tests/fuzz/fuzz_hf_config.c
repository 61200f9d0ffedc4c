// Fuzz target for the Hugging Face config readers: the input is parsed both as
// config.json and as generation_config.json.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct hf_config c;
    struct hf_generation_config g;
    struct err e = {0};
    if (!hf_config_parse((const char *)data, size, &c, &e)) {
        sink += strlen(c.architecture) + strlen(c.model_type) + strlen(c.rope_scaling.type_name);
        sink += (uint64_t)(c.hidden_size + c.head_dim + c.n_eos);
        if (c.quantization_config)
            sink += strlen(c.quantization_config);
        hf_config_deinit(&c);
    }
    if (!hf_generation_config_parse((const char *)data, size, &g, &e))
        sink += (uint64_t)(g.n_eos + g.top_k);
    return 0;
}
