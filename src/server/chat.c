// Chat prompts: the model's Jinja chat template (or --chat-template, or a
// per-request override) rendered over the request's messages the way
// transformers' apply_chat_template does.
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "server/server_internal.h"
#include "template/jinja.h"

enum vllmc_status chat_template_init(struct server *srv, char *err_msg, size_t err_len)
{
    const char *src = srv->opt.chat_template ? srv->opt.chat_template
                                             : vllmc_engine_chat_template(srv->engine);
    if (!src) {
        log_info("the model has no chat template: /v1/chat/completions needs --chat-template");
        return VLLMC_OK;
    }
    struct err e = {0};
    const char *name = srv->opt.chat_template ? "--chat-template" : "chat_template";
    enum vllmc_status st = jinja_compile(src, strlen(src), name, &srv->chat_template, &e);
    if (st != VLLMC_OK)
        snprintf(err_msg, err_len, "cannot compile the chat template: %s", e.msg);
    return st;
}

void chat_template_deinit(struct server *srv)
{
    jinja_free(srv->chat_template);
    srv->chat_template = NULL;
}

// vLLM's "string" content format: a list of parts becomes its text parts
// joined by newlines, for templates that expect plain strings.
static json_t *normalise_messages(json_t *messages)
{
    json_t *out = json_deep_copy(messages);
    size_t i;
    json_t *m;
    json_array_foreach(out, i, m)
    {
        json_t *content = json_object_get(m, "content");
        if (!json_is_array(content))
            continue;
        size_t len = 0;
        size_t k;
        json_t *part;
        json_array_foreach(content, k, part) len +=
            json_string_length(json_object_get(part, "text")) + 1;
        char *text = mem_alloc(len + 1);
        if (!text)
            continue;
        size_t pos = 0;
        json_array_foreach(content, k, part)
        {
            json_t *t = json_object_get(part, "text");
            if (!json_is_string(t))
                continue;
            if (pos)
                text[pos++] = '\n';
            memcpy(text + pos, json_string_value(t), json_string_length(t));
            pos += json_string_length(t);
        }
        json_object_set_new(m, "content", json_stringn(text, pos));
        mem_free(text);
    }
    return out;
}

static json_t *token_text_or_empty(struct server *srv, int32_t id)
{
    const char *t = id >= 0 ? vllmc_engine_token_text(srv->engine, id) : NULL;
    return json_string(t ? t : "");
}

bool chat_render(struct server *srv, const struct oai_request *r, char **out,
                 struct oai_error *err)
{
    *out = NULL;
    struct jinja_template *own = NULL;
    const struct jinja_template *tpl = srv->chat_template;
    struct err e = {0};
    if (r->chat_template) {
        if (jinja_compile(r->chat_template, strlen(r->chat_template), "chat_template", &own,
                          &e) != VLLMC_OK)
            return oai_fail(err, 400, "BadRequestError", "chat_template", "%s", e.msg);
        tpl = own;
    }
    if (!tpl)
        return oai_fail(err, 400, "BadRequestError", "messages",
                        "this model has no chat template: start the server with "
                        "--chat-template FILE, or send the request to /v1/completions");
    json_t *ctx = json_object();
    if (r->chat_template_kwargs)
        json_object_update(ctx, r->chat_template_kwargs);
    json_object_set_new(ctx, "messages", normalise_messages(r->messages));
    if (r->tools)
        json_object_set(ctx, "tools", r->tools);
    json_object_set_new(ctx, "add_generation_prompt",
                        json_boolean(r->add_generation_prompt && !r->continue_final_message));
    json_object_set_new(ctx, "bos_token",
                        token_text_or_empty(srv, vllmc_engine_bos_id(srv->engine)));
    json_object_set_new(ctx, "eos_token",
                        token_text_or_empty(srv, vllmc_engine_eos_id(srv->engine)));
    size_t out_len = 0;
    enum vllmc_status st = jinja_render(tpl, ctx, out, &out_len, &e);
    json_decref(ctx);
    jinja_free(own);
    if (st != VLLMC_OK)
        return oai_fail(err, 400, "BadRequestError", "messages", "chat template error: %s", e.msg);
    return true;
}
