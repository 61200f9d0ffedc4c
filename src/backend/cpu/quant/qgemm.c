// The token-lane quantized-matmul driver (see qgemm.h): quantize the
// activation rows once per call into groups of 16 tokens, then walk panels of
// 16 weight rows on the thread pool, each thread its own share of them in
// order (threadpool_run_shares), so that a panel's prefetch of the next
// panel's rows serves the same core; each panel is unpacked once and every
// token group streams through it. Up to 4 tokens take the decode
// kernel, which reads the packed rows directly. A weight with 16-row groups
// (qgemm_groups_make, made at load) is read from them instead, by the decode
// kernel and by the tiles.
#include "backend/cpu/quant/qgemm.h"

#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "backend/backend_impl.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_ops.h"
#include "core/alloc.h"

#define QGEMM_PREFETCH_TILES 2 // decode: how many 4-row tiles ahead to prefetch
#define QGEMM_DECODE_RUNS 32   // decode: runs of panels a thread
// The same when a run is read as several streams: one, the longest streams.
// On the Intel Xeon of bench/RESULTS.md, through the 16-stream driver, Q8_0 /
// Q4_K_M tok/s at 1, 2, 4 and 8 runs: 49.8-52.6 / 77.8-82.8, 49.8-51.7 /
// 74.5-78.2, 48.4-49.1 / 73.7-74.7, 45.1-45.7 / 68.8-69.7; later, 1 against 2
// runs: Q4_0 87.2-91.3 / 82.6-85.3, Q4_K_M 78.5-82.9 / 77.2-80.0, Q8_0
// 48.8-49.7 / 48.9-49.5 (a fast thread then waits instead of taking over
// the other's last run, which costs less than streams half as long).
#define QGEMM_DECODE_LONG_RUNS 1
#define QGEMM_STREAM_BYTES (2 << 20) // prefill outputs from this size bypass the caches
// Decode over 16-row groups, every type: how many bytes ahead of its reads a
// run fetches (into L1). Two Q4_K super-blocks of a group, 4.6 KiB: a scratch
// loop over a 290 MB Q4_K weight in groups read 62-65 GB/s on two Zen 5
// cores that way, 57-61 with the hardware's fetches alone, against 38-40 for
// the 4-row tiles of the packed rows in the same runs (bench/RESULTS.md).
#define QGEMM_GROUP_PREFETCH (2 * QGEMM_Q4K_GROUP_SB_BYTES)

// The head of a qgemm_groups_make copy: the weight it was made from, so that
// a tensor that carries it as `alt` after a change (another view of the
// memory, other data) is not read through it.
struct qgemm_groups_head {
    const void *src;
    int64_t n, k;
    size_t row_bytes;
    int32_t dtype;
    uint32_t magic;
};
#define QGEMM_GROUPS_MAGIC 0x51473136u // "QG16"
#define QGEMM_GROUPS_HEAD_BYTES 64
_Static_assert(sizeof(struct qgemm_groups_head) <= QGEMM_GROUPS_HEAD_BYTES, "groups head");

static const struct qgemm_kernel *qgemm_find_kernel(const struct qgemm_isa *isa, enum dtype t)
{
    for (int i = 0; i < isa->n_kernels; i++)
        if (isa->kernels[i].dtype == t)
            return &isa->kernels[i];
    return NULL;
}

static size_t qgemm_group_bytes_of(const struct qgemm_kernel *kern, int64_t k)
{
    return (size_t)(k / kern->k_multiple) * kern->group_sb_bytes;
}

// w's groups (qgemm_groups_make) where its `alt` holds them for w as it is
// now, else NULL.
static const uint8_t *qgemm_groups_of(const struct qgemm_kernel *kern, const struct tensor *w)
{
    const struct qgemm_groups_head *h = w->alt;
    if (!h || !kern->group_gemv || h->magic != QGEMM_GROUPS_MAGIC || h->src != w->data ||
        h->n != w->ne[1] || h->k != w->ne[0] || h->row_bytes != w->nb[1] ||
        h->dtype != (int32_t)w->dtype)
        return NULL;
    return (const uint8_t *)h + QGEMM_GROUPS_HEAD_BYTES;
}

struct qgemm_pack_ctx {
    const struct qgemm_kernel *kern;
    const struct tensor *w;
    uint8_t *groups;
};

static void qgemm_pack_task(void *p, int task, int thread)
{
    (void)thread;
    const struct qgemm_pack_ctx *ctx = p;
    const uint8_t *rows[QGEMM_PANEL];
    for (int r = 0; r < QGEMM_PANEL; r++)
        rows[r] = tensor_row(ctx->w, (int64_t)task * QGEMM_PANEL + r);
    ctx->kern->group_pack(rows, ctx->w->ne[0],
                          ctx->groups +
                              (size_t)task * qgemm_group_bytes_of(ctx->kern, ctx->w->ne[0]));
}

enum vllmc_status qgemm_groups_make(const struct qgemm_isa *isa, struct threadpool *pool,
                                    const struct tensor *w, void **out)
{
    *out = NULL;
    const struct qgemm_kernel *kern = qgemm_find_kernel(isa, w->dtype);
    if (!kern || !kern->group_pack || w->n_dims != 2 || !tensor_is_contiguous(w) || w->ne[1] <= 0 ||
        w->ne[1] % QGEMM_PANEL || w->ne[1] / QGEMM_PANEL > INT32_MAX || w->ne[0] <= 0 ||
        w->ne[0] % kern->k_multiple)
        return VLLMC_OK;
    const int64_t n_groups = w->ne[1] / QGEMM_PANEL;
    uint8_t *buf = mem_alloc_aligned(
        64, QGEMM_GROUPS_HEAD_BYTES + (size_t)n_groups * qgemm_group_bytes_of(kern, w->ne[0]));
    if (!buf)
        return VLLMC_ERR_NOMEM;
    struct qgemm_groups_head *h = (struct qgemm_groups_head *)buf;
    *h = (struct qgemm_groups_head){.src = w->data,
                                    .n = w->ne[1],
                                    .k = w->ne[0],
                                    .row_bytes = w->nb[1],
                                    .dtype = (int32_t)w->dtype,
                                    .magic = QGEMM_GROUPS_MAGIC};
#if defined(__linux__) && defined(MADV_POPULATE_READ)
    // Both sides' pages at once (Linux 5.14; an older kernel says EINVAL and
    // the packing faults them in one at a time): on a virtual machine a
    // page fault each 4 KiB took most of a 0.6B Q4_K_M model's packing.
    {
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo, hi;
        lo = (uintptr_t)w->data & ~(page - 1);
        hi = ((uintptr_t)w->data + tensor_n_bytes(w) + page - 1) & ~(page - 1);
        (void)madvise((void *)lo, hi - lo, MADV_POPULATE_READ);
        lo = ((uintptr_t)buf + page - 1) & ~(page - 1);
        hi = ((uintptr_t)buf + n_groups * qgemm_group_bytes_of(kern, w->ne[0])) & ~(page - 1);
        if (hi > lo)
            (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
    }
#endif
    struct qgemm_pack_ctx ctx = {.kern = kern, .w = w, .groups = buf + QGEMM_GROUPS_HEAD_BYTES};
    if (pool)
        threadpool_run(pool, qgemm_pack_task, &ctx, (int)n_groups);
    else
        for (int64_t g = 0; g < n_groups; g++)
            qgemm_pack_task(&ctx, (int)g, 0);
    *out = buf;
    return VLLMC_OK;
}

bool qgemm_supports(const struct qgemm_isa *isa, const struct op_call *c)
{
    const struct tensor *x = c->src[0], *w = c->src[1], *b = c->src[2];
    if (!w || !cpu_f32_rows(c->dst) || !cpu_f32_rows(x) || !tensor_rows_contiguous(w))
        return false;
    const struct qgemm_kernel *kern = qgemm_find_kernel(isa, w->dtype);
    return kern && w->ne[0] == x->ne[0] && x->ne[0] % kern->k_multiple == 0 && w->n_dims == 2 &&
           (!b || cpu_is_plain_float(b->dtype));
}

enum qgemm_decode_read {
    QGEMM_READ_ONE,    // one stream of 4-row tiles
    QGEMM_READ_16,     // 16 streams, a row of each per pass (qgemm_decode16)
    QGEMM_READ_GROUPS, // the weight's 16-row groups, group_streams streams a thread
};

struct qgemm_ctx {
    const struct qgemm_isa *isa;
    const struct qgemm_kernel *kern;
    qgemm_tile_fn tile; // kern's tile, on AMX tiles where the CPU has them
    qgemm_tile_rows_fn tile_rows; // whole panels read in place, where the CPU has AMX
    const struct op_call *c;
    int64_t m, n, k;
    const uint8_t *groups; // the weight's 16-row groups (qgemm_groups_of), or NULL
    qgemm_tile_fn group_tile; // with groups: kern's group_tile where the CPU has no AMX
    size_t group_bytes;    // of one group
    float **y_rows;      // [m] the dst rows
    uint8_t *act;        // [n_groups, qgemm_group_bytes(k)], or one decode row
    uint8_t *panels;     // [n_threads, QGEMM_PANEL, qgemm_panel_row_bytes(k)]
    size_t panel_bytes;  // of one thread's panel
    int64_t panels_per_task;
    int64_t n_runs, n_pairs; // decode over groups: runs of panels_per_task panels, and
                             // tasks, each runs task and task + n_pairs
    bool stream;         // whole panels' outputs bypass the caches (qgemm_store_fn)
    size_t row_bytes;    // decode: bytes of one token's activations
    enum qgemm_decode_read read; // decode: how a run of rows is read
};

static void qgemm_quantize_task(void *p, int task, int thread)
{
    (void)thread;
    const struct qgemm_ctx *ctx = p;
    int64_t i0 = (int64_t)task * QGEMM_LANES;
    int64_t i1 = i0 + QGEMM_LANES < ctx->m ? i0 + QGEMM_LANES : ctx->m;
    uint8_t *group = ctx->act + (size_t)task * qgemm_group_bytes(ctx->k);
    const float *x[QGEMM_LANES];
    for (int64_t i = i0; i < i1; i++)
        x[i - i0] = cpu_row(ctx->c->src[0], i);
    ctx->isa->quantize_group(x, (int)(i1 - i0), ctx->k, ctx->kern->zp, ctx->kern->sb, group);
}

static float qgemm_bias(const struct qgemm_ctx *ctx, int64_t j)
{
    const struct tensor *bias = ctx->c->src[2];
    return bias ? cpu_load(bias->dtype, bias->data, j) : 0.0f;
}

// Panel p of the call: rows 16 p.. of the weight, with the products of all
// tokens; its first tile fetches the next panel's rows.
static void qgemm_panel_run(const struct qgemm_ctx *ctx, int64_t p, uint8_t *panel)
{
    const struct tensor *w = ctx->c->src[1];
    const int64_t k = ctx->k;
    const int64_t j0 = p * QGEMM_PANEL;
    const int R = ctx->n - j0 < QGEMM_PANEL ? (int)(ctx->n - j0) : QGEMM_PANEL;
    const size_t prb = qgemm_panel_row_bytes(k);
    const bool in_place = ctx->tile_rows && R == QGEMM_PANEL && !ctx->groups;
    // Groups (whole ones only: n is a multiple of 16) are read in place by
    // group_tile, else unpacked.
    const uint8_t *group = ctx->groups ? ctx->groups + (size_t)p * ctx->group_bytes : NULL;
    if (group && !ctx->group_tile)
        ctx->kern->group_unpack(group, k, panel, prb);
    // The packed rows into the panel, unless the tile reads them in place.
    for (int r = 0; r < QGEMM_PANEL && !in_place && !group; r++) {
        if (r < R)
            ctx->kern->unpack(tensor_row(w, j0 + r), k, panel + (size_t)r * prb);
        else // rows past n: zeros, their outputs dropped
            memset(panel + (size_t)r * prb, 0, prb);
    }
    // The first tile streams in the rows of the next panel.
    const uint8_t *pf = NULL;
    size_t pf_bytes = 0;
    if (j0 + QGEMM_PANEL < ctx->n) {
        int64_t n_next = ctx->n - j0 - QGEMM_PANEL < QGEMM_PANEL ? ctx->n - j0 - QGEMM_PANEL
                                                                 : QGEMM_PANEL;
        pf = tensor_row(w, j0 + QGEMM_PANEL);
        pf_bytes = (size_t)n_next * dtype_row_bytes(w->dtype, k);
        if (ctx->groups) {
            pf = ctx->groups + (size_t)(p + 1) * ctx->group_bytes;
            pf_bytes = ctx->group_bytes;
        }
    }
    float bias[QGEMM_PANEL];
    for (int r = 0; r < R; r++)
        bias[r] = qgemm_bias(ctx, j0 + r);
    const int64_t n_groups = (ctx->m + QGEMM_LANES - 1) / QGEMM_LANES;
    const uint8_t *a[QGEMM_GROUPS];
    float out[QGEMM_LANES * QGEMM_GROUPS * QGEMM_PANEL]; // [token][row]
    const int64_t per_tile = QGEMM_LANES * QGEMM_GROUPS;
    for (int64_t g = 0; g < n_groups; g += QGEMM_GROUPS) {
        int G = n_groups - g < QGEMM_GROUPS ? (int)(n_groups - g) : QGEMM_GROUPS;
        for (int gg = 0; gg < G; gg++)
            a[gg] = ctx->act + (size_t)(g + gg) * qgemm_group_bytes(k);
        int64_t i0 = g * QGEMM_LANES;
        int C = ctx->m - i0 < per_tile ? (int)(ctx->m - i0) : (int)per_tile;
        // The destination lines (one per token, far apart) are not fetched
        // ahead: 32 prefetches for writing at the start of each tile took
        // the fill buffers the tile's own loads need, and the stores drain
        // while the next tile runs. Without them a 512 x 3072 x 1024 Q4_0
        // product runs 10% faster on one core (9.8 against 10.8 ms).
        if (group && ctx->group_tile)
            ctx->group_tile(group, k, G, a, out, pf, pf_bytes);
        else if (in_place)
            ctx->tile_rows(tensor_row(w, j0), (size_t)w->nb[1], panel, k, G, a, out, pf, pf_bytes);
        else
            ctx->tile(panel, k, G, a, out, pf, pf_bytes);
        pf_bytes = 0;
        float *y[QGEMM_LANES * QGEMM_GROUPS];
        for (int c = 0; c < C; c++)
            y[c] = ctx->y_rows[i0 + c] + j0;
        ctx->isa->store(out, bias, C, R, ctx->stream, y);
    }
}

// Panel `task` alone, fetching the next panel's rows as it goes: through
// threadpool_run_shares that is the panel the thread runs next.
static void qgemm_panel_task(void *p, int task, int thread)
{
    const struct qgemm_ctx *ctx = p;
    qgemm_panel_run(ctx, task, ctx->panels + (size_t)thread * ctx->panel_bytes);
    if (ctx->stream) // the streamed lines reach memory before the threads meet
        ctx->isa->store_fence();
}

// The first min(n, ahead) bytes at rows, all at once: the tiles of a task
// that no earlier tile prefetched (the thread's previous task ran elsewhere
// in the weight, and another core's prefetches filled that core's L2), so
// their misses overlap instead of stalling one after another.
static void qgemm_prefetch_start(const void *rows, size_t n, size_t ahead)
{
    const char *p = rows;
    for (size_t o = 0; o < n && o < ahead; o += 64)
        __builtin_prefetch(p + o, 0, 2);
}

// L1 sets of 64-byte lines: lines 4 KiB apart share a set (the L1 data
// caches of current x86 cores, 32-48 KiB of 8-12 ways).
#define QGEMM_L1_SET_SPAN 4096

// How many L1 sets the 16 streams' first rows fall into when stream c is
// rotated by c skew rows.
static int qgemm_stream_sets(const struct tensor *w, int64_t j0, int64_t G, int64_t skew)
{
    uint64_t seen = 0; // a bit per set
    for (int c = 0; c < QGEMM_GEMV16_ROWS; c++) {
        uintptr_t a = (uintptr_t)tensor_row(w, j0 + c * G + c * skew % G);
        seen |= 1ull << (a % QGEMM_L1_SET_SPAN / 64);
    }
    return __builtin_popcountll(seen);
}

// The rotation of the streams' rows: streams exactly G rows apart lie a
// multiple of 4 KiB apart whenever G x row bytes is one (G = 64 at 576-byte
// rows, any G that is a multiple of 16 at 2304 bytes), and then all 16
// stream into one L1 set, which holds 8-12 lines (4096 x 1024 Q4_K on one
// core: 150 against 105 us; the 8B shape's Q4_K matrices 16 against 20-25
// GB/s). Rotating stream c by c skew rows moves it (G + skew) rows. Streams
// over 2 sets or more stay as they are: spreading them further made the
// 0.6B shape's matrices (2 and 4 sets) 5-7% slower on one core.
static int64_t qgemm_stream_skew(const struct tensor *w, int64_t j0, int64_t G)
{
    int64_t best = 0;
    int best_sets = qgemm_stream_sets(w, j0, G, 0);
    for (int64_t skew = 1; best_sets < 2 && skew < 4 && skew < G; skew++) {
        int sets = qgemm_stream_sets(w, j0, G, skew);
        if (sets > best_sets) {
            best_sets = sets;
            best = skew;
        }
    }
    return best;
}

// Rows [j0, j1) for a lone token through the 16-row kernel, read as 16
// streams of G = (j1 - j0) / 16 adjacent rows: pass g computes row
// j0 + c G + (g + c skew) % G in lane c (qgemm_stream_skew), and each stream
// fetches its next row as it goes. A stream is then G rows of memory in order
// (from its rotation on, wrapping once), which the hardware prefetcher
// follows; 16 adjacent rows side by side are 16 streams of one short row
// each. Which rows share a pass never changes a row's result.
static void qgemm_decode16(const struct qgemm_ctx *ctx, int64_t j0, int64_t j1)
{
    const struct tensor *w = ctx->c->src[1];
    const size_t row_bytes = dtype_row_bytes(w->dtype, ctx->k);
    const int64_t G = (j1 - j0) / QGEMM_GEMV16_ROWS;
    const uint8_t *wr[QGEMM_GEMV16_ROWS], *pf[QGEMM_GEMV16_ROWS];
    int64_t rows[QGEMM_GEMV16_ROWS];
    float out[QGEMM_GEMV16_ROWS];
    const int64_t skew = G > 0 ? qgemm_stream_skew(w, j0, G) : 0;
    int64_t at[QGEMM_GEMV16_ROWS]; // stream c's row in the pass, minus j0 + c G
    for (int c = 0; c < QGEMM_GEMV16_ROWS && G > 0; c++) {
        at[c] = c * skew % G;
        // The streams' first rows, which nothing fetched ahead, all at once.
        qgemm_prefetch_start(tensor_row(w, j0 + c * G + at[c]), row_bytes, row_bytes);
    }
    for (int64_t g = 0; g < G; g++) {
        for (int c = 0; c < QGEMM_GEMV16_ROWS; c++) {
            rows[c] = j0 + c * G + at[c];
            wr[c] = tensor_row(w, rows[c]);
            at[c] = at[c] + 1 < G ? at[c] + 1 : 0;
            pf[c] = tensor_row(w, j0 + c * G + at[c]);
        }
        ctx->kern->gemv16(wr, ctx->act, ctx->k, g + 1 < G ? pf : NULL, out);
        for (int c = 0; c < QGEMM_GEMV16_ROWS; c++)
            ctx->y_rows[0][rows[c]] = out[c] + qgemm_bias(ctx, rows[c]);
    }
    // The rows past the last multiple of 16: one short tile that repeats its
    // last row (the same arithmetic, outputs dropped).
    const int64_t j = j0 + QGEMM_GEMV16_ROWS * G;
    if (j < j1) {
        const int R = (int)(j1 - j);
        for (int r = 0; r < QGEMM_GEMV16_ROWS; r++)
            wr[r] = tensor_row(w, j + (r < R ? r : R - 1));
        ctx->kern->gemv16(wr, ctx->act, ctx->k, NULL, out);
        for (int r = 0; r < R; r++)
            ctx->y_rows[0][j + r] = out[r] + qgemm_bias(ctx, j + r);
    }
}

// How a lone token's run of rows is read. On Zen 5 one stream of 4-row tiles
// reads fastest (+3-13% over 16 streams for Q8_0 and Q4_K_M decode; 2 or 4
// interleaved streams of tiles 0.93-1.03x). On Zen 4 (512-bit units in
// halves) and on an Intel Xeon with AMX (family 6, model 167) 16 streams
// win (Xeon: Q8_0 decode 35 -> 49-52 tok/s, Q4_K_M 61-63 -> 73-78, and with
// Q6_K's too 74-76 -> 78-81; Q4_0 66 -> 77-78, where two streams of 4-row
// tiles had taken it from 62-65 to 72; 3, 4 and 6 streams 64-71). Calls of
// 2-4 tokens read one stream. None of this changes how a row is computed.
static enum qgemm_decode_read qgemm_decode_read_for(const struct qgemm_kernel *kern, int64_t m)
{
    return m == 1 && kern->gemv16 && !cpu_features_get()->amd_zen5 ? QGEMM_READ_16 : QGEMM_READ_ONE;
}

// y rows [j, j + 16) of the decode's tokens from a group kernel's out (16
// values a token), plus the bias.
static void qgemm_group_store(const struct qgemm_ctx *ctx, int64_t j, const float *out)
{
    for (int i = 0; i < ctx->m; i++)
        for (int r = 0; r < QGEMM_PANEL; r++)
            ctx->y_rows[i][j + r] = out[QGEMM_PANEL * i + r] + qgemm_bias(ctx, j + r);
}

// Decode task over the weight's groups: runs task and task + n_pairs (when
// there is one) read side by side, a group of each at a time, so that a
// thread's share of the tasks reads two streams (QGEMM_GROUP_STREAMS). A
// group's arithmetic is the same alone or beside another.
static void qgemm_group_decode_task(void *p, int task, int thread)
{
    (void)thread;
    const struct qgemm_ctx *ctx = p;
    const int T = (int)ctx->m;
    const int64_t run_rows = ctx->panels_per_task * QGEMM_PANEL;
    int64_t j[QGEMM_GROUP_STREAMS], j_end[QGEMM_GROUP_STREAMS]; // multiples of 16
    const uint8_t *g[QGEMM_GROUP_STREAMS];
    int S = 0;
    for (int64_t run = task; run < ctx->n_runs && S < QGEMM_GROUP_STREAMS; run += ctx->n_pairs) {
        j[S] = run * run_rows;
        j_end[S] = j[S] + run_rows < ctx->n ? j[S] + run_rows : ctx->n;
        g[S] = ctx->groups + (size_t)(j[S] / QGEMM_PANEL) * ctx->group_bytes;
        qgemm_prefetch_start(g[S], (size_t)((j_end[S] - j[S]) / QGEMM_PANEL) * ctx->group_bytes,
                             QGEMM_GROUP_PREFETCH);
        S++;
    }
    float out[QGEMM_GROUP_STREAMS * QGEMM_PANEL * QGEMM_GEMV_TOKENS];
    while (S > 0) {
        ctx->kern->group_gemv(g, S, ctx->act, ctx->row_bytes, T, ctx->k, QGEMM_GROUP_PREFETCH, out);
        for (int s = 0; s < S; s++) {
            qgemm_group_store(ctx, j[s], out + (size_t)s * QGEMM_PANEL * T);
            j[s] += QGEMM_PANEL;
            g[s] += ctx->group_bytes;
        }
        // A run that ends (the last, shorter one) leaves the other alone.
        for (int s = S - 1; s >= 0; s--)
            if (j[s] >= j_end[s]) {
                for (int t = s; t + 1 < S; t++) {
                    j[t] = j[t + 1];
                    j_end[t] = j_end[t + 1];
                    g[t] = g[t + 1];
                }
                S--;
            }
    }
}

static void qgemm_decode_task(void *p, int task, int thread)
{
    (void)thread;
    const struct qgemm_ctx *ctx = p;
    const struct tensor *w = ctx->c->src[1];
    int64_t j0 = (int64_t)task * ctx->panels_per_task * QGEMM_PANEL;
    int64_t j1 = j0 + ctx->panels_per_task * QGEMM_PANEL;
    j1 = j1 < ctx->n ? j1 : ctx->n;
    const int T = (int)ctx->m;
    const size_t row_bytes = dtype_row_bytes(w->dtype, ctx->k);
    if (ctx->read == QGEMM_READ_16) {
        qgemm_decode16(ctx, j0, j1);
        return;
    }
    // The run as one stream of whole 4-row tiles, prefetched ahead.
    const size_t pf_ahead = QGEMM_PREFETCH_TILES * 4 * row_bytes;
    qgemm_prefetch_start(tensor_row(w, j0), (size_t)(j1 - j0) * row_bytes, pf_ahead);
    const uint8_t *wr[4];
    float out[4 * QGEMM_GEMV_TOKENS];
    for (int64_t j = j0; j < j1; j += 4) {
        int R = j1 - j < 4 ? (int)(j1 - j) : 4;
        // Short tiles repeat their last row: the same arithmetic, outputs dropped.
        for (int r = 0; r < 4; r++)
            wr[r] = tensor_row(w, j + (r < R ? r : R - 1));
        ctx->kern->gemv(wr, ctx->act, ctx->row_bytes, T, ctx->k,
                        (const uint8_t *)tensor_row(w, j) + pf_ahead, out);
        for (int i = 0; i < T; i++)
            for (int r = 0; r < R; r++)
                ctx->y_rows[i][j + r] = out[4 * i + r] + qgemm_bias(ctx, j + r);
    }
}

// Scratch: the backend's, reused from call to call, or for a call without a
// backend an allocation the caller frees (*owned).
static uint8_t *qgemm_scratch(const struct op_call *c, size_t n_bytes, uint8_t **owned)
{
    *owned = NULL;
    if (c->backend)
        return op_scratch(c, n_bytes);
    *owned = mem_alloc_aligned(64, n_bytes);
    return *owned;
}

enum vllmc_status qgemm_run(const struct qgemm_isa *isa, const struct op_call *c)
{
    struct qgemm_ctx ctx = {
        .isa = isa,
        .kern = qgemm_find_kernel(isa, c->src[1]->dtype),
        .c = c,
        .m = tensor_n_rows(c->src[0]),
        .n = c->src[1]->ne[1],
        .k = c->src[0]->ne[0],
    };
    if (!ctx.kern)
        return op_fail(c, VLLMC_ERR_UNSUPPORTED, "%s: no kernel for %s", isa->name,
                       dtype_name(c->src[1]->dtype));
    ctx.groups = qgemm_groups_of(ctx.kern, c->src[1]);
    ctx.group_bytes = ctx.groups ? qgemm_group_bytes_of(ctx.kern, ctx.k) : 0;
    const bool amx = ctx.kern->tile_amx && cpu_features_get()->amx_int8;
    ctx.tile = amx ? ctx.kern->tile_amx : ctx.kern->tile;
    ctx.tile_rows = amx ? ctx.kern->tile_amx_rows : NULL;
    ctx.group_tile = amx ? NULL : ctx.kern->group_tile;
    if (ctx.m == 0 || ctx.n == 0)
        return VLLMC_OK;
    struct threadpool *pool = op_call_pool(c);
    const int n_threads = threadpool_n_threads(pool);
    const int64_t n_panels = (ctx.n + QGEMM_PANEL - 1) / QGEMM_PANEL;
    uint8_t *owned;
    if (ctx.m <= QGEMM_GEMV_TOKENS) {
        ctx.row_bytes = (qgemm_row_bytes(ctx.k) + 63) / 64 * 64;
        const size_t act_bytes = (size_t)ctx.m * ctx.row_bytes;
        ctx.act = qgemm_scratch(c, act_bytes + (size_t)ctx.m * sizeof(float *), &owned);
        if (!ctx.act)
            return op_fail(c, VLLMC_ERR_NOMEM, "%s: out of memory", isa->name);
        ctx.y_rows = (float **)(ctx.act + act_bytes);
        for (int64_t i = 0; i < ctx.m; i++) {
            isa->quantize_row(cpu_row(c->src[0], i), ctx.k, ctx.act + (size_t)i * ctx.row_bytes);
            ctx.y_rows[i] = cpu_row(c->dst, i);
        }
        // Runs of a panel or more, QGEMM_DECODE_RUNS a thread, each thread's
        // in order: the rows a run prefetches past its end are its thread's
        // next run's, so a thread's rows stream as one, and the small runs
        // still let a fast thread take over a slow one's last rows. The
        // 16-stream reads split a run between their streams, so they take
        // QGEMM_DECODE_LONG_RUNS long run(s) a thread.
        ctx.read = ctx.groups ? QGEMM_READ_GROUPS : qgemm_decode_read_for(ctx.kern, ctx.m);
        int64_t n_runs = (ctx.read != QGEMM_READ_16 ? QGEMM_DECODE_RUNS : QGEMM_DECODE_LONG_RUNS) *
                         (int64_t)n_threads;
        n_runs = n_runs < n_panels ? n_runs : n_panels;
        ctx.panels_per_task = (n_panels + n_runs - 1) / n_runs;
        n_runs = (n_panels + ctx.panels_per_task - 1) / ctx.panels_per_task;
        if (ctx.read == QGEMM_READ_GROUPS) {
            ctx.n_runs = n_runs;
            const int64_t S = ctx.kern->group_streams > 1 ? ctx.kern->group_streams : 1;
            ctx.n_pairs = (n_runs + S - 1) / S;
            threadpool_run_shares(pool, qgemm_group_decode_task, &ctx, (int)ctx.n_pairs);
        } else {
            threadpool_run_shares(pool, qgemm_decode_task, &ctx, (int)n_runs);
        }
        mem_free(owned);
        return VLLMC_OK;
    }
    const int64_t n_groups = (ctx.m + QGEMM_LANES - 1) / QGEMM_LANES;
    const size_t act_bytes = (size_t)n_groups * qgemm_group_bytes(ctx.k);
    ctx.panel_bytes = QGEMM_PANEL * qgemm_panel_row_bytes(ctx.k);
    // 24 bytes per token and 4 values, and per thread a panel of 16 rows of 1.5 k bytes.
    const size_t panels_bytes = (size_t)n_threads * ctx.panel_bytes;
    ctx.act = qgemm_scratch(c, act_bytes + panels_bytes + (size_t)ctx.m * sizeof(float *), &owned);
    if (!ctx.act)
        return op_fail(c, VLLMC_ERR_NOMEM, "%s: out of memory for %lld activation rows",
                       isa->name, (long long)ctx.m);
    ctx.panels = ctx.act + act_bytes;
    ctx.y_rows = (float **)(ctx.panels + panels_bytes);
    for (int64_t i = 0; i < ctx.m; i++)
        ctx.y_rows[i] = cpu_row(c->dst, i);
    // Outputs far larger than a core's L2 are written past the caches: the
    // lines would leave them before the next op reads them anyway, and the
    // plain stores first read each line from memory. The 0.6B-shape Q4_0
    // model's pp512 takes 4% less CPU time; smaller outputs (short prompts,
    // batched decode) stay in the caches for the next op.
    ctx.stream = (size_t)ctx.m * (size_t)ctx.n * sizeof(float) >= QGEMM_STREAM_BYTES;
    for (int64_t i = 0; i < ctx.m; i++) // non-temporal stores take whole aligned lines
        ctx.stream = ctx.stream && (uintptr_t)ctx.y_rows[i] % 64 == 0;
    // The empty lanes of a short last group stay zero: computed on, then dropped.
    if (ctx.m % QGEMM_LANES)
        memset(ctx.act + act_bytes - qgemm_group_bytes(ctx.k), 0, qgemm_group_bytes(ctx.k));
    threadpool_run(pool, qgemm_quantize_task, &ctx, (int)n_groups);
    threadpool_run_shares(pool, qgemm_panel_task, &ctx, (int)n_panels);
    mem_free(owned);
    return VLLMC_OK;
}
