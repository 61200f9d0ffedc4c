// Every CUDA op provider against cpu-ref on random inputs over a grid of
// shapes (odd sizes included), by NMSE: <= 1e-6 for f32 paths, <= 5e-4 where
// f16/bf16 enter the arithmetic. Outputs are poisoned with NaN first, so an
// element the kernel forgot fails. Skips (exit 77) on a machine with no GPU.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/quant/quantize.h"
#include "backend/cpu/ref/ref.h"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/matmul.cuh"
#include "check.h"
#include "core/alloc.h"
#include "core/dtype.h"

#define SKIP_CODE 77

static struct backend *cpu, *gpu;
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static float rng_uniform(void) // [-1, 1)
{
    return (float)((double)(rng_next() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

// A tensor with a host copy and a device copy of the same bytes.
struct pair {
    struct tensor h, d;
    size_t n_bytes;
};

static void pair_init(struct pair *p, enum dtype t, int n_dims, const int64_t *ne)
{
    memset(p, 0, sizeof *p);
    CHECK(tensor_init(&p->h, t, NULL, n_dims, ne));
    p->n_bytes = tensor_n_bytes(&p->h);
    p->h.data = mem_alloc(p->n_bytes ? p->n_bytes : 1);
    VLLMC_ASSERT(p->h.data);
    p->d = p->h;
    CHECK_EQ_INT(backend_buffer_alloc(gpu, p->n_bytes, &p->d.data), VLLMC_OK);
    p->d.location = TENSOR_DEVICE;
}

static void pair_free(struct pair *p)
{
    mem_free(p->h.data);
    backend_buffer_free(gpu, p->d.data);
}

static void pair_upload(struct pair *p)
{
    CHECK_EQ_INT(backend_upload(gpu, p->d.data, p->h.data, p->n_bytes), VLLMC_OK);
}

// Random values in [-scale, scale), stored in the pair's dtype.
static void pair_random(struct pair *p, float scale)
{
    int64_t n = tensor_n_elements(&p->h);
    for (int64_t i = 0; i < n; i++) {
        float v = rng_uniform() * scale;
        switch (p->h.dtype) {
        case DTYPE_F16:
            ((uint16_t *)p->h.data)[i] = f32_to_fp16(v);
            break;
        case DTYPE_BF16:
            ((uint16_t *)p->h.data)[i] = f32_to_bf16(v);
            break;
        default:
            ((float *)p->h.data)[i] = v;
            break;
        }
    }
    pair_upload(p);
}

static void pair_poison(struct pair *p)
{
    memset(p->h.data, 0xff, p->n_bytes); // NaN in every float type
    pair_upload(p);
}

static float elem_f32(const struct tensor *t, const void *data, int64_t i)
{
    switch (t->dtype) {
    case DTYPE_F16:
        return fp16_to_f32(((const uint16_t *)data)[i]);
    case DTYPE_BF16:
        return bf16_to_f32(((const uint16_t *)data)[i]);
    default:
        return ((const float *)data)[i];
    }
}

// NMSE of the device copy against the host (reference) copy; NaN anywhere
// makes it infinite.
static double pair_nmse(struct pair *p)
{
    void *got = mem_alloc(p->n_bytes ? p->n_bytes : 1);
    VLLMC_ASSERT(got);
    CHECK_EQ_INT(backend_download(gpu, got, p->d.data, p->n_bytes), VLLMC_OK);
    double num = 0.0, den = 0.0;
    int64_t n = tensor_n_elements(&p->h);
    for (int64_t i = 0; i < n; i++) {
        double a = elem_f32(&p->h, got, i), b = elem_f32(&p->h, p->h.data, i);
        if (isnan(a) || isinf(a)) {
            num = INFINITY;
            break;
        }
        num += (a - b) * (a - b);
        den += b * b;
    }
    mem_free(got);
    return den > 0.0 ? num / den : num;
}

// Runs c once through cpu-ref on host tensors and once through the CUDA
// backend on device tensors. ref/dev give, per slot (0 = dst, 1.. = src),
// the pair to use; both calls share op and params.
static const struct op_provider *run_both(enum op_kind op, struct op_params prm,
                                          struct pair **slots, int n_slots)
{
    struct op_call hc = {.op = op, .p = prm}, dc = {.op = op, .p = prm};
    for (int i = 0; i < n_slots; i++) {
        struct tensor *h = slots[i] ? &slots[i]->h : NULL, *d = slots[i] ? &slots[i]->d : NULL;
        if (i == 0) {
            hc.dst = h;
            dc.dst = d;
        } else {
            hc.src[i - 1] = h;
            dc.src[i - 1] = d;
        }
    }
    size_t n = 0;
    const struct op_provider *const *ps = backend_providers(cpu, &n);
    const struct op_provider *ref = NULL;
    for (size_t i = 0; i < n; i++)
        if (ps[i]->op == op && !strcmp(ps[i]->name, "cpu-ref"))
            ref = ps[i];
    CHECK(ref != NULL);
    if (!ref)
        return NULL;
    hc.backend = cpu;
    CHECK(ref->supports(&hc));
    CHECK_EQ_INT(ref->run(&hc), VLLMC_OK);
    const struct op_provider *sel = backend_select_provider(gpu, &dc);
    CHECK(sel != NULL);
    enum vllmc_status rc = backend_run_op(gpu, &dc);
    if (rc)
        fprintf(stderr, "  cuda: %s\n", backend_err(gpu)->msg);
    CHECK_EQ_INT(rc, VLLMC_OK);
    CHECK_EQ_INT(backend_sync(gpu), VLLMC_OK);
    return sel;
}

static double bar_for(enum dtype t)
{
    return t == DTYPE_F32 ? 1e-6 : 5e-4;
}

static void report(const char *what, double nmse, double bar)
{
    printf("%-60s nmse=%.3g bar=%.0e %s\n", what, nmse, bar, nmse <= bar ? "ok" : "FAIL");
    CHECK(nmse <= bar);
}

static const enum dtype float_types[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};

// ---- cases ----

static void test_embedding(void)
{
    const int64_t shapes[][3] = {{1000, 4096, 7}, {37, 67, 1}, {5, 1, 3}}; // vocab, dim, tokens
    for (size_t s = 0; s < 3; s++)
        for (size_t t = 0; t < 3; t++) {
            struct pair table, ids, dst;
            int64_t ne_t[2] = {shapes[s][1], shapes[s][0]}, ne_i[1] = {shapes[s][2]};
            int64_t ne_d[2] = {shapes[s][1], shapes[s][2]};
            pair_init(&table, float_types[t], 2, ne_t);
            pair_init(&ids, DTYPE_I32, 1, ne_i);
            pair_init(&dst, DTYPE_F32, 2, ne_d);
            pair_random(&table, 1.0f);
            for (int64_t i = 0; i < ne_i[0]; i++)
                ((int32_t *)ids.h.data)[i] = (int32_t)(rng_next() % (uint64_t)shapes[s][0]);
            pair_upload(&ids);
            pair_poison(&dst);
            struct pair *slots[] = {&dst, &table, &ids};
            run_both(OP_EMBEDDING, (struct op_params){0}, slots, 3);
            char what[128];
            snprintf(what, sizeof what, "embedding vocab=%lld dim=%lld n=%lld %s",
                     (long long)shapes[s][0], (long long)shapes[s][1], (long long)shapes[s][2],
                     dtype_name(float_types[t]));
            report(what, pair_nmse(&dst), 1e-6);
            pair_free(&table);
            pair_free(&ids);
            pair_free(&dst);
        }
}

static void test_norms(void)
{
    const int64_t shapes[][2] = {{1, 1024}, {5, 4096}, {33, 67}, {3, 1}}; // rows, dim
    for (int fused = 0; fused < 2; fused++)
        for (size_t s = 0; s < 4; s++)
            for (size_t t = 0; t < 3; t++) {
                struct pair x, w, dst, res;
                int64_t ne_x[2] = {shapes[s][1], shapes[s][0]}, ne_w[1] = {shapes[s][1]};
                pair_init(&x, DTYPE_F32, 2, ne_x);
                pair_init(&w, float_types[t], 1, ne_w);
                pair_init(&dst, DTYPE_F32, 2, ne_x);
                pair_init(&res, DTYPE_F32, 2, ne_x);
                pair_random(&x, 3.0f);
                pair_random(&w, 1.0f);
                pair_random(&res, 3.0f);
                pair_poison(&dst);
                struct pair *slots[] = {&dst, &x, &w, fused ? &res : NULL};
                struct op_params prm = {.eps = 1e-6f};
                run_both(fused ? OP_ADD_RMSNORM : OP_RMSNORM, prm, slots, fused ? 4 : 3);
                char what[128];
                snprintf(what, sizeof what, "%s n=%lld dim=%lld w=%s",
                         fused ? "add_rmsnorm" : "rmsnorm", (long long)shapes[s][0],
                         (long long)shapes[s][1], dtype_name(float_types[t]));
                report(what, pair_nmse(&dst), 1e-6);
                if (fused)
                    report("  residual", pair_nmse(&res), 1e-6);
                pair_free(&x);
                pair_free(&w);
                pair_free(&dst);
                pair_free(&res);
            }
}

// want_provider, when not NULL, is the provider the shape must select.
static void test_matmul_one(int64_t m, int64_t n, int64_t k, enum dtype wt, bool bias,
                            const char *disable_note, const char *want_provider)
{
    struct pair x, w, b, dst;
    int64_t ne_x[2] = {k, m}, ne_w[2] = {k, n}, ne_b[1] = {n}, ne_d[2] = {n, m};
    pair_init(&x, DTYPE_F32, 2, ne_x);
    pair_init(&w, wt, 2, ne_w);
    pair_init(&b, DTYPE_F32, 1, ne_b);
    pair_init(&dst, DTYPE_F32, 2, ne_d);
    pair_random(&x, 1.0f);
    pair_random(&w, 0.5f);
    pair_random(&b, 1.0f);
    pair_poison(&dst);
    struct pair *slots[] = {&dst, &x, &w, bias ? &b : NULL};
    struct op_call probe = {.op = OP_MATMUL, .dst = &dst.d, .src = {&x.d, &w.d, bias ? &b.d : NULL}};
    const struct op_provider *p = backend_select_provider(gpu, &probe);
    if (want_provider)
        CHECK(p && !strcmp(p->name, want_provider));
    run_both(OP_MATMUL, (struct op_params){0}, slots, 4);
    char what[160];
    snprintf(what, sizeof what, "matmul m=%lld n=%lld k=%lld w=%s%s %s%s", (long long)m,
             (long long)n, (long long)k, dtype_name(wt), bias ? " bias" : "",
             p ? p->name : "none", disable_note);
    // cuBLASLt rounds the activations to the weight dtype; the rest is exact f32.
    double bar = p && !strcmp(p->name, "cublaslt") ? bar_for(wt) : 1e-6;
    report(what, pair_nmse(&dst), bar);
    pair_free(&x);
    pair_free(&w);
    pair_free(&b);
    pair_free(&dst);
}

static void test_matmul(void)
{
    const int64_t ms[] = {1, 2, 3, 5, 8, 9, 17, 33, 64, 100, 130};
    const int64_t nk[][2] = {{1024, 1024}, {67, 40}, {1000, 2048}, {33, 37}};
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t t = 0; t < 3; t++)
                test_matmul_one(ms[a], nk[b][0], nk[b][1], float_types[t], (a + b + t) % 2, "",
                                NULL);
}

// The tensor-core decode GEMM (cuda-mma) at every token tile (m up to 16,
// 32, 64, 128), both row tilings, pipeline depths and one or two warps along
// each tile's k, with k split across a
// cluster (o and down projections of a 0.6B shape: 16 blocks of rows) and not
// (many rows), odd n and k, bias or none; then the settings it found again.
static void test_matmul_mma(void)
{
    const int64_t shapes[][3] = {{64, 1024, 3072}, {64, 4096, 1024}, {33, 1000, 2048},
                                 {17, 6144, 1024}, {128, 520, 1024}, {100, 67, 40},
                                 {9, 300, 4104},   {2, 4096, 4096}};
    const int settings[][4] = {{128, 0, 0, 0}, {128, 1, 3, 1}, {128, 2, 4, 2}, {128, 2, 3, 1}};
    const int saved_max_m = cuda_mma_gemm_max_m();
    const int64_t saved_max_bytes = cuda_mma_gemm_max_weight_bytes();
    cuda_mma_gemm_set_max_weight_bytes(0);
    for (size_t c = 0; c < sizeof settings / sizeof settings[0]; c++) {
        cuda_mma_gemm_set(settings[c][0], settings[c][1], settings[c][2], settings[c][3]);
        char note[48];
        snprintf(note, sizeof note, " (rt=%d stages=%d wk=%d)", settings[c][1], settings[c][2],
                 settings[c][3]);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            test_matmul_one(shapes[s][0], shapes[s][1], shapes[s][2], DTYPE_BF16, (s + c) % 2, note,
                            "cuda-mma");
    }
    cuda_mma_gemm_set(saved_max_m, 0, 0, 0);
    cuda_mma_gemm_set_max_weight_bytes(saved_max_bytes);
    // The default gate: up to 16 tokens of a matrix of at most 16 MiB (a 0.6B
    // layer's); more tokens, or an 8B layer's 32 MiB o projection, go to
    // cuBLASLt.
    test_matmul_one(16, 1000, 2048, DTYPE_BF16, true, " (default gate)", "cuda-mma");
    test_matmul_one(12, 6144, 1024, DTYPE_BF16, false, " (default gate)", "cuda-mma");
    test_matmul_one(17, 1000, 2048, DTYPE_BF16, false, " (default gate)", "cublaslt");
    test_matmul_one(16, 4096, 4096, DTYPE_BF16, false, " (default gate)", "cublaslt");
}

// AWQ/GPTQ int4g weights (random rows through the test quantizer), with and
// without an act-order permutation of the inputs.
static void test_int4g_one(int64_t m, int64_t n, int64_t k, bool with_perm, bool bias)
{
    struct pair x, w, b, dst, perm;
    int64_t ne_x[2] = {k, m}, ne_w[2] = {k, n}, ne_b[1] = {n}, ne_d[2] = {n, m}, ne_p[1] = {k};
    pair_init(&x, DTYPE_F32, 2, ne_x);
    pair_init(&w, DTYPE_INT4G, 2, ne_w);
    pair_init(&b, DTYPE_F32, 1, ne_b);
    pair_init(&dst, DTYPE_F32, 2, ne_d);
    pair_init(&perm, DTYPE_I32, 1, ne_p);
    pair_random(&x, 1.0f);
    pair_random(&b, 1.0f);
    pair_poison(&dst);
    float *row = mem_alloc((size_t)k * sizeof(float));
    for (int64_t r = 0; r < n; r++) {
        for (int64_t i = 0; i < k; i++)
            row[i] = rng_uniform() * 0.5f;
        quantize_row_int4g(row, (char *)w.h.data + (size_t)r * w.h.nb[1], k);
    }
    mem_free(row);
    pair_upload(&w);
    int32_t *pv = perm.h.data;
    for (int64_t i = 0; i < k; i++)
        pv[i] = (int32_t)i;
    for (int64_t i = k - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_next() % (uint64_t)(i + 1));
        int32_t t = pv[i];
        pv[i] = pv[j];
        pv[j] = t;
    }
    pair_upload(&perm);
    struct pair *slots[] = {&dst, &x, &w, bias ? &b : NULL, with_perm ? &perm : NULL};
    struct op_call probe = {.op = OP_MATMUL,
                            .dst = &dst.d,
                            .src = {&x.d, &w.d, bias ? &b.d : NULL, with_perm ? &perm.d : NULL}};
    const struct op_provider *p = backend_select_provider(gpu, &probe);
    run_both(OP_MATMUL, (struct op_params){0}, slots, 5);
    char what[160];
    snprintf(what, sizeof what, "matmul m=%lld n=%lld k=%lld w=int4g%s%s %s", (long long)m,
             (long long)n, (long long)k, with_perm ? " perm" : "", bias ? " bias" : "",
             p ? p->name : "none");
    // The GEMV sums in f32; the prefill path runs cuBLASLt on bf16 weights.
    double bar = p && !strcmp(p->name, "cuda-int4g-gemv") ? 1e-6 : 5e-4;
    CHECK(p && !strncmp(p->name, "cuda-int4g-", 11));
    report(what, pair_nmse(&dst), bar);
    pair_free(&x);
    pair_free(&w);
    pair_free(&b);
    pair_free(&dst);
    pair_free(&perm);
}

static void test_int4g(void)
{
    const int64_t ms[] = {1, 2, 8, 9, 64};
    const int64_t nk[][2] = {{1024, 4096}, {96, 256}, {40, 160}};
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < 3; b++)
            for (int perm = 0; perm < 2; perm++)
                test_int4g_one(ms[a], nk[b][0], nk[b][1], perm, (a + b + (size_t)perm) % 2);
}

static void rope_inv_freq(struct pair *f, int rope_dim)
{
    for (int i = 0; i < rope_dim / 2; i++)
        ((float *)f->h.data)[i] = powf(1000000.0f, -2.0f * (float)i / (float)rope_dim);
    pair_upload(f);
}

static void test_rope(void)
{
    const int shapes[][4] = {{3, 4, 128, 128}, {7, 2, 64, 32}, {1, 16, 128, 128}, {5, 3, 80, 80}};
    for (int qk = 0; qk < 2; qk++)
        for (int neox = 0; neox < 2; neox++)
            for (size_t s = 0; s < 4; s++) {
                const int nt = shapes[s][0], nh = shapes[s][1], hd = shapes[s][2];
                const int rd = shapes[s][3];
                struct pair x, pos, freq, w;
                int64_t ne_x[3] = {hd, nh, nt}, ne_p[1] = {nt}, ne_f[1] = {rd / 2},
                        ne_w[1] = {hd};
                pair_init(&x, DTYPE_F32, 3, ne_x);
                pair_init(&pos, DTYPE_I32, 1, ne_p);
                pair_init(&freq, DTYPE_F32, 1, ne_f);
                pair_init(&w, DTYPE_BF16, 1, ne_w);
                pair_random(&x, 2.0f);
                pair_random(&w, 1.0f);
                for (int i = 0; i < nt; i++)
                    ((int32_t *)pos.h.data)[i] = (int32_t)(rng_next() % 40000);
                pair_upload(&pos);
                rope_inv_freq(&freq, rd);
                struct pair *slots[] = {&x, &pos, &freq, qk ? &w : NULL};
                struct op_params prm = {.eps = 1e-6f, .rope_dim = rd, .rope_neox = neox};
                run_both(qk ? OP_QK_NORM_ROPE : OP_ROPE, prm, slots, qk ? 4 : 3);
                char what[128];
                snprintf(what, sizeof what, "%s n=%d heads=%d head_dim=%d rope_dim=%d %s",
                         qk ? "qk_norm_rope" : "rope", nt, nh, hd, rd, neox ? "neox" : "pairs");
                report(what, pair_nmse(&x), 1e-6);
                pair_free(&x);
                pair_free(&pos);
                pair_free(&freq);
                pair_free(&w);
            }
}

static void test_elementwise(void)
{
    const int64_t shapes[][2] = {{5, 3000}, {1, 11}, {70000, 3}};
    for (int op = 0; op < 2; op++)
        for (size_t s = 0; s < 3; s++) {
            struct pair a, b, dst;
            int64_t ne[2] = {shapes[s][1], shapes[s][0]};
            pair_init(&a, DTYPE_F32, 2, ne);
            pair_init(&b, DTYPE_F32, 2, ne);
            pair_init(&dst, DTYPE_F32, 2, ne);
            pair_random(&a, 6.0f);
            pair_random(&b, 2.0f);
            pair_poison(&dst);
            struct pair *slots[] = {&dst, &a, &b};
            run_both(op ? OP_ADD : OP_SILU_MUL, (struct op_params){0}, slots, 3);
            char what[128];
            snprintf(what, sizeof what, "%s n=%lld dim=%lld", op ? "add" : "silu_mul",
                     (long long)shapes[s][0], (long long)shapes[s][1]);
            report(what, pair_nmse(&dst), 1e-6);
            pair_free(&a);
            pair_free(&b);
            pair_free(&dst);
        }
}

// The fused gate|up decode GEMV with SiLU (one and two tokens), against
// cpu-ref's matmul + silu_mul; three tokens are left to the matmul.
static void test_matmul_silu_mul(void)
{
    const int64_t fk[][2] = {{3072, 1024}, {17, 64}, {1000, 2048}, {300, 40}};
    for (int64_t m = 1; m <= 3; m++)
        for (size_t s = 0; s < 4; s++)
            for (size_t t = 0; t < 3; t++) {
                const int64_t ff = fk[s][0], k = fk[s][1];
                struct pair x, w, dst;
                int64_t ne_x[2] = {k, m}, ne_w[2] = {k, 2 * ff}, ne_d[2] = {ff, m};
                pair_init(&x, DTYPE_F32, 2, ne_x);
                pair_init(&w, float_types[t], 2, ne_w);
                pair_init(&dst, DTYPE_F32, 2, ne_d);
                pair_random(&x, 1.0f);
                pair_random(&w, 0.5f);
                pair_poison(&dst);
                struct op_call probe = {.op = OP_MATMUL_SILU_MUL, .dst = &dst.d,
                                        .src = {&x.d, &w.d}};
                const struct op_provider *p = backend_select_provider(gpu, &probe);
                if (m == 3) {
                    CHECK(p == NULL);
                } else {
                    struct pair *slots[] = {&dst, &x, &w};
                    run_both(OP_MATMUL_SILU_MUL, (struct op_params){0}, slots, 3);
                    char what[160];
                    snprintf(what, sizeof what, "matmul_silu_mul m=%lld ff=%lld k=%lld w=%s %s",
                             (long long)m, (long long)ff, (long long)k,
                             dtype_name(float_types[t]), p ? p->name : "none");
                    report(what, pair_nmse(&dst), 1e-6);
                }
                pair_free(&x);
                pair_free(&w);
                pair_free(&dst);
            }
}

// The norm staged inside the decode GEMVs (NORM_MATMUL, one token): dst
// against cpu-ref's add, rmsnorm and matmul (or matmul_silu_mul), and the sum
// written for the next residual bit for bit. Two tokens, or a shape where the
// one-warp-per-row GEMV is not the kernel, are declined (the forward pass then
// runs the norm and the matmul).
static void test_norm_matmul(void)
{
    // n (ff with silu_mul), k, silu_mul
    const int64_t cases[][3] = {{4096, 1024, 0}, {3072, 1024, 1}, {1000, 2048, 0}, {37, 64, 1},
                                {6144, 4096, 0}, {300, 4096, 1},  {520, 4096, 0},  {33, 96, 0}};
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++)
        for (size_t t = 0; t < 3; t++)
            for (int variant = 0; variant < 3; variant++) {
                const int64_t n = cases[s][0], k = cases[s][1];
                const bool silu = cases[s][2], add = variant != 1, bias = !silu && variant == 2;
                const int64_t m = variant == 0 && s == 0 ? 2 : 1;
                const enum dtype nw_type = variant == 2 ? DTYPE_BF16 : DTYPE_F32;
                struct pair x, a, nw, w, b, dst, sum;
                int64_t ne_x[2] = {k, m}, ne_nw[1] = {k}, ne_w[2] = {k, silu ? 2 * n : n},
                        ne_b[1] = {n}, ne_d[2] = {n, m};
                pair_init(&x, DTYPE_F32, 2, ne_x);
                pair_init(&a, DTYPE_F32, 2, ne_x);
                pair_init(&nw, nw_type, 1, ne_nw);
                pair_init(&w, float_types[t], 2, ne_w);
                pair_init(&b, DTYPE_F32, 1, ne_b);
                pair_init(&dst, DTYPE_F32, 2, ne_d);
                pair_init(&sum, DTYPE_F32, 2, ne_x);
                pair_random(&x, 2.0f);
                pair_random(&a, 1.0f);
                pair_random(&nw, 1.5f);
                pair_random(&w, 0.5f);
                pair_random(&b, 0.5f);
                pair_poison(&dst);
                pair_poison(&sum);
                struct pair *slots[] = {
                    &dst, &x, add ? &a : NULL, &nw, &w, bias ? &b : NULL, add ? &sum : NULL};
                const struct op_params prm = {.eps = 1e-6f, .silu_mul = silu};
                struct op_call probe = {.op = OP_NORM_MATMUL, .dst = &dst.d, .p = prm};
                for (int i = 1; i < 7; i++)
                    probe.src[i - 1] = slots[i] ? &slots[i]->d : NULL;
                const struct op_provider *p = backend_select_provider(gpu, &probe);
                char what[160];
                snprintf(what, sizeof what, "norm_matmul m=%lld n=%lld k=%lld w=%s%s%s%s%s",
                         (long long)m, (long long)n, (long long)k, dtype_name(float_types[t]),
                         add ? " add" : "", bias ? " bias" : "", silu ? " silu_mul" : "",
                         nw_type == DTYPE_BF16 ? " norm=bf16" : "");
                if (m == 2 || (!silu && n < 2048 && k > 2048)) {
                    printf("%-60s declined\n", what);
                    CHECK(p == NULL);
                } else {
                    const struct op_provider *sel = run_both(OP_NORM_MATMUL, prm, slots, 7);
                    CHECK(sel &&
                          !strcmp(sel->name, silu ? "cuda-norm-gemv-silu" : "cuda-norm-gemv"));
                    report(what, pair_nmse(&dst), 1e-6);
                    if (add)
                        report("  its sum x + add", pair_nmse(&sum), 0.0);
                }
                pair_free(&x);
                pair_free(&a);
                pair_free(&nw);
                pair_free(&w);
                pair_free(&b);
                pair_free(&dst);
                pair_free(&sum);
            }
}

// Whether the first n bytes at two device tensors are the same bits.
static bool device_same(const struct tensor *a, const struct tensor *b, size_t n)
{
    void *ha = mem_alloc(n), *hb = mem_alloc(n);
    VLLMC_ASSERT(ha && hb);
    CHECK_EQ_INT(backend_download(gpu, ha, a->data, n), VLLMC_OK);
    CHECK_EQ_INT(backend_download(gpu, hb, b->data, n), VLLMC_OK);
    const bool same = !memcmp(ha, hb, n);
    mem_free(ha);
    mem_free(hb);
    return same;
}

// A bf16 GEMM right after the RMSNorm (fused add or not) or SiLU-mul that
// wrote its activations takes them already split into bf16 terms from that
// op, once a GEMM has split that buffer itself: its output must equal, bit
// for bit, the same GEMM over a copy of the activations (which it splits
// itself: an upload drops any handoff), and the handoff must have happened.
// m = 100 takes the stacked [hi; lo] GEMM, m = 300 two accumulating ones.
// An f16 GEMM (wt DTYPE_F16) takes one f16 term the same way.
static void test_split_handoff_m(int64_t m, enum dtype wt)
{
    const int64_t k = 1024, n = 520;
    struct pair a, b, res, wn, x, w, out, xc, outc;
    int64_t ne_x[2] = {k, m}, ne_wn[1] = {k}, ne_w[2] = {k, n}, ne_o[2] = {n, m};
    pair_init(&a, DTYPE_F32, 2, ne_x);
    pair_init(&b, DTYPE_F32, 2, ne_x);
    pair_init(&res, DTYPE_F32, 2, ne_x);
    pair_init(&wn, DTYPE_BF16, 1, ne_wn);
    pair_init(&x, DTYPE_F32, 2, ne_x);
    pair_init(&w, wt, 2, ne_w);
    pair_init(&out, DTYPE_F32, 2, ne_o);
    pair_init(&xc, DTYPE_F32, 2, ne_x);
    pair_init(&outc, DTYPE_F32, 2, ne_o);
    pair_random(&a, 2.0f);
    pair_random(&b, 2.0f);
    pair_random(&res, 2.0f);
    pair_random(&wn, 1.0f);
    pair_random(&w, 0.5f);
    // A first GEMM over x splits it itself, which tells the ops that write x
    // to hand its terms over from then on.
    struct op_call prime_norm = {
        .op = OP_RMSNORM, .p = {.eps = 1e-6f}, .dst = &x.d, .src = {&a.d, &wn.d}};
    struct op_call prime_mm = {.op = OP_MATMUL, .dst = &out.d, .src = {&x.d, &w.d}};
    CHECK_EQ_INT(backend_run_op(gpu, &prime_norm), VLLMC_OK);
    CHECK_EQ_INT(backend_run_op(gpu, &prime_mm), VLLMC_OK);
    for (int producer = 0; producer < 3; producer++) {
        struct op_call pc = {
            .op = OP_RMSNORM, .p = {.eps = 1e-6f}, .dst = &x.d, .src = {&a.d, &wn.d}};
        if (producer == 1) {
            pc.op = OP_ADD_RMSNORM;
            pc.src[2] = &res.d;
        } else if (producer == 2) {
            pc = (struct op_call){.op = OP_SILU_MUL, .dst = &x.d, .src = {&a.d, &b.d}};
        }
        struct op_call mc = {.op = OP_MATMUL, .dst = &out.d, .src = {&x.d, &w.d}};
        struct op_call cc = {.op = OP_MATMUL, .dst = &outc.d, .src = {&xc.d, &w.d}};
        uint64_t before = cuda_backend_split_handoffs(gpu);
        CHECK_EQ_INT(backend_run_op(gpu, &pc), VLLMC_OK);
        CHECK_EQ_INT(backend_run_op(gpu, &mc), VLLMC_OK);
        CHECK_EQ_INT(backend_sync(gpu), VLLMC_OK);
        CHECK(cuda_backend_split_handoffs(gpu) == before + 1);
        CHECK_EQ_INT(backend_download(gpu, xc.h.data, x.d.data, x.n_bytes), VLLMC_OK);
        pair_upload(&xc);
        CHECK_EQ_INT(backend_run_op(gpu, &cc), VLLMC_OK);
        CHECK_EQ_INT(backend_sync(gpu), VLLMC_OK);
        CHECK(cuda_backend_split_handoffs(gpu) == before + 1); // the copy has no handoff
        const bool same = device_same(&out.d, &outc.d, out.n_bytes);
        printf("split handoff from %s: %s weights m=%lld k=%lld n=%lld %s\n",
               producer == 0   ? "rmsnorm"
               : producer == 1 ? "add_rmsnorm"
                               : "silu_mul",
               dtype_name(wt), (long long)m, (long long)k, (long long)n,
               same ? "identical" : "DIFFERENT");
        CHECK(same);
    }
    struct pair *all[] = {&a, &b, &res, &wn, &x, &w, &out, &xc, &outc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
}

// cuBLASLt's terms: the tensor-core decode GEMM (cuda-mma) reads f32
// activations itself, so it stays off for these.
static void test_split_handoff(void)
{
    const int mma_m = cuda_mma_gemm_max_m();
    cuda_mma_gemm_set(0, 0, 0, 0);
    test_split_handoff_m(100, DTYPE_BF16);
    test_split_handoff_m(300, DTYPE_BF16);
    test_split_handoff_m(100, DTYPE_F16);
    cuda_mma_gemm_set(mma_m, 0, 0, 0);
}

// Device buffers a and b hold the same bytes (n of them).
// A stacked GEMM's sum taken by the op after it (struct cuda_pending_sum):
// the GEMM then ADD_RMSNORM (its dst the GEMM's output, as the forward runs
// it, or another buffer) or the packed SiLU-mul give the same bits as with
// a sync between them, which launches the sum kernel first; the GEMM's own
// output ends the same too, and only the pair without the sync counts a
// handoff. m = 64 takes the stacked [hi; lo] GEMM.
static void sum_handoff_case(int consumer, bool bias)
{
    const int64_t m = 64, k = 1024, n = consumer == 2 ? 1040 : 1024;
    struct pair x, w, b, wn, res, res2, y, y2, o, o2;
    int64_t ne_x[2] = {k, m}, ne_w[2] = {k, n}, ne_b[1] = {n}, ne_wn[1] = {n}, ne_y[2] = {n, m},
            ne_o[2] = {consumer == 2 ? n / 2 : n, m};
    pair_init(&x, DTYPE_F32, 2, ne_x);
    pair_init(&w, DTYPE_BF16, 2, ne_w);
    pair_init(&b, DTYPE_F32, 1, ne_b);
    pair_init(&wn, DTYPE_BF16, 1, ne_wn);
    pair_init(&res, DTYPE_F32, 2, ne_y);
    pair_init(&res2, DTYPE_F32, 2, ne_y);
    pair_init(&y, DTYPE_F32, 2, ne_y);
    pair_init(&y2, DTYPE_F32, 2, ne_y);
    pair_init(&o, DTYPE_F32, 2, ne_o);
    pair_init(&o2, DTYPE_F32, 2, ne_o);
    pair_random(&x, 2.0f);
    pair_random(&w, 0.5f);
    pair_random(&b, 1.0f);
    pair_random(&wn, 1.0f);
    pair_random(&res, 2.0f);
    memcpy(res2.h.data, res.h.data, res.n_bytes);
    pair_upload(&res2);
    uint64_t taken[2];
    for (int run = 0; run < 2; run++) { // run 1: a sync between the two ops
        struct pair *yy = run ? &y2 : &y, *oo = run ? &o2 : &o, *rr = run ? &res2 : &res;
        struct op_call mc = {
            .op = OP_MATMUL, .dst = &yy->d, .src = {&x.d, &w.d, bias ? &b.d : NULL}};
        struct op_call cc = {.op = OP_ADD_RMSNORM,
                             .p = {.eps = 1e-6f},
                             .dst = consumer == 0 ? &yy->d : &oo->d,
                             .src = {&yy->d, &wn.d, &rr->d}};
        if (consumer == 2)
            cc = (struct op_call){.op = OP_SILU_MUL, .dst = &oo->d, .src = {&yy->d}};
        const uint64_t before = cuda_backend_sum_handoffs(gpu);
        CHECK_EQ_INT(backend_run_op(gpu, &mc), VLLMC_OK);
        if (run)
            CHECK_EQ_INT(backend_sync(gpu), VLLMC_OK);
        CHECK_EQ_INT(backend_run_op(gpu, &cc), VLLMC_OK);
        CHECK_EQ_INT(backend_sync(gpu), VLLMC_OK);
        taken[run] = cuda_backend_sum_handoffs(gpu) - before;
    }
    const bool same_y = device_same(&y.d, &y2.d, y.n_bytes);
    const bool same_o = consumer == 0 || device_same(&o.d, &o2.d, o.n_bytes);
    const bool same_res = consumer == 2 || device_same(&res.d, &res2.d, res.n_bytes);
    printf("sum handoff to %s%s: m=%lld k=%lld n=%lld taken %llu / %llu, %s\n",
           consumer == 0   ? "add_rmsnorm (in place)"
           : consumer == 1 ? "add_rmsnorm"
                           : "silu_mul (packed)",
           bias ? " with bias" : "", (long long)m, (long long)k, (long long)n,
           (unsigned long long)taken[0], (unsigned long long)taken[1],
           same_y && same_o && same_res ? "identical" : "DIFFERENT");
    CHECK(taken[0] == 1 && taken[1] == 0);
    CHECK(same_y && same_o && same_res);
    struct pair *all[] = {&x, &w, &b, &wn, &res, &res2, &y, &y2, &o, &o2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
}

static void test_sum_handoff(void)
{
    const int mma_m = cuda_mma_gemm_max_m();
    cuda_mma_gemm_set(0, 0, 0, 0);
    for (int consumer = 0; consumer < 3; consumer++)
        for (int bias = 0; bias < 2; bias++)
            sum_handoff_case(consumer, bias);
    cuda_mma_gemm_set(mma_m, 0, 0, 0);
}

// SiLU-mul over one packed gate|up output [n, 2 ff] (the fused gate|up matmul's).
static void test_silu_mul_packed(void)
{
    const int64_t shapes[][2] = {{5, 3000}, {1, 11}, {70000, 3}, {1, 3072}};
    for (size_t s = 0; s < 4; s++) {
        struct pair gu, dst;
        int64_t ne_gu[2] = {2 * shapes[s][1], shapes[s][0]}, ne_d[2] = {shapes[s][1], shapes[s][0]};
        pair_init(&gu, DTYPE_F32, 2, ne_gu);
        pair_init(&dst, DTYPE_F32, 2, ne_d);
        pair_random(&gu, 6.0f);
        pair_poison(&dst);
        struct pair *slots[] = {&dst, &gu};
        run_both(OP_SILU_MUL, (struct op_params){0}, slots, 2);
        char what[128];
        snprintf(what, sizeof what, "silu_mul packed n=%lld ff=%lld", (long long)shapes[s][0],
                 (long long)shapes[s][1]);
        report(what, pair_nmse(&dst), 1e-6);
        pair_free(&gu);
        pair_free(&dst);
    }
}

// The fused post-QKV op: GQA and odd head counts, head_dim 64..256, rope_dim
// below head_dim, both layouts, with and without q/k norm, every cache dtype,
// skipped slots; q is poisoned so an unwritten element fails.
static void test_qkv_rope_store(void)
{
    // n_tokens, n_heads, n_kv_heads, head_dim, rope_dim
    const int shapes[][5] = {{1, 16, 8, 128, 128}, {9, 5, 1, 64, 64},   {3, 6, 2, 256, 256},
                             {7, 3, 3, 80, 32},    {33, 32, 8, 128, 64}, {2, 14, 2, 96, 96},
                             {1, 32, 8, 128, 128}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int variant = 0; variant < 4; variant++) {
            const int nt = shapes[s][0], nh = shapes[s][1], nkv = shapes[s][2];
            const int hd = shapes[s][3], rd = shapes[s][4], nb = 6, bs = 16;
            const bool neox = variant & 1, norm = variant & 2;
            const enum dtype ct = float_types[(s + (size_t)variant) % 3];
            const enum dtype wt = s % 2 ? DTYPE_BF16 : DTYPE_F32;
            struct pair q, qkv, pos, freq, wq, wk, kc, vc, slots_p;
            int64_t ne_q[3] = {hd, nh, nt}, ne_qkv[2] = {(int64_t)(nh + 2 * nkv) * hd, nt};
            int64_t ne_p[1] = {nt}, ne_f[1] = {rd / 2}, ne_w[1] = {hd};
            int64_t ne_c[4] = {hd, nkv, bs, nb};
            pair_init(&q, DTYPE_F32, 3, ne_q);
            pair_init(&qkv, DTYPE_F32, 2, ne_qkv);
            pair_init(&pos, DTYPE_I32, 1, ne_p);
            pair_init(&freq, DTYPE_F32, 1, ne_f);
            pair_init(&wq, wt, 1, ne_w);
            pair_init(&wk, wt, 1, ne_w);
            pair_init(&kc, ct, 4, ne_c);
            pair_init(&vc, ct, 4, ne_c);
            pair_init(&slots_p, DTYPE_I32, 1, ne_p);
            pair_random(&qkv, 2.0f);
            pair_random(&wq, 1.0f);
            pair_random(&wk, 1.0f);
            pair_random(&kc, 1.0f);
            pair_random(&vc, 1.0f);
            pair_poison(&q);
            for (int i = 0; i < nt; i++) {
                ((int32_t *)pos.h.data)[i] = (int32_t)(rng_next() % 40000);
                ((int32_t *)slots_p.h.data)[i] =
                    i % 4 == 3 ? -1 : (int32_t)((i * 7 + 3) % (nb * bs));
            }
            pair_upload(&pos);
            pair_upload(&slots_p);
            rope_inv_freq(&freq, rd);
            struct pair *sl[] = {&q,  &qkv, &pos, &freq, norm ? &wq : NULL, norm ? &wk : NULL,
                                 &kc, &vc,  &slots_p};
            struct op_params prm = {.eps = 1e-6f, .rope_dim = rd, .rope_neox = neox};
            run_both(OP_QKV_ROPE_STORE, prm, sl, 9);
            char what[160];
            snprintf(what, sizeof what,
                     "qkv_rope_store n=%d heads=%d kv=%d head_dim=%d rope_dim=%d %s%s cache=%s", nt,
                     nh, nkv, hd, rd, neox ? "neox" : "pairs", norm ? " qk_norm" : "",
                     dtype_name(ct));
            report(what, pair_nmse(&q), 1e-6);
            report("  k_cache", pair_nmse(&kc), bar_for(ct));
            report("  v_cache", pair_nmse(&vc), bar_for(ct));
            struct pair *all[] = {&q, &qkv, &pos, &freq, &wq, &wk, &kc, &vc, &slots_p};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                pair_free(all[i]);
        }
}

static void test_kv_store(void)
{
    for (size_t t = 0; t < 3; t++) {
        const int nt = 9, nkv = 2, hd = 64, nb = 4, bs = 16;
        struct pair k, v, kc, vc, slots_p;
        int64_t ne_k[3] = {hd, nkv, nt}, ne_c[4] = {hd, nkv, bs, nb}, ne_s[1] = {nt};
        pair_init(&k, DTYPE_F32, 3, ne_k);
        pair_init(&v, DTYPE_F32, 3, ne_k);
        pair_init(&kc, float_types[t], 4, ne_c);
        pair_init(&vc, float_types[t], 4, ne_c);
        pair_init(&slots_p, DTYPE_I32, 1, ne_s);
        pair_random(&k, 1.0f);
        pair_random(&v, 1.0f);
        pair_random(&kc, 1.0f);
        pair_random(&vc, 1.0f);
        for (int i = 0; i < nt; i++)
            ((int32_t *)slots_p.h.data)[i] = i == 4 ? -1 : (int32_t)((i * 7 + 3) % (nb * bs));
        pair_upload(&slots_p);
        struct pair *sl[] = {NULL, &k, &v, &kc, &vc, &slots_p};
        run_both(OP_KV_STORE, (struct op_params){0}, sl, 6);
        char what[128];
        snprintf(what, sizeof what, "kv_store n=%d kv_heads=%d head_dim=%d cache=%s", nt, nkv, hd,
                 dtype_name(float_types[t]));
        report(what, pair_nmse(&kc), 1e-6);
        report("  v_cache", pair_nmse(&vc), 1e-6);
        pair_free(&k);
        pair_free(&v);
        pair_free(&kc);
        pair_free(&vc);
        pair_free(&slots_p);
    }
}

// One attention batch: n_seqs sequences with context ctx[s] of which the last
// q_len[s] tokens are queries (1 = decode, = ctx for a fresh prefill); slots
// in run_both's order (dst, q, k cache, v cache, tables, lengths, starts).
struct att_batch {
    struct pair q, kc, vc, bt, sl, qsl, dst;
    struct op_params prm;
    int n_tokens;
};

static void att_batch_init(struct att_batch *a, int n_heads, int n_kv, int hd, enum dtype ct,
                           int n_seqs, const int *ctx, const int *q_len, bool pass_bounds)
{
    const int bs = 16;
    int n_tokens = 0, max_ctx = 0, max_q = 0;
    for (int s = 0; s < n_seqs; s++) {
        n_tokens += q_len[s];
        if (ctx[s] > max_ctx)
            max_ctx = ctx[s];
        if (q_len[s] > max_q)
            max_q = q_len[s];
    }
    const int max_blocks = (max_ctx + bs - 1) / bs + 1;
    const int nb = n_seqs * max_blocks + 3;
    int64_t ne_q[3] = {hd, n_heads, n_tokens}, ne_c[4] = {hd, n_kv, bs, nb};
    int64_t ne_bt[2] = {max_blocks, n_seqs}, ne_sl[1] = {n_seqs}, ne_qsl[1] = {n_seqs + 1};
    pair_init(&a->q, DTYPE_F32, 3, ne_q);
    pair_init(&a->dst, DTYPE_F32, 3, ne_q);
    pair_init(&a->kc, ct, 4, ne_c);
    pair_init(&a->vc, ct, 4, ne_c);
    pair_init(&a->bt, DTYPE_I32, 2, ne_bt);
    pair_init(&a->sl, DTYPE_I32, 1, ne_sl);
    pair_init(&a->qsl, DTYPE_I32, 1, ne_qsl);
    pair_random(&a->q, 1.0f);
    pair_random(&a->kc, 1.0f);
    pair_random(&a->vc, 1.0f);
    pair_poison(&a->dst);
    // Blocks handed out in a scrambled order, as a block pool would.
    int32_t *tables = a->bt.h.data;
    for (int i = 0; i < n_seqs * max_blocks; i++)
        tables[i] = (int32_t)((i * 5 + 2) % nb);
    int32_t *lens = a->sl.h.data, *starts = a->qsl.h.data;
    starts[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        lens[s] = ctx[s];
        starts[s + 1] = starts[s] + q_len[s];
    }
    pair_upload(&a->bt);
    pair_upload(&a->sl);
    pair_upload(&a->qsl);
    a->prm = (struct op_params){.scale = 1.0f / sqrtf((float)hd)};
    if (pass_bounds) {
        a->prm.max_seq_len = max_ctx;
        a->prm.max_q_len = max_q;
    }
    a->n_tokens = n_tokens;
}

static void att_batch_free(struct att_batch *a)
{
    struct pair *all[] = {&a->q, &a->kc, &a->vc, &a->bt, &a->sl, &a->qsl, &a->dst};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
}

static void attention_case(const char *label, int n_heads, int n_kv, int hd, enum dtype ct,
                           int n_seqs, const int *ctx, const int *q_len, bool pass_bounds)
{
    struct att_batch a;
    att_batch_init(&a, n_heads, n_kv, hd, ct, n_seqs, ctx, q_len, pass_bounds);
    struct pair *slots[] = {&a.dst, &a.q, &a.kc, &a.vc, &a.bt, &a.sl, &a.qsl};
    const struct op_provider *sel = run_both(OP_ATTENTION, a.prm, slots, 7);
    char what[160];
    snprintf(what, sizeof what, "attention %s heads=%d/%d head_dim=%d cache=%s%s %s", label,
             n_heads, n_kv, hd, dtype_name(ct), pass_bounds ? "" : " (no bounds)",
             sel ? sel->name : "");
    // fp32 arithmetic unless the provider rounds operands for tensor cores.
    report(what, pair_nmse(&a.dst), sel && sel->parity_bar > 0 ? sel->parity_bar : 1e-6);
    att_batch_free(&a);
}

// Decode attention with its qkv_rope_store prologue (provider cuda-paged-rope):
// dst, q and both caches against cpu-ref's composition (qkv_rope_store, then
// attention). bad_slot gives sequence 0 a negative slot: nothing is stored
// for it and its attention reads the cache's row, as the two ops would.
static void attention_rope_case(const char *label, int n_heads, int n_kv, int hd, enum dtype ct,
                                int n_seqs, const int *ctx, bool neox, bool qk_norm, bool bad_slot)
{
    int q_len[8];
    VLLMC_ASSERT(n_seqs <= 8);
    for (int i = 0; i < n_seqs; i++)
        q_len[i] = 1;
    struct att_batch a;
    att_batch_init(&a, n_heads, n_kv, hd, ct, n_seqs, ctx, q_len, true);
    const int64_t W = (int64_t)(n_heads + 2 * n_kv) * hd, bs = a.kc.h.ne[2];
    const int64_t max_blocks = a.bt.h.ne[0];
    struct pair qkv, pos, freq, wq, wk, slots;
    int64_t ne_qkv[2] = {W, n_seqs}, ne_t[1] = {n_seqs}, ne_f[1] = {hd / 2}, ne_hd[1] = {hd};
    const enum dtype wt = neox ? DTYPE_BF16 : DTYPE_F32;
    pair_init(&qkv, DTYPE_F32, 2, ne_qkv);
    pair_init(&pos, DTYPE_I32, 1, ne_t);
    pair_init(&freq, DTYPE_F32, 1, ne_f);
    pair_init(&wq, wt, 1, ne_hd);
    pair_init(&wk, wt, 1, ne_hd);
    pair_init(&slots, DTYPE_I32, 1, ne_t);
    pair_random(&qkv, 2.0f);
    pair_random(&wq, 1.0f);
    pair_random(&wk, 1.0f);
    pair_poison(&a.q);
    const int32_t *tables = a.bt.h.data;
    for (int s = 0; s < n_seqs; s++) {
        const int p = ctx[s] - 1; // the new token's position and key
        ((int32_t *)pos.h.data)[s] = p;
        ((int32_t *)slots.h.data)[s] =
            bad_slot && s == 0 ? -1 : (int32_t)(tables[s * max_blocks + p / bs] * bs + p % bs);
    }
    pair_upload(&pos);
    pair_upload(&slots);
    rope_inv_freq(&freq, hd);
    struct op_call pro[2], att[2]; // [0] host, [1] device
    for (int side = 0; side < 2; side++) {
#define T(pr) (side ? &(pr).d : &(pr).h)
        pro[side] = (struct op_call){.op = OP_QKV_ROPE_STORE,
                                     .dst = T(a.q),
                                     .src = {T(qkv), T(pos), T(freq), qk_norm ? T(wq) : NULL,
                                             qk_norm ? T(wk) : NULL, T(a.kc), T(a.vc), T(slots)},
                                     .p = {.eps = 1e-6f, .rope_dim = hd, .rope_neox = neox},
                                     .backend = side ? gpu : cpu};
        att[side] = (struct op_call){.op = OP_ATTENTION,
                                     .dst = T(a.dst),
                                     .src = {T(a.q), T(a.kc), T(a.vc), T(a.bt), T(a.sl), T(a.qsl)},
                                     .p = a.prm,
                                     .backend = side ? gpu : cpu};
        att[side].p.prologue = &pro[side];
#undef T
    }
    const struct op_provider *sel = backend_select_provider(gpu, &att[1]);
    CHECK(sel && !strcmp(sel->name, "cuda-paged-rope"));
    CHECK(cpu_ref_attention.supports(&att[0]));
    CHECK_EQ_INT(cpu_ref_attention.run(&att[0]), VLLMC_OK);
    enum vllmc_status rc = backend_run_op(gpu, &att[1]);
    if (rc)
        fprintf(stderr, "  cuda: %s\n", backend_err(gpu)->msg);
    CHECK_EQ_INT(rc, VLLMC_OK);
    CHECK_EQ_INT(backend_sync(gpu), VLLMC_OK);
    char what[200];
    snprintf(what, sizeof what, "attention+qkv_rope_store %s heads=%d/%d hd=%d cache=%s %s%s%s",
             label, n_heads, n_kv, hd, dtype_name(ct), neox ? "neox" : "pairs",
             qk_norm ? " qk_norm" : "", bad_slot ? " slot -1" : "");
    report(what, pair_nmse(&a.dst), bar_for(ct));
    report("  q", pair_nmse(&a.q), 1e-6);
    report("  k_cache", pair_nmse(&a.kc), bar_for(ct));
    report("  v_cache", pair_nmse(&a.vc), bar_for(ct));
    struct pair *all[] = {&qkv, &pos, &freq, &wq, &wk, &slots};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
    att_batch_free(&a);
}

static void test_attention_rope(void)
{
    static const int ctx1[] = {1}, ctx5[] = {5}, ctx40[] = {40}, ctx100[] = {100}, ctx130[] = {130},
                     ctx600[] = {600}, ctx3[] = {17, 64, 9},
                     ctx8[] = {700, 650, 701, 700, 690, 640, 700, 699};
    for (size_t t = 0; t < 3; t++) {
        const enum dtype ct = float_types[t];
        attention_rope_case("1 x 1", 16, 8, 128, ct, 1, ctx1, true, true, false);
        attention_rope_case("1 x 5", 16, 8, 128, ct, 1, ctx5, true, false, false);
        attention_rope_case("1 x 40", 32, 8, 128, ct, 1, ctx40, true, true, false);
        attention_rope_case("1 x 100", 16, 8, 128, ct, 1, ctx100, false, true, false);
        attention_rope_case("1 x 130", 8, 8, 64, ct, 1, ctx130, true, true, false);
        attention_rope_case("1 x 600", 16, 8, 128, ct, 1, ctx600, true, true, false);
        attention_rope_case("3 seqs", 16, 4, 64, ct, 3, ctx3, false, false, false);
        attention_rope_case("3 seqs", 16, 8, 128, ct, 3, ctx3, true, true, true);
        // long splits: another decode kernel, so the prologue's own kernel runs first
        attention_rope_case("8 x 700", 16, 8, 128, ct, 8, ctx8, true, true, false);
    }
}

// Attention as the producer of the split handoff: the prefill tensor-core
// kernel, the decode split merge and the tensor-core decode kernel with one
// split a sequence write their output's bf16 terms for the
// o projection's GEMM, which reads the output as x [n_tokens, heads x D].
// As in test_split_handoff_m: bit-identical to the GEMM over a copy.
static void split_handoff_attention_case(const char *label, int n_seqs, const int *ctx,
                                         const int *q_len, enum dtype ct)
{
    const int nh = 16, nkv = 8, hd = 128;
    const int64_t k = (int64_t)nh * hd, n = 520;
    struct att_batch a;
    att_batch_init(&a, nh, nkv, hd, ct, n_seqs, ctx, q_len, true);
    struct pair w, out, xc, outc;
    int64_t ne_w[2] = {k, n}, ne_o[2] = {n, a.n_tokens}, ne_x[2] = {k, a.n_tokens};
    pair_init(&w, DTYPE_BF16, 2, ne_w);
    pair_init(&out, DTYPE_F32, 2, ne_o);
    pair_init(&xc, DTYPE_F32, 2, ne_x);
    pair_init(&outc, DTYPE_F32, 2, ne_o);
    pair_random(&w, 0.5f);
    struct tensor x; // the attention output seen as the GEMM's [n_tokens, k]
    CHECK(tensor_init(&x, DTYPE_F32, a.dst.d.data, 2, ne_x));
    x.location = TENSOR_DEVICE;
    struct op_call ac = {.op = OP_ATTENTION,
                         .p = a.prm,
                         .dst = &a.dst.d,
                         .src = {&a.q.d, &a.kc.d, &a.vc.d, &a.bt.d, &a.sl.d, &a.qsl.d}};
    struct op_call mc = {.op = OP_MATMUL, .dst = &out.d, .src = {&x, &w.d}};
    struct op_call cc = {.op = OP_MATMUL, .dst = &outc.d, .src = {&xc.d, &w.d}};
    // The first pair primes: the GEMM splits x itself and asks for its terms.
    for (int round = 0; round < 2; round++) {
        uint64_t before = cuda_backend_split_handoffs(gpu);
        CHECK_EQ_INT(backend_run_op(gpu, &ac), VLLMC_OK);
        CHECK_EQ_INT(backend_run_op(gpu, &mc), VLLMC_OK);
        CHECK_EQ_INT(backend_sync(gpu), VLLMC_OK);
        if (round == 0)
            continue;
        CHECK(cuda_backend_split_handoffs(gpu) == before + 1);
        CHECK_EQ_INT(backend_download(gpu, xc.h.data, x.data, xc.n_bytes), VLLMC_OK);
        pair_upload(&xc);
        CHECK_EQ_INT(backend_run_op(gpu, &cc), VLLMC_OK);
        CHECK_EQ_INT(backend_sync(gpu), VLLMC_OK);
        const bool same = device_same(&out.d, &outc.d, out.n_bytes);
        printf("split handoff from attention %s: tokens=%d cache=%s handoffs +%llu %s\n", label,
               a.n_tokens, dtype_name(ct),
               (unsigned long long)(cuda_backend_split_handoffs(gpu) - before),
               same ? "identical" : "DIFFERENT");
        CHECK(same);
    }
    struct pair *all[] = {&w, &out, &xc, &outc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
    att_batch_free(&a);
}

static void test_split_handoff_attention(void)
{
    // Prefill: one tensor-core pass (300 + 400 queries) and, with a single
    // short sequence, keys split across blocks (the combine kernel writes).
    const int pre_ctx[] = {300, 400}, pre_q[] = {300, 400};
    const int one_ctx[] = {2000}, one_q[] = {40};
    // Decode of 64 sequences of a few hundred keys: one tensor-core split a
    // sequence, which writes the terms itself; with one sequence of 1,143
    // keys, two splits a sequence and the merge writes them.
    int dec_ctx[64], merge_ctx[64], dec_q[64];
    for (int s = 0; s < 64; s++) {
        dec_ctx[s] = merge_ctx[s] = 300 + 37 * s % 500;
        dec_q[s] = 1;
    }
    merge_ctx[5] = 1143;
    const int mma_m = cuda_mma_gemm_max_m();
    cuda_mma_gemm_set(0, 0, 0, 0); // as in test_split_handoff
    for (size_t t = 1; t < 3; t++) {
        split_handoff_attention_case("prefill", 2, pre_ctx, pre_q, float_types[t]);
        split_handoff_attention_case("prefill split keys", 1, one_ctx, one_q, float_types[t]);
        split_handoff_attention_case("decode one split", 64, dec_ctx, dec_q, float_types[t]);
        split_handoff_attention_case("decode merge", 64, merge_ctx, dec_q, float_types[t]);
    }
    cuda_mma_gemm_set(mma_m, 0, 0, 0);
}

static void test_attention(void)
{
    const int heads[][3] = {{16, 8, 128}, {32, 8, 128}, {8, 1, 64}, {20, 1, 80}, {4, 4, 256}};
    const int dec_ctx[] = {1, 17, 300, 1030}, dec_q[] = {1, 1, 1, 1};
    const int pre_ctx[] = {37, 100}, pre_q[] = {37, 100};
    const int mix_ctx[] = {200, 5, 64, 3000}, mix_q[] = {50, 1, 64, 1};
    for (size_t h = 0; h < 5; h++)
        for (size_t t = 0; t < 3; t++) {
            const int nh = heads[h][0], nkv = heads[h][1], hd = heads[h][2];
            attention_case("decode", nh, nkv, hd, float_types[t], 4, dec_ctx, dec_q, true);
            attention_case("prefill", nh, nkv, hd, float_types[t], 2, pre_ctx, pre_q, true);
            attention_case("mixed", nh, nkv, hd, float_types[t], 4, mix_ctx, mix_q, t == 0);
        }
}

// The tensor-core decode kernel wherever it applies (f16/bf16 caches, head_dim
// 64/128), with its tiles loaded straight into registers (stages 1) and
// through shared memory (2 and 3), then with the defaults: 64 sequences of
// a few hundred keys, one split of up to 1024 keys each (two blocks an SM,
// stages 3), and a few sequences, whose splits stay short.
static void test_attention_decode_mma(void)
{
    const int heads[][3] = {{16, 8, 128}, {32, 8, 128}, {8, 1, 64}, {16, 2, 128}};
    const int dec_ctx[] = {1, 17, 300, 1030, 64, 65}, dec_q[] = {1, 1, 1, 1, 1, 1};
    for (int stages = 1; stages <= 3; stages++) {
        cuda_attention_set_decode_mma(2, 256, 3, stages);
        char label[32];
        snprintf(label, sizeof label, "decode mma stages=%d", stages);
        for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++)
            for (size_t t = 1; t < 3; t++)
                attention_case(label, heads[h][0], heads[h][1], heads[h][2], float_types[t], 6,
                               dec_ctx, dec_q, true);
    }
    cuda_attention_set_decode_mma(1, 0, 0, 0); // the defaults
    int one_ctx[64], two_ctx[64], many_q[64];
    for (int s = 0; s < 64; s++) {
        one_ctx[s] = two_ctx[s] = 300 + 37 * s % 500;
        many_q[s] = 1;
    }
    two_ctx[5] = 1143; // two splits a sequence, then the merge
    for (size_t t = 1; t < 3; t++) {
        attention_case("decode mma 64 x one split", 16, 8, 128, float_types[t], 64, one_ctx, many_q,
                       true);
        attention_case("decode mma 64 x two splits", 16, 8, 128, float_types[t], 64, two_ctx,
                       many_q, true);
        attention_case("decode mma defaults", 16, 8, 128, float_types[t], 6, dec_ctx, dec_q, true);
    }
}

int main(int argc, char **argv)
{
    struct err err = {0};
    enum vllmc_status rc = backend_create("cuda", NULL, &gpu, &err);
    if (rc) {
        printf("skip: no CUDA backend here: %s\n", err.msg);
        return SKIP_CODE;
    }
    CHECK_EQ_INT(backend_create("cpu", NULL, &cpu, &err), VLLMC_OK);
    static const struct check_case cases[] = {
        {"embedding", test_embedding},
        {"norms", test_norms},
        {"matmul", test_matmul},
        {"matmul_mma", test_matmul_mma},
        {"rope", test_rope},
        {"elementwise", test_elementwise},
        {"kv_store", test_kv_store},
        {"attention", test_attention},
        {"attention_decode_mma", test_attention_decode_mma},
        {"attention_rope", test_attention_rope},
        {"silu_mul_packed", test_silu_mul_packed},
        {"matmul_silu_mul", test_matmul_silu_mul},
        {"norm_matmul", test_norm_matmul},
        {"qkv_rope_store", test_qkv_rope_store},
        {"split_handoff", test_split_handoff},
        {"split_handoff_attention", test_split_handoff_attention},
        {"sum_handoff", test_sum_handoff},
        {"int4g", test_int4g},
        {NULL, NULL},
    };
    int code = check_run(cases, argc, argv);
    backend_free(cpu);
    backend_free(gpu);
    return code;
}
