/*
 * fp8_ckpt.c — the FP8 weight-only checkpoint writer (lowbit/fp8.h,
 * `lowbit quantize --method fp8`). No calibration: every decoder-layer
 * linear is quantized on its own, one at a time, inside the safetensors
 * writer's producer (peak memory: one weight in f32 plus its codes).
 * Also the writer of GPTQ onto the FP8 grid (`--method gptq
 * --checkpoint-format fp8`, qz_fp8_gptq_checkpoint): the layer pipeline
 * (quantize.c) solves every linear, a sink keeps the codes and scales, and
 * the same writer takes them instead of quantizing.
 */
#include "quant/nocalib_ckpt.h"
#include "quant/quantize_internal.h"
#include "lowbit/config.h"
#include "lowbit/file.h"
#include "lowbit/fp8.h"
#include "lowbit/safetensors.h"
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_layer_linear(const char *name) {
    static const char *sfx[] = {".self_attn.q_proj.weight", ".self_attn.k_proj.weight",
                                ".self_attn.v_proj.weight", ".self_attn.o_proj.weight",
                                ".mlp.gate_proj.weight",    ".mlp.up_proj.weight",
                                ".mlp.down_proj.weight"};
    if (strncmp(name, "model.layers.", 13)) return false;
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
        size_t k = strlen(sfx[i]);
        if (n > k && !strcmp(name + n - k, sfx[i])) return true;
    }
    return false;
}

/* Codes and scales found before the writer runs (GPTQ onto the FP8 grid):
 * the module NAME ("model.layers.0.self_attn.q_proj") whose source tensor
 * is NAME.weight. */
typedef struct fp8_pre {
    char name[160];
    int64_t out, in;
    uint8_t *codes;   /* [out, in] (lb_alloc'd)                          */
    float *scales;    /* as lb_fp8_scale_shape (lb_alloc'd)              */
    bool used;
} fp8_pre;

typedef struct fp8_job {
    const lb_fp8_qconfig *q;
    const lb_tensor *src;
    const fp8_pre *pre; /* NULL: quantize src now                        */
    uint8_t *codes;   /* held between the weight and the scale producers */
    float *scales;
    int64_t n_scales;
    const lb_progress *progress;
    size_t *done, total;
    lb_fp8_scale_rule rule;
} fp8_job;

static lb_status produce_fp8(void *user, const char *name, lb_st_sink *sink, size_t nbytes) {
    fp8_job *j = user;
    size_t n = strlen(name);
    bool is_scale = !(n > 7 && !strcmp(name + n - 7, ".weight"));
    if (j->pre) { /* codes and scales made already */
        lb_status s = lb_st_sink_write(sink, is_scale ? (const void *)j->pre->scales
                                                      : (const void *)j->pre->codes,
                                       nbytes);
        if (is_scale) {
            (*j->done)++;
            if (s == LB_OK && !lb_progress_report(j->progress, "write", *j->done, j->total))
                s = lb_set_error(LB_ERR_CANCELLED, "quantize cancelled");
        }
        return s;
    }
    if (!is_scale) {
        const lb_tensor *t = j->src;
        int64_t out = t->shape[0], in = t->shape[1];
        float *W = lb_alloc((size_t)out * (size_t)in * sizeof *W);
        j->codes = malloc((size_t)out * (size_t)in);
        j->scales = malloc((size_t)j->n_scales * sizeof *j->scales);
        lb_status s = W && j->codes && j->scales ? LB_OK
                                                 : lb_set_error(LB_ERR_NOMEM, "%s: out of memory", name);
        for (int64_t r = 0; r < out && s == LB_OK; r++) {
            const uint8_t *row = (const uint8_t *)t->data + (size_t)r * (size_t)in * (t->type == LB_TYPE_F32 ? 4 : 2);
            if (t->type == LB_TYPE_F32) memcpy(W + r * in, row, (size_t)in * 4);
            else if (t->type == LB_TYPE_F16) lb_f16_to_f32_row((const uint16_t *)row, W + r * in, (size_t)in);
            else lb_bf16_to_f32_row((const uint16_t *)row, W + r * in, (size_t)in);
        }
        if (s == LB_OK) s = lb_fp8_quantize_rule(j->q, j->rule, W, out, in, j->codes, j->scales);
        if (s != LB_OK) s = lb_error_context(s, "%s", name);
        lb_free(W);
        if (s == LB_OK) s = lb_st_sink_write(sink, j->codes, nbytes);
        free(j->codes);
        j->codes = NULL;
        if (s != LB_OK) {
            free(j->scales);
            j->scales = NULL;
        }
        return s;
    }
    if (!j->scales) return lb_set_error(LB_ERR_INTERNAL, "%s: produced out of order", name);
    lb_status s = lb_st_sink_write(sink, j->scales, nbytes);
    free(j->scales);
    j->scales = NULL;
    (*j->done)++;
    if (s == LB_OK && !lb_progress_report(j->progress, "quantize", *j->done, j->total))
        s = lb_set_error(LB_ERR_CANCELLED, "quantize cancelled");
    return s;
}

static cJSON *qconfig_json(const lb_fp8_qconfig *q) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    const char *fmt = q->fmt == LB_FP8_E5M2 ? "e5m2" : "e4m3";
    if (q->layout == LB_FP8_SCALE_BLOCK && !strcmp(q->scale_suffix, "weight_scale_inv")) {
        /* DeepSeek-V3 / Qwen3-FP8 / transformers FineGrainedFP8Config */
        cJSON_AddStringToObject(o, "quant_method", "fp8");
        cJSON_AddStringToObject(o, "fmt", fmt);
        cJSON_AddStringToObject(o, "activation_scheme", "dynamic");
        cJSON *b = cJSON_AddArrayToObject(o, "weight_block_size");
        cJSON_AddItemToArray(b, cJSON_CreateNumber(q->block_n));
        cJSON_AddItemToArray(b, cJSON_CreateNumber(q->block_k));
        return o;
    }
    /* compressed-tensors (llm-compressor), weight-only */
    cJSON_AddStringToObject(o, "quant_method", "compressed-tensors");
    cJSON_AddStringToObject(o, "format", "float-quantized");
    cJSON_AddStringToObject(o, "quantization_status", "compressed");
    cJSON *groups = cJSON_AddObjectToObject(o, "config_groups");
    cJSON *g = cJSON_AddObjectToObject(groups, "group_0");
    cJSON *tg = cJSON_AddArrayToObject(g, "targets");
    cJSON_AddItemToArray(tg, cJSON_CreateString("Linear"));
    cJSON *w = cJSON_AddObjectToObject(g, "weights");
    cJSON_AddNumberToObject(w, "num_bits", 8);
    cJSON_AddStringToObject(w, "type", "float");
    cJSON_AddBoolToObject(w, "symmetric", true);
    cJSON_AddStringToObject(w, "strategy", q->layout == LB_FP8_SCALE_CHANNEL ? "channel"
                                           : q->layout == LB_FP8_SCALE_TENSOR ? "tensor"
                                                                               : "block");
    if (q->layout == LB_FP8_SCALE_BLOCK) {
        cJSON *b = cJSON_AddArrayToObject(w, "block_structure");
        cJSON_AddItemToArray(b, cJSON_CreateNumber(q->block_n));
        cJSON_AddItemToArray(b, cJSON_CreateNumber(q->block_k));
    }
    cJSON_AddBoolToObject(w, "dynamic", false);
    cJSON_AddStringToObject(w, "observer", "minmax");
    cJSON_AddNullToObject(g, "input_activations");
    cJSON_AddNullToObject(g, "output_activations");
    cJSON *ig = cJSON_AddArrayToObject(o, "ignore");
    cJSON_AddItemToArray(ig, cJSON_CreateString("lm_head"));
    cJSON_AddNullToObject(o, "kv_cache_scheme");
    return o;
}

static const fp8_pre *find_pre(fp8_pre *pre, int n_pre, const char *tensor) {
    size_t l = strlen(tensor);
    if (l <= 7 || strcmp(tensor + l - 7, ".weight")) return NULL;
    for (int i = 0; i < n_pre; i++)
        if (strlen(pre[i].name) == l - 7 && !strncmp(pre[i].name, tensor, l - 7)) {
            pre[i].used = true;
            return &pre[i];
        }
    return NULL;
}

static lb_status check_dense_source(const char *model_dir) {
    lb_model_config cfg;
    LB_TRY(lb_model_config_load_dir(model_dir, &cfg));
    bool quantized = cfg.has_quantization_config;
    lb_model_config_clear(&cfg);
    if (quantized)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: already quantized (quantization_config); FP8 "
                            "quantization needs a dense F32/F16/BF16 checkpoint", model_dir);
    return LB_OK;
}

/* The checkpoint of model_dir with every decoder-layer linear in FP8: the
 * codes/scales of pre[] where a module has them (each must match a 2-D
 * source tensor of its shape), else quantized now by opts->rule. rep (GPTQ
 * onto the FP8 grid): gets this file's tensor_bytes and shards, and with
 * p->write_report goes into quantize_report.json before the rename. */
static lb_status write_fp8(const char *model_dir, const char *out_dir,
                           const lb_fp8_quantize_opts *opts_in, fp8_pre *pre, int n_pre,
                           int *n_linears, lb_quantize_report *rep,
                           const lb_quantize_params *p) {
    lb_fp8_quantize_opts opts = *opts_in;
    lb_safetensors *st = NULL;
    lb_st_writer *w = NULL;
    fp8_job *jobs = NULL;
    size_t done = 0;
    int nl = 0;
    uint64_t bytes = 0; /* of the tensors written */
    lb_status s = lb_st_open(model_dir, &st);
    if (s != LB_OK) return s;
    size_t n = lb_st_count(st);
    jobs = calloc(n ? n : 1, sizeof *jobs);
    if (!jobs) s = lb_set_error(LB_ERR_NOMEM, "out of memory");
    if (s == LB_OK) s = lb_st_writer_create(&w);
    if (s == LB_OK) s = lb_st_writer_set_metadata(w, "format", "pt");
    size_t total = 0;
    for (size_t i = 0; i < n && s == LB_OK; i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        total += is_layer_linear(t->name) && t->n_dims == 2;
    }
    for (size_t i = 0; i < n && s == LB_OK; i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        const fp8_pre *pr = find_pre(pre, n_pre, t->name);
        if (pr && (t->n_dims != 2 || t->shape[0] != pr->out || t->shape[1] != pr->in)) {
            s = lb_set_error(LB_ERR_INTERNAL, "%s: tensor '%s' is not the [%lld, %lld] weight "
                             "that was quantized", model_dir, t->name, (long long)pr->out,
                             (long long)pr->in);
            break;
        }
        if (!pr && !(is_layer_linear(t->name) && t->n_dims == 2)) {
            s = lb_st_writer_add(w, t->name, t->type, t->n_dims, t->shape, t->data);
            bytes += t->nbytes;
            continue;
        }
        if (t->type != LB_TYPE_F32 && t->type != LB_TYPE_F16 && t->type != LB_TYPE_BF16) {
            s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32/F16/BF16 "
                             "expected)", model_dir, t->name, lb_type_name(t->type));
            break;
        }
        fp8_job *j = &jobs[i];
        j->pre = pr;
        j->q = &opts.q;
        j->rule = opts.rule;
        j->src = t;
        j->progress = &opts.progress;
        j->done = &done;
        j->total = total;
        int nd;
        int64_t sh[2];
        lb_fp8_scale_shape(&opts.q, t->shape[0], t->shape[1], &nd, sh);
        j->n_scales = nd == 2 ? sh[0] * sh[1] : 1;
        lb_type ft = opts.q.fmt == LB_FP8_E5M2 ? LB_TYPE_F8_E5M2 : LB_TYPE_F8_E4M3;
        s = lb_st_writer_add_fn(w, t->name, ft, 2, t->shape, produce_fp8, j);
        char sn[300];
        size_t l = strlen(t->name);
        snprintf(sn, sizeof sn, "%.*s.%s", (int)(l - 7), t->name, opts.q.scale_suffix);
        if (s == LB_OK) s = lb_st_writer_add_fn(w, sn, LB_TYPE_F32, nd, sh, produce_fp8, j);
        bytes += (uint64_t)t->shape[0] * (uint64_t)t->shape[1] + 4 * (uint64_t)j->n_scales;
        nl++;
    }
    for (int i = 0; i < n_pre && s == LB_OK; i++)
        if (!pre[i].used)
            s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: no tensor %s.weight in the source "
                             "checkpoint for the quantized module", model_dir, pre[i].name);
    /* config.json + quantization_config, tokenizer files; temp dir renamed */
    char *report = NULL;
    if (s == LB_OK && rep) {
        rep->n_shards = 1;
        rep->tensor_bytes = bytes;
        if (p && p->write_report && !(report = lb_quantize_report_json(rep, p)))
            s = lb_set_error(LB_ERR_NOMEM, "out of memory (quantize_report.json)");
    }
    if (s == LB_OK) s = qz_nocalib_write_dir(model_dir, out_dir, w, qconfig_json(&opts.q), report);
    free(report);
    for (size_t i = 0; jobs && i < n; i++) {
        free(jobs[i].codes);
        free(jobs[i].scales);
    }
    free(jobs);
    lb_st_writer_free(w);
    lb_st_close(st);
    if (s == LB_OK && n_linears) *n_linears = nl;
    return s;
}

lb_status lb_fp8_quantize_checkpoint(const char *model_dir, const char *out_dir,
                                     const lb_fp8_quantize_opts *opts_in, int *n_linears) {
    if (!model_dir || !out_dir)
        return lb_set_error(LB_ERR_INVALID_ARG, "fp8 quantize: NULL path");
    lb_fp8_quantize_opts opts;
    if (opts_in) opts = *opts_in;
    else {
        memset(&opts, 0, sizeof opts);
        lb_fp8_qconfig_default(&opts.q, false);
    }
    LB_TRY(lb_outdir_check(out_dir));
    LB_TRY(check_dense_source(model_dir));
    return write_fp8(model_dir, out_dir, &opts, NULL, 0, n_linears, NULL, NULL);
}

/* ---- GPTQ onto the FP8 grid (lb_quantize_params.fp8) ------------------------ */

typedef struct fp8_sink {
    fp8_pre *pre; /* [n] by plan module index                          */
    const qz_module *mods;
    int n;
    const lb_fp8_qconfig *q;
} fp8_sink;

static lb_status fp8_module_done(void *user, const qz_module *mod, const float *W,
                                 const lb_gptq_result *res, lb_quantize_module_report *rep) {
    (void)W;
    (void)rep;
    fp8_sink *k = user;
    const int i = (int)(mod - k->mods);
    if (i < 0 || i >= k->n || !res->fp8_scales || !res->codes)
        return lb_set_error(LB_ERR_INTERNAL, "%s: no FP8 result", mod->name);
    fp8_pre *p = &k->pre[i];
    snprintf(p->name, sizeof p->name, "%s", mod->name);
    p->out = mod->out;
    p->in = mod->in;
    int nd;
    int64_t sh[2];
    lb_fp8_scale_shape(k->q, mod->out, mod->in, &nd, sh);
    const size_t nw = (size_t)(mod->out * mod->in), ns = (size_t)(nd == 2 ? sh[0] * sh[1] : 1);
    p->codes = lb_alloc(nw);
    p->scales = lb_alloc(ns * sizeof *p->scales);
    if (!p->codes || !p->scales) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", mod->name);
    memcpy(p->codes, res->codes, nw);
    memcpy(p->scales, res->fp8_scales, ns * sizeof *p->scales);
    return LB_OK;
}

lb_status qz_fp8_gptq_checkpoint(const char *model_dir, const char *out_dir,
                                 const lb_quantize_params *p, const lb_calib *calib,
                                 lb_quantize_report *rep) {
    LB_TRY(check_dense_source(model_dir));
    lb_model *m = NULL;
    qz_module *mods = NULL;
    int n_mods = 0;
    fp8_sink k = {0};
    lb_status s = lb_model_load_hf(model_dir, NULL, &m);
    if (s == LB_OK) s = qz_check_arch(m, p);
    if (s == LB_OK && m->config.n_experts > 0)
        s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: GPTQ onto the FP8 grid: MoE experts are not "
                         "written in FP8 yet (dense decoder layers only)", model_dir);
    if (s == LB_OK) s = qz_plan(m, p, NULL, 0, &mods, &n_mods);
    for (int i = 0; i < n_mods && s == LB_OK; i++)
        if (mods[i].which >= LB_LINEAR_COUNT || mods[i].which == QZ_LM_HEAD)
            s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: GPTQ onto the FP8 grid writes the seven "
                             "separate linears of a Llama-layout layer (not fused modules)",
                             mods[i].name);
    if (s == LB_OK) {
        k.pre = calloc((size_t)n_mods + 1, sizeof *k.pre);
        k.mods = mods;
        k.n = n_mods;
        k.q = p->fp8;
        if (!k.pre) s = lb_set_error(LB_ERR_NOMEM, "out of memory");
    }
    if (s == LB_OK) {
        qz_sink sink = {.user = &k, .module_done = fp8_module_done, .keep_in_model = false};
        s = qz_run(m, p, calib, mods, n_mods, &sink, rep);
    }
    lb_model_free(m);
    /* the solved modules (the FP8 plan quantizes every layer linear; a
     * layer linear without codes would be quantized by the writer without
     * calibration) */
    int n_pre = 0;
    for (int i = 0; i < n_mods && s == LB_OK; i++)
        if (k.pre[i].codes && k.pre[i].scales) {
            fp8_pre t = k.pre[i];
            memset(&k.pre[i], 0, sizeof t);
            k.pre[n_pre++] = t;
        }
    lb_fp8_quantize_opts o;
    memset(&o, 0, sizeof o);
    o.q = *p->fp8;
    o.rule = p->fp8_rule;
    o.progress = p->progress;
    double t0 = lb_time_s();
    if (s == LB_OK) s = write_fp8(model_dir, out_dir, &o, k.pre, n_pre, NULL, rep, p);
    if (s == LB_OK) rep->seconds += lb_time_s() - t0; /* (the report's seconds: before the write) */
    for (int i = 0; k.pre && i < n_mods; i++) {
        lb_free(k.pre[i].codes);
        lb_free(k.pre[i].scales);
    }
    free(k.pre);
    free(mods);
    return s;
}
