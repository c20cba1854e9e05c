/*
 * GPTAQ (--method gptaq) and QEP (--qep) on the layer pipeline:
 *  - GPTAQ's blocked solve (lowbit's lazy batches of 16 columns, float32)
 *    against the column-by-column update rule of the paper / GPTQModel
 *    gptaq.py written here in float64 (own Cholesky, own H^-1 factor, own
 *    P = alpha triu(D U^T, 1) U), static groups so the grid parameters do
 *    not depend on the block structure;
 *  - GPTAQ's purpose on a synthetic case: with replayed inputs X~ = X -
 *    noise, ||Q X~ - W X|| is smaller with GPTAQ than with GPTQ;
 *  - QEP's correction against a float64 Gauss-Jordan solve of
 *    W + alpha W D (H + damp I)^-1, and with alpha 1 the corrected (not yet
 *    quantized) weights fit W X from X~ better than W;
 *  - tinystories-656k 4-bit g128 asym: GPTAQ and GPTQ+QEP below GPTQ;
 *  - bad parameters (qep with AWQ, non-finite alpha) are refused;
 *  - the Hadamard rotation (R1 + norm folding) of a float model keeps its
 *    logits within 1e-4 for two seeds; an unknown rotation kind and a
 *    rotated checkpoint with a quantized lm_head are refused.
 */
#include "test_quantize_util.h"

#include "quant/gptq_internal.h"

#include <math.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static double nrand(void) {
    double u = urand() + 1e-12, v = urand();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* float64 Cholesky (lower) of A [n, n] in place; false if not PD. */
static bool chol64(double *A, int n) {
    for (int j = 0; j < n; j++) {
        double d = A[j * n + j];
        for (int k = 0; k < j; k++) d -= A[j * n + k] * A[j * n + k];
        if (!(d > 0)) return false;
        d = sqrt(d);
        A[j * n + j] = d;
        for (int i = j + 1; i < n; i++) {
            double s = A[i * n + j];
            for (int k = 0; k < j; k++) s -= A[i * n + k] * A[j * n + k];
            A[i * n + j] = s / d;
        }
        for (int k = j + 1; k < n; k++) A[j * n + k] = 0.0;
    }
    return true;
}

enum { OUT = 12, IN = 48, NT = 400, GS = 8 };

/* Synthetic calibration: X~ [NT, IN] with correlated columns and a few
 * large ones, X = X~ + noise correlated with X~ (what quantized earlier
 * layers do). H = 2/NT X~^T X~, D = 2/NT (X - X~)^T X~. */
static void make_case(float *W, double *Xt, double *Xn, float *H, float *D) {
    for (int i = 0; i < OUT * IN; i++) W[i] = (float)(0.1 * nrand());
    for (int t = 0; t < NT; t++) {
        double base = nrand();
        for (int c = 0; c < IN; c++) {
            double v = 0.5 * base + nrand() * (c % 7 == 0 ? 3.0 : 1.0);
            Xt[t * IN + c] = v;
        }
        for (int c = 0; c < IN; c++)
            Xn[t * IN + c] = Xt[t * IN + c] +
                             0.15 * Xt[t * IN + (c + 1) % IN] + 0.1 * nrand();
    }
    for (int i = 0; i < IN; i++)
        for (int j = 0; j < IN; j++) {
            double h = 0, d = 0;
            for (int t = 0; t < NT; t++) {
                h += Xt[t * IN + i] * Xt[t * IN + j];
                d += (Xn[t * IN + i] - Xt[t * IN + i]) * Xt[t * IN + j];
            }
            H[i * IN + j] = (float)(2.0 * h / NT);
            D[i * IN + j] = (float)(2.0 * d / NT);
        }
}

/* ||Q X~^T - W X^T||^2 over the samples */
static double out_err(const float *Q, const float *W, const double *Xt, const double *Xn) {
    double e = 0;
    for (int o = 0; o < OUT; o++)
        for (int t = 0; t < NT; t++) {
            double a = 0, b = 0;
            for (int c = 0; c < IN; c++) {
                a += (double)Q[o * IN + c] * Xt[t * IN + c];
                b += (double)W[o * IN + c] * Xn[t * IN + c];
            }
            e += (a - b) * (a - b);
        }
    return e;
}

static void test_gptaq_rule(void) {
    float *W = malloc(sizeof(float) * OUT * IN), *H = malloc(sizeof(float) * IN * IN),
          *D = malloc(sizeof(float) * IN * IN);
    double *Xt = malloc(sizeof(double) * NT * IN), *Xn = malloc(sizeof(double) * NT * IN);
    make_case(W, Xt, Xn, H, D);
    lb_gptq_options o;
    lb_gptq_options_default(&o);
    o.bits = 3;
    o.group_size = GS;
    o.sym = false;
    o.static_groups = true;
    o.blocksize = 16; /* three lazy batches */
    const double alpha = 0.25;
    lb_gptq_factor *f = NULL;
    TH_CHECK_OK(lb_gptq_factor_make(H, IN, &o, &f));
    float *P = NULL;
    TH_CHECK_OK(lb_gptaq_make_P(f, D, (float)alpha, &P));
    lb_gptq_result r, rg;
    TH_CHECK_OK(lb_gptaq_quantize_factored(W, OUT, IN, f, &o, P, &r));
    TH_CHECK_OK(lb_gptq_quantize_factored(W, OUT, IN, f, &o, &rg));
    { /* W as the working copy: the same bits */
        lb_gptq_result ri;
        float *Wc = malloc(sizeof(float) * OUT * IN);
        memcpy(Wc, W, sizeof(float) * OUT * IN);
        TH_CHECK_OK(lb_gptaq_quantize_factored_inplace(Wc, OUT, IN, f, &o, P, &ri));
        TH_CHECK(ri.codes && r.codes &&
                 memcmp(ri.codes, r.codes, (size_t)OUT * IN) == 0 &&
                 memcmp(ri.W_deq, r.W_deq, sizeof(float) * OUT * IN) == 0 &&
                 memcmp(ri.scales, r.scales, sizeof(float) * (size_t)(OUT * r.n_groups)) == 0 &&
                 ri.loss == r.loss);
        lb_gptq_result_free(&ri);
        free(Wc);
    }

    /* float64 reference: damp = 0.01 mean diag, Hinv = (H + damp)^-1,
     * U = upper Cholesky of Hinv (Hinv = U^T U), P = alpha triu(D U^T,1) U */
    double mean = 0;
    for (int c = 0; c < IN; c++) mean += H[c * IN + c];
    mean /= IN;
    double *Hd = malloc(sizeof(double) * IN * IN), *Hi = malloc(sizeof(double) * IN * IN),
           *U = malloc(sizeof(double) * IN * IN), *A = malloc(sizeof(double) * IN * IN),
           *Pd = malloc(sizeof(double) * IN * IN);
    for (int i = 0; i < IN * IN; i++) Hd[i] = H[i];
    for (int c = 0; c < IN; c++) Hd[c * IN + c] += 0.01 * mean;
    th_inv64(Hd, Hi, IN);
    double *R = malloc(sizeof(double) * IN * IN);
    /* Hi = U^T U with U upper: U = L^T for the lower Cholesky L of Hi */
    for (int i = 0; i < IN * IN; i++) R[i] = Hi[i];
    TH_CHECK(chol64(R, IN));
    for (int i = 0; i < IN; i++)
        for (int j = 0; j < IN; j++) U[i * IN + j] = R[j * IN + i];
    for (int i = 0; i < IN; i++)
        for (int j = 0; j < IN; j++) {
            double s = 0;
            for (int k = 0; k < IN; k++) s += (double)D[i * IN + k] * U[j * IN + k];
            A[i * IN + j] = j > i ? s : 0.0;
        }
    for (int i = 0; i < IN; i++)
        for (int j = 0; j < IN; j++) {
            double s = 0;
            for (int k = 0; k < IN; k++) s += A[i * IN + k] * U[k * IN + j];
            Pd[i * IN + j] = alpha * s;
        }
    double pmax = 0, pdiff = 0;
    for (int i = 0; i < IN * IN; i++) {
        pmax = fmax(pmax, fabs(Pd[i]));
        pdiff = fmax(pdiff, fabs(Pd[i] - P[i]));
    }
    fprintf(stderr, "  P: max |P| %.4g, max diff vs float64 %.3g\n", pmax, pdiff);
    TH_CHECK(pdiff <= 1e-4 * pmax + 1e-7);
    /* grid parameters: static groups of the original W (asym AutoGPTQ grid) */
    const int ng = IN / GS, maxq = 7;
    int bad_sc = 0;
    for (int o2 = 0; o2 < OUT; o2++)
        for (int g = 0; g < ng; g++) {
            double mn = 0, mx = 0;
            for (int c = g * GS; c < (g + 1) * GS; c++) {
                mn = fmin(mn, W[o2 * IN + c]);
                mx = fmax(mx, W[o2 * IN + c]);
            }
            double sc = (mx - mn) / maxq;
            if (fabs(sc - r.scales[o2 * ng + g]) > 1e-6 * sc) bad_sc++;
            if (r.zeros[o2 * ng + g] != (int32_t)nearbyint(-mn / sc)) bad_sc++;
        }
    TH_CHECK_INT(bad_sc, 0);
    /* the column rule, unrolled, float64, with lowbit's scales/zeros */
    double *Wr = malloc(sizeof(double) * OUT * IN);
    int code_diff = 0;
    double wdiff = 0;
    for (int o2 = 0; o2 < OUT; o2++) {
        double *w = Wr + o2 * IN;
        for (int c = 0; c < IN; c++) w[c] = W[o2 * IN + c];
        for (int c = 0; c < IN; c++) {
            const double sc = r.scales[o2 * ng + c / GS];
            const int z = r.zeros[o2 * ng + c / GS];
            int q = (int)nearbyint(w[c] / sc) + z;
            q = q < 0 ? 0 : q > maxq ? maxq : q;
            const double dq = sc * (q - z);
            if (q != r.codes[o2 * IN + c]) code_diff++;
            wdiff = fmax(wdiff, fabs(dq - r.W_deq[o2 * IN + c]));
            const double err = (w[c] - dq) / U[c * IN + c], wc = w[c];
            for (int j = c + 1; j < IN; j++) w[j] -= err * U[c * IN + j] - wc * Pd[c * IN + j];
        }
    }
    fprintf(stderr, "  GPTAQ blocked f32 vs column rule f64: %d/%d codes differ, max |dq diff| %.3g\n",
            code_diff, OUT * IN, wdiff);
    TH_CHECK(code_diff <= 2);
    /* purpose: the output on the replayed inputs is closer to the native one */
    double eq = out_err(rg.W_deq, W, Xt, Xn), ea = out_err(r.W_deq, W, Xt, Xn);
    fprintf(stderr, "  ||Q X~ - W X||^2: GPTQ %.4g, GPTAQ %.4g\n", eq, ea);
    TH_CHECK(ea < eq);
    lb_gptq_result_free(&r);
    lb_gptq_result_free(&rg);
    lb_gptq_factor_free(f);
    lb_free(P);

    /* QEP: W* = W + alpha W D (H + damp)^-1 */
    float *Wc = malloc(sizeof(float) * OUT * IN), *W1 = malloc(sizeof(float) * OUT * IN);
    TH_CHECK_OK(lb_qep_correct(W, OUT, IN, H, D, 0.5, 0.01, Wc));
    double qd = 0, qm = 0;
    for (int o2 = 0; o2 < OUT; o2++)
        for (int j = 0; j < IN; j++) {
            double s = 0;
            for (int i = 0; i < IN; i++) {
                double wd = 0;
                for (int k = 0; k < IN; k++) wd += (double)W[o2 * IN + k] * D[k * IN + i];
                s += wd * Hi[i * IN + j];
            }
            double ref = W[o2 * IN + j] + 0.5 * s;
            qd = fmax(qd, fabs(ref - Wc[o2 * IN + j]));
            qm = fmax(qm, fabs(ref));
        }
    fprintf(stderr, "  QEP correction vs float64 Gauss-Jordan: max diff %.3g (max |W*| %.3g)\n", qd,
            qm);
    TH_CHECK(qd <= 1e-6 * qm);
    TH_CHECK_OK(lb_qep_correct(W, OUT, IN, H, D, 1.0, 1e-6, W1));
    double e0 = out_err(W, W, Xt, Xn), e1 = out_err(W1, W, Xt, Xn);
    fprintf(stderr, "  ||W' X~ - W X||^2: W %.4g, QEP(alpha 1) %.4g\n", e0, e1);
    TH_CHECK(e1 < 0.5 * e0);
    free(Wc);
    free(W1);
    free(W);
    free(H);
    free(D);
    free(Xt);
    free(Xn);
    free(Hd);
    free(Hi);
    free(U);
    free(A);
    free(Pd);
    free(R);
    free(Wr);
}

static lb_calib ref_calib(void) {
    lb_calib c;
    TH_CHECK_OK(lb_calib_load_ids(th_shared("reference/gptq_model/calib_ids.i32"), 128, 0, &c));
    return c;
}

static void test_tinystories(void) {
    lb_calib cal = ref_calib();
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.sym = false;
    p.n_threads = 2;
    double ppl[3];
    for (int k = 0; k < 3; k++) {
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(th_shared(TS_DIR), NULL, &m));
        p.method = k == 1 ? LB_QUANT_GPTAQ : LB_QUANT_GPTQ;
        p.qep = k == 2;
        lb_quantize_report rep;
        TH_CHECK_OK(lb_quantize_model_inplace(m, &p, &cal, &rep));
        lb_quantize_report_free(&rep);
        ppl[k] = ppl_full256(m);
        lb_model_free(m);
    }
    fprintf(stderr, "  tinystories-656k 4-bit g128 asym ppl: GPTQ %.4f, GPTAQ %.4f, GPTQ+QEP %.4f\n",
            ppl[0], ppl[1], ppl[2]);
    TH_CHECK(ppl[1] < ppl[0]);
    TH_CHECK(ppl[2] < ppl[0] - 0.3);
    lb_calib_free(&cal);
}

static void test_bad_params(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared(TS_DIR), NULL, &m));
    lb_calib cal = ref_calib();
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_AWQ;
    p.qep = true;
    TH_CHECK(lb_quantize_model_inplace(m, &p, &cal, NULL) == LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "--qep") != NULL);
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_GPTAQ;
    p.gptaq_alpha = NAN;
    TH_CHECK(lb_quantize_model_inplace(m, &p, &cal, NULL) == LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "gptaq_alpha") != NULL);
    lb_quantize_default_params(&p);
    p.qep = true;
    p.qep_alpha = INFINITY;
    TH_CHECK(lb_quantize_model_inplace(m, &p, &cal, NULL) == LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "qep_alpha") != NULL);
    lb_calib_free(&cal);
    lb_model_free(m);
}

/* A rotated float model gives the unrotated model's logits (max |diff|
 * <= 1e-4); lm_head is untied, norms are ones; another seed gives other
 * weights but the same logits. */
static void test_rotate_float(void) {
    lb_model *a = NULL, *b = NULL, *c = NULL;
    TH_CHECK_OK(lb_model_load(th_shared(TS_DIR), NULL, &a));
    TH_CHECK_OK(lb_model_load(th_shared(TS_DIR), NULL, &b));
    TH_CHECK_OK(lb_model_load(th_shared(TS_DIR), NULL, &c));
    TH_CHECK_OK(lb_model_rotate_hadamard(b, 0));
    TH_CHECK_OK(lb_model_rotate_hadamard(c, 12345));
    TH_CHECK(!b->config.tie_word_embeddings);
    TH_CHECK(((const float *)b->layers[1].ffn_norm.data)[3] == 1.0f);
    int n_sign = 0; /* the seeds' signs differ on about half the columns */
    for (int i = 0; i < 128; i++)
        n_sign += ((const float *)b->layers[0].w[LB_LINEAR_Q].data)[i] ==
                  -((const float *)c->layers[0].w[LB_LINEAR_Q].data)[i];
    TH_CHECK(n_sign > 32 && n_sign < 96);
    enum { N = 64 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 37 + 11) % a->config.vocab_size;
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = N;
    cp.n_threads = 2;
    const int V = a->config.vocab_size;
    float *la = malloc(sizeof(float) * N * V), *lb = malloc(sizeof(float) * N * V),
          *lc = malloc(sizeof(float) * N * V);
    lb_context *ca = NULL, *cb = NULL, *cc = NULL;
    TH_CHECK_OK(lb_context_create(a, &cp, &ca));
    TH_CHECK_OK(lb_context_create(b, &cp, &cb));
    TH_CHECK_OK(lb_context_create(c, &cp, &cc));
    TH_CHECK_OK(lb_model_forward(ca, ids, N, 0, la, LB_LOGITS_ALL));
    TH_CHECK_OK(lb_model_forward(cb, ids, N, 0, lb, LB_LOGITS_ALL));
    TH_CHECK_OK(lb_model_forward(cc, ids, N, 0, lc, LB_LOGITS_ALL));
    double d = 0, d2 = 0, mx = 0;
    for (int i = 0; i < N * V; i++) {
        d = fmax(d, fabs((double)la[i] - lb[i]));
        d2 = fmax(d2, fabs((double)la[i] - lc[i]));
        mx = fmax(mx, fabs((double)la[i]));
    }
    fprintf(stderr, "  rotated float logits: max |diff| %.3g (seed 0), %.3g (seed 12345); max |logit| %.3g\n",
            d, d2, mx);
    TH_CHECK(d <= 1e-4 && d2 <= 1e-4);
    free(la);
    free(lb);
    free(lc);
    lb_context_free(ca);
    lb_context_free(cb);
    lb_context_free(cc);
    lb_model_free(a);
    lb_model_free(b);
    lb_model_free(c);
}

/* Bad rotation input: unknown kind; a rotated checkpoint with a quantized
 * lm_head (not supported). */
static void test_rotate_bad(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared(TS_DIR), NULL, &m));
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_RTN;
    p.rotate = (lb_rotate_kind)7;
    TH_CHECK(lb_quantize_model_inplace(m, &p, NULL, NULL) == LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "rotation kind") != NULL);
    p.rotate = LB_ROTATE_HADAMARD;
    p.lm_head = true; /* rotated checkpoints keep lm_head dense */
    TH_CHECK(lb_quantize_model(th_shared(TS_DIR), tmp_path("rot-ckpt"), &p, NULL, NULL) ==
             LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "rotate") != NULL);
    lb_model_free(m);
}

int main(void) {
    TH_RUN(test_rotate_float);
    TH_RUN(test_rotate_bad);
    TH_RUN(test_gptaq_rule);
    TH_RUN(test_bad_params);
    TH_RUN(test_tinystories);
    qt_cleanup();
    return th_report();
}
