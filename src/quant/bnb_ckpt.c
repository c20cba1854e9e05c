/*
 * bnb_ckpt.c — the bitsandbytes checkpoint writer (lowbit/bnb.h,
 * `lowbit quantize --method nf4|fp4|int8`). Each decoder-layer linear is
 * quantized while the file is planned (the quant_state blob holds the
 * nested offset, so its length depends on the data); the codes of the whole
 * model (about 1/8 of its f32 size for 4-bit, 1/4 for INT8) are held until
 * the safetensors file is written.
 */
#include "quant/nocalib_ckpt.h"
#include "lowbit/bnb.h"
#include "lowbit/config.h"
#include "lowbit/file.h"
#include "lowbit/safetensors.h"
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <math.h>
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

/* One quantized linear: up to 6 output buffers, written in order. */
typedef struct bnb_job {
    void *buf[6];
    size_t len[6];
    int n, next;
} bnb_job;

static lb_status produce(void *user, const char *name, lb_st_sink *sink, size_t nbytes) {
    bnb_job *j = user;
    if (j->next >= j->n || j->len[j->next] != nbytes)
        return lb_set_error(LB_ERR_INTERNAL, "%s: produced out of order", name);
    lb_status s = lb_st_sink_write(sink, j->buf[j->next], nbytes);
    free(j->buf[j->next]);
    j->buf[j->next++] = NULL;
    return s;
}

/* Python's repr of a float (shortest round trip; ".0" when integral) */
static void py_float(double v, char *out, size_t n) {
    for (int p = 1; p <= 17; p++) {
        snprintf(out, n, "%.*g", p, v);
        if (strtod(out, NULL) == v) break;
    }
    if (!strpbrk(out, ".eEn")) strncat(out, ".0", n - strlen(out) - 1);
}

static const char *dtype_name(lb_type t) {
    return t == LB_TYPE_F16 ? "float16" : t == LB_TYPE_BF16 ? "bfloat16" : "float32";
}

static lb_status to_f32(const lb_tensor *t, float *W) {
    int64_t n = t->shape[0] * t->shape[1];
    if (t->type == LB_TYPE_F32) memcpy(W, t->data, (size_t)n * 4);
    else if (t->type == LB_TYPE_F16) lb_f16_to_f32_row(t->data, W, (size_t)n);
    else if (t->type == LB_TYPE_BF16) lb_bf16_to_f32_row(t->data, W, (size_t)n);
    else return lb_set_error(LB_ERR_UNSUPPORTED, "tensor '%s' has dtype %s (F32/F16/BF16 expected)",
                             t->name, lb_type_name(t->type));
    return LB_OK;
}

static lb_status add(lb_st_writer *w, bnb_job *j, const char *name, lb_type ty, int nd,
                     int64_t d0, int64_t d1, void *buf, size_t len) {
    int64_t sh[2] = {d0, d1};
    j->buf[j->n] = buf;
    j->len[j->n++] = len;
    if (!buf) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", name);
    return lb_st_writer_add_fn(w, name, ty, nd, sh, produce, j);
}

static lb_status quantize_linear(const lb_bnb_qconfig *q, const lb_tensor *t, lb_st_writer *w,
                                 bnb_job *j) {
    int64_t out = t->shape[0], in = t->shape[1], n = out * in;
    char pre[300], nm[360];
    snprintf(pre, sizeof pre, "%.*s", (int)(strlen(t->name) - 7), t->name);
    float *W = lb_alloc((size_t)n * sizeof *W);
    if (!W) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", t->name);
    lb_status s = to_f32(t, W);
    for (int64_t i = 0; i < n && s == LB_OK; i++)
        if (!isfinite(W[i]))
            s = lb_set_error(LB_ERR_FORMAT, "%s: non-finite weight at [%lld, %lld]", t->name,
                             (long long)(i / in), (long long)(i % in));
    if (s != LB_OK) {
        lb_free(W);
        return s;
    }
    if (q->kind == LB_BNB_INT8) {
        int8_t *c = malloc((size_t)n);
        float *scb = malloc((size_t)out * 4);
        if (c && scb) lb_bnb_quantize_int8(W, out, in, c, scb);
        lb_free(W);
        s = add(w, j, t->name, LB_TYPE_I8, 2, out, in, c, (size_t)n);
        snprintf(nm, sizeof nm, "%s.SCB", pre);
        if (s == LB_OK) s = add(w, j, nm, LB_TYPE_F32, 1, out, 0, scb, (size_t)out * 4);
        else free(scb);
        return s;
    }
    int bs = q->blocksize;
    int64_t nabs = (n + bs - 1) / bs, np = (n + 1) / 2;
    uint8_t *packed = malloc((size_t)np);
    float *am = malloc((size_t)nabs * 4), *qm = malloc(64);
    if (packed && am && qm) {
        s = lb_bnb_quantize_4bit(q->kind, W, n, bs, packed, am);
        memcpy(qm, lb_bnb_4bit_table(q->kind), 64);
    } else {
        s = lb_set_error(LB_ERR_NOMEM, "%s: out of memory", t->name);
    }
    lb_free(W);
    char blob[512], off[40];
    uint8_t *qa = NULL;
    float *nabsmax = NULL, *nmap = NULL;
    int64_t nn = (nabs + 255) / 256;
    if (s == LB_OK && q->double_quant) {
        /* QuantState compress_statistics: offset = absmax.mean(); the
         * centred absmax quantized block-wise (256) with the dynamic map */
        double sum = 0;
        for (int64_t i = 0; i < nabs; i++) sum += am[i];
        float offset = (float)(sum / (double)nabs);
        for (int64_t i = 0; i < nabs; i++) am[i] -= offset;
        qa = malloc((size_t)nabs);
        nabsmax = malloc((size_t)nn * 4);
        nmap = malloc(1024);
        if (qa && nabsmax && nmap) {
            memcpy(nmap, lb_bnb_dynamic_map(), 1024);
            lb_bnb_quantize_blockwise8(am, nabs, 256, nmap, qa, nabsmax);
        } else {
            s = lb_set_error(LB_ERR_NOMEM, "%s: out of memory", t->name);
        }
        py_float((double)offset, off, sizeof off);
        free(am);
        am = NULL;
    }
    const char *qt = q->kind == LB_BNB_NF4 ? "nf4" : "fp4";
    int bl = snprintf(blob, sizeof blob, "{\"quant_type\": \"%s\", \"blocksize\": %d, \"dtype\": "
                      "\"%s\", \"shape\": [%lld, %lld]", qt, bs, dtype_name(t->type),
                      (long long)out, (long long)in);
    if (q->double_quant)
        bl += snprintf(blob + bl, sizeof blob - (size_t)bl, ", \"nested_blocksize\": 256, "
                       "\"nested_dtype\": \"float32\", \"nested_offset\": %s", off);
    bl += snprintf(blob + bl, sizeof blob - (size_t)bl, "}");
    if (s == LB_OK) s = add(w, j, t->name, LB_TYPE_U8, 2, np, 1, packed, (size_t)np);
    else free(packed);
    packed = NULL;
    snprintf(nm, sizeof nm, "%s.weight.absmax", pre);
    if (s == LB_OK) {
        if (q->double_quant) s = add(w, j, nm, LB_TYPE_U8, 1, nabs, 0, qa, (size_t)nabs);
        else s = add(w, j, nm, LB_TYPE_F32, 1, nabs, 0, am, (size_t)nabs * 4);
        qa = NULL;
        am = NULL;
    }
    snprintf(nm, sizeof nm, "%s.weight.quant_map", pre);
    if (s == LB_OK) s = add(w, j, nm, LB_TYPE_F32, 1, 16, 0, qm, 64);
    else free(qm);
    qm = NULL;
    if (q->double_quant) {
        snprintf(nm, sizeof nm, "%s.weight.nested_absmax", pre);
        if (s == LB_OK) s = add(w, j, nm, LB_TYPE_F32, 1, nn, 0, nabsmax, (size_t)nn * 4);
        else free(nabsmax);
        nabsmax = NULL;
        snprintf(nm, sizeof nm, "%s.weight.nested_quant_map", pre);
        if (s == LB_OK) s = add(w, j, nm, LB_TYPE_F32, 1, 256, 0, nmap, 1024);
        else free(nmap);
        nmap = NULL;
    }
    snprintf(nm, sizeof nm, "%s.weight.quant_state.bitsandbytes__%s", pre, qt);
    void *b = s == LB_OK ? malloc((size_t)bl) : NULL;
    if (b) memcpy(b, blob, (size_t)bl);
    if (s == LB_OK) s = add(w, j, nm, LB_TYPE_U8, 1, bl, 0, b, (size_t)bl);
    free(qa);
    free(am);
    free(nabsmax);
    free(nmap);
    return s;
}

static cJSON *qconfig_json(const lb_bnb_qconfig *q) {
    /* BitsAndBytesConfig(...).to_dict() of transformers 5 */
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    bool b4 = q->kind != LB_BNB_INT8;
    cJSON_AddStringToObject(o, "quant_method", "bitsandbytes");
    cJSON_AddBoolToObject(o, "_load_in_8bit", !b4);
    cJSON_AddBoolToObject(o, "_load_in_4bit", b4);
    cJSON_AddNumberToObject(o, "llm_int8_threshold", 6.0);
    cJSON_AddNullToObject(o, "llm_int8_skip_modules");
    cJSON_AddBoolToObject(o, "llm_int8_enable_fp32_cpu_offload", false);
    cJSON_AddBoolToObject(o, "llm_int8_has_fp16_weight", false);
    cJSON_AddStringToObject(o, "bnb_4bit_quant_type", q->kind == LB_BNB_NF4 ? "nf4" : "fp4");
    cJSON_AddBoolToObject(o, "bnb_4bit_use_double_quant", b4 && q->double_quant);
    cJSON_AddStringToObject(o, "bnb_4bit_compute_dtype", "float32");
    cJSON_AddStringToObject(o, "bnb_4bit_quant_storage", "uint8");
    cJSON_AddBoolToObject(o, "load_in_4bit", b4);
    cJSON_AddBoolToObject(o, "load_in_8bit", !b4);
    return o;
}

lb_status lb_bnb_quantize_checkpoint(const char *model_dir, const char *out_dir,
                                     const lb_bnb_quantize_opts *opts_in, int *n_linears) {
    if (!model_dir || !out_dir || !opts_in)
        return lb_set_error(LB_ERR_INVALID_ARG, "bnb quantize: NULL argument");
    lb_bnb_quantize_opts opts = *opts_in;
    if (opts.q.kind != LB_BNB_INT8 && (opts.q.blocksize < 16 || opts.q.blocksize > 4096 ||
                                       opts.q.blocksize % 2))
        return lb_set_error(LB_ERR_INVALID_ARG, "bnb quantize: blocksize %d (even, 16..4096)",
                            opts.q.blocksize);
    LB_TRY(lb_outdir_check(out_dir));
    lb_model_config cfg;
    LB_TRY(lb_model_config_load_dir(model_dir, &cfg));
    bool quantized = cfg.has_quantization_config;
    lb_model_config_clear(&cfg);
    if (quantized)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: already quantized (quantization_config); "
                            "bitsandbytes quantization needs a dense F32/F16/BF16 checkpoint",
                            model_dir);
    lb_safetensors *st = NULL;
    lb_st_writer *w = NULL;
    bnb_job *jobs = NULL;
    int nl = 0;
    lb_status s = lb_st_open(model_dir, &st);
    if (s != LB_OK) return s;
    size_t n = lb_st_count(st), total = 0;
    jobs = calloc(n ? n : 1, sizeof *jobs);
    if (!jobs) s = lb_set_error(LB_ERR_NOMEM, "out of memory");
    if (s == LB_OK) s = lb_st_writer_create(&w);
    if (s == LB_OK) s = lb_st_writer_set_metadata(w, "format", "pt");
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
        s = quantize_linear(&opts.q, t, w, &jobs[i]);
        if (s != LB_OK) s = lb_error_context(s, "%s", model_dir);
        nl++;
        if (s == LB_OK && !lb_progress_report(&opts.progress, "quantize", (uint64_t)nl, total))
            s = lb_set_error(LB_ERR_CANCELLED, "quantize cancelled");
    }
    /* config.json + quantization_config, tokenizer files; temp dir renamed */
    if (s == LB_OK) s = qz_nocalib_write_dir(model_dir, out_dir, w, qconfig_json(&opts.q), NULL);
    for (size_t i = 0; jobs && i < n; i++)
        for (int k = 0; k < 6; k++) free(jobs[i].buf[k]);
    free(jobs);
    lb_st_writer_free(w);
    lb_st_close(st);
    if (s == LB_OK && n_linears) *n_linears = nl;
    return s;
}
