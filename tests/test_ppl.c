/*
 * Perplexity (lowbit/eval.h): the transformers disjoint-window figures and
 * the transformers re-computation of llama-perplexity's protocol on
 * tinystories-656k (../shared/reference/ppl/transformers_ppl.json), an
 * independent brute-force computation on a random model, batch invariance,
 * and argument errors.
 */
#include "th.h"

#include "lowbit/eval.h"
#include "lowbit/model.h"

#include <cjson/cJSON.h>

static cJSON *read_json(const char *path) {
    size_t n;
    char *s = th_read_bin(path, &n);
    if (!s) return NULL;
    cJSON *j = cJSON_ParseWithLength(s, n);
    free(s);
    return j;
}

static double jnum(const cJSON *o, const char *path) {
    /* path of object keys separated by '/' */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *c = o;
    for (char *tok = strtok(buf, "/"); tok && c; tok = strtok(NULL, "/"))
        c = cJSON_GetObjectItemCaseSensitive(c, tok);
    return c && cJSON_IsNumber(c) ? c->valuedouble : NAN;
}

static int32_t *read_ids(const char *rel, int64_t *n) {
    size_t nb = 0;
    int32_t *ids = th_read_bin(th_shared(rel), &nb);
    *n = (int64_t)(nb / 4);
    return ids;
}

typedef struct chunk_log {
    double ppl[64];
    int n;
} chunk_log;

static bool log_chunk(void *user, int32_t c, double ppl) {
    chunk_log *l = user;
    if (c < 64) l->ppl[c] = ppl;
    l->n = c + 1;
    return true;
}

static lb_context *make_ctx(lb_model *m, int32_t n_ctx) {
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = 2;
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    return ctx;
}

/* tinystories-656k, HF ids, disjoint 256-token windows, all positions:
 * 39.26118111627921 over 7650 tokens, and every window's NLL sum. */
static void test_full_protocol_reference(void) {
    cJSON *ref = read_json(th_shared("reference/ppl/transformers_ppl.json"));
    TH_CHECK(ref != NULL);
    int64_t n;
    int32_t *ids = read_ids("reference/ppl/ids/tinystories-lf.hf-tokenizers."
                            "ids.i32", &n);
    TH_CHECK(ids && n == 7921);
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared("models/tinystories-656k"), NULL, &m));
    if (!ref || !ids || !m) goto done;
    lb_context *ctx = make_ctx(m, 256);
    lb_ppl_params p = lb_ppl_default_params();
    p.protocol = LB_PPL_FULL;
    p.n_ctx = 256;
    chunk_log clog = {0};
    p.on_chunk = log_chunk;
    p.user = &clog;
    lb_ppl_result r;
    TH_CHECK_OK(lb_perplexity(ctx, ids, n, &p, &r));
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(ref, "hf_disjoint_windows"),
        "tinystories-lf");
    double want = jnum(ts, "ppl");
    fprintf(stderr, "  full c256: ppl %.6f (transformers %.6f), +/- %.5f\n",
            r.ppl, want, r.ppl_err);
    TH_CHECK_NEAR(r.ppl, want, 2e-5 * want);
    TH_CHECK_INT(r.tokens_scored, 7650);
    TH_CHECK_INT(r.chunks, 30);
    TH_CHECK_INT(clog.n, 30);
    /* per-window NLL sums from the running perplexities */
    const cJSON *pw = cJSON_GetObjectItemCaseSensitive(ts, "per_window_nll_sum");
    double prev = 0.0, maxd = 0.0;
    for (int w = 0; w < 30 && w < clog.n; w++) {
        double tot = 255.0 * (w + 1) * log(clog.ppl[w]);
        double d = fabs((tot - prev) - cJSON_GetArrayItem(pw, w)->valuedouble);
        if (d > maxd) maxd = d;
        prev = tot;
    }
    fprintf(stderr, "  max |window NLL sum - transformers| = %.3g nats\n", maxd);
    TH_CHECK(maxd < 0.05);
    /* max_chunks; tokens per forward do not matter beyond f32 rounding */
    p.n_batch = 100;
    p.on_chunk = NULL;
    p.max_chunks = 3;
    lb_ppl_result r2;
    TH_CHECK_OK(lb_perplexity(ctx, ids, n, &p, &r2));
    TH_CHECK_INT(r2.chunks, 3);
    TH_CHECK_INT(r2.tokens_scored, 765);
    TH_CHECK_NEAR(r2.ppl, clog.ppl[2], 1e-6 * r2.ppl);
    lb_context_free(ctx);
done:
    lb_model_free(m);
    free(ids);
    cJSON_Delete(ref);
}

/* llama-perplexity's protocol on the HF ids, as recomputed with
 * transformers: c256 34.50692 +/- 1.41277 (3810 tokens), c128 35.21780 +/-
 * 1.43178 (3843 tokens). */
static void test_llama_protocol_reference(void) {
    cJSON *ref = read_json(th_shared("reference/ppl/transformers_ppl.json"));
    int64_t n;
    int32_t *ids = read_ids("reference/ppl/ids/tinystories-lf.hf-tokenizers."
                            "ids.i32", &n);
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared("models/tinystories-656k"), NULL, &m));
    if (!ref || !ids || !m) {
        TH_CHECK(0);
        goto done;
    }
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(ref, "llamacpp_protocol_in_"
                                              "transformers"),
        "tinystories-lf");
    static const struct {
        int ctx;
        const char *key;
        int chunks, tokens;
    } cases[] = {{256, "c256_on_hf_ids", 30, 3810},
                 {128, "c128_on_hf_ids", 61, 3843}};
    lb_context *ctx = make_ctx(m, 256);
    for (size_t i = 0; i < 2; i++) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(lp, cases[i].key);
        lb_ppl_params p = lb_ppl_default_params();
        p.n_ctx = cases[i].ctx;
        p.bos_id = m->config.bos_token_id;
        lb_ppl_result r;
        TH_CHECK_OK(lb_perplexity(ctx, ids, n, &p, &r));
        double want = jnum(c, "ppl"), want_pm = jnum(c, "ppl_pm");
        fprintf(stderr, "  llama c%d: %.5f +/- %.5f (transformers %.5f +/- "
                "%.5f)\n", cases[i].ctx, r.ppl, r.ppl_err, want, want_pm);
        TH_CHECK_NEAR(r.ppl, want, 2e-5 * want);
        TH_CHECK_NEAR(r.ppl_err, want_pm, 1e-4 * want_pm);
        TH_CHECK_INT(r.chunks, cases[i].chunks);
        TH_CHECK_INT(r.tokens_scored, cases[i].tokens);
        TH_CHECK_INT((int)jnum(c, "n_scored_tokens"), cases[i].tokens);
    }
    lb_context_free(ctx);
done:
    lb_model_free(m);
    free(ids);
    cJSON_Delete(ref);
}

/* Independent computation: whole-window forwards with every logit, NLL in
 * long double, sums as the protocols define them. */
static void brute(lb_model *m, const int32_t *ids, int64_t n, int n_ctx,
                  bool llama, int bos, double *ppl, double *err,
                  int64_t *count) {
    lb_context *ctx = make_ctx(m, n_ctx);
    int V = m->config.vocab_size;
    float *lg = malloc((size_t)n_ctx * V * sizeof(float));
    int32_t *w = malloc((size_t)n_ctx * sizeof(int32_t));
    long double s = 0, s2 = 0;
    int64_t cnt = 0;
    for (int64_t c = 0; c < n / n_ctx; c++) {
        memcpy(w, ids + c * n_ctx, (size_t)n_ctx * 4);
        if (llama) w[0] = bos;
        TH_CHECK_OK(lb_model_forward(ctx, w, n_ctx, 0, lg, LB_LOGITS_ALL));
        for (int t = llama ? n_ctx / 2 : 0; t < n_ctx - 1; t++) {
            const float *row = lg + (size_t)t * V;
            long double z = 0;
            for (int i = 0; i < V; i++) z += expl((long double)row[i]);
            long double v = logl(z) - row[w[t + 1]];
            s += v;
            s2 += v * v;
            cnt++;
        }
    }
    long double mean = s / cnt;
    *ppl = (double)expl(mean);
    *err = (double)(sqrtl((s2 / cnt - mean * mean) / (cnt - 1)) * expl(mean));
    *count = cnt;
    free(lg);
    free(w);
    lb_context_free(ctx);
}

static void test_brute_force_random_model(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared("models/random/qwen2-random"), NULL,
                              &m));
    if (!m) return;
    int64_t n = 333;
    int32_t *ids = malloc((size_t)n * 4);
    uint32_t x = 12345;
    for (int64_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        ids[i] = (int32_t)((x >> 8) % (uint32_t)m->config.vocab_size);
    }
    lb_context *ctx = make_ctx(m, 64);
    for (int llama = 0; llama < 2; llama++)
        for (int n_ctx = 16; n_ctx <= 64; n_ctx += 48) {
            double bp, be;
            int64_t bc;
            brute(m, ids, n, n_ctx, llama, 7, &bp, &be, &bc);
            lb_ppl_params p = lb_ppl_default_params();
            p.protocol = llama ? LB_PPL_LLAMA : LB_PPL_FULL;
            p.n_ctx = n_ctx;
            p.bos_id = 7;
            p.n_batch = 5; /* batches that straddle the scored half */
            lb_ppl_result r;
            TH_CHECK_OK(lb_perplexity(ctx, ids, n, &p, &r));
            TH_CHECK_INT(r.tokens_scored, bc);
            TH_CHECK_INT(r.chunks, n / n_ctx);
            TH_CHECK_INT(r.tokens_scored,
                         (n / n_ctx) * (llama ? n_ctx - 1 - n_ctx / 2
                                              : n_ctx - 1));
            TH_CHECK_NEAR(r.ppl, bp, 1e-5 * bp);
            TH_CHECK_NEAR(r.ppl_err, be, 1e-4 * be + 1e-9);
            TH_CHECK_NEAR(r.mean_nll, log(bp), 1e-5);
        }
    /* BOS replacement matters: without it the figure changes */
    lb_ppl_params p = lb_ppl_default_params();
    p.n_ctx = 16;
    p.bos_id = 7;
    lb_ppl_result a, b;
    TH_CHECK_OK(lb_perplexity(ctx, ids, n, &p, &a));
    p.bos_id = -1;
    TH_CHECK_OK(lb_perplexity(ctx, ids, n, &p, &b));
    TH_CHECK(a.ppl != b.ppl);
    lb_context_free(ctx);
    free(ids);
    lb_model_free(m);
}

static void test_nll_row(void) {
    float l[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    double z = exp(1.0) + exp(2.0) + exp(3.0) + exp(4.0);
    TH_CHECK_NEAR(lb_nll_row(l, 4, 2), log(z) - 3.0, 1e-12);
    /* huge logits do not overflow */
    float h[3] = {1000.0f, 1000.0f, -1000.0f};
    TH_CHECK_NEAR(lb_nll_row(h, 3, 0), log(2.0), 1e-12);
}

static bool stop_now(void *user, int32_t c, double ppl) {
    (void)user;
    (void)ppl;
    return c < 1;
}

static void test_errors(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared("models/random/qwen2-random"), NULL,
                              &m));
    if (!m) return;
    lb_context *ctx = make_ctx(m, 32);
    int32_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = i % 50;
    lb_ppl_params p = lb_ppl_default_params();
    lb_ppl_result r;
    p.n_ctx = 32;
    TH_CHECK_FAILS(lb_perplexity(ctx, ids, 63, &p, &r), LB_ERR_RANGE);
    TH_CHECK(strstr(lb_last_error(), "2*n_ctx = 64"));
    TH_CHECK(r.ppl == 0.0);
    TH_CHECK_OK(lb_perplexity(ctx, ids, 64, &p, &r));
    TH_CHECK_INT(r.chunks, 2);
    p.protocol = LB_PPL_FULL;
    TH_CHECK_FAILS(lb_perplexity(ctx, ids, 31, &p, &r), LB_ERR_RANGE);
    TH_CHECK_OK(lb_perplexity(ctx, ids, 32, &p, &r));
    TH_CHECK_INT(r.tokens_scored, 31);
    p.n_ctx = 64; /* larger than the context */
    TH_CHECK_FAILS(lb_perplexity(ctx, ids, 100, &p, &r), LB_ERR_RANGE);
    p.n_ctx = 1;
    TH_CHECK_FAILS(lb_perplexity(ctx, ids, 100, &p, &r), LB_ERR_INVALID_ARG);
    p.n_ctx = 16;
    ids[40] = 512; /* vocab is 512 */
    TH_CHECK_FAILS(lb_perplexity(ctx, ids, 100, &p, &r), LB_ERR_RANGE);
    TH_CHECK(strstr(lb_last_error(), "index 40"));
    ids[40] = 3;
    p.protocol = LB_PPL_LLAMA;
    p.bos_id = 9999;
    TH_CHECK_FAILS(lb_perplexity(ctx, ids, 100, &p, &r), LB_ERR_RANGE);
    p.bos_id = 1;
    p.protocol = (lb_ppl_protocol)7;
    TH_CHECK_FAILS(lb_perplexity(ctx, ids, 100, &p, &r), LB_ERR_INVALID_ARG);
    p.protocol = LB_PPL_FULL;
    p.on_chunk = stop_now;
    TH_CHECK_FAILS(lb_perplexity(ctx, ids, 100, &p, &r), LB_ERR_CANCELLED);
    TH_CHECK_INT(lb_ppl_protocol_from_name("full"), LB_PPL_FULL);
    TH_CHECK_INT(lb_ppl_protocol_from_name("llama"), LB_PPL_LLAMA);
    TH_CHECK_INT(lb_ppl_protocol_from_name("LLAMA"), -1);
    lb_context_free(ctx);
    lb_model_free(m);
}

int main(void) {
    TH_RUN(test_nll_row);
    TH_RUN(test_full_protocol_reference);
    TH_RUN(test_llama_protocol_reference);
    TH_RUN(test_brute_force_random_model);
    TH_RUN(test_errors);
    return th_report();
}
