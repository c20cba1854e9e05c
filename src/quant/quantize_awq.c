/*
 * The AWQ processors of the layer pipeline (quant/quantize_internal.h):
 * "awq" (AutoAWQ's AwqQuantizer.quantize per decoder layer) and
 * "awq+gptq" (the same scaling, then GPTQ on the scaled weights).
 *
 * layer_begin(l), following AutoAWQ (casper-hansen/AutoAWQ
 * awq/quantize/quantizer.py):
 *   1. capture: every calibration sequence through layer l; the inputs of
 *      q/k/v, o, gate/up and down are kept (X_g [ns * T, width]);
 *   2. for each scaling group of the model definition (qz_arch_get) whose
 *      linears (and previous linear) are all quantized: the scale search
 *      (qz_awq_search_scale) on the weights and inputs as captured — all
 *      searches first, as AutoAWQ's scales_list;
 *   3. apply: the group's columns * s, the previous RMSNorm weight / s or
 *      previous linear's rows (and bias) / s, the captured inputs / s;
 *   4. clip search ("awq" only, unless awq_no_clip; not for q_proj and
 *      k_proj, AutoAWQ's avoid_clipping) on the scaled weights and inputs;
 *   5. the transformed weights are swapped into the model and the changed
 *      dense tensors handed to the sink (they replace the source's in the
 *      checkpoint and are restored on --resume).
 * Then the looper solves each module: "awq" with AutoAWQ's grid on the
 * transformed weights, "awq+gptq" with GPTQ on Hessians captured from the
 * scaled layer. The next layer's inputs are the quantized layer's outputs
 * (the looper's replay; AutoAWQ feeds the unquantized layer's outputs).
 *
 * Sparse coverage: with fewer than awq_min_tokens (default 64) calibration
 * tokens the statistics are too thin; the layer's modules skip the scale
 * and clip search, are quantized plainly, and their reports say so.
 */
#include "quant/quantize_internal.h"
#include "quant/awq_internal.h"
#include "model/model_internal.h"
#include "core/internal.h"
#include "quant/gptq_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define AWQ_MIN_TOKENS 64

/* Progress units of layer_begin: the capture forwards, one per scaling
 * group (searched or skipped), one per linear (clipped or not). */
static uint64_t awq_units(const qz_engine *e, int layer) {
    (void)layer;
    return (uint64_t)e->ns + (uint64_t)e->arch.n_scale + LB_LINEAR_COUNT;
}

static void note(lb_quantize_module_report *r, const char *text) {
    if (!r->note[0]) snprintf(r->note, sizeof r->note, "%s", text);
}

static lb_status awq_layer(qz_engine *e, int l, bool clip) {
    const qz_module *lm = e->mods + (size_t)l * LB_LINEAR_COUNT;
    lb_quantize_module_report *reps =
        e->rep->modules + (size_t)l * LB_LINEAR_COUNT;
    const qz_arch *a = &e->arch;
    const int64_t N = e->ns * e->T;
    const int64_t min_tok =
        e->p->awq_min_tokens > 0 ? e->p->awq_min_tokens : AWQ_MIN_TOKENS;
    if (N < min_tok) {
        char msg[128];
        snprintf(msg, sizeof msg, "sparse calibration coverage (%lld tokens "
                 "< %lld): quantized without AWQ scaling or clipping",
                 (long long)N, (long long)min_tok);
        for (int i = 0; i < LB_LINEAR_COUNT; i++)
            if (lm[i].quantize) {
                reps[i].awq_plain = true;
                note(&reps[i], msg);
            }
        if (l == 0)
            lb_log(LB_LOG_WARN, "awq: %s (every layer)", msg);
        return qz_engine_progress(e, awq_units(e, l));
    }
    snprintf(e->stage, sizeof e->stage, "layer %d/%d: awq inputs", l + 1,
             e->m->config.n_layers);
    bool want[QZ_IN_COUNT] = {false};
    for (int i = 0; i < LB_LINEAR_COUNT; i++)
        if (lm[i].quantize) want[a->input_of[i]] = true;
    float *X[QZ_IN_COUNT] = {NULL};
    LB_TRY(qz_engine_capture(e, l, want, X));
    float *W[LB_LINEAR_COUNT] = {NULL};
    float *S[4] = {NULL};
    lb_status s = LB_OK;
    for (int i = 0; i < LB_LINEAR_COUNT && s == LB_OK; i++)
        if (lm[i].quantize) s = qz_engine_weight_f32(e, &lm[i], &W[i]);
    /* 2. scale search, every group on the weights as they are */
    const double t0 = lb_time_s();
    for (int k = 0; k < a->n_scale && s == LB_OK; k++) {
        const qz_scale_group *g = &a->scale[k];
        bool ok = g->prev_linear < 0 || lm[g->prev_linear].quantize;
        for (int j = 0; j < g->n_members; j++)
            ok = ok && lm[g->members[j]].quantize;
        const int64_t in = lm[g->members[0]].in;
        if (g->prev_linear >= 0 && ok && lm[g->prev_linear].out != in)
            ok = false;
        if (!ok) {
            lb_log(LB_LOG_INFO, "layer %d: AWQ scaling group %s skipped (a "
                   "module of it is not quantized)", l, g->name);
            s = qz_engine_progress(e, 1);
            continue;
        }
        snprintf(e->stage, sizeof e->stage, "layer %d/%d: awq scales %s",
                 l + 1, e->m->config.n_layers, g->name);
        qz_awq_linear lins[3];
        for (int j = 0; j < g->n_members; j++) {
            const qz_module *q = &lm[g->members[j]];
            lins[j] = (qz_awq_linear){W[q->which], q->out, q->bits,
                                      q->group_size, q->sym};
        }
        S[k] = malloc((size_t)in * sizeof(float));
        if (!S[k]) {
            s = lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
            break;
        }
        int best = -1;
        s = qz_awq_search_scale(X[g->input], N, in, lins, g->n_members,
                                QZ_AWQ_N_GRID, S[k], NULL, &best);
        if (s != LB_OK) {
            s = lb_error_context(s, "layer %d, %s", l, g->name);
            break;
        }
        for (int j = 0; j < g->n_members; j++)
            reps[g->members[j]].awq_ratio = (double)best / QZ_AWQ_N_GRID;
        s = qz_engine_progress(e, 1);
    }
    /* 3. apply */
    for (int k = 0; k < a->n_scale && s == LB_OK; k++) {
        if (!S[k]) continue;
        const qz_scale_group *g = &a->scale[k];
        const float *sc = S[k];
        const int64_t in = lm[g->members[0]].in;
        for (int j = 0; j < g->n_members; j++) {
            const qz_module *q = &lm[g->members[j]];
            for (int64_t r = 0; r < q->out; r++)
                for (int64_t c = 0; c < in; c++) W[q->which][r * in + c] *= sc[c];
        }
        if (g->prev_norm >= 0) {
            const int which = g->prev_norm == QZ_NORM_ATTN ? QZ_DENSE_ATTN_NORM
                                                           : QZ_DENSE_FFN_NORM;
            const lb_layer_weights *L = &e->m->layers[l];
            const float *src = which == QZ_DENSE_ATTN_NORM ? L->attn_norm.data
                                                           : L->ffn_norm.data;
            float *nb = lb_alloc((size_t)in * sizeof(float));
            if (!nb) {
                s = lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
                break;
            }
            for (int64_t c = 0; c < in; c++) nb[c] = src[c] / sc[c];
            s = qz_engine_set_dense(e, l, which, nb, in, false);
        } else {
            const qz_module *pq = &lm[g->prev_linear];
            float *Wp = W[pq->which];
            for (int64_t r = 0; r < pq->out; r++)
                for (int64_t c = 0; c < pq->in; c++) Wp[r * pq->in + c] /= sc[r];
            const lb_tensor *bv = &e->m->layers[l].bv;
            if (pq->which == LB_LINEAR_V && bv->data) {
                float *nb = lb_alloc((size_t)in * sizeof(float));
                if (!nb) {
                    s = lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
                    break;
                }
                const float *src = bv->data;
                for (int64_t c = 0; c < in; c++) nb[c] = src[c] / sc[c];
                s = qz_engine_set_dense(e, l, QZ_DENSE_V_BIAS, nb, in, false);
            }
        }
        float *x = X[g->input];
        for (int64_t t = 0; t < N && x; t++)
            for (int64_t c = 0; c < in; c++) x[t * in + c] /= sc[c];
    }
    /* 4. clip */
    for (int i = 0; i < LB_LINEAR_COUNT && s == LB_OK; i++) {
        if (!clip || !lm[i].quantize || i == LB_LINEAR_Q ||
            i == LB_LINEAR_K) {
            s = qz_engine_progress(e, 1);
            continue;
        }
        snprintf(e->stage, sizeof e->stage, "layer %d/%d: awq clip %s", l + 1,
                 e->m->config.n_layers, lm[i].name);
        int64_t n = 0;
        s = qz_awq_search_clip(X[a->input_of[i]], N, W[i], lm[i].out,
                               lm[i].in, lm[i].bits, lm[i].group_size,
                               lm[i].sym, e->ctx ? lb_context_pool(e->ctx) : NULL,
                               &n);
        reps[i].awq_clipped = n;
        if (s == LB_OK) s = qz_engine_progress(e, 1);
    }
    e->rep->solve_seconds += lb_time_s() - t0;
    /* 5. the transformed weights go into the model */
    for (int i = 0; i < LB_LINEAR_COUNT; i++) {
        if (W[i] && s == LB_OK) s = qz_engine_swap_in(e, &lm[i], W[i]);
        else lb_free(W[i]);
        W[i] = NULL;
    }
    for (int k = 0; k < 4; k++) free(S[k]);
    for (int g = 0; g < QZ_IN_COUNT; g++) lb_free(X[g]);
    return s;
}

static lb_status awq_begin(qz_engine *e, int l) { return awq_layer(e, l, !e->p->awq_no_clip); }
static lb_status awq_gptq_begin(qz_engine *e, int l) { return awq_layer(e, l, false); }

static lb_status awq_solve(qz_engine *e, const qz_module *q, const float *W,
                           const float *H, lb_gptq_factor **fac,
                           lb_gptq_result *res) {
    (void)e;
    (void)H;
    (void)fac;
    LB_TRY(lb_gptq_check_finite(W, q->out, q->in, q->in, "awq", "W"));
    return qz_awq_quantize(W, q->out, q->in, q->bits, q->group_size, q->sym,
                           res);
}

const qz_processor qz_proc_awq = {"awq", QZ_NEED_CALIB, awq_begin, awq_units,
                                  awq_solve};
const qz_processor qz_proc_awq_gptq = {
    "awq+gptq", QZ_NEED_CALIB | QZ_NEED_HESSIAN, awq_gptq_begin, awq_units,
    qz_solve_gptq};
