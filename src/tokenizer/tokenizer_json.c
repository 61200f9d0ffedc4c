// Hugging Face tokenizer.json (+ tokenizer_config.json) loader: model (BPE, WordPiece),
// added tokens, normalizer, pre_tokenizer, decoder and post_processor sections become the
// tables and pipelines of struct tokenizer. A construct it does not know is an error that
// names it, never a silently different tokenizer.
#include <jansson.h>
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/tokenizer_impl.h"

static const char metaspace[] = "\xe2\x96\x81";

struct json_loader {
    struct tokenizer *tok;
    struct err *err;
    bool has_bytelevel_pre;
    bool has_bytelevel_dec;
};

static const char *jstr(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

static bool jbool(const json_t *obj, const char *key, bool dflt)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static enum vllmc_status nomem(struct json_loader *L)
{
    return err_set(L->err, VLLMC_ERR_NOMEM, "tokenizer.json: out of memory");
}

static enum vllmc_status bad(struct json_loader *L, const char *what)
{
    return err_set(L->err, VLLMC_ERR_FORMAT, "tokenizer.json: %s", what);
}

static enum vllmc_status unsupported(struct json_loader *L, const char *section, const char *type)
{
    return err_set(L->err, VLLMC_ERR_UNSUPPORTED, "tokenizer.json: unsupported %s '%s'", section,
                   type ? type : "(none)");
}

// ---- normalizer ----

static enum vllmc_status load_normalizer(struct json_loader *L, const json_t *n)
{
    if (!n || json_is_null(n))
        return VLLMC_OK;
    struct normalizer *norm = &L->tok->norm;
    const char *type = jstr(n, "type");
    if (!type)
        return bad(L, "normalizer without a type");
    bool ok = true;
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list))
            return bad(L, "normalizer Sequence without a list");
        for (size_t i = 0; i < json_array_size(list); i++) {
            enum vllmc_status rc = load_normalizer(L, json_array_get(list, i));
            if (rc)
                return rc;
        }
        return VLLMC_OK;
    } else if (!strcmp(type, "NFC")) {
        ok = normalizer_add(norm, NORM_NFC, NULL, NULL, 0, 0);
    } else if (!strcmp(type, "NFKC")) {
        ok = normalizer_add(norm, NORM_NFKC, NULL, NULL, 0, 0);
    } else if (!strcmp(type, "NFD")) {
        ok = normalizer_add(norm, NORM_NFD, NULL, NULL, 0, 0);
    } else if (!strcmp(type, "NFKD")) {
        ok = normalizer_add(norm, NORM_NFKD, NULL, NULL, 0, 0);
    } else if (!strcmp(type, "Lowercase")) {
        ok = normalizer_add(norm, NORM_LOWERCASE, NULL, NULL, 0, 0);
    } else if (!strcmp(type, "StripAccents")) {
        ok = normalizer_add(norm, NORM_STRIP_ACCENTS, NULL, NULL, 0, 0);
    } else if (!strcmp(type, "Strip")) {
        ok = normalizer_add(norm, NORM_STRIP, NULL, NULL, jbool(n, "strip_left", true),
                            jbool(n, "strip_right", true));
    } else if (!strcmp(type, "Prepend")) {
        const char *p = jstr(n, "prepend");
        if (!p)
            return bad(L, "Prepend without text");
        ok = normalizer_add(norm, NORM_PREPEND, p, NULL, 0, 0);
    } else if (!strcmp(type, "Replace")) {
        const json_t *pat = json_object_get(n, "pattern");
        const char *s = jstr(pat, "String"), *content = jstr(n, "content");
        if (!s || !content)
            return unsupported(L, "normalizer", "Replace with a regex");
        ok = normalizer_add(norm, NORM_REPLACE, content, s, 0, 0);
    } else if (!strcmp(type, "BertNormalizer")) {
        bool lower = jbool(n, "lowercase", true);
        const json_t *sa = json_object_get(n, "strip_accents");
        bool strip = json_is_boolean(sa) ? json_is_true(sa) : lower;
        if (jbool(n, "clean_text", true))
            ok = ok && normalizer_add(norm, NORM_BERT_CLEAN, NULL, NULL, 0, 0);
        if (jbool(n, "handle_chinese_chars", true))
            ok = ok && normalizer_add(norm, NORM_BERT_CHINESE, NULL, NULL, 0, 0);
        if (strip)
            ok = ok && normalizer_add(norm, NORM_NFD, NULL, NULL, 0, 0) &&
                 normalizer_add(norm, NORM_STRIP_ACCENTS, NULL, NULL, 0, 0);
        if (lower)
            ok = ok && normalizer_add(norm, NORM_LOWERCASE, NULL, NULL, 0, 0);
    } else {
        return unsupported(L, "normalizer", type);
    }
    return ok ? VLLMC_OK : nomem(L);
}

// ---- pre_tokenizer ----

static bool parse_behavior(const char *s, enum split_behavior *out)
{
    static const struct {
        const char *name;
        enum split_behavior b;
    } table[] = {{"Removed", SPLIT_REMOVED},
                 {"Isolated", SPLIT_ISOLATED},
                 {"MergedWithPrevious", SPLIT_MERGED_WITH_PREVIOUS},
                 {"MergedWithNext", SPLIT_MERGED_WITH_NEXT},
                 {"Contiguous", SPLIT_CONTIGUOUS}};
    for (size_t i = 0; s && i < sizeof(table) / sizeof(table[0]); i++) {
        if (!strcmp(s, table[i].name)) {
            *out = table[i].b;
            return true;
        }
    }
    return false;
}

// prepend_scheme "never" / "first" / "always"; older files say add_prefix_space.
static int metaspace_scheme(const json_t *n)
{
    const char *s = jstr(n, "prepend_scheme");
    if (s)
        return !strcmp(s, "never") ? 0 : !strcmp(s, "first") ? 1 : 2;
    return jbool(n, "add_prefix_space", true) ? 2 : 0;
}

static enum vllmc_status load_pre_tokenizer(struct json_loader *L, const json_t *n)
{
    if (!n || json_is_null(n))
        return VLLMC_OK;
    struct pretokenizer *pre = &L->tok->pre;
    const char *type = jstr(n, "type");
    enum vllmc_status rc = VLLMC_OK;
    if (!type)
        return bad(L, "pre_tokenizer without a type");
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(n, "pretokenizers");
        if (!json_is_array(list))
            return bad(L, "pre_tokenizer Sequence without a list");
        for (size_t i = 0; i < json_array_size(list) && !rc; i++)
            rc = load_pre_tokenizer(L, json_array_get(list, i));
        return rc;
    }
    if (!strcmp(type, "Split")) {
        const json_t *pat = json_object_get(n, "pattern");
        const char *re = jstr(pat, "Regex"), *lit = jstr(pat, "String");
        enum split_behavior b;
        if ((!re && !lit) || !parse_behavior(jstr(n, "behavior"), &b))
            return bad(L, "Split without a pattern or behavior");
        const char *p = re ? re : lit;
        return pretokenizer_add_split(pre, p, strlen(p), re == NULL, b, jbool(n, "invert", false),
                                      L->err);
    }
    if (!strcmp(type, "ByteLevel")) {
        L->has_bytelevel_pre = true;
        if (jbool(n, "add_prefix_space", true) &&
            !pretokenizer_add(pre, PRETOK_PREFIX_SPACE, 0, false))
            return nomem(L);
        if (jbool(n, "use_regex", true))
            rc = pretokenizer_add_gpt2(pre, L->err);
        return rc;
    }
    if (!strcmp(type, "Metaspace")) {
        const char *r = jstr(n, "replacement");
        if (r && strcmp(r, metaspace))
            return unsupported(L, "Metaspace replacement", r);
        return pretokenizer_add(pre, PRETOK_METASPACE, metaspace_scheme(n), jbool(n, "split", true))
                   ? VLLMC_OK
                   : nomem(L);
    }
    if (!strcmp(type, "Digits")) {
        const char *p = jbool(n, "individual_digits", false) ? "\\p{N}" : "\\p{N}+";
        return pretokenizer_add_split(pre, p, strlen(p), false, SPLIT_ISOLATED, false, L->err);
    }
    if (!strcmp(type, "Punctuation")) {
        enum split_behavior b = SPLIT_ISOLATED;
        const char *bs = jstr(n, "behavior");
        if (bs && !parse_behavior(bs, &b))
            return bad(L, "Punctuation behavior");
        static const char p[] = "[!-/:-@\\[-`{-~\\p{P}]";
        return pretokenizer_add_split(pre, p, strlen(p), false, b, false, L->err);
    }
    if (!strcmp(type, "Whitespace")) {
        static const char p[] = "\\w+|[^\\w\\s]+";
        return pretokenizer_add_split(pre, p, strlen(p), false, SPLIT_REMOVED, true, L->err);
    }
    if (!strcmp(type, "WhitespaceSplit")) {
        return pretokenizer_add_split(pre, "\\s+", 3, false, SPLIT_REMOVED, false, L->err);
    }
    if (!strcmp(type, "BertPreTokenizer")) {
        rc = pretokenizer_add_split(pre, "\\s+", 3, false, SPLIT_REMOVED, false, L->err);
        if (!rc) {
            static const char p[] = "[!-/:-@\\[-`{-~\\p{P}]";
            rc = pretokenizer_add_split(pre, p, strlen(p), false, SPLIT_ISOLATED, false, L->err);
        }
        return rc;
    }
    return unsupported(L, "pre_tokenizer", type);
}

// ---- decoder ----

static enum vllmc_status load_decoder(struct json_loader *L, const json_t *n)
{
    struct tokenizer *tok = L->tok;
    if (!n || json_is_null(n))
        return VLLMC_OK;
    const char *type = jstr(n, "type");
    if (!type)
        return bad(L, "decoder without a type");
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(n, "decoders");
        for (size_t i = 0; i < json_array_size(list); i++) {
            enum vllmc_status rc = load_decoder(L, json_array_get(list, i));
            if (rc)
                return rc;
        }
        return VLLMC_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        L->has_bytelevel_dec = true;
    } else if (!strcmp(type, "Replace")) {
        const char *s = jstr(json_object_get(n, "pattern"), "String");
        const char *content = jstr(n, "content");
        if (!s || !content || strcmp(s, metaspace) || strcmp(content, " "))
            return unsupported(L, "decoder", "Replace other than '▁' -> ' '");
        tok->decode_metaspace = true;
    } else if (!strcmp(type, "Metaspace")) {
        tok->decode_metaspace = true;
        tok->strip_leading = metaspace_scheme(n) ? 1 : 0;
    } else if (!strcmp(type, "Strip")) {
        const char *c = jstr(n, "content");
        if (c && strcmp(c, " "))
            return unsupported(L, "decoder Strip of", c);
        json_int_t start = json_integer_value(json_object_get(n, "start"));
        tok->strip_leading = start > 0 && start < 16 ? (int)start : 0;
    } else if (!strcmp(type, "WordPiece")) {
        tok->strip_leading = 1;
    } else if (strcmp(type, "ByteFallback") && strcmp(type, "Fuse")) {
        return unsupported(L, "decoder", type);
    }
    return VLLMC_OK;
}

// ---- post_processor: which special tokens add_special_tokens puts around the text ----

static int32_t template_token_id(struct json_loader *L, const json_t *pp, const char *name)
{
    const json_t *st = json_object_get(json_object_get(pp, "special_tokens"), name);
    const json_t *ids = json_object_get(st, "ids");
    if (json_array_size(ids) == 1)
        return (int32_t)json_integer_value(json_array_get(ids, 0));
    return tokenizer_token_id(L->tok, name, strlen(name));
}

static void load_post_processor(struct json_loader *L, const json_t *pp)
{
    struct tokenizer *tok = L->tok;
    const char *type = jstr(pp, "type");
    if (!type)
        return;
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(pp, "processors");
        for (size_t i = 0; i < json_array_size(list); i++)
            load_post_processor(L, json_array_get(list, i));
    } else if (!strcmp(type, "TemplateProcessing")) {
        const json_t *single = json_object_get(pp, "single");
        bool seen_seq = false;
        for (size_t i = 0; i < json_array_size(single); i++) {
            const json_t *item = json_array_get(single, i);
            const json_t *sp = json_object_get(item, "SpecialToken");
            if (json_object_get(item, "Sequence")) {
                seen_seq = true;
                continue;
            }
            const char *name = jstr(sp, "id");
            if (!name)
                continue;
            int32_t id = template_token_id(L, pp, name);
            if (!seen_seq) {
                tok->add_bos = true;
                if (tok->bos_id < 0)
                    tok->bos_id = id;
            } else {
                tok->add_eos = true;
                if (tok->eos_id < 0)
                    tok->eos_id = id;
            }
        }
    } else if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        const json_t *cls = json_object_get(pp, "cls"), *sep = json_object_get(pp, "sep");
        if (json_array_size(cls) == 2 && json_array_size(sep) == 2) {
            tok->add_bos = tok->add_eos = true;
            tok->bos_id = (int32_t)json_integer_value(json_array_get(cls, 1));
            tok->sep_id = (int32_t)json_integer_value(json_array_get(sep, 1));
            if (tok->model != TOK_MODEL_WORDPIECE)
                tok->eos_id = tok->sep_id;
        }
    }
}

// ---- model and added tokens ----

static enum vllmc_status load_vocab(struct json_loader *L, const json_t *model, const json_t *added)
{
    struct tokenizer *tok = L->tok;
    const json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab))
        return bad(L, "model.vocab is not an object");
    // The id space covers the model vocabulary and every added token.
    json_int_t n = 0;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)vocab, key, val)
    {
        json_int_t id = json_integer_value(val);
        if (!json_is_integer(val) || id < 0 || id >= (1 << 24))
            return bad(L, "vocab id out of range");
        if (id + 1 > n)
            n = id + 1;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        json_int_t id = json_integer_value(json_object_get(a, "id"));
        if (!json_is_integer(json_object_get(a, "id")) || id < 0 || id >= (1 << 24) ||
            !jstr(a, "content"))
            return bad(L, "added token without id or content");
        if (id + 1 > n)
            n = id + 1;
    }
    if (n == 0)
        return bad(L, "empty vocabulary");
    struct tokenizer_str *texts = mem_calloc((size_t)n, sizeof(*texts));
    if (!texts)
        return nomem(L);
    json_object_foreach((json_t *)vocab, key, val)
    {
        json_int_t id = json_integer_value(val);
        texts[id] = (struct tokenizer_str){key, strlen(key)};
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        json_int_t id = json_integer_value(json_object_get(a, "id"));
        const json_t *c = json_object_get(a, "content");
        texts[id] = (struct tokenizer_str){json_string_value(c), json_string_length(c)};
    }
    enum vllmc_status rc = tokenizer_set_tokens(tok, texts, (size_t)n, L->err);
    if (!rc) {
        for (json_int_t id = 0; id < n; id++)
            if (!texts[id].ptr)
                tok->tokens[id].type = TOKENIZER_TOKEN_UNUSED; // a hole in the id space
    }
    mem_free(texts);
    if (rc)
        return rc;
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        bool special = jbool(a, "special", false);
        tok->tokens[id].type = special ? TOKENIZER_TOKEN_CONTROL : TOKENIZER_TOKEN_USER_DEFINED;
        if (!tokenizer_add_added(tok, id, special, jbool(a, "lstrip", false),
                                 jbool(a, "rstrip", false), jbool(a, "single_word", false)))
            return nomem(L);
    }
    return VLLMC_OK;
}

static enum vllmc_status load_merges(struct json_loader *L, const json_t *merges)
{
    size_t n = json_array_size(merges);
    if (!pairmap_init(&L->tok->merges, n))
        return nomem(L);
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t na, nb;
        if (json_is_string(m)) {
            const char *s = json_string_value(m);
            size_t len = json_string_length(m);
            const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
            if (!sp)
                return bad(L, "merge without a space");
            a = s;
            na = (size_t)(sp - s);
            b = sp + 1;
            nb = len - na - 1;
        } else if (json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            na = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            nb = json_string_length(json_array_get(m, 1));
        } else {
            return bad(L, "merge is neither \"a b\" nor [a, b]");
        }
        if (tokenizer_add_merge(L->tok, a, na, b, nb, (int32_t)i))
            return nomem(L);
    }
    return VLLMC_OK;
}

static enum vllmc_status load_model(struct json_loader *L, const json_t *root)
{
    struct tokenizer *tok = L->tok;
    const json_t *model = json_object_get(root, "model");
    const char *type = jstr(model, "type");
    if (!json_is_object(model))
        return bad(L, "no model section");
    if (!type) // old files leave BPE implicit
        type = json_object_get(model, "merges") ? "BPE" : NULL;
    if (!type)
        return bad(L, "model without a type");
    enum vllmc_status rc;
    if (!strcmp(type, "BPE")) {
        tok->model = TOK_MODEL_BPE;
        const char *cont = jstr(model, "continuing_subword_prefix");
        const char *suffix = jstr(model, "end_of_word_suffix");
        if ((cont && *cont) || (suffix && *suffix))
            return unsupported(L, "BPE option", "continuing_subword_prefix/end_of_word_suffix");
        tok->byte_fallback = jbool(model, "byte_fallback", false);
        tok->ignore_merges = jbool(model, "ignore_merges", false);
        tok->fuse_unk = jbool(model, "fuse_unk", false);
    } else if (!strcmp(type, "WordPiece")) {
        tok->model = TOK_MODEL_WORDPIECE;
        const char *cont = jstr(model, "continuing_subword_prefix");
        if (cont && strcmp(cont, "##"))
            return unsupported(L, "WordPiece continuing_subword_prefix", cont);
        json_int_t m = json_integer_value(json_object_get(model, "max_input_chars_per_word"));
        if (m > 0 && m < (1 << 30))
            tok->wp_max_chars = (uint32_t)m;
    } else {
        return unsupported(L, "model", type);
    }
    const json_t *added = json_object_get(root, "added_tokens");
    rc = load_vocab(L, model, added);
    if (rc)
        return rc;
    if (tok->model == TOK_MODEL_BPE) {
        rc = load_merges(L, json_object_get(model, "merges"));
        if (rc)
            return rc;
    }
    const char *unk = jstr(model, "unk_token");
    if (unk)
        tok->unk_id = tokenizer_token_id(tok, unk, strlen(unk));
    if (tok->unk_id >= 0 && tok->tokens[tok->unk_id].type == TOKENIZER_TOKEN_NORMAL)
        tok->tokens[tok->unk_id].type = TOKENIZER_TOKEN_UNKNOWN;
    if (tok->byte_fallback) {
        for (int32_t id = 0; id < tok->n_vocab; id++) {
            const struct tok_token *t = &tok->tokens[id];
            const char *s = tok->text_pool + t->text_off;
            if (t->type == TOKENIZER_TOKEN_NORMAL && t->text_len == 6 && !memcmp(s, "<0x", 3) &&
                s[5] == '>')
                tok->tokens[id].type = TOKENIZER_TOKEN_BYTE;
        }
    }
    return VLLMC_OK;
}

// ---- tokenizer_config.json ----

// A special token in the configuration: a string or an AddedToken object {"content": ...}.
static const char *config_token(const json_t *cfg, const char *key)
{
    const json_t *v = json_object_get(cfg, key);
    if (json_is_string(v))
        return json_string_value(v);
    return jstr(v, "content");
}

static enum vllmc_status load_config(struct json_loader *L, const json_t *cfg)
{
    struct tokenizer *tok = L->tok;
    static const char *const keys[4] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    int32_t *ids[4] = {&tok->bos_id, &tok->eos_id, &tok->pad_id, &tok->unk_id};
    for (int i = 0; i < 4; i++) {
        const char *s = config_token(cfg, keys[i]);
        if (!s)
            continue;
        if (!(tok->special_text[i] = mem_strdup(s)))
            return nomem(L);
        int32_t id = tokenizer_token_id(tok, s, strlen(s));
        if (id >= 0)
            *ids[i] = id;
    }
    const json_t *v = json_object_get(cfg, "add_bos_token");
    if (json_is_boolean(v))
        tok->add_bos = json_is_true(v);
    v = json_object_get(cfg, "add_eos_token");
    if (json_is_boolean(v))
        tok->add_eos = json_is_true(v);
    tok->cleanup_spaces = jbool(cfg, "clean_up_tokenization_spaces", false);
    const json_t *ct = json_object_get(cfg, "chat_template");
    if (json_is_string(ct)) {
        if (!tokenizer_add_template(tok, "default", json_string_value(ct), json_string_length(ct)))
            return nomem(L);
    } else if (json_is_array(ct)) {
        for (size_t i = 0; i < json_array_size(ct); i++) {
            const json_t *e = json_array_get(ct, i);
            const char *name = jstr(e, "name");
            const json_t *t = json_object_get(e, "template");
            if (!name || !json_is_string(t))
                return bad(L, "chat_template entry without name or template");
            if (!tokenizer_add_template(tok, name, json_string_value(t), json_string_length(t)))
                return nomem(L);
        }
    }
    return VLLMC_OK;
}

enum vllmc_status tokenizer_create_from_json(const void *json, size_t n_json, const void *config,
                                             size_t n_config, struct tokenizer **out,
                                             struct err *err)
{
    *out = NULL;
    json_error_t jerr;
    json_t *root = json_loadb(json, n_json, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!root)
        return err_set(err, VLLMC_ERR_FORMAT, "tokenizer.json: line %d: %s", jerr.line, jerr.text);
    json_t *cfg = NULL;
    struct tokenizer *tok = NULL;
    enum vllmc_status rc = VLLMC_OK;
    if (!json_is_object(root)) {
        rc = err_set(err, VLLMC_ERR_FORMAT, "tokenizer.json: not a JSON object");
        goto done;
    }
    if (config) {
        cfg = json_loadb(config, n_config, JSON_DECODE_INT_AS_REAL, &jerr);
        if (!json_is_object(cfg)) {
            rc = err_set(err, VLLMC_ERR_FORMAT, "tokenizer_config.json: line %d: %s", jerr.line,
                         cfg ? "not a JSON object" : jerr.text);
            goto done;
        }
    }
    tok = tokenizer_alloc();
    if (!tok) {
        rc = err_set(err, VLLMC_ERR_NOMEM, "tokenizer.json: out of memory");
        goto done;
    }
    struct json_loader L = {.tok = tok, .err = err};
    rc = load_model(&L, root);
    if (!rc)
        rc = load_normalizer(&L, json_object_get(root, "normalizer"));
    if (!rc)
        rc = load_pre_tokenizer(&L, json_object_get(root, "pre_tokenizer"));
    if (!rc)
        rc = load_decoder(&L, json_object_get(root, "decoder"));
    if (rc)
        goto done;
    tok->byte_level = L.has_bytelevel_pre || L.has_bytelevel_dec;
    if (tok->model == TOK_MODEL_WORDPIECE)
        tok->strip_leading = 1;
    load_post_processor(&L, json_object_get(root, "post_processor"));
    if (cfg) {
        rc = load_config(&L, cfg);
        if (rc)
            goto done;
    }
    int32_t *ids[] = {&tok->bos_id, &tok->eos_id, &tok->unk_id, &tok->pad_id, &tok->sep_id};
    for (size_t i = 0; i < 5; i++)
        if (*ids[i] >= tok->n_vocab)
            *ids[i] = -1;
    rc = tokenizer_finish(tok, err);
done:
    json_decref(root);
    json_decref(cfg);
    if (rc) {
        tokenizer_free(tok);
        return rc;
    }
    *out = tok;
    return VLLMC_OK;
}
