// The "cuda" backend's life cycle and memory functions. Without CUDA in the
// build, or without a GPU, creation must fail with a status and a message
// that says why (never an abort); with a GPU, copies, fills, memory info and
// the CUDA_TRY error path (statement, file and line) are checked.
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"
#include "core/alloc.h"

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

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"create_or_explain", test_create_or_explain},
        {"bad_device_index", test_bad_device_index},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
