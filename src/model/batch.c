/*
 * Multi-sequence forward (lowbit/batch.h): per-sequence KV caches, shared
 * weight passes. The per-token arithmetic follows forward.c (transformers
 * 5.12 eager attention, float32); the difference is that every token
 * carries its own sequence id and position.
 */
#include "lowbit/batch.h"
#include "lowbit/kernels.h"
#include "lowbit/lora.h"
#include "model/model_internal.h"
#include "kernels/kernels_internal.h"
#include "core/internal.h"

#include <math.h>
#include <stdlib.h>

struct lb_multi_ctx {
    const lb_model *m;
    int32_t n_seq, n_ctx;
    lb_pool *pool;
    bool own_pool;
    int n_threads;

    /* KV caches: element ((((s * n_layers + l) * nkv + h) * n_ctx + p) * hd
     * + i) for sequence s, layer l, KV head h, position p. */
    float *k_cache, *v_cache;
    size_t seq_stride; /* floats per sequence: n_layers * nkv * n_ctx * hd */
    int32_t *n_past;   /* [n_seq] */
    int32_t *toks;     /* [n_seq][n_ctx] cached token ids */
    float *rope_cos, *rope_sin; /* [n_ctx][hd/2] */

    /* scratch for up to cap tokens */
    int32_t cap;
    float *x, *xn, *q, *k, *v, *att, *o, *gate, *up; /* as in forward.c */
    float *sel;     /* [cap, dim] hidden rows of the selected tokens     */
    int32_t *p0;    /* [n_seq] first position of each sequence, or -1    */
    int32_t *nxt;   /* [n_seq] next expected position (validation)       */
    float *scores;  /* [n_threads, lb_attn_scratch_floats] */
    /* Attention and elementwise helpers: the start-up kernel table's
     * (forward.c's too; LB_FORCE_REF=1 gives the scalar reference) */
    const lb_vec_kernels *vec;
    /* LoRA adapters per sequence ([n_seq], allocated on first use) */
    lb_lora_set *seq_lora;
    /* config.online_hadamard_down: T (built on the first forward) and
     * scratch [ff] */
    lb_hadamard had;
    float *had_tmp;
};

lb_status lb_multi_set_loras(lb_multi_ctx *mc, int32_t seq,
                             const lb_lora_set *set) {
    if (seq < 0 || seq >= mc->n_seq)
        return lb_set_error(LB_ERR_RANGE, "multi: sequence %d outside [0, %d)",
                            (int)seq, (int)mc->n_seq);
    if (set && set->n > 0 && lb_model_config_is_ext(&mc->m->config))
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "multi: LoRA adapters on %s are not supported "
                            "(forward_ext.c applies none)",
                            mc->m->config.arch_name);
    if (set && (set->n < 0 || set->n > LB_LORA_MAX_SET))
        return lb_set_error(LB_ERR_INVALID_ARG, "multi: %d adapters (at most %d)",
                            set->n, LB_LORA_MAX_SET);
    for (int k = 0; set && k < set->n; k++)
        if (lb_lora_n_layers(set->a[k]) != mc->m->config.n_layers)
            return lb_set_error(LB_ERR_INVALID_ARG, "multi: adapter %s has %d "
                                "layers, the model %d", lb_lora_name(set->a[k]),
                                lb_lora_n_layers(set->a[k]),
                                mc->m->config.n_layers);
    if (!mc->seq_lora) {
        if (!set || set->n == 0) return LB_OK;
        mc->seq_lora = calloc((size_t)mc->n_seq, sizeof *mc->seq_lora);
        if (!mc->seq_lora) return lb_set_error(LB_ERR_NOMEM, "multi: out of memory");
    }
    if (set)
        mc->seq_lora[seq] = *set;
    else
        memset(&mc->seq_lora[seq], 0, sizeof mc->seq_lora[seq]);
    return LB_OK;
}

/* LoRA deltas of linear `which` of layer l, each token with its sequence's
 * adapters: Y[t] += s B (A X[t]). */
static void mlora(const lb_multi_ctx *mc, int l, lb_linear_id which,
                  const float *X, int64_t ldx, float *Y, int64_t ldy, int32_t n,
                  const int32_t *seq) {
    if (!mc->seq_lora) return;
    for (int32_t t = 0; t < n; t++)
        lb_lora_set_apply_rows(&mc->seq_lora[seq[t]], l, which, X, (size_t)ldx,
                               Y, (size_t)ldy, (size_t)t, (size_t)t + 1);
}

lb_multi_params lb_multi_default_params(void) {
    lb_multi_params p;
    memset(&p, 0, sizeof p);
    p.n_seq = 1;
    return p;
}

static void free_scratch(lb_multi_ctx *mc) {
    float **f[] = {&mc->x, &mc->xn, &mc->q, &mc->k,    &mc->v,
                   &mc->att, &mc->o, &mc->gate, &mc->up, &mc->sel};
    for (size_t i = 0; i < LB_ARRAY_LEN(f); i++) {
        lb_free(*f[i]);
        *f[i] = NULL;
    }
    mc->cap = 0;
}

static lb_status ensure_scratch(lb_multi_ctx *mc, int32_t n) {
    if (n <= mc->cap) return LB_OK;
    const lb_model_config *c = &mc->m->config;
    free_scratch(mc);
    size_t t = (size_t)n, dim = (size_t)c->hidden_size,
           qd = (size_t)c->n_heads * (size_t)c->head_dim,
           kvd = (size_t)c->n_kv_heads * (size_t)c->head_dim,
           ff = (size_t)c->intermediate_size;
    mc->x = lb_alloc(t * dim * sizeof(float));
    mc->xn = lb_alloc(t * dim * sizeof(float));
    mc->q = lb_alloc(t * qd * sizeof(float));
    mc->k = lb_alloc(t * kvd * sizeof(float));
    mc->v = lb_alloc(t * kvd * sizeof(float));
    mc->att = lb_alloc(t * qd * sizeof(float));
    mc->o = lb_alloc(t * dim * sizeof(float));
    mc->gate = lb_alloc(t * ff * sizeof(float));
    mc->up = lb_alloc(t * ff * sizeof(float));
    mc->sel = lb_alloc(t * dim * sizeof(float));
    if (!mc->x || !mc->xn || !mc->q || !mc->k || !mc->v || !mc->att ||
        !mc->o || !mc->gate || !mc->up || !mc->sel) {
        free_scratch(mc);
        return lb_set_error(LB_ERR_NOMEM,
                            "multi: out of memory for scratch of %d tokens",
                            (int)n);
    }
    mc->cap = n;
    return LB_OK;
}

lb_status lb_multi_create(const lb_model *m, const lb_multi_params *params,
                          lb_multi_ctx **out) {
    *out = NULL;
    lb_multi_params p = params ? *params : lb_multi_default_params();
    const lb_model_config *c = &m->config;
    if (p.n_seq < 1 || p.n_seq > 4096)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "multi: n_seq %d outside [1, 4096]", (int)p.n_seq);
    int32_t n_ctx = p.n_ctx;
    if (n_ctx <= 0)
        n_ctx = LB_MIN(c->max_position_embeddings, 4096);
    if (n_ctx <= 0 || n_ctx > (1 << 24))
        return lb_set_error(LB_ERR_INVALID_ARG, "multi: n_ctx %d invalid",
                            (int)n_ctx);
    lb_multi_ctx *mc = calloc(1, sizeof *mc);
    if (!mc) return lb_set_error(LB_ERR_NOMEM, "multi: out of memory");
    mc->m = m;
    mc->n_seq = p.n_seq;
    mc->n_ctx = n_ctx;
    mc->vec = &lb_kernels_current()->vec;
    lb_status s = LB_OK;
    if (p.pool) {
        mc->pool = p.pool;
    } else {
        mc->pool = lb_pool_create_ex(p.n_threads, LB_POOL_PIN_AUTO);
        mc->own_pool = true;
        if (!mc->pool) {
            s = lb_set_error(LB_ERR_NOMEM, "multi: cannot create thread pool");
            goto fail;
        }
    }
    mc->n_threads = lb_pool_size(mc->pool);
    size_t per_seq, total;
    if (!lb_mul_ok((size_t)c->n_layers * (size_t)c->n_kv_heads,
                   (size_t)n_ctx * (size_t)c->head_dim, &per_seq) ||
        !lb_mul_ok(per_seq, (size_t)p.n_seq, &total) ||
        total > SIZE_MAX / 8) {
        s = lb_set_error(LB_ERR_OVERFLOW, "multi: KV cache size overflows");
        goto fail;
    }
    mc->seq_stride = per_seq;
    /* not zeroed: only written positions are read, and untouched pages
     * cost no memory */
    mc->k_cache = lb_alloc(total * sizeof(float));
    mc->v_cache = lb_alloc(total * sizeof(float));
    if (!mc->k_cache || !mc->v_cache) {
        s = lb_set_error(LB_ERR_NOMEM,
                         "multi: out of memory for the KV caches (2 x %zu MiB "
                         "for %d sequences of n_ctx %d)",
                         total * 4 >> 20, (int)p.n_seq, (int)n_ctx);
        goto fail;
    }
    const int half = c->head_dim / 2;
    mc->n_past = calloc((size_t)p.n_seq, sizeof *mc->n_past);
    mc->p0 = malloc((size_t)p.n_seq * sizeof *mc->p0);
    mc->nxt = malloc((size_t)p.n_seq * sizeof *mc->nxt);
    mc->toks = lb_alloc((size_t)p.n_seq * (size_t)n_ctx * sizeof(int32_t));
    mc->rope_cos = lb_alloc((size_t)n_ctx * (size_t)half * sizeof(float));
    mc->rope_sin = lb_alloc((size_t)n_ctx * (size_t)half * sizeof(float));
    mc->scores = lb_alloc((size_t)mc->n_threads *
                          lb_attn_scratch_floats(c->n_heads / c->n_kv_heads,
                                                 c->head_dim) *
                          sizeof(float));
    float *inv = malloc((size_t)(half > 0 ? half : 1) * sizeof(float));
    if (!mc->n_past || !mc->p0 || !mc->nxt || !mc->toks || !mc->rope_cos ||
        !mc->rope_sin || !mc->scores || !inv) {
        free(inv);
        s = lb_set_error(LB_ERR_NOMEM, "multi: out of memory");
        goto fail;
    }
    /* cos/sin of (inv_freq * position) in float32, as forward.c */
    lb_model_rope_inv_freq(m, inv);
    lb_rope_tables(inv, half, 0, n_ctx, mc->rope_cos, mc->rope_sin);
    free(inv);
    s = ensure_scratch(mc, p.n_batch > 0 ? LB_MIN(p.n_batch, 1 << 16) : 512);
    if (s != LB_OK) goto fail;
    *out = mc;
    return LB_OK;
fail:
    lb_multi_free(mc);
    return s;
}

void lb_multi_free(lb_multi_ctx *mc) {
    if (!mc) return;
    free(mc->seq_lora);
    free_scratch(mc);
    lb_free(mc->k_cache);
    lb_free(mc->v_cache);
    free(mc->n_past);
    free(mc->p0);
    free(mc->nxt);
    lb_free(mc->toks);
    lb_free(mc->rope_cos);
    lb_free(mc->rope_sin);
    lb_free(mc->scores);
    lb_hadamard_free(&mc->had);
    lb_free(mc->had_tmp);
    if (mc->own_pool) lb_pool_free(mc->pool);
    free(mc);
}

int32_t lb_multi_n_seq(const lb_multi_ctx *mc) { return mc->n_seq; }
int32_t lb_multi_n_ctx(const lb_multi_ctx *mc) { return mc->n_ctx; }
lb_pool *lb_multi_pool(lb_multi_ctx *mc) { return mc->pool; }
const lb_model *lb_multi_model(const lb_multi_ctx *mc) { return mc->m; }

int32_t lb_multi_n_past(const lb_multi_ctx *mc, int32_t seq) {
    return seq >= 0 && seq < mc->n_seq ? mc->n_past[seq] : 0;
}

lb_status lb_multi_truncate(lb_multi_ctx *mc, int32_t seq, int32_t n) {
    if (seq < 0 || seq >= mc->n_seq)
        return lb_set_error(LB_ERR_RANGE, "multi: sequence %d outside [0, %d)",
                            (int)seq, (int)mc->n_seq);
    if (n < 0 || n > mc->n_past[seq])
        return lb_set_error(LB_ERR_RANGE,
                            "multi: truncate sequence %d to %d, but only %d "
                            "positions are cached",
                            (int)seq, (int)n, (int)mc->n_past[seq]);
    mc->n_past[seq] = n;
    return LB_OK;
}

int32_t lb_multi_cached_tokens(const lb_multi_ctx *mc, int32_t seq,
                               const int32_t **tokens) {
    if (seq < 0 || seq >= mc->n_seq) {
        if (tokens) *tokens = NULL;
        return 0;
    }
    if (tokens) *tokens = mc->toks + (size_t)seq * (size_t)mc->n_ctx;
    return mc->n_past[seq];
}

/* ------------------------------------------------------------------------ */
/* Per-token pieces                                                          */
/* ------------------------------------------------------------------------ */

static void add_bias(const lb_vec_kernels *vec, float *y, const lb_tensor *b,
                     int32_t n, int64_t d) {
    if (!b->data) return;
    for (int32_t t = 0; t < n; t++) vec->add(y + (size_t)t * d, b->data, d);
}

typedef struct mattn_job {
    lb_multi_ctx *mc;
    int layer;
    int32_t n;
    const int32_t *seq, *pos;
} mattn_job;

/* One (token, KV head) unit per step: the token's query heads that share
 * the KV head, against positions [j0, p] of its own sequence (causal,
 * sliding window), as the single-sequence forward computes them
 * (attention.c). */
static void mattn_worker(void *arg, int ith, int nth) {
    mattn_job *j = arg;
    lb_multi_ctx *mc = j->mc;
    const lb_model_config *c = &mc->m->config;
    const int hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    const int G = nh / nkv;
    const bool sliding = c->sliding_window > 0 &&
                         j->layer >= c->sliding_window_first_layer;
    float *scr = mc->scores + (size_t)ith * lb_attn_scratch_floats(G, hd);
    size_t b, e;
    lb_split_range((size_t)j->n * (size_t)nkv, ith, nth, &b, &e);
    for (size_t u = b; u < e; u++) {
        const int32_t t = (int32_t)(u / (size_t)nkv);
        const int kvh = (int)(u % (size_t)nkv);
        const int32_t p = j->pos[t];
        int32_t j0 = 0;
        if (sliding && p - c->sliding_window + 1 > 0)
            j0 = p - c->sliding_window + 1;
        const size_t base = (size_t)j->seq[t] * mc->seq_stride +
                            (((size_t)j->layer * nkv + kvh) * (size_t)mc->n_ctx) *
                                (size_t)hd;
        const lb_attn_unit au = {
            .q = mc->q + ((size_t)t * nh + (size_t)kvh * G) * hd,
            .out = mc->att + ((size_t)t * nh + (size_t)kvh * G) * hd,
            .k_cache = mc->k_cache, .v_cache = mc->v_cache, .row0 = base,
            .f16 = false,
            .j0 = j0, .p = p, .G = G, .hd = hd,
            .scale = 1.0f / sqrtf((float)hd), .softcap = 0.0f};
        lb_attn_unit_run(mc->vec, &au, scr);
    }
}

/* One decoder layer over the batch, hidden = mc->x [n, dim] in place. */
static lb_status mlayer(lb_multi_ctx *mc, int l, int32_t n,
                        const int32_t *seq, const int32_t *pos) {
    const lb_model_config *c = &mc->m->config;
    const lb_layer_weights *L = &mc->m->layers[l];
    const int64_t dim = c->hidden_size, hd = c->head_dim, nh = c->n_heads,
                  nkv = c->n_kv_heads, ff = c->intermediate_size;
    const int64_t qd = nh * hd, kvd = nkv * hd;
    const int half = (int)(hd / 2);
    lb_pool *pool = mc->pool;
    float *hidden = mc->x;

    /* xn = RMSNorm(hidden) * input_layernorm              [n, dim]     */
    for (int32_t t = 0; t < n; t++)
        lb_rmsnorm(mc->xn + t * dim, hidden + t * dim, L->attn_norm.data, dim,
                   c->rms_norm_eps);
    /* q [n, nh*hd], k, v [n, nkv*hd]: one pass over each weight */
    LB_TRY(lb_matmul(pool, &L->w[LB_LINEAR_Q], mc->xn, mc->q, n));
    LB_TRY(lb_matmul(pool, &L->w[LB_LINEAR_K], mc->xn, mc->k, n));
    LB_TRY(lb_matmul(pool, &L->w[LB_LINEAR_V], mc->xn, mc->v, n));
    mlora(mc, l, LB_LINEAR_Q, mc->xn, dim, mc->q, qd, n, seq);
    mlora(mc, l, LB_LINEAR_K, mc->xn, dim, mc->k, kvd, n, seq);
    mlora(mc, l, LB_LINEAR_V, mc->xn, dim, mc->v, kvd, n, seq);
    add_bias(mc->vec, mc->q, &L->bq, n, qd);
    add_bias(mc->vec, mc->k, &L->bk, n, kvd);
    add_bias(mc->vec, mc->v, &L->bv, n, kvd);
    /* per token: q/k norm, RoPE at its own position, K/V into its own
     * sequence's cache */
    for (int32_t t = 0; t < n; t++) {
        lb_qk_norm_rope(c, L, mc->q + t * qd, mc->k + t * kvd,
                        mc->rope_cos + (size_t)pos[t] * half,
                        mc->rope_sin + (size_t)pos[t] * half);
        for (int64_t h = 0; h < nkv; h++) {
            const float *kh = mc->k + (t * nkv + h) * hd;
            size_t row = (size_t)seq[t] * mc->seq_stride +
                         (((size_t)l * nkv + h) * mc->n_ctx + pos[t]) * hd;
            memcpy(mc->k_cache + row, kh, (size_t)hd * sizeof(float));
            memcpy(mc->v_cache + row, mc->v + (t * nkv + h) * hd,
                   (size_t)hd * sizeof(float));
        }
    }
    /* att = per-sequence causal attention                  [n, nh*hd]  */
    mattn_job aj = {mc, l, n, seq, pos};
    double work = 0;
    for (int32_t t = 0; t < n; t++) work += (double)(pos[t] + 1);
    work *= (double)nh * (double)hd;
    lb_pool_run(work < 65536.0 ? NULL : pool, mattn_worker, &aj);
    /* hidden += att Wo^T                                    [n, dim]     */
    LB_TRY(lb_matmul(pool, &L->w[LB_LINEAR_O], mc->att, mc->o, n));
    mlora(mc, l, LB_LINEAR_O, mc->att, qd, mc->o, dim, n, seq);
    mc->vec->add(hidden, mc->o, (int64_t)n * dim);
    /* MLP (SwiGLU) */
    for (int32_t t = 0; t < n; t++)
        lb_rmsnorm(mc->xn + t * dim, hidden + t * dim, L->ffn_norm.data, dim,
                   c->rms_norm_eps);
    LB_TRY(lb_matmul(pool, &L->w[LB_LINEAR_GATE], mc->xn, mc->gate, n));
    LB_TRY(lb_matmul(pool, &L->w[LB_LINEAR_UP], mc->xn, mc->up, n));
    mlora(mc, l, LB_LINEAR_GATE, mc->xn, dim, mc->gate, ff, n, seq);
    mlora(mc, l, LB_LINEAR_UP, mc->xn, dim, mc->up, ff, n, seq);
    mc->vec->silu_mul(mc->gate, mc->up, (int64_t)n * ff);
    if (c->online_hadamard_down) /* rotated checkpoint: h <- T h */
        mc->vec->hadamard(&mc->had, mc->gate, n, mc->had_tmp);
    LB_TRY(lb_matmul(pool, &L->w[LB_LINEAR_DOWN], mc->gate, mc->o, n));
    mlora(mc, l, LB_LINEAR_DOWN, mc->gate, ff, mc->o, dim, n, seq);
    mc->vec->add(hidden, mc->o, (int64_t)n * dim);
    return LB_OK;
}

lb_status lb_model_forward_multi(lb_multi_ctx *mc, const int32_t *tokens,
                                 const int32_t *seq_ids,
                                 const int32_t *positions, int32_t n,
                                 const uint8_t *want_logits,
                                 float *logits_out) {
    if (!mc || !tokens || !seq_ids || !positions)
        return lb_set_error(LB_ERR_INVALID_ARG, "forward_multi: NULL argument");
    if (n <= 0)
        return lb_set_error(LB_ERR_INVALID_ARG, "forward_multi: n %d <= 0",
                            (int)n);
    const lb_model *m = mc->m;
    const lb_model_config *c = &m->config;
    const int64_t dim = c->hidden_size;
    /* validate everything before touching any state: p0[s] = first
     * position of sequence s in the batch, nxt[s] = the next expected one */
    for (int32_t s = 0; s < mc->n_seq; s++) mc->p0[s] = -1;
    int32_t n_sel = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t s = seq_ids[i], p = positions[i];
        if (s < 0 || s >= mc->n_seq)
            return lb_set_error(LB_ERR_RANGE,
                                "forward_multi: token %d: sequence %d outside "
                                "[0, %d)",
                                (int)i, (int)s, (int)mc->n_seq);
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return lb_set_error(LB_ERR_RANGE,
                                "forward_multi: token %d: id %d outside [0, "
                                "%d)",
                                (int)i, (int)tokens[i], (int)c->vocab_size);
        if (p < 0 || p >= mc->n_ctx)
            return lb_set_error(LB_ERR_RANGE,
                                "forward_multi: token %d: position %d outside "
                                "n_ctx %d",
                                (int)i, (int)p, (int)mc->n_ctx);
        if (mc->p0[s] < 0) {
            if (p > mc->n_past[s])
                return lb_set_error(LB_ERR_RANGE,
                                    "forward_multi: sequence %d starts at "
                                    "position %d beyond its %d cached "
                                    "positions",
                                    (int)s, (int)p, (int)mc->n_past[s]);
            mc->p0[s] = p;
        } else if (p != mc->nxt[s]) {
            return lb_set_error(LB_ERR_RANGE,
                                "forward_multi: token %d: sequence %d "
                                "position %d, expected %d (consecutive)",
                                (int)i, (int)s, (int)p, (int)mc->nxt[s]);
        }
        mc->nxt[s] = p + 1;
        if (!want_logits || want_logits[i]) n_sel++;
    }
    if (n_sel > 0 && !logits_out)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "forward_multi: logits_out is NULL");
    LB_TRY(ensure_scratch(mc, n));
    /* the cache of each sequence in the batch is rewritten from p0 on */
    for (int32_t s = 0; s < mc->n_seq; s++)
        if (mc->p0[s] >= 0) mc->n_past[s] = mc->p0[s];
    /* x = embed_tokens[tokens]                                 [n, dim] */
    for (int32_t i = 0; i < n; i++)
        LB_TRY(lb_model_dequant_row(m, &m->tok_embd, tokens[i],
                                    mc->x + (size_t)i * dim));
    if (c->embed_scale > 0) /* Gemma: * sqrt(hidden_size) */
        for (size_t i = 0; i < (size_t)n * (size_t)dim; i++)
            mc->x[i] *= c->embed_scale;
    if (c->online_hadamard_down && !mc->had.n) {
        if (lb_model_config_is_ext(c))
            return lb_set_error(LB_ERR_UNSUPPORTED, "forward_multi: an online "
                                "Hadamard on down_proj's input is only "
                                "implemented for Llama/Mistral/Qwen2/Qwen3");
        lb_status hs = lb_hadamard_init(&mc->had, c->intermediate_size);
        if (hs != LB_OK)
            return lb_error_context(hs, "online Hadamard on down_proj's input");
        mc->had_tmp = lb_alloc((size_t)c->intermediate_size * sizeof(float));
        if (!mc->had_tmp) {
            lb_hadamard_free(&mc->had);
            mc->had.n = 0;
            return lb_set_error(LB_ERR_NOMEM, "forward_multi: out of memory");
        }
    }
    if (lb_model_config_is_ext(c)) {
        /* Gemma, Phi-3 longrope, MoE: forward_ext.c's layers, each token
         * on its own sequence's cache */
        lb_ext_ctx x;
        memset(&x, 0, sizeof x);
        x.m = m;
        x.pool = mc->pool;
        x.k_cache = mc->k_cache;
        x.v_cache = mc->v_cache;
        x.kv_type = LB_TYPE_F32;
        x.n_ctx = mc->n_ctx;
        x.seq_stride = mc->seq_stride;
        LB_TRY(lb_ext_run_layers_multi(&x, 0, c->n_layers, mc->x, n, seq_ids,
                                       positions));
    } else {
        for (int l = 0; l < c->n_layers; l++)
            LB_TRY(mlayer(mc, l, n, seq_ids, positions));
    }
    for (int32_t i = 0; i < n; i++)
        mc->toks[(size_t)seq_ids[i] * (size_t)mc->n_ctx + positions[i]] =
            tokens[i];
    for (int32_t s = 0; s < mc->n_seq; s++)
        if (mc->p0[s] >= 0) mc->n_past[s] = mc->nxt[s];
    if (n_sel == 0) return LB_OK;
    /* logits of the selected rows: final RMSNorm + lm_head     [n_sel, V] */
    int32_t r = 0;
    for (int32_t i = 0; i < n; i++) {
        if (want_logits && !want_logits[i]) continue;
        lb_rmsnorm(mc->sel + (size_t)r * dim, mc->x + (size_t)i * dim,
                   m->output_norm.data, dim, c->rms_norm_eps);
        r++;
    }
    LB_TRY(lb_matmul(mc->pool, &m->output, mc->sel, logits_out, n_sel));
    const float cap = c->final_softcap;
    if (cap > 0) /* Gemma 2: logits = cap * tanh(logits / cap) */
        for (size_t i = 0; i < (size_t)n_sel * (size_t)c->vocab_size; i++)
            logits_out[i] = tanhf(logits_out[i] / cap) * cap;
    return LB_OK;
}
