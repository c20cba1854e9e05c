/*
 * fuzz_request.c — libFuzzer harness for lowbit serve's request bodies
 * (src/server/request.c: JSON -> validated srv_request).
 *
 * Input: one byte choosing the route (even: /v1/completions, odd:
 * /v1/chat/completions), then the body. Checks: no crash/leak/hang; a
 * failure is a 400 with a message and an error JSON that parses; an accepted
 * request satisfies the documented ranges, and its normalised messages are
 * a JSON array that the ChatML template renders (or rejects cleanly).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "lowbit/chat.h"
#include "server/server_internal.h"

static lb_chat_template *g_chatml;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 65536) return 0;
    if (!g_chatml && lb_chat_template_compile(lb_chat_chatml_template, &g_chatml) != LB_OK)
        abort();
    srv_kind kind = (data[0] & 1) ? SRV_CHAT : SRV_COMPLETION;
    /* the body without a terminating NUL, as the HTTP layer may hand it */
    char *body = malloc(size - 1 ? size - 1 : 1);
    if (!body) return 0;
    memcpy(body, data + 1, size - 1);
    srv_request r;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (!srv_request_parse(kind, body, size - 1, &r, &e)) {
        if (e.status != 400 && e.status != 500) abort();
        if (!e.message[0]) abort();
        char *js = srv_error_json(&e);
        cJSON *back = js ? cJSON_Parse(js) : NULL;
        if (js && !back) abort();
        cJSON_Delete(back);
        free(js);
        if (r.prompt || r.prompt_ids || r.messages_json || r.n_stop) abort();
        free(body);
        return 0;
    }
    if (!(r.temperature >= 0 && r.temperature <= 2) || !(r.top_p >= 0 && r.top_p <= 1) ||
        !(r.min_p >= 0 && r.min_p <= 1) || r.top_k < 0 || r.n_stop > SRV_MAX_STOP ||
        (r.max_tokens != -1 && r.max_tokens < 0) || r.logprobs < -1 ||
        r.logprobs > SRV_MAX_LOGPROBS || (r.echo && kind != SRV_COMPLETION))
        abort();
    for (int i = 0; i < r.n_stop; i++)
        if (!r.stop[i][0] || strlen(r.stop[i]) > SRV_MAX_STOP_BYTES) abort();
    if (kind == SRV_COMPLETION) {
        if (!r.prompt == !r.prompt_ids) abort();
        if (r.prompt && strlen(r.prompt) != r.prompt_len) abort();
        for (size_t i = 0; i < r.n_prompt_ids; i++)
            if (r.prompt_ids[i] < 0) abort();
    } else {
        cJSON *m = r.messages_json ? cJSON_Parse(r.messages_json) : NULL;
        if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) < 1) abort();
        cJSON_Delete(m);
        lb_chat_limits lim = {0};
        lim.max_output_bytes = 1 << 20;
        lim.max_memory_bytes = 32 << 20;
        char *out = NULL;
        lb_status st = lb_chat_template_render_ex(
            g_chatml, r.messages_json, "{\"add_generation_prompt\":true}", &lim, &out, NULL);
        if (st == LB_OK && !out) abort();
        free(out);
    }
    srv_request_free(&r);
    free(body);
    return 0;
}
