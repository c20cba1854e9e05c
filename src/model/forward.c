/*
 * The forward pass: context (KV cache, RoPE tables, scratch, threads),
 * embedding, decoder layers, final norm + lm_head. Follows transformers
 * 5.12 modeling_llama.py / modeling_qwen2.py / modeling_qwen3.py with eager
 * attention in float32 (LlamaRMSNorm, apply_rotary_pos_emb with
 * rotate_half, repeat_kv, softmax(dtype=float32), SwiGLU MLP).
 */
#include "model/model_internal.h"
#include "lowbit/kernels.h"
#include "core/internal.h"

#include <math.h>
#include <stdlib.h>

struct lb_context {
    const lb_model *m;
    int32_t n_ctx, n_past;
    lb_pool *pool;
    bool own_pool;
    int n_threads;

    /* KV cache, per layer and KV head contiguous over positions:
     * k_cache[((layer * nkv + h) * n_ctx + pos) * hd + i]. */
    float *k_cache, *v_cache;
    /* Token id at each cached position (-1: unknown, e.g. after layers
     * were driven by hand). [n_ctx] */
    int32_t *toks;
    /* RoPE tables [n_ctx][hd/2]. */
    float *rope_cos, *rope_sin;

    /* Scratch for up to `cap` tokens. */
    int32_t cap;
    float *x;      /* [cap, dim]   residual stream (lb_model_forward)   */
    float *xn;     /* [cap, dim]   normed input of a block               */
    float *q;      /* [cap, nh*hd]                                       */
    float *k, *v;  /* [cap, nkv*hd]                                      */
    float *att;    /* [cap, nh*hd] attention output (o_proj input)       */
    float *o;      /* [cap, dim]   o_proj / down_proj output             */
    float *gate;   /* [cap, ff]                                          */
    float *up;     /* [cap, ff]                                          */
    float *scores; /* [n_threads, n_ctx] attention probabilities        */

    lb_forward_hook hook;
};

/* ------------------------------------------------------------------------ */
/* Building blocks                                                           */
/* ------------------------------------------------------------------------ */

void lb_rmsnorm(float *y, const float *x, const float *w, int64_t n,
                float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    float r = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) y[i] = w[i] * (x[i] * r);
}

void lb_rope_inv_freq(const lb_model_config *c, float *inv_freq) {
    int half = c->head_dim / 2;
    float base = (float)c->rope_theta, dim = (float)c->head_dim;
    for (int i = 0; i < half; i++)
        /* 1.0 / (base ** (arange(0, dim, 2).float() / dim)) */
        inv_freq[i] = 1.0f / powf(base, (float)(2 * i) / dim);
    if (c->rope_scaling == LB_ROPE_SCALING_LINEAR) {
        for (int i = 0; i < half; i++)
            inv_freq[i] = inv_freq[i] / (float)c->rope_factor;
    } else if (c->rope_scaling == LB_ROPE_SCALING_LLAMA3) {
        /* _compute_llama3_parameters */
        const float factor = (float)c->rope_factor;
        const float lo = (float)c->rope_low_freq_factor;
        const float hi = (float)c->rope_high_freq_factor;
        const float old_ctx = (float)c->rope_original_max_position_embeddings;
        const float low_freq_wavelen = old_ctx / lo;
        const float high_freq_wavelen = old_ctx / hi;
        for (int i = 0; i < half; i++) {
            float f = inv_freq[i];
            float wavelen = (float)(2.0 * M_PI) / f;
            float scaled = wavelen > low_freq_wavelen ? f / factor : f;
            float smooth = (old_ctx / wavelen - lo) / (hi - lo);
            float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
            bool medium = !(wavelen < high_freq_wavelen) &&
                          !(wavelen > low_freq_wavelen);
            inv_freq[i] = medium ? smoothed : scaled;
        }
    }
}

/* Rotate one head vector x[hd] at the position whose tables are c, s. */
static void rope_apply(float *x, const float *c, const float *s, int hd,
                       lb_rope_mode mode) {
    int half = hd / 2;
    if (mode == LB_ROPE_NEOX) {
        /* x*cos + rotate_half(x)*sin, rotate_half(x) = cat(-x2, x1) */
        for (int i = 0; i < half; i++) {
            float x0 = x[i], x1 = x[i + half];
            x[i] = x0 * c[i] - x1 * s[i];
            x[i + half] = x1 * c[i] + x0 * s[i];
        }
    } else {
        /* adjacent pairs (2i, 2i+1), ggml rope mode 0 */
        for (int i = 0; i < half; i++) {
            float x0 = x[2 * i], x1 = x[2 * i + 1];
            x[2 * i] = x0 * c[i] - x1 * s[i];
            x[2 * i + 1] = x1 * c[i] + x0 * s[i];
        }
    }
}

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

/* Dot product with 8 independent partial sums (lets the compiler use SIMD
 * without -ffast-math; the summation order is fixed, so results are
 * deterministic). */
static inline float dot_f32(const float *a, const float *b, int n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
              ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ------------------------------------------------------------------------ */
/* Context                                                                   */
/* ------------------------------------------------------------------------ */

lb_context_params lb_context_default_params(void) {
    lb_context_params p;
    memset(&p, 0, sizeof p);
    return p;
}

static void free_scratch(lb_context *ctx) {
    lb_free(ctx->x);
    lb_free(ctx->xn);
    lb_free(ctx->q);
    lb_free(ctx->k);
    lb_free(ctx->v);
    lb_free(ctx->att);
    lb_free(ctx->o);
    lb_free(ctx->gate);
    lb_free(ctx->up);
    ctx->x = ctx->xn = ctx->q = ctx->k = ctx->v = ctx->att = ctx->o =
        ctx->gate = ctx->up = NULL;
    ctx->cap = 0;
}

/* Make room for n tokens of scratch. */
static lb_status ensure_scratch(lb_context *ctx, int32_t n) {
    if (n <= ctx->cap) return LB_OK;
    const lb_model_config *c = &ctx->m->config;
    free_scratch(ctx);
    size_t t = (size_t)n, dim = (size_t)c->hidden_size,
           qd = (size_t)c->n_heads * (size_t)c->head_dim,
           kvd = (size_t)c->n_kv_heads * (size_t)c->head_dim,
           ff = (size_t)c->intermediate_size;
    ctx->x = lb_calloc(t * dim, sizeof(float));
    ctx->xn = lb_calloc(t * dim, sizeof(float));
    ctx->q = lb_calloc(t * qd, sizeof(float));
    ctx->k = lb_calloc(t * kvd, sizeof(float));
    ctx->v = lb_calloc(t * kvd, sizeof(float));
    ctx->att = lb_calloc(t * qd, sizeof(float));
    ctx->o = lb_calloc(t * dim, sizeof(float));
    ctx->gate = lb_calloc(t * ff, sizeof(float));
    ctx->up = lb_calloc(t * ff, sizeof(float));
    if (!ctx->x || !ctx->xn || !ctx->q || !ctx->k || !ctx->v || !ctx->att ||
        !ctx->o || !ctx->gate || !ctx->up) {
        free_scratch(ctx);
        return lb_set_error(LB_ERR_NOMEM,
                            "context: out of memory for scratch of %d tokens",
                            (int)n);
    }
    ctx->cap = n;
    return LB_OK;
}

lb_status lb_context_create(const lb_model *m, const lb_context_params *params,
                            lb_context **out) {
    *out = NULL;
    lb_context_params p = params ? *params : lb_context_default_params();
    const lb_model_config *c = &m->config;
    int32_t n_ctx = p.n_ctx;
    if (n_ctx <= 0)
        n_ctx = c->max_position_embeddings < 4096 ? c->max_position_embeddings
                                                  : 4096;
    if (n_ctx > (1 << 24))
        return lb_set_error(LB_ERR_INVALID_ARG, "context: n_ctx %d too large",
                            (int)n_ctx);
    lb_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return lb_set_error(LB_ERR_NOMEM, "context: out of memory");
    ctx->m = m;
    ctx->n_ctx = n_ctx;
    lb_status s = LB_OK;
    if (p.pool) {
        ctx->pool = p.pool;
    } else {
        ctx->pool = lb_pool_create(p.n_threads);
        ctx->own_pool = true;
        if (!ctx->pool) {
            s = lb_set_error(LB_ERR_NOMEM, "context: cannot create thread "
                             "pool");
            goto fail;
        }
    }
    ctx->n_threads = lb_pool_size(ctx->pool);
    size_t kv_elems;
    if (!lb_mul_ok((size_t)c->n_layers * (size_t)c->n_kv_heads,
                   (size_t)n_ctx * (size_t)c->head_dim, &kv_elems) ||
        kv_elems > SIZE_MAX / 8) {
        s = lb_set_error(LB_ERR_OVERFLOW, "context: KV cache size overflows");
        goto fail;
    }
    ctx->k_cache = lb_alloc(kv_elems * sizeof(float));
    ctx->v_cache = lb_alloc(kv_elems * sizeof(float));
    if (!ctx->k_cache || !ctx->v_cache) {
        s = lb_set_error(LB_ERR_NOMEM,
                         "context: out of memory for the KV cache (2 x %zu "
                         "MiB for n_ctx %d)",
                         kv_elems * 4 >> 20, (int)n_ctx);
        goto fail;
    }
    int half = c->head_dim / 2;
    ctx->toks = lb_alloc((size_t)n_ctx * sizeof(int32_t));
    ctx->rope_cos = lb_alloc((size_t)n_ctx * (size_t)half * sizeof(float));
    ctx->rope_sin = lb_alloc((size_t)n_ctx * (size_t)half * sizeof(float));
    ctx->scores = lb_alloc((size_t)ctx->n_threads * (size_t)n_ctx *
                           sizeof(float));
    float *inv = malloc((size_t)half * sizeof(float));
    if (!ctx->toks || !ctx->rope_cos || !ctx->rope_sin || !ctx->scores ||
        !inv) {
        free(inv);
        s = lb_set_error(LB_ERR_NOMEM, "context: out of memory");
        goto fail;
    }
    /* cos/sin of (inv_freq * position) in float32, as LlamaRotaryEmbedding
     * (attention_scaling is 1 for default/linear/llama3). */
    lb_rope_inv_freq(c, inv);
    for (int32_t pos = 0; pos < n_ctx; pos++)
        for (int i = 0; i < half; i++) {
            float f = inv[i] * (float)pos;
            ctx->rope_cos[(size_t)pos * half + i] = cosf(f);
            ctx->rope_sin[(size_t)pos * half + i] = sinf(f);
        }
    free(inv);
    if ((s = ensure_scratch(ctx, p.n_batch > 0 ? LB_MIN(p.n_batch, n_ctx)
                                               : LB_MIN(512, n_ctx))) != LB_OK)
        goto fail;
    *out = ctx;
    return LB_OK;
fail:
    lb_context_free(ctx);
    return s;
}

void lb_context_free(lb_context *ctx) {
    if (!ctx) return;
    free_scratch(ctx);
    lb_free(ctx->k_cache);
    lb_free(ctx->v_cache);
    lb_free(ctx->toks);
    lb_free(ctx->rope_cos);
    lb_free(ctx->rope_sin);
    lb_free(ctx->scores);
    if (ctx->own_pool) lb_pool_free(ctx->pool);
    free(ctx);
}

const lb_model *lb_context_model(const lb_context *ctx) { return ctx->m; }
int32_t lb_context_n_ctx(const lb_context *ctx) { return ctx->n_ctx; }
lb_pool *lb_context_pool(lb_context *ctx) { return ctx->pool; }
int32_t lb_context_n_past(const lb_context *ctx) { return ctx->n_past; }
void lb_context_reset(lb_context *ctx) { ctx->n_past = 0; }

lb_status lb_context_truncate(lb_context *ctx, int32_t n) {
    if (n < 0 || n > ctx->n_past)
        return lb_set_error(LB_ERR_RANGE, "context: truncate to %d, but only "
                            "%d positions are cached", (int)n,
                            (int)ctx->n_past);
    ctx->n_past = n;
    return LB_OK;
}

lb_status lb_context_set_n_past(lb_context *ctx, int32_t n) {
    if (n < 0 || n > ctx->n_ctx)
        return lb_set_error(LB_ERR_RANGE, "context: n_past %d outside [0, %d]",
                            (int)n, (int)ctx->n_ctx);
    for (int32_t i = 0; i < n; i++) ctx->toks[i] = -1; /* contents unknown */
    ctx->n_past = n;
    return LB_OK;
}

int32_t lb_context_cached_tokens(const lb_context *ctx,
                                 const int32_t **tokens) {
    if (tokens) *tokens = ctx->toks;
    return ctx->n_past;
}

void lb_context_set_hook(lb_context *ctx, const lb_forward_hook *hook) {
    if (hook)
        ctx->hook = *hook;
    else
        memset(&ctx->hook, 0, sizeof ctx->hook);
}

/* ------------------------------------------------------------------------ */
/* Attention                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct attn_job {
    lb_context *ctx;
    int layer;
    int32_t n_tokens, pos;
} attn_job;

/* One (query token, head) pair per unit of work:
 *   att[t, h*hd:(h+1)*hd] = softmax(q_t,h . K[0..p]^T / sqrt(hd)) V[0..p]
 * with p = pos + t (causal), keys/values of KV head h / (nh / nkv)
 * (repeat_kv), positions before p - sliding_window + 1 masked when the
 * layer uses a sliding window. */
static void attn_worker(void *arg, int ith, int nth) {
    attn_job *j = arg;
    lb_context *ctx = j->ctx;
    const lb_model_config *c = &ctx->m->config;
    const int hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    const int group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    const bool sliding = c->sliding_window > 0 &&
                         j->layer >= c->sliding_window_first_layer;
    float *sc = ctx->scores + (size_t)ith * (size_t)ctx->n_ctx;
    size_t b, e;
    lb_split_range((size_t)j->n_tokens * (size_t)nh, ith, nth, &b, &e);
    for (size_t u = b; u < e; u++) {
        int32_t t = (int32_t)(u / (size_t)nh);
        int h = (int)(u % (size_t)nh), kvh = h / group;
        int32_t p = j->pos + t;
        int32_t j0 = 0;
        if (sliding && p - c->sliding_window + 1 > 0)
            j0 = p - c->sliding_window + 1;
        const float *qv = ctx->q + ((size_t)t * nh + h) * hd;
        size_t base = ((size_t)j->layer * nkv + kvh) * (size_t)ctx->n_ctx;
        const float *K = ctx->k_cache + base * hd;
        const float *V = ctx->v_cache + base * hd;
        float mx = -INFINITY;
        for (int32_t k = j0; k <= p; k++) {
            float d = dot_f32(qv, K + (size_t)k * hd, hd) * scale;
            sc[k] = d;
            if (d > mx) mx = d;
        }
        float sum = 0.0f;
        for (int32_t k = j0; k <= p; k++) {
            sc[k] = expf(sc[k] - mx);
            sum += sc[k];
        }
        float inv = 1.0f / sum;
        float *out = ctx->att + ((size_t)t * nh + h) * hd;
        for (int i = 0; i < hd; i++) out[i] = 0.0f;
        for (int32_t k = j0; k <= p; k++) {
            const float w = sc[k] * inv;
            const float *vr = V + (size_t)k * hd;
            for (int i = 0; i < hd; i++) out[i] += w * vr[i];
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Layers                                                                    */
/* ------------------------------------------------------------------------ */

static lb_status hook_call(lb_context *ctx, int layer, lb_linear_id which,
                           const float *X, int32_t n, int64_t in) {
    if (!ctx->hook.linear_input) return LB_OK;
    return ctx->hook.linear_input(ctx->hook.user, layer, which, X, n, in);
}

static void add_bias(float *y, const lb_tensor *b, int32_t n, int64_t d) {
    if (!b->data) return;
    const float *bv = b->data;
    for (int32_t t = 0; t < n; t++)
        for (int64_t i = 0; i < d; i++) y[(size_t)t * d + i] += bv[i];
}

/* The decoder layer on hidden [n, dim] in place (no argument checks). */
static lb_status layer_forward(lb_context *ctx, int l, float *hidden,
                               int32_t n, int32_t pos) {
    const lb_model_config *c = &ctx->m->config;
    const lb_layer_weights *L = &ctx->m->layers[l];
    const int64_t dim = c->hidden_size, hd = c->head_dim, nh = c->n_heads,
                  nkv = c->n_kv_heads, ff = c->intermediate_size;
    const int64_t qd = nh * hd, kvd = nkv * hd;
    const int half = (int)(hd / 2);
    lb_pool *pool = ctx->pool;

    /* ---- attention block ------------------------------------------- */
    /* xn = RMSNorm(hidden) * input_layernorm             [n, dim]      */
    for (int32_t t = 0; t < n; t++)
        lb_rmsnorm(ctx->xn + t * dim, hidden + t * dim, L->attn_norm.data,
                   dim, c->rms_norm_eps);
    LB_TRY(hook_call(ctx, l, LB_LINEAR_Q, ctx->xn, n, dim));
    LB_TRY(hook_call(ctx, l, LB_LINEAR_K, ctx->xn, n, dim));
    LB_TRY(hook_call(ctx, l, LB_LINEAR_V, ctx->xn, n, dim));
    /* q = xn Wq^T + bq  [n, nh*hd];  k, v = xn Wk^T, xn Wv^T  [n, nkv*hd] */
    LB_TRY(lb_matmul(pool, &L->w[LB_LINEAR_Q], ctx->xn, ctx->q, n));
    LB_TRY(lb_matmul(pool, &L->w[LB_LINEAR_K], ctx->xn, ctx->k, n));
    LB_TRY(lb_matmul(pool, &L->w[LB_LINEAR_V], ctx->xn, ctx->v, n));
    add_bias(ctx->q, &L->bq, n, qd);
    add_bias(ctx->k, &L->bk, n, kvd);
    add_bias(ctx->v, &L->bv, n, kvd);
    for (int32_t t = 0; t < n; t++) {
        const float *cs = ctx->rope_cos + (size_t)(pos + t) * half;
        const float *sn = ctx->rope_sin + (size_t)(pos + t) * half;
        for (int64_t h = 0; h < nh; h++) {
            float *qh = ctx->q + (t * nh + h) * hd;
            /* Qwen3: RMSNorm over each head before RoPE */
            if (c->qk_norm)
                lb_rmsnorm(qh, qh, L->q_norm.data, hd, c->rms_norm_eps);
            rope_apply(qh, cs, sn, (int)hd, c->rope_mode);
        }
        for (int64_t h = 0; h < nkv; h++) {
            float *kh = ctx->k + (t * nkv + h) * hd;
            if (c->qk_norm)
                lb_rmsnorm(kh, kh, L->k_norm.data, hd, c->rms_norm_eps);
            rope_apply(kh, cs, sn, (int)hd, c->rope_mode);
            /* append k, v to the cache at position pos + t */
            size_t row = (((size_t)l * nkv + h) * ctx->n_ctx + pos + t) * hd;
            memcpy(ctx->k_cache + row, kh, (size_t)hd * sizeof(float));
            memcpy(ctx->v_cache + row, ctx->v + (t * nkv + h) * hd,
                   (size_t)hd * sizeof(float));
        }
    }
    /* att = softmax(q K^T / sqrt(hd) + causal mask) V    [n, nh*hd]    */
    attn_job aj = {ctx, l, n, pos};
    /* small jobs (decode on short contexts) run on this thread: waking
     * the pool costs more than the work */
    double work = (double)n * (double)nh * (double)(pos + n) * (double)hd;
    lb_pool_run(work < 65536.0 ? NULL : pool, attn_worker, &aj);
    /* hidden += att Wo^T                                   [n, dim]     */
    LB_TRY(hook_call(ctx, l, LB_LINEAR_O, ctx->att, n, qd));
    LB_TRY(lb_matmul(pool, &L->w[LB_LINEAR_O], ctx->att, ctx->o, n));
    for (int64_t i = 0; i < (int64_t)n * dim; i++) hidden[i] += ctx->o[i];

    /* ---- MLP block (SwiGLU) ------------------------------------------ */
    for (int32_t t = 0; t < n; t++)
        lb_rmsnorm(ctx->xn + t * dim, hidden + t * dim, L->ffn_norm.data, dim,
                   c->rms_norm_eps);
    LB_TRY(hook_call(ctx, l, LB_LINEAR_GATE, ctx->xn, n, dim));
    LB_TRY(hook_call(ctx, l, LB_LINEAR_UP, ctx->xn, n, dim));
    /* gate, up = xn Wg^T, xn Wu^T                          [n, ff]      */
    LB_TRY(lb_matmul(pool, &L->w[LB_LINEAR_GATE], ctx->xn, ctx->gate, n));
    LB_TRY(lb_matmul(pool, &L->w[LB_LINEAR_UP], ctx->xn, ctx->up, n));
    for (int64_t i = 0; i < (int64_t)n * ff; i++)
        ctx->gate[i] = silu(ctx->gate[i]) * ctx->up[i];
    /* hidden += (silu(gate) * up) Wd^T                     [n, dim]     */
    LB_TRY(hook_call(ctx, l, LB_LINEAR_DOWN, ctx->gate, n, ff));
    LB_TRY(lb_matmul(pool, &L->w[LB_LINEAR_DOWN], ctx->gate, ctx->o, n));
    for (int64_t i = 0; i < (int64_t)n * dim; i++) hidden[i] += ctx->o[i];
    return LB_OK;
}

static lb_status check_span(lb_context *ctx, int32_t n, int32_t pos) {
    if (n <= 0)
        return lb_set_error(LB_ERR_INVALID_ARG, "forward: n_tokens %d <= 0",
                            (int)n);
    if (pos < 0 || pos > ctx->n_past)
        return lb_set_error(LB_ERR_RANGE,
                            "forward: pos %d is beyond the %d cached "
                            "positions",
                            (int)pos, (int)ctx->n_past);
    if ((int64_t)pos + n > ctx->n_ctx)
        return lb_set_error(LB_ERR_RANGE,
                            "forward: positions %d..%d exceed n_ctx %d",
                            (int)pos, (int)(pos + n - 1), (int)ctx->n_ctx);
    return LB_OK;
}

lb_status lb_model_embed(lb_context *ctx, const int32_t *tokens, int32_t n,
                         float *hidden) {
    const lb_model *m = ctx->m;
    const int64_t dim = m->config.hidden_size;
    for (int32_t t = 0; t < n; t++) {
        if (tokens[t] < 0 || tokens[t] >= m->config.vocab_size)
            return lb_set_error(LB_ERR_RANGE,
                                "forward: token id %d at index %d outside "
                                "[0, %d)",
                                (int)tokens[t], (int)t,
                                (int)m->config.vocab_size);
        LB_TRY(lb_model_dequant_row(m, &m->tok_embd, tokens[t],
                                    hidden + t * dim));
    }
    return LB_OK;
}

lb_status lb_layer_forward(lb_context *ctx, int layer, float *hidden,
                           int32_t n, int32_t pos) {
    if (layer < 0 || layer >= ctx->m->config.n_layers)
        return lb_set_error(LB_ERR_RANGE, "layer_forward: layer %d outside "
                            "[0, %d)", layer, ctx->m->config.n_layers);
    LB_TRY(check_span(ctx, n, pos));
    LB_TRY(ensure_scratch(ctx, n));
    return layer_forward(ctx, layer, hidden, n, pos);
}

lb_status lb_model_output_logits(lb_context *ctx, const float *hidden,
                                 int32_t n, float *logits) {
    const lb_model *m = ctx->m;
    const int64_t dim = m->config.hidden_size;
    LB_TRY(ensure_scratch(ctx, n));
    /* xn = RMSNorm(hidden) * norm; logits = xn lm_head^T      [n, V]   */
    for (int32_t t = 0; t < n; t++)
        lb_rmsnorm(ctx->xn + t * dim, hidden + t * dim, m->output_norm.data,
                   dim, m->config.rms_norm_eps);
    return lb_matmul(ctx->pool, &m->output, ctx->xn, logits, n);
}

lb_status lb_model_forward(lb_context *ctx, const int32_t *tokens,
                           int32_t n, int32_t pos, float *logits,
                           lb_logits_mode mode) {
    const lb_model *m = ctx->m;
    const int64_t dim = m->config.hidden_size;
    LB_TRY(check_span(ctx, n, pos));
    if (mode != LB_LOGITS_NONE && !logits)
        return lb_set_error(LB_ERR_INVALID_ARG, "forward: logits_out is NULL");
    LB_TRY(ensure_scratch(ctx, n));
    ctx->n_past = pos; /* the cache from pos on is rewritten */
    /* x = embed_tokens[tokens]                                 [n, dim] */
    LB_TRY(lb_model_embed(ctx, tokens, n, ctx->x));
    for (int l = 0; l < m->config.n_layers; l++)
        LB_TRY(layer_forward(ctx, l, ctx->x, n, pos));
    memcpy(ctx->toks + pos, tokens, (size_t)n * sizeof *tokens);
    ctx->n_past = pos + n;
    if (mode == LB_LOGITS_LAST)
        return lb_model_output_logits(ctx, ctx->x + (n - 1) * dim, 1, logits);
    if (mode == LB_LOGITS_ALL)
        return lb_model_output_logits(ctx, ctx->x, n, logits);
    return LB_OK;
}
