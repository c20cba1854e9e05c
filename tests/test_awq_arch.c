/*
 * test_awq_arch.c — AWQ (--method awq / awq+gptq) on the issue-13
 * architectures (Gemma 2/3, Phi-3, Qwen3-MoE, Qwen2-MoE, Mixtral):
 *  - fold invariance, the independent check: the AWQ processor folds
 *    random positive scales (log-uniform in [1/2, 2], through the test
 *    hook qz_awq_fold_test) into every scaling group — norms (Gemma's
 *    (1 + w)), previous linears (Phi-3's fused halves), MoE routers and
 *    shared-expert gates — and hands the weights back unquantized; the
 *    folded model's logits must still equal transformers' golden float32
 *    logits of tests/data/arch (max |diff| <= 1e-3, test_arch's bound).
 *    A fold that left the router unscaled, or scaled a Gemma norm as w / s
 *    instead of (1 + w) / s, changes routing / activations by O(1);
 *    The same on generated Phi-3 and Qwen2-MoE models without grouped-query
 *    attention (the v -> o groups; against lowbit's unfolded logits);
 *  - every group of every layer was folded (the hook's call count per
 *    architecture, from AutoAWQ's get_layers_for_scaling);
 *  - AWQ vs RTN, 4-bit g32 asym (in-place, random calibration tokens):
 *    the relative logit MSE against the dense model is printed for each
 *    architecture (random weights: see docs/quantize.md);
 *  - the AWQ checkpoint reloads to the in-memory AWQ model (norms, Gemma's
 *    -1, v bias, router, shared_expert_gate written right), and a run
 *    cancelled after layer 0 resumes to the same bytes;
 *  - routed coverage with experts that receive no calibration token (2
 *    tokens, top-2 of 8 experts): no crash, finite output, the starved
 *    experts reported per expert (awq and awq+gptq).
 */
#include "test_quantize_util.h"
#include "quant/awq_internal.h"
#include "lowbit/safetensors.h"

#include <math.h>

#define DATA "tests/data/arch/"
#define LOGIT_TOL 1e-3

static const struct {
    const char *name;
    int groups; /* scaling groups folded over the whole model */
} models[] = {
    /* 3 layers x (qkv, gate/up, down); GQA: no v -> o */
    {"gemma2-random", 9},
    {"gemma3-random", 18},        /* 6 layers */
    {"phi3-random", 9},           /* qkv_proj, gate_up_proj, down_proj */
    {"phi3-longrope-random", 9},
    {"qwen3moe-random", 3 * (2 + 8)},  /* qkv, experts' gate/up, 8 downs */
    {"qwen2moe-random", 3 * (2 + 6 + 1)}, /* + shared expert down */
    {"mixtral-random", 3 * (2 + 4)},
    {"qwen3moe-mlponly-random", 3 * (2 + 4) + 3}, /* layer 1 dense */
    {"qwen2moe-step2-random", 2 * (2 + 4 + 1) + 2 * 3},
};

static uint32_t rng = 777;
static double urand01(void) {
    rng = rng * 1664525u + 1013904223u;
    return (double)(rng >> 8) / (double)(1u << 24);
}

static int n_calls;
static void random_scales(void *user, int layer, const char *group, int64_t n,
                          float *s) {
    (void)user;
    (void)layer;
    (void)group;
    n_calls++;
    for (int64_t i = 0; i < n; i++)
        s[i] = (float)exp((2.0 * urand01() - 1.0) * log(2.0));
}

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - (double)b[i]);
        if (!(x <= d)) d = x;
    }
    return d;
}

static float *logits64(lb_model *m, const int32_t *ids, int n) {
    const int V = m->config.vocab_size;
    float *lg = malloc(sizeof(float) * (size_t)n * (size_t)V);
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = 128;
    cp.n_threads = 2;
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    if (!ctx || !lg || lb_model_forward(ctx, ids, n, 0, lg, LB_LOGITS_ALL) != LB_OK) {
        TH_CHECK_MSG(0, "forward failed: %s", lb_last_error());
        free(lg);
        lg = NULL;
    }
    lb_context_free(ctx);
    return lg;
}

static void test_fold_invariance(void) {
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        char dir[256], p[320];
        snprintf(dir, sizeof dir, DATA "%s", models[k].name);
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(dir, NULL, &m));
        if (!m) continue;
        size_t nb = 0, nl = 0;
        snprintf(p, sizeof p, "%s/seq64.ids.i32", dir);
        int32_t *ids = th_read_bin(p, &nb);
        snprintf(p, sizeof p, "%s/seq64.logits.f32", dir);
        float *ref = th_read_bin(p, &nl);
        const int V = m->config.vocab_size;
        TH_CHECK(ids && ref && nb == 64 * 4 && nl == (size_t)64 * V * 4);
        lb_calib cal = random_calib(4, 32, V, 11 + (uint32_t)k);
        lb_quantize_params qp;
        lb_quantize_default_params(&qp);
        qp.method = LB_QUANT_AWQ;
        qp.group_size = 32;
        qp.sym = false;
        qp.n_threads = 2;
        n_calls = 0;
        qz_awq_fold_test = random_scales;
        lb_status s = lb_quantize_model_inplace(m, &qp, &cal, NULL);
        qz_awq_fold_test = NULL;
        TH_CHECK_MSG(s == LB_OK, "%s: %s", models[k].name, lb_last_error());
        TH_CHECK_MSG(n_calls == models[k].groups, "%s: %d groups folded, want %d",
                     models[k].name, n_calls, models[k].groups);
        float *lg = ids && ref && s == LB_OK ? logits64(m, ids, 64) : NULL;
        if (lg) {
            const double d = max_diff(lg, ref, (size_t)64 * V);
            fprintf(stderr, "  %-24s %2d groups folded (random s in [1/2, 2]): max |logit - "
                    "transformers| %.2e\n", models[k].name, n_calls, d);
            TH_CHECK_MSG(d <= LOGIT_TOL, "%s: folded logits differ by %g", models[k].name, d);
        }
        free(lg);
        free(ids);
        free(ref);
        lb_calib_free(&cal);
        lb_model_free(m);
    }
}

/* Relative logit MSE of m against dense on ids. */
static double rel_mse(lb_model *dense, lb_model *m, const int32_t *ids, int n) {
    float *a = logits64(dense, ids, n), *b = logits64(m, ids, n);
    double se = 0, ss = 0;
    const int V = dense->config.vocab_size;
    for (int64_t i = 0; a && b && i < (int64_t)n * V; i++) {
        se += (a[i] - b[i]) * (double)(a[i] - b[i]);
        ss += (double)a[i] * a[i];
    }
    free(a);
    free(b);
    return ss > 0 ? se / ss : INFINITY;
}

static void test_awq_vs_rtn(void) {
    /* the architectures whose every linear GPTQ-packs (multiples of 32) */
    static const char *names[] = {"gemma2-random", "phi3-random", "qwen3moe-random",
                                  "qwen3moe-mlponly-random"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char dir[256], p[320];
        snprintf(dir, sizeof dir, DATA "%s", names[k]);
        lb_model *dense = NULL, *awq = NULL, *rtn = NULL;
        TH_CHECK_OK(lb_model_load(dir, NULL, &dense));
        TH_CHECK_OK(lb_model_load(dir, NULL, &awq));
        TH_CHECK_OK(lb_model_load(dir, NULL, &rtn));
        if (!dense || !awq || !rtn) break;
        size_t nb = 0;
        snprintf(p, sizeof p, "%s/seq64.ids.i32", dir);
        int32_t *ids = th_read_bin(p, &nb);
        const int V = dense->config.vocab_size;
        lb_calib cal = random_calib(16, 64, V, 5);
        lb_quantize_params qp;
        lb_quantize_default_params(&qp);
        qp.method = LB_QUANT_AWQ;
        qp.group_size = 32;
        qp.sym = false;
        qp.n_threads = 2;
        lb_quantize_report rep;
        TH_CHECK_OK(lb_quantize_model_inplace(awq, &qp, &cal, &rep));
        int n_q = 0, n_ratio = 0;
        for (int i = 0; i < rep.n_modules; i++) {
            n_q += rep.modules[i].quantized;
            n_ratio += rep.modules[i].quantized && rep.modules[i].awq_ratio >= 0.0;
        }
        /* every quantized module is in a searched group (no v -> o: GQA,
         * so o_proj is the one without a ratio in each layer) */
        TH_CHECK_MSG(n_ratio == n_q - dense->config.n_layers, "%s: %d of %d modules with an "
                     "AWQ ratio", names[k], n_ratio, n_q);
        lb_quantize_report_free(&rep);
        qp.method = LB_QUANT_RTN;
        TH_CHECK_OK(lb_quantize_model_inplace(rtn, &qp, NULL, NULL));
        const double ea = rel_mse(dense, awq, ids, 64), er = rel_mse(dense, rtn, ids, 64);
        fprintf(stderr, "  %-24s 4-bit g32 asym, relative logit MSE vs dense: AWQ %.4g  RTN "
                "%.4g  (AWQ/RTN %.3f)\n", names[k], ea, er, ea / er);
        TH_CHECK(isfinite(ea) && isfinite(er));
        free(ids);
        lb_calib_free(&cal);
        lb_model_free(dense);
        lb_model_free(awq);
        lb_model_free(rtn);
    }
}


/* A Qwen2-MoE model without grouped-query attention (v_proj -> o_proj
 * scaling applies, with the v bias), every linear GPTQ-packable (shared
 * expert 32 wide), random F32 weights, decisive routers. */
static uint32_t grng = 4242;
static double grand(void) { /* [-1, 1) */
    grng = grng * 1664525u + 1013904223u;
    return (double)(grng >> 8) / (double)(1u << 23) - 1.0;
}

/* A random F32 checkpoint written tensor by tensor: rw_begin, rw_add
 * (name, [d0, d1] or [d0] when d1 = 0, values base + scale * grand()),
 * rw_end(path). */
static lb_st_writer *rw_w;
static float *rw_buf[128];
static char rw_names[128][112];
static int rw_n;

static void rw_begin(void) {
    rw_w = NULL;
    rw_n = 0;
    TH_CHECK_OK(lb_st_writer_create(&rw_w));
}

static void rw_add(const char *name, int64_t d0, int64_t d1, double scale, double base) {
    if (!rw_w || rw_n >= 128) {
        TH_CHECK(!"rw_add: no writer or too many tensors");
        return;
    }
    const int64_t n = d0 * (d1 > 0 ? d1 : 1);
    int64_t sh[2] = {d0, d1};
    float *b = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) b[i] = (float)(base + scale * grand());
    rw_buf[rw_n] = b;
    snprintf(rw_names[rw_n], sizeof rw_names[rw_n], "%s", name);
    TH_CHECK_OK(lb_st_writer_add(rw_w, rw_names[rw_n], LB_TYPE_F32, d1 > 0 ? 2 : 1, sh, b));
    rw_n++;
}

static void rw_end(const char *path) {
    if (rw_w) TH_CHECK_OK(lb_st_writer_write_file(rw_w, path));
    lb_st_writer_free(rw_w);
    rw_w = NULL;
    for (int i = 0; i < rw_n; i++) free(rw_buf[i]);
    rw_n = 0;
}

static const char *make_qwen2moe_mha(void) {
    const char *dir = tmp_path("qwen2moe-mha");
    mkdir(dir, 0755);
    char p[800];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    if (!f) return dir;
    fprintf(f, "{\"architectures\": [\"Qwen2MoeForCausalLM\"], \"model_type\": \"qwen2_moe\", "
               "\"hidden_size\": 64, \"intermediate_size\": 96, \"moe_intermediate_size\": 32, "
               "\"shared_expert_intermediate_size\": 32, \"num_experts\": 4, "
               "\"num_experts_per_tok\": 2, \"norm_topk_prob\": false, \"decoder_sparse_step\": 1, "
               "\"mlp_only_layers\": [], \"num_attention_heads\": 2, \"num_key_value_heads\": 2, "
               "\"num_hidden_layers\": 2, \"vocab_size\": 256, \"max_position_embeddings\": 256, "
               "\"rms_norm_eps\": 1e-6, \"rope_theta\": 1000000.0, \"qkv_bias\": true, "
               "\"hidden_act\": \"silu\", \"tie_word_embeddings\": false, \"torch_dtype\": \"float32\"}\n");
    fclose(f);
    rw_begin();
#define ADD(name, d0, d1, scale, base) rw_add(name, d0, d1, scale, base)
    ADD("model.embed_tokens.weight", 256, 64, 1.0, 0.0);
    ADD("lm_head.weight", 256, 64, 0.3, 0.0);
    ADD("model.norm.weight", 64, 0, 0.3, 1.0);
    for (int l = 0; l < 2; l++) {
        char n[112];
#define LN(s) (snprintf(n, sizeof n, "model.layers.%d.%s", l, s), n)
        ADD(LN("input_layernorm.weight"), 64, 0, 0.4, 1.0);
        ADD(LN("post_attention_layernorm.weight"), 64, 0, 0.4, 1.0);
        ADD(LN("self_attn.q_proj.weight"), 64, 64, 0.25, 0.0);
        ADD(LN("self_attn.k_proj.weight"), 64, 64, 0.25, 0.0);
        ADD(LN("self_attn.v_proj.weight"), 64, 64, 0.25, 0.0);
        ADD(LN("self_attn.q_proj.bias"), 64, 0, 0.1, 0.0);
        ADD(LN("self_attn.k_proj.bias"), 64, 0, 0.1, 0.0);
        ADD(LN("self_attn.v_proj.bias"), 64, 0, 0.3, 0.0);
        ADD(LN("self_attn.o_proj.weight"), 64, 64, 0.25, 0.0);
        ADD(LN("mlp.gate.weight"), 4, 64, 1.0, 0.0);
        for (int x = 0; x < 4; x++) {
            char e[64];
            snprintf(e, sizeof e, "mlp.experts.%d.gate_proj.weight", x);
            ADD(LN(e), 32, 64, 0.25, 0.0);
            snprintf(e, sizeof e, "mlp.experts.%d.up_proj.weight", x);
            ADD(LN(e), 32, 64, 0.25, 0.0);
            snprintf(e, sizeof e, "mlp.experts.%d.down_proj.weight", x);
            ADD(LN(e), 64, 32, 0.25, 0.0);
        }
        ADD(LN("mlp.shared_expert.gate_proj.weight"), 32, 64, 0.25, 0.0);
        ADD(LN("mlp.shared_expert.up_proj.weight"), 32, 64, 0.25, 0.0);
        ADD(LN("mlp.shared_expert.down_proj.weight"), 64, 32, 0.25, 0.0);
        ADD(LN("mlp.shared_expert_gate.weight"), 1, 64, 0.5, 0.0);
#undef LN
    }
#undef ADD
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    rw_end(p);
    return dir;
}

/* The AWQ checkpoint (norms, Gemma's as w = (1 + w) / s - 1, the v bias,
 * the router [E, dim] and shared_expert_gate [1, dim] written from the
 * layer states) reloads to the model the in-memory AWQ run makes: the same
 * codes, so only the checkpoint's f16 scales differ (relative logit MSE
 * ~1e-7; a norm written without Gemma's -1, an unscaled router or gate
 * is O(1)). Expert coverage all and routed. */
static void test_ckpt_equals_inplace(void) {
    char gen[400];
    snprintf(gen, sizeof gen, "%s", make_qwen2moe_mha());
    const char *dirs[] = {DATA "gemma2-random", DATA "gemma3-random", DATA "phi3-random",
                          DATA "qwen3moe-random", gen};
    for (size_t k = 0; k < sizeof dirs / sizeof dirs[0]; k++)
        for (int pass = 0; pass < 2; pass++) {
            lb_model *mem = NULL, *ck = NULL;
            TH_CHECK_OK(lb_model_load(dirs[k], NULL, &mem));
            if (!mem) continue;
            const int V = mem->config.vocab_size;
            lb_calib cal = random_calib(8, 64, V, 21);
            lb_quantize_params qp;
            lb_quantize_default_params(&qp);
            qp.method = LB_QUANT_AWQ;
            qp.group_size = 32;
            qp.sym = false;
            qp.n_threads = 2;
            qp.moe_coverage = pass ? LB_MOE_COVERAGE_ROUTED : LB_MOE_COVERAGE_ALL;
            lb_quantize_report rep;
            TH_CHECK_OK(lb_quantize_model_inplace(mem, &qp, &cal, &rep));
            int n_ratio = 0;
            for (int i = 0; i < rep.n_modules; i++) n_ratio += rep.modules[i].awq_ratio >= 0.0;
            lb_quantize_report_free(&rep);
            char out[400];
            snprintf(out, sizeof out, "%s-awq%zu-%d", tmp_path("ck"), k, pass);
            lb_status s = lb_quantize_model(dirs[k], out, &qp, &cal, NULL);
            TH_CHECK_MSG(s == LB_OK, "%s: %s", dirs[k], lb_last_error());
            lb_model_load_opts lo = {0};
            lo.gptq_mode = LB_GPTQ_LOAD_F32;
            if (s == LB_OK) TH_CHECK_OK(lb_model_load(out, &lo, &ck));
            int32_t ids[48];
            for (int i = 0; i < 48; i++) ids[i] = (i * 37 + 5) % V;
            if (ck) {
                const double e = rel_mse(mem, ck, ids, 48);
                fprintf(stderr, "  %-34s coverage %-6s: AWQ checkpoint vs in-memory AWQ, "
                        "relative logit MSE %.2e (%d modules with a ratio)\n", dirs[k],
                        pass ? "routed" : "all", e, n_ratio);
                TH_CHECK_MSG(e < 1e-4, "%s: the AWQ checkpoint is not the in-memory model "
                             "(%g)", dirs[k], e);
            }
            TH_CHECK_MSG(n_ratio > 0, "%s: no AWQ group searched", dirs[k]);
            lb_model_free(ck);
            lb_model_free(mem);
            lb_calib_free(&cal);
        }
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

/* Cancelled after layer 0 and resumed: the same checkpoint bytes (layer
 * 0's scaled norms — Gemma's read back as 1 + w —, v bias, router and
 * shared_expert_gate come back from its state file); the progress is
 * monotonic and ends at its total (the AWQ work units per layout). */
static void test_resume_arch(void) {
    char gen[400];
    snprintf(gen, sizeof gen, "%s", make_qwen2moe_mha());
    const char *dirs[] = {DATA "gemma2-random", DATA "phi3-random", DATA "qwen3moe-random", gen};
    for (size_t k = 0; k < sizeof dirs / sizeof dirs[0]; k++) {
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(dirs[k], NULL, &m));
        if (!m) continue;
        const int L = m->config.n_layers, V = m->config.vocab_size;
        lb_model_free(m);
        lb_calib cal = random_calib(8, 32, V, 7);
        lb_quantize_params p;
        lb_quantize_default_params(&p);
        p.method = k == 3 ? LB_QUANT_AWQ_GPTQ : LB_QUANT_AWQ;
        p.sym = false;
        p.group_size = 32;
        p.n_threads = 2;
        p.moe_coverage = k == 2 ? LB_MOE_COVERAGE_ROUTED : LB_MOE_COVERAGE_ALL;
        char ref[400], out[400], pre[32], tmpname[64];
        snprintf(ref, sizeof ref, "%s-%zu", tmp_path("awq-full"), k);
        snprintf(tmpname, sizeof tmpname, "awq-resumed-%zu", k);
        snprintf(out, sizeof out, "%s", tmp_path(tmpname));
        cancel_at c = {NULL, false, 0, 0, true};
        p.progress.fn = cancel_cb;
        p.progress.user = &c;
        TH_CHECK_OK(lb_quantize_model(dirs[k], ref, &p, &cal, NULL));
        TH_CHECK_MSG(c.monotonic && c.total > 0 && c.done == c.total,
                     "%s: progress %llu of %llu (monotonic %d)", dirs[k],
                     (unsigned long long)c.done, (unsigned long long)c.total, c.monotonic);
        snprintf(pre, sizeof pre, "layer 2/%d", L);
        c = (cancel_at){pre, false, 0, 0, true};
        TH_CHECK_FAILS(lb_quantize_model(dirs[k], out, &p, &cal, NULL), LB_ERR_CANCELLED);
        TH_CHECK(c.fired);
        c.prefix = NULL;
        p.resume = true;
        lb_quantize_report rep;
        TH_CHECK_OK(lb_quantize_model(dirs[k], out, &p, &cal, &rep));
        TH_CHECK_INT(rep.layers_resumed, 1);
        lb_quantize_report_free(&rep);
        char a[800], b[800];
        snprintf(a, sizeof a, "%s/model.safetensors", ref);
        snprintf(b, sizeof b, "%s/model.safetensors", out);
        TH_CHECK_MSG(files_equal(a, b), "%s: model.safetensors differs after resume", dirs[k]);
        lb_calib_free(&cal);
    }
}

/* A Phi-3 model without grouped-query attention (the v rows of the fused
 * qkv_proj -> o_proj group applies), random F32 weights. */
static const char *make_phi3_mha(void) {
    const char *dir = tmp_path("phi3-mha");
    mkdir(dir, 0755);
    char p[800];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    if (!f) return dir;
    fprintf(f, "{\"architectures\": [\"Phi3ForCausalLM\"], \"model_type\": \"phi3\", "
               "\"hidden_size\": 64, \"intermediate_size\": 96, \"num_attention_heads\": 2, "
               "\"num_key_value_heads\": 2, \"num_hidden_layers\": 2, \"vocab_size\": 256, "
               "\"max_position_embeddings\": 256, \"original_max_position_embeddings\": 4096, "
               "\"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, \"hidden_act\": \"silu\", "
               "\"tie_word_embeddings\": false, \"torch_dtype\": \"float32\"}\n");
    fclose(f);
    rw_begin();
#define ADD(name, d0, d1, scale, base) rw_add(name, d0, d1, scale, base)
    ADD("model.embed_tokens.weight", 256, 64, 1.0, 0.0);
    ADD("lm_head.weight", 256, 64, 0.3, 0.0);
    ADD("model.norm.weight", 64, 0, 0.3, 1.0);
    for (int l = 0; l < 2; l++) {
        char n[112];
#define LN(s) (snprintf(n, sizeof n, "model.layers.%d.%s", l, s), n)
        ADD(LN("input_layernorm.weight"), 64, 0, 0.4, 1.0);
        ADD(LN("post_attention_layernorm.weight"), 64, 0, 0.4, 1.0);
        ADD(LN("self_attn.qkv_proj.weight"), 192, 64, 0.25, 0.0);
        ADD(LN("self_attn.o_proj.weight"), 64, 64, 0.25, 0.0);
        ADD(LN("mlp.gate_up_proj.weight"), 192, 64, 0.25, 0.0);
        ADD(LN("mlp.down_proj.weight"), 64, 96, 0.25, 0.0);
#undef LN
    }
#undef ADD
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    rw_end(p);
    return dir;
}

/* Without grouped-query attention (no golden logits for these): random
 * scales folded into every group, v -> o included (Phi-3: the v rows of
 * qkv_proj; Qwen2-MoE: with the v bias), keep lowbit's own logits (whose
 * forward test_arch checks against transformers) within 1e-3. */
static void test_fold_mha(void) {
    char d1[400], d2[400];
    snprintf(d1, sizeof d1, "%s", make_phi3_mha());
    snprintf(d2, sizeof d2, "%s", make_qwen2moe_mha());
    const char *dirs[] = {d1, d2};
    const int want[] = {2 * 4, 2 * (3 + 4 + 1)};
    for (int k = 0; k < 2; k++) {
        lb_model *ref = NULL, *m = NULL;
        TH_CHECK_OK(lb_model_load(dirs[k], NULL, &ref));
        TH_CHECK_OK(lb_model_load(dirs[k], NULL, &m));
        if (!ref || !m) break;
        lb_calib cal = random_calib(4, 32, 256, 3);
        lb_quantize_params qp;
        lb_quantize_default_params(&qp);
        qp.method = LB_QUANT_AWQ;
        qp.group_size = 32;
        qp.sym = false;
        qp.n_threads = 2;
        n_calls = 0;
        qz_awq_fold_test = random_scales;
        lb_status s = lb_quantize_model_inplace(m, &qp, &cal, NULL);
        qz_awq_fold_test = NULL;
        TH_CHECK_MSG(s == LB_OK, "%s: %s", dirs[k], lb_last_error());
        TH_CHECK_MSG(n_calls == want[k], "%s: %d groups, want %d", dirs[k], n_calls, want[k]);
        int32_t ids[64];
        for (int i = 0; i < 64; i++) ids[i] = (i * 53 + 7) % 256;
        float *a = logits64(ref, ids, 64), *b = logits64(m, ids, 64);
        if (a && b) {
            const double d = max_diff(a, b, (size_t)64 * 256);
            fprintf(stderr, "  %-32s %2d groups folded (v -> o too): max |logit diff| %.2e\n",
                    dirs[k], n_calls, d);
            TH_CHECK_MSG(d <= LOGIT_TOL, "%s: folded logits differ by %g", dirs[k], d);
        }
        free(a);
        free(b);
        lb_calib_free(&cal);
        lb_model_free(ref);
        lb_model_free(m);
    }
}

static void test_routed_empty_experts(void) {
    for (int method = 0; method < 2; method++) {
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(DATA "qwen3moe-random", NULL, &m));
        if (!m) return;
        /* 2 tokens, top-2 of 8 experts: at least 4 experts get none */
        lb_calib cal = random_calib(1, 2, m->config.vocab_size, 3);
        lb_quantize_params qp;
        lb_quantize_default_params(&qp);
        qp.method = method ? LB_QUANT_AWQ_GPTQ : LB_QUANT_AWQ;
        qp.group_size = 32;
        qp.sym = false;
        qp.n_threads = 2;
        qp.awq_min_tokens = 1;
        qp.moe_min_tokens = 1;
        qp.moe_coverage = LB_MOE_COVERAGE_ROUTED;
        lb_quantize_report rep;
        lb_status s = lb_quantize_model_inplace(m, &qp, &cal, &rep);
        TH_CHECK_MSG(s == LB_OK, "%s: %s", method ? "awq+gptq" : "awq", lb_last_error());
        int starved = 0, searched = 0, gate_noted = 0;
        for (int i = 0; s == LB_OK && i < rep.n_modules; i++) {
            const lb_quantize_module_report *r = &rep.modules[i];
            if (strstr(r->name, "experts.") && strstr(r->name, "gate_proj") &&
                strstr(r->note, "0 calibration tokens < 1: no clip search") && !r->awq_plain)
                gate_noted++;
            if (!strstr(r->name, "experts.") || !strstr(r->name, "down_proj")) continue;
            if (strstr(r->note, "0 calibration tokens") && r->awq_plain) starved++;
            else if (r->awq_ratio >= 0.0) searched++;
            TH_CHECK_MSG(r->quantized, "%s not quantized", r->name);
        }
        /* 3 layers x 8 experts; each layer routes 2 tokens to <= 4 */
        fprintf(stderr, "  routed, 2 tokens (%s): %d expert down_proj without tokens "
                "(reported), %d searched\n", method ? "awq+gptq" : "awq", starved, searched);
        TH_CHECK(starved >= 3 * 4);
        if (!method) TH_CHECK_INT(gate_noted, starved); /* awq+gptq: RTN notes */
        TH_CHECK(searched >= 3 && starved + searched == 24);
        if (s == LB_OK) lb_quantize_report_free(&rep);
        int32_t ids[8] = {1, 5, 9, 13, 17, 21, 25, 29};
        float *lg = logits64(m, ids, 8);
        bool fin = lg != NULL;
        for (int i = 0; lg && i < 8 * m->config.vocab_size; i++) fin = fin && isfinite(lg[i]);
        TH_CHECK_MSG(fin, "non-finite logits after routed AWQ with empty experts");
        free(lg);
        lb_calib_free(&cal);
        lb_model_free(m);
    }
}

int main(void) {
    TH_RUN(test_fold_invariance);
    TH_RUN(test_awq_vs_rtn);
    TH_RUN(test_fold_mha);
    TH_RUN(test_ckpt_equals_inplace);
    TH_RUN(test_resume_arch);
    TH_RUN(test_routed_empty_experts);
    qt_cleanup();
    return th_report();
}
