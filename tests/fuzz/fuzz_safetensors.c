// Fuzz target for the safetensors reader: parse the input (its JSON header
// above all), then look up every tensor by name and read its first and last byte.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct safetensors *st = NULL;
    struct err e = {0};
    if (safetensors_parse(data, size, &st, &e))
        return 0;
    const char *meta = safetensors_metadata_json(st);
    if (meta)
        sink += strlen(meta);
    for (size_t i = 0; i < safetensors_n_tensors(st); i++) {
        const struct st_tensor *t = safetensors_tensor_at(st, i);
        const uint8_t *p = t->data;
        if (t->n_bytes)
            sink += p[0] + p[t->n_bytes - 1];
        sink += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]) + (uint64_t)t->n_dims;
        sink += safetensors_find(st, t->name) == t;
    }
    safetensors_free(st);
    return 0;
}
