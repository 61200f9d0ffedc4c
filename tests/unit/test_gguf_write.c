// GGUF writer: a file written from the bundled model's metadata and a few
// tensors parses back with the reader to the same keys, values, shapes and
// bytes; keys set one by one (bool, scalar and string arrays) and tensors
// streamed in parts read back as written; misuse (a row the block does not
// divide, tensors out of order, too long or missing) fails with a status.
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

static void test_set_and_stream(void)
{
    struct err err = {0};
    struct gguf_writer *w = NULL;
    struct gguf_file *back = NULL;
    char path[256];
    tmp_path(path, sizeof path, "stream");
    CHECK_EQ_INT(gguf_writer_create(&w, &err), VLLMC_OK);
    if (!w)
        return;
    const float scores[3] = {0.5f, -1.25f, 3.0f};
    const int32_t types[3] = {1, 3, 6};
    const struct gguf_str tokens[3] = {{"<s>", 3}, {"h\xc3\xa9", 3}, {"", 0}};
    CHECK_EQ_INT(gguf_writer_set_bool(w, "t.flag", true), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_set_arr(w, "t.scores", GGUF_TYPE_FLOAT32, scores, 3), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_set_arr(w, "t.types", GGUF_TYPE_INT32, types, 3), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_set_arr(w, "t.bad", GGUF_TYPE_STRING, types, 3),
                 VLLMC_ERR_INVALID_ARG);
    CHECK_EQ_INT(gguf_writer_set_arr_str(w, "t.tokens", tokens, 3), VLLMC_OK);
    int64_t ne[2] = {8, 3};
    CHECK_EQ_INT(gguf_writer_add_tensor(w, "m", DTYPE_F32, 2, ne), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_add_tensor(w, "v", DTYPE_F32, 1, ne), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_open(w, path), VLLMC_OK);
    float m[24], v[8];
    for (int i = 0; i < 24; i++)
        m[i] = (float)i * 0.5f;
    for (int i = 0; i < 8; i++)
        v[i] = (float)-i;
    // m row by row; a part past its end and a part of the next tensor early fail.
    CHECK_EQ_INT(gguf_writer_write_tensor_part(w, 0, m, 8 * sizeof(float)), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_write_tensor_part(w, 1, v, sizeof v), VLLMC_ERR_INVALID_ARG);
    CHECK_EQ_INT(gguf_writer_write_tensor(w, 0, m + 8, 16 * sizeof(float)), VLLMC_ERR_INVALID_ARG);
    CHECK_EQ_INT(gguf_writer_write_tensor_part(w, 0, m + 8, 17 * sizeof(float)),
                 VLLMC_ERR_INVALID_ARG);
    CHECK_EQ_INT(gguf_writer_write_tensor_part(w, 0, m + 8, 8 * sizeof(float)), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_write_tensor_part(w, 0, m + 16, 8 * sizeof(float)), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_write_tensor(w, 1, v, sizeof v), VLLMC_OK);
    CHECK_EQ_INT(gguf_writer_close(w), VLLMC_OK);

    CHECK_EQ_INT(gguf_open(path, &back, &err), VLLMC_OK);
    if (back) {
        const struct gguf_kv *flag = gguf_find_kv(back, "t.flag");
        CHECK(flag && flag->value.type == GGUF_TYPE_BOOL && flag->value.u64 == 1);
        for (uint64_t i = 0; i < 3; i++) {
            double d = 0;
            int64_t t = 0;
            struct gguf_str s;
            CHECK(gguf_arr_f64(back, "t.scores", i, &d) && d == (double)scores[i]);
            CHECK(gguf_arr_i64(back, "t.types", i, &t) && t == types[i]);
            CHECK(gguf_arr_str(back, "t.tokens", i, &s) && s.len == tokens[i].len &&
                  !memcmp(s.ptr, tokens[i].ptr, s.len));
        }
        CHECK(!gguf_find_kv(back, "t.bad"));
        CHECK_EQ_INT(gguf_n_tensors(back), 2);
        const struct gguf_tensor_info *tm = gguf_tensor_at(back, 0), *tv = gguf_tensor_at(back, 1);
        CHECK(tm && tm->n_bytes == sizeof m && !memcmp(tm->data, m, sizeof m));
        CHECK(tv && tv->n_bytes == sizeof v && !memcmp(tv->data, v, sizeof v));
    }
    gguf_free(back);
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
        {"set_and_stream", test_set_and_stream},
        {"misuse", test_misuse},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
