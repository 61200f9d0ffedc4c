// Fuzz target for the tokenizer.json loader: load the input as tokenizer.json; when it loads,
// encode a fixed text (special tokens, CJK, emoji and invalid UTF-8 included) with every flag
// combination, decode one-shot and streamed, and free. Never crashes, never leaks.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char text[] =
    "Hello <s> world!\n\t  I'm 12345 <|im_start|>y'all\xe4\xbd\xa0\xe5\xa5\xbd"
    " \xf0\x9f\x98\x80 \xff\xfe\xc3 \xe2\x82 caf\xc3\xa9 \xe2\x96\x81x";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tokenizer *tok;
    if (tokenizer_create_from_json(data, size, NULL, 0, &tok, NULL))
        return 0;
    for (unsigned flags = 0; flags < 4; flags++) {
        int32_t *ids;
        size_t n;
        if (tokenizer_encode(tok, text, sizeof(text) - 1, flags, &ids, &n))
            continue;
        char *out;
        size_t n_out;
        if (!tokenizer_decode(tok, ids, n, flags & 1, &out, &n_out))
            mem_free(out);
        struct detok *d;
        if (!detok_create(tok, flags & 1, &d)) {
            const char *piece;
            size_t n_piece;
            for (size_t i = 0; i < n; i++)
                detok_push(d, ids[i], &piece, &n_piece);
            detok_flush(d, &piece, &n_piece);
            detok_free(d);
        }
        mem_free(ids);
    }
    tokenizer_free(tok);
    return 0;
}
