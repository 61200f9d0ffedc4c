// Backend objects: creation by name and the memory functions, which forward to
// the kind's vtable. Op dispatch lives in op_registry.c.
#include "backend/backend.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend_impl.h"
#include "backend/cpu/cpu_backend.h"
#include "core/alloc.h"
#include "core/clock.h"
#ifdef VLLMC_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

void backend_options_default(struct backend_options *o)
{
    *o = (struct backend_options){
        .n_threads = 0,
        .device_index = 0,
        .log_providers = false,
        .disable = NULL,
    };
}

enum vllmc_status backend_create(const char *name, const struct backend_options *o,
                                 struct backend **out, struct err *err)
{
    *out = NULL;
    struct backend_options defaults;
    if (!o) {
        backend_options_default(&defaults);
        o = &defaults;
    }
    if (!name || !strcmp(name, "cpu"))
        return cpu_backend_create(o, out, err);
    if (!strcmp(name, "cuda")) {
#ifdef VLLMC_HAVE_CUDA
        return cuda_backend_create(o, out, err);
#else
        return err_set(err, VLLMC_ERR_UNSUPPORTED, "backend cuda: built without CUDA");
#endif
    }
    return err_set(err, VLLMC_ERR_INVALID_ARG, "unknown backend '%s' (expected cpu or cuda)", name);
}

enum vllmc_status backend_init(struct backend *be, const struct backend_vtable *vt,
                               const struct backend_options *o,
                               const struct op_provider *const *providers, size_t n_providers,
                               struct err *err)
{
    VLLMC_ASSERT(vt->api_version == BACKEND_API_VERSION);
    be->vt = vt;
    be->opts = *o;
    const char *disable = o->disable ? o->disable : getenv("VLLMC_OP_PROVIDER_DISABLE");
    if (disable && *disable) {
        be->disable_list = mem_strdup(disable);
        if (!be->disable_list)
            return err_set(err, VLLMC_ERR_NOMEM, "backend %s: out of memory", vt->name);
    }
    be->opts.disable = be->disable_list;
    enum vllmc_status rc = backend_set_providers(be, providers, n_providers);
    if (rc)
        return err_set(err, rc, "backend %s: out of memory", vt->name);
    return VLLMC_OK;
}

void backend_free(struct backend *be)
{
    if (!be)
        return;
    if (be->vt && be->vt->destroy)
        be->vt->destroy(be);
    threadpool_free(be->pool);
    mem_free(be->scratch);
    mem_free(be->order);
    mem_free(be->disable_list);
    mem_free(be);
}

void *op_scratch(const struct op_call *c, size_t n_bytes)
{
    struct backend *be = c->backend;
    if (!be)
        return NULL;
    if (be->scratch_bytes < n_bytes) {
        // Grow by half again so a slowly rising size does not reallocate each call.
        size_t want = n_bytes + n_bytes / 2;
        void *p = mem_alloc_aligned(64, want);
        if (!p)
            return NULL;
        mem_free(be->scratch);
        be->scratch = p;
        be->scratch_bytes = want;
    }
    return be->scratch;
}

const char *backend_name(const struct backend *be)
{
    return be->vt->name;
}

enum tensor_location backend_location(const struct backend *be)
{
    return be->vt->location;
}

struct err *backend_err(struct backend *be)
{
    return &be->err;
}

enum vllmc_status backend_buffer_alloc(struct backend *be, size_t n_bytes, void **out)
{
    return be->vt->buffer_alloc(be, n_bytes, out);
}

enum vllmc_status backend_buffer_alloc_zeroed(struct backend *be, size_t n_bytes, void **out)
{
    if (be->vt->buffer_alloc_zeroed)
        return be->vt->buffer_alloc_zeroed(be, n_bytes, out);
    enum vllmc_status rc = be->vt->buffer_alloc(be, n_bytes, out);
    if (rc)
        return rc;
    rc = be->vt->fill(be, *out, 0, n_bytes);
    if (rc) {
        be->vt->buffer_free(be, *out);
        *out = NULL;
    }
    return rc;
}

enum vllmc_status backend_buffer_prefault(struct backend *be, void *buf, size_t offset, size_t n)
{
    if (!be->vt->buffer_prefault)
        return VLLMC_ERR_UNSUPPORTED;
    return be->vt->buffer_prefault(be, buf, offset, n);
}

enum vllmc_status backend_prepare_weight(struct backend *be, const struct tensor *w, void **alt)
{
    *alt = NULL;
    return be->vt->prepare_weight ? be->vt->prepare_weight(be, w, alt) : VLLMC_OK;
}

enum vllmc_status backend_weights_to_f16(struct backend *be, struct tensor *const *w, int n,
                                         int64_t *n_outside)
{
    *n_outside = 0;
    if (!be->vt->weights_to_f16)
        return err_set(&be->err, VLLMC_ERR_UNSUPPORTED,
                       "the %s backend computes bf16 weights as stored", be->vt->name);
    return be->vt->weights_to_f16(be, w, n, n_outside);
}

void backend_buffer_free(struct backend *be, void *p)
{
    if (p)
        be->vt->buffer_free(be, p);
}

enum vllmc_status backend_memset(struct backend *be, void *dst, int value, size_t n_bytes)
{
    return be->vt->fill(be, dst, value, n_bytes);
}

enum vllmc_status backend_upload(struct backend *be, void *dst, const void *host_src, size_t n)
{
    return be->vt->upload(be, dst, host_src, n);
}

enum vllmc_status backend_download(struct backend *be, void *host_dst, const void *src, size_t n)
{
    return be->vt->download(be, host_dst, src, n);
}

bool backend_has_graphs(const struct backend *be)
{
    return be->vt->graph_begin != NULL;
}

enum vllmc_status backend_graph_begin(struct backend *be)
{
    if (!be->vt->graph_begin)
        return err_set(&be->err, VLLMC_ERR_UNSUPPORTED, "backend %s: no graphs", be->vt->name);
    return be->vt->graph_begin(be);
}

enum vllmc_status backend_graph_end(struct backend *be, bool keep, struct backend_graph **out)
{
    *out = NULL;
    if (!be->vt->graph_end)
        return err_set(&be->err, VLLMC_ERR_UNSUPPORTED, "backend %s: no graphs", be->vt->name);
    return be->vt->graph_end(be, keep, out);
}

bool backend_graph_valid(struct backend *be, const struct backend_graph *g)
{
    return g && be->vt->graph_valid && be->vt->graph_valid(be, g);
}

enum vllmc_status backend_graph_launch(struct backend *be, struct backend_graph *g)
{
    if (!be->vt->graph_launch)
        return err_set(&be->err, VLLMC_ERR_UNSUPPORTED, "backend %s: no graphs", be->vt->name);
    return be->vt->graph_launch(be, g);
}

void backend_graph_free(struct backend *be, struct backend_graph *g)
{
    if (g && be->vt->graph_free)
        be->vt->graph_free(be, g);
}

enum vllmc_status backend_sync(struct backend *be)
{
    return be->vt->sync ? be->vt->sync(be) : VLLMC_OK;
}

// ---- pinned host memory, downloads that do not wait, events ----

// The event of host backends: their work has run when it is queued, so an
// event is the host time of its record.
struct backend_event {
    int64_t recorded_us;
};

enum vllmc_status backend_host_alloc(struct backend *be, size_t n_bytes, void **out)
{
    if (be->vt->host_alloc)
        return be->vt->host_alloc(be, n_bytes, out);
    *out = mem_alloc_aligned(64, n_bytes ? n_bytes : 1);
    if (!*out)
        return err_set(&be->err, VLLMC_ERR_NOMEM, "%s: out of host memory", be->vt->name);
    return VLLMC_OK;
}

void backend_host_free(struct backend *be, void *p)
{
    if (!p)
        return;
    if (be->vt->host_free)
        be->vt->host_free(be, p);
    else
        mem_free(p);
}

enum vllmc_status backend_download_async(struct backend *be, void *host_dst, const void *src,
                                         size_t n)
{
    if (be->vt->download_async)
        return be->vt->download_async(be, host_dst, src, n);
    return be->vt->download(be, host_dst, src, n);
}

enum vllmc_status backend_event_create(struct backend *be, struct backend_event **out)
{
    if (be->vt->event_create)
        return be->vt->event_create(be, out);
    *out = mem_calloc(1, sizeof **out);
    if (!*out)
        return err_set(&be->err, VLLMC_ERR_NOMEM, "%s: out of memory", be->vt->name);
    return VLLMC_OK;
}

void backend_event_free(struct backend *be, struct backend_event *ev)
{
    if (!ev)
        return;
    if (be->vt->event_free)
        be->vt->event_free(be, ev);
    else
        mem_free(ev);
}

enum vllmc_status backend_event_record(struct backend *be, struct backend_event *ev)
{
    if (be->vt->event_record)
        return be->vt->event_record(be, ev);
    ev->recorded_us = time_now_us();
    return VLLMC_OK;
}

enum vllmc_status backend_event_wait(struct backend *be, struct backend_event *ev)
{
    return be->vt->event_wait ? be->vt->event_wait(be, ev) : VLLMC_OK;
}

enum vllmc_status backend_event_elapsed_ms(struct backend *be, const struct backend_event *from,
                                           const struct backend_event *to, double *ms)
{
    if (be->vt->event_elapsed_ms)
        return be->vt->event_elapsed_ms(be, from, to, ms);
    *ms = (double)(to->recorded_us - from->recorded_us) * 1e-3;
    return VLLMC_OK;
}

enum vllmc_status backend_memory_info(struct backend *be, size_t *free_bytes, size_t *total_bytes)
{
    if (be->vt->memory_info)
        return be->vt->memory_info(be, free_bytes, total_bytes);
    long page = sysconf(_SC_PAGESIZE);
    long n_phys = sysconf(_SC_PHYS_PAGES);
    long n_avail = sysconf(_SC_AVPHYS_PAGES);
    if (page <= 0 || n_phys <= 0 || n_avail < 0)
        return err_set(&be->err, VLLMC_ERR_BACKEND, "backend %s: cannot read memory size",
                       be->vt->name);
    *total_bytes = (size_t)page * (size_t)n_phys;
    *free_bytes = (size_t)page * (size_t)n_avail;
    return VLLMC_OK;
}
