// Shared by the tokenizer tests: reading whole files and llama.cpp's .inp/.out vector pairs.
#ifndef VLLMC_TESTS_TOKENIZER_VECTORS_H
#define VLLMC_TESTS_TOKENIZER_VECTORS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Reads a whole file; NULL when it cannot. Caller frees.
static char *tv_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    size_t got = fread(buf, 1, (size_t)len, f);
    fclose(f);
    buf[got] = '\0';
    *n = got;
    return buf;
}

struct tv_case {
    const char *text; // into the .inp buffer
    size_t len;
    int32_t ids[512];
    size_t n_ids;
};

struct tv_set {
    char *inp, *out; // owned file buffers
    struct tv_case *cases;
    size_t n_cases;
};

static void tv_free(struct tv_set *s)
{
    free(s->inp);
    free(s->out);
    free(s->cases);
}

// Loads NAME.inp / NAME.out: cases separated by "\n__ggml_vocab_test__\n", one line of ids
// (space separated) per case.
static int tv_load(struct tv_set *s, const char *inp_path, const char *out_path)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t n_inp, n_out;
    memset(s, 0, sizeof(*s));
    s->inp = tv_read_file(inp_path, &n_inp);
    s->out = tv_read_file(out_path, &n_out);
    if (!s->inp || !s->out)
        return -1;
    s->cases = calloc(256, sizeof(*s->cases));
    char *p = s->inp, *end = s->inp + n_inp;
    while (p < end && s->n_cases < 256) {
        char *q = strstr(p, sep);
        if (!q)
            break;
        s->cases[s->n_cases].text = p;
        s->cases[s->n_cases].len = (size_t)(q - p);
        s->n_cases++;
        p = q + strlen(sep);
    }
    char *line = s->out;
    for (size_t i = 0; i < s->n_cases; i++) {
        char *nl = strchr(line, '\n');
        if (!nl)
            return -1;
        *nl = '\0';
        char *t = line;
        while (*t) {
            char *e;
            long v = strtol(t, &e, 10);
            if (e == t)
                break;
            if (s->cases[i].n_ids < 512)
                s->cases[i].ids[s->cases[i].n_ids++] = (int32_t)v;
            t = e;
        }
        line = nl + 1;
    }
    return 0;
}

#endif
