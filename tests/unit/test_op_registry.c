// Op-provider registry: priority order, name tie-break, the disable list, a
// declining gate falling back to the next provider, the UNSUPPORTED message,
// the once-per-shape selection log, and the real CPU table under the disable
// list.
#include <stdlib.h>
#include <unistd.h>

#include "backend/backend_impl.h"
#include "backend/cpu/cpu_backend.h"
#if defined(__GLIBC__) || defined(__linux__)
#include <malloc.h>
#endif

#include "check.h"

// ---- test-local providers for OP_MATMUL ----

static const char *last_run;

static bool accept_all(const struct op_call *c)
{
    (void)c;
    return true;
}

// Accepts single-row calls only, like a GEMV kernel.
static bool accept_m1(const struct op_call *c)
{
    return tensor_n_rows(c->src[0]) == 1;
}

#define TEST_PROVIDER(id, prio, gate)                                                              \
    static enum vllmc_status run_##id(const struct op_call *c)                                     \
    {                                                                                              \
        (void)c;                                                                                   \
        last_run = #id;                                                                            \
        return VLLMC_OK;                                                                           \
    }                                                                                              \
    static const struct op_provider prov_##id = {                                                  \
        .name = #id, .op = OP_MATMUL, .priority = prio, .supports = gate, .run = run_##id}

TEST_PROVIDER(gemv, 20, accept_m1);
TEST_PROVIDER(zeta, 10, accept_all);
TEST_PROVIDER(alpha, 10, accept_all);
TEST_PROVIDER(low, 5, accept_all);

// Table order deliberately unsorted.
static const struct op_provider *const test_table[] = {&prov_low, &prov_zeta, &prov_gemv,
                                                       &prov_alpha};

struct mm {
    float x[4 * 8], w[3 * 8], y[4 * 3];
    struct tensor tx, tw, ty;
    struct op_call call;
};

static void mm_init(struct mm *m, int rows)
{
    tensor_init_2d(&m->tx, DTYPE_F32, m->x, 8, rows);
    tensor_init_2d(&m->tw, DTYPE_F32, m->w, 8, 3);
    tensor_init_2d(&m->ty, DTYPE_F32, m->y, 3, rows);
    m->call = (struct op_call){.op = OP_MATMUL, .dst = &m->ty, .src = {&m->tx, &m->tw}};
}

static struct backend *backend_with(const char *disable)
{
    struct backend_options o;
    backend_options_default(&o);
    o.n_threads = 1;
    o.disable = disable;
    struct backend *be = NULL;
    struct err err = {0};
    CHECK_EQ_INT(backend_create("cpu", &o, &be, &err), VLLMC_OK);
    if (be)
        CHECK_EQ_INT(backend_set_providers(be, test_table, 4), VLLMC_OK);
    return be;
}

static void test_priority_and_tie_break(void)
{
    struct backend *be = backend_with("");
    struct mm m;
    mm_init(&m, 1);
    CHECK_EQ_STR(backend_select_provider(be, &m.call)->name, "gemv");
    CHECK_EQ_INT(backend_run_op(be, &m.call), VLLMC_OK);
    CHECK_EQ_STR(last_run, "gemv");
    // The GEMV gate declines m = 4: the next priority, 10, has two providers
    // and the name decides.
    mm_init(&m, 4);
    CHECK_EQ_STR(backend_select_provider(be, &m.call)->name, "alpha");
    CHECK_EQ_INT(backend_run_op(be, &m.call), VLLMC_OK);
    CHECK_EQ_STR(last_run, "alpha");
    size_t n;
    backend_providers(be, &n);
    CHECK_EQ_INT(n, 4);
    backend_free(be);
}

static void test_disable_list(void)
{
    struct backend *be = backend_with(" alpha , gemv");
    struct mm m;
    mm_init(&m, 1);
    CHECK_EQ_STR(backend_select_provider(be, &m.call)->name, "zeta");
    backend_free(be);

    be = backend_with("alpha,zeta,gemv");
    CHECK_EQ_INT(backend_run_op(be, &m.call), VLLMC_OK);
    CHECK_EQ_STR(last_run, "low");
    backend_free(be);

    // From the environment when the options leave it NULL.
    setenv("VLLMC_OP_PROVIDER_DISABLE", "gemv,alph", 1);
    be = backend_with(NULL);
    CHECK_EQ_STR(backend_select_provider(be, &m.call)->name, "alpha");
    backend_free(be);
    setenv("VLLMC_OP_PROVIDER_DISABLE", "gemv,alpha", 1);
    be = backend_with(NULL);
    CHECK_EQ_STR(backend_select_provider(be, &m.call)->name, "zeta");
    backend_free(be);
    unsetenv("VLLMC_OP_PROVIDER_DISABLE");
}

static void test_name_in_list(void)
{
    CHECK(backend_name_in_list("cpu-avx2", "cpu-avx2"));
    CHECK(backend_name_in_list("a,cpu-avx2,b", "cpu-avx2"));
    CHECK(backend_name_in_list("a, cpu-avx2 ", "cpu-avx2"));
    CHECK(!backend_name_in_list("cpu-avx2x", "cpu-avx2"));
    CHECK(!backend_name_in_list("cpu", "cpu-avx2"));
    CHECK(!backend_name_in_list("", "cpu-ref"));
    CHECK(!backend_name_in_list(NULL, "cpu-ref"));
}

static void test_unsupported_names_op_and_shape(void)
{
    struct backend *be = backend_with("");
    float a[6] = {0}, b[6] = {0}, d[6];
    struct tensor ta, tb, td;
    tensor_init_2d(&ta, DTYPE_F32, a, 3, 2);
    tensor_init_2d(&tb, DTYPE_F32, b, 3, 2);
    tensor_init_2d(&td, DTYPE_F32, d, 3, 2);
    struct op_call c = {.op = OP_ADD, .dst = &td, .src = {&ta, &tb}};
    CHECK(backend_select_provider(be, &c) == NULL);
    CHECK_EQ_INT(backend_run_op(be, &c), VLLMC_ERR_UNSUPPORTED);
    CHECK(strstr(backend_err(be)->msg, "op=add") != NULL);
    CHECK(strstr(backend_err(be)->msg, "n=2 dim=3") != NULL);

    // A shape that breaks the contract is an invalid argument, named.
    tensor_init_2d(&tb, DTYPE_F32, b, 2, 3);
    CHECK_EQ_INT(backend_run_op(be, &c), VLLMC_ERR_INVALID_ARG);
    CHECK(strstr(backend_err(be)->msg, "op=add") != NULL);
    backend_free(be);
}

// Counts "selected=" lines the backend logs while running calls.
static int count_selection_logs(struct backend *be, struct op_call *const *calls, int n)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    for (int i = 0; i < n; i++)
        CHECK_EQ_INT(backend_run_op(be, calls[i]), VLLMC_OK);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    char line[512];
    int n_lines = 0;
    while (fgets(line, sizeof line, tmp)) {
        if (strstr(line, "selected=")) {
            n_lines++;
            fputs(line, stdout);
            CHECK(strstr(line, "op=matmul m=") != NULL);
            CHECK(strstr(line, "priority=") != NULL);
        }
    }
    fclose(tmp);
    return n_lines;
}

static void test_log_once_per_shape(void)
{
    struct backend_options o;
    backend_options_default(&o);
    o.n_threads = 1;
    o.disable = "";
    o.log_providers = true;
    struct backend *be = NULL;
    struct err err = {0};
    CHECK_EQ_INT(backend_create("cpu", &o, &be, &err), VLLMC_OK);
    CHECK_EQ_INT(backend_set_providers(be, test_table, 4), VLLMC_OK);
    struct mm m1, m1b, m4;
    mm_init(&m1, 1);
    mm_init(&m1b, 1);
    mm_init(&m4, 4);
    struct op_call *calls[] = {&m1.call, &m1b.call, &m4.call, &m1.call, &m4.call};
    CHECK_EQ_INT(count_selection_logs(be, calls, 5), 2);
    CHECK_EQ_INT(count_selection_logs(be, calls, 5), 0);
    backend_free(be);
}

static void test_real_cpu_table_and_disable(void)
{
    struct mm m;
    mm_init(&m, 1);
    size_t n;
    const struct op_provider *const *all = cpu_providers(&n);
    // cpu-ref serves every op but sampling.
    for (int op = 0; op < OP_KIND_COUNT; op++) {
        int n_ref = 0;
        for (size_t i = 0; i < n; i++)
            n_ref += (int)all[i]->op == op && !strcmp(all[i]->name, "cpu-ref");
        CHECK_EQ_INT(n_ref, op == OP_SAMPLE ? 0 : 1);
    }

    struct backend_options o;
    backend_options_default(&o);
    o.n_threads = 1;
    o.disable = "";
    struct backend *be = NULL;
    struct err err = {0};
    CHECK_EQ_INT(backend_create("cpu", &o, &be, &err), VLLMC_OK);
    const struct op_provider *best = backend_select_provider(be, &m.call);
    CHECK(best != NULL);
    for (size_t i = 0; i < n; i++)
        if (all[i]->op == OP_MATMUL && all[i]->supports(&m.call))
            CHECK(all[i]->priority <= best->priority);
    backend_free(be);

    // Disabling every fast provider of the environment leaves cpu-ref.
    setenv("VLLMC_OP_PROVIDER_DISABLE", "cpu-avx2,cpu-avx512,cpu-blas", 1);
    o.disable = NULL;
    CHECK_EQ_INT(backend_create("cpu", &o, &be, &err), VLLMC_OK);
    CHECK_EQ_STR(backend_select_provider(be, &m.call)->name, "cpu-ref");
    backend_free(be);
    unsetenv("VLLMC_OP_PROVIDER_DISABLE");
}

static void test_backend_create_and_memory(void)
{
    struct backend *be = NULL;
    struct err err = {0};
    CHECK_EQ_INT(backend_create("tpu", NULL, &be, &err), VLLMC_ERR_INVALID_ARG);
    CHECK(be == NULL);
#ifndef VLLMC_HAVE_CUDA
    CHECK_EQ_INT(backend_create("cuda", NULL, &be, &err), VLLMC_ERR_UNSUPPORTED);
    CHECK(strstr(err.msg, "built without CUDA") != NULL);
#endif
    CHECK_EQ_INT(backend_create("cpu", NULL, &be, &err), VLLMC_OK);
    CHECK_EQ_STR(backend_name(be), "cpu");
    CHECK_EQ_INT(backend_location(be), TENSOR_HOST);
    void *p = NULL;
    CHECK_EQ_INT(backend_buffer_alloc(be, 100, &p), VLLMC_OK);
    CHECK(((uintptr_t)p & 63) == 0);
    char host[100];
    memset(host, 7, sizeof host);
    CHECK_EQ_INT(backend_memset(be, p, 1, 100), VLLMC_OK);
    CHECK_EQ_INT(backend_upload(be, p, host, 50), VLLMC_OK);
    CHECK_EQ_INT(backend_download(be, host, p, 100), VLLMC_OK);
    CHECK_EQ_INT(host[49], 7);
    CHECK_EQ_INT(host[50], 1);
    CHECK_EQ_INT(backend_sync(be), VLLMC_OK);
    size_t free_bytes = 0, total_bytes = 0;
    CHECK_EQ_INT(backend_memory_info(be, &free_bytes, &total_bytes), VLLMC_OK);
    CHECK(total_bytes > 0 && free_bytes <= total_bytes);
    backend_buffer_free(be, p);

    // Zeroed buffers: a small one comes from the heap, which glibc's
    // M_PERTURB (and ASan) fill with nonzero bytes, a large one is a fresh
    // mapping; both read as zeros, both are 64-byte aligned and writable to
    // their last byte.
#ifdef M_PERTURB
    mallopt(M_PERTURB, 0x5a);
#endif
    static const size_t sizes[] = {100, 4096, (size_t)5 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        void *dirty = NULL;
        CHECK_EQ_INT(backend_buffer_alloc(be, n, &dirty), VLLMC_OK);
        CHECK_EQ_INT(backend_memset(be, dirty, 0x5a, n), VLLMC_OK);
        backend_buffer_free(be, dirty);
        unsigned char *z = NULL;
        CHECK_EQ_INT(backend_buffer_alloc_zeroed(be, n, (void **)&z), VLLMC_OK);
        CHECK(((uintptr_t)z & 63) == 0);
        size_t nonzero = 0;
        for (size_t j = 0; z && j < n; j++)
            nonzero += z[j] != 0;
        CHECK(nonzero == 0);
        if (z)
            z[n - 1] = 1;
        backend_buffer_free(be, z);
    }
#ifdef M_PERTURB
    mallopt(M_PERTURB, 0);
#endif
    backend_free(be);
    backend_free(NULL);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"priority_and_tie_break", test_priority_and_tie_break},
        {"disable_list", test_disable_list},
        {"name_in_list", test_name_in_list},
        {"unsupported_names_op_and_shape", test_unsupported_names_op_and_shape},
        {"log_once_per_shape", test_log_once_per_shape},
        {"real_cpu_table_and_disable", test_real_cpu_table_and_disable},
        {"backend_create_and_memory", test_backend_create_and_memory},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
