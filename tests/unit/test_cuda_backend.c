// The "cuda" backend's life cycle and memory functions. Without CUDA in the
// build, or without a GPU, creation must fail with a status and a message
// that says why (never an abort); with a GPU, copies, fills, memory info and
// the CUDA_TRY error path (statement, file and line) are checked, and the
// in-place rewrite of bf16 matrices as f16 (--dtype float16).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"
#include "core/alloc.h"
#include "core/dtype.h"

static void test_create_or_explain(void)
{
    struct err err = {0};
    struct backend *be = NULL;
    enum vllmc_status rc = backend_create("cuda", NULL, &be, &err);
    if (rc) {
        printf("  backend_create(\"cuda\"): %s: %s\n", vllmc_status_str(rc), err.msg);
        CHECK(be == NULL);
        CHECK(rc == VLLMC_ERR_UNSUPPORTED);
#ifdef VLLMC_HAVE_CUDA
        CHECK(strstr(err.msg, "no usable GPU") != NULL);
#else
        CHECK(strstr(err.msg, "without CUDA") != NULL);
#endif
        return;
    }
    CHECK_EQ_STR(backend_name(be), "cuda");
    CHECK(backend_location(be) == TENSOR_DEVICE);

    size_t free_b = 0, total_b = 0;
    CHECK_EQ_INT(backend_memory_info(be, &free_b, &total_b), VLLMC_OK);
    CHECK(total_b > 0 && free_b <= total_b);
    printf("  memory: %zu MiB free of %zu MiB\n", free_b >> 20, total_b >> 20);

    // Round trips through the 4 MiB pinned staging area: smaller, exactly its
    // size, one byte over (three chunks of its 2 MiB halves), and a ragged 9 MiB.
    const size_t sizes[] = {1000, (size_t)4 << 20, ((size_t)4 << 20) + 1,
                            ((size_t)9 << 20) + 12345};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        unsigned char *src = mem_alloc(n), *dst = mem_alloc(n);
        VLLMC_ASSERT(src && dst);
        for (size_t i = 0; i < n; i++)
            src[i] = (unsigned char)(i * 131 + 7);
        void *d = NULL;
        CHECK_EQ_INT(backend_buffer_alloc(be, n, &d), VLLMC_OK);
        CHECK_EQ_INT(backend_upload(be, d, src, n), VLLMC_OK);
        memset(dst, 0, n);
        CHECK_EQ_INT(backend_download(be, dst, d, n), VLLMC_OK);
        CHECK(memcmp(src, dst, n) == 0);
        CHECK_EQ_INT(backend_memset(be, d, 0x5a, n / 2), VLLMC_OK);
        CHECK_EQ_INT(backend_download(be, dst, d, n), VLLMC_OK);
        CHECK(dst[0] == 0x5a && dst[n / 2 - 1] == 0x5a && dst[n / 2] == src[n / 2]);
        CHECK_EQ_INT(backend_sync(be), VLLMC_OK);
        backend_buffer_free(be, d);
        mem_free(src);
        mem_free(dst);
    }

    // A fill of a NULL device pointer fails with a status naming the CUDA
    // call, file and line.
    rc = backend_memset(be, NULL, 0, 16);
    CHECK_EQ_INT(rc, VLLMC_ERR_BACKEND);
    printf("  expected error: %s\n", backend_err(be)->msg);
    CHECK(strstr(backend_err(be)->msg, "cudaMemsetAsync") != NULL);
    CHECK(strstr(backend_err(be)->msg, "cuda_backend.c:") != NULL);

    // An allocation beyond the card's memory is an out-of-memory status.
    void *huge = NULL;
    CHECK_EQ_INT(backend_buffer_alloc(be, total_b * 4, &huge), VLLMC_ERR_NOMEM);
    CHECK(huge == NULL);
    // The backend still works afterwards.
    void *d = NULL;
    CHECK_EQ_INT(backend_buffer_alloc(be, 256, &d), VLLMC_OK);
    CHECK_EQ_INT(backend_memset(be, d, 0, 256), VLLMC_OK);
    CHECK_EQ_INT(backend_sync(be), VLLMC_OK);
    backend_buffer_free(be, d);
    backend_free(be);
}

static void test_bad_device_index(void)
{
    struct err err = {0};
    struct backend *be = NULL;
    struct backend_options o;
    backend_options_default(&o);
    o.device_index = 4096;
    enum vllmc_status rc = backend_create("cuda", &o, &be, &err);
    CHECK(rc != VLLMC_OK);
    CHECK(be == NULL);
    CHECK(err.msg[0] != '\0');
}

// backend_weights_to_f16: all matrices or none; f16 holds bf16 values of
// magnitude 2^-17 .. 65504 exactly, rounds smaller ones to its subnormal step
// and cannot hold 65536 (the next bf16 value after 65280). The expected bits
// come from the host's f32_to_fp16 (round to nearest even).
static void test_weights_to_f16(void)
{
    struct err err = {0};
    struct backend *cpu = NULL;
    CHECK_EQ_INT(backend_create("cpu", NULL, &cpu, &err), VLLMC_OK);
    struct tensor none;
    uint16_t one = f32_to_bf16(1.0f);
    VLLMC_ASSERT(tensor_init_2d(&none, DTYPE_BF16, &one, 1, 1));
    struct tensor *nonep = &none;
    int64_t n_outside = -1;
    CHECK_EQ_INT(backend_weights_to_f16(cpu, &nonep, 1, &n_outside), VLLMC_ERR_UNSUPPORTED);
    CHECK(none.dtype == DTYPE_BF16);
    backend_free(cpu);

    struct backend *be = NULL;
    if (backend_create("cuda", NULL, &be, &err)) {
        printf("  no GPU: %s\n", err.msg);
        return;
    }
    enum { N = 4096 };
    const float special[] = {0.0f,      -0.0f,       1.0f,        -1.5f,   0x1p-17f,
                             -0x1p-17f, 0x1.fep-18f, 0x1p-20f,    1e-8f,   3.0e-5f,
                             65280.0f,  -65280.0f,   0x1.02p-14f, 0.0173f, -7.25e-3f};
    const int n_special = (int)(sizeof special / sizeof special[0]);
    uint16_t *a = mem_alloc(N * 2), *back = mem_alloc(N * 2);
    VLLMC_ASSERT(a && back);
    uint32_t state = 12345;
    for (int i = 0; i < N; i++) {
        state = state * 1664525u + 1013904223u;
        // A spread of magnitudes 2^-30 .. 2^15 (below 65280), both signs.
        float v = ldexpf(1.0f + (float)(state >> 9) / 8388608.0f, (int)(state % 45) - 30);
        a[i] = f32_to_bf16(i < n_special ? special[i] : (state & 1 ? -v : v));
    }
    const uint16_t big = f32_to_bf16(65536.0f);
    void *da = NULL, *db = NULL;
    CHECK_EQ_INT(backend_buffer_alloc(be, N * 2, &da), VLLMC_OK);
    CHECK_EQ_INT(backend_buffer_alloc(be, 2 * 2, &db), VLLMC_OK);
    CHECK_EQ_INT(backend_upload(be, da, a, N * 2), VLLMC_OK);
    const uint16_t b_host[2] = {f32_to_bf16(2.0f), big};
    CHECK_EQ_INT(backend_upload(be, db, b_host, sizeof b_host), VLLMC_OK);
    struct tensor ta, tb;
    VLLMC_ASSERT(tensor_init_2d(&ta, DTYPE_BF16, da, 64, N / 64));
    VLLMC_ASSERT(tensor_init_2d(&tb, DTYPE_BF16, db, 2, 1));
    ta.location = tb.location = TENSOR_DEVICE;

    // One value out of range: nothing changes.
    struct tensor *both[2] = {&ta, &tb};
    CHECK_EQ_INT(backend_weights_to_f16(be, both, 2, &n_outside), VLLMC_OK);
    CHECK_EQ_INT(n_outside, 1);
    CHECK(ta.dtype == DTYPE_BF16 && tb.dtype == DTYPE_BF16);
    CHECK_EQ_INT(backend_download(be, back, da, N * 2), VLLMC_OK);
    CHECK(memcmp(a, back, N * 2) == 0);

    struct tensor *just_a = &ta;
    CHECK_EQ_INT(backend_weights_to_f16(be, &just_a, 1, &n_outside), VLLMC_OK);
    CHECK_EQ_INT(n_outside, 0);
    CHECK(ta.dtype == DTYPE_F16);
    CHECK_EQ_INT(backend_download(be, back, da, N * 2), VLLMC_OK);
    int n_wrong = 0, n_inexact = 0;
    for (int i = 0; i < N; i++) {
        const float v = bf16_to_f32(a[i]);
        n_wrong += back[i] != f32_to_fp16(v);
        if (fabsf(v) >= 0x1p-17f)
            n_inexact += fp16_to_f32(back[i]) != v;
    }
    CHECK_EQ_INT(n_wrong, 0);
    CHECK_EQ_INT(n_inexact, 0);
    CHECK(fp16_to_f32(back[8]) == 0.0f); // 1e-8 is under half the smallest subnormal
    backend_buffer_free(be, da);
    backend_buffer_free(be, db);
    mem_free(a);
    mem_free(back);
    backend_free(be);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"create_or_explain", test_create_or_explain},
        {"bad_device_index", test_bad_device_index},
        {"weights_to_f16", test_weights_to_f16},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
