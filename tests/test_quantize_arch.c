/*
 * test_quantize_arch.c — quantization of the issue-13 architectures
 * (tests/data/arch random checkpoints: Gemma 2/3, Phi-3 with and without
 * longrope, Qwen3-MoE, Qwen2-MoE, Mixtral, and the MoE models with dense
 * layers):
 *  - RTN checkpoint (lb_quantize_model) reloaded by the GPTQ loader gives
 *    the logits of the same quantization in memory
 *    (lb_quantize_model_inplace; the checkpoint rounds scales to f16);
 *    module names as transformers / vLLM expect (per expert,
 *    block_sparse_moe.experts.E.w1 for Mixtral, fused qkv_proj /
 *    gate_up_proj for Phi-3, shared_expert.* for Qwen2-MoE), routers dense;
 *  - GPTQ expert coverage: ALL gives every expert's Hessians every
 *    sequence; ROUTED counts the routed tokens per expert (summing to
 *    tokens x top-k over the experts of a layer) and falls back to RTN
 *    below moe_min_tokens, reported per expert;
 *  - AWQ accepted on these layouts; a checkpoint whose config contradicts
 *    its experts (GPTAQ / QEP on MoE layers: test_moe_gptaq.c).
 */
#include "th.h"

#include "lowbit/eora.h"
#include "lowbit/export.h"
#include "lowbit/file.h"
#include "lowbit/kernels.h"
#include "lowbit/model.h"
#include "lowbit/quants.h"
#include "lowbit/quantize.h"
#include "lowbit/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DATA "tests/data/arch/"

static const char *models[] = {"gemma2-random",  "gemma3-random",
                               "phi3-random",    "phi3-longrope-random",
                               "qwen3moe-random", "qwen2moe-random",
                               "mixtral-random", "qwen3moe-mlponly-random",
                               "qwen2moe-step2-random"};

/* logits [64, V] of seq64.ids under m (malloc'd) */
static float *logits64(lb_model *m, const char *name) {
    char p[300];
    snprintf(p, sizeof p, DATA "%s/seq64.ids.i32", name);
    size_t nb = 0;
    int32_t *ids = th_read_bin(p, &nb);
    const int32_t V = m->config.vocab_size, n = (int32_t)(nb / 4);
    float *lg = ids ? malloc((size_t)n * (size_t)V * sizeof(float)) : NULL;
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = 128;
    cp.n_threads = 2;
    lb_context *ctx = NULL;
    if (lg) TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    if (ctx) TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, lg, LB_LOGITS_ALL));
    lb_context_free(ctx);
    free(ids);
    if (!ctx) {
        free(lg);
        return NULL;
    }
    return lg;
}

/* 8 random sequences of 64 ids in [3, 256) */
static lb_calib calib8(void) {
    lb_calib c = {0};
    c.nsamples = 8;
    c.seqlen = 64;
    c.ids = malloc(8 * 64 * sizeof(int32_t));
    uint32_t x = 12345;
    for (int i = 0; i < 8 * 64; i++) {
        x = x * 1664525u + 1013904223u;
        c.ids[i] = 3 + (int32_t)((x >> 8) % 253);
    }
    return c;
}

static const lb_quantize_module_report *rep_find(const lb_quantize_report *r,
                                                 const char *name) {
    for (int i = 0; i < r->n_modules; i++)
        if (!strcmp(r->modules[i].name, name)) return &r->modules[i];
    return NULL;
}

/* max |a - b| / max |a| over the rows of two [out, in] tensors */
static double tensor_rel_diff(const lb_tensor *a, const lb_tensor *b) {
    if (a->shape[0] != b->shape[0] || a->shape[1] != b->shape[1]) return INFINITY;
    const int64_t rows = a->shape[0], cols = a->shape[1];
    float *ra = malloc((size_t)cols * sizeof(float));
    float *rb = malloc((size_t)cols * sizeof(float));
    size_t rba = 0, rbb = 0;
    double d = 0, mag = 0;
    if (ra && rb && lb_row_size(a->type, cols, &rba) &&
        lb_row_size(b->type, cols, &rbb))
        for (int64_t r = 0; r < rows; r++) {
            lb_tensor_dequant_row(a, r, ra); /* row form whatever the layout */
            lb_tensor_dequant_row(b, r, rb);
            for (int64_t c = 0; c < cols; c++) {
                d = fmax(d, fabs((double)ra[c] - rb[c]));
                mag = fmax(mag, fabs((double)ra[c]));
            }
        }
    else
        d = INFINITY;
    free(ra);
    free(rb);
    return mag > 0 ? d / mag : d;
}

/* every linear of two models (same architecture) within f16 scale rounding */
static void check_same_weights(const char *name, const lb_model *a,
                               const lb_model *b) {
    double worst = 0;
    for (int l = 0; l < a->config.n_layers; l++) {
        const lb_layer_weights *A = &a->layers[l], *B = &b->layers[l];
        for (int i = 0; i < LB_LINEAR_COUNT; i++)
            if (A->w[i].data) worst = fmax(worst, tensor_rel_diff(&A->w[i], &B->w[i]));
        for (int i = 0; A->exp && i < 3 * a->config.n_experts; i++)
            worst = fmax(worst, B->exp ? tensor_rel_diff(&A->exp[i], &B->exp[i]) : INFINITY);
        for (int i = 0; i < 3; i++)
            if (A->shexp[i].data)
                worst = fmax(worst, tensor_rel_diff(&A->shexp[i], &B->shexp[i]));
    }
    fprintf(stderr, "  %-24s checkpoint vs in-memory weights: max rel diff %.3g\n",
            name, worst);
    /* w = s (q - z): an f16 s moves w by at most 2^-11 |w| per element,
     * relative to the tensor's max below 1e-3 */
    TH_CHECK_MSG(worst <= 1e-3, "%s: %g", name, worst);
}

static void test_rtn_ckpt_equals_inplace(void) {
    for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
        const char *name = models[k];
        char dir[256], out[600];
        snprintf(dir, sizeof dir, DATA "%s", name);
        snprintf(out, sizeof out, "%s/%s-rtn", th_tmpdir(), name);
        lb_quantize_params p;
        lb_quantize_default_params(&p);
        p.method = LB_QUANT_RTN;
        p.group_size = 32;
        p.n_threads = 2;
        p.max_shard_bytes = 0;
        lb_quantize_report rep = {0};
        TH_CHECK_OK(lb_quantize_model(dir, out, &p, NULL, &rep));
        lb_model *a = NULL, *b = NULL;
        TH_CHECK_OK(lb_model_load(dir, NULL, &a));
        lb_quantize_report r2 = {0};
        if (a) TH_CHECK_OK(lb_quantize_model_inplace(a, &p, NULL, &r2));
        TH_CHECK_OK(lb_model_load(out, NULL, &b));
        if (a && b) check_same_weights(name, a, b);
        float *la = a ? logits64(a, name) : NULL;
        float *lb = b ? logits64(b, name) : NULL;
        if (la && lb) {
            /* random weights amplify the f16 rounding of the scales (a MoE
             * token may switch experts): top-1 agreement, not equality */
            const int V = a->config.vocab_size;
            int agree = 0;
            for (int t = 0; t < 64; t++) {
                int ia = 0, ib = 0;
                for (int v = 1; v < V; v++) {
                    if (la[t * V + v] > la[t * V + ia]) ia = v;
                    if (lb[t * V + v] > lb[t * V + ib]) ib = v;
                }
                agree += ia == ib;
            }
            fprintf(stderr, "  %-24s %d modules: checkpoint vs in-memory top-1 "
                    "%d/64\n", name, rep.n_modules, agree);
            TH_CHECK_MSG(agree >= 40, "%s: %d/64", name, agree);
        }
        if (b && lb && b->layers[0].exp && strstr(lb_kernel_name(LB_TYPE_Q4_0, 1), "x16")) {
            /* the checkpoint's Q4_0 experts are repacked (each expert view on
             * its own) and give the row form's logits bit for bit */
            TH_CHECK_MSG(b->layers[0].exp[0].type != LB_TYPE_Q4_0 ||
                             b->layers[0].exp[0].layout == LB_LAYOUT_X16,
                         "%s: expert 0 not repacked", name);
            setenv("LB_REPACK", "0", 1);
            lb_model *rows = NULL;
            TH_CHECK_OK(lb_model_load(out, NULL, &rows));
            unsetenv("LB_REPACK");
            float *lr = rows ? logits64(rows, name) : NULL;
            if (lr)
                TH_CHECK_MSG(memcmp(lr, lb, sizeof(float) * 64 * (size_t)b->config.vocab_size) == 0,
                             "%s: repacked checkpoint's logits differ from LB_REPACK=0's", name);
            free(lr);
            lb_model_free(rows);
        }
        TH_CHECK_INT(rep.n_modules, r2.n_modules);
        /* names per architecture; routers never among the modules */
        const char *want = NULL, *dense = NULL;
        if (strstr(name, "phi3")) want = "model.layers.0.self_attn.qkv_proj";
        if (!strcmp(name, "qwen3moe-random"))
            want = "model.layers.2.mlp.experts.7.down_proj";
        if (!strcmp(name, "qwen2moe-random"))
            want = "model.layers.0.mlp.experts.5.up_proj",
            dense = "model.layers.0.mlp.shared_expert.gate_proj"; /* 48 rows */
        if (!strcmp(name, "mixtral-random"))
            dense = "model.layers.1.block_sparse_moe.experts.3.w2"; /* 48 */
        if (!strcmp(name, "qwen3moe-mlponly-random"))
            want = "model.layers.1.mlp.down_proj"; /* the dense layer */
        if (want) {
            const lb_quantize_module_report *m = rep_find(&rep, want);
            TH_CHECK_MSG(m && m->quantized, "%s: %s", name, want);
        }
        if (dense) {
            const lb_quantize_module_report *m = rep_find(&rep, dense);
            TH_CHECK_MSG(m && !m->quantized && strstr(m->note, "multiples of 32"),
                         "%s: %s", name, dense);
        }
        for (int i = 0; i < rep.n_modules; i++)
            TH_CHECK_MSG(!strstr(rep.modules[i].name, ".gate.") &&
                         !strstr(rep.modules[i].name, "shared_expert_gate"),
                         "%s", rep.modules[i].name);
        /* the checkpoint's tensors: qweight per module, routers dense */
        lb_safetensors *st = NULL;
        TH_CHECK_OK(lb_st_open(out, &st));
        if (st && want) {
            char t[300];
            snprintf(t, sizeof t, "%s.qweight", want);
            TH_CHECK_MSG(lb_st_find(st, t) != NULL, "%s", t);
            snprintf(t, sizeof t, "%s.weight", want);
            TH_CHECK(lb_st_find(st, t) == NULL);
        }
        if (st && strstr(name, "moe") && !strstr(name, "step2"))
            TH_CHECK(lb_st_find(st, "model.layers.0.mlp.gate.weight") != NULL);
        if (st && !strcmp(name, "mixtral-random"))
            TH_CHECK(lb_st_find(st, "model.layers.0.block_sparse_moe.gate.weight"));
        lb_st_close(st);
        free(la);
        free(lb);
        lb_model_free(a);
        lb_model_free(b);
        lb_quantize_report_free(&rep);
        lb_quantize_report_free(&r2);
    }
}

static void test_coverage(void) {
    lb_calib cal = calib8();
    const int ns = 8, T = 64, E = 8, K = 2, L = 3;
    lb_quantize_report rep[3];
    for (int mode = 0; mode < 3; mode++) {
        memset(&rep[mode], 0, sizeof rep[mode]);
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(DATA "qwen3moe-random", NULL, &m));
        if (!m) continue;
        lb_quantize_params p;
        lb_quantize_default_params(&p);
        p.group_size = 32;
        p.n_threads = 2;
        p.moe_coverage = mode ? LB_MOE_COVERAGE_ROUTED : LB_MOE_COVERAGE_ALL;
        if (mode == 2) p.moe_min_tokens = 1000000; /* every expert: RTN */
        TH_CHECK_OK(lb_quantize_model_inplace(m, &p, &cal, &rep[mode]));
        for (int l = 0; l < L; l++) {
            int64_t sum = 0;
            for (int e = 0; e < E; e++)
                for (int j = 0; j < 3; j++) {
                    static const char *pn[3] = {"gate_proj", "up_proj",
                                                "down_proj"};
                    char nm[160];
                    snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.%s",
                             l, e, pn[j]);
                    const lb_quantize_module_report *r = rep_find(&rep[mode], nm);
                    TH_CHECK_MSG(r && r->quantized, "%s", nm);
                    if (!r) continue;
                    if (mode == 0) {
                        TH_CHECK_MSG(r->nsamples == ns && !r->note[0], "%s: %lld",
                                     nm, (long long)r->nsamples);
                    } else if (mode == 2) {
                        TH_CHECK_MSG(r->nsamples == 0 && strstr(r->note, "RTN"),
                                     "%s: %s", nm, r->note);
                    } else {
                        long long nt = -1;
                        TH_CHECK_MSG(sscanf(r->note, "routed coverage: %lld", &nt) == 1 &&
                                     r->nsamples >= 1 && r->nsamples <= ns,
                                     "%s: '%s'", nm, r->note);
                        if (j == 0) sum += nt;
                    }
                }
            if (mode == 1)
                TH_CHECK_MSG(sum == (int64_t)ns * T * K, "layer %d: %lld routed "
                             "tokens", l, (long long)sum);
            /* attention always sees every sequence */
            char nm[160];
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_proj", l);
            const lb_quantize_module_report *r = rep_find(&rep[mode], nm);
            TH_CHECK(r && r->nsamples == ns);
        }
        lb_model_free(m);
    }
    /* the coverages give different experts, the same first attention */
    const lb_quantize_module_report *a0 =
        rep_find(&rep[0], "model.layers.0.mlp.experts.0.gate_proj");
    const lb_quantize_module_report *a1 =
        rep_find(&rep[1], "model.layers.0.mlp.experts.0.gate_proj");
    const lb_quantize_module_report *q0 =
        rep_find(&rep[0], "model.layers.0.self_attn.q_proj");
    const lb_quantize_module_report *q1 =
        rep_find(&rep[1], "model.layers.0.self_attn.q_proj");
    TH_CHECK(a0 && a1 && a0->snr_db != a1->snr_db);
    TH_CHECK(q0 && q1 && q0->snr_db == q1->snr_db);
    for (int i = 0; i < 3; i++) lb_quantize_report_free(&rep[i]);
    lb_calib_free(&cal);
}

/* GPTQ on the dense issue-13 layouts and the shared expert, through the
 * checkpoint: the reload runs, every module of the plan is quantized with
 * all sequences in its Hessian. */
static void test_gptq_ckpt(void) {
    lb_calib cal = calib8();
    static const char *ms[] = {"gemma2-random", "phi3-longrope-random",
                               "qwen2moe-step2-random"};
    for (size_t k = 0; k < 3; k++) {
        char dir[256], out[600];
        snprintf(dir, sizeof dir, DATA "%s", ms[k]);
        snprintf(out, sizeof out, "%s/%s-gptq", th_tmpdir(), ms[k]);
        lb_quantize_params p;
        lb_quantize_default_params(&p);
        p.group_size = 32;
        p.n_threads = 2;
        p.desc_act = k == 1;
        lb_quantize_report rep = {0};
        TH_CHECK_OK(lb_quantize_model(dir, out, &p, &cal, &rep));
        for (int i = 0; i < rep.n_modules; i++)
            if (rep.modules[i].quantized)
                TH_CHECK_MSG(rep.modules[i].nsamples == 8, "%s",
                             rep.modules[i].name);
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(out, NULL, &m));
        float *lg = m ? logits64(m, ms[k]) : NULL;
        bool finite = lg != NULL;
        for (size_t i = 0; lg && i < 64 * (size_t)m->config.vocab_size; i++)
            finite &= isfinite(lg[i]) != 0;
        TH_CHECK(finite);
        free(lg);
        lb_model_free(m);
        lb_quantize_report_free(&rep);
    }
    lb_calib_free(&cal);
}

static void test_refused(void) {
    lb_calib cal = calib8();
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(DATA "gemma2-random", NULL, &m));
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.group_size = 32;
    p.n_threads = 2;
    p.method = LB_QUANT_AWQ;
    p.sym = false;
    /* AWQ is no longer refused here (test_awq_arch.c checks it) */
    if (m) TH_CHECK_OK(lb_quantize_model_inplace(m, &p, &cal, NULL));
    lb_model_free(m);
    m = NULL;
    TH_CHECK_OK(lb_model_load(DATA "qwen3moe-random", NULL, &m));
    lb_quantize_default_params(&p);
    p.moe_coverage = (lb_moe_coverage)7;
    if (m) TH_CHECK_FAILS(lb_quantize_model_inplace(m, &p, &cal, NULL),
                          LB_ERR_INVALID_ARG);
    /* EoRA has no targets in these layouts: refused, not a crash */
    lb_eora_params ep = {.rank = 4, .n_threads = 2};
    lb_lora *lo = NULL;
    lb_eora_report er;
    if (m) TH_CHECK_FAILS(lb_eora_generate(m, m, &cal, &ep, "x", &lo, &er),
                          LB_ERR_UNSUPPORTED);
    TH_CHECK(lo == NULL);
    lb_model_free(m);
    lb_calib_free(&cal);
}

/* A quantized MoE checkpoint whose config contradicts its experts. */
static void test_bad_ckpt(void) {
    char out[600];
    snprintf(out, sizeof out, "%s/qwen3moe-bad", th_tmpdir());
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_RTN;
    p.group_size = 32;
    p.n_threads = 2;
    TH_CHECK_OK(lb_quantize_model(DATA "qwen3moe-random", out, &p, NULL, NULL));
    char cfgp[700];
    snprintf(cfgp, sizeof cfgp, "%s/config.json", out);
    char *js = NULL;
    size_t n = 0;
    TH_CHECK_OK(lb_read_file(cfgp, 1 << 20, &js, &n));
    if (!js) return;
    static const struct {
        const char *key;
        int value;
        const char *says;
    } cases[] = {
        {"num_local_experts", 7, "'model.layers.0.mlp.gate.weight': expected "
         "shape [7, 64], got [8, 64]"},
        {"num_local_experts", 9, "num_experts (9)"},
        {"num_experts_per_tok", 9, "num_experts_per_tok"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        cJSON *j = cJSON_ParseWithLength(js, n);
        cJSON *it = j ? cJSON_GetObjectItemCaseSensitive(j, cases[c].key) : NULL;
        TH_CHECK_MSG(it != NULL, "%s", cases[c].key);
        if (!it) {
            cJSON_Delete(j);
            continue;
        }
        cJSON_SetNumberValue(it, cases[c].value);
        char *txt = cJSON_Print(j);
        cJSON_Delete(j);
        FILE *f = fopen(cfgp, "w");
        if (f && txt) fputs(txt, f);
        if (f) fclose(f);
        free(txt);
        lb_model *m = NULL;
        lb_status s = lb_model_load(out, NULL, &m);
        TH_CHECK(s != LB_OK);
        TH_CHECK_MSG(strstr(lb_last_error(), cases[c].says) != NULL, "%s",
                     lb_last_error());
        lb_model_free(m);
    }
    /* the original config back, then the checkpoint without expert 3's
     * up_proj of layer 1 */
    FILE *f = fopen(cfgp, "w");
    if (f) {
        fwrite(js, 1, n, f);
        fclose(f);
    }
    free(js);
    char stp[700], stq[700];
    snprintf(stp, sizeof stp, "%s/model.safetensors", out);
    snprintf(stq, sizeof stq, "%s/model.safetensors.new", out);
    lb_safetensors *st = NULL;
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_open(stp, &st));
    TH_CHECK_OK(lb_st_writer_create(&w));
    for (size_t i = 0; st && w && i < lb_st_count(st); i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        if (strstr(t->name, "layers.1.mlp.experts.3.up_proj.")) continue;
        TH_CHECK_OK(lb_st_writer_add(w, t->name, t->type, t->n_dims, t->shape, t->data));
    }
    if (w) TH_CHECK_OK(lb_st_writer_write_file(w, stq));
    lb_st_writer_free(w);
    lb_st_close(st);
    TH_CHECK(rename(stq, stp) == 0);
    lb_model *m = NULL;
    TH_CHECK(lb_model_load(out, NULL, &m) == LB_ERR_NOT_FOUND);
    TH_CHECK_MSG(strstr(lb_last_error(), "model.layers.1.mlp.experts.3.up_proj.weight' "
                        "not found") != NULL, "%s", lb_last_error());
    lb_model_free(m);
    /* ... and its export names the missing expert */
    char gg[700];
    snprintf(gg, sizeof gg, "%s.gguf", out);
    lb_export_opts o;
    lb_export_opts_default(&o);
    TH_CHECK(lb_export_gguf(out, gg, &o, NULL, NULL) != LB_OK);
    TH_CHECK_MSG(strstr(lb_last_error(), "blk.1.ffn_up_exps.weight: expert 3 is missing") != NULL,
                 "%s", lb_last_error());
}

/* GPTQ checkpoint -> GGUF direct: the experts' Q4_0 / Q8_0 blocks stacked
 * into ffn_*_exps unchanged (every linear of the GGUF dequantizes to the
 * checkpoint's values exactly; Mixtral's q/k rows are permuted, so only
 * its other linears are compared), the plan names the route; experts of
 * different types in one stack are not direct. */
static void test_export_lossless(void) {
    static const struct {
        const char *name;
        int bits;
        lb_type type;
    } cs[] = {{"qwen3moe-random", 4, LB_TYPE_Q4_0},
              {"qwen2moe-random", 8, LB_TYPE_Q8_0},
              {"phi3-random", 4, LB_TYPE_Q4_0},
              {"gemma3-random", 4, LB_TYPE_Q4_0},
              {"qwen2moe-step2-random", 4, LB_TYPE_Q4_0}};
    setenv("LB_REPACK", "0", 1); /* GGUF weights in row form, as stored */
    for (size_t k = 0; k < sizeof cs / sizeof *cs; k++) {
        char dir[256], ck[600], gg[700];
        snprintf(dir, sizeof dir, DATA "%s", cs[k].name);
        snprintf(ck, sizeof ck, "%s/%s-x%d", th_tmpdir(), cs[k].name, cs[k].bits);
        snprintf(gg, sizeof gg, "%s.gguf", ck);
        lb_quantize_params p;
        lb_quantize_default_params(&p);
        p.method = LB_QUANT_RTN;
        p.bits = cs[k].bits;
        p.group_size = 32;
        p.n_threads = 2;
        TH_CHECK_OK(lb_quantize_model(dir, ck, &p, NULL, NULL));
        lb_export_opts o;
        lb_export_opts_default(&o);
        o.mode = LB_EXPORT_MODE_DIRECT;
        lb_export_plan *plan = NULL;
        TH_CHECK_OK(lb_export_gguf(ck, gg, &o, &plan, NULL));
        int n_exps = 0;
        for (size_t i = 0; plan && i < plan->n_tensors; i++) {
            const lb_export_tensor *t = &plan->tensors[i];
            if (!strstr(t->name, "_exps.")) continue;
            n_exps++;
            TH_CHECK_MSG(t->route == LB_EXPORT_ROUTE_DIRECT && t->type == cs[k].type &&
                         t->n_dims == 3 && strstr(t->reason, "experts stacked"),
                         "%s: %s %s", cs[k].name, t->name, t->reason);
        }
        if (strstr(cs[k].name, "moe")) TH_CHECK(n_exps > 0);
        lb_export_plan_free(plan);
        lb_model *a = NULL, *b = NULL;
        TH_CHECK_OK(lb_model_load(ck, NULL, &a));
        TH_CHECK_OK(lb_model_load(gg, NULL, &b));
        if (!a || !b) {
            lb_model_free(a);
            lb_model_free(b);
            continue;
        }
        double worst = 0;
        int n = 0;
        for (int l = 0; l < a->config.n_layers; l++) {
            const lb_layer_weights *A = &a->layers[l], *B = &b->layers[l];
            for (int i = 0; i < LB_LINEAR_COUNT; i++, n++)
                worst = fmax(worst, tensor_rel_diff(&A->w[i], &B->w[i]));
            for (int i = 0; A->exp && i < 3 * a->config.n_experts; i++, n++) {
                TH_CHECK(B->exp && A->exp[i].type == cs[k].type &&
                         B->exp[i].type == cs[k].type);
                worst = fmax(worst, B->exp ? tensor_rel_diff(&A->exp[i], &B->exp[i])
                                           : INFINITY);
            }
            for (int i = 0; i < 3; i++)
                if (A->shexp[i].data) {
                    worst = fmax(worst, tensor_rel_diff(&A->shexp[i], &B->shexp[i]));
                    n++;
                }
        }
        fprintf(stderr, "  %-24s %d-bit: %d linears, GGUF vs checkpoint max "
                "rel diff %g\n", cs[k].name, cs[k].bits, n, worst);
        TH_CHECK_MSG(worst == 0, "%s: %g", cs[k].name, worst);
        lb_model_free(a);
        lb_model_free(b);
    }
    /* one expert in 8 bits: its stack cannot be one block type */
    char ck[600];
    snprintf(ck, sizeof ck, "%s/qwen3moe-mixed", th_tmpdir());
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_RTN;
    p.group_size = 32;
    p.format = LB_GPTQ_FORMAT_V2;
    const char *rules[] = {"layers\\.0\\.mlp\\.experts\\.3\\.=8"};
    p.rules = rules;
    p.n_rules = 1;
    TH_CHECK_OK(lb_quantize_model(DATA "qwen3moe-random", ck, &p, NULL, NULL));
    lb_export_opts o;
    lb_export_opts_default(&o);
    lb_export_plan *plan = NULL;
    TH_CHECK_OK(lb_export_plan_make(ck, &o, &plan));
    for (size_t i = 0; plan && i < plan->n_tensors; i++) {
        const lb_export_tensor *t = &plan->tensors[i];
        if (!strstr(t->name, "_exps.")) continue;
        const bool l0 = !strncmp(t->name, "blk.0.", 6);
        TH_CHECK_MSG(l0 ? t->route == LB_EXPORT_ROUTE_MIXED &&
                              strstr(t->reason, "experts map to different types")
                        : t->route == LB_EXPORT_ROUTE_DIRECT,
                     "%s: %s", t->name, t->reason);
    }
    lb_export_plan_free(plan);
    o.mode = LB_EXPORT_MODE_DIRECT;
    TH_CHECK_FAILS(lb_export_plan_make(ck, &o, &plan), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "experts map to different types") != NULL);
}

/* A dense MoE export with a llama.cpp mix (--qtype Q4_K_M) applies
 * llama.cpp's expert rules (llama_tensor_get_type with n_expert): with 8
 * experts attn_v and attn_k become Q8_0 (Qwen3-MoE random: 8 experts; the
 * plan used to pass n_expert 0; on the packable shapes every tensor type
 * equals llama-quantize 0.7.0's, docs/quantize.md). */
static void test_moe_qtype_mix(void) {
    lb_export_opts o;
    lb_export_opts_default(&o);
    o.qtype = "Q4_K_M";
    lb_export_plan *plan = NULL;
    TH_CHECK_OK(lb_export_plan_make(DATA "qwen3moe-random", &o, &plan));
    int n = 0;
    for (size_t i = 0; plan && i < plan->n_tensors; i++) {
        const lb_export_tensor *t = &plan->tensors[i];
        if (!strstr(t->name, ".attn_v.") && !strstr(t->name, ".attn_k.")) continue;
        n++;
        TH_CHECK_MSG(t->type == LB_TYPE_Q8_0, "%s: %s", t->name, lb_type_name(t->type));
    }
    TH_CHECK_INT(n, 6);
    lb_export_plan_free(plan);
}

int main(void) {
    TH_RUN(test_rtn_ckpt_equals_inplace);
    TH_RUN(test_coverage);
    TH_RUN(test_gptq_ckpt);
    TH_RUN(test_refused);
    TH_RUN(test_bad_ckpt);
    TH_RUN(test_export_lossless);
    TH_RUN(test_moe_qtype_mix);
    return th_report();
}
