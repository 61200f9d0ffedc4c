// What a backend kind implements and shares with the registry: the memory
// vtable, the struct backend every kind embeds, and the helpers its providers
// use. Code outside src/backend/ uses backend.h only.
#ifndef VLLMC_BACKEND_BACKEND_IMPL_H
#define VLLMC_BACKEND_BACKEND_IMPL_H

#include <stdarg.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/threadpool.h"

#define BACKEND_API_VERSION 1

// Memory and stream functions of one backend kind.
struct backend_vtable {
    const char *name;              // "cpu", "cuda"
    int api_version;               // BACKEND_API_VERSION
    enum tensor_location location; // where buffer_alloc's memory lives
    // optional: NULL when impl needs no teardown; backend_free does the rest.
    void (*destroy)(struct backend *be);
    enum vllmc_status (*buffer_alloc)(struct backend *be, size_t n_bytes, void **out);
    void (*buffer_free)(struct backend *be, void *p);
    // optional: NULL means buffer_alloc, then fill with zeros
    enum vllmc_status (*buffer_alloc_zeroed)(struct backend *be, size_t n_bytes, void **out);
    // optional: NULL means memory is resident once allocated. Makes bytes
    // [offset, offset + n) of buffer buf resident without changing them; any
    // thread, while other threads read and write the buffer.
    enum vllmc_status (*buffer_prefault)(struct backend *be, void *buf, size_t offset, size_t n);
    // optional: NULL means no other layout (backend_prepare_weight)
    enum vllmc_status (*prepare_weight)(struct backend *be, const struct tensor *w, void **alt);
    // optional: NULL means bf16 matrices stay bf16 (backend_weights_to_f16)
    enum vllmc_status (*weights_to_f16)(struct backend *be, struct tensor *const *w, int n,
                                        int64_t *n_outside);
    enum vllmc_status (*fill)(struct backend *be, void *dst, int value, size_t n_bytes);
    enum vllmc_status (*upload)(struct backend *be, void *dst, const void *host_src, size_t n);
    enum vllmc_status (*download)(struct backend *be, void *host_dst, const void *src, size_t n);
    enum vllmc_status (*sync)(struct backend *be); // optional: NULL means synchronous
    // optional, all together or none: pinned host memory, downloads that do
    // not wait, and events (NULL: host memory, download, and events that
    // read the host clock when recorded)
    enum vllmc_status (*host_alloc)(struct backend *be, size_t n_bytes, void **out);
    void (*host_free)(struct backend *be, void *p);
    enum vllmc_status (*download_async)(struct backend *be, void *host_dst, const void *src,
                                        size_t n);
    enum vllmc_status (*event_create)(struct backend *be, struct backend_event **out);
    void (*event_free)(struct backend *be, struct backend_event *ev);
    enum vllmc_status (*event_record)(struct backend *be, struct backend_event *ev);
    enum vllmc_status (*event_wait)(struct backend *be, struct backend_event *ev);
    enum vllmc_status (*event_elapsed_ms)(struct backend *be, const struct backend_event *from,
                                          const struct backend_event *to, double *ms);
    // optional: NULL reports the host's physical and available memory
    enum vllmc_status (*memory_info)(struct backend *be, size_t *free_bytes, size_t *total_bytes);
    // optional, all four or none: work graphs (see backend_graph_begin)
    enum vllmc_status (*graph_begin)(struct backend *be);
    enum vllmc_status (*graph_end)(struct backend *be, bool keep, struct backend_graph **out);
    bool (*graph_valid)(struct backend *be, const struct backend_graph *g);
    enum vllmc_status (*graph_launch)(struct backend *be, struct backend_graph *g);
    void (*graph_free)(struct backend *be, struct backend_graph *g);
};

// Distinct (op, shapes, dtypes, provider) selections already logged. Fixed
// size, so logging allocates nothing; when full, later selections go unlogged.
#define BACKEND_LOG_SLOTS 4096

struct backend {
    const struct backend_vtable *vt; // borrowed, static
    void *impl;                      // owned by the kind (vt->destroy)
    struct threadpool *pool;         // owned; host workers for CPU providers, may be NULL
    struct backend_options opts;     // .disable points at disable_list
    struct err err;                  // detail of the last failed call
    char *disable_list;              // owned copy of the disable list, may be NULL
    const struct op_provider *const *providers; // borrowed [n_providers], the kind's table
    size_t n_providers;
    const struct op_provider **order;     // owned [n_providers]: enabled ones, by op, best first
    size_t op_first[OP_KIND_COUNT + 1];   // order[op_first[op] .. op_first[op + 1]) serve op
    uint64_t log_seen[BACKEND_LOG_SLOTS]; // 0 = empty slot
    size_t n_log_seen;
    void *scratch; // owned, see op_scratch()
    size_t scratch_bytes;
    uint64_t n_ops_run; // ops dispatched by backend_run_op: op k runs with n_ops_run == k
};

// Fills the common part of a freshly zeroed backend: options (copied; the
// disable list from o->disable or else VLLMC_OP_PROVIDER_DISABLE) and the
// dispatch order over providers, which stays borrowed (a static table).
enum vllmc_status backend_init(struct backend *be, const struct backend_vtable *vt,
                               const struct backend_options *o,
                               const struct op_provider *const *providers, size_t n_providers,
                               struct err *err);

// Replaces the provider table and rebuilds the dispatch order, applying the
// backend's disable list. The kinds call it once; tests use it to install
// providers of their own.
enum vllmc_status backend_set_providers(struct backend *be,
                                        const struct op_provider *const *providers,
                                        size_t n_providers);

// True when name appears in the comma-separated list (exact, spaces trimmed).
bool backend_name_in_list(const char *list, const char *name);

// Checks the shapes and index dtypes of c against its op's contract in op.h
// (not the value dtypes: those are for gates). VLLMC_ERR_INVALID_ARG with a
// message naming the op when they disagree.
enum vllmc_status op_check(const struct op_call *c, struct err *err);

// Writes "m=1 n=4096 k=4096 wtype=q4_K"-style shape and dtype words for c.
void op_call_describe(const struct op_call *c, char *buf, size_t n);

// For providers: records a failure in c->backend's error slot (when there is
// a backend) and returns code.
enum vllmc_status op_fail(const struct op_call *c, enum vllmc_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Scratch memory for a provider's run on c->backend (a host backend), at
// least n_bytes, 64-byte aligned; valid until the next op_scratch() call on
// that backend. Grows on demand, so steady-state calls do not allocate. NULL
// when out of memory or when c has no backend.
void *op_scratch(const struct op_call *c, size_t n_bytes);

// The host worker pool a provider may use for c; NULL runs inline.
static inline struct threadpool *op_call_pool(const struct op_call *c)
{
    return c->backend ? c->backend->pool : NULL;
}

#endif
