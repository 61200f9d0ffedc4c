// Contract checks shared by every backend: the shapes of op.h's comments and
// the dtypes of index tensors (i32) and RoPE frequencies (f32). Value dtypes
// (f32, f16, quantized...) are left to each provider's gate.
#include <stdio.h>

#include "backend/backend_impl.h"

#define FAIL(...) return err_set(err, VLLMC_ERR_INVALID_ARG, __VA_ARGS__)

static enum vllmc_status need(const struct op_call *c, const struct tensor *t, const char *what,
                              struct err *err)
{
    if (!t)
        FAIL("op=%s: %s is missing", op_kind_name(c->op), what);
    if (!dtype_info(t->dtype))
        FAIL("op=%s: %s has unknown dtype %d", op_kind_name(c->op), what, (int)t->dtype);
    if (!t->data && tensor_n_elements(t) > 0)
        FAIL("op=%s: %s has no data", op_kind_name(c->op), what);
    return VLLMC_OK;
}

// An index tensor: contiguous i32 with n elements.
static enum vllmc_status need_i32(const struct op_call *c, const struct tensor *t, const char *what,
                                  int64_t n, struct err *err)
{
    enum vllmc_status rc = need(c, t, what, err);
    if (rc)
        return rc;
    if (t->dtype != DTYPE_I32 || !tensor_is_contiguous(t))
        FAIL("op=%s: %s must be contiguous i32, is %s", op_kind_name(c->op), what,
             dtype_name(t->dtype));
    if (n >= 0 && tensor_n_elements(t) != n)
        FAIL("op=%s: %s has %lld elements, expected %lld", op_kind_name(c->op), what,
             (long long)tensor_n_elements(t), (long long)n);
    return VLLMC_OK;
}

static enum vllmc_status same_shape(const struct op_call *c, const struct tensor *a, const char *an,
                                    const struct tensor *b, const char *bn, struct err *err)
{
    if (!tensor_same_shape(a, b))
        FAIL("op=%s: %s [%lld,%lld,%lld,%lld] and %s [%lld,%lld,%lld,%lld] differ",
             op_kind_name(c->op), an, (long long)a->ne[3], (long long)a->ne[2], (long long)a->ne[1],
             (long long)a->ne[0], bn, (long long)b->ne[3], (long long)b->ne[2], (long long)b->ne[1],
             (long long)b->ne[0]);
    return VLLMC_OK;
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        enum vllmc_status rc_ = (x);                                                               \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

static enum vllmc_status check_rope(const struct op_call *c, struct err *err)
{
    const struct tensor *d = c->dst;
    TRY(need(c, d, "dst", err));
    if (d->ne[3] != 1)
        FAIL("op=%s: dst must be [n_tokens, n_heads, head_dim]", op_kind_name(c->op));
    TRY(need_i32(c, c->src[0], "positions", d->ne[2], err));
    int rd = c->p.rope_dim;
    if (rd <= 0 || rd % 2 || rd > d->ne[0])
        FAIL("op=%s: rope_dim %d must be even and in (0, head_dim %lld]", op_kind_name(c->op), rd,
             (long long)d->ne[0]);
    TRY(need(c, c->src[1], "inv_freq", err));
    if (c->src[1]->dtype != DTYPE_F32 || !tensor_is_contiguous(c->src[1]) ||
        tensor_n_elements(c->src[1]) != rd / 2)
        FAIL("op=%s: inv_freq must be contiguous f32 [rope_dim / 2 = %d]", op_kind_name(c->op),
             rd / 2);
    if (c->op == OP_QK_NORM_ROPE) {
        TRY(need(c, c->src[2], "norm weight", err));
        if (tensor_n_elements(c->src[2]) != d->ne[0] || !tensor_is_contiguous(c->src[2]))
            FAIL("op=%s: norm weight must be contiguous [head_dim = %lld]", op_kind_name(c->op),
                 (long long)d->ne[0]);
    }
    return VLLMC_OK;
}

static enum vllmc_status check_qkv_rope_store(const struct op_call *c, struct err *err)
{
    const struct tensor *q = c->dst, *qkv = c->src[0], *kc = c->src[5], *vc = c->src[6];
    TRY(need(c, q, "q", err));
    TRY(need(c, qkv, "qkv", err));
    TRY(need(c, kc, "k_cache", err));
    TRY(need(c, vc, "v_cache", err));
    TRY(same_shape(c, kc, "k_cache", vc, "v_cache", err));
    int64_t hd = q->ne[0], nh = q->ne[1], n = q->ne[2], nkv = kc->ne[1];
    if (q->ne[3] != 1 || kc->ne[0] != hd || nkv <= 0)
        FAIL("op=qkv_rope_store: q [%lld,%lld,%lld] and cache [.., %lld, %lld] disagree",
             (long long)n, (long long)nh, (long long)hd, (long long)kc->ne[1],
             (long long)kc->ne[0]);
    if (qkv->ne[0] != (nh + 2 * nkv) * hd || tensor_n_rows(qkv) != n)
        FAIL("op=qkv_rope_store: qkv must be [n_tokens = %lld, (n_heads + 2 n_kv_heads) "
             "head_dim = %lld]",
             (long long)n, (long long)((nh + 2 * nkv) * hd));
    TRY(need_i32(c, c->src[1], "positions", n, err));
    int rd = c->p.rope_dim;
    if (rd <= 0 || rd % 2 || rd > hd)
        FAIL("op=qkv_rope_store: rope_dim %d must be even and in (0, head_dim %lld]", rd,
             (long long)hd);
    TRY(need(c, c->src[2], "inv_freq", err));
    if (c->src[2]->dtype != DTYPE_F32 || !tensor_is_contiguous(c->src[2]) ||
        tensor_n_elements(c->src[2]) != rd / 2)
        FAIL("op=qkv_rope_store: inv_freq must be contiguous f32 [rope_dim / 2 = %d]", rd / 2);
    if (!c->src[3] != !c->src[4])
        FAIL("op=qkv_rope_store: q and k norm weights come together or not at all");
    for (int i = 3; i <= 4 && c->src[3]; i++)
        if (tensor_n_elements(c->src[i]) != hd || !tensor_is_contiguous(c->src[i]))
            FAIL("op=qkv_rope_store: %s norm weight must be contiguous [head_dim = %lld]",
                 i == 3 ? "q" : "k", (long long)hd);
    TRY(need_i32(c, c->src[7], "slot_mapping", n, err));
    return VLLMC_OK;
}

static enum vllmc_status check_attention(const struct op_call *c, struct err *err)
{
    const struct tensor *q = c->src[0], *kc = c->src[1], *vc = c->src[2];
    TRY(need(c, c->dst, "dst", err));
    TRY(need(c, q, "q", err));
    TRY(need(c, kc, "k_cache", err));
    TRY(need(c, vc, "v_cache", err));
    TRY(same_shape(c, c->dst, "dst", q, "q", err));
    TRY(same_shape(c, kc, "k_cache", vc, "v_cache", err));
    if (q->ne[3] != 1 || kc->ne[0] != q->ne[0])
        FAIL("op=attention: q [%lld,%lld,%lld] and cache head_dim %lld disagree",
             (long long)q->ne[2], (long long)q->ne[1], (long long)q->ne[0], (long long)kc->ne[0]);
    if (kc->ne[1] <= 0 || q->ne[1] % kc->ne[1])
        FAIL("op=attention: n_heads %lld is not a multiple of n_kv_heads %lld", (long long)q->ne[1],
             (long long)kc->ne[1]);
    TRY(need(c, c->src[4], "seq_lens", err));
    int64_t n_seqs = tensor_n_elements(c->src[4]);
    TRY(need_i32(c, c->src[4], "seq_lens", n_seqs, err));
    TRY(need_i32(c, c->src[3], "block_tables", -1, err));
    if (c->src[3]->ne[1] != n_seqs || c->src[3]->ne[2] != 1 || c->src[3]->ne[3] != 1)
        FAIL("op=attention: block_tables must be [n_seqs = %lld, max_blocks_per_seq]",
             (long long)n_seqs);
    TRY(need_i32(c, c->src[5], "query_start_loc", n_seqs + 1, err));
    const struct op_call *pro = c->p.prologue;
    if (pro) {
        if (pro->op != OP_QKV_ROPE_STORE || !pro->dst || pro->dst->data != q->data ||
            !tensor_same_shape(pro->dst, q) || !pro->src[5] || !pro->src[6] ||
            pro->src[5]->data != kc->data || pro->src[6]->data != vc->data)
            FAIL("op=attention: the prologue must be a qkv_rope_store into q and this cache");
        TRY(op_check(pro, err));
    }
    return VLLMC_OK;
}

// Whether [a, a + na) and [b, b + nb) share a byte.
static bool bytes_overlap(const struct tensor *a, const struct tensor *b)
{
    const char *pa = a->data, *pb = b->data;
    const size_t na = tensor_n_bytes(a), nb = tensor_n_bytes(b);
    return na && nb && pa < pb + nb && pb < pa + na;
}

// The norm's operands here; the projection's through the MATMUL or
// MATMUL_SILU_MUL call it stands for, with x in place of the normed h.
static enum vllmc_status check_norm_matmul(const struct op_call *c, struct err *err)
{
    const struct tensor *x = c->src[0], *add = c->src[1], *w = c->src[2], *sum = c->src[5];
    TRY(need(c, x, "x", err));
    TRY(need(c, w, "norm weight", err));
    if (tensor_n_elements(w) != x->ne[0] || !tensor_is_contiguous(w))
        FAIL("op=norm_matmul: norm weight must be contiguous [k = %lld]", (long long)x->ne[0]);
    if (add) {
        TRY(need(c, add, "add", err));
        TRY(same_shape(c, add, "add", x, "x", err));
    }
    if (sum) {
        if (!add)
            FAIL("op=norm_matmul: sum needs add (it receives x + add)");
        TRY(need(c, sum, "sum", err));
        TRY(same_shape(c, sum, "sum", x, "x", err));
        if (bytes_overlap(sum, x) || bytes_overlap(sum, add))
            FAIL("op=norm_matmul: sum overlaps x or add");
    }
    if (c->src[6] || c->src[7])
        FAIL("op=norm_matmul: takes no src6 or src7");
    if (c->p.silu_mul && c->src[4])
        FAIL("op=norm_matmul: silu_mul takes no bias");
    struct op_call mm = op_norm_matmul_inner(c, c->src[0]);
    return op_check(&mm, err);
}

enum vllmc_status op_check(const struct op_call *c, struct err *err)
{
    const struct tensor *d = c->dst, *s0 = c->src[0], *s1 = c->src[1], *s2 = c->src[2];
    switch (c->op) {
    case OP_EMBEDDING:
        TRY(need(c, d, "dst", err));
        TRY(need(c, s0, "table", err));
        TRY(need_i32(c, s1, "ids", -1, err));
        if (d->ne[0] != s0->ne[0] || tensor_n_rows(d) != tensor_n_elements(s1))
            FAIL("op=embedding: dst must be [n_tokens = %lld, dim = %lld]",
                 (long long)tensor_n_elements(s1), (long long)s0->ne[0]);
        return VLLMC_OK;
    case OP_RMSNORM:
    case OP_ADD_RMSNORM:
        TRY(need(c, d, "dst", err));
        TRY(need(c, s0, "x", err));
        TRY(need(c, s1, "weight", err));
        TRY(same_shape(c, d, "dst", s0, "x", err));
        if (tensor_n_elements(s1) != s0->ne[0] || !tensor_is_contiguous(s1))
            FAIL("op=%s: weight must be contiguous [dim = %lld]", op_kind_name(c->op),
                 (long long)s0->ne[0]);
        if (c->op == OP_ADD_RMSNORM) {
            TRY(need(c, s2, "residual", err));
            TRY(same_shape(c, s2, "residual", s0, "x", err));
        }
        return VLLMC_OK;
    case OP_MATMUL:
        TRY(need(c, d, "dst", err));
        TRY(need(c, s0, "x", err));
        TRY(need(c, s1, "W", err));
        if (s1->ne[2] != 1 || s1->ne[3] != 1 || s0->ne[0] != s1->ne[0])
            FAIL("op=matmul: x [%lld, k=%lld] and W [%lld,%lld,n=%lld,k=%lld] disagree",
                 (long long)tensor_n_rows(s0), (long long)s0->ne[0], (long long)s1->ne[3],
                 (long long)s1->ne[2], (long long)s1->ne[1], (long long)s1->ne[0]);
        if (d->ne[0] != s1->ne[1] || tensor_n_rows(d) != tensor_n_rows(s0))
            FAIL("op=matmul: dst must be [m = %lld, n = %lld]", (long long)tensor_n_rows(s0),
                 (long long)s1->ne[1]);
        if (s2 && (!dtype_info(s2->dtype) || tensor_n_elements(s2) != s1->ne[1] ||
                   !tensor_is_contiguous(s2)))
            FAIL("op=matmul: bias must be contiguous [n = %lld]", (long long)s1->ne[1]);
        // Only the int4g providers read a permutation; with any other weight
        // type a provider would silently ignore it.
        if (c->src[3] && (s1->dtype != DTYPE_INT4G || c->src[3]->dtype != DTYPE_I32 ||
                          tensor_n_elements(c->src[3]) != s1->ne[0] ||
                          !tensor_is_contiguous(c->src[3])))
            FAIL("op=matmul: a permutation must be i32 [k = %lld] beside int4g weights",
                 (long long)s1->ne[0]);
        return VLLMC_OK;
    case OP_ROPE:
    case OP_QK_NORM_ROPE:
        return check_rope(c, err);
    case OP_SILU_MUL:
        if (!s1) { // packed gate|up
            TRY(need(c, d, "dst", err));
            TRY(need(c, s0, "gate_up", err));
            if (s0->ne[0] != 2 * d->ne[0] || tensor_n_rows(s0) != tensor_n_rows(d))
                FAIL("op=silu_mul: packed gate_up [%lld, %lld] must be [n, 2 ff] for dst "
                     "[%lld, ff = %lld]",
                     (long long)tensor_n_rows(s0), (long long)s0->ne[0],
                     (long long)tensor_n_rows(d), (long long)d->ne[0]);
            return VLLMC_OK;
        }
        // fall through
    case OP_ADD:
        TRY(need(c, d, "dst", err));
        TRY(need(c, s0, "src0", err));
        TRY(need(c, s1, "src1", err));
        TRY(same_shape(c, d, "dst", s0, "src0", err));
        TRY(same_shape(c, s1, "src1", s0, "src0", err));
        return VLLMC_OK;
    case OP_KV_STORE:
        TRY(need(c, s0, "k", err));
        TRY(need(c, s1, "v", err));
        TRY(need(c, s2, "k_cache", err));
        TRY(need(c, c->src[3], "v_cache", err));
        TRY(same_shape(c, s0, "k", s1, "v", err));
        TRY(same_shape(c, s2, "k_cache", c->src[3], "v_cache", err));
        if (s0->ne[3] != 1 || s2->ne[0] != s0->ne[0] || s2->ne[1] != s0->ne[1])
            FAIL("op=kv_store: k [%lld,%lld,%lld] does not fit the cache [.., %lld, %lld]",
                 (long long)s0->ne[2], (long long)s0->ne[1], (long long)s0->ne[0],
                 (long long)s2->ne[1], (long long)s2->ne[0]);
        TRY(need_i32(c, c->src[4], "slot_mapping", s0->ne[2], err));
        return VLLMC_OK;
    case OP_QKV_ROPE_STORE:
        return check_qkv_rope_store(c, err);
    case OP_MATMUL_SILU_MUL:
        TRY(need(c, d, "dst", err));
        TRY(need(c, s0, "x", err));
        TRY(need(c, s1, "W", err));
        if (s1->ne[2] != 1 || s1->ne[3] != 1 || s0->ne[0] != s1->ne[0] ||
            s1->ne[1] != 2 * d->ne[0] || tensor_n_rows(d) != tensor_n_rows(s0))
            FAIL("op=matmul_silu_mul: x [%lld, k=%lld], W [n=%lld, k=%lld] and dst [%lld, ff=%lld] "
                 "disagree (n = 2 ff)",
                 (long long)tensor_n_rows(s0), (long long)s0->ne[0], (long long)s1->ne[1],
                 (long long)s1->ne[0], (long long)tensor_n_rows(d), (long long)d->ne[0]);
        if (s2 || c->src[3])
            FAIL("op=matmul_silu_mul: takes no bias and no permutation");
        return VLLMC_OK;
    case OP_NORM_MATMUL:
        return check_norm_matmul(c, err);
    case OP_ATTENTION:
        return check_attention(c, err);
    case OP_SAMPLE:
        TRY(need(c, d, "dst", err));
        TRY(need(c, s0, "logits", err));
        TRY(need(c, c->src[1], "rows", err));
        if (d->dtype != DTYPE_I32 || c->src[1]->dtype != DTYPE_I32 ||
            tensor_n_elements(d) != tensor_n_rows(c->src[1]))
            FAIL("op=sample: dst must be i32 [n_rows = %lld]", (long long)tensor_n_rows(c->src[1]));
        return VLLMC_OK;
    case OP_SELECT_IDS:
        TRY(need(c, d, "dst", err));
        TRY(need_i32(c, d, "dst", tensor_n_elements(d), err));
        TRY(need(c, s0, "values", err));
        TRY(need_i32(c, s0, "values", tensor_n_elements(s0), err));
        TRY(need_i32(c, s1, "index", tensor_n_elements(d), err));
        return VLLMC_OK;
    default:
        FAIL("op kind %d unknown", (int)c->op);
    }
}
