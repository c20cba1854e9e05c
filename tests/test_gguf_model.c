/*
 * The GGUF model loader and the engine on GGUF files:
 *  - ts656k-f32.gguf (llama.cpp's own conversion, permuted q/k rows, NORM
 *    RoPE) gives the logits of the HF checkpoint it came from (1e-4) and of
 *    transformers (1e-3) on the reference prompts;
 *  - HF random checkpoints converted here to GGUF the way
 *    convert_hf_to_gguf.py does (llama: q/k rows permuted, llama3 RoPE
 *    scaling as the rope_freqs tensor; qwen2 biases; qwen3 q/k norms,
 *    explicit head dim; BF16/F16/F32 weights as stored) reproduce
 *    transformers' logits;
 *  - stories260K F32/Q8_0/Q4_0: hyper-parameters and tensor types as
 *    gguf-py reports them;
 *  - engine invariants on quantized GGUF weights: one pass = n_batch passes
 *    = token-by-token decode, 1 thread = 2 threads, f16 KV cache close to
 *    f32;
 *  - hostile metadata: one mutated copy of a real file per error kind, each
 *    with its status and a message naming the key or tensor.
 */
#include "th.h"

#include "lowbit/gguf.h"
#include "lowbit/kernels.h"
#include "lowbit/model.h"
#include "lowbit/quants.h"
#include "model/model_internal.h"

#include <math.h>
#include <unistd.h>

static const char *TS_F32 = "models/tinystories-656k-gguf/ts656k-f32.gguf";
static const char *TS_Q4 = "models/tinystories-656k-gguf/ts656k-q4_0.gguf";

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as a failure */
    }
    return m;
}

/* All-position logits of ids on m (n_ctx = n + 8). NULL on failure. */
static float *logits_of(lb_model *m, const int32_t *ids, int32_t n,
                        const lb_context_params *pp) {
    lb_context_params cp = pp ? *pp : lb_context_default_params();
    if (cp.n_ctx <= 0) cp.n_ctx = n + 8;
    if (cp.n_threads <= 0) cp.n_threads = 2;
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    if (!ctx) return NULL;
    float *lg = malloc((size_t)n * (size_t)m->config.vocab_size * sizeof(float));
    lb_status s = lb_model_forward(ctx, ids, n, 0, lg, LB_LOGITS_ALL);
    TH_CHECK_OK(s);
    lb_context_free(ctx);
    if (s != LB_OK) {
        free(lg);
        return NULL;
    }
    return lg;
}

/* ------------------------------------------------------------------------ */
/* llama.cpp's ts656k conversion vs the HF checkpoint and transformers       */
/* ------------------------------------------------------------------------ */

static void test_ts656k_f32_vs_hf(void) {
    lb_model *g = NULL, *h = NULL;
    TH_CHECK_OK(lb_model_load(th_shared(TS_F32), NULL, &g));
    TH_CHECK_OK(lb_model_load(th_shared("models/tinystories-656k"), NULL, &h));
    if (!g || !h) goto out;
    const lb_model_config *c = &g->config;
    TH_CHECK_INT(c->arch, LB_ARCH_LLAMA);
    TH_CHECK_INT(c->rope_mode, LB_ROPE_NORM);
    TH_CHECK_INT(c->n_layers, 2);
    TH_CHECK_INT(c->hidden_size, 128);
    TH_CHECK_INT(c->n_heads, 8);
    TH_CHECK_INT(c->n_kv_heads, 4);
    TH_CHECK_INT(c->head_dim, 16);
    TH_CHECK_INT(c->intermediate_size, 384);
    TH_CHECK_INT(c->vocab_size, 2048);
    TH_CHECK_INT(c->max_position_embeddings, 512);
    TH_CHECK(c->tie_word_embeddings && g->output.data == g->tok_embd.data);
    TH_CHECK_NEAR(c->rms_norm_eps, 1e-6, 1e-12);
    TH_CHECK_NEAR(c->rope_theta, 10000, 0);
    TH_CHECK_INT(c->bos_token_id, 1);
    TH_CHECK(lb_model_config_is_eos(c, 2));
    TH_CHECK_INT(lb_model_n_params(g), lb_model_n_params(h));
    for (int idx = 0; idx < 4; idx++) {
        char p[128];
        size_t nb = 0, nl = 0;
        snprintf(p, sizeof p, "reference/logits/prompt%d.ids.i32", idx);
        int32_t *ids = th_read_bin(th_shared(p), &nb);
        snprintf(p, sizeof p, "reference/logits/prompt%d.logits.f32", idx);
        float *ref = th_read_bin(th_shared(p), &nl);
        int32_t n = (int32_t)(nb / 4);
        TH_CHECK(ids && ref && nl == (size_t)n * 2048 * 4);
        if (ids && ref) {
            float *a = logits_of(g, ids, n, NULL), *b = logits_of(h, ids, n, NULL);
            if (a && b) {
                double d_hf = max_abs_diff(a, b, (size_t)n * 2048);
                double d_tr = max_abs_diff(a, ref, (size_t)n * 2048);
                fprintf(stderr, "  ts656k prompt%d (%d tokens): GGUF f32 vs HF: %.3g, "
                        "vs transformers: %.3g\n", idx, n, d_hf, d_tr);
                TH_CHECK_NEAR(d_hf, 0, 1e-4);
                TH_CHECK_NEAR(d_tr, 0, 1e-3);
            }
            free(a);
            free(b);
        }
        free(ids);
        free(ref);
    }
out:
    lb_model_free(g);
    lb_model_free(h);
}

/* ------------------------------------------------------------------------ */
/* HF -> GGUF conversion (convert_hf_to_gguf.py's layout) for the random     */
/* checkpoints, checked against transformers                                */
/* ------------------------------------------------------------------------ */

/* rows permuted as LlamaModel.permute: reshape(n_head, 2, hd/2, in)
 * .swapaxes(1, 2) — any element type (rows copied as bytes) */
static void *permuted(const lb_tensor *w, int n_head) {
    size_t rb = w->nbytes / (size_t)w->shape[0];
    int64_t hd = w->shape[0] / n_head;
    uint8_t *dst = malloc(w->nbytes);
    const uint8_t *src = w->data;
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t a = 0; a < 2; a++)
            for (int64_t b = 0; b < hd / 2; b++)
                memcpy(dst + (size_t)(h * hd + 2 * b + a) * rb,
                       src + (size_t)(h * hd + a * (hd / 2) + b) * rb, rb);
    return dst;
}

typedef struct wt {
    char name[64];
    lb_tensor t;
    void *own;
} wt;

/* Write m as a GGUF of architecture `arch` (llama: permuted q/k, NORM). */
static bool write_gguf_from(const lb_model *m, const char *arch, const char *path) {
    const lb_model_config *c = &m->config;
    lb_gguf_writer *w = NULL;
    if (lb_gguf_writer_create(&w) != LB_OK) return false;
    char k[96];
    lb_status s = lb_gguf_writer_set_architecture(w, arch);
#define U32(suffix, v)                                                         \
    if (s == LB_OK) {                                                          \
        snprintf(k, sizeof k, "%s.%s", arch, suffix);                          \
        s = lb_gguf_writer_set_u32(w, k, (uint32_t)(v));                       \
    }
#define F32(suffix, v)                                                         \
    if (s == LB_OK) {                                                          \
        snprintf(k, sizeof k, "%s.%s", arch, suffix);                          \
        s = lb_gguf_writer_set_f32(w, k, (float)(v));                          \
    }
    U32("block_count", c->n_layers);
    U32("context_length", c->max_position_embeddings);
    U32("embedding_length", c->hidden_size);
    U32("feed_forward_length", c->intermediate_size);
    U32("attention.head_count", c->n_heads);
    U32("attention.head_count_kv", c->n_kv_heads);
    U32("attention.key_length", c->head_dim);
    U32("attention.value_length", c->head_dim);
    U32("rope.dimension_count", c->head_dim);
    U32("vocab_size", c->vocab_size);
    F32("rope.freq_base", c->rope_theta);
    F32("attention.layer_norm_rms_epsilon", c->rms_norm_eps);
#undef U32
#undef F32
    const bool llama = !strcmp(arch, "llama");
    wt *ts = calloc(8 + (size_t)c->n_layers * 16, sizeof *ts);
    int n = 0;
#define ADD(nm, tensor, ownp)                                                  \
    do {                                                                       \
        void *own_ = (ownp);                                                   \
        snprintf(ts[n].name, sizeof ts[n].name, "%s", nm);                     \
        ts[n].t = *(tensor);                                                   \
        ts[n].own = own_;                                                      \
        if (own_) ts[n].t.data = own_;                                         \
        n++;                                                                   \
    } while (0)
    ADD("token_embd.weight", &m->tok_embd, NULL);
    ADD("output_norm.weight", &m->output_norm, NULL);
    if (m->output.data != m->tok_embd.data) ADD("output.weight", &m->output, NULL);
    float *freqs = NULL;
    lb_tensor ft;
    if (c->rope_scaling == LB_ROPE_SCALING_LLAMA3) {
        /* convert_hf_to_gguf.py LlamaModel.generate_extra_tensors (float64) */
        int half = c->head_dim / 2;
        freqs = malloc((size_t)half * sizeof(float));
        double factor = c->rope_factor, lo = c->rope_low_freq_factor,
               hi = c->rope_high_freq_factor,
               old = c->rope_original_max_position_embeddings;
        for (int i = 0; i < half; i++) {
            double f = 1.0 / pow(c->rope_theta, (double)(2 * i) / c->head_dim);
            double wl = 2 * M_PI / f;
            if (wl < old / hi) freqs[i] = 1.0f;
            else if (wl > old / lo) freqs[i] = (float)factor;
            else {
                double sm = (old / wl - lo) / (hi - lo);
                freqs[i] = (float)(1.0 / ((1 - sm) / factor + sm));
            }
        }
        memset(&ft, 0, sizeof ft);
        ft.type = LB_TYPE_F32;
        ft.n_dims = 1;
        ft.shape[0] = half;
        ft.nbytes = (size_t)half * 4;
        ADD("rope_freqs.weight", &ft, freqs);
        ts[n - 1].own = NULL; /* freed below */
    }
    for (int l = 0; l < c->n_layers; l++) {
        const lb_layer_weights *L = &m->layers[l];
        char nm[64];
#define LAY(suffix, tensor, ownp)                                              \
    do {                                                                       \
        snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix);                       \
        ADD(nm, tensor, ownp);                                                 \
    } while (0)
        LAY("attn_norm.weight", &L->attn_norm, NULL);
        LAY("attn_q.weight", &L->w[LB_LINEAR_Q],
            llama ? permuted(&L->w[LB_LINEAR_Q], c->n_heads) : NULL);
        LAY("attn_k.weight", &L->w[LB_LINEAR_K],
            llama ? permuted(&L->w[LB_LINEAR_K], c->n_kv_heads) : NULL);
        LAY("attn_v.weight", &L->w[LB_LINEAR_V], NULL);
        if (L->bq.data) {
            LAY("attn_q.bias", &L->bq, NULL);
            LAY("attn_k.bias", &L->bk, NULL);
            LAY("attn_v.bias", &L->bv, NULL);
        }
        if (L->q_norm.data) {
            LAY("attn_q_norm.weight", &L->q_norm, NULL);
            LAY("attn_k_norm.weight", &L->k_norm, NULL);
        }
        LAY("attn_output.weight", &L->w[LB_LINEAR_O], NULL);
        LAY("ffn_norm.weight", &L->ffn_norm, NULL);
        LAY("ffn_gate.weight", &L->w[LB_LINEAR_GATE], NULL);
        LAY("ffn_up.weight", &L->w[LB_LINEAR_UP], NULL);
        LAY("ffn_down.weight", &L->w[LB_LINEAR_DOWN], NULL);
#undef LAY
    }
#undef ADD
    for (int i = 0; i < n && s == LB_OK; i++)
        s = lb_gguf_writer_add_tensor(w, ts[i].name, ts[i].t.type, ts[i].t.n_dims,
                                      ts[i].t.shape);
    if (s == LB_OK) s = lb_gguf_writer_open(w, path);
    for (int i = 0; i < n && s == LB_OK; i++)
        s = lb_gguf_writer_write_tensor(w, ts[i].name, ts[i].t.data, ts[i].t.nbytes);
    if (s == LB_OK) s = lb_gguf_writer_finish(w);
    TH_CHECK_OK(s);
    lb_gguf_writer_free(w);
    for (int i = 0; i < n; i++) free(ts[i].own);
    free(ts);
    free(freqs);
    return s == LB_OK;
}

static void test_converted_random_models(void) {
    static const struct {
        const char *dir, *arch;
        lb_rope_mode mode;
    } cases[] = {
        {"llama-gqa-llama3rope-bf16-random", "llama", LB_ROPE_NORM},
        {"llama-tied-fp16-random", "llama", LB_ROPE_NORM},
        {"qwen2-random", "qwen2", LB_ROPE_NEOX},
        {"qwen3-random", "qwen3", LB_ROPE_NEOX},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        char dir[256], out[512];
        snprintf(dir, sizeof dir, "models/random/%s", cases[ci].dir);
        snprintf(out, sizeof out, "%s/%s.gguf", th_tmpdir(), cases[ci].dir);
        lb_model *h = NULL, *g = NULL;
        TH_CHECK_OK(lb_model_load_hf(th_shared(dir), NULL, &h));
        if (!h) continue;
        bool ok = write_gguf_from(h, cases[ci].arch, out);
        lb_model_free(h);
        if (!ok) continue;
        TH_CHECK_OK(lb_model_load(out, NULL, &g));
        if (!g) continue;
        TH_CHECK_INT(g->config.rope_mode, cases[ci].mode);
        TH_CHECK((g->rope_freqs.data != NULL) == (ci == 0));
        for (int s = 0; s < 2; s++) {
            const char *seq = s ? "seq64" : "seq16";
            char p[512];
            size_t nb = 0, nl = 0;
            snprintf(p, sizeof p, "%s/%s.ids.i32", dir, seq);
            int32_t *ids = th_read_bin(th_shared(p), &nb);
            snprintf(p, sizeof p, "%s/%s.logits.f32", dir, seq);
            float *ref = th_read_bin(th_shared(p), &nl);
            int32_t n = (int32_t)(nb / 4);
            TH_CHECK(ids && ref && nl == (size_t)n * g->config.vocab_size * 4);
            float *lg = ids && ref ? logits_of(g, ids, n, NULL) : NULL;
            if (lg) {
                double d = max_abs_diff(lg, ref, (size_t)n * g->config.vocab_size);
                fprintf(stderr, "  %-34s as GGUF %-5s %s: max |logit diff| vs "
                        "transformers %.3g\n", cases[ci].dir, cases[ci].arch, seq, d);
                TH_CHECK_NEAR(d, 0, 1e-3);
            }
            free(lg);
            free(ids);
            free(ref);
        }
        lb_model_free(g);
    }
}

/* ------------------------------------------------------------------------ */
/* stories260K: hyper-parameters and types                                  */
/* ------------------------------------------------------------------------ */

static void test_stories260k_files(void) {
    static const struct {
        const char *file;
        lb_type embd, out, q, down;
    } f[] = {
        {"stories260K.gguf", LB_TYPE_F32, LB_TYPE_F32, LB_TYPE_F32, LB_TYPE_F32},
        {"stories260K-Q8_0.gguf", LB_TYPE_Q8_0, LB_TYPE_Q8_0, LB_TYPE_Q8_0, LB_TYPE_F16},
        {"stories260K-Q4_0.gguf", LB_TYPE_Q4_0, LB_TYPE_Q8_0, LB_TYPE_Q4_0, LB_TYPE_F16},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        char p[256];
        snprintf(p, sizeof p, "models/stories260K/%s", f[i].file);
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(th_shared(p), NULL, &m));
        if (!m) continue;
        const lb_model_config *c = &m->config;
        TH_CHECK_INT(c->n_layers, 5);
        TH_CHECK_INT(c->hidden_size, 64);
        TH_CHECK_INT(c->n_heads, 8);
        TH_CHECK_INT(c->n_kv_heads, 4);
        TH_CHECK_INT(c->head_dim, 8);
        TH_CHECK_INT(c->intermediate_size, 172);
        TH_CHECK_INT(c->vocab_size, 512);
        TH_CHECK_INT(c->max_position_embeddings, 2048);
        TH_CHECK_NEAR(c->rope_theta, 10000, 0); /* key absent: default */
        TH_CHECK_NEAR(c->rms_norm_eps, 1e-5, 1e-12);
        TH_CHECK(!c->tie_word_embeddings && m->output.data != m->tok_embd.data);
        TH_CHECK(!c->attention_bias && !c->qk_norm);
        TH_CHECK_INT(c->bos_token_id, 1);
        TH_CHECK(lb_model_config_is_eos(c, 2));
        TH_CHECK_INT(m->tok_embd.type, f[i].embd);
        TH_CHECK_INT(m->output.type, f[i].out);
        TH_CHECK_INT(m->layers[4].w[LB_LINEAR_Q].type, f[i].q);
        TH_CHECK_INT(m->layers[4].w[LB_LINEAR_DOWN].type, f[i].down);
        TH_CHECK_INT(m->layers[0].attn_norm.type, LB_TYPE_F32);
        /* an embedding row of a quantized type equals lb_dequantize_row */
        float row[64];
        TH_CHECK_OK(lb_model_dequant_row(m, &m->tok_embd, 300, row));
        TH_CHECK(isfinite(row[0]) && isfinite(row[63]));
        lb_model_free(m);
    }
}

/* f16_activations: the inputs of F16 weights are rounded to f16 (ggml's
 * F16 x F16 products). stories260K-Q8_0 keeps ffn_down in F16: its logits
 * move; the F32 file has no F16 weight and is untouched. (Its effect on
 * perplexity against llama.cpp: tests/test_ppl_llamacpp.c.) */
static void test_f16_activations(void) {
    static const char *files[] = {"models/stories260K/stories260K-Q8_0.gguf",
                                  "models/stories260K/stories260K.gguf"};
    const int32_t ids[] = {1, 403, 261, 378, 263, 400, 355, 270, 272, 309, 307, 13};
    const int32_t n = (int32_t)(sizeof ids / sizeof ids[0]);
    for (int f = 0; f < 2; f++) {
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(th_shared(files[f]), NULL, &m));
        if (!m) continue;
        lb_context_params p = lb_context_default_params();
        float *a = logits_of(m, ids, n, &p);
        p.f16_activations = true;
        float *b = logits_of(m, ids, n, &p);
        if (a && b) {
            double d = max_abs_diff(a, b, (size_t)n * m->config.vocab_size);
            fprintf(stderr, "  %s: f16 activations move logits by %.3g\n", files[f], d);
            /* f16 rounding of ffn_down's input (~5e-4 relative), amplified
             * by the Q8_0 requantization of the following products */
            if (f == 0) TH_CHECK(d > 0 && d < 1.0);
            else TH_CHECK(d == 0);
        }
        free(a);
        free(b);
        lb_model_free(m);
    }
}

/* ------------------------------------------------------------------------ */
/* Engine invariants on quantized GGUF weights                               */
/* ------------------------------------------------------------------------ */

static void test_batching_threads_kv(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared(TS_Q4), NULL, &m));
    size_t nb = 0;
    int32_t *ids = th_read_bin(th_shared("reference/logits/prompt3.ids.i32"), &nb);
    if (!m || !ids) {
        free(ids);
        lb_model_free(m);
        return;
    }
    TH_CHECK_INT(m->tok_embd.type, LB_TYPE_Q8_0);
    TH_CHECK_INT(m->layers[0].w[LB_LINEAR_GATE].type, LB_TYPE_Q4_0);
    const int32_t n = (int32_t)(nb / 4); /* 99 tokens: two attention blocks */
    const size_t V = (size_t)m->config.vocab_size;
    lb_context_params p = lb_context_default_params();
    p.n_ctx = 128;
    p.n_threads = 2;
    float *one = logits_of(m, ids, n, &p);
    p.n_batch = 7; /* 99 = 14 passes of 7 + 1 */
    float *passes = logits_of(m, ids, n, &p);
    p.n_batch = 0;
    p.n_threads = 1;
    float *single = logits_of(m, ids, n, &p);
    p.n_threads = 2;
    p.pin_threads = LB_PIN_ON;
    float *pinned = logits_of(m, ids, n, &p);
    p.pin_threads = LB_PIN_OFF;
    p.kv_type = LB_TYPE_F16;
    float *f16 = logits_of(m, ids, n, &p);
    /* token by token, on both threads (a model this small decodes on one
     * thread by default: LB_LAYER_MT_MIN) */
    float *dec = malloc((size_t)n * V * sizeof(float));
    p.kv_type = LB_TYPE_F32;
    lb_context *ctx = NULL;
    setenv("LB_LAYER_MT_MIN", "0", 1);
    TH_CHECK_OK(lb_context_create(m, &p, &ctx));
    unsetenv("LB_LAYER_MT_MIN");
    for (int32_t t = 0; ctx && t < n; t++)
        TH_CHECK_OK(lb_model_forward(ctx, ids + t, 1, t, dec + (size_t)t * V, LB_LOGITS_LAST));
    lb_context_free(ctx);
    if (one && passes && single && pinned && f16) {
        double d_pass = max_abs_diff(one, passes, (size_t)n * V);
        double d_thr = max_abs_diff(one, single, (size_t)n * V);
        double d_pin = max_abs_diff(one, pinned, (size_t)n * V);
        double d_dec = max_abs_diff(one, dec, (size_t)n * V);
        double d_f16 = max_abs_diff(one, f16, (size_t)n * V);
        fprintf(stderr, "  ts656k Q4_0, 99 tokens: n_batch 7 vs one pass %.3g, 1 vs 2 "
                "threads %.3g, pinned %.3g, decode vs prefill %.3g, f16 KV vs f32 %.3g\n",
                d_pass, d_thr, d_pin, d_dec, d_f16);
        /* every output's arithmetic is independent of tiles, passes and the
         * thread split */
        TH_CHECK(d_pass == 0);
        TH_CHECK(d_thr == 0);
        TH_CHECK(d_pin == 0);
        TH_CHECK_NEAR(d_dec, 0, 1e-5);
        /* f16 K/V: rounding differences, amplified by the Q8_0 activation
         * quantization of every product (an f32 model differs by ~0.01) */
        double mean = 0;
        int agree = 0;
        for (int32_t t = 0; t < n; t++) {
            size_t ia = 0, ib = 0;
            for (size_t i = 0; i < V; i++) {
                mean += fabs(one[t * V + i] - f16[t * V + i]);
                if (one[t * V + i] > one[t * V + ia]) ia = i;
                if (f16[t * V + i] > f16[t * V + ib]) ib = i;
            }
            agree += ia == ib;
        }
        mean /= (double)n * (double)V;
        fprintf(stderr, "  f16 KV: mean |diff| %.3g, argmax agreement %d/%d\n", mean, agree, n);
        TH_CHECK(d_f16 > 0 && d_f16 < 0.5);
        TH_CHECK(mean < 0.05);
        TH_CHECK(agree >= n * 9 / 10);
    }
    free(one), free(passes), free(single), free(pinned), free(f16), free(dec);
    free(ids);
    lb_model_free(m);
}

static lb_status noop_hook(void *user, int layer, lb_linear_id which, const float *X,
                           int64_t n_tokens, int64_t in_features) {
    (void)X, (void)layer, (void)which, (void)n_tokens, (void)in_features;
    ++*(int *)user;
    return LB_OK;
}

/* The MLP's three execution paths give the same bits: streamed (SwiGLU
 * chunks quantized straight into down_proj's input), through the f32 gate
 * buffer (forced by a hook), and gate/up cut differently (gate Q4_0, up
 * Q8_0: separate products, then SwiGLU). */
static void test_mlp_paths(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared(TS_Q4), NULL, &m));
    size_t nb = 0;
    int32_t *ids = th_read_bin(th_shared("reference/logits/prompt3.ids.i32"), &nb);
    if (!m || !ids) {
        free(ids);
        lb_model_free(m);
        return;
    }
    const int32_t n = 40;
    const size_t V = (size_t)m->config.vocab_size;
    lb_context_params p = lb_context_default_params();
    p.n_ctx = 64;
    p.n_threads = 2;
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, &p, &ctx));
    float *a = malloc((size_t)n * V * 4), *b = malloc((size_t)n * V * 4);
    if (ctx) {
        TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, a, LB_LOGITS_ALL));
        int calls = 0;
        lb_forward_hook h = {noop_hook, &calls};
        lb_context_set_hook(ctx, &h);
        TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, b, LB_LOGITS_ALL));
        lb_context_set_hook(ctx, NULL);
        TH_CHECK_INT(calls, 7 * m->config.n_layers);
        TH_CHECK(max_abs_diff(a, b, (size_t)n * V) == 0);
    }
    /* up -> Q8_0 (gate stays Q4_0): the two products are cut differently */
    for (int l = 0; l < m->config.n_layers; l++) {
        const lb_tensor *u = &m->layers[l].w[LB_LINEAR_UP];
        const int64_t rows = u->shape[0], cols = u->shape[1];
        float *f = malloc(sizeof(float) * (size_t)(rows * cols));
        size_t rb4, rb8;
        lb_row_size(u->type, cols, &rb4);
        lb_row_size(LB_TYPE_Q8_0, cols, &rb8);
        uint8_t *rowbuf = malloc(rb4); /* the loader may have repacked u */
        for (int64_t r = 0; r < rows; r++)
            TH_CHECK_OK(lb_dequantize_row(u->type, lb_tensor_row_canonical(u, r, rowbuf),
                                          f + r * cols, cols));
        free(rowbuf);
        void *q8 = lb_alloc(rb8 * (size_t)rows);
        TH_CHECK_OK(lb_quantize_rows(NULL, LB_TYPE_Q8_0, f, q8, rows, cols));
        lb_tensor t = *u;
        t.type = LB_TYPE_Q8_0;
        t.layout = LB_LAYOUT_ROWS;
        t.data = q8;
        t.nbytes = rb8 * (size_t)rows;
        TH_CHECK_OK(lb_model_set_linear(m, l, LB_LINEAR_UP, &t, q8));
        free(f);
    }
    if (ctx) {
        float *c = malloc((size_t)n * V * 4), *d = malloc((size_t)n * V * 4);
        TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, c, LB_LOGITS_ALL));
        for (int32_t t = 0; t < n; t++)
            TH_CHECK_OK(lb_model_forward(ctx, ids + t, 1, t, d + (size_t)t * V, LB_LOGITS_LAST));
        double dd = max_abs_diff(c, d, (size_t)n * V), dq = max_abs_diff(a, c, (size_t)n * V);
        fprintf(stderr, "  up as Q8_0 (unfused MLP): decode vs prefill %.3g, vs Q4_0 up %.3g\n", dd,
                dq);
        TH_CHECK(dd == 0);
        TH_CHECK(dq > 0 && dq < 1.0); /* Q8_0 re-quantization of Q4_0 values: close */
        free(c);
        free(d);
    }
    lb_context_free(ctx);
    free(a);
    free(b);
    free(ids);
    lb_model_free(m);
}

/* Cache reuse: a prefix, a truncation and the rest in one call give the
 * one-pass logits; failing calls leave n_past unchanged; KV size; kv_type
 * validation. */
static void test_kv_reuse_truncate(void) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(th_shared(TS_F32), NULL, &m));
    size_t nb = 0;
    int32_t *ids = th_read_bin(th_shared("reference/logits/prompt3.ids.i32"), &nb);
    if (!m || !ids) {
        free(ids);
        lb_model_free(m);
        return;
    }
    const int32_t n = (int32_t)(nb / 4);
    const size_t V = (size_t)m->config.vocab_size;
    float *full = logits_of(m, ids, n, NULL);
    lb_context *ctx = NULL;
    lb_context_params p = lb_context_default_params();
    p.n_ctx = 512;
    TH_CHECK_OK(lb_context_create(m, &p, &ctx));
    float *lg = malloc(V * sizeof(float));
    if (ctx && full) {
        /* prefix, then truncate to 50 and redo the rest in one call */
        TH_CHECK_OK(lb_model_forward(ctx, ids, 70, 0, NULL, LB_LOGITS_NONE));
        TH_CHECK_OK(lb_context_truncate(ctx, 50));
        TH_CHECK_OK(lb_model_forward(ctx, ids + 50, n - 50, 50, lg, LB_LOGITS_LAST));
        TH_CHECK_NEAR(max_abs_diff(lg, full + (size_t)(n - 1) * V, V), 0, 1e-5);
        TH_CHECK_INT(lb_context_n_past(ctx), n);
        TH_CHECK(lb_context_kv_bytes(ctx) == (size_t)2 * 2 * 4 * 512 * 16 * 4);
        /* errors leave the cache at pos */
        int32_t bad = 5000;
        TH_CHECK_FAILS(lb_model_forward(ctx, &bad, 1, n, lg, LB_LOGITS_LAST), LB_ERR_RANGE);
        TH_CHECK_FAILS(lb_model_forward(ctx, ids, 1, n + 1, lg, LB_LOGITS_LAST), LB_ERR_RANGE);
        TH_CHECK_INT(lb_context_n_past(ctx), n);
    }
    p.kv_type = LB_TYPE_BF16;
    lb_context *bad_ctx = NULL;
    TH_CHECK_FAILS(lb_context_create(m, &p, &bad_ctx), LB_ERR_INVALID_ARG);
    lb_context_free(ctx);
    free(lg);
    free(full);
    free(ids);
    lb_model_free(m);
}

/* ------------------------------------------------------------------------ */
/* Hostile metadata                                                          */
/* ------------------------------------------------------------------------ */

typedef enum { M_NONE, M_DROP, M_U32, M_I32, M_F32, M_STR, M_ARR } mop;
typedef struct mut {
    const char *key;
    mop op;
    int64_t i;
    float f;
    const char *s;
    const int32_t *arr;
    int n_arr;
} mut;

typedef enum { T_KEEP, T_DROP, T_TRANSPOSE, T_I32, T_SHAPE1 } top;

/* Copy src to dst with one key mutation and one tensor mutation. */
static bool rewrite(const char *src, const char *dst, mut mu, const char *tname, top to,
                    bool drop_all_tensors) {
    lb_gguf *g = NULL;
    if (lb_gguf_open(src, &g) != LB_OK) return false;
    lb_gguf_writer *w = NULL;
    lb_status s = lb_gguf_writer_create(&w);
    bool seen = false;
    for (int64_t i = 0; s == LB_OK && i < lb_gguf_n_kv(g); i++) {
        const char *k = lb_gguf_kv_key(g, i);
        if (!strcmp(k, "general.alignment")) continue;
        bool hit = mu.key && !strcmp(k, mu.key);
        seen |= hit;
        if (hit && mu.op == M_DROP) continue;
        if (!hit || mu.op == M_NONE) s = lb_gguf_writer_set_value(w, k, lb_gguf_kv_value(g, i));
    }
    if (s == LB_OK && mu.key && mu.op != M_DROP && mu.op != M_NONE) {
        switch (mu.op) {
        case M_U32: s = lb_gguf_writer_set_u32(w, mu.key, (uint32_t)mu.i); break;
        case M_I32: s = lb_gguf_writer_set_i32(w, mu.key, (int32_t)mu.i); break;
        case M_F32: s = lb_gguf_writer_set_f32(w, mu.key, mu.f); break;
        case M_STR: s = lb_gguf_writer_set_str(w, mu.key, mu.s); break;
        case M_ARR:
            s = lb_gguf_writer_set_arr(w, mu.key, LB_GGUF_TYPE_INT32, mu.arr, (uint64_t)mu.n_arr);
            break;
        default: break;
        }
    }
    (void)seen;
    int64_t nt = drop_all_tensors ? 0 : lb_gguf_n_tensors(g);
    lb_tensor *views = calloc((size_t)(nt ? nt : 1), sizeof *views);
    bool *keep = calloc((size_t)(nt ? nt : 1), sizeof *keep);
    for (int64_t i = 0; s == LB_OK && i < nt; i++) {
        s = lb_gguf_tensor_view(g, i, &views[i]);
        keep[i] = true;
        lb_tensor *v = &views[i];
        if (tname && !strcmp(v->name, tname)) {
            if (to == T_DROP) {
                keep[i] = false;
                continue;
            }
            if (to == T_TRANSPOSE && v->n_dims == 2) {
                int64_t t = v->shape[0];
                v->shape[0] = v->shape[1];
                v->shape[1] = t;
            }
            if (to == T_I32) v->type = LB_TYPE_I32; /* same bytes as F32 */
            if (to == T_SHAPE1) v->shape[0] += 1, v->nbytes += 4;
        }
        if (s == LB_OK) s = lb_gguf_writer_add_tensor(w, v->name, v->type, v->n_dims, v->shape);
    }
    if (s == LB_OK) s = lb_gguf_writer_open(w, dst);
    for (int64_t i = 0; s == LB_OK && i < nt; i++) {
        if (!keep[i]) continue;
        if (views[i].nbytes > lb_gguf_tensor_at(g, i)->nbytes) { /* grown */
            uint8_t *b = calloc(1, views[i].nbytes);
            memcpy(b, views[i].data, lb_gguf_tensor_at(g, i)->nbytes);
            s = lb_gguf_writer_write_tensor(w, views[i].name, b, views[i].nbytes);
            free(b);
        } else {
            s = lb_gguf_writer_write_tensor(w, views[i].name, views[i].data, views[i].nbytes);
        }
    }
    if (s == LB_OK) s = lb_gguf_writer_finish(w);
    TH_CHECK_OK(s);
    lb_gguf_writer_free(w);
    free(views);
    free(keep);
    lb_gguf_close(g);
    return s == LB_OK;
}

static void test_hostile_metadata(void) {
    static const int32_t ff_diff[] = {384, 385}, ff_short[] = {384};
    static const struct {
        mut mu;
        const char *tname;
        top to;
        bool no_tensors;
        lb_status want;
        const char *msg;
    } cases[] = {
        {{"general.architecture", M_STR, 0, 0, "gpt2", NULL, 0}, NULL, T_KEEP, false, LB_ERR_UNSUPPORTED, "gpt2"},
        {{"general.architecture", M_U32, 7, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "general.architecture"},
        {{"llama.block_count", M_DROP, 0, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_NOT_FOUND, "llama.block_count"},
        {{"llama.block_count", M_U32, 3, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_NOT_FOUND, "blk.2."},
        {{"llama.block_count", M_F32, 0, 2.0f, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "llama.block_count"},
        {{"llama.block_count", M_U32, 100000, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "llama.block_count"},
        {{"llama.attention.head_count", M_U32, 0, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "head_count"},
        {{"llama.attention.head_count", M_STR, 0, 0, "8", NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "head_count"},
        {{"llama.attention.head_count", M_U32, 6, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "num_key_value_heads"},
        {{"llama.attention.head_count", M_U32, 12, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "blk.0.attn_q.weight"},
        {{"llama.attention.head_count_kv", M_U32, 3, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "num_key_value_heads"},
        {{"llama.attention.key_length", M_U32, 8, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_UNSUPPORTED, "key_length"},
        {{"llama.rope.dimension_count", M_U32, 8, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_UNSUPPORTED, "rope.dimension_count"},
        {{"llama.embedding_length", M_U32, 1u << 20, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "embedding_length"},
        {{"llama.embedding_length", M_U32, 64, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "token_embd.weight"},
        {{"llama.context_length", M_U32, 0, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "context_length"},
        {{"llama.context_length", M_I32, -5, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "context_length"},
        {{"llama.vocab_size", M_U32, 2047, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "tokenizer.ggml.tokens"},
        {{"llama.feed_forward_length", M_ARR, 0, 0, NULL, ff_diff, 2}, NULL, T_KEEP, false, LB_ERR_UNSUPPORTED, "differs"},
        {{"llama.feed_forward_length", M_ARR, 0, 0, NULL, ff_short, 1}, NULL, T_KEEP, false, LB_ERR_FORMAT, "one per layer"},
        {{"llama.feed_forward_length", M_U32, 385, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "blk.0.ffn_"},
        /* a llama file with experts is Mixtral: expert_used_count is then required */
        {{"llama.expert_count", M_U32, 8, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "expert_used_count"},
        {{"llama.rope.scaling.type", M_STR, 0, 0, "yarn", NULL, 0}, NULL, T_KEEP, false, LB_ERR_UNSUPPORTED, "yarn"},
        {{"llama.rope.freq_base", M_F32, 0, -1.0f, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "freq_base"},
        {{"llama.rope.freq_base", M_F32, 0, NAN, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "freq_base"},
        {{"llama.attention.layer_norm_rms_epsilon", M_DROP, 0, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_NOT_FOUND, "layer_norm_rms_epsilon"},
        {{"llama.attention.layer_norm_rms_epsilon", M_F32, 0, -1e-5f, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "layer_norm_rms_epsilon"},
        {{"tokenizer.ggml.bos_token_id", M_U32, 5000, 0, NULL, NULL, 0}, NULL, T_KEEP, false, LB_ERR_FORMAT, "bos_token_id"},
        {{NULL, M_NONE, 0, 0, NULL, NULL, 0}, "blk.1.ffn_up.weight", T_I32, false, LB_ERR_UNSUPPORTED, "blk.1.ffn_up.weight"},
        {{NULL, M_NONE, 0, 0, NULL, NULL, 0}, "blk.0.ffn_down.weight", T_TRANSPOSE, false, LB_ERR_FORMAT, "blk.0.ffn_down.weight"},
        {{NULL, M_NONE, 0, 0, NULL, NULL, 0}, "blk.0.attn_norm.weight", T_SHAPE1, false, LB_ERR_FORMAT, "blk.0.attn_norm.weight"},
        {{NULL, M_NONE, 0, 0, NULL, NULL, 0}, "output_norm.weight", T_DROP, false, LB_ERR_NOT_FOUND, "output_norm.weight"},
        {{NULL, M_NONE, 0, 0, NULL, NULL, 0}, "blk.1.attn_v.weight", T_DROP, false, LB_ERR_NOT_FOUND, "blk.1.attn_v.weight"},
        {{NULL, M_NONE, 0, 0, NULL, NULL, 0}, NULL, T_KEEP, true, LB_ERR_NOT_FOUND, "vocabulary-only"},
    };
    char path[600];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/hostile%zu.gguf", th_tmpdir(), i);
        if (!rewrite(th_shared(TS_F32), path, cases[i].mu, cases[i].tname, cases[i].to,
                     cases[i].no_tensors))
            continue;
        lb_model *m = NULL;
        lb_clear_error();
        lb_status s = lb_model_load(path, NULL, &m);
        TH_CHECK_MSG(s == cases[i].want, "case %zu (%s%s): got %s, want %s: %s", i,
                     cases[i].mu.key ? cases[i].mu.key : "", cases[i].tname ? cases[i].tname : "",
                     lb_status_name(s), lb_status_name(cases[i].want), lb_last_error());
        TH_CHECK_MSG(strstr(lb_last_error(), cases[i].msg) != NULL,
                     "case %zu: message '%s' lacks '%s'", i, lb_last_error(), cases[i].msg);
        TH_CHECK_MSG(strstr(lb_last_error(), "hostile") != NULL || s == LB_OK,
                     "case %zu: message '%s' does not name the file", i, lb_last_error());
        TH_CHECK(m == NULL);
        lb_model_free(m);
        unlink(path);
    }
    /* optional keys absent: defaults (rope.freq_base 10000) give the same
     * model */
    snprintf(path, sizeof path, "%s/nofreq.gguf", th_tmpdir());
    mut drop = {"llama.rope.freq_base", M_DROP, 0, 0, NULL, NULL, 0};
    if (rewrite(th_shared(TS_F32), path, drop, NULL, T_KEEP, false)) {
        lb_model *m = NULL;
        TH_CHECK_OK(lb_model_load(path, NULL, &m));
        if (m) TH_CHECK_NEAR(m->config.rope_theta, 10000, 0);
        lb_model_free(m);
        unlink(path);
    }
}

/* Tiny models for the fuzz_gguf_model seed corpus (each well under
 * 64 KiB): llama F32; llama Q4_0 tied with rope_freqs; qwen2 Q8_0 with
 * biases; qwen3 F16 with q/k norms and a head dim != dim / heads. */
static int write_fuzz_seeds(const char *dir) {
    static const struct {
        const char *name, *arch;
        lb_type t;
        int dim, heads, kv, hd, ff, vocab;
        bool tied, bias, qkn, freqs;
    } sp[] = {
        {"llama-f32.gguf", "llama", LB_TYPE_F32, 32, 4, 2, 8, 32, 16, false, false, false, false},
        {"llama-q4_0-tied-ropefreqs.gguf", "llama", LB_TYPE_Q4_0, 64, 4, 2, 16, 64, 24, true, false,
         false, true},
        {"qwen2-q8_0-bias.gguf", "qwen2", LB_TYPE_Q8_0, 32, 2, 1, 16, 32, 16, false, true, false,
         false},
        {"qwen3-f16-qknorm.gguf", "qwen3", LB_TYPE_F16, 32, 2, 1, 24, 32, 16, false, false, true,
         false},
    };
    uint64_t rs = 12345;
    for (size_t k = 0; k < sizeof sp / sizeof sp[0]; k++) {
        lb_gguf_writer *w = NULL;
        char path[1024], key[96];
        snprintf(path, sizeof path, "%s/%s", dir, sp[k].name);
        lb_status s = lb_gguf_writer_create(&w);
        const char *a = sp[k].arch;
        if (s == LB_OK) s = lb_gguf_writer_set_architecture(w, a);
#define U(sfx, v)                                                                  if (s == LB_OK) {                                                                  snprintf(key, sizeof key, "%s.%s", a, sfx);                                    s = lb_gguf_writer_set_u32(w, key, (uint32_t)(v));                         }
        U("block_count", 1);
        U("context_length", 64);
        U("embedding_length", sp[k].dim);
        U("feed_forward_length", sp[k].ff);
        U("attention.head_count", sp[k].heads);
        U("attention.head_count_kv", sp[k].kv);
        U("attention.key_length", sp[k].hd);
        U("attention.value_length", sp[k].hd);
        U("vocab_size", sp[k].vocab);
#undef U
        snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
        if (s == LB_OK) s = lb_gguf_writer_set_f32(w, key, 1e-5f);
        const int64_t qd = (int64_t)sp[k].heads * sp[k].hd, kvd = (int64_t)sp[k].kv * sp[k].hd;
        struct {
            const char *n;
            int nd;
            int64_t s0, s1;
            bool mat;
        } t[] = {
            {"token_embd.weight", 2, sp[k].vocab, sp[k].dim, true},
            {"output_norm.weight", 1, sp[k].dim, 0, false},
            {"output.weight", 2, sp[k].vocab, sp[k].dim, true},
            {"rope_freqs.weight", 1, sp[k].hd / 2, 0, false},
            {"blk.0.attn_norm.weight", 1, sp[k].dim, 0, false},
            {"blk.0.attn_q.weight", 2, qd, sp[k].dim, true},
            {"blk.0.attn_k.weight", 2, kvd, sp[k].dim, true},
            {"blk.0.attn_v.weight", 2, kvd, sp[k].dim, true},
            {"blk.0.attn_q.bias", 1, qd, 0, false},
            {"blk.0.attn_k.bias", 1, kvd, 0, false},
            {"blk.0.attn_v.bias", 1, kvd, 0, false},
            {"blk.0.attn_q_norm.weight", 1, sp[k].hd, 0, false},
            {"blk.0.attn_k_norm.weight", 1, sp[k].hd, 0, false},
            {"blk.0.attn_output.weight", 2, sp[k].dim, qd, true},
            {"blk.0.ffn_norm.weight", 1, sp[k].dim, 0, false},
            {"blk.0.ffn_gate.weight", 2, sp[k].ff, sp[k].dim, true},
            {"blk.0.ffn_up.weight", 2, sp[k].ff, sp[k].dim, true},
            {"blk.0.ffn_down.weight", 2, sp[k].dim, sp[k].ff, true},
        };
        bool use[sizeof t / sizeof t[0]];
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            use[i] = true;
            if (!strcmp(t[i].n, "output.weight")) use[i] = !sp[k].tied;
            if (!strcmp(t[i].n, "rope_freqs.weight")) use[i] = sp[k].freqs;
            if (strstr(t[i].n, ".bias")) use[i] = sp[k].bias;
            if (strstr(t[i].n, "attn_q_norm") || strstr(t[i].n, "attn_k_norm")) use[i] = sp[k].qkn;
            if (use[i] && s == LB_OK) {
                int64_t sh[2] = {t[i].s0, t[i].s1};
                s = lb_gguf_writer_add_tensor(w, t[i].n, t[i].mat ? sp[k].t : LB_TYPE_F32,
                                              t[i].nd, sh);
            }
        }
        if (s == LB_OK) s = lb_gguf_writer_open(w, path);
        for (size_t i = 0; i < sizeof t / sizeof t[0] && s == LB_OK; i++) {
            if (!use[i]) continue;
            int64_t rows = t[i].nd == 2 ? t[i].s0 : 1, cols = t[i].nd == 2 ? t[i].s1 : t[i].s0;
            float *f = malloc(sizeof(float) * (size_t)(rows * cols));
            for (int64_t j = 0; j < rows * cols; j++) {
                rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
                float u = (float)(rs >> 40) / 16777216.0f * 2 - 1;
                f[j] = t[i].mat ? u * 0.3f : 1.0f + 0.1f * u;
            }
            lb_type ty = t[i].mat ? sp[k].t : LB_TYPE_F32;
            size_t rb;
            lb_row_size(ty, cols, &rb);
            void *q = malloc(rb * (size_t)rows);
            s = lb_quantize_rows(NULL, ty, f, q, rows, cols);
            if (s == LB_OK) s = lb_gguf_writer_write_tensor(w, t[i].n, q, rb * (size_t)rows);
            free(f);
            free(q);
        }
        if (s == LB_OK) s = lb_gguf_writer_finish(w);
        lb_gguf_writer_free(w);
        if (s != LB_OK) {
            fprintf(stderr, "%s: %s\n", path, lb_last_error());
            return 1;
        }
        lb_model *m = NULL; /* every seed must load */
        if (lb_model_load(path, NULL, &m) != LB_OK) {
            fprintf(stderr, "%s: %s\n", path, lb_last_error());
            return 1;
        }
        lb_model_free(m);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-fuzz-seeds")) return write_fuzz_seeds(argv[2]);
    /* helper for the CLI tests: a vocabulary-only copy of a GGUF file (its
     * metadata, no tensors), as llama.cpp's models/ggml-vocab-*.gguf */
    if (argc == 4 && !strcmp(argv[1], "--vocab-only")) {
        mut none = {NULL, M_NONE, 0, 0, NULL, NULL, 0};
        return rewrite(argv[2], argv[3], none, NULL, T_KEEP, true) ? 0 : 1;
    }
    (void)argv;
    TH_RUN(test_ts656k_f32_vs_hf);
    TH_RUN(test_converted_random_models);
    TH_RUN(test_stories260k_files);
    TH_RUN(test_f16_activations);
    TH_RUN(test_batching_threads_kv);
    TH_RUN(test_mlp_paths);
    TH_RUN(test_kv_reuse_truncate);
    TH_RUN(test_hostile_metadata);
    return th_report();
}
