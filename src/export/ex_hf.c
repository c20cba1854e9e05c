/*
 * ex_hf.c — a GGUF file back to a Hugging Face checkpoint directory
 * (lowbit/export_hf.h): weights dequantized and un-permuted, config.json
 * from the `<arch>.*` keys, tokenizer.json / tokenizer_config.json from
 * tokenizer.ggml.*.
 *
 * Sources followed: transformers 5.12 integrations/ggml.py (GGUF tokenizer
 * conversion: merges rebuilt from SentencePiece scores, the Llama
 * normalizer/decoder) and modeling_gguf_pytorch_utils.py (tensor names, the
 * reverse q/k permutation); llama.cpp 0.7.0 convert_hf_to_gguf.py for what
 * is being undone; tokenizers 0.23's tokenizer.json schema.
 */
#include "export/ex_hf_internal.h"
#include "export/export_internal.h"
#include "lowbit/export_hf.h"
#include "lowbit/file.h"
#include "lowbit/gguf.h"
#include "lowbit/quants.h"
#include "lowbit/safetensors.h"
#include "model/model_internal.h"
#include "core/internal.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void lb_export_hf_opts_default(lb_export_hf_opts *o) {
    memset(o, 0, sizeof *o);
    o->dtype = -1;
}

/* ---- output directory ---------------------------------------------------- */

lb_status ex_hf_write_json(const char *dir, const char *name, const cJSON *j) {
    char *txt = cJSON_Print(j);
    if (!txt) return lb_set_error(LB_ERR_NOMEM, "out of memory (%s)", name);
    size_t n = strlen(txt);
    txt[n] = '\n'; /* cJSON_Print's terminator becomes the final newline */
    lb_status s = lb_write_file_in(dir, name, txt, n + 1);
    free(txt);
    return s;
}

/* ---- names ------------------------------------------------------------------ */

typedef struct name_map {
    const char *gguf; /* suffix after "blk.N." (layer) or the whole name */
    const char *hf;   /* after "model.layers.N." or the whole name       */
} name_map;

static const name_map k_global[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
static const name_map k_layer[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

lb_status ex_hf_name(const char *gguf_name, int n_layers, char *out, size_t n, int *qk,
                     int *layer_out) {
    *qk = 0;
    *layer_out = -1;
    for (size_t i = 0; i < sizeof k_global / sizeof k_global[0]; i++)
        if (!strcmp(gguf_name, k_global[i].gguf)) {
            snprintf(out, n, "%s", k_global[i].hf);
            return LB_OK;
        }
    int layer = -1, used = 0;
    if (sscanf(gguf_name, "blk.%d.%n", &layer, &used) == 1 && used > 0 && layer >= 0 &&
        layer < n_layers) {
        const char *suf = gguf_name + used;
        for (size_t i = 0; i < sizeof k_layer / sizeof k_layer[0]; i++)
            if (!strcmp(suf, k_layer[i].gguf)) {
                snprintf(out, n, "model.layers.%d.%s", layer, k_layer[i].hf);
                if (!strncmp(suf, "attn_q.", 7)) *qk = 1;
                if (!strncmp(suf, "attn_k.", 7)) *qk = 2;
                *layer_out = layer;
                return LB_OK;
            }
    }
    return lb_set_error(LB_ERR_UNSUPPORTED,
                        "tensor '%s' has no Hugging Face counterpart lowbit knows", gguf_name);
}

/* ---- llama3 rope scaling from rope_freqs ------------------------------------ */

/* convert_hf_to_gguf LlamaModel.generate_extra_tensors in float32 (the
 * same formula as ex_write.c's rope_freqs). */
static void llama3_factors(double theta, int64_t dim, float factor, float lo, float hi,
                           int32_t old_ctx, float *out, int64_t n) {
    const float base = (float)theta;
    const float old = (float)old_ctx;
    const double lo_wave = (double)old_ctx / lo;
    const double hi_wave = (double)old_ctx / hi;
    for (int64_t i = 0; i < n; i++) {
        float e = (float)(2 * i) / (float)dim;
        float freq = 1.0f / powf(base, e);
        float wavelen = (float)(2 * M_PI) / freq;
        if (wavelen < (float)hi_wave)
            out[i] = 1.0f;
        else if (wavelen > (float)lo_wave)
            out[i] = factor;
        else {
            float smooth = (old / wavelen - lo) / (hi - lo);
            out[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
    }
}

lb_status ex_hf_rope_from_freqs(const lb_gguf *g, lb_model_config *cfg) {
    int64_t ti = lb_gguf_find_tensor(g, "rope_freqs.weight");
    if (ti < 0) return LB_OK;
    lb_tensor t;
    LB_TRY(lb_gguf_tensor_view(g, ti, &t));
    int64_t half = cfg->head_dim / 2;
    if (t.n_dims != 1 || t.shape[0] != half || t.type != LB_TYPE_F32)
        return lb_set_error(LB_ERR_FORMAT, "%s: rope_freqs.weight: expected F32 [%lld]",
                            lb_gguf_path(g), (long long)half);
    float *f = malloc((size_t)half * 2 * sizeof *f);
    if (!f) return lb_set_error(LB_ERR_NOMEM, "out of memory");
    memcpy(f, t.data, (size_t)half * sizeof *f);
    float *w = f + half;
    float mx = 1.0f;
    bool all_one = true;
    for (int64_t i = 0; i < half; i++) {
        if (!(f[i] >= 1.0f) || !isfinite(f[i])) {
            double bad = f[i];
            free(f);
            return lb_set_error(LB_ERR_UNSUPPORTED,
                                "%s: rope_freqs.weight[%lld] = %g is not a llama3 factor (>= 1)",
                                lb_gguf_path(g), (long long)i, bad);
        }
        if (f[i] != 1.0f) all_one = false;
        if (f[i] > mx) mx = f[i];
    }
    if (all_one) {
        free(f);
        return LB_OK;
    }
    static const float los[] = {1, 0.5f, 2, 4};
    static const float his[] = {4, 1, 2, 8, 16};
    for (size_t a = 0; a < sizeof los / sizeof los[0]; a++)
        for (size_t b = 0; b < sizeof his / sizeof his[0]; b++) {
            if (his[b] <= los[a]) continue;
            for (int p = 1; p <= 24; p++) {
                llama3_factors(cfg->rope_theta, cfg->head_dim, mx, los[a], his[b], 1 << p, w,
                               half);
                if (memcmp(w, f, (size_t)half * sizeof *f)) continue;
                cfg->rope_scaling = LB_ROPE_SCALING_LLAMA3;
                cfg->rope_factor = mx;
                cfg->rope_low_freq_factor = los[a];
                cfg->rope_high_freq_factor = his[b];
                cfg->rope_original_max_position_embeddings = 1 << p;
                free(f);
                return LB_OK;
            }
        }
    free(f);
    return lb_set_error(LB_ERR_UNSUPPORTED,
                        "%s: rope_freqs.weight is not a llama3 rope scaling lowbit can express in "
                        "config.json (no factor/low/high/original_max_position_embeddings "
                        "reproduces it)",
                        lb_gguf_path(g));
}

/* ---- config.json ------------------------------------------------------------ */

/* the shortest decimal of a float32, as a double (1e-06, not 9.99e-07) */
static double f32_dec(double v) {
    char b[32];
    snprintf(b, sizeof b, "%.9g", (double)(float)v);
    for (int p = 6; p <= 9; p++) {
        char c[32];
        snprintf(c, sizeof c, "%.*g", p, v);
        if ((float)strtod(c, NULL) == (float)v) return strtod(c, NULL);
    }
    return strtod(b, NULL);
}

static const char *dtype_torch(int t) {
    return t == LB_TYPE_F16 ? "float16" : t == LB_TYPE_BF16 ? "bfloat16" : "float32";
}

cJSON *ex_hf_config_json(const lb_model_config *c, int dtype) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    const char *arch = c->arch == LB_ARCH_QWEN2   ? "Qwen2ForCausalLM"
                       : c->arch == LB_ARCH_QWEN3 ? "Qwen3ForCausalLM"
                                                  : "LlamaForCausalLM";
    const char *mt = c->arch == LB_ARCH_QWEN2 ? "qwen2" : c->arch == LB_ARCH_QWEN3 ? "qwen3" : "llama";
    cJSON *a = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(arch));
    cJSON_AddStringToObject(j, "model_type", mt);
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(j, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(j, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->n_layers);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->n_heads);
    cJSON_AddNumberToObject(j, "num_key_value_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->max_position_embeddings);
    cJSON_AddNumberToObject(j, "rms_norm_eps", f32_dec(c->rms_norm_eps));
    cJSON_AddNumberToObject(j, "rope_theta", f32_dec(c->rope_theta));
    if (c->rope_scaling == LB_ROPE_SCALING_LINEAR) {
        cJSON *r = cJSON_AddObjectToObject(j, "rope_scaling");
        cJSON_AddStringToObject(r, "rope_type", "linear");
        cJSON_AddNumberToObject(r, "factor", f32_dec(c->rope_factor));
    } else if (c->rope_scaling == LB_ROPE_SCALING_LLAMA3) {
        cJSON *r = cJSON_AddObjectToObject(j, "rope_scaling");
        cJSON_AddStringToObject(r, "rope_type", "llama3");
        cJSON_AddNumberToObject(r, "factor", f32_dec(c->rope_factor));
        cJSON_AddNumberToObject(r, "low_freq_factor", c->rope_low_freq_factor);
        cJSON_AddNumberToObject(r, "high_freq_factor", c->rope_high_freq_factor);
        cJSON_AddNumberToObject(r, "original_max_position_embeddings",
                                c->rope_original_max_position_embeddings);
    } else
        cJSON_AddNullToObject(j, "rope_scaling");
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    if (c->arch == LB_ARCH_LLAMA || c->arch == LB_ARCH_MISTRAL || c->arch == LB_ARCH_QWEN3) {
        cJSON_AddBoolToObject(j, "attention_bias", c->attention_bias);
        cJSON_AddBoolToObject(j, "mlp_bias", false);
    }
    if (c->arch == LB_ARCH_QWEN2 || c->arch == LB_ARCH_QWEN3) {
        cJSON_AddBoolToObject(j, "use_sliding_window", false);
        cJSON_AddNullToObject(j, "sliding_window");
    }
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_word_embeddings);
    if (c->bos_token_id >= 0) cJSON_AddNumberToObject(j, "bos_token_id", c->bos_token_id);
    if (c->n_eos == 1) cJSON_AddNumberToObject(j, "eos_token_id", c->eos_token_ids[0]);
    else if (c->n_eos > 1) {
        cJSON *e = cJSON_AddArrayToObject(j, "eos_token_id");
        for (int i = 0; i < c->n_eos; i++)
            cJSON_AddItemToArray(e, cJSON_CreateNumber(c->eos_token_ids[i]));
    }
    cJSON_AddStringToObject(j, "torch_dtype", dtype_torch(dtype));
    cJSON_AddBoolToObject(j, "use_cache", true);
    return j;
}

static cJSON *generation_json(const lb_model_config *c) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    if (c->bos_token_id >= 0) cJSON_AddNumberToObject(j, "bos_token_id", c->bos_token_id);
    if (c->n_eos == 1) cJSON_AddNumberToObject(j, "eos_token_id", c->eos_token_ids[0]);
    else if (c->n_eos > 1) {
        cJSON *e = cJSON_AddArrayToObject(j, "eos_token_id");
        for (int i = 0; i < c->n_eos; i++)
            cJSON_AddItemToArray(e, cJSON_CreateNumber(c->eos_token_ids[i]));
    }
    return j;
}

/* ---- weights ---------------------------------------------------------------- */

typedef struct hf_tensor {
    int64_t gi;          /* GGUF tensor index                         */
    lb_tensor view;      /* its view                                  */
    int64_t *src_row;    /* HF row r comes from GGUF row src_row[r], or NULL */
    int dtype;
    char name[160];
} hf_tensor;

typedef struct hf_write_ctx {
    const lb_progress *progress;
    size_t done, total;
} hf_write_ctx;

typedef struct hf_produce {
    hf_tensor *t;
    hf_write_ctx *w;
} hf_produce;

static lb_status produce_tensor(void *user, const char *name, lb_st_sink *sink, size_t nbytes) {
    (void)nbytes;
    hf_produce *p = user;
    hf_tensor *t = p->t;
    const lb_tensor *v = &t->view;
    int64_t cols = v->shape[v->n_dims - 1];
    int64_t rows = lb_tensor_rows(v);
    size_t row_bytes;
    if (!lb_row_size(v->type, cols, &row_bytes))
        return lb_set_error(LB_ERR_FORMAT, "%s: rows of %lld elements of %s", name,
                            (long long)cols, lb_type_name(v->type));
    size_t esz = t->dtype == LB_TYPE_F32 ? 4 : 2;
    float *f = lb_alloc((size_t)cols * sizeof *f);
    void *o = esz == 4 ? NULL : lb_alloc((size_t)cols * esz);
    if (!f || (esz != 4 && !o)) {
        lb_free(f);
        lb_free(o);
        return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", name);
    }
    lb_status s = LB_OK;
    for (int64_t r = 0; r < rows && s == LB_OK; r++) {
        int64_t gr = t->src_row ? t->src_row[r] : r;
        const uint8_t *src = (const uint8_t *)v->data + (size_t)gr * row_bytes;
        s = lb_dequantize_row(v->type, src, f, cols);
        if (s != LB_OK) {
            s = lb_error_context(s, "%s", name);
            break;
        }
        if (t->dtype == LB_TYPE_F16) lb_f32_to_f16_row(f, o, (size_t)cols);
        else if (t->dtype == LB_TYPE_BF16) lb_f32_to_bf16_row(f, o, (size_t)cols);
        s = lb_st_sink_write(sink, esz == 4 ? (const void *)f : o, (size_t)cols * esz);
    }
    lb_free(f);
    lb_free(o);
    if (s == LB_OK) {
        p->w->done++;
        if (!lb_progress_report(p->w->progress, "export", p->w->done, p->w->total))
            s = lb_set_error(LB_ERR_CANCELLED, "export cancelled");
    }
    return s;
}

/* GGUF row r comes from HF row perm[r] -> HF row h comes from GGUF row inv[h] */
lb_status ex_hf_unpermute_rows(int64_t rows, int n_head, int64_t **out) {
    int64_t *perm = malloc((size_t)rows * sizeof *perm);
    int64_t *inv = malloc((size_t)rows * sizeof *inv);
    if (!perm || !inv) {
        free(perm);
        free(inv);
        return lb_set_error(LB_ERR_NOMEM, "out of memory");
    }
    lb_status s = lb_export_qk_permutation(rows, n_head, perm);
    if (s == LB_OK)
        for (int64_t r = 0; r < rows; r++) inv[perm[r]] = r;
    free(perm);
    if (s != LB_OK) {
        free(inv);
        return s;
    }
    *out = inv;
    return LB_OK;
}

/* ---- the whole export --------------------------------------------------------- */

lb_status lb_export_gguf_to_hf(const char *gguf_path, const char *out_dir,
                               const lb_export_hf_opts *opts_in, lb_export_hf_stats *stats) {
    if (!gguf_path || !out_dir)
        return lb_set_error(LB_ERR_INVALID_ARG, "export hf: NULL path");
    lb_export_hf_opts opts;
    if (opts_in) opts = *opts_in;
    else lb_export_hf_opts_default(&opts);
    if (opts.dtype != -1 && opts.dtype != LB_TYPE_F32 && opts.dtype != LB_TYPE_F16 &&
        opts.dtype != LB_TYPE_BF16)
        return lb_set_error(LB_ERR_INVALID_ARG, "export hf: dtype must be f32, f16 or bf16");
    LB_TRY(lb_outdir_check(out_dir));

    lb_gguf *g = NULL;
    lb_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    hf_tensor *ts = NULL;
    hf_produce *prods = NULL;
    size_t nt = 0;
    lb_st_writer *w = NULL;
    char *tmp = NULL;
    cJSON *jc = NULL, *jg = NULL, *jt = NULL, *jtc = NULL;
    lb_export_hf_stats st;
    memset(&st, 0, sizeof st);

    lb_status s = lb_gguf_open(gguf_path, &g);
    if (s == LB_OK) s = lb_model_config_from_gguf(g, &cfg);
    if (s == LB_OK) s = ex_hf_rope_from_freqs(g, &cfg);
    if (s != LB_OK) goto done;

    int64_t n = lb_gguf_n_tensors(g);
    ts = calloc((size_t)(n > 0 ? n : 1), sizeof *ts);
    prods = calloc((size_t)(n > 0 ? n : 1), sizeof *prods);
    if (!ts || !prods) {
        s = lb_set_error(LB_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* dtype: auto from the 2-D tensors */
    int dtype = opts.dtype;
    if (dtype < 0) {
        int common = -2;
        for (int64_t i = 0; i < n; i++) {
            const lb_gguf_tensor_info *ti = lb_gguf_tensor_at(g, i);
            if (ti->n_dims < 2) continue;
            if (common == -2) common = (int)ti->type;
            else if (common != (int)ti->type) common = -1;
        }
        dtype = common == LB_TYPE_F16 || common == LB_TYPE_BF16 ? common : LB_TYPE_F32;
    }
    st.dtype = dtype;

    for (int64_t i = 0; i < n && s == LB_OK; i++) {
        const lb_gguf_tensor_info *ti = lb_gguf_tensor_at(g, i);
        if (!strcmp(ti->name, "rope_freqs.weight")) continue; /* in config.json */
        hf_tensor *t = &ts[nt];
        int qk, layer;
        s = ex_hf_name(ti->name, cfg.n_layers, t->name, sizeof t->name, &qk, &layer);
        if (s != LB_OK) {
            s = lb_error_context(s, "%s", gguf_path);
            break;
        }
        s = lb_gguf_tensor_view(g, i, &t->view);
        if (s != LB_OK) break;
        if (!lb_type_can_dequantize(t->view.type)) {
            s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which lowbit cannot "
                             "dequantize", gguf_path, ti->name, lb_type_name(t->view.type));
            break;
        }
        if (t->view.n_dims < 1 || t->view.n_dims > 2) {
            s = lb_set_error(LB_ERR_FORMAT, "%s: tensor '%s' has %d dimensions (1 or 2 expected)",
                             gguf_path, ti->name, t->view.n_dims);
            break;
        }
        t->gi = i;
        t->dtype = dtype;
        if (t->view.type != LB_TYPE_F32 && t->view.type != LB_TYPE_F16 &&
            t->view.type != LB_TYPE_BF16)
            st.n_dequantized++;
        if (qk && cfg.rope_mode == LB_ROPE_NORM) {
            int heads = qk == 1 ? cfg.n_heads : cfg.n_kv_heads;
            int64_t rows = t->view.shape[0];
            if (rows != (int64_t)heads * cfg.head_dim) {
                s = lb_set_error(LB_ERR_FORMAT, "%s: tensor '%s' has %lld rows, expected %lld",
                                 gguf_path, ti->name, (long long)rows,
                                 (long long)heads * cfg.head_dim);
                break;
            }
            if (t->view.n_dims == 1) {
                /* a bias: permute its elements as rows of one column */
                t->view.n_dims = 2;
                t->view.shape[1] = 1;
                if (t->view.type != LB_TYPE_F32 && t->view.type != LB_TYPE_F16 &&
                    t->view.type != LB_TYPE_BF16) {
                    s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: bias '%s' of type %s", gguf_path,
                                     ti->name, lb_type_name(t->view.type));
                    break;
                }
            }
            s = ex_hf_unpermute_rows(rows, heads, &t->src_row);
            if (s != LB_OK) break;
            st.permuted = true;
        }
        nt++;
    }
    if (s != LB_OK) goto done;

    s = lb_st_writer_create(&w);
    if (s == LB_OK) s = lb_st_writer_set_metadata(w, "format", "pt");
    hf_write_ctx wc = {&opts.progress, 0, nt};
    for (size_t i = 0; i < nt && s == LB_OK; i++) {
        hf_tensor *t = &ts[i];
        prods[i].t = t;
        prods[i].w = &wc;
        int nd = t->view.n_dims;
        int64_t shape[2] = {t->view.shape[0], nd == 2 ? t->view.shape[1] : 0};
        if (t->src_row && nd == 2 && t->view.shape[1] == 1 &&
            lb_gguf_tensor_at(g, t->gi)->n_dims == 1)
            nd = 1;
        s = lb_st_writer_add_fn(w, t->name, (lb_type)t->dtype, nd, shape, produce_tensor,
                                &prods[i]);
    }
    if (s != LB_OK) goto done;

    /* tokenizer */
    s = ex_hf_tokenizer_json(g, &cfg, &jt, &jtc);
    if (s != LB_OK) goto done;
    jc = ex_hf_config_json(&cfg, dtype);
    jg = generation_json(&cfg);
    if (!jc || !jg) {
        s = lb_set_error(LB_ERR_NOMEM, "out of memory");
        goto done;
    }
    s = lb_tmpdir_make(out_dir, &tmp);
    if (s != LB_OK) goto done;
    char *mp = lb_path_join(tmp, "model.safetensors");
    s = mp ? lb_st_writer_write_file(w, mp) : lb_set_error(LB_ERR_NOMEM, "out of memory");
    free(mp);
    if (s == LB_OK) s = ex_hf_write_json(tmp, "config.json", jc);
    if (s == LB_OK) s = ex_hf_write_json(tmp, "generation_config.json", jg);
    if (s == LB_OK && jt) s = ex_hf_write_json(tmp, "tokenizer.json", jt);
    if (s == LB_OK && jtc) s = ex_hf_write_json(tmp, "tokenizer_config.json", jtc);
    if (s == LB_OK) s = lb_tmpdir_commit(tmp, out_dir);
    if (s == LB_OK) {
        free(tmp);
        tmp = NULL;
    }
    st.n_tensors = nt;
    st.tokenizer = jt != NULL;
    if (!jt) snprintf(st.notes, sizeof st.notes, "no tokenizer in the GGUF file: none written");
done:
    if (tmp) {
        lb_tmpdir_remove(tmp);
        free(tmp);
    }
    cJSON_Delete(jc);
    cJSON_Delete(jg);
    cJSON_Delete(jt);
    cJSON_Delete(jtc);
    lb_st_writer_free(w);
    for (size_t i = 0; ts && i < nt; i++) free(ts[i].src_row);
    free(ts);
    free(prods);
    lb_model_config_clear(&cfg);
    lb_gguf_close(g);
    if (s == LB_OK && stats) *stats = st;
    return s;
}
