/*
 * EoRA adapter generation (lowbit/eora.h): per-linear input second moments
 * from calibration (lb_gptq_hessian, float64 accumulation, captured with
 * the forward hook of the quantized model), then the eigenspace-scaled
 * truncated SVD of the quantization residual. Follows the EoRA paper
 * (Liu et al., 2024, Algorithm 1) and GPTQModel eora/eora.py
 * (eora_compute_lora: eigh, negative eigenvalues clamped, delta @ Q sqrt(L),
 * svd, B/A); here B = U_R Sigma_R and A = V_R^T sqrt(L)^-1 Q^T (GPTQModel
 * splits sqrt(Sigma) between both; the product is the same).
 */
#include "lowbit/eora.h"
#include "lowbit/gptq.h"
#include "lowbit/kernels.h"
#include "lowbit/quants.h"
#include "core/internal.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool finite_all(const double *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

lb_status lb_eora_factor(const double *dW, int64_t out, int64_t in,
                         const double *H, int64_t rank, double *A, double *B,
                         double *sigma, int64_t *n_clamped) {
    const int64_t k = LB_MIN(out, in);
    if (out < 1 || in < 1 || out > INT32_MAX || in > INT32_MAX || rank < 1 ||
        rank > k)
        return lb_set_error(LB_ERR_INVALID_ARG, "eora: rank %lld for a [%lld, "
                            "%lld] linear (1 <= rank <= %lld)", (long long)rank,
                            (long long)out, (long long)in, (long long)k);
    if (!finite_all(dW, (size_t)(out * in)) || !finite_all(H, (size_t)(in * in)))
        return lb_set_error(LB_ERR_INVALID_ARG, "eora: non-finite residual or "
                            "Hessian");
    const size_t ni = (size_t)in, no = (size_t)out;
    double *Q = malloc(ni * ni * sizeof *Q), *lam = malloc(ni * sizeof *lam),
           *M = malloc(no * ni * sizeof *M), *U = malloc(no * (size_t)k * sizeof *U),
           *S = malloc((size_t)k * sizeof *S), *VT = malloc((size_t)k * ni * sizeof *VT);
    lb_status s = LB_OK;
    if (!Q || !lam || !M || !U || !S || !VT) {
        s = lb_set_error(LB_ERR_NOMEM, "eora: out of memory for a [%lld, %lld] "
                         "linear", (long long)out, (long long)in);
        goto done;
    }
    /* 1. H = Q diag(lam) Q^T (row-major: column j of Q is eigenvector j) */
    for (size_t i = 0; i < ni; i++)
        for (size_t j = 0; j < ni; j++)
            Q[i * ni + j] = j >= i ? H[i * ni + j] : H[j * ni + i];
    lapack_int info = LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'U', (lapack_int)in,
                                     Q, (lapack_int)in, lam);
    if (info != 0) {
        s = lb_set_error(LB_ERR_INTERNAL, "eora: LAPACK dsyevd failed (info %d)",
                         (int)info);
        goto done;
    }
    double lmax = 0;
    for (size_t i = 0; i < ni; i++) lmax = LB_MAX(lmax, lam[i]);
    int64_t nc = 0;
    for (size_t i = 0; i < ni; i++) {
        double fl = lmax > 0 ? LB_EORA_EIG_FLOOR * lmax : 1.0;
        if (lmax <= 0) {
            lam[i] = 1.0;
            nc++;
        } else if (lam[i] < fl) {
            lam[i] = fl;
            nc++;
        }
    }
    if (n_clamped) *n_clamped = nc;
    /* 2. M = dW Q sqrt(L): scale Q's columns, then dgemm */
    for (size_t i = 0; i < ni; i++)
        for (size_t j = 0; j < ni; j++) Q[i * ni + j] *= sqrt(lam[j]);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)out, (int)in,
                (int)in, 1.0, dW, (int)in, Q, (int)in, 0.0, M, (int)in);
    /* 3. M = U S VT (thin) */
    info = LAPACKE_dgesdd(LAPACK_ROW_MAJOR, 'S', (lapack_int)out, (lapack_int)in,
                          M, (lapack_int)in, S, U, (lapack_int)k, VT,
                          (lapack_int)in);
    if (info != 0) {
        s = lb_set_error(LB_ERR_INTERNAL, "eora: LAPACK dgesdd failed (info %d)",
                         (int)info);
        goto done;
    }
    if (sigma) memcpy(sigma, S, (size_t)k * sizeof *S);
    /* 4. B = U_R S_R; A = VT_R diag(1/sqrt(lam)) Q^T (Q unscaled: undo the
     *    column scaling, Q_ij = Qs_ij / sqrt(lam_j)) */
    for (size_t o = 0; o < no; o++)
        for (int64_t r = 0; r < rank; r++)
            B[o * (size_t)rank + (size_t)r] = U[o * (size_t)k + (size_t)r] * S[r];
    for (size_t i = 0; i < ni; i++)
        for (size_t j = 0; j < ni; j++) Q[i * ni + j] /= lam[j]; /* Q_ij / sqrt(lam_j) */
    /* A[r, i] = sum_j VT[r, j] * Q[i, j] / sqrt(lam_j) */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rank, (int)in,
                (int)in, 1.0, VT, (int)in, Q, (int)in, 0.0, A, (int)in);
done:
    free(Q);
    free(lam);
    free(M);
    free(U);
    free(S);
    free(VT);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Calibration capture                                                       */
/* ------------------------------------------------------------------------ */

/* Input groups of a layer: q/k/v share one input, gate/up another. */
enum { G_QKV = 0, G_O, G_GU, G_DOWN, G_COUNT };
static int group_of(int which) {
    switch (which) {
    case LB_LINEAR_Q:
    case LB_LINEAR_K:
    case LB_LINEAR_V: return G_QKV;
    case LB_LINEAR_O: return G_O;
    case LB_LINEAR_GATE:
    case LB_LINEAR_UP: return G_GU;
    default: return G_DOWN;
    }
}

typedef struct capture {
    int l0, l1;                  /* layers captured in this pass          */
    lb_gptq_hessian **h;         /* [(l1-l0) * G_COUNT]                   */
} capture;

static lb_status on_input(void *user, int layer, lb_linear_id which,
                          const float *X, int64_t n, int64_t in) {
    capture *c = user;
    if (layer < c->l0 || layer >= c->l1) return LB_OK;
    /* one add per input: the first linear of each group */
    if (which == LB_LINEAR_K || which == LB_LINEAR_V || which == LB_LINEAR_UP)
        return LB_OK;
    lb_gptq_hessian *h = c->h[(size_t)(layer - c->l0) * G_COUNT + group_of(which)];
    if (lb_gptq_hessian_in_features(h) != in)
        return lb_set_error(LB_ERR_INTERNAL, "eora: layer %d input width", layer);
    return lb_gptq_hessian_add_batch(h, X, n, 1);
}

static void lin_dims(const lb_model_config *c, int which, int64_t *out,
                     int64_t *in) {
    const int64_t dim = c->hidden_size, qd = (int64_t)c->n_heads * c->head_dim,
                  kvd = (int64_t)c->n_kv_heads * c->head_dim,
                  ff = c->intermediate_size;
    switch (which) {
    case LB_LINEAR_Q: *out = qd; *in = dim; break;
    case LB_LINEAR_K:
    case LB_LINEAR_V: *out = kvd; *in = dim; break;
    case LB_LINEAR_O: *out = dim; *in = qd; break;
    case LB_LINEAR_GATE:
    case LB_LINEAR_UP: *out = ff; *in = dim; break;
    default: *out = dim; *in = ff; break;
    }
}

/* W as float64 [out, in] (rows dequantized). */
static lb_status weight_f64(const lb_tensor *t, int64_t out, int64_t in,
                            double *W, float *row) {
    size_t rb;
    if (!lb_row_size(t->type, in, &rb))
        return lb_set_error(LB_ERR_INVALID_ARG, "eora: %s: row size", t->name ? t->name : "?");
    for (int64_t o = 0; o < out; o++) {
        LB_TRY(lb_tensor_dequant_row(t, o, row));
        for (int64_t i = 0; i < in; i++) W[o * in + i] = row[i];
    }
    return LB_OK;
}

/* Is the linear quantized, i.e. do the two weights differ? */
static bool differs(const double *dW, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (dW[i] != 0.0) return true;
    return false;
}

static lb_status factor_layer(const lb_model *dense, const lb_model *quant,
                              int layer, lb_gptq_hessian *const *hs, int rank,
                              lb_lora *ad, lb_eora_report *rep) {
    const lb_model_config *c = &quant->config;
    lb_status s = LB_OK;
    for (int i = 0; i < LB_LINEAR_COUNT && s == LB_OK; i++) {
        int64_t out, in;
        lin_dims(c, i, &out, &in);
        const int64_t R = LB_MIN((int64_t)rank, LB_MIN(out, in));
        double *W = malloc((size_t)(out * in) * sizeof *W),
               *Wq = malloc((size_t)(out * in) * sizeof *Wq),
               *H = malloc((size_t)(in * in) * sizeof *H),
               *A = malloc((size_t)(R * in) * sizeof *A),
               *B = malloc((size_t)(out * R) * sizeof *B),
               *sig = malloc((size_t)LB_MIN(out, in) * sizeof *sig);
        float *row = malloc((size_t)in * sizeof *row),
              *Af = malloc((size_t)(R * in) * sizeof *Af),
              *Bf = malloc((size_t)(out * R) * sizeof *Bf);
        if (!W || !Wq || !H || !A || !B || !sig || !row || !Af || !Bf)
            s = lb_set_error(LB_ERR_NOMEM, "eora: out of memory");
        if (s == LB_OK) s = weight_f64(&dense->layers[layer].w[i], out, in, W, row);
        if (s == LB_OK) s = weight_f64(&quant->layers[layer].w[i], out, in, Wq, row);
        bool q = false;
        if (s == LB_OK) {
            for (int64_t k = 0; k < out * in; k++) W[k] -= Wq[k];
            q = differs(W, (size_t)(out * in));
        }
        if (s == LB_OK && q) {
            lb_gptq_hessian_get_f64(hs[group_of(i)], H);
            int64_t nc = 0;
            s = lb_eora_factor(W, out, in, H, R, A, B, sig, &nc);
            if (s == LB_OK) {
                for (int64_t k = 0; k < LB_MIN(out, in); k++) {
                    rep->err_before += sig[k] * sig[k];
                    if (k >= R) rep->err_after += sig[k] * sig[k];
                }
                rep->n_clamped += nc;
                rep->n_linears++;
                for (int64_t k = 0; k < R * in; k++) Af[k] = (float)A[k];
                /* the runtime scales by alpha / R_linear (alpha = rank):
                 * where the rank was cut to min(out, in), B is divided by
                 * that scale so that the product stays B A */
                const double inv = (double)R / (double)rank;
                for (int64_t k = 0; k < out * R; k++) Bf[k] = (float)(B[k] * inv);
                s = lb_lora_set_linear(ad, layer, (lb_linear_id)i, out, in, R, Af, Bf);
            }
        }
        free(W); free(Wq); free(H); free(A); free(B); free(sig);
        free(row); free(Af); free(Bf);
    }
    return s;
}

lb_status lb_eora_generate(const lb_model *dense, const lb_model *quant,
                           const lb_calib *calib, const lb_eora_params *p,
                           const char *name, lb_lora **out,
                           lb_eora_report *rep) {
    *out = NULL;
    memset(rep, 0, sizeof *rep);
    const lb_model_config *c = &quant->config, *cd = &dense->config;
    if (c->n_layers != cd->n_layers || c->hidden_size != cd->hidden_size ||
        c->intermediate_size != cd->intermediate_size ||
        c->n_heads != cd->n_heads || c->n_kv_heads != cd->n_kv_heads ||
        c->head_dim != cd->head_dim)
        return lb_set_error(LB_ERR_INVALID_ARG, "eora: the dense and quantized "
                            "models have different shapes");
    if (c->rope_mode != cd->rope_mode)
        return lb_set_error(LB_ERR_INVALID_ARG, "eora: the dense and quantized "
                            "models hold q/k rows in different orders (give both "
                            "as HF/GPTQ directories)");
    /* the issue-13 layouts (fused Phi-3 modules, MoE experts, Gemma's
     * norms) have no adapter targets here yet, and LoRA is not applied by
     * their forward (docs/model.md) */
    if (c->arch >= LB_ARCH_GEMMA2 || lb_model_config_is_ext(c))
        return lb_set_error(LB_ERR_UNSUPPORTED, "eora: %s is not supported "
                            "(Llama, Mistral, Qwen2, Qwen3 layouts only)",
                            c->arch_name);
    if (!p || p->rank < 1)
        return lb_set_error(LB_ERR_INVALID_ARG, "eora: rank must be >= 1");
    if (!calib || !calib->ids || calib->nsamples < 1 || calib->seqlen < 1 ||
        calib->seqlen > INT32_MAX)
        return lb_set_error(LB_ERR_INVALID_ARG, "eora: calibration data needed");
    const int64_t dim = c->hidden_size, qd = (int64_t)c->n_heads * c->head_dim,
                  ff = c->intermediate_size;
    const double per_layer = 8.0 * (double)(2 * dim * dim + qd * qd + ff * ff) * 2.0;
    const double budget = p->mem_budget ? (double)p->mem_budget : 2.0 * (1u << 30);
    int per_pass = (int)LB_MAX(1.0, floor(budget / per_layer));
    per_pass = LB_MIN(per_pass, c->n_layers);
    lb_lora *ad;
    LB_TRY(lb_lora_create(name, c, p->rank, (float)p->rank, &ad));
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = (int32_t)calib->seqlen;
    cp.n_batch = (int32_t)calib->seqlen;
    cp.n_threads = p->n_threads;
    lb_context *ctx = NULL;
    lb_status s = lb_context_create(quant, &cp, &ctx);
    lb_gptq_hessian **hs = calloc((size_t)per_pass * G_COUNT, sizeof *hs);
    if (s == LB_OK && !hs) s = lb_set_error(LB_ERR_NOMEM, "eora: out of memory");
    const uint64_t total = (uint64_t)c->n_layers;
    for (int l0 = 0; l0 < c->n_layers && s == LB_OK; l0 += per_pass) {
        const int l1 = LB_MIN(c->n_layers, l0 + per_pass);
        rep->n_passes++;
        for (int l = l0; l < l1 && s == LB_OK; l++)
            for (int g = 0; g < G_COUNT && s == LB_OK; g++) {
                const int64_t in = g == G_O ? qd : g == G_DOWN ? ff : dim;
                s = lb_gptq_hessian_create(in, true, &hs[(size_t)(l - l0) * G_COUNT + g]);
            }
        capture cap = {l0, l1, hs};
        lb_forward_hook hook = {on_input, &cap};
        lb_context_set_hook(ctx, &hook);
        for (int64_t k = 0; k < calib->nsamples && s == LB_OK; k++) {
            s = lb_model_forward(ctx, calib->ids + k * calib->seqlen,
                                 (int32_t)calib->seqlen, 0, NULL, LB_LOGITS_NONE);
            if (s == LB_OK && !lb_progress_report(&p->progress, "eora: calibration",
                                                  (uint64_t)l0 * (uint64_t)calib->nsamples + (uint64_t)k,
                                                  total * (uint64_t)calib->nsamples))
                s = lb_set_error(LB_ERR_CANCELLED, "eora: cancelled");
        }
        lb_context_set_hook(ctx, NULL);
        for (int l = l0; l < l1 && s == LB_OK; l++) {
            s = factor_layer(dense, quant, l, hs + (size_t)(l - l0) * G_COUNT,
                             p->rank, ad, rep);
            if (s == LB_OK && !lb_progress_report(&p->progress, "eora: factorizing",
                                                  (uint64_t)(l + 1), total))
                s = lb_set_error(LB_ERR_CANCELLED, "eora: cancelled");
        }
        for (int i = 0; i < per_pass * G_COUNT; i++) {
            lb_gptq_hessian_free(hs[i]);
            hs[i] = NULL;
        }
    }
    free(hs);
    lb_context_free(ctx);
    if (s == LB_OK && rep->n_linears == 0)
        s = lb_set_error(LB_ERR_INVALID_ARG, "eora: no linear differs between "
                         "the dense and the quantized model");
    if (s != LB_OK) {
        lb_lora_free(ad);
        return s;
    }
    *out = ad;
    return LB_OK;
}
