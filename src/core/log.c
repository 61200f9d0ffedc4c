// Leveled logging: "HH:MM:SS.mmm LEVEL message" lines on stderr.
#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int level_from_env = -1;
static enum log_level current_level = LOG_LEVEL_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void log_init_from_env(void)
{
    if (level_from_env >= 0)
        return;
    level_from_env = 1;
    const char *s = getenv("VLLMC_LOG_LEVEL");
    if (!s)
        return;
    static const char *const names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i]))
            current_level = (enum log_level)i;
}

void log_set_level(enum log_level level)
{
    log_init_from_env();
    current_level = level;
}

enum log_level log_get_level(void)
{
    log_init_from_env();
    return current_level;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level < log_get_level())
        return;
    static const char *const tags[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char line[2048];
    int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %s ", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, tags[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "%s\n", line);
    pthread_mutex_unlock(&log_lock);
}
