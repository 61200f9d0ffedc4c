// GGUF reader, versions 1-3. Two walks over the header: the first validates
// every count, length and extent against the bytes left and counts what to
// store; the second fills arrays sized exactly from that count, so a hostile
// count never drives an allocation. Values borrow the file bytes.
#include "model/gguf.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "model/file_map.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

struct gguf_file {
    const uint8_t *bytes; // borrowed from the caller, or the mapping below
    size_t n_bytes;
    uint32_t version;
    size_t alignment;   // of tensor offsets and the data section start
    size_t data_offset; // file offset of the data section
    size_t n_kv;
    struct gguf_kv *kvs;       // [n_kv] owned
    size_t *kv_str_base;       // [n_kv] owned: STRING arrays' first index into str_pool
    struct gguf_str *str_pool; // [n_arr_strs] owned: the elements of every STRING array
    size_t n_tensors;
    struct gguf_tensor_info *tensors;         // [n_tensors] owned
    const struct gguf_kv **kv_sorted;         // [n_kv] owned: by key, for lookups
    const struct gguf_tensor_info **t_sorted; // [n_tensors] owned: by name
    struct file_map map;                      // owned mapping (gguf_open), or zeroed
};

// A cursor over the image. pool, when set, receives STRING array elements.
struct reader {
    const uint8_t *p;
    size_t n, pos;
    uint32_t version;
    struct err *err;
    struct gguf_str *pool; // next free pool slot (second walk only)
    size_t n_arr_strs;     // STRING array elements seen so far
};

static const char *const type_names[GGUF_TYPE_COUNT] = {
    "uint8", "int8",   "uint16", "int16",  "uint32", "int32",   "float32",
    "bool",  "string", "array",  "uint64", "int64",  "float64",
};

// Size of a packed scalar of type t; 0 for STRING and ARRAY.
static size_t type_size(enum gguf_type t)
{
    static const uint8_t sizes[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t < GGUF_TYPE_COUNT ? sizes[t] : 0;
}

static uint64_t le_u64(const uint8_t *b, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

// Copies s into buf for an error message: at most 80 bytes, odd bytes as '?'.
static const char *str_show(struct gguf_str s, char buf[96])
{
    size_t n = s.len < 80 ? (size_t)s.len : 80;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        buf[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    strcpy(buf + n, s.len > 80 ? "..." : "");
    return buf;
}

// ---- primitive reads: each checks the bytes left first ----

static enum vllmc_status rd_bytes(struct reader *r, size_t n, const uint8_t **out, const char *what)
{
    if (n > r->n - r->pos)
        return err_set(r->err, VLLMC_ERR_FORMAT,
                       "gguf: truncated file: %s at offset %zu needs %zu bytes, %zu left", what,
                       r->pos, n, r->n - r->pos);
    *out = r->p + r->pos;
    r->pos += n;
    return VLLMC_OK;
}

static enum vllmc_status rd_uint(struct reader *r, size_t n, uint64_t *out, const char *what)
{
    const uint8_t *b = NULL;
    enum vllmc_status rc = rd_bytes(r, n, &b, what);
    if (rc)
        return rc;
    *out = le_u64(b, n);
    return VLLMC_OK;
}

// Counts and lengths are 32-bit in version 1, 64-bit after.
static size_t count_size(const struct reader *r)
{
    return r->version == 1 ? 4 : 8;
}

static enum vllmc_status rd_str(struct reader *r, struct gguf_str *out, const char *what)
{
    uint64_t len = 0;
    enum vllmc_status rc = rd_uint(r, count_size(r), &len, what);
    if (rc)
        return rc;
    if (len > r->n - r->pos)
        return err_set(
            r->err, VLLMC_ERR_FORMAT,
            "gguf: %s at offset %zu: string length %llu past end of file (%zu bytes left)", what,
            r->pos, (unsigned long long)len, r->n - r->pos);
    out->ptr = (const char *)r->p + r->pos;
    out->len = len;
    r->pos += (size_t)len;
    return VLLMC_OK;
}

// ---- metadata values ----

static void decode_scalar(enum gguf_type t, const uint8_t *b, struct gguf_value *v)
{
    uint64_t u = le_u64(b, type_size(t));
    switch (t) {
    case GGUF_TYPE_INT8:
        v->i64 = (int8_t)u;
        break;
    case GGUF_TYPE_INT16:
        v->i64 = (int16_t)u;
        break;
    case GGUF_TYPE_INT32:
        v->i64 = (int32_t)u;
        break;
    case GGUF_TYPE_INT64:
        v->i64 = (int64_t)u;
        break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t w = (uint32_t)u;
        float f;
        memcpy(&f, &w, 4);
        v->f64 = f;
        break;
    }
    case GGUF_TYPE_FLOAT64:
        memcpy(&v->f64, &u, 8);
        break;
    case GGUF_TYPE_BOOL:
        v->u64 = u != 0;
        break;
    default:
        v->u64 = u;
        break;
    }
}

static enum vllmc_status rd_type(struct reader *r, enum gguf_type *out, const char *key)
{
    uint64_t t = 0;
    enum vllmc_status rc = rd_uint(r, 4, &t, "value type");
    if (rc)
        return rc;
    if (t >= GGUF_TYPE_COUNT)
        return err_set(r->err, VLLMC_ERR_FORMAT, "gguf: key '%s' has unknown value type %llu", key,
                       (unsigned long long)t);
    *out = (enum gguf_type)t;
    return VLLMC_OK;
}

static enum vllmc_status rd_array(struct reader *r, struct gguf_value *v, const char *key)
{
    enum gguf_type et = GGUF_TYPE_UINT8;
    uint64_t n = 0;
    enum vllmc_status rc = rd_type(r, &et, key);
    if (!rc)
        rc = rd_uint(r, count_size(r), &n, "array length");
    if (rc)
        return rc;
    if (et == GGUF_TYPE_ARRAY)
        return err_set(r->err, VLLMC_ERR_FORMAT, "gguf: key '%s': nested arrays are not supported",
                       key);
    // Every element takes at least one byte (a string, its length prefix), so
    // the count is bounded by the bytes left before anything is walked.
    size_t min_el = et == GGUF_TYPE_STRING ? count_size(r) : type_size(et);
    if (n > (r->n - r->pos) / min_el)
        return err_set(
            r->err, VLLMC_ERR_FORMAT,
            "gguf: key '%s': array of %llu %s elements past end of file (%zu bytes left)", key,
            (unsigned long long)n, type_names[et], r->n - r->pos);
    v->arr.type = et;
    v->arr.n = n;
    v->arr.data = r->p + r->pos;
    if (et != GGUF_TYPE_STRING) {
        r->pos += (size_t)n * min_el;
        return VLLMC_OK;
    }
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s;
        rc = rd_str(r, &s, "string array element");
        if (rc)
            return rc;
        if (r->pool)
            *r->pool++ = s;
    }
    r->n_arr_strs += (size_t)n;
    return VLLMC_OK;
}

static enum vllmc_status rd_value(struct reader *r, enum gguf_type t, struct gguf_value *v,
                                  const char *key)
{
    const uint8_t *b = NULL;
    enum vllmc_status rc;
    memset(v, 0, sizeof *v);
    v->type = t;
    if (t == GGUF_TYPE_STRING)
        return rd_str(r, &v->str, "string value");
    if (t == GGUF_TYPE_ARRAY)
        return rd_array(r, v, key);
    rc = rd_bytes(r, type_size(t), &b, "scalar value");
    if (!rc)
        decode_scalar(t, b, v);
    return rc;
}

// general.alignment: an unsigned integer, a power of two.
static enum vllmc_status take_alignment(struct reader *r, const struct gguf_value *v, size_t *out)
{
    bool is_uint = v->type == GGUF_TYPE_UINT8 || v->type == GGUF_TYPE_UINT16 ||
                   v->type == GGUF_TYPE_UINT32 || v->type == GGUF_TYPE_UINT64;
    if (!is_uint)
        return err_set(r->err, VLLMC_ERR_FORMAT,
                       "gguf: general.alignment has type %s, expected an unsigned integer",
                       type_names[v->type]);
    if (v->u64 == 0 || (v->u64 & (v->u64 - 1)) || v->u64 > (1u << 30))
        return err_set(r->err, VLLMC_ERR_FORMAT,
                       "gguf: general.alignment %llu is not a power of two up to 2^30",
                       (unsigned long long)v->u64);
    *out = (size_t)v->u64;
    return VLLMC_OK;
}

// ---- tensor infos ----

static enum vllmc_status rd_tensor_info(struct reader *r, size_t alignment,
                                        struct gguf_tensor_info *ti)
{
    char show[96];
    uint64_t n_dims = 0, type = 0, dim = 0;
    memset(ti, 0, sizeof *ti);
    enum vllmc_status rc = rd_str(r, &ti->name, "tensor name");
    if (!rc)
        rc = rd_uint(r, 4, &n_dims, "tensor n_dims");
    if (rc)
        return rc;
    const char *name = str_show(ti->name, show);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return err_set(r->err, VLLMC_ERR_FORMAT, "gguf: tensor '%s' has %llu dimensions (1 to %d)",
                       name, (unsigned long long)n_dims, GGUF_MAX_DIMS);
    ti->n_dims = (int)n_dims;
    // The product of the dims, zeros counted as ones, bounds every partial
    // product (the row count included) even for an empty tensor.
    int64_t n_elems = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        ti->ne[d] = 1;
        if (d >= ti->n_dims)
            continue;
        rc = rd_uint(r, count_size(r), &dim, "tensor dimension");
        if (rc)
            return rc;
        if (dim > (uint64_t)INT64_MAX || (dim && n_elems > INT64_MAX / (int64_t)dim))
            return err_set(r->err, VLLMC_ERR_FORMAT,
                           "gguf: tensor '%s': dimension %d (%llu) overflows the element count",
                           name, d, (unsigned long long)dim);
        ti->ne[d] = (int64_t)dim;
        n_elems *= dim ? (int64_t)dim : 1;
    }
    rc = rd_uint(r, 4, &type, "tensor type");
    if (!rc)
        rc = rd_uint(r, 8, &ti->offset, "tensor offset");
    if (rc)
        return rc;
    const struct dtype_info *info = type < DTYPE_GGML_COUNT ? dtype_info((enum dtype)type) : NULL;
    if (!info)
        return err_set(r->err, VLLMC_ERR_FORMAT, "gguf: tensor '%s' has unknown type %llu", name,
                       (unsigned long long)type);
    ti->dtype = (enum dtype)type;
    if (ti->ne[0] % info->block_size)
        return err_set(r->err, VLLMC_ERR_FORMAT,
                       "gguf: tensor '%s': ne[0] = %lld is not a multiple of the %s block size %d",
                       name, (long long)ti->ne[0], info->name, info->block_size);
    // Rows of ne[0] elements; the element count fits int64, but check the byte
    // count against size_t anyway.
    size_t row_bytes = dtype_row_bytes(ti->dtype, ti->ne[0]);
    uint64_t n_rows = (uint64_t)(ti->ne[1] * ti->ne[2] * ti->ne[3]);
    if (n_rows && row_bytes > SIZE_MAX / n_rows)
        return err_set(r->err, VLLMC_ERR_FORMAT, "gguf: tensor '%s': byte size overflows", name);
    ti->n_bytes = row_bytes * (size_t)n_rows;
    if (ti->offset % alignment)
        return err_set(r->err, VLLMC_ERR_FORMAT,
                       "gguf: tensor '%s': offset %llu is not a multiple of the alignment %zu",
                       name, (unsigned long long)ti->offset, alignment);
    return VLLMC_OK;
}

// ---- the walk ----

// Walks the header from its start. g->kvs, g->tensors and r->pool are NULL on
// the first walk, which only validates and counts.
static enum vllmc_status gguf_walk(struct gguf_file *g, struct reader *r)
{
    char show[96];
    enum vllmc_status rc;
    const uint8_t *magic = NULL;
    uint64_t version = 0, n_tensors = 0, n_kv = 0;
    r->pos = 0;
    rc = rd_bytes(r, 4, &magic, "magic");
    if (rc)
        return rc;
    if (memcmp(magic, "GGUF", 4))
        return err_set(r->err, VLLMC_ERR_FORMAT,
                       "gguf: bad magic %02x %02x %02x %02x (not a GGUF file)", magic[0], magic[1],
                       magic[2], magic[3]);
    rc = rd_uint(r, 4, &version, "version");
    if (rc)
        return rc;
    // A big-endian writer stores version 1-3 as 0x01000000-0x03000000.
    if (version && !(version & 0xffff) && (version >> 24) <= 3)
        return err_set(r->err, VLLMC_ERR_FORMAT,
                       "gguf: big-endian GGUF (version %llu byte-swapped) is not supported",
                       (unsigned long long)(version >> 24));
    if (version < 1 || version > 3)
        return err_set(r->err, VLLMC_ERR_FORMAT, "gguf: unsupported version %llu (1, 2, 3 known)",
                       (unsigned long long)version);
    r->version = (uint32_t)version;
    rc = rd_uint(r, count_size(r), &n_tensors, "tensor count");
    if (!rc)
        rc = rd_uint(r, count_size(r), &n_kv, "metadata count");
    if (rc)
        return rc;
    // The smallest key/value is a length prefix, an empty key, a type and one
    // byte; the smallest tensor info a name prefix, n_dims, one dim, type, offset.
    size_t left = r->n - r->pos, cs = count_size(r);
    size_t min_kv = cs + 4 + 1, min_ti = cs + 4 + cs + 4 + 8;
    if (n_kv > left / min_kv)
        return err_set(r->err, VLLMC_ERR_FORMAT,
                       "gguf: metadata count %llu cannot fit in the %zu bytes left",
                       (unsigned long long)n_kv, left);
    if (n_tensors > (left - (size_t)n_kv * min_kv) / min_ti)
        return err_set(r->err, VLLMC_ERR_FORMAT,
                       "gguf: tensor count %llu cannot fit in the %zu bytes left",
                       (unsigned long long)n_tensors, left);
    g->version = r->version;
    g->n_kv = (size_t)n_kv;
    g->n_tensors = (size_t)n_tensors;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;

    for (size_t i = 0; i < g->n_kv; i++) {
        struct gguf_kv kv;
        enum gguf_type t = GGUF_TYPE_UINT8;
        size_t str_base = r->n_arr_strs;
        rc = rd_str(r, &kv.key, "metadata key");
        if (rc)
            return rc;
        const char *key = str_show(kv.key, show);
        rc = rd_type(r, &t, key);
        if (!rc)
            rc = rd_value(r, t, &kv.value, key);
        if (!rc && gguf_str_eq(kv.key, "general.alignment"))
            rc = take_alignment(r, &kv.value, &g->alignment);
        if (rc)
            return rc;
        if (g->kvs) {
            g->kvs[i] = kv;
            g->kv_str_base[i] = str_base;
        }
    }
    for (size_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor_info ti;
        rc = rd_tensor_info(r, g->alignment, &ti);
        if (rc)
            return rc;
        if (g->tensors)
            g->tensors[i] = ti;
    }
    // The data section starts at the next multiple of the alignment. A file
    // without tensors (a vocabulary-only GGUF) may end before that padding.
    size_t pad = (g->alignment - r->pos % g->alignment) % g->alignment;
    g->data_offset = r->pos + pad;
    if (g->n_tensors && pad > r->n - r->pos)
        return err_set(
            r->err, VLLMC_ERR_FORMAT,
            "gguf: truncated file: data section at offset %zu is past the end (%zu bytes)",
            g->data_offset, r->n);
    return VLLMC_OK;
}

// ---- checks over the whole file ----

static int str_cmp(struct gguf_str a, struct gguf_str b)
{
    size_t n = a.len < b.len ? (size_t)a.len : (size_t)b.len;
    int c = n ? memcmp(a.ptr, b.ptr, n) : 0;
    if (c)
        return c;
    return a.len < b.len ? -1 : a.len > b.len;
}

static int kv_cmp(const void *a, const void *b)
{
    return str_cmp((*(const struct gguf_kv *const *)a)->key,
                   (*(const struct gguf_kv *const *)b)->key);
}

static int tensor_name_cmp(const void *a, const void *b)
{
    return str_cmp((*(const struct gguf_tensor_info *const *)a)->name,
                   (*(const struct gguf_tensor_info *const *)b)->name);
}

static int tensor_offset_cmp(const void *a, const void *b)
{
    const struct gguf_tensor_info *x = *(const struct gguf_tensor_info *const *)a;
    const struct gguf_tensor_info *y = *(const struct gguf_tensor_info *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->n_bytes < y->n_bytes ? -1 : x->n_bytes > y->n_bytes;
}

// Extents inside the file, no overlaps, unique names and keys; fills data pointers.
static enum vllmc_status gguf_check(struct gguf_file *g, struct err *err)
{
    char show[96], show2[96];
    size_t data_bytes = g->n_bytes - (g->n_tensors ? g->data_offset : g->n_bytes);
    for (size_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor_info *t = &g->tensors[i];
        if (t->offset > data_bytes)
            return err_set(
                err, VLLMC_ERR_FORMAT,
                "gguf: tensor '%s' starts past end of file (data offset %zu + %llu > %zu)",
                str_show(t->name, show), g->data_offset, (unsigned long long)t->offset, g->n_bytes);
        if (t->n_bytes > data_bytes - t->offset)
            return err_set(err, VLLMC_ERR_FORMAT,
                           "gguf: tensor '%s' extends past end of file (offset %llu + %zu > %zu)",
                           str_show(t->name, show),
                           (unsigned long long)(g->data_offset + t->offset), t->n_bytes,
                           g->n_bytes);
        t->data = g->bytes + g->data_offset + t->offset;
        g->t_sorted[i] = t;
    }
    qsort(g->t_sorted, g->n_tensors, sizeof *g->t_sorted, tensor_offset_cmp);
    for (size_t i = 1; i < g->n_tensors; i++) {
        const struct gguf_tensor_info *a = g->t_sorted[i - 1], *b = g->t_sorted[i];
        if (a->n_bytes && b->n_bytes && a->offset + a->n_bytes > b->offset)
            return err_set(err, VLLMC_ERR_FORMAT,
                           "gguf: tensors '%s' and '%s' overlap (offsets %llu+%zu and %llu)",
                           str_show(a->name, show), str_show(b->name, show2),
                           (unsigned long long)a->offset, a->n_bytes,
                           (unsigned long long)b->offset);
    }
    qsort(g->t_sorted, g->n_tensors, sizeof *g->t_sorted, tensor_name_cmp);
    for (size_t i = 1; i < g->n_tensors; i++)
        if (!str_cmp(g->t_sorted[i - 1]->name, g->t_sorted[i]->name))
            return err_set(err, VLLMC_ERR_FORMAT, "gguf: duplicate tensor name '%s'",
                           str_show(g->t_sorted[i]->name, show));
    for (size_t i = 0; i < g->n_kv; i++)
        g->kv_sorted[i] = &g->kvs[i];
    qsort(g->kv_sorted, g->n_kv, sizeof *g->kv_sorted, kv_cmp);
    for (size_t i = 1; i < g->n_kv; i++)
        if (!str_cmp(g->kv_sorted[i - 1]->key, g->kv_sorted[i]->key))
            return err_set(err, VLLMC_ERR_FORMAT, "gguf: duplicate metadata key '%s'",
                           str_show(g->kv_sorted[i]->key, show));
    return VLLMC_OK;
}

// ---- public: parse, open, free ----

enum vllmc_status gguf_parse(const void *bytes, size_t n_bytes, struct gguf_file **out,
                             struct err *err)
{
    *out = NULL;
    struct reader r = {.p = bytes, .n = bytes ? n_bytes : 0, .err = err};
    struct gguf_file *g = mem_calloc(1, sizeof *g);
    if (!g)
        return err_set(err, VLLMC_ERR_NOMEM, "gguf: out of memory");
    g->bytes = bytes;
    g->n_bytes = r.n;
    enum vllmc_status rc = gguf_walk(g, &r);
    if (rc)
        goto fail;
    size_t n_strs = r.n_arr_strs;
    g->kvs = mem_calloc(g->n_kv, sizeof *g->kvs);
    g->kv_str_base = mem_calloc(g->n_kv, sizeof *g->kv_str_base);
    g->kv_sorted = mem_calloc(g->n_kv, sizeof *g->kv_sorted);
    g->str_pool = mem_calloc(n_strs, sizeof *g->str_pool);
    g->tensors = mem_calloc(g->n_tensors, sizeof *g->tensors);
    g->t_sorted = mem_calloc(g->n_tensors, sizeof *g->t_sorted);
    if (!g->kvs || !g->kv_str_base || !g->kv_sorted || !g->str_pool || !g->tensors ||
        !g->t_sorted) {
        rc = err_set(err, VLLMC_ERR_NOMEM, "gguf: out of memory for %zu keys and %zu tensors",
                     g->n_kv, g->n_tensors);
        goto fail;
    }
    r.n_arr_strs = 0;
    r.pool = g->str_pool;
    rc = gguf_walk(g, &r);
    VLLMC_ASSERT(rc == VLLMC_OK && r.n_arr_strs == n_strs); // the same bytes walk the same
    rc = gguf_check(g, err);
    if (rc)
        goto fail;
    *out = g;
    return VLLMC_OK;
fail:
    gguf_free(g);
    return rc;
}

enum vllmc_status gguf_open(const char *path, struct gguf_file **out, struct err *err)
{
    *out = NULL;
    struct file_map fm;
    struct err perr = {0};
    enum vllmc_status rc = file_map_open(path, &fm, &perr);
    if (rc)
        return err_set(err, rc, "gguf: %s", perr.msg); // perr names the file
    rc = gguf_parse(fm.addr, fm.n_bytes, out, &perr);
    if (rc) {
        file_map_close(&fm);
        // Name the file: "gguf: PATH: <what is wrong>".
        const char *msg = strncmp(perr.msg, "gguf: ", 6) ? perr.msg : perr.msg + 6;
        return err_set(err, rc, "gguf: %s: %s", path, msg);
    }
    (*out)->map = fm;
    return VLLMC_OK;
}

void gguf_drop_bytes(const struct gguf_file *g, const void *p, size_t n)
{
    file_map_drop(&g->map, p, n);
}

void gguf_free(struct gguf_file *g)
{
    if (!g)
        return;
    file_map_close(&g->map);
    mem_free(g->t_sorted);
    mem_free(g->tensors);
    mem_free(g->str_pool);
    mem_free(g->kv_sorted);
    mem_free(g->kv_str_base);
    mem_free(g->kvs);
    mem_free(g);
}

// ---- public: lookups and typed getters ----

uint32_t gguf_version(const struct gguf_file *g)
{
    return g->version;
}

size_t gguf_alignment(const struct gguf_file *g)
{
    return g->alignment;
}

size_t gguf_n_kv(const struct gguf_file *g)
{
    return g->n_kv;
}

const struct gguf_kv *gguf_kv_at(const struct gguf_file *g, size_t i)
{
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

// Compares a file string with a C string: <0, 0, >0 like strcmp.
static int str_cmp_c(struct gguf_str s, const char *c)
{
    return str_cmp(s, (struct gguf_str){c, strlen(c)});
}

const struct gguf_kv *gguf_find_kv(const struct gguf_file *g, const char *key)
{
    size_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = str_cmp_c(g->kv_sorted[mid]->key, key);
        if (!c)
            return g->kv_sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

size_t gguf_n_tensors(const struct gguf_file *g)
{
    return g->n_tensors;
}

const struct gguf_tensor_info *gguf_tensor_at(const struct gguf_file *g, size_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct gguf_tensor_info *gguf_find_tensor(const struct gguf_file *g, const char *name)
{
    size_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = str_cmp_c(g->t_sorted[mid]->name, name);
        if (!c)
            return g->t_sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static bool type_is_uint(enum gguf_type t)
{
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}

static bool type_is_int(enum gguf_type t)
{
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

// Integer value as u64 / i64 when it fits; shared by scalars and array elements.
static bool value_u64(const struct gguf_value *v, uint64_t *out)
{
    if (type_is_uint(v->type)) {
        *out = v->u64;
        return true;
    }
    if (type_is_int(v->type) && v->i64 >= 0) {
        *out = (uint64_t)v->i64;
        return true;
    }
    return false;
}

static bool value_i64(const struct gguf_value *v, int64_t *out)
{
    if (type_is_int(v->type)) {
        *out = v->i64;
        return true;
    }
    if (type_is_uint(v->type) && v->u64 <= (uint64_t)INT64_MAX) {
        *out = (int64_t)v->u64;
        return true;
    }
    return false;
}

static bool value_f64(const struct gguf_value *v, double *out)
{
    if (v->type == GGUF_TYPE_FLOAT32 || v->type == GGUF_TYPE_FLOAT64) {
        *out = v->f64;
        return true;
    }
    if (type_is_int(v->type)) {
        *out = (double)v->i64;
        return true;
    }
    if (type_is_uint(v->type)) {
        *out = (double)v->u64;
        return true;
    }
    return false;
}

bool gguf_get_u64(const struct gguf_file *g, const char *key, uint64_t *out)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    return kv && value_u64(&kv->value, out);
}

bool gguf_get_i64(const struct gguf_file *g, const char *key, int64_t *out)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    return kv && value_i64(&kv->value, out);
}

bool gguf_get_f64(const struct gguf_file *g, const char *key, double *out)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    return kv && value_f64(&kv->value, out);
}

bool gguf_get_bool(const struct gguf_file *g, const char *key, bool *out)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || kv->value.type != GGUF_TYPE_BOOL)
        return false;
    *out = kv->value.u64 != 0;
    return true;
}

bool gguf_get_str(const struct gguf_file *g, const char *key, struct gguf_str *out)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || kv->value.type != GGUF_TYPE_STRING)
        return false;
    *out = kv->value.str;
    return true;
}

bool gguf_get_arr(const struct gguf_file *g, const char *key, enum gguf_type *elem_type,
                  uint64_t *n)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || kv->value.type != GGUF_TYPE_ARRAY)
        return false;
    *elem_type = kv->value.arr.type;
    *n = kv->value.arr.n;
    return true;
}

// Array element i of a packed (non-string) array as a scalar value.
static bool arr_elem(const struct gguf_file *g, const char *key, uint64_t i, struct gguf_value *v)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || kv->value.type != GGUF_TYPE_ARRAY || i >= kv->value.arr.n)
        return false;
    enum gguf_type et = kv->value.arr.type;
    size_t es = type_size(et);
    if (!es)
        return false;
    memset(v, 0, sizeof *v);
    v->type = et;
    decode_scalar(et, (const uint8_t *)kv->value.arr.data + (size_t)i * es, v);
    return true;
}

bool gguf_arr_str(const struct gguf_file *g, const char *key, uint64_t i, struct gguf_str *out)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || kv->value.type != GGUF_TYPE_ARRAY || kv->value.arr.type != GGUF_TYPE_STRING ||
        i >= kv->value.arr.n)
        return false;
    *out = g->str_pool[g->kv_str_base[kv - g->kvs] + (size_t)i];
    return true;
}

bool gguf_arr_f64(const struct gguf_file *g, const char *key, uint64_t i, double *out)
{
    struct gguf_value v;
    return arr_elem(g, key, i, &v) && value_f64(&v, out);
}

bool gguf_arr_i64(const struct gguf_file *g, const char *key, uint64_t i, int64_t *out)
{
    struct gguf_value v;
    return arr_elem(g, key, i, &v) && value_i64(&v, out);
}

bool gguf_str_eq(struct gguf_str s, const char *cstr)
{
    return !str_cmp_c(s, cstr);
}
