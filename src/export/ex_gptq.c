/*
 * GPTQ modules of an export: each NAME.qweight / qzeros / scales / g_idx
 * group becomes one GGUF weight, through the checkpoint reader of
 * lowbit/gptq_ckpt.h (quantization_config parsing with "dynamic" rules,
 * validated lb_gptq_linear views, exact dequantization and repacking).
 *
 * Direct route (no change of the dequantized weights beyond what the
 * target format forces):
 *   lb_gptq_linear_exact_type -> Q4_0 (4-bit, zeros 8) / Q8_0 (8-bit,
 *     zeros 128), d = the fp16 scale: exact;
 *   otherwise 4-bit with every aligned 32-column block inside one group and
 *     scales exact in fp16 -> Q4_1, d = scale, m = fp16(-scale * zero).
 * Everything else is dequantized (lb_gptq_linear_dequantize) for lowbit's
 * quantizer. Rows are then put in GGUF order (the llama q/k permutation
 * is a permutation of output rows, so whole quantized rows move).
 */
#include "export/ex_ctx.h"
#include "lowbit/hadamard.h"
#include "lowbit/file.h"
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>

#define EX_QCFG_MAX ((size_t)16 << 20)

lb_status ex_gptq_detect(ex_ctx *c) {
    lb_gptq_qconfig *q = calloc(1, sizeof *q);
    if (!q) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    char label[600];
    lb_status s = LB_OK;
    if (c->cfg.has_quantization_config && c->cfg.quantization_config_json) {
        snprintf(label, sizeof label, "%s/config.json quantization_config", c->dir);
        s = lb_gptq_qconfig_parse(c->cfg.quantization_config_json,
                                  strlen(c->cfg.quantization_config_json), label, q);
    } else {
        char *p = lb_path_join(c->dir, "quantize_config.json");
        if (!p) {
            free(q);
            return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
        }
        if (!lb_is_file(p)) { /* a dense checkpoint */
            free(p);
            free(q);
            return LB_OK;
        }
        char *js = NULL;
        size_t n = 0;
        snprintf(label, sizeof label, "%s", p);
        s = lb_read_file(p, EX_QCFG_MAX, &js, &n);
        if (s == LB_OK) s = lb_gptq_qconfig_parse(js, n, label, q);
        free(js);
        free(p);
    }
    if (s != LB_OK) {
        lb_gptq_qconfig_clear(q);
        free(q);
        return s;
    }
    if (q->rotation_order && q->rotation_order != c->cfg.hidden_size) {
        s = lb_set_error(LB_ERR_FORMAT, "%s: meta.rotation.order %lld does "
                         "not match hidden_size %d", label,
                         (long long)q->rotation_order, c->cfg.hidden_size);
        lb_gptq_qconfig_clear(q);
        free(q);
        return s;
    }
    if (q->rotation_online_down_order &&
        (q->rotation_online_down_order != c->cfg.intermediate_size ||
         ex_arch_is_ext(c))) {
        s = lb_set_error(LB_ERR_FORMAT, "%s: meta.rotation.online[0].order %lld "
                         "does not match intermediate_size %d%s", label,
                         (long long)q->rotation_online_down_order,
                         c->cfg.intermediate_size,
                         ex_arch_is_ext(c) ? " (or the architecture is not "
                                             "Llama/Mistral/Qwen2/Qwen3)" : "");
        lb_gptq_qconfig_clear(q);
        free(q);
        return s;
    }
    c->gptq = true;
    c->gptq_state = q;
    return LB_OK;
}

void ex_gptq_free(ex_ctx *c) {
    if (!c->gptq_state) return;
    lb_gptq_qconfig_clear(c->gptq_state);
    free(c->gptq_state);
    c->gptq_state = NULL;
}

static const lb_tensor *part(const ex_ctx *c, const char *module, const char *suffix) {
    char name[256];
    snprintf(name, sizeof name, "%s.%s", module, suffix);
    return lb_st_find(c->st, name);
}

static lb_status bad(const ex_ctx *c, const char *module, const char *what) {
    return lb_set_error(LB_ERR_FORMAT, "%s: GPTQ module %s: %s", c->dir, module, what);
}

/* Every aligned 32-column block inside one group. */
static bool blocks_in_groups(const lb_gptq_linear *l) {
    for (int64_t b = 0; b < l->in_features / 32; b++) {
        int32_t g = lb_gptq_linear_group(l, b * 32);
        for (int j = 1; j < 32; j++)
            if (lb_gptq_linear_group(l, b * 32 + j) != g) return false;
    }
    return true;
}

static bool scales_exact_f16(const lb_gptq_linear *l) {
    if (l->scales_type == LB_TYPE_F16) return true;
    for (int64_t g = 0; g < l->n_groups; g++)
        for (int64_t o = 0; o < l->out_features; o++) {
            float s = lb_gptq_linear_scale(l, g, o);
            if (lb_f16_to_f32(lb_f32_to_f16(s)) != s) return false;
        }
    return true;
}

/* Expected [out, in] of a GGUF weight base name under the config. */
static bool expected_out_in(const lb_model_config *cfg, const char *gguf_name,
                            int64_t *out, int64_t *in) {
    const int64_t dim = cfg->hidden_size, hd = cfg->head_dim,
                  q = (int64_t)cfg->n_heads * hd, kv = (int64_t)cfg->n_kv_heads * hd,
                  ff = cfg->intermediate_size, V = cfg->vocab_size, mff = cfg->moe_ff,
                  sff = cfg->shared_ff;
    /* Phi-3's fused gate_up_proj is GGUF ffn_up [2 ff, dim] */
    const int64_t up = cfg->arch == LB_ARCH_PHI3 ? 2 * ff : ff;
    const char *k = strncmp(gguf_name, "blk.", 4) ? gguf_name : strchr(gguf_name + 4, '.') + 1;
    size_t kl = strcspn(k, ".");
    struct {
        const char *n;
        int64_t o, i;
    } tab[] = {{"output", V, dim},        {"attn_q", q, dim},       {"attn_k", kv, dim},
               {"attn_v", kv, dim},       {"attn_output", dim, q},  {"ffn_gate", ff, dim},
               {"ffn_up", up, dim},       {"ffn_down", dim, ff},
               /* issue-13 architectures: Phi-3 attn_qkv, one expert of the
                * stacked ffn_*_exps, the shared expert */
               {"attn_qkv", q + 2 * kv, dim}, {"ffn_gate_exps", mff, dim},
               {"ffn_up_exps", mff, dim},  {"ffn_down_exps", dim, mff},
               {"ffn_gate_shexp", sff, dim}, {"ffn_up_shexp", sff, dim},
               {"ffn_down_shexp", dim, sff}};
    for (size_t i = 0; i < LB_ARRAY_LEN(tab); i++)
        if (strlen(tab[i].n) == kl && !strncmp(k, tab[i].n, kl)) {
            *out = tab[i].o;
            *in = tab[i].i;
            return true;
        }
    return false;
}

lb_status ex_gptq_prepare(ex_ctx *c, ex_tensor *t, const char *module) {
    const lb_gptq_qconfig *q = c->gptq_state;
    const lb_tensor *qw = part(c, module, "qweight"), *qz = part(c, module, "qzeros"),
                    *sc = part(c, module, "scales"), *gi = part(c, module, "g_idx");
    if (!qw || !qz || !sc) return bad(c, module, "qweight, qzeros and scales are required");
    if (part(c, module, "weight"))
        return bad(c, module, "has both a dense .weight and .qweight");
    int64_t out, in;
    if (!expected_out_in(&c->cfg, t->info.name, &out, &in))
        return bad(c, module, "is not a linear layer lowbit exports");
    lb_gptq_module_cfg mc = lb_gptq_qconfig_module(q, module);
    if (!mc.quantized)
        return bad(c, module, "is excluded by a \"-:\" dynamic rule but stored quantized");
    const bool awq = q->format == LB_GPTQ_FORMAT_AWQ;
    if (awq) {
        /* AutoAWQ GEMM: qweight [in, out/8], qzeros/scales [in/group, ...] */
        const int64_t gs = mc.group_size > 0 ? mc.group_size : in;
        if (mc.bits != 4 || in % gs || out % 8)
            return bad(c, module, "AWQ GEMM needs 4 bits and in_features a multiple of group_size");
        if (qw->type != LB_TYPE_I32 || qw->n_dims != 2 || qw->shape[0] != in ||
            qw->shape[1] != out / 8)
            return bad(c, module, "AWQ qweight must be I32 [in, out/8] for the config's shape");
        if (qz->type != LB_TYPE_I32 || qz->n_dims != 2 || qz->shape[0] != in / gs ||
            qz->shape[1] != out / 8)
            return bad(c, module, "AWQ qzeros must be I32 [in/group_size, out/8]");
        if ((sc->type != LB_TYPE_F16 && sc->type != LB_TYPE_F32 && sc->type != LB_TYPE_BF16) ||
            sc->n_dims != 2 || sc->shape[0] != in / gs || sc->shape[1] != out)
            return bad(c, module, "AWQ scales must be F16 [in/group_size, out]");
        if (gi) return bad(c, module, "has a g_idx, which the AWQ GEMM layout does not");
    } else if (qw->type != LB_TYPE_I32 || qw->n_dims != 2 || qw->shape[1] != out)
        return bad(c, module, "qweight must be I32 [in*bits/32, out] for the config's shape");
    if (!awq && qw->shape[0] * 32 != in * mc.bits) {
        char why[160];
        snprintf(why, sizeof why, "qweight has %lld rows, %d-bit codes of %lld inputs need %lld",
                 (long long)qw->shape[0], mc.bits, (long long)in,
                 (long long)(in * mc.bits / 32));
        return bad(c, module, why);
    }
    if (!awq && (qz->type != LB_TYPE_I32 || qz->n_dims != 2 ||
        (qz->shape[1] != (out * mc.bits + 31) / 32 && qz->shape[1] != (out + 31) / 32 * mc.bits)))
        return bad(c, module, "qzeros must be I32 [groups, ceil(out*bits/32)]");
    if (sc->n_dims != 2 || sc->shape[1] != out || sc->shape[0] != qz->shape[0])
        return bad(c, module, "scales must be [groups, out] with qzeros' groups");
    if (gi && (gi->type != LB_TYPE_I32 || gi->n_dims != 1 || gi->shape[0] != in))
        return bad(c, module, "g_idx must be I32 [in]");
    lb_gptq_linear *l = &t->lin;
    memset(l, 0, sizeof *l);
    l->out_features = out;
    l->in_features = in;
    l->bits = mc.bits;
    l->n_groups = qz->shape[0];
    l->format = q->format;
    l->qweight = qw->data;
    l->qzeros = qz->data;
    l->scales = sc->data;
    l->scales_type = sc->type;
    l->g_idx = gi ? gi->data : NULL;
    l->group_size = mc.group_size;
    l->qzeros_cols = qz->shape[1];
    char label[256];
    snprintf(label, sizeof label, "%s/%s", c->dir, module);
    LB_TRY(lb_gptq_linear_check(l, label));
    (void)lb_gptq_linear_sanitize(l, label, mc.sym, mc.desc_act);
    t->qweight = qw;
    t->qzeros = qz;
    t->scales = sc;
    t->g_idx = gi;
    t->info.n_dims = 2;
    t->info.shape[0] = out;
    t->info.shape[1] = in;
    t->info.bits = mc.bits;
    t->info.group_size = mc.group_size;
    t->info.sym = mc.sym;
    t->info.desc_act = mc.desc_act;
    t->is_weight2d = true;
    /* a rotated checkpoint's down_proj holds W T^T and the runtime applies
     * T to its input; llama.cpp has no such transform: fold T back */
    const size_t ml = strlen(module);
    if (q->rotation_online_down_order && ml >= 14 &&
        !strcmp(module + ml - 14, ".mlp.down_proj")) {
        t->unrotate_down = true;
        snprintf(t->direct_why, sizeof t->direct_why,
                 "online Hadamard on its input (meta.rotation.online): llama.cpp "
                 "has none, so W T^T is folded back to W and re-quantized");
        return LB_OK;
    }
    /* direct route? */
    int exact = lb_gptq_linear_exact_type(l);
    if (exact >= 0) {
        t->direct_type = exact;
        return LB_OK;
    }
    bool blocks = blocks_in_groups(l);
    if (l->bits == 4 && blocks && scales_exact_f16(l)) {
        t->direct_type = LB_TYPE_Q4_1;
        return LB_OK;
    }
    if (l->bits == 2 || l->bits == 3)
        snprintf(t->direct_why, sizeof t->direct_why, "%d-bit codes have no GGUF block type",
                 l->bits);
    else if (!blocks && mc.desc_act)
        snprintf(t->direct_why, sizeof t->direct_why,
                 "act-order g_idx: a 32-column block spans several groups");
    else if (!blocks)
        snprintf(t->direct_why, sizeof t->direct_why,
                 "group_size %d: a 32-column block spans several groups",
                 mc.group_size);
    else if (l->bits == 8)
        snprintf(t->direct_why, sizeof t->direct_why,
                 "8-bit zeros other than 128 or scales not exact in fp16 (Q8_0 has no offset)");
    else
        snprintf(t->direct_why, sizeof t->direct_why, "scales not exact in fp16");
    return LB_OK;
}

/* data'[r] = data[src[r]] for rows of row_bytes, in place (cycle walk). */
static lb_status permute_rows(void *data, size_t row_bytes, const int64_t *src, int64_t n) {
    uint8_t *d = data;
    uint8_t *tmp = malloc(row_bytes ? row_bytes : 1);
    uint8_t *done = calloc((size_t)n ? (size_t)n : 1, 1);
    if (!tmp || !done) {
        free(tmp);
        free(done);
        return lb_set_error(LB_ERR_NOMEM, "export: out of memory (row permutation)");
    }
    for (int64_t r0 = 0; r0 < n; r0++) {
        if (done[r0] || src[r0] == r0) {
            done[r0] = 1;
            continue;
        }
        memcpy(tmp, d + (size_t)r0 * row_bytes, row_bytes);
        int64_t cur = r0;
        for (;;) {
            int64_t nxt = src[cur];
            done[cur] = 1;
            if (nxt == r0) {
                memcpy(d + (size_t)cur * row_bytes, tmp, row_bytes);
                break;
            }
            memcpy(d + (size_t)cur * row_bytes, d + (size_t)nxt * row_bytes, row_bytes);
            cur = nxt;
        }
    }
    free(tmp);
    free(done);
    return LB_OK;
}

static lb_status to_gguf_rows(const ex_tensor *t, void *data, size_t row_bytes) {
    if (!t->perm_heads) return LB_OK;
    const int64_t rows = t->info.shape[0];
    int64_t *src = malloc((size_t)rows * sizeof *src);
    if (!src) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    lb_status s = lb_export_qk_permutation(rows, t->perm_heads, src);
    if (s == LB_OK) s = permute_rows(data, row_bytes, src, rows);
    free(src);
    return s;
}

/* rows w' of W [rows, n] (= W_orig T^T) <- T^T w' (W_orig), in double */
static lb_status unrotate_rows(float *W, int64_t rows, int64_t n) {
    lb_hadamard h;
    LB_TRY(lb_hadamard_init(&h, n));
    double *b = malloc((size_t)n * sizeof(double)), *tmp = malloc((size_t)n * sizeof(double));
    if (!b || !tmp) {
        free(b);
        free(tmp);
        lb_hadamard_free(&h);
        return lb_set_error(LB_ERR_NOMEM, "export: out of memory (Hadamard fold)");
    }
    for (int64_t r = 0; r < rows; r++) {
        float *w = W + r * n;
        for (int64_t i = 0; i < n; i++) b[i] = w[i];
        lb_hadamard_apply_f64(&h, b, true, tmp);
        for (int64_t i = 0; i < n; i++) w[i] = (float)b[i];
    }
    free(b);
    free(tmp);
    lb_hadamard_free(&h);
    return LB_OK;
}

lb_status ex_gptq_dequantize(const ex_ctx *c, const ex_tensor *t, float *W) {
    (void)c;
    LB_TRY(lb_gptq_linear_dequantize(&t->lin, W));
    if (t->unrotate_down)
        LB_TRY(unrotate_rows(W, t->info.shape[0], t->info.shape[1]));
    return to_gguf_rows(t, W, (size_t)t->info.shape[1] * sizeof(float));
}

lb_status ex_gptq_direct(const ex_ctx *c, const ex_tensor *t, void *dst) {
    (void)c;
    LB_TRY(lb_gptq_linear_repack(&t->lin, t->info.type, dst, t->info.nbytes));
    return to_gguf_rows(t, dst, t->info.nbytes / (size_t)t->info.shape[0]);
}
