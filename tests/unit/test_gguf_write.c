// GGUF writer: a file written from the bundled model's metadata and a few
// tensors parses back with the reader to the same keys, values, shapes and
// bytes; misuse (a row the block does not divide, tensors out of order or
// missing) fails with a status.
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/alloc.h"
#include "model/gguf.h"
#include "model/gguf_write.h"

#define BUNDLED VLLMC_SOURCE_DIR "/models/stories260K.gguf"

static void tmp_path(char *buf, size_t n, const char *tag)
{
    snprintf(buf, n, "/tmp/vllmc_test_gguf_write_%ld_%s.gguf", (long)getpid(), tag);
}

static bool kv_equal(const struct gguf_file *a, const struct gguf_kv *ka, const struct gguf_file *b)
{
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)ka->key.len, ka->key.ptr);
    const struct gguf_kv *kb = gguf_find_kv(b, key);
    if (!kb || kb->value.type != ka->value.type)
        return false;
    const struct gguf_value *va = &ka->value, *vb = &kb->value;
    switch (va->type) {
    case GGUF_TYPE_STRING:
        return va->str.len == vb->str.len && !memcmp(va->str.ptr, vb->str.ptr, va->str.len);
    case GGUF_TYPE_ARRAY:
        if (va->arr.type != vb->arr.type || va->arr.n != vb->arr.n)
            return false;
        for (uint64_t i = 0; i < va->arr.n; i++) {
            if (va->arr.type == GGUF_TYPE_STRING) {
                struct gguf_str sa, sb;
                if (!gguf_arr_str(a, key, i, &sa) || !gguf_arr_str(b, key, i, &sb) ||
                    sa.len != sb.len || memcmp(sa.ptr, sb.ptr, sa.len))
                    return false;
            } else {
                double da, db;
                if (!gguf_arr_f64(a, key, i, &da) || !gguf_arr_f64(b, key, i, &db) || da != db)
                    return false;
            }
        }
        return true;
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64:
        return va->f64 == vb->f64;
    default:
        return va->u64 == vb->u64;
    }
}

static void test_round_trip(void)
{
    struct err err = {0};
    struct gguf_file *src = NULL, *back = NULL;
    struct gguf_writer *w = NULL;
    char path[256];
    tmp_path(path, sizeof path, "rt");
    CHECK_EQ_INT(gguf_open(BUNDLED, &src, &err), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_create(&w, &err), VLLMC_OK);
    if (!src || !w)
        goto done;
    for (size_t i = 0; i < gguf_n_kv(src); i++)
        CHECK_EQ_INT(gguf_writer_copy_kv(w, src, gguf_kv_at(src, i)), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_set_u32(w, "general.file_type", 7), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_set_str(w, "general.name", "round trip"), VLLMC_OK);
    // Every source tensor, same type and bytes.
    size_t n = gguf_n_tensors(src);
    for (size_t i = 0; i < n; i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(src, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        CHECK_EQ_INT(gguf_writer_add_tensor(w, name, t->dtype, t->n_dims, t->ne), VLLMC_OK);
        CHECK_EQ_INT(gguf_writer_tensor_bytes(w, i), t->n_bytes);
    }
    CHECK_EQ_INT(gguf_writer_open(w, path), VLLMC_OK);
    for (size_t i = 0; i < n; i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(src, i);
        CHECK_EQ_INT(gguf_writer_write_tensor(w, i, t->data, t->n_bytes), VLLMC_OK);
    }
    CHECK_EQ_INT(gguf_writer_close(w), VLLMC_OK);

    CHECK_EQ_INT(gguf_open(path, &back, &err), VLLMC_OK);
    if (!back)
        goto done;
    CHECK_EQ_INT(gguf_version(back), 3);
    CHECK_EQ_INT(gguf_n_kv(back), gguf_n_kv(src) + 1); // file_type was new
    for (size_t i = 0; i < gguf_n_kv(src); i++) {
        const struct gguf_kv *kv = gguf_kv_at(src, i);
        if (gguf_str_eq(kv->key, "general.name") || gguf_str_eq(kv->key, "general.file_type"))
            continue;
        if (!kv_equal(src, kv, back)) {
            fprintf(stderr, "key %.*s differs\n", (int)kv->key.len, kv->key.ptr);
            check_failures++;
        }
    }
    uint64_t ft = 0;
    CHECK(gguf_get_u64(back, "general.file_type", &ft) && ft == 7);
    struct gguf_str name;
    CHECK(gguf_get_str(back, "general.name", &name) && gguf_str_eq(name, "round trip"));
    CHECK_EQ_INT(gguf_n_tensors(back), n);
    for (size_t i = 0; i < n && i < gguf_n_tensors(back); i++) {
        const struct gguf_tensor_info *a = gguf_tensor_at(src, i), *b = gguf_tensor_at(back, i);
        CHECK(a->name.len == b->name.len && !memcmp(a->name.ptr, b->name.ptr, a->name.len));
        CHECK_EQ_INT(a->dtype, b->dtype);
        CHECK_EQ_INT(a->n_dims, b->n_dims);
        for (int d = 0; d < 4; d++)
            CHECK_EQ_INT(a->ne[d], b->ne[d]);
        CHECK(a->n_bytes == b->n_bytes && !memcmp(a->data, b->data, a->n_bytes));
    }
done:
    gguf_free(back);
    gguf_free(src);
    gguf_writer_free(w);
    remove(path);
}

static void test_misuse(void)
{
    struct err err = {0};
    struct gguf_writer *w = NULL;
    char path[256];
    tmp_path(path, sizeof path, "bad");
    CHECK_EQ_INT(gguf_writer_create(&w, &err), VLLMC_OK);
    if (!w)
        return;
    int64_t ne_bad[2] = {100, 4}, ne[2] = {64, 2};
    CHECK_EQ_INT(gguf_writer_add_tensor(w, "a", DTYPE_Q4_0, 2, ne_bad), VLLMC_ERR_INVALID_ARG);
    CHECK_EQ_INT(gguf_writer_add_tensor(w, "a", DTYPE_Q8_0, 2, ne), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_add_tensor(w, "b", DTYPE_F32, 2, ne), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_tensor_bytes(w, 0), 2 * 2 * 34);
    CHECK_EQ_INT(gguf_writer_open(w, path), VLLMC_OK);
    static uint8_t data[64 * 2 * 4];
    CHECK_EQ_INT(gguf_writer_write_tensor(w, 1, data, 64 * 2 * 4), VLLMC_ERR_INVALID_ARG);
    CHECK_EQ_INT(gguf_writer_write_tensor(w, 0, data, 10), VLLMC_ERR_INVALID_ARG);
    CHECK_EQ_INT(gguf_writer_write_tensor(w, 0, data, 2 * 2 * 34), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_close(w), VLLMC_ERR_INVALID_ARG); // tensor b missing
    gguf_writer_free(w);
    remove(path);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"round_trip", test_round_trip},
        {"misuse", test_misuse},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
