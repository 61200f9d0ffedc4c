// Template parser: tokens to a syntax tree, following jinja2's grammar and
// operator precedence (parser.py). Constructs outside the supported subset
// fail here with the template name, line and column.
#include "template/internal.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"

#define PARSE_DEPTH_MAX 200

struct parser {
    struct jinja_template *t;
    const struct token_list *toks;
    size_t pos;
    struct err *e;
    int depth;
    bool failed;
};

// Growable array of node pointers, copied into the template pool when done.
struct nvec {
    struct node **v;
    size_t n, cap;
};

static const struct token *cur(const struct parser *p)
{
    return &p->toks->v[p->pos];
}

static const struct token *peek(const struct parser *p, size_t k)
{
    size_t i = p->pos + k;
    return &p->toks->v[i < p->toks->n ? i : p->toks->n - 1];
}

static void advance(struct parser *p)
{
    if (p->pos + 1 < p->toks->n)
        p->pos++;
}

static void *fail_at(struct parser *p, const struct token *tk, enum vllmc_status code,
                     const char *fmt, const char *arg)
{
    if (!p->failed) {
        char msg[256];
        snprintf(msg, sizeof msg, fmt, arg ? arg : "");
        err_set(p->e, code, "%s:%d:%d: %s", p->t->name, tk->line, tk->col, msg);
        p->failed = true;
    }
    return NULL;
}

static void *fail(struct parser *p, const char *fmt, const char *arg)
{
    return fail_at(p, cur(p), VLLMC_ERR_TEMPLATE, fmt, arg);
}

static void *oom(struct parser *p)
{
    if (!p->failed) {
        err_set(p->e, VLLMC_ERR_NOMEM, "%s: out of memory", p->t->name);
        p->failed = true;
    }
    return NULL;
}

static bool is_op(const struct token *tk, const char *op)
{
    return tk->kind == TOK_OP && tk->n == strlen(op) && !memcmp(tk->p, op, tk->n);
}

static bool is_name(const struct token *tk, const char *name)
{
    return tk->kind == TOK_NAME && tk->n == strlen(name) && !memcmp(tk->p, name, tk->n);
}

static bool skip_op(struct parser *p, const char *op)
{
    if (!is_op(cur(p), op))
        return false;
    advance(p);
    return true;
}

static bool skip_name(struct parser *p, const char *name)
{
    if (!is_name(cur(p), name))
        return false;
    advance(p);
    return true;
}

static bool expect_op(struct parser *p, const char *op)
{
    if (skip_op(p, op))
        return true;
    fail(p, "expected '%s'", op);
    return false;
}

static bool expect_block_end(struct parser *p)
{
    if (cur(p)->kind == TOK_BLOCK_END) {
        advance(p);
        return true;
    }
    fail(p, "expected end of statement block%s", "");
    return false;
}

static char *tok_str(struct parser *p, const struct token *tk)
{
    char *s = tpl_alloc(p->t, tk->n + 1);
    if (!s)
        return oom(p);
    if (tk->n)
        memcpy(s, tk->p, tk->n);
    return s;
}

static struct node *mk(struct parser *p, enum node_kind kind, const struct token *tk)
{
    struct node *n = tpl_alloc(p->t, sizeof *n);
    if (!n)
        return oom(p);
    n->kind = kind;
    n->line = tk->line;
    n->col = tk->col;
    return n;
}

static bool nvec_push(struct parser *p, struct nvec *v, struct node *n)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        struct node **q = mem_realloc(v->v, cap * sizeof *q);
        if (!q) {
            oom(p);
            return false;
        }
        v->v = q;
        v->cap = cap;
    }
    v->v[v->n++] = n;
    return true;
}

// Moves the vector into the pool; the vector is emptied.
static struct node **nvec_done(struct parser *p, struct nvec *v, size_t *n_out)
{
    struct node **out = NULL;
    *n_out = 0;
    if (v->n) {
        out = tpl_alloc(p->t, v->n * sizeof *out);
        if (out) {
            memcpy(out, v->v, v->n * sizeof *out);
            *n_out = v->n;
        } else {
            oom(p);
        }
    }
    mem_free(v->v);
    memset(v, 0, sizeof *v);
    return out;
}

static struct jv_str *pool_str(struct parser *p, const char *s, size_t n)
{
    struct jv_str *js = tpl_alloc(p->t, sizeof *js + n + 1);
    if (!js)
        return oom(p);
    js->h.refs = -1;
    js->len = n;
    if (n)
        memcpy(js->data, s, n);
    js->data[n] = 0;
    return js;
}

static struct node *parse_expression(struct parser *p, bool with_condexpr);
static struct node *parse_tuple(struct parser *p, int mode, const char *extra_end,
                                bool explicit_parens);
static struct node *parse_postfix(struct parser *p, struct node *n);
static struct node *parse_primary(struct parser *p);
static struct node *parse_filter(struct parser *p, struct node *subject, bool start_inline);
static bool subparse(struct parser *p, const char *const *end_names, struct nvec *body);

// ---- expressions ----

static bool enter(struct parser *p)
{
    if (++p->depth > PARSE_DEPTH_MAX) {
        fail_at(p, cur(p), VLLMC_ERR_CAPACITY, "expression nested too deeply%s", "");
        return false;
    }
    return true;
}

// `(` args `)`: positional into kids, keywords into kids2/names.
static bool parse_call_args(struct parser *p, struct node *n)
{
    struct nvec pos = {0}, kw = {0};
    const char *names[64];
    size_t n_names = 0;
    if (!expect_op(p, "("))
        return false;
    bool first = true;
    while (!p->failed && !is_op(cur(p), ")")) {
        if (!first && !expect_op(p, ","))
            break;
        first = false;
        if (is_op(cur(p), ")"))
            break;
        if (is_op(cur(p), "*") || is_op(cur(p), "**")) {
            fail_at(p, cur(p), VLLMC_ERR_UNSUPPORTED, "unsupported: *args/**kwargs in a call%s",
                    "");
            break;
        }
        if (cur(p)->kind == TOK_NAME && is_op(peek(p, 1), "=")) {
            if (n_names == 64) {
                fail(p, "too many keyword arguments%s", "");
                break;
            }
            names[n_names++] = tok_str(p, cur(p));
            advance(p);
            advance(p);
            struct node *v = parse_expression(p, true);
            if (!v || !nvec_push(p, &kw, v))
                break;
        } else {
            if (kw.n) {
                fail(p, "positional argument after keyword argument%s", "");
                break;
            }
            struct node *v = parse_expression(p, true);
            if (!v || !nvec_push(p, &pos, v))
                break;
        }
    }
    if (!p->failed)
        expect_op(p, ")");
    n->kids = nvec_done(p, &pos, &n->n_kids);
    n->kids2 = nvec_done(p, &kw, &n->n_kids2);
    if (n_names) {
        n->names = tpl_alloc(p->t, n_names * sizeof *n->names);
        if (!n->names)
            return oom(p) != NULL;
        memcpy(n->names, names, n_names * sizeof *names);
        n->n_names = n_names;
    }
    return !p->failed;
}

// A dotted filter or test name.
static char *parse_dotted_name(struct parser *p)
{
    if (cur(p)->kind != TOK_NAME)
        return fail(p, "expected a name%s", "");
    char *s = tok_str(p, cur(p));
    advance(p);
    while (s && is_op(cur(p), ".") && peek(p, 1)->kind == TOK_NAME) {
        advance(p);
        size_t a = strlen(s), b = cur(p)->n;
        char *t = tpl_alloc(p->t, a + b + 2);
        if (!t)
            return oom(p);
        memcpy(t, s, a);
        t[a] = '.';
        memcpy(t + a + 1, cur(p)->p, b);
        s = t;
        advance(p);
    }
    return s;
}

static struct node *parse_filter(struct parser *p, struct node *subject, bool start_inline)
{
    while (!p->failed && (is_op(cur(p), "|") || start_inline)) {
        if (!start_inline)
            advance(p);
        start_inline = false;
        const struct token *at = cur(p);
        struct node *f = mk(p, E_FILTER, at);
        if (!f)
            return NULL;
        f->str = parse_dotted_name(p);
        if (!f->str)
            return NULL;
        f->a = subject;
        if (is_op(cur(p), "(") && !parse_call_args(p, f))
            return NULL;
        subject = f;
    }
    return subject;
}

static struct node *parse_test(struct parser *p, struct node *subject)
{
    const struct token *at = cur(p);
    advance(p); // `is`
    struct node *t = mk(p, E_TEST, at);
    if (!t)
        return NULL;
    t->flag = skip_name(p, "not");
    t->line = cur(p)->line; // errors point at the test's name
    t->col = cur(p)->col;
    t->str = parse_dotted_name(p);
    if (!t->str)
        return NULL;
    t->a = subject;
    const struct token *c = cur(p);
    if (is_op(c, "(")) {
        if (!parse_call_args(p, t))
            return NULL;
    } else if ((c->kind == TOK_NAME || c->kind == TOK_STRING || c->kind == TOK_INT ||
                c->kind == TOK_FLOAT || is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is"))
            return fail(p, "You cannot chain multiple tests with is%s", "");
        struct node *arg = parse_primary(p);
        if (arg)
            arg = parse_postfix(p, arg);
        if (!arg)
            return NULL;
        t->kids = tpl_alloc(p->t, sizeof *t->kids);
        if (!t->kids)
            return oom(p);
        t->kids[0] = arg;
        t->n_kids = 1;
    }
    return t;
}

static struct node *parse_filter_expr(struct parser *p, struct node *n)
{
    while (n && !p->failed) {
        if (is_op(cur(p), "|")) {
            n = parse_filter(p, n, false);
        } else if (is_name(cur(p), "is")) {
            n = parse_test(p, n);
        } else if (is_op(cur(p), "(")) {
            struct node *c = mk(p, E_CALL, cur(p));
            if (!c)
                return NULL;
            c->a = n;
            if (!parse_call_args(p, c))
                return NULL;
            n = c;
        } else {
            break;
        }
    }
    return p->failed ? NULL : n;
}

static struct node *parse_subscribed(struct parser *p)
{
    const struct token *at = cur(p);
    struct node *args[3] = {NULL, NULL, NULL};
    if (is_op(cur(p), ":")) {
        advance(p);
    } else {
        struct node *n = parse_expression(p, true);
        if (!n || !is_op(cur(p), ":"))
            return n;
        advance(p);
        args[0] = n;
    }
    if (!is_op(cur(p), ":") && !is_op(cur(p), "]") && !is_op(cur(p), ","))
        args[1] = parse_expression(p, true);
    if (skip_op(p, ":")) {
        if (!is_op(cur(p), "]") && !is_op(cur(p), ","))
            args[2] = parse_expression(p, true);
    }
    if (p->failed)
        return NULL;
    struct node *s = mk(p, E_SLICE, at);
    if (!s)
        return NULL;
    s->b = args[0];
    s->c = args[1];
    s->d = args[2];
    return s;
}

static struct node *parse_postfix(struct parser *p, struct node *n)
{
    while (n && !p->failed) {
        const struct token *at = cur(p);
        if (is_op(at, ".")) {
            advance(p);
            const struct token *tk = cur(p);
            if (tk->kind == TOK_NAME) {
                struct node *g = mk(p, E_GETATTR, at);
                if (!g)
                    return NULL;
                g->a = n;
                g->str = tok_str(p, tk);
                g->str_len = tk->n;
                advance(p);
                n = g;
            } else if (tk->kind == TOK_INT) {
                struct node *k = mk(p, E_CONST, tk);
                struct node *g = mk(p, E_GETITEM, at);
                if (!k || !g)
                    return NULL;
                k->val = jv_int(tk->i);
                g->a = n;
                g->b = k;
                advance(p);
                n = g;
            } else {
                return fail(p, "expected an attribute name after '.'%s", "");
            }
        } else if (is_op(at, "[")) {
            advance(p);
            struct nvec items = {0};
            bool first = true;
            while (!p->failed && !is_op(cur(p), "]")) {
                if (!first && !expect_op(p, ","))
                    break;
                first = false;
                struct node *s = parse_subscribed(p);
                if (!s || !nvec_push(p, &items, s))
                    break;
            }
            if (!p->failed)
                expect_op(p, "]");
            if (p->failed) {
                mem_free(items.v);
                return NULL;
            }
            // `x[]` subscripts with an empty tuple, as jinja2 reads it.
            struct node *key;
            if (items.n == 1 && items.v[0]) {
                key = items.v[0];
                mem_free(items.v);
            } else {
                for (size_t i = 0; i < items.n; i++) {
                    if (items.v[i]->kind == E_SLICE) {
                        mem_free(items.v);
                        return fail_at(p, at, VLLMC_ERR_UNSUPPORTED,
                                       "unsupported: slice inside a tuple subscript%s", "");
                    }
                }
                key = mk(p, E_TUPLE, at);
                if (!key) {
                    mem_free(items.v);
                    return NULL;
                }
                key->kids = nvec_done(p, &items, &key->n_kids);
            }
            if (key->kind == E_SLICE) {
                key->a = n;
                n = key;
            } else {
                struct node *g = mk(p, E_GETITEM, at);
                if (!g)
                    return NULL;
                g->a = n;
                g->b = key;
                n = g;
            }
        } else if (is_op(at, "(")) {
            struct node *c = mk(p, E_CALL, at);
            if (!c)
                return NULL;
            c->a = n;
            if (!parse_call_args(p, c))
                return NULL;
            n = c;
        } else {
            break;
        }
    }
    return p->failed ? NULL : n;
}

static struct node *parse_primary(struct parser *p)
{
    if (!enter(p))
        return NULL;
    const struct token *tk = cur(p);
    struct node *n = NULL;
    if (tk->kind == TOK_NAME) {
        n = mk(p, E_CONST, tk);
        if (!n)
            goto out;
        if (is_name(tk, "true") || is_name(tk, "True")) {
            n->val = jv_bool(true);
        } else if (is_name(tk, "false") || is_name(tk, "False")) {
            n->val = jv_bool(false);
        } else if (is_name(tk, "none") || is_name(tk, "None")) {
            n->val = jv_none();
        } else {
            n->kind = E_NAME;
            n->str = tok_str(p, tk);
            n->str_len = tk->n;
        }
        advance(p);
    } else if (tk->kind == TOK_STRING) {
        // Adjacent string literals concatenate.
        struct sbuf b;
        sbuf_init(&b);
        while (cur(p)->kind == TOK_STRING) {
            sbuf_put(&b, cur(p)->p, cur(p)->n);
            advance(p);
        }
        n = mk(p, E_CONST, tk);
        struct jv_str *s = b.oom ? oom(p) : n ? pool_str(p, b.p ? b.p : "", b.len) : NULL;
        sbuf_free(&b);
        if (!s)
            goto out;
        n->val.kind = JV_STR;
        n->val.u.s = s;
    } else if (tk->kind == TOK_INT || tk->kind == TOK_FLOAT) {
        n = mk(p, E_CONST, tk);
        if (n)
            n->val = tk->kind == TOK_INT ? jv_int(tk->i) : jv_float(tk->f);
        advance(p);
    } else if (is_op(tk, "(")) {
        advance(p);
        n = parse_tuple(p, 0, NULL, true);
        if (n && !expect_op(p, ")"))
            n = NULL;
    } else if (is_op(tk, "[")) {
        advance(p);
        struct nvec items = {0};
        while (!p->failed && !is_op(cur(p), "]")) {
            if (items.n && !expect_op(p, ","))
                break;
            if (is_op(cur(p), "]"))
                break;
            struct node *it = parse_expression(p, true);
            if (!it || !nvec_push(p, &items, it))
                break;
        }
        if (!p->failed)
            expect_op(p, "]");
        n = p->failed ? NULL : mk(p, E_LIST, tk);
        if (n)
            n->kids = nvec_done(p, &items, &n->n_kids);
        else
            mem_free(items.v);
    } else if (is_op(tk, "{")) {
        advance(p);
        struct nvec keys = {0}, vals = {0};
        while (!p->failed && !is_op(cur(p), "}")) {
            if (keys.n && !expect_op(p, ","))
                break;
            if (is_op(cur(p), "}"))
                break;
            struct node *k = parse_expression(p, true);
            if (!k || !expect_op(p, ":"))
                break;
            struct node *v = parse_expression(p, true);
            if (!v || !nvec_push(p, &keys, k) || !nvec_push(p, &vals, v))
                break;
        }
        if (!p->failed)
            expect_op(p, "}");
        n = p->failed ? NULL : mk(p, E_DICT, tk);
        if (n) {
            n->kids = nvec_done(p, &keys, &n->n_kids);
            n->kids2 = nvec_done(p, &vals, &n->n_kids2);
        } else {
            mem_free(keys.v);
            mem_free(vals.v);
        }
    } else if (tk->kind == TOK_VAR_END || tk->kind == TOK_BLOCK_END || tk->kind == TOK_EOF) {
        fail(p, "unexpected end of expression%s", "");
    } else {
        char what[32];
        snprintf(what, sizeof what, "%.*s", (int)(tk->n < 20 ? tk->n : 20), tk->p ? tk->p : "");
        fail(p, "unexpected '%s'", what);
    }
out:
    p->depth--;
    return p->failed ? NULL : n;
}

static struct node *parse_unary(struct parser *p, bool with_filter)
{
    if (!enter(p))
        return NULL;
    const struct token *tk = cur(p);
    struct node *n;
    if (is_op(tk, "-") || is_op(tk, "+")) {
        advance(p);
        n = mk(p, is_op(tk, "-") ? E_NEG : E_POS, tk);
        if (n)
            n->a = parse_unary(p, false);
        if (n && !n->a)
            n = NULL;
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter)
        n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static struct node *binop(struct parser *p, const struct token *at, int op, struct node *a,
                          struct node *b)
{
    if (!a || !b)
        return NULL;
    struct node *n = mk(p, E_BINOP, at);
    if (!n)
        return NULL;
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static struct node *parse_pow(struct parser *p)
{
    struct node *n = parse_unary(p, true);
    while (n && is_op(cur(p), "**")) {
        const struct token *at = cur(p);
        advance(p);
        n = binop(p, at, OP_POW, n, parse_unary(p, true));
    }
    return n;
}

static struct node *parse_math2(struct parser *p)
{
    struct node *n = parse_pow(p);
    for (;;) {
        const struct token *at = cur(p);
        int op = is_op(at, "*")    ? OP_MUL
                 : is_op(at, "/")  ? OP_DIV
                 : is_op(at, "//") ? OP_FLOORDIV
                 : is_op(at, "%")  ? OP_MOD
                                   : -1;
        if (!n || op < 0)
            return n;
        advance(p);
        n = binop(p, at, op, n, parse_pow(p));
    }
}

static struct node *parse_concat(struct parser *p)
{
    const struct token *at = cur(p);
    struct node *first = parse_math2(p);
    if (!first || !is_op(cur(p), "~"))
        return first;
    struct nvec parts = {0};
    nvec_push(p, &parts, first);
    while (!p->failed && skip_op(p, "~")) {
        struct node *n = parse_math2(p);
        if (!n || !nvec_push(p, &parts, n))
            break;
    }
    struct node *c = p->failed ? NULL : mk(p, E_CONCAT, at);
    if (!c) {
        mem_free(parts.v);
        return NULL;
    }
    c->kids = nvec_done(p, &parts, &c->n_kids);
    return c;
}

static struct node *parse_math1(struct parser *p)
{
    struct node *n = parse_concat(p);
    for (;;) {
        const struct token *at = cur(p);
        int op = is_op(at, "+") ? OP_ADD : is_op(at, "-") ? OP_SUB : -1;
        if (!n || op < 0)
            return n;
        advance(p);
        n = binop(p, at, op, n, parse_concat(p));
    }
}

static struct node *parse_compare(struct parser *p)
{
    const struct token *at = cur(p);
    struct node *first = parse_math1(p);
    if (!first)
        return NULL;
    struct nvec rhs = {0};
    uint8_t ops[64];
    for (;;) {
        const struct token *tk = cur(p);
        int op = is_op(tk, "==")     ? CMP_EQ
                 : is_op(tk, "!=")   ? CMP_NE
                 : is_op(tk, "<")    ? CMP_LT
                 : is_op(tk, "<=")   ? CMP_LE
                 : is_op(tk, ">")    ? CMP_GT
                 : is_op(tk, ">=")   ? CMP_GE
                 : is_name(tk, "in") ? CMP_IN
                                     : -1;
        if (op < 0 && is_name(tk, "not") && is_name(peek(p, 1), "in")) {
            advance(p);
            op = CMP_NOTIN;
        }
        if (op < 0)
            break;
        if (rhs.n == 64) {
            fail(p, "comparison chain too long%s", "");
            break;
        }
        advance(p);
        struct node *r = parse_math1(p);
        if (!r || !nvec_push(p, &rhs, r))
            break;
        ops[rhs.n - 1] = (uint8_t)op;
    }
    if (p->failed) {
        mem_free(rhs.v);
        return NULL;
    }
    if (!rhs.n)
        return first;
    struct node *c = mk(p, E_COMPARE, at);
    uint8_t *o = tpl_alloc(p->t, rhs.n);
    if (!c || !o) {
        mem_free(rhs.v);
        return oom(p);
    }
    memcpy(o, ops, rhs.n);
    c->a = first;
    c->ops = o;
    c->kids = nvec_done(p, &rhs, &c->n_kids);
    return c;
}

static struct node *parse_not(struct parser *p)
{
    const struct token *tk = cur(p);
    if (is_name(tk, "not")) {
        if (!enter(p))
            return NULL;
        advance(p);
        struct node *n = mk(p, E_NOT, tk);
        if (n)
            n->a = parse_not(p);
        p->depth--;
        return n && n->a ? n : NULL;
    }
    return parse_compare(p);
}

static struct node *parse_and(struct parser *p)
{
    struct node *n = parse_not(p);
    while (n && is_name(cur(p), "and")) {
        const struct token *at = cur(p);
        advance(p);
        struct node *r = parse_not(p);
        struct node *a = r ? mk(p, E_AND, at) : NULL;
        if (!a)
            return NULL;
        a->a = n;
        a->b = r;
        n = a;
    }
    return n;
}

static struct node *parse_or(struct parser *p)
{
    struct node *n = parse_and(p);
    while (n && is_name(cur(p), "or")) {
        const struct token *at = cur(p);
        advance(p);
        struct node *r = parse_and(p);
        struct node *o = r ? mk(p, E_OR, at) : NULL;
        if (!o)
            return NULL;
        o->a = n;
        o->b = r;
        n = o;
    }
    return n;
}

static struct node *parse_condexpr(struct parser *p)
{
    if (!enter(p))
        return NULL;
    struct node *n = parse_or(p);
    while (n && is_name(cur(p), "if")) {
        const struct token *at = cur(p);
        advance(p);
        struct node *c = mk(p, E_COND, at);
        if (!c)
            break;
        c->a = n;
        c->b = parse_or(p);
        if (!c->b) {
            n = NULL;
            break;
        }
        if (skip_name(p, "else")) {
            c->c = parse_condexpr(p);
            if (!c->c) {
                n = NULL;
                break;
            }
        }
        n = c;
    }
    p->depth--;
    return p->failed ? NULL : n;
}

static struct node *parse_expression(struct parser *p, bool with_condexpr)
{
    return with_condexpr ? parse_condexpr(p) : parse_or(p);
}

static bool is_tuple_end(const struct parser *p, const char *extra_end)
{
    const struct token *tk = cur(p);
    return tk->kind == TOK_VAR_END || tk->kind == TOK_BLOCK_END || is_op(tk, ")") ||
           (extra_end && is_name(tk, extra_end));
}

// mode 0: full expressions, 1: without conditional expressions, 2: primaries
// only (assignment targets).
static struct node *parse_tuple(struct parser *p, int mode, const char *extra_end,
                                bool explicit_parens)
{
    const struct token *at = cur(p);
    struct nvec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n && !expect_op(p, ","))
            break;
        if (is_tuple_end(p, extra_end))
            break;
        struct node *n = mode == 2 ? parse_primary(p) : parse_expression(p, mode == 0);
        if (!n || !nvec_push(p, &items, n))
            break;
        if (is_op(cur(p), ","))
            is_tuple = true;
        else
            break;
    }
    if (p->failed) {
        mem_free(items.v);
        return NULL;
    }
    if (!is_tuple) {
        if (items.n) {
            struct node *n = items.v[0];
            mem_free(items.v);
            return n;
        }
        if (!explicit_parens) {
            mem_free(items.v);
            return fail_at(p, at, VLLMC_ERR_TEMPLATE, "expected an expression%s", "");
        }
    }
    struct node *t = mk(p, E_TUPLE, at);
    if (!t) {
        mem_free(items.v);
        return NULL;
    }
    t->kids = nvec_done(p, &items, &t->n_kids);
    return t;
}

// ---- statements ----

static struct node *parse_assign_target(struct parser *p, const char *extra_end, bool with_ns)
{
    const struct token *tk = cur(p);
    if (with_ns && tk->kind == TOK_NAME && is_op(peek(p, 1), ".") && peek(p, 2)->kind == TOK_NAME) {
        struct node *base = mk(p, E_NAME, tk);
        struct node *g = mk(p, E_GETATTR, tk);
        if (!base || !g)
            return NULL;
        base->str = tok_str(p, tk);
        base->str_len = tk->n;
        advance(p);
        advance(p);
        g->a = base;
        g->str = tok_str(p, cur(p));
        g->str_len = cur(p)->n;
        advance(p);
        return g;
    }
    struct node *n = parse_tuple(p, 2, extra_end, false);
    if (!n)
        return NULL;
    if (n->kind == E_NAME)
        return n;
    if (n->kind == E_TUPLE) {
        for (size_t i = 0; i < n->n_kids; i++)
            if (n->kids[i]->kind != E_NAME)
                return fail_at(p, tk, VLLMC_ERR_TEMPLATE, "can't assign to this target%s", "");
        return n;
    }
    return fail_at(p, tk, VLLMC_ERR_TEMPLATE, "can't assign to this target%s", "");
}

// Parameter list `(a, b=1)` for macros and call blocks.
static bool parse_signature(struct parser *p, struct node *n)
{
    struct nvec defs = {0};
    const char *names[64];
    size_t n_names = 0;
    if (!expect_op(p, "("))
        return false;
    while (!p->failed && !is_op(cur(p), ")")) {
        if (n_names && !expect_op(p, ","))
            break;
        if (cur(p)->kind != TOK_NAME) {
            fail(p, "expected a parameter name%s", "");
            break;
        }
        if (n_names == 64) {
            fail(p, "too many parameters%s", "");
            break;
        }
        names[n_names++] = tok_str(p, cur(p));
        advance(p);
        struct node *def = NULL;
        if (skip_op(p, "=")) {
            def = parse_expression(p, true);
            if (!def)
                break;
        } else if (defs.n && defs.v[defs.n - 1]) {
            fail(p, "non-default argument follows default argument%s", "");
            break;
        }
        if (!nvec_push(p, &defs, def))
            break;
    }
    if (!p->failed)
        expect_op(p, ")");
    size_t nd;
    n->kids2 = nvec_done(p, &defs, &nd);
    n->n_kids2 = nd;
    if (n_names && !p->failed) {
        n->names = tpl_alloc(p->t, n_names * sizeof *n->names);
        if (!n->names)
            return oom(p) != NULL;
        memcpy(n->names, names, n_names * sizeof *names);
        n->n_names = n_names;
    }
    return !p->failed;
}

static bool parse_body(struct parser *p, struct node *n, const char *const *ends, bool second)
{
    struct nvec body = {0};
    bool ok = subparse(p, ends, &body);
    if (second)
        n->kids2 = nvec_done(p, &body, &n->n_kids2);
    else
        n->kids = nvec_done(p, &body, &n->n_kids);
    return ok && !p->failed;
}

// After subparse stopped at `{% endX`: consume the name and the block end.
static bool end_tag(struct parser *p)
{
    advance(p);
    return expect_block_end(p);
}

static struct node *parse_for(struct parser *p, const struct token *at)
{
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const ends2[] = {"endfor", NULL};
    struct node *n = mk(p, N_FOR, at);
    if (!n)
        return NULL;
    n->a = parse_assign_target(p, "in", false);
    if (!n->a)
        return NULL;
    if (!skip_name(p, "in"))
        return fail(p, "expected 'in'%s", "");
    n->b = parse_tuple(p, 1, "recursive", false);
    if (!n->b)
        return NULL;
    if (skip_name(p, "if")) {
        n->c = parse_expression(p, true);
        if (!n->c)
            return NULL;
    }
    n->flag = skip_name(p, "recursive");
    if (!expect_block_end(p) || !parse_body(p, n, ends, false))
        return NULL;
    if (is_name(cur(p), "else")) {
        if (!end_tag(p) || !parse_body(p, n, ends2, true))
            return NULL;
    }
    return end_tag(p) ? n : NULL;
}

static struct node *parse_if(struct parser *p, const struct token *at)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const ends2[] = {"endif", NULL};
    struct node *n = mk(p, N_IF, at);
    if (!n)
        return NULL;
    n->a = parse_tuple(p, 1, NULL, false);
    if (!n->a || !expect_block_end(p) || !parse_body(p, n, ends, false))
        return NULL;
    if (is_name(cur(p), "elif")) {
        // `elif` is an `if` nested in the else branch; it consumes the endif.
        const struct token *e = cur(p);
        advance(p);
        struct node *sub = parse_if(p, e);
        if (!sub)
            return NULL;
        n->kids2 = tpl_alloc(p->t, sizeof *n->kids2);
        if (!n->kids2)
            return oom(p);
        n->kids2[0] = sub;
        n->n_kids2 = 1;
        return n;
    }
    if (is_name(cur(p), "else")) {
        if (!end_tag(p) || !parse_body(p, n, ends2, true))
            return NULL;
    }
    return end_tag(p) ? n : NULL;
}

static struct node *parse_set(struct parser *p, const struct token *at)
{
    static const char *const ends[] = {"endset", NULL};
    struct node *target = parse_assign_target(p, NULL, true);
    if (!target)
        return NULL;
    if (skip_op(p, "=")) {
        struct node *n = mk(p, N_SET, at);
        if (!n)
            return NULL;
        n->a = target;
        n->b = parse_tuple(p, 0, NULL, false);
        if (!n->b || !expect_block_end(p))
            return NULL;
        return n;
    }
    struct node *n = mk(p, N_SET_BLOCK, at);
    if (!n)
        return NULL;
    n->a = target;
    if (is_op(cur(p), "|")) {
        n->b = parse_filter(p, NULL, false);
        if (!n->b)
            return NULL;
    }
    if (!expect_block_end(p) || !parse_body(p, n, ends, false))
        return NULL;
    return end_tag(p) ? n : NULL;
}

static struct node *parse_macro(struct parser *p, const struct token *at)
{
    static const char *const ends[] = {"endmacro", NULL};
    struct node *n = mk(p, N_MACRO, at);
    if (!n)
        return NULL;
    if (cur(p)->kind != TOK_NAME)
        return fail(p, "expected a macro name%s", "");
    n->str = tok_str(p, cur(p));
    n->str_len = cur(p)->n;
    advance(p);
    if (!parse_signature(p, n) || !expect_block_end(p) || !parse_body(p, n, ends, false))
        return NULL;
    advance(p);
    if (cur(p)->kind == TOK_NAME)
        advance(p); // `{% endmacro name %}`
    return expect_block_end(p) ? n : NULL;
}

static struct node *parse_call_block(struct parser *p, const struct token *at)
{
    static const char *const ends[] = {"endcall", NULL};
    struct node *n = mk(p, N_CALL_BLOCK, at);
    if (!n)
        return NULL;
    if (is_op(cur(p), "(") && !parse_signature(p, n))
        return NULL;
    n->a = parse_expression(p, true);
    if (!n->a)
        return NULL;
    if (n->a->kind != E_CALL)
        return fail_at(p, at, VLLMC_ERR_TEMPLATE, "expected a call after 'call'%s", "");
    if (!expect_block_end(p) || !parse_body(p, n, ends, false))
        return NULL;
    return end_tag(p) ? n : NULL;
}

static struct node *parse_filter_block(struct parser *p, const struct token *at)
{
    static const char *const ends[] = {"endfilter", NULL};
    struct node *n = mk(p, N_FILTER_BLOCK, at);
    if (!n)
        return NULL;
    n->a = parse_filter(p, NULL, true);
    if (!n->a || !expect_block_end(p) || !parse_body(p, n, ends, false))
        return NULL;
    return end_tag(p) ? n : NULL;
}

static struct node *parse_with(struct parser *p, const struct token *at)
{
    static const char *const ends[] = {"endwith", NULL};
    struct node *n = mk(p, N_WITH, at);
    if (!n)
        return NULL;
    struct nvec targets = {0}, vals = {0};
    while (!p->failed && cur(p)->kind != TOK_BLOCK_END) {
        if (targets.n && !expect_op(p, ","))
            break;
        struct node *t = parse_assign_target(p, NULL, false);
        if (!t || !expect_op(p, "="))
            break;
        struct node *v = parse_expression(p, true);
        if (!v || !nvec_push(p, &targets, t) || !nvec_push(p, &vals, v))
            break;
    }
    size_t nt;
    struct node **tv = nvec_done(p, &targets, &nt);
    n->kids2 = nvec_done(p, &vals, &n->n_kids2);
    if (p->failed || !expect_block_end(p))
        return NULL;
    n->a = mk(p, E_TUPLE, at);
    if (!n->a)
        return NULL;
    n->a->kids = tv;
    n->a->n_kids = nt;
    if (!parse_body(p, n, ends, false))
        return NULL;
    return end_tag(p) ? n : NULL;
}

static struct node *parse_statement(struct parser *p)
{
    advance(p); // block begin
    const struct token *at = cur(p);
    if (at->kind != TOK_NAME)
        return fail(p, "tag name expected%s", "");
    if (!enter(p))
        return NULL;
    advance(p);
    struct node *n = NULL;
    if (is_name(at, "for")) {
        n = parse_for(p, at);
    } else if (is_name(at, "if")) {
        n = parse_if(p, at);
    } else if (is_name(at, "set")) {
        n = parse_set(p, at);
    } else if (is_name(at, "macro")) {
        n = parse_macro(p, at);
    } else if (is_name(at, "call")) {
        n = parse_call_block(p, at);
    } else if (is_name(at, "filter")) {
        n = parse_filter_block(p, at);
    } else if (is_name(at, "with")) {
        n = parse_with(p, at);
    } else if (is_name(at, "print")) {
        n = mk(p, N_OUTPUT, at);
        if (n)
            n->a = parse_tuple(p, 0, NULL, false);
        if (n && (!n->a || !expect_block_end(p)))
            n = NULL;
    } else if (is_name(at, "break") || is_name(at, "continue")) {
        n = mk(p, is_name(at, "break") ? N_BREAK : N_CONTINUE, at);
        if (n && !expect_block_end(p))
            n = NULL;
    } else if (is_name(at, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        n = mk(p, N_GENERATION, at);
        if (n && (!expect_block_end(p) || !parse_body(p, n, ends, false) || !end_tag(p)))
            n = NULL;
    } else if (is_name(at, "block") || is_name(at, "extends") || is_name(at, "include") ||
               is_name(at, "import") || is_name(at, "from") || is_name(at, "autoescape")) {
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)at->n, at->p);
        fail_at(p, at, VLLMC_ERR_UNSUPPORTED, "unsupported tag '%s'", name);
    } else {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(at->n < 60 ? at->n : 60), at->p);
        fail_at(p, at, VLLMC_ERR_TEMPLATE, "Encountered unknown tag '%s'.", name);
    }
    p->depth--;
    return p->failed ? NULL : n;
}

// Parses nodes until EOF or a `{% name` with name in end_names (left unconsumed,
// positioned at the name).
static bool subparse(struct parser *p, const char *const *end_names, struct nvec *body)
{
    while (!p->failed) {
        const struct token *tk = cur(p);
        if (tk->kind == TOK_EOF) {
            if (end_names) {
                char want[192] = "";
                for (const char *const *e = end_names; *e; e++) {
                    size_t k = strlen(want);
                    snprintf(want + k, sizeof want - k, "%s'%s'", k ? " or " : "", *e);
                }
                fail_at(p, tk, VLLMC_ERR_TEMPLATE,
                        "Unexpected end of template. Jinja was looking for the following tags: "
                        "%s.",
                        want);
                return false;
            }
            return true;
        }
        struct node *n = NULL;
        if (tk->kind == TOK_DATA) {
            n = mk(p, N_TEXT, tk);
            if (n) {
                n->str = tk->p;
                n->str_len = tk->n;
            }
            advance(p);
        } else if (tk->kind == TOK_VAR_BEGIN) {
            advance(p);
            n = mk(p, N_OUTPUT, tk);
            if (n)
                n->a = parse_tuple(p, 0, NULL, false);
            if (n && n->a && cur(p)->kind != TOK_VAR_END)
                fail(p, "expected '}}'%s", "");
            advance(p);
        } else if (tk->kind == TOK_BLOCK_BEGIN) {
            const struct token *name = peek(p, 1);
            if (end_names) {
                for (const char *const *e = end_names; *e; e++) {
                    if (is_name(name, *e)) {
                        advance(p);
                        return true;
                    }
                }
            }
            if (name->kind == TOK_NAME && name->n > 3 && !memcmp(name->p, "end", 3)) {
                char s[64];
                snprintf(s, sizeof s, "%.*s", (int)(name->n < 60 ? name->n : 60), name->p);
                fail_at(p, name, VLLMC_ERR_TEMPLATE, "Encountered unexpected tag '%s'.", s);
                return false;
            }
            n = parse_statement(p);
        } else {
            fail(p, "unexpected token%s", "");
        }
        if (!n || !nvec_push(p, body, n))
            return false;
    }
    return false;
}

// ---- name check ----

#define CHECK_DEPTH_MAX 4000

// Unknown filters and tests fail at compile time, except inside `if`
// statements and conditional expressions, where jinja2 defers the error to
// the moment they run (so `{% if 'x' is filter %}` guards work).
static bool check_names(struct parser *p, const struct node *n, bool soft, int depth)
{
    if (!n)
        return true;
    struct token at = {.line = n->line, .col = n->col};
    if (depth > CHECK_DEPTH_MAX) {
        fail_at(p, &at, VLLMC_ERR_CAPACITY, "expression nested too deeply%s", "");
        return false;
    }
    if (!soft && n->kind == E_FILTER && !filter_exists(n->str)) {
        fail_at(p, &at, VLLMC_ERR_UNSUPPORTED, "unsupported filter '%s'", n->str);
        return false;
    }
    if (!soft && n->kind == E_TEST && !test_exists(n->str)) {
        fail_at(p, &at, VLLMC_ERR_UNSUPPORTED, "unsupported test '%s'", n->str);
        return false;
    }
    bool soft_all = n->kind == N_IF || n->kind == E_COND;
    // Bodies that jinja2 compiles in a frame of their own are checked strictly.
    bool own_frame = n->kind == N_FOR || n->kind == N_MACRO || n->kind == N_CALL_BLOCK ||
                     n->kind == N_FILTER_BLOCK || n->kind == N_SET_BLOCK || n->kind == N_WITH;
    bool s = soft || soft_all;
    bool body_soft = soft_all || (!own_frame && soft);
    bool kids2_soft = n->kind == N_WITH ? soft : body_soft;
    if (!check_names(p, n->a, s, depth + 1) || !check_names(p, n->b, s, depth + 1) ||
        !check_names(p, n->c, s, depth + 1) || !check_names(p, n->d, s, depth + 1))
        return false;
    for (size_t i = 0; i < n->n_kids; i++)
        if (!check_names(p, n->kids[i], body_soft, depth + 1))
            return false;
    for (size_t i = 0; i < n->n_kids2; i++)
        if (!check_names(p, n->kids2[i], kids2_soft, depth + 1))
            return false;
    return true;
}

enum vllmc_status parser_run(struct jinja_template *t, const struct token_list *toks, struct err *e)
{
    struct parser p = {.t = t, .toks = toks, .e = e};
    struct nvec body = {0};
    subparse(&p, NULL, &body);
    struct node *root = p.failed ? NULL : mk(&p, N_BODY, &toks->v[0]);
    if (root)
        root->kids = nvec_done(&p, &body, &root->n_kids);
    else
        mem_free(body.v);
    if (root && !p.failed)
        check_names(&p, root, false, 0);
    if (p.failed)
        return e->code ? e->code : VLLMC_ERR_TEMPLATE;
    t->root = root;
    return VLLMC_OK;
}
