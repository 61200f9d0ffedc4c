// Op dispatch: each op's enabled providers sorted by priority (then name, so
// the winner depends only on what is compiled in), the first whose gate
// accepts the call runs it. Selections can be logged once per distinct
// (op, shapes, dtypes) without allocating on the hot path.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "core/alloc.h"
#include "core/log.h"

static const char *const op_names[OP_KIND_COUNT] = {
#define OP_KIND_NAME(name, text) [OP_##name] = text,
    OP_KIND_LIST(OP_KIND_NAME)
#undef OP_KIND_NAME
};

const char *op_kind_name(enum op_kind op)
{
    return (unsigned)op < OP_KIND_COUNT ? op_names[op] : "unknown";
}

bool backend_name_in_list(const char *list, const char *name)
{
    if (!list || !name)
        return false;
    size_t len = strlen(name);
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *end = p;
        while (*end && *end != ',')
            end++;
        const char *last = end;
        while (last > p && last[-1] == ' ')
            last--;
        if ((size_t)(last - p) == len && !memcmp(p, name, len))
            return true;
        p = end;
    }
    return false;
}

// Best first: higher priority, then name, then table position (stable).
static bool provider_before(const struct op_provider *a, size_t ia, const struct op_provider *b,
                            size_t ib)
{
    if (a->priority != b->priority)
        return a->priority > b->priority;
    int cmp = strcmp(a->name, b->name);
    if (cmp)
        return cmp < 0;
    return ia < ib;
}

enum vllmc_status backend_set_providers(struct backend *be,
                                        const struct op_provider *const *providers,
                                        size_t n_providers)
{
    const struct op_provider **order = mem_calloc(n_providers ? n_providers : 1, sizeof *order);
    if (!order)
        return VLLMC_ERR_NOMEM;
    // Insertion sort per op: tables are tens of entries, built once.
    size_t n = 0;
    for (int op = 0; op < OP_KIND_COUNT; op++) {
        be->op_first[op] = n;
        size_t first = n;
        for (size_t i = 0; i < n_providers; i++) {
            const struct op_provider *p = providers[i];
            if ((int)p->op != op || backend_name_in_list(be->disable_list, p->name))
                continue;
            size_t j = n++;
            while (j > first) {
                const struct op_provider *q = order[j - 1];
                size_t iq = 0;
                while (providers[iq] != q)
                    iq++;
                if (!provider_before(p, i, q, iq))
                    break;
                order[j] = q;
                j--;
            }
            order[j] = p;
        }
    }
    be->op_first[OP_KIND_COUNT] = n;
    mem_free(be->order);
    be->order = order;
    be->providers = providers;
    be->n_providers = n_providers;
    be->n_log_seen = 0;
    memset(be->log_seen, 0, sizeof be->log_seen);
    return VLLMC_OK;
}

const struct op_provider *const *backend_providers(const struct backend *be, size_t *n)
{
    *n = be->n_providers;
    return be->providers;
}

// ---- describing a call ----

static long long ne(const struct tensor *t, int i)
{
    return t ? (long long)t->ne[i] : 0;
}

static const char *dt(const struct tensor *t)
{
    return t ? dtype_name(t->dtype) : "none";
}

struct op_call op_norm_matmul_inner(const struct op_call *c, struct tensor *xn)
{
    struct op_call mm = {.op = c->p.silu_mul ? OP_MATMUL_SILU_MUL : OP_MATMUL,
                         .dst = c->dst,
                         .src = {xn, c->src[3], c->p.silu_mul ? NULL : c->src[4]},
                         .backend = c->backend};
    return mm;
}

void op_call_describe(const struct op_call *c, char *buf, size_t n)
{
    const struct tensor *d = c->dst, *s0 = c->src[0], *s1 = c->src[1], *s2 = c->src[2];
    switch (c->op) {
    case OP_EMBEDDING:
        snprintf(buf, n, "n_tokens=%lld dim=%lld wtype=%s", ne(s1, 0), ne(s0, 0), dt(s0));
        break;
    case OP_RMSNORM:
    case OP_ADD_RMSNORM:
    case OP_SILU_MUL:
    case OP_ADD:
        snprintf(buf, n, "n=%lld dim=%lld dtype=%s wtype=%s%s",
                 s0 ? (long long)tensor_n_rows(s0) : 0, ne(s0, 0), dt(s0),
                 c->op == OP_RMSNORM || c->op == OP_ADD_RMSNORM ? dt(s1) : dt(s0),
                 c->op == OP_SILU_MUL && !s1 ? " packed" : "");
        break;
    case OP_MATMUL:
        snprintf(buf, n, "m=%lld n=%lld k=%lld wtype=%s%s%s", s0 ? (long long)tensor_n_rows(s0) : 0,
                 ne(s1, 1), ne(s0, 0), dt(s1), s0 && s0->dtype != DTYPE_F32 ? " xtype=" : "",
                 s0 && s0->dtype != DTYPE_F32 ? dt(s0) : "");
        if (s2) {
            size_t len = strlen(buf);
            snprintf(buf + len, n - len, " bias=%s", dt(s2));
        }
        break;
    case OP_ROPE:
    case OP_QK_NORM_ROPE:
        snprintf(buf, n, "n_tokens=%lld n_heads=%lld head_dim=%lld rope_dim=%d %s dtype=%s",
                 ne(d, 2), ne(d, 1), ne(d, 0), c->p.rope_dim, c->p.rope_neox ? "neox" : "pairs",
                 dt(d));
        break;
    case OP_MATMUL_SILU_MUL:
        snprintf(buf, n, "m=%lld ff=%lld k=%lld wtype=%s", s0 ? (long long)tensor_n_rows(s0) : 0,
                 ne(d, 0), ne(s0, 0), dt(s1));
        break;
    case OP_NORM_MATMUL:
        snprintf(buf, n, "m=%lld n=%lld k=%lld wtype=%s%s%s%s",
                 s0 ? (long long)tensor_n_rows(s0) : 0, ne(d, 0), ne(s0, 0), dt(c->src[3]),
                 s1 ? " add" : "", c->src[4] ? " bias" : "", c->p.silu_mul ? " silu_mul" : "");
        break;
    case OP_QKV_ROPE_STORE:
        snprintf(buf, n,
                 "n_tokens=%lld n_heads=%lld n_kv_heads=%lld head_dim=%lld rope_dim=%d %s%s "
                 "cache=%s",
                 ne(d, 2), ne(d, 1), ne(c->src[5], 1), ne(d, 0), c->p.rope_dim,
                 c->p.rope_neox ? "neox" : "pairs", c->src[3] ? " qk_norm" : "", dt(c->src[5]));
        break;
    case OP_KV_STORE:
        snprintf(buf, n, "n_tokens=%lld n_kv_heads=%lld head_dim=%lld block_size=%lld cache=%s",
                 ne(s0, 2), ne(s0, 1), ne(s0, 0), ne(s2, 2), dt(s2));
        break;
    case OP_ATTENTION:
        snprintf(buf, n,
                 "n_tokens=%lld n_seqs=%lld n_heads=%lld n_kv_heads=%lld head_dim=%lld "
                 "block_size=%lld cache=%s%s",
                 ne(s0, 2), ne(c->src[4], 0), ne(s0, 1), ne(s1, 1), ne(s0, 0), ne(s1, 2), dt(s1),
                 c->p.prologue ? " after qkv_rope_store" : "");
        break;
    case OP_SAMPLE:
        snprintf(buf, n, "n_seqs=%lld n_vocab=%lld", ne(s0, 1), ne(s0, 0));
        break;
    case OP_SELECT_IDS:
        snprintf(buf, n, "n=%lld m=%lld", ne(d, 0), ne(s0, 0));
        break;
    default:
        snprintf(buf, n, "?");
        break;
    }
}

enum vllmc_status op_fail(const struct op_call *c, enum vllmc_status code, const char *fmt, ...)
{
    if (!c->backend)
        return code;
    char msg[ERR_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(&c->backend->err, code, "op=%s: %s", op_kind_name(c->op), msg);
}

// ---- selection ----

static uint64_t hash_mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

// A key for "this op with these shapes and dtypes picked this provider".
static uint64_t selection_key(const struct op_call *c, const struct op_provider *p)
{
    uint64_t h = hash_mix(0x51ed270b27aull, (uint64_t)c->op);
    h = hash_mix(h, (uint64_t)(uintptr_t)p);
    h = hash_mix(h, (uint64_t)c->p.rope_dim * 2u + c->p.rope_neox);
    h = hash_mix(h, (uint64_t)c->p.silu_mul * 2u + (c->p.prologue != NULL));
    for (int i = -1; i < OP_MAX_SRC; i++) {
        const struct tensor *t = i < 0 ? c->dst : c->src[i];
        if (!t) {
            h = hash_mix(h, 0xdead);
            continue;
        }
        h = hash_mix(h, (uint64_t)t->dtype + 1);
        for (int d = 0; d < TENSOR_MAX_DIMS; d++)
            h = hash_mix(h, (uint64_t)t->ne[d]);
    }
    return h ? h : 1;
}

// True the first time key is seen. Open addressing over a fixed table.
static bool log_first_time(struct backend *be, uint64_t key)
{
    size_t mask = BACKEND_LOG_SLOTS - 1;
    for (size_t i = (size_t)key & mask, probes = 0; probes < BACKEND_LOG_SLOTS;
         i = (i + 1) & mask, probes++) {
        if (be->log_seen[i] == key)
            return false;
        if (be->log_seen[i] == 0) {
            if (be->n_log_seen >= BACKEND_LOG_SLOTS / 2)
                return false; // keep probes short; later selections go unlogged
            be->log_seen[i] = key;
            be->n_log_seen++;
            return true;
        }
    }
    return false;
}

const struct op_provider *backend_select_provider(struct backend *be, const struct op_call *c)
{
    if ((unsigned)c->op >= OP_KIND_COUNT || op_check(c, NULL))
        return NULL;
    for (size_t i = be->op_first[c->op]; i < be->op_first[c->op + 1]; i++)
        if (be->order[i]->supports(c))
            return be->order[i];
    return NULL;
}

enum vllmc_status backend_run_op(struct backend *be, struct op_call *c)
{
    if ((unsigned)c->op >= OP_KIND_COUNT)
        return err_set(&be->err, VLLMC_ERR_INVALID_ARG, "op kind %d unknown", (int)c->op);
    enum vllmc_status rc = op_check(c, &be->err);
    if (rc)
        return rc;
    c->backend = be;
    const struct op_provider *p = NULL;
    for (size_t i = be->op_first[c->op]; i < be->op_first[c->op + 1]; i++) {
        if (be->order[i]->supports(c)) {
            p = be->order[i];
            break;
        }
    }
    if (!p) {
        char desc[256];
        op_call_describe(c, desc, sizeof desc);
        return err_set(&be->err, VLLMC_ERR_UNSUPPORTED, "op=%s %s: no %s provider accepts it",
                       op_kind_name(c->op), desc, be->vt->name);
    }
    if (be->opts.log_providers && log_first_time(be, selection_key(c, p))) {
        char desc[256];
        op_call_describe(c, desc, sizeof desc);
        log_info("op=%s %s selected=%s priority=%d", op_kind_name(c->op), desc, p->name,
                 p->priority);
    }
    be->n_ops_run++;
    return p->run(c);
}
