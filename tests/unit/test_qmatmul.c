// The quantized-weight matmul providers (cpu-q-avx2, cpu-q-avx512) against a
// float64 dot product of the exactly dequantized weights. The only error the
// providers may add is that of quantizing the activations to 8 bits: per
// 32-block of x, |x - x_q| <= max|x| / 254 (round to nearest of x / d with
// d = max|x| / 127), so for each output
//     |y - y_exact| <= sum_b (max_b|x| / 254) * sum_{i in b} |w_i|  + fp32 rounding,
// the bound checked here (rounding allowance: 1e-5 * sum |w| |x|).
// Also: batch invariance (a row's result is bitwise the same alone or in a
// batch of 7), and the selection (fast provider for its types, cpu-ref else).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/quant/dequant.h"
#include "backend/cpu/quant/qgemm.h"
#include "backend/cpu/quant/qmatmul.h"
#include "backend/cpu/quant/quantize.h"
#include "check.h"
#include "core/alloc.h"

static unsigned rng_state = 12345;

static float frand(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

// Bell-shaped values with occasional outliers, like real activations.
static float xrand(int i)
{
    float v = frand() + frand() + frand();
    return i % 97 == 3 ? 20.0f * v : v;
}

struct case_data {
    enum dtype t;
    int64_t m, n, k;
    float *x;        // [m, k]
    uint8_t *w;      // [n, row_bytes]
    float *wf;       // [n, k] dequantized
    float *bias;     // [n]
};

static void case_init(struct case_data *cd, enum dtype t, int64_t m, int64_t n, int64_t k)
{
    cd->t = t;
    cd->m = m;
    cd->n = n;
    cd->k = k;
    size_t rb = dtype_row_bytes(t, k);
    cd->x = mem_alloc((size_t)(m * k) * sizeof(float));
    cd->w = mem_alloc(rb * (size_t)n);
    cd->wf = mem_alloc((size_t)(n * k) * sizeof(float));
    cd->bias = mem_alloc((size_t)n * sizeof(float));
    float *row = mem_alloc((size_t)k * sizeof(float));
    for (int64_t i = 0; i < m * k; i++)
        cd->x[i] = xrand((int)i);
    for (int64_t j = 0; j < n; j++) {
        float scale = 0.02f * (float)(1 + j % 5);
        for (int64_t i = 0; i < k; i++)
            row[i] = scale * frand();
        quant_quantize_row_fn(t)(row, cd->w + (size_t)j * rb, k);
        quant_dequant_row_fn(t)(cd->w + (size_t)j * rb, cd->wf + j * k, k);
        cd->bias[j] = 0.1f * (float)j;
    }
    mem_free(row);
}

static void case_free(struct case_data *cd)
{
    mem_free(cd->x);
    mem_free(cd->w);
    mem_free(cd->wf);
    mem_free(cd->bias);
}

// Runs rows [i0, i0 + m) of the case on provider p, the weight's `alt` set to
// alt; y [m, n].
static enum vllmc_status run_provider_alt(struct backend *be, const struct op_provider *p,
                                          const struct case_data *cd, int64_t i0, int64_t m,
                                          float *y, bool with_bias, const void *alt)
{
    struct tensor tx, tw, ty, tb;
    tensor_init_2d(&tx, DTYPE_F32, cd->x + i0 * cd->k, cd->k, m);
    tensor_init_2d(&tw, cd->t, cd->w, cd->k, cd->n);
    tw.alt = alt;
    tensor_init_2d(&ty, DTYPE_F32, y, cd->n, m);
    tensor_init_1d(&tb, DTYPE_F32, cd->bias, cd->n);
    struct op_call c = {.op = OP_MATMUL, .dst = &ty, .src = {&tx, &tw, with_bias ? &tb : NULL},
                        .backend = be};
    CHECK(p->supports(&c));
    return p->run(&c);
}

static enum vllmc_status run_provider(struct backend *be, const struct op_provider *p,
                                      const struct case_data *cd, int64_t i0, int64_t m, float *y,
                                      bool with_bias)
{
    return run_provider_alt(be, p, cd, i0, m, y, with_bias, NULL);
}

static void check_against_exact(struct backend *be, const struct op_provider *p, enum dtype t,
                                int64_t m, int64_t n, int64_t k)
{
    struct case_data cd;
    case_init(&cd, t, m, n, k);
    float *y = mem_alloc_aligned(64, (size_t)(m * n) * sizeof(float)); // rows of 16 k floats: lines
    CHECK_EQ_INT(run_provider(be, p, &cd, 0, m, y, true), VLLMC_OK);
    int n_bad = 0;
    double worst = 0.0; // largest error as a fraction of the bound
    for (int64_t i = 0; i < m; i++) {
        const float *x = cd.x + i * k;
        for (int64_t j = 0; j < n; j++) {
            const float *w = cd.wf + j * k;
            double exact = cd.bias[j], bound = 0.0, mag = 0.0;
            for (int64_t b = 0; b < k / 32; b++) {
                double amax = 0.0, wabs = 0.0;
                for (int64_t l = 32 * b; l < 32 * b + 32; l++) {
                    exact += (double)w[l] * x[l];
                    amax = fmax(amax, fabs(x[l]));
                    wabs += fabs(w[l]);
                    mag += fabs((double)w[l] * x[l]);
                }
                bound += amax / 254.0 * wabs;
            }
            bound += 1e-5 * mag + 1e-6;
            double err = fabs(y[i * n + j] - exact);
            worst = fmax(worst, err / bound);
            if (err > bound && n_bad++ < 5)
                fprintf(stderr, "%s %s m=%lld: y[%lld][%lld] = %.7g, exact %.7g, bound %.3g\n",
                        p->name, dtype_name(t), (long long)m, (long long)i, (long long)j,
                        (double)y[i * n + j], exact, bound);
        }
    }
    CHECK_EQ_INT(n_bad, 0);
    printf("  %s %s m=%lld n=%lld k=%lld: worst error / bound = %.3f\n", p->name, dtype_name(t),
           (long long)m, (long long)n, (long long)k, worst);

    // Batch invariance: each row alone gives the same bits as in the batch.
    float *y1 = mem_alloc((size_t)n * sizeof(float));
    int n_diff = 0;
    for (int64_t i = 0; i < m; i++) {
        CHECK_EQ_INT(run_provider(be, p, &cd, i, 1, y1, true), VLLMC_OK);
        if (memcmp(y1, y + i * n, (size_t)n * sizeof(float)))
            n_diff++;
    }
    CHECK_EQ_INT(n_diff, 0);
    mem_free(y1);
    mem_free(y);
    case_free(&cd);
}

static const enum dtype all_types[] = {DTYPE_Q4_0,   DTYPE_Q4_1, DTYPE_Q5_0, DTYPE_Q5_1,
                                       DTYPE_Q8_0,   DTYPE_Q2_K, DTYPE_Q3_K, DTYPE_Q4_K,
                                       DTYPE_Q5_K,   DTYPE_Q6_K, DTYPE_IQ4_NL, DTYPE_IQ4_XS};

// Token counts that cover groups of 16 tokens: one full, one short, one and a
// pair, and a short last group after a pair.
static void check_groups(struct backend *be, const struct op_provider *p, enum dtype t)
{
    check_against_exact(be, p, t, 16, 19, 256);
    check_against_exact(be, p, t, 17, 33, 512);
    check_against_exact(be, p, t, 40, 18, 768);
}

// A CPU backend of 2 threads without the providers named in disable (NULL: none).
static struct backend *cpu_backend_2(const char *disable)
{
    struct backend_options o;
    backend_options_default(&o);
    o.n_threads = 2;
    o.disable = disable;
    struct backend *be = NULL;
    struct err err = {0};
    CHECK_EQ_INT(backend_create("cpu", &o, &be, &err), VLLMC_OK);
    return be;
}

// Whether cpu-q-gemm-avx512 can run here; says so when not.
static bool have_avx512_vnni(void)
{
    const struct cpu_features *f = cpu_features_get();
    if (f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni)
        return true;
    printf("  no AVX-512 VNNI on this CPU: skipped\n");
    return false;
}

static void check_isa(const struct op_provider *p, const struct qmm_isa *isa)
{
    struct backend *be = cpu_backend_2(NULL);
    int n_types = 0;
    for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++) {
        if (!qmm_has_type(isa, all_types[i]))
            continue;
        n_types++;
        check_against_exact(be, p, all_types[i], 7, 37, 512);
        check_against_exact(be, p, all_types[i], 1, 64, 1024);
        check_against_exact(be, p, all_types[i], 3, 20, 256); // sections of the act row unaligned
        check_against_exact(be, p, all_types[i], 13, 21, 768); // full and short tiles of tokens
    }
    printf("  %s: %d types\n", p->name, n_types);
    backend_free(be);
}

static void test_qgemm_avx512(void)
{
    if (!have_avx512_vnni())
        return;
    struct backend *be = cpu_backend_2(NULL);
    const struct op_provider *p = &cpu_qgemm_avx512_matmul;
    static const enum dtype types[] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q4_K, DTYPE_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        check_against_exact(be, p, types[i], 7, 37, 512);
        check_against_exact(be, p, types[i], 1, 64, 1024);
        check_against_exact(be, p, types[i], 3, 20, 256);
        check_against_exact(be, p, types[i], 13, 21, 768);
        check_against_exact(be, p, types[i], 2, 9, 256);   // decode kernel, 2 and 4 tokens
        check_against_exact(be, p, types[i], 4, 23, 512);
        // A lone token's rows read as streams of several rows each, and a short tail.
        check_against_exact(be, p, types[i], 5, 300, 512);
        check_groups(be, p, types[i]);
        // Outputs past 2 MiB: with rows on whole lines the panels stream past
        // the caches; with rows off them (and a last panel of 8 rows) not.
        check_against_exact(be, p, types[i], 40, 13200, 256);
        check_against_exact(be, p, types[i], 40, 13208, 256);
    }
    backend_free(be);
}

// The 16-row groups of a weight (qgemm_groups_make, made at load for Q4_K):
// every token count (the decode kernel's 1-4, the tiles' groups of 16) gives
// the same bits from the groups as from the packed rows, and a copy that
// describes another weight is not read.
static void check_groups_alt(struct backend *be, const struct op_provider *p, enum dtype t,
                             int64_t n, int64_t k)
{
    struct case_data cd, other;
    static const int64_t ms[] = {1, 2, 3, 4, 5, 16, 17, 40};
    case_init(&cd, t, 40, n, k);
    case_init(&other, t, 40, n, k);
    struct tensor tw;
    tensor_init_2d(&tw, t, cd.w, k, n);
    void *alt = NULL, *alt_other = NULL;
    CHECK_EQ_INT(qgemm_groups_make(&qgemm_isa_avx512, be->pool, &tw, &alt), VLLMC_OK);
    tensor_init_2d(&tw, t, other.w, k, n);
    CHECK_EQ_INT(qgemm_groups_make(&qgemm_isa_avx512, NULL, &tw, &alt_other), VLLMC_OK);
    CHECK(alt != NULL && alt_other != NULL);
    float *y0 = mem_alloc_aligned(64, (size_t)(40 * n) * sizeof(float));
    float *y1 = mem_alloc_aligned(64, (size_t)(40 * n) * sizeof(float));
    int n_diff = 0;
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        for (int bias = 0; bias < 2; bias++) {
            CHECK_EQ_INT(run_provider_alt(be, p, &cd, 0, ms[i], y0, bias, NULL), VLLMC_OK);
            CHECK_EQ_INT(run_provider_alt(be, p, &cd, 0, ms[i], y1, bias, alt), VLLMC_OK);
            if (memcmp(y0, y1, (size_t)(ms[i] * n) * sizeof(float)))
                n_diff++;
            // Another weight's groups: ignored, the packed rows are read.
            CHECK_EQ_INT(run_provider_alt(be, p, &cd, 0, ms[i], y1, bias, alt_other), VLLMC_OK);
            if (memcmp(y0, y1, (size_t)(ms[i] * n) * sizeof(float)))
                n_diff++;
        }
    }
    CHECK_EQ_INT(n_diff, 0);
    // The groups' unpack (for tile units that take panels) gives the packed
    // rows' panel: the values, the scales and (Q4_K) the mins.
    const struct qgemm_kernel *kern = NULL;
    for (int i = 0; i < qgemm_isa_avx512.n_kernels; i++)
        if (qgemm_isa_avx512.kernels[i].dtype == t)
            kern = &qgemm_isa_avx512.kernels[i];
    CHECK(kern && kern->group_unpack);
    size_t prb = qgemm_panel_row_bytes(k), ns = (size_t)(k / kern->sb);
    uint8_t *pa = mem_calloc(QGEMM_PANEL, prb), *pb = mem_calloc(QGEMM_PANEL, prb);
    const uint8_t *groups = (const uint8_t *)alt + 64; // past the head
    size_t rb = dtype_row_bytes(t, k);
    for (int64_t g = 0; g<n / QGEMM_PANEL; g += n / QGEMM_PANEL> 1 ? n / QGEMM_PANEL - 1 : 1) {
        kern->group_unpack(
            groups + (size_t)g * (size_t)(k / kern->k_multiple) * kern->group_sb_bytes, k, pa, prb);
        for (int r = 0; r < QGEMM_PANEL; r++)
            kern->unpack(cd.w + (size_t)(g * QGEMM_PANEL + r) * rb, k, pb + (size_t)r * prb);
        for (int r = 0; r < QGEMM_PANEL; r++) {
            const uint8_t *ra = pa + (size_t)r * prb, *rb_ = pb + (size_t)r * prb;
            if (memcmp(ra, rb_, (size_t)k))
                fprintf(stderr, "%s n=%lld k=%lld group %lld row %d: values differ\n",
                        dtype_name(t), (long long)n, (long long)k, (long long)g, r);
            CHECK(!memcmp(ra, rb_, (size_t)k));
            CHECK(!memcmp(ra + qgemm_panel_ws_off(k), rb_ + qgemm_panel_ws_off(k), ns * 4));
            if (t == DTYPE_Q4_K)
                CHECK(!memcmp(ra + qgemm_panel_wm_off(k), rb_ + qgemm_panel_wm_off(k), ns * 4));
        }
    }
    mem_free(pa);
    mem_free(pb);
    printf("  %s %s groups n=%lld k=%lld: the same bits at 1-40 tokens, the same panels\n", p->name,
           dtype_name(t), (long long)n, (long long)k);
    mem_free(y0);
    mem_free(y1);
    mem_free(alt);
    mem_free(alt_other);
    case_free(&cd);
    case_free(&other);
}

static void test_qgemm_avx512_groups(void)
{
    if (!have_avx512_vnni())
        return;
    struct backend *be = cpu_backend_2(NULL);
    const struct op_provider *p = &cpu_qgemm_avx512_matmul;
    check_groups_alt(be, p, DTYPE_Q4_K, 16, 256);
    check_groups_alt(be, p, DTYPE_Q4_K, 48, 1024);
    check_groups_alt(be, p, DTYPE_Q4_K, 96, 3072);
    check_groups_alt(be, p, DTYPE_Q4_K, 1040, 512); // more groups than a thread's runs
    check_groups_alt(be, p, DTYPE_Q6_K, 16, 256);
    check_groups_alt(be, p, DTYPE_Q6_K, 48, 1024);
    check_groups_alt(be, p, DTYPE_Q6_K, 96, 3072);
    check_groups_alt(be, p, DTYPE_Q6_K, 1040, 512);
    check_groups_alt(be, p, DTYPE_Q8_0, 16, 128);
    check_groups_alt(be, p, DTYPE_Q8_0, 48, 1024);
    check_groups_alt(be, p, DTYPE_Q8_0, 96, 3072);
    check_groups_alt(be, p, DTYPE_Q8_0, 1040, 512);
    check_groups_alt(be, p, DTYPE_Q4_0, 16, 128);
    check_groups_alt(be, p, DTYPE_Q4_0, 48, 1024);
    check_groups_alt(be, p, DTYPE_Q4_0, 96, 3072);
    check_groups_alt(be, p, DTYPE_Q4_0, 1040, 512);

    // What gets no groups: rows not a multiple of 16, a type without them.
    struct case_data cd;
    struct tensor tw;
    void *alt = (void *)1;
    case_init(&cd, DTYPE_Q4_K, 1, 24, 256);
    tensor_init_2d(&tw, DTYPE_Q4_K, cd.w, 256, 24);
    CHECK_EQ_INT(qgemm_groups_make(&qgemm_isa_avx512, be->pool, &tw, &alt), VLLMC_OK);
    CHECK(alt == NULL);
    case_free(&cd);
    case_init(&cd, DTYPE_Q5_0, 1, 32, 256);
    tensor_init_2d(&tw, DTYPE_Q5_0, cd.w, 256, 32);
    alt = (void *)1;
    CHECK_EQ_INT(qgemm_groups_make(&qgemm_isa_avx512, be->pool, &tw, &alt), VLLMC_OK);
    CHECK(alt == NULL);
    case_free(&cd);

    // The backend's hook gives a Q4_K matrix its groups, and none once the
    // provider is disabled.
    case_init(&cd, DTYPE_Q4_K, 1, 32, 256);
    tensor_init_2d(&tw, DTYPE_Q4_K, cd.w, 256, 32);
    CHECK_EQ_INT(backend_prepare_weight(be, &tw, &alt), VLLMC_OK);
    CHECK(alt != NULL);
    mem_free(alt);
    backend_free(be);
    be = cpu_backend_2("cpu-q-gemm-avx512");
    CHECK_EQ_INT(backend_prepare_weight(be, &tw, &alt), VLLMC_OK);
    CHECK(alt == NULL);
    case_free(&cd);
    backend_free(be);
}

static void test_avx2(void)
{
    if (!cpu_features_get()->avx2 || !cpu_features_get()->fma) {
        printf("  no AVX2 on this CPU: skipped\n");
        return;
    }
    check_isa(&cpu_q_avx2_matmul, &qmm_isa_avx2);
}

static void test_avx512(void)
{
    if (!have_avx512_vnni())
        return;
    check_isa(&cpu_q_avx512_matmul, &qmm_isa_avx512);
}

// The gate takes the fast types at block-aligned k and leaves the rest to cpu-ref.
static void test_selection(void)
{
    struct backend *be = NULL;
    struct err err = {0};
    CHECK_EQ_INT(backend_create("cpu", NULL, &be, &err), VLLMC_OK);
    static uint8_t wbuf[64 * 256];
    static float x[256], y[64];
    struct tensor tx, tw, ty;
    struct op_call c = {.op = OP_MATMUL, .dst = &ty, .src = {&tx, &tw}, .backend = be};
    const struct op_provider *p;
    bool fast = cpu_features_get()->avx2;

    tensor_init_2d(&tx, DTYPE_F32, x, 256, 1);
    tensor_init_2d(&ty, DTYPE_F32, y, 64, 1);
    tensor_init_2d(&tw, DTYPE_Q4_K, wbuf, 256, 64);
    p = backend_select_provider(be, &c);
    CHECK(p && (!fast || !strncmp(p->name, "cpu-q-", 6)));

    tensor_init_2d(&tw, DTYPE_IQ2_XXS, wbuf, 256, 64); // no kernel at all
    p = backend_select_provider(be, &c);
    CHECK(p == NULL);

    tensor_init_2d(&tx, DTYPE_F32, x, 96, 1); // k = 96: not a multiple of 64
    tensor_init_2d(&tw, DTYPE_Q4_0, wbuf, 96, 64);
    p = backend_select_provider(be, &c);
    CHECK(p && !strcmp(p->name, "cpu-ref"));
    backend_free(be);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"avx2", test_avx2},
        {"avx512", test_avx512},
        {"qgemm_avx512", test_qgemm_avx512},
        {"qgemm_avx512_groups", test_qgemm_avx512_groups},
        {"selection", test_selection},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
