/*
 * KL divergence against llama-perplexity's --kl-divergence-base files
 * (lowbit/kld.h). The row encoding and the statistics follow
 * llama.cpp tools/perplexity/perplexity.cpp operation for operation (float
 * where it uses float, double where it uses double), so that the files are
 * byte-identical for the same logits.
 */
#include "lowbit/kld.h"
#include "core/internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

static const char MAGIC[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};

lb_status lb_kl_base_parse(const uint8_t *data, size_t size, const char *name,
                           lb_kl_base *out) {
    if (!out) return lb_set_error(LB_ERR_INVALID_ARG, "kl base: NULL output");
    memset(out, 0, sizeof *out);
    if (!name) name = "kl base";
    if (!data && size)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL data", name);
    if (size < 20 || memcmp(data, MAGIC, 8) != 0)
        return lb_set_error(LB_ERR_FORMAT, "%s: does not look like a "
                            "--kl-divergence-base file (no \"_logits_\" "
                            "header)", name);
    int32_t n_ctx = (int32_t)lb_rd_u32(data + 8);
    int32_t n_vocab = (int32_t)lb_rd_u32(data + 12);
    int32_t n_chunk = (int32_t)lb_rd_u32(data + 16);
    if (n_ctx < 4)
        return lb_set_error(LB_ERR_FORMAT, "%s: n_ctx %d (at least 4 "
                            "expected)", name, (int)n_ctx);
    if (n_vocab < 1)
        return lb_set_error(LB_ERR_FORMAT, "%s: n_vocab %d", name,
                            (int)n_vocab);
    if (n_chunk < 1)
        return lb_set_error(LB_ERR_FORMAT, "%s: n_chunk %d (no chunk)", name,
                            (int)n_chunk);
    int32_t rows = n_ctx - 1 - n_ctx / 2;
    int64_t nv = 2 * (((int64_t)n_vocab + 1) / 2) + 4;
    size_t n_tok, tok_bytes, row_bytes, all_rows, body, total;
    if (!lb_mul_ok((size_t)n_ctx, (size_t)n_chunk, &n_tok) ||
        !lb_mul_ok(n_tok, 4, &tok_bytes) ||
        !lb_mul_ok((size_t)nv, 2, &row_bytes) ||
        !lb_mul_ok(row_bytes, (size_t)rows, &body) ||
        !lb_mul_ok(body, (size_t)n_chunk, &all_rows) ||
        !lb_add_ok(tok_bytes, all_rows, &total) ||
        !lb_add_ok(total, 20, &total))
        return lb_set_error(LB_ERR_OVERFLOW, "%s: header sizes overflow "
                            "(n_ctx %d, n_vocab %d, n_chunk %d)", name,
                            (int)n_ctx, (int)n_vocab, (int)n_chunk);
    if (size != total)
        return lb_set_error(LB_ERR_FORMAT, "%s: %zu bytes, the header (n_ctx "
                            "%d, n_vocab %d, n_chunk %d) implies %zu%s", name,
                            size, (int)n_ctx, (int)n_vocab, (int)n_chunk,
                            total, size < total ? " (truncated)" : "");
    int32_t *tokens = malloc(tok_bytes ? tok_bytes : 1);
    if (!tokens)
        return lb_set_error(LB_ERR_NOMEM, "%s: out of memory for %zu tokens",
                            name, n_tok);
    memcpy(tokens, data + 20, tok_bytes);
    out->n_ctx = n_ctx;
    out->n_vocab = n_vocab;
    out->n_chunk = n_chunk;
    out->tokens = tokens;
    out->priv = tokens;
    out->data = data + 20 + tok_bytes;
    out->rows_per_chunk = rows;
    out->nv = (int32_t)nv;
    return LB_OK;
}

void lb_kl_base_close(lb_kl_base *b) {
    if (!b) return;
    free(b->priv);
    memset(b, 0, sizeof *b);
}

void lb_kl_base_row(const lb_kl_base *b, int64_t r, float *scale,
                    float *min_log_prob, const uint8_t **codes) {
    const uint8_t *p = b->data + (size_t)r * (size_t)b->nv * 2;
    memcpy(scale, p, 4);
    memcpy(min_log_prob, p + 4, 4);
    *codes = p + 8;
}

/* perplexity.cpp nearest_int: round half to even through the float
 * mantissa (valid for |fval| <= 4194303). */
static inline int nearest_int(float fval) {
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

static inline float fmaxf_cpp(float a, float b) { return a < b ? b : a; }
static inline float fminf_cpp(float a, float b) { return b < a ? b : a; }

double lb_kl_encode_row(const float *logits, int32_t n_vocab, int32_t tok,
                        uint16_t *log_prob) {
    float max_logit = logits[0];
    float min_logit = logits[0];
    for (int32_t i = 1; i < n_vocab; ++i) {
        max_logit = fmaxf_cpp(max_logit, logits[i]);
        min_logit = fminf_cpp(min_logit, logits[i]);
    }
    min_logit = fmaxf_cpp(min_logit, max_logit - 16);
    double sum_exp = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i)
        sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = (float)log(sum_exp);
    const float min_log_prob = min_logit - max_logit - log_sum_exp;
    const float scale = (max_logit - min_logit) / 65535.f;
    memcpy(log_prob, &scale, 4);
    memcpy(log_prob + 2, &min_log_prob, 4);
    log_prob += 4;
    if (scale != 0.0f) {
        const float inv_scale = 1 / scale;
        for (int32_t i = 0; i < n_vocab; ++i) {
            float v = inv_scale * (logits[i] - min_logit);
            log_prob[i] =
                logits[i] > min_logit ? (uint16_t)nearest_int(v) : 0;
        }
    } else {
        memset(log_prob, 0, (size_t)n_vocab * sizeof(uint16_t));
    }
    if (n_vocab & 1) log_prob[n_vocab] = 0;
    return (double)(max_logit + log_sum_exp - logits[tok]);
}

/* double -> float without undefined behaviour for values beyond FLT_MAX
 * (a hostile base file can produce them; C leaves that conversion
 * undefined, x86 gives inf) */
static float to_float(double x) {
    if (x > FLT_MAX) return INFINITY;
    if (x < -FLT_MAX) return -INFINITY;
    return (float)x;
}

static bool grow(lb_kl_stats *s) {
    int64_t nc = s->cap ? s->cap * 2 : 4096;
    float *a = realloc(s->kld_values, (size_t)nc * sizeof(float));
    if (!a) return false;
    s->kld_values = a;
    float *b = realloc(s->p_diff_values, (size_t)nc * sizeof(float));
    if (!b) return false;
    s->p_diff_values = b;
    s->cap = nc;
    return true;
}

lb_status lb_kl_add(lb_kl_stats *s, const float *logits, int32_t n_vocab,
                    float scale, float min_log_prob, const uint8_t *codes,
                    int32_t tok) {
    if (!s || !logits || !codes || n_vocab < 1 || tok < 0 || tok >= n_vocab)
        return lb_set_error(LB_ERR_INVALID_ARG, "kl: bad arguments");
    if (s->count == s->cap && !grow(s))
        return lb_set_error(LB_ERR_NOMEM, "kl: out of memory");
    float max_logit = logits[0];
    int32_t imax = 0;
    for (int32_t i = 1; i < n_vocab; ++i) {
        if (logits[i] > max_logit) {
            max_logit = logits[i];
            imax = i;
        }
    }
    double sum_exp = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i)
        sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = (float)log(sum_exp);

    const float nll = max_logit + log_sum_exp - logits[tok];
    s->sum_nll += nll;
    s->sum_nll2 += nll * nll;

    const float nll_base = -(scale * (float)lb_rd_u16(codes + 2 * (size_t)tok) +
                             min_log_prob);
    s->sum_nll_base += nll_base;
    s->sum_nll_base2 += nll_base * nll_base;
    s->sum_nll_nll_base += nll * nll_base;

    max_logit += log_sum_exp;
    double sum = 0;
    int32_t imax_base = -1;
    float p_log_base_max = 0;
    for (int32_t i = 0; i < n_vocab; ++i) {
        const float p_log_base =
            scale * (float)lb_rd_u16(codes + 2 * (size_t)i) + min_log_prob;
        if (i == 0 || p_log_base > p_log_base_max) {
            p_log_base_max = p_log_base;
            imax_base = i;
        }
        if (p_log_base > -16.f) {
            const float p_base = expf(p_log_base);
            sum += p_base * (p_log_base - logits[i] + max_logit);
        }
    }
    s->sum_kld += sum;
    s->sum_kld2 += sum * sum;
    if (imax == imax_base) ++s->n_same_top;

    const float p_base = expf(-nll_base);
    const float p = expf(-nll);
    const float p_diff = p - p_base;
    s->sum_p_diff += p_diff;
    const double p_diff2 = p_diff * p_diff;
    s->sum_p_diff2 += p_diff2;
    s->sum_p_diff4 += p_diff2 * p_diff2;
    s->max_p_diff = fmaxf_cpp(s->max_p_diff, fabsf(p_diff));
    s->kld_values[s->count] = to_float(sum);
    s->p_diff_values[s->count] = p_diff;
    ++s->count;
    return LB_OK;
}

void lb_kl_stats_free(lb_kl_stats *s) {
    if (!s) return;
    free(s->kld_values);
    free(s->p_diff_values);
    memset(s, 0, sizeof *s);
}

static void mean_unc(double sum, double sum2, int64_t count, double *f,
                     double *df) {
    if (count < 1) {
        *f = *df = 0;
        return;
    }
    *f = sum / (double)count;
    double d = sum2 / (double)count - *f * *f;
    *df = d > 0 && count > 10 ? sqrt(d / (double)(count - 1)) : 0.;
}

static double covariance(double suma, double sumb, double sumab,
                         int64_t count) {
    if (count < 10) return 0.0;
    double var = sumab / (double)count -
                 (suma / (double)count) * (sumb / (double)count);
    return var / (double)(count - 1);
}

/* ascending, NaN last (a total order for qsort) */
static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    if (isnan(x) || isnan(y)) return isnan(x) - isnan(y);
    return (x > y) - (x < y);
}


static float percentile(const float *v, int64_t n, float fraction) {
    if (fraction <= 0) return v[0];
    if (fraction >= 1) return v[n - 1];
    float p = fraction * (float)(n - 1);
    size_t ip = (size_t)p;
    p -= (float)ip;
    size_t ip1 = ip + 1 < (size_t)n - 1 ? ip + 1 : (size_t)n - 1;
    return (1 - p) * v[ip] + p * v[ip1];
}

static float median(const float *v, int64_t n) {
    return n % 2 == 0 ? 0.5f * (v[n / 2] + v[n / 2 - 1]) : v[n / 2];
}

lb_status lb_kl_summarize(lb_kl_stats *s, lb_kl_summary *o) {
    if (!s || !o) return lb_set_error(LB_ERR_INVALID_ARG, "kl: NULL");
    memset(o, 0, sizeof *o);
    if (s->count < 2)
        return lb_set_error(LB_ERR_RANGE, "kl: %lld tokens scored, too few "
                            "for statistics", (long long)s->count);
    const int64_t n = s->count;
    o->count = n;
    qsort(s->kld_values, (size_t)n, sizeof(float), cmp_float);
    qsort(s->p_diff_values, (size_t)n, sizeof(float), cmp_float);
    double lp, lpu, lb, lbu;
    mean_unc(s->sum_nll, s->sum_nll2, n, &lp, &lpu);
    o->ppl = exp(lp);
    o->ppl_unc = o->ppl * lpu;
    mean_unc(s->sum_nll_base, s->sum_nll_base2, n, &lb, &lbu);
    o->ppl_base = exp(lb);
    o->ppl_base_unc = o->ppl_base * lbu;
    double cov = covariance(s->sum_nll, s->sum_nll_base, s->sum_nll_nll_base,
                            n);
    o->log_ppl_cor = cov / (lpu * lbu);
    o->log_ratio = lp - lb;
    o->log_ratio_unc = sqrt(lpu * lpu + lbu * lbu - 2.0 * cov);
    o->ratio = exp(o->log_ratio);
    o->ratio_unc = o->ratio * o->log_ratio_unc;
    double ppl_cov = o->ppl * o->ppl_base * cov;
    o->diff = o->ppl - o->ppl_base;
    o->diff_unc = sqrt(o->ppl_unc * o->ppl_unc +
                       o->ppl_base_unc * o->ppl_base_unc - 2.0 * ppl_cov);
    mean_unc(s->sum_kld, s->sum_kld2, n, &o->kld, &o->kld_unc);
    const float *kv = s->kld_values;
    static const float kf[11] = {1, 0.999f, 0.990f, 0.950f, 0.900f, -1,
                                 0.100f, 0.050f, 0.010f, 0.001f, 0};
    for (int i = 0; i < 11; i++)
        o->kld_pct[i] = kf[i] < 0 ? median(kv, n) : percentile(kv, n, kf[i]);
    o->kld_pct[0] = kv[n - 1];
    o->kld_pct[10] = kv[0];
    mean_unc(s->sum_p_diff, s->sum_p_diff2, n, &o->p_diff, &o->p_diff_unc);
    const float *pv = s->p_diff_values;
    static const float pf[13] = {1, 0.999f, 0.990f, 0.950f, 0.900f, 0.750f,
                                 -1, 0.250f, 0.100f, 0.050f, 0.010f, 0.001f,
                                 0};
    for (int i = 0; i < 13; i++)
        o->p_diff_pct[i] =
            pf[i] < 0 ? median(pv, n) : percentile(pv, n, pf[i]);
    o->p_diff_pct[0] = pv[n - 1];
    o->p_diff_pct[12] = pv[0];
    double mse, mse_unc;
    mean_unc(s->sum_p_diff2, s->sum_p_diff4, n, &mse, &mse_unc);
    o->rms_p_diff = sqrt(mse);
    o->rms_p_diff_unc = 0.5 / o->rms_p_diff * mse_unc;
    o->same_top = 1.0 * (double)s->n_same_top / (double)n;
    o->same_top_unc = sqrt(o->same_top * (1.0 - o->same_top) / (double)(n - 1));
    return LB_OK;
}
