/*
 * File types and their per-tensor type mixes.
 *
 * Follows llama.cpp 0.7.0's src/llama-quant.cpp (llama_tensor_get_type and
 * helpers; see lowbit/ftype.h), restricted to the file types lowbit writes:
 * the branches that only concern IQ* types or an importance matrix are left
 * out. Order of the checks and the quirks (substring matches, the
 * per-kind tensor counters) are kept, since they decide the types.
 */
#include "lowbit/ftype.h"
#include "lowbit/gguf.h"
#include "core/internal.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

/* lb_ftype and gguf.h's lb_gguf_file_type are both llama.cpp's llama_ftype
 * values; keep them in step. */
static_assert(LB_FTYPE_ALL_F32 == (int)LB_GGUF_FTYPE_ALL_F32, "ftype F32");
static_assert(LB_FTYPE_MOSTLY_F16 == (int)LB_GGUF_FTYPE_MOSTLY_F16, "ftype F16");
static_assert(LB_FTYPE_MOSTLY_Q4_0 == (int)LB_GGUF_FTYPE_MOSTLY_Q4_0, "ftype Q4_0");
static_assert(LB_FTYPE_MOSTLY_Q4_1 == (int)LB_GGUF_FTYPE_MOSTLY_Q4_1, "ftype Q4_1");
static_assert(LB_FTYPE_MOSTLY_Q8_0 == (int)LB_GGUF_FTYPE_MOSTLY_Q8_0, "ftype Q8_0");
static_assert(LB_FTYPE_MOSTLY_Q5_0 == (int)LB_GGUF_FTYPE_MOSTLY_Q5_0, "ftype Q5_0");
static_assert(LB_FTYPE_MOSTLY_Q5_1 == (int)LB_GGUF_FTYPE_MOSTLY_Q5_1, "ftype Q5_1");
static_assert(LB_FTYPE_MOSTLY_Q2_K == (int)LB_GGUF_FTYPE_MOSTLY_Q2_K, "ftype Q2_K");
static_assert(LB_FTYPE_MOSTLY_Q3_K_S == (int)LB_GGUF_FTYPE_MOSTLY_Q3_K_S, "ftype Q3_K_S");
static_assert(LB_FTYPE_MOSTLY_Q3_K_M == (int)LB_GGUF_FTYPE_MOSTLY_Q3_K_M, "ftype Q3_K_M");
static_assert(LB_FTYPE_MOSTLY_Q3_K_L == (int)LB_GGUF_FTYPE_MOSTLY_Q3_K_L, "ftype Q3_K_L");
static_assert(LB_FTYPE_MOSTLY_Q4_K_S == (int)LB_GGUF_FTYPE_MOSTLY_Q4_K_S, "ftype Q4_K_S");
static_assert(LB_FTYPE_MOSTLY_Q4_K_M == (int)LB_GGUF_FTYPE_MOSTLY_Q4_K_M, "ftype Q4_K_M");
static_assert(LB_FTYPE_MOSTLY_Q5_K_S == (int)LB_GGUF_FTYPE_MOSTLY_Q5_K_S, "ftype Q5_K_S");
static_assert(LB_FTYPE_MOSTLY_Q5_K_M == (int)LB_GGUF_FTYPE_MOSTLY_Q5_K_M, "ftype Q5_K_M");
static_assert(LB_FTYPE_MOSTLY_Q6_K == (int)LB_GGUF_FTYPE_MOSTLY_Q6_K, "ftype Q6_K");
static_assert(LB_FTYPE_MOSTLY_BF16 == (int)LB_GGUF_FTYPE_MOSTLY_BF16, "ftype BF16");

/* ------------------------------------------------------------------------ */
/* Names                                                                     */
/* ------------------------------------------------------------------------ */

static const struct {
    lb_ftype ft;
    const char *name;
    lb_type base;
} k_ftypes[] = {
    {LB_FTYPE_ALL_F32, "F32", LB_TYPE_F32},
    {LB_FTYPE_MOSTLY_F16, "F16", LB_TYPE_F16},
    {LB_FTYPE_MOSTLY_BF16, "BF16", LB_TYPE_BF16},
    {LB_FTYPE_MOSTLY_Q4_0, "Q4_0", LB_TYPE_Q4_0},
    {LB_FTYPE_MOSTLY_Q4_1, "Q4_1", LB_TYPE_Q4_1},
    {LB_FTYPE_MOSTLY_Q5_0, "Q5_0", LB_TYPE_Q5_0},
    {LB_FTYPE_MOSTLY_Q5_1, "Q5_1", LB_TYPE_Q5_1},
    {LB_FTYPE_MOSTLY_Q8_0, "Q8_0", LB_TYPE_Q8_0},
    {LB_FTYPE_MOSTLY_Q2_K, "Q2_K", LB_TYPE_Q2_K},
    {LB_FTYPE_MOSTLY_Q3_K_S, "Q3_K_S", LB_TYPE_Q3_K},
    {LB_FTYPE_MOSTLY_Q3_K_M, "Q3_K_M", LB_TYPE_Q3_K},
    {LB_FTYPE_MOSTLY_Q3_K_L, "Q3_K_L", LB_TYPE_Q3_K},
    {LB_FTYPE_MOSTLY_Q4_K_S, "Q4_K_S", LB_TYPE_Q4_K},
    {LB_FTYPE_MOSTLY_Q4_K_M, "Q4_K_M", LB_TYPE_Q4_K},
    {LB_FTYPE_MOSTLY_Q5_K_S, "Q5_K_S", LB_TYPE_Q5_K},
    {LB_FTYPE_MOSTLY_Q5_K_M, "Q5_K_M", LB_TYPE_Q5_K},
    {LB_FTYPE_MOSTLY_Q6_K, "Q6_K", LB_TYPE_Q6_K},
};

/* llama-quantize's aliases (tools/quantize/quantize.cpp, 0.7.0 --help) */
static const struct {
    const char *name;
    lb_ftype ft;
} k_aliases[] = {
    {"Q3_K", LB_FTYPE_MOSTLY_Q3_K_M},
    {"Q4_K", LB_FTYPE_MOSTLY_Q4_K_M},
    {"Q5_K", LB_FTYPE_MOSTLY_Q5_K_M},
};

static int ftype_index(int v) {
    for (size_t i = 0; i < LB_ARRAY_LEN(k_ftypes); i++)
        if ((int)k_ftypes[i].ft == v) return (int)i;
    return -1;
}

bool lb_ftype_is_valid(int v) { return ftype_index(v) >= 0; }

const char *lb_ftype_name(lb_ftype ft) {
    const int i = ftype_index((int)ft);
    return i < 0 ? "?" : k_ftypes[i].name;
}

int lb_ftype_default_type(lb_ftype ft) {
    const int i = ftype_index((int)ft);
    return i < 0 ? -1 : (int)k_ftypes[i].base;
}

static bool str_ieq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (toupper((unsigned char)*a) != toupper((unsigned char)*b)) return false;
    return *a == *b;
}

lb_status lb_ftype_from_name(const char *name, lb_ftype *out) {
    if (!name || !out) return lb_set_error(LB_ERR_INVALID_ARG, "ftype: NULL argument");
    for (size_t i = 0; i < LB_ARRAY_LEN(k_ftypes); i++)
        if (str_ieq(name, k_ftypes[i].name)) {
            *out = k_ftypes[i].ft;
            return LB_OK;
        }
    for (size_t i = 0; i < LB_ARRAY_LEN(k_aliases); i++)
        if (str_ieq(name, k_aliases[i].name)) {
            *out = k_aliases[i].ft;
            return LB_OK;
        }
    if (*name >= '0' && *name <= '9') {
        char *end;
        errno = 0;
        const long v = strtol(name, &end, 10);
        if (!errno && *end == '\0' && v <= INT_MAX && lb_ftype_is_valid((int)v)) {
            *out = (lb_ftype)v;
            return LB_OK;
        }
    }
    return lb_set_error(LB_ERR_UNSUPPORTED, "ftype: unknown or unsupported file type \"%.64s\"",
                        name);
}

/* ------------------------------------------------------------------------ */
/* Tensor classification (tensor_get_category, tensor_allows_quantization)   */
/* ------------------------------------------------------------------------ */

typedef enum cat {
    CAT_TOKEN_EMBD,
    CAT_ATTN_Q,
    CAT_ATTN_V,
    CAT_ATTN_K,
    CAT_ATTN_QKV,
    CAT_ATTN_KV_B,
    CAT_ATTN_OUTPUT,
    CAT_FFN_UP,
    CAT_FFN_GATE,
    CAT_FFN_DOWN,
    CAT_OUTPUT,
    CAT_OTHER
} cat;

static bool has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* First match wins, in llama.cpp's order (substring tests, so e.g.
 * "ffn_down_exps.weight" is FFN_DOWN). */
static cat category_of(const char *name) {
    if (strcmp(name, "output.weight") == 0) return CAT_OUTPUT;
    if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0)
        return CAT_TOKEN_EMBD;
    if (has(name, "attn_qkv.weight")) return CAT_ATTN_QKV;
    if (has(name, "attn_kv_b.weight")) return CAT_ATTN_KV_B;
    if (has(name, "attn_v.weight")) return CAT_ATTN_V;
    if (has(name, "attn_k.weight")) return CAT_ATTN_K;
    if (has(name, "attn_q.weight")) return CAT_ATTN_Q;
    if (has(name, "attn_output.weight")) return CAT_ATTN_OUTPUT;
    if (has(name, "ffn_up")) return CAT_FFN_UP;
    if (has(name, "ffn_gate")) return CAT_FFN_GATE;
    if (has(name, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

static bool cat_is_attn_v(cat c) {
    return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B;
}

/* ggml_n_dims: 1 + index of the last ne[i] > 1 (ne = GGUF order, innermost
 * first), at least 1. shape[] is outermost-first. */
static int ggml_n_dims_of(const lb_tensor *t) {
    for (int i = LB_MAX_DIMS - 1; i >= 1; i--) {
        const int s = t->n_dims - 1 - i; /* shape index of ne[i] */
        if (s >= 0 && t->shape[s] > 1) return i + 1;
    }
    return 1;
}

/* Substrings that exclude a tensor from quantization (llama.cpp keeps
 * these small or special tensors as they are). */
static const char *const k_keep_substr[] = {
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
    "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
    "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight",
    "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight",
    "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
    "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
    ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd",
    ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
};

static bool allows_quantization(const lb_tensor *t, const lb_ftype_params *p) {
    if (ggml_n_dims_of(t) < 2) return false;
    const char *name = t->name;
    const size_t len = strlen(name);
    /* llama.cpp: name.rfind("weight") == name.size() - 6. Besides names
     * ending in "weight", this holds for any 5-character name (size() - 6
     * wraps to npos, which rfind returns when it finds nothing); kept, as
     * llama-quantize does quantize such a tensor (tests/data/kquants). */
    bool q;
    if (len < 6) {
        q = len == 5;
    } else {
        const char *last = NULL;
        for (const char *s = strstr(name, "weight"); s; s = strstr(s + 1, "weight")) last = s;
        q = last == name + len - 6;
    }
    for (size_t i = 0; q && i < LB_ARRAY_LEN(k_keep_substr); i++)
        if (has(name, k_keep_substr[i])) q = false;
    if (p->keep_output && strcmp(name, "output.weight") == 0) q = false;
    if (strcmp(name, "position_embd.weight") == 0 || strcmp(name, "token_types.weight") == 0)
        q = false;
    return q;
}

/* ------------------------------------------------------------------------ */
/* Mix rules (llama_tensor_get_type_impl)                                    */
/* ------------------------------------------------------------------------ */

typedef struct qstate {
    lb_ftype ftype;
    const lb_ftype_model *m;
    bool falcon, type_70b, tied;
    int n_gqa, n_expert;
    int n_attention_wv, i_attention_wv;
    int n_ffn_down, i_ffn_down, i_ffn_gate, i_ffn_up;
    int n_fallback;
} qstate;

static bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 ||
           (i_layer - n_layers / 8) % 3 == 2;
}

/* "blk.%d." as sscanf reads it: optional white space and sign, digits. */
static bool parse_layer(const char *name, int *out) {
    if (strncmp(name, "blk.", 4) != 0) return false;
    const char *s = name + 4;
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (end == s) return false;
    *out = errno || v > INT_MAX ? INT_MAX : v < INT_MIN ? INT_MIN : (int)v;
    return true;
}

/* layer_info: the counter for dense models; the name's layer for MoE. */
static lb_status layer_info(const qstate *qs, int counter, const char *name, int *i_layer) {
    *i_layer = counter;
    if (qs->n_expert > 1) {
        if (!parse_layer(name, i_layer))
            return lb_set_error(LB_ERR_FORMAT, "ftype: failed to determine layer for tensor %s",
                                name);
        if (*i_layer < 0 || *i_layer >= qs->n_ffn_down)
            return lb_set_error(LB_ERR_FORMAT, "ftype: bad layer %d for tensor %s (must be in [0, %d))",
                                *i_layer, name, qs->n_ffn_down);
    }
    return LB_OK;
}

static lb_status mix_type(qstate *qs, const lb_ftype_params *p, const lb_tensor *t, cat c,
                          lb_type *io) {
    lb_type nt = *io;
    const lb_ftype ft = qs->ftype;
    const int64_t nx = lb_tensor_cols(t);
    if (c == CAT_OUTPUT || (qs->tied && c == CAT_TOKEN_EMBD)) {
        if (p->output_type >= 0) {
            nt = (lb_type)p->output_type;
        } else {
            const int qk = lb_type_get_traits((int)nt)->blck_size;
            if (qs->falcon || nx % qk != 0) nt = LB_TYPE_Q8_0;
            else if (nt != LB_TYPE_Q8_0) nt = LB_TYPE_Q6_K;
        }
    } else if (c == CAT_TOKEN_EMBD) {
        if (p->token_embd_type >= 0) nt = (lb_type)p->token_embd_type;
    } else if (cat_is_attn_v(c)) {
        const int i = qs->i_attention_wv, n = qs->n_attention_wv;
        if (ft == LB_FTYPE_MOSTLY_Q2_K) nt = qs->n_gqa >= 4 ? LB_TYPE_Q4_K : LB_TYPE_Q3_K;
        else if (ft == LB_FTYPE_MOSTLY_Q3_K_M) nt = i < 2 ? LB_TYPE_Q5_K : LB_TYPE_Q4_K;
        else if (ft == LB_FTYPE_MOSTLY_Q3_K_L) nt = LB_TYPE_Q5_K;
        else if ((ft == LB_FTYPE_MOSTLY_Q4_K_M || ft == LB_FTYPE_MOSTLY_Q5_K_M) && use_more_bits(i, n))
            nt = LB_TYPE_Q6_K;
        else if (ft == LB_FTYPE_MOSTLY_Q4_K_S && i < 4) nt = LB_TYPE_Q5_K;
        /* 70B: 8 heads share attn_v, which is 8x smaller than attn_q */
        if (qs->type_70b && (nt == LB_TYPE_Q3_K || nt == LB_TYPE_Q4_K)) nt = LB_TYPE_Q5_K;
        if (qs->m->n_expert == 8) nt = LB_TYPE_Q8_0;
        qs->i_attention_wv++;
    } else if (c == CAT_ATTN_K) {
        if (qs->m->n_expert == 8) nt = LB_TYPE_Q8_0;
    } else if (c == CAT_FFN_DOWN) {
        int il;
        LB_TRY(layer_info(qs, qs->i_ffn_down, t->name, &il));
        const int n = qs->n_ffn_down;
        if (ft == LB_FTYPE_MOSTLY_Q2_K) {
            nt = LB_TYPE_Q3_K;
        } else if (ft == LB_FTYPE_MOSTLY_Q3_K_M) {
            nt = il < n / 16 ? LB_TYPE_Q5_K
                 : !qs->falcon || use_more_bits(il, n) ? LB_TYPE_Q4_K
                                                       : LB_TYPE_Q3_K;
        } else if (ft == LB_FTYPE_MOSTLY_Q3_K_L) {
            nt = qs->falcon ? LB_TYPE_Q4_K : LB_TYPE_Q5_K;
        } else if (ft == LB_FTYPE_MOSTLY_Q4_K_M) {
            if (qs->falcon)
                nt = il < n / 16 ? LB_TYPE_Q6_K : use_more_bits(il, n) ? LB_TYPE_Q5_K : LB_TYPE_Q4_K;
            else if (use_more_bits(il, n))
                nt = LB_TYPE_Q6_K;
        } else if (ft == LB_FTYPE_MOSTLY_Q5_K_M && use_more_bits(il, n)) {
            nt = LB_TYPE_Q6_K;
        } else if (ft == LB_FTYPE_MOSTLY_Q4_K_S && !qs->falcon && il < n / 8) {
            nt = LB_TYPE_Q5_K;
        }
        qs->i_ffn_down++;
    } else if (c == CAT_ATTN_OUTPUT) {
        if (!qs->falcon) {
            if (qs->m->n_expert == 8) {
                if (ft == LB_FTYPE_MOSTLY_Q2_K || ft == LB_FTYPE_MOSTLY_Q3_K_S ||
                    ft == LB_FTYPE_MOSTLY_Q3_K_M || ft == LB_FTYPE_MOSTLY_Q4_K_S ||
                    ft == LB_FTYPE_MOSTLY_Q4_K_M)
                    nt = LB_TYPE_Q5_K;
            } else {
                if (ft == LB_FTYPE_MOSTLY_Q2_K) nt = LB_TYPE_Q3_K;
                else if (ft == LB_FTYPE_MOSTLY_Q3_K_M) nt = LB_TYPE_Q4_K;
                else if (ft == LB_FTYPE_MOSTLY_Q3_K_L) nt = LB_TYPE_Q5_K;
            }
        } else if (ft == LB_FTYPE_MOSTLY_Q3_K_L) {
            nt = LB_TYPE_Q4_K;
        }
    } else if (c == CAT_FFN_GATE) {
        int il; /* only the IQ3_XS rule uses the layer; the check still applies */
        LB_TRY(layer_info(qs, qs->i_ffn_gate, t->name, &il));
        qs->i_ffn_gate++;
    } else if (c == CAT_FFN_UP) {
        int il;
        LB_TRY(layer_info(qs, qs->i_ffn_up, t->name, &il));
        qs->i_ffn_up++;
    }
    *io = nt;
    return LB_OK;
}

/* tensor_type_fallback: a row length that is not a multiple of the type's
 * block size. llama.cpp 0.7.0 maps the K-quants to a 32-block legacy type
 * and a legacy type to itself, then to F16 if 32 does not divide the row
 * (observed: a 172-wide ffn_down in a Q4_0 file becomes F16). */
static lb_type fallback(qstate *qs, const lb_tensor *t, lb_type target) {
    const int64_t ncols = lb_tensor_cols(t);
    const lb_type_traits *tr = lb_type_get_traits((int)target);
    if (!tr || ncols % tr->blck_size == 0) return target;
    qs->n_fallback++;
    lb_type r;
    switch (target) {
    case LB_TYPE_Q2_K: case LB_TYPE_Q3_K: r = LB_TYPE_Q4_0; break;
    case LB_TYPE_Q4_K: r = LB_TYPE_Q5_0; break;
    case LB_TYPE_Q5_K: r = LB_TYPE_Q5_1; break;
    case LB_TYPE_Q6_K: r = LB_TYPE_Q8_0; break;
    default: r = target; break;
    }
    if (ncols % lb_type_get_traits((int)r)->blck_size != 0) r = LB_TYPE_F16;
    return r;
}

/* llama_tensor_get_type: the outer wrapper. */
static lb_status tensor_type(qstate *qs, const lb_ftype_params *p, const lb_tensor *t, cat c,
                             lb_type base, lb_type *out) {
    if (!allows_quantization(t, p)) {
        *out = t->type;
        return LB_OK;
    }
    if (p->token_embd_type >= 0 && c == CAT_TOKEN_EMBD) {
        *out = (lb_type)p->token_embd_type;
        return LB_OK;
    }
    if (p->output_type >= 0 && c == CAT_OUTPUT) {
        *out = (lb_type)p->output_type;
        return LB_OK;
    }
    lb_type nt = base;
    if (lb_type_get_traits((int)base)->quantized) {
        if (!p->pure) LB_TRY(mix_type(qs, p, t, c, &nt));
        nt = fallback(qs, t, nt);
    }
    *out = nt;
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* Driver                                                                    */
/* ------------------------------------------------------------------------ */

/* llama_model_loader's weights_map order (weight_name_comparer): layer
 * number from "blk.%d." (-1 without), then the name (byte order). */
typedef struct order_item {
    int layer;
    size_t idx;
    const char *name;
} order_item;

static int order_cmp(const void *a, const void *b) {
    const order_item *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    const int c = strcmp(x->name, y->name);
    if (c) return c;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static bool str_eq(const char *a, const char *b) { return a && strcmp(a, b) == 0; }

lb_status lb_ftype_tensor_types(lb_ftype ftype, const lb_ftype_model *model,
                                const lb_ftype_params *params, const lb_tensor *tensors,
                                size_t n, lb_type *types_out, int *n_fallback_out) {
    if (!model || (n && (!tensors || !types_out)))
        return lb_set_error(LB_ERR_INVALID_ARG, "ftype: NULL argument");
    if (model->n_layer < 0 || model->n_head < 0 || model->n_head_kv < 0 || model->n_expert < 0)
        return lb_set_error(LB_ERR_INVALID_ARG, "ftype: negative model hyper-parameter");
    const int base = lb_ftype_default_type(ftype);
    if (base < 0)
        return lb_set_error(LB_ERR_UNSUPPORTED, "ftype: unsupported file type %d", (int)ftype);
    const lb_ftype_params defaults = {false, false, -1, -1};
    const lb_ftype_params *p = params ? params : &defaults;
    if ((p->output_type >= 0 && !lb_type_get_traits(p->output_type)) ||
        (p->token_embd_type >= 0 && !lb_type_get_traits(p->token_embd_type)))
        return lb_set_error(LB_ERR_INVALID_ARG, "ftype: unknown output/token_embd type override");
    for (size_t i = 0; i < n; i++) {
        const lb_tensor *t = &tensors[i];
        if (!t->name)
            return lb_set_error(LB_ERR_INVALID_ARG, "ftype: tensor %zu has no name", i);
        if (t->n_dims < 1 || t->n_dims > LB_MAX_DIMS)
            return lb_set_error(LB_ERR_INVALID_ARG, "ftype: tensor %s has %d dims", t->name,
                                t->n_dims);
        for (int d = 0; d < t->n_dims; d++)
            if (t->shape[d] < 0)
                return lb_set_error(LB_ERR_INVALID_ARG, "ftype: tensor %s has a negative dim",
                                    t->name);
        if (!lb_type_get_traits((int)t->type))
            return lb_set_error(LB_ERR_INVALID_ARG, "ftype: tensor %s has unknown type %d",
                                t->name, (int)t->type);
    }

    qstate qs;
    memset(&qs, 0, sizeof qs);
    qs.ftype = ftype;
    qs.m = model;
    const char *arch = model->arch ? model->arch : "llama";
    qs.falcon = str_eq(arch, "falcon");
    qs.n_gqa = model->n_head_kv ? model->n_head / model->n_head_kv : 0;
    qs.n_expert = model->n_expert > 1 ? model->n_expert : 1;
    /* llm_type 70B as llama.cpp's load_hparams sets it for lowbit's
     * architectures: llama with 80 layers and GQA, qwen2 with 80 layers. */
    qs.type_70b = model->n_layer == 80 &&
                  ((str_eq(arch, "llama") && model->n_head != model->n_head_kv) ||
                   str_eq(arch, "qwen2"));
    qs.n_ffn_down = model->n_layer;
    qs.tied = true;
    for (size_t i = 0; i < n; i++) {
        const cat c = category_of(tensors[i].name);
        if (cat_is_attn_v(c)) qs.n_attention_wv++;
        if (c == CAT_OUTPUT) qs.tied = false;
    }

    order_item *ord = malloc((n ? n : 1) * sizeof *ord);
    if (!ord) return lb_set_error(LB_ERR_NOMEM, "ftype: out of memory (%zu tensors)", n);
    for (size_t i = 0; i < n; i++) {
        ord[i].idx = i;
        ord[i].name = tensors[i].name;
        if (!parse_layer(tensors[i].name, &ord[i].layer)) ord[i].layer = -1;
    }
    qsort(ord, n, sizeof *ord, order_cmp);
    lb_status st = LB_OK;
    for (size_t k = 0; k < n && st == LB_OK; k++) {
        const lb_tensor *t = &tensors[ord[k].idx];
        st = tensor_type(&qs, p, t, category_of(t->name), (lb_type)base, &types_out[ord[k].idx]);
    }
    free(ord);
    if (st == LB_OK && n_fallback_out) *n_fallback_out = qs.n_fallback;
    return st;
}
