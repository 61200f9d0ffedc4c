// The tokenizer of a loaded model: GGUF tokenizer.ggml.* metadata turned into
// a struct tokenizer_vocab, or a Hugging Face folder's tokenizer.json.
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "model/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "tools/cli.h"

// Reads a whole small file; *out owned (mem_free). False when missing.
static bool read_file(const char *path, char **out, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            char *nb = mem_realloc(buf, cap);
            if (!nb)
                break;
            buf = nb;
        }
        size_t k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (k == 0)
            break;
    }
    bool ok = !ferror(f) && buf;
    fclose(f);
    if (!ok) {
        mem_free(buf);
        return false;
    }
    *out = buf;
    *n = len;
    return true;
}

static int32_t gguf_id(const struct gguf_file *g, const char *key)
{
    int64_t v;
    // 0xFFFFFFFF (written as u32 -1) and other out-of-range values mean "none".
    return gguf_get_i64(g, key, &v) && v >= 0 && v < INT32_MAX ? (int32_t)v : -1;
}

static int gguf_flag(const struct gguf_file *g, const char *key)
{
    bool b;
    return gguf_get_bool(g, key, &b) ? (int)b : -1;
}

static struct tokenizer_str gguf_tstr(const struct gguf_file *g, const char *key)
{
    struct gguf_str s;
    if (!gguf_get_str(g, key, &s))
        return (struct tokenizer_str){NULL, 0};
    return (struct tokenizer_str){s.ptr, (size_t)s.len};
}

static enum vllmc_status tokenizer_from_gguf(const struct model *m, struct tokenizer **out,
                                             struct err *err)
{
    const struct gguf_file *g = m->gguf;
    enum gguf_type type;
    uint64_t n_tokens = 0, n_merges = 0, n_scores = 0, n_types = 0;
    if (!gguf_get_arr(g, "tokenizer.ggml.tokens", &type, &n_tokens) || type != GGUF_TYPE_STRING)
        return err_set(err, VLLMC_ERR_NOT_FOUND, "%s: no tokenizer.ggml.tokens", m->path);
    struct tokenizer_vocab v;
    tokenizer_vocab_init(&v);
    v.model = gguf_tstr(g, "tokenizer.ggml.model");
    v.pre = gguf_tstr(g, "tokenizer.ggml.pre");
    v.chat_template = gguf_tstr(g, "tokenizer.chat_template");
    v.n_tokens = (size_t)n_tokens;
    v.bos_id = gguf_id(g, "tokenizer.ggml.bos_token_id");
    v.eos_id = gguf_id(g, "tokenizer.ggml.eos_token_id");
    v.unk_id = gguf_id(g, "tokenizer.ggml.unknown_token_id");
    v.pad_id = gguf_id(g, "tokenizer.ggml.padding_token_id");
    v.sep_id = gguf_id(g, "tokenizer.ggml.seperator_token_id");
    v.add_bos = gguf_flag(g, "tokenizer.ggml.add_bos_token");
    v.add_eos = gguf_flag(g, "tokenizer.ggml.add_eos_token");
    v.add_space_prefix = gguf_flag(g, "tokenizer.ggml.add_space_prefix");
    if (!gguf_get_arr(g, "tokenizer.ggml.scores", &type, &n_scores) || n_scores != n_tokens)
        n_scores = 0;
    if (!gguf_get_arr(g, "tokenizer.ggml.token_type", &type, &n_types) || n_types != n_tokens)
        n_types = 0;
    if (!gguf_get_arr(g, "tokenizer.ggml.merges", &type, &n_merges) || type != GGUF_TYPE_STRING)
        n_merges = 0;
    struct tokenizer_str *tokens = mem_calloc((size_t)n_tokens, sizeof(*tokens));
    struct tokenizer_str *merges = mem_calloc((size_t)n_merges + 1, sizeof(*merges));
    float *scores = n_scores ? mem_calloc((size_t)n_scores, sizeof(*scores)) : NULL;
    int32_t *types = n_types ? mem_calloc((size_t)n_types, sizeof(*types)) : NULL;
    enum vllmc_status rc = VLLMC_ERR_NOMEM;
    if (!tokens || !merges || (n_scores && !scores) || (n_types && !types)) {
        err_set(err, rc, "tokenizer: out of memory");
        goto out;
    }
    rc = VLLMC_ERR_FORMAT;
    for (uint64_t i = 0; i < n_tokens; i++) {
        struct gguf_str s;
        double d;
        int64_t t;
        if (!gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s) ||
            (n_scores && !gguf_arr_f64(g, "tokenizer.ggml.scores", i, &d)) ||
            (n_types && !gguf_arr_i64(g, "tokenizer.ggml.token_type", i, &t))) {
            err_set(err, rc, "%s: tokenizer entry %llu is malformed", m->path,
                    (unsigned long long)i);
            goto out;
        }
        tokens[i] = (struct tokenizer_str){s.ptr, (size_t)s.len};
        if (n_scores)
            scores[i] = (float)d;
        if (n_types)
            types[i] = (int32_t)t;
    }
    for (uint64_t i = 0; i < n_merges; i++) {
        struct gguf_str s;
        if (!gguf_arr_str(g, "tokenizer.ggml.merges", i, &s)) {
            err_set(err, rc, "%s: tokenizer merge %llu is malformed", m->path,
                    (unsigned long long)i);
            goto out;
        }
        merges[i] = (struct tokenizer_str){s.ptr, (size_t)s.len};
    }
    v.tokens = tokens;
    v.scores = scores;
    v.token_types = types;
    v.merges = merges;
    v.n_merges = (size_t)n_merges;
    rc = tokenizer_create_from_vocab(&v, out, err);
out:
    mem_free(types);
    mem_free(scores);
    mem_free(merges);
    mem_free(tokens);
    return rc;
}

static enum vllmc_status tokenizer_from_folder(const struct model *m, struct tokenizer **out,
                                               struct err *err)
{
    char dir[4096], path[4200];
    snprintf(dir, sizeof(dir), "%s", m->path);
    if (strstr(dir, ".safetensors")) {
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof(dir), ".");
    }
    char *json = NULL, *config = NULL;
    size_t n_json = 0, n_config = 0;
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    if (!read_file(path, &json, &n_json))
        return err_set(err, VLLMC_ERR_NOT_FOUND, "%s: no tokenizer.json", dir);
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
    read_file(path, &config, &n_config);
    enum vllmc_status rc = tokenizer_create_from_json(json, n_json, config, n_config, out, err);
    mem_free(config);
    mem_free(json);
    return rc;
}

enum vllmc_status cli_tokenizer_load(const struct model *m, struct tokenizer **out,
                                     struct err *err)
{
    *out = NULL;
    return m->gguf ? tokenizer_from_gguf(m, out, err) : tokenizer_from_folder(m, out, err);
}
