/*
 * Whole-model quantization engine (lowbit/quantize.h): parameters, the
 * layer-by-layer GPTQ calibration of AutoGPTQ's
 * BaseGPTQForCausalLM.quantize() (@9f7d370) on lowbit's forward, RTN,
 * lb_quantize_model_inplace and the JSON report.
 *
 * Per decoder layer l (GPTQ):
 *   for each subset S of [q,k,v] [o] [gate,up] [down] (one subset with
 *   true_sequential off) that has a module to quantize:
 *     H_g = 0 for each input group g the subset reads (attention input,
 *     o_proj input, MLP input, down_proj input);
 *     for every sequence s: x = inputs_l[s]; lb_layer_forward(l, x) with a
 *     hook that adds X to H_g (one add_batch per sequence, nsamples counted
 *     in sequences) and stops the forward after the last input S needs;
 *     each module of S: GPTQ(W, H) -> swap its dequantized f32 weights in;
 *   replay: inputs_{l+1}[s] = layer_l(inputs_l[s]) with every quantized
 *   module swapped in.
 */
#include "quant/quantize_internal.h"
#include "lowbit/fp8.h"
#include "lowbit/quants.h"
#include "lowbit/kernels.h"
#include "model/model_internal.h"
#include "quant/gptq_internal.h"
#include "core/internal.h"

#include <cblas.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

void lb_quantize_default_params(lb_quantize_params *p) {
    memset(p, 0, sizeof *p);
    p->method = LB_QUANT_GPTQ;
    p->bits = 4;
    p->group_size = 128;
    p->sym = true;
    p->damp_percent = 0.01;
    p->damp_auto_increment = 0.0025;
    p->mse_norm = 2.4f;
    p->true_sequential = true;
    p->format = LB_GPTQ_FORMAT_V1;
    p->max_shard_bytes = 4000000000ull;
    p->gptaq_alpha = 0.25;
    p->qep_alpha = 0.5;
    p->calib_cache_mib = -1;
}

lb_status qz_effective_params(const lb_quantize_params *p,
                              lb_quantize_params *e) {
    static const char *who = "quantize";
    if (!p) return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL params", who);
    *e = *p;
    if (!qz_processor_for(e->method))
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: unknown method %d", who,
                            (int)e->method);
    LB_TRY(lb_gptq_check_bits(e->bits, who));
    LB_TRY(lb_gptq_check_group_size(e->group_size, who));
    if (e->format != LB_GPTQ_FORMAT_V1 && e->format != LB_GPTQ_FORMAT_V2 &&
        e->format != LB_GPTQ_FORMAT_AWQ)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: unknown checkpoint "
                            "format %d", who, (int)e->format);
    const bool awq = e->method == LB_QUANT_AWQ ||
                     e->method == LB_QUANT_AWQ_GPTQ;
    if (awq) {
        if (e->profile != LB_QUANT_PROFILE_NONE)
            return lb_set_error(LB_ERR_INVALID_ARG, "%s: profiles are for "
                                "GPTQ/RTN, not AWQ", who);
        if (e->desc_act || e->static_groups)
            return lb_set_error(LB_ERR_INVALID_ARG,
                                "%s: desc_act and static_groups are GPTQ "
                                "options (the AWQ layout has no g_idx)",
                                who);
        if (e->method == LB_QUANT_AWQ && e->mse)
            return lb_set_error(LB_ERR_INVALID_ARG,
                                "%s: --mse is a GPTQ/RTN grid option (AWQ "
                                "has its own clip search)", who);
        /* the AutoAWQ GEMM layout holds 4-bit codes; other widths are
         * written in the GPTQ layout (v2: AWQ's zero points may be 0) */
        if (e->format == LB_GPTQ_FORMAT_V1)
            e->format = e->bits == 4 ? LB_GPTQ_FORMAT_AWQ : LB_GPTQ_FORMAT_V2;
    } else if (e->format == LB_GPTQ_FORMAT_AWQ) {
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: the AWQ checkpoint "
                            "layout is for --method awq / awq-gptq", who);
    }
    if (e->format == LB_GPTQ_FORMAT_AWQ && e->bits != 4)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: the AWQ GEMM layout holds 4-bit codes only "
                            "(got %d bits; use --checkpoint-format gptq_v2)",
                            who, e->bits);
    if (e->profile == LB_QUANT_PROFILE_VLLM_W4A8) {
        if (e->bits != 4 || !e->sym)
            return lb_set_error(LB_ERR_INVALID_ARG,
                                "%s: the vllm-w4a8 profile is symmetric "
                                "4-bit only (got %d-bit %s)",
                                who, e->bits, e->sym ? "sym" : "asym");
        e->mse = true;
        e->mse_norm = 2.0f;
        e->lm_head = true;
    } else if (e->profile != LB_QUANT_PROFILE_NONE) {
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: unknown profile %d", who,
                            (int)e->profile);
    }
    if ((e->method == LB_QUANT_GPTQ || e->method == LB_QUANT_AWQ_GPTQ) &&
        (!(e->damp_percent > 0.0) || !(e->damp_percent < 1.0) ||
         !(e->damp_auto_increment >= 0.0)))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: damp_percent %g must be in (0, 1) and the "
                            "auto-increment %g >= 0",
                            who, e->damp_percent, e->damp_auto_increment);
    if (e->qep && e->method != LB_QUANT_GPTQ && e->method != LB_QUANT_RTN)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: --qep goes with GPTQ "
                            "or RTN (GPTAQ has its own asymmetric term; AWQ "
                            "folds scales)", who);
    if ((e->method == LB_QUANT_GPTAQ || e->qep) &&
        (!(e->damp_percent > 0.0) || !(e->damp_percent < 1.0) ||
         !(e->damp_auto_increment >= 0.0)))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: damp_percent %g must be in (0, 1) and the "
                            "auto-increment %g >= 0",
                            who, e->damp_percent, e->damp_auto_increment);
    if (e->method == LB_QUANT_GPTAQ &&
        !(isfinite(e->gptaq_alpha) && fabs(e->gptaq_alpha) <= 16.0))
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: gptaq_alpha %g (a "
                            "finite weight, |alpha| <= 16)", who,
                            e->gptaq_alpha);
    if (e->qep && !(isfinite(e->qep_alpha) && fabs(e->qep_alpha) <= 16.0))
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: qep_alpha %g (a finite "
                            "weight, |alpha| <= 16)", who, e->qep_alpha);
    if (e->rotate != LB_ROTATE_NONE && e->rotate != LB_ROTATE_HADAMARD &&
        e->rotate != LB_ROTATE_HADAMARD_R4)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: unknown rotation kind "
                            "%d (rotate: none, hadamard or hadamard-r4)", who,
                            (int)e->rotate);
    if (e->mse && !(e->mse_norm > 0.0f && e->mse_norm < 100.0f))
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: mse norm %g", who,
                            (double)e->mse_norm);
    if (e->act_spill_dir) {
        /* checked before the run; lb_spill_map says more when it fails */
        struct stat st;
        const char *d = e->act_spill_dir;
        if (!*d || stat(d, &st) != 0)
            return lb_set_error(*d && errno != ENOENT ? LB_ERR_IO
                                                      : LB_ERR_NOT_FOUND,
                                "%s: act_spill_dir '%s': %s", who, d,
                                *d ? strerror(errno) : "empty path");
        if (!S_ISDIR(st.st_mode))
            return lb_set_error(LB_ERR_IO, "%s: act_spill_dir '%s': not a "
                                "directory", who, d);
        if (access(d, W_OK | X_OK) != 0)
            return lb_set_error(LB_ERR_IO, "%s: act_spill_dir '%s': cannot "
                                "create files there: %s", who, d,
                                strerror(errno));
    }
    if (e->fp8) {
        const lb_fp8_qconfig *f = e->fp8;
        if (e->method != LB_QUANT_GPTQ || e->qep)
            return lb_set_error(LB_ERR_INVALID_ARG, "%s: the FP8 grid goes "
                                "with GPTQ alone (calibration-free FP8: "
                                "lowbit quantize --method fp8)", who);
        const char *bad = e->n_rules                            ? "module rules"
                          : e->lm_head                          ? "lm_head"
                          : e->profile != LB_QUANT_PROFILE_NONE ? "a profile"
                          : e->rotate != LB_ROTATE_NONE         ? "rotation"
                          : e->static_groups                    ? "static_groups"
                          : e->mse                              ? "mse"
                          : e->resume                           ? "resume"
                          : e->force                            ? "force"
                                                                : NULL;
        if (bad)
            return lb_set_error(LB_ERR_INVALID_ARG, "%s: GPTQ onto the FP8 "
                                "grid quantizes every decoder-layer linear "
                                "with one setting and writes a new "
                                "directory: not with %s", who, bad);
        if ((f->fmt != LB_FP8_E4M3 && f->fmt != LB_FP8_E5M2) ||
            (f->layout != LB_FP8_SCALE_BLOCK &&
             f->layout != LB_FP8_SCALE_CHANNEL &&
             f->layout != LB_FP8_SCALE_TENSOR) ||
            (f->layout == LB_FP8_SCALE_BLOCK &&
             (f->block_n < 1 || f->block_k < 1 || f->block_n > 65536 ||
              f->block_k > 65536)) ||
            (e->fp8_rule != LB_FP8_RULE_MSE && e->fp8_rule != LB_FP8_RULE_AMAX))
            return lb_set_error(LB_ERR_INVALID_ARG, "%s: bad FP8 settings "
                                "(fmt %d, layout %d, block %d x %d, rule %d)",
                                who, (int)f->fmt, (int)f->layout, f->block_n,
                                f->block_k, (int)e->fp8_rule);
    }
    if (e->method == LB_QUANT_RTN && (e->desc_act || e->static_groups))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: desc_act and static_groups need GPTQ (RTN "
                            "has no Hessian)",
                            who);
    return LB_OK;
}

const char *qz_method_name(lb_quant_method m) {
    const qz_processor *p = qz_processor_for(m);
    return p ? p->name : "?";
}

double qz_snr_db(const float *w, const float *q, int64_t n) {
    double s = 0.0, e = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)w[i] - (double)q[i];
        s += (double)w[i] * (double)w[i];
        e += d * d;
    }
    if (e == 0.0) return INFINITY;
    if (s == 0.0) return -INFINITY;
    return 10.0 * log10(s / e);
}

lb_status qz_check_arch(const lb_model *m, const lb_quantize_params *p) {
    const lb_model_config *c = &m->config;
    const bool ext = c->arch >= LB_ARCH_GEMMA2 || lb_model_config_is_ext(c);
    if (!ext) return LB_OK;
    /* R1 on Phi-3 and the MoE layouts (rotate.c); Gemma's post-sublayer
     * norms do not commute with it; R4 is the Llama layout's only */
    if (p->rotate != LB_ROTATE_NONE &&
        (c->arch == LB_ARCH_GEMMA2 || c->arch == LB_ARCH_GEMMA3))
        return lb_set_error(LB_ERR_UNSUPPORTED, "quantize: --rotate on %s is "
                            "not supported: its post_attention_layernorm and "
                            "post_feedforward_layernorm normalise each "
                            "sublayer's output before the residual add, and "
                            "an orthogonal rotation of the residual stream "
                            "does not commute with their per-channel weights",
                            c->arch_name);
    if (p->rotate == LB_ROTATE_HADAMARD_R4)
        return lb_set_error(LB_ERR_UNSUPPORTED, "quantize: --rotate "
                            "hadamard-r4 on %s is not supported (the online "
                            "Hadamard on down_proj's input runs in the Llama "
                            "layout's forward only); use --rotate hadamard",
                            c->arch_name);
    if (p->moe_coverage != LB_MOE_COVERAGE_ALL &&
        p->moe_coverage != LB_MOE_COVERAGE_ROUTED)
        return lb_set_error(LB_ERR_INVALID_ARG, "quantize: moe_coverage %d "
                            "(all or routed)", (int)p->moe_coverage);
    if (p->moe_min_tokens < 0)
        return lb_set_error(LB_ERR_INVALID_ARG, "quantize: moe_min_tokens "
                            "%lld < 0", (long long)p->moe_min_tokens);
    return LB_OK;
}

void lb_quantize_report_free(lb_quantize_report *r) {
    if (!r) return;
    free(r->modules);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------------------ */
/* Engine                                                                    */
/* ------------------------------------------------------------------------ */

enum { G_ATTN = QZ_IN_ATTN, G_O = QZ_IN_O, G_MLP = QZ_IN_MLP,
       G_DOWN = QZ_IN_DOWN, G_COUNT = QZ_IN_COUNT };

void qz_arch_get(const lb_model_config *cfg, bool true_sequential,
                 qz_arch *a) {
    memset(a, 0, sizeof *a);
    static const int seq[4][3] = {{LB_LINEAR_Q, LB_LINEAR_K, LB_LINEAR_V},
                                  {LB_LINEAR_O, -1, -1},
                                  {LB_LINEAR_GATE, LB_LINEAR_UP, -1},
                                  {LB_LINEAR_DOWN, -1, -1}};
    if (cfg->arch == LB_ARCH_PHI3) {
        /* fused qkv_proj and gate_up_proj: one module each */
        static const int ph[4] = {QZ_QKV, LB_LINEAR_O, QZ_GATE_UP,
                                  LB_LINEAR_DOWN};
        a->n_subsets = true_sequential ? 4 : 1;
        for (int k = 0; k < 4; k++) {
            const int ss = true_sequential ? k : 0;
            a->subsets[ss][a->subset_n[ss]++] = ph[k];
        }
    } else if (true_sequential) {
        a->n_subsets = 4;
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 3 && seq[k][j] >= 0; j++)
                a->subsets[k][a->subset_n[k]++] = seq[k][j];
    } else {
        a->n_subsets = 1;
        for (int j = 0; j < LB_LINEAR_COUNT; j++) a->subsets[0][j] = j;
        a->subset_n[0] = LB_LINEAR_COUNT;
    }
    a->input_of[LB_LINEAR_Q] = a->input_of[LB_LINEAR_K] =
        a->input_of[LB_LINEAR_V] = QZ_IN_ATTN;
    a->input_of[LB_LINEAR_O] = QZ_IN_O;
    a->input_of[LB_LINEAR_GATE] = a->input_of[LB_LINEAR_UP] = QZ_IN_MLP;
    a->input_of[LB_LINEAR_DOWN] = QZ_IN_DOWN;
    a->scale[a->n_scale++] = (qz_scale_group){
        "input_layernorm -> q_proj,k_proj,v_proj", QZ_NORM_ATTN, -1,
        {LB_LINEAR_Q, LB_LINEAR_K, LB_LINEAR_V}, 3, QZ_IN_ATTN};
    /* v_proj -> o_proj only when v's output is o's input channel for
     * channel (AutoAWQ: v_proj.weight.shape == o_proj.weight.shape) */
    if (cfg->n_kv_heads == cfg->n_heads)
        a->scale[a->n_scale++] = (qz_scale_group){
            "v_proj -> o_proj", -1, LB_LINEAR_V, {LB_LINEAR_O}, 1, QZ_IN_O};
    a->scale[a->n_scale++] = (qz_scale_group){
        "post_attention_layernorm -> gate_proj,up_proj", QZ_NORM_FFN, -1,
        {LB_LINEAR_GATE, LB_LINEAR_UP}, 2, QZ_IN_MLP};
    a->scale[a->n_scale++] = (qz_scale_group){
        "up_proj -> down_proj", -1, LB_LINEAR_UP, {LB_LINEAR_DOWN}, 1,
        QZ_IN_DOWN};
}

/* Input group of a module; K/V and UP read the same X as Q and GATE
 * (experts: the MoE block's input, or their own down input). */
static int input_group(int which) {
    if (which >= QZ_EXP) return (which - QZ_EXP) % 3 == 2 ? G_DOWN : G_MLP;
    if (which >= QZ_SHEXP) return which - QZ_SHEXP == 2 ? G_DOWN : G_MLP;
    switch (which) {
    case LB_LINEAR_Q:
    case LB_LINEAR_K:
    case LB_LINEAR_V:
    case QZ_QKV: return G_ATTN;
    case LB_LINEAR_O: return G_O;
    case LB_LINEAR_GATE:
    case LB_LINEAR_UP:
    case QZ_GATE_UP: return G_MLP;
    default: return G_DOWN;
    }
}

int qz_module_parts(lb_model *m, const qz_module *q, lb_tensor *parts[3]) {
    if (q->which == QZ_LM_HEAD) {
        parts[0] = &m->output;
        return 1;
    }
    lb_layer_weights *L = &m->layers[q->layer];
    const int w = q->which;
    if (w >= 0 && w < LB_LINEAR_COUNT) {
        parts[0] = &L->w[w];
        return 1;
    }
    if (w == QZ_QKV) {
        parts[0] = &L->w[LB_LINEAR_Q];
        parts[1] = &L->w[LB_LINEAR_K];
        parts[2] = &L->w[LB_LINEAR_V];
        return 3;
    }
    if (w == QZ_GATE_UP) {
        parts[0] = &L->w[LB_LINEAR_GATE];
        parts[1] = &L->w[LB_LINEAR_UP];
        return 2;
    }
    if (w >= QZ_EXP) {
        parts[0] = &L->exp[w - QZ_EXP];
        return 1;
    }
    parts[0] = &L->shexp[w - QZ_SHEXP];
    return 1;
}

/* The linears that read each input group (for messages). */
static const char *group_modules(int g) {
    static const char *n[G_COUNT] = {"self_attn.q_proj/k_proj/v_proj",
                                     "self_attn.o_proj",
                                     "mlp.gate_proj/up_proj", "mlp.down_proj"};
    return n[g];
}

/* Whether every |x| of x [rows, cols] is <= limit (NaN never is); if not,
 * the position of the first that is not. */
static bool all_within(const float *x, int64_t rows, int64_t cols,
                       float limit, int64_t *r_out, int64_t *c_out) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            if (!(fabsf(x[r * cols + c]) <= limit)) {
                *r_out = r;
                *c_out = c;
                return false;
            }
    return true;
}

typedef struct capture {
    lb_gptq_hessian *H[G_COUNT];
    int last;     /* input group after which the forward stops           */
    bool stopped; /* the hook stopped it                                 */
    int64_t seq;  /* calibration sequence being run (messages)           */
    double t_hessian; /* seconds in lb_gptq_hessian_add_batch            */
    /* QZ_NEED_NATIVE: native inputs (engine Xn), cross statistics
     * accumulators D[g] [in, in] (sum over sequences of (Xn - X)^T X) and a
     * [T, width] scratch */
    float *const *Xn;
    float *D[G_COUNT];
    float *delta;
    int64_t T;
    /* --calib-cache: where this sequence's o_proj / down_proj input is
     * kept (engine attc / actc slots; NULL: not kept) */
    const struct qz_engine *e;
    void *keep_att, *keep_act;
} capture;

static void cache_put(const qz_engine *e, void *dst, const float *X,
                      size_t n);

static lb_status capture_hook(void *user, int layer, lb_linear_id which,
                              const float *X, int64_t n, int64_t in) {
    capture *c = user;
    /* K, V, UP: the same X as Q / GATE, already captured */
    if (which == LB_LINEAR_K || which == LB_LINEAR_V || which == LB_LINEAR_UP)
        return LB_OK;
    int g = input_group(which);
    void *keep = which == LB_LINEAR_O      ? c->keep_att
                 : which == LB_LINEAR_DOWN ? c->keep_act
                                           : NULL;
    if (keep) cache_put(c->e, keep, X, (size_t)(n * in));
    int64_t r, col;
    if (c->H[g] && !all_within(X, n, in, INFINITY, &r, &col))
        return lb_set_error(
            LB_ERR_RANGE,
            "layer %d, calibration sequence %lld: the input of "
            "model.layers.%d.%s is not finite (token %lld, column %lld = %g): "
            "the layer produced NaN/Inf before it (weights or activations "
            "overflowing float32)",
            layer, (long long)c->seq, layer, group_modules(g), (long long)r,
            (long long)col, (double)X[r * in + col]);
    if (c->H[g]) {
        const double t0 = lb_time_s();
        lb_status s = lb_gptq_hessian_add_batch(c->H[g], X, n, 1);
        if (s == LB_OK && c->D[g]) {
            if (n != c->T || !c->Xn[g])
                s = lb_set_error(LB_ERR_INTERNAL, "capture: native input "
                                 "of %s", group_modules(g));
            else {
                const float *xn = c->Xn[g] + (size_t)(c->seq * n * in);
                for (int64_t i = 0; i < n * in; i++)
                    c->delta[i] = xn[i] - X[i];
                /* D += delta^T X */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans,
                            (int)in, (int)in, (int)n, 1.0f, c->delta,
                            (int)in, X, (int)in, 1.0f, c->D[g], (int)in);
            }
        }
        c->t_hessian += lb_time_s() - t0;
        LB_TRY(s);
    }
    if (g == c->last) {
        c->stopped = true;
        return LB_ERR_CANCELLED;
    }
    return LB_OK;
}

typedef qz_engine engine;

lb_status qz_engine_progress(qz_engine *e, uint64_t add) {
    e->done += add;
    if (!lb_progress_report(&e->p->progress, e->stage, e->done, e->total))
        return lb_set_error(LB_ERR_CANCELLED, "quantize: cancelled (%s)",
                            e->stage);
    return LB_OK;
}

lb_status qz_engine_hessian_create(const qz_engine *e, int64_t in,
                                   lb_gptq_hessian **h) {
    LB_TRY(lb_gptq_hessian_create(in, e->p->hessian_f64, h));
    if (!e->hpool) return LB_OK;
    const lb_status s = lb_gptq_hessian_use_bf16(*h, e->hpool);
    if (s != LB_OK) {
        lb_gptq_hessian_free(*h);
        *h = NULL;
    }
    return s;
}

/* Sequence s's slot of the activations (act32 or act16) and its size. */
static void *act_slot(const qz_engine *e, int64_t s, size_t *bytes) {
    const size_t n = (size_t)(e->T * e->dim);
    *bytes = n * (e->act32 ? sizeof(float) : sizeof(uint16_t));
    return e->act32 ? (void *)(e->act32 + (size_t)s * n)
                    : (void *)(e->act16 + (size_t)s * n);
}

/* With the spill (act_spill_dir) the slot's pages leave the RSS after
 * each load and store: the forward works on the [T, dim] copy, and a
 * store over dropped pages faults them in from the page cache. */
static void act_drop(const qz_engine *e, int64_t s) {
    if (!e->spill || (!e->act32 && !e->act16)) return;
    size_t bytes = 0;
    void *p = act_slot(e, s, &bytes);
    lb_drop_pages(p, bytes);
}

void qz_engine_act_load(const qz_engine *e, int64_t s, float *dst) {
    size_t n = (size_t)(e->T * e->dim);
    if (e->act32)
        memcpy(dst, e->act32 + (size_t)s * n, n * sizeof(float));
    else
        lb_f16_to_f32_row(e->act16 + (size_t)s * n, dst, n);
    act_drop(e, s);
}

static void act_store(engine *e, int64_t s, const float *src) {
    size_t n = (size_t)(e->T * e->dim);
    if (e->act32)
        memcpy(e->act32 + (size_t)s * n, src, n * sizeof(float));
    else
        lb_f32_to_f16_row(src, e->act16 + (size_t)s * n, n);
    act_drop(e, s);
}

/* ---- act_spill_dir ------------------------------------------------------
 * The calibration buffers (activations, native stream and inputs, cache)
 * are lb_alloc'd, or with the spill lb_spill_map mappings of a temporary
 * file in act_spill_dir: what a pass has done with leaves the RSS
 * (seq_release), the page cache keeps it, or the disk. */

static lb_status buf_alloc(engine *e, size_t n, const char *what,
                           void **out) {
    if (!e->spill) {
        *out = lb_alloc(n);
        return *out ? LB_OK
                    : lb_set_error(LB_ERR_NOMEM, "quantize: cannot allocate "
                                   "the %s (%zu bytes)", what, n);
    }
    lb_status s = lb_spill_map(e->p->act_spill_dir, n, what, out);
    if (s != LB_OK) return lb_error_context(s, "quantize");
    return LB_OK;
}

static void buf_free(const engine *e, void *p, size_t n) {
    if (e->spill)
        lb_spill_unmap(p, n);
    else
        lb_free(p);
}

/* Width of input group g's rows. */
static int64_t group_width(const engine *e, int g) {
    const lb_model_config *c = &e->m->config;
    return g == G_DOWN ? c->intermediate_size
           : g == G_O  ? (int64_t)c->n_heads * c->head_dim
                       : c->hidden_size;
}

static void *cache_slot(const qz_engine *e, bool act, int64_t s);
static int64_t cache_width(const qz_engine *e, bool act);
static size_t cache_esize(const qz_engine *e);

/* With the spill: every page of calibration sequence s (activations,
 * native stream, native inputs, cache slots) leaves the RSS; called when
 * a pass is done with the sequence. The bytes stay in the file. */
static void seq_release(const engine *e, int64_t s) {
    if (!e->spill) return;
    const size_t T = (size_t)e->T;
    act_drop(e, s);
    if (e->nat)
        lb_drop_pages(e->nat + (size_t)s * T * (size_t)e->dim,
                      T * (size_t)e->dim * sizeof(float));
    for (int g = 0; g < G_COUNT; g++)
        if (e->Xn[g]) {
            const size_t w = (size_t)group_width(e, g);
            lb_drop_pages(e->Xn[g] + (size_t)s * T * w, T * w * sizeof(float));
        }
    if (s < e->nc)
        for (int act = 0; act <= 1; act++)
            lb_drop_pages(cache_slot(e, act, s),
                          T * (size_t)cache_width(e, act) * cache_esize(e));
}

/* ---- --calib-cache ------------------------------------------------------
 * A true-sequential layer runs the calibration sequences through itself
 * once per subset ([q,k,v], [o], [gate,up], [down]) and once more to make
 * the next layer's inputs. The [gate,up] pass would compute q/k/v and the
 * attention again, with the same final weights as the [o] pass; the replay
 * would compute gate/up again, as the [down] pass did. So the [o] pass
 * keeps each sequence's attention output (o_proj's input) and the [down]
 * pass its MLP activation (down_proj's input), and those later passes
 * start there (lb_layer_forward_from). Values are kept as the products
 * will read them: bf16 when the context rounds activations of F32/BF16
 * weights to bf16 (--calib-dtype bf16; rounding twice to bf16 is rounding
 * once), else f32, so the result is bit-identical to recomputing them
 * (test_quantize). Sequences [0, nc) fit in the budget; the others are
 * recomputed. Llama-layout dense layers only (the entries of
 * lb_layer_forward_from); the activation cache needs h_kept. */

static size_t cache_esize(const qz_engine *e) {
    return e->cache_bf16 ? sizeof(uint16_t) : sizeof(float);
}

static void fmt_bytes(char *buf, size_t n, double b);

/* Width of the kept input: down_proj's (act) or o_proj's. */
static int64_t cache_width(const qz_engine *e, bool act) {
    return act ? e->m->config.intermediate_size
               : (int64_t)e->m->config.n_heads * e->m->config.head_dim;
}

static void *cache_slot(const qz_engine *e, bool act, int64_t s) {
    uint8_t *base = act ? e->actc : e->attc;
    return base + (size_t)s * (size_t)(e->T * cache_width(e, act)) *
                      cache_esize(e);
}

static void cache_put(const qz_engine *e, void *dst, const float *X,
                      size_t n) {
    if (e->cache_bf16)
        lb_f32_to_bf16_row(X, dst, n);
    else
        memcpy(dst, X, n * sizeof(float));
}

/* Sequence s's kept o_proj (act false) or down_proj (act true) input as
 * f32 (e->cx or the slot itself). */
static const float *cache_get(engine *e, bool act, int64_t s) {
    const void *p = cache_slot(e, act, s);
    if (!e->cache_bf16) return p;
    lb_bf16_to_f32_row(p, e->cx, (size_t)(e->T * cache_width(e, act)));
    return e->cx;
}

/* The kept input of linear `which` of layer l is exact for its product:
 * f32, or bf16 read by a bf16 product (an F32/BF16 weight; a dense F16
 * one takes f32 activations). */
static bool cache_exact(const engine *e, int l, lb_linear_id which) {
    if (!e->cache_bf16) return true;
    const lb_type t = e->m->layers[l].w[which].type;
    return t == LB_TYPE_F32 || t == LB_TYPE_BF16;
}

static bool layer_moe(const engine *e, int l);

static bool cache_layer(const engine *e, int l) {
    return e->nc > 0 && !lb_model_config_is_ext(&e->m->config) &&
           !layer_moe(e, l);
}

/* Size the caches: every sequence, or as many as the budget holds
 * (p->calib_cache_mib; auto: a quarter of the RAM). Off without
 * true-sequential Hessian subsets or on non-Llama layouts. */
static lb_status cache_alloc(engine *e) {
    const lb_model_config *c = &e->m->config;
    e->nc = 0;
    e->cache_bf16 = lb_context_bf16_active(e->ctx);
    if (!(e->proc->needs & QZ_NEED_HESSIAN) || e->arch.n_subsets < 2 ||
        lb_model_config_is_ext(c) || e->p->calib_cache_mib == 0)
        return LB_OK;
    const int64_t qd = cache_width(e, false), ff = cache_width(e, true);
    const double per_seq = (double)e->T * (double)(qd + ff) *
                           (double)cache_esize(e);
    double budget = (double)e->p->calib_cache_mib * 1048576.0;
    if (e->p->calib_cache_mib < 0) {
        const long pages = sysconf(_SC_PHYS_PAGES),
                   psize = sysconf(_SC_PAGESIZE);
        budget = pages > 0 && psize > 0 ? (double)pages * (double)psize / 4.0
                                        : 0.0;
    }
    int64_t nc = (int64_t)(budget / per_seq);
    if (nc > e->ns) nc = e->ns;
    if (nc <= 0) return LB_OK;
    const size_t n_att = (size_t)nc * (size_t)(e->T * qd) * cache_esize(e),
                 n_act = (size_t)nc * (size_t)(e->T * ff) * cache_esize(e);
    void *att = NULL, *act = NULL;
    lb_status s = buf_alloc(e, n_att, "calibration cache", &att);
    if (s == LB_OK) s = buf_alloc(e, n_act, "calibration cache", &act);
    e->cx = e->cache_bf16 ? lb_alloc((size_t)(e->T * LB_MAX(qd, ff)) *
                                     sizeof(float))
                          : NULL;
    if (s != LB_OK || (e->cache_bf16 && !e->cx)) {
        if (att) buf_free(e, att, n_att);
        if (act) buf_free(e, act, n_act);
        lb_free(e->cx);
        e->cx = NULL;
        if (s != LB_OK && e->spill) return s;
        return lb_set_error(LB_ERR_NOMEM, "quantize: cannot allocate the "
                            "calibration cache (%lld sequences, %.0f MiB; "
                            "--calib-cache sets its size)", (long long)nc,
                            (double)(n_att + n_act) / 1048576.0);
    }
    e->attc = att;
    e->actc = act;
    e->attc_bytes = n_att;
    e->actc_bytes = n_act;
    e->nc = nc;
    e->rep->cache_sequences = nc;
    e->rep->cache_bytes = n_att + n_act;
    if (e->spill) e->rep->spill_bytes += n_att + n_act;
    char mem[32];
    fmt_bytes(mem, sizeof mem, (double)(n_att + n_act));
    lb_log(LB_LOG_INFO, "calibration cache: attention outputs and MLP "
           "activations of %lld of %lld sequences, %s = %s%s", (long long)nc,
           (long long)e->ns, e->cache_bf16 ? "bf16" : "f32", mem,
           e->spill ? " (spilled)" : "");
    return LB_OK;
}

/* The weight of a module as f32 [out, in] (lb_alloc'd). */
static lb_status weight_f32(const lb_tensor *t, const char *name, float **out) {
    *out = NULL;
    const int64_t rows = t->shape[0], cols = t->shape[1];
    size_t rb, n;
    if (!lb_row_size(t->type, cols, &rb) ||
        !lb_mul_ok((size_t)rows, (size_t)cols, &n) ||
        !lb_mul_ok(n, sizeof(float), &n))
        return lb_set_error(LB_ERR_OVERFLOW, "%s: size overflows", name);
    float *W = lb_alloc(n);
    if (!W) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory for f32 "
                                "weights (%zu bytes)", name, n);
    for (int64_t r = 0; r < rows; r++) {
        lb_status s = lb_tensor_dequant_row(t, r, W + r * cols);
        if (s != LB_OK) {
            lb_free(W);
            return lb_error_context(s, "%s", name);
        }
    }
    *out = W;
    return LB_OK;
}

/* RTN on the AutoGPTQ grid with the engine's MSE settings (lb_rtn_quantize
 * with a configurable MSE norm). */
static lb_status rtn(const float *W, int64_t out, int64_t in,
                     const qz_module *q, const lb_quantize_params *p,
                     lb_gptq_result *res) {
    memset(res, 0, sizeof *res);
    lb_quant_grid g;
    lb_quant_grid_default(&g, q->bits, q->sym);
    g.mse = p->mse;
    g.mse_norm = p->mse_norm;
    LB_TRY(lb_gptq_check_finite(W, out, in, in, "rtn", "W"));
    return lb_rtn_quantize_grid(&g, W, out, in, q->bits, q->group_size, q->name,
                                res);
}

/* The module's weight as f32 [out, in] (its parts' rows in order). */
static lb_status module_weight_f32(lb_model *m, const qz_module *q,
                                   float **out) {
    lb_tensor *parts[3];
    const int np = qz_module_parts(m, q, parts);
    if (np == 1) return weight_f32(parts[0], q->name, out);
    *out = NULL;
    float *W = lb_alloc((size_t)q->out * (size_t)q->in * sizeof(float));
    if (!W) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", q->name);
    int64_t r0 = 0;
    for (int i = 0; i < np; i++) {
        float *P = NULL;
        lb_status s = parts[i]->shape[1] == q->in
                          ? weight_f32(parts[i], q->name, &P)
                          : lb_set_error(LB_ERR_INTERNAL, "%s: part shapes",
                                         q->name);
        if (s != LB_OK) {
            lb_free(W);
            return s;
        }
        memcpy(W + r0 * q->in, P,
               (size_t)(parts[i]->shape[0] * q->in) * sizeof(float));
        r0 += parts[i]->shape[0];
        lb_free(P);
    }
    *out = W;
    return LB_OK;
}

/* The swap record of a tensor slot (added with its current view). */
static struct qz_swap *swap_slot(engine *e, lb_tensor *slot) {
    for (int i = 0; i < e->n_sw; i++)
        if (e->sw[i].slot == slot) return &e->sw[i];
    if (e->n_sw == e->cap_sw) {
        int cap = e->cap_sw ? 2 * e->cap_sw : 16;
        struct qz_swap *n = realloc(e->sw, (size_t)cap * sizeof *n);
        if (!n) return NULL;
        e->sw = n;
        e->cap_sw = cap;
    }
    struct qz_swap *r = &e->sw[e->n_sw++];
    r->slot = slot;
    r->orig = *slot;
    r->buf = NULL;
    return r;
}

/* Put a module's dequantized f32 weights into the model. In-place mode the
 * model owns them; otherwise the engine keeps them and restores the
 * original view after the layer. */
static lb_status swap_in(engine *e, const qz_module *q, float *Wd) {
    lb_tensor t = {.name = NULL, .type = LB_TYPE_F32, .n_dims = 2,
                   .shape = {q->out, q->in}, .data = Wd,
                   .nbytes = (size_t)q->out * (size_t)q->in * sizeof(float)};
    if (q->which == QZ_LM_HEAD) {
        if (!e->sink->keep_in_model) {
            lb_free(Wd); /* nothing runs after lm_head */
            return LB_OK;
        }
        LB_TRY(lb_model_builder_own(e->m, Wd));
        t.name = e->m->output.name;
        e->m->output = t;
        e->m->config.tie_word_embeddings = false; /* untied now */
        return LB_OK;
    }
    lb_tensor *parts[3];
    const int np = qz_module_parts(e->m, q, parts);
    if (e->sink->keep_in_model) {
        LB_TRY(lb_model_builder_own(e->m, Wd));
    } else {
        struct qz_swap *r = swap_slot(e, parts[0]);
        for (int i = 1; i < np && r; i++)
            if (!swap_slot(e, parts[i])) r = NULL;
        if (!r) {
            lb_free(Wd);
            return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", q->name);
        }
        r = swap_slot(e, parts[0]);
        lb_free(r->buf);
        r->buf = Wd;
    }
    /* each part: a row view of Wd, keeping its name; the source pages it
     * replaces leave the RSS (nothing reads them in this layer again) */
    int64_t r0 = 0;
    for (int i = 0; i < np; i++) {
        lb_model_release_tensor(e->m, parts[i]);
        lb_tensor v = t;
        v.name = parts[i]->name;
        v.shape[0] = parts[i]->shape[0];
        v.data = Wd + r0 * q->in;
        v.nbytes = (size_t)v.shape[0] * (size_t)q->in * sizeof(float);
        r0 += v.shape[0];
        *parts[i] = v;
    }
    return LB_OK;
}

lb_status qz_engine_swap_in(qz_engine *e, const qz_module *q, float *W) {
    return swap_in(e, q, W);
}

lb_status qz_engine_weight_f32(qz_engine *e, const qz_module *q, float **W) {
    return module_weight_f32(e->m, q, W);
}

static lb_tensor *dense_slot(lb_model *m, int layer, int which) {
    lb_layer_weights *L = &m->layers[layer];
    switch (which) {
    case QZ_DENSE_ATTN_NORM: return &L->attn_norm;
    case QZ_DENSE_FFN_NORM: return &L->ffn_norm;
    case QZ_DENSE_V_BIAS: return &L->bv;
    case QZ_DENSE_ROUTER: return &L->ffn_gate_inp;
    default: return &L->shexp_gate_inp;
    }
}

void qz_dense_name(const lb_model_config *c, int layer, int which, char *buf,
                   size_t n) {
    const char *blk = c->arch == LB_ARCH_MIXTRAL ? "block_sparse_moe" : "mlp";
    switch (which) {
    case QZ_DENSE_ATTN_NORM:
        snprintf(buf, n, "model.layers.%d.input_layernorm.weight", layer);
        break;
    case QZ_DENSE_FFN_NORM:
        /* Gemma: the norm before the MLP is pre_feedforward_layernorm */
        snprintf(buf, n, "model.layers.%d.%s.weight", layer,
                 c->post_norms ? "pre_feedforward_layernorm"
                               : "post_attention_layernorm");
        break;
    case QZ_DENSE_V_BIAS:
        snprintf(buf, n, "model.layers.%d.self_attn.v_proj.bias", layer);
        break;
    case QZ_DENSE_ROUTER:
        snprintf(buf, n, "model.layers.%d.%s.gate.weight", layer, blk);
        break;
    default:
        snprintf(buf, n, "model.layers.%d.%s.shared_expert_gate.weight",
                 layer, blk);
        break;
    }
}

/* Gemma's norms are held as (1 + w) (lb_model_gemma_norms_plus_one); the
 * checkpoint stores w. */
static bool dense_plus_one(const lb_model_config *c, int which) {
    return c->post_norms &&
           (which == QZ_DENSE_ATTN_NORM || which == QZ_DENSE_FFN_NORM);
}

lb_status qz_engine_set_dense(qz_engine *e, int layer, int which,
                              float *data, int64_t n, bool from_cache) {
    lb_tensor *t = dense_slot(e->m, layer, which);
    if (!t->data || lb_tensor_nelements(t) != n ||
        (t->type != LB_TYPE_F32 && which != QZ_DENSE_ROUTER)) {
        lb_free(data);
        return lb_set_error(LB_ERR_INTERNAL, "quantize: layer %d dense "
                            "tensor %d is not F32 [%lld]", layer, which,
                            (long long)n);
    }
    lb_status s = LB_OK;
    if (!from_cache && e->sink->tensor_done) {
        char name[160];
        qz_dense_name(&e->m->config, layer, which, name, sizeof name);
        if (dense_plus_one(&e->m->config, which)) {
            float *w = lb_alloc((size_t)n * sizeof(float));
            if (!w) s = lb_set_error(LB_ERR_NOMEM, "%s: out of memory", name);
            for (int64_t i = 0; i < n && w; i++) w[i] = data[i] - 1.0f;
            if (s == LB_OK)
                s = e->sink->tensor_done(e->sink->user, layer, name, w, n);
            lb_free(w);
        } else {
            s = e->sink->tensor_done(e->sink->user, layer, name, data, n);
        }
    }
    if (s != LB_OK) {
        lb_free(data);
        return s;
    }
    /* the replacement is F32 (a router may have been F16/BF16) */
    lb_tensor nt = *t;
    nt.type = LB_TYPE_F32;
    nt.data = data;
    nt.nbytes = (size_t)n * sizeof(float);
    if (e->sink->keep_in_model) {
        s = lb_model_builder_own(e->m, data);
        if (s == LB_OK) *t = nt;
        else lb_free(data);
        return s;
    }
    if (!e->dense_buf[which]) e->dense_orig[which] = *t;
    lb_free(e->dense_buf[which]);
    e->dense_buf[which] = data;
    *t = nt;
    return LB_OK;
}

/* Restore the layer's original weights and free the dequantized ones. */
static void restore_layer(engine *e, int layer) {
    for (int i = 0; i < e->n_sw; i++) {
        if (layer < e->m->config.n_layers) *e->sw[i].slot = e->sw[i].orig;
        lb_free(e->sw[i].buf);
    }
    e->n_sw = 0;
    for (int i = 0; i < QZ_DENSE_COUNT; i++) {
        if (!e->dense_buf[i]) continue;
        if (layer < e->m->config.n_layers)
            *dense_slot(e->m, layer, i) = e->dense_orig[i];
        lb_free(e->dense_buf[i]);
        e->dense_buf[i] = NULL;
    }
}

static void fill_report_static(lb_quantize_module_report *r,
                               const qz_module *q, int n_layers) {
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", q->name);
    r->layer = q->which == QZ_LM_HEAD ? -1 : q->layer;
    (void)n_layers;
    r->quantized = q->quantize;
    snprintf(r->note, sizeof r->note, "%s", q->note);
    r->bits = q->bits;
    r->group_size = q->group_size;
    r->sym = q->sym;
    r->desc_act = q->desc_act;
    r->out_features = q->out;
    r->in_features = q->in;
    r->snr_db = NAN;
    r->awq_ratio = -1.0;
}

/* Quantize one module (W from the model; GPTQ with the inverse-Hessian
 * factor *fac, made from H first when *fac is NULL and then kept there for
 * the next module with the same input; RTN when fac is NULL), hand it to
 * the sink, swap it in. */
typedef lb_status (*solve_fn)(qz_engine *e, const qz_module *q,
                              const float *W, const float *H,
                              lb_gptq_factor **fac, lb_gptq_result *res);

static lb_status quantize_module_with(engine *e, const qz_module *q,
                                      const float *H, lb_gptq_factor **fac,
                                      int64_t nsamples, solve_fn solve) {
    lb_quantize_module_report *r = &e->rep->modules[q - e->mods];
    float *W = NULL;
    LB_TRY(module_weight_f32(e->m, q, &W));
    lb_gptq_result res;
    memset(&res, 0, sizeof res);
    double t0 = lb_time_s();
    e->w_own = W;
    e->w_spent = false;
    lb_status s = solve(e, q, W, H, fac, &res);
    e->w_own = NULL;
    if (s == LB_OK && e->w_spent) { /* W was the solve's working copy */
        lb_free(W);
        W = NULL;
        s = module_weight_f32(e->m, q, &W);
        if (s != LB_OK) lb_gptq_result_free(&res);
    }
    if (s != LB_OK) {
        lb_free(W);
        return lb_error_context(s, "%s", q->name);
    }
    r->seconds = lb_time_s() - t0;
    e->rep->solve_seconds += r->seconds;
    r->loss = res.loss;
    r->nsamples = nsamples;
    r->avg_loss = nsamples > 0 ? res.loss / (double)nsamples : 0.0;
    r->damp_percent = fac ? res.damp_percent_used : 0.0;
    r->n_damp_retries = res.n_damp_retries;
    r->n_dead = res.n_dead;
    r->snr_db = qz_snr_db(W, res.W_deq, q->out * q->in);
    if (res.n_damp_retries)
        lb_log(LB_LOG_WARN, "%s: Cholesky failed %d time(s); damp_percent "
               "raised to %g", q->name, res.n_damp_retries,
               res.damp_percent_used);
    s = e->sink->module_done
            ? e->sink->module_done(e->sink->user, q, W, &res, r)
            : LB_OK;
    lb_free(W);
    if (s == LB_OK) {
        float *Wd = res.W_deq;
        res.W_deq = NULL;
        s = swap_in(e, q, Wd);
    }
    lb_gptq_result_free(&res);
    return s;
}

static lb_status quantize_module(engine *e, const qz_module *q,
                                 const float *H, lb_gptq_factor **fac,
                                 int64_t nsamples) {
    return quantize_module_with(e, q, H, fac, nsamples, e->proc->solve);
}

lb_status qz_engine_quantize_module(qz_engine *e, const qz_module *q,
                                    const float *H, lb_gptq_factor **fac,
                                    int64_t nsamples) {
    return quantize_module(e, q, H, fac, nsamples);
}

static lb_status solve_rtn(qz_engine *e, const qz_module *q, const float *W,
                           const float *H, lb_gptq_factor **fac,
                           lb_gptq_result *res);

lb_status qz_engine_quantize_rtn(qz_engine *e, const qz_module *q,
                                 const char *note) {
    lb_quantize_module_report *r = &e->rep->modules[q - e->mods];
    snprintf(r->note, sizeof r->note, "%s", note);
    return quantize_module_with(e, q, NULL, NULL, 0, solve_rtn);
}

/* Processors. GPTQ: AutoGPTQ's fasterquant with the subset's Hessian
 * (factor made once per input and shared); RTN: the AutoGPTQ grid. */
static void gptq_options(const qz_engine *e, const qz_module *q,
                         lb_gptq_options *o);
static lb_status gptq_run(qz_engine *e, const qz_module *q, const float *W,
                          const float *H, lb_gptq_factor **fac,
                          const lb_gptq_options *o, lb_gptq_result *res);

/* The FP8 grid of module q (p->fp8): its scales, found from W as the
 * calibration-free writer finds them (lb_fp8_quantize_rule; > 0 also for
 * an all-zero group), and the groups of its layout. *scales is
 * lb_alloc'd. */
static lb_status fp8_grid(const qz_engine *e, const qz_module *q,
                          const float *W, lb_gptq_fp8_grid *g,
                          float **scales) {
    const lb_fp8_qconfig *f = e->p->fp8;
    int nd;
    int64_t sh[2];
    lb_fp8_scale_shape(f, q->out, q->in, &nd, sh);
    const int64_t n_sc = nd == 2 ? sh[0] * sh[1] : 1;
    *scales = lb_alloc((size_t)n_sc * sizeof(float));
    lb_status s = *scales ? lb_fp8_quantize_rule(f, e->p->fp8_rule, W, q->out,
                                                 q->in, NULL, *scales)
                          : lb_set_error(LB_ERR_NOMEM, "%s: out of memory",
                                         q->name);
    g->fmt = (int)f->fmt;
    g->block_n = f->layout == LB_FP8_SCALE_BLOCK     ? f->block_n
                 : f->layout == LB_FP8_SCALE_CHANNEL ? 1
                                                     : q->out;
    g->block_k = f->layout == LB_FP8_SCALE_BLOCK ? f->block_k : q->in;
    g->scales = *scales;
    return s;
}

lb_status qz_solve_gptq(qz_engine *e, const qz_module *q, const float *W,
                            const float *H, lb_gptq_factor **fac,
                            lb_gptq_result *res) {
    lb_gptq_options o;
    gptq_options(e, q, &o);
    if (!fac)
        return lb_set_error(LB_ERR_INTERNAL, "%s: GPTQ without a Hessian",
                            q->name);
    if (!e->p->fp8) return gptq_run(e, q, W, H, fac, &o, res);
    /* the scales from W before the solve, which may use W's buffer */
    lb_gptq_fp8_grid g8;
    float *sc8 = NULL;
    lb_status s = fp8_grid(e, q, W, &g8, &sc8);
    o.fp8 = &g8;
    if (s == LB_OK) s = gptq_run(e, q, W, H, fac, &o, res);
    if (s == LB_OK) res->fp8_scales = sc8;
    else lb_free(sc8);
    return s;
}

static lb_status gptq_run(qz_engine *e, const qz_module *q, const float *W,
                          const float *H, lb_gptq_factor **fac,
                          const lb_gptq_options *o, lb_gptq_result *res) {
    lb_status s = qz_engine_factor(e, q, H, o, fac);
    if (s == LB_OK) qz_engine_h_spent(e);
    if (s == LB_OK && e->w_own && W == e->w_own) {
        e->w_spent = true;
        s = lb_gptq_quantize_factored_inplace(e->w_own, q->out, q->in, *fac,
                                              o, res);
    } else if (s == LB_OK) {
        s = lb_gptq_quantize_factored(W, q->out, q->in, *fac, o, res);
    }
    return s;
}

void qz_engine_h_spent(qz_engine *e) {
    if (!e->h_last) return;
    lb_free(*e->h_last);
    *e->h_last = NULL;
}

lb_status qz_engine_factor(qz_engine *e, const qz_module *q, const float *H,
                           const lb_gptq_options *o, lb_gptq_factor **fac) {
    if (*fac) return LB_OK;
    if (e->h_last && *e->h_last && *e->h_last == H)
        return lb_gptq_factor_make_inplace(e->h_last, q->in, o, fac);
    return lb_gptq_factor_make(H, q->in, o, fac);
}

/* GPTAQ: GPTQ's factor of the replayed inputs' H, the asymmetric term P
 * from the cross statistics (plain GPTQ where there are none: lm_head). */
static lb_status solve_gptaq(qz_engine *e, const qz_module *q, const float *W,
                             const float *H, lb_gptq_factor **fac,
                             lb_gptq_result *res) {
    if (!e->dxxt) return qz_solve_gptq(e, q, W, H, fac, res);
    lb_gptq_options o;
    gptq_options(e, q, &o);
    if (!fac)
        return lb_set_error(LB_ERR_INTERNAL, "%s: GPTAQ without a Hessian",
                            q->name);
    lb_status s = qz_engine_factor(e, q, H, &o, fac);
    if (s == LB_OK) qz_engine_h_spent(e);
    float *P = NULL;
    if (s == LB_OK)
        s = lb_gptaq_make_P(*fac, e->dxxt, (float)e->p->gptaq_alpha, &P);
    if (s == LB_OK && e->w_own && W == e->w_own) {
        e->w_spent = true;
        s = lb_gptaq_quantize_factored_inplace(e->w_own, q->out, q->in, *fac,
                                               &o, P, res);
    } else if (s == LB_OK) {
        s = lb_gptaq_quantize_factored(W, q->out, q->in, *fac, &o, P, res);
    }
    lb_free(P);
    return s;
}

/* QEP: correct W with the cross statistics, then GPTQ or RTN on W*. */
static lb_status solve_qep(qz_engine *e, const qz_module *q, const float *W,
                           const float *H, lb_gptq_factor **fac,
                           lb_gptq_result *res, bool gptq) {
    float *Wc = NULL;
    lb_status s = LB_OK;
    if (e->dxxt && H) {
        Wc = lb_alloc((size_t)(q->out * q->in) * sizeof(float));
        if (!Wc)
            return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", q->name);
        s = lb_qep_correct(W, q->out, q->in, H, e->dxxt, e->p->qep_alpha,
                           e->p->damp_percent, Wc);
    }
    const float *Wq = Wc ? Wc : W;
    if (s == LB_OK)
        s = gptq ? qz_solve_gptq(e, q, Wq, H, fac, res)
                 : solve_rtn(e, q, Wq, H, fac, res);
    lb_free(Wc);
    return s;
}

static lb_status solve_gptq_qep(qz_engine *e, const qz_module *q,
                                const float *W, const float *H,
                                lb_gptq_factor **fac, lb_gptq_result *res) {
    return solve_qep(e, q, W, H, fac, res, true);
}

static lb_status solve_rtn_qep(qz_engine *e, const qz_module *q,
                               const float *W, const float *H,
                               lb_gptq_factor **fac, lb_gptq_result *res) {
    return solve_qep(e, q, W, H, fac, res, false);
}

static void gptq_options(const qz_engine *e, const qz_module *q,
                         lb_gptq_options *o_out) {
    lb_gptq_options o;
    lb_gptq_options_default(&o);
    o.bits = q->bits;
    o.group_size = q->group_size;
    o.sym = q->sym;
    o.desc_act = q->desc_act;
    o.static_groups = e->p->static_groups;
    o.mse = e->p->mse;
    o.mse_norm = e->p->mse_norm;
    o.damp_percent = e->p->damp_percent;
    o.damp_auto_increment = e->p->damp_auto_increment;
    o.pool = e->ctx ? lb_context_pool(e->ctx) : NULL;
    *o_out = o;
}

static lb_status solve_rtn(qz_engine *e, const qz_module *q, const float *W,
                           const float *H, lb_gptq_factor **fac,
                           lb_gptq_result *res) {
    (void)H;
    (void)fac;
    return rtn(W, q->out, q->in, q, e->p, res);
}

static const qz_processor proc_rtn = {"rtn", 0, NULL, NULL, solve_rtn};
static const qz_processor proc_gptq = {
    "gptq", QZ_NEED_CALIB | QZ_NEED_HESSIAN, NULL, NULL, qz_solve_gptq};
static const qz_processor proc_gptaq = {
    "gptaq", QZ_NEED_CALIB | QZ_NEED_HESSIAN | QZ_NEED_NATIVE, NULL, NULL,
    solve_gptaq};
static const qz_processor proc_gptq_qep = {
    "gptq+qep", QZ_NEED_CALIB | QZ_NEED_HESSIAN | QZ_NEED_NATIVE | QZ_READS_H,
    NULL, NULL, solve_gptq_qep};
static const qz_processor proc_rtn_qep = {
    "rtn+qep", QZ_NEED_CALIB | QZ_NEED_HESSIAN | QZ_NEED_NATIVE | QZ_READS_H,
    NULL, NULL, solve_rtn_qep};

/* The processor of a parameter set: the method's, or its QEP variant. */
static const qz_processor *processor_of(const lb_quantize_params *p) {
    if (p->qep)
        return p->method == LB_QUANT_GPTQ  ? &proc_gptq_qep
               : p->method == LB_QUANT_RTN ? &proc_rtn_qep
                                           : NULL;
    return qz_processor_for(p->method);
}

const qz_processor *qz_processor_for(lb_quant_method m) {
    switch (m) {
    case LB_QUANT_RTN: return &proc_rtn;
    case LB_QUANT_GPTQ: return &proc_gptq;
    case LB_QUANT_AWQ: return &qz_proc_awq;
    case LB_QUANT_AWQ_GPTQ: return &qz_proc_awq_gptq;
    case LB_QUANT_GPTAQ: return &proc_gptaq;
    default: return NULL;
    }
}

/* Cached results of a previous run for `layer` (modules mods[0..n)). */
static lb_status try_cached(engine *e, int layer, const qz_module *lm, int n,
                            bool *found) {
    *found = false;
    if (!e->sink->layer_cached) return LB_OK;
    float **deq = calloc((size_t)n, sizeof *deq);
    lb_quantize_module_report *reps = calloc((size_t)n, sizeof *reps);
    if (!deq || !reps) {
        free(deq);
        free(reps);
        return lb_set_error(LB_ERR_NOMEM, "quantize: out of memory");
    }
    for (int i = 0; i < n; i++) reps[i] = e->rep->modules[lm - e->mods + i];
    lb_status s = e->sink->layer_cached(e->sink->user, layer, lm, n, deq,
                                        reps, found);
    if (s != LB_OK || !*found) {
        free(deq);
        free(reps);
        return s;
    }
    for (int i = 0; i < n; i++) {
        if (!lm[i].quantize) continue;
        e->rep->modules[lm - e->mods + i] = reps[i];
        e->rep->modules[lm - e->mods + i].resumed = true;
        if (s == LB_OK)
            s = swap_in(e, &lm[i], deq[i]);
        else
            lb_free(deq[i]);
        deq[i] = NULL;
    }
    free(deq);
    free(reps);
    /* dense tensors the method changed (AWQ's scaled norms, v bias) */
    for (int k = 0; k < QZ_DENSE_COUNT && s == LB_OK && e->sink->cached_tensor &&
                    layer < e->m->config.n_layers;
         k++) {
        const lb_tensor *t = dense_slot(e->m, layer, k);
        if (!t->data) continue;
        const int64_t nel = lb_tensor_nelements(t);
        float *buf = lb_alloc((size_t)nel * sizeof(float));
        if (!buf) return lb_set_error(LB_ERR_NOMEM, "out of memory");
        char name[160];
        qz_dense_name(&e->m->config, layer, k, name, sizeof name);
        bool f = false;
        s = e->sink->cached_tensor(e->sink->user, layer, name, buf, nel, &f);
        if (s == LB_OK && f && dense_plus_one(&e->m->config, k))
            for (int64_t i = 0; i < nel; i++) buf[i] += 1.0f;
        if (s == LB_OK && f)
            s = qz_engine_set_dense(e, layer, k, buf, nel, true);
        else
            lb_free(buf);
    }
    return s;
}

static const char *short_name(int which) {
    static const char *n[] = {"q", "k", "v", "o", "gate", "up", "down"};
    if (which >= QZ_EXP) return "expert";
    if (which >= QZ_SHEXP) return "shared_expert";
    if (which == QZ_QKV) return "qkv";
    if (which == QZ_GATE_UP) return "gate_up";
    return which >= 0 && which < LB_LINEAR_COUNT ? n[which] : "lm_head";
}

/* One GPTQ subset of layer l: modules `members` (linear ids). */
/* The module of layer l with code `which`, or NULL. */
static const qz_module *find_mod(const engine *e, int l, int which) {
    const qz_module *lm = e->mods + e->lfirst[l];
    for (int i = 0; i < e->lcount[l]; i++)
        if (lm[i].which == which) return &lm[i];
    return NULL;
}

/* The post-attention residuals of layer l can be kept in place of its
 * inputs: f32 activations (f16 would round h once more), a Llama-layout
 * dense layer (lb_layer_forward_mlp). */
static bool h_cacheable(const engine *e, int l) {
    return e->act32 && !lb_model_config_is_ext(&e->m->config) &&
           !layer_moe(e, l);
}

/* Which of layer l's modules are in their final form during a pass. */
enum { FIN_QKV = 1, FIN_ATTN = 2, FIN_GU = 4 };

/* One true-sequential subset of layer l: a forward pass over the
 * calibration sequences accumulating the Hessians of its members' inputs,
 * then their solves. fin (FIN_*): the modules in final form during this
 * pass. With q/k/v/o final a pass that runs the attention may keep the
 * post-attention residuals (engine h_kept) for the later passes; with
 * q/k/v final it may keep the attention output, with the attention and
 * gate/up final the MLP activation (--calib-cache). */
static lb_status run_subset(engine *e, int l, const int *members, int nm,
                            unsigned fin) {
    const bool attn_final = (fin & FIN_ATTN) != 0;
    capture c;
    memset(&c, 0, sizeof c);
    c.last = -1;
    c.e = e;
    int first = G_COUNT;
    bool any = false;
    char names[64] = "";
    for (int k = 0; k < nm; k++) {
        const qz_module *q = find_mod(e, l, members[k]);
        if (!q || !q->quantize) continue;
        int g = input_group(q->which);
        if (!c.H[g]) {
            lb_status s = qz_engine_hessian_create(e, q->in, &c.H[g]);
            if (s != LB_OK) {
                for (int i = 0; i < G_COUNT; i++) lb_gptq_hessian_free(c.H[i]);
                return s;
            }
        }
        if (e->nat && !c.D[g]) {
            c.D[g] = lb_calloc((size_t)(q->in * q->in), sizeof(float));
            if (!c.D[g]) {
                for (int i = 0; i < G_COUNT; i++) {
                    lb_gptq_hessian_free(c.H[i]);
                    lb_free(c.D[i]);
                }
                return lb_set_error(LB_ERR_NOMEM, "%s: out of memory for "
                                    "the cross statistics", q->name);
            }
        }
        if (g > c.last) c.last = g;
        if (g < first) first = g;
        size_t o = strlen(names);
        snprintf(names + o, sizeof names - o, "%s%s", any ? "," : "",
                 short_name(q->which));
        any = true;
    }
    if (!any) return LB_OK;
    lb_status s = LB_OK;
    if (e->nat) {
        const int64_t wmax = LB_MAX(e->dim, LB_MAX(
            (int64_t)e->m->config.intermediate_size,
            (int64_t)e->m->config.n_heads * e->m->config.head_dim));
        c.Xn = e->Xn;
        c.T = e->T;
        c.delta = lb_alloc((size_t)(e->T * wmax) * sizeof(float));
        if (!c.delta)
            s = lb_set_error(LB_ERR_NOMEM, "layer %d: out of memory", l);
    }
    snprintf(e->stage, sizeof e->stage, "layer %d/%d %s: hessians", l + 1,
             e->m->config.n_layers, names);
    /* from_h: start at the kept post-attention residual; keep_h: this
     * pass reaches gate_proj's input with the final attention, so the
     * residual it leaves in e->x (the forward stops there or at
     * down_proj's input, before the MLP adds to it) is kept */
    const bool from_h = e->h_kept && first >= G_MLP;
    const bool keep_h = !e->h_kept && attn_final && c.last >= G_MLP &&
                        h_cacheable(e, l);
    /* --calib-cache: start from the kept attention output (sequences
     * < nc) when o_proj is final; keep the attention output / the MLP
     * activation when this pass computes them in final form */
    const bool from_att = !from_h && e->att_ok && first >= G_MLP &&
                          cache_exact(e, l, LB_LINEAR_O);
    const bool keep_att = cache_layer(e, l) && !e->att_ok &&
                          (fin & FIN_QKV) && !from_h && c.last >= G_O;
    const bool keep_act = cache_layer(e, l) && !e->act_ok && attn_final &&
                          (fin & FIN_GU) && c.last >= G_DOWN &&
                          (from_h || keep_h);
    lb_forward_hook hook = {capture_hook, &c};
    lb_context_set_hook(e->ctx, &hook);
    const double t_loop = lb_time_s();
    for (int64_t i = 0; i < e->ns && s == LB_OK; i++) {
        qz_engine_act_load(e, i, e->x);
        c.stopped = false;
        c.seq = i;
        const bool cached = i < e->nc;
        c.keep_att = keep_att && cached ? cache_slot(e, false, i) : NULL;
        c.keep_act = keep_act && cached ? cache_slot(e, true, i) : NULL;
        if (from_h)
            s = lb_layer_forward_mlp(e->ctx, l, e->x, (int32_t)e->T, 0);
        else if (from_att && cached)
            s = lb_layer_forward_from(e->ctx, l, LB_LAYER_ENTRY_O,
                                      cache_get(e, false, i), e->x,
                                      (int32_t)e->T, 0);
        else
            s = lb_layer_forward(e->ctx, l, e->x, (int32_t)e->T, 0);
        if (s == LB_ERR_CANCELLED && c.stopped) {
            s = LB_OK;
            lb_clear_error();
            if (keep_h) act_store(e, i, e->x);
        } else if (s == LB_OK && keep_h) {
            s = lb_set_error(LB_ERR_INTERNAL, "layer %d: the pass of %s did "
                             "not stop at its last input", l, names);
        }
        seq_release(e, i);
        if (s == LB_OK) s = qz_engine_progress(e, 1);
    }
    if (s == LB_OK && keep_h) e->h_kept = true;
    if (s == LB_OK && keep_att) e->att_ok = true;
    if (s == LB_OK && keep_act) e->act_ok = true;
    lb_context_set_hook(e->ctx, NULL);
    /* the forward's scratch (at the 7B shapes [T, intermediate_size] and
     * [T, hidden] f32, ~0.3 GiB) is idle while the subset is solved: its
     * pages go back, the next forward faults them in again */
    lb_context_release_scratch(e->ctx);
    e->rep->hessian_seconds += c.t_hessian;
    e->rep->forward_seconds += lb_time_s() - t_loop - c.t_hessian;
    lb_free(c.delta);
    /* D = 2/ns sum: the scale of H (lb_gptq_hessian) */
    for (int g = 0; g < G_COUNT && s == LB_OK; g++)
        if (c.D[g]) {
            const int64_t in = g == G_DOWN ? e->m->config.intermediate_size
                               : g == G_O
                                   ? (int64_t)e->m->config.n_heads *
                                         e->m->config.head_dim
                                   : e->dim;
            const float sc = (float)(2.0 / (double)e->ns);
            for (int64_t i = 0; i < in * in; i++) c.D[g][i] *= sc;
        }
    /* each input's H, taken from its accumulator (whose scratch goes
     * with it), and its inverse-Hessian factors (one per desc_act
     * setting): q/k/v and gate/up share theirs. H goes to its last
     * reader: the module making the input's last factor (the factor is
     * made in H's buffer), or with QZ_READS_H the input's last module (H
     * freed as soon as its factor is made); the factors are freed after
     * the input's last module. */
    float *H[G_COUNT] = {NULL};
    int64_t nsamp[G_COUNT] = {0};
    lb_gptq_factor *fac[G_COUNT][2] = {{NULL}};
    int k_last[G_COUNT] = {-1, -1, -1, -1};
    int k_hread[G_COUNT] = {-1, -1, -1, -1};
    bool fac_seen[G_COUNT][2] = {{false}};
    for (int k = 0; k < nm; k++) {
        const qz_module *q = find_mod(e, l, members[k]);
        if (!q || !q->quantize) continue;
        const int g = input_group(q->which);
        k_last[g] = k;
        if ((e->proc->needs & QZ_READS_H) || !fac_seen[g][q->desc_act ? 1 : 0])
            k_hread[g] = k;
        fac_seen[g][q->desc_act ? 1 : 0] = true;
    }
    for (int g = 0; g < G_COUNT && s == LB_OK; g++) {
        if (!c.H[g]) continue;
        nsamp[g] = lb_gptq_hessian_nsamples(c.H[g]);
        s = lb_gptq_hessian_take(c.H[g], &H[g]);
        c.H[g] = NULL;
    }
    double loss_sum = 0.0;
    for (int k = 0; k < nm && s == LB_OK; k++) {
        const qz_module *q = find_mod(e, l, members[k]);
        if (!q || !q->quantize) continue;
        const int g = input_group(q->which);
        snprintf(e->stage, sizeof e->stage, "layer %d/%d %s: gptq %s", l + 1,
                 e->m->config.n_layers, names, short_name(q->which));
        e->dxxt = c.D[g];
        e->h_last = k == k_hread[g] ? &H[g] : NULL;
        s = quantize_module(e, q, H[g], &fac[g][q->desc_act ? 1 : 0],
                            nsamp[g]);
        e->dxxt = NULL;
        e->h_last = NULL;
        if (k == k_hread[g]) {
            lb_free(H[g]);
            H[g] = NULL;
        }
        if (k == k_last[g]) {
            lb_gptq_factor_free(fac[g][0]);
            lb_gptq_factor_free(fac[g][1]);
            fac[g][0] = fac[g][1] = NULL;
        }
        if (s == LB_OK) {
            loss_sum += e->rep->modules[q - e->mods].loss;
            snprintf(e->stage, sizeof e->stage, "layer %d/%d %s: loss %.4g",
                     l + 1, e->m->config.n_layers, names, loss_sum);
            s = qz_engine_progress(e, 1);
        }
    }
    for (int i = 0; i < G_COUNT; i++) {
        lb_gptq_hessian_free(c.H[i]);
        lb_free(H[i]);
        lb_free(c.D[i]);
        lb_gptq_factor_free(fac[i][0]);
        lb_gptq_factor_free(fac[i][1]);
    }
    return s;
}

static int count_quantized(const qz_module *m, int n) {
    int k = 0;
    for (int i = 0; i < n; i++) k += m[i].quantize;
    return k;
}

/* Work units of layer l before its replay: the processor's layer_begin,
 * one per calibration forward of each subset with work (Hessian
 * processors), one per solve. */
static bool layer_moe(const engine *e, int l) {
    const lb_model_config *c = &e->m->config;
    return c->n_experts > 0 && lb_model_config_layer_moe(c, l) &&
           e->m->layers[l].exp;
}

static uint64_t layer_units(const engine *e, int l) {
    const qz_module *lm = e->mods + e->lfirst[l];
    const int nq = count_quantized(lm, e->lcount[l]);
    uint64_t u = (uint64_t)nq;
    if (nq && e->proc->layer_begin_units) u += e->proc->layer_begin_units(e, l);
    if (e->proc->needs & QZ_NEED_NATIVE) u += (uint64_t)e->ns;
    if (!(e->proc->needs & QZ_NEED_HESSIAN)) return u;
    for (int k = 0; k < e->arch.n_subsets; k++) {
        bool any = false;
        for (int j = 0; j < e->arch.subset_n[k]; j++) {
            const qz_module *q = find_mod(e, l, e->arch.subsets[k][j]);
            if (q && q->quantize) any = true;
        }
        if (any) u += (uint64_t)e->ns;
    }
    if (layer_moe(e, l)) u += qz_moe_units(e, l, lm, e->lcount[l]);
    return u;
}

/* Work units for the progress bar. */
static uint64_t count_units(const engine *e) {
    const int L = e->m->config.n_layers;
    const bool gptq = (e->proc->needs & QZ_NEED_CALIB) != 0;
    const bool head = e->n_mods > 0 &&
                      e->mods[e->n_mods - 1].which == QZ_LM_HEAD &&
                      e->mods[e->n_mods - 1].quantize;
    uint64_t u = 0;
    for (int l = 0; l < L; l++) {
        u += layer_units(e, l);
        if (gptq && (l + 1 < L || head)) u += (uint64_t)e->ns; /* replay */
    }
    if (head)
        u += (e->proc->needs & QZ_NEED_HESSIAN) ? (uint64_t)e->ns + 1 : 1;
    return u;
}

/* qz_engine_capture's hook state. */
typedef struct xcapture {
    float **X;
    int64_t width[G_COUNT];
    int last;
    bool stopped;
    int64_t seq, T;
} xcapture;

static lb_status xcapture_hook(void *user, int layer, lb_linear_id which,
                               const float *X, int64_t n, int64_t in) {
    xcapture *c = user;
    if (which == LB_LINEAR_K || which == LB_LINEAR_V || which == LB_LINEAR_UP)
        return LB_OK;
    const int g = input_group(which);
    if (c->X[g]) {
        int64_t r, col;
        if (!all_within(X, n, in, INFINITY, &r, &col))
            return lb_set_error(
                LB_ERR_RANGE,
                "layer %d, calibration sequence %lld: the input of "
                "model.layers.%d.%s is not finite (token %lld, column %lld = "
                "%g): the layer produced NaN/Inf before it (weights or "
                "activations overflowing float32)",
                layer, (long long)c->seq, layer, group_modules(g),
                (long long)r, (long long)col, (double)X[r * in + col]);
        if (in != c->width[g] || n != c->T)
            return lb_set_error(LB_ERR_INTERNAL, "capture: input [%lld, %lld]"
                                " of %s", (long long)n, (long long)in,
                                group_modules(g));
        memcpy(c->X[g] + (size_t)(c->seq * c->T * in), X,
               (size_t)(n * in) * sizeof(float));
    }
    if (g == c->last) {
        c->stopped = true;
        return LB_ERR_CANCELLED;
    }
    return LB_OK;
}

lb_status qz_engine_capture(qz_engine *e, int layer,
                            const bool want[QZ_IN_COUNT],
                            float *X[QZ_IN_COUNT]) {
    const lb_model_config *cfg = &e->m->config;
    xcapture c;
    memset(&c, 0, sizeof c);
    c.X = X;
    c.T = e->T;
    c.last = -1;
    c.width[G_ATTN] = c.width[G_MLP] = cfg->hidden_size;
    c.width[G_O] = (int64_t)cfg->n_heads * cfg->head_dim;
    c.width[G_DOWN] = cfg->intermediate_size;
    lb_status s = LB_OK;
    for (int g = 0; g < G_COUNT; g++) {
        X[g] = NULL;
        if (!want[g]) continue;
        size_t n;
        if (!lb_mul_ok((size_t)(e->ns * e->T), (size_t)c.width[g], &n) ||
            !lb_mul_ok(n, sizeof(float), &n)) {
            s = lb_set_error(LB_ERR_OVERFLOW, "capture: size overflows");
            break;
        }
        X[g] = lb_alloc(n);
        if (!X[g]) {
            s = lb_set_error(LB_ERR_NOMEM, "layer %d: out of memory for the "
                             "inputs of %s (%zu bytes)", layer,
                             group_modules(g), n);
            break;
        }
        c.last = g;
    }
    lb_forward_hook hook = {xcapture_hook, &c};
    if (s == LB_OK) lb_context_set_hook(e->ctx, &hook);
    const double t0 = lb_time_s();
    for (int64_t i = 0; i < e->ns && s == LB_OK && c.last >= 0; i++) {
        qz_engine_act_load(e, i, e->x);
        c.stopped = false;
        c.seq = i;
        s = lb_layer_forward(e->ctx, layer, e->x, (int32_t)e->T, 0);
        if (s == LB_ERR_CANCELLED && c.stopped) {
            s = LB_OK;
            lb_clear_error();
        }
        if (s == LB_OK) s = qz_engine_progress(e, 1);
    }
    lb_context_set_hook(e->ctx, NULL);
    e->rep->forward_seconds += lb_time_s() - t0;
    if (s != LB_OK)
        for (int g = 0; g < G_COUNT; g++) {
            lb_free(X[g]);
            X[g] = NULL;
        }
    return s;
}

/* QZ_NEED_NATIVE: run the native stream through layer l as the source
 * model has it (called before anything of the layer is changed), keep the
 * native inputs of its linears in e->Xn and its outputs as the next native
 * inputs. */
static lb_status native_layer(engine *e, int l) {
    for (int g = 0; g < G_COUNT; g++) {
        if (e->Xn[g]) buf_free(e, e->Xn[g], e->xn_bytes[g]);
        e->Xn[g] = NULL;
    }
    const lb_model_config *cfg = &e->m->config;
    xcapture c;
    memset(&c, 0, sizeof c);
    c.X = e->Xn;
    c.T = e->T;
    c.last = G_COUNT; /* never stops: the whole layer runs */
    c.width[G_ATTN] = c.width[G_MLP] = cfg->hidden_size;
    c.width[G_O] = (int64_t)cfg->n_heads * cfg->head_dim;
    c.width[G_DOWN] = cfg->intermediate_size;
    for (int g = 0; g < G_COUNT; g++) {
        size_t n;
        if (!lb_mul_ok((size_t)(e->ns * e->T), (size_t)c.width[g], &n) ||
            !lb_mul_ok(n, sizeof(float), &n))
            return lb_set_error(LB_ERR_OVERFLOW, "native: size overflows");
        void *p = NULL;
        lb_status s = buf_alloc(e, n, "native inputs", &p);
        if (s != LB_OK)
            return lb_error_context(s, "layer %d, the native inputs of %s",
                                    l, group_modules(g));
        e->Xn[g] = p;
        e->xn_bytes[g] = n;
        if (e->spill && !e->xn_counted) e->rep->spill_bytes += n;
    }
    e->xn_counted = true;
    snprintf(e->stage, sizeof e->stage, "layer %d/%d: native inputs", l + 1,
             cfg->n_layers);
    lb_forward_hook hook = {xcapture_hook, &c};
    lb_context_set_hook(e->ctx, &hook);
    const double t0 = lb_time_s();
    const size_t n = (size_t)(e->T * e->dim);
    lb_status s = LB_OK;
    for (int64_t i = 0; i < e->ns && s == LB_OK; i++) {
        memcpy(e->x, e->nat + (size_t)i * n, n * sizeof(float));
        c.seq = i;
        s = lb_layer_forward(e->ctx, l, e->x, (int32_t)e->T, 0);
        int64_t r, col;
        if (s == LB_OK && !all_within(e->x, e->T, e->dim, INFINITY, &r, &col))
            s = lb_set_error(LB_ERR_RANGE, "layer %d, calibration sequence "
                             "%lld: the native output is not finite (token "
                             "%lld, column %lld)", l, (long long)i,
                             (long long)r, (long long)col);
        if (s == LB_OK) {
            memcpy(e->nat + (size_t)i * n, e->x, n * sizeof(float));
            s = qz_engine_progress(e, 1);
        }
        seq_release(e, i);
    }
    lb_context_set_hook(e->ctx, NULL);
    e->rep->forward_seconds += lb_time_s() - t0;
    return s;
}

static lb_status run_layers(engine *e) {
    const int L = e->m->config.n_layers;
    /* calib: the layer inputs are kept and replayed; hess: subsets are
     * solved with their Hessians */
    const bool calib = (e->proc->needs & QZ_NEED_CALIB) != 0;
    const bool hess = (e->proc->needs & QZ_NEED_HESSIAN) != 0;
    lb_status s = LB_OK;
    const bool head = e->n_mods > 0 &&
                      e->mods[e->n_mods - 1].which == QZ_LM_HEAD &&
                      e->mods[e->n_mods - 1].quantize;
    int cur = 0;
    for (int l = 0; l < L && s == LB_OK; l++) {
        const qz_module *lm = e->mods + e->lfirst[l];
        const int nl = e->lcount[l];
        int nq = count_quantized(lm, nl);
        bool cached = false;
        cur = l;
        e->h_kept = e->att_ok = e->act_ok = false;
        /* the native stream advances through every layer, cached or not */
        if (e->nat) s = native_layer(e, l);
        if (s == LB_OK && nq)
            s = try_cached(e, l, lm, nl, &cached);
        if (s != LB_OK) break;
        if (cached) {
            e->rep->layers_resumed++;
            snprintf(e->stage, sizeof e->stage, "layer %d/%d: resumed",
                     l + 1, L);
        } else if (nq) {
            if (e->proc->layer_begin) s = e->proc->layer_begin(e, l);
            if (hess) {
                /* q/k/v (o, gate/up) are final from the subset after the
                 * last one that quantizes one of them */
                int k_last[G_COUNT] = {-1, -1, -1, -1};
                for (int k = 0; k < e->arch.n_subsets; k++)
                    for (int i = 0; i < e->arch.subset_n[k]; i++) {
                        const qz_module *q = find_mod(e, l,
                                                      e->arch.subsets[k][i]);
                        if (q && q->quantize) k_last[input_group(q->which)] = k;
                    }
                for (int k = 0; k < e->arch.n_subsets && s == LB_OK; k++) {
                    const unsigned fin =
                        (k > k_last[G_ATTN] ? FIN_QKV : 0) |
                        (k > k_last[G_ATTN] && k > k_last[G_O] ? FIN_ATTN : 0) |
                        (k > k_last[G_MLP] ? FIN_GU : 0);
                    s = run_subset(e, l, e->arch.subsets[k],
                                   e->arch.subset_n[k], fin);
                }
                if (s == LB_OK && layer_moe(e, l))
                    s = qz_run_moe(e, l, lm, nl);
            } else {
                for (int i = 0; i < nl && s == LB_OK; i++) {
                    if (!lm[i].quantize) continue;
                    snprintf(e->stage, sizeof e->stage, "layer %d/%d: %s %s",
                             l + 1, L, e->proc->name,
                             short_name(lm[i].which));
                    s = quantize_module(e, &lm[i], NULL, NULL, 0);
                    if (s == LB_OK) s = qz_engine_progress(e, 1);
                }
            }
        }
        if (s != LB_OK) break;
        if (calib && (l + 1 < L || head)) {
            /* replay: the quantized layer's outputs feed layer l + 1 (or
             * lm_head's Hessian after the last layer) */
            snprintf(e->stage, sizeof e->stage, "layer %d/%d: replay", l + 1,
                     L);
            const double t_replay = lb_time_s();
            for (int64_t i = 0; i < e->ns && s == LB_OK; i++) {
                qz_engine_act_load(e, i, e->x);
                if (e->h_kept && e->act_ok && i < e->nc &&
                    cache_exact(e, l, LB_LINEAR_DOWN))
                    s = lb_layer_forward_from(e->ctx, l, LB_LAYER_ENTRY_DOWN,
                                              cache_get(e, true, i), e->x,
                                              (int32_t)e->T, 0);
                else if (e->h_kept)
                    s = lb_layer_forward_mlp(e->ctx, l, e->x, (int32_t)e->T, 0);
                else
                    s = lb_layer_forward(e->ctx, l, e->x, (int32_t)e->T, 0);
                /* kept as the next inputs: finite, and within the f16
                 * range when stored in f16 */
                const float lim = e->act16 ? 65504.0f : INFINITY;
                int64_t r, col;
                if (s == LB_OK &&
                    !all_within(e->x, e->T, e->dim, lim, &r, &col))
                    s = lb_set_error(
                        LB_ERR_RANGE,
                        "layer %d, calibration sequence %lld: the output of "
                        "the quantized layer (the input of %s) is %s (token "
                        "%lld, column %lld = %g)%s",
                        l, (long long)i,
                        l + 1 < L ? "the next layer" : "lm_head",
                        isfinite(e->x[r * e->dim + col])
                            ? "beyond the f16 range of act_f16 (--act-f16)"
                            : "not finite",
                        (long long)r, (long long)col,
                        (double)e->x[r * e->dim + col],
                        isfinite(e->x[r * e->dim + col])
                            ? ": keep the activations in f32"
                            : ": weights or activations overflow float32");
                if (s == LB_OK) {
                    act_store(e, i, e->x);
                    s = qz_engine_progress(e, 1);
                }
                seq_release(e, i);
            }
            e->rep->replay_seconds += lb_time_s() - t_replay;
        }
        if (s == LB_OK && cached)
            s = qz_engine_progress(e, layer_units(e, l) -
                                ((e->proc->needs & QZ_NEED_NATIVE)
                                     ? (uint64_t)e->ns
                                     : 0));
        if (s == LB_OK && nq && !cached && e->sink->layer_done)
            s = e->sink->layer_done(e->sink->user, l);
        if (!e->sink->keep_in_model) {
            /* layer l is not read again (a sink's later read faults the
             * pages in again): its source pages leave the RSS */
            restore_layer(e, l);
            lb_model_release_layer(e->m, l);
        }
        /* its KV cache is written again only by its own forwards */
        lb_context_release_kv(e->ctx, l);
    }
    if (s != LB_OK) {
        if (!e->sink->keep_in_model) restore_layer(e, cur);
        return s;
    }
    /* lm_head: its input is the final RMSNorm of the last hidden states */
    if (head) {
        const qz_module *q = &e->mods[e->n_mods - 1];
        bool cached = false;
        s = try_cached(e, L, q, 1, &cached);
        if (s != LB_OK || cached) {
            if (cached) {
                e->rep->layers_resumed++;
                snprintf(e->stage, sizeof e->stage, "lm_head: resumed");
                s = qz_engine_progress(e, hess ? (uint64_t)e->ns + 1 : 1);
            }
            return s;
        }
        snprintf(e->stage, sizeof e->stage, "lm_head: %s",
                 hess ? "hessian" : e->proc->name);
        float *H = NULL;
        int64_t nsamp = 0;
        if (hess) {
            lb_gptq_hessian *h = NULL;
            LB_TRY(qz_engine_hessian_create(e, q->in, &h));
            float *xn = lb_alloc((size_t)(e->T * e->dim) * sizeof(float));
            if (!xn) s = lb_set_error(LB_ERR_NOMEM, "lm_head: out of memory");
            for (int64_t i = 0; i < e->ns && s == LB_OK; i++) {
                qz_engine_act_load(e, i, e->x);
                for (int64_t t = 0; t < e->T; t++)
                    lb_rmsnorm(xn + t * e->dim, e->x + t * e->dim,
                               e->m->output_norm.data, e->dim,
                               e->m->config.rms_norm_eps);
                const double th = lb_time_s();
                s = lb_gptq_hessian_add_batch(h, xn, e->T, 1);
                e->rep->hessian_seconds += lb_time_s() - th;
                if (s == LB_OK) s = qz_engine_progress(e, 1);
            }
            lb_free(xn);
            nsamp = lb_gptq_hessian_nsamples(h);
            if (s == LB_OK)
                s = lb_gptq_hessian_take(h, &H);
            else
                lb_gptq_hessian_free(h);
            if (s != LB_OK) return s;
            snprintf(e->stage, sizeof e->stage, "lm_head: gptq");
        }
        lb_gptq_factor *fac = NULL;
        e->h_last = H ? &H : NULL;
        s = quantize_module(e, q, H, hess ? &fac : NULL, nsamp);
        e->h_last = NULL;
        lb_gptq_factor_free(fac);
        lb_free(H);
        if (s == LB_OK) {
            snprintf(e->stage, sizeof e->stage, "lm_head: loss %.4g",
                     e->rep->modules[e->n_mods - 1].loss);
            s = qz_engine_progress(e, 1);
        }
        if (s == LB_OK && e->sink->layer_done)
            s = e->sink->layer_done(e->sink->user, L);
    }
    return s;
}

static void fmt_bytes(char *buf, size_t n, double b) {
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, n, "%.1f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024)
        snprintf(buf, n, "%.1f MiB", b / (1024.0 * 1024));
    else
        snprintf(buf, n, "%.1f KiB", b / 1024.0);
}

lb_status qz_run(lb_model *m, const lb_quantize_params *p,
                 const lb_calib *calib, const qz_module *mods, int n_mods,
                 qz_sink *sink, lb_quantize_report *rep) {
    engine e;
    memset(&e, 0, sizeof e);
    e.m = m;
    e.p = p;
    e.cal = calib;
    e.mods = mods;
    e.n_mods = n_mods;
    e.sink = sink;
    e.rep = rep;
    const double t0 = lb_time_s();
    rep->modules = calloc((size_t)n_mods, sizeof *rep->modules);
    if (!rep->modules) return lb_set_error(LB_ERR_NOMEM, "quantize: out of "
                                           "memory");
    rep->n_modules = n_mods;
    rep->n_layers = m->config.n_layers;
    for (int i = 0; i < n_mods; i++)
        fill_report_static(&rep->modules[i], &mods[i], m->config.n_layers);
    e.proc = processor_of(p);
    if (!e.proc)
        return lb_set_error(LB_ERR_INVALID_ARG, "quantize: unknown method %d",
                            (int)p->method);
    LB_TRY(qz_check_arch(m, p));
    qz_arch_get(&m->config, p->true_sequential, &e.arch);
    const bool need_calib = (e.proc->needs & QZ_NEED_CALIB) &&
                            count_quantized(mods, n_mods) > 0;
    if (need_calib) { /* before anything is allocated */
        if (!calib || !calib->ids || calib->nsamples < 1 || calib->seqlen < 1)
            return lb_set_error(LB_ERR_INVALID_ARG,
                                "quantize: %s needs calibration data",
                                p->method == LB_QUANT_GPTQ ? "GPTQ"
                                                           : e.proc->name);
        if (calib->seqlen > (1 << 24))
            return lb_set_error(LB_ERR_INVALID_ARG, "quantize: seqlen %lld",
                                (long long)calib->seqlen);
    }
    const int L = m->config.n_layers;
    e.lfirst = calloc((size_t)L + 1, sizeof *e.lfirst);
    e.lcount = calloc((size_t)L + 1, sizeof *e.lcount);
    if (!e.lfirst || !e.lcount) {
        free(e.lfirst);
        free(e.lcount);
        return lb_set_error(LB_ERR_NOMEM, "quantize: out of memory");
    }
    for (int i = n_mods - 1; i >= 0; i--) {
        const int l = mods[i].which == QZ_LM_HEAD ? L : mods[i].layer;
        if (l < 0 || l > L) continue;
        e.lfirst[l] = i;
        e.lcount[l]++;
    }
    lb_status s = LB_OK;
    if (need_calib) {
        e.ns = calib->nsamples;
        e.T = calib->seqlen;
        e.dim = m->config.hidden_size;
        rep->nsamples = e.ns;
        rep->seqlen = e.T;
        if (e.T > m->config.max_position_embeddings)
            lb_log(LB_LOG_WARN, "calibration seqlen %lld exceeds the model's "
                   "max_position_embeddings %d", (long long)e.T,
                   m->config.max_position_embeddings);
        size_t n_act;
        const size_t esz = p->act_f16 ? 2 : 4;
        if (!lb_mul_ok((size_t)e.ns, (size_t)e.T, &n_act) ||
            !lb_mul_ok(n_act, (size_t)e.dim, &n_act) ||
            !lb_mul_ok(n_act, esz, &n_act)) {
            s = lb_set_error(LB_ERR_OVERFLOW, "quantize: activation size "
                             "overflows");
            goto done;
        }
        rep->activation_bytes = n_act;
        char mem[32];
        fmt_bytes(mem, sizeof mem, (double)n_act);
        e.spill = p->act_spill_dir != NULL;
        lb_log(LB_LOG_INFO,
               "calibration activations: %lld x %lld x %lld %s = %s%s%s",
               (long long)e.ns, (long long)e.T, (long long)e.dim,
               p->act_f16 ? "f16" : "f32", mem,
               e.spill ? ", spilled to a temporary file in " : "",
               e.spill ? p->act_spill_dir : "");
        void *act = NULL;
        s = buf_alloc(&e, n_act, "calibration activations", &act);
        if (s != LB_OK) {
            if (!e.spill)
                s = lb_set_error(LB_ERR_NOMEM, "quantize: cannot allocate "
                                 "the calibration activations (%s)", mem);
            goto done;
        }
        if (p->act_f16)
            e.act16 = act;
        else
            e.act32 = act;
        e.act_bytes = n_act;
        if (e.spill) rep->spill_bytes += n_act;
        e.x = lb_alloc((size_t)(e.T * e.dim) * sizeof(float));
        if (!e.x) {
            s = lb_set_error(LB_ERR_NOMEM, "quantize: out of memory");
            goto done;
        }
        if (e.proc->needs & QZ_NEED_NATIVE) {
            /* the native stream, always f32 */
            size_t n_nat = n_act / esz * sizeof(float);
            void *nat = NULL;
            s = buf_alloc(&e, n_nat, "native activations", &nat);
            if (s != LB_OK) goto done;
            e.nat = nat;
            e.nat_bytes = n_nat;
            if (e.spill) rep->spill_bytes += n_nat;
        }
        lb_context_params cp = lb_context_default_params();
        cp.n_ctx = (int32_t)e.T;
        cp.n_batch = (int32_t)e.T;
        cp.n_threads = p->n_threads;
        cp.bf16_activations = p->calib_bf16;
        if ((s = lb_context_create(m, &cp, &e.ctx)) != LB_OK) goto done;
        rep->calib_bf16 = lb_context_bf16_active(e.ctx);
        if (p->calib_bf16 && !rep->calib_bf16)
            lb_log(LB_LOG_WARN, "quantize: calib_bf16: this CPU has no "
                   "AVX512_BF16, the calibration forwards run in f32");
        /* the Hessians' products in bf16 too (not with --hessian-f64) */
        if (rep->calib_bf16 && !p->hessian_f64 &&
            lb_gram_bf16_available()) {
            e.hpool = lb_pool_create(p->n_threads);
            if (!e.hpool) {
                s = lb_set_error(LB_ERR_NOMEM, "quantize: cannot create the "
                                 "Hessian workers");
                goto done;
            }
        }
        if ((s = cache_alloc(&e)) != LB_OK) goto done;
    }
    int n_short = 0;
    for (int i = 0; i < n_mods; i++)
        if (mods[i].quantize && mods[i].note[0] && !n_short++)
            lb_log(LB_LOG_WARN, "%s: %s (AutoGPTQ's layout; vLLM, Marlin and "
                   "ExLlama kernels need in_features %% group_size == 0)",
                   mods[i].name, mods[i].note);
    if (n_short > 1)
        lb_log(LB_LOG_WARN, "%d modules in all have a shorter last group "
               "(see the report's notes)", n_short);
    e.total = count_units(&e);
    snprintf(e.stage, sizeof e.stage, "quantize: start");
    if ((s = qz_engine_progress(&e, 0)) != LB_OK) goto done;
    if (need_calib) {
        /* layer-0 inputs: the embeddings of every sequence */
        for (int64_t i = 0; i < e.ns && s == LB_OK; i++) {
            s = lb_model_embed(e.ctx, calib->ids + i * e.T, (int32_t)e.T, e.x);
            if (s != LB_OK)
                s = lb_error_context(s, "calibration sequence %lld",
                                     (long long)i);
            else {
                act_store(&e, i, e.x);
                if (e.nat)
                    memcpy(e.nat + (size_t)(i * e.T * e.dim), e.x,
                           (size_t)(e.T * e.dim) * sizeof(float));
                seq_release(&e, i);
            }
        }
        if (s != LB_OK) goto done;
        /* the rows looked up leave the RSS (a tied lm_head reads them
         * again at the end) */
        lb_model_release_tensor(e.m, &e.m->tok_embd);
    }
    s = run_layers(&e);
done:
    free(e.lfirst);
    free(e.lcount);
    free(e.sw);
    lb_context_free(e.ctx);
    lb_pool_free(e.hpool);
    if (e.nat) buf_free(&e, e.nat, e.nat_bytes);
    for (int g = 0; g < G_COUNT; g++)
        if (e.Xn[g]) buf_free(&e, e.Xn[g], e.xn_bytes[g]);
    if (e.act32) buf_free(&e, e.act32, e.act_bytes);
    if (e.act16) buf_free(&e, e.act16, e.act_bytes);
    lb_free(e.x);
    if (e.attc) buf_free(&e, e.attc, e.attc_bytes);
    if (e.actc) buf_free(&e, e.actc, e.actc_bytes);
    lb_free(e.cx);
    rep->seconds = lb_time_s() - t0;
    /* totals */
    double snr_sum = 0.0;
    int n_snr = 0;
    rep->snr_min_db = INFINITY;
    rep->snr_max_db = -INFINITY;
    double bits = 0.0;
    for (int i = 0; i < rep->n_modules; i++) {
        const lb_quantize_module_report *r = &rep->modules[i];
        if (!r->quantized) continue;
        int64_t o = r->out_features, in = r->in_features;
        int64_t ng = r->group_size < 0 ? 1 : (in + r->group_size - 1) / r->group_size;
        rep->quantized_params += o * in;
        if (p->fp8) { /* FP8 codes + float32 scales */
            int nd;
            int64_t sh[2];
            lb_fp8_scale_shape(p->fp8, o, in, &nd, sh);
            bits += 8.0 * (double)(o * in) + 32.0 * (double)(nd == 2 ? sh[0] * sh[1] : 1);
        } else {
            bits += 8.0 * (double)(in * r->bits / 32 * o * 4 +
                                   ng * (o * r->bits / 32) * 4 + ng * o * 2 +
                                   (p->format == LB_GPTQ_FORMAT_AWQ ? 0 : in * 4));
        }
        if (!isnan(r->snr_db)) {
            if (r->snr_db < rep->snr_min_db) rep->snr_min_db = r->snr_db;
            if (r->snr_db > rep->snr_max_db) rep->snr_max_db = r->snr_db;
            snr_sum += r->snr_db;
            n_snr++;
        }
    }
    rep->bits_per_weight =
        rep->quantized_params ? bits / (double)rep->quantized_params : 0.0;
    rep->snr_mean_db = n_snr ? snr_sum / n_snr : NAN;
    if (!n_snr) rep->snr_min_db = rep->snr_max_db = NAN;
    return s;
}

/* ------------------------------------------------------------------------ */
/* In-place                                                                  */
/* ------------------------------------------------------------------------ */

lb_status lb_quantize_model_inplace(lb_model *m, const lb_quantize_params *p,
                                    const lb_calib *calib,
                                    lb_quantize_report *rep) {
    lb_quantize_report local;
    if (!rep) rep = &local;
    memset(rep, 0, sizeof *rep);
    if (!m) return lb_set_error(LB_ERR_INVALID_ARG, "quantize: NULL model");
    lb_quantize_params e;
    LB_TRY(qz_effective_params(p, &e));
    LB_TRY(qz_check_arch(m, &e));
    if (e.rotate != LB_ROTATE_NONE)
        LB_TRY(lb_model_rotate_hadamard(m, e.rotate_seed));
    if (e.rotate == LB_ROTATE_HADAMARD_R4)
        LB_TRY(lb_model_rotate_online_down(m));
    qz_rule *rules = NULL;
    LB_TRY(qz_rules_parse(e.rules, e.n_rules, &rules));
    qz_module *mods = NULL;
    int n_mods = 0;
    lb_status s = qz_plan(m, &e, rules, e.n_rules, &mods, &n_mods);
    if (s == LB_OK) {
        qz_sink sink = {0};
        sink.keep_in_model = true;
        s = qz_run(m, &e, calib, mods, n_mods, &sink, rep);
    }
    free(mods);
    qz_rules_free(rules, e.n_rules);
    if (s != LB_OK || rep == &local) lb_quantize_report_free(rep);
    return s;
}

/* ------------------------------------------------------------------------ */
/* JSON report                                                               */
/* ------------------------------------------------------------------------ */

static void add_num(cJSON *o, const char *k, double v) {
    if (isfinite(v))
        cJSON_AddNumberToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

char *lb_quantize_report_json(const lb_quantize_report *r,
                              const lb_quantize_params *p) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    if (p) {
        cJSON_AddStringToObject(j, "method", qz_method_name(p->method));
        if (p->method == LB_QUANT_GPTAQ)
            add_num(j, "gptaq_alpha", p->gptaq_alpha);
        if (p->qep) {
            cJSON_AddTrueToObject(j, "qep");
            add_num(j, "qep_alpha", p->qep_alpha);
        }
        if (p->fp8) { /* the FP8 grid: 8-bit codes, groups as fp8.scales */
            cJSON_AddNumberToObject(j, "bits", 8);
            cJSON_AddNullToObject(j, "group_size");
        } else {
            cJSON_AddNumberToObject(j, "bits", p->bits);
            cJSON_AddNumberToObject(j, "group_size", p->group_size);
        }
        cJSON_AddBoolToObject(j, "sym", p->sym);
        cJSON_AddBoolToObject(j, "desc_act", p->desc_act);
        cJSON_AddBoolToObject(j, "static_groups", p->static_groups);
        cJSON_AddBoolToObject(j, "true_sequential", p->true_sequential);
        cJSON_AddBoolToObject(j, "lm_head", p->lm_head);
        cJSON_AddBoolToObject(j, "mse", p->mse);
        add_num(j, "damp_percent", p->damp_percent);
        cJSON_AddStringToObject(j, "checkpoint_format",
                                p->fp8                           ? "fp8"
                                : p->format == LB_GPTQ_FORMAT_AWQ  ? "awq"
                                : p->format == LB_GPTQ_FORMAT_V2 ? "gptq_v2"
                                                                 : "gptq");
        if (p->fp8) {
            char *f = lb_fp8_settings_json(p->fp8, p->fp8_rule);
            if (!f) {
                cJSON_Delete(j);
                return NULL;
            }
            cJSON_AddRawToObject(j, "fp8", f);
            free(f);
        }
        if (p->profile == LB_QUANT_PROFILE_VLLM_W4A8)
            cJSON_AddStringToObject(j, "profile", "vllm-w4a8");
    }
    cJSON_AddNumberToObject(j, "nsamples", (double)r->nsamples);
    cJSON_AddNumberToObject(j, "seqlen", (double)r->seqlen);
    cJSON_AddNumberToObject(j, "activation_bytes", (double)r->activation_bytes);
    cJSON_AddNumberToObject(j, "cache_sequences", (double)r->cache_sequences);
    cJSON_AddNumberToObject(j, "cache_bytes", (double)r->cache_bytes);
    cJSON_AddNumberToObject(j, "spill_bytes", (double)r->spill_bytes);
    add_num(j, "seconds", r->seconds);
    cJSON_AddStringToObject(j, "calib_dtype", r->calib_bf16 ? "bf16" : "f32");
    cJSON *tm = cJSON_AddObjectToObject(j, "timing");
    add_num(tm, "hessian_s", r->hessian_seconds);
    add_num(tm, "forward_s", r->forward_seconds);
    add_num(tm, "solve_s", r->solve_seconds);
    add_num(tm, "replay_s", r->replay_seconds);
    cJSON_AddNumberToObject(j, "layers", r->n_layers);
    cJSON_AddNumberToObject(j, "layers_resumed", r->layers_resumed);
    cJSON_AddNumberToObject(j, "quantized_params", (double)r->quantized_params);
    add_num(j, "bits_per_weight", r->bits_per_weight);
    cJSON *snr = cJSON_AddObjectToObject(j, "snr_db");
    add_num(snr, "min", r->snr_min_db);
    add_num(snr, "max", r->snr_max_db);
    add_num(snr, "mean", r->snr_mean_db);
    cJSON_AddNumberToObject(j, "shards", r->n_shards);
    cJSON_AddNumberToObject(j, "tensor_bytes", (double)r->tensor_bytes);
    cJSON *arr = cJSON_AddArrayToObject(j, "modules");
    for (int i = 0; i < r->n_modules; i++) {
        const lb_quantize_module_report *m = &r->modules[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", m->name);
        cJSON_AddBoolToObject(o, "quantized", m->quantized);
        if (m->note[0]) cJSON_AddStringToObject(o, "note", m->note);
        int shape[2] = {(int)m->out_features, (int)m->in_features};
        cJSON_AddItemToObject(o, "shape", cJSON_CreateIntArray(shape, 2));
        if (m->quantized) {
            if (p && p->fp8) {
                cJSON_AddNumberToObject(o, "bits", 8);
                cJSON_AddNullToObject(o, "group_size");
            } else {
                cJSON_AddNumberToObject(o, "bits", m->bits);
                cJSON_AddNumberToObject(o, "group_size", m->group_size);
            }
            cJSON_AddBoolToObject(o, "sym", m->sym);
            cJSON_AddBoolToObject(o, "desc_act", m->desc_act);
            add_num(o, "loss", m->loss);
            add_num(o, "avg_loss", m->avg_loss);
            add_num(o, "damp_percent", m->damp_percent);
            cJSON_AddNumberToObject(o, "damp_retries", m->n_damp_retries);
            cJSON_AddNumberToObject(o, "dead_columns", (double)m->n_dead);
            cJSON_AddNumberToObject(o, "nsamples", (double)m->nsamples);
            add_num(o, "seconds", m->seconds);
            add_num(o, "snr_db", m->snr_db);
            cJSON_AddBoolToObject(o, "resumed", m->resumed);
            if (m->awq_ratio >= 0.0) add_num(o, "awq_ratio", m->awq_ratio);
            if (m->awq_clipped)
                cJSON_AddNumberToObject(o, "awq_clipped_groups",
                                        (double)m->awq_clipped);
            if (m->awq_plain) cJSON_AddTrueToObject(o, "awq_plain");
        }
        cJSON_AddItemToArray(arr, o);
    }
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    return s;
}
