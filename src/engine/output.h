// Output text of one sample: stop strings are checked on the detokenized text
// and cut out of it; streamed deltas hold back any tail that could still
// become a stop string and never end inside a UTF-8 character. Engine thread.
#ifndef VLLMC_ENGINE_OUTPUT_H
#define VLLMC_ENGINE_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>

#include "vllmc.h"

struct output_text {
    char *text; // owned, NUL-terminated: the sample's text so far (cut at a stop)
    size_t len;
    size_t cap;
    size_t n_sent;           // bytes already handed out as deltas
    const char *const *stop; // borrowed from the request's sampling params
    int n_stop;
    bool include_stop;
    int stop_index; // index of the stop string that matched, -1 = none
};

void output_text_init(struct output_text *o, const struct vllmc_sampling_params *sp);
void output_text_deinit(struct output_text *o);

// Appends n bytes of newly detokenized text. With check_stop (vLLM checks only
// once more than min_tokens tokens were generated), looks for each stop string,
// in the order given, in the text that could contain a new match, and on a
// match cuts the text at the stop string's start (or after its end with
// include_stop) and sets stop_index. Text after a match is ignored.
enum vllmc_status output_text_append(struct output_text *o, const char *s, size_t n,
                                     bool check_stop);

// The next delta: bytes from n_sent up to what is safe to show. Unless final,
// it holds back the longest tail that is a proper prefix of a stop string and
// an incomplete UTF-8 sequence at the end; with final (the sample finished)
// everything left is returned, an incomplete sequence at the very end turned
// into U+FFFD. *delta (not NUL-terminated) is valid until the next call on o.
enum vllmc_status output_text_take_delta(struct output_text *o, bool final, const char **delta,
                                         size_t *n);

#endif
