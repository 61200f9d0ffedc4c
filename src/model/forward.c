// The forward pass of every supported architecture, written only as
// backend_run_op() calls so that each backend and provider runs it unchanged.
// Activations live in scratch carved once from backend memory at load time.
#include "model/model.h"

#include <math.h>

#include "backend/backend.h"
#include "model/kv_cache.h"

#define SCRATCH_ALIGN 256

// Per-token widths (in floats) of the scratch regions, in carving order.
enum scratch_region {
    SCR_X,    // residual stream [n, dim]
    SCR_H,    // normed input of a block / projection output [n, dim]
    SCR_Q,    // [n, n_heads, head_dim]
    SCR_K,    // [n, n_kv_heads, head_dim]
    SCR_V,    // [n, n_kv_heads, head_dim]
    SCR_ATT,  // attention output [n, n_heads, head_dim]
    SCR_GATE, // [n, ff_dim]; with SCR_UP also the fused gate|up output [n, 2 ff_dim]
    SCR_UP,   // [n, ff_dim]
    SCR_ACT,  // silu(gate) * up [n, ff_dim]
    SCR_G,    // residual rows gathered for the logits [n_logits, dim]
    SCR_QKV,  // fused q|k|v projection output [n, (n_heads + 2 n_kv_heads) head_dim]
    SCR_X2,   // the residual stream's other buffer [n, dim] (fwd_norm_matmul)
    SCR_COUNT
};

static int64_t scratch_width(const struct model_hparams *hp, enum scratch_region r)
{
    switch (r) {
    case SCR_X:
    case SCR_X2:
    case SCR_H:
    case SCR_G:
        return hp->dim;
    case SCR_Q:
    case SCR_ATT:
        return (int64_t)hp->n_heads * hp->head_dim;
    case SCR_K:
    case SCR_V:
        return (int64_t)hp->n_kv_heads * hp->head_dim;
    case SCR_GATE:
    case SCR_UP:
    case SCR_ACT:
        return hp->ff_dim;
    case SCR_QKV:
        return (int64_t)(hp->n_heads + 2 * hp->n_kv_heads) * hp->head_dim;
    case SCR_COUNT:
        break;
    }
    return 0;
}

// Whether the forward pass asks for norm_matmul (fwd_norm_matmul), and so
// carves the residual's second buffer SCR_X2, on a backend at loc: only
// devices, whose decode GEMVs stage the norm (on the CPU the op is only its
// reference composition).
static bool fwd_norm_matmul_at(enum tensor_location loc)
{
    return loc == TENSOR_DEVICE;
}

// Region r's bytes for n_tokens rows in scratch at loc.
static size_t scratch_region_bytes(const struct model_hparams *hp, enum scratch_region r,
                                   int n_tokens, enum tensor_location loc)
{
    if (r == SCR_X2 && !fwd_norm_matmul_at(loc))
        return 0;
    size_t n = (size_t)scratch_width(hp, r) * (size_t)n_tokens * sizeof(float);
    return (n + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN;
}

size_t model_scratch_bytes(const struct model_hparams *hp, int n_tokens, enum tensor_location loc)
{
    size_t total = 0;
    for (int r = 0; r < SCR_COUNT; r++)
        total += scratch_region_bytes(hp, (enum scratch_region)r, n_tokens, loc);
    return total;
}

// The activations of one call as tensor views over the scratch.
struct fwd {
    struct model *m;
    struct backend *be;
    struct err *err;
    struct tensor x, h, q2, k2, v2, att2, gate, up, act; // 2-D views [n, width]
    struct tensor x2;                                    // [n, dim], the residual's other buffer
    struct tensor *res;                                  // the residual stream now: &x or &x2
    bool pending; // h holds a projection output not yet added to *res
    struct tensor qkv;                                   // [n, (n_heads + 2 n_kv_heads) head_dim]
    struct tensor gate_up;                               // [n, 2 ff_dim] over gate and up
    struct tensor q3, k3, v3, att3;                      // [n, heads, head_dim] views
    struct tensor g, hl;                                 // [n_logits, dim]
};

static void fwd_view(struct fwd *f, struct tensor *t, enum scratch_region r, int64_t rows)
{
    const struct model_hparams *hp = &f->m->hp;
    const enum tensor_location loc = backend_location(f->be);
    VLLMC_ASSERT(scratch_region_bytes(hp, r, f->m->n_tokens_max, loc) > 0 || rows == 0);
    uint8_t *p = f->m->scratch;
    for (int i = 0; i < (int)r; i++)
        p += scratch_region_bytes(hp, (enum scratch_region)i, f->m->n_tokens_max, loc);
    VLLMC_ASSERT(tensor_init_2d(t, DTYPE_F32, p, scratch_width(hp, r), rows));
    t->location = loc;
}

// The fused gate|up output [rows, 2 ff] spans the GATE and UP regions, which
// are carved one after the other, each for n_tokens_max rows of ff.
static void fwd_view_gate_up(struct fwd *f, int64_t rows)
{
    const struct model_hparams *hp = &f->m->hp;
    fwd_view(f, &f->gate_up, SCR_GATE, rows);
    VLLMC_ASSERT(tensor_init_2d(&f->gate_up, DTYPE_F32, f->gate_up.data, 2 * (int64_t)hp->ff_dim,
                                rows));
    const enum tensor_location loc = backend_location(f->be);
    VLLMC_ASSERT(tensor_n_bytes(&f->gate_up) <=
                 scratch_region_bytes(hp, SCR_GATE, f->m->n_tokens_max, loc) +
                     scratch_region_bytes(hp, SCR_UP, f->m->n_tokens_max, loc));
    f->gate_up.location = backend_location(f->be);
}

static void fwd_heads(struct tensor *t3, const struct tensor *t2, int n_heads, int head_dim)
{
    VLLMC_ASSERT(tensor_init_3d(t3, DTYPE_F32, t2->data, head_dim, n_heads, t2->ne[1]));
    t3->location = t2->location;
}

static enum vllmc_status fwd_run(struct fwd *f, struct op_call *c)
{
    c->backend = f->be;
    enum vllmc_status rc = backend_run_op(f->be, c);
    if (rc)
        err_copy(f->err, backend_err(f->be));
    return rc;
}

static enum vllmc_status fwd_matmul(struct fwd *f, struct tensor *dst, struct tensor *x,
                                    struct tensor *w, struct tensor *bias, struct tensor *perm)
{
    struct op_call c = {.op = OP_MATMUL,
                        .dst = dst,
                        .src = {x, w, bias && bias->data ? bias : NULL,
                                perm && perm->data ? perm : NULL}};
    return fwd_run(f, &c);
}

static enum vllmc_status fwd_rmsnorm(struct fwd *f, struct tensor *dst, struct tensor *x,
                                     struct tensor *w)
{
    struct op_call c = {.op = OP_RMSNORM, .dst = dst, .src = {x, w}, .p.eps = f->m->hp.rms_eps};
    return fwd_run(f, &c);
}

// residual += x; dst = rmsnorm(residual) * w
static enum vllmc_status fwd_add_rmsnorm(struct fwd *f, struct tensor *dst, struct tensor *x,
                                         struct tensor *w, struct tensor *residual)
{
    struct op_call c = {
        .op = OP_ADD_RMSNORM, .dst = dst, .src = {x, w, residual}, .p.eps = f->m->hp.rms_eps};
    return fwd_run(f, &c);
}

// The norm at the head of a block: h = rmsnorm(*res) * w, with a pending
// projection output (in h) added to the residual stream first.
static enum vllmc_status fwd_norm(struct fwd *f, struct tensor *w)
{
    const bool pending = f->pending;
    f->pending = false;
    return pending ? fwd_add_rmsnorm(f, &f->h, &f->h, w, f->res) : fwd_rmsnorm(f, &f->h, f->res, w);
}

// The same norm and the one projection that reads it as one NORM_MATMUL
// (dst = rmsnorm(*res + h) * norm . W^T, or its SiLU-mul with silu_mul),
// where a device provider takes the call: the decode GEMVs stage the norm
// themselves, a kernel fewer each time. The sum goes to the residual's other
// buffer (the kernel's other blocks still read *res and h while it is
// written), which becomes the stream. False, and nothing run, otherwise.
static bool fwd_norm_matmul(struct fwd *f, struct tensor *dst, struct tensor *norm,
                            struct tensor *w, struct tensor *bias, bool silu_mul,
                            enum vllmc_status *rc)
{
    if (!fwd_norm_matmul_at(backend_location(f->be)))
        return false;
    struct tensor *sum = f->res == &f->x ? &f->x2 : &f->x;
    struct op_call c = {.op = OP_NORM_MATMUL,
                        .dst = dst,
                        .src = {f->res, f->pending ? &f->h : NULL, norm, w,
                                bias && bias->data ? bias : NULL, f->pending ? sum : NULL},
                        .p = {.eps = f->m->hp.rms_eps, .silu_mul = silu_mul},
                        .backend = f->be};
    if (!backend_select_provider(f->be, &c))
        return false;
    *rc = fwd_run(f, &c);
    if (f->pending)
        f->res = sum;
    f->pending = false;
    return true;
}

// RoPE in place on t [n, heads, head_dim], with the per-head norm first when qk_norm.
static enum vllmc_status fwd_rope(struct fwd *f, struct tensor *t, const struct model_batch *b,
                                  struct tensor *norm)
{
    const struct model_hparams *hp = &f->m->hp;
    struct op_call c = {
        .op = hp->qk_norm ? OP_QK_NORM_ROPE : OP_ROPE,
        .dst = t,
        .src = {(struct tensor *)&b->positions, &f->m->rope_inv_freq, hp->qk_norm ? norm : NULL},
        .p = {.eps = hp->rms_eps, .rope_dim = hp->rope_dim, .rope_neox = hp->rope_neox}};
    return fwd_run(f, &c);
}

// The step after the fused q|k|v matmul: q/k norm and RoPE of its output, q
// to its buffer, k and v into the cache (run by fwd_attention).
static struct op_call fwd_qkv_rope_store_call(struct fwd *f, const struct model_batch *b,
                                              struct kv_cache *kv, int l)
{
    const struct model_hparams *hp = &f->m->hp;
    struct model_layer *L = &f->m->layers[l];
    struct op_call c = {
        .op = OP_QKV_ROPE_STORE,
        .dst = &f->q3,
        .src = {&f->qkv, (struct tensor *)&b->positions, &f->m->rope_inv_freq,
                hp->qk_norm ? &L->q_norm : NULL, hp->qk_norm ? &L->k_norm : NULL, &kv->k[l],
                &kv->v[l], (struct tensor *)&b->slot_mapping},
        .p = {.eps = hp->rms_eps, .rope_dim = hp->rope_dim, .rope_neox = hp->rope_neox},
        .backend = f->be};
    return c;
}

// Separate projections: RoPE (with q/k norm) of q and k, then k and v into the cache.
static enum vllmc_status fwd_rope_store(struct fwd *f, const struct model_batch *b,
                                        struct kv_cache *kv, int l)
{
    struct model_layer *L = &f->m->layers[l];
    enum vllmc_status rc;
    if ((rc = fwd_rope(f, &f->q3, b, &L->q_norm)) || (rc = fwd_rope(f, &f->k3, b, &L->k_norm)))
        return rc;
    struct op_call store = {
        .op = OP_KV_STORE,
        .src = {&f->k3, &f->v3, &kv->k[l], &kv->v[l], (struct tensor *)&b->slot_mapping}};
    return fwd_run(f, &store);
}

// Whether layer L's projections fill the fused q|k|v output (f->qkv), whose
// qkv_rope_store fwd_attention runs.
static bool fwd_fills_qkv(const struct model_layer *L)
{
    return L->wqkv.data || L->wqk.data;
}

// Columns [c0, c0 + cols) of the fused q|k|v output, rows as they stand.
static void fwd_qkv_cols(const struct fwd *f, struct tensor *t, int64_t c0, int64_t cols)
{
    VLLMC_ASSERT(tensor_init_2d(t, DTYPE_F32, (float *)f->qkv.data + c0, cols, f->qkv.ne[1]));
    t->nb[1] = f->qkv.nb[1];
    t->location = f->qkv.location;
}

// q|k and v into the fused output by two matmuls (model_layer.wqk), each
// with the norm inside where fwd_norm_matmul can: the first adds the pending
// projection to the residual stream, the second norms the stream again.
static enum vllmc_status fwd_qk_v(struct fwd *f, struct model_layer *L)
{
    const struct model_hparams *hp = &f->m->hp;
    const int64_t qk_cols = (int64_t)(hp->n_heads + hp->n_kv_heads) * hp->head_dim;
    struct tensor qk, v;
    fwd_qkv_cols(f, &qk, 0, qk_cols);
    fwd_qkv_cols(f, &v, qk_cols, (int64_t)hp->n_kv_heads * hp->head_dim);
    enum vllmc_status rc = VLLMC_OK;
    if (fwd_norm_matmul(f, &qk, &L->attn_norm, &L->wqk, NULL, false, &rc)) {
        if (rc || fwd_norm_matmul(f, &v, &L->attn_norm, &L->wv, NULL, false, &rc))
            return rc;
        if ((rc = fwd_norm(f, &L->attn_norm)))
            return rc;
        return fwd_matmul(f, &v, &f->h, &L->wv, NULL, NULL);
    }
    if ((rc = fwd_norm(f, &L->attn_norm)) || (rc = fwd_matmul(f, &qk, &f->h, &L->wqk, NULL, NULL)))
        return rc;
    return fwd_matmul(f, &v, &f->h, &L->wv, NULL, NULL);
}

// q, k and v of layer l from the residual stream, ready for attention: the
// norm, one matmul and one fused op when the layer has fused q|k|v weights
// (norm and matmul as one op where fwd_norm_matmul can; fused q|k: two
// matmuls), else the norm, 3 matmuls, 2 RoPEs and a kv_store.
static enum vllmc_status fwd_qkv(struct fwd *f, const struct model_batch *b, struct kv_cache *kv,
                                 int l)
{
    struct model_layer *L = &f->m->layers[l];
    enum vllmc_status rc = VLLMC_OK;
    if (L->wqkv.data) {
        if (!fwd_norm_matmul(f, &f->qkv, &L->attn_norm, &L->wqkv, &L->bqkv, false, &rc) &&
            !(rc = fwd_norm(f, &L->attn_norm)))
            rc = fwd_matmul(f, &f->qkv, &f->h, &L->wqkv, &L->bqkv, NULL);
        return rc; // its qkv_rope_store: fwd_attention
    }
    if (L->wqk.data)
        return fwd_qk_v(f, L); // its qkv_rope_store: fwd_attention

    if ((rc = fwd_norm(f, &L->attn_norm)) ||
        (rc = fwd_matmul(f, &f->q2, &f->h, &L->wq, &L->bq, &L->wq_perm)) ||
        (rc = fwd_matmul(f, &f->k2, &f->h, &L->wk, &L->bk, &L->wk_perm)) ||
        (rc = fwd_matmul(f, &f->v2, &f->h, &L->wv, &L->bv, &L->wv_perm)))
        return rc;
    return fwd_rope_store(f, b, kv, l);
}

// act = silu(h . w_gate^T) * (h . w_up^T) with h the FFN norm of the
// residual stream, fused into the matmul where fwd_norm_matmul can. Else, on
// a device whose provider takes the step's token count, one matmul_silu_mul
// (the decode GEMV writes the activation directly); else one matmul over the
// fused gate|up weights and the packed SiLU-mul, or two matmuls and the split
// one. (The CPU has only the reference composition of matmul_silu_mul; its
// own matmul and SiLU providers are faster, and launches cost it nothing.)
static enum vllmc_status fwd_gate_up(struct fwd *f, struct model_layer *L)
{
    enum vllmc_status rc = VLLMC_OK;
    if (L->w_gate_up.data &&
        fwd_norm_matmul(f, &f->act, &L->ffn_norm, &L->w_gate_up, NULL, true, &rc))
        return rc;
    if ((rc = fwd_norm(f, &L->ffn_norm)))
        return rc;
    if (L->w_gate_up.data && backend_location(f->be) == TENSOR_DEVICE) {
        struct op_call c = {.op = OP_MATMUL_SILU_MUL,
                            .dst = &f->act,
                            .src = {&f->h, &L->w_gate_up},
                            .backend = f->be};
        if (backend_select_provider(f->be, &c))
            return fwd_run(f, &c);
    }
    if (L->w_gate_up.data) {
        if ((rc = fwd_matmul(f, &f->gate_up, &f->h, &L->w_gate_up, NULL, NULL)))
            return rc;
        struct op_call silu = {.op = OP_SILU_MUL, .dst = &f->act, .src = {&f->gate_up}};
        return fwd_run(f, &silu);
    }
    if ((rc = fwd_matmul(f, &f->gate, &f->h, &L->w_gate, NULL, &L->w_gate_perm)) ||
        (rc = fwd_matmul(f, &f->up, &f->h, &L->w_up, NULL, &L->w_up_perm)))
        return rc;
    struct op_call silu = {.op = OP_SILU_MUL, .dst = &f->act, .src = {&f->gate, &f->up}};
    return fwd_run(f, &silu);
}

// Attention. A fused q|k|v layer's qkv_rope_store (fwd_qkv leaves it here)
// goes in as the attention's prologue where a device provider takes that,
// else it runs first as its own op (on the CPU always: cpu-ref alone takes
// prologues there).
static enum vllmc_status fwd_attention(struct fwd *f, const struct model_batch *b,
                                       struct kv_cache *kv, int l)
{
    const struct model_hparams *hp = &f->m->hp;
    struct op_call att = {.op = OP_ATTENTION,
                          .dst = &f->att3,
                          .src = {&f->q3, &kv->k[l], &kv->v[l], (struct tensor *)&b->block_tables,
                                  (struct tensor *)&b->seq_lens,
                                  (struct tensor *)&b->query_start_loc},
                          .p = {.scale = 1.0f / sqrtf((float)hp->head_dim),
                                .max_seq_len = b->max_seq_len,
                                .max_q_len = b->max_q_len},
                          .backend = f->be};
    if (!fwd_fills_qkv(&f->m->layers[l]))
        return fwd_run(f, &att);
    struct op_call store = fwd_qkv_rope_store_call(f, b, kv, l);
    att.p.prologue = &store;
    if (backend_location(f->be) == TENSOR_DEVICE && backend_select_provider(f->be, &att))
        return fwd_run(f, &att);
    att.p.prologue = NULL;
    enum vllmc_status rc = fwd_run(f, &store);
    return rc ? rc : fwd_run(f, &att);
}

static enum vllmc_status fwd_check(struct fwd *f, const struct model_batch *b,
                                   const struct kv_cache *kv, const struct tensor *logits)
{
    const struct model *m = f->m;
    if (b->n_tokens < 1 || b->n_tokens > m->n_tokens_max)
        return err_set(f->err, VLLMC_ERR_INVALID_ARG, "forward: %d tokens (scratch holds %d)",
                       b->n_tokens, m->n_tokens_max);
    if (b->n_seqs < 1 || b->n_seqs > b->n_tokens || b->n_logits < 0 || b->n_logits > b->n_tokens)
        return err_set(f->err, VLLMC_ERR_INVALID_ARG, "forward: %d seqs, %d logits for %d tokens",
                       b->n_seqs, b->n_logits, b->n_tokens);
    if (b->input_ids.ne[0] != b->n_tokens || b->positions.ne[0] != b->n_tokens ||
        b->slot_mapping.ne[0] != b->n_tokens || b->seq_lens.ne[0] != b->n_seqs ||
        b->query_start_loc.ne[0] != b->n_seqs + 1 || b->block_tables.ne[1] != b->n_seqs ||
        b->logits_indices.ne[0] != b->n_logits)
        return err_set(f->err, VLLMC_ERR_INVALID_ARG,
                       "forward: batch tensors disagree with counts");
    if (kv->n_layers != m->hp.n_layers || kv->n_kv_heads != m->hp.n_kv_heads ||
        kv->head_dim != m->hp.head_dim)
        return err_set(f->err, VLLMC_ERR_INVALID_ARG, "forward: kv cache made for another model");
    if (b->n_logits && (!logits || logits->dtype != DTYPE_F32 || logits->ne[0] != m->hp.n_vocab ||
                        logits->ne[1] != b->n_logits))
        return err_set(f->err, VLLMC_ERR_INVALID_ARG, "forward: logits must be f32 [%d, %d]",
                       b->n_logits, m->hp.n_vocab);
    return VLLMC_OK;
}

enum vllmc_status model_forward(struct model *m, const struct model_batch *b, struct kv_cache *kv,
                                struct tensor *logits, struct err *err)
{
    const struct model_hparams *hp = &m->hp;
    struct fwd f = {.m = m, .be = m->backend, .err = err};
    enum vllmc_status rc = fwd_check(&f, b, kv, logits);
    if (rc)
        return rc;
    int64_t n = b->n_tokens;
    fwd_view(&f, &f.x, SCR_X, n);
    fwd_view(&f, &f.h, SCR_H, n);
    fwd_view(&f, &f.q2, SCR_Q, n);
    fwd_view(&f, &f.k2, SCR_K, n);
    fwd_view(&f, &f.v2, SCR_V, n);
    fwd_view(&f, &f.att2, SCR_ATT, n);
    fwd_view(&f, &f.gate, SCR_GATE, n);
    fwd_view(&f, &f.up, SCR_UP, n);
    fwd_view(&f, &f.act, SCR_ACT, n);
    fwd_view(&f, &f.qkv, SCR_QKV, n);
    if (fwd_norm_matmul_at(backend_location(f.be)))
        fwd_view(&f, &f.x2, SCR_X2, n);
    f.res = &f.x;
    fwd_view_gate_up(&f, n);
    fwd_heads(&f.q3, &f.q2, hp->n_heads, hp->head_dim);
    fwd_heads(&f.k3, &f.k2, hp->n_kv_heads, hp->head_dim);
    fwd_heads(&f.v3, &f.v2, hp->n_kv_heads, hp->head_dim);
    fwd_heads(&f.att3, &f.att2, hp->n_heads, hp->head_dim);

    struct op_call embed = {
        .op = OP_EMBEDDING, .dst = &f.x, .src = {&m->token_embd, (struct tensor *)&b->input_ids}};
    if ((rc = fwd_run(&f, &embed)))
        return rc;

    // Each block's norm (with the residual add of the projection before it)
    // runs inside fwd_qkv and fwd_gate_up; f.h then takes the block's output.
    int n_layers = b->n_layers > 0 && b->n_layers < hp->n_layers ? b->n_layers : hp->n_layers;
    for (int l = 0; l < n_layers; l++) {
        struct model_layer *L = &m->layers[l];
        if ((rc = fwd_qkv(&f, b, kv, l)) || (rc = fwd_attention(&f, b, kv, l)) ||
            (rc = fwd_matmul(&f, &f.h, &f.att2, &L->wo, NULL, &L->wo_perm)))
            return rc;
        f.pending = true;
        if ((rc = fwd_gate_up(&f, L)) ||
            (rc = fwd_matmul(&f, &f.h, &f.act, &L->w_down, NULL, &L->w_down_perm)))
            return rc;
        f.pending = true;
    }
    struct op_call add = {.op = OP_ADD, .dst = f.res, .src = {f.res, &f.h}};
    if ((rc = fwd_run(&f, &add)))
        return rc;
    if (!b->n_logits)
        return VLLMC_OK;

    // Only the requested rows reach the final norm and lm_head: gather them
    // with the embedding op, the residual stream serving as the table.
    fwd_view(&f, &f.g, SCR_G, b->n_logits);
    fwd_view(&f, &f.hl, SCR_H, b->n_logits);
    struct op_call gather = {
        .op = OP_EMBEDDING, .dst = &f.g, .src = {f.res, (struct tensor *)&b->logits_indices}};
    if ((rc = fwd_run(&f, &gather)) || (rc = fwd_rmsnorm(&f, &f.hl, &f.g, &m->output_norm)))
        return rc;
    return fwd_matmul(&f, logits, &f.hl, &m->output, NULL, NULL);
}

enum vllmc_status model_forward_record(struct model *m, const struct model_batch *b,
                                       struct kv_cache *kv, struct tensor *logits,
                                       struct backend_graph **out, struct err *err)
{
    *out = NULL;
    enum vllmc_status rc = backend_graph_begin(m->backend);
    if (rc)
        return err_set(err, rc, "graph: %s", backend_err(m->backend)->msg);
    enum vllmc_status fwd = model_forward(m, b, kv, logits, err);
    rc = backend_graph_end(m->backend, fwd == VLLMC_OK, out);
    if (fwd)
        return fwd;
    if (rc)
        return err_set(err, rc, "graph: %s", backend_err(m->backend)->msg);
    if (!*out)
        return err_set(err, VLLMC_ERR_BACKEND, "graph: the backend recorded nothing");
    return VLLMC_OK;
}
