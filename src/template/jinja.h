// Chat-template engine: compiles a Jinja2 template once and renders it with a
// JSON context, with the semantics transformers' apply_chat_template gives
// (jinja2 sandbox, trim_blocks and lstrip_blocks on, loopcontrols, tojson,
// raise_exception, strftime_now). Constructs outside the supported subset are
// compile or render errors naming the template, line and column.
#ifndef VLLMC_TEMPLATE_JINJA_H
#define VLLMC_TEMPLATE_JINJA_H

#include <stddef.h>

#include "core/status.h"

struct jinja_template;
struct json_t; // jansson

// Compiles n bytes of template source (UTF-8; need not be NUL-terminated).
// name (borrowed, copied) is used in error messages as "name:line:col: ...".
// On success *out owns the template; release it with jinja_free(). On failure
// *out is NULL, e (may be NULL) says why, and the status is
// VLLMC_ERR_TEMPLATE (syntax), VLLMC_ERR_UNSUPPORTED (valid Jinja2 that this
// engine does not implement) or VLLMC_ERR_NOMEM.
enum vllmc_status jinja_compile(const char *src, size_t n, const char *name,
                                struct jinja_template **out, struct err *e);

void jinja_free(struct jinja_template *t); // NULL is a no-op

// Bounds on one render, so a template that loops forever or explodes stops
// with VLLMC_ERR_CAPACITY. Recursion depth is bounded separately (fixed).
struct jinja_limits {
    size_t output_bytes_max; // rendered text; default 64 MiB
    long n_steps_max;        // statements run plus loop iterations; default 20 million
};

void jinja_limits_default(struct jinja_limits *l);

// Renders t with the variables of ctx (a JSON object, borrowed): messages,
// tools, add_generation_prompt, bos_token, eos_token and any
// chat_template_kwargs the caller merged in. strftime_now() reads the time
// from SOURCE_DATE_EPOCH when set, else the clock (UTC).
// On success *out is an owned NUL-terminated string of *out_len bytes (free
// it with mem_free()). On failure *out is NULL and e holds the message:
// exactly the template's text for raise_exception(), otherwise
// "name:line:col: ..." with VLLMC_ERR_TEMPLATE, VLLMC_ERR_UNSUPPORTED,
// VLLMC_ERR_CAPACITY (output, step or depth limits) or VLLMC_ERR_NOMEM.
// t is only read: any number of threads may render one template at once.
enum vllmc_status jinja_render(const struct jinja_template *t, const struct json_t *ctx, char **out,
                               size_t *out_len, struct err *e);

// jinja_render with explicit limits (NULL: the defaults).
enum vllmc_status jinja_render_limited(const struct jinja_template *t, const struct json_t *ctx,
                                       const struct jinja_limits *limits, char **out,
                                       size_t *out_len, struct err *e);

#endif
