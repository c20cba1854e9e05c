/*
 * test_parity — lb_parity (lowbit/parity.h).
 *
 * Checks:
 *  - a model against itself: agreement 1, KL 0, MSE 0, Pearson 1, no
 *    divergence, same greedy text;
 *  - dense tinystories-656k against its AutoGPTQ checkpoint
 *    (../shared/reference/gptq_model): every metric recomputed here from
 *    logits produced one token at a time (decode path, not the batched
 *    prefill lb_parity uses), with the textbook formulas in long double;
 *    the perplexities equal exp(mean NLL) of those logits; greedy
 *    continuations recomputed by lb_model_forward token by token;
 *  (the GPTQ checkpoint against its GGUF export: test_parity_gguf.c);
 *  - bad inputs.
 */
#include "th.h"

#include "lowbit/model.h"
#include "lowbit/parity.h"
#include "lowbit/tokenizer.h"
#include "lowbit/file.h"

#include <math.h>
#include <unistd.h>

static int32_t *sample_ids(const char *model, size_t *n) {
    lb_tokenizer *tok = NULL;
    TH_CHECK_OK(lb_tokenizer_load_hf(th_shared(model), &tok));
    char *text = NULL;
    size_t len = 0;
    TH_CHECK_OK(lb_read_file(th_shared("corpora/tinystories/tinystories_sample_cs336.txt"),
                             1 << 20, &text, &len));
    int32_t *ids = NULL;
    *n = 0;
    if (tok && text) TH_CHECK_OK(lb_tokenizer_encode(tok, text, len, true, &ids, n));
    free(text);
    lb_tokenizer_free(tok);
    return ids;
}

static lb_context *ctx_for(lb_model *m, int32_t n_ctx) {
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = 2;
    lb_context *c = NULL;
    TH_CHECK_OK(lb_context_create(m, &cp, &c));
    return c;
}

static void test_self(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared("models/tinystories-656k"), NULL, &m));
    size_t n = 0;
    int32_t *ids = sample_ids("models/tinystories-656k", &n);
    if (!m || !ids) return;
    lb_context *a = ctx_for(m, 128), *b = ctx_for(m, 128);
    lb_parity_params p = lb_parity_default_params();
    p.n_ctx = 128;
    lb_parity_result r;
    TH_CHECK_OK(lb_parity(a, b, ids, (int64_t)n, &p, &r));
    TH_CHECK_INT(r.n_windows, (int)(n / 128));
    TH_CHECK_INT(r.n_positions, (int64_t)(n / 128) * 128);
    TH_CHECK(r.top1_agreement == 1.0 && r.mse == 0 && r.mean_kl == 0 && r.max_kl == 0);
    TH_CHECK_NEAR(r.pearson, 1.0, 1e-12);
    TH_CHECK_INT(r.first_divergence, -1);
    TH_CHECK_INT(r.greedy_divergence, -1);
    TH_CHECK_INT(r.n_greedy, 32);
    TH_CHECK(r.nll_a == r.nll_b);
    lb_parity_result_free(&r);
    lb_context_free(a);
    lb_context_free(b);
    lb_model_free(m);
    free(ids);
}

static int32_t argmax_ref(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void test_dense_vs_gptq_recomputed(void) {
    lb_model *ma = NULL, *mb = NULL;
    TH_CHECK_OK(lb_model_load(th_shared("models/tinystories-656k"), NULL, &ma));
    lb_model_load_opts lo = {0};
    lo.gptq_mode = LB_GPTQ_LOAD_F32;
    TH_CHECK_OK(lb_model_load(th_shared("reference/gptq_model/gptq_checkpoint"), &lo, &mb));
    size_t n = 0;
    int32_t *ids = sample_ids("models/tinystories-656k", &n);
    if (!ma || !mb || !ids) goto out;
    const int32_t C = 64, V = 2048;
    lb_context *a = ctx_for(ma, C), *b = ctx_for(mb, C);
    lb_parity_params p = lb_parity_default_params();
    p.n_ctx = C;
    p.max_windows = 3;
    p.n_prompt = 5;
    p.n_greedy = 20;
    lb_parity_result r;
    TH_CHECK_OK(lb_parity(a, b, ids, (int64_t)n, &p, &r));
    /* recompute: decode one token at a time */
    long double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0, sd2 = 0, kl = 0, maxkl = 0, na = 0, nb = 0;
    int64_t agree = 0, first = -1, npos = 0, nn = 0;
    float *xa = malloc(V * 4), *xb = malloc(V * 4);
    for (int w = 0; w < 3; w++) {
        lb_context_reset(a);
        lb_context_reset(b);
        for (int t = 0; t < C; t++) {
            const int32_t tok = ids[w * C + t];
            TH_CHECK_OK(lb_model_forward(a, &tok, 1, t, xa, LB_LOGITS_LAST));
            TH_CHECK_OK(lb_model_forward(b, &tok, 1, t, xb, LB_LOGITS_LAST));
            int32_t ta = argmax_ref(xa, V), tb = argmax_ref(xb, V);
            agree += ta == tb;
            if (ta != tb && first < 0) first = w * C + t;
            long double ma_ = xa[0], mb_ = xb[0];
            for (int v = 1; v < V; v++) {
                if (xa[v] > ma_) ma_ = xa[v];
                if (xb[v] > mb_) mb_ = xb[v];
            }
            long double za = 0, zb = 0;
            for (int v = 0; v < V; v++) {
                za += expl(xa[v] - ma_);
                zb += expl(xb[v] - mb_);
            }
            long double k = 0;
            for (int v = 0; v < V; v++) {
                long double pa = expl(xa[v] - ma_) / za, pb = expl(xb[v] - mb_) / zb;
                k += pa * logl(pa / pb);
                sa += xa[v], sb += xb[v], saa += (long double)xa[v] * xa[v];
                sbb += (long double)xb[v] * xb[v], sab += (long double)xa[v] * xb[v];
                sd2 += ((long double)xa[v] - xb[v]) * ((long double)xa[v] - xb[v]);
            }
            kl += k;
            if (k > maxkl) maxkl = k;
            if (t + 1 < C) {
                const int32_t next = ids[w * C + t + 1];
                na += -(xa[next] - ma_ - logl(za));
                nb += -(xb[next] - mb_ - logl(zb));
                nn++;
            }
            npos++;
        }
    }
    const long double N = (long double)npos * V;
    const long double pear = (sab / N - sa / N * sb / N) /
                             sqrtl((saa / N - sa / N * sa / N) * (sbb / N - sb / N * sb / N));
    fprintf(stderr, "  dense vs GPTQ(f32): agreement %.4f (recount %.4f), r %.6f, mse %.4g, "
                    "KL %.4g, ppl %.3f / %.3f\n",
            r.top1_agreement, (double)agree / (double)npos, r.pearson, r.mse, r.mean_kl,
            exp(r.nll_a), exp(r.nll_b));
    TH_CHECK_INT(r.n_positions, npos);
    /* decode vs prefill logits differ by f32 rounding only: argmax counts
     * may move by a near-tie at most */
    TH_CHECK_MSG(llabs(r.n_top1_agree - agree) <= 1, "%lld vs %lld", (long long)r.n_top1_agree,
                 (long long)agree);
    TH_CHECK_NEAR(r.pearson, (double)pear, 1e-5);
    TH_CHECK_NEAR(r.mse, (double)(sd2 / N), 1e-4 * (double)(sd2 / N) + 1e-9);
    TH_CHECK_NEAR(r.mean_kl, (double)(kl / npos), 1e-4 * (double)(kl / npos) + 1e-9);
    TH_CHECK_NEAR(r.max_kl, (double)maxkl, 1e-3 * (double)maxkl + 1e-9);
    TH_CHECK_NEAR(r.nll_a, (double)(na / nn), 1e-5);
    TH_CHECK_NEAR(r.nll_b, (double)(nb / nn), 1e-5);
    TH_CHECK(r.top1_agreement > 0.6 && r.top1_agreement < 1.0); /* a real difference */
    TH_CHECK(first >= 0 && r.first_divergence == first);
    /* greedy recomputed */
    int32_t ga[20], gb[20];
    lb_context *cs[2] = {a, b};
    int32_t *gs[2] = {ga, gb};
    for (int k = 0; k < 2; k++) {
        lb_context_reset(cs[k]);
        TH_CHECK_OK(lb_model_forward(cs[k], ids, 5, 0, xa, LB_LOGITS_LAST));
        for (int i = 0; i < 20; i++) {
            gs[k][i] = argmax_ref(xa, V);
            if (i < 19) TH_CHECK_OK(lb_model_forward(cs[k], &gs[k][i], 1, 5 + i, xa, LB_LOGITS_LAST));
        }
    }
    int gdiv = -1;
    for (int i = 0; i < 20 && gdiv < 0; i++)
        if (ga[i] != gb[i]) gdiv = i;
    TH_CHECK_INT(r.greedy_divergence, gdiv);
    for (int i = 0; i < 20; i++) TH_CHECK(r.greedy_a[i] == ga[i] && r.greedy_b[i] == gb[i]);
    free(xa);
    free(xb);
    lb_parity_result_free(&r);
    lb_context_free(a);
    lb_context_free(b);
out:
    lb_model_free(ma);
    lb_model_free(mb);
    free(ids);
}

static void test_errors(void) {
    lb_model *m = NULL, *q = NULL;
    TH_CHECK_OK(lb_model_load(th_shared("models/tinystories-656k"), NULL, &m));
    TH_CHECK_OK(lb_model_load(th_shared("models/random/qwen2-random"), NULL, &q));
    if (!m || !q) goto out;
    lb_context *a = ctx_for(m, 64), *b = ctx_for(q, 64), *c = ctx_for(m, 64);
    int32_t ids[200];
    for (int i = 0; i < 200; i++) ids[i] = i % 500;
    lb_parity_result r;
    lb_parity_params p = lb_parity_default_params();
    p.n_ctx = 64;
    TH_CHECK_FAILS(lb_parity(a, b, ids, 200, &p, &r), LB_ERR_INVALID_ARG); /* vocab */
    TH_CHECK_FAILS(lb_parity(a, c, ids, 32, &p, &r), LB_ERR_RANGE);        /* too few */
    p.n_ctx = 128;
    TH_CHECK_FAILS(lb_parity(a, c, ids, 200, &p, &r), LB_ERR_RANGE); /* ctx too small */
    p.n_ctx = 1;
    TH_CHECK_FAILS(lb_parity(a, c, ids, 200, &p, &r), LB_ERR_INVALID_ARG);
    p.n_ctx = 64;
    ids[70] = 5000;
    TH_CHECK_FAILS(lb_parity(a, c, ids, 200, &p, &r), LB_ERR_RANGE);
    TH_CHECK_FAILS(lb_parity(NULL, c, ids, 200, &p, &r), LB_ERR_INVALID_ARG);
    TH_CHECK(r.greedy_a == NULL && r.n_positions == 0);
    lb_context_free(a);
    lb_context_free(b);
    lb_context_free(c);
out:
    lb_model_free(m);
    lb_model_free(q);
}

int main(void) {
    TH_RUN(test_self);
    TH_RUN(test_dense_vs_gptq_recomputed);
    TH_RUN(test_errors);
    rmdir(th_tmpdir());
    return th_report();
}
