/*
 * lb_quantize_model on tinystories-656k, the reference protocol: the
 * packed tensors equal AutoGPTQ's own checkpoint (../shared/reference/
 * gptq_model/gptq_checkpoint), the reload gives ppl within 1% of 41.4763
 * (F32) and loads as exact Q4_0; config.json / quantize_config.json /
 * tokenizer files / report; nothing left beside the output. The
 * vllm-w4a8 profile (lm_head quantized and untied, BF16 embedding, SNR
 * report). Resume, rules, formats, directories: test_quantize_resume.c.
 */
#include "test_quantize_util.h"

static void test_reference_checkpoint(void) {
    lb_calib cal;
    TH_CHECK_OK(lb_calib_load_ids(th_shared("reference/gptq_model/"
                                            "calib_ids.i32"),
                                  128, 0, &cal));
    const char *out = tmp_path("ts-gptq");
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.n_threads = 2;
    p.write_report = true;
    lb_quantize_report rep;
    TH_CHECK_OK(lb_quantize_model(th_shared(TS_DIR), out, &p, &cal, &rep));
    TH_CHECK_INT(rep.n_shards, 1);
    TH_CHECK_INT(rep.quantized_params, 393216);
    TH_CHECK_NEAR(rep.bits_per_weight, 4.34375, 1e-9);
    TH_CHECK_INT(count_entries("ts-gptq.tmp-"), 0);
    /* packed tensors vs AutoGPTQ's checkpoint */
    lb_safetensors *mine = NULL, *theirs = NULL;
    char p1[800];
    snprintf(p1, sizeof p1, "%s/model.safetensors", out);
    TH_CHECK_OK(lb_st_open(p1, &mine));
    TH_CHECK_OK(lb_st_open(th_shared("reference/gptq_model/gptq_checkpoint/"
                                     "gptq_model-4bit-128g.safetensors"),
                           &theirs));
    if (mine && theirs) {
        TH_CHECK_STR(lb_st_metadata(mine, "format"), "pt");
        TH_CHECK_STR(lb_st_metadata(mine, "quantizer"), "lowbit:0.1.0");
        int64_t n_words = 0, n_diff = 0, n_sc = 0, n_sc_diff = 0;
        int n_t = 0;
        for (size_t i = 0; i < lb_st_count(theirs); i++) {
            const lb_tensor *t = lb_st_tensor_at(theirs, i);
            /* tied: the source stores only lm_head.weight, AutoGPTQ's
             * state_dict also has model.embed_tokens.weight */
            if (!strcmp(t->name, "model.embed_tokens.weight")) continue;
            const lb_tensor *u = lb_st_find(mine, t->name);
            TH_CHECK_MSG(u != NULL, "%s missing", t->name);
            if (!u) continue;
            n_t++;
            TH_CHECK_MSG(u->type == t->type && u->nbytes == t->nbytes,
                         "%s: %s %zu vs %s %zu", t->name,
                         lb_type_name(u->type), u->nbytes,
                         lb_type_name(t->type), t->nbytes);
            if (u->nbytes != t->nbytes) continue;
            bool scales = strstr(t->name, ".scales") != NULL;
            size_t esz = scales ? 2 : 4;
            for (size_t k = 0; k < t->nbytes / esz; k++) {
                bool d = memcmp((const uint8_t *)t->data + k * esz,
                                (const uint8_t *)u->data + k * esz, esz) != 0;
                if (scales) {
                    n_sc++;
                    n_sc_diff += d;
                } else {
                    n_words++;
                    n_diff += d;
                }
            }
        }
        fprintf(stderr, "  vs AutoGPTQ's checkpoint: %d tensors, %lld of %lld "
                "words (qweight, qzeros, g_idx, other tensors) and %lld of "
                "%lld f16 scales differ\n",
                n_t, (long long)n_diff, (long long)n_words,
                (long long)n_sc_diff, (long long)n_sc);
        TH_CHECK_INT(n_t, (int)lb_st_count(theirs) - 1);
        TH_CHECK_INT(lb_st_count(mine), lb_st_count(theirs) - 1);
        TH_CHECK_INT(n_diff, 0);
        /* the forward's f32 rounding differs from torch's: allow a few f16
         * scales to round the other way (measured: none) */
        TH_CHECK(n_sc_diff * 100 <= n_sc);
    }
    lb_st_close(mine);
    lb_st_close(theirs);
    /* configs */
    snprintf(p1, sizeof p1, "%s/config.json", out);
    cJSON *cfg = read_json(p1);
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config");
    TH_CHECK(cJSON_IsObject(qc));
    TH_CHECK_INT(cJSON_GetObjectItemCaseSensitive(qc, "bits")->valueint, 4);
    TH_CHECK_INT(cJSON_GetObjectItemCaseSensitive(qc, "group_size")->valueint,
                 128);
    TH_CHECK_STR(cJSON_GetObjectItemCaseSensitive(qc, "quant_method")
                     ->valuestring, "gptq");
    TH_CHECK_STR(cJSON_GetObjectItemCaseSensitive(qc, "checkpoint_format")
                     ->valuestring, "gptq");
    TH_CHECK_STR(cJSON_GetObjectItemCaseSensitive(
                     cJSON_GetObjectItemCaseSensitive(qc, "meta"), "quantizer")
                     ->valuestring, "lowbit:0.1.0");
    TH_CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cfg, "tie_word_embeddings")));
    TH_CHECK_INT(cJSON_GetObjectItemCaseSensitive(cfg, "vocab_size")->valueint,
                 2048);
    cJSON_Delete(cfg);
    snprintf(p1, sizeof p1, "%s/quantize_config.json", out);
    cJSON *qcf = read_json(p1);
    TH_CHECK(qcf && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(
                        qcf, "model_file_base_name")));
    TH_CHECK_NEAR(cJSON_GetObjectItemCaseSensitive(qcf, "damp_percent")
                      ->valuedouble, 0.01, 1e-12);
    cJSON_Delete(qcf);
    static const char *copied[] = {"tokenizer.json", "tokenizer_config.json",
                                   "special_tokens_map.json",
                                   "generation_config.json"};
    for (int i = 0; i < 4; i++) {
        char a[800];
        snprintf(a, sizeof a, "%s/%s", out, copied[i]);
        char b[300];
        snprintf(b, sizeof b, "%s/%s", TS_DIR, copied[i]);
        TH_CHECK_MSG(files_equal(a, th_shared(b)), "%s", copied[i]);
    }
    snprintf(p1, sizeof p1, "%s/quantize_report.json", out);
    cJSON *rj = read_json(p1);
    const cJSON *mods = cJSON_GetObjectItemCaseSensitive(rj, "modules");
    TH_CHECK_INT(cJSON_GetArraySize(mods), 14);
    const cJSON *m0 = cJSON_GetArrayItem(mods, 0);
    TH_CHECK_STR(cJSON_GetObjectItemCaseSensitive(m0, "name")->valuestring,
                 "model.layers.0.self_attn.q_proj");
    TH_CHECK_NEAR(cJSON_GetObjectItemCaseSensitive(m0, "loss")->valuedouble,
                  130.68748474121094, 1e-3);
    TH_CHECK_INT(cJSON_GetObjectItemCaseSensitive(m0, "nsamples")->valueint,
                 128);
    cJSON_Delete(rj);
    snprintf(p1, sizeof p1, "%s/lowbit-state.json", out);
    TH_CHECK(!lb_is_file(p1));
    snprintf(p1, sizeof p1, "%s/layers", out);
    TH_CHECK(!lb_is_dir(p1));
    /* reload: F32 (fake-quant with f16 scales) and exact Q4_0 */
    lb_model_load_opts o = {0};
    o.gptq_mode = LB_GPTQ_LOAD_F32;
    lb_model *mf = NULL, *mq = NULL;
    TH_CHECK_OK(lb_model_load(out, &o, &mf));
    TH_CHECK_OK(lb_model_load(out, NULL, &mq));
    if (mf && mq) {
        for (int l = 0; l < 2; l++)
            for (int i = 0; i < 7; i++) {
                TH_CHECK_INT(mf->layers[l].w[i].type, LB_TYPE_F32);
                TH_CHECK_INT(mq->layers[l].w[i].type, LB_TYPE_Q4_0);
            }
        double pf = ppl_full256(mf), pq = ppl_full256(mq);
        fprintf(stderr, "  reload: F32 ppl %.6f (AutoGPTQ's checkpoint "
                "41.476337), Q4_0 ppl %.6f\n", pf, pq);
        TH_CHECK_NEAR(pf, 41.476336683400724, 41.4763 * 0.01);
        TH_CHECK_NEAR(pf, 41.476336683400724, 41.4763 * 1e-4);
        TH_CHECK_NEAR(pq, 41.476336683400724, 41.4763 * 0.01);
        TH_CHECK(pf < 43.04081023366871);
    }
    lb_model_free(mf);
    lb_model_free(mq);
    lb_quantize_report_free(&rep);
    lb_calib_free(&cal);
}

static void test_vllm_profile(void) {
    const char *out = tmp_path("ts-vllm");
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_RTN;
    p.profile = LB_QUANT_PROFILE_VLLM_W4A8;
    lb_quantize_report rep;
    TH_CHECK_OK(lb_quantize_model(th_shared(TS_DIR), out, &p, NULL, &rep));
    TH_CHECK_INT(rep.n_modules, 15);
    char pth[800];
    snprintf(pth, sizeof pth, "%s/config.json", out);
    cJSON *cfg = read_json(pth);
    TH_CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(
        cfg, "tie_word_embeddings")));
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config");
    TH_CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(qc, "lm_head")));
    TH_CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(qc, "sym")));
    cJSON_Delete(cfg);
    snprintf(pth, sizeof pth, "%s/model.safetensors", out);
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(pth, &st));
    if (st) {
        const lb_tensor *e = lb_st_find(st, "model.embed_tokens.weight");
        TH_CHECK(e && e->type == LB_TYPE_BF16);
        TH_CHECK(lb_st_find(st, "lm_head.qweight") != NULL);
        TH_CHECK(lb_st_find(st, "lm_head.weight") == NULL);
        /* symmetric: every stored v1 field is 7 (zero 8) */
        const lb_tensor *qz = lb_st_find(st, "lm_head.qzeros");
        TH_CHECK(qz && qz->nbytes > 0);
        int64_t bad = 0;
        for (size_t k = 0; qz && k < qz->nbytes / 4; k++)
            bad += ((const uint32_t *)qz->data)[k] != 0x77777777u;
        TH_CHECK_INT(bad, 0);
    }
    lb_st_close(st);
    snprintf(pth, sizeof pth, "%s/quantization_report.json", out);
    cJSON *r = read_json(pth);
    const cJSON *snr = cJSON_GetObjectItemCaseSensitive(r, "snr_db");
    double mn = cJSON_GetObjectItemCaseSensitive(snr, "min")->valuedouble,
           mx = cJSON_GetObjectItemCaseSensitive(snr, "max")->valuedouble,
           me = cJSON_GetObjectItemCaseSensitive(snr, "mean")->valuedouble;
    fprintf(stderr, "  vllm-w4a8 (RTN): SNR %.2f / %.2f / %.2f dB, %.4f "
            "bits/weight\n", mn, me, mx, rep.bits_per_weight);
    TH_CHECK(mn > 5 && mn <= me && me <= mx && mx < 40);
    TH_CHECK_INT(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r,
                                                                    "tensors")),
                 15);
    TH_CHECK_NEAR(cJSON_GetObjectItemCaseSensitive(r, "bits_per_weight")
                      ->valuedouble, rep.bits_per_weight, 1e-9);
    cJSON_Delete(r);
    /* MSE scale search: no worse SNR than plain RTN for any tensor */
    lb_quantize_params q;
    lb_quantize_default_params(&q);
    q.method = LB_QUANT_RTN;
    q.lm_head = true;
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared(TS_DIR), NULL, &m));
    lb_quantize_report plain;
    TH_CHECK_OK(lb_quantize_model_inplace(m, &q, NULL, &plain));
    lb_model_free(m);
    int better = 0;
    for (int i = 0; i < 15; i++) better += rep.modules[i].snr_db >
                                           plain.modules[i].snr_db;
    TH_CHECK(better >= 13);
    lb_quantize_report_free(&plain);
    /* reload: untied, quantized lm_head as exact Q4_0 (mse scales are
     * f16 values of the searched scale), BF16 embedding */
    m = NULL;
    TH_CHECK_OK(lb_model_load(out, NULL, &m));
    if (m) {
        TH_CHECK(!m->config.tie_word_embeddings);
        TH_CHECK_INT(m->output.type, LB_TYPE_Q4_0);
        TH_CHECK_INT(m->tok_embd.type, LB_TYPE_BF16);
        double ppl = ppl_full256(m);
        fprintf(stderr, "  vllm-w4a8 (RTN) reload ppl %.4f\n", ppl);
        TH_CHECK(ppl > 39.0 && ppl < 50.0);
    }
    lb_model_free(m);
    lb_quantize_report_free(&rep);
}

int main(void) {
    TH_RUN(test_reference_checkpoint);
    TH_RUN(test_vllm_profile);
    qt_cleanup();
    return th_report();
}
