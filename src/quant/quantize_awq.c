/*
 * The AWQ processors of the layer pipeline (quant/quantize_internal.h):
 * "awq" (AutoAWQ's AwqQuantizer.quantize per decoder layer) and
 * "awq+gptq" (the same scaling, then GPTQ on the scaled weights).
 *
 * layer_begin(l), following AutoAWQ (casper-hansen/AutoAWQ
 * awq/quantize/quantizer.py):
 *   1. capture: every calibration sequence through layer l; the inputs of
 *      q/k/v, o, the MLP (a MoE layer: the block's input) and down are
 *      kept (X_g [ns * T, width]);
 *   2. for each scaling group of the layer (below) whose linears (and
 *      previous linear) are all quantized: the scale search
 *      (qz_awq_search_scale) on the weights and inputs as captured — all
 *      searches first, as AutoAWQ's scales_list;
 *   3. apply: the group's columns * s, the previous RMSNorm weight / s
 *      (Gemma's (1 + w) as held: (1 + w) / s, written back as
 *      (1 + w) / s - 1, AutoAWQ scale_ln_fcs) or the previous linear's
 *      scaled rows (and v bias) / s, the captured inputs / s; in a MoE
 *      layer also the router's columns * s (and Qwen2-MoE's
 *      shared_expert_gate * s), so routing is unchanged;
 *   4. clip search ("awq" only, unless awq_no_clip; not for q_proj, k_proj
 *      and Phi-3's fused qkv_proj, AutoAWQ's avoid_clipping) on the
 *      scaled weights and inputs;
 *   5. the transformed weights are swapped into the model and the changed
 *      dense tensors handed to the sink (they replace the source's in the
 *      checkpoint and are restored on --resume).
 *
 * Scaling groups (AutoAWQ get_layers_for_scaling; awq/models/llama.py,
 * mixtral.py, qwen3_moe.py, deepseek_v2.py for a shared expert, gemma2.py,
 * phi3.py):
 *   input_layernorm -> q,k,v (Phi-3: qkv_proj);
 *   v_proj -> o_proj (Phi-3: the v rows of qkv_proj, AutoAWQ's
 *     scale_fc_fc on the last rows) only without grouped-query attention;
 *   post_attention_layernorm (Gemma: pre_feedforward_layernorm) ->
 *     gate,up (Phi-3: gate_up_proj; MoE: every expert's gate/up and the
 *     shared expert's, one scale vector);
 *   up_proj -> down_proj (Phi-3: the up half of gate_up_proj; MoE: each
 *     expert's up -> down, the shared expert's up -> down).
 * MoE expert statistics follow --moe-coverage: ALL, every expert's loss
 * (and down input, clip) over every calibration token; ROUTED, over the
 * tokens the router sends it, and an expert with fewer than
 * moe_min_tokens (default 32) gets no down scale and no clip search (its
 * gate/up still carry the layer's shared scales; reported per expert).
 *
 * Then the looper solves each module: "awq" with AutoAWQ's grid on the
 * transformed weights, "awq+gptq" with GPTQ on Hessians captured from the
 * scaled layer (MoE experts: quantize_moe.c on the scaled experts). The
 * next layer's inputs are the quantized layer's outputs (the looper's
 * replay; AutoAWQ feeds the unquantized layer's outputs).
 *
 * Sparse coverage: with fewer than awq_min_tokens (default 64) calibration
 * tokens the statistics are too thin; the layer's modules skip the scale
 * and clip search, are quantized plainly, and their reports say so.
 */
#include "quant/quantize_internal.h"
#include "quant/awq_internal.h"
#include "lowbit/kernels.h"
#include "lowbit/quants.h"
#include "model/model_internal.h"
#include "core/internal.h"
#include "quant/gptq_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define AWQ_MIN_TOKENS 64
#define AWQ_MOE_MIN_TOKENS 32

qz_awq_fold_test_fn qz_awq_fold_test = NULL;
void *qz_awq_fold_test_user = NULL;

/* A scaling group of one layer; modules are indices into the layer's
 * module list. */
typedef struct agrp {
    char name[96];
    int prev_norm;     /* QZ_DENSE_ATTN_NORM / QZ_DENSE_FFN_NORM, or -1     */
    int prev;          /* previous linear, or -1                           */
    int64_t prev_row0; /* its first scaled output row                      */
    int *mem;          /* members (malloc'd)                               */
    int n_mem;
    int input;         /* QZ_IN_* of the members                           */
    int expert;        /* up -> down of expert e (>= 0), of the shared
                          expert (-2); -1 otherwise                        */
    bool moe_in;       /* the MoE block's input: router scaled too         */
    float *s;          /* the scales [in] to apply, or NULL                */
} agrp;

static int find(const qz_module *lm, int n, int which) {
    for (int i = 0; i < n; i++)
        if (lm[i].which == which) return i;
    return -1;
}

static bool is_moe(const qz_engine *e, int l) {
    return e->m->config.n_experts > 0 && e->m->layers[l].exp != NULL;
}

/* The QZ_IN_* a module reads (experts: the MoE block input; their down
 * inputs are computed from it). */
static int input_of(int which, bool moe) {
    if (which >= QZ_SHEXP) return QZ_IN_MLP;
    switch (which) {
    case LB_LINEAR_Q:
    case LB_LINEAR_K:
    case LB_LINEAR_V:
    case QZ_QKV: return QZ_IN_ATTN;
    case LB_LINEAR_O: return QZ_IN_O;
    case LB_LINEAR_DOWN: return moe ? QZ_IN_MLP : QZ_IN_DOWN;
    default: return QZ_IN_MLP;
    }
}

static void groups_free(agrp *g, int n) {
    for (int i = 0; i < n; i++) {
        free(g[i].mem);
        free(g[i].s);
    }
    free(g);
}

static bool add(agrp *G, int *ng, const char *name, int prev_norm, int prev,
                int64_t row0, const int *mem, int n_mem, int input,
                int expert, bool moe_in) {
    for (int j = 0; j < n_mem; j++)
        if (mem[j] < 0) return true; /* a member the plan lacks: no group */
    if (prev_norm < 0 && prev < 0) return true;
    agrp *g = &G[(*ng)++];
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "%s", name);
    g->prev_norm = prev_norm;
    g->prev = prev;
    g->prev_row0 = row0;
    g->input = input;
    g->expert = expert;
    g->moe_in = moe_in;
    g->n_mem = n_mem;
    g->mem = malloc((size_t)n_mem * sizeof *g->mem);
    if (!g->mem) return false;
    memcpy(g->mem, mem, (size_t)n_mem * sizeof *mem);
    return true;
}

/* The scaling groups of layer l (see the header comment); *G malloc'd. */
static lb_status build_groups(const qz_engine *e, int l, agrp **G_out,
                              int *n_out) {
    const lb_model_config *c = &e->m->config;
    const qz_module *lm = e->mods + e->lfirst[l];
    const int n = e->lcount[l];
    const bool moe = is_moe(e, l);
    const int E = moe ? c->n_experts : 0;
    const bool shexp = moe && e->m->layers[l].shexp[0].data;
    *G_out = NULL;
    *n_out = 0;
    agrp *G = calloc((size_t)(E + 6), sizeof *G);
    int *mem = malloc((size_t)(2 * E + 4) * sizeof *mem);
    if (!G || !mem) {
        free(G);
        free(mem);
        return lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
    }
    int ng = 0;
    bool ok = true;
    const int iqkv = find(lm, n, QZ_QKV);
    if (iqkv >= 0) {
        ok = ok && add(G, &ng, "input_layernorm -> qkv_proj",
                       QZ_DENSE_ATTN_NORM, -1, 0, &iqkv, 1, QZ_IN_ATTN, -1,
                       false);
    } else {
        const int m[3] = {find(lm, n, LB_LINEAR_Q), find(lm, n, LB_LINEAR_K),
                          find(lm, n, LB_LINEAR_V)};
        ok = ok && add(G, &ng, "input_layernorm -> q_proj,k_proj,v_proj",
                       QZ_DENSE_ATTN_NORM, -1, 0, m, 3, QZ_IN_ATTN, -1, false);
    }
    /* v -> o only when v's output is o's input channel for channel
     * (AutoAWQ: v_proj.weight.shape == o_proj.weight.shape; its fused
     * Phi-3 qkv_proj -> o_proj scales the last rows, the v rows, which are
     * o's input only without grouped-query attention) */
    const int io = find(lm, n, LB_LINEAR_O);
    if (c->n_kv_heads == c->n_heads && io >= 0) {
        if (iqkv >= 0)
            ok = ok && add(G, &ng, "qkv_proj (v rows) -> o_proj", -1, iqkv,
                           lm[iqkv].out - lm[io].in, &io, 1, QZ_IN_O, -1,
                           false);
        else
            ok = ok && add(G, &ng, "v_proj -> o_proj", -1,
                           find(lm, n, LB_LINEAR_V), 0, &io, 1, QZ_IN_O, -1,
                           false);
    }
    const char *ffn_norm = c->post_norms ? "pre_feedforward_layernorm"
                                         : "post_attention_layernorm";
    char nm[96];
    if (moe) {
        int k = 0;
        for (int x = 0; x < E; x++) {
            mem[k++] = find(lm, n, QZ_EXP + 3 * x);
            mem[k++] = find(lm, n, QZ_EXP + 3 * x + 1);
        }
        if (shexp) {
            mem[k++] = find(lm, n, QZ_SHEXP);
            mem[k++] = find(lm, n, QZ_SHEXP + 1);
        }
        snprintf(nm, sizeof nm, "%s -> experts' gate_proj,up_proj%s (+ router)",
                 ffn_norm, shexp ? ", shared_expert" : "");
        ok = ok && add(G, &ng, nm, QZ_DENSE_FFN_NORM, -1, 0, mem, k,
                       QZ_IN_MLP, -1, true);
        for (int x = 0; x < E && ok; x++) {
            const int d = find(lm, n, QZ_EXP + 3 * x + 2);
            snprintf(nm, sizeof nm, "experts.%d.up_proj -> down_proj", x);
            ok = add(G, &ng, nm, -1, find(lm, n, QZ_EXP + 3 * x + 1), 0, &d,
                     1, QZ_IN_MLP, x, false);
        }
        if (shexp && ok) {
            const int d = find(lm, n, QZ_SHEXP + 2);
            ok = add(G, &ng, "shared_expert.up_proj -> down_proj", -1,
                     find(lm, n, QZ_SHEXP + 1), 0, &d, 1, QZ_IN_MLP, -2,
                     false);
        }
    } else {
        const int igu = find(lm, n, QZ_GATE_UP), id = find(lm, n, LB_LINEAR_DOWN);
        if (igu >= 0) {
            snprintf(nm, sizeof nm, "%s -> gate_up_proj", ffn_norm);
            ok = ok && add(G, &ng, nm, QZ_DENSE_FFN_NORM, -1, 0, &igu, 1,
                           QZ_IN_MLP, -1, false);
            if (id >= 0)
                ok = ok && add(G, &ng, "gate_up_proj (up rows) -> down_proj",
                               -1, igu, lm[igu].out - lm[id].in, &id, 1,
                               QZ_IN_DOWN, -1, false);
        } else {
            const int m[2] = {find(lm, n, LB_LINEAR_GATE),
                              find(lm, n, LB_LINEAR_UP)};
            snprintf(nm, sizeof nm, "%s -> gate_proj,up_proj", ffn_norm);
            ok = ok && add(G, &ng, nm, QZ_DENSE_FFN_NORM, -1, 0, m, 2,
                           QZ_IN_MLP, -1, false);
            ok = ok && add(G, &ng, "up_proj -> down_proj", -1, m[1], 0, &id,
                           1, QZ_IN_DOWN, -1, false);
        }
    }
    free(mem);
    if (!ok) {
        groups_free(G, ng);
        return lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
    }
    *G_out = G;
    *n_out = ng;
    return LB_OK;
}

/* Progress units of layer_begin: the capture forwards, one per scaling
 * group (searched or skipped), one per module (clipped or not). */
static uint64_t awq_units(const qz_engine *e, int layer) {
    const lb_model_config *c = &e->m->config;
    const qz_module *lm = e->mods + e->lfirst[layer];
    const int n = e->lcount[layer];
    uint64_t g = 2; /* attention input, MLP input */
    if (c->n_kv_heads == c->n_heads && find(lm, n, LB_LINEAR_O) >= 0) g++;
    if (is_moe(e, layer))
        g += (uint64_t)c->n_experts +
             (e->m->layers[layer].shexp[0].data ? 1u : 0u);
    else
        g += find(lm, n, LB_LINEAR_DOWN) >= 0;
    return (uint64_t)e->ns + g + (uint64_t)n;
}

static void note(lb_quantize_module_report *r, const char *text) {
    if (!r->note[0]) snprintf(r->note, sizeof r->note, "%s", text);
}

/* The router as f32 [E, dim] (lb_alloc'd). */
static lb_status router_f32(const lb_tensor *t, float **out) {
    *out = NULL;
    const int64_t rows = t->shape[0], cols = t->shape[1];
    size_t rb;
    if (!lb_row_size(t->type, cols, &rb))
        return lb_set_error(LB_ERR_OVERFLOW, "router: size overflows");
    float *W = lb_alloc((size_t)(rows * cols) * sizeof(float));
    if (!W) return lb_set_error(LB_ERR_NOMEM, "awq: out of memory (router)");
    for (int64_t r = 0; r < rows; r++) {
        lb_status s = lb_tensor_dequant_row(t, r, W + r * cols);
        if (s != LB_OK) {
            lb_free(W);
            return lb_error_context(s, "router");
        }
    }
    *out = W;
    return LB_OK;
}

/* Per-layer state of the MoE block's statistics. */
typedef struct moe_stat {
    int E, K;
    bool routed;
    int64_t min_tok;
    int64_t *cnt, *off, *rows; /* expert x: rows[off[x] .. off[x] + cnt[x]) */
    float *Xe;                 /* gather scratch [N, dim]                  */
    float *g, *u;              /* [N, ff] scratch                          */
} moe_stat;

static void moe_stat_free(moe_stat *m) {
    free(m->cnt);
    free(m->off);
    free(m->rows);
    lb_free(m->Xe);
    lb_free(m->g);
    lb_free(m->u);
}

/* Routing of the captured MoE input X [N, dim] as the forward runs it. */
static lb_status moe_stat_make(qz_engine *e, int l, const float *X,
                               moe_stat *ms) {
    const lb_model_config *c = &e->m->config;
    const int64_t N = e->ns * e->T, dim = c->hidden_size;
    const int E = c->n_experts, K = c->n_experts_used;
    int64_t ff = LB_MAX((int64_t)c->moe_ff, (int64_t)c->shared_ff);
    memset(ms, 0, sizeof *ms);
    ms->E = E;
    ms->K = K;
    ms->routed = e->p->moe_coverage == LB_MOE_COVERAGE_ROUTED;
    ms->min_tok = e->p->moe_min_tokens > 0 ? e->p->moe_min_tokens
                                           : AWQ_MOE_MIN_TOKENS;
    ms->cnt = calloc((size_t)E, sizeof *ms->cnt);
    ms->off = calloc((size_t)E + 1, sizeof *ms->off);
    ms->rows = malloc((size_t)(N * K) * sizeof *ms->rows);
    ms->Xe = lb_alloc((size_t)(N * dim) * sizeof(float));
    ms->g = lb_alloc((size_t)(N * ff) * sizeof(float));
    ms->u = lb_alloc((size_t)(N * ff) * sizeof(float));
    float *R = lb_alloc((size_t)(N * E) * sizeof(float));
    int *sel = malloc((size_t)(N * K) * sizeof *sel);
    float *w = malloc((size_t)K * sizeof *w), *prob = malloc((size_t)E * sizeof *prob);
    lb_status s = LB_OK;
    if (!ms->cnt || !ms->off || !ms->rows || !ms->Xe || !ms->g || !ms->u ||
        !R || !sel || !w || !prob)
        s = lb_set_error(LB_ERR_NOMEM, "layer %d: out of memory for the "
                         "routing of %lld tokens", l, (long long)N);
    if (s == LB_OK)
        s = lb_matmul(lb_context_pool(e->ctx), &e->m->layers[l].ffn_gate_inp,
                      X, R, N);
    if (s == LB_OK) {
        for (int64_t t = 0; t < N; t++) {
            lb_moe_route(R + (size_t)(t * E), E, K, c->norm_topk_prob,
                         sel + (size_t)(t * K), w, prob);
            for (int k = 0; k < K; k++) ms->cnt[sel[t * K + k]]++;
        }
        for (int x = 0; x < E; x++) ms->off[x + 1] = ms->off[x] + ms->cnt[x];
        int64_t *fill = calloc((size_t)E, sizeof *fill);
        if (!fill) s = lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
        for (int64_t t = 0; t < N && fill; t++)
            for (int k = 0; k < K; k++) {
                const int x = sel[t * K + k];
                ms->rows[ms->off[x] + fill[x]++] = t;
            }
        free(fill);
    }
    lb_free(R);
    free(sel);
    free(w);
    free(prob);
    if (s != LB_OK) moe_stat_free(ms);
    return s;
}

/* Rows of expert x (-2: the shared expert, every token): *rows NULL when
 * every token counts (coverage ALL, shared expert). */
static void expert_rows(const moe_stat *ms, int x, int64_t N,
                        const int64_t **rows, int64_t *nr) {
    if (!ms->routed || x < 0) {
        *rows = NULL;
        *nr = N;
        return;
    }
    *rows = ms->rows + ms->off[x];
    *nr = ms->cnt[x];
}

static bool starved(const moe_stat *ms, int x) {
    return ms->routed && x >= 0 && ms->cnt[x] < ms->min_tok;
}

/* The expert's input rows into ms->Xe (or X itself when every token). */
static const float *expert_x(moe_stat *ms, const float *X, int64_t dim,
                             const int64_t *rows, int64_t nr) {
    if (!rows) return X;
    for (int64_t i = 0; i < nr; i++)
        memcpy(ms->Xe + (size_t)(i * dim), X + (size_t)(rows[i] * dim),
               (size_t)dim * sizeof(float));
    return ms->Xe;
}

/* down's input act(Xx Wg^T) * (Xx Wu^T) [nr, ff] into ms->g. */
static void down_input(const lb_model_config *c, moe_stat *ms, const float *Xx,
                       int64_t nr, int64_t dim, const float *Wg,
                       const float *Wu, int64_t ff) {
    if (nr <= 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)ff,
                (int)dim, 1.0f, Xx, (int)dim, Wg, (int)dim, 0.0f, ms->g,
                (int)ff);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)ff,
                (int)dim, 1.0f, Xx, (int)dim, Wu, (int)dim, 0.0f, ms->u,
                (int)ff);
    lb_glu_act_mul(c->hidden_act, ms->g, ms->u, nr * ff);
}

/* Module indices of expert x's (or the shared expert's, x = -2)
 * gate/up/down. */
static void expert_mods(const qz_module *lm, int n, int x, int m[3]) {
    const int base = x >= 0 ? QZ_EXP + 3 * x : QZ_SHEXP;
    for (int k = 0; k < 3; k++) m[k] = find(lm, n, base + k);
}

/* Which expert (x >= 0), shared expert (-2) or none (-1) module q is of. */
static int expert_of(const qz_module *q) {
    if (q->which >= QZ_EXP) return (q->which - QZ_EXP) / 3;
    if (q->which >= QZ_SHEXP) return -2;
    return -1;
}

static lb_status awq_layer(qz_engine *e, int l, bool clip) {
    const lb_model_config *c = &e->m->config;
    const qz_module *lm = e->mods + e->lfirst[l];
    const int n = e->lcount[l];
    lb_quantize_module_report *reps = e->rep->modules + e->lfirst[l];
    const bool test = qz_awq_fold_test != NULL;
    const bool moe = is_moe(e, l);
    const int64_t N = e->ns * e->T, dim = c->hidden_size;
    const int64_t min_tok =
        e->p->awq_min_tokens > 0 ? e->p->awq_min_tokens : AWQ_MIN_TOKENS;
    if (test) clip = false;
    if (N < min_tok && !test) {
        char msg[128];
        snprintf(msg, sizeof msg, "sparse calibration coverage (%lld tokens "
                 "< %lld): quantized without AWQ scaling or clipping",
                 (long long)N, (long long)min_tok);
        for (int i = 0; i < n; i++)
            if (lm[i].quantize) {
                reps[i].awq_plain = true;
                note(&reps[i], msg);
            }
        if (l == 0)
            lb_log(LB_LOG_WARN, "awq: %s (every layer)", msg);
        return qz_engine_progress(e, awq_units(e, l));
    }
    agrp *G = NULL;
    int ng = 0;
    LB_TRY(build_groups(e, l, &G, &ng));
    /* the modules whose weights are transformed here */
    bool *use = calloc((size_t)n, sizeof *use);
    float **W = calloc((size_t)n, sizeof *W);
    float *X[QZ_IN_COUNT] = {NULL};
    float *Wr = NULL, *Wsg = NULL;
    moe_stat ms;
    memset(&ms, 0, sizeof ms);
    lb_status s = LB_OK;
    if (!use || !W) s = lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
    bool want[QZ_IN_COUNT] = {false};
    for (int i = 0; i < n && s == LB_OK; i++) {
        use[i] = lm[i].quantize || test;
        if (use[i]) want[input_of(lm[i].which, moe)] = true;
    }
    snprintf(e->stage, sizeof e->stage, "layer %d/%d: awq inputs", l + 1,
             c->n_layers);
    if (s == LB_OK) s = qz_engine_capture(e, l, want, X);
    for (int i = 0; i < n && s == LB_OK; i++)
        if (use[i]) s = qz_engine_weight_f32(e, &lm[i], &W[i]);
    if (s == LB_OK && moe && X[QZ_IN_MLP]) s = moe_stat_make(e, l, X[QZ_IN_MLP], &ms);
    /* 2. scale search, every group on the weights as they are */
    const double t0 = lb_time_s();
    qz_awq_linear *lins = malloc((size_t)(2 * c->n_experts + 4) * sizeof *lins);
    if (!lins && s == LB_OK) s = lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
    for (int k = 0; k < ng && s == LB_OK; k++) {
        agrp *g = &G[k];
        bool ok = g->prev < 0 || use[g->prev];
        for (int j = 0; j < g->n_mem; j++) ok = ok && use[g->mem[j]];
        const int64_t in = lm[g->mem[0]].in;
        if (ok && g->prev >= 0 &&
            (g->prev_row0 < 0 || g->prev_row0 + in > lm[g->prev].out))
            ok = false;
        if (!ok) {
            lb_log(LB_LOG_INFO, "layer %d: AWQ scaling group %s skipped (a "
                   "module of it is not quantized)", l, g->name);
            s = qz_engine_progress(e, 1);
            continue;
        }
        snprintf(e->stage, sizeof e->stage, "layer %d/%d: awq scales %s",
                 l + 1, c->n_layers, g->name);
        g->s = malloc((size_t)in * sizeof(float));
        if (!g->s) {
            s = lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
            break;
        }
        if (test) {
            qz_awq_fold_test(qz_awq_fold_test_user, l, g->name, in, g->s);
            s = qz_engine_progress(e, 1);
            continue;
        }
        const float *Xs = X[g->input];
        int64_t Ns = N;
        for (int j = 0; j < g->n_mem; j++) {
            const qz_module *q = &lm[g->mem[j]];
            lins[j] = (qz_awq_linear){W[g->mem[j]], q->out, q->bits,
                                      q->group_size, q->sym, NULL, 0};
            if (g->moe_in) /* each expert's loss over its own tokens */
                expert_rows(&ms, expert_of(q), N, &lins[j].rows,
                            &lins[j].n_rows);
        }
        if (g->expert != -1) {
            /* up -> down of one expert: its down input */
            const int x = g->expert;
            int m[3];
            expert_mods(lm, n, x, m);
            const int64_t *rows;
            int64_t nr;
            expert_rows(&ms, x, N, &rows, &nr);
            if (starved(&ms, x)) {
                char msg[128], gu[128];
                snprintf(msg, sizeof msg, "routed coverage: %lld calibration "
                         "token%s < %lld: no AWQ scale or clip search",
                         (long long)nr, nr == 1 ? "" : "s",
                         (long long)ms.min_tok);
                snprintf(gu, sizeof gu, "routed coverage: %lld calibration "
                         "token%s < %lld: no clip search (the layer's "
                         "shared AWQ scales apply)",
                         (long long)nr, nr == 1 ? "" : "s",
                         (long long)ms.min_tok);
                lb_log(LB_LOG_WARN, "layer %d expert %d: %s", l, x, msg);
                /* down: plain; gate/up: scaled with every expert, not
                 * clipped */
                for (int j = 0; j < 3; j++)
                    if (m[j] >= 0 && lm[m[j]].quantize) {
                        reps[m[j]].awq_plain = j == 2;
                        note(&reps[m[j]], j == 2 ? msg : gu);
                    }
                free(g->s);
                g->s = NULL;
                s = qz_engine_progress(e, 1);
                continue;
            }
            const float *Xx = expert_x(&ms, X[QZ_IN_MLP], dim, rows, nr);
            down_input(c, &ms, Xx, nr, dim, W[m[0]], W[m[1]], lm[m[0]].out);
            Xs = ms.g;
            Ns = nr;
        }
        int best = -1;
        s = qz_awq_search_scale(Xs, Ns, in, lins, g->n_mem, QZ_AWQ_N_GRID,
                                g->s, NULL, &best);
        if (s != LB_OK) {
            s = lb_error_context(s, "layer %d, %s", l, g->name);
            break;
        }
        for (int j = 0; j < g->n_mem; j++)
            reps[g->mem[j]].awq_ratio = (double)best / QZ_AWQ_N_GRID;
        s = qz_engine_progress(e, 1);
    }
    free(lins);
    /* 3. apply */
    const lb_layer_weights *L = &e->m->layers[l];
    for (int k = 0; k < ng && s == LB_OK; k++) {
        const agrp *g = &G[k];
        if (!g->s) continue;
        const float *sc = g->s;
        const int64_t in = lm[g->mem[0]].in;
        for (int j = 0; j < g->n_mem; j++) {
            const qz_module *q = &lm[g->mem[j]];
            float *Wm = W[g->mem[j]];
            for (int64_t r = 0; r < q->out; r++)
                for (int64_t col = 0; col < in; col++) Wm[r * in + col] *= sc[col];
        }
        if (g->prev_norm >= 0) {
            const float *src = g->prev_norm == QZ_DENSE_ATTN_NORM
                                   ? L->attn_norm.data
                                   : L->ffn_norm.data;
            float *nb = lb_alloc((size_t)in * sizeof(float));
            if (!nb) {
                s = lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
                break;
            }
            /* Gemma holds 1 + w: (1 + w) / s, as scale_ln_fcs */
            for (int64_t col = 0; col < in; col++) nb[col] = src[col] / sc[col];
            s = qz_engine_set_dense(e, l, g->prev_norm, nb, in, false);
        } else {
            const qz_module *pq = &lm[g->prev];
            float *Wp = W[g->prev];
            for (int64_t r = 0; r < in; r++)
                for (int64_t col = 0; col < pq->in; col++)
                    Wp[(g->prev_row0 + r) * pq->in + col] /= sc[r];
            if (pq->which == LB_LINEAR_V && L->bv.data) {
                float *nb = lb_alloc((size_t)in * sizeof(float));
                if (!nb) {
                    s = lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
                    break;
                }
                const float *src = L->bv.data;
                for (int64_t col = 0; col < in; col++) nb[col] = src[col] / sc[col];
                s = qz_engine_set_dense(e, l, QZ_DENSE_V_BIAS, nb, in, false);
            }
        }
        if (s == LB_OK && g->moe_in) {
            /* the router (and the shared expert's gate) read the same
             * input: their columns * s keep the routing exact */
            const int64_t E = c->n_experts;
            s = router_f32(&L->ffn_gate_inp, &Wr);
            for (int64_t r = 0; r < E && s == LB_OK; r++)
                for (int64_t col = 0; col < in; col++) Wr[r * in + col] *= sc[col];
            if (s == LB_OK) {
                s = qz_engine_set_dense(e, l, QZ_DENSE_ROUTER, Wr, E * in,
                                        false);
                Wr = NULL;
            }
            if (s == LB_OK && L->shexp_gate_inp.data) {
                Wsg = lb_alloc((size_t)in * sizeof(float));
                if (!Wsg) s = lb_set_error(LB_ERR_NOMEM, "awq: out of memory");
                const float *src = L->shexp_gate_inp.data;
                for (int64_t col = 0; col < in && Wsg; col++)
                    Wsg[col] = src[col] * sc[col];
                if (s == LB_OK)
                    s = qz_engine_set_dense(e, l, QZ_DENSE_SHEXP_GATE, Wsg,
                                            in, false);
                Wsg = NULL;
            }
        }
        if (g->expert == -1) {
            float *x = X[g->input];
            for (int64_t t = 0; t < N && x; t++)
                for (int64_t col = 0; col < in; col++) x[t * in + col] /= sc[col];
        }
    }
    /* 4. clip */
    for (int i = 0; i < n && s == LB_OK; i++) {
        const qz_module *q = &lm[i];
        const int x = expert_of(q);
        if (!clip || !q->quantize || q->which == LB_LINEAR_Q ||
            q->which == LB_LINEAR_K || q->which == QZ_QKV ||
            (moe && x != -1 && starved(&ms, x))) {
            s = qz_engine_progress(e, 1);
            continue;
        }
        snprintf(e->stage, sizeof e->stage, "layer %d/%d: awq clip %s", l + 1,
                 c->n_layers, q->name);
        const float *Xc = X[input_of(q->which, moe)];
        int64_t Nc = N;
        if (moe && x != -1) {
            const int64_t *rows;
            expert_rows(&ms, x, N, &rows, &Nc);
            Xc = expert_x(&ms, X[QZ_IN_MLP], dim, rows, Nc);
            int m[3];
            expert_mods(lm, n, x, m);
            if (i == m[2]) { /* down: its input from the scaled gate/up */
                down_input(c, &ms, Xc, Nc, dim, W[m[0]], W[m[1]], lm[m[0]].out);
                Xc = ms.g;
            }
        }
        int64_t shrunk = 0;
        if (Nc > 0)
            s = qz_awq_search_clip(Xc, Nc, W[i], q->out, q->in, q->bits,
                                   q->group_size, q->sym,
                                   e->ctx ? lb_context_pool(e->ctx) : NULL,
                                   &shrunk);
        reps[i].awq_clipped = shrunk;
        if (s == LB_OK) s = qz_engine_progress(e, 1);
    }
    e->rep->solve_seconds += lb_time_s() - t0;
    /* 5. the transformed weights go into the model */
    for (int i = 0; i < n && W; i++) {
        if (W[i] && s == LB_OK) s = qz_engine_swap_in(e, &lm[i], W[i]);
        else lb_free(W[i]);
        W[i] = NULL;
    }
    moe_stat_free(&ms);
    lb_free(Wr);
    free(W);
    free(use);
    groups_free(G, ng);
    for (int k = 0; k < QZ_IN_COUNT; k++) lb_free(X[k]);
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
    LB_TRY(qz_awq_quantize(W, q->out, q->in, q->bits, q->group_size, q->sym,
                           res));
    if (qz_awq_fold_test) /* the fold alone: weights as they are */
        memcpy(res->W_deq, W, (size_t)(q->out * q->in) * sizeof(float));
    return LB_OK;
}

const qz_processor qz_proc_awq = {"awq", QZ_NEED_CALIB, awq_begin, awq_units,
                                  awq_solve};
const qz_processor qz_proc_awq_gptq = {
    "awq+gptq", QZ_NEED_CALIB | QZ_NEED_HESSIAN, awq_gptq_begin, awq_units,
    qz_solve_gptq};
