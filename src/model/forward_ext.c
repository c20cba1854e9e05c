/*
 * The decoder layers of the issue-13 architectures (Gemma 2/3, Phi-3
 * longrope, Qwen3-MoE, Qwen2-MoE, Mixtral), run by forward.c's run_layers
 * when lb_model_config_is_ext. Follows transformers 5.12 eager attention in
 * float32:
 *   modeling_gemma2.py / modeling_gemma3.py: GemmaRMSNorm (1 + w, stored
 *     that way), q/k norm (Gemma 3), scaling = query_pre_attn_scalar^-0.5,
 *     attn soft-capping tanh(s / cap) * cap before the mask, sliding layers
 *     (layer_types; p - j < sliding_window), Gemma 3's local RoPE base on
 *     sliding layers, post-attention and pre/post-feedforward norms, GeGLU
 *     with gelu_pytorch_tanh;
 *   modeling_phi3.py + modeling_rope_utils.py _compute_longrope_parameters:
 *     inv_freq = 1 / (ext * theta^(2i/d)), cos/sin * attention_factor;
 *   modeling_qwen3_moe.py / modeling_qwen2_moe.py / modeling_mixtral.py:
 *     router logits = x Wr^T, softmax in f32, top-k, renormalised when
 *     norm_topk_prob, experts' outputs weighted and summed in expert order;
 *     Qwen2-MoE adds sigmoid(x . w_sg) * shared_expert(x).
 *
 * Layout per layer (hidden [n, dim], updated in place):
 *   xn = norm(hidden); q, k, v = xn W^T (+ b); q/k norm; RoPE; K/V -> cache
 *   att = softmax(cap(q K^T * scale) + mask) V          (pool over (t, h))
 *   o = att Wo^T; [post_attn_norm(o)]; hidden += o
 *   xn = norm(hidden); y = MLP(xn) or MoE(xn); [post_ffn_norm(y)]; hidden += y
 * MoE: tokens are grouped by expert, and each selected expert's three
 * matrices run once over its tokens (prefill and batched decode); a single
 * token reads only its top-k experts' weights.
 * Linears go through lb_matmul (any weight type with a kernel); the forward
 * hook sees the inputs of the dense linears (q, k, v, o, and gate, up, down
 * of dense MLP layers) in forward.c's order, and in a MoE layer the block's
 * input (post-attention norm output) as LB_LINEAR_GATE.
 */
#include "model/model_internal.h"
#include "lowbit/kernels.h"
#include "core/internal.h"
#include "kernels/kernels_internal.h"

#include <math.h>
#include <stdlib.h>

static float gelu_tanh(float x) {
    /* torch gelu(approximate='tanh') */
    const float kBeta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5);
    const float kKappa = 0.044715f;
    const float inner = kBeta * (x + kKappa * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

void lb_glu_act_mul(lb_hidden_act a, float *g, const float *u, int64_t n) {
    if (a == LB_ACT_SILU) { /* the kernel table's SwiGLU (forward.c's) */
        lb_kernels_current()->vec.silu_mul(g, u, n);
        return;
    }
    if (a == LB_ACT_GELU_TANH)
        for (int64_t i = 0; i < n; i++) g[i] = gelu_tanh(g[i]) * u[i];
    else
        for (int64_t i = 0; i < n; i++) g[i] = silu(g[i]) * u[i];
}

/* inv_freq [hd/2] of a layer: local (Gemma 3 sliding layers) or global. */
static void ext_inv_freq(const lb_model *m, int32_t n_ctx, bool local,
                         float *inv) {
    const lb_model_config *c = &m->config;
    const int half = c->head_dim / 2;
    const float dim = (float)c->head_dim;
    if (local && c->rope_local_theta > 0) {
        const float base = (float)c->rope_local_theta;
        for (int i = 0; i < half; i++)
            inv[i] = 1.0f / powf(base, (float)(2 * i) / dim);
        return;
    }
    if (c->rope_scaling == LB_ROPE_SCALING_LONGROPE) {
        const float base = (float)c->rope_theta;
        const float *ext = n_ctx > c->rope_original_max_position_embeddings
                               ? c->rope_long_factor
                               : c->rope_short_factor;
        for (int i = 0; i < half; i++)
            inv[i] = 1.0f / (ext[i] * powf(base, (float)(2 * i) / dim));
        return;
    }
    lb_model_rope_inv_freq(m, inv);
}

typedef struct att_job {
    const lb_ext_ctx *x;
    int l;
    const float *q; /* [n, nh*hd] */
    float *att;     /* [n, nh*hd] */
    int32_t n;
    const int32_t *seq, *pos; /* per token; seq NULL: one sequence */
    float *scores;  /* [nth, att_scratch] */
} att_job;

static size_t att_scratch(const lb_model_config *c) {
    const int G = c->n_heads / LB_MAX(c->n_kv_heads, 1);
    return lb_attn_scratch_floats(G, c->head_dim);
}

/* One unit per (token, KV head) with its G query heads (attention.c, with
 * soft-capping between the scores and the softmax). */
static void att_worker(void *arg, int ith, int nth) {
    att_job *j = arg;
    const lb_model_config *c = &j->x->m->config;
    const lb_vec_kernels *vec = &lb_kernels_current()->vec;
    const int hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    const int G = nh / nkv;
    const bool swa = lb_model_config_layer_swa(c, j->l);
    const bool f16 = j->x->kv_type == LB_TYPE_F16;
    float *scr = j->scores + (size_t)ith * att_scratch(c);
    size_t u0, u1;
    lb_split_range((size_t)j->n * (size_t)nkv, ith, nth, &u0, &u1);
    for (size_t u = u0; u < u1; u++) {
        const int32_t t = (int32_t)(u / (size_t)nkv);
        const int kvh = (int)(u % (size_t)nkv);
        const int32_t p = j->pos[t];
        int32_t j0 = 0;
        if (swa && p - c->sliding_window + 1 > 0) j0 = p - c->sliding_window + 1;
        const size_t row0 =
            (((size_t)j->l * nkv + kvh) * (size_t)j->x->n_ctx +
             (j->seq ? (size_t)j->seq[t] * (j->x->seq_stride / (size_t)hd) : 0)) *
            (size_t)hd;
        const lb_attn_unit au = {
            .q = j->q + ((size_t)t * nh + (size_t)kvh * G) * hd,
            .out = j->att + ((size_t)t * nh + (size_t)kvh * G) * hd,
            .k_cache = j->x->k_cache, .v_cache = j->x->v_cache, .row0 = row0,
            .f16 = f16, .j0 = j0, .p = p, .G = G, .hd = hd,
            .scale = c->attn_scale > 0 ? c->attn_scale : 1.0f / sqrtf((float)hd),
            .softcap = c->attn_softcap};
        lb_attn_unit_run(vec, &au, scr);
    }
}

/* lb_matmul on the pool only when the product is big enough to pay for
 * waking (and pinning) the workers; small ones run on this thread. */
static lb_status mm(const lb_ext_ctx *x, const lb_tensor *W, const float *X,
                    float *Y, int64_t n) {
    const bool big = (double)n * (double)W->nbytes >= 262144.0;
    return lb_matmul(big ? x->pool : NULL, W, X, Y, n);
}

/* q, k, v = xn Wq^T, xn Wk^T, xn Wv^T in one pool job (one wake-up and
 * barrier instead of three): forward.c's plans, activations quantized on
 * this thread, the three products' chunks split over the threads. Results
 * do not depend on the split, so they equal three lb_matmul calls. */
typedef struct qkv_job {
    lb_mm_plan pl[3];
    const void *A[3];
    float *Y[3];
} qkv_job;

static void qkv_worker(void *arg, int ith, int nth) {
    qkv_job *j = arg;
    const int64_t total = j->pl[0].n_chunks + j->pl[1].n_chunks +
                          j->pl[2].n_chunks;
    size_t u0, u1;
    lb_split_range((size_t)total, ith, nth, &u0, &u1);
    for (size_t u = u0; u < u1; u++) {
        int64_t c = (int64_t)u;
        int i = 0;
        while (c >= j->pl[i].n_chunks) c -= j->pl[i++].n_chunks;
        lb_mm_plan_chunk(&j->pl[i], j->A[i], j->Y[i], (size_t)j->pl[i].out, c);
    }
}

static lb_status mm(const lb_ext_ctx *x, const lb_tensor *W, const float *X,
                    float *Y, int64_t n);

static lb_status qkv(const lb_ext_ctx *x, const lb_layer_weights *L,
                     const float *xn, int64_t n, float *q, float *k, float *v) {
    const lb_tensor *W[3] = {&L->w[LB_LINEAR_Q], &L->w[LB_LINEAR_K],
                             &L->w[LB_LINEAR_V]};
    float *Y[3] = {q, k, v};
    double bytes = 0;
    for (int i = 0; i < 3; i++) bytes += (double)W[i]->nbytes;
    const int nth = x->pool ? lb_pool_size(x->pool) : 1;
    qkv_job j;
    memset(&j, 0, sizeof j);
    bool fused = nth > 1 && (double)n * bytes >= 262144.0;
    for (int i = 0; fused && i < 3; i++)
        fused = lb_mm_plan_make(&j.pl[i], lb_kernels_current(), W[i], n, nth) ==
                LB_OK;
    if (!fused) {
        for (int i = 0; i < 3; i++) LB_TRY(mm(x, W[i], xn, Y[i], n));
        return LB_OK;
    }
    void *buf[3] = {NULL, NULL, NULL};
    lb_status s = LB_OK;
    for (int i = 0; i < 3 && s == LB_OK; i++) {
        j.Y[i] = Y[i];
        const size_t ab = lb_mm_plan_act_bytes(&j.pl[i]);
        if (!ab) {
            j.A[i] = xn;
            continue;
        }
        buf[i] = lb_alloc(ab);
        if (!buf[i]) {
            s = lb_set_error(LB_ERR_NOMEM, "forward: out of memory");
            break;
        }
        lb_mm_plan_quantize(&j.pl[i], xn, buf[i], 0, n);
        j.A[i] = buf[i];
    }
    if (s == LB_OK) lb_pool_run(x->pool, qkv_worker, &j);
    for (int i = 0; i < 3; i++) lb_free(buf[i]);
    return s;
}

static lb_status hook(const lb_ext_ctx *x, int l, lb_linear_id w,
                      const float *X, int32_t n, int64_t in) {
    if (!x->hook.linear_input) return LB_OK;
    return x->hook.linear_input(x->hook.user, l, w, X, n, in);
}

/* Dense MLP or shared expert: y [n, dim] = down(act(gate x) * up x). */
static lb_status mlp(const lb_ext_ctx *x, int l, const lb_tensor *g,
                     const lb_tensor *u, const lb_tensor *d, const float *xn,
                     int32_t n, float *gb, float *ub, float *y, bool hooks) {
    const lb_model_config *c = &x->m->config;
    const int64_t ff = g->shape[0], dim = c->hidden_size;
    if (hooks) {
        LB_TRY(hook(x, l, LB_LINEAR_GATE, xn, n, dim));
        LB_TRY(hook(x, l, LB_LINEAR_UP, xn, n, dim));
    }
    LB_TRY(mm(x, g, xn, gb, n));
    LB_TRY(mm(x, u, xn, ub, n));
    lb_glu_act_mul(c->hidden_act, gb, ub, (int64_t)n * ff);
    if (hooks) LB_TRY(hook(x, l, LB_LINEAR_DOWN, gb, n, ff));
    return mm(x, d, gb, y, n);
}

/* Top-k of softmax(logits[E]) (ties to the lower index, as torch.topk on
 * CPU), weights renormalised when norm. */
void lb_moe_route(const float *logits, int E, int k, bool norm, int *idx,
                  float *w, float *prob) {
    float mx = logits[0];
    for (int e = 1; e < E; e++) mx = logits[e] > mx ? logits[e] : mx;
    float sum = 0;
    for (int e = 0; e < E; e++) {
        prob[e] = expf(logits[e] - mx);
        sum += prob[e];
    }
    for (int e = 0; e < E; e++) prob[e] /= sum;
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int q = 0; q < i; q++) taken |= idx[q] == e;
            if (!taken && (best < 0 || prob[e] > prob[best])) best = e;
        }
        idx[i] = best;
        w[i] = prob[best];
    }
    if (norm) {
        float s = 0;
        for (int i = 0; i < k; i++) s += w[i];
        for (int i = 0; i < k; i++) w[i] /= s;
    }
}

typedef struct ext_buf {
    float *xn, *q, *k, *v, *att, *o, *g, *u, *y, *xe, *ye, *router, *prob,
        *wsel, *scores, *cs, *sn;
    int *sel, *tok_of, *slot_of;
} ext_buf;

static lb_status moe(const lb_ext_ctx *x, int l, const float *xn, int32_t n,
                     ext_buf *b, float *y) {
    const lb_model *m = x->m;
    const lb_model_config *c = &m->config;
    const lb_layer_weights *L = &m->layers[l];
    const int E = c->n_experts, K = c->n_experts_used;
    const int64_t dim = c->hidden_size, ff = c->moe_ff;
    /* the MoE block's input, reported as the MLP's (the quantizer's
     * expert calibration starts from it) */
    LB_TRY(hook(x, l, LB_LINEAR_GATE, xn, n, dim));
    /* router [n, E] */
    LB_TRY(mm(x, &L->ffn_gate_inp, xn, b->router, n));
    for (int32_t t = 0; t < n; t++)
        lb_moe_route(b->router + (size_t)t * E, E, K, c->norm_topk_prob,
              b->sel + (size_t)t * K, b->wsel + (size_t)t * K, b->prob);
    memset(y, 0, (size_t)n * (size_t)dim * sizeof(float));
    /* expert by expert (ascending, HF's summation order): gather its
     * tokens, run gate/up/down once over them, scatter-add */
    for (int e = 0; e < E; e++) {
        int32_t ne = 0;
        for (int32_t t = 0; t < n; t++)
            for (int i = 0; i < K; i++)
                if (b->sel[(size_t)t * K + i] == e) {
                    b->tok_of[ne] = t;
                    b->slot_of[ne] = i;
                    memcpy(b->xe + (size_t)ne * dim, xn + (size_t)t * dim,
                           (size_t)dim * sizeof(float));
                    ne++;
                }
        if (!ne) continue;
        const lb_tensor *W = L->exp + 3 * e;
        LB_TRY(mm(x, &W[0], b->xe, b->g, ne));
        LB_TRY(mm(x, &W[1], b->xe, b->u, ne));
        lb_glu_act_mul(c->hidden_act, b->g, b->u, (int64_t)ne * ff);
        LB_TRY(mm(x, &W[2], b->g, b->ye, ne));
        for (int32_t r = 0; r < ne; r++) {
            const int32_t t = b->tok_of[r];
            const float w = b->wsel[(size_t)t * K + b->slot_of[r]];
            float *yt = y + (size_t)t * dim;
            const float *src = b->ye + (size_t)r * dim;
            for (int64_t i = 0; i < dim; i++) yt[i] += src[i] * w;
        }
    }
    if (c->shared_ff > 0) {
        /* y += sigmoid(xn . w_sg) * shared_expert(xn) */
        LB_TRY(mlp(x, l, &L->shexp[0], &L->shexp[1], &L->shexp[2], xn, n,
                   b->g, b->u, b->ye, false));
        const float *wg = L->shexp_gate_inp.data;
        for (int32_t t = 0; t < n; t++) {
            const float *xt = xn + (size_t)t * dim;
            float d = 0;
            for (int64_t i = 0; i < dim; i++) d += xt[i] * wg[i];
            const float s = 1.0f / (1.0f + expf(-d));
            float *yt = y + (size_t)t * dim;
            const float *src = b->ye + (size_t)t * dim;
            for (int64_t i = 0; i < dim; i++) yt[i] += s * src[i];
        }
    }
    return LB_OK;
}

static void free_bufs(ext_buf *b) {
    float **f[] = {&b->xn, &b->q, &b->k, &b->v, &b->att, &b->o, &b->g, &b->u,
                   &b->y, &b->xe, &b->ye, &b->router, &b->prob, &b->wsel,
                   &b->scores, &b->cs, &b->sn};
    for (size_t i = 0; i < LB_ARRAY_LEN(f); i++) lb_free(*f[i]);
    lb_free(b->sel);
    lb_free(b->tok_of);
    lb_free(b->slot_of);
}

static lb_status alloc_bufs(const lb_ext_ctx *x, int32_t n, ext_buf *b) {
    const lb_model_config *c = &x->m->config;
    memset(b, 0, sizeof *b);
    const size_t N = (size_t)n, dim = (size_t)c->hidden_size,
                 qd = (size_t)c->n_heads * (size_t)c->head_dim,
                 kvd = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    size_t ff = (size_t)c->intermediate_size;
    ff = LB_MAX(ff, (size_t)c->moe_ff);
    ff = LB_MAX(ff, (size_t)c->shared_ff);
    const size_t K = (size_t)LB_MAX(c->n_experts_used, 1),
                 E = (size_t)LB_MAX(c->n_experts, 1);
    const size_t half = (size_t)c->head_dim / 2;
    const int nth = lb_pool_size(x->pool);
    /* a token reaches an expert at most once: NK rows bound every group */
    b->xn = lb_alloc(N * dim * 4);
    b->q = lb_alloc(N * qd * 4);
    b->k = lb_alloc(N * kvd * 4);
    b->v = lb_alloc(N * kvd * 4);
    b->att = lb_alloc(N * qd * 4);
    b->o = lb_alloc(N * dim * 4);
    b->g = lb_alloc(N * ff * 4);
    b->u = lb_alloc(N * ff * 4);
    b->y = lb_alloc(N * dim * 4);
    b->xe = lb_alloc(N * dim * 4);
    b->ye = lb_alloc(N * dim * 4);
    b->router = lb_alloc(N * E * 4);
    b->prob = lb_alloc(E * 4);
    b->wsel = lb_alloc(N * K * 4);
    b->scores = lb_alloc((size_t)LB_MAX(nth, 1) * att_scratch(c) * 4);
    b->cs = lb_alloc(2 * N * half * 4);
    b->sn = lb_alloc(2 * N * half * 4);
    b->sel = lb_alloc(N * K * sizeof(int));
    b->tok_of = lb_alloc(N * sizeof(int));
    b->slot_of = lb_alloc(N * sizeof(int));
    if (!b->xn || !b->q || !b->k || !b->v || !b->att || !b->o || !b->g ||
        !b->u || !b->y || !b->xe || !b->ye || !b->router || !b->prob ||
        !b->wsel || !b->scores || !b->cs || !b->sn || !b->sel || !b->tok_of ||
        !b->slot_of) {
        free_bufs(b);
        return lb_set_error(LB_ERR_NOMEM, "forward: out of memory for %d "
                            "tokens", (int)n);
    }
    return LB_OK;
}

/* cos/sin [n][half] for positions pos[t] of one RoPE kind, times af. */
static void tables(const float *inv, int half, const int32_t *pos, int32_t n,
                   float af, float *cs, float *sn) {
    for (int32_t t = 0; t < n; t++)
        for (int i = 0; i < half; i++) {
            const float f = inv[i] * (float)pos[t];
            cs[(size_t)t * half + i] = cosf(f) * af;
            sn[(size_t)t * half + i] = sinf(f) * af;
        }
}

static lb_status layer(const lb_ext_ctx *x, int l, float *hidden, int32_t n,
                       const int32_t *seq, const int32_t *pos, ext_buf *b) {
    const lb_model *m = x->m;
    const lb_model_config *c = &m->config;
    const lb_layer_weights *L = &m->layers[l];
    const int64_t dim = c->hidden_size, hd = c->head_dim, nh = c->n_heads,
                  nkv = c->n_kv_heads, qd = nh * hd, kvd = nkv * hd;
    const float eps = c->rms_norm_eps;
    const int half = (int)(hd / 2);
    const lb_vec_kernels *vec = &lb_kernels_current()->vec;

    for (int32_t t = 0; t < n; t++)
        lb_rmsnorm(b->xn + t * dim, hidden + t * dim, L->attn_norm.data, dim, eps);
    for (int w = LB_LINEAR_Q; w <= LB_LINEAR_V; w++)
        LB_TRY(hook(x, l, (lb_linear_id)w, b->xn, n, dim));
    LB_TRY(qkv(x, L, b->xn, n, b->q, b->k, b->v));
    /* RoPE tables of this layer's kind (cs/sn hold global then local) */
    const bool local = c->rope_local_theta > 0 && lb_model_config_layer_swa(c, l);
    const float *cs = b->cs + (local ? (size_t)n * half : 0);
    const float *sn = b->sn + (local ? (size_t)n * half : 0);
    for (int32_t t = 0; t < n; t++) {
        float *qt = b->q + t * qd, *kt = b->k + t * kvd, *vt = b->v + t * kvd;
        if (L->bq.data) vec->add(qt, L->bq.data, qd);
        if (L->bk.data) vec->add(kt, L->bk.data, kvd);
        if (L->bv.data) vec->add(vt, L->bv.data, kvd);
        for (int64_t h = 0; h < nh; h++) {
            float *qh = qt + h * hd;
            if (c->qk_norm) lb_rmsnorm(qh, qh, L->q_norm.data, hd, eps);
            lb_rope_apply(qh, cs + (size_t)t * half, sn + (size_t)t * half, (int)hd,
                     c->rope_mode);
        }
        for (int64_t h = 0; h < nkv; h++) {
            float *kh = kt + h * hd;
            if (c->qk_norm) lb_rmsnorm(kh, kh, L->k_norm.data, hd, eps);
            lb_rope_apply(kh, cs + (size_t)t * half, sn + (size_t)t * half, (int)hd,
                     c->rope_mode);
            const size_t row =
                (((size_t)l * nkv + h) * (size_t)x->n_ctx + (size_t)pos[t]) *
                    (size_t)hd +
                (seq ? (size_t)seq[t] * x->seq_stride : 0);
            if (x->kv_type == LB_TYPE_F16) {
                uint16_t *kc = (uint16_t *)x->k_cache + row,
                         *vc = (uint16_t *)x->v_cache + row;
                for (int64_t i = 0; i < hd; i++) {
                    kc[i] = lb_f32_to_f16(kh[i]);
                    vc[i] = lb_f32_to_f16(vt[h * hd + i]);
                }
            } else {
                memcpy((float *)x->k_cache + row, kh, (size_t)hd * 4);
                memcpy((float *)x->v_cache + row, vt + h * hd, (size_t)hd * 4);
            }
        }
    }
    att_job aj = {x, l, b->q, b->att, n, seq, pos, b->scores};
    double work = 0;
    for (int32_t t = 0; t < n; t++) work += (double)(pos[t] + 1);
    lb_pool_run(work * (double)qd < 65536.0 ? NULL : x->pool, att_worker, &aj);
    LB_TRY(hook(x, l, LB_LINEAR_O, b->att, n, qd));
    LB_TRY(mm(x, &L->w[LB_LINEAR_O], b->att, b->o, n));
    for (int32_t t = 0; t < n; t++) {
        float *ot = b->o + t * dim, *ht = hidden + t * dim;
        if (L->post_attn_norm.data)
            lb_rmsnorm(ot, ot, L->post_attn_norm.data, dim, eps);
        vec->add(ht, ot, dim);
        lb_rmsnorm(b->xn + t * dim, ht, L->ffn_norm.data, dim, eps);
    }
    if (L->exp)
        LB_TRY(moe(x, l, b->xn, n, b, b->y));
    else
        LB_TRY(mlp(x, l, &L->w[LB_LINEAR_GATE], &L->w[LB_LINEAR_UP],
                   &L->w[LB_LINEAR_DOWN], b->xn, n, b->g, b->u, b->y, true));
    for (int32_t t = 0; t < n; t++) {
        float *yt = b->y + t * dim, *ht = hidden + t * dim;
        if (L->post_ffn_norm.data)
            lb_rmsnorm(yt, yt, L->post_ffn_norm.data, dim, eps);
        vec->add(ht, yt, dim);
    }
    return LB_OK;
}

lb_status lb_ext_run_layers(const lb_ext_ctx *x, int l0, int l1,
                            float *hidden, int32_t n, int32_t pos) {
    int32_t *p = lb_alloc((size_t)n * sizeof *p);
    if (!p) return lb_set_error(LB_ERR_NOMEM, "forward: out of memory");
    for (int32_t t = 0; t < n; t++) p[t] = pos + t;
    lb_status s = lb_ext_run_layers_multi(x, l0, l1, hidden, n, NULL, p);
    lb_free(p);
    return s;
}

lb_status lb_ext_run_layers_multi(const lb_ext_ctx *x, int l0, int l1,
                                  float *hidden, int32_t n,
                                  const int32_t *seq, const int32_t *pos) {
    const lb_model *m = x->m;
    const lb_model_config *c = &m->config;
    ext_buf b;
    LB_TRY(alloc_bufs(x, n, &b));
    const int half = c->head_dim / 2;
    float *inv = lb_alloc((size_t)half * sizeof(float));
    if (!inv) {
        free_bufs(&b);
        return lb_set_error(LB_ERR_NOMEM, "forward: out of memory");
    }
    const float af = c->rope_scaling == LB_ROPE_SCALING_LONGROPE &&
                             c->rope_attn_factor > 0
                         ? (float)c->rope_attn_factor
                         : 1.0f;
    ext_inv_freq(m, x->n_ctx, false, inv);
    tables(inv, half, pos, n, af, b.cs, b.sn);
    if (c->rope_local_theta > 0) {
        ext_inv_freq(m, x->n_ctx, true, inv);
        tables(inv, half, pos, n, 1.0f, b.cs + (size_t)n * half,
               b.sn + (size_t)n * half);
    }
    lb_free(inv);
    lb_status s = LB_OK;
    for (int l = l0; l < l1 && s == LB_OK; l++)
        s = layer(x, l, hidden, n, seq, pos, &b);
    free_bufs(&b);
    return s;
}
