// Model loading: reads hyper-parameters, binds every weight tensor by name
// with its shape and dtype checked, keeps matrices in the file mapping (or
// uploads them once to device memory) and sizes the forward scratch.
#include "model/model.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/log.h"
#include "model/arch.h"
#include "backend/cpu/quant/blocks.h"
#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/int4_ckpt.h"
#include "model/safetensors.h"

// Alignment of every tensor the loader places in its own buffers.
#define LOADER_ALIGN 64

enum weight_class {
    WCLASS_MATRIX,    // matmul weight: any dtype a matmul provider accepts
    WCLASS_EMBEDDING, // row table: any dtype an embedding provider accepts (often also lm_head)
    WCLASS_VECTOR,    // norm gain or bias: f32, f16 or bf16, kept as f32
};

// One weight on its way from the file to the model.
struct loader_slot {
    struct tensor *dst;
    char name[96];
    const void *data; // in the mapping
    size_t n_bytes;   // in the mapping
    enum dtype dtype; // in the file
    int n_dims;
    int64_t ne[4];
    bool to_f32;       // a small vector converted to f32 in host_buf
    bool misaligned;   // copied to host_buf because the mapping is not aligned
    bool host_fused;   // copied to host_buf beside the other members of its fused group
    bool fuse_next;    // the next slot's data follows this one's without padding
    size_t host_off;   // where in host_buf when to_f32, misaligned, int4 or host_fused
    size_t device_off; // where in device_buf on a device backend
    // AWQ/GPTQ layers: repacked into int4g blocks in host_buf at host_off;
    // act-order ones also get their input permutation at perm_host_off.
    bool int4;
    bool needs_perm;
    struct int4_layer int4_src;
    struct tensor *perm_dst; // borrowed: the matrix's permutation tensor, or NULL
    size_t perm_host_off;
    size_t perm_device_off;
};

// The slots of one layer that may be fused: wq, wk, wv at qkv .. qkv + 2, then
// n_bias biases from bias, then w_gate, w_up at gate, gate + 1 (loader_bind_all).
struct loader_layer_slots {
    int qkv, bias, n_bias, gate;
};

struct loader {
    struct model *m;
    struct err *err;
    struct loader_slot *slots; // owned, [n_slots_max]
    struct loader_layer_slots *layer_slots; // owned, [n_layers]
    bool fused_qkv_any, fused_gu_any;
    int n_slots;
    int n_slots_max;
    size_t host_bytes;
    size_t device_bytes;
    float *freq_factors; // borrowed from the mapping (GGUF rope_freqs), or NULL
    bool has_int4;       // the checkpoint is AWQ or GPTQ (config.json quantization_config)
    struct int4_config int4;
    bool weights_f16; // bf16 matrices rewritten as f16 once uploaded (--dtype float16)
};

void model_load_params_default(struct model_load_params *p)
{
    *p = (struct model_load_params){.n_tokens_max = 512, .fuse = MODEL_FUSE_AUTO};
    // A switch for side-by-side runs of the split and the fused layouts.
    const char *fuse = getenv("VLLMC_FUSE");
    if (fuse && (!strcmp(fuse, "0") || !strcmp(fuse, "off")))
        p->fuse = MODEL_FUSE_OFF;
    else if (fuse && (!strcmp(fuse, "1") || !strcmp(fuse, "on")))
        p->fuse = MODEL_FUSE_ON;
}

// ---- finding tensors in either format ----

static bool loader_find(struct loader *ld, const char *name, struct loader_slot *s)
{
    const struct model *m = ld->m;
    if (m->gguf) {
        const struct gguf_tensor_info *t = gguf_find_tensor(m->gguf, name);
        if (!t)
            return false;
        s->data = t->data;
        s->n_bytes = t->n_bytes;
        s->dtype = t->dtype;
        s->n_dims = t->n_dims;
        memcpy(s->ne, t->ne, sizeof(s->ne));
        return true;
    }
    const struct st_tensor *t = safetensors_find(m->st, name);
    if (!t)
        return false;
    s->data = t->data;
    s->n_bytes = t->n_bytes;
    s->dtype = t->dtype;
    s->n_dims = t->n_dims;
    memcpy(s->ne, t->ne, sizeof(s->ne));
    return true;
}

// Finds the packed tensors of an AWQ/GPTQ layer whose `.weight` is absent and
// checks them against [ne1 outputs, ne0 inputs]. *found is false when the
// layer has no qweight either.
static enum vllmc_status loader_find_int4(struct loader *ld, struct loader_slot *s, int64_t ne0,
                                          int64_t ne1, bool *found)
{
    char prefix[96], name[112];
    size_t n = strlen(s->name);
    *found = false;
    if (!ld->has_int4 || n < 7 || strcmp(s->name + n - 7, ".weight"))
        return VLLMC_OK;
    snprintf(prefix, sizeof(prefix), "%.*s", (int)(n - 7), s->name);
    struct int4_layer *ly = &s->int4_src;
    snprintf(name, sizeof(name), "%s.qweight", prefix);
    if (!(ly->qweight = safetensors_find(ld->m->st, name)))
        return VLLMC_OK;
    *found = true;
    snprintf(name, sizeof(name), "%s.qzeros", prefix);
    ly->qzeros = safetensors_find(ld->m->st, name);
    snprintf(name, sizeof(name), "%s.scales", prefix);
    ly->scales = safetensors_find(ld->m->st, name);
    snprintf(name, sizeof(name), "%s.g_idx", prefix);
    ly->g_idx = safetensors_find(ld->m->st, name);
    char where[4200];
    snprintf(where, sizeof(where), "%s: %s", ld->m->path, prefix);
    enum vllmc_status rc =
        int4_layer_check(&ld->int4, ly, ne0, ne1, where, &s->needs_perm, ld->err);
    if (rc)
        return rc;
    s->int4 = true;
    s->dtype = DTYPE_INT4G;
    s->n_dims = 2;
    s->ne[0] = ne0;
    s->ne[1] = ne1;
    s->ne[2] = s->ne[3] = 1;
    s->n_bytes = dtype_row_bytes(DTYPE_INT4G, ne0) * (size_t)ne1;
    s->data = NULL; // written by loader_place
    return VLLMC_OK;
}

// Writes a shape outermost first, as error messages and comments read.
static void shape_str(char *buf, size_t n, int n_dims, const int64_t *ne)
{
    size_t k = 0;
    k += (size_t)snprintf(buf, n, "[");
    for (int i = n_dims - 1; i >= 0 && k < n; i--)
        k += (size_t)snprintf(buf + k, n - k, "%lld%s", (long long)ne[i], i ? ", " : "");
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

// Asks the backend whether any provider would run this weight in its op.
static bool loader_backend_accepts(struct loader *ld, const struct loader_slot *s,
                                   enum weight_class cls)
{
    struct backend *be = ld->m->backend;
    static float dummy[4];
    static int32_t dummy_id[1];
    struct tensor w, x, y, ids;
    // Gates never read weight data; a repacked weight has none until loader_place.
    if (!tensor_init(&w, s->dtype, s->data ? (void *)s->data : dummy, s->n_dims, s->ne))
        return false;
    enum tensor_location loc = backend_location(be);
    w.location = loc;
    struct op_call c = {.backend = be};
    if (cls == WCLASS_MATRIX) {
        tensor_init_2d(&x, DTYPE_F32, dummy, s->ne[0], 1);
        tensor_init_2d(&y, DTYPE_F32, dummy, s->ne[1], 1);
        c.op = OP_MATMUL;
        c.src[0] = &x;
        c.src[1] = &w;
    } else {
        tensor_init_1d(&ids, DTYPE_I32, dummy_id, 1);
        tensor_init_2d(&y, DTYPE_F32, dummy, s->ne[0], 1);
        ids.location = loc;
        c.op = OP_EMBEDDING;
        c.src[0] = &w;
        c.src[1] = &ids;
    }
    x.location = loc;
    y.location = loc;
    c.dst = &y;
    return backend_select_provider(be, &c) != NULL;
}

// Finds one weight, checks it against the expected shape (innermost first,
// ne1 = 0 for vectors) and queues it. A missing optional weight leaves
// dst->data NULL.
static enum vllmc_status loader_bind(struct loader *ld, enum arch_weight w, int layer,
                                     bool required, enum weight_class cls, int64_t ne0, int64_t ne1,
                                     struct tensor *dst)
{
    struct model *m = ld->m;
    VLLMC_ASSERT(ld->n_slots < ld->n_slots_max);
    struct loader_slot *s = &ld->slots[ld->n_slots];
    *s = (struct loader_slot){.dst = dst};
    if (!arch_weight_name(m->info.format, w, layer, s->name, sizeof(s->name)))
        return VLLMC_OK;
    bool found = loader_find(ld, s->name, s);
    if (!found && cls == WCLASS_MATRIX) {
        enum vllmc_status rc = loader_find_int4(ld, s, ne0, ne1, &found);
        if (rc)
            return rc;
    }
    if (!found) {
        if (!required)
            return VLLMC_OK;
        return err_set(ld->err, VLLMC_ERR_FORMAT, "%s: tensor %s is missing", m->path, s->name);
    }
    int n_dims_want = ne1 ? 2 : 1;
    int64_t ne_want[4] = {ne0, ne1 ? ne1 : 1, 1, 1};
    bool shape_ok =
        s->n_dims == n_dims_want || (s->n_dims > n_dims_want && s->ne[s->n_dims - 1] == 1);
    for (int i = 0; i < 4; i++)
        shape_ok = shape_ok && s->ne[i] == ne_want[i];
    if (!shape_ok) {
        char got[96], want[96];
        shape_str(got, sizeof(got), s->n_dims, s->ne);
        shape_str(want, sizeof(want), n_dims_want, ne_want);
        return err_set(ld->err, VLLMC_ERR_FORMAT,
                       "%s: tensor %s has shape %s, the hyper-parameters need %s", m->path, s->name,
                       got, want);
    }
    s->n_dims = n_dims_want;
    const struct dtype_info *info = dtype_info(s->dtype);
    if (!info)
        return err_set(ld->err, VLLMC_ERR_UNSUPPORTED, "%s: tensor %s has unknown dtype id %d",
                       m->path, s->name, (int)s->dtype);
    size_t want_bytes = dtype_row_bytes(s->dtype, ne0) * (size_t)ne_want[1];
    if (!dtype_row_bytes(s->dtype, ne0) || want_bytes != s->n_bytes)
        return err_set(ld->err, VLLMC_ERR_FORMAT,
                       "%s: tensor %s: %zu bytes of %s do not hold a %lld-wide row layout", m->path,
                       s->name, s->n_bytes, info->name, (long long)ne0);
    if (cls == WCLASS_VECTOR) {
        if (s->dtype != DTYPE_F32 && s->dtype != DTYPE_F16 && s->dtype != DTYPE_BF16)
            return err_set(ld->err, VLLMC_ERR_UNSUPPORTED,
                           "%s: tensor %s has dtype %s; norms and biases must be f32, f16 or bf16",
                           m->path, s->name, info->name);
        s->to_f32 = s->dtype != DTYPE_F32;
    } else {
        bool plain_float = s->dtype == DTYPE_F32 || s->dtype == DTYPE_F16 || s->dtype == DTYPE_BF16;
        if (!plain_float && !info->is_quantized)
            return err_set(ld->err, VLLMC_ERR_UNSUPPORTED,
                           "%s: tensor %s has dtype %s, which is not a weight type", m->path,
                           s->name, info->name);
        if (!loader_backend_accepts(ld, s, cls))
            return err_set(ld->err, VLLMC_ERR_UNSUPPORTED,
                           "%s: tensor %s has dtype %s, for which the %s backend has no %s "
                           "provider",
                           m->path, s->name, info->name, backend_name(m->backend),
                           cls == WCLASS_MATRIX ? "matmul" : "embedding");
    }
    // Reading a float through a misaligned pointer is undefined; safetensors
    // offsets carry no alignment promise, so such tensors get an aligned copy.
    size_t align = info->type_size >= 4 ? 4 : info->type_size >= 2 ? 2 : 1;
    s->misaligned = !s->to_f32 && ((uintptr_t)s->data % align) != 0;
    ld->n_slots++;
    return VLLMC_OK;
}

// loader_bind for a per-layer matrix that may come with an act-order
// permutation (GPTQ checkpoints), placed in perm.
static enum vllmc_status loader_bind_matrix(struct loader *ld, enum arch_weight w, int layer,
                                            int64_t ne0, int64_t ne1, struct tensor *dst,
                                            struct tensor *perm)
{
    int n_before = ld->n_slots;
    enum vllmc_status rc = loader_bind(ld, w, layer, true, WCLASS_MATRIX, ne0, ne1, dst);
    if (!rc && ld->n_slots > n_before)
        ld->slots[n_before].perm_dst = perm;
    return rc;
}

// Resolves every weight the architecture needs.
static enum vllmc_status loader_bind_all(struct loader *ld)
{
    struct model *m = ld->m;
    const struct model_hparams *hp = &m->hp;
    int64_t dim = hp->dim, q_dim = (int64_t)hp->n_heads * hp->head_dim;
    int64_t kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim, ff = hp->ff_dim;
    enum vllmc_status rc;
    if ((rc = loader_bind(ld, ARCH_W_TOKEN_EMBD, 0, true, WCLASS_EMBEDDING, dim, hp->n_vocab,
                          &m->token_embd)) ||
        (rc = loader_bind(ld, ARCH_W_OUTPUT_NORM, 0, true, WCLASS_VECTOR, dim, 0, &m->output_norm)))
        return rc;
    if (!m->hp.tied_embeddings) {
        int n_before = ld->n_slots;
        if ((rc = loader_bind(ld, ARCH_W_OUTPUT, 0, m->info.format == MODEL_FORMAT_SAFETENSORS,
                              WCLASS_MATRIX, dim, hp->n_vocab, &m->output)))
            return rc;
        // GGUF files of tied models simply leave output.weight out.
        if (ld->n_slots == n_before)
            m->hp.tied_embeddings = true;
    }
    if (m->hp.tied_embeddings && !loader_backend_accepts(ld, &ld->slots[0], WCLASS_MATRIX))
        return err_set(ld->err, VLLMC_ERR_UNSUPPORTED,
                       "%s: tensor %s (tied lm_head) has dtype %s, for which the %s backend has "
                       "no matmul provider",
                       m->path, ld->slots[0].name, dtype_name(ld->slots[0].dtype),
                       backend_name(m->backend));
    for (int l = 0; l < hp->n_layers; l++) {
        struct model_layer *L = &m->layers[l];
        struct loader_layer_slots *ls = &ld->layer_slots[l];
        bool bias = hp->qkv_bias;
        if ((rc = loader_bind(ld, ARCH_W_ATTN_NORM, l, true, WCLASS_VECTOR, dim, 0,
                              &L->attn_norm)))
            return rc;
        ls->qkv = ld->n_slots;
        if ((rc = loader_bind_matrix(ld, ARCH_W_Q, l, dim, q_dim, &L->wq, &L->wq_perm)) ||
            (rc = loader_bind_matrix(ld, ARCH_W_K, l, dim, kv_dim, &L->wk, &L->wk_perm)) ||
            (rc = loader_bind_matrix(ld, ARCH_W_V, l, dim, kv_dim, &L->wv, &L->wv_perm)))
            return rc;
        ls->bias = ld->n_slots;
        if ((rc = loader_bind(ld, ARCH_W_BQ, l, bias, WCLASS_VECTOR, q_dim, 0, &L->bq)) ||
            (rc = loader_bind(ld, ARCH_W_BK, l, bias, WCLASS_VECTOR, kv_dim, 0, &L->bk)) ||
            (rc = loader_bind(ld, ARCH_W_BV, l, bias, WCLASS_VECTOR, kv_dim, 0, &L->bv)))
            return rc;
        ls->n_bias = ld->n_slots - ls->bias;
        if ((rc = loader_bind_matrix(ld, ARCH_W_O, l, q_dim, dim, &L->wo, &L->wo_perm)) ||
            (rc = loader_bind(ld, ARCH_W_FFN_NORM, l, true, WCLASS_VECTOR, dim, 0, &L->ffn_norm)))
            return rc;
        ls->gate = ld->n_slots;
        if ((rc = loader_bind_matrix(ld, ARCH_W_GATE, l, dim, ff, &L->w_gate, &L->w_gate_perm)) ||
            (rc = loader_bind_matrix(ld, ARCH_W_UP, l, dim, ff, &L->w_up, &L->w_up_perm)) ||
            (rc = loader_bind_matrix(ld, ARCH_W_DOWN, l, ff, dim, &L->w_down, &L->w_down_perm)))
            return rc;
        if (hp->qk_norm && ((rc = loader_bind(ld, ARCH_W_Q_NORM, l, true, WCLASS_VECTOR,
                                              hp->head_dim, 0, &L->q_norm)) ||
                            (rc = loader_bind(ld, ARCH_W_K_NORM, l, true, WCLASS_VECTOR,
                                              hp->head_dim, 0, &L->k_norm))))
            return rc;
    }
    return VLLMC_OK;
}

// Matrices fuse when they share a dtype and none reads its input through an
// act-order permutation (rows of every dtype are independent, so stacking
// them is a bigger matrix of the same dtype).
// The backend must also take the stacked shape (its matmul gates see n).
static bool loader_fusable(struct loader *ld, int first, int count)
{
    struct loader_slot stacked = ld->slots[first];
    stacked.ne[1] = 0;
    for (int i = first; i < first + count; i++) {
        const struct loader_slot *s = &ld->slots[i];
        if (s->needs_perm || s->dtype != stacked.dtype || s->n_dims != 2 || s->ne[0] != stacked.ne[0])
            return false;
        stacked.ne[1] += s->ne[1];
    }
    return loader_backend_accepts(ld, &stacked, WCLASS_MATRIX);
}

static void loader_mark_group(struct loader *ld, int first, int count, bool on_host)
{
    for (int i = first; i < first + count; i++) {
        ld->slots[i].fuse_next = i + 1 < first + count;
        ld->slots[i].host_fused = on_host;
    }
}

// Decides which layers get fused q|k|v and gate|up weights (model.h, enum model_fuse).
static void loader_plan_fusion(struct loader *ld, enum model_fuse fuse)
{
    struct model *m = ld->m;
    bool device = backend_location(m->backend) == TENSOR_DEVICE;
    if (fuse == MODEL_FUSE_OFF || (fuse == MODEL_FUSE_AUTO && !device))
        return;
    bool on_host = !device;
    for (int l = 0; l < m->hp.n_layers; l++) {
        const struct loader_layer_slots *ls = &ld->layer_slots[l];
        // Biases fuse with their matrices: all three or none.
        if (loader_fusable(ld, ls->qkv, 3) && (ls->n_bias == 0 || ls->n_bias == 3)) {
            loader_mark_group(ld, ls->qkv, 3, on_host);
            if (ls->n_bias)
                loader_mark_group(ld, ls->bias, 3, on_host);
            ld->fused_qkv_any = true;
        } else if (ls->n_bias == 0 && loader_fusable(ld, ls->qkv, 2)) {
            loader_mark_group(ld, ls->qkv, 2, on_host); // q|k (model_layer.wqk)
            ld->fused_qkv_any = true;
        }
        if (loader_fusable(ld, ls->gate, 2)) {
            loader_mark_group(ld, ls->gate, 2, on_host);
            ld->fused_gu_any = true;
        }
    }
}

// Assigns every slot its place in host_buf (when the loader keeps its own
// copy) and in the device buffer. Members of a fused group follow each other
// without padding; everything else starts aligned.
static void loader_layout(struct loader *ld)
{
    ld->host_bytes = ld->device_bytes = 0;
    for (int i = 0; i < ld->n_slots; i++) {
        struct loader_slot *s = &ld->slots[i];
        size_t final_bytes = s->to_f32 ? (size_t)s->ne[0] * 4 : s->n_bytes;
        bool own = s->to_f32 || s->misaligned || s->int4 || s->host_fused;
        if (own) {
            s->host_off = ld->host_bytes;
            ld->host_bytes += s->fuse_next && s->host_fused
                                  ? final_bytes
                                  : (final_bytes + LOADER_ALIGN - 1) / LOADER_ALIGN * LOADER_ALIGN;
        }
        s->device_off = ld->device_bytes;
        ld->device_bytes += s->fuse_next ? final_bytes : (final_bytes + 255) / 256 * 256;
        if (s->needs_perm) {
            size_t perm_bytes = (size_t)s->ne[0] * sizeof(int32_t);
            s->perm_host_off = ld->host_bytes;
            ld->host_bytes += (perm_bytes + LOADER_ALIGN - 1) / LOADER_ALIGN * LOADER_ALIGN;
            s->perm_device_off = ld->device_bytes;
            ld->device_bytes += (perm_bytes + 255) / 256 * 256;
        }
    }
}

// A view of count adjacent placed slots from first as one tensor: matrices
// stack their rows, vectors their elements.
static void loader_fused_view(struct loader *ld, int first, int count, struct tensor *out)
{
    const struct tensor *t0 = ld->slots[first].dst;
    int64_t rows = 0;
    size_t off = 0;
    for (int i = first; i < first + count; i++) {
        const struct tensor *t = ld->slots[i].dst;
        VLLMC_ASSERT(t->dtype == t0->dtype && t->n_dims == t0->n_dims &&
                     (const uint8_t *)t->data == (const uint8_t *)t0->data + off);
        off += tensor_n_bytes(t);
        rows += t->n_dims == 1 ? t->ne[0] : t->ne[1];
    }
    if (t0->n_dims == 1)
        VLLMC_ASSERT(tensor_init_1d(out, t0->dtype, t0->data, rows));
    else
        VLLMC_ASSERT(tensor_init_2d(out, t0->dtype, t0->data, t0->ne[0], rows));
    out->location = t0->location;
}

static void loader_fused_views(struct loader *ld)
{
    for (int l = 0; l < ld->m->hp.n_layers; l++) {
        const struct loader_layer_slots *ls = &ld->layer_slots[l];
        struct model_layer *L = &ld->m->layers[l];
        if (ld->slots[ls->qkv].fuse_next && ld->slots[ls->qkv + 1].fuse_next) {
            loader_fused_view(ld, ls->qkv, 3, &L->wqkv);
            if (ls->n_bias)
                loader_fused_view(ld, ls->bias, 3, &L->bqkv);
        } else if (ld->slots[ls->qkv].fuse_next) {
            loader_fused_view(ld, ls->qkv, 2, &L->wqk);
        }
        if (ld->slots[ls->gate].fuse_next)
            loader_fused_view(ld, ls->gate, 2, &L->w_gate_up);
    }
}

// Reads GGUF rope_freqs (llama3 scaling baked into per-frequency divisors).
static enum vllmc_status loader_rope_freqs(struct loader *ld)
{
    struct model *m = ld->m;
    char name[64];
    if (!m->gguf || !arch_weight_name(MODEL_FORMAT_GGUF, ARCH_W_ROPE_FREQS, 0, name, sizeof(name)))
        return VLLMC_OK;
    const struct gguf_tensor_info *t = gguf_find_tensor(m->gguf, name);
    if (!t)
        return VLLMC_OK;
    if (t->dtype != DTYPE_F32 || t->ne[0] != m->hp.rope_dim / 2 || t->ne[1] != 1 ||
        (uintptr_t)t->data % 4)
        return err_set(ld->err, VLLMC_ERR_FORMAT, "%s: tensor %s must be f32 [%d]", m->path, name,
                       m->hp.rope_dim / 2);
    ld->freq_factors = (float *)t->data;
    for (int i = 0; i < m->hp.rope_dim / 2; i++)
        if (!(ld->freq_factors[i] > 0.0f))
            return err_set(ld->err, VLLMC_ERR_FORMAT, "%s: tensor %s holds a factor <= 0", m->path,
                           name);
    return VLLMC_OK;
}

// The backend's own layout of each matrix the forward pass reads (host
// backends: backend_prepare_weight), kept beside the weight as its `alt`.
static enum vllmc_status loader_prepare_weights(struct loader *ld)
{
    struct model *m = ld->m;
    enum { per_layer = 7 }; // matrices a layer at most
    int n_max = per_layer * m->hp.n_layers + 1;
    struct tensor **w = mem_calloc((size_t)n_max, sizeof(*w));
    m->alts = mem_calloc((size_t)n_max, sizeof(*m->alts));
    if (!w || !m->alts) {
        mem_free(w);
        return err_set(ld->err, VLLMC_ERR_NOMEM, "%s: out of memory", m->path);
    }
    int n = 0;
    for (int l = 0; l < m->hp.n_layers; l++) {
        struct model_layer *L = &m->layers[l];
        // The matrices fwd_qkv and fwd_gate_up read: fused views where the
        // loader made them.
        if (L->wqkv.data) {
            w[n++] = &L->wqkv;
        } else {
            if (L->wqk.data) {
                w[n++] = &L->wqk;
            } else {
                w[n++] = &L->wq;
                w[n++] = &L->wk;
            }
            w[n++] = &L->wv;
        }
        w[n++] = &L->wo;
        if (L->w_gate_up.data) {
            w[n++] = &L->w_gate_up;
        } else {
            w[n++] = &L->w_gate;
            w[n++] = &L->w_up;
        }
        w[n++] = &L->w_down;
    }
    w[n++] = &m->output;
    size_t n_bytes = 0;
    enum vllmc_status rc = VLLMC_OK;
    for (int i = 0; i < n && !rc; i++) {
        void *alt;
        if (!w[i]->data)
            continue;
        rc = backend_prepare_weight(m->backend, w[i], &alt);
        if (rc) {
            err_set(ld->err, rc, "%s: laying out a %s matrix for %s: %s", m->path,
                    dtype_name(w[i]->dtype), backend_name(m->backend), vllmc_status_str(rc));
        } else if (alt) {
            m->alts[m->n_alts++] = alt;
            w[i]->alt = alt;
            n_bytes += tensor_n_bytes(w[i]);
            // The kernels read the copy: the file's pages of w, read once to
            // make it, leave the process (a GGUF tensor in the mapping).
            if (m->gguf)
                gguf_drop_bytes(m->gguf, w[i]->data, tensor_n_bytes(w[i]));
        }
    }
    mem_free(w);
    if (!rc && m->n_alts)
        log_info("model: %d matrices (%.1f MiB) laid out again for the %s backend's kernels",
                 m->n_alts, (double)n_bytes / (1024.0 * 1024.0), backend_name(m->backend));
    return rc;
}

// --dtype float16: the uploaded bf16 matrices (every 2-D bf16 slot, the
// embedding table too) rewritten as f16 by the backend, all or none, before
// the fused views take their dtype from them.
static enum vllmc_status loader_weights_to_f16(struct loader *ld)
{
    struct model *m = ld->m;
    struct tensor **w = mem_calloc((size_t)ld->n_slots, sizeof(*w));
    if (!w)
        return err_set(ld->err, VLLMC_ERR_NOMEM, "%s: out of memory", m->path);
    int n = 0;
    size_t n_bytes = 0;
    for (int i = 0; i < ld->n_slots; i++) {
        struct tensor *t = ld->slots[i].dst;
        if (t->dtype == DTYPE_BF16 && ld->slots[i].n_dims == 2) {
            w[n++] = t;
            n_bytes += tensor_n_bytes(t);
        }
    }
    int64_t n_outside = 0;
    enum vllmc_status rc = n ? backend_weights_to_f16(m->backend, w, n, &n_outside) : VLLMC_OK;
    mem_free(w);
    if (rc)
        return err_set(ld->err, rc, "%s: --dtype float16: %s", m->path,
                       backend_err(m->backend)->msg);
    if (n_outside)
        return err_set(ld->err, VLLMC_ERR_UNSUPPORTED,
                       "%s: --dtype float16: %lld values of the bf16 weights lie outside "
                       "float16's range (65504); use --dtype auto or bfloat16",
                       m->path, (long long)n_outside);
    if (n)
        log_info("model: %d bf16 matrices (%.1f MiB) rewritten as f16 (--dtype float16)", n,
                 (double)n_bytes / (1024.0 * 1024.0));
    return VLLMC_OK;
}

// Converts, copies and uploads the queued weights; fills the model's tensors.
static enum vllmc_status loader_place(struct loader *ld)
{
    struct model *m = ld->m;
    struct backend *be = m->backend;
    int half = m->hp.rope_dim / 2;
    size_t inv_freq_off = ld->host_bytes;
    m->host_buf = mem_alloc_aligned(LOADER_ALIGN, ld->host_bytes + (size_t)half * 4);
    if (!m->host_buf)
        return err_set(ld->err, VLLMC_ERR_NOMEM, "%s: out of memory", m->path);
    uint8_t *host = m->host_buf;
    for (int i = 0; i < ld->n_slots; i++) {
        struct loader_slot *s = &ld->slots[i];
        void *data = (void *)s->data;
        enum dtype dtype = s->dtype;
        if (s->to_f32) {
            float *out = (float *)(host + s->host_off);
            const uint8_t *in = s->data;
            for (int64_t j = 0; j < s->ne[0]; j++) {
                uint16_t h;
                memcpy(&h, in + 2 * j, 2);
                out[j] = s->dtype == DTYPE_F16 ? fp16_to_f32(h) : bf16_to_f32(h);
            }
            data = out;
            dtype = DTYPE_F32;
        } else if (s->misaligned || (s->host_fused && !s->int4)) {
            memcpy(host + s->host_off, s->data, s->n_bytes);
            data = host + s->host_off;
        } else if (s->int4) {
            int32_t *perm = s->needs_perm ? (int32_t *)(host + s->perm_host_off) : NULL;
            data = host + s->host_off;
            int4_layer_repack(&ld->int4, &s->int4_src, s->ne[0], s->ne[1], data, perm);
            if (perm)
                VLLMC_ASSERT(tensor_init_1d(s->perm_dst, DTYPE_I32, perm, s->ne[0]));
        }
        VLLMC_ASSERT(tensor_init(s->dst, dtype, data, s->n_dims, s->ne));
        s->dst->name = NULL;
    }
    float *inv_freq = (float *)(host + inv_freq_off);
    arch_rope_inv_freq(&m->hp, ld->freq_factors, inv_freq);
    VLLMC_ASSERT(tensor_init_1d(&m->rope_inv_freq, DTYPE_F32, inv_freq, half));

    if (backend_location(be) == TENSOR_DEVICE) {
        size_t inv_off = ld->device_bytes;
        size_t total = inv_off + (size_t)half * 4;
        enum vllmc_status rc = backend_buffer_alloc(be, total, &m->device_buf);
        if (rc)
            return err_set(ld->err, rc, "%s: cannot allocate %zu bytes of weights on %s", m->path,
                           total, backend_name(be));
        uint8_t *dev = m->device_buf;
        for (int i = 0; i < ld->n_slots; i++) {
            struct loader_slot *s = &ld->slots[i];
            rc = backend_upload(be, dev + s->device_off, s->dst->data, tensor_n_bytes(s->dst));
            if (rc)
                return err_set(ld->err, rc, "%s: uploading %s: %s", m->path, s->name,
                               backend_err(be)->msg);
            s->dst->data = dev + s->device_off;
            s->dst->location = TENSOR_DEVICE;
            if (s->needs_perm) {
                rc = backend_upload(be, dev + s->perm_device_off, s->perm_dst->data,
                                    tensor_n_bytes(s->perm_dst));
                if (rc)
                    return err_set(ld->err, rc, "%s: uploading %s: %s", m->path, s->name,
                                   backend_err(be)->msg);
                s->perm_dst->data = dev + s->perm_device_off;
                s->perm_dst->location = TENSOR_DEVICE;
            }
        }
        rc = backend_upload(be, dev + inv_off, inv_freq, (size_t)half * 4);
        if (!rc)
            rc = backend_sync(be);
        if (rc)
            return err_set(ld->err, rc, "%s: uploading weights: %s", m->path, backend_err(be)->msg);
        m->rope_inv_freq.data = dev + inv_off;
        m->rope_inv_freq.location = TENSOR_DEVICE;
        if (ld->weights_f16) {
            rc = loader_weights_to_f16(ld);
            if (rc)
                return rc;
        }
    }
    loader_fused_views(ld);
    if (m->hp.tied_embeddings)
        m->output = m->token_embd;
    m->info.weight_bytes = ld->device_bytes;
    return backend_location(be) == TENSOR_HOST ? loader_prepare_weights(ld) : VLLMC_OK;
}

// ---- file-level facts for `vllmc info` ----

static void info_from_gguf(struct model *m)
{
    struct model_file_info *in = &m->info;
    in->gguf_version = gguf_version(m->gguf);
    in->n_files = 1;
    in->n_tensors = (int)gguf_n_tensors(m->gguf);
    for (size_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(m->gguf, i);
        if ((unsigned)t->dtype < DTYPE_COUNT)
            in->n_tensors_by_dtype[t->dtype]++;
        in->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    struct gguf_str s;
    if (gguf_get_str(m->gguf, "general.name", &s))
        snprintf(in->name, sizeof(in->name), "%.*s", (int)(s.len > 127 ? 127 : s.len), s.ptr);
    if (gguf_get_str(m->gguf, "tokenizer.ggml.model", &s)) {
        const char *what = gguf_str_eq(s, "llama")  ? " (SentencePiece BPE)"
                           : gguf_str_eq(s, "gpt2") ? " (byte-level BPE)"
                                                    : "";
        snprintf(in->tokenizer_kind, sizeof(in->tokenizer_kind), "%.*s%s",
                 (int)(s.len > 32 ? 32 : s.len), s.ptr, what);
    } else {
        snprintf(in->tokenizer_kind, sizeof(in->tokenizer_kind), "%s",
                 gguf_find_kv(m->gguf, "tokenizer.huggingface.json") ? "tokenizer.json (in GGUF)"
                                                                      : "none");
    }
    in->has_chat_template = gguf_find_kv(m->gguf, "tokenizer.chat_template") != NULL;
}

static bool path_exists(const char *dir, const char *name)
{
    char p[4096];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

static void info_from_safetensors(struct model *m, const char *dir)
{
    struct model_file_info *in = &m->info;
    in->n_tensors = (int)safetensors_n_tensors(m->st);
    in->n_files = 1;
    for (size_t i = 0; i < safetensors_n_tensors(m->st); i++) {
        const struct st_tensor *t = safetensors_tensor_at(m->st, i);
        if ((unsigned)t->dtype < DTYPE_COUNT)
            in->n_tensors_by_dtype[t->dtype]++;
        in->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    char p[4096];
    snprintf(p, sizeof(p), "%s/model.safetensors.index.json", dir);
    json_t *idx = json_load_file(p, 0, NULL);
    if (idx) {
        // Count the distinct shard files the weight map points at.
        json_t *map = json_object_get(idx, "weight_map");
        const char *key;
        json_t *val;
        const char *seen[64];
        int n_seen = 0;
        json_object_foreach(map, key, val)
        {
            const char *f = json_string_value(val);
            bool dup = !f;
            for (int i = 0; i < n_seen && !dup; i++)
                dup = !strcmp(seen[i], f);
            if (!dup && n_seen < 64)
                seen[n_seen++] = f;
        }
        in->n_files = n_seen ? n_seen : 1;
        json_decref(idx);
    }
    const char *base = strrchr(dir, '/');
    snprintf(in->name, sizeof(in->name), "%s", base && base[1] ? base + 1 : dir);
    snprintf(in->tokenizer_kind, sizeof(in->tokenizer_kind), "%s",
             path_exists(dir, "tokenizer.json") ? "tokenizer.json" : "none");
    in->has_chat_template = path_exists(dir, "chat_template.jinja");
    snprintf(p, sizeof(p), "%s/tokenizer_config.json", dir);
    json_t *tc = json_load_file(p, 0, NULL);
    if (tc) {
        if (json_object_get(tc, "chat_template"))
            in->has_chat_template = true;
        json_decref(tc);
    }
}

// ---- open ----

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

// Opens a Hugging Face folder (or one .safetensors file and the config.json beside it).
static enum vllmc_status model_open_hf(struct model *m, struct loader *ld, struct err *err)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", m->path);
    if (!is_dir(dir)) {
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof(dir), ".");
    }
    while (strlen(dir) > 1 && dir[strlen(dir) - 1] == '/')
        dir[strlen(dir) - 1] = '\0';
    enum vllmc_status rc = arch_hparams_from_hf(dir, &m->hp, err);
    if (rc)
        return rc;
    struct hf_config c;
    rc = hf_config_load(dir, &c, err);
    if (rc)
        return rc;
    if (c.quantization_config) {
        char doc[4200];
        snprintf(doc, sizeof(doc), "%s/config.json", dir);
        rc = int4_config_parse(c.quantization_config, doc, &ld->int4, err);
        ld->has_int4 = rc == VLLMC_OK;
    }
    hf_config_deinit(&c);
    if (rc)
        return rc;
    rc = safetensors_open(m->path, &m->st, err);
    if (rc)
        return rc;
    info_from_safetensors(m, dir);
    return VLLMC_OK;
}

static enum vllmc_status model_open_gguf(struct model *m, struct err *err)
{
    enum vllmc_status rc = gguf_open(m->path, &m->gguf, err);
    if (rc)
        return rc;
    rc = arch_hparams_from_gguf(m->gguf, m->path, &m->hp, err);
    if (rc)
        return rc;
    if (!m->hp.n_vocab) {
        // Older files carry no <arch>.vocab_size: the tokenizer or the embedding says.
        enum gguf_type type;
        uint64_t n = 0;
        const struct gguf_tensor_info *t = gguf_find_tensor(m->gguf, "token_embd.weight");
        if (gguf_get_arr(m->gguf, "tokenizer.ggml.tokens", &type, &n) && n && n < (1u << 30))
            m->hp.n_vocab = (int)n;
        else if (t && t->ne[1] > 0 && t->ne[1] < (1 << 30))
            m->hp.n_vocab = (int)t->ne[1];
    }
    info_from_gguf(m);
    return VLLMC_OK;
}

enum vllmc_status model_load(const char *path, struct backend *be,
                             const struct model_load_params *params, struct model **out,
                             struct err *err)
{
    struct model_load_params defaults;
    if (!params) {
        model_load_params_default(&defaults);
        params = &defaults;
    }
    *out = NULL;
    if (params->n_tokens_max < 1)
        return err_set(err, VLLMC_ERR_INVALID_ARG, "model: n_tokens_max %d", params->n_tokens_max);
    struct model *m = mem_calloc(1, sizeof(*m));
    struct loader ld = {.m = m, .err = err, .weights_f16 = params->weights_f16};
    enum vllmc_status rc = VLLMC_ERR_NOMEM;
    if (!m || !(m->path = mem_strdup(path))) {
        err_set(err, rc, "%s: out of memory", path);
        goto fail;
    }
    m->backend = be;
    if (params->weights_f16 && backend_location(be) != TENSOR_DEVICE) {
        rc = err_set(err, VLLMC_ERR_UNSUPPORTED,
                     "%s: --dtype float16 is for device backends (cuda); the %s backend "
                     "computes bf16 weights as stored",
                     path, backend_name(be));
        goto fail;
    }
    bool hf = is_dir(path) || ends_with(path, ".safetensors");
    m->info.format = hf ? MODEL_FORMAT_SAFETENSORS : MODEL_FORMAT_GGUF;
    rc = hf ? model_open_hf(m, &ld, err) : model_open_gguf(m, err);
    if (rc)
        goto fail;
    rc = arch_hparams_check(&m->hp, path, err);
    if (rc)
        goto fail;

    rc = VLLMC_ERR_NOMEM;
    m->layers = mem_calloc((size_t)m->hp.n_layers, sizeof(*m->layers));
    ld.n_slots_max = 3 + 14 * m->hp.n_layers;
    ld.slots = mem_calloc((size_t)ld.n_slots_max, sizeof(*ld.slots));
    ld.layer_slots = mem_calloc((size_t)m->hp.n_layers, sizeof(*ld.layer_slots));
    if (!m->layers || !ld.slots || !ld.layer_slots) {
        err_set(err, rc, "%s: out of memory", path);
        goto fail;
    }
    if ((rc = loader_bind_all(&ld)) || (rc = loader_rope_freqs(&ld)))
        goto fail;
    loader_plan_fusion(&ld, params->fuse);
    loader_layout(&ld);
    if ((rc = loader_place(&ld)))
        goto fail;

    m->n_tokens_max = params->n_tokens_max;
    m->scratch_bytes = model_scratch_bytes(&m->hp, m->n_tokens_max, backend_location(be));
    rc = backend_buffer_alloc(be, m->scratch_bytes, &m->scratch);
    if (rc) {
        err_set(err, rc, "%s: cannot allocate %zu bytes of scratch on %s", path, m->scratch_bytes,
                backend_name(be));
        goto fail;
    }
    mem_free(ld.slots);
    mem_free(ld.layer_slots);
    log_debug("loaded %s: %s, %d layers, dim %d, %zu weight bytes, fused q|k|v %s, gate|up %s",
              path, model_arch_name(m->hp.arch), m->hp.n_layers, m->hp.dim, m->info.weight_bytes,
              ld.fused_qkv_any ? "yes" : "no", ld.fused_gu_any ? "yes" : "no");
    *out = m;
    return VLLMC_OK;
fail:
    mem_free(ld.slots);
    mem_free(ld.layer_slots);
    model_free(m);
    return rc;
}

void model_free(struct model *m)
{
    if (!m)
        return;
    if (m->scratch)
        backend_buffer_free(m->backend, m->scratch);
    if (m->device_buf)
        backend_buffer_free(m->backend, m->device_buf);
    for (int i = 0; i < m->n_alts; i++)
        mem_free(m->alts[i]);
    mem_free(m->alts);
    mem_free(m->host_buf);
    mem_free(m->layers);
    safetensors_free(m->st);
    gguf_free(m->gguf);
    mem_free(m->path);
    mem_free(m);
}
