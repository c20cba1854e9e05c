/*
 * HF -> GGUF export of the issue-13 architectures, as llama.cpp 0.7.0's
 * convert_hf_to_gguf.py (conversion/gemma.py, phi.py, qwen.py, llama.py)
 * and gguf-py tensor_mapping.py write them:
 *   gemma2/gemma3: post_attention_layernorm -> post_attention_norm,
 *     pre_feedforward_layernorm -> ffn_norm, post_feedforward_layernorm ->
 *     post_ffw_norm, every norm written as 1 + w; keys
 *     attn_logit_softcapping, final_logit_softcapping,
 *     attention.sliding_window, rope.freq_base_swa (gemma3);
 *   phi3: self_attn.qkv_proj -> attn_qkv, mlp.gate_up_proj -> ffn_up;
 *     rope.dimension_count, rope.scaling.original_context_length,
 *     attention.sliding_window; longrope: rope_factors_long/short.weight
 *     (generated, first) and rope.scaling.attn_factor;
 *   qwen3moe / qwen2moe / llama (Mixtral): mlp.gate (block_sparse_moe.gate)
 *     -> ffn_gate_inp, experts.E.{gate,up,down}_proj (w1, w3, w2) stacked
 *     into ffn_{gate,up,down}_exps [E, rows, cols] (converter order: at the
 *     first expert), shared_expert.* -> ffn_*_shexp, shared_expert_gate ->
 *     ffn_gate_inp_shexp; keys expert_count, expert_used_count,
 *     expert_feed_forward_length, expert_shared_feed_forward_length.
 * Where llama.cpp's file cannot say what the checkpoint does, lowbit adds a
 * key its loader reads (load_gguf_ext.c) and llama.cpp 0.7.0 ignores:
 * <arch>.attention.scale (Gemma query_pre_attn_scalar other than llama.cpp's
 * rule), <arch>.attention.sliding_window_pattern (layer_types other than
 * llama.cpp's fixed pattern), <arch>.expert_weights_norm (norm_topk_prob
 * other than llama.cpp's per-architecture choice).
 */
#include "export/ex_ctx.h"
#include "core/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static bool gemma(const ex_ctx *c) {
    return c->cfg.arch == LB_ARCH_GEMMA2 || c->cfg.arch == LB_ARCH_GEMMA3;
}

bool ex_arch_is_ext(const ex_ctx *c) { return c->cfg.arch >= LB_ARCH_GEMMA2; }

lb_status ex_arch_name(ex_ctx *c) {
    const char *a = NULL;
    switch (c->cfg.arch) {
    case LB_ARCH_GEMMA2: a = "gemma2"; break;
    case LB_ARCH_GEMMA3: a = "gemma3"; break;
    case LB_ARCH_PHI3: a = "phi3"; break;
    case LB_ARCH_QWEN3_MOE: a = "qwen3moe"; break;
    case LB_ARCH_QWEN2_MOE: a = "qwen2moe"; break;
    case LB_ARCH_MIXTRAL: a = "llama"; c->permute = true; break;
    default:
        return lb_set_error(LB_ERR_UNSUPPORTED, "export: architecture %s",
                            c->cfg.arch_name);
    }
    snprintf(c->arch, sizeof c->arch, "%s", a);
    return LB_OK;
}

/* the tokenizer family ex_vocab_load knows */
const char *ex_arch_vocab_arch(const ex_ctx *c) {
    switch (c->cfg.arch) {
    case LB_ARCH_QWEN3_MOE: return "qwen3";
    case LB_ARCH_QWEN2_MOE: return "qwen2";
    default: return "llama";
    }
}

static const struct {
    const char *hf, *gguf;
    int only; /* 0 all, 1 gemma, 2 not gemma */
} k_map[] = {
    {"input_layernorm", "attn_norm", 0},
    {"self_attn.q_proj", "attn_q", 0},
    {"self_attn.k_proj", "attn_k", 0},
    {"self_attn.v_proj", "attn_v", 0},
    {"self_attn.o_proj", "attn_output", 0},
    {"self_attn.q_norm", "attn_q_norm", 0},
    {"self_attn.k_norm", "attn_k_norm", 0},
    {"self_attn.qkv_proj", "attn_qkv", 0},
    {"post_attention_layernorm", "post_attention_norm", 1},
    {"pre_feedforward_layernorm", "ffn_norm", 1},
    {"post_feedforward_layernorm", "post_ffw_norm", 1},
    {"post_attention_layernorm", "ffn_norm", 2},
    {"mlp.gate_proj", "ffn_gate", 0},
    {"mlp.up_proj", "ffn_up", 0},
    {"mlp.down_proj", "ffn_down", 0},
    {"mlp.gate_up_proj", "ffn_up", 0},
    {"mlp.gate", "ffn_gate_inp", 0},
    {"block_sparse_moe.gate", "ffn_gate_inp", 0},
    {"mlp.shared_expert.gate_proj", "ffn_gate_shexp", 0},
    {"mlp.shared_expert.up_proj", "ffn_up_shexp", 0},
    {"mlp.shared_expert.down_proj", "ffn_down_shexp", 0},
    {"mlp.shared_expert_gate", "ffn_gate_inp_shexp", 0},
};

bool ex_arch_map_module(const ex_ctx *c, const char *mod, char *out, size_t n,
                        int *layer, int *expert) {
    *layer = -1;
    *expert = -1;
    if (!strcmp(mod, "model.embed_tokens")) return snprintf(out, n, "token_embd"), true;
    if (!strcmp(mod, "model.norm")) return snprintf(out, n, "output_norm"), true;
    if (!strcmp(mod, "lm_head")) return snprintf(out, n, "output"), true;
    if (strncmp(mod, "model.layers.", 13)) return false;
    const char *p = mod + 13;
    char *end;
    long l = strtol(p, &end, 10);
    if (end == p || *end != '.' || l < 0 || l >= c->cfg.n_layers ||
        (p[0] == '0' && end - p > 1))
        return false;
    const char *rest = end + 1;
    const bool g = gemma(c);
    for (size_t i = 0; i < LB_ARRAY_LEN(k_map); i++) {
        if ((k_map[i].only == 1 && !g) || (k_map[i].only == 2 && g)) continue;
        if (!strcmp(rest, k_map[i].hf)) {
            *layer = (int)l;
            snprintf(out, n, "blk.%ld.%s", l, k_map[i].gguf);
            return true;
        }
    }
    /* experts: mlp.experts.E.{gate,up,down}_proj, block_sparse_moe.experts.E.w1/w3/w2 */
    const char *ep = NULL;
    if (!strncmp(rest, "mlp.experts.", 12)) ep = rest + 12;
    else if (!strncmp(rest, "block_sparse_moe.experts.", 25)) ep = rest + 25;
    if (!ep) return false;
    long e = strtol(ep, &end, 10);
    if (end == ep || *end != '.' || e < 0 || e >= c->cfg.n_experts ||
        (ep[0] == '0' && end - ep > 1))
        return false;
    static const char *proj[3][2] = {{"gate_proj", "w1"}, {"up_proj", "w3"},
                                     {"down_proj", "w2"}};
    static const char *gg[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    for (int k = 0; k < 3; k++)
        if (!strcmp(end + 1, proj[k][0]) || !strcmp(end + 1, proj[k][1])) {
            *layer = (int)l;
            *expert = (int)e;
            snprintf(out, n, "blk.%ld.%s", l, gg[k]);
            return true;
        }
    return false;
}

bool ex_arch_add_one(const ex_ctx *c, const char *gguf_base) {
    if (!gemma(c)) return false;
    size_t n = strlen(gguf_base);
    return n >= 4 && !strcmp(gguf_base + n - 4, "norm");
}

/* Expert e of `base` (a dense tensor st): start or extend its stack. */
lb_status ex_arch_add_expert(ex_ctx *c, const char *base, int e,
                             const lb_tensor *st, lb_status (*push)(ex_ctx *, ex_tensor **)) {
    char name[96];
    snprintf(name, sizeof name, "%s.weight", base);
    ex_tensor *t = NULL;
    for (size_t i = 0; i < c->n && !t; i++)
        if (c->t[i].kind == EX_SRC_STACK && !strcmp(c->t[i].info.name, name)) t = &c->t[i];
    if (st->type != LB_TYPE_F32 && st->type != LB_TYPE_F16 && st->type != LB_TYPE_BF16)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s (F32, F16 or "
                            "BF16 expected)", c->dir, st->name, lb_type_name(st->type));
    if (st->n_dims != 2)
        return lb_set_error(LB_ERR_FORMAT, "%s: expert tensor %s is not 2-D", c->dir,
                            st->name);
    if (!t) {
        LB_TRY(push(c, &t));
        t->parts = calloc((size_t)c->cfg.n_experts, sizeof *t->parts);
        if (!t->parts) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
        t->kind = EX_SRC_STACK;
        t->n_parts = c->cfg.n_experts;
        snprintf(t->info.name, sizeof t->info.name, "%s", name);
        snprintf(t->info.source, sizeof t->info.source, "%.*s (experts)",
                 (int)(strrchr(st->name, '.') - st->name), st->name);
        t->info.src_type = (int)st->type;
        t->info.n_dims = 3;
        t->info.shape[0] = c->cfg.n_experts;
        t->info.shape[1] = st->shape[0];
        t->info.shape[2] = st->shape[1];
        t->is_weight2d = true;
        t->perm_heads = 0;
    }
    if (t->parts[e])
        return lb_set_error(LB_ERR_FORMAT, "%s: expert %d of %s given twice", c->dir, e,
                            name);
    if (st->shape[0] != t->info.shape[1] || st->shape[1] != t->info.shape[2] ||
        (int)st->type != t->info.src_type)
        return lb_set_error(LB_ERR_FORMAT, "%s: tensor %s: [%lld, %lld] %s differs from "
                            "the other experts' [%lld, %lld] %s", c->dir, st->name,
                            (long long)st->shape[0], (long long)st->shape[1],
                            lb_type_name(st->type), (long long)t->info.shape[1],
                            (long long)t->info.shape[2], lb_type_name(t->info.src_type));
    t->parts[e] = st;
    return LB_OK;
}

lb_status ex_arch_add_expert_gptq(ex_ctx *c, const char *base, int e, const char *module,
                                  lb_status (*push)(ex_ctx *, ex_tensor **)) {
    char name[96];
    snprintf(name, sizeof name, "%s.weight", base);
    ex_tensor *t = NULL;
    for (size_t i = 0; i < c->n && !t; i++)
        if (c->t[i].gparts && !strcmp(c->t[i].info.name, name)) t = &c->t[i];
    for (size_t i = 0; i < c->n; i++)
        if (c->t[i].kind == EX_SRC_STACK && !strcmp(c->t[i].info.name, name))
            return lb_set_error(LB_ERR_UNSUPPORTED, "%s: %s: some experts are GPTQ-packed "
                                "and others dense (%s); lowbit stacks experts of one kind",
                                c->dir, name, module);
    if (!t) {
        LB_TRY(push(c, &t));
        t->gparts = calloc((size_t)c->cfg.n_experts, sizeof *t->gparts);
        if (!t->gparts) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
        t->kind = EX_SRC_GPTQ;
        t->n_parts = c->cfg.n_experts;
        snprintf(t->info.name, sizeof t->info.name, "%s", name);
        snprintf(t->info.source, sizeof t->info.source, "%.*s (experts)",
                 (int)(strstr(module, ".experts.") - module + 8), module);
        t->info.src_type = LB_TYPE_I32;
        t->is_weight2d = true;
    }
    ex_tensor *p = &t->gparts[e];
    if (p->info.name[0])
        return lb_set_error(LB_ERR_FORMAT, "%s: expert %d of %s given twice", c->dir, e, name);
    memset(p, 0, sizeof *p);
    p->kind = EX_SRC_GPTQ;
    p->direct_type = -1;
    p->forced_type = -1;
    snprintf(p->info.name, sizeof p->info.name, "%s", name);
    snprintf(p->info.source, sizeof p->info.source, "%s", module);
    LB_TRY(ex_gptq_prepare(c, p, module));
    /* the stack: the first expert's shape and settings; every other must
     * agree, and the direct type is common or none */
    ex_tensor *f = NULL;
    for (int k = 0; k < t->n_parts && !f; k++)
        if (k != e && t->gparts[k].info.name[0]) f = &t->gparts[k];
    if (!f) {
        t->info.n_dims = 3;
        t->info.shape[0] = c->cfg.n_experts;
        t->info.shape[1] = p->info.shape[0];
        t->info.shape[2] = p->info.shape[1];
        t->info.bits = p->info.bits;
        t->info.group_size = p->info.group_size;
        t->info.sym = p->info.sym;
        t->info.desc_act = p->info.desc_act;
        t->lin = p->lin;
        t->direct_type = p->direct_type;
        snprintf(t->direct_why, sizeof t->direct_why, "%s", p->direct_why);
        return LB_OK;
    }
    if (p->info.shape[0] != t->info.shape[1] || p->info.shape[1] != t->info.shape[2])
        return lb_set_error(LB_ERR_FORMAT, "%s: %s: [%lld, %lld] differs from the other "
                            "experts' [%lld, %lld]", c->dir, module,
                            (long long)p->info.shape[0], (long long)p->info.shape[1],
                            (long long)t->info.shape[1], (long long)t->info.shape[2]);
    if (p->info.bits != t->info.bits) t->info.bits = 0; /* mixed: dequantized */
    if (p->direct_type != t->direct_type && t->direct_type >= 0) {
        snprintf(t->direct_why, sizeof t->direct_why, "experts map to different types (%s: %s)",
                 module, p->direct_type >= 0 ? lb_type_name(p->direct_type) : p->direct_why);
        t->direct_type = -1;
    }
    return LB_OK;
}

/* Every stack complete; MoE layers have routers. */
lb_status ex_arch_check(const ex_ctx *c) {
    for (size_t i = 0; i < c->n; i++) {
        const ex_tensor *t = &c->t[i];
        if (t->gparts) {
            for (int e = 0; e < t->n_parts; e++)
                if (!t->gparts[e].info.name[0])
                    return lb_set_error(LB_ERR_NOT_FOUND, "%s: %s: expert %d is missing "
                                        "(num_experts = %d)", c->dir, t->info.name, e,
                                        c->cfg.n_experts);
            continue;
        }
        if (t->kind != EX_SRC_STACK) continue;
        for (int e = 0; e < t->n_parts; e++)
            if (!t->parts[e])
                return lb_set_error(LB_ERR_NOT_FOUND, "%s: %s: expert %d is missing "
                                    "(num_experts = %d)", c->dir, t->info.name, e,
                                    c->cfg.n_experts);
    }
    for (int l = 0; l < c->cfg.n_layers; l++) {
        if (!lb_model_config_layer_moe(&c->cfg, l)) continue;
        static const char *need[] = {"ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps",
                                     "ffn_down_exps"};
        for (size_t k = 0; k < LB_ARRAY_LEN(need); k++) {
            char nm[96];
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, need[k]);
            bool found = false;
            for (size_t i = 0; i < c->n && !found; i++) found = !strcmp(c->t[i].info.name, nm);
            if (!found)
                return lb_set_error(LB_ERR_NOT_FOUND, "%s: no tensor for GGUF %s (layer %d "
                                    "is a MoE layer)", c->dir, nm, l);
        }
    }
    return LB_OK;
}

/* Generated tensors written before the checkpoint's (Phi-3 longrope). */
lb_status ex_arch_generated(ex_ctx *c, lb_status (*push)(ex_ctx *, ex_tensor **)) {
    if (c->cfg.rope_scaling != LB_ROPE_SCALING_LONGROPE) return LB_OK;
    for (int k = 0; k < 2; k++) {
        ex_tensor *t;
        LB_TRY(push(c, &t));
        snprintf(t->info.name, sizeof t->info.name, "%s",
                 k ? "rope_factors_short.weight" : "rope_factors_long.weight");
        snprintf(t->info.source, sizeof t->info.source, "(config longrope)");
        t->kind = EX_SRC_ROPE_FACTORS;
        t->rope_kind = k;
        t->info.n_dims = 1;
        t->info.shape[0] = c->cfg.head_dim / 2;
        t->info.src_type = LB_TYPE_F32;
    }
    return LB_OK;
}

void ex_arch_rope_factors(const ex_ctx *c, int kind, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = kind ? c->cfg.rope_short_factor[i] : c->cfg.rope_long_factor[i];
}

static lb_status u32(lb_gguf_writer *w, const char *a, const char *k, uint32_t v) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", a, k);
    return lb_gguf_writer_set_u32(w, key, v);
}

static lb_status f32(lb_gguf_writer *w, const char *a, const char *k, float v) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", a, k);
    return lb_gguf_writer_set_f32(w, key, v);
}

lb_status ex_arch_write_kv(const ex_ctx *c, lb_gguf_writer *w) {
    const lb_model_config *cfg = &c->cfg;
    const char *a = c->arch;
    char key[96];
    if (gemma(c)) {
        const bool g2 = cfg->arch == LB_ARCH_GEMMA2;
        if (cfg->attn_softcap > 0) LB_TRY(f32(w, a, "attn_logit_softcapping", cfg->attn_softcap));
        if (cfg->final_softcap > 0)
            LB_TRY(f32(w, a, "final_logit_softcapping", cfg->final_softcap));
        LB_TRY(u32(w, a, "attention.sliding_window", (uint32_t)cfg->sliding_window));
        if (!g2) LB_TRY(f32(w, a, "rope.freq_base_swa", (float)cfg->rope_local_theta));
        const bool big = cfg->n_layers == (g2 ? 46 : 62);
        const float def = 1.0f / sqrtf(big ? (float)(cfg->hidden_size / cfg->n_heads)
                                           : (float)cfg->head_dim);
        if (cfg->attn_scale > 0 && fabsf(cfg->attn_scale - def) > 1e-7f * def)
            LB_TRY(f32(w, a, "attention.scale", cfg->attn_scale));
        const int pattern = g2 ? 2 : 6;
        bool std = true;
        for (int l = 0; l < cfg->n_layers; l++)
            std &= lb_model_config_layer_swa(cfg, l) == (l % pattern < pattern - 1);
        if (!std) {
            bool *b = malloc((size_t)cfg->n_layers * sizeof *b);
            if (!b) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
            for (int l = 0; l < cfg->n_layers; l++) b[l] = lb_model_config_layer_swa(cfg, l);
            snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", a);
            lb_status s = lb_gguf_writer_set_arr(w, key, LB_GGUF_TYPE_BOOL, b,
                                                 (uint64_t)cfg->n_layers);
            free(b);
            LB_TRY(s);
        }
    } else if (cfg->arch == LB_ARCH_PHI3) {
        LB_TRY(u32(w, a, "rope.dimension_count", (uint32_t)cfg->head_dim));
        LB_TRY(u32(w, a, "rope.scaling.original_context_length",
                   (uint32_t)(cfg->rope_original_max_position_embeddings > 0
                                  ? cfg->rope_original_max_position_embeddings
                                  : cfg->max_position_embeddings)));
        LB_TRY(u32(w, a, "attention.sliding_window", (uint32_t)cfg->sliding_window));
        if (cfg->rope_scaling == LB_ROPE_SCALING_LONGROPE)
            LB_TRY(f32(w, a, "rope.scaling.attn_factor", (float)cfg->rope_attn_factor));
    }
    if (cfg->n_experts > 0) {
        LB_TRY(u32(w, a, "expert_count", (uint32_t)cfg->n_experts));
        LB_TRY(u32(w, a, "expert_used_count", (uint32_t)cfg->n_experts_used));
        if (cfg->arch != LB_ARCH_MIXTRAL)
            LB_TRY(u32(w, a, "expert_feed_forward_length", (uint32_t)cfg->moe_ff));
        if (cfg->shared_ff > 0)
            LB_TRY(u32(w, a, "expert_shared_feed_forward_length", (uint32_t)cfg->shared_ff));
        const bool llama_norm = cfg->arch != LB_ARCH_QWEN2_MOE;
        if (cfg->norm_topk_prob != llama_norm) {
            snprintf(key, sizeof key, "%s.expert_weights_norm", a);
            LB_TRY(lb_gguf_writer_set_bool(w, key, cfg->norm_topk_prob));
        }
    }
    return LB_OK;
}
