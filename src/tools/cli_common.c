// Option parsing, default model lookup and backend creation for the CLI.
#include "tools/cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/alloc.h"

#define CLI_MODEL_FILE "stories260K.gguf"

bool cli_opt(int argc, char **argv, int *i, const char *name, const char *short_name,
             const char **value)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (!strncmp(a, name, n) && a[n] == '=') {
        *value = a + n + 1;
        return true;
    }
    if (strcmp(a, name) && (!short_name || strcmp(a, short_name)))
        return false;
    if (*i + 1 >= argc) {
        fprintf(stderr, "vllmc: option %s needs a value\n", a);
        *value = NULL;
        return true;
    }
    *value = argv[++*i];
    return true;
}

bool cli_parse_int(const char *opt, const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "vllmc: %s expects an integer in [%ld, %ld], not '%s'\n", opt, min, max, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_dtype(const char *opt, const char *s, bool *weights_f16)
{
    static const char *const names[] = {"auto", "float32", "f32", "float", "bfloat16",
                                        "bf16", "float16", "f16", "half"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i])) {
            *weights_f16 = i >= 6;
            return true;
        }
    fprintf(stderr, "vllmc: %s expects auto, float32, bfloat16 or float16, not '%s'\n", opt, s);
    return false;
}

bool cli_parse_float(const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, "vllmc: %s expects a number, not '%s'\n", opt, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_float_in(const char *opt, const char *s, double lo, double hi, int open, double *out)
{
    double v;
    if (!cli_parse_float(opt, s, &v))
        return false;
    bool below = (open & CLI_OPEN_LO) ? v <= lo : v < lo;
    bool above = (open & CLI_OPEN_HI) || isinf(hi) ? v >= hi : v > hi;
    if (below || above) {
        char hi_s[32];
        snprintf(hi_s, sizeof hi_s, isinf(hi) ? "inf" : "%g", hi);
        fprintf(stderr, "vllmc: %s expects a number in %c%g, %s%c, not '%s'\n", opt,
                (open & CLI_OPEN_LO) ? '(' : '[', lo, hi_s,
                (open & CLI_OPEN_HI) || isinf(hi) ? ')' : ']', s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_ids(const char *s, int32_t **ids, int *n)
{
    int cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    int32_t *out = mem_alloc((size_t)cap * sizeof(*out));
    if (!out)
        return false;
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "vllmc: --prompt-ids expects ids like 1,403,407, not '%s'\n", s);
            mem_free(out);
            return false;
        }
        out[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!k) {
        mem_free(out);
        fprintf(stderr, "vllmc: --prompt-ids is empty\n");
        return false;
    }
    *ids = out;
    *n = k;
    return true;
}

static bool file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

const char *cli_default_model(void)
{
    static char found[PATH_MAX + 64];
#ifdef VLLMC_DEFAULT_MODEL
    if (file_exists(VLLMC_DEFAULT_MODEL))
        return VLLMC_DEFAULT_MODEL;
#endif
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        const char *rel[] = {"models/", "../models/", "../share/vllmc/models/"};
        for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
            snprintf(found, sizeof(found), "%s/%s%s", exe, rel[i], CLI_MODEL_FILE);
            if (file_exists(found))
                return found;
        }
    }
#ifdef VLLMC_DEFAULT_MODEL
    return VLLMC_DEFAULT_MODEL;
#else
    return "models/" CLI_MODEL_FILE;
#endif
}

int cli_backend_create(const char *device, int n_threads, bool log_providers, struct backend **out)
{
    struct backend_options o;
    backend_options_default(&o);
    o.n_threads = n_threads;
    o.log_providers = log_providers;
    struct err err = {0};
    if (backend_create(device, &o, out, &err)) {
        fprintf(stderr, "vllmc: backend %s: %s\n", device, err.msg);
        return 1;
    }
    return 0;
}
