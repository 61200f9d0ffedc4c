// Blocking and threading for the fast CPU matmuls (see matmul_tiled.h). A
// task owns a block of output columns and a block of up to 64 rows: its
// weight block stays in L1/L2 while the x rows stream through it.
#include "backend/cpu/matmul_tiled.h"

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_ops.h"

#define MM_MAX_TILE 16
// Rows per row block: x [64, k] f32 is 256 KiB at k = 1024. Rows of at most
// 2 KiB (bf16 x at k <= 1024) take twice as many, so that each weight block
// is fetched half as often: 128 x 2 KiB is the same 256 KiB.
#define MM_ROW_BLOCK 64
#define MM_ROW_BLOCK_MAX 128
// Columns per task at most: a bf16 weight block [64, k] is 128 KiB at k = 1024.
#define MM_COL_BLOCK 64
// The same when all rows are one row block (batched decode, short prompts)
// and the output is wide enough to leave 16 tasks a thread: no other task
// reuses the weight block, so it need not fit L2, and longer runs of columns
// mean fewer task starts, each of which waits on its first weight rows.
// Output matrix of the stories15M shape at 16 rows (32000 x 288), `bench_ops`
// 2 threads: f16 900-1047 us against 1144-1303 with 64, bf16 595 against 869.
#define MM_COL_BLOCK_ONE_ROW_BLOCK 256
// Rows and columns of a task whose tiles run k in parts (kernel->tile_part):
// the partial accumulators of one column tile for the row block live on the
// stack, [64, 8, 16] f32 = 32 KiB.
#define MM_PART_ROWS MM_ROW_BLOCK
#define MM_PART_COLS 8
// The same for a kernel's decode: 128 rows read as 8 streams of 16 rows.
#define MM_DECODE_BLOCK 128
// The most columns a task can have, any of the three above.
#define MM_COL_BLOCK_MAX MM_COL_BLOCK_ONE_ROW_BLOCK
_Static_assert(MM_COL_BLOCK <= MM_COL_BLOCK_MAX && MM_DECODE_BLOCK <= MM_COL_BLOCK_MAX,
               "a task's columns must fit bias_v");

struct mm_ctx {
    const struct op_call *c;
    const struct cpu_mm_kernel *kernel;
    int64_t m, n, k;
    int64_t col_block;    // columns per task
    int64_t row_block;    // rows per row block
    int64_t n_row_blocks; // row blocks per column block; a task owns one of each
    int c_step;           // columns per tile
    bool decode;          // one x row, through kernel->decode
    bool k_parts;         // tiles run k in parts of kernel->k_block, through tile_part
    bool in_order;        // one row block, tasks through threadpool_run_shares: the
                          // column block after a task's is most likely its thread's next
    const char *x_base;   // NULL: rows of c->src[0]
    size_t x_row_bytes;
    float *panels;       // NULL, or one converted column tile per thread
    size_t panel_stride; // floats per converted weight row
    size_t w_row_bytes;  // bytes of one weight row
};

// Weight rows [j0, j1) of w, row_bytes each, fetched into L2.
static void mm_prefetch_rows(const struct tensor *w, int64_t j0, int64_t j1, size_t row_bytes)
{
    for (int64_t j = j0; j < j1; j++) {
        const char *r = tensor_row(w, j);
        for (size_t b = 0; b < row_bytes; b += 64)
            __builtin_prefetch(r + b, 0, 2);
    }
}

static void mm_task(void *p, int task, int thread)
{
    const struct mm_ctx *ctx = p;
    const struct tensor *x = ctx->c->src[0], *w = ctx->c->src[1], *bias = ctx->c->src[2];
    const struct tensor *y = ctx->c->dst;
    // The tiles come from the panel kernel where the weights go through panels.
    const struct cpu_mm_kernel *kernel = ctx->panels ? ctx->kernel->panel_kernel : ctx->kernel;
    int r_max = kernel->r_max, c_max = ctx->c_step;
    int64_t j0 = (int64_t)(task / ctx->n_row_blocks) * ctx->col_block;
    int64_t i0 = (int64_t)(task % ctx->n_row_blocks) * ctx->row_block;
    int64_t i1 = i0 + ctx->row_block < ctx->m ? i0 + ctx->row_block : ctx->m;
    int64_t j1 = j0 + ctx->col_block < ctx->n ? j0 + ctx->col_block : ctx->n;
    // Row addresses and the bias once per task: cpu_row divides, and a tile
    // is only ~1000 cycles.
    float bias_v[MM_COL_BLOCK_MAX];
    for (int64_t j = j0; j < j1; j++)
        bias_v[j - j0] = bias ? cpu_load(bias->dtype, bias->data, j) : 0.0f;
    const float *x_rows[MM_ROW_BLOCK_MAX];
    float *y_rows[MM_ROW_BLOCK_MAX], *y_cols[MM_ROW_BLOCK_MAX];
    const void *wr[MM_MAX_TILE];
    float out[MM_MAX_TILE * MM_MAX_TILE];
    _Alignas(64) float acc[MM_PART_ROWS * MM_PART_COLS * CPU_MM_ACC_FLOATS];
    float *panel =
        ctx->panels ? ctx->panels + (size_t)thread * (size_t)c_max * ctx->panel_stride : NULL;
    for (int64_t i = i0; i < i1; i++) {
        x_rows[i - i0] =
            ctx->x_base ? (const float *)(const void *)(ctx->x_base + (size_t)i * ctx->x_row_bytes)
                        : cpu_row(x, i);
        y_rows[i - i0] = (float *)cpu_row(y, i);
        // The task's output lines, fetched for writing now: written a few
        // floats at a time, they otherwise stall the tiles' stores (~5% of a
        // prefill matmul).
        for (int64_t j = j0; j < j1; j += 16)
            __builtin_prefetch(y_rows[i - i0] + j, 1, 3);
        __builtin_prefetch(y_rows[i - i0] + j1 - 1, 1, 3);
    }
    if (ctx->decode) {
        ctx->kernel->decode(x_rows[0], tensor_row(w, j0), w->nb[1], (int)(j1 - j0), ctx->k,
                            y_rows[0] + j0, bias_v);
        return;
    }
    for (int64_t j = j0; j < j1; j += c_max) {
        int C = j1 - j < c_max ? (int)(j1 - j) : c_max;
        for (int cc = 0; cc < C; cc++)
            wr[cc] = tensor_row(w, j + cc);
        if (panel) {
            // The next column tile's weight rows into L2 before this one's
            // are converted: a large weight (the 16 rows of a batched decode
            // step through the stories15M shape's 18 MB output matrix)
            // otherwise streams from memory at a few GB/s, the conversion
            // waiting on each line (20% faster at 16 rows; prefill the same).
            if (j + c_max < j1)
                mm_prefetch_rows(w, j + c_max, j + 2 * c_max < j1 ? j + 2 * c_max : j1,
                                 ctx->w_row_bytes);
            ctx->kernel->panel(C, wr, ctx->k, panel, ctx->panel_stride);
            for (int cc = 0; cc < C; cc++)
                wr[cc] = panel + (size_t)cc * ctx->panel_stride;
        }
        if (kernel->tile_store) {
            for (int64_t i = i0; i < i1; i++)
                y_cols[i - i0] = y_rows[i - i0] + j;
            // Decode streams each weight row once: the tile fetches the next
            // one's rows, within this task, or past its end when the tasks
            // run in order (ctx->in_order; otherwise another task's rows
            // would land in the wrong core's L2). So do calls of up to r_max
            // rows (one row tile, e.g. 4 sequences decoding): without it their weights
            // came from memory unfetched, 4 x 32000 x 288 at 20-22 GFLOP/s
            // on one core against 35-49 with it. With several row tiles the
            // first one fetches while the others reuse the rows it brought
            // in: 16 sequences decoding the stories15M shape waited on the
            // output matrix's rows in every column tile's first row tile.
            const void *next = panel                          ? NULL
                               : j + c_max < j1               ? tensor_row(w, j + c_max)
                               : ctx->in_order && j1 < ctx->n ? tensor_row(w, j1)
                                                              : NULL;
            if (ctx->k_parts) {
                for (int64_t k0 = 0; k0 < ctx->k; k0 += kernel->k_block) {
                    int64_t k1 = k0 + kernel->k_block < ctx->k ? k0 + kernel->k_block : ctx->k;
                    for (int64_t i = i0; i < i1; i += r_max) {
                        int R = i1 - i < r_max ? (int)(i1 - i) : r_max;
                        kernel->tile_part(R, C, x_rows + (i - i0), wr, k0, k1, ctx->k,
                                          acc + (size_t)(i - i0) * (size_t)C * CPU_MM_ACC_FLOATS,
                                          y_cols + (i - i0), bias_v + (j - j0),
                                          i == i0 ? next : NULL);
                    }
                }
                continue;
            }
            for (int64_t i = i0; i < i1; i += r_max) {
                int R = i1 - i < r_max ? (int)(i1 - i) : r_max;
                kernel->tile_store(R, C, x_rows + (i - i0), wr, ctx->k, y_cols + (i - i0),
                                   bias_v + (j - j0), i == i0 ? next : NULL);
            }
            continue;
        }
        for (int64_t i = i0; i < i1; i += r_max) {
            int R = i1 - i < r_max ? (int)(i1 - i) : r_max;
            kernel->tile(R, C, x_rows + (i - i0), wr, ctx->k, out);
            for (int r = 0; r < R; r++) {
                float *yr = y_rows[i - i0 + r] + j;
                const float *bv = bias_v + (j - j0);
                for (int cc = 0; cc < C; cc++)
                    yr[cc] = out[r * C + cc] + bv[cc];
            }
        }
    }
}

enum vllmc_status cpu_matmul_tiled_run(const struct op_call *c, const struct cpu_mm_kernel *kernel)
{
    return cpu_matmul_tiled_run_x(c, kernel, NULL, 0);
}

enum vllmc_status cpu_matmul_tiled_run_x(const struct op_call *c,
                                         const struct cpu_mm_kernel *kernel, const void *x_base,
                                         size_t x_row_bytes)
{
    VLLMC_ASSERT(kernel->r_max <= MM_MAX_TILE && kernel->c_max <= MM_MAX_TILE &&
                 kernel->c_max_r1 <= MM_MAX_TILE);
    struct mm_ctx ctx = {
        .c = c,
        .kernel = kernel,
        .m = tensor_n_rows(c->src[0]),
        .n = c->src[1]->ne[1],
        .k = c->src[0]->ne[0],
        .x_base = x_base,
        .x_row_bytes = x_row_bytes,
    };
    if (ctx.m == 0 || ctx.n == 0)
        return VLLMC_OK;
    // A single row takes wider tiles; elements are computed the same way in
    // any tile, so this does not change results.
    ctx.decode = ctx.m == 1 && kernel->decode;
    // Weights converted once per column tile when several row tiles use them,
    // on CPUs that split 512-bit operations (Zen 4: F16 prefill matmul +5%).
    // With full-width units (Zen 5) the conversion in registers is the
    // cheaper one at every row count: f16 weights on 2 threads, 8 to 512
    // rows, 365-416 GFLOP/s in registers against 195-357 through panels.
    // Without scratch memory the tiles convert in registers as for m = 1.
    const bool use_panels =
        kernel->panel && ctx.m > kernel->panel_kernel->r_max && cpu_features_get()->avx512_split;
    const struct cpu_mm_kernel *tiles = use_panels ? kernel->panel_kernel : kernel;
    ctx.c_step = ctx.decode ? 8 : ctx.m == 1 ? kernel->c_max_r1 : tiles->c_max;
    // Prefill: a task is one column block of one row block, so that the
    // threads share out hundreds of tasks of even size (a column block alone
    // for all rows left a thread idle for up to 1/9 of the call).
    size_t x_stride = x_base ? x_row_bytes : (size_t)ctx.k * sizeof(float); // an x row's bytes
    ctx.row_block = x_stride <= 2048 ? MM_ROW_BLOCK_MAX : MM_ROW_BLOCK;
    ctx.n_row_blocks = (ctx.m + ctx.row_block - 1) / ctx.row_block;
    // Enough blocks to balance the threads (4 per thread), each a multiple of
    // the tile width and at most 64 columns so the weight block fits in L2
    // for the next row block (more when there is none).
    // Below ~256k multiply-adds a wake-up of the workers costs more than it
    // saves (a tiny model's whole layer); the tasks then run inline.
    struct threadpool *pool = ctx.m * ctx.n * ctx.k < (1 << 18) ? NULL : op_call_pool(c);
    int64_t n_threads = threadpool_n_threads(pool);
    int64_t block = (ctx.n + 4 * n_threads - 1) / (4 * n_threads);
    block = (block + ctx.c_step - 1) / ctx.c_step * ctx.c_step;
    int64_t block_max = ctx.decode ? MM_DECODE_BLOCK : MM_COL_BLOCK;
    if (!ctx.decode && ctx.n_row_blocks == 1) {
        // Still 16 tasks a thread, for the balance: only wide outputs (the
        // output matrix) get the longer runs.
        int64_t wide = (ctx.n + 16 * n_threads - 1) / (16 * n_threads);
        block_max = wide < MM_COL_BLOCK                 ? MM_COL_BLOCK
                    : wide > MM_COL_BLOCK_ONE_ROW_BLOCK ? MM_COL_BLOCK_ONE_ROW_BLOCK
                                                        : wide;
    }
    if (block > block_max)
        block = block_max / ctx.c_step * ctx.c_step;
    if (block < ctx.c_step)
        block = ctx.c_step;
    ctx.col_block = block;
    int n_tasks = (int)((ctx.n + block - 1) / block * ctx.n_row_blocks);
    if (use_panels) {
        ctx.panel_stride = ((size_t)ctx.k + 15) & ~(size_t)15;
        ctx.w_row_bytes = dtype_row_bytes(c->src[1]->dtype, ctx.k);
        ctx.panels = op_scratch(c, (size_t)n_threads * (size_t)ctx.c_step * ctx.panel_stride *
                                       sizeof(float));
        if (!ctx.panels) // the kernel's own tiles, of its own width
            ctx.c_step = kernel->c_max;
    }
    ctx.k_parts = kernel->tile_part && !ctx.panels && ctx.m > kernel->r_max &&
                  ctx.k > kernel->k_whole_max && ctx.row_block <= MM_PART_ROWS &&
                  ctx.c_step <= MM_PART_COLS;
    // With one row block (batched decode, short prompts) each thread walks
    // its share of the column blocks in order, and a task's last tile fetches
    // the next block's first rows. The stories15M shape at 16 sequences: 5 of
    // 6 pairs ahead, +3% in the median. Several row blocks reuse a column
    // block's weights across tasks instead; lone-token decode streams its
    // own way (no change measured either way).
    ctx.in_order = ctx.n_row_blocks == 1 && !ctx.decode;
    if (ctx.in_order)
        threadpool_run_shares(pool, mm_task, &ctx, n_tasks);
    else
        threadpool_run(pool, mm_task, &ctx, n_tasks);
    return VLLMC_OK;
}

bool cpu_matmul_tiled_float_supports(const struct op_call *c)
{
    const struct tensor *w = c->src[1], *b = c->src[2];
    return cpu_f32_rows(c->dst) && cpu_f32_rows(c->src[0]) && cpu_is_plain_float(w->dtype) &&
           tensor_rows_contiguous(w) && (!b || cpu_is_plain_float(b->dtype));
}

enum vllmc_status cpu_matmul_tiled_float_run(const struct op_call *c,
                                             const struct cpu_mm_float_kernels *kernels)
{
    switch (c->src[1]->dtype) {
    case DTYPE_F16:
        return cpu_matmul_tiled_run(c, kernels->f16);
    case DTYPE_BF16:
        return cpu_matmul_tiled_run(c, kernels->bf16);
    default:
        return cpu_matmul_tiled_run(c, kernels->f32);
    }
}
