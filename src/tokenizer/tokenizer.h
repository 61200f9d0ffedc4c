// Tokenizer: text <-> token ids for byte-level BPE (GPT-2, Llama 3, Qwen), SentencePiece-style
// BPE with byte fallback (Llama 2, Mistral, Phi-3) and WordPiece (BERT). Built either from a
// plain vocabulary struct (what a GGUF file's tokenizer.ggml.* keys hold; the engine fills it)
// or from Hugging Face tokenizer.json (+ tokenizer_config.json) bytes. Immutable after
// creation: any number of threads may encode and decode with one tokenizer at once.
#ifndef VLLMC_TOKENIZER_TOKENIZER_H
#define VLLMC_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

// A byte string that is not necessarily NUL-terminated (GGUF strings point into the file).
struct tokenizer_str {
    const char *ptr; // borrowed
    size_t len;
};

// Token types, numbered as GGUF's tokenizer.ggml.token_type stores them.
enum tokenizer_token_type {
    TOKENIZER_TOKEN_UNDEFINED = 0,
    TOKENIZER_TOKEN_NORMAL = 1,
    TOKENIZER_TOKEN_UNKNOWN = 2,
    TOKENIZER_TOKEN_CONTROL = 3,      // special: BOS, EOS, <|im_start|>, ...
    TOKENIZER_TOKEN_USER_DEFINED = 4, // added, not special: always matched in text
    TOKENIZER_TOKEN_UNUSED = 5,
    TOKENIZER_TOKEN_BYTE = 6, // <0xNN> byte-fallback piece
};

// The loader input: a vocabulary as GGUF metadata describes it. Every pointer is borrowed for
// the duration of tokenizer_create_from_vocab() only; the tokenizer copies what it keeps.
struct tokenizer_vocab {
    struct tokenizer_str model; // tokenizer.ggml.model: "llama" (SentencePiece), "gpt2"
                                // (byte-level BPE) or "bert" (WordPiece)
    struct tokenizer_str pre;   // tokenizer.ggml.pre ("llama-bpe", "qwen2", ...); empty: default
    size_t n_tokens;
    const struct tokenizer_str *tokens; // [n_tokens]
    const float *scores;                // [n_tokens] or NULL (SentencePiece merge priority)
    const int32_t *token_types;         // [n_tokens] enum tokenizer_token_type, or NULL
    size_t n_merges;
    const struct tokenizer_str *merges; // [n_merges] "left right", highest priority first
    // Special ids; -1 means "not set", and the model's usual default applies.
    int32_t bos_id, eos_id, unk_id, pad_id, sep_id;
    // -1 = not set (model default), 0 = false, 1 = true.
    int add_bos, add_eos, add_space_prefix;
    struct tokenizer_str chat_template; // empty when absent
    struct tokenizer_str name;          // general.name: GGUF files carry no per-token
                                        // lstrip/rstrip, so some are implied by the model
};

// Initialises every field to "absent" (ids -1, flags -1, pointers NULL).
void tokenizer_vocab_init(struct tokenizer_vocab *v);

struct tokenizer;

// Builds a tokenizer from a vocabulary. *out owned; tokenizer_free(). On failure *out is NULL
// and err (may be NULL) says why.
enum vllmc_status tokenizer_create_from_vocab(const struct tokenizer_vocab *v,
                                              struct tokenizer **out, struct err *err);

// Builds a tokenizer from the bytes of a Hugging Face tokenizer.json and, optionally, of its
// tokenizer_config.json (config may be NULL). Both are borrowed for the call only.
enum vllmc_status tokenizer_create_from_json(const void *json, size_t n_json, const void *config,
                                             size_t n_config, struct tokenizer **out,
                                             struct err *err);

void tokenizer_free(struct tokenizer *tok); // NULL is a no-op

enum tokenizer_encode_flags {
    // Add BOS/EOS (or CLS/SEP) as the tokenizer's configuration asks (HF add_special_tokens).
    TOKENIZER_ENCODE_ADD_SPECIAL = 1 << 0,
    // Recognise special-token strings (<|im_start|>, <s>, ...) in the text as their ids.
    // Added tokens that are not special are always recognised, as Hugging Face does.
    TOKENIZER_ENCODE_PARSE_SPECIAL = 1 << 1,
};

// Encodes len bytes of text (any bytes; invalid UTF-8 never fails, it is encoded through byte
// tokens or <unk>). *ids is owned by the caller (mem_free), *n_ids its length. flags: a set of
// enum tokenizer_encode_flags.
enum vllmc_status tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len,
                                   unsigned flags, int32_t **ids, size_t *n_ids);

enum tokenizer_decode_flags {
    TOKENIZER_DECODE_SKIP_SPECIAL = 1 << 0, // drop control/unknown tokens (skip_special_tokens)
    TOKENIZER_DECODE_CLEANUP = 1 << 1,      // HF clean_up_tokenization_spaces (" ." -> ".")
};

// Decodes ids to UTF-8 text. Byte sequences that are not valid UTF-8 become U+FFFD, one per
// maximal invalid subpart (as Python's bytes.decode(errors="replace")). *text owned by the
// caller (mem_free), NUL-terminated, *n_bytes its length. Ids out of range are an error.
enum vllmc_status tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n_ids,
                                   unsigned flags, char **text, size_t *n_bytes);

// The vocabulary string of a token as the tokenizer file spells it ("Ġthe", "▁the", "<0x0A>"),
// or NULL when id is out of range. Borrowed; valid until tokenizer_free().
const char *tokenizer_token_text(const struct tokenizer *tok, int32_t id, size_t *n_bytes);
// The bytes a token contributes to decoded text ("Ġthe" -> " the"); NULL when out of range.
const char *tokenizer_token_piece(const struct tokenizer *tok, int32_t id, size_t *n_bytes);
// The id of a token by its vocabulary string, or -1.
int32_t tokenizer_token_id(const struct tokenizer *tok, const char *text, size_t len);

int32_t tokenizer_n_vocab(const struct tokenizer *tok);
int32_t tokenizer_bos_id(const struct tokenizer *tok); // -1 when the model has none
int32_t tokenizer_eos_id(const struct tokenizer *tok);
int32_t tokenizer_pad_id(const struct tokenizer *tok);
int32_t tokenizer_unk_id(const struct tokenizer *tok);
bool tokenizer_add_bos(const struct tokenizer *tok);
bool tokenizer_add_eos(const struct tokenizer *tok);
// True for control and unknown tokens (what skip_special_tokens drops).
bool tokenizer_is_special(const struct tokenizer *tok, int32_t id);
// True for tokens that end generation: EOS and other end-of-turn specials (<|im_end|>,
// <|eot_id|>, <|end|>, <|endoftext|>, ...).
bool tokenizer_is_eog(const struct tokenizer *tok, int32_t id);

// The chat template named name (NULL: the default one), or NULL when there is none.
// Borrowed; valid until tokenizer_free().
const char *tokenizer_chat_template(const struct tokenizer *tok, const char *name);
// The text of a named special token from the configuration ("bos", "eos", "pad", "unk"), or
// NULL. Borrowed; valid until tokenizer_free().
const char *tokenizer_special_text(const struct tokenizer *tok, const char *which);

#endif
