// jansson for the model readers. jansson keeps its own allocator (malloc):
// its lexer writes out of bounds when an allocation fails midway, so it is
// not routed through core/alloc's failure injection; our own copies are.
#include "model/model_json.h"

#include "core/alloc.h"

enum vllmc_status model_json_parse(const char *bytes, size_t n, const char *what, json_t **out,
                                   struct err *err)
{
    json_error_t je;
    *out = json_loadb(bytes, n, JSON_REJECT_DUPLICATES, &je);
    if (*out)
        return VLLMC_OK;
    if (json_error_code(&je) == json_error_out_of_memory)
        return err_set(err, VLLMC_ERR_NOMEM, "%s: out of memory", what);
    return err_set(err, VLLMC_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", what,
                   je.line, je.column, je.text);
}

char *model_json_dump(const json_t *j)
{
    json_malloc_t jmalloc;
    json_free_t jfree;
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    if (!s)
        return NULL;
    char *copy = mem_strdup(s);
    json_get_alloc_funcs(&jmalloc, &jfree);
    jfree(s);
    return copy;
}

const char *model_json_type(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "real";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    case JSON_NULL:
        return "null";
    }
    return "unknown";
}
