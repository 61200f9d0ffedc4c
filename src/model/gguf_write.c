// GGUF v3 writer. Each metadata entry is kept serialized (key, type, value)
// in its own buffer, so copying from a parsed file and overriding keys are
// the same operation; the file is written header first, data streamed after.
#include "model/gguf_write.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"

#define GGUF_MAGIC 0x46554747u // "GGUF" little-endian
#define GGUF_WRITE_VERSION 3
#define GGUF_WRITE_ALIGNMENT 32

struct gw_kv {
    char *key;      // owned
    uint8_t *bytes; // owned: type (u32) and value, serialized
    size_t n_bytes;
};

struct gw_tensor {
    char *name; // owned
    enum dtype dtype;
    int n_dims;
    int64_t ne[4];
    size_t n_bytes;
    uint64_t offset; // in the data section
};

struct gguf_writer {
    struct gw_kv *kvs; // owned [n_kv]
    size_t n_kv, cap_kv;
    struct gw_tensor *tensors; // owned [n_tensors]
    size_t n_tensors, cap_tensors;
    uint64_t data_bytes; // data section size so far
    FILE *f;             // owned while open
    size_t next_tensor;  // the next tensor gguf_writer_write_tensor expects
    size_t written;      // bytes of that tensor written so far (streamed in parts)
    struct err err;
};

// A growable byte buffer for one serialized value.
struct gw_buf {
    uint8_t *p;
    size_t n, cap;
    bool failed;
};

static void buf_put(struct gw_buf *b, const void *data, size_t n)
{
    if (b->failed)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *p = mem_realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void buf_u32(struct gw_buf *b, uint32_t v) { buf_put(b, &v, 4); }
static void buf_u64(struct gw_buf *b, uint64_t v) { buf_put(b, &v, 8); }

static void buf_str(struct gw_buf *b, const char *s, uint64_t len)
{
    buf_u64(b, len);
    buf_put(b, s, (size_t)len);
}

static size_t scalar_size(enum gguf_type t)
{
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

// A scalar value in its own width (the reader widened it).
static void buf_scalar(struct gw_buf *b, const struct gguf_value *v)
{
    switch (v->type) {
    case GGUF_TYPE_FLOAT32: {
        float f = (float)v->f64;
        buf_put(b, &f, 4);
        break;
    }
    case GGUF_TYPE_FLOAT64: buf_put(b, &v->f64, 8); break;
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        buf_put(b, &v->i64, scalar_size(v->type)); // little-endian: the low bytes
        break;
    default: buf_put(b, &v->u64, scalar_size(v->type)); break;
    }
}

static enum vllmc_status kv_put(struct gguf_writer *w, const char *key, struct gw_buf *b)
{
    if (b->failed) {
        mem_free(b->p);
        return err_set(&w->err, VLLMC_ERR_NOMEM, "gguf write: out of memory for key %s", key);
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (!strcmp(w->kvs[i].key, key)) {
            mem_free(w->kvs[i].bytes);
            w->kvs[i].bytes = b->p;
            w->kvs[i].n_bytes = b->n;
            return VLLMC_OK;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        struct gw_kv *kvs = mem_realloc(w->kvs, cap * sizeof *kvs);
        if (!kvs)
            goto nomem;
        w->kvs = kvs;
        w->cap_kv = cap;
    }
    char *k = mem_strdup(key);
    if (!k)
        goto nomem;
    w->kvs[w->n_kv++] = (struct gw_kv){.key = k, .bytes = b->p, .n_bytes = b->n};
    return VLLMC_OK;
nomem:
    mem_free(b->p);
    return err_set(&w->err, VLLMC_ERR_NOMEM, "gguf write: out of memory for key %s", key);
}

enum vllmc_status gguf_writer_create(struct gguf_writer **out, struct err *err)
{
    *out = mem_calloc(1, sizeof **out);
    if (!*out)
        return err_set(err, VLLMC_ERR_NOMEM, "gguf write: out of memory");
    return VLLMC_OK;
}

void gguf_writer_free(struct gguf_writer *w)
{
    if (!w)
        return;
    if (w->f)
        fclose(w->f);
    for (size_t i = 0; i < w->n_kv; i++) {
        mem_free(w->kvs[i].key);
        mem_free(w->kvs[i].bytes);
    }
    mem_free(w->kvs);
    for (size_t i = 0; i < w->n_tensors; i++)
        mem_free(w->tensors[i].name);
    mem_free(w->tensors);
    mem_free(w);
}

const struct err *gguf_writer_err(const struct gguf_writer *w)
{
    return &w->err;
}

enum vllmc_status gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_file *src,
                                      const struct gguf_kv *kv)
{
    char key[256];
    if (kv->key.len >= sizeof key)
        return err_set(&w->err, VLLMC_ERR_INVALID_ARG, "gguf write: key longer than 255 bytes");
    memcpy(key, kv->key.ptr, (size_t)kv->key.len);
    key[kv->key.len] = 0;
    struct gw_buf b = {0};
    const struct gguf_value *v = &kv->value;
    buf_u32(&b, (uint32_t)v->type);
    if (v->type == GGUF_TYPE_STRING) {
        buf_str(&b, v->str.ptr, v->str.len);
    } else if (v->type == GGUF_TYPE_ARRAY) {
        buf_u32(&b, (uint32_t)v->arr.type);
        buf_u64(&b, v->arr.n);
        if (v->arr.type == GGUF_TYPE_STRING) {
            for (uint64_t i = 0; i < v->arr.n; i++) {
                struct gguf_str s;
                if (!gguf_arr_str(src, key, i, &s)) {
                    mem_free(b.p);
                    return err_set(&w->err, VLLMC_ERR_FORMAT, "gguf write: %s[%llu] unreadable",
                                   key, (unsigned long long)i);
                }
                buf_str(&b, s.ptr, s.len);
            }
        } else {
            // Packed elements, as in the source file (validated by the reader).
            buf_put(&b, v->arr.data, (size_t)v->arr.n * scalar_size(v->arr.type));
        }
    } else {
        buf_scalar(&b, v);
    }
    return kv_put(w, key, &b);
}

enum vllmc_status gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
    struct gw_buf b = {0};
    buf_u32(&b, GGUF_TYPE_UINT32);
    buf_u32(&b, v);
    return kv_put(w, key, &b);
}

enum vllmc_status gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v)
{
    struct gw_buf b = {0};
    buf_u32(&b, GGUF_TYPE_FLOAT32);
    buf_put(&b, &v, 4);
    return kv_put(w, key, &b);
}

enum vllmc_status gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v)
{
    struct gw_buf b = {0};
    uint8_t byte = v;
    buf_u32(&b, GGUF_TYPE_BOOL);
    buf_put(&b, &byte, 1);
    return kv_put(w, key, &b);
}

enum vllmc_status gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type elem,
                                      const void *data, uint64_t n)
{
    size_t size = scalar_size(elem);
    if (!size)
        return err_set(&w->err, VLLMC_ERR_INVALID_ARG,
                       "gguf write: %s: array elements of type %d are not scalars", key, (int)elem);
    struct gw_buf b = {0};
    buf_u32(&b, GGUF_TYPE_ARRAY);
    buf_u32(&b, (uint32_t)elem);
    buf_u64(&b, n);
    buf_put(&b, data, (size_t)n * size);
    return kv_put(w, key, &b);
}

enum vllmc_status gguf_writer_set_arr_str(struct gguf_writer *w, const char *key,
                                          const struct gguf_str *strs, uint64_t n)
{
    struct gw_buf b = {0};
    buf_u32(&b, GGUF_TYPE_ARRAY);
    buf_u32(&b, GGUF_TYPE_STRING);
    buf_u64(&b, n);
    for (uint64_t i = 0; i < n; i++)
        buf_str(&b, strs[i].ptr, strs[i].len);
    return kv_put(w, key, &b);
}

enum vllmc_status gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v)
{
    struct gw_buf b = {0};
    buf_u32(&b, GGUF_TYPE_STRING);
    buf_str(&b, v, strlen(v));
    return kv_put(w, key, &b);
}

enum vllmc_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name,
                                         enum dtype dtype, int n_dims, const int64_t *ne)
{
    if (w->f)
        return err_set(&w->err, VLLMC_ERR_INVALID_ARG, "gguf write: %s added after open", name);
    if (n_dims < 1 || n_dims > 4)
        return err_set(&w->err, VLLMC_ERR_INVALID_ARG, "gguf write: %s has %d dims", name, n_dims);
    size_t row = dtype_row_bytes(dtype, ne[0]);
    if (!row && ne[0])
        return err_set(&w->err, VLLMC_ERR_INVALID_ARG,
                       "gguf write: %s: row of %lld is not a multiple of the %s block", name,
                       (long long)ne[0], dtype_name(dtype));
    struct gw_tensor t = {.dtype = dtype, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    size_t rows = 1;
    for (int d = 0; d < n_dims; d++) {
        t.ne[d] = ne[d];
        if (d)
            rows *= (size_t)ne[d];
    }
    t.n_bytes = row * rows;
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        struct gw_tensor *ts = mem_realloc(w->tensors, cap * sizeof *ts);
        if (!ts)
            return err_set(&w->err, VLLMC_ERR_NOMEM, "gguf write: out of memory");
        w->tensors = ts;
        w->cap_tensors = cap;
    }
    t.name = mem_strdup(name);
    if (!t.name)
        return err_set(&w->err, VLLMC_ERR_NOMEM, "gguf write: out of memory");
    t.offset = w->data_bytes;
    w->data_bytes += (t.n_bytes + GGUF_WRITE_ALIGNMENT - 1) / GGUF_WRITE_ALIGNMENT *
                     GGUF_WRITE_ALIGNMENT;
    w->tensors[w->n_tensors++] = t;
    return VLLMC_OK;
}

size_t gguf_writer_tensor_bytes(const struct gguf_writer *w, size_t i)
{
    return i < w->n_tensors ? w->tensors[i].n_bytes : 0;
}

static enum vllmc_status write_bytes(struct gguf_writer *w, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, w->f) != n)
        return err_set(&w->err, VLLMC_ERR_IO, "gguf write: write failed (disk full?)");
    return VLLMC_OK;
}

static enum vllmc_status write_padding(struct gguf_writer *w, uint64_t pos)
{
    static const uint8_t zeros[GGUF_WRITE_ALIGNMENT];
    size_t pad = (size_t)((GGUF_WRITE_ALIGNMENT - pos % GGUF_WRITE_ALIGNMENT) %
                          GGUF_WRITE_ALIGNMENT);
    return write_bytes(w, zeros, pad);
}

enum vllmc_status gguf_writer_open(struct gguf_writer *w, const char *path)
{
    // The data section starts aligned, so no alignment key is needed (32 is
    // the default); a copied general.alignment would not match our offsets.
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kvs[i].key, "general.alignment"))
            return err_set(&w->err, VLLMC_ERR_INVALID_ARG,
                           "gguf write: general.alignment must not be copied");
    struct gw_buf h = {0};
    buf_u32(&h, GGUF_MAGIC);
    buf_u32(&h, GGUF_WRITE_VERSION);
    buf_u64(&h, w->n_tensors);
    buf_u64(&h, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        buf_str(&h, w->kvs[i].key, strlen(w->kvs[i].key));
        buf_put(&h, w->kvs[i].bytes, w->kvs[i].n_bytes);
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        const struct gw_tensor *t = &w->tensors[i];
        buf_str(&h, t->name, strlen(t->name));
        buf_u32(&h, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++)
            buf_u64(&h, (uint64_t)t->ne[d]);
        buf_u32(&h, (uint32_t)t->dtype);
        buf_u64(&h, t->offset);
    }
    if (h.failed)
        return err_set(&w->err, VLLMC_ERR_NOMEM, "gguf write: out of memory for the header");
    w->f = fopen(path, "wb");
    enum vllmc_status rc = VLLMC_OK;
    if (!w->f)
        rc = err_set(&w->err, VLLMC_ERR_IO, "gguf write: cannot create %s", path);
    if (!rc)
        rc = write_bytes(w, h.p, h.n);
    if (!rc)
        rc = write_padding(w, h.n);
    mem_free(h.p);
    w->next_tensor = 0;
    w->written = 0;
    return rc;
}

enum vllmc_status gguf_writer_write_tensor_part(struct gguf_writer *w, size_t i, const void *data,
                                                size_t n_bytes)
{
    if (!w->f || i != w->next_tensor || i >= w->n_tensors)
        return err_set(&w->err, VLLMC_ERR_INVALID_ARG,
                       "gguf write: tensor %zu written out of order", i);
    const struct gw_tensor *t = &w->tensors[i];
    if (n_bytes > t->n_bytes - w->written)
        return err_set(&w->err, VLLMC_ERR_INVALID_ARG,
                       "gguf write: tensor %s has %zu bytes, %zu given", t->name, t->n_bytes,
                       w->written + n_bytes);
    enum vllmc_status rc = write_bytes(w, data, n_bytes);
    if (rc)
        return rc;
    w->written += n_bytes;
    if (w->written == t->n_bytes) {
        rc = write_padding(w, t->n_bytes);
        if (!rc) {
            w->next_tensor++;
            w->written = 0;
        }
    }
    return rc;
}

enum vllmc_status gguf_writer_write_tensor(struct gguf_writer *w, size_t i, const void *data,
                                           size_t n_bytes)
{
    if (w->f && i == w->next_tensor && i < w->n_tensors &&
        (w->written || n_bytes != w->tensors[i].n_bytes))
        return err_set(&w->err, VLLMC_ERR_INVALID_ARG,
                       "gguf write: tensor %s has %zu bytes, %zu given", w->tensors[i].name,
                       w->tensors[i].n_bytes, n_bytes);
    return gguf_writer_write_tensor_part(w, i, data, n_bytes);
}

enum vllmc_status gguf_writer_close(struct gguf_writer *w)
{
    if (!w->f)
        return err_set(&w->err, VLLMC_ERR_INVALID_ARG, "gguf write: not open");
    enum vllmc_status rc = VLLMC_OK;
    if (w->next_tensor != w->n_tensors)
        rc = err_set(&w->err, VLLMC_ERR_INVALID_ARG, "gguf write: %zu of %zu tensors written",
                     w->next_tensor, w->n_tensors);
    if (fclose(w->f) && !rc)
        rc = err_set(&w->err, VLLMC_ERR_IO, "gguf write: close failed (disk full?)");
    w->f = NULL;
    return rc;
}
