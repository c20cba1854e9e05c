/*
 * GGUF keys and tensors of the issue-13 architectures as llama.cpp 0.7.0
 * writes (convert_hf_to_gguf.py) and reads (src/llama-model.cpp) them:
 *   gemma2 / gemma3: <arch>.attn_logit_softcapping,
 *     final_logit_softcapping, attention.sliding_window (SWA layers: il % 2
 *     < 1 for gemma2, il % 6 < 5 for gemma3 — llama.cpp's set_swa_pattern;
 *     a lowbit extension key <arch>.attention.sliding_window_pattern
 *     (bool array per layer) overrides), rope.freq_base_swa (gemma3
 *     sliding layers), post_attention_norm / post_ffw_norm tensors, norms
 *     already (1 + w); attention scale 1/sqrt(head_dim) (1/sqrt(dim /
 *     n_head) for the 27B shapes: gemma2 46 layers, gemma3 62), or
 *     <arch>.attention.scale when present (lowbit writes it when
 *     query_pre_attn_scalar differs);
 *   phi3: attn_qkv [q; k; v], ffn_up [gate; up], rope_factors_long/short
 *     [hd/2] with rope.scaling.attn_factor and
 *     rope.scaling.original_context_length (longrope);
 *   qwen3moe / qwen2moe / llama with expert_count (Mixtral): expert_count,
 *     expert_used_count, expert_feed_forward_length (llama: the
 *     feed_forward_length), expert_shared_feed_forward_length,
 *     ffn_gate_inp [E, dim], merged ffn_{gate,up,down}_exps [E, ff, dim] /
 *     [E, dim, ff] (views per expert), ffn_{gate,up,down}_shexp,
 *     ffn_gate_inp_shexp [1, dim]; top-k weights renormalised for qwen3moe
 *     and llama (Mixtral), not for qwen2moe, unless <arch>.expert_weights_norm
 *     says otherwise. A layer is MoE when blk.N.ffn_gate_inp exists.
 */
#include "model/model_internal.h"
#include "lowbit/gguf.h"
#include "core/internal.h"

#include <math.h>
#include <stdio.h>

lb_status lb_gguf_config_ext(const lb_gguf *g, const char *a,
                             lb_model_config *c);
lb_status lb_gguf_load_layers_ext(lb_model *m, const lb_gguf *g,
                                  const lb_model_load_opts *opts);

static const char *akey(char *buf, size_t n, const char *arch,
                        const char *suffix) {
    snprintf(buf, n, "%s.%s", arch, suffix);
    return buf;
}

static lb_status opt_f64(const lb_gguf *g, const char *key, double def,
                         double *out) {
    *out = def;
    if (lb_gguf_find_key(g, key) < 0) return LB_OK;
    lb_status s = lb_gguf_get_f64(g, key, out);
    if (s != LB_OK) return lb_error_context(s, "%s", lb_gguf_path(g));
    if (!isfinite(*out))
        return lb_set_error(LB_ERR_FORMAT, "%s: key '%s' is not finite",
                            lb_gguf_path(g), key);
    return LB_OK;
}

static lb_status opt_i64(const lb_gguf *g, const char *key, int64_t def,
                         int64_t lo, int64_t hi, int64_t *out) {
    *out = def;
    if (lb_gguf_find_key(g, key) < 0) return LB_OK;
    lb_status s = lb_gguf_get_i64(g, key, out);
    if (s != LB_OK) return lb_error_context(s, "%s", lb_gguf_path(g));
    if (*out < lo || *out > hi)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: key '%s' = %lld is out of range [%lld, %lld]",
                            lb_gguf_path(g), key, (long long)*out,
                            (long long)lo, (long long)hi);
    return LB_OK;
}

static lb_status rope_factors(const lb_gguf *g, const char *name, int n,
                              float *dst) {
    lb_tensor t;
    LB_TRY(lb_gguf_get_tensor(g, name, &t));
    if (t.type != LB_TYPE_F32 || t.n_dims != 1 || t.shape[0] != n)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor '%s': expected F32 [%d] (head_dim / "
                            "2)", lb_gguf_path(g), name, n);
    const float *f = t.data;
    for (int i = 0; i < n; i++) {
        if (!(f[i] > 0 && isfinite(f[i])))
            return lb_set_error(LB_ERR_FORMAT, "%s: %s[%d] = %g is not a "
                                "positive factor", lb_gguf_path(g), name, i,
                                (double)f[i]);
        dst[i] = f[i];
    }
    return LB_OK;
}

lb_status lb_gguf_config_ext(const lb_gguf *g, const char *a,
                             lb_model_config *c) {
    const char *path = lb_gguf_path(g);
    char k[160];
    int64_t v;
    double d;
    if (c->n_layers > LB_MAX_LAYER_FLAGS)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: more than %d layers",
                            path, LB_MAX_LAYER_FLAGS);
    if (c->arch == LB_ARCH_GEMMA2 || c->arch == LB_ARCH_GEMMA3) {
        const bool g2 = c->arch == LB_ARCH_GEMMA2;
        c->hidden_act = LB_ACT_GELU_TANH;
        c->post_norms = true;
        c->embed_scale = sqrtf((float)c->hidden_size);
        c->qk_norm = !g2;
        LB_TRY(opt_f64(g, akey(k, sizeof k, a, "attn_logit_softcapping"), 0, &d));
        c->attn_softcap = (float)d;
        LB_TRY(opt_f64(g, akey(k, sizeof k, a, "final_logit_softcapping"), 0, &d));
        c->final_softcap = (float)d;
        if (c->attn_softcap < 0 || c->final_softcap < 0)
            return lb_set_error(LB_ERR_FORMAT, "%s: negative soft-capping",
                                path);
        const bool big = c->n_layers == (g2 ? 46 : 62); /* LLM_TYPE_27B */
        const float def_scale =
            1.0f / sqrtf(big ? (float)(c->hidden_size / c->n_heads)
                             : (float)c->head_dim);
        LB_TRY(opt_f64(g, akey(k, sizeof k, a, "attention.scale"), def_scale, &d));
        if (!(d > 0))
            return lb_set_error(LB_ERR_FORMAT, "%s: %s must be positive",
                                path, k);
        c->attn_scale = (float)d;
        LB_TRY(opt_i64(g, akey(k, sizeof k, a, "attention.sliding_window"), 0,
                       0, INT32_MAX, &v));
        c->sliding_window = (int32_t)v;
        c->has_layer_flags = true;
        const int pattern = g2 ? 2 : 6;
        int64_t pi = lb_gguf_find_key(g, akey(k, sizeof k, a,
                                              "attention.sliding_window_pattern"));
        const lb_gguf_value *pv = pi >= 0 ? lb_gguf_kv_value(g, pi) : NULL;
        if (pv && pv->type == LB_GGUF_TYPE_ARRAY) {
            if (pv->n != (uint64_t)c->n_layers)
                return lb_set_error(LB_ERR_FORMAT, "%s: %s has %llu entries "
                                    "for %d layers", path, k,
                                    (unsigned long long)pv->n, c->n_layers);
            for (int l = 0; l < c->n_layers; l++) {
                lb_gguf_value e;
                bool b = false;
                lb_status s = lb_gguf_arr_elem(pv, (uint64_t)l, &e);
                if (s == LB_OK) s = lb_gguf_value_bool(&e, &b);
                if (s != LB_OK) return lb_error_context(s, "%s: %s", path, k);
                if (b) c->layer_flags[l] |= LB_LAYER_SWA;
            }
        } else {
            for (int l = 0; l < c->n_layers; l++)
                if (l % pattern < pattern - 1) c->layer_flags[l] |= LB_LAYER_SWA;
        }
        if (!g2) {
            LB_TRY(opt_f64(g, akey(k, sizeof k, a, "rope.freq_base_swa"),
                           10000.0, &d));
            if (!(d > 0))
                return lb_set_error(LB_ERR_FORMAT, "%s: %s must be positive",
                                    path, k);
            c->rope_local_theta = d;
        }
        return LB_OK;
    }
    if (c->arch == LB_ARCH_PHI3) {
        LB_TRY(opt_i64(g, akey(k, sizeof k, a, "attention.sliding_window"), 0,
                       0, INT32_MAX, &v));
        c->sliding_window = (int32_t)v;
        if (lb_gguf_find_tensor(g, "rope_factors_long.weight") >= 0) {
            const int n = c->head_dim / 2;
            if (n > LB_MAX_ROPE_FACTORS)
                return lb_set_error(LB_ERR_UNSUPPORTED, "%s: longrope with "
                                    "head_dim %d", path, c->head_dim);
            c->rope_scaling = LB_ROPE_SCALING_LONGROPE;
            c->rope_n_factors = n;
            LB_TRY(rope_factors(g, "rope_factors_long.weight", n,
                                c->rope_long_factor));
            LB_TRY(rope_factors(g, "rope_factors_short.weight", n,
                                c->rope_short_factor));
            LB_TRY(opt_i64(g, akey(k, sizeof k, a,
                                   "rope.scaling.original_context_length"),
                           0, 1, INT32_MAX, &v));
            if (v <= 0)
                return lb_set_error(LB_ERR_NOT_FOUND, "%s: longrope factors "
                                    "without %s", path, k);
            c->rope_original_max_position_embeddings = (int32_t)v;
            LB_TRY(opt_f64(g, akey(k, sizeof k, a, "rope.scaling.attn_factor"),
                           1.0, &d));
            if (!(d > 0))
                return lb_set_error(LB_ERR_FORMAT, "%s: %s must be positive",
                                    path, k);
            c->rope_attn_factor = d;
        }
        return LB_OK;
    }
    /* MoE */
    LB_TRY(opt_i64(g, akey(k, sizeof k, a, "expert_count"), 0, 0, 4096, &v));
    if (v <= 0)
        return lb_set_error(LB_ERR_NOT_FOUND, "%s: %s is missing or 0 for a "
                            "mixture-of-experts architecture", path, k);
    c->n_experts = (int32_t)v;
    LB_TRY(opt_i64(g, akey(k, sizeof k, a, "expert_used_count"), 0, 0, 4096,
                   &v));
    if (v < 1 || v > c->n_experts)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s = %lld must be in [1, expert_count %d]",
                            path, k, (long long)v, c->n_experts);
    c->n_experts_used = (int32_t)v;
    if (c->arch == LB_ARCH_MIXTRAL) {
        c->moe_ff = c->intermediate_size;
    } else {
        LB_TRY(opt_i64(g, akey(k, sizeof k, a, "expert_feed_forward_length"),
                       0, 0, 1 << 20, &v));
        if (v <= 0)
            return lb_set_error(LB_ERR_NOT_FOUND, "%s: required key '%s' is "
                                "missing", path, k);
        c->moe_ff = (int32_t)v;
    }
    LB_TRY(opt_i64(g, akey(k, sizeof k, a, "expert_shared_feed_forward_length"),
                   0, 0, 1 << 20, &v));
    c->shared_ff = (int32_t)v;
    if (c->arch == LB_ARCH_QWEN2_MOE && c->shared_ff <= 0)
        return lb_set_error(LB_ERR_NOT_FOUND, "%s: required key '%s' is "
                            "missing", path, k);
    c->norm_topk_prob = c->arch != LB_ARCH_QWEN2_MOE;
    if (lb_gguf_find_key(g, akey(k, sizeof k, a, "expert_weights_norm")) >= 0) {
        lb_status s = lb_gguf_get_bool(g, k, &c->norm_topk_prob);
        if (s != LB_OK) return lb_error_context(s, "%s", path);
    }
    c->has_layer_flags = true;
    for (int l = 0; l < c->n_layers; l++) {
        char tn[96];
        snprintf(tn, sizeof tn, "blk.%d.ffn_gate_inp.weight", l);
        if (lb_gguf_find_tensor(g, tn) >= 0) c->layer_flags[l] |= LB_LAYER_MOE;
        if (c->sliding_window > 0) c->layer_flags[l] |= LB_LAYER_SWA;
    }
    return LB_OK;
}

static lb_status set_t(lb_model *m, const lb_gguf *g, const char *name,
                       lb_tensor_role role, int l) {
    int64_t i = lb_gguf_find_tensor(g, name);
    if (i < 0)
        return lb_set_error(LB_ERR_NOT_FOUND, "%s: tensor '%s' not found",
                            lb_gguf_path(g), name);
    lb_tensor t;
    LB_TRY(lb_gguf_tensor_view(g, i, &t));
    if (role == LB_ROLE_SHEXP_GATE_INP && t.n_dims == 2 && t.shape[0] == 1) {
        t.n_dims = 1;
        t.shape[0] = t.shape[1];
    }
    lb_status s = lb_model_builder_set(m, role, l, &t);
    return s == LB_OK ? LB_OK : lb_error_context(s, "%s", lb_gguf_path(g));
}

/* Split a fused tensor into consecutive row blocks of the given roles. */
static lb_status set_split(lb_model *m, const lb_gguf *g, const char *name,
                           int l, int np, const lb_tensor_role *roles,
                           const int64_t *rows) {
    lb_tensor t;
    int64_t i = lb_gguf_find_tensor(g, name);
    if (i < 0)
        return lb_set_error(LB_ERR_NOT_FOUND, "%s: tensor '%s' not found",
                            lb_gguf_path(g), name);
    LB_TRY(lb_gguf_tensor_view(g, i, &t));
    int64_t total = 0;
    for (int p = 0; p < np; p++) total += rows[p];
    if (t.n_dims != 2 || t.shape[0] != total)
        return lb_set_error(LB_ERR_FORMAT, "%s: tensor '%s': expected %lld "
                            "rows from the head counts / feed_forward_length, "
                            "got %lld", lb_gguf_path(g), name,
                            (long long)total,
                            (long long)(t.n_dims == 2 ? t.shape[0] : -1));
    int64_t r0 = 0;
    for (int p = 0; p < np; p++) {
        lb_tensor v;
        LB_TRY(lb_tensor_rows_view(&t, -1, r0, rows[p], &v));
        lb_status s = lb_model_builder_set(m, roles[p], l, &v);
        if (s != LB_OK) return lb_error_context(s, "%s", lb_gguf_path(g));
        r0 += rows[p];
    }
    return LB_OK;
}

static lb_status set_experts(lb_model *m, const lb_gguf *g, int l) {
    const lb_model_config *c = &m->config;
    static const char *sfx[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    for (int k = 0; k < 3; k++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, sfx[k]);
        int64_t i = lb_gguf_find_tensor(g, name);
        if (i < 0)
            return lb_set_error(LB_ERR_NOT_FOUND, "%s: tensor '%s' not found "
                                "(layer %d has ffn_gate_inp)",
                                lb_gguf_path(g), name, l);
        lb_tensor t;
        LB_TRY(lb_gguf_tensor_view(g, i, &t));
        if (t.n_dims != 3 || t.shape[0] != c->n_experts)
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: tensor '%s': expected 3-D with "
                                "expert_count = %d experts, got %d dims, "
                                "%lld experts",
                                lb_gguf_path(g), name, c->n_experts, t.n_dims,
                                (long long)(t.n_dims ? t.shape[0] : 0));
        for (int e = 0; e < c->n_experts; e++) {
            lb_tensor v;
            LB_TRY(lb_tensor_rows_view(&t, e, 0, t.shape[1], &v));
            lb_status s = lb_model_builder_set_expert(m, LB_ROLE_EXP_GATE + k,
                                                      l, e, &v);
            if (s != LB_OK) return lb_error_context(s, "%s", lb_gguf_path(g));
        }
    }
    return LB_OK;
}

lb_status lb_gguf_load_layers_ext(lb_model *m, const lb_gguf *g,
                                  const lb_model_load_opts *opts) {
    const lb_model_config *c = &m->config;
    const bool phi3 = c->arch == LB_ARCH_PHI3;
    static const struct {
        lb_tensor_role role;
        const char *suffix;
    } per_layer[] = {
        {LB_ROLE_ATTN_NORM, "attn_norm.weight"},
        {LB_ROLE_Q, "attn_q.weight"},
        {LB_ROLE_K, "attn_k.weight"},
        {LB_ROLE_V, "attn_v.weight"},
        {LB_ROLE_O, "attn_output.weight"},
        {LB_ROLE_Q_BIAS, "attn_q.bias"},
        {LB_ROLE_K_BIAS, "attn_k.bias"},
        {LB_ROLE_V_BIAS, "attn_v.bias"},
        {LB_ROLE_Q_NORM, "attn_q_norm.weight"},
        {LB_ROLE_K_NORM, "attn_k_norm.weight"},
        {LB_ROLE_FFN_NORM, "ffn_norm.weight"},
        {LB_ROLE_POST_ATTN_NORM, "post_attention_norm.weight"},
        {LB_ROLE_POST_FFN_NORM, "post_ffw_norm.weight"},
        {LB_ROLE_GATE, "ffn_gate.weight"},
        {LB_ROLE_UP, "ffn_up.weight"},
        {LB_ROLE_DOWN, "ffn_down.weight"},
        {LB_ROLE_FFN_GATE_INP, "ffn_gate_inp.weight"},
        {LB_ROLE_SHEXP_GATE, "ffn_gate_shexp.weight"},
        {LB_ROLE_SHEXP_UP, "ffn_up_shexp.weight"},
        {LB_ROLE_SHEXP_DOWN, "ffn_down_shexp.weight"},
        {LB_ROLE_SHEXP_GATE_INP, "ffn_gate_inp_shexp.weight"},
    };
    const int64_t qd = (int64_t)c->n_heads * c->head_dim,
                  kvd = (int64_t)c->n_kv_heads * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        char name[96];
        for (size_t i = 0; i < LB_ARRAY_LEN(per_layer); i++) {
            const lb_tensor_role r = per_layer[i].role;
            if (!lb_role_used_in(c, r, l)) continue;
            if (phi3 && (r == LB_ROLE_Q || r == LB_ROLE_K || r == LB_ROLE_V ||
                         r == LB_ROLE_GATE || r == LB_ROLE_UP))
                continue;
            snprintf(name, sizeof name, "blk.%d.%s", l, per_layer[i].suffix);
            lb_status ts = set_t(m, g, name, r, l);
            if (ts == LB_ERR_FORMAT && r == LB_ROLE_FFN_GATE_INP)
                return lb_error_context(ts, "router rows = expert_count (%d)",
                                        c->n_experts);
            LB_TRY(ts);
        }
        if (phi3) {
            const lb_tensor_role qkv[3] = {LB_ROLE_Q, LB_ROLE_K, LB_ROLE_V};
            const int64_t qkv_rows[3] = {qd, kvd, kvd};
            snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", l);
            if (lb_gguf_find_tensor(g, name) >= 0) {
                LB_TRY(set_split(m, g, name, l, 3, qkv, qkv_rows));
            } else {
                for (int p = 0; p < 3; p++) {
                    snprintf(name, sizeof name, "blk.%d.attn_%c.weight", l,
                             "qkv"[p]);
                    LB_TRY(set_t(m, g, name, qkv[p], l));
                }
            }
            const lb_tensor_role gu[2] = {LB_ROLE_GATE, LB_ROLE_UP};
            const int64_t gu_rows[2] = {c->intermediate_size, c->intermediate_size};
            snprintf(name, sizeof name, "blk.%d.ffn_up.weight", l);
            LB_TRY(set_split(m, g, name, l, 2, gu, gu_rows));
        }
        if (lb_model_config_layer_moe(c, l)) LB_TRY(set_experts(m, g, l));
        if (opts && !lb_progress_report(&opts->progress, "load",
                                        (uint64_t)l + 1, (uint64_t)c->n_layers))
            return lb_set_error(LB_ERR_CANCELLED, "load cancelled");
    }
    return LB_OK;
}
