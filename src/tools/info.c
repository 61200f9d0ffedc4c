// `vllmc info MODEL`: what a model file holds and what running it takes.
#include <string.h>

#include "backend/backend.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tools/cli.h"
#include "tools/commands.h"

static void info_usage(FILE *f)
{
    fprintf(f, "usage: vllmc info [MODEL]\n"
               "  MODEL  a GGUF file or a Hugging Face folder (default: the bundled model)\n");
}

static void print_bytes(const char *label, double bytes)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    printf("%-16s%.2f %s\n", label, bytes, unit[u]);
}

static void info_print(const struct model *m)
{
    const struct model_hparams *hp = &m->hp;
    const struct model_file_info *in = &m->info;
    printf("%-16s%s\n", "file:", m->path);
    if (in->format == MODEL_FORMAT_GGUF)
        printf("%-16sGGUF v%u\n", "format:", in->gguf_version);
    else
        printf("%-16ssafetensors (%d file%s) + config.json\n", "format:", in->n_files,
               in->n_files == 1 ? "" : "s");
    printf("%-16s%s\n", "name:", in->name);
    printf("%-16s%s%s%s\n", "architecture:", model_arch_name(hp->arch),
           hp->qkv_bias ? " (q/k/v bias)" : "", hp->qk_norm ? " (q/k norm)" : "");
    printf("%-16s%d\n", "layers:", hp->n_layers);
    printf("%-16s%d\n", "hidden:", hp->dim);
    printf("%-16s%d query, %d key/value%s, head_dim %d\n", "heads:", hp->n_heads, hp->n_kv_heads,
           hp->n_kv_heads < hp->n_heads ? " (grouped-query)" : "", hp->head_dim);
    printf("%-16s%d\n", "ffn:", hp->ff_dim);
    printf("%-16s%d\n", "vocab:", hp->n_vocab);
    printf("%-16s%d\n", "context:", hp->n_ctx_train);
    printf("%-16s%g\n", "rms_eps:", (double)hp->rms_eps);
    const char *scaling = hp->rope_scaling == ROPE_SCALING_LINEAR   ? "linear"
                          : hp->rope_scaling == ROPE_SCALING_LLAMA3 ? "llama3"
                                                                    : "none";
    printf("%-16stheta %g, %d of %d dims, %s, scaling %s", "rope:", (double)hp->rope_theta,
           hp->rope_dim, hp->head_dim, hp->rope_neox ? "rotate-half" : "adjacent pairs", scaling);
    if (hp->rope_scaling != ROPE_SCALING_NONE)
        printf(" x%g", (double)hp->rope_factor);
    printf("\n%-16s%s\n",
           "embeddings:", hp->tied_embeddings ? "tied (lm_head = token_embd)" : "untied");
    printf("%-16s%d (", "tensors:", in->n_tensors);
    bool first = true;
    for (int t = 0; t < DTYPE_COUNT; t++) {
        if (!in->n_tensors_by_dtype[t])
            continue;
        printf("%s%s %d", first ? "" : ", ", dtype_name((enum dtype)t), in->n_tensors_by_dtype[t]);
        first = false;
    }
    printf(")\n%-16s%llu (%.2f M)\n", "parameters:", (unsigned long long)in->n_params,
           (double)in->n_params / 1e6);
    printf("%-16sbos %d, eos %d\n", "special ids:", hp->bos_id, hp->eos_id);
    printf("%-16s%s\n", "tokenizer:", in->tokenizer_kind);
    printf("%-16s%s\n", "chat template:", in->has_chat_template ? "yes" : "no");
    print_bytes("weights:", (double)in->weight_bytes);
    size_t kv_token = kv_cache_bytes_per_block(hp, 1, DTYPE_F32);
    print_bytes("kv per token:", (double)kv_token);
    int ctx = hp->n_ctx_train > 0 ? hp->n_ctx_train : 2048;
    printf("%-16s%.2f MiB for %d tokens of f32 KV + %.2f MiB scratch for %d tokens\n",
           "memory:", ((double)in->weight_bytes + (double)kv_token * ctx) / (1 << 20), ctx,
           (double)m->scratch_bytes / (1 << 20), m->n_tokens_max);
}

int info_main(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            info_usage(stdout);
            return 0;
        }
        const char *v;
        if (cli_opt(argc, argv, &i, "--model", "-m", &v)) {
            if (!v)
                return 2;
            path = v;
        } else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "vllmc info: unexpected argument '%s'\n", argv[i]);
            info_usage(stderr);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path)
        path = cli_default_model();
    struct backend *be;
    if (cli_backend_create("cpu", 1, false, &be))
        return 1;
    struct model *m;
    struct err err = {0};
    if (model_load(path, be, NULL, &m, &err)) {
        fprintf(stderr, "vllmc: %s\n", err.msg);
        backend_free(be);
        return 1;
    }
    info_print(m);
    model_free(m);
    backend_free(be);
    return 0;
}
