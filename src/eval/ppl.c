/*
 * Perplexity (lowbit/eval.h): the "full" disjoint-window protocol of the
 * transformers references and llama.cpp's llama-perplexity protocol
 * (examples/perplexity/perplexity.cpp, perplexity(): BOS over each chunk's
 * first token, second half scored, "+/-" from the NLL variance).
 */
#include "lowbit/eval.h"
#include "core/internal.h"

#include <math.h>
#include <stdio.h>

const char *lb_ppl_protocol_name(lb_ppl_protocol p) {
    switch (p) {
    case LB_PPL_LLAMA: return "llama";
    case LB_PPL_FULL: return "full";
    }
    return "?";
}

int lb_ppl_protocol_from_name(const char *name) {
    if (!name) return -1;
    if (!strcmp(name, "llama")) return LB_PPL_LLAMA;
    if (!strcmp(name, "full")) return LB_PPL_FULL;
    return -1;
}

lb_ppl_params lb_ppl_default_params(void) {
    lb_ppl_params p;
    memset(&p, 0, sizeof p);
    p.protocol = LB_PPL_LLAMA;
    p.n_ctx = 512;
    p.bos_id = -1;
    return p;
}

double lb_nll_row(const float *logits, int32_t n_vocab, int32_t target) {
    double mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++)
        if ((double)logits[i] > mx) mx = (double)logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    return log(sum) + mx - (double)logits[target];
}

/* PPL and its error from the running sums, as perplexity.cpp's final
 * print: nll /= count; nll2 /= count; nll2 -= nll^2;
 * err = sqrt(nll2 / (count - 1)) * ppl when nll2 > 0. */
static void finish(double nll, double nll2, int64_t count, lb_ppl_result *r) {
    double mean = nll / (double)count, mean2 = nll2 / (double)count;
    r->sum_nll = nll;
    r->mean_nll = mean;
    r->ppl = exp(mean);
    double var = mean2 - mean * mean;
    r->ppl_err = (count > 1 && var > 0.0)
                     ? sqrt(var / (double)(count - 1)) * r->ppl
                     : 0.0;
    r->tokens_scored = count;
}

lb_status lb_perplexity(lb_context *ctx, const int32_t *tokens,
                        int64_t n_tokens, const lb_ppl_params *p,
                        lb_ppl_result *res) {
    static const char *who = "perplexity";
    if (!res) return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL result", who);
    memset(res, 0, sizeof *res);
    if (!ctx || !tokens || !p)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL argument", who);
    if (p->protocol != LB_PPL_LLAMA && p->protocol != LB_PPL_FULL)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: unknown protocol %d", who,
                            (int)p->protocol);
    const bool llama = p->protocol == LB_PPL_LLAMA;
    const int32_t n_ctx = p->n_ctx;
    if (n_ctx < (llama ? 4 : 2))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: n_ctx %d too small for the %s protocol", who,
                            (int)n_ctx, lb_ppl_protocol_name(p->protocol));
    if (n_ctx > lb_context_n_ctx(ctx))
        return lb_set_error(LB_ERR_RANGE,
                            "%s: window of %d tokens exceeds the context's "
                            "n_ctx %d",
                            who, (int)n_ctx, (int)lb_context_n_ctx(ctx));
    const lb_model *m = lb_context_model(ctx);
    const int32_t V = m->config.vocab_size;
    if (llama && p->bos_id >= V)
        return lb_set_error(LB_ERR_RANGE, "%s: bos_id %d outside [0, %d)", who,
                            (int)p->bos_id, (int)V);
    if (n_tokens < 0) n_tokens = 0;
    if (llama && n_tokens < 2 * (int64_t)n_ctx)
        return lb_set_error(LB_ERR_RANGE,
                            "%s: %lld tokens, the llama protocol needs at "
                            "least 2*n_ctx = %lld (llama-perplexity's rule)",
                            who, (long long)n_tokens, 2 * (long long)n_ctx);
    if (!llama && n_tokens < n_ctx)
        return lb_set_error(LB_ERR_RANGE,
                            "%s: %lld tokens, fewer than one window of %d",
                            who, (long long)n_tokens, (int)n_ctx);
    for (int64_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return lb_set_error(LB_ERR_RANGE,
                                "%s: token id %d at index %lld outside [0, "
                                "%d)",
                                who, (int)tokens[i], (long long)i, (int)V);

    int64_t n_chunks = n_tokens / n_ctx;
    if (p->max_chunks > 0 && n_chunks > p->max_chunks) n_chunks = p->max_chunks;
    const int32_t n_batch =
        p->n_batch > 0 && p->n_batch < n_ctx ? p->n_batch : n_ctx;
    /* first scored logit row within a chunk */
    const int32_t first = llama ? n_ctx / 2 : 0;

    size_t nlog;
    if (!lb_mul_ok((size_t)n_batch, (size_t)V, &nlog) ||
        !lb_mul_ok(nlog, sizeof(float), &nlog))
        return lb_set_error(LB_ERR_OVERFLOW, "%s: logits buffer overflows",
                            who);
    float *logits = lb_alloc(nlog);
    int32_t *chunk = lb_alloc((size_t)n_ctx * sizeof(int32_t));
    if (!logits || !chunk) {
        lb_free(logits);
        lb_free(chunk);
        return lb_set_error(LB_ERR_NOMEM, "%s: out of memory for %d x %d "
                            "logits", who, (int)n_batch, (int)V);
    }
    lb_status st = LB_OK;
    double nll = 0.0, nll2 = 0.0;
    int64_t count = 0;
    for (int64_t c = 0; c < n_chunks && st == LB_OK; c++) {
        memcpy(chunk, tokens + c * n_ctx, (size_t)n_ctx * sizeof(int32_t));
        if (llama && p->bos_id >= 0) chunk[0] = p->bos_id;
        lb_context_reset(ctx);
        for (int32_t b0 = 0; b0 < n_ctx && st == LB_OK; b0 += n_batch) {
            const int32_t nb = LB_MIN(n_batch, n_ctx - b0);
            /* rows b0+j of the chunk predict chunk token b0+j+1; scored
             * rows are first..n_ctx-2 */
            const bool need = b0 + nb - 1 >= first && b0 <= n_ctx - 2;
            st = lb_model_forward(ctx, chunk + b0, nb, b0,
                                  need ? logits : NULL,
                                  need ? LB_LOGITS_ALL : LB_LOGITS_NONE);
            if (st != LB_OK || !need) continue;
            for (int32_t j = 0; j < nb; j++) {
                int32_t row = b0 + j;
                if (row < first || row > n_ctx - 2) continue;
                double v = lb_nll_row(logits + (size_t)j * V, V,
                                      chunk[row + 1]);
                nll += v;
                nll2 += v * v;
                count++;
                if (p->on_row) {
                    st = p->on_row(p->row_user, c, row,
                                   logits + (size_t)j * V, V, chunk[row + 1]);
                    if (st != LB_OK) break;
                }
            }
        }
        if (st != LB_OK) break;
        res->chunks = (int32_t)(c + 1);
        if (p->on_chunk &&
            !p->on_chunk(p->user, (int32_t)c, exp(nll / (double)count)))
            st = lb_set_error(LB_ERR_CANCELLED, "%s: stopped after chunk %lld",
                              who, (long long)c + 1);
        else if (!lb_progress_report(&p->progress, "ppl", (uint64_t)c + 1,
                                     (uint64_t)n_chunks))
            st = lb_set_error(LB_ERR_CANCELLED, "%s: cancelled", who);
    }
    lb_context_reset(ctx);
    lb_free(logits);
    lb_free(chunk);
    if (st != LB_OK) {
        memset(res, 0, sizeof *res);
        return st;
    }
    int32_t chunks = res->chunks;
    finish(nll, nll2, count, res);
    res->chunks = chunks;
    return LB_OK;
}
