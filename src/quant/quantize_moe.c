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
 */
#include "quant/quantize_internal.h"
#include "lowbit/kernels.h"
#include "model/model_internal.h"
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>

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
    if (s == LB_OK) {
        *H = lb_alloc((size_t)(in * in) * sizeof(float));
        if (!*H) s = lb_set_error(LB_ERR_NOMEM, "quantize: out of memory for "
                                  "a Hessian [%lld, %lld]", (long long)in,
                                  (long long)in);
        else
            lb_gptq_hessian_get(h, *H);
    }
    *nsamp = lb_gptq_hessian_nsamples(h);
    lb_gptq_hessian_free(h);
    return s;
}

/* GPTQ of module q (NULL or not quantized: nothing) with H; *fac (one per
 * desc_act setting) is made on first use and shared with the next module
 * of the same input. */
static lb_status solve(qz_engine *e, const qz_module *q, const float *H,
                       int64_t nsamp, lb_gptq_factor *fac[2], int l) {
    if (!q || !q->quantize) return LB_OK;
    snprintf(e->stage, sizeof e->stage, "layer %d/%d: gptq %s", l + 1,
             e->m->config.n_layers, q->name + strlen("model.layers."));
    LB_TRY(qz_engine_quantize_module(e, q, H, &fac[q->desc_act ? 1 : 0],
                                     nsamp));
    return qz_engine_progress(e, 1);
}

/* One gated MLP (an expert or the shared expert) g/u/d on rows X [nr, dim]
 * in sequence segments seg: gate/up with H(X) (or Hg given: shared by all
 * experts, with its factors fg), then down on act(X Wg~^T) * (X Wu~^T). */
static lb_status mlp_block(qz_engine *e, int l, const qz_module *q[3],
                           const lb_tensor *W[3], const float *X, int64_t nr,
                           const int64_t *seg, const float *Hg,
                           int64_t nsamp_g, lb_gptq_factor *fg[2]) {
    const lb_model_config *c = &e->m->config;
    const int64_t dim = c->hidden_size;
    lb_status s = LB_OK;
    float *H = NULL;
    lb_gptq_factor *own[2] = {NULL, NULL};
    if ((q[0] && q[0]->quantize) || (q[1] && q[1]->quantize)) {
        int64_t ns = nsamp_g;
        const float *Hu = Hg;
        lb_gptq_factor **f = fg;
        if (!Hg) {
            s = hessian(e, X, dim, seg, &H, &ns);
            Hu = H;
            f = own;
        }
        if (s == LB_OK) s = solve(e, q[0], Hu, ns, f, l);
        if (s == LB_OK) s = solve(e, q[1], Hu, ns, f, l);
        lb_free(H);
        H = NULL;
        for (int i = 0; i < 2; i++) lb_gptq_factor_free(own[i]);
    }
    if (s != LB_OK || !q[2] || !q[2]->quantize) return s;
    /* down's input with the (quantized) gate/up now in the model */
    const int64_t ff = W[0]->shape[0];
    lb_pool *pool = lb_context_pool(e->ctx);
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
    lb_free(g);
    lb_gptq_factor *fd[2] = {NULL, NULL};
    if (s == LB_OK) s = solve(e, q[2], H, ns, fd, l);
    for (int i = 0; i < 2; i++) lb_gptq_factor_free(fd[i]);
    lb_free(H);
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
    lb_status s = LB_OK;
    float *R = lb_alloc((size_t)(N * E) * sizeof(float));
    float *wsel = lb_alloc((size_t)(N * K) * sizeof(float));
    float *prob = lb_alloc((size_t)E * sizeof(float));
    int *sel = lb_alloc((size_t)(N * K) * sizeof(int));
    int64_t *seg = lb_alloc((size_t)(e->ns + 1) * sizeof(int64_t));
    int64_t *seg_all = lb_alloc((size_t)(e->ns + 1) * sizeof(int64_t));
    float *Xe = routed ? lb_alloc((size_t)(N * dim) * sizeof(float)) : NULL;
    float *Hall = NULL;
    int64_t ns_all = 0;
    lb_gptq_factor *fall[2] = {NULL, NULL};
    if (!R || !wsel || !prob || !sel || !seg || !seg_all || (routed && !Xe))
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
        s = mlp_block(e, l, q, W, X, N, seg_all, NULL, 0, NULL);
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
            if (!Hall && ((q[0] && q[0]->quantize) || (q[1] && q[1]->quantize)))
                s = hessian(e, X, dim, seg_all, &Hall, &ns_all);
            if (s == LB_OK)
                s = mlp_block(e, l, q, W, X, N, seg_all, Hall, ns_all, fall);
            continue;
        }
        /* ROUTED: the rows of the tokens the router sends to expert x */
        int64_t nr = 0;
        for (int64_t i = 0; i < e->ns; i++) {
            seg[i] = nr;
            for (int64_t t = i * e->T; t < (i + 1) * e->T; t++)
                for (int k = 0; k < K; k++)
                    if (sel[t * K + k] == x) {
                        memcpy(Xe + (size_t)(nr * dim), X + (size_t)(t * dim),
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
        s = mlp_block(e, l, q, W, Xe, nr, seg, NULL, 0, NULL);
        for (int j = 0; j < 3 && s == LB_OK; j++)
            if (q[j] && q[j]->quantize && !q[j]->note[0])
                snprintf(e->rep->modules[q[j] - e->mods].note,
                         sizeof e->rep->modules[0].note,
                         "routed coverage: %lld calibration tokens",
                         (long long)nr);
    }
    for (int i = 0; i < 2; i++) lb_gptq_factor_free(fall[i]);
    lb_free(Hall);
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
