// Incremental detokenizer: appends each token's decoded bytes to a pending buffer and hands
// out the longest prefix that ends on a complete character, sanitised exactly as
// tokenizer_decode() sanitises the whole text, so streamed and one-shot output agree byte for
// byte. O(piece length) per token, unlike re-decoding a window of ids.
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer_impl.h"

struct detok {
    const struct tokenizer *tok; // borrowed
    unsigned flags;
    struct tok_bytes pending; // decoded bytes not yet returned (an incomplete character)
    struct tok_bytes out;     // the text returned by the last call
    int strip_left;           // leading spaces still to drop at the start of the stream
    bool started;             // a byte other than a dropped space has been seen
    size_t n_read;
    size_t n_emitted;
};

enum vllmc_status detok_create(const struct tokenizer *tok, unsigned flags, struct detok **out)
{
    *out = NULL;
    struct detok *d = mem_calloc(1, sizeof(*d));
    if (!d)
        return VLLMC_ERR_NOMEM;
    d->tok = tok;
    d->flags = flags & TOKENIZER_DECODE_SKIP_SPECIAL;
    d->strip_left = tok->strip_leading;
    if (!tok_bytes_reserve(&d->out, 64) || !tok_bytes_reserve(&d->pending, 64)) {
        detok_free(d);
        return VLLMC_ERR_NOMEM;
    }
    d->out.ptr[0] = '\0';
    *out = d;
    return VLLMC_OK;
}

void detok_free(struct detok *d)
{
    if (!d)
        return;
    mem_free(d->pending.ptr);
    mem_free(d->out.ptr);
    mem_free(d);
}

// Moves the complete prefix of pending (or all of it when final) into out.
static enum vllmc_status detok_emit(struct detok *d, bool final)
{
    size_t n =
        final ? d->pending.len : unicode_utf8_complete_prefix(d->pending.ptr, d->pending.len);
    d->out.len = 0;
    if (!unicode_utf8_append_sanitized(&d->out, d->pending.ptr, n))
        return VLLMC_ERR_NOMEM;
    memmove(d->pending.ptr, d->pending.ptr + n, d->pending.len - n);
    d->pending.len -= n;
    if (!d->pending.len)
        d->n_emitted = d->n_read;
    return VLLMC_OK;
}

enum vllmc_status detok_push(struct detok *d, int32_t id, const char **text, size_t *n_bytes)
{
    *text = "";
    *n_bytes = 0;
    const struct tokenizer *tok = d->tok;
    if (id < 0 || id >= tok->n_vocab)
        return VLLMC_ERR_INVALID_ARG;
    d->n_read++;
    if (!((d->flags & TOKENIZER_DECODE_SKIP_SPECIAL) && tokenizer_is_special(tok, id))) {
        const struct tok_token *t = &tok->tokens[id];
        const char *p = tok->piece_pool + t->piece_off;
        size_t n = t->piece_len;
        // The one-shot decoder strips leading spaces of the whole text; do it as they come.
        while (!d->started && n && d->strip_left > 0 && *p == ' ') {
            p++;
            n--;
            d->strip_left--;
        }
        if (n)
            d->started = true;
        if (!tok_bytes_append(&d->pending, p, n))
            return VLLMC_ERR_NOMEM;
    }
    enum vllmc_status rc = detok_emit(d, false);
    if (rc)
        return rc;
    *text = d->out.ptr ? d->out.ptr : "";
    *n_bytes = d->out.len;
    return VLLMC_OK;
}

enum vllmc_status detok_prime(struct detok *d, const int32_t *ids, size_t n_ids)
{
    for (size_t i = 0; i < n_ids; i++) {
        const char *text;
        size_t n;
        enum vllmc_status rc = detok_push(d, ids[i], &text, &n);
        if (rc)
            return rc;
    }
    // A character cut at the end of the prompt belongs to the prompt.
    d->pending.len = 0;
    d->out.len = 0;
    d->n_emitted = d->n_read;
    return VLLMC_OK;
}

enum vllmc_status detok_flush(struct detok *d, const char **text, size_t *n_bytes)
{
    enum vllmc_status rc = detok_emit(d, true);
    *text = rc ? "" : d->out.ptr;
    *n_bytes = rc ? 0 : d->out.len;
    d->strip_left = d->tok->strip_leading;
    d->started = false;
    d->n_read = d->n_emitted = 0;
    return rc;
}

size_t detok_n_read(const struct detok *d)
{
    return d->n_read;
}

size_t detok_n_emitted(const struct detok *d)
{
    return d->n_emitted;
}
