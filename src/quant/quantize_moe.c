/*
 * The MoE block of the layer pipeline (issue 13): GPTQ on the experts of
 * Qwen3-MoE, Qwen2-MoE and Mixtral layers with expert coverage, after the
 * attention subsets of quantize.c.
 *
 *   X [N, dim] = the block's input (post-attention norm output) of every
 *     calibration token (N = nsamples * seqlen), captured with the forward
 *     hook (forward_ext.c reports it as LB_LINEAR_GATE);
 *   routing = lb_moe_route on X Wr^T (forward_ext.c's own top-k);
 *   shared expert (Qwen2-MoE): gate/up on H(X), then down on
 *     H(act(X Wg~^T) * X Wu~^T) with the quantized gate/up (true sequential);
 *   expert e, coverage ALL (GPTQModel's routing override: every expert
 *     sees every token): gate/up on H(X) (one Hessian and one inverse
 *     factor shared by all experts), down on H(act(X Wg_e~^T) * X Wu_e~^T);
 *   coverage ROUTED: the same on the rows X_e of the tokens routed to e;
 *     fewer than moe_min_tokens of them -> RTN (report note).
 * Hessians are accumulated one sequence at a time (AutoGPTQ's add_batch
 * per forward, nsamples counted in sequences; GPTQ is invariant to the
 * Hessian's scale). The replay in quantize.c then runs the layer with
 * every quantized expert swapped in and the real routing. Memory: X, the
 * routing, and one expert's activations [N, moe_ff] at a time.
 *
 * GPTAQ / QEP (QZ_NEED_NATIVE): Xn [N, dim] = the block's input in the
 * unquantized model (the native stream, engine Xn[QZ_IN_MLP]) over the
 * same tokens. Every module gets the cross statistics of its input
 * D = 2/nsamp sum_t (xn_t - x_t)^T x_t (the scale of its H) over the SAME
 * rows as its Hessian: coverage ALL every token (one D for every expert's
 * gate/up, like H); ROUTED the tokens that the quantized path's router
 * sends to the expert (the routing above, on X: the tokens the expert will
 * process at run time) and the native rows of those same tokens. Down's
 * native input is act(Xn Wg^T) * (Xn Wu^T) with the expert's float gate/up
 * (computed before they are quantized), its replayed input the one above
 * with the quantized gate/up. The shared expert is a dense MLP on every
 * token. The routers and shared_expert_gate stay dense.
 */
#include "quant/quantize_internal.h"
#include "lowbit/kernels.h"
#include "model/model_internal.h"
#include "core/internal.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t qz_moe_units(const qz_engine *e, int l, const qz_module *lm, int n) {
    (void)l;
    for (int i = 0; i < n; i++)
        if (lm[i].quantize && lm[i].which >= QZ_SHEXP) return (uint64_t)e->ns;
    return 0;
}

static const qz_module *find(const qz_module *lm, int n, int which) {
    for (int i = 0; i < n; i++)
        if (lm[i].which == which) return &lm[i];
    return NULL;
}

/* H [in, in] of the rows X [seg[ns], in], one add_batch per sequence s
 * (rows seg[s] .. seg[s+1]; empty sequences skipped). */
static lb_status hessian(qz_engine *e, const float *X, int64_t in,
                         const int64_t *seg, float **H, int64_t *nsamp) {
    *H = NULL;
    lb_gptq_hessian *h = NULL;
    LB_TRY(qz_engine_hessian_create(e, in, &h));
    const double t0 = lb_time_s();
    lb_status s = LB_OK;
    for (int64_t i = 0; i < e->ns && s == LB_OK; i++) {
        const int64_t nr = seg[i + 1] - seg[i];
        if (nr > 0)
            s = lb_gptq_hessian_add_batch(h, X + (size_t)(seg[i] * in), nr, 1);
    }
    e->rep->hessian_seconds += lb_time_s() - t0;
    *nsamp = lb_gptq_hessian_nsamples(h);
    if (s != LB_OK) {
        lb_gptq_hessian_free(h);
        return s;
    }
    return lb_gptq_hessian_take(h, H);
}

/* GPTAQ / QEP cross statistics of rows X (replayed) and Xn (native, the
 * same tokens) [seg[ns], in]: *D [in, in] = 2/nsamp sum over the
 * sequences' rows of (Xn - X)^T X (D[i][j] = 2/nsamp sum_t (xn_ti - x_ti)
 * x_tj, run_subset's accumulation, one sgemm per sequence), nsamp the
 * Hessian's (non-empty sequences). */
static lb_status cross(qz_engine *e, const float *Xn, const float *X,
                       int64_t in, const int64_t *seg, int64_t nsamp,
                       float **D) {
    *D = NULL;
    int64_t rmax = 0;
    for (int64_t i = 0; i < e->ns; i++)
        rmax = LB_MAX(rmax, seg[i + 1] - seg[i]);
    size_t n_ii, n_ri;
    if (!lb_mul_ok((size_t)in, (size_t)in, &n_ii) ||
        !lb_mul_ok(n_ii, sizeof(float), &n_ii) ||
        !lb_mul_ok((size_t)LB_MAX(rmax, 1), (size_t)in, &n_ri) ||
        !lb_mul_ok(n_ri, sizeof(float), &n_ri))
        return lb_set_error(LB_ERR_OVERFLOW, "quantize: cross statistics "
                            "[%lld, %lld] overflow", (long long)in,
                            (long long)in);
    float *d = lb_calloc(n_ii, 1), *delta = lb_alloc(n_ri);
    if (!d || !delta) {
        lb_free(d);
        lb_free(delta);
        return lb_set_error(LB_ERR_NOMEM, "quantize: out of memory for the "
                            "cross statistics [%lld, %lld]", (long long)in,
                            (long long)in);
    }
    const double t0 = lb_time_s();
    for (int64_t i = 0; i < e->ns; i++) {
        const int64_t nr = seg[i + 1] - seg[i];
        if (nr <= 0) continue;
        const float *x = X + (size_t)(seg[i] * in);
        const float *xn = Xn + (size_t)(seg[i] * in);
        for (int64_t k = 0; k < nr * in; k++) delta[k] = xn[k] - x[k];
        /* d += delta^T x */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)in,
                    (int)in, (int)nr, 1.0f, delta, (int)in, x, (int)in, 1.0f,
                    d, (int)in);
    }
    if (nsamp > 0) {
        const float sc = (float)(2.0 / (double)nsamp);
        for (int64_t k = 0; k < in * in; k++) d[k] *= sc;
    }
    e->rep->hessian_seconds += lb_time_s() - t0;
    lb_free(delta);
    *D = d;
    return LB_OK;
}

/* GPTQ of module q (NULL or not quantized: nothing) with H (and, for
 * GPTAQ / QEP, the cross statistics D of the same input, else NULL); *fac
 * (one per desc_act setting) is made on first use and shared with the
 * next module of the same input. H_own: where the caller keeps H when q is
 * its only module (the factor is then made in H's buffer, or H freed once
 * it is made: qz_engine.h_last), else NULL. */
static lb_status solve(qz_engine *e, const qz_module *q, const float *H,
                       float **H_own, const float *D, int64_t nsamp,
                       lb_gptq_factor *fac[2], int l) {
    if (!q || !q->quantize) return LB_OK;
    snprintf(e->stage, sizeof e->stage, "layer %d/%d: %s %s", l + 1,
             e->m->config.n_layers, e->proc->name,
             q->name + strlen("model.layers."));
    e->dxxt = D;
    e->h_last = H_own && *H_own == H ? H_own : NULL;
    lb_status s = qz_engine_quantize_module(e, q, H,
                                            &fac[q->desc_act ? 1 : 0], nsamp);
    e->h_last = NULL;
    e->dxxt = NULL;
    LB_TRY(s);
    return qz_engine_progress(e, 1);
}

/* One gated MLP (an expert or the shared expert) g/u/d on rows X [nr, dim]
 * in sequence segments seg: gate/up with H(X) (or Hg given: shared by all
 * experts, with its factors fg, and its cross statistics Dg), then down on
 * act(X Wg~^T) * (X Wu~^T). Xn (native rows of the same tokens, or NULL
 * without the native stream): gate/up get D(Xn, X) (or Dg), down gets
 * D(act(Xn Wg^T) * (Xn Wu^T), act(X Wg~^T) * (X Wu~^T)) with the float
 * gate/up in the native input. */
static lb_status mlp_block(qz_engine *e, int l, const qz_module *q[3],
                           const lb_tensor *W[3], const float *X,
                           const float *Xn, int64_t nr, const int64_t *seg,
                           const float *Hg, const float *Dg, int64_t nsamp_g,
                           lb_gptq_factor *fg[2]) {
    const lb_model_config *c = &e->m->config;
    const int64_t dim = c->hidden_size;
    const int64_t ff = W[0]->shape[0];
    const bool down_q = q[2] && q[2]->quantize;
    lb_pool *pool = lb_context_pool(e->ctx);
    lb_status s = LB_OK;
    float *H = NULL, *D = NULL, *gn = NULL;
    /* down's native input, with the float gate/up (before they change) */
    if (Xn && down_q) {
        float *un = lb_alloc((size_t)(nr * ff) * sizeof(float));
        gn = lb_alloc((size_t)(nr * ff) * sizeof(float));
        if (!gn || !un)
            s = lb_set_error(LB_ERR_NOMEM, "%s: out of memory for the native "
                             "inputs [%lld, %lld]", q[2]->name,
                             (long long)nr, (long long)ff);
        const double t0 = lb_time_s();
        if (s == LB_OK) s = lb_matmul(pool, W[0], Xn, gn, nr);
        if (s == LB_OK) s = lb_matmul(pool, W[1], Xn, un, nr);
        if (s == LB_OK) lb_glu_act_mul(c->hidden_act, gn, un, nr * ff);
        e->rep->forward_seconds += lb_time_s() - t0;
        lb_free(un);
    }
    lb_gptq_factor *own[2] = {NULL, NULL};
    if (s == LB_OK &&
        ((q[0] && q[0]->quantize) || (q[1] && q[1]->quantize))) {
        int64_t ns = nsamp_g;
        const float *Hu = Hg, *Du = Dg;
        lb_gptq_factor **f = fg;
        if (!Hg) {
            s = hessian(e, X, dim, seg, &H, &ns);
            if (s == LB_OK && Xn) s = cross(e, Xn, X, dim, seg, ns, &D);
            Hu = H;
            Du = D;
            f = own;
        }
        if (s == LB_OK) s = solve(e, q[0], Hu, NULL, Du, ns, f, l);
        if (s == LB_OK) s = solve(e, q[1], Hu, NULL, Du, ns, f, l);
        lb_free(H);
        lb_free(D);
        H = D = NULL;
        for (int i = 0; i < 2; i++) lb_gptq_factor_free(own[i]);
    }
    if (s != LB_OK || !down_q) {
        lb_free(gn);
        return s;
    }
    /* down's input with the (quantized) gate/up now in the model */
    float *g = lb_alloc((size_t)(nr * ff) * sizeof(float));
    float *u = lb_alloc((size_t)(nr * ff) * sizeof(float));
    if (!g || !u) s = lb_set_error(LB_ERR_NOMEM, "%s: out of memory for the "
                                   "inputs [%lld, %lld]", q[2]->name,
                                   (long long)nr, (long long)ff);
    const double t0 = lb_time_s();
    if (s == LB_OK) s = lb_matmul(pool, W[0], X, g, nr);
    if (s == LB_OK) s = lb_matmul(pool, W[1], X, u, nr);
    if (s == LB_OK) lb_glu_act_mul(c->hidden_act, g, u, nr * ff);
    e->rep->forward_seconds += lb_time_s() - t0;
    lb_free(u);
    int64_t ns = 0;
    if (s == LB_OK) s = hessian(e, g, ff, seg, &H, &ns);
    if (s == LB_OK && gn) s = cross(e, gn, g, ff, seg, ns, &D);
    lb_free(g);
    lb_free(gn);
    lb_gptq_factor *fd[2] = {NULL, NULL};
    if (s == LB_OK) s = solve(e, q[2], H, &H, D, ns, fd, l);
    for (int i = 0; i < 2; i++) lb_gptq_factor_free(fd[i]);
    lb_free(H);
    lb_free(D);
    return s;
}

lb_status qz_run_moe(qz_engine *e, int l, const qz_module *lm, int n) {
    const lb_model_config *c = &e->m->config;
    const lb_layer_weights *L = &e->m->layers[l];
    const int E = c->n_experts, K = c->n_experts_used;
    const int64_t dim = c->hidden_size, N = e->ns * e->T;
    bool any = false;
    for (int i = 0; i < n; i++)
        any |= lm[i].quantize && lm[i].which >= QZ_SHEXP;
    if (!any) return LB_OK;
    const bool routed = e->p->moe_coverage == LB_MOE_COVERAGE_ROUTED;
    const int64_t min_tok = e->p->moe_min_tokens > 0 ? e->p->moe_min_tokens
                                                     : 32;
    snprintf(e->stage, sizeof e->stage, "layer %d/%d: MoE inputs", l + 1,
             c->n_layers);
    bool want[QZ_IN_COUNT] = {false};
    float *Xc[QZ_IN_COUNT] = {NULL};
    want[QZ_IN_MLP] = true;
    LB_TRY(qz_engine_capture(e, l, want, Xc));
    float *X = Xc[QZ_IN_MLP];
    /* GPTAQ / QEP: the native block input of the same tokens */
    const float *Xn = e->nat ? e->Xn[QZ_IN_MLP] : NULL;
    lb_status s = LB_OK;
    if (e->nat && !Xn)
        s = lb_set_error(LB_ERR_INTERNAL, "layer %d: no native MoE input", l);
    float *R = lb_alloc((size_t)(N * E) * sizeof(float));
    float *wsel = lb_alloc((size_t)(N * K) * sizeof(float));
    float *prob = lb_alloc((size_t)E * sizeof(float));
    int *sel = lb_alloc((size_t)(N * K) * sizeof(int));
    int64_t *seg = lb_alloc((size_t)(e->ns + 1) * sizeof(int64_t));
    int64_t *seg_all = lb_alloc((size_t)(e->ns + 1) * sizeof(int64_t));
    float *Xe = routed ? lb_alloc((size_t)(N * dim) * sizeof(float)) : NULL;
    float *Xne = routed && Xn ? lb_alloc((size_t)(N * dim) * sizeof(float))
                              : NULL;
    float *Hall = NULL, *Dall = NULL;
    int64_t ns_all = 0;
    lb_gptq_factor *fall[2] = {NULL, NULL};
    if (s == LB_OK && (!R || !wsel || !prob || !sel || !seg || !seg_all ||
                       (routed && !Xe) || (routed && Xn && !Xne)))
        s = lb_set_error(LB_ERR_NOMEM, "layer %d: out of memory for the "
                         "routing of %lld tokens", l, (long long)N);
    /* the router, as the forward runs it */
    if (s == LB_OK)
        s = lb_matmul(lb_context_pool(e->ctx), &L->ffn_gate_inp, X, R, N);
    if (s == LB_OK) {
        for (int64_t t = 0; t < N; t++)
            lb_moe_route(R + (size_t)(t * E), E, K, c->norm_topk_prob,
                         sel + (size_t)(t * K), wsel + (size_t)(t * K), prob);
        for (int64_t i = 0; i <= e->ns; i++) seg_all[i] = i * e->T;
    }
    /* shared expert: every token */
    if (s == LB_OK && L->shexp[0].data) {
        const qz_module *q[3];
        const lb_tensor *W[3];
        for (int j = 0; j < 3; j++) {
            q[j] = find(lm, n, QZ_SHEXP + j);
            W[j] = &L->shexp[j];
        }
        s = mlp_block(e, l, q, W, X, Xn, N, seg_all, NULL, NULL, 0, NULL);
    }
    for (int x = 0; x < E && s == LB_OK; x++) {
        const qz_module *q[3];
        const lb_tensor *W[3];
        bool anyq = false;
        for (int j = 0; j < 3; j++) {
            q[j] = find(lm, n, QZ_EXP + 3 * x + j);
            W[j] = &L->exp[3 * x + j];
            anyq |= q[j] && q[j]->quantize;
        }
        if (!anyq) continue;
        if (!routed) {
            /* ALL: one Hessian of X for every expert's gate/up */
            if (!Hall && ((q[0] && q[0]->quantize) || (q[1] && q[1]->quantize))) {
                s = hessian(e, X, dim, seg_all, &Hall, &ns_all);
                if (s == LB_OK && Xn)
                    s = cross(e, Xn, X, dim, seg_all, ns_all, &Dall);
            }
            if (s == LB_OK)
                s = mlp_block(e, l, q, W, X, Xn, N, seg_all, Hall, Dall,
                              ns_all, fall);
            continue;
        }
        /* ROUTED: the rows of the tokens the router sends to expert x (on
         * the quantized path's X), and their native rows */
        int64_t nr = 0;
        for (int64_t i = 0; i < e->ns; i++) {
            seg[i] = nr;
            for (int64_t t = i * e->T; t < (i + 1) * e->T; t++)
                for (int k = 0; k < K; k++)
                    if (sel[t * K + k] == x) {
                        memcpy(Xe + (size_t)(nr * dim), X + (size_t)(t * dim),
                               (size_t)dim * sizeof(float));
                        if (Xne)
                            memcpy(Xne + (size_t)(nr * dim),
                                   Xn + (size_t)(t * dim),
                                   (size_t)dim * sizeof(float));
                        nr++;
                    }
        }
        seg[e->ns] = nr;
        if (nr < min_tok) {
            char note[128];
            snprintf(note, sizeof note, "routed coverage: %lld calibration "
                     "token%s < %lld: RTN", (long long)nr, nr == 1 ? "" : "s",
                     (long long)min_tok);
            lb_log(LB_LOG_WARN, "layer %d expert %d: %s", l, x, note);
            for (int j = 0; j < 3 && s == LB_OK; j++)
                if (q[j] && q[j]->quantize) {
                    s = qz_engine_quantize_rtn(e, q[j], note);
                    if (s == LB_OK) s = qz_engine_progress(e, 1);
                }
            continue;
        }
        s = mlp_block(e, l, q, W, Xe, Xne, nr, seg, NULL, NULL, 0, NULL);
        for (int j = 0; j < 3 && s == LB_OK; j++)
            if (q[j] && q[j]->quantize && !q[j]->note[0])
                snprintf(e->rep->modules[q[j] - e->mods].note,
                         sizeof e->rep->modules[0].note,
                         "routed coverage: %lld calibration tokens",
                         (long long)nr);
    }
    for (int i = 0; i < 2; i++) lb_gptq_factor_free(fall[i]);
    lb_free(Hall);
    lb_free(Dall);
    lb_free(Xne);
    lb_free(Xe);
    lb_free(seg_all);
    lb_free(seg);
    lb_free(sel);
    lb_free(prob);
    lb_free(wsel);
    lb_free(R);
    lb_free(X);
    return s;
}
