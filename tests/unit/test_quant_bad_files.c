// Quantized GGUF files damaged by hand (from a llama-quantize file in
// shared/testdata/quant/models): a row the block size does not divide, types
// a tensor cannot have, an unknown type id, sizes past the end, a truncated
// file. Each must fail to load with a status and a message naming the
// problem; none may crash (this test also runs under ASan/UBSan).
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "model/model.h"

#define SOURCE VLLMC_SHARED_DIR "/testdata/quant/models/randllama-h256.Q4_0.gguf"

static uint8_t *file_bytes;
static size_t file_n;
static struct backend *be;

static bool load_source(void)
{
    if (file_bytes)
        return true;
    FILE *f = fopen(SOURCE, "rb");
    CHECK(f != NULL);
    if (!f)
        return false;
    fseek(f, 0, SEEK_END);
    file_n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    file_bytes = mem_alloc(file_n);
    CHECK(fread(file_bytes, 1, file_n, f) == file_n);
    fclose(f);
    struct err err = {0};
    CHECK_EQ_INT(backend_create("cpu", NULL, &be, &err), VLLMC_OK);
    return true;
}

// Offset of the tensor info of `name`: its n_dims field, right after the name.
static size_t find_info(const uint8_t *bytes, size_t n, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 8; i + len + 4 <= n; i++) {
        uint64_t l;
        memcpy(&l, bytes + i - 8, 8);
        if (l == len && !memcmp(bytes + i, name, len))
            return i + len;
    }
    return 0;
}

struct patch {
    const char *tensor;
    int field;      // 0: ne[0], 1: ne[1], 2: type
    uint64_t value;
};

// Writes the source with patches applied, truncated to keep bytes (0 = all),
// tries to load it and returns the status; the message goes to msg.
static enum vllmc_status try_load(const struct patch *p, size_t keep, char *msg, size_t n_msg)
{
    uint8_t *b = mem_alloc(file_n);
    memcpy(b, file_bytes, file_n);
    if (p) {
        size_t at = find_info(b, file_n, p->tensor);
        CHECK(at != 0);
        uint32_t n_dims;
        memcpy(&n_dims, b + at, 4);
        if (p->field < 2)
            memcpy(b + at + 4 + 8 * (size_t)p->field, &p->value, 8);
        else {
            uint32_t t = (uint32_t)p->value;
            memcpy(b + at + 4 + 8 * (size_t)n_dims, &t, 4);
        }
    }
    char path[256];
    snprintf(path, sizeof path, "/tmp/vllmc_test_bad_quant_%ld.gguf", (long)getpid());
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, keep ? keep : file_n, f);
    fclose(f);
    mem_free(b);
    struct model_load_params lp;
    model_load_params_default(&lp);
    lp.n_tokens_max = 16;
    struct model *m = NULL;
    struct err err = {0};
    enum vllmc_status rc = model_load(path, be, &lp, &m, &err);
    snprintf(msg, n_msg, "%s", err.msg);
    printf("  -> %s: %s\n", vllmc_status_str(rc), err.msg);
    CHECK(rc != VLLMC_OK ? m == NULL : true);
    model_free(m);
    remove(path);
    return rc;
}

static void test_source_loads(void)
{
    if (!load_source())
        return;
    char msg[ERR_MSG_BYTES];
    CHECK_EQ_INT(try_load(NULL, 0, msg, sizeof msg), VLLMC_OK);
}

static void expect_fail(const struct patch *p, size_t keep, const char *needle)
{
    if (!load_source())
        return;
    char msg[ERR_MSG_BYTES];
    CHECK(try_load(p, keep, msg, sizeof msg) != VLLMC_OK);
    if (!strstr(msg, needle)) {
        fprintf(stderr, "message \"%s\" does not mention \"%s\"\n", msg, needle);
        check_failures++;
    }
}

static void test_row_not_block_multiple(void)
{
    // 250 values per row: not a multiple of Q4_0's 32.
    struct patch p = {"blk.0.attn_q.weight", 0, 250};
    expect_fail(&p, 0, "blk.0.attn_q.weight");
}

static void test_norm_quantized(void)
{
    // A norm is a 1-D vector; a quantized type is not one it can have.
    struct patch p = {"blk.1.ffn_norm.weight", 2, DTYPE_Q8_0};
    expect_fail(&p, 0, "blk.1.ffn_norm.weight");
}

static void test_matrix_without_kernel(void)
{
    // A known ggml type that no provider computes with.
    struct patch p = {"blk.2.ffn_up.weight", 2, DTYPE_IQ2_XXS};
    expect_fail(&p, 0, "blk.2.ffn_up.weight");
}

static void test_embedding_without_kernel(void)
{
    struct patch p = {"token_embd.weight", 2, DTYPE_TQ1_0};
    expect_fail(&p, 0, "token_embd.weight");
}

static void test_unknown_type_id(void)
{
    struct patch p = {"blk.3.attn_k.weight", 2, 77};
    expect_fail(&p, 0, "blk.3.attn_k.weight");
}

static void test_rows_past_end(void)
{
    // Far more rows than the file holds.
    struct patch p = {"blk.3.ffn_down.weight", 1, 1u << 20};
    expect_fail(&p, 0, "blk.3.ffn_down.weight");
}

static void test_truncated(void)
{
    if (!load_source())
        return;
    // Cut inside the data of the last tensors, and inside the header.
    expect_fail(NULL, file_n - 1000, "");
    expect_fail(NULL, file_n / 2, "");
    expect_fail(NULL, 100, "");
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"source_loads", test_source_loads},
        {"row_not_block_multiple", test_row_not_block_multiple},
        {"norm_quantized", test_norm_quantized},
        {"matrix_without_kernel", test_matrix_without_kernel},
        {"embedding_without_kernel", test_embedding_without_kernel},
        {"unknown_type_id", test_unknown_type_id},
        {"rows_past_end", test_rows_past_end},
        {"truncated", test_truncated},
        {NULL, NULL},
    };
    int rc = check_run(cases, argc, argv);
    mem_free(file_bytes);
    backend_free(be);
    return rc;
}
