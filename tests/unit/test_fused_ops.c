// The fused ops of the forward pass against the split ops they replace:
// qkv_rope_store against rope / qk_norm_rope on q and k followed by kv_store,
// and the packed silu_mul against silu_mul over separate gate and up, for
// cpu-ref and for whichever CPU provider the backend selects. The results
// must be equal bit for bit: the fused forward pass relies on it. The
// reference matmul_silu_mul and norm_matmul are checked against formulas.
#include <math.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "backend/backend_impl.h"
#include "backend/cpu/ref/ref.h"
#include "check.h"
#include "core/alloc.h"

static float frand(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

// Runs c on p (NULL: the backend's selection) after the contract check.
static enum vllmc_status run_op(struct backend *be, const struct op_provider *p, struct op_call *c)
{
    c->backend = be;
    if (!p)
        return backend_run_op(be, c);
    struct err err = {0};
    enum vllmc_status rc = op_check(c, &err);
    if (rc) {
        fprintf(stderr, "op_check: %s\n", err.msg);
        return rc;
    }
    CHECK(p->supports(c));
    return p->run(c);
}

struct qkv_shape {
    int n_tokens, n_heads, n_kv_heads, head_dim, rope_dim;
    bool neox, norm;
};

// One shape and cache dtype: fused (provider fused, NULL = selected) against
// the split ops (split_rope, split_norm_rope, split_store; NULL = selected).
static void check_qkv_rope_store(struct backend *be, const struct qkv_shape *s, enum dtype cache_t,
                                 const struct op_provider *fused,
                                 const struct op_provider *split_rope,
                                 const struct op_provider *split_norm_rope,
                                 const struct op_provider *split_store)
{
    enum { BS = 4, NB = 8 };
    const int T = s->n_tokens, H = s->n_heads, KVH = s->n_kv_heads, D = s->head_dim;
    const int W = (H + 2 * KVH) * D;
    unsigned st = (unsigned)(T * 131 + H * 17 + KVH * 5 + D + s->rope_dim + s->neox + 2 * s->norm);
    float *qkv = mem_alloc((size_t)T * W * sizeof(float));
    float *q_fused = mem_alloc((size_t)T * H * D * sizeof(float));
    float *q = mem_alloc((size_t)T * H * D * sizeof(float));
    float *k = mem_alloc((size_t)T * KVH * D * sizeof(float));
    float *v = mem_alloc((size_t)T * KVH * D * sizeof(float));
    float *inv_freq = mem_alloc((size_t)(s->rope_dim / 2) * sizeof(float));
    float *wq = mem_alloc((size_t)D * sizeof(float)), *wk = mem_alloc((size_t)D * sizeof(float));
    size_t cache_bytes = (size_t)NB * BS * KVH * D * dtype_info(cache_t)->type_size;
    uint8_t *kc[2] = {mem_calloc(1, cache_bytes), mem_calloc(1, cache_bytes)};
    uint8_t *vc[2] = {mem_calloc(1, cache_bytes), mem_calloc(1, cache_bytes)};
    int32_t pos[16], slots[16];
    VLLMC_ASSERT(T <= 16);
    for (int i = 0; i < T * W; i++)
        qkv[i] = frand(&st) * 2.0f;
    for (int i = 0; i < D; i++) {
        wq[i] = 0.5f + frand(&st) * 0.25f;
        wk[i] = 1.0f + frand(&st) * 0.25f;
    }
    for (int i = 0; i < s->rope_dim / 2; i++)
        inv_freq[i] = powf(10000.0f, -2.0f * (float)i / (float)s->rope_dim);
    for (int t = 0; t < T; t++) {
        pos[t] = 3 + 97 * t;
        slots[t] = t % 3 == 1 ? -1 : (t * 5 + 2) % (BS * NB);
    }

    struct tensor t_qkv, t_q, t_pos, t_freq, t_wq, t_wk, t_kc[2], t_vc[2], t_slots;
    tensor_init_2d(&t_qkv, DTYPE_F32, qkv, W, T);
    tensor_init_3d(&t_q, DTYPE_F32, q_fused, D, H, T);
    tensor_init_1d(&t_pos, DTYPE_I32, pos, T);
    tensor_init_1d(&t_freq, DTYPE_F32, inv_freq, s->rope_dim / 2);
    tensor_init_1d(&t_wq, DTYPE_F32, wq, D);
    tensor_init_1d(&t_wk, DTYPE_F32, wk, D);
    tensor_init_1d(&t_slots, DTYPE_I32, slots, T);
    for (int i = 0; i < 2; i++) {
        tensor_init(&t_kc[i], cache_t, kc[i], 4, (int64_t[]){D, KVH, BS, NB});
        tensor_init(&t_vc[i], cache_t, vc[i], 4, (int64_t[]){D, KVH, BS, NB});
    }
    struct op_params p = {.eps = 1e-6f, .rope_dim = s->rope_dim, .rope_neox = s->neox};
    struct op_call c = {.op = OP_QKV_ROPE_STORE,
                        .dst = &t_q,
                        .src = {&t_qkv, &t_pos, &t_freq, s->norm ? &t_wq : NULL,
                                s->norm ? &t_wk : NULL, &t_kc[0], &t_vc[0], &t_slots},
                        .p = p};
    CHECK_EQ_INT(run_op(be, fused, &c), VLLMC_OK);

    // The split path: q, k, v out of the qkv rows, rope each, store k and v.
    for (int t = 0; t < T; t++) {
        memcpy(q + (size_t)t * H * D, qkv + (size_t)t * W, (size_t)H * D * sizeof(float));
        memcpy(k + (size_t)t * KVH * D, qkv + (size_t)t * W + H * D,
               (size_t)KVH * D * sizeof(float));
        memcpy(v + (size_t)t * KVH * D, qkv + (size_t)t * W + (H + KVH) * D,
               (size_t)KVH * D * sizeof(float));
    }
    struct tensor t_q3, t_k3, t_v3;
    tensor_init_3d(&t_q3, DTYPE_F32, q, D, H, T);
    tensor_init_3d(&t_k3, DTYPE_F32, k, D, KVH, T);
    tensor_init_3d(&t_v3, DTYPE_F32, v, D, KVH, T);
    const struct op_provider *rp = s->norm ? split_norm_rope : split_rope;
    struct op_call rq = {.op = s->norm ? OP_QK_NORM_ROPE : OP_ROPE,
                         .dst = &t_q3,
                         .src = {&t_pos, &t_freq, s->norm ? &t_wq : NULL},
                         .p = p};
    struct op_call rk = rq;
    rk.dst = &t_k3;
    rk.src[2] = s->norm ? &t_wk : NULL;
    struct op_call store = {.op = OP_KV_STORE, .src = {&t_k3, &t_v3, &t_kc[1], &t_vc[1], &t_slots}};
    CHECK_EQ_INT(run_op(be, rp, &rq), VLLMC_OK);
    CHECK_EQ_INT(run_op(be, rp, &rk), VLLMC_OK);
    CHECK_EQ_INT(run_op(be, split_store, &store), VLLMC_OK);

    bool same = !memcmp(q, q_fused, (size_t)T * H * D * sizeof(float)) &&
                !memcmp(kc[0], kc[1], cache_bytes) && !memcmp(vc[0], vc[1], cache_bytes);
    if (!same)
        fprintf(stderr, "  differs: T=%d H=%d KVH=%d D=%d rope_dim=%d %s%s cache=%s via %s\n", T, H,
                KVH, D, s->rope_dim, s->neox ? "neox" : "pairs", s->norm ? " qk_norm" : "",
                dtype_name(cache_t), fused ? fused->name : "selection");
    CHECK(same);
    // Something was written: the skipped slots stay zero, the others not.
    int n_nonzero = 0;
    for (size_t i = 0; i < cache_bytes; i++)
        n_nonzero += vc[0][i] != 0;
    CHECK(n_nonzero > 0);

    mem_free(qkv);
    mem_free(q_fused);
    mem_free(q);
    mem_free(k);
    mem_free(v);
    mem_free(inv_freq);
    mem_free(wq);
    mem_free(wk);
    for (int i = 0; i < 2; i++) {
        mem_free(kc[i]);
        mem_free(vc[i]);
    }
}

static const struct qkv_shape qkv_shapes[] = {
    {1, 4, 2, 64, 64, true, true},  {5, 3, 1, 128, 128, true, false},
    {3, 2, 2, 80, 32, false, true}, {7, 8, 2, 64, 48, true, true},
    {2, 1, 1, 10, 6, false, false}, {4, 6, 2, 256, 256, false, true},
    {9, 5, 5, 96, 64, true, false}, {3, 16, 8, 128, 128, true, true},
    {6, 6, 6, 8, 8, false, false},  {2, 12, 4, 64, 64, false, true},
};
#define N_QKV_SHAPES (sizeof qkv_shapes / sizeof qkv_shapes[0])
static const enum dtype cache_types[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};

static struct backend *cpu_backend(void)
{
    struct backend_options o;
    backend_options_default(&o);
    o.n_threads = 2;
    o.disable = "";
    struct backend *be = NULL;
    struct err err = {0};
    CHECK_EQ_INT(backend_create("cpu", &o, &be, &err), VLLMC_OK);
    return be;
}

static void test_qkv_rope_store_ref(void)
{
    struct backend *be = cpu_backend();
    for (size_t i = 0; i < N_QKV_SHAPES; i++)
        for (size_t ct = 0; ct < 3; ct++)
            check_qkv_rope_store(be, &qkv_shapes[i], cache_types[ct], &cpu_ref_qkv_rope_store,
                                 &cpu_ref_rope, &cpu_ref_qk_norm_rope, &cpu_ref_kv_store);
    backend_free(be);
}

// The providers the backend picks for the fused op and for the split ops
// agree bit for bit (the fused forward pass's exactness on the CPU).
static void test_qkv_rope_store_selected(void)
{
    struct backend *be = cpu_backend();
    for (size_t i = 0; i < N_QKV_SHAPES; i++)
        for (size_t ct = 0; ct < 3; ct++)
            check_qkv_rope_store(be, &qkv_shapes[i], cache_types[ct], NULL, NULL, NULL, NULL);
    backend_free(be);
}

static void test_qkv_rope_store_errors(void)
{
    struct backend *be = cpu_backend();
    float qkv[4 * 8] = {0}, q[2 * 8] = {0}, f[4] = {1, 1, 1, 1}, kc[2 * 4 * 8], vc[2 * 4 * 8];
    int32_t pos[1] = {0}, slots[1] = {8};
    struct tensor t_qkv, t_q, t_pos, t_f, t_kc, t_vc, t_s;
    tensor_init_2d(&t_qkv, DTYPE_F32, qkv, 4 * 8, 1);
    tensor_init_3d(&t_q, DTYPE_F32, q, 8, 2, 1);
    tensor_init_1d(&t_pos, DTYPE_I32, pos, 1);
    tensor_init_1d(&t_f, DTYPE_F32, f, 4);
    tensor_init(&t_kc, DTYPE_F32, kc, 4, (int64_t[]){8, 1, 4, 2});
    tensor_init(&t_vc, DTYPE_F32, vc, 4, (int64_t[]){8, 1, 4, 2});
    tensor_init_1d(&t_s, DTYPE_I32, slots, 1);
    struct op_call c = {.op = OP_QKV_ROPE_STORE,
                        .dst = &t_q,
                        .src = {&t_qkv, &t_pos, &t_f, NULL, NULL, &t_kc, &t_vc, &t_s},
                        .p.rope_dim = 8};
    // slot 8 is outside the 2 blocks of 4
    CHECK_EQ_INT(backend_run_op(be, &c), VLLMC_ERR_INVALID_ARG);
    slots[0] = 7;
    CHECK_EQ_INT(backend_run_op(be, &c), VLLMC_OK);
    // qkv must be (n_heads + 2 n_kv_heads) head_dim wide
    tensor_init_2d(&t_qkv, DTYPE_F32, qkv, 3 * 8, 1);
    CHECK_EQ_INT(backend_run_op(be, &c), VLLMC_ERR_INVALID_ARG);
    tensor_init_2d(&t_qkv, DTYPE_F32, qkv, 4 * 8, 1);
    // one norm weight without the other
    c.src[3] = &t_f;
    CHECK_EQ_INT(backend_run_op(be, &c), VLLMC_ERR_INVALID_ARG);
    backend_free(be);
}

// silu_mul over one packed gate|up row against separate gate and up.
static void check_silu_mul_packed(struct backend *be, const struct op_provider *p, int rows, int ff)
{
    unsigned st = (unsigned)(rows * 7 + ff);
    float *gu = mem_alloc((size_t)rows * 2 * ff * sizeof(float));
    float *g = mem_alloc((size_t)rows * ff * sizeof(float));
    float *u = mem_alloc((size_t)rows * ff * sizeof(float));
    float *y0 = mem_alloc((size_t)rows * ff * sizeof(float));
    float *y1 = mem_alloc((size_t)rows * ff * sizeof(float));
    for (int i = 0; i < rows * 2 * ff; i++)
        gu[i] = frand(&st) * 6.0f;
    for (int r = 0; r < rows; r++) {
        memcpy(g + (size_t)r * ff, gu + (size_t)r * 2 * ff, (size_t)ff * sizeof(float));
        memcpy(u + (size_t)r * ff, gu + (size_t)r * 2 * ff + ff, (size_t)ff * sizeof(float));
    }
    struct tensor t_gu, t_g, t_u, t_y0, t_y1;
    tensor_init_2d(&t_gu, DTYPE_F32, gu, 2 * ff, rows);
    tensor_init_2d(&t_g, DTYPE_F32, g, ff, rows);
    tensor_init_2d(&t_u, DTYPE_F32, u, ff, rows);
    tensor_init_2d(&t_y0, DTYPE_F32, y0, ff, rows);
    tensor_init_2d(&t_y1, DTYPE_F32, y1, ff, rows);
    struct op_call packed = {.op = OP_SILU_MUL, .dst = &t_y0, .src = {&t_gu}};
    struct op_call split = {.op = OP_SILU_MUL, .dst = &t_y1, .src = {&t_g, &t_u}};
    CHECK_EQ_INT(run_op(be, p, &packed), VLLMC_OK);
    CHECK_EQ_INT(run_op(be, p, &split), VLLMC_OK);
    CHECK(!memcmp(y0, y1, (size_t)rows * ff * sizeof(float)));
    // spot check against the formula
    CHECK_NEAR(y0[0], gu[0] / (1.0 + exp(-(double)gu[0])) * gu[ff], 1e-5, 1e-5);
    mem_free(gu);
    mem_free(g);
    mem_free(u);
    mem_free(y0);
    mem_free(y1);
}

static void test_silu_mul_packed(void)
{
    struct backend *be = cpu_backend();
    static const int shapes[][2] = {{1, 3}, {4, 13}, {3, 64}, {5, 1024}, {2, 2819}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        check_silu_mul_packed(be, &cpu_ref_silu_mul, shapes[i][0], shapes[i][1]);
        check_silu_mul_packed(be, NULL, shapes[i][0], shapes[i][1]);
    }
    // a packed input must be twice as wide as dst
    float a[6] = {0}, y[2];
    struct tensor ta, ty;
    tensor_init_2d(&ta, DTYPE_F32, a, 6, 1);
    tensor_init_2d(&ty, DTYPE_F32, y, 2, 1);
    struct op_call c = {.op = OP_SILU_MUL, .dst = &ty, .src = {&ta}};
    CHECK_EQ_INT(backend_run_op(be, &c), VLLMC_ERR_INVALID_ARG);
    backend_free(be);
}

// cpu-ref matmul_silu_mul against the formula in double precision, and bit
// for bit against cpu-ref matmul followed by the packed silu_mul.
static void test_matmul_silu_mul_ref(void)
{
    enum { M = 3, FF = 5, K = 7 };
    unsigned st = 99;
    float x[M * K], w[2 * FF * K], y[M * FF], gu[M * 2 * FF], y2[M * FF];
    for (int i = 0; i < M * K; i++)
        x[i] = frand(&st);
    for (int i = 0; i < 2 * FF * K; i++)
        w[i] = frand(&st);
    struct tensor tx, tw, ty, tgu, ty2;
    tensor_init_2d(&tx, DTYPE_F32, x, K, M);
    tensor_init_2d(&tw, DTYPE_F32, w, K, 2 * FF);
    tensor_init_2d(&ty, DTYPE_F32, y, FF, M);
    tensor_init_2d(&tgu, DTYPE_F32, gu, 2 * FF, M);
    tensor_init_2d(&ty2, DTYPE_F32, y2, FF, M);
    struct backend *be = cpu_backend();
    struct op_call c = {.op = OP_MATMUL_SILU_MUL, .dst = &ty, .src = {&tx, &tw}};
    CHECK_EQ_INT(run_op(be, &cpu_ref_matmul_silu_mul, &c), VLLMC_OK);
    for (int t = 0; t < M; t++)
        for (int j = 0; j < FF; j++) {
            double g = 0, u = 0;
            for (int l = 0; l < K; l++) {
                g += (double)x[t * K + l] * w[j * K + l];
                u += (double)x[t * K + l] * w[(FF + j) * K + l];
            }
            CHECK_NEAR(y[t * FF + j], g / (1.0 + exp(-g)) * u, 1e-5, 1e-5);
        }
    struct op_call mm = {.op = OP_MATMUL, .dst = &tgu, .src = {&tx, &tw}};
    struct op_call silu = {.op = OP_SILU_MUL, .dst = &ty2, .src = {&tgu}};
    CHECK_EQ_INT(run_op(be, &cpu_ref_matmul, &mm), VLLMC_OK);
    CHECK_EQ_INT(run_op(be, &cpu_ref_silu_mul, &silu), VLLMC_OK);
    CHECK(!memcmp(y, y2, sizeof y));
    // W must hold 2 ff rows
    tensor_init_2d(&tw, DTYPE_F32, w, K, 2 * FF - 1);
    CHECK_EQ_INT(backend_run_op(be, &c), VLLMC_ERR_INVALID_ARG);
    backend_free(be);
}

// cpu-ref norm_matmul against the formula in double precision (the residual
// add, the sum it writes, the norm, the bias; the SiLU-mul variant), and the
// contract: a sum that overlaps x, a sum without add, a bias with silu_mul.
static void test_norm_matmul_ref(void)
{
    enum { M = 2, N = 5, K = 8 };
    unsigned st = 7;
    float x[M * K], a[M * K], nw[K], w[2 * N * K], bias[N], y[M * N], sum[M * K];
    for (int i = 0; i < M * K; i++) {
        x[i] = frand(&st);
        a[i] = frand(&st);
    }
    for (int i = 0; i < K; i++)
        nw[i] = 1.0f + frand(&st);
    for (int i = 0; i < 2 * N * K; i++)
        w[i] = frand(&st);
    for (int i = 0; i < N; i++)
        bias[i] = frand(&st);
    const float eps = 1e-5f;
    struct tensor tx, ta, tn, tw, tb, ty, ts;
    tensor_init_2d(&tx, DTYPE_F32, x, K, M);
    tensor_init_2d(&ta, DTYPE_F32, a, K, M);
    tensor_init_1d(&tn, DTYPE_F32, nw, K);
    tensor_init_1d(&tb, DTYPE_F32, bias, N);
    tensor_init_2d(&ts, DTYPE_F32, sum, K, M);
    struct backend *be = cpu_backend();
    for (int silu = 0; silu < 2; silu++) {
        tensor_init_2d(&tw, DTYPE_F32, w, K, silu ? 2 * N : N);
        tensor_init_2d(&ty, DTYPE_F32, y, N, M);
        struct op_call c = {.op = OP_NORM_MATMUL,
                            .dst = &ty,
                            .src = {&tx, &ta, &tn, &tw, silu ? NULL : &tb, &ts},
                            .p = {.eps = eps, .silu_mul = silu}};
        CHECK_EQ_INT(run_op(be, &cpu_ref_norm_matmul, &c), VLLMC_OK);
        for (int t = 0; t < M; t++) {
            double h[K], ss = 0;
            for (int l = 0; l < K; l++) {
                h[l] = (double)x[t * K + l] + a[t * K + l];
                CHECK(sum[t * K + l] == x[t * K + l] + a[t * K + l]);
                ss += h[l] * h[l];
            }
            const double scale = 1.0 / sqrt(ss / K + eps);
            for (int j = 0; j < N; j++) {
                double g = 0, u = 0;
                for (int l = 0; l < K; l++) {
                    g += h[l] * scale * nw[l] * w[j * K + l];
                    u += silu ? h[l] * scale * nw[l] * w[(N + j) * K + l] : 0.0;
                }
                const double want = silu ? g / (1.0 + exp(-g)) * u : g + bias[j];
                CHECK_NEAR(y[t * N + j], want, 1e-5, 1e-5);
            }
        }
    }
    // without add: h is x, and no sum
    tensor_init_2d(&tw, DTYPE_F32, w, K, N);
    struct op_call c = {
        .op = OP_NORM_MATMUL, .dst = &ty, .src = {&tx, NULL, &tn, &tw}, .p.eps = eps};
    CHECK_EQ_INT(run_op(be, &cpu_ref_norm_matmul, &c), VLLMC_OK);
    double ss = 0;
    for (int l = 0; l < K; l++)
        ss += (double)x[l] * x[l];
    double dot = 0;
    for (int l = 0; l < K; l++)
        dot += (double)x[l] / sqrt(ss / K + eps) * nw[l] * w[l];
    CHECK_NEAR(y[0], dot, 1e-5, 1e-5);
    // the contract
    struct op_call bad = c;
    bad.src[5] = &ts; // a sum without add
    CHECK_EQ_INT(backend_run_op(be, &bad), VLLMC_ERR_INVALID_ARG);
    bad.src[1] = &ta;
    bad.src[5] = &tx; // the sum overlaps x
    CHECK_EQ_INT(backend_run_op(be, &bad), VLLMC_ERR_INVALID_ARG);
    bad = c;
    bad.p.silu_mul = true;
    tensor_init_2d(&tw, DTYPE_F32, w, K, 2 * N);
    bad.src[4] = &tb; // silu_mul takes no bias
    CHECK_EQ_INT(backend_run_op(be, &bad), VLLMC_ERR_INVALID_ARG);
    tensor_init_1d(&tn, DTYPE_F32, nw, K - 1); // the norm weight must be [k]
    CHECK_EQ_INT(backend_run_op(be, &c), VLLMC_ERR_INVALID_ARG);
    backend_free(be);
}

// attention with its qkv_rope_store prologue: cpu-ref gives, byte for byte,
// what qkv_rope_store then attention give as two calls; the contract takes
// only a qkv_rope_store into the call's q and cache.
static void test_attention_prologue(void)
{
    enum { H = 2, KVH = 1, D = 8, W = (H + 2 * KVH) * D, BS = 4, NB = 3, CTX = 6 };
    unsigned st = 5;
    float qkv[W], q[2][H * D], out[2][H * D], kc[2][NB * BS * KVH * D], vc[2][NB * BS * KVH * D];
    float inv_freq[D / 2];
    int32_t pos = CTX - 1, tables[2] = {2, 0}, seq_len = CTX, qsl[2] = {0, 1};
    int32_t slot = 0 * BS + (CTX - 1) % BS; // position 5 sits in block tables[1] = 0, row 1
    for (int i = 0; i < W; i++)
        qkv[i] = frand(&st);
    for (int i = 0; i < NB * BS * KVH * D; i++)
        kc[0][i] = kc[1][i] = frand(&st), vc[0][i] = vc[1][i] = frand(&st);
    for (int i = 0; i < D / 2; i++)
        inv_freq[i] = powf(10000.0f, -2.0f * (float)i / (float)D);
    struct tensor tqkv, tpos, tfreq, tslot, tbt, tsl, tqsl, tq[2], tout[2], tkc[2], tvc[2];
    tensor_init_2d(&tqkv, DTYPE_F32, qkv, W, 1);
    tensor_init_1d(&tpos, DTYPE_I32, &pos, 1);
    tensor_init_1d(&tfreq, DTYPE_F32, inv_freq, D / 2);
    tensor_init_1d(&tslot, DTYPE_I32, &slot, 1);
    tensor_init_2d(&tbt, DTYPE_I32, tables, 2, 1);
    tensor_init_1d(&tsl, DTYPE_I32, &seq_len, 1);
    tensor_init_1d(&tqsl, DTYPE_I32, qsl, 2);
    struct op_call pro[2], att[2];
    for (int i = 0; i < 2; i++) {
        tensor_init_3d(&tq[i], DTYPE_F32, q[i], D, H, 1);
        tensor_init_3d(&tout[i], DTYPE_F32, out[i], D, H, 1);
        tensor_init(&tkc[i], DTYPE_F32, kc[i], 4, (int64_t[]){D, KVH, BS, NB});
        tensor_init(&tvc[i], DTYPE_F32, vc[i], 4, (int64_t[]){D, KVH, BS, NB});
        pro[i] =
            (struct op_call){.op = OP_QKV_ROPE_STORE,
                             .dst = &tq[i],
                             .src = {&tqkv, &tpos, &tfreq, NULL, NULL, &tkc[i], &tvc[i], &tslot},
                             .p = {.eps = 1e-6f, .rope_dim = D, .rope_neox = true}};
        att[i] = (struct op_call){.op = OP_ATTENTION,
                                  .dst = &tout[i],
                                  .src = {&tq[i], &tkc[i], &tvc[i], &tbt, &tsl, &tqsl},
                                  .p = {.scale = 0.35f,
                                        .max_seq_len = CTX,
                                        .max_q_len = 1,
                                        .prologue = i == 0 ? &pro[0] : NULL}};
    }
    struct backend *be = cpu_backend();
    CHECK_EQ_INT(run_op(be, &cpu_ref_attention, &att[0]), VLLMC_OK);
    CHECK_EQ_INT(run_op(be, &cpu_ref_qkv_rope_store, &pro[1]), VLLMC_OK);
    CHECK_EQ_INT(run_op(be, &cpu_ref_attention, &att[1]), VLLMC_OK);
    CHECK(!memcmp(q[0], q[1], sizeof q[0]) && !memcmp(out[0], out[1], sizeof out[0]));
    CHECK(!memcmp(kc[0], kc[1], sizeof kc[0]) && !memcmp(vc[0], vc[1], sizeof vc[0]));
    // the new key went to its slot: block 0, row 1
    CHECK(memcmp(&vc[0][1 * KVH * D], &qkv[(H + KVH) * D], D * sizeof(float)) == 0);
    // the CPU's own attention providers leave prologue calls to cpu-ref
    CHECK(backend_select_provider(be, &att[0]) == &cpu_ref_attention);
    // the contract
    struct op_call bad = att[0], bad_pro = pro[0];
    bad.p.prologue = &bad_pro;
    bad_pro.dst = &tq[1]; // another q
    CHECK_EQ_INT(backend_run_op(be, &bad), VLLMC_ERR_INVALID_ARG);
    bad_pro = pro[0];
    bad_pro.src[5] = &tkc[1]; // another cache
    CHECK_EQ_INT(backend_run_op(be, &bad), VLLMC_ERR_INVALID_ARG);
    bad_pro = pro[0];
    bad_pro.op = OP_ROPE;
    CHECK_EQ_INT(backend_run_op(be, &bad), VLLMC_ERR_INVALID_ARG);
    backend_free(be);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"qkv_rope_store_ref", test_qkv_rope_store_ref},
        {"qkv_rope_store_selected", test_qkv_rope_store_selected},
        {"qkv_rope_store_errors", test_qkv_rope_store_errors},
        {"silu_mul_packed", test_silu_mul_packed},
        {"matmul_silu_mul_ref", test_matmul_silu_mul_ref},
        {"norm_matmul_ref", test_norm_matmul_ref},
        {"attention_prologue", test_attention_prologue},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
