// `vllmc tokenize` and `vllmc detokenize`: text <-> ids with a model's tokenizer (a GGUF
// file, a Hugging Face folder or a tokenizer.json). Ids print as one JSON array on one line;
// decoded text prints exactly, without an added newline.
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "engine/tokenizer_load.h"
#include "tokenizer/tokenizer.h"
#include "tools/cli.h"
#include "tools/commands.h"

static void tokenize_usage(FILE *f)
{
    fprintf(f, "usage: vllmc tokenize [-m PATH] (--text TEXT | --file FILE | TEXT) "
               "[--add-special] [--pieces]\n"
               "  -m, --model PATH  GGUF file, model folder or tokenizer.json (default: the "
               "bundled model)\n"
               "  --add-special     add BOS/EOS as the tokenizer's configuration asks\n"
               "  --pieces          print [id, piece] pairs instead of ids\n"
               "Special-token strings in the text (<|im_start|>, <s>, ...) become their ids.\n");
}

static void detokenize_usage(FILE *f)
{
    fprintf(f, "usage: vllmc detokenize [-m PATH] --ids 1,2,3 [--skip-special]\n");
}

static struct tokenizer *load(const char *path)
{
    struct tokenizer *tok = NULL;
    struct err err = {0};
    if (tokenizer_load_path(path, &tok, &err))
        fprintf(stderr, "vllmc: %s\n", err.msg);
    return tok;
}

// Reads a whole file into a new buffer (mem_free).
static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "vllmc: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = mem_alloc(cap);
    while (buf) {
        if (len == cap) {
            char *b = mem_realloc(buf, cap * 2);
            if (!b) {
                mem_free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (!got)
            break;
    }
    fclose(f);
    *n = len;
    return buf;
}

int tokenize_main(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *file = NULL, *v;
    bool add_special = false, pieces = false;
    for (int i = 1; i < argc; i++) {
        if (cli_opt(argc, argv, &i, "--model", "-m", &v)) {
            if (!v)
                return 2;
            model = v;
        } else if (cli_opt(argc, argv, &i, "--text", NULL, &v)) {
            if (!v)
                return 2;
            text = v;
        } else if (cli_opt(argc, argv, &i, "--file", NULL, &v)) {
            if (!v)
                return 2;
            file = v;
        } else if (!strcmp(argv[i], "--add-special")) {
            add_special = true;
        } else if (!strcmp(argv[i], "--pieces")) {
            pieces = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            tokenize_usage(stdout);
            return 0;
        } else if (argv[i][0] != '-' && !text) {
            text = argv[i];
        } else {
            fprintf(stderr, "vllmc tokenize: unknown option '%s'\n", argv[i]);
            tokenize_usage(stderr);
            return 2;
        }
    }
    if (!!text == !!file) {
        tokenize_usage(stderr);
        return 2;
    }
    size_t len = text ? strlen(text) : 0;
    char *buf = NULL;
    if (file && !(buf = read_all(file, &len)))
        return 1;
    struct tokenizer *tok = load(model ? model : cli_default_model());
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 1;
    if (!tok)
        goto done;
    unsigned flags =
        TOKENIZER_ENCODE_PARSE_SPECIAL | (add_special ? TOKENIZER_ENCODE_ADD_SPECIAL : 0);
    enum vllmc_status st = tokenizer_encode(tok, buf ? buf : text, len, flags, &ids, &n);
    if (st) {
        fprintf(stderr, "vllmc: tokenize: %s\n", vllmc_status_str(st));
        goto done;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        json_t *item = json_integer(ids[i]);
        if (pieces) {
            size_t n_text;
            const char *t = tokenizer_token_text(tok, ids[i], &n_text);
            item = json_pack("[o, s%]", item, t, n_text);
        }
        json_array_append_new(arr, item);
    }
    char *out = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    if (out) {
        printf("%s\n", out);
        free(out); // jansson's allocation
        rc = 0;
    }
done:
    mem_free(ids);
    mem_free(buf);
    tokenizer_free(tok);
    return rc;
}

// Parses "1,2,3" or "[1, 2, 3]" into ids (mem_free).
static bool parse_id_list(const char *s, int32_t **ids, size_t *n)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    int32_t *out = mem_alloc(cap * sizeof(*out));
    size_t k = 0;
    const char *p = s;
    while (out && *p) {
        while (*p == ' ' || *p == '[' || *p == ']' || *p == ',' || *p == '\n')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || k == cap) {
            fprintf(stderr, "vllmc: --ids expects ids like 1,403,407, not '%s'\n", s);
            mem_free(out);
            return false;
        }
        out[k++] = (int32_t)v;
        p = end;
    }
    *ids = out;
    *n = k;
    return out != NULL;
}

int detokenize_main(int argc, char **argv)
{
    const char *model = NULL, *list = NULL, *v;
    bool skip = false;
    for (int i = 1; i < argc; i++) {
        if (cli_opt(argc, argv, &i, "--model", "-m", &v)) {
            if (!v)
                return 2;
            model = v;
        } else if (cli_opt(argc, argv, &i, "--ids", NULL, &v)) {
            if (!v)
                return 2;
            list = v;
        } else if (!strcmp(argv[i], "--skip-special")) {
            skip = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            detokenize_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "vllmc detokenize: unknown option '%s'\n", argv[i]);
            detokenize_usage(stderr);
            return 2;
        }
    }
    if (!list) {
        detokenize_usage(stderr);
        return 2;
    }
    int32_t *ids;
    size_t n;
    if (!parse_id_list(list, &ids, &n))
        return 2;
    struct tokenizer *tok = load(model ? model : cli_default_model());
    int rc = 1;
    if (tok) {
        char *text;
        size_t n_text;
        enum vllmc_status st =
            tokenizer_decode(tok, ids, n, skip ? TOKENIZER_DECODE_SKIP_SPECIAL : 0, &text, &n_text);
        if (st == VLLMC_ERR_INVALID_ARG) {
            fprintf(stderr, "vllmc: detokenize: an id is outside the vocabulary (0..%d)\n",
                    tokenizer_n_vocab(tok) - 1);
        } else if (st) {
            fprintf(stderr, "vllmc: detokenize: %s\n", vllmc_status_str(st));
        } else {
            fwrite(text, 1, n_text, stdout);
            mem_free(text);
            rc = 0;
        }
    }
    mem_free(ids);
    tokenizer_free(tok);
    return rc;
}
