// Template values: refcounted strings, lists, dicts and callables with Python
// semantics for truthiness, equality, ordering and str()/repr() text.
// Immortal objects (refs < 0) belong to a compiled template and are never
// written, which keeps concurrent renders of one template race-free.
#include "template/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/alloc.h"

// ---- refcounting ----

struct jv jv_retain(struct jv v)
{
    if (jv_is_obj(v) && v.u.o->refs >= 0)
        v.u.o->refs++;
    return v;
}

static void list_free(struct jv_list *l)
{
    if (l->thunk)
        gen_thunk_free(l->thunk);
    for (size_t i = 0; i < l->n; i++)
        jv_release(l->items[i]);
    mem_free(l->items);
    mem_free(l);
}

static void dict_free(struct jv_dict *d)
{
    jv_dict_clear(d);
    mem_free(d->keys);
    mem_free(d->vals);
    mem_free(d);
}

static void func_free(struct jv_func *f)
{
    jv_release(f->self);
    if (f->closure)
        frame_release(f->closure);
    mem_free(f);
}

void jv_release(struct jv v)
{
    if (!jv_is_obj(v) || v.u.o->refs < 0)
        return;
    if (--v.u.o->refs > 0)
        return;
    switch (v.kind) {
    case JV_UNDEF:
    case JV_STR:
        mem_free(v.u.s);
        break;
    case JV_LIST:
        list_free(v.u.l);
        break;
    case JV_DICT:
        dict_free(v.u.d);
        break;
    case JV_FUNC:
        func_free(v.u.fn);
        break;
    case JV_LOOP:
        loop_free(v.u.loop);
        break;
    default:
        break;
    }
}

// ---- strings ----

static struct jv_str *str_alloc(const char *p, size_t n)
{
    if (n > SIZE_MAX / 2)
        return NULL;
    struct jv_str *s = mem_alloc(sizeof *s + n + 1);
    if (!s)
        return NULL;
    s->h.refs = 1;
    s->len = n;
    s->markup = false;
    if (n)
        memcpy(s->data, p, n);
    s->data[n] = 0;
    return s;
}

bool jv_str_new(const char *p, size_t n, struct jv *out)
{
    struct jv_str *s = str_alloc(p, n);
    if (!s)
        return false;
    out->kind = JV_STR;
    out->u.s = s;
    return true;
}

bool jv_str_cstr(const char *s, struct jv *out)
{
    return jv_str_new(s, strlen(s), out);
}

bool jv_undef_msg(struct jv *out, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n >= sizeof buf ? sizeof buf - 1 : (size_t)n;
    struct jv_str *s = str_alloc(buf, len);
    if (!s)
        return false;
    out->kind = JV_UNDEF;
    out->u.s = s;
    return true;
}

// ---- lists and dicts ----

bool jv_list_new(size_t cap, bool tuple, struct jv *out)
{
    struct jv_list *l = mem_calloc(1, sizeof *l);
    if (!l)
        return false;
    l->h.refs = 1;
    l->tuple = tuple;
    if (cap) {
        l->items = mem_calloc(cap, sizeof *l->items);
        if (!l->items) {
            mem_free(l);
            return false;
        }
        l->cap = cap;
    }
    out->kind = JV_LIST;
    out->u.l = l;
    return true;
}

static uint32_t child_depth(struct jv v)
{
    if (v.kind == JV_LIST)
        return v.u.l->depth + 1;
    if (v.kind == JV_DICT && !v.u.d->ns)
        return v.u.d->depth + 1;
    return 0;
}

bool jv_nest_ok(struct jv v)
{
    return child_depth(v) + 1 <= JV_DEPTH_MAX;
}

bool jv_list_push(struct jv_list *l, struct jv v)
{
    uint32_t d = child_depth(v);
    if (d > JV_DEPTH_MAX) {
        jv_release(v);
        return false;
    }
    if (d > l->depth)
        l->depth = d;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        struct jv *p = mem_realloc(l->items, cap * sizeof *p);
        if (!p) {
            jv_release(v);
            return false;
        }
        l->items = p;
        l->cap = cap;
    }
    l->items[l->n++] = v;
    return true;
}

bool jv_dict_new(bool ns, struct jv *out)
{
    struct jv_dict *d = mem_calloc(1, sizeof *d);
    if (!d)
        return false;
    d->h.refs = 1;
    d->ns = ns;
    out->kind = JV_DICT;
    out->u.d = d;
    return true;
}

static size_t dict_find(const struct jv_dict *d, struct jv key)
{
    for (size_t i = 0; i < d->n; i++) {
        struct jv k = d->keys[i];
        if (key.kind == JV_STR && k.kind == JV_STR) {
            if (k.u.s->len == key.u.s->len && !memcmp(k.u.s->data, key.u.s->data, k.u.s->len))
                return i;
        } else if (jv_equal(k, key)) {
            return i;
        }
    }
    return SIZE_MAX;
}

bool jv_dict_set(struct jv_dict *d, struct jv key, struct jv val)
{
    uint32_t cd = child_depth(val);
    if (cd > JV_DEPTH_MAX) {
        jv_release(key);
        jv_release(val);
        return false;
    }
    if (!d->ns && cd > d->depth)
        d->depth = cd;
    size_t i = dict_find(d, key);
    if (i != SIZE_MAX) {
        jv_release(key);
        jv_release(d->vals[i]);
        d->vals[i] = val;
        return true;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        struct jv *k = mem_realloc(d->keys, cap * sizeof *k);
        if (k)
            d->keys = k;
        struct jv *v = k ? mem_realloc(d->vals, cap * sizeof *v) : NULL;
        if (!v) {
            jv_release(key);
            jv_release(val);
            return false;
        }
        d->vals = v;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    return true;
}

struct jv *jv_dict_get(const struct jv_dict *d, struct jv key)
{
    size_t i = dict_find(d, key);
    return i == SIZE_MAX ? NULL : &d->vals[i];
}

struct jv *jv_dict_get_cstr(const struct jv_dict *d, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++) {
        struct jv k = d->keys[i];
        if (k.kind == JV_STR && k.u.s->len == n && !memcmp(k.u.s->data, key, n))
            return &d->vals[i];
    }
    return NULL;
}

void jv_dict_clear(struct jv_dict *d)
{
    // Release after unlinking, so a value whose release reaches back into
    // this dict (a namespace holding itself) sees it empty.
    size_t n = d->n;
    d->n = 0;
    for (size_t i = 0; i < n; i++) {
        jv_release(d->keys[i]);
        jv_release(d->vals[i]);
    }
}

bool jv_func_new(const char *name, jv_builtin_fn fn, struct jv self, struct jv *out)
{
    struct jv_func *f = mem_calloc(1, sizeof *f);
    if (!f)
        return false;
    f->h.refs = 1;
    f->name = name;
    f->fn = fn;
    f->self = jv_retain(self);
    out->kind = JV_FUNC;
    out->u.fn = f;
    return true;
}

// ---- Python semantics ----

const char *jv_type_name(struct jv v)
{
    switch (v.kind) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return v.u.s->markup ? "Markup" : "str";
    case JV_LIST:
        switch (v.u.l->seq) {
        case SEQ_GENERATOR:
            return "generator";
        case SEQ_REVERSED:
            return "list_reverseiterator";
        case SEQ_ITEMS_VIEW:
            return "dict_items";
        case SEQ_KEYS_VIEW:
            return "dict_keys";
        case SEQ_VALUES_VIEW:
            return "dict_values";
        case SEQ_RANGE:
            return "range";
        default:
            return v.u.l->tuple ? "tuple" : "list";
        }
    case JV_DICT:
        return v.u.d->ns ? "Namespace" : "dict";
    case JV_FUNC:
        return v.u.fn->body ? "Macro" : "builtin_function_or_method";
    case JV_LOOP:
        return "LoopContext";
    }
    return "object";
}

bool jv_truthy(struct jv v)
{
    switch (v.kind) {
    case JV_UNDEF:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v.u.b;
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0.0;
    case JV_STR:
        return v.u.s->len > 0;
    case JV_LIST:
        return jv_is_iterator(v) || v.u.l->n > 0;
    case JV_DICT:
        return v.u.d->ns || v.u.d->n > 0;
    default:
        return true;
    }
}

static bool is_num(struct jv v)
{
    return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
}

static double num_f(struct jv v)
{
    return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : (double)v.u.b;
}

static int64_t num_i(struct jv v)
{
    return v.kind == JV_INT ? v.u.i : (int64_t)v.u.b;
}

bool jv_equal(struct jv a, struct jv b)
{
    if (is_num(a) && is_num(b)) {
        if (a.kind == JV_FLOAT || b.kind == JV_FLOAT)
            return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.kind != b.kind)
        return false;
    switch (a.kind) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        return a.u.s->len == b.u.s->len && !memcmp(a.u.s->data, b.u.s->data, a.u.s->len);
    case JV_LIST: {
        const struct jv_list *x = a.u.l, *y = b.u.l;
        if (x->seq != SEQ_LIST || y->seq != SEQ_LIST) {
            // Iterators and views compare by identity; ranges by content.
            if (x == y)
                return true;
            if (x->seq != SEQ_RANGE || y->seq != SEQ_RANGE)
                return false;
        } else if (x->tuple != y->tuple) {
            return false;
        }
        if (x->n != y->n)
            return false;
        for (size_t i = 0; i < x->n; i++)
            if (!jv_equal(x->items[i], y->items[i]))
                return false;
        return true;
    }
    case JV_DICT:
        if (a.u.d->ns || b.u.d->ns)
            return a.u.d == b.u.d;
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            struct jv *o = jv_dict_get(b.u.d, a.u.d->keys[i]);
            if (!o || !jv_equal(a.u.d->vals[i], *o))
                return false;
        }
        return true;
    default:
        return a.u.o == b.u.o;
    }
}

bool jv_compare(struct jv a, struct jv b, int *cmp)
{
    if (is_num(a) && is_num(b)) {
        if (a.kind == JV_FLOAT || b.kind == JV_FLOAT) {
            double x = num_f(a), y = num_f(b);
            if (isnan(x) || isnan(y)) {
                *cmp = 2; // unordered: every comparison but != is false
                return true;
            }
            *cmp = x < y ? -1 : x > y;
        } else {
            int64_t x = num_i(a), y = num_i(b);
            *cmp = x < y ? -1 : x > y;
        }
        return true;
    }
    if (a.kind == JV_STR && b.kind == JV_STR) {
        // Byte order of UTF-8 equals code point order, as Python compares.
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->data, b.u.s->data, n);
        *cmp = c ? (c < 0 ? -1 : 1) : a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
        return true;
    }
    if (jv_is_plain_list(a) && jv_is_plain_list(b) && a.u.l->tuple == b.u.l->tuple) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(a.u.l->items[i], b.u.l->items[i]))
                continue;
            return jv_compare(a.u.l->items[i], b.u.l->items[i], cmp);
        }
        *cmp = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return true;
    }
    return false;
}

// ---- string building ----

void sbuf_init(struct sbuf *b)
{
    memset(b, 0, sizeof *b);
}

void sbuf_free(struct sbuf *b)
{
    mem_free(b->p);
    sbuf_init(b);
}

void sbuf_put(struct sbuf *b, const char *p, size_t n)
{
    if (b->oom || !n)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 4) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        char *q = mem_realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
}

void sbuf_puts(struct sbuf *b, const char *s)
{
    sbuf_put(b, s, strlen(s));
}

void sbuf_putc(struct sbuf *b, char c)
{
    sbuf_put(b, &c, 1);
}

void sbuf_printf(struct sbuf *b, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    sbuf_put(b, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

bool sbuf_to_jv(struct sbuf *b, struct jv *out)
{
    bool ok = !b->oom && jv_str_new(b->p ? b->p : "", b->len, out);
    sbuf_free(b);
    return ok;
}

// Python repr(float): the shortest digits that read back exactly, in fixed
// notation when the decimal exponent is in [-4, 16), else as d.ddde±XX.
void fmt_float(struct sbuf *b, double f)
{
    if (isnan(f)) {
        sbuf_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        sbuf_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    char buf[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f)
            break;
    }
    // buf: [-]d[.ddd]e±XX
    char digits[32];
    size_t nd = 0;
    const char *p = buf;
    bool neg = *p == '-';
    if (neg)
        p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    if (neg)
        sbuf_putc(b, '-');
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            sbuf_puts(b, "0.");
            for (int i = -1; i > exp10; i--)
                sbuf_putc(b, '0');
            sbuf_put(b, digits, nd);
        } else {
            size_t int_digits = (size_t)exp10 + 1;
            for (size_t i = 0; i < int_digits; i++)
                sbuf_putc(b, i < nd ? digits[i] : '0');
            sbuf_putc(b, '.');
            if (nd > int_digits)
                sbuf_put(b, digits + int_digits, nd - int_digits);
            else
                sbuf_putc(b, '0');
        }
    } else {
        sbuf_putc(b, digits[0]);
        if (nd > 1) {
            sbuf_putc(b, '.');
            sbuf_put(b, digits + 1, nd - 1);
        }
        sbuf_printf(b, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
}

static bool cp_printable(int32_t cp)
{
    if (cp < 0x80)
        return cp >= 0x20 && cp < 0x7f;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}

void str_repr(struct sbuf *b, const char *p, size_t n)
{
    char q = memchr(p, '\'', n) && !memchr(p, '"', n) ? '"' : '\'';
    sbuf_putc(b, q);
    size_t i = 0;
    while (i < n) {
        size_t adv;
        int32_t cp = jv_utf8_decode(p + i, n - i, &adv);
        char c = p[i];
        if (c == q || c == '\\') {
            sbuf_putc(b, '\\');
            sbuf_putc(b, c);
        } else if (c == '\n') {
            sbuf_puts(b, "\\n");
        } else if (c == '\r') {
            sbuf_puts(b, "\\r");
        } else if (c == '\t') {
            sbuf_puts(b, "\\t");
        } else if (cp_printable(cp)) {
            sbuf_put(b, p + i, adv);
        } else if (cp < 0x100) {
            sbuf_printf(b, "\\x%02x", (unsigned)cp);
        } else if (cp < 0x10000) {
            sbuf_printf(b, "\\u%04x", (unsigned)cp);
        } else {
            sbuf_printf(b, "\\U%08x", (unsigned)cp);
        }
        i += adv;
    }
    sbuf_putc(b, q);
}

void html_escape(struct sbuf *b, const char *p, size_t n)
{
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        const char *rep = c == '&'    ? "&amp;"
                          : c == '<'  ? "&lt;"
                          : c == '>'  ? "&gt;"
                          : c == '"'  ? "&#34;"
                          : c == '\'' ? "&#39;"
                                      : NULL;
        if (!rep)
            continue;
        sbuf_put(b, p + run, i - run);
        sbuf_puts(b, rep);
        run = i + 1;
    }
    sbuf_put(b, p + run, n - run);
}

bool markup_put(struct sbuf *b, struct jv v)
{
    if (v.kind == JV_STR && v.u.s->markup) {
        sbuf_put(b, v.u.s->data, v.u.s->len);
        return true;
    }
    struct sbuf t;
    sbuf_init(&t);
    bool ok = jv_write(&t, v, 0);
    if (ok)
        html_escape(b, t.p ? t.p : "", t.len);
    sbuf_free(&t);
    return ok;
}

bool jv_mark(struct jv *v)
{
    if (v->u.s->markup)
        return true;
    if (v->u.s->h.refs != 1) {
        struct jv c;
        if (!jv_str_new(v->u.s->data, v->u.s->len, &c))
            return false;
        jv_release(*v);
        *v = c;
    }
    v->u.s->markup = true;
    return true;
}

static bool write_depth(struct sbuf *b, struct jv v, int repr, int depth)
{
    if (depth > 64)
        return false;
    switch (v.kind) {
    case JV_UNDEF:
        if (repr)
            sbuf_puts(b, "Undefined");
        return true;
    case JV_NONE:
        sbuf_puts(b, "None");
        return true;
    case JV_BOOL:
        sbuf_puts(b, v.u.b ? "True" : "False");
        return true;
    case JV_INT:
        sbuf_printf(b, "%lld", (long long)v.u.i);
        return true;
    case JV_FLOAT:
        fmt_float(b, v.u.f);
        return true;
    case JV_STR:
        if (repr && v.u.s->markup) {
            sbuf_puts(b, "Markup(");
            str_repr(b, v.u.s->data, v.u.s->len);
            sbuf_putc(b, ')');
        } else if (repr)
            str_repr(b, v.u.s->data, v.u.s->len);
        else
            sbuf_put(b, v.u.s->data, v.u.s->len);
        return true;
    case JV_LIST: {
        const struct jv_list *l = v.u.l;
        if (l->seq == SEQ_RANGE) {
            sbuf_printf(b, "range(%lld, %lld", (long long)l->range[0], (long long)l->range[1]);
            if (l->range[2] != 1)
                sbuf_printf(b, ", %lld", (long long)l->range[2]);
            sbuf_putc(b, ')');
            return true;
        }
        if (l->seq == SEQ_GENERATOR || l->seq == SEQ_REVERSED)
            return false; // Python prints an object address
        if (l->seq != SEQ_LIST)
            sbuf_puts(b, l->seq == SEQ_ITEMS_VIEW  ? "dict_items("
                         : l->seq == SEQ_KEYS_VIEW ? "dict_keys("
                                                   : "dict_values(");
        sbuf_putc(b, l->tuple ? '(' : '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i)
                sbuf_puts(b, ", ");
            if (!write_depth(b, l->items[i], 1, depth + 1))
                return false;
        }
        if (l->tuple && l->n == 1)
            sbuf_putc(b, ',');
        sbuf_putc(b, l->tuple ? ')' : ']');
        if (l->seq != SEQ_LIST)
            sbuf_putc(b, ')');
        return true;
    }
    case JV_DICT: {
        const struct jv_dict *d = v.u.d;
        if (d->ns)
            sbuf_puts(b, "<Namespace ");
        sbuf_putc(b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i)
                sbuf_puts(b, ", ");
            if (!write_depth(b, d->keys[i], 1, depth + 1))
                return false;
            sbuf_puts(b, ": ");
            if (!write_depth(b, d->vals[i], 1, depth + 1))
                return false;
        }
        sbuf_putc(b, '}');
        if (d->ns)
            sbuf_putc(b, '>');
        return true;
    }
    case JV_LOOP:
        // LoopContext's repr; it has no str() of its own.
        sbuf_printf(b, "<LoopContext %zu/%zu>", v.u.loop->index0 + 1, v.u.loop->items->n);
        return true;
    default:
        return false;
    }
}

bool jv_write(struct sbuf *b, struct jv v, int repr)
{
    return write_depth(b, v, repr, 0);
}

// ---- UTF-8 ----

int32_t jv_utf8_decode(const char *s, size_t n, size_t *adv)
{
    const unsigned char *p = (const unsigned char *)s;
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate(p, (utf8proc_ssize_t)(n < 4 ? n : 4), &cp);
    if (k <= 0) {
        *adv = 1;
        return 0xFFFD;
    }
    *adv = (size_t)k;
    return cp;
}

size_t jv_utf8_count(const char *p, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n;) {
        size_t adv;
        jv_utf8_decode(p + i, n - i, &adv);
        i += adv;
        c++;
    }
    return c;
}

size_t jv_utf8_offset(const char *p, size_t n, size_t idx)
{
    size_t i = 0;
    for (size_t c = 0; c < idx && i < n; c++) {
        size_t adv;
        jv_utf8_decode(p + i, n - i, &adv);
        i += adv;
    }
    return i;
}

void jv_utf8_put(struct sbuf *b, int32_t cp)
{
    utf8proc_uint8_t buf[4];
    utf8proc_ssize_t k = utf8proc_encode_char(cp, buf);
    sbuf_put(b, (const char *)buf, (size_t)k);
}
