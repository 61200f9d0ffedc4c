// WordPiece (BERT): each word is cut greedily into the longest vocabulary pieces from the
// left; a word with no such cut, or longer than max_input_chars_per_word, is one [UNK].
// Hugging Face spells continuations "##x"; llama.cpp's GGUF conversion spells word starts
// "▁x" and continuations "x" (phantom space), and both forms are handled.
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/tokenizer_impl.h"

bool wordpiece_encode_piece(const struct tokenizer *tok, const char *text, size_t len,
                            struct tok_ids *out)
{
    if (!len)
        return true;
    size_t n_chars = 0;
    for (size_t i = 0; i < len; i += unicode_utf8_seq_len(text + i, len - i))
        n_chars++;
    size_t mark = out->len;
    bool bad = n_chars > tok->wp_max_chars;
    const char *prefix = tok->wordpiece_gguf ? "\xe2\x96\x81" : "";
    const char *cont = tok->wordpiece_gguf ? "" : "##";
    struct tok_bytes key = {0};
    for (size_t start = 0; start < len && !bad;) {
        // Longest match first; never longer than the longest token.
        const char *pre = start == 0 ? prefix : cont;
        size_t n_pre = strlen(pre);
        size_t end = len;
        if (end - start + n_pre > tok->max_token_len)
            end = start + (tok->max_token_len > n_pre ? tok->max_token_len - n_pre : 0);
        // Back off to a character boundary.
        while (end > start && end < len && ((uint8_t)text[end] & 0xc0) == 0x80)
            end--;
        int32_t id = -1;
        while (end > start) {
            key.len = 0;
            if (!tok_bytes_append(&key, pre, n_pre) ||
                !tok_bytes_append(&key, text + start, end - start)) {
                mem_free(key.ptr);
                return false;
            }
            id = strmap_get(&tok->lookup, key.ptr, key.len);
            if (id >= 0)
                break;
            do
                end--;
            while (end > start && ((uint8_t)text[end] & 0xc0) == 0x80);
        }
        if (id < 0) {
            bad = true;
            break;
        }
        if (!tok_ids_push(out, id)) {
            mem_free(key.ptr);
            return false;
        }
        start = end;
    }
    mem_free(key.ptr);
    if (bad) {
        out->len = mark;
        if (tok->unk_id >= 0)
            return tok_ids_push(out, tok->unk_id);
    }
    return true;
}
