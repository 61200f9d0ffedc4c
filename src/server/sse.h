// Server-Sent Events framing: "data: <json>\n\n" chunks and the final
// "data: [DONE]\n\n", buffered between the engine's outputs and the socket.
#ifndef VLLMC_SERVER_SSE_H
#define VLLMC_SERVER_SSE_H

#include <stdbool.h>
#include <stddef.h>

// A byte queue: appended by the producer, drained into socket writes.
struct sse_buffer {
    char *data;    // owned
    size_t len;
    size_t cap;
    size_t read_pos;
};

bool sse_append(struct sse_buffer *b, const char *bytes, size_t n);
// Appends "data: " + json + "\n\n".
bool sse_append_event(struct sse_buffer *b, const char *json);
bool sse_append_done(struct sse_buffer *b);
// Moves up to max pending bytes into out; returns the count.
size_t sse_drain(struct sse_buffer *b, char *out, size_t max);
size_t sse_pending(const struct sse_buffer *b);
void sse_buffer_deinit(struct sse_buffer *b);

#endif
