/* libFuzzer harness: chat message content is plain text (src/server/
 * prompt.c: placeholders for special-token texts, lb_tokenizer_encode_spans).
 * Input: the first byte picks the tokenizer (qwen3 with its template,
 * llama3 with its template, tinystories-656k with the ChatML fallback and
 * normalized special tokens); the rest, split at the first 0x01 byte, is
 * the content of a user message and of an assistant message (any bytes:
 * invalid UTF-8, special-token texts, private-use plane code points).
 * Checks: no crash/leak/hang; lb_chat_prompt_apply (content plain) and
 * lb_chat_prompt_apply_ex(LB_CHAT_SPECIAL_IN_CONTENT) succeed or fail
 * together and render the same text; the plain-content ids hold exactly
 * as many special tokens as the same conversation with empty contents
 * (only the template's markers), never more than the opt-in ids.
 * Without ../shared it does nothing. */
#include "lowbit/server.h"
#include "lowbit/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lb_tokenizer *toks[3];
static lb_chat_prompt *cps[3];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *root = getenv("LB_SHARED");
    if (!root) root = "../shared";
    const char *rel[3] = {"tokenizers/qwen3", "tokenizers/llama3",
                          "models/tinystories-656k"};
    for (int i = 0; i < 3; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", root, rel[i]);
        if (lb_tokenizer_load_hf(path, &toks[i]) != LB_OK ||
            lb_chat_prompt_create(toks[i], &cps[i]) != LB_OK) {
            lb_tokenizer_free(toks[i]);
            toks[i] = NULL;
        }
    }
    return 0;
}

static size_t n_special(const lb_tokenizer *tok, const int32_t *ids, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += lb_tokenizer_is_special(tok, ids[i]);
    return k;
}

/* [{"role":"user","content":u},{"role":"assistant","content":a}] */
static char *messages(const char *u, size_t un, const char *a, size_t an) {
    char *us = malloc(un + 1), *as = malloc(an + 1);
    char *out = NULL;
    if (us && as) {
        memcpy(us, u, un);
        us[un] = '\0';
        memcpy(as, a, an);
        as[an] = '\0';
        cJSON *arr = cJSON_CreateArray();
        cJSON *m1 = cJSON_CreateObject(), *m2 = cJSON_CreateObject();
        if (arr && m1 && m2) {
            cJSON_AddStringToObject(m1, "role", "user");
            cJSON_AddStringToObject(m1, "content", us);
            cJSON_AddStringToObject(m2, "role", "assistant");
            cJSON_AddStringToObject(m2, "content", as);
            cJSON_AddItemToArray(arr, m1);
            cJSON_AddItemToArray(arr, m2);
            m1 = m2 = NULL;
            out = cJSON_PrintUnformatted(arr);
        }
        cJSON_Delete(m1);
        cJSON_Delete(m2);
        cJSON_Delete(arr);
    }
    free(us);
    free(as);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 16384) return 0;
    int which = data[0] % 3;
    if (!toks[which]) return 0;
    const lb_tokenizer *tok = toks[which];
    const lb_chat_prompt *cp = cps[which];
    const char *rest = (const char *)data + 1;
    size_t n = size - 1;
    /* contents are C strings (cJSON): stop at a NUL, split at 0x01 */
    const char *nul = memchr(rest, 0, n);
    if (nul) n = (size_t)(nul - rest);
    const char *sep = memchr(rest, 1, n);
    size_t un = sep ? (size_t)(sep - rest) : n;
    const char *a = sep ? sep + 1 : "";
    size_t an = sep ? n - un - 1 : 0;
    char *mj = messages(rest, un, a, an), *mj0 = messages("", 0, "", 0);
    if (!mj || !mj0) abort();
    char *t1 = NULL, *t2 = NULL, *t0 = NULL;
    int32_t *i1 = NULL, *i2 = NULL, *i0 = NULL;
    size_t n1 = 0, n2 = 0, n0 = 0;
    lb_status s1 = lb_chat_prompt_apply(cp, tok, mj, &t1, &i1, &n1);
    lb_status s2 = lb_chat_prompt_apply_ex(cp, tok, mj, LB_CHAT_SPECIAL_IN_CONTENT, &t2,
                                           &i2, &n2);
    lb_status s0 = lb_chat_prompt_apply(cp, tok, mj0, &t0, &i0, &n0);
    if ((s1 == LB_OK) != (s2 == LB_OK) || s0 != LB_OK) abort();
    if (s1 == LB_OK) {
        if (strcmp(t1, t2) != 0) abort(); /* placeholders all put back */
        size_t k1 = n_special(tok, i1, n1), k2 = n_special(tok, i2, n2),
               k0 = n_special(tok, i0, n0);
        if (k1 > k2) abort();
        /* only the template's markers (the empty conversation's), and
         * <unk> for characters a vocabulary lacks (656k) */
        int32_t unk_id = lb_tokenizer_token_to_id(tok, "<unk>");
        size_t u1 = 0, u0 = 0;
        for (size_t i = 0; i < n1; i++) u1 += unk_id >= 0 && i1[i] == unk_id;
        for (size_t i = 0; i < n0; i++) u0 += unk_id >= 0 && i0[i] == unk_id;
        if (k1 - u1 != k0 - u0) abort();
    }
    free(t0);
    free(t1);
    free(t2);
    free(i0);
    free(i1);
    free(i2);
    free(mj);
    free(mj0);
    return 0;
}
