/*
 * Model loading and forward pass against transformers 5.12 float32 logits
 * (../shared/reference/logits for tinystories-656k, and the random models
 * in ../shared/models/random, with both config styles), plus internal
 * consistency (prefill vs decode, layer-by-layer, weight swap, truncate)
 * and bad-input errors.
 */
#include "th.h"

#include "lowbit/config.h"
#include "lowbit/file.h"
#include "lowbit/model.h"
#include "lowbit/safetensors.h"
#include "model/model_internal.h"

#include <cjson/cJSON.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOGIT_TOL 1e-3

static const char *random_models[] = {
    "qwen2-random", "qwen3-random", "llama-gqa-llama3rope-bf16-random",
    "llama-tied-fp16-random"};

static cJSON *read_json(const char *path) {
    size_t n;
    char *s = th_read_bin(path, &n);
    if (!s) return NULL;
    cJSON *j = cJSON_ParseWithLength(s, n);
    free(s);
    return j;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as a failure */
    }
    return m;
}

static bool copy_file(const char *src, const char *dst) {
    size_t n;
    void *p = th_read_bin(src, &n);
    if (!p) return false;
    FILE *f = fopen(dst, "wb");
    bool ok = f && fwrite(p, 1, n, f) == n;
    if (f) fclose(f);
    free(p);
    return ok;
}

/* Run ids through the model (all at once) and compare with ref logits. */
static double run_and_compare(lb_model *m, const int32_t *ids, int32_t n,
                              const float *ref) {
    lb_context *ctx = NULL;
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = n + 8;
    cp.n_threads = 2;
    TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    if (!ctx) return INFINITY;
    size_t V = (size_t)m->config.vocab_size;
    float *lg = malloc((size_t)n * V * sizeof(float));
    TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, lg, LB_LOGITS_ALL));
    double d = max_abs_diff(lg, ref, (size_t)n * V);
    free(lg);
    lb_context_free(ctx);
    return d;
}

static void test_tinystories_reference(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load_hf(th_shared("models/tinystories-656k"), NULL,
                                 &m));
    if (!m) return;
    TH_CHECK_INT(m->config.arch, LB_ARCH_LLAMA);
    TH_CHECK_INT(m->config.n_kv_heads, 4);
    TH_CHECK(m->config.tie_word_embeddings);
    TH_CHECK(m->tok_embd.data == m->output.data);
    cJSON *cases = read_json(th_shared("reference/logits/cases.json"));
    TH_CHECK(cases != NULL);
    int nc = 0;
    for (cJSON *c = cases ? cases->child : NULL; c; c = c->next, nc++) {
        char p[256];
        int idx = cJSON_GetObjectItem(c, "index")->valueint;
        snprintf(p, sizeof p, "reference/logits/prompt%d.ids.i32", idx);
        size_t nb = 0, nl = 0;
        int32_t *ids = th_read_bin(th_shared(p), &nb);
        snprintf(p, sizeof p, "reference/logits/prompt%d.logits.f32", idx);
        float *ref = th_read_bin(th_shared(p), &nl);
        int32_t n = (int32_t)(nb / 4);
        TH_CHECK(ids && ref && nl == (size_t)n * 2048 * 4);
        TH_CHECK_INT(n, cJSON_GetObjectItem(c, "n_tokens")->valueint);
        if (ids && ref) {
            double d = run_and_compare(m, ids, n, ref);
            fprintf(stderr, "  tinystories-656k prompt%d (%d tokens): max "
                    "|logit diff| = %.3g\n", idx, n, d);
            TH_CHECK_NEAR(d, 0, LOGIT_TOL);
        }
        free(ids);
        free(ref);
    }
    TH_CHECK_INT(nc, 4);
    cJSON_Delete(cases);
    lb_model_free(m);
}

/* lb_model_release_layer / _tensor on an HF load (a file mapping): the
 * layers' touched pages leave the RSS and the next forward gives the same
 * logits bit for bit (the pages are read from the file again); likewise
 * lb_context_release_kv for a layer's KV cache and
 * lb_context_release_scratch for the forward's buffers. */
static void test_release_pages(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load_hf(th_shared("models/tinystories-656k"), NULL,
                                 &m));
    if (!m) return;
    enum { N = 16 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)(i * 37 % 2048);
    const size_t V = (size_t)m->config.vocab_size;
    float *a = malloc(N * V * sizeof(float)), *b = malloc(N * V * sizeof(float));
    lb_context *ctx = NULL;
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = N;
    cp.n_threads = 1;
    TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    TH_CHECK_OK(lb_model_forward(ctx, ids, N, 0, a, LB_LOGITS_ALL));
    size_t layer_bytes = 0;
    for (int l = 0; l < m->config.n_layers; l++)
        for (int i = 0; i < LB_LINEAR_COUNT; i++)
            layer_bytes += m->layers[l].w[i].nbytes;
    const long r0 = th_rss_pages();
    for (int l = 0; l < m->config.n_layers; l++) lb_model_release_layer(m, l);
    lb_model_release_layer(m, m->config.n_layers); /* out of range: nothing */
    const long r1 = th_rss_pages();
    const long want = (long)(layer_bytes / (size_t)sysconf(_SC_PAGESIZE)) / 2;
    TH_CHECK_MSG(r0 - r1 >= want, "RSS %ld -> %ld pages releasing %zu bytes "
                 "of layers", r0, r1, layer_bytes);
    lb_model_release_tensor(m, &m->tok_embd);
    lb_context_free(ctx);
    ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    TH_CHECK_OK(lb_model_forward(ctx, ids, N, 0, b, LB_LOGITS_ALL));
    TH_CHECK(memcmp(a, b, N * V * sizeof(float)) == 0);
    lb_context_free(ctx);
    free(a);
    free(b);

    /* lb_context_release_kv: layer 0's K/V pages (2 x 32 here) leave the
     * RSS, and the layer's forward from position 0 gives the same bits */
    enum { T = 512 };
    const size_t nx = (size_t)T * (size_t)m->config.hidden_size;
    int32_t tok[T];
    for (int i = 0; i < T; i++) tok[i] = (int32_t)(i * 7 % 2048);
    float *x = malloc(nx * sizeof(float)), *h0 = malloc(nx * sizeof(float)),
          *h1 = malloc(nx * sizeof(float));
    cp.n_ctx = T;
    TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    TH_CHECK_OK(lb_model_embed(ctx, tok, T, x));
    memcpy(h0, x, nx * sizeof(float));
    TH_CHECK_OK(lb_layer_forward(ctx, 0, h0, T, 0));
    const long k0 = th_rss_pages();
    lb_context_release_kv(ctx, 0);
    lb_context_release_kv(ctx, m->config.n_layers); /* nothing */
    const long k1 = th_rss_pages();
    const long kv_pages = (long)(lb_context_kv_bytes(ctx) /
                                 (size_t)m->config.n_layers /
                                 (size_t)sysconf(_SC_PAGESIZE));
    TH_CHECK_MSG(k0 - k1 >= kv_pages * 3 / 4, "RSS %ld -> %ld pages "
                 "releasing %ld pages of KV", k0, k1, kv_pages);
    memcpy(h1, x, nx * sizeof(float));
    TH_CHECK_OK(lb_layer_forward(ctx, 0, h1, T, 0));
    TH_CHECK(memcmp(h0, h1, nx * sizeof(float)) == 0);

    /* lb_context_release_scratch: the layer forward's normed input and
     * query/output buffers ([T, hidden] f32 each, touched above) leave the
     * RSS, and the next forward gives the same bits */
    const long s0 = th_rss_pages();
    lb_context_release_scratch(ctx);
    const long s1 = th_rss_pages();
    const long sc_pages = (long)(2 * nx * sizeof(float) /
                                 (size_t)sysconf(_SC_PAGESIZE));
    TH_CHECK_MSG(s0 - s1 >= sc_pages / 2, "RSS %ld -> %ld pages releasing "
                 "%ld pages of scratch", s0, s1, sc_pages);
    memcpy(h1, x, nx * sizeof(float));
    TH_CHECK_OK(lb_layer_forward(ctx, 0, h1, T, 0));
    TH_CHECK(memcmp(h0, h1, nx * sizeof(float)) == 0);
    lb_context_release_scratch(NULL); /* nothing */
    lb_context_free(ctx);
    free(x);
    free(h0);
    free(h1);
    lb_model_free(m);
}

/* Compare one model dir (possibly a temp copy) on seq16 and seq64. */
static void check_random_model(const char *dir, const char *ref_dir,
                               const char *label) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load_hf(dir, NULL, &m));
    if (!m) return;
    for (int s = 0; s < 2; s++) {
        const char *seq = s ? "seq64" : "seq16";
        char p[512];
        size_t nb = 0, nl = 0;
        snprintf(p, sizeof p, "%s/%s.ids.i32", ref_dir, seq);
        int32_t *ids = th_read_bin(p, &nb);
        snprintf(p, sizeof p, "%s/%s.logits.f32", ref_dir, seq);
        float *ref = th_read_bin(p, &nl);
        int32_t n = (int32_t)(nb / 4);
        TH_CHECK(ids && ref &&
                 nl == (size_t)n * (size_t)m->config.vocab_size * 4);
        if (ids && ref) {
            double d = run_and_compare(m, ids, n, ref);
            fprintf(stderr, "  %-44s %s: max |logit diff| = %.3g\n", label,
                    seq, d);
            TH_CHECK_NEAR(d, 0, LOGIT_TOL);
        }
        free(ids);
        free(ref);
    }
    lb_model_free(m);
}

static void test_random_models_v5_config(void) {
    for (size_t i = 0; i < sizeof random_models / sizeof *random_models; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "models/random/%s", random_models[i]);
        char label[128];
        snprintf(label, sizeof label, "%s (config.json)", random_models[i]);
        check_random_model(th_shared(rel), th_shared(rel), label);
    }
}

/* Temp copy of a model dir with config.v4-style.json as config.json. */
static void make_v4_copy(const char *src, const char *dst) {
    mkdir(dst, 0755);
    static const char *files[] = {"model.safetensors", "generation_config.json"};
    char a[768], b[768];
    for (size_t i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/%s", src, files[i]);
        snprintf(b, sizeof b, "%s/%s", dst, files[i]);
        TH_CHECK(copy_file(a, b));
    }
    snprintf(a, sizeof a, "%s/config.v4-style.json", src);
    snprintf(b, sizeof b, "%s/config.json", dst);
    TH_CHECK(copy_file(a, b));
}

static void test_random_models_v4_config(void) {
    for (size_t i = 0; i < sizeof random_models / sizeof *random_models; i++) {
        char rel[256], dst[512], label[128];
        snprintf(rel, sizeof rel, "models/random/%s", random_models[i]);
        snprintf(dst, sizeof dst, "%s/v4-%s", th_tmpdir(), random_models[i]);
        make_v4_copy(th_shared(rel), dst);
        snprintf(label, sizeof label, "%s (config.v4-style)", random_models[i]);
        check_random_model(dst, th_shared(rel), label);
    }
}

static void test_config_fields(void) {
    lb_model_config a, b;
    TH_CHECK_OK(lb_model_config_load_dir(
        th_shared("models/random/llama-gqa-llama3rope-bf16-random"), &a));
    TH_CHECK_INT(a.rope_scaling, LB_ROPE_SCALING_LLAMA3);
    TH_CHECK_NEAR(a.rope_factor, 8.0, 0);
    TH_CHECK_NEAR(a.rope_low_freq_factor, 1.0, 0);
    TH_CHECK_NEAR(a.rope_high_freq_factor, 4.0, 0);
    TH_CHECK_INT(a.rope_original_max_position_embeddings, 32);
    TH_CHECK_INT(a.n_kv_heads, 2);
    TH_CHECK_INT(a.head_dim, 16);
    TH_CHECK_INT(a.n_eos, 1);
    TH_CHECK_INT(a.eos_token_ids[0], 2);
    TH_CHECK_INT(a.bos_token_id, 1);
    /* inv_freq as transformers computed it (meta.json rope_check) */
    cJSON *meta = read_json(th_shared(
        "models/random/llama-gqa-llama3rope-bf16-random/meta.json"));
    cJSON *rc = meta ? cJSON_GetObjectItem(meta, "rope_check") : NULL;
    cJSON *want = rc ? cJSON_GetObjectItem(
                           rc, "inv_freq_llama3 (float32, as computed by "
                               "transformers)")
                     : NULL;
    TH_CHECK(want && cJSON_GetArraySize(want) == 8);
    float inv[8];
    lb_rope_inv_freq(&a, inv);
    int i = 0;
    for (cJSON *x = want ? want->child : NULL; x && i < 8; x = x->next, i++)
        TH_CHECK_NEAR(inv[i], x->valuedouble, 1e-7 * fabs(x->valuedouble));
    /* default (unscaled) frequencies, also from transformers */
    cJSON *dflt = rc ? cJSON_GetObjectItem(rc, "inv_freq_default_theta1e4")
                     : NULL;
    TH_CHECK(dflt && cJSON_GetArraySize(dflt) == 8);
    lb_rope_scaling saved = a.rope_scaling;
    a.rope_scaling = LB_ROPE_SCALING_NONE;
    lb_rope_inv_freq(&a, inv);
    i = 0;
    for (cJSON *x = dflt ? dflt->child : NULL; x && i < 8; x = x->next, i++)
        TH_CHECK_NEAR(inv[i], x->valuedouble, 1e-7 * fabs(x->valuedouble));
    /* linear: theta^(-2i/d) / factor */
    a.rope_scaling = LB_ROPE_SCALING_LINEAR;
    a.rope_factor = 4.0;
    lb_rope_inv_freq(&a, inv);
    for (i = 0; i < 8; i++)
        TH_CHECK_NEAR(inv[i], pow(10000.0, -2.0 * i / 16.0) / 4.0,
                      1e-6 * pow(10000.0, -2.0 * i / 16.0));
    a.rope_scaling = saved;
    cJSON_Delete(meta);
    lb_model_config_clear(&a);

    TH_CHECK_OK(lb_model_config_load_dir(th_shared("models/random/qwen2-random"),
                                         &b));
    TH_CHECK_INT(b.arch, LB_ARCH_QWEN2);
    TH_CHECK(b.attention_bias); /* Qwen2: always */
    TH_CHECK_NEAR(b.rope_theta, 1e6, 0);
    TH_CHECK_INT(b.sliding_window, 0);
    lb_model_config_clear(&b);

    /* eos list, Mistral sliding window, linear scaling, quantization_config */
    const char *j =
        "{\"architectures\":[\"MistralForCausalLM\"],\"hidden_size\":64,"
        "\"intermediate_size\":128,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"vocab_size\":100,\"sliding_window\":4096,\"eos_token_id\":[2,7],"
        "\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0},"
        "\"quantization_config\":{\"quant_method\":\"gptq\",\"bits\":4}}";
    TH_CHECK_OK(lb_model_config_parse(j, strlen(j), "t", &a));
    TH_CHECK_INT(a.arch, LB_ARCH_MISTRAL);
    TH_CHECK_INT(a.head_dim, 16);
    TH_CHECK_INT(a.sliding_window, 4096);
    TH_CHECK_INT(a.n_eos, 2);
    TH_CHECK_INT(a.eos_token_ids[1], 7);
    TH_CHECK_INT(a.rope_scaling, LB_ROPE_SCALING_LINEAR);
    TH_CHECK_NEAR(a.rope_factor, 2.0, 0);
    TH_CHECK_NEAR(a.rope_theta, 10000.0, 0);
    TH_CHECK(a.has_quantization_config);
    TH_CHECK_STR(a.quant_method, "gptq");
    TH_CHECK(a.quantization_config_json &&
             strstr(a.quantization_config_json, "\"bits\":4"));
    lb_model_config copy;
    TH_CHECK_OK(lb_model_config_copy(&copy, &a));
    TH_CHECK(copy.quantization_config_json != a.quantization_config_json);
    lb_model_config_clear(&copy);
    lb_model_config_clear(&a);

    /* errors */
    const char *bad_arch = "{\"architectures\":[\"GPT2LMHeadModel\"]}";
    TH_CHECK_FAILS(lb_model_config_parse(bad_arch, strlen(bad_arch), "c", &a),
                   LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "GPT2LMHeadModel") != NULL);
    const char *bad_rope =
        "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
        "\"intermediate_size\":128,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"vocab_size\":100,"
        "\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":4}}";
    TH_CHECK_FAILS(lb_model_config_parse(bad_rope, strlen(bad_rope), "c", &a),
                   LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "yarn") != NULL);
    const char *missing = "{\"architectures\":[\"LlamaForCausalLM\"],"
                          "\"vocab_size\":10,\"hidden_size\":64}";
    TH_CHECK_FAILS(lb_model_config_parse(missing, strlen(missing), "c", &a),
                   LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "intermediate_size") != NULL);
    const char *gqa =
        "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
        "\"intermediate_size\":128,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":3,"
        "\"vocab_size\":100}";
    TH_CHECK_FAILS(lb_model_config_parse(gqa, strlen(gqa), "c", &a),
                   LB_ERR_FORMAT);
    TH_CHECK_FAILS(lb_model_config_parse("{", 1, "c", &a), LB_ERR_FORMAT);
}

static void test_prefill_vs_decode(void) {
    const char *models[] = {"models/random/qwen3-random",
                            "models/random/llama-gqa-llama3rope-bf16-random"};
    for (int mi = 0; mi < 2; mi++) {
        char rel[256];
        snprintf(rel, sizeof rel, "%s/seq64.ids.i32", models[mi]);
        size_t nb = 0;
        int32_t *ids = th_read_bin(th_shared(rel), &nb);
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(th_shared(models[mi]), NULL, &m));
        if (!m || !ids) {
            free(ids);
            lb_model_free(m);
            continue;
        }
        int32_t n = (int32_t)(nb / 4);
        size_t V = (size_t)m->config.vocab_size;
        lb_context *ctx = NULL;
        lb_context_params cp = lb_context_default_params();
        cp.n_ctx = 80;
        cp.n_threads = 2;
        cp.n_batch = 4; /* scratch must grow for the prefill */
        TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
        float *all = malloc((size_t)n * V * 4), *one = malloc(V * 4);
        TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, all, LB_LOGITS_ALL));
        TH_CHECK_INT(lb_context_n_past(ctx), n);
        lb_context_reset(ctx);
        double worst = 0;
        for (int32_t t = 0; t < n; t++) {
            TH_CHECK_OK(lb_model_forward(ctx, ids + t, 1, t, one,
                                         LB_LOGITS_LAST));
            double d = max_abs_diff(one, all + (size_t)t * V, V);
            if (d > worst) worst = d;
        }
        fprintf(stderr, "  %s: prefill vs decode max diff %.3g\n",
                models[mi], worst);
        TH_CHECK_NEAR(worst, 0, 1e-4);
        /* mixed: a chunk of 20, then 7, then the rest, last-only logits */
        lb_context_reset(ctx);
        TH_CHECK_OK(lb_model_forward(ctx, ids, 20, 0, NULL, LB_LOGITS_NONE));
        TH_CHECK_OK(lb_model_forward(ctx, ids + 20, 7, 20, one,
                                     LB_LOGITS_LAST));
        TH_CHECK_NEAR(max_abs_diff(one, all + 26 * V, V), 0, 1e-4);
        /* truncate and recompute a suffix */
        TH_CHECK_OK(lb_context_truncate(ctx, 10));
        TH_CHECK_OK(lb_model_forward(ctx, ids + 10, n - 10, 10, one,
                                     LB_LOGITS_LAST));
        TH_CHECK_NEAR(max_abs_diff(one, all + (size_t)(n - 1) * V, V), 0, 1e-4);
        /* range errors */
        TH_CHECK_FAILS(lb_model_forward(ctx, ids, 1, n + 1, one,
                                        LB_LOGITS_LAST),
                       LB_ERR_RANGE);
        TH_CHECK_FAILS(lb_model_forward(ctx, ids, 64, 40, one,
                                        LB_LOGITS_LAST),
                       LB_ERR_RANGE);
        int32_t bad = m->config.vocab_size;
        TH_CHECK_FAILS(lb_model_forward(ctx, &bad, 1, 0, one, LB_LOGITS_LAST),
                       LB_ERR_RANGE);
        TH_CHECK_FAILS(lb_context_truncate(ctx, 1000), LB_ERR_RANGE);
        free(all);
        free(one);
        free(ids);
        lb_context_free(ctx);
        lb_model_free(m);
    }
}

typedef struct hook_rec {
    int calls[8][LB_LINEAR_COUNT];
    int64_t in[LB_LINEAR_COUNT];
    double sum_q0; /* checksum of layer 0 q input */
    bool fail;
} hook_rec;

static lb_status rec_hook(void *user, int layer, lb_linear_id which,
                          const float *X, int64_t n, int64_t in) {
    hook_rec *r = user;
    if (layer < 8) r->calls[layer][which]++;
    r->in[which] = in;
    if (layer == 0 && which == LB_LINEAR_Q)
        for (int64_t i = 0; i < n * in; i++) r->sum_q0 += X[i];
    if (r->fail && which == LB_LINEAR_DOWN)
        return lb_set_error(LB_ERR_CANCELLED, "hook says stop");
    return LB_OK;
}

static void test_layer_by_layer(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared("models/random/qwen2-random"), NULL,
                              &m));
    size_t nb = 0;
    int32_t *ids = th_read_bin(th_shared("models/random/qwen2-random/"
                                         "seq16.ids.i32"), &nb);
    if (!m || !ids) {
        free(ids);
        lb_model_free(m);
        return;
    }
    int32_t n = (int32_t)(nb / 4);
    const lb_model_config *c = &m->config;
    size_t V = (size_t)c->vocab_size, dim = (size_t)c->hidden_size;
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, NULL, &ctx));
    float *full = malloc((size_t)n * V * 4), *step = malloc((size_t)n * V * 4);
    float *hidden = malloc((size_t)n * dim * 4);
    TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, full, LB_LOGITS_ALL));
    lb_context_reset(ctx);
    hook_rec rec;
    memset(&rec, 0, sizeof rec);
    lb_forward_hook hk = {rec_hook, &rec};
    lb_context_set_hook(ctx, &hk);
    TH_CHECK_OK(lb_model_embed(ctx, ids, n, hidden));
    /* embedding row = the stored F32 row */
    TH_CHECK(memcmp(hidden, (const float *)m->tok_embd.data + (size_t)ids[0] * dim,
                    dim * 4) == 0);
    for (int l = 0; l < c->n_layers; l++)
        TH_CHECK_OK(lb_layer_forward(ctx, l, hidden, n, 0));
    TH_CHECK_OK(lb_context_set_n_past(ctx, n));
    TH_CHECK_OK(lb_model_output_logits(ctx, hidden, n, step));
    TH_CHECK_NEAR(max_abs_diff(full, step, (size_t)n * V), 0, 0);
    for (int l = 0; l < c->n_layers; l++)
        for (int w = 0; w < LB_LINEAR_COUNT; w++) TH_CHECK_INT(rec.calls[l][w], 1);
    TH_CHECK_INT(rec.in[LB_LINEAR_Q], c->hidden_size);
    TH_CHECK_INT(rec.in[LB_LINEAR_O], c->n_heads * c->head_dim);
    TH_CHECK_INT(rec.in[LB_LINEAR_DOWN], c->intermediate_size);
    /* q input of layer 0 = RMSNorm(embedding) * input_layernorm */
    float *xn = malloc(dim * 4), *e = malloc(dim * 4);
    double want = 0;
    for (int32_t t = 0; t < n; t++) {
        memcpy(e, (const float *)m->tok_embd.data + (size_t)ids[t] * dim, dim * 4);
        lb_rmsnorm(xn, e, m->layers[0].attn_norm.data, (int64_t)dim,
                   c->rms_norm_eps);
        for (size_t i = 0; i < dim; i++) want += xn[i];
    }
    TH_CHECK_NEAR(rec.sum_q0, want, 1e-9 * (1 + fabs(want)));
    /* a failing hook aborts with its status */
    rec.fail = true;
    TH_CHECK_FAILS(lb_model_forward(ctx, ids, n, 0, full, LB_LOGITS_LAST),
                   LB_ERR_CANCELLED);
    lb_context_set_hook(ctx, NULL);

    /* swap q_proj of layer 1 for a copy: identical logits; zero it: not */
    const lb_tensor *wq = &m->layers[1].w[LB_LINEAR_Q];
    float *copy = lb_alloc(wq->nbytes);
    memcpy(copy, wq->data, wq->nbytes);
    lb_tensor t2 = *wq;
    t2.data = copy;
    TH_CHECK_OK(lb_model_set_linear(m, 1, LB_LINEAR_Q, &t2, copy));
    TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, step, LB_LOGITS_ALL));
    TH_CHECK_NEAR(max_abs_diff(full, step, (size_t)n * V), 0, 0);
    float *zero = lb_calloc(1, wq->nbytes);
    t2.data = zero;
    TH_CHECK_OK(lb_model_set_linear(m, 1, LB_LINEAR_Q, &t2, zero));
    TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, step, LB_LOGITS_ALL));
    TH_CHECK(max_abs_diff(full, step, (size_t)n * V) > 1e-3);
    t2.shape[0] = 7;
    TH_CHECK_FAILS(lb_model_set_linear(m, 1, LB_LINEAR_Q, &t2, NULL),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_model_set_linear(m, 99, LB_LINEAR_Q, &t2, NULL),
                   LB_ERR_RANGE);
    TH_CHECK_FAILS(lb_layer_forward(ctx, 99, hidden, n, 0), LB_ERR_RANGE);
    free(xn);
    free(e);
    free(full);
    free(step);
    free(hidden);
    free(ids);
    lb_context_free(ctx);
    lb_model_free(m);
}

/* lb_layer_forward_mlp from the residual a forward stopped at gate_proj's
 * input leaves gives the same bytes as the whole layer (calibration keeps
 * that residual, quantize.c h_kept); each layer of qwen2-random with 2
 * pool threads and on the caller's thread; refused on an ext layout. */
static lb_status stop_at_gate(void *user, int layer, lb_linear_id which,
                              const float *X, int64_t n, int64_t in) {
    (void)user;
    (void)layer;
    (void)X;
    (void)n;
    (void)in;
    return which == LB_LINEAR_GATE ? lb_set_error(LB_ERR_CANCELLED, "stop")
                                   : LB_OK;
}

/* keeps o_proj's and down_proj's inputs (lb_layer_forward_from) */
typedef struct keep_io {
    float *att, *act;
} keep_io;

static lb_status keep_inputs(void *user, int layer, lb_linear_id which,
                             const float *X, int64_t n, int64_t in) {
    keep_io *k = user;
    (void)layer;
    if (which == LB_LINEAR_O) memcpy(k->att, X, (size_t)(n * in) * 4);
    if (which == LB_LINEAR_DOWN) memcpy(k->act, X, (size_t)(n * in) * 4);
    return LB_OK;
}

static void test_layer_mlp_half(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared("models/random/qwen2-random"), NULL,
                              &m));
    size_t nb = 0;
    int32_t *ids = th_read_bin(th_shared("models/random/qwen2-random/"
                                         "seq16.ids.i32"), &nb);
    if (!m || !ids) {
        free(ids);
        lb_model_free(m);
        return;
    }
    const int32_t n = (int32_t)(nb / 4);
    const size_t dim = (size_t)m->config.hidden_size, sz = (size_t)n * dim * 4;
    const size_t qd = (size_t)m->config.n_heads * (size_t)m->config.head_dim,
                 ff = (size_t)m->config.intermediate_size;
    /* threads 1, 2; then 2 with bf16 products (where the CPU has them) */
    for (int run = 0; run < 3; run++) {
        lb_context_params cp = lb_context_default_params();
        cp.n_threads = run == 0 ? 1 : 2;
        cp.bf16_activations = run == 2;
        lb_context *ctx = NULL;
        TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
        if (run == 2 && ctx && !lb_context_bf16_active(ctx)) {
            lb_context_free(ctx);
            continue;
        }
        float *x = malloc(sz), *whole = malloc(sz), *half = malloc(sz),
              *from = malloc(sz);
        keep_io k = {malloc((size_t)n * qd * 4), malloc((size_t)n * ff * 4)};
        TH_CHECK_OK(lb_model_embed(ctx, ids, n, x));
        int differ = 0, differ_o = 0, differ_down = 0;
        for (int l = 0; ctx && l < m->config.n_layers; l++) {
            memcpy(whole, x, sz);
            lb_forward_hook keep = {keep_inputs, &k};
            lb_context_set_hook(ctx, &keep);
            TH_CHECK_OK(lb_layer_forward(ctx, l, whole, n, 0));
            lb_context_set_hook(ctx, NULL);
            /* from o_proj's input: x + o_proj(att), then the MLP */
            memcpy(from, x, sz);
            TH_CHECK_OK(lb_layer_forward_from(ctx, l, LB_LAYER_ENTRY_O, k.att,
                                              from, n, 0));
            differ_o += memcmp(from, whole, sz) != 0;
            memcpy(half, x, sz);
            lb_forward_hook hk = {stop_at_gate, NULL};
            lb_context_set_hook(ctx, &hk);
            TH_CHECK_FAILS(lb_layer_forward(ctx, l, half, n, 0),
                           LB_ERR_CANCELLED);
            lb_context_set_hook(ctx, NULL);
            TH_CHECK(memcmp(half, x, sz) != 0); /* h = x + o, not x */
            /* from down_proj's input: h + down_proj(act) */
            memcpy(from, half, sz);
            TH_CHECK_OK(lb_layer_forward_from(ctx, l, LB_LAYER_ENTRY_DOWN,
                                              k.act, from, n, 0));
            differ_down += memcmp(from, whole, sz) != 0;
            TH_CHECK_OK(lb_layer_forward_mlp(ctx, l, half, n, 0));
            differ += memcmp(half, whole, sz) != 0;
            memcpy(x, whole, sz);
        }
        TH_CHECK_INT(differ, 0);
        TH_CHECK_INT(differ_o, 0);
        TH_CHECK_INT(differ_down, 0);
        TH_CHECK_FAILS(lb_layer_forward_mlp(ctx, 99, half, n, 0), LB_ERR_RANGE);
        TH_CHECK_FAILS(lb_layer_forward_from(ctx, 0, LB_LAYER_ENTRY_DOWN, NULL,
                                             half, n, 0),
                       LB_ERR_INVALID_ARG);
        TH_CHECK_FAILS(lb_layer_forward_from(ctx, 0, (lb_layer_entry)7, k.act,
                                             half, n, 0),
                       LB_ERR_INVALID_ARG);
        free(x);
        free(whole);
        free(half);
        free(from);
        free(k.att);
        free(k.act);
        lb_context_free(ctx);
    }
    free(ids);
    lb_model_free(m);
    /* Gemma / MoE layouts (forward_ext.c) refuse it */
    TH_CHECK_OK(lb_model_load("tests/data/arch/mixtral-random", NULL, &m));
    if (m) {
        lb_context *ctx = NULL;
        TH_CHECK_OK(lb_context_create(m, NULL, &ctx));
        float *h = calloc((size_t)4 * (size_t)m->config.hidden_size, 4);
        TH_CHECK_FAILS(lb_layer_forward_mlp(ctx, 0, h, 4, 0),
                       LB_ERR_UNSUPPORTED);
        free(h);
        lb_context_free(ctx);
        lb_model_free(m);
    }
}

/* ---- bad checkpoints ---------------------------------------------------- */

/* Write a copy of tinystories-656k into dir, with tensor `drop` left out
 * and tensor `reshape` given a wrong first dimension (either may be NULL),
 * and config text `config` (NULL = the original). */
static void make_broken(const char *dir, const char *drop, const char *reshape,
                        const char *config) {
    mkdir(dir, 0755);
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(th_shared("models/tinystories-656k"), &st));
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_writer_create(&w));
    for (size_t i = 0; st && i < lb_st_count(st); i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        if (drop && strcmp(t->name, drop) == 0) continue;
        int64_t sh[LB_MAX_DIMS];
        memcpy(sh, t->shape, sizeof sh);
        if (reshape && strcmp(t->name, reshape) == 0) {
            sh[0] /= 2; /* half the rows: same dtype, consistent size */
            TH_CHECK_OK(lb_st_writer_add(w, t->name, t->type, t->n_dims, sh,
                                         t->data));
        } else {
            TH_CHECK_OK(lb_st_writer_add(w, t->name, t->type, t->n_dims, sh,
                                         t->data));
        }
    }
    char p[768];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    TH_CHECK_OK(lb_st_writer_write_file(w, p));
    lb_st_writer_free(w);
    lb_st_close(st);
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (config) {
        FILE *f = fopen(p, "w");
        fputs(config, f);
        fclose(f);
    } else {
        TH_CHECK(copy_file(th_shared("models/tinystories-656k/config.json"), p));
    }
}

static void test_bad_checkpoints(void) {
    char d[512];
    lb_model *m = NULL;

    snprintf(d, sizeof d, "%s/bad-missing", th_tmpdir());
    make_broken(d, "model.layers.1.mlp.up_proj.weight", NULL, NULL);
    TH_CHECK_FAILS(lb_model_load(d, NULL, &m), LB_ERR_NOT_FOUND);
    TH_CHECK(strstr(lb_last_error(), "model.layers.1.mlp.up_proj.weight"));
    TH_CHECK(m == NULL);

    snprintf(d, sizeof d, "%s/bad-shape", th_tmpdir());
    make_broken(d, NULL, "model.layers.0.self_attn.k_proj.weight", NULL);
    TH_CHECK_FAILS(lb_model_load(d, NULL, &m), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "model.layers.0.self_attn.k_proj.weight"));
    TH_CHECK(strstr(lb_last_error(), "expected shape [64, 128], got [32, 128]"));

    snprintf(d, sizeof d, "%s/bad-arch", th_tmpdir());
    make_broken(d, NULL, NULL,
                "{\"architectures\": [\"FalconForCausalLM\"], "
                "\"hidden_size\": 128}");
    TH_CHECK_FAILS(lb_model_load(d, NULL, &m), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "FalconForCausalLM"));

    /* untied config but no lm_head stored */
    snprintf(d, sizeof d, "%s/bad-untied", th_tmpdir());
    make_broken(d, NULL, NULL,
                "{\"architectures\": [\"LlamaForCausalLM\"], "
                "\"hidden_size\": 128, \"intermediate_size\": 384, "
                "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
                "\"num_key_value_heads\": 4, \"vocab_size\": 2048, "
                "\"tie_word_embeddings\": false}");
    TH_CHECK_FAILS(lb_model_load(d, NULL, &m), LB_ERR_NOT_FOUND);
    TH_CHECK(strstr(lb_last_error(), "model.embed_tokens.weight"));

    /* truncated safetensors */
    snprintf(d, sizeof d, "%s/bad-trunc", th_tmpdir());
    make_broken(d, NULL, NULL, NULL);
    char p[768];
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    TH_CHECK(truncate(p, 100000) == 0);
    TH_CHECK_FAILS(lb_model_load(d, NULL, &m), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "model.safetensors"));

    /* not a model at all */
    TH_CHECK_FAILS(lb_model_load(th_tmpdir(), NULL, &m), LB_ERR_NOT_FOUND);
    /* named .gguf without the GGUF magic (detection is by content) */
    snprintf(p, sizeof p, "%s/fake.gguf", th_tmpdir());
    FILE *ff = fopen(p, "wb");
    TH_CHECK(ff && fwrite("not a gguf file", 1, 15, ff) == 15);
    if (ff) fclose(ff);
    TH_CHECK_FAILS(lb_model_load(p, NULL, &m), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "GGUF"));
}


/* llama.cpp's converter permutes q/k rows so that RoPE can rotate adjacent
 * pairs (convert_hf_to_gguf.py LlamaModel.permute: reshape(n_head, 2,
 * hd/2, in).swapaxes(1, 2)). NORM mode on permuted rows must equal NEOX
 * mode on the original rows. */
static void permute_rows(lb_model *m, int layer, lb_linear_id which,
                         int n_head) {
    const lb_tensor *w = &m->layers[layer].w[which];
    int64_t rows = w->shape[0], cols = w->shape[1], hd = rows / n_head;
    const float *src = w->data;
    float *dst = lb_alloc((size_t)rows * (size_t)cols * sizeof(float));
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t a = 0; a < 2; a++)
            for (int64_t b = 0; b < hd / 2; b++)
                memcpy(dst + (h * hd + 2 * b + a) * cols,
                       src + (h * hd + a * (hd / 2) + b) * cols,
                       (size_t)cols * sizeof(float));
    lb_tensor t = *w;
    t.data = dst;
    TH_CHECK_OK(lb_model_set_linear(m, layer, which, &t, dst));
}

static void test_rope_norm_mode(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared("models/tinystories-656k"), NULL, &m));
    size_t nb = 0;
    int32_t *ids = th_read_bin(th_shared("reference/logits/prompt3.ids.i32"),
                               &nb);
    if (!m || !ids) {
        free(ids);
        lb_model_free(m);
        return;
    }
    int32_t n = (int32_t)(nb / 4);
    size_t V = (size_t)m->config.vocab_size;
    float *a = malloc((size_t)n * V * 4), *b = malloc((size_t)n * V * 4);
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, NULL, &ctx));
    TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, a, LB_LOGITS_ALL));
    for (int l = 0; l < m->config.n_layers; l++) {
        permute_rows(m, l, LB_LINEAR_Q, m->config.n_heads);
        permute_rows(m, l, LB_LINEAR_K, m->config.n_kv_heads);
    }
    /* permuted rows with HF rotation: wrong */
    TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, b, LB_LOGITS_ALL));
    TH_CHECK(max_abs_diff(a, b, (size_t)n * V) > 0.1);
    m->config.rope_mode = LB_ROPE_NORM;
    TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, b, LB_LOGITS_ALL));
    double d = max_abs_diff(a, b, (size_t)n * V);
    fprintf(stderr, "  NORM rope on permuted rows vs NEOX: max diff %.3g\n", d);
    /* the same floats: NORM mode stores the rotated heads in HF's order, so
     * attention sums q.k in the same order (lb_rope_apply) */
    TH_CHECK(d == 0.0);
    free(a);
    free(b);
    free(ids);
    lb_context_free(ctx);
    lb_model_free(m);
}

/* Sliding window (Mistral): with one layer and RoPE's relative positions,
 * position p with window W sees exactly tokens p-W+1..p, so its logits
 * equal those of the last of those W tokens run alone from position 0. */
static void test_sliding_window(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared("models/tinystories-656k"), NULL, &m));
    size_t nb = 0;
    int32_t *ids = th_read_bin(th_shared("reference/logits/prompt3.ids.i32"),
                               &nb);
    if (!m || !ids) {
        free(ids);
        lb_model_free(m);
        return;
    }
    m->config.n_layers = 1; /* a one-layer model from the first layer */
    const int32_t W = 5, n = 40;
    size_t V = (size_t)m->config.vocab_size;
    float *full = malloc((size_t)n * V * 4), *win = malloc(V * 4);
    lb_context *plain = NULL, *ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, NULL, &plain));
    TH_CHECK_OK(lb_model_forward(plain, ids, n, 0, full, LB_LOGITS_ALL));
    m->config.sliding_window = W;
    TH_CHECK_OK(lb_context_create(m, NULL, &ctx));
    float *sw = malloc((size_t)n * V * 4);
    TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, sw, LB_LOGITS_ALL));
    /* positions < W: identical to full attention */
    TH_CHECK_NEAR(max_abs_diff(sw, full, (size_t)W * V), 0, 0);
    double worst = 0;
    for (int32_t p = W; p < n; p++) {
        lb_context_reset(plain);
        TH_CHECK_OK(lb_model_forward(plain, ids + p - W + 1, W, 0, win,
                                     LB_LOGITS_LAST));
        double d = max_abs_diff(win, sw + (size_t)p * V, V);
        if (d > worst) worst = d;
    }
    fprintf(stderr, "  sliding window %d vs windowed re-run: max diff %.3g\n",
            (int)W, worst);
    TH_CHECK_NEAR(worst, 0, 1e-3);
    /* and it does change the logits beyond the window */
    TH_CHECK(max_abs_diff(sw + (size_t)W * V, full + (size_t)W * V,
                          (size_t)(n - W) * V) > 1e-3);
    m->config.n_layers = 2;
    free(full);
    free(win);
    free(sw);
    free(ids);
    lb_context_free(plain);
    lb_context_free(ctx);
    lb_model_free(m);
}

static void test_rmsnorm_values(void) {
    /* y = x / sqrt(mean(x^2) + eps) * w computed by hand:
     * x = (3, 4): mean(x^2) = 12.5 -> 1/sqrt(12.5) = 0.28284271 */
    float x[2] = {3, 4}, w[2] = {1, 2}, y[2];
    lb_rmsnorm(y, x, w, 2, 0.0f);
    TH_CHECK_NEAR(y[0], 3 * 0.282842712, 1e-6);
    TH_CHECK_NEAR(y[1], 2 * 4 * 0.282842712, 1e-6);
}

int main(void) {
    TH_RUN(test_rmsnorm_values);
    TH_RUN(test_config_fields);
    TH_RUN(test_tinystories_reference);
    TH_RUN(test_release_pages);
    TH_RUN(test_random_models_v5_config);
    TH_RUN(test_random_models_v4_config);
    TH_RUN(test_prefill_vs_decode);
    TH_RUN(test_layer_by_layer);
    TH_RUN(test_layer_mlp_half);
    TH_RUN(test_rope_norm_mode);
    TH_RUN(test_sliding_window);
    TH_RUN(test_bad_checkpoints);
    return th_report();
}
