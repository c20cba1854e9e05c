/*
 * ex_fp8.c — FP8 weight-only checkpoints as export input (lowbit/fp8.h):
 * every F8 weight is dequantized with its scale (W = float(q) * s) and goes
 * the fallback route; without --qtype it is written as Q8_0 (per 32
 * weights one fp16 scale and int8 codes: an FP8 E4M3 value has 4
 * significant bits, Q8_0 keeps 8 per block, so the added error is Q8_0's
 * rounding — at most half a step of max|w|/127 per block; measured in
 * docs/quantize-formats.md).
 */
#include "export/ex_ctx.h"
#include "lowbit/fp8.h"
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>

lb_status ex_fp8_detect(ex_ctx *c) {
    if (!c->cfg.has_quantization_config || !c->cfg.quantization_config_json) return LB_OK;
    lb_fp8_qconfig q;
    bool is = false;
    char label[600];
    snprintf(label, sizeof label, "%s/config.json quantization_config", c->dir);
    LB_TRY(lb_fp8_qconfig_parse(c->cfg.quantization_config_json,
                                strlen(c->cfg.quantization_config_json), label, &q, &is));
    if (!is) return LB_OK;
    lb_fp8_qconfig *p = malloc(sizeof *p);
    if (!p) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    *p = q;
    c->fp8_state = p;
    return LB_OK;
}

bool ex_fp8_is_aux(const ex_ctx *c, const char *suffix) {
    const lb_fp8_qconfig *q = c->fp8_state;
    return q && (!strcmp(suffix, q->scale_suffix) || !strcmp(suffix, "input_scale"));
}

lb_status ex_fp8_prepare(ex_ctx *c, ex_tensor *t, const char *mod, const lb_tensor *w) {
    const lb_fp8_qconfig *q = c->fp8_state;
    if (!q)
        return lb_set_error(LB_ERR_FORMAT, "%s: tensor '%s.weight' is FP8 but config.json has no "
                            "FP8 quantization_config", c->dir, mod);
    char sn[300];
    snprintf(sn, sizeof sn, "%s.%s", mod, q->scale_suffix);
    const lb_tensor *sc = lb_st_find(c->st, sn);
    lb_status s = lb_fp8_check(q, mod, w, sc);
    if (s != LB_OK) return lb_error_context(s, "%s", c->dir);
    t->fp8_scale = sc;
    t->fp8_q = q;
    return LB_OK;
}

lb_status ex_fp8_rows(const ex_tensor *t, const int64_t *perm, int64_t r0, int64_t nr,
                      float *dst) {
    const lb_fp8_qconfig *q = t->fp8_q;
    const int64_t cols = t->dense->shape[1];
    for (int64_t i = 0; i < nr; i++) {
        int64_t sr = perm ? perm[r0 + i] : r0 + i;
        LB_TRY(lb_fp8_dequantize_rows(q, t->dense, t->fp8_scale, sr, 1, dst + i * cols));
    }
    return LB_OK;
}

void ex_fp8_free(ex_ctx *c) {
    free(c->fp8_state);
    c->fp8_state = NULL;
}
