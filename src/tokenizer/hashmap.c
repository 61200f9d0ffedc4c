// Hash maps of the tokenizer: vocabulary spelling -> id and BPE pair -> merge, both open
// addressing with linear probing, sized once for the vocabulary (load factor <= 1/2), so a
// 150k-token vocabulary and its merges load in a few milliseconds. Also the growable buffers.
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/tokenizer_impl.h"

// ---- growable buffers ----

bool tok_bytes_reserve(struct tok_bytes *b, size_t cap)
{
    if (cap <= b->cap)
        return true;
    size_t n = b->cap ? b->cap : 64;
    while (n < cap)
        n *= 2;
    char *p = mem_realloc(b->ptr, n);
    if (!p)
        return false;
    b->ptr = p;
    b->cap = n;
    return true;
}

bool tok_bytes_append(struct tok_bytes *b, const void *p, size_t n)
{
    if (!tok_bytes_reserve(b, b->len + n + 1))
        return false;
    if (n)
        memcpy(b->ptr + b->len, p, n);
    b->len += n;
    b->ptr[b->len] = '\0';
    return true;
}

bool tok_ids_push(struct tok_ids *v, int32_t id)
{
    if (v->len == v->cap) {
        size_t n = v->cap ? v->cap * 2 : 64;
        int32_t *p = mem_realloc(v->ptr, n * sizeof(*p));
        if (!p)
            return false;
        v->ptr = p;
        v->cap = n;
    }
    v->ptr[v->len++] = id;
    return true;
}

// ---- byte string -> id ----

uint32_t strmap_hash(const char *p, size_t n)
{
    // FNV-1a, 32-bit: short keys, good enough spread, no alignment concerns.
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)p[i];
        h *= 16777619u;
    }
    return h;
}

static size_t map_capacity(size_t n_expected)
{
    size_t cap = 16;
    while (cap < n_expected * 2 + 2)
        cap *= 2;
    return cap;
}

bool strmap_init(struct strmap *m, size_t n_expected)
{
    m->cap = map_capacity(n_expected);
    m->n = 0;
    m->slots = mem_calloc(m->cap, sizeof(*m->slots));
    return m->slots != NULL;
}

void strmap_deinit(struct strmap *m)
{
    mem_free(m->slots);
    memset(m, 0, sizeof(*m));
}

static bool strmap_grow(struct strmap *m)
{
    struct strmap old = *m;
    if (!strmap_init(m, old.cap)) {
        *m = old;
        return false;
    }
    for (size_t i = 0; i < old.cap; i++) {
        const struct strmap_slot *s = &old.slots[i];
        if (!s->key)
            continue;
        size_t j = s->hash & (m->cap - 1);
        while (m->slots[j].key)
            j = (j + 1) & (m->cap - 1);
        m->slots[j] = *s;
        m->n++;
    }
    mem_free(old.slots);
    return true;
}

bool strmap_put(struct strmap *m, const char *key, size_t len, int32_t val)
{
    if ((m->n + 1) * 2 > m->cap && !strmap_grow(m))
        return false;
    uint32_t h = strmap_hash(key, len);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].key) {
        const struct strmap_slot *s = &m->slots[j];
        if (s->hash == h && s->len == len && !memcmp(s->key, key, len))
            return true;
        j = (j + 1) & (m->cap - 1);
    }
    // An empty key needs a non-NULL pointer to mark the slot used.
    m->slots[j] =
        (struct strmap_slot){.key = len ? key : "", .len = (uint32_t)len, .hash = h, .val = val};
    m->n++;
    return true;
}

int32_t strmap_get(const struct strmap *m, const char *key, size_t len)
{
    if (!m->cap)
        return -1;
    uint32_t h = strmap_hash(key, len);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].key) {
        const struct strmap_slot *s = &m->slots[j];
        if (s->hash == h && s->len == len && !memcmp(s->key, key, len))
            return s->val;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

// ---- (left, right) -> merge ----

static uint64_t pair_key(int32_t left, int32_t right)
{
    return (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
}

static size_t pair_slot(uint64_t key, size_t cap)
{
    // splitmix64 finaliser: ids are small and dense, so mix before masking.
    key ^= key >> 30;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 27;
    key *= 0x94d049bb133111ebull;
    key ^= key >> 31;
    return (size_t)key & (cap - 1);
}

bool pairmap_init(struct pairmap *m, size_t n_expected)
{
    m->cap = map_capacity(n_expected);
    m->n = 0;
    m->slots = mem_calloc(m->cap, sizeof(*m->slots));
    return m->slots != NULL;
}

void pairmap_deinit(struct pairmap *m)
{
    mem_free(m->slots);
    memset(m, 0, sizeof(*m));
}

static bool pairmap_grow(struct pairmap *m)
{
    struct pairmap old = *m;
    if (!pairmap_init(m, old.cap)) {
        *m = old;
        return false;
    }
    for (size_t i = 0; i < old.cap; i++) {
        if (!old.slots[i].key)
            continue;
        size_t j = pair_slot(old.slots[i].key, m->cap);
        while (m->slots[j].key)
            j = (j + 1) & (m->cap - 1);
        m->slots[j] = old.slots[i];
        m->n++;
    }
    mem_free(old.slots);
    return true;
}

bool pairmap_put(struct pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t merged)
{
    if ((m->n + 1) * 2 > m->cap && !pairmap_grow(m))
        return false;
    uint64_t key = pair_key(left, right);
    size_t j = pair_slot(key, m->cap);
    while (m->slots[j].key) {
        if (m->slots[j].key == key)
            return true; // the first (highest-priority) merge of a pair wins
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (struct pairmap_slot){.key = key, .rank = rank, .merged = merged};
    m->n++;
    return true;
}

const struct pairmap_slot *pairmap_get(const struct pairmap *m, int32_t left, int32_t right)
{
    if (!m->cap)
        return NULL;
    uint64_t key = pair_key(left, right);
    size_t j = pair_slot(key, m->cap);
    while (m->slots[j].key) {
        if (m->slots[j].key == key)
            return &m->slots[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}
