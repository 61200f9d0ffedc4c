// Python json.dumps for template values, as the `tojson` filter transformers
// installs calls it: ", " and ": " separators (or "," with an indent),
// ensure_ascii off unless asked, floats written like repr().
#include "template/internal.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"

static void dump_str(struct sbuf *b, const char *p, size_t n, bool ascii)
{
    sbuf_putc(b, '"');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') {
            sbuf_putc(b, '\\');
            sbuf_putc(b, (char)c);
        } else if (c == '\n') {
            sbuf_puts(b, "\\n");
        } else if (c == '\r') {
            sbuf_puts(b, "\\r");
        } else if (c == '\t') {
            sbuf_puts(b, "\\t");
        } else if (c == '\b') {
            sbuf_puts(b, "\\b");
        } else if (c == '\f') {
            sbuf_puts(b, "\\f");
        } else if (c < 0x20 || (ascii && c == 0x7f)) {
            sbuf_printf(b, "\\u%04x", c);
        } else if (c >= 0x80 && ascii) {
            size_t adv;
            int32_t cp = jv_utf8_decode(p + i, n - i, &adv);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                sbuf_printf(b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                sbuf_printf(b, "\\u%04x", (unsigned)cp);
            }
            i += adv;
            continue;
        } else {
            sbuf_putc(b, (char)c);
        }
        i++;
    }
    sbuf_putc(b, '"');
}

static void dump_float(struct sbuf *b, double f)
{
    if (isnan(f))
        sbuf_puts(b, "NaN");
    else if (isinf(f))
        sbuf_puts(b, f < 0 ? "-Infinity" : "Infinity");
    else
        fmt_float(b, f);
}

static void newline(struct sbuf *b, const struct jv_json_opts *o, int level)
{
    sbuf_putc(b, '\n');
    for (int i = 0; i < o->indent * level; i++)
        sbuf_putc(b, ' ');
}

// Writes a dict key as json.dumps does: strings as they are, scalars as text.
static bool dump_key(struct sbuf *b, struct jv k, bool ascii, const char **why)
{
    switch (k.kind) {
    case JV_STR:
        dump_str(b, k.u.s->data, k.u.s->len, ascii);
        return true;
    case JV_INT:
        sbuf_printf(b, "\"%lld\"", (long long)k.u.i);
        return true;
    case JV_FLOAT:
        sbuf_putc(b, '"');
        dump_float(b, k.u.f);
        sbuf_putc(b, '"');
        return true;
    case JV_BOOL:
        sbuf_puts(b, k.u.b ? "\"true\"" : "\"false\"");
        return true;
    case JV_NONE:
        sbuf_puts(b, "\"null\"");
        return true;
    default:
        *why = "keys must be str, int, float, bool or None";
        return false;
    }
}

bool jv_json_dump(struct sbuf *b, struct jv v, const struct jv_json_opts *o, int depth,
                  const char **why)
{
    if (depth > JV_DEPTH_MAX + 8) {
        *why = "Circular reference detected";
        return false;
    }
    const char *item_sep = o->item_sep ? o->item_sep : o->indent >= 0 ? "," : ", ";
    const char *key_sep = o->key_sep ? o->key_sep : ": ";
    switch (v.kind) {
    case JV_NONE:
        sbuf_puts(b, "null");
        return true;
    case JV_BOOL:
        sbuf_puts(b, v.u.b ? "true" : "false");
        return true;
    case JV_INT:
        sbuf_printf(b, "%lld", (long long)v.u.i);
        return true;
    case JV_FLOAT:
        dump_float(b, v.u.f);
        return true;
    case JV_STR:
        dump_str(b, v.u.s->data, v.u.s->len, o->ensure_ascii);
        return true;
    case JV_LIST: {
        const struct jv_list *l = v.u.l;
        if (l->seq != SEQ_LIST) {
            static const char *const msgs[] = {
                [SEQ_GENERATOR] = "Object of type generator is not JSON serializable",
                [SEQ_REVERSED] = "Object of type list_reverseiterator is not JSON serializable",
                [SEQ_ITEMS_VIEW] = "Object of type dict_items is not JSON serializable",
                [SEQ_KEYS_VIEW] = "Object of type dict_keys is not JSON serializable",
                [SEQ_VALUES_VIEW] = "Object of type dict_values is not JSON serializable",
                [SEQ_RANGE] = "Object of type range is not JSON serializable",
            };
            *why = msgs[l->seq];
            return false;
        }
        if (!l->n) {
            sbuf_puts(b, "[]");
            return true;
        }
        sbuf_putc(b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i)
                sbuf_puts(b, item_sep);
            if (o->indent >= 0)
                newline(b, o, depth + 1);
            if (!jv_json_dump(b, l->items[i], o, depth + 1, why))
                return false;
        }
        if (o->indent >= 0)
            newline(b, o, depth);
        sbuf_putc(b, ']');
        return true;
    }
    case JV_DICT: {
        const struct jv_dict *d = v.u.d;
        if (d->ns)
            break;
        if (!d->n) {
            sbuf_puts(b, "{}");
            return true;
        }
        size_t *order = mem_alloc(d->n * sizeof *order);
        if (!order) {
            *why = "out of memory";
            return false;
        }
        for (size_t i = 0; i < d->n; i++)
            order[i] = i;
        if (o->sort_keys) {
            // Insertion sort keeps equal keys stable; dicts here are small.
            for (size_t i = 1; i < d->n; i++) {
                size_t k = order[i], j = i;
                while (j > 0) {
                    int c;
                    if (!jv_compare(d->keys[order[j - 1]], d->keys[k], &c)) {
                        mem_free(order);
                        *why = "'<' not supported between dict keys of different types";
                        return false;
                    }
                    if (c <= 0)
                        break;
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = k;
            }
        }
        sbuf_putc(b, '{');
        bool ok = true;
        for (size_t i = 0; i < d->n && ok; i++) {
            if (i)
                sbuf_puts(b, item_sep);
            if (o->indent >= 0)
                newline(b, o, depth + 1);
            ok = dump_key(b, d->keys[order[i]], o->ensure_ascii, why);
            if (ok) {
                sbuf_puts(b, key_sep);
                ok = jv_json_dump(b, d->vals[order[i]], o, depth + 1, why);
            }
        }
        mem_free(order);
        if (!ok)
            return false;
        if (o->indent >= 0)
            newline(b, o, depth);
        sbuf_putc(b, '}');
        return true;
    }
    default:
        break;
    }
    *why = v.kind == JV_UNDEF  ? "Object of type Undefined is not JSON serializable"
           : v.kind == JV_DICT ? "Object of type Namespace is not JSON serializable"
           : v.kind == JV_LOOP ? "Object of type LoopContext is not JSON serializable"
                               : "Object of type function is not JSON serializable";
    return false;
}
