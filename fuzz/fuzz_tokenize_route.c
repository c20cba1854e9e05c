/*
 * fuzz_tokenize_route.c — libFuzzer harness for the server's /tokenize,
 * /detokenize and /tokenizer_info bodies (src/server/scoring.c
 * srv_tokenizer_route) with tinystories-656k's tokenizer
 * ($LB_SHARED/models/tinystories-656k, default ../shared).
 * Input: one byte choosing the route (mod 3), then the body. Checks: no
 * crash/leak/hang; an answer is JSON with "tokens" (ids in the vocabulary)
 * or "content"/"prompt" strings; a refusal is a 400/500 with a message.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/server_internal.h"

static lb_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *root = getenv("LB_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tinystories-656k",
             root ? root : "../shared");
    if (lb_tokenizer_load_hf(path, &g_tok) != LB_OK) g_tok = NULL;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_tok || size < 1 || size > 65536) return 0;
    int route = 1 + data[0] % 3;
    srv_error e;
    memset(&e, 0, sizeof e);
    char *out = srv_tokenizer_route(g_tok, route, (const char *)data + 1,
                                    size - 1, &e);
    if (!out) {
        if ((e.status != 400 && e.status != 500) || !e.message[0]) abort();
        return 0;
    }
    cJSON *j = cJSON_Parse(out);
    if (!j) abort();
    if (route == SRV_TOKENIZE) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens"), *it;
        if (!cJSON_IsArray(t)) abort();
        cJSON_ArrayForEach(it, t) {
            const cJSON *id = cJSON_IsObject(it)
                                  ? cJSON_GetObjectItemCaseSensitive(it, "id")
                                  : it;
            if (!cJSON_IsNumber(id) || id->valuedouble < 0 ||
                id->valuedouble >= lb_tokenizer_n_vocab(g_tok))
                abort();
        }
    } else if (route == SRV_DETOKENIZE) {
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "content")) ||
            !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "prompt")))
            abort();
    }
    cJSON_Delete(j);
    free(out);
    return 0;
}
