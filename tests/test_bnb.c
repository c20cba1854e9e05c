/*
 * test_bnb — bitsandbytes NF4 / FP4 / INT8 (lowbit/bnb.h).
 *
 * Oracle from outside lowbit: tests/data/bnb (make_refs.py, torch in the
 * refenv): a torch reimplementation of bitsandbytes' CPU reference backend
 * (backends/default/ops.py: quantize_4bit, quantize_blockwise,
 * int8_vectorwise_quant), functional.create_dynamic_map / get_4bit_type and
 * QuantState's double quantization, on a [301, 129] weight (odd element
 * count, partial 64-block, partial 256-block of absmax, outliers).
 * bitsandbytes itself is not installed in the refenv.
 */
#include "th.h"

#include "lowbit/bnb.h"
#include "lowbit/export.h"
#include "lowbit/file.h"
#include "lowbit/model.h"
#include "lowbit/safetensors.h"
#include "lowbit/quants.h"
#include "kernels/kernels_internal.h"

#include <math.h>
#include <sys/stat.h>
#include <string.h>

static const char *tmp_path(const char *name) {
    static char buf[8][1024];
    static int slot;
    char *b = buf[slot++ & 7];
    snprintf(b, sizeof buf[0], "%s/%s", th_tmpdir(), name);
    return b;
}

enum { OUT = 301, IN = 129, N = OUT * IN, NABS = (N + 63) / 64, NN = (NABS + 255) / 256 };

static void *ref(const char *f, size_t want) {
    char p[256];
    snprintf(p, sizeof p, "tests/data/bnb/%s", f);
    size_t n = 0;
    void *d = th_read_bin(p, &n);
    TH_CHECK_MSG(d && n == want, "%s: %zu bytes, want %zu", p, n, want);
    if (d && n != want) {
        free(d);
        return NULL;
    }
    return d;
}

static int diff_bytes(const void *a, const void *b, size_t n) {
    const uint8_t *x = a, *y = b;
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += x[i] != y[i];
    return bad;
}

static lb_tensor tens(const char *name, lb_type ty, int64_t n, const void *data, size_t nbytes) {
    lb_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.type = ty;
    t.n_dims = 1;
    t.shape[0] = n;
    t.data = data;
    t.nbytes = nbytes;
    return t;
}

static void test_codec_as_reference(void) {
    float *w = ref("w.f32", N * 4), *dyn = ref("dynamic_map.f32", 1024);
    if (!w || !dyn) return;
    TH_CHECK_INT(diff_bytes(lb_bnb_dynamic_map(), dyn, 1024), 0);
    static const char *names[2] = {"nf4", "fp4"};
    for (int k = 0; k < 2; k++) {
        char f[64];
        snprintf(f, sizeof f, "%s_packed.u8", names[k]);
        uint8_t *rp = ref(f, (N + 1) / 2);
        snprintf(f, sizeof f, "%s_absmax.f32", names[k]);
        float *ra = ref(f, NABS * 4);
        snprintf(f, sizeof f, "%s_deq.f32", names[k]);
        float *rd = ref(f, N * 4);
        uint8_t *p = malloc((N + 1) / 2);
        float *a = malloc(NABS * 4), *d = malloc(N * 4);
        TH_CHECK_OK(lb_bnb_quantize_4bit((lb_bnb_kind)k, w, N, 64, p, a));
        if (rp) TH_CHECK_MSG(diff_bytes(p, rp, (N + 1) / 2) == 0, "%s: %d packed bytes differ",
                             names[k], diff_bytes(p, rp, (N + 1) / 2));
        if (ra) TH_CHECK_INT(diff_bytes(a, ra, NABS * 4), 0);
        /* dequantize through the checked reader */
        char blob[200];
        int bl = snprintf(blob, sizeof blob, "{\"quant_type\": \"%s\", \"blocksize\": 64, \"dtype\": "
                          "\"float32\", \"shape\": [%d, %d]}", names[k], OUT, IN);
        lb_tensor tw = tens("w", LB_TYPE_U8, (N + 1) / 2, p, (N + 1) / 2);
        lb_tensor ta = tens("a", LB_TYPE_F32, NABS, a, NABS * 4);
        lb_tensor tq = tens("q", LB_TYPE_F32, 16, lb_bnb_4bit_table((lb_bnb_kind)k), 64);
        lb_tensor ts = tens("s", LB_TYPE_U8, bl, blob, (size_t)bl);
        lb_bnb_4bit_tensors bt = {.weight = &tw, .absmax = &ta, .quant_map = &tq, .state = &ts};
        TH_CHECK_OK(lb_bnb_dequantize_4bit("layer.x", &bt, OUT, IN, d));
        if (rd) TH_CHECK_INT(diff_bytes(d, rd, N * 4), 0);
        /* hostile: wrong absmax size, unknown type, blob not JSON — named */
        ta.shape[0] = NABS - 1;
        TH_CHECK_FAILS(lb_bnb_dequantize_4bit("layer.x", &bt, OUT, IN, d), LB_ERR_FORMAT);
        TH_CHECK(strstr(lb_last_error(), "layer.x.weight.absmax") != NULL);
        ta.shape[0] = NABS;
        char bad[200];
        int n2 = snprintf(bad, sizeof bad, "{\"quant_type\": \"int3\", \"blocksize\": 64, "
                          "\"shape\": [%d, %d]}", OUT, IN);
        lb_tensor tb = tens("s", LB_TYPE_U8, n2, bad, (size_t)n2);
        bt.state = &tb;
        TH_CHECK_FAILS(lb_bnb_dequantize_4bit("layer.x", &bt, OUT, IN, d), LB_ERR_UNSUPPORTED);
        TH_CHECK(strstr(lb_last_error(), "layer.x.weight.quant_state") != NULL);
        TH_CHECK(strstr(lb_last_error(), "int3") != NULL);
        tb.shape[0] = 7; /* truncated JSON */
        TH_CHECK_FAILS(lb_bnb_dequantize_4bit("layer.x", &bt, OUT, IN, d), LB_ERR_FORMAT);
        TH_CHECK(strstr(lb_last_error(), "layer.x.weight.quant_state") != NULL);
        n2 = snprintf(bad, sizeof bad, "{\"quant_type\": \"nf4\", \"blocksize\": 64, "
                      "\"shape\": [%d, %d]}", OUT + 1, IN);
        tb.shape[0] = n2;
        TH_CHECK_FAILS(lb_bnb_dequantize_4bit("layer.x", &bt, OUT, IN, d), LB_ERR_FORMAT);
        bt.state = NULL;
        TH_CHECK_FAILS(lb_bnb_dequantize_4bit("layer.x", &bt, OUT, IN, d), LB_ERR_NOT_FOUND);
        TH_CHECK(strstr(lb_last_error(), "layer.x") != NULL);
        free(p);
        free(a);
        free(d);
        free(rp);
        free(ra);
        free(rd);
    }
    /* double quantization of the nf4 absmax */
    uint8_t *rq = ref("nf4dq_qabsmax.u8", NABS);
    float *rn = ref("nf4dq_nested_absmax.f32", NN * 4), *rda = ref("nf4dq_absmax_deq.f32", NABS * 4);
    uint8_t *p = malloc((N + 1) / 2), q[NABS];
    float a[NABS], na[NN];
    TH_CHECK_OK(lb_bnb_quantize_4bit(LB_BNB_NF4, w, N, 64, p, a));
    double sum = 0;
    for (int i = 0; i < NABS; i++) sum += a[i];
    float off = (float)(sum / NABS);
    TH_CHECK_NEAR(off, 0.1313614398241043, 1e-9); /* meta.json nested_offset */
    for (int i = 0; i < NABS; i++) a[i] -= off;
    lb_bnb_quantize_blockwise8(a, NABS, 256, lb_bnb_dynamic_map(), q, na);
    if (rq) TH_CHECK_INT(diff_bytes(q, rq, NABS), 0);
    if (rn) TH_CHECK_INT(diff_bytes(na, rn, NN * 4), 0);
    char blob[300];
    int bl = snprintf(blob, sizeof blob, "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": "
                      "\"float32\", \"shape\": [%d, %d], \"nested_blocksize\": 256, \"nested_dtype\": "
                      "\"float32\", \"nested_offset\": 0.1313614398241043}", OUT, IN);
    lb_tensor tw = tens("w", LB_TYPE_U8, (N + 1) / 2, p, (N + 1) / 2);
    lb_tensor ta = tens("a", LB_TYPE_U8, NABS, q, NABS);
    lb_tensor tq = tens("q", LB_TYPE_F32, 16, lb_bnb_4bit_table(LB_BNB_NF4), 64);
    lb_tensor tn = tens("n", LB_TYPE_F32, NN, na, NN * 4);
    lb_tensor tm = tens("m", LB_TYPE_F32, 256, lb_bnb_dynamic_map(), 1024);
    lb_tensor ts = tens("s", LB_TYPE_U8, bl, blob, (size_t)bl);
    lb_bnb_4bit_tensors bt = {.weight = &tw, .absmax = &ta, .quant_map = &tq, .nested_absmax = &tn,
                              .nested_quant_map = &tm, .state = &ts};
    float *d = malloc(N * 4);
    TH_CHECK_OK(lb_bnb_dequantize_4bit("dq", &bt, OUT, IN, d));
    int bad = 0;
    const uint8_t *pp = p;
    for (int i = 0; rda && i < N; i++) {
        int c = i % 2 ? pp[i / 2] & 15 : pp[i / 2] >> 4;
        bad += d[i] != lb_bnb_4bit_table(LB_BNB_NF4)[c] * rda[i / 64];
    }
    TH_CHECK_INT(bad, 0);
    tn.shape[0] = NN + 1;
    TH_CHECK_FAILS(lb_bnb_dequantize_4bit("dq", &bt, OUT, IN, d), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "dq.weight.nested_absmax") != NULL);
    free(d);
    free(p);
    free(rq);
    free(rn);
    free(rda);
    /* INT8 row-wise */
    int8_t *rc = ref("int8_cb.i8", N), *c = malloc(N);
    float *rs = ref("int8_scb.f32", OUT * 4), s[OUT];
    lb_bnb_quantize_int8(w, OUT, IN, c, s);
    if (rc) TH_CHECK_INT(diff_bytes(c, rc, N), 0);
    if (rs) TH_CHECK_INT(diff_bytes(s, rs, OUT * 4), 0);
    free(c);
    free(rc);
    free(rs);
    free(w);
    free(dyn);
}

static void test_qconfig(void) {
    lb_bnb_qconfig q;
    bool is = false;
    const char *a = "{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, "
                    "\"bnb_4bit_quant_type\": \"nf4\", \"bnb_4bit_use_double_quant\": true}";
    TH_CHECK_OK(lb_bnb_qconfig_parse(a, strlen(a), "t", &q, &is));
    TH_CHECK(is && q.kind == LB_BNB_NF4 && q.double_quant);
    const char *b = "{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, "
                    "\"bnb_4bit_quant_type\": \"af4\"}";
    TH_CHECK_FAILS(lb_bnb_qconfig_parse(b, strlen(b), "t", &q, &is), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "af4") != NULL);
    const char *c = "{\"quant_method\": \"gptq\"}";
    TH_CHECK_OK(lb_bnb_qconfig_parse(c, strlen(c), "t", &q, &is));
    TH_CHECK(!is);
}

/* lowbit quantize --method ... -> checkpoint -> loader: tensors, config,
 * error of the dequantized linears against the dense weights */
static void test_checkpoint_round_trip(void) {
    const char *src = th_shared("models/tinystories-656k");
    static const struct {
        const char *dir;
        lb_bnb_kind kind;
        bool dq;
        double max_rel_rms;
    } cases[] = {{"nf4", LB_BNB_NF4, false, 0.12}, {"nf4dq", LB_BNB_NF4, true, 0.12},
                 {"fp4", LB_BNB_FP4, false, 0.16}, {"int8", LB_BNB_INT8, false, 0.01}};
    lb_safetensors *dense = NULL;
    TH_CHECK_OK(lb_st_open(src, &dense));
    if (!dense) return;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        lb_bnb_quantize_opts o;
        memset(&o, 0, sizeof o);
        o.q.kind = cases[k].kind;
        o.q.double_quant = cases[k].dq;
        o.q.blocksize = 64;
        const char *dir = tmp_path(cases[k].dir);
        int nl = 0;
        TH_CHECK_OK(lb_bnb_quantize_checkpoint(src, dir, &o, &nl));
        TH_CHECK_INT(nl, 14);
        lb_safetensors *st = NULL;
        TH_CHECK_OK(lb_st_open(dir, &st));
        if (!st) continue;
        const char *pre = "model.layers.1.mlp.down_proj";
        const lb_tensor *dw = lb_st_find(dense, "model.layers.1.mlp.down_proj.weight");
        int64_t out = dw->shape[0], in = dw->shape[1];
        float *W = malloc((size_t)(out * in) * 4);
        char nm[200];
#define F(sfx) (snprintf(nm, sizeof nm, "%s.%s", pre, sfx), lb_st_find(st, nm))
        if (cases[k].kind == LB_BNB_INT8) {
            TH_CHECK_OK(lb_bnb_dequantize_int8(pre, F("weight"), F("SCB"), out, in, W));
        } else {
            lb_bnb_4bit_tensors bt = {F("weight"), F("weight.absmax"), F("weight.quant_map"),
                                      F("weight.nested_absmax"), F("weight.nested_quant_map"),
                                      F(cases[k].kind == LB_BNB_NF4 ? "weight.quant_state.bitsandbytes__nf4"
                                                                    : "weight.quant_state.bitsandbytes__fp4")};
            TH_CHECK(bt.weight && bt.weight->type == LB_TYPE_U8 && bt.weight->n_dims == 2 &&
                     bt.weight->shape[0] == out * in / 2 && bt.weight->shape[1] == 1);
            TH_CHECK((bt.nested_absmax != NULL) == cases[k].dq);
            TH_CHECK_OK(lb_bnb_dequantize_4bit(pre, &bt, out, in, W));
        }
#undef F
        double e = 0, r = 0;
        const float *wd = dw->data;
        for (int64_t i = 0; i < out * in; i++) {
            e += (W[i] - wd[i]) * (double)(W[i] - wd[i]);
            r += wd[i] * (double)wd[i];
        }
        double rel = sqrt(e / r);
        TH_CHECK_MSG(rel < cases[k].max_rel_rms, "%s: relative RMS %.4f", cases[k].dir, rel);
        lb_st_close(st);
        /* the whole checkpoint loads through lb_model_load, its linears
         * held natively (4.5 / 9 bits per weight) with exactly the weights
         * of the checked dequantization above (INT8: q * (SCB/127) against
         * (q * SCB)/127, within one f32 rounding) */
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(dir, NULL, &m));
        if (m) {
            const lb_tensor *lt = &m->layers[1].w[LB_LINEAR_DOWN];
            lb_type want_ty = cases[k].kind == LB_BNB_NF4   ? LB_TYPE_NF4_B64
                              : cases[k].kind == LB_BNB_FP4 ? LB_TYPE_FP4_B64
                                                            : LB_TYPE_I8_B32;
            TH_CHECK_MSG(lt->type == want_ty, "%s: loaded as %s", cases[k].dir,
                         lb_type_name(lt->type));
            TH_CHECK(lt->nbytes == (size_t)(out * in) / (want_ty == LB_TYPE_I8_B32 ? 32 : 64) * 36);
            float *Wn = malloc((size_t)(out * in) * 4);
            TH_CHECK_OK(lb_dequantize_row(lt->type, lt->data, Wn, out * in));
            int bad = 0;
            for (int64_t i = 0; i < out * in; i++)
                bad += want_ty == LB_TYPE_I8_B32
                           ? fabsf(Wn[i] - W[i]) > 2e-7f * fabsf(W[i])
                           : memcmp(&Wn[i], &W[i], 4) != 0;
            TH_CHECK_MSG(bad == 0, "%s: %d weights differ from the dequantized checkpoint",
                         cases[k].dir, bad);
            free(Wn);
        }
        lb_model_free(m);
        free(W);
    }
    lb_st_close(dense);
    /* already quantized input, non-empty output */
    lb_bnb_quantize_opts o;
    memset(&o, 0, sizeof o);
    o.q.blocksize = 64;
    TH_CHECK_FAILS(lb_bnb_quantize_checkpoint(tmp_path("nf4"), tmp_path("again"), &o, NULL),
                   LB_ERR_UNSUPPORTED);
    TH_CHECK(lb_bnb_quantize_checkpoint(src, tmp_path("nf4"), &o, NULL) != LB_OK);
}

/* bitsandbytes checkpoint -> GGUF (fallback route, Q8_0 by default): the
 * GGUF model's logits track the checkpoint's (Q8_0 of the dequantized
 * weights: small error) */
static void test_export_gguf(void) {
    static const char *dirs[] = {"nf4dq", "int8"};
    for (int k = 0; k < 2; k++) {
        const char *ck = tmp_path(dirs[k]);
        char out[1100];
        snprintf(out, sizeof out, "%s.gguf", ck);
        lb_export_plan *plan = NULL;
        TH_CHECK_OK(lb_export_gguf(ck, out, NULL, &plan, NULL));
        lb_export_plan_free(plan);
        lb_model *a = NULL, *b = NULL;
        TH_CHECK_OK(lb_model_load(ck, NULL, &a));
        TH_CHECK_OK(lb_model_load(out, NULL, &b));
        lb_model_free(a);
        lb_model_free(b);
    }
}

/* Random weights of a native type: 4-bit codes / int8 codes, scales over
 * a wide range (zero included) */
static uint64_t g_st = 777;
static uint64_t nxt(void) {
    g_st = g_st * 6364136223846793005ull + 1442695040888963407ull;
    return g_st >> 11;
}

/* The NF4 / FP4 / INT8 matmul kernels: every usable variant against a
 * double-precision product of the dequantized weights on awkward sizes
 * (1 block, ragged tiles, a row of 65 / 129 blocks; token counts around
 * the 4-token groups), and the result of a token does not depend on the
 * tile it was computed in (17 tokens at once == one at a time, bit for
 * bit). */
static void test_kernels(void) {
    static const lb_type types[] = {LB_TYPE_NF4_B64, LB_TYPE_FP4_B64, LB_TYPE_I8_B32};
    static const int64_t nrs[] = {1, 7, 33};
    static const int64_t nts[] = {1, 5, 17};
    for (size_t ti = 0; ti < 3; ti++) {
        lb_type ty = types[ti];
        int64_t bl = ty == LB_TYPE_I8_B32 ? 32 : 64;
        const int64_t ns[] = {bl, 3 * bl, (ty == LB_TYPE_I8_B32 ? 129 : 65) * bl};
        for (size_t a = 0; a < 3; a++) {
            int64_t n = ns[a], nr = nrs[a], nt = nts[a], nb = n / bl;
            uint8_t *w = malloc((size_t)(nr * nb) * 36);
            for (int64_t i = 0; i < nr * nb; i++) {
                uint8_t *blk = w + i * 36;
                uint64_t v = nxt();
                float d = (i % 11 == 5) ? 0.0f : ldexpf((float)(v & 1023) / 1024.0f + 0.5f,
                                                        (int)(v >> 10 & 15) - 10);
                memcpy(blk, &d, 4);
                for (int k = 0; k < 32; k++) blk[4 + k] = (uint8_t)nxt();
            }
            float *x = malloc((size_t)(nt * n) * 4), *wd = malloc((size_t)n * 4);
            for (int64_t i = 0; i < nt * n; i++)
                x[i] = (float)((double)nxt() / 9007199254740992.0 * 2.0 - 1.0);
            double *want = calloc((size_t)(nr * nt), sizeof *want),
                   *mag = calloc((size_t)(nr * nt), sizeof *mag);
            for (int64_t r = 0; r < nr; r++) {
                TH_CHECK_OK(lb_dequantize_row(ty, w + r * nb * 36, wd, n));
                for (int64_t t = 0; t < nt; t++)
                    for (int64_t k = 0; k < n; k++) {
                        want[t * nr + r] += (double)wd[k] * x[t * n + k];
                        mag[t * nr + r] += fabs((double)wd[k] * x[t * n + k]);
                    }
            }
            lb_tensor W = {.name = "w", .type = ty, .n_dims = 2, .shape = {nr, n}, .data = w,
                           .nbytes = (size_t)(nr * nb) * 36};
            float *y = malloc((size_t)(nr * nt) * 4), *y1 = malloc((size_t)nr * 4);
            for (int v = 0; v < LB_KV_COUNT; v++) {
                if (!lb_kernels_usable(v)) continue;
                const lb_kernel_table *kt = lb_kernels_table(v);
                TH_CHECK_OK(lb_matmul_table(kt, NULL, &W, x, y, nt));
                double worst = 0;
                for (int64_t i = 0; i < nr * nt; i++)
                    worst = fmax(worst, fabs((double)y[i] - want[i]) / (mag[i] > 0 ? mag[i] : 1));
                TH_CHECK_MSG(worst < 1e-5, "%s %s n=%lld: relative error %.3g", kt->name,
                             lb_type_name(ty), (long long)n, worst);
                int moved = 0;
                for (int64_t t = 0; t < nt; t++) {
                    TH_CHECK_OK(lb_matmul_table(kt, NULL, &W, x + t * n, y1, 1));
                    moved += memcmp(y1, y + t * nr, (size_t)nr * 4) != 0;
                }
                TH_CHECK_MSG(moved == 0, "%s %s n=%lld: %d tokens differ alone vs in a tile",
                             kt->name, lb_type_name(ty), (long long)n, moved);
            }
            free(y);
            free(y1);
            free(w);
            free(x);
            free(wd);
            free(want);
            free(mag);
        }
    }
}

/* The repack of a 4-bit linear into 64-blocks: same weights as the checked
 * dequantization, bit for bit (NF4 plain and double-quantized, FP4,
 * blocksize 128); layouts it cannot hold are refused with
 * LB_ERR_UNSUPPORTED (the loader's cue for F32), hostile input with the
 * same errors as the dequantization. */
static void test_repack(void) {
    enum { RO = 6, RI = 192, RN = RO * RI };
    float w[RN];
    for (int i = 0; i < RN; i++) w[i] = (float)((double)nxt() / 9007199254740992.0 - 0.5);
    static const struct { lb_bnb_kind kind; int bs; } cs[] = {
        {LB_BNB_NF4, 64}, {LB_BNB_FP4, 64}, {LB_BNB_NF4, 128}, {LB_BNB_NF4, 32}};
    for (size_t k = 0; k < 4; k++) {
        int bs = cs[k].bs, nabs = RN / bs;
        uint8_t packed[RN / 2];
        float am[RN / 32];
        TH_CHECK_OK(lb_bnb_quantize_4bit(cs[k].kind, w, RN, bs, packed, am));
        char blob[200];
        int bl = snprintf(blob, sizeof blob, "{\"quant_type\": \"%s\", \"blocksize\": %d, "
                          "\"dtype\": \"float32\", \"shape\": [%d, %d]}",
                          cs[k].kind == LB_BNB_NF4 ? "nf4" : "fp4", bs, RO, RI);
        lb_tensor tw = tens("w", LB_TYPE_U8, RN / 2, packed, RN / 2);
        lb_tensor ta = tens("a", LB_TYPE_F32, nabs, am, (size_t)nabs * 4);
        lb_tensor tq = tens("q", LB_TYPE_F32, 16, lb_bnb_4bit_table(cs[k].kind), 64);
        lb_tensor ts = tens("s", LB_TYPE_U8, bl, blob, (size_t)bl);
        lb_bnb_4bit_tensors bt = {.weight = &tw, .absmax = &ta, .quant_map = &tq, .state = &ts};
        float d1[RN], d2[RN];
        lb_block_bnb4_b64 blk[RN / 64];
        TH_CHECK_OK(lb_bnb_dequantize_4bit("lin", &bt, RO, RI, d1));
        if (bs % 64) {
            TH_CHECK_FAILS(lb_bnb_4bit_to_b64("lin", cs[k].kind, &bt, RO, RI, blk),
                           LB_ERR_UNSUPPORTED);
            TH_CHECK(strstr(lb_last_error(), "lin: not held as 64-blocks: blocksize") != NULL);
            continue;
        }
        TH_CHECK_OK(lb_bnb_4bit_to_b64("lin", cs[k].kind, &bt, RO, RI, blk));
        lb_dequantize_row(cs[k].kind == LB_BNB_NF4 ? LB_TYPE_NF4_B64 : LB_TYPE_FP4_B64, blk, d2,
                          RN);
        TH_CHECK_INT(diff_bytes(d1, d2, sizeof d1), 0);
        /* in_features not a multiple of 64 (same data seen as [12, 96]) */
        bl = snprintf(blob, sizeof blob, "{\"quant_type\": \"%s\", \"blocksize\": %d, "
                      "\"dtype\": \"float32\", \"shape\": [%d, %d]}",
                      cs[k].kind == LB_BNB_NF4 ? "nf4" : "fp4", bs, 2 * RO, RI / 2);
        ts.shape[0] = bl;
        ts.nbytes = (size_t)bl;
        TH_CHECK_FAILS(lb_bnb_4bit_to_b64("lin", cs[k].kind, &bt, 2 * RO, RI / 2, blk),
                       LB_ERR_UNSUPPORTED);
        /* a non-standard quant_map */
        float qm2[16];
        memcpy(qm2, lb_bnb_4bit_table(cs[k].kind), 64);
        qm2[3] *= 1.5f;
        tq.data = qm2;
        TH_CHECK_FAILS(lb_bnb_4bit_to_b64("lin", cs[k].kind, &bt, 2 * RO, RI / 2, blk),
                       LB_ERR_UNSUPPORTED);
        /* hostile: absmax of the wrong length is a format error naming it */
        ta.shape[0] = nabs - 1;
        TH_CHECK_FAILS(lb_bnb_4bit_to_b64("lin", cs[k].kind, &bt, 2 * RO, RI / 2, blk),
                       LB_ERR_FORMAT);
        TH_CHECK(strstr(lb_last_error(), "lin.weight.absmax") != NULL);
    }
    /* INT8: in % 32 refused, SCB of the wrong shape named */
    int8_t q8[4 * 64];
    float scb[4] = {1, 2, 3, 4};
    for (int i = 0; i < 4 * 64; i++) q8[i] = (int8_t)(nxt() & 0xff);
    lb_tensor t8 = tens("w", LB_TYPE_I8, 4, q8, sizeof q8);
    t8.n_dims = 2;
    t8.shape[1] = 64;
    lb_tensor tsb = tens("SCB", LB_TYPE_F32, 4, scb, sizeof scb);
    lb_block_i8_b32 b8[8];
    float f1[4 * 64], f2[4 * 64];
    TH_CHECK_OK(lb_bnb_int8_to_b32("lin8", &t8, &tsb, 4, 64, b8));
    TH_CHECK_OK(lb_bnb_dequantize_int8("lin8", &t8, &tsb, 4, 64, f1));
    lb_dequantize_row(LB_TYPE_I8_B32, b8, f2, 4 * 64);
    int bad = 0;
    for (int i = 0; i < 4 * 64; i++) bad += fabsf(f1[i] - f2[i]) > 2e-7f * fabsf(f1[i]);
    TH_CHECK_INT(bad, 0);
    t8.shape[0] = 8;
    t8.shape[1] = 32;
    TH_CHECK_FAILS(lb_bnb_int8_to_b32("lin8", &t8, &tsb, 8, 32, b8), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "lin8.SCB") != NULL);
    t8.shape[0] = 16;
    t8.shape[1] = 16;
    tsb.shape[0] = 16;
    float scb16[16] = {0};
    tsb.data = scb16;
    TH_CHECK_FAILS(lb_bnb_int8_to_b32("lin8", &t8, &tsb, 16, 16, b8), LB_ERR_UNSUPPORTED);
}

/* Copy checkpoint src to dst with tensor `victim` mutated: mode 0 a 1-D
 * tensor one element short, 1 dropped, 2 the data replaced by `blob`
 * (U8, its length), 3 a blob cut to 7 bytes; config.json copied with
 * `from` replaced by `to` (same length) when given. */
static void rewrite_bnb(const char *src, const char *dst, const char *victim, int mode,
                        const char *blob, const char *from, const char *to) {
    TH_CHECK(mkdir(dst, 0755) == 0);
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/config.json", src);
    snprintf(b, sizeof b, "%s/config.json", dst);
    char *txt = NULL;
    size_t len;
    TH_CHECK_OK(lb_read_file(a, 1 << 20, &txt, &len));
    FILE *fp = fopen(b, "wb");
    if (fp && txt) {
        char *p = from ? strstr(txt, from) : NULL;
        if (p) memcpy(p, to, strlen(to));
        TH_CHECK(!from || p);
        fwrite(txt, 1, len, fp);
    }
    if (fp) fclose(fp);
    free(txt);
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(src, &st));
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_writer_create(&w));
    for (size_t i = 0; st && w && i < lb_st_count(st); i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        int64_t sh[4];
        memcpy(sh, t->shape, sizeof sh);
        const void *data = t->data;
        if (victim && !strcmp(t->name, victim)) {
            if (mode == 0) sh[0] = t->shape[0] - 1;
            if (mode == 1) continue;
            if (mode == 2) {
                data = blob;
                sh[0] = (int64_t)strlen(blob);
            }
            if (mode == 3) sh[0] = 7;
        }
        TH_CHECK_OK(lb_st_writer_add(w, t->name, t->type, t->n_dims, sh, data));
    }
    snprintf(b, sizeof b, "%s/model.safetensors", dst);
    TH_CHECK_OK(lb_st_writer_write_file(w, b));
    lb_st_writer_free(w);
    lb_st_close(st);
}

/* Hostile checkpoints through lb_model_load (the native repack path): each
 * fails with a clear error naming the tensor (or the config value). */
static void test_hostile_checkpoints(void) {
    const char *L = "model.layers.1.mlp.down_proj";
    char v_state[200], v_absmax[200], v_nested[200], v_scb[200], blob[300];
    snprintf(v_state, sizeof v_state, "%s.weight.quant_state.bitsandbytes__nf4", L);
    snprintf(v_absmax, sizeof v_absmax, "%s.weight.absmax", L);
    snprintf(v_nested, sizeof v_nested, "%s.weight.nested_absmax", L);
    snprintf(v_scb, sizeof v_scb, "%s.SCB", L);
    snprintf(blob, sizeof blob, "{\"quant_type\": \"int3\", \"blocksize\": 64, \"dtype\": "
             "\"float32\", \"shape\": [128, 384]}");
    static char want_state[220], want_absmax[220], want_nested[220], want_scb[220];
    snprintf(want_state, sizeof want_state, "%s.weight.quant_state", L);
    snprintf(want_absmax, sizeof want_absmax, "%s.weight.absmax", L);
    snprintf(want_nested, sizeof want_nested, "%s.weight.nested_absmax", L);
    snprintf(want_scb, sizeof want_scb, "%s.SCB", L);
    const struct {
        const char *src, *victim;
        int mode;
        const char *from, *to;
        lb_status want;
        const char *msg, *msg2;
    } cs[] = {
        {"nf4dq", v_state, 3, NULL, NULL, LB_ERR_FORMAT, want_state, "JSON"},
        {"nf4dq", v_state, 2, NULL, NULL, LB_ERR_UNSUPPORTED, want_state, "int3"},
        {"nf4dq", v_absmax, 0, NULL, NULL, LB_ERR_FORMAT, want_absmax, "expected"},
        {"nf4dq", v_nested, 1, NULL, NULL, LB_ERR_NOT_FOUND, want_nested, "missing"},
        {"int8", v_scb, 0, NULL, NULL, LB_ERR_FORMAT, want_scb, "expected"},
        {"nf4", NULL, 0, "\"bnb_4bit_quant_type\":\t\"nf4\"", "\"bnb_4bit_quant_type\":\t\"af4\"",
         LB_ERR_UNSUPPORTED, "af4", "config.json"},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        char dst[64];
        snprintf(dst, sizeof dst, "bnbbad%zu", i);
        rewrite_bnb(tmp_path(cs[i].src), tmp_path(dst), cs[i].victim, cs[i].mode, blob, cs[i].from,
                    cs[i].to);
        lb_model *m = NULL;
        TH_CHECK_FAILS(lb_model_load(tmp_path(dst), NULL, &m), cs[i].want);
        TH_CHECK_MSG(strstr(lb_last_error(), cs[i].msg) && strstr(lb_last_error(), cs[i].msg2),
                     "case %zu: %s", i, lb_last_error());
        lb_model_free(m);
    }
}

int main(void) {
    TH_RUN(test_codec_as_reference);
    TH_RUN(test_qconfig);
    TH_RUN(test_kernels);
    TH_RUN(test_repack);
    if (!lb_is_dir(th_shared("models/tinystories-656k"))) {
        th_report();
        th_skip("../shared models not found");
    }
    TH_RUN(test_checkpoint_round_trip);
    TH_RUN(test_export_gguf);
    TH_RUN(test_hostile_checkpoints);
    return th_report();
}
