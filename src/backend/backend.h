// A backend owns device memory, a stream of work and a table of op
// providers. `cpu` always exists; `cuda` when built with VLLMC_CUDA and a GPU
// is present. Model code calls backend_run_op() and never a provider directly.
#ifndef VLLMC_BACKEND_BACKEND_H
#define VLLMC_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/op.h"
#include "core/status.h"

struct backend_options {
    int n_threads;           // CPU worker threads; 0 = number of cores
    int device_index;        // GPU ordinal
    bool log_providers;      // log each distinct (op, shape) selection once
    const char *disable;     // comma list of provider names to skip; NULL = read
                             // VLLMC_OP_PROVIDER_DISABLE from the environment
};

void backend_options_default(struct backend_options *o);

// Creates the named backend ("cpu" or "cuda"). *out owns it; free with backend_free().
enum vllmc_status backend_create(const char *name, const struct backend_options *o,
                                 struct backend **out, struct err *err);
void backend_free(struct backend *be); // NULL is a no-op

const char *backend_name(const struct backend *be);
enum tensor_location backend_location(const struct backend *be); // where its buffers live
struct err *backend_err(struct backend *be);  // detail of the last failed call

// Memory on the backend (host memory for cpu). Freed with backend_buffer_free().
enum vllmc_status backend_buffer_alloc(struct backend *be, size_t n_bytes, void **out);
void backend_buffer_free(struct backend *be, void *p);
// The same, reading as zeros. A backend whose fresh memory is already zero
// (cpu: large buffers are mapped from the kernel) writes nothing, so the
// memory is committed only as it is used.
enum vllmc_status backend_buffer_alloc_zeroed(struct backend *be, size_t n_bytes, void **out);
// Makes bytes [offset, offset + n) of buffer buf (as allocated) resident
// without changing them, so that their first use does not stop to fault them
// in. Safe from any thread while others use the buffer. VLLMC_ERR_UNSUPPORTED
// where there is nothing to do (device memory) or no way to do it.
enum vllmc_status backend_buffer_prefault(struct backend *be, void *buf, size_t offset, size_t n);
// A copy of weight w (host memory, as loaded) in a layout of the backend's
// own that its providers read faster, made once at load: *alt owns it
// (mem_free), to be set as w's `alt` for as long as w is used unchanged.
// *alt NULL and VLLMC_OK where the backend keeps no other layout for w.
// The CPU's: the 16-row groups of Q4_K matrices for cpu-q-gemm-avx512
// (src/backend/cpu/quant/qgemm.h), where that provider takes w's matmuls.
enum vllmc_status backend_prepare_weight(struct backend *be, const struct tensor *w, void **alt);
// Rewrites the bf16 matrices w[0..n), in this backend's memory, in place as
// f16 and sets their dtype to DTYPE_F16, all of them or none: none (and
// *n_outside > 0, the count) when some value lies outside f16's range. f16
// holds every bf16 value of magnitude 2^-17 to 65504 exactly, and its three
// more significant bits let the tensor-core GEMMs round f32 activations once
// to 11 bits instead of splitting them into two bf16 terms (--dtype float16).
// VLLMC_ERR_UNSUPPORTED from a backend that keeps bf16 as it is (the CPU's).
enum vllmc_status backend_weights_to_f16(struct backend *be, struct tensor *const *w, int n,
                                         int64_t *n_outside);
enum vllmc_status backend_memset(struct backend *be, void *dst, int value, size_t n_bytes);
// Copies between host and backend memory; ordered on the backend's stream.
enum vllmc_status backend_upload(struct backend *be, void *dst, const void *host_src, size_t n);
enum vllmc_status backend_download(struct backend *be, void *host_dst, const void *src, size_t n);
enum vllmc_status backend_sync(struct backend *be);

// Host memory the backend can copy into without the host waiting (pinned on a
// GPU). Freed with backend_host_free().
enum vllmc_status backend_host_alloc(struct backend *be, size_t n_bytes, void **out);
void backend_host_free(struct backend *be, void *p); // NULL is a no-op
// Queues a copy into host_dst, memory from backend_host_alloc(), and returns
// without waiting: the bytes are there once an event recorded after it has
// completed (backend_event_wait). Host backends copy at once.
enum vllmc_status backend_download_async(struct backend *be, void *host_dst, const void *src,
                                         size_t n);

// Events: points in the backend's stream of work. backend_event_wait()
// returns once the work queued before the record has run; elapsed gives the
// device time between two completed events (the host clock on host backends,
// where work runs when it is queued).
struct backend_event;
enum vllmc_status backend_event_create(struct backend *be, struct backend_event **out);
void backend_event_free(struct backend *be, struct backend_event *ev); // NULL is a no-op
enum vllmc_status backend_event_record(struct backend *be, struct backend_event *ev);
enum vllmc_status backend_event_wait(struct backend *be, struct backend_event *ev);
enum vllmc_status backend_event_elapsed_ms(struct backend *be, const struct backend_event *from,
                                           const struct backend_event *to, double *ms);
// Free and total memory available to the backend, for KV cache sizing.
enum vllmc_status backend_memory_info(struct backend *be, size_t *free_bytes, size_t *total_bytes);

// Graphs: the work queued on the backend between backend_graph_begin() and
// backend_graph_end() is recorded, not run, and backend_graph_launch() replays
// it with the same pointers and shapes (the data behind them may change).
// Backends without graphs say so with backend_has_graphs(); a capture that
// fails (an op that cannot be recorded) returns an error from graph_end and
// leaves the backend usable. keep = false ends a capture and drops it. A
// graph turns stale (backend_graph_valid false) when memory it captured was
// replaced (a grown scratch buffer): free it and capture again.
struct backend_graph;
bool backend_has_graphs(const struct backend *be);
enum vllmc_status backend_graph_begin(struct backend *be);
enum vllmc_status backend_graph_end(struct backend *be, bool keep, struct backend_graph **out);
bool backend_graph_valid(struct backend *be, const struct backend_graph *g);
enum vllmc_status backend_graph_launch(struct backend *be, struct backend_graph *g);
void backend_graph_free(struct backend *be, struct backend_graph *g); // NULL is a no-op

// Dispatches c to the highest-priority enabled provider whose gate accepts it.
// VLLMC_ERR_UNSUPPORTED (with detail in backend_err) when none does.
enum vllmc_status backend_run_op(struct backend *be, struct op_call *c);

// The provider that backend_run_op() would pick, or NULL. For tests and tools.
const struct op_provider *backend_select_provider(struct backend *be, const struct op_call *c);
// All providers of the backend (enabled or not), for op-parity and listings.
const struct op_provider *const *backend_providers(const struct backend *be, size_t *n);

#endif
