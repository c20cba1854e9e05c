/*
 * ex_hf_gptq.c — a GGUF file to a GPTQ checkpoint (lowbit/export_hf.h,
 * `lowbit export MODEL.gguf -o DIR --format gptq`): the inverse of the
 * direct route of ex_gptq.c.
 *
 * Per 32-column block of a linear weight (GGUF blocks are 32 wide, so a
 * GPTQ group of 32 holds exactly one block; g_idx[c] = c / 32):
 *   Q4_0 {d, q[32]}     -> 4-bit sym:  scale d, zero 8,   code q        (exact)
 *   Q8_0 {d, q[32]}     -> 8-bit sym:  scale d, zero 128, code q + 128  (exact)
 *   Q4_1 {d, m, q[32]}  -> 4-bit asym: scale d, zero z = round(-m/d), code
 *                          q, when 0 <= z <= 15 and fp16(-(d*z)) == m for
 *                          every block (what the direct export writes, so
 *                          GPTQ -> GGUF -> GPTQ gives the same codes, zeros,
 *                          scales); a Q4_1 tensor made otherwise (e.g. by
 *                          llama-quantize, m = the block minimum) is not
 *                          representable and is written dense.
 * A GPTQ config has one bits/sym: the scheme most linears have wins; the
 * other linears (and every other tensor) are dequantized and written dense
 * in the output dtype (stats.notes says how many). Zeros are stored v1
 * (zero - 1, AutoGPTQ) unless a zero of 0 occurs (asym), then v2
 * (GPTQModel "gptq_v2"). Llama q/k rows are un-permuted as whole rows.
 */
#include "export/ex_hf_internal.h"
#include "lowbit/export_hf.h"
#include "lowbit/file.h"
#include "lowbit/gguf.h"
#include "lowbit/gptq.h"
#include "lowbit/quants.h"
#include "lowbit/safetensors.h"
#include "model/model_internal.h"
#include "core/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SCH_NONE = 0, SCH_SYM4, SCH_ASYM4, SCH_SYM8, SCH_COUNT };
static const char *sch_name[SCH_COUNT] = {"dense", "Q4_0 -> 4-bit sym", "Q4_1 -> 4-bit asym",
                                          "Q8_0 -> 8-bit sym"};

typedef struct gq_tensor {
    char name[160];     /* HF tensor name (".weight" for a linear)      */
    char module[160];   /* HF module ("model.layers.0.self_attn.q_proj") */
    lb_tensor view;
    int64_t *src_row;   /* HF row r <- GGUF row src_row[r], or NULL      */
    bool linear;
    bool bias1d;        /* a permuted 1-D bias (viewed as [rows, 1])     */
    int scheme;         /* SCH_* this tensor can take                    */
    /* GPTQ arrays (when written as codes) */
    int32_t *qweight, *qzeros, *g_idx;
    uint16_t *scales;
    int64_t out, in;
} gq_tensor;

/* Q4_1 block zero: z with fp16(-(d*z)) == m, or -1. */
static int q4_1_zero(uint16_t dh, uint16_t mh) {
    float d = lb_f16_to_f32(dh), m = lb_f16_to_f32(mh);
    if (!isfinite(d) || !isfinite(m)) return -1;
    if (d == 0.0f) return (mh & 0x7fff) == 0 ? 8 : -1;
    double zf = -(double)m / (double)d;
    if (!(zf > -0.5 && zf < 15.5)) return -1;
    int z = (int)lround(zf);
    return lb_f32_to_f16(-(d * (float)z)) == mh ? z : -1;
}

/* The scheme a GGUF weight can be written with exactly. */
static int scheme_of(const lb_tensor *t) {
    if (t->n_dims != 2 || t->shape[0] % 32 || t->shape[1] % 32) return SCH_NONE;
    if (t->type == LB_TYPE_Q4_0) return SCH_SYM4;
    if (t->type == LB_TYPE_Q8_0) return SCH_SYM8;
    if (t->type != LB_TYPE_Q4_1) return SCH_NONE;
    const lb_block_q4_1 *b = t->data;
    int64_t nb = t->shape[0] * (t->shape[1] / 32);
    for (int64_t i = 0; i < nb; i++) {
        uint16_t dh, mh;
        memcpy(&dh, &b[i].d, 2);
        memcpy(&mh, &b[i].m, 2);
        if (q4_1_zero(dh, mh) < 0) return SCH_NONE;
    }
    return SCH_ASYM4;
}

/* codes/zeros/scales of one linear in GPTQ layout (rows un-permuted). */
static lb_status to_gptq(gq_tensor *t, int scheme, lb_gptq_format fmt) {
    const int bits = scheme == SCH_SYM8 ? 8 : 4;
    const int64_t out = t->view.shape[0], in = t->view.shape[1], G = in / 32;
    int32_t *codes = malloc((size_t)out * (size_t)in * sizeof *codes);
    int32_t *zeros = malloc((size_t)G * (size_t)out * sizeof *zeros);
    t->scales = malloc((size_t)G * (size_t)out * sizeof *t->scales);
    t->g_idx = malloc((size_t)in * sizeof *t->g_idx);
    t->qweight = malloc((size_t)lb_gptq_packed_len(in, bits) * (size_t)out * sizeof(int32_t));
    t->qzeros = malloc((size_t)G * (size_t)lb_gptq_packed_len(out, bits) * sizeof(int32_t));
    lb_status s = LB_OK;
    if (!codes || !zeros || !t->scales || !t->g_idx || !t->qweight || !t->qzeros) {
        s = lb_set_error(LB_ERR_NOMEM, "%s: out of memory", t->name);
        goto done;
    }
    for (int64_t c = 0; c < in; c++) t->g_idx[c] = (int32_t)(c / 32);
    size_t row_bytes;
    if (!lb_row_size(t->view.type, in, &row_bytes)) {
        s = lb_set_error(LB_ERR_FORMAT, "%s: bad row size", t->name);
        goto done;
    }
    for (int64_t o = 0; o < out; o++) {
        int64_t gr = t->src_row ? t->src_row[o] : o;
        const uint8_t *row = (const uint8_t *)t->view.data + (size_t)gr * row_bytes;
        for (int64_t g = 0; g < G; g++) {
            int32_t *cd = codes + o * in + g * 32;
            uint16_t dh;
            int z;
            if (scheme == SCH_SYM8) {
                const lb_block_q8_0 *b = (const lb_block_q8_0 *)row + g;
                memcpy(&dh, &b->d, 2);
                for (int k = 0; k < 32; k++) cd[k] = (int32_t)b->qs[k] + 128;
                z = 128;
            } else if (scheme == SCH_SYM4) {
                const lb_block_q4_0 *b = (const lb_block_q4_0 *)row + g;
                memcpy(&dh, &b->d, 2);
                for (int k = 0; k < 16; k++) {
                    cd[k] = b->qs[k] & 15;
                    cd[k + 16] = b->qs[k] >> 4;
                }
                z = 8;
            } else {
                const lb_block_q4_1 *b = (const lb_block_q4_1 *)row + g;
                uint16_t mh;
                memcpy(&dh, &b->d, 2);
                memcpy(&mh, &b->m, 2);
                for (int k = 0; k < 16; k++) {
                    cd[k] = b->qs[k] & 15;
                    cd[k + 16] = b->qs[k] >> 4;
                }
                z = q4_1_zero(dh, mh);
                if (z < 0) {
                    s = lb_set_error(LB_ERR_INTERNAL, "%s: Q4_1 block not representable", t->name);
                    goto done;
                }
            }
            t->scales[g * out + o] = dh;
            zeros[g * out + o] = z;
        }
    }
    s = lb_gptq_pack_qweight(codes, out, in, bits, t->qweight);
    if (s == LB_OK) s = lb_gptq_pack_qzeros(zeros, G, out, bits, fmt, t->qzeros);
    if (s != LB_OK) s = lb_error_context(s, "%s", t->module);
done:
    free(codes);
    free(zeros);
    return s;
}

/* dense producer: dequantize + convert row by row */
typedef struct dense_prod {
    gq_tensor *t;
    int dtype;
} dense_prod;

static lb_status produce_dense(void *user, const char *name, lb_st_sink *sink, size_t nbytes) {
    (void)nbytes;
    dense_prod *p = user;
    const lb_tensor *v = &p->t->view;
    int64_t cols = v->shape[v->n_dims - 1], rows = lb_tensor_rows(v);
    size_t row_bytes;
    if (!lb_row_size(v->type, cols, &row_bytes))
        return lb_set_error(LB_ERR_FORMAT, "%s: bad row size", name);
    size_t esz = p->dtype == LB_TYPE_F32 ? 4 : 2;
    float *f = lb_alloc((size_t)cols * sizeof *f);
    uint16_t *h = lb_alloc((size_t)cols * 2);
    lb_status s = f && h ? LB_OK : lb_set_error(LB_ERR_NOMEM, "%s: out of memory", name);
    for (int64_t r = 0; r < rows && s == LB_OK; r++) {
        int64_t gr = p->t->src_row ? p->t->src_row[r] : r;
        s = lb_dequantize_row(v->type, (const uint8_t *)v->data + (size_t)gr * row_bytes, f, cols);
        if (s != LB_OK) break;
        if (p->dtype == LB_TYPE_F16) lb_f32_to_f16_row(f, h, (size_t)cols);
        else if (p->dtype == LB_TYPE_BF16) lb_f32_to_bf16_row(f, h, (size_t)cols);
        s = lb_st_sink_write(sink, esz == 4 ? (const void *)f : (const void *)h, (size_t)cols * esz);
    }
    lb_free(f);
    lb_free(h);
    return s;
}

typedef struct gptq_prod {
    gq_tensor *t;
    int scheme;
    lb_gptq_format fmt;
} gptq_prod;

static void gptq_arrays_free(gq_tensor *t) {
    free(t->qweight);
    free(t->qzeros);
    free(t->scales);
    free(t->g_idx);
    t->qweight = t->qzeros = t->g_idx = NULL;
    t->scales = NULL;
}

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

static lb_status produce_gptq(void *user, const char *name, lb_st_sink *sink, size_t nbytes) {
    gptq_prod *p = user;
    gq_tensor *t = p->t;
    if (ends_with(name, ".qweight")) {
        gptq_arrays_free(t);
        lb_status s = to_gptq(t, p->scheme, p->fmt);
        if (s != LB_OK) return s;
        return lb_st_sink_write(sink, t->qweight, nbytes);
    }
    if (!t->qweight) return lb_set_error(LB_ERR_INTERNAL, "%s: produced out of order", name);
    if (ends_with(name, ".qzeros")) return lb_st_sink_write(sink, t->qzeros, nbytes);
    if (ends_with(name, ".scales")) return lb_st_sink_write(sink, t->scales, nbytes);
    lb_status s = lb_st_sink_write(sink, t->g_idx, nbytes);
    gptq_arrays_free(t);
    return s;
}

static cJSON *qconfig(int bits, bool sym, lb_gptq_format fmt, bool for_file) {
    cJSON *q = cJSON_CreateObject();
    if (!q) return NULL;
    cJSON_AddNumberToObject(q, "bits", bits);
    cJSON_AddNumberToObject(q, "group_size", 32);
    cJSON_AddNumberToObject(q, "damp_percent", 0.01);
    cJSON_AddBoolToObject(q, "desc_act", false);
    cJSON_AddBoolToObject(q, "static_groups", false);
    cJSON_AddBoolToObject(q, "sym", sym);
    cJSON_AddBoolToObject(q, "true_sequential", true);
    cJSON_AddBoolToObject(q, "lm_head", false);
    if (for_file) {
        cJSON_AddNullToObject(q, "model_name_or_path");
        cJSON_AddNullToObject(q, "model_file_base_name");
    }
    cJSON_AddStringToObject(q, "quant_method", "gptq");
    cJSON_AddStringToObject(q, "checkpoint_format", fmt == LB_GPTQ_FORMAT_V2 ? "gptq_v2" : "gptq");
    cJSON *meta = cJSON_AddObjectToObject(q, "meta");
    cJSON_AddStringToObject(meta, "method", "gguf-blocks");
    cJSON *qz = cJSON_AddArrayToObject(meta, "quantizer");
    cJSON_AddItemToArray(qz, cJSON_CreateString("lowbit export --format gptq"));
    return q;
}

static bool is_linear_name(const char *gguf_name) {
    static const char *sfx[] = {".attn_q.weight",   ".attn_k.weight",  ".attn_v.weight",
                                ".attn_output.weight", ".ffn_gate.weight", ".ffn_up.weight",
                                ".ffn_down.weight"};
    size_t n = strlen(gguf_name);
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
        size_t k = strlen(sfx[i]);
        if (n > k && !strcmp(gguf_name + n - k, sfx[i])) return true;
    }
    return false;
}

lb_status lb_export_gguf_to_gptq(const char *gguf_path, const char *out_dir,
                                 const lb_export_hf_opts *opts_in, lb_export_hf_stats *stats) {
    if (!gguf_path || !out_dir)
        return lb_set_error(LB_ERR_INVALID_ARG, "export gptq: NULL path");
    lb_export_hf_opts opts;
    if (opts_in) opts = *opts_in;
    else lb_export_hf_opts_default(&opts);
    if (opts.dtype != -1 && opts.dtype != LB_TYPE_F32 && opts.dtype != LB_TYPE_F16 &&
        opts.dtype != LB_TYPE_BF16)
        return lb_set_error(LB_ERR_INVALID_ARG, "export gptq: dtype must be f32, f16 or bf16");
    LB_TRY(lb_outdir_check(out_dir));

    lb_gguf *g = NULL;
    lb_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    gq_tensor *ts = NULL;
    dense_prod *dp = NULL;
    gptq_prod *gp = NULL;
    size_t nt = 0;
    lb_st_writer *w = NULL;
    char *tmp = NULL;
    cJSON *jc = NULL, *jq = NULL, *jg = NULL, *jt = NULL, *jtc = NULL;
    lb_export_hf_stats st;
    memset(&st, 0, sizeof st);
    lb_status s = lb_gguf_open(gguf_path, &g);
    if (s == LB_OK) s = lb_model_config_from_gguf(g, &cfg);
    if (s == LB_OK) s = ex_hf_rope_from_freqs(g, &cfg);
    if (s != LB_OK) goto done;
    int64_t n = lb_gguf_n_tensors(g);
    ts = calloc((size_t)(n > 0 ? n : 1), sizeof *ts);
    dp = calloc((size_t)(n > 0 ? n : 1), sizeof *dp);
    gp = calloc((size_t)(n > 0 ? n : 1), sizeof *gp);
    if (!ts || !dp || !gp) {
        s = lb_set_error(LB_ERR_NOMEM, "out of memory");
        goto done;
    }
    int count[SCH_COUNT] = {0};
    for (int64_t i = 0; i < n && s == LB_OK; i++) {
        const lb_gguf_tensor_info *ti = lb_gguf_tensor_at(g, i);
        if (!strcmp(ti->name, "rope_freqs.weight")) continue;
        gq_tensor *t = &ts[nt];
        int qk, layer;
        s = ex_hf_name(ti->name, cfg.n_layers, t->name, sizeof t->name, &qk, &layer);
        if (s != LB_OK) {
            s = lb_error_context(s, "%s", gguf_path);
            break;
        }
        s = lb_gguf_tensor_view(g, i, &t->view);
        if (s != LB_OK) break;
        if (!lb_type_can_dequantize(t->view.type) || t->view.n_dims < 1 || t->view.n_dims > 2) {
            s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: tensor '%s' (%s, %d dims) cannot be written",
                             gguf_path, ti->name, lb_type_name(t->view.type), t->view.n_dims);
            break;
        }
        t->linear = is_linear_name(ti->name);
        if (t->linear) {
            size_t l = strlen(t->name);
            snprintf(t->module, sizeof t->module, "%.*s", (int)(l - 7), t->name); /* - ".weight" */
            t->scheme = scheme_of(&t->view);
            count[t->scheme]++;
        }
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
                t->view.n_dims = 2;
                t->view.shape[1] = 1;
                t->bias1d = true;
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
    int best = SCH_NONE;
    for (int k = SCH_SYM4; k < SCH_COUNT; k++)
        if (count[k] > count[best] || (best == SCH_NONE && count[k] > 0)) best = k;
    if (best == SCH_NONE) {
        s = lb_set_error(LB_ERR_UNSUPPORTED,
                         "%s: no linear weight is Q4_0, Q8_0 or a GPTQ-made Q4_1 (nothing maps to "
                         "GPTQ codes; use --format hf)", gguf_path);
        goto done;
    }
    int dtype = opts.dtype;
    if (dtype < 0) {
        int common = -2;
        for (size_t i = 0; i < nt; i++) {
            if (ts[i].view.n_dims < 2 || ts[i].bias1d || (ts[i].linear && ts[i].scheme == best))
                continue;
            if (common == -2) common = (int)ts[i].view.type;
            else if (common != (int)ts[i].view.type) common = -1;
        }
        dtype = common == LB_TYPE_F16 || common == LB_TYPE_BF16 ? common : LB_TYPE_F32;
    }
    st.dtype = dtype;
    /* zero format: v1 unless an asym zero of 0 needs v2 */
    lb_gptq_format fmt = LB_GPTQ_FORMAT_V1;
    if (best == SCH_ASYM4)
        for (size_t i = 0; i < nt && fmt == LB_GPTQ_FORMAT_V1; i++) {
            if (!ts[i].linear || ts[i].scheme != best) continue;
            const lb_block_q4_1 *b = ts[i].view.data;
            int64_t nb = ts[i].view.shape[0] * (ts[i].view.shape[1] / 32);
            for (int64_t k = 0; k < nb; k++) {
                uint16_t dh, mh;
                memcpy(&dh, &b[k].d, 2);
                memcpy(&mh, &b[k].m, 2);
                if (q4_1_zero(dh, mh) == 0) {
                    fmt = LB_GPTQ_FORMAT_V2;
                    break;
                }
            }
        }
    const int bits = best == SCH_SYM8 ? 8 : 4;

    s = lb_st_writer_create(&w);
    if (s == LB_OK) s = lb_st_writer_set_metadata(w, "format", "pt");
    int n_dense_lin = 0;
    for (size_t i = 0; i < nt && s == LB_OK; i++) {
        gq_tensor *t = &ts[i];
        if (!lb_progress_report(&opts.progress, "export", i, nt)) {
            s = lb_set_error(LB_ERR_CANCELLED, "export cancelled");
            break;
        }
        if (t->linear && t->scheme == best) {
            /* produced lazily in file order: qweight (converts the whole
             * linear), qzeros, scales, g_idx (frees it) */
            t->out = t->view.shape[0];
            t->in = t->view.shape[1];
            gp[i] = (gptq_prod){t, best, fmt};
            char nm[200];
            int64_t G = t->in / 32;
            int64_t sq[2] = {lb_gptq_packed_len(t->in, bits), t->out};
            int64_t sz[2] = {G, lb_gptq_packed_len(t->out, bits)};
            int64_t ss[2] = {G, t->out};
            int64_t sg[1] = {t->in};
            snprintf(nm, sizeof nm, "%s.qweight", t->module);
            s = lb_st_writer_add_fn(w, nm, LB_TYPE_I32, 2, sq, produce_gptq, &gp[i]);
            snprintf(nm, sizeof nm, "%s.qzeros", t->module);
            if (s == LB_OK) s = lb_st_writer_add_fn(w, nm, LB_TYPE_I32, 2, sz, produce_gptq, &gp[i]);
            snprintf(nm, sizeof nm, "%s.scales", t->module);
            if (s == LB_OK) s = lb_st_writer_add_fn(w, nm, LB_TYPE_F16, 2, ss, produce_gptq, &gp[i]);
            snprintf(nm, sizeof nm, "%s.g_idx", t->module);
            if (s == LB_OK) s = lb_st_writer_add_fn(w, nm, LB_TYPE_I32, 1, sg, produce_gptq, &gp[i]);
            st.n_gptq++;
            continue;
        }
        if (t->linear) n_dense_lin++;
        if (t->view.type != LB_TYPE_F32 && t->view.type != LB_TYPE_F16 &&
            t->view.type != LB_TYPE_BF16)
            st.n_dequantized++;
        dp[i].t = t;
        dp[i].dtype = dtype;
        int nd = t->bias1d ? 1 : t->view.n_dims;
        int64_t shape[2] = {t->view.shape[0], nd == 2 ? t->view.shape[1] : 0};
        s = lb_st_writer_add_fn(w, t->name, (lb_type)dtype, nd, shape, produce_dense, &dp[i]);
    }
    if (s != LB_OK) goto done;
    if (n_dense_lin)
        snprintf(st.notes, sizeof st.notes,
                 "%d linear weight(s) not %s written dense (%s); the checkpoint's scheme is %s",
                 n_dense_lin, sch_name[best], lb_type_name(dtype), sch_name[best]);

    s = ex_hf_tokenizer_json(g, &cfg, &jt, &jtc);
    if (s != LB_OK) goto done;
    jc = ex_hf_config_json(&cfg, dtype);
    jq = qconfig(bits, best != SCH_ASYM4, fmt, true);
    cJSON *qin = qconfig(bits, best != SCH_ASYM4, fmt, false);
    if (jc && qin) cJSON_AddItemToObject(jc, "quantization_config", qin);
    else cJSON_Delete(qin);
    jg = cJSON_CreateObject();
    if (!jc || !jq || !jg || !qin) {
        s = lb_set_error(LB_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (cfg.bos_token_id >= 0) cJSON_AddNumberToObject(jg, "bos_token_id", cfg.bos_token_id);
    if (cfg.n_eos >= 1) cJSON_AddNumberToObject(jg, "eos_token_id", cfg.eos_token_ids[0]);
    s = lb_tmpdir_make(out_dir, &tmp);
    if (s != LB_OK) goto done;
    char *mp = lb_path_join(tmp, "model.safetensors");
    s = mp ? lb_st_writer_write_file(w, mp) : lb_set_error(LB_ERR_NOMEM, "out of memory");
    free(mp);
    if (s == LB_OK) s = ex_hf_write_json(tmp, "config.json", jc);
    if (s == LB_OK) s = ex_hf_write_json(tmp, "quantize_config.json", jq);
    if (s == LB_OK) s = ex_hf_write_json(tmp, "generation_config.json", jg);
    if (s == LB_OK && jt) s = ex_hf_write_json(tmp, "tokenizer.json", jt);
    if (s == LB_OK && jtc) s = ex_hf_write_json(tmp, "tokenizer_config.json", jtc);
    if (s == LB_OK) s = lb_tmpdir_commit(tmp, out_dir);
    if (s == LB_OK) {
        free(tmp);
        tmp = NULL;
        lb_progress_report(&opts.progress, "export", nt, nt);
    }
    st.n_tensors = nt;
    st.tokenizer = jt != NULL;
done:
    if (tmp) {
        lb_tmpdir_remove(tmp);
        free(tmp);
    }
    cJSON_Delete(jc);
    cJSON_Delete(jq);
    cJSON_Delete(jg);
    cJSON_Delete(jt);
    cJSON_Delete(jtc);
    lb_st_writer_free(w);
    for (size_t i = 0; ts && i < nt; i++) {
        free(ts[i].src_row);
        gptq_arrays_free(&ts[i]);
    }
    free(ts);
    free(dp);
    free(gp);
    lb_model_config_clear(&cfg);
    lb_gguf_close(g);
    if (s == LB_OK && stats) *stats = st;
    return s;
}
