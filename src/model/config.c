/*
 * config.json -> lb_model_config. Defaults and field meanings follow
 * transformers 5.12 (configuration_{llama,mistral,qwen2,qwen3}.py,
 * modeling_rope_utils.py). See lowbit/config.h.
 */
#include "lowbit/config.h"
#include "lowbit/file.h"
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CFG_MAX_JSON ((size_t)16 * 1024 * 1024)

/* config_ext.c: the issue-13 architectures' keys */
lb_status lb_config_parse_ext(const cJSON *root, const char *label,
                              lb_model_config *c);
lb_status lb_config_parse_longrope(const cJSON *root, const cJSON *rp,
                                   const char *rp_name, const char *label,
                                   lb_model_config *c);

static const char *arch_names[LB_ARCH_COUNT_] = {
    [LB_ARCH_LLAMA] = "LlamaForCausalLM",
    [LB_ARCH_MISTRAL] = "MistralForCausalLM",
    [LB_ARCH_QWEN2] = "Qwen2ForCausalLM",
    [LB_ARCH_QWEN3] = "Qwen3ForCausalLM",
    [LB_ARCH_GEMMA2] = "Gemma2ForCausalLM",
    [LB_ARCH_GEMMA3] = "Gemma3ForCausalLM",
    [LB_ARCH_PHI3] = "Phi3ForCausalLM",
    [LB_ARCH_QWEN3_MOE] = "Qwen3MoeForCausalLM",
    [LB_ARCH_QWEN2_MOE] = "Qwen2MoeForCausalLM",
    [LB_ARCH_MIXTRAL] = "MixtralForCausalLM",
};
static const char *model_types[LB_ARCH_COUNT_] = {
    [LB_ARCH_LLAMA] = "llama",
    [LB_ARCH_MISTRAL] = "mistral",
    [LB_ARCH_QWEN2] = "qwen2",
    [LB_ARCH_QWEN3] = "qwen3",
    [LB_ARCH_GEMMA2] = "gemma2",
    [LB_ARCH_GEMMA3] = "gemma3_text",
    [LB_ARCH_PHI3] = "phi3",
    [LB_ARCH_QWEN3_MOE] = "qwen3_moe",
    [LB_ARCH_QWEN2_MOE] = "qwen2_moe",
    [LB_ARCH_MIXTRAL] = "mixtral",
};

const char *lb_arch_name(lb_arch arch) {
    return (unsigned)arch < LB_ARCH_COUNT_ ? arch_names[arch] : "?";
}

/* Integer field: absent/null -> *out = def (or an error when required). */
static lb_status get_int(const cJSON *o, const char *key, bool required,
                         int64_t def, int64_t lo, int64_t hi,
                         const char *label, int64_t *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j || cJSON_IsNull(j)) {
        if (required)
            return lb_set_error(LB_ERR_FORMAT, "%s: missing field '%s'",
                                label, key);
        *out = def;
        return LB_OK;
    }
    double d = j->valuedouble;
    if (!cJSON_IsNumber(j) || d != floor(d) || !(d >= (double)lo) ||
        !(d <= (double)hi))
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: field '%s' must be an integer in [%lld, "
                            "%lld]",
                            label, key, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return LB_OK;
}

static lb_status get_i32(const cJSON *o, const char *key, bool required,
                         int64_t def, int64_t lo, int64_t hi,
                         const char *label, int32_t *out) {
    int64_t v;
    LB_TRY(get_int(o, key, required, def, lo, hi, label, &v));
    *out = (int32_t)v;
    return LB_OK;
}

static lb_status get_num(const cJSON *o, const char *key, bool required,
                         double def, const char *label, const char *ctx,
                         double *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j || cJSON_IsNull(j)) {
        if (required)
            return lb_set_error(LB_ERR_FORMAT, "%s: missing field '%s%s'",
                                label, ctx, key);
        *out = def;
        return LB_OK;
    }
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble))
        return lb_set_error(LB_ERR_FORMAT, "%s: field '%s%s' is not a number",
                            label, ctx, key);
    *out = j->valuedouble;
    return LB_OK;
}

static lb_status get_bool(const cJSON *o, const char *key, bool def,
                          const char *label, bool *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j || cJSON_IsNull(j)) {
        *out = def;
        return LB_OK;
    }
    if (!cJSON_IsBool(j))
        return lb_set_error(LB_ERR_FORMAT, "%s: field '%s' is not a boolean",
                            label, key);
    *out = cJSON_IsTrue(j);
    return LB_OK;
}

/* bos/eos ids: int, list of ints, or null. */
static lb_status get_ids(const cJSON *o, const char *key, int32_t *ids,
                         int max, int *n, bool *present, const char *label) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    *present = j && !cJSON_IsNull(j);
    if (!*present) return LB_OK;
    *n = 0;
    const cJSON *one = j;
    if (cJSON_IsArray(j)) one = j->child;
    for (; one; one = cJSON_IsArray(j) ? one->next : NULL) {
        double d = one->valuedouble;
        if (!cJSON_IsNumber(one) || d != floor(d) || d < 0 || d > INT32_MAX)
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: '%s' must be a token id or a list of "
                                "token ids",
                                label, key);
        if (*n >= max)
            return lb_set_error(LB_ERR_FORMAT, "%s: more than %d ids in '%s'",
                                label, max, key);
        ids[(*n)++] = (int32_t)d;
    }
    return LB_OK;
}

/* rope type + parameters from either style. `rp` is the object holding the
 * type and factors (rope_parameters or rope_scaling; may be NULL). */
static lb_status parse_rope(const cJSON *root, const cJSON *rp,
                            const char *rp_name, const char *label,
                            lb_model_config *c) {
    char ctx[64];
    snprintf(ctx, sizeof ctx, "%s.", rp_name);
    /* rope_theta: inside rope_parameters (v5) or top-level (v4). */
    double theta = 10000.0;
    const cJSON *tin = rp ? cJSON_GetObjectItemCaseSensitive(rp, "rope_theta")
                          : NULL;
    if (tin && !cJSON_IsNull(tin))
        LB_TRY(get_num(rp, "rope_theta", true, 0, label, ctx, &theta));
    else
        LB_TRY(get_num(root, "rope_theta", false, 10000.0, label, "", &theta));
    if (!(theta > 0))
        return lb_set_error(LB_ERR_FORMAT, "%s: rope_theta must be positive",
                            label);
    c->rope_theta = theta;
    c->rope_scaling = LB_ROPE_SCALING_NONE;
    c->rope_factor = 1.0;
    if (!rp) return LB_OK;
    const cJSON *jt = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
    if (!jt || cJSON_IsNull(jt))
        jt = cJSON_GetObjectItemCaseSensitive(rp, "type"); /* legacy key */
    const char *type = "default";
    if (jt && !cJSON_IsNull(jt)) {
        if (!cJSON_IsString(jt))
            return lb_set_error(LB_ERR_FORMAT, "%s: %s.rope_type is not a "
                                "string", label, rp_name);
        type = jt->valuestring;
    }
    if (strcmp(type, "default") == 0) return LB_OK;
    if (strcmp(type, "linear") == 0) {
        c->rope_scaling = LB_ROPE_SCALING_LINEAR;
        LB_TRY(get_num(rp, "factor", true, 1, label, ctx, &c->rope_factor));
    } else if (strcmp(type, "llama3") == 0) {
        c->rope_scaling = LB_ROPE_SCALING_LLAMA3;
        LB_TRY(get_num(rp, "factor", true, 1, label, ctx, &c->rope_factor));
        LB_TRY(get_num(rp, "low_freq_factor", true, 1, label, ctx,
                       &c->rope_low_freq_factor));
        LB_TRY(get_num(rp, "high_freq_factor", true, 1, label, ctx,
                       &c->rope_high_freq_factor));
        double omp;
        LB_TRY(get_num(rp, "original_max_position_embeddings", true, 1, label,
                       ctx, &omp));
        if (!(omp >= 1 && omp <= INT32_MAX) || omp != floor(omp))
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: %s.original_max_position_embeddings "
                                "must be a positive integer",
                                label, rp_name);
        c->rope_original_max_position_embeddings = (int32_t)omp;
        if (!(c->rope_high_freq_factor > c->rope_low_freq_factor) ||
            !(c->rope_low_freq_factor > 0))
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: %s: llama3 rope needs high_freq_factor > "
                                "low_freq_factor > 0",
                                label, rp_name);
    } else if (strcmp(type, "longrope") == 0 || strcmp(type, "su") == 0) {
        return lb_config_parse_longrope(root, rp, rp_name, label, c);
    } else {
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: rope type '%s' is not supported (lowbit "
                            "supports default, linear, llama3, longrope)",
                            label, type);
    }
    if (!(c->rope_factor > 0))
        return lb_set_error(LB_ERR_FORMAT, "%s: %s.factor must be positive",
                            label, rp_name);
    return LB_OK;
}

/* Sliding window: Mistral applies it to every layer; Qwen2/3 only when
 * use_sliding_window, to layers >= max_window_layers (layer_types, when
 * present, must agree with that pattern). */
static lb_status parse_sliding(const cJSON *root, const char *label,
                               lb_model_config *c) {
    c->sliding_window = 0;
    c->sliding_window_first_layer = 0;
    int64_t sw = 0;
    if (c->arch == LB_ARCH_MISTRAL) {
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(root,
                                                          "sliding_window");
        if (!j)
            sw = 4096; /* MistralConfig default */
        else
            LB_TRY(get_int(root, "sliding_window", false, 0, 0, INT32_MAX,
                           label, &sw));
        c->sliding_window = (int32_t)sw;
        return LB_OK;
    }
    if (c->arch == LB_ARCH_PHI3 || c->arch == LB_ARCH_MIXTRAL) {
        /* every layer when set (Phi3Attention / MixtralAttention) */
        LB_TRY(get_int(root, "sliding_window", false, 0, 0, INT32_MAX, label,
                       &sw));
        c->sliding_window = (int32_t)sw;
        return LB_OK;
    }
    if (c->arch != LB_ARCH_QWEN2 && c->arch != LB_ARCH_QWEN3 &&
        c->arch != LB_ARCH_QWEN3_MOE && c->arch != LB_ARCH_QWEN2_MOE)
        return LB_OK;
    bool use = false;
    LB_TRY(get_bool(root, "use_sliding_window", false, label, &use));
    if (!use) return LB_OK;
    LB_TRY(get_int(root, "sliding_window", false, 4096, 0, INT32_MAX, label,
                   &sw));
    int64_t first;
    LB_TRY(get_int(root, "max_window_layers", false, 28, 0, INT32_MAX, label,
                   &first));
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (cJSON_IsArray(lt)) {
        int i = 0;
        first = -1;
        for (const cJSON *x = lt->child; x; x = x->next, i++) {
            bool sl = cJSON_IsString(x) &&
                      strcmp(x->valuestring, "sliding_attention") == 0;
            if (sl && first < 0) first = i;
            if (!sl && first >= 0)
                return lb_set_error(LB_ERR_UNSUPPORTED,
                                    "%s: layer_types: a full-attention layer "
                                    "after sliding layers is not supported",
                                    label);
        }
        if (first < 0) return LB_OK;
    }
    c->sliding_window = (int32_t)sw;
    c->sliding_window_first_layer = (int32_t)first;
    return LB_OK;
}

lb_status lb_model_config_parse(const char *json, size_t len,
                                const char *label, lb_model_config *c) {
    memset(c, 0, sizeof *c);
    if (!label) label = "config.json";
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root)
        return lb_set_error(LB_ERR_FORMAT, "%s: not valid JSON", label);
    lb_status s = LB_OK;
    if (!cJSON_IsObject(root)) {
        s = lb_set_error(LB_ERR_FORMAT, "%s: not a JSON object", label);
        goto done;
    }
    /* Architecture: "architectures"[0], else "model_type". */
    const cJSON *ar = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const char *aname = NULL;
    if (cJSON_IsArray(ar) && cJSON_IsString(ar->child))
        aname = ar->child->valuestring;
    int arch = -1;
    if (aname) {
        for (int i = 0; i < LB_ARCH_COUNT_; i++)
            if (strcmp(aname, arch_names[i]) == 0) arch = i;
        snprintf(c->arch_name, sizeof c->arch_name, "%s", aname);
    } else if (cJSON_IsString(mt)) {
        for (int i = 0; i < LB_ARCH_COUNT_; i++)
            if (strcmp(mt->valuestring, model_types[i]) == 0) arch = i;
        snprintf(c->arch_name, sizeof c->arch_name, "model_type %s",
                 mt->valuestring);
    } else {
        s = lb_set_error(LB_ERR_FORMAT,
                         "%s: no 'architectures' or 'model_type'", label);
        goto done;
    }
    if (arch < 0) {
        s = lb_set_error(LB_ERR_UNSUPPORTED,
                         "%s: architecture '%s' is not supported (lowbit "
                         "runs LlamaForCausalLM, MistralForCausalLM, "
                         "Qwen2ForCausalLM, Qwen3ForCausalLM, "
                         "Gemma2ForCausalLM, Gemma3ForCausalLM, "
                         "Phi3ForCausalLM, Qwen3MoeForCausalLM, "
                         "Qwen2MoeForCausalLM, MixtralForCausalLM)",
                         label, c->arch_name);
        goto done;
    }
    c->arch = (lb_arch)arch;
    snprintf(c->arch_name, sizeof c->arch_name, "%s", arch_names[arch]);

    const bool gemma = arch == LB_ARCH_GEMMA2 || arch == LB_ARCH_GEMMA3;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(
        root, gemma ? "hidden_activation" : "hidden_act");
    if (gemma && (!act || cJSON_IsNull(act)))
        act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (gemma && act && cJSON_IsString(act) &&
        (strcmp(act->valuestring, "gelu_pytorch_tanh") == 0 ||
         strcmp(act->valuestring, "gelu_tanh") == 0)) {
        c->hidden_act = LB_ACT_GELU_TANH;
    } else if (gemma && (!act || cJSON_IsNull(act))) {
        c->hidden_act = LB_ACT_GELU_TANH; /* Gemma2Config default */
    } else if (act && !cJSON_IsNull(act) &&
        (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0)) {
        s = lb_set_error(LB_ERR_UNSUPPORTED,
                         "%s: hidden_act '%s' is not supported (silu; "
                         "gelu_pytorch_tanh for Gemma)",
                         label, cJSON_IsString(act) ? act->valuestring : "?");
        goto done;
    }
    bool mlp_bias = false;
    if ((s = get_bool(root, "mlp_bias", false, label, &mlp_bias)) != LB_OK)
        goto done;
    if (mlp_bias) {
        s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: mlp_bias=true is not "
                         "supported", label);
        goto done;
    }

    const int64_t BIG = INT32_MAX;
    if ((s = get_i32(root, "vocab_size", true, 0, 1, BIG, label,
                     &c->vocab_size)) != LB_OK ||
        (s = get_i32(root, "hidden_size", true, 0, 1, BIG, label,
                     &c->hidden_size)) != LB_OK ||
        (s = get_i32(root, "intermediate_size", true, 0, 1, BIG, label,
                     &c->intermediate_size)) != LB_OK ||
        (s = get_i32(root, "num_hidden_layers", true, 0, 1, BIG, label,
                     &c->n_layers)) != LB_OK ||
        (s = get_i32(root, "num_attention_heads", true, 0, 1, BIG, label,
                     &c->n_heads)) != LB_OK ||
        (s = get_i32(root, "num_key_value_heads", false, c->n_heads, 1, BIG,
                     label, &c->n_kv_heads)) != LB_OK)
        goto done;
    if (!cJSON_GetObjectItemCaseSensitive(root, "head_dim") ||
        cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "head_dim"))) {
        if (c->hidden_size % c->n_heads) {
            s = lb_set_error(LB_ERR_FORMAT,
                             "%s: hidden_size %d is not divisible by "
                             "num_attention_heads %d (and no head_dim)",
                             label, c->hidden_size, c->n_heads);
            goto done;
        }
        c->head_dim = c->hidden_size / c->n_heads;
    } else if ((s = get_i32(root, "head_dim", true, 0, 1, BIG, label,
                            &c->head_dim)) != LB_OK) {
        goto done;
    }
    int64_t def_maxpos = c->arch == LB_ARCH_LLAMA     ? 2048
                         : c->arch == LB_ARCH_MISTRAL ? 131072
                                                      : 32768;
    if ((s = get_i32(root, "max_position_embeddings", false, def_maxpos, 1,
                     BIG, label, &c->max_position_embeddings)) != LB_OK)
        goto done;
    double eps;
    if ((s = get_num(root, "rms_norm_eps", false, 1e-6, label, "", &eps)) !=
        LB_OK)
        goto done;
    if (!(eps >= 0)) {
        s = lb_set_error(LB_ERR_FORMAT, "%s: rms_norm_eps must be >= 0", label);
        goto done;
    }
    c->rms_norm_eps = (float)eps;
    if ((s = get_bool(root, "tie_word_embeddings", false, label,
                      &c->tie_word_embeddings)) != LB_OK)
        goto done;
    bool ab = false;
    if ((s = get_bool(root, "attention_bias", false, label, &ab)) != LB_OK)
        goto done;
    c->attention_bias = c->arch == LB_ARCH_QWEN2 ? true /* always */
                        : c->arch == LB_ARCH_MISTRAL ? false
                                                     : ab;
    c->qk_norm = c->arch == LB_ARCH_QWEN3 || c->arch == LB_ARCH_QWEN3_MOE ||
                 c->arch == LB_ARCH_GEMMA3;
    if (c->arch == LB_ARCH_QWEN2_MOE) {
        bool qb = true;
        if ((s = get_bool(root, "qkv_bias", true, label, &qb)) != LB_OK)
            goto done;
        c->attention_bias = qb;
    }
    if (c->arch == LB_ARCH_PHI3 || c->arch == LB_ARCH_MIXTRAL ||
        gemma)
        c->attention_bias = c->attention_bias && gemma; /* none in HF */
    c->rope_mode = LB_ROPE_NEOX;

    /* RoPE: v5 rope_parameters first, else v4 rope_theta + rope_scaling. */
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    const char *rp_name = "rope_parameters";
    if (cJSON_IsObject(rp)) {
        /* per-layer-type form {"full_attention": {...}} */
        const cJSON *fa = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
        if (cJSON_IsObject(fa)) rp = fa;
    } else {
        if (rp && !cJSON_IsNull(rp)) {
            s = lb_set_error(LB_ERR_FORMAT, "%s: rope_parameters is not an "
                             "object", label);
            goto done;
        }
        rp = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
        rp_name = "rope_scaling";
        if (rp && cJSON_IsNull(rp)) rp = NULL;
        if (rp && !cJSON_IsObject(rp)) {
            s = lb_set_error(LB_ERR_FORMAT, "%s: rope_scaling is not an "
                             "object", label);
            goto done;
        }
    }
    if ((s = parse_rope(root, rp, rp_name, label, c)) != LB_OK) goto done;
    if ((s = parse_sliding(root, label, c)) != LB_OK) goto done;
    if ((s = lb_config_parse_ext(root, label, c)) != LB_OK) goto done;

    bool present;
    int nb = 0;
    c->bos_token_id = -1;
    if ((s = get_ids(root, "bos_token_id", &c->bos_token_id, 1, &nb, &present,
                     label)) != LB_OK)
        goto done;
    if (!present || nb == 0) c->bos_token_id = -1;
    if ((s = get_ids(root, "eos_token_id", c->eos_token_ids, LB_MAX_EOS,
                     &c->n_eos, &present, label)) != LB_OK)
        goto done;

    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(root,
                                                       "quantization_config");
    if (qc && !cJSON_IsNull(qc)) {
        if (!cJSON_IsObject(qc)) {
            s = lb_set_error(LB_ERR_FORMAT, "%s: quantization_config is not "
                             "an object", label);
            goto done;
        }
        c->has_quantization_config = true;
        const cJSON *qm = cJSON_GetObjectItemCaseSensitive(qc, "quant_method");
        if (cJSON_IsString(qm))
            snprintf(c->quant_method, sizeof c->quant_method, "%s",
                     qm->valuestring);
        c->quantization_config_json = cJSON_PrintUnformatted(qc);
        if (!c->quantization_config_json) {
            s = lb_set_error(LB_ERR_NOMEM, "%s: out of memory", label);
            goto done;
        }
    }
    s = lb_model_config_validate(c);
    if (s != LB_OK) lb_error_context(s, "%s", label);
done:
    cJSON_Delete(root);
    if (s != LB_OK) lb_model_config_clear(c);
    return s;
}

lb_status lb_model_config_validate(const lb_model_config *c) {
    /* Generous bounds that still keep every derived size product far from
     * overflow and reject absurd allocations from hostile files. */
    struct {
        const char *name;
        int64_t v, lo, hi;
    } f[] = {
        {"vocab_size", c->vocab_size, 1, 1 << 24},
        {"hidden_size", c->hidden_size, 1, 1 << 17},
        {"intermediate_size", c->intermediate_size, 1, 1 << 20},
        {"num_hidden_layers", c->n_layers, 1, 4096},
        {"num_attention_heads", c->n_heads, 1, 4096},
        {"num_key_value_heads", c->n_kv_heads, 1, 4096},
        {"head_dim", c->head_dim, 2, 4096},
        {"max_position_embeddings", c->max_position_embeddings, 1, 1 << 24},
    };
    for (size_t i = 0; i < LB_ARRAY_LEN(f); i++)
        if (f[i].v < f[i].lo || f[i].v > f[i].hi)
            return lb_set_error(LB_ERR_FORMAT, "%s = %lld is out of range "
                                "[%lld, %lld]", f[i].name, (long long)f[i].v,
                                (long long)f[i].lo, (long long)f[i].hi);
    if (c->n_heads % c->n_kv_heads)
        return lb_set_error(LB_ERR_FORMAT,
                            "num_attention_heads %d is not a multiple of "
                            "num_key_value_heads %d",
                            c->n_heads, c->n_kv_heads);
    if (c->head_dim % 2)
        return lb_set_error(LB_ERR_FORMAT, "head_dim %d is odd (RoPE needs "
                            "pairs)", c->head_dim);
    if ((int64_t)c->n_heads * c->head_dim > (1 << 20))
        return lb_set_error(LB_ERR_FORMAT, "num_attention_heads * head_dim "
                            "is too large");
    if (!(c->rope_theta > 0))
        return lb_set_error(LB_ERR_FORMAT, "rope_theta must be positive");
    if ((unsigned)c->arch >= LB_ARCH_COUNT_)
        return lb_set_error(LB_ERR_UNSUPPORTED, "unknown architecture id %d",
                            (int)c->arch);
    /* issue-13 fields (configs filled by hand reach here too) */
    if (c->n_experts < 0 || c->n_experts > 4096 ||
        (c->n_experts > 0 &&
         (c->n_experts_used < 1 || c->n_experts_used > c->n_experts ||
          c->moe_ff < 1 || c->moe_ff > (1 << 20))) ||
        c->shared_ff < 0 || c->shared_ff > (1 << 20))
        return lb_set_error(LB_ERR_FORMAT,
                            "num_experts %d / num_experts_per_tok %d / "
                            "moe_intermediate_size %d / "
                            "shared_expert_intermediate_size %d out of range",
                            c->n_experts, c->n_experts_used, c->moe_ff,
                            c->shared_ff);
    if (c->has_layer_flags && c->n_layers > LB_MAX_LAYER_FLAGS)
        return lb_set_error(LB_ERR_FORMAT, "more than %d layers with per-layer "
                            "flags", LB_MAX_LAYER_FLAGS);
    if (c->rope_scaling == LB_ROPE_SCALING_LONGROPE &&
        (c->rope_n_factors != c->head_dim / 2 ||
         c->rope_n_factors > LB_MAX_ROPE_FACTORS))
        return lb_set_error(LB_ERR_FORMAT, "longrope: %d factors for head_dim "
                            "%d", c->rope_n_factors, c->head_dim);
    if (!(c->attn_softcap >= 0) || !(c->final_softcap >= 0) ||
        !(c->attn_scale >= 0) || !(c->embed_scale >= 0) ||
        !isfinite(c->attn_softcap) || !isfinite(c->final_softcap) ||
        !isfinite(c->attn_scale) || !isfinite(c->embed_scale))
        return lb_set_error(LB_ERR_FORMAT, "soft-capping / attention scale / "
                            "embedding scale must be finite and >= 0");
    return LB_OK;
}

lb_status lb_model_config_merge_generation(lb_model_config *c,
                                           const char *json, size_t len,
                                           const char *label) {
    if (!label) label = "generation_config.json";
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return lb_set_error(LB_ERR_FORMAT, "%s: not a JSON object", label);
    }
    int32_t ids[LB_MAX_EOS];
    int n = 0;
    bool present;
    lb_status s = get_ids(root, "eos_token_id", ids, LB_MAX_EOS, &n, &present,
                          label);
    if (s == LB_OK && present) {
        memcpy(c->eos_token_ids, ids, sizeof ids);
        c->n_eos = n;
    }
    int32_t bos = -1;
    if (s == LB_OK)
        s = get_ids(root, "bos_token_id", &bos, 1, &n, &present, label);
    if (s == LB_OK && present && n == 1) c->bos_token_id = bos;
    cJSON_Delete(root);
    return s;
}

lb_status lb_model_config_load_dir(const char *dir, lb_model_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    char *p = lb_path_join(dir, "config.json");
    if (!p) return lb_set_error(LB_ERR_NOMEM, "out of memory");
    if (!lb_is_file(p)) {
        lb_status s = lb_set_error(LB_ERR_NOT_FOUND, "%s: no such file", p);
        free(p);
        return s;
    }
    char *text = NULL;
    size_t len = 0;
    lb_status s = lb_read_file(p, CFG_MAX_JSON, &text, &len);
    if (s == LB_OK) s = lb_model_config_parse(text, len, p, cfg);
    free(text);
    free(p);
    if (s != LB_OK) return s;
    p = lb_path_join(dir, "generation_config.json");
    if (!p) {
        lb_model_config_clear(cfg);
        return lb_set_error(LB_ERR_NOMEM, "out of memory");
    }
    if (lb_is_file(p)) {
        text = NULL;
        s = lb_read_file(p, CFG_MAX_JSON, &text, &len);
        if (s == LB_OK) s = lb_model_config_merge_generation(cfg, text, len, p);
        free(text);
    }
    free(p);
    if (s != LB_OK) lb_model_config_clear(cfg);
    return s;
}

lb_status lb_model_config_copy(lb_model_config *dst,
                               const lb_model_config *src) {
    *dst = *src;
    dst->quantization_config_json = NULL;
    if (src->quantization_config_json) {
        dst->quantization_config_json = lb_strdup(src->quantization_config_json);
        if (!dst->quantization_config_json)
            return lb_set_error(LB_ERR_NOMEM, "out of memory");
    }
    return LB_OK;
}

void lb_model_config_clear(lb_model_config *cfg) {
    if (!cfg) return;
    /* cJSON_PrintUnformatted uses cJSON's allocator (malloc by default). */
    free(cfg->quantization_config_json);
    memset(cfg, 0, sizeof *cfg);
}

bool lb_model_config_is_eos(const lb_model_config *cfg, int32_t id) {
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_token_ids[i] == id) return true;
    return false;
}
