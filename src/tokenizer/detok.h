// Incremental detokenizer for streaming: feed generated ids one at a time, get back the text
// that became final. It never emits part of a UTF-8 character: bytes of a character split
// across tokens (byte-fallback <0xNN> pieces, byte-level BPE fragments) are held until the
// character is complete. The concatenation of everything it returns, flush included, equals
// tokenizer_decode() of the same ids with the same flags. One stream per object; not shared
// between threads.
#ifndef VLLMC_TOKENIZER_DETOK_H
#define VLLMC_TOKENIZER_DETOK_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

struct detok;

// flags: TOKENIZER_DECODE_SKIP_SPECIAL (TOKENIZER_DECODE_CLEANUP is not applied when
// streaming). tok is borrowed and must outlive the detokenizer. *out owned; detok_free().
enum vllmc_status detok_create(const struct tokenizer *tok, unsigned flags, struct detok **out);
void detok_free(struct detok *d); // NULL is a no-op

// Adds one id. *text receives the newly final text (possibly empty, never NULL), borrowed and
// valid until the next call on d; *n_bytes its length. An id out of range is
// VLLMC_ERR_INVALID_ARG and changes nothing.
enum vllmc_status detok_push(struct detok *d, int32_t id, const char **text, size_t *n_bytes);

// Feeds the prompt's ids as context without returning their text, so that generated text
// continues it: SentencePiece's leading-space rule applies at the start of the prompt, not
// of the generated text ("Lily and Tom were friends." + "▁They" streams " They").
enum vllmc_status detok_prime(struct detok *d, const int32_t *ids, size_t n_ids);

// Ends the stream: bytes still held (an incomplete character) come out as U+FFFD. The
// detokenizer can then start a new stream.
enum vllmc_status detok_flush(struct detok *d, const char **text, size_t *n_bytes);

// Ids pushed so far (vLLM's read offset), and ids whose bytes are all in returned text
// (its prefix offset): the two differ while a character is incomplete.
size_t detok_n_read(const struct detok *d);
size_t detok_n_emitted(const struct detok *d);

#endif
