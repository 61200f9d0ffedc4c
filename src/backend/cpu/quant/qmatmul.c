// The quantized-matmul driver (see qmatmul.h): quantize the activation rows
// once per call, then walk weight-row blocks on the thread pool; each task
// keeps its weight block hot in cache while all tokens stream through it.
#include "backend/cpu/quant/qmatmul.h"

#include <string.h>

#include "backend/backend_impl.h"
#include "backend/cpu/cpu_ops.h"
#include "core/alloc.h"

// Weight rows per task: small enough to balance two to a few dozen threads,
// large enough that a task's activations are read once per 16 weight rows.
#define QMM_ROW_BLOCK 16
#define QMM_TOKEN_BLOCK 8 // tokens quantized per task
#define QMM_PREFETCH_TILES 2 // decode: how many 4-row tiles ahead to prefetch
#define QMM_R_DECODE 1     // weight rows per tile when there is one token

const struct qmm_type_kernel *qmm_find_kernel(const struct qmm_isa *isa, enum dtype t)
{
    for (int i = 0; i < isa->n_kernels; i++)
        if (isa->kernels[i].dtype == t)
            return &isa->kernels[i];
    return NULL;
}

static const struct qmm_quad_kernel *qmm_find_quad_kernel(const struct qmm_isa *isa,
                                                          enum dtype t)
{
    for (int i = 0; isa->quad && i < isa->quad->n_kernels; i++)
        if (isa->quad->kernels[i].dtype == t)
            return &isa->quad->kernels[i];
    return NULL;
}

bool qmm_has_type(const struct qmm_isa *isa, enum dtype t)
{
    return qmm_find_quad_kernel(isa, t) || qmm_find_kernel(isa, t);
}

bool qmm_supports(const struct qmm_isa *isa, const struct op_call *c)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2];
    if (!w || !cpu_f32_rows(c->dst) || !cpu_f32_rows(x) || !tensor_rows_contiguous(w))
        return false;
    const struct qmm_quad_kernel *qk = qmm_find_quad_kernel(isa, w->dtype);
    const struct qmm_type_kernel *kern = qmm_find_kernel(isa, w->dtype);
    int k_multiple = qk ? qk->k_multiple : kern ? kern->k_multiple : 0;
    return k_multiple && w->ne[0] == x->ne[0] && x->ne[0] % k_multiple == 0 &&
           w->n_dims == 2 && (!b || cpu_is_plain_float(b->dtype));
}

struct qmm_ctx {
    const struct qmm_isa *isa;
    const struct qmm_type_kernel *kern;
    const struct op_call *c;
    int64_t m, n, k;
    uint8_t *act;     // scratch: [m, qmm_act_row_bytes(k)]
    size_t act_row_bytes;
};

static void qmm_quantize_task(void *p, int task, int thread)
{
    (void)thread;
    const struct qmm_ctx *ctx = p;
    int64_t i0 = (int64_t)task * QMM_TOKEN_BLOCK;
    int64_t i1 = i0 + QMM_TOKEN_BLOCK < ctx->m ? i0 + QMM_TOKEN_BLOCK : ctx->m;
    for (int64_t i = i0; i < i1; i++)
        ctx->isa->quantize(cpu_row(ctx->c->src[0], i), ctx->k, ctx->kern->zp,
                           ctx->act + (size_t)i * ctx->act_row_bytes);
}

static void qmm_matmul_task(void *p, int task, int thread)
{
    (void)thread;
    const struct qmm_ctx *ctx = p;
    const struct tensor *w = ctx->c->src[1], *bias = ctx->c->src[2], *y = ctx->c->dst;
    int64_t j0 = (int64_t)task * QMM_ROW_BLOCK;
    int64_t j1 = j0 + QMM_ROW_BLOCK < ctx->n ? j0 + QMM_ROW_BLOCK : ctx->n;
    const uint8_t *wr[QMM_TILE], *ar[QMM_TILE];
    float out[QMM_TILE * QMM_TILE];
    // With a single token, weight rows are read one after the other: one
    // sequential stream prefetches better than several interleaved ones.
    const int r_max = ctx->m == 1 ? QMM_R_DECODE : QMM_TILE;
    for (int64_t i = 0; i < ctx->m; i += QMM_TILE) {
        int C = ctx->m - i < QMM_TILE ? (int)(ctx->m - i) : QMM_TILE;
        for (int cc = 0; cc < C; cc++)
            ar[cc] = ctx->act + (size_t)(i + cc) * ctx->act_row_bytes;
        for (int64_t j = j0; j < j1; j += r_max) {
            int R = j1 - j < r_max ? (int)(j1 - j) : r_max;
            for (int r = 0; r < R; r++)
                wr[r] = tensor_row(w, j + r);
            ctx->kern->tile(R, C, wr, ar, ctx->k, out);
            for (int cc = 0; cc < C; cc++) {
                float *yr = (float *)cpu_row(y, i + cc) + j;
                for (int r = 0; r < R; r++)
                    yr[r] = out[r * QMM_TILE + cc] +
                            (bias ? cpu_load(bias->dtype, bias->data, j + r) : 0.0f);
            }
        }
    }
}

// Scratch for the quantized activations: the backend's, reused from call to
// call, or for a call without a backend an allocation the caller frees (*owned).
static uint8_t *qmm_scratch(const struct op_call *c, size_t n_bytes, uint8_t **owned)
{
    *owned = NULL;
    if (c->backend)
        return op_scratch(c, n_bytes);
    *owned = mem_alloc_aligned(64, n_bytes);
    return *owned;
}

// ---- the token-quad path ----

struct qmm_quad_ctx {
    const struct qmm_quad_isa *isa;
    const struct qmm_quad_kernel *kern;
    const struct op_call *c;
    int64_t m, n, k;
    uint8_t *act; // scratch: [ceil(m / 4), qmm_quad_bytes(k)]
    size_t quad_bytes;
};

static void qmm_quad_quantize_task(void *p, int task, int thread)
{
    (void)thread;
    const struct qmm_quad_ctx *ctx = p;
    int64_t i0 = (int64_t)task * QMM_TOKEN_BLOCK;
    int64_t i1 = i0 + QMM_TOKEN_BLOCK < ctx->m ? i0 + QMM_TOKEN_BLOCK : ctx->m;
    for (int64_t i = i0; i < i1; i++)
        ctx->isa->quantize(cpu_row(ctx->c->src[0], i), (int)(i % 4), ctx->k, ctx->kern->zp,
                           ctx->act + (size_t)(i / 4) * ctx->quad_bytes);
}

// Rows j..j + R - 1 of dst for tokens i..i + C - 1 from out[r * stride + c], plus the bias.
static void qmm_quad_store(const struct qmm_quad_ctx *ctx, int64_t i, int C, int64_t j, int R,
                           const float *out, int stride)
{
    const struct tensor *bias = ctx->c->src[2];
    float b[4] = {0};
    for (int r = 0; bias && r < R; r++)
        b[r] = cpu_load(bias->dtype, bias->data, j + r);
    for (int c = 0; c < C; c++) {
        float *yr = (float *)cpu_row(ctx->c->dst, i + c) + j;
        for (int r = 0; r < R; r++)
            yr[r] = out[r * stride + c] + b[r];
    }
}

static void qmm_quad_matmul_task(void *p, int task, int thread)
{
    (void)thread;
    const struct qmm_quad_ctx *ctx = p;
    const struct tensor *w = ctx->c->src[1];
    int64_t j0 = (int64_t)task * QMM_ROW_BLOCK;
    int64_t j1 = j0 + QMM_ROW_BLOCK < ctx->n ? j0 + QMM_ROW_BLOCK : ctx->n;
    const uint8_t *wr[4], *ar[QMM_QUAD_G];
    float out[4 * 4 * QMM_QUAD_G];
    if (ctx->m == 1) {
        const size_t pf_ahead = QMM_PREFETCH_TILES * 4 * dtype_row_bytes(w->dtype, ctx->k);
        for (int64_t j = j0; j < j1; j += 4) {
            int R = j1 - j < 4 ? (int)(j1 - j) : 4;
            // Short tiles repeat their last row: the same arithmetic, outputs dropped.
            for (int r = 0; r < 4; r++)
                wr[r] = tensor_row(w, j + (r < R ? r : R - 1));
            ctx->kern->gemv(wr, ctx->act, ctx->k, (const uint8_t *)tensor_row(w, j) + pf_ahead,
                            out);
            qmm_quad_store(ctx, 0, 1, j, R, out, 1);
        }
        return;
    }
    const int64_t n_quads = (ctx->m + 3) / 4;
    for (int64_t q = 0; q < n_quads; q += QMM_QUAD_G) {
        int G = n_quads - q < QMM_QUAD_G ? (int)(n_quads - q) : QMM_QUAD_G;
        for (int g = 0; g < G; g++)
            ar[g] = ctx->act + (size_t)(q + g) * ctx->quad_bytes;
        for (int64_t j = j0; j < j1; j += 4) {
            int R = j1 - j < 4 ? (int)(j1 - j) : 4;
            for (int r = 0; r < 4; r++)
                wr[r] = tensor_row(w, j + (r < R ? r : R - 1));
            ctx->kern->tile(G, wr, ar, ctx->k, out);
            int C = ctx->m - 4 * q < 4 * G ? (int)(ctx->m - 4 * q) : 4 * G;
            qmm_quad_store(ctx, 4 * q, C, j, R, out, 4 * QMM_QUAD_G);
        }
    }
}

static enum vllmc_status qmm_run_quad(const struct qmm_isa *isa,
                                      const struct qmm_quad_kernel *kern, const struct op_call *c)
{
    struct qmm_quad_ctx ctx = {
        .isa = isa->quad,
        .kern = kern,
        .c = c,
        .m = tensor_n_rows(c->src[0]),
        .n = c->src[1]->ne[1],
        .k = c->src[0]->ne[0],
    };
    if (ctx.m == 0 || ctx.n == 0)
        return VLLMC_OK;
    ctx.quad_bytes = qmm_quad_bytes(ctx.k);
    const int64_t n_quads = (ctx.m + 3) / 4;
    // About k * 2.1 bytes per token.
    uint8_t *owned;
    ctx.act = qmm_scratch(c, (size_t)n_quads * ctx.quad_bytes, &owned);
    if (!ctx.act)
        return op_fail(c, VLLMC_ERR_NOMEM, "%s: out of memory for %lld activation rows",
                       isa->name, (long long)ctx.m);
    // The empty slots of a short last quad stay zero: their lanes compute on
    // zeros and are dropped. (A lone token is read from its slot alone.)
    if (ctx.m > 1 && ctx.m % 4)
        memset(ctx.act + (size_t)(n_quads - 1) * ctx.quad_bytes, 0, ctx.quad_bytes);
    struct threadpool *pool = op_call_pool(c);
    threadpool_run(pool, qmm_quad_quantize_task, &ctx,
                   (int)((ctx.m + QMM_TOKEN_BLOCK - 1) / QMM_TOKEN_BLOCK));
    // Each thread's blocks in order: a block's lone-token tiles prefetch past
    // its end into the block the same thread runs next.
    threadpool_run_shares(pool, qmm_quad_matmul_task, &ctx,
                          (int)((ctx.n + QMM_ROW_BLOCK - 1) / QMM_ROW_BLOCK));
    mem_free(owned);
    return VLLMC_OK;
}

enum vllmc_status qmm_run(const struct qmm_isa *isa, const struct op_call *c)
{
    const struct qmm_quad_kernel *qk = qmm_find_quad_kernel(isa, c->src[1]->dtype);
    if (qk)
        return qmm_run_quad(isa, qk, c);
    struct qmm_ctx ctx = {
        .isa = isa,
        .kern = qmm_find_kernel(isa, c->src[1]->dtype),
        .c = c,
        .m = tensor_n_rows(c->src[0]),
        .n = c->src[1]->ne[1],
        .k = c->src[0]->ne[0],
    };
    if (!ctx.kern)
        return op_fail(c, VLLMC_ERR_UNSUPPORTED, "%s: no kernel for %s", isa->name,
                       dtype_name(c->src[1]->dtype));
    if (ctx.m == 0 || ctx.n == 0)
        return VLLMC_OK;
    ctx.act_row_bytes = qmm_act_row_bytes(ctx.k);
    // About k * 3.1 bytes per token.
    uint8_t *owned;
    ctx.act = qmm_scratch(c, (size_t)ctx.m * ctx.act_row_bytes, &owned);
    if (!ctx.act)
        return op_fail(c, VLLMC_ERR_NOMEM, "%s: out of memory for %lld activation rows",
                       isa->name, (long long)ctx.m);
    struct threadpool *pool = op_call_pool(c);
    threadpool_run(pool, qmm_quantize_task, &ctx,
                   (int)((ctx.m + QMM_TOKEN_BLOCK - 1) / QMM_TOKEN_BLOCK));
    threadpool_run(pool, qmm_matmul_task, &ctx, (int)((ctx.n + QMM_ROW_BLOCK - 1) / QMM_ROW_BLOCK));
    mem_free(owned);
    return VLLMC_OK;
}
