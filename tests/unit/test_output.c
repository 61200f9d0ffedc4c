// Output text: stop strings across token boundaries (cut, or kept with
// include_stop_str_in_output), hold-back of possible stop-string starts, and
// deltas that never split a UTF-8 character.
#include <stdlib.h>

#include "check.h"
#include "engine/output.h"

struct stream {
    struct output_text o;
    char all[256]; // concatenated deltas
    size_t n_all;
    char last[256]; // the latest delta
};

static void stream_init(struct stream *s, const char *const *stop, int n_stop, bool include)
{
    struct vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.stop = stop;
    sp.n_stop = n_stop;
    sp.include_stop_str_in_output = include;
    memset(s, 0, sizeof *s);
    output_text_init(&s->o, &sp);
}

// Appends text and takes a delta; returns the delta as a string.
static const char *stream_push(struct stream *s, const char *text, bool final)
{
    CHECK_EQ_INT(output_text_append(&s->o, text, strlen(text), true), VLLMC_OK);
    const char *d;
    size_t n;
    CHECK_EQ_INT(output_text_take_delta(&s->o, final, &d, &n), VLLMC_OK);
    memcpy(s->last, d, n);
    s->last[n] = '\0';
    memcpy(s->all + s->n_all, d, n);
    s->n_all += n;
    s->all[s->n_all] = '\0';
    return s->last;
}

static void test_stop_across_tokens(void)
{
    const char *stop[1] = {"END"};
    struct stream s;
    stream_init(&s, stop, 1, false);
    CHECK_EQ_STR(stream_push(&s, "Hello E", false), "Hello ");
    CHECK_EQ_STR(stream_push(&s, "N", false), "");
    CHECK_EQ_STR(stream_push(&s, "D and more", false), "");
    CHECK_EQ_INT(s.o.stop_index, 0);
    CHECK_EQ_STR(stream_push(&s, " ignored", true), "");
    CHECK_EQ_STR(s.all, "Hello ");
    output_text_deinit(&s.o);

    // One character at a time.
    const char *stop2[1] = {"STOP"};
    stream_init(&s, stop2, 1, false);
    const char *pieces[] = {"a", "S", "T", "O", "x", "S", "T", "O", "P", "z"};
    for (int i = 0; i < 10 && s.o.stop_index < 0; i++)
        stream_push(&s, pieces[i], false);
    stream_push(&s, "", true);
    CHECK_EQ_INT(s.o.stop_index, 0);
    CHECK_EQ_STR(s.all, "aSTOx");
    output_text_deinit(&s.o);
}

static void test_include_stop(void)
{
    const char *stop[1] = {"END"};
    struct stream s;
    stream_init(&s, stop, 1, true);
    // Nothing is held back when the stop string stays in the output.
    CHECK_EQ_STR(stream_push(&s, "Hello E", false), "Hello E");
    CHECK_EQ_STR(stream_push(&s, "ND tail", false), "ND");
    CHECK_EQ_INT(s.o.stop_index, 0);
    stream_push(&s, "", true);
    CHECK_EQ_STR(s.all, "Hello END");
    output_text_deinit(&s.o);
}

static void test_holdback_released(void)
{
    const char *stop[2] = {"abc", "zz"};
    struct stream s;
    stream_init(&s, stop, 2, false);
    CHECK_EQ_STR(stream_push(&s, "xa", false), "x");
    CHECK_EQ_STR(stream_push(&s, "b", false), "");
    CHECK_EQ_STR(stream_push(&s, "d", false), "abd");
    CHECK_EQ_STR(stream_push(&s, "z", false), "");
    CHECK_EQ_STR(stream_push(&s, "", true), "z"); // finished by length: all of it
    CHECK_EQ_INT(s.o.stop_index, -1);
    CHECK_EQ_STR(s.all, "xabdz");
    output_text_deinit(&s.o);
}

static void test_stop_order(void)
{
    // As vLLM, the first stop string in the list that matches wins, not the
    // earliest match in the text.
    const char *stop[2] = {"b", "a"};
    struct stream s;
    stream_init(&s, stop, 2, false);
    stream_push(&s, "xab", false);
    CHECK_EQ_INT(s.o.stop_index, 0);
    stream_push(&s, "", true);
    CHECK_EQ_STR(s.all, "xa");
    output_text_deinit(&s.o);
}

static void test_unchecked_during_min_tokens(void)
{
    const char *stop[1] = {"x"};
    struct stream s;
    stream_init(&s, stop, 1, false);
    CHECK_EQ_INT(output_text_append(&s.o, "axb", 3, false), VLLMC_OK);
    CHECK_EQ_INT(s.o.stop_index, -1);
    CHECK_EQ_INT(output_text_append(&s.o, "cxd", 3, true), VLLMC_OK);
    CHECK_EQ_INT(s.o.stop_index, 0);
    CHECK_EQ_STR(s.o.text, "axbc");
    output_text_deinit(&s.o);
}

static void test_utf8_holdback(void)
{
    struct stream s;
    stream_init(&s, NULL, 0, false);
    CHECK_EQ_STR(stream_push(&s, "caf\xc3", false), "caf");
    CHECK_EQ_STR(stream_push(&s, "\xa9!", false), "\xc3\xa9!");
    // U+1F600 in three pieces.
    CHECK_EQ_STR(stream_push(&s, "\xf0\x9f", false), "");
    CHECK_EQ_STR(stream_push(&s, "\x98", false), "");
    CHECK_EQ_STR(stream_push(&s, "\x80", false), "\xf0\x9f\x98\x80");
    // A sequence still open at the end becomes U+FFFD.
    CHECK_EQ_STR(stream_push(&s, "x\xe2\x82", false), "x");
    CHECK_EQ_STR(stream_push(&s, "", true), "\xef\xbf\xbd");
    CHECK_EQ_STR(s.all, "caf\xc3\xa9!\xf0\x9f\x98\x80x\xef\xbf\xbd");
    output_text_deinit(&s.o);

    // A multi-byte stop string: its first byte alone is held back too.
    const char *stop[1] = {"\xc3\xa9t\xc3\xa9"};
    stream_init(&s, stop, 1, false);
    CHECK_EQ_STR(stream_push(&s, "un \xc3\xa9", false), "un ");
    CHECK_EQ_STR(stream_push(&s, "t\xc3", false), "");
    CHECK_EQ_STR(stream_push(&s, "\xa9 fin", false), "");
    CHECK_EQ_INT(s.o.stop_index, 0);
    output_text_deinit(&s.o);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"stop_across_tokens", test_stop_across_tokens},
        {"include_stop", test_include_stop},
        {"holdback_released", test_holdback_released},
        {"stop_order", test_stop_order},
        {"unchecked_during_min_tokens", test_unchecked_during_min_tokens},
        {"utf8_holdback", test_utf8_holdback},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
