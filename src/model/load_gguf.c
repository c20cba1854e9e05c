/*
 * GGUF model loader: llama.cpp's "llama", "qwen2" and "qwen3" architectures
 * (Mistral files use "llama") into the engine's lb_model, through the
 * builder of model_internal.h. Weights stay in the file mapping in their
 * GGUF type; token embedding rows are converted one at a time with
 * lb_dequantize_row.
 *
 * Sources followed (llama.cpp 0.7.0): src/llama-arch.cpp (key and tensor
 * names), src/llama-model.cpp load_hparams / load_tensors (which keys are
 * required, defaults, per-layer arrays, optional tensors: output falls back
 * to token_embd, attention biases and rope_freqs are optional) and the
 * RoPE type per architecture (LLAMA_ROPE_TYPE_NORM for llama,
 * LLAMA_ROPE_TYPE_NEOX for qwen2/qwen3). convert_hf_to_gguf.py permutes the
 * q/k rows of llama checkpoints so that NORM rotation (adjacent pairs) on
 * them equals transformers' rotate_half on the original rows.
 *
 * Every hyper-parameter is treated as hostile: types and ranges are checked
 * (lb_gguf getters, lb_model_config_validate) and every tensor shape is
 * checked against them by the builder before any use.
 */
#include "model/model_internal.h"
#include "lowbit/file.h"
#include "lowbit/gguf.h"
#include "lowbit/kernels.h"
#include "lowbit/quants.h"
#include "core/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* Hyper-parameters                                                          */
/* ------------------------------------------------------------------------ */

typedef struct arch_info {
    const char *gguf_name;
    lb_arch arch;
    lb_rope_mode rope_mode;
} arch_info;

static const arch_info k_archs[] = {
    {"llama", LB_ARCH_LLAMA, LB_ROPE_NORM},
    {"qwen2", LB_ARCH_QWEN2, LB_ROPE_NEOX},
    {"qwen3", LB_ARCH_QWEN3, LB_ROPE_NEOX},
    /* issue 13 (load_gguf_ext.c); Mixtral is "llama" + expert_count */
    {"gemma2", LB_ARCH_GEMMA2, LB_ROPE_NEOX},
    {"gemma3", LB_ARCH_GEMMA3, LB_ROPE_NEOX},
    {"phi3", LB_ARCH_PHI3, LB_ROPE_NEOX},
    {"qwen3moe", LB_ARCH_QWEN3_MOE, LB_ROPE_NEOX},
    {"qwen2moe", LB_ARCH_QWEN2_MOE, LB_ROPE_NEOX},
};

/* "<arch>.<suffix>" */
static const char *akey(char *buf, size_t n, const char *arch,
                        const char *suffix) {
    snprintf(buf, n, "%s.%s", arch, suffix);
    return buf;
}

/* true when key is absent; *s: LB_OK, or LB_ERR_NOT_FOUND when required. */
static bool key_missing(const lb_gguf *g, const char *key, bool required,
                        lb_status *s) {
    *s = LB_OK;
    if (lb_gguf_find_key(g, key) >= 0) return false;
    if (required)
        *s = lb_set_error(LB_ERR_NOT_FOUND, "%s: required key '%s' is missing",
                          lb_gguf_path(g), key);
    return true;
}

/* An integer key in [lo, hi]; absent -> *out = def (or LB_ERR_NOT_FOUND
 * when required). */
static lb_status get_int(const lb_gguf *g, const char *key, bool required,
                         int64_t def, int64_t lo, int64_t hi, int64_t *out) {
    lb_status s;
    if (key_missing(g, key, required, &s)) {
        *out = def;
        return s;
    }
    int64_t v;
    s = lb_gguf_get_i64(g, key, &v);
    if (s != LB_OK) return lb_error_context(s, "%s", lb_gguf_path(g));
    if (v < lo || v > hi)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: key '%s' = %lld is out of range [%lld, %lld]",
                            lb_gguf_path(g), key, (long long)v, (long long)lo,
                            (long long)hi);
    *out = v;
    return LB_OK;
}

/* A per-layer hyper-parameter: llama.cpp accepts a scalar or an array of
 * n_layers integers (get_key_or_arr). lowbit's config has one value for
 * all layers, so an array must hold equal values. */
static lb_status get_layer_int(const lb_gguf *g, const char *key,
                               bool required, int64_t def, int64_t lo,
                               int64_t hi, int64_t n_layers, int64_t *out) {
    int64_t idx = lb_gguf_find_key(g, key);
    const lb_gguf_value *v = idx >= 0 ? lb_gguf_kv_value(g, idx) : NULL;
    if (!v || v->type != LB_GGUF_TYPE_ARRAY)
        return get_int(g, key, required, def, lo, hi, out);
    if (v->n != (uint64_t)n_layers)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: key '%s' is an array of %llu values, expected "
                            "one per layer (%lld)",
                            lb_gguf_path(g), key, (unsigned long long)v->n,
                            (long long)n_layers);
    int64_t first = 0;
    for (uint64_t i = 0; i < v->n; i++) {
        lb_gguf_value e;
        int64_t x;
        lb_status s = lb_gguf_arr_elem(v, i, &e);
        if (s == LB_OK) s = lb_gguf_value_i64(&e, &x);
        if (s != LB_OK)
            return lb_error_context(s, "%s: key '%s'[%llu]", lb_gguf_path(g),
                                    key, (unsigned long long)i);
        if (x < lo || x > hi)
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: key '%s'[%llu] = %lld is out of range "
                                "[%lld, %lld]",
                                lb_gguf_path(g), key, (unsigned long long)i,
                                (long long)x, (long long)lo, (long long)hi);
        if (i == 0) first = x;
        if (x != first)
            return lb_set_error(LB_ERR_UNSUPPORTED,
                                "%s: key '%s' differs between layers (%lld vs "
                                "%lld); lowbit needs uniform layers",
                                lb_gguf_path(g), key, (long long)first,
                                (long long)x);
    }
    *out = first;
    return LB_OK;
}

static lb_status get_float(const lb_gguf *g, const char *key, bool required,
                           double def, double *out) {
    lb_status s;
    if (key_missing(g, key, required, &s)) {
        *out = def;
        return s;
    }
    double v;
    s = lb_gguf_get_f64(g, key, &v);
    if (s != LB_OK) return lb_error_context(s, "%s", lb_gguf_path(g));
    if (!isfinite(v))
        return lb_set_error(LB_ERR_FORMAT, "%s: key '%s' is not finite",
                            lb_gguf_path(g), key);
    *out = v;
    return LB_OK;
}

/* A special token id: absent -> -1; UINT32_MAX / negative -> -1 (llama.cpp
 * writes 0xFFFFFFFF for "none"); otherwise it must be a valid id. */
static lb_status get_token_id(const lb_gguf *g, const char *key, int64_t V,
                              int32_t *out) {
    *out = -1;
    if (lb_gguf_find_key(g, key) < 0) return LB_OK;
    int64_t v;
    lb_status s = lb_gguf_get_i64(g, key, &v);
    if (s != LB_OK) return lb_error_context(s, "%s", lb_gguf_path(g));
    if (v < 0 || v == (int64_t)UINT32_MAX) return LB_OK;
    if (v >= V)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: key '%s' = %lld is not a token id (vocabulary "
                            "of %lld)",
                            lb_gguf_path(g), key, (long long)v, (long long)V);
    *out = (int32_t)v;
    return LB_OK;
}

static void add_eos(lb_model_config *c, int32_t id) {
    if (id < 0 || c->n_eos >= LB_MAX_EOS) return;
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_ids[i] == id) return;
    c->eos_token_ids[c->n_eos++] = id;
}

lb_status lb_model_config_from_gguf(const lb_gguf *g, lb_model_config *c) {
    memset(c, 0, sizeof *c);
    const char *path = lb_gguf_path(g);
    lb_gguf_str an;
    lb_status s = lb_gguf_get_str(g, LB_GGUF_KEY_ARCHITECTURE, &an);
    if (s != LB_OK) return lb_error_context(s, "%s", path);
    const arch_info *ai = NULL;
    for (size_t i = 0; i < LB_ARRAY_LEN(k_archs); i++)
        if (an.len == strlen(k_archs[i].gguf_name) &&
            memcmp(an.data, k_archs[i].gguf_name, an.len) == 0)
            ai = &k_archs[i];
    if (!ai)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: general.architecture '%.*s' is not supported "
                            "(llama, qwen2, qwen3, gemma2, gemma3, phi3, "
                            "qwen3moe, qwen2moe)",
                            path, (int)LB_MIN(an.len, 64), an.data);
    const char *a = ai->gguf_name;
    c->arch = ai->arch;
    c->rope_mode = ai->rope_mode;
    snprintf(c->arch_name, sizeof c->arch_name, "%s", a);

    char k[128];
    int64_t v, n_layers, n_heads, dim;
    /* Mixture-of-experts files share these architecture names in some
     * converters; lowbit runs dense models only. */
    LB_TRY(get_int(g, akey(k, sizeof k, a, "expert_count"), false, 0, 0,
                   1 << 20, &v));
    if (v > 0 && c->arch == LB_ARCH_LLAMA) {
        c->arch = LB_ARCH_MIXTRAL; /* llama.cpp's Mixtral files */
    } else if (v > 0 && c->arch < LB_ARCH_GEMMA2)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: %s = %lld: mixture-of-experts models are not "
                            "supported", path, k, (long long)v);
    LB_TRY(get_int(g, akey(k, sizeof k, a, "block_count"), true, 0, 1, 4096,
                   &n_layers));
    LB_TRY(get_int(g, akey(k, sizeof k, a, "embedding_length"), true, 0, 1,
                   1 << 17, &dim));
    LB_TRY(get_int(g, akey(k, sizeof k, a, "context_length"), true, 0, 1,
                   1 << 24, &v));
    c->max_position_embeddings = (int32_t)v;
    LB_TRY(get_layer_int(g, akey(k, sizeof k, a, "feed_forward_length"), true,
                         0, 1, 1 << 20, n_layers, &v));
    c->intermediate_size = (int32_t)v;
    LB_TRY(get_layer_int(g, akey(k, sizeof k, a, "attention.head_count"),
                         true, 0, 1, 4096, n_layers, &n_heads));
    LB_TRY(get_layer_int(g, akey(k, sizeof k, a, "attention.head_count_kv"),
                         false, n_heads, 1, 4096, n_layers, &v));
    c->n_kv_heads = (int32_t)v;
    c->n_layers = (int32_t)n_layers;
    c->hidden_size = (int32_t)dim;
    c->n_heads = (int32_t)n_heads;
    int64_t hd_def = dim % n_heads == 0 ? dim / n_heads : 0;
    int64_t hk, hv, n_rot;
    LB_TRY(get_int(g, akey(k, sizeof k, a, "attention.key_length"),
                   hd_def == 0, hd_def, 1, 4096, &hk));
    LB_TRY(get_int(g, akey(k, sizeof k, a, "attention.value_length"),
                   hd_def == 0, hd_def, 1, 4096, &hv));
    if (hk != hv)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: attention.key_length %lld != value_length "
                            "%lld is not supported",
                            path, (long long)hk, (long long)hv);
    c->head_dim = (int32_t)hk;
    LB_TRY(get_int(g, akey(k, sizeof k, a, "rope.dimension_count"), false, hk,
                   1, 4096, &n_rot));
    /* llama.cpp requires n_rot == head_dim for these architectures */
    if (n_rot != hk)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: rope.dimension_count %lld != head dim %lld "
                            "(partial RoPE) is not supported",
                            path, (long long)n_rot, (long long)hk);
    double eps, theta;
    LB_TRY(get_float(g, akey(k, sizeof k, a, "attention.layer_norm_rms_epsilon"),
                     true, 0, &eps));
    if (!(eps > 0 && eps < 1))
        return lb_set_error(LB_ERR_FORMAT, "%s: %s = %g is out of range (0, 1)",
                            path, k, eps);
    c->rms_norm_eps = (float)eps;
    LB_TRY(get_float(g, akey(k, sizeof k, a, "rope.freq_base"), false, 10000.0,
                     &theta));
    if (!(theta > 0 && theta < 1e12))
        return lb_set_error(LB_ERR_FORMAT, "%s: %s = %g is out of range",
                            path, k, theta);
    c->rope_theta = theta;

    /* RoPE scaling: rope.scaling.type none/linear (yarn, longrope: no);
     * llama3-style scaling arrives as the rope_freqs tensor instead. */
    c->rope_scaling = LB_ROPE_SCALING_NONE;
    c->rope_factor = 1.0;
    akey(k, sizeof k, a, "rope.scaling.type");
    if (lb_gguf_find_key(g, k) >= 0) {
        lb_gguf_str st;
        s = lb_gguf_get_str(g, k, &st);
        if (s != LB_OK) return lb_error_context(s, "%s", path);
        if (st.len == 6 && !memcmp(st.data, "linear", 6)) {
            c->rope_scaling = LB_ROPE_SCALING_LINEAR;
        } else if (!(st.len == 4 && !memcmp(st.data, "none", 4))) {
            return lb_set_error(LB_ERR_UNSUPPORTED,
                                "%s: %s '%.*s' is not supported (none, "
                                "linear)",
                                path, k, (int)LB_MIN(st.len, 32), st.data);
        }
    }
    double factor = 0;
    LB_TRY(get_float(g, akey(k, sizeof k, a, "rope.scaling.factor"), false, 0,
                     &factor));
    if (factor == 0) /* older key: rope.scale_linear */
        LB_TRY(get_float(g, akey(k, sizeof k, a, "rope.scale_linear"), false,
                         0, &factor));
    if (factor != 0 && factor != 1.0) {
        if (!(factor > 0 && factor < 1e6))
            return lb_set_error(LB_ERR_FORMAT, "%s: RoPE scaling factor %g is "
                                "out of range", path, factor);
        /* llama.cpp applies freq_scale = 1/factor unless the type is none */
        if (lb_gguf_find_key(g, akey(k, sizeof k, a, "rope.scaling.type")) < 0)
            c->rope_scaling = LB_ROPE_SCALING_LINEAR;
        if (c->rope_scaling == LB_ROPE_SCALING_LINEAR) c->rope_factor = factor;
    }
    if (c->rope_scaling == LB_ROPE_SCALING_NONE) c->rope_factor = 1.0;

    /* Vocabulary size: <arch>.vocab_size, else the tokenizer's token count,
     * else the embedding's rows. All present sources must agree. */
    int64_t V = -1, n_tok = -1;
    if (lb_gguf_find_key(g, "tokenizer.ggml.tokens") >= 0) {
        const lb_gguf_value *tv;
        uint64_t n;
        s = lb_gguf_get_arr(g, "tokenizer.ggml.tokens", LB_GGUF_TYPE_STRING,
                            &tv, &n);
        if (s != LB_OK) return lb_error_context(s, "%s", path);
        n_tok = (int64_t)LB_MIN(n, (uint64_t)INT64_MAX);
    }
    LB_TRY(get_int(g, akey(k, sizeof k, a, "vocab_size"), false, -1, 1,
                   1 << 24, &V));
    if (V > 0 && n_tok >= 0 && V != n_tok)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s = %lld but tokenizer.ggml.tokens has %lld "
                            "entries", path, k, (long long)V, (long long)n_tok);
    if (V < 0) V = n_tok;
    if (V < 0) {
        lb_tensor te;
        if (lb_gguf_get_tensor(g, "token_embd.weight", &te) == LB_OK &&
            te.n_dims == 2)
            V = te.shape[0];
    }
    if (V <= 0 || V > (1 << 24))
        return lb_set_error(LB_ERR_FORMAT, "%s: cannot determine a vocabulary "
                            "size in [1, 2^24] (no %s, tokenizer.ggml.tokens "
                            "or token_embd.weight)", path, k);
    c->vocab_size = (int32_t)V;

    c->tie_word_embeddings = lb_gguf_find_tensor(g, "output.weight") < 0;
    c->attention_bias = lb_gguf_find_tensor(g, "blk.0.attn_q.bias") >= 0 ||
                        lb_gguf_find_tensor(g, "blk.0.attn_k.bias") >= 0 ||
                        lb_gguf_find_tensor(g, "blk.0.attn_v.bias") >= 0;
    c->qk_norm = c->arch == LB_ARCH_QWEN3 ||
                 lb_gguf_find_tensor(g, "blk.0.attn_q_norm.weight") >= 0;

    int32_t id;
    LB_TRY(get_token_id(g, "tokenizer.ggml.bos_token_id", V, &id));
    c->bos_token_id = id;
    LB_TRY(get_token_id(g, "tokenizer.ggml.eos_token_id", V, &id));
    add_eos(c, id);
    LB_TRY(get_token_id(g, "tokenizer.ggml.eot_token_id", V, &id));
    add_eos(c, id);
    LB_TRY(get_token_id(g, "tokenizer.ggml.eom_token_id", V, &id));
    add_eos(c, id);

    if (c->arch >= LB_ARCH_GEMMA2) LB_TRY(lb_gguf_config_ext(g, a, c));
    s = lb_model_config_validate(c);
    if (s != LB_OK) return lb_error_context(s, "%s", path);
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

static void gguf_close_cb(void *p) { lb_gguf_close(p); }

static lb_status dequant_row_cb(lb_type type, const void *src, float *dst,
                                int64_t n) {
    return lb_dequantize_row(type, src, dst, n);
}

/* Set role from tensor `name`; absent: LB_OK when optional. */
static lb_status set_tensor(lb_model *m, const lb_gguf *g, const char *name,
                            lb_tensor_role role, int layer, bool optional) {
    int64_t i = lb_gguf_find_tensor(g, name);
    if (i < 0) {
        if (optional) return LB_OK;
        return lb_set_error(LB_ERR_NOT_FOUND, "%s: tensor '%s' not found",
                            lb_gguf_path(g), name);
    }
    lb_tensor t;
    LB_TRY(lb_gguf_tensor_view(g, i, &t));
    lb_status s = lb_model_builder_set(m, role, layer, &t);
    if (s != LB_OK) return lb_error_context(s, "%s", lb_gguf_path(g));
    return LB_OK;
}

/* The weight must have a matmul kernel (checked at load time rather than
 * at the first forward). */
static lb_status check_kernel(const lb_gguf *g, const lb_tensor *t) {
    float dummy = 0;
    lb_status s = lb_matmul(NULL, t, &dummy, &dummy, 0);
    if (s != LB_OK) return lb_error_context(s, "%s", lb_gguf_path(g));
    return LB_OK;
}

static lb_status load_rope_freqs(lb_model *m, const lb_gguf *g) {
    int64_t i = lb_gguf_find_tensor(g, "rope_freqs.weight");
    if (i < 0) return LB_OK;
    lb_tensor t;
    LB_TRY(lb_gguf_tensor_view(g, i, &t));
    int64_t half = m->config.head_dim / 2;
    if (t.type != LB_TYPE_F32 || t.n_dims != 1 || t.shape[0] != half)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor 'rope_freqs.weight': expected F32 "
                            "[%lld], got %s with %d dims",
                            lb_gguf_path(g), (long long)half,
                            lb_type_name(t.type), t.n_dims);
    float *f = lb_alloc((size_t)half * sizeof(float));
    if (!f) return lb_set_error(LB_ERR_NOMEM, "model: out of memory");
    memcpy(f, t.data, (size_t)half * sizeof(float));
    LB_TRY(lb_model_builder_own(m, f));
    for (int64_t j = 0; j < half; j++)
        if (!(f[j] > 0 && isfinite(f[j])))
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: rope_freqs.weight[%lld] = %g is not a "
                                "positive finite factor",
                                lb_gguf_path(g), (long long)j, (double)f[j]);
    t.data = f;
    t.name = "rope_freqs.weight";
    m->rope_freqs = t;
    return LB_OK;
}

/* Repack the quantized weights (lb_model_repack_weights) in place into the
 * layout the kernels stream fastest, when the weights are this loader's
 * private copy of the file: the copy's pages are rewritten, so no second
 * copy of the weights exists. The file itself is never written. */
static bool in_gguf(const void *g, const lb_tensor *t) {
    return lb_gguf_contains((const lb_gguf *)g, t->data, t->nbytes);
}

static lb_status repack_weights(lb_model *m, lb_gguf *g) {
    if (lb_gguf_set_writable(g, true) != LB_OK) {
        lb_clear_error();
        return LB_OK; /* a file mapping: row form */
    }
    lb_status s = lb_model_repack_weights(m, in_gguf, g);
    lb_status s2 = lb_gguf_set_writable(g, false);
    return s != LB_OK ? s : s2;
}

lb_status lb_model_load_gguf(const char *path, const lb_model_load_opts *opts,
                             lb_model **out) {
    *out = NULL;
    lb_gguf *g = NULL;
    LB_TRY(lb_gguf_open_ex(path, opts && opts->mmap_weights ? 0 : LB_MAP_COPY, &g));
    LB_TRY(lb_model_load_gguf_reader(g, true, opts, out));
    lb_status s = repack_weights(*out, g);
    if (s != LB_OK) {
        lb_model_free(*out);
        *out = NULL;
    }
    return s;
}

lb_status lb_model_load_gguf_reader(lb_gguf *g, bool take, const lb_model_load_opts *opts,
                                    lb_model **out) {
    *out = NULL;
    const char *path = lb_gguf_path(g);
    if (lb_gguf_n_tensors(g) == 0) {
        lb_status e = lb_set_error(LB_ERR_NOT_FOUND,
                                   "%s: the file has no tensors (a vocabulary-only "
                                   "GGUF can be used as a tokenizer, not as a model)",
                                   path);
        if (take) lb_gguf_close(g);
        return e;
    }
    lb_model_config cfg;
    lb_status s = lb_model_config_from_gguf(g, &cfg);
    if (s != LB_OK) {
        if (take) lb_gguf_close(g);
        return s;
    }
    lb_model *m = NULL;
    s = lb_model_builder_new(&cfg, &m);
    lb_model_config_clear(&cfg);
    if (s != LB_OK) {
        s = lb_error_context(s, "%s", path);
        if (take) lb_gguf_close(g);
        return s;
    }
    if (take && (s = lb_model_builder_on_free(m, gguf_close_cb, g)) != LB_OK) goto fail;
    lb_model_builder_set_dequant_row(m, dequant_row_cb);
    const lb_model_config *c = &m->config;

    s = set_tensor(m, g, "token_embd.weight", LB_ROLE_TOK_EMBD, 0, false);
    if (s == LB_OK)
        s = set_tensor(m, g, "output_norm.weight", LB_ROLE_OUTPUT_NORM, 0,
                       false);
    if (s == LB_OK)
        s = set_tensor(m, g, "output.weight", LB_ROLE_OUTPUT, 0, true);
    if (s == LB_OK) s = load_rope_freqs(m, g);
    if (s != LB_OK) goto fail;

    static const struct {
        lb_tensor_role role;
        const char *suffix;
    } per_layer[] = {
        {LB_ROLE_ATTN_NORM, "attn_norm.weight"},
        {LB_ROLE_Q, "attn_q.weight"},
        {LB_ROLE_K, "attn_k.weight"},
        {LB_ROLE_V, "attn_v.weight"},
        {LB_ROLE_O, "attn_output.weight"},
        {LB_ROLE_Q_BIAS, "attn_q.bias"},
        {LB_ROLE_K_BIAS, "attn_k.bias"},
        {LB_ROLE_V_BIAS, "attn_v.bias"},
        {LB_ROLE_Q_NORM, "attn_q_norm.weight"},
        {LB_ROLE_K_NORM, "attn_k_norm.weight"},
        {LB_ROLE_FFN_NORM, "ffn_norm.weight"},
        {LB_ROLE_GATE, "ffn_gate.weight"},
        {LB_ROLE_UP, "ffn_up.weight"},
        {LB_ROLE_DOWN, "ffn_down.weight"},
    };
    if (c->arch >= LB_ARCH_GEMMA2) s = lb_gguf_load_layers_ext(m, g, opts);
    for (int l = 0; l < c->n_layers && s == LB_OK && c->arch < LB_ARCH_GEMMA2;
         l++) {
        for (size_t i = 0; i < LB_ARRAY_LEN(per_layer) && s == LB_OK; i++) {
            lb_tensor_role r = per_layer[i].role;
            if (!lb_role_used(c, r)) continue;
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", l, per_layer[i].suffix);
            s = set_tensor(m, g, name, r, l, false);
        }
        if (s == LB_OK && opts &&
            !lb_progress_report(&opts->progress, "load", (uint64_t)l + 1,
                                (uint64_t)c->n_layers))
            s = lb_set_error(LB_ERR_CANCELLED, "load cancelled");
    }
    if (s == LB_OK) s = lb_model_builder_finish(m);
    for (int l = 0; l < c->n_layers && s == LB_OK; l++)
        for (int i = 0; i < LB_LINEAR_COUNT && s == LB_OK; i++)
            if (m->layers[l].w[i].data) s = check_kernel(g, &m->layers[l].w[i]);
    for (int l = 0; l < c->n_layers && s == LB_OK; l++) {
        const lb_layer_weights *L = &m->layers[l];
        for (int i = 0; L->exp && i < 3 * c->n_experts && s == LB_OK; i++)
            s = check_kernel(g, &L->exp[i]);
        for (int i = 0; i < 3 && s == LB_OK; i++)
            if (L->shexp[i].data) s = check_kernel(g, &L->shexp[i]);
        if (s == LB_OK && L->ffn_gate_inp.data) s = check_kernel(g, &L->ffn_gate_inp);
    }
    if (s == LB_OK) s = check_kernel(g, &m->output);
    if (s == LB_OK && !lb_type_can_dequantize(m->tok_embd.type))
        s = lb_set_error(LB_ERR_UNSUPPORTED,
                         "%s: token_embd.weight has type %s, which lowbit "
                         "cannot convert to f32", path,
                         lb_type_name(m->tok_embd.type));
    if (s != LB_OK) goto fail;
    *out = m;
    return LB_OK;
fail:
    lb_model_free(m);
    return s;
}
