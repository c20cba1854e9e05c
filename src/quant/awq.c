/*
 * AWQ arithmetic (quant/awq_internal.h): AutoAWQ's grid, scale search and
 * clip search on float32 matrices. Products X . D^T of the scale search go
 * through OpenBLAS sgemm in chunks of tokens; sums of squares are kept in
 * double.
 */
#include "quant/awq_internal.h"
#include "core/internal.h"
#include "quant/gptq_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void qz_awq_group(const float *w, int64_t n, int bits, bool sym,
                  float *scale, int32_t *zero, int32_t *codes) {
    if (sym) {
        float mx = 0.0f;
        for (int64_t i = 0; i < n; i++) mx = fmaxf(mx, fabsf(w[i]));
        mx = fmaxf(mx, 1e-5f);
        const int32_t qmax = (1 << (bits - 1)) - 1, qmin = -(1 << (bits - 1));
        const float s = mx / (float)qmax;
        *scale = s;
        *zero = 1 << (bits - 1);
        if (codes)
            for (int64_t i = 0; i < n; i++) {
                float q = rintf(w[i] / s);
                q = fminf(fmaxf(q, (float)qmin), (float)qmax);
                codes[i] = (int32_t)q + (1 << (bits - 1));
            }
        return;
    }
    float mx = w[0], mn = w[0];
    for (int64_t i = 1; i < n; i++) {
        mx = fmaxf(mx, w[i]);
        mn = fminf(mn, w[i]);
    }
    const int32_t maxq = (1 << bits) - 1;
    const float s = fmaxf(mx - mn, 1e-5f) / (float)maxq;
    float z = -rintf(mn / s);
    z = fminf(fmaxf(z, 0.0f), (float)maxq);
    *scale = s;
    *zero = (int32_t)z;
    if (codes)
        for (int64_t i = 0; i < n; i++) {
            float q = rintf(w[i] / s) + z;
            codes[i] = (int32_t)fminf(fmaxf(q, 0.0f), (float)maxq);
        }
}

/* Columns [c0, c1) of group k. */
static void group_range(int64_t in, int group_size, int64_t k, int64_t *c0,
                        int64_t *c1) {
    const int64_t gs = group_size < 0 ? in : group_size;
    *c0 = k * gs;
    *c1 = LB_MIN(in, *c0 + gs);
}

/* Pseudo-quantize one group: Wq[0..n) from w (may alias). */
static void fq_group(const float *w, int64_t n, int bits, bool sym,
                     int32_t *codes, float *wq) {
    float s;
    int32_t z;
    qz_awq_group(w, n, bits, sym, &s, &z, codes);
    for (int64_t i = 0; i < n; i++) wq[i] = s * (float)(codes[i] - z);
}

void qz_awq_fake_quant(const float *W, int64_t rows, int64_t in, int bits,
                       int group_size, bool sym, float *Wq) {
    const int64_t ng = lb_gptq_n_groups(in, group_size);
    const int64_t gs = group_size < 0 ? in : group_size;
    int32_t *codes = malloc((size_t)gs * sizeof *codes);
    if (!codes) return; /* callers size gs <= in; tiny */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < ng; k++) {
            int64_t c0, c1;
            group_range(in, group_size, k, &c0, &c1);
            fq_group(W + r * in + c0, c1 - c0, bits, sym, codes,
                     Wq + r * in + c0);
        }
    free(codes);
}

lb_status qz_awq_quantize(const float *W, int64_t out, int64_t in, int bits,
                          int group_size, bool sym, lb_gptq_result *res) {
    const int64_t ng = lb_gptq_n_groups(in, group_size);
    LB_TRY(lb_gptq_result_alloc(res, out, in, ng, false, false));
    res->bits = bits;
    res->group_size = group_size;
    const int64_t gs = group_size < 0 ? in : group_size;
    for (int64_t c = 0; c < in; c++) res->g_idx[c] = (int32_t)(c / gs);
    /* one group's codes as qz_awq_group gives them (int32), then bytes */
    int32_t *q = malloc((size_t)gs * sizeof *q);
    if (!q) {
        lb_gptq_result_free(res);
        return lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
    }
    for (int64_t o = 0; o < out; o++)
        for (int64_t k = 0; k < ng; k++) {
            int64_t c0, c1;
            group_range(in, group_size, k, &c0, &c1);
            float s;
            int32_t z;
            qz_awq_group(W + o * in + c0, c1 - c0, bits, sym, &s, &z, q);
            res->scales[o * ng + k] = s;
            res->zeros[o * ng + k] = z;
            for (int64_t c = c0; c < c1; c++) {
                res->codes[o * in + c] = (uint8_t)q[c - c0];
                res->W_deq[o * in + c] = s * (float)(q[c - c0] - z);
            }
        }
    free(q);
    return LB_OK;
}

void qz_awq_x_mean(const float *X, int64_t N, int64_t in, double *x_mean) {
    for (int64_t c = 0; c < in; c++) x_mean[c] = 0.0;
    for (int64_t t = 0; t < N; t++)
        for (int64_t c = 0; c < in; c++) x_mean[c] += fabs((double)X[t * in + c]);
    for (int64_t c = 0; c < in; c++) x_mean[c] /= (double)(N > 0 ? N : 1);
}

void qz_awq_w_mean(const qz_awq_linear *lins, int n_lins, int64_t in,
                   double *w_mean) {
    int64_t rows = 0;
    for (int64_t c = 0; c < in; c++) w_mean[c] = 0.0;
    for (int i = 0; i < n_lins; i++) {
        const qz_awq_linear *L = &lins[i];
        const int64_t ng = lb_gptq_n_groups(in, L->group_size);
        for (int64_t r = 0; r < L->out; r++)
            for (int64_t k = 0; k < ng; k++) {
                int64_t c0, c1;
                group_range(in, L->group_size, k, &c0, &c1);
                const float *w = L->W + r * in;
                double mx = 0.0;
                for (int64_t c = c0; c < c1; c++) mx = fmax(mx, fabs(w[c]));
                for (int64_t c = c0; c < c1; c++)
                    w_mean[c] += fabs((double)w[c]) / (mx + 1e-6);
            }
        rows += L->out;
    }
    for (int64_t c = 0; c < in; c++) w_mean[c] /= (double)(rows > 0 ? rows : 1);
}

void qz_awq_ratio_scales(const double *x_mean, const double *w_mean,
                         int64_t in, double ratio, float *s) {
    float mx = -INFINITY, mn = INFINITY;
    for (int64_t c = 0; c < in; c++) {
        float v = (float)(pow(x_mean[c], ratio) /
                          (pow(w_mean[c], 1.0 - ratio) + 1e-4));
        if (!(v >= 1e-4f)) v = isnan(v) ? v : 1e-4f; /* clamp(min=1e-4) */
        s[c] = v;
        if (v > mx) mx = v;
        if (v < mn) mn = v;
    }
    const float norm = sqrtf(mx * mn);
    for (int64_t c = 0; c < in; c++) {
        s[c] = s[c] / norm;
        if (!isfinite(s[c])) s[c] = 1.0f;
    }
}

/* sum over t, o of (X[t] . D[o])^2 for X [N, in], D [out, in]. */
static lb_status sum_sq_xdt(const float *X, int64_t N, int64_t in,
                            const float *D, int64_t out, double *sum) {
    const int64_t chunk = LB_MAX((int64_t)1, LB_MIN(N, ((int64_t)1 << 22) /
                                                        LB_MAX(out, 1)));
    float *Y = lb_alloc((size_t)(chunk * out) * sizeof(float));
    if (!Y) return lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
    double acc = 0.0;
    for (int64_t t0 = 0; t0 < N; t0 += chunk) {
        const int64_t nt = LB_MIN(chunk, N - t0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nt, (int)out,
                    (int)in, 1.0f, X + t0 * in, (int)in, D, (int)in, 0.0f, Y,
                    (int)out);
        for (int64_t i = 0; i < nt * out; i++) acc += (double)Y[i] * Y[i];
    }
    lb_free(Y);
    *sum = acc;
    return LB_OK;
}

/* The rows rows[0..n) of X [*, in] into dst [n, in]. */
static void gather_rows(const float *X, int64_t in, const int64_t *rows,
                        int64_t n, float *dst) {
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + i * in, X + rows[i] * in, (size_t)in * sizeof(float));
}

lb_status qz_awq_search_scale(const float *X, int64_t N, int64_t in,
                              const qz_awq_linear *lins, int n_lins,
                              int n_grid, float *s_best, double *losses,
                              int *best_k) {
    double *xm = malloc((size_t)in * sizeof *xm);
    double *wm = malloc((size_t)in * sizeof *wm);
    float *S = malloc((size_t)n_grid * (size_t)in * sizeof *S);
    double *loss = calloc((size_t)n_grid, sizeof *loss);
    int64_t max_out = 0, max_rows = 0;
    double denom = 0.0;
    bool any_rows = false;
    for (int i = 0; i < n_lins; i++) {
        max_out = LB_MAX(max_out, lins[i].out);
        const int64_t nt = lins[i].rows ? lins[i].n_rows : N;
        denom += (double)nt * (double)lins[i].out;
        if (lins[i].rows) {
            any_rows = true;
            max_rows = LB_MAX(max_rows, lins[i].n_rows);
        }
    }
    float *D = lb_alloc((size_t)(max_out * in) * sizeof(float));
    /* inputs narrower than the token count: the loss sum_t |X[t] D^T|^2
     * is formed as sum(D .* (D H)) with H = X^T X (2 in^2 out FLOPs per
     * ratio and linear after one 2 N in^2 product, instead of 2 N in out);
     * a linear with its own rows gets its own H (or its gathered rows) */
    const bool use_h = in < N;
    const bool own_h = any_rows && max_rows > in;
    float *H = use_h ? lb_alloc((size_t)(in * in) * sizeof(float)) : NULL;
    float *He = own_h ? lb_alloc((size_t)(in * in) * sizeof(float)) : NULL;
    float *DH = (use_h || own_h)
                    ? lb_alloc((size_t)(max_out * in) * sizeof(float))
                    : NULL;
    float *Xg = any_rows && max_rows > 0
                    ? lb_alloc((size_t)(max_rows * in) * sizeof(float))
                    : NULL;
    lb_status st = LB_OK;
    if (!xm || !wm || !S || !loss || !D || (use_h && !H) || (own_h && !He) ||
        ((use_h || own_h) && !DH) || (any_rows && max_rows > 0 && !Xg)) {
        st = lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
        goto done;
    }
    if (use_h)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)in, (int)in,
                    (int)N, 1.0f, X, (int)in, X, (int)in, 0.0f, H, (int)in);
    qz_awq_x_mean(X, N, in, xm);
    qz_awq_w_mean(lins, n_lins, in, wm);
    for (int k = 0; k < n_grid; k++)
        qz_awq_ratio_scales(xm, wm, in, (double)k / n_grid,
                            S + (size_t)k * (size_t)in);
    const int64_t *prev_rows = NULL;
    for (int i = 0; i < n_lins && st == LB_OK; i++) {
        const qz_awq_linear *L = &lins[i];
        /* this linear's token statistics */
        const float *Xi = X, *Hi = use_h ? H : NULL;
        int64_t Ni = N;
        if (L->rows) {
            Ni = L->n_rows;
            if (Ni == 0) continue; /* no tokens: no loss */
            if (L->rows != prev_rows) {
                gather_rows(X, in, L->rows, Ni, Xg);
                if (Ni > in)
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans,
                                (int)in, (int)in, (int)Ni, 1.0f, Xg, (int)in,
                                Xg, (int)in, 0.0f, He, (int)in);
                prev_rows = L->rows;
            }
            Xi = Xg;
            Hi = Ni > in ? He : NULL;
        }
        for (int k = 0; k < n_grid && st == LB_OK; k++) {
            const float *s = S + (size_t)k * (size_t)in;
            /* D = W - Q(W * s) / s */
            for (int64_t r = 0; r < L->out; r++)
                for (int64_t c = 0; c < in; c++)
                    D[r * in + c] = L->W[r * in + c] * s[c];
            qz_awq_fake_quant(D, L->out, in, L->bits, L->group_size, L->sym,
                              D);
            for (int64_t r = 0; r < L->out; r++)
                for (int64_t c = 0; c < in; c++)
                    D[r * in + c] = L->W[r * in + c] - D[r * in + c] / s[c];
            double part = 0.0;
            if (Hi) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                            (int)L->out, (int)in, (int)in, 1.0f, D, (int)in,
                            Hi, (int)in, 0.0f, DH, (int)in);
                for (int64_t j = 0; j < L->out * in; j++)
                    part += (double)D[j] * (double)DH[j];
            } else {
                st = sum_sq_xdt(Xi, Ni, in, D, L->out, &part);
            }
            loss[k] += part;
        }
    }
    double best = INFINITY;
    *best_k = -1;
    for (int k = 0; k < n_grid && st == LB_OK; k++) {
        const double lk = loss[k] / (denom > 0.0 ? denom : 1.0);
        if (losses) losses[k] = lk;
        if (lk < best) {
            best = lk;
            *best_k = k;
            memcpy(s_best, S + (size_t)k * (size_t)in,
                   (size_t)in * sizeof *s_best);
        }
    }
    if (st == LB_OK && *best_k < 0)
        st = lb_set_error(LB_ERR_RANGE, "awq: no finite loss in the scale "
                          "search");
done:
    free(xm);
    free(wm);
    free(S);
    free(loss);
    lb_free(D);
    lb_free(H);
    lb_free(He);
    lb_free(DH);
    lb_free(Xg);
    return st;
}

typedef struct clip_job {
    const double *G;
    float *W;
    int64_t out, in, ng, gs;
    int group_size, bits;
    bool sym;
    int64_t shrunk[64]; /* per worker                                   */
    bool nomem;
} clip_job;

static void clip_rows(void *ctx, int ith, int nth) {
    clip_job *j = ctx;
    const int64_t gs = j->gs, in = j->in;
    const int n_shrink = (int)(QZ_AWQ_CLIP_SHRINK * QZ_AWQ_CLIP_GRID);
    float *cw = malloc((size_t)gs * sizeof *cw);
    double *d = malloc((size_t)gs * sizeof *d);
    int32_t *codes = malloc((size_t)gs * sizeof *codes);
    size_t r0, r1;
    lb_split_range((size_t)j->out, ith, nth, &r0, &r1);
    int64_t shrunk = 0;
    if (!cw || !d || !codes) {
        j->nomem = true;
        r1 = r0;
    }
    for (int64_t r = (int64_t)r0; r < (int64_t)r1; r++)
        for (int64_t k = 0; k < j->ng; k++) {
            int64_t c0, c1;
            group_range(in, j->group_size, k, &c0, &c1);
            const int64_t n = c1 - c0;
            float *w = j->W + r * in + c0;
            const double *Gk = j->G + k * gs * gs;
            float m = 0.0f;
            for (int64_t i = 0; i < n; i++) m = fmaxf(m, fabsf(w[i]));
            float best_mv = m;
            double min_err = 1e9;
            for (int is = 0; is < n_shrink; is++) {
                const float mv = m * (1.0f - (float)is / QZ_AWQ_CLIP_GRID);
                for (int64_t i = 0; i < n; i++)
                    cw[i] = fminf(fmaxf(w[i], -mv), mv);
                fq_group(cw, n, j->bits, j->sym, codes, cw);
                for (int64_t i = 0; i < n; i++)
                    d[i] = (double)cw[i] - (double)w[i];
                double err = 0.0;
                for (int64_t i = 0; i < n; i++) {
                    double row = 0.0;
                    for (int64_t c = 0; c < n; c++) row += Gk[i * gs + c] * d[c];
                    err += d[i] * row;
                }
                if (err < min_err) {
                    min_err = err;
                    best_mv = mv;
                }
            }
            if (best_mv < m) {
                shrunk++;
                for (int64_t i = 0; i < n; i++)
                    w[i] = fminf(fmaxf(w[i], -best_mv), best_mv);
            }
        }
    j->shrunk[ith] = shrunk;
    free(cw);
    free(d);
    free(codes);
}

lb_status qz_awq_search_clip(const float *X, int64_t N, float *W, int64_t out,
                             int64_t in, int bits, int group_size, bool sym,
                             lb_pool *pool, int64_t *n_shrunk) {
    const int64_t ng = lb_gptq_n_groups(in, group_size);
    const int64_t gs = group_size < 0 ? in : group_size;
    const int64_t step = LB_MAX((int64_t)1, N / QZ_AWQ_CLIP_TOKENS);
    const int64_t nt = (N + step - 1) / step;
    /* G[k] = mean over sampled tokens of x_g x_g^T, [ng][gs][gs] */
    double *G = calloc((size_t)(ng * gs * gs), sizeof *G);
    if (!G)
        return lb_set_error(LB_ERR_NOMEM, "awq: out of memory (clip search, "
                            "%lld x %lld x %lld)", (long long)ng,
                            (long long)gs, (long long)gs);
    for (int64_t t = 0; t < N; t += step) {
        const float *x = X + t * in;
        for (int64_t k = 0; k < ng; k++) {
            int64_t c0, c1;
            group_range(in, group_size, k, &c0, &c1);
            const int64_t n = c1 - c0;
            double *Gk = G + k * gs * gs;
            for (int64_t i = 0; i < n; i++) {
                const double xi = x[c0 + i];
                for (int64_t j = 0; j < n; j++) Gk[i * gs + j] += xi * x[c0 + j];
            }
        }
    }
    for (int64_t i = 0; i < ng * gs * gs; i++) G[i] /= (double)nt;
    clip_job j;
    memset(&j, 0, sizeof j);
    j.G = G;
    j.W = W;
    j.out = out;
    j.in = in;
    j.ng = ng;
    j.gs = gs;
    j.group_size = group_size;
    j.bits = bits;
    j.sym = sym;
    if (pool && lb_pool_size(pool) <= 64)
        lb_pool_run(pool, clip_rows, &j);
    else
        clip_rows(&j, 0, 1);
    free(G);
    if (j.nomem) return lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
    int64_t shrunk = 0;
    for (int i = 0; i < 64; i++) shrunk += j.shrunk[i];
    if (n_shrunk) *n_shrunk = shrunk;
    return LB_OK;
}
