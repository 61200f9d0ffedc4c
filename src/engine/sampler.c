// Sampler: logits processors, penalties, greedy and random sampling with
// min_p / top_k / top_p, and raw logprobs.
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"

enum vllmc_status sampler_create(int n_vocab, int32_t eos_id, const int32_t *extra_eos_ids,
                                 int n_extra_eos, struct sampler **out)
{
    *out = NULL;
    if (n_vocab < 1 || n_extra_eos < 0)
        return VLLMC_ERR_INVALID_ARG;
    struct sampler *sm = mem_calloc(1, sizeof *sm);
    if (!sm)
        return VLLMC_ERR_NOMEM;
    size_t n = (size_t)n_vocab;
    sm->n_vocab = n_vocab;
    sm->eos_id = eos_id;
    sm->logits = mem_alloc(n * sizeof *sm->logits);
    sm->cand = mem_alloc(n * sizeof *sm->cand);
    sm->tmp = mem_alloc(n * sizeof *sm->tmp);
    sm->block_sum = mem_alloc((n / SAMPLER_BLOCK + 1) * sizeof *sm->block_sum);
    sm->counts = mem_calloc(n, sizeof *sm->counts);
    sm->seen = mem_calloc(n, sizeof *sm->seen);
    sm->extra_eos_ids = mem_alloc((size_t)n_extra_eos * sizeof *sm->extra_eos_ids);
    if (!sm->logits || !sm->cand || !sm->tmp || !sm->block_sum || !sm->counts || !sm->seen ||
        !sm->extra_eos_ids) {
        sampler_free(sm);
        return VLLMC_ERR_NOMEM;
    }
    if (n_extra_eos)
        memcpy(sm->extra_eos_ids, extra_eos_ids, (size_t)n_extra_eos * sizeof *extra_eos_ids);
    sm->n_extra_eos = n_extra_eos;
    *out = sm;
    return VLLMC_OK;
}

void sampler_free(struct sampler *sm)
{
    if (!sm)
        return;
    mem_free(sm->extra_eos_ids);
    mem_free(sm->seen);
    mem_free(sm->counts);
    mem_free(sm->block_sum);
    mem_free(sm->tmp);
    mem_free(sm->cand);
    mem_free(sm->logits);
    mem_free(sm);
}

bool sampler_is_stop_token(const struct sampler *sm, const struct vllmc_sampling_params *sp,
                           int32_t token)
{
    if (!sp->ignore_eos) {
        if (token == sm->eos_id)
            return true;
        for (int i = 0; i < sm->n_extra_eos; i++)
            if (token == sm->extra_eos_ids[i])
                return true;
    }
    for (int i = 0; i < sp->n_stop_token_ids; i++)
        if (token == sp->stop_token_ids[i])
            return true;
    return false;
}

// ---- logits processors and penalties ----

static void mask_token(float *logits, int n_vocab, int32_t id)
{
    if (id >= 0 && id < n_vocab)
        logits[id] = -INFINITY;
}

// True when sampler_apply_processors() would change some logit of this row.
static bool sampler_has_processors(const struct sample_input *in)
{
    const struct vllmc_sampling_params *sp = in->sp;
    return sp->n_logit_bias > 0 || in->n_output < sp->min_tokens ||
           sp->repetition_penalty != 1.0f || sp->frequency_penalty != 0.0f ||
           sp->presence_penalty != 0.0f;
}

void sampler_apply_processors(struct sampler *sm, const struct sample_input *in, float *logits)
{
    const struct vllmc_sampling_params *sp = in->sp;
    int n_vocab = sm->n_vocab;
    for (int i = 0; i < sp->n_logit_bias; i++) {
        int32_t id = sp->logit_bias[i].token_id;
        if (id >= 0 && id < n_vocab)
            logits[id] += sp->logit_bias[i].bias;
    }
    // min_tokens masks every id that could stop the sequence, the EOS ids
    // included even under ignore_eos (vLLM's _all_stop_token_ids).
    if (in->n_output < sp->min_tokens) {
        mask_token(logits, n_vocab, sm->eos_id);
        for (int i = 0; i < sm->n_extra_eos; i++)
            mask_token(logits, n_vocab, sm->extra_eos_ids[i]);
        for (int i = 0; i < sp->n_stop_token_ids; i++)
            mask_token(logits, n_vocab, sp->stop_token_ids[i]);
    }
    bool rep = sp->repetition_penalty != 1.0f;
    bool freq = sp->frequency_penalty != 0.0f;
    bool pres = sp->presence_penalty != 0.0f;
    if (!rep && !freq && !pres)
        return;
    // Repetition counts prompt and output tokens; frequency and presence count
    // only the output (OpenAI's definition, as vLLM applies them).
    for (int i = 0; i < in->n_output; i++) {
        int32_t id = in->output_ids[i];
        if (id >= 0 && id < n_vocab) {
            sm->counts[id]++;
            sm->seen[id] = 1;
        }
    }
    if (rep)
        for (int i = 0; i < in->n_prompt; i++) {
            int32_t id = in->prompt_ids[i];
            if (id >= 0 && id < n_vocab)
                sm->seen[id] = 1;
        }
    // Visit each distinct token once (through the seen flags), then clear them.
    for (int pass = 0; pass < 2; pass++) {
        const int32_t *ids = pass ? in->prompt_ids : in->output_ids;
        int n = pass ? in->n_prompt : in->n_output;
        for (int i = 0; i < n; i++) {
            int32_t id = ids[i];
            if (id < 0 || id >= n_vocab || !sm->seen[id])
                continue;
            sm->seen[id] = 0;
            float l = logits[id];
            if (rep)
                l = l > 0 ? l / sp->repetition_penalty : l * sp->repetition_penalty;
            int c = sm->counts[id];
            l -= sp->frequency_penalty * (float)c;
            l -= sp->presence_penalty * (float)(c > 0);
            logits[id] = l;
            sm->counts[id] = 0;
        }
    }
}

// ---- random sampling: temperature, min_p, top_k, top_p ----

// Descending logit, then ascending id: a total order, so results never depend
// on the sort algorithm.
static int cand_cmp_desc(const void *a, const void *b)
{
    const struct sampler_cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static void swap_f(float *a, float *b)
{
    float t = *a;
    *a = *b;
    *b = t;
}

// The k-th largest (1-based) of v[0..n), reordering v (quickselect).
static float kth_largest(float *v, int n, int k)
{
    int lo = 0, hi = n - 1, target = k - 1;
    while (lo < hi) {
        float pivot = v[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (v[i] > pivot)
                i++;
            while (v[j] < pivot)
                j--;
            if (i <= j) {
                swap_f(&v[i], &v[j]);
                i++;
                j--;
            }
        }
        if (target <= j)
            hi = j;
        else if (target >= i)
            lo = i;
        else
            return v[target];
    }
    return v[target];
}

// top_p over the m candidates in sm->cand (largest logit vmax): drops the
// least likely tokens while their total probability stays at most 1 - p
// (vLLM's ascending cumulative sum); the most likely token always stays.
// Leaves the kept candidates first in sm->cand, in descending order, and
// returns their count. Only the head of the distribution is sorted: the
// tokens below a logit cut are dropped whole when their mass is within
// 1 - p, the cut widening until it is (a full sort at the end).
static int top_p_filter(struct sampler *sm, int m, float vmax, float top_p)
{
    float *v = sm->logits, *w = sm->tmp; // scratch: logits and weights
    for (int i = 0; i < m; i++)
        v[i] = sm->cand[i].logit;
    double total = sampler_row_weights(v, m, 1.0f, vmax, w, sm->block_sum);
    double limit = 1.0 - (double)top_p;
    double tail = 0; // mass of the tokens below the cut
    int k = m;       // tokens at or above it
    for (float span = 1.0f; span <= 256.0f; span *= 2.0f) {
        float cut = vmax - span;
        double below = 0;
        for (int i = 0; i < m; i++)
            below += sm->cand[i].logit < cut ? (double)w[i] : 0.0;
        if (below / total <= limit) {
            tail = below / total;
            k = 0;
            for (int i = 0; i < m; i++)
                if (!(sm->cand[i].logit < cut))
                    sm->cand[k++] = sm->cand[i];
            break;
        }
    }
    qsort(sm->cand, (size_t)k, sizeof *sm->cand, cand_cmp_desc);
    // The sorted head's weights: the same per-token values as above.
    for (int i = 0; i < k; i++)
        v[i] = sm->cand[i].logit;
    sampler_row_weights(v, k, 1.0f, vmax, w, sm->block_sum);
    int keep = k;
    for (int j = k - 1; j >= 1; j--) {
        tail += (double)w[j] / total;
        if (tail > limit)
            break;
        keep = j;
    }
    return keep;
}

// Fills sm->cand with the tokens a random row may draw (logits already divided
// by the temperature) and returns their count; when sorted, they are in
// descending order.
static int sampler_filter(struct sampler *sm, const struct vllmc_sampling_params *sp,
                          const float *logits)
{
    float inv_t = 1.0f / sp->temperature;
    int m = 0;
    float vmax = -INFINITY;
    for (int i = 0; i < sm->n_vocab; i++) {
        if (logits[i] == -INFINITY)
            continue;
        float v = logits[i] * inv_t;
        sm->cand[m++] = (struct sampler_cand){v, i};
        if (v > vmax)
            vmax = v;
    }
    if (m == 0)
        return 0;
    // min_p: drop tokens whose probability is below min_p times the largest.
    if (sp->min_p > 0.0f) {
        int k = 0;
        // exp(l - vmax) < min_p, compared on the logits: no exponential per token.
        double cut = log((double)sp->min_p);
        for (int i = 0; i < m; i++)
            if (!((double)sm->cand[i].logit - vmax < cut))
                sm->cand[k++] = sm->cand[i];
        m = k;
    }
    // top_k keeps every token whose logit reaches the k-th largest (ties stay).
    if (sp->top_k > 0 && sp->top_k < m) {
        for (int i = 0; i < m; i++)
            sm->tmp[i] = sm->cand[i].logit;
        float kth = kth_largest(sm->tmp, m, sp->top_k);
        int k = 0;
        for (int i = 0; i < m; i++)
            if (sm->cand[i].logit >= kth)
                sm->cand[k++] = sm->cand[i];
        m = k;
    }
    if (sp->top_p < 1.0f)
        m = top_p_filter(sm, m, vmax, sp->top_p);
    return m;
}

void sampler_distribution(struct sampler *sm, const struct vllmc_sampling_params *sp,
                          const float *logits, double *probs)
{
    for (int i = 0; i < sm->n_vocab; i++)
        probs[i] = 0;
    if (sp->temperature < SAMPLER_GREEDY_EPS) {
        int best = 0;
        for (int i = 1; i < sm->n_vocab; i++)
            if (logits[i] > logits[best])
                best = i;
        probs[best] = 1;
        return;
    }
    int m = sampler_filter(sm, sp, logits);
    double vmax = -INFINITY, total = 0;
    for (int i = 0; i < m; i++)
        if (sm->cand[i].logit > vmax)
            vmax = sm->cand[i].logit;
    for (int i = 0; i < m; i++)
        total += exp((double)sm->cand[i].logit - vmax);
    for (int i = 0; i < m; i++)
        probs[sm->cand[i].id] = exp((double)sm->cand[i].logit - vmax) / total;
}

// Draws index i < m with probability exp(v[i] * scale - vmax) / sum, for a
// uniform u in [0, 1); vmax is the largest v[i] * scale, -inf entries are
// never drawn. The inverse CDF first finds the block of SAMPLER_BLOCK tokens
// by the block sums, then walks its tokens; -1 when every weight is 0.
static int draw_index(struct sampler *sm, const float *v, int m, float scale, float vmax, double u)
{
    float *w = sm->tmp;
    double *bsum = sm->block_sum;
    int n_blocks = (m + SAMPLER_BLOCK - 1) / SAMPLER_BLOCK;
    double total = sampler_row_weights(v, m, scale, vmax, w, bsum);
    if (!(total > 0))
        return -1;
    double target = u * total, acc = 0;
    int last = -1; // the last index of nonzero weight seen
    for (int b = 0; b < n_blocks; b++) {
        int i0 = b * SAMPLER_BLOCK, i1 = i0 + SAMPLER_BLOCK < m ? i0 + SAMPLER_BLOCK : m;
        if (bsum[b] > 0 && (acc + bsum[b] > target || b == n_blocks - 1)) {
            double a = acc;
            for (int i = i0; i < i1; i++) {
                if (w[i] > 0)
                    last = i;
                a += (double)w[i];
                if (a > target && w[i] > 0)
                    return i;
            }
            // The walk's rounding left target past this block's end: its
            // last nonzero token it is, unless a later block has weight.
            if (acc + bsum[b] > target)
                return last;
        } else if (bsum[b] > 0) {
            for (int i = i1 - 1; i >= i0; i--)
                if (w[i] > 0) {
                    last = i;
                    break;
                }
        }
        acc += bsum[b];
    }
    return last;
}

int32_t sampler_sample(struct sampler *sm, const struct sample_input *in, const float *logits)
{
    const struct vllmc_sampling_params *sp = in->sp;
    const float *l = logits;
    // The row is copied only when a processor changes it.
    if (sampler_has_processors(in)) {
        memcpy(sm->logits, logits, (size_t)sm->n_vocab * sizeof *sm->logits);
        sampler_apply_processors(sm, in, sm->logits);
        l = sm->logits;
    }
    if (sp->temperature < SAMPLER_GREEDY_EPS)
        return sampler_row_argmax(l, sm->n_vocab);
    // One uniform draw per sampled token, inverse CDF over the candidates.
    double u = rng_uniform(in->rng);
    bool filtered =
        sp->min_p > 0.0f || (sp->top_k > 0 && sp->top_k < sm->n_vocab) || sp->top_p < 1.0f;
    if (!filtered) {
        // The whole vocabulary, scaled on the fly: no candidates to build.
        // Scaling by a positive number keeps the order, so the largest scaled
        // logit is the largest logit scaled.
        float inv_t = 1.0f / sp->temperature;
        float vmax = sampler_row_max(l, sm->n_vocab) * inv_t;
        int i = vmax == -INFINITY ? -1 : draw_index(sm, l, sm->n_vocab, inv_t, vmax, u);
        return i < 0 ? 0 : i; // every logit masked: nothing sensible to draw
    }
    int m = sampler_filter(sm, sp, l);
    if (m == 0)
        return 0;
    // The candidates' logits (already scaled), in candidate order; the row in
    // sm->logits, if it was there, is no longer needed.
    float *v = sm->logits;
    for (int i = 0; i < m; i++)
        v[i] = sm->cand[i].logit;
    int i = draw_index(sm, v, m, 1.0f, sampler_row_max(v, m), u);
    return i < 0 ? 0 : sm->cand[i].id;
}

// ---- logprobs ----

void sampler_logprobs(const float *logits, int n_vocab, int32_t token, int k,
                      struct vllmc_logprob *out, struct vllmc_top_logprob *top)
{
    float vmax = -INFINITY;
    for (int i = 0; i < n_vocab; i++)
        if (logits[i] > vmax)
            vmax = logits[i];
    double sum = 0;
    for (int i = 0; i < n_vocab; i++)
        sum += exp((double)logits[i] - vmax);
    double lse = vmax + log(sum);
    float lt = logits[token];
    int rank = 0;
    int n_top = 0;
    if (k > n_vocab)
        k = n_vocab;
    for (int i = 0; i < n_vocab; i++) {
        float v = logits[i];
        rank += v >= lt;
        if (k <= 0 || (n_top == k && !(v > top[k - 1].logprob)))
            continue;
        // Insert into the sorted top list (values kept as raw logits for now).
        int j = n_top < k ? n_top++ : k - 1;
        while (j > 0 && top[j - 1].logprob < v) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = (struct vllmc_top_logprob){.token_id = i, .logprob = v};
    }
    for (int i = 0; i < n_top; i++)
        top[i].logprob = (float)((double)top[i].logprob - lse);
    out->token_id = token;
    out->logprob = (float)((double)lt - lse);
    out->rank = rank;
    out->n_top = n_top;
    out->top = top;
}
