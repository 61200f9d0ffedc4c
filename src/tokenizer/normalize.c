// Normalisers applied to text segments before pre-tokenization, in the order the tokenizer
// file lists them: Unicode forms and case through utf8proc, BERT's clean-up, SentencePiece's
// space escaping (Prepend / Replace). Bytes that are not valid UTF-8 pass through unchanged.
#include <string.h>
#include <utf8proc.h>

#include "core/alloc.h"
#include "tokenizer/tokenizer_impl.h"

void normalizer_deinit(struct normalizer *n)
{
    for (size_t i = 0; i < n->n_steps; i++) {
        mem_free(n->steps[i].str);
        mem_free(n->steps[i].pattern);
    }
    mem_free(n->steps);
    memset(n, 0, sizeof(*n));
}

bool normalizer_add(struct normalizer *n, enum norm_kind kind, const char *str, const char *pattern,
                    int a, int b)
{
    struct norm_step *steps = mem_realloc(n->steps, (n->n_steps + 1) * sizeof(*steps));
    if (!steps)
        return false;
    n->steps = steps;
    struct norm_step *s = &steps[n->n_steps];
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    s->a = a;
    s->b = b;
    if (str && !(s->str = mem_strdup(str)))
        return false;
    if (pattern && !(s->pattern = mem_strdup(pattern))) {
        mem_free(s->str);
        return false;
    }
    n->n_steps++;
    return true;
}

// Unicode White_Space, as Rust's char::is_whitespace.
static bool cp_is_whitespace(int32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

static bool cp_is_other(int32_t c)
{
    utf8proc_category_t cat = utf8proc_category(c);
    return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
           cat == UTF8PROC_CATEGORY_CS || cat == UTF8PROC_CATEGORY_CO ||
           cat == UTF8PROC_CATEGORY_CN;
}

static bool cp_is_chinese(int32_t c)
{
    return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) ||
           (c >= 0x20000 && c <= 0x2a6df) || (c >= 0x2a700 && c <= 0x2b73f) ||
           (c >= 0x2b740 && c <= 0x2b81f) || (c >= 0x2b920 && c <= 0x2ceaf) ||
           (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
}

static bool is_ascii(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((uint8_t)p[i] >= 0x80)
            return false;
    return true;
}

// One of the four Unicode normal forms; text that utf8proc rejects is kept as it is.
static bool norm_form(const char *in, size_t len, utf8proc_option_t opts, struct tok_bytes *out)
{
    out->len = 0;
    if (is_ascii(in, len))
        return tok_bytes_append(out, in, len);
    opts |= UTF8PROC_STABLE;
    const utf8proc_uint8_t *s = (const utf8proc_uint8_t *)in;
    utf8proc_ssize_t need = utf8proc_decompose(s, (utf8proc_ssize_t)len, NULL, 0, opts);
    if (need < 0)
        return tok_bytes_append(out, in, len);
    // reencode writes UTF-8 over the code point buffer, which is always large enough.
    utf8proc_int32_t *buf = mem_alloc(((size_t)need + 1) * sizeof(*buf));
    if (!buf)
        return false;
    utf8proc_ssize_t got = utf8proc_decompose(s, (utf8proc_ssize_t)len, buf, need, opts);
    bool ok;
    if (got < 0 || got > need) {
        ok = tok_bytes_append(out, in, len);
    } else {
        utf8proc_ssize_t n_bytes = utf8proc_reencode(buf, got, opts);
        ok = n_bytes < 0 ? tok_bytes_append(out, in, len)
                         : tok_bytes_append(out, buf, (size_t)n_bytes);
    }
    mem_free(buf);
    return ok;
}

// Code points that are NFC as they stand and never combine with the character before them:
// NFC leaves a run of them as it is, and a text can be normalised piecewise between them.
static bool cp_nfc_inert(int32_t c)
{
    return c < 0x300 || (c >= 0x3400 && c <= 0x4dbf) || (c >= 0x4e00 && c <= 0x9fff) ||
           (c >= 0xac00 && c <= 0xd7a3) || (c >= 0x1f300 && c <= 0x1faff);
}

// NFC that hands utf8proc only the stretches that can change: each run of other code points,
// together with the character before it (which may compose with the run's first).
static bool norm_nfc(const char *in, size_t len, struct tok_bytes *out)
{
    struct tok_bytes tmp = {0};
    out->len = 0;
    size_t i = 0, prev = 0; // prev: start of the last inert character copied
    bool ok = tok_bytes_reserve(out, len + 1);
    while (ok && i < len) {
        int32_t cp;
        size_t k = unicode_utf8_decode(in + i, len - i, &cp);
        if (cp >= 0 && cp_nfc_inert(cp)) {
            prev = i;
            ok = tok_bytes_append(out, in + i, k);
            i += k;
            continue;
        }
        // Take back the character before the run, then normalise it with the run.
        size_t start = i;
        if (i > 0 && out->len >= i - prev) {
            out->len -= i - prev;
            start = prev;
        }
        size_t end = i + k;
        while (end < len) {
            size_t m = unicode_utf8_decode(in + end, len - end, &cp);
            if (cp >= 0 && cp_nfc_inert(cp))
                break;
            end += m;
        }
        ok = norm_form(in + start, end - start, UTF8PROC_COMPOSE, &tmp) &&
             tok_bytes_append(out, tmp.ptr, tmp.len);
        i = prev = end;
    }
    mem_free(tmp.ptr);
    return ok;
}

// Code point by code point rewriting (case, accents, BERT clean-up).
static bool norm_per_cp(const char *in, size_t len, enum norm_kind kind, struct tok_bytes *out)
{
    out->len = 0;
    if (!tok_bytes_reserve(out, len + 1))
        return false;
    for (size_t i = 0; i < len;) {
        int32_t cp;
        size_t k = unicode_utf8_decode(in + i, len - i, &cp);
        const char *src = in + i;
        i += k;
        if (cp < 0) {
            if (!tok_bytes_append(out, src, k))
                return false;
            continue;
        }
        char buf[4];
        size_t nb;
        switch (kind) {
        case NORM_LOWERCASE:
            nb = unicode_utf8_encode(
                cp < 0x80 ? (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp) : utf8proc_tolower(cp), buf);
            break;
        case NORM_STRIP_ACCENTS:
            if (cp >= 0x80 && utf8proc_category(cp) == UTF8PROC_CATEGORY_MN)
                continue;
            nb = unicode_utf8_encode(cp, buf);
            break;
        case NORM_BERT_CLEAN:
            if (cp == 0 || cp == 0xfffd ||
                (cp != '\t' && cp != '\n' && cp != '\r' && cp_is_other(cp)))
                continue;
            nb = unicode_utf8_encode(cp_is_whitespace(cp) ? ' ' : cp, buf);
            break;
        case NORM_BERT_CHINESE:
            if (cp_is_chinese(cp)) {
                char tmp[6] = {' '};
                size_t m = unicode_utf8_encode(cp, tmp + 1);
                tmp[m + 1] = ' ';
                if (!tok_bytes_append(out, tmp, m + 2))
                    return false;
                continue;
            }
            nb = unicode_utf8_encode(cp, buf);
            break;
        default:
            nb = unicode_utf8_encode(cp, buf);
            break;
        }
        if (!tok_bytes_append(out, buf, nb))
            return false;
    }
    return true;
}

static bool norm_replace(const char *in, size_t len, const char *pat, const char *with,
                         struct tok_bytes *out)
{
    out->len = 0;
    size_t n_pat = strlen(pat), n_with = strlen(with);
    if (!tok_bytes_reserve(out, len + 1))
        return false;
    if (!n_pat)
        return tok_bytes_append(out, in, len);
    size_t i = 0, run = 0;
    while (i + n_pat <= len) {
        if (in[i] == pat[0] && !memcmp(in + i, pat, n_pat)) {
            if (!tok_bytes_append(out, in + run, i - run) || !tok_bytes_append(out, with, n_with))
                return false;
            i += n_pat;
            run = i;
        } else {
            i++;
        }
    }
    return tok_bytes_append(out, in + run, len - run);
}

static bool norm_step_run(const struct norm_step *s, const char *in, size_t len,
                          struct tok_bytes *out)
{
    switch (s->kind) {
    case NORM_NFC:
        return norm_nfc(in, len, out);
    case NORM_NFKC:
        return norm_form(in, len, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, out);
    case NORM_NFD:
        return norm_form(in, len, UTF8PROC_DECOMPOSE, out);
    case NORM_NFKD:
        return norm_form(in, len, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, out);
    case NORM_PREPEND:
        out->len = 0;
        if (!len)
            return tok_bytes_append(out, "", 0);
        return tok_bytes_append(out, s->str, strlen(s->str)) && tok_bytes_append(out, in, len);
    case NORM_REPLACE:
        return norm_replace(in, len, s->pattern, s->str, out);
    case NORM_STRIP: {
        size_t a = 0, b = len;
        while (s->a && a < b) {
            int32_t cp;
            size_t k = unicode_utf8_decode(in + a, b - a, &cp);
            if (!cp_is_whitespace(cp))
                break;
            a += k;
        }
        while (s->b && b > a) {
            size_t k = 1;
            while (k < b - a && k < 4 && ((uint8_t)in[b - k] & 0xc0) == 0x80)
                k++;
            int32_t cp;
            unicode_utf8_decode(in + b - k, k, &cp);
            if (!cp_is_whitespace(cp))
                break;
            b -= k;
        }
        out->len = 0;
        return tok_bytes_append(out, in + a, b - a);
    }
    default:
        return norm_per_cp(in, len, s->kind, out);
    }
}

bool normalizer_run(const struct normalizer *n, const char *in, size_t len, struct tok_bytes *out)
{
    out->len = 0;
    if (!n->n_steps)
        return tok_bytes_append(out, in, len);
    struct tok_bytes tmp = {0};
    bool ok = tok_bytes_append(out, in, len);
    for (size_t i = 0; ok && i < n->n_steps; i++) {
        ok = norm_step_run(&n->steps[i], out->ptr, out->len, &tmp);
        struct tok_bytes swap = *out;
        *out = tmp;
        tmp = swap;
    }
    mem_free(tmp.ptr);
    return ok;
}
