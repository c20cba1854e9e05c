/*
 * Module rules for mixed precision ("REGEX" / "REGEX=SPEC", first match
 * wins; see lowbit/quantize.h) and the module plan.
 */
#include "quant/quantize_internal.h"
#include "core/internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>

void qz_rules_free(qz_rule *r, int n) {
    if (!r) return;
    for (int i = 0; i < n; i++) {
        free(r[i].text);
        free(r[i].pattern);
        pcre2_code_free((pcre2_code *)r[i].code);
    }
    free(r);
}

static lb_status bad_rule(const char *rule, const char *why) {
    return lb_set_error(LB_ERR_INVALID_ARG, "module rule '%s': %s", rule, why);
}

/* SPEC items separated by ':' (or ','). */
static lb_status parse_spec(const char *rule, const char *spec, qz_rule *r) {
    if (!strcmp(spec, "skip")) {
        r->skip = true;
        return LB_OK;
    }
    if (!*spec) return bad_rule(rule, "empty specification after '='");
    char buf[128];
    if (strlen(spec) >= sizeof buf) return bad_rule(rule, "specification too long");
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *it = strtok_r(buf, ":,", &save); it;
         it = strtok_r(NULL, ":,", &save)) {
        char *end;
        if (!strcmp(it, "sym"))
            r->sym = 1;
        else if (!strcmp(it, "asym"))
            r->sym = 0;
        else if (!strcmp(it, "act") || !strcmp(it, "desc_act"))
            r->desc_act = 1;
        else if (!strcmp(it, "noact"))
            r->desc_act = 0;
        else if (it[0] == 'g') {
            long g = strtol(it + 1, &end, 10);
            if (end == it + 1 || *end || g == 0 || g < -1 || g > (1 << 24))
                return bad_rule(rule, "group size must be gN (N >= 1) or g-1");
            r->group_size = (int)g;
        } else {
            long b = strtol(it, &end, 10);
            if (end == it || *end || (b != 2 && b != 3 && b != 4 && b != 8))
                return bad_rule(rule, "expected skip, 2|3|4|8, gN, g-1, sym, "
                                      "asym, act or noact");
            r->bits = (int)b;
        }
    }
    return LB_OK;
}

lb_status qz_rules_parse(const char *const *rules, int n, qz_rule **out) {
    *out = NULL;
    if (n <= 0) return LB_OK;
    if (!rules)
        return lb_set_error(LB_ERR_INVALID_ARG, "module rules: NULL list");
    qz_rule *r = calloc((size_t)n, sizeof *r);
    if (!r) return lb_set_error(LB_ERR_NOMEM, "module rules: out of memory");
    lb_status s = LB_OK;
    int i;
    for (i = 0; i < n && s == LB_OK; i++) {
        const char *rule = rules[i];
        if (!rule || !*rule) {
            s = lb_set_error(LB_ERR_INVALID_ARG, "module rule %d is empty", i);
            break;
        }
        r[i].sym = r[i].desc_act = -1;
        r[i].text = lb_strdup(rule);
        /* the specification follows the LAST '=' (regexes rarely hold one;
         * "(?=...)" lookaheads do, so only a tail without ')' counts) */
        const char *eq = strrchr(rule, '=');
        if (eq && strchr(eq, ')')) eq = NULL;
        size_t plen = eq ? (size_t)(eq - rule) : strlen(rule);
        r[i].pattern = malloc(plen + 1);
        if (!r[i].text || !r[i].pattern) {
            s = lb_set_error(LB_ERR_NOMEM, "module rules: out of memory");
            break;
        }
        memcpy(r[i].pattern, rule, plen);
        r[i].pattern[plen] = '\0';
        if (!plen) {
            s = bad_rule(rule, "empty regular expression");
            break;
        }
        if (eq && (s = parse_spec(rule, eq + 1, &r[i])) != LB_OK) break;
        int ec;
        PCRE2_SIZE eo;
        r[i].code = pcre2_compile((PCRE2_SPTR)r[i].pattern,
                                  PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo,
                                  NULL);
        if (!r[i].code) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof msg);
            s = lb_set_error(LB_ERR_INVALID_ARG,
                             "module rule '%s': %s at offset %zu", rule,
                             (const char *)msg, (size_t)eo);
        }
    }
    if (s != LB_OK) {
        qz_rules_free(r, n);
        return s;
    }
    *out = r;
    return LB_OK;
}

int qz_rules_match(const qz_rule *r, int n, const char *name) {
    for (int i = 0; i < n; i++) {
        pcre2_match_data *md =
            pcre2_match_data_create_from_pattern((pcre2_code *)r[i].code, NULL);
        if (!md) continue;
        int rc = pcre2_match((pcre2_code *)r[i].code, (PCRE2_SPTR)name,
                             PCRE2_ZERO_TERMINATED, 0, 0, md, NULL);
        pcre2_match_data_free(md);
        if (rc >= 0) return i;
    }
    return -1;
}

static void plan_one(qz_module *q, const lb_quantize_params *p,
                     const qz_rule *rules, int n_rules) {
    q->quantize = true;
    q->bits = p->bits;
    q->group_size = p->group_size;
    q->sym = p->sym;
    q->desc_act = p->desc_act;
    int k = qz_rules_match(rules, n_rules, q->name);
    if (k >= 0) {
        const qz_rule *r = &rules[k];
        if (r->skip) {
            q->quantize = false;
            snprintf(q->note, sizeof q->note, "skipped by rule '%s'", r->text);
            return;
        }
        if (r->bits) q->bits = r->bits;
        if (r->group_size) q->group_size = r->group_size;
        if (r->sym >= 0) q->sym = r->sym;
        if (r->desc_act >= 0) q->desc_act = r->desc_act;
    }
    if (p->fp8) return; /* the FP8 grid: no packing, its own scale groups */
    if (q->in % 32 || q->out % 32) {
        q->quantize = false;
        snprintf(q->note, sizeof q->note,
                 "[%lld, %lld]: GPTQ packing needs multiples of 32",
                 (long long)q->out, (long long)q->in);
    } else if (q->group_size > 0 && q->in % q->group_size) {
        /* AutoGPTQ's layout: ceil(in / group_size) groups, the last one
         * shorter (vLLM, Marlin and ExLlama kernels refuse this) */
        snprintf(q->note, sizeof q->note,
                 "in_features %lld is not a multiple of group_size %d: the "
                 "last group has %lld columns",
                 (long long)q->in, q->group_size,
                 (long long)(q->in % q->group_size));
    }
}

/* One module of layer l: name model.layers.L.SUFFIX, shape from the
 * first of its tensors' rows summed over its parts. */
static void plan_add(qz_module *q, const lb_model *m, int l, int which,
                     const char *suffix, const lb_quantize_params *p,
                     const qz_rule *rules, int n_rules) {
    snprintf(q->name, sizeof q->name, "model.layers.%d.%s", l, suffix);
    q->layer = l;
    q->which = which;
    lb_tensor *parts[3];
    const int np = qz_module_parts((lb_model *)m, q, parts);
    q->out = 0;
    for (int i = 0; i < np; i++) q->out += parts[i]->shape[0];
    q->in = parts[0]->shape[1];
    plan_one(q, p, rules, n_rules);
}

/* Modules of layer l (written to q when non-NULL); returns the count. */
static int plan_layer(const lb_model *m, int l, qz_module *q,
                      const lb_quantize_params *p, const qz_rule *rules,
                      int n_rules) {
    const lb_model_config *c = &m->config;
    int k = 0;
#define ADD(which, ...)                                                     \
    do {                                                                    \
        if (q) {                                                            \
            char sfx[128];                                                  \
            snprintf(sfx, sizeof sfx, __VA_ARGS__);                         \
            plan_add(&q[k], m, l, (which), sfx, p, rules, n_rules);         \
        }                                                                   \
        k++;                                                                \
    } while (0)
    if (c->arch == LB_ARCH_PHI3) {
        ADD(QZ_QKV, "self_attn.qkv_proj");
        ADD(LB_LINEAR_O, "self_attn.o_proj");
        ADD(QZ_GATE_UP, "mlp.gate_up_proj");
        ADD(LB_LINEAR_DOWN, "mlp.down_proj");
        return k;
    }
    const bool moe = c->n_experts > 0 && lb_model_config_layer_moe(c, l) &&
                     m->layers[l].exp;
    const int nd = moe ? LB_LINEAR_O + 1 : LB_LINEAR_COUNT;
    for (int i = 0; i < nd; i++)
        ADD(i, "%s", lb_linear_name((lb_linear_id)i));
    if (!moe) return k;
    const bool mix = c->arch == LB_ARCH_MIXTRAL;
    static const char *qn[3] = {"gate_proj", "up_proj", "down_proj"};
    static const char *mn[3] = {"w1", "w3", "w2"};
    for (int e = 0; e < c->n_experts; e++)
        for (int j = 0; j < 3; j++)
            ADD(QZ_EXP + 3 * e + j, "%s.experts.%d.%s",
                mix ? "block_sparse_moe" : "mlp", e, mix ? mn[j] : qn[j]);
    if (c->shared_ff > 0 && m->layers[l].shexp[0].data)
        for (int j = 0; j < 3; j++)
            ADD(QZ_SHEXP + j, "mlp.shared_expert.%s", qn[j]);
#undef ADD
    return k;
}

lb_status qz_plan(const lb_model *m, const lb_quantize_params *p,
                  const qz_rule *rules, int n_rules, qz_module **mods,
                  int *n_mods) {
    const int L = m->config.n_layers;
    int n = p->lm_head ? 1 : 0;
    for (int l = 0; l < L; l++) n += plan_layer(m, l, NULL, p, rules, n_rules);
    qz_module *q = calloc((size_t)n, sizeof *q);
    if (!q) return lb_set_error(LB_ERR_NOMEM, "quantize: out of memory");
    int k = 0;
    for (int l = 0; l < L; l++) k += plan_layer(m, l, q + k, p, rules, n_rules);
    if (p->lm_head) {
        qz_module *e = &q[n - 1];
        snprintf(e->name, sizeof e->name, "lm_head");
        e->layer = L;
        e->which = QZ_LM_HEAD;
        e->out = m->output.shape[0];
        e->in = m->output.shape[1];
        plan_one(e, p, rules, n_rules);
    }
    *mods = q;
    *n_mods = n;
    return LB_OK;
}
