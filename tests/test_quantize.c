/*
 * Whole-model quantization (lowbit/quantize.h) against the end-to-end
 * reference ../shared/reference/gptq_model (AutoGPTQ's algorithm on
 * tinystories-656k, 4-bit sym g128, 128 x 128 calibration ids):
 *  - in memory (fake-quant f32): RTN codes/scales identical to the
 *    reference and ppl 43.0408; GPTQ ppl within 1% of 41.4751 (our forward
 *    differs from torch's by ~1e-6 relative, so Hessians and then a few
 *    codes differ), per-linear losses and codes compared with the
 *    reference's;
 *  - module rules, parameter validation, calibration loading/sampling.
 * Checkpoint writing, reload and resume: tests/test_quantize_ckpt.c.
 */
#include "th.h"

#include "lowbit/eval.h"
#include "lowbit/model.h"
#include "lowbit/quantize.h"
#include "lowbit/safetensors.h"

#include <cjson/cJSON.h>

#define TS_DIR "models/tinystories-656k"

static double ppl_full256(lb_model *m) {
    size_t nb = 0;
    int32_t *ids = th_read_bin(th_shared("reference/ppl/ids/tinystories-lf."
                                         "hf-tokenizers.ids.i32"),
                               &nb);
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    lb_ppl_params p = lb_ppl_default_params();
    p.protocol = LB_PPL_FULL;
    p.n_ctx = 256;
    lb_ppl_result r = {0};
    if (ctx && ids)
        TH_CHECK_OK(lb_perplexity(ctx, ids, (int64_t)nb / 4, &p, &r));
    lb_context_free(ctx);
    free(ids);
    return r.ppl;
}

static cJSON *read_json(const char *path) {
    size_t n;
    char *s = th_read_bin(path, &n);
    if (!s) return NULL;
    cJSON *j = cJSON_ParseWithLength(s, n);
    free(s);
    return j;
}

/* Compare the model's (dequantized f32) linears with the reference's
 * codes/scales: count codes that differ. */
static void compare_codes(lb_model *m, const lb_safetensors *ref,
                          const char *prefix, int64_t *n_codes,
                          int64_t *n_diff, double *max_w_diff) {
    *n_codes = *n_diff = 0;
    *max_w_diff = 0;
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < LB_LINEAR_COUNT; i++) {
            char nm[160];
            snprintf(nm, sizeof nm, "%s.model.layers.%d.%s.W_deq", prefix, l,
                     lb_linear_name((lb_linear_id)i));
            const lb_tensor *wd = lb_st_find(ref, nm);
            snprintf(nm, sizeof nm, "%s.model.layers.%d.%s.scale", prefix, l,
                     lb_linear_name((lb_linear_id)i));
            const lb_tensor *sc = lb_st_find(ref, nm);
            const lb_tensor *w = &m->layers[l].w[i];
            TH_CHECK(w->type == LB_TYPE_F32);
            if (!sc || w->type != LB_TYPE_F32) continue;
            const int64_t out = w->shape[0], in = w->shape[1];
            const int64_t ng = sc->shape[1];
            const float *W = w->data, *S = sc->data;
            const float *R = wd ? wd->data : NULL;
            for (int64_t o = 0; o < out; o++)
                for (int64_t c = 0; c < in; c++) {
                    float s = S[o * ng + c / 128];
                    float mine = W[o * in + c];
                    float theirs = R ? R[o * in + c] : NAN;
                    if (!R) {
                        /* RTN: rebuild from codes */
                        snprintf(nm, sizeof nm, "%s.model.layers.%d.%s.codes",
                                 prefix, l, lb_linear_name((lb_linear_id)i));
                        const lb_tensor *cd = lb_st_find(ref, nm);
                        theirs = s * (float)(((const int32_t *)cd->data)
                                                 [o * in + c] - 8);
                    }
                    (*n_codes)++;
                    if (mine != theirs) (*n_diff)++;
                    double d = fabs((double)mine - (double)theirs);
                    if (d > *max_w_diff) *max_w_diff = d;
                }
        }
}

static lb_calib ref_calib(void) {
    lb_calib c;
    TH_CHECK_OK(lb_calib_load_ids(th_shared("reference/gptq_model/"
                                            "calib_ids.i32"),
                                  128, 0, &c));
    TH_CHECK_INT(c.nsamples, 128);
    return c;
}

static void test_rtn_reference(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared(TS_DIR), NULL, &m));
    lb_safetensors *ref = NULL;
    TH_CHECK_OK(lb_st_open(th_shared("reference/gptq_model/"
                                     "quant_tensors.safetensors"),
                           &ref));
    if (!m || !ref) goto done;
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_RTN;
    p.n_threads = 2;
    lb_quantize_report rep;
    TH_CHECK_OK(lb_quantize_model_inplace(m, &p, NULL, &rep));
    TH_CHECK_INT(rep.n_modules, 14);
    int64_t n, diff;
    double maxd;
    compare_codes(m, ref, "rtn", &n, &diff, &maxd);
    fprintf(stderr, "  RTN: %lld of %lld weights differ from the reference\n",
            (long long)diff, (long long)n);
    TH_CHECK_INT(n, 393216);
    TH_CHECK_INT(diff, 0);
    double ppl = ppl_full256(m);
    fprintf(stderr, "  RTN ppl %.6f (reference 43.040810)\n", ppl);
    TH_CHECK_NEAR(ppl, 43.04081023366871, 43.04 * 2e-5);
    lb_quantize_report_free(&rep);
done:
    lb_st_close(ref);
    lb_model_free(m);
}

static void test_gptq_reference(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared(TS_DIR), NULL, &m));
    lb_safetensors *ref = NULL;
    TH_CHECK_OK(lb_st_open(th_shared("reference/gptq_model/"
                                     "quant_tensors.safetensors"),
                           &ref));
    cJSON *meta = read_json(th_shared("reference/gptq_model/meta.json"));
    lb_calib cal = ref_calib();
    if (!m || !ref || !meta || !cal.ids) {
        TH_CHECK(0);
        goto done;
    }
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.n_threads = 2;
    lb_quantize_report rep;
    double t0 = lb_time_s();
    TH_CHECK_OK(lb_quantize_model_inplace(m, &p, &cal, &rep));
    double secs = lb_time_s() - t0;
    TH_CHECK_INT(rep.nsamples, 128);
    TH_CHECK_INT(rep.seqlen, 128);
    TH_CHECK_INT(rep.activation_bytes, 128 * 128 * 128 * 4);
    /* per-linear losses vs the reference's table */
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(meta, "algorithm"), "per_linear");
    double max_rel = 0.0;
    fprintf(stderr, "  %-34s %12s %12s %8s\n", "linear", "lowbit", "AutoGPTQ",
            "rel");
    for (int i = 0; i < rep.n_modules; i++) {
        const lb_quantize_module_report *r = &rep.modules[i];
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(pl, r->name);
        double want = cJSON_GetObjectItemCaseSensitive(e, "total_loss")
                          ->valuedouble;
        double rel = fabs(r->loss - want) / want;
        if (rel > max_rel) max_rel = rel;
        fprintf(stderr, "  %-34s %12.4f %12.4f %8.2e\n", r->name, r->loss,
                want, rel);
        TH_CHECK_INT(r->nsamples, 128);
        TH_CHECK(r->quantized);
        TH_CHECK_NEAR(r->damp_percent, 0.01, 1e-12);
        TH_CHECK_INT(r->n_damp_retries, 0);
        TH_CHECK_NEAR(r->avg_loss, r->loss / 128.0, 1e-9 * r->loss);
    }
    /* the forward differs from torch's by f32 rounding only: losses agree
     * to well under 1% (measured ~1e-5) */
    TH_CHECK(max_rel < 1e-3);
    int64_t n, diff;
    double maxd;
    compare_codes(m, ref, "gptq", &n, &diff, &maxd);
    fprintf(stderr, "  GPTQ: %lld of %lld weights differ from AutoGPTQ's "
            "(max |diff| %.3g); %.2f s\n",
            (long long)diff, (long long)n, maxd, secs);
    TH_CHECK(maxd < 1e-5); /* same codes, scales within f32 rounding */
    double ppl = ppl_full256(m);
    fprintf(stderr, "  GPTQ ppl %.6f (reference 41.475070, RTN 43.040810)\n",
            ppl);
    TH_CHECK_NEAR(ppl, 41.47507006807855, 41.475 * 0.01);
    TH_CHECK(ppl < 43.04081023366871);
    lb_quantize_report_free(&rep);
done:
    lb_calib_free(&cal);
    cJSON_Delete(meta);
    lb_st_close(ref);
    lb_model_free(m);
}

int main(void) {
    TH_RUN(test_rtn_reference);
    TH_RUN(test_gptq_reference);
    return th_report();
}
