// Server-Sent Events byte queue.
#include "server/sse.h"

#include <string.h>

#include "core/alloc.h"

bool sse_append(struct sse_buffer *b, const char *bytes, size_t n)
{
    if (b->read_pos == b->len) {
        b->read_pos = 0;
        b->len = 0;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n)
            cap *= 2;
        char *d = mem_realloc(b->data, cap);
        if (!d)
            return false;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, bytes, n);
    b->len += n;
    return true;
}

bool sse_append_event(struct sse_buffer *b, const char *json)
{
    return sse_append(b, "data: ", 6) && sse_append(b, json, strlen(json)) &&
           sse_append(b, "\n\n", 2);
}

bool sse_append_done(struct sse_buffer *b)
{
    static const char done[] = "data: [DONE]\n\n";
    return sse_append(b, done, sizeof done - 1);
}

size_t sse_drain(struct sse_buffer *b, char *out, size_t max)
{
    size_t n = b->len - b->read_pos;
    if (n > max)
        n = max;
    memcpy(out, b->data + b->read_pos, n);
    b->read_pos += n;
    return n;
}

size_t sse_pending(const struct sse_buffer *b)
{
    return b->len - b->read_pos;
}

void sse_buffer_deinit(struct sse_buffer *b)
{
    mem_free(b->data);
    *b = (struct sse_buffer){0};
}
