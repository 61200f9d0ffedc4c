// GGUF reader: the real model files of ../shared (versions 1 and 3, F32 and
// F16, vocabulary-only files with 100k-entry string arrays), hand-made corrupt
// files of every kind, every truncation of a small file, and out-of-memory.
#include <stdlib.h>

#include "check.h"
#include "core/alloc.h"
#include "model/gguf.h"

#define MODELS VLLMC_SHARED_DIR "/models/"
#define VOCABS VLLMC_SHARED_DIR "/testdata/tokenizer/"

// ---- a little writer for hand-made files ----

struct buf {
    uint8_t *p;
    size_t n, cap;
    uint32_t version; // 1 writes 32-bit counts and lengths
};

static void put(struct buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u32(struct buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}

static void put_u64(struct buf *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_count(struct buf *b, uint64_t v)
{
    if (b->version == 1)
        put_u32(b, (uint32_t)v);
    else
        put_u64(b, v);
}

static void put_str(struct buf *b, const char *s)
{
    put_count(b, strlen(s));
    put(b, s, strlen(s));
}

static void put_key(struct buf *b, const char *key, enum gguf_type t)
{
    put_str(b, key);
    put_u32(b, t);
}

enum craft {
    CRAFT_OK,
    CRAFT_BAD_MAGIC,
    CRAFT_BAD_VERSION,
    CRAFT_BIG_ENDIAN,
    CRAFT_HUGE_N_TENSORS,
    CRAFT_HUGE_N_KV,
    CRAFT_STR_PAST_END,
    CRAFT_HUGE_ARRAY,
    CRAFT_BAD_VALUE_TYPE,
    CRAFT_NESTED_ARRAY,
    CRAFT_DUP_KEY,
    CRAFT_BAD_ALIGNMENT,
    CRAFT_NDIMS_0,
    CRAFT_NDIMS_5,
    CRAFT_BAD_DTYPE,
    CRAFT_NOT_BLOCK_MULTIPLE,
    CRAFT_DIM_OVERFLOW,
    CRAFT_MISALIGNED,
    CRAFT_OFFSET_PAST_END,
    CRAFT_EXTENT_PAST_END,
    CRAFT_OVERLAP,
    CRAFT_DUP_TENSOR,
};

#define N_CRAFT_KV 15

// A small file with every value type and three tensors (f32 [2, 4], f16 [8],
// q4_0 [32]) whose data ends the file, or that file with one defect.
static struct buf craft_file(enum craft c, uint32_t version)
{
    struct buf b = {.version = version};
    put(&b, c == CRAFT_BAD_MAGIC ? "GGUX" : "GGUF", 4);
    put_u32(&b, c == CRAFT_BAD_VERSION ? 4 : c == CRAFT_BIG_ENDIAN ? version << 24 : version);
    put_count(&b, c == CRAFT_HUGE_N_TENSORS ? (version == 1 ? 0xffffffffu : 1ull << 62) : 3);
    put_count(&b, c == CRAFT_HUGE_N_KV ? (version == 1 ? 0xffffffffu : 1ull << 62) : N_CRAFT_KV);

    if (c == CRAFT_STR_PAST_END) {
        put_count(&b, version == 1 ? 0xfffffff0u : 1ull << 40);
        put(&b, "general.architecture", 20);
    } else {
        put_key(&b, "general.architecture", GGUF_TYPE_STRING);
    }
    put_str(&b, "llama");
    put_key(&b, "general.alignment", GGUF_TYPE_UINT32);
    put_u32(&b, c == CRAFT_BAD_ALIGNMENT ? 48 : 32);
    put_key(&b, "t.u8", GGUF_TYPE_UINT8);
    put(&b, "\xc8", 1);
    put_key(&b, c == CRAFT_DUP_KEY ? "t.u8" : "t.i8", GGUF_TYPE_INT8);
    put(&b, "\xfb", 1);
    put_key(&b, "t.u16", GGUF_TYPE_UINT16);
    put(&b, "\x60\xea", 2); // 60000
    put_key(&b, "t.i16", GGUF_TYPE_INT16);
    put(&b, "\xd0\x8a", 2); // -30000
    put_key(&b, "t.u32", c == CRAFT_BAD_VALUE_TYPE ? 13 : GGUF_TYPE_UINT32);
    put_u32(&b, 4000000000u);
    put_key(&b, "t.i32", GGUF_TYPE_INT32);
    put_u32(&b, (uint32_t)-2000000000);
    put_key(&b, "t.f32", GGUF_TYPE_FLOAT32);
    put(&b, "\x00\x00\x00\x3f", 4); // 0.5f
    put_key(&b, "t.bool", GGUF_TYPE_BOOL);
    put(&b, "\x01", 1);
    put_key(&b, "t.u64", GGUF_TYPE_UINT64);
    put_u64(&b, 0x8000000000000001ull);
    put_key(&b, "t.i64", GGUF_TYPE_INT64);
    put_u64(&b, (uint64_t) - (1ll << 40));
    put_key(&b, "t.f64", GGUF_TYPE_FLOAT64);
    put(&b, "\x00\x00\x00\x00\x00\x00\x0a\x40", 8); // 3.25
    put_key(&b, "t.arr_i32", GGUF_TYPE_ARRAY);
    put_u32(&b, c == CRAFT_NESTED_ARRAY ? GGUF_TYPE_ARRAY : GGUF_TYPE_INT32);
    put_count(&b, c == CRAFT_HUGE_ARRAY ? (version == 1 ? 0x40000000u : 1ull << 60) : 3);
    put_u32(&b, 1);
    put_u32(&b, (uint32_t)-2);
    put_u32(&b, 3);
    put_key(&b, "t.arr_str", GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_STRING);
    put_count(&b, 3);
    put_str(&b, "a");
    put_str(&b, "bc");
    put_str(&b, "");

    // Tensor infos: name, n_dims, dims, type, offset.
    put_str(&b, "a");
    put_u32(&b, c == CRAFT_NDIMS_0 ? 0 : c == CRAFT_NDIMS_5 ? 5 : 2);
    put_count(&b, c == CRAFT_DIM_OVERFLOW ? (version == 1 ? 0xffffffffu : 1ull << 62) : 4);
    put_count(&b, c == CRAFT_DIM_OVERFLOW ? (version == 1 ? 0xffffffffu : 1ull << 62) : 2);
    if (c == CRAFT_NDIMS_5) {
        for (int i = 0; i < 3; i++)
            put_count(&b, 1);
    }
    put_u32(&b, c == CRAFT_BAD_DTYPE ? 4 : DTYPE_F32); // 4 was Q4_2, removed from ggml
    put_u64(&b, 0);
    put_str(&b, c == CRAFT_DUP_TENSOR ? "a" : "b");
    put_u32(&b, 1);
    put_count(&b, 8);
    put_u32(&b, DTYPE_F16);
    put_u64(&b, c == CRAFT_MISALIGNED ? 40 : c == CRAFT_OVERLAP ? 0 : 32);
    put_str(&b, "q");
    put_u32(&b, 1);
    put_count(&b, c == CRAFT_NOT_BLOCK_MULTIPLE ? 48 : 32);
    put_u32(&b, DTYPE_Q4_0);
    put_u64(&b, c == CRAFT_OFFSET_PAST_END ? 1u << 20 : 64);

    while (b.n % 32)
        put(&b, "\0", 1);
    for (int i = 0; i < 64 + 18 - (c == CRAFT_EXTENT_PAST_END); i++) {
        uint8_t x = (uint8_t)(i * 7 + 1);
        put(&b, &x, 1);
    }
    return b;
}

// Parses a copy sized exactly, so a sanitizer sees any read past the end.
static enum vllmc_status parse_exact(const uint8_t *p, size_t n, struct gguf_file **g,
                                     struct err *e)
{
    uint8_t *copy = malloc(n ? n : 1);
    memcpy(copy, p, n);
    enum vllmc_status rc = gguf_parse(copy, n, g, e);
    if (*g) // the result borrows the bytes; this test only keeps it briefly
        gguf_free(*g);
    *g = NULL;
    free(copy);
    return rc;
}

static void check_crafted_values(const struct gguf_file *g)
{
    uint64_t u = 0;
    int64_t i = 0;
    double f = 0;
    bool bo = false;
    struct gguf_str s = {0};
    enum gguf_type et = GGUF_TYPE_COUNT;
    CHECK_EQ_INT(gguf_n_kv(g), N_CRAFT_KV);
    CHECK_EQ_INT(gguf_n_tensors(g), 3);
    CHECK(gguf_get_str(g, "general.architecture", &s) && gguf_str_eq(s, "llama"));
    CHECK(gguf_get_u64(g, "t.u8", &u) && u == 200);
    CHECK(gguf_get_i64(g, "t.i8", &i) && i == -5);
    CHECK(!gguf_get_u64(g, "t.i8", &u)); // negative does not fit
    CHECK(gguf_get_u64(g, "t.u16", &u) && u == 60000);
    CHECK(gguf_get_i64(g, "t.i16", &i) && i == -30000);
    CHECK(gguf_get_u64(g, "t.u32", &u) && u == 4000000000u);
    CHECK(gguf_get_i64(g, "t.i32", &i) && i == -2000000000);
    CHECK(gguf_get_f64(g, "t.f32", &f) && f == 0.5);
    CHECK(gguf_get_bool(g, "t.bool", &bo) && bo);
    CHECK(!gguf_get_bool(g, "t.u8", &bo));
    CHECK(gguf_get_u64(g, "t.u64", &u) && u == 0x8000000000000001ull);
    CHECK(!gguf_get_i64(g, "t.u64", &i)); // above INT64_MAX
    CHECK(gguf_get_i64(g, "t.i64", &i) && i == -(1ll << 40));
    CHECK(gguf_get_f64(g, "t.f64", &f) && f == 3.25);
    CHECK(!gguf_get_str(g, "t.f64", &s));
    CHECK(!gguf_get_u64(g, "missing", &u));
    CHECK(gguf_get_arr(g, "t.arr_i32", &et, &u) && et == GGUF_TYPE_INT32 && u == 3);
    CHECK(gguf_arr_i64(g, "t.arr_i32", 1, &i) && i == -2);
    CHECK(gguf_arr_f64(g, "t.arr_i32", 2, &f) && f == 3);
    CHECK(!gguf_arr_i64(g, "t.arr_i32", 3, &i));
    CHECK(gguf_get_arr(g, "t.arr_str", &et, &u) && et == GGUF_TYPE_STRING && u == 3);
    CHECK(gguf_arr_str(g, "t.arr_str", 1, &s) && gguf_str_eq(s, "bc"));
    CHECK(gguf_arr_str(g, "t.arr_str", 2, &s) && s.len == 0);
    CHECK(!gguf_arr_str(g, "t.arr_str", 3, &s));
    CHECK(!gguf_arr_str(g, "t.arr_i32", 0, &s));

    const struct gguf_tensor_info *a = gguf_find_tensor(g, "a"), *q = gguf_find_tensor(g, "q");
    CHECK(a && a->n_dims == 2 && a->ne[0] == 4 && a->ne[1] == 2 && a->ne[2] == 1);
    CHECK(a && a->dtype == DTYPE_F32 && a->n_bytes == 32);
    CHECK(q && q->dtype == DTYPE_Q4_0 && q->n_bytes == 18 && q->offset == 64);
    CHECK(gguf_find_tensor(g, "b") && gguf_find_tensor(g, "b")->n_bytes == 16);
    CHECK(!gguf_find_tensor(g, "c"));
    CHECK(a && ((const uint8_t *)a->data)[0] == 1 && ((const uint8_t *)a->data)[1] == 8);
}

static void test_crafted_valid(void)
{
    for (uint32_t v = 1; v <= 3; v++) {
        struct buf b = craft_file(CRAFT_OK, v);
        struct gguf_file *g = NULL;
        struct err e = {0};
        CHECK_EQ_INT(gguf_parse(b.p, b.n, &g, &e), VLLMC_OK);
        if (e.msg[0])
            fprintf(stderr, "  v%u: %s\n", v, e.msg);
        if (g) {
            CHECK_EQ_INT(gguf_version(g), v);
            CHECK_EQ_INT(gguf_alignment(g), 32);
            check_crafted_values(g);
        }
        gguf_free(g);
        free(b.p);
    }
}

static void test_crafted_corrupt(void)
{
    static const struct {
        enum craft c;
        const char *msg; // a part of the expected error
    } cases[] = {
        {CRAFT_BAD_MAGIC, "bad magic"},
        {CRAFT_BAD_VERSION, "unsupported version 4"},
        {CRAFT_BIG_ENDIAN, "big-endian"},
        {CRAFT_HUGE_N_TENSORS, "tensor count"},
        {CRAFT_HUGE_N_KV, "metadata count"},
        {CRAFT_STR_PAST_END, "past end of file"},
        {CRAFT_HUGE_ARRAY, "key 't.arr_i32': array of"},
        {CRAFT_BAD_VALUE_TYPE, "key 't.u32' has unknown value type 13"},
        {CRAFT_NESTED_ARRAY, "nested arrays"},
        {CRAFT_DUP_KEY, "duplicate metadata key 't.u8'"},
        {CRAFT_BAD_ALIGNMENT, "general.alignment 48"},
        {CRAFT_NDIMS_0, "tensor 'a' has 0 dimensions"},
        {CRAFT_NDIMS_5, "tensor 'a' has 5 dimensions"},
        {CRAFT_BAD_DTYPE, "tensor 'a' has unknown type 4"},
        {CRAFT_NOT_BLOCK_MULTIPLE, "tensor 'q': ne[0] = 48 is not a multiple"},
        {CRAFT_DIM_OVERFLOW, "tensor 'a': dimension 1"},
        {CRAFT_MISALIGNED, "tensor 'b': offset 40 is not a multiple of the alignment 32"},
        {CRAFT_OFFSET_PAST_END, "tensor 'q' starts past end of file"},
        {CRAFT_EXTENT_PAST_END, "tensor 'q' extends past end of file (offset"},
        {CRAFT_OVERLAP, "tensors 'b' and 'a' overlap"},
        {CRAFT_DUP_TENSOR, "duplicate tensor name 'a'"},
    };
    for (uint32_t v = 1; v <= 3; v++) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            struct buf b = craft_file(cases[i].c, v);
            struct gguf_file *g = NULL;
            struct err e = {0};
            enum vllmc_status rc = parse_exact(b.p, b.n, &g, &e);
            CHECK_EQ_INT(rc, VLLMC_ERR_FORMAT);
            if (!strstr(e.msg, cases[i].msg)) {
                fprintf(stderr, "  v%u case %zu: expected '%s' in '%s'\n", v, i, cases[i].msg,
                        e.msg);
                check_failures++;
            }
            CHECK(g == NULL);
            free(b.p);
        }
    }
}

// Every proper prefix of a valid file fails cleanly: the data of the last
// tensor ends the file, so no prefix is itself a valid file.
static void test_every_truncation(void)
{
    for (uint32_t v = 1; v <= 3; v++) {
        struct buf b = craft_file(CRAFT_OK, v);
        int n_bad = 0;
        for (size_t n = 0; n < b.n; n++) {
            struct gguf_file *g = NULL;
            struct err e = {0};
            if (parse_exact(b.p, n, &g, &e) != VLLMC_ERR_FORMAT || strncmp(e.msg, "gguf: ", 6))
                n_bad++;
        }
        CHECK_EQ_INT(n_bad, 0);
        free(b.p);
    }
}

static uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(len > 0 ? (size_t)len : 1);
    *n = fread(p, 1, (size_t)(len > 0 ? len : 0), f);
    fclose(f);
    return p;
}

// Fails the 1st, 2nd, ... allocation until the parse succeeds.
static void oom_loop(const uint8_t *p, size_t n)
{
    int n_fail = 0;
    for (long k = 1; k < 1000; k++) {
        struct gguf_file *g = NULL;
        struct err e = {0};
        mem_fail_after(k);
        enum vllmc_status rc = gguf_parse(p, n, &g, &e);
        mem_fail_after(0);
        if (rc == VLLMC_OK) {
            gguf_free(g);
            break;
        }
        CHECK_EQ_INT(rc, VLLMC_ERR_NOMEM);
        CHECK(g == NULL);
        n_fail++;
    }
    CHECK(n_fail >= 2);
}

static void test_oom(void)
{
    struct buf b = craft_file(CRAFT_OK, 3);
    oom_loop(b.p, b.n);
    free(b.p);
    size_t n = 0;
    uint8_t *p = read_file(MODELS "stories260K.gguf", &n);
    CHECK(p != NULL);
    if (p)
        oom_loop(p, n);
    free(p);
}

// ---- real files ----

static void check_tok(const struct gguf_file *g, uint64_t i, const char *want)
{
    struct gguf_str s = {0};
    CHECK(gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s));
    if (!gguf_str_eq(s, want)) {
        fprintf(stderr, "  token %llu: '%.*s' != '%s'\n", (unsigned long long)i, (int)s.len, s.ptr,
                want);
        check_failures++;
    }
}

static void test_stories260k_v3(void)
{
    struct gguf_file *g = NULL;
    struct err e = {0};
    CHECK_EQ_INT(gguf_open(MODELS "stories260K.gguf", &g, &e), VLLMC_OK);
    if (!g)
        return;
    uint64_t u = 0;
    double f = 0;
    struct gguf_str s = {0};
    enum gguf_type et;
    CHECK_EQ_INT(gguf_version(g), 3);
    CHECK_EQ_INT(gguf_n_kv(g), 19);
    CHECK_EQ_INT(gguf_n_tensors(g), 48);
    CHECK_EQ_INT(gguf_alignment(g), 32);
    CHECK(gguf_get_str(g, "general.architecture", &s) && gguf_str_eq(s, "llama"));
    CHECK(gguf_get_u64(g, "llama.embedding_length", &u) && u == 64);
    CHECK(gguf_get_u64(g, "llama.context_length", &u) && u == 2048);
    CHECK(gguf_get_u64(g, "llama.block_count", &u) && u == 5);
    CHECK(gguf_get_u64(g, "llama.feed_forward_length", &u) && u == 172);
    CHECK(gguf_get_u64(g, "llama.attention.head_count_kv", &u) && u == 4);
    CHECK(gguf_get_u64(g, "tokenizer.ggml.padding_token_id", &u) && u == 4294967295u);
    CHECK(!gguf_get_f64(g, "llama.rope.freq_base", &f));
    CHECK(gguf_get_f64(g, "llama.attention.layer_norm_rms_epsilon", &f));
    CHECK_NEAR(f, 1e-5, 0, 1e-6);
    CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &u) && et == GGUF_TYPE_STRING && u == 512);
    CHECK(gguf_get_arr(g, "tokenizer.ggml.scores", &et, &u) && et == GGUF_TYPE_FLOAT32 && u == 512);
    check_tok(g, 0, "<unk>");
    check_tok(g, 1, "<s>");
    check_tok(g, 2, "</s>");
    check_tok(g, 3, "<0x00>");
    check_tok(g, 258, "<0xFF>");

    int n_f32 = 0;
    for (size_t i = 0; i < gguf_n_tensors(g); i++)
        n_f32 += gguf_tensor_at(g, i)->dtype == DTYPE_F32;
    CHECK_EQ_INT(n_f32, 48);
    const struct gguf_tensor_info *t = gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512 && t->n_bytes == 131072);
    CHECK(t && t->offset == 0 && ((uintptr_t)t->data % 32) == 0);
    t = gguf_find_tensor(g, "blk.0.attn_k.weight");
    CHECK(t && t->ne[0] == 64 && t->ne[1] == 32 && t->n_bytes == 8192);
    t = gguf_find_tensor(g, "blk.4.ffn_down.weight");
    CHECK(t && t->ne[0] == 172 && t->ne[1] == 64);
    t = gguf_find_tensor(g, "output_norm.weight");
    CHECK(t && t->n_dims == 1 && t->ne[0] == 64 && t->offset == 131072);
    // output.weight is a byte copy of token_embd.weight in this file.
    const struct gguf_tensor_info *emb = gguf_find_tensor(g, "token_embd.weight");
    t = gguf_find_tensor(g, "output.weight");
    CHECK(t && emb && !memcmp(t->data, emb->data, emb->n_bytes));
    gguf_free(g);
}

// The v1 file holds the same weights as the v3 one.
static void test_stories260k_v1(void)
{
    struct gguf_file *g1 = NULL, *g3 = NULL;
    struct err e = {0};
    CHECK_EQ_INT(gguf_open(MODELS "tinyllamas-stories-260k-f32.gguf", &g1, &e), VLLMC_OK);
    CHECK_EQ_INT(gguf_open(MODELS "stories260K.gguf", &g3, &e), VLLMC_OK);
    if (g1 && g3) {
        uint64_t u = 0;
        struct gguf_str s = {0};
        CHECK_EQ_INT(gguf_version(g1), 1);
        CHECK_EQ_INT(gguf_n_tensors(g1), 48);
        CHECK(gguf_get_u64(g1, "llama.context_length", &u) && u == 512);
        CHECK(gguf_get_u64(g1, "tokenizer.ggml.padding_token_id", &u) && u == 0);
        CHECK(gguf_get_str(g1, "general.name", &s) && gguf_str_eq(s, "tinyllamas-stories-260k"));
        CHECK(gguf_get_str(g1, "llama.tensor_data_layout", &s) &&
              gguf_str_eq(s, "Meta AI original pth"));
        check_tok(g1, 258, "<0xFF>");
        int n_same = 0;
        for (size_t i = 0; i < gguf_n_tensors(g3); i++) {
            const struct gguf_tensor_info *a = gguf_tensor_at(g3, i);
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)a->name.len, a->name.ptr);
            const struct gguf_tensor_info *b = gguf_find_tensor(g1, name);
            n_same += b && b->dtype == a->dtype && b->n_dims == a->n_dims &&
                      !memcmp(b->ne, a->ne, sizeof a->ne) && b->n_bytes == a->n_bytes &&
                      !memcmp(b->data, a->data, a->n_bytes);
        }
        CHECK_EQ_INT(n_same, 48);
    }
    gguf_free(g1);
    gguf_free(g3);
}

static void test_llama2_tiny_f16(void)
{
    struct gguf_file *g = NULL;
    struct err e = {0};
    CHECK_EQ_INT(gguf_open(MODELS "llama-2-tiny-random.gguf", &g, &e), VLLMC_OK);
    if (!g)
        return;
    uint64_t u = 0;
    CHECK_EQ_INT(gguf_n_kv(g), 18);
    CHECK_EQ_INT(gguf_n_tensors(g), 12);
    CHECK(gguf_get_u64(g, "general.file_type", &u) && u == 1);
    int n_f16 = 0;
    for (size_t i = 0; i < gguf_n_tensors(g); i++)
        n_f16 += gguf_tensor_at(g, i)->dtype == DTYPE_F16;
    CHECK_EQ_INT(n_f16, 9);
    const struct gguf_tensor_info *t = gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->dtype == DTYPE_F16 && t->ne[0] == 8 && t->ne[1] == 32000 && t->n_bytes == 512000);
    check_tok(g, 31999, "\xe7\xbb\x99");
    gguf_free(g);
}

// Vocabulary-only files: no tensors, the file ends with the last value.
static void test_vocab_files(void)
{
    static const struct {
        const char *file;
        size_t n_kv;
        uint64_t n_tokens;
        const char *model;
    } files[] = {
        {"ggml-vocab-llama-spm.gguf", 22, 32000, "llama"},
        {"ggml-vocab-gpt-2.gguf", 16, 50257, "gpt2"},
        {"ggml-vocab-bert-bge.gguf", 20, 30522, "bert"},
        {"ggml-vocab-falcon.gguf", 18, 65024, "gpt2"},
        {"ggml-vocab-deepseek-llm.gguf", 23, 102400, "gpt2"},
        {"ggml-vocab-phi-3.gguf", 26, 32064, "llama"},
        {"ggml-vocab-starcoder.gguf", 19, 49152, "gpt2"},
        {"ggml-vocab-baichuan.gguf", 18, 64000, "llama"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, VOCABS "%s", files[i].file);
        struct gguf_file *g = NULL;
        struct err e = {0};
        CHECK_EQ_INT(gguf_open(path, &g, &e), VLLMC_OK);
        if (!g) {
            fprintf(stderr, "  %s\n", e.msg);
            continue;
        }
        enum gguf_type et = GGUF_TYPE_COUNT;
        uint64_t n = 0;
        struct gguf_str s = {0};
        CHECK_EQ_INT(gguf_n_tensors(g), 0);
        CHECK_EQ_INT(gguf_n_kv(g), files[i].n_kv);
        CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) && et == GGUF_TYPE_STRING);
        CHECK_EQ_INT(n, files[i].n_tokens);
        CHECK(gguf_get_str(g, "tokenizer.ggml.model", &s) && gguf_str_eq(s, files[i].model));
        gguf_free(g);
    }
    struct gguf_file *g = NULL;
    struct err e = {0};
    CHECK_EQ_INT(gguf_open(VOCABS "ggml-vocab-gpt-2.gguf", &g, &e), VLLMC_OK);
    if (g) {
        uint64_t n = 0;
        enum gguf_type et;
        check_tok(g, 50256, "<|endoftext|>");
        CHECK(gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n) && n == 50000);
    }
    gguf_free(g);
}

static void test_open_errors(void)
{
    struct gguf_file *g = NULL;
    struct err e = {0};
    CHECK_EQ_INT(gguf_open(MODELS "no-such-file.gguf", &g, &e), VLLMC_ERR_NOT_FOUND);
    CHECK(strstr(e.msg, "no-such-file.gguf") != NULL);
    CHECK_EQ_INT(gguf_open(MODELS, &g, &e), VLLMC_ERR_IO);
    // A safetensors file is not GGUF: the message names the file and the magic.
    CHECK_EQ_INT(gguf_open(MODELS "stories260K-hf/model.safetensors", &g, &e), VLLMC_ERR_FORMAT);
    CHECK(strstr(e.msg, "model.safetensors: bad magic") != NULL);
    CHECK(g == NULL);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"crafted_valid", test_crafted_valid},       {"crafted_corrupt", test_crafted_corrupt},
        {"every_truncation", test_every_truncation}, {"oom", test_oom},
        {"stories260k_v3", test_stories260k_v3},     {"stories260k_v1", test_stories260k_v1},
        {"llama2_tiny_f16", test_llama2_tiny_f16},   {"vocab_files", test_vocab_files},
        {"open_errors", test_open_errors},           {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
