// `vllmc chat-template`: renders a chat template the way the server does
// (transformers' apply_chat_template context) and prints the prompt exactly,
// with no newline added. A template that raises exits 1 with its message.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/alloc.h"
#include "engine/tokenizer_load.h"
#include "template/jinja.h"
#include "tools/cli.h"
#include "tools/commands.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: vllmc chat-template (-m PATH | --template FILE) --messages FILE.json\n"
               "                          [--tools FILE.json] [--no-generation-prompt]\n"
               "                          [--var KEY=JSON ...]\n"
               "  -m, --model PATH       model file, folder or tokenizer.json with a template\n"
               "      --template FILE    a Jinja template file instead\n"
               "      --messages FILE    JSON list of {role, content} messages\n"
               "      --tools FILE       JSON list of tools, passed as `tools`\n"
               "      --no-generation-prompt   add_generation_prompt = false\n"
               "      --var KEY=JSON     set a template variable (bos_token, enable_thinking, ...)\n");
}

static json_t *load_json_file(const char *path, const char *what)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j)
        fprintf(stderr, "vllmc chat-template: %s %s: %s (line %d)\n", what, path, e.text, e.line);
    return j;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? mem_alloc((size_t)n + 1) : NULL;
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    if (buf)
        buf[got] = '\0';
    return buf;
}

int chat_template_main(int argc, char **argv)
{
    const char *model = NULL, *template_path = NULL, *messages_path = NULL, *tools_path = NULL;
    bool generation_prompt = true;
    int rc = 2;
    struct tokenizer *tok = NULL;
    struct jinja_template *tpl = NULL;
    char *template_text = NULL, *out = NULL;
    json_t *ctx = json_object();
    json_t *vars = json_object();
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_opt(argc, argv, &i, "--model", "-m", &v)) {
            if (!v)
                goto done;
            model = v;
        } else if (cli_opt(argc, argv, &i, "--template", NULL, &v)) {
            if (!v)
                goto done;
            template_path = v;
        } else if (cli_opt(argc, argv, &i, "--messages", NULL, &v)) {
            if (!v)
                goto done;
            messages_path = v;
        } else if (cli_opt(argc, argv, &i, "--tools", NULL, &v)) {
            if (!v)
                goto done;
            tools_path = v;
        } else if (!strcmp(argv[i], "--no-generation-prompt")) {
            generation_prompt = false;
        } else if (cli_opt(argc, argv, &i, "--var", NULL, &v)) {
            const char *eq = v ? strchr(v, '=') : NULL;
            if (!eq || eq == v) {
                fprintf(stderr, "vllmc chat-template: --var takes KEY=JSON\n");
                goto done;
            }
            json_error_t e;
            json_t *val = json_loads(eq + 1, JSON_DECODE_ANY, &e);
            if (!val) {
                fprintf(stderr, "vllmc chat-template: --var %.*s: not JSON: %s\n",
                        (int)(eq - v), v, e.text);
                goto done;
            }
            char *key = mem_strndup(v, (size_t)(eq - v));
            json_object_set_new(vars, key, val);
            mem_free(key);
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            rc = 0;
            goto done;
        } else {
            fprintf(stderr, "vllmc chat-template: unknown option '%s'\n", argv[i]);
            usage(stderr);
            goto done;
        }
    }
    if (!messages_path || (!model && !template_path)) {
        usage(stderr);
        goto done;
    }
    rc = 1;
    // The model's tokenizer supplies the template (unless --template) and the
    // bos_token / eos_token strings, as the server passes them.
    if (model) {
        struct err e = {0};
        if (tokenizer_load_path(model, &tok, &e) != VLLMC_OK) {
            fprintf(stderr, "vllmc chat-template: %s\n", e.msg);
            goto done;
        }
        const char *bos = tokenizer_special_text(tok, "bos");
        const char *eos = tokenizer_special_text(tok, "eos");
        json_object_set_new(ctx, "bos_token", json_string(bos ? bos : ""));
        json_object_set_new(ctx, "eos_token", json_string(eos ? eos : ""));
    }
    if (template_path) {
        template_text = read_text(template_path);
        if (!template_text) {
            fprintf(stderr, "vllmc chat-template: cannot read %s\n", template_path);
            goto done;
        }
    } else {
        const char *t = tokenizer_chat_template(tok, NULL);
        if (!t) {
            fprintf(stderr, "vllmc chat-template: %s has no chat template (use --template)\n",
                    model);
            goto done;
        }
        template_text = mem_strdup(t);
    }
    json_t *messages = load_json_file(messages_path, "messages");
    if (!messages)
        goto done;
    json_object_set_new(ctx, "messages", messages);
    if (tools_path) {
        json_t *tools = load_json_file(tools_path, "tools");
        if (!tools)
            goto done;
        json_object_set_new(ctx, "tools", tools);
    }
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(generation_prompt));
    json_object_update(ctx, vars);
    struct err e = {0};
    const char *name = template_path ? template_path : "chat_template";
    if (jinja_compile(template_text, strlen(template_text), name, &tpl, &e) != VLLMC_OK) {
        fprintf(stderr, "vllmc chat-template: %s\n", e.msg);
        goto done;
    }
    size_t n = 0;
    if (jinja_render(tpl, ctx, &out, &n, &e) != VLLMC_OK) {
        fprintf(stderr, "vllmc chat-template: %s\n", e.msg);
        goto done;
    }
    fwrite(out, 1, n, stdout);
    rc = 0;
done:
    mem_free(out);
    jinja_free(tpl);
    mem_free(template_text);
    tokenizer_free(tok);
    json_decref(ctx);
    json_decref(vars);
    return rc;
}
