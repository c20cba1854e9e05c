/*
 * Generation loop on tinystories-656k: greedy continuations equal
 * transformers' greedy_ids (../shared/reference/logits/cases.json), EOS /
 * stop-string / callback / context stops, streaming of text through a
 * stand-in detokenizer (the real tokenizer is tested on its own).
 */
#include "th.h"

#include "lowbit/generate.h"
#include "lowbit/model.h"

#include <cjson/cJSON.h>

typedef struct ref_case {
    int32_t ids[128];
    int n_ids;
    int32_t greedy[32];
    int n_greedy;
    int first_eos; /* -1 = none */
} ref_case;

static int load_cases(ref_case *rc, int max) {
    size_t n = 0;
    char *s = th_read_bin(th_shared("reference/logits/cases.json"), &n);
    cJSON *j = s ? cJSON_ParseWithLength(s, n) : NULL;
    free(s);
    int k = 0;
    for (cJSON *c = j ? j->child : NULL; c && k < max; c = c->next, k++) {
        ref_case *r = &rc[k];
        r->n_ids = r->n_greedy = 0;
        cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "ids")) {
            if (r->n_ids < 128) r->ids[r->n_ids++] = x->valueint;
        }
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "greedy_ids")) {
            if (r->n_greedy < 32) r->greedy[r->n_greedy++] = x->valueint;
        }
        cJSON *e = cJSON_GetObjectItem(c, "greedy_first_eos_index");
        r->first_eos = cJSON_IsNumber(e) ? e->valueint : -1;
    }
    cJSON_Delete(j);
    return k;
}

static lb_model *g_model;
static ref_case g_cases[4];

static lb_context *new_ctx(int32_t n_ctx) {
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = 2;
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(g_model, &cp, &ctx));
    return ctx;
}

static void test_greedy_matches_transformers(void) {
    lb_context *ctx = new_ctx(256);
    if (!ctx) return;
    for (int k = 0; k < 4; k++) {
        lb_generate_params p = lb_generate_default_params();
        p.n_predict = 32;
        p.ignore_eos = true;
        lb_generate_result r;
        TH_CHECK_OK(lb_generate(ctx, g_cases[k].ids, g_cases[k].n_ids, &p, &r));
        TH_CHECK_INT(r.n_tokens, 32);
        TH_CHECK_INT(r.stop_reason, LB_STOP_LENGTH);
        TH_CHECK_INT(r.n_prompt, g_cases[k].n_ids);
        int agree = 0;
        for (int i = 0; i < r.n_tokens && i < 32; i++)
            agree += r.tokens[i] == g_cases[k].greedy[i];
        fprintf(stderr, "  prompt%d: %d/32 greedy tokens equal transformers'\n",
                k, agree);
        TH_CHECK_INT(agree, 32);
        TH_CHECK(r.text == NULL); /* no detokenizer */
        lb_generate_result_free(&r);
    }
    lb_context_free(ctx);
}

static void test_eos_stop(void) {
    /* prompt3's greedy continuation reaches EOS (id 2) at index first_eos */
    ref_case *c = &g_cases[3];
    TH_CHECK(c->first_eos > 0);
    if (c->first_eos <= 0) return;
    lb_context *ctx = new_ctx(256);
    lb_generate_params p = lb_generate_default_params();
    p.n_predict = 32;
    lb_generate_result r;
    TH_CHECK_OK(lb_generate(ctx, c->ids, c->n_ids, &p, &r));
    TH_CHECK_INT(r.stop_reason, LB_STOP_EOS);
    TH_CHECK_INT(r.n_tokens, c->first_eos);
    for (int i = 0; i < r.n_tokens; i++) TH_CHECK_INT(r.tokens[i], c->greedy[i]);
    lb_generate_result_free(&r);
    /* explicit EOS list: stop at greedy[3] instead */
    int32_t eos = c->greedy[3];
    p.eos_ids = &eos;
    p.n_eos = 1;
    TH_CHECK_OK(lb_generate(ctx, c->ids, c->n_ids, &p, &r));
    TH_CHECK_INT(r.stop_reason, LB_STOP_EOS);
    int first = 0;
    while (first < 32 && c->greedy[first] != eos) first++;
    TH_CHECK_INT(r.n_tokens, first);
    lb_generate_result_free(&r);
    lb_context_free(ctx);
}

/* Stand-in detokenizer: id -> "[id]"; in split mode every token gives one
 * byte of "é" (C3 A9), alternating by position, so each character is split
 * across two tokens — to test UTF-8 hold-back. */
typedef struct fake_tok {
    int split_mode;
} fake_tok;

static lb_status fake_detok(void *user, const int32_t *ids, size_t n,
                            char **text, size_t *len) {
    fake_tok *ft = user;
    char *out = malloc(n * 16 + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (ft->split_mode)
            out[o++] = (char)(i % 2 ? 0xA9 : 0xC3); /* by position */
        else
            o += (size_t)sprintf(out + o, "[%d]", (int)ids[i]);
    }
    out[o] = '\0';
    *text = out;
    *len = o;
    return LB_OK;
}

typedef struct stream {
    char buf[4096];
    size_t len;
    int calls, flushes, stop_after;
    bool bad_piece; /* a released piece ended inside a UTF-8 sequence */
} stream;

static bool on_tok(void *user, int32_t token, const char *text, size_t len) {
    stream *s = user;
    if (token < 0) s->flushes++;
    else s->calls++;
    if (len && token >= 0 && ((unsigned char)text[len - 1] == 0xC3))
        s->bad_piece = true;
    if (s->len + len < sizeof s->buf) {
        memcpy(s->buf + s->len, text, len);
        s->len += len;
    }
    return !(s->stop_after && s->calls >= s->stop_after);
}

static void test_stop_string_and_stream(void) {
    ref_case *c = &g_cases[0];
    lb_context *ctx = new_ctx(256);
    fake_tok ft = {0};
    /* stop at the text of greedy token 6 (first occurrence) */
    char stop[32];
    snprintf(stop, sizeof stop, "[%d]", (int)c->greedy[6]);
    int first = 0;
    while (c->greedy[first] != c->greedy[6]) first++;
    const char *stops[1] = {stop};
    stream st;
    memset(&st, 0, sizeof st);
    lb_generate_params p = lb_generate_default_params();
    p.n_predict = 32;
    p.ignore_eos = true;
    p.detok = (lb_detok){fake_detok, &ft};
    p.stop = stops;
    p.n_stop = 1;
    p.on_token = on_tok;
    p.user = &st;
    lb_generate_result r;
    TH_CHECK_OK(lb_generate(ctx, c->ids, c->n_ids, &p, &r));
    TH_CHECK_INT(r.stop_reason, LB_STOP_STRING);
    TH_CHECK_INT(r.n_tokens, first + 1);
    char want[1024];
    size_t o = 0;
    for (int i = 0; i < first; i++)
        o += (size_t)snprintf(want + o, sizeof want - o, "[%d]",
                              (int)c->greedy[i]);
    TH_CHECK_STR(r.text, want);
    TH_CHECK_INT(r.text_len, o);
    st.buf[st.len] = '\0';
    TH_CHECK_STR(st.buf, want); /* streamed == final, stop string not shown */
    lb_generate_result_free(&r);

    /* a stop string that never appears: whole text streamed */
    stops[0] = "[never]";
    memset(&st, 0, sizeof st);
    TH_CHECK_OK(lb_generate(ctx, c->ids, c->n_ids, &p, &r));
    TH_CHECK_INT(r.n_tokens, 32);
    st.buf[st.len] = '\0';
    TH_CHECK_STR(st.buf, r.text);
    TH_CHECK_INT(st.calls, 32);
    lb_generate_result_free(&r);

    /* UTF-8 split across tokens: no released piece ends in a lead byte */
    ft.split_mode = 1;
    p.n_stop = 0;
    memset(&st, 0, sizeof st);
    TH_CHECK_OK(lb_generate(ctx, c->ids, c->n_ids, &p, &r));
    TH_CHECK(!st.bad_piece);
    TH_CHECK_INT(st.len, 32); /* one byte per generated token, all flushed */
    TH_CHECK(st.len == r.text_len && memcmp(st.buf, r.text, st.len) == 0);
    lb_generate_result_free(&r);

    /* callback stop */
    ft.split_mode = 0;
    memset(&st, 0, sizeof st);
    st.stop_after = 3;
    TH_CHECK_OK(lb_generate(ctx, c->ids, c->n_ids, &p, &r));
    TH_CHECK_INT(r.stop_reason, LB_STOP_CALLBACK);
    TH_CHECK_INT(r.n_tokens, 3);
    lb_generate_result_free(&r);
    lb_context_free(ctx);
}


/* Long generation: the streaming text is rebased every 64 tokens; text,
 * stream and a late stop string must still come out right. */
static void test_long_stream(void) {
    ref_case *c = &g_cases[2];
    lb_context *ctx = new_ctx(512);
    fake_tok ft = {0};
    stream st;
    memset(&st, 0, sizeof st);
    lb_generate_params p = lb_generate_default_params();
    p.n_predict = 200;
    p.ignore_eos = true;
    p.sampling.temperature = 0.8f;
    p.sampling.seed = 3;
    p.detok = (lb_detok){fake_detok, &ft};
    p.on_token = on_tok;
    p.user = &st;
    lb_generate_result r;
    TH_CHECK_OK(lb_generate(ctx, c->ids, c->n_ids, &p, &r));
    TH_CHECK_INT(r.n_tokens, 200);
    char *want = malloc(200 * 16 + 1);
    size_t o = 0;
    for (int i = 0; i < r.n_tokens; i++)
        o += (size_t)sprintf(want + o, "[%d]", (int)r.tokens[i]);
    TH_CHECK_STR(r.text, want);
    st.buf[st.len < sizeof st.buf ? st.len : sizeof st.buf - 1] = '\0';
    TH_CHECK_STR(st.buf, want);
    /* stop at the 150th token's text (its first occurrence) */
    char stop[32];
    snprintf(stop, sizeof stop, "[%d]", (int)r.tokens[150]);
    const char *stops[1] = {stop};
    char *cut = strstr(want, stop);
    int first = 0;
    while (r.tokens[first] != r.tokens[150]) first++;
    *cut = '\0';
    p.stop = stops;
    p.n_stop = 1;
    memset(&st, 0, sizeof st);
    lb_generate_result r2;
    TH_CHECK_OK(lb_generate(ctx, c->ids, c->n_ids, &p, &r2));
    TH_CHECK_INT(r2.stop_reason, LB_STOP_STRING);
    TH_CHECK_INT(r2.n_tokens, first + 1);
    TH_CHECK_STR(r2.text, want);
    st.buf[st.len] = '\0';
    TH_CHECK_STR(st.buf, want);
    free(want);
    lb_generate_result_free(&r);
    lb_generate_result_free(&r2);
    lb_context_free(ctx);
}

/* cache_prompt: a prompt extending the previous conversation reuses the
 * cached prefix and continues exactly as a fresh run would. */
static void test_cache_prompt(void) {
    ref_case *c = &g_cases[0];
    lb_context *ctx = new_ctx(256);
    lb_generate_params p = lb_generate_default_params();
    p.n_predict = 8;
    p.ignore_eos = true;
    p.cache_prompt = true;
    lb_generate_result r;
    TH_CHECK_OK(lb_generate(ctx, c->ids, c->n_ids, &p, &r));
    TH_CHECK_INT(r.n_reused, 0);
    lb_generate_result_free(&r);
    int32_t prompt[64];
    memcpy(prompt, c->ids, (size_t)c->n_ids * 4);
    memcpy(prompt + c->n_ids, c->greedy, 4 * 4);
    TH_CHECK_OK(lb_generate(ctx, prompt, c->n_ids + 4, &p, &r));
    TH_CHECK_INT(r.n_reused, c->n_ids + 3); /* at most n_prompt - 1 */
    TH_CHECK_INT(r.n_tokens, 8);
    for (int i = 0; i < r.n_tokens; i++)
        TH_CHECK_INT(r.tokens[i], c->greedy[4 + i]);
    lb_generate_result_free(&r);
    /* a different prompt shares only BOS */
    int common = 0;
    while (common < c->n_ids && common < g_cases[1].n_ids - 1 &&
           c->ids[common] == g_cases[1].ids[common])
        common++;
    TH_CHECK(common >= 1); /* at least BOS */
    TH_CHECK_OK(lb_generate(ctx, g_cases[1].ids, g_cases[1].n_ids, &p, &r));
    TH_CHECK_INT(r.n_reused, common);
    for (int i = 0; i < r.n_tokens; i++)
        TH_CHECK_INT(r.tokens[i], g_cases[1].greedy[i]);
    lb_generate_result_free(&r);
    lb_context_free(ctx);
}

static void test_ctx_limit_and_errors(void) {
    ref_case *c = &g_cases[0];
    lb_context *ctx = new_ctx(c->n_ids + 4);
    lb_generate_params p = lb_generate_default_params();
    p.n_predict = -1;
    p.ignore_eos = true;
    lb_generate_result r;
    TH_CHECK_OK(lb_generate(ctx, c->ids, c->n_ids, &p, &r));
    TH_CHECK_INT(r.stop_reason, LB_STOP_CTX);
    TH_CHECK_INT(r.n_tokens, 5);
    for (int i = 0; i < r.n_tokens; i++) TH_CHECK_INT(r.tokens[i], c->greedy[i]);
    lb_generate_result_free(&r);
    /* errors */
    const char *stops[1] = {"x"};
    p.stop = stops;
    p.n_stop = 1;
    TH_CHECK_FAILS(lb_generate(ctx, c->ids, c->n_ids, &p, &r),
                   LB_ERR_INVALID_ARG);
    lb_generate_result_free(&r);
    p.n_stop = 0;
    TH_CHECK_FAILS(lb_generate(ctx, c->ids, 0, &p, &r), LB_ERR_INVALID_ARG);
    lb_generate_result_free(&r);
    lb_context_free(ctx);
    ctx = new_ctx(4);
    TH_CHECK_FAILS(lb_generate(ctx, c->ids, c->n_ids, &p, &r), LB_ERR_RANGE);
    lb_generate_result_free(&r);
    lb_context_free(ctx);
}

static void test_seeded_sampling(void) {
    ref_case *c = &g_cases[1];
    lb_context *ctx = new_ctx(128);
    lb_generate_params p = lb_generate_default_params();
    p.n_predict = 24;
    p.ignore_eos = true;
    p.sampling.temperature = 1.0f;
    p.sampling.top_k = 40;
    p.sampling.top_p = 0.95f;
    p.sampling.seed = 99;
    lb_generate_result a, b;
    TH_CHECK_OK(lb_generate(ctx, c->ids, c->n_ids, &p, &a));
    TH_CHECK_OK(lb_generate(ctx, c->ids, c->n_ids, &p, &b));
    TH_CHECK(a.n_tokens == 24 && b.n_tokens == 24 &&
             memcmp(a.tokens, b.tokens, 24 * sizeof(int32_t)) == 0);
    lb_generate_result_free(&a);
    lb_generate_result_free(&b);
    lb_context_free(ctx);
}

int main(void) {
    TH_CHECK_OK(lb_model_load(th_shared("models/tinystories-656k"), NULL,
                              &g_model));
    TH_CHECK_INT(load_cases(g_cases, 4), 4);
    if (!g_model) return th_report();
    TH_RUN(test_greedy_matches_transformers);
    TH_RUN(test_eos_stop);
    TH_RUN(test_stop_string_and_stream);
    TH_RUN(test_long_stream);
    TH_RUN(test_cache_prompt);
    TH_RUN(test_ctx_limit_and_errors);
    TH_RUN(test_seeded_sampling);
    lb_model_free(g_model);
    return th_report();
}
