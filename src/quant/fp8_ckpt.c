/*
 * fp8_ckpt.c — the FP8 weight-only checkpoint writer (lowbit/fp8.h,
 * `lowbit quantize --method fp8`). No calibration: every decoder-layer
 * linear is quantized on its own, one at a time, inside the safetensors
 * writer's producer (peak memory: one weight in f32 plus its codes).
 */
#include "quant/nocalib_ckpt.h"
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

typedef struct fp8_job {
    const lb_fp8_qconfig *q;
    const lb_tensor *src;
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
    lb_model_config cfg;
    LB_TRY(lb_model_config_load_dir(model_dir, &cfg));
    bool quantized = cfg.has_quantization_config;
    lb_model_config_clear(&cfg);
    if (quantized)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: already quantized (quantization_config); FP8 "
                            "quantization needs a dense F32/F16/BF16 checkpoint", model_dir);
    lb_safetensors *st = NULL;
    lb_st_writer *w = NULL;
    fp8_job *jobs = NULL;
    size_t done = 0;
    int nl = 0;
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
        if (!(is_layer_linear(t->name) && t->n_dims == 2)) {
            s = lb_st_writer_add(w, t->name, t->type, t->n_dims, t->shape, t->data);
            continue;
        }
        if (t->type != LB_TYPE_F32 && t->type != LB_TYPE_F16 && t->type != LB_TYPE_BF16) {
            s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32/F16/BF16 "
                             "expected)", model_dir, t->name, lb_type_name(t->type));
            break;
        }
        fp8_job *j = &jobs[i];
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
        nl++;
    }
    /* config.json + quantization_config, tokenizer files; temp dir renamed */
    if (s == LB_OK) s = qz_nocalib_write_dir(model_dir, out_dir, w, qconfig_json(&opts.q));
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
