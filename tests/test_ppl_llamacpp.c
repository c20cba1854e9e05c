/*
 * Perplexity of the GGUF models, llama.cpp protocol, against every figure
 * of ../shared/reference/ppl/llama_perplexity_runs.json (llama-perplexity
 * 0.7.0, -c 128 / 256, -t 2, f16 KV cache): the text is read as
 * llama-perplexity reads it (bytes, one trailing '\n' removed), tokenized
 * with the file's own GGUF vocabulary (add_special, special tokens as
 * plain text), evaluated with lb_perplexity (lowbit/eval.h, BOS written
 * over each chunk's first token when the vocabulary adds BOS) on an f16 KV
 * cache, with the inputs of F16 weights rounded to f16 as ggml does
 * (lb_context_params.f16_activations). Checked: the number of chunks and of scored tokens exactly (so
 * the tokenization agrees too), and the perplexity within 0.1% for F32,
 * 0.2% for Q8_0 and 0.5% for Q4_0 models. Runs whose reference crashed (ts656k
 * on texts with characters outside its vocabulary) have no figure and are
 * skipped.
 *
 * LB_PPL_QUICK=1 skips the wikitext-2 runs (most of the time: ~800k tokens
 * per run); they are always skipped under AddressSanitizer.
 *
 * Needs lowbit/eval.h (the perplexity library); exits 77 (skipped) when it
 * is not part of the build.
 */
#include "th.h"

/* ~5x slower under AddressSanitizer: the wikitext runs are left out.
 * (GCC defines __SANITIZE_ADDRESS__; clang has __has_feature, which must
 * not appear in an #if that GCC parses.) */
#if defined(__SANITIZE_ADDRESS__)
#define LB_PPL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LB_PPL_SANITIZED 1
#endif
#endif

#if __has_include("lowbit/eval.h")
#include "lowbit/eval.h"
#include "lowbit/model.h"
#include "lowbit/tokenizer.h"

#include <cjson/cJSON.h>

static const char *text_path(const char *run_text_file) {
    /* the json's text_file is relative to ../shared */
    return th_shared(run_text_file);
}

static void test_llama_perplexity_runs(void) {
    size_t n = 0;
    char *js = th_read_bin(th_shared("reference/ppl/llama_perplexity_runs.json"), &n);
    TH_CHECK(js != NULL);
    if (!js) return;
    cJSON *root = cJSON_ParseWithLength(js, n);
    free(js);
    cJSON *runs = cJSON_GetObjectItem(root, "runs");
    TH_CHECK(cJSON_IsArray(runs));
    bool quick = getenv("LB_PPL_QUICK") && atoi(getenv("LB_PPL_QUICK"));
#ifdef LB_PPL_SANITIZED
    quick = true;
#endif
    int n_checked = 0, n_figures = 0;
    double worst[3] = {0, 0, 0}; /* F32, Q8_0, Q4_0 */
    cJSON *r;
    cJSON_ArrayForEach(r, runs) {
        cJSON *ppl_j = cJSON_GetObjectItem(r, "ppl");
        if (!cJSON_IsNumber(ppl_j)) continue; /* the reference crashed */
        n_figures++;
        const char *model = cJSON_GetObjectItem(r, "model")->valuestring;
        const char *mfile = cJSON_GetObjectItem(r, "model_file")->valuestring;
        const char *tfile = cJSON_GetObjectItem(r, "text_file")->valuestring;
        const char *text = cJSON_GetObjectItem(r, "text")->valuestring;
        const int n_ctx = cJSON_GetObjectItem(r, "n_ctx")->valueint;
        const int want_chunks = cJSON_GetObjectItem(r, "n_chunks")->valueint;
        const int want_scored = cJSON_GetObjectItem(r, "n_scored_tokens")->valueint;
        const double want = ppl_j->valuedouble;
        if (quick && strstr(text, "wiki")) continue;
        const int kind = strstr(model, "q4_0") ? 2 : strstr(model, "q8_0") ? 1 : 0;
        /* Q8_0 / Q4_0 quantize the activations too (ggml's vec_dot_type):
         * a 1-ulp input difference moves a code by a step, so their figures
         * follow the sum order; storing llama-layout heads in HF order
         * (lb_rope_apply) moved stories260K-q8_0 on the 889-token cs336
         * text from +0.097% to +0.110% while the c128 runs moved closer */
        const double tol = kind == 2 ? 0.005 : kind == 1 ? 0.002 : 0.001;

        char mpath[512];
        snprintf(mpath, sizeof mpath, "%s", th_shared(mfile));
        lb_model *m = NULL;
        lb_tokenizer *tok = NULL;
        TH_CHECK_OK(lb_model_load(mpath, NULL, &m));
        TH_CHECK_OK(lb_tokenizer_load(mpath, &tok));
        size_t tl = 0;
        char *txt = th_read_bin(text_path(tfile), &tl);
        TH_CHECK(txt != NULL);
        int32_t *ids = NULL;
        size_t n_ids = 0;
        if (m && tok && txt) {
            if (tl && txt[tl - 1] == '\n') tl--; /* llama-perplexity drops one */
            TH_CHECK_OK(lb_tokenizer_encode_ex(tok, txt, tl,
                                               LB_TOK_ADD_SPECIAL | LB_TOK_PLAIN_SPECIAL,
                                               &ids, NULL, &n_ids));
        }
        if (ids) {
            lb_context_params cp = lb_context_default_params();
            cp.n_ctx = n_ctx;
            cp.n_batch = n_ctx;
            cp.kv_type = LB_TYPE_F16; /* llama-perplexity's default cache */
            /* ggml rounds the inputs of F16 weights (stories260K's Q8_0 and
             * Q4_0 files keep ffn_down in F16) to f16 */
            cp.f16_activations = true;
            cp.n_threads = 2;
            lb_context *ctx = NULL;
            TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
            lb_ppl_params pp = lb_ppl_default_params();
            pp.protocol = LB_PPL_LLAMA;
            pp.n_ctx = n_ctx;
            pp.bos_id = lb_tokenizer_add_bos(tok) ? lb_tokenizer_bos(tok) : -1;
            lb_ppl_result res;
            memset(&res, 0, sizeof res);
            double t0 = lb_time_s();
            if (ctx) TH_CHECK_OK(lb_perplexity(ctx, ids, (int64_t)n_ids, &pp, &res));
            double rel = (res.ppl - want) / want;
            fprintf(stderr, "  %-17s %-18s c%-3d: %5d chunks %6lld scored  ppl %10.4f  "
                    "llama.cpp %10.4f  rel %+.5f%%  (%.1f s)\n",
                    model, text, n_ctx, (int)res.chunks, (long long)res.tokens_scored,
                    res.ppl, want, 100 * rel, lb_time_s() - t0);
            TH_CHECK_INT(res.chunks, want_chunks);
            TH_CHECK_INT(res.tokens_scored, want_scored);
            TH_CHECK_MSG(fabs(rel) <= tol, "%s %s c%d: ppl %.4f vs %.4f (%.4f%% > %.2f%%)",
                         model, text, n_ctx, res.ppl, want, 100 * rel, 100 * tol);
            if (fabs(rel) > worst[kind]) worst[kind] = fabs(rel);
            n_checked++;
            lb_context_free(ctx);
        }
        free(ids);
        free(txt);
        lb_tokenizer_free(tok);
        lb_model_free(m);
    }
    fprintf(stderr, "  %d of %d reference figures checked; worst |rel| F32 %.4f%%, Q8_0 %.4f%%, "
            "Q4_0 %.4f%%\n", n_checked, n_figures, 100 * worst[0], 100 * worst[1],
            100 * worst[2]);
    TH_CHECK(n_figures == 26);
    TH_CHECK(n_checked == (quick ? 16 : 26));
    cJSON_Delete(root);
}

int main(void) {
    TH_RUN(test_llama_perplexity_runs);
    return th_report();
}
#else
int main(void) {
    th_skip("lowbit/eval.h (the perplexity library, branch quantize) is not part of this build");
    return 77;
}
#endif
