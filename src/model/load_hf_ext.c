/*
 * Hugging Face tensors of the issue-13 architectures (transformers 5.12
 * modeling_{gemma2,gemma3,phi3,qwen3_moe,qwen2_moe,mixtral}.py):
 *   - Gemma 2/3: input_layernorm, post_attention_layernorm (on the attention
 *     output), pre_feedforward_layernorm, post_feedforward_layernorm;
 *     GemmaRMSNorm multiplies by (1 + w), stored here as (1 + w) in f32 like
 *     llama.cpp's converter writes it;
 *   - Phi-3: self_attn.qkv_proj [q; k; v] and mlp.gate_up_proj [gate; up]
 *     split into row views (no copy);
 *   - MoE: mlp.gate (router), mlp.experts.E.{gate,up,down}_proj (Mixtral:
 *     block_sparse_moe.gate, experts.E.{w1,w3,w2}; the transformers-5
 *     fused mlp.experts.gate_up_proj [E, 2 ff, dim] / down_proj [E, dim, ff]
 *     are sliced per expert), Qwen2-MoE mlp.shared_expert.* and
 *     mlp.shared_expert_gate [1, dim].
 * Errors name the tensor and the config key it contradicts.
 */
#include "model/model_internal.h"
#include "lowbit/safetensors.h"
#include "core/internal.h"

#include <stdio.h>


/* The source of the linears' weights: `prefix.weight` of st, or the
 * caller's function (the GPTQ loader). */
typedef struct lin_src {
    const lb_safetensors *st;
    const char *dir;
    lb_ext_linear_fn fn;
    void *user;
} lin_src;

static lb_status check_dtype(const char *dir, const lb_tensor *t) {
    if (t->type != LB_TYPE_F32 && t->type != LB_TYPE_F16 &&
        t->type != LB_TYPE_BF16)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: tensor '%s' has dtype %s (lowbit loads "
                            "F32/F16/BF16 weights)",
                            dir, t->name ? t->name : "?",
                            lb_type_name(t->type));
    return LB_OK;
}

static const lb_tensor *need(const lb_safetensors *st, const char *dir,
                             const char *name, lb_status *s) {
    const lb_tensor *t = lb_st_find(st, name);
    if (!t) {
        *s = lb_set_error(LB_ERR_NOT_FOUND, "%s: tensor '%s' not found", dir,
                          name);
        return NULL;
    }
    *s = check_dtype(dir, t);
    return *s == LB_OK ? t : NULL;
}

static lb_status set_named(lb_model *m, const lb_safetensors *st,
                           const char *dir, const char *name,
                           lb_tensor_role role, int l) {
    lb_status s;
    const lb_tensor *t = need(st, dir, name, &s);
    if (!t) return s;
    lb_tensor v = *t;
    if (role == LB_ROLE_SHEXP_GATE_INP && v.n_dims == 2 && v.shape[0] == 1) {
        v.n_dims = 1; /* shared_expert_gate [1, dim] -> [dim] */
        v.shape[0] = v.shape[1];
    }
    s = lb_model_builder_set(m, role, l, &v);
    return s == LB_OK ? LB_OK : lb_error_context(s, "%s", dir);
}

/* Rows [r0, r0 + nr) of the 2-D (or, with slab >= 0, of slab `slab` of the
 * 3-D) tensor t as a 2-D view (no copy). */
lb_status lb_tensor_rows_view(const lb_tensor *t, int slab, int64_t r0,
                              int64_t nr, lb_tensor *v) {
    const int nd = slab >= 0 ? 3 : 2;
    const char *name = t->name ? t->name : "?";
    if (t->n_dims != nd)
        return lb_set_error(LB_ERR_FORMAT, "tensor '%s' has %d dims, "
                            "expected %d", name, t->n_dims, nd);
    const int64_t rows = t->shape[nd - 2], cols = t->shape[nd - 1];
    if (r0 < 0 || nr < 0 || r0 + nr > rows ||
        (slab >= 0 && slab >= t->shape[0]))
        return lb_set_error(LB_ERR_FORMAT,
                            "tensor '%s' is too small (%lld rows) for the "
                            "config's sizes",
                            name, (long long)rows);
    size_t rb, need;
    if (!lb_row_size(t->type, cols, &rb) ||
        !lb_mul_ok(rb, (size_t)rows * (size_t)(slab >= 0 ? t->shape[0] : 1),
                   &need) ||
        need > t->nbytes)
        return lb_set_error(LB_ERR_FORMAT, "tensor '%s': bad row size", name);
    *v = *t;
    v->n_dims = 2;
    v->shape[0] = nr;
    v->shape[1] = cols;
    v->shape[2] = 0;
    const size_t first = (size_t)(slab >= 0 ? slab : 0) * (size_t)rows +
                         (size_t)r0;
    v->data = (const uint8_t *)t->data + first * rb;
    v->nbytes = (size_t)nr * rb;
    return LB_OK;
}

static lb_status row_view(const char *dir, const lb_tensor *t, int slab,
                          int64_t r0, int64_t nr, lb_tensor *v) {
    lb_status s = lb_tensor_rows_view(t, slab, r0, nr, v);
    return s == LB_OK ? LB_OK : lb_error_context(s, "%s", dir);
}

/* Linear `prefix` [out, in] from the source. */
static lb_status get_linear(const lin_src *ls, const char *prefix,
                            int64_t out, int64_t in, lb_tensor *t) {
    if (ls->fn) return ls->fn(ls->user, prefix, out, in, t);
    char name[224];
    snprintf(name, sizeof name, "%s.weight", prefix);
    lb_status s;
    const lb_tensor *f = need(ls->st, ls->dir, name, &s);
    if (!f) return s;
    *t = *f;
    return LB_OK;
}

/* Linear `prefix` set for role (shape from the role). */
static lb_status set_linear(lb_model *m, const lin_src *ls, const char *prefix,
                            lb_tensor_role role, int l, int e) {
    int nd;
    int64_t sh[3];
    lb_role_shape(&m->config, role, &nd, sh);
    lb_tensor t;
    LB_TRY(get_linear(ls, prefix, sh[0], sh[1], &t));
    lb_status s = e >= 0 ? lb_model_builder_set_expert(m, role, l, e, &t)
                         : lb_model_builder_set(m, role, l, &t);
    return s == LB_OK ? LB_OK : lb_error_context(s, "%s", ls->dir);
}

static lb_status load_phi3_layer(lb_model *m, const lin_src *ls,
                                 const char *dir, int l) {
    const lb_model_config *c = &m->config;
    const int64_t qd = (int64_t)c->n_heads * c->head_dim,
                  kvd = (int64_t)c->n_kv_heads * c->head_dim,
                  ff = c->intermediate_size;
    char name[192];
    lb_status s;
    lb_tensor qkv_t, gu_t;
    snprintf(name, sizeof name, "model.layers.%d.self_attn.qkv_proj", l);
    LB_TRY(get_linear(ls, name, qd + 2 * kvd, c->hidden_size, &qkv_t));
    const lb_tensor *qkv = &qkv_t;
    if (qkv->n_dims != 2 || qkv->shape[0] != qd + 2 * kvd)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor '%s.%s': expected [%lld, %d] (q %lld + "
                            "k, v %lld rows each from num_attention_heads, "
                            "num_key_value_heads, head_dim), got %lld rows",
                            dir, name, ls->fn ? "qweight" : "weight", (long long)(qd + 2 * kvd),
                            c->hidden_size, (long long)qd, (long long)kvd,
                            (long long)qkv->shape[0]);
    lb_tensor v;
    const int64_t r0[3] = {0, qd, qd + kvd}, nr[3] = {qd, kvd, kvd};
    const lb_tensor_role rr[3] = {LB_ROLE_Q, LB_ROLE_K, LB_ROLE_V};
    for (int i = 0; i < 3; i++) {
        LB_TRY(row_view(dir, qkv, -1, r0[i], nr[i], &v));
        s = lb_model_builder_set(m, rr[i], l, &v);
        if (s != LB_OK) return lb_error_context(s, "%s", dir);
    }
    snprintf(name, sizeof name, "model.layers.%d.mlp.gate_up_proj", l);
    LB_TRY(get_linear(ls, name, 2 * ff, c->hidden_size, &gu_t));
    const lb_tensor *gu = &gu_t;
    if (gu->n_dims != 2 || gu->shape[0] != 2 * ff)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor '%s.%s': expected %lld rows (2 x "
                            "intermediate_size), got %lld",
                            dir, name, ls->fn ? "qweight" : "weight", (long long)(2 * ff),
                            (long long)gu->shape[0]);
    for (int i = 0; i < 2; i++) {
        LB_TRY(row_view(dir, gu, -1, i * ff, ff, &v));
        s = lb_model_builder_set(m, i ? LB_ROLE_UP : LB_ROLE_GATE, l, &v);
        if (s != LB_OK) return lb_error_context(s, "%s", dir);
    }
    return LB_OK;
}

static lb_status load_experts(lb_model *m, const lin_src *ls,
                              const lb_safetensors *st, const char *dir,
                              int l) {
    const lb_model_config *c = &m->config;
    const bool mix = c->arch == LB_ARCH_MIXTRAL;
    const char *blk = mix ? "block_sparse_moe" : "mlp";
    static const char *qn[3] = {"gate_proj", "up_proj", "down_proj"};
    static const char *mn[3] = {"w1", "w3", "w2"};
    char name[192], pre[96];
    snprintf(pre, sizeof pre, "model.layers.%d.%s", l, blk);
    snprintf(name, sizeof name, "%s.gate.weight", pre);
    lb_status rs = set_named(m, st, dir, name, LB_ROLE_FFN_GATE_INP, l);
    if (rs == LB_ERR_FORMAT)
        return lb_error_context(rs, "router rows = num_experts (%d)", c->n_experts);
    LB_TRY(rs);
    /* more experts in the file than the config declares */
    snprintf(name, sizeof name, "%s.experts.%d.%s.weight", pre, c->n_experts,
             mix ? mn[0] : qn[0]);
    char qname[200];
    snprintf(qname, sizeof qname, "%s.experts.%d.%s.qweight", pre,
             c->n_experts, mix ? mn[0] : qn[0]);
    if (lb_st_find(st, name) || lb_st_find(st, qname))
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor '%s' exists but num_experts is %d",
                            dir, name, c->n_experts);
    char fused[192];
    snprintf(fused, sizeof fused, "%s.experts.gate_up_proj", pre);
    const lb_tensor *gu = lb_st_find(st, fused);
    snprintf(name, sizeof name, "%s.experts.0.%s.weight", pre,
             mix ? mn[0] : qn[0]);
    snprintf(qname, sizeof qname, "%s.experts.0.%s.qweight", pre,
             mix ? mn[0] : qn[0]);
    if (gu && !lb_st_find(st, name) && !lb_st_find(st, qname)) {
        /* transformers-5 fused experts */
        lb_status s;
        snprintf(name, sizeof name, "%s.experts.down_proj", pre);
        const lb_tensor *dn = need(st, dir, name, &s);
        if (!dn) return s;
        LB_TRY(check_dtype(dir, gu));
        if (gu->n_dims != 3 || gu->shape[0] != c->n_experts ||
            dn->n_dims != 3 || dn->shape[0] != c->n_experts)
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: '%s' / '%s' must be 3-D with num_experts "
                                "= %d slabs",
                                dir, fused, name, c->n_experts);
        for (int e = 0; e < c->n_experts; e++) {
            lb_tensor v;
            for (int k = 0; k < 2; k++) {
                LB_TRY(row_view(dir, gu, e, k * (int64_t)c->moe_ff, c->moe_ff, &v));
                s = lb_model_builder_set_expert(m, LB_ROLE_EXP_GATE + k, l, e, &v);
                if (s != LB_OK) return lb_error_context(s, "%s", dir);
            }
            LB_TRY(row_view(dir, dn, e, 0, dn->shape[1], &v));
            s = lb_model_builder_set_expert(m, LB_ROLE_EXP_DOWN, l, e, &v);
            if (s != LB_OK) return lb_error_context(s, "%s", dir);
        }
    } else {
        for (int e = 0; e < c->n_experts; e++)
            for (int k = 0; k < 3; k++) {
                snprintf(name, sizeof name, "%s.experts.%d.%s", pre, e,
                         mix ? mn[k] : qn[k]);
                LB_TRY(set_linear(m, ls, name, LB_ROLE_EXP_GATE + k, l, e));
            }
    }
    if (c->shared_ff > 0) {
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "%s.shared_expert.%s", pre, qn[k]);
            LB_TRY(set_linear(m, ls, name, LB_ROLE_SHEXP_GATE + k, l, -1));
        }
        snprintf(name, sizeof name, "%s.shared_expert_gate.weight", pre);
        LB_TRY(set_named(m, st, dir, name, LB_ROLE_SHEXP_GATE_INP, l));
    }
    return LB_OK;
}

lb_status lb_model_ext_weight(const lb_safetensors *st, const char *label,
                              const char *prefix, int64_t out, int64_t in,
                              bool (*is_q)(const lb_tensor *t), lb_qweight_fn conv,
                              void *user, const char *kinds, int *n_dense, lb_tensor *d) {
    char name[300];
    snprintf(name, sizeof name, "%s.weight", prefix);
    const lb_tensor *t = lb_st_find(st, name);
    if (!t) return lb_set_error(LB_ERR_NOT_FOUND, "%s: tensor '%s' not found", label, name);
    if (is_q(t)) return conv(user, name, t, out, in, d);
    if (t->type != LB_TYPE_F32 && t->type != LB_TYPE_F16 && t->type != LB_TYPE_BF16)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32/F16/BF16 or "
                            "%s expected)", label, name, lb_type_name(t->type), kinds);
    (*n_dense)++;
    *d = *t;
    return LB_OK;
}

lb_status lb_model_load_layers_ext(lb_model *m, const lb_safetensors *st,
                                   const char *dir,
                                   const lb_model_load_opts *opts,
                                   lb_ext_linear_fn linear, void *user) {
    const lin_src ls = {st, dir, linear, user};
    const lb_model_config *c = &m->config;
    const bool gemma = c->post_norms;
    for (int l = 0; l < c->n_layers; l++) {
        char name[192];
        struct {
            lb_tensor_role role;
            const char *suffix;
        } t[] = {
            {LB_ROLE_ATTN_NORM, "input_layernorm.weight"},
            {LB_ROLE_Q, "self_attn.q_proj.weight"},
            {LB_ROLE_K, "self_attn.k_proj.weight"},
            {LB_ROLE_V, "self_attn.v_proj.weight"},
            {LB_ROLE_O, "self_attn.o_proj.weight"},
            {LB_ROLE_Q_BIAS, "self_attn.q_proj.bias"},
            {LB_ROLE_K_BIAS, "self_attn.k_proj.bias"},
            {LB_ROLE_V_BIAS, "self_attn.v_proj.bias"},
            {LB_ROLE_Q_NORM, "self_attn.q_norm.weight"},
            {LB_ROLE_K_NORM, "self_attn.k_norm.weight"},
            {LB_ROLE_FFN_NORM, gemma ? "pre_feedforward_layernorm.weight"
                                     : "post_attention_layernorm.weight"},
            {LB_ROLE_POST_ATTN_NORM, "post_attention_layernorm.weight"},
            {LB_ROLE_POST_FFN_NORM, "post_feedforward_layernorm.weight"},
            {LB_ROLE_GATE, "mlp.gate_proj.weight"},
            {LB_ROLE_UP, "mlp.up_proj.weight"},
            {LB_ROLE_DOWN, "mlp.down_proj.weight"},
        };
        const bool phi3 = c->arch == LB_ARCH_PHI3;
        for (size_t i = 0; i < LB_ARRAY_LEN(t); i++) {
            const lb_tensor_role r = t[i].role;
            if (!lb_role_used_in(c, r, l)) continue;
            if (phi3 && (r == LB_ROLE_Q || r == LB_ROLE_K || r == LB_ROLE_V ||
                         r == LB_ROLE_GATE || r == LB_ROLE_UP))
                continue;
            snprintf(name, sizeof name, "model.layers.%d.%s", l, t[i].suffix);
            if (r == LB_ROLE_Q || r == LB_ROLE_K || r == LB_ROLE_V ||
                r == LB_ROLE_O || r == LB_ROLE_GATE || r == LB_ROLE_UP ||
                r == LB_ROLE_DOWN) {
                *strrchr(name, '.') = '\0'; /* the module: drop ".weight" */
                LB_TRY(set_linear(m, &ls, name, r, l, -1));
            } else {
                LB_TRY(set_named(m, st, dir, name, r, l));
            }
        }
        if (phi3) LB_TRY(load_phi3_layer(m, &ls, dir, l));
        if (lb_model_config_layer_moe(c, l)) {
            LB_TRY(load_experts(m, &ls, st, dir, l));
        } else if (c->n_experts > 0) {
            /* a dense layer must not carry a router */
            snprintf(name, sizeof name, "model.layers.%d.%s.gate.weight", l,
                     c->arch == LB_ARCH_MIXTRAL ? "block_sparse_moe" : "mlp");
            if (lb_st_find(st, name))
                return lb_set_error(LB_ERR_FORMAT,
                                    "%s: tensor '%s' exists but layer %d is "
                                    "dense (mlp_only_layers / "
                                    "decoder_sparse_step)",
                                    dir, name, l);
        }
        if (opts && !lb_progress_report(&opts->progress, "load",
                                        (uint64_t)l + 1, (uint64_t)c->n_layers))
            return lb_set_error(LB_ERR_CANCELLED, "load cancelled");
    }
    return LB_OK;
}

/* (1 + w) for every norm of a Gemma model loaded from HF (the builder's
 * norm copies are owned f32 buffers). */
lb_status lb_model_gemma_norms_plus_one(lb_model *m) {
    const lb_model_config *c = &m->config;
    lb_tensor *v[8];
    int nv = 0;
    v[nv++] = &m->output_norm;
    for (int l = -1; l < c->n_layers; l++) {
        if (l >= 0) {
            lb_layer_weights *L = &m->layers[l];
            nv = 0;
            v[nv++] = &L->attn_norm;
            v[nv++] = &L->ffn_norm;
            v[nv++] = &L->post_attn_norm;
            v[nv++] = &L->post_ffn_norm;
            v[nv++] = &L->q_norm;
            v[nv++] = &L->k_norm;
        }
        for (int i = 0; i < nv; i++) {
            if (!v[i]->data) continue;
            float *f = (float *)(uintptr_t)v[i]->data;
            const int64_t n = lb_tensor_nelements(v[i]);
            for (int64_t j = 0; j < n; j++) f[j] = 1.0f + f[j];
        }
    }
    return LB_OK;
}
