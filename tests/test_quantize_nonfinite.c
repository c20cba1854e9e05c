/*
 * lb_quantize_model / lb_quantize_model_inplace on bad numbers, on variants
 * of models/random/qwen2-random (2 layers, hidden 64, ffn 192, F32; also the
 * BF16 and F16 random llamas) written here with one tensor changed:
 *  - NaN/Inf in any floating tensor of the dense checkpoint: RTN and GPTQ
 *    fail before any work with LB_ERR_FORMAT naming the tensor and the
 *    element, and leave nothing beside OUT_DIR; in place (a loaded model)
 *    the module's weight check names the module;
 *  - finite weights whose layer overflows: GPTQ fails with LB_ERR_RANGE
 *    naming the layer and the linear whose calibration input is not finite
 *    (o_proj output -> gate/up input), or the layer whose output (the next
 *    layer's input) is not finite (down_proj output, caught at the replay);
 *  - a Hessian that damping cannot fix (rank 4 < 64 with a damp_percent
 *    below float32 resolution): with auto-increment 0, LB_ERR_RANGE naming
 *    the module and the damp tried; with the default auto-increment the
 *    retries and the damp used are in the report (and quantize_report.json);
 *  - in_features not a multiple of group_size: the AutoGPTQ layout (last
 *    group shorter, ceil(in / group_size) groups), a note in the report;
 *    refused under the vllm-w4a8 profile (vLLM cannot load it).
 */
#include "test_quantize_util.h"

/* How a variant differs from its model (qwen2-random unless `model`). */
typedef struct edit {
    const char *tensor; /* F32/F16/BF16 tensor to change                 */
    int64_t index;      /* element set to `value`; -1: every element     */
    float value;
    const char *model;  /* shared model directory, NULL: QW_DIR          */
} edit;

/* Write the model with `e` applied into dir (config and generation
 * config copied). (Callers keep dir in their own buffer: tmp_path's
 * buffers are reused after 8 calls.) */
static void make_variant(const char *dir, edit e) {
    const char *base = e.model ? e.model : QW_DIR;
    mkdir(dir, 0755);
    static const char *copied[] = {"config.json", "generation_config.json"};
    for (int i = 0; i < 2; i++) {
        char a[800], b[800];
        snprintf(a, sizeof a, "%s/%s", base, copied[i]);
        snprintf(b, sizeof b, "%s/%s", dir, copied[i]);
        size_t n = 0;
        void *d = th_read_bin(th_shared(a), &n);
        TH_CHECK(d != NULL);
        FILE *f = fopen(b, "wb");
        TH_CHECK(f && fwrite(d, 1, n, f) == n);
        if (f) fclose(f);
        free(d);
    }
    lb_safetensors *st = NULL;
    char src[800];
    snprintf(src, sizeof src, "%s/model.safetensors", base);
    TH_CHECK_OK(lb_st_open(th_shared(src), &st));
    if (!st) return;
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_writer_create(&w));
    void *changed = NULL;
    bool found = false;
    for (size_t i = 0; i < lb_st_count(st); i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        const void *data = t->data;
        if (!strcmp(t->name, e.tensor)) {
            const int64_t n = lb_tensor_nelements(t);
            changed = malloc(t->nbytes);
            memcpy(changed, t->data, t->nbytes);
            const uint16_t h = t->type == LB_TYPE_F16 ? lb_f32_to_f16(e.value)
                                                      : lb_f32_to_bf16(e.value);
            TH_CHECK(t->type == LB_TYPE_F32 || t->type == LB_TYPE_F16 ||
                     t->type == LB_TYPE_BF16);
            for (int64_t k = 0; k < n; k++) {
                if (e.index >= 0 && k != e.index) continue;
                if (t->type == LB_TYPE_F32)
                    ((float *)changed)[k] = e.value;
                else
                    ((uint16_t *)changed)[k] = h;
            }
            data = changed;
            found = true;
        }
        TH_CHECK_OK(lb_st_writer_add(w, t->name, t->type, t->n_dims,
                                     t->shape, data));
    }
    TH_CHECK_MSG(found, "no tensor %s", e.tensor);
    char path[800];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    TH_CHECK_OK(lb_st_writer_write_file(w, path));
    lb_st_writer_free(w);
    free(changed);
    lb_st_close(st);
}

static bool has(const char *what) {
    bool ok = strstr(lb_last_error(), what) != NULL;
    if (!ok) fprintf(stderr, "  (message: %s; wanted '%s')\n",
                     lb_last_error(), what);
    return ok;
}

static void params(lb_quantize_params *p, lb_quant_method m) {
    lb_quantize_default_params(p);
    p->method = m;
    p->group_size = 32;
    p->n_threads = 2;
}

/* NaN / Inf in the dense checkpoint: refused up front, naming the tensor. */
static void test_nonfinite_weights(void) {
    lb_calib cal = random_calib(4, 16, 512, 3);
    char src[700];
    snprintf(src, sizeof src, "%s", tmp_path("nan-up"));
    /* up_proj [192, 64]: element 5 * 64 + 7 = row 5, column 7 */
    make_variant(src, (edit){"model.layers.1.mlp.up_proj.weight", 5 * 64 + 7,
                             NAN, NULL});
    lb_quantize_params p;
    for (int m = 0; m < 2; m++) {
        params(&p, m ? LB_QUANT_GPTQ : LB_QUANT_RTN);
        TH_CHECK_FAILS(lb_quantize_model(src, tmp_path("nan-out"), &p, &cal,
                                         NULL),
                       LB_ERR_FORMAT);
        TH_CHECK(has("model.layers.1.mlp.up_proj.weight"));
        TH_CHECK(has("[5, 7]"));
        TH_CHECK(has("nan"));
        TH_CHECK_INT(count_entries("nan-out"), 0);
        if (getenv("LB_TEST_VERBOSE"))
            fprintf(stderr, "%s\n", lb_last_error());
    }
    /* a tensor that is copied as it is (a norm), Inf */
    char src2[700];
    snprintf(src2, sizeof src2, "%s", tmp_path("inf-norm"));
    make_variant(src2, (edit){"model.norm.weight", 3, INFINITY, NULL});
    params(&p, LB_QUANT_RTN);
    TH_CHECK_FAILS(lb_quantize_model(src2, tmp_path("nan-out"), &p, NULL,
                                     NULL),
                   LB_ERR_FORMAT);
    TH_CHECK(has("model.norm.weight[3] = inf"));
    /* BF16 and F16 checkpoints (exponent-bit tests of each format) */
    char src3[700];
    snprintf(src3, sizeof src3, "%s", tmp_path("bf16-inf"));
    make_variant(src3, (edit){"model.layers.1.self_attn.k_proj.weight", 130,
                              -INFINITY,
                              "models/random/llama-gqa-llama3rope-bf16-random"});
    TH_CHECK_FAILS(lb_quantize_model(src3, tmp_path("nan-out"), &p, NULL,
                                     NULL),
                   LB_ERR_FORMAT);
    TH_CHECK(has("model.layers.1.self_attn.k_proj.weight[1, 2] = -inf"));
    char src4[700];
    snprintf(src4, sizeof src4, "%s", tmp_path("f16-nan"));
    make_variant(src4, (edit){"model.embed_tokens.weight", 96 + 5, NAN,
                              "models/random/llama-tied-fp16-random"});
    TH_CHECK_FAILS(lb_quantize_model(src4, tmp_path("nan-out"), &p, NULL,
                                     NULL),
                   LB_ERR_FORMAT);
    TH_CHECK(has("model.embed_tokens.weight[1, 5] = nan"));
    /* the unchanged models pass the scan */
    TH_CHECK_OK(lb_quantize_model(
        th_shared("models/random/llama-tied-fp16-random"),
        tmp_path("f16-ok"), &p, NULL, NULL));
    /* a module kept dense by a rule is checked too */
    const char *skip[] = {"layers\\.1\\.mlp\\.up_proj=skip"};
    p.rules = skip;
    p.n_rules = 1;
    TH_CHECK_FAILS(lb_quantize_model(src, tmp_path("nan-out"), &p, NULL,
                                     NULL),
                   LB_ERR_FORMAT);
    TH_CHECK(has("model.layers.1.mlp.up_proj.weight"));
    TH_CHECK_INT(count_entries("nan-out"), 0);

    /* in place (a loaded model): the module's weight check names it */
    for (int m = 0; m < 2; m++) {
        lb_model *mod = NULL;
        TH_CHECK_OK(lb_model_load(src, NULL, &mod));
        if (!mod) break;
        params(&p, m ? LB_QUANT_GPTQ : LB_QUANT_RTN);
        TH_CHECK_FAILS(lb_quantize_model_inplace(mod, &p, &cal, NULL),
                       LB_ERR_INVALID_ARG);
        TH_CHECK(has("model.layers.1.mlp.up_proj"));
        TH_CHECK(has("W[5, 7] = nan is not finite"));
        lb_model_free(mod);
    }
    lb_calib_free(&cal);
}

/* Finite weights, non-finite activations. */
static void test_nonfinite_activations(void) {
    lb_calib cal = random_calib(4, 16, 512, 5);
    lb_quantize_params p;
    params(&p, LB_QUANT_GPTQ);
    /* o_proj = 3e38 everywhere, kept dense: its output overflows, the MLP
     * input of layer 0 is not finite */
    char src[700];
    snprintf(src, sizeof src, "%s", tmp_path("huge-o"));
    make_variant(src, (edit){"model.layers.0.self_attn.o_proj.weight", -1,
                             3.0e38f, NULL});
    const char *skip_o[] = {"layers\\.0\\.self_attn\\.o_proj=skip"};
    p.rules = skip_o;
    p.n_rules = 1;
    TH_CHECK_FAILS(lb_quantize_model(src, tmp_path("act-out"), &p, &cal,
                                     NULL),
                   LB_ERR_RANGE);
    TH_CHECK(has("layer 0"));
    TH_CHECK(has("mlp.gate_proj"));
    TH_CHECK(has("calibration sequence 0"));
    TH_CHECK(has("not finite"));
    TH_CHECK_INT(count_entries("act-out"), 0);
    if (getenv("LB_TEST_VERBOSE")) fprintf(stderr, "%s\n", lb_last_error());
    /* in place: the same */
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(src, NULL, &m));
    if (m) {
        TH_CHECK_FAILS(lb_quantize_model_inplace(m, &p, &cal, NULL),
                       LB_ERR_RANGE);
        TH_CHECK(has("mlp.gate_proj"));
        lb_model_free(m);
    }
    /* down_proj huge and dense: layer 0's output (layer 1's input) */
    char src2[700];
    snprintf(src2, sizeof src2, "%s", tmp_path("huge-down"));
    make_variant(src2, (edit){"model.layers.0.mlp.down_proj.weight", -1,
                              3.0e38f, NULL});
    const char *skip_d[] = {"layers\\.0\\.mlp\\.down_proj=skip"};
    p.rules = skip_d;
    TH_CHECK_FAILS(lb_quantize_model(src2, tmp_path("act-out"), &p, &cal,
                                     NULL),
                   LB_ERR_RANGE);
    TH_CHECK(has("layer 0"));
    TH_CHECK(has("output"));
    TH_CHECK(has("calibration sequence 0"));
    TH_CHECK(has("not finite"));
    /* caught at layer 0's replay, before its state was saved: nothing is
     * left */
    TH_CHECK_INT(count_entries("act-out"), 0);
    if (getenv("LB_TEST_VERBOSE")) fprintf(stderr, "%s\n", lb_last_error());
    /* finite in f32 but beyond f16: fine in f32, refused with act_f16
     * (stored as Inf it would fail the next layer for no visible reason) */
    char src3[700];
    snprintf(src3, sizeof src3, "%s", tmp_path("big-down"));
    make_variant(src3, (edit){"model.layers.0.mlp.down_proj.weight", -1,
                              1.0e6f, NULL});
    TH_CHECK_OK(lb_quantize_model(src3, tmp_path("act-out"), &p, &cal,
                                  NULL));
    p.act_f16 = true;
    TH_CHECK_FAILS(lb_quantize_model(src3, tmp_path("act-f16"), &p, &cal,
                                     NULL),
                   LB_ERR_RANGE);
    TH_CHECK(has("layer 0, calibration sequence 0: the output"));
    TH_CHECK(has("beyond the f16 range"));
    TH_CHECK_INT(count_entries("act-f16"), 0);
    lb_calib_free(&cal);
}

/* rank(H) <= 4 tokens < in_features 64 and a damp that vanishes in
 * float32: Cholesky fails until the auto-increment adds real damping. */
static void test_damp_exhausted(void) {
    lb_calib cal = random_calib(1, 4, 512, 9);
    lb_quantize_params p;
    params(&p, LB_QUANT_GPTQ);
    p.damp_percent = 1e-30;
    p.damp_auto_increment = 0.0;
    TH_CHECK_FAILS(lb_quantize_model(th_shared(QW_DIR), tmp_path("damp-out"),
                                     &p, &cal, NULL),
                   LB_ERR_RANGE);
    TH_CHECK(has("model.layers.0.self_attn.q_proj"));
    TH_CHECK(has("damp_percent 1e-30"));
    TH_CHECK(has("not positive definite"));
    TH_CHECK_INT(count_entries("damp-out"), 0);
    if (getenv("LB_TEST_VERBOSE")) fprintf(stderr, "%s\n", lb_last_error());
    /* the default auto-increment fixes it; retries are reported */
    p.damp_auto_increment = 0.0025;
    p.write_report = true;
    lb_quantize_report rep;
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), tmp_path("damp-out"), &p,
                                  &cal, &rep));
    for (int i = 0; i < rep.n_modules; i++) {
        const lb_quantize_module_report *r = &rep.modules[i];
        if (!r->quantized) continue;
        TH_CHECK_MSG(r->n_damp_retries >= 1, "%s: %d retries", r->name,
                     r->n_damp_retries);
        TH_CHECK_NEAR(r->damp_percent, 1e-30 + 0.0025 * r->n_damp_retries,
                      1e-12);
    }
    char path[800];
    snprintf(path, sizeof path, "%s/quantize_report.json",
             tmp_path("damp-out"));
    cJSON *j = read_json(path);
    const cJSON *mods = cJSON_GetObjectItemCaseSensitive(j, "modules");
    const cJSON *q = cJSON_GetArrayItem(mods, 0);
    TH_CHECK_STR(cJSON_GetStringValue(
                     cJSON_GetObjectItemCaseSensitive(q, "name")),
                 "model.layers.0.self_attn.q_proj");
    TH_CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(
                 q, "damp_retries")) >= 1);
    TH_CHECK_INT(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(
                     q, "damp_retries")),
                 rep.modules[0].n_damp_retries);
    cJSON_Delete(j);
    lb_quantize_report_free(&rep);
    lb_calib_free(&cal);
}

/* in_features 64 and 192 with group_size 128. */
static void test_group_size_not_dividing(void) {
    lb_calib cal = random_calib(4, 16, 512, 11);
    lb_quantize_params p;
    params(&p, LB_QUANT_GPTQ);
    p.group_size = 128;
    p.write_report = true;
    const char *out = tmp_path("g128-out");
    lb_quantize_report rep;
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), out, &p, &cal, &rep));
    for (int i = 0; i < rep.n_modules; i++) {
        const lb_quantize_module_report *r = &rep.modules[i];
        TH_CHECK(r->quantized);
        char want[128];
        snprintf(want, sizeof want,
                 "in_features %lld is not a multiple of group_size 128: the "
                 "last group has %lld columns",
                 (long long)r->in_features, (long long)(r->in_features % 128));
        TH_CHECK_MSG(strstr(r->note, want), "%s: note '%s'", r->name,
                     r->note);
    }
    lb_quantize_report_free(&rep);
    /* the checkpoint: ceil(in / 128) groups, g_idx = c / 128 */
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(out, &st));
    if (st) {
        const lb_tensor *sc =
            lb_st_find(st, "model.layers.0.mlp.down_proj.scales");
        const lb_tensor *gi =
            lb_st_find(st, "model.layers.0.mlp.down_proj.g_idx");
        TH_CHECK(sc && sc->shape[0] == 2 && sc->shape[1] == 64);
        TH_CHECK(gi && gi->shape[0] == 192);
        if (gi) {
            const int32_t *g = gi->data;
            TH_CHECK_INT(g[127], 0);
            TH_CHECK_INT(g[128], 1);
            TH_CHECK_INT(g[191], 1);
        }
        const lb_tensor *qs =
            lb_st_find(st, "model.layers.0.self_attn.q_proj.scales");
        TH_CHECK(qs && qs->shape[0] == 1);
        lb_st_close(st);
    }
    char path[800];
    snprintf(path, sizeof path, "%s/quantize_report.json", out);
    cJSON *j = read_json(path);
    const cJSON *q = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(j, "modules"), 0);
    const char *note =
        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(q, "note"));
    TH_CHECK(note && strstr(note, "in_features 64 is not a multiple of "
                                  "group_size 128"));
    cJSON_Delete(j);
    /* reloads */
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(out, NULL, &m));
    lb_model_free(m);
    /* the vllm-w4a8 profile refuses it, before any work */
    p.profile = LB_QUANT_PROFILE_VLLM_W4A8;
    TH_CHECK_FAILS(lb_quantize_model(th_shared(QW_DIR), tmp_path("g128-v"),
                                     &p, &cal, NULL),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(has("model.layers.0.self_attn.q_proj"));
    TH_CHECK(has("group_size 128"));
    TH_CHECK_INT(count_entries("g128-v"), 0);
    /* ... and is fine with a per-row group size there */
    p.group_size = -1;
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), tmp_path("g128-v"), &p,
                                  &cal, NULL));
    lb_calib_free(&cal);
}

int main(void) {
    TH_RUN(test_nonfinite_weights);
    TH_RUN(test_nonfinite_activations);
    TH_RUN(test_damp_exhausted);
    TH_RUN(test_group_size_not_dividing);
    qt_cleanup();
    return th_report();
}
