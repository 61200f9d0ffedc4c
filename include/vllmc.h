// vllm.c public C API: one engine thread owns the model; any thread may add
// requests, read their streamed outputs and abort them.
//
// Ownership, for the whole header: a pointer you pass in is borrowed for the
// duration of the call unless the comment says otherwise; a pointer returned
// to you is owned by the library and valid until the event its comment names.
// Handles are opaque. Params structs are filled by *_params_default() first,
// so fields added later keep old callers working.
#ifndef VLLMC_H
#define VLLMC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Incremented on any incompatible change to a struct layout or signature.
#define VLLMC_ABI_VERSION 1

#if defined(VLLMC_BUILDING)
#define VLLMC_API __attribute__((visibility("default")))
#else
#define VLLMC_API
#endif

// ---- status codes ----

#define VLLMC_STATUS_LIST(X)                                                                       \
    X(OK, "success")                                                                               \
    X(ERR_NOMEM, "out of memory")                                                                  \
    X(ERR_IO, "input/output error")                                                                \
    X(ERR_FORMAT, "malformed model file")                                                          \
    X(ERR_UNSUPPORTED, "not supported")                                                            \
    X(ERR_INVALID_ARG, "invalid argument")                                                         \
    X(ERR_NOT_FOUND, "not found")                                                                  \
    X(ERR_BACKEND, "backend error")                                                                \
    X(ERR_TEMPLATE, "chat template error")                                                         \
    X(ERR_TOKENIZER, "tokenizer error")                                                            \
    X(ERR_CAPACITY, "capacity exceeded")                                                           \
    X(ERR_ABORTED, "aborted")                                                                      \
    X(ERR_CLOSED, "engine is shutting down")

enum vllmc_status {
#define VLLMC_STATUS_ENUM(name, text) VLLMC_##name,
    VLLMC_STATUS_LIST(VLLMC_STATUS_ENUM)
#undef VLLMC_STATUS_ENUM
        VLLMC_STATUS_COUNT
};

// A static English text for a status; never NULL.
VLLMC_API const char *vllmc_status_str(enum vllmc_status status);

// The library version, "MAJOR.MINOR.PATCH". Static.
VLLMC_API const char *vllmc_version(void);

#ifdef __cplusplus
}
#endif
#endif // VLLMC_H
