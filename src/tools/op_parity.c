// vllmc op-parity: runs every op provider of a backend against cpu-ref on
// random inputs over a grid of shapes and dtypes (odd sizes included, so
// gates and tails are exercised) and checks the normalised mean squared
// error, NMSE = sum (y - ref)^2 / sum ref^2, against a bar per weight dtype:
// 1e-6 for f32 (fp32 arithmetic in a different order), 5e-4 for quantized
// weights (a provider may quantize activations, as llama.cpp does) and, off
// the CPU, for f16/bf16 weights (activations rounded for tensor cores). CPU
// providers compute f16/bf16 weights in fp32 and keep the 1e-6 bar.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant/quantize.h"
#include "core/alloc.h"
#include "tools/commands.h"

// Slot 0 is dst, slot 1 + i is src[i]. With an ATTENTION prologue, slot
// PRO + 1 + i is the prologue's src[i]; its dst is the call's q and its
// caches the call's (those slots stay unused).
#define PRO (1 + OP_MAX_SRC)
#define SLOTS (PRO + 1 + OP_MAX_SRC)

struct pcase {
    enum op_kind op;
    bool has_prologue; // a QKV_ROPE_STORE with pro_p before the ATTENTION call
    struct op_params pro_p;
    char shape[96];
    char dtype[32];
    enum dtype wtype;       // decides the bar
    struct tensor t[SLOTS]; // host tensors, data owned
    bool used[SLOTS];
    unsigned outputs; // bit s set: slot s is written by the op
    bool exact;       // integer results: any difference fails
    struct op_params p;
};

struct parity {
    struct backend *ref_be; // cpu backend that runs cpu-ref
    struct backend *be;     // backend under test
    const char *only_op;    // NULL = all ops
    bool on_cpu;            // the backend under test is the CPU
    int n_checks, n_failed;
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static float rnd(void) // uniform in [-1, 1)
{
    return (float)(rnd_u32() & 0xffffff) / 8388608.0f - 1.0f;
}

// ---- cases ----

static bool pc_add(struct pcase *pc, int slot, enum dtype t, int n_dims, const int64_t *ne)
{
    struct tensor *x = &pc->t[slot];
    if (!tensor_init(x, t, NULL, n_dims, ne))
        return false;
    size_t n_bytes = tensor_n_bytes(x);
    x->data = mem_calloc(1, n_bytes ? n_bytes : 1);
    if (!x->data)
        return false;
    pc->used[slot] = true;
    int64_t n_rows = tensor_n_rows(x), n = x->ne[0];
    quant_quantize_fn quantize = quant_quantize_row_fn(t);
    float *row = mem_alloc((size_t)(n ? n : 1) * sizeof(float));
    if (!row)
        return false;
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < n; i++)
            row[i] = rnd();
        char *dst = (char *)x->data + (size_t)r * x->nb[1];
        for (int64_t i = 0; i < n; i++) {
            if (t == DTYPE_F32)
                ((float *)dst)[i] = row[i];
            else if (t == DTYPE_F16)
                ((uint16_t *)dst)[i] = f32_to_fp16(row[i]);
            else if (t == DTYPE_BF16)
                ((uint16_t *)dst)[i] = f32_to_bf16(row[i]);
        }
        if (quantize && dtype_info(t)->is_quantized)
            quantize(row, dst, n);
    }
    mem_free(row);
    return true;
}

static void pc_free(struct pcase *pc)
{
    for (int s = 0; s < SLOTS; s++)
        mem_free(pc->t[s].data);
    memset(pc, 0, sizeof *pc);
}

static int32_t *pc_i32(struct pcase *pc, int slot)
{
    return pc->t[slot].data;
}

// ---- running one provider ----

// Runs p on be over a device copy of pc's inputs. On success out[s] holds the
// f32 values of every output slot (owned). *declined when p's gate refuses.
static enum vllmc_status pc_run(const struct pcase *pc, struct backend *be,
                                const struct op_provider *p, float *out[SLOTS], bool *declined)
{
    void *buf[SLOTS] = {0};
    struct tensor dev[SLOTS];
    struct op_call call = {.op = pc->op, .p = pc->p, .backend = be};
    struct op_call pro = {.op = OP_QKV_ROPE_STORE, .p = pc->pro_p, .backend = be};
    enum vllmc_status rc = VLLMC_OK;
    *declined = false;
    for (int s = 0; s < SLOTS; s++) {
        if (!pc->used[s])
            continue;
        dev[s] = pc->t[s];
        size_t n_bytes = tensor_n_bytes(&pc->t[s]);
        rc = backend_buffer_alloc(be, n_bytes ? n_bytes : 1, &buf[s]);
        if (!rc)
            rc = backend_upload(be, buf[s], pc->t[s].data, n_bytes);
        if (rc)
            goto done;
        dev[s].data = buf[s];
        dev[s].location = backend_location(be);
        if (s == 0)
            call.dst = &dev[0];
        else if (s < PRO)
            call.src[s - 1] = &dev[s];
        else
            pro.src[s - PRO - 1] = &dev[s];
    }
    if (pc->has_prologue) {
        pro.dst = call.src[0];
        pro.src[5] = call.src[1];
        pro.src[6] = call.src[2];
        call.p.prologue = &pro;
    }
    if (!p->supports(&call)) {
        *declined = true;
        goto done;
    }
    rc = p->run(&call);
    if (!rc)
        rc = backend_sync(be);
    for (int s = 0; s < SLOTS && !rc; s++) {
        if (!(pc->outputs & (1u << s)))
            continue;
        const struct tensor *t = &pc->t[s];
        size_t n_bytes = tensor_n_bytes(t);
        int64_t n = tensor_n_elements(t);
        void *host = mem_alloc(n_bytes ? n_bytes : 1);
        out[s] = mem_alloc((size_t)(n ? n : 1) * sizeof(float));
        if (!host || !out[s]) {
            mem_free(host);
            rc = VLLMC_ERR_NOMEM;
            break;
        }
        rc = backend_download(be, host, buf[s], n_bytes);
        dequant_row_fn to_f32 = cpu_dequant_row(t->dtype);
        if (!rc && to_f32)
            to_f32(host, out[s], n);
        for (int64_t e = 0; !rc && t->dtype == DTYPE_I32 && e < n; e++)
            out[s][e] = (float)((const int32_t *)host)[e]; // ids: exact below 2^24
        mem_free(host);
    }
done:
    for (int s = 0; s < SLOTS; s++)
        if (buf[s])
            backend_buffer_free(be, buf[s]);
    return rc;
}

static const struct op_provider *find_provider(struct backend *be, enum op_kind op,
                                               const char *name)
{
    size_t n;
    const struct op_provider *const *all = backend_providers(be, &n);
    for (size_t i = 0; i < n; i++)
        if (all[i]->op == op && !strcmp(all[i]->name, name))
            return all[i];
    return NULL;
}

static void free_outs(float *out[SLOTS])
{
    for (int s = 0; s < SLOTS; s++) {
        mem_free(out[s]);
        out[s] = NULL;
    }
}

// For a failed case: each output's own nmse and its largest difference (the
// element's index in ne[0] units), so a failure points at the output and row.
static void pc_explain(const struct pcase *pc, float *const got[SLOTS], float *const ref[SLOTS])
{
    for (int s = 0; s < SLOTS; s++) {
        if (!(pc->outputs & (1u << s)))
            continue;
        double err = 0, norm = 0, worst = -1;
        int64_t at = 0, n = tensor_n_elements(&pc->t[s]), n0 = pc->t[s].ne[0];
        for (int64_t e = 0; e < n; e++) {
            double d = (double)got[s][e] - ref[s][e];
            err += d * d;
            norm += (double)ref[s][e] * ref[s][e];
            if (fabs(d) > worst) {
                worst = fabs(d);
                at = e;
            }
        }
        printf("  output slot %d: nmse=%.1e, largest difference %.3g at row %lld col %lld "
               "(got %.6g, want %.6g)\n",
               s, norm > 0 ? err / norm : err, worst, (long long)(at / n0), (long long)(at % n0),
               (double)got[s][at], (double)ref[s][at]);
    }
}

// Runs cpu-ref, then every other provider of the op that accepts the case.
static void pc_check(struct parity *pr, struct pcase *pc)
{
    const char *op_name = op_kind_name(pc->op);
    float *ref[SLOTS] = {0};
    bool declined;
    const struct op_provider *ref_p = find_provider(pr->ref_be, pc->op, "cpu-ref");
    enum vllmc_status ref_rc = ref_p ? pc_run(pc, pr->ref_be, ref_p, ref, &declined) : VLLMC_OK;
    if (ref_rc) {
        pr->n_checks++;
        pr->n_failed++;
        printf("op=%s shape=%s dtype=%s provider=cpu-ref error=%s FAIL\n", op_name, pc->shape,
               pc->dtype, vllmc_status_str(ref_rc));
    }
    if (!ref_p || ref_rc || declined) {
        // Without a reference result (e.g. cpu-ref has no converter for a
        // quantized dtype in this build) there is nothing to compare against.
        free_outs(ref);
        return;
    }
    bool plain = pc->wtype == DTYPE_F32 ||
                 (pr->on_cpu && (pc->wtype == DTYPE_F16 || pc->wtype == DTYPE_BF16));
    double bar = plain ? 1e-6 : 5e-4;
    size_t n;
    const struct op_provider *const *all = backend_providers(pr->be, &n);
    for (size_t i = 0; i < n; i++) {
        const struct op_provider *p = all[i];
        if (p->op != pc->op || !strcmp(p->name, "cpu-ref"))
            continue;
        float *got[SLOTS] = {0};
        enum vllmc_status rc = pc_run(pc, pr->be, p, got, &declined);
        if (declined)
            continue;
        pr->n_checks++;
        double err = 0, norm = 0;
        for (int s = 0; s < SLOTS && !rc; s++) {
            if (!(pc->outputs & (1u << s)))
                continue;
            for (int64_t e = 0; e < tensor_n_elements(&pc->t[s]); e++) {
                double d = (double)got[s][e] - ref[s][e];
                err += d * d;
                norm += (double)ref[s][e] * ref[s][e];
            }
        }
        double nmse = norm > 0 ? err / norm : err;
        bool ok = !rc && nmse <= (p->parity_bar > 0 ? p->parity_bar : bar);
        if (pc->exact)
            ok = !rc && err == 0;
        pr->n_failed += !ok;
        if (rc)
            printf("op=%s shape=%s dtype=%s provider=%s error=%s FAIL\n", op_name, pc->shape,
                   pc->dtype, p->name, vllmc_status_str(rc));
        else
            printf("op=%s shape=%s dtype=%s provider=%s nmse=%.1e %s\n", op_name, pc->shape,
                   pc->dtype, p->name, nmse, ok ? "ok" : "FAIL");
        if (!ok && !rc)
            pc_explain(pc, got, ref);
        free_outs(got);
    }
    free_outs(ref);
}

static bool want(const struct parity *pr, enum op_kind op)
{
    return !pr->only_op || !strcmp(pr->only_op, op_kind_name(op));
}

// ---- the grid ----

static const enum dtype weight_types[] = {
    DTYPE_F32,  DTYPE_F16,  DTYPE_BF16, DTYPE_Q4_0,   DTYPE_Q4_1,
    DTYPE_Q5_0, DTYPE_Q5_1, DTYPE_Q8_0, DTYPE_Q2_K,   DTYPE_Q3_K,
    DTYPE_Q4_K, DTYPE_Q5_K, DTYPE_Q6_K, DTYPE_IQ4_NL, DTYPE_IQ4_XS,
    DTYPE_INT4G,
};
#define N_WEIGHT_TYPES (sizeof weight_types / sizeof weight_types[0])

// A weight dtype we can produce (plain, or with a quantizer) for rows of k.
static bool weight_type_usable(enum dtype t, int64_t k)
{
    const struct dtype_info *info = dtype_info(t);
    if (!info || k % info->block_size)
        return false;
    return !info->is_quantized || quant_quantize_row_fn(t);
}

static void grid_matmul(struct parity *pr)
{
    // m, n, k. {3, 67, 512} and {9, 45, 256} give the 256-weight types
    // (k-quants, IQ4_XS) an odd n with few tokens, and more tokens than one
    // GEMV launch takes with an odd n (output rows too unaligned for a GEMM
    // library); the last two give every type rows of a multiple of 16 bytes
    // (Q6_K's 210-byte blocks need k % 2048 == 0), several tiles of the
    // packed GEMV a row. The last three give one token rows of 16, 12 and 8
    // 256-weight items (the lane-item GEMV's tasks of 2, 8 and 4 rows) over
    // an odd n.
    static const int64_t shapes[][3] = {
        {1, 1, 1},      {1, 17, 33},   {1, 64, 256},   {2, 33, 64},   {3, 67, 259},   {7, 128, 512},
        {16, 96, 1024}, {33, 80, 96},  {64, 256, 128}, {5, 300, 768}, {3, 67, 512},   {9, 45, 256},
        {2, 37, 2048},  {1, 21, 8192}, {1, 37, 4096},  {1, 45, 3072}, {1, 131, 2048},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
        for (size_t t = 0; t < N_WEIGHT_TYPES; t++) {
            if (!weight_type_usable(weight_types[t], k))
                continue;
            struct pcase pc = {.op = OP_MATMUL, .wtype = weight_types[t], .outputs = 1};
            bool bias = i % 2 == 1;
            // Every other bias in the weight's own 16-bit type, as Hugging
            // Face checkpoints store one (Qwen2's q|k|v bias in bf16).
            enum dtype bias_type =
                i % 4 == 3 && (weight_types[t] == DTYPE_BF16 || weight_types[t] == DTYPE_F16)
                    ? weight_types[t]
                    : DTYPE_F32;
            snprintf(pc.shape, sizeof pc.shape, "%lld,%lld,%lld%s%s", (long long)m, (long long)n,
                     (long long)k,
                     !bias                    ? ""
                     : bias_type == DTYPE_F32 ? "+bias"
                                              : "+bias_",
                     bias && bias_type != DTYPE_F32 ? dtype_name(bias_type) : "");
            snprintf(pc.dtype, sizeof pc.dtype, "%s", dtype_name(weight_types[t]));
            if (pc_add(&pc, 0, DTYPE_F32, 2, (int64_t[]){n, m}) &&
                pc_add(&pc, 1, DTYPE_F32, 2, (int64_t[]){k, m}) &&
                pc_add(&pc, 2, weight_types[t], 2, (int64_t[]){k, n}) &&
                (!bias || pc_add(&pc, 3, bias_type, 1, (int64_t[]){n})))
                pc_check(pr, &pc);
            pc_free(&pc);
        }
        // GPTQ act-order: int4g weights stored in group order read x through
        // a permutation of its k inputs.
        struct pcase pc = {.op = OP_MATMUL, .wtype = DTYPE_INT4G, .outputs = 1};
        snprintf(pc.shape, sizeof pc.shape, "%lld,%lld,%lld+perm", (long long)m, (long long)n,
                 (long long)k);
        snprintf(pc.dtype, sizeof pc.dtype, "%s", dtype_name(DTYPE_INT4G));
        if (weight_type_usable(DTYPE_INT4G, k) && pc_add(&pc, 0, DTYPE_F32, 2, (int64_t[]){n, m}) &&
            pc_add(&pc, 1, DTYPE_F32, 2, (int64_t[]){k, m}) &&
            pc_add(&pc, 2, DTYPE_INT4G, 2, (int64_t[]){k, n}) &&
            pc_add(&pc, 4, DTYPE_I32, 1, (int64_t[]){k})) {
            int32_t *perm = pc_i32(&pc, 4);
            for (int64_t l = 0; l < k; l++)
                perm[l] = (int32_t)l;
            for (int64_t l = k - 1; l > 0; l--) {
                int64_t j = (int64_t)(rnd_u32() % (uint32_t)(l + 1));
                int32_t tmp = perm[l];
                perm[l] = perm[j];
                perm[j] = tmp;
            }
            pc_check(pr, &pc);
        }
        pc_free(&pc);
    }
}

static void grid_embedding(struct parity *pr)
{
    static const int64_t dims[] = {8, 33, 256};
    for (size_t i = 0; i < 3; i++) {
        for (size_t t = 0; t < N_WEIGHT_TYPES; t++) {
            if (!weight_type_usable(weight_types[t], dims[i]))
                continue;
            struct pcase pc = {.op = OP_EMBEDDING, .wtype = weight_types[t], .outputs = 1};
            snprintf(pc.shape, sizeof pc.shape, "5,%lld", (long long)dims[i]);
            snprintf(pc.dtype, sizeof pc.dtype, "%s", dtype_name(weight_types[t]));
            if (pc_add(&pc, 0, DTYPE_F32, 2, (int64_t[]){dims[i], 5}) &&
                pc_add(&pc, 1, weight_types[t], 2, (int64_t[]){dims[i], 50}) &&
                pc_add(&pc, 2, DTYPE_I32, 1, (int64_t[]){5})) {
                for (int j = 0; j < 5; j++)
                    pc_i32(&pc, 2)[j] = (int32_t)(rnd_u32() % 50);
                pc_check(pr, &pc);
            }
            pc_free(&pc);
        }
    }
}

static void grid_rows(struct parity *pr, enum op_kind op)
{
    static const int64_t shapes[][2] = {
        {1, 3}, {4, 13}, {1, 8}, {3, 64}, {2, 100}, {5, 1024}, {17, 4096}, {9, 2816},
        {1, 896}, {2, 5120}, {3, 8192},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t rows = shapes[i][0], dim = shapes[i][1];
        bool norm = op == OP_RMSNORM || op == OP_ADD_RMSNORM;
        for (int wt = 0; wt < (norm ? 2 : 1); wt++) {
            enum dtype w = wt ? DTYPE_BF16 : DTYPE_F32;
            struct pcase pc = {.op = op, .wtype = DTYPE_F32, .outputs = 1, .p.eps = 1e-5f};
            snprintf(pc.shape, sizeof pc.shape, "%lld,%lld", (long long)rows, (long long)dim);
            snprintf(pc.dtype, sizeof pc.dtype, "f32%s", wt ? ",w=bf16" : "");
            bool ok = pc_add(&pc, 0, DTYPE_F32, 2, (int64_t[]){dim, rows}) &&
                      pc_add(&pc, 1, DTYPE_F32, 2, (int64_t[]){dim, rows});
            if (norm)
                ok = ok && pc_add(&pc, 2, w, 1, (int64_t[]){dim});
            else
                ok = ok && pc_add(&pc, 2, DTYPE_F32, 2, (int64_t[]){dim, rows});
            if (op == OP_ADD_RMSNORM) {
                ok = ok && pc_add(&pc, 3, DTYPE_F32, 2, (int64_t[]){dim, rows});
                pc.outputs |= 1u << 3; // the residual is updated in place
            }
            if (ok)
                pc_check(pr, &pc);
            pc_free(&pc);
        }
    }
}

static void grid_rope(struct parity *pr, enum op_kind op)
{
    // n_tokens, n_heads, head_dim, rope_dim
    static const int64_t shapes[][4] = {
        {1, 4, 64, 64}, {5, 3, 128, 128}, {3, 2, 80, 32}, {7, 8, 64, 48}, {2, 1, 10, 6},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        for (int neox = 0; neox < 2; neox++) {
            int64_t T = shapes[i][0], H = shapes[i][1], D = shapes[i][2], RD = shapes[i][3];
            struct pcase pc = {.op = op, .wtype = DTYPE_F32, .outputs = 1};
            pc.p = (struct op_params){.rope_dim = (int)RD, .rope_neox = neox, .eps = 1e-6f};
            snprintf(pc.shape, sizeof pc.shape, "%lld,%lld,%lld,rope_dim=%lld,%s", (long long)T,
                     (long long)H, (long long)D, (long long)RD, neox ? "neox" : "pairs");
            snprintf(pc.dtype, sizeof pc.dtype, "f32");
            bool ok = pc_add(&pc, 0, DTYPE_F32, 3, (int64_t[]){D, H, T}) &&
                      pc_add(&pc, 1, DTYPE_I32, 1, (int64_t[]){T}) &&
                      pc_add(&pc, 2, DTYPE_F32, 1, (int64_t[]){RD / 2});
            if (op == OP_QK_NORM_ROPE)
                ok = ok && pc_add(&pc, 3, DTYPE_F32, 1, (int64_t[]){D});
            if (ok) {
                for (int64_t t = 0; t < T; t++)
                    pc_i32(&pc, 1)[t] = (int32_t)(rnd_u32() % 8192);
                float *f = pc.t[2].data;
                for (int64_t j = 0; j < RD / 2; j++)
                    f[j] = powf(10000.0f, -2.0f * (float)j / (float)RD);
                pc_check(pr, &pc);
            }
            pc_free(&pc);
        }
    }
}

// SILU_MUL's packed variant: src0 [rows, 2 dim] holds gate|up.
static void grid_silu_mul_packed(struct parity *pr)
{
    static const int64_t shapes[][2] = {{1, 3}, {4, 13}, {3, 64}, {5, 1024}, {17, 3072}, {2, 2816}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t rows = shapes[i][0], dim = shapes[i][1];
        struct pcase pc = {.op = OP_SILU_MUL, .wtype = DTYPE_F32, .outputs = 1};
        snprintf(pc.shape, sizeof pc.shape, "%lld,%lld,packed", (long long)rows, (long long)dim);
        snprintf(pc.dtype, sizeof pc.dtype, "f32");
        if (pc_add(&pc, 0, DTYPE_F32, 2, (int64_t[]){dim, rows}) &&
            pc_add(&pc, 1, DTYPE_F32, 2, (int64_t[]){2 * dim, rows}))
            pc_check(pr, &pc);
        pc_free(&pc);
    }
}

// The fused gate|up matmul with SiLU-mul: W [2 ff, k]; few tokens (the decode
// kernels' range) and more, odd ff and k.
static void grid_matmul_silu_mul(struct parity *pr)
{
    // m, ff, k
    static const int64_t shapes[][3] = {
        {1, 1, 32}, {1, 17, 64}, {2, 96, 256}, {3, 67, 512}, {1, 512, 1024}, {2, 300, 2048}, {5, 33, 128},
    };
    static const enum dtype types[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_Q8_0};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t m = shapes[i][0], ff = shapes[i][1], k = shapes[i][2];
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            if (!weight_type_usable(types[t], k))
                continue;
            struct pcase pc = {.op = OP_MATMUL_SILU_MUL, .wtype = types[t], .outputs = 1};
            snprintf(pc.shape, sizeof pc.shape, "%lld,ff=%lld,%lld", (long long)m, (long long)ff,
                     (long long)k);
            snprintf(pc.dtype, sizeof pc.dtype, "%s", dtype_name(types[t]));
            if (pc_add(&pc, 0, DTYPE_F32, 2, (int64_t[]){ff, m}) &&
                pc_add(&pc, 1, DTYPE_F32, 2, (int64_t[]){k, m}) &&
                pc_add(&pc, 2, types[t], 2, (int64_t[]){k, 2 * ff}))
                pc_check(pr, &pc);
            pc_free(&pc);
        }
    }
}

// The norm before a projection as one op: with and without the residual add
// (and its sum output), a bias, the SiLU-mul of a gate|up weight; one token
// (the decode kernels' range) and more.
static void grid_norm_matmul(struct parity *pr)
{
    // m, n (ff with silu_mul), k, silu_mul
    static const int64_t shapes[][4] = {
        {1, 4096, 1024, 0}, {1, 3072, 1024, 1}, {1, 67, 512, 0},   {1, 33, 128, 1},
        {2, 96, 256, 0},    {1, 520, 4096, 0},  {1, 300, 2048, 1}, {3, 17, 64, 1},
    };
    // The quantized types of Q8_0 and Q4_K_M files (the one-token kernels' norm).
    static const enum dtype types[] = {DTYPE_F32,  DTYPE_F16,  DTYPE_BF16,
                                       DTYPE_Q8_0, DTYPE_Q4_K, DTYPE_Q6_K};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
        bool silu = shapes[i][3];
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            if (!weight_type_usable(types[t], k))
                continue;
            for (int variant = 0; variant < 2; variant++) {
                bool add = variant == 0, bias = !silu && variant == 1;
                struct pcase pc = {.op = OP_NORM_MATMUL, .wtype = types[t], .outputs = 1};
                pc.p = (struct op_params){.eps = 1e-6f, .silu_mul = silu};
                snprintf(pc.shape, sizeof pc.shape, "%lld,%s=%lld,%lld%s%s%s", (long long)m,
                         silu ? "ff" : "n", (long long)n, (long long)k, add ? ",add" : "",
                         bias ? ",bias" : "", silu ? ",silu_mul" : "");
                snprintf(pc.dtype, sizeof pc.dtype, "%s", dtype_name(types[t]));
                bool ok = pc_add(&pc, 0, DTYPE_F32, 2, (int64_t[]){n, m}) &&
                          pc_add(&pc, 1, DTYPE_F32, 2, (int64_t[]){k, m}) &&
                          pc_add(&pc, 3, variant ? DTYPE_BF16 : DTYPE_F32, 1, (int64_t[]){k}) &&
                          pc_add(&pc, 4, types[t], 2, (int64_t[]){k, silu ? 2 * n : n});
                if (add) {
                    ok = ok && pc_add(&pc, 2, DTYPE_F32, 2, (int64_t[]){k, m}) &&
                         pc_add(&pc, 6, DTYPE_F32, 2, (int64_t[]){k, m});
                    pc.outputs |= 1u << 6; // the sum
                }
                if (bias)
                    ok = ok && pc_add(&pc, 5, DTYPE_F32, 1, (int64_t[]){n});
                if (ok)
                    pc_check(pr, &pc);
                pc_free(&pc);
            }
        }
    }
}

// The fused post-QKV step: both RoPE layouts, rope_dim < head_dim, GQA
// ratios 1 to 4 and odd head counts, head_dim 10 to 256, with and without the
// q/k norm, every cache dtype; every third token's slot is negative.
static void grid_qkv_rope_store(struct parity *pr)
{
    // n_tokens, n_heads, n_kv_heads, head_dim, rope_dim, block_size, n_blocks
    static const int64_t shapes[][7] = {
        {1, 4, 2, 64, 64, 16, 4},    {5, 3, 1, 128, 128, 16, 4}, {3, 2, 2, 80, 32, 8, 4},
        {7, 8, 2, 64, 48, 16, 2},    {2, 1, 1, 10, 6, 4, 2},     {4, 6, 2, 256, 256, 16, 2},
        {9, 5, 5, 96, 64, 16, 3},    {1, 16, 8, 128, 128, 16, 8}, {33, 12, 4, 128, 64, 16, 4},
    };
    static const enum dtype caches[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t T = shapes[i][0], H = shapes[i][1], KVH = shapes[i][2], D = shapes[i][3];
        int64_t RD = shapes[i][4], BS = shapes[i][5], NB = shapes[i][6];
        for (int variant = 0; variant < 4; variant++) {
            bool neox = variant & 1, norm = variant & 2;
            enum dtype ct = caches[(i + (size_t)variant) % 3];
            enum dtype wn = i % 2 ? DTYPE_BF16 : DTYPE_F32;
            struct pcase pc = {.op = OP_QKV_ROPE_STORE, .wtype = ct};
            pc.outputs = 1u | (1u << 6) | (1u << 7);
            pc.p = (struct op_params){.rope_dim = (int)RD, .rope_neox = neox, .eps = 1e-6f};
            snprintf(pc.shape, sizeof pc.shape, "%lld,h=%lld,kv=%lld,d=%lld,rope_dim=%lld,%s%s",
                     (long long)T, (long long)H, (long long)KVH, (long long)D, (long long)RD,
                     neox ? "neox" : "pairs", norm ? ",qk_norm" : "");
            snprintf(pc.dtype, sizeof pc.dtype, "cache=%s%s%s", dtype_name(ct),
                     norm ? ",w=" : "", norm ? dtype_name(wn) : "");
            bool ok = pc_add(&pc, 0, DTYPE_F32, 3, (int64_t[]){D, H, T}) &&
                      pc_add(&pc, 1, DTYPE_F32, 2, (int64_t[]){(H + 2 * KVH) * D, T}) &&
                      pc_add(&pc, 2, DTYPE_I32, 1, (int64_t[]){T}) &&
                      pc_add(&pc, 3, DTYPE_F32, 1, (int64_t[]){RD / 2}) &&
                      (!norm || (pc_add(&pc, 4, wn, 1, (int64_t[]){D}) &&
                                 pc_add(&pc, 5, wn, 1, (int64_t[]){D}))) &&
                      pc_add(&pc, 6, ct, 4, (int64_t[]){D, KVH, BS, NB}) &&
                      pc_add(&pc, 7, ct, 4, (int64_t[]){D, KVH, BS, NB}) &&
                      pc_add(&pc, 8, DTYPE_I32, 1, (int64_t[]){T});
            if (ok) {
                for (int64_t t = 0; t < T; t++) {
                    pc_i32(&pc, 2)[t] = (int32_t)(rnd_u32() % 8192);
                    pc_i32(&pc, 8)[t] = t % 3 == 2 ? -1 : (int32_t)((t * 7 + 3) % (BS * NB));
                }
                float *f = pc.t[3].data;
                for (int64_t j = 0; j < RD / 2; j++)
                    f[j] = powf(10000.0f, -2.0f * (float)j / (float)RD);
                pc_check(pr, &pc);
            }
            pc_free(&pc);
        }
    }
}

static void grid_kv_store(struct parity *pr)
{
    // n_tokens, n_kv_heads, head_dim, block_size, n_blocks
    // (the last one large enough for a CPU provider to split it over threads)
    static const int64_t shapes[][5] = {
        {5, 2, 64, 16, 8}, {3, 1, 8, 4, 4}, {9, 4, 128, 16, 16}, {300, 8, 128, 16, 32}};
    static const enum dtype caches[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    for (size_t i = 0; i < 4; i++) {
        for (size_t ct = 0; ct < 3; ct++) {
            int64_t T = shapes[i][0], KVH = shapes[i][1], D = shapes[i][2];
            int64_t BS = shapes[i][3], NB = shapes[i][4];
            struct pcase pc = {.op = OP_KV_STORE, .wtype = DTYPE_F32};
            pc.outputs = (1u << 3) | (1u << 4);
            snprintf(pc.shape, sizeof pc.shape, "%lld,%lld,%lld,block_size=%lld", (long long)T,
                     (long long)KVH, (long long)D, (long long)BS);
            snprintf(pc.dtype, sizeof pc.dtype, "%s", dtype_name(caches[ct]));
            if (pc_add(&pc, 1, DTYPE_F32, 3, (int64_t[]){D, KVH, T}) &&
                pc_add(&pc, 2, DTYPE_F32, 3, (int64_t[]){D, KVH, T}) &&
                pc_add(&pc, 3, caches[ct], 4, (int64_t[]){D, KVH, BS, NB}) &&
                pc_add(&pc, 4, caches[ct], 4, (int64_t[]){D, KVH, BS, NB}) &&
                pc_add(&pc, 5, DTYPE_I32, 1, (int64_t[]){T})) {
                // Distinct slots spread over the cache; every third token skipped.
                for (int64_t t = 0; t < T; t++)
                    pc_i32(&pc, 5)[t] = t % 3 == 2 ? -1 : (int32_t)((t * 7 + 3) % (BS * NB));
                pc_check(pr, &pc);
            }
            pc_free(&pc);
        }
    }
}

static void grid_select_ids(struct parity *pr)
{
    // n input ids, m sampled ids (a step's device sampler rows)
    static const int64_t shapes[][2] = {{1, 1}, {7, 3}, {64, 64}, {300, 17}};
    for (size_t i = 0; i < 4; i++) {
        int64_t n = shapes[i][0], m = shapes[i][1];
        struct pcase pc = {.op = OP_SELECT_IDS, .wtype = DTYPE_I32, .exact = true};
        pc.outputs = 1u << 0;
        snprintf(pc.shape, sizeof pc.shape, "n=%lld,m=%lld", (long long)n, (long long)m);
        snprintf(pc.dtype, sizeof pc.dtype, "i32");
        if (pc_add(&pc, 0, DTYPE_I32, 1, (int64_t[]){n}) &&
            pc_add(&pc, 1, DTYPE_I32, 1, (int64_t[]){m}) &&
            pc_add(&pc, 2, DTYPE_I32, 1, (int64_t[]){n})) {
            // Vocabulary-sized ids; about half the tokens take a sampled id.
            for (int64_t t = 0; t < n; t++) {
                pc_i32(&pc, 0)[t] = (int32_t)(rnd_u32() % 151936);
                pc_i32(&pc, 2)[t] = rnd_u32() % 2 ? (int32_t)(rnd_u32() % (uint32_t)m) : -1;
            }
            for (int64_t j = 0; j < m; j++)
                pc_i32(&pc, 1)[j] = (int32_t)(rnd_u32() % 151936);
            pc_check(pr, &pc);
        }
        pc_free(&pc);
    }
}

struct attn_config {
    int64_t n_heads, n_kv_heads, head_dim, block_size;
    int n_seqs;
    int32_t seq_len[8], n_q[8];
};

static void grid_attention(struct parity *pr)
{
    static const struct attn_config configs[] = {
        {4, 2, 64, 16, 4, {1, 37, 70, 16}, {1, 1, 5, 16}},
        {8, 8, 128, 16, 2, {300, 5}, {1, 5}},
        {6, 2, 8, 4, 2, {9, 13}, {9, 1}},
        {4, 1, 36, 8, 1, {20}, {3}},
        {16, 2, 64, 32, 3, {33, 64, 2}, {2, 64, 1}},
        // Decode-only batches (one query per sequence), long and short contexts.
        {8, 2, 128, 16, 3, {300, 1, 77}, {1, 1, 1}},
        {32, 8, 128, 16, 2, {1000, 513}, {1, 1}},
        {12, 1, 256, 16, 2, {40, 129}, {1, 1}},
        // The pipelined decode kernel: GQA groups 1, 2, 8; head_dim 32 and
        // 256; a block size of 64, so that 32-key splits start inside a block.
        {16, 8, 128, 16, 3, {700, 33, 2}, {1, 1, 1}},
        {16, 2, 64, 16, 2, {513, 1000}, {1, 1}},
        {4, 4, 32, 16, 2, {50, 1}, {1, 1}},
        {8, 1, 128, 64, 2, {1025, 47}, {1, 1}},
        {8, 4, 256, 16, 2, {333, 64}, {1, 1}},
        {6, 6, 48, 16, 3, {190, 1, 77}, {1, 1, 1}}, // stories-sized heads
        {6, 6, 48, 16, 2, {40, 21}, {40, 3}},
        // Prefill (tensor cores on CUDA): 1, 17, 128 and 300 query tokens, contexts
        // off the block size, GQA ratios 1, 2, 4 and 8, head sizes 64 and 128.
        {4, 4, 128, 16, 1, {1}, {1}},
        {4, 4, 64, 16, 1, {17}, {17}},
        {8, 4, 128, 16, 1, {133}, {128}},
        {8, 2, 64, 32, 1, {300}, {300}},
        {8, 1, 128, 16, 1, {300}, {300}},
        {8, 1, 64, 16, 2, {145, 17}, {128, 17}},
        // Chunked prefill: decodes beside chunks whose context holds a cached prefix.
        {8, 2, 128, 16, 4, {301, 90, 317, 1}, {1, 1, 17, 1}},
        {16, 2, 64, 16, 4, {33, 200, 1, 250}, {1, 128, 1, 40}},
        {4, 4, 128, 32, 3, {77, 350, 12}, {1, 300, 12}},
        // Decode batches of many sequences (tensor cores on CUDA for 16-bit
        // caches): GQA groups 2, 4 and 8, head sizes 64 and 128, block size 32.
        {16, 8, 128, 16, 8, {600, 513, 64, 1, 700, 129, 300, 17}, {1, 1, 1, 1, 1, 1, 1, 1}},
        {32, 8, 128, 16, 8, {333, 16, 700, 65, 480, 2, 257, 640}, {1, 1, 1, 1, 1, 1, 1, 1}},
        {64, 8, 128, 32, 8, {90, 640, 31, 512, 700, 1, 300, 129}, {1, 1, 1, 1, 1, 1, 1, 1}},
        {16, 4, 64, 16, 8, {600, 7, 513, 300, 80, 700, 15, 256}, {1, 1, 1, 1, 1, 1, 1, 1}},
    };
    static const enum dtype caches[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        const struct attn_config *a = &configs[i];
        int64_t n_tokens = 0, max_blocks = 0, n_blocks = 3;
        for (int s = 0; s < a->n_seqs; s++) {
            int64_t nb = (a->seq_len[s] + a->block_size - 1) / a->block_size;
            n_tokens += a->n_q[s];
            n_blocks += nb;
            max_blocks = nb > max_blocks ? nb : max_blocks;
        }
        for (size_t ct = 0; ct < 3; ct++) {
            struct pcase pc = {.op = OP_ATTENTION, .wtype = DTYPE_F32, .outputs = 1};
            pc.p.scale = 1.0f / sqrtf((float)a->head_dim);
            // The optional bounds select other kernels on some backends
            // (decode-only batches); two of each config's three dtypes give them.
            if ((i + ct) % 3 != 1) {
                for (int s = 0; s < a->n_seqs; s++) {
                    if (a->seq_len[s] > pc.p.max_seq_len)
                        pc.p.max_seq_len = a->seq_len[s];
                    if (a->n_q[s] > pc.p.max_q_len)
                        pc.p.max_q_len = a->n_q[s];
                }
            }
            int len = snprintf(pc.shape, sizeof pc.shape,
                               "h=%lld,kv=%lld,d=%lld,bs=%lld,seqs=", (long long)a->n_heads,
                               (long long)a->n_kv_heads, (long long)a->head_dim,
                               (long long)a->block_size);
            for (int s = 0; s < a->n_seqs && len < (int)sizeof pc.shape; s++)
                len += snprintf(pc.shape + len, sizeof pc.shape - (size_t)len, "%s%d/%d",
                                s ? "+" : "", (int)a->n_q[s], (int)a->seq_len[s]);
            snprintf(pc.dtype, sizeof pc.dtype, "%s", dtype_name(caches[ct]));
            int64_t D = a->head_dim, KVH = a->n_kv_heads, BS = a->block_size;
            bool ok = pc_add(&pc, 0, DTYPE_F32, 3, (int64_t[]){D, a->n_heads, n_tokens}) &&
                      pc_add(&pc, 1, DTYPE_F32, 3, (int64_t[]){D, a->n_heads, n_tokens}) &&
                      pc_add(&pc, 2, caches[ct], 4, (int64_t[]){D, KVH, BS, n_blocks}) &&
                      pc_add(&pc, 3, caches[ct], 4, (int64_t[]){D, KVH, BS, n_blocks}) &&
                      pc_add(&pc, 4, DTYPE_I32, 2, (int64_t[]){max_blocks, a->n_seqs}) &&
                      pc_add(&pc, 5, DTYPE_I32, 1, (int64_t[]){a->n_seqs}) &&
                      pc_add(&pc, 6, DTYPE_I32, 1, (int64_t[]){a->n_seqs + 1});
            if (ok) {
                // Blocks handed out in a shuffled order, as a block pool would.
                int32_t next = 0, *tables = pc_i32(&pc, 4), *qsl = pc_i32(&pc, 6);
                int32_t stride = 5; // coprime with every n_blocks above
                while (n_blocks % stride == 0)
                    stride++;
                for (int s = 0; s < a->n_seqs; s++) {
                    for (int64_t b = 0; b < max_blocks; b++)
                        tables[s * max_blocks + b] = (int32_t)((next++ * stride) % n_blocks);
                    pc_i32(&pc, 5)[s] = a->seq_len[s];
                    qsl[s + 1] = qsl[s] + a->n_q[s];
                }
                pc_check(pr, &pc);
            }
            pc_free(&pc);
        }
    }
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

// Decode attention with its qkv_rope_store prologue: one token a sequence,
// short and long contexts, both RoPE layouts, with and without the q/k norm,
// every cache dtype; the new token's slot is its place in the block table.
// Outputs: the attention, q, and both caches.
static void grid_attention_prologue(struct parity *pr)
{
    static const struct attn_config configs[] = {
        {16, 8, 128, 16, 1, {1}, {1}},
        {16, 8, 128, 16, 1, {100}, {1}},
        {32, 8, 128, 16, 1, {130}, {1}},
        {8, 8, 64, 16, 3, {40, 2, 77}, {1, 1, 1}},
        {16, 4, 128, 16, 2, {600, 33}, {1, 1}},
        {16, 8, 128, 16, 8, {600, 513, 64, 1, 700, 129, 300, 17}, {1, 1, 1, 1, 1, 1, 1, 1}},
    };
    static const enum dtype caches[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        const struct attn_config *a = &configs[i];
        // Every table entry its own block (3 spare): the new token's slot is
        // then read by no other key, as in the engine, where the block being
        // written belongs to one sequence (ATTENTION's prologue contract).
        int64_t max_blocks = 0;
        for (int s = 0; s < a->n_seqs; s++) {
            int64_t nb = (a->seq_len[s] + a->block_size - 1) / a->block_size;
            max_blocks = nb > max_blocks ? nb : max_blocks;
        }
        const int64_t n_blocks = a->n_seqs * max_blocks + 3;
        const int64_t D = a->head_dim, H = a->n_heads, KVH = a->n_kv_heads, BS = a->block_size;
        const int64_t T = a->n_seqs;
        for (int variant = 0; variant < 6; variant++) {
            const enum dtype ct = caches[variant % 3];
            const bool neox = variant < 3, norm = variant % 2 == 0;
            struct pcase pc = {.op = OP_ATTENTION, .wtype = ct, .has_prologue = true};
            pc.outputs = 1u | (1u << 1) | (1u << 2) | (1u << 3);
            pc.p.scale = 1.0f / sqrtf((float)D);
            pc.p.max_q_len = 1;
            for (int s = 0; s < a->n_seqs; s++)
                if (a->seq_len[s] > pc.p.max_seq_len)
                    pc.p.max_seq_len = a->seq_len[s];
            pc.pro_p = (struct op_params){.eps = 1e-6f, .rope_dim = (int)D, .rope_neox = neox};
            int len = snprintf(pc.shape, sizeof pc.shape,
                               "h=%lld,kv=%lld,d=%lld,%s%s,ctx=", (long long)H, (long long)KVH,
                               (long long)D, neox ? "neox" : "pairs", norm ? ",qk_norm" : "");
            for (int s = 0; s < a->n_seqs && len < (int)sizeof pc.shape; s++)
                len += snprintf(pc.shape + len, sizeof pc.shape - (size_t)len, "%s%d", s ? "+" : "",
                                (int)a->seq_len[s]);
            snprintf(pc.dtype, sizeof pc.dtype, "cache=%s,after qkv_rope_store", dtype_name(ct));
            bool ok = pc_add(&pc, 0, DTYPE_F32, 3, (int64_t[]){D, H, T}) &&
                      pc_add(&pc, 1, DTYPE_F32, 3, (int64_t[]){D, H, T}) &&
                      pc_add(&pc, 2, ct, 4, (int64_t[]){D, KVH, BS, n_blocks}) &&
                      pc_add(&pc, 3, ct, 4, (int64_t[]){D, KVH, BS, n_blocks}) &&
                      pc_add(&pc, 4, DTYPE_I32, 2, (int64_t[]){max_blocks, T}) &&
                      pc_add(&pc, 5, DTYPE_I32, 1, (int64_t[]){T}) &&
                      pc_add(&pc, 6, DTYPE_I32, 1, (int64_t[]){T + 1}) &&
                      pc_add(&pc, PRO + 1, DTYPE_F32, 2, (int64_t[]){(H + 2 * KVH) * D, T}) &&
                      pc_add(&pc, PRO + 2, DTYPE_I32, 1, (int64_t[]){T}) &&
                      pc_add(&pc, PRO + 3, DTYPE_F32, 1, (int64_t[]){D / 2}) &&
                      (!norm || (pc_add(&pc, PRO + 4, DTYPE_BF16, 1, (int64_t[]){D}) &&
                                 pc_add(&pc, PRO + 5, DTYPE_BF16, 1, (int64_t[]){D}))) &&
                      pc_add(&pc, PRO + 8, DTYPE_I32, 1, (int64_t[]){T});
            if (ok) {
                int32_t next = 0, *tables = pc_i32(&pc, 4), *qsl = pc_i32(&pc, 6);
                int32_t stride = 5; // coprime with n_blocks: a permutation
                while (gcd64(n_blocks, stride) != 1)
                    stride++;
                for (int s = 0; s < a->n_seqs; s++) {
                    for (int64_t b = 0; b < max_blocks; b++)
                        tables[s * max_blocks + b] = (int32_t)((next++ * stride) % n_blocks);
                    const int32_t p = a->seq_len[s] - 1;
                    pc_i32(&pc, 5)[s] = a->seq_len[s];
                    qsl[s + 1] = qsl[s] + 1;
                    pc_i32(&pc, PRO + 2)[s] = p;
                    pc_i32(&pc, PRO + 8)[s] =
                        (int32_t)(tables[s * max_blocks + p / BS] * BS + p % BS);
                }
                float *f = pc.t[PRO + 3].data;
                for (int64_t j = 0; j < D / 2; j++)
                    f[j] = powf(10000.0f, -2.0f * (float)j / (float)D);
                pc_check(pr, &pc);
            }
            pc_free(&pc);
        }
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: vllmc op-parity [--device cpu|cuda] [--op NAME] [--threads N]\n"
               "Checks every op provider of the device against cpu-ref by NMSE on random\n"
               "inputs; prints one line per check and exits 1 on any failure.\n");
}

int op_parity_main(int argc, char **argv)
{
    const char *device = "cpu";
    struct parity pr = {0};
    struct backend_options o;
    backend_options_default(&o);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            device = argv[++i];
        } else if (!strcmp(argv[i], "--op") && i + 1 < argc) {
            pr.only_op = argv[++i];
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            o.n_threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (pr.only_op) {
        bool known = false;
        for (int op = 0; op < OP_KIND_COUNT; op++)
            known |= !strcmp(pr.only_op, op_kind_name((enum op_kind)op));
        if (!known) {
            fprintf(stderr, "op-parity: unknown op '%s'\n", pr.only_op);
            return 2;
        }
    }
    // Every provider is checked, whatever VLLMC_OP_PROVIDER_DISABLE says.
    o.disable = "";
    struct err err = {0};
    if (backend_create("cpu", &o, &pr.ref_be, &err) || backend_create(device, &o, &pr.be, &err)) {
        fprintf(stderr, "op-parity: %s\n", err.msg);
        backend_free(pr.ref_be);
        return 1;
    }
    pr.on_cpu = !strcmp(backend_name(pr.be), "cpu");
    if (want(&pr, OP_EMBEDDING))
        grid_embedding(&pr);
    if (want(&pr, OP_RMSNORM))
        grid_rows(&pr, OP_RMSNORM);
    if (want(&pr, OP_ADD_RMSNORM))
        grid_rows(&pr, OP_ADD_RMSNORM);
    if (want(&pr, OP_MATMUL))
        grid_matmul(&pr);
    if (want(&pr, OP_ROPE))
        grid_rope(&pr, OP_ROPE);
    if (want(&pr, OP_QK_NORM_ROPE))
        grid_rope(&pr, OP_QK_NORM_ROPE);
    if (want(&pr, OP_SILU_MUL)) {
        grid_rows(&pr, OP_SILU_MUL);
        grid_silu_mul_packed(&pr);
    }
    if (want(&pr, OP_ADD))
        grid_rows(&pr, OP_ADD);
    if (want(&pr, OP_KV_STORE))
        grid_kv_store(&pr);
    if (want(&pr, OP_MATMUL_SILU_MUL))
        grid_matmul_silu_mul(&pr);
    if (want(&pr, OP_NORM_MATMUL))
        grid_norm_matmul(&pr);
    if (want(&pr, OP_QKV_ROPE_STORE))
        grid_qkv_rope_store(&pr);
    if (want(&pr, OP_ATTENTION)) {
        grid_attention(&pr);
        grid_attention_prologue(&pr);
    }
    if (want(&pr, OP_SELECT_IDS))
        grid_select_ids(&pr);
    printf("op-parity: device=%s checks=%d failed=%d\n", device, pr.n_checks, pr.n_failed);
    backend_free(pr.be);
    backend_free(pr.ref_be);
    return pr.n_failed ? 1 : 0;
}
