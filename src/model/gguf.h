// GGUF reader (versions 1, 2, 3). Parses from (bytes, length) so it can be
// fuzzed; every count, string length, offset and tensor extent is checked
// against the length before use. The parsed file borrows the bytes.
#ifndef VLLMC_MODEL_GGUF_H
#define VLLMC_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
};

struct gguf_str {
    const char *ptr; // borrowed from the file bytes; NOT NUL-terminated
    uint64_t len;
};

struct gguf_value {
    enum gguf_type type;
    union {
        uint64_t u64; // all unsigned ints and bool widen here
        int64_t i64;  // all signed ints widen here
        double f64;   // FLOAT32 and FLOAT64
        struct gguf_str str;
        struct {
            enum gguf_type type; // element type (never ARRAY of ARRAY in practice;
                                 // nested arrays are rejected)
            uint64_t n;
            const void *data; // borrowed: packed elements, or for STRING
                              // arrays the first length prefix
        } arr;
    };
};

struct gguf_kv {
    struct gguf_str key;
    struct gguf_value value;
};

struct gguf_tensor_info {
    struct gguf_str name;
    int n_dims;
    int64_t ne[4]; // innermost first, unused = 1
    enum dtype dtype;
    uint64_t offset;  // relative to the data section
    const void *data; // borrowed: start of the tensor's bytes
    size_t n_bytes;
};

struct gguf_file;

// Parses a GGUF image. bytes must outlive the result. *out owned; gguf_free().
enum vllmc_status gguf_parse(const void *bytes, size_t n_bytes, struct gguf_file **out,
                             struct err *err);
// Maps path read-only and parses it; the mapping lives as long as the result.
enum vllmc_status gguf_open(const char *path, struct gguf_file **out, struct err *err);
void gguf_free(struct gguf_file *g);
// file_map_drop of [p, p + n) in the file gguf_open mapped (nothing for a
// gguf_parse image).
void gguf_drop_bytes(const struct gguf_file *g, const void *p, size_t n);

uint32_t gguf_version(const struct gguf_file *g);
size_t gguf_alignment(const struct gguf_file *g);
size_t gguf_n_kv(const struct gguf_file *g);
const struct gguf_kv *gguf_kv_at(const struct gguf_file *g, size_t i);
const struct gguf_kv *gguf_find_kv(const struct gguf_file *g, const char *key);
size_t gguf_n_tensors(const struct gguf_file *g);
const struct gguf_tensor_info *gguf_tensor_at(const struct gguf_file *g, size_t i);
const struct gguf_tensor_info *gguf_find_tensor(const struct gguf_file *g, const char *name);

// Typed getters: false when the key is missing or of an incompatible type.
// Integers convert between widths when the value fits.
bool gguf_get_u64(const struct gguf_file *g, const char *key, uint64_t *out);
bool gguf_get_i64(const struct gguf_file *g, const char *key, int64_t *out);
bool gguf_get_f64(const struct gguf_file *g, const char *key, double *out);
bool gguf_get_bool(const struct gguf_file *g, const char *key, bool *out);
bool gguf_get_str(const struct gguf_file *g, const char *key, struct gguf_str *out);
// Array access: element count and type; elements by index (bounds-checked).
bool gguf_get_arr(const struct gguf_file *g, const char *key, enum gguf_type *elem_type,
                  uint64_t *n);
bool gguf_arr_str(const struct gguf_file *g, const char *key, uint64_t i, struct gguf_str *out);
bool gguf_arr_f64(const struct gguf_file *g, const char *key, uint64_t i, double *out);
bool gguf_arr_i64(const struct gguf_file *g, const char *key, uint64_t i, int64_t *out);

bool gguf_str_eq(struct gguf_str s, const char *cstr);

#endif
