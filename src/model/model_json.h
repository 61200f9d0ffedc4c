// JSON documents of model folders (safetensors headers, config.json, index
// files) parsed with jansson: strict parsing and status codes instead of
// jansson's error struct.
#ifndef VLLMC_MODEL_MODEL_JSON_H
#define VLLMC_MODEL_MODEL_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "core/status.h"

// Parses n bytes of JSON (duplicate keys and NUL characters rejected). what
// names the document in errors ("safetensors header"). *out owned; json_decref().
// VLLMC_ERR_NOMEM when jansson reports it ran out of memory, else VLLMC_ERR_FORMAT.
enum vllmc_status model_json_parse(const char *bytes, size_t n, const char *what, json_t **out,
                                   struct err *err);

// j serialized compactly with sorted keys, as an owned string (mem_free), or
// NULL when out of memory.
char *model_json_dump(const json_t *j);

// The type of j in words for error messages: "string", "null", ...
const char *model_json_type(const json_t *j);

#endif
