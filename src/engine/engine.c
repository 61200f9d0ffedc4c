// The public engine API: creation (model, tokenizer, KV cache sizing, the
// engine thread), request submission and streaming, abort, statistics and
// tokenizer helpers. The engine thread itself is in engine_step.c.
#include "engine/engine.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "engine/tokenizer_load.h"
#include "model/hf_config.h"

// Tokens of one step when the caller gives none: vLLM's default for its
// OpenAI server with chunked prefill on the CPU.
#define ENGINE_DEFAULT_BATCHED_TOKENS 2048

static _Thread_local char last_error[ERR_MSG_BYTES];

void engine_set_last_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
}

VLLMC_API const char *vllmc_last_error(void)
{
    return last_error;
}

static enum vllmc_status fail(enum vllmc_status rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static enum vllmc_status fail(enum vllmc_status rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return rc;
}

// ---- creation ----

static enum vllmc_status engine_inflight_init(struct vllmc_engine *eng, struct engine_inflight *st,
                                              int n)
{
    size_t un = (size_t)n;
    st->reqs = mem_calloc(un, sizeof *st->reqs);
    st->n_new = mem_calloc(un, sizeof *st->n_new);
    st->row_first = mem_calloc(un, sizeof *st->row_first);
    st->n_rows = mem_calloc(un, sizeof *st->n_rows);
    st->sample = mem_calloc(un, sizeof *st->sample);
    st->dev_row = mem_calloc(un, sizeof *st->dev_row);
    st->host_tok = mem_calloc(un, sizeof *st->host_tok);
    st->host_lp = mem_calloc(un, sizeof *st->host_lp);
    st->host_top = mem_calloc(un * ENGINE_MAX_LOGPROBS, sizeof *st->host_top);
    if (!st->reqs || !st->n_new || !st->row_first || !st->n_rows || !st->sample ||
        !st->dev_row || !st->host_tok || !st->host_lp || !st->host_top)
        return VLLMC_ERR_NOMEM;
    enum vllmc_status rc = backend_event_create(eng->be, &st->ev_start);
    if (!rc)
        rc = backend_event_create(eng->be, &st->ev_forwarded);
    if (!rc)
        rc = backend_event_create(eng->be, &st->ev_sampling);
    if (!rc)
        rc = backend_event_create(eng->be, &st->ev_end);
    return rc;
}

static void engine_inflight_deinit(struct vllmc_engine *eng, struct engine_inflight *st)
{
    mem_free(st->reqs);
    mem_free(st->n_new);
    mem_free(st->row_first);
    mem_free(st->n_rows);
    mem_free(st->sample);
    mem_free(st->dev_row);
    mem_free(st->host_tok);
    mem_free(st->host_lp);
    mem_free(st->host_top);
    if (eng->be) {
        backend_event_free(eng->be, st->ev_start);
        backend_event_free(eng->be, st->ev_forwarded);
        backend_event_free(eng->be, st->ev_sampling);
        backend_event_free(eng->be, st->ev_end);
    }
}

static void engine_destroy(struct vllmc_engine *eng)
{
    runner_free(eng->runner);
    device_sampler_free(eng->dsampler);
    for (int i = 0; i < 2; i++)
        engine_inflight_deinit(eng, &eng->steps[i]);
    sampler_free(eng->sampler);
    scheduler_free(eng->sched);
    kv_manager_free(eng->km);
    kv_cache_free(eng->kv);
    tokenizer_free(eng->tok);
    model_free(eng->model);
    backend_free(eng->be);
    mem_free(eng->live);
    mem_free(eng->lp_scratch);
    mem_free(eng->token_texts);
    mem_free(eng->token_text_off);
    mem_free(eng->model_name);
    mem_free(eng->model_path);
    pthread_cond_destroy(&eng->cv);
    pthread_mutex_destroy(&eng->mu);
    mem_free(eng);
}

static double mib(double bytes)
{
    return bytes / (1024.0 * 1024.0);
}

// The file or folder name of the model, for listings.
static char *model_display_name(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t start = n;
    while (start > 0 && path[start - 1] != '/')
        start--;
    return mem_strndup(path + start, n - start);
}

// NUL-terminated copies of every token's vocabulary string, for the C API.
static enum vllmc_status engine_copy_token_texts(struct vllmc_engine *eng)
{
    int32_t n = tokenizer_n_vocab(eng->tok);
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t len = 0;
        tokenizer_token_text(eng->tok, i, &len);
        total += len + 1;
    }
    eng->token_texts = mem_alloc(total);
    eng->token_text_off = mem_alloc((size_t)n * sizeof *eng->token_text_off);
    if (!eng->token_texts || !eng->token_text_off)
        return VLLMC_ERR_NOMEM;
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *t = tokenizer_token_text(eng->tok, i, &len);
        memcpy(eng->token_texts + off, t, len);
        eng->token_texts[off + len] = '\0';
        eng->token_text_off[i] = off;
        off += len + 1;
    }
    return VLLMC_OK;
}

static int eos_add(int32_t *ids, int n, int n_max, int32_t id, int32_t eos)
{
    if (id < 0 || id == eos || n >= n_max)
        return n;
    for (int i = 0; i < n; i++)
        if (ids[i] == id)
            return n;
    ids[n] = id;
    return n + 1;
}

// Ids that end generation besides the tokenizer's EOS: the end-of-turn
// specials the tokenizer knows (as llama.cpp's end-of-generation set) and a
// Hugging Face folder's generation_config.json eos_token_id list (as vLLM).
static int engine_extra_eos(const struct vllmc_engine *eng, int32_t *ids, int n_max)
{
    int32_t eos = eng->eos_id;
    int n = 0;
    int32_t n_vocab = tokenizer_n_vocab(eng->tok);
    for (int32_t id = 0; id < n_vocab; id++)
        if (tokenizer_is_eog(eng->tok, id))
            n = eos_add(ids, n, n_max, id, eos);
    if (!eng->model->gguf) {
        // The generation config sits beside the weights (a folder, or a
        // .safetensors file's folder).
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", eng->model_path);
        if (strstr(dir, ".safetensors")) {
            char *slash = strrchr(dir, '/');
            if (slash)
                *slash = '\0';
            else
                snprintf(dir, sizeof dir, ".");
        }
        struct hf_generation_config g;
        struct err e;
        if (hf_generation_config_load(dir, &g, &e) == VLLMC_OK)
            for (int i = 0; i < g.n_eos; i++)
                if (g.eos_token_ids[i] >= 0 && g.eos_token_ids[i] < n_vocab)
                    n = eos_add(ids, n, n_max, (int32_t)g.eos_token_ids[i], eos);
    }
    return n;
}

static enum vllmc_status engine_check_params(const struct vllmc_engine_params *p)
{
    if (!p->model_path || !p->model_path[0])
        return fail(VLLMC_ERR_INVALID_ARG, "engine: no model path");
    if (p->block_size < 1 || p->block_size > VLLMC_BLOCK_SIZE_MAX)
        return fail(VLLMC_ERR_INVALID_ARG, "engine: --block-size %d (use 1..%d, e.g. 16)",
                    p->block_size, VLLMC_BLOCK_SIZE_MAX);
    if (p->max_num_seqs < 1)
        return fail(VLLMC_ERR_INVALID_ARG, "engine: --max-num-seqs %d", p->max_num_seqs);
    if (p->max_model_len < 0 || p->max_num_batched_tokens < 0 || p->n_threads < 0)
        return fail(VLLMC_ERR_INVALID_ARG, "engine: negative size in the engine parameters");
    if (p->kv_cache_memory_bytes < 0)
        return fail(VLLMC_ERR_INVALID_ARG, "engine: --kv-cache-memory-bytes %lld",
                    (long long)p->kv_cache_memory_bytes);
    if (!p->kv_cache_memory_bytes &&
        !(p->gpu_memory_utilization > 0 && p->gpu_memory_utilization <= 1))
        return fail(VLLMC_ERR_INVALID_ARG, "engine: --gpu-memory-utilization %g (use (0, 1])",
                    p->gpu_memory_utilization);
    return VLLMC_OK;
}

static bool dtype_name_is(const char *s, const char *a, const char *b, const char *c)
{
    return !strcmp(s, a) || !strcmp(s, b) || (c && !strcmp(s, c));
}

static enum vllmc_status engine_kv_dtype(const struct vllmc_engine_params *p, enum dtype *out)
{
    const char *d =
        p->kv_cache_dtype && strcmp(p->kv_cache_dtype, "auto") ? p->kv_cache_dtype : NULL;
    // "auto" is f32, the precision the forward pass computes in, on the CPU
    // and on GPUs alike: vLLM's auto is the model's dtype and llama.cpp's
    // default f16, but on the H200 a bf16 cache took the Qwen3-8B shape's
    // transformers parity to 8-9 EXACT of 32 and the Llama-3 shape's to 20
    // (29 with f32), under the 90% bar (docs/engine.md).
    *out = DTYPE_F32;
    if (!d)
        return VLLMC_OK;
    if (dtype_name_is(d, "f32", "float32", "float"))
        return VLLMC_OK;
    if (dtype_name_is(d, "f16", "float16", "half")) {
        *out = DTYPE_F16;
        return VLLMC_OK;
    }
    if (dtype_name_is(d, "bf16", "bfloat16", NULL)) {
        *out = DTYPE_BF16;
        return VLLMC_OK;
    }
    return fail(VLLMC_ERR_INVALID_ARG, "engine: --kv-cache-dtype %s (use auto, f32, f16, bf16)", d);
}

// Sizes the KV cache (vLLM's determine_available_memory): an absolute budget,
// or the fraction of the device's memory left after the weights and the
// profiled activations. free_before is the backend's free memory before the
// model was loaded.
static enum vllmc_status engine_size_kv(struct vllmc_engine *eng, size_t free_before,
                                        size_t activation_bytes, enum dtype kv_dtype,
                                        int *n_blocks_out)
{
    const struct vllmc_engine_params *p = &eng->params;
    const struct model_hparams *hp = &eng->model->hp;
    size_t per_block = kv_cache_bytes_per_block(hp, eng->block_size, kv_dtype);
    double budget;
    const char *how;
    if (p->kv_cache_memory_bytes > 0) {
        budget = (double)p->kv_cache_memory_bytes;
        how = "--kv-cache-memory-bytes";
    } else if (backend_location(eng->be) == TENSOR_DEVICE) {
        size_t free_now = 0, total = 0;
        if (backend_memory_info(eng->be, &free_now, &total))
            return fail(VLLMC_ERR_BACKEND, "engine: %s", backend_err(eng->be)->msg);
        // Everything in use on the device now (weights, activations, other
        // processes) comes out of the fraction.
        budget = p->gpu_memory_utilization * (double)total - (double)(total - free_now);
        how = "--gpu-memory-utilization";
    } else {
        budget = p->gpu_memory_utilization * (double)free_before -
                 (double)eng->model->info.weight_bytes - (double)activation_bytes;
        how = "--gpu-memory-utilization (a fraction of free RAM on the CPU)";
    }
    double n = budget > 0 ? floor(budget / (double)per_block) : 0;
    int max_blocks_seq = (eng->max_model_len + eng->block_size - 1) / eng->block_size;
    // On the CPU the cache never grows past what max_num_seqs full-length
    // requests can use: zeroing the rest of the RAM would buy nothing.
    double cap = (double)p->max_num_seqs * max_blocks_seq;
    if (!p->kv_cache_memory_bytes && backend_location(eng->be) == TENSOR_HOST && n > cap)
        n = cap;
    if (n > (double)(1 << 29))
        n = (double)(1 << 29);
    long long n_tokens = (long long)n * eng->block_size;
    if (n_tokens < eng->max_model_len)
        return fail(VLLMC_ERR_CAPACITY,
                    "engine: the KV cache budget (%s: %.1f MiB, %zu bytes per block of %d "
                    "tokens) holds %lld tokens, fewer than one request of max_model_len %d; "
                    "raise --kv-cache-memory-bytes or --gpu-memory-utilization, or lower "
                    "--max-model-len",
                    how, mib(budget > 0 ? budget : 0), per_block, eng->block_size, n_tokens,
                    eng->max_model_len);
    *n_blocks_out = (int)n;
    log_info("engine: KV cache %d blocks x %d tokens = %lld tokens (%.1f MiB, %s, %s); largest "
             "context %d tokens, %.2fx concurrency at max_model_len %d",
             (int)n, eng->block_size, n_tokens, mib(n * (double)per_block), dtype_name(kv_dtype),
             how, (int)(n_tokens < eng->max_model_len ? n_tokens : eng->max_model_len),
             (double)n_tokens / eng->max_model_len, eng->max_model_len);
    return VLLMC_OK;
}

static enum vllmc_status engine_build(struct vllmc_engine *eng)
{
    struct vllmc_engine_params *p = &eng->params;
    struct err err = {0};
    enum vllmc_status rc;
    enum dtype kv_dtype;
    rc = engine_kv_dtype(p, &kv_dtype);
    if (rc)
        return rc;
    // --dtype: activations are f32 whatever it says. float16 rewrites bf16
    // matrices as f16 on a device backend (model_load_params.weights_f16);
    // auto, float32 and bfloat16 compute the weights as stored.
    const char *dt = p->dtype && strcmp(p->dtype, "auto") ? p->dtype : NULL;
    const bool weights_f16 = dt && dtype_name_is(dt, "f16", "float16", "half");
    if (dt && !weights_f16 && !dtype_name_is(dt, "f32", "float32", "float") &&
        !dtype_name_is(dt, "bf16", "bfloat16", NULL))
        return fail(VLLMC_ERR_INVALID_ARG,
                    "engine: --dtype %s (use auto, float32, float16, bfloat16)", dt);

    struct backend_options bo;
    backend_options_default(&bo);
    bo.n_threads = p->n_threads;
    bo.log_providers = p->log_providers;
    rc = backend_create(p->device ? p->device : "cpu", &bo, &eng->be, &err);
    if (rc)
        return fail(rc, "engine: backend %s: %s", p->device ? p->device : "cpu", err.msg);
    size_t free_before = 0, total = 0;
    if (backend_memory_info(eng->be, &free_before, &total))
        return fail(VLLMC_ERR_BACKEND, "engine: %s", backend_err(eng->be)->msg);

    int n_tokens_step =
        p->max_num_batched_tokens ? p->max_num_batched_tokens : ENGINE_DEFAULT_BATCHED_TOKENS;
    struct model_load_params lp;
    model_load_params_default(&lp);
    lp.n_tokens_max = n_tokens_step;
    lp.weights_f16 = weights_f16;
    rc = model_load(eng->model_path, eng->be, &lp, &eng->model, &err);
    if (rc)
        return fail(rc, "%s", err.msg);
    const struct model_hparams *hp = &eng->model->hp;
    eng->n_vocab = hp->n_vocab;
    eng->max_model_len = p->max_model_len ? p->max_model_len : hp->n_ctx_train;
    if (eng->max_model_len < 2)
        return fail(VLLMC_ERR_INVALID_ARG,
                    "engine: the model does not say its context length; set --max-model-len");
    if (hp->n_ctx_train > 0 && eng->max_model_len > hp->n_ctx_train)
        return fail(VLLMC_ERR_CAPACITY,
                    "engine: --max-model-len %d is longer than the model's context of %d tokens",
                    eng->max_model_len, hp->n_ctx_train);
    if (n_tokens_step < p->max_num_seqs)
        return fail(VLLMC_ERR_INVALID_ARG,
                    "engine: --max-num-batched-tokens %d is smaller than --max-num-seqs %d",
                    n_tokens_step, p->max_num_seqs);

    rc = eng->model->gguf ? tokenizer_load_gguf(eng->model->gguf, &eng->tok, &err)
                          : tokenizer_load_path(eng->model_path, &eng->tok, &err);
    if (rc == VLLMC_ERR_NOT_FOUND) {
        log_warn("engine: %s: no tokenizer; requests must give token ids", eng->model_path);
        eng->tok = NULL;
    } else if (rc) {
        return fail(rc, "engine: tokenizer: %s", err.msg);
    }
    eng->eos_id = eng->tok ? tokenizer_eos_id(eng->tok) : hp->eos_id;
    int32_t extra_eos[ENGINE_MAX_EXTRA_EOS];
    int n_extra_eos = eng->tok ? engine_extra_eos(eng, extra_eos, ENGINE_MAX_EXTRA_EOS) : 0;
    if (eng->tok && (rc = engine_copy_token_texts(eng)))
        return fail(rc, "engine: out of memory");
    rc = sampler_create(eng->n_vocab, eng->eos_id, extra_eos, n_extra_eos, &eng->sampler);
    if (rc)
        return fail(rc, "engine: out of memory");

    // Profile: one forward pass of the largest step over a one-block cache.
    struct kv_cache_params kp;
    kv_cache_params_default(&kp);
    kp.n_blocks = 1;
    kp.block_size = eng->block_size;
    kp.dtype = kv_dtype;
    struct kv_cache *probe_kv = NULL;
    rc = kv_cache_create(eng->model, &kp, &probe_kv, &err);
    if (rc)
        return fail(rc, "engine: %s", err.msg);
    int n_logits_max = p->max_num_seqs + ENGINE_PROMPT_LOGPROB_TOKENS;
    if (n_logits_max > n_tokens_step)
        n_logits_max = n_tokens_step;
    rc = runner_create(eng->model, probe_kv, n_tokens_step, p->max_num_seqs, n_logits_max,
                       eng->max_model_len, &eng->runner, &err);
    if (!rc)
        rc = runner_profile(eng->runner, n_tokens_step, eng->max_model_len);
    if (rc) {
        kv_cache_free(probe_kv);
        return fail(rc, "engine: profiling run: %s", eng->runner ? eng->runner->err.msg : err.msg);
    }
    size_t activation_bytes = eng->model->scratch_bytes +
                              (size_t)n_logits_max * (size_t)eng->n_vocab * sizeof(float) +
                              kv_cache_bytes_per_block(hp, eng->block_size, kv_dtype);
    kv_cache_free(probe_kv);
    eng->runner->kv = NULL;
    log_info("engine: model %s: weights %.1f MiB, activations %.1f MiB for %d tokens per step",
             eng->model_name, mib((double)eng->model->info.weight_bytes),
             mib((double)activation_bytes), n_tokens_step);

    int n_blocks = 0;
    rc = engine_size_kv(eng, free_before, activation_bytes, kv_dtype, &n_blocks);
    if (rc)
        return rc;
    kp.n_blocks = n_blocks;
    rc = kv_cache_create(eng->model, &kp, &eng->kv, &err);
    if (rc)
        return fail(rc,
                    "engine: %s (lower --kv-cache-memory-bytes or "
                    "--gpu-memory-utilization)",
                    err.msg);
    eng->runner->kv = eng->kv;
    kv_cache_prefault_start(eng->kv);
    rc = kv_manager_create(n_blocks, eng->block_size, eng->max_model_len, p->enable_prefix_caching,
                           &eng->km);
    if (rc)
        return fail(rc, "engine: out of memory");
    struct scheduler_config sc = {.max_num_seqs = p->max_num_seqs,
                                  .max_num_batched_tokens = n_tokens_step,
                                  .max_model_len = eng->max_model_len,
                                  .max_prompt_logprob_tokens = n_logits_max - p->max_num_seqs > 0
                                                                   ? n_logits_max - p->max_num_seqs
                                                                   : 1};
    rc = scheduler_create(&sc, eng->km, &eng->sched);
    if (rc)
        return fail(rc, "engine: out of memory");
    eng->lp_scratch = mem_alloc(ENGINE_MAX_LOGPROBS * sizeof *eng->lp_scratch);
    if (!eng->lp_scratch)
        return fail(VLLMC_ERR_NOMEM, "engine: out of memory");
    // Sampling where the logits are, when the backend can: only ids come back.
    rc = device_sampler_create(eng->be, eng->n_vocab, p->max_num_seqs, &eng->dsampler, &err);
    if (rc)
        return fail(rc, "engine: %s", err.msg);
    for (int i = 0; i < 2; i++)
        if (engine_inflight_init(eng, &eng->steps[i], p->max_num_seqs))
            return fail(VLLMC_ERR_NOMEM, "engine: out of memory: %s", backend_err(eng->be)->msg);
    eng->async_scheduling = p->async_scheduling;
    if (eng->dsampler)
        log_info("engine: sampling on %s", backend_name(eng->be));
    p->max_num_batched_tokens = n_tokens_step;
    p->max_model_len = eng->max_model_len;
    return VLLMC_OK;
}

VLLMC_API enum vllmc_status vllmc_engine_create(const struct vllmc_engine_params *params,
                                                struct vllmc_engine **out)
{
    *out = NULL;
    last_error[0] = '\0';
    enum vllmc_status rc = engine_check_params(params);
    if (rc)
        return rc;
    struct vllmc_engine *eng = mem_calloc(1, sizeof *eng);
    if (!eng)
        return fail(VLLMC_ERR_NOMEM, "engine: out of memory");
    pthread_mutex_init(&eng->mu, NULL);
    pthread_cond_init(&eng->cv, NULL);
    // The caller's strings are read during creation only, then forgotten.
    eng->params = *params;
    eng->block_size = params->block_size;
    eng->next_id = 1;
    eng->model_path = mem_strdup(params->model_path);
    eng->model_name = model_display_name(params->model_path);
    if (!eng->model_path || !eng->model_name) {
        engine_destroy(eng);
        return fail(VLLMC_ERR_NOMEM, "engine: out of memory");
    }
    rc = engine_build(eng);
    eng->params.model_path = eng->params.device = NULL;
    eng->params.dtype = eng->params.kv_cache_dtype = NULL;
    if (rc) {
        engine_destroy(eng);
        return rc;
    }
    if (pthread_create(&eng->thread, NULL, engine_thread_main, eng)) {
        engine_destroy(eng);
        return fail(VLLMC_ERR_BACKEND, "engine: cannot start the engine thread");
    }
    eng->thread_started = true;
    *out = eng;
    return VLLMC_OK;
}

VLLMC_API void vllmc_engine_free(struct vllmc_engine *eng)
{
    if (!eng)
        return;
    pthread_mutex_lock(&eng->mu);
    eng->stop = true;
    eng->closed = true;
    pthread_cond_signal(&eng->cv);
    pthread_mutex_unlock(&eng->mu);
    if (eng->thread_started)
        pthread_join(eng->thread, NULL);
    engine_destroy(eng);
}

// ---- requests ----

static enum vllmc_status check_sampling(const struct vllmc_engine *eng,
                                        const struct vllmc_sampling_params *s)
{
    if (s->n < 1 || s->n > 1024)
        return fail(VLLMC_ERR_INVALID_ARG, "n must be in [1, 1024], got %d", s->n);
    if (!(s->temperature >= 0) || !isfinite(s->temperature))
        return fail(VLLMC_ERR_INVALID_ARG, "temperature must be non-negative, got %g",
                    (double)s->temperature);
    if (!(s->top_p > 0 && s->top_p <= 1))
        return fail(VLLMC_ERR_INVALID_ARG, "top_p must be in (0, 1], got %g", (double)s->top_p);
    if (s->top_k < -1)
        return fail(VLLMC_ERR_INVALID_ARG, "top_k must be 0 or -1 (disable), or at least 1, got %d",
                    s->top_k);
    if (!(s->min_p >= 0 && s->min_p <= 1))
        return fail(VLLMC_ERR_INVALID_ARG, "min_p must be in [0, 1], got %g", (double)s->min_p);
    if (!(s->presence_penalty >= -2 && s->presence_penalty <= 2))
        return fail(VLLMC_ERR_INVALID_ARG, "presence_penalty must be in [-2, 2], got %g",
                    (double)s->presence_penalty);
    if (!(s->frequency_penalty >= -2 && s->frequency_penalty <= 2))
        return fail(VLLMC_ERR_INVALID_ARG, "frequency_penalty must be in [-2, 2], got %g",
                    (double)s->frequency_penalty);
    if (!(s->repetition_penalty > 0) || !isfinite(s->repetition_penalty))
        return fail(VLLMC_ERR_INVALID_ARG, "repetition_penalty must be greater than 0, got %g",
                    (double)s->repetition_penalty);
    if (s->max_tokens < -1 || s->max_tokens == 0)
        return fail(VLLMC_ERR_INVALID_ARG, "max_tokens must be at least 1, got %d", s->max_tokens);
    if (s->min_tokens < 0 || (s->max_tokens > 0 && s->min_tokens > s->max_tokens))
        return fail(VLLMC_ERR_INVALID_ARG, "min_tokens must be in [0, max_tokens], got %d",
                    s->min_tokens);
    if (s->logprobs > ENGINE_MAX_LOGPROBS || s->prompt_logprobs > ENGINE_MAX_LOGPROBS)
        return fail(VLLMC_ERR_INVALID_ARG, "at most %d logprobs may be requested",
                    ENGINE_MAX_LOGPROBS);
    if (s->n_stop < 0 || s->n_stop_token_ids < 0 || s->n_logit_bias < 0 ||
        (s->n_stop && !s->stop) || (s->n_stop_token_ids && !s->stop_token_ids) ||
        (s->n_logit_bias && !s->logit_bias))
        return fail(VLLMC_ERR_INVALID_ARG, "bad stop, stop_token_ids or logit_bias list");
    for (int i = 0; i < s->n_stop; i++)
        if (!s->stop[i] || !s->stop[i][0])
            return fail(VLLMC_ERR_INVALID_ARG, "stop strings must not be empty");
    for (int i = 0; i < s->n_stop_token_ids; i++)
        if (s->stop_token_ids[i] < 0 || s->stop_token_ids[i] >= eng->n_vocab)
            return fail(VLLMC_ERR_INVALID_ARG, "stop_token_ids: %d is not a token id",
                        s->stop_token_ids[i]);
    for (int i = 0; i < s->n_logit_bias; i++)
        if (s->logit_bias[i].token_id < 0 || s->logit_bias[i].token_id >= eng->n_vocab ||
            !isfinite(s->logit_bias[i].bias))
            return fail(VLLMC_ERR_INVALID_ARG, "logit_bias: token id %d out of vocab (%d)",
                        s->logit_bias[i].token_id, eng->n_vocab);
    return VLLMC_OK;
}

void engine_request_free_seqs(struct vllmc_request *h)
{
    if (!h->seqs)
        return;
    for (int i = 0; i < h->n_samples; i++) {
        struct engine_seq *s = &h->seqs[i];
        output_text_deinit(&s->text);
        detok_free(s->detok);
        request_free(s->req);
    }
    mem_free(h->seqs);
    h->seqs = NULL;
}

static void request_destroy(struct vllmc_request *h)
{
    for (struct output_node *n = h->head; n;) {
        struct output_node *next = n->next;
        mem_free(n->out);
        mem_free(n);
        n = next;
    }
    engine_request_free_seqs(h);
    mem_free(h->plp);
    mem_free(h->plp_top);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    mem_free(h);
}

void engine_request_unref(struct vllmc_request *h)
{
    if (atomic_fetch_sub(&h->n_refs, 1) == 1)
        request_destroy(h);
}

// Builds the engine-side samples of a new request.
static enum vllmc_status request_build(struct vllmc_engine *eng, struct vllmc_request *h,
                                       const struct vllmc_request_params *p, const int32_t *ids,
                                       int n_ids)
{
    const struct vllmc_sampling_params *sp = &p->sampling;
    h->seqs = mem_calloc((size_t)sp->n, sizeof *h->seqs);
    if (!h->seqs)
        return VLLMC_ERR_NOMEM;
    h->n_samples = sp->n;
    for (int i = 0; i < sp->n; i++) {
        struct engine_seq *s = &h->seqs[i];
        enum vllmc_status rc = request_create(ids, n_ids, sp, p->cache_salt, eng->max_model_len,
                                              eng->block_size, &s->req);
        if (rc)
            return rc;
        struct request *req = s->req;
        req->id = h->id;
        req->priority = p->priority;
        req->sample_index = i;
        req->engine_data = h;
        // vLLM gives sample i of a seeded request seed + i; unseeded requests
        // draw from the engine seed, the request id and the sample index.
        uint64_t seed = sp->has_seed ? sp->seed + (uint64_t)i
                                     : eng->params.seed ^ (0x9e3779b97f4a7c15ull * h->id) ^
                                           (0xbf58476d1ce4e5b9ull * (uint64_t)(i + 1));
        rng_seed(&req->rng, seed);
        output_text_init(&s->text, &req->sp);
        if (eng->tok) {
            unsigned flags = sp->skip_special_tokens ? TOKENIZER_DECODE_SKIP_SPECIAL : 0;
            rc = detok_create(eng->tok, flags, &s->detok);
            if (!rc)
                rc = detok_prime(s->detok, ids, (size_t)n_ids);
            if (rc)
                return rc;
        }
    }
    h->n_unfinished = sp->n;
    if (sp->prompt_logprobs >= 0) {
        int k = sp->prompt_logprobs;
        h->plp = mem_calloc((size_t)n_ids, sizeof *h->plp);
        h->plp_top = mem_calloc((size_t)n_ids * (size_t)(k ? k : 1), sizeof *h->plp_top);
        if (!h->plp || !h->plp_top)
            return VLLMC_ERR_NOMEM;
        // The first prompt token has no logprob (vLLM's None).
        h->plp[0] = (struct vllmc_logprob){.token_id = ids[0], .logprob = NAN, .rank = 0};
        h->n_plp_done = 1;
    }
    return VLLMC_OK;
}

VLLMC_API enum vllmc_status vllmc_engine_add_request(struct vllmc_engine *eng,
                                                     const struct vllmc_request_params *p,
                                                     struct vllmc_request **out)
{
    *out = NULL;
    last_error[0] = '\0';
    enum vllmc_status rc = check_sampling(eng, &p->sampling);
    if (rc)
        return rc;
    int32_t *owned_ids = NULL;
    const int32_t *ids = p->prompt_token_ids;
    int n_ids = p->n_prompt_token_ids;
    if (p->prompt) {
        if (!eng->tok)
            return fail(VLLMC_ERR_INVALID_ARG, "the model has no tokenizer: give token ids");
        unsigned flags = TOKENIZER_ENCODE_PARSE_SPECIAL |
                         (p->add_special_tokens ? TOKENIZER_ENCODE_ADD_SPECIAL : 0);
        size_t n = 0;
        rc = tokenizer_encode(eng->tok, p->prompt, strlen(p->prompt), flags, &owned_ids, &n);
        if (rc)
            return fail(rc, "cannot tokenize the prompt");
        ids = owned_ids;
        n_ids = n > (size_t)INT32_MAX ? INT32_MAX : (int)n;
    } else if (n_ids < 0 || (n_ids > 0 && !ids)) {
        return fail(VLLMC_ERR_INVALID_ARG, "bad prompt token id list");
    }
    struct vllmc_request *h = NULL;
    if (n_ids < 1) {
        rc = fail(VLLMC_ERR_INVALID_ARG, "the prompt is empty");
        goto out;
    }
    for (int i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= eng->n_vocab) {
            rc = fail(VLLMC_ERR_INVALID_ARG, "prompt token id %d out of vocab (%d)", ids[i],
                      eng->n_vocab);
            goto out;
        }
    if (n_ids >= eng->max_model_len) {
        rc = fail(VLLMC_ERR_CAPACITY,
                  "the prompt (%d tokens) leaves no room to generate within max_model_len %d",
                  n_ids, eng->max_model_len);
        goto out;
    }
    // A request that could never fit in the whole cache is refused now rather
    // than left waiting forever.
    int64_t n_max =
        p->sampling.max_tokens < 0 ? eng->max_model_len : (int64_t)n_ids + p->sampling.max_tokens;
    if (n_max > eng->max_model_len)
        n_max = eng->max_model_len;
    int64_t blocks = (n_max + eng->block_size - 1) / eng->block_size;
    if (blocks > eng->km->pool->n_blocks) {
        rc = fail(VLLMC_ERR_CAPACITY,
                  "the request needs %lld tokens of KV cache, more than the whole cache (%d)",
                  (long long)n_max, eng->km->pool->n_blocks * eng->block_size);
        goto out;
    }
    h = mem_calloc(1, sizeof *h);
    if (!h) {
        rc = fail(VLLMC_ERR_NOMEM, "out of memory");
        goto out;
    }
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    atomic_init(&h->n_refs, 2);
    atomic_init(&h->abort_requested, false);
    h->n_prompt = n_ids;
    h->logprobs = p->sampling.logprobs;
    h->prompt_logprobs = p->sampling.prompt_logprobs;
    h->on_output = p->on_output;
    h->user_data = p->user_data;
    h->n_cached_tokens = 0;
    h->arrival_us = time_now_us();
    pthread_mutex_lock(&eng->mu);
    h->id = eng->next_id++;
    pthread_mutex_unlock(&eng->mu);
    rc = request_build(eng, h, p, ids, n_ids);
    if (rc) {
        rc = fail(rc, "out of memory");
        goto out;
    }
    pthread_mutex_lock(&eng->mu);
    if (eng->closed) {
        pthread_mutex_unlock(&eng->mu);
        rc = fail(VLLMC_ERR_CLOSED, "the engine is shutting down");
        goto out;
    }
    h->attached = true;
    h->engine = eng;
    if (eng->inbox_tail)
        eng->inbox_tail->next_inbox = h;
    else
        eng->inbox_head = h;
    eng->inbox_tail = h;
    pthread_cond_signal(&eng->cv);
    pthread_mutex_unlock(&eng->mu);
    *out = h;
    h = NULL;
out:
    if (h)
        request_destroy(h);
    mem_free(owned_ids);
    return rc;
}

VLLMC_API uint64_t vllmc_request_id(const struct vllmc_request *h)
{
    return h->id;
}

VLLMC_API void vllmc_request_abort(struct vllmc_request *h)
{
    atomic_store(&h->abort_requested, true);
    pthread_mutex_lock(&h->mu);
    if (h->attached) {
        struct vllmc_engine *eng = h->engine;
        pthread_mutex_lock(&eng->mu);
        eng->abort_pending = true;
        pthread_cond_signal(&eng->cv);
        pthread_mutex_unlock(&eng->mu);
    }
    pthread_mutex_unlock(&h->mu);
}

VLLMC_API void vllmc_request_free(struct vllmc_request *h)
{
    if (!h)
        return;
    vllmc_request_abort(h);
    engine_request_unref(h);
}

VLLMC_API enum vllmc_status vllmc_request_next_output(struct vllmc_request *h, int timeout_ms,
                                                      struct vllmc_output **out)
{
    *out = NULL;
    struct timespec deadline;
    if (timeout_ms > 0) {
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&h->mu);
    enum vllmc_status rc = VLLMC_OK;
    bool timed_out = false;
    for (;;) {
        if (h->head) {
            struct output_node *n = h->head;
            h->head = n->next;
            if (!h->head)
                h->tail = NULL;
            *out = n->out;
            mem_free(n);
            if ((*out)->final)
                h->final_taken = true;
            break;
        }
        // The final output was taken (or could not be made): the stream is over.
        if (h->final_taken || h->final_queued) {
            rc = VLLMC_ERR_CLOSED;
            break;
        }
        if (timeout_ms == 0 || timed_out)
            break;
        if (timeout_ms < 0)
            pthread_cond_wait(&h->cv, &h->mu);
        else
            timed_out = pthread_cond_timedwait(&h->cv, &h->mu, &deadline) == ETIMEDOUT;
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

VLLMC_API void vllmc_output_free(struct vllmc_output *out)
{
    mem_free(out);
}

// ---- statistics and tokenizer helpers ----

VLLMC_API void vllmc_engine_stats(struct vllmc_engine *eng, struct vllmc_engine_stats *out)
{
    pthread_mutex_lock(&eng->mu);
    *out = eng->stats;
    pthread_mutex_unlock(&eng->mu);
}

VLLMC_API enum vllmc_status vllmc_tokenize(struct vllmc_engine *eng, const char *text,
                                           size_t text_len, bool add_special_tokens,
                                           int32_t **out_ids, int *out_n)
{
    *out_ids = NULL;
    *out_n = 0;
    if (!eng->tok)
        return fail(VLLMC_ERR_UNSUPPORTED, "the model has no tokenizer");
    unsigned flags =
        TOKENIZER_ENCODE_PARSE_SPECIAL | (add_special_tokens ? TOKENIZER_ENCODE_ADD_SPECIAL : 0);
    size_t n = 0;
    enum vllmc_status rc = tokenizer_encode(eng->tok, text, text_len, flags, out_ids, &n);
    if (rc)
        return fail(rc, "cannot tokenize the text");
    *out_n = (int)n;
    return VLLMC_OK;
}

VLLMC_API void vllmc_tokens_free(int32_t *ids)
{
    mem_free(ids);
}

VLLMC_API enum vllmc_status vllmc_detokenize(struct vllmc_engine *eng, const int32_t *ids, int n,
                                             bool skip_special_tokens, char **out_text)
{
    *out_text = NULL;
    if (!eng->tok)
        return fail(VLLMC_ERR_UNSUPPORTED, "the model has no tokenizer");
    if (n < 0)
        return fail(VLLMC_ERR_INVALID_ARG, "negative token count");
    size_t len = 0;
    enum vllmc_status rc =
        tokenizer_decode(eng->tok, ids, (size_t)n,
                         skip_special_tokens ? TOKENIZER_DECODE_SKIP_SPECIAL : 0, out_text, &len);
    if (rc)
        return fail(rc, "cannot decode the token ids");
    return VLLMC_OK;
}

VLLMC_API void vllmc_text_free(char *text)
{
    mem_free(text);
}

VLLMC_API const char *vllmc_engine_chat_template(const struct vllmc_engine *eng)
{
    return eng->tok ? tokenizer_chat_template(eng->tok, NULL) : NULL;
}

VLLMC_API int32_t vllmc_engine_bos_id(const struct vllmc_engine *eng)
{
    return eng->tok ? tokenizer_bos_id(eng->tok) : eng->model->hp.bos_id;
}

VLLMC_API int32_t vllmc_engine_eos_id(const struct vllmc_engine *eng)
{
    return eng->eos_id;
}

VLLMC_API const char *vllmc_engine_token_text(const struct vllmc_engine *eng, int32_t id)
{
    if (!eng->tok || id < 0 || id >= tokenizer_n_vocab(eng->tok))
        return NULL;
    return eng->token_texts + eng->token_text_off[id];
}

VLLMC_API int vllmc_engine_vocab_size(const struct vllmc_engine *eng)
{
    return eng->n_vocab;
}

VLLMC_API int vllmc_engine_max_model_len(const struct vllmc_engine *eng)
{
    return eng->max_model_len;
}

VLLMC_API const char *vllmc_engine_model_name(const struct vllmc_engine *eng)
{
    return eng->model_name;
}
