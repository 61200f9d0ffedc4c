// Template evaluator: walks the syntax tree with jinja2's semantics (scopes
// per loop iteration and per macro call, Undefined that prints empty but
// fails when used, Python operators). All state lives in struct render, so
// one compiled template renders from many threads at once.
#include "template/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"

#define EVAL_DEPTH_MAX 1000

// ---- errors ----

int render_fail(struct render *r, enum vllmc_status code, const char *fmt, ...)
{
    if (r->e->code)
        return -1; // keep the first error
    char msg[ERR_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line = r->at ? r->at->line : 0, col = r->at ? r->at->col : 0;
    err_set(r->e, code, "%s:%d:%d: %s", r->t->name, line, col, msg);
    return -1;
}

int render_oom(struct render *r)
{
    return render_fail(r, VLLMC_ERR_NOMEM, "out of memory (or a value nested more than %d deep)",
                       JV_DEPTH_MAX);
}

int render_raise(struct render *r, const char *msg, size_t n)
{
    if (!r->e->code)
        err_set(r->e, VLLMC_ERR_TEMPLATE, "%.*s", (int)(n < ERR_MSG_BYTES ? n : ERR_MSG_BYTES),
                msg);
    return -1;
}

int eval_undef_fail(struct render *r, struct jv v)
{
    if (v.kind == JV_UNDEF && v.u.s)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "%s", v.u.s->data);
    return render_fail(r, VLLMC_ERR_TEMPLATE, "value is undefined");
}

// ---- frames ----

static struct frame *frame_new(struct frame *parent)
{
    struct frame *f = mem_calloc(1, sizeof *f);
    if (!f)
        return NULL;
    if (!jv_dict_new(false, &f->vars)) {
        mem_free(f);
        return NULL;
    }
    f->h.refs = 1;
    f->parent = parent;
    if (parent)
        parent->h.refs++;
    return f;
}

void frame_release(struct frame *f)
{
    while (f && --f->h.refs == 0) {
        struct frame *parent = f->parent;
        jv_release(f->vars);
        mem_free(f);
        f = parent;
    }
}

static int frame_push(struct render *r)
{
    struct frame *f = frame_new(r->frame);
    if (!f)
        return render_oom(r);
    r->frame = f;
    return 0;
}

// Leaves the innermost scope. Its variables are dropped now, which breaks the
// cycle a macro defined in it would otherwise form with its closure.
static void frame_pop(struct render *r)
{
    struct frame *f = r->frame;
    r->frame = f->parent;
    jv_dict_clear(f->vars.u.d);
    frame_release(f);
}

static int frame_set(struct render *r, struct frame *f, const char *name, struct jv v)
{
    struct jv key;
    if (!jv_str_cstr(name, &key)) {
        jv_release(v);
        return render_oom(r);
    }
    if (!jv_dict_set(f->vars.u.d, key, v))
        return render_oom(r);
    return 0;
}

static struct jv *frame_find(struct frame *f, const char *name)
{
    for (; f; f = f->parent) {
        struct jv *v = jv_dict_get_cstr(f->vars.u.d, name);
        if (v)
            return v;
    }
    return NULL;
}

// ---- output ----

static int out_put(struct render *r, const char *p, size_t n)
{
    if (r->out->len + n > r->output_bytes_max)
        return render_fail(r, VLLMC_ERR_CAPACITY, "output larger than %zu bytes",
                           r->output_bytes_max);
    sbuf_put(r->out, p, n);
    return r->out->oom ? render_oom(r) : 0;
}

int eval_to_str(struct render *r, struct jv v, struct jv *out)
{
    if (v.kind == JV_STR) {
        *out = jv_retain(v);
        return 0;
    }
    struct sbuf b;
    sbuf_init(&b);
    if (!jv_write(&b, v, 0)) {
        sbuf_free(&b);
        return render_fail(r, VLLMC_ERR_UNSUPPORTED, "unsupported: cannot print a %s value",
                           jv_type_name(v));
    }
    return sbuf_to_jv(&b, out) ? 0 : render_oom(r);
}

static int out_value(struct render *r, struct jv v)
{
    if (v.kind == JV_STR)
        return out_put(r, v.u.s->data, v.u.s->len);
    struct jv s;
    if (eval_to_str(r, v, &s))
        return -1;
    int rc = out_put(r, s.u.s->data, s.u.s->len);
    jv_release(s);
    return rc;
}

// Runs body with output going to a fresh buffer; *out gets the text.
static int capture(struct render *r, struct node *const *kids, size_t n, struct jv *out)
{
    if (++r->depth > RENDER_DEPTH_MAX) {
        r->depth--;
        return render_fail(r, VLLMC_ERR_CAPACITY, "templates nested more than %d deep",
                           RENDER_DEPTH_MAX);
    }
    struct sbuf b, *saved = r->out;
    sbuf_init(&b);
    r->out = &b;
    int rc = render_body(r, kids, n);
    r->out = saved;
    r->depth--;
    if (rc) {
        sbuf_free(&b);
        return -1;
    }
    return sbuf_to_jv(&b, out) ? 0 : render_oom(r);
}

// ---- iteration ----

int eval_iter_items(struct render *r, struct jv v, struct jv *out)
{
    switch (v.kind) {
    case JV_LIST:
        if (jv_is_iterator(v)) {
            // An iterator hands out what is left of it, once.
            struct jv_list *l = v.u.l;
            if (gen_force(r, l))
                return -1;
            if (!jv_list_new(l->n - l->pos, false, out))
                return render_oom(r);
            for (; l->pos < l->n; l->pos++)
                jv_list_push(out->u.l, jv_retain(l->items[l->pos]));
            return 0;
        }
        *out = jv_retain(v);
        return 0;
    case JV_UNDEF:
        return jv_list_new(0, false, out) ? 0 : render_oom(r);
    case JV_DICT: {
        if (v.u.d->ns)
            break;
        if (!jv_list_new(v.u.d->n, false, out))
            return render_oom(r);
        for (size_t i = 0; i < v.u.d->n; i++)
            jv_list_push(out->u.l, jv_retain(v.u.d->keys[i]));
        return 0;
    }
    case JV_STR: {
        const struct jv_str *s = v.u.s;
        if (!jv_list_new(0, false, out))
            return render_oom(r);
        for (size_t i = 0; i < s->len;) {
            size_t adv;
            jv_utf8_decode(s->data + i, s->len - i, &adv);
            struct jv c;
            if (!jv_str_new(s->data + i, adv, &c) || !jv_list_push(out->u.l, c)) {
                jv_release(*out);
                return render_oom(r);
            }
            i += adv;
        }
        return 0;
    }
    default:
        break;
    }
    return render_fail(r, VLLMC_ERR_TEMPLATE, "'%s' object is not iterable", jv_type_name(v));
}

static int assign_target(struct render *r, const struct node *target, struct jv v)
{
    if (target->kind == E_NAME)
        return frame_set(r, r->frame, target->str, v);
    // Tuple unpacking.
    struct jv items;
    if (eval_iter_items(r, v, &items)) {
        jv_release(v);
        return -1;
    }
    jv_release(v);
    size_t want = target->n_kids, got = items.u.l->n;
    if (want != got) {
        jv_release(items);
        if (got > want)
            return render_fail(r, VLLMC_ERR_TEMPLATE, "too many values to unpack (expected %zu)",
                               want);
        return render_fail(r, VLLMC_ERR_TEMPLATE,
                           "not enough values to unpack (expected %zu, got %zu)", want, got);
    }
    for (size_t i = 0; i < want; i++) {
        if (frame_set(r, r->frame, target->kids[i]->str, jv_retain(items.u.l->items[i]))) {
            jv_release(items);
            return -1;
        }
    }
    jv_release(items);
    return 0;
}

void loop_free(struct jv_loop *l)
{
    if (l->items)
        jv_release((struct jv){.kind = JV_LIST, .u.l = l->items});
    if (l->frame)
        frame_release(l->frame);
    jv_release(l->last_changed);
    mem_free(l);
}

static int render_for_items(struct render *r, const struct node *n, struct jv iterable,
                            size_t depth0)
{
    struct jv items;
    if (eval_iter_items(r, iterable, &items))
        return -1;
    if (n->c) {
        // `for x in xs if cond`: filter first, so loop.length and loop.last
        // count only the kept items, as jinja2 does.
        struct jv kept;
        if (!jv_list_new(0, false, &kept)) {
            jv_release(items);
            return render_oom(r);
        }
        for (size_t i = 0; i < items.u.l->n; i++) {
            struct jv cond;
            int rc = frame_push(r);
            if (rc) {
                jv_release(items);
                jv_release(kept);
                return -1;
            }
            rc = assign_target(r, n->a, jv_retain(items.u.l->items[i]));
            if (!rc)
                rc = eval_expr(r, n->c, &cond);
            if (!rc) {
                bool keep = jv_truthy(cond);
                jv_release(cond);
                if (keep && !jv_list_push(kept.u.l, jv_retain(items.u.l->items[i])))
                    rc = render_oom(r);
            }
            frame_pop(r);
            if (rc) {
                jv_release(items);
                jv_release(kept);
                return -1;
            }
        }
        jv_release(items);
        items = kept;
    }
    const struct jv_list *l = items.u.l;
    if (l->n == 0) {
        jv_release(items);
        return render_body(r, n->kids2, n->n_kids2);
    }
    struct jv_loop *lp = mem_calloc(1, sizeof *lp);
    if (!lp) {
        jv_release(items);
        return render_oom(r);
    }
    lp->h.refs = 1;
    lp->items = items.u.l; // takes the reference
    lp->depth0 = depth0;
    lp->recursive = n->flag ? n : NULL;
    lp->frame = r->frame;
    r->frame->h.refs++;
    struct jv loopv = {.kind = JV_LOOP, .u.loop = lp};
    int rc = 0;
    for (size_t i = 0; i < l->n && !rc; i++) {
        if (++r->steps > r->n_steps_max) {
            rc = render_fail(r, VLLMC_ERR_CAPACITY, "template ran more than %ld steps",
                             r->n_steps_max);
            break;
        }
        lp->index0 = i;
        rc = frame_push(r);
        if (rc)
            break;
        rc = assign_target(r, n->a, jv_retain(l->items[i]));
        if (!rc)
            rc = frame_set(r, r->frame, "loop", jv_retain(loopv));
        if (!rc)
            rc = render_body(r, n->kids, n->n_kids);
        frame_pop(r);
        if (r->flow == FLOW_BREAK) {
            r->flow = FLOW_NONE;
            break;
        }
        r->flow = FLOW_NONE;
    }
    jv_release(loopv);
    return rc;
}

// loop(items) in a recursive for: renders the loop again one level deeper.
static int loop_call(struct render *r, struct jv_loop *lp, const struct args *a, struct jv *out)
{
    if (!lp->recursive)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "'LoopContext' object is not callable");
    if (a->n_pos != 1 || a->n_kw)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "loop() takes exactly one argument");
    if (++r->depth > RENDER_DEPTH_MAX) {
        r->depth--;
        return render_fail(r, VLLMC_ERR_CAPACITY, "loop recursion deeper than %d",
                           RENDER_DEPTH_MAX);
    }
    struct sbuf b, *saved_out = r->out;
    struct frame *saved_frame = r->frame;
    sbuf_init(&b);
    r->out = &b;
    r->frame = lp->frame;
    int rc = render_for_items(r, lp->recursive, a->pos[0], lp->depth0 + 1);
    r->out = saved_out;
    r->frame = saved_frame;
    r->depth--;
    if (rc) {
        sbuf_free(&b);
        return -1;
    }
    return sbuf_to_jv(&b, out) ? 0 : render_oom(r);
}

static int loop_cycle(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    if (!a->n_pos)
        return render_fail(r, VLLMC_ERR_TEMPLATE, "no items for cycling given");
    *out = jv_retain(a->pos[self.u.loop->index0 % a->n_pos]);
    return 0;
}

static int loop_changed(struct render *r, struct jv self, const struct args *a, struct jv *out)
{
    struct jv_loop *lp = self.u.loop;
    struct jv now;
    if (!jv_list_new(a->n_pos, true, &now))
        return render_oom(r);
    for (size_t i = 0; i < a->n_pos; i++)
        jv_list_push(now.u.l, jv_retain(a->pos[i]));
    bool changed = lp->last_changed.kind != JV_LIST || !jv_equal(now, lp->last_changed);
    jv_release(lp->last_changed);
    lp->last_changed = now;
    *out = jv_bool(changed);
    return 0;
}

int eval_loop_attr(struct render *r, struct jv self, const char *name, struct jv *out)
{
    const struct jv_loop *lp = self.u.loop;
    int64_t i = (int64_t)lp->index0, n = (int64_t)lp->items->n;
    if (!strcmp(name, "index"))
        *out = jv_int(i + 1);
    else if (!strcmp(name, "index0"))
        *out = jv_int(i);
    else if (!strcmp(name, "revindex"))
        *out = jv_int(n - i);
    else if (!strcmp(name, "revindex0"))
        *out = jv_int(n - i - 1);
    else if (!strcmp(name, "first"))
        *out = jv_bool(i == 0);
    else if (!strcmp(name, "last"))
        *out = jv_bool(i == n - 1);
    else if (!strcmp(name, "length"))
        *out = jv_int(n);
    else if (!strcmp(name, "depth"))
        *out = jv_int((int64_t)lp->depth0 + 1);
    else if (!strcmp(name, "depth0"))
        *out = jv_int((int64_t)lp->depth0);
    else if (!strcmp(name, "previtem")) {
        if (i > 0)
            *out = jv_retain(lp->items->items[i - 1]);
        else if (!jv_undef_msg(out, "there is no previous item"))
            return render_oom(r);
    } else if (!strcmp(name, "nextitem")) {
        if (i + 1 < n)
            *out = jv_retain(lp->items->items[i + 1]);
        else if (!jv_undef_msg(out, "there is no next item"))
            return render_oom(r);
    } else if (!strcmp(name, "cycle") || !strcmp(name, "changed")) {
        if (!jv_func_new(name, name[1] == 'y' ? loop_cycle : loop_changed, self, out))
            return render_oom(r);
    } else if (!jv_undef_msg(out, "'LoopContext object' has no attribute '%s'", name)) {
        return render_oom(r);
    }
    return 0;
}

// ---- calls ----

static void args_release(struct jv *vals, size_t n)
{
    for (size_t i = 0; i < n; i++)
        jv_release(vals[i]);
    mem_free(vals);
}

// Evaluates a call's arguments into one owned array: positional, then keyword.
static int eval_args(struct render *r, const struct node *n, struct args *a, struct jv **vals,
                     size_t extra_kw)
{
    size_t total = n->n_kids + n->n_kids2;
    *vals = mem_calloc(total + extra_kw + 1, sizeof **vals);
    if (!*vals)
        return render_oom(r);
    for (size_t i = 0; i < total; i++) {
        const struct node *k = i < n->n_kids ? n->kids[i] : n->kids2[i - n->n_kids];
        if (eval_expr(r, k, &(*vals)[i])) {
            args_release(*vals, i);
            *vals = NULL;
            return -1;
        }
    }
    a->n_pos = n->n_kids;
    a->pos = *vals;
    a->n_kw = n->n_kids2;
    a->kw = *vals + n->n_kids;
    a->kw_names = n->names;
    return 0;
}

static int call_macro(struct render *r, const struct jv_func *fn, const struct args *a,
                      struct jv *out)
{
    const struct node *m = fn->body;
    if (++r->depth > RENDER_DEPTH_MAX) {
        r->depth--;
        return render_fail(r, VLLMC_ERR_CAPACITY, "macro calls nested more than %d deep",
                           RENDER_DEPTH_MAX);
    }
    struct frame *saved = r->frame;
    struct frame *f = frame_new(fn->closure);
    int rc = f ? 0 : render_oom(r);
    struct jv varargs = jv_undef(), kwargs = jv_undef();
    if (!rc && (!jv_list_new(0, true, &varargs) || !jv_dict_new(false, &kwargs)))
        rc = render_oom(r);
    if (rc)
        goto done;
    r->frame = f;
    for (size_t i = 0; i < a->n_pos && !rc; i++) {
        if (i < m->n_names)
            rc = frame_set(r, f, m->names[i], jv_retain(a->pos[i]));
        else if (!jv_list_push(varargs.u.l, jv_retain(a->pos[i])))
            rc = render_oom(r);
    }
    for (size_t i = 0; i < a->n_kw && !rc; i++) {
        bool param = false;
        for (size_t k = 0; k < m->n_names; k++)
            param = param || !strcmp(m->names[k], a->kw_names[i]);
        if (param) {
            rc = frame_set(r, f, a->kw_names[i], jv_retain(a->kw[i]));
        } else if (!strcmp(a->kw_names[i], "caller") && fn->body->kind == N_MACRO) {
            rc = frame_set(r, f, "caller", jv_retain(a->kw[i]));
        } else {
            struct jv key;
            if (!jv_str_cstr(a->kw_names[i], &key) ||
                !jv_dict_set(kwargs.u.d, key, jv_retain(a->kw[i])))
                rc = render_oom(r);
        }
    }
    // Parameters not passed take their defaults, evaluated now in the
    // macro's scope so they can refer to earlier parameters.
    for (size_t k = 0; k < m->n_names && !rc; k++) {
        if (jv_dict_get_cstr(f->vars.u.d, m->names[k]))
            continue;
        struct jv v;
        if (k < m->n_kids2 && m->kids2[k]) {
            rc = eval_expr(r, m->kids2[k], &v);
        } else if (!jv_undef_msg(&v, "parameter '%s' was not provided", m->names[k])) {
            rc = render_oom(r);
        }
        if (!rc)
            rc = frame_set(r, f, m->names[k], v);
    }
    if (!rc) {
        rc = frame_set(r, f, "varargs", varargs);
        varargs = jv_undef();
    }
    if (!rc) {
        rc = frame_set(r, f, "kwargs", kwargs);
        kwargs = jv_undef();
    }
    if (!rc) {
        r->depth--;
        rc = capture(r, m->kids, m->n_kids, out);
        r->depth++;
        r->flow = FLOW_NONE;
    }
    r->frame = saved;
    jv_dict_clear(f->vars.u.d);
done:
    jv_release(varargs);
    jv_release(kwargs);
    if (f)
        frame_release(f);
    r->depth--;
    return rc;
}

int eval_call_value(struct render *r, struct jv fn, const struct args *a, struct jv *out)
{
    if (fn.kind == JV_FUNC) {
        if (fn.u.fn->fn)
            return fn.u.fn->fn(r, fn.u.fn->self, a, out);
        return call_macro(r, fn.u.fn, a, out);
    }
    if (fn.kind == JV_LOOP)
        return loop_call(r, fn.u.loop, a, out);
    if (fn.kind == JV_UNDEF)
        return eval_undef_fail(r, fn);
    return render_fail(r, VLLMC_ERR_TEMPLATE, "'%s' object is not callable", jv_type_name(fn));
}

static int eval_call(struct render *r, const struct node *n, const struct jv *caller,
                     struct jv *out)
{
    struct jv fn;
    if (eval_expr(r, n->a, &fn))
        return -1;
    struct args a;
    struct jv *vals;
    if (eval_args(r, n, &a, &vals, caller ? 1 : 0)) {
        jv_release(fn);
        return -1;
    }
    const char *names_buf[66];
    if (caller) {
        // The call block's body becomes the keyword argument `caller`.
        for (size_t i = 0; i < a.n_kw; i++)
            names_buf[i] = a.kw_names[i];
        names_buf[a.n_kw] = "caller";
        vals[n->n_kids + n->n_kids2] = jv_retain(*caller);
        a.kw_names = names_buf;
        a.n_kw++;
    }
    const struct node *saved_at = r->at;
    r->at = n;
    int rc = eval_call_value(r, fn, &a, out);
    r->at = saved_at;
    args_release(vals, n->n_kids + n->n_kids2 + (caller ? 1 : 0));
    jv_release(fn);
    return rc;
}

static int eval_filter(struct render *r, const struct node *n, const struct jv *given,
                       struct jv *out)
{
    struct jv subject;
    int rc = 0;
    if (!n->a)
        subject = jv_retain(*given);
    else if (given)
        rc = eval_filter(r, n->a, given, &subject);
    else
        rc = eval_expr(r, n->a, &subject);
    if (rc)
        return -1;
    struct args a;
    struct jv *vals;
    if (eval_args(r, n, &a, &vals, 0)) {
        jv_release(subject);
        return -1;
    }
    r->at = n;
    rc = filter_apply(r, n->str, subject, &a, out);
    args_release(vals, n->n_kids + n->n_kids2);
    jv_release(subject);
    return rc;
}

static int eval_test(struct render *r, const struct node *n, struct jv *out)
{
    struct jv subject;
    if (eval_expr(r, n->a, &subject))
        return -1;
    struct args a;
    struct jv *vals;
    if (eval_args(r, n, &a, &vals, 0)) {
        jv_release(subject);
        return -1;
    }
    r->at = n;
    bool res = false;
    int rc = test_apply(r, n->str, subject, &a, &res);
    args_release(vals, n->n_kids + n->n_kids2);
    jv_release(subject);
    *out = jv_bool(n->flag ? !res : res);
    return rc;
}

// ---- expressions ----

static int64_t int_of(struct jv v)
{
    return v.kind == JV_INT ? v.u.i : (int64_t)v.u.b;
}

static int eval_seq(struct render *r, const struct node *n, bool tuple, struct jv *out)
{
    if (!jv_list_new(n->n_kids, tuple, out))
        return render_oom(r);
    for (size_t i = 0; i < n->n_kids; i++) {
        struct jv v;
        if (eval_expr(r, n->kids[i], &v)) {
            jv_release(*out);
            return -1;
        }
        if (!jv_nest_ok(v)) {
            jv_release(v);
            jv_release(*out);
            r->at = n;
            return render_fail(r, VLLMC_ERR_CAPACITY, "values nested more than %d deep",
                               JV_DEPTH_MAX);
        }
        if (!jv_list_push(out->u.l, v)) {
            jv_release(*out);
            return render_oom(r);
        }
    }
    return 0;
}

static int eval_dict(struct render *r, const struct node *n, struct jv *out)
{
    if (!jv_dict_new(false, out))
        return render_oom(r);
    for (size_t i = 0; i < n->n_kids; i++) {
        struct jv k, v;
        if (eval_expr(r, n->kids[i], &k))
            goto fail;
        if (k.kind == JV_LIST || k.kind == JV_DICT || k.kind == JV_UNDEF) {
            jv_release(k);
            r->at = n->kids[i];
            render_fail(r, VLLMC_ERR_TEMPLATE, "unhashable or undefined dict key");
            goto fail;
        }
        if (eval_expr(r, n->kids2[i], &v)) {
            jv_release(k);
            goto fail;
        }
        if (!jv_nest_ok(v)) {
            jv_release(k);
            jv_release(v);
            r->at = n;
            render_fail(r, VLLMC_ERR_CAPACITY, "values nested more than %d deep", JV_DEPTH_MAX);
            goto fail;
        }
        if (!jv_dict_set(out->u.d, k, v)) {
            render_oom(r);
            goto fail;
        }
    }
    return 0;
fail:
    jv_release(*out);
    return -1;
}

static int eval_name(struct render *r, const struct node *n, struct jv *out)
{
    struct jv *v = frame_find(r->frame, n->str);
    if (v) {
        *out = jv_retain(*v);
        return 0;
    }
    if (global_lookup(r, n->str, out))
        return -1;
    if (out->kind != JV_UNDEF)
        return 0;
    return jv_undef_msg(out, "'%s' is undefined", n->str) ? 0 : render_oom(r);
}

static int eval_inner(struct render *r, const struct node *n, struct jv *out)
{
    struct jv a, b;
    int rc;
    switch (n->kind) {
    case E_CONST:
        *out = n->val; // immortal
        return 0;
    case E_NAME:
        return eval_name(r, n, out);
    case E_LIST:
    case E_TUPLE:
        return eval_seq(r, n, n->kind == E_TUPLE, out);
    case E_DICT:
        return eval_dict(r, n, out);
    case E_GETATTR:
        if (eval_expr(r, n->a, &a))
            return -1;
        r->at = n;
        rc = eval_getattr(r, a, n->str, n->str_len, out);
        jv_release(a);
        return rc;
    case E_GETITEM:
        if (eval_expr(r, n->a, &a))
            return -1;
        if (eval_expr(r, n->b, &b)) {
            jv_release(a);
            return -1;
        }
        r->at = n;
        rc = eval_getitem(r, a, b, out);
        jv_release(a);
        jv_release(b);
        return rc;
    case E_SLICE: {
        struct jv sv[3] = {jv_none(), jv_none(), jv_none()};
        const struct node *parts[3] = {n->b, n->c, n->d};
        if (eval_expr(r, n->a, &a))
            return -1;
        rc = 0;
        for (int k = 0; k < 3 && !rc; k++)
            if (parts[k])
                rc = eval_expr(r, parts[k], &sv[k]);
        r->at = n;
        if (!rc)
            rc = eval_slice(r, a, sv, out);
        for (int k = 0; k < 3; k++)
            jv_release(sv[k]);
        jv_release(a);
        return rc;
    }
    case E_CALL:
        return eval_call(r, n, NULL, out);
    case E_FILTER:
        return eval_filter(r, n, NULL, out);
    case E_TEST:
        return eval_test(r, n, out);
    case E_NOT:
        if (eval_expr(r, n->a, &a))
            return -1;
        *out = jv_bool(!jv_truthy(a));
        jv_release(a);
        return 0;
    case E_NEG:
    case E_POS:
        if (eval_expr(r, n->a, &a))
            return -1;
        r->at = n;
        if (a.kind == JV_UNDEF) {
            rc = eval_undef_fail(r, a);
        } else if (a.kind == JV_FLOAT) {
            *out = jv_float(n->kind == E_NEG ? -a.u.f : a.u.f);
            rc = 0;
        } else if (a.kind == JV_INT || a.kind == JV_BOOL) {
            int64_t v = int_of(a);
            if (n->kind == E_NEG && v == INT64_MIN)
                rc = render_fail(r, VLLMC_ERR_UNSUPPORTED,
                                 "unsupported: integer result out of 64-bit range");
            else {
                *out = jv_int(n->kind == E_NEG ? -v : v);
                rc = 0;
            }
        } else {
            rc = render_fail(r, VLLMC_ERR_TEMPLATE, "bad operand type for unary %s: '%s'",
                             n->kind == E_NEG ? "-" : "+", jv_type_name(a));
        }
        jv_release(a);
        return rc;
    case E_BINOP:
        if (eval_expr(r, n->a, &a))
            return -1;
        if (eval_expr(r, n->b, &b)) {
            jv_release(a);
            return -1;
        }
        r->at = n;
        rc = eval_binop(r, n->op, a, b, out);
        jv_release(a);
        jv_release(b);
        return rc;
    case E_CONCAT: {
        struct sbuf s;
        sbuf_init(&s);
        for (size_t i = 0; i < n->n_kids; i++) {
            if (eval_expr(r, n->kids[i], &a)) {
                sbuf_free(&s);
                return -1;
            }
            r->at = n;
            bool ok = jv_write(&s, a, 0);
            jv_release(a);
            if (!ok) {
                sbuf_free(&s);
                return render_fail(r, VLLMC_ERR_UNSUPPORTED,
                                   "unsupported: cannot convert value to string");
            }
            if (s.len > RENDER_OUTPUT_MAX) {
                sbuf_free(&s);
                return render_fail(r, VLLMC_ERR_CAPACITY, "string too large");
            }
        }
        return sbuf_to_jv(&s, out) ? 0 : render_oom(r);
    }
    case E_COMPARE: {
        if (eval_expr(r, n->a, &a))
            return -1;
        bool res = true;
        for (size_t i = 0; i < n->n_kids && res; i++) {
            if (eval_expr(r, n->kids[i], &b)) {
                jv_release(a);
                return -1;
            }
            r->at = n;
            rc = eval_cmp(r, n->ops[i], a, b, &res);
            jv_release(a);
            a = b;
            if (rc) {
                jv_release(a);
                return -1;
            }
        }
        jv_release(a);
        *out = jv_bool(res);
        return 0;
    }
    case E_AND:
    case E_OR:
        if (eval_expr(r, n->a, &a))
            return -1;
        if (jv_truthy(a) == (n->kind == E_OR)) {
            *out = a;
            return 0;
        }
        jv_release(a);
        return eval_expr(r, n->b, out);
    case E_COND:
        if (eval_expr(r, n->b, &b))
            return -1;
        rc = jv_truthy(b);
        jv_release(b);
        if (rc)
            return eval_expr(r, n->a, out);
        if (n->c)
            return eval_expr(r, n->c, out);
        return jv_undef_msg(out,
                            "the inline if-expression on line %d evaluated to false and "
                            "no else section was defined.",
                            n->line)
                   ? 0
                   : render_oom(r);
    default:
        return render_fail(r, VLLMC_ERR_TEMPLATE, "statement used as an expression");
    }
}

int eval_expr(struct render *r, const struct node *n, struct jv *out)
{
    if (++r->eval_depth > EVAL_DEPTH_MAX) {
        r->eval_depth--;
        r->at = n;
        return render_fail(r, VLLMC_ERR_CAPACITY, "expression nested more than %d deep",
                           EVAL_DEPTH_MAX);
    }
    const struct node *saved = r->at;
    r->at = n;
    int rc = eval_inner(r, n, out);
    if (!rc)
        r->at = saved;
    r->eval_depth--;
    return rc;
}

// ---- statements ----

static int assign(struct render *r, const struct node *target, struct jv v)
{
    if (target->kind != E_GETATTR)
        return assign_target(r, target, v);
    // `set ns.attr = v`: the one kind of mutation jinja2 allows.
    struct jv *ns = frame_find(r->frame, target->a->str);
    r->at = target;
    if (!ns || ns->kind != JV_DICT || !ns->u.d->ns) {
        jv_release(v);
        return render_fail(r, VLLMC_ERR_TEMPLATE,
                           "cannot assign attribute on non-namespace object");
    }
    struct jv key;
    if (!jv_str_cstr(target->str, &key)) {
        jv_release(v);
        return render_oom(r);
    }
    return jv_dict_set(ns->u.d, key, v) ? 0 : render_oom(r);
}

static int make_macro(struct render *r, const struct node *n, bool caller, struct jv *out)
{
    if (!jv_func_new(caller ? "caller" : n->str, NULL, jv_undef(), out))
        return render_oom(r);
    out->u.fn->body = n;
    out->u.fn->is_caller = caller;
    out->u.fn->closure = r->frame;
    r->frame->h.refs++;
    return 0;
}

static int render_node(struct render *r, const struct node *n)
{
    struct jv v;
    int rc;
    if (++r->steps > r->n_steps_max) {
        r->at = n;
        return render_fail(r, VLLMC_ERR_CAPACITY, "template ran more than %ld steps",
                           r->n_steps_max);
    }
    r->at = n;
    switch (n->kind) {
    case N_TEXT:
        return out_put(r, n->str, n->str_len);
    case N_OUTPUT:
        if (eval_expr(r, n->a, &v))
            return -1;
        r->at = n;
        rc = out_value(r, v);
        jv_release(v);
        return rc;
    case N_IF:
        if (eval_expr(r, n->a, &v))
            return -1;
        rc = jv_truthy(v);
        jv_release(v);
        return rc ? render_body(r, n->kids, n->n_kids) : render_body(r, n->kids2, n->n_kids2);
    case N_FOR:
        if (eval_expr(r, n->b, &v))
            return -1;
        r->at = n;
        rc = render_for_items(r, n, v, 0);
        jv_release(v);
        return rc;
    case N_SET:
        if (eval_expr(r, n->b, &v))
            return -1;
        return assign(r, n->a, v);
    case N_SET_BLOCK:
        if (capture(r, n->kids, n->n_kids, &v))
            return -1;
        if (n->b) {
            struct jv f;
            rc = eval_filter(r, n->b, &v, &f);
            jv_release(v);
            if (rc)
                return -1;
            v = f;
        }
        return assign(r, n->a, v);
    case N_MACRO:
        if (make_macro(r, n, false, &v))
            return -1;
        return frame_set(r, r->frame, n->str, v);
    case N_CALL_BLOCK: {
        struct jv caller, res;
        if (make_macro(r, n, true, &caller))
            return -1;
        rc = eval_call(r, n->a, &caller, &res);
        jv_release(caller);
        if (rc)
            return -1;
        rc = out_value(r, res);
        jv_release(res);
        return rc;
    }
    case N_FILTER_BLOCK: {
        struct jv f;
        if (capture(r, n->kids, n->n_kids, &v))
            return -1;
        rc = eval_filter(r, n->a, &v, &f);
        jv_release(v);
        if (rc)
            return -1;
        // jinja2 writes a filter block's result without str(): joining the
        // output then fails on anything but a string.
        if (f.kind != JV_STR) {
            r->at = n;
            rc = render_fail(r, VLLMC_ERR_TEMPLATE, "expected str instance, %s found",
                             jv_type_name(f));
            jv_release(f);
            return rc;
        }
        rc = out_value(r, f);
        jv_release(f);
        return rc;
    }
    case N_WITH: {
        struct jv *vals = mem_calloc(n->n_kids2 + 1, sizeof *vals);
        if (!vals)
            return render_oom(r);
        rc = 0;
        size_t done = 0;
        for (; done < n->n_kids2 && !rc; done++)
            rc = eval_expr(r, n->kids2[done], &vals[done]);
        if (rc) {
            args_release(vals, done - 1);
            return -1;
        }
        rc = frame_push(r);
        bool pushed = !rc;
        for (size_t i = 0; i < n->n_kids2; i++) {
            if (!rc)
                rc = assign_target(r, n->a->kids[i], vals[i]);
            else
                jv_release(vals[i]);
        }
        mem_free(vals);
        if (!rc)
            rc = render_body(r, n->kids, n->n_kids);
        if (pushed)
            frame_pop(r);
        return rc;
    }
    case N_BREAK:
        r->flow = FLOW_BREAK;
        return 0;
    case N_CONTINUE:
        r->flow = FLOW_CONTINUE;
        return 0;
    case N_GENERATION:
    case N_BODY:
        return render_body(r, n->kids, n->n_kids);
    default:
        return render_fail(r, VLLMC_ERR_TEMPLATE, "expression used as a statement");
    }
}

int render_body(struct render *r, struct node *const *kids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (render_node(r, kids[i]))
            return -1;
        if (r->flow != FLOW_NONE)
            break;
    }
    return 0;
}

// Renders the template with vars (a dict, borrowed) as the global scope.
int eval_render_root(struct render *r, struct jv vars)
{
    struct frame *g = frame_new(NULL);
    if (!g)
        return render_oom(r);
    jv_release(g->vars);
    g->vars = jv_retain(vars);
    r->globals = g;
    r->frame = g;
    int rc = render_body(r, r->t->root->kids, r->t->root->n_kids);
    r->frame = NULL;
    jv_dict_clear(g->vars.u.d);
    frame_release(g);
    r->globals = NULL;
    // Namespaces may reference each other in cycles: empty them all first.
    if (r->namespaces.kind == JV_LIST) {
        for (size_t i = 0; i < r->namespaces.u.l->n; i++)
            jv_dict_clear(r->namespaces.u.l->items[i].u.d);
        jv_release(r->namespaces);
        r->namespaces = jv_undef();
    }
    return rc;
}
