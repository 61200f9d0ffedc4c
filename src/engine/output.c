// Stop strings and safe text deltas.
#include "engine/output.h"

#include <string.h>

#include "core/alloc.h"

void output_text_init(struct output_text *o, const struct vllmc_sampling_params *sp)
{
    *o = (struct output_text){0};
    o->stop = sp->stop;
    o->n_stop = sp->n_stop;
    o->include_stop = sp->include_stop_str_in_output;
    o->stop_index = -1;
}

void output_text_deinit(struct output_text *o)
{
    mem_free(o->text);
    *o = (struct output_text){0};
}

static enum vllmc_status output_text_reserve(struct output_text *o, size_t extra)
{
    if (o->len + extra + 1 <= o->cap)
        return VLLMC_OK;
    size_t cap = o->cap ? o->cap : 64;
    while (cap < o->len + extra + 1)
        cap *= 2;
    char *t = mem_realloc(o->text, cap);
    if (!t)
        return VLLMC_ERR_NOMEM;
    o->text = t;
    o->cap = cap;
    return VLLMC_OK;
}

// First occurrence of needle in hay[from..len), or -1.
static long find_from(const char *hay, size_t len, size_t from, const char *needle, size_t n)
{
    if (n == 0 || n > len)
        return -1;
    for (size_t i = from; i + n <= len; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, n))
            return (long)i;
    return -1;
}

enum vllmc_status output_text_append(struct output_text *o, const char *s, size_t n,
                                     bool check_stop)
{
    if (o->stop_index >= 0 || n == 0)
        return VLLMC_OK;
    enum vllmc_status rc = output_text_reserve(o, n);
    if (rc)
        return rc;
    memcpy(o->text + o->len, s, n);
    o->len += n;
    o->text[o->len] = '\0';
    if (!check_stop)
        return VLLMC_OK;
    for (int i = 0; i < o->n_stop; i++) {
        size_t sl = strlen(o->stop[i]);
        if (sl == 0)
            continue;
        // Only a match ending in the new bytes is new.
        size_t from = o->len - n + 1 > sl ? o->len - n + 1 - sl : 0;
        long at = find_from(o->text, o->len, from, o->stop[i], sl);
        if (at < 0)
            continue;
        size_t cut = (size_t)at + (o->include_stop ? sl : 0);
        // Text already sent cannot be taken back (a match that began during
        // min_tokens, when stops were not checked).
        if (cut < o->n_sent)
            cut = o->n_sent;
        if (cut < o->len)
            o->len = cut;
        o->text[o->len] = '\0';
        o->stop_index = i;
        break;
    }
    return VLLMC_OK;
}

// Bytes at the end of t[0..len) that begin a UTF-8 character not yet complete.
static size_t utf8_incomplete_tail(const char *t, size_t len)
{
    for (size_t back = 1; back <= 4 && back <= len; back++) {
        unsigned char c = (unsigned char)t[len - back];
        if ((c & 0xc0) == 0x80)
            continue; // continuation byte: keep looking for the lead
        size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

enum vllmc_status output_text_take_delta(struct output_text *o, bool final, const char **delta,
                                         size_t *n)
{
    size_t end = o->len;
    if (!final) {
        if (!o->include_stop && o->stop_index < 0) {
            // Hold back the longest tail that a stop string starts with.
            size_t hold = 0;
            for (int i = 0; i < o->n_stop; i++) {
                size_t sl = strlen(o->stop[i]);
                for (size_t k = sl > 0 ? sl - 1 : 0; k > hold; k--)
                    if (k <= o->len - o->n_sent && !memcmp(o->text + o->len - k, o->stop[i], k)) {
                        hold = k;
                        break;
                    }
            }
            end -= hold;
        }
        end -= utf8_incomplete_tail(o->text, end);
        if (end < o->n_sent)
            end = o->n_sent;
    } else {
        size_t bad = utf8_incomplete_tail(o->text, o->len);
        if (bad) {
            o->len -= bad;
            enum vllmc_status rc = output_text_reserve(o, 3);
            if (rc)
                return rc;
            memcpy(o->text + o->len, "\xef\xbf\xbd", 3);
            o->len += 3;
            o->text[o->len] = '\0';
            end = o->len;
        }
    }
    static const char empty[] = "";
    *delta = o->text ? o->text + o->n_sent : empty;
    *n = end - o->n_sent;
    o->n_sent = end;
    return VLLMC_OK;
}
