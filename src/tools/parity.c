// `vllmc parity`: greedy tokens against a reference JSON. Per case EXACT (all
// tokens equal), TOP_K_MATCH (the first differing token is inside the
// reference's top-k at that step) or FAIL; exit status 1 on any FAIL.
// Accepts testdata/golden/*.greedy.json ({cases: [...]}) and llama.cpp refs
// files (*.refs.json, one pass chosen with --pass).
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "model/batch_builder.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tools/cli.h"
#include "tools/commands.h"

#define PARITY_BLOCK_SIZE 16
#define PARITY_MAX_K 16

struct parity_case {
    int32_t *prompt; // owned [n_prompt]
    int n_prompt;
    int32_t *ref; // owned [n_ref]: the reference's greedy tokens
    int n_ref;
    int32_t *topk; // owned [n_ref, PARITY_MAX_K]; -1 pads; row of -1 = no top-k at that step
    float *topv;   // owned [n_ref, PARITY_MAX_K]: the reference's values (NAN: none)
    bool topv_logits; // topv holds raw logits (golden files), not log-probabilities (refs files)
    int k;         // the widest top-k seen
};

// One running sequence (a case, possibly repeated to fill the batch).
struct parity_seq {
    const struct parity_case *c;
    int case_index;
    int32_t *ids; // owned: prompt then generated, [n_prompt + n_ref]
    int n_ids;
    int32_t *table; // owned block table
    int n_blocks;
    int diverged_at; // -1 while equal
    double lp_err;   // largest |our logprob - reference's| over its top-k, before divergence
    bool done;
};

struct parity {
    const char *model_path;
    const char *ref_path;
    const char *device;
    const char *pass;
    enum dtype kv_dtype; // --kv-cache-dtype; f32, as the engine's auto
    bool weights_f16;    // --dtype float16
    long batch;
    long threads;
    struct parity_case *cases;
    int n_cases;
};

static void parity_usage(FILE *f)
{
    fprintf(f, "usage: vllmc parity --reference REF.json [--model PATH] [--device cpu|cuda]\n"
               "                    [--batch 1|8] [--pass exact_dequant|default] [--threads N]\n"
               "                    [--kv-cache-dtype auto|f32|f16|bf16]\n"
               "                    [--dtype auto|bfloat16|float16]\n"
               "  REF.json: testdata/golden/*.greedy.json or quant/models/*.refs.json\n");
}

// ---- reading the reference ----

static int32_t *json_ids(json_t *arr, int *n)
{
    *n = (int)json_array_size(arr);
    int32_t *out = mem_alloc((size_t)(*n ? *n : 1) * sizeof(*out));
    if (!out)
        return NULL;
    for (int i = 0; i < *n; i++) {
        json_t *v = json_array_get(arr, (size_t)i);
        if (!json_is_integer(v)) {
            mem_free(out);
            return NULL;
        }
        out[i] = (int32_t)json_integer_value(v);
    }
    return out;
}

// Fills row step of c->topk from [[id, value], ...].
static void case_set_topk(struct parity_case *c, int step, json_t *list)
{
    if (!json_is_array(list) || step >= c->n_ref)
        return;
    int k = 0;
    for (size_t i = 0; i < json_array_size(list) && k < PARITY_MAX_K; i++) {
        json_t *id = json_array_get(json_array_get(list, i), 0);
        json_t *v = json_array_get(json_array_get(list, i), 1);
        if (json_is_integer(id)) {
            c->topv[step * PARITY_MAX_K + k] = json_is_number(v) ? (float)json_number_value(v) : NAN;
            c->topk[step * PARITY_MAX_K + k++] = (int32_t)json_integer_value(id);
        }
    }
    if (k > c->k)
        c->k = k;
}

static bool case_init(struct parity_case *c, json_t *prompt, json_t *gen)
{
    memset(c, 0, sizeof(*c));
    c->prompt = json_ids(prompt, &c->n_prompt);
    c->ref = json_ids(gen, &c->n_ref);
    c->topk = mem_alloc((size_t)(c->n_ref ? c->n_ref : 1) * PARITY_MAX_K * sizeof(*c->topk));
    c->topv = mem_alloc((size_t)(c->n_ref ? c->n_ref : 1) * PARITY_MAX_K * sizeof(*c->topv));
    if (!c->prompt || !c->ref || !c->topk || !c->topv || !c->n_prompt || !c->n_ref)
        return false;
    for (int i = 0; i < c->n_ref * PARITY_MAX_K; i++) {
        c->topk[i] = -1;
        c->topv[i] = NAN;
    }
    return true;
}

static int parity_read(struct parity *p)
{
    json_error_t jerr;
    json_t *root = json_load_file(p->ref_path, 0, &jerr);
    if (!root) {
        fprintf(stderr, "vllmc: %s: %s (line %d)\n", p->ref_path, jerr.text, jerr.line);
        return 1;
    }
    json_t *list = json_object_get(root, "cases");
    bool refs_format = !list;
    if (refs_format) {
        json_t *pass = json_object_get(root, p->pass);
        list = json_object_get(pass, "results");
    }
    int rc = 0;
    size_t n = json_array_size(list);
    p->cases = mem_calloc(n ? n : 1, sizeof(*p->cases));
    if (!n || !p->cases) {
        fprintf(stderr, "vllmc: %s: no cases (expected \"cases\" or \"%s\".\"results\")\n",
                p->ref_path, p->pass);
        rc = 1;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(list, i);
        struct parity_case *c = &p->cases[p->n_cases++];
        json_t *prompt = json_object_get(e, refs_format ? "prompt_tokens" : "prompt_token_ids");
        json_t *gen = json_object_get(e, refs_format ? "generated_tokens" : "generated_token_ids");
        if (!case_init(c, prompt, gen)) {
            fprintf(stderr, "vllmc: %s: case %zu has no prompt or generated token ids\n",
                    p->ref_path, i);
            rc = 1;
            goto out;
        }
        if (refs_format) {
            size_t j;
            json_t *step;
            json_array_foreach(json_object_get(e, "steps"), j, step)
            {
                json_t *top = json_object_get(step, "top5_prefill");
                if (!json_is_array(top))
                    top = json_object_get(step, "top5_decode");
                case_set_topk(c, (int)j, top);
            }
        } else {
            case_set_topk(c, 0, json_object_get(e, "first_step_top10"));
            c->topv_logits = true; // [id, logit] pairs
        }
    }
out:
    json_decref(root);
    return rc;
}

// ---- running ----

struct parity_run {
    struct backend *be;
    struct model *m;
    struct kv_cache *kv;
    struct batch_builder bb;
    float *logits;    // [n_seqs, n_vocab] host
    void *logits_dev; // device copy, device backends only
    struct parity_seq *seqs;
    int n_seqs;
};

static int32_t argmax(const float *x, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

// Largest |ours - value| over the reference's top-k of one step, comparing
// log_softmax(logits) with log-probabilities, or the logits themselves when
// the reference holds logits: how far apart the two computations are, beyond
// the token choice.
static double logprob_error(const float *logits, int n_vocab, const int32_t *ids,
                            const float *values, bool values_are_logits)
{
    if (ids[0] < 0 || isnan(values[0]))
        return 0.0; // no reference values at this step: skip the pass over the vocabulary
    double lse = 0.0;
    if (!values_are_logits) {
        float mx = logits[0];
        for (int i = 1; i < n_vocab; i++)
            mx = logits[i] > mx ? logits[i] : mx;
        double sum = 0.0;
        for (int i = 0; i < n_vocab; i++)
            sum += exp((double)logits[i] - (double)mx);
        lse = (double)mx + log(sum);
    }
    double worst = 0.0;
    for (int k = 0; k < PARITY_MAX_K && ids[k] >= 0; k++) {
        if (ids[k] >= n_vocab || isnan(values[k]))
            continue;
        double d = fabs((double)logits[ids[k]] - lse - (double)values[k]);
        worst = d > worst ? d : worst;
    }
    return worst;
}

// One model step over the listed sequences: each runs its tokens from pos0
// to its current end; picks the next greedy token of each.
static int parity_step(struct parity_run *r, int *idx, int n, const int *pos0)
{
    struct err err = {0};
    int n_vocab = r->m->hp.n_vocab;
    batch_builder_clear(&r->bb);
    for (int i = 0; i < n; i++) {
        struct parity_seq *s = &r->seqs[idx[i]];
        if (batch_builder_add(&r->bb, s->ids + pos0[i], s->n_ids - pos0[i], pos0[i], s->table,
                              s->n_blocks, PARITY_BLOCK_SIZE, BATCH_LOGITS_LAST, &err)) {
            fprintf(stderr, "vllmc: %s\n", err.msg);
            return 1;
        }
    }
    struct model_batch b;
    struct tensor lt;
    if (batch_builder_finish(&r->bb, &b, &err)) {
        fprintf(stderr, "vllmc: %s\n", err.msg);
        return 1;
    }
    tensor_init_2d(&lt, DTYPE_F32, r->logits_dev ? r->logits_dev : r->logits, n_vocab, n);
    lt.location = backend_location(r->be);
    if (model_forward(r->m, &b, r->kv, &lt, &err)) {
        fprintf(stderr, "vllmc: forward: %s\n", err.msg);
        return 1;
    }
    if (r->logits_dev && (backend_download(r->be, r->logits, r->logits_dev,
                                           (size_t)n * (size_t)n_vocab * sizeof(float)) ||
                          backend_sync(r->be))) {
        fprintf(stderr, "vllmc: %s\n", backend_err(r->be)->msg);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        struct parity_seq *s = &r->seqs[idx[i]];
        int step = s->n_ids - s->c->n_prompt;
        const float *row = r->logits + (size_t)i * (size_t)n_vocab;
        int32_t tok = argmax(row, n_vocab);
        if (s->diverged_at < 0) {
            double e = logprob_error(row, n_vocab, s->c->topk + (size_t)step * PARITY_MAX_K,
                                     s->c->topv + (size_t)step * PARITY_MAX_K,
                                     s->c->topv_logits);
            s->lp_err = e > s->lp_err ? e : s->lp_err;
        }
        if (tok != s->c->ref[step] && s->diverged_at < 0) {
            s->diverged_at = step;
            s->done = true; // the verdict is made at the first divergence
        }
        s->ids[s->n_ids++] = tok;
        if (s->n_ids - s->c->n_prompt >= s->c->n_ref)
            s->done = true;
    }
    return 0;
}

// Runs the sequences group by group, batch at a time, to their reference length.
static int parity_generate(struct parity_run *r, int batch)
{
    int idx[64], pos0[64];
    for (int g0 = 0; g0 < r->n_seqs; g0 += batch) {
        int g1 = g0 + batch < r->n_seqs ? g0 + batch : r->n_seqs;
        // Prefill: every prompt of the group in one flat batch when it fits.
        int n = 0, tokens = 0;
        for (int s = g0; s <= g1; s++) {
            bool flush = s == g1 || (n && tokens + r->seqs[s].n_ids > r->m->n_tokens_max);
            if (flush && n) {
                if (parity_step(r, idx, n, pos0))
                    return 1;
                n = tokens = 0;
            }
            if (s == g1)
                break;
            idx[n] = s;
            pos0[n++] = 0;
            tokens += r->seqs[s].n_ids;
        }
        // Decode until every sequence of the group is done.
        for (;;) {
            n = 0;
            for (int s = g0; s < g1; s++) {
                if (r->seqs[s].done)
                    continue;
                idx[n] = s;
                pos0[n++] = r->seqs[s].n_ids - 1;
            }
            if (!n)
                break;
            if (parity_step(r, idx, n, pos0))
                return 1;
        }
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int parity_report(const struct parity_run *r)
{
    int n_exact = 0, n_topk = 0, n_fail = 0;
    double *lp = mem_alloc((size_t)(r->n_seqs ? r->n_seqs : 1) * sizeof(*lp));
    for (int i = 0; i < r->n_seqs; i++) {
        const struct parity_seq *s = &r->seqs[i];
        const struct parity_case *c = s->c;
        if (lp)
            lp[i] = s->lp_err;
        printf("case %d (prompt %d tokens, %d reference tokens): ", s->case_index, c->n_prompt,
               c->n_ref);
        if (s->diverged_at < 0) {
            printf("EXACT\n");
            n_exact++;
            continue;
        }
        int step = s->diverged_at;
        int32_t ours = s->ids[c->n_prompt + step];
        int rank = -1;
        const int32_t *top = c->topk + (size_t)step * PARITY_MAX_K;
        for (int k = 0; k < PARITY_MAX_K && top[k] >= 0; k++)
            if (top[k] == ours)
                rank = k;
        if (rank >= 0) {
            printf("TOP_K_MATCH at step %d: ours %d (reference's #%d), reference %d\n", step, ours,
                   rank + 1, c->ref[step]);
            n_topk++;
        } else {
            printf("FAIL at step %d: ours %d, reference %d%s\n", step, ours, c->ref[step],
                   top[0] < 0 ? " (no top-k at this step)" : " (not in the reference's top-k)");
            n_fail++;
        }
    }
    // Each case's largest logprob error up to its divergence; the spread over
    // cases tells rounding noise (~1e-4) from a real difference (~1e-2).
    if (lp && r->n_seqs) {
        qsort(lp, (size_t)r->n_seqs, sizeof(*lp), cmp_double);
        printf("%s error (largest |ours - reference| over the reference's top-k before "
               "divergence): median %.2e, max %.2e\n",
               r->seqs[0].c->topv_logits ? "logit" : "logprob",
               lp[r->n_seqs / 2], lp[r->n_seqs - 1]);
    }
    mem_free(lp);
    printf("parity: %d EXACT, %d TOP_K_MATCH, %d FAIL\n", n_exact, n_topk, n_fail);
    return n_fail ? 1 : 0;
}

static int parity_run_all(struct parity *p)
{
    struct parity_run r = {0};
    struct err err = {0};
    int rc = cli_backend_create(p->device, (int)p->threads, false, &r.be);
    if (rc)
        return rc;
    rc = 1;
    struct model_load_params lp;
    model_load_params_default(&lp);
    lp.weights_f16 = p->weights_f16;
    if (model_load(p->model_path, r.be, &lp, &r.m, &err)) {
        fprintf(stderr, "vllmc: %s\n", err.msg);
        goto out;
    }
    int n_vocab = r.m->hp.n_vocab;
    // A batch wider than the case list repeats cases so that it really runs that wide.
    r.n_seqs = p->n_cases > p->batch ? p->n_cases : (int)p->batch;
    r.seqs = mem_calloc((size_t)r.n_seqs, sizeof(*r.seqs));
    if (!r.seqs)
        goto out;
    int max_blocks = 1, total_blocks = 0;
    for (int i = 0; i < r.n_seqs; i++) {
        struct parity_seq *s = &r.seqs[i];
        s->case_index = i % p->n_cases;
        s->c = &p->cases[s->case_index];
        for (int j = 0; j < s->c->n_prompt; j++)
            if (s->c->prompt[j] < 0 || s->c->prompt[j] >= n_vocab) {
                fprintf(stderr, "vllmc: case %d: prompt token %d outside the vocabulary\n",
                        s->case_index, s->c->prompt[j]);
                goto out;
            }
        int len = s->c->n_prompt + s->c->n_ref;
        s->n_blocks = (len + PARITY_BLOCK_SIZE - 1) / PARITY_BLOCK_SIZE;
        s->ids = mem_alloc((size_t)len * sizeof(*s->ids));
        s->table = mem_alloc((size_t)s->n_blocks * sizeof(*s->table));
        if (!s->ids || !s->table)
            goto out;
        memcpy(s->ids, s->c->prompt, (size_t)s->c->n_prompt * sizeof(*s->ids));
        s->n_ids = s->c->n_prompt;
        s->diverged_at = -1;
        for (int b = 0; b < s->n_blocks; b++)
            s->table[b] = total_blocks + b;
        total_blocks += s->n_blocks;
        if (s->n_blocks > max_blocks)
            max_blocks = s->n_blocks;
    }
    struct kv_cache_params kp;
    kv_cache_params_default(&kp);
    kp.block_size = PARITY_BLOCK_SIZE;
    kp.n_blocks = total_blocks;
    kp.dtype = p->kv_dtype;
    fprintf(stderr, "parity: KV cache %s\n", dtype_name(kp.dtype));
    if (kv_cache_create(r.m, &kp, &r.kv, &err)) {
        fprintf(stderr, "vllmc: %s\n", err.msg);
        goto out;
    }
    int batch = (int)p->batch;
    r.logits = mem_alloc((size_t)batch * (size_t)n_vocab * sizeof(float));
    if (!r.logits || batch_builder_init(&r.bb, r.be, r.m->n_tokens_max, batch, max_blocks))
        goto out;
    if (backend_location(r.be) == TENSOR_DEVICE &&
        backend_buffer_alloc(r.be, (size_t)batch * (size_t)n_vocab * sizeof(float), &r.logits_dev))
        goto out;
    if (parity_generate(&r, batch))
        goto out;
    rc = parity_report(&r);
out:
    if (r.logits_dev)
        backend_buffer_free(r.be, r.logits_dev);
    if (r.bb.host)
        batch_builder_deinit(&r.bb);
    mem_free(r.logits);
    for (int i = 0; r.seqs && i < r.n_seqs; i++) {
        mem_free(r.seqs[i].ids);
        mem_free(r.seqs[i].table);
    }
    mem_free(r.seqs);
    kv_cache_free(r.kv);
    model_free(r.m);
    backend_free(r.be);
    return rc;
}

int parity_main(int argc, char **argv)
{
    struct parity p = {.device = "cpu", .pass = "exact_dequant", .batch = 1, .kv_dtype = DTYPE_F32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            parity_usage(stdout);
            return 0;
        } else if (cli_opt(argc, argv, &i, "--model", "-m", &v)) {
            p.model_path = v;
        } else if (cli_opt(argc, argv, &i, "--reference", "-r", &v)) {
            p.ref_path = v;
        } else if (cli_opt(argc, argv, &i, "--device", NULL, &v)) {
            p.device = v;
        } else if (cli_opt(argc, argv, &i, "--pass", NULL, &v)) {
            p.pass = v;
        } else if (cli_opt(argc, argv, &i, "--batch", "-b", &v)) {
            ok = v && cli_parse_int(a, v, 1, 64, &p.batch);
        } else if (cli_opt(argc, argv, &i, "--dtype", NULL, &v)) {
            ok = v && cli_parse_dtype(a, v, &p.weights_f16);
        } else if (cli_opt(argc, argv, &i, "--kv-cache-dtype", NULL, &v)) {
            if (v && strcmp(v, "auto") &&
                (!dtype_from_name(v, &p.kv_dtype) ||
                 (p.kv_dtype != DTYPE_F32 && p.kv_dtype != DTYPE_F16 && p.kv_dtype != DTYPE_BF16))) {
                fprintf(stderr, "vllmc parity: --kv-cache-dtype %s (use auto, f32, f16, bf16)\n", v);
                ok = false;
            }
        } else if (cli_opt(argc, argv, &i, "--threads", "-t", &v)) {
            ok = v && cli_parse_int(a, v, 0, 1024, &p.threads);
        } else {
            fprintf(stderr, "vllmc parity: unknown option '%s'\n", a);
            parity_usage(stderr);
            return 2;
        }
        if (!ok || !v)
            return 2;
    }
    if (!p.ref_path) {
        fprintf(stderr, "vllmc parity: --reference is required\n");
        parity_usage(stderr);
        return 2;
    }
    if (!p.model_path)
        p.model_path = cli_default_model();
    int rc = parity_read(&p);
    if (!rc)
        rc = parity_run_all(&p);
    for (int i = 0; i < p.n_cases; i++) {
        mem_free(p.cases[i].prompt);
        mem_free(p.cases[i].ref);
        mem_free(p.cases[i].topk);
        mem_free(p.cases[i].topv);
    }
    mem_free(p.cases);
    return rc;
}
