// The BPE merge loop shared by byte-level BPE (pairs ranked by the merges list) and
// SentencePiece BPE (pairs ranked by the merged piece's score): symbols form a linked list
// over the piece, candidate pairs sit in a binary heap ordered by (priority, position), and a
// popped pair is applied only if both symbols are still what they were when it was pushed.
// O(n log n) in the piece length.
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/tokenizer_impl.h"

struct bpe_symbol {
    int32_t id;     // token id of the symbol, -1 when it has none
    uint32_t start; // byte offset in the piece
    uint32_t len;   // bytes; 0 once merged into its left neighbour
    int32_t prev, next;
};

struct bpe_pair {
    double key; // lower merges first: merge rank, or minus the piece score
    int32_t left, right;
    uint32_t size;  // bytes of the merged symbol when pushed
    int32_t merged; // id of the merged token
};

struct bpe_scratch {
    struct bpe_symbol *syms; // owned
    size_t n_syms, cap_syms;
    struct bpe_pair *heap; // owned
    size_t n_heap, cap_heap;
};

struct bpe_scratch *bpe_scratch_create(void)
{
    return mem_calloc(1, sizeof(struct bpe_scratch));
}

void bpe_scratch_free(struct bpe_scratch *s)
{
    if (!s)
        return;
    mem_free(s->syms);
    mem_free(s->heap);
    mem_free(s);
}

static bool pair_before(const struct bpe_pair *a, const struct bpe_pair *b)
{
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

static bool heap_push(struct bpe_scratch *s, struct bpe_pair p)
{
    if (s->n_heap == s->cap_heap) {
        size_t n = s->cap_heap ? s->cap_heap * 2 : 64;
        struct bpe_pair *h = mem_realloc(s->heap, n * sizeof(*h));
        if (!h)
            return false;
        s->heap = h;
        s->cap_heap = n;
    }
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_before(&p, &s->heap[parent]))
            break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = p;
    return true;
}

static struct bpe_pair heap_pop(struct bpe_scratch *s)
{
    struct bpe_pair top = s->heap[0];
    struct bpe_pair last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && pair_before(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!pair_before(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    return top;
}

static bool sym_push(struct bpe_scratch *s, int32_t id, size_t start, size_t len)
{
    if (s->n_syms == s->cap_syms) {
        size_t n = s->cap_syms ? s->cap_syms * 2 : 64;
        struct bpe_symbol *q = mem_realloc(s->syms, n * sizeof(*q));
        if (!q)
            return false;
        s->syms = q;
        s->cap_syms = n;
    }
    int32_t i = (int32_t)s->n_syms++;
    s->syms[i] = (struct bpe_symbol){id, (uint32_t)start, (uint32_t)len, i - 1, i + 1};
    return true;
}

// Pushes the pair (left, right) when the vocabulary can merge it.
static bool try_pair(const struct tokenizer *tok, struct bpe_scratch *s, const char *text,
                     int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return true;
    const struct bpe_symbol *l = &s->syms[left], *r = &s->syms[right];
    struct bpe_pair p = {.left = left, .right = right, .size = l->len + r->len};
    if (tok->model == TOK_MODEL_SPM) {
        int32_t id = strmap_get(&tok->lookup, text + l->start, p.size);
        if (id < 0)
            return true;
        p.key = -(double)tok->tokens[id].score;
        p.merged = id;
    } else {
        if (l->id < 0 || r->id < 0)
            return true;
        const struct pairmap_slot *m = pairmap_get(&tok->merges, l->id, r->id);
        if (!m)
            return true;
        p.key = m->rank;
        p.merged = m->merged;
    }
    return heap_push(s, p);
}

// Initial symbols: bytes for byte-level BPE, characters otherwise (with <0xNN> byte fallback
// for characters the vocabulary lacks).
static bool bpe_seed(const struct tokenizer *tok, struct bpe_scratch *s, const char *text,
                     size_t len)
{
    if (tok->byte_level) {
        for (size_t i = 0; i < len; i++)
            if (!sym_push(s, tok->byte_ids[(uint8_t)text[i]], i, 1))
                return false;
        return true;
    }
    for (size_t i = 0; i < len;) {
        size_t k = unicode_utf8_seq_len(text + i, len - i);
        int32_t id = strmap_get(&tok->lookup, text + i, k);
        if (id >= 0 || tok->model == TOK_MODEL_SPM || !tok->byte_fallback) {
            if (!sym_push(s, id, i, k))
                return false;
        } else {
            bool all = true;
            for (size_t j = 0; j < k; j++)
                all = all && tok->byte_ids[(uint8_t)text[i + j]] >= 0;
            for (size_t j = 0; j < k; j++)
                if (!sym_push(s, all ? tok->byte_ids[(uint8_t)text[i + j]] : -1, i + j, 1))
                    return false;
            if (!all) // one unknown for the whole character
                for (size_t j = 1; j < k; j++)
                    s->syms[s->n_syms - j].id = -2;
        }
        i += k;
    }
    return true;
}

// Emits a final symbol: its id, its bytes as <0xNN> tokens, or <unk>.
static bool emit(const struct tokenizer *tok, const char *text, const struct bpe_symbol *sym,
                 bool *prev_unk, struct tok_ids *out)
{
    if (sym->id == -2) // the tail of an unknown character already emitted
        return true;
    if (sym->id >= 0) {
        *prev_unk = false;
        return tok_ids_push(out, sym->id);
    }
    if (tok->model == TOK_MODEL_SPM || tok->byte_fallback) {
        bool all = true;
        for (uint32_t j = 0; j < sym->len; j++)
            all = all && tok->byte_ids[(uint8_t)text[sym->start + j]] >= 0;
        if (all) {
            for (uint32_t j = 0; j < sym->len; j++)
                if (!tok_ids_push(out, tok->byte_ids[(uint8_t)text[sym->start + j]]))
                    return false;
            *prev_unk = false;
            return true;
        }
    }
    if (tok->unk_id < 0 || (tok->fuse_unk && *prev_unk))
        return true;
    *prev_unk = true;
    return tok_ids_push(out, tok->unk_id);
}

bool bpe_encode_piece(const struct tokenizer *tok, struct bpe_scratch *s, const char *text,
                      size_t len, struct tok_ids *out)
{
    if (!len)
        return true;
    if (tok->ignore_merges) {
        int32_t id = strmap_get(&tok->lookup, text, len);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    s->n_syms = 0;
    s->n_heap = 0;
    if (!bpe_seed(tok, s, text, len))
        return false;
    if (!s->n_syms)
        return true;
    s->syms[s->n_syms - 1].next = -1;
    for (size_t i = 1; i < s->n_syms; i++)
        if (!try_pair(tok, s, text, (int32_t)i - 1, (int32_t)i))
            return false;
    while (s->n_heap) {
        struct bpe_pair p = heap_pop(s);
        struct bpe_symbol *l = &s->syms[p.left], *r = &s->syms[p.right];
        if (!l->len || l->next != p.right || l->len + r->len != p.size)
            continue; // stale: one side changed since the pair was pushed
        l->len += r->len;
        l->id = p.merged;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->syms[r->next].prev = p.left;
        if (!try_pair(tok, s, text, l->prev, p.left) || !try_pair(tok, s, text, p.left, l->next))
            return false;
    }
    bool prev_unk = false;
    for (int32_t i = 0; i >= 0; i = s->syms[i].next)
        if (!emit(tok, text, &s->syms[i], &prev_unk, out))
            return false;
    return true;
}
