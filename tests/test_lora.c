/*
 * LoRA adapters (lowbit/lora.h) and EoRA factorisation (lowbit/eora.h):
 *  - the kernel against its _ref twin on awkward sizes, F32 and F16;
 *  - a model with an adapter against the same model with the adapter merged
 *    into its F32 weights (W + s B A, computed here in double): logits of
 *    the batched forward, one-token decode and the multi-sequence forward
 *    (a sequence without adapter gives the base logits);
 *  - Q4_0 GGUF model: single-context forward (fused/streamed MLP turned
 *    off by the adapter) against the multi-sequence forward;
 *  - PEFT and GGUF write/read round trips (q/k rows permuted in the GGUF
 *    file, checked against LlamaModel.permute's formula);
 *  - hostile adapters: wrong shape, rank disagreeing with r, layer beyond
 *    the base, lora_A without lora_B, non-finite factor, GGUF adapter of
 *    another architecture, embeddings: each error names the tensor;
 *  - EoRA: rank-R error in the H-weighted norm, computed independently as
 *    trace(E H E^T) with E = dW - B A, equals the sum of the dropped
 *    squared singular values; all of them sum to trace(dW H dW^T).
 */
#include "th.h"

#include "lowbit/batch.h"
#include "lowbit/eora.h"
#include "lowbit/file.h"
#include "lowbit/gguf.h"
#include "lowbit/lora.h"
#include "lowbit/model.h"
#include "lowbit/safetensors.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / (double)(1ull << 52) - 1.0;
}

static const char *model_dir(void) {
    const char *d = th_shared("models/tinystories-656k");
    char p[1100];
    snprintf(p, sizeof p, "%s/config.json", d);
    if (!lb_is_file(p)) th_skip("tinystories-656k not found");
    return d;
}

/* ------------------------------------------------------------------------ */

static void test_kernel_vs_ref(void) {
    static const int64_t ins[] = {1, 7, 8, 15, 16, 17, 33, 64, 129};
    static const int64_t ranks[] = {1, 3, 8, 9, 16, 31};
    for (int t = 0; t < 2; t++)
        for (size_t a = 0; a < sizeof ins / sizeof *ins; a++)
            for (size_t b = 0; b < sizeof ranks / sizeof *ranks; b++) {
                const int64_t in = ins[a], r = ranks[b], out = 13 + a;
                const size_t es = t ? 2 : 4;
                uint8_t *A = malloc((size_t)(r * in) * es), *B = malloc((size_t)(out * r) * es);
                float *x = malloc((size_t)in * 4), *y0 = calloc((size_t)out, 4),
                      *y1 = calloc((size_t)out, 4), tmp[64];
                for (int64_t i = 0; i < r * in; i++) {
                    float v = (float)urand();
                    if (t) ((uint16_t *)A)[i] = lb_f32_to_f16(v); else ((float *)A)[i] = v;
                }
                for (int64_t i = 0; i < out * r; i++) {
                    float v = (float)urand();
                    if (t) ((uint16_t *)B)[i] = lb_f32_to_f16(v); else ((float *)B)[i] = v;
                }
                for (int64_t i = 0; i < in; i++) x[i] = (float)urand();
                for (int64_t i = 0; i < out; i++) y0[i] = y1[i] = (float)i;
                lb_lora_linear l = {out, in, r, t ? LB_TYPE_F16 : LB_TYPE_F32, A, B, 1.0f};
                lb_lora_apply_ref(&l, x, y0, 0.75f, tmp);
                lb_lora_apply(&l, x, y1, 0.75f, tmp);
                double worst = 0;
                for (int64_t i = 0; i < out; i++)
                    worst = fmax(worst, fabs((double)y0[i] - y1[i]) / (1.0 + fabs(y0[i])));
                TH_CHECK_MSG(worst < 1e-5, "type %d in %lld rank %lld: %g", t,
                             (long long)in, (long long)r, worst);
                /* and against a double computation */
                double e = 0;
                for (int64_t o = 0; o < out; o++) {
                    double s = 0;
                    for (int64_t j = 0; j < r; j++) {
                        double ax = 0;
                        for (int64_t i = 0; i < in; i++)
                            ax += (t ? lb_f16_to_f32(((uint16_t *)A)[j * in + i]) : ((float *)A)[j * in + i]) * (double)x[i];
                        s += (t ? lb_f16_to_f32(((uint16_t *)B)[o * r + j]) : ((float *)B)[o * r + j]) * ax;
                    }
                    e = fmax(e, fabs((double)o + 0.75 * s - y0[o]) / (1.0 + fabs(y0[o])));
                }
                TH_CHECK_MSG(e < 1e-5, "ref vs double: %g", e);
                free(A); free(B); free(x); free(y0); free(y1);
            }
}

/* A random adapter on every linear of m (rank r, scale alpha/r). */
static lb_lora *random_adapter(const lb_model *m, int r, float alpha, double amp) {
    lb_lora *a = NULL;
    TH_CHECK_OK(lb_lora_create("rand", &m->config, r, alpha, &a));
    for (int l = 0; l < m->config.n_layers; l++)
        for (int i = 0; i < LB_LINEAR_COUNT; i++) {
            const lb_tensor *w = &m->layers[l].w[i];
            int64_t out = w->shape[0], in = w->shape[1];
            float *A = malloc((size_t)(r * in) * 4), *B = malloc((size_t)(out * r) * 4);
            for (int64_t k = 0; k < r * in; k++) A[k] = (float)(amp * urand());
            for (int64_t k = 0; k < out * r; k++) B[k] = (float)(amp * urand());
            TH_CHECK_OK(lb_lora_set_linear(a, l, (lb_linear_id)i, out, in, r, A, B));
            free(A);
            free(B);
        }
    return a;
}

/* Merge s * B A into every F32 linear of m. */
static void merge(lb_model *m, const lb_lora *a, float s) {
    for (int l = 0; l < m->config.n_layers; l++)
        for (int i = 0; i < LB_LINEAR_COUNT; i++) {
            const lb_tensor *w = &m->layers[l].w[i];
            const lb_lora_linear *ll = lb_lora_get(a, l, (lb_linear_id)i);
            TH_CHECK(w->type == LB_TYPE_F32 && ll->type == LB_TYPE_F32);
            const int64_t out = ll->out, in = ll->in, r = ll->rank;
            float *nw = lb_alloc((size_t)(out * in) * 4);
            const float *A = ll->A, *B = ll->B, *W = w->data;
            for (int64_t o = 0; o < out; o++)
                for (int64_t c = 0; c < in; c++) {
                    double d = 0;
                    for (int64_t j = 0; j < r; j++) d += (double)B[o * r + j] * A[j * in + c];
                    nw[o * in + c] = (float)(W[o * in + c] + (double)s * ll->scale * d);
                }
            lb_tensor t = *w;
            t.data = nw;
            TH_CHECK_OK(lb_model_set_linear(m, l, (lb_linear_id)i, &t, nw));
        }
}

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static void test_adapter_equals_merged(void) {
    const char *dir = model_dir();
    lb_model *m = NULL, *mm = NULL;
    TH_CHECK_OK(lb_model_load(dir, NULL, &m));
    TH_CHECK_OK(lb_model_load(dir, NULL, &mm));
    if (!m || !mm) return;
    lb_lora *a = random_adapter(m, 4, 8.0f, 0.05);
    const float s = 0.8f;
    merge(mm, a, s);
    enum { N = 40 };
    const size_t V = (size_t)m->config.vocab_size;
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 37 + 11) % (int)V);
    float *l0 = malloc(N * V * 4), *l1 = malloc(N * V * 4), *l2 = malloc(N * V * 4),
          *lb = malloc(N * V * 4);
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    lb_context *c0 = NULL, *c1 = NULL;
    TH_CHECK_OK(lb_context_create(m, &cp, &c0));
    TH_CHECK_OK(lb_context_create(mm, &cp, &c1));
    TH_CHECK_OK(lb_model_forward(c0, ids, N, 0, lb, LB_LOGITS_ALL)); /* base */
    lb_lora_set set = {1, {a}, {s}};
    TH_CHECK_OK(lb_context_set_loras(c0, &set));
    TH_CHECK_OK(lb_model_forward(c0, ids, N, 0, l0, LB_LOGITS_ALL));
    TH_CHECK_OK(lb_model_forward(c1, ids, N, 0, l1, LB_LOGITS_ALL));
    double d = max_diff(l0, l1, N * V), dbase = max_diff(l0, lb, N * V);
    TH_CHECK_MSG(d < 2e-4, "adapter vs merged: %g", d);
    TH_CHECK_MSG(dbase > 1e-2, "the adapter changes nothing: %g", dbase);
    /* decode: one token per call */
    lb_context_reset(c0);
    for (int t = 0; t < N; t++)
        TH_CHECK_OK(lb_model_forward(c0, ids + t, 1, t, l2 + (size_t)t * V, LB_LOGITS_LAST));
    d = max_diff(l2, l1, N * V);
    TH_CHECK_MSG(d < 2e-4, "decode with adapter vs merged: %g", d);
    /* multi-sequence: seq 0 with the adapter, seq 1 without */
    lb_multi_params mp = lb_multi_default_params();
    mp.n_seq = 2;
    mp.n_ctx = 64;
    lb_multi_ctx *mc = NULL;
    TH_CHECK_OK(lb_multi_create(m, &mp, &mc));
    TH_CHECK_OK(lb_multi_set_loras(mc, 0, &set));
    TH_CHECK_FAILS(lb_multi_set_loras(mc, 2, &set), LB_ERR_RANGE);
    int32_t tk[2 * N], sq[2 * N], ps[2 * N];
    for (int t = 0; t < N; t++) {
        tk[2 * t] = tk[2 * t + 1] = ids[t];
        sq[2 * t] = 0;
        sq[2 * t + 1] = 1;
        ps[2 * t] = ps[2 * t + 1] = t;
    }
    float *lm = malloc(2 * N * V * 4);
    TH_CHECK_OK(lb_model_forward_multi(mc, tk, sq, ps, 2 * N, NULL, lm));
    double dm0 = 0, dm1 = 0;
    for (int t = 0; t < N; t++) {
        dm0 = fmax(dm0, max_diff(lm + (size_t)(2 * t) * V, l1 + (size_t)t * V, V));
        dm1 = fmax(dm1, max_diff(lm + (size_t)(2 * t + 1) * V, lb + (size_t)t * V, V));
    }
    TH_CHECK_MSG(dm0 < 2e-4, "multi, adapter seq vs merged: %g", dm0);
    TH_CHECK_MSG(dm1 < 2e-4, "multi, plain seq vs base: %g", dm1);
    lb_multi_free(mc);
    /* detaching gives the base again */
    TH_CHECK_OK(lb_context_set_loras(c0, NULL));
    TH_CHECK_OK(lb_model_forward(c0, ids, N, 0, l2, LB_LOGITS_ALL));
    TH_CHECK(max_diff(l2, lb, N * V) == 0.0);
    lb_context_free(c0);
    lb_context_free(c1);
    lb_lora_free(a);
    lb_model_free(m);
    lb_model_free(mm);
    free(l0); free(l1); free(l2); free(lb); free(lm);
}

static void test_q4_gguf_paths(void) {
    const char *path = th_shared("models/tinystories-656k-gguf/ts656k-q4_0.gguf");
    if (!lb_is_file(path)) th_skip("ts656k-q4_0.gguf not found");
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(path, NULL, &m));
    if (!m) return;
    lb_lora *a = random_adapter(m, 8, 8.0f, 0.05);
    enum { N = 24 };
    const size_t V = (size_t)m->config.vocab_size;
    int32_t ids[N], sq[N], ps[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 53 + 5) % (int)V, sq[i] = 0, ps[i] = i;
    float *l0 = malloc(N * V * 4), *l1 = malloc(N * V * 4), *lb = malloc(N * V * 4);
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = 32;
    cp.n_threads = 2;
    lb_context *c = NULL;
    TH_CHECK_OK(lb_context_create(m, &cp, &c));
    TH_CHECK_OK(lb_model_forward(c, ids, N, 0, lb, LB_LOGITS_ALL));
    lb_lora_set set = {1, {a}, {1.0f}};
    TH_CHECK_OK(lb_context_set_loras(c, &set));
    TH_CHECK_OK(lb_model_forward(c, ids, N, 0, l0, LB_LOGITS_ALL));
    lb_multi_params mp = lb_multi_default_params();
    mp.n_ctx = 32;
    lb_multi_ctx *mc = NULL;
    TH_CHECK_OK(lb_multi_create(m, &mp, &mc));
    TH_CHECK_OK(lb_multi_set_loras(mc, 0, &set));
    TH_CHECK_OK(lb_model_forward_multi(mc, ids, sq, ps, N, NULL, l1));
    /* both quantize activations the same way; the sums differ in order */
    double d = max_diff(l0, l1, N * V);
    TH_CHECK_MSG(d < 1e-3, "Q4_0: forward vs multi with adapter: %g", d);
    TH_CHECK_MSG(max_diff(l0, lb, N * V) > 1e-2, "adapter had no effect");
    lb_multi_free(mc);
    lb_context_free(c);
    lb_lora_free(a);
    lb_model_free(m);
    free(l0); free(l1); free(lb);
}

static bool same_linear(const lb_lora_linear *x, const lb_lora_linear *y) {
    if (x->rank != y->rank || x->in != y->in || x->out != y->out || x->type != y->type)
        return false;
    if (fabsf(x->scale - y->scale) > 1e-6f * fabsf(x->scale)) return false;
    const size_t es = x->type == LB_TYPE_F16 ? 2 : 4;
    return !memcmp(x->A, y->A, (size_t)(x->rank * x->in) * es) &&
           !memcmp(x->B, y->B, (size_t)(x->out * x->rank) * es);
}

static void test_roundtrips(void) {
    const char *dir = model_dir();
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(dir, NULL, &m));
    if (!m) return;
    lb_lora *a = random_adapter(m, 3, 6.0f, 0.1);
    char pdir[600], gpath[600];
    snprintf(pdir, sizeof pdir, "%s/peft", th_tmpdir());
    snprintf(gpath, sizeof gpath, "%s/ad.gguf", th_tmpdir());
    TH_CHECK_OK(lb_lora_write_peft(a, pdir, "base"));
    TH_CHECK_OK(lb_lora_write_gguf(a, &m->config, gpath));
    lb_lora *p = NULL, *g = NULL;
    TH_CHECK_OK(lb_lora_load(pdir, m, &p));
    TH_CHECK_OK(lb_lora_load(gpath, m, &g));
    if (!p || !g) goto out;
    TH_CHECK_STR(lb_lora_name(p), "peft");
    TH_CHECK_STR(lb_lora_name(g), "ad");
    TH_CHECK(lb_lora_rank(p) == 3 && lb_lora_alpha(p) == 6.0f);
    for (int l = 0; l < m->config.n_layers; l++)
        for (int i = 0; i < LB_LINEAR_COUNT; i++) {
            TH_CHECK_MSG(same_linear(lb_lora_get(a, l, i), lb_lora_get(p, l, i)),
                         "PEFT round trip layer %d linear %d", l, i);
            TH_CHECK_MSG(same_linear(lb_lora_get(a, l, i), lb_lora_get(g, l, i)),
                         "GGUF round trip layer %d linear %d", l, i);
        }
    /* in the GGUF file, q's lora_b rows are in llama.cpp order */
    lb_gguf *gg = NULL;
    TH_CHECK_OK(lb_gguf_open(gpath, &gg));
    lb_tensor tb;
    if (gg && lb_gguf_get_tensor(gg, "blk.1.attn_q.weight.lora_b", &tb) == LB_OK) {
        const lb_lora_linear *q = lb_lora_get(a, 1, LB_LINEAR_Q);
        const int64_t hd = m->config.head_dim, r = q->rank;
        bool ok = tb.shape[0] == q->out && tb.shape[1] == r;
        for (int64_t row = 0; ok && row < q->out; row++) {
            /* LlamaModel.permute: new (h, i, j) <- old (h, j, i) */
            int64_t h = row / hd, rr = row % hd, i2 = rr / 2, j = rr % 2;
            int64_t src = h * hd + j * (hd / 2) + i2;
            ok = !memcmp((const float *)tb.data + row * r,
                         (const float *)q->B + src * r, (size_t)r * 4);
        }
        TH_CHECK_MSG(ok, "q lora_b rows not permuted as LlamaModel.permute");
        float alpha = 0;
        TH_CHECK_OK(lb_gguf_get_f32(gg, "adapter.lora.alpha", &alpha));
        TH_CHECK(alpha == 6.0f);
    } else {
        TH_CHECK(0);
    }
    lb_gguf_close(gg);
    /* F16 factors: converted, written, read back as F16 (same bytes) */
    TH_CHECK_OK(lb_lora_convert(a, LB_TYPE_F16));
    TH_CHECK(lb_lora_get(a, 0, LB_LINEAR_Q)->type == LB_TYPE_F16);
    snprintf(pdir, sizeof pdir, "%s/peft16", th_tmpdir());
    TH_CHECK_OK(lb_lora_write_peft(a, pdir, "base"));
    TH_CHECK_OK(lb_lora_write_gguf(a, &m->config, gpath));
    lb_lora_free(p);
    lb_lora_free(g);
    p = g = NULL;
    TH_CHECK_OK(lb_lora_load(pdir, m, &p));
    TH_CHECK_OK(lb_lora_load(gpath, m, &g));
    if (p && g)
        for (int l = 0; l < m->config.n_layers; l++)
            for (int i = 0; i < LB_LINEAR_COUNT; i++) {
                TH_CHECK(same_linear(lb_lora_get(a, l, i), lb_lora_get(p, l, i)));
                TH_CHECK(same_linear(lb_lora_get(a, l, i), lb_lora_get(g, l, i)));
            }
    TH_CHECK_FAILS(lb_lora_convert(a, LB_TYPE_Q8_0), LB_ERR_INVALID_ARG);
out:
    lb_lora_free(p);
    lb_lora_free(g);
    lb_lora_free(a);
    lb_model_free(m);
}

/* A PEFT image with one q_proj pair of the given shapes / values. */
static lb_status peft_case(const lb_model *m, const char *cfg, const char *aname,
                           int64_t ar, int64_t ac, const char *bname, int64_t br,
                           int64_t bc, float poison) {
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_writer_create(&w));
    float *A = calloc((size_t)(ar * ac) + 1, 4), *B = calloc((size_t)(br * bc) + 1, 4);
    A[0] = poison;
    int64_t sa[2] = {ar, ac}, sb[2] = {br, bc};
    TH_CHECK_OK(lb_st_writer_add(w, aname, LB_TYPE_F32, 2, sa, A));
    if (bname) TH_CHECK_OK(lb_st_writer_add(w, bname, LB_TYPE_F32, 2, sb, B));
    char path[600];
    snprintf(path, sizeof path, "%s/case.safetensors", th_tmpdir());
    TH_CHECK_OK(lb_st_writer_write_file(w, path));
    lb_st_writer_free(w);
    size_t n = 0;
    void *img = th_read_bin(path, &n);
    lb_lora *a = NULL;
    lb_clear_error();
    lb_status s = lb_lora_load_peft_mem(cfg, strlen(cfg), img, n, "case", &m->config, &a);
    lb_lora_free(a);
    free(img);
    free(A);
    free(B);
    unlink(path);
    return s;
}

static void test_hostile(void) {
    const char *dir = model_dir();
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(dir, NULL, &m));
    if (!m) return;
    const char *cfg = "{\"peft_type\":\"LORA\",\"r\":4,\"lora_alpha\":8,"
                      "\"target_modules\":[\"q_proj\",\"v_proj\"]}";
    const char *qa = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
               *qb = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight";
    TH_CHECK_OK(peft_case(m, cfg, qa, 4, 128, qb, 128, 4, 0.0f));
    /* in_features disagree */
    TH_CHECK_FAILS(peft_case(m, cfg, qa, 4, 96, qb, 128, 4, 0.0f), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), qa) != NULL);
    /* out_features disagree */
    TH_CHECK_FAILS(peft_case(m, cfg, qa, 4, 128, qb, 64, 4, 0.0f), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), qb) != NULL);
    /* rank disagrees with r */
    TH_CHECK_FAILS(peft_case(m, cfg, qa, 5, 128, qb, 128, 5, 0.0f), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "rank 5") != NULL);
    /* non-finite */
    TH_CHECK_FAILS(peft_case(m, cfg, qa, 4, 128, qb, 128, 4, NAN), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), qa) && strstr(lb_last_error(), "non-finite"));
    TH_CHECK_FAILS(peft_case(m, cfg, qa, 4, 128, qb, 128, 4, INFINITY), LB_ERR_FORMAT);
    /* no lora_B */
    TH_CHECK_FAILS(peft_case(m, cfg, qa, 4, 128, NULL, 0, 0, 0.0f), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), qb) != NULL);
    /* layer beyond the base */
    TH_CHECK_FAILS(peft_case(m, cfg,
                             "base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight", 4,
                             128, "base_model.model.model.layers.7.self_attn.q_proj.lora_B.weight",
                             128, 4, 0.0f), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "layers.7") != NULL);
    /* module not targeted */
    TH_CHECK_FAILS(peft_case(m, cfg,
                             "base_model.model.model.layers.0.mlp.up_proj.lora_A.weight", 4,
                             128, "base_model.model.model.layers.0.mlp.up_proj.lora_B.weight",
                             384, 4, 0.0f), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "target_modules") != NULL);
    /* embeddings */
    TH_CHECK_FAILS(peft_case(m, cfg, "base_model.model.model.embed_tokens.lora_embedding_A", 4,
                             2048, NULL, 0, 0, 0.0f), LB_ERR_UNSUPPORTED);
    /* config problems */
    TH_CHECK_FAILS(peft_case(m, "{\"r\":0}", qa, 4, 128, qb, 128, 4, 0.0f), LB_ERR_FORMAT);
    TH_CHECK_FAILS(peft_case(m, "[1]", qa, 4, 128, qb, 128, 4, 0.0f), LB_ERR_FORMAT);
    TH_CHECK_FAILS(peft_case(m, "{\"r\":4,\"use_dora\":true}", qa, 4, 128, qb, 128, 4, 0.0f),
                   LB_ERR_UNSUPPORTED);
    TH_CHECK_FAILS(peft_case(m, "{\"r\":4,\"peft_type\":\"IA3\"}", qa, 4, 128, qb, 128, 4, 0.0f),
                   LB_ERR_UNSUPPORTED);
    /* rank_pattern allows a different rank */
    TH_CHECK_OK(peft_case(m, "{\"r\":4,\"rank_pattern\":{\"layers.0.self_attn.q_proj\":2}}",
                          qa, 2, 128, qb, 128, 2, 0.0f));
    /* GGUF adapter of another architecture */
    lb_lora *a = random_adapter(m, 2, 2.0f, 0.1);
    lb_model_config qc = m->config;
    qc.arch = LB_ARCH_QWEN2;
    char gpath[600];
    snprintf(gpath, sizeof gpath, "%s/qwen.gguf", th_tmpdir());
    TH_CHECK_OK(lb_lora_write_gguf(a, &qc, gpath));
    lb_lora *g = NULL;
    TH_CHECK_FAILS(lb_lora_load(gpath, m, &g), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "qwen2") != NULL);
    TH_CHECK(g == NULL);
    /* a model GGUF is not an adapter */
    const char *mg = th_shared("models/tinystories-656k-gguf/ts656k-f32.gguf");
    if (lb_is_file(mg)) {
        TH_CHECK_FAILS(lb_lora_load(mg, m, &g), LB_ERR_FORMAT);
        TH_CHECK(strstr(lb_last_error(), "general.type") != NULL);
    }
    unlink(gpath);
    lb_lora_free(a);
    lb_model_free(m);
}

/* ------------------------------------------------------------------------ */
/* EoRA factorisation                                                        */
/* ------------------------------------------------------------------------ */

/* trace(E H E^T) for E [out, in], H [in, in], by the definition. */
static double h_norm2(const double *E, const double *H, int64_t out, int64_t in) {
    double s = 0;
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) {
            double t = 0;
            for (int64_t j = 0; j < in; j++) t += H[i * in + j] * E[o * in + j];
            s += E[o * in + i] * t;
        }
    return s;
}

static void eora_case(int64_t out, int64_t in, int64_t nx, int64_t xrank) {
    double *dW = malloc((size_t)(out * in) * 8), *H = calloc((size_t)(in * in), 8),
           *X = malloc((size_t)(nx * in) * 8), *E = malloc((size_t)(out * in) * 8);
    const int64_t k = out < in ? out : in;
    double *A = malloc((size_t)(k * in) * 8), *B = malloc((size_t)(out * k) * 8),
           *sig = malloc((size_t)k * 8);
    for (int64_t i = 0; i < out * in; i++) dW[i] = urand() * 0.01;
    /* X = G P with P [xrank, in]: H of rank xrank when xrank < in */
    double *G = malloc((size_t)(nx * xrank) * 8), *P = malloc((size_t)(xrank * in) * 8);
    for (int64_t i = 0; i < nx * xrank; i++) G[i] = urand();
    for (int64_t i = 0; i < xrank * in; i++) P[i] = urand() * (1.0 + (double)(i % in));
    for (int64_t t = 0; t < nx; t++)
        for (int64_t i = 0; i < in; i++) {
            double s = 0;
            for (int64_t j = 0; j < xrank; j++) s += G[t * xrank + j] * P[j * in + i];
            X[t * in + i] = s;
        }
    for (int64_t t = 0; t < nx; t++)
        for (int64_t i = 0; i < in; i++)
            for (int64_t j = 0; j < in; j++) H[i * in + j] += X[t * in + i] * X[t * in + j];
    /* clamped H (the one the factorisation is exact for): with full-rank X
     * nothing is clamped */
    for (int64_t R = 1; R <= k; R += (R < 4 ? 1 : 5)) {
        int64_t nc = -1;
        TH_CHECK_OK(lb_eora_factor(dW, out, in, H, R, A, B, sig, &nc));
        if (xrank >= in) TH_CHECK_INT(nc, 0);
        else TH_CHECK_MSG(nc >= in - xrank, "clamped %lld, want >= %lld", (long long)nc,
                          (long long)(in - xrank));
        double all = 0, dropped = 0;
        for (int64_t i = 0; i < k; i++) {
            all += sig[i] * sig[i];
            if (i >= R) dropped += sig[i] * sig[i];
            if (i) TH_CHECK(sig[i] <= sig[i - 1] * (1 + 1e-12));
        }
        for (int64_t o = 0; o < out; o++)
            for (int64_t i = 0; i < in; i++) {
                double s = 0;
                for (int64_t r = 0; r < R; r++) s += B[o * R + r] * A[r * in + i];
                E[o * in + i] = dW[o * in + i] - s;
            }
        if (xrank >= in) {
            const double tot = h_norm2(dW, H, out, in), err = h_norm2(E, H, out, in);
            TH_CHECK_MSG(fabs(all - tot) <= 1e-9 * tot, "sum sigma^2 %.12g vs trace %.12g",
                         all, tot);
            TH_CHECK_MSG(fabs(err - dropped) <= 1e-9 * tot, "R %lld: H-error %.12g, "
                         "dropped sigma^2 %.12g", (long long)R, err, dropped);
        } else {
            /* rank-deficient H: the error seen by H is still at most the
             * dropped energy (clamped directions add energy, never remove) */
            const double err = h_norm2(E, H, out, in);
            TH_CHECK_MSG(err <= dropped * (1 + 1e-9) + 1e-18, "R %lld: %.12g > %.12g",
                         (long long)R, err, dropped);
        }
    }
    TH_CHECK_FAILS(lb_eora_factor(dW, out, in, H, k + 1, A, B, sig, NULL), LB_ERR_INVALID_ARG);
    dW[3] = NAN;
    TH_CHECK_FAILS(lb_eora_factor(dW, out, in, H, 1, A, B, sig, NULL), LB_ERR_INVALID_ARG);
    free(dW); free(H); free(X); free(E); free(A); free(B); free(sig); free(G); free(P);
}

/* lb_eora_generate end to end: a "quantized" copy = dense + a known
 * perturbation; at full rank (128 >= min(out, in) of every linear, so k/v
 * ranks are cut to 64 and listed apart) the adapter restores the dense
 * logits, and at rank 8 it is between the two. */
static void test_eora_generate(void) {
    const char *dir = model_dir();
    const char *ids = th_shared("reference/gptq_model/calib_ids.i32");
    if (!lb_is_file(ids)) th_skip("calib ids not found");
    lb_model *d = NULL, *q = NULL;
    TH_CHECK_OK(lb_model_load(dir, NULL, &d));
    TH_CHECK_OK(lb_model_load(dir, NULL, &q));
    if (!d || !q) return;
    for (int l = 0; l < q->config.n_layers; l++)
        for (int i = 0; i < LB_LINEAR_COUNT; i++) {
            const lb_tensor *w = &q->layers[l].w[i];
            const int64_t n = w->shape[0] * w->shape[1];
            float *nw = lb_alloc((size_t)n * 4);
            for (int64_t k = 0; k < n; k++)
                nw[k] = ((const float *)w->data)[k] + (float)(0.02 * urand());
            lb_tensor t = *w;
            t.data = nw;
            TH_CHECK_OK(lb_model_set_linear(q, l, (lb_linear_id)i, &t, nw));
        }
    lb_calib cal = {0};
    TH_CHECK_OK(lb_calib_load_ids(ids, 128, 4, &cal));
    lb_eora_params p = {0};
    p.rank = 128;
    p.n_threads = 2;
    lb_eora_report rep;
    lb_lora *full = NULL, *r8 = NULL;
    TH_CHECK_OK(lb_eora_generate(d, q, &cal, &p, "full", &full, &rep));
    TH_CHECK_INT(rep.n_linears, 14);
    TH_CHECK_MSG(rep.err_after <= 1e-9 * rep.err_before, "full rank leaves %g of %g",
                 rep.err_after, rep.err_before);
    TH_CHECK_INT(lb_lora_get(full, 0, LB_LINEAR_K)->rank, 64);
    p.rank = 8;
    TH_CHECK_OK(lb_eora_generate(d, q, &cal, &p, "r8", &r8, &rep));
    TH_CHECK(rep.err_after < rep.err_before && rep.err_after > 0);
    /* no difference at all: an error */
    lb_lora *none = NULL;
    TH_CHECK_FAILS(lb_eora_generate(d, d, &cal, &p, "x", &none, &rep), LB_ERR_INVALID_ARG);
    enum { N = 32 };
    const size_t V = (size_t)d->config.vocab_size;
    float *ld = malloc(N * V * 4), *lq = malloc(N * V * 4), *lf = malloc(N * V * 4),
          *l8 = malloc(N * V * 4);
    lb_context *cd = NULL, *cq = NULL;
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = N;
    cp.n_threads = 2;
    TH_CHECK_OK(lb_context_create(d, &cp, &cd));
    TH_CHECK_OK(lb_context_create(q, &cp, &cq));
    const int32_t *tok = cal.ids + 3 * 128;
    TH_CHECK_OK(lb_model_forward(cd, tok, N, 0, ld, LB_LOGITS_ALL));
    TH_CHECK_OK(lb_model_forward(cq, tok, N, 0, lq, LB_LOGITS_ALL));
    lb_lora_set s1 = {1, {full}, {1.0f}}, s2 = {1, {r8}, {1.0f}};
    TH_CHECK_OK(lb_context_set_loras(cq, &s1));
    TH_CHECK_OK(lb_model_forward(cq, tok, N, 0, lf, LB_LOGITS_ALL));
    TH_CHECK_OK(lb_context_set_loras(cq, &s2));
    TH_CHECK_OK(lb_model_forward(cq, tok, N, 0, l8, LB_LOGITS_ALL));
    const double dq = max_diff(lq, ld, N * V), df = max_diff(lf, ld, N * V),
                 d8 = max_diff(l8, ld, N * V);
    TH_CHECK_MSG(df < 1e-3 && df < 0.01 * dq, "full-rank EoRA: %g (perturbed %g)", df, dq);
    TH_CHECK_MSG(d8 < dq, "rank 8: %g, perturbed %g", d8, dq);
    lb_context_free(cd);
    lb_context_free(cq);
    free(ld); free(lq); free(lf); free(l8);
    lb_calib_free(&cal);
    lb_lora_free(full);
    lb_lora_free(r8);
    lb_model_free(d);
    lb_model_free(q);
}

static void test_eora_factor(void) {
    eora_case(24, 20, 60, 20); /* out > in, full-rank H */
    eora_case(9, 31, 80, 31);  /* out < in */
    eora_case(16, 16, 40, 10); /* rank-deficient H: clamping */
}

/* An architecture whose forward does not apply adapters (forward_ext:
 * Gemma, Phi-3, MoE) refuses them instead of ignoring them. */
static void test_ext_arch_refused(void) {
    lb_model *m = NULL;
    if (!lb_is_file("tests/data/arch/gemma2-random/config.json"))
        th_skip("tests/data/arch/gemma2-random not found (run from the source root)");
    TH_CHECK_OK(lb_model_load("tests/data/arch/gemma2-random", NULL, &m));
    lb_lora *a = NULL;
    TH_CHECK_OK(lb_lora_create("x", &m->config, 2, 2.0f, &a));
    {
        lb_context_params cp = lb_context_default_params();
        lb_context *c = NULL;
        TH_CHECK_OK(lb_context_create(m, &cp, &c));
        lb_lora_set set = {.n = 1, .a = {a}, .scale = {1.0f}};
        TH_CHECK_FAILS(lb_context_set_loras(c, &set), LB_ERR_UNSUPPORTED);
        TH_CHECK(strstr(lb_last_error(), "gemma") || strstr(lb_last_error(), "Gemma"));
        TH_CHECK_OK(lb_context_set_loras(c, NULL)); /* detaching still works */
        lb_context_free(c);
        lb_lora_free(a);
    }
    lb_model_free(m);
}

int main(void) {
    TH_RUN(test_kernel_vs_ref);
    TH_RUN(test_eora_factor);
    TH_RUN(test_eora_generate);
    TH_RUN(test_adapter_equals_merged);
    TH_RUN(test_q4_gguf_paths);
    TH_RUN(test_roundtrips);
    TH_RUN(test_hostile);
    TH_RUN(test_ext_arch_refused);
    rmdir(th_tmpdir());
    return th_report();
}
