// Internals shared by the tokenizer's files: the tokenizer struct, its hash maps, the
// normaliser and pre-tokenizer pipelines and the model back ends. Not part of the interface.
#ifndef VLLMC_TOKENIZER_TOKENIZER_IMPL_H
#define VLLMC_TOKENIZER_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

// ---- growable buffers ----

struct tok_bytes {
    char *ptr; // owned
    size_t len, cap;
};

struct tok_ids {
    int32_t *ptr; // owned
    size_t len, cap;
};

bool tok_bytes_reserve(struct tok_bytes *b, size_t cap);
bool tok_bytes_append(struct tok_bytes *b, const void *p, size_t n);
bool tok_ids_push(struct tok_ids *v, int32_t id);

// ---- hash maps ----

// Byte string -> id, open addressing. Keys are borrowed and must outlive the map.
struct strmap_slot {
    const char *key; // borrowed; NULL marks an empty slot
    uint32_t len;
    uint32_t hash;
    int32_t val;
};

struct strmap {
    struct strmap_slot *slots; // owned, [cap]
    size_t cap;                // power of two
    size_t n;
};

uint32_t strmap_hash(const char *p, size_t n);
bool strmap_init(struct strmap *m, size_t n_expected);
void strmap_deinit(struct strmap *m);
// Inserts key -> val unless key is present (the first insertion wins). False on no memory.
bool strmap_put(struct strmap *m, const char *key, size_t len, int32_t val);
int32_t strmap_get(const struct strmap *m, const char *key, size_t len); // -1 when absent

// (left id, right id) -> (merge rank, merged id).
struct pairmap_slot {
    uint64_t key; // (left << 32 | right) + 1; 0 marks an empty slot
    int32_t rank;
    int32_t merged;
};

struct pairmap {
    struct pairmap_slot *slots; // owned, [cap]
    size_t cap;
    size_t n;
};

bool pairmap_init(struct pairmap *m, size_t n_expected);
void pairmap_deinit(struct pairmap *m);
bool pairmap_put(struct pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t merged);
const struct pairmap_slot *pairmap_get(const struct pairmap *m, int32_t left, int32_t right);

// ---- unicode helpers (unicode.c) ----

// Length of the UTF-8 sequence starting at p (1 for an invalid or truncated one).
size_t unicode_utf8_seq_len(const char *p, size_t n);
// Decodes one code point; returns its byte length (1 with *cp = -1 for an invalid byte).
size_t unicode_utf8_decode(const char *p, size_t n, int32_t *cp);
size_t unicode_utf8_encode(int32_t cp, char out[4]);
// Appends text to out, replacing each maximal invalid subpart with U+FFFD.
bool unicode_utf8_append_sanitized(struct tok_bytes *out, const char *p, size_t n);
// Length of the longest prefix of p that ends on a character boundary and does not end in
// an incomplete (but still possibly valid) sequence.
size_t unicode_utf8_complete_prefix(const char *p, size_t n);

// GPT-2 byte <-> unicode map: byte b is spelled by code point byte_level_cp[b].
extern const uint16_t byte_level_cp[256];
// Maps a byte-level token spelling back to raw bytes; false when a character is not in the
// map (the caller then keeps the spelling as it is).
bool byte_level_unmap(const char *text, size_t n, struct tok_bytes *out);
bool byte_level_map(const char *bytes, size_t n, struct tok_bytes *out);

// ---- normaliser (normalize.c) ----

enum norm_kind {
    NORM_NFC,
    NORM_NFKC,
    NORM_NFD,
    NORM_NFKD,
    NORM_LOWERCASE,
    NORM_STRIP_ACCENTS, // remove combining marks (Mn); used after NFD
    NORM_BERT_CLEAN,    // drop controls, whitespace -> ' ' (BertNormalizer clean_text)
    NORM_BERT_CHINESE,  // pad CJK ideographs with spaces (handle_chinese_chars)
    NORM_PREPEND,       // prepend str when the text is not empty
    NORM_REPLACE,       // replace every occurrence of pattern (literal) by str
    NORM_STRIP,         // strip whitespace: a = left, b = right
};

struct norm_step {
    enum norm_kind kind;
    char *str;     // owned: prepend text / replacement
    char *pattern; // owned: literal to replace
    int a, b;
};

struct normalizer {
    struct norm_step *steps; // owned, [n_steps]
    size_t n_steps;
};

void normalizer_deinit(struct normalizer *n);
bool normalizer_add(struct normalizer *n, enum norm_kind kind, const char *str, const char *pattern,
                    int a, int b);
// Runs every step over in; the result goes to *out (reset first). False on no memory.
bool normalizer_run(const struct normalizer *n, const char *in, size_t len, struct tok_bytes *out);

// ---- pre-tokenizer (pretokenize.c) ----

enum split_behavior {
    SPLIT_REMOVED,
    SPLIT_ISOLATED,
    SPLIT_MERGED_WITH_PREVIOUS,
    SPLIT_MERGED_WITH_NEXT,
    SPLIT_CONTIGUOUS,
};

enum pretok_kind {
    PRETOK_SPLIT,        // regex split with a behaviour
    PRETOK_PREFIX_SPACE, // ByteLevel add_prefix_space: ' ' before text not starting with one
    PRETOK_METASPACE,    // ' ' -> '▁', optional prefix '▁', split before each '▁'
};

struct pretok_step {
    enum pretok_kind kind;
    void *re; // owned pcre2_code *, PRETOK_SPLIT
    enum split_behavior behavior;
    bool invert;
    int prepend_scheme; // METASPACE: 0 never, 1 first, 2 always
    bool split;         // METASPACE: split on the replacement
};

struct pretokenizer {
    struct pretok_step *steps; // owned, [n_steps]
    size_t n_steps;
};

// A piece is a byte range of the working text.
struct tok_piece {
    uint32_t off, len;
};

struct tok_pieces {
    struct tok_piece *ptr; // owned
    size_t len, cap;
};

void pretokenizer_deinit(struct pretokenizer *p);
// Adds a regex split step (pattern in PCRE2 syntax; literal when is_literal).
enum vllmc_status pretokenizer_add_split(struct pretokenizer *p, const char *pattern, size_t len,
                                         bool is_literal, enum split_behavior behavior, bool invert,
                                         struct err *err);
bool pretokenizer_add(struct pretokenizer *p, enum pretok_kind kind, int prepend_scheme,
                      bool split);
// Installs the regex set llama.cpp uses for tokenizer.ggml.pre = name. False when unknown.
enum vllmc_status pretokenizer_add_named(struct pretokenizer *p, const char *name, size_t len,
                                         struct err *err);
// The GPT-2 ByteLevel regex split.
enum vllmc_status pretokenizer_add_gpt2(struct pretokenizer *p, struct err *err);

struct pretok_scratch; // per-call regex match data

// Splits text (which the steps may rewrite: prefix space, metaspace) into pieces. first says
// whether text starts the input (Metaspace prepend_scheme "first").
enum vllmc_status pretokenizer_run(const struct pretokenizer *p, struct tok_bytes *text, bool first,
                                   struct tok_pieces *pieces);

// ---- the tokenizer ----

enum tok_model {
    TOK_MODEL_BPE,       // merges by rank over initial symbols (bytes or characters)
    TOK_MODEL_SPM,       // SentencePiece BPE by piece score (GGUF "llama")
    TOK_MODEL_WORDPIECE, // greedy longest match (BERT)
};

struct tok_token {
    uint32_t text_off, text_len;   // vocabulary spelling, in text_pool
    uint32_t piece_off, piece_len; // decoded bytes, in piece_pool
    float score;
    uint8_t type; // enum tokenizer_token_type
    bool eog;
};

struct tok_added {
    int32_t id;
    uint32_t off, len; // text in text_pool
    uint8_t first;     // first byte of the text (the sort key)
    bool special;      // matched only with TOKENIZER_ENCODE_PARSE_SPECIAL
    bool lstrip, rstrip, single_word;
};

struct tok_template {
    char *name; // owned; "default" for the unnamed one
    char *text; // owned
};

struct tokenizer {
    enum tok_model model;
    bool byte_level;       // GPT-2 byte <-> unicode mapping of the vocabulary
    bool byte_fallback;    // unknown characters become <0xNN> tokens
    bool ignore_merges;    // a piece that is a whole token is taken as is (Llama 3)
    bool fuse_unk;         // consecutive unknowns become one
    bool spm_escape;       // SPM: ' ' -> '▁' and a leading '▁' (add_space_prefix)
    bool spm_prefix;       // SPM: prefix each text segment with ' '
    bool decode_metaspace; // decoding turns '▁' into ' ' and <0xNN> into its byte
    int strip_leading;     // decoding drops this many leading spaces
    bool wordpiece_gguf;   // WordPiece vocabulary in GGUF phantom-space form
    uint32_t wp_max_chars; // WordPiece max_input_chars_per_word

    int32_t n_vocab;
    struct tok_token *tokens; // owned, [n_vocab]
    char *text_pool;          // owned: every token's spelling, NUL-terminated
    char *piece_pool;         // owned: every token's decoded bytes

    struct strmap lookup;  // encode-side spelling -> id (raw bytes when byte_level)
    struct strmap by_text; // vocabulary spelling -> id
    struct pairmap merges; // BPE merges
    int32_t byte_ids[256]; // id of each raw byte (byte-level char or <0xNN>), -1 if none
    size_t max_token_len;  // longest lookup key, bytes

    struct tok_added *added; // owned, [n_added], sorted by first byte then length descending
    size_t n_added;
    uint32_t added_start[257]; // added[added_start[b] .. added_start[b+1]) start with byte b

    struct normalizer norm;
    struct pretokenizer pre;

    int32_t bos_id, eos_id, unk_id, pad_id, sep_id;
    bool add_bos, add_eos; // what TOKENIZER_ENCODE_ADD_SPECIAL adds (WordPiece: CLS ... SEP)
    bool cleanup_spaces;   // clean_up_tokenization_spaces from the configuration

    struct tok_template *templates; // owned, [n_templates]
    size_t n_templates;
    char *special_text[4]; // owned: bos, eos, pad, unk spellings from the configuration
};

// Helpers for the loaders (tokenizer.c).
struct tokenizer *tokenizer_alloc(void);
// Copies n token spellings into the pool and builds by_text. Pieces and lookup are built by
// tokenizer_finish().
enum vllmc_status tokenizer_set_tokens(struct tokenizer *tok, const struct tokenizer_str *texts,
                                       size_t n, struct err *err);
enum vllmc_status tokenizer_add_merge(struct tokenizer *tok, const char *left, size_t n_left,
                                      const char *right, size_t n_right, int32_t rank);
bool tokenizer_add_added(struct tokenizer *tok, int32_t id, bool special, bool lstrip, bool rstrip,
                         bool single_word);
bool tokenizer_add_template(struct tokenizer *tok, const char *name, const char *text, size_t len);
// Computes pieces, the lookup map, byte ids, added-token index, EOG flags.
enum vllmc_status tokenizer_finish(struct tokenizer *tok, struct err *err);

// ---- model back ends (bpe.c, wordpiece.c) ----

struct bpe_scratch;
struct bpe_scratch *bpe_scratch_create(void);
void bpe_scratch_free(struct bpe_scratch *s);
// Encodes one pre-tokenized piece with the tokenizer's BPE or SPM model.
bool bpe_encode_piece(const struct tokenizer *tok, struct bpe_scratch *s, const char *text,
                      size_t len, struct tok_ids *out);
bool wordpiece_encode_piece(const struct tokenizer *tok, const char *text, size_t len,
                            struct tok_ids *out);

#endif
