/*
 * Export planning: open a checkpoint directory, list the GGUF tensors it
 * becomes (names, shapes, order), and decide each tensor's route and type.
 *
 * Names, order and float types follow llama.cpp 0.7.0 convert_hf_to_gguf.py
 * (TextModel.prepare_tensors, gguf-py tensor_mapping.py): tensors in the
 * order of the safetensors shards (sorted by file name) and, inside a shard,
 * by tensor name; generated tensors (rope_freqs) first; 1-D tensors, norms
 * and every non-".weight" tensor in F32. Quantized types follow
 * llama-quantize's mix (lowbit/ftype.h).
 */
#include "export/ex_ctx.h"
#include "lowbit/file.h"
#include "lowbit/quants.h"
#include "core/internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <dirent.h>
#include <stdarg.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

/* ---- names ---------------------------------------------------------------- */

const char *lb_export_route_name(lb_export_route r) {
    static const char *n[] = {"keep", "direct", "mixed", "fallback"};
    return (unsigned)r < LB_EXPORT_ROUTE_COUNT_ ? n[r] : "?";
}

static const char *k_modes[] = {"auto", "direct", "mixed", "dequantize"};

const char *lb_export_mode_name(lb_export_mode m) {
    return (unsigned)m < LB_ARRAY_LEN(k_modes) ? k_modes[m] : "?";
}

int lb_export_mode_from_name(const char *name) {
    for (size_t i = 0; name && i < LB_ARRAY_LEN(k_modes); i++)
        if (!strcasecmp(name, k_modes[i])) return (int)i;
    return -1;
}

static const struct {
    const char *name;
    lb_ftype ft;
    bool pure;
} k_qtypes[] = {
    {"Q4_0", LB_FTYPE_MOSTLY_Q4_0, false},   {"Q4_1", LB_FTYPE_MOSTLY_Q4_1, false},
    {"Q8_0", LB_FTYPE_MOSTLY_Q8_0, false},   {"Q2_K", LB_FTYPE_MOSTLY_Q2_K, false},
    {"Q3_K", LB_FTYPE_MOSTLY_Q3_K_M, true},  {"Q4_K", LB_FTYPE_MOSTLY_Q4_K_M, true},
    {"Q5_K", LB_FTYPE_MOSTLY_Q5_K_M, true},  {"Q6_K", LB_FTYPE_MOSTLY_Q6_K, false},
    {"Q3_K_M", LB_FTYPE_MOSTLY_Q3_K_M, false}, {"Q4_K_M", LB_FTYPE_MOSTLY_Q4_K_M, false},
    {"Q5_K_M", LB_FTYPE_MOSTLY_Q5_K_M, false}, {"F16", LB_FTYPE_MOSTLY_F16, false},
    {"BF16", LB_FTYPE_MOSTLY_BF16, false},   {"F32", LB_FTYPE_ALL_F32, false},
};

lb_status lb_export_qtype_parse(const char *name, lb_export_qtype *out) {
    if (!name || !out) return lb_set_error(LB_ERR_INVALID_ARG, "export: NULL qtype");
    for (size_t i = 0; i < LB_ARRAY_LEN(k_qtypes); i++)
        if (!strcasecmp(name, k_qtypes[i].name)) {
            out->ftype = k_qtypes[i].ft;
            out->pure = k_qtypes[i].pure;
            return LB_OK;
        }
    return lb_set_error(LB_ERR_UNSUPPORTED,
                        "export: unknown qtype '%s' (Q4_0 Q4_1 Q8_0 Q2_K Q3_K Q4_K Q5_K "
                        "Q6_K Q3_K_M Q4_K_M Q5_K_M F16 BF16 F32)", name);
}

const char *lb_export_qtype_name(lb_export_qtype q) {
    for (size_t i = 0; i < LB_ARRAY_LEN(k_qtypes); i++)
        if (k_qtypes[i].ft == q.ftype && k_qtypes[i].pure == q.pure) return k_qtypes[i].name;
    return lb_ftype_name(q.ftype);
}

void lb_export_opts_default(lb_export_opts *o) {
    memset(o, 0, sizeof *o);
    o->mode = LB_EXPORT_MODE_AUTO;
    o->output_type = -1;
    o->embedding_type = -1;
}

lb_status lb_export_qk_permutation(int64_t rows, int n_head, int64_t *src_row) {
    if (!src_row || n_head < 1 || rows < 2 || rows % (2 * (int64_t)n_head))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "export: q/k permutation of %lld rows with %d heads "
                            "(rows must be a multiple of 2*heads)", (long long)rows, n_head);
    /* reshape(n_head, 2, half, ...).swapaxes(1, 2): output row
     * h*hd + 2i + j  <-  input row h*hd + j*half + i */
    const int64_t hd = rows / n_head, half = hd / 2;
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t i = 0; i < half; i++)
            for (int64_t j = 0; j < 2; j++)
                src_row[h * hd + 2 * i + j] = h * hd + j * half + i;
    return LB_OK;
}

/* ---- HF -> GGUF tensor names (gguf-py tensor_mapping.py) -------------------- */

static const struct {
    const char *hf, *gguf;
} k_layer_map[] = {
    {"input_layernorm", "attn_norm"},
    {"self_attn.q_proj", "attn_q"},
    {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},
    {"self_attn.o_proj", "attn_output"},
    {"self_attn.q_norm", "attn_q_norm"},
    {"self_attn.k_norm", "attn_k_norm"},
    {"post_attention_layernorm", "ffn_norm"},
    {"mlp.gate_proj", "ffn_gate"},
    {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},
};

/* Module path (without the last component) -> GGUF base name
 * ("blk.3.attn_q", "token_embd"); *layer = block index or -1. */
static bool map_module(const char *mod, int n_layers, char *out, size_t n,
                       int *layer) {
    *layer = -1;
    if (!strcmp(mod, "model.embed_tokens")) return snprintf(out, n, "token_embd"), true;
    if (!strcmp(mod, "model.norm")) return snprintf(out, n, "output_norm"), true;
    if (!strcmp(mod, "lm_head")) return snprintf(out, n, "output"), true;
    if (strncmp(mod, "model.layers.", 13)) return false;
    const char *p = mod + 13;
    char *end;
    long l = strtol(p, &end, 10);
    if (end == p || *end != '.' || l < 0 || l >= n_layers || (p[0] == '0' && end - p > 1))
        return false;
    for (size_t i = 0; i < LB_ARRAY_LEN(k_layer_map); i++)
        if (!strcmp(end + 1, k_layer_map[i].hf)) {
            *layer = (int)l;
            snprintf(out, n, "blk.%ld.%s", l, k_layer_map[i].gguf);
            return true;
        }
    return false;
}

/* ---- context -------------------------------------------------------------- */

void ex_ctx_free(ex_ctx *c) {
    if (!c) return;
    lb_st_close(c->st);
    lb_model_config_clear(&c->cfg);
    ex_vocab_free(&c->vocab);
    ex_gptq_free(c);
    ex_fp8_free(c);
    ex_bnb_free(c);
    for (int i = 0; i < c->n_rules; i++) {
        free(c->rules[i].text);
        pcre2_code_free((pcre2_code *)c->rules[i].code);
    }
    free(c->rules);
    for (size_t i = 0; i < c->n; i++) {
        free(c->t[i].parts);
        free(c->t[i].gparts);
    }
    free(c->t);
    lb_export_plan_free(c->plan);
    free(c->dir);
    free(c->name);
    free(c);
}

/* The directory's weights: model.safetensors / its index, else the single
 * *.safetensors file (AutoGPTQ's gptq_model-4bit-128g.safetensors). */
static lb_status open_weights(const char *dir, lb_safetensors **st) {
    char *idx = lb_path_join(dir, "model.safetensors.index.json");
    char *one = lb_path_join(dir, "model.safetensors");
    if (!idx || !one) {
        free(idx);
        free(one);
        return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    }
    bool std = lb_is_file(idx) || lb_is_file(one);
    free(idx);
    free(one);
    if (std) return lb_st_open(dir, st);
    DIR *d = opendir(dir);
    if (!d) return lb_set_error(LB_ERR_IO, "%s: cannot open directory", dir);
    char *found = NULL;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l > 12 && !strcmp(e->d_name + l - 12, ".safetensors")) {
            n++;
            if (!found) found = lb_strdup(e->d_name);
        }
    }
    closedir(d);
    if (n != 1) {
        free(found);
        return lb_set_error(LB_ERR_NOT_FOUND,
                            "%s: no model.safetensors (or index) and %d other "
                            "*.safetensors files (need exactly one)", dir, n);
    }
    char *p = lb_path_join(dir, found);
    free(found);
    if (!p) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    lb_status s = lb_st_open(p, st);
    free(p);
    return s;
}

/* convert_hf_to_gguf's default general.name: the directory name with '-'
 * as spaces, lower-case words title-cased unless they look like a version
 * or start with a digit (gguf-py metadata.py). */
static char *default_name(const char *dir) {
    const char *b = strrchr(dir, '/');
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    char *tmp = malloc(len + 1);
    if (!tmp) return NULL;
    memcpy(tmp, dir, len);
    tmp[len] = '\0';
    b = strrchr(tmp, '/');
    const char *base = b ? b + 1 : tmp;
    char *out = malloc(strlen(base) + 1);
    if (!out) {
        free(tmp);
        return NULL;
    }
    size_t o = 0;
    const char *p = base;
    while (*p) {
        while (*p == '-' || *p == ' ') p++;
        if (!*p) break;
        const char *w = p;
        while (*p && *p != '-' && *p != ' ') p++;
        size_t wl = (size_t)(p - w);
        bool lower = false, upper = false;
        for (size_t i = 0; i < wl; i++) {
            if (w[i] >= 'a' && w[i] <= 'z') lower = true;
            if (w[i] >= 'A' && w[i] <= 'Z') upper = true;
        }
        bool version = (w[0] == 'v' && wl > 1 && w[1] >= '0' && w[1] <= '9') ||
                       (w[0] >= '0' && w[0] <= '9');
        if (o) out[o++] = ' ';
        for (size_t i = 0; i < wl; i++) {
            char ch = w[i];
            if (lower && !upper && !version) { /* str.title() */
                bool prev_alpha = i > 0 && ((w[i - 1] >= 'a' && w[i - 1] <= 'z') ||
                                            (w[i - 1] >= 'A' && w[i - 1] <= 'Z'));
                if (!prev_alpha && ch >= 'a' && ch <= 'z') ch = (char)(ch - 32);
            }
            out[o++] = ch;
        }
    }
    out[o] = '\0';
    free(tmp);
    return out;
}

/* ---- rules ---------------------------------------------------------------- */

/* SPEC -> type (or keep) */
static lb_status parse_rule_spec(const char *rule, const char *spec, int *type,
                                 bool *keep) {
    *keep = false;
    *type = -1;
    if (!strcasecmp(spec, "keep")) {
        *keep = true;
        return LB_OK;
    }
    static const struct {
        const char *bits;
        lb_type t;
    } by_bits[] = {{"2", LB_TYPE_Q2_K}, {"3", LB_TYPE_Q3_K}, {"4", LB_TYPE_Q4_K},
                   {"5", LB_TYPE_Q5_K}, {"6", LB_TYPE_Q6_K}, {"8", LB_TYPE_Q8_0},
                   {"16", LB_TYPE_F16}};
    for (size_t i = 0; i < LB_ARRAY_LEN(by_bits); i++)
        if (!strcmp(spec, by_bits[i].bits)) {
            *type = by_bits[i].t;
            return LB_OK;
        }
    static const lb_type ok[] = {LB_TYPE_Q4_0, LB_TYPE_Q4_1, LB_TYPE_Q5_0, LB_TYPE_Q5_1,
                                 LB_TYPE_Q8_0, LB_TYPE_Q2_K, LB_TYPE_Q3_K, LB_TYPE_Q4_K,
                                 LB_TYPE_Q5_K, LB_TYPE_Q6_K, LB_TYPE_F16,  LB_TYPE_BF16,
                                 LB_TYPE_F32};
    int t = lb_type_from_name(spec);
    for (size_t i = 0; t >= 0 && i < LB_ARRAY_LEN(ok); i++)
        if ((int)ok[i] == t) {
            *type = t;
            return LB_OK;
        }
    return lb_set_error(LB_ERR_INVALID_ARG,
                        "export rule '%s': expected TYPE (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K "
                        "Q3_K Q4_K Q5_K Q6_K F16 BF16 F32), bits (2 3 4 5 6 8 16) or keep",
                        rule);
}

static lb_status parse_rules(ex_ctx *c, const char *const *rules, int n) {
    if (n <= 0) return LB_OK;
    if (!rules) return lb_set_error(LB_ERR_INVALID_ARG, "export: NULL rule list");
    c->rules = calloc((size_t)n, sizeof *c->rules);
    if (!c->rules) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    for (int i = 0; i < n; i++) {
        const char *r = rules[i];
        const char *eq = r ? strrchr(r, '=') : NULL;
        if (!r || !eq || eq == r)
            return lb_set_error(LB_ERR_INVALID_ARG,
                                "export rule '%s': expected REGEX=SPEC", r ? r : "(null)");
        ex_rule *x = &c->rules[c->n_rules++];
        x->text = lb_strdup(r);
        if (!x->text) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
        LB_TRY(parse_rule_spec(r, eq + 1, &x->type, &x->keep));
        int err;
        PCRE2_SIZE off;
        x->code = pcre2_compile((PCRE2_SPTR)r, (PCRE2_SIZE)(eq - r), PCRE2_UTF, &err, &off,
                                NULL);
        if (!x->code) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(err, msg, sizeof msg);
            return lb_set_error(LB_ERR_INVALID_ARG, "export rule '%s': bad regex at %zu: %s",
                                r, (size_t)off, (const char *)msg);
        }
    }
    return LB_OK;
}

/* First rule whose regex is found in `module`, or NULL. */
static const ex_rule *match_rule(const ex_ctx *c, const char *module) {
    for (int i = 0; i < c->n_rules; i++) {
        pcre2_match_data *md =
            pcre2_match_data_create_from_pattern((const pcre2_code *)c->rules[i].code, NULL);
        if (!md) return NULL;
        int rc = pcre2_match((const pcre2_code *)c->rules[i].code, (PCRE2_SPTR)module,
                             strlen(module), 0, 0, md, NULL);
        pcre2_match_data_free(md);
        if (rc >= 0) return &c->rules[i];
    }
    return NULL;
}

/* ---- tensor list ---------------------------------------------------------- */

static lb_status push_tensor(ex_ctx *c, ex_tensor **out) {
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 64;
        ex_tensor *nt = realloc(c->t, nc * sizeof *nt);
        if (!nt) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
        c->t = nt;
        c->cap = nc;
    }
    ex_tensor *t = &c->t[c->n++];
    memset(t, 0, sizeof *t);
    t->info.src_type = -1;
    t->forced_type = -1;
    t->direct_type = -1;
    *out = t;
    return LB_OK;
}

typedef struct src_item {
    const lb_tensor *t;
    const char *file;
} src_item;

static int src_cmp(const void *a, const void *b) {
    const src_item *x = a, *y = b;
    int r = strcmp(x->file, y->file);
    return r ? r : strcmp(x->t->name, y->t->name);
}

/* Expected dense shape of a GGUF base name + suffix; false if unknown. */
static bool expected_shape(const lb_model_config *cfg, const char *base,
                           const char *suffix, int *nd, int64_t sh[2]) {
    const int64_t dim = cfg->hidden_size, hd = cfg->head_dim,
                  q = (int64_t)cfg->n_heads * hd, kv = (int64_t)cfg->n_kv_heads * hd,
                  ff = cfg->intermediate_size, V = cfg->vocab_size;
    const char *k = strncmp(base, "blk.", 4) ? base : strchr(base + 4, '.') + 1;
    bool bias = !strcmp(suffix, "bias");
    *nd = 2;
    if (!strcmp(k, "token_embd") || !strcmp(k, "output")) sh[0] = V, sh[1] = dim;
    else if (!strcmp(k, "attn_q")) sh[0] = q, sh[1] = dim;
    else if (!strcmp(k, "attn_k") || !strcmp(k, "attn_v")) sh[0] = kv, sh[1] = dim;
    else if (!strcmp(k, "attn_output")) sh[0] = dim, sh[1] = q;
    else if (!strcmp(k, "ffn_gate") || !strcmp(k, "ffn_up")) sh[0] = ff, sh[1] = dim;
    else if (!strcmp(k, "ffn_down")) sh[0] = dim, sh[1] = ff;
    else if (!strcmp(k, "attn_q_norm") || !strcmp(k, "attn_k_norm")) *nd = 1, sh[0] = hd;
    else if (!strcmp(k, "output_norm") || !strcmp(k, "attn_norm") || !strcmp(k, "ffn_norm"))
        *nd = 1, sh[0] = dim;
    else
        return false;
    if (bias) {
        if (*nd != 2) return false;
        *nd = 1;
    }
    return true;
}

static void fmt_shape(char *b, size_t n, int nd, const int64_t *sh) {
    size_t o = (size_t)snprintf(b, n, "[");
    for (int i = 0; i < nd && o < n; i++)
        o += (size_t)snprintf(b + o, n - o, "%s%lld", i ? ", " : "", (long long)sh[i]);
    if (o < n) snprintf(b + o, n - o, "]");
}

static int perm_heads_of(const ex_ctx *c, const char *gguf_base) {
    if (!c->permute || strncmp(gguf_base, "blk.", 4)) return 0;
    const char *k = strchr(gguf_base + 4, '.') + 1;
    if (!strcmp(k, "attn_q")) return c->cfg.n_heads;
    if (!strcmp(k, "attn_k")) return c->cfg.n_kv_heads;
    return 0;
}

/* Enumerate the checkpoint's tensors into c->t in GGUF order. */
static lb_status list_tensors(ex_ctx *c) {
    const lb_model_config *cfg = &c->cfg;
    size_t ns = lb_st_count(c->st);
    src_item *items = malloc((ns ? ns : 1) * sizeof *items);
    if (!items) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    for (size_t i = 0; i < ns; i++) {
        items[i].t = lb_st_tensor_at(c->st, i);
        items[i].file = lb_st_tensor_file(c->st, items[i].t);
    }
    qsort(items, ns, sizeof *items, src_cmp);

    bool has_embed = lb_st_find(c->st, "model.embed_tokens.weight") ||
                     lb_st_find(c->st, "model.embed_tokens.qweight");
    bool lm_quant = lb_st_find(c->st, "lm_head.qweight") != NULL;
    lb_status s = LB_OK;
    ex_tensor *t;

    /* LlamaModel.generate_extra_tensors: rope_freqs for llama3 scaling */
    if (!strcmp(c->arch, "llama") && cfg->rope_scaling == LB_ROPE_SCALING_LLAMA3) {
        LB_TRY(push_tensor(c, &t));
        snprintf(t->info.name, sizeof t->info.name, "rope_freqs.weight");
        snprintf(t->info.source, sizeof t->info.source, "(generated)");
        t->kind = EX_SRC_ROPE_FREQS;
        t->info.n_dims = 1;
        t->info.shape[0] = cfg->head_dim / 2;
        t->info.src_type = LB_TYPE_F32;
    }
    const bool ext = ex_arch_is_ext(c);
    if (ext) LB_TRY(ex_arch_generated(c, push_tensor));

    for (size_t i = 0; i < ns && s == LB_OK; i++) {
        const lb_tensor *st = items[i].t;
        const char *name = st->name;
        size_t nl = strlen(name);
        if ((nl >= 21 && !strcmp(name + nl - 21, ".attention.masked_bias")) ||
            (nl >= 15 && !strcmp(name + nl - 15, ".attention.bias")) ||
            (nl >= 20 && !strcmp(name + nl - 20, ".rotary_emb.inv_freq")))
            continue;
        const char *dot = strrchr(name, '.');
        if (!dot) {
            s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: cannot map tensor '%s' to GGUF",
                             c->dir, name);
            break;
        }
        char mod[192];
        size_t ml = (size_t)(dot - name);
        if (ml >= sizeof mod) {
            s = lb_set_error(LB_ERR_FORMAT, "%s: tensor name too long: %.80s...", c->dir, name);
            break;
        }
        memcpy(mod, name, ml);
        mod[ml] = '\0';
        const char *suffix = dot + 1;
        bool gptq_part = !strcmp(suffix, "qweight") || !strcmp(suffix, "qzeros") ||
                         !strcmp(suffix, "scales") || !strcmp(suffix, "g_idx");
        if (gptq_part && strcmp(suffix, "qweight")) continue; /* grouped with qweight */
        if (ex_fp8_is_aux(c, suffix)) continue; /* an FP8 scale: read with its weight */
        if (ex_bnb_is_aux(c, suffix)) continue; /* bitsandbytes state: read with its weight */
        char base[64];
        int layer, expert = -1;
        if (!(ext ? ex_arch_map_module(c, mod, base, sizeof base, &layer, &expert)
                  : map_module(mod, cfg->n_layers, base, sizeof base, &layer)) ||
            (!gptq_part && strcmp(suffix, "weight") && strcmp(suffix, "bias"))) {
            s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: cannot map tensor '%s' to GGUF",
                             c->dir, name);
            break;
        }
        if (expert >= 0) { /* MoE: stacked into ffn_*_exps (ex_arch.c) */
            if (gptq_part && !c->gptq) {
                s = lb_set_error(LB_ERR_FORMAT, "%s: tensor '%s' is GPTQ-packed but the "
                                 "config has no GPTQ quantization_config", c->dir, name);
                break;
            }
            s = gptq_part ? ex_arch_add_expert_gptq(c, base, expert, mod, push_tensor)
                          : ex_arch_add_expert(c, base, expert, st, push_tensor);
            continue;
        }
        bool tied = cfg->tie_word_embeddings && !lm_quant;
        if (!strcmp(base, "output") && tied) {
            if (has_embed) { /* tied: llama.cpp reuses token_embd */
                snprintf(c->tied_note, sizeof c->tied_note,
                         "tied embeddings: lm_head.weight not written (llama.cpp uses "
                         "token_embd.weight)");
                continue;
            }
            /* stored only as lm_head (the converter would write it as
             * output.weight and no token_embd, which llama.cpp rejects) */
            snprintf(base, sizeof base, "token_embd");
            snprintf(c->tied_note, sizeof c->tied_note,
                     "tied embedding stored only as lm_head.weight: written as "
                     "token_embd.weight");
        }
        if (gptq_part && !c->gptq) {
            s = lb_set_error(LB_ERR_FORMAT, "%s: tensor '%s' is GPTQ-packed but the "
                             "config has no GPTQ quantization_config", c->dir, name);
            break;
        }
        LB_TRY(push_tensor(c, &t));
        snprintf(t->info.name, sizeof t->info.name, "%s.%s", base,
                 gptq_part ? "weight" : suffix);
        snprintf(t->info.source, sizeof t->info.source, "%s", gptq_part ? mod : name);
        t->perm_heads = perm_heads_of(c, base);
        int end;
        int64_t esh[2];
        bool known = !ext && expected_shape(cfg, base, gptq_part ? "weight" : suffix,
                                            &end, esh);
        t->add_one = ext && ex_arch_add_one(c, base);
        if (gptq_part) {
            t->kind = EX_SRC_GPTQ;
            s = ex_gptq_prepare(c, t, mod);
            if (s != LB_OK) break;
        } else {
            t->kind = EX_SRC_DENSE;
            if ((st->type == LB_TYPE_U8 || st->type == LB_TYPE_I8) && !strcmp(suffix, "weight")) {
                s = ex_bnb_prepare(c, t, mod, &st); /* st: its F32 dequantization */
                if (s != LB_OK) break;
            }
            t->dense = st;
            t->info.src_type = (int)st->type;
            if ((st->type == LB_TYPE_F8_E4M3 || st->type == LB_TYPE_F8_E5M2) &&
                !strcmp(suffix, "weight")) {
                s = ex_fp8_prepare(c, t, mod, st);
                if (s != LB_OK) break;
            } else if (st->type != LB_TYPE_F32 && st->type != LB_TYPE_F16 &&
                st->type != LB_TYPE_BF16) {
                s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s (F32, F16 "
                                 "or BF16 expected)", c->dir, name, lb_type_name(st->type));
                break;
            }
            t->info.n_dims = st->n_dims;
            for (int d = 0; d < st->n_dims; d++) t->info.shape[d] = st->shape[d];
        }
        if (known) {
            bool ok = t->info.n_dims == end;
            for (int d = 0; ok && d < end; d++) ok = t->info.shape[d] == esh[d];
            if (!ok) {
                char a[64], b[64];
                fmt_shape(a, sizeof a, end, esh);
                fmt_shape(b, sizeof b, t->info.n_dims, t->info.shape);
                s = lb_set_error(LB_ERR_FORMAT, "%s: %s: expected %s, got %s", c->dir,
                                 t->info.source, a, b);
                break;
            }
        }
        t->is_weight2d = t->info.n_dims == 2 && !strcmp(suffix, "weight") ? true
                         : gptq_part;
        /* MoE routers stay F32 (llama-quantize leaves ffn_gate_inp alone) */
        if (ext && strstr(base, "ffn_gate_inp")) t->is_weight2d = false;
        if (t->perm_heads) {
            int64_t rows = t->info.shape[0];
            if (rows % (2 * (int64_t)t->perm_heads)) {
                s = lb_set_error(LB_ERR_FORMAT, "%s: %s has %lld rows, not a multiple of "
                                 "2 * %d heads (q/k permutation)", c->dir,
                                 t->info.source, (long long)rows, t->perm_heads);
                break;
            }
            t->info.permuted = true;
        }
    }
    free(items);
    LB_TRY(s);

    /* required tensors */
    const char *need_global[] = {"token_embd.weight", "output_norm.weight"};
    for (size_t k = 0; k < LB_ARRAY_LEN(need_global); k++) {
        bool found = false;
        for (size_t i = 0; i < c->n && !found; i++) found = !strcmp(c->t[i].info.name, need_global[k]);
        if (!found)
            return lb_set_error(LB_ERR_NOT_FOUND, "%s: no tensor for GGUF %s", c->dir,
                                need_global[k]);
    }
    if (!cfg->tie_word_embeddings || lm_quant) {
        bool found = false;
        for (size_t i = 0; i < c->n && !found; i++) found = !strcmp(c->t[i].info.name, "output.weight");
        if (!found)
            return lb_set_error(LB_ERR_NOT_FOUND, "%s: lm_head.weight missing (the config "
                                "does not tie the embeddings)", c->dir);
    }
    if (ext) return ex_arch_check(c);
    static const char *per_layer[] = {"attn_norm.weight", "attn_q.weight", "attn_k.weight",
                                      "attn_v.weight", "attn_output.weight", "ffn_norm.weight",
                                      "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};
    for (int l = 0; l < cfg->n_layers; l++) {
        for (size_t k = 0; k < LB_ARRAY_LEN(per_layer) + 5; k++) {
            const char *w;
            if (k < LB_ARRAY_LEN(per_layer)) w = per_layer[k];
            else if (k < LB_ARRAY_LEN(per_layer) + 2) {
                if (!cfg->qk_norm) continue;
                w = k == LB_ARRAY_LEN(per_layer) ? "attn_q_norm.weight" : "attn_k_norm.weight";
            } else {
                if (!cfg->attention_bias) continue;
                static const char *b[] = {"attn_q.bias", "attn_k.bias", "attn_v.bias"};
                w = b[k - LB_ARRAY_LEN(per_layer) - 2];
            }
            char nm[80];
            snprintf(nm, sizeof nm, "blk.%d.%s", l, w);
            bool found = false;
            for (size_t i = 0; i < c->n && !found; i++) found = !strcmp(c->t[i].info.name, nm);
            if (!found)
                return lb_set_error(LB_ERR_NOT_FOUND, "%s: no tensor for GGUF %s", c->dir, nm);
        }
    }
    return LB_OK;
}

/* ---- types and routes ----------------------------------------------------- */

/* llama.cpp's tensor_type_fallback (see ftype.c) for a row of `cols`. */
static lb_type row_fallback(lb_type t, int64_t cols) {
    const lb_type_traits *tr = lb_type_get_traits((int)t);
    if (cols % tr->blck_size == 0) return t;
    lb_type r;
    switch (t) {
    case LB_TYPE_Q2_K: case LB_TYPE_Q3_K: r = LB_TYPE_Q4_0; break;
    case LB_TYPE_Q4_K: r = LB_TYPE_Q5_0; break;
    case LB_TYPE_Q5_K: r = LB_TYPE_Q5_1; break;
    case LB_TYPE_Q6_K: r = LB_TYPE_Q8_0; break;
    default: r = t; break;
    }
    if (cols % lb_type_get_traits((int)r)->blck_size) r = LB_TYPE_F16;
    return r;
}

static bool is_float_type(int t) {
    return t == LB_TYPE_F32 || t == LB_TYPE_F16 || t == LB_TYPE_BF16;
}

static const char *base_of(const char *gguf) {
    return strncmp(gguf, "blk.", 4) ? gguf : strchr(gguf + 4, '.') + 1;
}

static bool is_category(const char *gguf, const char *what) {
    size_t n = strlen(what);
    const char *b = base_of(gguf);
    return !strncmp(b, what, n) && b[n] == '.';
}

/* The ftype implied by the predominant type of the 2-D weights. */
static lb_ftype ftype_of_type(lb_type t) {
    switch (t) {
    case LB_TYPE_F32: return LB_FTYPE_ALL_F32;
    case LB_TYPE_F16: return LB_FTYPE_MOSTLY_F16;
    case LB_TYPE_BF16: return LB_FTYPE_MOSTLY_BF16;
    case LB_TYPE_Q4_0: return LB_FTYPE_MOSTLY_Q4_0;
    case LB_TYPE_Q4_1: return LB_FTYPE_MOSTLY_Q4_1;
    case LB_TYPE_Q5_0: return LB_FTYPE_MOSTLY_Q5_0;
    case LB_TYPE_Q5_1: return LB_FTYPE_MOSTLY_Q5_1;
    case LB_TYPE_Q8_0: return LB_FTYPE_MOSTLY_Q8_0;
    case LB_TYPE_Q2_K: return LB_FTYPE_MOSTLY_Q2_K;
    case LB_TYPE_Q3_K: return LB_FTYPE_MOSTLY_Q3_K_M;
    case LB_TYPE_Q4_K: return LB_FTYPE_MOSTLY_Q4_K_M;
    case LB_TYPE_Q5_K: return LB_FTYPE_MOSTLY_Q5_K_M;
    case LB_TYPE_Q6_K: return LB_FTYPE_MOSTLY_Q6_K;
    default: return LB_FTYPE_ALL_F32;
    }
}

static void set_reason(ex_tensor *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_reason(ex_tensor *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->info.reason, sizeof t->info.reason, fmt, ap);
    va_end(ap);
}

static lb_status assign_types(ex_ctx *c, const lb_export_opts *o) {
    lb_export_plan *p = c->plan;
    const bool deq = p->mode == LB_EXPORT_MODE_DEQUANTIZE;
    lb_tensor *views = calloc(c->n ? c->n : 1, sizeof *views);
    lb_type *mix = calloc(c->n ? c->n : 1, sizeof *mix);
    lb_type *wanted = calloc(c->n ? c->n : 1, sizeof *wanted);
    if (!views || !mix || !wanted) {
        free(views);
        free(mix);
        free(wanted);
        return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    }
    lb_status s = LB_OK;
    /* the type each tensor has "now" for the mix: GPTQ weights count as
     * F32 (they are dequantized when the mix decides), 1-D tensors F32 */
    for (size_t i = 0; i < c->n; i++) {
        ex_tensor *t = &c->t[i];
        views[i].name = t->info.name;
        views[i].n_dims = t->info.n_dims;
        for (int d = 0; d < t->info.n_dims; d++) views[i].shape[d] = t->info.shape[d];
        views[i].type = (t->kind == EX_SRC_DENSE || t->kind == EX_SRC_STACK) &&
                                t->info.n_dims >= 2
                            ? (lb_type)t->info.src_type : LB_TYPE_F32;
    }
    if (p->has_qtype) {
        lb_ftype_model fm = {c->arch, c->cfg.n_layers, c->cfg.n_heads, c->cfg.n_kv_heads,
                             c->cfg.n_experts}; /* MoE: llama.cpp's expert rules */
        lb_ftype_params fp = {p->qtype.pure, false, o->output_type, o->embedding_type};
        s = lb_ftype_tensor_types(p->qtype.ftype, &fm, &fp, views, c->n, mix, NULL);
        /* the types the mix asks for before the row-length fallback: the
         * same rules on rows padded to a multiple of 256 (the rules look
         * at names, layers and hyper-parameters, the fallback alone at the
         * row length) */
        for (size_t i = 0; i < c->n; i++)
            if (views[i].n_dims >= 1) {
                int64_t *cl = &views[i].shape[views[i].n_dims - 1];
                *cl = (*cl + 255) / 256 * 256;
            }
        if (s == LB_OK)
            s = lb_ftype_tensor_types(p->qtype.ftype, &fm, &fp, views, c->n, wanted, NULL);
    }
    for (size_t i = 0; i < c->n && s == LB_OK; i++) {
        ex_tensor *t = &c->t[i];
        lb_export_tensor *e = &t->info;
        const char *src_name = e->source;
        /* module name for rules: the HF name without ".weight" */
        char module[192];
        snprintf(module, sizeof module, "%s", src_name);
        size_t ml = strlen(module);
        if (ml > 7 && !strcmp(module + ml - 7, ".weight")) module[ml - 7] = '\0';
        const ex_rule *rule = t->is_weight2d ? match_rule(c, module) : NULL;
        int override = -1;
        if (!strcmp(e->name, "output.weight") && o->output_type >= 0) override = o->output_type;
        if (!strcmp(e->name, "token_embd.weight") && o->embedding_type >= 0)
            override = o->embedding_type;
        if (rule && !rule->keep) override = rule->type;
        const int64_t cols = e->n_dims ? e->shape[e->n_dims - 1] : 1;
        e->wanted_type = (lb_type)-1; /* = type unless set below */

        if (!t->is_weight2d) {
            /* 1-D tensors, norms, biases, rope_freqs: F32 (converter) */
            e->type = LB_TYPE_F32;
            e->route = LB_EXPORT_ROUTE_KEEP;
            if (e->src_type == LB_TYPE_F32 || t->kind != EX_SRC_DENSE)
                set_reason(t, "1-D/norm/bias tensors stay F32");
            else
                set_reason(t, "1-D/norm/bias tensors are written in F32 (%s in the checkpoint)",
                           lb_type_name(e->src_type));
            continue;
        }
        if (t->kind == EX_SRC_GPTQ && !deq) {
            /* quantized linear: direct, or mixed */
            bool retyped = override >= 0 && override != t->direct_type;
            if (t->direct_type >= 0 && !retyped) {
                e->type = (lb_type)t->direct_type;
                e->route = LB_EXPORT_ROUTE_DIRECT;
                set_reason(t, "%d-bit %s%s codes map to %s%s", e->bits,
                           t->direct_type == LB_TYPE_Q4_1 ? "asymmetric" : "symmetric",
                           t->lin.format == LB_GPTQ_FORMAT_AWQ ? " AWQ" : "",
                           lb_type_name(t->direct_type),
                           t->direct_type == LB_TYPE_Q4_1 ? " (m = -scale*zero rounded to fp16)"
                                                          : " exactly");
                if (t->gparts) { /* MoE: the experts' blocks one after the other */
                    size_t l = strlen(e->reason);
                    snprintf(e->reason + l, sizeof e->reason - l, ", %d experts stacked",
                             t->n_parts);
                }
                continue;
            }
            if (p->mode == LB_EXPORT_MODE_DIRECT) {
                s = lb_set_error(LB_ERR_UNSUPPORTED, "export --mode direct: %s cannot be "
                                 "mapped directly: %s", src_name,
                                 retyped ? "a rule/option retypes it" : t->direct_why);
                break;
            }
            lb_type want;
            if (override >= 0) want = (lb_type)override;
            else if (t->unrotate_down && e->bits == 4 && cols % 256)
                want = e->sym ? LB_TYPE_Q4_0 : LB_TYPE_Q4_1; /* Q4_K does not fit */
            else switch (e->bits) {
                case 2: want = LB_TYPE_Q2_K; break;
                case 3: want = LB_TYPE_Q3_K; break;
                case 4: want = LB_TYPE_Q4_K; break;
                default: want = LB_TYPE_Q8_0; break;
                }
            e->type = row_fallback(want, cols);
            e->wanted_type = want;
            /* a folded-back down_proj is the fallback route: dequantize, fold, quantize */
            e->route = t->unrotate_down ? LB_EXPORT_ROUTE_FALLBACK : LB_EXPORT_ROUTE_MIXED;
            set_reason(t, "%s; dequantized -> %s%s%s", retyped ? "retyped by rule/option"
                           : t->direct_why, lb_type_name(want),
                       e->type != want ? " -> row fallback " : "",
                       e->type != want ? lb_type_name(e->type) : "");
            continue;
        }
        /* dense 2-D weights (and GPTQ weights in dequantize mode) */
        lb_type ty;
        const char *why;
        char whybuf[96];
        if (override >= 0) {
            ty = row_fallback((lb_type)override, cols);
            e->wanted_type = (lb_type)override;
            why = rule && !rule->keep ? "module rule" : "--output-type/--embedding-type";
        } else if (p->has_qtype) {
            ty = mix[i];
            if (!is_float_type(ty) && !lb_type_get_traits((int)ty)->quantized) ty = LB_TYPE_F32;
            e->wanted_type = wanted[i];
            if (!is_float_type(wanted[i]) && !lb_type_get_traits((int)wanted[i])->quantized)
                e->wanted_type = ty;
            snprintf(whybuf, sizeof whybuf, "%s mix", lb_export_qtype_name(p->qtype));
            why = whybuf;
        } else if (t->kind == EX_SRC_GPTQ) {
            ty = LB_TYPE_F32;
            why = "dequantized (no --qtype)";
        } else if (c->gptq) {
            ty = (lb_type)e->src_type; /* GPTQ input without qtype: keep */
            why = "not quantized in the checkpoint";
        } else if (t->bnb_deq) {
            ty = row_fallback(LB_TYPE_Q8_0, cols); /* ex_bnb.c */
            why = "bitsandbytes weight dequantized (default Q8_0)";
        } else if (t->fp8_scale) {
            ty = row_fallback(LB_TYPE_Q8_0, cols); /* ex_fp8.c */
            why = "FP8 weight dequantized (default Q8_0)";
        } else {
            ty = c->default_float;
            snprintf(whybuf, sizeof whybuf, "default %s (highest-fidelity 16-bit type)",
                     lb_type_name(ty));
            why = whybuf;
        }
        e->type = ty;
        if (is_float_type(ty) && (t->kind == EX_SRC_DENSE || t->kind == EX_SRC_STACK)) {
            e->route = LB_EXPORT_ROUTE_KEEP;
            if ((int)ty == e->src_type) set_reason(t, "%s: %s as stored", why, lb_type_name(ty));
            else set_reason(t, "%s: %s -> %s", why, lb_type_name(e->src_type), lb_type_name(ty));
        } else {
            e->route = LB_EXPORT_ROUTE_FALLBACK;
            set_reason(t, "%s: %s%s -> %s", why, t->kind == EX_SRC_GPTQ ? "dequantized " : "",
                       t->kind == EX_SRC_GPTQ ? "GPTQ" : lb_type_name(e->src_type),
                       lb_type_name(ty));
        }
    }
    for (size_t i = 0; s == LB_OK && i < c->n; i++) {
        lb_export_tensor *e = &c->t[i].info;
        if ((int)e->wanted_type < 0) e->wanted_type = e->type;
        size_t l = strlen(e->reason);
        if (e->wanted_type != e->type && e->route != LB_EXPORT_ROUTE_MIXED && l + 8 < sizeof e->reason) {
            const int64_t cols = e->n_dims ? e->shape[e->n_dims - 1] : 1;
            snprintf(e->reason + l, sizeof e->reason - l, " (not %s: rows of %lld are not a "
                     "multiple of its %d-value blocks)", lb_type_name(e->wanted_type),
                     (long long)cols, lb_type_get_traits((int)e->wanted_type)->blck_size);
            l = strlen(e->reason);
        }
        if (e->permuted && l + 24 < sizeof e->reason)
            snprintf(e->reason + l, sizeof e->reason - l, "; q/k rows permuted");
    }
    free(views);
    free(mix);
    free(wanted);
    LB_TRY(s);
    /* every type must hold its rows */
    for (size_t i = 0; i < c->n; i++) {
        lb_export_tensor *e = &c->t[i].info;
        size_t rb;
        const int64_t cols = e->n_dims ? e->shape[e->n_dims - 1] : 1;
        if (!lb_row_size(e->type, cols, &rb))
            return lb_set_error(LB_ERR_UNSUPPORTED, "export: %s: rows of %lld cannot be %s "
                                "(block of %d)", e->name, (long long)cols,
                                lb_type_name(e->type),
                                lb_type_get_traits((int)e->type)->blck_size);
        size_t rows = 1;
        for (int d = 0; d + 1 < e->n_dims; d++) rows *= (size_t)e->shape[d];
        if (!lb_mul_ok(rb, rows, &e->nbytes))
            return lb_set_error(LB_ERR_OVERFLOW, "export: %s: size overflows", e->name);
        if (!lb_type_can_quantize(e->type))
            return lb_set_error(LB_ERR_UNSUPPORTED, "export: %s: lowbit cannot write %s",
                                e->name, lb_type_name(e->type));
    }
    return LB_OK;
}

/* general.file_type: the qtype's, else the predominant 2-D weight type. */
static lb_ftype choose_ftype(const ex_ctx *c) {
    const lb_export_plan *p = c->plan;
    if (p->has_qtype) {
        /* the qtype's, unless most quantized weights could not take the
         * types it asks for (e.g. Q2_K on 64-wide rows: all Q4_0 then; the
         * file must not be labelled Q2_K) */
        uint64_t n_all = 0, n_sub = 0;
        for (size_t i = 0; i < c->n; i++) {
            const ex_tensor *t = &c->t[i];
            if (!t->is_weight2d || is_category(t->info.name, "token_embd") ||
                is_category(t->info.name, "output"))
                continue;
            int64_t ne = 1;
            for (int d = 0; d < t->info.n_dims; d++) ne *= t->info.shape[d];
            n_all += (uint64_t)ne;
            if (t->info.type != t->info.wanted_type) n_sub += (uint64_t)ne;
        }
        if (!n_all || 2 * n_sub <= n_all) return p->qtype.ftype;
    } else if (!c->gptq && !c->fp8_state && !c->bnb_state) {
        return ftype_of_type(c->default_float);
    }
    uint64_t count[LB_TYPE_COUNT_] = {0};
    for (size_t i = 0; i < c->n; i++) {
        const ex_tensor *t = &c->t[i];
        if (!t->is_weight2d || is_category(t->info.name, "token_embd") ||
            is_category(t->info.name, "output"))
            continue;
        int64_t ne = 1;
        for (int d = 0; d < t->info.n_dims; d++) ne *= t->info.shape[d];
        count[t->info.type] += (uint64_t)ne;
    }
    int best = LB_TYPE_F32;
    for (int ty = 0; ty < LB_TYPE_COUNT_; ty++)
        if (count[ty] > count[best]) best = ty;
    return ftype_of_type((lb_type)best);
}

lb_status ex_ctx_open(const char *in_path, const lb_export_opts *opts_in, ex_ctx **out) {
    *out = NULL;
    lb_export_opts def;
    lb_export_opts_default(&def);
    const lb_export_opts *o = opts_in ? opts_in : &def;
    if (!in_path) return lb_set_error(LB_ERR_INVALID_ARG, "export: NULL input path");
    if ((unsigned)o->mode > LB_EXPORT_MODE_DEQUANTIZE)
        return lb_set_error(LB_ERR_INVALID_ARG, "export: bad mode %d", (int)o->mode);
    if (o->output_type >= 0 && !lb_type_can_quantize((lb_type)o->output_type))
        return lb_set_error(LB_ERR_INVALID_ARG, "export: bad --output-type %d", o->output_type);
    if (o->embedding_type >= 0 && !lb_type_can_quantize((lb_type)o->embedding_type))
        return lb_set_error(LB_ERR_INVALID_ARG, "export: bad --embedding-type %d",
                            o->embedding_type);
    if (o->n_meta_kv < 0 || (o->n_meta_kv > 0 && !o->meta_kv))
        return lb_set_error(LB_ERR_INVALID_ARG, "export: bad extra metadata (%d pairs)",
                            o->n_meta_kv);
    for (int i = 0; i < o->n_meta_kv; i++) {
        const char *k = o->meta_kv[2 * i], *v = o->meta_kv[2 * i + 1];
        if (!k || !v || strncmp(k, "lowbit.", 7) != 0 || strlen(k) > LB_GGUF_MAX_KEY_LEN)
            return lb_set_error(LB_ERR_INVALID_ARG,
                                "export: extra metadata key '%.100s' (keys must start "
                                "with 'lowbit.', values must not be NULL)",
                                k ? k : "(null)");
    }
    if (!lb_is_dir(in_path))
        return lb_set_error(LB_ERR_NOT_FOUND, "export: %s is not a checkpoint directory "
                            "(config.json + safetensors)", in_path);
    ex_ctx *c = calloc(1, sizeof *c);
    if (!c) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    c->plan = calloc(1, sizeof *c->plan);
    c->dir = lb_strdup(in_path);
    c->name = o->name ? lb_strdup(o->name) : default_name(in_path);
    c->meta_kv = o->meta_kv;
    c->n_meta_kv = o->n_meta_kv;
    lb_status s = LB_OK;
    if (!c->plan || !c->dir || !c->name) s = lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    if (s == LB_OK) s = lb_model_config_load_dir(in_path, &c->cfg);
    if (s == LB_OK) {
        switch (c->cfg.arch) {
        case LB_ARCH_LLAMA:
        case LB_ARCH_MISTRAL: snprintf(c->arch, sizeof c->arch, "llama"); c->permute = true; break;
        case LB_ARCH_QWEN2: snprintf(c->arch, sizeof c->arch, "qwen2"); break;
        case LB_ARCH_QWEN3: snprintf(c->arch, sizeof c->arch, "qwen3"); break;
        default: s = ex_arch_name(c); /* ex_arch.c */
        }
    }
    lb_export_plan *p = c->plan;
    if (s == LB_OK) {
        snprintf(p->arch, sizeof p->arch, "%s", c->arch);
        snprintf(p->hf_arch, sizeof p->hf_arch, "%s", c->cfg.arch_name);
        if (o->qtype) {
            s = lb_export_qtype_parse(o->qtype, &p->qtype);
            p->has_qtype = s == LB_OK;
        }
    }
    if (s == LB_OK) s = parse_rules(c, o->rules, o->n_rules);
    if (s == LB_OK && c->n_rules && o->mode == LB_EXPORT_MODE_DIRECT)
        s = lb_set_error(LB_ERR_INVALID_ARG, "export: module rules need --mode auto, mixed "
                         "or dequantize (direct maps every module as it is)");
    if (s == LB_OK) s = ex_fp8_detect(c); /* FP8 input: not GPTQ */
    if (s == LB_OK && !c->fp8_state) s = ex_bnb_detect(c); /* bitsandbytes: not GPTQ */
    if (s == LB_OK && !c->fp8_state && !c->bnb_state) s = ex_gptq_detect(c);
    if (s == LB_OK && !c->gptq && o->mode == LB_EXPORT_MODE_DIRECT)
        s = lb_set_error(LB_ERR_INVALID_ARG, "export --mode direct: %s is not a GPTQ "
                         "checkpoint (use auto or dequantize)", in_path);
    if (s == LB_OK) {
        p->gptq = c->gptq;
        p->awq = c->gptq_state &&
                 ((const lb_gptq_qconfig *)c->gptq_state)->format == LB_GPTQ_FORMAT_AWQ;
        p->mode = o->mode == LB_EXPORT_MODE_AUTO
                      ? (c->gptq ? LB_EXPORT_MODE_MIXED : LB_EXPORT_MODE_DEQUANTIZE)
                      : o->mode;
        if (!c->gptq && p->mode == LB_EXPORT_MODE_MIXED && !c->n_rules && !o->qtype)
            p->mode = LB_EXPORT_MODE_DEQUANTIZE;
        s = ex_vocab_load(in_path, ex_arch_is_ext(c) ? ex_arch_vocab_arch(c) : c->arch,
                          c->cfg.vocab_size, &c->vocab);
    }
    if (s == LB_OK) {
        snprintf(p->tokenizer_model, sizeof p->tokenizer_model, "%s", c->vocab.model);
        snprintf(p->tokenizer_pre, sizeof p->tokenizer_pre, "%s", c->vocab.pre);
        if (c->vocab.note[0])
            snprintf(p->notes, sizeof p->notes, "%s", c->vocab.note);
        snprintf(p->tokenizer_warning, sizeof p->tokenizer_warning, "%s", c->vocab.warning);
    }
    if (s == LB_OK && !o->vocab_only) s = open_weights(in_path, &c->st);
    if (s == LB_OK && !o->vocab_only) s = list_tensors(c);
    if (s == LB_OK && !o->vocab_only) {
        /* convert_hf_to_gguf "auto": the first 2-D tensor's dtype */
        c->default_float = LB_TYPE_F16;
        for (size_t i = 0; i < c->n; i++)
            if ((c->t[i].kind == EX_SRC_DENSE || c->t[i].kind == EX_SRC_STACK) &&
                c->t[i].info.n_dims >= 2) {
                if (c->t[i].info.src_type == LB_TYPE_BF16) c->default_float = LB_TYPE_BF16;
                break;
            }
        s = assign_types(c, o);
    } else if (s == LB_OK) {
        c->default_float = LB_TYPE_F16;
    }
    if (s == LB_OK) {
        p->file_type = choose_ftype(c);
        p->n_tensors = c->n;
        p->tensors = calloc(c->n ? c->n : 1, sizeof *p->tensors);
        if (!p->tensors) s = lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    }
    if (s == LB_OK) {
        for (size_t i = 0; i < c->n; i++) {
            p->tensors[i] = c->t[i].info;
            p->n_route[c->t[i].info.route]++;
            int64_t ne = 1;
            for (int d = 0; d < c->t[i].info.n_dims; d++) ne *= c->t[i].info.shape[d];
            p->n_params += (uint64_t)ne;
            p->data_bytes += c->t[i].info.nbytes;
        }
        /* requested types that could not be used, and what was written */
        int by_type[LB_TYPE_COUNT_] = {0};
        lb_type asked = (lb_type)-1;
        bool one_asked = true;
        for (size_t i = 0; i < c->n; i++) {
            const lb_export_tensor *e = &c->t[i].info;
            if (e->type == e->wanted_type) continue;
            p->n_substituted++;
            by_type[e->type]++;
            if ((int)asked < 0) asked = e->wanted_type;
            else if (asked != e->wanted_type) one_asked = false;
        }
        if (p->n_substituted) {
            size_t l = strlen(p->notes);
            snprintf(p->notes + l, sizeof p->notes - l, "%s%d tensor%s could not take the type "
                     "asked for (%s; rows not a multiple of its block) and %s written as",
                     l ? "; " : "", p->n_substituted, p->n_substituted == 1 ? "" : "s",
                     one_asked ? lb_type_name(asked) : "several types",
                     p->n_substituted == 1 ? "is" : "are");
            for (int ty = 0; ty < LB_TYPE_COUNT_; ty++) {
                if (!by_type[ty]) continue;
                l = strlen(p->notes);
                snprintf(p->notes + l, sizeof p->notes - l, " %s (%d)", lb_type_name((lb_type)ty),
                         by_type[ty]);
            }
            if (p->has_qtype && p->file_type != p->qtype.ftype) {
                l = strlen(p->notes);
                snprintf(p->notes + l, sizeof p->notes - l, "; general.file_type says %s, not %s",
                         lb_ftype_name(p->file_type), lb_export_qtype_name(p->qtype));
            }
        }
        if (c->tied_note[0]) {
            size_t l = strlen(p->notes);
            snprintf(p->notes + l, sizeof p->notes - l, "%s%s", l ? "; " : "", c->tied_note);
        }
    }
    if (s != LB_OK) {
        ex_ctx_free(c);
        return s;
    }
    *out = c;
    return LB_OK;
}

void lb_export_plan_free(lb_export_plan *plan) {
    if (!plan) return;
    free(plan->tensors);
    free(plan);
}

lb_status lb_export_plan_make(const char *in_path, const lb_export_opts *opts,
                              lb_export_plan **out) {
    if (!out) return lb_set_error(LB_ERR_INVALID_ARG, "export: NULL plan output");
    *out = NULL;
    ex_ctx *c;
    LB_TRY(ex_ctx_open(in_path, opts, &c));
    lb_status s = ex_plan_layout(c, opts ? opts->vocab_only : false);
    if (s == LB_OK) {
        *out = c->plan;
        c->plan = NULL;
    }
    ex_ctx_free(c);
    return s;
}
