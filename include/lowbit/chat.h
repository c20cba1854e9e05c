/*
 * lowbit/chat.h — chat templates: turn an OpenAI-style message list into the
 * prompt text a model was trained on.
 *
 * Source followed: Hugging Face transformers' apply_chat_template(...,
 * tokenize=False) (transformers 5.12), which renders the tokenizer_config.json
 * "chat_template" with Jinja2 3.1 in an ImmutableSandboxedEnvironment with
 * trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, the
 * loopcontrols extension, a tojson filter that is json.dumps(x,
 * ensure_ascii=False, indent=None, separators=None, sort_keys=False), and the
 * globals raise_exception(msg) and strftime_now(fmt). lowbit implements its
 * own interpreter for the subset of Jinja2 that chat templates use (Qwen2.5 /
 * Qwen3, Llama-3.0/3.1/3.2, Mistral v0.1-v0.3 [INST], Gemma, ChatML...), with
 * Jinja2's semantics: whitespace control ({%- -%}, {{- -}}, {#- -#}, +),
 * trim_blocks / lstrip_blocks exactly as Jinja2's lexer, Python value
 * semantics (str(), repr(), ==, <, slicing, truthiness, int/float
 * arithmetic), and Jinja2's default Undefined (prints as "", is falsy,
 * iterates as empty; attribute/item access on it, arithmetic with it or
 * calling it is an error). Output is byte-identical to transformers for the
 * supported subset (tests: ../shared/reference/chat and tests/test_chat*.c).
 *
 * Supported template language:
 *  - {{ }}, {% %}, {# #}; statements: if/elif/else, for (loop.index, index0,
 *    revindex, revindex0, first, last, length, depth, depth0, previtem,
 *    nextitem, cycle(), changed(); else; tuple unpacking; an `if` filter,
 *    applied lazily like Jinja2's LoopContext), break/continue, set (name,
 *    tuple, namespace attribute, block set with optional filters), macro
 *    (defaults, varargs, kwargs, caller), call blocks, filter blocks, with,
 *    raw, print, generation (transformers' assistant-mask tag; renders its
 *    body). Scoping as Jinja2: a for body gets a fresh scope per iteration
 *    (hence namespace()), if does not; macros close over their defining
 *    scope. Jinja2 quirks kept: ** is left-associative, `-2 ** 2` is 4, a
 *    for-else also runs when no iteration reached the end of the body.
 *  - Expressions: literals (strings with Python escapes, ints incl. 0x/0o/0b
 *    and `_`, floats, true/false/none in both cases), lists, tuples, dicts,
 *    attribute/item access (dict methods win over keys for `d.items`, keys
 *    win for `d['items']`), slices incl. negative steps, + - * / // % **
 *    (Python int/float semantics, str % args), ~, comparisons (chained),
 *    in / not in, and/or (returning an operand), not, a if c else b,
 *    filters, tests, calls.
 *  - Filters: abs attr capitalize center count d default dictsort e escape
 *    first float format indent int items join last length list lower map max
 *    min reject rejectattr replace reverse round safe select selectattr sort
 *    string sum title tojson trim unique upper wordcount. tojson takes
 *    transformers' arguments (ensure_ascii, indent as int or string,
 *    separators, sort_keys).
 *  - Tests: all Jinja2 3.1 builtin tests (defined, undefined, none, boolean,
 *    true, false, integer, float, number, string, mapping, iterable,
 *    sequence, callable, sameas, eq/equalto/==, ne/!=, lt/</lessthan, le/<=,
 *    gt/>/greaterthan, ge/>=, in, odd, even, divisibleby, lower, upper,
 *    escaped, filter, test).
 *  - Methods: str (strip lstrip rstrip split rsplit splitlines startswith
 *    endswith replace upper lower title capitalize swapcase find rfind index
 *    rindex count join format isdigit isalpha isalnum isspace isupper islower
 *    center ljust rjust zfill), dict (items keys values get), list (index
 *    count). Mutating methods (list.append, dict.update, ...) are undefined
 *    and fail when called with the sandbox's "access to attribute ... is
 *    unsafe" message, as in transformers' ImmutableSandboxedEnvironment.
 *  - Globals: range (at most 100000 items, the sandbox's MAX_RANGE),
 *    namespace, dict, raise_exception, strftime_now (local time, C
 *    strftime, result at most 2047 bytes). cycler, joiner and lipsum fail
 *    when called (LB_ERR_UNSUPPORTED).
 * Not supported: the tags extends, block, include, import, from, autoescape
 * and recursive for loops, and *args / **kwargs in calls (compile error
 * LB_ERR_UNSUPPORTED); \N{NAME} string escapes (LB_ERR_FORMAT); the Jinja2
 * filters batch, filesizeformat, forceescape, groupby, pprint, random,
 * slice, striptags, truncate, urlencode, urlize, wordwrap and xmlattr fail
 * when evaluated (LB_ERR_UNSUPPORTED). Filter or test names Jinja2 does not
 * know fail at compile time (LB_ERR_FORMAT "No filter named 'x'."), as in
 * Jinja2.
 *
 * Known differences from Python (documented, not silent): integers are
 * 64-bit (overflow is an error, not a big int); str.upper/lower/title use
 * utf8proc's simple case mapping (no "ß" -> "SS", no final sigma); escape
 * and safe return plain strings (no Markup); filters that return lazy
 * generators in Jinja2 (map, select, reject, selectattr, rejectattr,
 * reverse) and range(), dict.items()/keys()/values() return lists, so
 * printing one directly shows a list instead of Python's
 * "<generator object ...>" / "range(0, 3)" / "dict_items([...])"; a bound
 * method prints as "<built-in method NAME>".
 *
 * Hostile input: templates and JSON may come from an HTTP client. Every
 * render is bounded (lb_chat_limits): recursion depth, evaluation steps
 * (charged per node, per loop iteration and per byte of string/list work),
 * memory, and the size of the output and of any string; exceeding one fails
 * with LB_ERR_RANGE. The template source is at most
 * LB_CHAT_MAX_TEMPLATE_BYTES, its syntax tree and bracket nesting at most
 * LB_CHAT_MAX_NESTING levels deep; JSON inputs may nest at most 240 levels
 * and values are walked (repr, tojson, ==) at most 256 levels deep. Inputs
 * must be valid UTF-8. At the default max_depth a render needs less than
 * 256 KiB of C stack (about 1 MiB under AddressSanitizer).
 *
 * Errors: compile errors are LB_ERR_FORMAT ("chat template line L:C: ...",
 * column counted in characters from 1) or LB_ERR_UNSUPPORTED; render errors
 * are LB_ERR_INVALID_ARG (bad messages/extra JSON, a runtime error such as
 * an undefined variable used in arithmetic, or raise_exception(msg), whose
 * message is "chat template line L:C: raise_exception: MSG"), LB_ERR_RANGE
 * (a limit) or LB_ERR_NOMEM.
 *
 * Thread safety: a compiled template is immutable; any number of threads may
 * render the same lb_chat_template concurrently. Each render uses its own
 * memory arena, released before the render function returns.
 */
#ifndef LOWBIT_CHAT_H
#define LOWBIT_CHAT_H

#include "lowbit/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest accepted template source, in bytes. */
#define LB_CHAT_MAX_TEMPLATE_BYTES (1u << 20)
/* Deepest accepted syntax tree (nested blocks + nested expressions). */
#define LB_CHAT_MAX_NESTING 128

/* Per-render bounds. Zero in a field means "use the default". */
typedef struct lb_chat_limits {
    size_t max_output_bytes; /* rendered text, and any single string value;
                                default 64 MiB                              */
    size_t max_memory_bytes; /* all memory one render may allocate (values,
                                strings, scopes); default 256 MiB          */
    uint64_t max_steps;      /* evaluation budget: 1 per statement/expression
                                node, 1 per loop iteration, 1 per 64 bytes of
                                string work; default 20,000,000 (well under
                                a second)                                   */
    uint32_t max_depth;      /* runtime recursion (expression / statement
                                nesting plus macro calls); default 512      */
} lb_chat_limits;

/* The defaults above, as a struct. */
lb_chat_limits lb_chat_limits_default(void);

typedef struct lb_chat_template lb_chat_template;

/* Parse a Jinja chat template once (as tokenizer_config.json's
 * "chat_template" string, NUL-terminated UTF-8) for repeated rendering.
 * Errors: LB_ERR_INVALID_ARG (NULL args), LB_ERR_FORMAT (syntax error or
 * invalid UTF-8, message "chat template line L:C: ..."), LB_ERR_UNSUPPORTED
 * (a Jinja2 feature lowbit lacks, named), LB_ERR_RANGE (source larger than
 * LB_CHAT_MAX_TEMPLATE_BYTES, or nesting deeper than LB_CHAT_MAX_NESTING),
 * LB_ERR_NOMEM. On success *out is owned by the caller: free it with
 * lb_chat_template_free. On failure *out is NULL. */
lb_status lb_chat_template_compile(const char *src, lb_chat_template **out);

/* Free a compiled template (NULL is fine). */
void lb_chat_template_free(lb_chat_template *tpl);

/* Render with default limits. Equivalent to lb_chat_template_render_ex(tpl,
 * messages_json, extra_json, NULL, out, len). */
lb_status lb_chat_template_render(const lb_chat_template *tpl,
                                  const char *messages_json,
                                  const char *extra_json, char **out,
                                  size_t *len);

/* Render `tpl`.
 *  messages_json: a JSON array of message objects (OpenAI shape), e.g.
 *    [{"role":"user","content":"Hi"}]. It becomes the template variable
 *    `messages`. Message objects are passed through unchanged (tool_calls,
 *    reasoning_content, name... stay available to the template) except one
 *    normalisation: a "content" that is an array of parts
 *    [{"type":"text","text":"..."}...] is flattened into one string, the
 *    parts' texts joined with "\n" (the convention of vLLM / llama.cpp's
 *    servers), because chat templates expect strings. A part of any other
 *    type (image_url, input_audio...) is an LB_ERR_UNSUPPORTED error. A
 *    "content" of null stays none, as in transformers.
 *  extra_json: NULL or a JSON object whose keys become template variables,
 *    e.g. {"add_generation_prompt":true, "enable_thinking":false,
 *    "tools":[...], "bos_token":"<s>", "eos_token":"</s>",
 *    "date_string":"26 Jul 2024"}. As transformers does, `tools` and
 *    `documents` are none and `add_generation_prompt` is false unless
 *    extra_json sets them; bos_token / eos_token are only defined when
 *    extra_json gives them. extra_json must not contain "messages".
 *  JSON numbers keep Python's int/float distinction (1 is int, 1.0 and 1e3
 *  are float); integers outside int64 and strings containing \u0000 are
 *  rejected (LB_ERR_UNSUPPORTED).
 *  limits: NULL for lb_chat_limits_default(); zero fields take defaults.
 * Output: *out is a malloc'd, NUL-terminated buffer owned by the caller
 * (free with free()); *len (optional, may be NULL) gets its length in bytes,
 * which is exact even if the text contains NUL bytes (possible only through
 * template escapes like '\x00'). On failure *out is NULL.
 * Errors: LB_ERR_INVALID_ARG (NULL args; invalid JSON or a wrong JSON shape,
 * naming the message index/field; a runtime template error; a
 * raise_exception from the template, its message included), LB_ERR_RANGE
 * (a limit was hit: the message names which), LB_ERR_UNSUPPORTED (see
 * above; a Jinja2 filter lowbit lacks was evaluated), LB_ERR_NOMEM. */
lb_status lb_chat_template_render_ex(const lb_chat_template *tpl,
                                     const char *messages_json,
                                     const char *extra_json,
                                     const lb_chat_limits *limits, char **out,
                                     size_t *len);

/* The template lb_chat_apply uses when a model has none: ChatML, i.e. for
 * each message "<|im_start|>{role}\n{content}<|im_end|>\n", then
 * "<|im_start|>assistant\n" when add_generation_prompt is true. (This is the
 * same Jinja text as Minueza-32M's tokenizer_config.json template.) */
extern const char lb_chat_chatml_template[];

/* Convenience: compile `template_src` (NULL or "" = lb_chat_chatml_template)
 * and render it once with default limits. The template variables are, in
 * order of precedence (later wins): tools = none, documents = none,
 * bos_token = bos, eos_token = eos (a NULL bos/eos gives none, as
 * transformers passes a tokenizer's unset special token), the keys of
 * extra_json (may be NULL), add_generation_prompt, messages.
 * *out: malloc'd NUL-terminated text, free with free(); NULL on failure. If
 * the rendered text would contain a NUL byte the call fails with
 * LB_ERR_FORMAT (use lb_chat_template_render for byte-exact output).
 * Errors: as lb_chat_template_compile and lb_chat_template_render_ex.
 * For repeated use (a server), compile once and call
 * lb_chat_template_render instead. */
lb_status lb_chat_apply(const char *template_src, const char *messages_json,
                        bool add_generation_prompt, const char *bos,
                        const char *eos, const char *extra_json, char **out);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_CHAT_H */
