// Tokenizer behaviour beyond the vectors: special and added tokens (parse_special,
// lstrip/rstrip, single_word), add_special per configuration, invalid UTF-8, streaming never
// splitting a character, configuration fields, bad files, out of memory, and speed.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "core/alloc.h"
#include "engine/tokenizer_load.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include <utf8proc.h>

#define HF VLLMC_SHARED_DIR "/testdata/hf-tokenizers/"

static struct tokenizer *load(const char *path)
{
    struct tokenizer *tok = NULL;
    struct err err = {0};
    if (tokenizer_load_path(path, &tok, &err))
        fprintf(stderr, "%s: %s\n", path, err.msg);
    CHECK(tok != NULL);
    return tok;
}

static struct tokenizer *from_json(const char *json)
{
    struct tokenizer *tok = NULL;
    struct err err = {0};
    if (tokenizer_create_from_json(json, strlen(json), NULL, 0, &tok, &err))
        fprintf(stderr, "json: %s\n", err.msg);
    CHECK(tok != NULL);
    return tok;
}

// Encodes and compares with want[n_want].
static void check_encode(const struct tokenizer *tok, const char *text, unsigned flags,
                         const int32_t *want, size_t n_want)
{
    int32_t *ids;
    size_t n;
    CHECK_EQ_INT(tokenizer_encode(tok, text, strlen(text), flags, &ids, &n), VLLMC_OK);
    bool same = n == n_want && !memcmp(ids, want, n * sizeof(*ids));
    if (!same) {
        fprintf(stderr, "encode \"%s\" flags %u:\n  want", text, flags);
        for (size_t i = 0; i < n_want; i++)
            fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n  got ");
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    CHECK(same);
    mem_free(ids);
}

static bool contains_id(const struct tokenizer *tok, const char *text, unsigned flags, int32_t id)
{
    int32_t *ids;
    size_t n;
    bool found = false;
    if (tokenizer_encode(tok, text, strlen(text), flags, &ids, &n))
        return false;
    for (size_t i = 0; i < n; i++)
        found = found || ids[i] == id;
    mem_free(ids);
    return found;
}

static void test_special_tokens(void)
{
    struct tokenizer *q = load(HF "qwen3");
    if (!q)
        return;
    // Rendered chat prompts: special tokens are single ids.
    static const int32_t want[] = {151644, 872, 198, 9707, 151645};
    check_encode(q, "<|im_start|>user\nHello<|im_end|>", TOKENIZER_ENCODE_PARSE_SPECIAL, want, 5);
    // Without parse_special the same text is ordinary text.
    CHECK(!contains_id(q, "<|im_start|>user", 0, 151644));
    CHECK(contains_id(q, "<|im_start|>user", TOKENIZER_ENCODE_PARSE_SPECIAL, 151644));
    // Qwen3 adds nothing with add_special (no BOS, no EOS in its configuration).
    static const int32_t hi[] = {13048};
    check_encode(q, "Hi", TOKENIZER_ENCODE_ADD_SPECIAL | TOKENIZER_ENCODE_PARSE_SPECIAL, hi, 1);
    CHECK_EQ_INT(tokenizer_bos_id(q), -1);
    CHECK_EQ_INT(tokenizer_eos_id(q), 151645);
    CHECK_EQ_INT(tokenizer_pad_id(q), 151643);
    CHECK(tokenizer_is_eog(q, 151645));
    CHECK(tokenizer_is_eog(q, 151643));
    CHECK(!tokenizer_is_eog(q, 151644));
    CHECK(tokenizer_is_special(q, 151644));
    CHECK(!tokenizer_is_special(q, 13048));
    CHECK_EQ_STR(tokenizer_special_text(q, "eos"), "<|im_end|>");
    const char *tmpl = tokenizer_chat_template(q, NULL);
    CHECK(tmpl && strstr(tmpl, "<|im_start|>"));
    CHECK(tokenizer_chat_template(q, "tool_use") == NULL);
    tokenizer_free(q);

    // Llama 2: add_special adds <s>, and "<s>" in text is BOS only with parse_special.
    struct tokenizer *l = load(HF "llama2");
    if (!l)
        return;
    static const int32_t bos_hello[] = {1, 15043};
    check_encode(l, "Hello", TOKENIZER_ENCODE_ADD_SPECIAL, bos_hello, 2);
    check_encode(l, "<s>Hello", TOKENIZER_ENCODE_PARSE_SPECIAL, bos_hello, 2);
    CHECK(!contains_id(l, "<s>Hello", 0, 1));
    CHECK(tokenizer_add_bos(l) && !tokenizer_add_eos(l));
    tokenizer_free(l);
}

// Added tokens: lstrip/rstrip eat the whitespace beside them, single_word matches only whole
// words, non-special added tokens match even without parse_special.
static void test_added_token_options(void)
{
    struct tokenizer *tok = from_json(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"\xc4\xa0\":2},\"merges\":[]},"
        "\"added_tokens\":[{\"id\":3,\"content\":\"<mask>\",\"special\":true,\"lstrip\":true,"
        "\"rstrip\":true},{\"id\":4,\"content\":\"ab\",\"special\":false,\"single_word\":true}],"
        "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false},"
        "\"decoder\":{\"type\":\"ByteLevel\"}}");
    if (!tok)
        return;
    static const int32_t strip[] = {0, 3, 1};
    check_encode(tok, "a  <mask>  b", TOKENIZER_ENCODE_PARSE_SPECIAL, strip, 3);
    // "ab" alone is the added token; inside "abab" it is not a whole word.
    static const int32_t word[] = {4, 2, 0, 1, 0, 1};
    check_encode(tok, "ab abab", 0, word, 6);
    tokenizer_free(tok);
}

// Invalid UTF-8 never fails: byte-level BPE keeps the bytes, SentencePiece uses <0xNN>, and
// decoding replaces each invalid subpart with U+FFFD.
static void test_invalid_utf8(void)
{
    static const char bad[] = "a\xff\xfe\xc3(\xe2\x82 \xf0\x9f\x98\x80z\xed\xa0\x80";
    static const char fixed[] = "a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd(\xef\xbf\xbd "
                                "\xf0\x9f\x98\x80z\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd";
    const char *paths[] = {HF "gpt2", HF "llama2", HF "qwen3",
                           VLLMC_SHARED_DIR "/testdata/tokenizer/ggml-vocab-bert-bge.gguf"};
    for (int k = 0; k < 4; k++) {
        struct tokenizer *tok = load(paths[k]);
        if (!tok)
            continue;
        int32_t *ids;
        size_t n;
        CHECK_EQ_INT(
            tokenizer_encode(tok, bad, sizeof(bad) - 1, TOKENIZER_ENCODE_PARSE_SPECIAL, &ids, &n),
            VLLMC_OK);
        CHECK(n > 0);
        char *text;
        size_t n_text;
        CHECK_EQ_INT(tokenizer_decode(tok, ids, n, 0, &text, &n_text), VLLMC_OK);
        if (k < 2) // lossless through bytes
            CHECK_EQ_STR(text, fixed);
        mem_free(text);
        mem_free(ids);
        tokenizer_free(tok);
    }
}

static bool piece_is_whole_utf8(const char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)p[i];
        size_t k = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
        if (!k || i + k > n)
            return false;
        i += k;
    }
    return true;
}

// A character spread over several tokens comes out only when complete.
static void test_stream_holds_partial_characters(void)
{
    struct tokenizer *tok = load(HF "llama2");
    if (!tok)
        return;
    // "😀" has no token in Llama 2: four <0xNN> byte tokens.
    static const char text[] = "x \xf0\x9f\x98\x80!";
    int32_t *ids;
    size_t n;
    CHECK_EQ_INT(tokenizer_encode(tok, text, strlen(text), 0, &ids, &n), VLLMC_OK);
    struct detok *d;
    CHECK_EQ_INT(detok_create(tok, 0, &d), VLLMC_OK);
    char acc[64] = {0};
    size_t n_acc = 0, n_empty = 0;
    for (size_t i = 0; i < n; i++) {
        const char *piece;
        size_t n_piece;
        CHECK_EQ_INT(detok_push(d, ids[i], &piece, &n_piece), VLLMC_OK);
        if (!n_piece)
            n_empty++;
        // Every returned piece is whole UTF-8: it never ends inside a character.
        CHECK(piece_is_whole_utf8(piece, n_piece));
        memcpy(acc + n_acc, piece, n_piece);
        n_acc += n_piece;
        CHECK(detok_n_emitted(d) <= detok_n_read(d));
    }
    CHECK_EQ_INT(n_empty, 3); // the first three bytes of the emoji
    CHECK_EQ_STR(acc, text);
    const char *piece;
    size_t n_piece;
    // An id out of range is refused; a lone continuation byte flushes as U+FFFD.
    CHECK_EQ_INT(detok_push(d, 1 << 30, &piece, &n_piece), VLLMC_ERR_INVALID_ARG);
    int32_t byte_9f = tokenizer_token_id(tok, "<0x9F>", 6),
            byte_f0 = tokenizer_token_id(tok, "<0xF0>", 6);
    CHECK(byte_9f > 0 && byte_f0 > 0);
    CHECK_EQ_INT(detok_push(d, byte_f0, &piece, &n_piece), VLLMC_OK);
    CHECK_EQ_INT(n_piece, 0);
    CHECK_EQ_INT(detok_flush(d, &piece, &n_piece), VLLMC_OK);
    CHECK_EQ_INT(n_piece, 3);
    CHECK(!memcmp(piece, "\xef\xbf\xbd", 3));
    detok_free(d);
    mem_free(ids);
    tokenizer_free(tok);
}

// Broken or unsupported files: a status and a message, never a crash.
static void test_bad_files(void)
{
    static const struct {
        const char *json;
        enum vllmc_status want;
    } cases[] = {
        {"", VLLMC_ERR_FORMAT},
        {"[]", VLLMC_ERR_FORMAT},
        {"{}", VLLMC_ERR_FORMAT},
        {"{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", VLLMC_ERR_UNSUPPORTED},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{}}}", VLLMC_ERR_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-3}}}", VLLMC_ERR_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"ab\"]}}",
         VLLMC_ERR_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":"
         "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}}",
         VLLMC_ERR_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"normalizer\":"
         "{\"type\":\"Precompiled\"}}",
         VLLMC_ERR_UNSUPPORTED},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":"
         "[{\"id\":1e9}]}",
         VLLMC_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tokenizer *tok = (struct tokenizer *)&tok;
        struct err err = {0};
        enum vllmc_status rc =
            tokenizer_create_from_json(cases[i].json, strlen(cases[i].json), NULL, 0, &tok, &err);
        if (rc != cases[i].want)
            fprintf(stderr, "bad file %zu: %d (%s)\n", i, rc, err.msg);
        CHECK_EQ_INT(rc, cases[i].want);
        CHECK(tok == NULL);
        CHECK(err.msg[0] != '\0');
    }
    // A GGUF vocabulary with an unknown model kind.
    struct tokenizer_vocab v;
    tokenizer_vocab_init(&v);
    struct tokenizer_str toks[2] = {{"a", 1}, {"b", 1}};
    v.model = (struct tokenizer_str){"t5", 2};
    v.tokens = toks;
    v.n_tokens = 2;
    struct tokenizer *tok;
    CHECK_EQ_INT(tokenizer_create_from_vocab(&v, &tok, NULL), VLLMC_ERR_UNSUPPORTED);
    v.model = (struct tokenizer_str){"gpt2", 4}; // byte-level BPE needs merges
    CHECK_EQ_INT(tokenizer_create_from_vocab(&v, &tok, NULL), VLLMC_ERR_FORMAT);
}

// Every allocation of creation and encoding can fail: the failure is reported and nothing
// leaks (ASan checks the leaks).
static void test_out_of_memory(void)
{
    static const char json[] =
        "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"<unk>\":0,\"<0x41>\":1,"
        "\"\xe2\x96\x81\":2,\"h\":3,\"i\":4,\"hi\":5},\"merges\":[\"h "
        "i\"],\"unk_token\":\"<unk>\"},"
        "\"added_tokens\":[{\"id\":6,\"content\":\"<s>\",\"special\":true}],"
        "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":"
        "\"Prepend\",\"prepend\":\"\xe2\x96\x81\"}]},\"pre_tokenizer\":{\"type\":\"Split\","
        "\"pattern\":{\"Regex\":\"\\\\p{L}+\"},\"behavior\":\"Isolated\"},"
        "\"decoder\":{\"type\":\"Metaspace\"}}";
    int n_fail = 0;
    struct tokenizer *tok = NULL;
    for (long k = 1; k < 10000; k++) {
        mem_fail_after(k);
        enum vllmc_status rc = tokenizer_create_from_json(json, strlen(json), NULL, 0, &tok, NULL);
        mem_fail_after(0);
        if (!rc)
            break;
        CHECK(tok == NULL);
        // jansson's own allocations are outside the funnel, so its parse always succeeds.
        if (rc != VLLMC_ERR_NOMEM)
            fprintf(stderr, "allocation %ld failed with status %d\n", k, rc);
        CHECK(rc == VLLMC_ERR_NOMEM);
        n_fail++;
    }
    CHECK(tok != NULL);
    CHECK(n_fail > 5);
    for (long k = 1; tok && k < 10000; k++) {
        int32_t *ids;
        size_t n;
        mem_fail_after(k);
        enum vllmc_status rc = tokenizer_encode(tok, "hi <s>hi A\xc3\xa9", 11,
                                                TOKENIZER_ENCODE_PARSE_SPECIAL, &ids, &n);
        mem_fail_after(0);
        if (!rc) {
            // ▁ hi <0x20>? <s> ▁ hi <0x20>? A é?: no <0x20>, <0xC3> or <0xA9> in the vocabulary.
            static const int32_t want[] = {2, 5, 0, 6, 2, 5, 0, 1, 0};
            CHECK_EQ_INT(n, 9);
            CHECK(n == 9 && !memcmp(ids, want, sizeof(want)));
            mem_free(ids);
            break;
        }
        CHECK_EQ_INT(rc, VLLMC_ERR_NOMEM);
        CHECK(ids == NULL);
    }
    tokenizer_free(tok);
}

// The NFC normaliser, which skips text NFC cannot change, agrees with utf8proc's whole-text
// NFC on random mixes of combining marks, Hangul jamo and syllables, CJK, emoji, singletons.
static void test_nfc_matches_utf8proc(void)
{
    static const int32_t alphabet[] = {
        'e',    'A',     ' ',    0x301,  0x327,  0x308,  0x1100, 0x1161, 0x11a8, 0xac00, 0xac01,
        0x4e2d, 0x1f600, 0x2000, 0x212b, 0x3099, 0x304b, 0x0f73, 0x1e0a, 0x0323, 0xe9,   0x2126};
    struct normalizer n = {0};
    CHECK(normalizer_add(&n, NORM_NFC, NULL, NULL, 0, 0));
    uint32_t rng = 12345;
    size_t n_same = 0, n_cases = 2000;
    struct tok_bytes out = {0};
    for (size_t c = 0; c < n_cases; c++) {
        char text[256];
        size_t len = 0;
        size_t n_cp = 1 + c % 24;
        for (size_t i = 0; i < n_cp; i++) {
            rng = rng * 1103515245u + 12345u;
            int32_t cp = alphabet[(rng >> 16) % (sizeof(alphabet) / sizeof(alphabet[0]))];
            len += (size_t)utf8proc_encode_char(cp, (utf8proc_uint8_t *)text + len);
        }
        text[len] = '\0';
        utf8proc_uint8_t *want = utf8proc_NFC((const utf8proc_uint8_t *)text);
        CHECK(normalizer_run(&n, text, len, &out));
        if (want && out.len == strlen((char *)want) && !memcmp(out.ptr, want, out.len))
            n_same++;
        free(want); // utf8proc's allocation
    }
    CHECK_EQ_INT(n_same, n_cases);
    mem_free(out.ptr);
    normalizer_deinit(&n);
}

// Splits text with one pre-tokenizer and compares the pieces with want ("|"-separated).
static void check_pieces(struct pretokenizer *pre, const char *text, bool first, const char *want)
{
    struct tok_bytes buf = {0};
    struct tok_pieces pieces = {0};
    CHECK(tok_bytes_append(&buf, text, strlen(text)));
    CHECK_EQ_INT(pretokenizer_run(pre, &buf, first, &pieces), VLLMC_OK);
    char got[256] = {0};
    size_t n = 0;
    for (size_t i = 0; i < pieces.len && n + pieces.ptr[i].len + 2 < sizeof(got); i++) {
        if (i)
            got[n++] = '|';
        memcpy(got + n, buf.ptr + pieces.ptr[i].off, pieces.ptr[i].len);
        n += pieces.ptr[i].len;
    }
    CHECK_EQ_STR(got, want);
    mem_free(buf.ptr);
    mem_free(pieces.ptr);
}

// The examples of the Hugging Face tokenizers documentation: the five Split behaviours on
// "the-final--countdown", Whitespace, Digits, Punctuation and Metaspace.
static void test_pre_tokenizers_documented(void)
{
    static const struct {
        enum split_behavior b;
        const char *want;
    } split[] = {
        {SPLIT_REMOVED, "the|final|countdown"},
        {SPLIT_ISOLATED, "the|-|final|-|-|countdown"},
        {SPLIT_MERGED_WITH_PREVIOUS, "the-|final-|-|countdown"},
        {SPLIT_MERGED_WITH_NEXT, "the|-final|-|-countdown"},
        {SPLIT_CONTIGUOUS, "the|-|final|--|countdown"},
    };
    for (size_t i = 0; i < sizeof(split) / sizeof(split[0]); i++) {
        struct pretokenizer pre = {0};
        CHECK_EQ_INT(pretokenizer_add_split(&pre, "-", 1, true, split[i].b, false, NULL), VLLMC_OK);
        check_pieces(&pre, "the-final--countdown", true, split[i].want);
        pretokenizer_deinit(&pre);
    }
    struct tokenizer *tok = from_json(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":"
        "{\"type\":\"Whitespace\"}}");
    if (tok) {
        check_pieces(&tok->pre, "Hey friend!     How are you?!?", true,
                     "Hey|friend|!|How|are|you|?!?");
        tokenizer_free(tok);
    }
    tok = from_json("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                    "\"pre_tokenizer\":{\"type\":\"Digits\",\"individual_digits\":true}}");
    if (tok) {
        check_pieces(&tok->pre, "Call 123 please", true, "Call |1|2|3| please");
        tokenizer_free(tok);
    }
    tok = from_json("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                    "\"pre_tokenizer\":{\"type\":\"Punctuation\"}}");
    if (tok) {
        check_pieces(&tok->pre, "Hey friend!", true, "Hey friend|!");
        tokenizer_free(tok);
    }
    tok = from_json("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                    "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\","
                    "\"prepend_scheme\":\"first\",\"split\":true}}");
    if (tok) {
        check_pieces(&tok->pre, "Hey friend!", true,
                     "\xe2\x96\x81Hey|\xe2\x96\x81"
                     "friend!");
        check_pieces(&tok->pre, "Hey friend!", false,
                     "Hey|\xe2\x96\x81"
                     "friend!");
        tokenizer_free(tok);
    }
}

static double cpu_seconds(void)
{
    return (double)clock() / CLOCKS_PER_SEC;
}

// A 150k-token, 151k-merge vocabulary loads in well under a second and a 4 KB prompt encodes
// in well under a millisecond (CPU time, so a busy machine does not fail it; not measured
// under sanitizers).
static void test_speed(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return;
#endif
    double t0 = cpu_seconds();
    struct tokenizer *tok = load(HF "qwen3");
    double t_load = cpu_seconds() - t0;
    if (!tok)
        return;
    char text[4097];
    static const char mix[] = "The quick brown fox jumps over the lazy dog; def f(x): return x**2 "
                              "\xe6\x88\x91\xe4\xbb\xac\xe4\xbb\x8a\xe5\xa4\xa9 12345 "
                              "\xf0\x9f\x98\x80 caf\xc3\xa9\n";
    for (size_t i = 0; i < 4096; i++)
        text[i] = mix[i % (sizeof(mix) - 1)];
    text[4096] = '\0';
    size_t len = strlen(text); // may cut the last character; still fine to encode
    int reps = 50;
    t0 = cpu_seconds();
    for (int r = 0; r < reps; r++) {
        int32_t *ids;
        size_t n;
        CHECK_EQ_INT(tokenizer_encode(tok, text, len, 0, &ids, &n), VLLMC_OK);
        mem_free(ids);
    }
    double t_enc = (cpu_seconds() - t0) / reps;
    printf("qwen3: load %.0f ms, 4 KB prompt %.3f ms\n", t_load * 1e3, t_enc * 1e3);
    CHECK(t_load < 1.0);
    CHECK(t_enc < 1e-3);
    tokenizer_free(tok);
}

static const struct check_case cases[] = {
    {"special_tokens", test_special_tokens},
    {"added_token_options", test_added_token_options},
    {"invalid_utf8", test_invalid_utf8},
    {"stream_holds_partial_characters", test_stream_holds_partial_characters},
    {"bad_files", test_bad_files},
    {"out_of_memory", test_out_of_memory},
    {"nfc_matches_utf8proc", test_nfc_matches_utf8proc},
    {"pre_tokenizers_documented", test_pre_tokenizers_documented},
    {"speed", test_speed},
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    return check_run(cases, argc, argv);
}
