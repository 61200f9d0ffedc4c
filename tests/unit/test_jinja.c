// Chat-template engine: language pieces against the outputs Jinja2's
// documented semantics give (with transformers' settings: trim_blocks,
// lstrip_blocks, loopcontrols, json.dumps tojson), errors with locations,
// limits, out-of-memory paths and concurrent rendering of one template.
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/alloc.h"
#include "template/jinja.h"

// Context shared by the table: a short conversation and a few scalars.
static const char *const base_ctx =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Sys\"},"
    "                {\"role\": \"user\", \"content\": \"Hi\"},"
    "                {\"role\": \"assistant\", \"content\": \" ok \"}],"
    " \"s\": \"Hello, World\", \"n\": 7, \"f\": 2.5, \"l\": [3, 1, 2],"
    " \"d\": {\"b\": 2, \"a\": 1}, \"e\": [], \"u\": \"h\\u00e9llo\", \"nil\": null}";

struct jcase {
    const char *tpl;
    const char *want; // NULL: an error whose message contains want_err
    const char *want_err;
};

static char *render_str(const char *tpl, const char *ctx_json, struct err *e,
                        enum vllmc_status *rc_out)
{
    json_error_t jerr;
    json_t *ctx = json_loads(ctx_json, 0, &jerr);
    VLLMC_ASSERT(ctx);
    struct jinja_template *t = NULL;
    char *out = NULL;
    enum vllmc_status rc = jinja_compile(tpl, strlen(tpl), "t", &t, e);
    if (!rc)
        rc = jinja_render(t, ctx, &out, NULL, e);
    jinja_free(t);
    json_decref(ctx);
    if (rc_out)
        *rc_out = rc;
    return out;
}

static void run_table(const struct jcase *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct err e;
        char *got = render_str(cases[i].tpl, base_ctx, &e, NULL);
        if (cases[i].want) {
            if (!got || strcmp(got, cases[i].want)) {
                fprintf(stderr, "template: %s\n  want: \"%s\"\n  got:  \"%s\"\n", cases[i].tpl,
                        cases[i].want, got ? got : e.msg);
                check_failures++;
            }
        } else if (got || !strstr(e.msg, cases[i].want_err)) {
            fprintf(stderr, "template: %s\n  want error containing \"%s\"\n  got: \"%s\"\n",
                    cases[i].tpl, cases[i].want_err, got ? got : e.msg);
            check_failures++;
        }
        mem_free(got);
    }
}

#define RUN(table) run_table(table, sizeof table / sizeof table[0])

static void test_whitespace(void)
{
    static const struct jcase cases[] = {
        // trim_blocks eats the newline after a block tag, lstrip_blocks the
        // indentation before it; expressions keep both.
        {"{% if true %}\nyes\n{% endif %}\n", "yes\n", NULL},
        {"  {% if true %}\n  yes\n  {% endif %}\nend", "  yes\nend", NULL},
        {"a {% if true %} b {% endif %}\n c", "a  b  c", NULL},
        {"  {{ 'x' }}\n", "  x", NULL},
        {"{{- '  x  ' -}}  |  {{ 'y' }}", "  x  |  y", NULL},
        {"a  {%- if true %} b {% endif -%}  c", "a b c", NULL},
        {"{% if true -%}\n  a\n{%- endif %}", "a", NULL},
        {"{% if true +%}\nkeep\n{% endif %}", "\nkeep\n", NULL},
        {"  {%+ if true %}x{% endif %}", "  x", NULL},
        {"  {# comment #}\nx", "x", NULL},
        {"a{#- c -#}  b", "ab", NULL},
        {"{% raw %}{{ x }}{% endraw %}", "{{ x }}", NULL},
        {"{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n", "  1\n  2\n", NULL},
        {"x\r\ny\rz", "x\ny\nz", NULL},
        {"line\n", "line", NULL}, // one trailing newline is dropped
        {"line\n\n", "line\n", NULL},
    };
    RUN(cases);
}

static void test_literals_and_printing(void)
{
    static const struct jcase cases[] = {
        {"{{ none }}|{{ None }}|{{ true }}|{{ False }}", "None|None|True|False", NULL},
        {"{{ 1.0 }}|{{ 0.1 + 0.2 }}|{{ 1e16 }}|{{ 1e-05 }}|{{ 100.0 }}|{{ 1.5e3 }}",
         "1.0|0.30000000000000004|1e+16|1e-05|100.0|1500.0", NULL},
        {"{{ 0x1F }}|{{ 0o17 }}|{{ 0b101 }}|{{ 1_000 }}", "31|15|5|1000", NULL},
        {"{{ [1, 'a', none] }}|{{ (1,) }}|{{ (1, 2) }}|{{ {'k': [true]} }}",
         "[1, 'a', None]|(1,)|(1, 2)|{'k': [True]}", NULL},
        {"{{ [\"it's\", 'say \"hi\"', '\\n'] }}", "[\"it's\", 'say \"hi\"', '\\n']", NULL},
        {"{{ 'a' 'b' }}|{{ 'q\\'s' }}|{{ \"\\u00e9\\x41\\101\" }}|{{ '\\d' }}",
         "ab|q's|\xc3\xa9"
         "AA|\\d",
         NULL},
        {"{{ nil }}|{{ undefined_name }}|{{ d }}", "None||{'b': 2, 'a': 1}", NULL},
    };
    RUN(cases);
}

static void test_operators(void)
{
    static const struct jcase cases[] = {
        {"{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 % -3 }}|{{ 7 / 2 }}|{{ 4 / 2 }}",
         "3|-4|2|-2|3.5|2.0", NULL},
        {"{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 2 ** 3 ** 2 }}|{{ -7.5 // 2 }}|{{ -7.5 % 2 }}",
         "1024|0.5|64|-4.0|0.5", NULL},
        {"{{ 'a' ~ 1 ~ none ~ [1] }}|{{ 'ab' * 2 }}|{{ [1] + [2] }}|{{ true + 1 }}",
         "a1None[1]|abab|[1, 2]|2", NULL},
        {"{{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 1 == 1.0 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}",
         "TrueFalseTrueTrueTrue", NULL},
        {"{{ 'b' in 'abc' }}{{ 2 in l }}{{ 'a' in d }}{{ 'z' not in d }}{{ 'x' in undefined_name "
         "}}",
         "TrueTrueTrueTrueFalse", NULL},
        {"{{ 'x' if n > 5 else 'y' }}|{{ 'x' if n < 5 }}|{{ nil or 'fb' }}|{{ 0 and 1 }}|{{ not n "
         "}}",
         "x||fb|0|False", NULL},
        {"{{ -n ** 2 }}|{{ (-n) ** 2 }}|{{ not true == false }}", "49|49|True", NULL},
        {"{{ 1 + 'a' }}", NULL, "unsupported operand type(s) for +: 'int' and 'str'"},
        {"{{ 'a' + 1 }}", NULL, "can only concatenate str (not \"int\") to str"},
        {"{{ 1 / 0 }}", NULL, "division by zero"},
        {"{{ 1 < 'a' }}", NULL, "'<' not supported between instances of 'int' and 'str'"},
        {"{{ '%s-%03d|%-3s|%.2f' % ('a', 7, 'b', 2.5) }}", "a-007|b  |2.50", NULL},
    };
    RUN(cases);
}

static void test_access(void)
{
    static const struct jcase cases[] = {
        {"{{ s[0] }}{{ s[-1] }}|{{ s[1:4] }}|{{ s[::-1] }}|{{ u[1:3] }}|{{ l[::-1] }}|{{ l[5:] }}",
         "Hd|ell|dlroW ,olleH|\xc3\xa9l|[2, 1, 3]|[]", NULL},
        {"{{ messages[0].role }}|{{ messages[-1]['content'] }}|{{ messages[9] }}|{{ d.zz }}",
         "system| ok ||", NULL},
        {"{{ d.items() | list }}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.get('zz', 0) "
         "}}",
         "[('b', 2), ('a', 1)]|['b', 'a']|[2, 1]|0", NULL},
        {"{{ undefined_name.attr }}", NULL, "'undefined_name' is undefined"},
        {"{{ d.zz.yy }}", NULL, "'dict object' has no attribute 'zz'"},
        {"{{ l.append(4) }}", NULL, "unsafe"},
        {"{% set x = {'a': {'b': [1, 2]}} %}{{ x.a.b[1] }}{{ x['a']['b'] | last }}", "22", NULL},
    };
    RUN(cases);
}

static void test_statements(void)
{
    static const struct jcase cases[] = {
        {"{% if n > 10 %}a{% elif n > 5 %}b{% else %}c{% endif %}", "b", NULL},
        {"{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
         "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
         "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;", NULL},
        {"{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '-' }}"
         "{{ loop.nextitem.role if loop.nextitem is defined else '-' }}{{ loop.cycle('a', 'b') }}|"
         "{% endfor %}",
         "-usera|systemassistantb|user-a|", NULL},
        {"{% for x in l if x > 1 %}{{ x }}{{ loop.index }}{{ loop.last }}{% endfor %}",
         "31False22True", NULL},
        {"{% for x in e %}{{ x }}{% else %}empty{% endfor %}", "empty", NULL},
        {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "b=2;a=1;", NULL},
        {"{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
         "{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
         "0134", NULL},
        // Assignments in a loop body stay there; namespace() carries state out.
        {"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", "21", NULL},
        {"{% for i in [1, 2] %}{% if loop.first %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}",
         "[5][]", NULL},
        {"{% set ns = namespace(total=0) %}{% for x in l %}{% set ns.total = ns.total + x %}"
         "{% endfor %}{{ ns.total }}",
         "6", NULL},
        {"{% if true %}{% set z = 3 %}{% endif %}{{ z }}", "3", NULL},
        {"{% set a, b = 1, 2 %}{{ a }}{{ b }}", "12", NULL},
        {"{% set blk %} in {{ n }} {% endset %}[{{ blk }}]", "[ in 7 ]", NULL},
        {"{% set up | upper %}abc{% endset %}{{ up }}", "ABC", NULL},
        {"{% filter upper %}x{{ s }}{% endfilter %}", "XHELLO, WORLD", NULL},
        {"{% with a = 1, b = n %}{{ a + b }}{% endwith %}[{{ a }}]", "8[]", NULL},
        {"{% generation %}gen{% endgeneration %}", "gen", NULL},
        {"{% for x in [1, 1, 2] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}", "12",
         NULL},
        {"{% for it in [{'n': 'a', 'c': [{'n': 'b', 'c': []}]}] recursive %}{{ it.n }}"
         "{{ loop.depth }}{% if it.c %}({{ loop(it.c) }}){% endif %}{% endfor %}",
         "a1(b2)", NULL},
        {"{% for x in [1, 2] %}{{ loop }}{% endfor %}", "<LoopContext 1/2><LoopContext 2/2>", NULL},
        {"{% for x in 5 %}{% endfor %}", NULL, "'int' object is not iterable"},
        {"{% for a, b in [[1, 2], [3]] %}{% endfor %}", NULL, "not enough values to unpack"},
        {"{% set x.y = 1 %}", NULL, "non-namespace object"},
    };
    RUN(cases);
}

static void test_macros(void)
{
    static const struct jcase cases[] = {
        {"{% macro g(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}"
         "{{ g('Bob') }} {{ g('Al', greeting='Hi') }} {{ g(name='Z', greeting='Yo') }}",
         "Hello, Bob! Hi, Al! Yo, Z!", NULL},
        {"{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, x=3) }}",
         "1(2,){'x': 3}", NULL},
        {"{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}body{{ n }}{% endcall %}",
         "<body7>", NULL},
        {"{% macro w() %}<{{ caller(5) }}>{% endmacro %}{% call(v) w() %}v{{ v }}{% endcall %}",
         "<v5>", NULL},
        {"{% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}", "1", NULL},
        {"{% macro m(a, b=a * 2) %}{{ b }}{% endmacro %}{{ m(3) }}", "6", NULL},
    };
    RUN(cases);
}

static void test_filters(void)
{
    static const struct jcase cases[] = {
        {"{{ s | upper }}|{{ s | lower }}|{{ 'hello wORLD-foo bar(baz' | title }}|"
         "{{ 'hELLO world' | capitalize }}|{{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}",
         "HELLO, WORLD|hello, world|Hello World-Foo Bar(Baz|Hello world|x|hi", NULL},
        {"{{ '\xc3\x9f' | upper }}|{{ \"they're\" | title }}|{{ \"they're\".title() }}",
         "SS|They're|They'Re", NULL},
        {"{{ s | replace('l', 'L') }}|{{ s | replace('l', 'L', 2) }}", "HeLLo, WorLd|HeLLo, World",
         NULL},
        {"{{ l | join }}|{{ l | join(', ') }}|{{ messages | join('|', attribute='role') }}",
         "312|3, 1, 2|system|user|assistant", NULL},
        {"{{ l | length }}|{{ s | count }}|{{ u | length }}|{{ undefined_name | length }}",
         "3|12|5|0", NULL},
        {"{{ undefined_name | default('x') }}|{{ nil | default('x') }}|{{ '' | d('x', true) }}",
         "x|None|x", NULL},
        {"{{ l | first }}|{{ l | last }}|{{ e | first }}|{{ l | sort }}|{{ l | sort(reverse=true) "
         "}}",
         "3|2||[1, 2, 3]|[3, 2, 1]", NULL},
        {"{{ ['b', 'A', 'c'] | sort }}|{{ ['a', 'A', 'b'] | unique | list }}|{{ l | max }}|{{ l | "
         "min }}",
         "['A', 'b', 'c']|['a', 'b']|3|1", NULL},
        {"{{ d | dictsort }}|{{ d | dictsort(by='value', reverse=true) }}",
         "[('a', 1), ('b', 2)]|[('b', 2), ('a', 1)]", NULL},
        {"{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|"
         "{{ messages | rejectattr('role', 'eq', 'user') | map(attribute='role') | join(',') }}|"
         "{{ l | select('odd') | list }}|{{ l | reject('odd') | list }}|{{ ['a'] | map('upper') | "
         "list }}",
         "1|system,assistant|[3, 1]|[2]|['A']", NULL},
        {"{{ -3 | abs }}|{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 2.675 | round(2) }}|{{ 5 | round "
         "}}|"
         "{{ 2.1 | round(0, 'ceil') }}",
         "3|2.0|4.0|2.67|5|3.0", NULL},
        {"{{ '42' | int }}|{{ '4.7' | int }}|{{ 'x' | int(5) }}|{{ '0x1A' | int(base=16) }}|"
         "{{ '3.5' | float }}|{{ 3 | float }}|{{ 7 | string }}",
         "42|4|5|26|3.5|3.0|7", NULL},
        {"{{ [1, 2, 3] | sum }}|{{ l | batch(2) | list }}|{{ 'abc' | reverse }}|{{ 'a b c' | "
         "wordcount }}",
         "6|[[3, 1], [2]]|cba|3", NULL},
        {"{{ '%s-%d' | format('a', 2) }}|{{ '%(k)s!' | format(k='v') }}", "a-2|v!", NULL},
        {"{{ 'x' | center(5) }}|{{ 'foo bar baz qux' | truncate(9) }}|{{ 'foo bar baz qux' | "
         "truncate(9, true) }}",
         "  x  |foo...|foo ba...", NULL},
        {"{{ 'a\\nb' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(1, "
         "blank=true) }}",
         "a\n    b|  a\n  b|a\n \n b", NULL},
        {"{{ '<a>&\"\\'' | e }}|{{ ('<b>' | safe) + '<i>' }}|{{ ('<b>' | safe) ~ '<i>' }}",
         "&lt;a&gt;&amp;&#34;&#39;|<b>&lt;i&gt;|<b><i>", NULL},
        {"{{ d | items | list }}|{{ messages[0] | attr('role') }}|{{ s | attr('upper') is callable "
         "}}",
         "[('b', 2), ('a', 1)]||True", NULL},
        {"{{ x | nosuchfilter }}", NULL, "t:1:8: unsupported filter 'nosuchfilter'"},
        // Inside `if` and conditional expressions Jinja2 only fails when the
        // unknown filter or test actually runs.
        {"{% if false %}{{ x | nosuch }}{% endif %}{{ 1 if true else x | nosuch }}", "1", NULL},
        {"{% if true %}{{ 1 | nosuch }}{% endif %}", NULL, "t:1:21: unsupported filter 'nosuch'"},
        {"{% if true %}{% for i in l %}{{ i is nosuch }}{% endfor %}{% endif %}", NULL,
         "t:1:38: unsupported test 'nosuch'"},
        // map() and friends return generators in Jinja2: they cannot be
        // printed or serialized, and they are always true.
        {"{{ l | map('string') | tojson }}", NULL, "Object of type generator is not JSON"},
        {"{{ l | select('odd') }}", NULL, "cannot print a generator"},
        {"{% if e | select %}yes{% endif %}", "yes", NULL},
        // ... and they run when first walked, not when made.
        {"{% set g = 5 | select('odd') %}ok", "ok", NULL},
        {"{% set g = 5 | select('odd') %}{{ g | list }}", NULL, "'int' object is not iterable"},
        {"{{ [] | indent }}", NULL, "unsupported operand type(s) for +=: 'list' and 'str'"},
        {"{% set g = l | select('odd') %}{{ g | list }}{{ g | list }}", "[3, 1][]", NULL},
    };
    RUN(cases);
}

static void test_tojson(void)
{
    static const struct jcase cases[] = {
        {"{{ d | tojson }}|{{ l | tojson }}|{{ nil | tojson }}|{{ 1.0 | tojson }}|{{ true | tojson "
         "}}",
         "{\"b\": 2, \"a\": 1}|[3, 1, 2]|null|1.0|true", NULL},
        {"{{ u | tojson }}|{{ u | tojson(ensure_ascii=true) }}|{{ '\\t\"\\\\\\x01' | tojson }}",
         "\"h\xc3\xa9llo\"|\"h\\u00e9llo\"|\"\\t\\\"\\\\\\u0001\"", NULL},
        {"{{ d | tojson(indent=2) }}", "{\n  \"b\": 2,\n  \"a\": 1\n}", NULL},
        {"{{ d | tojson(sort_keys=true) }}|{{ d | tojson(separators=(',', ':')) }}|{{ [[], {}] | "
         "tojson(indent=1) }}",
         "{\"a\": 1, \"b\": 2}|{\"b\":2,\"a\":1}|[\n []"
         ",\n {}\n]",
         NULL},
        {"{{ {1: 'x', true: 'y'} | tojson }}", "{\"1\": \"y\"}", NULL},
        {"{{ undefined_name | tojson }}", NULL,
         "Object of type Undefined is not JSON serializable"},
    };
    RUN(cases);
}

static void test_tests_and_methods(void)
{
    static const struct jcase cases[] = {
        {"{{ n is odd }}{{ n is even }}{{ n is divisibleby 7 }}{{ n is number }}{{ f is float }}"
         "{{ n is integer }}{{ true is boolean }}{{ nil is none }}{{ s is string }}{{ d is mapping "
         "}}",
         "TrueFalseTrueTrueTrueTrueTrueTrueTrueTrue", NULL},
        {"{{ 2.5 is odd }}{{ 3.0 is odd }}{{ 4.0 is even }}{{ 9 is divisibleby 3.0 }}",
         "FalseTrueTrueTrue", NULL},
        {"{{ 'x' is odd }}", NULL, "not all arguments converted during string formatting"},
        {"{{ l is iterable }}{{ l is sequence }}{{ x is defined }}{{ x is undefined }}"
         "{{ n is eq 7 }}{{ n is lt 8 }}{{ 2 is in l }}{{ 1 is true }}{{ nil is not none }}",
         "TrueTrueFalseTrueTrueTrueTrueFalseFalse", NULL},
        {"{{ s.split(',') }}|{{ '  a  b  '.split() }}|{{ 'a,b,c'.split(',', 1) }}|"
         "{{ 'a,b,c'.rsplit(',', 1) }}|{{ ' a b '.split(none, 1) }}",
         "['Hello', ' World']|['a', 'b']|['a', 'b,c']|['a,b', 'c']|['a', 'b ']", NULL},
        {"{{ s.startswith('Hell') }}{{ s.endswith(('x', 'ld')) }}{{ s.find('o') }}{{ s.rfind('o') "
         "}}"
         "{{ s.count('l') }}",
         "TrueTrue483", NULL},
        {"{{ '  p  '.strip() }}|{{ '  p  '.lstrip() }}|{{ '  p  '.rstrip() }}|{{ "
         "'xxpxx'.strip('x') }}",
         "p|p  |  p|p", NULL},
        {"{{ '{} and {}'.format(1, 'two') }}|{{ '{0}{1}{0}'.format('a', 'b') }}|"
         "{{ '{k}!'.format(k='x') }}|{{ ', '.join(['a', 'b']) }}|{{ 'a\\nb'.splitlines() }}",
         "1 and two|aba|x!|a, b|['a', 'b']", NULL},
        {"{{ 'ab'.upper() }}{{ 'AB'.lower() }}{{ 'ab cd'.title() }}{{ 'aB'.capitalize() }}"
         "{{ '42'.isdigit() }}{{ 'x'.replace('x', 'y') }}",
         "ABabAb CdAbTruey", NULL},
    };
    RUN(cases);
}

static void test_globals(void)
{
    static const struct jcase cases[] = {
        {"{{ range(3) | list }}|{{ range(1, 10, 3) | list }}|{{ range(5, 0, -2) | list }}|{{ "
         "range(3) }}",
         "[0, 1, 2]|[1, 4, 7]|[5, 3, 1]|range(0, 3)", NULL},
        {"{{ dict(a=1, b='x') }}|{{ namespace(a=1).a }}", "{'a': 1, 'b': 'x'}|1", NULL},
        {"{{ strftime_now('%d %b %Y') }}", "26 Jul 2024", NULL},
        {"{{ raise_exception('No system role') }}", NULL, "No system role"},
        {"{{ range(1000000) | length }}", NULL, "Range too big"},
    };
    RUN(cases);
    // raise_exception's message is the whole error, with no location.
    struct err e;
    enum vllmc_status rc;
    char *out = render_str("x{{ raise_exception('Roles must alternate') }}", "{}", &e, &rc);
    CHECK(out == NULL);
    CHECK_EQ_INT(rc, VLLMC_ERR_TEMPLATE);
    CHECK_EQ_STR(e.msg, "Roles must alternate");
}

// Errors name the template, the line and the column.
static void test_errors(void)
{
    static const struct {
        const char *tpl;
        enum vllmc_status code;
        const char *msg;
    } cases[] = {
        {"a\n{% if x %}\nb", VLLMC_ERR_TEMPLATE,
         "t:3:2: Unexpected end of template. Jinja was looking for the following tags: 'elif' or "
         "'else' or 'endif'."},
        {"{% endfor %}", VLLMC_ERR_TEMPLATE, "t:1:4: Encountered unexpected tag 'endfor'"},
        {"{% frobnicate %}", VLLMC_ERR_TEMPLATE, "t:1:4: Encountered unknown tag 'frobnicate'"},
        {"x\n  {% include 'other.jinja' %}", VLLMC_ERR_UNSUPPORTED,
         "t:2:6: unsupported tag 'include'"},
        {"{% extends 'base' %}", VLLMC_ERR_UNSUPPORTED, "t:1:4: unsupported tag 'extends'"},
        {"{{ x | groupby('a') }}", VLLMC_ERR_UNSUPPORTED, "t:1:8: unsupported filter 'groupby'"},
        {"{{ x is escaped }}", VLLMC_ERR_UNSUPPORTED, "t:1:9: unsupported test 'escaped'"},
        {"{{ f(*args) }}", VLLMC_ERR_UNSUPPORTED, "t:1:6: unsupported: *args"},
        {"{{ 1 + }}", VLLMC_ERR_TEMPLATE, "t:1:8: unexpected end of expression"},
        {"{{ 'abc }}", VLLMC_ERR_TEMPLATE, "t:1:4: unterminated string"},
        {"{# never closed", VLLMC_ERR_TEMPLATE, "missing end of comment"},
        {"{{ (1 }}", VLLMC_ERR_TEMPLATE, "t:1:"},
        {"\xff", VLLMC_ERR_TEMPLATE, "t:1:1: template is not valid UTF-8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct jinja_template *t = NULL;
        struct err e;
        enum vllmc_status rc = jinja_compile(cases[i].tpl, strlen(cases[i].tpl), "t", &t, &e);
        CHECK_EQ_INT(rc, cases[i].code);
        CHECK(t == NULL);
        if (!strstr(e.msg, cases[i].msg)) {
            fprintf(stderr, "template %s: want \"%s\" in \"%s\"\n", cases[i].tpl, cases[i].msg,
                    e.msg);
            check_failures++;
        }
    }
    // Runtime errors carry the location of the failing expression.
    struct err e;
    enum vllmc_status rc;
    char *out = render_str("line one\n  {{ 1 + nil }}", base_ctx, &e, &rc);
    CHECK(out == NULL);
    CHECK_EQ_INT(rc, VLLMC_ERR_TEMPLATE);
    CHECK_EQ_STR(e.msg, "t:2:8: unsupported operand type(s) for +: 'int' and 'NoneType'");
}

// Templates that never end or explode must stop with an error.
static void test_limits(void)
{
    static const char *const tpls[] = {
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
        "{% for a in range(100000) %}{% for b in range(100000) %}{{ 'xxxxxxxxxxxxxxxx' }}"
        "{% endfor %}{% endfor %}",
        "{{ 'x' * 1000000000 }}",
        "{% set ns = namespace(l=[]) %}{% for i in range(2000) %}{% set ns.l = [ns.l] %}{% endfor "
        "%}",
        "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
        "{{ 9223372036854775807 + 1 }}",
    };
    struct jinja_limits lim;
    jinja_limits_default(&lim);
    CHECK_EQ_INT(lim.output_bytes_max, 64 << 20);
    CHECK_EQ_INT(lim.n_steps_max, 20000000);
    // Smaller budgets than the defaults keep the test quick; the mechanism
    // is the same.
    lim.n_steps_max = 1000000;
    lim.output_bytes_max = 1 << 20;
    for (size_t i = 0; i < sizeof tpls / sizeof tpls[0]; i++) {
        struct jinja_template *t = NULL;
        struct err e;
        char *out = NULL;
        CHECK_EQ_INT(jinja_compile(tpls[i], strlen(tpls[i]), "t", &t, &e), VLLMC_OK);
        enum vllmc_status rc = jinja_render_limited(t, NULL, &lim, &out, NULL, &e);
        CHECK(out == NULL);
        if (rc != VLLMC_ERR_CAPACITY && rc != VLLMC_ERR_UNSUPPORTED) {
            fprintf(stderr, "%s: status %d: %s\n", tpls[i], rc, e.msg);
            check_failures++;
        }
        jinja_free(t);
    }
    // Deeply nested expressions are refused at parse time, not by the stack.
    size_t depth = 5000;
    char *deep = malloc(depth * 2 + 16);
    size_t k = 0;
    k += (size_t)sprintf(deep, "{{ ");
    for (size_t i = 0; i < depth; i++)
        deep[k++] = '(';
    deep[k++] = '1';
    for (size_t i = 0; i < depth; i++)
        deep[k++] = ')';
    strcpy(deep + k, " }}");
    struct jinja_template *t = NULL;
    struct err e;
    CHECK_EQ_INT(jinja_compile(deep, strlen(deep), "t", &t, &e), VLLMC_ERR_CAPACITY);
    // A long flat chain parses, and evaluation depth is bounded too.
    k = (size_t)sprintf(deep, "{{ 1");
    for (size_t i = 0; i < depth / 2 - 4; i++) {
        deep[k++] = '+';
        deep[k++] = '1';
    }
    strcpy(deep + k, " }}");
    CHECK_EQ_INT(jinja_compile(deep, strlen(deep), "t", &t, &e), VLLMC_OK);
    char *out = NULL;
    CHECK_EQ_INT(jinja_render(t, NULL, &out, NULL, &e), VLLMC_ERR_CAPACITY);
    jinja_free(t);
    free(deep);
}

// Every allocation failure during compile and render reports out of memory.
static void test_out_of_memory(void)
{
    const char *tpl = "{% set ns = namespace(x=[]) %}{% for m in messages %}"
                      "{% set ns.x = ns.x + [m.role | upper] %}{{ m | tojson }}{% endfor %}"
                      "{{ ns.x | join(',') }}{% macro f(a) %}{{ a }}{% endmacro %}{{ f(s) }}";
    json_error_t jerr;
    json_t *ctx = json_loads(base_ctx, 0, &jerr);
    bool done = false;
    for (long n = 1; n < 100000 && !done; n++) {
        struct jinja_template *t = NULL;
        struct err e;
        mem_fail_after(n);
        enum vllmc_status rc = jinja_compile(tpl, strlen(tpl), "t", &t, &e);
        char *out = NULL;
        if (!rc)
            rc = jinja_render(t, ctx, &out, NULL, &e);
        mem_fail_after(0);
        if (rc != VLLMC_OK && rc != VLLMC_ERR_NOMEM) {
            fprintf(stderr, "allocation %ld: status %d: %s\n", n, rc, e.msg);
            check_failures++;
        }
        done = rc == VLLMC_OK;
        mem_free(out);
        jinja_free(t);
    }
    CHECK(done);
    json_decref(ctx);
}

// One compiled template, many threads rendering it at once.
struct thread_arg {
    const struct jinja_template *t;
    json_t *ctx;
    const char *want;
    int failures;
};

static void *render_thread(void *p)
{
    struct thread_arg *a = p;
    for (int i = 0; i < 200; i++) {
        char *out = NULL;
        struct err e;
        if (jinja_render(a->t, a->ctx, &out, NULL, &e) || strcmp(out, a->want))
            a->failures++;
        mem_free(out);
    }
    return NULL;
}

static void test_concurrent_render(void)
{
    const char *tpl =
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "<{{ m.role }}>{{ m.content | trim }}{% endfor %}{{ ns.n }}{{ 'x' ~ s }}";
    const char *want = "<system>Sys<user>Hi<assistant>ok3xHello, World";
    struct jinja_template *t = NULL;
    struct err e;
    CHECK_EQ_INT(jinja_compile(tpl, strlen(tpl), "t", &t, &e), VLLMC_OK);
    json_error_t jerr;
    json_t *ctx = json_loads(base_ctx, 0, &jerr);
    pthread_t th[8];
    struct thread_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (struct thread_arg){.t = t, .ctx = ctx, .want = want};
        pthread_create(&th[i], NULL, render_thread, &args[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(args[i].failures, 0);
    }
    json_decref(ctx);
    jinja_free(t);
}

int main(int argc, char **argv)
{
    setenv("SOURCE_DATE_EPOCH", "1721995200", 1); // 2024-07-26 12:00 UTC
    static const struct check_case cases[] = {
        {"whitespace", test_whitespace},
        {"literals_and_printing", test_literals_and_printing},
        {"operators", test_operators},
        {"access", test_access},
        {"statements", test_statements},
        {"macros", test_macros},
        {"filters", test_filters},
        {"tojson", test_tojson},
        {"tests_and_methods", test_tests_and_methods},
        {"globals", test_globals},
        {"errors", test_errors},
        {"limits", test_limits},
        {"out_of_memory", test_out_of_memory},
        {"concurrent_render", test_concurrent_render},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
