// Status codes and error slots. A fallible function returns an enum
// vllmc_status; the detail goes into the owning object's struct err with
// err_set(), in the same statement as the return.
#ifndef VLLMC_CORE_STATUS_H
#define VLLMC_CORE_STATUS_H

#include "vllmc.h"

#define ERR_MSG_BYTES 512

struct err {
    enum vllmc_status code;
    char msg[ERR_MSG_BYTES]; // NUL-terminated; empty when code is VLLMC_OK
};

// Records code and a printf-style message in *e (e may be NULL) and returns code,
// so callers write `return err_set(&x->err, VLLMC_ERR_FORMAT, "...", ...);`.
enum vllmc_status err_set(struct err *e, enum vllmc_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Copies src into dst (both may be the same; NULL src clears dst).
void err_copy(struct err *dst, const struct err *src);

void err_clear(struct err *e);

// Asserts guard bugs, never input: on in release, print file:line and abort.
#define VLLMC_ASSERT(x)                                                                            \
    do {                                                                                           \
        if (!(x))                                                                                  \
            vllmc_assert_fail(#x, __FILE__, __LINE__);                                             \
    } while (0)

_Noreturn void vllmc_assert_fail(const char *expr, const char *file, int line);

#endif
