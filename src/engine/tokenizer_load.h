// Finds and loads a model's tokenizer: from a GGUF file's tokenizer.ggml.* metadata, from a
// Hugging Face folder (tokenizer.json + tokenizer_config.json) or from a tokenizer.json path.
// This is the one place that knows both the model readers and the tokenizer.
#ifndef VLLMC_ENGINE_TOKENIZER_LOAD_H
#define VLLMC_ENGINE_TOKENIZER_LOAD_H

#include "core/status.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"

// Builds the tokenizer a GGUF file describes. g is borrowed for the call only. *out owned;
// tokenizer_free(). VLLMC_ERR_NOT_FOUND when the file has no tokenizer.
enum vllmc_status tokenizer_load_gguf(const struct gguf_file *g, struct tokenizer **out,
                                      struct err *err);

// path: a .gguf file, a folder holding tokenizer.json (and optionally
// tokenizer_config.json), or a tokenizer.json file (its folder's tokenizer_config.json is
// read when present). *out owned; tokenizer_free().
enum vllmc_status tokenizer_load_path(const char *path, struct tokenizer **out, struct err *err);

#endif
