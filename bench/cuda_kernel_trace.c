// A kernel timeline of any CUDA program, graph replays included, for finding
// where a decode step's time goes on the GPU (the machine has Nsight Compute,
// whose per-kernel replay hides the gaps between kernels, but no Nsight
// Systems). Loaded by the CUDA driver through CUPTI's injection hook:
//
//   CUDA_INJECTION64_PATH=build-gpu/libkernel_trace.so vllmc bench ... --device cuda
//
// At exit it prints, for the kernels launched from CUDA graphs (all kernels
// and memory copies with VLLMC_TRACE_ALL=1), one line per kernel name and grid: launches per
// step, mean duration, and the mean idle time of the GPU before it (the gap
// since the previous kernel ended; negative when programmatic dependent launch
// let it start earlier). A gap over VLLMC_TRACE_STEP_GAP_US (default 30) ends
// a step. Output goes to stderr, or to the file VLLMC_TRACE_OUT names.
//
// With VLLMC_TRACE_API=1 it also times the CUDA runtime calls on the host
// (CUPTI's runtime API records): one line per function with its calls, mean
// and total time, for finding where a thread that launches the steps waits,
// and a timeline of three graph replays from the middle of the run: the
// host's calls beside what the GPU ran, in one clock.
#include <cupti.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_MAX_RECORDS (4u << 20)
#define TRACE_MAX_KEYS 512
#define TRACE_BUFFER_BYTES (8u << 20)

struct trace_record {
    uint64_t start, end; // ns, GPU clock
    const char *name;    // CUPTI-owned, valid for the process
    uint32_t graph_id;
    int32_t grid[3];
};

struct trace_key {
    char name[96];
    int32_t grid[3];
    uint64_t n;
    double busy_ns, gap_ns;
};

static struct trace_record *trace_records;
static size_t trace_n, trace_dropped;

// Runtime API calls by callback id (CUPTI_RUNTIME_TRACE_CBID_SIZE is ~500).
#define TRACE_MAX_API 2048
static struct {
    uint64_t n, ns, max_ns;
} trace_api[TRACE_MAX_API];

struct trace_api_record {
    uint64_t start, end; // ns, same clock as the GPU records
    uint32_t cbid, thread;
};
#define TRACE_MAX_API_RECORDS (1u << 20)
static struct trace_api_record *trace_api_records;
static size_t trace_api_n;

// Records are appended from CUPTI's buffer-completion callback only.
static void CUPTIAPI trace_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, TRACE_BUFFER_BYTES);
    *size = *buffer ? TRACE_BUFFER_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI trace_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                            size_t size, size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            // Copies join the timeline as pseudo-kernels named by direction,
            // their grid x the bytes moved.
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            if (!trace_records || trace_n == TRACE_MAX_RECORDS) {
                trace_dropped++;
                continue;
            }
            trace_records[trace_n++] = (struct trace_record){
                .start = m->start,
                .end = m->end,
                .name = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "memcpy HtoD"
                        : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "memcpy DtoH"
                                                                         : "memcpy other",
                .graph_id = m->graphId,
                .grid = {(int32_t)(m->bytes < INT32_MAX ? m->bytes : INT32_MAX), 1, 1},
            };
            continue;
        }
        if (rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
            const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)rec;
            if (a->cbid < TRACE_MAX_API && a->end >= a->start) {
                const uint64_t ns = a->end - a->start;
                trace_api[a->cbid].n++;
                trace_api[a->cbid].ns += ns;
                if (ns > trace_api[a->cbid].max_ns)
                    trace_api[a->cbid].max_ns = ns;
            }
            if (trace_api_records && trace_api_n < TRACE_MAX_API_RECORDS)
                trace_api_records[trace_api_n++] = (struct trace_api_record){
                    .start = a->start, .end = a->end, .cbid = a->cbid, .thread = a->threadId};
            continue;
        }
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        if (!trace_records || trace_n == TRACE_MAX_RECORDS) {
            trace_dropped++;
            continue;
        }
        trace_records[trace_n++] = (struct trace_record){
            .start = k->start,
            .end = k->end,
            .name = k->name,
            .graph_id = k->graphId,
            .grid = {k->gridX, k->gridY, k->gridZ},
        };
    }
    free(buffer);
}

// The function name inside an Itanium-mangled symbol (_Z[L][N]<len><name>...),
// or the symbol itself.
static void trace_short_name(const char *sym, char *out, size_t cap)
{
    const char *p = sym;
    if (p[0] == '_' && p[1] == 'Z') {
        p += 2;
        while (*p == 'L' || *p == 'N')
            p++;
        char *end = NULL;
        long len = strtol(p, &end, 10);
        if (end != p && len > 0 && (size_t)len < cap && (long)strlen(end) >= len) {
            memcpy(out, end, (size_t)len);
            out[len] = '\0';
            return;
        }
    }
    snprintf(out, cap, "%s", sym);
}

static int trace_by_start(const void *a, const void *b)
{
    const struct trace_record *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int trace_api_by_total(const void *a, const void *b)
{
    const uint64_t x = trace_api[*(const int *)a].ns, y = trace_api[*(const int *)b].ns;
    return x > y ? -1 : x < y;
}

// The runtime calls that took the most host time, with their count per step.
static void trace_report_api(FILE *f, uint64_t steps)
{
    static int ids[TRACE_MAX_API];
    int n = 0;
    for (int i = 0; i < TRACE_MAX_API; i++)
        if (trace_api[i].n)
            ids[n++] = i;
    if (!n)
        return;
    qsort(ids, (size_t)n, sizeof *ids, trace_api_by_total);
    fprintf(f, "%-40s %10s %10s %10s %10s %12s\n", "runtime call (host)", "calls", "per step",
            "us each", "max us", "total ms");
    for (int j = 0; j < n && j < 24; j++) {
        const int i = ids[j];
        const char *name = NULL;
        if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, (uint32_t)i, &name) !=
                CUPTI_SUCCESS ||
            !name)
            name = "?";
        fprintf(f, "%-40.40s %10llu %10.2f %10.2f %10.1f %12.2f\n", name,
                (unsigned long long)trace_api[i].n,
                steps ? (double)trace_api[i].n / (double)steps : 0.0,
                1e-3 * (double)trace_api[i].ns / (double)trace_api[i].n,
                1e-3 * (double)trace_api[i].max_ns, 1e-6 * (double)trace_api[i].ns);
    }
}

static const char *trace_api_name(uint32_t cbid)
{
    const char *name = NULL;
    if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name) != CUPTI_SUCCESS || !name)
        return "?";
    return name;
}

// Host calls and GPU work from the start of a graph replay in the middle of
// the run to the start of the third replay after it, in time order (records
// sorted by start). Consecutive kernels of one graph replay are one line.
static int trace_api_by_start(const void *a, const void *b)
{
    const struct trace_api_record *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static void trace_report_timeline(FILE *f, const struct trace_record *r, size_t n, double step_gap)
{
    static size_t group[1u << 16];
    size_t n_groups = 0;
    uint64_t graph_end = 0;
    for (size_t i = 0; i < n && n_groups < sizeof group / sizeof group[0]; i++) {
        if (!r[i].graph_id)
            continue;
        if (!n_groups || (double)r[i].start - (double)graph_end > step_gap)
            group[n_groups++] = i;
        if (r[i].end > graph_end)
            graph_end = r[i].end;
    }
    if (n_groups < 8 || !trace_api_n)
        return;
    const size_t first = group[n_groups / 2];
    const uint64_t t0 = r[first].start, t1 = r[group[n_groups / 2 + 3]].start;
    qsort(trace_api_records, trace_api_n, sizeof *trace_api_records, trace_api_by_start);
    fprintf(f, "timeline (us from a graph replay's first kernel, duration; host calls of every "
               "thread):\n");
    size_t a = 0, g = first;
    while (a < trace_api_n && trace_api_records[a].end < t0)
        a++;
    for (int lines = 0; lines < 400; lines++) {
        const bool host = a < trace_api_n && trace_api_records[a].start < t1;
        const bool gpu = g < n && r[g].start < t1;
        if (!host && !gpu)
            break;
        if (host && (!gpu || trace_api_records[a].start <= r[g].start)) {
            const struct trace_api_record *h = &trace_api_records[a++];
            fprintf(f, "  %9.1f %9.1f  host[%u] %s\n", 1e-3 * ((double)h->start - (double)t0),
                    1e-3 * (double)(h->end - h->start), h->thread % 1000, trace_api_name(h->cbid));
            continue;
        }
        size_t e = g;
        uint64_t end = r[g].end;
        while (r[g].graph_id && e + 1 < n && r[e + 1].graph_id == r[g].graph_id &&
               r[e + 1].start < t1 && (double)r[e + 1].start - (double)end <= step_gap) {
            e++;
            if (r[e].end > end)
                end = r[e].end;
        }
        char name[96];
        trace_short_name(r[g].name ? r[g].name : "?", name, sizeof name);
        if (e > g)
            fprintf(f, "  %9.1f %9.1f  gpu  graph %u: %zu kernels from %s\n",
                    1e-3 * ((double)r[g].start - (double)t0), 1e-3 * (double)(end - r[g].start),
                    r[g].graph_id, e - g + 1, name);
        else
            fprintf(f, "  %9.1f %9.1f  gpu  %s (%d)\n", 1e-3 * ((double)r[g].start - (double)t0),
                    1e-3 * (double)(r[g].end - r[g].start), name, r[g].grid[0]);
        g = e + 1;
    }
}

static int trace_by_busy(const void *a, const void *b)
{
    const struct trace_key *x = a, *y = b;
    const double bx = x->busy_ns + x->gap_ns, by = y->busy_ns + y->gap_ns;
    return bx > by ? -1 : bx < by;
}

static void trace_report(void)
{
    cuptiActivityFlushAll(1);
    const char *path = getenv("VLLMC_TRACE_OUT");
    FILE *f = path && *path ? fopen(path, "w") : NULL;
    if (!f)
        f = stderr;
    const bool all = getenv("VLLMC_TRACE_ALL") && atoi(getenv("VLLMC_TRACE_ALL"));
    const char *gap_env = getenv("VLLMC_TRACE_STEP_GAP_US");
    const double step_gap = 1e3 * (gap_env ? atof(gap_env) : 30.0);

    qsort(trace_records, trace_n, sizeof *trace_records, trace_by_start);
    trace_report_timeline(f, trace_records, trace_n, step_gap);
    size_t n = 0;
    for (size_t i = 0; i < trace_n; i++)
        if (all || trace_records[i].graph_id)
            trace_records[n++] = trace_records[i];
    qsort(trace_records, n, sizeof *trace_records, trace_by_start);

    static struct trace_key keys[TRACE_MAX_KEYS];
    int n_keys = 0;
    uint64_t steps = n ? 1 : 0;
    double step_ns = 0, busy_ns = 0, step_start = n ? (double)trace_records[0].start : 0;
    double between_ns = 0; // from a step's last end to the next step's first start
    uint64_t prev_end = n ? trace_records[0].start : 0;
    for (size_t i = 0; i < n; i++) {
        const struct trace_record *r = &trace_records[i];
        double gap = (double)r->start - (double)prev_end;
        const bool new_step = i && gap > step_gap;
        if (new_step) {
            between_ns += gap;
            step_ns += (double)prev_end - step_start;
            step_start = (double)r->start;
            steps++;
            gap = 0;
        }
        char name[96];
        trace_short_name(r->name ? r->name : "?", name, sizeof name);
        int k = 0;
        while (k < n_keys && (strcmp(keys[k].name, name) || memcmp(keys[k].grid, r->grid, sizeof r->grid)))
            k++;
        if (k == n_keys && n_keys < TRACE_MAX_KEYS) {
            snprintf(keys[k].name, sizeof keys[k].name, "%s", name);
            memcpy(keys[k].grid, r->grid, sizeof r->grid);
            n_keys++;
        }
        if (k < n_keys) {
            keys[k].n++;
            keys[k].busy_ns += (double)(r->end - r->start);
            keys[k].gap_ns += gap;
        }
        busy_ns += (double)(r->end - r->start);
        if (new_step || r->end > prev_end)
            prev_end = r->end;
    }
    if (n)
        step_ns += (double)prev_end - step_start;
    qsort(keys, (size_t)n_keys, sizeof *keys, trace_by_busy);

    const double per = steps ? 1e-3 / (double)steps : 0;
    fprintf(f, "kernel trace: %zu kernels%s in %llu steps (%zu dropped); per step %.1f us from "
               "first start to last end, kernels' own time %.1f us\n",
            n, all ? "" : " from graphs", (unsigned long long)steps, trace_dropped,
            step_ns * per, busy_ns * per);
    if (steps > 1)
        fprintf(f, "between steps (a gap over %.0f us): %.1f us on average\n", step_gap * 1e-3,
                1e-3 * between_ns / (double)(steps - 1));
    fprintf(f, "%-40s %-16s %8s %10s %10s %12s %12s\n", "kernel", "grid", "per step", "us each",
            "gap before", "us/step", "gap us/step");
    for (int k = 0; k < n_keys; k++) {
        const struct trace_key *e = &keys[k];
        char grid[40];
        snprintf(grid, sizeof grid, "%dx%dx%d", e->grid[0], e->grid[1], e->grid[2]);
        fprintf(f, "%-40.40s %-16s %8.2f %10.2f %10.2f %12.1f %12.1f\n", e->name, grid,
                (double)e->n / (double)steps, 1e-3 * e->busy_ns / (double)e->n,
                1e-3 * e->gap_ns / (double)e->n, e->busy_ns * per, e->gap_ns * per);
    }
    trace_report_api(f, steps);
    if (f != stderr)
        fclose(f);
}

// Called by the CUDA driver when CUDA_INJECTION64_PATH names this library.
int InitializeInjection(void);
int InitializeInjection(void)
{
    trace_records = calloc(TRACE_MAX_RECORDS, sizeof *trace_records);
    if (!trace_records)
        return 0;
    if (cuptiActivityRegisterCallbacks(trace_buffer_requested, trace_buffer_completed) !=
            CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS) {
        fprintf(stderr, "kernel trace: CUPTI refused the activity callbacks\n");
        return 0;
    }
    const char *api = getenv("VLLMC_TRACE_API");
    if (api && atoi(api)) {
        trace_api_records = calloc(TRACE_MAX_API_RECORDS, sizeof *trace_api_records);
        if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS)
            fprintf(stderr, "kernel trace: CUPTI refused the runtime API records\n");
    }
    atexit(trace_report);
    return 1;
}
