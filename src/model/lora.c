/*
 * LoRA adapters (lowbit/lora.h): PEFT and llama.cpp GGUF readers, checks
 * against the base model, q/k row (un)permutation, application, writers.
 *
 * References: peft 0.x tuners/lora (LoraLayer.update_layer: scaling =
 * lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora; forward
 * result += lora_B(lora_A(x)) * scaling), llama.cpp 0.7.0
 * src/llama-adapter.cpp (llama_adapter_lora_init_impl: general.type
 * "adapter", adapter.type "lora", adapter.lora.alpha, lora_a ne [in, r],
 * lora_b ne [r, out]; scale = user_scale * alpha / rank, or user_scale
 * when alpha is 0) and convert_lora_to_gguf.py (names blk.N.*.weight.lora_a
 * / lora_b; LlamaModel.permute applied to lora_b of q and k).
 */
#include "lowbit/lora.h"
#include "lowbit/file.h"
#include "lowbit/gguf.h"
#include "lowbit/safetensors.h"
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct lb_lora {
    char name[128];
    int n_layers;
    int32_t n_heads, n_kv_heads, head_dim;
    lb_rope_mode rope_mode; /* q/k B row order held (the base's)          */
    int r;
    float alpha;
    bool rslora;
    lb_lora_linear *lin;    /* [n_layers][LB_LINEAR_COUNT]                */
};

/* GGUF base names of the linears (llama.cpp LLM_TENSOR_*). */
static const char *const k_gguf_names[LB_LINEAR_COUNT] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
    "ffn_down"};
/* short PEFT module names */
static const char *const k_short[LB_LINEAR_COUNT] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
    "down_proj"};

/* ------------------------------------------------------------------------ */
/* Kernel choice                                                             */
/* ------------------------------------------------------------------------ */

void lb_lora_apply_avx2(const lb_lora_linear *l, const float *x, float *y,
                        float scale, float *tmp);

typedef void (*lora_fn)(const lb_lora_linear *, const float *, float *, float,
                        float *);
static lora_fn g_lora_fn = lb_lora_apply_ref;
static pthread_once_t g_lora_once = PTHREAD_ONCE_INIT;

static void lora_pick(void) {
    const lb_cpu_features *f = lb_cpu_get();
    const char *force = getenv("LB_FORCE_REF");
    if (force && *force && strcmp(force, "0")) return;
    if (f->avx2 && f->fma && f->f16c) g_lora_fn = lb_lora_apply_avx2;
}

void lb_lora_apply(const lb_lora_linear *l, const float *x, float *y,
                   float scale, float *tmp) {
    pthread_once(&g_lora_once, lora_pick);
    g_lora_fn(l, x, y, scale, tmp);
}

void lb_lora_set_apply_rows(const lb_lora_set *set, int layer,
                            lb_linear_id which, const float *X, size_t ldx,
                            float *Y, size_t ldy, size_t t0, size_t t1) {
    if (!set || set->n <= 0) return;
    float tmp[LB_LORA_MAX_RANK];
    for (int k = 0; k < set->n; k++) {
        const lb_lora_linear *l = lb_lora_get(set->a[k], layer, which);
        if (!l || l->rank == 0) continue;
        const float s = set->scale[k] * l->scale;
        for (size_t t = t0; t < t1; t++)
            lb_lora_apply(l, X + t * ldx, Y + t * ldy, s, tmp);
    }
}

bool lb_lora_set_layer_active(const lb_lora_set *set, int layer) {
    if (!set) return false;
    for (int k = 0; k < set->n; k++)
        for (int i = 0; i < LB_LINEAR_COUNT; i++) {
            const lb_lora_linear *l = lb_lora_get(set->a[k], layer, (lb_linear_id)i);
            if (l && l->rank) return true;
        }
    return false;
}

/* ------------------------------------------------------------------------ */
/* Adapter object                                                            */
/* ------------------------------------------------------------------------ */

static lb_status lora_new(const char *name, const lb_model_config *cfg,
                          lb_lora **out) {
    *out = NULL;
    lb_lora *a = calloc(1, sizeof *a);
    if (!a) return lb_set_error(LB_ERR_NOMEM, "lora: out of memory");
    snprintf(a->name, sizeof a->name, "%s", name ? name : "lora");
    a->n_layers = cfg->n_layers;
    a->n_heads = cfg->n_heads;
    a->n_kv_heads = cfg->n_kv_heads;
    a->head_dim = cfg->head_dim;
    a->rope_mode = cfg->rope_mode;
    a->lin = calloc((size_t)LB_MAX(cfg->n_layers, 1) * LB_LINEAR_COUNT,
                    sizeof *a->lin);
    if (!a->lin) {
        free(a);
        return lb_set_error(LB_ERR_NOMEM, "lora: out of memory");
    }
    *out = a;
    return LB_OK;
}

void lb_lora_free(lb_lora *a) {
    if (!a) return;
    for (int i = 0; i < a->n_layers * LB_LINEAR_COUNT; i++) {
        lb_free((void *)a->lin[i].A);
        lb_free((void *)a->lin[i].B);
    }
    free(a->lin);
    free(a);
}

const char *lb_lora_name(const lb_lora *a) { return a->name; }
float lb_lora_alpha(const lb_lora *a) { return a->alpha; }
int lb_lora_rank(const lb_lora *a) { return a->r; }
bool lb_lora_rslora(const lb_lora *a) { return a->rslora; }
int lb_lora_n_layers(const lb_lora *a) { return a->n_layers; }

const lb_lora_linear *lb_lora_get(const lb_lora *a, int layer,
                                  lb_linear_id which) {
    if (!a || layer < 0 || layer >= a->n_layers || (unsigned)which >= LB_LINEAR_COUNT)
        return NULL;
    return &a->lin[(size_t)layer * LB_LINEAR_COUNT + which];
}

int64_t lb_lora_n_params(const lb_lora *a) {
    int64_t n = 0;
    for (int i = 0; i < a->n_layers * LB_LINEAR_COUNT; i++)
        n += a->lin[i].rank * (a->lin[i].in + a->lin[i].out);
    return n;
}

size_t lb_lora_bytes(const lb_lora *a) {
    size_t n = 0;
    for (int i = 0; i < a->n_layers * LB_LINEAR_COUNT; i++)
        n += (size_t)(a->lin[i].rank * (a->lin[i].in + a->lin[i].out)) *
             (a->lin[i].type == LB_TYPE_F16 ? 2 : 4);
    return n;
}

static float lin_scale(const lb_lora *a, int64_t rank) {
    if (a->alpha == 0.0f) return 1.0f;
    return a->rslora ? a->alpha / sqrtf((float)rank) : a->alpha / (float)rank;
}

/* Expected [out, in] of linear i under cfg. */
static void lin_shape(const lb_model_config *c, int i, int64_t *out,
                      int64_t *in) {
    const int64_t dim = c->hidden_size, qd = (int64_t)c->n_heads * c->head_dim,
                  kvd = (int64_t)c->n_kv_heads * c->head_dim,
                  ff = c->intermediate_size;
    switch (i) {
    case LB_LINEAR_Q: *out = qd; *in = dim; break;
    case LB_LINEAR_K:
    case LB_LINEAR_V: *out = kvd; *in = dim; break;
    case LB_LINEAR_O: *out = dim; *in = qd; break;
    case LB_LINEAR_GATE:
    case LB_LINEAR_UP: *out = ff; *in = dim; break;
    default: *out = dim; *in = ff; break;
    }
}

/* Row p of the llama.cpp (interleaved) order reads row src_row(p) of the HF
 * order: LlamaModel.permute, per head: new (h, i, j) <- old (h, j, i),
 * i < hd/2, j < 2. */
static int64_t hf_row_of_llama(int64_t p, int64_t hd) {
    const int64_t h = p / hd, r = p % hd, i = r / 2, j = r % 2;
    return h * hd + j * (hd / 2) + i;
}

/* Copy B [out, rank] rows from src (row order `from`) into dst (row order
 * `to`) for q/k; other linears copy straight. es: element size. */
static void copy_rows(const lb_lora *a, int which, lb_rope_mode from,
                      lb_rope_mode to, const uint8_t *src, uint8_t *dst,
                      int64_t out, size_t row_bytes) {
    const bool qk = which == LB_LINEAR_Q || which == LB_LINEAR_K;
    if (!qk || from == to || a->head_dim < 2) {
        memcpy(dst, src, (size_t)out * row_bytes);
        return;
    }
    for (int64_t p = 0; p < out; p++) {
        const int64_t h = hf_row_of_llama(p, a->head_dim);
        if (to == LB_ROPE_NORM) /* HF -> llama */
            memcpy(dst + (size_t)p * row_bytes, src + (size_t)h * row_bytes, row_bytes);
        else /* llama -> HF */
            memcpy(dst + (size_t)h * row_bytes, src + (size_t)p * row_bytes, row_bytes);
    }
}

/* Convert a factor tensor to the held type (F32, or F16 when both factors
 * are F16), checking finiteness; dst from lb_alloc. */
static lb_status factor_to(const lb_tensor *t, lb_type to, const char *tname,
                           void **dst) {
    const int64_t n = lb_tensor_nelements(t);
    *dst = lb_alloc((size_t)LB_MAX(n, 1) * (to == LB_TYPE_F16 ? 2 : 4));
    if (!*dst) return lb_set_error(LB_ERR_NOMEM, "lora: out of memory for %s", tname);
    const uint8_t *s = t->data;
    for (int64_t i = 0; i < n; i++) {
        float v;
        uint16_t h = 0;
        switch (t->type) {
        case LB_TYPE_F32: memcpy(&v, s + 4 * i, 4); break;
        case LB_TYPE_F16: memcpy(&h, s + 2 * i, 2); v = lb_f16_to_f32(h); break;
        default: memcpy(&h, s + 2 * i, 2); v = lb_bf16_to_f32(h); break;
        }
        if (!isfinite(v)) {
            lb_free(*dst);
            *dst = NULL;
            return lb_set_error(LB_ERR_FORMAT, "lora: tensor %s: non-finite "
                                "value at element %lld", tname, (long long)i);
        }
        if (to == LB_TYPE_F16)
            memcpy((uint8_t *)*dst + 2 * i, &h, 2);
        else
            ((float *)*dst)[i] = v;
    }
    return LB_OK;
}

/* Install one linear from factor views A [rank, in], B [out, rank] whose q/k
 * rows are in order `from`. Checks shapes against cfg. */
static lb_status install(lb_lora *a, const lb_model_config *cfg, int layer,
                         int which, const lb_tensor *A, const lb_tensor *B,
                         const char *an, const char *bn, lb_rope_mode from) {
    int64_t out, in;
    lin_shape(cfg, which, &out, &in);
    if (A->n_dims != 2 || B->n_dims != 2)
        return lb_set_error(LB_ERR_FORMAT, "lora: %s / %s: factors must be 2-D",
                            an, bn);
    const int64_t rank = A->shape[0];
    if (rank < 1 || rank > LB_LORA_MAX_RANK)
        return lb_set_error(LB_ERR_FORMAT, "lora: %s: rank %lld outside [1, %d]",
                            an, (long long)rank, LB_LORA_MAX_RANK);
    if (A->shape[1] != in)
        return lb_set_error(LB_ERR_FORMAT, "lora: %s: expected [%lld, %lld] "
                            "(in_features %lld of the base), got [%lld, %lld]",
                            an, (long long)rank, (long long)in, (long long)in,
                            (long long)A->shape[0], (long long)A->shape[1]);
    if (B->shape[0] != out || B->shape[1] != rank)
        return lb_set_error(LB_ERR_FORMAT, "lora: %s: expected [%lld, %lld] "
                            "(out_features %lld, rank %lld of its lora_A), got "
                            "[%lld, %lld]", bn, (long long)out, (long long)rank,
                            (long long)out, (long long)rank,
                            (long long)B->shape[0], (long long)B->shape[1]);
    for (int k = 0; k < 2; k++) {
        const lb_tensor *t = k ? B : A;
        if (t->type != LB_TYPE_F32 && t->type != LB_TYPE_F16 && t->type != LB_TYPE_BF16)
            return lb_set_error(LB_ERR_UNSUPPORTED, "lora: %s: type %s (F32, F16 "
                                "or BF16)", k ? bn : an, lb_type_name((int)t->type));
    }
    lb_lora_linear *l = &a->lin[(size_t)layer * LB_LINEAR_COUNT + which];
    if (l->rank)
        return lb_set_error(LB_ERR_FORMAT, "lora: %s: layer %d %s given twice",
                            an, layer, k_short[which]);
    const lb_type ht = A->type == LB_TYPE_F16 && B->type == LB_TYPE_F16
                           ? LB_TYPE_F16 : LB_TYPE_F32;
    void *pa = NULL, *pb = NULL, *pbo = NULL;
    LB_TRY(factor_to(A, ht, an, &pa));
    lb_status s = factor_to(B, ht, bn, &pb);
    if (s == LB_OK) {
        pbo = lb_alloc((size_t)(out * rank) * (ht == LB_TYPE_F16 ? 2 : 4));
        if (!pbo) s = lb_set_error(LB_ERR_NOMEM, "lora: out of memory");
    }
    if (s != LB_OK) {
        lb_free(pa);
        lb_free(pb);
        return s;
    }
    copy_rows(a, which, from, a->rope_mode, pb, pbo, out,
              (size_t)rank * (ht == LB_TYPE_F16 ? 2 : 4));
    lb_free(pb);
    l->out = out;
    l->in = in;
    l->rank = rank;
    l->type = ht;
    l->A = pa;
    l->B = pbo;
    l->scale = lin_scale(a, rank);
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* PEFT                                                                      */
/* ------------------------------------------------------------------------ */

typedef struct peft_cfg {
    int r;
    float alpha;
    bool rslora;
    cJSON *root;
    const cJSON *targets;  /* array of strings, string (regex), or NULL */
    const cJSON *rank_pattern;
} peft_cfg;

static lb_status peft_parse_config(const char *json, size_t len, peft_cfg *pc) {
    memset(pc, 0, sizeof *pc);
    pc->root = cJSON_ParseWithLength(json, len);
    if (!pc->root || !cJSON_IsObject(pc->root)) {
        cJSON_Delete(pc->root);
        pc->root = NULL;
        return lb_set_error(LB_ERR_FORMAT, "lora: adapter_config.json is not "
                            "a JSON object");
    }
    const cJSON *c = pc->root, *v;
    v = cJSON_GetObjectItemCaseSensitive(c, "peft_type");
    if (v && (!cJSON_IsString(v) || strcmp(v->valuestring, "LORA")))
        return lb_set_error(LB_ERR_UNSUPPORTED, "lora: adapter_config.json: "
                            "peft_type %s (only LORA)",
                            cJSON_IsString(v) ? v->valuestring : "(not a string)");
    v = cJSON_GetObjectItemCaseSensitive(c, "r");
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > LB_LORA_MAX_RANK ||
        v->valuedouble != floor(v->valuedouble))
        return lb_set_error(LB_ERR_FORMAT, "lora: adapter_config.json: \"r\" "
                            "must be an integer in [1, %d]", LB_LORA_MAX_RANK);
    pc->r = (int)v->valuedouble;
    v = cJSON_GetObjectItemCaseSensitive(c, "lora_alpha");
    if (!v) {
        pc->alpha = (float)pc->r; /* PEFT default lora_alpha = 8 = default r */
    } else if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
               v->valuedouble <= 0 || v->valuedouble > 1e9) {
        return lb_set_error(LB_ERR_FORMAT, "lora: adapter_config.json: "
                            "\"lora_alpha\" must be a positive number");
    } else {
        pc->alpha = (float)v->valuedouble;
    }
    v = cJSON_GetObjectItemCaseSensitive(c, "use_rslora");
    pc->rslora = cJSON_IsTrue(v);
    v = cJSON_GetObjectItemCaseSensitive(c, "use_dora");
    if (cJSON_IsTrue(v))
        return lb_set_error(LB_ERR_UNSUPPORTED, "lora: adapter_config.json: "
                            "use_dora (DoRA) is not supported");
    v = cJSON_GetObjectItemCaseSensitive(c, "fan_in_fan_out");
    if (cJSON_IsTrue(v))
        return lb_set_error(LB_ERR_UNSUPPORTED, "lora: adapter_config.json: "
                            "fan_in_fan_out (Conv1D layers) is not supported");
    v = cJSON_GetObjectItemCaseSensitive(c, "bias");
    if (cJSON_IsString(v) && strcmp(v->valuestring, "none"))
        return lb_set_error(LB_ERR_UNSUPPORTED, "lora: adapter_config.json: "
                            "bias \"%s\" (only \"none\")", v->valuestring);
    v = cJSON_GetObjectItemCaseSensitive(c, "alpha_pattern");
    if (v && !(cJSON_IsObject(v) && !v->child) && !cJSON_IsNull(v))
        return lb_set_error(LB_ERR_UNSUPPORTED, "lora: adapter_config.json: "
                            "alpha_pattern is not supported");
    v = cJSON_GetObjectItemCaseSensitive(c, "rank_pattern");
    if (cJSON_IsObject(v)) pc->rank_pattern = v;
    v = cJSON_GetObjectItemCaseSensitive(c, "target_modules");
    if (cJSON_IsArray(v) || cJSON_IsString(v)) pc->targets = v;
    return LB_OK;
}

static bool ends_with_module(const char *path, const char *key) {
    size_t lp = strlen(path), lk = strlen(key);
    if (lk > lp) return false;
    if (strcmp(path + lp - lk, key)) return false;
    return lk == lp || path[lp - lk - 1] == '.';
}

/* Is module `which` (path like "model.layers.3.self_attn.q_proj") in
 * target_modules? A regex string is not checked here (accepted). */
static bool peft_targeted(const peft_cfg *pc, const char *path, int which) {
    if (!pc->targets || cJSON_IsString(pc->targets)) return true;
    const cJSON *e;
    cJSON_ArrayForEach(e, pc->targets) {
        if (!cJSON_IsString(e)) continue;
        if (!strcmp(e->valuestring, k_short[which]) ||
            ends_with_module(path, e->valuestring))
            return true;
    }
    return false;
}

/* Rank the config gives module `path`: rank_pattern entry or r. */
static int peft_rank(const peft_cfg *pc, const char *path) {
    if (pc->rank_pattern) {
        const cJSON *e;
        cJSON_ArrayForEach(e, pc->rank_pattern) {
            if (cJSON_IsNumber(e) && e->string && ends_with_module(path, e->string))
                return (int)e->valuedouble;
        }
    }
    return pc->r;
}

/* "<prefix>N." at the start of s with 0 <= N < 1e6 (no sscanf: its %d
 * overflow is undefined): *layer = N, returns the length consumed, or 0. */
static size_t parse_layer(const char *s, const char *prefix, int *layer) {
    const size_t pl = strlen(prefix);
    if (strncmp(s, prefix, pl)) return 0;
    size_t i = pl;
    long v = 0;
    if (s[i] < '0' || s[i] > '9') return 0;
    while (s[i] >= '0' && s[i] <= '9') {
        v = v * 10 + (s[i] - '0');
        if (v >= 1000000) return 0;
        i++;
    }
    if (s[i] != '.') return 0;
    *layer = (int)v;
    return i + 1;
}

/* Parse "NAME" of a factor: returns 0 A, 1 B, -1 not a LoRA factor; fills
 * layer, which and the module path. */
static int peft_name(const char *name, int *layer, int *which, char *path,
                     size_t path_len) {
    const char *p = name;
    if (!strncmp(p, "base_model.model.", 17)) p += 17;
    const char *suf = NULL;
    int ab = -1;
    size_t ln = strlen(p);
    if (ln > 14 && !strcmp(p + ln - 14, ".lora_A.weight")) ab = 0, suf = p + ln - 14;
    else if (ln > 14 && !strcmp(p + ln - 14, ".lora_B.weight")) ab = 1, suf = p + ln - 14;
    if (ab < 0) return -2; /* not a factor */
    size_t pl = (size_t)(suf - p);
    if (pl + 1 > path_len) return -1;
    memcpy(path, p, pl);
    path[pl] = 0;
    const size_t n = parse_layer(path, "model.layers.", layer);
    if (!n) return -1;
    for (int i = 0; i < LB_LINEAR_COUNT; i++)
        if (!strcmp(path + n, lb_linear_name((lb_linear_id)i))) {
            *which = i;
            return ab;
        }
    return -1;
}

lb_status lb_lora_load_peft_mem(const char *config_json, size_t config_len,
                                const void *st_data, size_t st_size,
                                const char *name, const lb_model_config *base,
                                lb_lora **out) {
    *out = NULL;
    peft_cfg pc;
    lb_status s = peft_parse_config(config_json, config_len, &pc);
    lb_safetensors *st = NULL;
    lb_lora *a = NULL;
    if (s == LB_OK) s = lb_st_parse(st_data, st_size, "adapter_model.safetensors", &st);
    if (s == LB_OK) s = lora_new(name, base, &a);
    if (s == LB_OK) {
        a->r = pc.r;
        a->alpha = pc.alpha;
        a->rslora = pc.rslora;
    }
    const size_t n = s == LB_OK ? lb_st_count(st) : 0;
    for (size_t i = 0; i < n && s == LB_OK; i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        int layer = -1, which = -1;
        char path[256];
        const int ab = peft_name(t->name, &layer, &which, path, sizeof path);
        if (ab == -2) {
            if (strstr(t->name, "lora_embedding") || strstr(t->name, "embed_tokens") ||
                strstr(t->name, "lm_head"))
                s = lb_set_error(LB_ERR_UNSUPPORTED, "lora: tensor %s: adapters on "
                                 "embeddings / lm_head are not supported", t->name);
            else if (strstr(t->name, "lora_magnitude"))
                s = lb_set_error(LB_ERR_UNSUPPORTED, "lora: tensor %s: DoRA is "
                                 "not supported", t->name);
            else
                s = lb_set_error(LB_ERR_FORMAT, "lora: tensor %s is not a "
                                 "lora_A/lora_B weight", t->name);
            break;
        }
        if (ab < 0) {
            s = lb_set_error(LB_ERR_FORMAT, "lora: tensor %s: not a linear of a "
                             "decoder layer (model.layers.N.{self_attn.{q,k,v,o}"
                             "_proj, mlp.{gate,up,down}_proj})", t->name);
            break;
        }
        if (layer >= base->n_layers) {
            s = lb_set_error(LB_ERR_FORMAT, "lora: tensor %s: layer %d, but the "
                             "base model has %d layers", t->name, layer,
                             base->n_layers);
            break;
        }
        if (ab == 1) continue; /* handled with its A */
        if (!peft_targeted(&pc, path, which)) {
            s = lb_set_error(LB_ERR_FORMAT, "lora: tensor %s: module %s is not in "
                             "target_modules", t->name, k_short[which]);
            break;
        }
        char bname[300];
        snprintf(bname, sizeof bname, "%.*s.lora_B.weight",
                 (int)(strlen(t->name) - 14), t->name);
        const lb_tensor *tb = lb_st_find(st, bname);
        if (!tb) {
            s = lb_set_error(LB_ERR_FORMAT, "lora: tensor %s has no %s", t->name,
                             bname);
            break;
        }
        const int want = peft_rank(&pc, path);
        if (t->n_dims == 2 && t->shape[0] != want) {
            s = lb_set_error(LB_ERR_FORMAT, "lora: tensor %s: rank %lld, but "
                             "adapter_config.json gives r = %d", t->name,
                             (long long)t->shape[0], want);
            break;
        }
        s = install(a, base, layer, which, t, tb, t->name, bname, LB_ROPE_NEOX);
    }
    /* every B needs its A */
    for (size_t i = 0; i < n && s == LB_OK; i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        int layer, which;
        char path[256];
        if (peft_name(t->name, &layer, &which, path, sizeof path) != 1) continue;
        if (!a->lin[(size_t)layer * LB_LINEAR_COUNT + which].rank)
            s = lb_set_error(LB_ERR_FORMAT, "lora: tensor %s has no lora_A",
                             t->name);
    }
    if (s == LB_OK && lb_lora_n_params(a) == 0)
        s = lb_set_error(LB_ERR_FORMAT, "lora: adapter %s has no lora_A/lora_B "
                         "tensors", a->name);
    lb_st_close(st);
    cJSON_Delete(pc.root);
    if (s != LB_OK) {
        lb_lora_free(a);
        return s;
    }
    *out = a;
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* GGUF                                                                      */
/* ------------------------------------------------------------------------ */

/* GGUF general.architecture of a base config. */
static const char *gguf_arch(const lb_model_config *c) {
    switch (c->arch) {
    case LB_ARCH_QWEN2: return "qwen2";
    case LB_ARCH_QWEN3: return "qwen3";
    default: return "llama";
    }
}

static lb_status gguf_adapter_check_str(const lb_gguf *g, const char *key,
                                        const char *want) {
    lb_gguf_str v;
    lb_status s = lb_gguf_get_str(g, key, &v);
    if (s != LB_OK)
        return lb_set_error(LB_ERR_FORMAT, "lora: %s: key %s missing or not a "
                            "string (not a llama.cpp LoRA adapter)",
                            lb_gguf_path(g), key);
    if (v.len != strlen(want) || memcmp(v.data, want, v.len))
        return lb_set_error(LB_ERR_FORMAT, "lora: %s: %s is \"%.*s\", expected "
                            "\"%s\"", lb_gguf_path(g), key,
                            (int)LB_MIN(v.len, 64), v.data, want);
    return LB_OK;
}

static lb_status lora_from_gguf(const lb_gguf *g, const char *name,
                                const lb_model_config *base, lb_lora **out) {
    *out = NULL;
    LB_TRY(gguf_adapter_check_str(g, "general.type", "adapter"));
    LB_TRY(gguf_adapter_check_str(g, "adapter.type", "lora"));
    lb_gguf_str arch;
    if (lb_gguf_get_str(g, "general.architecture", &arch) != LB_OK)
        return lb_set_error(LB_ERR_FORMAT, "lora: %s: general.architecture "
                            "missing", lb_gguf_path(g));
    const char *want = gguf_arch(base);
    if (arch.len != strlen(want) || memcmp(arch.data, want, arch.len))
        return lb_set_error(LB_ERR_FORMAT, "lora: %s: adapter for architecture "
                            "\"%.*s\", but the base model is \"%s\"",
                            lb_gguf_path(g), (int)LB_MIN(arch.len, 64), arch.data,
                            want);
    float alpha = 0.0f;
    if (lb_gguf_find_key(g, "adapter.lora.alpha") >= 0) {
        if (lb_gguf_get_f32(g, "adapter.lora.alpha", &alpha) != LB_OK ||
            !isfinite(alpha) || alpha < 0)
            return lb_set_error(LB_ERR_FORMAT, "lora: %s: adapter.lora.alpha "
                                "must be a non-negative f32", lb_gguf_path(g));
    }
    lb_lora *a;
    LB_TRY(lora_new(name, base, &a));
    a->alpha = alpha;
    const lb_rope_mode from = !strcmp(want, "llama") ? LB_ROPE_NORM : LB_ROPE_NEOX;
    lb_status s = LB_OK;
    const int64_t nt = lb_gguf_n_tensors(g);
    for (int64_t i = 0; i < nt && s == LB_OK; i++) {
        lb_tensor ta, tb;
        s = lb_gguf_tensor_view(g, i, &ta);
        if (s != LB_OK) break;
        const size_t ln = strlen(ta.name);
        const bool is_a = ln > 7 && !strcmp(ta.name + ln - 7, ".lora_a");
        const bool is_b = ln > 7 && !strcmp(ta.name + ln - 7, ".lora_b");
        if (!is_a && !is_b) {
            s = lb_set_error(LB_ERR_UNSUPPORTED, "lora: %s: tensor %s is not a "
                             "lora_a/lora_b factor", lb_gguf_path(g), ta.name);
            break;
        }
        int layer = -1, which = -1;
        char mod[64] = {0};
        const size_t nn = parse_layer(ta.name, "blk.", &layer);
        if (!nn || nn + 7 > ln) {
            s = lb_set_error(LB_ERR_UNSUPPORTED, "lora: %s: tensor %s: only "
                             "blk.N.* linears can be adapted", lb_gguf_path(g),
                             ta.name);
            break;
        }
        const size_t ml = ln - 7 - nn;
        if (ml < sizeof mod) memcpy(mod, ta.name + nn, ml);
        for (int k = 0; k < LB_LINEAR_COUNT; k++) {
            char full[64];
            snprintf(full, sizeof full, "%s.weight", k_gguf_names[k]);
            if (!strcmp(mod, full)) which = k;
        }
        if (which < 0) {
            s = lb_set_error(LB_ERR_UNSUPPORTED, "lora: %s: tensor %s: not a "
                             "linear lowbit can adapt", lb_gguf_path(g), ta.name);
            break;
        }
        if (layer >= base->n_layers) {
            s = lb_set_error(LB_ERR_FORMAT, "lora: %s: tensor %s: layer %d, but "
                             "the base model has %d layers", lb_gguf_path(g),
                             ta.name, layer, base->n_layers);
            break;
        }
        char other[300];
        snprintf(other, sizeof other, "%.*s.lora_%c", (int)(ln - 7), ta.name,
                 is_a ? 'b' : 'a');
        const int64_t j = lb_gguf_find_tensor(g, other);
        if (j < 0) {
            s = lb_set_error(LB_ERR_FORMAT, "lora: %s: tensor %s has no %s",
                             lb_gguf_path(g), ta.name, other);
            break;
        }
        if (is_b) continue;
        if ((s = lb_gguf_tensor_view(g, j, &tb)) != LB_OK) break;
        s = install(a, base, layer, which, &ta, &tb, ta.name, tb.name, from);
        if (s == LB_OK) a->r = (int)LB_MAX(a->r, ta.shape[0]);
    }
    if (s == LB_OK && lb_lora_n_params(a) == 0)
        s = lb_set_error(LB_ERR_FORMAT, "lora: %s: no lora_a/lora_b tensors",
                         lb_gguf_path(g));
    if (s != LB_OK) {
        lb_lora_free(a);
        return s;
    }
    *out = a;
    return LB_OK;
}

lb_status lb_lora_load_gguf_mem(const void *data, size_t size, const char *name,
                                const lb_model_config *base, lb_lora **out) {
    *out = NULL;
    lb_gguf *g;
    LB_TRY(lb_gguf_open_memory(data, size, name ? name : "<memory>", &g));
    lb_status s = lora_from_gguf(g, name, base, out);
    lb_gguf_close(g);
    return s;
}

/* ------------------------------------------------------------------------ */
/* From files                                                                */
/* ------------------------------------------------------------------------ */

static void base_name_of(const char *path, char *out, size_t n) {
    size_t l = strlen(path);
    while (l > 1 && path[l - 1] == '/') l--;
    size_t b = l;
    while (b > 0 && path[b - 1] != '/') b--;
    size_t len = l - b;
    if (len > 5 && !strncmp(path + l - 5, ".gguf", 5)) len -= 5;
    if (len > 19 && !strncmp(path + b + len - 19, "adapter_config.json", 19)) {
        /* adapter_config.json given: name of its directory */
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%.*s", (int)b, path);
        if (b == 0) snprintf(tmp, sizeof tmp, ".");
        base_name_of(tmp, out, n);
        return;
    }
    snprintf(out, n, "%.*s", (int)LB_MIN(len, n - 1), path + b);
}

lb_status lb_lora_load(const char *path, const lb_model *base, lb_lora **out) {
    *out = NULL;
    char name[128];
    base_name_of(path, name, sizeof name);
    if (lb_is_dir(path) || (strlen(path) >= 19 &&
                            !strcmp(path + strlen(path) - 19, "adapter_config.json"))) {
        char *dir = NULL;
        if (lb_is_dir(path)) {
            dir = strdup(path);
        } else {
            dir = strdup(path);
            if (dir) {
                char *sl = strrchr(dir, '/');
                if (sl) *sl = 0; else strcpy(dir, ".");
            }
        }
        if (!dir) return lb_set_error(LB_ERR_NOMEM, "lora: out of memory");
        char *cp = lb_path_join(dir, "adapter_config.json");
        char *sp = lb_path_join(dir, "adapter_model.safetensors");
        char *json = NULL;
        size_t jl = 0;
        lb_mapped_file mf;
        memset(&mf, 0, sizeof mf);
        lb_status s = cp && sp ? LB_OK : lb_set_error(LB_ERR_NOMEM, "lora: out of memory");
        if (s == LB_OK) s = lb_read_file(cp, 1 << 24, &json, &jl);
        if (s == LB_OK && !lb_is_file(sp))
            s = lb_set_error(LB_ERR_NOT_FOUND, "lora: %s: no such file (PEFT "
                             "adapters in .bin form are not read)", sp);
        if (s == LB_OK) s = lb_map_file(sp, &mf);
        if (s == LB_OK)
            s = lb_lora_load_peft_mem(json, jl, mf.data, mf.size, name,
                                      &base->config, out);
        if (mf.data) lb_unmap_file(&mf);
        free(json);
        free(cp);
        free(sp);
        free(dir);
        return s;
    }
    LB_TRY(lb_check_regular_file(path));
    lb_gguf *g;
    LB_TRY(lb_gguf_open(path, &g));
    lb_status s = lora_from_gguf(g, name, &base->config, out);
    lb_gguf_close(g);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Building (EoRA)                                                           */
/* ------------------------------------------------------------------------ */

lb_status lb_lora_create(const char *name, const lb_model_config *cfg, int r,
                         float alpha, lb_lora **out) {
    LB_TRY(lora_new(name, cfg, out));
    (*out)->r = r;
    (*out)->alpha = alpha;
    return LB_OK;
}

lb_status lb_lora_set_linear(lb_lora *a, int layer, lb_linear_id which,
                             int64_t out, int64_t in, int64_t rank,
                             const float *A, const float *B) {
    if (!lb_lora_get(a, layer, which) || rank < 1 || rank > LB_LORA_MAX_RANK)
        return lb_set_error(LB_ERR_RANGE, "lora: layer %d linear %d rank %lld",
                            layer, (int)which, (long long)rank);
    lb_lora_linear *l = &a->lin[(size_t)layer * LB_LINEAR_COUNT + which];
    float *pa = lb_alloc((size_t)(rank * in) * 4), *pb = lb_alloc((size_t)(out * rank) * 4);
    if (!pa || !pb) {
        lb_free(pa);
        lb_free(pb);
        return lb_set_error(LB_ERR_NOMEM, "lora: out of memory");
    }
    memcpy(pa, A, (size_t)(rank * in) * 4);
    memcpy(pb, B, (size_t)(out * rank) * 4);
    lb_free((void *)l->A);
    lb_free((void *)l->B);
    l->out = out;
    l->in = in;
    l->rank = rank;
    l->type = LB_TYPE_F32;
    l->A = pa;
    l->B = pb;
    l->scale = lin_scale(a, rank);
    return LB_OK;
}

lb_status lb_lora_convert(lb_lora *a, lb_type type) {
    if (type != LB_TYPE_F32 && type != LB_TYPE_F16)
        return lb_set_error(LB_ERR_INVALID_ARG, "lora: convert to %s (F32 or F16)",
                            lb_type_name((int)type));
    for (int li = 0; li < a->n_layers * LB_LINEAR_COUNT; li++) {
        lb_lora_linear *l = &a->lin[li];
        if (!l->rank || l->type == type) continue;
        const size_t n[2] = {(size_t)(l->rank * l->in), (size_t)(l->out * l->rank)};
        void *nb[2] = {lb_alloc(n[0] * (type == LB_TYPE_F16 ? 2 : 4)),
                       lb_alloc(n[1] * (type == LB_TYPE_F16 ? 2 : 4))};
        lb_status s = nb[0] && nb[1] ? LB_OK : lb_set_error(LB_ERR_NOMEM, "lora: out of memory");
        for (int k = 0; k < 2 && s == LB_OK; k++) {
            const void *src = k ? l->B : l->A;
            for (size_t i = 0; i < n[k] && s == LB_OK; i++) {
                if (type == LB_TYPE_F16) {
                    const float v = ((const float *)src)[i];
                    if (fabsf(v) > 65504.0f)
                        s = lb_set_error(LB_ERR_RANGE, "lora: layer %d %s: factor "
                                         "value %g beyond the F16 range", li / LB_LINEAR_COUNT,
                                         k_short[li % LB_LINEAR_COUNT], (double)v);
                    ((uint16_t *)nb[k])[i] = lb_f32_to_f16(v);
                } else {
                    ((float *)nb[k])[i] = lb_f16_to_f32(((const uint16_t *)src)[i]);
                }
            }
        }
        if (s != LB_OK) {
            lb_free(nb[0]);
            lb_free(nb[1]);
            return s;
        }
        lb_free((void *)l->A);
        lb_free((void *)l->B);
        l->A = nb[0];
        l->B = nb[1];
        l->type = type;
    }
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* Writers                                                                   */
/* ------------------------------------------------------------------------ */

/* B of linear l in row order `to` (malloc'd copy). */
static void *b_in_order(const lb_lora *a, int which, const lb_lora_linear *l,
                        lb_rope_mode to) {
    const size_t es = l->type == LB_TYPE_F16 ? 2 : 4;
    void *p = malloc((size_t)(l->out * l->rank) * es);
    if (p) copy_rows(a, which, a->rope_mode, to, l->B, p, l->out, (size_t)l->rank * es);
    return p;
}

lb_status lb_lora_write_gguf(const lb_lora *a, const lb_model_config *cfg,
                             const char *path) {
    const char *arch = gguf_arch(cfg);
    const lb_rope_mode to = !strcmp(arch, "llama") ? LB_ROPE_NORM : LB_ROPE_NEOX;
    /* llama.cpp: scale = alpha / rank per tensor */
    float alpha = a->alpha;
    if (a->rslora) {
        int64_t r0 = 0;
        for (int i = 0; i < a->n_layers * LB_LINEAR_COUNT; i++) {
            if (!a->lin[i].rank) continue;
            if (r0 && a->lin[i].rank != r0)
                return lb_set_error(LB_ERR_UNSUPPORTED, "lora export: rsLoRA "
                                    "adapter with different ranks per linear "
                                    "has no llama.cpp alpha");
            r0 = a->lin[i].rank;
        }
        alpha = a->alpha * sqrtf((float)r0);
    }
    lb_gguf_writer *w;
    LB_TRY(lb_gguf_writer_create(&w));
    lb_status s = lb_gguf_writer_set_architecture(w, arch);
    if (s == LB_OK) s = lb_gguf_writer_set_str(w, "general.type", "adapter");
    if (s == LB_OK) s = lb_gguf_writer_set_str(w, "general.name", a->name);
    if (s == LB_OK) s = lb_gguf_writer_set_str(w, "adapter.type", "lora");
    if (s == LB_OK) s = lb_gguf_writer_set_f32(w, "adapter.lora.alpha", alpha);
    char nm[96];
    for (int L = 0; L < a->n_layers && s == LB_OK; L++)
        for (int i = 0; i < LB_LINEAR_COUNT && s == LB_OK; i++) {
            const lb_lora_linear *l = lb_lora_get(a, L, (lb_linear_id)i);
            if (!l->rank) continue;
            int64_t sa[2] = {l->rank, l->in}, sb[2] = {l->out, l->rank};
            snprintf(nm, sizeof nm, "blk.%d.%s.weight.lora_a", L, k_gguf_names[i]);
            s = lb_gguf_writer_add_tensor(w, nm, l->type, 2, sa);
            snprintf(nm, sizeof nm, "blk.%d.%s.weight.lora_b", L, k_gguf_names[i]);
            if (s == LB_OK) s = lb_gguf_writer_add_tensor(w, nm, l->type, 2, sb);
        }
    if (s == LB_OK) s = lb_gguf_writer_open(w, path);
    for (int L = 0; L < a->n_layers && s == LB_OK; L++)
        for (int i = 0; i < LB_LINEAR_COUNT && s == LB_OK; i++) {
            const lb_lora_linear *l = lb_lora_get(a, L, (lb_linear_id)i);
            if (!l->rank) continue;
            const size_t es = l->type == LB_TYPE_F16 ? 2 : 4;
            s = lb_gguf_writer_write_tensor(w, NULL, l->A, (size_t)(l->rank * l->in) * es);
            void *b = s == LB_OK ? b_in_order(a, i, l, to) : NULL;
            if (s == LB_OK && !b) s = lb_set_error(LB_ERR_NOMEM, "lora export: out of memory");
            if (s == LB_OK)
                s = lb_gguf_writer_write_tensor(w, NULL, b, (size_t)(l->out * l->rank) * es);
            free(b);
        }
    if (s == LB_OK) s = lb_gguf_writer_finish(w);
    lb_gguf_writer_free(w);
    return s;
}

lb_status lb_lora_write_peft(const lb_lora *a, const char *dir,
                             const char *base_model) {
    if (!lb_is_dir(dir) && mkdir(dir, 0777) != 0 && errno != EEXIST)
        return lb_set_error(LB_ERR_IO, "lora: cannot create directory %s: %s",
                            dir, strerror(errno));
    lb_st_writer *w;
    LB_TRY(lb_st_writer_create(&w));
    lb_status s = lb_st_writer_set_metadata(w, "format", "pt");
    void **bufs = calloc((size_t)a->n_layers * LB_LINEAR_COUNT + 1, sizeof *bufs);
    if (!bufs) s = lb_set_error(LB_ERR_NOMEM, "lora: out of memory");
    bool used[LB_LINEAR_COUNT] = {0};
    cJSON *cfg = cJSON_CreateObject(), *rp = cJSON_CreateObject();
    char nm[160];
    for (int L = 0; L < a->n_layers && s == LB_OK; L++)
        for (int i = 0; i < LB_LINEAR_COUNT && s == LB_OK; i++) {
            const lb_lora_linear *l = lb_lora_get(a, L, (lb_linear_id)i);
            if (!l->rank) continue;
            used[i] = true;
            if (l->rank != a->r) {
                snprintf(nm, sizeof nm, "model.layers.%d.%s", L,
                         lb_linear_name((lb_linear_id)i));
                cJSON_AddNumberToObject(rp, nm, (double)l->rank);
            }
            int64_t sa[2] = {l->rank, l->in}, sb[2] = {l->out, l->rank};
            snprintf(nm, sizeof nm, "base_model.model.model.layers.%d.%s.lora_A.weight",
                     L, lb_linear_name((lb_linear_id)i));
            s = lb_st_writer_add(w, nm, l->type, 2, sa, l->A);
            void *b = b_in_order(a, i, l, LB_ROPE_NEOX);
            bufs[(size_t)L * LB_LINEAR_COUNT + i] = b;
            if (s == LB_OK && !b) s = lb_set_error(LB_ERR_NOMEM, "lora: out of memory");
            snprintf(nm, sizeof nm, "base_model.model.model.layers.%d.%s.lora_B.weight",
                     L, lb_linear_name((lb_linear_id)i));
            if (s == LB_OK) s = lb_st_writer_add(w, nm, l->type, 2, sb, b);
        }
    char *sp = lb_path_join(dir, "adapter_model.safetensors");
    char *cp = lb_path_join(dir, "adapter_config.json");
    if (s == LB_OK && (!sp || !cp || !cfg || !rp)) s = lb_set_error(LB_ERR_NOMEM, "lora: out of memory");
    if (s == LB_OK) s = lb_st_writer_write_file(w, sp);
    char *text = NULL;
    if (s == LB_OK) {
        cJSON *tm = cJSON_AddArrayToObject(cfg, "target_modules");
        for (int i = 0; i < LB_LINEAR_COUNT; i++)
            if (used[i]) cJSON_AddItemToArray(tm, cJSON_CreateString(k_short[i]));
        cJSON_AddStringToObject(cfg, "peft_type", "LORA");
        cJSON_AddStringToObject(cfg, "task_type", "CAUSAL_LM");
        cJSON_AddNumberToObject(cfg, "r", a->r);
        cJSON_AddNumberToObject(cfg, "lora_alpha", a->alpha);
        cJSON_AddBoolToObject(cfg, "use_rslora", a->rslora);
        cJSON_AddStringToObject(cfg, "bias", "none");
        cJSON_AddBoolToObject(cfg, "fan_in_fan_out", false);
        cJSON_AddNumberToObject(cfg, "lora_dropout", 0.0);
        cJSON_AddStringToObject(cfg, "base_model_name_or_path", base_model ? base_model : "");
        cJSON_AddItemToObject(cfg, "rank_pattern", rp);
        rp = NULL;
        cJSON_AddItemToObject(cfg, "alpha_pattern", cJSON_CreateObject());
        text = cJSON_Print(cfg);
        if (!text) s = lb_set_error(LB_ERR_NOMEM, "lora: out of memory");
    }
    if (s == LB_OK) {
        lb_atomic_file af;
        s = lb_atomic_open(cp, &af);
        if (s == LB_OK) s = lb_atomic_write(&af, text, strlen(text));
        if (s == LB_OK) s = lb_atomic_write(&af, "\n", 1);
        if (s == LB_OK) s = lb_atomic_commit(&af);
        else lb_atomic_abort(&af);
    }
    free(text);
    cJSON_Delete(cfg);
    cJSON_Delete(rp);
    free(sp);
    free(cp);
    if (bufs)
        for (int i = 0; i < a->n_layers * LB_LINEAR_COUNT; i++) free(bufs[i]);
    free(bufs);
    lb_st_writer_free(w);
    return s;
}
