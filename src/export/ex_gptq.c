/* GPTQ modules of an export (placeholder until the GPTQ checkpoint reader
 * of branch quantize is merged). */
#include "export/ex_ctx.h"
#include "lowbit/file.h"
#include "core/internal.h"

#include <stdlib.h>

lb_status ex_gptq_detect(ex_ctx *c) {
    c->gptq = c->cfg.has_quantization_config;
    if (!c->gptq) {
        char *p = lb_path_join(c->dir, "quantize_config.json");
        if (!p) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
        c->gptq = lb_is_file(p);
        free(p);
    }
    if (c->gptq)
        return lb_set_error(LB_ERR_UNSUPPORTED, "export: GPTQ checkpoints not supported yet");
    return LB_OK;
}

lb_status ex_gptq_prepare(ex_ctx *c, ex_tensor *t, const char *module) {
    (void)c; (void)t;
    return lb_set_error(LB_ERR_UNSUPPORTED, "export: GPTQ module %s", module);
}

lb_status ex_gptq_dequantize(const ex_ctx *c, const ex_tensor *t, float *W) {
    (void)c; (void)W;
    return lb_set_error(LB_ERR_UNSUPPORTED, "export: GPTQ module %s", t->info.source);
}

lb_status ex_gptq_direct(const ex_ctx *c, const ex_tensor *t, void *dst) {
    (void)c; (void)dst;
    return lb_set_error(LB_ERR_UNSUPPORTED, "export: GPTQ module %s", t->info.source);
}

void ex_gptq_free(ex_ctx *c) { (void)c; }
