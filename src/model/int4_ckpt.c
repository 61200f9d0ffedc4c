// AWQ/GPTQ checkpoints into int4g blocks (see int4_ckpt.h). The packings, as
// the formats' own code writes and reads them:
//
// AWQ (AutoAWQ WQLinear_GEMM.pack, awq/modules/linear/gemm.py; read back by
// vLLM's awq_dequantize_triton, vllm/model_executor/layers/quantization/
// awq_triton.py, and GPTQModel's AwqGEMMQuantLinear): qweight i32 [k, n / 8];
// output column 8 c + AWQ_ORDER[i] of input row r sits in bits 4 i .. 4 i + 3
// of qweight[r][c], AWQ_ORDER = {0, 2, 4, 6, 1, 3, 5, 7}; qzeros i32
// [k / g, n / 8] packs the zero points the same way; scales f16 [k / g, n].
// w[r][j] = (q - z) * s with z and s of group r / g.
//
// GPTQ (AutoGPTQ QuantLinear.pack, auto_gptq/nn_modules/qlinear/; read back
// by vLLM's csrc/quantization/gptq/q_gemm.cu and transformers through
// optimum): qweight i32 [k / 8, n]; input row 8 p + i of column j sits in
// bits 4 i of qweight[p][j] (plain order); qzeros i32 [n_groups, n / 8] with
// column 8 c + i at bits 4 i, stored minus one ("zeros -= 1" when packing,
// "zeros = zeros + 1" after the 4-bit mask when reading: checkpoint format
// gptq v1); scales f16 [n_groups, n]; g_idx i32 [k] names the group of each
// input (act-order checkpoints, desc_act, shuffle it). w[r][j] =
// (q - z) * s with z and s of group g_idx[r].
//
// Act-order layers are stored with their inputs sorted by group, so every
// 32-block has one group; the matmul then reads x through the permutation,
// as exllama's and Marlin's GPTQ kernels do.
#include "model/int4_ckpt.h"

#include <string.h>
#include <strings.h>

#include "backend/cpu/quant/blocks.h"
#include "core/alloc.h"
#include "core/dtype.h"
#include "model/model_json.h"
#include "model/safetensors.h"

// The nibble of column j % 8 in AWQ's order: the inverse of AWQ_ORDER, which
// is AWQ_REVERSE_ORDER {0, 4, 1, 5, 2, 6, 3, 7} in vLLM's and GPTQModel's code.
static const int awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// ---- config ----

enum vllmc_status int4_config_parse(const char *json, const char *doc, struct int4_config *cfg,
                                    struct err *err)
{
    json_t *q = NULL;
    memset(cfg, 0, sizeof *cfg);
    enum vllmc_status rc = model_json_parse(json, strlen(json), doc, &q, err);
    if (rc)
        return rc;
    const char *method = json_string_value(json_object_get(q, "quant_method"));
    const json_t *bits = json_object_get(q, "bits");
    if (!bits)
        bits = json_object_get(q, "w_bit"); // AutoAWQ's own quant_config.json spelling
    const json_t *group = json_object_get(q, "group_size");
    if (!group)
        group = json_object_get(q, "q_group_size");
    const char *version = json_string_value(json_object_get(q, "version"));
    const char *format = json_string_value(json_object_get(q, "checkpoint_format"));
    const json_t *zp = json_object_get(q, "zero_point");
    if (!method) {
        rc = err_set(err, VLLMC_ERR_FORMAT, "%s: quantization_config has no quant_method", doc);
    } else if (strcmp(method, "awq") && strcmp(method, "gptq")) {
        rc = err_set(err, VLLMC_ERR_UNSUPPORTED,
                     "%s: quant_method '%.32s' is not supported (awq, gptq)", doc, method);
    } else if (!json_is_integer(bits) || json_integer_value(bits) != 4) {
        rc = err_set(err, VLLMC_ERR_UNSUPPORTED, "%s: %s with bits %s is not supported (4)", doc,
                     method, json_is_integer(bits) ? "other than 4" : "missing");
    } else if (!json_is_integer(group) ||
               (json_integer_value(group) != -1 &&
                (json_integer_value(group) <= 0 || json_integer_value(group) % 32 ||
                 json_integer_value(group) > (1 << 20)))) {
        rc = err_set(err, VLLMC_ERR_UNSUPPORTED,
                     "%s: %s group_size must be -1 or a positive multiple of 32", doc, method);
    } else if (!strcmp(method, "awq") && version && strcasecmp(version, "gemm")) {
        rc = err_set(err, VLLMC_ERR_UNSUPPORTED, "%s: AWQ version '%.32s' is not supported (gemm)",
                     doc, version);
    } else if (!strcmp(method, "awq") && zp && !json_is_true(zp)) {
        rc = err_set(err, VLLMC_ERR_UNSUPPORTED, "%s: AWQ without zero points is not supported",
                     doc);
    } else if (format && strcmp(format, "gptq") && strcmp(format, "gptq_v2")) {
        rc = err_set(err, VLLMC_ERR_UNSUPPORTED,
                     "%s: checkpoint_format '%.32s' is not supported (gptq, gptq_v2)", doc, format);
    } else {
        cfg->method = strcmp(method, "awq") ? INT4_METHOD_GPTQ : INT4_METHOD_AWQ;
        cfg->bits = 4;
        cfg->group_size = (int)json_integer_value(group);
        cfg->desc_act = json_is_true(json_object_get(q, "desc_act"));
        cfg->sym = json_is_true(json_object_get(q, "sym"));
        cfg->zeros_stored = format && !strcmp(format, "gptq_v2");
    }
    json_decref(q);
    return rc;
}

// ---- checking one layer ----

static int32_t load_i32(const void *base, int64_t i)
{
    int32_t v;
    memcpy(&v, (const char *)base + 4 * (size_t)i, 4);
    return v;
}

static float load_scale(const struct st_tensor *t, int64_t i)
{
    uint16_t h;
    if (t->dtype == DTYPE_F32) {
        float f;
        memcpy(&f, (const char *)t->data + 4 * (size_t)i, 4);
        return f;
    }
    memcpy(&h, (const char *)t->data + 2 * (size_t)i, 2);
    return t->dtype == DTYPE_F16 ? fp16_to_f32(h) : bf16_to_f32(h);
}

static enum vllmc_status want_2d(const struct st_tensor *t, const char *name, const char *what,
                                 enum dtype dtype, int64_t rows, int64_t cols, struct err *err)
{
    if (!t)
        return err_set(err, VLLMC_ERR_FORMAT, "%s.%s is missing", name, what);
    bool dtype_ok = t->dtype == dtype ||
                    (dtype == DTYPE_F16 && (t->dtype == DTYPE_BF16 || t->dtype == DTYPE_F32));
    if (!dtype_ok)
        return err_set(err, VLLMC_ERR_FORMAT, "%s.%s has dtype %s, expected %s", name, what,
                       dtype_name(t->dtype), dtype_name(dtype));
    if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows)
        return err_set(err, VLLMC_ERR_FORMAT,
                       "%s.%s has shape [%lld, %lld], the layer needs [%lld, %lld]", name, what,
                       (long long)t->ne[1], (long long)t->ne[0], (long long)rows, (long long)cols);
    return VLLMC_OK;
}

enum vllmc_status int4_layer_check(const struct int4_config *cfg, const struct int4_layer *ly,
                                   int64_t k, int64_t n, const char *name, bool *needs_perm,
                                   struct err *err)
{
    *needs_perm = false;
    int64_t gs = cfg->group_size < 0 ? k : cfg->group_size;
    if (k % 32 || n % 8 || k % gs)
        return err_set(err, VLLMC_ERR_UNSUPPORTED,
                       "%s: %lld inputs and %lld outputs do not split into 4-bit groups of %lld "
                       "(inputs a multiple of the group size and of 32, outputs of 8)",
                       name, (long long)k, (long long)n, (long long)gs);
    int64_t n_groups = k / gs;
    bool awq = cfg->method == INT4_METHOD_AWQ;
    enum vllmc_status rc;
    if ((rc = want_2d(ly->qweight, name, "qweight", DTYPE_I32, awq ? k : k / 8, awq ? n / 8 : n,
                      err)) ||
        (rc = want_2d(ly->qzeros, name, "qzeros", DTYPE_I32, n_groups, n / 8, err)) ||
        (rc = want_2d(ly->scales, name, "scales", DTYPE_F16, n_groups, n, err)))
        return rc;
    if (awq || !ly->g_idx)
        return VLLMC_OK;
    const struct st_tensor *g = ly->g_idx;
    if (g->dtype != DTYPE_I32 || g->n_dims != 1 || g->ne[0] != k)
        return err_set(err, VLLMC_ERR_FORMAT, "%s.g_idx must be i32 [%lld]", name, (long long)k);
    int64_t *count = mem_calloc((size_t)n_groups, sizeof(*count));
    if (!count)
        return err_set(err, VLLMC_ERR_NOMEM, "%s: out of memory", name);
    for (int64_t i = 0; i < k && !rc; i++) {
        int32_t gi = load_i32(g->data, i);
        if (gi < 0 || gi >= n_groups) {
            rc = err_set(err, VLLMC_ERR_FORMAT, "%s.g_idx[%lld] is %d, outside %lld groups", name,
                         (long long)i, (int)gi, (long long)n_groups);
            break;
        }
        count[gi]++;
        *needs_perm = *needs_perm || gi != i / gs;
    }
    for (int64_t j = 0; j < n_groups && !rc; j++)
        if (count[j] != gs)
            rc = err_set(err, VLLMC_ERR_UNSUPPORTED,
                         "%s.g_idx gives group %lld %lld inputs; every group must have %lld", name,
                         (long long)j, (long long)count[j], (long long)gs);
    mem_free(count);
    return rc;
}

// ---- repacking ----

// The stored column order of an act-order layer: inputs sorted by group,
// stable, so that group j takes stored columns [j gs, (j + 1) gs).
static void gptq_perm(const struct int4_layer *ly, int64_t k, int64_t gs, int32_t *perm)
{
    // One pass over g_idx per group: k * n_groups reads, a few million for
    // the largest layers, and no scratch memory.
    int64_t n_groups = k / gs, pos = 0;
    for (int64_t j = 0; j < n_groups; j++)
        for (int64_t i = 0; i < k; i++)
            if (load_i32(ly->g_idx->data, i) == j)
                perm[pos++] = (int32_t)i;
}

// The scale and zero point of output column j, group g, into blk.
static void block_head(const struct int4_layer *ly, int64_t n, int64_t g, int64_t j, int z,
                       struct block_int4g *blk)
{
    // f16 scales are kept bit for bit; bf16 and f32 ones are rounded to f16.
    if (ly->scales->dtype == DTYPE_F16)
        memcpy(&blk->d, (const char *)ly->scales->data + 2 * (size_t)(g * n + j), 2);
    else
        blk->d = f32_to_fp16(load_scale(ly->scales, g * n + j));
    blk->z = (uint8_t)z;
    blk->pad = 0;
}

static void block_pack(struct block_int4g *blk, const uint8_t *q) // q [32]
{
    for (int l = 0; l < 16; l++)
        blk->qs[l] = (uint8_t)(q[l] | (q[l + 16] << 4));
}

void int4_layer_repack(const struct int4_config *cfg, const struct int4_layer *ly, int64_t k,
                       int64_t n, struct block_int4g *out, int32_t *perm)
{
    const int64_t gs = cfg->group_size < 0 ? k : cfg->group_size, nb = k / 32;
    const bool awq = cfg->method == INT4_METHOD_AWQ;
    const int zero_add = awq || cfg->zeros_stored ? 0 : 1;
    if (perm)
        gptq_perm(ly, k, gs, perm);
    const void *qw = ly->qweight->data, *qz = ly->qzeros->data;
    uint8_t q[32];
    // Block column outer: the 32 input rows one block needs stay in cache
    // while every output row takes its block from them. Each packed word is
    // read once: an AWQ word holds 8 output columns of one input, a GPTQ
    // word 8 inputs of one column.
    for (int64_t b = 0; b < nb; b++) {
        const int64_t g = 32 * b / gs; // stored columns of one block share a group
        if (awq) {
            for (int64_t c = 0; c < n / 8; c++) {
                uint32_t w[32];
                for (int l = 0; l < 32; l++)
                    w[l] = (uint32_t)load_i32(qw, (32 * b + l) * (n / 8) + c);
                const uint32_t zw = (uint32_t)load_i32(qz, g * (n / 8) + c);
                for (int t = 0; t < 8; t++) {
                    const int shift = 4 * awq_nibble[t];
                    struct block_int4g *blk = out + (8 * c + t) * nb + b;
                    block_head(ly, n, g, 8 * c + t, (int)((zw >> shift) & 0xF), blk);
                    for (int l = 0; l < 32; l++)
                        q[l] = (uint8_t)((w[l] >> shift) & 0xF);
                    block_pack(blk, q);
                }
            }
            continue;
        }
        for (int64_t j = 0; j < n; j++) {
            struct block_int4g *blk = out + j * nb + b;
            const uint32_t zw = (uint32_t)load_i32(qz, g * (n / 8) + j / 8);
            block_head(ly, n, g, j, (int)((zw >> (4 * (j % 8))) & 0xF) + zero_add, blk);
            if (perm) {
                for (int l = 0; l < 32; l++) {
                    const int64_t r = perm[32 * b + l]; // input feature
                    const uint32_t word = (uint32_t)load_i32(qw, (r / 8) * n + j);
                    q[l] = (uint8_t)((word >> (4 * (r % 8))) & 0xF);
                }
            } else {
                for (int p = 0; p < 4; p++) {
                    const uint32_t word = (uint32_t)load_i32(qw, (4 * b + p) * n + j);
                    for (int i = 0; i < 8; i++)
                        q[8 * p + i] = (uint8_t)((word >> (4 * i)) & 0xF);
                }
            }
            block_pack(blk, q);
        }
    }
}
