// Python methods templates call on values (str.strip, dict.items, …) and the
// global functions chat templates see: range, namespace, dict,
// raise_exception and strftime_now. Mutating list and dict methods fail as
// they do in transformers' immutable sandbox.
#include "template/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "core/alloc.h"

// Shared with filters.c.
int str_strip(struct render *r, struct jv s, const struct jv *chars, int which, struct jv *out);
int str_case(struct render *r, struct jv s, int mode, struct jv *out);
int str_replace(struct render *r, struct jv s, struct jv old, struct jv new_, int64_t count,
                struct jv *out);
bool py_isspace(int32_t cp);
bool py_isalnum(int32_t cp);
size_t py_splitlines(const char *p, size_t n, size_t i, size_t *line_end);

// ---- character classes ----

bool py_isspace(int32_t cp)
{
    if (cp < 0x80)
        return cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f);
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

bool py_isalnum(int32_t cp)
{
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z');
    utf8proc_category_t c = utf8proc_category(cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

static bool is_cased(int32_t cp)
{
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

// Python str.splitlines boundaries: returns the start of the next line and
// sets *line_end to the end of the line at i (without its break).
size_t py_splitlines(const char *p, size_t n, size_t i, size_t *line_end)
{
    while (i < n) {
        size_t adv;
        int32_t cp = jv_utf8_decode(p + i, n - i, &adv);
        if (cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) ||
            cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
            *line_end = i;
            if (cp == '\r' && i + 1 < n && p[i + 1] == '\n')
                adv = 2;
            return i + adv;
        }
        i += adv;
    }
    *line_end = n;
    return n;
}

// ---- string helpers ----

static bool in_chars(const struct jv_str *chars, int32_t cp)
{
    for (size_t i = 0; i < chars->len;) {
        size_t adv;
        if (jv_utf8_decode(chars->data + i, chars->len - i, &adv) == cp)
            return true;
        i += adv;
    }
    return false;
}

// which: 1 left, 2 right, 3 both.
int str_strip(struct render *r, struct jv s, const struct jv *chars, int which, struct jv *out)
{
    if (chars && chars->kind != JV_NONE && chars->kind != JV_STR)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "strip arg must be None or str");
    const struct jv_str *set = chars && chars->kind == JV_STR ? chars->u.s : NULL;
    const char *p = s.u.s->data;
    size_t a = 0, b = s.u.s->len;
    while ((which & 1) && a < b) {
        size_t adv;
        int32_t cp = jv_utf8_decode(p + a, b - a, &adv);
        if (set ? !in_chars(set, cp) : !py_isspace(cp))
            break;
        a += adv;
    }
    while ((which & 2) && b > a) {
        size_t start = b - 1;
        while (start > a && ((unsigned char)p[start] & 0xC0) == 0x80)
            start--;
        size_t adv;
        int32_t cp = jv_utf8_decode(p + start, b - start, &adv);
        if (set ? !in_chars(set, cp) : !py_isspace(cp))
            break;
        b = start;
    }
    if (!jv_str_new(p + a, b - a, out))
        return render_oom(r);
    return !s.u.s->markup || jv_mark(out) ? 0 : (jv_release(*out), render_oom(r));
}

static bool case_ignorable(int32_t cp)
{
    if (cp == '\'' || cp == '.' || cp == ':' || cp == '^' || cp == '`' || cp == 0xb7 ||
        cp == 0x2019)
        return true;
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_ME || c == UTF8PROC_CATEGORY_CF ||
           c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_SK;
}

// Unicode's Final_Sigma: a capital sigma after a cased letter and not before
// one lowercases to the final form.
static bool final_sigma(const char *p, size_t n, size_t at, size_t adv)
{
    bool before = false;
    for (size_t i = at; i > 0;) {
        size_t s0 = i - 1;
        while (s0 > 0 && ((unsigned char)p[s0] & 0xC0) == 0x80)
            s0--;
        size_t k;
        int32_t cp = jv_utf8_decode(p + s0, i - s0, &k);
        i = s0;
        if (case_ignorable(cp))
            continue;
        before = is_cased(cp);
        break;
    }
    if (!before)
        return false;
    for (size_t i = at + adv; i < n;) {
        size_t k;
        int32_t cp = jv_utf8_decode(p + i, n - i, &k);
        i += k;
        if (case_ignorable(cp))
            continue;
        return !is_cased(cp);
    }
    return true;
}

// mode: 0 upper, 1 lower, 2 Python str.title, 3 capitalize, 4 jinja2's title filter.
// Full case mappings, so "ß".upper() is "SS" as in Python.
int str_case(struct render *r, struct jv s, int mode, struct jv *out)
{
    struct sbuf b;
    sbuf_init(&b);
    const char *p = s.u.s->data;
    size_t n = s.u.s->len;
    bool prev_cased = false, at_start = true;
    for (size_t i = 0; i < n;) {
        size_t adv;
        int32_t cp = jv_utf8_decode(p + i, n - i, &adv);
        int m = 1; // lower
        switch (mode) {
        case 0:
            m = 0;
            break;
        case 2:
            m = prev_cased ? 1 : 2;
            prev_cased = is_cased(cp);
            break;
        case 3:
            m = at_start ? 2 : 1;
            at_start = false;
            break;
        case 4:
            m = at_start ? 0 : 1;
            at_start =
                cp == '-' || py_isspace(cp) || cp == '(' || cp == '{' || cp == '[' || cp == '<';
            break;
        default:
            break;
        }
        if (m == 1 && cp == 0x3A3 && final_sigma(p, n, i, adv))
            jv_utf8_put(&b, 0x3C2);
        else
            casing_put(&b, cp, m);
        i += adv;
    }
    if (!(b.p ? sbuf_to_jv(&b, out) : jv_str_new("", 0, out)))
        return render_oom(r);
    return !s.u.s->markup || jv_mark(out) ? 0 : (jv_release(*out), render_oom(r));
}

int str_replace(struct render *r, struct jv s, struct jv old, struct jv new_, int64_t count,
                struct jv *out)
{
    const char *p = s.u.s->data;
    size_t n = s.u.s->len, on = old.u.s->len;
    struct sbuf b;
    sbuf_init(&b);
    if (on == 0) {
        // Python inserts new_ between characters (and at both ends).
        for (size_t i = 0;; count--) {
            if (count != 0)
                sbuf_put(&b, new_.u.s->data, new_.u.s->len);
            if (i >= n)
                break;
            size_t adv;
            jv_utf8_decode(p + i, n - i, &adv);
            sbuf_put(&b, p + i, adv);
            i += adv;
            if (b.len > RENDER_OUTPUT_MAX)
                break;
        }
    } else {
        size_t i = 0;
        while (i < n) {
            const char *hit = count != 0 ? memmem(p + i, n - i, old.u.s->data, on) : NULL;
            if (!hit) {
                sbuf_put(&b, p + i, n - i);
                break;
            }
            sbuf_put(&b, p + i, (size_t)(hit - (p + i)));
            sbuf_put(&b, new_.u.s->data, new_.u.s->len);
            i = (size_t)(hit - p) + on;
            if (count > 0)
                count--;
            if (b.len > RENDER_OUTPUT_MAX)
                break;
        }
    }
    if (b.len > RENDER_OUTPUT_MAX) {
        sbuf_free(&b);
        return render_fail(r, VLLMC_ERR_CAPACITY, "string too large");
    }
    if (!b.p)
        return jv_str_new("", 0, out) ? 0 : render_oom(r);
    return sbuf_to_jv(&b, out) ? 0 : render_oom(r);
}

// ---- str methods ----

static int need_str(struct render *r, const struct args *a, size_t i, const char *what,
                    struct jv *out)
{
    const struct jv *v = args_get(a, i, NULL);
    if (!v || v->kind != JV_STR)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "%s() argument must be str", what);
    *out = *v;
    return 0;
}

// A Markup receiver escapes its string arguments first (markupsafe's
// escaping wrapper); *out is a new reference.
static int markup_arg(struct render *r, struct jv self, const struct jv *arg, struct jv *out)
{
    if (!arg || !self.u.s->markup || arg->kind != JV_STR || arg->u.s->markup) {
        *out = arg ? jv_retain(*arg) : jv_none();
        return 0;
    }
    struct sbuf b;
    sbuf_init(&b);
    html_escape(&b, arg->u.s->data, arg->u.s->len);
    return (b.p ? sbuf_to_jv(&b, out) : jv_str_new("", 0, out)) ? 0 : render_oom(r);
}

static int strip_method(struct render *r, struct jv self, const struct args *a, int which,
                        struct jv *out)
{
    struct jv chars;
    if (markup_arg(r, self, args_get(a, 0, "chars"), &chars))
        return -1;
    int rc = str_strip(r, self, chars.kind == JV_NONE ? NULL : &chars, which, out);
    jv_release(chars);
    return rc;
}

static int m_strip(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    return strip_method(r, self, a, 3, out);
}

static int m_lstrip(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    return strip_method(r, self, a, 1, out);
}

static int m_rstrip(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    return strip_method(r, self, a, 2, out);
}

static int m_upper(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)a;
    return str_case(r, self, 0, out);
}

static int m_lower(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)a;
    return str_case(r, self, 1, out);
}

static int m_title(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)a;
    return str_case(r, self, 2, out);
}

static int m_capitalize(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)a;
    return str_case(r, self, 3, out);
}

static int push_piece_mark(struct render *r, struct jv list, const char *p, size_t n, bool markup)
{
    struct jv s;
    if (!jv_str_new(p, n, &s))
        return render_oom(r);
    s.u.s->markup = markup;
    if (!jv_list_push(list.u.l, s))
        return render_oom(r);
    return 0;
}

#define push_piece(r, list, p, n) push_piece_mark(r, list, p, n, self.u.s->markup)

// str.split / str.rsplit with Python's whitespace and separator rules.
static int split_common(struct render *r, struct jv self, const struct args *a, struct jv *out,
                        bool from_right)
{
    const struct jv *sepv = args_get(a, 0, "sep");
    const struct jv *maxv = args_get(a, 1, "maxsplit");
    int64_t maxsplit = maxv && maxv->kind == JV_INT ? maxv->u.i : -1;
    if (sepv && sepv->kind != JV_NONE && sepv->kind != JV_STR)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "must be str or None, not %s",
                           jv_type_name(*sepv));
    const struct jv_str *sep = sepv && sepv->kind == JV_STR ? sepv->u.s : NULL;
    if (sep && sep->len == 0)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "empty separator");
    const char *p = self.u.s->data;
    size_t n = self.u.s->len;
    struct jv parts;
    if (!jv_list_new(0, false, &parts))
        return render_oom(r);
    int rc = 0;
    if (sep) {
        if (!from_right) {
            size_t i = 0;
            for (;;) {
                const char *hit = maxsplit != 0 ? memmem(p + i, n - i, sep->data, sep->len) : NULL;
                if (!hit) {
                    rc = push_piece(r, parts, p + i, n - i);
                    break;
                }
                if ((rc = push_piece(r, parts, p + i, (size_t)(hit - (p + i)))))
                    break;
                i = (size_t)(hit - p) + sep->len;
                if (maxsplit > 0)
                    maxsplit--;
            }
        } else {
            // Collect from the right, then reverse.
            size_t end = n;
            for (;;) {
                const char *hit = NULL;
                if (maxsplit != 0 && end >= sep->len) {
                    for (size_t k = end - sep->len + 1; k-- > 0;) {
                        if (!memcmp(p + k, sep->data, sep->len)) {
                            hit = p + k;
                            break;
                        }
                    }
                }
                if (!hit) {
                    rc = push_piece(r, parts, p, end);
                    break;
                }
                size_t hs = (size_t)(hit - p);
                if ((rc = push_piece(r, parts, hit + sep->len, end - hs - sep->len)))
                    break;
                end = hs;
                if (maxsplit > 0)
                    maxsplit--;
            }
        }
    } else {
        // Runs of whitespace separate; leading and trailing runs vanish.
        size_t i = 0;
        if (!from_right) {
            while (!rc) {
                size_t adv;
                while (i < n && py_isspace(jv_utf8_decode(p + i, n - i, &adv)))
                    i += adv;
                if (i >= n)
                    break;
                if (maxsplit == 0) {
                    // The rest stays as it is, trailing whitespace included.
                    rc = push_piece(r, parts, p + i, n - i);
                    break;
                }
                size_t j = i;
                while (j < n && !py_isspace(jv_utf8_decode(p + j, n - j, &adv)))
                    j += adv;
                rc = push_piece(r, parts, p + i, j - i);
                i = j;
                if (maxsplit > 0)
                    maxsplit--;
            }
        } else {
            size_t end = n;
            while (!rc) {
                size_t adv;
                while (end > 0) {
                    size_t s0 = end - 1;
                    while (s0 > 0 && ((unsigned char)p[s0] & 0xC0) == 0x80)
                        s0--;
                    if (!py_isspace(jv_utf8_decode(p + s0, end - s0, &adv)))
                        break;
                    end = s0;
                }
                if (end == 0)
                    break;
                if (maxsplit == 0) {
                    rc = push_piece(r, parts, p, end);
                    break;
                }
                size_t b = end;
                while (b > 0) {
                    size_t s0 = b - 1;
                    while (s0 > 0 && ((unsigned char)p[s0] & 0xC0) == 0x80)
                        s0--;
                    if (py_isspace(jv_utf8_decode(p + s0, b - s0, &adv)))
                        break;
                    b = s0;
                }
                rc = push_piece(r, parts, p + b, end - b);
                end = b;
                if (maxsplit > 0)
                    maxsplit--;
            }
        }
    }
    if (rc) {
        jv_release(parts);
        return -1;
    }
    if (from_right) {
        struct jv_list *l = parts.u.l;
        for (size_t i = 0; i < l->n / 2; i++) {
            struct jv t = l->items[i];
            l->items[i] = l->items[l->n - 1 - i];
            l->items[l->n - 1 - i] = t;
        }
    }
    *out = parts;
    return 0;
}

static int m_split(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    return split_common(r, self, a, out, false);
}

static int m_rsplit(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    return split_common(r, self, a, out, true);
}

static int m_splitlines(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    bool keep = a->n_pos && jv_truthy(a->pos[0]);
    const char *p = self.u.s->data;
    size_t n = self.u.s->len, i = 0;
    if (!jv_list_new(0, false, out))
        return render_oom(r);
    while (i < n) {
        size_t end, next = py_splitlines(p, n, i, &end);
        if (push_piece(r, *out, p + i, (keep ? next : end) - i)) {
            jv_release(*out);
            return -1;
        }
        i = next;
    }
    return 0;
}

static int starts_ends(struct render *r, struct jv self, const struct args *a, struct jv *out,
                       bool ends)
{
    const struct jv *x = args_get(a, 0, NULL);
    if (a->n_pos > 1)
        return render_fail(r, VLLMC_ERR_UNSUPPORTED,
                           "unsupported: start/end arguments of startswith/endswith");
    if (!x || (x->kind != JV_STR && x->kind != JV_LIST))
        return render_fail(r, VLLMC_ERR_TEMPLATE, "%s first arg must be str or a tuple of str",
                           ends ? "endswith" : "startswith");
    size_t n_opts = x->kind == JV_STR ? 1 : x->u.l->n;
    bool hit = false;
    for (size_t k = 0; k < n_opts && !hit; k++) {
        struct jv o = x->kind == JV_STR ? *x : x->u.l->items[k];
        if (o.kind != JV_STR)
            return render_fail(r, VLLMC_ERR_TEMPLATE, "tuple for %s must only contain str",
                               ends ? "endswith" : "startswith");
        size_t on = o.u.s->len, n = self.u.s->len;
        hit = on <= n && !memcmp(self.u.s->data + (ends ? n - on : 0), o.u.s->data, on);
    }
    *out = jv_bool(hit);
    return 0;
}

static int m_startswith(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    return starts_ends(r, self, a, out, false);
}

static int m_endswith(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    return starts_ends(r, self, a, out, true);
}

static int m_replace(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    struct jv old = jv_undef(), nw = jv_undef(), eo, en;
    const struct jv *c = args_get(a, 2, "count");
    if (need_str(r, a, 0, "replace", &old) || need_str(r, a, 1, "replace", &nw))
        return -1;
    if (markup_arg(r, self, &old, &eo))
        return -1;
    if (markup_arg(r, self, &nw, &en)) {
        jv_release(eo);
        return -1;
    }
    int rc = str_replace(r, self, eo, en, c && c->kind == JV_INT ? c->u.i : -1, out);
    jv_release(eo);
    jv_release(en);
    if (!rc && self.u.s->markup && !jv_mark(out)) {
        jv_release(*out);
        return render_oom(r);
    }
    return rc;
}

static int m_find(struct render *r, struct jv self, const struct args *a, struct jv *out,
                  bool from_right, bool count)
{
    struct jv sub = jv_undef();
    if (need_str(r, a, 0, count ? "count" : "find", &sub))
        return -1;
    if (a->n_pos > 1)
        return render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: start/end arguments");
    const char *p = self.u.s->data;
    size_t n = self.u.s->len, sn = sub.u.s->len;
    if (count) {
        int64_t c = 0;
        if (!sn) {
            c = (int64_t)jv_utf8_count(p, n) + 1;
        } else {
            for (size_t i = 0; i + sn <= n;) {
                const char *hit = memmem(p + i, n - i, sub.u.s->data, sn);
                if (!hit)
                    break;
                c++;
                i = (size_t)(hit - p) + sn;
            }
        }
        *out = jv_int(c);
        return 0;
    }
    int64_t at = -1;
    if (sn <= n) {
        if (!from_right) {
            const char *hit = memmem(p, n, sub.u.s->data, sn);
            if (hit)
                at = (int64_t)jv_utf8_count(p, (size_t)(hit - p));
        } else {
            for (size_t k = n - sn + 1; k-- > 0;) {
                if (!memcmp(p + k, sub.u.s->data, sn)) {
                    at = (int64_t)jv_utf8_count(p, k);
                    break;
                }
            }
        }
    }
    *out = jv_int(at);
    return 0;
}

static int m_find_l(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    return m_find(r, self, a, out, false, false);
}

static int m_rfind(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    return m_find(r, self, a, out, true, false);
}

static int m_count(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    if (self.kind == JV_LIST) {
        const struct jv *x = args_get(a, 0, NULL);
        if (!x)
            return render_fail(r, VLLMC_ERR_TEMPLATE, "count() takes exactly one argument");
        int64_t c = 0;
        for (size_t i = 0; i < self.u.l->n; i++)
            c += jv_equal(self.u.l->items[i], *x);
        *out = jv_int(c);
        return 0;
    }
    return m_find(r, self, a, out, false, true);
}

static int m_join(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    const struct jv *arg = args_get(a, 0, NULL);
    struct jv items;
    if (!arg)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "join() takes exactly one argument");
    if (eval_iter_items(r, *arg, &items))
        return -1;
    bool markup = self.u.s->markup;
    struct sbuf b;
    sbuf_init(&b);
    int rc = 0;
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        struct jv x = items.u.l->items[i];
        if (x.kind != JV_STR) {
            rc = render_fail(r, VLLMC_ERR_TEMPLATE,
                             "sequence item %zu: expected str instance, %s found", i,
                             jv_type_name(x));
            break;
        }
        if (i)
            sbuf_put(&b, self.u.s->data, self.u.s->len);
        if (markup)
            markup_put(&b, x);
        else
            sbuf_put(&b, x.u.s->data, x.u.s->len);
        if (b.len > RENDER_OUTPUT_MAX)
            rc = render_fail(r, VLLMC_ERR_CAPACITY, "string too large");
    }
    jv_release(items);
    if (rc) {
        sbuf_free(&b);
        return -1;
    }
    if (!(b.p ? sbuf_to_jv(&b, out) : jv_str_new("", 0, out)))
        return render_oom(r);
    return !markup || jv_mark(out) ? 0 : (jv_release(*out), render_oom(r));
}

// str.format with plain `{}`, `{0}` and `{name}` fields.
static int m_format(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    const char *p = self.u.s->data;
    size_t n = self.u.s->len, auto_idx = 0;
    struct sbuf b;
    sbuf_init(&b);
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if ((c == '{' || c == '}') && i + 1 < n && p[i + 1] == c) {
            sbuf_putc(&b, c);
            i++;
            continue;
        }
        if (c == '}') {
            sbuf_free(&b);
            return render_fail(r, VLLMC_ERR_TEMPLATE, "Single '}' encountered in format string");
        }
        if (c != '{') {
            sbuf_putc(&b, c);
            continue;
        }
        const char *close = memchr(p + i, '}', n - i);
        if (!close) {
            sbuf_free(&b);
            return render_fail(r, VLLMC_ERR_TEMPLATE, "Single '{' encountered in format string");
        }
        size_t fs = i + 1, fe = (size_t)(close - p);
        char field[128];
        size_t fl = fe - fs;
        if (fl >= sizeof field || memchr(p + fs, ':', fl) || memchr(p + fs, '!', fl) ||
            memchr(p + fs, '.', fl) || memchr(p + fs, '[', fl) || memchr(p + fs, '{', fl)) {
            sbuf_free(&b);
            return render_fail(r, VLLMC_ERR_UNSUPPORTED,
                               "unsupported: format field with a spec or conversion");
        }
        memcpy(field, p + fs, fl);
        field[fl] = 0;
        const struct jv *v;
        char *end;
        long idx = strtol(field, &end, 10);
        if (!fl)
            v = args_get(a, auto_idx++, NULL);
        else if (*end == 0 && idx >= 0)
            v = args_get(a, (size_t)idx, NULL);
        else
            v = args_get(a, SIZE_MAX, field);
        if (!v) {
            sbuf_free(&b);
            return render_fail(r, VLLMC_ERR_TEMPLATE, "format field '%s' has no value", field);
        }
        if (!(self.u.s->markup ? markup_put(&b, *v) : jv_write(&b, *v, 0))) {
            sbuf_free(&b);
            return render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: cannot format a %s",
                               jv_type_name(*v));
        }
        i = fe;
    }
    if (!(b.p ? sbuf_to_jv(&b, out) : jv_str_new("", 0, out)))
        return render_oom(r);
    return !self.u.s->markup || jv_mark(out) ? 0 : (jv_release(*out), render_oom(r));
}

static int str_is(struct render *r, struct jv self, struct jv *out, int kind)
{
    const char *p = self.u.s->data;
    size_t n = self.u.s->len;
    bool ok = n > 0;
    for (size_t i = 0; i < n && ok;) {
        size_t adv;
        int32_t cp = jv_utf8_decode(p + i, n - i, &adv);
        utf8proc_category_t c = utf8proc_category(cp);
        switch (kind) {
        case 0: // isdigit
            ok = c == UTF8PROC_CATEGORY_ND || (cp >= 0xb2 && cp <= 0xb3) || cp == 0xb9;
            break;
        case 1: // isalpha
            ok = c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
            break;
        case 2: // isalnum
            ok = py_isalnum(cp);
            break;
        case 3: // isspace
            ok = py_isspace(cp);
            break;
        }
        i += adv;
    }
    (void)r;
    *out = jv_bool(ok);
    return 0;
}

static int m_isdigit(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)a;
    return str_is(r, self, out, 0);
}

static int m_isalpha(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)a;
    return str_is(r, self, out, 1);
}

static int m_isalnum(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)a;
    return str_is(r, self, out, 2);
}

static int m_isspace(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)a;
    return str_is(r, self, out, 3);
}

static int m_removeprefix(struct render *r, struct jv self, const struct args *a, struct jv *out,
                          bool suffix)
{
    struct jv x = jv_undef();
    if (need_str(r, a, 0, suffix ? "removesuffix" : "removeprefix", &x))
        return -1;
    size_t n = self.u.s->len, xn = x.u.s->len;
    const char *p = self.u.s->data;
    if (xn <= n && !memcmp(p + (suffix ? n - xn : 0), x.u.s->data, xn))
        return jv_str_new(p + (suffix ? 0 : xn), n - xn, out) ? 0 : render_oom(r);
    *out = jv_retain(self);
    return 0;
}

static int m_removeprefix_l(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    return m_removeprefix(r, self, a, out, false);
}

static int m_removesuffix(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    return m_removeprefix(r, self, a, out, true);
}

// ---- printf-style formatting ----

// Python's `fmt % args` for the conversions s r a d i u f F e E g G x X o c
// and %%, with flags, width and precision, positional or %(key)s fields.
int str_percent(struct render *r, struct jv fmt, struct jv args, struct jv *out)
{
    const char *p = fmt.u.s->data;
    size_t n = fmt.u.s->len, next = 0;
    bool is_tuple = args.kind == JV_LIST && args.u.l->tuple && jv_is_plain_list(args);
    bool is_map = (args.kind == JV_DICT && !args.u.d->ns) || args.kind == JV_UNDEF;
    size_t n_args = is_tuple ? args.u.l->n : 1;
    bool used_map = false;
    struct sbuf b;
    sbuf_init(&b);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (p[i] != '%') {
            sbuf_putc(&b, p[i]);
            continue;
        }
        if (++i >= n) {
            rc = render_fail(r, VLLMC_ERR_TEMPLATE, "incomplete format");
            break;
        }
        const struct jv *v = NULL;
        if (p[i] == '(') {
            const char *close = memchr(p + i, ')', n - i);
            if (!close || !is_map) {
                rc = render_fail(r, VLLMC_ERR_TEMPLATE, "format requires a mapping");
                break;
            }
            struct jv key;
            if (!jv_str_new(p + i + 1, (size_t)(close - p) - i - 1, &key)) {
                rc = render_oom(r);
                break;
            }
            if (args.kind == JV_UNDEF) {
                jv_release(key);
                rc = eval_undef_fail(r, args);
                break;
            }
            v = jv_dict_get(args.u.d, key);
            if (!v)
                rc = render_fail(r, VLLMC_ERR_TEMPLATE, "KeyError: '%s'", key.u.s->data);
            jv_release(key);
            used_map = true;
            i = (size_t)(close - p) + 1;
            if (rc)
                break;
        }
        char spec[64];
        size_t k = 0;
        spec[k++] = '%';
        while (i < n && strchr("-+ #0", p[i]) && k < 8)
            spec[k++] = p[i++];
        while (i < n && p[i] >= '0' && p[i] <= '9' && k < 16)
            spec[k++] = p[i++];
        if (i < n && p[i] == '.') {
            spec[k++] = p[i++];
            while (i < n && p[i] >= '0' && p[i] <= '9' && k < 24)
                spec[k++] = p[i++];
        }
        if (i >= n || k >= 24) {
            rc = render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: format specifier");
            break;
        }
        char conv = p[i];
        if (conv == '%' && k == 1) {
            sbuf_putc(&b, '%');
            continue;
        }
        if (!v) {
            if (next >= n_args || (!is_tuple && is_map)) {
                if (!is_map || used_map) {
                    rc = render_fail(r, VLLMC_ERR_TEMPLATE,
                                     "not enough arguments for format string");
                    break;
                }
            }
            v = is_tuple ? &args.u.l->items[next] : &args;
            next++;
        }
        char buf[512];
        if (conv == 's' || conv == 'r' || conv == 'a') {
            struct sbuf t;
            sbuf_init(&t);
            if (!jv_write(&t, *v, conv != 's')) {
                sbuf_free(&t);
                rc = render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: cannot format a %s",
                                 jv_type_name(*v));
                break;
            }
            // Width and precision count characters, not bytes.
            spec[k] = 0;
            bool left = strchr(spec, '-') != NULL;
            const char *w = spec + 1;
            while (*w && strchr("-+ #0", *w))
                w++;
            long width = strtol(w, NULL, 10);
            const char *dot = strchr(spec, '.');
            const char *text = t.p ? t.p : "";
            size_t tlen = t.len;
            if (dot)
                tlen = jv_utf8_offset(text, tlen, (size_t)strtol(dot + 1, NULL, 10));
            long pad = width - (long)jv_utf8_count(text, tlen);
            for (long q = 0; !left && q < pad && q < 4096; q++)
                sbuf_putc(&b, ' ');
            sbuf_put(&b, text, tlen);
            for (long q = 0; left && q < pad && q < 4096; q++)
                sbuf_putc(&b, ' ');
            sbuf_free(&t);
            continue;
        }
        bool is_num = v->kind == JV_INT || v->kind == JV_BOOL || v->kind == JV_FLOAT;
        if (!is_num) {
            rc =
                render_fail(r, VLLMC_ERR_TEMPLATE, "%%%c format: a real number is required, not %s",
                            conv, jv_type_name(*v));
            break;
        }
        double f = v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : v->u.b;
        if (strchr("diuxXoc", conv)) {
            long long iv = v->kind == JV_FLOAT ? (long long)v->u.f
                           : v->kind == JV_INT ? (long long)v->u.i
                                               : v->u.b;
            if (conv == 'c') {
                jv_utf8_put(&b, (int32_t)iv);
                continue;
            }
            if ((conv == 'x' || conv == 'X' || conv == 'o') && iv < 0) {
                rc = render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: negative %%x/%%o");
                break;
            }
            spec[k++] = 'l';
            spec[k++] = 'l';
            spec[k++] = conv == 'u' || conv == 'i' ? 'd' : conv;
            spec[k] = 0;
            snprintf(buf, sizeof buf, spec, iv);
        } else if (strchr("fFeEgG", conv)) {
            spec[k++] = conv;
            spec[k] = 0;
            snprintf(buf, sizeof buf, spec, f);
        } else {
            rc = render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: format character '%c'", conv);
            break;
        }
        sbuf_puts(&b, buf);
    }
    if (!rc && !is_tuple && !is_map && next == 0)
        rc = render_fail(r, VLLMC_ERR_TEMPLATE,
                         "not all arguments converted during string formatting");
    if (!rc && is_tuple && next < n_args)
        rc = render_fail(r, VLLMC_ERR_TEMPLATE,
                         "not all arguments converted during string formatting");
    if (rc) {
        sbuf_free(&b);
        return -1;
    }
    if (!(b.p ? sbuf_to_jv(&b, out) : jv_str_new("", 0, out)))
        return render_oom(r);
    return 0;
}

// ---- dict and list methods ----

static int m_items(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)a;
    if (filter_items(r, self, out))
        return -1;
    out->u.l->seq = SEQ_ITEMS_VIEW;
    return 0;
}

static int m_keys(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)a;
    if (!jv_list_new(self.u.d->n, false, out))
        return render_oom(r);
    for (size_t i = 0; i < self.u.d->n; i++)
        jv_list_push(out->u.l, jv_retain(self.u.d->keys[i]));
    out->u.l->seq = SEQ_KEYS_VIEW;
    return 0;
}

static int m_values(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)a;
    if (!jv_list_new(self.u.d->n, false, out))
        return render_oom(r);
    for (size_t i = 0; i < self.u.d->n; i++)
        jv_list_push(out->u.l, jv_retain(self.u.d->vals[i]));
    out->u.l->seq = SEQ_VALUES_VIEW;
    return 0;
}

static int m_get(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    const struct jv *k = args_get(a, 0, NULL);
    const struct jv *d = args_get(a, 1, NULL);
    if (!k)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "get expected at least 1 argument, got 0");
    struct jv *v = k->kind == JV_LIST || k->kind == JV_DICT ? NULL : jv_dict_get(self.u.d, *k);
    *out = v ? jv_retain(*v) : d ? jv_retain(*d) : jv_none();
    return 0;
}

static int m_copy(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)a;
    if (!jv_dict_new(false, out))
        return render_oom(r);
    for (size_t i = 0; i < self.u.d->n; i++)
        if (!jv_dict_set(out->u.d, jv_retain(self.u.d->keys[i]), jv_retain(self.u.d->vals[i]))) {
            jv_release(*out);
            return render_oom(r);
        }
    return 0;
}

static int m_index(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    const struct jv *x = args_get(a, 0, NULL);
    if (!x)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "index expected 1 argument");
    if (self.kind == JV_STR)
        return m_find(r, self, a, out, false, false);
    for (size_t i = 0; i < self.u.l->n; i++) {
        if (jv_equal(self.u.l->items[i], *x)) {
            *out = jv_int((int64_t)i);
            return 0;
        }
    }
    return render_fail(r, VLLMC_ERR_TEMPLATE, "value is not in list");
}

static int m_unsafe(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)a;
    (void)out;
    return render_fail(r, VLLMC_ERR_TEMPLATE,
                       "access to a mutating method of '%s' object is "
                       "unsafe in the sandbox",
                       jv_type_name(self));
}

struct method {
    enum jv_kind kind;
    const char *name;
    jv_builtin_fn fn;
};

static const struct method methods[] = {
    {JV_STR, "strip", m_strip},
    {JV_STR, "lstrip", m_lstrip},
    {JV_STR, "rstrip", m_rstrip},
    {JV_STR, "upper", m_upper},
    {JV_STR, "lower", m_lower},
    {JV_STR, "title", m_title},
    {JV_STR, "capitalize", m_capitalize},
    {JV_STR, "split", m_split},
    {JV_STR, "rsplit", m_rsplit},
    {JV_STR, "splitlines", m_splitlines},
    {JV_STR, "startswith", m_startswith},
    {JV_STR, "endswith", m_endswith},
    {JV_STR, "replace", m_replace},
    {JV_STR, "find", m_find_l},
    {JV_STR, "rfind", m_rfind},
    {JV_STR, "index", m_index},
    {JV_STR, "count", m_count},
    {JV_STR, "join", m_join},
    {JV_STR, "format", m_format},
    {JV_STR, "isdigit", m_isdigit},
    {JV_STR, "isalpha", m_isalpha},
    {JV_STR, "isalnum", m_isalnum},
    {JV_STR, "isspace", m_isspace},
    {JV_STR, "removeprefix", m_removeprefix_l},
    {JV_STR, "removesuffix", m_removesuffix},
    {JV_DICT, "items", m_items},
    {JV_DICT, "keys", m_keys},
    {JV_DICT, "values", m_values},
    {JV_DICT, "get", m_get},
    {JV_DICT, "copy", m_copy},
    {JV_DICT, "pop", m_unsafe},
    {JV_DICT, "popitem", m_unsafe},
    {JV_DICT, "update", m_unsafe},
    {JV_DICT, "setdefault", m_unsafe},
    {JV_DICT, "clear", m_unsafe},
    {JV_LIST, "index", m_index},
    {JV_LIST, "count", m_count},
    {JV_LIST, "append", m_unsafe},
    {JV_LIST, "extend", m_unsafe},
    {JV_LIST, "insert", m_unsafe},
    {JV_LIST, "pop", m_unsafe},
    {JV_LIST, "remove", m_unsafe},
    {JV_LIST, "reverse", m_unsafe},
    {JV_LIST, "sort", m_unsafe},
    {JV_LIST, "clear", m_unsafe},
};

int method_lookup(struct render *r, struct jv obj, const char *name, struct jv *out)
{
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        const struct method *m = &methods[i];
        if (m->kind != obj.kind || strcmp(m->name, name))
            continue;
        if (obj.kind == JV_LIST && obj.u.l->tuple && m->fn == m_unsafe)
            continue;
        if (obj.kind == JV_DICT && obj.u.d->ns)
            continue;
        return jv_func_new(m->name, m->fn, obj, out) ? 0 : render_oom(r);
    }
    *out = jv_undef();
    return 0;
}

// ---- globals ----

static int g_range(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)self;
    int64_t v[3] = {0, 0, 1};
    if (a->n_pos < 1 || a->n_pos > 3 || a->n_kw)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "range expected 1 to 3 arguments");
    for (size_t i = 0; i < a->n_pos; i++) {
        struct jv x = a->pos[i];
        if (x.kind != JV_INT && x.kind != JV_BOOL)
            return render_fail(r, VLLMC_ERR_TEMPLATE,
                               "'%s' object cannot be interpreted as an integer", jv_type_name(x));
        v[a->n_pos == 1 ? 1 : i] = x.kind == JV_INT ? x.u.i : x.u.b;
    }
    int64_t start = v[0], stop = v[1], step = v[2];
    if (step == 0)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "range() arg 3 must not be zero");
    double count = step > 0 ? (stop > start ? ((double)stop - (double)start) / (double)step : 0)
                            : (start > stop ? ((double)start - (double)stop) / (double)-step : 0);
    if (count > RENDER_RANGE_MAX)
        return render_fail(r, VLLMC_ERR_CAPACITY,
                           "Range too big. The sandbox blocks ranges larger than MAX_RANGE "
                           "(%d).",
                           RENDER_RANGE_MAX);
    if (!jv_list_new((size_t)count + 1, false, out))
        return render_oom(r);
    for (int64_t x = start; step > 0 ? x < stop : x > stop; x += step)
        jv_list_push(out->u.l, jv_int(x));
    out->u.l->seq = SEQ_RANGE;
    out->u.l->range[0] = start;
    out->u.l->range[1] = stop;
    out->u.l->range[2] = step;
    return 0;
}

static int fill_dict(struct render *r, const struct args *a, struct jv d)
{
    for (size_t i = 0; i < a->n_pos; i++) {
        struct jv x = a->pos[i];
        if (x.kind != JV_DICT || x.u.d->ns)
            return render_fail(r, VLLMC_ERR_UNSUPPORTED,
                               "unsupported: positional argument that is not a dict");
        for (size_t k = 0; k < x.u.d->n; k++)
            if (!jv_dict_set(d.u.d, jv_retain(x.u.d->keys[k]), jv_retain(x.u.d->vals[k])))
                return render_oom(r);
    }
    for (size_t i = 0; i < a->n_kw; i++) {
        struct jv key;
        if (!jv_str_cstr(a->kw_names[i], &key) || !jv_dict_set(d.u.d, key, jv_retain(a->kw[i])))
            return render_oom(r);
    }
    return 0;
}

static int g_dict(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)self;
    if (!jv_dict_new(false, out))
        return render_oom(r);
    if (fill_dict(r, a, *out)) {
        jv_release(*out);
        return -1;
    }
    return 0;
}

static int g_namespace(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)self;
    if (r->namespaces.kind != JV_LIST && !jv_list_new(0, false, &r->namespaces))
        return render_oom(r);
    if (!jv_dict_new(true, out))
        return render_oom(r);
    if (!jv_list_push(r->namespaces.u.l, jv_retain(*out))) {
        jv_release(*out);
        return render_oom(r);
    }
    return fill_dict(r, a, *out) ? (jv_release(*out), -1) : 0;
}

static int g_raise(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)self;
    (void)out;
    const struct jv *m = args_get(a, 0, "message");
    struct jv s;
    if (!m)
        return render_raise(r, "", 0);
    if (eval_to_str(r, *m, &s))
        return -1;
    render_raise(r, s.u.s->data, s.u.s->len);
    jv_release(s);
    return -1;
}

static int g_strftime_now(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    (void)self;
    const struct jv *f = args_get(a, 0, "format");
    if (!f || f->kind != JV_STR)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "strftime_now() needs a format string");
    time_t t = (time_t)r->now_s;
    struct tm tm;
    if (!gmtime_r(&t, &tm))
        return render_fail(r, VLLMC_ERR_TEMPLATE, "time out of range");
    char buf[512];
    size_t n = f->u.s->len ? strftime(buf, sizeof buf, f->u.s->data, &tm) : 0;
    if (!n && f->u.s->len)
        return render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: strftime result too long");
    return jv_str_new(buf, n, out) ? 0 : render_oom(r);
}

int global_lookup(struct render *r, const char *name, struct jv *out)
{
    static const struct {
        const char *name;
        jv_builtin_fn fn;
    } globals[] = {
        {"range", g_range},
        {"dict", g_dict},
        {"namespace", g_namespace},
        {"raise_exception", g_raise},
        {"strftime_now", g_strftime_now},
    };
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (!strcmp(globals[i].name, name))
            return jv_func_new(globals[i].name, globals[i].fn, jv_undef(), out) ? 0 : render_oom(r);
    *out = jv_undef();
    return 0;
}
