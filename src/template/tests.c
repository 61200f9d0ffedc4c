// Tests (`x is defined`, `n is divisibleby 3`, …): jinja2's tests.py,
// including the comparison aliases select() and selectattr() use.
#include "template/internal.h"

#include <string.h>

// Shared with methods.c.
int str_case(struct render *r, struct jv s, int mode, struct jv *out);

static int test_cmp(struct render *r, struct jv v, const struct args *a, int op, bool *out)
{
    const struct jv *o = args_get(a, 0, NULL);
    if (!o)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "test needs an argument");
    int c;
    if (op == CMP_EQ || op == CMP_NE) {
        *out = jv_equal(v, *o) == (op == CMP_EQ);
        return 0;
    }
    if (v.kind == JV_UNDEF)
        return eval_undef_fail(r, v);
    if (!jv_compare(v, *o, &c))
        return render_fail(r, VLLMC_ERR_TEMPLATE,
                           "comparison not supported between instances of '%s' and '%s'",
                           jv_type_name(v), jv_type_name(*o));
    *out = c != 2 && (op == CMP_LT ? c < 0 : op == CMP_LE ? c <= 0 : op == CMP_GT ? c > 0 : c >= 0);
    return 0;
}

// Tests that take an argument besides the value.
static bool test_takes_arg(const char *name)
{
    static const char *const names[] = {
        "divisibleby", "eq", "equalto",     "==", "ne", "!=", "lt", "lessthan", "<", "le",
        "<=",          "gt", "greaterthan", ">",  "ge", ">=", "in", "sameas",   NULL};
    for (const char *const *p = names; *p; p++)
        if (!strcmp(*p, name))
            return true;
    return false;
}

int test_apply(struct render *r, const char *name, struct jv v, const struct args *a, bool *out)
{
    *out = false;
    size_t n_args = a->n_pos + a->n_kw, want = test_takes_arg(name) ? 1 : 0;
    if (test_exists(name) && n_args != want)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "test '%s' takes %zu argument(s), %zu given",
                           name, want, n_args);
    if (!strcmp(name, "defined")) {
        *out = v.kind != JV_UNDEF;
    } else if (!strcmp(name, "undefined")) {
        *out = v.kind == JV_UNDEF;
    } else if (!strcmp(name, "none")) {
        *out = v.kind == JV_NONE;
    } else if (!strcmp(name, "boolean")) {
        *out = v.kind == JV_BOOL;
    } else if (!strcmp(name, "true")) {
        *out = v.kind == JV_BOOL && v.u.b;
    } else if (!strcmp(name, "false")) {
        *out = v.kind == JV_BOOL && !v.u.b;
    } else if (!strcmp(name, "integer")) {
        *out = v.kind == JV_INT;
    } else if (!strcmp(name, "float")) {
        *out = v.kind == JV_FLOAT;
    } else if (!strcmp(name, "number")) {
        *out = v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
    } else if (!strcmp(name, "string")) {
        *out = v.kind == JV_STR;
    } else if (!strcmp(name, "mapping")) {
        *out = v.kind == JV_DICT && !v.u.d->ns;
    } else if (!strcmp(name, "iterable")) {
        *out = v.kind == JV_STR || v.kind == JV_LIST || (v.kind == JV_DICT && !v.u.d->ns) ||
               v.kind == JV_UNDEF;
    } else if (!strcmp(name, "sequence")) {
        *out = v.kind == JV_STR ||
               (v.kind == JV_LIST && (jv_is_plain_list(v) || v.u.l->seq == SEQ_RANGE)) ||
               (v.kind == JV_DICT && !v.u.d->ns) || v.kind == JV_UNDEF;
    } else if (!strcmp(name, "callable")) {
        *out = v.kind == JV_FUNC || (v.kind == JV_LOOP && v.u.loop->recursive);
    } else if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        // value % 2 == 1, value % 2 == 0, value % num == 0: Python's `%`
        // decides, floats and errors included.
        const struct jv *d = args_get(a, 0, "num");
        struct jv m;
        if (eval_binop(r, OP_MOD, v, name[0] == 'd' ? *d : jv_int(2), &m))
            return -1;
        *out = jv_equal(m, jv_int(name[0] == 'o' ? 1 : 0));
        jv_release(m);
    } else if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) {
        return test_cmp(r, v, a, CMP_EQ, out);
    } else if (!strcmp(name, "ne") || !strcmp(name, "!=")) {
        return test_cmp(r, v, a, CMP_NE, out);
    } else if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<")) {
        return test_cmp(r, v, a, CMP_LT, out);
    } else if (!strcmp(name, "le") || !strcmp(name, "<=")) {
        return test_cmp(r, v, a, CMP_LE, out);
    } else if (!strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">")) {
        return test_cmp(r, v, a, CMP_GT, out);
    } else if (!strcmp(name, "ge") || !strcmp(name, ">=")) {
        return test_cmp(r, v, a, CMP_GE, out);
    } else if (!strcmp(name, "in")) {
        const struct jv *seq = args_get(a, 0, "seq");
        if (!seq)
            return render_fail(r, VLLMC_ERR_TEMPLATE, "test 'in' needs a sequence");
        if (seq->kind == JV_STR && v.kind == JV_STR)
            *out = !v.u.s->len ||
                   memmem(seq->u.s->data, seq->u.s->len, v.u.s->data, v.u.s->len) != NULL;
        else if (seq->kind == JV_LIST)
            for (size_t i = 0; i < seq->u.l->n && !*out; i++)
                *out = jv_equal(v, seq->u.l->items[i]);
        else if (seq->kind == JV_DICT)
            *out = v.kind != JV_LIST && v.kind != JV_DICT && jv_dict_get(seq->u.d, v);
        else if (seq->kind != JV_UNDEF)
            return render_fail(r, VLLMC_ERR_TEMPLATE, "argument of type '%s' is not iterable",
                               jv_type_name(*seq));
    } else if (!strcmp(name, "sameas")) {
        const struct jv *o = args_get(a, 0, "other");
        if (!o)
            return render_fail(r, VLLMC_ERR_TEMPLATE, "test 'sameas' needs an argument");
        if (v.kind != o->kind)
            *out = false;
        else if (v.kind == JV_NONE)
            *out = true;
        else if (v.kind == JV_BOOL)
            *out = v.u.b == o->u.b;
        else if (jv_is_obj(v))
            *out = v.u.o == o->u.o;
        else
            return render_fail(r, VLLMC_ERR_UNSUPPORTED,
                               "unsupported: 'sameas' on numbers depends on object identity");
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (v.kind != JV_STR)
            return render_fail(r, VLLMC_ERR_TEMPLATE, "test '%s' needs a string", name);
        struct jv low;
        if (str_case(r, v, name[0] == 'l' ? 1 : 0, &low))
            return -1;
        // str.islower(): has a cased character and equals its lowercase.
        bool cased = false;
        struct jv other;
        if (str_case(r, v, name[0] == 'l' ? 0 : 1, &other)) {
            jv_release(low);
            return -1;
        }
        cased = !jv_equal(low, other);
        *out = cased && jv_equal(low, v);
        jv_release(low);
        jv_release(other);
    } else if (!strcmp(name, "filter")) {
        *out = v.kind == JV_STR && filter_exists(v.u.s->data);
    } else if (!strcmp(name, "test")) {
        *out = v.kind == JV_STR && test_exists(v.u.s->data);
    } else {
        return render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported test '%s'", name);
    }
    return 0;
}

bool test_exists(const char *name)
{
    static const char *const names[] = {
        "defined",     "undefined", "none",        "boolean", "true",     "false",    "integer",
        "float",       "number",    "string",      "mapping", "iterable", "sequence", "callable",
        "odd",         "even",      "divisibleby", "eq",      "equalto",  "==",       "ne",
        "!=",          "lt",        "lessthan",    "<",       "le",       "<=",       "gt",
        "greaterthan", ">",         "ge",          ">=",      "in",       "sameas",   "lower",
        "upper",       "filter",    "test",        NULL};
    for (const char *const *p = names; *p; p++)
        if (!strcmp(*p, name))
            return true;
    return false;
}
