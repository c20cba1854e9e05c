/*
 * test_chat.c — unit tests of the chat-template interpreter (lowbit/chat.h).
 *
 * Every expected string below was derived by hand from Jinja2 3.1 semantics
 * as transformers configures it (trim_blocks, lstrip_blocks,
 * keep_trailing_newline=False, sandboxed, loopcontrols) and Python's
 * str()/repr()/json.dumps — not copied from lowbit's output. The reasoning
 * for the less obvious ones is in the comments.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lowbit/chat.h"
#include "th.h"

static const char *MSGS3 =
    "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"u1\"},"
    "{\"role\":\"assistant\",\"content\":\"a1\"},{\"role\":\"user\",\"content\":\"u2\"}]";

/* Render tpl with messages/extra (NULL = "[]" / none) and compare. */
static void expect_(int line, const char *tpl, const char *msgs, const char *extra,
                    const char *want) {
    lb_chat_template *t = NULL;
    lb_status st = lb_chat_template_compile(tpl, &t);
    TH_CHECK_MSG(st == LB_OK, "line %d: compile: %s %s", line, lb_status_name(st), lb_last_error());
    if (st != LB_OK) return;
    char *out = NULL;
    size_t n = 0;
    st = lb_chat_template_render(t, msgs ? msgs : "[]", extra, &out, &n);
    TH_CHECK_MSG(st == LB_OK, "line %d: render: %s %s", line, lb_status_name(st), lb_last_error());
    if (st == LB_OK) {
        TH_CHECK_MSG(n == strlen(want) && memcmp(out, want, n) == 0,
                     "line %d:\n    got  \"%s\"\n    want \"%s\"", line, out, want);
    }
    free(out);
    lb_chat_template_free(t);
}
#define EXPECT(tpl, want) expect_(__LINE__, tpl, NULL, NULL, want)
#define EXPECT_M(tpl, msgs, extra, want) expect_(__LINE__, tpl, msgs, extra, want)

/* Expect failure with status `want` and `needle` in the message; `at_compile`
 * says whether compile or render must fail. */
static void expect_err_(int line, const char *tpl, const char *msgs, const char *extra,
                        const lb_chat_limits *lim, lb_status want, const char *needle) {
    lb_chat_template *t = NULL;
    lb_clear_error();
    lb_status st = lb_chat_template_compile(tpl, &t);
    if (st == LB_OK) {
        char *out = NULL;
        size_t n;
        st = lb_chat_template_render_ex(t, msgs ? msgs : "[]", extra, lim, &out, &n);
        TH_CHECK_MSG(st != LB_OK || out != NULL, "line %d: no output", line);
        if (st == LB_OK) TH_CHECK_MSG(0, "line %d: expected failure, got \"%s\"", line, out);
        TH_CHECK_MSG(out == NULL || st == LB_OK, "line %d: out not NULL on failure", line);
        free(out);
        lb_chat_template_free(t);
    } else {
        TH_CHECK_MSG(t == NULL, "line %d: template not NULL on failure", line);
    }
    TH_CHECK_MSG(st == want, "line %d: got %s, want %s (%s)", line, lb_status_name(st),
                 lb_status_name(want), lb_last_error());
    TH_CHECK_MSG(strstr(lb_last_error(), needle) != NULL, "line %d: message \"%s\" lacks \"%s\"",
                 line, lb_last_error(), needle);
}
#define EXPECT_ERR(tpl, st, needle) expect_err_(__LINE__, tpl, NULL, NULL, NULL, st, needle)
#define EXPECT_ERR_M(tpl, msgs, extra, st, needle)                             \
    expect_err_(__LINE__, tpl, msgs, extra, NULL, st, needle)
#define EXPECT_ERR_L(tpl, lim, st, needle) expect_err_(__LINE__, tpl, NULL, NULL, lim, st, needle)

/* ------------------------------------------------------------------------ */

static void test_whitespace_control(void) {
    /* trim_blocks: the newline right after %} goes */
    EXPECT("a\n{% if true %}\nb\n{% endif %}\nc", "a\nb\nc");
    /* lstrip_blocks: spaces/tabs before a block tag on its line go */
    EXPECT("a\n    {% if true %}\n    b\n\t{% endif %}\nc", "a\n    b\nc");
    /* ... but not before {{ }}; one trailing newline of the source goes */
    EXPECT("a\n  {{ 'x' }}\n", "a\n  x");
    EXPECT("x\n\n", "x\n");
    /* "-" strips all whitespace (incl. newlines) on that side */
    EXPECT("a  \n  {%- if true -%}  \n  b  {%- endif %}  c", "ab  c");
    EXPECT("a \n {{- 'x' -}} \n b", "axb");
    /* "+" disables lstrip / trim_blocks */
    EXPECT("a\n  {%+ if true %}x{% endif %}", "a\n  x");
    EXPECT("{% if true +%}\nx{% endif %}", "\nx");
    /* comments get lstrip and trim_blocks too */
    EXPECT("a\n  {# c #}\nb", "a\nb");
    EXPECT("a {#- c -#} b", "ab");
    /* line start = start of the template or right after a tag ending in \n */
    EXPECT("  {% if true %}x{% endif %}", "x");
    EXPECT("x  {% if true %}y{% endif %}", "x  y");
    EXPECT("{{ 'a' }}  {% if true %}b{% endif %}", "a  b");
    EXPECT("{% if true %}\n  {% if true %}\n  x\n  {% endif %}\n{% endif %}", "  x\n");
    /* CRLF and CR are normalised to \n */
    EXPECT("a\r\nb\r{{ 1 }}\r\n", "a\nb\n1");
    /* trim_blocks does not apply after }} */
    EXPECT("{{ 1 }}\n{{ 2 }}", "1\n2");
    /* raw blocks are verbatim; their own tags honour - */
    EXPECT("{% raw %}{{ x }}{% y %}{% endraw %}", "{{ x }}{% y %}");
    EXPECT("a {%- raw -%}  b  {%- endraw -%}  c", "abc");
    /* lstrip_blocks removes any Python whitespace (\\s: \\f, \\v, U+3000...)
     * between the line start and the tag, not only spaces and tabs */
    EXPECT("a\n\f\v\xe3\x80\x80{% if true %}x{% endif %}", "a\nx");
    EXPECT("a\n\fb{% if true %}x{% endif %}", "a\n\fbx");
    /* an opening comment/raw tag with nothing after it ends the template
     * (Jinja2's lexer stops at EOF without an error) */
    EXPECT("a{#", "a");
    EXPECT("a {#-", "a");
    EXPECT("a{% raw %}", "a");
    /* a typical multi-line template body */
    EXPECT("{% for x in [1, 2] %}\n  - {{ x }}\n{% endfor %}\n", "  - 1\n  - 2\n");
    EXPECT("{%- for x in [1, 2] -%}\n  [{{ x }}]\n{%- endfor %}", "[1][2]");
}

static void test_literals_and_printing(void) {
    EXPECT("{{ 'a\\tb' }}|{{ \"\\x41\\u00e9\\101\" }}|{{ 'it''s' }}|{{ 'a' \"b\" }}",
           "a\tb|AéA|its|ab");
    EXPECT("{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 1e3 }} {{ 1.5e-3 }}",
           "31 15 5 1000 1000.0 0.0015");
    EXPECT("{{ true }}{{ True }}{{ false }}{{ none }}{{ None }}", "TrueTrueFalseNoneNone");
    /* Python str() of floats: shortest round-trip, exponent outside 1e-4..1e16 */
    EXPECT("{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1/3 }} {{ 0.0001 }} {{ 0.00001 }} {{ 2.0 }}",
           "0.30000000000000004 1e+16 1000000000000000.0 0.3333333333333333 0.0001 1e-05 2.0");
    /* repr() inside containers: strings quoted, "it's" in double quotes */
    EXPECT("{{ ['a', \"it's\", 1, 1.5, none, true, (1,), (), {'k': 'v'}] }}",
           "['a', \"it's\", 1, 1.5, None, True, (1,), (), {'k': 'v'}]");
    EXPECT("{{ ['a\\nb', 'é'] }}", "['a\\nb', 'é']");
    EXPECT("{{ (1, 'x') }}{{ {} }}{{ [] }}", "(1, 'x'){}[]");
}

static void test_operators(void) {
    EXPECT("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 4 / 2 }}", "7 9 3.5 2.0");
    /* floor division and modulo follow the divisor's sign */
    EXPECT("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ -7 % 3 }} {{ 7.5 // 2 }}", "3 -4 -2 2 3.0");
    /* Jinja2's ** is left-associative, and unary minus binds tighter */
    EXPECT("{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 2 ** -1 }}", "64 4 0.5");
    EXPECT("{{ 'ab' ~ 1 ~ none ~ true ~ 1.5 ~ x }}", "ab1NoneTrue1.5");
    EXPECT("{{ 'ab' + 'cd' }}{{ [1] + [2] }}{{ 'ab' * 2 }}{{ [0] * 3 }}{{ true + 1 }}",
           "abcd[1, 2]abab[0, 0, 0]2");
    EXPECT("{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 == 1.0 }}{{ (1, 2) == [1, 2] }}{{ 'a' < 'b' }}",
           "TrueFalseTrueFalseTrue");
    EXPECT("{{ 'a' in 'cat' }}{{ 2 not in [1, 2] }}{{ 'k' in {'k': 0} }}{{ 1 in [] }}",
           "TrueFalseTrueFalse");
    /* and/or return an operand, not a bool */
    EXPECT("{{ 0 or 'x' }}|{{ 1 and [] }}|{{ not '' }}|{{ none or 0 }}", "x|[]|True|0");
    EXPECT("{{ 'y' if 1 else 'n' }}{{ 'y' if 0 else 'n' }}[{{ 'y' if 0 }}]", "yn[]");
    /* filters bind tighter than arithmetic */
    EXPECT("{{ [1, 2, 3]|length - 1 }}{{ -3|abs }}{{ 'a' ~ 'b'|upper }}", "23aB");
}

static void test_access(void) {
    const char *m = "[{\"role\":\"user\",\"content\":\"Hi\",\"items\":\"I\"}]";
    EXPECT_M("{{ messages[0].role }}{{ messages[0]['content'] }}{{ messages[-1].role }}"
             "[{{ messages[5] }}][{{ messages[0].nope }}]",
             m, NULL, "userHiuser[][]");
    /* subscript prefers the item, attribute syntax prefers the dict method */
    EXPECT_M("{{ messages[0]['items'] }}{{ (messages[0].items()|list)[2] }}", m, NULL,
             "I('items', 'I')");
    EXPECT("{{ 'héllo'[1:3] }}{{ 'abc'[::-1] }}{{ [1, 2, 3, 4][::2] }}{{ [1, 2, 3][-2:] }}"
           "[{{ 'abc'[5:] }}]{{ 'abcdef'[5:1:-2] }}{{ 'héllo'[1] }}",
           "élcba[1, 3][2, 3][]fdé");
    EXPECT("{{ {'a': {'b': [10, 20]}}.a.b[1] }}{{ [[1, 2]].0.1 }}", "202");
    EXPECT("[{{ none.foo }}][{{ 1.foo }}]", "[][]");
}

static void test_undefined(void) {
    EXPECT("[{{ x }}]{{ x is defined }}{{ x is undefined }}{{ x|default('d') }}{{ x|length }}"
           "{% for i in x %}no{% endfor %}{{ not x }}{{ x == x }}",
           "[]FalseTrued0TrueTrue");
    EXPECT("{{ 'a' ~ x ~ 'b' }}|{{ x|string }}|{{ x|trim }}|{{ 'a' in x }}", "ab|||False");
    EXPECT_ERR("{{ foo + 1 }}", LB_ERR_INVALID_ARG, "line 1:8: 'foo' is undefined");
    EXPECT_ERR("{{ foo.bar }}", LB_ERR_INVALID_ARG, "'foo' is undefined");
    EXPECT_ERR("{{ foo() }}", LB_ERR_INVALID_ARG, "'foo' is undefined");
    EXPECT_ERR("{{ {}.a.b }}", LB_ERR_INVALID_ARG, "'dict object' has no attribute 'a'");
    EXPECT_ERR("{{ [][0].role }}", LB_ERR_INVALID_ARG, "list object has no element 0");
}

static void test_for_loops(void) {
    /* index index0 revindex revindex0 first last length item */
    EXPECT("{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
           "{{ loop.revindex0 }}{{ loop.first|int }}{{ loop.last|int }}{{ loop.length }}{{ x }} "
           "{% endfor %}",
           "1032103a 2121003b 3210013c ");
    EXPECT("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}",
           "-2;1-3;2-;");
    EXPECT("{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{% endfor %}", "aba");
    EXPECT("{% for x in [1, 1, 2] %}{{ loop.changed(x) }}{% endfor %}", "TrueFalseTrue");
    EXPECT("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }} {% else %}none"
           "{% endfor %}",
           "2/2 4/2 ");
    EXPECT("{% for x in [] %}a{% else %}empty{% endfor %}", "empty");
    EXPECT("{% for x in [1] if x > 5 %}a{% else %}filtered{% endfor %}", "filtered");
    /* Jinja2 resets its else flag at the end of the body: else also runs
     * when no iteration finished normally */
    EXPECT("{% for x in [1, 2] %}{% break %}{% else %}E{% endfor %}", "E");
    EXPECT("{% for x in [1, 2] %}{{ x }}{% if x == 2 %}{% break %}{% endif %}{% else %}E"
           "{% endfor %}",
           "12");
    EXPECT("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", "a=1;b=2;");
    EXPECT("{% for k, v in {'x': 1}|items %}{{ k }}{{ v }}{% endfor %}", "x1");
    /* an empty dict iterates over nothing (found by fuzz_jinja: memcpy from
     * its NULL key array, undefined behaviour) */
    EXPECT("{% for k in {} %}{{ k }}{% else %}none{% endfor %}", "none");
    EXPECT("{% for k, v in {} %}e{% endfor %}.", ".");
    EXPECT("{% for a, b in [[1, 2], [3, 4]] %}{{ a * b }},{% endfor %}", "2,12,");
    EXPECT("{% for (a, b) in [(1, 2)] %}{{ a + b }}{% endfor %}", "3");
    EXPECT("{% for c in 'hé' %}[{{ c }}]{% endfor %}{% for k in {'p': 1, 'q': 2} %}{{ k }}"
           "{% endfor %}",
           "[h][é]pq");
    EXPECT("{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}"
           "{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}",
           "0246");
    /* loop is the innermost loop */
    EXPECT("{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{% endfor %}{% endfor %}",
           "1212");
    EXPECT("{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}{{ outer.index }}{{ b }}"
           "{% endfor %}{% endfor %}",
           "1x1y2x2y");
    EXPECT("{{ range(3)|list }}{{ range(1, 10, 4)|list }}{{ range(5, 0, -2)|list }}",
           "[0, 1, 2][1, 5, 9][5, 3, 1]");
}

static void test_scoping_and_set(void) {
    /* assignments inside a loop body stay inside (each iteration starts
     * from the outer value) */
    EXPECT("{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}",
           "01020");
    EXPECT("{% if true %}{% set y = 3 %}{% endif %}{{ y }}", "3");
    EXPECT("{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}"
           "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }}{{ ns.s }}",
           "6123");
    EXPECT("{% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }}{{ ns.b is defined }}", "1False");
    EXPECT("{% set ns = namespace({'k': 2}, j=3) %}{{ ns.k + ns.j }}", "5");
    EXPECT("{% set a, b = 'xy' %}{{ b }}{{ a }}{% set c = 1, 2 %}{{ c }}", "yx(1, 2)");
    EXPECT("{% set v %} a{{ 1 }} {% endset %}[{{ v }}]", "[ a1 ]");
    EXPECT("{% set v | trim | upper %} ab {% endset %}{{ v }}", "AB");
    /* top-level set may shadow a context variable (Llama 3.1 does this) */
    EXPECT_M("{% set messages = messages[1:] %}{{ messages|length }}", MSGS3, NULL, "3");
    EXPECT("{% with a = 2, b = 3 %}{{ a * b }}{% endwith %}[{{ a }}]", "6[]");
    EXPECT_ERR("{% set x = 1 %}{% set x.y = 2 %}", LB_ERR_INVALID_ARG,
               "cannot assign attribute on non-namespace object");
}

static void test_macros(void) {
    EXPECT("{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}"
           "{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet('Cy', punct='?') }}",
           "Hello, Ann! Hi, Bob! Hello, Cy?");
    /* a missing argument without default is undefined */
    EXPECT("{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}", "[]");
    /* macros see top-level variables at call time */
    EXPECT("{% macro m() %}{{ v }}{% endmacro %}{% set v = 7 %}{{ m() }}", "7");
    EXPECT("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, x=3) }}",
           "(1, 2){'x': 3}");
    EXPECT("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
           "{% call wrap('b') %}bold{% endcall %}",
           "<b>bold</b>");
    EXPECT("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
           "{% call(v) each([1, 2]) %}({{ v }}){% endcall %}",
           "(1)(2)");
    EXPECT("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}",
           "321");
    EXPECT_ERR("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", LB_ERR_INVALID_ARG,
               "takes not more than 1 argument");
    EXPECT_ERR("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", LB_ERR_INVALID_ARG,
               "no keyword argument 'b'");
}

static void test_strftime_now(void) {
    /* Llama 3.2 uses strftime_now when date_string is not given */
    EXPECT("{{ strftime_now is defined }}{{ strftime_now('%Y')|length }}{{ strftime_now('') }}",
           "True4");
    EXPECT("{% if not date_string is defined %}{% if strftime_now is defined %}"
           "{% set date_string = strftime_now('%d %b %Y') %}{% endif %}{% endif %}"
           "{{ date_string|length in [10, 11] }}",
           "True");
    EXPECT_ERR("{{ strftime_now(5) }}", LB_ERR_INVALID_ARG, "expected str");
}

static void test_other_statements(void) {
    EXPECT("{% filter upper %}ab{{ 'c' }}{% endfilter %}", "ABC");
    EXPECT("{% generation %}ok{% endgeneration %}", "ok");
    EXPECT("{% print 'a', 1 %}", "a1");
    EXPECT("{% if 0 %}a{% elif none %}b{% elif 'x' %}c{% else %}d{% endif %}", "c");
    EXPECT("{% if 0 %}a{% elif 0 %}b{% else %}d{% endif %}", "d");
    EXPECT("{% if 1, %}t{% endif %}", "t");
}

static void test_tests(void) {
    EXPECT("{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1.0 is float }}"
           "{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}"
           "{{ 1 is iterable }}{{ none is none }}{{ x is undefined }}{{ 3 is odd }}"
           "{{ 4 is divisibleby 2 }}{{ 1 is sameas 1 }}{{ false is sameas false }}"
           "{{ true is true }}{{ 1 is true }}{{ true is boolean }}{{ 'ab' is lower }}"
           "{{ 2 is in [1, 2] }}{{ 2 is gt 1 }}{{ 'upper' is filter }}",
           "TrueTrueFalseTrueTrueTrueTrueTrueFalseTrueTrueTrueTrueTrueTrueTrueFalseTrueTrue"
           "TrueTrueTrue");
    EXPECT("{{ none is not none }}{{ 1 is not string }}{{ 2 is eq 2 }}{{ 2 is ne 2 }}"
           "{{ 'a' is sequence }}{{ {} is sequence }}{{ 1 is sequence }}{{ range is callable }}"
           "{{ 2 is le 2 }}{{ 2 is lt 2 }}{{ 'odd' is test }}{{ 'x' is upper }}",
           "FalseTrueTrueFalseTrueTrueFalseTrueTrueFalseTrueFalse");
}

static void test_filters(void) {
    EXPECT("[{{ '  a b \\n'|trim }}]{{ 'héllo'|length }}{{ [1, 2]|count }}{{ {'a': 1}|length }}"
           "{{ 'xxaxx'|trim('x') }}",
           "[a b]521a");
    EXPECT("{{ {'a': [1, 2.5, 'é\\n\"'], 'b': none, 'c': true}|tojson }}",
           "{\"a\": [1, 2.5, \"é\\n\\\"\"], \"b\": null, \"c\": true}");
    EXPECT("{{ {'a': [1, {}], 'b': []}|tojson(indent=2) }}",
           "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
    EXPECT("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true, separators=(',', ':')) }}",
           "{\"a\":2,\"b\":1}");
    EXPECT("{{ 'é😀'|tojson(ensure_ascii=true) }}{{ 'é'|tojson }}{{ '\\x01'|tojson }}",
           "\"\\u00e9\\ud83d\\ude00\"\"é\"\"\\u0001\"");
    EXPECT("{{ {1: 'a', none: 'b', true: 'c', 1.5: 'd'}|tojson }}",
           "{\"1\": \"c\", \"null\": \"b\", \"1.5\": \"d\"}");
    EXPECT("{{ [1, 2]|tojson(indent='\\t') }}", "[\n\t1,\n\t2\n]");
    EXPECT_M("{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(', ') }}"
             "|{{ messages|rejectattr('role', 'in', ['user'])|map(attribute='role')|list }}"
             "|{{ messages|map(attribute='name', default='-')|join }}"
             "|{{ messages|join('/', attribute='role') }}",
             MSGS3, NULL, "u1, u2|['system', 'assistant']|----|system/user/assistant/user");
    EXPECT_M("{{ messages|sort(attribute='role')|map(attribute='content')|join(',') }}", MSGS3, NULL,
             "a1,S,u1,u2");
    EXPECT("{{ [1, 2, 3, 4, 5]|select('odd')|list }}{{ [0, 1, '', none, 'x']|select|list }}"
           "{{ [1, 2, 3]|reject('==', 2)|list }}{{ [1, 2]|map('string')|list }}",
           "[1, 3, 5][1, 'x'][1, 3]['1', '2']");
    EXPECT("{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}{{ 'abc'|first }}{{ []|first is defined }}",
           "13aFalse");
    EXPECT("{{ 'hEllo wOrld'|upper }} {{ 'HeLLo'|lower }} {{ 'hELLO world'|capitalize }} "
           "{{ 'hello big-world (x'|title }}",
           "HELLO WORLD hello Hello world Hello Big-World (X");
    EXPECT("{{ 'a-b-c'|replace('-', '+') }}{{ 'aaaa'|replace('a', 'b', 2) }}", "a+b+cbbaa");
    EXPECT("{{ none|default('d') }}{{ ''|default('d', true) }}{{ x|d('u') }}", "Nonedu");
    /* '3.9'|int goes through float; int(base=16) accepts the 0x prefix */
    EXPECT("{{ 12|string ~ 'x' }}{{ '42'|int + 1 }}{{ '3.9'|int }}{{ 'x'|int(7) }}"
           "{{ '0x1A'|int(base=16) }}{{ '2.5'|float * 2 }}{{ 'n'|float }}{{ -3|abs }}",
           "12x4337265.00.03");
    /* Python round: half to even on the exact binary value; ints stay ints */
    EXPECT("{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 1234.5|round(-2) }} "
           "{{ 3|round }} {{ 2.1|round(method='ceil') }} {{ 2.9|round(method='floor') }}",
           "2.0 4.0 2.67 1200.0 3 3.0 2.0");
    /* unique/sort/dictsort are case-insensitive by default */
    EXPECT("{{ ['b', 'A', 'a', 'B']|unique|list }}{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'c']|sort }}"
           "{{ [3, 1, 2]|sort(reverse=true) }}{{ 'abc'|reverse }}{{ [1, 2, 3]|reverse|list }}"
           "{{ {'b': 1, 'A': 2}|dictsort }}",
           "['b', 'A'][1, 2, 3]['A', 'b', 'c'][3, 2, 1]cba[3, 2, 1][('A', 2), ('b', 1)]");
    EXPECT("{{ {'a': 2, 'b': 1}|dictsort(by='value') }}", "[('b', 1), ('a', 2)]");
    EXPECT("{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|"
           "{{ 'a\\n\\nb'|indent('> ', blank=true) }}",
           "a\n  b\n\n  c|  a\n  b|a\n> \n> b");
    EXPECT("{{ [3, 1, 2]|max }}{{ ['b', 'A']|min }}{{ [1, 2, 3]|sum }}{{ [[1], [2]]|sum(start=[]) }}",
           "3A6[1, 2]");
    EXPECT("{{ '<b>'|safe }}{{ '<a href=\"x\">&\\''|e }}",
           "<b>&lt;a href=&#34;x&#34;&gt;&amp;&#39;");
    EXPECT("{{ 'one two, three'|wordcount }}[{{ 'ab'|center(6) }}]{{ '%s=%d'|format('a', 5) }}",
           "3[  ab  ]a=5");
    EXPECT("{{ 'ab'|list }}{{ {'k': 1}|list }}{{ {'k': 1}|items|list }}", "['a', 'b']['k'][('k', 1)]");
    EXPECT("{{ [1, 2]|attr('count') is callable }}{{ {'a': 1}|attr('a') is defined }}", "TrueFalse");
}

static void test_methods(void) {
    EXPECT("{{ '  ab  '.strip() }}|{{ 'xxabxx'.strip('x') }}|{{ '\\n\\nab'.lstrip('\\n') }}|"
           "{{ 'ab  '.rstrip() }}|",
           "ab|ab|ab|ab|");
    EXPECT("{{ 'a,b,,c'.split(',') }}{{ '  a  b '.split() }}{{ 'a b c'.split(' ', 1) }}"
           "{{ 'a b c'.rsplit(' ', 1) }}{{ 'a\\nb\\r\\nc'.splitlines() }}",
           "['a', 'b', '', 'c']['a', 'b']['a', 'b c']['a b', 'c']['a', 'b', 'c']");
    EXPECT("{{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('x', 'lo')) }}"
           "{{ 'Hello'.replace('l', 'L') }}{{ 'Hello'.upper() }}{{ 'Hello'.lower() }}"
           "{{ 'hello world'.title() }}{{ 'héllo'.find('l') }}{{ 'hello'.count('l') }}",
           "TrueTrueHeLLoHELLOhelloHello World22");
    EXPECT("{{ '{}-{name}'.format(1, name='n') }}|{{ '{0:>4}|{1:.2f}'.format('a', 3.14159) }}",
           "1-n|   a|3.14");
    EXPECT("{% set d = {'a': 1} %}{{ d.get('a') }}{{ d.get('z', 0) }}{{ d.get('z') }}"
           "{{ d.keys()|list }}{{ d.values()|list }}",
           "10None['a'][1]");
    EXPECT("{{ [1, 2, 3].index(2) }}{{ [1, 1].count(1) }}{{ ', '.join(['a', 'b']) }}", "12a, b");
    EXPECT("{{ '%s-%05.1f-%x-%r' % ('a', 2.25, 255, 'q') }}{{ '%(k)s' % {'k': 1} }}",
           "a-002.2-ff-'q'1");
    /* transformers' sandbox is immutable */
    EXPECT_ERR("{% set l = [] %}{{ l.append(1) }}", LB_ERR_INVALID_ARG,
               "access to attribute 'append' of 'list' object is unsafe.");
    EXPECT_ERR("{% set d = {} %}{{ d.update({'a': 1}) }}", LB_ERR_INVALID_ARG, "unsafe");
}

static void test_runtime_errors(void) {
    EXPECT_ERR("{{ raise_exception('bad role') }}", LB_ERR_INVALID_ARG,
               "chat template line 1:4: raise_exception: bad role");
    EXPECT_ERR("{{ 'a' + 1 }}", LB_ERR_INVALID_ARG, "can only concatenate str (not \"int\") to str");
    EXPECT_ERR("{{ 1 / 0 }}", LB_ERR_INVALID_ARG, "division by zero");
    EXPECT_ERR("{{ 1 < 'a' }}", LB_ERR_INVALID_ARG,
               "'<' not supported between instances of 'int' and 'str'");
    EXPECT_ERR("{{ 9223372036854775807 + 1 }}", LB_ERR_INVALID_ARG, "integer overflow");
    EXPECT_ERR("{{ 1|batch(2) }}", LB_ERR_UNSUPPORTED, "'batch' filter is not supported");
    EXPECT_ERR("{{ 'a'|indent }}{{ x|indent }}", LB_ERR_INVALID_ARG, "'x' is undefined");
    EXPECT_ERR("{% for a, b in [1] %}{% endfor %}", LB_ERR_INVALID_ARG, "not iterable");
    EXPECT_ERR("{% for a, b in ['abc'] %}{% endfor %}", LB_ERR_INVALID_ARG, "too many values to unpack");
}

static void test_syntax_errors(void) {
    EXPECT_ERR("a\n{% if %}", LB_ERR_FORMAT,
               "line 2:7: Expected an expression, got 'end of statement block'");
    EXPECT_ERR("{% for x in y %}", LB_ERR_FORMAT, "The innermost block that needs to be closed is 'for'");
    EXPECT_ERR("{% foo %}", LB_ERR_FORMAT, "line 1:4: Encountered unknown tag 'foo'");
    EXPECT_ERR("{% if x %}{% endfor %}", LB_ERR_FORMAT, "unknown tag 'endfor'");
    EXPECT_ERR("{% include 'x' %}", LB_ERR_UNSUPPORTED, "'include' tag is not supported");
    EXPECT_ERR("{% for x in y recursive %}{% endfor %}", LB_ERR_UNSUPPORTED, "recursive");
    EXPECT_ERR("{{ 'abc }}", LB_ERR_FORMAT, "line 1:4: unexpected char");
    EXPECT_ERR("ab\n  {# abc", LB_ERR_FORMAT, "line 2:3: Missing end of comment tag");
    EXPECT_ERR("{{ 1|nope }}", LB_ERR_FORMAT, "line 1:6: No filter named 'nope'.");
    EXPECT_ERR("{{ 1 is nope }}", LB_ERR_FORMAT, "No test named 'nope'.");
    EXPECT_ERR("{% break %}", LB_ERR_FORMAT, "'break' outside loop");
    EXPECT_ERR("{{ (1 }}", LB_ERR_FORMAT, "unexpected '}'");
    EXPECT_ERR("{{ 1 ]}}", LB_ERR_FORMAT, "unexpected ']'");
    EXPECT_ERR("{% set 1 = 2 %}", LB_ERR_FORMAT, "can't assign");
    EXPECT_ERR("{% macro m(a=1, b) %}{% endmacro %}", LB_ERR_FORMAT, "non-default argument");
    EXPECT_ERR("{{ 99999999999999999999 }}", LB_ERR_FORMAT, "integer literal too large");
    EXPECT_ERR("{{ '\\N{BULLET}' }}", LB_ERR_FORMAT, "not supported");
    EXPECT_ERR("{{ x is none is none }}", LB_ERR_FORMAT, "cannot chain multiple tests");
    EXPECT_ERR("\xff", LB_ERR_FORMAT, "invalid UTF-8 at byte 0");
}

/* ---- limits ------------------------------------------------------------- */

static void test_limits(void) {
    /* infinite macro recursion stops at the depth limit */
    EXPECT_ERR("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", LB_ERR_RANGE,
               "recursion depth limit");
    /* too deeply nested source */
    char deep[2048];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{{ ");
    for (int i = 0; i < 300; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 300; i++) deep[k++] = ')';
    snprintf(deep + k, sizeof deep - k, " }}");
    EXPECT_ERR(deep, LB_ERR_RANGE, "nested too deeply");
    /* long left-deep chains are bounded too (a + a + ... builds depth) */
    char chain[4096];
    k = (size_t)snprintf(chain, sizeof chain, "{{ 1");
    for (int i = 0; i < 300; i++) k += (size_t)snprintf(chain + k, sizeof chain - k, " + 1");
    snprintf(chain + k, sizeof chain - k, " }}");
    EXPECT_ERR(chain, LB_ERR_RANGE, "nested too deeply");
    /* ... while 100 terms are fine */
    k = (size_t)snprintf(chain, sizeof chain, "{{ 1");
    for (int i = 0; i < 99; i++) k += (size_t)snprintf(chain + k, sizeof chain - k, " + 1");
    snprintf(chain + k, sizeof chain - k, " }}");
    EXPECT(chain, "100");

    lb_chat_limits lim = {0};
    lim.max_steps = 100000;
    EXPECT_ERR_L("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                 &lim, LB_ERR_RANGE, "evaluation step limit (100000) exceeded");
    /* string work is charged per byte: a big substring search in a loop */
    EXPECT_ERR_L("{% set s = 'x' * 1000000 %}{% for i in range(1000) %}{{ 'y' in s }}{% endfor %}",
                 &lim, LB_ERR_RANGE, "evaluation step limit");
    /* indexing a non-ASCII string costs O(n) per access: charged */
    EXPECT_ERR_L("{% set s = '\xc3\xa9' * 100000 %}{% for i in range(100000) %}{{ s[i] }}{% endfor %}",
                 &lim, LB_ERR_RANGE, "evaluation step limit");
    /* right-to-left searches are linear (no O(n*m) backward memcmp) */
    EXPECT("{{ ('a' * 100000).rsplit('a' * 50000 + 'b')|length }}{{ ('a' * 100000).rfind('a' * 50000 + 'b') }}",
           "1-1");
    EXPECT_ERR("{{ '%99999999999999999999999s' % 'x' }}", LB_ERR_RANGE, "format width too large");
    lb_chat_limits lo = {0};
    lo.max_output_bytes = 1000;
    EXPECT_ERR_L("{% for i in range(1000) %}{{ 'xxxxxxxxxx' }}{% endfor %}", &lo, LB_ERR_RANGE,
                 "exceeds the limit of 1000");
    lb_chat_limits lm = {0};
    lm.max_memory_bytes = 4 << 20;
    EXPECT_ERR_L("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{% set t = s ~ i %}{% endfor %}",
                 &lm, LB_ERR_RANGE, "memory limit of 4194304 bytes exceeded");
    EXPECT_ERR("{{ range(200000)|length }}", LB_ERR_RANGE, "MAX_RANGE (100000)");
    EXPECT_ERR("{{ 'ab' * 100000000000 }}", LB_ERR_RANGE, "exceeds the size limit");
    EXPECT_ERR("{{ [1] * 100000000000 }}", LB_ERR_RANGE, "exceeds the size limit");
    EXPECT_ERR("{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}", LB_ERR_RANGE,
               "nested too deeply");
    /* a JSON message nested 300 levels deep */
    char *dj = malloc(4096);
    k = (size_t)snprintf(dj, 4096, "[{\"role\":\"user\",\"content\":\"x\",\"d\":");
    for (int i = 0; i < 300; i++) dj[k++] = '[';
    for (int i = 0; i < 300; i++) dj[k++] = ']';
    snprintf(dj + k, 4096 - k, "}]");
    EXPECT_ERR_M("{{ messages|length }}", dj, NULL, LB_ERR_RANGE, "JSON nested deeper than");
    free(dj);
    /* a source larger than LB_CHAT_MAX_TEMPLATE_BYTES */
    size_t big = (size_t)LB_CHAT_MAX_TEMPLATE_BYTES + 10;
    char *bt = malloc(big + 1);
    memset(bt, 'a', big);
    bt[big] = 0;
    EXPECT_ERR(bt, LB_ERR_RANGE, "exceeds the limit");
    free(bt);
}

/* ---- API ---------------------------------------------------------------- */

static void test_json_inputs(void) {
    /* Python's int/float distinction survives cJSON */
    EXPECT_M("{{ a }} {{ b }} {{ c }} {{ d }} {{ a is integer }}{{ b is float }}{{ {'x': b}|tojson }}",
             "[]", "{\"a\": 1, \"b\": 1.0, \"c\": 1e3, \"d\": -0}", "1 1.0 1000.0 0 TrueTrue{\"x\": 1.0}");
    /* duplicate keys: the last value wins (json.loads) */
    EXPECT_M("{{ a }}", "[]", "{\"a\": 1, \"a\": 2}", "2");
    /* transformers always passes tools/documents (None) and
     * add_generation_prompt */
    EXPECT("{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}{{ bos_token is defined }}",
           "TrueTrueFalseFalse");
    EXPECT_M("{{ messages[0].content }}", "[{\"role\":\"user\",\"content\":\"é\\u00e9\\ud83d\\ude00\\n\"}]",
             NULL, "éé😀\n");
    /* OpenAI content parts are flattened, joined with \n */
    EXPECT_M(lb_chat_chatml_template,
             "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
             "{\"type\":\"text\",\"text\":\"b\"}]}]",
             NULL, "<|im_start|>user\na\nb<|im_end|>\n");
    EXPECT_M("[{{ messages[0].content }}]", "[{\"role\":\"user\",\"content\":[]}]", NULL, "[]");
    EXPECT_M("{{ messages[0].content is none }}", "[{\"role\":\"assistant\",\"content\":null}]", NULL, "True");
    EXPECT_ERR_M("x", "[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]",
                 NULL, LB_ERR_UNSUPPORTED, "messages[0].content[0] has type 'image_url'");
    EXPECT_ERR_M("x", "[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]", NULL,
                 LB_ERR_INVALID_ARG, "no string \"text\"");
    EXPECT_ERR_M("x", "[1]", NULL, LB_ERR_INVALID_ARG, "messages_json[0]: not a JSON object");
    EXPECT_ERR_M("x", "{}", NULL, LB_ERR_INVALID_ARG, "not a JSON array");
    EXPECT_ERR_M("x", "[{\"role\": }]", NULL, LB_ERR_INVALID_ARG, "invalid JSON near byte");
    EXPECT_ERR_M("x", "[]", "[]", LB_ERR_INVALID_ARG, "extra_json: not a JSON object");
    EXPECT_ERR_M("x", "[]", "{\"messages\": []}", LB_ERR_INVALID_ARG, "must not set \"messages\"");
    EXPECT_ERR_M("x", "[]", "{\"a\": 99999999999999999999}", LB_ERR_UNSUPPORTED, "64-bit range");
    EXPECT_ERR_M("x", "[{\"content\":\"a\\u0000b\"}]", NULL, LB_ERR_UNSUPPORTED, "\\u0000");
    EXPECT_ERR_M("x", "[\"\xc3\"]", NULL, LB_ERR_INVALID_ARG, "invalid UTF-8 at byte 2");
}

static void test_api(void) {
    lb_chat_template *t = (lb_chat_template *)1;
    TH_CHECK_FAILS(lb_chat_template_compile(NULL, &t), LB_ERR_INVALID_ARG);
    TH_CHECK(t == NULL);
    TH_CHECK_FAILS(lb_chat_template_compile("x", NULL), LB_ERR_INVALID_ARG);
    TH_CHECK_OK(lb_chat_template_compile("{{ 'a\\x00b' }}", &t));
    char *out = (char *)1;
    size_t n = 0;
    TH_CHECK_FAILS(lb_chat_template_render(t, NULL, NULL, &out, &n), LB_ERR_INVALID_ARG);
    TH_CHECK(out == NULL);
    /* NUL bytes in the output are length-tracked */
    TH_CHECK_OK(lb_chat_template_render(t, "[]", NULL, &out, &n));
    TH_CHECK_INT(n, 3);
    TH_CHECK(out && memcmp(out, "a\0b", 4) == 0);
    free(out);
    lb_chat_template_free(t);
    lb_chat_template_free(NULL);

    /* lb_chat_apply: ChatML fallback, documented text */
    const char *m = "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Hi\"}]";
    TH_CHECK_OK(lb_chat_apply(NULL, m, true, NULL, NULL, NULL, &out));
    TH_CHECK_STR(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                      "<|im_start|>assistant\n");
    free(out);
    TH_CHECK_OK(lb_chat_apply("", m, false, NULL, NULL, NULL, &out));
    TH_CHECK_STR(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
    free(out);
    /* bos/eos: NULL gives none (printed "None"), as transformers passes an
     * unset special token; the explicit add_generation_prompt wins over
     * extra_json */
    TH_CHECK_OK(lb_chat_apply("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ x }}", "[]",
                              true, NULL, "</s>", "{\"x\": 5, \"add_generation_prompt\": false}", &out));
    TH_CHECK_STR(out, "None|</s>|True|5");
    free(out);
    TH_CHECK_FAILS(lb_chat_apply("{{ 'a\\x00' }}", "[]", false, "<s>", NULL, NULL, &out),
                   LB_ERR_FORMAT);
    TH_CHECK(out == NULL);
    TH_CHECK_FAILS(lb_chat_apply("{% if %}", "[]", false, NULL, NULL, NULL, &out), LB_ERR_FORMAT);

    lb_chat_limits d = lb_chat_limits_default();
    TH_CHECK(d.max_output_bytes == (size_t)64 << 20);
    TH_CHECK(d.max_memory_bytes == (size_t)256 << 20);
    TH_CHECK(d.max_steps == 20000000ull);
    TH_CHECK(d.max_depth == 512);
}

/* ---- real templates written from public knowledge ------------------------ */

/* Mistral-7B-Instruct-v0.1's template */
static const char *MISTRAL_V01 =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant "
    "roles are supported!') }}{% endif %}{% endfor %}";

static void test_mistral_inst(void) {
    const char *ex = "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}";
    EXPECT_M(MISTRAL_V01,
             "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello\"},"
             "{\"role\":\"user\",\"content\":\"How are you?\"}]",
             ex, "<s>[INST] Hi [/INST]Hello</s>[INST] How are you? [/INST]");
    EXPECT_ERR_M(MISTRAL_V01, "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}]",
                 ex, LB_ERR_INVALID_ARG,
                 "raise_exception: Conversation roles must alternate user/assistant/user/assistant/...");
    /* a system message first fails the alternation check first */
    EXPECT_ERR_M(MISTRAL_V01, "[{\"role\":\"system\",\"content\":\"s\"}]", ex, LB_ERR_INVALID_ARG,
                 "Conversation roles must alternate");
    /* index 1, role tool: alternation holds (not user at odd index), then
     * the role check fires */
    EXPECT_ERR_M(MISTRAL_V01, "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"tool\",\"content\":\"b\"}]",
                 ex, LB_ERR_INVALID_ARG, "Only user and assistant roles are supported!");
}

/* Gemma's template */
static const char *GEMMA =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
    "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}"
    "{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}";

static void test_gemma(void) {
    EXPECT_M(GEMMA,
             "[{\"role\":\"user\",\"content\":\"Hi \"},{\"role\":\"assistant\",\"content\":\" Yo\"}]",
             "{\"bos_token\":\"<bos>\",\"add_generation_prompt\":true}",
             "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n"
             "<start_of_turn>model\n");
    EXPECT_ERR_M(GEMMA, "[{\"role\":\"system\",\"content\":\"s\"}]", "{\"bos_token\":\"<bos>\"}",
                 LB_ERR_INVALID_ARG, "System role not supported");
}

/* Llama-3.1-Instruct's template (tools, date_string, custom_tools, slicing,
 * tojson(indent=4), | items, raise_exception) */
static const char *LLAMA31 =
    "{{- bos_token }}\n"
    "{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n"
    "{%- if not tools_in_user_message is defined %}\n    {%- set tools_in_user_message = true %}\n{%- endif %}\n"
    "{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n{%- endif %}\n"
    "{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n\n"
    "{#- This block extracts the system message, so we can slot it into the right place. #}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n\n"
    "{#- System message + builtin tools #}\n"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{%- if builtin_tools is defined or tools is not none %}\n    {{- \"Environment: ipython\\n\" }}\n{%- endif %}\n"
    "{%- if builtin_tools is defined %}\n"
    "    {{- \"Tools: \" + builtin_tools | reject('equalto', 'code_interpreter') | join(\", \") + \"\\n\\n\"}}\n"
    "{%- endif %}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{%- if tools is not none and not tools_in_user_message %}\n"
    "    {{- \"You have access to the following functions. To call a function, please respond with JSON for a function call.\" }}\n"
    "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.' }}\n"
    "    {{- \"Do not use variables.\\n\\n\" }}\n"
    "    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n        {{- \"\\n\\n\" }}\n    {%- endfor %}\n"
    "{%- endif %}\n"
    "{{- system_message }}\n"
    "{{- \"<|eot_id|>\" }}\n\n"
    "{#- Custom tools are passed in a user message with some extra guidance #}\n"
    "{%- if tools_in_user_message and not tools is none %}\n"
    "    {#- Extract the first user message so we can plug it in here #}\n"
    "    {%- if messages | length != 0 %}\n"
    "        {%- set first_user_message = messages[0]['content']|trim %}\n"
    "        {%- set messages = messages[1:] %}\n"
    "    {%- else %}\n"
    "        {{- raise_exception(\"Cannot put tools in the first user message when there's no first user message!\") }}\n"
    "{%- endif %}\n"
    "    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n"
    "    {{- \"Given the following functions, please respond with a JSON for a function call \" }}\n"
    "    {{- \"with its proper arguments that best answers the given prompt.\\n\\n\" }}\n"
    "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.' }}\n"
    "    {{- \"Do not use variables.\\n\\n\" }}\n"
    "    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n        {{- \"\\n\\n\" }}\n    {%- endfor %}\n"
    "    {{- first_user_message + \"<|eot_id|>\"}}\n"
    "{%- endif %}\n\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
    "        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n"
    "    {%- elif 'tool_calls' in message %}\n"
    "        {%- if not message.tool_calls|length == 1 %}\n"
    "            {{- raise_exception(\"This model only supports single tool-calls at once!\") }}\n"
    "        {%- endif %}\n"
    "        {%- set tool_call = message.tool_calls[0].function %}\n"
    "        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}\n"
    "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
    "            {{- \"<|python_tag|>\" + tool_call.name + \".call(\" }}\n"
    "            {%- for arg_name, arg_val in tool_call.arguments | items %}\n"
    "                {{- arg_name + '=\"' + arg_val + '\"' }}\n"
    "                {%- if not loop.last %}\n                    {{- \", \" }}\n                {%- endif %}\n"
    "                {%- endfor %}\n"
    "            {{- \")\" }}\n"
    "        {%- else  %}\n"
    "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
    "            {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n"
    "            {{- '\"parameters\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- \"}\" }}\n"
    "        {%- endif %}\n"
    "        {%- if builtin_tools is defined %}\n"
    "            {#- This means we're in ipython mode #}\n"
    "            {{- \"<|eom_id|>\" }}\n"
    "        {%- else %}\n            {{- \"<|eot_id|>\" }}\n        {%- endif %}\n"
    "    {%- elif message.role == \"tool\" or message.role == \"ipython\" %}\n"
    "        {{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}\n"
    "        {%- if message.content is mapping or message.content is iterable %}\n"
    "            {{- message.content | tojson }}\n"
    "        {%- else %}\n            {{- message.content }}\n        {%- endif %}\n"
    "        {{- \"<|eot_id|>\" }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n";

static void test_llama31(void) {
    /* tools go into the first user message (tools_in_user_message defaults
     * to true); the system message is trimmed into the system header */
    EXPECT_M(LLAMA31,
             "[{\"role\":\"system\",\"content\":\"You are helpful. \"},"
             "{\"role\":\"user\",\"content\":\"What's the weather in Paris?\"}]",
             "{\"bos_token\":\"<|begin_of_text|>\",\"add_generation_prompt\":true,"
             "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
             "\"description\":\"Get the weather\",\"parameters\":{\"type\":\"object\","
             "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]}",
             "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
             "Environment: ipython\n"
             "Cutting Knowledge Date: December 2023\n"
             "Today Date: 26 Jul 2024\n\n"
             "You are helpful.<|eot_id|>"
             "<|start_header_id|>user<|end_header_id|>\n\n"
             "Given the following functions, please respond with a JSON for a function call "
             "with its proper arguments that best answers the given prompt.\n\n"
             "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument "
             "name and its value}.Do not use variables.\n\n"
             "{\n"
             "    \"type\": \"function\",\n"
             "    \"function\": {\n"
             "        \"name\": \"get_weather\",\n"
             "        \"description\": \"Get the weather\",\n"
             "        \"parameters\": {\n"
             "            \"type\": \"object\",\n"
             "            \"properties\": {\n"
             "                \"city\": {\n"
             "                    \"type\": \"string\"\n"
             "                }\n"
             "            },\n"
             "            \"required\": [\n"
             "                \"city\"\n"
             "            ]\n"
             "        }\n"
             "    }\n"
             "}\n\n"
             "What's the weather in Paris?<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n");
    /* tool call round trip without tools; the tool result (a string) is
     * JSON-encoded because strings are iterable */
    EXPECT_M(LLAMA31,
             "[{\"role\":\"user\",\"content\":\"Weather?\"},"
             "{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"get_weather\","
             "\"arguments\":{\"city\":\"Paris\"}}}]},"
             "{\"role\":\"tool\",\"content\":\"{\\\"temp\\\": 21}\"}]",
             "{\"bos_token\":\"<|begin_of_text|>\",\"add_generation_prompt\":true,\"date_string\":\"1 Jan 2025\"}",
             "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
             "Cutting Knowledge Date: December 2023\n"
             "Today Date: 1 Jan 2025\n\n"
             "<|eot_id|>"
             "<|start_header_id|>user<|end_header_id|>\n\nWeather?<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n"
             "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>"
             "<|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temp\\\": 21}\"<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n");
    /* builtin tools: ipython mode, python_tag call syntax, <|eom_id|> */
    EXPECT_M(LLAMA31,
             "[{\"role\":\"user\",\"content\":\"Search\"},"
             "{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"brave_search\","
             "\"arguments\":{\"query\":\"x\",\"n\":\"2\"}}}]}]",
             "{\"bos_token\":\"<|begin_of_text|>\",\"builtin_tools\":[\"brave_search\",\"code_interpreter\"]}",
             "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
             "Environment: ipython\n"
             "Tools: brave_search\n\n"
             "Cutting Knowledge Date: December 2023\n"
             "Today Date: 26 Jul 2024\n\n"
             "<|eot_id|>"
             "<|start_header_id|>user<|end_header_id|>\n\nSearch<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n"
             "<|python_tag|>brave_search.call(query=\"x\", n=\"2\")<|eom_id|>");
    EXPECT_ERR_M(LLAMA31,
                 "[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}},{\"function\":{}}]}]",
                 "{\"bos_token\":\"<s>\"}", LB_ERR_INVALID_ARG,
                 "This model only supports single tool-calls at once!");
    EXPECT_ERR_M(LLAMA31, "[{\"role\":\"system\",\"content\":\"s\"}]",
                 "{\"bos_token\":\"<s>\",\"tools\":[]}", LB_ERR_INVALID_ARG,
                 "Cannot put tools in the first user message");
}

/* ---- concurrency ---------------------------------------------------------- */

typedef struct {
    const lb_chat_template *t;
    int ok;
} thr_arg;

static void *thr_main(void *p) {
    thr_arg *a = p;
    a->ok = 1;
    for (int i = 0; i < 300; i++) {
        char *out = NULL;
        size_t n;
        if (lb_chat_template_render(a->t, MSGS3, "{\"add_generation_prompt\":true}", &out, &n) != LB_OK ||
            strcmp(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nu1<|im_end|>\n"
                        "<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nu2<|im_end|>\n"
                        "<|im_start|>assistant\n") != 0)
            a->ok = 0;
        free(out);
    }
    return NULL;
}

static void test_threads(void) {
    lb_chat_template *t;
    TH_CHECK_OK(lb_chat_template_compile(lb_chat_chatml_template, &t));
    pthread_t th[4];
    thr_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i].t = t;
        pthread_create(&th[i], NULL, thr_main, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        TH_CHECK(args[i].ok);
    }
    lb_chat_template_free(t);
}

int main(void) {
    TH_RUN(test_whitespace_control);
    TH_RUN(test_literals_and_printing);
    TH_RUN(test_operators);
    TH_RUN(test_access);
    TH_RUN(test_undefined);
    TH_RUN(test_for_loops);
    TH_RUN(test_scoping_and_set);
    TH_RUN(test_macros);
    TH_RUN(test_other_statements);
    TH_RUN(test_strftime_now);
    TH_RUN(test_tests);
    TH_RUN(test_filters);
    TH_RUN(test_methods);
    TH_RUN(test_runtime_errors);
    TH_RUN(test_syntax_errors);
    TH_RUN(test_limits);
    TH_RUN(test_json_inputs);
    TH_RUN(test_api);
    TH_RUN(test_mistral_inst);
    TH_RUN(test_gemma);
    TH_RUN(test_llama31);
    TH_RUN(test_threads);
    return th_report();
}
