// Tokenizer loading for the engine: fills the tokenizer's plain vocabulary struct from GGUF
// metadata (pointing into the file's mapping, no copies until the tokenizer takes its own),
// or hands tokenizer.json bytes to the JSON loader.
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "engine/tokenizer_load.h"
#include "model/file_map.h"

static struct tokenizer_str gstr(struct gguf_str s)
{
    return (struct tokenizer_str){s.ptr, (size_t)s.len};
}

static int32_t get_id(const struct gguf_file *g, const char *key)
{
    int64_t v;
    return gguf_get_i64(g, key, &v) && v >= 0 && v <= INT32_MAX ? (int32_t)v : -1;
}

static int get_flag(const struct gguf_file *g, const char *key)
{
    bool b;
    return gguf_get_bool(g, key, &b) ? (int)b : -1;
}

enum vllmc_status tokenizer_load_gguf(const struct gguf_file *g, struct tokenizer **out,
                                      struct err *err)
{
    *out = NULL;
    struct tokenizer_vocab v;
    tokenizer_vocab_init(&v);
    struct gguf_str s, cfg = {0};
    // Files written from a Hugging Face folder (vllmc quantize) carry the
    // tokenizer.json itself (the GGUF spec's key) and its tokenizer_config.json.
    if (!gguf_find_kv(g, "tokenizer.ggml.model") &&
        gguf_get_str(g, "tokenizer.huggingface.json", &s)) {
        bool has_cfg = gguf_get_str(g, "tokenizer.huggingface.config_json", &cfg);
        return tokenizer_create_from_json(s.ptr, (size_t)s.len, has_cfg ? cfg.ptr : NULL,
                                          has_cfg ? (size_t)cfg.len : 0, out, err);
    }
    if (!gguf_get_str(g, "tokenizer.ggml.model", &s))
        return err_set(err, VLLMC_ERR_NOT_FOUND, "gguf: no tokenizer.ggml.model");
    v.model = gstr(s);
    if (gguf_get_str(g, "tokenizer.ggml.pre", &s))
        v.pre = gstr(s);
    if (gguf_get_str(g, "tokenizer.chat_template", &s))
        v.chat_template = gstr(s);
    if (gguf_get_str(g, "general.name", &s))
        v.name = gstr(s);
    enum gguf_type et;
    uint64_t n = 0, n_merges = 0;
    if (!gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) || et != GGUF_TYPE_STRING || !n ||
        n > INT32_MAX)
        return err_set(err, VLLMC_ERR_FORMAT, "gguf: tokenizer.ggml.tokens missing or malformed");
    uint64_t n_scores = 0, n_types = 0;
    bool has_scores = gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n_scores) && n_scores == n;
    bool has_types = gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n_types) && n_types == n;
    bool has_merges =
        gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n_merges) && et == GGUF_TYPE_STRING;
    struct tokenizer_str *tokens = mem_calloc((size_t)n, sizeof(*tokens));
    float *scores = has_scores ? mem_calloc((size_t)n, sizeof(*scores)) : NULL;
    int32_t *types = has_types ? mem_calloc((size_t)n, sizeof(*types)) : NULL;
    struct tokenizer_str *merges =
        has_merges && n_merges ? mem_calloc((size_t)n_merges, sizeof(*merges)) : NULL;
    enum vllmc_status rc = VLLMC_OK;
    if (!tokens || (has_scores && !scores) || (has_types && !types) ||
        (has_merges && n_merges && !merges)) {
        rc = err_set(err, VLLMC_ERR_NOMEM, "gguf: out of memory reading the vocabulary");
        goto done;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (!gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s)) {
            rc = err_set(err, VLLMC_ERR_FORMAT, "gguf: token %llu unreadable",
                         (unsigned long long)i);
            goto done;
        }
        tokens[i] = gstr(s);
        double d;
        int64_t t;
        if (has_scores)
            scores[i] = gguf_arr_f64(g, "tokenizer.ggml.scores", i, &d) ? (float)d : 0.0f;
        if (has_types)
            types[i] = gguf_arr_i64(g, "tokenizer.ggml.token_type", i, &t) ? (int32_t)t : 1;
    }
    for (uint64_t i = 0; merges && i < n_merges; i++) {
        if (!gguf_arr_str(g, "tokenizer.ggml.merges", i, &s)) {
            rc = err_set(err, VLLMC_ERR_FORMAT, "gguf: merge %llu unreadable",
                         (unsigned long long)i);
            goto done;
        }
        merges[i] = gstr(s);
    }
    v.n_tokens = (size_t)n;
    v.tokens = tokens;
    v.scores = scores;
    v.token_types = types;
    v.n_merges = merges ? (size_t)n_merges : 0;
    v.merges = merges;
    v.bos_id = get_id(g, "tokenizer.ggml.bos_token_id");
    v.eos_id = get_id(g, "tokenizer.ggml.eos_token_id");
    v.unk_id = get_id(g, "tokenizer.ggml.unknown_token_id");
    v.pad_id = get_id(g, "tokenizer.ggml.padding_token_id");
    v.sep_id = get_id(g, "tokenizer.ggml.seperator_token_id");
    v.add_bos = get_flag(g, "tokenizer.ggml.add_bos_token");
    v.add_eos = get_flag(g, "tokenizer.ggml.add_eos_token");
    v.add_space_prefix = get_flag(g, "tokenizer.ggml.add_space_prefix");
    rc = tokenizer_create_from_vocab(&v, out, err);
done:
    mem_free(tokens);
    mem_free(scores);
    mem_free(types);
    mem_free(merges);
    return rc;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

// Loads tokenizer.json at json_path plus the tokenizer_config.json in dir, if any.
static enum vllmc_status load_json_pair(const char *json_path, const char *dir,
                                        struct tokenizer **out, struct err *err)
{
    struct file_map js = {0}, cfg = {0};
    enum vllmc_status rc = file_map_open(json_path, &js, err);
    if (rc)
        return rc;
    size_t n = strlen(dir) + sizeof("/tokenizer_config.json");
    char *cfg_path = mem_alloc(n);
    if (!cfg_path) {
        file_map_close(&js);
        return err_set(err, VLLMC_ERR_NOMEM, "tokenizer: out of memory");
    }
    snprintf(cfg_path, n, "%s/tokenizer_config.json", dir);
    struct err ignored = {0};
    bool has_cfg = file_map_open(cfg_path, &cfg, &ignored) == VLLMC_OK;
    mem_free(cfg_path);
    rc = tokenizer_create_from_json(js.addr ? js.addr : "", js.n_bytes,
                                    has_cfg ? (cfg.addr ? cfg.addr : "") : NULL,
                                    has_cfg ? cfg.n_bytes : 0, out, err);
    file_map_close(&cfg);
    file_map_close(&js);
    return rc;
}

enum vllmc_status tokenizer_load_path(const char *path, struct tokenizer **out, struct err *err)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st))
        return err_set(err, VLLMC_ERR_NOT_FOUND, "tokenizer: %s does not exist", path);
    if (S_ISDIR(st.st_mode)) {
        size_t n = strlen(path) + sizeof("/tokenizer.json");
        char *json_path = mem_alloc(n);
        if (!json_path)
            return err_set(err, VLLMC_ERR_NOMEM, "tokenizer: out of memory");
        snprintf(json_path, n, "%s/tokenizer.json", path);
        enum vllmc_status rc = load_json_pair(json_path, path, out, err);
        mem_free(json_path);
        return rc;
    }
    if (ends_with(path, ".json")) {
        char *dir = mem_strdup(path);
        if (!dir)
            return err_set(err, VLLMC_ERR_NOMEM, "tokenizer: out of memory");
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        enum vllmc_status rc = load_json_pair(path, slash ? dir : ".", out, err);
        mem_free(dir);
        return rc;
    }
    struct gguf_file *g;
    enum vllmc_status rc = gguf_open(path, &g, err);
    if (rc)
        return rc;
    rc = tokenizer_load_gguf(g, out, err);
    gguf_free(g);
    return rc;
}
