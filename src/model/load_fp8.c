/*
 * FP8 weight-only checkpoint loader (lowbit/fp8.h): quantization_config
 * quant_method "fp8" (block-wise weight_scale_inv) or "compressed-tensors"
 * float-quantized (weight_scale per channel / tensor / block). Each F8
 * linear is checked against its scale (dtype, shape, finite values), then
 * held as E4M3 32-blocks with their f32 scale (LB_TYPE_F8_E4M3_B32, run by
 * the FP8 matmul kernels; same weights W = float(q) * s) when it is E4M3,
 * in_features is a multiple of 32 and a block layout's column block is a
 * multiple of 32; otherwise dequantized to F32 (as transformers' CPU path
 * computes it before its bf16 cast). Every other tensor loads as in the HF
 * loader. Linears stored dense in the same checkpoint (transformers'
 * quantizer skips shapes that are not multiples of the block) load as
 * they are.
 */
#include "model/model_internal.h"
#include "lowbit/file.h"
#include "lowbit/fp8.h"
#include "lowbit/safetensors.h"
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


typedef struct fp8_ctx {
    lb_model *m;
    const lb_safetensors *st;
    const char *label;
    const lb_fp8_qconfig *q;
    int n_fp8, n_native, n_dense;
} fp8_ctx;

/* The FP8 weight t (tensor `name`, PREFIX.weight) of a linear [out, in],
 * checked against its scale and converted into *d: E4M3 32-blocks or F32. */
static lb_status fp8_linear(void *user, const char *name, const lb_tensor *t, int64_t out,
                            int64_t in, lb_tensor *d) {
    fp8_ctx *c = user;
    size_t l = strlen(name);
    if (l < 8 || strcmp(name + l - 7, ".weight"))
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: tensor '%s' is FP8 but not a weight",
                            c->label, name);
    char prefix[256], sname[300];
    snprintf(prefix, sizeof prefix, "%.*s", (int)(l - 7), name);
    snprintf(sname, sizeof sname, "%s.%s", prefix, c->q->scale_suffix);
    const lb_tensor *sc = lb_st_find(c->st, sname);
    lb_status s = lb_fp8_check(c->q, prefix, t, sc);
    if (s != LB_OK) return lb_error_context(s, "%s", c->label);
    /* shape against the config before allocating */
    if (t->shape[0] != out || t->shape[1] != in)
        return lb_set_error(LB_ERR_FORMAT, "%s: tensor '%s': expected [%lld, %lld], got "
                            "[%lld, %lld]", c->label, name, (long long)out, (long long)in,
                            (long long)t->shape[0], (long long)t->shape[1]);
    *d = *t;
    size_t bytes;
    bool native = c->q->fmt == LB_FP8_E4M3 && t->shape[1] % 32 == 0 &&
                  (c->q->layout != LB_FP8_SCALE_BLOCK || c->q->block_k % 32 == 0);
    /* native: E4M3 32-blocks with their f32 scale (LB_TYPE_F8_E4M3_B32,
     * 9 bits/weight, the FP8 matmul kernels); otherwise F32 */
    size_t per = native ? sizeof(lb_block_f8_b32) : (size_t)t->shape[1] * sizeof(float);
    size_t units = native ? (size_t)(t->shape[1] / 32) : 1;
    if (!lb_mul_ok((size_t)t->shape[0], units, &bytes) || !lb_mul_ok(bytes, per, &bytes))
        return lb_set_error(LB_ERR_OVERFLOW, "%s: tensor '%s' too large", c->label, name);
    void *buf = lb_alloc(bytes);
    if (!buf) return lb_error_context(LB_ERR_NOMEM, "%s: %s", c->label, name);
    s = lb_model_builder_own(c->m, buf);
    if (s != LB_OK) return s;
    s = native ? lb_fp8_to_b32(c->q, t, sc, buf) : lb_fp8_dequantize(c->q, t, sc, buf);
    if (s != LB_OK) return s;
    d->type = native ? LB_TYPE_F8_E4M3_B32 : LB_TYPE_F32;
    d->data = buf;
    d->nbytes = bytes;
    c->n_native += native;
    c->n_fp8++;
    return LB_OK;
}

static bool is_fp8(const lb_tensor *t) {
    return t->type == LB_TYPE_F8_E4M3 || t->type == LB_TYPE_F8_E5M2;
}

static lb_status set_tensor(fp8_ctx *c, const char *name, lb_tensor_role role, int layer,
                            bool optional) {
    const lb_tensor *t = lb_st_find(c->st, name);
    if (!t) {
        if (optional) return LB_OK;
        return lb_set_error(LB_ERR_NOT_FOUND, "%s: tensor '%s' not found", c->label, name);
    }
    if (is_fp8(t)) {
        int nd;
        int64_t sh[2];
        lb_role_shape(&c->m->config, role, &nd, sh);
        if (nd != 2)
            return lb_set_error(LB_ERR_UNSUPPORTED, "%s: tensor '%s' is FP8 but not a matrix "
                                "weight", c->label, name);
        lb_tensor d;
        lb_status s = fp8_linear(c, name, t, sh[0], sh[1], &d);
        if (s == LB_OK) s = lb_model_builder_set(c->m, role, layer, &d);
        return s != LB_OK ? lb_error_context(s, "%s", c->label) : LB_OK;
    }
    if (t->type != LB_TYPE_F32 && t->type != LB_TYPE_F16 && t->type != LB_TYPE_BF16)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32/F16/BF16 or "
                            "FP8 expected)", c->label, name, lb_type_name(t->type));
    lb_status s = lb_model_builder_set(c->m, role, layer, t);
    if (s != LB_OK) return lb_error_context(s, "%s", c->label);
    if (role >= LB_ROLE_Q && role <= LB_ROLE_DOWN) c->n_dense++;
    return LB_OK;
}

/* A linear of the issue-13 layouts (lb_model_load_layers_ext): prefix.weight,
 * FP8 or dense, [out, in]. */
static lb_status ext_linear(void *user, const char *prefix, int64_t out, int64_t in,
                            lb_tensor *d) {
    fp8_ctx *c = user;
    return lb_model_ext_weight(c->st, c->label, prefix, out, in, is_fp8, fp8_linear, c, "FP8",
                               &c->n_dense, d);
}

static lb_status set_tensor_cb(void *user, const char *name, lb_tensor_role role, int layer,
                               bool optional) {
    return set_tensor(user, name, role, layer, optional);
}

lb_status lb_fp8_build_model(const lb_model_config *cfg, const lb_fp8_qconfig *q,
                             lb_safetensors *st, bool own_st, const char *label,
                             const lb_model_load_opts *opts, lb_model **out) {
    *out = NULL;
    lb_model *m = NULL;
    lb_status s = lb_model_builder_new_st(cfg, st, own_st, &m);
    if (s != LB_OK) return s;
    fp8_ctx c = {.m = m, .st = st, .label = label, .q = q};
    s = lb_model_hf_walk_globals(m, st, set_tensor_cb, &c);
    if (s == LB_OK) s = lb_model_hf_load_layers(m, st, label, opts, set_tensor_cb, ext_linear, &c);
    if (s != LB_OK) {
        lb_model_free(m);
        return s;
    }
    lb_log(LB_LOG_INFO, "%s: FP8 checkpoint (%s, %s scales): %d FP8 linears (%d run by the FP8 "
           "kernels as E4M3 32-blocks, the rest dequantized to F32), %d dense", label, q->method,
           q->layout == LB_FP8_SCALE_BLOCK ? "block" : q->layout == LB_FP8_SCALE_CHANNEL ? "channel"
                                                                                      : "tensor",
           c.n_fp8, c.n_native, c.n_dense);
    *out = m;
    return LB_OK;
}

lb_status lb_model_load_fp8(const char *dir, const lb_model_config *cfg,
                            const lb_model_load_opts *opts, lb_model **out, bool *handled) {
    *handled = false;
    if (!cfg->quantization_config_json) return LB_OK;
    lb_fp8_qconfig q;
    bool is_fp8 = false;
    char label[600];
    snprintf(label, sizeof label, "%s/config.json quantization_config", dir);
    LB_TRY(lb_fp8_qconfig_parse(cfg->quantization_config_json,
                                strlen(cfg->quantization_config_json), label, &q, &is_fp8));
    if (!is_fp8) return LB_OK;
    *handled = true;
    lb_safetensors *st = NULL;
    LB_TRY(lb_st_open(dir, &st));
    return lb_fp8_build_model(cfg, &q, st, true, dir, opts, out);
}
