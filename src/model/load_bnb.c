/*
 * bitsandbytes checkpoint loader (lowbit/bnb.h): quantization_config
 * quant_method "bitsandbytes". NF4/FP4 linears (packed weight, absmax,
 * quant_map, nested absmax, quant_state blob) and INT8 linears (int8
 * weight + SCB) are checked against each other and the config, then held
 * as NF4_B64 / FP4_B64 (64 codes + the block's absmax, double-quantized
 * absmax decoded here; 4.5 bits/weight) or I8_B32 (32 codes + SCB/127;
 * 9 bits/weight) and run by the bnb matmul kernels (src/kernels/bnb_*.c),
 * same weights as transformers' dequantize_bnb_weight up to the rounding
 * of q * (SCB/127) vs (q * SCB)/127. Tensors whose layout does not allow
 * it (in_features not a multiple of 64 / 32, blocksize not a multiple of
 * 64, a non-standard quant_map) are dequantized to F32.
 * Linears stored dense, and every other tensor, load as in the HF loader.
 */
#include "model/model_internal.h"
#include "lowbit/bnb.h"
#include "lowbit/file.h"
#include "lowbit/safetensors.h"
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


typedef struct bnb_ctx {
    lb_model *m;
    const lb_safetensors *st;
    const char *label;
    const lb_bnb_qconfig *q;
    int n_q, n_native, n_dense;
} bnb_ctx;

static const lb_tensor *find2(const lb_safetensors *st, const char *pre, const char *sfx) {
    char nm[400];
    snprintf(nm, sizeof nm, "%s.%s", pre, sfx);
    return lb_st_find(st, nm);
}

/* The bitsandbytes weight t (tensor `name`, PREFIX.weight: U8 4-bit codes
 * or I8) of a linear [out, in], with its companions, into *d: NF4/FP4
 * 64-blocks, INT8 32-blocks, or F32. */
static lb_status bnb_linear(void *user, const char *name, const lb_tensor *t, int64_t out,
                            int64_t in, lb_tensor *d) {
    bnb_ctx *c = user;
    size_t l = strlen(name);
    char pre[256];
    snprintf(pre, sizeof pre, "%.*s", (int)(l > 7 ? l - 7 : 0), name);
    const int64_t sh[2] = {out, in};
    size_t n_el;
    if (out <= 0 || in <= 0 || !lb_mul_ok((size_t)sh[0], (size_t)sh[1], &n_el) ||
        n_el > INT64_MAX / 4)
        return lb_set_error(LB_ERR_OVERFLOW, "%s: tensor '%s' too large", c->label, name);
    if (c->q->kind == LB_BNB_INT8 && t->type != LB_TYPE_I8)
        return lb_set_error(LB_ERR_FORMAT, "%s: %s: dtype %s in an 8-bit bitsandbytes "
                            "checkpoint (I8 expected)", c->label, name, lb_type_name(t->type));
    const char *qt = c->q->kind == LB_BNB_NF4 ? "nf4" : "fp4";
    lb_bnb_4bit_tensors bt = {0};
    if (c->q->kind != LB_BNB_INT8) {
        char sn[64];
        snprintf(sn, sizeof sn, "weight.quant_state.bitsandbytes__%s", qt);
        bt = (lb_bnb_4bit_tensors){
            .weight = t,
            .absmax = find2(c->st, pre, "weight.absmax"),
            .quant_map = find2(c->st, pre, "weight.quant_map"),
            .nested_absmax = find2(c->st, pre, "weight.nested_absmax"),
            .nested_quant_map = find2(c->st, pre, "weight.nested_quant_map"),
            .state = find2(c->st, pre, sn),
        };
        if (!bt.state && find2(c->st, pre, c->q->kind == LB_BNB_NF4
                                               ? "weight.quant_state.bitsandbytes__fp4"
                                               : "weight.quant_state.bitsandbytes__nf4"))
            return lb_set_error(LB_ERR_FORMAT, "%s: %s.weight: quant_state of the other 4-bit "
                                "type than config.json's bnb_4bit_quant_type '%s'", c->label,
                                pre, qt);
    }
    /* native first: NF4/FP4 64-blocks (4.5 bits/weight) or INT8 32-blocks
     * (9 bits/weight), run by the bnb kernels; F32 when the tensor's
     * layout does not allow it (LB_ERR_UNSUPPORTED from the repack) */
    bool b4 = c->q->kind != LB_BNB_INT8;
    int64_t blk = b4 ? 64 : 32;
    lb_status s = LB_OK;
    void *buf = NULL;
    size_t bytes = 0;
    lb_type ty = LB_TYPE_F32;
    if (sh[1] % blk == 0) {
        bytes = n_el / (size_t)blk * 36;
        buf = lb_alloc(bytes);
        if (!buf) return lb_error_context(LB_ERR_NOMEM, "%s: %s", c->label, name);
        s = b4 ? lb_bnb_4bit_to_b64(pre, c->q->kind, &bt, sh[0], sh[1], buf)
               : lb_bnb_int8_to_b32(pre, t, find2(c->st, pre, "SCB"), sh[0], sh[1], buf);
        if (s == LB_OK) {
            ty = b4 ? (c->q->kind == LB_BNB_NF4 ? LB_TYPE_NF4_B64 : LB_TYPE_FP4_B64)
                    : LB_TYPE_I8_B32;
        } else {
            lb_free(buf);
            buf = NULL;
            if (s != LB_ERR_UNSUPPORTED) return lb_error_context(s, "%s", c->label);
            lb_log(LB_LOG_DEBUG, "%s: %s", c->label, lb_last_error());
        }
    }
    if (!buf) {
        bytes = n_el * sizeof(float);
        buf = lb_alloc(bytes);
        if (!buf) return lb_error_context(LB_ERR_NOMEM, "%s: %s", c->label, name);
        s = b4 ? lb_bnb_dequantize_4bit(pre, &bt, sh[0], sh[1], buf)
               : lb_bnb_dequantize_int8(pre, t, find2(c->st, pre, "SCB"), sh[0], sh[1], buf);
        if (s != LB_OK) {
            lb_free(buf);
            return lb_error_context(s, "%s", c->label);
        }
    }
    s = lb_model_builder_own(c->m, buf);
    if (s != LB_OK) return s;
    *d = *t;
    d->type = ty;
    d->n_dims = 2;
    d->shape[0] = sh[0];
    d->shape[1] = sh[1];
    d->data = buf;
    d->nbytes = bytes;
    c->n_q++;
    c->n_native += ty != LB_TYPE_F32;
    return LB_OK;
}

static bool is_bnb(const lb_tensor *t) { return t->type == LB_TYPE_U8 || t->type == LB_TYPE_I8; }

static lb_status set_tensor(bnb_ctx *c, const char *name, lb_tensor_role role, int layer,
                            bool optional) {
    const lb_tensor *t = lb_st_find(c->st, name);
    if (!t) {
        if (optional) return LB_OK;
        return lb_set_error(LB_ERR_NOT_FOUND, "%s: tensor '%s' not found", c->label, name);
    }
    bool linear = role >= LB_ROLE_Q && role <= LB_ROLE_DOWN && role != LB_ROLE_Q_BIAS &&
                  role != LB_ROLE_K_BIAS && role != LB_ROLE_V_BIAS && role != LB_ROLE_Q_NORM &&
                  role != LB_ROLE_K_NORM && role != LB_ROLE_FFN_NORM;
    if (is_bnb(t)) {
        if (!linear)
            return lb_set_error(LB_ERR_UNSUPPORTED, "%s: tensor '%s' is %s but not a decoder-layer "
                                "linear weight", c->label, name, lb_type_name(t->type));
        int nd;
        int64_t sh[2];
        lb_role_shape(&c->m->config, role, &nd, sh);
        if (nd != 2)
            return lb_set_error(LB_ERR_FORMAT, "%s: tensor '%s': not a matrix role", c->label,
                                name);
        lb_tensor d;
        lb_status s = bnb_linear(c, name, t, sh[0], sh[1], &d);
        if (s == LB_OK) s = lb_model_builder_set(c->m, role, layer, &d);
        return s != LB_OK ? lb_error_context(s, "%s", c->label) : LB_OK;
    }
    if (t->type != LB_TYPE_F32 && t->type != LB_TYPE_F16 && t->type != LB_TYPE_BF16)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32/F16/BF16 or "
                            "bitsandbytes U8/I8 expected)", c->label, name, lb_type_name(t->type));
    lb_status s = lb_model_builder_set(c->m, role, layer, t);
    if (s != LB_OK) return lb_error_context(s, "%s", c->label);
    if (linear) c->n_dense++;
    return LB_OK;
}

/* A linear of the issue-13 layouts (lb_model_load_layers_ext): prefix.weight,
 * bitsandbytes U8/I8 or dense, [out, in]. */
static lb_status ext_linear(void *user, const char *prefix, int64_t out, int64_t in,
                            lb_tensor *d) {
    bnb_ctx *c = user;
    return lb_model_ext_weight(c->st, c->label, prefix, out, in, is_bnb, bnb_linear, c, "bitsandbytes U8/I8",
                               &c->n_dense, d);
}

static lb_status set_tensor_cb(void *user, const char *name, lb_tensor_role role, int layer,
                               bool optional) {
    return set_tensor(user, name, role, layer, optional);
}

lb_status lb_bnb_build_model(const lb_model_config *cfg, const lb_bnb_qconfig *q,
                             lb_safetensors *st, bool own_st, const char *label,
                             const lb_model_load_opts *opts, lb_model **out) {
    *out = NULL;
    lb_model *m = NULL;
    lb_status s = lb_model_builder_new_st(cfg, st, own_st, &m);
    if (s != LB_OK) return s;
    bnb_ctx c = {.m = m, .st = st, .label = label, .q = q};
    s = lb_model_hf_walk_globals(m, st, set_tensor_cb, &c);
    if (s == LB_OK) s = lb_model_hf_load_layers(m, st, label, opts, set_tensor_cb, ext_linear, &c);
    if (s != LB_OK) {
        lb_model_free(m);
        return s;
    }
    lb_log(LB_LOG_INFO, "%s: bitsandbytes checkpoint (%s): %d quantized linears (%d run by the "
           "bnb kernels as %s, the rest dequantized to F32), %d dense", label, q->kind == LB_BNB_NF4 ? "nf4" : q->kind == LB_BNB_FP4 ? "fp4"
                                                                                      : "int8",
           c.n_q, c.n_native, q->kind == LB_BNB_INT8 ? "int8 32-blocks" : "4-bit 64-blocks",
           c.n_dense);
    *out = m;
    return LB_OK;
}

lb_status lb_model_load_bnb(const char *dir, const lb_model_config *cfg,
                            const lb_model_load_opts *opts, lb_model **out, bool *handled) {
    *handled = false;
    if (!cfg->quantization_config_json) return LB_OK;
    lb_bnb_qconfig q;
    bool is_bnb = false;
    char label[600];
    snprintf(label, sizeof label, "%s/config.json quantization_config", dir);
    LB_TRY(lb_bnb_qconfig_parse(cfg->quantization_config_json,
                                strlen(cfg->quantization_config_json), label, &q, &is_bnb));
    if (!is_bnb) return LB_OK;
    *handled = true;
    lb_safetensors *st = NULL;
    LB_TRY(lb_st_open(dir, &st));
    return lb_bnb_build_model(cfg, &q, st, true, dir, opts, out);
}
