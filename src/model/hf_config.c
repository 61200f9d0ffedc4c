// config.json and generation_config.json readers. Each key is read by a typed
// getter that treats absent and null alike and names the key and the JSON
// type it found when the type is wrong.
#include "model/hf_config.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "model/file_map.h"
#include "model/model_json.h"

#define HF_MAX_JSON_BYTES (16u << 20) // config files are a few kilobytes

// ---- typed getters: absent or null leaves *present false and *out alone ----

static enum vllmc_status get_int(const json_t *o, const char *key, const char *doc, int64_t min,
                                 int64_t *out, bool *present, struct err *err)
{
    const json_t *v = json_object_get(o, key);
    if (present)
        *present = false;
    if (!v || json_is_null(v))
        return VLLMC_OK;
    if (!json_is_integer(v))
        return err_set(err, VLLMC_ERR_FORMAT, "%s: \"%s\" must be an integer (found %s)", doc, key,
                       model_json_type(v));
    if (json_integer_value(v) < min)
        return err_set(err, VLLMC_ERR_FORMAT, "%s: \"%s\" is %lld, below %lld", doc, key,
                       (long long)json_integer_value(v), (long long)min);
    *out = json_integer_value(v);
    if (present)
        *present = true;
    return VLLMC_OK;
}

static enum vllmc_status get_num(const json_t *o, const char *key, const char *doc, double *out,
                                 bool *present, struct err *err)
{
    const json_t *v = json_object_get(o, key);
    if (present)
        *present = false;
    if (!v || json_is_null(v))
        return VLLMC_OK;
    if (!json_is_number(v))
        return err_set(err, VLLMC_ERR_FORMAT, "%s: \"%s\" must be a number (found %s)", doc, key,
                       model_json_type(v));
    *out = json_number_value(v);
    if (present)
        *present = true;
    return VLLMC_OK;
}

static enum vllmc_status get_bool(const json_t *o, const char *key, const char *doc, bool *out,
                                  bool *present, struct err *err)
{
    const json_t *v = json_object_get(o, key);
    if (present)
        *present = false;
    if (!v || json_is_null(v))
        return VLLMC_OK;
    if (!json_is_boolean(v))
        return err_set(err, VLLMC_ERR_FORMAT, "%s: \"%s\" must be true or false (found %s)", doc,
                       key, model_json_type(v));
    *out = json_is_true(v);
    if (present)
        *present = true;
    return VLLMC_OK;
}

// Copies a string value into buf[cap]; longer strings are an error.
static enum vllmc_status get_str(const json_t *o, const char *key, const char *doc, char *buf,
                                 size_t cap, struct err *err)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return VLLMC_OK;
    if (!json_is_string(v))
        return err_set(err, VLLMC_ERR_FORMAT, "%s: \"%s\" must be a string (found %s)", doc, key,
                       model_json_type(v));
    if (json_string_length(v) >= cap)
        return err_set(err, VLLMC_ERR_FORMAT, "%s: \"%s\" is longer than %zu bytes", doc, key,
                       cap - 1);
    memcpy(buf, json_string_value(v), json_string_length(v) + 1);
    return VLLMC_OK;
}

// A token id or a list of them (eos_token_id).
static enum vllmc_status get_ids(const json_t *o, const char *key, const char *doc, int64_t *ids,
                                 int *n, struct err *err)
{
    const json_t *v = json_object_get(o, key);
    *n = 0;
    if (!v || json_is_null(v))
        return VLLMC_OK;
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        ids[(*n)++] = json_integer_value(v);
        return VLLMC_OK;
    }
    if (!json_is_array(v))
        return err_set(err, VLLMC_ERR_FORMAT,
                       "%s: \"%s\" must be a token id or a list of them (found %s)", doc, key,
                       model_json_type(v));
    if (json_array_size(v) > HF_MAX_EOS)
        return err_set(err, VLLMC_ERR_FORMAT, "%s: \"%s\" lists %zu ids, more than %d", doc, key,
                       json_array_size(v), HF_MAX_EOS);
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return err_set(err, VLLMC_ERR_FORMAT, "%s: \"%s\"[%zu] is not a token id", doc, key, i);
        ids[(*n)++] = json_integer_value(e);
    }
    return VLLMC_OK;
}

// ---- config.json ----

static enum hf_rope_scaling_type rope_type_from_name(const char *s)
{
    if (!strcmp(s, "default") || !s[0])
        return HF_ROPE_SCALING_NONE;
    if (!strcmp(s, "linear"))
        return HF_ROPE_SCALING_LINEAR;
    if (!strcmp(s, "llama3"))
        return HF_ROPE_SCALING_LLAMA3;
    if (!strcmp(s, "dynamic"))
        return HF_ROPE_SCALING_DYNAMIC;
    if (!strcmp(s, "yarn"))
        return HF_ROPE_SCALING_YARN;
    return HF_ROPE_SCALING_OTHER;
}

// rope_scaling, or transformers' newer rope_parameters (which may also hold
// rope_theta): {"rope_type" (older files: "type"), "factor", ...}.
static enum vllmc_status parse_rope(const json_t *root, const char *key, const char *doc,
                                    struct hf_config *c, struct err *err)
{
    const json_t *r = json_object_get(root, key);
    if (!r || json_is_null(r))
        return VLLMC_OK;
    if (!json_is_object(r))
        return err_set(err, VLLMC_ERR_FORMAT, "%s: \"%s\" must be an object (found %s)", doc, key,
                       model_json_type(r));
    const char *type_key = json_object_get(r, "rope_type") ? "rope_type" : "type";
    if (!json_is_string(json_object_get(r, type_key)))
        return err_set(err, VLLMC_ERR_FORMAT, "%s: \"%s\" needs a \"rope_type\" string", doc, key);
    struct hf_rope_scaling *s = &c->rope_scaling;
    memset(s, 0, sizeof *s);
    enum vllmc_status rc = get_str(r, type_key, doc, s->type_name, sizeof s->type_name, err);
    if (!rc)
        rc = get_num(r, "factor", doc, &s->factor, NULL, err);
    if (!rc)
        rc = get_num(r, "low_freq_factor", doc, &s->low_freq_factor, NULL, err);
    if (!rc)
        rc = get_num(r, "high_freq_factor", doc, &s->high_freq_factor, NULL, err);
    if (!rc)
        rc = get_int(r, "original_max_position_embeddings", doc, 0,
                     &s->original_max_position_embeddings, NULL, err);
    if (!rc && !json_object_get(root, "rope_theta"))
        rc = get_num(r, "rope_theta", doc, &c->rope_theta, NULL, err);
    if (rc)
        return rc;
    s->type = rope_type_from_name(s->type_name);
    return VLLMC_OK;
}

static enum vllmc_status parse_dtype(const json_t *root, const char *doc, struct hf_config *c,
                                     struct err *err)
{
    char name[32] = "";
    const char *key = json_object_get(root, "torch_dtype") ? "torch_dtype" : "dtype";
    enum vllmc_status rc = get_str(root, key, doc, name, sizeof name, err);
    if (rc)
        return rc;
    static const struct {
        const char *name;
        enum dtype dtype;
    } names[] = {{"float32", DTYPE_F32}, {"float16", DTYPE_F16}, {"bfloat16", DTYPE_BF16}};
    // Others ("auto", float8 variants) leave has_torch_dtype false; the weights' own
    // dtypes decide then.
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!strcmp(name, names[i].name)) {
            c->has_torch_dtype = true;
            c->torch_dtype = names[i].dtype;
        }
    }
    return VLLMC_OK;
}

static enum vllmc_status parse_architectures(const json_t *root, const char *doc,
                                             struct hf_config *c, struct err *err)
{
    const json_t *a = json_object_get(root, "architectures");
    if (!a || json_is_null(a))
        return VLLMC_OK;
    if (!json_is_array(a))
        return err_set(err, VLLMC_ERR_FORMAT, "%s: \"architectures\" must be a list (found %s)",
                       doc, model_json_type(a));
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *e = json_array_get(a, i);
        if (!json_is_string(e) || json_string_length(e) >= sizeof c->architecture)
            return err_set(err, VLLMC_ERR_FORMAT,
                           "%s: \"architectures\"[%zu] is not a class name string", doc, i);
    }
    c->n_architectures = (int)json_array_size(a);
    if (c->n_architectures)
        strcpy(c->architecture, json_string_value(json_array_get(a, 0)));
    return VLLMC_OK;
}

static enum vllmc_status config_from_json(const json_t *root, const char *doc, struct hf_config *c,
                                          struct err *err)
{
    if (!json_is_object(root))
        return err_set(err, VLLMC_ERR_FORMAT, "%s: must be a JSON object (found %s)", doc,
                       model_json_type(root));
    static const struct {
        const char *key;
        size_t offset;
    } ints[] = {
        {"hidden_size", offsetof(struct hf_config, hidden_size)},
        {"intermediate_size", offsetof(struct hf_config, intermediate_size)},
        {"num_hidden_layers", offsetof(struct hf_config, num_hidden_layers)},
        {"num_attention_heads", offsetof(struct hf_config, num_attention_heads)},
        {"num_key_value_heads", offsetof(struct hf_config, num_key_value_heads)},
        {"head_dim", offsetof(struct hf_config, head_dim)},
        {"vocab_size", offsetof(struct hf_config, vocab_size)},
        {"max_position_embeddings", offsetof(struct hf_config, max_position_embeddings)},
    };
    c->rms_norm_eps = 1e-6;
    c->rope_theta = 10000.0;
    enum vllmc_status rc = parse_architectures(root, doc, c, err);
    if (!rc)
        rc = get_str(root, "model_type", doc, c->model_type, sizeof c->model_type, err);
    for (size_t i = 0; !rc && i < sizeof ints / sizeof ints[0]; i++)
        rc = get_int(root, ints[i].key, doc, 0, (int64_t *)((char *)c + ints[i].offset), NULL, err);
    if (!rc)
        rc = get_num(root, "rms_norm_eps", doc, &c->rms_norm_eps, NULL, err);
    if (!rc)
        rc = get_num(root, "rope_theta", doc, &c->rope_theta, NULL, err);
    if (!rc)
        rc = parse_rope(root, "rope_parameters", doc, c, err);
    if (!rc)
        rc = parse_rope(root, "rope_scaling", doc, c, err);
    if (!rc)
        rc = get_bool(root, "tie_word_embeddings", doc, &c->tie_word_embeddings, NULL, err);
    if (!rc)
        rc = get_bool(root, "attention_bias", doc, &c->attention_bias, NULL, err);
    if (!rc)
        rc = parse_dtype(root, doc, c, err);
    if (!rc)
        rc = get_int(root, "bos_token_id", doc, 0, &c->bos_token_id, &c->has_bos, err);
    if (!rc)
        rc = get_ids(root, "eos_token_id", doc, c->eos_token_ids, &c->n_eos, err);
    if (rc)
        return rc;
    const json_t *q = json_object_get(root, "quantization_config");
    if (q && !json_is_null(q)) {
        if (!json_is_object(q))
            return err_set(err, VLLMC_ERR_FORMAT,
                           "%s: \"quantization_config\" must be an object (found %s)", doc,
                           model_json_type(q));
        c->quantization_config = model_json_dump(q);
        if (!c->quantization_config)
            return err_set(err, VLLMC_ERR_NOMEM, "%s: out of memory", doc);
    }
    if (!json_object_get(root, "num_key_value_heads") ||
        json_is_null(json_object_get(root, "num_key_value_heads")))
        c->num_key_value_heads = c->num_attention_heads;
    if (!c->head_dim && c->num_attention_heads && c->hidden_size % c->num_attention_heads == 0)
        c->head_dim = c->hidden_size / c->num_attention_heads;
    return VLLMC_OK;
}

static enum vllmc_status config_parse_doc(const char *json, size_t n, const char *doc,
                                          struct hf_config *c, struct err *err)
{
    json_t *root = NULL;
    memset(c, 0, sizeof *c);
    enum vllmc_status rc = model_json_parse(json, n, doc, &root, err);
    if (!rc)
        rc = config_from_json(root, doc, c, err);
    json_decref(root);
    if (rc)
        hf_config_deinit(c);
    return rc;
}

// ---- generation_config.json ----

static enum vllmc_status gen_parse_doc(const char *json, size_t n, const char *doc,
                                       struct hf_generation_config *g, struct err *err)
{
    json_t *root = NULL;
    memset(g, 0, sizeof *g);
    enum vllmc_status rc = model_json_parse(json, n, doc, &root, err);
    if (!rc && !json_is_object(root))
        rc = err_set(err, VLLMC_ERR_FORMAT, "%s: must be a JSON object (found %s)", doc,
                     model_json_type(root));
    if (!rc)
        rc = get_num(root, "temperature", doc, &g->temperature, &g->has_temperature, err);
    if (!rc)
        rc = get_num(root, "top_p", doc, &g->top_p, &g->has_top_p, err);
    if (!rc)
        rc = get_int(root, "top_k", doc, 0, &g->top_k, &g->has_top_k, err);
    if (!rc)
        rc = get_num(root, "repetition_penalty", doc, &g->repetition_penalty,
                     &g->has_repetition_penalty, err);
    if (!rc)
        rc = get_int(root, "max_new_tokens", doc, 0, &g->max_new_tokens, &g->has_max_new_tokens,
                     err);
    if (!rc)
        rc = get_bool(root, "do_sample", doc, &g->do_sample, &g->has_do_sample, err);
    if (!rc)
        rc = get_int(root, "bos_token_id", doc, 0, &g->bos_token_id, &g->has_bos, err);
    if (!rc)
        rc = get_ids(root, "eos_token_id", doc, g->eos_token_ids, &g->n_eos, err);
    json_decref(root);
    if (rc)
        memset(g, 0, sizeof *g);
    return rc;
}

// ---- files ----

// Maps path, or path/name when path is a folder, and hands the bytes to parse.
static enum vllmc_status
load_json_file(const char *path, const char *name,
               enum vllmc_status (*parse)(const char *, size_t, const char *, void *, struct err *),
               void *out, struct err *err)
{
    char buf[4096];
    struct stat sb;
    if (!stat(path, &sb) && S_ISDIR(sb.st_mode)) {
        int k = snprintf(buf, sizeof buf, "%s/%s", path, name);
        if (k < 0 || (size_t)k >= sizeof buf)
            return err_set(err, VLLMC_ERR_INVALID_ARG, "%s/%s: path too long", path, name);
        path = buf;
    }
    struct file_map fm;
    enum vllmc_status rc = file_map_open(path, &fm, err);
    if (rc)
        return rc;
    if (fm.n_bytes > HF_MAX_JSON_BYTES)
        rc = err_set(err, VLLMC_ERR_FORMAT, "%s: larger than %u bytes", path, HF_MAX_JSON_BYTES);
    else
        rc = parse(fm.addr ? fm.addr : "", fm.n_bytes, path, out, err);
    file_map_close(&fm);
    return rc;
}

static enum vllmc_status config_parse_any(const char *json, size_t n, const char *doc, void *out,
                                          struct err *err)
{
    return config_parse_doc(json, n, doc, out, err);
}

static enum vllmc_status gen_parse_any(const char *json, size_t n, const char *doc, void *out,
                                       struct err *err)
{
    return gen_parse_doc(json, n, doc, out, err);
}

// ---- public ----

enum vllmc_status hf_config_parse(const char *json, size_t n, struct hf_config *c, struct err *err)
{
    return config_parse_doc(json, n, "config.json", c, err);
}

enum vllmc_status hf_config_load(const char *path, struct hf_config *c, struct err *err)
{
    memset(c, 0, sizeof *c);
    return load_json_file(path, "config.json", config_parse_any, c, err);
}

void hf_config_deinit(struct hf_config *c)
{
    if (!c)
        return;
    mem_free(c->quantization_config);
    c->quantization_config = NULL;
}

enum vllmc_status hf_generation_config_parse(const char *json, size_t n,
                                             struct hf_generation_config *g, struct err *err)
{
    return gen_parse_doc(json, n, "generation_config.json", g, err);
}

enum vllmc_status hf_generation_config_load(const char *path, struct hf_generation_config *g,
                                            struct err *err)
{
    memset(g, 0, sizeof *g);
    return load_json_file(path, "generation_config.json", gen_parse_any, g, err);
}
