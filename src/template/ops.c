// Operators with Python semantics: int/float arithmetic with floor division
// and modulo signs as Python has them, str/list concatenation and
// repetition, Markup escaping on `+`, comparisons and `in`.
#include "template/internal.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"

static bool num(struct jv v)
{
    return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
}

static double as_f(struct jv v)
{
    return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : (double)v.u.b;
}

static int64_t as_i(struct jv v)
{
    return v.kind == JV_INT ? v.u.i : v.kind == JV_BOOL ? (int64_t)v.u.b : 0;
}

static const char *const binop_sym[] = {"+", "-", "*", "/", "//", "%", "**"};

static int binop_type_error(struct render *r, int op, struct jv a, struct jv b)
{
    if (op == OP_ADD && a.kind == JV_STR)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "can only concatenate str (not \"%s\") to str",
                           jv_type_name(b));
    if (op == OP_ADD && a.kind == JV_LIST)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "can only concatenate %s (not \"%s\") to %s",
                           jv_type_name(a), jv_type_name(b), jv_type_name(a));
    return render_fail(r, VLLMC_ERR_TEMPLATE, "unsupported operand type(s) for %s: '%s' and '%s'",
                       binop_sym[op], jv_type_name(a), jv_type_name(b));
}

static int repeat(struct render *r, struct jv seq, int64_t times, struct jv *out)
{
    if (times < 0)
        times = 0;
    if (seq.kind == JV_STR) {
        size_t n = seq.u.s->len;
        if (n && (uint64_t)times > RENDER_OUTPUT_MAX / n)
            return render_fail(r, VLLMC_ERR_CAPACITY, "string repetition too large");
        struct sbuf b;
        sbuf_init(&b);
        for (int64_t i = 0; i < times && n; i++)
            sbuf_put(&b, seq.u.s->data, n);
        if (!(b.p ? sbuf_to_jv(&b, out) : jv_str_new("", 0, out)))
            return render_oom(r);
        return !seq.u.s->markup || jv_mark(out) ? 0 : (jv_release(*out), render_oom(r));
    }
    size_t n = seq.u.l->n;
    if (n && (uint64_t)times > (RENDER_OUTPUT_MAX / 16) / n)
        return render_fail(r, VLLMC_ERR_CAPACITY, "list repetition too large");
    if (!jv_list_new(n * (size_t)times, seq.u.l->tuple, out))
        return render_oom(r);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < n; k++)
            jv_list_push(out->u.l, jv_retain(seq.u.l->items[k]));
    return 0;
}

static double py_fmod(double x, double y)
{
    double m = fmod(x, y);
    if (m != 0 && ((y < 0) != (m < 0)))
        m += y;
    return m;
}

static double py_floordiv(double x, double y)
{
    double mod = fmod(x, y), div = (x - mod) / y;
    if (mod != 0 && ((y < 0) != (mod < 0)))
        div -= 1.0;
    if (div == 0)
        return copysign(0.0, x / y);
    double f = floor(div);
    if (div - f > 0.5)
        f += 1.0;
    return f;
}

int eval_binop(struct render *r, int op, struct jv a, struct jv b, struct jv *out)
{
    // str % Undefined formats: Python treats Undefined as a mapping.
    if (op == OP_MOD && a.kind == JV_STR && b.kind == JV_UNDEF && !a.u.s->markup)
        return str_percent(r, a, b, out);
    if (a.kind == JV_UNDEF)
        return eval_undef_fail(r, a);
    if (b.kind == JV_UNDEF)
        return eval_undef_fail(r, b);
    if (num(a) && num(b)) {
        bool fl = a.kind == JV_FLOAT || b.kind == JV_FLOAT;
        int64_t x = as_i(a), y = as_i(b), z;
        double fx = as_f(a), fy = as_f(b);
        switch (op) {
        case OP_ADD:
            if (fl)
                *out = jv_float(fx + fy);
            else if (__builtin_add_overflow(x, y, &z))
                goto overflow;
            else
                *out = jv_int(z);
            return 0;
        case OP_SUB:
            if (fl)
                *out = jv_float(fx - fy);
            else if (__builtin_sub_overflow(x, y, &z))
                goto overflow;
            else
                *out = jv_int(z);
            return 0;
        case OP_MUL:
            if (fl)
                *out = jv_float(fx * fy);
            else if (__builtin_mul_overflow(x, y, &z))
                goto overflow;
            else
                *out = jv_int(z);
            return 0;
        case OP_DIV:
            if (fy == 0)
                return render_fail(r, VLLMC_ERR_TEMPLATE, "division by zero");
            *out = jv_float(fx / fy);
            return 0;
        case OP_FLOORDIV:
        case OP_MOD:
            if (fl ? fy == 0 : y == 0)
                return render_fail(r, VLLMC_ERR_TEMPLATE, "%s by zero",
                                   op == OP_MOD ? "modulo" : "integer division or modulo");
            if (fl) {
                *out = jv_float(op == OP_MOD ? py_fmod(fx, fy) : py_floordiv(fx, fy));
            } else if (x == INT64_MIN && y == -1) {
                goto overflow;
            } else {
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    q -= 1;
                    m += y;
                }
                *out = jv_int(op == OP_MOD ? m : q);
            }
            return 0;
        case OP_POW:
            if (!fl && y >= 0) {
                int64_t acc = 1, base = x;
                for (int64_t e = y; e; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(acc, base, &acc))
                        goto overflow;
                    if (e > 1 && __builtin_mul_overflow(base, base, &base))
                        goto overflow;
                }
                *out = jv_int(acc);
                return 0;
            }
            if (fx == 0 && fy < 0)
                return render_fail(r, VLLMC_ERR_TEMPLATE,
                                   "0.0 cannot be raised to a negative power");
            *out = jv_float(pow(fx, fy));
            if (isnan(out->u.f) && !isnan(fx) && !isnan(fy))
                return render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: complex result of **");
            return 0;
        }
    }
    if (op == OP_ADD && a.kind == JV_STR && b.kind == JV_STR) {
        if (a.u.s->len + b.u.s->len > RENDER_OUTPUT_MAX / 2)
            return render_fail(r, VLLMC_ERR_CAPACITY, "string too large");
        // Markup + str (either order) escapes the plain side: the one place
        // transformers' templates meet markupsafe.
        bool markup = a.u.s->markup || b.u.s->markup;
        struct sbuf s;
        sbuf_init(&s);
        if (markup) {
            markup_put(&s, a);
            markup_put(&s, b);
        } else {
            sbuf_put(&s, a.u.s->data, a.u.s->len);
            sbuf_put(&s, b.u.s->data, b.u.s->len);
        }
        if (!(s.p ? sbuf_to_jv(&s, out) : jv_str_new("", 0, out)))
            return render_oom(r);
        return !markup || jv_mark(out) ? 0 : (jv_release(*out), render_oom(r));
    }
    if (op == OP_ADD && jv_is_plain_list(a) && jv_is_plain_list(b) &&
        a.u.l->tuple == b.u.l->tuple) {
        if (!jv_list_new(a.u.l->n + b.u.l->n, a.u.l->tuple, out))
            return render_oom(r);
        for (size_t i = 0; i < a.u.l->n; i++)
            jv_list_push(out->u.l, jv_retain(a.u.l->items[i]));
        for (size_t i = 0; i < b.u.l->n; i++)
            jv_list_push(out->u.l, jv_retain(b.u.l->items[i]));
        return 0;
    }
    if (op == OP_MUL) {
        if ((a.kind == JV_STR || jv_is_plain_list(a)) && (b.kind == JV_INT || b.kind == JV_BOOL))
            return repeat(r, a, as_i(b), out);
        if ((b.kind == JV_STR || jv_is_plain_list(b)) && (a.kind == JV_INT || a.kind == JV_BOOL))
            return repeat(r, b, as_i(a), out);
    }
    if (op == OP_MOD && a.kind == JV_STR) {
        if (a.u.s->markup)
            return render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: '%%' on Markup");
        return str_percent(r, a, b, out);
    }
    return binop_type_error(r, op, a, b);
overflow:
    return render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: integer result out of 64-bit range");
}

static int eval_in(struct render *r, struct jv item, struct jv seq, bool *res)
{
    *res = false;
    switch (seq.kind) {
    case JV_UNDEF:
        return 0;
    case JV_STR:
        if (item.kind != JV_STR)
            return render_fail(r, VLLMC_ERR_TEMPLATE,
                               "'in <string>' requires string as left operand, not %s",
                               jv_type_name(item));
        *res = !item.u.s->len ||
               memmem(seq.u.s->data, seq.u.s->len, item.u.s->data, item.u.s->len) != NULL;
        return 0;
    case JV_LIST: {
        // An iterator is consumed up to and including the match.
        struct jv_list *l = seq.u.l;
        if (gen_force(r, l))
            return -1;
        size_t i = jv_is_iterator(seq) ? l->pos : 0;
        for (; i < l->n && !*res; i++)
            *res = jv_equal(item, l->items[i]);
        if (jv_is_iterator(seq))
            l->pos = i;
        return 0;
    }
    case JV_DICT:
        if (seq.u.d->ns)
            break;
        // Lists, dicts and dict views are unhashable; iterators, ranges and
        // namespaces hash by identity and simply are not keys here.
        if ((item.kind == JV_LIST && !jv_is_iterator(item) && item.u.l->seq != SEQ_RANGE) ||
            (item.kind == JV_DICT && !item.u.d->ns))
            return render_fail(r, VLLMC_ERR_TEMPLATE, "unhashable type: '%s'", jv_type_name(item));
        *res = jv_dict_get(seq.u.d, item) != NULL;
        return 0;
    default:
        break;
    }
    return render_fail(r, VLLMC_ERR_TEMPLATE, "argument of type '%s' is not iterable",
                       jv_type_name(seq));
}

int eval_cmp(struct render *r, int op, struct jv a, struct jv b, bool *res)
{
    static const char *const sym[] = {"==", "!=", "<", "<=", ">", ">="};
    switch (op) {
    case CMP_EQ:
        *res = jv_equal(a, b);
        return 0;
    case CMP_NE:
        *res = !jv_equal(a, b);
        return 0;
    case CMP_IN:
        return eval_in(r, a, b, res);
    case CMP_NOTIN:
        if (eval_in(r, a, b, res))
            return -1;
        *res = !*res;
        return 0;
    default:
        break;
    }
    if (a.kind == JV_UNDEF)
        return eval_undef_fail(r, a);
    if (b.kind == JV_UNDEF)
        return eval_undef_fail(r, b);
    int c;
    if (!jv_compare(a, b, &c))
        return render_fail(r, VLLMC_ERR_TEMPLATE,
                           "'%s' not supported between instances of '%s' and '%s'", sym[op],
                           jv_type_name(a), jv_type_name(b));
    if (c == 2) { // NaN
        *res = false;
        return 0;
    }
    *res = op == CMP_LT ? c < 0 : op == CMP_LE ? c <= 0 : op == CMP_GT ? c > 0 : c >= 0;
    return 0;
}
