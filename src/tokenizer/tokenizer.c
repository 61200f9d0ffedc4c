// Tokenizer core: the vocabulary tables shared by every loader, the encode pipeline (added
// and special tokens -> normaliser -> pre-tokenizer -> BPE / SentencePiece / WordPiece) and
// one-shot decoding. Loaders: tokenizer_create_from_vocab() here (GGUF-style metadata) and
// tokenizer_create_from_json() in tokenizer_json.c.
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/tokenizer_impl.h"

static const char metaspace[] = "\xe2\x96\x81"; // U+2581, SentencePiece's space

// Spellings of end-of-generation tokens besides EOS, as llama.cpp lists them.
static const char *const eog_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<end_of_turn>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|return|>",
    "<|call|>",
    "<｜end▁of▁sentence｜>",
    "<|end▁of▁sentence|>",
    "</s>",
};

void tokenizer_vocab_init(struct tokenizer_vocab *v)
{
    memset(v, 0, sizeof(*v));
    v->bos_id = v->eos_id = v->unk_id = v->pad_id = v->sep_id = -1;
    v->add_bos = v->add_eos = v->add_space_prefix = -1;
}

// ---- building ----

struct tokenizer *tokenizer_alloc(void)
{
    struct tokenizer *tok = mem_calloc(1, sizeof(*tok));
    if (!tok)
        return NULL;
    tok->bos_id = tok->eos_id = tok->unk_id = tok->pad_id = tok->sep_id = -1;
    tok->wp_max_chars = 100;
    for (int i = 0; i < 256; i++)
        tok->byte_ids[i] = -1;
    return tok;
}

void tokenizer_free(struct tokenizer *tok)
{
    if (!tok)
        return;
    for (size_t i = 0; i < tok->n_templates; i++) {
        mem_free(tok->templates[i].name);
        mem_free(tok->templates[i].text);
    }
    mem_free(tok->templates);
    for (int i = 0; i < 4; i++)
        mem_free(tok->special_text[i]);
    pretokenizer_deinit(&tok->pre);
    normalizer_deinit(&tok->norm);
    mem_free(tok->added);
    pairmap_deinit(&tok->merges);
    strmap_deinit(&tok->by_text);
    strmap_deinit(&tok->lookup);
    mem_free(tok->piece_pool);
    mem_free(tok->text_pool);
    mem_free(tok->tokens);
    mem_free(tok);
}

static const char *tok_text(const struct tokenizer *tok, int32_t id)
{
    return tok->text_pool + tok->tokens[id].text_off;
}

enum vllmc_status tokenizer_set_tokens(struct tokenizer *tok, const struct tokenizer_str *texts,
                                       size_t n, struct err *err)
{
    if (n == 0 || n > (size_t)INT32_MAX / 2)
        return err_set(err, VLLMC_ERR_FORMAT, "tokenizer: vocabulary of %zu tokens", n);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (!texts[i].ptr && texts[i].len)
            return err_set(err, VLLMC_ERR_FORMAT, "tokenizer: token %zu has no text", i);
        total += texts[i].len + 1;
    }
    if (total > UINT32_MAX)
        return err_set(err, VLLMC_ERR_FORMAT, "tokenizer: vocabulary text too large");
    tok->tokens = mem_calloc(n, sizeof(*tok->tokens));
    tok->text_pool = mem_alloc(total);
    if (!tok->tokens || !tok->text_pool || !strmap_init(&tok->by_text, n))
        return err_set(err, VLLMC_ERR_NOMEM, "tokenizer: out of memory for %zu tokens", n);
    tok->n_vocab = (int32_t)n;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        struct tok_token *t = &tok->tokens[i];
        if (texts[i].len)
            memcpy(tok->text_pool + off, texts[i].ptr, texts[i].len);
        tok->text_pool[off + texts[i].len] = '\0';
        t->text_off = (uint32_t)off;
        t->text_len = (uint32_t)texts[i].len;
        t->type = TOKENIZER_TOKEN_NORMAL;
        if (!strmap_put(&tok->by_text, tok->text_pool + off, texts[i].len, (int32_t)i))
            return err_set(err, VLLMC_ERR_NOMEM, "tokenizer: out of memory");
        off += texts[i].len + 1;
    }
    return VLLMC_OK;
}

enum vllmc_status tokenizer_add_merge(struct tokenizer *tok, const char *left, size_t n_left,
                                      const char *right, size_t n_right, int32_t rank)
{
    int32_t l = strmap_get(&tok->by_text, left, n_left);
    int32_t r = strmap_get(&tok->by_text, right, n_right);
    if (l < 0 || r < 0)
        return VLLMC_OK; // a merge of unknown tokens can never apply
    char stack[256];
    char *buf = n_left + n_right <= sizeof(stack) ? stack : mem_alloc(n_left + n_right);
    if (!buf)
        return VLLMC_ERR_NOMEM;
    memcpy(buf, left, n_left);
    memcpy(buf + n_left, right, n_right);
    int32_t m = strmap_get(&tok->by_text, buf, n_left + n_right);
    if (buf != stack)
        mem_free(buf);
    if (m < 0)
        return VLLMC_OK;
    if (!tok->merges.cap && !pairmap_init(&tok->merges, 1024))
        return VLLMC_ERR_NOMEM;
    return pairmap_put(&tok->merges, l, r, rank, m) ? VLLMC_OK : VLLMC_ERR_NOMEM;
}

bool tokenizer_add_added(struct tokenizer *tok, int32_t id, bool special, bool lstrip, bool rstrip,
                         bool single_word)
{
    if (id < 0 || id >= tok->n_vocab || tok->tokens[id].text_len == 0)
        return true; // nothing to match
    for (size_t i = 0; i < tok->n_added; i++) {
        if (tok->added[i].id == id) { // listed twice: the later entry wins
            tok->added[i].special = special;
            tok->added[i].lstrip = lstrip;
            tok->added[i].rstrip = rstrip;
            tok->added[i].single_word = single_word;
            return true;
        }
    }
    struct tok_added *a = mem_realloc(tok->added, (tok->n_added + 1) * sizeof(*a));
    if (!a)
        return false;
    tok->added = a;
    a[tok->n_added++] = (struct tok_added){.id = id,
                                           .off = tok->tokens[id].text_off,
                                           .len = tok->tokens[id].text_len,
                                           .special = special,
                                           .lstrip = lstrip,
                                           .rstrip = rstrip,
                                           .single_word = single_word};
    return true;
}

bool tokenizer_add_template(struct tokenizer *tok, const char *name, const char *text, size_t len)
{
    struct tok_template *t = mem_realloc(tok->templates, (tok->n_templates + 1) * sizeof(*t));
    if (!t)
        return false;
    tok->templates = t;
    char *n = mem_strdup(name);
    char *x = mem_strndup(text, len);
    if (!n || !x) {
        mem_free(n);
        mem_free(x);
        return false;
    }
    t[tok->n_templates++] = (struct tok_template){n, x};
    return true;
}

static int added_cmp(const void *pa, const void *pb)
{
    const struct tok_added *a = pa, *b = pb;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    if (a->len != b->len)
        return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

// The byte a "<0xNN>" spelling stands for, or -1.
static int byte_token_value(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
        return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// The bytes a token adds to decoded text.
static bool token_piece(const struct tokenizer *tok, int32_t id, struct tok_bytes *out,
                        struct tok_bytes *tmp)
{
    const struct tok_token *t = &tok->tokens[id];
    const char *s = tok_text(tok, id);
    size_t n = t->text_len;
    out->len = 0;
    if (tok->byte_level) {
        if (t->type != TOKENIZER_TOKEN_CONTROL && byte_level_unmap(s, n, tmp))
            return tok_bytes_append(out, tmp->ptr, tmp->len);
        return tok_bytes_append(out, s, n);
    }
    if (t->type == TOKENIZER_TOKEN_CONTROL || t->type == TOKENIZER_TOKEN_UNKNOWN)
        return tok_bytes_append(out, s, n);
    if (tok->model == TOK_MODEL_WORDPIECE) {
        if (tok->wordpiece_gguf) {
            if (n >= 3 && !memcmp(s, metaspace, 3))
                return tok_bytes_append(out, " ", 1) && tok_bytes_append(out, s + 3, n - 3);
            return tok_bytes_append(out, s, n);
        }
        if (n >= 2 && !memcmp(s, "##", 2))
            return tok_bytes_append(out, s + 2, n - 2);
        return tok_bytes_append(out, " ", 1) && tok_bytes_append(out, s, n);
    }
    if (tok->decode_metaspace) {
        int b = byte_token_value(s, n);
        if (b >= 0 && (t->type == TOKENIZER_TOKEN_BYTE || tok->byte_fallback)) {
            char c = (char)b;
            return tok_bytes_append(out, &c, 1);
        }
        size_t run = 0;
        for (size_t i = 0; i + 3 <= n;) {
            if (!memcmp(s + i, metaspace, 3)) {
                if (!tok_bytes_append(out, s + run, i - run) || !tok_bytes_append(out, " ", 1))
                    return false;
                i += 3;
                run = i;
            } else {
                i++;
            }
        }
        return tok_bytes_append(out, s + run, n - run);
    }
    return tok_bytes_append(out, s, n);
}

enum vllmc_status tokenizer_finish(struct tokenizer *tok, struct err *err)
{
    struct tok_bytes piece = {0}, tmp = {0}, pool = {0};
    enum vllmc_status rc = VLLMC_OK;
    // Pieces, packed into one pool.
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        if (!token_piece(tok, id, &piece, &tmp)) {
            rc = VLLMC_ERR_NOMEM;
            goto done;
        }
        tok->tokens[id].piece_off = (uint32_t)pool.len;
        tok->tokens[id].piece_len = (uint32_t)piece.len;
        if (!tok_bytes_append(&pool, piece.ptr ? piece.ptr : "", piece.len)) {
            rc = VLLMC_ERR_NOMEM;
            goto done;
        }
    }
    tok->piece_pool = pool.ptr ? pool.ptr : mem_strdup("");
    pool.ptr = NULL;
    if (!tok->piece_pool) {
        rc = VLLMC_ERR_NOMEM;
        goto done;
    }
    // The encode-side lookup: raw bytes for byte-level vocabularies, spellings otherwise.
    // Control tokens are reached only through special-token matching.
    if (!strmap_init(&tok->lookup, (size_t)tok->n_vocab)) {
        rc = VLLMC_ERR_NOMEM;
        goto done;
    }
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        const struct tok_token *t = &tok->tokens[id];
        const char *key = tok->byte_level ? tok->piece_pool + t->piece_off : tok_text(tok, id);
        size_t n = tok->byte_level ? t->piece_len : t->text_len;
        if (tok->byte_level && t->type == TOKENIZER_TOKEN_CONTROL)
            continue;
        if (!n)
            continue;
        if (!strmap_put(&tok->lookup, key, n, id)) {
            rc = VLLMC_ERR_NOMEM;
            goto done;
        }
        if (n > tok->max_token_len)
            tok->max_token_len = n;
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b, name[8];
        if (tok->byte_level) {
            tok->byte_ids[b] = strmap_get(&tok->lookup, &c, 1);
        } else {
            static const char hex[] = "0123456789ABCDEF";
            memcpy(name, "<0x", 3);
            name[3] = hex[b >> 4];
            name[4] = hex[b & 15];
            name[5] = '>';
            tok->byte_ids[b] = strmap_get(&tok->by_text, name, 6);
        }
    }
    // Added tokens indexed by first byte, longest first (leftmost-longest matching).
    for (size_t i = 0; i < tok->n_added; i++)
        tok->added[i].first = (uint8_t)tok->text_pool[tok->added[i].off];
    if (tok->n_added)
        qsort(tok->added, tok->n_added, sizeof(*tok->added), added_cmp);
    memset(tok->added_start, 0, sizeof(tok->added_start));
    for (size_t i = 0; i < tok->n_added; i++)
        tok->added_start[(uint8_t)tok->text_pool[tok->added[i].off] + 1]++;
    for (int b = 0; b < 256; b++)
        tok->added_start[b + 1] += tok->added_start[b];
    // End-of-generation tokens.
    if (tok->eos_id >= 0 && tok->eos_id < tok->n_vocab)
        tok->tokens[tok->eos_id].eog = true;
    for (size_t i = 0; i < sizeof(eog_texts) / sizeof(eog_texts[0]); i++) {
        int32_t id = strmap_get(&tok->by_text, eog_texts[i], strlen(eog_texts[i]));
        if (id >= 0 && tok->tokens[id].type == TOKENIZER_TOKEN_CONTROL)
            tok->tokens[id].eog = true;
    }
done:
    mem_free(piece.ptr);
    mem_free(tmp.ptr);
    mem_free(pool.ptr);
    if (rc)
        err_set(err, rc, "tokenizer: out of memory building the vocabulary");
    return rc;
}

// ---- GGUF-style vocabulary ----

static bool str_is(struct tokenizer_str s, const char *lit)
{
    return s.len == strlen(lit) && !memcmp(s.ptr, lit, s.len);
}

static bool pre_in(struct tokenizer_str s, const char *const *names)
{
    for (; *names; names++)
        if (str_is(s, *names))
            return true;
    return false;
}

static enum vllmc_status vocab_setup_model(struct tokenizer *tok, const struct tokenizer_vocab *v,
                                           struct err *err)
{
    static const char *const llama3_pre[] = {"llama3",       "llama-v3", "llama-bpe", "falcon3",
                                             "falcon-h1",    "pixtral",  "midm-2.0",  "lfm2",
                                             "jina-v5-nano", NULL};
    enum vllmc_status rc;
    if (str_is(v->model, "llama")) {
        tok->model = TOK_MODEL_SPM;
        bool prefix = v->add_space_prefix != 0;
        tok->decode_metaspace = true;
        tok->byte_fallback = true;
        tok->strip_leading = prefix ? 1 : 0;
        if ((prefix && !normalizer_add(&tok->norm, NORM_PREPEND, metaspace, NULL, 0, 0)) ||
            !normalizer_add(&tok->norm, NORM_REPLACE, metaspace, " ", 0, 0))
            return err_set(err, VLLMC_ERR_NOMEM, "tokenizer: out of memory");
        tok->bos_id = 1;
        tok->eos_id = 2;
        tok->unk_id = 0;
        tok->add_bos = true;
        return VLLMC_OK;
    }
    if (str_is(v->model, "gpt2")) {
        tok->model = TOK_MODEL_BPE;
        tok->byte_level = true;
        struct tokenizer_str pre = v->pre;
        if (!pre.len)
            pre = (struct tokenizer_str){"default", 7};
        rc = pretokenizer_add_named(&tok->pre, pre.ptr, pre.len, err);
        if (rc)
            return rc;
        if (pre_in(v->pre, llama3_pre)) {
            tok->ignore_merges = true;
            tok->add_bos = true;
        }
        return VLLMC_OK;
    }
    if (str_is(v->model, "bert")) {
        tok->model = TOK_MODEL_WORDPIECE;
        tok->wordpiece_gguf = true;
        tok->strip_leading = 1;
        tok->bos_id = 101;
        tok->unk_id = 100;
        tok->sep_id = 102;
        tok->pad_id = 0;
        tok->add_bos = tok->add_eos = true;
        if (!normalizer_add(&tok->norm, NORM_BERT_CLEAN, NULL, NULL, 0, 0) ||
            !normalizer_add(&tok->norm, NORM_BERT_CHINESE, NULL, NULL, 0, 0) ||
            !normalizer_add(&tok->norm, NORM_NFD, NULL, NULL, 0, 0) ||
            !normalizer_add(&tok->norm, NORM_STRIP_ACCENTS, NULL, NULL, 0, 0) ||
            !normalizer_add(&tok->norm, NORM_LOWERCASE, NULL, NULL, 0, 0))
            return err_set(err, VLLMC_ERR_NOMEM, "tokenizer: out of memory");
        rc = pretokenizer_add_split(&tok->pre, "\\s+", 3, false, SPLIT_REMOVED, false, err);
        if (!rc)
            rc = pretokenizer_add_split(&tok->pre, "[!-/:-@\\[-`{-~\\p{P}]", 20, false,
                                        SPLIT_ISOLATED, false, err);
        return rc;
    }
    return err_set(err, VLLMC_ERR_UNSUPPORTED, "tokenizer: unsupported tokenizer model '%.*s'",
                   (int)v->model.len, v->model.ptr ? v->model.ptr : "");
}

// Token attributes GGUF cannot store, implied by the model as llama.cpp implies them: Phi-3's
// special tokens swallow the whitespace after them (its tokenizer.json says rstrip), except
// <unk>, <s> and <|endoftext|>.
static void apply_model_token_attrs(struct tokenizer *tok, struct tokenizer_str name)
{
    char lower[64];
    size_t n = name.len < sizeof(lower) - 1 ? name.len : sizeof(lower) - 1;
    for (size_t i = 0; i < n; i++) {
        char c = name.ptr[i];
        lower[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    lower[n] = '\0';
    if (!strstr(lower, "phi-3") && !strstr(lower, "phi3"))
        return;
    for (size_t i = 0; i < tok->n_added; i++) {
        const char *t = tok->text_pool + tok->added[i].off;
        tok->added[i].rstrip = strcmp(t, "<unk>") && strcmp(t, "<s>") && strcmp(t, "<|endoftext|>");
    }
}

enum vllmc_status tokenizer_create_from_vocab(const struct tokenizer_vocab *v,
                                              struct tokenizer **out, struct err *err)
{
    *out = NULL;
    struct tokenizer *tok = tokenizer_alloc();
    if (!tok)
        return err_set(err, VLLMC_ERR_NOMEM, "tokenizer: out of memory");
    enum vllmc_status rc = vocab_setup_model(tok, v, err);
    if (rc)
        goto fail;
    rc = tokenizer_set_tokens(tok, v->tokens, v->n_tokens, err);
    if (rc)
        goto fail;
    for (size_t i = 0; i < v->n_tokens; i++) {
        struct tok_token *t = &tok->tokens[i];
        t->score = v->scores ? v->scores[i] : 0.0f;
        int32_t type = v->token_types ? v->token_types[i] : TOKENIZER_TOKEN_NORMAL;
        t->type =
            (uint8_t)(type >= 0 && type <= TOKENIZER_TOKEN_BYTE ? type : TOKENIZER_TOKEN_NORMAL);
        // Control, user-defined and unknown tokens are matched in text before the model runs,
        // as llama.cpp does; user-defined ones even without parse_special.
        if ((t->type == TOKENIZER_TOKEN_CONTROL || t->type == TOKENIZER_TOKEN_USER_DEFINED ||
             t->type == TOKENIZER_TOKEN_UNKNOWN) &&
            !tokenizer_add_added(tok, (int32_t)i, t->type != TOKENIZER_TOKEN_USER_DEFINED, false,
                                 false, false)) {
            rc = err_set(err, VLLMC_ERR_NOMEM, "tokenizer: out of memory");
            goto fail;
        }
    }
    apply_model_token_attrs(tok, v->name);
    if (tok->model == TOK_MODEL_BPE) {
        if (!v->n_merges) {
            rc = err_set(err, VLLMC_ERR_FORMAT, "tokenizer: byte-level BPE without merges");
            goto fail;
        }
        if (!pairmap_init(&tok->merges, v->n_merges)) {
            rc = err_set(err, VLLMC_ERR_NOMEM, "tokenizer: out of memory for merges");
            goto fail;
        }
        for (size_t i = 0; i < v->n_merges; i++) {
            const char *m = v->merges[i].ptr;
            size_t n = v->merges[i].len;
            const char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
            if (!sp)
                continue;
            rc = tokenizer_add_merge(tok, m, (size_t)(sp - m), sp + 1, n - (size_t)(sp - m) - 1,
                                     (int32_t)i);
            if (rc) {
                err_set(err, rc, "tokenizer: out of memory for merges");
                goto fail;
            }
        }
    }
    if (v->bos_id >= 0)
        tok->bos_id = v->bos_id;
    if (v->eos_id >= 0)
        tok->eos_id = v->eos_id;
    if (v->unk_id >= 0)
        tok->unk_id = v->unk_id;
    if (v->pad_id >= 0)
        tok->pad_id = v->pad_id;
    if (v->sep_id >= 0)
        tok->sep_id = v->sep_id;
    if (v->add_bos >= 0)
        tok->add_bos = v->add_bos;
    if (v->add_eos >= 0)
        tok->add_eos = v->add_eos;
    int32_t *ids[] = {&tok->bos_id, &tok->eos_id, &tok->unk_id, &tok->pad_id, &tok->sep_id};
    for (size_t i = 0; i < 5; i++)
        if (*ids[i] >= tok->n_vocab)
            *ids[i] = -1;
    if (v->chat_template.len &&
        !tokenizer_add_template(tok, "default", v->chat_template.ptr, v->chat_template.len)) {
        rc = err_set(err, VLLMC_ERR_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    rc = tokenizer_finish(tok, err);
    if (rc)
        goto fail;
    *out = tok;
    return VLLMC_OK;
fail:
    tokenizer_free(tok);
    return rc;
}

// ---- encoding ----

struct encode_ctx {
    const struct tokenizer *tok;
    struct bpe_scratch *bpe;
    struct tok_bytes norm;
    struct tok_pieces pieces;
    struct tok_ids out;
};

static bool is_space_byte(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool is_word_byte(const char *text, size_t len, size_t at)
{
    (void)len;
    uint8_t c = (uint8_t)text[at];
    return c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') || c == '_';
}

// Encodes a stretch of ordinary text (no added tokens inside).
static enum vllmc_status encode_text(struct encode_ctx *c, const char *text, size_t len, bool first)
{
    const struct tokenizer *tok = c->tok;
    if (!len)
        return VLLMC_OK;
    if (!normalizer_run(&tok->norm, text, len, &c->norm))
        return VLLMC_ERR_NOMEM;
    enum vllmc_status rc = pretokenizer_run(&tok->pre, &c->norm, first, &c->pieces);
    if (rc)
        return rc;
    for (size_t i = 0; i < c->pieces.len; i++) {
        const char *p = c->norm.ptr + c->pieces.ptr[i].off;
        size_t n = c->pieces.ptr[i].len;
        bool ok = tok->model == TOK_MODEL_WORDPIECE ? wordpiece_encode_piece(tok, p, n, &c->out)
                                                    : bpe_encode_piece(tok, c->bpe, p, n, &c->out);
        if (!ok)
            return VLLMC_ERR_NOMEM;
    }
    return VLLMC_OK;
}

// The added token that matches at text[pos], longest first, or NULL.
static const struct tok_added *added_match(const struct tokenizer *tok, const char *text,
                                           size_t len, size_t pos, bool parse_special)
{
    uint8_t b = (uint8_t)text[pos];
    for (uint32_t i = tok->added_start[b]; i < tok->added_start[b + 1]; i++) {
        const struct tok_added *a = &tok->added[i];
        if (a->special && !parse_special)
            continue;
        if (a->len > len - pos || memcmp(text + pos, tok->text_pool + a->off, a->len))
            continue;
        if (a->single_word && ((pos > 0 && is_word_byte(text, len, pos - 1)) ||
                               (pos + a->len < len && is_word_byte(text, len, pos + a->len))))
            continue;
        return a;
    }
    return NULL;
}

enum vllmc_status tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len,
                                   unsigned flags, int32_t **ids, size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if (!text && len)
        return VLLMC_ERR_INVALID_ARG;
    struct encode_ctx c = {.tok = tok};
    enum vllmc_status rc = VLLMC_OK;
    bool parse_special = flags & TOKENIZER_ENCODE_PARSE_SPECIAL;
    bool add_special = flags & TOKENIZER_ENCODE_ADD_SPECIAL;
    if (tok->model != TOK_MODEL_WORDPIECE && !(c.bpe = bpe_scratch_create()))
        return VLLMC_ERR_NOMEM;
    if (add_special && tok->add_bos && tok->bos_id >= 0 && !tok_ids_push(&c.out, tok->bos_id)) {
        rc = VLLMC_ERR_NOMEM;
        goto done;
    }
    size_t seg = 0, pos = 0;
    while (pos < len) {
        const struct tok_added *a =
            tok->n_added ? added_match(tok, text, len, pos, parse_special) : NULL;
        if (!a) {
            pos++;
            continue;
        }
        size_t end = pos;
        if (a->lstrip)
            while (end > seg && is_space_byte(text[end - 1]))
                end--;
        rc = encode_text(&c, text + seg, end - seg, seg == 0);
        if (rc)
            goto done;
        if (!tok_ids_push(&c.out, a->id)) {
            rc = VLLMC_ERR_NOMEM;
            goto done;
        }
        pos += a->len;
        if (a->rstrip)
            while (pos < len && is_space_byte(text[pos]))
                pos++;
        seg = pos;
    }
    rc = encode_text(&c, text + seg, len - seg, seg == 0);
    if (rc)
        goto done;
    if (add_special && tok->add_eos) {
        int32_t id = tok->model == TOK_MODEL_WORDPIECE ? tok->sep_id : tok->eos_id;
        if (id >= 0 && !tok_ids_push(&c.out, id))
            rc = VLLMC_ERR_NOMEM;
    }
done:
    bpe_scratch_free(c.bpe);
    mem_free(c.norm.ptr);
    mem_free(c.pieces.ptr);
    if (rc) {
        mem_free(c.out.ptr);
        return rc;
    }
    if (!c.out.ptr && !(c.out.ptr = mem_alloc(sizeof(int32_t))))
        return VLLMC_ERR_NOMEM;
    *ids = c.out.ptr;
    *n_ids = c.out.len;
    return VLLMC_OK;
}

// ---- decoding ----

// clean_up_tokenization of transformers: drops the space tokenizers put before punctuation
// and English contractions.
static void cleanup_spaces(struct tok_bytes *b)
{
    static const char *const from[] = {" .",   " ?",  " !",  " ,",   " ' ",
                                       " n't", " 'm", " 's", " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    for (size_t k = 0; k < sizeof(from) / sizeof(from[0]); k++) {
        size_t nf = strlen(from[k]), nt = strlen(to[k]), w = 0;
        for (size_t r = 0; r < b->len;) {
            if (r + nf <= b->len && !memcmp(b->ptr + r, from[k], nf)) {
                memmove(b->ptr + w, to[k], nt);
                w += nt;
                r += nf;
            } else {
                b->ptr[w++] = b->ptr[r++];
            }
        }
        b->len = w;
    }
    if (b->ptr)
        b->ptr[b->len] = '\0';
}

enum vllmc_status tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n_ids,
                                   unsigned flags, char **text, size_t *n_bytes)
{
    *text = NULL;
    *n_bytes = 0;
    struct tok_bytes raw = {0}, out = {0};
    bool skip = flags & TOKENIZER_DECODE_SKIP_SPECIAL;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= tok->n_vocab) {
            mem_free(raw.ptr);
            return VLLMC_ERR_INVALID_ARG;
        }
        if (skip && tokenizer_is_special(tok, ids[i]))
            continue;
        const struct tok_token *t = &tok->tokens[ids[i]];
        if (!tok_bytes_append(&raw, tok->piece_pool + t->piece_off, t->piece_len)) {
            mem_free(raw.ptr);
            return VLLMC_ERR_NOMEM;
        }
    }
    size_t start = 0;
    for (int k = 0; k < tok->strip_leading && start < raw.len && raw.ptr[start] == ' '; k++)
        start++;
    bool ok = unicode_utf8_append_sanitized(&out, raw.ptr ? raw.ptr + start : "", raw.len - start);
    mem_free(raw.ptr);
    if (!ok) {
        mem_free(out.ptr);
        return VLLMC_ERR_NOMEM;
    }
    if (flags & TOKENIZER_DECODE_CLEANUP)
        cleanup_spaces(&out);
    *text = out.ptr;
    *n_bytes = out.len;
    return VLLMC_OK;
}

// ---- queries ----

const char *tokenizer_token_text(const struct tokenizer *tok, int32_t id, size_t *n_bytes)
{
    if (id < 0 || id >= tok->n_vocab)
        return NULL;
    if (n_bytes)
        *n_bytes = tok->tokens[id].text_len;
    return tok_text(tok, id);
}

const char *tokenizer_token_piece(const struct tokenizer *tok, int32_t id, size_t *n_bytes)
{
    if (id < 0 || id >= tok->n_vocab)
        return NULL;
    if (n_bytes)
        *n_bytes = tok->tokens[id].piece_len;
    return tok->piece_pool + tok->tokens[id].piece_off;
}

int32_t tokenizer_token_id(const struct tokenizer *tok, const char *text, size_t len)
{
    return strmap_get(&tok->by_text, text, len);
}

int32_t tokenizer_n_vocab(const struct tokenizer *tok)
{
    return tok->n_vocab;
}
int32_t tokenizer_bos_id(const struct tokenizer *tok)
{
    return tok->bos_id;
}
int32_t tokenizer_eos_id(const struct tokenizer *tok)
{
    return tok->eos_id;
}
int32_t tokenizer_pad_id(const struct tokenizer *tok)
{
    return tok->pad_id;
}
int32_t tokenizer_unk_id(const struct tokenizer *tok)
{
    return tok->unk_id;
}
bool tokenizer_add_bos(const struct tokenizer *tok)
{
    return tok->add_bos && tok->bos_id >= 0;
}

bool tokenizer_add_eos(const struct tokenizer *tok)
{
    return tok->add_eos && (tok->model == TOK_MODEL_WORDPIECE ? tok->sep_id : tok->eos_id) >= 0;
}

bool tokenizer_is_special(const struct tokenizer *tok, int32_t id)
{
    if (id < 0 || id >= tok->n_vocab)
        return false;
    uint8_t t = tok->tokens[id].type;
    return t == TOKENIZER_TOKEN_CONTROL || t == TOKENIZER_TOKEN_UNKNOWN;
}

bool tokenizer_is_eog(const struct tokenizer *tok, int32_t id)
{
    return id >= 0 && id < tok->n_vocab && tok->tokens[id].eog;
}

const char *tokenizer_chat_template(const struct tokenizer *tok, const char *name)
{
    if (!name)
        name = "default";
    for (size_t i = 0; i < tok->n_templates; i++)
        if (!strcmp(tok->templates[i].name, name))
            return tok->templates[i].text;
    return NULL;
}

const char *tokenizer_special_text(const struct tokenizer *tok, const char *which)
{
    static const char *const names[4] = {"bos", "eos", "pad", "unk"};
    const int32_t ids[4] = {tok->bos_id, tok->eos_id, tok->pad_id, tok->unk_id};
    for (int i = 0; i < 4; i++) {
        if (strcmp(which, names[i]))
            continue;
        if (tok->special_text[i])
            return tok->special_text[i];
        return ids[i] >= 0 ? tok_text(tok, ids[i]) : NULL;
    }
    return NULL;
}
