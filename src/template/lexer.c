// Template lexer: splits source into data and tag tokens the way jinja2's
// lexer does with trim_blocks and lstrip_blocks on (transformers' settings),
// including `-`/`+` whitespace control, comments and raw blocks.
#include "template/internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

struct lexer {
    struct jinja_template *t;
    const char *src;
    size_t n;
    size_t pos;
    struct token_list *out;
    struct err *e;
    // line/column cursor: offsets only move forward
    size_t cur_off;
    int cur_line, cur_col;
    char balance[256]; // expected closing brackets inside a tag
    size_t n_balance;
};

static void lexer_where(struct lexer *lx, size_t off, int *line, int *col)
{
    if (off < lx->cur_off) {
        lx->cur_off = 0;
        lx->cur_line = 1;
        lx->cur_col = 1;
    }
    while (lx->cur_off < off && lx->cur_off < lx->n) {
        if (lx->src[lx->cur_off] == '\n') {
            lx->cur_line++;
            lx->cur_col = 1;
        } else if (((unsigned char)lx->src[lx->cur_off] & 0xC0) != 0x80) {
            lx->cur_col++;
        }
        lx->cur_off++;
    }
    *line = lx->cur_line;
    *col = lx->cur_col;
}

static enum vllmc_status lexer_fail_code(struct lexer *lx, size_t off, enum vllmc_status code,
                                         const char *msg)
{
    int line, col;
    lexer_where(lx, off, &line, &col);
    return err_set(lx->e, code, "%s:%d:%d: %s", lx->t->name, line, col, msg);
}

static enum vllmc_status lexer_fail(struct lexer *lx, size_t off, const char *msg)
{
    return lexer_fail_code(lx, off, VLLMC_ERR_TEMPLATE, msg);
}

static struct token *lexer_push(struct lexer *lx, enum tok_kind kind, size_t off, const char *p,
                                size_t n)
{
    struct token_list *l = lx->out;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        struct token *v = mem_realloc(l->v, cap * sizeof *v);
        if (!v)
            return NULL;
        l->v = v;
        l->cap = cap;
    }
    struct token *tk = &l->v[l->n++];
    memset(tk, 0, sizeof *tk);
    tk->kind = kind;
    tk->p = p;
    tk->n = n;
    lexer_where(lx, off, &tk->line, &tk->col);
    return tk;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static bool starts(const struct lexer *lx, size_t at, const char *s)
{
    size_t k = strlen(s);
    return at + k <= lx->n && !memcmp(lx->src + at, s, k);
}

// Pushes the data before a tag, applying the tag's whitespace control.
static enum vllmc_status lexer_data(struct lexer *lx, size_t start, size_t end, char sign,
                                    bool lstrip_ok, bool line_starting, bool raw)
{
    const char *p = lx->src + start;
    size_t n = end - start;
    if (sign == '-') {
        while (n && is_space(p[n - 1]))
            n--;
    } else if (sign != '+' && lstrip_ok) {
        size_t l_pos = n;
        while (l_pos && p[l_pos - 1] != '\n')
            l_pos--;
        if (l_pos > 0 || line_starting) {
            bool all_ws = l_pos < n;
            for (size_t i = l_pos; i < n; i++)
                if (!is_space(p[i]))
                    all_ws = false;
            if (all_ws)
                n = l_pos;
        }
    }
    if (!n)
        return VLLMC_OK;
    struct token *tk = lexer_push(lx, TOK_DATA, start, p, n);
    if (!tk)
        return err_set(lx->e, VLLMC_ERR_NOMEM, "template: out of memory");
    tk->raw = raw;
    return VLLMC_OK;
}

// Skips `\s*` after a `-` end marker, or one newline after a plain block end.
static size_t lexer_after_end(const struct lexer *lx, size_t at, char sign, bool trim)
{
    if (sign == '-') {
        while (at < lx->n && is_space(lx->src[at]))
            at++;
    } else if (sign == 0 && trim && at < lx->n && lx->src[at] == '\n') {
        at++;
    }
    return at;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

// Decodes a string literal body with Python's unicode-escape rules.
static enum vllmc_status lexer_string(struct lexer *lx, size_t start, size_t end)
{
    struct sbuf b;
    sbuf_init(&b);
    for (size_t i = start; i < end; i++) {
        char c = lx->src[i];
        if (c != '\\' || i + 1 >= end) {
            sbuf_putc(&b, c);
            continue;
        }
        char d = lx->src[++i];
        int ndig = 0;
        switch (d) {
        case '\n':
            break;
        case '\\':
        case '\'':
        case '"':
            sbuf_putc(&b, d);
            break;
        case 'n':
            sbuf_putc(&b, '\n');
            break;
        case 't':
            sbuf_putc(&b, '\t');
            break;
        case 'r':
            sbuf_putc(&b, '\r');
            break;
        case 'a':
            sbuf_putc(&b, '\a');
            break;
        case 'b':
            sbuf_putc(&b, '\b');
            break;
        case 'f':
            sbuf_putc(&b, '\f');
            break;
        case 'v':
            sbuf_putc(&b, '\v');
            break;
        case 'x':
            ndig = 2;
            break;
        case 'u':
            ndig = 4;
            break;
        case 'U':
            ndig = 8;
            break;
        case 'N':
            sbuf_free(&b);
            return lexer_fail_code(lx, i, VLLMC_ERR_UNSUPPORTED,
                                   "unsupported: \\N{...} escape in a string literal");
        default:
            if (d >= '0' && d <= '7') {
                int v = 0, k = 0;
                while (k < 3 && i < end && lx->src[i] >= '0' && lx->src[i] <= '7') {
                    v = v * 8 + (lx->src[i] - '0');
                    i++;
                    k++;
                }
                i--;
                jv_utf8_put(&b, v);
            } else {
                // Unknown escapes stay as written, backslash included.
                sbuf_putc(&b, '\\');
                sbuf_putc(&b, d);
            }
            break;
        }
        if (ndig) {
            int32_t v = 0;
            for (int k = 0; k < ndig; k++) {
                int h = i + 1 + (size_t)k < end ? hexval(lx->src[i + 1 + (size_t)k]) : -1;
                if (h < 0) {
                    sbuf_free(&b);
                    return lexer_fail(lx, i, "truncated \\xXX escape in a string literal");
                }
                v = v * 16 + h;
            }
            i += (size_t)ndig;
            if (v > 0x10FFFF || (v >= 0xD800 && v < 0xE000)) {
                sbuf_free(&b);
                return lexer_fail(lx, i, "illegal Unicode character in a string literal");
            }
            jv_utf8_put(&b, v);
        }
    }
    if (b.oom) {
        sbuf_free(&b);
        return err_set(lx->e, VLLMC_ERR_NOMEM, "template: out of memory");
    }
    char *s = tpl_alloc(lx->t, b.len + 1);
    if (!s) {
        sbuf_free(&b);
        return err_set(lx->e, VLLMC_ERR_NOMEM, "template: out of memory");
    }
    if (b.len)
        memcpy(s, b.p, b.len);
    struct token *tk = lexer_push(lx, TOK_STRING, start - 1, s, b.len);
    sbuf_free(&b);
    return tk ? VLLMC_OK : err_set(lx->e, VLLMC_ERR_NOMEM, "template: out of memory");
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

// Digits with single underscores between them, as Python literals allow.
static size_t scan_digits(const struct lexer *lx, size_t at, int base)
{
    size_t i = at;
    while (i < lx->n) {
        char c = lx->src[i];
        int v = hexval(c);
        if (c == '_' && i > at && i + 1 < lx->n && hexval(lx->src[i + 1]) >= 0 &&
            hexval(lx->src[i + 1]) < base) {
            i++;
            continue;
        }
        if (v < 0 || v >= base)
            break;
        i++;
    }
    return i;
}

static enum vllmc_status lexer_number(struct lexer *lx, size_t *pos)
{
    size_t s = *pos, i = scan_digits(lx, s, 10);
    bool is_float = false;
    size_t j = i;
    if (j + 1 < lx->n && lx->src[j] == '.' && is_digit(lx->src[j + 1])) {
        j = scan_digits(lx, j + 1, 10);
        is_float = true;
    }
    if (j < lx->n && (lx->src[j] == 'e' || lx->src[j] == 'E')) {
        size_t k = j + 1;
        if (k < lx->n && (lx->src[k] == '+' || lx->src[k] == '-'))
            k++;
        if (k < lx->n && is_digit(lx->src[k])) {
            j = scan_digits(lx, k, 10);
            is_float = true;
        }
    }
    char buf[128];
    size_t nb = 0;
    if (is_float) {
        for (size_t k = s; k < j && nb + 1 < sizeof buf; k++)
            if (lx->src[k] != '_')
                buf[nb++] = lx->src[k];
        buf[nb] = 0;
        struct token *tk = lexer_push(lx, TOK_FLOAT, s, lx->src + s, j - s);
        if (!tk)
            return err_set(lx->e, VLLMC_ERR_NOMEM, "template: out of memory");
        tk->f = strtod(buf, NULL);
        *pos = j;
        return VLLMC_OK;
    }
    int base = 10;
    size_t ds = s;
    if (lx->src[s] == '0' && s + 1 < lx->n) {
        char x = lx->src[s + 1];
        base = (x == 'x' || x == 'X')   ? 16
               : (x == 'o' || x == 'O') ? 8
               : (x == 'b' || x == 'B') ? 2
                                        : 10;
        if (base != 10) {
            ds = s + 2;
            if (ds < lx->n && lx->src[ds] == '_')
                ds++;
            i = scan_digits(lx, ds, base);
            if (i == ds)
                return lexer_fail(lx, s, "invalid integer literal");
        }
    }
    uint64_t v = 0;
    for (size_t k = ds; k < i; k++) {
        if (lx->src[k] == '_')
            continue;
        uint64_t d = (uint64_t)hexval(lx->src[k]);
        if (v > (UINT64_MAX - d) / (uint64_t)base || v * (uint64_t)base + d > (uint64_t)INT64_MAX)
            return lexer_fail_code(lx, s, VLLMC_ERR_UNSUPPORTED,
                                   "unsupported: integer literal too large");
        v = v * (uint64_t)base + d;
    }
    struct token *tk = lexer_push(lx, TOK_INT, s, lx->src + s, i - s);
    if (!tk)
        return err_set(lx->e, VLLMC_ERR_NOMEM, "template: out of memory");
    tk->i = (int64_t)v;
    *pos = i;
    return VLLMC_OK;
}

static const char *const lexer_ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                        "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                        ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};

// Tokens inside {{ }} or {% %} up to the end marker. Returns the position
// after the end marker (and after whitespace control), or 0 on error.
static enum vllmc_status lexer_tag(struct lexer *lx, bool block, bool *line_starting)
{
    lx->n_balance = 0;
    for (;;) {
        size_t i = lx->pos;
        if (i >= lx->n)
            return lexer_fail(lx, i,
                              block ? "unexpected end of template, expected '%}'"
                                    : "unexpected end of template, expected '}}'");
        if (lx->n_balance == 0) {
            char sign = 0;
            size_t at = i;
            if (lx->src[at] == '-' || (block && lx->src[at] == '+')) {
                sign = lx->src[at];
                at++;
            }
            if (starts(lx, at, block ? "%}" : "}}")) {
                size_t end = lexer_after_end(lx, at + 2, sign, block);
                if (!lexer_push(lx, block ? TOK_BLOCK_END : TOK_VAR_END, i, NULL, 0))
                    return err_set(lx->e, VLLMC_ERR_NOMEM, "template: out of memory");
                *line_starting = end > 0 && lx->src[end - 1] == '\n';
                lx->pos = end;
                return VLLMC_OK;
            }
        }
        char c = lx->src[i];
        if (is_space(c)) {
            lx->pos++;
            continue;
        }
        if (is_digit(c)) {
            enum vllmc_status rc = lexer_number(lx, &lx->pos);
            if (rc)
                return rc;
            continue;
        }
        if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            size_t j = i;
            while (j < lx->n && (lx->src[j] == '_' || is_digit(lx->src[j]) ||
                                 (lx->src[j] >= 'a' && lx->src[j] <= 'z') ||
                                 (lx->src[j] >= 'A' && lx->src[j] <= 'Z')))
                j++;
            if (j < lx->n && (unsigned char)lx->src[j] >= 0x80)
                return lexer_fail_code(lx, j, VLLMC_ERR_UNSUPPORTED,
                                       "unsupported: non-ASCII identifier");
            if (!lexer_push(lx, TOK_NAME, i, lx->src + i, j - i))
                return err_set(lx->e, VLLMC_ERR_NOMEM, "template: out of memory");
            lx->pos = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < lx->n && lx->src[j] != c) {
                if (lx->src[j] == '\\')
                    j++;
                j++;
            }
            if (j >= lx->n)
                return lexer_fail(lx, i, "unterminated string literal");
            enum vllmc_status rc = lexer_string(lx, i + 1, j);
            if (rc)
                return rc;
            lx->pos = j + 1;
            continue;
        }
        const char *op = NULL;
        for (size_t k = 0; k < sizeof lexer_ops / sizeof lexer_ops[0]; k++) {
            if (starts(lx, i, lexer_ops[k])) {
                op = lexer_ops[k];
                break;
            }
        }
        if (!op)
            return lexer_fail(lx, i, "unexpected character in tag");
        size_t k = strlen(op);
        if (k == 1 && (c == '(' || c == '[' || c == '{')) {
            if (lx->n_balance == sizeof lx->balance)
                return lexer_fail_code(lx, i, VLLMC_ERR_CAPACITY, "brackets nested too deeply");
            lx->balance[lx->n_balance++] = c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (k == 1 && (c == ')' || c == ']' || c == '}')) {
            if (!lx->n_balance)
                return lexer_fail(lx, i, "unexpected closing bracket");
            if (lx->balance[--lx->n_balance] != c)
                return lexer_fail(lx, i, "mismatched closing bracket");
        }
        if (!lexer_push(lx, TOK_OP, i, lx->src + i, k))
            return err_set(lx->e, VLLMC_ERR_NOMEM, "template: out of memory");
        lx->pos = i + k;
    }
}

// `{%[-+]? raw [-]?%}` at lx->pos? Sets *end past it.
static bool lexer_is_tag_word(const struct lexer *lx, size_t at, const char *word, size_t *end,
                              char *close_sign, bool allow_plus_close)
{
    at += 2;
    if (at < lx->n && (lx->src[at] == '-' || lx->src[at] == '+'))
        at++;
    while (at < lx->n && is_space(lx->src[at]))
        at++;
    size_t k = strlen(word);
    if (!starts(lx, at, word))
        return false;
    at += k;
    if (at < lx->n && !is_space(lx->src[at]) && lx->src[at] != '-' && lx->src[at] != '+' &&
        lx->src[at] != '%')
        return false;
    while (at < lx->n && is_space(lx->src[at]))
        at++;
    *close_sign = 0;
    if (at < lx->n && (lx->src[at] == '-' || (allow_plus_close && lx->src[at] == '+'))) {
        *close_sign = lx->src[at];
        at++;
    }
    if (!starts(lx, at, "%}"))
        return false;
    *end = at + 2;
    return true;
}

enum vllmc_status lexer_run(struct jinja_template *t, const char *src, size_t n,
                            struct token_list *out, struct err *e)
{
    struct lexer lx = {.t = t, .src = src, .n = n, .out = out, .e = e, .cur_line = 1, .cur_col = 1};
    bool line_starting = true;
    while (lx.pos < n) {
        // Find the next tag start.
        size_t i = lx.pos;
        const char *hit = NULL;
        while (i + 1 < n) {
            hit = memchr(src + i, '{', n - 1 - i);
            if (!hit)
                break;
            i = (size_t)(hit - src);
            char d = src[i + 1];
            if (d == '{' || d == '%' || d == '#')
                break;
            i++;
            hit = NULL;
        }
        if (!hit) {
            enum vllmc_status rc = lexer_data(&lx, lx.pos, n, 0, false, false, false);
            if (rc)
                return rc;
            break;
        }
        char kind = src[i + 1];
        char sign = 0;
        if (i + 2 < n && (src[i + 2] == '-' || src[i + 2] == '+'))
            sign = src[i + 2];
        size_t raw_end;
        char raw_close;
        if (kind == '%' && lexer_is_tag_word(&lx, i, "raw", &raw_end, &raw_close, false)) {
            enum vllmc_status rc = lexer_data(&lx, lx.pos, i, sign, true, line_starting, false);
            if (rc)
                return rc;
            size_t body = lexer_after_end(&lx, raw_end, raw_close, false);
            // The raw body runs to the first `{% endraw %}`.
            size_t j = body;
            for (;;) {
                const char *q = j < n ? memchr(src + j, '{', n - j) : NULL;
                if (!q)
                    return lexer_fail(&lx, i, "missing end of raw directive");
                j = (size_t)(q - src);
                size_t end;
                char close;
                if (j + 1 < n && src[j + 1] == '%' &&
                    lexer_is_tag_word(&lx, j, "endraw", &end, &close, true)) {
                    char s2 =
                        (j + 2 < n && (src[j + 2] == '-' || src[j + 2] == '+')) ? src[j + 2] : 0;
                    rc =
                        lexer_data(&lx, body, j, s2, true, body > 0 && src[body - 1] == '\n', true);
                    if (rc)
                        return rc;
                    lx.pos = lexer_after_end(&lx, end, close, true);
                    line_starting = lx.pos > 0 && src[lx.pos - 1] == '\n';
                    break;
                }
                j++;
            }
            continue;
        }
        enum vllmc_status rc = lexer_data(&lx, lx.pos, i, sign, kind != '{', line_starting, false);
        if (rc)
            return rc;
        size_t body = i + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t j = body;
            for (;;) {
                if (j + 1 >= n)
                    return lexer_fail(&lx, i, "missing end of comment tag");
                if (src[j] == '#' && src[j + 1] == '}') {
                    lx.pos = lexer_after_end(&lx, j + 2, 0, true);
                    break;
                }
                if ((src[j] == '+' || src[j] == '-') && j + 2 < n && src[j + 1] == '#' &&
                    src[j + 2] == '}') {
                    lx.pos = lexer_after_end(&lx, j + 3, src[j], true);
                    break;
                }
                j++;
            }
            line_starting = lx.pos > 0 && src[lx.pos - 1] == '\n';
            continue;
        }
        if (!lexer_push(&lx, kind == '%' ? TOK_BLOCK_BEGIN : TOK_VAR_BEGIN, i, NULL, 0))
            return err_set(e, VLLMC_ERR_NOMEM, "template: out of memory");
        lx.pos = body;
        rc = lexer_tag(&lx, kind == '%', &line_starting);
        if (rc)
            return rc;
    }
    if (!lexer_push(&lx, TOK_EOF, n, NULL, 0))
        return err_set(e, VLLMC_ERR_NOMEM, "template: out of memory");
    return VLLMC_OK;
}
