// cpu-blas matmul: f32 x f32 through OpenBLAS cblas_sgemm, for prefill-sized
// m only (CPU_BLAS_MIN_M); below that the per-call cost of sgemm loses to the
// tiled kernels.
//
// Batch invariance: sgemm blocks and reduces k differently for different m,
// so a row's result depends on how many rows share the call. The engine's
// CPU determinism (identical logits whatever the batching or chunking) needs
// every matmul row computed the same way, so this provider ranks below
// cpu-avx2 and cpu-avx512 and is only chosen when those are switched off
// (VLLMC_OP_PROVIDER_DISABLE=cpu-avx2,cpu-avx512) or the CPU lacks AVX2:
// a throughput opt-in, as vLLM's CPU path also gives up batch invariance.
#include "backend/cpu/blas/blas.h"

#ifdef VLLMC_HAVE_OPENBLAS
#include <cblas.h>
#include <stdatomic.h>

#include "backend/cpu/cpu_ops.h"

// Rows of x and dst equally spaced (one stride), as sgemm's lda/ldc need.
static bool rows_uniform(const struct tensor *t)
{
    return tensor_rows_contiguous(t) && t->nb[1] % sizeof(float) == 0 &&
           (t->ne[2] * t->ne[3] == 1 ||
            (t->nb[2] == t->nb[1] * (size_t)t->ne[1] && t->nb[3] == t->nb[2] * (size_t)t->ne[2]));
}

static bool matmul_supports(const struct op_call *c)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2];
    return cpu_f32_rows(c->dst) && cpu_f32_rows(x) && w->dtype == DTYPE_F32 &&
           tensor_rows_contiguous(w) && rows_uniform(x) && rows_uniform(c->dst) &&
           w->nb[1] % sizeof(float) == 0 && (!b || cpu_is_plain_float(b->dtype)) &&
           tensor_n_rows(x) >= CPU_BLAS_MIN_M && tensor_n_rows(x) <= INT32_MAX &&
           w->ne[1] <= INT32_MAX && x->ne[0] <= INT32_MAX;
}

static atomic_int blas_threads; // what OpenBLAS was last told

static enum vllmc_status matmul_run(const struct op_call *c)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2], *y = c->dst;
    int m = (int)tensor_n_rows(x), n = (int)w->ne[1], k = (int)x->ne[0];
    // OpenBLAS gets the pool's thread count, so it uses the cores the pool's
    // sleeping workers leave free instead of oversubscribing them.
    int want = threadpool_n_threads(op_call_pool(c));
    if (atomic_exchange(&blas_threads, want) != want)
        openblas_set_num_threads(want);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x->data,
                (int)(x->nb[1] / sizeof(float)), w->data, (int)(w->nb[1] / sizeof(float)), 0.0f,
                y->data, (int)(y->nb[1] / sizeof(float)));
    if (b) {
        for (int i = 0; i < m; i++) {
            float *yr = cpu_row(y, i);
            for (int j = 0; j < n; j++)
                yr[j] += cpu_load(b->dtype, b->data, j);
        }
    }
    return VLLMC_OK;
}

const struct op_provider cpu_blas_matmul = {
    .name = "cpu-blas",
    .op = OP_MATMUL,
    .priority = CPU_BLAS_PRIORITY,
    .supports = matmul_supports,
    .run = matmul_run,
};
#endif
