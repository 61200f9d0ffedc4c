// Core: status texts, allocation failure injection, page allocations, arena,
// fp16/bf16, tensor shapes.
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "core/alloc.h"
#include "core/arena.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

static void test_status_texts(void)
{
    CHECK_EQ_STR(vllmc_status_str(VLLMC_OK), "success");
    CHECK_EQ_STR(vllmc_status_str(VLLMC_ERR_FORMAT), "malformed model file");
    CHECK_EQ_STR(vllmc_status_str((enum vllmc_status)9999), "unknown status");
    struct err e;
    err_clear(&e);
    CHECK_EQ_INT(err_set(&e, VLLMC_ERR_IO, "file %s", "x"), VLLMC_ERR_IO);
    CHECK_EQ_STR(e.msg, "file x");
}

static void test_alloc_fail_injection(void)
{
    mem_fail_after(2);
    void *a = mem_alloc(8);
    void *b = mem_alloc(8);
    void *c = mem_alloc(8);
    CHECK(a != NULL);
    CHECK(b == NULL);
    CHECK(c != NULL);
    mem_free(a);
    mem_free(c);
    mem_fail_after(0);
    CHECK(mem_calloc(SIZE_MAX / 2, 4) == NULL);
}

static sigjmp_buf guard_jump;

static void guard_fault(int sig)
{
    siglongjmp(guard_jump, sig);
}

// mem_pages_alloc: aligned, zeroed, writable to the last byte, the byte after
// the block's last page faults, and failure injection covers it.
static void test_pages(void)
{
    static const size_t sizes[] = {1, 4096, 5000, (size_t)3 << 20};
    static const size_t aligns[] = {64, 4096, (size_t)2 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++) {
            size_t n = sizes[i];
            unsigned char *p = mem_pages_alloc(aligns[a], n);
            CHECK(p != NULL);
            if (!p)
                continue;
            CHECK((uintptr_t)p % aligns[a] == 0);
            size_t nonzero = 0;
            for (size_t j = 0; j < n; j++)
                nonzero += p[j] != 0;
            CHECK(nonzero == 0);
            memset(p, 0xab, n);
            CHECK(p[n - 1] == 0xab);
            mem_pages_free(p, n);
        }
    // The guard page: a write past the block's last page faults.
    volatile unsigned char *p = mem_pages_alloc(4096, 4096);
    CHECK(p != NULL);
    struct sigaction sa = {.sa_handler = guard_fault}, old_segv, old_bus;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
    int faulted = 0;
    if (p && sigsetjmp(guard_jump, 1) == 0)
        p[4096] = 1;
    else
        faulted = 1;
    sigaction(SIGSEGV, &old_segv, NULL);
    sigaction(SIGBUS, &old_bus, NULL);
    CHECK(faulted);
    mem_pages_free((void *)p, 4096);
    mem_pages_free(NULL, 0);
    mem_fail_after(1);
    CHECK(mem_pages_alloc(4096, 4096) == NULL);
    mem_fail_after(0);
}

static void test_arena(void)
{
    struct arena a;
    CHECK_EQ_INT(arena_init(&a, 256), VLLMC_OK);
    char *p = arena_alloc(&a, 10, 1);
    char *q = arena_alloc(&a, 16, 64);
    CHECK(p && q);
    CHECK(((uintptr_t)q & 63) == 0);
    CHECK(arena_alloc(&a, 1000, 1) == NULL);
    arena_reset(&a);
    CHECK(arena_alloc(&a, 256, 1) != NULL);
    CHECK_EQ_INT(a.peak_bytes, 256);
    arena_deinit(&a);
}

static void test_half_conversions(void)
{
    // Values from IEEE 754 binary16 tables.
    CHECK_EQ_INT(f32_to_fp16(1.0f), 0x3c00);
    CHECK_EQ_INT(f32_to_fp16(-2.0f), 0xc000);
    CHECK_EQ_INT(f32_to_fp16(65504.0f), 0x7bff);
    CHECK_EQ_INT(f32_to_fp16(65520.0f), 0x7c00);
    CHECK_EQ_INT(f32_to_fp16(5.9604644775390625e-8f), 0x0001);
    CHECK_EQ_INT(f32_to_fp16(1.0009765625f), 0x3c01);
    CHECK_EQ_INT(f32_to_fp16(1.00048828125f), 0x3c00); // tie rounds to even
    CHECK_NEAR(fp16_to_f32(0x3555), 0.333251953125, 0, 0);
    CHECK_NEAR(fp16_to_f32(0x0001), 5.9604644775390625e-8, 0, 0);
    for (uint32_t h = 0; h < 0x7c00; h++)
        if (f32_to_fp16(fp16_to_f32((uint16_t)h)) != h) {
            CHECK_EQ_INT(f32_to_fp16(fp16_to_f32((uint16_t)h)), h);
            break;
        }
    CHECK_EQ_INT(f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(f32_to_bf16(1.00390625f), 0x3f80); // tie to even
    CHECK_EQ_INT(f32_to_bf16(1.01171875f), 0x3f82);
    CHECK_NEAR(bf16_to_f32(0xc040), -3.0, 0, 0);
}

static void test_tensor_shapes(void)
{
    struct tensor t;
    CHECK(tensor_init_2d(&t, DTYPE_F32, NULL, 64, 3));
    CHECK_EQ_INT(t.nb[1], 256);
    CHECK_EQ_INT(tensor_n_bytes(&t), 768);
    CHECK(tensor_is_contiguous(&t));
    CHECK(tensor_init_2d(&t, DTYPE_Q4_K, NULL, 512, 2));
    CHECK_EQ_INT(t.nb[1], 288);
    CHECK(!tensor_init_2d(&t, DTYPE_Q4_K, NULL, 100, 2));
    CHECK_EQ_INT(dtype_row_bytes(DTYPE_Q8_0, 64), 68);
    CHECK_EQ_INT(dtype_row_bytes(DTYPE_Q8_0, 33), 0);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"status_texts", test_status_texts},
        {"alloc_fail_injection", test_alloc_fail_injection},
        {"pages", test_pages},
        {"arena", test_arena},
        {"half_conversions", test_half_conversions},
        {"tensor_shapes", test_tensor_shapes},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
