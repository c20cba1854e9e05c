/*
 * Model container: the builder every loader uses (model_internal.h), the
 * Hugging Face checkpoint loader, weight swapping and lb_model_load.
 * Tensor names: transformers 5.12 modeling_{llama,mistral,qwen2,qwen3}.py.
 */
#include "model/model_internal.h"
#include "lowbit/kernels.h"
#include "lowbit/file.h"
#include "lowbit/safetensors.h"
#include "core/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct cleanup {
    void (*fn)(void *);
    void *p;
} cleanup;

struct lb_model_private {
    void **bufs;
    size_t n_bufs, cap_bufs;
    cleanup *cl;
    size_t n_cl, cap_cl;
    lb_dequant_row_fn dequant_row;
    const lb_mapped_file **maps; /* read-only file mappings tensors view */
    size_t n_maps;
};

static const char *role_names[LB_ROLE_COUNT] = {
    [LB_ROLE_TOK_EMBD] = "embed_tokens",
    [LB_ROLE_OUTPUT_NORM] = "norm",
    [LB_ROLE_OUTPUT] = "lm_head",
    [LB_ROLE_ATTN_NORM] = "input_layernorm",
    [LB_ROLE_Q] = "self_attn.q_proj",
    [LB_ROLE_K] = "self_attn.k_proj",
    [LB_ROLE_V] = "self_attn.v_proj",
    [LB_ROLE_O] = "self_attn.o_proj",
    [LB_ROLE_GATE] = "mlp.gate_proj",
    [LB_ROLE_UP] = "mlp.up_proj",
    [LB_ROLE_DOWN] = "mlp.down_proj",
    [LB_ROLE_Q_BIAS] = "self_attn.q_proj.bias",
    [LB_ROLE_K_BIAS] = "self_attn.k_proj.bias",
    [LB_ROLE_V_BIAS] = "self_attn.v_proj.bias",
    [LB_ROLE_Q_NORM] = "self_attn.q_norm",
    [LB_ROLE_K_NORM] = "self_attn.k_norm",
    [LB_ROLE_FFN_NORM] = "post_attention_layernorm",
    [LB_ROLE_POST_ATTN_NORM] = "post_attention_layernorm (Gemma)",
    [LB_ROLE_POST_FFN_NORM] = "post_feedforward_layernorm",
    [LB_ROLE_FFN_GATE_INP] = "mlp.gate (router)",
    [LB_ROLE_SHEXP_GATE] = "mlp.shared_expert.gate_proj",
    [LB_ROLE_SHEXP_UP] = "mlp.shared_expert.up_proj",
    [LB_ROLE_SHEXP_DOWN] = "mlp.shared_expert.down_proj",
    [LB_ROLE_SHEXP_GATE_INP] = "mlp.shared_expert_gate",
    [LB_ROLE_EXP_GATE] = "mlp.experts.E.gate_proj",
    [LB_ROLE_EXP_UP] = "mlp.experts.E.up_proj",
    [LB_ROLE_EXP_DOWN] = "mlp.experts.E.down_proj",
};

bool lb_role_used_in(const lb_model_config *c, lb_tensor_role r, int l) {
    const bool moe = lb_model_config_layer_moe(c, l);
    switch (r) {
    case LB_ROLE_GATE:
    case LB_ROLE_UP:
    case LB_ROLE_DOWN: return !moe;
    case LB_ROLE_POST_ATTN_NORM:
    case LB_ROLE_POST_FFN_NORM: return c->post_norms;
    case LB_ROLE_FFN_GATE_INP:
    case LB_ROLE_EXP_GATE:
    case LB_ROLE_EXP_UP:
    case LB_ROLE_EXP_DOWN: return moe;
    case LB_ROLE_SHEXP_GATE:
    case LB_ROLE_SHEXP_UP:
    case LB_ROLE_SHEXP_DOWN:
    case LB_ROLE_SHEXP_GATE_INP: return moe && c->shared_ff > 0;
    default: return lb_role_used(c, r);
    }
}

const char *lb_role_name(lb_tensor_role role) {
    return (unsigned)role < LB_ROLE_COUNT ? role_names[role] : "?";
}

static const char *linear_names[LB_LINEAR_COUNT] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
    "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
    "mlp.down_proj",
};

const char *lb_linear_name(lb_linear_id id) {
    return (unsigned)id < LB_LINEAR_COUNT ? linear_names[id] : "?";
}

void lb_role_shape(const lb_model_config *c, lb_tensor_role role, int *nd,
                   int64_t sh[2]) {
    int64_t dim = c->hidden_size, q = (int64_t)c->n_heads * c->head_dim,
            kv = (int64_t)c->n_kv_heads * c->head_dim,
            ff = c->intermediate_size, V = c->vocab_size;
    *nd = 2;
    sh[1] = 0;
    switch (role) {
    case LB_ROLE_TOK_EMBD:
    case LB_ROLE_OUTPUT: sh[0] = V; sh[1] = dim; break;
    case LB_ROLE_Q: sh[0] = q; sh[1] = dim; break;
    case LB_ROLE_K:
    case LB_ROLE_V: sh[0] = kv; sh[1] = dim; break;
    case LB_ROLE_O: sh[0] = dim; sh[1] = q; break;
    case LB_ROLE_GATE:
    case LB_ROLE_UP: sh[0] = ff; sh[1] = dim; break;
    case LB_ROLE_DOWN: sh[0] = dim; sh[1] = ff; break;
    case LB_ROLE_Q_BIAS: *nd = 1; sh[0] = q; break;
    case LB_ROLE_K_BIAS:
    case LB_ROLE_V_BIAS: *nd = 1; sh[0] = kv; break;
    case LB_ROLE_Q_NORM:
    case LB_ROLE_K_NORM: *nd = 1; sh[0] = c->head_dim; break;
    case LB_ROLE_FFN_GATE_INP: sh[0] = c->n_experts; sh[1] = dim; break;
    case LB_ROLE_SHEXP_GATE:
    case LB_ROLE_SHEXP_UP: sh[0] = c->shared_ff; sh[1] = dim; break;
    case LB_ROLE_SHEXP_DOWN: sh[0] = dim; sh[1] = c->shared_ff; break;
    case LB_ROLE_EXP_GATE:
    case LB_ROLE_EXP_UP: sh[0] = c->moe_ff; sh[1] = dim; break;
    case LB_ROLE_EXP_DOWN: sh[0] = dim; sh[1] = c->moe_ff; break;
    default: *nd = 1; sh[0] = dim; break; /* norms */
    }
}

/* Where the builder stores a role. */
static lb_tensor *role_slot(lb_model *m, lb_tensor_role role, int layer) {
    if (!lb_role_is_layer(role)) {
        switch (role) {
        case LB_ROLE_TOK_EMBD: return &m->tok_embd;
        case LB_ROLE_OUTPUT_NORM: return &m->output_norm;
        case LB_ROLE_OUTPUT: return &m->output;
        default: return NULL;
        }
    }
    lb_layer_weights *L = &m->layers[layer];
    switch (role) {
    case LB_ROLE_ATTN_NORM: return &L->attn_norm;
    case LB_ROLE_Q: return &L->w[LB_LINEAR_Q];
    case LB_ROLE_K: return &L->w[LB_LINEAR_K];
    case LB_ROLE_V: return &L->w[LB_LINEAR_V];
    case LB_ROLE_O: return &L->w[LB_LINEAR_O];
    case LB_ROLE_GATE: return &L->w[LB_LINEAR_GATE];
    case LB_ROLE_UP: return &L->w[LB_LINEAR_UP];
    case LB_ROLE_DOWN: return &L->w[LB_LINEAR_DOWN];
    case LB_ROLE_Q_BIAS: return &L->bq;
    case LB_ROLE_K_BIAS: return &L->bk;
    case LB_ROLE_V_BIAS: return &L->bv;
    case LB_ROLE_Q_NORM: return &L->q_norm;
    case LB_ROLE_K_NORM: return &L->k_norm;
    case LB_ROLE_FFN_NORM: return &L->ffn_norm;
    case LB_ROLE_POST_ATTN_NORM: return &L->post_attn_norm;
    case LB_ROLE_POST_FFN_NORM: return &L->post_ffn_norm;
    case LB_ROLE_FFN_GATE_INP: return &L->ffn_gate_inp;
    case LB_ROLE_SHEXP_GATE: return &L->shexp[0];
    case LB_ROLE_SHEXP_UP: return &L->shexp[1];
    case LB_ROLE_SHEXP_DOWN: return &L->shexp[2];
    case LB_ROLE_SHEXP_GATE_INP: return &L->shexp_gate_inp;
    default: return NULL;
    }
}

static bool role_is_vector(lb_tensor_role r) {
    return r == LB_ROLE_OUTPUT_NORM || r == LB_ROLE_ATTN_NORM ||
           r == LB_ROLE_FFN_NORM || r == LB_ROLE_Q_BIAS ||
           r == LB_ROLE_K_BIAS || r == LB_ROLE_V_BIAS || r == LB_ROLE_Q_NORM ||
           r == LB_ROLE_K_NORM || r == LB_ROLE_POST_ATTN_NORM ||
           r == LB_ROLE_POST_FFN_NORM || r == LB_ROLE_SHEXP_GATE_INP;
}

lb_status lb_model_builder_own(lb_model *m, void *buf) {
    lb_model_private *p = m->priv;
    if (p->n_bufs == p->cap_bufs) {
        size_t nc = p->cap_bufs ? p->cap_bufs * 2 : 64;
        void **nb = realloc(p->bufs, nc * sizeof *nb);
        if (!nb) {
            lb_free(buf);
            return lb_set_error(LB_ERR_NOMEM, "model: out of memory");
        }
        p->bufs = nb;
        p->cap_bufs = nc;
    }
    p->bufs[p->n_bufs++] = buf;
    return LB_OK;
}

lb_status lb_model_builder_on_free(lb_model *m, void (*fn)(void *), void *ptr) {
    lb_model_private *p = m->priv;
    if (p->n_cl == p->cap_cl) {
        size_t nc = p->cap_cl ? p->cap_cl * 2 : 8;
        cleanup *n = realloc(p->cl, nc * sizeof *n);
        if (!n) {
            fn(ptr);
            return lb_set_error(LB_ERR_NOMEM, "model: out of memory");
        }
        p->cl = n;
        p->cap_cl = nc;
    }
    p->cl[p->n_cl].fn = fn;
    p->cl[p->n_cl].p = ptr;
    p->n_cl++;
    return LB_OK;
}

static void free_str(void *p) { free(p); }

void lb_model_builder_set_dequant_row(lb_model *m, lb_dequant_row_fn fn) {
    m->priv->dequant_row = fn;
}

lb_status lb_model_builder_new(const lb_model_config *cfg, lb_model **out) {
    *out = NULL;
    LB_TRY(lb_model_config_validate(cfg));
    lb_model *m = calloc(1, sizeof *m);
    if (!m) return lb_set_error(LB_ERR_NOMEM, "model: out of memory");
    m->priv = calloc(1, sizeof *m->priv);
    m->layers = calloc((size_t)cfg->n_layers, sizeof *m->layers);
    lb_status s = LB_OK;
    if (!m->priv || !m->layers)
        s = lb_set_error(LB_ERR_NOMEM, "model: out of memory");
    if (s == LB_OK) s = lb_model_config_copy(&m->config, cfg);
    /* expert slots of the MoE layers (owned by the model) */
    for (int l = 0; s == LB_OK && l < cfg->n_layers; l++) {
        if (!lb_model_config_layer_moe(cfg, l)) continue;
        m->layers[l].exp = lb_calloc((size_t)cfg->n_experts * 3,
                                     sizeof(lb_tensor));
        if (!m->layers[l].exp)
            s = lb_set_error(LB_ERR_NOMEM, "model: out of memory");
        else
            s = lb_model_builder_own(m, m->layers[l].exp);
    }
    if (s != LB_OK) {
        lb_model_free(m);
        return s;
    }
    *out = m;
    return LB_OK;
}

/* Alignment a kernel may assume for rows of type t. */
static size_t type_align(lb_type t) {
    switch (t) {
    case LB_TYPE_F32:
    case LB_TYPE_I32:
    case LB_TYPE_Q8_K: return 4;
    case LB_TYPE_F64:
    case LB_TYPE_I64: return 8;
    case LB_TYPE_I8:
    case LB_TYPE_U8:
    case LB_TYPE_BOOL: return 1;
    default: return 2; /* f16/bf16 and blocks starting with an fp16 scale */
    }
}

static void fmt_shape(char *buf, size_t n, int nd, const int64_t *sh) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < nd && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "",
                              (long long)sh[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

static lb_status builder_set_slot(lb_model *m, lb_tensor_role role, int layer,
                                  const lb_tensor *t, lb_tensor *slot);

lb_status lb_model_builder_set(lb_model *m, lb_tensor_role role, int layer,
                               const lb_tensor *t) {
    if ((unsigned)role >= LB_ROLE_COUNT)
        return lb_set_error(LB_ERR_INVALID_ARG, "model: bad role %d", (int)role);
    if (lb_role_is_layer(role) && (layer < 0 || layer >= m->config.n_layers))
        return lb_set_error(LB_ERR_RANGE, "model: layer %d out of range",
                            layer);
    if (role >= LB_ROLE_EXP_GATE)
        return lb_set_error(LB_ERR_INVALID_ARG, "model: expert role %s needs "
                            "lb_model_builder_set_expert", lb_role_name(role));
    return builder_set_slot(m, role, layer, t, NULL);
}

/* lb_model_builder_set into `slot` (NULL: the role's own slot). */
static lb_status builder_set_slot(lb_model *m, lb_tensor_role role, int layer,
                                  const lb_tensor *t, lb_tensor *slot) {
    const char *tname = t->name ? t->name : lb_role_name(role);
    int nd;
    int64_t sh[2];
    lb_role_shape(&m->config, role, &nd, sh);
    bool ok = t->n_dims == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == sh[i];
    if (!ok) {
        char want[64], got[96];
        fmt_shape(want, sizeof want, nd, sh);
        fmt_shape(got, sizeof got, t->n_dims, t->shape);
        return lb_set_error(LB_ERR_FORMAT,
                            "tensor '%s': expected shape %s, got %s", tname,
                            want, got);
    }
    lb_tensor v = *t;
    size_t want_bytes;
    if (!lb_row_size(t->type, lb_tensor_cols(t), &want_bytes) ||
        !lb_mul_ok(want_bytes, (size_t)lb_tensor_rows(t), &want_bytes))
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "tensor '%s': type %s cannot hold rows of %lld "
                            "elements",
                            tname, lb_type_name(t->type),
                            (long long)lb_tensor_cols(t));
    if (t->nbytes != want_bytes || !t->data)
        return lb_set_error(LB_ERR_FORMAT,
                            "tensor '%s': %zu bytes of data, expected %zu",
                            tname, t->nbytes, want_bytes);
    if (role_is_vector(role)) {
        /* norms and biases: always an owned F32 copy */
        int64_t n = sh[0];
        float *f = lb_alloc((size_t)n * sizeof(float));
        if (!f) return lb_set_error(LB_ERR_NOMEM, "model: out of memory");
        const uint8_t *src = t->data;
        switch (t->type) {
        case LB_TYPE_F32: memcpy(f, src, (size_t)n * 4); break;
        case LB_TYPE_F16:
            for (int64_t i = 0; i < n; i++)
                f[i] = lb_f16_to_f32_inline(lb_rd_u16(src + 2 * i));
            break;
        case LB_TYPE_BF16:
            for (int64_t i = 0; i < n; i++)
                f[i] = lb_bf16_to_f32_inline(lb_rd_u16(src + 2 * i));
            break;
        default:
            lb_free(f);
            return lb_set_error(LB_ERR_UNSUPPORTED,
                                "tensor '%s': type %s not supported for a "
                                "norm/bias (F32/F16/BF16)",
                                tname, lb_type_name(t->type));
        }
        LB_TRY(lb_model_builder_own(m, f));
        v.type = LB_TYPE_F32;
        v.data = f;
        v.nbytes = (size_t)n * 4;
    } else if ((uintptr_t)t->data % type_align(t->type)) {
        void *copy = lb_alloc(t->nbytes);
        if (!copy) return lb_set_error(LB_ERR_NOMEM, "model: out of memory");
        memcpy(copy, t->data, t->nbytes);
        LB_TRY(lb_model_builder_own(m, copy));
        v.data = copy;
    }
    char *nm = lb_strdup(tname);
    if (!nm) return lb_set_error(LB_ERR_NOMEM, "model: out of memory");
    LB_TRY(lb_model_builder_on_free(m, free_str, nm));
    v.name = nm;
    *(slot ? slot : role_slot(m, role, layer)) = v;
    return LB_OK;
}

lb_status lb_model_builder_set_expert(lb_model *m, lb_tensor_role role,
                                      int layer, int e, const lb_tensor *t) {
    if (role < LB_ROLE_EXP_GATE || role > LB_ROLE_EXP_DOWN)
        return lb_set_error(LB_ERR_INVALID_ARG, "model: %s is not an expert "
                            "role", lb_role_name(role));
    if (layer < 0 || layer >= m->config.n_layers || !m->layers[layer].exp)
        return lb_set_error(LB_ERR_RANGE, "tensor '%s': layer %d has no "
                            "experts (num_experts %d, decoder_sparse_step / "
                            "mlp_only_layers)",
                            t->name ? t->name : "?", layer,
                            m->config.n_experts);
    if (e < 0 || e >= m->config.n_experts)
        return lb_set_error(LB_ERR_RANGE, "tensor '%s': expert %d outside "
                            "[0, num_experts %d)", t->name ? t->name : "?", e,
                            m->config.n_experts);
    return builder_set_slot(m, role, layer, t,
                            &m->layers[layer].exp[3 * e + (role - LB_ROLE_EXP_GATE)]);
}

lb_status lb_model_builder_finish(lb_model *m) {
    const lb_model_config *c = &m->config;
    if (c->tie_word_embeddings) {
        if (!m->output.data) m->output = m->tok_embd;
        if (!m->tok_embd.data) m->tok_embd = m->output;
    }
    if (!m->tok_embd.data)
        return lb_set_error(LB_ERR_NOT_FOUND, "model: missing embed_tokens");
    if (!m->output.data)
        return lb_set_error(LB_ERR_NOT_FOUND, "model: missing lm_head (and "
                            "tie_word_embeddings is false)");
    if (!m->output_norm.data)
        return lb_set_error(LB_ERR_NOT_FOUND, "model: missing final norm");
    for (int l = 0; l < c->n_layers; l++) {
        for (int r = LB_ROLE_ATTN_NORM; r < LB_ROLE_EXP_GATE; r++) {
            if (lb_role_used_in(c, (lb_tensor_role)r, l) &&
                !role_slot(m, (lb_tensor_role)r, l)->data)
                return lb_set_error(LB_ERR_NOT_FOUND, "model: layer %d: "
                                    "missing %s", l,
                                    lb_role_name((lb_tensor_role)r));
        }
        for (int e = 0; m->layers[l].exp && e < c->n_experts; e++)
            for (int k = 0; k < 3; k++)
                if (!m->layers[l].exp[3 * e + k].data)
                    return lb_set_error(LB_ERR_NOT_FOUND,
                                        "model: layer %d: missing expert %d "
                                        "%s (num_experts = %d)",
                                        l, e, k == 0 ? "gate_proj"
                                              : k == 1 ? "up_proj"
                                                       : "down_proj",
                                        c->n_experts);
    }
    return LB_OK;
}

void lb_model_free(lb_model *m) {
    if (!m) return;
    if (m->priv) {
        for (size_t i = 0; i < m->priv->n_bufs; i++) lb_free(m->priv->bufs[i]);
        free(m->priv->bufs);
        for (size_t i = m->priv->n_cl; i-- > 0;)
            m->priv->cl[i].fn(m->priv->cl[i].p);
        free(m->priv->cl);
        free(m->priv->maps);
        free(m->priv);
    }
    free(m->layers);
    lb_model_config_clear(&m->config);
    free(m);
}

lb_status lb_model_builder_add_mapping(lb_model *m, const lb_mapped_file *mf) {
    lb_model_private *p = m->priv;
    if (!mf || !mf->data || mf->copy) return LB_OK;
    const lb_mapped_file **n = realloc(p->maps, (p->n_maps + 1) * sizeof *n);
    if (!n) return lb_set_error(LB_ERR_NOMEM, "model: out of memory");
    p->maps = n;
    p->maps[p->n_maps++] = mf;
    return LB_OK;
}

void lb_model_release_tensor(const lb_model *m, const lb_tensor *t) {
    if (!m || !m->priv || !t || !t->data) return;
    for (size_t i = 0; i < m->priv->n_maps; i++)
        lb_mapped_file_release(m->priv->maps[i], t->data, t->nbytes);
}

void lb_model_release_layer(const lb_model *m, int layer) {
    if (!m || !m->priv || !m->priv->n_maps || layer < 0 ||
        layer >= m->config.n_layers)
        return;
    const lb_layer_weights *L = &m->layers[layer];
    const lb_tensor *ts[] = {&L->attn_norm, &L->bq, &L->bk, &L->bv,
                             &L->q_norm, &L->k_norm, &L->ffn_norm,
                             &L->post_attn_norm, &L->post_ffn_norm,
                             &L->ffn_gate_inp, &L->shexp_gate_inp,
                             &L->shexp[0], &L->shexp[1], &L->shexp[2]};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
        lb_model_release_tensor(m, ts[i]);
    for (int i = 0; i < LB_LINEAR_COUNT; i++) lb_model_release_tensor(m, &L->w[i]);
    if (L->exp)
        for (int i = 0; i < 3 * m->config.n_experts; i++)
            lb_model_release_tensor(m, &L->exp[i]);
}

lb_status lb_model_repack_weights(lb_model *m, bool (*owned)(const void *u, const lb_tensor *t),
                                  const void *u) {
    const lb_model_config *c = &m->config;
    for (int l = 0; l < c->n_layers; l++) {
        lb_layer_weights *L = &m->layers[l];
        const int ne = L->exp ? 3 * c->n_experts : 0;
        for (int i = 0; i < LB_LINEAR_COUNT + 3 + ne; i++) {
            lb_tensor *w = i < LB_LINEAR_COUNT       ? &L->w[i]
                           : i < LB_LINEAR_COUNT + 3 ? &L->shexp[i - LB_LINEAR_COUNT]
                                                     : &L->exp[i - LB_LINEAR_COUNT - 3];
            if (w->data && (!owned || owned(u, w)))
                LB_TRY(lb_tensor_repack(w, (void *)(uintptr_t)w->data));
        }
    }
    if (!m->output.data || (owned && !owned(u, &m->output))) return LB_OK;
    const bool tied = m->output.data == m->tok_embd.data;
    LB_TRY(lb_tensor_repack(&m->output, (void *)(uintptr_t)m->output.data));
    if (tied) m->tok_embd.layout = m->output.layout;
    return LB_OK;
}

lb_status lb_model_dequant_row(const lb_model *m, const lb_tensor *t,
                               int64_t row, float *dst) {
    int64_t n = lb_tensor_cols(t);
    size_t rb;
    if (!lb_row_size(t->type, n, &rb))
        return lb_set_error(LB_ERR_UNSUPPORTED, "tensor '%s': bad row",
                            t->name ? t->name : "?");
    const uint8_t *src = (const uint8_t *)t->data + (size_t)row * rb;
    if (t->layout == LB_LAYOUT_X16) /* repacked at load: row form again */
        return lb_tensor_dequant_row(t, row, dst);
    switch (t->type) {
    case LB_TYPE_F32: memcpy(dst, src, (size_t)n * 4); return LB_OK;
    case LB_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = lb_f16_to_f32_inline(lb_rd_u16(src + 2 * i));
        return LB_OK;
    case LB_TYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = lb_bf16_to_f32_inline(lb_rd_u16(src + 2 * i));
        return LB_OK;
    default:
        if (m->priv->dequant_row) return m->priv->dequant_row(t->type, src, dst, n);
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "tensor '%s': no row conversion for type %s",
                            t->name ? t->name : "?", lb_type_name(t->type));
    }
}

lb_status lb_model_set_linear(lb_model *m, int layer, lb_linear_id which,
                              const lb_tensor *w, void *owned) {
    if (layer < 0 || layer >= m->config.n_layers)
        return lb_set_error(LB_ERR_RANGE, "set_linear: layer %d out of range "
                            "[0, %d)", layer, m->config.n_layers);
    if ((unsigned)which >= LB_LINEAR_COUNT)
        return lb_set_error(LB_ERR_INVALID_ARG, "set_linear: bad linear %d",
                            (int)which);
    lb_tensor *cur = &m->layers[layer].w[which];
    size_t rb, total;
    if (w->n_dims != 2 || w->shape[0] != cur->shape[0] ||
        w->shape[1] != cur->shape[1])
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "set_linear: layer %d %s: shape [%lld, %lld] "
                            "expected",
                            layer, lb_linear_name(which),
                            (long long)cur->shape[0], (long long)cur->shape[1]);
    if (!lb_row_size(w->type, w->shape[1], &rb) ||
        !lb_mul_ok(rb, (size_t)w->shape[0], &total) || w->nbytes < total ||
        !w->data)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "set_linear: layer %d %s: type %s rows of %lld "
                            "do not fit its data",
                            layer, lb_linear_name(which),
                            lb_type_name(w->type), (long long)w->shape[1]);
    if (owned) LB_TRY(lb_model_builder_own(m, owned));
    const char *name = cur->name;
    *cur = *w;
    if (!cur->name) cur->name = name;
    return LB_OK;
}

size_t lb_model_weight_bytes(const lb_model *m) {
    size_t s = m->tok_embd.nbytes + m->output_norm.nbytes;
    if (m->output.data != m->tok_embd.data) s += m->output.nbytes;
    for (int l = 0; l < m->config.n_layers; l++) {
        const lb_layer_weights *L = &m->layers[l];
        s += L->attn_norm.nbytes + L->ffn_norm.nbytes + L->bq.nbytes +
             L->bk.nbytes + L->bv.nbytes + L->q_norm.nbytes + L->k_norm.nbytes;
        for (int i = 0; i < LB_LINEAR_COUNT; i++) s += L->w[i].nbytes;
        s += L->post_attn_norm.nbytes + L->post_ffn_norm.nbytes +
             L->ffn_gate_inp.nbytes + L->shexp_gate_inp.nbytes;
        for (int i = 0; i < 3; i++) s += L->shexp[i].nbytes;
        for (int i = 0; L->exp && i < 3 * m->config.n_experts; i++)
            s += L->exp[i].nbytes;
    }
    return s;
}

int64_t lb_model_n_params(const lb_model *m) {
    int64_t s = lb_tensor_nelements(&m->tok_embd) +
                lb_tensor_nelements(&m->output_norm);
    if (m->output.data != m->tok_embd.data)
        s += lb_tensor_nelements(&m->output);
    for (int l = 0; l < m->config.n_layers; l++) {
        const lb_layer_weights *L = &m->layers[l];
        const lb_tensor *v[] = {&L->attn_norm, &L->ffn_norm, &L->bq, &L->bk,
                                &L->bv, &L->q_norm, &L->k_norm};
        for (size_t i = 0; i < LB_ARRAY_LEN(v); i++)
            if (v[i]->data) s += lb_tensor_nelements(v[i]);
        for (int i = 0; i < LB_LINEAR_COUNT; i++)
            if (L->w[i].data) s += lb_tensor_nelements(&L->w[i]);
        const lb_tensor *x[] = {&L->post_attn_norm, &L->post_ffn_norm,
                                &L->ffn_gate_inp, &L->shexp_gate_inp,
                                &L->shexp[0], &L->shexp[1], &L->shexp[2]};
        for (size_t i = 0; i < LB_ARRAY_LEN(x); i++)
            if (x[i]->data) s += lb_tensor_nelements(x[i]);
        for (int i = 0; L->exp && i < 3 * m->config.n_experts; i++)
            s += lb_tensor_nelements(&L->exp[i]);
    }
    return s;
}

static void unused_experts(const lb_model *m, int64_t *params, size_t *bytes) {
    const lb_model_config *c = &m->config;
    *params = 0;
    *bytes = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const lb_layer_weights *L = &m->layers[l];
        if (!L->exp || c->n_experts <= 0) continue;
        int64_t p = 0;
        size_t b = 0;
        for (int i = 0; i < 3 * c->n_experts; i++) {
            p += lb_tensor_nelements(&L->exp[i]);
            b += L->exp[i].nbytes;
        }
        const int unused = c->n_experts - c->n_experts_used;
        *params += p / c->n_experts * unused;
        *bytes += b / (size_t)c->n_experts * (size_t)unused;
    }
}

int64_t lb_model_n_active_params(const lb_model *m) {
    int64_t p;
    size_t b;
    unused_experts(m, &p, &b);
    return lb_model_n_params(m) - p;
}

size_t lb_model_active_weight_bytes(const lb_model *m) {
    int64_t p;
    size_t b;
    unused_experts(m, &p, &b);
    size_t all = lb_model_weight_bytes(m) - b;
    const int64_t V = m->tok_embd.n_dims ? m->tok_embd.shape[0] : 0;
    if (m->tok_embd.data != m->output.data && V > 0)
        all -= m->tok_embd.nbytes - m->tok_embd.nbytes / (size_t)V;
    return all;
}

/* ------------------------------------------------------------------------ */
/* Hugging Face loader                                                       */
/* ------------------------------------------------------------------------ */

static void st_close_cb(void *p) { lb_st_close(p); }


/* Find `name`; NULL (no error) when optional and absent. */
static lb_status hf_set(lb_model *m, const lb_safetensors *st, const char *dir,
                        const char *name, lb_tensor_role role, int layer,
                        bool optional) {
    const lb_tensor *t = lb_st_find(st, name);
    if (!t) {
        if (optional) return LB_OK;
        return lb_set_error(LB_ERR_NOT_FOUND, "%s: tensor '%s' not found",
                            dir, name);
    }
    if (t->type != LB_TYPE_F32 && t->type != LB_TYPE_F16 &&
        t->type != LB_TYPE_BF16)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: tensor '%s' has dtype %s (lowbit loads "
                            "F32/F16/BF16 weights)",
                            dir, name, lb_type_name(t->type));
    lb_status s = lb_model_builder_set(m, role, layer, t);
    if (s != LB_OK) return lb_error_context(s, "%s", dir);
    return LB_OK;
}

lb_status lb_model_builder_new_st(const lb_model_config *cfg, struct lb_safetensors *st,
                                  bool own_st, lb_model **out) {
    *out = NULL;
    lb_model *m = NULL;
    lb_status s = lb_model_builder_new(cfg, &m);
    if (s != LB_OK) {
        if (own_st) lb_st_close(st);
        return s;
    }
    if (own_st) s = lb_model_builder_on_free(m, st_close_cb, st);
    if (s != LB_OK) {
        lb_model_free(m);
        return s;
    }
    *out = m;
    return LB_OK;
}

/* lb_model_hf_walk_*'s callback for a dense checkpoint (hf_set). */
typedef struct {
    lb_model *m;
    const lb_safetensors *st;
    const char *dir;
} hf_dense_ctx;

static lb_status hf_dense_set(void *user, const char *name, lb_tensor_role role,
                              int layer, bool optional) {
    hf_dense_ctx *h = user;
    return hf_set(h->m, h->st, h->dir, name, role, layer, optional);
}

lb_status lb_model_hf_walk_globals(lb_model *m, const lb_safetensors *st,
                                   lb_hf_set_fn set, void *user) {
    const bool tied = m->config.tie_word_embeddings;
    lb_status s = set(user, "model.embed_tokens.weight", LB_ROLE_TOK_EMBD, 0,
                      tied && lb_st_find(st, "lm_head.weight"));
    if (s == LB_OK) s = set(user, "lm_head.weight", LB_ROLE_OUTPUT, 0, tied);
    if (s == LB_OK) s = set(user, "model.norm.weight", LB_ROLE_OUTPUT_NORM, 0, false);
    /* With tied embeddings and both tensors stored, transformers uses the
     * embedding for both (tie_weights): drop the separate lm_head. */
    if (s == LB_OK && tied && m->tok_embd.data) memset(&m->output, 0, sizeof m->output);
    return s;
}

lb_status lb_model_hf_walk_layers(lb_model *m, const lb_model_load_opts *opts,
                                  lb_hf_set_fn set, void *user) {
    static const struct {
        lb_tensor_role role;
        const char *suffix;
    } per_layer[] = {
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
        {LB_ROLE_FFN_NORM, "post_attention_layernorm.weight"},
        {LB_ROLE_GATE, "mlp.gate_proj.weight"},
        {LB_ROLE_UP, "mlp.up_proj.weight"},
        {LB_ROLE_DOWN, "mlp.down_proj.weight"},
    };
    const lb_model_config *c = &m->config;
    lb_status s = LB_OK;
    for (int l = 0; l < c->n_layers && s == LB_OK; l++) {
        for (size_t i = 0; i < LB_ARRAY_LEN(per_layer) && s == LB_OK; i++) {
            lb_tensor_role r = per_layer[i].role;
            if (!lb_role_used(c, r)) continue;
            char name[160];
            snprintf(name, sizeof name, "model.layers.%d.%s", l, per_layer[i].suffix);
            s = set(user, name, r, l, false);
        }
        if (s == LB_OK && opts &&
            !lb_progress_report(&opts->progress, "load", (uint64_t)l + 1, (uint64_t)c->n_layers))
            s = lb_set_error(LB_ERR_CANCELLED, "load cancelled");
    }
    return s;
}

lb_status lb_model_hf_load_layers(lb_model *m, const lb_safetensors *st,
                                  const char *label, const lb_model_load_opts *opts,
                                  lb_hf_set_fn set, lb_ext_linear_fn linear, void *user) {
    lb_status s;
    if (m->config.arch >= LB_ARCH_GEMMA2) { /* the issue-13 layouts: load_hf_ext.c */
        s = lb_model_load_layers_ext(m, st, label, opts, linear, user);
        if (s == LB_OK) s = lb_model_builder_finish(m);
        if (s == LB_OK && m->config.post_norms) s = lb_model_gemma_norms_plus_one(m);
        return s;
    }
    s = lb_model_hf_walk_layers(m, opts, set, user);
    return s == LB_OK ? lb_model_builder_finish(m) : s;
}

lb_status lb_model_load_hf(const char *dir, const lb_model_load_opts *opts,
                           lb_model **out) {
    *out = NULL;
    lb_model_config cfg;
    LB_TRY(lb_model_config_load_dir(dir, &cfg));
    bool gptq = cfg.has_quantization_config &&
                (!cfg.quant_method[0] || !strcmp(cfg.quant_method, "gptq") ||
                 !strcmp(cfg.quant_method, "awq")); /* AWQ GEMM: same loader */
    if (!cfg.has_quantization_config) {
        char *qc = lb_path_join(dir, "quantize_config.json");
        gptq = qc && lb_is_file(qc);
        free(qc);
    }
    if (gptq) {
        lb_model_config_clear(&cfg);
        return lb_model_load_gptq(dir, opts, out);
    }
    if (cfg.has_quantization_config) { /* FP8 (load_fp8.c) */
        bool handled = false;
        lb_status fs = lb_model_load_fp8(dir, &cfg, opts, out, &handled);
        if (fs == LB_OK && !handled) /* bitsandbytes (load_bnb.c) */
            fs = lb_model_load_bnb(dir, &cfg, opts, out, &handled);
        if (fs != LB_OK || handled) {
            lb_model_config_clear(&cfg);
            return fs;
        }
    }
    if (cfg.has_quantization_config) {
        lb_status s = lb_set_error(LB_ERR_UNSUPPORTED,
                                   "%s: quantized checkpoint "
                                   "(quantization_config, quant_method '%s'): "
                                   "lowbit reads GPTQ, AWQ (gemm), FP8 and bitsandbytes checkpoints",
                                   dir, cfg.quant_method);
        lb_model_config_clear(&cfg);
        return s;
    }
    lb_model *m = NULL;
    lb_status s = lb_model_builder_new(&cfg, &m);
    lb_model_config_clear(&cfg);
    if (s != LB_OK) return s;
    lb_safetensors *st = NULL;
    s = lb_st_open(dir, &st);
    if (s == LB_OK) s = lb_model_builder_on_free(m, st_close_cb, st);
    for (size_t i = 0; s == LB_OK && i < lb_st_shard_count(st); i++)
        s = lb_model_builder_add_mapping(m, lb_st_shard_mapping(st, i));
    if (s != LB_OK) goto fail;

    hf_dense_ctx hc = {m, st, dir};
    s = lb_model_hf_walk_globals(m, st, hf_dense_set, &hc);
    if (s == LB_OK) s = lb_model_hf_load_layers(m, st, dir, opts, hf_dense_set, NULL, &hc);
    if (s != LB_OK) goto fail;
    *out = m;
    return LB_OK;
fail:
    lb_model_free(m);
    return s;
}

lb_status lb_model_load(const char *path, const lb_model_load_opts *opts,
                        lb_model **out) {
    *out = NULL;
    if (lb_is_dir(path)) {
        char *cj = lb_path_join(path, "config.json");
        bool has = cj && lb_is_file(cj);
        free(cj);
        if (!has)
            return lb_set_error(LB_ERR_NOT_FOUND,
                                "%s: directory has no config.json (not a "
                                "Hugging Face checkpoint)",
                                path);
        return lb_model_load_hf(path, opts, out);
    }
    LB_TRY(lb_check_regular_file(path));
    bool gguf_magic = false, gguf_ext = false;
    size_t n = strlen(path);
    if (n >= 5 && strcmp(path + n - 5, ".gguf") == 0) gguf_ext = true;
    FILE *f = fopen(path, "rb");
    if (!f)
        return lb_set_error(LB_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char magic[4];
    if (fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0)
        gguf_magic = true;
    fclose(f);
    if (gguf_magic) return lb_model_load_gguf(path, opts, out);
    if (gguf_ext)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: named .gguf but does not start with the GGUF "
                            "magic", path);
    return lb_set_error(LB_ERR_UNSUPPORTED,
                        "%s: not a model directory or GGUF file", path);
}
