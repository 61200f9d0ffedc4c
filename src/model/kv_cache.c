// Paged KV cache memory: one K and one V buffer per layer on the backend,
// zeroed at creation so a kernel that reads past a sequence's end sees zeros.
#include "model/kv_cache.h"

#include <sched.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "model/model.h"

void kv_cache_params_default(struct kv_cache_params *p)
{
    *p = (struct kv_cache_params){.n_blocks = 64, .block_size = 16, .dtype = DTYPE_F32};
}

static size_t kv_cache_layer_bytes(int n_blocks, int block_size, int n_kv_heads, int head_dim,
                                   enum dtype dtype)
{
    return (size_t)n_blocks * (size_t)block_size * (size_t)n_kv_heads *
           dtype_row_bytes(dtype, head_dim);
}

size_t kv_cache_bytes_per_block(const struct model_hparams *hp, int block_size, enum dtype dtype)
{
    return 2 * (size_t)hp->n_layers *
           kv_cache_layer_bytes(1, block_size, hp->n_kv_heads, hp->head_dim, dtype);
}

enum vllmc_status kv_cache_create(const struct model *m, const struct kv_cache_params *p,
                                  struct kv_cache **out, struct err *err)
{
    const struct model_hparams *hp = &m->hp;
    *out = NULL;
    if (p->n_blocks < 1 || p->block_size < 1)
        return err_set(err, VLLMC_ERR_INVALID_ARG, "kv cache: %d blocks of %d tokens", p->n_blocks,
                       p->block_size);
    if (p->dtype != DTYPE_F32 && p->dtype != DTYPE_F16 && p->dtype != DTYPE_BF16)
        return err_set(err, VLLMC_ERR_UNSUPPORTED, "kv cache: dtype %s (use f32, f16 or bf16)",
                       dtype_name(p->dtype));
    struct kv_cache *kv = mem_calloc(1, sizeof(*kv));
    if (!kv)
        return err_set(err, VLLMC_ERR_NOMEM, "kv cache: out of memory");
    kv->backend = m->backend;
    kv->n_layers = hp->n_layers;
    kv->n_blocks = p->n_blocks;
    kv->block_size = p->block_size;
    kv->n_kv_heads = hp->n_kv_heads;
    kv->head_dim = hp->head_dim;
    kv->dtype = p->dtype;
    enum vllmc_status rc = VLLMC_ERR_NOMEM;
    kv->k = mem_calloc((size_t)hp->n_layers, sizeof(*kv->k));
    kv->v = mem_calloc((size_t)hp->n_layers, sizeof(*kv->v));
    kv->bufs = mem_calloc(2 * (size_t)hp->n_layers, sizeof(*kv->bufs));
    if (!kv->k || !kv->v || !kv->bufs) {
        err_set(err, rc, "kv cache: out of memory");
        goto fail;
    }
    size_t layer_bytes =
        kv_cache_layer_bytes(p->n_blocks, p->block_size, hp->n_kv_heads, hp->head_dim, p->dtype);
    const int64_t ne[4] = {hp->head_dim, hp->n_kv_heads, p->block_size, p->n_blocks};
    for (int l = 0; l < hp->n_layers; l++) {
        for (int kind = 0; kind < 2; kind++) {
            void **buf = &kv->bufs[2 * l + kind];
            rc = backend_buffer_alloc_zeroed(m->backend, layer_bytes, buf);
            if (rc) {
                err_set(err, rc, "kv cache: cannot allocate %zu bytes on %s for layer %d: %s",
                        layer_bytes, backend_name(m->backend), l, backend_err(m->backend)->msg);
                goto fail;
            }
            struct tensor *t = kind ? &kv->v[l] : &kv->k[l];
            VLLMC_ASSERT(tensor_init(t, p->dtype, *buf, 4, ne));
            t->location = backend_location(m->backend);
            t->name = kind ? "v_cache" : "k_cache";
        }
    }
    *out = kv;
    return VLLMC_OK;
fail:
    kv_cache_free(kv);
    return rc;
}

// Runs of blocks of about this many bytes per layer buffer: one huge page.
#define KV_PREFAULT_RUN_BYTES ((size_t)2 << 20)

static void *kv_cache_prefault_main(void *arg)
{
    struct kv_cache *kv = arg;
#if defined(__linux__) && defined(SCHED_IDLE)
    // Idle priority: the engine's threads always come first.
    struct sched_param sp = {.sched_priority = 0};
    (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
#endif
    double t0 = time_now_s();
    size_t block_bytes =
        kv_cache_layer_bytes(1, kv->block_size, kv->n_kv_heads, kv->head_dim, kv->dtype);
    int run = (int)(KV_PREFAULT_RUN_BYTES / block_bytes);
    run = run < 1 ? 1 : run;
    for (int b0 = 0; b0 < kv->n_blocks; b0 += run) {
        int n = kv->n_blocks - b0 < run ? kv->n_blocks - b0 : run;
        for (int i = 0; i < 2 * kv->n_layers; i++) {
            if (atomic_load_explicit(&kv->prefault_stop, memory_order_relaxed))
                return NULL;
            if (backend_buffer_prefault(kv->backend, kv->bufs[i], (size_t)b0 * block_bytes,
                                        (size_t)n * block_bytes)) {
                log_info("kv cache: not made resident ahead (pages come in as first used)");
                return NULL;
            }
        }
        atomic_store_explicit(&kv->n_blocks_prefaulted, b0 + n, memory_order_release);
    }
    log_info("kv cache: resident, %.1f MiB in %.2f s",
             (double)block_bytes * kv->n_blocks * 2 * kv->n_layers / (1024.0 * 1024.0),
             time_now_s() - t0);
    return NULL;
}

void kv_cache_prefault_start(struct kv_cache *kv)
{
    // A zero-length prefault asks only whether the backend has one (device
    // memory has nothing to fault in): no thread, and no log line, there.
    if (kv->prefault_started || kv->n_layers == 0 ||
        backend_buffer_prefault(kv->backend, kv->bufs[0], 0, 0) == VLLMC_ERR_UNSUPPORTED)
        return;
    atomic_store(&kv->prefault_stop, false);
    kv->prefault_started =
        pthread_create(&kv->prefault_thread, NULL, kv_cache_prefault_main, kv) == 0;
}

void kv_cache_free(struct kv_cache *kv)
{
    if (!kv)
        return;
    if (kv->prefault_started) {
        atomic_store(&kv->prefault_stop, true);
        pthread_join(kv->prefault_thread, NULL);
    }
    if (kv->bufs)
        for (int i = 2 * kv->n_layers - 1; i >= 0; i--)
            if (kv->bufs[i])
                backend_buffer_free(kv->backend, kv->bufs[i]);
    mem_free(kv->bufs);
    mem_free(kv->v);
    mem_free(kv->k);
    mem_free(kv);
}
