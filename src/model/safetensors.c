// safetensors reader: an 8-byte little-endian header length, a JSON header
// naming each tensor's dtype, shape and [begin, end) byte range in the data
// that follows. Every entry is type-checked and every range checked against
// the data before a pointer is formed. Sharded checkpoints are joined through
// model.safetensors.index.json; each shard is mapped once.
#include "model/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "model/file_map.h"
#include "model/model_json.h"

// Real headers are a few hundred bytes per tensor; 100 MB is far above any
// checkpoint and keeps a hostile length from driving the JSON parser.
#define ST_MAX_HEADER_BYTES (100u << 20)
#define ST_MAX_INDEX_BYTES (100u << 20)

struct st_shard {
    struct file_map map; // owned mapping (safetensors_open), or zeroed
    json_t *header;      // owned: tensor names borrow its keys
};

struct safetensors {
    struct st_tensor *tensors; // [n_tensors] owned
    size_t n_tensors, cap_tensors;
    const struct st_tensor **sorted; // [n_tensors] owned: by name
    struct st_shard *shards;         // [n_shards] owned
    size_t n_shards;
    char *metadata_json; // owned, or NULL
};

static const struct {
    const char *name;
    enum dtype dtype;
} st_dtypes[] = {
    {"F32", DTYPE_F32}, {"F16", DTYPE_F16}, {"BF16", DTYPE_BF16}, {"I8", DTYPE_I8},
    {"U8", DTYPE_U8},   {"I32", DTYPE_I32}, {"I64", DTYPE_I64},
};

static uint64_t le_u64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

// A non-negative JSON integer.
static bool json_count(const json_t *j, uint64_t *out)
{
    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return false;
    *out = (uint64_t)json_integer_value(j);
    return true;
}

// ---- one header entry ----

// Fills t from the entry {"dtype", "shape", "data_offsets"}; begin/end are
// relative to the data, which holds data_bytes.
static enum vllmc_status entry_parse(const char *name, const json_t *v, size_t data_bytes,
                                     struct st_tensor *t, uint64_t *begin, struct err *err)
{
    if (!json_is_object(v))
        return err_set(err, VLLMC_ERR_FORMAT,
                       "safetensors: tensor '%s': entry is not an object (found %s)", name,
                       model_json_type(v));
    const json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
                 *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return err_set(err, VLLMC_ERR_FORMAT, "safetensors: tensor '%s': \"dtype\" %s", name,
                       jd ? "is not a string" : "is missing");
    if (!json_is_array(js))
        return err_set(err, VLLMC_ERR_FORMAT, "safetensors: tensor '%s': \"shape\" %s", name,
                       js ? "is not an array" : "is missing");
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return err_set(err, VLLMC_ERR_FORMAT, "safetensors: tensor '%s': \"data_offsets\" %s", name,
                       jo ? "is not an array of two integers" : "is missing");
    const char *dname = json_string_value(jd);
    size_t i;
    for (i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (!strcmp(st_dtypes[i].name, dname))
            break;
    if (i == sizeof st_dtypes / sizeof st_dtypes[0])
        return err_set(err, VLLMC_ERR_UNSUPPORTED,
                       "safetensors: tensor '%s' has unsupported dtype '%.32s' (F32, F16, BF16, "
                       "I8, U8, I32, I64 are read)",
                       name, dname);
    t->name = name;
    t->dtype = st_dtypes[i].dtype;
    size_t n_dims = json_array_size(js);
    if (n_dims > 4)
        return err_set(err, VLLMC_ERR_UNSUPPORTED,
                       "safetensors: tensor '%s' has %zu dimensions (at most 4 are read)", name,
                       n_dims);
    t->n_dims = (int)n_dims;
    // bound multiplies the dims with zeros counted as ones, so every partial
    // product of ne[] fits int64 even for an empty tensor.
    uint64_t n_elems = 1, bound = 1;
    for (int d = 0; d < 4; d++)
        t->ne[d] = 1;
    for (size_t d = 0; d < n_dims; d++) {
        uint64_t dim;
        if (!json_count(json_array_get(js, d), &dim))
            return err_set(err, VLLMC_ERR_FORMAT,
                           "safetensors: tensor '%s': shape[%zu] is not a non-negative integer",
                           name, d);
        // The JSON shape is outermost first; ne[] is innermost first.
        t->ne[n_dims - 1 - d] = (int64_t)dim;
        if (dim && bound > (uint64_t)INT64_MAX / dim)
            return err_set(err, VLLMC_ERR_FORMAT,
                           "safetensors: tensor '%s': element count overflows", name);
        n_elems *= dim;
        bound *= dim ? dim : 1;
    }
    uint64_t b, e;
    if (!json_count(json_array_get(jo, 0), &b) || !json_count(json_array_get(jo, 1), &e))
        return err_set(err, VLLMC_ERR_FORMAT,
                       "safetensors: tensor '%s': \"data_offsets\" are not non-negative integers",
                       name);
    if (b > e || e > data_bytes)
        return err_set(err, VLLMC_ERR_FORMAT,
                       "safetensors: tensor '%s': data_offsets [%llu, %llu] outside the %zu data "
                       "bytes",
                       name, (unsigned long long)b, (unsigned long long)e, data_bytes);
    size_t es = dtype_info(t->dtype)->type_size;
    if (n_elems > SIZE_MAX / es || e - b != n_elems * es)
        return err_set(err, VLLMC_ERR_FORMAT,
                       "safetensors: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, its "
                       "shape and dtype %s need %llu",
                       name, (unsigned long long)b, (unsigned long long)e,
                       (unsigned long long)(e - b), dname, (unsigned long long)(n_elems * es));
    t->n_bytes = (size_t)(e - b);
    *begin = b;
    return VLLMC_OK;
}

static int by_data(const void *a, const void *b)
{
    const struct st_tensor *x = a, *y = b;
    if (x->data != y->data)
        return (const char *)x->data < (const char *)y->data ? -1 : 1;
    return x->n_bytes < y->n_bytes ? -1 : x->n_bytes > y->n_bytes;
}

// ---- one image ----

// Parses one safetensors image into a new shard of st and appends its tensors,
// in data order. The shard takes ownership of fm (also on failure).
static enum vllmc_status shard_add(struct safetensors *st, const uint8_t *bytes, size_t n,
                                   struct file_map fm, struct err *err)
{
    struct st_shard *sh = mem_realloc(st->shards, (st->n_shards + 1) * sizeof *sh);
    if (!sh) {
        file_map_close(&fm);
        return err_set(err, VLLMC_ERR_NOMEM, "safetensors: out of memory");
    }
    st->shards = sh;
    sh = &st->shards[st->n_shards++];
    memset(sh, 0, sizeof *sh);
    sh->map = fm;
    int shard_id = (int)(st->n_shards - 1);

    if (n < 8)
        return err_set(err, VLLMC_ERR_FORMAT,
                       "safetensors: file of %zu bytes is too short for the header length", n);
    uint64_t hlen = le_u64(bytes);
    if (hlen > n - 8)
        return err_set(err, VLLMC_ERR_FORMAT,
                       "safetensors: header length %llu past end of file (%zu bytes)",
                       (unsigned long long)hlen, n);
    if (hlen > ST_MAX_HEADER_BYTES)
        return err_set(err, VLLMC_ERR_FORMAT,
                       "safetensors: header length %llu exceeds the %u-byte limit",
                       (unsigned long long)hlen, ST_MAX_HEADER_BYTES);
    if (hlen < 2 || bytes[8] != '{')
        return err_set(err, VLLMC_ERR_FORMAT, "safetensors: header is not a JSON object");
    enum vllmc_status rc = model_json_parse((const char *)bytes + 8, (size_t)hlen,
                                            "safetensors header", &sh->header, err);
    if (rc)
        return rc;
    if (!json_is_object(sh->header))
        return err_set(err, VLLMC_ERR_FORMAT, "safetensors: header is not a JSON object (found %s)",
                       model_json_type(sh->header));
    const uint8_t *data = bytes + 8 + hlen;
    size_t data_bytes = n - 8 - (size_t)hlen;

    const json_t *meta = json_object_get(sh->header, "__metadata__");
    size_t n_new = json_object_size(sh->header) - (meta != NULL);
    if (meta) {
        const char *k;
        const json_t *v;
        if (!json_is_object(meta))
            return err_set(err, VLLMC_ERR_FORMAT,
                           "safetensors: \"__metadata__\" is not an object (found %s)",
                           model_json_type(meta));
        json_object_foreach((json_t *)meta, k, v)
        {
            if (!json_is_string(v))
                return err_set(err, VLLMC_ERR_FORMAT,
                               "safetensors: \"__metadata__\" value '%s' is not a string", k);
        }
        if (!st->metadata_json) {
            st->metadata_json = model_json_dump(meta);
            if (!st->metadata_json)
                return err_set(err, VLLMC_ERR_NOMEM, "safetensors: out of memory");
        }
    }
    if (!st->tensors || st->n_tensors + n_new > st->cap_tensors) {
        size_t cap = st->n_tensors + n_new;
        struct st_tensor *t = mem_realloc(st->tensors, (cap ? cap : 1) * sizeof *t);
        if (!t)
            return err_set(err, VLLMC_ERR_NOMEM, "safetensors: out of memory for %zu tensors", cap);
        st->tensors = t;
        st->cap_tensors = cap;
    }
    struct st_tensor *first = st->tensors + st->n_tensors;
    const char *name;
    json_t *v;
    size_t i = 0;
    json_object_foreach(sh->header, name, v)
    {
        if (!strcmp(name, "__metadata__"))
            continue;
        uint64_t begin = 0;
        memset(&first[i], 0, sizeof first[i]);
        rc = entry_parse(name, v, data_bytes, &first[i], &begin, err);
        if (rc)
            return rc;
        first[i].data = data + begin;
        first[i].shard = shard_id;
        i++;
    }
    // Ranges may leave gaps, but no byte belongs to two tensors.
    if (n_new > 1)
        qsort(first, n_new, sizeof *first, by_data);
    for (i = 1; i < n_new; i++) {
        const struct st_tensor *a = &first[i - 1], *b = &first[i];
        if (a->n_bytes && b->n_bytes &&
            (const uint8_t *)a->data + a->n_bytes > (const uint8_t *)b->data)
            return err_set(err, VLLMC_ERR_FORMAT,
                           "safetensors: tensors '%s' and '%s' overlap (data offsets %zu+%zu and "
                           "%zu)",
                           a->name, b->name, (size_t)((const uint8_t *)a->data - data), a->n_bytes,
                           (size_t)((const uint8_t *)b->data - data));
    }
    st->n_tensors += n_new;
    return VLLMC_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const struct st_tensor *const *)a)->name,
                  (*(const struct st_tensor *const *)b)->name);
}

// Builds the name index; a name in two shards is an error.
static enum vllmc_status index_names(struct safetensors *st, struct err *err)
{
    st->sorted = mem_calloc(st->n_tensors, sizeof *st->sorted);
    if (!st->sorted)
        return err_set(err, VLLMC_ERR_NOMEM, "safetensors: out of memory");
    for (size_t i = 0; i < st->n_tensors; i++)
        st->sorted[i] = &st->tensors[i];
    if (st->n_tensors > 1)
        qsort(st->sorted, st->n_tensors, sizeof *st->sorted, by_name);
    for (size_t i = 1; i < st->n_tensors; i++)
        if (!strcmp(st->sorted[i - 1]->name, st->sorted[i]->name))
            return err_set(err, VLLMC_ERR_FORMAT, "safetensors: tensor '%s' appears twice",
                           st->sorted[i]->name);
    return VLLMC_OK;
}

static struct safetensors *st_create(void)
{
    return mem_calloc(1, sizeof(struct safetensors));
}

enum vllmc_status safetensors_parse(const void *bytes, size_t n_bytes, struct safetensors **out,
                                    struct err *err)
{
    *out = NULL;
    struct safetensors *st = st_create();
    if (!st)
        return err_set(err, VLLMC_ERR_NOMEM, "safetensors: out of memory");
    struct file_map none = {0};
    enum vllmc_status rc =
        shard_add(st, bytes ? bytes : (const void *)"", bytes ? n_bytes : 0, none, err);
    if (!rc)
        rc = index_names(st, err);
    if (rc) {
        safetensors_free(st);
        return rc;
    }
    *out = st;
    return VLLMC_OK;
}

// ---- files and folders ----

// Maps path and adds it as a shard; errors name the file.
static enum vllmc_status open_file(struct safetensors *st, const char *path, struct err *err)
{
    struct file_map fm;
    struct err e = {0};
    enum vllmc_status rc = file_map_open(path, &fm, &e);
    if (rc)
        return err_set(err, rc, "safetensors: %s", e.msg);
    rc = shard_add(st, fm.addr, fm.n_bytes, fm, &e);
    if (rc) {
        const char *msg = strncmp(e.msg, "safetensors: ", 13) ? e.msg : e.msg + 13;
        return err_set(err, rc, "safetensors: %s: %s", path, msg);
    }
    return VLLMC_OK;
}

static enum vllmc_status path_join(char *buf, size_t cap, const char *dir, const char *file,
                                   struct err *err)
{
    int n = snprintf(buf, cap, "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= cap)
        return err_set(err, VLLMC_ERR_INVALID_ARG, "safetensors: path too long: %s/%s", dir, file);
    return VLLMC_OK;
}

// A shard named in an index is a plain file name inside the model folder.
static bool shard_name_ok(const char *f)
{
    return f[0] && !strchr(f, '/') && strcmp(f, ".") && strcmp(f, "..");
}

// Opens every shard named in the index's weight_map once, then checks that
// each listed tensor is in the shard the index names.
static enum vllmc_status open_index(struct safetensors *st, const char *dir, const char *idx_path,
                                    struct err *err)
{
    struct file_map fm;
    struct err e = {0};
    json_t *root = NULL;
    const char **names = NULL; // [n_shards] borrowed from root: each shard's file name
    char path[4096];
    enum vllmc_status rc = file_map_open(idx_path, &fm, &e);
    if (rc)
        return err_set(err, rc, "safetensors: %s", e.msg);
    if (fm.n_bytes > ST_MAX_INDEX_BYTES)
        rc = err_set(err, VLLMC_ERR_FORMAT, "safetensors: %s: index larger than %u bytes", idx_path,
                     ST_MAX_INDEX_BYTES);
    else
        rc = model_json_parse(fm.addr, fm.n_bytes, idx_path, &root, err);
    file_map_close(&fm);
    if (rc)
        goto done;
    const json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        rc = err_set(err, VLLMC_ERR_FORMAT, "safetensors: %s: no \"weight_map\" object", idx_path);
        goto done;
    }
    names = mem_calloc(json_object_size(wm), sizeof *names);
    if (!names) {
        rc = err_set(err, VLLMC_ERR_NOMEM, "safetensors: out of memory");
        goto done;
    }
    const char *tname;
    json_t *jf;
    json_object_foreach((json_t *)wm, tname, jf)
    {
        const char *f = json_string_value(jf);
        if (!f || !shard_name_ok(f)) {
            rc = err_set(err, VLLMC_ERR_FORMAT,
                         "safetensors: %s: weight_map entry '%s' is not a shard file name",
                         idx_path, tname);
            goto done;
        }
        size_t k = 0;
        while (k < st->n_shards && strcmp(names[k], f))
            k++;
        if (k < st->n_shards)
            continue;
        rc = path_join(path, sizeof path, dir, f, err);
        if (!rc)
            rc = open_file(st, path, err);
        if (rc)
            goto done;
        names[st->n_shards - 1] = f;
    }
    rc = index_names(st, err);
    if (rc)
        goto done;
    json_object_foreach((json_t *)wm, tname, jf)
    {
        const struct st_tensor *t = safetensors_find(st, tname);
        const char *f = json_string_value(jf);
        if (!t) {
            rc = err_set(err, VLLMC_ERR_FORMAT,
                         "safetensors: tensor '%s' listed in %s is missing from shard %s", tname,
                         idx_path, f);
            goto done;
        }
        if (strcmp(names[t->shard], f)) {
            rc = err_set(err, VLLMC_ERR_FORMAT,
                         "safetensors: tensor '%s' is in shard %s, but %s lists it in %s", tname,
                         names[t->shard], idx_path, f);
            goto done;
        }
    }
done:
    mem_free(names);
    json_decref(root);
    return rc;
}

enum vllmc_status safetensors_open(const char *path, struct safetensors **out, struct err *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb)) {
        int e = errno;
        return err_set(err, e == ENOENT ? VLLMC_ERR_NOT_FOUND : VLLMC_ERR_IO, "safetensors: %s: %s",
                       path, strerror(e));
    }
    struct safetensors *st = st_create();
    if (!st)
        return err_set(err, VLLMC_ERR_NOMEM, "safetensors: out of memory");
    enum vllmc_status rc;
    if (S_ISDIR(sb.st_mode)) {
        char idx[4096], single[4096];
        rc = path_join(idx, sizeof idx, path, "model.safetensors.index.json", err);
        if (!rc)
            rc = path_join(single, sizeof single, path, "model.safetensors", err);
        // transformers' order: the single file first, then the index.
        if (!rc && !stat(single, &sb)) {
            rc = open_file(st, single, err);
            if (!rc)
                rc = index_names(st, err);
        } else if (!rc && !stat(idx, &sb)) {
            rc = open_index(st, path, idx, err);
        } else if (!rc) {
            rc = err_set(err, VLLMC_ERR_NOT_FOUND,
                         "safetensors: %s: no model.safetensors or model.safetensors.index.json",
                         path);
        }
    } else {
        rc = open_file(st, path, err);
        if (!rc)
            rc = index_names(st, err);
    }
    if (rc) {
        safetensors_free(st);
        return rc;
    }
    *out = st;
    return VLLMC_OK;
}

void safetensors_free(struct safetensors *st)
{
    if (!st)
        return;
    for (size_t i = st->n_shards; i-- > 0;) {
        json_decref(st->shards[i].header);
        file_map_close(&st->shards[i].map);
    }
    mem_free(st->shards);
    mem_free(st->metadata_json);
    mem_free(st->sorted);
    mem_free(st->tensors);
    mem_free(st);
}

// ---- lookups ----

size_t safetensors_n_tensors(const struct safetensors *st)
{
    return st->n_tensors;
}

const struct st_tensor *safetensors_tensor_at(const struct safetensors *st, size_t i)
{
    return i < st->n_tensors ? &st->tensors[i] : NULL;
}

const struct st_tensor *safetensors_find(const struct safetensors *st, const char *name)
{
    size_t lo = 0, hi = st->sorted ? st->n_tensors : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->sorted[mid]->name, name);
        if (!c)
            return st->sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *safetensors_metadata_json(const struct safetensors *st)
{
    return st->metadata_json;
}
