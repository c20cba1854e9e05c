/*
 * config.json keys of the issue-13 architectures: Gemma 2/3 (soft-capping,
 * query_pre_attn_scalar, layer_types, local RoPE base), Phi-3 longrope, and
 * the MoE routing keys of Qwen3-MoE, Qwen2-MoE and Mixtral. Defaults follow
 * transformers 5.12 configuration_{gemma2,gemma3,phi3,qwen3_moe,qwen2_moe,
 * mixtral}.py and modeling_rope_utils.py (_compute_longrope_parameters).
 */
#include "lowbit/config.h"
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>

lb_status lb_config_parse_ext(const cJSON *root, const char *label,
                              lb_model_config *c);
lb_status lb_config_parse_longrope(const cJSON *root, const cJSON *rp,
                                   const char *rp_name, const char *label,
                                   lb_model_config *c);

static bool is_gemma(lb_arch a) {
    return a == LB_ARCH_GEMMA2 || a == LB_ARCH_GEMMA3;
}
static bool is_moe(lb_arch a) {
    return a == LB_ARCH_QWEN3_MOE || a == LB_ARCH_QWEN2_MOE ||
           a == LB_ARCH_MIXTRAL;
}

bool lb_model_config_is_ext(const lb_model_config *c) {
    return is_gemma(c->arch) || is_moe(c->arch) || c->n_experts > 0 ||
           c->rope_scaling == LB_ROPE_SCALING_LONGROPE || c->post_norms ||
           c->has_layer_flags || c->attn_softcap > 0 || c->final_softcap > 0 ||
           c->embed_scale > 0 || c->hidden_act != LB_ACT_SILU;
}

bool lb_model_config_layer_swa(const lb_model_config *c, int l) {
    if (c->sliding_window <= 0) return false;
    if (c->has_layer_flags)
        return l >= 0 && l < LB_MAX_LAYER_FLAGS &&
               (c->layer_flags[l] & LB_LAYER_SWA);
    return l >= c->sliding_window_first_layer;
}

bool lb_model_config_layer_moe(const lb_model_config *c, int l) {
    if (c->n_experts <= 0) return false;
    if (c->has_layer_flags)
        return l >= 0 && l < LB_MAX_LAYER_FLAGS &&
               (c->layer_flags[l] & LB_LAYER_MOE);
    return true;
}

/* number; absent -> def, null -> 0 (off) */
static lb_status num_or(const cJSON *o, const char *key, double def,
                        const char *label, double *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j) {
        *out = def;
        return LB_OK;
    }
    if (cJSON_IsNull(j)) {
        *out = 0;
        return LB_OK;
    }
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble))
        return lb_set_error(LB_ERR_FORMAT, "%s: field '%s' is not a number",
                            label, key);
    *out = j->valuedouble;
    return LB_OK;
}

static lb_status int_key(const cJSON *o, const char *key, int64_t def,
                         int64_t lo, int64_t hi, const char *label,
                         int32_t *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j || cJSON_IsNull(j)) {
        *out = (int32_t)def;
        return LB_OK;
    }
    double d = j->valuedouble;
    if (!cJSON_IsNumber(j) || d != floor(d) || !(d >= (double)lo) ||
        !(d <= (double)hi))
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: field '%s' must be an integer in [%lld, "
                            "%lld]",
                            label, key, (long long)lo, (long long)hi);
    *out = (int32_t)d;
    return LB_OK;
}

static lb_status factors(const cJSON *rp, const char *key, const char *rp_name,
                         const char *label, int n, float *dst) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(rp, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s.%s must be a list of head_dim/2 = %d "
                            "numbers",
                            label, rp_name, key, n);
    int i = 0;
    for (const cJSON *x = a->child; x; x = x->next, i++) {
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0) ||
            !isfinite(x->valuedouble))
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: %s.%s[%d] is not a positive number",
                                label, rp_name, key, i);
        dst[i] = (float)x->valuedouble;
    }
    return LB_OK;
}

lb_status lb_config_parse_longrope(const cJSON *root, const cJSON *rp,
                                   const char *rp_name, const char *label,
                                   lb_model_config *c) {
    /* head_dim is parsed before the rope keys */
    const int n = c->head_dim / 2;
    if (n <= 0 || n > LB_MAX_ROPE_FACTORS)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: longrope with head_dim %d (at most %d)",
                            label, c->head_dim, 2 * LB_MAX_ROPE_FACTORS);
    double prf = 1.0;
    const cJSON *pj = cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor");
    if (!pj) pj = cJSON_GetObjectItemCaseSensitive(root, "partial_rotary_factor");
    if (pj && cJSON_IsNumber(pj)) prf = pj->valuedouble;
    if (prf != 1.0)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: partial_rotary_factor %g (only 1.0)", label,
                            prf);
    c->rope_scaling = LB_ROPE_SCALING_LONGROPE;
    c->rope_n_factors = n;
    LB_TRY(factors(rp, "long_factor", rp_name, label, n, c->rope_long_factor));
    LB_TRY(factors(rp, "short_factor", rp_name, label, n,
                   c->rope_short_factor));
    int32_t omp = 0;
    LB_TRY(int_key(rp, "original_max_position_embeddings", 0, 0, INT32_MAX,
                   label, &omp));
    if (omp == 0)
        LB_TRY(int_key(root, "original_max_position_embeddings", 0, 0,
                       INT32_MAX, label, &omp));
    if (omp <= 0)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: longrope needs original_max_position_"
                            "embeddings",
                            label);
    c->rope_original_max_position_embeddings = omp;
    double factor = 0, af = 0;
    LB_TRY(num_or(rp, "factor", 0, label, &factor));
    LB_TRY(num_or(rp, "attention_factor", 0, label, &af));
    if (!(factor > 0)) {
        int32_t mp = 0;
        LB_TRY(int_key(root, "max_position_embeddings", 4096, 1, INT32_MAX,
                       label, &mp));
        factor = (double)mp / (double)omp;
    }
    if (!(af > 0))
        af = factor <= 1.0 ? 1.0
                           : sqrt(1.0 + log(factor) / log((double)omp));
    c->rope_factor = factor;
    c->rope_attn_factor = af;
    return LB_OK;
}

static lb_status parse_layer_types(const cJSON *root, const char *label,
                                   lb_model_config *c, int pattern) {
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (c->n_layers > LB_MAX_LAYER_FLAGS)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: more than %d layers",
                            label, LB_MAX_LAYER_FLAGS);
    c->has_layer_flags = true;
    if (cJSON_IsArray(lt)) {
        if (cJSON_GetArraySize(lt) != c->n_layers)
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: layer_types has %d entries for %d "
                                "layers",
                                label, cJSON_GetArraySize(lt), c->n_layers);
        int i = 0;
        for (const cJSON *x = lt->child; x; x = x->next, i++) {
            if (!cJSON_IsString(x) ||
                (strcmp(x->valuestring, "sliding_attention") &&
                 strcmp(x->valuestring, "full_attention")))
                return lb_set_error(LB_ERR_FORMAT,
                                    "%s: layer_types[%d] is not "
                                    "'sliding_attention' or "
                                    "'full_attention'",
                                    label, i);
            if (!strcmp(x->valuestring, "sliding_attention"))
                c->layer_flags[i] |= LB_LAYER_SWA;
        }
        return LB_OK;
    }
    for (int i = 0; i < c->n_layers; i++)
        if ((i + 1) % pattern) c->layer_flags[i] |= LB_LAYER_SWA;
    return LB_OK;
}

static lb_status parse_gemma(const cJSON *root, const char *label,
                             lb_model_config *c) {
    const bool g2 = c->arch == LB_ARCH_GEMMA2;
    c->post_norms = true;
    c->embed_scale = sqrtf((float)c->hidden_size);
    double qpas, fcap, acap;
    LB_TRY(num_or(root, "query_pre_attn_scalar", 256, label, &qpas));
    if (!(qpas > 0))
        return lb_set_error(LB_ERR_FORMAT, "%s: query_pre_attn_scalar must "
                            "be positive", label);
    c->attn_scale = (float)pow(qpas, -0.5);
    LB_TRY(num_or(root, "final_logit_softcapping", g2 ? 30.0 : 0, label, &fcap));
    LB_TRY(num_or(root, "attn_logit_softcapping", g2 ? 50.0 : 0, label, &acap));
    if (fcap < 0 || acap < 0)
        return lb_set_error(LB_ERR_FORMAT, "%s: negative soft-capping", label);
    c->final_softcap = (float)fcap;
    c->attn_softcap = (float)acap;
    int32_t sw;
    LB_TRY(int_key(root, "sliding_window", 4096, 0, INT32_MAX, label, &sw));
    c->sliding_window = sw;
    c->sliding_window_first_layer = 0;
    int32_t pattern = 2;
    if (!g2) {
        LB_TRY(int_key(root, "sliding_window_pattern", 0, 0, 1 << 20, label,
                       &pattern));
        if (pattern == 0)
            LB_TRY(int_key(root, "_sliding_window_pattern", 6, 1, 1 << 20,
                           label, &pattern));
    }
    LB_TRY(parse_layer_types(root, label, c, pattern));
    if (!g2) {
        /* local RoPE base: rope_parameters.sliding_attention (v5) or
         * rope_local_base_freq (v4), default rope only */
        double local = 10000.0;
        const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
        const cJSON *sa = cJSON_IsObject(rp)
                              ? cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention")
                              : NULL;
        if (cJSON_IsObject(sa)) {
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(sa, "rope_type");
            if (ty && cJSON_IsString(ty) && strcmp(ty->valuestring, "default"))
                return lb_set_error(LB_ERR_UNSUPPORTED,
                                    "%s: rope_parameters.sliding_attention."
                                    "rope_type '%s' (default only)",
                                    label, ty->valuestring);
            LB_TRY(num_or(sa, "rope_theta", 10000.0, label, &local));
        } else {
            LB_TRY(num_or(root, "rope_local_base_freq", 10000.0, label, &local));
        }
        if (!(local > 0))
            return lb_set_error(LB_ERR_FORMAT, "%s: the local rope_theta must "
                                "be positive", label);
        c->rope_local_theta = local;
    }
    return LB_OK;
}

static lb_status parse_moe(const cJSON *root, const char *label,
                           lb_model_config *c) {
    const bool mix = c->arch == LB_ARCH_MIXTRAL,
               q2 = c->arch == LB_ARCH_QWEN2_MOE;
    const char *ne_key = cJSON_GetObjectItemCaseSensitive(root, "num_experts")
                             ? "num_experts"
                             : "num_local_experts";
    LB_TRY(int_key(root, ne_key, mix ? 8 : q2 ? 60 : 128, 1, 4096, label,
                   &c->n_experts));
    LB_TRY(int_key(root, "num_experts_per_tok", mix ? 2 : q2 ? 4 : 8, 1, 4096,
                   label, &c->n_experts_used));
    if (c->n_experts_used > c->n_experts)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: num_experts_per_tok %d > %s %d", label,
                            c->n_experts_used, ne_key, c->n_experts);
    if (mix) {
        c->moe_ff = c->intermediate_size;
        c->norm_topk_prob = true;
    } else {
        LB_TRY(int_key(root, "moe_intermediate_size", q2 ? 1408 : 768, 1,
                       1 << 20, label, &c->moe_ff));
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, "norm_topk_prob");
        if (j && !cJSON_IsNull(j) && !cJSON_IsBool(j))
            return lb_set_error(LB_ERR_FORMAT, "%s: field 'norm_topk_prob' is "
                                "not a boolean", label);
        c->norm_topk_prob = j && cJSON_IsTrue(j);
    }
    if (q2)
        LB_TRY(int_key(root, "shared_expert_intermediate_size", 5632, 0,
                       1 << 20, label, &c->shared_ff));
    if (c->n_layers > LB_MAX_LAYER_FLAGS)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: more than %d layers",
                            label, LB_MAX_LAYER_FLAGS);
    int32_t step = 1;
    if (!mix)
        LB_TRY(int_key(root, "decoder_sparse_step", 1, 1, INT32_MAX, label,
                       &step));
    /* (layer_idx not in mlp_only_layers) and (layer_idx + 1) %
     * decoder_sparse_step == 0 */
    for (int l = 0; l < c->n_layers; l++) {
        if ((l + 1) % step == 0) c->layer_flags[l] |= LB_LAYER_MOE;
        /* (has_layer_flags is still false: sliding_window_first_layer) */
        if (lb_model_config_layer_swa(c, l)) c->layer_flags[l] |= LB_LAYER_SWA;
    }
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
    if (mo && !cJSON_IsNull(mo)) {
        if (!cJSON_IsArray(mo))
            return lb_set_error(LB_ERR_FORMAT, "%s: mlp_only_layers is not a "
                                "list", label);
        for (const cJSON *x = mo->child; x; x = x->next) {
            double d = x->valuedouble;
            if (!cJSON_IsNumber(x) || d != floor(d) || d < 0 ||
                d >= c->n_layers)
                return lb_set_error(LB_ERR_FORMAT,
                                    "%s: mlp_only_layers entry is not a "
                                    "layer index in [0, %d)",
                                    label, c->n_layers);
            c->layer_flags[(int)d] &= (uint8_t)~LB_LAYER_MOE;
        }
    }
    c->has_layer_flags = true;
    return LB_OK;
}

lb_status lb_config_parse_ext(const cJSON *root, const char *label,
                              lb_model_config *c) {
    if (is_gemma(c->arch)) return parse_gemma(root, label, c);
    if (is_moe(c->arch)) return parse_moe(root, label, c);
    if (c->arch == LB_ARCH_PHI3 && c->rope_original_max_position_embeddings == 0)
        /* Phi3Config.original_max_position_embeddings (the GGUF key
         * rope.scaling.original_context_length) */
        return int_key(root, "original_max_position_embeddings",
                       c->max_position_embeddings, 1, INT32_MAX, label,
                       &c->rope_original_max_position_embeddings);
    return LB_OK;
}
