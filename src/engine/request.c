// Requests: token storage, block hashes and the owned copy of sampling params.
#include "engine/request.h"

#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "engine/prefix_cache.h"

enum vllmc_status sampling_params_copy(struct vllmc_sampling_params *dst,
                                       const struct vllmc_sampling_params *src)
{
    *dst = *src;
    dst->stop_token_ids = NULL;
    dst->stop = NULL;
    dst->logit_bias = NULL;
    dst->n_stop_token_ids = dst->n_stop = dst->n_logit_bias = 0;
    if (src->n_stop_token_ids > 0) {
        int32_t *ids = mem_alloc((size_t)src->n_stop_token_ids * sizeof *ids);
        if (!ids)
            goto fail;
        memcpy(ids, src->stop_token_ids, (size_t)src->n_stop_token_ids * sizeof *ids);
        dst->stop_token_ids = ids;
        dst->n_stop_token_ids = src->n_stop_token_ids;
    }
    if (src->n_logit_bias > 0) {
        struct vllmc_logit_bias *lb = mem_alloc((size_t)src->n_logit_bias * sizeof *lb);
        if (!lb)
            goto fail;
        memcpy(lb, src->logit_bias, (size_t)src->n_logit_bias * sizeof *lb);
        dst->logit_bias = lb;
        dst->n_logit_bias = src->n_logit_bias;
    }
    if (src->n_stop > 0) {
        char **stop = mem_calloc((size_t)src->n_stop, sizeof *stop);
        if (!stop)
            goto fail;
        dst->stop = (const char *const *)stop;
        dst->n_stop = src->n_stop;
        for (int i = 0; i < src->n_stop; i++) {
            stop[i] = mem_strdup(src->stop[i]);
            if (!stop[i])
                goto fail;
        }
    }
    return VLLMC_OK;
fail:
    sampling_params_free(dst);
    return VLLMC_ERR_NOMEM;
}

void sampling_params_free(struct vllmc_sampling_params *sp)
{
    mem_free((void *)sp->stop_token_ids);
    mem_free((void *)sp->logit_bias);
    if (sp->stop)
        for (int i = 0; i < sp->n_stop; i++)
            mem_free((void *)sp->stop[i]);
    mem_free((void *)sp->stop);
    sp->stop_token_ids = NULL;
    sp->logit_bias = NULL;
    sp->stop = NULL;
    sp->n_stop_token_ids = sp->n_logit_bias = sp->n_stop = 0;
}

enum vllmc_status request_create(const int32_t *prompt, int n_prompt,
                                 const struct vllmc_sampling_params *sp, const char *cache_salt,
                                 int max_model_len, int block_size, struct request **out)
{
    *out = NULL;
    if (n_prompt < 1 || n_prompt >= max_model_len || block_size < 1)
        return VLLMC_ERR_INVALID_ARG;
    struct request *req = mem_calloc(1, sizeof *req);
    if (!req)
        return VLLMC_ERR_NOMEM;
    req->n_tokens_max = max_model_len;
    req->block_size = block_size;
    req->n_blocks_max = (max_model_len + block_size - 1) / block_size;
    req->token_ids = mem_alloc((size_t)max_model_len * sizeof *req->token_ids);
    req->block_ids = mem_alloc((size_t)req->n_blocks_max * sizeof *req->block_ids);
    req->block_hashes = mem_alloc((size_t)req->n_blocks_max * sizeof *req->block_hashes);
    if (!req->token_ids || !req->block_ids || !req->block_hashes)
        goto fail;
    if (cache_salt && cache_salt[0]) {
        req->n_cache_salt = strlen(cache_salt);
        req->cache_salt = (uint8_t *)mem_strdup(cache_salt);
        if (!req->cache_salt)
            goto fail;
    }
    if (sampling_params_copy(&req->sp, sp))
        goto fail;
    memcpy(req->token_ids, prompt, (size_t)n_prompt * sizeof *prompt);
    req->n_prompt_tokens = req->n_tokens = n_prompt;
    int room = max_model_len - n_prompt;
    req->n_output_max = sp->max_tokens < 0 || sp->max_tokens > room ? room : sp->max_tokens;
    req->n_cached_tokens = -1;
    req->pending_token = -1;
    req->pending_row = -1;
    req->status = REQUEST_WAITING;
    req->skip_prefix_cache = sp->prompt_logprobs >= 0;
    request_update_hashes(req);
    *out = req;
    return VLLMC_OK;
fail:
    request_free(req);
    return VLLMC_ERR_NOMEM;
}

void request_free(struct request *req)
{
    if (!req)
        return;
    sampling_params_free(&req->sp);
    mem_free(req->cache_salt);
    mem_free(req->block_hashes);
    mem_free(req->block_ids);
    mem_free(req->token_ids);
    mem_free(req);
}

void request_update_hashes(struct request *req)
{
    int bs = req->block_size;
    while ((req->n_block_hashes + 1) * bs <= req->n_tokens) {
        int i = req->n_block_hashes;
        const struct block_hash *parent = i ? &req->block_hashes[i - 1] : NULL;
        const void *extra = i ? NULL : req->cache_salt;
        size_t n_extra = i ? 0 : req->n_cache_salt;
        block_hash_compute(parent, req->token_ids + (size_t)i * bs, bs, extra, n_extra,
                           &req->block_hashes[i]);
        req->n_block_hashes++;
    }
}

void request_append_token(struct request *req, int32_t token_id)
{
    VLLMC_ASSERT(req->n_tokens < req->n_tokens_max);
    req->token_ids[req->n_tokens++] = token_id;
    request_update_hashes(req);
}
