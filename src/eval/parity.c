/*
 * Parity of two models on the same tokens (lowbit/parity.h).
 */
#include "lowbit/parity.h"
#include "core/internal.h"

#include <math.h>
#include <stdlib.h>

lb_parity_params lb_parity_default_params(void) {
    lb_parity_params p;
    memset(&p, 0, sizeof p);
    p.n_ctx = 256;
    p.n_prompt = 8;
    p.n_greedy = 32;
    return p;
}

void lb_parity_result_free(lb_parity_result *r) {
    if (!r) return;
    free(r->greedy_a);
    free(r->greedy_b);
    r->greedy_a = r->greedy_b = NULL;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* log-sum-exp of a row in double */
static double lse(const float *x, int32_t n) {
    double m = x[0];
    for (int32_t i = 1; i < n; i++)
        if (x[i] > m) m = x[i];
    double s = 0;
    for (int32_t i = 0; i < n; i++) s += exp((double)x[i] - m);
    return m + log(s);
}

/* Greedy continuation of prompt[0..np) for n tokens. */
static lb_status greedy(lb_context *ctx, const int32_t *prompt, int32_t np, int32_t n,
                        float *logits, int32_t *out) {
    const int32_t V = lb_context_model(ctx)->config.vocab_size;
    lb_context_reset(ctx);
    LB_TRY(lb_model_forward(ctx, prompt, np, 0, logits, LB_LOGITS_LAST));
    for (int32_t i = 0; i < n; i++) {
        out[i] = argmax(logits, V);
        if (i + 1 < n) LB_TRY(lb_model_forward(ctx, &out[i], 1, np + i, logits, LB_LOGITS_LAST));
    }
    return LB_OK;
}

lb_status lb_parity(lb_context *a, lb_context *b, const int32_t *tokens,
                    int64_t n_tokens, const lb_parity_params *params,
                    lb_parity_result *res) {
    if (!res) return lb_set_error(LB_ERR_INVALID_ARG, "parity: NULL result");
    memset(res, 0, sizeof *res);
    lb_parity_params def = lb_parity_default_params();
    const lb_parity_params *p = params ? params : &def;
    if (!a || !b || !tokens)
        return lb_set_error(LB_ERR_INVALID_ARG, "parity: NULL context or tokens");
    const int32_t V = lb_context_model(a)->config.vocab_size;
    if (lb_context_model(b)->config.vocab_size != V)
        return lb_set_error(LB_ERR_INVALID_ARG, "parity: vocabularies differ (%d vs %d)", V,
                            lb_context_model(b)->config.vocab_size);
    const int32_t n_ctx = p->n_ctx;
    if (n_ctx < 2) return lb_set_error(LB_ERR_INVALID_ARG, "parity: n_ctx %d < 2", n_ctx);
    if (p->n_greedy < 0 || p->n_greedy > LB_PARITY_MAX_GREEDY || p->n_prompt < 1)
        return lb_set_error(LB_ERR_INVALID_ARG, "parity: n_greedy %d / n_prompt %d",
                            p->n_greedy, p->n_prompt);
    if (n_tokens < n_ctx)
        return lb_set_error(LB_ERR_RANGE, "parity: %lld tokens, a window needs %d",
                            (long long)n_tokens, n_ctx);
    const int32_t need = LB_MAX(n_ctx, p->n_greedy ? p->n_prompt + p->n_greedy : 0);
    if (lb_context_n_ctx(a) < need || lb_context_n_ctx(b) < need)
        return lb_set_error(LB_ERR_RANGE, "parity: contexts of %d / %d tokens, need %d",
                            lb_context_n_ctx(a), lb_context_n_ctx(b), need);
    for (int64_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return lb_set_error(LB_ERR_RANGE, "parity: token %lld = %d outside [0, %d)",
                                (long long)i, tokens[i], V);
    int64_t n_win = n_tokens / n_ctx;
    if (p->max_windows > 0 && n_win > p->max_windows) n_win = p->max_windows;
    size_t lb;
    if (!lb_mul_ok((size_t)n_ctx, (size_t)V * sizeof(float), &lb))
        return lb_set_error(LB_ERR_OVERFLOW, "parity: logits buffer overflows");
    float *la = lb_alloc(lb), *lbuf = lb_alloc(lb);
    lb_status s = LB_OK;
    if (!la || !lbuf) s = lb_set_error(LB_ERR_NOMEM, "parity: out of memory (logits)");
    double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0, sd2 = 0, kl_sum = 0, nll_a = 0, nll_b = 0;
    int64_t n_nll = 0;
    res->first_divergence = -1;
    res->div_top1_a = res->div_top1_b = -1;
    for (int64_t w = 0; s == LB_OK && w < n_win; w++) {
        const int32_t *win = tokens + w * n_ctx;
        lb_context_reset(a);
        lb_context_reset(b);
        s = lb_model_forward(a, win, n_ctx, 0, la, LB_LOGITS_ALL);
        if (s == LB_OK) s = lb_model_forward(b, win, n_ctx, 0, lbuf, LB_LOGITS_ALL);
        for (int32_t t = 0; s == LB_OK && t < n_ctx; t++) {
            const float *x = la + (size_t)t * V, *y = lbuf + (size_t)t * V;
            int32_t ta = argmax(x, V), tb = argmax(y, V);
            res->n_positions++;
            if (ta == tb) res->n_top1_agree++;
            else if (res->first_divergence < 0) {
                res->first_divergence = w * n_ctx + t;
                res->div_top1_a = ta;
                res->div_top1_b = tb;
            }
            const double lsa = lse(x, V), lsb = lse(y, V);
            double kl = 0;
            for (int32_t v = 0; v < V; v++) {
                const double xa = x[v], yb = y[v];
                sa += xa;
                sb += yb;
                saa += xa * xa;
                sbb += yb * yb;
                sab += xa * yb;
                sd2 += (xa - yb) * (xa - yb);
                const double lpa = xa - lsa, lpb = yb - lsb;
                kl += exp(lpa) * (lpa - lpb);
            }
            if (kl < 0) kl = 0; /* rounding */
            kl_sum += kl;
            if (kl > res->max_kl) res->max_kl = kl;
            if (t + 1 < n_ctx) {
                nll_a += lsa - x[win[t + 1]];
                nll_b += lsb - y[win[t + 1]];
                n_nll++;
            }
        }
        res->n_windows++;
        if (s == LB_OK && !lb_progress_report(&p->progress, "parity", (uint64_t)w + 1,
                                              (uint64_t)n_win))
            s = lb_set_error(LB_ERR_CANCELLED, "parity cancelled");
    }
    if (s == LB_OK) {
        const double n = (double)res->n_positions * V;
        res->top1_agreement = (double)res->n_top1_agree / (double)res->n_positions;
        res->mse = sd2 / n;
        const double cov = sab / n - (sa / n) * (sb / n);
        const double va = saa / n - (sa / n) * (sa / n), vb = sbb / n - (sb / n) * (sb / n);
        res->pearson = va > 0 && vb > 0 ? cov / sqrt(va * vb) : (va == vb ? 1.0 : 0.0);
        res->mean_kl = kl_sum / (double)res->n_positions;
        res->nll_a = n_nll ? nll_a / (double)n_nll : 0;
        res->nll_b = n_nll ? nll_b / (double)n_nll : 0;
    }
    if (s == LB_OK && p->n_greedy > 0) {
        int32_t np = (int32_t)LB_MIN((int64_t)p->n_prompt, n_tokens);
        res->greedy_a = malloc((size_t)p->n_greedy * sizeof(int32_t));
        res->greedy_b = malloc((size_t)p->n_greedy * sizeof(int32_t));
        if (!res->greedy_a || !res->greedy_b) s = lb_set_error(LB_ERR_NOMEM, "parity: out of memory");
        if (s == LB_OK) s = greedy(a, tokens, np, p->n_greedy, la, res->greedy_a);
        if (s == LB_OK) s = greedy(b, tokens, np, p->n_greedy, lbuf, res->greedy_b);
        if (s == LB_OK) {
            res->n_greedy = p->n_greedy;
            res->greedy_divergence = -1;
            res->greedy_token_a = res->greedy_token_b = -1;
            for (int32_t i = 0; i < p->n_greedy; i++)
                if (res->greedy_a[i] != res->greedy_b[i]) {
                    res->greedy_divergence = i;
                    res->greedy_token_a = res->greedy_a[i];
                    res->greedy_token_b = res->greedy_b[i];
                    break;
                }
        }
    }
    lb_free(la);
    lb_free(lbuf);
    if (s != LB_OK) {
        lb_parity_result_free(res);
        memset(res, 0, sizeof *res);
    }
    return s;
}
