// The cpu-ref providers against small hand-worked cases and straightforward
// computations written out in the test (double precision, contiguous data),
// plus batch invariance of whichever CPU provider the backend selects.
#include <math.h>
#include <stdlib.h>

#include "backend/backend_impl.h"
#include "backend/cpu/ref/ref.h"
#include "check.h"

// Runs c on provider p after the contract check, as the registry would.
static enum vllmc_status run_ref(const struct op_provider *p, struct op_call *c)
{
    struct err err = {0};
    enum vllmc_status rc = op_check(c, &err);
    if (rc) {
        fprintf(stderr, "op_check: %s\n", err.msg);
        return rc;
    }
    CHECK(p->supports(c));
    return p->run(c);
}

static float frand(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void test_rmsnorm_hand(void)
{
    float x[2] = {3, 4}, w[2] = {1, 1}, y[2];
    struct tensor tx, tw, ty;
    tensor_init_2d(&tx, DTYPE_F32, x, 2, 1);
    tensor_init_1d(&tw, DTYPE_F32, w, 2);
    tensor_init_2d(&ty, DTYPE_F32, y, 2, 1);
    struct op_call c = {.op = OP_RMSNORM, .dst = &ty, .src = {&tx, &tw}, .p.eps = 0};
    CHECK_EQ_INT(run_ref(&cpu_ref_rmsnorm, &c), VLLMC_OK);
    // mean(x^2) = 12.5, 1/sqrt(12.5) = 0.28284271
    CHECK_NEAR(y[0], 0.848528137, 1e-6, 0);
    CHECK_NEAR(y[1], 1.131370850, 1e-6, 0);

    // bf16 weight [2, 0.5] and eps = 0.5: 1/sqrt(13) = 0.27735010
    uint16_t wb[2] = {f32_to_bf16(2.0f), f32_to_bf16(0.5f)};
    tensor_init_1d(&tw, DTYPE_BF16, wb, 2);
    c.p.eps = 0.5f;
    CHECK_EQ_INT(run_ref(&cpu_ref_rmsnorm, &c), VLLMC_OK);
    CHECK_NEAR(y[0], 1.664100589, 1e-6, 0);
    CHECK_NEAR(y[1], 0.554700196, 1e-6, 0);
}

static void test_add_rmsnorm_hand(void)
{
    // residual [2, 2] + x [1, 2] = [3, 4]; dst aliases x.
    float x[2] = {1, 2}, res[2] = {2, 2}, w[2] = {2, 0.5f};
    struct tensor tx, tw, tr;
    tensor_init_2d(&tx, DTYPE_F32, x, 2, 1);
    tensor_init_1d(&tw, DTYPE_F32, w, 2);
    tensor_init_2d(&tr, DTYPE_F32, res, 2, 1);
    struct op_call c = {.op = OP_ADD_RMSNORM, .dst = &tx, .src = {&tx, &tw, &tr}, .p.eps = 0};
    CHECK_EQ_INT(run_ref(&cpu_ref_add_rmsnorm, &c), VLLMC_OK);
    CHECK_NEAR(res[0], 3, 0, 0);
    CHECK_NEAR(res[1], 4, 0, 0);
    CHECK_NEAR(x[0], 1.697056275, 1e-6, 0);
    CHECK_NEAR(x[1], 0.565685425, 1e-6, 0);
}

static void test_matmul_hand(void)
{
    // x [2, 3] . W^T with W [2, 3] = [[1, 0, -1], [0.5, 0.5, 0.5]], bias [10, 20]
    float x[6] = {1, 2, 3, 4, 5, 6}, wf[6] = {1, 0, -1, 0.5f, 0.5f, 0.5f}, b[2] = {10, 20};
    const float expect[4] = {8, 23, 8, 27.5f};
    enum dtype types[3] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    for (int t = 0; t < 3; t++) {
        uint16_t wh[6];
        for (int i = 0; i < 6; i++)
            wh[i] = types[t] == DTYPE_F16 ? f32_to_fp16(wf[i]) : f32_to_bf16(wf[i]);
        float y[4] = {0};
        struct tensor tx, tw, tb, ty;
        tensor_init_2d(&tx, DTYPE_F32, x, 3, 2);
        tensor_init_2d(&tw, types[t], types[t] == DTYPE_F32 ? (void *)wf : (void *)wh, 3, 2);
        tensor_init_1d(&tb, DTYPE_F32, b, 2);
        tensor_init_2d(&ty, DTYPE_F32, y, 2, 2);
        struct op_call c = {.op = OP_MATMUL, .dst = &ty, .src = {&tx, &tw, &tb}};
        CHECK_EQ_INT(run_ref(&cpu_ref_matmul, &c), VLLMC_OK);
        for (int i = 0; i < 4; i++)
            CHECK_NEAR(y[i], expect[i], 0, 0);
        c.src[2] = NULL;
        CHECK_EQ_INT(run_ref(&cpu_ref_matmul, &c), VLLMC_OK);
        CHECK_NEAR(y[1], 3, 0, 0);
    }
}

static void test_embedding_hand(void)
{
    uint16_t table[3 * 2];
    for (int i = 0; i < 6; i++)
        table[i] = f32_to_fp16((float)i * 0.5f);
    int32_t ids[2] = {2, 0};
    float y[4];
    struct tensor tt, ti, ty;
    tensor_init_2d(&tt, DTYPE_F16, table, 2, 3);
    tensor_init_1d(&ti, DTYPE_I32, ids, 2);
    tensor_init_2d(&ty, DTYPE_F32, y, 2, 2);
    struct op_call c = {.op = OP_EMBEDDING, .dst = &ty, .src = {&tt, &ti}};
    CHECK_EQ_INT(run_ref(&cpu_ref_embedding, &c), VLLMC_OK);
    CHECK_NEAR(y[0], 2.0, 0, 0);
    CHECK_NEAR(y[1], 2.5, 0, 0);
    CHECK_NEAR(y[2], 0.0, 0, 0);
    CHECK_NEAR(y[3], 0.5, 0, 0);
    ids[1] = 3;
    CHECK_EQ_INT(run_ref(&cpu_ref_embedding, &c), VLLMC_ERR_INVALID_ARG);
    ids[1] = -1;
    CHECK_EQ_INT(run_ref(&cpu_ref_embedding, &c), VLLMC_ERR_INVALID_ARG);
}

static void test_select_ids_hand(void)
{
    int32_t ids[5] = {10, 11, 12, 13, 14};
    const int32_t sampled[3] = {700, 701, 702};
    const int32_t index[5] = {-1, 2, -1, 0, -5};
    struct tensor td, tv, ti;
    tensor_init_1d(&td, DTYPE_I32, ids, 5);
    tensor_init_1d(&tv, DTYPE_I32, (void *)sampled, 3);
    tensor_init_1d(&ti, DTYPE_I32, (void *)index, 5);
    struct op_call c = {.op = OP_SELECT_IDS, .dst = &td, .src = {&tv, &ti}};
    CHECK_EQ_INT(run_ref(&cpu_ref_select_ids, &c), VLLMC_OK);
    const int32_t want[5] = {10, 702, 12, 700, 14};
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(ids[i], want[i]);
    // The index must cover dst: a short one is a contract error.
    tensor_init_1d(&ti, DTYPE_I32, (void *)index, 4);
    struct err err = {0};
    CHECK_EQ_INT(op_check(&c, &err), VLLMC_ERR_INVALID_ARG);
}

// Expected RoPE by the textbook formula, in double.
static void rope_expect(double *head, int rope_dim, bool neox, int pos, const float *inv_freq)
{
    int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        double th = (double)pos * inv_freq[i];
        int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        double x0 = head[a], x1 = head[b];
        head[a] = x0 * cos(th) - x1 * sin(th);
        head[b] = x0 * sin(th) + x1 * cos(th);
    }
}

static void check_rope(bool neox, bool with_norm)
{
    enum { T = 3, H = 2, D = 8, RD = 4 };
    float x[T * H * D], inv_freq[RD / 2] = {1.0f, 0.01f}, w[D];
    double expect[T * H * D];
    int32_t pos[T] = {0, 3, 17};
    unsigned seed = 7;
    for (int i = 0; i < T * H * D; i++)
        expect[i] = x[i] = frand(&seed);
    for (int i = 0; i < D; i++)
        w[i] = 0.5f + (float)i * 0.125f;
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
            double *head = expect + (t * H + h) * D;
            if (with_norm) {
                double ss = 0;
                for (int i = 0; i < D; i++)
                    ss += head[i] * head[i];
                double s = 1.0 / sqrt(ss / D + 1e-6);
                for (int i = 0; i < D; i++)
                    head[i] *= s * w[i];
            }
            rope_expect(head, RD, neox, pos[t], inv_freq);
        }
    }
    struct tensor tx, tp, tf, tw;
    tensor_init_3d(&tx, DTYPE_F32, x, D, H, T);
    tensor_init_1d(&tp, DTYPE_I32, pos, T);
    tensor_init_1d(&tf, DTYPE_F32, inv_freq, RD / 2);
    tensor_init_1d(&tw, DTYPE_F32, w, D);
    struct op_call c = {.op = with_norm ? OP_QK_NORM_ROPE : OP_ROPE,
                        .dst = &tx,
                        .src = {&tp, &tf, with_norm ? &tw : NULL},
                        .p = {.rope_dim = RD, .rope_neox = neox, .eps = 1e-6f}};
    CHECK_EQ_INT(run_ref(with_norm ? &cpu_ref_qk_norm_rope : &cpu_ref_rope, &c), VLLMC_OK);
    for (int i = 0; i < T * H * D; i++)
        CHECK_NEAR(x[i], expect[i], 1e-5, 1e-5);
}

static void test_rope_pairs(void)
{
    check_rope(false, false);
}

static void test_rope_neox(void)
{
    check_rope(true, false);
}

static void test_qk_norm_rope(void)
{
    check_rope(true, true);
    check_rope(false, true);
}

static void test_rope_hand(void)
{
    // One head [1, 0, 0, 1] at position 1 with inv_freq [pi/2, 0]: adjacent
    // pairs rotate (1, 0) by 90 degrees to (0, 1); neox pairs (0, 2), (1, 3).
    float x[4] = {1, 0, 0, 1}, f[2] = {(float)M_PI / 2, 0};
    int32_t pos = 1;
    struct tensor tx, tp, tf;
    tensor_init_3d(&tx, DTYPE_F32, x, 4, 1, 1);
    tensor_init_1d(&tp, DTYPE_I32, &pos, 1);
    tensor_init_1d(&tf, DTYPE_F32, f, 2);
    struct op_call c = {.op = OP_ROPE, .dst = &tx, .src = {&tp, &tf}, .p.rope_dim = 4};
    CHECK_EQ_INT(run_ref(&cpu_ref_rope, &c), VLLMC_OK);
    CHECK_NEAR(x[0], 0, 1e-6, 0);
    CHECK_NEAR(x[1], 1, 1e-6, 0);
    CHECK_NEAR(x[2], 0, 1e-6, 0);
    CHECK_NEAR(x[3], 1, 1e-6, 0);
    float y[4] = {1, 0, 0, 1};
    tensor_init_3d(&tx, DTYPE_F32, y, 4, 1, 1);
    c.p.rope_neox = true;
    CHECK_EQ_INT(run_ref(&cpu_ref_rope, &c), VLLMC_OK);
    // pair (0, 2) = (1, 0) -> (0, 1); pair (1, 3) has angle 0.
    CHECK_NEAR(y[0], 0, 1e-6, 0);
    CHECK_NEAR(y[2], 1, 1e-6, 0);
    CHECK_NEAR(y[1], 0, 1e-6, 0);
    CHECK_NEAR(y[3], 1, 1e-6, 0);
}

static void test_silu_mul_and_add(void)
{
    float g[3] = {0, 1, -2}, u[3] = {1, 2, 3}, y[3];
    struct tensor tg, tu, ty;
    tensor_init_2d(&tg, DTYPE_F32, g, 3, 1);
    tensor_init_2d(&tu, DTYPE_F32, u, 3, 1);
    tensor_init_2d(&ty, DTYPE_F32, y, 3, 1);
    struct op_call c = {.op = OP_SILU_MUL, .dst = &ty, .src = {&tg, &tu}};
    CHECK_EQ_INT(run_ref(&cpu_ref_silu_mul, &c), VLLMC_OK);
    // silu(1) = 1 / (1 + e^-1) = 0.7310586; silu(-2) = -2 / (1 + e^2) = -0.2384058
    CHECK_NEAR(y[0], 0, 0, 0);
    CHECK_NEAR(y[1], 1.462117157, 1e-6, 0);
    CHECK_NEAR(y[2], -0.715217526, 1e-6, 0);
    c = (struct op_call){.op = OP_ADD, .dst = &tg, .src = {&tg, &tu}};
    CHECK_EQ_INT(run_ref(&cpu_ref_add, &c), VLLMC_OK);
    CHECK_NEAR(g[0], 1, 0, 0);
    CHECK_NEAR(g[1], 3, 0, 0);
    CHECK_NEAR(g[2], 1, 0, 0);
}

static struct backend *cpu_backend(int n_threads, const char *disable);

static void test_kv_store(void)
{
    enum { NB = 3, BS = 4, KVH = 2, D = 4, T = 3 };
    float k[T * KVH * D], v[T * KVH * D];
    for (int i = 0; i < T * KVH * D; i++) {
        k[i] = (float)i + 0.25f;
        v[i] = -(float)i;
    }
    uint16_t kc[NB * BS * KVH * D] = {0}, vc[NB * BS * KVH * D] = {0};
    int32_t slots[T] = {5, -1, 0}; // token 0 -> block 1 offset 1; token 1 skipped
    struct tensor tk, tv, tkc, tvc, ts;
    tensor_init_3d(&tk, DTYPE_F32, k, D, KVH, T);
    tensor_init_3d(&tv, DTYPE_F32, v, D, KVH, T);
    tensor_init(&tkc, DTYPE_F16, kc, 4, (int64_t[]){D, KVH, BS, NB});
    tensor_init(&tvc, DTYPE_F16, vc, 4, (int64_t[]){D, KVH, BS, NB});
    tensor_init_1d(&ts, DTYPE_I32, slots, T);
    struct op_call c = {.op = OP_KV_STORE, .src = {&tk, &tv, &tkc, &tvc, &ts}};
    CHECK_EQ_INT(run_ref(&cpu_ref_kv_store, &c), VLLMC_OK);
    int n_written = 0;
    for (int i = 0; i < NB * BS * KVH * D; i++)
        n_written += kc[i] != 0;
    CHECK_EQ_INT(n_written, 2 * KVH * D);
    for (int h = 0; h < KVH; h++) {
        for (int i = 0; i < D; i++) {
            CHECK_NEAR(fp16_to_f32(kc[((1 * BS + 1) * KVH + h) * D + i]), k[h * D + i], 0, 0);
            CHECK_NEAR(fp16_to_f32(vc[((1 * BS + 1) * KVH + h) * D + i]), v[h * D + i], 0, 0);
            CHECK_NEAR(fp16_to_f32(kc[(0 * KVH + h) * D + i]), k[(2 * KVH + h) * D + i], 0, 0);
        }
    }
    slots[1] = NB * BS;
    CHECK_EQ_INT(run_ref(&cpu_ref_kv_store, &c), VLLMC_ERR_INVALID_ARG);
    // The backend's own choice (cpu-avx2 where the CPU has AVX2) refuses it too.
    struct backend *be = cpu_backend(2, "");
    CHECK_EQ_INT(backend_run_op(be, &c), VLLMC_ERR_INVALID_ARG);
    backend_free(be);
}

// The backend's kv_store (cpu-avx2's rows 8 values at a time, a tail of 4)
// writes the bits cpu-ref writes into f16 and bf16 caches: ties, subnormals,
// overflow, infinities and NaNs with payloads.
static void test_kv_store_rounding(void)
{
    enum { NB = 2, BS = 4, KVH = 2, D = 20, T = 5, N = T * KVH * D };
    static const uint32_t special[] = {
        0x3f801000u, // 1 + 2^-11: an f16 tie, to even (1)
        0x3f803000u, // 1 + 3 * 2^-11: an f16 tie, to even (up)
        0x3f808000u, // 1 + 2^-8: a bf16 tie, to even (1)
        0x3f818000u, // 1 + 3 * 2^-8: a bf16 tie, to even (up)
        0x477fe000u, // 65504, the largest f16
        0x477fefffu, // just below 65520: stays 65504
        0x477ff000u, // 65520: to f16 inf
        0x7f7fffffu, // the largest float: bf16 inf
        0x33800000u, // 2^-24, the smallest f16 subnormal
        0x33000000u, // 2^-25: a tie, to 0
        0x33c00000u, // 1.5 * 2^-24: a tie, to 2^-23
        0x387fc000u, // just below the smallest f16 normal
        0x00000001u, // the smallest f32 subnormal
        0x80000000u, // -0
        0x7f800000u, // inf
        0xff800000u, // -inf
        0x7fc00000u, // quiet NaN
        0x7fa00001u, // signalling NaN with a payload
        0xffc12345u, // negative NaN with a payload
        0x7f80e000u, // NaN whose payload lies below the top 10 / 7 bits
    };
    float k[N], v[N];
    unsigned st = 7;
    for (int i = 0; i < N; i++) {
        k[i] = frand(&st) * (i % 3 == 0 ? 1e-5f : i % 3 == 1 ? 3.0f : 7e4f);
        v[i] = frand(&st) * 100.0f;
    }
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) {
        memcpy(&k[i * 3], &special[i], sizeof(float));
        memcpy(&v[N - 1 - i * 2], &special[i], sizeof(float));
    }
    int32_t slots[T] = {5, 0, 7, -1, 2};
    static const enum dtype cache_types[] = {DTYPE_F16, DTYPE_BF16};
    for (int ct = 0; ct < 2; ct++) {
        uint16_t kc[2][NB * BS * KVH * D], vc[2][NB * BS * KVH * D];
        memset(kc, 0, sizeof kc);
        memset(vc, 0, sizeof vc);
        for (int b = 0; b < 2; b++) { // 0: cpu-ref, 1: the backend's choice
            struct tensor tk, tv, tkc, tvc, ts;
            tensor_init_3d(&tk, DTYPE_F32, k, D, KVH, T);
            tensor_init_3d(&tv, DTYPE_F32, v, D, KVH, T);
            tensor_init(&tkc, cache_types[ct], kc[b], 4, (int64_t[]){D, KVH, BS, NB});
            tensor_init(&tvc, cache_types[ct], vc[b], 4, (int64_t[]){D, KVH, BS, NB});
            tensor_init_1d(&ts, DTYPE_I32, slots, T);
            struct op_call c = {.op = OP_KV_STORE, .src = {&tk, &tv, &tkc, &tvc, &ts}};
            if (b == 0) {
                CHECK_EQ_INT(run_ref(&cpu_ref_kv_store, &c), VLLMC_OK);
            } else {
                struct backend *be = cpu_backend(2, "");
                CHECK_EQ_INT(backend_run_op(be, &c), VLLMC_OK);
                backend_free(be);
            }
        }
        CHECK(memcmp(kc[0], kc[1], sizeof kc[0]) == 0);
        CHECK(memcmp(vc[0], vc[1], sizeof vc[0]) == 0);
    }
}

// ---- attention against a dense causal softmax ----

enum { A_NB = 12, A_BS = 4, A_KVH = 2, A_H = 4, A_D = 64, A_SEQS = 3, A_MAXB = 4 };

struct attn_case {
    int seq_len[A_SEQS], n_q[A_SEQS];
    float keys[A_SEQS][A_MAXB * A_BS][A_KVH][A_D]; // contiguous K per sequence
    float vals[A_SEQS][A_MAXB * A_BS][A_KVH][A_D];
    int32_t tables[A_SEQS][A_MAXB];
};

static void attn_fill(struct attn_case *ac, enum dtype cache_type, void *kc, void *vc,
                      unsigned seed)
{
    // A shuffled block table: sequence s, block b -> a scattered cache block.
    static const int32_t perm[A_SEQS * A_MAXB] = {7, 2, 11, 0, 5, 9, 1, 4, 10, 3, 8, 6};
    for (int s = 0; s < A_SEQS; s++)
        for (int b = 0; b < A_MAXB; b++)
            ac->tables[s][b] = perm[s * A_MAXB + b];
    size_t esz = cache_type == DTYPE_F32 ? 4 : 2;
    for (int s = 0; s < A_SEQS; s++) {
        for (int t = 0; t < A_MAXB * A_BS; t++) {
            for (int h = 0; h < A_KVH; h++) {
                for (int i = 0; i < A_D; i++) {
                    float kv[2] = {frand(&seed), frand(&seed)};
                    float *dst[2] = {&ac->keys[s][t][h][i], &ac->vals[s][t][h][i]};
                    void *cache[2] = {kc, vc};
                    size_t idx =
                        (((size_t)ac->tables[s][t / A_BS] * A_BS + (size_t)(t % A_BS)) * A_KVH +
                         (size_t)h) *
                            A_D +
                        (size_t)i;
                    for (int j = 0; j < 2; j++) {
                        // The reference sees what the cache holds.
                        if (cache_type == DTYPE_F32) {
                            ((float *)cache[j])[idx] = kv[j];
                            *dst[j] = kv[j];
                        } else {
                            uint16_t h16 =
                                cache_type == DTYPE_F16 ? f32_to_fp16(kv[j]) : f32_to_bf16(kv[j]);
                            memcpy((char *)cache[j] + idx * esz, &h16, 2);
                            *dst[j] = cache_type == DTYPE_F16 ? fp16_to_f32(h16) : bf16_to_f32(h16);
                        }
                    }
                }
            }
        }
    }
}

static void check_attention(enum dtype cache_type)
{
    static struct attn_case ac;
    // A chunk of prefill with 3 tokens cached, a decode, a full prefill.
    int seq_len[A_SEQS] = {9, 13, 6}, n_q[A_SEQS] = {6, 1, 6};
    static float kc[A_NB * A_BS * A_KVH * A_D], vc[A_NB * A_BS * A_KVH * A_D];
    attn_fill(&ac, cache_type, kc, vc, 99);
    int32_t seq_lens[A_SEQS], qsl[A_SEQS + 1] = {0};
    for (int s = 0; s < A_SEQS; s++) {
        seq_lens[s] = seq_len[s];
        qsl[s + 1] = qsl[s] + n_q[s];
    }
    int n_tokens = qsl[A_SEQS];
    static float q[13 * A_H * A_D], out[13 * A_H * A_D];
    unsigned seed = 5;
    for (int i = 0; i < n_tokens * A_H * A_D; i++)
        q[i] = frand(&seed) * 2.0f;
    float scale = 1.0f / sqrtf((float)A_D);
    struct tensor tq, to, tkc, tvc, tbt, tsl, tqsl;
    tensor_init_3d(&tq, DTYPE_F32, q, A_D, A_H, n_tokens);
    tensor_init_3d(&to, DTYPE_F32, out, A_D, A_H, n_tokens);
    tensor_init(&tkc, cache_type, kc, 4, (int64_t[]){A_D, A_KVH, A_BS, A_NB});
    tensor_init(&tvc, cache_type, vc, 4, (int64_t[]){A_D, A_KVH, A_BS, A_NB});
    tensor_init_2d(&tbt, DTYPE_I32, ac.tables, A_MAXB, A_SEQS);
    tensor_init_1d(&tsl, DTYPE_I32, seq_lens, A_SEQS);
    tensor_init_1d(&tqsl, DTYPE_I32, qsl, A_SEQS + 1);
    struct op_call c = {.op = OP_ATTENTION,
                        .dst = &to,
                        .src = {&tq, &tkc, &tvc, &tbt, &tsl, &tqsl},
                        .p.scale = scale};
    CHECK_EQ_INT(run_ref(&cpu_ref_attention, &c), VLLMC_OK);
    double max_err = 0;
    for (int s = 0; s < A_SEQS; s++) {
        for (int j = 0; j < n_q[s]; j++) {
            int tok = qsl[s] + j, pos = seq_len[s] - n_q[s] + j;
            for (int h = 0; h < A_H; h++) {
                int kvh = h / (A_H / A_KVH);
                const float *qh = q + (tok * A_H + h) * A_D;
                double sc[16], mx = -1e300, sum = 0;
                for (int t = 0; t <= pos; t++) {
                    double d = 0;
                    for (int i = 0; i < A_D; i++)
                        d += (double)qh[i] * ac.keys[s][t][kvh][i];
                    sc[t] = d * scale;
                    mx = fmax(mx, sc[t]);
                }
                for (int t = 0; t <= pos; t++)
                    sum += sc[t] = exp(sc[t] - mx);
                for (int i = 0; i < A_D; i++) {
                    double o = 0;
                    for (int t = 0; t <= pos; t++)
                        o += sc[t] / sum * ac.vals[s][t][kvh][i];
                    double e = fabs(o - out[(tok * A_H + h) * A_D + i]);
                    max_err = e > max_err ? e : max_err;
                }
            }
        }
    }
    CHECK(max_err < 1e-5);

    // Metadata errors come back as statuses.
    ac.tables[1][3] = A_NB;
    CHECK_EQ_INT(run_ref(&cpu_ref_attention, &c), VLLMC_ERR_INVALID_ARG);
    ac.tables[1][3] = 0;
    seq_lens[2] = 5; // fewer keys than queries
    CHECK_EQ_INT(run_ref(&cpu_ref_attention, &c), VLLMC_ERR_INVALID_ARG);
    seq_lens[2] = 6;
    seq_lens[1] = 17; // needs 5 blocks of a 4-block table
    CHECK_EQ_INT(run_ref(&cpu_ref_attention, &c), VLLMC_ERR_INVALID_ARG);
}

static void test_attention_f32(void)
{
    check_attention(DTYPE_F32);
}

static void test_attention_f16_bf16(void)
{
    check_attention(DTYPE_F16);
    check_attention(DTYPE_BF16);
}

// ---- batch invariance of the selected CPU providers ----

static struct backend *cpu_backend(int n_threads, const char *disable)
{
    struct backend_options o;
    backend_options_default(&o);
    o.n_threads = n_threads;
    o.disable = disable;
    struct backend *be = NULL;
    struct err err = {0};
    CHECK_EQ_INT(backend_create("cpu", &o, &be, &err), VLLMC_OK);
    return be;
}

// Each of M rows alone gives the same bits as inside the M-row call; M past
// 64 spreads the rows over several row blocks (tasks) of the tiled driver.
// A one-row call reads each task's block of rows as 8 streams: N = 67 and 77
// end it with blocks of 3 and 13 rows (no stream, and streams plus a tile),
// N = 1030 gives blocks of 128 rows (streams of 16). K past 2048 runs the
// bf16 tiles of a many-row call in parts of k (their partial sums kept
// between parts), a lone row in one pass.
static void check_matmul_batch_invariance(int64_t K, int M, int N, const char *disable)
{
    enum { M_MAX = 150, N_MAX = 1040, K_MAX = 3100 };
    static float x[M_MAX * K_MAX], w[N_MAX * K_MAX], y1[N_MAX], y7[M_MAX * N_MAX];
    static uint16_t wh[N_MAX * K_MAX], wf16[N_MAX * K_MAX];
    unsigned seed = 11;
    for (int i = 0; i < M * K; i++)
        x[i] = frand(&seed);
    for (int i = 0; i < N * K; i++) {
        w[i] = frand(&seed);
        wh[i] = f32_to_bf16(w[i]);
        wf16[i] = f32_to_fp16(w[i]);
    }
    struct backend *be = cpu_backend(2, disable);
    static const enum dtype types[3] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};
    for (int wt = 0; wt < 3; wt++) {
        struct tensor tx1, tx7, tw, ty1, ty7;
        void *wd = wt == 0 ? (void *)w : wt == 1 ? (void *)wh : (void *)wf16;
        tensor_init_2d(&tw, types[wt], wd, K, N);
        tensor_init_2d(&tx7, DTYPE_F32, x, K, M);
        tensor_init_2d(&ty7, DTYPE_F32, y7, N, M);
        struct op_call c7 = {.op = OP_MATMUL, .dst = &ty7, .src = {&tx7, &tw}};
        CHECK_EQ_INT(backend_run_op(be, &c7), VLLMC_OK);
        printf("matmul m=%d n=%d k=%lld wtype=%s provider=%s\n", M, N, (long long)K,
               dtype_name(tw.dtype),
               backend_select_provider(be, &c7)->name);
        for (int r = 0; r < M; r++) {
            tensor_init_2d(&tx1, DTYPE_F32, x + r * K, K, 1);
            tensor_init_2d(&ty1, DTYPE_F32, y1, N, 1);
            struct op_call c1 = {.op = OP_MATMUL, .dst = &ty1, .src = {&tx1, &tw}};
            CHECK_EQ_INT(backend_run_op(be, &c1), VLLMC_OK);
            CHECK(backend_select_provider(be, &c1) == backend_select_provider(be, &c7));
            CHECK(!memcmp(y1, y7 + r * N, (size_t)N * sizeof y1[0]));
        }
    }
    backend_free(be);
}

static void test_matmul_batch_invariance(void)
{
    check_matmul_batch_invariance(259, 7, 67, ""); // odd k: tails
    check_matmul_batch_invariance(256, 7, 67, "");
    check_matmul_batch_invariance(259, 150, 67, ""); // three row blocks, the last partial
    check_matmul_batch_invariance(256, 150, 67, "");
    check_matmul_batch_invariance(250, 150, 67, ""); // bf16 pairs with a tail of 13 pairs
    check_matmul_batch_invariance(256, 7, 77, "");
    check_matmul_batch_invariance(1100, 7, 77, "");
    check_matmul_batch_invariance(1028, 9, 67, "");
    check_matmul_batch_invariance(256, 3, 1030, "");
    check_matmul_batch_invariance(3100, 70, 67, ""); // k in 3 parts, the last with a tail
    check_matmul_batch_invariance(3072, 9, 67, "");
    // Shapes cpu-amx-bf16 takes where the CPU has AMX (n a multiple of 16, k
    // of 32): a lone row goes through panels of 16 streams (N = 80: one
    // panel of 5 rows a stream; N = 1040: four of 16 and one of 1), a batch
    // through 16 x 16 tiles (M = 150: two blocks of tokens, the last with a
    // 6-token tile; N = 80 ends with one weight tile).
    check_matmul_batch_invariance(256, 7, 64, "");
    check_matmul_batch_invariance(1024, 150, 80, "");
    check_matmul_batch_invariance(3072, 37, 48, "");
    check_matmul_batch_invariance(96, 20, 1040, "");
    // The next providers in line (AVX2 where the CPU has AVX-512 and AVX512_BF16).
    check_matmul_batch_invariance(256, 7, 67, "cpu-avx512,cpu-avx512bf16,cpu-amx-bf16");
    check_matmul_batch_invariance(256, 150, 67, "cpu-avx512,cpu-avx512bf16,cpu-amx-bf16");
    check_matmul_batch_invariance(1100, 7, 77, "cpu-avx512,cpu-avx512bf16,cpu-amx-bf16");
}

// A query alone gives the same row as inside a 3-sequence batch. With an f32
// cache the lone query reads its rows in place and the prefill copies them.
static void check_attention_batch_invariance(const char *disable, enum dtype cache_type)
{
    static struct attn_case ac;
    static float kc[A_NB * A_BS * A_KVH * A_D], vc[A_NB * A_BS * A_KVH * A_D];
    attn_fill(&ac, cache_type, kc, vc, 3);
    int32_t seq_lens[A_SEQS] = {9, 13, 6}, qsl[A_SEQS + 1] = {0, 6, 7, 13};
    static float q[13 * A_H * A_D], out[13 * A_H * A_D], out1[A_H * A_D];
    unsigned seed = 8;
    for (int i = 0; i < 13 * A_H * A_D; i++)
        q[i] = frand(&seed);
    struct tensor tq, to, tkc, tvc, tbt, tsl, tqsl;
    tensor_init_3d(&tq, DTYPE_F32, q, A_D, A_H, 13);
    tensor_init_3d(&to, DTYPE_F32, out, A_D, A_H, 13);
    tensor_init(&tkc, cache_type, kc, 4, (int64_t[]){A_D, A_KVH, A_BS, A_NB});
    tensor_init(&tvc, cache_type, vc, 4, (int64_t[]){A_D, A_KVH, A_BS, A_NB});
    tensor_init_2d(&tbt, DTYPE_I32, ac.tables, A_MAXB, A_SEQS);
    tensor_init_1d(&tsl, DTYPE_I32, seq_lens, A_SEQS);
    tensor_init_1d(&tqsl, DTYPE_I32, qsl, A_SEQS + 1);
    struct op_call c = {.op = OP_ATTENTION,
                        .dst = &to,
                        .src = {&tq, &tkc, &tvc, &tbt, &tsl, &tqsl},
                        .p.scale = 0.35f};
    struct backend *be = cpu_backend(2, disable);
    CHECK_EQ_INT(backend_run_op(be, &c), VLLMC_OK);
    printf("attention provider=%s\n", backend_select_provider(be, &c)->name);

    // The decode of sequence 1 alone equals its row inside the batch.
    int32_t one_len[1] = {13}, one_qsl[2] = {0, 1};
    struct tensor tq1, to1, tbt1, tsl1, tqsl1;
    tensor_init_3d(&tq1, DTYPE_F32, q + 6 * A_H * A_D, A_D, A_H, 1);
    tensor_init_3d(&to1, DTYPE_F32, out1, A_D, A_H, 1);
    tensor_init_2d(&tbt1, DTYPE_I32, ac.tables[1], A_MAXB, 1);
    tensor_init_1d(&tsl1, DTYPE_I32, one_len, 1);
    tensor_init_1d(&tqsl1, DTYPE_I32, one_qsl, 2);
    struct op_call c1 = {.op = OP_ATTENTION,
                         .dst = &to1,
                         .src = {&tq1, &tkc, &tvc, &tbt1, &tsl1, &tqsl1},
                         .p.scale = 0.35f};
    CHECK_EQ_INT(backend_run_op(be, &c1), VLLMC_OK);
    CHECK(!memcmp(out1, out + 6 * A_H * A_D, sizeof out1));

    // The last prompt token of sequence 0 (position 8) alone equals its row
    // of the batch's 6-token prefill.
    one_len[0] = 9;
    tensor_init_3d(&tq1, DTYPE_F32, q + 5 * A_H * A_D, A_D, A_H, 1);
    tensor_init_2d(&tbt1, DTYPE_I32, ac.tables[0], A_MAXB, 1);
    CHECK_EQ_INT(backend_run_op(be, &c1), VLLMC_OK);
    CHECK(!memcmp(out1, out + 5 * A_H * A_D, sizeof out1));
    backend_free(be);
}

// A long prefill (48 new tokens after 16 cached, 2 query heads per kv head:
// 96 query rows, more than one prefill task holds) gives each token the bits
// of its lone decode, so the size of a task never changes a row. Blocks of 4
// keys make chunks of 4; blocks of 16 full 16-key chunks, which four rows
// take together.
static void check_attention_long_prefill(const char *disable, enum dtype cache_type, int bs, int hd)
{
    enum { L_KVH = 2, L_H = 4, L_DMAX = 128, L_NQ = 48, L_LEN = 64 };
    CHECK(hd <= L_DMAX && L_LEN % bs == 0); // the buffers below hold that much
    if (hd > L_DMAX || L_LEN % bs != 0)
        return;
    const int nb = L_LEN / bs;
    static uint16_t kc16[L_LEN * L_KVH * L_DMAX], vc16[L_LEN * L_KVH * L_DMAX];
    static float kc32[L_LEN * L_KVH * L_DMAX], vc32[L_LEN * L_KVH * L_DMAX];
    static float q[L_NQ * L_H * L_DMAX], out[L_NQ * L_H * L_DMAX], out1[L_H * L_DMAX];
    unsigned seed = 21;
    for (int i = 0; i < nb * bs * L_KVH * hd; i++) {
        kc32[i] = frand(&seed);
        vc32[i] = frand(&seed);
        kc16[i] = f32_to_fp16(kc32[i]);
        vc16[i] = f32_to_fp16(vc32[i]);
    }
    for (int i = 0; i < L_NQ * L_H * hd; i++)
        q[i] = frand(&seed) * 2.0f;
    int32_t table[L_LEN]; // blocks in reverse: keys not in address order
    for (int b = 0; b < nb; b++)
        table[b] = nb - 1 - b;
    void *kc = cache_type == DTYPE_F32 ? (void *)kc32 : (void *)kc16;
    void *vc = cache_type == DTYPE_F32 ? (void *)vc32 : (void *)vc16;
    int32_t len[1] = {L_LEN}, qsl[2] = {0, L_NQ};
    struct tensor tq, to, tkc, tvc, tbt, tsl, tqsl;
    tensor_init_3d(&tq, DTYPE_F32, q, hd, L_H, L_NQ);
    tensor_init_3d(&to, DTYPE_F32, out, hd, L_H, L_NQ);
    tensor_init(&tkc, cache_type, kc, 4, (int64_t[]){hd, L_KVH, bs, nb});
    tensor_init(&tvc, cache_type, vc, 4, (int64_t[]){hd, L_KVH, bs, nb});
    tensor_init_2d(&tbt, DTYPE_I32, table, nb, 1);
    tensor_init_1d(&tsl, DTYPE_I32, len, 1);
    tensor_init_1d(&tqsl, DTYPE_I32, qsl, 2);
    struct op_call c = {.op = OP_ATTENTION,
                        .dst = &to,
                        .src = {&tq, &tkc, &tvc, &tbt, &tsl, &tqsl},
                        .p.scale = 0.125f};
    struct backend *be = cpu_backend(2, disable);
    CHECK_EQ_INT(backend_run_op(be, &c), VLLMC_OK);
    printf("attention long prefill provider=%s cache=%s block=%d head_dim=%d\n",
           backend_select_provider(be, &c)->name, dtype_name(cache_type), bs, hd);
    int n_diff = 0;
    for (int t = 0; t < L_NQ; t++) {
        int32_t one_len[1] = {L_LEN - L_NQ + t + 1}, one_qsl[2] = {0, 1};
        struct tensor tq1, to1, tsl1, tqsl1;
        tensor_init_3d(&tq1, DTYPE_F32, q + t * L_H * hd, hd, L_H, 1);
        tensor_init_3d(&to1, DTYPE_F32, out1, hd, L_H, 1);
        tensor_init_1d(&tsl1, DTYPE_I32, one_len, 1);
        tensor_init_1d(&tqsl1, DTYPE_I32, one_qsl, 2);
        struct op_call c1 = {.op = OP_ATTENTION,
                             .dst = &to1,
                             .src = {&tq1, &tkc, &tvc, &tbt, &tsl1, &tqsl1},
                             .p.scale = 0.125f};
        CHECK_EQ_INT(backend_run_op(be, &c1), VLLMC_OK);
        n_diff += memcmp(out1, out + t * L_H * hd, (size_t)L_H * hd * sizeof(float)) != 0;
    }
    CHECK_EQ_INT(n_diff, 0);
    backend_free(be);
}

// An attention call over the caches kc, vc for n sequences: queries q and
// outputs out [n_tokens, H, D], sequence s's queries from qsl[s] (qsl [n + 1]),
// its length lens[s] and block table row s of tables [n, max_blocks].
struct att_call {
    struct tensor q, out, tables, lens, qsl;
    struct op_call c;
};

static void att_call_init(struct att_call *a, float *q, float *out, int D, int H, int n_tokens,
                          int32_t *tables, int max_blocks, int32_t *lens, int32_t *qsl, int n,
                          struct tensor *kc, struct tensor *vc, float scale)
{
    tensor_init_3d(&a->q, DTYPE_F32, q, D, H, n_tokens);
    tensor_init_3d(&a->out, DTYPE_F32, out, D, H, n_tokens);
    tensor_init_2d(&a->tables, DTYPE_I32, tables, max_blocks, n);
    tensor_init_1d(&a->lens, DTYPE_I32, lens, n);
    tensor_init_1d(&a->qsl, DTYPE_I32, qsl, n + 1);
    a->c = (struct op_call){.op = OP_ATTENTION,
                            .dst = &a->out,
                            .src = {&a->q, kc, vc, &a->tables, &a->lens, &a->qsl},
                            .p.scale = scale};
}

// A batch of decode tokens (one query per sequence, lengths across chunk and
// block edges, blocks of 8 to 32 keys) gives each sequence the bits of its
// token's row in that sequence's whole prefill, alone or in the batch (alone,
// cpu-avx512 splits the sequence's kv heads over tasks; in the batch one task
// takes them all), on 1 or 2 threads, and matches cpu-ref (blocks of 24 keys
// once lost the 8 keys after each block's first 16).
static void check_attention_decode_batch(const char *disable, enum dtype cache_type, int D,
                                         int n_kv, int G, int bs, const int32_t *lens)
{
    enum { S = 5 };
    int max_len = 0;
    for (int s = 0; s < S; s++)
        max_len = lens[s] > max_len ? lens[s] : max_len;
    int H = n_kv * G, max_blocks = (max_len + bs - 1) / bs, n_blocks = S * max_blocks;
    size_t esz = cache_type == DTYPE_F32 ? 4 : 2, n_cache = (size_t)n_blocks * bs * n_kv * D;
    char *kc = calloc(n_cache, esz), *vc = calloc(n_cache, esz);
    float *q = calloc((size_t)S * max_len * H * D, sizeof(float));
    float *pre = calloc((size_t)max_len * H * D, sizeof(float));
    float *want = calloc((size_t)S * H * D, sizeof(float)), *got = calloc((size_t)S * H * D, 4);
    float *ref = calloc((size_t)S * H * D, sizeof(float)), *qd = calloc((size_t)S * H * D, 4);
    int32_t *tables = calloc((size_t)n_blocks, sizeof(int32_t));
    CHECK(kc && vc && q && pre && want && got && ref && qd && tables);
    unsigned seed = 31;
    for (size_t i = 0; i < n_cache; i++)
        for (int j = 0; j < 2; j++) {
            float v = frand(&seed);
            uint16_t h16 = cache_type == DTYPE_F16 ? f32_to_fp16(v) : f32_to_bf16(v);
            if (cache_type == DTYPE_F32)
                memcpy((j ? vc : kc) + i * 4, &v, 4);
            else
                memcpy((j ? vc : kc) + i * 2, &h16, 2);
        }
    for (int i = 0; i < S * max_len * H * D; i++)
        q[i] = frand(&seed) * 2.0f;
    for (int b = 0; b < n_blocks; b++) // scattered: block b of sequence s at (7 b + 3) mod n
        tables[b] = (int32_t)((7 * b + 3) % n_blocks);
    int32_t qsl[S + 1]; // the decode batch: query s is sequence s's lone token
    for (int s = 0; s <= S; s++)
        qsl[s] = s;
    struct tensor tkc, tvc;
    tensor_init(&tkc, cache_type, kc, 4, (int64_t[]){D, n_kv, bs, n_blocks});
    tensor_init(&tvc, cache_type, vc, 4, (int64_t[]){D, n_kv, bs, n_blocks});
    for (int n_threads = 1; n_threads <= 2; n_threads++) {
        struct backend *be = cpu_backend(n_threads, disable);
        // Each sequence's whole prefill; its last row is its decode token.
        for (int s = 0; s < S; s++) {
            int32_t len[1] = {lens[s]}, pre_qsl[2] = {0, lens[s]};
            struct att_call a;
            att_call_init(&a, q + (size_t)s * max_len * H * D, pre, D, H, lens[s],
                          tables + s * max_blocks, max_blocks, len, pre_qsl, 1, &tkc, &tvc, 0.2f);
            CHECK_EQ_INT(backend_run_op(be, &a.c), VLLMC_OK);
            memcpy(want + (size_t)s * H * D, pre + (size_t)(lens[s] - 1) * H * D,
                   (size_t)H * D * sizeof(float));
            memcpy(qd + (size_t)s * H * D,
                   q + ((size_t)s * max_len + (size_t)(lens[s] - 1)) * H * D,
                   (size_t)H * D * sizeof(float));
        }
        // The decode batch, then each decode alone.
        struct att_call a;
        att_call_init(&a, qd, got, D, H, S, tables, max_blocks, (int32_t *)lens, qsl, S, &tkc, &tvc,
                      0.2f);
        CHECK_EQ_INT(backend_run_op(be, &a.c), VLLMC_OK);
        printf("attention decode batch provider=%s cache=%s head_dim=%d kv_heads=%d group=%d "
               "block=%d threads=%d\n",
               backend_select_provider(be, &a.c)->name, dtype_name(cache_type), D, n_kv, G, bs,
               n_threads);
        CHECK(!memcmp(got, want, (size_t)S * H * D * sizeof(float)));
        for (int s = 0; s < S; s++) {
            struct att_call a1;
            att_call_init(&a1, qd + (size_t)s * H * D, got, D, H, 1, tables + s * max_blocks,
                          max_blocks, (int32_t *)lens + s, qsl, 1, &tkc, &tvc, 0.2f);
            CHECK_EQ_INT(backend_run_op(be, &a1.c), VLLMC_OK);
            CHECK(!memcmp(got, want + (size_t)s * H * D, (size_t)H * D * sizeof(float)));
        }
        backend_free(be);
    }
    // cpu-ref on the batch: the same softmax in another order, within rounding.
    struct att_call a;
    att_call_init(&a, qd, ref, D, H, S, tables, max_blocks, (int32_t *)lens, qsl, S, &tkc, &tvc,
                  0.2f);
    CHECK_EQ_INT(run_ref(&cpu_ref_attention, &a.c), VLLMC_OK);
    double max_err = 0;
    for (int i = 0; i < S * H * D; i++)
        max_err = fmax(max_err, fabs((double)ref[i] - want[i]));
    CHECK(max_err < 1e-5);
    free(kc);
    free(vc);
    free(q);
    free(pre);
    free(want);
    free(got);
    free(ref);
    free(qd);
    free(tables);
}

static void test_attention_decode_batch(void)
{
    static const int32_t lens[5] = {17, 1, 45, 16, 31};
    check_attention_decode_batch("", DTYPE_F32, 48, 6, 1, 16, lens); // stories15M shape
    check_attention_decode_batch("", DTYPE_F32, 64, 2, 4, 16, lens);
    check_attention_decode_batch("", DTYPE_F32, 64, 3, 3, 24, lens); // odd group; chunks of 16, 8
    check_attention_decode_batch("", DTYPE_F32, 128, 4, 2, 32, lens);
    check_attention_decode_batch("", DTYPE_F32, 256, 2, 3, 8, lens);
    check_attention_decode_batch("", DTYPE_F16, 128, 8, 2, 16, lens); // Qwen3-0.6B shape
    check_attention_decode_batch("", DTYPE_BF16, 48, 6, 1, 16, lens);
    // Longer sequences: several full chunks in a row, each fetching the next
    // (cpu-avx512's pairs of rows of an even group over an f16 or f32 cache
    // take full_dots2 and full_values2; fetched into L2 where the next
    // chunk's rows of a task pass 32 KiB, into L1 below), lengths odd, a
    // multiple of 16, not a multiple of the block.
    static const int32_t long_lens[5] = {97, 64, 1, 80, 33};
    check_attention_decode_batch("", DTYPE_F16, 128, 8, 2, 16, long_lens); // 0.6B: L2 fetch
    check_attention_decode_batch("", DTYPE_F16, 128, 8, 2, 24, long_lens);
    check_attention_decode_batch("", DTYPE_F16, 64, 2, 4, 32, long_lens); // L1 fetch
    check_attention_decode_batch("", DTYPE_BF16, 128, 4, 2, 16, long_lens);
    check_attention_decode_batch("", DTYPE_F32, 48, 2, 2, 16, long_lens);
    check_attention_decode_batch("", DTYPE_F16, 256, 2, 2, 16, long_lens); // no pairs: 16 slices
    check_attention_decode_batch("", DTYPE_F16, 48, 6, 1, 16, long_lens);  // group 1: no pairs
    // The next in line: AVX2.
    check_attention_decode_batch("cpu-avx512", DTYPE_F32, 64, 2, 4, 16, lens);
    check_attention_decode_batch("cpu-avx512", DTYPE_F16, 64, 3, 3, 24, lens);
}

static void test_attention_batch_invariance(void)
{
    check_attention_long_prefill("", DTYPE_F32, 4, 64);
    check_attention_long_prefill("", DTYPE_F16, 4, 64);
    check_attention_long_prefill("", DTYPE_F32, 16, 64);
    check_attention_long_prefill("", DTYPE_F32, 16, 128);
    check_attention_long_prefill("", DTYPE_F16, 16, 128);
    check_attention_long_prefill("cpu-avx512", DTYPE_F32, 4, 64);
    check_attention_batch_invariance("", DTYPE_F16);
    check_attention_batch_invariance("", DTYPE_F32);
    check_attention_batch_invariance("cpu-avx512", DTYPE_F16); // the next in line: AVX2
    check_attention_batch_invariance("cpu-avx512", DTYPE_F32);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"rmsnorm_hand", test_rmsnorm_hand},
        {"add_rmsnorm_hand", test_add_rmsnorm_hand},
        {"matmul_hand", test_matmul_hand},
        {"embedding_hand", test_embedding_hand},
        {"select_ids_hand", test_select_ids_hand},
        {"rope_hand", test_rope_hand},
        {"rope_pairs", test_rope_pairs},
        {"rope_neox", test_rope_neox},
        {"qk_norm_rope", test_qk_norm_rope},
        {"silu_mul_and_add", test_silu_mul_and_add},
        {"kv_store", test_kv_store},
        {"kv_store_rounding", test_kv_store_rounding},
        {"attention_f32", test_attention_f32},
        {"attention_f16_bf16", test_attention_f16_bf16},
        {"matmul_batch_invariance", test_matmul_batch_invariance},
        {"attention_batch_invariance", test_attention_batch_invariance},
        {"attention_decode_batch", test_attention_decode_batch},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
