// Fuzz target for encoding arbitrary bytes (invalid UTF-8 included): the input is the text,
// encoded by three small built-in tokenizers (byte-level BPE with a Split regex and added
// tokens, SentencePiece-style BPE with byte fallback, WordPiece), then decoded one-shot and
// streamed; the two decodings must agree.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char byte_level_json[] =
    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"\xc4\xa0\":3,"
    "\"\xc4\xa0"
    "ab\":4,\"c\":5},\"merges\":[\"a b\",\"\xc4\xa0 ab\"]},"
    "\"added_tokens\":[{\"id\":6,\"content\":\"<|x|>\",\"special\":true},"
    "{\"id\":7,\"content\":\"yo\",\"special\":false,\"lstrip\":true,\"rstrip\":true}],"
    "\"normalizer\":{\"type\":\"NFC\"},"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
    "\"pattern\":{\"Regex\":\"(?i:'s|'t)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
    "\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
    "\"use_regex\":false}]},\"decoder\":{\"type\":\"ByteLevel\"}}";

static const char spm_json[] =
    "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"unk_token\":\"<unk>\","
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"<0x41>\":2,\"<0xE4>\":3,\"<0xBD>\":4,\"<0xA0>\":5,"
    "\"\xe2\x96\x81\":6,\"h\":7,\"i\":8,\"hi\":9,\"\xe2\x96\x81hi\":10},"
    "\"merges\":[\"h i\",\"\xe2\x96\x81 hi\"]},"
    "\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"special\":true}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\","
    "\"prepend\":\"\xe2\x96\x81\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},"
    "\"content\":\"\xe2\x96\x81\"}]},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":"
    "{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},"
    "{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}}";

static const char wordpiece_json[] =
    "{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":"
    "\"##\",\"max_input_chars_per_word\":100,\"vocab\":{\"[UNK]\":0,\"[CLS]\":1,\"[SEP]\":2,"
    "\"hello\":3,\"##lo\":4,\"hel\":5,\"!\":6}},"
    "\"normalizer\":{\"type\":\"BertNormalizer\",\"lowercase\":true},"
    "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},\"decoder\":{\"type\":\"WordPiece\"},"
    "\"post_processor\":{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",2],\"cls\":[\"[CLS]\",1]}}";

static struct tokenizer *toks[3];

static void setup(void)
{
    const char *src[3] = {byte_level_json, spm_json, wordpiece_json};
    for (int i = 0; i < 3; i++)
        if (!toks[i] && tokenizer_create_from_json(src[i], strlen(src[i]), NULL, 0, &toks[i], NULL))
            abort(); // the built-in files are part of the test
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    for (int t = 0; t < 3; t++) {
        int32_t *ids;
        size_t n;
        unsigned flags = size ? data[0] & 3 : 0;
        if (tokenizer_encode(toks[t], (const char *)data, size, flags, &ids, &n))
            continue;
        char *one;
        size_t n_one;
        if (!tokenizer_decode(toks[t], ids, n, 0, &one, &n_one)) {
            struct detok *d;
            if (!detok_create(toks[t], 0, &d)) {
                char *acc = mem_alloc(n_one + 1);
                size_t n_acc = 0;
                const char *piece;
                size_t n_piece;
                for (size_t i = 0; i <= n; i++) {
                    if (i < n)
                        detok_push(d, ids[i], &piece, &n_piece);
                    else
                        detok_flush(d, &piece, &n_piece);
                    if (acc && n_acc + n_piece <= n_one)
                        memcpy(acc + n_acc, piece, n_piece);
                    n_acc += n_piece;
                }
                if (acc && (n_acc != n_one || memcmp(acc, one, n_one)))
                    abort(); // streamed text must equal the one-shot decode
                mem_free(acc);
                detok_free(d);
            }
            mem_free(one);
        }
        mem_free(ids);
    }
    return 0;
}
