/*
 * AWQ (--method awq) on the layer pipeline:
 *  - the AutoAWQ GEMM packing against an unpacker written here from
 *    AutoAWQ's order_map {0,2,4,6,1,3,5,7};
 *  - the grid, the scale search and the clip search against independent
 *    float64 brute forces of the same objectives (AutoAWQ quantizer.py
 *    _compute_best_scale / _compute_best_clip), not lowbit's own output;
 *  - folding: on a model without grouped-query attention and with a
 *    v_proj bias (all four scaling groups active), 8-bit AWQ keeps the
 *    logits within a small distance of the dense model's (a wrong fold
 *    would change the function, whatever the bits);
 *  - tinystories-656k (reference calibration): AWQ 4-bit g128 asym beats
 *    RTN 4-bit g128 asym; the AWQ checkpoint reloads (layout read back
 *    independently), resumes byte-identically, exports directly to Q4_1 /
 *    Q4_0 with parity >= 99.9% top-1;
 *  - sparse calibration coverage; bad AWQ checkpoints (shapes, version,
 *    bits, g_idx) fail naming the tensor.
 */
#include "test_quantize_util.h"

#include "lowbit/export.h"
#include "lowbit/parity.h"
#include "lowbit/tokenizer.h"
#include "quant/awq_internal.h"

#include <math.h>

/* ------------------------------------------------------------------------ */
/* Independent references (float64)                                          */
/* ------------------------------------------------------------------------ */

/* AutoAWQ pseudo_quantize_tensor of one group, in double. */
static void ref_fq(const double *w, int n, int bits, bool sym, double *out) {
    if (sym) {
        double mx = 0;
        for (int i = 0; i < n; i++) mx = fmax(mx, fabs(w[i]));
        mx = fmax(mx, 1e-5);
        double qmax = (1 << (bits - 1)) - 1, qmin = -(1 << (bits - 1));
        double s = mx / qmax;
        for (int i = 0; i < n; i++)
            out[i] = fmin(fmax(nearbyint(w[i] / s), qmin), qmax) * s;
        return;
    }
    double mx = w[0], mn = w[0];
    for (int i = 0; i < n; i++) {
        mx = fmax(mx, w[i]);
        mn = fmin(mn, w[i]);
    }
    double maxq = (1 << bits) - 1;
    double s = fmax(mx - mn, 1e-5) / maxq;
    double z = fmin(fmax(-nearbyint(mn / s), 0), maxq);
    for (int i = 0; i < n; i++)
        out[i] = (fmin(fmax(nearbyint(w[i] / s) + z, 0), maxq) - z) * s;
}

static uint32_t rng_state = 12345;
static double urand(void) { /* [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (double)(rng_state >> 8) / (double)(1u << 23) - 1.0;
}

static void test_pack(void) {
    /* v[r, c] = (r * 3 + c * 5) & 15 over [3, 16] */
    int32_t v[3 * 16], packed[3 * 2];
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 16; c++) v[r * 16 + c] = (r * 3 + c * 5) & 15;
    TH_CHECK_OK(lb_awq_pack(v, 3, 16, packed));
    static const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 2; k++) {
            uint32_t w = (uint32_t)packed[r * 2 + k];
            for (int i = 0; i < 8; i++)
                TH_CHECK_INT((int)((w >> (4 * i)) & 15),
                             v[r * 16 + 8 * k + order[i]]);
            for (int j = 0; j < 8; j++)
                TH_CHECK_INT(lb_awq_field(packed, 16, r, 8 * k + j),
                             v[r * 16 + 8 * k + j]);
        }
    /* word of columns 0..7 = 0,1,...,7: nibbles 0,2,4,6,1,3,5,7 */
    int32_t seq[8] = {0, 1, 2, 3, 4, 5, 6, 7}, one;
    TH_CHECK_OK(lb_awq_pack(seq, 1, 8, &one));
    TH_CHECK_INT((uint32_t)one, 0x75316420u);
    v[5] = 16;
    TH_CHECK_FAILS(lb_awq_pack(v, 3, 16, packed), LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_awq_pack(v, 1, 12, packed), LB_ERR_INVALID_ARG);
}

static void test_grid(void) {
    const float w[4] = {-0.5f, 0.1f, 0.2f, 1.0f};
    float s;
    int32_t z, q[4];
    qz_awq_group(w, 4, 4, false, &s, &z, q);
    /* scale 1.5/15 = 0.1, zero round(5) = 5, codes round(w/0.1) + 5 */
    TH_CHECK_NEAR(s, 0.1, 1e-7);
    TH_CHECK_INT(z, 5);
    TH_CHECK_INT(q[0], 0);
    TH_CHECK_INT(q[1], 6);
    TH_CHECK_INT(q[2], 7);
    TH_CHECK_INT(q[3], 15);
    const float w2[4] = {-0.6f, 0.1f, 0.2f, 1.0f};
    qz_awq_group(w2, 4, 4, true, &s, &z, q);
    /* scale 1/7, zero 8, codes round(w*7) + 8: -4.2 -> 4, 0.7 -> 9,
     * 1.4 -> 9, 7 -> 15 */
    TH_CHECK_NEAR(s, 1.0 / 7, 1e-7);
    TH_CHECK_INT(z, 8);
    TH_CHECK_INT(q[0], 4);
    TH_CHECK_INT(q[1], 9);
    TH_CHECK_INT(q[2], 9);
    TH_CHECK_INT(q[3], 15);
}

/* The scale search against a float64 brute force of its objective. */
static void test_scale_search(void) {
    enum { N = 96, IN = 64, O1 = 32, O2 = 16, GS = 32 };
    float *X = malloc(sizeof(float) * N * IN);
    float *W1 = malloc(sizeof(float) * O1 * IN), *W2 = malloc(sizeof(float) * O2 * IN);
    for (int t = 0; t < N; t++)
        for (int c = 0; c < IN; c++) /* a few salient channels */
            X[t * IN + c] = (float)(urand() * (c % 13 == 0 ? 8.0 : 1.0));
    for (int i = 0; i < O1 * IN; i++) W1[i] = (float)(urand() * 0.1);
    for (int i = 0; i < O2 * IN; i++) W2[i] = (float)(urand() * 0.1);
    for (int pass = 0; pass < 2; pass++) {
        const bool sym = pass == 1;
        qz_awq_linear lins[2] = {{W1, O1, 4, GS, sym, NULL, 0}, {W2, O2, 4, GS, sym, NULL, 0}};
        float s_best[IN];
        double losses[QZ_AWQ_N_GRID];
        int best = -1;
        TH_CHECK_OK(qz_awq_search_scale(X, N, IN, lins, 2, QZ_AWQ_N_GRID, s_best,
                                        losses, &best));
        /* brute force */
        double xm[IN] = {0}, wm[IN] = {0};
        for (int t = 0; t < N; t++)
            for (int c = 0; c < IN; c++) xm[c] += fabs(X[t * IN + c]) / N;
        const float *Ws[2] = {W1, W2};
        const int outs[2] = {O1, O2};
        for (int l = 0; l < 2; l++)
            for (int r = 0; r < outs[l]; r++)
                for (int g = 0; g < IN / GS; g++) {
                    double mx = 0;
                    for (int j = 0; j < GS; j++) mx = fmax(mx, fabs(Ws[l][r * IN + g * GS + j]));
                    for (int j = 0; j < GS; j++)
                        wm[g * GS + j] += fabs(Ws[l][r * IN + g * GS + j]) / (mx + 1e-6) / (O1 + O2);
                }
        double ref_loss[QZ_AWQ_N_GRID];
        int ref_best = 0;
        for (int k = 0; k < QZ_AWQ_N_GRID; k++) {
            double r = k / 20.0, s[IN], mx = 0, mn = INFINITY;
            for (int c = 0; c < IN; c++) {
                s[c] = fmax(pow(xm[c], r) / (pow(wm[c], 1 - r) + 1e-4), 1e-4);
                mx = fmax(mx, s[c]);
                mn = fmin(mn, s[c]);
            }
            for (int c = 0; c < IN; c++) s[c] /= sqrt(mx * mn);
            double loss = 0;
            for (int l = 0; l < 2; l++)
                for (int o = 0; o < outs[l]; o++) {
                    double wq[IN], ws[IN];
                    for (int c = 0; c < IN; c++) ws[c] = Ws[l][o * IN + c] * s[c];
                    for (int g = 0; g < IN / GS; g++) ref_fq(ws + g * GS, GS, 4, sym, wq + g * GS);
                    for (int t = 0; t < N; t++) {
                        double y = 0, yq = 0;
                        for (int c = 0; c < IN; c++) {
                            y += (double)X[t * IN + c] * Ws[l][o * IN + c];
                            yq += (double)X[t * IN + c] * (wq[c] / s[c]);
                        }
                        loss += (y - yq) * (y - yq);
                    }
                }
            ref_loss[k] = loss / (N * (double)(O1 + O2));
            if (ref_loss[k] < ref_loss[ref_best]) ref_best = k;
        }
        int worst = 0;
        for (int k = 0; k < QZ_AWQ_N_GRID; k++) {
            double rel = fabs(losses[k] - ref_loss[k]) / ref_loss[k];
            if (rel > 2e-3) worst++;
        }
        TH_CHECK_MSG(worst == 0, "%d of 20 losses differ from the brute force", worst);
        /* the same winner unless the brute force's top two are within
         * the float/double noise */
        double second = INFINITY;
        for (int k = 0; k < QZ_AWQ_N_GRID; k++)
            if (k != ref_best) second = fmin(second, ref_loss[k]);
        if ((second - ref_loss[ref_best]) / ref_loss[ref_best] > 2e-3)
            TH_CHECK_INT(best, ref_best);
        /* the search must help here (salient channels): the winner is not
         * ratio 0 and beats it clearly */
        TH_CHECK(ref_best > 0 && ref_loss[ref_best] < 0.95 * ref_loss[0]);
        fprintf(stderr, "  scale search (%s): ratio %d/20, loss %.4g vs %.4g at ratio 0 "
                        "(brute force: %d/20)\n", sym ? "sym" : "asym", best, losses[best],
                losses[0], ref_best);
    }
    free(X);
    free(W1);
    free(W2);
}

/* The clip search against a direct float64 evaluation of its objective. */
static void test_clip_search(void) {
    enum { N = 1100, IN = 64, O = 8, GS = 32 };
    float *X = malloc(sizeof(float) * N * IN);
    float W[O * IN], Wc[O * IN];
    for (int i = 0; i < N * IN; i++) X[i] = (float)urand();
    for (int i = 0; i < O * IN; i++) W[i] = (float)(urand() * 0.05);
    W[3] = 0.4f; /* outliers make clipping pay */
    W[IN + 40] = -0.5f;
    memcpy(Wc, W, sizeof W);
    int64_t shrunk = 0;
    TH_CHECK_OK(qz_awq_search_clip(X, N, Wc, O, IN, 4, GS, false, NULL, &shrunk));
    /* the same on 3 workers */
    float W3[O * IN];
    memcpy(W3, W, sizeof W);
    lb_pool *pool = lb_pool_create(3);
    int64_t shrunk3 = 0;
    TH_CHECK_OK(qz_awq_search_clip(X, N, W3, O, IN, 4, GS, false, pool, &shrunk3));
    lb_pool_free(pool);
    TH_CHECK(memcmp(W3, Wc, sizeof W) == 0 && shrunk3 == shrunk);
    const int step = N / 512; /* 2: tokens 0, 2, ..., 1098 */
    int n_shrunk = 0;
    for (int o = 0; o < O; o++)
        for (int g = 0; g < IN / GS; g++) {
            const float *w = W + o * IN + g * GS;
            double m = 0;
            for (int j = 0; j < GS; j++) m = fmax(m, fabs(w[j]));
            double best_err = 1e9, best_mv = m;
            for (int i = 0; i < 10; i++) {
                double mv = (float)(m * (1.0f - i / 20.0f)), cw[GS], q[GS];
                for (int j = 0; j < GS; j++) cw[j] = fmin(fmax(w[j], -mv), mv);
                ref_fq(cw, GS, 4, false, q);
                double err = 0;
                int nt = 0;
                for (int t = 0; t < N; t += step, nt++) {
                    double d = 0;
                    for (int j = 0; j < GS; j++) d += X[t * IN + g * GS + j] * (q[j] - w[j]);
                    err += d * d;
                }
                err /= nt;
                if (err < best_err * (1 - 1e-9)) {
                    best_err = err;
                    best_mv = mv;
                }
            }
            if (best_mv < m) n_shrunk++;
            for (int j = 0; j < GS; j++) {
                double want = fmin(fmax(w[j], -best_mv), best_mv);
                TH_CHECK_NEAR(Wc[o * IN + g * GS + j], want, 1e-6);
            }
        }
    TH_CHECK_INT(shrunk, n_shrunk);
    TH_CHECK(n_shrunk >= 2);
    free(X);
}

/* ------------------------------------------------------------------------ */
/* Models                                                                    */
/* ------------------------------------------------------------------------ */

/* A Qwen2 model without grouped-query attention (v_proj -> o_proj scaling
 * applies) and with q/k/v biases, random F32 weights. */
static const char *make_mha_model(void) {
    const char *dir = tmp_path("mha-qwen2");
    mkdir(dir, 0755);
    char p[800];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\", "
               "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, "
               "\"num_key_value_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 256, "
               "\"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
               "\"tie_word_embeddings\": false, \"torch_dtype\": \"float32\"}\n");
    fclose(f);
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_writer_create(&w));
    static float buf[64][64 * 256];
    int nb = 0;
    char names[64][96];
#define ADD(name, d0, d1, scale, base)                                                  \
    do {                                                                                \
        int64_t sh[2] = {d0, d1};                                                       \
        for (int64_t i = 0; i < (int64_t)(d0) * ((d1) > 0 ? (d1) : 1); i++)              \
            buf[nb][i] = (float)((base) + (scale) * urand());                           \
        snprintf(names[nb], sizeof names[nb], "%s", name);                              \
        TH_CHECK_OK(lb_st_writer_add(w, names[nb], LB_TYPE_F32, (d1) > 0 ? 2 : 1, sh,   \
                                     buf[nb]));                                         \
        nb++;                                                                           \
    } while (0)
    ADD("model.embed_tokens.weight", 256, 64, 1.0, 0.0);
    ADD("lm_head.weight", 256, 64, 0.2, 0.0);
    ADD("model.norm.weight", 64, 0, 0.1, 1.0);
    for (int l = 0; l < 2; l++) {
        char n[96];
#define LN(s) (snprintf(n, sizeof n, "model.layers.%d.%s", l, s), n)
        ADD(LN("input_layernorm.weight"), 64, 0, 0.3, 1.0);
        ADD(LN("post_attention_layernorm.weight"), 64, 0, 0.3, 1.0);
        ADD(LN("self_attn.q_proj.weight"), 64, 64, 0.2, 0.0);
        ADD(LN("self_attn.k_proj.weight"), 64, 64, 0.2, 0.0);
        ADD(LN("self_attn.v_proj.weight"), 64, 64, 0.2, 0.0);
        ADD(LN("self_attn.q_proj.bias"), 64, 0, 0.1, 0.0);
        ADD(LN("self_attn.k_proj.bias"), 64, 0, 0.1, 0.0);
        ADD(LN("self_attn.v_proj.bias"), 64, 0, 0.3, 0.0);
        ADD(LN("self_attn.o_proj.weight"), 64, 64, 0.2, 0.0);
        ADD(LN("mlp.gate_proj.weight"), 128, 64, 0.2, 0.0);
        ADD(LN("mlp.up_proj.weight"), 128, 64, 0.2, 0.0);
        ADD(LN("mlp.down_proj.weight"), 64, 128, 0.15, 0.0);
#undef LN
    }
#undef ADD
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    TH_CHECK_OK(lb_st_writer_write_file(w, p));
    lb_st_writer_free(w);
    return dir;
}

/* Mean squared difference of the next-token logits of two models over
 * a few random windows. */
static double logits_mse(lb_model *a, lb_model *b, const int32_t *ids, int n) {
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = n;
    cp.n_threads = 2;
    lb_context *ca = NULL, *cb = NULL;
    TH_CHECK_OK(lb_context_create(a, &cp, &ca));
    TH_CHECK_OK(lb_context_create(b, &cp, &cb));
    const int V = a->config.vocab_size;
    float *la = malloc(sizeof(float) * (size_t)n * V), *lb = malloc(sizeof(float) * (size_t)n * V);
    double se = 0, ss = 0;
    if (ca && cb && la && lb &&
        lb_model_forward(ca, ids, n, 0, la, LB_LOGITS_ALL) == LB_OK &&
        lb_model_forward(cb, ids, n, 0, lb, LB_LOGITS_ALL) == LB_OK)
        for (int64_t i = 0; i < (int64_t)n * V; i++) {
            se += (la[i] - lb[i]) * (double)(la[i] - lb[i]);
            ss += (double)la[i] * la[i];
        }
    else
        TH_CHECK_MSG(0, "forward failed: %s", lb_last_error());
    free(la);
    free(lb);
    lb_context_free(ca);
    lb_context_free(cb);
    return ss > 0 ? se / ss : INFINITY;
}

static void test_fold_mha_bias(void) {
    const char *dir = make_mha_model();
    lb_calib cal = random_calib(8, 64, 256, 3);
    int32_t ids[48];
    for (int i = 0; i < 48; i++) ids[i] = (i * 37 + 5) % 256;
    lb_model *dense = NULL, *awq = NULL, *rtn = NULL;
    TH_CHECK_OK(lb_model_load(dir, NULL, &dense));
    TH_CHECK_OK(lb_model_load(dir, NULL, &awq));
    TH_CHECK_OK(lb_model_load(dir, NULL, &rtn));
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_AWQ;
    p.bits = 8;
    p.group_size = 32;
    p.sym = false;
    p.n_threads = 2;
    lb_quantize_report rep;
    TH_CHECK_OK(lb_quantize_model_inplace(awq, &p, &cal, &rep));
    /* all four scaling groups ran (v_proj -> o_proj: no GQA) */
    for (int i = 0; i < rep.n_modules; i++)
        TH_CHECK_MSG(rep.modules[i].awq_ratio >= 0.0, "%s: no AWQ ratio", rep.modules[i].name);
    lb_quantize_report_free(&rep);
    p.method = LB_QUANT_RTN;
    TH_CHECK_OK(lb_quantize_model_inplace(rtn, &p, NULL, NULL));
    const double e_awq = logits_mse(dense, awq, ids, 48);
    const double e_rtn = logits_mse(dense, rtn, ids, 48);
    fprintf(stderr, "  8-bit, no-GQA Qwen2 with v bias: relative logit MSE AWQ %.3g, RTN %.3g\n",
            e_awq, e_rtn);
    /* a fold that changed the function (e.g. an unscaled v bias) would be
     * off by O(1); 8-bit errors are ~1e-4 */
    TH_CHECK(e_awq < 1e-3);
    TH_CHECK(e_awq < 3 * e_rtn);
    lb_model_free(dense);
    lb_model_free(awq);
    lb_model_free(rtn);
    lb_calib_free(&cal);
}

static lb_calib ref_calib(void) {
    lb_calib c = {0};
    TH_CHECK_OK(lb_calib_load_ids(th_shared("reference/gptq_model/calib_ids.i32"), 128, 0, &c));
    return c;
}

static double g_ppl_awq_inplace;

static void test_tinystories_inplace(void) {
    lb_calib cal = ref_calib();
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.sym = false;
    p.n_threads = 2;
    double ppl[3];
    const lb_quant_method ms[3] = {LB_QUANT_RTN, LB_QUANT_AWQ, LB_QUANT_AWQ_GPTQ};
    for (int k = 0; k < 3; k++) {
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(th_shared(TS_DIR), NULL, &m));
        p.method = ms[k];
        lb_quantize_report rep;
        TH_CHECK_OK(lb_quantize_model_inplace(m, &p, &cal, &rep));
        if (k == 1)
            for (int i = 0; i < rep.n_modules; i++) {
                bool attn_o = strstr(rep.modules[i].name, "o_proj") != NULL;
                /* GQA (8/4 heads): o_proj has no scaling group */
                TH_CHECK(attn_o ? rep.modules[i].awq_ratio < 0 : rep.modules[i].awq_ratio >= 0);
                bool qk = strstr(rep.modules[i].name, "q_proj") || strstr(rep.modules[i].name, "k_proj");
                TH_CHECK(qk ? rep.modules[i].awq_clipped == 0 : rep.modules[i].awq_clipped > 0);
            }
        lb_quantize_report_free(&rep);
        ppl[k] = ppl_full256(m);
        lb_model_free(m);
    }
    fprintf(stderr, "  tinystories-656k 4-bit g128 asym ppl: RTN %.4f, AWQ %.4f, AWQ+GPTQ %.4f\n",
            ppl[0], ppl[1], ppl[2]);
    TH_CHECK(ppl[1] < ppl[0] - 0.3);
    TH_CHECK(ppl[2] < ppl[0]);
    g_ppl_awq_inplace = ppl[1];
    lb_calib_free(&cal);
}

/* Unpack an AWQ linear from the raw tensors (AutoAWQ's order, written here)
 * and dequantize it in f32 as (q - z) * f16 scale. */
static void ref_awq_dequant(const lb_safetensors *st, const char *mod, int64_t out, int64_t in,
                            int gs, float *W) {
    char n[200];
    snprintf(n, sizeof n, "%s.qweight", mod);
    const lb_tensor *qw = lb_st_find(st, n);
    snprintf(n, sizeof n, "%s.qzeros", mod);
    const lb_tensor *qz = lb_st_find(st, n);
    snprintf(n, sizeof n, "%s.scales", mod);
    const lb_tensor *sc = lb_st_find(st, n);
    TH_CHECK(qw && qz && sc);
    if (!qw || !qz || !sc) return;
    TH_CHECK(qw->type == LB_TYPE_I32 && qw->shape[0] == in && qw->shape[1] == out / 8);
    TH_CHECK(qz->type == LB_TYPE_I32 && qz->shape[0] == in / gs && qz->shape[1] == out / 8);
    TH_CHECK(sc->type == LB_TYPE_F16 && sc->shape[0] == in / gs && sc->shape[1] == out);
    static const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    const uint32_t *q = qw->data, *z = qz->data;
    const uint16_t *s = sc->data;
    for (int64_t c = 0; c < in; c++)
        for (int64_t k = 0; k < out / 8; k++)
            for (int i = 0; i < 8; i++) {
                int64_t o = 8 * k + order[i], g = c / gs;
                int code = (int)((q[c * (out / 8) + k] >> (4 * i)) & 15);
                int zero = (int)((z[g * (out / 8) + k] >> (4 * i)) & 15);
                W[o * in + c] = lb_f16_to_f32(s[g * out + o]) * (float)(code - zero);
            }
}

static void test_tinystories_checkpoint(void) {
    lb_calib cal = ref_calib();
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_AWQ;
    p.sym = false;
    p.n_threads = 2;
    const char *out = tmp_path("ts-awq");
    lb_quantize_report rep;
    TH_CHECK_OK(lb_quantize_model(th_shared(TS_DIR), out, &p, &cal, &rep));
    /* 4 bits + f16 scale + packed zero per 128 weights: 4 + 16/128 + 4/128 */
    TH_CHECK_NEAR(rep.bits_per_weight, 4.15625, 1e-9);
    lb_quantize_report_free(&rep);
    char path[800];
    snprintf(path, sizeof path, "%s/config.json", out);
    cJSON *cfg = read_json(path);
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config");
    TH_CHECK_STR(cJSON_GetObjectItemCaseSensitive(qc, "quant_method")->valuestring, "awq");
    TH_CHECK_STR(cJSON_GetObjectItemCaseSensitive(qc, "version")->valuestring, "gemm");
    TH_CHECK(cJSON_GetObjectItemCaseSensitive(qc, "bits")->valueint == 4);
    TH_CHECK(cJSON_GetObjectItemCaseSensitive(qc, "group_size")->valueint == 128);
    TH_CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(qc, "zero_point")));
    cJSON_Delete(cfg);
    snprintf(path, sizeof path, "%s/quant_config.json", out);
    cJSON *qf = read_json(path);
    TH_CHECK(qf && cJSON_GetObjectItemCaseSensitive(qf, "w_bit")->valueint == 4);
    TH_CHECK_STR(cJSON_GetObjectItemCaseSensitive(qf, "version")->valuestring, "GEMM");
    cJSON_Delete(qf);
    snprintf(path, sizeof path, "%s/quantize_config.json", out);
    TH_CHECK(!lb_is_file(path));
    /* the layout read back independently = what lowbit loads (F32) */
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(out, &st));
    lb_model_load_opts lo = {0};
    lo.gptq_mode = LB_GPTQ_LOAD_F32;
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(out, &lo, &m));
    if (st && m) {
        static float W[384 * 128];
        ref_awq_dequant(st, "model.layers.1.mlp.down_proj", 128, 384, 128, W);
        const lb_tensor *t = &m->layers[1].w[LB_LINEAR_DOWN];
        TH_CHECK(t->type == LB_TYPE_F32);
        TH_CHECK(memcmp(W, t->data, sizeof(float) * 128 * 384) == 0);
        /* the scaled norms replaced the source's (F32) */
        const lb_tensor *n = lb_st_find(st, "model.layers.0.input_layernorm.weight");
        TH_CHECK(n && n->type == LB_TYPE_F32);
        TH_CHECK(!lb_st_find(st, "model.layers.0.self_attn.q_proj.g_idx"));
        const double ppl = ppl_full256(m);
        fprintf(stderr, "  AWQ checkpoint reloaded (f16 scales): ppl %.4f (in memory %.4f)\n", ppl,
                g_ppl_awq_inplace);
        TH_CHECK(fabs(ppl - g_ppl_awq_inplace) < 0.002 * g_ppl_awq_inplace);
    }
    lb_model_free(m);
    lb_st_close(st);
    /* direct export: Q4_1 routes; parity against the checkpoint loaded as
     * the same Q4_1 blocks (--gptq-mode fast) */
    char gguf[800];
    snprintf(gguf, sizeof gguf, "%s/ts-awq.gguf", th_tmpdir());
    lb_export_opts eo;
    lb_export_opts_default(&eo);
    eo.mode = LB_EXPORT_MODE_DIRECT;
    lb_export_plan *plan = NULL;
    TH_CHECK_OK(lb_export_gguf(out, gguf, &eo, &plan, NULL));
    if (plan) {
        TH_CHECK(plan->awq);
        int n_q41 = 0;
        for (size_t i = 0; i < plan->n_tensors; i++)
            n_q41 += plan->tensors[i].type == LB_TYPE_Q4_1 &&
                     plan->tensors[i].route == LB_EXPORT_ROUTE_DIRECT;
        TH_CHECK_INT(n_q41, 14);
    }
    lb_export_plan_free(plan);
    lb_model *mg = NULL, *mq = NULL;
    lo.gptq_mode = LB_GPTQ_LOAD_FAST;
    lb_status sg = lb_model_load(gguf, NULL, &mg);
    if (sg != LB_ERR_UNSUPPORTED) {
        TH_CHECK_OK(sg);
        TH_CHECK_OK(lb_model_load(out, &lo, &mq));
        size_t nb = 0;
        int32_t *ids = th_read_bin(th_shared("reference/ppl/ids/tinystories-lf.hf-tokenizers.ids.i32"), &nb);
        if (mg && mq && ids) {
            lb_context_params cp = lb_context_default_params();
            cp.n_ctx = 256;
            cp.n_threads = 2;
            lb_context *a = NULL, *b = NULL;
            TH_CHECK_OK(lb_context_create(mq, &cp, &a));
            TH_CHECK_OK(lb_context_create(mg, &cp, &b));
            lb_parity_params pp = lb_parity_default_params();
            pp.n_ctx = 256;
            pp.n_greedy = 0;
            lb_parity_result r;
            TH_CHECK_OK(lb_parity(a, b, ids, (int64_t)(nb / 4), &pp, &r));
            fprintf(stderr, "  AWQ checkpoint (Q4_1 blocks) vs direct GGUF: top-1 %.4f%% (%lld/%lld)\n",
                    100 * r.top1_agreement, (long long)r.n_top1_agree, (long long)r.n_positions);
            TH_CHECK(r.top1_agreement >= 0.999);
            lb_parity_result_free(&r);
            lb_context_free(a);
            lb_context_free(b);
        }
        free(ids);
    }
    lb_model_free(mg);
    lb_model_free(mq);
    unlink(gguf);
    lb_calib_free(&cal);
}

/* Symmetric AWQ: zeros 8, direct Q4_0 (exact). */
static void test_sym_q4_0(void) {
    lb_calib cal = random_calib(4, 64, 512, 9);
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_AWQ;
    p.sym = true;
    p.group_size = 32;
    p.n_threads = 2;
    const char *out = tmp_path("qw-awq-sym");
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), out, &p, &cal, NULL));
    lb_export_plan *plan = NULL;
    TH_CHECK_OK(lb_export_plan_make(out, NULL, &plan));
    if (plan) {
        int n = 0;
        for (size_t i = 0; i < plan->n_tensors; i++)
            n += plan->tensors[i].type == LB_TYPE_Q4_0 &&
                 plan->tensors[i].route == LB_EXPORT_ROUTE_DIRECT;
        TH_CHECK_INT(n, 14);
    }
    lb_export_plan_free(plan);
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(out, NULL, &m)); /* auto: exact Q4_0 */
    if (m) TH_CHECK(m->layers[0].w[LB_LINEAR_Q].type == LB_TYPE_Q4_0);
    lb_model_free(m);
    lb_calib_free(&cal);
}

typedef struct cancel_at {
    const char *prefix;
    bool fired;
    uint64_t done, total;
    bool monotonic;
} cancel_at;

static bool cancel_cb(void *user, const char *stage, uint64_t done, uint64_t total) {
    cancel_at *c = user;
    if (done < c->done || done > total) c->monotonic = false;
    c->done = done;
    c->total = total;
    if (c->prefix && !strncmp(stage, c->prefix, strlen(c->prefix))) {
        c->fired = true;
        return false;
    }
    return true;
}

/* Cancelled after layer 0 and resumed: the same bytes (the scaled norms
 * of layer 0 come back from its state file). Qwen2 (q/k/v bias). */
static void test_resume(void) {
    lb_calib cal = random_calib(8, 32, 512, 7);
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_AWQ;
    p.sym = false;
    p.group_size = 32;
    p.n_threads = 2;
    const char *ref = tmp_path("qw-awq-full"), *out = tmp_path("qw-awq-resumed");
    /* progress: monotonic, ends at its total */
    cancel_at c = {NULL, false, 0, 0, true};
    p.progress.fn = cancel_cb;
    p.progress.user = &c;
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), ref, &p, &cal, NULL));
    TH_CHECK(c.monotonic && c.total > 0);
    TH_CHECK_INT(c.done, c.total);
    c = (cancel_at){"layer 2/2", false, 0, 0, true};
    TH_CHECK_FAILS(lb_quantize_model(th_shared(QW_DIR), out, &p, &cal, NULL), LB_ERR_CANCELLED);
    TH_CHECK(c.fired);
    TH_CHECK(!lb_is_dir(out));
    TH_CHECK_INT(count_entries("qw-awq-resumed.tmp-"), 1);
    c.prefix = NULL;
    p.resume = true;
    lb_quantize_report rep;
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), out, &p, &cal, &rep));
    TH_CHECK_INT(rep.layers_resumed, 1);
    lb_quantize_report_free(&rep);
    static const char *files[] = {"model.safetensors", "config.json", "quant_config.json"};
    for (int i = 0; i < 3; i++) {
        char a[800], b[800];
        snprintf(a, sizeof a, "%s/%s", ref, files[i]);
        snprintf(b, sizeof b, "%s/%s", out, files[i]);
        TH_CHECK_MSG(files_equal(a, b), "%s differs after resume", files[i]);
    }
    TH_CHECK_INT(count_entries("qw-awq-resumed.tmp-"), 0);
    lb_calib_free(&cal);
}

static void test_sparse_and_params(void) {
    lb_calib cal = random_calib(1, 32, 512, 5);
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_AWQ;
    p.sym = false;
    p.group_size = 32;
    p.n_threads = 2;
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared(QW_DIR), NULL, &m));
    lb_quantize_report rep;
    TH_CHECK_OK(lb_quantize_model_inplace(m, &p, &cal, &rep));
    for (int i = 0; i < rep.n_modules; i++) {
        TH_CHECK(rep.modules[i].awq_plain);
        TH_CHECK(rep.modules[i].awq_ratio < 0);
        TH_CHECK(strstr(rep.modules[i].note, "sparse calibration coverage (32 tokens < 64)"));
    }
    char *js = lb_quantize_report_json(&rep, &p);
    TH_CHECK(js && strstr(js, "\"awq_plain\":\ttrue") && strstr(js, "\"method\":\t\"awq\""));
    free(js);
    lb_quantize_report_free(&rep);
    lb_model_free(m);
    /* parameters the AWQ layout cannot hold */
    p.bits = 3;
    p.format = LB_GPTQ_FORMAT_AWQ;
    TH_CHECK_FAILS(lb_quantize_model(th_shared(QW_DIR), tmp_path("x"), &p, &cal, NULL),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "4-bit"));
    p.bits = 4;
    p.format = LB_GPTQ_FORMAT_V1;
    p.desc_act = true;
    TH_CHECK_FAILS(lb_quantize_model(th_shared(QW_DIR), tmp_path("x"), &p, &cal, NULL),
                   LB_ERR_INVALID_ARG);
    p.desc_act = false;
    const char *rule = "down_proj=8";
    p.rules = &rule;
    p.n_rules = 1;
    TH_CHECK_FAILS(lb_quantize_model(th_shared(QW_DIR), tmp_path("x"), &p, &cal, NULL),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "model.layers.0.mlp.down_proj"));
    TH_CHECK(!lb_is_dir(tmp_path("x")));
    TH_CHECK_INT(count_entries("x.tmp-"), 0);
    /* 3-bit AWQ goes to the GPTQ v2 layout */
    p.n_rules = 0;
    p.bits = 3;
    const char *o3 = tmp_path("qw-awq-3bit");
    lb_calib cal2 = random_calib(4, 32, 512, 6);
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), o3, &p, &cal2, NULL));
    char path[800];
    snprintf(path, sizeof path, "%s/config.json", o3);
    cJSON *cfg = read_json(path);
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config");
    TH_CHECK_STR(cJSON_GetObjectItemCaseSensitive(qc, "quant_method")->valuestring, "gptq");
    TH_CHECK_STR(cJSON_GetObjectItemCaseSensitive(qc, "checkpoint_format")->valuestring, "gptq_v2");
    TH_CHECK_STR(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(qc, "meta"),
                                                  "method")->valuestring, "awq");
    cJSON_Delete(cfg);
    lb_model *m3 = NULL;
    TH_CHECK_OK(lb_model_load(o3, NULL, &m3));
    lb_model_free(m3);
    lb_calib_free(&cal);
    lb_calib_free(&cal2);
}

/* ------------------------------------------------------------------------ */
/* Bad checkpoints                                                           */
/* ------------------------------------------------------------------------ */

/* Copy the AWQ checkpoint `src` to `dst`, replacing tensor `bad` (if any)
 * by an I32 tensor of shape sh, and config.json's quantization_config by
 * qc (if given). */
static void copy_ckpt(const char *src, const char *dst, const char *bad, const int64_t *sh,
                      const char *qc) {
    mkdir(dst, 0755);
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(src, &st));
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_writer_create(&w));
    static int32_t zeros[1 << 16];
    for (size_t i = 0; st && i < lb_st_count(st); i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        if (bad && !strcmp(t->name, bad))
            TH_CHECK_OK(lb_st_writer_add(w, t->name, LB_TYPE_I32, 2, sh, zeros));
        else
            TH_CHECK_OK(lb_st_writer_add(w, t->name, t->type, t->n_dims, t->shape, t->data));
    }
    char p[800];
    snprintf(p, sizeof p, "%s/model.safetensors", dst);
    TH_CHECK_OK(lb_st_writer_write_file(w, p));
    lb_st_writer_free(w);
    lb_st_close(st);
    snprintf(p, sizeof p, "%s/config.json", src);
    cJSON *cfg = read_json(p);
    if (qc) {
        cJSON_DeleteItemFromObjectCaseSensitive(cfg, "quantization_config");
        cJSON_AddItemToObject(cfg, "quantization_config", cJSON_Parse(qc));
    }
    char *txt = cJSON_Print(cfg);
    snprintf(p, sizeof p, "%s/config.json", dst);
    FILE *f = fopen(p, "w");
    fputs(txt, f);
    fclose(f);
    free(txt);
    cJSON_Delete(cfg);
}

static void test_bad_checkpoints(void) {
    char src[800]; /* from test_tinystories_checkpoint (tmp_path's buffers rotate) */
    snprintf(src, sizeof src, "%s", tmp_path("ts-awq"));
    if (!lb_is_dir(src)) {
        TH_CHECK_MSG(0, "%s missing", src);
        return;
    }
    lb_model *m = NULL;
    lb_export_plan *plan = NULL;
    struct {
        const char *tensor;
        int64_t sh[2];
        const char *qc;
        lb_status want;
        const char *msg;
    } bad[] = {
        {"model.layers.0.self_attn.q_proj.qzeros", {2, 16}, NULL, LB_ERR_FORMAT,
         "model.layers.0.self_attn.q_proj.qzeros"},
        {"model.layers.1.mlp.up_proj.qweight", {128, 32}, NULL, LB_ERR_FORMAT,
         "model.layers.1.mlp.up_proj.qweight"},
        {"model.layers.1.mlp.down_proj.scales", {3, 128}, NULL, LB_ERR_FORMAT,
         "model.layers.1.mlp.down_proj.scales"},
        {NULL, {0, 0}, "{\"quant_method\": \"awq\", \"version\": \"gemv_fast\", \"bits\": 4, "
                       "\"group_size\": 128, \"zero_point\": true}", LB_ERR_UNSUPPORTED, "gemv_fast"},
        {NULL, {0, 0}, "{\"quant_method\": \"awq\", \"version\": \"gemm\", \"bits\": 3, "
                       "\"group_size\": 128, \"zero_point\": true}", LB_ERR_UNSUPPORTED, "bits = 3"},
        {NULL, {0, 0}, "{\"quant_method\": \"awq\", \"version\": \"gemm\", \"bits\": 4, "
                       "\"group_size\": 64, \"zero_point\": true}", LB_ERR_FORMAT, "qzeros"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[64], dst[800];
        snprintf(name, sizeof name, "bad-awq-%zu", i);
        snprintf(dst, sizeof dst, "%s", tmp_path(name));
        copy_ckpt(src, dst, bad[i].tensor, bad[i].sh, bad[i].qc);
        TH_CHECK_FAILS(lb_model_load(dst, NULL, &m), bad[i].want);
        TH_CHECK_MSG(strstr(lb_last_error(), bad[i].msg), "load %zu: %s", i, lb_last_error());
        TH_CHECK_FAILS(lb_export_plan_make(dst, NULL, &plan), bad[i].want);
        TH_CHECK_MSG(strstr(lb_last_error(), bad[i].tensor ? bad[i].tensor : bad[i].msg) ||
                         (bad[i].tensor && strstr(lb_last_error(), "model.layers")),
                     "export %zu: %s", i, lb_last_error());
    }
}

int main(void) {
    TH_RUN(test_pack);
    TH_RUN(test_grid);
    TH_RUN(test_scale_search);
    TH_RUN(test_clip_search);
    TH_RUN(test_fold_mha_bias);
    TH_RUN(test_tinystories_inplace);
    TH_RUN(test_tinystories_checkpoint);
    TH_RUN(test_bad_checkpoints);
    TH_RUN(test_sym_q4_0);
    TH_RUN(test_resume);
    TH_RUN(test_sparse_and_params);
    qt_cleanup();
    return th_report();
}
