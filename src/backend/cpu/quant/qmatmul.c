// The quantized-matmul driver (see qmatmul.h): quantize the activation rows
// once per call, then walk weight-row blocks on the thread pool; each task
// keeps its weight block hot in cache while all tokens stream through it.
#include "backend/cpu/quant/qmatmul.h"

#include "backend/cpu/cpu_ops.h"
#include "core/alloc.h"

// Weight rows per task: small enough to balance two to a few dozen threads,
// large enough that a task's activations are read once per 16 weight rows.
#define QMM_ROW_BLOCK 16
#define QMM_TOKEN_BLOCK 8 // tokens quantized per task
#define QMM_R_DECODE 1     // weight rows per tile when there is one token

const struct qmm_type_kernel *qmm_find_kernel(const struct qmm_isa *isa, enum dtype t)
{
    for (int i = 0; i < isa->n_kernels; i++)
        if (isa->kernels[i].dtype == t)
            return &isa->kernels[i];
    return NULL;
}

bool qmm_supports(const struct qmm_isa *isa, const struct op_call *c)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2];
    if (!w || !cpu_f32_rows(c->dst) || !cpu_f32_rows(x) || !tensor_rows_contiguous(w))
        return false;
    const struct qmm_type_kernel *kern = qmm_find_kernel(isa, w->dtype);
    return kern && w->ne[0] == x->ne[0] && x->ne[0] % kern->k_multiple == 0 &&
           w->n_dims == 2 && (!b || cpu_is_plain_float(b->dtype));
}

struct qmm_ctx {
    const struct qmm_isa *isa;
    const struct qmm_type_kernel *kern;
    const struct op_call *c;
    int64_t m, n, k;
    uint8_t *act;     // owned by qmm_run: [m, qmm_act_row_bytes(k)]
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

enum vllmc_status qmm_run(const struct qmm_isa *isa, const struct op_call *c)
{
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
    // Scratch for the quantized activations; about k * 3.1 bytes per token.
    ctx.act = mem_alloc_aligned(64, (size_t)ctx.m * ctx.act_row_bytes);
    if (!ctx.act)
        return op_fail(c, VLLMC_ERR_NOMEM, "%s: out of memory for %lld activation rows",
                       isa->name, (long long)ctx.m);
    struct threadpool *pool = op_call_pool(c);
    threadpool_run(pool, qmm_quantize_task, &ctx,
                   (int)((ctx.m + QMM_TOKEN_BLOCK - 1) / QMM_TOKEN_BLOCK));
    threadpool_run(pool, qmm_matmul_task, &ctx, (int)((ctx.n + QMM_ROW_BLOCK - 1) / QMM_ROW_BLOCK));
    mem_free(ctx.act);
    return VLLMC_OK;
}
