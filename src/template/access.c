// Attribute, item and slice access with jinja2's sandbox rules: Python
// attributes (methods) first for `.`, items first for `[]`, and a missing
// one is Undefined carrying the message jinja2 would raise when it is used.
#include "template/internal.h"

#include <string.h>

#include "core/alloc.h"

static bool is_dict_method(const char *name)
{
    static const char *const m[] = {"items",  "keys",       "values", "get",  "pop",      "popitem",
                                    "update", "setdefault", "clear",  "copy", "fromkeys", NULL};
    for (const char *const *p = m; *p; p++)
        if (!strcmp(*p, name))
            return true;
    return false;
}

static int undef_attr(struct jv obj, const char *name, struct jv *out)
{
    bool ok = obj.kind == JV_NONE
                  ? jv_undef_msg(out, "'None' has no attribute '%s'", name)
                  : jv_undef_msg(out, "'%s object' has no attribute '%s'", jv_type_name(obj), name);
    return ok ? 0 : -1;
}

int eval_getattr(struct render *r, struct jv obj, const char *name, size_t n, struct jv *out)
{
    (void)n;
    switch (obj.kind) {
    case JV_UNDEF:
        return eval_undef_fail(r, obj);
    case JV_LOOP:
        return eval_loop_attr(r, obj, name, out);
    case JV_DICT:
        if (!obj.u.d->ns && is_dict_method(name))
            return method_lookup(r, obj, name, out);
        {
            struct jv *v = jv_dict_get_cstr(obj.u.d, name);
            if (v) {
                *out = jv_retain(*v);
                return 0;
            }
        }
        return undef_attr(obj, name, out) ? render_oom(r) : 0;
    case JV_STR:
    case JV_LIST:
        if (method_lookup(r, obj, name, out))
            return -1;
        if (out->kind != JV_UNDEF)
            return 0;
        return undef_attr(obj, name, out) ? render_oom(r) : 0;
    default:
        return undef_attr(obj, name, out) ? render_oom(r) : 0;
    }
}

static bool index_of(struct jv key, int64_t *i)
{
    if (key.kind == JV_INT) {
        *i = key.u.i;
        return true;
    }
    if (key.kind == JV_BOOL) {
        *i = key.u.b;
        return true;
    }
    return false;
}

static int undef_item(struct render *r, struct jv obj, struct jv key, struct jv *out)
{
    if (key.kind == JV_STR)
        return undef_attr(obj, key.u.s->data, out) ? render_oom(r) : 0;
    struct sbuf b;
    sbuf_init(&b);
    jv_write(&b, key, 1);
    bool ok = !b.oom &&
              jv_undef_msg(out, "'%s object' has no element %s", jv_type_name(obj), b.p ? b.p : "");
    sbuf_free(&b);
    return ok ? 0 : render_oom(r);
}

int eval_getitem(struct render *r, struct jv obj, struct jv key, struct jv *out)
{
    int64_t i;
    switch (obj.kind) {
    case JV_UNDEF:
        return eval_undef_fail(r, obj);
    case JV_LIST:
        if (!jv_is_plain_list(obj) && obj.u.l->seq != SEQ_RANGE)
            break; // not subscriptable: jinja2 gives undefined
        if (index_of(key, &i)) {
            int64_t n = (int64_t)obj.u.l->n;
            if (i < 0)
                i += n;
            if (i >= 0 && i < n) {
                *out = jv_retain(obj.u.l->items[i]);
                return 0;
            }
            return undef_item(r, obj, key, out);
        }
        break;
    case JV_STR:
        if (index_of(key, &i)) {
            const struct jv_str *s = obj.u.s;
            int64_t n = (int64_t)jv_utf8_count(s->data, s->len);
            if (i < 0)
                i += n;
            if (i >= 0 && i < n) {
                size_t off = jv_utf8_offset(s->data, s->len, (size_t)i), adv;
                jv_utf8_decode(s->data + off, s->len - off, &adv);
                if (!jv_str_new(s->data + off, adv, out))
                    return render_oom(r);
                out->u.s->markup = s->markup;
                return 0;
            }
            return undef_item(r, obj, key, out);
        }
        break;
    case JV_DICT: {
        struct jv *v =
            key.kind == JV_LIST || key.kind == JV_DICT ? NULL : jv_dict_get(obj.u.d, key);
        if (v) {
            *out = jv_retain(*v);
            return 0;
        }
        if (key.kind == JV_STR && !obj.u.d->ns && is_dict_method(key.u.s->data))
            return method_lookup(r, obj, key.u.s->data, out);
        return undef_item(r, obj, key, out);
    }
    case JV_LOOP:
        if (key.kind == JV_STR)
            return eval_loop_attr(r, obj, key.u.s->data, out);
        break;
    default:
        break;
    }
    if (key.kind == JV_STR && (obj.kind == JV_STR || obj.kind == JV_LIST)) {
        if (method_lookup(r, obj, key.u.s->data, out))
            return -1;
        if (out->kind != JV_UNDEF)
            return 0;
    }
    return undef_item(r, obj, key, out);
}

// Python slice bounds for a sequence of len items.
static int slice_bounds(struct render *r, int64_t len, const struct jv *sv, int64_t *start,
                        int64_t *step, int64_t *count, int64_t *stop)
{
    int64_t v[3] = {0, 0, 1};
    bool has[3];
    for (int k = 0; k < 3; k++) {
        has[k] = sv[k].kind != JV_NONE;
        if (has[k] && !index_of(sv[k], &v[k]))
            return render_fail(r, VLLMC_ERR_TEMPLATE, "slice indices must be integers or None");
    }
    int64_t st = has[2] ? v[2] : 1;
    if (st == 0)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "slice step cannot be zero");
    int64_t a, b;
    if (!has[0]) {
        a = st < 0 ? len - 1 : 0;
    } else {
        a = v[0];
        if (a < 0) {
            a += len;
            if (a < 0)
                a = st < 0 ? -1 : 0;
        } else if (a >= len) {
            a = st < 0 ? len - 1 : len;
        }
    }
    if (!has[1]) {
        b = st < 0 ? -1 : len;
    } else {
        b = v[1];
        if (b < 0) {
            b += len;
            if (b < 0)
                b = st < 0 ? -1 : 0;
        } else if (b >= len) {
            b = st < 0 ? len - 1 : len;
        }
    }
    if (st < 0)
        *count = b < a ? (a - b - 1) / (-st) + 1 : 0;
    else
        *count = a < b ? (b - a - 1) / st + 1 : 0;
    *start = a;
    *step = st;
    *stop = b;
    return 0;
}

int eval_slice(struct render *r, struct jv obj, const struct jv *sv, struct jv *out)
{
    int64_t start, step, count, stop;
    if (obj.kind == JV_UNDEF)
        return eval_undef_fail(r, obj);
    // Slices are plain Python subscripts in jinja2 (no getitem fallback):
    // anything but a sequence raises.
    if (obj.kind == JV_LIST && !jv_is_plain_list(obj) && obj.u.l->seq != SEQ_RANGE)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "'%s' object is not subscriptable",
                           jv_type_name(obj));
    if (obj.kind == JV_LIST) {
        if (slice_bounds(r, (int64_t)obj.u.l->n, sv, &start, &step, &count, &stop))
            return -1;
        if (!jv_list_new((size_t)count, obj.u.l->tuple, out))
            return render_oom(r);
        out->u.l->seq = obj.u.l->seq;
        if (obj.u.l->seq == SEQ_RANGE) {
            const int64_t *rg = obj.u.l->range;
            out->u.l->range[0] = rg[0] + start * rg[2];
            out->u.l->range[1] = rg[0] + stop * rg[2];
            out->u.l->range[2] = rg[2] * step;
        }
        for (int64_t k = 0; k < count; k++)
            jv_list_push(out->u.l, jv_retain(obj.u.l->items[start + k * step]));
        return 0;
    }
    if (obj.kind == JV_STR) {
        const struct jv_str *s = obj.u.s;
        size_t n = jv_utf8_count(s->data, s->len);
        size_t *offs = mem_alloc((n + 1) * sizeof *offs);
        if (!offs)
            return render_oom(r);
        for (size_t i = 0, k = 0; k <= n; k++) {
            offs[k] = i;
            if (i < s->len) {
                size_t adv;
                jv_utf8_decode(s->data + i, s->len - i, &adv);
                i += adv;
            }
        }
        if (slice_bounds(r, (int64_t)n, sv, &start, &step, &count, &stop)) {
            mem_free(offs);
            return -1;
        }
        struct sbuf b;
        sbuf_init(&b);
        for (int64_t k = 0; k < count; k++) {
            size_t c = (size_t)(start + k * step);
            sbuf_put(&b, s->data + offs[c], offs[c + 1] - offs[c]);
        }
        mem_free(offs);
        if (!(b.p ? sbuf_to_jv(&b, out) : jv_str_new("", 0, out)))
            return render_oom(r);
        out->u.s->markup = s->markup;
        return 0;
    }
    return render_fail(r, VLLMC_ERR_TEMPLATE, "'%s' object is not subscriptable",
                       jv_type_name(obj));
}
