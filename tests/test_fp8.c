/*
 * test_fp8 — FP8 weight-only checkpoints (lowbit/fp8.h).
 *
 * Oracles from outside lowbit (tests/data/fp8, make_refs.py with torch
 * 2.14 / transformers 5.12 in the refenv):
 *  - torch's float8_e4m3fn / float8_e5m2 value of every byte, and torch's
 *    .to(float8) rounding of 8192 inputs (every representable value, every
 *    midpoint between neighbours — the ties —, random values over 38
 *    binades);
 *  - the FP8 weights and scales transformers' Fp8Quantize (block 128) and
 *    compressed-tensors' channel strategy compute for tinystories-656k
 *    (FNV-1a 64 per tensor): our checkpoints must hold the same bytes;
 *  - transformers' logits of the block-dequantized model: lowbit's loader
 *    must give them.
 */
#include "th.h"

#include "lowbit/export.h"
#include "lowbit/file.h"
#include "lowbit/gguf.h"
#include "lowbit/gptq.h"
#include "lowbit/quants.h"
#include "lowbit/fp8.h"
#include "lowbit/model.h"
#include "lowbit/safetensors.h"
#include "kernels/kernels_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *tmp_path(const char *name) {
    static char buf[8][1024];
    static int slot;
    char *b = buf[slot++ & 7];
    snprintf(b, sizeof buf[0], "%s/%s", th_tmpdir(), name);
    return b;
}

static uint64_t fnv(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void test_tables(void) {
    static const char *files[2] = {"tests/data/fp8/table_e4m3.f32", "tests/data/fp8/table_e5m2.f32"};
    for (int f = 0; f < 2; f++) {
        size_t n = 0;
        float *ref = th_read_bin(files[f], &n);
        TH_CHECK(ref && n == 1024);
        if (!ref) continue;
        const float *tab = lb_fp8_table((lb_fp8_format)f);
        int bad = 0;
        for (int i = 0; i < 256; i++) {
            bool same = (isnan(ref[i]) && isnan(tab[i])) || (ref[i] == tab[i] && signbit(ref[i]) == signbit(tab[i]));
            if (!same) fprintf(stderr, "    fmt %d byte 0x%02x: %g vs torch %g\n", f, i, (double)tab[i], (double)ref[i]);
            bad += !same;
        }
        TH_CHECK_INT(bad, 0);
        free(ref);
    }
    TH_CHECK(lb_fp8_max(LB_FP8_E4M3) == 448.0f);
    TH_CHECK(lb_fp8_max(LB_FP8_E5M2) == 57344.0f);
}

static void test_encode_as_torch(void) {
    size_t n = 0, n4 = 0, n5 = 0;
    float *x = th_read_bin("tests/data/fp8/enc_in.f32", &n);
    uint8_t *c4 = th_read_bin("tests/data/fp8/enc_e4m3.u8", &n4);
    uint8_t *c5 = th_read_bin("tests/data/fp8/enc_e5m2.u8", &n5);
    TH_CHECK(x && c4 && c5 && n == 4 * 8192 && n4 == 8192 && n5 == 8192);
    if (x && c4 && c5) {
        int bad4 = 0, bad5 = 0;
        for (int i = 0; i < 8192; i++) {
            float a = fminf(fmaxf(x[i], -448.0f), 448.0f);
            float b = fminf(fmaxf(x[i], -57344.0f), 57344.0f);
            uint8_t q4 = lb_f32_to_fp8(a, LB_FP8_E4M3), q5 = lb_f32_to_fp8(b, LB_FP8_E5M2);
            if (q4 != c4[i] && bad4++ < 5)
                fprintf(stderr, "    e4m3(%.9g) = 0x%02x, torch 0x%02x\n", (double)x[i], q4, c4[i]);
            if (q5 != c5[i] && bad5++ < 5)
                fprintf(stderr, "    e5m2(%.9g) = 0x%02x, torch 0x%02x\n", (double)x[i], q5, c5[i]);
        }
        TH_CHECK_INT(bad4, 0);
        TH_CHECK_INT(bad5, 0);
    }
    /* saturation and NaN */
    TH_CHECK_INT(lb_f32_to_fp8(1e9f, LB_FP8_E4M3), 0x7e);
    TH_CHECK_INT(lb_f32_to_fp8(-1e9f, LB_FP8_E4M3), 0xfe);
    TH_CHECK(isnan(lb_fp8_to_f32(lb_f32_to_fp8(NAN, LB_FP8_E4M3), LB_FP8_E4M3)));
    free(x);
    free(c4);
    free(c5);
}

/* our checkpoint holds the bytes torch's reference quantizers compute */
static void check_ckpt(const char *dir, const cJSON *ref, int *n_out) {
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(dir, &st));
    int n = 0, eq = 0;
    for (const cJSON *e = ref ? ref->child : NULL; st && e; e = e->next) {
        const lb_tensor *t = lb_st_find(st, e->string);
        TH_CHECK_MSG(t != NULL, "%s missing", e->string);
        if (!t) continue;
        char h[20];
        snprintf(h, sizeof h, "%016llx", (unsigned long long)fnv(t->data, t->nbytes));
        bool same = !strcmp(h, e->valuestring);
        TH_CHECK_MSG(same, "%s: %s differs from torch's", dir, e->string);
        n++;
        eq += same;
    }
    lb_st_close(st);
    *n_out = eq;
    TH_CHECK_INT(n, 28);
}

static float *logits_of(const char *path, const int32_t *ids, int n) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(path, NULL, &m));
    if (!m) return NULL;
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = n + 8;
    cp.n_threads = 2;
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    float *lg = NULL;
    if (ctx) {
        lg = malloc((size_t)n * (size_t)m->config.vocab_size * sizeof *lg);
        TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, lg, LB_LOGITS_ALL));
    }
    lb_context_free(ctx);
    lb_model_free(m);
    return lg;
}

static void test_checkpoints_as_reference(void) {
    char *txt = NULL;
    size_t len = 0;
    TH_CHECK_OK(lb_read_file("tests/data/fp8/ckpt.json", 1 << 20, &txt, &len));
    cJSON *ref = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    const char *src = th_shared("models/tinystories-656k");
    lb_fp8_quantize_opts o;
    memset(&o, 0, sizeof o);
    lb_fp8_qconfig_default(&o.q, false);
    o.rule = LB_FP8_RULE_AMAX; /* the reference tools' rule */
    int nl = 0, eq = 0;
    TH_CHECK_OK(lb_fp8_quantize_checkpoint(src, tmp_path("block"), &o, &nl));
    TH_CHECK_INT(nl, 14);
    check_ckpt(tmp_path("block"), cJSON_GetObjectItem(ref, "block"), &eq);
    fprintf(stderr, "  block 128: %d/28 weights and scales byte-identical to transformers' Fp8Quantize\n", eq);
    TH_CHECK_INT(eq, 28);
    lb_fp8_qconfig_default(&o.q, true);
    TH_CHECK_OK(lb_fp8_quantize_checkpoint(src, tmp_path("channel"), &o, &nl));
    check_ckpt(tmp_path("channel"), cJSON_GetObjectItem(ref, "channel"), &eq);
    fprintf(stderr, "  channel: %d/28 weights and scales byte-identical to compressed-tensors'\n", eq);
    TH_CHECK_INT(eq, 28);
    cJSON_Delete(ref);
    /* the configs say what transformers / llm-compressor write */
    char p[700];
    snprintf(p, sizeof p, "%s/config.json", tmp_path("block"));
    TH_CHECK_OK(lb_read_file(p, 1 << 20, &txt, &len));
    cJSON *cfg = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    const cJSON *qc = cJSON_GetObjectItem(cfg, "quantization_config");
    TH_CHECK_STR(cJSON_GetObjectItem(qc, "quant_method")->valuestring, "fp8");
    TH_CHECK_STR(cJSON_GetObjectItem(qc, "fmt")->valuestring, "e4m3");
    TH_CHECK_INT(cJSON_GetArrayItem(cJSON_GetObjectItem(qc, "weight_block_size"), 1)->valueint, 128);
    cJSON_Delete(cfg);
    /* loads; transformers' logits of the dequantized model */
    size_t nb = 0, lb = 0;
    int32_t *ids = th_read_bin("tests/data/export_hf/ts656k_q4_0.ids.i32", &nb);
    float *want = th_read_bin("tests/data/fp8/block_logits.f32", &lb);
    int n = (int)(nb / 4);
    TH_CHECK(ids && want && lb == (size_t)n * 2048 * 4);
    if (ids && want) {
        float *got = logits_of(tmp_path("block"), ids, n);
        double d = 0;
        for (size_t i = 0; got && i < (size_t)n * 2048; i++) d = fmax(d, fabs((double)got[i] - want[i]));
        fprintf(stderr, "  block FP8 checkpoint: max |logit diff| vs transformers %.3g\n", d);
        TH_CHECK(got && d <= 1e-4);
        free(got);
        /* channel and e5m2 load too */
        got = logits_of(tmp_path("channel"), ids, n);
        TH_CHECK(got != NULL);
        free(got);
    }
    free(ids);
    free(want);
}

static void test_qconfig_parse(void) {
    lb_fp8_qconfig q;
    bool is;
    /* Qwen3-8B-FP8 / DeepSeek-V3 */
    const char *a = "{\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", \"quant_method\": "
                    "\"fp8\", \"weight_block_size\": [128, 128]}";
    TH_CHECK_OK(lb_fp8_qconfig_parse(a, strlen(a), "a", &q, &is));
    TH_CHECK(is && q.layout == LB_FP8_SCALE_BLOCK && q.block_n == 128 && q.block_k == 128);
    TH_CHECK_STR(q.scale_suffix, "weight_scale_inv");
    /* llm-compressor FP8_DYNAMIC (weights channel, activations dynamic per token) */
    const char *b =
        "{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", "
        "\"config_groups\": {\"group_0\": {\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 8, "
        "\"type\": \"float\", \"symmetric\": true, \"strategy\": \"channel\", \"dynamic\": false}, "
        "\"input_activations\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"token\", "
        "\"dynamic\": true}}}, \"ignore\": [\"lm_head\"]}";
    TH_CHECK_OK(lb_fp8_qconfig_parse(b, strlen(b), "b", &q, &is));
    TH_CHECK(is && q.layout == LB_FP8_SCALE_CHANNEL);
    TH_CHECK_STR(q.scale_suffix, "weight_scale");
    /* int-quantized compressed-tensors and gptq: not FP8 */
    const char *c = "{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\"}";
    TH_CHECK_OK(lb_fp8_qconfig_parse(c, strlen(c), "c", &q, &is));
    TH_CHECK(!is);
    const char *d = "{\"quant_method\": \"gptq\", \"bits\": 4}";
    TH_CHECK_OK(lb_fp8_qconfig_parse(d, strlen(d), "d", &q, &is));
    TH_CHECK(!is);
    /* hostile */
    const char *e = "{\"quant_method\": \"fp8\", \"fmt\": \"e3m4\"}";
    TH_CHECK_FAILS(lb_fp8_qconfig_parse(e, strlen(e), "cfgE", &q, &is), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "e3m4") && strstr(lb_last_error(), "cfgE"));
    const char *f = "{\"quant_method\": \"fp8\", \"weight_block_size\": [0, 1e12]}";
    TH_CHECK_FAILS(lb_fp8_qconfig_parse(f, strlen(f), "f", &q, &is), LB_ERR_FORMAT);
    const char *g = "{\"quant_method\": \"fp8\", \"weight_block_size\": 128}";
    TH_CHECK_FAILS(lb_fp8_qconfig_parse(g, strlen(g), "g", &q, &is), LB_ERR_FORMAT);
    TH_CHECK_FAILS(lb_fp8_qconfig_parse("[1", 2, "h", &q, &is), LB_ERR_FORMAT);
}

/* Rewrite the block checkpoint with one scale changed (shape or value);
 * loading must fail naming that tensor. */
static void rewrite(const char *src, const char *dst, const char *victim, int mode) {
    TH_CHECK(mkdir(dst, 0755) == 0);
    char a[800], b[800];
    snprintf(a, sizeof a, "%s/config.json", src);
    snprintf(b, sizeof b, "%s/config.json", dst);
    char *txt = NULL;
    size_t len;
    TH_CHECK_OK(lb_read_file(a, 1 << 20, &txt, &len));
    FILE *fp = fopen(b, "wb");
    if (fp && txt) {
        if (mode == 3) { /* unknown fmt */
            char *p = strstr(txt, "\"e4m3\"");
            if (p) memcpy(p, "\"e3m4\"", 6);
        }
        fwrite(txt, 1, len, fp);
    }
    if (fp) fclose(fp);
    free(txt);
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(src, &st));
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_writer_create(&w));
    static const float nan_scale[3] = {NAN, 1, 1};
    for (size_t i = 0; st && w && i < lb_st_count(st); i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        int64_t sh[4];
        memcpy(sh, t->shape, sizeof sh);
        const void *data = t->data;
        if (!strcmp(t->name, victim)) {
            if (mode == 0) sh[1] = t->shape[1] - 1; /* wrong shape */
            if (mode == 1) continue;                /* missing */
            if (mode == 2) data = nan_scale;        /* not finite */
        }
        TH_CHECK_OK(lb_st_writer_add(w, t->name, t->type, t->n_dims, sh, data));
    }
    snprintf(b, sizeof b, "%s/model.safetensors", dst);
    TH_CHECK_OK(lb_st_writer_write_file(w, b));
    lb_st_writer_free(w);
    lb_st_close(st);
}

static void test_hostile_checkpoints(void) {
    const char *src = tmp_path("block"); /* from test_checkpoints_as_reference */
    const char *victim = "model.layers.1.mlp.down_proj.weight_scale_inv"; /* [1, 3] */
    static const struct {
        int mode;
        lb_status want;
        const char *msg;
    } cases[] = {{0, LB_ERR_FORMAT, "expected [1, 3]"},
                 {1, LB_ERR_NOT_FOUND, "missing"},
                 {2, LB_ERR_FORMAT, "not finite"},
                 {3, LB_ERR_UNSUPPORTED, "e3m4"}};
    for (size_t i = 0; i < 4; i++) {
        char dst[64];
        snprintf(dst, sizeof dst, "bad%zu", i);
        rewrite(src, tmp_path(dst), victim, cases[i].mode);
        lb_model *m = NULL;
        TH_CHECK_FAILS(lb_model_load(tmp_path(dst), NULL, &m), cases[i].want);
        TH_CHECK_MSG(strstr(lb_last_error(), cases[i].msg) != NULL, "case %zu: %s", i, lb_last_error());
        if (cases[i].mode != 3)
            TH_CHECK_MSG(strstr(lb_last_error(), "model.layers.1.mlp.down_proj") != NULL,
                         "case %zu names the tensor: %s", i, lb_last_error());
        lb_model_free(m);
    }
    /* a non-empty output directory and a quantized input are refused */
    lb_fp8_quantize_opts o;
    memset(&o, 0, sizeof o);
    lb_fp8_qconfig_default(&o.q, false);
    TH_CHECK_FAILS(lb_fp8_quantize_checkpoint(th_shared("models/tinystories-656k"), src, &o, NULL),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_fp8_quantize_checkpoint(src, tmp_path("again"), &o, NULL), LB_ERR_UNSUPPORTED);
    /* scale shape checks of the API */
    lb_fp8_qconfig q;
    lb_fp8_qconfig_default(&q, false);
    uint8_t codes[4] = {0};
    float sc[2] = {1, 1};
    lb_tensor w = {.name = "w", .type = LB_TYPE_F8_E4M3, .n_dims = 2, .shape = {2, 2}, .data = codes, .nbytes = 4};
    lb_tensor s = {.name = "s", .type = LB_TYPE_F32, .n_dims = 2, .shape = {1, 2}, .data = sc, .nbytes = 8};
    TH_CHECK_FAILS(lb_fp8_check(&q, "x.proj", &w, &s), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "x.proj.weight_scale_inv") != NULL);
    s.shape[1] = 1;
    TH_CHECK_OK(lb_fp8_check(&q, "x.proj", &w, &s));
    w.type = LB_TYPE_F8_E5M2;
    TH_CHECK_FAILS(lb_fp8_check(&q, "x.proj", &w, &s), LB_ERR_UNSUPPORTED);
}

/* FP8 checkpoint -> GGUF: Q8_0 by default, the error that adds stated;
 * any K-quant through the fallback route. */
static void test_export_gguf(void) {
    const char *ck = tmp_path("block");
    char out[700];
    snprintf(out, sizeof out, "%s.gguf", ck);
    lb_export_plan *plan = NULL;
    TH_CHECK_OK(lb_export_gguf(ck, out, NULL, &plan, NULL));
    if (plan) {
        int n_q8 = 0;
        for (size_t i = 0; i < plan->n_tensors; i++)
            n_q8 += plan->tensors[i].type == LB_TYPE_Q8_0 && plan->tensors[i].src_type == LB_TYPE_F8_E4M3;
        TH_CHECK_INT(n_q8, 14);
        TH_CHECK_INT(plan->file_type, LB_FTYPE_MOSTLY_Q8_0);
    }
    lb_export_plan_free(plan);
    /* every Q8_0 weight within Q8_0's rounding (half a step of its block's
     * max/127, plus the fp16 rounding of d) of the FP8 weight */
    lb_model *fm = NULL;
    lb_gguf *g = NULL;
    TH_CHECK_OK(lb_model_load(ck, NULL, &fm));
    TH_CHECK_OK(lb_gguf_open(out, &g));
    if (fm && g) {
        double se = 0, sw = 0, worst = 0;
        for (int L = 0; L < 2; L++) {
            /* down_proj: not permuted */
            char nm[64];
            snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight", L);
            lb_tensor gt;
            TH_CHECK_OK(lb_gguf_get_tensor(g, nm, &gt));
            const lb_tensor *ft = &fm->layers[L].w[LB_LINEAR_DOWN];
            int64_t rows = ft->shape[0], cols = ft->shape[1];
            float *row = malloc((size_t)cols * sizeof *row), *w = malloc((size_t)cols * sizeof *w);
            TH_CHECK_INT(ft->type, LB_TYPE_F8_E4M3_B32); /* loaded natively */
            size_t frb = 0;
            TH_CHECK(lb_row_size(ft->type, cols, &frb));
            for (int64_t r = 0; row && w && r < rows; r++) {
                TH_CHECK_OK(lb_dequantize_row(LB_TYPE_Q8_0, (const uint8_t *)gt.data + r * (cols / 32) * 34, row, cols));
                TH_CHECK_OK(lb_dequantize_row(ft->type, (const uint8_t *)ft->data + (size_t)r * frb, w, cols));
                for (int64_t b = 0; b < cols / 32; b++) {
                    float amax = 0;
                    for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(w[b * 32 + k]));
                    for (int k = 0; k < 32; k++) {
                        double e = fabs((double)row[b * 32 + k] - w[b * 32 + k]);
                        se += e * e;
                        sw += (double)w[b * 32 + k] * w[b * 32 + k];
                        if (amax > 0) worst = fmax(worst, e / (amax / 127.0));
                    }
                }
            }
            free(row);
            free(w);
        }
        fprintf(stderr, "  FP8 block -> GGUF Q8_0: relative RMS error %.3g, worst |error| %.3f of a "
                        "Q8_0 step\n", sqrt(se / sw), worst);
        TH_CHECK(worst <= 0.5625 + 1e-6);
        TH_CHECK(sqrt(se / sw) < 0.01);
    }
    lb_gguf_close(g);
    lb_model_free(fm);
    /* K-quants through the fallback route */
    lb_export_opts o;
    lb_export_opts_default(&o);
    o.qtype = "Q4_K_M";
    snprintf(out, sizeof out, "%s-q4km.gguf", ck);
    TH_CHECK_OK(lb_export_gguf(ck, out, &o, NULL, NULL));
    lb_model *km = NULL;
    TH_CHECK_OK(lb_model_load(out, NULL, &km));
    lb_model_free(km);
    /* a missing scale is named */
    snprintf(out, sizeof out, "%s.gguf", tmp_path("bad1"));
    TH_CHECK_FAILS(lb_export_gguf(tmp_path("bad1"), out, NULL, NULL, NULL), LB_ERR_NOT_FOUND);
    TH_CHECK(strstr(lb_last_error(), "model.layers.1.mlp.down_proj.weight_scale_inv") != NULL);
}

/* The FP8 matmul kernels: every usable variant against a double-precision
 * product of the dequantized weights, on awkward sizes (ragged tiles, a
 * row of 129 blocks), including the E4M3 extremes and NaN-free codes. */
static void test_kernels(void) {
    static const int64_t ns[] = {32, 96, 4128};
    static const int64_t nrs[] = {1, 7, 33};
    static const int64_t nts[] = {1, 3, 17};
    uint64_t st = 12345;
    for (size_t a = 0; a < 3; a++) {
        int64_t n = ns[a], nr = nrs[a], nt = nts[a];
        lb_block_f8_b32 *w = malloc((size_t)nr * (size_t)(n / 32) * sizeof *w);
        float *x = malloc((size_t)nt * (size_t)n * sizeof *x);
        float *wd = malloc((size_t)n * sizeof *wd);
        double *want = calloc((size_t)nr * (size_t)nt, sizeof *want);
        for (int64_t i = 0; i < nr * (n / 32); i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            float d = ldexpf((float)(st >> 40 & 1023) / 1024.0f + 0.5f, (int)(st >> 50 & 15) - 12);
            memcpy(&w[i].d, &d, 4);
            for (int k = 0; k < 32; k++) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                uint8_t q = (uint8_t)(st >> 56);
                if ((q & 0x7f) == 0x7f) q = 0x7e; /* no NaN codes */
                w[i].qs[k] = q;
            }
        }
        for (int64_t i = 0; i < nt * n; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((double)(st >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        }
        for (int64_t r = 0; r < nr; r++) {
            lb_dequantize_row_f8_b32(w + r * (n / 32), wd, n);
            for (int64_t t = 0; t < nt; t++) {
                double acc = 0, mag = 0;
                for (int64_t k = 0; k < n; k++) {
                    acc += (double)wd[k] * x[t * n + k];
                    mag += fabs((double)wd[k] * x[t * n + k]);
                }
                want[t * nr + r] = acc;
                (void)mag;
            }
        }
        lb_tensor W = {.name = "w", .type = LB_TYPE_F8_E4M3_B32, .n_dims = 2, .shape = {nr, n},
                       .data = w, .nbytes = (size_t)nr * (size_t)(n / 32) * sizeof *w};
        for (int v = 0; v < LB_KV_COUNT; v++) {
            if (!lb_kernels_usable(v)) continue;
            const lb_kernel_table *kt = lb_kernels_table(v);
            float *y = malloc((size_t)nr * (size_t)nt * sizeof *y);
            TH_CHECK_OK(lb_matmul_table(kt, NULL, &W, x, y, nt));
            double worst = 0;
            for (int64_t i = 0; i < nr * nt; i++) {
                /* |w| <= 448 * d, |x| <= 1: relative to the sum of |terms| */
                double scale = 0;
                int64_t r = i % nr, t = i / nr;
                lb_dequantize_row_f8_b32(w + r * (n / 32), wd, n);
                for (int64_t k = 0; k < n; k++) scale += fabs((double)wd[k] * x[t * n + k]);
                double e = fabs((double)y[i] - want[i]) / (scale > 0 ? scale : 1);
                worst = fmax(worst, e);
            }
            TH_CHECK_MSG(worst < 1e-5, "%s n=%lld: relative error %.3g", kt->name, (long long)n, worst);
            free(y);
        }
        free(w);
        free(x);
        free(wd);
        free(want);
    }
    /* every byte decodes to the table's value in every variant (the SIMD
     * kernels decode arithmetically): one row of the 256 codes, d = 1,
     * (NaN codes 0x7f/0xff replaced by 0: 0 * NaN would poison every sum)
     * times the 256 one-hot activations; the NaN codes alone give NaN; and a token's
     * result does not depend on its tile (all 256 at once == one alone) */
    lb_block_f8_b32 row[8];
    const float one = 1.0f;
    for (int i = 0; i < 256; i++) row[i / 32].qs[i % 32] = (i & 0x7f) == 0x7f ? 0 : (uint8_t)i;
    for (int b = 0; b < 8; b++) memcpy(&row[b].d, &one, 4);
    float *eye = calloc(256 * 256, sizeof *eye), y[256], y1;
    for (int i = 0; i < 256; i++) eye[i * 256 + i] = 1.0f;
    lb_tensor R = {.name = "r", .type = LB_TYPE_F8_E4M3_B32, .n_dims = 2, .shape = {1, 256},
                   .data = row, .nbytes = sizeof row};
    const float *tab = lb_fp8_table(LB_FP8_E4M3);
    for (int v = 0; v < LB_KV_COUNT; v++) {
        if (!lb_kernels_usable(v)) continue;
        const lb_kernel_table *kt = lb_kernels_table(v);
        TH_CHECK_OK(lb_matmul_table(kt, NULL, &R, eye, y, 256));
        int bad = 0, moved = 0;
        for (int i = 0; i < 256; i++) {
            bad += y[i] != ((i & 0x7f) == 0x7f ? 0.0f : tab[i]);
            TH_CHECK_OK(lb_matmul_table(kt, NULL, &R, eye + i * 256, &y1, 1));
            moved += memcmp(&y1, &y[i], 4) != 0;
        }
        TH_CHECK_MSG(bad == 0, "%s: %d E4M3 codes decode differently from the table", kt->name,
                     bad);
        TH_CHECK_MSG(moved == 0, "%s: %d tokens differ alone vs in a tile", kt->name, moved);
        row[3].qs[31] = 0x7f; /* element 127 */
        TH_CHECK_OK(lb_matmul_table(kt, NULL, &R, eye + 5 * 256, &y1, 1));
        TH_CHECK_MSG(isnan(y1), "%s: NaN code 0x7f gives %g", kt->name, y1);
        row[3].qs[31] = 0xff;
        TH_CHECK_OK(lb_matmul_table(kt, NULL, &R, eye + 5 * 256, &y1, 1));
        TH_CHECK_MSG(isnan(y1), "%s: NaN code 0xff gives %g", kt->name, y1);
        row[3].qs[31] = 0;
    }
    free(eye);
}

/* The MSE scale rule: on every layout and both formats, each group's
 * squared error is at most the amax rule's (f = 1 is a candidate), the
 * total is lower on gaussian-like weights with outliers, and the codes
 * decode with the stored scales (the reader's W = q * scale) to the
 * errors measured. */
static void test_mse_rule(void) {
    enum { O = 200, I = 300 };
    float *W = malloc(sizeof(float) * O * I);
    uint64_t st = 99;
    for (int i = 0; i < O * I; i++) {
        double u = 0;
        for (int k = 0; k < 4; k++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            u += (double)(st >> 11) / 9007199254740992.0 - 0.5;
        }
        W[i] = (float)(u * 0.05 * ((i % 997) == 3 ? 8 : 1));
    }
    uint8_t *c1 = malloc(O * I), *c2 = malloc(O * I);
    float s1[O * 4], s2[O * 4];
    for (int fm = 0; fm < 2; fm++)
        for (int lay = 0; lay < 3; lay++) {
            lb_fp8_qconfig q;
            lb_fp8_qconfig_default(&q, lay != 0);
            q.fmt = fm ? LB_FP8_E5M2 : LB_FP8_E4M3;
            if (lay == 0) q.block_n = q.block_k = 128;
            if (lay == 2) q.layout = LB_FP8_SCALE_TENSOR;
            TH_CHECK_OK(lb_fp8_quantize_rule(&q, LB_FP8_RULE_AMAX, W, O, I, c1, s1));
            TH_CHECK_OK(lb_fp8_quantize_rule(&q, LB_FP8_RULE_MSE, W, O, I, c2, s2));
            { /* codes NULL: the same scales alone */
                float s3[O * 4];
                const int ns = lay == 0 ? 2 * 3 : lay == 1 ? O : 1;
                TH_CHECK_OK(lb_fp8_quantize_rule(&q, LB_FP8_RULE_MSE, W, O, I, NULL, s3));
                TH_CHECK(!memcmp(s3, s2, (size_t)ns * sizeof(float)));
            }
            const float *tab = lb_fp8_table(q.fmt);
            /* per-group errors through the reader's formula */
            double e1g[O] = {0}, e2g[O] = {0}, e1 = 0, e2 = 0;
            for (int r = 0; r < O; r++)
                for (int k = 0; k < I; k++) {
                    int g = lay == 0 ? (r / 128) * 3 + k / 128 : lay == 1 ? r : 0;
                    double d1 = W[r * I + k] - tab[c1[r * I + k]] * s1[g];
                    double d2 = W[r * I + k] - tab[c2[r * I + k]] * s2[g];
                    e1g[g] += d1 * d1;
                    e2g[g] += d2 * d2;
                    e1 += d1 * d1;
                    e2 += d2 * d2;
                }
            int worse = 0;
            for (int g = 0; g < O; g++) worse += e2g[g] > e1g[g] * (1 + 1e-9);
            TH_CHECK_MSG(worse == 0, "fmt %d layout %d: %d groups worse under MSE", fm, lay, worse);
            TH_CHECK_MSG(e2 < e1, "fmt %d layout %d: MSE rule error %.6g, amax %.6g", fm, lay, e2, e1);
            if (lay == 0 && fm == 0)
                fprintf(stderr, "  E4M3 block 128: squared error MSE rule / amax rule = %.4f\n", e2 / e1);
        }
    lb_fp8_qconfig q;
    lb_fp8_qconfig_default(&q, false);
    TH_CHECK_FAILS(lb_fp8_quantize_rule(&q, (lb_fp8_scale_rule)7, W, O, I, c1, s1),
                   LB_ERR_INVALID_ARG);
    free(W);
    free(c1);
    free(c2);
}

/* GPTQ onto the FP8 grid (lb_gptq_fp8_grid) against a float64 brute force
 * written from the GPTQ paper's rule (Frantar et al. 2022, Algorithm 1
 * without the lazy batches, which change only the order of float sums):
 * columns in order (desc_act: by decreasing H[c,c]); U the upper Cholesky
 * factor of (H + damp I)^-1, damp = 0.01 mean(diag H); per column q = s x
 * the table value nearest to w / s (a search over all 255 finite codes),
 * err = (w - q) / U[c,c], w[c+1:] -= err U[c, c+1:]. s: the group's fixed
 * scale, groups by ORIGINAL column. Shapes not multiples of the groups. */
static void chol_upper_inv(const double *H, int n, double *U) {
    /* A = H^-1 (Gauss-Jordan, th.h), then A = U^T U (U upper) */
    double *A = malloc(sizeof(double) * (size_t)n * (size_t)n);
    th_inv64(H, A, n);
    for (int i = 0; i < n * n; i++) U[i] = 0;
    for (int i = 0; i < n; i++) /* row i of U */
        for (int j = i; j < n; j++) {
            double a = A[i * n + j];
            for (int k = 0; k < i; k++) a -= U[k * n + i] * U[k * n + j];
            U[i * n + j] = j == i ? sqrt(a) : a / U[i * n + i];
        }
    free(A);
}

static int nearest_code(double x, const float *tab) {
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c < 256; c++) {
        if (!isfinite(tab[c])) continue;
        double d = fabs((double)tab[c] - x);
        if (d < bd) bd = d, best = c;
    }
    return best;
}

static void test_gptq_fp8_grid(void) {
    enum { O = 37, I = 80, N = 300, BN = 16, BK = 32 };
    const int nbn = (O + BN - 1) / BN, nbk = (I + BK - 1) / BK;
    float *W = malloc(sizeof(float) * O * I), *X = malloc(sizeof(float) * N * I);
    float *H = malloc(sizeof(float) * I * I), sc[3 * 3];
    double *Hd = malloc(sizeof(double) * I * I), *U = malloc(sizeof(double) * I * I);
    double *w = malloc(sizeof(double) * I);
    uint64_t st = 7;
#define U01() (st = st * 6364136223846793005ull + 1442695040888963407ull, \
               (double)(st >> 11) / 9007199254740992.0)
    for (int i = 0; i < O * I; i++) W[i] = (float)((U01() - 0.5) * (1 + 3 * ((i * 7) % 5 == 0)));
    for (int t = 0; t < N; t++) /* correlated inputs, column scales 0.5 .. 2 */
        for (int j = 0; j < I; j++)
            X[t * I + j] = (float)((U01() - 0.5) + (j ? 0.8 * X[t * I + j - 1] : 0.0));
    for (int j = 0; j < I; j++)
        for (int t = 0; t < N; t++) X[t * I + j] *= (float)(0.5 + 1.5 * j / I);
    for (int a = 0; a < I; a++)
        for (int b = 0; b < I; b++) {
            double h = 0;
            for (int t = 0; t < N; t++) h += (double)X[t * I + a] * X[t * I + b];
            H[a * I + b] = (float)(2.0 * h / N);
        }
    for (int g = 0; g < nbn * nbk; g++) sc[g] = (float)(0.004 + 0.001 * g); /* |w| / s up to ~1000: clamps too */
    const float *tab = lb_fp8_table(LB_FP8_E4M3);
    for (int act = 0; act < 2; act++)
        for (int bs = 0; bs < 2; bs++) {
            lb_gptq_fp8_grid g8 = {.fmt = 0, .block_n = BN, .block_k = BK, .scales = sc};
            lb_gptq_options o;
            lb_gptq_options_default(&o);
            o.desc_act = act;
            o.blocksize = bs ? 32 : 128;
            o.fp8 = &g8;
            lb_gptq_result res;
            TH_CHECK_OK(lb_gptq_quantize(W, O, I, H, &o, &res));
            /* the reference: permuted H, damped, U */
            int perm[I];
            for (int j = 0; j < I; j++) perm[j] = j;
            for (int a = 0; act && a < I; a++) /* stable sort by decreasing H[c,c] */
                for (int b = a + 1; b < I; b++)
                    if (H[perm[b] * I + perm[b]] > H[perm[a] * I + perm[a]]) {
                        int t = perm[a];
                        perm[a] = perm[b];
                        perm[b] = t;
                        /* keep ascending index among equal values: none here */
                    }
            double mean = 0;
            for (int j = 0; j < I; j++) mean += H[j * I + j];
            mean /= I;
            for (int a = 0; a < I; a++)
                for (int b = 0; b < I; b++)
                    Hd[a * I + b] = H[perm[a] * I + perm[b]] + (a == b ? 0.01 * mean : 0.0);
            chol_upper_inv(Hd, I, U);
            int same = 0, same_rtn = 0;
            double loss = 0, loss_ref = 0, loss_rtn = 0;
            for (int r = 0; r < O; r++) {
                for (int k = 0; k < I; k++) w[k] = W[r * I + perm[k]];
                double dq[I], dref[I], drtn[I];
                for (int k = 0; k < I; k++) {
                    const int oc = perm[k];
                    const double s = sc[(r / BN) * nbk + oc / BK];
                    const int cref = nearest_code(w[k] / s, tab);
                    const double q = tab[cref] * s;
                    const double err = (w[k] - q) / U[k * I + k];
                    for (int j = k + 1; j < I; j++) w[j] -= err * U[k * I + j];
                    const int c = res.codes[r * I + oc];
                    const int crtn = nearest_code(W[r * I + oc] / s, tab);
                    same += c == cref;
                    same_rtn += c == crtn;
                    TH_CHECK(res.W_deq[r * I + oc] == tab[c] * (float)s);
                    dq[oc] = W[r * I + oc] - res.W_deq[r * I + oc];
                    dref[oc] = W[r * I + oc] - q;
                    drtn[oc] = W[r * I + oc] - tab[crtn] * s;
                }
                for (int a = 0; a < I; a++) /* (W - Q) H (W - Q)^T of the row */
                    for (int b = 0; b < I; b++) {
                        loss += dq[a] * H[a * I + b] * dq[b];
                        loss_ref += dref[a] * H[a * I + b] * dref[b];
                        loss_rtn += drtn[a] * H[a * I + b] * drtn[b];
                    }
            }
            TH_CHECK_MSG(same >= O * I * 99 / 100, "desc_act %d bs %d: %d of %d codes as the "
                         "float64 brute force", act, bs, same, O * I);
            TH_CHECK_MSG(fabs(loss / loss_ref - 1) < 0.01 && loss < 0.5 * loss_rtn,
                         "desc_act %d bs %d: output error %.6g, brute force %.6g, RTN %.6g", act,
                         bs, loss, loss_ref, loss_rtn);
            if (!act && !bs)
                fprintf(stderr, "  GPTQ-FP8 vs float64: %d/%d codes equal (%d as RTN), output "
                        "error %.4g / %.4g, RTN %.4g\n", same, O * I, same_rtn, loss, loss_ref,
                        loss_rtn);
            lb_gptq_result_free(&res);
        }
    /* a diagonal H propagates nothing: the codes are RTN's */
    float *Hdiag = calloc((size_t)I * I, sizeof *Hdiag);
    for (int j = 0; j < I; j++) Hdiag[j * I + j] = 1.0f + (float)j;
    lb_gptq_fp8_grid g8 = {.fmt = 0, .block_n = BN, .block_k = BK, .scales = sc};
    lb_gptq_options o;
    lb_gptq_options_default(&o);
    o.fp8 = &g8;
    lb_gptq_result res;
    TH_CHECK_OK(lb_gptq_quantize(W, O, I, Hdiag, &o, &res));
    int diff = 0;
    for (int r = 0; r < O; r++)
        for (int k = 0; k < I; k++)
            diff += res.codes[r * I + k] !=
                    nearest_code((double)W[r * I + k] / sc[(r / BN) * nbk + k / BK], tab);
    TH_CHECK_MSG(diff == 0, "diagonal H: %d codes differ from RTN", diff);
    lb_gptq_result_free(&res);
    /* bad grids */
    sc[4] = 0.0f;
    TH_CHECK_FAILS(lb_gptq_quantize(W, O, I, Hdiag, &o, &res), LB_ERR_INVALID_ARG);
    g8.block_k = 0;
    TH_CHECK_FAILS(lb_gptq_quantize(W, O, I, Hdiag, &o, &res), LB_ERR_INVALID_ARG);
#undef U01
    free(Hdiag);
    free(W);
    free(X);
    free(H);
    free(Hd);
    free(U);
    free(w);
}

int main(void) {
    TH_RUN(test_tables);
    TH_RUN(test_mse_rule);
    TH_RUN(test_gptq_fp8_grid);
    TH_RUN(test_encode_as_torch);
    TH_RUN(test_qconfig_parse);
    TH_RUN(test_kernels);
    if (!lb_is_dir(th_shared("models/tinystories-656k"))) {
        th_report();
        th_skip("../shared models not found");
    }
    TH_RUN(test_checkpoints_as_reference);
    TH_RUN(test_hostile_checkpoints);
    TH_RUN(test_export_gguf);
    return th_report();
}
