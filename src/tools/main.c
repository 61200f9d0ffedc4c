// The vllmc command: dispatches to the sub-commands listed in one table.
#include <stdio.h>
#include <string.h>

#include "tools/commands.h"
#include "vllmc.h"

struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
};

static int version_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("vllmc %s\n", vllmc_version());
    return 0;
}

static const struct command commands[] = {
    {"serve", serve_main, "OpenAI-compatible HTTP server (vLLM's flags)"},
    {"generate", generate_main, "complete a prompt on the terminal"},
    {"info", info_main, "architecture, shapes, tensor types and memory of a model"},
    {"parity", parity_main, "greedy tokens against a reference (EXACT / TOP_K_MATCH / FAIL)"},
    {"op-parity", op_parity_main, "check every op provider against cpu-ref (NMSE)"},
    {"bench-ops", bench_ops_main, "time op providers on model-sized shapes"},
    {"bench", bench_main, "benchmarks: pp/tg speed, offline throughput, serving (bench serve)"},
    {"gen-model", gen_model_main, "write a random-weight Llama model of a given shape"},
    {"tokenize", tokenize_main, "text to token ids (JSON array) with a model's tokenizer"},
    {"detokenize", detokenize_main, "token ids to text with a model's tokenizer"},
    {"quantize", quantize_main, "write a GGUF with quantized weights (Q4_K_M, Q8_0, ...)"},
    {"chat-template", chat_template_main, "render a chat template over messages (as the server does)"},
    {"version", version_main, "print the version"},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: vllmc <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--version"))
        return version_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "vllmc: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
