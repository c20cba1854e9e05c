/*
 * GPTQ core: quantizer grid, RTN, Hessian, solver — unit tests and golden
 * tests against ../shared/reference/gptq (AutoGPTQ @9f7d370, float32) and
 * ../shared/reference/gptq_model (RTN baseline of the whole tiny model).
 * Agreement figures are printed to stderr ("gptq-ref ..." lines).
 */
#include "lowbit/gptq.h"
#include "test_gptq_st.h"
#include "quant/gptq_internal.h"

#include "lowbit/kernels.h"

#include <cblas.h>
#include <lapacke.h>
#include <float.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define REF "reference/gptq/"

/* Bit-exact mode: the reference was computed by torch on netlib's reference
 * BLAS + LAPACK (3.x), whose summation orders differ from OpenBLAS's. When
 * this test re-runs itself with those libraries preloaded
 * (LB_GPTQ_BITEXACT=1, see test_bitexact_netlib), H, Hinv, codes, scales,
 * W_deq and the loss must all equal AutoGPTQ's bit for bit, which proves the
 * operation order of lowbit's code is exactly AutoGPTQ's. */
static int bitexact_mode;

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */
/* ------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float grand(void) { /* ~ N(0, 1/3*4/...) sum of 4 uniforms */
    return frand() + frand() + frand() + frand();
}

/* Checks that every code is in range and W_deq = scale*(code-zero). */
static void check_consistent(const lb_gptq_result *r) {
    const int64_t out = r->out_features, in = r->in_features,
                  ng = r->n_groups;
    const int32_t maxq = (1 << r->bits) - 1;
    int64_t bad = 0;
    for (int64_t o = 0; o < out; o++)
        for (int64_t c = 0; c < in; c++) {
            int32_t g = r->g_idx[c];
            if (g < 0 || g >= ng) {
                bad++;
                continue;
            }
            int32_t q = r->codes[o * in + c];
            float s = r->scales[o * ng + g];
            int32_t z = r->zeros[o * ng + g];
            if (q < 0 || q > maxq || z < 0 || z > maxq ||
                r->W_deq[o * in + c] != s * (float)(q - z))
                bad++;
        }
    TH_CHECK_MSG(bad == 0, "%lld inconsistent weights", (long long)bad);
}

/* ------------------------------------------------------------------------ */
/* grid                                                                      */
/* ------------------------------------------------------------------------ */

static void test_grid_exact(void) {
    lb_quant_grid g;
    float s;
    int32_t z;
    /* 4-bit sym: scale = 2*max|x|/15 (= 1 here), zero 8; half-even:
     * -7.5 -> -8 -> code 0, 2.5 -> 2 -> 10, 3.5 -> 4 -> 12; +7.5 clips */
    lb_quant_grid_default(&g, 4, true);
    const float r1[] = {-7.5f, 3.5f, 2.5f};
    TH_CHECK_OK(lb_quant_grid_find_params(&g, r1, 1, 3, 3, &s, &z));
    TH_CHECK(s == 1.0f);
    TH_CHECK_INT(z, 8);
    TH_CHECK_INT(lb_quant_grid_code(-7.5f, s, z, 15), 0);
    TH_CHECK_INT(lb_quant_grid_code(2.5f, s, z, 15), 10);
    TH_CHECK_INT(lb_quant_grid_code(3.5f, s, z, 15), 12);
    TH_CHECK_INT(lb_quant_grid_code(7.5f, s, z, 15), 15);
    TH_CHECK_INT(lb_quant_grid_code(-100.0f, s, z, 15), 0);
    /* sym with no negative value: xmin stays 0 -> scale = max/15 (quirk) */
    const float r2[] = {0.5f, 1.0f};
    TH_CHECK_OK(lb_quant_grid_find_params(&g, r2, 1, 2, 2, &s, &z));
    TH_CHECK(s == 1.0f / 15.0f);
    TH_CHECK_INT(z, 8);
    TH_CHECK_INT(lb_quant_grid_code(1.0f, s, z, 15), 15);
    /* 2-bit asym [-1.5, 1.5]: scale 1, zero rint(1.5) = 2; half-even */
    lb_quant_grid_default(&g, 2, false);
    const float r3[] = {-1.5f, 0.5f, -0.5f, 1.5f, 1.0f};
    TH_CHECK_OK(lb_quant_grid_find_params(&g, r3, 1, 5, 5, &s, &z));
    TH_CHECK(s == 1.0f);
    TH_CHECK_INT(z, 2);
    const int32_t want3[] = {0, 2, 2, 3, 3};
    for (int i = 0; i < 5; i++)
        TH_CHECK_INT(lb_quant_grid_code(r3[i], s, z, 3), want3[i]);
    TH_CHECK(lb_quant_grid_dequant(0, s, z) == -2.0f);
    /* asym with only positive values: xmin = 0 -> zero 0 */
    lb_quant_grid_default(&g, 4, false);
    const float r4[] = {0.25f, 3.75f};
    TH_CHECK_OK(lb_quant_grid_find_params(&g, r4, 1, 2, 2, &s, &z));
    TH_CHECK(s == 0.25f);
    TH_CHECK_INT(z, 0);
    /* 8-bit sym: zero 128, scale 255/255 = 1; -127.5 -> -128 -> 0;
     * +127.5 -> 128 -> 256 clips to 255 */
    lb_quant_grid_default(&g, 8, true);
    const float r5[] = {-127.5f, 127.5f};
    TH_CHECK_OK(lb_quant_grid_find_params(&g, r5, 1, 2, 2, &s, &z));
    TH_CHECK(s == 1.0f);
    TH_CHECK_INT(z, 128);
    TH_CHECK_INT(lb_quant_grid_code(127.5f, s, z, 255), 255);
    TH_CHECK_INT(lb_quant_grid_code(-127.5f, s, z, 255), 0);
}

static void test_grid_zero_rows(void) {
    /* all-zero row: xmin = -1, xmax = 1 -> scale = 2/maxq (float32); asym
     * zero = rint(1 / scale): float32 gives 1.5 for 2 bits (-> 2) but just
     * under 3.5, 7.5, 127.5 for 3, 4, 8 bits (-> 3, 7, 127), as torch */
    const int bits[] = {2, 3, 4, 8};
    const int32_t zasym[] = {2, 3, 7, 127};
    const float zeros_row[7] = {0};
    for (int b = 0; b < 4; b++) {
        const int32_t maxq = (1 << bits[b]) - 1;
        for (int sym = 0; sym < 2; sym++) {
            lb_quant_grid g;
            lb_quant_grid_default(&g, bits[b], sym);
            float s;
            int32_t z;
            TH_CHECK_OK(lb_quant_grid_find_params(&g, zeros_row, 1, 7, 7, &s,
                                                  &z));
            TH_CHECK(s == 2.0f / (float)maxq);
            TH_CHECK_INT(z, sym ? (maxq + 1) / 2 : zasym[b]);
            TH_CHECK(lb_quant_grid_dequant(lb_quant_grid_code(0.0f, s, z,
                                                              maxq),
                                           s, z) == 0.0f);
        }
    }
}

static void test_grid_ld_and_errors(void) {
    lb_quant_grid g;
    lb_quant_grid_default(&g, 3, false);
    /* two rows with a stride of 4 (last column ignored) */
    const float x[8] = {-1, 2, 0.5f, 1000, 0, 0.1f, 0.7f, -1000};
    float s[2];
    int32_t z[2];
    TH_CHECK_OK(lb_quant_grid_find_params(&g, x, 2, 3, 4, s, z));
    TH_CHECK(s[0] == 3.0f / 7.0f);
    TH_CHECK_INT(z[0], 2); /* rint(1 / (3/7)) = rint(2.33) */
    TH_CHECK(s[1] == 0.7f / 7.0f);
    TH_CHECK_INT(z[1], 0);
    g.bits = 5;
    TH_CHECK_FAILS(lb_quant_grid_find_params(&g, x, 2, 3, 4, s, z),
                   LB_ERR_INVALID_ARG);
    g.bits = 4;
    TH_CHECK_FAILS(lb_quant_grid_find_params(&g, x, 2, 3, 2, s, z),
                   LB_ERR_INVALID_ARG);
    const float bad[3] = {1, NAN, 0};
    TH_CHECK_FAILS(lb_quant_grid_find_params(&g, bad, 1, 3, 3, s, z),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "not finite") != NULL);
}

static double norm_err(const float *x, int n, float s, int32_t z, int maxq,
                       double p) {
    double e = 0;
    for (int i = 0; i < n; i++)
        e += pow(fabs((double)(lb_quant_grid_dequant(
                                   lb_quant_grid_code(x[i], s, z, maxq), s,
                                   z) -
                               x[i])),
                 p);
    return e;
}

static void test_grid_mse(void) {
    enum { R = 64, C = 128 };
    float *x = malloc(sizeof(float) * R * C);
    for (int i = 0; i < R * C; i++) x[i] = grand();
    const int bits[] = {2, 3, 4, 8};
    for (int b = 0; b < 4; b++)
        for (int sym = 0; sym < 2; sym++) {
            lb_quant_grid g0, g1;
            lb_quant_grid_default(&g0, bits[b], sym);
            g1 = g0;
            g1.mse = true;
            float s0[R], s1[R];
            int32_t z0[R], z1[R];
            TH_CHECK_OK(lb_quant_grid_find_params(&g0, x, R, C, C, s0, z0));
            TH_CHECK_OK(lb_quant_grid_find_params(&g1, x, R, C, C, s1, z1));
            int n_worse = 0, n_shrunk = 0;
            double e0 = 0, e1 = 0;
            const int maxq = (1 << bits[b]) - 1;
            for (int r = 0; r < R; r++) {
                double a = norm_err(x + r * C, C, s0[r], z0[r], maxq, 2.4);
                double m = norm_err(x + r * C, C, s1[r], z1[r], maxq, 2.4);
                n_worse += m > a * (1 + 1e-12);
                n_shrunk += s1[r] < s0[r];
                TH_CHECK(s1[r] <= s0[r]);
                TH_CHECK(z1[r] >= 0 && z1[r] <= maxq);
                e0 += a;
                e1 += m;
            }
            TH_CHECK_MSG(n_worse == 0, "bits %d sym %d: %d rows worse",
                         bits[b], sym, n_worse);
            if (bits[b] <= 3)
                TH_CHECK_MSG(n_shrunk > 0, "bits %d sym %d: no row shrunk",
                             bits[b], sym);
            if (bits[b] == 2)
                fprintf(stderr,
                        "  mse 2-bit sym=%d: |err|^2.4 sum %.4g -> %.4g, %d/%d "
                        "rows shrunk\n",
                        sym, e0, e1, n_shrunk, R);
        }
    free(x);
}

/* ------------------------------------------------------------------------ */
/* RTN                                                                       */
/* ------------------------------------------------------------------------ */

static void test_rtn_units(void) {
    enum { RO = 5, RI = 70 };
    float W[RO * RI];
    for (int i = 0; i < RO * RI; i++) W[i] = grand();
    for (int i = 0; i < RI; i++) W[3 * RI + i] = 0.0f; /* a zero row */
    lb_gptq_result r;
    TH_CHECK_OK(lb_rtn_quantize(W, RO, RI, 3, 32, false, false, &r));
    TH_CHECK_INT(r.n_groups, 3); /* 32 + 32 + 6 */
    TH_CHECK_INT(r.g_idx[69], 2);
    TH_CHECK(r.perm == NULL && r.hinv_upper == NULL);
    check_consistent(&r);
    /* group 2 of row 1 = params of its 6 columns */
    lb_quant_grid g;
    lb_quant_grid_default(&g, 3, false);
    float s;
    int32_t z;
    TH_CHECK_OK(lb_quant_grid_find_params(&g, W + 1 * RI + 64, 1, 6, 6, &s, &z));
    TH_CHECK(r.scales[1 * 3 + 2] == s);
    TH_CHECK_INT(r.zeros[1 * 3 + 2], z);
    for (int i = 0; i < RI; i++) TH_CHECK(r.W_deq[3 * RI + i] == 0.0f);
    lb_gptq_result_free(&r);
    lb_gptq_result_free(&r); /* idempotent */
    TH_CHECK_OK(lb_rtn_quantize(W, RO, RI, 8, -1, true, true, &r));
    TH_CHECK_INT(r.n_groups, 1);
    check_consistent(&r);
    lb_gptq_result_free(&r);
    TH_CHECK_FAILS(lb_rtn_quantize(W, RO, RI, 4, 0, true, false, &r),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(r.codes == NULL);
    TH_CHECK_FAILS(lb_rtn_quantize(W, RO, RI, 6, 32, true, false, &r),
                   LB_ERR_INVALID_ARG);
    W[7] = INFINITY;
    TH_CHECK_FAILS(lb_rtn_quantize(W, RO, RI, 4, 32, true, false, &r),
                   LB_ERR_INVALID_ARG);
}

/* lowbit's RTN vs AutoGPTQ's RTN baseline (4-bit sym g128) on the 14
 * linears of tinystories-656k. */
static void test_rtn_reference(void) {
    tst_file model, qt;
    if (!tst_open(&model, th_shared("models/tinystories-656k/model.safetensors")) ||
        !tst_open(&qt, th_shared("reference/gptq_model/quant_tensors.safetensors"))) {
        TH_CHECK_MSG(0, "cannot read the tinystories-656k / gptq_model files");
        return;
    }
    static const char *mods[] = {"self_attn.k_proj", "self_attn.v_proj",
                                 "self_attn.q_proj", "self_attn.o_proj",
                                 "mlp.up_proj",      "mlp.gate_proj",
                                 "mlp.down_proj"};
    int64_t n_codes = 0, n_diff = 0, n_sdiff = 0, n_zdiff = 0;
    for (int layer = 0; layer < 2; layer++)
        for (int m = 0; m < 7; m++) {
            char name[160];
            int64_t shw[4], shq[4], shs[4], shz[4];
            int nd;
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", layer,
                     mods[m]);
            const float *W = tst_get(&model, name, "F32", shw, &nd);
            snprintf(name, sizeof name, "rtn.model.layers.%d.%s.codes", layer,
                     mods[m]);
            const int32_t *q = tst_get(&qt, name, "I32", shq, &nd);
            snprintf(name, sizeof name, "rtn.model.layers.%d.%s.scale", layer,
                     mods[m]);
            const float *sc = tst_get(&qt, name, "F32", shs, &nd);
            snprintf(name, sizeof name, "rtn.model.layers.%d.%s.zero", layer,
                     mods[m]);
            const int32_t *zr = tst_get(&qt, name, "I32", shz, &nd);
            TH_CHECK_MSG(W && q && sc && zr, "tensors of layer %d %s", layer,
                         mods[m]);
            if (!W || !q || !sc || !zr) continue;
            const int64_t out = shw[0], in = shw[1];
            lb_gptq_result r;
            TH_CHECK_OK(lb_rtn_quantize(W, out, in, 4, 128, true, false, &r));
            if (!r.codes) continue;
            TH_CHECK_INT(r.n_groups, shs[1]);
            for (int64_t i = 0; i < out * in; i++) n_diff += r.codes[i] != q[i];
            for (int64_t i = 0; i < out * r.n_groups; i++) {
                n_sdiff += r.scales[i] != sc[i];
                n_zdiff += r.zeros[i] != zr[i];
            }
            n_codes += out * in;
            lb_gptq_result_free(&r);
        }
    fprintf(stderr,
            "  rtn-ref 14 linears: %lld/%lld codes differ, %lld scales, %lld "
            "zeros differ\n",
            (long long)n_diff, (long long)n_codes, (long long)n_sdiff,
            (long long)n_zdiff);
    TH_CHECK_INT(n_codes, 2 * (64 * 128 * 2 + 128 * 128 * 2 + 384 * 128 * 2 +
                               128 * 384));
    TH_CHECK_INT(n_diff, 0);
    TH_CHECK_INT(n_sdiff, 0);
    TH_CHECK_INT(n_zdiff, 0);
    tst_close(&model);
    tst_close(&qt);
}

/* ------------------------------------------------------------------------ */
/* Hessian                                                                   */
/* ------------------------------------------------------------------------ */

static const char *ref_mods[2] = {"q_proj", "down_proj"};
static const int64_t ref_in[2] = {128, 384};
#define REF_OUT 128
#define REF_NSEQ 32
#define REF_TOK 128

static void test_hessian_reference(void) {
    for (int m = 0; m < 2; m++) {
        const int64_t in = ref_in[m];
        char p[256];
        snprintf(p, sizeof p, REF "%s/X.f32", ref_mods[m]);
        float *X = tst_raw(p, (size_t)(REF_NSEQ * REF_TOK * in), 4);
        snprintf(p, sizeof p, REF "%s/H.f32", ref_mods[m]);
        float *Href = tst_raw(p, (size_t)(in * in), 4);
        snprintf(p, sizeof p, REF "%s/H_float64_accum.f64", ref_mods[m]);
        double *H64ref = tst_raw(p, (size_t)(in * in), 8);
        TH_CHECK_MSG(X && Href && H64ref, "reference files of %s",
                     ref_mods[m]);
        if (!X || !Href || !H64ref) {
            free(X), free(Href), free(H64ref);
            continue;
        }
        for (int f64 = 0; f64 < 2; f64++) {
            lb_gptq_hessian *h;
            TH_CHECK_OK(lb_gptq_hessian_create(in, f64, &h));
            if (!h) continue;
            for (int j = 0; j < REF_NSEQ; j++)
                TH_CHECK_OK(lb_gptq_hessian_add_batch(
                    h, X + (size_t)j * REF_TOK * in, REF_TOK, 1));
            TH_CHECK_INT(lb_gptq_hessian_nsamples(h), REF_NSEQ);
            TH_CHECK_INT(lb_gptq_hessian_in_features(h), in);
            double *H = malloc(sizeof(double) * in * in);
            float *Hf = malloc(sizeof(float) * in * in);
            lb_gptq_hessian_get_f64(h, H);
            lb_gptq_hessian_get(h, Hf);
            double maxrel = 0, maxabs = 0, hmax = 0;
            int64_t n_eq = 0;
            for (int64_t i = 0; i < in * in; i++) {
                double ref = f64 ? H64ref[i] : (double)Href[i];
                hmax = fmax(hmax, fabs(ref));
                maxabs = fmax(maxabs, fabs(H[i] - ref));
                if (ref != 0) maxrel = fmax(maxrel, fabs(H[i] - ref) / fabs(ref));
                n_eq += f64 ? H[i] == ref : Hf[i] == Href[i];
                if (!f64) TH_CHECK(H[i] == (double)Hf[i]);
            }
            fprintf(stderr,
                    "  hessian %s %s: max |dH| %.3g (max|H| %.3g, rel to max "
                    "%.3g, elementwise rel %.3g), %lld/%lld bitwise equal\n",
                    ref_mods[m], f64 ? "f64-accum vs H_float64_accum" : "f32 vs H.f32",
                    maxabs, hmax, maxabs / hmax, maxrel, (long long)n_eq,
                    (long long)(in * in));
            /* f32: reference rounding differs only in sgemm's summation
             * order; f64: a different sum order of double products */
            TH_CHECK(maxabs <= (f64 ? 1e-12 : 2e-6) * hmax);
            if (bitexact_mode && !f64) TH_CHECK_INT(n_eq, in * in);
            free(H);
            free(Hf);
            lb_gptq_hessian_free(h);
        }
        free(X), free(Href), free(H64ref);
    }
}

static void test_hessian_units(void) {
    lb_gptq_hessian *h = NULL;
    TH_CHECK_FAILS(lb_gptq_hessian_create(0, false, &h), LB_ERR_INVALID_ARG);
    TH_CHECK(h == NULL);
    /* two batches of different sample counts: H = 2/N sum X^T X */
    enum { IN = 5, R1 = 7, R2 = 3 };
    float X1[R1 * IN], X2[R2 * IN];
    for (int i = 0; i < R1 * IN; i++) X1[i] = frand();
    for (int i = 0; i < R2 * IN; i++) X2[i] = frand();
    for (int f64 = 0; f64 < 2; f64++) {
        TH_CHECK_OK(lb_gptq_hessian_create(IN, f64, &h));
        TH_CHECK_OK(lb_gptq_hessian_add_batch(h, X1, R1, 2));
        TH_CHECK_OK(lb_gptq_hessian_add_batch(h, X2, R2, 1));
        TH_CHECK_FAILS(lb_gptq_hessian_add_batch(h, X2, R2, 0),
                       LB_ERR_INVALID_ARG);
        float bad[IN] = {0, 1, INFINITY, 0, 0};
        TH_CHECK_FAILS(lb_gptq_hessian_add_batch(h, bad, 1, 1),
                       LB_ERR_INVALID_ARG);
        TH_CHECK_INT(lb_gptq_hessian_nsamples(h), 3);
        double H[IN * IN];
        lb_gptq_hessian_get_f64(h, H);
        for (int i = 0; i < IN; i++)
            for (int j = 0; j < IN; j++) {
                double s = 0;
                for (int r = 0; r < R1; r++)
                    s += (double)X1[r * IN + i] * X1[r * IN + j];
                for (int r = 0; r < R2; r++)
                    s += (double)X2[r * IN + i] * X2[r * IN + j];
                TH_CHECK_NEAR(H[i * IN + j], 2.0 / 3.0 * s,
                              f64 ? 1e-12 : 1e-5);
            }
        lb_gptq_hessian_free(h);
    }
}

/* ------------------------------------------------------------------------ */
/* GPTQ vs AutoGPTQ                                                          */
/* ------------------------------------------------------------------------ */

static const char *ref_cfgs[7] = {
    "i_b4_sym_g128",        "ii_b4_asym_g32",     "iii_b4_sym_g32_act",
    "iv_b4_sym_g32_act_static", "v_b8_sym_perchannel", "vi_b3_asym_g32",
    "vii_b2_asym_g64"};

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}
static int jbool(const cJSON *o, const char *k) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k));
}

typedef struct ref_totals {
    int64_t codes, codes_diff, deq_diff;
    double worst_scale_rel, worst_loss_rel;
} ref_totals;

static void run_reference_config(int m, const cJSON *cfg, const char *name,
                                 const float *W, const float *H,
                                 ref_totals *tot) {
    const int64_t in = ref_in[m], out = REF_OUT;
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(cfg, "settings");
    lb_gptq_options o;
    lb_gptq_options_default(&o);
    o.bits = (int)jnum(set, "bits");
    o.group_size = (int)jnum(set, "group_size");
    o.sym = jbool(set, "sym");
    o.desc_act = jbool(set, "desc_act");
    o.static_groups = jbool(set, "static_groups");
    o.blocksize = (int)jnum(set, "blocksize");
    o.damp_percent = jnum(set, "percdamp");
    o.mse = jbool(set, "mse");
    o.return_hinv = true;
    const int64_t ng = (int64_t)jnum(cfg, "n_groups");
    const double want_loss = jnum(cfg, "total_loss_sum_Losses");
    const double want_damp = jnum(cfg, "damp_added");

    char p[256];
#define LOADREF(var, type, file, n)                                            \
    snprintf(p, sizeof p, REF "%s/%s/" file, ref_mods[m], name);               \
    type *var = tst_raw(p, (size_t)(n), sizeof(type));
    LOADREF(Q, int32_t, "Q.i32", out * in);
    LOADREF(S, float, "scale.f32", out * ng);
    LOADREF(Z, int32_t, "zero.i32", out * ng);
    LOADREF(G, int32_t, "g_idx.i32", in);
    LOADREF(D, float, "W_deq.f32", out * in);
    LOADREF(U, float, "Hinv_upper.f32", in * in);
    int32_t *P = NULL;
    if (o.desc_act) {
        LOADREF(P_, int32_t, "perm.i32", in);
        P = P_;
    }
#undef LOADREF
    TH_CHECK_MSG(Q && S && Z && G && D && U && (P || !o.desc_act),
                 "reference files of %s/%s", ref_mods[m], name);
    lb_gptq_result r;
    lb_status st = lb_gptq_quantize(W, out, in, H, &o, &r);
    TH_CHECK_OK(st);
    if (st == LB_OK && Q && S && Z && G && D && U && (P || !o.desc_act)) {
        TH_CHECK_INT(r.n_groups, ng);
        check_consistent(&r);
        int64_t nq = 0, nd = 0, nz = 0, ng_diff = 0, np = 0, ns_eq = 0;
        double srel = 0, deq_same_code = 0, urel = 0, umax = 0;
        for (int64_t i = 0; i < out * in; i++) {
            nq += r.codes[i] != Q[i];
            nd += r.W_deq[i] != D[i];
            if (r.codes[i] == Q[i])
                deq_same_code = fmax(deq_same_code, fabs(r.W_deq[i] - D[i]));
        }
        for (int64_t i = 0; i < out * ng; i++) {
            srel = fmax(srel, fabs(r.scales[i] - S[i]) / fabs(S[i]));
            ns_eq += r.scales[i] == S[i];
            nz += r.zeros[i] != Z[i];
        }
        for (int64_t c = 0; c < in; c++) {
            ng_diff += r.g_idx[c] != G[c];
            if (P) np += r.perm[c] != P[c];
        }
        for (int64_t i = 0; i < in * in; i++) umax = fmax(umax, fabs(U[i]));
        for (int64_t i = 0; i < in * in; i++)
            urel = fmax(urel, fabs(r.hinv_upper[i] - U[i]) / umax);
        const double lrel = fabs((double)r.loss - want_loss) / want_loss;
        const double pct = 100.0 * (double)(out * in - nq) / (double)(out * in);
        fprintf(stderr,
                "  gptq-ref %-9s %-24s codes %6.2f%% (%lld diff)  scales max "
                "rel %.2g (%lld/%lld bitwise)  zeros diff %lld  W_deq %lld "
                "diff  loss %.9g vs %.9g (rel %.2g)  damp %.9g vs %.9g  "
                "Hinv max diff/max %.2g\n",
                ref_mods[m], name, pct, (long long)nq, srel, (long long)ns_eq,
                (long long)(out * ng), (long long)nz, (long long)nd,
                (double)r.loss, want_loss, lrel, (double)r.damp_added,
                want_damp, urel);
        TH_CHECK_MSG(pct >= 99.0, "%s/%s codes %.3f%%", ref_mods[m], name,
                     pct);
        TH_CHECK_MSG(srel <= 1e-3, "%s/%s scale rel %g", ref_mods[m], name,
                     srel);
        TH_CHECK_MSG(lrel <= 0.01, "%s/%s loss rel %g", ref_mods[m], name,
                     lrel);
        TH_CHECK_INT(ng_diff, 0);
        TH_CHECK_INT(np, 0);
        TH_CHECK(urel <= 1e-5);
        TH_CHECK(deq_same_code <= 1e-3 * 0.1);
        TH_CHECK(fabs((double)r.damp_added - want_damp) <= 1e-6 * want_damp);
        TH_CHECK(r.damp_percent_used == o.damp_percent);
        TH_CHECK_INT(r.n_damp_retries, 0);
        TH_CHECK_INT(r.n_dead, 0);
        if (bitexact_mode) {
            TH_CHECK_INT(nq, 0);
            TH_CHECK_INT(nd, 0);
            TH_CHECK_INT(ns_eq, out * ng);
            TH_CHECK(urel == 0.0);
            TH_CHECK(r.loss == (float)want_loss);
            TH_CHECK(r.damp_added == (float)want_damp);
        }
        tot->codes += out * in;
        tot->codes_diff += nq;
        tot->deq_diff += nd;
        tot->worst_scale_rel = fmax(tot->worst_scale_rel, srel);
        tot->worst_loss_rel = fmax(tot->worst_loss_rel, lrel);
    }
    lb_gptq_result_free(&r);
    free(Q), free(S), free(Z), free(G), free(D), free(U), free(P);
}

static void test_gptq_reference(void) {
    cJSON *meta = tst_json(th_shared(REF "meta.json"));
    TH_CHECK_MSG(meta, "cannot read %s", th_shared(REF "meta.json"));
    if (!meta) return;
    const cJSON *mods = cJSON_GetObjectItemCaseSensitive(meta, "modules");
    ref_totals tot = {0};
    for (int m = 0; m < 2; m++) {
        const int64_t in = ref_in[m];
        const cJSON *mod = cJSON_GetObjectItemCaseSensitive(mods, ref_mods[m]);
        const cJSON *cfgs = cJSON_GetObjectItemCaseSensitive(mod, "configs");
        char p[256];
        snprintf(p, sizeof p, REF "%s/W.f32", ref_mods[m]);
        float *W = tst_raw(p, (size_t)(REF_OUT * in), 4);
        snprintf(p, sizeof p, REF "%s/H.f32", ref_mods[m]);
        float *H = tst_raw(p, (size_t)(in * in), 4);
        TH_CHECK(W && H && cfgs);
        if (W && H && cfgs)
            for (int c = 0; c < 7; c++) {
                const cJSON *cfg =
                    cJSON_GetObjectItemCaseSensitive(cfgs, ref_cfgs[c]);
                TH_CHECK_MSG(cfg, "config %s", ref_cfgs[c]);
                if (cfg) run_reference_config(m, cfg, ref_cfgs[c], W, H, &tot);
            }
        free(W), free(H);
    }
    fprintf(stderr,
            "  gptq-ref total: %lld/%lld codes differ, %lld W_deq differ, "
            "worst scale rel %.2g, worst loss rel %.2g\n",
            (long long)tot.codes_diff, (long long)tot.codes,
            (long long)tot.deq_diff, tot.worst_scale_rel, tot.worst_loss_rel);
    TH_CHECK_INT(tot.codes, 7 * REF_OUT * (128 + 384));
    cJSON_Delete(meta);
}

/* The solver on the Hessian lowbit accumulates itself (not H.f32). */
static void test_gptq_from_own_hessian(void) {
    const int64_t in = 384, out = REF_OUT;
    float *X = tst_raw(REF "down_proj/X.f32", (size_t)(REF_NSEQ * REF_TOK * in), 4);
    float *W = tst_raw(REF "down_proj/W.f32", (size_t)(out * in), 4);
    int32_t *Q = tst_raw(REF "down_proj/ii_b4_asym_g32/Q.i32", (size_t)(out * in), 4);
    TH_CHECK(X && W && Q);
    if (X && W && Q) {
        lb_gptq_hessian *h;
        TH_CHECK_OK(lb_gptq_hessian_create(in, false, &h));
        for (int j = 0; j < REF_NSEQ; j++)
            lb_gptq_hessian_add_batch(h, X + (size_t)j * REF_TOK * in, REF_TOK, 1);
        float *H = malloc(sizeof(float) * in * in);
        lb_gptq_hessian_get(h, H);
        lb_gptq_options o;
        lb_gptq_options_default(&o);
        o.group_size = 32;
        o.sym = false;
        lb_gptq_result r;
        TH_CHECK_OK(lb_gptq_quantize(W, out, in, H, &o, &r));
        int64_t nq = 0;
        for (int64_t i = 0; r.codes && i < out * in; i++) nq += r.codes[i] != Q[i];
        fprintf(stderr, "  gptq from lowbit's own H (down_proj, 4-bit asym g32): "
                        "%lld/%lld codes differ from AutoGPTQ\n",
                (long long)nq, (long long)(out * in));
        TH_CHECK(nq <= out * in / 100);
        lb_gptq_result_free(&r);
        free(H);
        lb_gptq_hessian_free(h);
    }
    free(X), free(W), free(Q);
}

/* Row-parallel solve gives identical bytes; progress and cancellation. */
typedef struct prog_rec {
    int calls;
    uint64_t last;
    int stop_after;
} prog_rec;
static bool prog_cb(void *user, const char *stage, uint64_t done,
                    uint64_t total) {
    prog_rec *p = user;
    p->calls++;
    p->last = done;
    (void)stage;
    (void)total;
    return p->stop_after == 0 || p->calls < p->stop_after;
}

static void test_gptq_threads_progress(void) {
    const int64_t in = 384, out = REF_OUT;
    float *W = tst_raw(REF "down_proj/W.f32", (size_t)(out * in), 4);
    float *H = tst_raw(REF "down_proj/H.f32", (size_t)(in * in), 4);
    TH_CHECK(W && H);
    if (!W || !H) {
        free(W), free(H);
        return;
    }
    lb_gptq_options o;
    lb_gptq_options_default(&o);
    o.group_size = 32;
    o.desc_act = true;
    o.sym = false;
    prog_rec pr = {0};
    o.progress.fn = prog_cb;
    o.progress.user = &pr;
    lb_gptq_result a, b;
    TH_CHECK_OK(lb_gptq_quantize(W, out, in, H, &o, &a));
    TH_CHECK_INT(pr.calls, 3);
    TH_CHECK_INT(pr.last, 384);
    lb_pool *pool = lb_pool_create(3);
    TH_CHECK(pool != NULL);
    o.pool = pool;
    o.progress.fn = NULL;
    TH_CHECK_OK(lb_gptq_quantize(W, out, in, H, &o, &b));
    if (a.codes && b.codes) {
        TH_CHECK(memcmp(a.codes, b.codes, sizeof *a.codes * out * in) == 0);
        TH_CHECK(memcmp(a.W_deq, b.W_deq, sizeof(float) * out * in) == 0);
        TH_CHECK(memcmp(a.scales, b.scales, sizeof(float) * out * a.n_groups) == 0);
        TH_CHECK(memcmp(a.zeros, b.zeros, sizeof(int32_t) * out * a.n_groups) == 0);
        TH_CHECK(a.loss == b.loss);
    }
    lb_gptq_result_free(&a);
    lb_gptq_result_free(&b);
    /* cancellation after the first block */
    pr = (prog_rec){0, 0, 1};
    o.progress.fn = prog_cb;
    TH_CHECK_FAILS(lb_gptq_quantize(W, out, in, H, &o, &a), LB_ERR_CANCELLED);
    TH_CHECK(a.codes == NULL);
    lb_pool_free(pool);
    /* odd block size and a group size that straddles blocks */
    o.pool = NULL;
    o.progress.fn = NULL;
    o.blocksize = 50;
    o.group_size = 96;
    o.desc_act = false;
    o.mse = true;
    TH_CHECK_OK(lb_gptq_quantize(W, out, in, H, &o, &a));
    if (a.codes) {
        TH_CHECK_INT(a.n_groups, 4);
        check_consistent(&a);
        TH_CHECK(a.loss > 0);
    }
    lb_gptq_result_free(&a);
    free(W), free(H);
}

static bool same_result(const lb_gptq_result *a, const lb_gptq_result *b) {
    const int64_t n = a->out_features * a->in_features;
    const int64_t g = a->out_features * a->n_groups;
    return a->codes && b->codes && n == b->out_features * b->in_features &&
           memcmp(a->codes, b->codes, sizeof *a->codes * (size_t)n) == 0 &&
           memcmp(a->W_deq, b->W_deq, sizeof(float) * (size_t)n) == 0 &&
           memcmp(a->scales, b->scales, sizeof(float) * (size_t)g) == 0 &&
           memcmp(a->zeros, b->zeros, sizeof(int32_t) * (size_t)g) == 0 &&
           memcmp(a->g_idx, b->g_idx, sizeof(int32_t) * (size_t)a->in_features) == 0 &&
           a->loss == b->loss && a->damp_added == b->damp_added &&
           a->n_dead == b->n_dead;
}

/* One factor shared by two modules with the same H (q/k/v style) gives the
 * bits of lb_gptq_quantize for each, with and without desc_act; a factor
 * made for other options is refused. */
static void test_gptq_shared_factor(void) {
    const int64_t in = 384, out = REF_OUT;
    float *W = tst_raw(REF "down_proj/W.f32", (size_t)(out * in), 4);
    float *H = tst_raw(REF "down_proj/H.f32", (size_t)(in * in), 4);
    TH_CHECK(W && H);
    if (!W || !H) {
        free(W), free(H);
        return;
    }
    /* a second weight on the same input: W reversed row order, scaled */
    float *W2 = malloc(sizeof(float) * (size_t)(out * in));
    for (int64_t o = 0; o < out; o++)
        for (int64_t c = 0; c < in; c++)
            W2[o * in + c] = 0.5f * W[(out - 1 - o) * in + c];
    for (int da = 0; da < 2; da++) {
        lb_gptq_options o;
        lb_gptq_options_default(&o);
        o.group_size = 32;
        o.desc_act = da;
        o.return_hinv = true;
        lb_gptq_factor *f = NULL;
        TH_CHECK_OK(lb_gptq_factor_make(H, in, &o, &f));
        const float *Ws[2] = {W, W2};
        for (int k = 0; k < 2; k++) {
            lb_gptq_result a, b;
            TH_CHECK_OK(lb_gptq_quantize(Ws[k], out, in, H, &o, &a));
            TH_CHECK_OK(lb_gptq_quantize_factored(Ws[k], out, in, f, &o, &b));
            TH_CHECK(same_result(&a, &b));
            /* W as the working copy: the same bits */
            lb_gptq_result c;
            float *Wc = malloc(sizeof(float) * (size_t)(out * in));
            memcpy(Wc, Ws[k], sizeof(float) * (size_t)(out * in));
            TH_CHECK_OK(lb_gptq_quantize_factored_inplace(Wc, out, in, f, &o, &c));
            TH_CHECK(same_result(&a, &c));
            lb_gptq_result_free(&c);
            free(Wc);
            TH_CHECK(a.hinv_upper && b.hinv_upper &&
                     memcmp(a.hinv_upper, b.hinv_upper, sizeof(float) * (size_t)(in * in)) == 0);
            TH_CHECK((a.perm == NULL) == !da && (b.perm == NULL) == !da);
            if (da && a.perm && b.perm)
                TH_CHECK(memcmp(a.perm, b.perm, sizeof(int32_t) * (size_t)in) == 0);
            lb_gptq_result_free(&a);
            lb_gptq_result_free(&b);
        }
        lb_gptq_result r;
        o.desc_act = !da; /* not what the factor was made for */
        TH_CHECK_FAILS(lb_gptq_quantize_factored(W, out, in, f, &o, &r), LB_ERR_INVALID_ARG);
        TH_CHECK(r.codes == NULL);
        o.desc_act = da;
        o.damp_percent = 0.02;
        TH_CHECK_FAILS(lb_gptq_quantize_factored(W, out, in, f, &o, &r), LB_ERR_INVALID_ARG);
        o.damp_percent = 0.01;
        TH_CHECK_FAILS(lb_gptq_quantize_factored(W, out, in - 32, f, &o, &r), LB_ERR_INVALID_ARG);
        lb_gptq_factor_free(f);
    }
    /* in place with per-row groups (step 1 reads W) and static groups */
    for (int k = 0; k < 2; k++) {
        lb_gptq_options o;
        lb_gptq_options_default(&o);
        o.group_size = k ? 100 : -1;
        o.static_groups = k;
        o.desc_act = k;
        lb_gptq_factor *f = NULL;
        TH_CHECK_OK(lb_gptq_factor_make(H, in, &o, &f));
        lb_gptq_result a, c;
        TH_CHECK_OK(lb_gptq_quantize_factored(W, out, in, f, &o, &a));
        memcpy(W2, W, sizeof(float) * (size_t)(out * in));
        TH_CHECK_OK(lb_gptq_quantize_factored_inplace(W2, out, in, f, &o, &c));
        TH_CHECK(same_result(&a, &c));
        lb_gptq_result_free(&a);
        lb_gptq_result_free(&c);
        lb_gptq_factor_free(f);
    }
    lb_gptq_factor *f = (lb_gptq_factor *)1;
    lb_gptq_options o;
    lb_gptq_options_default(&o);
    TH_CHECK_FAILS(lb_gptq_factor_make(NULL, in, &o, &f), LB_ERR_INVALID_ARG);
    TH_CHECK(f == NULL);
    lb_gptq_factor_free(NULL);
    free(W), free(W2), free(H);
}

/* Block size: per-row groups (-1) have no stale-parameter quirk, so the
 * lazy-batch blocking only changes float rounding; tiny and awkward shapes
 * (1 column, groups larger than the row, blocksize 1) work. */
static void test_gptq_blocksizes_and_shapes(void) {
    const int64_t in = 384, out = REF_OUT;
    float *W = tst_raw(REF "down_proj/W.f32", (size_t)(out * in), 4);
    float *H = tst_raw(REF "down_proj/H.f32", (size_t)(in * in), 4);
    TH_CHECK(W && H);
    if (W && H) {
        lb_gptq_options o;
        lb_gptq_options_default(&o);
        o.group_size = -1;
        lb_gptq_result a, b;
        TH_CHECK_OK(lb_gptq_quantize(W, out, in, H, &o, &a));
        const int bss[] = {1, 7, 64, 1000};
        for (int k = 0; k < 4; k++) {
            o.blocksize = bss[k];
            TH_CHECK_OK(lb_gptq_quantize(W, out, in, H, &o, &b));
            if (a.codes && b.codes) {
                int64_t nd = 0;
                for (int64_t i = 0; i < out * in; i++) nd += a.codes[i] != b.codes[i];
                TH_CHECK_MSG(nd <= out * in / 100, "blocksize %d: %lld codes differ",
                             bss[k], (long long)nd);
                TH_CHECK_NEAR(b.loss, a.loss, 1e-3 * a.loss);
                TH_CHECK(memcmp(a.scales, b.scales, sizeof(float) * out) == 0);
            }
            lb_gptq_result_free(&b);
        }
        lb_gptq_result_free(&a);
        /* group larger than the row: one group, g_idx 0 */
        lb_gptq_options_default(&o);
        o.group_size = 1024;
        TH_CHECK_OK(lb_gptq_quantize(W, out, in, H, &o, &a));
        TH_CHECK_INT(a.n_groups, 1);
        if (a.g_idx) TH_CHECK_INT(a.g_idx[383], 0);
        lb_gptq_result_free(&a);
        /* static groups that do not divide the row, with act-order */
        o.group_size = 100;
        o.static_groups = true;
        o.desc_act = true;
        TH_CHECK_OK(lb_gptq_quantize(W, out, in, H, &o, &a));
        TH_CHECK_INT(a.n_groups, 4);
        if (a.codes) {
            check_consistent(&a);
            for (int64_t c = 0; c < in; c++) TH_CHECK_INT(a.g_idx[c], c / 100);
        }
        lb_gptq_result_free(&a);
    }
    /* 1 x 1 and 3 x 2 problems */
    const float w1 = 0.3f, h1 = 2.0f;
    lb_gptq_options o;
    lb_gptq_options_default(&o);
    lb_gptq_result r;
    TH_CHECK_OK(lb_gptq_quantize(&w1, 1, 1, &h1, &o, &r));
    if (r.codes) {
        TH_CHECK_INT(r.n_groups, 1);
        check_consistent(&r);
        /* sym 4-bit, no negative value: xmin stays 0, scale = 0.3/15;
         * +0.3 is 15 steps above zero 8: clips to 15 */
        TH_CHECK(r.scales[0] == w1 / 15.0f);
        TH_CHECK_INT(r.codes[0], 15);
    }
    lb_gptq_result_free(&r);
    const float w3[6] = {1, -2, 0.5f, 0, 0, 0}, h2[4] = {1, 0.5f, 0.5f, 1};
    o.group_size = 1;
    o.sym = false;
    o.bits = 2;
    o.blocksize = 1;
    o.desc_act = true;
    TH_CHECK_OK(lb_gptq_quantize(w3, 3, 2, h2, &o, &r));
    if (r.codes) {
        TH_CHECK_INT(r.n_groups, 2);
        check_consistent(&r);
    }
    lb_gptq_result_free(&r);
    free(W), free(H);
}

/* ------------------------------------------------------------------------ */
/* Damping, dead columns, bad input                                          */
/* ------------------------------------------------------------------------ */

/* H = I + c (e0 e1^T + e1 e0^T) has eigenvalues 1 +- c: indefinite for
 * c > 1; mean diag = 1, so Cholesky needs damp_percent > c - 1. */
static void make_indefinite(float *H, int n, float c) {
    memset(H, 0, sizeof(float) * n * n);
    for (int i = 0; i < n; i++) H[i * n + i] = 1.0f;
    H[0 * n + 1] = H[1 * n + 0] = c;
}

static void test_gptq_damp_auto(void) {
    enum { N = 40, O = 8 };
    float H[N * N], W[O * N];
    for (int i = 0; i < O * N; i++) W[i] = frand();
    make_indefinite(H, N, 1.02f); /* eigenvalue -0.02 */
    lb_gptq_options o;
    lb_gptq_options_default(&o);
    o.group_size = -1;
    lb_gptq_result r;
    TH_CHECK_OK(lb_gptq_quantize(W, O, N, H, &o, &r));
    /* 0.01 -> 0.0125 -> ... -> 0.0225 (first > 0.02) */
    TH_CHECK_INT(r.n_damp_retries, 5);
    TH_CHECK_NEAR(r.damp_percent_used, 0.0225, 1e-12);
    TH_CHECK_NEAR(r.damp_added, 0.0225, 1e-7);
    if (r.codes) check_consistent(&r);
    lb_gptq_result_free(&r);
    /* larger steps */
    o.damp_auto_increment = 0.01;
    TH_CHECK_OK(lb_gptq_quantize(W, O, N, H, &o, &r));
    TH_CHECK_INT(r.n_damp_retries, 2);
    TH_CHECK_NEAR(r.damp_percent_used, 0.03, 1e-12);
    lb_gptq_result_free(&r);
    /* no auto-increment: clear failure */
    o.damp_auto_increment = 0;
    TH_CHECK_FAILS(lb_gptq_quantize(W, O, N, H, &o, &r), LB_ERR_RANGE);
    TH_CHECK(strstr(lb_last_error(), "damp_percent 0.01") != NULL);
    TH_CHECK(r.codes == NULL);
    /* bound reached: eigenvalue -1.5 needs damp > 1.5 * mean, beyond 1.0 */
    o.damp_auto_increment = 0.1;
    make_indefinite(H, N, 2.5f);
    TH_CHECK_FAILS(lb_gptq_quantize(W, O, N, H, &o, &r), LB_ERR_RANGE);
    TH_CHECK(strstr(lb_last_error(), "not positive definite") != NULL);
    /* an all-zero H: every column dead, diag -> 1, identity problem = RTN */
    memset(H, 0, sizeof H);
    o.damp_auto_increment = 0.0025;
    TH_CHECK_OK(lb_gptq_quantize(W, O, N, H, &o, &r));
    TH_CHECK_INT(r.n_dead, N);
    if (r.codes) {
        /* W zeroed after the row params were taken from the original W */
        for (int i = 0; i < O * N; i++)
            TH_CHECK_INT(r.codes[i], r.zeros[i / N]);
    }
    lb_gptq_result_free(&r);
}

static void test_gptq_dead_and_identity(void) {
    /* H = identity except one dead column: GPTQ = RTN with zero feedback
     * (U = I / sqrt(1 + damp), no off-diagonal), dead column -> code zero */
    enum { N = 64, O = 16 };
    float H[N * N], W[O * N];
    for (int i = 0; i < O * N; i++) W[i] = grand();
    memset(H, 0, sizeof H);
    for (int i = 0; i < N; i++) H[i * N + i] = 1.0f;
    H[5 * N + 5] = 0.0f;
    lb_gptq_options o;
    lb_gptq_options_default(&o);
    o.group_size = 16;
    o.sym = false;
    o.bits = 3;
    lb_gptq_result r, rtn;
    TH_CHECK_OK(lb_gptq_quantize(W, O, N, H, &o, &r));
    float W0[O * N];
    memcpy(W0, W, sizeof W);
    for (int i = 0; i < O; i++) W0[i * N + 5] = 0.0f;
    TH_CHECK_OK(lb_rtn_quantize(W0, O, N, 3, 16, false, false, &rtn));
    TH_CHECK_INT(r.n_dead, 1);
    if (r.codes && rtn.codes) {
        TH_CHECK(memcmp(r.codes, rtn.codes, sizeof *r.codes * O * N) == 0);
        TH_CHECK(memcmp(r.scales, rtn.scales, sizeof(float) * O * 4) == 0);
        for (int i = 0; i < O; i++) TH_CHECK(r.W_deq[i * N + 5] == 0.0f);
    }
    lb_gptq_result_free(&r);
    lb_gptq_result_free(&rtn);
}

static void test_gptq_bad_args(void) {
    enum { N = 32, O = 4 };
    float H[N * N] = {0}, W[O * N] = {0};
    for (int i = 0; i < N; i++) H[i * N + i] = 1.0f;
    lb_gptq_options o;
    lb_gptq_options_default(&o);
    lb_gptq_result r;
    o.bits = 1;
    TH_CHECK_FAILS(lb_gptq_quantize(W, O, N, H, &o, &r), LB_ERR_INVALID_ARG);
    lb_gptq_options_default(&o);
    o.group_size = -2;
    TH_CHECK_FAILS(lb_gptq_quantize(W, O, N, H, &o, &r), LB_ERR_INVALID_ARG);
    lb_gptq_options_default(&o);
    o.blocksize = 0;
    TH_CHECK_FAILS(lb_gptq_quantize(W, O, N, H, &o, &r), LB_ERR_INVALID_ARG);
    lb_gptq_options_default(&o);
    o.damp_percent = 0;
    TH_CHECK_FAILS(lb_gptq_quantize(W, O, N, H, &o, &r), LB_ERR_INVALID_ARG);
    lb_gptq_options_default(&o);
    TH_CHECK_FAILS(lb_gptq_quantize(W, 0, N, H, &o, &r), LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gptq_quantize(NULL, O, N, H, &o, &r), LB_ERR_INVALID_ARG);
    H[3] = NAN;
    TH_CHECK_FAILS(lb_gptq_quantize(W, O, N, H, &o, &r), LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "H[0, 3]") != NULL);
    H[3] = 0;
    W[40] = -INFINITY;
    TH_CHECK_FAILS(lb_gptq_quantize(W, O, N, H, &o, &r), LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "W[1, 8]") != NULL);
    W[40] = 0;
    TH_CHECK_OK(lb_gptq_quantize(W, O, N, H, &o, &r)); /* zero W is fine */
    lb_gptq_result_free(&r);
}

/* torch-order float32 sum: a real sum on awkward lengths (exact on small
 * integers); its exact torch order is checked through damp_added above. */
static void test_torch_sum_lengths(void) {
    const int ns[] = {1, 3, 7, 8, 31, 33, 127, 129, 1000, 70001};
    for (int k = 0; k < 10; k++) {
        const int n = ns[k];
        float *x = malloc(sizeof(float) * n);
        double s = 0, sa = 0;
        for (int i = 0; i < n; i++) {
            x[i] = (float)(i % 17);
            s += x[i];
        }
        TH_CHECK(lb_gptq_torch_sum_f32(x, n) == (float)s);
        for (int i = 0; i < n; i++) {
            x[i] = frand();
            sa += x[i];
        }
        TH_CHECK_NEAR(lb_gptq_torch_sum_f32(x, n), sa, 1e-5 * sqrt(n));
        free(x);
    }
}

/* lb_gptq_hessian_take hands over the bytes lb_gptq_hessian_get copies
 * (f32, f64, and bf16 products where the CPU has them) and frees the
 * accumulator (ASan: no leak). */
static void test_hessian_take(void) {
    enum { IN = 67, R = 33 };
    float *X = malloc(sizeof(float) * R * IN);
    float *want = malloc(sizeof(float) * IN * IN);
    for (int i = 0; i < R * IN; i++) X[i] = grand();
    for (int mode = 0; mode < 3; mode++) {
        if (mode == 2 && !lb_gram_bf16_available()) continue;
        lb_gptq_hessian *h;
        TH_CHECK_OK(lb_gptq_hessian_create(IN, mode == 1, &h));
        if (mode == 2) TH_CHECK_OK(lb_gptq_hessian_use_bf16(h, NULL));
        TH_CHECK_OK(lb_gptq_hessian_add_batch(h, X, R, 1));
        TH_CHECK_OK(lb_gptq_hessian_add_batch(h, X + IN, R - 1, 2));
        lb_gptq_hessian_get(h, want);
        float *H = NULL;
        TH_CHECK_OK(lb_gptq_hessian_take(h, &H));
        TH_CHECK_MSG(H && memcmp(H, want, sizeof(float) * IN * IN) == 0,
                     "mode %d: taken H differs from lb_gptq_hessian_get",
                     mode);
        lb_free(H);
    }
    float *H = want;
    TH_CHECK_FAILS(lb_gptq_hessian_take(NULL, &H), LB_ERR_INVALID_ARG);
    TH_CHECK(H == NULL);
    free(want);
    free(X);
}

/* The accumulator forms x x^T in the triangle of its own buffer that H
 * does not use: H's bytes equal those of the former construction, x x^T
 * in an [in, in] buffer of its own (ssyrk, or lb_gram_bf16) followed by
 * H = ratio H + T (torch's two roundings); f32 and bf16 products, batches
 * within and beyond a K block, 1 and 2 BLAS threads. */
static void test_hessian_one_buffer(void) {
    enum { IN = 333, RMAX = 700 };
    static const int rows[4] = {700, 77, 1, 300};
    float *X = malloc(sizeof(float) * RMAX * IN);
    float *xs = malloc(sizeof(float) * RMAX * IN);
    float *T = malloc(sizeof(float) * IN * IN);
    float *Hr = malloc(sizeof(float) * IN * IN);
    float *got = malloc(sizeof(float) * IN * IN);
    const size_t xb = lb_gram_bf16_scratch(RMAX, IN);
    uint16_t *xt = malloc(xb);
    for (int i = 0; i < RMAX * IN; i++) X[i] = grand();
    for (int mode = 0; mode < 2; mode++) {
        if (mode == 1 && !lb_gram_bf16_available()) continue;
        for (int th = 1; th <= 2; th++) {
            openblas_set_num_threads(th);
            lb_gptq_hessian *h;
            TH_CHECK_OK(lb_gptq_hessian_create(IN, false, &h));
            if (mode == 1) TH_CHECK_OK(lb_gptq_hessian_use_bf16(h, NULL));
            memset(Hr, 0, sizeof(float) * IN * IN);
            int64_t n = 0;
            for (int b = 0; b < 4; b++) {
                const int r = rows[b], k = 1 + b % 2;
                const float *Xb = X + (size_t)(b * 11) * IN;
                if (b * 11 + r > RMAX) Xb = X;
                TH_CHECK_OK(lb_gptq_hessian_add_batch(h, Xb, r, k));
                const double n0 = (double)n, n1 = n0 + k;
                const float ratio = (float)(n0 / n1), f = (float)sqrt(2.0 / n1);
                n += k;
                for (int i = 0; i < r * IN; i++) xs[i] = f * Xb[i];
                if (mode == 1)
                    TH_CHECK_OK(lb_gram_bf16(NULL, xs, r, IN, xt, T, false));
                else
                    cblas_ssyrk(CblasRowMajor, CblasLower, CblasTrans, IN, r,
                                1.0f, xs, IN, 0.0f, T, IN);
                for (int i = 0; i < IN; i++)
                    for (int j = 0; j <= i; j++)
                        Hr[i * IN + j] = Hr[i * IN + j] * ratio + T[i * IN + j];
            }
            lb_gptq_mirror_lower(Hr, IN);
            lb_gptq_hessian_get(h, got);
            int64_t ndiff = 0;
            for (int i = 0; i < IN * IN; i++)
                ndiff += memcmp(&got[i], &Hr[i], sizeof(float)) != 0;
            TH_CHECK_MSG(ndiff == 0, "%s, %d threads: %lld of %d H entries "
                         "differ from the two-buffer construction",
                         mode ? "bf16" : "f32", th, (long long)ndiff, IN * IN);
            float *H = NULL;
            TH_CHECK_OK(lb_gptq_hessian_take(h, &H));
            TH_CHECK(H && memcmp(H, Hr, sizeof(float) * IN * IN) == 0);
            lb_free(H);
        }
    }
    openblas_set_num_threads(1);
    free(X), free(xs), free(T), free(Hr), free(got), free(xt);
}

/* The former factor construction, for comparison: a fresh buffer B with
 * Hp + damp I (Hp = H[perm][:, perm], dead diagonals 1) in its
 * column-major lower triangle and NaN elsewhere, spotrf('L'),
 * spotri('L'), the inverse mirrored onto the column-major upper
 * triangle, spotrf('U'), moved to the row-major upper triangle. Returns
 * the row-major upper U (malloc'd) or NULL when a step fails. */
static float *factor_two_buffers(const float *H, int n, bool desc_act,
                                 double damp_percent) {
    float *dg = malloc(sizeof(float) * n), *dp = malloc(sizeof(float) * n);
    int32_t *perm = malloc(sizeof(int32_t) * n);
    for (int c = 0; c < n; c++) {
        dg[c] = H[c * n + c] == 0.0f ? 1.0f : H[c * n + c];
        perm[c] = c;
    }
    if (desc_act) /* stable: descending diag, ties by column */
        for (int a = 1; a < n; a++)
            for (int b = a; b > 0 && dg[perm[b]] > dg[perm[b - 1]]; b--) {
                const int32_t t = perm[b];
                perm[b] = perm[b - 1];
                perm[b - 1] = t;
            }
    for (int c = 0; c < n; c++) dp[c] = dg[perm[c]];
    const float damp = (float)damp_percent * (lb_gptq_torch_sum_f32(dp, n) / (float)n);
    float *B = malloc(sizeof(float) * n * n);
    for (int i = 0; i < n * n; i++) B[i] = NAN;
    for (int j = 0; j < n; j++)
        for (int i = j; i < n; i++) B[i + j * n] = H[perm[i] * n + perm[j]];
    for (int i = 0; i < n; i++) {
        if (H[perm[i] * n + perm[i]] == 0.0f) B[i + i * n] = 1.0f;
        B[i + i * n] += damp;
    }
    bool ok = LAPACKE_spotrf(LAPACK_COL_MAJOR, 'L', n, B, n) == 0 &&
              LAPACKE_spotri(LAPACK_COL_MAJOR, 'L', n, B, n) == 0;
    if (ok) {
        for (int j = 0; j < n; j++) /* column-major upper := lower */
            for (int i = j + 1; i < n; i++) B[j + i * n] = B[i + j * n];
        ok = LAPACKE_spotrf(LAPACK_COL_MAJOR, 'U', n, B, n) == 0;
    }
    float *U = NULL;
    if (ok) {
        U = calloc((size_t)n * n, sizeof(float));
        for (int i = 0; i < n; i++)
            for (int j = i; j < n; j++) U[i * n + j] = B[i + j * n];
    }
    free(B), free(dg), free(dp), free(perm);
    return U;
}

/* The factor's U, through a solve with return_hinv (NULL on failure). */
static float *factor_hinv(const lb_gptq_factor *f, int n,
                          const lb_gptq_options *o0, int *retries,
                          double *damp_used) {
    lb_gptq_options o = *o0;
    o.return_hinv = true;
    o.group_size = -1;
    float W[2 * 600];
    for (int i = 0; i < 2 * n; i++) W[i] = (float)((i * 37) % 11) - 5.0f;
    lb_gptq_result r;
    if (lb_gptq_quantize_factored(W, 2, n, f, &o, &r) != LB_OK) return NULL;
    float *U = malloc(sizeof(float) * n * n);
    memcpy(U, r.hinv_upper, sizeof(float) * n * n);
    *retries = r.n_damp_retries;
    *damp_used = r.damp_percent_used;
    lb_gptq_result_free(&r);
    return U;
}

/* The factor made in H's own buffer (lb_gptq_factor_make_inplace) and
 * from a copy (lb_gptq_factor_make) equals the former two-buffer
 * construction bit for bit (which also shows that OpenBLAS's LAPACK
 * reads no entry of the triangle holding H's copy): with and without
 * desc_act, dead columns, 1 and 2 BLAS threads, n beyond LAPACK's block;
 * and after forced failures of each step (the retry starts from the copy
 * the failed attempt left), equal to the construction at the damp_percent
 * reached. */
static void test_factor_inplace(void) {
    enum { N = 600, R = 900 };
    float *X = malloc(sizeof(float) * R * N);
    for (int i = 0; i < R * N; i++) X[i] = grand() * (1.0f + (float)(i % N) / N);
    for (int t = 0; t < R; t++) /* dead columns 5 and 400 */
        X[t * N + 5] = X[t * N + 400] = 0.0f;
    lb_gptq_hessian *h;
    TH_CHECK_OK(lb_gptq_hessian_create(N, false, &h));
    TH_CHECK_OK(lb_gptq_hessian_add_batch(h, X, R, 1));
    float *H = NULL;
    TH_CHECK_OK(lb_gptq_hessian_take(h, &H));
    free(X);
    if (!H) return;
    for (int step = 0; step <= 4; step++)
        for (int desc = 0; desc < 2; desc++)
            for (int th = 1; th <= 2; th++) {
                if (step > 0 && th == 2) continue;
                openblas_set_num_threads(th);
                lb_gptq_options o;
                lb_gptq_options_default(&o);
                o.desc_act = desc;
                for (int inpl = 0; inpl < 2; inpl++) {
                    lb_gptq_test_fail_step = step;
                    lb_gptq_test_fail_count = step ? 2 : 0;
                    lb_gptq_factor *f = NULL;
                    if (inpl) {
                        float *Hc = lb_alloc(sizeof(float) * N * N);
                        memcpy(Hc, H, sizeof(float) * N * N);
                        TH_CHECK_OK(lb_gptq_factor_make_inplace(&Hc, N, &o, &f));
                        TH_CHECK(Hc == NULL);
                    } else {
                        TH_CHECK_OK(lb_gptq_factor_make(H, N, &o, &f));
                    }
                    lb_gptq_test_fail_step = lb_gptq_test_fail_count = 0;
                    int retries = -1;
                    double used = 0;
                    float *U = f ? factor_hinv(f, N, &o, &retries, &used) : NULL;
                    float *want = factor_two_buffers(H, N, desc, used);
                    TH_CHECK(U && want);
                    TH_CHECK_INT(retries, step ? 2 : 0);
                    if (U && want) {
                        int64_t nd = 0;
                        for (int i = 0; i < N * N; i++)
                            nd += memcmp(&U[i], &want[i], sizeof(float)) != 0;
                        TH_CHECK_MSG(nd == 0, "step %d, desc_act %d, %d "
                                     "threads, %s: %lld of %d U entries differ",
                                     step, desc, th, inpl ? "in place" : "copy",
                                     (long long)nd, N * N);
                    }
                    free(U);
                    free(want);
                    lb_gptq_factor_free(f);
                }
            }
    openblas_set_num_threads(1);
    /* NULL H, a non-finite H: freed, *H NULL */
    lb_gptq_options o;
    lb_gptq_options_default(&o);
    lb_gptq_factor *f = NULL;
    TH_CHECK_FAILS(lb_gptq_factor_make_inplace(NULL, N, &o, &f), LB_ERR_INVALID_ARG);
    float *Hc = lb_alloc(sizeof(float) * 4);
    Hc[0] = Hc[3] = 1.0f;
    Hc[1] = Hc[2] = NAN;
    TH_CHECK_FAILS(lb_gptq_factor_make_inplace(&Hc, 2, &o, &f), LB_ERR_INVALID_ARG);
    TH_CHECK(Hc == NULL && f == NULL);
    lb_free(H);
}

#if !defined(__SANITIZE_ADDRESS__)
/* One module's Hessian path: accumulate X [rows, in], take H, make the
 * factor in H's buffer, solve W [out, in]. */
static lb_status hessian_path(const float *X, int64_t rows, const float *W,
                              int64_t out, int64_t in) {
    lb_gptq_hessian *h = NULL;
    lb_status s = lb_gptq_hessian_create(in, false, &h);
    if (s != LB_OK) return s;
    s = lb_gptq_hessian_add_batch(h, X, rows, 1);
    float *H = NULL;
    if (s == LB_OK)
        s = lb_gptq_hessian_take(h, &H);
    else
        lb_gptq_hessian_free(h);
    lb_gptq_options o;
    lb_gptq_options_default(&o);
    lb_gptq_factor *f = NULL;
    if (s == LB_OK) s = lb_gptq_factor_make_inplace(&H, in, &o, &f);
    lb_free(H);
    lb_gptq_result r;
    if (s == LB_OK) s = lb_gptq_quantize_factored(W, out, in, f, &o, &r);
    if (s == LB_OK) lb_gptq_result_free(&r);
    lb_gptq_factor_free(f);
    return s;
}

/* Resident KiB of this process (/proc/self/statm), -1 if unknown. */
static long rss_kib(void) {
    const long rss = th_rss_pages();
    return rss < 0 ? -1 : rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* hessian_path at in = 2048 in this (child) process: exit status 0 when
 * its peak RSS over the RSS at its start stays within 1.5 [in, in] f32
 * buffers (one, the accumulator that becomes the factor, plus X's copy,
 * the solve's small work space and the allocator's slack; the path held
 * two until 2026-12-04 — measured 2.15 — and five before). */
static int hessian_memory_child(void) {
    enum { IN = 2048, R = 128, OUT = 16 };
    /* every block of 1 MiB or more mmap'ed: a freed one leaves the RSS */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    float *X = malloc(sizeof(float) * R * IN);
    float *W = malloc(sizeof(float) * OUT * IN);
    if (!X || !W) return 2;
    for (int i = 0; i < R * IN; i++) X[i] = grand();
    for (int i = 0; i < OUT * IN; i++) W[i] = grand();
    /* warm-up: BLAS/LAPACK buffers, this code's pages */
    if (hessian_path(X, R, W, OUT, 256) != LB_OK) return 3;
    const long r0 = rss_kib();
    if (hessian_path(X, R, W, OUT, IN) != LB_OK) return 3;
    struct rusage ru;
    if (r0 < 0 || getrusage(RUSAGE_SELF, &ru) != 0) return 4;
    const double unit = (double)IN * IN * sizeof(float) / 1024.0;
    const double peak = (double)(ru.ru_maxrss - r0) / unit;
    fprintf(stderr, "  Hessian path at in %d: peak RSS %.2f x [in, in] f32 "
            "above the start\n", IN, peak);
    free(X);
    free(W);
    return peak <= 1.5 ? 0 : 1;
}
#endif

/* One [in, in] f32 buffer of one module's Hessian lives at a time:
 * measured in a child process (its peak RSS, ru_maxrss). Not under ASan
 * (its quarantine keeps freed blocks resident). */
static void test_hessian_memory(void) {
#if defined(__SANITIZE_ADDRESS__)
    fprintf(stderr, "  Hessian path memory: not under ASan\n");
    return;
#else
    fflush(stderr);
    pid_t pid = fork();
    TH_CHECK(pid >= 0);
    if (pid == 0) _exit(hessian_memory_child());
    int status = 0;
    TH_CHECK(waitpid(pid, &status, 0) == pid);
    TH_CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                 "the Hessian path's peak memory (exit status %d: 1 = above "
                 "1.5 [in, in] buffers)",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
#endif
}

/* Re-run the golden tests with netlib's reference BLAS and LAPACK
 * preloaded (the libraries the reference was computed with), asserting bit
 * equality. Skipped (and said so) where they are not installed, and under
 * sanitizers (which must come first in the library list). */
static void test_bitexact_netlib(void) {
#if defined(__SANITIZE_ADDRESS__)
    fprintf(stderr, "  bit-exact netlib re-run: not under ASan\n");
    return;
#else
    const char *blas = getenv("LB_NETLIB_BLAS");
    const char *lapack = getenv("LB_NETLIB_LAPACK");
    if (!blas) blas = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3";
    if (!lapack) lapack = "/usr/lib/x86_64-linux-gnu/lapack/liblapack.so.3";
    if (access(blas, R_OK) != 0 || access(lapack, R_OK) != 0) {
        fprintf(stderr,
                "  bit-exact netlib re-run: SKIPPED (%s or %s missing)\n",
                blas, lapack);
        return;
    }
    char preload[2100];
    snprintf(preload, sizeof preload, "%s %s", blas, lapack);
    fflush(stderr);
    pid_t pid = fork();
    TH_CHECK(pid >= 0);
    if (pid == 0) {
        setenv("LD_PRELOAD", preload, 1);
        setenv("LB_GPTQ_BITEXACT", "1", 1);
        execl("/proc/self/exe", "test_gptq", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    TH_CHECK(waitpid(pid, &status, 0) == pid);
    TH_CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                 "bit-exact re-run failed (status %d)", status);
#endif
}

/* The f32 accumulator (ssyrk, lower triangle, mirrored on read) against
 * torch's formula, H *= n/(n+k); x = sqrt(2/(n+k)) X; H += x^T x, computed
 * in float64 from the same f32 x: every element within the f32 summation
 * bound 2 (rows + 4) eps sum|terms| (the same recurrence on |x_i x_j|).
 * Bit equality with the formula done by cblas_sgemm is reported, not
 * required: it depends on OpenBLAS's kernels (its SkylakeX core gives it
 * for batches up to one K block; the Haswell core, which OpenBLAS 0.3.21
 * picks on an AMD "Turin-like" VM, differs from 77 rows on). The golden
 * AutoGPTQ comparisons (test_gptq_reference, test_quantize_ckpt and the
 * netlib re-run) hold the end result. Awkward widths, growing and
 * shrinking batch sizes, 1 and 2 BLAS threads. */
static void test_hessian_syrk(void) {
    static const int ins[] = {1, 37, 130, 300};
    static const int rows[] = {5, 77, 3, 260, 1};
    int64_t same_bits = 0, total = 0;
    double worst_all = 0;
    for (int th = 1; th <= 2; th++) {
        openblas_set_num_threads(th);
        for (size_t a = 0; a < sizeof ins / sizeof *ins; a++) {
            const int in = ins[a];
            lb_gptq_hessian *h;
            TH_CHECK_OK(lb_gptq_hessian_create(in, false, &h));
            float *ref = calloc((size_t)in * in, sizeof(float));
            double *r64 = calloc((size_t)in * in, sizeof(double));
            double *abs64 = calloc((size_t)in * in, sizeof(double));
            float *T = malloc((size_t)in * in * sizeof(float));
            float *got = malloc((size_t)in * in * sizeof(float));
            float *X = malloc((size_t)260 * in * sizeof(float));
            float *xs = malloc((size_t)260 * in * sizeof(float));
            double n = 0;
            for (size_t b = 0; b < sizeof rows / sizeof *rows; b++) {
                const int r = rows[b];
                for (int i = 0; i < r * in; i++) X[i] = grand();
                TH_CHECK_OK(lb_gptq_hessian_add_batch(h, X, r, 1));
                const double n1 = n + 1;
                const float ratio = (float)(n / n1), f = (float)sqrt(2.0 / n1);
                n = n1;
                for (int i = 0; i < in * in; i++) {
                    ref[i] *= ratio;
                    r64[i] *= ratio;
                    abs64[i] *= ratio;
                }
                for (int i = 0; i < r * in; i++) xs[i] = f * X[i];
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, in, r,
                            1.0f, xs, in, xs, in, 0.0f, T, in);
                for (int i = 0; i < in * in; i++) ref[i] += T[i];
                for (int k = 0; k < r; k++)
                    for (int i = 0; i < in; i++)
                        for (int j = 0; j < in; j++) {
                            const double p = (double)xs[k * in + i] * xs[k * in + j];
                            r64[i * in + j] += p;
                            abs64[i * in + j] += fabs(p);
                        }
            }
            lb_gptq_hessian_get(h, got);
            int64_t far = 0;
            double worst = 0;
            for (int i = 0; i < in * in; i++) {
                same_bits += memcmp(&got[i], &ref[i], sizeof(float)) == 0;
                const double bound = 2.0 * (260 + 4) * FLT_EPSILON * abs64[i] + 1e-30;
                const double e = fabs((double)got[i] - r64[i]) / bound;
                far += e > 1;
                if (e > worst) worst = e;
            }
            total += (int64_t)in * in;
            if (worst > worst_all) worst_all = worst;
            TH_CHECK_MSG(far == 0, "in %d, %d threads: %lld of %d H elements outside the "
                         "f32 summation bound (worst %.2f x bound)", in, th, (long long)far,
                         in * in, worst);
            lb_gptq_hessian_free(h);
            free(ref);
            free(r64);
            free(abs64);
            free(T);
            free(got);
            free(X);
            free(xs);
        }
    }
    fprintf(stderr, "  ssyrk H: worst error %.3f x the f32 bound; %lld of %lld elements bit-equal "
            "to the sgemm formula (OpenBLAS core %s)\n", worst_all, (long long)same_bits,
            (long long)total, openblas_get_corename());
    openblas_set_num_threads(1);
}

int main(void) {
    openblas_set_num_threads(1);
    if (getenv("LB_GPTQ_BITEXACT")) {
        bitexact_mode = 1;
        fprintf(stderr, "bit-exact mode (netlib BLAS/LAPACK preloaded)\n");
        TH_RUN(test_hessian_reference);
        TH_RUN(test_gptq_reference);
        return th_report();
    }
    TH_RUN(test_grid_exact);
    TH_RUN(test_grid_zero_rows);
    TH_RUN(test_grid_ld_and_errors);
    TH_RUN(test_grid_mse);
    TH_RUN(test_rtn_units);
    TH_RUN(test_rtn_reference);
    TH_RUN(test_hessian_units);
    TH_RUN(test_hessian_syrk);
    TH_RUN(test_hessian_take);
    TH_RUN(test_hessian_one_buffer);
    TH_RUN(test_factor_inplace);
    TH_RUN(test_hessian_memory);
    TH_RUN(test_hessian_reference);
    TH_RUN(test_gptq_reference);
    TH_RUN(test_gptq_from_own_hessian);
    TH_RUN(test_gptq_threads_progress);
    TH_RUN(test_gptq_shared_factor);
    TH_RUN(test_gptq_blocksizes_and_shapes);
    TH_RUN(test_gptq_damp_auto);
    TH_RUN(test_gptq_dead_and_identity);
    TH_RUN(test_gptq_bad_args);
    TH_RUN(test_torch_sum_lengths);
    TH_RUN(test_bitexact_netlib);
    return th_report();
}
