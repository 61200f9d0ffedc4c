// Tokenizer throughput: encodes a text file as one string (no special tokens added) with a
// tokenizer (GGUF, HF folder or tokenizer.json) on one thread, and prints one line:
//   bench=tokenize tokenizer=PATH bytes=N tokens=N load_ms=N mb_per_s=N ids_fnv=HEX
// ids_fnv (FNV-1a over the ids) lets bench/tokenizer/hf_tokenizers.py check that Hugging
// Face `tokenizers` produced the same ids. Usage: bench_tokenizer TOKENIZER TEXT [REPS]
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/alloc.h"
#include "engine/tokenizer_load.h"
#include "tokenizer/tokenizer.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenizer TOKENIZER TEXT [REPS]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    if (reps < 1)
        reps = 1;
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = mem_alloc((size_t)n);
    size_t got = text ? fread(text, 1, (size_t)n, f) : 0;
    fclose(f);
    if (got != (size_t)n)
        return 1;
    double t0 = now_s();
    struct tokenizer *tok;
    struct err err = {0};
    if (tokenizer_load_path(argv[1], &tok, &err)) {
        fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
        return 1;
    }
    double load_s = now_s() - t0;
    double best = 1e30;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    for (int r = 0; r < reps; r++) {
        mem_free(ids);
        t0 = now_s();
        if (tokenizer_encode(tok, text, got, 0, &ids, &n_ids)) {
            fprintf(stderr, "bench_tokenizer: encode failed\n");
            return 1;
        }
        double dt = now_s() - t0;
        if (dt < best)
            best = dt;
    }
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n_ids; i++) {
        h ^= (uint32_t)ids[i];
        h *= 1099511628211ull;
    }
    printf("bench=tokenize tokenizer=%s bytes=%zu tokens=%zu load_ms=%.0f mb_per_s=%.2f "
           "ids_fnv=%016llx\n",
           argv[1], got, n_ids, load_s * 1e3, (double)got / best / 1e6, (unsigned long long)h);
    mem_free(ids);
    mem_free(text);
    tokenizer_free(tok);
    return 0;
}
