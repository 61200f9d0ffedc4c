// OpenAI request validation: defaults, accepted shapes, and each rejection's
// status and parameter, per the OpenAI API reference and vLLM's ranges.
#include <stdlib.h>

#include "check.h"
#include "server/openai_request.h"

static bool parse(const char *body, enum oai_kind kind, struct oai_request *r,
                  struct oai_error *err)
{
    return oai_request_parse(body, strlen(body), kind, r, err);
}

static void expect_reject(const char *body, enum oai_kind kind, int status, const char *param)
{
    struct oai_request r;
    struct oai_error err;
    bool ok = parse(body, kind, &r, &err);
    CHECK(!ok);
    if (ok) {
        fprintf(stderr, "  accepted: %s\n", body);
        oai_request_deinit(&r);
        return;
    }
    CHECK_EQ_INT(err.http_status, status);
    CHECK_EQ_STR(err.param, param);
}

static void test_completion_defaults(void)
{
    struct oai_request r;
    struct oai_error err;
    CHECK(parse("{\"model\":\"m\",\"prompt\":\"Once\"}", OAI_COMPLETION, &r, &err));
    CHECK_EQ_STR(r.model, "m");
    CHECK_EQ_INT(r.n_prompts, 1);
    CHECK_EQ_STR(r.prompts[0].text, "Once");
    CHECK_EQ_INT(r.max_tokens, 16); // OpenAI's completions default
    CHECK_NEAR(r.temperature, 1.0, 0, 0);
    CHECK(!r.temperature_set);
    CHECK_EQ_INT(r.n, 1);
    CHECK_EQ_INT(r.logprobs, -1);
    CHECK(r.skip_special_tokens);
    CHECK(!r.stream);
    oai_request_deinit(&r);
}

static void test_prompt_shapes(void)
{
    struct oai_request r;
    struct oai_error err;
    CHECK(parse("{\"prompt\":[1,403,407]}", OAI_COMPLETION, &r, &err));
    CHECK_EQ_INT(r.n_prompts, 1);
    CHECK_EQ_INT(r.prompts[0].n_ids, 3);
    CHECK_EQ_INT(r.prompts[0].ids[1], 403);
    oai_request_deinit(&r);
    CHECK(parse("{\"prompt\":[\"a\",[5,6],\"b\"]}", OAI_COMPLETION, &r, &err));
    CHECK_EQ_INT(r.n_prompts, 3);
    CHECK_EQ_STR(r.prompts[2].text, "b");
    CHECK_EQ_INT(r.prompts[1].ids[0], 5);
    oai_request_deinit(&r);
    expect_reject("{\"prompt\":[]}", OAI_COMPLETION, 400, "prompt");
    expect_reject("{\"prompt\":[1,-2]}", OAI_COMPLETION, 400, "prompt");
    expect_reject("{\"prompt\":{}}", OAI_COMPLETION, 400, "prompt");
    expect_reject("{}", OAI_COMPLETION, 400, "prompt");
}

static void test_sampling_fields(void)
{
    struct oai_request r;
    struct oai_error err;
    const char *body = "{\"prompt\":\"x\",\"temperature\":0,\"top_p\":0.5,\"top_k\":40,"
                       "\"min_p\":0.1,\"repetition_penalty\":1.2,\"seed\":42,\"stop\":\"\\n\","
                       "\"stop_token_ids\":[2],\"ignore_eos\":true,\"min_tokens\":3,"
                       "\"max_tokens\":10.0,\"logit_bias\":{\"13\":-100},\"logprobs\":5,"
                       "\"priority\":-1,\"n\":3}";
    CHECK(parse(body, OAI_COMPLETION, &r, &err));
    CHECK_NEAR(r.temperature, 0, 0, 0);
    CHECK(r.temperature_set);
    CHECK_EQ_INT(r.top_k, 40);
    CHECK(r.has_seed);
    CHECK_EQ_INT(r.seed, 42);
    CHECK_EQ_INT(r.n_stop, 1);
    CHECK_EQ_STR(r.stop[0], "\n");
    CHECK_EQ_INT(r.stop_token_ids[0], 2);
    CHECK(r.ignore_eos);
    CHECK_EQ_INT(r.max_tokens, 10);
    CHECK_EQ_INT(r.n_logit_bias, 1);
    CHECK_EQ_INT(r.logit_bias[0].token_id, 13);
    CHECK_EQ_INT(r.logprobs, 5);
    CHECK_EQ_INT(r.priority, -1);
    CHECK_EQ_INT(r.n, 3);
    oai_request_deinit(&r);
}

static void test_rejections(void)
{
    expect_reject("{\"prompt\":\"x\",\"temperature\":-0.5}", OAI_COMPLETION, 400, "temperature");
    expect_reject("{\"prompt\":\"x\",\"temperature\":\"hot\"}", OAI_COMPLETION, 400,
                  "temperature");
    expect_reject("{\"prompt\":\"x\",\"top_p\":0}", OAI_COMPLETION, 400, "top_p");
    expect_reject("{\"prompt\":\"x\",\"top_p\":1.5}", OAI_COMPLETION, 400, "top_p");
    expect_reject("{\"prompt\":\"x\",\"max_tokens\":0}", OAI_COMPLETION, 400, "max_tokens");
    expect_reject("{\"prompt\":\"x\",\"max_tokens\":1.5}", OAI_COMPLETION, 400, "max_tokens");
    expect_reject("{\"prompt\":\"x\",\"n\":0}", OAI_COMPLETION, 400, "n");
    expect_reject("{\"prompt\":\"x\",\"logprobs\":21}", OAI_COMPLETION, 400, "logprobs");
    expect_reject("{\"prompt\":\"x\",\"suffix\":\"y\"}", OAI_COMPLETION, 400, "suffix");
    expect_reject("{\"prompt\":\"x\",\"stream\":\"yes\"}", OAI_COMPLETION, 400, "stream");
    expect_reject("{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}",
                  OAI_COMPLETION, 400, "stream_options");
    // vLLM refuses prompt logprobs above 0 on a stream; 0 passes.
    expect_reject("{\"prompt\":\"x\",\"stream\":true,\"prompt_logprobs\":1}", OAI_COMPLETION, 400,
                  "prompt_logprobs");
    expect_reject("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true,"
                  "\"prompt_logprobs\":2}",
                  OAI_CHAT, 400, "prompt_logprobs");
    expect_reject("{\"prompt\":\"x\",\"logit_bias\":{\"a\":1}}", OAI_COMPLETION, 400,
                  "logit_bias");
    expect_reject("{\"prompt\":\"x\",\"logit_bias\":{\"5\":101}}", OAI_COMPLETION, 400,
                  "logit_bias");
    expect_reject("{\"prompt\":\"x\",\"min_tokens\":5,\"max_tokens\":2}", OAI_COMPLETION, 400,
                  "min_tokens");
    expect_reject("{\"prompt\":\"x\",\"stop\":[1]}", OAI_COMPLETION, 400, "stop");
    expect_reject("{\"prompt\":\"x\",\"presence_penalty\":3}", OAI_COMPLETION, 400,
                  "presence_penalty");
    expect_reject("{\"prompt\":\"x\",\"repetition_penalty\":0}", OAI_COMPLETION, 400,
                  "repetition_penalty");
    expect_reject("{\"prompt\":\"x\"", OAI_COMPLETION, 400, "");
    expect_reject("[1,2]", OAI_COMPLETION, 400, "");
    expect_reject("{\"messages\":[]}", OAI_CHAT, 400, "messages");
    expect_reject("{\"messages\":[{\"content\":\"x\"}]}", OAI_CHAT, 400, "messages");
    expect_reject("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
                  OAI_CHAT, 400, "top_logprobs");
}

static void test_chat(void)
{
    struct oai_request r;
    struct oai_error err;
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                       "\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                       "\"logprobs\":true,\"top_logprobs\":2,"
                       "\"chat_template_kwargs\":{\"enable_thinking\":false}}";
    CHECK(parse(body, OAI_CHAT, &r, &err));
    CHECK_EQ_INT(r.max_tokens, -1); // chat: up to the context
    CHECK(r.stream);
    CHECK(r.include_usage);
    CHECK_EQ_INT(r.logprobs, 2);
    CHECK(r.add_generation_prompt);
    CHECK_EQ_INT(json_array_size(r.messages), 1);
    CHECK(json_is_false(json_object_get(r.chat_template_kwargs, "enable_thinking")));
    oai_request_deinit(&r);
}

static void test_error_json(void)
{
    struct oai_error err;
    oai_fail(&err, 400, "BadRequestError", "top_p", "bad %s", "value");
    char *s = oai_error_json(&err);
    json_t *o = json_loads(s, 0, NULL);
    json_t *e = json_object_get(o, "error");
    CHECK_EQ_STR(json_string_value(json_object_get(e, "message")), "bad value");
    CHECK_EQ_STR(json_string_value(json_object_get(e, "type")), "BadRequestError");
    CHECK_EQ_STR(json_string_value(json_object_get(e, "param")), "top_p");
    CHECK_EQ_INT(json_integer_value(json_object_get(e, "code")), 400);
    json_decref(o);
    free(s);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"completion_defaults", test_completion_defaults},
        {"prompt_shapes", test_prompt_shapes},
        {"sampling_fields", test_sampling_fields},
        {"rejections", test_rejections},
        {"chat", test_chat},
        {"error_json", test_error_json},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
