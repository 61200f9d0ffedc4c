// The whole test harness. A test file is a program with a table of named
// cases; CHECK* print both sides and file:line, count failures and go on.
#ifndef VLLMC_TESTS_CHECK_H
#define VLLMC_TESTS_CHECK_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"

static int check_failures;

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x)) {                                                                                \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #x);                  \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
        if (check_a_ != check_b_) {                                                                \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld vs %lld\n", __FILE__, __LINE__, #a, #b,  \
                    check_a_, check_b_);                                                           \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_STR(a, b)                                                                         \
    do {                                                                                           \
        const char *check_a_ = (a), *check_b_ = (b);                                               \
        if (!check_a_ || !check_b_ || strcmp(check_a_, check_b_)) {                                \
            fprintf(stderr, "%s:%d: %s == %s failed:\n  \"%s\"\n  \"%s\"\n", __FILE__, __LINE__,   \
                    #a, #b, check_a_ ? check_a_ : "(null)", check_b_ ? check_b_ : "(null)");       \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

// |a - b| <= atol + rtol * |b|
#define CHECK_NEAR(a, b, atol, rtol)                                                               \
    do {                                                                                           \
        double check_a_ = (double)(a), check_b_ = (double)(b);                                     \
        if (!(fabs(check_a_ - check_b_) <= (atol) + (rtol) * fabs(check_b_))) {                    \
            fprintf(stderr, "%s:%d: %s ~= %s failed: %.9g vs %.9g\n", __FILE__, __LINE__, #a, #b,  \
                    check_a_, check_b_);                                                           \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

// Reads a whole file into an owned buffer (release it with mem_free) with a
// NUL after its *n_out bytes; NULL, and a failed check, when it cannot be read.
static inline void *check_read_file(const char *path, size_t *n_out)
{
    *n_out = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        check_failures++;
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? mem_alloc((size_t)n + 1) : NULL;
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!buf || (long)got != n) {
        fprintf(stderr, "cannot read %s\n", path);
        check_failures++;
        mem_free(buf);
        return NULL;
    }
    buf[got] = 0;
    *n_out = got;
    return buf;
}

struct check_case {
    const char *name;
    void (*fn)(void);
};

// Runs every case (or those whose name contains argv[1]) and returns the exit code.
static inline int check_run(const struct check_case *cases, int argc, char **argv)
{
    int n_run = 0;
    for (const struct check_case *c = cases; c->name; c++) {
        if (argc > 1 && !strstr(c->name, argv[1]))
            continue;
        int before = check_failures;
        c->fn();
        n_run++;
        printf("%s %s\n", check_failures == before ? "ok  " : "FAIL", c->name);
    }
    printf("%d cases, %d failed checks\n", n_run, check_failures);
    return check_failures ? 1 : 0;
}

#endif
