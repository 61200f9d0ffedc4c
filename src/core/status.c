// Status texts and error slots.
#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_texts[] = {
#define STATUS_TEXT(name, text) text,
    VLLMC_STATUS_LIST(STATUS_TEXT)
#undef STATUS_TEXT
};

VLLMC_API const char *vllmc_status_str(enum vllmc_status status)
{
    if ((unsigned)status >= VLLMC_STATUS_COUNT)
        return "unknown status";
    return status_texts[status];
}

enum vllmc_status err_set(struct err *e, enum vllmc_status code, const char *fmt, ...)
{
    if (!e)
        return code;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return code;
}

void err_copy(struct err *dst, const struct err *src)
{
    if (!dst || dst == src)
        return;
    if (!src) {
        err_clear(dst);
        return;
    }
    *dst = *src;
}

void err_clear(struct err *e)
{
    if (!e)
        return;
    e->code = VLLMC_OK;
    e->msg[0] = '\0';
}

_Noreturn void vllmc_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "vllmc: assertion failed: %s at %s:%d\n", expr, file, line);
    fflush(stderr);
    abort();
}
