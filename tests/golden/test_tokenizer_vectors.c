// Tokenizer vectors: llama.cpp's .inp/.out pairs (ids Hugging Face tokenizers returned with
// add_special_tokens=False) against our tokenizers built from tokenizer.json files and from
// the vocab-only GGUF files, 100% of cases. Each case also checks that streaming
// detokenization equals one-shot decoding, and decode(encode(x)) == x for lossless ones.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/alloc.h"
#include "engine/tokenizer_load.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_vectors.h"

#define TD VLLMC_SHARED_DIR "/testdata/"

// Streams ids through a detokenizer and compares with tokenizer_decode().
static int stream_matches(const struct tokenizer *tok, const int32_t *ids, size_t n, unsigned flags)
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
            fprintf(stderr, "  stream \"%.*s\" != decode \"%.*s\"\n", (int)n_acc, acc, (int)n_one,
                    one);
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

static void test_json_qwen3(void)
{
    json_case("qwen3", "qwen2", true);
}
static void test_json_llama3(void)
{
    json_case("llama3", "llama-bpe", true);
}
static void test_json_gpt2(void)
{
    json_case("gpt2", "gpt-2", true);
}
static void test_json_mistral(void)
{
    json_case("mistral-7b-v0.1", "mistral", true);
}
static void test_json_llama2_spm(void)
{
    json_case("llama2", "llama-spm", true);
}
static void test_json_llama2_phi3(void)
{
    json_case("llama2", "phi-3", true);
}

static struct tokenizer *load_gguf(const char *path)
{
    struct tokenizer *tok = NULL;
    struct err err = {0};
    if (tokenizer_load_path(path, &tok, &err))
        fprintf(stderr, "%s: %s\n", path, err.msg);
    CHECK(tok != NULL);
    return tok;
}

// Every vocab GGUF with vectors, against its own .inp/.out.
static void test_gguf_vectors(void)
{
    static const struct {
        const char *name;
        bool lossless;
    } sets[] = {
        {"bert-bge", false}, {"deepseek-coder", true}, {"deepseek-llm", true}, {"falcon", true},
        {"gpt-2", true},     {"llama-spm", true},      {"mpt", true},          {"phi-3", true},
        {"refact", true},    {"starcoder", true},
    };
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
        char path[480], inp[512], out[512], label[128];
        snprintf(path, sizeof(path), TD "tokenizer/ggml-vocab-%s.gguf", sets[i].name);
        snprintf(inp, sizeof(inp), "%s.inp", path);
        snprintf(out, sizeof(out), "%s.out", path);
        snprintf(label, sizeof(label), "gguf %s", sets[i].name);
        struct tokenizer *tok = load_gguf(path);
        if (!tok)
            continue;
        run_vectors(label, tok, inp, out, sets[i].lossless);
        tokenizer_free(tok);
    }
}

// Vocabularies without upstream vectors still load and round-trip the common inputs.
static void test_gguf_no_vectors(void)
{
    static const char *const names[] = {"baichuan", "gpt-neox"};
    struct tv_set s;
    if (tv_load(&s, TD "tokenizer/ggml-vocab-gpt-2.gguf.inp",
                TD "tokenizer/ggml-vocab-gpt-2.gguf.out")) {
        check_failures++;
        tv_free(&s);
        return;
    }
    for (size_t k = 0; k < 2; k++) {
        char path[512];
        snprintf(path, sizeof(path), TD "tokenizer/ggml-vocab-%s.gguf", names[k]);
        struct tokenizer *tok = load_gguf(path);
        if (!tok)
            continue;
        size_t ok = 0;
        for (size_t i = 0; i < s.n_cases; i++) {
            int32_t *ids;
            size_t n;
            char *text;
            size_t n_text;
            if (tokenizer_encode(tok, s.cases[i].text, s.cases[i].len, 0, &ids, &n))
                continue;
            if (!tokenizer_decode(tok, ids, n, 0, &text, &n_text)) {
                if (n_text == s.cases[i].len && !memcmp(text, s.cases[i].text, n_text))
                    ok++;
                else
                    fprintf(stderr, "%s case %zu: \"%s\"\n", names[k], i, text);
                mem_free(text);
            }
            ok += (size_t)stream_matches(tok, ids, n, 0) - 1;
            mem_free(ids);
        }
        printf("gguf %-29s round trip %zu/%zu (no upstream vectors)\n", names[k], ok, s.n_cases);
        CHECK_EQ_INT(ok, s.n_cases);
        tokenizer_free(tok);
    }
    tv_free(&s);
}

static bool ids_equal(const int32_t *ids, size_t n, const json_t *arr)
{
    if (json_array_size(arr) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(arr, i)) != ids[i])
            return false;
    return true;
}

static size_t ids_from_json(const json_t *arr, int32_t *ids, size_t cap)
{
    size_t n = json_array_size(arr) < cap ? json_array_size(arr) : cap;
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return n;
}

// The bundled model: every golden prompt's prompt_token_ids (BOS included), and the golden
// generations decode to their generated_text, one-shot and streamed.
static void test_stories260k(void)
{
    struct tokenizer *tok = load_gguf(VLLMC_SOURCE_DIR "/models/stories260K.gguf");
    json_error_t jerr;
    json_t *root = json_load_file(TD "golden/stories260K.greedy.json", 0, &jerr);
    CHECK(root != NULL);
    if (!tok || !root)
        goto done;
    const json_t *list = json_object_get(root, "cases");
    size_t n_ok = 0, n_dec = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *c = json_array_get(list, i);
        const char *prompt = json_string_value(json_object_get(c, "prompt"));
        const char *gen = json_string_value(json_object_get(c, "generated_text"));
        int32_t *ids;
        size_t n;
        CHECK(prompt && gen);
        if (!prompt || !gen ||
            tokenizer_encode(tok, prompt, strlen(prompt), TOKENIZER_ENCODE_ADD_SPECIAL, &ids, &n))
            continue;
        if (ids_equal(ids, n, json_object_get(c, "prompt_token_ids")))
            n_ok++;
        else
            fprintf(stderr, "stories260K prompt \"%s\" tokenizes differently\n", prompt);
        mem_free(ids);
        // Generated text continues the prompt: decode(prompt ++ generated) is
        // decode(prompt) ++ generated_text, and a detokenizer primed with the prompt streams
        // exactly generated_text.
        int32_t all[1024];
        size_t n_prompt = ids_from_json(json_object_get(c, "prompt_token_ids"), all, 1024);
        size_t n_all = n_prompt + ids_from_json(json_object_get(c, "generated_token_ids"),
                                                all + n_prompt, 1024 - n_prompt);
        char *whole, *head;
        size_t n_whole, n_head;
        if (tokenizer_decode(tok, all, n_all, 0, &whole, &n_whole))
            continue;
        if (tokenizer_decode(tok, all, n_prompt, 0, &head, &n_head)) {
            mem_free(whole);
            continue;
        }
        struct detok *d;
        char *acc = calloc(1, n_whole + 1);
        size_t n_acc = 0;
        if (!detok_create(tok, 0, &d)) {
            const char *piece;
            size_t n_piece;
            detok_prime(d, all, n_prompt);
            for (size_t k = n_prompt; k <= n_all; k++) {
                if (k < n_all)
                    detok_push(d, all[k], &piece, &n_piece);
                else
                    detok_flush(d, &piece, &n_piece);
                if (n_acc + n_piece <= n_whole)
                    memcpy(acc + n_acc, piece, n_piece);
                n_acc += n_piece;
            }
            detok_free(d);
        }
        bool ok = n_head + strlen(gen) == n_whole && !memcmp(whole, head, n_head) &&
                  !strcmp(whole + n_head, gen) && n_acc == strlen(gen) && !memcmp(acc, gen, n_acc);
        if (ok)
            n_dec++;
        else
            fprintf(stderr, "stories260K decode:\n  got  \"%s\"\n  want \"%s%s\"\n", whole, head,
                    gen);
        free(acc);
        mem_free(whole);
        mem_free(head);
    }
    printf("stories260K prompts %zu/%zu, generations decoded %zu/%zu\n", n_ok,
           json_array_size(list), n_dec, json_array_size(list));
    CHECK(json_array_size(list) >= 4);
    CHECK_EQ_INT(n_ok, json_array_size(list));
    CHECK_EQ_INT(n_dec, json_array_size(list));
done:
    json_decref(root);
    tokenizer_free(tok);
}

// Rendered chat prompts: special tokens in the text become their ids (parse_special, no
// BOS/EOS added), and the ids decode back to the same text.
static void test_chat_prompts(void)
{
    json_error_t jerr;
    json_t *root = json_load_file(TD "hf-tokenizers/chat-prompt-token-ids.json", 0, &jerr);
    CHECK(root != NULL);
    struct tokenizer *qwen3 = load_json("qwen3"), *llama3 = load_json("llama3");
    size_t n_ok = 0;
    for (size_t i = 0; root && qwen3 && llama3 && i < json_array_size(root); i++) {
        const json_t *c = json_array_get(root, i);
        const char *which = json_string_value(json_object_get(c, "tokenizer"));
        const json_t *text = json_object_get(c, "text");
        const struct tokenizer *tok = which && strstr(which, "qwen3") ? qwen3 : llama3;
        int32_t *ids;
        size_t n;
        if (tokenizer_encode(tok, json_string_value(text), json_string_length(text),
                             TOKENIZER_ENCODE_PARSE_SPECIAL, &ids, &n))
            continue;
        char *back;
        size_t n_back;
        bool ok = ids_equal(ids, n, json_object_get(c, "token_ids")) &&
                  !tokenizer_decode(tok, ids, n, 0, &back, &n_back);
        if (ok) {
            ok = n_back == json_string_length(text) &&
                 !memcmp(back, json_string_value(text), n_back);
            mem_free(back);
        }
        if (ok)
            n_ok++;
        else
            fprintf(stderr, "chat prompt %zu (%s) differs\n", i, which);
        mem_free(ids);
    }
    printf("chat prompts %zu/%zu\n", n_ok, json_array_size(root));
    CHECK(json_array_size(root) >= 10);
    CHECK_EQ_INT(n_ok, json_array_size(root));
    tokenizer_free(qwen3);
    tokenizer_free(llama3);
    json_decref(root);
}

static const struct check_case cases[] = {
    {"gguf_vectors", test_gguf_vectors},
    {"gguf_no_vectors", test_gguf_no_vectors},
    {"stories260k", test_stories260k},
    {"chat_prompts", test_chat_prompts},
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
