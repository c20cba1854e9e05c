/*
 * GPTQ checkpoints (lowbit/gptq_ckpt.h): quantization_config parsing with
 * GPTQModel "dynamic" rules (PCRE2, anchored like Python's re.match), and
 * one quantized linear -> dequantized rows or an exact GGUF block repack.
 * Layout and conventions: AutoGPTQ @9f7d370 qlinear_cuda_old.py; see the
 * header.
 */
#include "lowbit/gptq_ckpt.h"
#include "lowbit/hadamard.h"
#include "lowbit/quants.h"
#include "core/internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* Config                                                                    */
/* ------------------------------------------------------------------------ */

void lb_gptq_qconfig_clear(lb_gptq_qconfig *q) {
    if (!q) return;
    for (int i = 0; i < q->n_dynamic; i++) {
        free(q->dynamic[i].pattern);
        pcre2_code_free((pcre2_code *)q->dynamic[i].code);
    }
    free(q->dynamic);
    memset(q, 0, sizeof *q);
}

/* Optional boolean; accepts JSON true/false (and 0/1 numbers, which some
 * exporters write). */
static lb_status get_bool(const cJSON *o, const char *key, bool *out,
                          const char *label) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return LB_OK;
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v);
        return LB_OK;
    }
    if (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1)) {
        *out = v->valuedouble != 0;
        return LB_OK;
    }
    return lb_set_error(LB_ERR_FORMAT, "%s: \"%s\" is not a boolean", label,
                        key);
}

/* Integer in [lo, hi]; *present tells whether the key exists. */
static lb_status get_int(const cJSON *o, const char *key, long lo, long hi,
                         int *out, bool *present, const char *label) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *present = v && !cJSON_IsNull(v);
    if (!*present) return LB_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < (double)lo || v->valuedouble > (double)hi)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: \"%s\" must be an integer in [%ld, %ld]",
                            label, key, lo, hi);
    *out = (int)v->valuedouble;
    return LB_OK;
}

static lb_status check_bits_gs(int bits, int gs, const char *label,
                               const char *where) {
    if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: %sbits = %d (lowbit reads 2, 3, 4, 8)", label,
                            where, bits);
    if (gs == 0 || gs < -1)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %sgroup_size = %d (use -1 or >= 1)", label,
                            where, gs);
    return LB_OK;
}

static lb_status parse_dynamic(const cJSON *dyn, const char *label,
                               lb_gptq_qconfig *q) {
    if (!cJSON_IsObject(dyn))
        return lb_set_error(LB_ERR_FORMAT, "%s: \"dynamic\" is not an object",
                            label);
    int n = cJSON_GetArraySize(dyn);
    if (n == 0) return LB_OK;
    q->dynamic = calloc((size_t)n, sizeof *q->dynamic);
    if (!q->dynamic) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory",
                                         label);
    const cJSON *e;
    cJSON_ArrayForEach(e, dyn) {
        lb_gptq_dynamic_rule *r = &q->dynamic[q->n_dynamic];
        const char *key = e->string ? e->string : "";
        r->negative = strncmp(key, "-:", 2) == 0;
        if (r->negative || strncmp(key, "+:", 2) == 0) key += 2;
        r->sym = r->desc_act = -1;
        r->pattern = lb_strdup(key);
        if (!r->pattern) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory",
                                             label);
        q->n_dynamic++;
        int ec;
        PCRE2_SIZE eo;
        r->code = pcre2_compile((PCRE2_SPTR)key, PCRE2_ZERO_TERMINATED,
                                PCRE2_ANCHORED | PCRE2_UTF, &ec, &eo, NULL);
        if (!r->code) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof msg);
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: dynamic pattern \"%s\": %s at offset %zu",
                                label, key, (const char *)msg, (size_t)eo);
        }
        if (!cJSON_IsObject(e))
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: dynamic entry \"%s\" is not an object",
                                label, key);
        if (r->negative) continue;
        bool pr;
        char where[200];
        snprintf(where, sizeof where, "dynamic \"%s\": ", key);
        LB_TRY(get_int(e, "bits", 1, 64, &r->bits, &pr, label));
        LB_TRY(get_int(e, "group_size", -1, 1 << 30, &r->group_size, &pr,
                       label));
        if (r->bits || r->group_size)
            LB_TRY(check_bits_gs(r->bits ? r->bits : q->bits,
                                 r->group_size ? r->group_size
                                               : q->group_size,
                                 label, where));
        bool b;
        if (cJSON_GetObjectItemCaseSensitive(e, "sym")) {
            b = q->sym;
            LB_TRY(get_bool(e, "sym", &b, label));
            r->sym = b;
        }
        if (cJSON_GetObjectItemCaseSensitive(e, "desc_act")) {
            b = q->desc_act;
            LB_TRY(get_bool(e, "desc_act", &b, label));
            r->desc_act = b;
        }
    }
    return LB_OK;
}

/* quant_method "awq" (transformers' AwqConfig / AutoAWQ's
 * to_transformers_dict): bits ("w_bit" accepted), group_size
 * ("q_group_size"), version (only "gemm"), zero_point (sym = !zero_point),
 * modules_to_not_convert (each name becomes a "-:" rule matching any
 * module that contains it, as AutoAWQ's exclude_layers_to_not_quantize). */
static lb_status parse_awq(const cJSON *root, const char *label,
                           lb_gptq_qconfig *q) {
    bool pr;
    q->format = LB_GPTQ_FORMAT_AWQ;
    LB_TRY(get_int(root, "bits", 1, 64, &q->bits, &pr, label));
    if (!pr) LB_TRY(get_int(root, "w_bit", 1, 64, &q->bits, &pr, label));
    if (!pr)
        return lb_set_error(LB_ERR_FORMAT, "%s: \"bits\" missing", label);
    LB_TRY(get_int(root, "group_size", -1, 1 << 30, &q->group_size, &pr,
                   label));
    if (!pr)
        LB_TRY(get_int(root, "q_group_size", -1, 1 << 30, &q->group_size,
                       &pr, label));
    if (!pr)
        return lb_set_error(LB_ERR_FORMAT, "%s: \"group_size\" missing",
                            label);
    LB_TRY(check_bits_gs(q->bits, q->group_size, label, ""));
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (v && !cJSON_IsNull(v) &&
        (!cJSON_IsString(v) || (strcmp(v->valuestring, "gemm") &&
                                strcmp(v->valuestring, "GEMM"))))
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: AWQ version \"%s\" (lowbit reads the "
                            "\"gemm\" layout)",
                            label, cJSON_IsString(v) ? v->valuestring : "?");
    if (q->bits != 4)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: AWQ bits = %d (the GEMM layout holds 4-bit "
                            "codes only)", label, q->bits);
    bool zp = true;
    LB_TRY(get_bool(root, "zero_point", &zp, label));
    q->sym = !zp;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "meta");
    const cJSON *qz = cJSON_GetObjectItemCaseSensitive(meta, "quantizer");
    if (cJSON_IsString(qz))
        snprintf(q->quantizer, sizeof q->quantizer, "%s", qz->valuestring);
    const cJSON *nc =
        cJSON_GetObjectItemCaseSensitive(root, "modules_to_not_convert");
    if (nc && !cJSON_IsNull(nc)) {
        if (!cJSON_IsArray(nc))
            return lb_set_error(LB_ERR_FORMAT, "%s: modules_to_not_convert "
                                "is not a list", label);
        cJSON *dyn = cJSON_CreateObject();
        const cJSON *e;
        cJSON_ArrayForEach(e, nc) {
            if (!cJSON_IsString(e)) {
                cJSON_Delete(dyn);
                return lb_set_error(LB_ERR_FORMAT, "%s: modules_to_not_convert "
                                    "has a non-string entry", label);
            }
            /* literal substring, anchored like re.match: -:.*\Q...\E */
            char key[600];
            snprintf(key, sizeof key, "-:.*\\Q%s\\E", e->valuestring);
            if (strstr(e->valuestring, "\\E")) {
                cJSON_Delete(dyn);
                return lb_set_error(LB_ERR_FORMAT, "%s: modules_to_not_convert "
                                    "entry \"%s\"", label, e->valuestring);
            }
            if (!cJSON_GetObjectItemCaseSensitive(dyn, key))
                cJSON_AddItemToObject(dyn, key, cJSON_CreateObject());
        }
        lb_status s = parse_dynamic(dyn, label, q);
        cJSON_Delete(dyn);
        return s;
    }
    return LB_OK;
}

/* meta.rotation.online[i]: {"module": "mlp.down_proj", "apply": "input",
 * "kind": "hadamard", "order": ff, "m": M, "construction": C, "paley_q": Q} */
static lb_status parse_online(const cJSON *e, int i, const char *label,
                              lb_gptq_qconfig *q) {
    if (!cJSON_IsObject(e))
        return lb_set_error(LB_ERR_FORMAT, "%s: meta.rotation.online[%d] is "
                            "not an object", label, i);
    const cJSON *mod = cJSON_GetObjectItemCaseSensitive(e, "module");
    if (!cJSON_IsString(mod) || strcmp(mod->valuestring, "mlp.down_proj"))
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: meta.rotation.online[%d]"
                            ".module %s%s%s is not a known online transform "
                            "(mlp.down_proj)", label, i,
                            cJSON_IsString(mod) ? "'" : "",
                            cJSON_IsString(mod) ? mod->valuestring : "(missing)",
                            cJSON_IsString(mod) ? "'" : "");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(e, "apply");
    if (!cJSON_IsString(ap) || strcmp(ap->valuestring, "input"))
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: meta.rotation.online[%d]"
                            ".apply is not \"input\"", label, i);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(e, "kind");
    if (!cJSON_IsString(k) || strcmp(k->valuestring, "hadamard"))
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: meta.rotation.online[%d]"
                            ".kind %s%s%s is not a known rotation (hadamard)",
                            label, i, cJSON_IsString(k) ? "'" : "",
                            cJSON_IsString(k) ? k->valuestring : "(missing)",
                            cJSON_IsString(k) ? "'" : "");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(e, "order");
    const double ov = cJSON_IsNumber(o) ? o->valuedouble : -1.0;
    int m = 0;
    if (!(ov >= 1.0 && ov <= (double)(1 << 24)) || ov != floor(ov) ||
        !lb_hadamard_supported((int64_t)ov, &m))
        return lb_set_error(LB_ERR_FORMAT, "%s: meta.rotation.online[%d]"
                            ".order is not a supported Hadamard order (m * "
                            "2^k, lowbit/hadamard.h)", label, i);
    lb_hadamard h;
    lb_status s = lb_hadamard_init(&h, (int64_t)ov);
    if (s != LB_OK) return s;
    const char *con = h.m == 1 ? "sylvester" : h.paley_kind == 1 ? "paley1"
                                                                : "paley2";
    const int pq = h.paley_q;
    lb_hadamard_free(&h);
    const cJSON *mm = cJSON_GetObjectItemCaseSensitive(e, "m");
    if (!cJSON_IsNumber(mm) || mm->valuedouble != (double)m)
        return lb_set_error(LB_ERR_FORMAT, "%s: meta.rotation.online[%d].m is "
                            "not %d (the factor lowbit/hadamard.h chooses for "
                            "order %lld)", label, i, m, (long long)ov);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "construction");
    if (!cJSON_IsString(c) || strcmp(c->valuestring, con))
        return lb_set_error(LB_ERR_FORMAT, "%s: meta.rotation.online[%d]"
                            ".construction is not \"%s\"", label, i, con);
    const cJSON *pqj = cJSON_GetObjectItemCaseSensitive(e, "paley_q");
    if (!cJSON_IsNumber(pqj) || pqj->valuedouble != (double)pq)
        return lb_set_error(LB_ERR_FORMAT, "%s: meta.rotation.online[%d]"
                            ".paley_q is not %d", label, i, pq);
    q->rotation_online_down_order = (int64_t)ov;
    return LB_OK;
}

/* meta.rotation: {"kind": "hadamard", "order": N, "seed": S, "online": [..]} */
static lb_status parse_rotation(const cJSON *meta, const char *label,
                                lb_gptq_qconfig *q) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(meta, "rotation");
    if (!r || cJSON_IsNull(r)) return LB_OK;
    if (!cJSON_IsObject(r))
        return lb_set_error(LB_ERR_FORMAT, "%s: meta.rotation is not an "
                            "object", label);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(r, "kind");
    if (!cJSON_IsString(k) || strcmp(k->valuestring, "hadamard"))
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: meta.rotation.kind %s%s%s "
                            "is not a known rotation (hadamard)", label,
                            cJSON_IsString(k) ? "'" : "",
                            cJSON_IsString(k) ? k->valuestring : "(missing)",
                            cJSON_IsString(k) ? "'" : "");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(r, "order");
    const double ov = cJSON_IsNumber(o) ? o->valuedouble : -1.0;
    if (!(ov >= 2.0 && ov <= (double)(1 << 24)) || ov != floor(ov) ||
        !lb_hadamard_supported((int64_t)ov, NULL))
        return lb_set_error(LB_ERR_FORMAT, "%s: meta.rotation.order is not a "
                            "Hadamard order lowbit builds (a power of two, "
                            "or m * 2^k with a Paley m; lowbit/hadamard.h) "
                            "in [2, 2^24]", label);
    /* the seed: a decimal uint64 string (rebuilds Q's signs) */
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(r, "seed");
    const char *sv = cJSON_IsString(sd) ? sd->valuestring : NULL;
    uint64_t seed = 0;
    bool seed_ok = sv && *sv && strlen(sv) <= 20;
    for (const char *c = sv; seed_ok && *c; c++) {
        if (*c < '0' || *c > '9' ||
            seed > (UINT64_MAX - (uint64_t)(*c - '0')) / 10) {
            seed_ok = false;
            break;
        }
        seed = seed * 10 + (uint64_t)(*c - '0');
    }
    if (!seed_ok)
        return lb_set_error(LB_ERR_FORMAT, "%s: meta.rotation.seed is not a "
                            "decimal unsigned 64-bit integer string", label);
    const cJSON *on = cJSON_GetObjectItemCaseSensitive(r, "online");
    if (on && !cJSON_IsArray(on))
        return lb_set_error(LB_ERR_FORMAT, "%s: meta.rotation.online is not "
                            "a list", label);
    const int n_on = cJSON_GetArraySize(on);
    if (n_on > 1)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: meta.rotation.online "
                            "lists %d transforms (lowbit applies one: "
                            "mlp.down_proj's input)", label, n_on);
    if (n_on == 1) {
        lb_status s = parse_online(cJSON_GetArrayItem(on, 0), 0, label, q);
        if (s != LB_OK) return s;
    }
    q->rotation_order = (int64_t)ov;
    q->rotation_seed = seed;
    return LB_OK;
}

lb_status lb_gptq_qconfig_parse(const char *json, size_t len,
                                const char *label, lb_gptq_qconfig *q) {
    memset(q, 0, sizeof *q);
    if (!label) label = "quantization_config";
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return lb_set_error(LB_ERR_FORMAT, "%s: not a JSON object", label);
    }
    lb_status s = LB_OK;
    bool pr;
    q->sym = true;
    q->true_sequential = true;
    q->format = LB_GPTQ_FORMAT_V1;
    const cJSON *qm = cJSON_GetObjectItemCaseSensitive(root, "quant_method");
    if (cJSON_IsString(qm) && !strcmp(qm->valuestring, "awq")) {
        s = parse_awq(root, label, q);
        goto done;
    }
    if (qm && !cJSON_IsNull(qm) &&
        (!cJSON_IsString(qm) || strcmp(qm->valuestring, "gptq") != 0)) {
        s = lb_set_error(LB_ERR_UNSUPPORTED,
                         "%s: quant_method \"%s\" (lowbit reads GPTQ "
                         "checkpoints)",
                         label, cJSON_IsString(qm) ? qm->valuestring : "?");
        goto done;
    }
    q->bits = 0;
    if ((s = get_int(root, "bits", 1, 64, &q->bits, &pr, label)) != LB_OK)
        goto done;
    if (!pr) {
        s = lb_set_error(LB_ERR_FORMAT, "%s: \"bits\" missing", label);
        goto done;
    }
    if ((s = get_int(root, "group_size", -1, 1 << 30, &q->group_size, &pr,
                     label)) != LB_OK)
        goto done;
    if (!pr) {
        s = lb_set_error(LB_ERR_FORMAT, "%s: \"group_size\" missing", label);
        goto done;
    }
    if ((s = check_bits_gs(q->bits, q->group_size, label, "")) != LB_OK)
        goto done;
    if ((s = get_bool(root, "desc_act", &q->desc_act, label)) != LB_OK ||
        (s = get_bool(root, "sym", &q->sym, label)) != LB_OK ||
        (s = get_bool(root, "static_groups", &q->static_groups, label)) !=
            LB_OK ||
        (s = get_bool(root, "true_sequential", &q->true_sequential, label)) !=
            LB_OK ||
        (s = get_bool(root, "lm_head", &q->lm_head, label)) != LB_OK)
        goto done;
    const cJSON *dp = cJSON_GetObjectItemCaseSensitive(root, "damp_percent");
    if (cJSON_IsNumber(dp)) q->damp_percent = dp->valuedouble;
    /* checkpoint_format (AutoGPTQ 0.8 / GPTQModel < 2) or format */
    const cJSON *cf = cJSON_GetObjectItemCaseSensitive(root,
                                                       "checkpoint_format");
    if (!cf || cJSON_IsNull(cf))
        cf = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (cf && !cJSON_IsNull(cf)) {
        if (!cJSON_IsString(cf)) {
            s = lb_set_error(LB_ERR_FORMAT, "%s: checkpoint_format is not a "
                             "string", label);
            goto done;
        }
        if (!strcmp(cf->valuestring, "gptq"))
            q->format = LB_GPTQ_FORMAT_V1;
        else if (!strcmp(cf->valuestring, "gptq_v2"))
            q->format = LB_GPTQ_FORMAT_V2;
        else {
            s = lb_set_error(LB_ERR_UNSUPPORTED,
                             "%s: checkpoint_format \"%s\" (lowbit reads "
                             "\"gptq\" and \"gptq_v2\")",
                             label, cf->valuestring);
            goto done;
        }
    }
    bool marlin = false;
    if ((s = get_bool(root, "is_marlin_format", &marlin, label)) != LB_OK)
        goto done;
    if (marlin) {
        s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: Marlin-format GPTQ "
                         "checkpoints are not supported", label);
        goto done;
    }
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "meta");
    const cJSON *qz = cJSON_GetObjectItemCaseSensitive(meta, "quantizer");
    if (cJSON_IsArray(qz)) qz = cJSON_GetArrayItem(qz, 0);
    if (cJSON_IsString(qz))
        snprintf(q->quantizer, sizeof q->quantizer, "%s", qz->valuestring);
    if ((s = parse_rotation(meta, label, q)) != LB_OK) goto done;
    const cJSON *dyn = cJSON_GetObjectItemCaseSensitive(root, "dynamic");
    if (dyn && !cJSON_IsNull(dyn)) s = parse_dynamic(dyn, label, q);
done:
    cJSON_Delete(root);
    if (s != LB_OK) lb_gptq_qconfig_clear(q);
    return s;
}

lb_gptq_module_cfg lb_gptq_qconfig_module(const lb_gptq_qconfig *q,
                                          const char *name) {
    lb_gptq_module_cfg c = {true, q->bits, q->group_size, q->sym,
                            q->desc_act};
    for (int i = 0; i < q->n_dynamic; i++) {
        const lb_gptq_dynamic_rule *r = &q->dynamic[i];
        pcre2_match_data *md =
            pcre2_match_data_create_from_pattern((pcre2_code *)r->code, NULL);
        if (!md) continue;
        int rc = pcre2_match((pcre2_code *)r->code, (PCRE2_SPTR)name,
                             PCRE2_ZERO_TERMINATED, 0, 0, md, NULL);
        pcre2_match_data_free(md);
        if (rc < 0) continue;
        if (r->negative) {
            c.quantized = false;
            return c;
        }
        if (r->bits) c.bits = r->bits;
        if (r->group_size) c.group_size = r->group_size;
        if (r->sym >= 0) c.sym = r->sym;
        if (r->desc_act >= 0) c.desc_act = r->desc_act;
        return c;
    }
    return c;
}

/* ------------------------------------------------------------------------ */
/* Linear                                                                    */
/* ------------------------------------------------------------------------ */

static inline uint32_t rd32(const void *base, int64_t i) {
    return lb_rd_u32((const uint8_t *)base + (size_t)i * 4);
}

/* Field j (b bits) of the sequence packed in the words base[k * ws]. */
static inline uint32_t field(const void *base, int64_t ws, int64_t j,
                             int bits) {
    const int64_t bit = j * bits, k = bit >> 5;
    const int sh = (int)(bit & 31);
    uint64_t v = rd32(base, k * ws);
    if (sh + bits > 32) v |= (uint64_t)rd32(base, (k + 1) * ws) << 32;
    return (uint32_t)(v >> sh) & ((1u << bits) - 1u);
}

int32_t lb_gptq_linear_code(const lb_gptq_linear *l, int64_t o, int64_t c) {
    /* AWQ: row c of qweight packs codes[0..out, c] across the row */
    if (l->format == LB_GPTQ_FORMAT_AWQ)
        return lb_awq_field(l->qweight, l->out_features, c, o);
    /* column o of qweight packs codes[o, 0..in) down the rows */
    return (int32_t)field((const uint8_t *)l->qweight + (size_t)o * 4,
                          l->out_features, c, l->bits);
}

int32_t lb_gptq_linear_zero(const lb_gptq_linear *l, int64_t g, int64_t o) {
    if (l->format == LB_GPTQ_FORMAT_AWQ)
        return lb_awq_field(l->qzeros, l->out_features, g, o);
    const int64_t cols = l->qzeros_cols > 0 ? l->qzeros_cols : l->out_features / 32 * l->bits;
    int32_t f = (int32_t)field((const uint8_t *)l->qzeros +
                                   (size_t)(g * cols) * 4,
                               1, o, l->bits);
    return l->format == LB_GPTQ_FORMAT_V1 ? f + 1 : f;
}

float lb_gptq_linear_scale(const lb_gptq_linear *l, int64_t g, int64_t o) {
    const size_t i = (size_t)(g * l->out_features + o);
    const uint8_t *p = l->scales;
    switch (l->scales_type) {
    case LB_TYPE_F16: return lb_f16_to_f32_inline(lb_rd_u16(p + 2 * i));
    case LB_TYPE_BF16: return lb_bf16_to_f32_inline(lb_rd_u16(p + 2 * i));
    default: return lb_fp32_from_bits(lb_rd_u32(p + 4 * i));
    }
}

int32_t lb_gptq_linear_group(const lb_gptq_linear *l, int64_t c) {
    if (l->g_idx) return (int32_t)rd32(l->g_idx, c);
    return l->group_size > 0 ? (int32_t)(c / l->group_size) : 0;
}

lb_status lb_gptq_linear_check(const lb_gptq_linear *l, const char *name) {
    if (!name) name = "gptq linear";
    if (!l || !l->qweight || !l->qzeros || !l->scales)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: missing tensors", name);
    if (l->bits != 2 && l->bits != 3 && l->bits != 4 && l->bits != 8)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: %d-bit codes (lowbit "
                            "reads 2, 3, 4, 8)", name, l->bits);
    if (l->in_features < 32 || l->in_features % 32 || l->out_features < 1 ||
        (l->out_features % 32 && l->qzeros_cols <= 0) ||
        l->in_features > INT32_MAX || l->out_features > INT32_MAX)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: [%lld, %lld] is not a GPTQ shape (in_features "
                            "must be a multiple of 32; out_features too unless "
                            "the qzeros width is given)",
                            name, (long long)l->out_features,
                            (long long)l->in_features);
    if (l->qzeros_cols > 0 &&
        (l->qzeros_cols > INT32_MAX || l->qzeros_cols * 32 < l->out_features * l->bits))
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: qzeros rows of %lld words cannot hold %lld "
                            "%d-bit zero points",
                            name, (long long)l->qzeros_cols,
                            (long long)l->out_features, l->bits);
    if (l->n_groups < 1 || l->n_groups > l->in_features)
        return lb_set_error(LB_ERR_FORMAT, "%s: %lld groups for %lld input "
                            "columns", name, (long long)l->n_groups,
                            (long long)l->in_features);
    if (l->scales_type != LB_TYPE_F16 && l->scales_type != LB_TYPE_F32 &&
        l->scales_type != LB_TYPE_BF16)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: scales of type %s", name,
                            lb_type_name(l->scales_type));
    if (l->format != LB_GPTQ_FORMAT_V1 && l->format != LB_GPTQ_FORMAT_V2 &&
        l->format != LB_GPTQ_FORMAT_AWQ)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: bad zero format %d",
                            name, (int)l->format);
    if (l->format == LB_GPTQ_FORMAT_AWQ && (l->bits != 4 || l->g_idx))
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: the AWQ GEMM layout holds 4-bit codes "
                            "without g_idx (got %d-bit%s)",
                            name, l->bits, l->g_idx ? " with g_idx" : "");
    if (!l->g_idx) {
        int64_t want = l->group_size > 0
                           ? (l->in_features + l->group_size - 1) /
                                 l->group_size
                           : 1;
        if (l->group_size == 0 || l->group_size < -1 || want != l->n_groups)
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: no g_idx, and %lld groups do not match "
                                "group_size %d",
                                name, (long long)l->n_groups, l->group_size);
    } else {
        for (int64_t c = 0; c < l->in_features; c++) {
            int32_t g = (int32_t)rd32(l->g_idx, c);
            if (g < 0 || g >= l->n_groups)
                return lb_set_error(LB_ERR_FORMAT,
                                    "%s.g_idx[%lld] = %d outside [0, %lld)",
                                    name, (long long)c, g,
                                    (long long)l->n_groups);
        }
    }
    for (int64_t g = 0; g < l->n_groups; g++)
        for (int64_t o = 0; o < l->out_features; o++) {
            float s = lb_gptq_linear_scale(l, g, o);
            if (!isfinite(s))
                return lb_set_error(LB_ERR_FORMAT,
                                    "%s.scales[%lld, %lld] = %g is not "
                                    "finite",
                                    name, (long long)g, (long long)o,
                                    (double)s);
        }
    return LB_OK;
}

int lb_gptq_linear_sanitize(lb_gptq_linear *l, const char *name, bool sym, bool desc_act) {
    if (!name) name = "gptq linear";
    int n = 0;
    const int32_t half = 1 << (l->bits - 1);
    if (l->format == LB_GPTQ_FORMAT_V1 && sym) {
        /* lb_gptq_linear_zero adds 1 for v1: all fields == half means all
         * zeros == half + 1 */
        bool all_half = true;
        for (int64_t g = 0; g < l->n_groups && all_half; g++)
            for (int64_t o = 0; o < l->out_features && all_half; o++)
                all_half = lb_gptq_linear_zero(l, g, o) == half + 1;
        if (all_half) {
            l->format = LB_GPTQ_FORMAT_V2;
            lb_log(LB_LOG_WARN, "%s.qzeros: checkpoint_format \"gptq\" (v1) but every "
                   "stored zero point is %d, the raw symmetric zero (v1 stores %d): read as "
                   "gptq_v2, as GPTQModel does; as v1 every weight would shift by one scale "
                   "step", name, half, half - 1);
            n++;
        }
    }
    if (l->g_idx && l->n_groups > 1) {
        int32_t g0 = lb_gptq_linear_group(l, 0);
        bool single = true;
        for (int64_t c = 1; c < l->in_features && single; c++)
            single = lb_gptq_linear_group(l, c) == g0;
        if (single) {
            const int64_t want = l->group_size > 0
                                     ? (l->in_features + l->group_size - 1) / l->group_size
                                     : 0;
            if (!desc_act && want == l->n_groups) {
                l->g_idx = NULL;
                lb_log(LB_LOG_WARN, "%s.g_idx: every input column points at group %d of "
                       "%lld: ignored (desc_act is false: groups are column / %d, as vLLM "
                       "reads them)", name, g0, (long long)l->n_groups, l->group_size);
            } else {
                lb_log(LB_LOG_WARN, "%s.g_idx: every input column points at group %d of "
                       "%lld (the other groups' scales are unused): kept as stored, the "
                       "checkpoint is probably broken", name, g0, (long long)l->n_groups);
            }
            n++;
        }
    }
    return n;
}

/* Codes of row o into codes[0..in). */
static void row_codes(const lb_gptq_linear *l, int64_t o, int32_t *codes) {
    const uint8_t *col = (const uint8_t *)l->qweight + (size_t)o * 4;
    const int64_t in = l->in_features, out = l->out_features;
    if (l->format == LB_GPTQ_FORMAT_AWQ) {
        for (int64_t c = 0; c < in; c++)
            codes[c] = lb_awq_field(l->qweight, out, c, o);
    } else if (l->bits == 4 || l->bits == 8 || l->bits == 2) {
        const int per = 32 / l->bits;
        const uint32_t mask = (1u << l->bits) - 1u;
        for (int64_t r = 0; r < in / per; r++) {
            uint32_t w = lb_rd_u32(col + (size_t)(r * out) * 4);
            for (int j = 0; j < per; j++)
                codes[r * per + j] = (int32_t)((w >> (j * l->bits)) & mask);
        }
    } else {
        for (int64_t c = 0; c < in; c++)
            codes[c] = (int32_t)field(col, out, c, l->bits);
    }
}

lb_status lb_gptq_linear_dequantize(const lb_gptq_linear *l, float *W) {
    if (!l || !W)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "lb_gptq_linear_dequantize: NULL");
    const int64_t in = l->in_features, out = l->out_features;
    int32_t *codes = malloc((size_t)in * sizeof *codes);
    int32_t *grp = malloc((size_t)in * sizeof *grp);
    if (!codes || !grp) {
        free(codes);
        free(grp);
        return lb_set_error(LB_ERR_NOMEM, "gptq: out of memory");
    }
    for (int64_t c = 0; c < in; c++) grp[c] = lb_gptq_linear_group(l, c);
    for (int64_t o = 0; o < out; o++) {
        row_codes(l, o, codes);
        float *w = W + o * in;
        for (int64_t c = 0; c < in; c++) {
            int64_t g = grp[c];
            w[c] = lb_gptq_linear_scale(l, g, o) *
                   (float)(codes[c] - lb_gptq_linear_zero(l, g, o));
        }
    }
    free(codes);
    free(grp);
    return LB_OK;
}

/* Every aligned 32-column block lies in one group: the group of block b is
 * blk_group[b]. Returns false otherwise. */
static bool block_groups(const lb_gptq_linear *l, int32_t *blk_group) {
    for (int64_t b = 0; b < l->in_features / 32; b++) {
        int32_t g = lb_gptq_linear_group(l, b * 32);
        for (int j = 1; j < 32; j++)
            if (lb_gptq_linear_group(l, b * 32 + j) != g) return false;
        blk_group[b] = g;
    }
    return true;
}

/* All zeros equal `z` and all scales exactly f16 (for the groups used). */
static bool zeros_scales_exact(const lb_gptq_linear *l, const int32_t *bg,
                               int32_t z) {
    const int64_t nb = l->in_features / 32;
    uint8_t *used = calloc((size_t)l->n_groups, 1);
    if (!used) return false;
    for (int64_t b = 0; b < nb; b++) used[bg[b]] = 1;
    bool ok = true;
    for (int64_t g = 0; g < l->n_groups && ok; g++) {
        if (!used[g]) continue;
        for (int64_t o = 0; o < l->out_features && ok; o++) {
            if (lb_gptq_linear_zero(l, g, o) != z) ok = false;
            float s = lb_gptq_linear_scale(l, g, o);
            if (l->scales_type != LB_TYPE_F16 &&
                lb_f16_to_f32(lb_f32_to_f16(s)) != s)
                ok = false;
        }
    }
    free(used);
    return ok;
}

int lb_gptq_linear_exact_type(const lb_gptq_linear *l) {
    if (l->bits != 4 && l->bits != 8) return -1;
    int32_t *bg = malloc((size_t)(l->in_features / 32) * sizeof *bg);
    if (!bg) return -1;
    int t = -1;
    if (block_groups(l, bg) &&
        zeros_scales_exact(l, bg, l->bits == 4 ? 8 : 128))
        t = l->bits == 4 ? LB_TYPE_Q4_0 : LB_TYPE_Q8_0;
    free(bg);
    return t;
}

static uint16_t scale_f16_bits(const lb_gptq_linear *l, int64_t g,
                               int64_t o) {
    if (l->scales_type == LB_TYPE_F16)
        return lb_rd_u16((const uint8_t *)l->scales +
                         2 * (size_t)(g * l->out_features + o));
    return lb_f32_to_f16(lb_gptq_linear_scale(l, g, o));
}

lb_status lb_gptq_linear_repack(const lb_gptq_linear *l, lb_type type,
                                void *dst, size_t dst_size) {
    static const char *who = "lb_gptq_linear_repack";
    if (!l || !dst) return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL", who);
    const int64_t in = l->in_features, out = l->out_features, nb = in / 32;
    size_t rb, need;
    if (!lb_row_size(type, in, &rb) || !lb_mul_ok(rb, (size_t)out, &need))
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: type %s for rows of %lld",
                            who, lb_type_name(type), (long long)in);
    if (dst_size < need)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: %zu bytes, need %zu", who,
                            dst_size, need);
    if (type == LB_TYPE_F32) return lb_gptq_linear_dequantize(l, dst);
    if (type == LB_TYPE_F16) {
        float *row = malloc((size_t)in * sizeof(float));
        int32_t *codes = malloc((size_t)in * sizeof *codes);
        if (!row || !codes) {
            free(row);
            free(codes);
            return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", who);
        }
        for (int64_t o = 0; o < out; o++) {
            row_codes(l, o, codes);
            for (int64_t c = 0; c < in; c++) {
                int64_t g = lb_gptq_linear_group(l, c);
                row[c] = lb_gptq_linear_scale(l, g, o) *
                         (float)(codes[c] - lb_gptq_linear_zero(l, g, o));
            }
            lb_f32_to_f16_row(row, (uint16_t *)dst + o * in, (size_t)in);
        }
        free(codes);
        free(row);
        return LB_OK;
    }
    if (type != LB_TYPE_Q4_0 && type != LB_TYPE_Q8_0 && type != LB_TYPE_Q4_1)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: no GPTQ repack into %s (Q4_0, Q4_1, Q8_0, "
                            "F32, F16)",
                            who, lb_type_name(type));
    if ((type == LB_TYPE_Q8_0) != (l->bits == 8) ||
        (type != LB_TYPE_Q8_0 && l->bits != 4))
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: %d-bit codes cannot go "
                            "into %s", who, l->bits, lb_type_name(type));
    int32_t *bg = malloc((size_t)nb * sizeof *bg);
    int32_t *codes = malloc((size_t)in * sizeof *codes);
    lb_status s = LB_OK;
    if (!bg || !codes) {
        s = lb_set_error(LB_ERR_NOMEM, "%s: out of memory", who);
        goto done;
    }
    if (!block_groups(l, bg)) {
        s = lb_set_error(LB_ERR_UNSUPPORTED,
                         "%s: a 32-column block spans two groups (g_idx)",
                         who);
        goto done;
    }
    if (type != LB_TYPE_Q4_1 &&
        !zeros_scales_exact(l, bg, type == LB_TYPE_Q4_0 ? 8 : 128)) {
        s = lb_set_error(LB_ERR_UNSUPPORTED,
                         "%s: zeros other than %d or scales not exact in "
                         "f16: %s would change the weights",
                         who, type == LB_TYPE_Q4_0 ? 8 : 128,
                         lb_type_name(type));
        goto done;
    }
    for (int64_t o = 0; o < out; o++) {
        row_codes(l, o, codes);
        uint8_t *rowp = (uint8_t *)dst + (size_t)o * rb;
        for (int64_t b = 0; b < nb; b++) {
            const int64_t g = bg[b];
            const int32_t *q = codes + b * 32;
            if (type == LB_TYPE_Q4_0) {
                lb_block_q4_0 *y = (lb_block_q4_0 *)rowp + b;
                y->d = scale_f16_bits(l, g, o);
                for (int j = 0; j < 16; j++)
                    y->qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
            } else if (type == LB_TYPE_Q8_0) {
                lb_block_q8_0 *y = (lb_block_q8_0 *)rowp + b;
                y->d = scale_f16_bits(l, g, o);
                for (int j = 0; j < 32; j++) y->qs[j] = (int8_t)(q[j] - 128);
            } else {
                lb_block_q4_1 *y = (lb_block_q4_1 *)rowp + b;
                y->d = scale_f16_bits(l, g, o);
                y->m = lb_f32_to_f16(-(lb_f16_to_f32(y->d) *
                                       (float)lb_gptq_linear_zero(l, g, o)));
                for (int j = 0; j < 16; j++)
                    y->qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
            }
        }
    }
done:
    free(bg);
    free(codes);
    return s;
}
