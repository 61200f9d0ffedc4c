// Shared internals of the chat-template interpreter: values, the syntax tree
// and the render state. Values are refcounted; objects owned by a compiled
// template are immortal (refs < 0) so concurrent renders never write to them.
#ifndef VLLMC_TEMPLATE_INTERNAL_H
#define VLLMC_TEMPLATE_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

// ---- values ----

enum jv_kind {
    JV_UNDEF, // jinja2's Undefined; u.s holds the message used when it is misused (may be NULL)
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, // list or tuple (u.l->tuple)
    JV_DICT, // dict or namespace (u.d->ns)
    JV_FUNC, // builtin, bound method, macro or caller
    JV_LOOP, // the `loop` variable of a for statement
};

struct jv_obj {
    int32_t refs; // < 0: immortal, owned by a compiled template
};

struct jv_str {
    struct jv_obj h;
    size_t len;  // bytes, excluding the NUL
    bool markup; // markupsafe.Markup (from |safe, |escape): `+` escapes plain strings
    char data[]; // UTF-8, NUL-terminated
};

// What Python object a JV_LIST stands for. Filters such as map and
// selectattr return generators in jinja2: always true, no len(), consumed by
// the first walk, not printable and not JSON; dict views and range objects
// keep a length but are not JSON either. Templates that trip over these fail
// in Jinja2, so they must fail here too instead of rendering something.
enum jv_seq {
    SEQ_LIST,
    SEQ_GENERATOR,
    SEQ_REVERSED, // list_reverseiterator (an iterator, like a generator)
    SEQ_ITEMS_VIEW,
    SEQ_KEYS_VIEW,
    SEQ_VALUES_VIEW,
    SEQ_RANGE,
};

struct jv_list;
struct jv_dict;
struct jv_func;
struct jv_loop;

struct jv {
    enum jv_kind kind;
    union {
        bool b;
        int64_t i;
        double f;
        struct jv_obj *o;
        struct jv_str *s; // JV_STR, and JV_UNDEF's message
        struct jv_list *l;
        struct jv_dict *d;
        struct jv_func *fn;
        struct jv_loop *loop;
    } u;
};

struct jv_list {
    struct jv_obj h;
    size_t n, cap;
    uint32_t depth; // nesting below this list, bounded by JV_DEPTH_MAX
    bool tuple;
    uint8_t seq;            // enum jv_seq
    size_t pos;             // iterators: items before pos were consumed
    int64_t range[3];       // SEQ_RANGE: start, stop, step (for printing)
    struct jv_thunk *thunk; // generators: the filter call still to run (owned), else NULL
    struct jv *items;       // [cap], owned references
};

struct jv_dict {
    struct jv_obj h;
    size_t n, cap;
    uint32_t depth;  // nesting below this dict (namespaces count as leaves)
    bool ns;         // a namespace(): attribute assignment allowed
    struct jv *keys; // [cap], owned; insertion order
    struct jv *vals; // [cap], owned
};

struct render;
struct node;
struct frame;

// Call arguments: positional values, then keyword values with their names.
struct args {
    size_t n_pos;
    struct jv *pos; // [n_pos], borrowed
    size_t n_kw;
    const char *const *kw_names; // [n_kw], borrowed
    struct jv *kw;               // [n_kw], borrowed
};

typedef int (*jv_builtin_fn)(struct render *r, struct jv self, const struct args *a,
                             struct jv *out);

struct jv_func {
    struct jv_obj h;
    const char *name;        // static or owned by the template
    jv_builtin_fn fn;        // NULL for macros and callers
    struct jv self;          // bound object for methods (owned), else undefined
    const struct node *body; // macro or call-block node
    struct frame *closure;   // frame the macro was defined in (owned reference)
    bool is_caller;          // the `caller` of a call block
};

struct jv_loop {
    struct jv_obj h;
    struct jv_list *items; // the iterated sequence (owned)
    size_t index0;
    size_t depth0;
    const struct node *recursive; // the for node when declared recursive
    struct frame *frame;          // frame the loop runs in, for loop(...) (owned)
    struct jv last_changed;       // for loop.changed()
};

// Constructors. Those that allocate return false when out of memory.
static inline struct jv jv_none(void)
{
    struct jv v = {.kind = JV_NONE};
    return v;
}
static inline struct jv jv_undef(void)
{
    struct jv v = {.kind = JV_UNDEF};
    return v;
}
static inline struct jv jv_bool(bool b)
{
    struct jv v = {.kind = JV_BOOL, .u.b = b};
    return v;
}
static inline struct jv jv_int(int64_t i)
{
    struct jv v = {.kind = JV_INT, .u.i = i};
    return v;
}
static inline struct jv jv_float(double f)
{
    struct jv v = {.kind = JV_FLOAT, .u.f = f};
    return v;
}
static inline bool jv_is_obj(struct jv v)
{
    return v.kind >= JV_STR || (v.kind == JV_UNDEF && v.u.s);
}

struct jv jv_retain(struct jv v); // returns v with one more reference
void jv_release(struct jv v);

bool jv_str_new(const char *p, size_t n, struct jv *out);
bool jv_str_cstr(const char *s, struct jv *out);
bool jv_undef_msg(struct jv *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

bool jv_list_new(size_t cap, bool tuple, struct jv *out);
// Containers nest at most this deep, so releasing, comparing and printing
// values never recurse without bound. Namespaces do not count: every
// namespace is held by the render and cleared when it ends.
#define JV_DEPTH_MAX 512
bool jv_list_push(struct jv_list *l, struct jv v); // takes ownership of v (released on failure)
bool jv_nest_ok(struct jv v); // v may go inside a container without passing JV_DEPTH_MAX
bool jv_dict_new(bool ns, struct jv *out);
bool jv_dict_set(struct jv_dict *d, struct jv key, struct jv val); // takes ownership of both
struct jv *jv_dict_get(const struct jv_dict *d, struct jv key);    // borrowed; NULL when absent
struct jv *jv_dict_get_cstr(const struct jv_dict *d, const char *key);
void jv_dict_clear(struct jv_dict *d);
static inline bool jv_is_iterator(struct jv v)
{
    return v.kind == JV_LIST && (v.u.l->seq == SEQ_GENERATOR || v.u.l->seq == SEQ_REVERSED);
}
static inline bool jv_is_plain_list(struct jv v)
{
    return v.kind == JV_LIST && v.u.l->seq == SEQ_LIST;
}
bool jv_func_new(const char *name, jv_builtin_fn fn, struct jv self,
                 struct jv *out); // self retained

const char *jv_type_name(struct jv v); // Python's type name: 'str', 'dict', 'NoneType', …
bool jv_truthy(struct jv v);
bool jv_equal(struct jv a, struct jv b);
// Python ordering: sets *cmp to <0, 0, >0; false when the types are not comparable.
bool jv_compare(struct jv a, struct jv b, int *cmp);

// ---- string building ----

struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
};
void sbuf_init(struct sbuf *b);
void sbuf_free(struct sbuf *b);
void sbuf_put(struct sbuf *b, const char *p, size_t n);
void sbuf_puts(struct sbuf *b, const char *s);
void sbuf_putc(struct sbuf *b, char c);
void sbuf_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool sbuf_to_jv(struct sbuf *b, struct jv *out); // frees b's storage

void fmt_float(struct sbuf *b, double f); // Python repr(float)
// Appends Python str(v) (mode 0) or repr(v) (mode 1). False for values that
// have no faithful text (functions, loops): the caller reports an error.
bool jv_write(struct sbuf *b, struct jv v, int repr);
void str_repr(struct sbuf *b, const char *p, size_t n); // Python repr of a str
// markupsafe.escape: & < > " ' as entities.
void html_escape(struct sbuf *b, const char *p, size_t n);
// Appends v's text to b, escaped unless v is Markup (what Markup + v does).
bool markup_put(struct sbuf *b, struct jv v);
// Sets the Markup flag on *v, a string this caller owns (copies if shared).
bool jv_mark(struct jv *v);

// ---- UTF-8 ----
size_t jv_utf8_count(const char *p, size_t n); // code points
size_t jv_utf8_offset(const char *p, size_t n,
                      size_t i); // byte offset of code point i (n if past end)
int32_t jv_utf8_decode(const char *p, size_t n, size_t *adv); // U+FFFD for invalid bytes
void jv_utf8_put(struct sbuf *b, int32_t cp);
// Appends cp in upper (mode 0), lower (1) or title (2) case, full mappings.
void casing_put(struct sbuf *b, int32_t cp, int mode);

// ---- syntax tree ----

enum node_kind {
    // statements
    N_BODY,       // kids: statements
    N_TEXT,       // str
    N_OUTPUT,     // a
    N_IF,         // a cond, kids then-body, kids2 else-body (elif becomes a nested N_IF)
    N_FOR,        // names targets, a iterable, b filter cond, kids body, kids2 else, flag recursive
    N_SET,        // a target (E_NAME/E_TUPLE/E_GETATTR), b value
    N_SET_BLOCK,  // a target, kids body, kids2 filters (E_FILTER chain with NULL subject)
    N_MACRO,      // str name, names params, kids2 defaults (NULL entries), kids body
    N_CALL_BLOCK, // a call expr, names params, kids2 defaults, kids body
    N_FILTER_BLOCK, // a filter chain (E_FILTER with NULL innermost), kids body
    N_WITH,         // names, kids2 values, kids body
    N_BREAK,
    N_CONTINUE,
    N_GENERATION, // kids body
    // expressions
    E_CONST,   // val
    E_NAME,    // str
    E_LIST,    // kids
    E_TUPLE,   // kids
    E_DICT,    // kids keys, kids2 values
    E_GETATTR, // a obj, str attr
    E_GETITEM, // a obj, b key
    E_SLICE,   // a obj, b start, c stop, d step (each may be NULL)
    E_CALL,    // a callee, kids positional, kids2 keyword values, names keyword names
    E_FILTER,  // str name, a subject (NULL in filter blocks), kids args, kids2 kw, names kw names
    E_TEST,    // str name, a subject, kids args, kids2 kw, names; flag: negated
    E_NEG,
    E_POS,
    E_NOT,
    E_BINOP,   // op, a, b
    E_CONCAT,  // kids
    E_COMPARE, // a first, kids operands, ops[]
    E_AND,
    E_OR,
    E_COND, // a value, b cond, c else (may be NULL)
};

enum binop { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW };
enum cmpop { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN };

struct node {
    enum node_kind kind;
    int line, col;
    int op;          // enum binop for E_BINOP
    bool flag;       // N_FOR: recursive; E_TEST: negated
    const char *str; // names, attribute names, text (owned by the template)
    size_t str_len;
    struct node *a, *b, *c, *d;
    struct node **kids; // [n_kids]
    size_t n_kids;
    struct node **kids2; // [n_kids2]
    size_t n_kids2;
    const char **names; // [n_names]
    size_t n_names;
    uint8_t *ops;  // [n_kids] enum cmpop for E_COMPARE
    struct jv val; // E_CONST: immortal value
};

// ---- compiled template ----

struct jinja_template {
    char *name;
    struct node *root;
    struct pool_chunk *pool; // every node, name and immortal string
};

void *tpl_alloc(struct jinja_template *t, size_t n_bytes); // zeroed, lives with t; NULL on OOM

// ---- lexer ----

enum tok_kind {
    TOK_EOF,
    TOK_DATA,
    TOK_VAR_BEGIN,
    TOK_VAR_END,
    TOK_BLOCK_BEGIN,
    TOK_BLOCK_END,
    TOK_NAME,
    TOK_STRING,
    TOK_INT,
    TOK_FLOAT,
    TOK_OP,
};

struct token {
    enum tok_kind kind;
    int line, col;
    const char *p; // into the normalised source, or the decoded string for TOK_STRING
    size_t n;
    int64_t i; // TOK_INT
    double f;  // TOK_FLOAT
    bool raw;  // TOK_DATA from a raw block
};

struct token_list {
    struct token *v;
    size_t n, cap;
};

// Tokenizes src (already newline-normalised, owned by t). Errors go to e with
// the template name, line and column.
enum vllmc_status lexer_run(struct jinja_template *t, const char *src, size_t n,
                            struct token_list *out, struct err *e);

// ---- parser ----

enum vllmc_status parser_run(struct jinja_template *t, const struct token_list *toks,
                             struct err *e);

// ---- render state ----

struct frame {
    struct jv_obj h;
    struct frame *parent; // owned reference (NULL for the globals frame)
    struct jv vars;       // dict
};

#define RENDER_DEPTH_MAX 200                 // macro calls, captures, loop(...) recursion
#define RENDER_OUTPUT_MAX ((size_t)64 << 20) // any one string, and the default output cap
#define RENDER_STEPS_MAX 20000000L           // default statement + iteration budget
#define RENDER_RANGE_MAX 100000              // range() length, as jinja2's sandbox

struct render {
    const struct jinja_template *t;
    struct err *e;
    struct sbuf *out;    // current output (capture blocks swap it)
    struct frame *frame; // innermost scope
    struct frame *globals;
    size_t output_bytes_max; // cap on the rendered text
    long n_steps_max;        // cap on statements run plus loop iterations
    int depth;               // call/capture nesting
    int eval_depth;          // expression recursion
    long steps;              // statements and loop iterations run
    int64_t now_s;           // seconds since the epoch for strftime_now
    const struct node *at;   // node being evaluated, for error locations
    enum { FLOW_NONE, FLOW_BREAK, FLOW_CONTINUE } flow;
    struct jv namespaces; // list of every namespace made, cleared at the end (cycles)
};

int render_fail(struct render *r, enum vllmc_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int render_oom(struct render *r);
int render_raise(struct render *r, const char *msg, size_t n); // raise_exception

int eval_expr(struct render *r, const struct node *n, struct jv *out);
int eval_call_value(struct render *r, struct jv fn, const struct args *a, struct jv *out);
int eval_getattr(struct render *r, struct jv obj, const char *name, size_t n, struct jv *out);
int eval_getitem(struct render *r, struct jv obj, struct jv key, struct jv *out);
int render_body(struct render *r, struct node *const *kids, size_t n);
// Renders the whole template with vars (a dict, borrowed) as the global scope.
int eval_render_root(struct render *r, struct jv vars);
void frame_release(struct frame *f);
void loop_free(struct jv_loop *l);
// str(v) as a new string value; errors for values with no text form.
int eval_to_str(struct render *r, struct jv v, struct jv *out);
int eval_binop(struct render *r, int op, struct jv a, struct jv b, struct jv *out);
int eval_cmp(struct render *r, int op, struct jv a, struct jv b, bool *res);          // enum cmpop
int eval_slice(struct render *r, struct jv obj, const struct jv *sv, struct jv *out); // sv: [3]
int eval_loop_attr(struct render *r, struct jv loop, const char *name, struct jv *out);
int eval_undef_fail(struct render *r, struct jv v);
// The items a for loop or a filter walks over (list, tuple, dict keys,
// characters, nothing for undefined), as a list reference; iterators are
// consumed.
int eval_iter_items(struct render *r, struct jv v, struct jv *out);

// ---- filters, tests, methods, globals ----

int filter_apply(struct render *r, const char *name, struct jv subject, const struct args *a,
                 struct jv *out);
// jinja2's generator filters (map, select, items, …) run when first walked,
// as Python generators do; these run a pending one and free one.
int gen_force(struct render *r, struct jv_list *l);
void gen_thunk_free(struct jv_thunk *t);
int filter_items(struct render *r, struct jv v, struct jv *out); // the items filter, now
bool filter_exists(const char *name);
int test_apply(struct render *r, const char *name, struct jv subject, const struct args *a,
               bool *out);
bool test_exists(const char *name);
// Python method lookup (str.strip, dict.items, …): a bound method, or undefined.
int method_lookup(struct render *r, struct jv obj, const char *name, struct jv *out);
int global_lookup(struct render *r, const char *name, struct jv *out); // range, namespace, …
int str_percent(struct render *r, struct jv fmt, struct jv args, struct jv *out); // fmt % args

// ---- json ----

struct jv_json_opts {
    int indent; // < 0: none
    bool sort_keys;
    bool ensure_ascii;
    const char *item_sep, *key_sep; // NULL: Python's defaults for the indent
};
// Python json.dumps. Returns false with *why set for values JSON cannot hold.
bool jv_json_dump(struct sbuf *b, struct jv v, const struct jv_json_opts *o, int depth,
                  const char **why);

// Argument helpers for builtins: the i-th positional or the keyword `name`.
const struct jv *args_get(const struct args *a, size_t i, const char *name);
int args_check(struct render *r, const struct args *a, const char *fname, size_t n_max,
               const char *const *names);

#endif
