// Pre-tokenizer: splits a normalised text segment into the pieces BPE runs on, with the
// regexes Hugging Face tokenizer.json files and llama.cpp's tokenizer.ggml.pre names carry,
// compiled by PCRE2 (UTF, Unicode properties, JIT) and applied as a sequence: each step
// splits every piece the previous step produced, with the Split behaviours of `tokenizers`.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/tokenizer_impl.h"

// ---- the regex sets of llama.cpp's tokenizer.ggml.pre names ----
// Where llama.cpp rewrote a Hugging Face regex for its own engine, the original is used:
// PCRE2 runs it as written.

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                     \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                   \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "                          \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN35                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "                  \
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_CJK_DEEPSEEK "[一-龥ࠀ-一가-퟿]+"
#define RE_TEKKEN                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"   \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"   \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O                                                                                   \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"    \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"    \
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "                    \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_DEEPSEEK3                                                                               \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}"    \
    "\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_PORO " ?[^(\\s|.,!?…。，、।۔،)]+"

struct named_regexes {
    const char *names; // space-separated tokenizer.ggml.pre values
    const char *re[6]; // applied in order; NULL ends the list
};

static const struct named_regexes named_table[] = {
    {"gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert "
     "jina-v1-en jina-v2-code roberta-bpe mpt olmo jais trillion granite-docling gpt2",
     {RE_GPT2}},
    {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano dbrx "
     "smaug-bpe glm4 chatglm-bpe",
     {RE_LLAMA3}},
    {"qwen2 deepseek-r1-qwen kormo f2llmv2 stablelm2 hunyuan solar-open grok-2", {RE_QWEN2}},
    {"qwen35", {RE_QWEN35}},
    {"deepseek-llm",
     {"[\r\n]",
      "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-"
      "ᴫᵫ-ᵷᵹ-ᶚḀ-"
      "ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\\x{1f7d}ᾀ-ᾴᾶ-ᾼ\\x{1fbe}ῂ-ῄῆ-ῌῐ-\\x{1fd3}ῖ-\\x{1fdb}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-"
      "ℝℤ\\x{2126}ℨ\\x{212a}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳ"
      "Ꙁ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-"
      "𑣟𞤀-𞥃]+",
      "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", RE_CJK_DEEPSEEK, "\\p{N}+"}},
    {"deepseek-coder", {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK_DEEPSEEK, "\\p{N}"}},
    {"deepseek-v3 hunyuan-dense joyai-llm",
     {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", RE_DEEPSEEK3}},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}},
    {"starcoder refact command-r smollm codeshell exaone minerva", {"\\p{N}", RE_GPT2}},
    {"poro-chat bloom gpt3-finnish", {RE_PORO}},
    {"viking", {RE_PORO, "\\p{N}"}},
    {"tekken", {RE_TEKKEN}},
    {"gpt-4o minimax-m2 llama4", {RE_GPT4O}},
    {"seed-coder",
     {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| "
      "?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"bailingmoe bailingmoe2",
     {"'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| "
      "?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}},
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
};

// ---- PCRE2 memory goes through the allocation funnel ----

static void *pcre_malloc(size_t n, void *data)
{
    (void)data;
    return mem_alloc(n);
}

static void pcre_free(void *p, void *data)
{
    (void)data;
    mem_free(p);
}

void pretokenizer_deinit(struct pretokenizer *p)
{
    for (size_t i = 0; i < p->n_steps; i++)
        pcre2_code_free(p->steps[i].re);
    mem_free(p->steps);
    memset(p, 0, sizeof(*p));
}

static struct pretok_step *step_new(struct pretokenizer *p)
{
    struct pretok_step *steps = mem_realloc(p->steps, (p->n_steps + 1) * sizeof(*steps));
    if (!steps)
        return NULL;
    p->steps = steps;
    struct pretok_step *s = &steps[p->n_steps];
    memset(s, 0, sizeof(*s));
    return s;
}

static enum vllmc_status regex_compile(const char *pattern, size_t len, bool is_literal,
                                       pcre2_code **out, struct err *err)
{
    *out = NULL;
    pcre2_general_context *gc = pcre2_general_context_create(pcre_malloc, pcre_free, NULL);
    if (!gc)
        return err_set(err, VLLMC_ERR_NOMEM, "tokenizer: out of memory compiling a regex");
    pcre2_compile_context *cc = pcre2_compile_context_create(gc);
    if (!cc) {
        pcre2_general_context_free(gc);
        return err_set(err, VLLMC_ERR_NOMEM, "tokenizer: out of memory compiling a regex");
    }
    // PCRE2_LITERAL refuses PCRE2_UCP, which a literal does not need.
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (is_literal ? PCRE2_LITERAL : PCRE2_UCP);
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &code, &at, cc);
    pcre2_compile_context_free(cc);
    pcre2_general_context_free(gc);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof(msg));
        return err_set(err, code == PCRE2_ERROR_HEAP_FAILED ? VLLMC_ERR_NOMEM : VLLMC_ERR_FORMAT,
                       "tokenizer: bad pre-tokenizer regex at offset %zu: %s", (size_t)at,
                       (const char *)msg);
    }
    // Without JIT (no executable memory) matching still works through the interpreter.
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    *out = re;
    return VLLMC_OK;
}

enum vllmc_status pretokenizer_add_split(struct pretokenizer *p, const char *pattern, size_t len,
                                         bool is_literal, enum split_behavior behavior, bool invert,
                                         struct err *err)
{
    pcre2_code *re;
    enum vllmc_status rc = regex_compile(pattern, len, is_literal, &re, err);
    if (rc)
        return rc;
    struct pretok_step *s = step_new(p);
    if (!s) {
        pcre2_code_free(re);
        return err_set(err, VLLMC_ERR_NOMEM, "tokenizer: out of memory");
    }
    s->kind = PRETOK_SPLIT;
    s->re = re;
    s->behavior = behavior;
    s->invert = invert;
    p->n_steps++;
    return VLLMC_OK;
}

bool pretokenizer_add(struct pretokenizer *p, enum pretok_kind kind, int prepend_scheme, bool split)
{
    struct pretok_step *s = step_new(p);
    if (!s)
        return false;
    s->kind = kind;
    s->prepend_scheme = prepend_scheme;
    s->split = split;
    p->n_steps++;
    return true;
}

enum vllmc_status pretokenizer_add_gpt2(struct pretokenizer *p, struct err *err)
{
    return pretokenizer_add_split(p, RE_GPT2, strlen(RE_GPT2), false, SPLIT_ISOLATED, false, err);
}

static bool name_in_list(const char *list, const char *name, size_t len)
{
    const char *s = list;
    while (*s) {
        const char *e = strchr(s, ' ');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == len && !memcmp(s, name, len))
            return true;
        if (!e)
            break;
        s = e + 1;
    }
    return false;
}

enum vllmc_status pretokenizer_add_named(struct pretokenizer *p, const char *name, size_t len,
                                         struct err *err)
{
    for (size_t i = 0; i < sizeof(named_table) / sizeof(named_table[0]); i++) {
        const struct named_regexes *t = &named_table[i];
        if (!name_in_list(t->names, name, len))
            continue;
        for (size_t k = 0; k < 6 && t->re[k]; k++) {
            enum vllmc_status rc = pretokenizer_add_split(p, t->re[k], strlen(t->re[k]), false,
                                                          SPLIT_ISOLATED, false, err);
            if (rc)
                return rc;
        }
        return VLLMC_OK;
    }
    return err_set(err, VLLMC_ERR_UNSUPPORTED, "tokenizer: unknown pre-tokenizer '%.*s'", (int)len,
                   name);
}

// ---- running ----

static bool pieces_push(struct tok_pieces *v, size_t off, size_t len)
{
    if (!len)
        return true;
    if (v->len == v->cap) {
        size_t n = v->cap ? v->cap * 2 : 64;
        struct tok_piece *q = mem_realloc(v->ptr, n * sizeof(*q));
        if (!q)
            return false;
        v->ptr = q;
        v->cap = n;
    }
    v->ptr[v->len++] = (struct tok_piece){(uint32_t)off, (uint32_t)len};
    return true;
}

// A segment of a piece, and whether the regex matched it.
struct seg {
    size_t a, b;
    bool match;
};

struct segs {
    struct seg *ptr; // owned
    size_t len, cap;
};

static bool segs_push(struct segs *v, size_t a, size_t b, bool match)
{
    if (a == b)
        return true;
    if (v->len == v->cap) {
        size_t n = v->cap ? v->cap * 2 : 64;
        struct seg *q = mem_realloc(v->ptr, n * sizeof(*q));
        if (!q)
            return false;
        v->ptr = q;
        v->cap = n;
    }
    v->ptr[v->len++] = (struct seg){a, b, match};
    return true;
}

// Finds the regex's matches in text[a, b) (as a string of its own, so anchors and lookarounds
// stop at the piece's edges) and records matched and unmatched segments in order.
static enum vllmc_status split_find(const pcre2_code *re, pcre2_match_data *md, const char *text,
                                    size_t a, size_t b, struct segs *segs)
{
    PCRE2_SPTR subject = (PCRE2_SPTR)(text + a);
    size_t n = b - a, pos = 0, last = 0;
    while (pos <= n) {
        int rc = pcre2_match(re, subject, n, pos, 0, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, subject, n, pos, PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return rc == PCRE2_ERROR_NOMEMORY || rc == PCRE2_ERROR_HEAPLIMIT ? VLLMC_ERR_NOMEM
                                                                             : VLLMC_ERR_TOKENIZER;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me < ms) // \K can do this; treat as no progress
            me = ms;
        if (!segs_push(segs, a + last, a + ms, false) || !segs_push(segs, a + ms, a + me, true))
            return VLLMC_ERR_NOMEM;
        last = me;
        if (me == ms) {
            // An empty match: step one character so the search advances.
            if (ms >= n)
                break;
            pos = ms + unicode_utf8_seq_len(text + a + ms, n - ms);
        } else {
            pos = me;
        }
    }
    if (!segs_push(segs, a + last, b, false))
        return VLLMC_ERR_NOMEM;
    return VLLMC_OK;
}

// Turns the segments into pieces as tokenizers' SplitDelimiterBehavior does.
static bool split_apply(const struct segs *segs, enum split_behavior behavior, bool invert,
                        struct tok_pieces *out)
{
    size_t start = out->len; // first piece this call produced
    bool prev_match = false;
    switch (behavior) {
    case SPLIT_REMOVED:
        for (size_t i = 0; i < segs->len; i++)
            if (segs->ptr[i].match == invert &&
                !pieces_push(out, segs->ptr[i].a, segs->ptr[i].b - segs->ptr[i].a))
                return false;
        return true;
    case SPLIT_ISOLATED:
        for (size_t i = 0; i < segs->len; i++)
            if (!pieces_push(out, segs->ptr[i].a, segs->ptr[i].b - segs->ptr[i].a))
                return false;
        return true;
    case SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < segs->len; i++) {
            const struct seg *s = &segs->ptr[i];
            bool m = s->match != invert;
            if (m && !prev_match && out->len > start)
                out->ptr[out->len - 1].len = (uint32_t)(s->b - out->ptr[out->len - 1].off);
            else if (!pieces_push(out, s->a, s->b - s->a))
                return false;
            prev_match = m;
        }
        return true;
    case SPLIT_MERGED_WITH_NEXT: {
        // Walk backwards: a match joins the piece after it.
        size_t n_before = out->len;
        for (size_t i = segs->len; i-- > 0;) {
            const struct seg *s = &segs->ptr[i];
            bool m = s->match != invert;
            if (m && !prev_match && out->len > n_before) {
                struct tok_piece *p = &out->ptr[out->len - 1];
                p->len = (uint32_t)(p->off + p->len - s->a);
                p->off = (uint32_t)s->a;
            } else if (!pieces_push(out, s->a, s->b - s->a)) {
                return false;
            }
            prev_match = m;
        }
        for (size_t i = n_before, j = out->len; i + 1 < j; i++, j--) {
            struct tok_piece t = out->ptr[i];
            out->ptr[i] = out->ptr[j - 1];
            out->ptr[j - 1] = t;
        }
        return true;
    }
    case SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < segs->len; i++) {
            const struct seg *s = &segs->ptr[i];
            bool m = s->match != invert;
            if (m == prev_match && out->len > start)
                out->ptr[out->len - 1].len = (uint32_t)(s->b - out->ptr[out->len - 1].off);
            else if (!pieces_push(out, s->a, s->b - s->a))
                return false;
            prev_match = m;
        }
        return true;
    }
    return true;
}

static const char metaspace[] = "\xe2\x96\x81"; // U+2581

// Metaspace: ' ' -> '▁' and the optional leading '▁'; splits before each '▁' when asked.
static bool metaspace_run(const struct pretok_step *s, struct tok_bytes *text, bool first,
                          struct tok_pieces *pieces)
{
    struct tok_bytes out = {0};
    bool prepend = s->prepend_scheme == 2 || (s->prepend_scheme == 1 && first);
    bool ok = true;
    if (prepend && text->len && !(text->len >= 3 && !memcmp(text->ptr, metaspace, 3)))
        ok = tok_bytes_append(&out, metaspace, 3);
    for (size_t i = 0; ok && i < text->len; i++)
        ok = text->ptr[i] == ' ' ? tok_bytes_append(&out, metaspace, 3)
                                 : tok_bytes_append(&out, text->ptr + i, 1);
    if (!ok) {
        mem_free(out.ptr);
        return false;
    }
    mem_free(text->ptr);
    *text = out;
    pieces->len = 0;
    if (!s->split)
        return pieces_push(pieces, 0, text->len);
    size_t last = 0;
    for (size_t i = 1; i + 3 <= text->len; i++) {
        if (!memcmp(text->ptr + i, metaspace, 3)) {
            if (!pieces_push(pieces, last, i - last))
                return false;
            last = i;
        }
    }
    return pieces_push(pieces, last, text->len - last);
}

enum vllmc_status pretokenizer_run(const struct pretokenizer *p, struct tok_bytes *text, bool first,
                                   struct tok_pieces *pieces)
{
    pieces->len = 0;
    if (!pieces_push(pieces, 0, text->len))
        return VLLMC_ERR_NOMEM;
    pcre2_match_data *md = NULL;
    pcre2_general_context *gc = NULL;
    struct tok_pieces next = {0};
    struct segs segs = {0};
    enum vllmc_status rc = VLLMC_OK;
    for (size_t i = 0; i < p->n_steps && !rc; i++) {
        const struct pretok_step *s = &p->steps[i];
        if (s->kind == PRETOK_PREFIX_SPACE) {
            // Only meaningful before any split; later it would shift piece offsets.
            if (text->len && text->ptr[0] != ' ' && pieces->len == 1) {
                struct tok_bytes t = {0};
                if (!tok_bytes_append(&t, " ", 1) || !tok_bytes_append(&t, text->ptr, text->len)) {
                    mem_free(t.ptr);
                    rc = VLLMC_ERR_NOMEM;
                    break;
                }
                mem_free(text->ptr);
                *text = t;
                pieces->ptr[0].len = (uint32_t)text->len;
            }
            continue;
        }
        if (s->kind == PRETOK_METASPACE) {
            if (!metaspace_run(s, text, first, pieces))
                rc = VLLMC_ERR_NOMEM;
            continue;
        }
        if (!md) {
            gc = pcre2_general_context_create(pcre_malloc, pcre_free, NULL);
            md = gc ? pcre2_match_data_create(1, gc) : NULL;
            if (!md) {
                rc = VLLMC_ERR_NOMEM;
                break;
            }
        }
        next.len = 0;
        for (size_t k = 0; k < pieces->len && !rc; k++) {
            segs.len = 0;
            size_t a = pieces->ptr[k].off, b = a + pieces->ptr[k].len;
            rc = split_find(s->re, md, text->ptr, a, b, &segs);
            if (!rc && !split_apply(&segs, s->behavior, s->invert, &next))
                rc = VLLMC_ERR_NOMEM;
        }
        struct tok_pieces t = *pieces;
        *pieces = next;
        next = t;
    }
    pcre2_match_data_free(md);
    pcre2_general_context_free(gc);
    mem_free(next.ptr);
    mem_free(segs.ptr);
    return rc;
}
