// Defaults of the public params structs (vLLM's defaults) and enum texts.
#include <string.h>

#include "vllmc.h"

VLLMC_API void vllmc_engine_params_default(struct vllmc_engine_params *p)
{
    memset(p, 0, sizeof *p);
    p->device = "cpu";
    p->block_size = 16;
    p->max_num_seqs = 256;
    p->gpu_memory_utilization = 0.9;
    p->enable_prefix_caching = true;
    p->async_scheduling = true;
    p->dtype = "auto";
    p->kv_cache_dtype = "auto";
}

VLLMC_API void vllmc_sampling_params_default(struct vllmc_sampling_params *p)
{
    memset(p, 0, sizeof *p);
    p->n = 1;
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->top_k = 0;
    p->repetition_penalty = 1.0f;
    p->max_tokens = 16;
    p->logprobs = -1;
    p->prompt_logprobs = -1;
    p->skip_special_tokens = true;
}

VLLMC_API void vllmc_request_params_default(struct vllmc_request_params *p)
{
    memset(p, 0, sizeof *p);
    p->add_special_tokens = true;
    vllmc_sampling_params_default(&p->sampling);
}

VLLMC_API const char *vllmc_finish_reason_str(enum vllmc_finish_reason r)
{
    switch (r) {
    case VLLMC_FINISH_STOP:
        return "stop";
    case VLLMC_FINISH_LENGTH:
        return "length";
    case VLLMC_FINISH_ABORT:
        return "abort";
    case VLLMC_FINISH_NONE:
        break;
    }
    return NULL;
}
