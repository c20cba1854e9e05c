/*
 * Residual-stream rotation (QuaRot / SpinQuant's R1) of a Llama / Mistral /
 * Qwen2 / Qwen3 model in memory, before quantization (see
 * lowbit/quantize.h lb_model_rotate_hadamard):
 *
 *   1. every RMSNorm weight g that feeds the residual stream's readers is
 *      folded into them: W[:, c] *= g[c] for q/k/v (input_layernorm),
 *      gate/up (post_attention_layernorm), lm_head (model.norm); the norms
 *      become all ones (RMSNorm then commutes with an orthogonal map,
 *      ||x Q|| = ||x||);
 *   2. Q = T D: T the orthogonal Hadamard transform of order
 *      n = hidden_size of lowbit/hadamard.h (H_p / sqrt(n), Sylvester, when
 *      n is a power of two; (H_m (x) H_p) / sqrt(n) with a Paley H_m
 *      otherwise, e.g. 896 = 28 * 32, 1536 = 12 * 128, 3584 = 28 * 128),
 *      D = diag(s) random signs from the seed (splitmix64, bit 63 of each
 *      draw: s_c = -1 when set);
 *   3. the stream x becomes x Q: embedding rows e -> e Q, readers
 *      W -> W Q (q, k, v, gate, up, lm_head: rows), writers W -> Q^T W
 *      (o_proj, down_proj: columns). Both are v -> Q^T v = D T^T v on a
 *      row or a column, so rows and columns take the same map.
 *   Tied embeddings are untied (lm_head carries model.norm's weight).
 *   Arithmetic in double, results stored F32.
 *
 * Qwen3's q_norm / k_norm act on head vectors after q/k_proj and are left
 * as they are; q/k/v biases belong to the readers' outputs and are kept.
 *
 * Issue-13 layouts: Phi-3's fused qkv_proj / gate_up_proj are rows of
 * readers (lowbit holds them as q/k/v and gate/up row views), rotated row
 * by row like the others. MoE layers (Qwen3-MoE, Qwen2-MoE, Mixtral): the
 * router (mlp.gate / block_sparse_moe.gate [E, dim]), every expert's
 * gate/up and the shared expert's gate/up (Qwen2-MoE) and its
 * shared_expert_gate [dim] read post_attention_layernorm's output: its
 * weight is folded into them and they get W Q; every expert's down_proj
 * and the shared expert's down_proj write the stream: Q^T W. The router's
 * logits x Wr^T are unchanged, so the routing is too. Gemma 2/3 are
 * refused: their post_attention_layernorm / post_feedforward_layernorm
 * normalise the sublayer's output before the residual add, so the
 * stream's rotation would have to pass through an RMSNorm with a
 * per-channel weight (diag(g) Q != Q diag(g)), and their norms store
 * 1 + w.
 */
#include "lowbit/quantize.h"
#include "lowbit/hadamard.h"
#include "lowbit/kernels.h"
#include "lowbit/quants.h"
#include "core/internal.h"
#include "model/model_internal.h"

#include <math.h>
#include <stdio.h>

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The residual-stream rotation Q = T D: T the order-n transform of
 * lowbit/hadamard.h (the Sylvester matrix / sqrt(n) when n is a power of
 * two), D = diag(s). */
typedef struct rot_ctx {
    const lb_hadamard *h;
    const double *s; /* D's signs [n] */
    double *tmp;     /* n doubles of scratch for lb_hadamard_apply_f64 */
} rot_ctx;

/* v <- Q^T v = D T^T v (= (v^T Q)^T), in double. Power-of-two n: the
 * in-place butterfly (T symmetric), the bits rotations had before other
 * orders were supported. */
static void rot(double *v, const rot_ctx *q, int64_t n) {
    if (q->h->m == 1) {
        for (int64_t h = 1; h < n; h *= 2)
            for (int64_t i = 0; i < n; i += 2 * h)
                for (int64_t j = i; j < i + h; j++) {
                    const double a = v[j], b = v[j + h];
                    v[j] = a + b;
                    v[j + h] = a - b;
                }
        const double k = 1.0 / sqrt((double)n);
        for (int64_t c = 0; c < n; c++) v[c] *= q->s[c] * k;
        return;
    }
    lb_hadamard_apply_f64(q->h, v, true, q->tmp);
    for (int64_t c = 0; c < n; c++) v[c] *= q->s[c];
}

/* f32 copy [rows, cols] of a 2-D tensor (lb_alloc'd) */
static lb_status to_f32(const lb_tensor *t, const char *what, float **out) {
    *out = NULL;
    const int64_t rows = t->shape[0], cols = t->shape[1];
    size_t rb;
    if (!t->data || t->n_dims != 2 || !lb_row_size(t->type, cols, &rb))
        return lb_set_error(LB_ERR_INVALID_ARG, "rotate: %s is not a 2-D "
                            "tensor of a known type", what);
    float *W = lb_alloc((size_t)(rows * cols) * sizeof(float));
    if (!W) return lb_set_error(LB_ERR_NOMEM, "rotate: out of memory (%s)",
                                what);
    for (int64_t r = 0; r < rows; r++) {
        lb_status s = lb_tensor_dequant_row(t, r, W + r * cols);
        if (s != LB_OK) {
            lb_free(W);
            return lb_error_context(s, "rotate: %s", what);
        }
    }
    *out = W;
    return LB_OK;
}

static lb_tensor f32_view(const lb_tensor *like, float *data) {
    lb_tensor t = *like;
    t.type = LB_TYPE_F32;
    t.data = data;
    t.nbytes = (size_t)lb_tensor_nelements(like) * sizeof(float);
    return t;
}

/* rows of W [rows, n] (optionally scaled by g per column first) <- row Q */
static void rot_rows(float *W, int64_t rows, int64_t n, const float *g,
                     const rot_ctx *s, double *buf) {
    for (int64_t r = 0; r < rows; r++) {
        float *w = W + r * n;
        for (int64_t c = 0; c < n; c++)
            buf[c] = (double)w[c] * (g ? (double)g[c] : 1.0);
        rot(buf, s, n);
        for (int64_t c = 0; c < n; c++) w[c] = (float)buf[c];
    }
}

/* columns of W [n, cols] <- Q^T column */
static void rot_cols(float *W, int64_t n, int64_t cols, const rot_ctx *s,
                     double *buf) {
    for (int64_t c = 0; c < cols; c++) {
        for (int64_t r = 0; r < n; r++) buf[r] = W[r * cols + c];
        rot(buf, s, n);
        for (int64_t r = 0; r < n; r++) W[r * cols + c] = (float)buf[r];
    }
}

/* a norm weight tensor set to ones (new owned F32 buffer) */
static lb_status norm_ones(lb_model *m, lb_tensor *t, const char *what) {
    if (!t->data || t->type != LB_TYPE_F32)
        return lb_set_error(LB_ERR_INVALID_ARG, "rotate: %s is not F32",
                            what);
    const int64_t n = lb_tensor_nelements(t);
    float *o = lb_alloc((size_t)n * sizeof(float));
    if (!o) return lb_set_error(LB_ERR_NOMEM, "rotate: out of memory");
    for (int64_t i = 0; i < n; i++) o[i] = 1.0f;
    lb_status s = lb_model_builder_own(m, o);
    if (s != LB_OK) {
        lb_free(o);
        return s;
    }
    t->data = o;
    return LB_OK;
}

/* A reader (rows, with norm g folded) or writer (columns) tensor that is
 * not one of the layer's seven linears (router, experts, shared expert):
 * replaced by a rotated F32 copy owned by the model. A 1-D reader [n]
 * (shared_expert_gate) is one row. */
static lb_status rot_tensor(lb_model *m, lb_tensor *t, bool writer,
                            const float *g, const rot_ctx *q, double *buf,
                            int64_t n, const char *what) {
    lb_tensor t2 = *t;
    if (t->n_dims == 1) {
        t2.n_dims = 2;
        t2.shape[0] = 1;
        t2.shape[1] = t->shape[0];
    }
    if (!t->data || t2.n_dims != 2 || (writer ? t2.shape[0] : t2.shape[1]) != n)
        return lb_set_error(LB_ERR_INVALID_ARG, "rotate: %s does not "
                            "read/write the hidden size %lld", what,
                            (long long)n);
    float *W = NULL;
    LB_TRY(to_f32(&t2, what, &W));
    if (writer)
        rot_cols(W, n, t2.shape[1], q, buf);
    else
        rot_rows(W, t2.shape[0], n, g, q, buf);
    lb_status st = lb_model_builder_own(m, W);
    if (st != LB_OK) {
        lb_free(W);
        return st;
    }
    *t = f32_view(t, W);
    return LB_OK;
}

/* The MoE block of layer l (router, experts, shared expert). */
static lb_status rot_moe(lb_model *m, int l, const rot_ctx *q, double *buf) {
    const lb_model_config *cfg = &m->config;
    lb_layer_weights *L = &m->layers[l];
    const int64_t n = cfg->hidden_size;
    const float *g = L->ffn_norm.data;
    char what[128];
    snprintf(what, sizeof what, "model.layers.%d router", l);
    lb_status st = rot_tensor(m, &L->ffn_gate_inp, false, g, q, buf, n, what);
    for (int e = 0; e < cfg->n_experts && st == LB_OK; e++)
        for (int k = 0; k < 3 && st == LB_OK; k++) {
            snprintf(what, sizeof what, "model.layers.%d expert %d %s", l, e,
                     k == 0 ? "gate_proj" : k == 1 ? "up_proj" : "down_proj");
            st = rot_tensor(m, &L->exp[3 * e + k], k == 2, k == 2 ? NULL : g,
                            q, buf, n, what);
        }
    if (L->shexp[0].data) {
        for (int k = 0; k < 3 && st == LB_OK; k++) {
            snprintf(what, sizeof what, "model.layers.%d shared_expert %s", l,
                     k == 0 ? "gate_proj" : k == 1 ? "up_proj" : "down_proj");
            st = rot_tensor(m, &L->shexp[k], k == 2, k == 2 ? NULL : g, q,
                            buf, n, what);
        }
        if (st == LB_OK && L->shexp_gate_inp.data) {
            snprintf(what, sizeof what, "model.layers.%d shared_expert_gate",
                     l);
            st = rot_tensor(m, &L->shexp_gate_inp, false, g, q, buf, n, what);
        }
    }
    return st;
}

lb_status lb_model_rotate_hadamard(lb_model *m, uint64_t seed) {
    if (!m) return lb_set_error(LB_ERR_INVALID_ARG, "rotate: NULL model");
    const lb_model_config *cfg = &m->config;
    const int64_t n = cfg->hidden_size;
    if (n < 2)
        return lb_set_error(LB_ERR_INVALID_ARG, "rotate: hidden_size %lld",
                            (long long)n);
    if (cfg->arch == LB_ARCH_GEMMA2 || cfg->arch == LB_ARCH_GEMMA3)
        return lb_set_error(LB_ERR_UNSUPPORTED, "rotate: %s is not supported: "
                            "its post_attention_layernorm and "
                            "post_feedforward_layernorm normalise each "
                            "sublayer's output before the residual add, and "
                            "an orthogonal rotation of the residual stream "
                            "does not commute with their per-channel weights "
                            "(diag(g) Q != Q diag(g))", cfg->arch_name);
    lb_hadamard hd;
    lb_status hs = lb_hadamard_init(&hd, n);
    if (hs != LB_OK)
        return lb_error_context(hs, "rotate: hidden_size %lld", (long long)n);
    lb_hadamard_free(&hd);
    if (!m->output_norm.data || m->output_norm.type != LB_TYPE_F32 ||
        lb_tensor_nelements(&m->output_norm) != n)
        return lb_set_error(LB_ERR_INVALID_ARG, "rotate: model.norm.weight "
                            "is not F32 [%lld]", (long long)n);
    double *s = lb_alloc((size_t)n * sizeof(double));
    double *tmp = lb_alloc((size_t)n * sizeof(double));
    lb_hadamard h = {0};
    int64_t wmax = LB_MAX(n, (int64_t)cfg->intermediate_size);
    wmax = LB_MAX(wmax, (int64_t)cfg->n_heads * cfg->head_dim);
    double *buf = lb_alloc((size_t)wmax * sizeof(double));
    lb_status st = LB_OK;
    if (!s || !buf || !tmp) {
        st = lb_set_error(LB_ERR_NOMEM, "rotate: out of memory");
        goto done;
    }
    if ((st = lb_hadamard_init(&h, n)) != LB_OK) goto done;
    uint64_t state = seed;
    for (int64_t c = 0; c < n; c++)
        s[c] = (splitmix64(&state) >> 63) ? -1.0 : 1.0;
    const rot_ctx q = {&h, s, tmp};
    char what[96];
    for (int l = 0; l < cfg->n_layers && st == LB_OK; l++) {
        lb_layer_weights *L = &m->layers[l];
        if (!L->attn_norm.data || L->attn_norm.type != LB_TYPE_F32 ||
            !L->ffn_norm.data || L->ffn_norm.type != LB_TYPE_F32) {
            st = lb_set_error(LB_ERR_INVALID_ARG, "rotate: layer %d norms "
                              "are not F32", l);
            break;
        }
        /* a MoE layer has no dense MLP: its block below */
        const bool moe = L->exp != NULL;
        for (int k = 0; k < LB_LINEAR_COUNT && st == LB_OK; k++) {
            lb_tensor *t = &L->w[k];
            if (moe && k >= LB_LINEAR_GATE) continue;
            snprintf(what, sizeof what, "model.layers.%d.%s.weight", l,
                     lb_linear_name((lb_linear_id)k));
            const bool writer = k == LB_LINEAR_O || k == LB_LINEAR_DOWN;
            if ((writer ? t->shape[0] : t->shape[1]) != n) {
                st = lb_set_error(LB_ERR_INVALID_ARG, "rotate: %s does not "
                                  "read/write the hidden size %lld", what,
                                  (long long)n);
                break;
            }
            float *W = NULL;
            st = to_f32(t, what, &W);
            if (st != LB_OK) break;
            if (writer) {
                rot_cols(W, n, t->shape[1], &q, buf);
            } else {
                const float *g = (k == LB_LINEAR_GATE || k == LB_LINEAR_UP)
                                     ? L->ffn_norm.data
                                     : L->attn_norm.data;
                rot_rows(W, t->shape[0], n, g, &q, buf);
            }
            lb_tensor v = f32_view(t, W);
            st = lb_model_set_linear(m, l, (lb_linear_id)k, &v, W);
            if (st != LB_OK) lb_free(W);
        }
        if (st == LB_OK && moe) st = rot_moe(m, l, &q, buf);
        if (st == LB_OK) st = norm_ones(m, &L->attn_norm, "input_layernorm");
        if (st == LB_OK)
            st = norm_ones(m, &L->ffn_norm, "post_attention_layernorm");
    }
    /* lm_head from its current weights (the embeddings when tied), with
     * model.norm folded; then the embeddings */
    float *Wo = NULL, *E = NULL;
    if (st == LB_OK) st = to_f32(&m->output, "lm_head.weight", &Wo);
    if (st == LB_OK) st = to_f32(&m->tok_embd, "embed_tokens.weight", &E);
    if (st == LB_OK && (m->output.shape[1] != n || m->tok_embd.shape[1] != n))
        st = lb_set_error(LB_ERR_INVALID_ARG, "rotate: embeddings / lm_head "
                          "are not [V, %lld]", (long long)n);
    if (st == LB_OK) {
        rot_rows(Wo, m->output.shape[0], n, m->output_norm.data, &q, buf);
        rot_rows(E, m->tok_embd.shape[0], n, NULL, &q, buf);
        st = lb_model_builder_own(m, Wo);
        if (st == LB_OK) {
            m->output = f32_view(&m->output, Wo);
            Wo = NULL;
            m->config.tie_word_embeddings = false;
            st = lb_model_builder_own(m, E);
        }
        if (st == LB_OK) {
            m->tok_embd = f32_view(&m->tok_embd, E);
            E = NULL;
            st = norm_ones(m, &m->output_norm, "model.norm");
        }
    }
    lb_free(Wo);
    lb_free(E);
done:
    lb_free(s);
    lb_free(tmp);
    lb_free(buf);
    lb_hadamard_free(&h);
    return st;
}

/* QuaRot's R4: down_proj W [dim, ff] -> W T^T (row r becomes T w_r), the
 * forward then applies T to down_proj's input (config.online_hadamard_down) */
lb_status lb_model_rotate_online_down(lb_model *m) {
    if (!m) return lb_set_error(LB_ERR_INVALID_ARG, "rotate: NULL model");
    const lb_model_config *cfg = &m->config;
    if (lb_model_config_is_ext(cfg) || cfg->arch >= LB_ARCH_GEMMA2)
        return lb_set_error(LB_ERR_UNSUPPORTED, "rotate: online Hadamard on "
                            "down_proj's input: %s is not supported (Llama, "
                            "Mistral, Qwen2, Qwen3)", cfg->arch_name);
    if (cfg->online_hadamard_down)
        return lb_set_error(LB_ERR_INVALID_ARG, "rotate: down_proj's input "
                            "is already rotated online");
    const int64_t ff = cfg->intermediate_size;
    lb_hadamard h;
    lb_status st = lb_hadamard_init(&h, ff);
    if (st != LB_OK)
        return lb_error_context(st, "rotate: intermediate_size %lld",
                                (long long)ff);
    double *buf = lb_alloc((size_t)ff * sizeof(double));
    double *tmp = lb_alloc((size_t)ff * sizeof(double));
    if (!buf || !tmp) st = lb_set_error(LB_ERR_NOMEM, "rotate: out of memory");
    char what[96];
    for (int l = 0; l < cfg->n_layers && st == LB_OK; l++) {
        lb_tensor *t = &m->layers[l].w[LB_LINEAR_DOWN];
        snprintf(what, sizeof what, "model.layers.%d.mlp.down_proj.weight", l);
        if (t->n_dims != 2 || t->shape[1] != ff) {
            st = lb_set_error(LB_ERR_INVALID_ARG, "rotate: %s is not [*, %lld]",
                              what, (long long)ff);
            break;
        }
        float *W = NULL;
        st = to_f32(t, what, &W);
        if (st != LB_OK) break;
        for (int64_t r = 0; r < t->shape[0]; r++) {
            float *w = W + r * ff;
            for (int64_t c = 0; c < ff; c++) buf[c] = w[c];
            lb_hadamard_apply_f64(&h, buf, false, tmp);
            for (int64_t c = 0; c < ff; c++) w[c] = (float)buf[c];
        }
        lb_tensor v = f32_view(t, W);
        st = lb_model_set_linear(m, l, LB_LINEAR_DOWN, &v, W);
        if (st != LB_OK) lb_free(W);
    }
    if (st == LB_OK) m->config.online_hadamard_down = true;
    lb_free(buf);
    lb_free(tmp);
    lb_hadamard_free(&h);
    return st;
}
