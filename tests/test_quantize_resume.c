/*
 * lb_quantize_model, small models: resume (a run cancelled after layer 0
 * and resumed gives the same bytes as an uninterrupted run, also when a
 * killed assembly left stale files in the temp directory; other settings
 * start afresh), RTN asym gptq_v2 with module rules (8-bit, skip) ->
 * dynamic config and mixed reload, v1 and a zero point of 0, a tied F16
 * model with a quantized lm_head, sharding, output-directory rules and
 * argument errors.
 */
#include "test_quantize_util.h"

typedef struct cancel_at {
    const char *prefix;
    bool fired;
    uint64_t done, total;
    bool monotonic;
} cancel_at;

static bool cancel_cb(void *user, const char *stage, uint64_t done,
                      uint64_t total) {
    cancel_at *c = user;
    if (done < c->done) c->monotonic = false;
    c->done = done;
    c->total = total;
    if (!c->prefix) return true;
    if (!strncmp(stage, c->prefix, strlen(c->prefix))) {
        c->fired = true;
        return false;
    }
    return true;
}

static void check_same_dirs(const char *a, const char *b) {
    static const char *files[] = {"model.safetensors", "config.json",
                                  "quantize_config.json",
                                  "generation_config.json"};
    for (int i = 0; i < 4; i++) {
        char pa[800], pb[800];
        snprintf(pa, sizeof pa, "%s/%s", a, files[i]);
        snprintf(pb, sizeof pb, "%s/%s", b, files[i]);
        TH_CHECK_MSG(files_equal(pa, pb), "%s differs", files[i]);
    }
}

static void test_resume(void) {
    lb_calib cal = random_calib(8, 32, 512, 7);
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.n_threads = 2;
    p.lm_head = true;
    p.group_size = 32;
    p.desc_act = true;
    const char *ref = tmp_path("qw-full"), *out = tmp_path("qw-resumed");
    lb_quantize_report rep;
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), ref, &p, &cal, &rep));
    TH_CHECK_INT(rep.layers_resumed, 0);
    TH_CHECK_INT(rep.n_modules, 15);
    /* where the time went: every part measured, parts within the total,
     * solve = the modules' own seconds */
    double solve = 0.0;
    for (int i = 0; i < rep.n_modules; i++) solve += rep.modules[i].seconds;
    TH_CHECK(rep.hessian_seconds > 0 && rep.forward_seconds > 0 &&
             rep.solve_seconds > 0 && rep.replay_seconds > 0);
    TH_CHECK_NEAR(rep.solve_seconds, solve, 1e-9);
    TH_CHECK(rep.hessian_seconds + rep.forward_seconds + rep.solve_seconds +
                 rep.replay_seconds <= rep.seconds);
    lb_quantize_report_free(&rep);
    /* cancelled when layer 2 starts: layer 0 is on disk */
    cancel_at c = {"layer 2/2", false, 0, 0, true};
    p.progress.fn = cancel_cb;
    p.progress.user = &c;
    TH_CHECK_FAILS(lb_quantize_model(th_shared(QW_DIR), out, &p, &cal, NULL),
                   LB_ERR_CANCELLED);
    TH_CHECK(c.fired);
    TH_CHECK(strstr(lb_last_error(), "--resume"));
    TH_CHECK(!lb_is_dir(out));
    TH_CHECK_INT(count_entries("qw-resumed.tmp-"), 1);
    /* cancelled again in lm_head: layers 0 and 1 on disk */
    c.prefix = "lm_head";
    p.resume = true;
    TH_CHECK_FAILS(lb_quantize_model(th_shared(QW_DIR), out, &p, &cal, &rep),
                   LB_ERR_CANCELLED);
    TH_CHECK_INT(count_entries("qw-resumed.tmp-"), 1);
    /* a different setting does not reuse it */
    p.progress.fn = NULL;
    p.damp_percent = 0.02;
    const char *other = tmp_path("qw-other");
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), other, &p, &cal, &rep));
    TH_CHECK_INT(rep.layers_resumed, 0);
    lb_quantize_report_free(&rep);
    /* what a run killed during the final assembly may leave in the temp
     * directory (shards of another --max-shard-size, their index, a config,
     * an interrupted atomic write) must not reach OUT */
    static const char *stale[] = {"model-00001-of-00002.safetensors",
                                  "model.safetensors.index.json",
                                  "config.json",
                                  "model.safetensors.tmp.12345.0"};
    char tmpd[800] = "";
    DIR *dd = opendir(th_tmpdir());
    struct dirent *de;
    while (dd && (de = readdir(dd)))
        if (!strncmp(de->d_name, "qw-resumed.tmp-", 15))
            snprintf(tmpd, sizeof tmpd, "%s/%s", th_tmpdir(), de->d_name);
    if (dd) closedir(dd);
    TH_CHECK(tmpd[0]);
    for (int i = 0; i < 4 && tmpd[0]; i++) {
        char sp[900];
        snprintf(sp, sizeof sp, "%s/%s", tmpd, stale[i]);
        FILE *f = fopen(sp, "wb");
        TH_CHECK(f != NULL);
        if (!f) continue;
        if (i == 1)
            fputs("{\"metadata\": {}, \"weight_map\": {\"lm_head.weight\": "
                  "\"model-00001-of-00002.safetensors\"}}", f);
        else
            fputs("stale", f);
        fclose(f);
    }
    /* resumed with the same settings (another checkpoint format is fine):
     * byte-identical to the uninterrupted run; the progress still runs to
     * its total */
    p.damp_percent = 0.01;
    cancel_at pr = {NULL, false, 0, 0, true};
    p.progress.fn = cancel_cb;
    p.progress.user = &pr;
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), out, &p, &cal, &rep));
    TH_CHECK_INT(rep.layers_resumed, 2);
    /* resumed layers cost replays only; lm_head's Hessian and solve ran */
    TH_CHECK(rep.forward_seconds == 0.0 && rep.replay_seconds > 0 &&
             rep.hessian_seconds > 0 && rep.solve_seconds > 0);
    TH_CHECK_NEAR(rep.solve_seconds, rep.modules[14].seconds, 1e-9);
    TH_CHECK(pr.monotonic && pr.total > 0 && pr.done == pr.total);
    p.progress.fn = NULL;
    TH_CHECK(rep.n_modules == 15 && rep.modules[0].resumed &&
             !rep.modules[14].resumed);
    TH_CHECK(rep.modules[0].loss > 0 && rep.modules[0].nsamples == 8);
    lb_quantize_report_free(&rep);
    TH_CHECK_INT(count_entries("qw-resumed.tmp-"), 0);
    check_same_dirs(ref, out);
    for (int i = 0; i < 4; i++) {
        char sp[900];
        snprintf(sp, sizeof sp, "%s/%s", out, stale[i]);
        if (i != 2) TH_CHECK_MSG(!lb_is_file(sp), "%s left in OUT", stale[i]);
    }
    /* a fresh run with the same settings: identical too (determinism) */
    const char *again = tmp_path("qw-again");
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), again, &p, &cal, NULL));
    check_same_dirs(ref, again);
    /* the lm_head was quantized: untied config, embedding kept */
    char pth[800];
    snprintf(pth, sizeof pth, "%s/config.json", ref);
    cJSON *cfg = read_json(pth);
    TH_CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(
        cfg, "tie_word_embeddings")));
    TH_CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config"),
        "lm_head")));
    cJSON_Delete(cfg);
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(ref, NULL, &m));
    /* desc_act g_idx: not block-constant -> F32 */
    if (m) {
        TH_CHECK_INT(m->layers[0].w[0].type, LB_TYPE_F32);
        TH_CHECK_INT(m->output.type, LB_TYPE_F32);
    }
    lb_model_free(m);
    lb_calib_free(&cal);
}

static void test_rtn_rules_v2(void) {
    const char *out = tmp_path("qw-rtn");
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_RTN;
    p.sym = false;
    p.group_size = 32;
    p.format = LB_GPTQ_FORMAT_V2;
    const char *rules[] = {"mlp\\.down_proj=8:g-1:sym",
                           "layers\\.1\\.self_attn\\.o_proj=skip"};
    p.rules = rules;
    p.n_rules = 2;
    p.write_report = true;
    lb_quantize_report rep;
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), out, &p, NULL, &rep));
    char pth[800];
    snprintf(pth, sizeof pth, "%s/config.json", out);
    cJSON *cfg = read_json(pth);
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config");
    const cJSON *dyn = cJSON_GetObjectItemCaseSensitive(qc, "dynamic");
    TH_CHECK_INT(cJSON_GetArraySize(dyn), 2);
    const cJSON *d0 = cJSON_GetArrayItem(dyn, 0);
    TH_CHECK_STR(d0 ? d0->string : NULL, "+:.*(?:mlp\\.down_proj)");
    TH_CHECK_INT(cJSON_GetObjectItemCaseSensitive(d0, "bits")->valueint, 8);
    TH_CHECK_INT(cJSON_GetObjectItemCaseSensitive(d0, "group_size")->valueint,
                 -1);
    TH_CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d0, "sym")));
    const cJSON *d1 = cJSON_GetArrayItem(dyn, 1);
    TH_CHECK_STR(d1 ? d1->string : NULL,
                 "-:.*(?:layers\\.1\\.self_attn\\.o_proj)");
    TH_CHECK_STR(cJSON_GetObjectItemCaseSensitive(qc, "checkpoint_format")
                     ->valuestring, "gptq_v2");
    TH_CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(qc, "sym")));
    cJSON_Delete(cfg);
    /* the skipped module's report entry */
    TH_CHECK(!rep.modules[10].quantized);
    TH_CHECK(strstr(rep.modules[10].note, "skip"));
    /* reload: layer-1 o_proj dense and bit-equal, down_proj 8-bit sym
     * per-channel -> Q8_0, the rest asym 4-bit -> F32; the SNR of the
     * reloaded weights equals the report's (f16 scales as stored) */
    lb_model *m = NULL, *src = NULL;
    TH_CHECK_OK(lb_model_load(out, NULL, &m));
    TH_CHECK_OK(lb_model_load(th_shared(QW_DIR), NULL, &src));
    if (m && src) {
        TH_CHECK_INT(m->layers[1].w[3].type, LB_TYPE_F32);
        TH_CHECK(memcmp(m->layers[1].w[3].data, src->layers[1].w[3].data,
                        src->layers[1].w[3].nbytes) == 0);
        TH_CHECK_INT(m->layers[0].w[6].type, LB_TYPE_Q8_0);
        TH_CHECK_INT(m->layers[0].w[0].type, LB_TYPE_F32);
        /* qwen2 q/k/v biases: written f16 (AutoGPTQ), read back */
        const float *b0 = m->layers[0].bq.data, *b1 = src->layers[0].bq.data;
        TH_CHECK(b0[3] == lb_f16_to_f32(lb_f32_to_f16(b1[3])));
        lb_model_load_opts o = {0};
        o.gptq_mode = LB_GPTQ_LOAD_F32;
        lb_model *mf = NULL;
        TH_CHECK_OK(lb_model_load(out, &o, &mf));
        for (int l = 0; mf && l < 2; l++)
            for (int i = 0; i < 7; i++) {
                const lb_quantize_module_report *r = &rep.modules[l * 7 + i];
                if (!r->quantized) continue;
                const lb_tensor *t = &mf->layers[l].w[i];
                const lb_tensor *w = &src->layers[l].w[i];
                double se = 0, sw = 0;
                const float *a = t->data, *b = w->data;
                for (int64_t k = 0; k < lb_tensor_nelements(t); k++) {
                    se += ((double)a[k] - b[k]) * ((double)a[k] - b[k]);
                    sw += (double)b[k] * b[k];
                }
                TH_CHECK_NEAR(10 * log10(sw / se), r->snr_db, 1e-9);
                TH_CHECK_INT(r->bits, i == 6 ? 8 : 4);
            }
        lb_model_free(mf);
    }
    lb_model_free(m);
    lb_model_free(src);
    lb_quantize_report_free(&rep);
}

/* A model with one all-positive linear: asymmetric zero points of 0,
 * which v1 cannot hold; v2 can. */
static void test_v1_zero_point(void) {
    const char *dir = tmp_path("qw-positive");
    mkdir(dir, 0755);
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(th_shared(QW_DIR), &st));
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_writer_create(&w));
    float *pos = NULL;
    for (size_t i = 0; st && i < lb_st_count(st); i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        const void *data = t->data;
        if (!strcmp(t->name, "model.layers.1.mlp.up_proj.weight")) {
            pos = malloc(t->nbytes);
            memcpy(pos, t->data, t->nbytes);
            for (int64_t k = 0; k < lb_tensor_nelements(t); k++)
                pos[k] = fabsf(pos[k]) + 0.01f;
            data = pos;
        }
        TH_CHECK_OK(lb_st_writer_add(w, t->name, t->type, t->n_dims, t->shape,
                                     data));
    }
    char pth[800];
    snprintf(pth, sizeof pth, "%s/model.safetensors", dir);
    TH_CHECK_OK(lb_st_writer_write_file(w, pth));
    lb_st_writer_free(w);
    lb_st_close(st);
    free(pos);
    size_t n;
    void *cfg = th_read_bin(th_shared(QW_DIR "/config.json"), &n);
    snprintf(pth, sizeof pth, "%s/config.json", dir);
    FILE *f = fopen(pth, "wb");
    fwrite(cfg, 1, n, f);
    fclose(f);
    free(cfg);
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_RTN;
    p.sym = false;
    p.group_size = 32;
    TH_CHECK_FAILS(lb_quantize_model(dir, tmp_path("qw-pos-v1"), &p, NULL,
                                     NULL),
                   LB_ERR_RANGE);
    TH_CHECK(strstr(lb_last_error(), "model.layers.1.mlp.up_proj"));
    TH_CHECK(strstr(lb_last_error(), "gptq_v2"));
    /* layer 0 finished and is kept for --resume */
    TH_CHECK(strstr(lb_last_error(), "--resume"));
    TH_CHECK_INT(count_entries("qw-pos-v1.tmp-"), 1);
    p.format = LB_GPTQ_FORMAT_V2;
    p.resume = true; /* another format may reuse the finished layers */
    lb_quantize_report rep;
    TH_CHECK_OK(lb_quantize_model(dir, tmp_path("qw-pos-v1"), &p, NULL, &rep));
    TH_CHECK_INT(rep.layers_resumed, 1);
    TH_CHECK_INT(count_entries("qw-pos-v1.tmp-"), 0);
    lb_quantize_report_free(&rep);
    lb_model_load_opts o = {0};
    o.gptq_mode = LB_GPTQ_LOAD_F32;
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(tmp_path("qw-pos-v1"), &o, &m));
    if (m) { /* all-positive row: dequantized values >= 0 */
        const float *wq = m->layers[1].w[5].data;
        float mn = 1;
        for (int64_t k = 0; k < lb_tensor_nelements(&m->layers[1].w[5]); k++)
            mn = wq[k] < mn ? wq[k] : mn;
        TH_CHECK(mn >= 0.0f);
    }
    lb_model_free(m);
}

/* Tied embeddings stored only as model.embed_tokens.weight (F16), lm_head
 * quantized from it; k/v_proj [48, 96] stay dense. The reload's logits match
 * the in-place fake-quant model's up to the f16 rounding of the scales. */
static void test_tied_f16_lm_head(void) {
    const char *src = th_shared("models/random/llama-tied-fp16-random");
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(src, NULL, &m));
    if (!m) return;
    lb_calib cal = random_calib(4, 32, m->config.vocab_size, 3);
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.lm_head = true;
    p.group_size = 32;
    p.n_threads = 2;
    const char *out = tmp_path("tied-f16");
    lb_quantize_report rep;
    TH_CHECK_OK(lb_quantize_model(src, out, &p, &cal, &rep));
    int nq = 0;
    for (int i = 0; i < rep.n_modules; i++) nq += rep.modules[i].quantized;
    TH_CHECK_INT(nq, rep.n_modules - 2 * m->config.n_layers); /* k, v */
    TH_CHECK(rep.modules[rep.n_modules - 1].quantized &&
             rep.modules[rep.n_modules - 1].nsamples == 4);
    lb_quantize_report_free(&rep);
    char pth[800];
    snprintf(pth, sizeof pth, "%s/model.safetensors", out);
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(pth, &st));
    if (st) {
        const lb_tensor *e = lb_st_find(st, "model.embed_tokens.weight");
        TH_CHECK(e && e->type == LB_TYPE_F16);
        TH_CHECK(lb_st_find(st, "lm_head.qweight") != NULL);
        TH_CHECK(lb_st_find(st, "model.layers.0.self_attn.k_proj.weight"));
        TH_CHECK(!lb_st_find(st, "model.layers.0.self_attn.k_proj.qweight"));
    }
    lb_st_close(st);
    lb_quantize_report rep2;
    TH_CHECK_OK(lb_quantize_model_inplace(m, &p, &cal, &rep2));
    lb_quantize_report_free(&rep2);
    lb_model_load_opts o = {0};
    o.gptq_mode = LB_GPTQ_LOAD_F32;
    lb_model *r = NULL;
    TH_CHECK_OK(lb_model_load(out, &o, &r));
    if (r) {
        TH_CHECK(!r->config.tie_word_embeddings);
        TH_CHECK(r->output.data != r->tok_embd.data);
        int32_t ids[16];
        for (int i = 0; i < 16; i++) ids[i] = (i * 131 + 7) % 1024;
        int V = m->config.vocab_size;
        float *a = malloc(16 * (size_t)V * 4), *b = malloc(16 * (size_t)V * 4);
        lb_context *c1 = NULL, *c2 = NULL;
        lb_context_params cp = lb_context_default_params();
        cp.n_ctx = 32;
        cp.n_threads = 2;
        TH_CHECK_OK(lb_context_create(m, &cp, &c1));
        TH_CHECK_OK(lb_context_create(r, &cp, &c2));
        TH_CHECK_OK(lb_model_forward(c1, ids, 16, 0, a, LB_LOGITS_ALL));
        TH_CHECK_OK(lb_model_forward(c2, ids, 16, 0, b, LB_LOGITS_ALL));
        double md = 0, ma = 0;
        for (int i = 0; i < 16 * V; i++) {
            md = fmax(md, fabs((double)a[i] - b[i]));
            ma = fmax(ma, fabs((double)a[i]));
        }
        fprintf(stderr, "  tied f16 model: max |logit diff| reload vs "
                "in-place %.3g (max |logit| %.3g)\n", md, ma);
        TH_CHECK(md < 2e-2 * ma);
        lb_context_free(c1);
        lb_context_free(c2);
        free(a);
        free(b);
    }
    lb_model_free(r);
    lb_model_free(m);
    lb_calib_free(&cal);
}

static void test_sharding_and_dirs(void) {
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_RTN;
    p.max_shard_bytes = 100000;
    const char *out = tmp_path("qw-shards");
    lb_quantize_report rep;
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), out, &p, NULL, &rep));
    TH_CHECK(rep.n_shards > 1);
    char pth[800];
    snprintf(pth, sizeof pth, "%s/model.safetensors.index.json", out);
    TH_CHECK(lb_is_file(pth));
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(out, NULL, &m));
    lb_model_free(m);
    lb_quantize_report_free(&rep);
    /* a non-empty output is refused without force, replaced with it */
    p.max_shard_bytes = 0;
    TH_CHECK_FAILS(lb_quantize_model(th_shared(QW_DIR), out, &p, NULL, NULL),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "--force"));
    p.force = true;
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), out, &p, NULL, NULL));
    TH_CHECK(!lb_is_file(pth)); /* the old index went with the old dir */
    snprintf(pth, sizeof pth, "%s/model.safetensors", out);
    TH_CHECK(lb_is_file(pth));
    TH_CHECK_INT(count_entries("qw-shards.old-"), 0);
    /* an existing empty directory is fine */
    const char *empty = tmp_path("qw-empty");
    mkdir(empty, 0755);
    p.force = false;
    TH_CHECK_OK(lb_quantize_model(th_shared(QW_DIR), empty, &p, NULL, NULL));
    /* errors */
    TH_CHECK_FAILS(lb_quantize_model(th_shared(QW_DIR), "/nonexistent/x/y",
                                     &p, NULL, NULL),
                   LB_ERR_NOT_FOUND);
    TH_CHECK_FAILS(lb_quantize_model(out, tmp_path("qw-requant"), &p, NULL,
                                     NULL),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "already quantized"));
    p.method = LB_QUANT_GPTQ;
    TH_CHECK_FAILS(lb_quantize_model(th_shared(QW_DIR), tmp_path("qw-nocal"),
                                     &p, NULL, NULL),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "calibration"));
    TH_CHECK_INT(count_entries("qw-nocal"), 0);
    p.profile = LB_QUANT_PROFILE_VLLM_W4A8;
    p.bits = 8;
    TH_CHECK_FAILS(lb_quantize_model(th_shared(QW_DIR), tmp_path("qw-x"), &p,
                                     NULL, NULL),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "4-bit"));
    p.bits = 4;
    const char *r8[] = {"down_proj=8"};
    p.rules = r8;
    p.n_rules = 1;
    p.method = LB_QUANT_RTN;
    TH_CHECK_FAILS(lb_quantize_model(th_shared(QW_DIR), tmp_path("qw-x"), &p,
                                     NULL, NULL),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "mlp.down_proj"));
    p.profile = LB_QUANT_PROFILE_NONE;
    const char *bad[] = {"mlp=5"};
    p.rules = bad;
    TH_CHECK_FAILS(lb_quantize_model(th_shared(QW_DIR), tmp_path("qw-x"), &p,
                                     NULL, NULL),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "'mlp=5'"));
    TH_CHECK_INT(count_entries("qw-x"), 0);
}

int main(void) {
    TH_RUN(test_resume);
    TH_RUN(test_rtn_rules_v2);
    TH_RUN(test_v1_zero_point);
    TH_RUN(test_tied_f16_lm_head);
    TH_RUN(test_sharding_and_dirs);
    qt_cleanup();
    return th_report();
}
