// safetensors reader: the stories260K folders of ../shared (F32, BF16,
// sharded) checked against the GGUF copy of the same weights, hand-made
// corrupt headers and folders, every truncation, and out-of-memory.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "core/alloc.h"
#include "model/gguf.h"
#include "model/safetensors.h"

#define MODELS VLLMC_SHARED_DIR "/models/"

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

// An image: 8-byte header length, the header as given, then n_data bytes.
static uint8_t *st_image(const char *header, size_t n_data, size_t *n)
{
    size_t h = strlen(header);
    *n = 8 + h + n_data;
    uint8_t *p = malloc(*n);
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(p + 8, header, h);
    for (size_t i = 0; i < n_data; i++)
        p[8 + h + i] = (uint8_t)(i * 3 + 1);
    return p;
}

static const char valid_header[] =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"h\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[24,32]},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[1,1,2,1],\"data_offsets\":[32,36]},"
    "\"i8\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[36,39]},"
    "\"u8\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[39,40]},"
    "\"i32\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[40,48]},"
    "\"i64\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[48,56]},"
    "\"z\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[56,56]}}";
#define VALID_DATA 56

static void test_crafted_valid(void)
{
    size_t n;
    uint8_t *p = st_image(valid_header, VALID_DATA, &n);
    struct safetensors *st = NULL;
    struct err e = {0};
    CHECK_EQ_INT(safetensors_parse(p, n, &st, &e), VLLMC_OK);
    if (st) {
        CHECK_EQ_INT(safetensors_n_tensors(st), 8);
        CHECK_EQ_STR(safetensors_metadata_json(st), "{\"format\":\"pt\"}");
        const struct st_tensor *w = safetensors_find(st, "w");
        CHECK(w && w->dtype == DTYPE_F32 && w->n_dims == 2 && w->ne[0] == 3 && w->ne[1] == 2);
        CHECK(w && w->n_bytes == 24 && w->data == p + n - VALID_DATA);
        const struct st_tensor *b = safetensors_find(st, "b");
        CHECK(b && b->dtype == DTYPE_BF16 && b->n_dims == 4 && b->ne[0] == 1 && b->ne[1] == 2 &&
              b->ne[3] == 1);
        const struct st_tensor *s = safetensors_find(st, "i64");
        CHECK(s && s->dtype == DTYPE_I64 && s->n_dims == 0 && s->n_bytes == 8);
        CHECK(safetensors_find(st, "u8") && safetensors_find(st, "u8")->dtype == DTYPE_U8);
        CHECK(safetensors_find(st, "z") && safetensors_find(st, "z")->n_bytes == 0);
        CHECK(!safetensors_find(st, "__metadata__"));
        CHECK(!safetensors_find(st, "x"));
        // Tensors come in data order.
        CHECK_EQ_STR(safetensors_tensor_at(st, 0)->name, "w");
        CHECK_EQ_STR(safetensors_tensor_at(st, 1)->name, "h");
        CHECK(safetensors_tensor_at(st, 8) == NULL);
    }
    safetensors_free(st);
    free(p);
}

static void test_crafted_corrupt(void)
{
    static const struct {
        const char *header;
        size_t n_data;
        enum vllmc_status rc;
        const char *msg;
    } cases[] = {
        {"[1,2]", 0, VLLMC_ERR_FORMAT, "header is not a JSON object"},
        {"{\"a\":", 0, VLLMC_ERR_FORMAT, "invalid JSON"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, VLLMC_ERR_FORMAT, "duplicate"},
        {"{\"a\":[]}", 0, VLLMC_ERR_FORMAT, "tensor 'a': entry is not an object (found array)"},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, VLLMC_ERR_FORMAT,
         "\"dtype\" is missing"},
        {"{\"a\":{\"dtype\":1,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, VLLMC_ERR_FORMAT,
         "\"dtype\" is not a string"},
        {"{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
         VLLMC_ERR_UNSUPPORTED, "unsupported dtype 'F8_E4M3'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,4]}}", 4, VLLMC_ERR_FORMAT,
         "\"shape\" is not an array"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, VLLMC_ERR_FORMAT,
         "shape[0] is not a non-negative integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,2.0],\"data_offsets\":[0,8]}}", 8,
         VLLMC_ERR_FORMAT, "shape[1]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
         VLLMC_ERR_UNSUPPORTED, "5 dimensions"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, VLLMC_ERR_FORMAT,
         "\"data_offsets\" is missing"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, VLLMC_ERR_FORMAT,
         "\"data_offsets\" is not an array of two integers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]}}", 4,
         VLLMC_ERR_FORMAT, "are not non-negative integers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 16,
         VLLMC_ERR_FORMAT,
         "tensor 'a': data_offsets [0, 12] hold 12 bytes, its shape and dtype F32 need 16"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 8, VLLMC_ERR_FORMAT,
         "tensor 'a': data_offsets [0, 16] outside the 8 data bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8, VLLMC_ERR_FORMAT,
         "data_offsets [8, 4]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
         24, VLLMC_ERR_FORMAT, "tensors 'a' and 'b' overlap"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],"
         "\"data_offsets\":[0,4]}}",
         4, VLLMC_ERR_FORMAT, "element count overflows"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[0,4294967296,4294967296,4294967296],"
         "\"data_offsets\":[0,0]}}",
         0, VLLMC_ERR_FORMAT, "element count overflows"},
        {"{\"__metadata__\":[],\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
         VLLMC_ERR_FORMAT, "\"__metadata__\" is not an object (found array)"},
        {"{\"__metadata__\":{\"format\":1}}", 0, VLLMC_ERR_FORMAT,
         "\"__metadata__\" value 'format' is not a string"},
        {"{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
         VLLMC_ERR_FORMAT, "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n;
        uint8_t *p = st_image(cases[i].header, cases[i].n_data, &n);
        struct safetensors *st = NULL;
        struct err e = {0};
        enum vllmc_status rc = safetensors_parse(p, n, &st, &e);
        if (rc != cases[i].rc || !strstr(e.msg, cases[i].msg)) {
            fprintf(stderr, "  case %zu: rc %d, expected '%s' in '%s'\n", i, rc, cases[i].msg,
                    e.msg);
            check_failures++;
        }
        CHECK(st == NULL);
        free(p);
    }
    // Header length past the end of the file, and a file too short for it.
    size_t n;
    uint8_t *p = st_image(valid_header, VALID_DATA, &n);
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)((uint64_t)(n - 7) >> (8 * i));
    struct safetensors *st = NULL;
    struct err e = {0};
    CHECK_EQ_INT(safetensors_parse(p, n, &st, &e), VLLMC_ERR_FORMAT);
    CHECK(strstr(e.msg, "past end of file") != NULL);
    memset(p, 0xff, 8);
    CHECK_EQ_INT(safetensors_parse(p, n, &st, &e), VLLMC_ERR_FORMAT);
    CHECK(strstr(e.msg, "past end of file") != NULL);
    CHECK_EQ_INT(safetensors_parse(p, 7, &st, &e), VLLMC_ERR_FORMAT);
    CHECK(strstr(e.msg, "too short") != NULL);
    free(p);
}

// Every proper prefix fails: the last tensor's data ends the file.
static void test_every_truncation(void)
{
    size_t n;
    uint8_t *p = st_image(valid_header, VALID_DATA, &n);
    int n_bad = 0;
    for (size_t k = 0; k < n; k++) {
        uint8_t *copy = malloc(k ? k : 1);
        memcpy(copy, p, k);
        struct safetensors *st = NULL;
        struct err e = {0};
        if (safetensors_parse(copy, k, &st, &e) != VLLMC_ERR_FORMAT || st)
            n_bad++;
        safetensors_free(st);
        free(copy);
    }
    CHECK_EQ_INT(n_bad, 0);
    free(p);
}

static void oom_loop(const uint8_t *p, size_t n)
{
    int n_fail = 0;
    for (long k = 1; k < 100000; k++) {
        struct safetensors *st = NULL;
        struct err e = {0};
        mem_fail_after(k);
        enum vllmc_status rc = safetensors_parse(p, n, &st, &e);
        mem_fail_after(0);
        if (rc == VLLMC_OK) {
            safetensors_free(st);
            break;
        }
        if (rc != VLLMC_ERR_NOMEM) {
            fprintf(stderr, "  allocation %ld failed: %s\n", k, e.msg);
            check_failures++;
        }
        CHECK(st == NULL);
        n_fail++;
    }
    CHECK(n_fail >= 3);
}

static void test_oom(void)
{
    size_t n;
    uint8_t *p = st_image(valid_header, VALID_DATA, &n);
    oom_loop(p, n);
    free(p);
    p = read_file(MODELS "stories260K-hf/model.safetensors", &n);
    CHECK(p != NULL);
    if (p)
        oom_loop(p, n);
    free(p);
}

// ---- the stories260K folders ----

// The Hugging Face names of GGUF tensors whose layout the conversion kept
// (q_proj and k_proj were permuted for rotate-half RoPE).
static const char *const same_layout[][2] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"lm_head.weight", "output.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"model.layers.0.self_attn.v_proj.weight", "blk.0.attn_v.weight"},
    {"model.layers.4.self_attn.o_proj.weight", "blk.4.attn_output.weight"},
    {"model.layers.2.mlp.down_proj.weight", "blk.2.ffn_down.weight"},
    {"model.layers.3.mlp.gate_proj.weight", "blk.3.ffn_gate.weight"},
    {"model.layers.1.input_layernorm.weight", "blk.1.attn_norm.weight"},
    {"model.layers.1.post_attention_layernorm.weight", "blk.1.ffn_norm.weight"},
};

static void test_stories260k_f32(void)
{
    struct safetensors *st = NULL;
    struct gguf_file *g = NULL;
    struct err e = {0};
    CHECK_EQ_INT(safetensors_open(MODELS "stories260K-hf", &st, &e), VLLMC_OK);
    CHECK_EQ_INT(gguf_open(MODELS "stories260K.gguf", &g, &e), VLLMC_OK);
    if (!st || !g)
        goto done;
    CHECK_EQ_INT(safetensors_n_tensors(st), 48);
    CHECK_EQ_STR(safetensors_metadata_json(st), "{\"format\":\"pt\"}");
    const struct st_tensor *t = safetensors_find(st, "model.embed_tokens.weight");
    CHECK(t && t->dtype == DTYPE_F32 && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512);
    t = safetensors_find(st, "model.layers.0.self_attn.k_proj.weight");
    CHECK(t && t->ne[0] == 64 && t->ne[1] == 32 && t->n_bytes == 8192);
    t = safetensors_find(st, "model.layers.4.mlp.down_proj.weight");
    CHECK(t && t->ne[0] == 172 && t->ne[1] == 64);
    for (size_t i = 0; i < sizeof same_layout / sizeof same_layout[0]; i++) {
        const struct st_tensor *a = safetensors_find(st, same_layout[i][0]);
        const struct gguf_tensor_info *b = gguf_find_tensor(g, same_layout[i][1]);
        CHECK(a && b && a->n_bytes == b->n_bytes && !memcmp(a->ne, b->ne, sizeof a->ne) &&
              !memcmp(a->data, b->data, a->n_bytes));
    }
done:
    safetensors_free(st);
    gguf_free(g);
}

// BF16 weights are the F32 ones rounded to nearest even.
static void test_stories260k_bf16(void)
{
    struct safetensors *b = NULL, *f = NULL;
    struct err e = {0};
    CHECK_EQ_INT(safetensors_open(MODELS "stories260K-hf-bf16/model.safetensors", &b, &e),
                 VLLMC_OK);
    CHECK_EQ_INT(safetensors_open(MODELS "stories260K-hf", &f, &e), VLLMC_OK);
    if (b && f) {
        CHECK_EQ_INT(safetensors_n_tensors(b), 48);
        int n_ok = 0;
        for (size_t i = 0; i < safetensors_n_tensors(f); i++) {
            const struct st_tensor *tf = safetensors_tensor_at(f, i);
            const struct st_tensor *tb = safetensors_find(b, tf->name);
            if (!tb || tb->dtype != DTYPE_BF16 || tb->n_bytes * 2 != tf->n_bytes ||
                memcmp(tb->ne, tf->ne, sizeof tf->ne))
                continue;
            size_t n = tf->n_bytes / 4, bad = 0;
            for (size_t k = 0; k < n; k++) {
                float x;
                uint16_t h;
                memcpy(&x, (const char *)tf->data + 4 * k, 4);
                memcpy(&h, (const char *)tb->data + 2 * k, 2);
                bad += h != f32_to_bf16(x);
            }
            n_ok += bad == 0;
        }
        CHECK_EQ_INT(n_ok, 48);
    }
    safetensors_free(b);
    safetensors_free(f);
}

static void test_stories260k_sharded(void)
{
    struct safetensors *s = NULL, *f = NULL;
    struct err e = {0};
    CHECK_EQ_INT(safetensors_open(MODELS "stories260K-hf-sharded", &s, &e), VLLMC_OK);
    if (e.msg[0])
        fprintf(stderr, "  %s\n", e.msg);
    CHECK_EQ_INT(safetensors_open(MODELS "stories260K-hf", &f, &e), VLLMC_OK);
    if (s && f) {
        CHECK_EQ_INT(safetensors_n_tensors(s), 48);
        int n_same = 0;
        for (size_t i = 0; i < safetensors_n_tensors(f); i++) {
            const struct st_tensor *a = safetensors_tensor_at(f, i);
            const struct st_tensor *b = safetensors_find(s, a->name);
            n_same += b && b->dtype == a->dtype && b->n_bytes == a->n_bytes &&
                      !memcmp(b->ne, a->ne, sizeof a->ne) && !memcmp(b->data, a->data, a->n_bytes);
        }
        CHECK_EQ_INT(n_same, 48);
        // The index names model-00001-of-00002 first (lm_head); layers 3-4 and
        // the final norm live in the second file.
        CHECK_EQ_INT(safetensors_find(s, "lm_head.weight")->shard, 0);
        CHECK_EQ_INT(safetensors_find(s, "model.layers.2.mlp.up_proj.weight")->shard, 0);
        CHECK_EQ_INT(safetensors_find(s, "model.layers.3.mlp.up_proj.weight")->shard, 1);
        CHECK_EQ_INT(safetensors_find(s, "model.norm.weight")->shard, 1);
    }
    safetensors_free(s);
    safetensors_free(f);
}

// ---- hand-made folders ----

static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    fwrite(p, 1, n, fp);
    fclose(fp);
}

static void write_shard(const char *dir, const char *name, const char *header, size_t n_data)
{
    size_t n;
    uint8_t *p = st_image(header, n_data, &n);
    write_file(dir, name, p, n);
    free(p);
}

static void check_open(const char *dir, enum vllmc_status want, const char *msg)
{
    struct safetensors *st = NULL;
    struct err e = {0};
    enum vllmc_status rc = safetensors_open(dir, &st, &e);
    if (rc != want || !strstr(e.msg, msg)) {
        fprintf(stderr, "  rc %d, expected %d and '%s' in '%s'\n", rc, want, msg, e.msg);
        check_failures++;
    }
    safetensors_free(st);
}

static void test_folders(void)
{
    char dir[] = "/tmp/vllmc-st-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0 && "mkdtemp");
        return;
    }
    check_open(dir, VLLMC_ERR_NOT_FOUND, "no model.safetensors or model.safetensors.index.json");
    check_open("/nonexistent/x.safetensors", VLLMC_ERR_NOT_FOUND, "/nonexistent/x.safetensors");
    write_shard(dir, "a.safetensors",
                "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    write_shard(dir, "b.safetensors",
                "{\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    write_shard(dir, "c.safetensors",
                "{\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    static const struct {
        const char *index;
        enum vllmc_status rc;
        const char *msg;
    } cases[] = {
        {"{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\"}}", VLLMC_OK, ""},
        {"{\"weight_map\":{\"x\":\"a.safetensors\",\"z\":\"b.safetensors\"}}", VLLMC_ERR_FORMAT,
         "tensor 'z' listed in"},
        {"{\"weight_map\":{\"x\":\"b.safetensors\",\"y\":\"b.safetensors\"}}", VLLMC_ERR_FORMAT,
         "tensor 'x' listed in"},
        {"{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\"}}", VLLMC_ERR_FORMAT,
         "tensor 'y' listed in"},
        {"{\"weight_map\":{\"y\":\"b.safetensors\",\"x\":\"c.safetensors\"}}", VLLMC_ERR_FORMAT,
         "appears twice"},
        {"{\"weight_map\":{\"x\":\"../a.safetensors\"}}", VLLMC_ERR_FORMAT,
         "is not a shard file name"},
        {"{\"weight_map\":{\"x\":3}}", VLLMC_ERR_FORMAT, "is not a shard file name"},
        {"{\"weight_map\":{\"x\":\"d.safetensors\"}}", VLLMC_ERR_NOT_FOUND, "d.safetensors"},
        {"{\"metadata\":{}}", VLLMC_ERR_FORMAT, "no \"weight_map\" object"},
        {"[", VLLMC_ERR_FORMAT, "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(dir, "model.safetensors.index.json", cases[i].index, strlen(cases[i].index));
        check_open(dir, cases[i].rc, cases[i].msg);
    }
    // A shard that is corrupt is named in the error.
    write_shard(dir, "b.safetensors",
                "{\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4);
    write_file(dir, "model.safetensors.index.json", cases[0].index, strlen(cases[0].index));
    check_open(dir, VLLMC_ERR_FORMAT, "b.safetensors: tensor 'y': data_offsets [0, 4] hold 4");
    char path[512];
    const char *names[] = {"a.safetensors", "b.safetensors", "c.safetensors",
                           "model.safetensors.index.json"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"crafted_valid", test_crafted_valid},
        {"crafted_corrupt", test_crafted_corrupt},
        {"every_truncation", test_every_truncation},
        {"oom", test_oom},
        {"stories260k_f32", test_stories260k_f32},
        {"stories260k_bf16", test_stories260k_bf16},
        {"stories260k_sharded", test_stories260k_sharded},
        {"folders", test_folders},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
