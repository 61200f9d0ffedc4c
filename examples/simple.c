// The smallest vllm.c program: load a model, submit two prompts at once and
// stream their completions. Uses nothing but the public header.
//
//   simple [MODEL_PATH] [PROMPT]
#include <stdio.h>
#include <string.h>

#include "vllmc.h"

int main(int argc, char **argv)
{
    const char *model = argc > 1 ? argv[1] : "models/stories260K.gguf";
    const char *prompts[2] = {argc > 2 ? argv[2] : "Once upon a time", "The little dog"};

    struct vllmc_engine_params ep;
    vllmc_engine_params_default(&ep);
    ep.model_path = model;
    ep.max_model_len = 256;
    ep.kv_cache_memory_bytes = 16 << 20;
    struct vllmc_engine *engine;
    enum vllmc_status st = vllmc_engine_create(&ep, &engine);
    if (st != VLLMC_OK) {
        fprintf(stderr, "simple: %s: %s\n", vllmc_status_str(st), vllmc_last_error());
        return 1;
    }

    // Both requests run in the same model steps (continuous batching).
    struct vllmc_request *reqs[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        struct vllmc_request_params rp;
        vllmc_request_params_default(&rp);
        rp.prompt = prompts[i];
        rp.sampling.temperature = 0; // greedy
        rp.sampling.max_tokens = 48;
        st = vllmc_engine_add_request(engine, &rp, &reqs[i]);
        if (st != VLLMC_OK) {
            fprintf(stderr, "simple: %s: %s\n", vllmc_status_str(st), vllmc_last_error());
            vllmc_request_free(reqs[0]);
            vllmc_engine_free(engine);
            return 1;
        }
    }

    // Read each stream to its end; the second one's outputs wait in its queue.
    for (int i = 0; i < 2; i++) {
        printf("[%d] %s", i, prompts[i]);
        struct vllmc_output *out = NULL;
        while (vllmc_request_next_output(reqs[i], -1, &out) == VLLMC_OK && out) {
            fwrite(out->text, 1, out->text_len, stdout);
            bool final = out->final;
            if (final)
                printf("\n[%d] finish=%s prompt_tokens=%d completion_tokens=%d\n", i,
                       vllmc_finish_reason_str(out->finish_reason), out->usage.prompt_tokens,
                       out->usage.completion_tokens);
            vllmc_output_free(out);
            if (final)
                break;
        }
        vllmc_request_free(reqs[i]);
    }

    struct vllmc_engine_stats stats;
    vllmc_engine_stats(engine, &stats);
    printf("steps=%lld generated=%lld kv_blocks=%d\n", (long long)stats.n_steps,
           (long long)stats.generation_tokens_total, stats.n_blocks_total);
    vllmc_engine_free(engine);
    return 0;
}
