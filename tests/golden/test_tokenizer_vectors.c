// Tokenizer vectors: llama.cpp's .inp/.out pairs (ids Hugging Face tokenizers returned with
// add_special_tokens=False) against our tokenizers built from tokenizer.json files and from
// the vocab-only GGUF files, 100% of cases. Each case also checks that streaming
// detokenization equals one-shot decoding, and decode(encode(x)) == x for lossless ones.
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/alloc.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_vectors.h"

#define TD VLLMC_SHARED_DIR "/testdata/"

// Streams ids through a detokenizer and compares with tokenizer_decode().
static int stream_matches(const struct tokenizer *tok, const int32_t *ids, size_t n,
                          unsigned flags)
{
    struct detok *d;
    if (detok_create(tok, flags, &d))
        return 0;
    char *acc = malloc(1);
    size_t n_acc = 0;
    const char *piece;
    size_t n_piece;
    for (size_t i = 0; i <= n; i++) {
        if (i < n)
            detok_push(d, ids[i], &piece, &n_piece);
        else
            detok_flush(d, &piece, &n_piece);
        acc = realloc(acc, n_acc + n_piece + 1);
        memcpy(acc + n_acc, piece, n_piece);
        n_acc += n_piece;
    }
    detok_free(d);
    char *one;
    size_t n_one;
    int ok = 0;
    if (!tokenizer_decode(tok, ids, n, flags, &one, &n_one)) {
        ok = n_one == n_acc && !memcmp(one, acc, n_acc);
        if (!ok)
            fprintf(stderr, "  stream \"%.*s\" != decode \"%.*s\"\n", (int)n_acc, acc,
                    (int)n_one, one);
        mem_free(one);
    }
    free(acc);
    return ok;
}

// Runs every case of a vector set; lossless: decode(encode(x)) must give x back.
static void run_vectors(const char *label, const struct tokenizer *tok, const char *inp,
                        const char *out, bool lossless)
{
    struct tv_set s;
    if (tv_load(&s, inp, out)) {
        fprintf(stderr, "%s: cannot read %s / %s\n", label, inp, out);
        check_failures++;
        tv_free(&s);
        return;
    }
    size_t pass = 0, n_stream = 0, n_round = 0, n_round_ok = 0;
    for (size_t i = 0; i < s.n_cases; i++) {
        const struct tv_case *c = &s.cases[i];
        int32_t *ids;
        size_t n;
        if (tokenizer_encode(tok, c->text, c->len, 0, &ids, &n)) {
            fprintf(stderr, "%s case %zu: encode failed\n", label, i);
            continue;
        }
        bool same = n == c->n_ids && !memcmp(ids, c->ids, n * sizeof(*ids));
        if (same) {
            pass++;
        } else {
            fprintf(stderr, "%s case %zu \"%.*s\":\n  want", label, i, (int)c->len, c->text);
            for (size_t k = 0; k < c->n_ids; k++)
                fprintf(stderr, " %d", c->ids[k]);
            fprintf(stderr, "\n  got ");
            for (size_t k = 0; k < n; k++)
                fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n");
        }
        n_stream += (size_t)stream_matches(tok, ids, n, 0);
        n_stream += (size_t)stream_matches(tok, ids, n, TOKENIZER_DECODE_SKIP_SPECIAL);
        if (lossless) {
            char *text;
            size_t n_text;
            n_round++;
            if (!tokenizer_decode(tok, ids, n, 0, &text, &n_text)) {
                if (n_text == c->len && !memcmp(text, c->text, n_text))
                    n_round_ok++;
                else
                    fprintf(stderr, "%s case %zu: decode gives \"%s\"\n", label, i, text);
                mem_free(text);
            }
        }
        mem_free(ids);
    }
    printf("%-34s %zu/%zu cases, stream==decode %zu/%zu, round trip %zu/%zu\n", label, pass,
           s.n_cases, n_stream, 2 * s.n_cases, n_round_ok, n_round);
    CHECK(s.n_cases >= 40);
    CHECK_EQ_INT(pass, s.n_cases);
    CHECK_EQ_INT(n_stream, 2 * s.n_cases);
    CHECK_EQ_INT(n_round_ok, n_round);
    tv_free(&s);
}

static struct tokenizer *load_json(const char *dir)
{
    char path[512], cpath[512];
    snprintf(path, sizeof(path), TD "hf-tokenizers/%s/tokenizer.json", dir);
    snprintf(cpath, sizeof(cpath), TD "hf-tokenizers/%s/tokenizer_config.json", dir);
    size_t n, nc = 0;
    char *json = tv_read_file(path, &n);
    char *cfg = tv_read_file(cpath, &nc);
    struct tokenizer *tok = NULL;
    struct err err = {0};
    if (!json || tokenizer_create_from_json(json, n, cfg, nc, &tok, &err))
        fprintf(stderr, "%s: %s\n", path, err.msg);
    free(json);
    free(cfg);
    CHECK(tok != NULL);
    return tok;
}

static void json_case(const char *dir, const char *vec, bool lossless)
{
    struct tokenizer *tok = load_json(dir);
    if (!tok)
        return;
    char inp[512], out[512], label[128];
    if (!strcmp(vec, "mistral")) {
        snprintf(inp, sizeof(inp), TD "hf-tokenizers/%s/tokenizer-tests.inp", dir);
        snprintf(out, sizeof(out), TD "hf-tokenizers/%s/tokenizer-tests.out", dir);
    } else {
        snprintf(inp, sizeof(inp), TD "tokenizer/ggml-vocab-%s.gguf.inp", vec);
        snprintf(out, sizeof(out), TD "tokenizer/ggml-vocab-%s.gguf.out", vec);
    }
    snprintf(label, sizeof(label), "json %s vs %s", dir, vec);
    run_vectors(label, tok, inp, out, lossless);
    tokenizer_free(tok);
}

static void test_json_qwen3(void) { json_case("qwen3", "qwen2", true); }
static void test_json_llama3(void) { json_case("llama3", "llama-bpe", true); }
static void test_json_gpt2(void) { json_case("gpt2", "gpt-2", true); }
static void test_json_mistral(void) { json_case("mistral-7b-v0.1", "mistral", true); }
static void test_json_llama2_spm(void) { json_case("llama2", "llama-spm", true); }
static void test_json_llama2_phi3(void) { json_case("llama2", "phi-3", true); }

static const struct check_case cases[] = {
    {"json_qwen3", test_json_qwen3},
    {"json_llama3", test_json_llama3},
    {"json_gpt2", test_json_gpt2},
    {"json_mistral", test_json_mistral},
    {"json_llama2_spm", test_json_llama2_spm},
    {"json_llama2_phi3", test_json_llama2_phi3},
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    return check_run(cases, argc, argv);
}
