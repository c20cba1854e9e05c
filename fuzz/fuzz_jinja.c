/*
 * fuzz_jinja.c — libFuzzer harness for the chat-template interpreter.
 *
 * Input: TEMPLATE [\0 MESSAGES_JSON [\0 EXTRA_JSON]]. The template is
 * compiled and rendered with the given (or a fixed) message list under small
 * limits; the input is also used as messages JSON for the ChatML template.
 * Must never crash, leak, hang or exceed the limits' memory.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lowbit/chat.h"

static const char *k_msgs =
    "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Hi <tool_response>\"},"
    "{\"role\":\"assistant\",\"content\":\"<think>\\nr\\n</think>\\n\\nA\",\"tool_calls\":"
    "[{\"function\":{\"name\":\"f\",\"arguments\":{\"x\":1.5,\"y\":[true,null]}}}]},"
    "{\"role\":\"tool\",\"content\":\"R\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"p\"}]}]";
static const char *k_extra =
    "{\"add_generation_prompt\":true,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\","
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536) return 0;
    char *buf = malloc(size + 2);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    buf[size + 1] = 0;
    const char *tpl = buf, *msgs = k_msgs, *extra = k_extra;
    size_t n1 = strlen(buf);
    if (n1 < size) {
        msgs = buf + n1 + 1;
        size_t n2 = strlen(msgs);
        extra = (n1 + 1 + n2 < size) ? msgs + n2 + 1 : NULL;
    }
    lb_chat_limits lim = {0};
    lim.max_output_bytes = 1 << 20;
    lim.max_memory_bytes = 64 << 20;
    lim.max_steps = 200000;

    lb_chat_template *t = NULL;
    if (lb_chat_template_compile(tpl, &t) == LB_OK) {
        char *out = NULL;
        size_t n = 0;
        if (lb_chat_template_render_ex(t, msgs, extra, &lim, &out, &n) == LB_OK && n > lim.max_output_bytes)
            abort(); /* the output limit must hold */
        free(out);
        if (msgs != k_msgs) {
            out = NULL;
            lb_chat_template_render_ex(t, k_msgs, k_extra, &lim, &out, &n);
            free(out);
        }
        lb_chat_template_free(t);
    }
    /* the whole input as message JSON for the ChatML template */
    static lb_chat_template *chatml;
    if (!chatml && lb_chat_template_compile(lb_chat_chatml_template, &chatml) != LB_OK) abort();
    char *out = NULL;
    size_t n = 0;
    lb_chat_template_render_ex(chatml, buf, NULL, &lim, &out, &n);
    free(out);
    free(buf);
    return 0;
}
