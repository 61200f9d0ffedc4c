// Chat-template API: compile (normalise, lex, parse into a pool owned by the
// template) and render (convert the JSON context to values, evaluate).
#include "template/jinja.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "template/internal.h"

struct pool_chunk {
    struct pool_chunk *next;
    size_t cap_bytes, used_bytes;
    _Alignas(16) unsigned char data[];
};

#define POOL_CHUNK_BYTES 65536

void *tpl_alloc(struct jinja_template *t, size_t n_bytes)
{
    n_bytes = (n_bytes + 15) & ~(size_t)15;
    struct pool_chunk *c = t->pool;
    if (!c || c->cap_bytes - c->used_bytes < n_bytes) {
        size_t cap = n_bytes > POOL_CHUNK_BYTES ? n_bytes : POOL_CHUNK_BYTES;
        c = mem_alloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->cap_bytes = cap;
        c->used_bytes = 0;
        c->next = t->pool;
        t->pool = c;
    }
    void *p = c->data + c->used_bytes;
    c->used_bytes += n_bytes;
    memset(p, 0, n_bytes);
    return p;
}

void jinja_free(struct jinja_template *t)
{
    if (!t)
        return;
    struct pool_chunk *c = t->pool;
    while (c) {
        struct pool_chunk *next = c->next;
        mem_free(c);
        c = next;
    }
    mem_free(t->name);
    mem_free(t);
}

// jinja2 reads \r\n and \r as \n and drops one trailing newline
// (keep_trailing_newline is off).
static char *normalize(struct jinja_template *t, const char *src, size_t n, size_t *out_n)
{
    char *d = tpl_alloc(t, n + 1);
    if (!d)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            d[k++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n')
                i++;
        } else {
            d[k++] = src[i];
        }
    }
    if (k && d[k - 1] == '\n')
        k--;
    d[k] = 0;
    *out_n = k;
    return d;
}

enum vllmc_status jinja_compile(const char *src, size_t n, const char *name,
                                struct jinja_template **out, struct err *e)
{
    struct err local;
    if (!e)
        e = &local;
    err_clear(e);
    *out = NULL;
    struct jinja_template *t = mem_calloc(1, sizeof *t);
    if (!t)
        return err_set(e, VLLMC_ERR_NOMEM, "template: out of memory");
    t->name = mem_strdup(name ? name : "<template>");
    if (!t->name) {
        jinja_free(t);
        return err_set(e, VLLMC_ERR_NOMEM, "template: out of memory");
    }
    // Templates are text: reject bytes that are not UTF-8 up front, so every
    // string a render makes is valid UTF-8 too.
    int line = 1, col = 1;
    for (size_t i = 0; i < n;) {
        size_t adv;
        int32_t cp = jv_utf8_decode(src + i, n - i, &adv);
        bool bad = cp == 0xFFFD &&
                   !(adv == 3 && (unsigned char)src[i] == 0xEF &&
                     (unsigned char)src[i + 1] == 0xBF && (unsigned char)src[i + 2] == 0xBD);
        if (bad || cp == 0) {
            enum vllmc_status rc =
                err_set(e, VLLMC_ERR_TEMPLATE, "%s:%d:%d: %s", t->name, line, col,
                        cp == 0 ? "NUL byte in template" : "template is not valid UTF-8");
            jinja_free(t);
            return rc;
        }
        if (src[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
        i += adv;
    }
    size_t norm_n;
    char *norm = normalize(t, src, n, &norm_n);
    if (!norm) {
        jinja_free(t);
        return err_set(e, VLLMC_ERR_NOMEM, "template: out of memory");
    }
    struct token_list toks = {0};
    enum vllmc_status rc = lexer_run(t, norm, norm_n, &toks, e);
    if (!rc)
        rc = parser_run(t, &toks, e);
    mem_free(toks.v);
    if (rc) {
        jinja_free(t);
        return rc;
    }
    *out = t;
    return VLLMC_OK;
}

// ---- context conversion ----

static bool from_json(const json_t *j, struct jv *out, int depth)
{
    if (depth > JV_DEPTH_MAX)
        return false;
    switch (json_typeof(j)) {
    case JSON_NULL:
        *out = jv_none();
        return true;
    case JSON_TRUE:
        *out = jv_bool(true);
        return true;
    case JSON_FALSE:
        *out = jv_bool(false);
        return true;
    case JSON_INTEGER:
        *out = jv_int((int64_t)json_integer_value(j));
        return true;
    case JSON_REAL:
        *out = jv_float(json_real_value(j));
        return true;
    case JSON_STRING:
        return jv_str_new(json_string_value(j), json_string_length(j), out);
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        if (!jv_list_new(n, false, out))
            return false;
        for (size_t i = 0; i < n; i++) {
            struct jv v;
            if (!from_json(json_array_get(j, i), &v, depth + 1) || !jv_list_push(out->u.l, v)) {
                jv_release(*out);
                return false;
            }
        }
        return true;
    }
    case JSON_OBJECT: {
        if (!jv_dict_new(false, out))
            return false;
        const char *key;
        size_t key_len;
        json_t *val;
        void *tmp;
        json_object_keylen_foreach_safe((json_t *)j, tmp, key, key_len, val)
        {
            struct jv k, v;
            if (!jv_str_new(key, key_len, &k))
                goto fail;
            if (!from_json(val, &v, depth + 1)) {
                jv_release(k);
                goto fail;
            }
            if (!jv_dict_set(out->u.d, k, v))
                goto fail;
        }
        return true;
    fail:
        jv_release(*out);
        return false;
    }
    }
    return false;
}

static int64_t render_now(void)
{
    const char *s = getenv("SOURCE_DATE_EPOCH");
    if (s && *s) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (*end == 0)
            return v;
    }
    return (int64_t)time(NULL);
}

void jinja_limits_default(struct jinja_limits *l)
{
    l->output_bytes_max = RENDER_OUTPUT_MAX;
    l->n_steps_max = RENDER_STEPS_MAX;
}

enum vllmc_status jinja_render(const struct jinja_template *t, const struct json_t *ctx, char **out,
                               size_t *out_len, struct err *e)
{
    return jinja_render_limited(t, ctx, NULL, out, out_len, e);
}

enum vllmc_status jinja_render_limited(const struct jinja_template *t, const struct json_t *ctx,
                                       const struct jinja_limits *limits, char **out,
                                       size_t *out_len, struct err *e)
{
    struct jinja_limits lim;
    if (limits)
        lim = *limits;
    else
        jinja_limits_default(&lim);
    struct err local;
    if (!e)
        e = &local;
    err_clear(e);
    *out = NULL;
    if (out_len)
        *out_len = 0;
    struct jv vars;
    if (ctx && !json_is_object(ctx))
        return err_set(e, VLLMC_ERR_INVALID_ARG, "%s: render context must be a JSON object",
                       t->name);
    if (ctx ? !from_json(ctx, &vars, 0) : !jv_dict_new(false, &vars))
        return err_set(e, VLLMC_ERR_NOMEM,
                       "%s: out of memory converting the context (or it "
                       "nests more than %d deep)",
                       t->name, JV_DEPTH_MAX);
    struct sbuf buf;
    sbuf_init(&buf);
    struct render r = {.t = t,
                       .e = e,
                       .out = &buf,
                       .now_s = render_now(),
                       .namespaces = jv_undef(),
                       .output_bytes_max = lim.output_bytes_max,
                       .n_steps_max = lim.n_steps_max};
    int rc = eval_render_root(&r, vars);
    jv_release(vars);
    if (rc || buf.oom) {
        sbuf_free(&buf);
        if (!e->code)
            err_set(e, VLLMC_ERR_NOMEM, "%s: out of memory", t->name);
        return e->code;
    }
    if (!buf.p) {
        buf.p = mem_alloc(1);
        if (!buf.p)
            return err_set(e, VLLMC_ERR_NOMEM, "%s: out of memory", t->name);
        buf.p[0] = 0;
    }
    *out = buf.p;
    if (out_len)
        *out_len = buf.len;
    return VLLMC_OK;
}
