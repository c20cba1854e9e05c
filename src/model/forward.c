/*
 * The forward pass: context (KV cache, RoPE tables, scratch, threads),
 * embedding, decoder layers, final norm + lm_head. Follows transformers
 * 5.12 modeling_llama.py / modeling_qwen2.py / modeling_qwen3.py with eager
 * attention in float32 (LlamaRMSNorm, apply_rotary_pos_emb with
 * rotate_half, repeat_kv, softmax(dtype=float32), SwiGLU MLP).
 *
 * Execution (ggml-style: one thread-pool job per forward pass, phases
 * separated by barriers, ith/nth splits; see fwd_worker):
 *   per layer  1. RMSNorm + activation quantization, rows split over threads
 *              2. q, k, v products, weight-row chunks split over threads
 *                 (lb_steal_take: a contiguous range each, then stealing)
 *              3. bias, q/k norm, RoPE, K/V written to the cache (by token)
 *              4. attention, (token, KV head) units split the same way; the
 *                 nh/nkv query heads sharing a KV head are done together
 *                 (GQA), keys in blocks with an online (running max)
 *                 softmax, so no buffer grows with n_ctx (attention.c)
 *              5. o product; 6. residual + RMSNorm + quantization
 *              7. gate and up products with SwiGLU fused per chunk
 *              8. down product; its residual add opens the next layer.
 * Elementwise and attention arithmetic goes through the kernel table's
 * vector helpers (kernels_internal.h: scalar reference + AVX2 twins).
 * lb_model_forward runs inputs longer than n_batch in passes of n_batch
 * tokens, so scratch memory is bounded by n_batch.
 */
#include "model/model_internal.h"
#include "kernels/kernels_internal.h"
#include "lowbit/kernels.h"
#include "lowbit/lora.h"
#include "core/internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

/* work-split counter sets (lb_steal_take) per layer */
#define PHASES_PER_LAYER 8

struct lb_context {
    const lb_model *m;
    int32_t n_ctx, n_past;
    lb_pool *pool;
    bool own_pool;
    /* layers with fewer weight bytes x tokens than this run on the caller
     * alone (run_layers; LB_LAYER_MT_MIN overrides, e.g. 0 in tests) */
    double layer_mt_min;
    int n_threads;

    /* KV cache of kv_type (F32 or F16), per layer and KV head contiguous
     * over positions: element ((layer * nkv + h) * n_ctx + pos) * hd + i. */
    lb_type kv_type;
    size_t kv_esize;
    void *k_cache, *v_cache;
    /* Token id at each cached position (-1: unknown, e.g. after layers
     * were driven by hand). [n_ctx] */
    int32_t *toks;
    /* RoPE tables [n_ctx][hd/2], filled lazily up to rope_done positions. */
    float *rope_cos, *rope_sin, *inv_freq;
    int32_t rope_done;

    int32_t n_batch; /* tokens per pass of lb_model_forward */
    /* Scratch for up to `cap` tokens (wide = max(dim, nh*hd)). Buffers are
     * reused across phases of a layer where their lifetimes do not
     * overlap. */
    int32_t cap;
    float *x;      /* [cap, dim]   residual stream (lb_model_forward)   */
    float *xn;     /* [cap, wide]  normed input of a block; then the
                      attention output (o_proj input, rows of nh*hd)     */
    float *q;      /* [cap, wide]  queries (rows of nh*hd); then the
                      o_proj / down_proj outputs (rows of dim)           */
    float *k, *v;  /* [cap, nkv*hd]                                      */
    /* The MLP runs by weight-row chunks of gate/up: per thread, a chunk's
     * gate and up outputs [n, row_chunk] each (mlpc); SwiGLU is applied
     * and, when down_proj takes quantized activations, the chunk is
     * quantized straight into down_proj's input (act[3]) — no [n, ff]
     * f32 buffer. `gate` [cap, ff] only when a layer cannot stream (a
     * hook is set, f32 inputs for down_proj) and `up` [cap, ff] only when
     * gate and up are cut differently (both allocated on demand). */
    float *mlpc;
    size_t mlpc_per_thread; /* floats */
    float *gate, *up;
    int32_t gate_cap, up_cap;
    bool *stream;  /* [n_layers]: the layer streams its MLP (this pass)  */
    /* quantized activations [cap, stride]: act[0] for q, o, gate; act[1] /
     * act[2] for k, up / v when their activation type differs from the
     * first of their group; act[3] for down */
    uint8_t *act[4];
    size_t act_stride[4];
    /* Per-thread attention scratch (lb_attn_scratch_floats floats) */
    float *att_scratch;
    size_t att_scratch_per_thread;

    lb_mm_plan *plans; /* [n_layers][LB_LINEAR_COUNT], per forward    */
    /* [n_layers][PHASES_PER_LAYER][n_threads] work-split counters */
    lb_steal_ctr *ctr;
    size_t n_ctr;

    /* lb_context_params.f16_activations: inputs of F16 weights rounded
     * to f16 first (ggml's F16 x F16 products) */
    bool f16_act;

    /* lb_context_params.bf16_activations, when a kernel exists: F32/BF16
     * weights meet bf16 activations (bf16_plan) */
    bool bf16_act;
    lb_bf16x_kernels bf16x;

    lb_forward_hook hook;
    /* LoRA adapters added beside the linears (lowbit/lora.h); a layer with
     * an adapter runs its MLP unfused (gate/up outputs whole before
     * SwiGLU, down_proj input in f32) */
    lb_lora_set lora;

    /* config.online_hadamard_down: T of order intermediate_size (built on
     * the first forward) and per-thread scratch [n_threads, ff] */
    lb_hadamard had;
    float *had_tmp;
};

bool lb_context_bf16_active(const lb_context *ctx) {
    return ctx && ctx->bf16_act;
}

lb_status lb_context_set_loras(lb_context *ctx, const lb_lora_set *set) {
    if (set && (set->n < 0 || set->n > LB_LORA_MAX_SET))
        return lb_set_error(LB_ERR_INVALID_ARG, "context: %d adapters (at most "
                            "%d)", set->n, LB_LORA_MAX_SET);
    for (int k = 0; set && k < set->n; k++)
        if (lb_lora_n_layers(set->a[k]) != ctx->m->config.n_layers)
            return lb_set_error(LB_ERR_INVALID_ARG, "context: adapter %s has %d "
                                "layers, the model %d", lb_lora_name(set->a[k]),
                                lb_lora_n_layers(set->a[k]),
                                ctx->m->config.n_layers);
    if (set && set->n > 0 && lb_model_config_is_ext(&ctx->m->config))
        return lb_set_error(LB_ERR_UNSUPPORTED, "context: LoRA adapters are not "
                            "supported for architecture '%s' yet (adapter %s)",
                            ctx->m->config.arch_name, lb_lora_name(set->a[0]));
    if (set)
        ctx->lora = *set;
    else
        memset(&ctx->lora, 0, sizeof ctx->lora);
    return LB_OK;
}

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

void lb_model_rope_inv_freq(const lb_model *m, float *inv_freq) {
    lb_rope_inv_freq(&m->config, inv_freq);
    if (m->rope_freqs.data) /* GGUF freq factors (ggml rope freq_factors) */
        for (int i = 0; i < m->config.head_dim / 2; i++)
            inv_freq[i] /= ((const float *)m->rope_freqs.data)[i];
}

/* Rotate one head vector x[hd] at the position whose tables are c, s.
 * LB_ROPE_NORM (llama.cpp's llama layout: convert_hf_to_gguf permuted the
 * q/k rows so that HF's halves (i, i + hd/2) sit in adjacent pairs
 * (2i, 2i + 1)) rotates the pairs and writes the result back in HF's order
 * (first halves, then second halves): the same floats as LB_ROPE_NEOX on the
 * unpermuted rows, so attention sums q.k in the order the HF path does
 * (before, the permuted order rounded differently and flipped a few of
 * Mixtral's routing choices after Q8_0 activations). */
void lb_rope_apply(float *x, const float *c, const float *s, int hd,
                   lb_rope_mode mode) {
    const int half = hd / 2;
    if (mode == LB_ROPE_NEOX) {
        /* x*cos + rotate_half(x)*sin, rotate_half(x) = cat(-x2, x1) */
        for (int i = 0; i < half; i++) {
            float x0 = x[i], x1 = x[i + half];
            x[i] = x0 * c[i] - x1 * s[i];
            x[i + half] = x1 * c[i] + x0 * s[i];
        }
        return;
    }
    /* adjacent pairs (2i, 2i+1), ggml rope mode 0; head_dim <= 4096 (the
     * config's bound) */
    float tmp[4096];
    for (int i = 0; i < half; i++) {
        float x0 = x[2 * i], x1 = x[2 * i + 1];
        tmp[i] = x0 * c[i] - x1 * s[i];
        tmp[i + half] = x1 * c[i] + x0 * s[i];
    }
    memcpy(x, tmp, (size_t)hd * sizeof *x);
}

void lb_rope_tables(const float *inv_freq, int half, int32_t p0, int32_t p1,
                    float *cos_out, float *sin_out) {
    for (int32_t pos = p0; pos < p1; pos++)
        for (int i = 0; i < half; i++) {
            float f = inv_freq[i] * (float)pos;
            cos_out[(size_t)pos * half + i] = cosf(f);
            sin_out[(size_t)pos * half + i] = sinf(f);
        }
}

void lb_qk_norm_rope(const lb_model_config *c, const lb_layer_weights *L,
                     float *q, float *k, const float *cs, const float *sn) {
    const int hd = c->head_dim;
    for (int h = 0; h < c->n_heads; h++) {
        float *qh = q + (size_t)h * hd;
        if (c->qk_norm) lb_rmsnorm(qh, qh, L->q_norm.data, hd, c->rms_norm_eps);
        lb_rope_apply(qh, cs, sn, hd, c->rope_mode);
    }
    for (int h = 0; h < c->n_kv_heads; h++) {
        float *kh = k + (size_t)h * hd;
        if (c->qk_norm) lb_rmsnorm(kh, kh, L->k_norm.data, hd, c->rms_norm_eps);
        lb_rope_apply(kh, cs, sn, hd, c->rope_mode);
    }
}

/* ------------------------------------------------------------------------ */
/* Context                                                                   */
/* ------------------------------------------------------------------------ */

lb_context_params lb_context_default_params(void) {
    lb_context_params p;
    memset(&p, 0, sizeof p);
    p.kv_type = LB_TYPE_F32;
    return p;
}

static void free_scratch(lb_context *ctx) {
    float **f[] = {&ctx->x, &ctx->xn, &ctx->q, &ctx->k, &ctx->v, &ctx->gate, &ctx->up};
    ctx->gate_cap = ctx->up_cap = 0;
    for (size_t i = 0; i < LB_ARRAY_LEN(f); i++) {
        lb_free(*f[i]);
        *f[i] = NULL;
    }
    for (int i = 0; i < 4; i++) {
        lb_free(ctx->act[i]);
        ctx->act[i] = NULL;
    }
    ctx->cap = 0;
}

/* Bytes of one quantized activation row for weight w (0: f32 input used
 * directly; f32 rows rounded to f16 for F16 weights with f16_act). */
static size_t act_row_bytes(const lb_kernel_table *kt, const lb_tensor *w,
                            bool f16_act) {
    if ((unsigned)w->type >= LB_TYPE_COUNT_ || !kt->w[w->type].mm) return 0;
    if (f16_act && w->type == LB_TYPE_F16)
        return (size_t)lb_tensor_cols(w) * sizeof(float);
    lb_type at = kt->w[w->type].act_type;
    size_t rb;
    return at != LB_TYPE_F32 && lb_row_size(at, lb_tensor_cols(w), &rb) ? rb : 0;
}

/* Which activation buffer (act[]) linear i's input goes to. */
static int act_buf_of(int i) {
    switch (i) {
    case LB_LINEAR_K:
    case LB_LINEAR_UP: return 1;
    case LB_LINEAR_V: return 2;
    case LB_LINEAR_DOWN: return 3;
    default: return 0; /* q, o, gate */
    }
}

/* Largest quantized-activation row each act[] buffer needs. */
static void max_act_strides(const lb_model *m, bool f16, size_t st[4]) {
    const lb_kernel_table *kt = lb_kernels_current();
    st[0] = st[1] = st[2] = st[3] = 0;
    for (int l = 0; l < m->config.n_layers; l++)
        for (int i = 0; i < LB_LINEAR_COUNT; i++) {
            const int b = act_buf_of(i);
            st[b] = LB_MAX(st[b], act_row_bytes(kt, &m->layers[l].w[i], f16));
        }
}

/* Make room for n tokens of scratch. */
static lb_status ensure_scratch(lb_context *ctx, int32_t n) {
    if (n <= ctx->cap) return LB_OK;
    const lb_model_config *c = &ctx->m->config;
    free_scratch(ctx);
    size_t t = (size_t)n, dim = (size_t)c->hidden_size,
           qd = (size_t)c->n_heads * (size_t)c->head_dim,
           kvd = (size_t)c->n_kv_heads * (size_t)c->head_dim,
           wide = LB_MAX(dim, qd);
    ctx->x = lb_calloc(t * dim, sizeof(float));
    ctx->xn = lb_calloc(t * wide, sizeof(float));
    ctx->q = lb_calloc(t * wide, sizeof(float));
    ctx->k = lb_calloc(t * kvd, sizeof(float));
    ctx->v = lb_calloc(t * kvd, sizeof(float));
    bool ok = ctx->x && ctx->xn && ctx->q && ctx->k && ctx->v;
    /* the weights may have been swapped (lb_model_set_linear): recompute */
    max_act_strides(ctx->m, ctx->f16_act, ctx->act_stride);
    for (int i = 0; i < 4 && ok; i++) {
        ctx->act[i] = lb_alloc(LB_MAX(t * ctx->act_stride[i], 1));
        ok = ctx->act[i] != NULL;
    }
    if (!ok) {
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
    if (p.kv_type != LB_TYPE_F32 && p.kv_type != LB_TYPE_F16)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "context: kv_type %s (F32 or F16)",
                            lb_type_name((int)p.kv_type));
    lb_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return lb_set_error(LB_ERR_NOMEM, "context: out of memory");
    ctx->m = m;
    ctx->n_ctx = n_ctx;
    ctx->kv_type = p.kv_type;
    ctx->kv_esize = p.kv_type == LB_TYPE_F16 ? 2 : 4;
    ctx->n_batch = p.n_batch > 0 ? LB_MIN(p.n_batch, n_ctx) : LB_MIN(512, n_ctx);
    ctx->f16_act = p.f16_activations;
    if (p.bf16_activations) ctx->bf16_act = lb_kernels_bf16x(false, &ctx->bf16x);
    lb_status s = LB_OK;
    if (p.pool) {
        ctx->pool = p.pool;
    } else {
        ctx->pool = lb_pool_create_ex(p.n_threads,
                                      p.pin_threads == LB_PIN_ON    ? LB_POOL_PIN
                                      : p.pin_threads == LB_PIN_AUTO ? LB_POOL_PIN_AUTO
                                                                     : 0);
        ctx->own_pool = true;
        if (!ctx->pool) {
            s = lb_set_error(LB_ERR_NOMEM, "context: cannot create thread "
                             "pool");
            goto fail;
        }
    }
    ctx->n_threads = lb_pool_size(ctx->pool);
    {
        const char *e = getenv("LB_LAYER_MT_MIN");
        ctx->layer_mt_min = e && e[0] ? strtod(e, NULL) : 1048576.0;
    }
    size_t kv_elems;
    if (!lb_mul_ok((size_t)c->n_layers * (size_t)c->n_kv_heads,
                   (size_t)n_ctx * (size_t)c->head_dim, &kv_elems) ||
        kv_elems > SIZE_MAX / 8) {
        s = lb_set_error(LB_ERR_OVERFLOW, "context: KV cache size overflows");
        goto fail;
    }
    /* lb_alloc without zeroing: only written positions are ever read, and
     * untouched pages cost no memory */
    ctx->k_cache = lb_alloc(kv_elems * ctx->kv_esize);
    ctx->v_cache = lb_alloc(kv_elems * ctx->kv_esize);
    if (!ctx->k_cache || !ctx->v_cache) {
        s = lb_set_error(LB_ERR_NOMEM,
                         "context: out of memory for the KV cache (2 x %zu "
                         "MiB of %s for n_ctx %d)",
                         kv_elems * ctx->kv_esize >> 20,
                         lb_type_name((int)ctx->kv_type), (int)n_ctx);
        goto fail;
    }
    const int half = c->head_dim / 2;
    const int G = c->n_heads / c->n_kv_heads;
    ctx->toks = lb_alloc((size_t)n_ctx * sizeof(int32_t));
    ctx->rope_cos = lb_alloc((size_t)n_ctx * (size_t)half * sizeof(float));
    ctx->rope_sin = lb_alloc((size_t)n_ctx * (size_t)half * sizeof(float));
    ctx->inv_freq = lb_alloc((size_t)half * sizeof(float));
    ctx->att_scratch_per_thread = lb_attn_scratch_floats(G, c->head_dim);
    ctx->att_scratch = lb_alloc((size_t)ctx->n_threads *
                                ctx->att_scratch_per_thread * sizeof(float));
    ctx->plans = calloc((size_t)c->n_layers * LB_LINEAR_COUNT,
                        sizeof *ctx->plans);
    ctx->stream = calloc((size_t)c->n_layers, sizeof *ctx->stream);
    ctx->n_ctr = (size_t)c->n_layers * PHASES_PER_LAYER * (size_t)ctx->n_threads;
    ctx->ctr = lb_calloc(ctx->n_ctr, sizeof *ctx->ctr);
    if (!ctx->toks || !ctx->rope_cos || !ctx->rope_sin || !ctx->inv_freq ||
        !ctx->att_scratch || !ctx->plans || !ctx->stream || !ctx->ctr) {
        s = lb_set_error(LB_ERR_NOMEM, "context: out of memory");
        goto fail;
    }
    /* cos/sin of (inv_freq * position) in float32, as LlamaRotaryEmbedding
     * (attention_scaling is 1 for default/linear/llama3); rows are filled
     * when positions are first used. */
    lb_model_rope_inv_freq(m, ctx->inv_freq);
    if ((s = ensure_scratch(ctx, ctx->n_batch)) != LB_OK) goto fail;
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
    lb_free(ctx->inv_freq);
    lb_free(ctx->att_scratch);
    lb_free(ctx->mlpc);
    lb_hadamard_free(&ctx->had);
    lb_free(ctx->had_tmp);
    free(ctx->stream);
    free(ctx->plans);
    lb_free(ctx->ctr);
    if (ctx->own_pool) lb_pool_free(ctx->pool);
    free(ctx);
}

const lb_model *lb_context_model(const lb_context *ctx) { return ctx->m; }
int32_t lb_context_n_ctx(const lb_context *ctx) { return ctx->n_ctx; }
lb_pool *lb_context_pool(lb_context *ctx) { return ctx->pool; }
int32_t lb_context_n_past(const lb_context *ctx) { return ctx->n_past; }
lb_type lb_context_kv_type(const lb_context *ctx) { return ctx->kv_type; }
void lb_context_reset(lb_context *ctx) { ctx->n_past = 0; }

void lb_context_release_kv(lb_context *ctx, int layer) {
    if (!ctx || layer < 0 || layer >= ctx->m->config.n_layers) return;
    const lb_model_config *c = &ctx->m->config;
    const size_t slab = (size_t)c->n_kv_heads * (size_t)ctx->n_ctx *
                        (size_t)c->head_dim * ctx->kv_esize;
    lb_drop_pages((uint8_t *)ctx->k_cache + (size_t)layer * slab, slab);
    lb_drop_pages((uint8_t *)ctx->v_cache + (size_t)layer * slab, slab);
}

void lb_context_release_scratch(lb_context *ctx) {
    if (!ctx) return;
    const lb_model_config *c = &ctx->m->config;
    const size_t cap = (size_t)ctx->cap, dim = (size_t)c->hidden_size,
                 qd = (size_t)c->n_heads * (size_t)c->head_dim,
                 kvd = (size_t)c->n_kv_heads * (size_t)c->head_dim,
                 wide = LB_MAX(dim, qd), ff = (size_t)c->intermediate_size,
                 fs = sizeof(float);
    /* the sizes the buffers were allocated with (ensure_scratch,
     * plan_layers, online_hadamard_ready), never more */
    lb_drop_pages(ctx->x, cap * dim * fs);
    lb_drop_pages(ctx->xn, cap * wide * fs);
    lb_drop_pages(ctx->q, cap * wide * fs);
    lb_drop_pages(ctx->k, cap * kvd * fs);
    lb_drop_pages(ctx->v, cap * kvd * fs);
    lb_drop_pages(ctx->gate, (size_t)ctx->gate_cap * ff * fs);
    lb_drop_pages(ctx->up, (size_t)ctx->up_cap * ff * fs);
    for (int i = 0; i < 4; i++)
        lb_drop_pages(ctx->act[i], cap * ctx->act_stride[i]);
    lb_drop_pages(ctx->mlpc, ctx->mlpc_per_thread * (size_t)ctx->n_threads * fs);
    if (ctx->had_tmp)
        lb_drop_pages(ctx->had_tmp, (size_t)ctx->n_threads * ff * fs);
}

size_t lb_context_kv_bytes(const lb_context *ctx) {
    const lb_model_config *c = &ctx->m->config;
    return 2 * (size_t)c->n_layers * (size_t)c->n_kv_heads *
           (size_t)ctx->n_ctx * (size_t)c->head_dim * ctx->kv_esize;
}

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

/* Fill the RoPE tables up to position `upto` (exclusive). */
static void rope_fill(lb_context *ctx, int32_t upto) {
    lb_rope_tables(ctx->inv_freq, ctx->m->config.head_dim / 2, ctx->rope_done,
                   upto, ctx->rope_cos, ctx->rope_sin);
    if (upto > ctx->rope_done) ctx->rope_done = upto;
}

/* ------------------------------------------------------------------------ */
/* The layer job                                                             */
/* ------------------------------------------------------------------------ */

typedef struct fwd_job {
    lb_context *ctx;
    const lb_kernel_table *kt;
    float *hidden; /* [n, dim] residual stream, updated in place */
    int32_t n, pos;
    int layer0, layer1;
    lb_layer_entry entry; /* where layer0 starts (lb_layer_forward_from) */
    const float *src;     /* its ENTRY_O / ENTRY_DOWN input              */
    lb_pool *pool; /* the pool running the job (NULL: the caller alone) */
    atomic_int status; /* a hook's failure */
} fwd_job;

/* Take chunks [0, total) of a phase: its counter set is ctr + phase * nth
 * (lb_steal_take); *k = 0 before the first take. */
static inline bool take(lb_steal_ctr *ctr, int phase, int64_t total, int ith,
                        int nth, int *k, int64_t *c) {
    return lb_steal_take(ctr + (size_t)phase * (size_t)nth, total, ith, nth, k, c);
}

static lb_status hook_call(lb_context *ctx, int layer, lb_linear_id which,
                           const float *X, int32_t n, int64_t in) {
    if (!ctx->hook.linear_input) return LB_OK;
    return ctx->hook.linear_input(ctx->hook.user, layer, which, X, n, in);
}

/* Call the hook for linears [first, first + count) with input X on thread
 * 0 between two barriers; returns false (on every thread) when it
 * failed. */
static bool hook_phase(fwd_job *j, int ith, int l, lb_linear_id first,
                       int count, const float *X, int64_t in) {
    lb_context *ctx = j->ctx;
    if (!ctx->hook.linear_input) return true;
    lb_pool_barrier(j->pool);
    if (ith == 0)
        for (int i = 0; i < count; i++) {
            lb_status s = hook_call(ctx, l, (lb_linear_id)(first + i), X, j->n,
                                    in);
            if (s != LB_OK) {
                atomic_store(&j->status, (int)s);
                break;
            }
        }
    lb_pool_barrier(j->pool);
    return atomic_load(&j->status) == LB_OK;
}

/* LoRA deltas of linear `which` of layer l for token rows [t0, t1) (the
 * caller's own rows: no barrier needed before it uses them). */
static void lora_rows(lb_context *ctx, int l, lb_linear_id which,
                      const float *X, int64_t ldx, float *Y, int64_t ldy,
                      size_t t0, size_t t1) {
    if (ctx->lora.n)
        lb_lora_set_apply_rows(&ctx->lora, l, which, X, (size_t)ldx, Y,
                               (size_t)ldy, t0, t1);
}

/* Quantize token rows [t0, t1) of X for the plans `p[0..np)`, sharing one
 * buffer between plans with the same activation type; *bufs receives each
 * plan's activation pointer (X itself for f32 activations). */
/* bf16_activations: the plan of an F32 or BF16 weight takes bf16
 * activation rows (qact) and the BF16 x BF16 kernel, which repacks 32-row
 * panels itself (all tokens per call; chunks of whole panels). */
static void bf16_plan(const lb_context *ctx, lb_mm_plan *pl) {
    if (pl->w_type != LB_TYPE_F32 && pl->w_type != LB_TYPE_BF16) return;
    pl->mm = pl->w_type == LB_TYPE_F32 ? ctx->bf16x.mm_f32w : ctx->bf16x.mm_bf16w;
    pl->qact = ctx->bf16x.qact;
    pl->act_type = LB_TYPE_BF16;
    pl->a_stride = (size_t)pl->in * sizeof(uint16_t);
    pl->tok_tile = LB_MAX(pl->n_tokens, 1);
    pl->row_chunk = LB_MIN(32, pl->out);
    pl->n_chunks = (pl->out + pl->row_chunk - 1) / pl->row_chunk;
}

static bool f16_rounded(const lb_context *ctx, const lb_mm_plan *p) {
    return ctx->f16_act && p->w_type == LB_TYPE_F16;
}

static void quant_rows(lb_context *ctx, const lb_mm_plan *const *p, int np,
                       const float *X, int64_t t0, int64_t t1,
                       const void **bufs, int buf0) {
    for (int i = 0; i < np; i++) {
        const bool r16 = f16_rounded(ctx, p[i]);
        if (!p[i]->qact && !r16) {
            bufs[i] = X;
            continue;
        }
        int same = -1;
        for (int k = 0; k < i; k++)
            if (f16_rounded(ctx, p[k]) == r16 && (r16 || (p[k]->qact &&
                                                         p[k]->act_type == p[i]->act_type)))
                same = k;
        if (same >= 0) {
            bufs[i] = bufs[same];
            continue;
        }
        uint8_t *act = ctx->act[buf0 + i];
        bufs[i] = act;
        if (r16) {
            const int64_t in = p[i]->in;
            float *dst = (float *)(void *)act;
            for (int64_t t = t0; t < t1; t++)
                for (int64_t j = 0; j < in; j++)
                    dst[t * in + j] = lb_f16_to_f32_inline(lb_f32_to_f16(X[t * in + j]));
        } else {
            lb_mm_plan_quantize(p[i], X, act, t0, t1);
        }
    }
}

/* One attention unit: token t, KV head kvh, its G query heads.
 *   att[t, (kvh*G+g)*hd ..] = softmax(q K^T / sqrt(hd)) V over keys
 *   [j0, pos+t] (causal; sliding window), with online softmax per block
 *   (attention.c). */
static void attn_unit(lb_context *ctx, const lb_kernel_table *kt, int l,
                      int32_t t, int kvh, int32_t pos, float *scr) {
    const lb_model_config *c = &ctx->m->config;
    const int hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    const int G = nh / nkv;
    const int32_t p = pos + t;
    int32_t j0 = 0;
    if (c->sliding_window > 0 && l >= c->sliding_window_first_layer &&
        p - c->sliding_window + 1 > 0)
        j0 = p - c->sliding_window + 1;
    const size_t row0 = ((size_t)l * nkv + kvh) * (size_t)ctx->n_ctx * hd;
    const lb_attn_unit u = {
        .q = ctx->q + ((size_t)t * nh + (size_t)kvh * G) * hd,
        .out = ctx->xn + ((size_t)t * nh + (size_t)kvh * G) * hd, /* att */
        .k_cache = ctx->k_cache, .v_cache = ctx->v_cache, .row0 = row0,
        .f16 = ctx->kv_type == LB_TYPE_F16, .j0 = j0, .p = p, .G = G, .hd = hd,
        .scale = 1.0f / sqrtf((float)hd), .softcap = 0.0f};
    lb_attn_unit_run(&kt->vec, &u, scr);
}

static void fwd_worker(void *arg, int ith, int nth) {
    fwd_job *j = arg;
    lb_context *ctx = j->ctx;
    const lb_kernel_table *kt = j->kt;
    const lb_model *m = ctx->m;
    const lb_model_config *c = &m->config;
    lb_pool *pool = j->pool;
    const int64_t dim = c->hidden_size, hd = c->head_dim, nh = c->n_heads,
                  nkv = c->n_kv_heads, ff = c->intermediate_size;
    const int64_t qd = nh * hd, kvd = nkv * hd;
    const int half = (int)(hd / 2);
    const int32_t n = j->n, pos = j->pos;
    const float eps = c->rms_norm_eps;
    float *hidden = j->hidden;
    float *scr = ctx->att_scratch + (size_t)ith * ctx->att_scratch_per_thread;
    size_t tb, te; /* this thread's token rows */
    lb_split_range((size_t)n, ith, nth, &tb, &te);
    int64_t ch;

    for (int l = j->layer0; l < j->layer1; l++) {
        const lb_layer_weights *L = &m->layers[l];
        const lb_mm_plan *P = ctx->plans + (size_t)l * LB_LINEAR_COUNT;
        /* this layer's counter sets: 0 q, 1 attention, 2 o, 3 gate (and
         * up when fused), 4 down, 5 k, 6 v, 7 up (not fused) */
        lb_steal_ctr *ctr = ctx->ctr + (size_t)l * PHASES_PER_LAYER * (size_t)nth;
        int k;
        const lb_mm_plan *pqkv[3] = {&P[LB_LINEAR_Q], &P[LB_LINEAR_K],
                                     &P[LB_LINEAR_V]};
        const void *aq[3], *ao[1], *agu[2], *ad[1];
        /* att is written into xn's buffer (xn is not needed again before
         * step 6); o: q is free after step 4. from: where this layer
         * starts (lb_layer_forward_from): steps 1-4 run from the input,
         * step 5 from o_proj's input too, steps 6-7 from the MLP on */
        const lb_layer_entry from =
            l == j->layer0 ? j->entry : LB_LAYER_ENTRY_INPUT;
        const float *att = from == LB_LAYER_ENTRY_O ? j->src : ctx->xn;
        float *o = ctx->q;
        const bool attn = from == LB_LAYER_ENTRY_INPUT;
        const bool oproj = from <= LB_LAYER_ENTRY_O;
        const bool up = from <= LB_LAYER_ENTRY_MLP;

        if (attn) {
            /* 1. xn = RMSNorm(hidden) * input_layernorm; quantize for q/k/v */
            for (size_t t = tb; t < te; t++)
                lb_rmsnorm(ctx->xn + t * dim, hidden + t * dim, L->attn_norm.data,
                           dim, eps);
            quant_rows(ctx, pqkv, 3, ctx->xn, (int64_t)tb, (int64_t)te, aq, 0);
            lb_pool_barrier(pool);
            if (!hook_phase(j, ith, l, LB_LINEAR_Q, 3, ctx->xn, dim)) return;

            /* 2. q = xn Wq^T [n, nh*hd]; k, v = xn Wk^T, xn Wv^T [n, nkv*hd]
             *    (each thread its part of q, then of k, then of v) */
            for (k = 0; take(ctr, 0, pqkv[0]->n_chunks, ith, nth, &k, &ch);)
                lb_mm_plan_chunk(pqkv[0], aq[0], ctx->q, (size_t)qd, ch);
            for (k = 0; take(ctr, 5, pqkv[1]->n_chunks, ith, nth, &k, &ch);)
                lb_mm_plan_chunk(pqkv[1], aq[1], ctx->k, (size_t)kvd, ch);
            for (k = 0; take(ctr, 6, pqkv[2]->n_chunks, ith, nth, &k, &ch);)
                lb_mm_plan_chunk(pqkv[2], aq[2], ctx->v, (size_t)kvd, ch);
            lb_pool_barrier(pool);
            /*    + LoRA: q, k, v += s B (A xn) on this thread's token rows */
            lora_rows(ctx, l, LB_LINEAR_Q, ctx->xn, dim, ctx->q, qd, tb, te);
            lora_rows(ctx, l, LB_LINEAR_K, ctx->xn, dim, ctx->k, kvd, tb, te);
            lora_rows(ctx, l, LB_LINEAR_V, ctx->xn, dim, ctx->v, kvd, tb, te);

            /* 3. + bias; Qwen3 per-head RMSNorm; RoPE; append k, v to the
             *    cache at positions pos + t */
            for (size_t t = tb; t < te; t++) {
                float *qt = ctx->q + t * qd, *kr = ctx->k + t * kvd,
                      *vt = ctx->v + t * kvd;
                if (L->bq.data) kt->vec.add(qt, L->bq.data, qd);
                if (L->bk.data) kt->vec.add(kr, L->bk.data, kvd);
                if (L->bv.data) kt->vec.add(vt, L->bv.data, kvd);
                lb_qk_norm_rope(c, L, qt, kr, ctx->rope_cos + (size_t)(pos + t) * half,
                                ctx->rope_sin + (size_t)(pos + t) * half);
                for (int64_t h = 0; h < nkv; h++) {
                    const float *kh = kr + h * hd;
                    size_t row = (((size_t)l * nkv + h) * ctx->n_ctx + pos + t) * hd;
                    if (ctx->kv_type == LB_TYPE_F16) {
                        kt->vec.f32_to_f16(kh, (uint16_t *)ctx->k_cache + row, hd);
                        kt->vec.f32_to_f16(vt + h * hd, (uint16_t *)ctx->v_cache + row,
                                           hd);
                    } else {
                        memcpy((float *)ctx->k_cache + row, kh, (size_t)hd * 4);
                        memcpy((float *)ctx->v_cache + row, vt + h * hd,
                               (size_t)hd * 4);
                    }
                }
            }
            lb_pool_barrier(pool);

            /* 4. att = softmax(q K^T / sqrt(hd) + causal mask) V  [n, nh*hd] */
            for (k = 0; take(ctr, 1, (int64_t)n * nkv, ith, nth, &k, &ch);)
                attn_unit(ctx, kt, l, (int32_t)(ch / nkv), (int)(ch % nkv), pos,
                          scr);
            lb_pool_barrier(pool);
        } /* attn */
        if (oproj) {
            if (!hook_phase(j, ith, l, LB_LINEAR_O, 1, att, qd)) return;

            /* 5. o = att Wo^T                                     [n, dim] */
            {
                const lb_mm_plan *po[1] = {&P[LB_LINEAR_O]};
                quant_rows(ctx, po, 1, att, (int64_t)tb, (int64_t)te, ao, 0);
                if (po[0]->qact || f16_rounded(ctx, po[0])) lb_pool_barrier(pool);
                for (k = 0; take(ctr, 2, po[0]->n_chunks, ith, nth, &k, &ch);)
                    lb_mm_plan_chunk(po[0], ao[0], o, (size_t)dim, ch);
            }
            lb_pool_barrier(pool);
            lora_rows(ctx, l, LB_LINEAR_O, att, qd, o, dim, tb, te);
        } /* oproj */

        /* 6. hidden += o (ENTRY_MLP: hidden holds it already);
         *    xn = RMSNorm(hidden) * post_attention_layernorm */
        const lb_mm_plan *pgu[2] = {&P[LB_LINEAR_GATE], &P[LB_LINEAR_UP]};
        const lb_mm_plan *pd = &P[LB_LINEAR_DOWN];
        /* down_proj's input: the gate buffer, or the caller's (ENTRY_DOWN,
         * which never streams: its input is whole) */
        const float *dx = up ? ctx->gate : j->src;
        const bool stream = ctx->stream[l] && up;
        if (up) {
            for (size_t t = tb; t < te; t++) {
                if (oproj) kt->vec.add(hidden + t * dim, o + t * dim, dim);
                lb_rmsnorm(ctx->xn + t * dim, hidden + t * dim, L->ffn_norm.data,
                           dim, eps);
            }
            quant_rows(ctx, pgu, 2, ctx->xn, (int64_t)tb, (int64_t)te, agu, 0);
            lb_pool_barrier(pool);
            if (!hook_phase(j, ith, l, LB_LINEAR_GATE, 2, ctx->xn, dim)) return;

            /* 7. gate, up = xn Wg^T, xn Wu^T [n, ff]; h = silu(gate) * up,
             *    fused per chunk when both products are cut the same way; when
             *    streaming, h's chunk is quantized at once into down_proj's
             *    input (the quantizers work block by block, so the bytes equal
             *    a whole-row quantization) */
            {
                const lb_mm_plan *pg = pgu[0], *pu = pgu[1];
                const bool fused = pg->n_chunks == pu->n_chunks &&
                                   pg->row_chunk == pu->row_chunk &&
                                   !lb_lora_set_layer_active(&ctx->lora, l);
                if (fused) {
                    const size_t gsz = (size_t)n * (size_t)pg->row_chunk;
                    float *g = ctx->mlpc + (size_t)ith * ctx->mlpc_per_thread;
                    float *u = stream ? g + gsz : g;
                    const lb_type_traits *at = lb_type_get_traits(pd->act_type);
                    for (k = 0; take(ctr, 3, pg->n_chunks, ith, nth, &k, &ch);) {
                        const int64_t r0 = ch * pg->row_chunk;
                        const int64_t nr = LB_MIN(pg->row_chunk, ff - r0);
                        if (stream)
                            lb_mm_plan_chunk_at(pg, agu[0], g, (size_t)nr, ch);
                        else
                            lb_mm_plan_chunk(pg, agu[0], ctx->gate, (size_t)ff, ch);
                        lb_mm_plan_chunk_at(pu, agu[1], u, (size_t)nr, ch);
                        for (int32_t t = 0; t < n; t++) {
                            float *h = stream ? g + (size_t)t * nr
                                              : ctx->gate + (size_t)t * ff + r0;
                            kt->vec.silu_mul(h, u + (size_t)t * nr, nr);
                            if (stream)
                                pd->qact(h, ctx->act[3] + (size_t)t * pd->a_stride +
                                                (size_t)(r0 / at->blck_size) *
                                                    (size_t)at->type_size,
                                         nr);
                        }
                    }
                    lb_pool_barrier(pool);
                } else {
                    for (k = 0; take(ctr, 3, pg->n_chunks, ith, nth, &k, &ch);)
                        lb_mm_plan_chunk(pg, agu[0], ctx->gate, (size_t)ff, ch);
                    for (k = 0; take(ctr, 7, pu->n_chunks, ith, nth, &k, &ch);)
                        lb_mm_plan_chunk(pu, agu[1], ctx->up, (size_t)ff, ch);
                    lb_pool_barrier(pool);
                    lora_rows(ctx, l, LB_LINEAR_GATE, ctx->xn, dim, ctx->gate, ff, tb, te);
                    lora_rows(ctx, l, LB_LINEAR_UP, ctx->xn, dim, ctx->up, ff, tb, te);
                    for (size_t t = tb; t < te; t++)
                        kt->vec.silu_mul(ctx->gate + t * ff, ctx->up + t * ff, ff);
                    lb_pool_barrier(pool);
                }
            }
        } /* up */
        /* online Hadamard (rotated checkpoints): h <- T h on this thread's
         *    rows, down_proj holding W_down T^T (such layers never stream;
         *    an ENTRY_DOWN input has had it) */
        const bool had = c->online_hadamard_down && up;
        if (had)
            kt->vec.hadamard(&ctx->had, ctx->gate + tb * ff, (int64_t)(te - tb),
                             ctx->had_tmp + (size_t)ith * ff);
        /* (a hook means no streaming: it sees the f32 gate buffer) */
        if (!stream && !hook_phase(j, ith, l, LB_LINEAR_DOWN, 1, dx, ff))
            return;

        /* 8. o = h Wd^T [n, dim]; hidden += o (next layer's step 1 or the
         *    end of the job) */
        {
            const lb_mm_plan *pdl[1] = {pd};
            if (stream) {
                ad[0] = ctx->act[3];
            } else {
                quant_rows(ctx, pdl, 1, dx, (int64_t)tb, (int64_t)te, ad, 3);
                if (pd->qact || f16_rounded(ctx, pd) || had) lb_pool_barrier(pool);
            }
            for (k = 0; take(ctr, 4, pd->n_chunks, ith, nth, &k, &ch);)
                lb_mm_plan_chunk(pd, ad[0], o, (size_t)dim, ch);
        }
        lb_pool_barrier(pool);
        if (!stream) lora_rows(ctx, l, LB_LINEAR_DOWN, dx, ff, o, dim, tb, te);
        for (size_t t = tb; t < te; t++)
            kt->vec.add(hidden + t * dim, o + t * dim, dim);
        /* the rows each thread adds are the rows it normalizes next */
    }
}

/* Grow one of the on-demand buffers to `floats` floats. */
static lb_status grow(float **buf, size_t *have, size_t floats) {
    if (floats <= *have) return LB_OK;
    float *np = lb_alloc(floats * sizeof(float));
    if (!np) return lb_set_error(LB_ERR_NOMEM, "context: out of memory");
    lb_free(*buf);
    *buf = np;
    *have = floats;
    return LB_OK;
}

/* Plan every product of layers [l0, l1) for n tokens (checks the weights,
 * which may have been swapped since the last call), decide which layers
 * stream their MLP, and size the MLP buffers. */
static lb_status plan_layers(lb_context *ctx, const lb_kernel_table *kt,
                             int l0, int l1, int32_t n) {
    const lb_model *m = ctx->m;
    const size_t ff = (size_t)m->config.intermediate_size;
    size_t mlpc = 0; /* floats per thread */
    bool full_gate = false, full_up = false;
    for (int l = l0; l < l1; l++) {
        lb_mm_plan *P = ctx->plans + (size_t)l * LB_LINEAR_COUNT;
        const lb_tensor *w = m->layers[l].w;
        /* down first: gate/up chunks are aligned to its activation blocks */
        static const int order[LB_LINEAR_COUNT] = {
            LB_LINEAR_Q, LB_LINEAR_K, LB_LINEAR_V, LB_LINEAR_O,
            LB_LINEAR_DOWN, LB_LINEAR_GATE, LB_LINEAR_UP};
        int64_t align = 1;
        for (int k = 0; k < LB_LINEAR_COUNT; k++) {
            const int i = order[k];
            lb_mm_plan *pl = &P[i];
            LB_TRY(lb_mm_plan_make_aligned(pl, kt, &w[i], n, ctx->n_threads,
                                           i == LB_LINEAR_GATE || i == LB_LINEAR_UP
                                               ? align : 1));
            if (ctx->bf16_act) bf16_plan(ctx, pl);
            if (i == LB_LINEAR_DOWN && pl->qact && !f16_rounded(ctx, pl))
                align = lb_type_get_traits(pl->act_type)->blck_size;
            /* a swapped weight (lb_model_set_linear) may need larger
             * activation rows than the buffer was made for */
            const int b = act_buf_of(i);
            const size_t need = f16_rounded(ctx, pl) ? (size_t)pl->in * sizeof(float)
                                : pl->qact              ? pl->a_stride
                                                        : 0;
            if (need > ctx->act_stride[b]) {
                void *np = lb_alloc((size_t)ctx->cap * need);
                if (!np)
                    return lb_set_error(LB_ERR_NOMEM, "context: out of memory "
                                        "for activations");
                lb_free(ctx->act[b]);
                ctx->act[b] = np;
                ctx->act_stride[b] = need;
            }
        }
        const lb_mm_plan *pg = &P[LB_LINEAR_GATE], *pu = &P[LB_LINEAR_UP],
                         *pd = &P[LB_LINEAR_DOWN];
        const bool fused = pg->n_chunks == pu->n_chunks &&
                           pg->row_chunk == pu->row_chunk &&
                           !lb_lora_set_layer_active(&ctx->lora, l);
        ctx->stream[l] = fused && !ctx->hook.linear_input && pd->qact &&
                         !m->config.online_hadamard_down &&
                         !f16_rounded(ctx, pd) && pg->row_chunk % align == 0;
        if (fused)
            mlpc = LB_MAX(mlpc, (ctx->stream[l] ? 2 : 1) * (size_t)n * (size_t)pu->row_chunk);
        else
            full_up = true;
        full_gate |= !ctx->stream[l];
    }
    size_t have = ctx->mlpc_per_thread * (size_t)ctx->n_threads;
    if (mlpc * (size_t)ctx->n_threads > have) {
        LB_TRY(grow(&ctx->mlpc, &have, mlpc * (size_t)ctx->n_threads));
        ctx->mlpc_per_thread = mlpc;
    }
    const size_t cap = (size_t)ctx->cap;
    if (full_gate && (size_t)ctx->gate_cap < cap) {
        size_t h = (size_t)ctx->gate_cap * ff;
        LB_TRY(grow(&ctx->gate, &h, cap * ff));
        ctx->gate_cap = ctx->cap;
    }
    if (full_up && (size_t)ctx->up_cap < cap) {
        size_t h = (size_t)ctx->up_cap * ff;
        LB_TRY(grow(&ctx->up, &h, cap * ff));
        ctx->up_cap = ctx->cap;
    }
    return LB_OK;
}

/* A rotated checkpoint's online transform (config.online_hadamard_down):
 * built once, so that such a model never runs without it. */
static lb_status online_hadamard_ready(lb_context *ctx) {
    const lb_model_config *c = &ctx->m->config;
    if (!c->online_hadamard_down || ctx->had.n) return LB_OK;
    lb_status s = lb_hadamard_init(&ctx->had, c->intermediate_size);
    if (s != LB_OK)
        return lb_error_context(s, "online Hadamard on down_proj's input "
                                "(intermediate_size %d)",
                                (int)c->intermediate_size);
    ctx->had_tmp = lb_alloc((size_t)ctx->n_threads *
                            (size_t)c->intermediate_size * sizeof(float));
    if (!ctx->had_tmp) {
        lb_hadamard_free(&ctx->had);
        ctx->had.n = 0;
        return lb_set_error(LB_ERR_NOMEM, "context: out of memory");
    }
    return LB_OK;
}

/* Run layers [l0, l1) on hidden [n, dim] at positions pos.. */
static lb_status run_layers(lb_context *ctx, int l0, int l1, float *hidden,
                            int32_t n, int32_t pos, lb_layer_entry entry,
                            const float *src) {
    if (lb_model_config_is_ext(&ctx->m->config)) {
        if (entry != LB_LAYER_ENTRY_INPUT)
            return lb_set_error(LB_ERR_UNSUPPORTED, "forward: starting a "
                                "layer inside it is only implemented for "
                                "Llama/Mistral/Qwen2/Qwen3");
        if (ctx->m->config.online_hadamard_down)
            return lb_set_error(LB_ERR_UNSUPPORTED, "forward: an online "
                                "Hadamard on down_proj's input is only "
                                "implemented for Llama/Mistral/Qwen2/Qwen3");
        /* Gemma, Phi-3 longrope, MoE: forward_ext.c */
        const lb_ext_ctx x = {ctx->m, ctx->pool, ctx->k_cache, ctx->v_cache,
                              ctx->kv_type, ctx->n_ctx, ctx->hook, 0};
        return lb_ext_run_layers(&x, l0, l1, hidden, n, pos);
    }
    const lb_kernel_table *kt = lb_kernels_current();
    LB_TRY(online_hadamard_ready(ctx));
    LB_TRY(plan_layers(ctx, kt, l0, l1, n));
    rope_fill(ctx, pos + n);
    lb_steal_reset(ctx->ctr, ctx->n_ctr);
    fwd_job j;
    memset(&j, 0, sizeof j);
    j.ctx = ctx;
    j.kt = kt;
    j.hidden = hidden;
    j.n = n;
    j.pos = pos;
    j.layer0 = l0;
    j.layer1 = l1;
    j.entry = entry;
    j.src = src;
    atomic_init(&j.status, LB_OK);
    /* a layer on two threads costs ~10 us more on a 2-vCPU VM (Zen 5):
     * ~9 barriers of ~0.2 us, and the per-token steps (norms, RoPE, the
     * KV append) one thread does while the other waits; more than a
     * second thread saves on up to ~1.3 MB of weights per layer:
     * tinystories-656k decode at 2 threads, 110 KB (Q4_0) / 780 KB (F32)
     * per layer, 31.3k -> 52.9k / 21.9k -> 26.3k tokens/s with the layers
     * on one thread (`lowbit bench MODEL -p 0 -n
     * 256 -t 2`). Below 1 MiB of weights x tokens per layer (default of
     * ctx->layer_mt_min) the layers run on the caller alone. */
    const lb_model_config *c = &ctx->m->config;
    double work = (double)n * (double)lb_model_weight_bytes(ctx->m) /
                  (double)LB_MAX(c->n_layers, 1) * (l1 - l0);
    j.pool = work < ctx->layer_mt_min ? NULL : ctx->pool;
    lb_pool_run(j.pool, fwd_worker, &j);
    return (lb_status)atomic_load(&j.status);
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

static lb_status check_tokens(const lb_model *m, const int32_t *tokens,
                              int32_t n) {
    for (int32_t t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= m->config.vocab_size)
            return lb_set_error(LB_ERR_RANGE,
                                "forward: token id %d at index %d outside "
                                "[0, %d)",
                                (int)tokens[t], (int)t,
                                (int)m->config.vocab_size);
    return LB_OK;
}

lb_status lb_model_embed(lb_context *ctx, const int32_t *tokens, int32_t n,
                         float *hidden) {
    const lb_model *m = ctx->m;
    const int64_t dim = m->config.hidden_size;
    LB_TRY(check_tokens(m, tokens, n));
    for (int32_t t = 0; t < n; t++)
        LB_TRY(lb_model_dequant_row(m, &m->tok_embd, tokens[t],
                                    hidden + t * dim));
    if (m->config.embed_scale > 0) /* Gemma: * sqrt(hidden_size) */
        for (int64_t i = 0; i < (int64_t)n * dim; i++)
            hidden[i] *= m->config.embed_scale;
    return LB_OK;
}

lb_status lb_layer_forward(lb_context *ctx, int layer, float *hidden,
                           int32_t n, int32_t pos) {
    if (layer < 0 || layer >= ctx->m->config.n_layers)
        return lb_set_error(LB_ERR_RANGE, "layer_forward: layer %d outside "
                            "[0, %d)", layer, ctx->m->config.n_layers);
    LB_TRY(check_span(ctx, n, pos));
    LB_TRY(ensure_scratch(ctx, n));
    return run_layers(ctx, layer, layer + 1, hidden, n, pos,
                      LB_LAYER_ENTRY_INPUT, NULL);
}

lb_status lb_layer_forward_from(lb_context *ctx, int layer,
                                lb_layer_entry entry, const float *src,
                                float *hidden, int32_t n, int32_t pos) {
    if (layer < 0 || layer >= ctx->m->config.n_layers)
        return lb_set_error(LB_ERR_RANGE, "layer_forward_from: layer %d "
                            "outside [0, %d)", layer,
                            ctx->m->config.n_layers);
    if (entry < LB_LAYER_ENTRY_INPUT || entry > LB_LAYER_ENTRY_DOWN)
        return lb_set_error(LB_ERR_INVALID_ARG, "layer_forward_from: entry "
                            "%d unknown", (int)entry);
    if (!src && (entry == LB_LAYER_ENTRY_O || entry == LB_LAYER_ENTRY_DOWN))
        return lb_set_error(LB_ERR_INVALID_ARG, "layer_forward_from: entry "
                            "%d needs its input", (int)entry);
    LB_TRY(check_span(ctx, n, pos));
    LB_TRY(ensure_scratch(ctx, n));
    return run_layers(ctx, layer, layer + 1, hidden, n, pos, entry, src);
}

lb_status lb_layer_forward_mlp(lb_context *ctx, int layer, float *hidden,
                               int32_t n, int32_t pos) {
    return lb_layer_forward_from(ctx, layer, LB_LAYER_ENTRY_MLP, NULL, hidden,
                                 n, pos);
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
    if (ctx->f16_act && m->output.type == LB_TYPE_F16)
        for (int64_t i = 0; i < (int64_t)n * dim; i++)
            ctx->xn[i] = lb_f16_to_f32_inline(lb_f32_to_f16(ctx->xn[i]));
    /* small products run on this thread: waking the pool costs more */
    const bool small = (double)n * (double)m->output.nbytes < 65536.0;
    LB_TRY(lb_matmul(small ? NULL : ctx->pool, &m->output, ctx->xn, logits, n));
    const float cap = m->config.final_softcap;
    if (cap > 0) /* Gemma 2: logits = cap * tanh(logits / cap) */
        for (size_t i = 0; i < (size_t)n * (size_t)m->config.vocab_size; i++)
            logits[i] = tanhf(logits[i] / cap) * cap;
    return LB_OK;
}

lb_status lb_model_forward(lb_context *ctx, const int32_t *tokens,
                           int32_t n, int32_t pos, float *logits,
                           lb_logits_mode mode) {
    const lb_model *m = ctx->m;
    const int64_t dim = m->config.hidden_size;
    const size_t V = (size_t)m->config.vocab_size;
    LB_TRY(check_span(ctx, n, pos));
    if (mode != LB_LOGITS_NONE && !logits)
        return lb_set_error(LB_ERR_INVALID_ARG, "forward: logits_out is NULL");
    LB_TRY(check_tokens(m, tokens, n));
    ctx->n_past = pos; /* the cache from pos on is rewritten */
    /* passes of at most n_batch tokens (scratch is sized for n_batch) */
    const int32_t nb_max = LB_MAX(1, LB_MIN(ctx->n_batch, ctx->cap));
    lb_status s = LB_OK;
    for (int32_t t0 = 0; t0 < n && s == LB_OK; t0 += nb_max) {
        const int32_t nb = LB_MIN(nb_max, n - t0);
        /* x = embed_tokens[tokens]                             [nb, dim] */
        s = lb_model_embed(ctx, tokens + t0, nb, ctx->x);
        if (s == LB_OK)
            s = run_layers(ctx, 0, m->config.n_layers, ctx->x, nb, pos + t0,
                           LB_LAYER_ENTRY_INPUT, NULL);
        if (s != LB_OK) break;
        memcpy(ctx->toks + pos + t0, tokens + t0, (size_t)nb * sizeof *tokens);
        ctx->n_past = pos + t0 + nb;
        if (mode == LB_LOGITS_ALL)
            s = lb_model_output_logits(ctx, ctx->x, nb,
                                       logits + (size_t)t0 * V);
        else if (mode == LB_LOGITS_LAST && t0 + nb == n)
            s = lb_model_output_logits(ctx, ctx->x + (nb - 1) * dim, 1,
                                       logits);
    }
    if (s != LB_OK) ctx->n_past = pos;
    return s;
}
