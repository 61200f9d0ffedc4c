// Shared pieces of the vllmc sub-commands: option parsing, the default
// model and backend creation.
#ifndef VLLMC_TOOLS_CLI_H
#define VLLMC_TOOLS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"

struct backend;
struct model;

// Matches argv[*i] against a long (and optional short) option that takes a
// value, accepting "--name value", "--name=value" and "-s value". On a match
// *value points at the value and *i moves past it; a missing value is a usage
// error reported on stderr (returns true with *value NULL).
bool cli_opt(int argc, char **argv, int *i, const char *name, const char *short_name,
             const char **value);

// Strict number parsing for option values; false (with a message) on junk.
bool cli_parse_int(const char *opt, const char *s, long min, long max, long *out);
bool cli_parse_float(const char *opt, const char *s, double *out);
// --dtype: auto, float32/f32/float, bfloat16/bf16 keep the weights as stored
// (*weights_f16 false); float16/f16/half rewrite bf16 ones as f16 on a GPU
// (engine params dtype "f16", model_load_params.weights_f16). False (with a
// message) on anything else.
bool cli_parse_dtype(const char *opt, const char *s, bool *weights_f16);
// A number within [lo, hi], an end left out where open is CLI_OPEN_LO,
// CLI_OPEN_HI or both; the message names the interval (hi INFINITY: no bound).
enum { CLI_CLOSED = 0, CLI_OPEN_LO = 1, CLI_OPEN_HI = 2 };
bool cli_parse_float_in(const char *opt, const char *s, double lo, double hi, int open,
                        double *out);
// Parses "1,2,3" into a new array (mem_free) of *n ids.
bool cli_parse_ids(const char *s, int32_t **ids, int *n);

// The bundled model: the build's models/ folder, else next to the binary, else
// the installed share directory. Never NULL; the first candidate if none exists.
const char *cli_default_model(void);

// Creates the named backend ("cpu" or "cuda") with n_threads (0 = all cores).
int cli_backend_create(const char *device, int n_threads, bool log_providers, struct backend **out);

#endif
