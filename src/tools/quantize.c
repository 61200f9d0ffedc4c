// `vllmc quantize IN OUT --type T`: writes a GGUF v3 file whose weight
// matrices are quantized to T (a GGUF type or one of llama.cpp's mixtures,
// see model/quant_mix.c) from a GGUF file of F32/F16/BF16 (or quantized)
// tensors, or from a Hugging Face folder of F32/F16/BF16 safetensors
// (model/hf_gguf.c: llama.cpp's names and keys, the tokenizer.json kept
// whole). GGUF metadata, the tokenizer included, is copied; each tensor's
// error against the source (RMSE, max abs) is printed.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/cpu/quant.h"
#include "backend/cpu/quant/quantize.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/threadpool.h"
#include "model/gguf.h"
#include "model/gguf_write.h"
#include "model/hf_gguf.h"
#include "model/quant_mix.h"
#include "model/safetensors.h"
#include "tools/cli.h"
#include "tools/commands.h"

#define QZ_ROWS_PER_TASK 16
#define QZ_MAX_THREADS 256

static void quantize_usage(FILE *f)
{
    fprintf(f,
            "usage: vllmc quantize IN OUT.gguf --type TYPE [--pure] [--threads N] [--quiet]\n"
            "  IN: a GGUF file, or a Hugging Face folder of F32/F16/BF16 safetensors\n"
            "  TYPE: %s\n"
            "  --pure      every weight matrix in TYPE (no mixture, no Q6_K output)\n"
            "  --threads   worker threads (default: all cores)\n"
            "  --quiet     no per-tensor lines, only the summary\n",
            quant_mix_names());
}

// Per-thread partial sums of one tensor's error.
struct qz_stats {
    double sum_sq_err, sum_sq_src, max_abs;
    int64_t bad_row; // first row with a NaN or Inf, or -1
};

struct qz_job {
    const uint8_t *src;   // borrowed: source rows
    const int32_t *row_map; // borrowed: output row r is source row row_map[r]; NULL = r
    size_t src_row_bytes;
    dequant_row_fn src_to_f32;
    uint8_t *dst;         // [n_rows, dst_row_bytes]
    size_t dst_row_bytes;
    enum dtype dst_type;
    quant_quantize_fn quantize; // NULL for float destinations
    dequant_row_fn dst_to_f32;
    int64_t ne0, n_rows;
    float *scratch;       // [n_threads, 2 * ne0]
    struct qz_stats stats[QZ_MAX_THREADS];
};

static void store_float_row(enum dtype t, const float *x, void *dst, int64_t n)
{
    if (t == DTYPE_F32) {
        memcpy(dst, x, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = t == DTYPE_F16 ? f32_to_fp16(x[i]) : f32_to_bf16(x[i]);
}

static void qz_task(void *p, int task, int thread)
{
    struct qz_job *job = p;
    float *x = job->scratch + (size_t)thread * 2 * (size_t)job->ne0;
    float *y = x + job->ne0;
    struct qz_stats *st = &job->stats[thread];
    int64_t r0 = (int64_t)task * QZ_ROWS_PER_TASK;
    int64_t r1 = r0 + QZ_ROWS_PER_TASK < job->n_rows ? r0 + QZ_ROWS_PER_TASK : job->n_rows;
    for (int64_t r = r0; r < r1; r++) {
        int64_t sr = job->row_map ? job->row_map[r] : r;
        job->src_to_f32(job->src + (size_t)sr * job->src_row_bytes, x, job->ne0);
        bool finite = true;
        for (int64_t i = 0; i < job->ne0; i++)
            finite = finite && isfinite(x[i]);
        if (!finite) {
            if (st->bad_row < 0 || r < st->bad_row)
                st->bad_row = r;
            continue;
        }
        uint8_t *out = job->dst + (size_t)r * job->dst_row_bytes;
        if (job->quantize)
            job->quantize(x, out, job->ne0);
        else
            store_float_row(job->dst_type, x, out, job->ne0);
        job->dst_to_f32(out, y, job->ne0);
        for (int64_t i = 0; i < job->ne0; i++) {
            double e = (double)y[i] - (double)x[i];
            st->sum_sq_err += e * e;
            st->sum_sq_src += (double)x[i] * x[i];
            if (fabs(e) > st->max_abs)
                st->max_abs = fabs(e);
        }
    }
}

// One input tensor, from either kind of source.
struct qz_src {
    char *name;             // owned: the GGUF name
    enum dtype dtype;
    int n_dims;
    int64_t ne[4];
    const void *data;       // borrowed from the mapping
    size_t n_bytes;
    const int32_t *row_map; // borrowed (hf_gguf): see struct qz_job
};

// The number of blocks: the largest N with a tensor named blk.N.*, plus one.
static int count_layers(const struct qz_src *src, size_t n_src)
{
    int n = 0;
    for (size_t i = 0; i < n_src; i++) {
        if (!strncmp(src[i].name, "blk.", 4)) {
            int layer = atoi(src[i].name + 4);
            n = layer + 1 > n ? layer + 1 : n;
        }
    }
    return n;
}

static bool is_hf_input(const char *path)
{
    struct stat st;
    size_t n = strlen(path);
    return (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) ||
           (n > 12 && !strcmp(path + n - 12, ".safetensors"));
}

// The tensors of the input, in file order (GGUF) or load order (HF).
static struct qz_src *sources_open(struct gguf_file *g, const struct hf_gguf *h, size_t *n_out)
{
    size_t n = g ? gguf_n_tensors(g) : (size_t)h->n_tensors;
    struct qz_src *src = mem_calloc(n ? n : 1, sizeof *src);
    *n_out = n;
    for (size_t i = 0; src && i < n; i++) {
        struct qz_src *s = &src[i];
        if (g) {
            const struct gguf_tensor_info *t = gguf_tensor_at(g, i);
            s->name = mem_strndup(t->name.ptr, (size_t)t->name.len);
            s->dtype = t->dtype;
            s->n_dims = t->n_dims;
            memcpy(s->ne, t->ne, sizeof s->ne);
            s->data = t->data;
            s->n_bytes = t->n_bytes;
        } else {
            const struct hf_gguf_tensor *t = &h->tensors[i];
            s->name = mem_strdup(t->name);
            s->dtype = t->src->dtype;
            s->n_dims = t->n_dims;
            memcpy(s->ne, t->ne, sizeof s->ne);
            s->data = t->src->data;
            s->n_bytes = t->src->n_bytes;
            s->row_map = t->row_map;
        }
        if (!s->name) {
            for (size_t j = 0; j < i; j++)
                mem_free(src[j].name);
            mem_free(src);
            return NULL;
        }
    }
    return src;
}

static void sources_free(struct qz_src *src, size_t n)
{
    for (size_t i = 0; src && i < n; i++)
        mem_free(src[i].name);
    mem_free(src);
}

int quantize_main(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *type = NULL, *v;
    long threads = 0;
    bool pure = false, quiet = false;
    for (int i = 1; i < argc; i++) {
        if (cli_opt(argc, argv, &i, "--type", "-t", &v)) {
            if (!v)
                return 2;
            type = v;
        } else if (cli_opt(argc, argv, &i, "--threads", NULL, &v)) {
            if (!v || !cli_parse_int("--threads", v, 0, QZ_MAX_THREADS, &threads))
                return 2;
        } else if (!strcmp(argv[i], "--pure")) {
            pure = true;
        } else if (!strcmp(argv[i], "--quiet")) {
            quiet = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            quantize_usage(stdout);
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "quantize: unknown option %s\n", argv[i]);
            quantize_usage(stderr);
            return 2;
        } else if (!in) {
            in = argv[i];
        } else if (!out) {
            out = argv[i];
        } else {
            quantize_usage(stderr);
            return 2;
        }
    }
    struct quant_mix mix;
    if (!in || !out || !type) {
        quantize_usage(stderr);
        return 2;
    }
    if (!quant_mix_parse(type, pure, &mix)) {
        fprintf(stderr, "quantize: unknown type %s (expected one of: %s)\n", type,
                quant_mix_names());
        return 2;
    }

    struct err err = {0};
    struct gguf_file *g = NULL;
    struct hf_gguf *h = NULL;
    struct qz_src *src = NULL;
    size_t n_tensors = 0;
    struct gguf_writer *w = NULL;
    struct threadpool *pool = NULL;
    uint8_t *dst = NULL;
    float *scratch = NULL;
    enum dtype *types = NULL;
    int rc = 1;
    if (is_hf_input(in) ? hf_gguf_open(in, &h, &err) != VLLMC_OK
                        : gguf_open(in, &g, &err) != VLLMC_OK) {
        fprintf(stderr, "quantize: %s\n", err.msg);
        goto done;
    }
    if (!(src = sources_open(g, h, &n_tensors))) {
        fprintf(stderr, "quantize: out of memory\n");
        goto done;
    }
    if (threadpool_create((int)threads, &pool, &err) || gguf_writer_create(&w, &err)) {
        fprintf(stderr, "quantize: %s\n", err.msg);
        goto done;
    }
    int n_threads = threadpool_n_threads(pool);
    if (n_threads > QZ_MAX_THREADS)
        n_threads = QZ_MAX_THREADS;

    // Metadata: everything but the alignment (ours is the default 32) and
    // the file type, which now names the target.
    for (size_t i = 0; g && i < gguf_n_kv(g); i++) {
        const struct gguf_kv *kv = gguf_kv_at(g, i);
        if (gguf_str_eq(kv->key, "general.alignment"))
            continue;
        if (gguf_writer_copy_kv(w, g, kv))
            goto write_fail;
    }
    if (h && hf_gguf_set_metadata(h, w))
        goto write_fail;
    if (gguf_writer_set_u32(w, "general.file_type", mix.file_type) ||
        gguf_writer_set_u32(w, "general.quantization_version", 2))
        goto write_fail;

    // Plan: a type per tensor.
    int n_layers = count_layers(src, n_tensors);
    bool tied = true;
    for (size_t i = 0; i < n_tensors; i++)
        tied = tied && strcmp(src[i].name, "output.weight");
    types = mem_calloc(n_tensors ? n_tensors : 1, sizeof *types);
    if (!types) {
        fprintf(stderr, "quantize: out of memory\n");
        goto done;
    }
    int64_t max_ne0 = 1;
    size_t max_bytes = 1;
    for (size_t i = 0; i < n_tensors; i++) {
        const struct qz_src *t = &src[i];
        const char *name = t->name;
        if (!cpu_dequant_row(t->dtype)) {
            fprintf(stderr, "quantize: tensor %s has type %s, which cannot be read\n", name,
                    dtype_name(t->dtype));
            goto done;
        }
        bool is_output = !strcmp(name, "output.weight") ||
                         (tied && !strcmp(name, "token_embd.weight"));
        enum dtype wanted;
        types[i] = quant_mix_tensor_type(&mix, name, t->n_dims, t->ne[0], n_layers, is_output,
                                         &wanted);
        if (types[i] != wanted)
            printf("note: %s: rows of %lld are not a multiple of the %s block (%d); using %s\n",
                   name, (long long)t->ne[0], dtype_name(wanted), dtype_info(wanted)->block_size,
                   dtype_name(types[i]));
        enum vllmc_status s = gguf_writer_add_tensor(w, name, types[i], t->n_dims, t->ne);
        if (s)
            goto write_fail;
        max_ne0 = t->ne[0] > max_ne0 ? t->ne[0] : max_ne0;
        size_t nb = gguf_writer_tensor_bytes(w, i);
        max_bytes = nb > max_bytes ? nb : max_bytes;
    }
    dst = mem_alloc(max_bytes);
    scratch = mem_alloc((size_t)n_threads * 2 * (size_t)max_ne0 * sizeof(float));
    if (!dst || !scratch) {
        fprintf(stderr, "quantize: out of memory (%zu bytes for the largest tensor)\n",
                max_bytes);
        goto done;
    }
    if (gguf_writer_open(w, out))
        goto write_fail;

    printf("quantize: %s -> %s as %s%s, %zu tensors, %d threads\n", in, out, mix.name,
           pure ? " (pure)" : "", n_tensors, n_threads);
    double t_start = time_now_s(), total_sq_err = 0, total_sq_src = 0, total_max = 0;
    size_t in_bytes = 0, out_bytes = 0;
    for (size_t i = 0; i < n_tensors; i++) {
        const struct qz_src *t = &src[i];
        struct qz_job *job = mem_calloc(1, sizeof *job);
        if (!job) {
            fprintf(stderr, "quantize: out of memory\n");
            goto done;
        }
        job->src = t->data;
        job->row_map = t->row_map;
        job->src_row_bytes = dtype_row_bytes(t->dtype, t->ne[0]);
        job->src_to_f32 = cpu_dequant_row(t->dtype);
        job->dst = dst;
        job->dst_type = types[i];
        job->dst_row_bytes = dtype_row_bytes(types[i], t->ne[0]);
        job->quantize = quant_quantize_row_fn(types[i]);
        job->dst_to_f32 = cpu_dequant_row(types[i]);
        job->ne0 = t->ne[0];
        job->n_rows = t->ne[0] ? (int64_t)(t->n_bytes / job->src_row_bytes) : 0;
        job->scratch = scratch;
        for (int k = 0; k < QZ_MAX_THREADS; k++)
            job->stats[k].bad_row = -1;
        threadpool_run(pool, qz_task, job,
                       (int)((job->n_rows + QZ_ROWS_PER_TASK - 1) / QZ_ROWS_PER_TASK));
        struct qz_stats sum = {0, 0, 0, -1};
        for (int k = 0; k < n_threads; k++) {
            const struct qz_stats *s = &job->stats[k];
            sum.sum_sq_err += s->sum_sq_err;
            sum.sum_sq_src += s->sum_sq_src;
            sum.max_abs = s->max_abs > sum.max_abs ? s->max_abs : sum.max_abs;
            if (s->bad_row >= 0 && (sum.bad_row < 0 || s->bad_row < sum.bad_row))
                sum.bad_row = s->bad_row;
        }
        mem_free(job);
        if (sum.bad_row >= 0) {
            fprintf(stderr, "quantize: tensor %s has a NaN or infinite value in row %lld\n",
                    t->name, (long long)sum.bad_row);
            goto done;
        }
        size_t nb = gguf_writer_tensor_bytes(w, i);
        if (gguf_writer_write_tensor(w, i, dst, nb))
            goto write_fail;
        in_bytes += t->n_bytes;
        out_bytes += nb;
        total_sq_err += sum.sum_sq_err;
        total_sq_src += sum.sum_sq_src;
        total_max = sum.max_abs > total_max ? sum.max_abs : total_max;
        if (!quiet) {
            double n_el_d = 1;
            for (int d = 0; d < t->n_dims; d++)
                n_el_d *= (double)t->ne[d];
            double rmse = sqrt(sum.sum_sq_err / n_el_d), rms = sqrt(sum.sum_sq_src / n_el_d);
            printf("%-32s %-6s -> %-6s rmse %.3e (%.2f%% of rms) max_abs %.3e\n", t->name,
                   dtype_name(t->dtype), dtype_name(types[i]),
                   rmse, rms > 0 ? 100.0 * rmse / rms : 0.0, sum.max_abs);
        }
    }
    if (gguf_writer_close(w))
        goto write_fail;
    printf("quantize: %.1f MiB -> %.1f MiB, relative rmse %.3e, max_abs %.3e, %.1f s\n",
           (double)in_bytes / 1048576.0, (double)out_bytes / 1048576.0,
           total_sq_src > 0 ? sqrt(total_sq_err / total_sq_src) : 0.0, total_max,
           time_now_s() - t_start);
    rc = 0;
    goto done;
write_fail:
    fprintf(stderr, "quantize: %s\n", gguf_writer_err(w)->msg);
done:
    if (rc && w && out)
        remove(out);
    mem_free(types);
    mem_free(dst);
    mem_free(scratch);
    gguf_writer_free(w);
    threadpool_free(pool);
    sources_free(src, n_tensors);
    hf_gguf_free(h);
    gguf_free(g);
    return rc;
}
