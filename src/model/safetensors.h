// safetensors reader: one file, or a sharded set through
// model.safetensors.index.json. The JSON header is validated with jansson;
// offsets are checked against the file size. Parses from (bytes, length).
#ifndef VLLMC_MODEL_SAFETENSORS_H
#define VLLMC_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

struct st_tensor {
    const char *name; // owned by the safetensors object, NUL-terminated
    enum dtype dtype; // F32, F16, BF16, I32, I64, I8, U8 (others rejected with a clear error)
    int n_dims;
    int64_t ne[4];    // innermost first (the JSON shape reversed), unused = 1
    const void *data; // borrowed from the mapping
    size_t n_bytes;
    int shard; // index of the file holding it: 0 for a single file, else the
               // order in which the index first names the shards
};

struct safetensors;

// Parses one safetensors image; bytes must outlive the result.
enum vllmc_status safetensors_parse(const void *bytes, size_t n_bytes, struct safetensors **out,
                                    struct err *err);
// Opens a model: a .safetensors file, or a directory with model.safetensors or
// else model.safetensors.index.json (every shard mapped once). Errors name the file.
enum vllmc_status safetensors_open(const char *path, struct safetensors **out, struct err *err);
void safetensors_free(struct safetensors *st);

size_t safetensors_n_tensors(const struct safetensors *st);
const struct st_tensor *safetensors_tensor_at(const struct safetensors *st, size_t i);
const struct st_tensor *safetensors_find(const struct safetensors *st, const char *name);
// The "__metadata__" object of the (first) header as a JSON string, or NULL.
const char *safetensors_metadata_json(const struct safetensors *st);

#endif
