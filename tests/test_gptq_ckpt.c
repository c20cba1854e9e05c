/*
 * GPTQ checkpoint reading (lowbit/gptq_ckpt.h, lb_model_load_gptq):
 *  - AutoGPTQ's own checkpoint (../shared/reference/gptq_model/
 *    gptq_checkpoint): codes/zeros/scales read back equal the solver's,
 *    dequantized F32 reload gives the reference perplexity 41.4763, the
 *    Q4_0 repack dequantizes to exactly the same weights;
 *  - synthetic checkpoints on the qwen2 random model for 2/3/4/8 bits,
 *    v1/v2 zeros, sym/asym, arbitrary g_idx (desc_act), no g_idx, F32
 *    scales, mixed dense/quantized linears with "dynamic" rules, compared
 *    with an independent dequantization of the codes the test chose;
 *  - quantization_config parsing and dynamic-rule matching;
 *  - hostile checkpoints (every check names the tensor).
 */
#include "th.h"

#include "lowbit/eval.h"
#include "lowbit/file.h"
#include "lowbit/gptq_ckpt.h"
#include "lowbit/kernels.h"
#include "lowbit/model.h"
#include "lowbit/quants.h"
#include "lowbit/safetensors.h"

#include <cjson/cJSON.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

static int rm_one(const char *path, const struct stat *sb, int flag,
                  struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static const char *lin_names[7] = {"self_attn.q_proj", "self_attn.k_proj",
                                   "self_attn.v_proj", "self_attn.o_proj",
                                   "mlp.gate_proj",    "mlp.up_proj",
                                   "mlp.down_proj"};

static uint64_t rng_state = 88172645463325252ull;
static uint32_t urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static double ppl_full256(lb_model *m) {
    size_t nb = 0;
    int32_t *ids = th_read_bin(th_shared("reference/ppl/ids/tinystories-lf."
                                         "hf-tokenizers.ids.i32"),
                               &nb);
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    lb_ppl_params p = lb_ppl_default_params();
    p.protocol = LB_PPL_FULL;
    p.n_ctx = 256;
    lb_ppl_result r = {0};
    if (ctx && ids) TH_CHECK_OK(lb_perplexity(ctx, ids, (int64_t)nb / 4, &p, &r));
    lb_context_free(ctx);
    free(ids);
    return r.ppl;
}

/* ------------------------------------------------------------------------ */
/* AutoGPTQ's checkpoint                                                     */
/* ------------------------------------------------------------------------ */

static void test_autogptq_checkpoint(void) {
    const char *dir = th_shared("reference/gptq_model/gptq_checkpoint");
    lb_model_load_opts o = {0};
    o.gptq_mode = LB_GPTQ_LOAD_F32;
    lb_model *mf = NULL, *mq = NULL;
    TH_CHECK_OK(lb_model_load(dir, &o, &mf));
    o.gptq_mode = LB_GPTQ_LOAD_AUTO;
    TH_CHECK_OK(lb_model_load(dir, &o, &mq));
    lb_safetensors *ref = NULL;
    TH_CHECK_OK(lb_st_open(th_shared("reference/gptq_model/"
                                     "quant_tensors.safetensors"),
                           &ref));
    if (!mf || !mq || !ref) goto done;
    /* every linear: F32 in one, Q4_0 in the other; the F32 weights are
     * scale_f16 * (code - 8) of the solver's codes; the Q4_0 rows
     * dequantize to the same bits */
    int64_t n_w = 0, n_bad_ref = 0, n_bad_q4 = 0;
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < 7; i++) {
            const lb_tensor *wf = &mf->layers[l].w[i], *wq = &mq->layers[l].w[i];
            TH_CHECK_INT(wf->type, LB_TYPE_F32);
            TH_CHECK_INT(wq->type, LB_TYPE_Q4_0);
            char nm[128];
            snprintf(nm, sizeof nm, "gptq.model.layers.%d.%s.codes", l,
                     lin_names[i]);
            const lb_tensor *codes = lb_st_find(ref, nm);
            snprintf(nm, sizeof nm, "gptq.model.layers.%d.%s.scale", l,
                     lin_names[i]);
            const lb_tensor *scale = lb_st_find(ref, nm);
            TH_CHECK(codes && scale);
            if (!codes || !scale || wq->type != LB_TYPE_Q4_0) continue;
            int64_t out = wf->shape[0], in = wf->shape[1], ng = scale->shape[1];
            const float *W = wf->data;
            float *row = malloc((size_t)in * sizeof(float));
            size_t rb;
            lb_row_size(LB_TYPE_Q4_0, in, &rb);
            for (int64_t r = 0; r < out; r++) {
                TH_CHECK_OK(lb_tensor_dequant_row(wq, r, row)); /* loaded X16 */
                for (int64_t c = 0; c < in; c++) {
                    int32_t code = ((const int32_t *)codes->data)[r * in + c];
                    float s = ((const float *)scale->data)[r * ng + c / 128];
                    float want = lb_f16_to_f32(lb_f32_to_f16(s)) *
                                 (float)(code - 8);
                    n_bad_ref += W[r * in + c] != want;
                    n_bad_q4 += memcmp(&row[c], &W[r * in + c], 4) != 0;
                    n_w++;
                }
            }
            free(row);
        }
    fprintf(stderr, "  %lld weights: %lld differ from the solver's codes "
            "x f16 scales, %lld Q4_0 values differ from F32\n",
            (long long)n_w, (long long)n_bad_ref, (long long)n_bad_q4);
    TH_CHECK_INT(n_w, 2 * (2 * 128 * 128 + 2 * 64 * 128 + 3 * 384 * 128));
    TH_CHECK_INT(n_bad_ref, 0);
    TH_CHECK_INT(n_bad_q4, 0);
    /* perplexity of the dequantized checkpoint: reference 41.476336683 */
    double pf = ppl_full256(mf), pq = ppl_full256(mq);
    fprintf(stderr, "  ppl: F32 dequantized %.6f (reference 41.476337), "
            "Q4_0 W4A8 kernels %.6f\n", pf, pq);
    TH_CHECK_NEAR(pf, 41.476336683400724, 41.476 * 2e-5);
    TH_CHECK_NEAR(pq, 41.476336683400724, 41.476 * 0.01);
done:
    lb_st_close(ref);
    lb_model_free(mf);
    lb_model_free(mq);
}

/* ------------------------------------------------------------------------ */
/* Synthetic checkpoints                                                     */
/* ------------------------------------------------------------------------ */

typedef struct syn_linear {
    int bits, gs;          /* gs -1: one group                           */
    bool sym, desc_act, no_gidx, f32_scales, dense;
    int64_t out, in, ng;
    int32_t *codes;        /* [out, in]                                  */
    int32_t *zeros;        /* [ng, out]                                  */
    float *scales;         /* [ng, out] (already f16-representable)      */
    int32_t *g_idx;        /* [in]                                       */
    /* packed */
    int32_t *qweight, *qzeros;
    uint16_t *scales16;
} syn_linear;

static void syn_make(syn_linear *s, int64_t out, int64_t in,
                     lb_gptq_format fmt) {
    s->out = out;
    s->in = in;
    int maxq = (1 << s->bits) - 1;
    s->ng = s->gs < 0 ? 1 : (in + s->gs - 1) / s->gs;
    s->codes = malloc((size_t)(out * in) * 4);
    s->zeros = malloc((size_t)(s->ng * out) * 4);
    s->scales = malloc((size_t)(s->ng * out) * 4);
    s->g_idx = malloc((size_t)in * 4);
    for (int64_t i = 0; i < out * in; i++)
        s->codes[i] = (int32_t)(urand() % (uint32_t)(maxq + 1));
    for (int64_t i = 0; i < s->ng * out; i++) {
        if (s->sym)
            s->zeros[i] = (maxq + 1) / 2;
        else if (fmt == LB_GPTQ_FORMAT_V1)
            s->zeros[i] = 1 + (int32_t)(urand() % (uint32_t)(maxq + 1));
        else
            s->zeros[i] = (int32_t)(urand() % (uint32_t)(maxq + 1));
        float sc = (float)(1 + urand() % 1000) / 7919.0f;
        s->scales[i] = lb_f16_to_f32(lb_f32_to_f16(sc));
    }
    for (int64_t c = 0; c < in; c++)
        s->g_idx[c] = s->gs < 0 ? 0 : (int32_t)(c / s->gs);
    if (s->desc_act) /* a permutation of the group labels */
        for (int64_t c = in - 1; c > 0; c--) {
            int64_t j = urand() % (uint64_t)(c + 1);
            int32_t t = s->g_idx[c];
            s->g_idx[c] = s->g_idx[j];
            s->g_idx[j] = t;
        }
    s->qweight = malloc((size_t)(in * s->bits / 32 * out) * 4);
    s->qzeros = malloc((size_t)(s->ng * out * s->bits / 32) * 4);
    s->scales16 = malloc((size_t)(s->ng * out) * 2);
    TH_CHECK_OK(lb_gptq_pack_qweight(s->codes, out, in, s->bits, s->qweight));
    TH_CHECK_OK(lb_gptq_pack_qzeros(s->zeros, s->ng, out, s->bits, fmt,
                                    s->qzeros));
    for (int64_t i = 0; i < s->ng * out; i++)
        s->scales16[i] = lb_f32_to_f16(s->scales[i]);
}

static void syn_free(syn_linear *s) {
    free(s->codes), free(s->zeros), free(s->scales), free(s->g_idx);
    free(s->qweight), free(s->qzeros), free(s->scales16);
}

/* expected dequantized weight */
static float syn_w(const syn_linear *s, int64_t o, int64_t c) {
    int32_t g = s->g_idx[c];
    return s->scales[g * s->out + o] *
           (float)(s->codes[o * s->in + c] - s->zeros[g * s->out + o]);
}

static bool write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* A checkpoint dir from the qwen2 random model with linears replaced by
 * lin[layer*7 + i] (dense ones copied), qconfig JSON text added to
 * config.json. */
static void write_ckpt(const char *dir, syn_linear *lin, const char *qcfg,
                       const char *extra_tensor) {
    mkdir(dir, 0755);
    const char *src = th_shared("models/random/qwen2-random");
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(src, &st));
    size_t n = 0;
    char p[700];
    snprintf(p, sizeof p, "%s/config.json", src);
    char *cfg = th_read_bin(p, &n);
    cJSON *cj = cJSON_ParseWithLength(cfg, n);
    free(cfg);
    cJSON_AddItemToObject(cj, "quantization_config", cJSON_Parse(qcfg));
    char *out = cJSON_Print(cj);
    snprintf(p, sizeof p, "%s/config.json", dir);
    TH_CHECK(write_text(p, out));
    free(out);
    cJSON_Delete(cj);
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_writer_create(&w));
    char names[64][128];
    int nn = 0;
    for (size_t i = 0; i < lb_st_count(st); i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        int L = -1, k = -1;
        for (int l = 0; l < 2; l++)
            for (int j = 0; j < 7; j++) {
                char nm[128];
                snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l,
                         lin_names[j]);
                if (!strcmp(nm, t->name)) L = l, k = j;
            }
        if (L < 0 || lin[L * 7 + k].dense) {
            TH_CHECK_OK(lb_st_writer_add(w, t->name, t->type, t->n_dims,
                                         t->shape, t->data));
            continue;
        }
        syn_linear *s = &lin[L * 7 + k];
        char *base = names[nn++];
        snprintf(base, 128, "model.layers.%d.%s", L, lin_names[k]);
        char nm[160];
        int64_t sh[2];
        sh[0] = s->in * s->bits / 32, sh[1] = s->out;
        snprintf(nm, sizeof nm, "%s.qweight", base);
        TH_CHECK_OK(lb_st_writer_add(w, nm, LB_TYPE_I32, 2, sh, s->qweight));
        sh[0] = s->ng, sh[1] = s->out * s->bits / 32;
        snprintf(nm, sizeof nm, "%s.qzeros", base);
        TH_CHECK_OK(lb_st_writer_add(w, nm, LB_TYPE_I32, 2, sh, s->qzeros));
        sh[0] = s->ng, sh[1] = s->out;
        snprintf(nm, sizeof nm, "%s.scales", base);
        TH_CHECK_OK(lb_st_writer_add(w, nm,
                                     s->f32_scales ? LB_TYPE_F32 : LB_TYPE_F16,
                                     2, sh,
                                     s->f32_scales ? (void *)s->scales
                                                   : (void *)s->scales16));
        if (!s->no_gidx) {
            snprintf(nm, sizeof nm, "%s.g_idx", base);
            TH_CHECK_OK(lb_st_writer_add(w, nm, LB_TYPE_I32, 1, &s->in,
                                         s->g_idx));
        }
    }
    static float junk[64];
    if (extra_tensor) {
        junk[3] = 1.0f;
        int64_t len = 64;
        TH_CHECK_OK(lb_st_writer_add(w, extra_tensor, LB_TYPE_F32, 1, &len,
                                     junk));
    }
    snprintf(p, sizeof p, "%s/gptq_model-test.safetensors", dir);
    TH_CHECK_OK(lb_st_writer_write_file(w, p));
    lb_st_writer_free(w);
    lb_st_close(st);
}

static void syn_set_all(syn_linear *lin, int bits, int gs, bool sym,
                        bool desc_act, lb_gptq_format fmt) {
    lb_model *src = NULL;
    TH_CHECK_OK(lb_model_load(th_shared("models/random/qwen2-random"), NULL,
                              &src));
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < 7; i++) {
            syn_linear *s = &lin[l * 7 + i];
            s->bits = bits;
            s->gs = gs;
            s->sym = sym;
            s->desc_act = desc_act;
            const lb_tensor *t = &src->layers[l].w[i];
            syn_make(s, t->shape[0], t->shape[1], fmt);
        }
    lb_model_free(src);
}

/* Compare every loaded linear with the test's own dequantization. */
static void check_loaded(lb_model *m, syn_linear *lin, const char *what,
                         lb_type want_type, double tol) {
    int64_t bad = 0, n = 0;
    double maxd = 0;
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < 7; i++) {
            const lb_tensor *t = &m->layers[l].w[i];
            syn_linear *s = &lin[l * 7 + i];
            if (s->dense) continue;
            TH_CHECK_MSG((int)want_type < 0 || t->type == want_type,
                         "%s: layer %d %s type %s", what, l, lin_names[i],
                         lb_type_name(t->type));
            size_t rb;
            lb_row_size(t->type, s->in, &rb);
            float *row = malloc((size_t)s->in * 4);
            for (int64_t o = 0; o < s->out; o++) {
                TH_CHECK_OK(lb_tensor_dequant_row(t, o, row)); /* loaded X16 */
                for (int64_t c = 0; c < s->in; c++) {
                    double d = fabs((double)row[c] - (double)syn_w(s, o, c));
                    if (d > maxd) maxd = d;
                    bad += d > tol;
                    n++;
                }
            }
            free(row);
        }
    TH_CHECK_MSG(bad == 0, "%s: %lld of %lld weights off (max %g)", what,
                 (long long)bad, (long long)n, maxd);
}

static void test_synthetic_bits_formats(void) {
    static const struct {
        int bits, gs;
        bool sym, desc_act;
        lb_gptq_format fmt;
        lb_type auto_type;
    } cases[] = {
        {4, 32, true, false, LB_GPTQ_FORMAT_V1, LB_TYPE_Q4_0},
        {4, -1, true, false, LB_GPTQ_FORMAT_V2, LB_TYPE_Q4_0},
        {4, 64, false, false, LB_GPTQ_FORMAT_V1, LB_TYPE_F32},
        {4, 32, true, true, LB_GPTQ_FORMAT_V1, LB_TYPE_F32},
        {8, 32, true, false, LB_GPTQ_FORMAT_V1, LB_TYPE_Q8_0},
        {8, 64, false, true, LB_GPTQ_FORMAT_V2, LB_TYPE_F32},
        {3, 32, false, false, LB_GPTQ_FORMAT_V1, LB_TYPE_F32},
        {3, 16, true, true, LB_GPTQ_FORMAT_V2, LB_TYPE_F32},
        {2, 64, false, false, LB_GPTQ_FORMAT_V2, LB_TYPE_F32},
        {2, 32, true, false, LB_GPTQ_FORMAT_V1, LB_TYPE_F32},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        syn_linear lin[14];
        memset(lin, 0, sizeof lin);
        syn_set_all(lin, cases[k].bits, cases[k].gs, cases[k].sym,
                    cases[k].desc_act, cases[k].fmt);
        char dir[600], qc[400], what[64];
        snprintf(dir, sizeof dir, "%s/syn%zu", th_tmpdir(), k);
        snprintf(qc, sizeof qc,
                 "{\"quant_method\":\"gptq\",\"bits\":%d,\"group_size\":%d,"
                 "\"sym\":%s,\"desc_act\":%s,\"checkpoint_format\":\"%s\"}",
                 cases[k].bits, cases[k].gs, cases[k].sym ? "true" : "false",
                 cases[k].desc_act ? "true" : "false",
                 cases[k].fmt == LB_GPTQ_FORMAT_V1 ? "gptq" : "gptq_v2");
        snprintf(what, sizeof what, "%d-bit gs %d %s%s %s", cases[k].bits,
                 cases[k].gs, cases[k].sym ? "sym" : "asym",
                 cases[k].desc_act ? " desc_act" : "",
                 cases[k].fmt == LB_GPTQ_FORMAT_V1 ? "v1" : "v2");
        write_ckpt(dir, lin, qc, NULL);
        for (int mode = 0; mode < 3; mode++) {
            lb_model_load_opts o = {0};
            o.gptq_mode = mode == 0   ? LB_GPTQ_LOAD_AUTO
                          : mode == 1 ? LB_GPTQ_LOAD_F32
                                      : LB_GPTQ_LOAD_F16;
            lb_model *m = NULL;
            TH_CHECK_OK(lb_model_load(dir, &o, &m));
            if (!m) continue;
            if (mode == 0) check_loaded(m, lin, what, cases[k].auto_type, 0.0);
            if (mode == 1) check_loaded(m, lin, what, LB_TYPE_F32, 0.0);
            /* F16: each weight rounded once (|w| < 2^8 here) */
            if (mode == 2) check_loaded(m, lin, what, LB_TYPE_F16, 0.125);
            lb_model_free(m);
        }
        for (int i = 0; i < 14; i++) syn_free(&lin[i]);
    }
}

/* FAST mode: 4-bit asym -> Q4_1 within the f16 rounding of m. */
static void test_q4_1_fast(void) {
    syn_linear lin[14];
    memset(lin, 0, sizeof lin);
    syn_set_all(lin, 4, 32, false, false, LB_GPTQ_FORMAT_V2);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/q41", th_tmpdir());
    write_ckpt(dir, lin,
               "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":32,"
               "\"sym\":false,\"checkpoint_format\":\"gptq_v2\"}",
               NULL);
    lb_model_load_opts o = {0};
    o.gptq_mode = LB_GPTQ_LOAD_FAST;
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(dir, &o, &m));
    /* scales <= 1000/7919 and zeros <= 15: |m| < 2, ulp_f16 <= 2^-10 */
    if (m) check_loaded(m, lin, "Q4_1", LB_TYPE_Q4_1, 1.0 / 1024 + 1e-6);
    lb_model_free(m);
    for (int i = 0; i < 14; i++) syn_free(&lin[i]);
}

/* No g_idx, F32 scales, "dynamic" rules: layer 1's MLP 8-bit, layer 0's
 * o_proj excluded (dense weight kept). */
static void test_mixed_dynamic(void) {
    syn_linear lin[14];
    memset(lin, 0, sizeof lin);
    lb_model *src = NULL;
    TH_CHECK_OK(lb_model_load(th_shared("models/random/qwen2-random"), NULL,
                              &src));
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < 7; i++) {
            syn_linear *s = &lin[l * 7 + i];
            bool mlp = i >= 4;
            s->bits = l == 1 && mlp ? 8 : 4;
            s->gs = l == 1 && mlp ? 64 : 32;
            s->sym = true;
            s->no_gidx = i == 2;
            s->f32_scales = i == 1;
            s->dense = l == 0 && i == 3;
            if (!s->dense)
                syn_make(s, src->layers[l].w[i].shape[0],
                         src->layers[l].w[i].shape[1], LB_GPTQ_FORMAT_V1);
        }
    char dir[600];
    snprintf(dir, sizeof dir, "%s/dyn", th_tmpdir());
    write_ckpt(dir, lin,
               "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":32,"
               "\"sym\":true,\"dynamic\":{"
               "\"-:model\\\\.layers\\\\.0\\\\.self_attn\\\\.o_proj\":{},"
               "\"+:.*\\\\.1\\\\.mlp\\\\.\":{\"bits\":8,\"group_size\":64}}}",
               NULL);
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(dir, NULL, &m));
    if (m) {
        check_loaded(m, lin, "mixed", (lb_type)-1, 0.0);
        for (int i = 0; i < 7; i++) {
            TH_CHECK_INT(m->layers[0].w[i].type,
                         i == 3 ? LB_TYPE_F32 : LB_TYPE_Q4_0);
            TH_CHECK_INT(m->layers[1].w[i].type,
                         i >= 4 ? LB_TYPE_Q8_0 : LB_TYPE_Q4_0);
        }
        TH_CHECK_INT(m->layers[0].w[3].type, LB_TYPE_F32);
        TH_CHECK(memcmp(m->layers[0].w[3].data, src->layers[0].w[3].data,
                        m->layers[0].w[3].nbytes) == 0);
        TH_CHECK_INT(m->layers[1].w[6].type, LB_TYPE_Q8_0);
        TH_CHECK_INT(m->layers[1].w[0].type, LB_TYPE_Q4_0);
        /* biases (qwen2) kept */
        TH_CHECK(memcmp(m->layers[1].bq.data, src->layers[1].bq.data,
                        src->layers[1].bq.nbytes) == 0);
    }
    lb_model_free(m);
    /* a config that contradicts the tensors: layer-1 MLP said to be 4-bit */
    snprintf(dir, sizeof dir, "%s/dyn-bad", th_tmpdir());
    write_ckpt(dir, lin,
               "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":32,"
               "\"dynamic\":{\"-:model\\\\.layers\\\\.0\\\\.self_attn\\\\."
               "o_proj\":{}}}",
               NULL);
    TH_CHECK_FAILS(lb_model_load(dir, NULL, &m), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "model.layers.1.mlp.gate_proj.qweight"));
    TH_CHECK(strstr(lb_last_error(), "8-bit"));
    lb_model_free(src);
    for (int i = 0; i < 14; i++)
        if (!lin[i].dense) syn_free(&lin[i]);
}

static void test_qconfig(void) {
    lb_gptq_qconfig q;
    const char *js =
        "{\"bits\":4,\"group_size\":128,\"desc_act\":true,\"sym\":false,"
        "\"lm_head\":true,\"format\":\"gptq_v2\",\"meta\":{\"quantizer\":"
        "[\"gptqmodel:2.0\"]},\"dynamic\":{\"-:.*lm_head\":{},"
        "\".*down_proj\":{\"bits\":8,\"sym\":true},"
        "\"+:model\\\\.layers\\\\.[0-3]\\\\.\":{\"group_size\":32}}}";
    TH_CHECK_OK(lb_gptq_qconfig_parse(js, strlen(js), "t", &q));
    TH_CHECK_INT(q.bits, 4);
    TH_CHECK_INT(q.group_size, 128);
    TH_CHECK(q.desc_act && !q.sym && q.lm_head && q.true_sequential);
    TH_CHECK_INT(q.format, LB_GPTQ_FORMAT_V2);
    TH_CHECK_STR(q.quantizer, "gptqmodel:2.0");
    TH_CHECK_INT(q.n_dynamic, 3);
    lb_gptq_module_cfg c = lb_gptq_qconfig_module(&q, "lm_head");
    TH_CHECK(!c.quantized);
    c = lb_gptq_qconfig_module(&q, "model.layers.2.mlp.down_proj");
    TH_CHECK(c.quantized && c.bits == 8 && c.sym && c.group_size == 128);
    c = lb_gptq_qconfig_module(&q, "model.layers.2.mlp.up_proj");
    TH_CHECK(c.quantized && c.bits == 4 && !c.sym && c.group_size == 32);
    /* re.match is anchored at the start */
    c = lb_gptq_qconfig_module(&q, "x.model.layers.2.mlp.up_proj");
    TH_CHECK(c.group_size == 128);
    c = lb_gptq_qconfig_module(&q, "model.layers.12.mlp.up_proj");
    TH_CHECK(c.group_size == 128);
    lb_gptq_qconfig_clear(&q);
    /* defaults and AutoGPTQ's quantize_config.json */
    size_t n;
    char *qj = th_read_bin(th_shared("reference/gptq_model/gptq_checkpoint/"
                                     "quantize_config.json"),
                           &n);
    TH_CHECK_OK(lb_gptq_qconfig_parse(qj, n, "qc", &q));
    TH_CHECK(q.bits == 4 && q.group_size == 128 && q.sym && !q.desc_act &&
             !q.lm_head && q.format == LB_GPTQ_FORMAT_V1 &&
             q.damp_percent == 0.01);
    lb_gptq_qconfig_clear(&q);
    free(qj);
    static const struct {
        const char *js;
        lb_status st;
        const char *msg;
    } bad[] = {
        {"{\"bits\":5,\"group_size\":128}", LB_ERR_UNSUPPORTED, "bits = 5"},
        {"{\"group_size\":128}", LB_ERR_FORMAT, "\"bits\" missing"},
        {"{\"bits\":4}", LB_ERR_FORMAT, "\"group_size\" missing"},
        {"{\"bits\":4,\"group_size\":0}", LB_ERR_FORMAT, "group_size = 0"},
        {"{\"bits\":4.5,\"group_size\":128}", LB_ERR_FORMAT, "bits"},
        {"{\"bits\":4,\"group_size\":128,\"quant_method\":\"awq\","
         "\"version\":\"gemv\"}",
         LB_ERR_UNSUPPORTED, "gemv"},
        {"{\"bits\":3,\"group_size\":128,\"quant_method\":\"awq\"}",
         LB_ERR_UNSUPPORTED, "GEMM layout holds 4-bit"},
        {"{\"bits\":4,\"group_size\":128,\"quant_method\":\"exl2\"}",
         LB_ERR_UNSUPPORTED, "exl2"},
        {"{\"bits\":4,\"group_size\":128,\"checkpoint_format\":\"marlin\"}",
         LB_ERR_UNSUPPORTED, "marlin"},
        {"{\"bits\":4,\"group_size\":128,\"is_marlin_format\":true}",
         LB_ERR_UNSUPPORTED, "Marlin"},
        {"{\"bits\":4,\"group_size\":128,\"sym\":\"yes\"}", LB_ERR_FORMAT,
         "\"sym\""},
        {"{\"bits\":4,\"group_size\":128,\"dynamic\":{\"+:(\":{}}}",
         LB_ERR_FORMAT, "dynamic pattern \"(\""},
        {"{\"bits\":4,\"group_size\":128,\"dynamic\":{\"a\":{\"bits\":6}}}",
         LB_ERR_UNSUPPORTED, "bits = 6"},
        {"{\"bits\":4,\"group_size\":128,\"dynamic\":[1]}", LB_ERR_FORMAT,
         "dynamic"},
        {"[4]", LB_ERR_FORMAT, "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        TH_CHECK_FAILS(lb_gptq_qconfig_parse(bad[i].js, strlen(bad[i].js),
                                             "lbl", &q),
                       bad[i].st);
        TH_CHECK_MSG(strstr(lb_last_error(), bad[i].msg) &&
                         strstr(lb_last_error(), "lbl"),
                     "case %zu: %s", i, lb_last_error());
    }
}

/* exact_type / repack decisions on hand-made views */
static void test_repack_rules(void) {
    syn_linear s = {.bits = 4, .gs = 128, .sym = true};
    syn_make(&s, 64, 256, LB_GPTQ_FORMAT_V1);
    lb_gptq_linear l = {.out_features = 64, .in_features = 256, .bits = 4,
                        .n_groups = s.ng, .format = LB_GPTQ_FORMAT_V1,
                        .qweight = s.qweight, .qzeros = s.qzeros,
                        .scales = s.scales16, .scales_type = LB_TYPE_F16,
                        .g_idx = s.g_idx, .group_size = 128};
    TH_CHECK_OK(lb_gptq_linear_check(&l, "t"));
    TH_CHECK_INT(lb_gptq_linear_exact_type(&l), LB_TYPE_Q4_0);
    /* F32 scales that are not f16 values: not exact */
    float *s32 = malloc((size_t)(s.ng * 64) * 4);
    for (int i = 0; i < s.ng * 64; i++) s32[i] = s.scales[i] * 1.0001f;
    l.scales = s32;
    l.scales_type = LB_TYPE_F32;
    TH_CHECK_INT(lb_gptq_linear_exact_type(&l), -1);
    static uint8_t buf[64 * 8 * 34];
    TH_CHECK_FAILS(lb_gptq_linear_repack(&l, LB_TYPE_Q4_0, buf, sizeof buf),
                   LB_ERR_UNSUPPORTED);
    l.scales = s.scales16;
    l.scales_type = LB_TYPE_F16;
    /* one g_idx entry moved: block 0 spans two groups */
    int32_t gi[256];
    memcpy(gi, s.g_idx, sizeof gi);
    gi[5] = 1;
    l.g_idx = gi;
    TH_CHECK_INT(lb_gptq_linear_exact_type(&l), -1);
    TH_CHECK_FAILS(lb_gptq_linear_repack(&l, LB_TYPE_Q4_1, buf, sizeof buf),
                   LB_ERR_UNSUPPORTED);
    /* a whole block moved to another group stays exact */
    for (int c = 0; c < 32; c++) gi[c] = 1;
    for (int c = 128; c < 160; c++) gi[c] = 0;
    TH_CHECK_INT(lb_gptq_linear_exact_type(&l), LB_TYPE_Q4_0);
    TH_CHECK_OK(lb_gptq_linear_repack(&l, LB_TYPE_Q4_0, buf, sizeof buf));
    float row[256];
    size_t rb;
    lb_row_size(LB_TYPE_Q4_0, 256, &rb);
    int64_t bad = 0;
    for (int o = 0; o < 64; o++) {
        lb_dequantize_row(LB_TYPE_Q4_0, buf + o * rb, row, 256);
        for (int c = 0; c < 256; c++)
            bad += row[c] != s.scales[gi[c] * 64 + o] *
                                 (float)(s.codes[o * 256 + c] - 8);
    }
    TH_CHECK_INT(bad, 0);
    /* dst too small, wrong type for the bits */
    TH_CHECK_FAILS(lb_gptq_linear_repack(&l, LB_TYPE_Q4_0, buf, 100),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gptq_linear_repack(&l, LB_TYPE_Q8_0, buf, sizeof buf),
                   LB_ERR_UNSUPPORTED);
    TH_CHECK_FAILS(lb_gptq_linear_repack(&l, LB_TYPE_Q5_0, buf, sizeof buf),
                   LB_ERR_UNSUPPORTED);
    /* checks */
    gi[7] = 2; /* only 2 groups */
    TH_CHECK_FAILS(lb_gptq_linear_check(&l, "mylin"), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "mylin.g_idx[7] = 2"));
    gi[7] = -1;
    TH_CHECK_FAILS(lb_gptq_linear_check(&l, "mylin"), LB_ERR_FORMAT);
    gi[7] = 0;
    uint16_t *sc = malloc((size_t)(s.ng * 64) * 2);
    memcpy(sc, s.scales16, (size_t)(s.ng * 64) * 2);
    sc[70] = 0x7C00; /* +Inf */
    l.scales = sc;
    TH_CHECK_FAILS(lb_gptq_linear_check(&l, "mylin"), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "mylin.scales[1, 6]"));
    l.scales = s.scales16;
    l.g_idx = NULL;
    l.group_size = 64; /* 4 groups expected, 2 present */
    TH_CHECK_FAILS(lb_gptq_linear_check(&l, "mylin"), LB_ERR_FORMAT);
    l.group_size = 128;
    TH_CHECK_OK(lb_gptq_linear_check(&l, "mylin"));
    l.in_features = 250;
    TH_CHECK_FAILS(lb_gptq_linear_check(&l, "mylin"), LB_ERR_FORMAT);
    free(sc);
    free(s32);
    syn_free(&s);
}

/* Hostile checkpoint directories. */
static void test_bad_checkpoints(void) {
    syn_linear lin[14];
    memset(lin, 0, sizeof lin);
    syn_set_all(lin, 4, 32, true, false, LB_GPTQ_FORMAT_V1);
    const char *qc = "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":32}";
    char dir[600];
    lb_model *m = NULL;
    /* a g_idx out of range */
    lin[3].g_idx[9] = 99;
    snprintf(dir, sizeof dir, "%s/bad-gidx", th_tmpdir());
    write_ckpt(dir, lin, qc, NULL);
    TH_CHECK_FAILS(lb_model_load(dir, NULL, &m), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(),
                    "model.layers.0.self_attn.o_proj.g_idx[9] = 99"));
    lin[3].g_idx[9] = 0;
    /* NaN scale */
    uint16_t keep = lin[8].scales16[5];
    lin[8].scales16[5] = 0x7E00;
    snprintf(dir, sizeof dir, "%s/bad-scale", th_tmpdir());
    write_ckpt(dir, lin, qc, NULL);
    TH_CHECK_FAILS(lb_model_load(dir, NULL, &m), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "model.layers.1.self_attn.k_proj.scales"));
    lin[8].scales16[5] = keep;
    /* bits in the config contradict the qweight shape */
    snprintf(dir, sizeof dir, "%s/bad-bits", th_tmpdir());
    write_ckpt(dir, lin,
               "{\"quant_method\":\"gptq\",\"bits\":8,\"group_size\":32}",
               NULL);
    TH_CHECK_FAILS(lb_model_load(dir, NULL, &m), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "4-bit codes but the quantization "
                                     "config says 8"));
    /* a mis-shaped qzeros (group count larger than the input) */
    syn_linear keep1 = lin[0];
    lin[0].ng = 65;
    lin[0].qzeros = calloc(65 * 8, 4);
    lin[0].scales16 = calloc(65 * 64, 2);
    snprintf(dir, sizeof dir, "%s/bad-qzeros", th_tmpdir());
    write_ckpt(dir, lin, qc, NULL);
    TH_CHECK_FAILS(lb_model_load(dir, NULL, &m), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "model.layers.0.self_attn.q_proj.qzeros"));
    free(lin[0].qzeros);
    free(lin[0].scales16);
    lin[0] = keep1;
    /* a non-zero bias where the architecture has none */
    snprintf(dir, sizeof dir, "%s/bad-bias", th_tmpdir());
    write_ckpt(dir, lin, qc, "model.layers.1.mlp.down_proj.bias");
    TH_CHECK_FAILS(lb_model_load(dir, NULL, &m), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "model.layers.1.mlp.down_proj.bias"));
    /* unsupported method; quantize_config.json without quantization_config */
    snprintf(dir, sizeof dir, "%s/bad-awq", th_tmpdir());
    write_ckpt(dir, lin, "{\"quant_method\":\"exl2\",\"bits\":4}", NULL);
    TH_CHECK_FAILS(lb_model_load(dir, NULL, &m), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "exl2"));
    /* two weight files, no index */
    snprintf(dir, sizeof dir, "%s/two-files", th_tmpdir());
    write_ckpt(dir, lin, qc, NULL);
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/gptq_model-test.safetensors", dir);
    snprintf(b, sizeof b, "%s/other.safetensors", dir);
    TH_CHECK(link(a, b) == 0);
    TH_CHECK_FAILS(lb_model_load(dir, NULL, &m), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "2 .safetensors files"));
    /* quantize_config.json alone (older AutoGPTQ): recognised and read */
    snprintf(dir, sizeof dir, "%s/qc-only", th_tmpdir());
    mkdir(dir, 0755);
    {
        char src[700], dst[700];
        snprintf(src, sizeof src, "%s/syn-ok", th_tmpdir());
        write_ckpt(src, lin, qc, NULL);
        size_t n;
        char *cfg = th_read_bin(th_shared("models/random/qwen2-random/"
                                          "config.json"),
                                &n);
        snprintf(dst, sizeof dst, "%s/config.json", dir);
        FILE *f = fopen(dst, "wb");
        fwrite(cfg, 1, n, f);
        fclose(f);
        free(cfg);
        snprintf(dst, sizeof dst, "%s/quantize_config.json", dir);
        TH_CHECK(write_text(dst, "{\"bits\": 4, \"group_size\": 32, "
                                 "\"sym\": true, \"desc_act\": false}"));
        snprintf(a, sizeof a, "%s/gptq_model-test.safetensors", src);
        snprintf(b, sizeof b, "%s/gptq_model-test.safetensors", dir);
        TH_CHECK(link(a, b) == 0);
        TH_CHECK_OK(lb_model_load(dir, NULL, &m));
        if (m) check_loaded(m, lin, "quantize_config.json", LB_TYPE_Q4_0, 0);
        lb_model_free(m);
        m = NULL;
    }
    for (int i = 0; i < 14; i++) syn_free(&lin[i]);
}

/* Phi-3 fused qkv_proj / gate_up_proj, split where no 16-row group ends
 * (q 64 rows, k and v 8 each; gate and up 40 each): every view is
 * repacked on its own after the split, so the repacked load (X16, whose
 * Q4_0 products are the row form's bits) gives the logits of LB_REPACK=0,
 * bit for bit. Repacking the fused tensor before the split put the views'
 * row-form tails inside interleaved groups (wrong weights). */
static void test_phi3_fused_views(void) {
    char dir[600], p[700];
    snprintf(dir, sizeof dir, "%s/phi3views", th_tmpdir());
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/config.json", dir);
    TH_CHECK(write_text(p, "{\"architectures\": [\"Phi3ForCausalLM\"], \"model_type\": \"phi3\", "
                           "\"hidden_size\": 64, \"intermediate_size\": 40, \"num_attention_heads\": 8, "
                           "\"num_key_value_heads\": 1, \"num_hidden_layers\": 1, \"vocab_size\": 64, "
                           "\"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, \"max_position_embeddings\": 64, "
                           "\"tie_word_embeddings\": false, \"quantization_config\": {\"quant_method\": "
                           "\"gptq\", \"bits\": 4, \"group_size\": 32, \"sym\": true, \"desc_act\": false}}"));
    static float dense[64 * 64];
    for (int i = 0; i < 64 * 64; i++) dense[i] = (float)((int)(urand() % 2001) - 1000) / 4000.0f;
    static float ones[64];
    for (int i = 0; i < 64; i++) ones[i] = 1.0f;
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_writer_create(&w));
    const int64_t emb[2] = {64, 64}, vec[1] = {64}, down[2] = {64, 40};
    TH_CHECK_OK(lb_st_writer_add(w, "model.embed_tokens.weight", LB_TYPE_F32, 2, emb, dense));
    TH_CHECK_OK(lb_st_writer_add(w, "lm_head.weight", LB_TYPE_F32, 2, emb, dense));
    TH_CHECK_OK(lb_st_writer_add(w, "model.norm.weight", LB_TYPE_F32, 1, vec, ones));
    TH_CHECK_OK(lb_st_writer_add(w, "model.layers.0.input_layernorm.weight", LB_TYPE_F32, 1, vec, ones));
    TH_CHECK_OK(lb_st_writer_add(w, "model.layers.0.post_attention_layernorm.weight", LB_TYPE_F32, 1, vec,
                                 ones));
    TH_CHECK_OK(lb_st_writer_add(w, "model.layers.0.mlp.down_proj.weight", LB_TYPE_F32, 2, down, dense));
    /* 4-bit sym g32, v1: codes random, zeros 8 (stored 7: qzeros words
     * 0x77777777, [2, out / 8] as the loader reads them), f16 scales */
    static const char *names[3] = {"self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj"};
    const int64_t outs[3] = {80, 64, 80};
    static int32_t codes[80 * 64], qweight[8 * 80], qzeros[2 * 10];
    static uint16_t scales[3][2 * 80];
    for (int i = 0; i < 2 * 10; i++) qzeros[i] = 0x77777777;
    for (int k = 0; k < 3; k++) {
        const int64_t out = outs[k];
        for (int64_t i = 0; i < out * 64; i++) codes[i] = (int32_t)(urand() % 16);
        TH_CHECK_OK(lb_gptq_pack_qweight(codes, out, 64, 4, qweight));
        for (int64_t i = 0; i < 2 * out; i++)
            scales[k][i] = lb_f32_to_f16((float)(1 + urand() % 1000) / 7919.0f);
        char nm[160];
        int64_t sh[2] = {8, out};
        snprintf(nm, sizeof nm, "model.layers.0.%s.qweight", names[k]);
        TH_CHECK_OK(lb_st_writer_add(w, nm, LB_TYPE_I32, 2, sh, qweight));
        sh[0] = 2, sh[1] = out / 8;
        snprintf(nm, sizeof nm, "model.layers.0.%s.qzeros", names[k]);
        TH_CHECK_OK(lb_st_writer_add(w, nm, LB_TYPE_I32, 2, sh, qzeros));
        sh[0] = 2, sh[1] = out;
        snprintf(nm, sizeof nm, "model.layers.0.%s.scales", names[k]);
        TH_CHECK_OK(lb_st_writer_add(w, nm, LB_TYPE_F16, 2, sh, scales[k]));
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    TH_CHECK_OK(lb_st_writer_write_file(w, p));
    lb_st_writer_free(w);
    const int32_t toks[6] = {1, 7, 33, 2, 63, 12};
    float logits[2][6 * 64];
    for (int k = 0; k < 2; k++) {
        if (k == 0) setenv("LB_REPACK", "0", 1);
        else unsetenv("LB_REPACK");
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(dir, NULL, &m));
        if (!m) return;
        const lb_tensor *L = m->layers[0].w;
        TH_CHECK_INT(L[LB_LINEAR_Q].type, LB_TYPE_Q4_0);
        TH_CHECK_INT(L[LB_LINEAR_K].shape[0], 8);
        TH_CHECK_INT(L[LB_LINEAR_UP].shape[0], 40);
        if (k == 1 && strstr(lb_kernel_name(LB_TYPE_Q4_0, 1), "x16")) { /* repacking family */
            TH_CHECK(L[LB_LINEAR_Q].layout == LB_LAYOUT_X16);
            TH_CHECK(L[LB_LINEAR_GATE].layout == LB_LAYOUT_X16 && L[LB_LINEAR_UP].layout == LB_LAYOUT_X16);
        }
        /* each linear alone: the same bits as in row form */
        static float X[6 * 64], Y[2][LB_LINEAR_COUNT][6 * 80];
        for (int i = 0; i < 6 * 64; i++) X[i] = (float)((i * 37) % 101 - 50) / 50.0f;
        for (int i = 0; i < LB_LINEAR_COUNT; i++)
            if (L[i].data && L[i].shape[1] == 64) {
                TH_CHECK_OK(lb_matmul(NULL, &L[i], X, Y[k][i], 6));
                if (k == 1)
                    TH_CHECK_MSG(memcmp(Y[0][i], Y[1][i], sizeof(float) * 6 * (size_t)L[i].shape[0]) == 0,
                                 "linear %d (%lld rows, layout %d): not the row form's products", i,
                                 (long long)L[i].shape[0], L[i].layout);
            }
        lb_context_params cp = lb_context_default_params();
        cp.n_ctx = 16;
        cp.n_threads = 1;
        lb_context *ctx = NULL;
        TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
        if (ctx) TH_CHECK_OK(lb_model_forward(ctx, toks, 6, 0, logits[k], LB_LOGITS_ALL));
        lb_context_free(ctx);
        lb_model_free(m);
    }
    /* the whole forward too (SwiGLU's tails go through the same 8-lane
     * code whatever the chunking, vec_avx2.c silu_mul) */
    TH_CHECK(memcmp(logits[0], logits[1], sizeof logits[0]) == 0);
}

int main(void) {
    TH_RUN(test_qconfig);
    TH_RUN(test_repack_rules);
    TH_RUN(test_autogptq_checkpoint);
    TH_RUN(test_synthetic_bits_formats);
    TH_RUN(test_q4_1_fast);
    TH_RUN(test_mixed_dynamic);
    TH_RUN(test_phi3_fused_views);
    TH_RUN(test_bad_checkpoints);
    nftw(th_tmpdir(), rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return th_report();
}
