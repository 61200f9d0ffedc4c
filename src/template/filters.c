// Filters: jinja2's builtins (filters.py) plus the `tojson` transformers
// installs. A filter missing here is an error (at compile time, or when it
// runs inside an `if`, as jinja2 does), never ignored. Generator filters
// (map, select, …) run lazily, when their result is first walked.
#include "template/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

// Python text helpers shared with methods.c.
int str_strip(struct render *r, struct jv s, const struct jv *chars, int which, struct jv *out);
int str_case(struct render *r, struct jv s, int mode, struct jv *out);
int str_replace(struct render *r, struct jv s, struct jv old, struct jv new_, int64_t count,
                struct jv *out);
bool py_isspace(int32_t cp);
bool py_isalnum(int32_t cp);
size_t py_splitlines(const char *p, size_t n, size_t i, size_t *line_end);

// ---- arguments ----

const struct jv *args_get(const struct args *a, size_t i, const char *name)
{
    if (i < a->n_pos)
        return &a->pos[i];
    for (size_t k = 0; name && k < a->n_kw; k++)
        if (!strcmp(a->kw_names[k], name))
            return &a->kw[k];
    return NULL;
}

int args_check(struct render *r, const struct args *a, const char *fname, size_t n_max,
               const char *const *names)
{
    if (a->n_pos > n_max)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "%s() takes at most %zu arguments (%zu given)",
                           fname, n_max, a->n_pos);
    for (size_t k = 0; k < a->n_kw; k++) {
        bool ok = false;
        for (size_t i = 0; names && names[i]; i++)
            ok = ok || !strcmp(names[i], a->kw_names[k]);
        if (!ok)
            return render_fail(r, VLLMC_ERR_TEMPLATE,
                               "%s() got an unexpected keyword argument '%s'", fname,
                               a->kw_names[k]);
    }
    return 0;
}

static bool arg_bool(const struct args *a, size_t i, const char *name, bool dflt)
{
    const struct jv *v = args_get(a, i, name);
    return v ? jv_truthy(*v) : dflt;
}

static int arg_int(struct render *r, const struct args *a, size_t i, const char *name, int64_t dflt,
                   int64_t *out)
{
    const struct jv *v = args_get(a, i, name);
    *out = dflt;
    if (!v || v->kind == JV_NONE)
        return 0;
    if (v->kind == JV_INT || v->kind == JV_BOOL) {
        *out = v->kind == JV_INT ? v->u.i : v->u.b;
        return 0;
    }
    return render_fail(r, VLLMC_ERR_TEMPLATE, "argument '%s' must be an integer, not %s", name,
                       jv_type_name(*v));
}

static int arg_str(struct render *r, const struct args *a, size_t i, const char *name,
                   struct jv *out)
{
    const struct jv *v = args_get(a, i, name);
    if (!v || v->kind != JV_STR)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "argument '%s' must be a string", name);
    *out = *v;
    return 0;
}

// ---- shared pieces ----

static int to_str(struct render *r, struct jv v, struct jv *out)
{
    if (v.kind == JV_UNDEF) {
        *out = (struct jv){.kind = JV_STR, .u.s = NULL};
        return jv_str_new("", 0, out) ? 0 : render_oom(r);
    }
    return eval_to_str(r, v, out);
}

static int seq_items(struct render *r, struct jv v, struct jv *out)
{
    return eval_iter_items(r, v, out);
}

// Marks a filter's result as the generator jinja2 returns.
static int as_generator(struct jv *out)
{
    out->u.l->seq = SEQ_GENERATOR;
    return 0;
}

// Follows a dotted attribute path ("a.b", "0.name") with jinja2's getitem.
static int attr_path(struct render *r, struct jv item, const char *path, struct jv *out)
{
    struct jv cur = jv_retain(item);
    while (*path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        struct jv key, next;
        char *end;
        long long idx = strtoll(path, &end, 10);
        if (n && end == path + n)
            key = jv_int(idx);
        else if (!jv_str_new(path, n, &key)) {
            jv_release(cur);
            return render_oom(r);
        }
        int rc = eval_getitem(r, cur, key, &next);
        jv_release(key);
        jv_release(cur);
        if (rc)
            return -1;
        cur = next;
        path += n + (dot ? 1 : 0);
        if (!dot)
            break;
    }
    *out = cur;
    return 0;
}

// Sort key: lowercased strings unless case-sensitive.
static int sort_key(struct render *r, struct jv v, bool case_sensitive, struct jv *out)
{
    if (v.kind == JV_STR && !case_sensitive)
        return str_case(r, v, 1, out);
    *out = jv_retain(v);
    return 0;
}

// Stable merge sort of items by keys; fails on incomparable keys.
static int merge_sort(struct render *r, struct jv *items, struct jv *keys, size_t n, bool reverse)
{
    if (n < 2)
        return 0;
    struct jv *ti = mem_alloc(n * sizeof *ti), *tk = mem_alloc(n * sizeof *tk);
    if (!ti || !tk) {
        mem_free(ti);
        mem_free(tk);
        return render_oom(r);
    }
    int rc = 0;
    for (size_t width = 1; width < n && !rc; width *= 2) {
        for (size_t lo = 0; lo < n && !rc; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int c;
                if (!jv_compare(keys[j], keys[i], &c)) {
                    rc = render_fail(r, VLLMC_ERR_TEMPLATE,
                                     "'<' not supported between instances of '%s' and '%s'",
                                     jv_type_name(keys[j]), jv_type_name(keys[i]));
                    break;
                }
                bool take_right = reverse ? c > 0 : c < 0;
                if (c == 2)
                    take_right = false;
                if (take_right) {
                    ti[k] = items[j];
                    tk[k++] = keys[j++];
                } else {
                    ti[k] = items[i];
                    tk[k++] = keys[i++];
                }
            }
            if (rc)
                break;
            while (i < mid) {
                ti[k] = items[i];
                tk[k++] = keys[i++];
            }
            while (j < hi) {
                ti[k] = items[j];
                tk[k++] = keys[j++];
            }
            memcpy(items + lo, ti + lo, (hi - lo) * sizeof *ti);
            memcpy(keys + lo, tk + lo, (hi - lo) * sizeof *tk);
        }
    }
    mem_free(ti);
    mem_free(tk);
    return rc;
}

// ---- filters ----

struct filter {
    const char *name;
    int (*fn)(struct render *r, struct jv v, const struct args *a, struct jv *out);
    int8_t n_args_max; // -1: the filter checks its own arguments
    bool lazy;         // a generator in jinja2: runs when first walked
};

struct jv_thunk {
    const struct filter *f;
    struct jv subject;
    size_t n_pos, n_kw;
    struct jv *vals;       // [n_pos + n_kw], owned
    const char **kw_names; // [n_kw], names owned by the template or static
};

static int f_length(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    switch (v.kind) {
    case JV_UNDEF:
        *out = jv_int(0);
        return 0;
    case JV_STR:
        *out = jv_int((int64_t)jv_utf8_count(v.u.s->data, v.u.s->len));
        return 0;
    case JV_LIST:
        if (jv_is_iterator(v))
            break;
        *out = jv_int((int64_t)v.u.l->n);
        return 0;
    case JV_DICT:
        if (!v.u.d->ns) {
            *out = jv_int((int64_t)v.u.d->n);
            return 0;
        }
        break;
    default:
        break;
    }
    return render_fail(r, VLLMC_ERR_TEMPLATE, "object of type '%s' has no len()", jv_type_name(v));
}

static int f_default(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"default_value", "boolean", NULL};
    if (args_check(r, a, "default", 2, names))
        return -1;
    const struct jv *d = args_get(a, 0, "default_value");
    bool boolean = arg_bool(a, 1, "boolean", false);
    if (v.kind == JV_UNDEF || (boolean && !jv_truthy(v))) {
        if (d)
            *out = jv_retain(*d);
        else if (!jv_str_new("", 0, out))
            return render_oom(r);
        return 0;
    }
    *out = jv_retain(v);
    return 0;
}

// upper, lower, capitalize, title: the value as a string, then str_case with
// the mode each names (jinja2's title starts words after runs of `-`,
// whitespace or opening brackets).
static int case_filter(struct render *r, struct jv v, int mode, struct jv *out)
{
    struct jv s;
    if (to_str(r, v, &s))
        return -1;
    int rc = str_case(r, s, mode, out);
    jv_release(s);
    return rc;
}

static int f_upper(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    return case_filter(r, v, 0, out);
}

static int f_lower(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    return case_filter(r, v, 1, out);
}

static int f_capitalize(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    return case_filter(r, v, 3, out);
}

static int f_title(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    return case_filter(r, v, 4, out);
}

static int f_trim(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"chars", NULL};
    if (args_check(r, a, "trim", 1, names))
        return -1;
    struct jv s;
    if (to_str(r, v, &s))
        return -1;
    int rc = str_strip(r, s, args_get(a, 0, "chars"), 3, out);
    jv_release(s);
    return rc;
}

static int f_replace(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"old", "new", "count", NULL};
    struct jv s, old = jv_undef(), nw = jv_undef();
    int64_t count;
    if (args_check(r, a, "replace", 3, names) || arg_str(r, a, 0, "old", &old) ||
        arg_str(r, a, 1, "new", &nw) || arg_int(r, a, 2, "count", -1, &count))
        return -1;
    if (to_str(r, v, &s))
        return -1;
    int rc = str_replace(r, s, old, nw, count, out);
    jv_release(s);
    return rc;
}

static int f_string(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    return to_str(r, v, out);
}

static int f_safe(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    if (to_str(r, v, out))
        return -1;
    return jv_mark(out) ? 0 : (jv_release(*out), render_oom(r));
}

static int escape_common(struct render *r, struct jv v, struct jv *out, bool force)
{
    if (v.kind == JV_STR && v.u.s->markup && !force) {
        *out = jv_retain(v);
        return 0;
    }
    struct jv s;
    if (v.kind == JV_NONE)
        return jv_str_new("None", 4, out) && jv_mark(out) ? 0 : render_oom(r);
    if (to_str(r, v, &s))
        return -1;
    struct sbuf b;
    sbuf_init(&b);
    html_escape(&b, s.u.s->data, s.u.s->len);
    jv_release(s);
    if (!b.p && !b.oom)
        sbuf_put(&b, "", 0);
    if (!(b.p ? sbuf_to_jv(&b, out) : jv_str_new("", 0, out)))
        return render_oom(r);
    return jv_mark(out) ? 0 : render_oom(r);
}

static int f_escape(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    return escape_common(r, v, out, false);
}

static int f_forceescape(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    return escape_common(r, v, out, true);
}

static int f_join(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"d", "attribute", NULL};
    if (args_check(r, a, "join", 2, names))
        return -1;
    const struct jv *d = args_get(a, 0, "d");
    const struct jv *attr = args_get(a, 1, "attribute");
    struct jv items, sep = jv_undef();
    if (d && d->kind != JV_UNDEF && eval_to_str(r, *d, &sep))
        return -1;
    if (seq_items(r, v, &items)) {
        jv_release(sep);
        return -1;
    }
    struct sbuf b;
    sbuf_init(&b);
    int rc = 0;
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        if (i && sep.kind == JV_STR)
            sbuf_put(&b, sep.u.s->data, sep.u.s->len);
        struct jv it = jv_retain(items.u.l->items[i]);
        if (attr && attr->kind == JV_STR) {
            struct jv x;
            rc = attr_path(r, it, attr->u.s->data, &x);
            jv_release(it);
            if (rc)
                break;
            it = x;
        }
        if (!jv_write(&b, it, 0))
            rc = render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: cannot join a %s value",
                             jv_type_name(it));
        jv_release(it);
        if (b.len > RENDER_OUTPUT_MAX)
            rc = render_fail(r, VLLMC_ERR_CAPACITY, "string too large");
    }
    jv_release(items);
    jv_release(sep);
    if (rc) {
        sbuf_free(&b);
        return -1;
    }
    return sbuf_to_jv(&b, out) ? 0 : render_oom(r);
}

static int f_first_last(struct render *r, struct jv v, struct jv *out, bool last)
{
    if (jv_is_iterator(v) && !last) {
        struct jv_list *l = v.u.l;
        if (gen_force(r, l))
            return -1;
        if (l->pos < l->n)
            *out = jv_retain(l->items[l->pos++]);
        else if (!jv_undef_msg(out, "No first item, sequence was empty."))
            return render_oom(r);
        return 0;
    }
    if (jv_is_iterator(v))
        return render_fail(r, VLLMC_ERR_TEMPLATE, "'%s' object is not reversible", jv_type_name(v));
    struct jv items;
    if (seq_items(r, v, &items))
        return -1;
    size_t n = items.u.l->n;
    if (n)
        *out = jv_retain(items.u.l->items[last ? n - 1 : 0]);
    jv_release(items);
    if (!n && !jv_undef_msg(out, "No %s item, sequence was empty.", last ? "last" : "first"))
        return render_oom(r);
    return 0;
}

static int f_first(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    return f_first_last(r, v, out, false);
}

static int f_last(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    return f_first_last(r, v, out, true);
}

static int f_list(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    struct jv items;
    if (seq_items(r, v, &items))
        return -1;
    if (!items.u.l->tuple && items.u.l != v.u.l) {
        *out = items;
        return 0;
    }
    if (!jv_list_new(items.u.l->n, false, out)) {
        jv_release(items);
        return render_oom(r);
    }
    for (size_t i = 0; i < items.u.l->n; i++)
        jv_list_push(out->u.l, jv_retain(items.u.l->items[i]));
    jv_release(items);
    return 0;
}

static int f_items(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    if (v.kind == JV_UNDEF)
        return jv_list_new(0, false, out) ? as_generator(out) : render_oom(r);
    if (v.kind != JV_DICT || v.u.d->ns)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "Can only get item pairs from a mapping.");
    if (!jv_list_new(v.u.d->n, false, out))
        return render_oom(r);
    for (size_t i = 0; i < v.u.d->n; i++) {
        struct jv pair;
        if (!jv_list_new(2, true, &pair)) {
            jv_release(*out);
            return render_oom(r);
        }
        jv_list_push(pair.u.l, jv_retain(v.u.d->keys[i]));
        jv_list_push(pair.u.l, jv_retain(v.u.d->vals[i]));
        jv_list_push(out->u.l, pair);
    }
    return as_generator(out);
}

static int f_tojson(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    // transformers' signature: tojson(x, ensure_ascii=False, indent=None,
    // separators=None, sort_keys=False).
    if (args_check(r, a, "tojson", 4, names))
        return -1;
    struct jv_json_opts o = {.indent = -1};
    o.ensure_ascii = arg_bool(a, 0, "ensure_ascii", false);
    o.sort_keys = arg_bool(a, 3, "sort_keys", false);
    const struct jv *ind = args_get(a, 1, "indent");
    if (ind && ind->kind != JV_NONE) {
        if (ind->kind != JV_INT)
            return render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: non-integer tojson indent");
        o.indent = ind->u.i < 0 ? 0 : ind->u.i > 64 ? 64 : (int)ind->u.i;
    }
    const struct jv *sep = args_get(a, 2, "separators");
    if (sep && sep->kind != JV_NONE) {
        if (sep->kind != JV_LIST || sep->u.l->n != 2 || sep->u.l->items[0].kind != JV_STR ||
            sep->u.l->items[1].kind != JV_STR)
            return render_fail(r, VLLMC_ERR_TEMPLATE, "separators must be a pair of strings");
        o.item_sep = sep->u.l->items[0].u.s->data;
        o.key_sep = sep->u.l->items[1].u.s->data;
    }
    struct sbuf b;
    sbuf_init(&b);
    const char *why = NULL;
    if (!jv_json_dump(&b, v, &o, 0, &why)) {
        sbuf_free(&b);
        return render_fail(r, VLLMC_ERR_TEMPLATE, "%s", why ? why : "cannot serialize to JSON");
    }
    if (b.len > RENDER_OUTPUT_MAX) {
        sbuf_free(&b);
        return render_fail(r, VLLMC_ERR_CAPACITY, "string too large");
    }
    return sbuf_to_jv(&b, out) ? 0 : render_oom(r);
}

// Parses a Python int literal as int(s, base) does; false when invalid.
static bool parse_py_int(const char *s, size_t n, int64_t base, int64_t *out)
{
    size_t i = 0;
    while (i < n && py_isspace((unsigned char)s[i]))
        i++;
    while (n > i && py_isspace((unsigned char)s[n - 1]))
        n--;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        neg = s[i++] == '-';
    if (base == 0 || base == 16 || base == 8 || base == 2) {
        if (i + 1 < n && s[i] == '0') {
            char x = s[i + 1] | 0x20;
            int64_t pb = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 0;
            if (pb && (base == 0 || base == pb)) {
                base = pb;
                i += 2;
                if (i < n && s[i] == '_')
                    i++;
            }
        }
        if (base == 0)
            base = 10;
    }
    if (base < 2 || base > 36 || i >= n)
        return false;
    int64_t v = 0;
    bool prev_us = true;
    for (; i < n; i++) {
        char c = s[i];
        if (c == '_' && !prev_us) {
            prev_us = true;
            continue;
        }
        int d = c >= '0' && c <= '9'                     ? c - '0'
                : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10
                                                         : 99;
        if (d >= base)
            return false;
        if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v))
            return false;
        prev_us = false;
    }
    if (prev_us)
        return false;
    *out = neg ? -v : v;
    return true;
}

static bool parse_py_float(const char *s, size_t n, double *out)
{
    char buf[128];
    size_t k = 0;
    size_t i = 0;
    while (i < n && py_isspace((unsigned char)s[i]))
        i++;
    while (n > i && py_isspace((unsigned char)s[n - 1]))
        n--;
    if (i >= n || n - i >= sizeof buf)
        return false;
    for (; i < n; i++) {
        if (s[i] == '_')
            continue;
        buf[k++] = s[i];
    }
    buf[k] = 0;
    char *end;
    *out = strtod(buf, &end);
    return k && *end == 0 && !(buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X'));
}

static int f_int(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"default", "base", NULL};
    int64_t base, i;
    double f;
    if (args_check(r, a, "int", 2, names) || arg_int(r, a, 1, "base", 10, &base))
        return -1;
    const struct jv *d = args_get(a, 0, "default");
    if (v.kind == JV_UNDEF)
        return eval_undef_fail(r, v); // int(Undefined) raises, not a TypeError
    switch (v.kind) {
    case JV_INT:
    case JV_BOOL:
        *out = jv_int(v.kind == JV_INT ? v.u.i : v.u.b);
        return 0;
    case JV_FLOAT:
        if (isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) {
            *out = jv_int((int64_t)v.u.f);
            return 0;
        }
        break;
    case JV_STR:
        if (parse_py_int(v.u.s->data, v.u.s->len, base, &i)) {
            *out = jv_int(i);
            return 0;
        }
        if (parse_py_float(v.u.s->data, v.u.s->len, &f) && isfinite(f) && fabs(f) < 9.2e18) {
            *out = jv_int((int64_t)f);
            return 0;
        }
        break;
    default:
        break;
    }
    *out = d ? jv_retain(*d) : jv_int(0);
    return 0;
}

static int f_float(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"default", NULL};
    if (args_check(r, a, "float", 1, names))
        return -1;
    const struct jv *d = args_get(a, 0, "default");
    double f;
    if (v.kind == JV_UNDEF)
        return eval_undef_fail(r, v);
    if (v.kind == JV_INT || v.kind == JV_BOOL || v.kind == JV_FLOAT) {
        *out = jv_float(v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.u.b);
        return 0;
    }
    if (v.kind == JV_STR && parse_py_float(v.u.s->data, v.u.s->len, &f)) {
        *out = jv_float(f);
        return 0;
    }
    *out = d ? jv_retain(*d) : jv_float(0.0);
    return 0;
}

static int f_abs(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    if (v.kind == JV_FLOAT) {
        *out = jv_float(fabs(v.u.f));
        return 0;
    }
    if ((v.kind == JV_INT && v.u.i != INT64_MIN) || v.kind == JV_BOOL) {
        int64_t i = v.kind == JV_INT ? v.u.i : v.u.b;
        *out = jv_int(i < 0 ? -i : i);
        return 0;
    }
    return render_fail(r, VLLMC_ERR_TEMPLATE, "bad operand type for abs(): '%s'", jv_type_name(v));
}

static int f_round(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"precision", "method", NULL};
    int64_t prec;
    if (args_check(r, a, "round", 2, names) || arg_int(r, a, 0, "precision", 0, &prec))
        return -1;
    const struct jv *m = args_get(a, 1, "method");
    const char *method = m && m->kind == JV_STR ? m->u.s->data : "common";
    if (v.kind != JV_FLOAT && v.kind != JV_INT && v.kind != JV_BOOL)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "type %s doesn't define __round__ method",
                           jv_type_name(v));
    if (prec < -300 || prec > 300)
        return render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: round precision %lld",
                           (long long)prec);
    double x = v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.u.b;
    double scale = pow(10.0, (double)prec), y;
    if (!strcmp(method, "common")) {
        if (v.kind != JV_FLOAT) {
            // round(int, n) stays an int: exact, half to even.
            int64_t i = v.kind == JV_INT ? v.u.i : v.u.b, p = 1;
            for (int64_t k = 0; k < -prec && p; k++)
                p = p <= INT64_MAX / 10 ? p * 10 : 0;
            if (prec < 0 && !p) {
                *out = jv_int(0);
                return 0;
            }
            if (prec < 0) {
                int64_t q = i / p, rem = i % p;
                if (rem < 0) {
                    q -= 1;
                    rem += p;
                }
                if (rem * 2 > p || (rem * 2 == p && (q & 1)))
                    q += 1;
                i = q * p;
            }
            *out = jv_int(i);
            return 0;
        }
        if (prec >= 0) {
            // Python rounds the exact binary value to prec decimals, half to
            // even, as printf does.
            char buf[1024];
            snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
            y = strtod(buf, NULL);
        } else {
            double t = x / pow(10.0, (double)-prec), fl = floor(t), diff = t - fl;
            y = diff > 0.5 ? fl + 1 : diff < 0.5 ? fl : (fmod(fl, 2.0) == 0 ? fl : fl + 1);
            y *= pow(10.0, (double)-prec);
        }
    } else if (!strcmp(method, "ceil")) {
        y = ceil(x * scale) / scale;
    } else if (!strcmp(method, "floor")) {
        y = floor(x * scale) / scale;
    } else {
        return render_fail(r, VLLMC_ERR_TEMPLATE, "method must be common, ceil or floor");
    }
    *out = jv_float(y);
    return 0;
}

static int f_unique(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"case_sensitive", "attribute", NULL};
    if (args_check(r, a, "unique", 2, names))
        return -1;
    bool cs = arg_bool(a, 0, "case_sensitive", false);
    const struct jv *attr = args_get(a, 1, "attribute");
    struct jv items, seen;
    if (seq_items(r, v, &items))
        return -1;
    if (!jv_list_new(0, false, out) || !jv_list_new(0, false, &seen)) {
        jv_release(items);
        return render_oom(r);
    }
    int rc = 0;
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        struct jv it = items.u.l->items[i], k0, k;
        if (attr && attr->kind == JV_STR)
            rc = attr_path(r, it, attr->u.s->data, &k0);
        else
            k0 = jv_retain(it);
        if (rc)
            break;
        rc = sort_key(r, k0, cs, &k);
        jv_release(k0);
        if (rc)
            break;
        bool dup = false;
        for (size_t j = 0; j < seen.u.l->n && !dup; j++)
            dup = jv_equal(seen.u.l->items[j], k);
        if (dup) {
            jv_release(k);
            continue;
        }
        if (!jv_list_push(seen.u.l, k) || !jv_list_push(out->u.l, jv_retain(it)))
            rc = render_oom(r);
    }
    jv_release(items);
    jv_release(seen);
    if (rc)
        jv_release(*out);
    return rc ? rc : as_generator(out);
}

static int sort_list(struct render *r, struct jv items, bool reverse, bool cs,
                     const struct jv *attr, struct jv *out)
{
    size_t n = items.u.l->n;
    struct jv *keys = mem_calloc(n + 1, sizeof *keys);
    if (!keys || !jv_list_new(n, false, out)) {
        mem_free(keys);
        return render_oom(r);
    }
    int rc = 0;
    size_t nk = 0;
    for (; nk < n && !rc; nk++) {
        struct jv it = items.u.l->items[nk], k0;
        if (attr && attr->kind == JV_STR)
            rc = attr_path(r, it, attr->u.s->data, &k0);
        else
            k0 = jv_retain(it);
        if (rc)
            break;
        rc = sort_key(r, k0, cs, &keys[nk]);
        jv_release(k0);
        if (rc)
            break;
        jv_list_push(out->u.l, jv_retain(it));
    }
    if (!rc)
        rc = merge_sort(r, out->u.l->items, keys, n, reverse);
    for (size_t i = 0; i < nk; i++)
        jv_release(keys[i]);
    mem_free(keys);
    if (rc)
        jv_release(*out);
    return rc;
}

static int f_sort(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"reverse", "case_sensitive", "attribute", NULL};
    if (args_check(r, a, "sort", 3, names))
        return -1;
    struct jv items;
    if (seq_items(r, v, &items))
        return -1;
    int rc = sort_list(r, items, arg_bool(a, 0, "reverse", false),
                       arg_bool(a, 1, "case_sensitive", false), args_get(a, 2, "attribute"), out);
    jv_release(items);
    return rc;
}

static int f_dictsort(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"case_sensitive", "by", "reverse", NULL};
    if (args_check(r, a, "dictsort", 3, names))
        return -1;
    struct jv pairs, attr;
    if (v.kind == JV_UNDEF)
        return eval_undef_fail(r, v);
    if (f_items(r, v, a, &pairs))
        return -1;
    const struct jv *by = args_get(a, 1, "by");
    bool by_value = by && by->kind == JV_STR && !strcmp(by->u.s->data, "value");
    if (!jv_str_cstr(by_value ? "1" : "0", &attr)) {
        jv_release(pairs);
        return render_oom(r);
    }
    int rc = sort_list(r, pairs, arg_bool(a, 2, "reverse", false),
                       arg_bool(a, 0, "case_sensitive", false), &attr, out);
    jv_release(attr);
    jv_release(pairs);
    return rc;
}

static int f_reverse(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    if (v.kind == JV_STR) {
        struct sbuf b;
        sbuf_init(&b);
        size_t i = v.u.s->len;
        while (i > 0) {
            size_t start = i - 1;
            while (start > 0 && ((unsigned char)v.u.s->data[start] & 0xC0) == 0x80)
                start--;
            sbuf_put(&b, v.u.s->data + start, i - start);
            i = start;
        }
        return sbuf_to_jv(&b, out) ? 0 : render_oom(r);
    }
    // reversed() when the value allows it (an iterator over it); an
    // iterator itself becomes a reversed list.
    bool was_iter = jv_is_iterator(v);
    struct jv items;
    if (seq_items(r, v, &items))
        return -1;
    if (!jv_list_new(items.u.l->n, false, out)) {
        jv_release(items);
        return render_oom(r);
    }
    for (size_t i = items.u.l->n; i > 0; i--)
        jv_list_push(out->u.l, jv_retain(items.u.l->items[i - 1]));
    jv_release(items);
    if (!was_iter)
        out->u.l->seq = SEQ_REVERSED;
    return 0;
}

// select/reject/selectattr/rejectattr/map share this walk.
static int select_common(struct render *r, struct jv v, const struct args *a, struct jv *out,
                         bool attr_mode, bool keep_when)
{
    struct jv items;
    size_t first_arg = attr_mode ? 1 : 0;
    const struct jv *attr = attr_mode ? args_get(a, 0, NULL) : NULL;
    if (attr_mode && (!attr || attr->kind != JV_STR))
        return render_fail(r, VLLMC_ERR_TEMPLATE, "missing attribute name");
    const struct jv *test = args_get(a, first_arg, NULL);
    if (test && test->kind != JV_STR)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "test name must be a string");
    if (test && !test_exists(test->u.s->data))
        return render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported test '%s'", test->u.s->data);
    struct args ta = {0};
    if (a->n_pos > first_arg + 1) {
        ta.n_pos = a->n_pos - first_arg - 1;
        ta.pos = a->pos + first_arg + 1;
    }
    // jinja2 walks the value only `if value:`, so none and other false
    // values select nothing.
    if (!jv_truthy(v))
        return jv_list_new(0, false, out) ? as_generator(out) : render_oom(r);
    if (seq_items(r, v, &items))
        return -1;
    if (!jv_list_new(0, false, out)) {
        jv_release(items);
        return render_oom(r);
    }
    int rc = 0;
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        struct jv it = items.u.l->items[i], x;
        if (attr)
            rc = attr_path(r, it, attr->u.s->data, &x);
        else
            x = jv_retain(it);
        if (rc)
            break;
        bool res;
        if (test)
            rc = test_apply(r, test->u.s->data, x, &ta, &res);
        else
            res = jv_truthy(x);
        jv_release(x);
        if (!rc && res == keep_when && !jv_list_push(out->u.l, jv_retain(it)))
            rc = render_oom(r);
    }
    jv_release(items);
    if (rc)
        jv_release(*out);
    return rc ? rc : as_generator(out);
}

static int f_select(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    return select_common(r, v, a, out, false, true);
}

static int f_reject(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    return select_common(r, v, a, out, false, false);
}

static int f_selectattr(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    return select_common(r, v, a, out, true, true);
}

static int f_rejectattr(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    return select_common(r, v, a, out, true, false);
}

static int f_map(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    const struct jv *attr = args_get(a, SIZE_MAX, "attribute");
    const struct jv *dflt = args_get(a, SIZE_MAX, "default");
    const struct jv *fname = a->n_pos ? &a->pos[0] : NULL;
    if (!attr && (!fname || fname->kind != JV_STR))
        return render_fail(r, VLLMC_ERR_TEMPLATE, "map requires a filter name or attribute=");
    if (!attr && !filter_exists(fname->u.s->data))
        return render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported filter '%s'", fname->u.s->data);
    struct args fa = {0};
    if (!attr && a->n_pos > 1) {
        fa.n_pos = a->n_pos - 1;
        fa.pos = a->pos + 1;
    }
    if (!attr) {
        fa.n_kw = a->n_kw;
        fa.kw = a->kw;
        fa.kw_names = a->kw_names;
    }
    struct jv items;
    if (!jv_truthy(v))
        return jv_list_new(0, false, out) ? as_generator(out) : render_oom(r);
    if (seq_items(r, v, &items))
        return -1;
    if (!jv_list_new(items.u.l->n, false, out)) {
        jv_release(items);
        return render_oom(r);
    }
    int rc = 0;
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        struct jv x;
        if (attr) {
            if (attr->kind != JV_STR) {
                rc = render_fail(r, VLLMC_ERR_TEMPLATE, "attribute must be a string");
                break;
            }
            rc = attr_path(r, items.u.l->items[i], attr->u.s->data, &x);
            if (!rc && x.kind == JV_UNDEF && dflt) {
                jv_release(x);
                x = jv_retain(*dflt);
            }
        } else {
            rc = filter_apply(r, fname->u.s->data, items.u.l->items[i], &fa, &x);
        }
        if (!rc && !jv_list_push(out->u.l, x))
            rc = render_oom(r);
    }
    jv_release(items);
    if (rc)
        jv_release(*out);
    return rc ? rc : as_generator(out);
}

static int f_minmax(struct render *r, struct jv v, const struct args *a, struct jv *out,
                    bool want_max)
{
    static const char *const names[] = {"case_sensitive", "attribute", NULL};
    if (args_check(r, a, want_max ? "max" : "min", 2, names))
        return -1;
    struct jv sorted, items;
    if (seq_items(r, v, &items))
        return -1;
    int rc = sort_list(r, items, want_max, arg_bool(a, 0, "case_sensitive", false),
                       args_get(a, 1, "attribute"), &sorted);
    jv_release(items);
    if (rc)
        return -1;
    if (sorted.u.l->n)
        *out = jv_retain(sorted.u.l->items[0]);
    else if (!jv_undef_msg(out, "No aggregated item, sequence was empty."))
        rc = render_oom(r);
    jv_release(sorted);
    return rc;
}

static int f_max(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    return f_minmax(r, v, a, out, true);
}

static int f_min(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    return f_minmax(r, v, a, out, false);
}

static int f_sum(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"attribute", "start", NULL};
    if (args_check(r, a, "sum", 2, names))
        return -1;
    const struct jv *attr = args_get(a, 0, "attribute");
    const struct jv *start = args_get(a, 1, "start");
    struct jv items, acc = start ? jv_retain(*start) : jv_int(0);
    if (seq_items(r, v, &items))
        return -1;
    int rc = 0;
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        struct jv x, y;
        if (attr && attr->kind == JV_STR)
            rc = attr_path(r, items.u.l->items[i], attr->u.s->data, &x);
        else
            x = jv_retain(items.u.l->items[i]);
        if (rc)
            break;
        rc = eval_binop(r, OP_ADD, acc, x, &y);
        jv_release(x);
        if (!rc) {
            jv_release(acc);
            acc = y;
        }
    }
    jv_release(items);
    if (rc) {
        jv_release(acc);
        return -1;
    }
    *out = acc;
    return 0;
}

static int f_batch(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"linecount", "fill_with", NULL};
    int64_t n;
    if (args_check(r, a, "batch", 2, names) || arg_int(r, a, 0, "linecount", 1, &n))
        return -1;
    if (n <= 0)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "batch size must be positive");
    const struct jv *fill = args_get(a, 1, "fill_with");
    struct jv items, row = jv_undef();
    if (seq_items(r, v, &items))
        return -1;
    if (!jv_list_new(0, false, out)) {
        jv_release(items);
        return render_oom(r);
    }
    bool ok = true;
    for (size_t i = 0; i < items.u.l->n && ok; i++) {
        if (row.kind != JV_LIST)
            ok = jv_list_new(0, false, &row);
        ok = ok && jv_list_push(row.u.l, jv_retain(items.u.l->items[i]));
        if (ok && row.u.l->n == (size_t)n) {
            ok = jv_list_push(out->u.l, row);
            row = jv_undef();
        }
    }
    if (ok && row.kind == JV_LIST) {
        while (fill && ok && row.u.l->n < (size_t)n)
            ok = jv_list_push(row.u.l, jv_retain(*fill));
        ok = ok && jv_list_push(out->u.l, row);
    } else {
        jv_release(row);
    }
    jv_release(items);
    if (!ok) {
        jv_release(*out);
        return render_oom(r);
    }
    return as_generator(out);
}

static int f_indent(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"width", "first", "blank", NULL};
    if (args_check(r, a, "indent", 3, names))
        return -1;
    const struct jv *w = args_get(a, 0, "width");
    bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
    if (v.kind == JV_UNDEF)
        return eval_undef_fail(r, v); // jinja2 appends "\n" to it first
    if (v.kind != JV_STR)
        return render_fail(r, VLLMC_ERR_TEMPLATE,
                           "unsupported operand type(s) for +=: '%s' and 'str'", jv_type_name(v));
    struct sbuf ind;
    sbuf_init(&ind);
    if (w && w->kind == JV_STR) {
        sbuf_put(&ind, w->u.s->data, w->u.s->len);
    } else {
        int64_t n = 4;
        if (w && (w->kind == JV_INT || w->kind == JV_BOOL))
            n = w->kind == JV_INT ? w->u.i : w->u.b;
        else if (w)
            return render_fail(r, VLLMC_ERR_TEMPLATE, "indent width must be int or str");
        for (int64_t i = 0; i < n && i < 4096; i++)
            sbuf_putc(&ind, ' ');
    }
    struct jv s;
    if (to_str(r, v, &s)) {
        sbuf_free(&ind);
        return -1;
    }
    bool markup = s.u.s->markup;
    if (markup && ind.len) {
        // Markup("\n") + indention escapes the indentation text.
        struct sbuf esc;
        sbuf_init(&esc);
        html_escape(&esc, ind.p, ind.len);
        sbuf_free(&ind);
        ind = esc;
    }
    // jinja2 appends a newline, then splitlines(): a trailing newline does
    // not produce an indented empty line.
    struct sbuf src, b;
    sbuf_init(&src);
    sbuf_init(&b);
    sbuf_put(&src, s.u.s->data, s.u.s->len);
    sbuf_putc(&src, '\n');
    jv_release(s);
    size_t i = 0, line_no = 0;
    while (!src.oom && i < src.len) {
        size_t end, next = py_splitlines(src.p, src.len, i, &end);
        if (line_no > 0) {
            sbuf_putc(&b, '\n');
            if (blank || end > i)
                sbuf_put(&b, ind.p ? ind.p : "", ind.len);
        } else if (first) {
            sbuf_put(&b, ind.p ? ind.p : "", ind.len);
        }
        sbuf_put(&b, src.p + i, end - i);
        i = next;
        line_no++;
    }
    if (line_no == 0 && first)
        sbuf_put(&b, ind.p ? ind.p : "", ind.len);
    bool oom = src.oom || ind.oom;
    sbuf_free(&src);
    sbuf_free(&ind);
    if (oom) {
        sbuf_free(&b);
        return render_oom(r);
    }
    if (!(b.p ? sbuf_to_jv(&b, out) : jv_str_new("", 0, out)))
        return render_oom(r);
    return !markup || jv_mark(out) ? 0 : (jv_release(*out), render_oom(r));
}

static int f_wordcount(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    (void)a;
    struct jv s;
    if (to_str(r, v, &s))
        return -1;
    int64_t n = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.u.s->len;) {
        size_t adv;
        int32_t cp = jv_utf8_decode(s.u.s->data + i, s.u.s->len - i, &adv);
        bool w = py_isalnum(cp) || cp == '_';
        if (w && !in_word)
            n++;
        in_word = w;
        i += adv;
    }
    jv_release(s);
    *out = jv_int(n);
    return 0;
}

static int f_truncate(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"length", "killwords", "end", "leeway", NULL};
    int64_t length, leeway;
    if (args_check(r, a, "truncate", 4, names) || arg_int(r, a, 0, "length", 255, &length) ||
        arg_int(r, a, 3, "leeway", 5, &leeway))
        return -1;
    bool killwords = arg_bool(a, 1, "killwords", false);
    if (v.kind != JV_STR) {
        // len() decides first: short sized values come back as they are.
        struct jv len;
        struct args none = {0};
        if (v.kind != JV_UNDEF && f_length(r, v, &none, &len))
            return -1;
        if (v.kind == JV_UNDEF || len.u.i <= length + leeway) {
            *out = jv_retain(v);
            return 0;
        }
        return render_fail(r, VLLMC_ERR_TEMPLATE, "cannot truncate a %s", jv_type_name(v));
    }
    const struct jv *endv = args_get(a, 2, "end");
    const char *end = endv && endv->kind == JV_STR ? endv->u.s->data : "...";
    size_t end_len = jv_utf8_count(end, strlen(end));
    struct jv s;
    if (to_str(r, v, &s))
        return -1;
    size_t n = jv_utf8_count(s.u.s->data, s.u.s->len);
    if (length < (int64_t)end_len || leeway < 0) {
        jv_release(s);
        return render_fail(r, VLLMC_ERR_TEMPLATE, "expected length >= %zu, got %lld", end_len,
                           (long long)length);
    }
    if ((int64_t)n <= length + leeway) {
        *out = s;
        return 0;
    }
    size_t cut = jv_utf8_offset(s.u.s->data, s.u.s->len, (size_t)length - end_len);
    if (!killwords) {
        size_t k = cut;
        while (k > 0 && s.u.s->data[k - 1] != ' ')
            k--;
        if (k > 0)
            cut = k - 1;
    }
    struct sbuf b;
    sbuf_init(&b);
    sbuf_put(&b, s.u.s->data, cut);
    bool markup = s.u.s->markup;
    if (markup)
        html_escape(&b, end, strlen(end)); // Markup + end escapes end
    else
        sbuf_puts(&b, end);
    jv_release(s);
    if (!sbuf_to_jv(&b, out))
        return render_oom(r);
    return !markup || jv_mark(out) ? 0 : (jv_release(*out), render_oom(r));
}

static int f_center(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    static const char *const names[] = {"width", NULL};
    int64_t width;
    if (args_check(r, a, "center", 1, names) || arg_int(r, a, 0, "width", 80, &width))
        return -1;
    struct jv s;
    if (to_str(r, v, &s))
        return -1;
    int64_t n = (int64_t)jv_utf8_count(s.u.s->data, s.u.s->len);
    if (width <= n || width > 100000) {
        *out = s;
        return 0;
    }
    // Python's str.center: the extra space goes left when the margin and the
    // width are both odd.
    int64_t marg = width - n, left = marg / 2 + (marg & width & 1);
    struct sbuf b;
    sbuf_init(&b);
    for (int64_t i = 0; i < left; i++)
        sbuf_putc(&b, ' ');
    sbuf_put(&b, s.u.s->data, s.u.s->len);
    for (int64_t i = 0; i < marg - left; i++)
        sbuf_putc(&b, ' ');
    bool markup = s.u.s->markup;
    jv_release(s);
    if (!sbuf_to_jv(&b, out))
        return render_oom(r);
    return !markup || jv_mark(out) ? 0 : (jv_release(*out), render_oom(r));
}

// format(value, *args, **kwargs): soft_str(value) % (kwargs or args).
static int f_format(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    if (a->n_pos && a->n_kw)
        return render_fail(r, VLLMC_ERR_TEMPLATE,
                           "can't handle positional and keyword arguments at the same time");
    struct jv s, fa;
    if (to_str(r, v, &s))
        return -1;
    bool made = a->n_kw ? jv_dict_new(false, &fa) : jv_list_new(a->n_pos, true, &fa);
    bool ok = made;
    for (size_t i = 0; ok && i < a->n_kw; i++) {
        struct jv key;
        ok = jv_str_cstr(a->kw_names[i], &key) && jv_dict_set(fa.u.d, key, jv_retain(a->kw[i]));
    }
    for (size_t i = 0; ok && !a->n_kw && i < a->n_pos; i++)
        ok = jv_list_push(fa.u.l, jv_retain(a->pos[i]));
    int rc = ok ? 0 : render_oom(r);
    if (!rc && s.u.s->markup)
        rc = render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: format of Markup");
    if (!rc)
        rc = str_percent(r, s, fa, out);
    if (made)
        jv_release(fa);
    jv_release(s);
    return rc;
}

// attr() reads Python attributes only (methods, loop fields), never items.
static int f_attr(struct render *r, struct jv v, const struct args *a, struct jv *out)
{
    struct jv name = jv_undef();
    if (arg_str(r, a, 0, "name", &name))
        return -1;
    if (v.kind == JV_UNDEF)
        return eval_undef_fail(r, v);
    if (v.kind == JV_LOOP || (v.kind == JV_DICT && v.u.d->ns))
        return eval_getattr(r, v, name.u.s->data, name.u.s->len, out);
    if (method_lookup(r, v, name.u.s->data, out))
        return -1;
    if (out->kind != JV_UNDEF)
        return 0;
    bool ok = v.kind == JV_NONE ? jv_undef_msg(out, "'None' has no attribute '%s'", name.u.s->data)
                                : jv_undef_msg(out, "'%s object' has no attribute '%s'",
                                               jv_type_name(v), name.u.s->data);
    return ok ? 0 : render_oom(r);
}

static const struct filter filters[] = {
    {"abs", f_abs, 0, false},
    {"attr", f_attr, 1, false},
    {"batch", f_batch, -1, true},
    {"capitalize", f_capitalize, 0, false},
    {"center", f_center, -1, false},
    {"count", f_length, 0, false},
    {"d", f_default, -1, false},
    {"default", f_default, -1, false},
    {"dictsort", f_dictsort, -1, false},
    {"e", f_escape, 0, false},
    {"escape", f_escape, 0, false},
    {"first", f_first, 0, false},
    {"float", f_float, -1, false},
    {"forceescape", f_forceescape, 0, false},
    {"format", f_format, -1, false},
    {"indent", f_indent, -1, false},
    {"int", f_int, -1, false},
    {"items", f_items, 0, true},
    {"join", f_join, -1, false},
    {"last", f_last, 0, false},
    {"length", f_length, 0, false},
    {"list", f_list, 0, false},
    {"lower", f_lower, 0, false},
    {"map", f_map, -1, true},
    {"max", f_max, -1, false},
    {"min", f_min, -1, false},
    {"reject", f_reject, -1, true},
    {"rejectattr", f_rejectattr, -1, true},
    {"replace", f_replace, -1, false},
    {"reverse", f_reverse, 0, false},
    {"round", f_round, -1, false},
    {"safe", f_safe, 0, false},
    {"select", f_select, -1, true},
    {"selectattr", f_selectattr, -1, true},
    {"sort", f_sort, -1, false},
    {"string", f_string, 0, false},
    {"sum", f_sum, -1, false},
    {"title", f_title, 0, false},
    {"tojson", f_tojson, -1, false},
    {"trim", f_trim, -1, false},
    {"truncate", f_truncate, -1, false},
    {"unique", f_unique, -1, true},
    {"upper", f_upper, 0, false},
    {"wordcount", f_wordcount, 0, false},
};

void gen_thunk_free(struct jv_thunk *t)
{
    jv_release(t->subject);
    for (size_t i = 0; i < t->n_pos + t->n_kw; i++)
        jv_release(t->vals[i]);
    mem_free(t->vals);
    mem_free(t->kw_names);
    mem_free(t);
}

// A generator whose filter runs later: holds the subject and the arguments.
static int gen_make(struct render *r, const struct filter *f, struct jv subject,
                    const struct args *a, struct jv *out)
{
    size_t n = a->n_pos + a->n_kw;
    struct jv_thunk *t = mem_calloc(1, sizeof *t);
    if (!t)
        return render_oom(r);
    t->f = f;
    t->subject = jv_retain(subject);
    t->vals = mem_calloc(n + 1, sizeof *t->vals);
    t->kw_names = mem_calloc(a->n_kw + 1, sizeof *t->kw_names);
    if (!t->vals || !t->kw_names || !jv_list_new(0, false, out)) {
        gen_thunk_free(t);
        return render_oom(r);
    }
    for (size_t i = 0; i < a->n_pos; i++)
        t->vals[i] = jv_retain(a->pos[i]);
    for (size_t i = 0; i < a->n_kw; i++) {
        t->vals[a->n_pos + i] = jv_retain(a->kw[i]);
        t->kw_names[i] = a->kw_names[i];
    }
    t->n_pos = a->n_pos;
    t->n_kw = a->n_kw;
    // Chains of pending generators nest like containers: bound them too.
    if (!jv_nest_ok(subject)) {
        jv_release(*out);
        gen_thunk_free(t);
        return render_fail(r, VLLMC_ERR_CAPACITY, "values nested more than %d deep", JV_DEPTH_MAX);
    }
    out->u.l->depth = subject.kind == JV_LIST                       ? subject.u.l->depth + 1
                      : subject.kind == JV_DICT && !subject.u.d->ns ? subject.u.d->depth + 1
                                                                    : 0;
    out->u.l->seq = SEQ_GENERATOR;
    out->u.l->thunk = t;
    return 0;
}

int gen_force(struct render *r, struct jv_list *l)
{
    struct jv_thunk *t = l->thunk;
    if (!t)
        return 0;
    l->thunk = NULL;
    struct args a = {.n_pos = t->n_pos,
                     .pos = t->vals,
                     .n_kw = t->n_kw,
                     .kw = t->vals + t->n_pos,
                     .kw_names = t->kw_names};
    struct jv res;
    int rc = t->f->fn(r, t->subject, &a, &res);
    gen_thunk_free(t);
    if (rc)
        return -1;
    // Take over the items the filter produced.
    struct jv_list *src = res.u.l;
    mem_free(l->items);
    l->items = src->items;
    l->n = src->n;
    l->cap = src->cap;
    l->depth = src->depth;
    l->pos = 0;
    src->items = NULL;
    src->n = src->cap = 0;
    jv_release(res);
    return 0;
}

int filter_items(struct render *r, struct jv v, struct jv *out)
{
    static const struct args none = {0};
    return f_items(r, v, &none, out);
}

static const struct filter *filter_find(const char *name)
{
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (!strcmp(filters[i].name, name))
            return &filters[i];
    return NULL;
}

bool filter_exists(const char *name)
{
    return filter_find(name) != NULL;
}

int filter_apply(struct render *r, const char *name, struct jv subject, const struct args *a,
                 struct jv *out)
{
    const struct filter *f = filter_find(name);
    if (!f)
        return render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported filter '%s'", name);
    if (f->n_args_max >= 0 && (a->n_pos > (size_t)f->n_args_max || a->n_kw))
        return render_fail(r, VLLMC_ERR_TEMPLATE, "filter '%s' takes %d argument(s), %zu given",
                           name, f->n_args_max, a->n_pos + a->n_kw);
    if (f->lazy)
        return gen_make(r, f, subject, a, out);
    return f->fn(r, subject, a, out);
}
