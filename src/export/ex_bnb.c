/*
 * ex_bnb.c — bitsandbytes NF4 / FP4 / INT8 checkpoints as export input
 * (lowbit/bnb.h): every quantized weight is checked and dequantized to F32
 * (the loader's lb_bnb_dequantize_*) when the plan is made and goes the
 * fallback route; without --qtype it is written as Q8_0. The dequantized
 * linears are held until the export context is freed (f32 of every
 * quantized linear).
 */
#include "export/ex_ctx.h"
#include "lowbit/bnb.h"
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bnb_state {
    lb_bnb_qconfig q;
    void **own;
    size_t n, cap;
} bnb_state;

lb_status ex_bnb_detect(ex_ctx *c) {
    if (!c->cfg.has_quantization_config || !c->cfg.quantization_config_json) return LB_OK;
    lb_bnb_qconfig q;
    bool is = false;
    char label[600];
    snprintf(label, sizeof label, "%s/config.json quantization_config", c->dir);
    LB_TRY(lb_bnb_qconfig_parse(c->cfg.quantization_config_json,
                                strlen(c->cfg.quantization_config_json), label, &q, &is));
    if (!is) return LB_OK;
    bnb_state *p = calloc(1, sizeof *p);
    if (!p) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    p->q = q;
    c->bnb_state = p;
    return LB_OK;
}

bool ex_bnb_is_aux(const ex_ctx *c, const char *suffix) {
    if (!c->bnb_state) return false;
    static const char *aux[] = {"absmax", "quant_map", "nested_absmax", "nested_quant_map", "SCB",
                                "weight_format"};
    for (size_t i = 0; i < sizeof aux / sizeof aux[0]; i++)
        if (!strcmp(suffix, aux[i])) return true;
    return !strncmp(suffix, "bitsandbytes__", 14);
}

static lb_status own(bnb_state *b, void *p) {
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 16;
        void **o = realloc(b->own, nc * sizeof *o);
        if (!o) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
        b->own = o;
        b->cap = nc;
    }
    b->own[b->n++] = p;
    return LB_OK;
}

static const lb_tensor *find2(const ex_ctx *c, const char *mod, const char *sfx) {
    char nm[400];
    snprintf(nm, sizeof nm, "%s.%s", mod, sfx);
    return lb_st_find(c->st, nm);
}

lb_status ex_bnb_prepare(ex_ctx *c, ex_tensor *t, const char *mod, const lb_tensor **st) {
    bnb_state *b = c->bnb_state;
    const lb_tensor *w = *st;
    if (!b)
        return lb_set_error(LB_ERR_FORMAT, "%s: tensor '%s.weight' is %s but config.json has no "
                            "bitsandbytes quantization_config", c->dir, mod, lb_type_name(w->type));
    int64_t out, in;
    if (b->q.kind == LB_BNB_INT8) {
        if (w->n_dims != 2)
            return lb_set_error(LB_ERR_FORMAT, "%s: %s.weight: INT8 weight is not 2-D", c->dir, mod);
        out = w->shape[0];
        in = w->shape[1];
    } else {
        char sn[64];
        snprintf(sn, sizeof sn, "weight.quant_state.bitsandbytes__%s",
                 b->q.kind == LB_BNB_NF4 ? "nf4" : "fp4");
        const lb_tensor *qs = find2(c, mod, sn);
        if (!qs || qs->type != LB_TYPE_U8 || qs->n_dims != 1)
            return lb_set_error(LB_ERR_FORMAT, "%s: %s.%s missing or not 1-D uint8", c->dir, mod, sn);
        lb_bnb_qstate q;
        lb_status s = lb_bnb_qstate_parse(qs->data, (size_t)qs->shape[0], mod, &q);
        if (s != LB_OK) return lb_error_context(s, "%s", c->dir);
        out = q.shape[0];
        in = q.shape[1];
    }
    size_t bytes;
    if (!lb_mul_ok((size_t)out, (size_t)in, &bytes) || !lb_mul_ok(bytes, 4, &bytes))
        return lb_set_error(LB_ERR_OVERFLOW, "%s: %s.weight too large", c->dir, mod);
    lb_tensor *d = calloc(1, sizeof *d);
    float *W = d ? lb_alloc(bytes) : NULL;
    if (!d || !W) {
        free(d);
        return lb_set_error(LB_ERR_NOMEM, "%s: %s: out of memory", c->dir, mod);
    }
    lb_status s = own(b, d);
    if (s == LB_OK) s = own(b, W);
    else {
        free(d);
        lb_free(W);
        return s;
    }
    if (b->q.kind == LB_BNB_INT8) {
        s = lb_bnb_dequantize_int8(mod, w, find2(c, mod, "SCB"), out, in, W);
    } else {
        char sn[64];
        snprintf(sn, sizeof sn, "weight.quant_state.bitsandbytes__%s",
                 b->q.kind == LB_BNB_NF4 ? "nf4" : "fp4");
        lb_bnb_4bit_tensors bt = {w, find2(c, mod, "weight.absmax"), find2(c, mod, "weight.quant_map"),
                                  find2(c, mod, "weight.nested_absmax"),
                                  find2(c, mod, "weight.nested_quant_map"), find2(c, mod, sn)};
        s = lb_bnb_dequantize_4bit(mod, &bt, out, in, W);
    }
    if (s != LB_OK) return lb_error_context(s, "%s", c->dir);
    d->name = w->name;
    d->type = LB_TYPE_F32;
    d->n_dims = 2;
    d->shape[0] = out;
    d->shape[1] = in;
    d->data = W;
    d->nbytes = bytes;
    t->bnb_deq = true;
    *st = d;
    return LB_OK;
}

void ex_bnb_free(ex_ctx *c) {
    bnb_state *b = c->bnb_state;
    if (!b) return;
    for (size_t i = 0; i < b->n; i++) {
        if (i % 2) lb_free(b->own[i]); /* (tensor, data) pairs */
        else free(b->own[i]);
    }
    free(b->own);
    free(b);
    c->bnb_state = NULL;
}
