// Fuzz target for the GGUF reader: parse the input, then read every value,
// every string array element and the first and last byte of every tensor.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void walk_kv(const struct gguf_file *g, const struct gguf_kv *kv)
{
    char key[256];
    size_t n = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len : sizeof key - 1;
    for (size_t i = 0; i < n; i++)
        key[i] = kv->key.ptr[i] ? kv->key.ptr[i] : '?';
    key[n] = '\0';
    const struct gguf_kv *found = gguf_find_kv(g, key);
    sink += found != NULL;
    uint64_t u;
    int64_t i64;
    double f;
    bool b;
    struct gguf_str s;
    enum gguf_type et;
    sink += gguf_get_u64(g, key, &u) + gguf_get_i64(g, key, &i64) + gguf_get_f64(g, key, &f) +
            gguf_get_bool(g, key, &b) + gguf_get_str(g, key, &s);
    if (s.len && gguf_get_str(g, key, &s))
        sink += (uint8_t)s.ptr[s.len - 1];
    if (!gguf_get_arr(g, key, &et, &u))
        return;
    for (uint64_t i = 0; i <= u && i < 4096; i++) {
        if (gguf_arr_str(g, key, i, &s) && s.len)
            sink += (uint8_t)s.ptr[0] + (uint8_t)s.ptr[s.len - 1];
        sink += gguf_arr_f64(g, key, i, &f) + gguf_arr_i64(g, key, i, &i64);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf_file *g = NULL;
    struct err e = {0};
    if (gguf_parse(data, size, &g, &e))
        return 0;
    sink += gguf_version(g) + gguf_alignment(g);
    for (size_t i = 0; i < gguf_n_kv(g); i++)
        walk_kv(g, gguf_kv_at(g, i));
    for (size_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(g, i);
        const uint8_t *p = t->data;
        if (t->n_bytes)
            sink += p[0] + p[t->n_bytes - 1];
        char name[256];
        size_t n = t->name.len < sizeof name - 1 ? (size_t)t->name.len : sizeof name - 1;
        memcpy(name, t->name.ptr, n);
        name[n] = '\0';
        sink += gguf_find_tensor(g, name) != NULL;
    }
    gguf_free(g);
    return 0;
}
