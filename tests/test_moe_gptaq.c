/*
 * test_moe_gptaq.c — GPTAQ / QEP on MoE layers (issue 13): the per-expert
 * cross statistics that quantize_moe.c feeds the solvers, checked against
 * an independent float64 brute force on tests/data/arch/qwen3moe-random
 * (3 layers, 8 experts of 32, top-2, dim 64).
 *
 * The model is quantized in place by RTN + QEP (alpha 1, 4-bit, groups of
 * 32): every expert module's weights are then RTN(W*) with
 * W* = W + W D (H + damp I)^-1, H = 2/n sum x~ x~^T and D = 2/n sum
 * (x - x~) x~^T over the module's rows (x native, x~ replayed). The brute
 * force rebuilds, for every expert of every layer, without the quantizer:
 *  - x~ (the MoE block input of the quantized model: a forward of the
 *    quantized model with the hook) and x (the same of the float model);
 *  - the rows: every token (coverage all), or the tokens whose top-2 of
 *    softmax(x~ Wr^T) holds the expert (coverage routed: the quantized
 *    path's routing), computed in double;
 *  - gate/up on (x, x~); down on the native act(x Wg^T) * (x Wu^T) (float
 *    gate/up) vs the replayed act(x~ Wg~^T) * (x~ Wu~^T) (quantized
 *    gate/up, as the model now holds them);
 *  - H, D, the damped solve (own Cholesky) and W* in double, then
 *    lb_rtn_quantize (the same grid) on W*.
 * lowbit's dequantized weights must equal RTN(W*) on >= 99.8% of the
 * weights, and every other one within one grid step (float32 statistics
 * vs double can flip a weight sitting on a rounding boundary). The test
 * can fail: the same comparison with D from the native path's routing, or
 * with D = 0 (plain RTN), must miss far more weights (checked).
 * Routed coverage uses moe_min_tokens = 2 x dim: those experts must equal
 * plain RTN. Below about dim tokens H is rank-deficient and W* is not
 * determined by the statistics to float32 precision: the exact correction
 * lies in the row space of the expert's inputs, and the float32 rounding
 * of D outside it is amplified by 1 / damp (measured: an expert of 55
 * tokens for 64 inputs had 423 of 2048 weights one step off the double
 * solve, and 0 when the double solve is given lowbit's float32 H and D).
 */
#include "th.h"

#include "lowbit/gptq.h"
#include "lowbit/model.h"
#include "lowbit/quantize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL "tests/data/arch/qwen3moe-random"
enum { NS = 8, T = 64, N = NS * T };

/* the MoE block inputs of every layer [L][N, dim] */
typedef struct cap {
    float *X;
    int L, dim, seq;
} cap;

static lb_status hook_fn(void *user, int layer, lb_linear_id which,
                         const float *X, int64_t n, int64_t in) {
    cap *c = user;
    if (which != LB_LINEAR_GATE || in != c->dim || n != T) return LB_OK;
    memcpy(c->X + ((size_t)layer * N + (size_t)c->seq * T) * (size_t)in, X,
           (size_t)(n * in) * sizeof(float));
    return LB_OK;
}

static float *capture(lb_model *m, const int32_t *ids) {
    const int L = m->config.n_layers, dim = m->config.hidden_size;
    cap c = {malloc((size_t)L * N * (size_t)dim * sizeof(float)), L, dim, 0};
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = T;
    cp.n_threads = 2;
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    if (!ctx || !c.X) {
        free(c.X);
        return NULL;
    }
    lb_forward_hook h = {hook_fn, &c};
    lb_context_set_hook(ctx, &h);
    for (c.seq = 0; c.seq < NS; c.seq++)
        TH_CHECK_OK(lb_model_forward(ctx, ids + c.seq * T, T, 0, NULL,
                                     LB_LOGITS_NONE));
    lb_context_free(ctx);
    return c.X;
}

/* y [n, out] = x [n, in] W^T (W f32 [out, in]) in double */
static void matmul_d(const double *x, const float *W, int64_t n, int64_t in,
                     int64_t out, double *y) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t o = 0; o < out; o++) {
            double s = 0;
            for (int64_t i = 0; i < in; i++)
                s += x[t * in + i] * (double)W[o * in + i];
            y[t * out + o] = s;
        }
}

/* rows of act(x Wg^T) * (x Wu^T) in double */
static void glu_d(const double *x, const float *Wg, const float *Wu,
                  int64_t n, int64_t in, int64_t ff, double *y) {
    double *u = malloc((size_t)(n * ff) * sizeof(double));
    matmul_d(x, Wg, n, in, ff, y);
    matmul_d(x, Wu, n, in, ff, u);
    for (int64_t i = 0; i < n * ff; i++)
        y[i] = y[i] / (1.0 + exp(-y[i])) * u[i];
    free(u);
}

/* Solve (A) Y^T = B^T for Y [out, in] with A [in, in] SPD, by an own
 * Cholesky (A = L L^T); B overwritten by Y. */
static bool spd_solve_rows(double *A, int64_t n, double *B, int64_t out) {
    for (int64_t j = 0; j < n; j++) {
        double d = A[j * n + j];
        for (int64_t k = 0; k < j; k++) d -= A[j * n + k] * A[j * n + k];
        if (!(d > 0)) return false;
        A[j * n + j] = sqrt(d);
        for (int64_t i = j + 1; i < n; i++) {
            double s = A[i * n + j];
            for (int64_t k = 0; k < j; k++) s -= A[i * n + k] * A[j * n + k];
            A[i * n + j] = s / A[j * n + j];
        }
    }
    for (int64_t o = 0; o < out; o++) {
        double *b = B + o * n;
        for (int64_t i = 0; i < n; i++) { /* L z = b */
            double s = b[i];
            for (int64_t k = 0; k < i; k++) s -= A[i * n + k] * b[k];
            b[i] = s / A[i * n + i];
        }
        for (int64_t i = n - 1; i >= 0; i--) { /* L^T y = z */
            double s = b[i];
            for (int64_t k = i + 1; k < n; k++) s -= A[k * n + i] * b[k];
            b[i] = s / A[i * n + i];
        }
    }
    return true;
}

/* RTN(W + alpha W D (H + damp)^-1) with H, D over rows `use` of xq (replayed)
 * and xn (native) [N, in]; nsamp = sequences with a row. W [out, in] f32;
 * Wq receives the dequantized result. */
static void qep_rtn_d(const double *xn, const double *xq, const bool *use,
                      int64_t in, const float *W, int64_t out, double alpha,
                      double damp_percent, bool zero_d, float *Wq) {
    double *H = calloc((size_t)(in * in), sizeof(double));
    double *D = calloc((size_t)(in * in), sizeof(double));
    int nsamp = 0;
    for (int s = 0; s < NS; s++) {
        bool any = false;
        for (int t = s * T; t < (s + 1) * T; t++) {
            if (!use[t]) continue;
            any = true;
            const double *a = xq + (size_t)t * in, *b = xn + (size_t)t * in;
            for (int64_t i = 0; i < in; i++)
                for (int64_t j = 0; j < in; j++) {
                    H[i * in + j] += a[i] * a[j];
                    D[i * in + j] += (b[i] - a[i]) * a[j];
                }
        }
        nsamp += any;
    }
    for (int64_t i = 0; i < in * in; i++) {
        H[i] *= 2.0 / nsamp;
        D[i] = zero_d ? 0.0 : D[i] * 2.0 / nsamp;
    }
    double mean = 0;
    for (int64_t i = 0; i < in; i++) mean += H[i * in + i];
    mean /= (double)in;
    for (int64_t i = 0; i < in; i++) H[i * in + i] += damp_percent * mean;
    /* A = W D; Y (H + damp) = A */
    double *A = calloc((size_t)(out * in), sizeof(double));
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++)
            for (int64_t j = 0; j < in; j++)
                A[o * in + j] += (double)W[o * in + i] * D[i * in + j];
    TH_CHECK(spd_solve_rows(H, in, A, out));
    float *Ws = malloc((size_t)(out * in) * sizeof(float));
    for (int64_t i = 0; i < out * in; i++)
        Ws[i] = (float)((double)W[i] + alpha * A[i]);
    lb_gptq_result r;
    memset(&r, 0, sizeof r);
    TH_CHECK_OK(lb_rtn_quantize(Ws, out, in, 4, 32, true, false, &r));
    if (r.W_deq) memcpy(Wq, r.W_deq, (size_t)(out * in) * sizeof(float));
    lb_gptq_result_free(&r);
    free(Ws);
    free(A);
    free(D);
    free(H);
}

/* weights of got that differ from want, and whether all are within one
 * grid step of 4-bit groups of 32 (step = the group's max |want| / 7) */
static int64_t count_diff(const float *got, const float *want, int64_t out,
                          int64_t in, bool *within) {
    int64_t nd = 0;
    *within = true;
    for (int64_t o = 0; o < out; o++)
        for (int64_t g = 0; g < in; g += 32) {
            double mx = 0;
            for (int64_t i = g; i < g + 32; i++)
                mx = fmax(mx, fabs((double)want[o * in + i]));
            const double step = mx / 7.0;
            for (int64_t i = g; i < g + 32; i++) {
                const double d = fabs((double)got[o * in + i] -
                                      (double)want[o * in + i]);
                if (d > 1e-6 * (mx + 1e-30)) {
                    nd++;
                    if (d > 1.5 * step) *within = false;
                }
            }
        }
    return nd;
}

/* top-K membership of expert e for row x under router Wr [E, dim] */
static void route_d(const double *x, const float *Wr, int E, int K,
                    int64_t dim, bool *sel, double *gap) {
    double lg[64];
    for (int e = 0; e < E; e++) {
        double s = 0;
        for (int64_t i = 0; i < dim; i++) s += x[i] * (double)Wr[e * dim + i];
        lg[e] = s;
        sel[e] = false;
    }
    double kth = 0, next = -INFINITY;
    for (int k = 0; k < K; k++) {
        int b = -1;
        for (int e = 0; e < E; e++)
            if (!sel[e] && (b < 0 || lg[e] > lg[b])) b = e;
        sel[b] = true;
        kth = lg[b];
    }
    for (int e = 0; e < E; e++)
        if (!sel[e] && lg[e] > next) next = lg[e];
    *gap = kth - next; /* softmax is monotone: the logits order decides */
}

static void check_model(lb_moe_coverage cov) {
    /* calibration: 8 random sequences of 64 ids in [3, 256) */
    lb_calib cal = {0};
    cal.nsamples = NS;
    cal.seqlen = T;
    cal.ids = malloc(N * sizeof(int32_t));
    uint32_t r = 777;
    for (int i = 0; i < N; i++) {
        r = r * 1664525u + 1013904223u;
        cal.ids[i] = 3 + (int32_t)((r >> 8) % 253);
    }
    lb_model *a = NULL, *b = NULL;
    TH_CHECK_OK(lb_model_load(MODEL, NULL, &a));
    TH_CHECK_OK(lb_model_load(MODEL, NULL, &b));
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_RTN;
    p.qep = true;
    p.qep_alpha = 1.0;
    p.group_size = 32;
    p.n_threads = 2;
    p.moe_coverage = cov;
    /* routed: experts with fewer than 2 x dim tokens go to RTN (below,
     * the least-squares correction is ill-conditioned: see the header) */
    p.moe_min_tokens = 2 * 64;
    lb_quantize_report rep = {0};
    if (a && b) TH_CHECK_OK(lb_quantize_model_inplace(b, &p, &cal, &rep));
    float *Xf = a ? capture(a, cal.ids) : NULL;
    float *Xq = b ? capture(b, cal.ids) : NULL;
    if (!Xf || !Xq) goto out;
    const lb_model_config *c = &a->config;
    const int L = c->n_layers, E = c->n_experts, K = c->n_experts_used;
    const int64_t dim = c->hidden_size, ff = c->moe_ff;
    TH_CHECK(E <= 64 && L == 3 && ff == 32 && dim == 64);
    if (!(E <= 64 && dim == 64)) goto out;
    double *xf = malloc((size_t)N * dim * sizeof(double));
    double *xq = malloc((size_t)N * dim * sizeof(double));
    double *gf = malloc((size_t)N * ff * sizeof(double));
    double *gq = malloc((size_t)N * ff * sizeof(double));
    bool *use = malloc(N), *use_nat = malloc(N);
    bool *sel = malloc((size_t)N * E), *sel_nat = malloc((size_t)N * E);
    float *want = malloc((size_t)(dim * ff) * sizeof(float));
    int64_t n_w = 0, n_diff = 0, n_alt = 0, n_zero = 0;
    int n_rtn = 0;
    bool within_all = true;
    double min_gap = INFINITY;
    for (int l = 0; l < L; l++) {
        for (int64_t i = 0; i < N * dim; i++) {
            xf[i] = Xf[(size_t)l * N * dim + i];
            xq[i] = Xq[(size_t)l * N * dim + i];
        }
        const float *Wr = a->layers[l].ffn_gate_inp.data;
        for (int t = 0; t < N; t++) {
            double gap, gap_n;
            route_d(xq + t * dim, Wr, E, K, dim, sel + t * E, &gap);
            route_d(xf + t * dim, Wr, E, K, dim, sel_nat + t * E, &gap_n);
            min_gap = fmin(min_gap, gap);
        }
        for (int e = 0; e < E; e++) {
            int nrows = 0;
            for (int t = 0; t < N; t++) {
                use[t] = cov == LB_MOE_COVERAGE_ALL || sel[t * E + e];
                use_nat[t] = cov == LB_MOE_COVERAGE_ALL || sel_nat[t * E + e];
                nrows += use[t];
            }
            /* RTN fallback (moe_min_tokens): plain RTN of W */
            const bool rtn_only = nrows < p.moe_min_tokens;
            n_rtn += rtn_only;
            const lb_tensor *Wa = a->layers[l].exp + 3 * e;
            const lb_tensor *Wb = b->layers[l].exp + 3 * e;
            TH_CHECK(Wa[0].type == LB_TYPE_F32 && Wb[0].type == LB_TYPE_F32);
            /* down's inputs: native with the float gate/up, replayed with
             * the quantized ones */
            glu_d(xf, Wa[0].data, Wa[1].data, N, dim, ff, gf);
            glu_d(xq, Wb[0].data, Wb[1].data, N, dim, ff, gq);
            for (int j = 0; j < 3; j++) {
                const int64_t in = j == 2 ? ff : dim, out = j == 2 ? dim : ff;
                const double *n_ = j == 2 ? gf : xf, *q_ = j == 2 ? gq : xq;
                bool w1, w2;
                qep_rtn_d(n_, q_, use, in, Wa[j].data, out, 1.0,
                          p.damp_percent, rtn_only, want);
                const int64_t nd1 = count_diff(Wb[j].data, want, out, in, &w1);
                if (rtn_only) {
                    TH_CHECK_MSG(nd1 == 0, "layer %d expert %d: RTN", l, e);
                    continue;
                }
                n_diff += nd1;
                within_all &= w1;
                n_w += out * in;
                if (cov == LB_MOE_COVERAGE_ROUTED) {
                    /* rows of the native routing: must not match */
                    qep_rtn_d(n_, q_, use_nat, in, Wa[j].data, out, 1.0,
                              p.damp_percent, false, want);
                    n_alt += count_diff(Wb[j].data, want, out, in, &w2);
                }
                qep_rtn_d(n_, q_, use, in, Wa[j].data, out, 1.0,
                          p.damp_percent, true, want);
                n_zero += count_diff(Wb[j].data, want, out, in, &w2);
            }
        }
    }
    fprintf(stderr, "  coverage %s: %d experts by RTN (< %lld tokens, equal "
            "to RTN); %lld of %lld QEP expert weights differ from the "
            "float64 brute force (all within one step: %s); with the "
            "native routing's rows %lld, with D = 0 %lld; smallest top-k "
            "logit gap %.3g\n",
            cov == LB_MOE_COVERAGE_ALL ? "all" : "routed", n_rtn,
            (long long)p.moe_min_tokens, (long long)n_diff,
            (long long)n_w, within_all ? "yes" : "no", (long long)n_alt,
            (long long)n_zero, min_gap);
    TH_CHECK(min_gap > 1e-5); /* the routing is not ambiguous */
    /* codes at a rounding boundary flip with the f32 rounding of the
     * forward that made the inputs (the attention helpers sum in another
     * order per kernel family: routed 147 of 73728 with LB_KERNELS=avx2,
     * 194 with avx512; all 148 / 127 of 147456), every flip one step;
     * the wrong constructions below differ in > 90% */
    TH_CHECK_MSG(n_diff * 200 <= n_w, "%lld of %lld", (long long)n_diff,
                 (long long)n_w);
    TH_CHECK(within_all);
    TH_CHECK_MSG(n_zero > 20 * (n_diff + 1), "D = 0: %lld", (long long)n_zero);
    if (cov == LB_MOE_COVERAGE_ROUTED)
        TH_CHECK_MSG(n_alt > 20 * (n_diff + 1), "native rows: %lld",
                     (long long)n_alt);
    free(want);
    free(sel_nat);
    free(sel);
    free(use_nat);
    free(use);
    free(gq);
    free(gf);
    free(xq);
    free(xf);
out:
    free(Xf);
    free(Xq);
    lb_quantize_report_free(&rep);
    lb_model_free(a);
    lb_model_free(b);
    lb_calib_free(&cal);
}

static void test_qep_all(void) { check_model(LB_MOE_COVERAGE_ALL); }
static void test_qep_routed(void) { check_model(LB_MOE_COVERAGE_ROUTED); }

int main(void) {
    TH_RUN(test_qep_all);
    TH_RUN(test_qep_routed);
    return th_report();
}
