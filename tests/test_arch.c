/*
 * test_arch.c — the issue-13 architectures against transformers 5.12:
 * tests/data/arch/<model> (random small checkpoints made by
 * tests/data/arch/gen_arch_models.py, float32) must give transformers'
 * float32 logits within 1e-3 at every position of a 64-token sequence (one
 * prefill pass, and again token by token through the decode path, f32 and
 * f16 KV cache), and its greedy continuation token for token. Bad inputs
 * (expert count, top-k, missing expert, router shape, dense layer with a
 * router) must fail naming the key or tensor.
 */
#include "th.h"
#include "lowbit/model.h"
#include "lowbit/file.h"
#include "lowbit/safetensors.h"
#include "lowbit/export.h"
#include "lowbit/gguf.h"
#include "lowbit/quantize.h"
#include "lowbit/batch.h"
#include "lowbit/lora.h"
#include "lowbit/sample.h"

#include <cjson/cJSON.h>
#include <sys/stat.h>
#include <unistd.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DATA "tests/data/arch/"
#define LOGIT_TOL 1e-3

static const char *models[] = {"gemma2-random",  "gemma3-random",
                               "phi3-random",    "phi3-longrope-random",
                               "qwen3moe-random", "qwen2moe-random",
                               "mixtral-random", "qwen3moe-mlponly-random",
                               "qwen2moe-step2-random"};

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - (double)b[i]);
        if (!(x <= d)) d = x; /* NaN propagates */
    }
    return d;
}

/* name: the golden data in DATA/name; load_dir: the checkpoint to load
 * (NULL: the same directory) */
static void check_model_dir(const char *name, const char *load_dir) {
    char dir[256], p[300];
    snprintf(dir, sizeof dir, DATA "%s", name);
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(load_dir ? load_dir : dir, NULL, &m));
    if (!m) return;
    const int32_t V = m->config.vocab_size;
    size_t nb = 0, nl = 0, np = 0, ng = 0;
    snprintf(p, sizeof p, "%s/seq64.ids.i32", dir);
    int32_t *ids = th_read_bin(p, &nb);
    snprintf(p, sizeof p, "%s/seq64.logits.f32", dir);
    float *ref = th_read_bin(p, &nl);
    snprintf(p, sizeof p, "%s/greedy.prompt.i32", dir);
    int32_t *prompt = th_read_bin(p, &np);
    snprintf(p, sizeof p, "%s/greedy.ids.i32", dir);
    int32_t *greedy = th_read_bin(p, &ng);
    const int32_t n = (int32_t)(nb / 4);
    TH_CHECK(ids && ref && prompt && greedy && n == 64 &&
             nl == (size_t)n * (size_t)V * 4);
    float *lg = malloc((size_t)n * (size_t)V * sizeof(float));
    float *pre = malloc((size_t)n * (size_t)V * sizeof(float));
    if (!ids || !ref || !prompt || !greedy || !lg || !pre || n != 64) goto out;
    for (int kv = 0; kv < 2; kv++) {
        lb_context_params cp = lb_context_default_params();
        cp.n_ctx = 128;
        cp.n_threads = 2;
        cp.kv_type = kv ? LB_TYPE_F16 : LB_TYPE_F32;
        lb_context *ctx = NULL;
        TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
        if (!ctx) break;
        /* one prefill pass */
        TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, lg, LB_LOGITS_ALL));
        double d = max_diff(lg, ref, (size_t)n * V);
        fprintf(stderr, "  %-22s kv %s prefill: max |logit diff| = %.3g\n",
                name, kv ? "f16" : "f32", d);
        /* the f16 cache rounds K/V: only its own prefill is the oracle
         * for its decode (random weights amplify the rounding) */
        if (!kv) TH_CHECK_NEAR(d, 0, LOGIT_TOL);
        memcpy(pre, lg, (size_t)n * V * sizeof(float));
        /* token by token (decode path, the KV cache) */
        lb_context_reset(ctx);
        double dd = 0, dp = 0;
        for (int32_t t = 0; t < n; t++) {
            TH_CHECK_OK(lb_model_forward(ctx, ids + t, 1, t, lg, LB_LOGITS_LAST));
            double x = max_diff(lg, ref + (size_t)t * V, (size_t)V);
            if (!(x <= dd)) dd = x;
            x = max_diff(lg, pre + (size_t)t * V, (size_t)V);
            if (!(x <= dp)) dp = x;
        }
        fprintf(stderr, "  %-22s kv %s decode:  max |logit diff| = %.3g "
                "(vs prefill %.3g)\n", name, kv ? "f16" : "f32", dd, dp);
        if (!kv) TH_CHECK_NEAR(dd, 0, LOGIT_TOL);
        TH_CHECK_NEAR(dp, 0, 1e-3);
        if (kv == 0) {
            /* greedy continuation */
            const int32_t P = (int32_t)(np / 4), G = (int32_t)(ng / 4);
            lb_context_reset(ctx);
            TH_CHECK_OK(lb_model_forward(ctx, prompt, P, 0, lg, LB_LOGITS_LAST));
            int ok = 1;
            for (int32_t t = P; t < G; t++) {
                /* generate(min_new_tokens = all) never picks EOS (2) */
                int32_t best = 0;
                for (int32_t v = 1; v < V; v++)
                    if (v != 2 && lg[v] > lg[best]) best = v;
                if (best != greedy[t]) {
                    fprintf(stderr, "  %s greedy: token %d: %d, transformers %d\n",
                            name, (int)t, (int)best, (int)greedy[t]);
                    ok = 0;
                    break;
                }
                if (t + 1 < G)
                    TH_CHECK_OK(lb_model_forward(ctx, &best, 1, t, lg,
                                                 LB_LOGITS_LAST));
            }
            TH_CHECK_MSG(ok, "%s: greedy continuation differs", name);
        }
        lb_context_free(ctx);
    }
out:
    free(lg);
    free(pre);
    free(ids);
    free(ref);
    free(prompt);
    free(greedy);
    lb_model_free(m);
}

/* llama.cpp's conversions (tests/cli_arch_gguf.sh makes them with
 * tests/data/arch/make_arch_gguf.py and sets LB_ARCH_GGUF_DIR): the GGUF
 * model gives the HF checkpoint's logits. gemma2: llama.cpp's attention
 * scale is 1/sqrt(head_dim) (query_pre_attn_scalar is not in its file), so
 * the oracle is the HF load with that scale. */
static void check_gguf_file(const char *path, const char *name, bool llamacpp) {
    char dir[256], p[600];
    snprintf(dir, sizeof dir, DATA "%s", name);
    lb_model *hf = NULL, *gg = NULL;
    TH_CHECK_OK(lb_model_load(dir, NULL, &hf));
    TH_CHECK_OK(lb_model_load(path, NULL, &gg));
    if (!hf || !gg) goto out;
    TH_CHECK_INT(gg->config.arch, hf->config.arch);
    TH_CHECK_INT(gg->config.n_experts, hf->config.n_experts);
    TH_CHECK_INT(gg->config.n_experts_used, hf->config.n_experts_used);
    if (llamacpp && hf->config.arch == LB_ARCH_GEMMA2)
        hf->config.attn_scale = 1.0f / sqrtf((float)hf->config.head_dim);
    size_t nb = 0;
    snprintf(p, sizeof p, "%s/seq64.ids.i32", dir);
    int32_t *ids = th_read_bin(p, &nb);
    const int32_t n = (int32_t)(nb / 4), V = hf->config.vocab_size;
    float *a = malloc((size_t)n * V * 4), *b = malloc((size_t)n * V * 4);
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = 128;
    cp.n_threads = 2;
    lb_context *ca = NULL, *cb = NULL;
    TH_CHECK_OK(lb_context_create(hf, &cp, &ca));
    TH_CHECK_OK(lb_context_create(gg, &cp, &cb));
    if (ids && a && b && ca && cb) {
        TH_CHECK_OK(lb_model_forward(ca, ids, n, 0, a, LB_LOGITS_ALL));
        TH_CHECK_OK(lb_model_forward(cb, ids, n, 0, b, LB_LOGITS_ALL));
        double d = max_diff(a, b, (size_t)n * V);
        fprintf(stderr, "  %-22s %s GGUF vs HF: max |logit diff| = %.3g\n",
                name, llamacpp ? "llama.cpp" : "lowbit export", d);
        TH_CHECK_NEAR(d, 0, LOGIT_TOL);
    }
    lb_context_free(ca);
    lb_context_free(cb);
    free(ids);
    free(a);
    free(b);
out:
    lb_model_free(hf);
    lb_model_free(gg);
}

static void check_gguf(const char *gdir, const char *name) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s-f32.gguf", gdir, name);
    check_gguf_file(p, name, true);
}

static uint64_t fnv64(const void *data, size_t n) {
    const uint8_t *b = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* lowbit's F32 export of model `name` against llama.cpp's conversion
 * (tests/data/arch/convert_ref.json, by name): every key llama.cpp wrote
 * but general.name / size_label with the same type and value bytes, every
 * tensor with the same type, shape and data; extra keys only lowbit's
 * documented additions. Then the exported file gives the HF logits. */
static void check_export(const cJSON *ref, const char *name) {
    char dir[256], out[300];
    snprintf(dir, sizeof dir, DATA "%s", name);
    snprintf(out, sizeof out, "%s/%s-lb.gguf", th_tmpdir(), name);
    lb_export_opts o;
    lb_export_opts_default(&o);
    o.qtype = "F32";
    TH_CHECK_OK(lb_export_gguf(dir, out, &o, NULL, NULL));
    lb_gguf *g = NULL;
    TH_CHECK_OK(lb_gguf_open(out, &g));
    if (!g || !ref) {
        lb_gguf_close(g);
        return;
    }
    int nk = 0;
    for (const cJSON *e = cJSON_GetObjectItem(ref, "kv")->child; e; e = e->next) {
        const char *k = cJSON_GetArrayItem(e, 0)->valuestring;
        if (!strcmp(k, "general.name") || !strcmp(k, "general.size_label")) continue;
        int64_t j = lb_gguf_find_key(g, k);
        TH_CHECK_MSG(j >= 0, "%s: key %s missing", name, k);
        if (j < 0) continue;
        const lb_gguf_value *v = lb_gguf_kv_value(g, j);
        char hex[24];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv64(v->raw, v->raw_size));
        TH_CHECK_MSG((int)v->type == cJSON_GetArrayItem(e, 1)->valueint &&
                         !strcmp(hex, cJSON_GetArrayItem(e, 4)->valuestring),
                     "%s: value of %s differs", name, k);
        nk++;
    }
    TH_CHECK(nk > 10);
    for (int64_t j = 0; j < lb_gguf_n_kv(g); j++) {
        const char *k = lb_gguf_kv_key(g, j);
        bool in_ref = false;
        for (const cJSON *e = cJSON_GetObjectItem(ref, "kv")->child; e && !in_ref; e = e->next)
            in_ref = !strcmp(cJSON_GetArrayItem(e, 0)->valuestring, k);
        const char *dot = strchr(k, '.');
        /* lowbit's additions: vocab_size for a tokenizer-less file,
         * gemma2 rope.freq_base (llama.cpp's default value), Gemma's
         * attention.scale when query_pre_attn_scalar is not llama.cpp's */
        bool ok = in_ref || !strcmp(k, "general.name") || !strcmp(k, "general.size_label") ||
                  (dot && (!strcmp(dot, ".vocab_size") || !strcmp(dot, ".rope.freq_base") ||
                           !strcmp(dot, ".attention.scale")));
        TH_CHECK_MSG(ok, "%s: extra key %s", name, k);
    }
    const cJSON *ts = cJSON_GetObjectItem(ref, "tensors");
    TH_CHECK_INT(lb_gguf_n_tensors(g), cJSON_GetArraySize(ts));
    for (const cJSON *e = ts ? ts->child : NULL; e; e = e->next) {
        const char *tn = cJSON_GetArrayItem(e, 0)->valuestring;
        int64_t i = lb_gguf_find_tensor(g, tn);
        TH_CHECK_MSG(i >= 0, "%s: tensor %s missing", name, tn);
        if (i < 0) continue;
        lb_tensor t;
        TH_CHECK_OK(lb_gguf_tensor_view(g, i, &t));
        const cJSON *shape = cJSON_GetArrayItem(e, 2);
        bool same = (int)t.type == cJSON_GetArrayItem(e, 1)->valueint &&
                    t.n_dims == cJSON_GetArraySize(shape);
        for (int d = 0; same && d < t.n_dims; d++)
            same = (double)t.shape[d] == cJSON_GetArrayItem(shape, d)->valuedouble;
        char hex[24];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv64(t.data, t.nbytes));
        TH_CHECK_MSG(same && !strcmp(hex, cJSON_GetArrayItem(e, 3)->valuestring),
                     "%s: tensor %s differs from llama.cpp's", name, tn);
    }
    lb_gguf_close(g);
    check_gguf_file(out, name, false);
    unlink(out);
}

static void test_export_equals_converter(void) {
    size_t n = 0;
    char *text = th_read_bin(DATA "convert_ref.json", &n);
    cJSON *root = text ? cJSON_ParseWithLength(text, n) : NULL;
    free(text);
    TH_CHECK(root != NULL);
    const cJSON *files = cJSON_GetObjectItem(root, "files");
    for (size_t i = 0; i < 7; i++)
        check_export(cJSON_GetObjectItem(files, models[i]), models[i]);
    cJSON_Delete(root);
}

/* A single decoded token reads only its top-k experts: an expert whose
 * weights are all NaN changes the logits exactly when it is selected, so
 * per MoE layer exactly num_experts_per_tok experts matter (a kernel that
 * ran every expert, even with weight 0, would turn every logit into NaN). */
static void test_decode_reads_topk_only(void) {
    const char *names[] = {"qwen3moe-random", "qwen2moe-random", "mixtral-random"};
    for (size_t mi = 0; mi < 3; mi++) {
        char dir[256];
        snprintf(dir, sizeof dir, DATA "%s", names[mi]);
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(dir, NULL, &m));
        if (!m) continue;
        const lb_model_config *c = &m->config;
        const int32_t V = c->vocab_size, tok = 17;
        float *base = malloc((size_t)V * 4), *lg = malloc((size_t)V * 4);
        lb_context_params cp = lb_context_default_params();
        cp.n_ctx = 8;
        cp.n_threads = 1;
        lb_context *ctx = NULL;
        TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
        if (!ctx || !base || !lg) goto next;
        TH_CHECK_OK(lb_model_forward(ctx, &tok, 1, 0, base, LB_LOGITS_LAST));
        for (int l = 0; l < c->n_layers; l++) {
            lb_layer_weights *L = &m->layers[l];
            if (!L->exp) continue;
            int used = 0;
            for (int e = 0; e < c->n_experts; e++) {
                const void *keep[3];
                void *nanbuf[3];
                for (int k = 0; k < 3; k++) {
                    lb_tensor *w = &L->exp[3 * e + k];
                    keep[k] = w->data;
                    nanbuf[k] = malloc(w->nbytes);
                    float *f = nanbuf[k];
                    for (size_t i = 0; i < w->nbytes / 4; i++) f[i] = NAN;
                    w->data = nanbuf[k];
                }
                lb_context_reset(ctx);
                TH_CHECK_OK(lb_model_forward(ctx, &tok, 1, 0, lg, LB_LOGITS_LAST));
                bool changed = false;
                for (int32_t v = 0; v < V; v++)
                    changed |= !(lg[v] == base[v]);
                used += changed;
                for (int k = 0; k < 3; k++) {
                    L->exp[3 * e + k].data = keep[k];
                    free(nanbuf[k]);
                }
            }
            TH_CHECK_MSG(used == c->n_experts_used,
                         "%s layer %d: %d experts read, top-k is %d", names[mi], l,
                         used, c->n_experts_used);
        }
        fprintf(stderr, "  %-22s one decoded token reads exactly top-%d experts "
                "per layer\n", names[mi], c->n_experts_used);
    next:
        lb_context_free(ctx);
        free(base);
        free(lg);
        lb_model_free(m);
    }
}

/* ---- bad input ------------------------------------------------------ */

static char *slurp(const char *path, size_t *n) { return th_read_bin(path, n); }

static void spit(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(d, 1, n, f);
        fclose(f);
    }
}

/* Replace the first occurrence of `from` by `to` (same length) in buf. */
static bool patch(char *buf, size_t n, const char *from, const char *to) {
    size_t fl = strlen(from);
    for (size_t i = 0; i + fl <= n; i++)
        if (!memcmp(buf + i, from, fl)) {
            memcpy(buf + i, to, fl);
            return true;
        }
    return false;
}

/* A copy of tests/data/arch/<model> in the temp dir with config.json's
 * `from` replaced by `to` and (if st_from) the safetensors header's
 * st_from by st_to (same length); returns the copy's path. */
static const char *bad_copy(const char *model, const char *tag, const char *from,
                            const char *to, const char *st_from, const char *st_to) {
    static char dir[512];
    char p[700];
    snprintf(dir, sizeof dir, "%s/bad-%s", th_tmpdir(), tag);
    mkdir(dir, 0755);
    size_t n = 0;
    snprintf(p, sizeof p, DATA "%s/config.json", model);
    char *cfg = slurp(p, &n);
    TH_CHECK(cfg != NULL);
    if (!cfg) return dir;
    /* config text with the replacement (lengths may differ) */
    char *out = malloc(n + (to ? strlen(to) : 0) + 1);
    const char *hit = from ? strstr(cfg, from) : NULL;
    TH_CHECK(!from || hit);
    size_t o = 0;
    if (hit) {
        memcpy(out, cfg, (size_t)(hit - cfg));
        o = (size_t)(hit - cfg);
        memcpy(out + o, to, strlen(to));
        o += strlen(to);
        size_t rest = n - (size_t)(hit - cfg) - strlen(from);
        memcpy(out + o, hit + strlen(from), rest);
        o += rest;
    } else {
        memcpy(out, cfg, n);
        o = n;
    }
    snprintf(p, sizeof p, "%s/config.json", dir);
    spit(p, out, o);
    free(out);
    free(cfg);
    snprintf(p, sizeof p, DATA "%s/model.safetensors", model);
    char *st = slurp(p, &n);
    TH_CHECK(st != NULL);
    if (st && st_from) TH_CHECK(patch(st, n, st_from, st_to));
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (st) spit(p, st, n);
    free(st);
    return dir;
}

static void expect_fail(const char *dir, lb_status want, const char *msg) {
    lb_model *m = NULL;
    lb_status s = lb_model_load(dir, NULL, &m);
    TH_CHECK_MSG(s == want, "%s: got %s, want %s: %s", dir, lb_status_name(s),
                 lb_status_name(want), lb_last_error());
    TH_CHECK_MSG(strstr(lb_last_error(), msg) != NULL, "%s: message '%s' lacks '%s'", dir,
                 lb_last_error(), msg);
    fprintf(stderr, "  %-28s %s\n", strrchr(dir, '/') + 1, lb_last_error());
    lb_model_free(m);
}

static void test_bad_input(void) {
    const char *q3 = "qwen3moe-random";
    /* fewer experts declared than stored */
    expect_fail(bad_copy(q3, "experts7", "\"num_local_experts\": 8", "\"num_local_experts\": 7",
                         NULL, NULL),
                LB_ERR_FORMAT, "model.layers.0.mlp.gate.weight");
    /* more experts declared than stored: the router's shape says so */
    expect_fail(bad_copy(q3, "experts9", "\"num_local_experts\": 8", "\"num_local_experts\": 9",
                         NULL, NULL),
                LB_ERR_FORMAT, "num_experts (9): ");
    /* top-k larger than the expert count */
    expect_fail(bad_copy(q3, "topk9", "\"num_experts_per_tok\": 2",
                         "\"num_experts_per_tok\": 9", NULL, NULL),
                LB_ERR_FORMAT, "num_experts_per_tok 9 > num_local_experts 8");
    /* a missing expert (its name changed in the header) */
    expect_fail(bad_copy(q3, "missing5", NULL, NULL, "layers.1.mlp.experts.5.up_proj",
                         "layers.1.mlp.experts.5.up_prox"),
                LB_ERR_NOT_FOUND, "model.layers.1.mlp.experts.5.up_proj.weight' not found");
    /* an extra expert beyond num_experts */
    expect_fail(bad_copy("qwen2moe-random", "extra", "\"num_experts\": 6", "\"num_experts\": 5",
                         NULL, NULL),
                LB_ERR_FORMAT, "mlp.gate.weight");
    /* a router of the wrong shape (rows = experts): renamed in from
     * another expert count is covered above; here a dense layer that
     * carries a router */
    expect_fail(bad_copy(q3, "mlponly", "\"mlp_only_layers\": []", "\"mlp_only_layers\": [1]",
                         NULL, NULL),
                LB_ERR_NOT_FOUND, "model.layers.1.mlp.gate_proj.weight");
    /* phi3: fused qkv_proj of the wrong size for the head counts */
    expect_fail(bad_copy("phi3-random", "phi3kv", "\"num_key_value_heads\": 2",
                         "\"num_key_value_heads\": 4", NULL, NULL),
                LB_ERR_FORMAT, "qkv_proj.weight");
    /* GGUF: expert_count that does not match the merged tensors */
    char out[600];
    snprintf(out, sizeof out, "%s/q3moe.gguf", th_tmpdir());
    lb_export_opts o;
    lb_export_opts_default(&o);
    o.qtype = "F32";
    TH_CHECK_OK(lb_export_gguf(DATA "qwen3moe-random", out, &o, NULL, NULL));
    size_t n = 0;
    char *g = slurp(out, &n);
    TH_CHECK(g != NULL);
    if (g) {
        /* key bytes, then u32 type (4), then the u32 value */
        const char *key = "qwen3moe.expert_count";
        char *hit = NULL;
        for (size_t i = 0; i + strlen(key) + 8 <= n && !hit; i++)
            if (!memcmp(g + i, key, strlen(key))) hit = g + i;
        TH_CHECK(hit != NULL);
        if (hit) {
            char *val = hit + strlen(key) + 4; /* unaligned: memcpy */
            uint32_t keep, v7 = 7;
            memcpy(&keep, val, 4);
            memcpy(val, &v7, 4);
            snprintf(out, sizeof out, "%s/q3moe-e7.gguf", th_tmpdir());
            spit(out, g, n);
            expect_fail(out, LB_ERR_FORMAT, "expert_count (7): /");
            memcpy(val, &keep, 4);
        }
        const char *k2 = "qwen3moe.expert_used_count";
        hit = NULL;
        for (size_t i = 0; i + strlen(k2) + 8 <= n && !hit; i++)
            if (!memcmp(g + i, k2, strlen(k2))) hit = g + i;
        TH_CHECK(hit != NULL);
        if (hit) {
            const uint32_t v9 = 9;
            memcpy(hit + strlen(k2) + 4, &v9, 4);
            snprintf(out, sizeof out, "%s/q3moe-k9.gguf", th_tmpdir());
            spit(out, g, n);
            expect_fail(out, LB_ERR_FORMAT, "expert_used_count = 9");
        }
        free(g);
    }
}

/* AWQ on these architectures (test_awq_arch.c) is accepted: without
 * calibration data it is refused for that reason, not for the layout. */
static void test_quantize_refused(void) {
    const char *names[] = {"phi3-random", "gemma2-random", "qwen3moe-random"};
    for (size_t i = 0; i < 3; i++) {
        char dir[256];
        snprintf(dir, sizeof dir, DATA "%s", names[i]);
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(dir, NULL, &m));
        if (!m) continue;
        lb_quantize_params p;
        lb_quantize_default_params(&p);
        p.method = LB_QUANT_AWQ;
        p.sym = false;
        lb_status s = lb_quantize_model_inplace(m, &p, NULL, NULL);
        TH_CHECK_MSG(s == LB_ERR_INVALID_ARG &&
                         strstr(lb_last_error(), "needs calibration data"),
                     "%s: %s", names[i], lb_last_error());
        lb_model_free(m);
    }
}

static void test_llamacpp_gguf(void) {
    const char *gdir = getenv("LB_ARCH_GGUF_DIR");
    if (!gdir) {
        fprintf(stderr, "  (LB_ARCH_GGUF_DIR unset: tests/cli_arch_gguf.sh "
                "runs this part)\n");
        return;
    }
    /* the 7 models llama.cpp 0.7.0 converts */
    for (size_t i = 0; i < 7; i++) check_gguf(gdir, models[i]);
}

static void check_model(const char *name) { check_model_dir(name, NULL); }

static const char *bad_copy(const char *model, const char *tag, const char *from,
                            const char *to, const char *st_from, const char *st_to);
static bool patch(char *buf, size_t n, const char *from, const char *to);
static void spit(const char *path, const void *d, size_t n);

/* Phi-3 longrope in the transformers-4 / Hub style: top-level rope_theta and
 * original_max_position_embeddings, "rope_scaling": {"type": "longrope",
 * long_factor, short_factor} — the same logits. */
static void test_phi3_v4_config(void) {
    const char *v5 = "\"rope_parameters\": {\n    \"long_factor\": [";
    const char *v4 = "\"rope_theta\": 10000.0, \"rope_scaling\": {\"type\": \"longrope\", \"long_factor\": [";
    const char *dir = bad_copy("phi3-longrope-random", "phi3v4", v5, v4, NULL, NULL);
    /* blank the v5-only keys left inside the object (rope_theta,
     * rope_type): the v4 parse must take the top-level theta and "type" */
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    size_t n = 0;
    char *cfg = th_read_bin(p, &n);
    const char *inner = "\"rope_theta\": 10000.0,\n    \"rope_type\": \"longrope\",";
    char blank[128];
    memset(blank, ' ', strlen(inner));
    blank[strlen(inner)] = 0;
    TH_CHECK(cfg && patch(cfg, n, inner, blank));
    if (cfg) spit(p, cfg, n);
    free(cfg);
    check_model_dir("phi3-longrope-random", dir);
}

static void test_logits(void) {
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        check_model(models[i]);
}

/* Multi-sequence forward (batch.c -> forward_ext.c) on every model: three
 * sequences, prompts of 7, 15 and 22 tokens (past the Gemma sliding
 * windows), prefilled interleaved in one batch, then 6 greedy decode steps
 * of all three per batch, give the logits of each sequence run alone
 * through lb_model_forward within test_batch's 1e-5. */
#define MB_NSEQ 3
#define MB_STEPS 6
static void test_multi_equals_alone(void) {
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        char dir[256];
        snprintf(dir, sizeof dir, DATA "%s", models[mi]);
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(dir, NULL, &m));
        if (!m) continue;
        const int V = m->config.vocab_size;
        const int np[MB_NSEQ] = {7, 15, 22};
        int32_t pr[MB_NSEQ][22], gen[MB_NSEQ][MB_STEPS];
        float *ref[MB_NSEQ];
        for (int q = 0; q < MB_NSEQ; q++) {
            for (int i = 0; i < np[q]; i++)
                pr[q][i] = (int32_t)((i * 37 + q * 101 + 3) % V);
            ref[q] = malloc((size_t)(MB_STEPS + 1) * V * sizeof(float));
            lb_context *ctx = NULL;
            lb_context_params cp = lb_context_default_params();
            cp.n_ctx = 64;
            cp.n_threads = 2;
            TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
            if (!ctx) continue;
            TH_CHECK_OK(lb_model_forward(ctx, pr[q], np[q], 0, ref[q],
                                         LB_LOGITS_LAST));
            for (int s = 0; s < MB_STEPS; s++) {
                gen[q][s] = lb_argmax(ref[q] + (size_t)s * V, V);
                TH_CHECK_OK(lb_model_forward(ctx, &gen[q][s], 1, np[q] + s,
                                             ref[q] + (size_t)(s + 1) * V,
                                             LB_LOGITS_LAST));
            }
            lb_context_free(ctx);
        }
        lb_multi_params mp = lb_multi_default_params();
        mp.n_seq = MB_NSEQ;
        mp.n_ctx = 64; /* as the contexts: longrope picks its factors by it */
        mp.n_batch = 4;
        mp.n_threads = 2;
        lb_multi_ctx *mc = NULL;
        TH_CHECK_OK(lb_multi_create(m, &mp, &mc));
        float *lg = malloc((size_t)MB_NSEQ * V * sizeof(float));
        double worst = 0;
        if (mc) {
            int32_t tk[64], sq[64], ps[64];
            uint8_t want[64];
            int n = 0, row[MB_NSEQ] = {0};
            for (int i = 0; i < 22; i++)
                for (int q = 0; q < MB_NSEQ; q++)
                    if (i < np[q]) {
                        tk[n] = pr[q][i], sq[n] = q, ps[n] = i;
                        want[n] = i == np[q] - 1;
                        n++;
                    }
            for (int i = 0, r = 0; i < n; i++)
                if (want[i]) row[sq[i]] = r++;
            TH_CHECK_OK(lb_model_forward_multi(mc, tk, sq, ps, n, want, lg));
            for (int q = 0; q < MB_NSEQ; q++) {
                double d = max_diff(lg + (size_t)row[q] * V, ref[q], (size_t)V);
                if (!(d <= worst)) worst = d;
            }
            for (int s = 0; s < MB_STEPS; s++) {
                for (int q = 0; q < MB_NSEQ; q++)
                    tk[q] = gen[q][s], sq[q] = q,
                    ps[q] = np[q] + s;
                TH_CHECK_OK(lb_model_forward_multi(mc, tk, sq, ps, MB_NSEQ,
                                                   NULL, lg));
                for (int q = 0; q < MB_NSEQ; q++) {
                    double d = max_diff(lg + (size_t)q * V,
                                        ref[q] + (size_t)(s + 1) * V,
                                        (size_t)V);
                    if (!(d <= worst)) worst = d;
                }
            }
            /* LoRA adapters are refused, not silently skipped (Phi-3
             * without longrope runs forward.c's dense pass and takes them) */
            lb_lora_set one;
            memset(&one, 0, sizeof one);
            one.n = 1;
            if (lb_model_config_is_ext(&m->config))
                TH_CHECK_INT(lb_multi_set_loras(mc, 0, &one),
                             LB_ERR_UNSUPPORTED);
        }
        printf("  %-26s batched vs alone: max |logit diff| %.3g\n",
               models[mi], worst);
        TH_CHECK(worst <= 1e-5);
        free(lg);
        lb_multi_free(mc);
        for (int q = 0; q < MB_NSEQ; q++) free(ref[q]);
        lb_model_free(m);
    }
}

int main(void) {
    if (!getenv("LB_ARCH_GGUF_DIR")) TH_RUN(test_logits);
    if (!getenv("LB_ARCH_GGUF_DIR")) TH_RUN(test_export_equals_converter);
    if (!getenv("LB_ARCH_GGUF_DIR")) TH_RUN(test_bad_input);
    if (!getenv("LB_ARCH_GGUF_DIR")) TH_RUN(test_decode_reads_topk_only);
    if (!getenv("LB_ARCH_GGUF_DIR")) TH_RUN(test_quantize_refused);
    if (!getenv("LB_ARCH_GGUF_DIR")) TH_RUN(test_phi3_v4_config);
    if (!getenv("LB_ARCH_GGUF_DIR")) TH_RUN(test_multi_equals_alone);
    TH_RUN(test_llamacpp_gguf);
    return th_report();
}
