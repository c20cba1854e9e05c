/*
 * Task scoring as lm-evaluation-harness does it (lowbit/eval_task.h):
 * continuation log-likelihoods with the context's KV cache shared by every
 * choice, rolling log-likelihood windows, acc / acc_norm / perplexities.
 */
#include "lowbit/eval_task.h"
#include "lowbit/eval.h"
#include "core/internal.h"

#include <math.h>
#include <stdlib.h>

/* rows of logits per forward call while scoring */
#define SCORE_ROWS 64

lb_eval_params lb_eval_default_params(void) {
    lb_eval_params p;
    memset(&p, 0, sizeof p);
    return p;
}

void lb_eval_result_free(lb_eval_result *r) {
    if (!r) return;
    free(r->loglik);
    free(r->greedy);
    free(r->req_item);
    free(r->pred);
    free(r->pred_norm);
    memset(r, 0, sizeof *r);
}

static int32_t argmax_row(const float *row, int32_t V) {
    int32_t best = 0;
    for (int32_t i = 1; i < V; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

/* Run input[0..n_in) from position pos0 (the cache must hold exactly pos0
 * positions) and add the log-probabilities of rows r0..n_in-1, row r
 * predicting tgt[r - r0]. */
static lb_status score_rows(lb_context *ctx, float *logits, int32_t V,
                            const int32_t *input, int32_t n_in, int32_t pos0,
                            int32_t r0, const int32_t *tgt, double *ll,
                            bool *greedy) {
    for (int32_t b0 = 0; b0 < n_in; b0 += SCORE_ROWS) {
        int32_t nb = LB_MIN(SCORE_ROWS, n_in - b0);
        bool need = b0 + nb > r0;
        LB_TRY(lb_model_forward(ctx, input + b0, nb, pos0 + b0,
                                need ? logits : NULL,
                                need ? LB_LOGITS_ALL : LB_LOGITS_NONE));
        if (!need) continue;
        for (int32_t j = 0; j < nb; j++) {
            int32_t r = b0 + j;
            if (r < r0) continue;
            const float *row = logits + (size_t)j * V;
            int32_t t = tgt[r - r0];
            *ll -= lb_nll_row(row, V, t);
            if (argmax_row(row, V) != t) *greedy = false;
        }
    }
    return LB_OK;
}

static lb_status alloc_rows(int32_t V, float **out) {
    size_t n;
    if (!lb_mul_ok((size_t)SCORE_ROWS, (size_t)V, &n) ||
        !lb_mul_ok(n, sizeof(float), &n))
        return lb_set_error(LB_ERR_OVERFLOW, "loglik: logits buffer overflows");
    *out = lb_alloc(n);
    return *out ? LB_OK : lb_set_error(LB_ERR_NOMEM, "loglik: out of memory");
}

static lb_status check_ids(const int32_t *ids, int64_t n, int32_t V,
                           const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return lb_set_error(LB_ERR_RANGE, "loglik: %s token %d at %lld "
                                "outside the model's vocabulary [0, %d)",
                                what, (int)ids[i], (long long)i, (int)V);
    return LB_OK;
}

lb_status lb_loglik_choices(lb_context *ctx, const int32_t *context,
                            int32_t n_context, const int32_t *const *conts,
                            const int32_t *n_conts, int32_t n_choices,
                            double *loglik, bool *greedy) {
    if (!ctx || !context || !conts || !n_conts || !loglik || n_choices < 1 ||
        n_context < 1)
        return lb_set_error(LB_ERR_INVALID_ARG, "loglik: bad arguments");
    const int32_t V = lb_context_model(ctx)->config.vocab_size;
    const int32_t n_ctx = lb_context_n_ctx(ctx);
    LB_TRY(check_ids(context, n_context, V, "context"));
    for (int32_t i = 0; i < n_choices; i++) {
        if (!conts[i] || n_conts[i] < 1)
            return lb_set_error(LB_ERR_INVALID_ARG, "loglik: continuation %d "
                                "is empty", (int)i);
        if ((int64_t)n_context + n_conts[i] - 1 > n_ctx)
            return lb_set_error(LB_ERR_RANGE, "loglik: %d context + %d "
                                "continuation tokens exceed n_ctx %d",
                                (int)n_context, (int)n_conts[i], (int)n_ctx);
        LB_TRY(check_ids(conts[i], n_conts[i], V, "continuation"));
    }
    float *rows = NULL, *last = lb_alloc((size_t)V * sizeof(float));
    lb_status st = last ? alloc_rows(V, &rows)
                        : lb_set_error(LB_ERR_NOMEM, "loglik: out of memory");
    lb_context_reset(ctx);
    if (st == LB_OK)
        st = lb_model_forward(ctx, context, n_context, 0, last, LB_LOGITS_LAST);
    for (int32_t i = 0; i < n_choices && st == LB_OK; i++) {
        const int32_t *c = conts[i];
        double ll = -lb_nll_row(last, V, c[0]);
        bool g = argmax_row(last, V) == c[0];
        st = lb_context_truncate(ctx, n_context);
        if (st == LB_OK && n_conts[i] > 1)
            st = score_rows(ctx, rows, V, c, n_conts[i] - 1, n_context, 0,
                            c + 1, &ll, &g);
        loglik[i] = ll;
        if (greedy) greedy[i] = g;
    }
    lb_context_reset(ctx);
    lb_free(rows);
    lb_free(last);
    return st;
}

lb_status lb_loglik_rolling(lb_context *ctx, const int32_t *tokens, int64_t n,
                            int32_t prefix_token, int32_t max_length,
                            double *loglik, bool *greedy) {
    if (!ctx || !tokens || n < 1 || !loglik)
        return lb_set_error(LB_ERR_INVALID_ARG, "rolling: bad arguments");
    const int32_t V = lb_context_model(ctx)->config.vocab_size;
    if (max_length < 1 || max_length > lb_context_n_ctx(ctx))
        return lb_set_error(LB_ERR_RANGE, "rolling: max_length %d outside "
                            "[1, n_ctx %d]", (int)max_length,
                            (int)lb_context_n_ctx(ctx));
    if (prefix_token < 0 || prefix_token >= V)
        return lb_set_error(LB_ERR_RANGE, "rolling: prefix token %d outside "
                            "[0, %d)", (int)prefix_token, (int)V);
    LB_TRY(check_ids(tokens, n, V, "document"));
    const int32_t L = max_length;
    float *rows = NULL;
    LB_TRY(alloc_rows(V, &rows));
    int32_t *in = malloc((size_t)L * sizeof(int32_t));
    double ll = 0.0;
    bool g = true;
    lb_status st = in ? LB_OK : lb_set_error(LB_ERR_NOMEM, "rolling: out of "
                                             "memory");
    /* first window: [prefix] + tokens[0..first-1) predicts tokens[0..first) */
    int64_t first = n < L ? n : L;
    if (st == LB_OK) {
        in[0] = prefix_token;
        memcpy(in + 1, tokens, (size_t)(first - 1) * sizeof(int32_t));
        lb_context_reset(ctx);
        st = score_rows(ctx, rows, V, in, (int32_t)first, 0, 0, tokens, &ll,
                        &g);
    }
    /* later windows: input tokens[end-L-1 .. end-1), the last plen rows
     * predict tokens[end-plen .. end) */
    for (int64_t done = first; st == LB_OK && done < n;) {
        int64_t plen = n - done < L ? n - done : L;
        int64_t end = done + plen;
        lb_context_reset(ctx);
        st = score_rows(ctx, rows, V, tokens + (end - L - 1), L, 0,
                        (int32_t)(L - plen), tokens + (end - plen), &ll, &g);
        done = end;
    }
    lb_context_reset(ctx);
    free(in);
    lb_free(rows);
    if (st == LB_OK) {
        *loglik = ll;
        if (greedy) *greedy = g;
    }
    return st;
}

/* ------------------------------------------------------------------------ */
/* Tasks                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct enc_buf {
    int32_t *ids;
    size_t n;
} enc_buf;

static lb_status encode(const lb_tokenizer *tok, const char *s, size_t len,
                        bool add_special, enc_buf *out) {
    free(out->ids);
    out->ids = NULL;
    out->n = 0;
    return lb_tokenizer_encode(tok, s, len, add_special, &out->ids, &out->n);
}

/* Byte length of s without its trailing whitespace (Python's rstrip()). */
static size_t rstrip_len(const char *s, size_t len) {
    size_t keep = 0;
    for (size_t i = 0; i < len;) {
        size_t j;
        unsigned char c = (unsigned char)s[i];
        size_t cl = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3
                    : (c >> 3) == 30 ? 4 : 1;
        if (i + cl > len) cl = len - i;
        j = i + cl;
        /* a code point is whitespace iff splitting it gives 2 words */
        if (lb_count_words(s + i, cl) != 2) keep = j;
        i = j;
    }
    return keep;
}

typedef struct strbuf {
    char *s;
    size_t n, cap;
} strbuf;

static bool sb_add(strbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = (b->n + n + 1) * 2;
        char *ns = realloc(b->s, c);
        if (!ns) return false;
        b->s = ns;
        b->cap = c;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
    return true;
}

static const char TARGET_DELIM[] = " ";
static const char FEWSHOT_DELIM[] = "\n\n";

/* Score one choice item; loglik/greedy get its n_choices requests. */
static lb_status score_choice_item(lb_context *ctx, const lb_tokenizer *tok,
                                   const lb_task_item *it, const char *shots,
                                   size_t shots_len, const lb_eval_params *p,
                                   int32_t L, int32_t prefix, double *loglik,
                                   bool *greedy) {
    const int32_t nc = it->n_choices;
    strbuf ctxs = {0}, whole = {0};
    enc_buf ce = {0}, we = {0};
    int32_t *conts[LB_TASK_MAX_CHOICES] = {0};
    int32_t ncont[LB_TASK_MAX_CHOICES] = {0};
    lb_status st = LB_OK;
    if (!sb_add(&ctxs, shots, shots_len) ||
        !sb_add(&ctxs, it->context, strlen(it->context))) {
        st = lb_set_error(LB_ERR_NOMEM, "out of memory");
        goto out;
    }
    const bool empty_ctx = ctxs.n == 0;
    /* _encode_pair: the context's trailing whitespace goes to the
     * continuation */
    size_t ck = rstrip_len(ctxs.s, ctxs.n);
    if (!empty_ctx && ck > 0) st = encode(tok, ctxs.s, ck, p->add_bos, &ce);
    if (st != LB_OK) goto out;
    if (ce.n == 0) { /* lm-eval: an empty context is [prefix_token_id] */
        free(ce.ids);
        if (!(ce.ids = malloc(sizeof(int32_t)))) {
            st = lb_set_error(LB_ERR_NOMEM, "out of memory");
            goto out;
        }
        ce.ids[0] = prefix;
        ce.n = 1;
    }
    int32_t max_cont = 0;
    for (int32_t i = 0; i < nc && st == LB_OK; i++) {
        whole.n = 0;
        if (!sb_add(&whole, ctxs.s, empty_ctx ? 0 : ctxs.n) ||
            !sb_add(&whole, TARGET_DELIM, strlen(TARGET_DELIM)) ||
            !sb_add(&whole, it->choices[i], strlen(it->choices[i]))) {
            st = lb_set_error(LB_ERR_NOMEM, "out of memory");
            break;
        }
        size_t drop = 0;
        if (empty_ctx || ck == 0) {
            /* continuation encoded alone after the prefix */
            st = encode(tok, whole.s, whole.n, false, &we);
        } else {
            st = encode(tok, whole.s, whole.n, p->add_bos, &we);
            drop = ce.n;
        }
        if (st != LB_OK) break;
        if (we.n <= drop) {
            st = lb_set_error(LB_ERR_FORMAT, "choice %d encodes to no "
                              "continuation token (the context's tokens "
                              "absorb it)", (int)i);
            break;
        }
        ncont[i] = (int32_t)(we.n - drop);
        if (!(conts[i] = malloc((size_t)ncont[i] * sizeof(int32_t)))) {
            st = lb_set_error(LB_ERR_NOMEM, "out of memory");
            break;
        }
        memcpy(conts[i], we.ids + drop, (size_t)ncont[i] * sizeof(int32_t));
        if (ncont[i] > max_cont) max_cont = ncont[i];
    }
    if (st != LB_OK) goto out;
    if ((int64_t)ce.n + max_cont - 1 <= L) {
        st = lb_loglik_choices(ctx, ce.ids, (int32_t)ce.n,
                               (const int32_t *const *)conts, ncont, nc,
                               loglik, greedy);
        goto out;
    }
    /* left truncation, request by request:
     * (context + continuation)[-(L+1):][:-1] */
    for (int32_t i = 0; i < nc && st == LB_OK; i++) {
        if (ncont[i] > L) {
            st = lb_set_error(LB_ERR_RANGE, "choice %d has %d tokens, more "
                              "than max_length %d", (int)i, (int)ncont[i],
                              (int)L);
            break;
        }
        int64_t tot = (int64_t)ce.n + ncont[i];
        int32_t *full = malloc((size_t)tot * sizeof(int32_t));
        if (!full) {
            st = lb_set_error(LB_ERR_NOMEM, "out of memory");
            break;
        }
        memcpy(full, ce.ids, ce.n * sizeof(int32_t));
        memcpy(full + ce.n, conts[i], (size_t)ncont[i] * sizeof(int32_t));
        int64_t keep = tot < (int64_t)L + 1 ? tot : (int64_t)L + 1;
        const int32_t *k = full + (tot - keep);
        int32_t n_in = (int32_t)keep - 1;
        float *rows = NULL;
        st = alloc_rows(lb_context_model(ctx)->config.vocab_size, &rows);
        double ll = 0.0;
        bool g = true;
        if (st == LB_OK) {
            lb_context_reset(ctx);
            st = score_rows(ctx, rows, lb_context_model(ctx)->config.vocab_size,
                            k, n_in, 0, n_in - ncont[i], conts[i], &ll, &g);
        }
        lb_context_reset(ctx);
        lb_free(rows);
        free(full);
        loglik[i] = ll;
        if (greedy) greedy[i] = g;
    }
out:
    for (int32_t i = 0; i < nc; i++) free(conts[i]);
    free(ctxs.s);
    free(whole.s);
    free(ce.ids);
    free(we.ids);
    return st;
}

lb_status lb_eval_task(lb_context *ctx, const lb_tokenizer *tok,
                       const lb_task *task, const lb_eval_params *p,
                       lb_eval_result *res) {
    if (!res) return lb_set_error(LB_ERR_INVALID_ARG, "eval: NULL result");
    memset(res, 0, sizeof *res);
    if (!ctx || !tok || !task || !p)
        return lb_set_error(LB_ERR_INVALID_ARG, "eval: NULL argument");
    const lb_model *m = lb_context_model(ctx);
    const int32_t n_ctx = lb_context_n_ctx(ctx);
    int32_t L = p->max_length > 0 ? p->max_length : n_ctx;
    if (L > n_ctx)
        return lb_set_error(LB_ERR_RANGE, "eval: max_length %d exceeds the "
                            "context's n_ctx %d", (int)L, (int)n_ctx);
    if (p->num_fewshot < 0 || p->num_fewshot > task->n_fewshot)
        return lb_set_error(LB_ERR_INVALID_ARG, "eval: --num-fewshot %d needs "
                            "%d few-shot items (lines with \"fewshot\": "
                            "true), the task has %lld", (int)p->num_fewshot,
                            (int)p->num_fewshot, (long long)task->n_fewshot);
    int32_t prefix = lb_tokenizer_bos(tok);
    if (prefix < 0) prefix = lb_tokenizer_eos(tok);
    if (prefix < 0) prefix = m->config.bos_token_id;
    if (prefix < 0 || prefix >= m->config.vocab_size)
        return lb_set_error(LB_ERR_RANGE, "eval: no BOS/EOS token to use as "
                            "lm-eval's prefix token");

    /* few-shot prefix: the first K pool items */
    strbuf shots = {0};
    lb_status st = LB_OK;
    int32_t k = 0;
    for (int64_t i = 0; i < task->n_items && k < p->num_fewshot; i++) {
        const lb_task_item *it = &task->items[i];
        if (it->kind != LB_TASK_CHOICE || !it->fewshot) continue;
        const char *tgt = it->choices[it->gold];
        if ((k > 0 && !sb_add(&shots, FEWSHOT_DELIM, strlen(FEWSHOT_DELIM))) ||
            !sb_add(&shots, it->context, strlen(it->context)) ||
            !sb_add(&shots, TARGET_DELIM, strlen(TARGET_DELIM)) ||
            !sb_add(&shots, tgt, strlen(tgt)))
            st = lb_set_error(LB_ERR_NOMEM, "eval: out of memory");
        k++;
    }
    if (st == LB_OK && k > 0 &&
        !sb_add(&shots, FEWSHOT_DELIM, strlen(FEWSHOT_DELIM)))
        st = lb_set_error(LB_ERR_NOMEM, "eval: out of memory");

    /* the scored items and their requests */
    int64_t n_items = 0, n_req = 0, n_ci = 0;
    for (int64_t i = 0; i < task->n_items; i++) {
        const lb_task_item *it = &task->items[i];
        if (it->fewshot) continue;
        if (p->limit > 0 && n_items >= p->limit) break;
        n_items++;
        n_req += it->kind == LB_TASK_CHOICE ? it->n_choices : 1;
        n_ci += it->kind == LB_TASK_CHOICE;
    }
    if (st == LB_OK) {
        res->loglik = calloc((size_t)n_req + 1, sizeof(double));
        res->greedy = calloc((size_t)n_req + 1, sizeof(bool));
        res->req_item = calloc((size_t)n_req + 1, sizeof(int64_t));
        res->pred = calloc((size_t)n_ci + 1, sizeof(int32_t));
        res->pred_norm = calloc((size_t)n_ci + 1, sizeof(int32_t));
        if (!res->loglik || !res->greedy || !res->req_item || !res->pred ||
            !res->pred_norm)
            st = lb_set_error(LB_ERR_NOMEM, "eval: out of memory");
    }
    int64_t r = 0, ci = 0, done = 0;
    int64_t hits = 0, hits_norm = 0;
    enc_buf doc = {0};
    for (int64_t i = 0; i < task->n_items && st == LB_OK && done < n_items;
         i++) {
        const lb_task_item *it = &task->items[i];
        if (it->fewshot) continue;
        if (it->kind == LB_TASK_CHOICE) {
            st = score_choice_item(ctx, tok, it, shots.s ? shots.s : "",
                                   shots.n, p, L, prefix, res->loglik + r,
                                   res->greedy + r);
            if (st != LB_OK) {
                lb_error_context(st, "line %lld", (long long)it->line);
                break;
            }
            int32_t best = 0, best_n = 0;
            double bn = 0.0;
            for (int32_t c = 0; c < it->n_choices; c++) {
                res->req_item[r + c] = i;
                double v = res->loglik[r + c];
                double vn = v / (double)lb_utf8_length(
                                    it->choices[c], strlen(it->choices[c]));
                if (v > res->loglik[r + best]) best = c;
                if (c == 0 || vn > bn) {
                    bn = vn;
                    best_n = c;
                }
            }
            res->pred[ci] = best;
            res->pred_norm[ci] = best_n;
            hits += best == it->gold;
            hits_norm += best_n == it->gold;
            ci++;
            r += it->n_choices;
        } else {
            size_t len = strlen(it->text);
            st = encode(tok, it->text, len, p->add_bos, &doc);
            double ll = 0.0;
            bool g = false;
            if (st == LB_OK && doc.n == 0)
                st = lb_set_error(LB_ERR_FORMAT, "the document encodes to no "
                                  "token");
            if (st == LB_OK)
                st = lb_loglik_rolling(ctx, doc.ids, (int64_t)doc.n, prefix, L,
                                       &ll, &g);
            if (st != LB_OK) {
                lb_error_context(st, "line %lld", (long long)it->line);
                break;
            }
            res->loglik[r] = ll;
            res->greedy[r] = g;
            res->req_item[r] = i;
            r++;
            res->n_docs++;
            res->sum_loglik += ll;
            res->words += lb_count_words(it->text, len);
            res->bytes += (int64_t)len;
            res->tokens += (int64_t)doc.n;
        }
        done++;
        if (!lb_progress_report(&p->progress, "eval", (uint64_t)done,
                                (uint64_t)n_items))
            st = lb_set_error(LB_ERR_CANCELLED, "eval: cancelled");
    }
    free(doc.ids);
    free(shots.s);
    if (st != LB_OK) {
        lb_eval_result_free(res);
        return st;
    }
    res->n_requests = r;
    res->n_choice_items = ci;
    if (ci > 0) {
        double pa = (double)hits / (double)ci, pn = (double)hits_norm / (double)ci;
        res->acc = pa;
        res->acc_norm = pn;
        res->acc_stderr = ci > 1 ? sqrt(pa * (1 - pa) / (double)(ci - 1)) : 0;
        res->acc_norm_stderr =
            ci > 1 ? sqrt(pn * (1 - pn) / (double)(ci - 1)) : 0;
    }
    if (res->n_docs > 0) {
        res->word_perplexity = exp(-res->sum_loglik / (double)res->words);
        res->byte_perplexity = exp(-res->sum_loglik / (double)res->bytes);
        res->bits_per_byte = -res->sum_loglik / (double)res->bytes / log(2.0);
    }
    return LB_OK;
}
