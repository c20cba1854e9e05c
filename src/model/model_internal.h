/*
 * model_internal.h — the model builder shared by every loader (HF
 * safetensors today; GGUF and GPTQ checkpoints later). Not installed.
 *
 * A loader:
 *   1. fills an lb_model_config (lb_model_config_parse, or by hand from
 *      GGUF keys; set cfg.rope_mode = LB_ROPE_NORM for llama.cpp-permuted
 *      q/k rows) and calls lb_model_builder_new;
 *   2. keeps its backing storage alive with lb_model_builder_on_free (e.g.
 *      the safetensors/GGUF mapping) or lb_model_builder_own (lb_alloc'd
 *      buffers);
 *   3. calls lb_model_builder_set for every tensor by role — the builder
 *      checks the shape against the config (error "NAME: expected [a, b],
 *      got [c, d]"), copies the name, converts norms/biases to F32 and
 *      copies data that is not aligned for its type;
 *   4. optionally sets lb_model_builder_set_dequant_row for embedding types
 *      other than F32/F16/BF16 (quantized token embeddings in GGUF);
 *   5. calls lb_model_builder_finish, which ties lm_head/embeddings when
 *      the config says so and reports any missing tensor.
 * On any error the loader calls lb_model_free on the half-built model.
 */
#ifndef LB_MODEL_INTERNAL_H
#define LB_MODEL_INTERNAL_H

#include "lowbit/gguf.h"
#include "lowbit/model.h"

typedef enum lb_tensor_role {
    LB_ROLE_TOK_EMBD = 0, /* [V, dim]                        */
    LB_ROLE_OUTPUT_NORM,  /* [dim]                           */
    LB_ROLE_OUTPUT,       /* [V, dim]                        */
    LB_ROLE_ATTN_NORM,    /* per layer from here: [dim]      */
    LB_ROLE_Q,            /* [nh*hd, dim]                    */
    LB_ROLE_K,            /* [nkv*hd, dim]                   */
    LB_ROLE_V,            /* [nkv*hd, dim]                   */
    LB_ROLE_O,            /* [dim, nh*hd]                    */
    LB_ROLE_GATE,         /* [ff, dim]                       */
    LB_ROLE_UP,           /* [ff, dim]                       */
    LB_ROLE_DOWN,         /* [dim, ff]                       */
    LB_ROLE_Q_BIAS,       /* [nh*hd]                         */
    LB_ROLE_K_BIAS,       /* [nkv*hd]                        */
    LB_ROLE_V_BIAS,       /* [nkv*hd]                        */
    LB_ROLE_Q_NORM,       /* [hd]                            */
    LB_ROLE_K_NORM,       /* [hd]                            */
    LB_ROLE_FFN_NORM,     /* [dim]                           */
    /* issue-13 roles (lb_role_used is false for them: loaders of the
     * older architectures skip them; lb_role_used_in decides per layer) */
    LB_ROLE_POST_ATTN_NORM, /* [dim] Gemma                     */
    LB_ROLE_POST_FFN_NORM,  /* [dim] Gemma                     */
    LB_ROLE_FFN_GATE_INP,   /* [n_experts, dim] MoE router      */
    LB_ROLE_SHEXP_GATE,     /* [shared_ff, dim]                */
    LB_ROLE_SHEXP_UP,       /* [shared_ff, dim]                */
    LB_ROLE_SHEXP_DOWN,     /* [dim, shared_ff]                */
    LB_ROLE_SHEXP_GATE_INP, /* [dim]                           */
    LB_ROLE_EXP_GATE,       /* [moe_ff, dim] per expert (lb_model_builder_set_expert) */
    LB_ROLE_EXP_UP,         /* [moe_ff, dim]                   */
    LB_ROLE_EXP_DOWN,       /* [dim, moe_ff]                   */
    LB_ROLE_COUNT
} lb_tensor_role;

/* true for roles that belong to a layer (layer index needed). */
static inline bool lb_role_is_layer(lb_tensor_role r) {
    return r >= LB_ROLE_ATTN_NORM;
}

/* false for the optional roles cfg does not have: q/k/v biases without
 * attention_bias, q/k norms without qk_norm. */
static inline bool lb_role_used(const lb_model_config *cfg, lb_tensor_role r) {
    if (r == LB_ROLE_Q_BIAS || r == LB_ROLE_K_BIAS || r == LB_ROLE_V_BIAS)
        return cfg->attention_bias;
    if (r == LB_ROLE_Q_NORM || r == LB_ROLE_K_NORM) return cfg->qk_norm;
    return r < LB_ROLE_POST_ATTN_NORM;
}

/* Whether layer l of cfg has role r (dense MLP roles only in dense layers,
 * expert roles only in MoE layers, Gemma post norms, shared experts). */
bool lb_role_used_in(const lb_model_config *cfg, lb_tensor_role r, int l);

/* Set expert e's gate/up/down (LB_ROLE_EXP_*) of MoE layer `layer`; the
 * shape is checked as lb_model_builder_set does (errors name t->name).
 * LB_ERR_RANGE for a dense layer or e outside [0, n_experts). */
lb_status lb_model_builder_set_expert(lb_model *m, lb_tensor_role role,
                                      int layer, int e, const lb_tensor *t);

/* Short description of a role ("q_proj", "input_layernorm"...). */
const char *lb_role_name(lb_tensor_role role);

/* Expected shape of a role under cfg: *n_dims 1 or 2, shape outermost
 * first. */
void lb_role_shape(const lb_model_config *cfg, lb_tensor_role role,
                   int *n_dims, int64_t shape[2]);

/* Converts one row of n elements of `type` at src to f32. */
typedef lb_status (*lb_dequant_row_fn)(lb_type type, const void *src,
                                       float *dst, int64_t n);

/* Empty model for cfg (copied); layers allocated, every tensor absent. */
lb_status lb_model_builder_new(const lb_model_config *cfg, lb_model **out);

/* Set the tensor of `role` (layer ignored for global roles). The view is
 * copied; t->data must stay valid for the model's lifetime (own it or
 * register its owner). Errors: LB_ERR_FORMAT (shape; names t->name),
 * LB_ERR_UNSUPPORTED (norm/bias type not F32/F16/BF16, or a weight whose
 * row is not a whole number of blocks), LB_ERR_RANGE (layer). */
lb_status lb_model_builder_set(lb_model *m, lb_tensor_role role, int layer,
                               const lb_tensor *t);

/* The model frees `buf` (from lb_alloc) in lb_model_free. On failure to
 * record it the buffer is freed and LB_ERR_NOMEM returned. */
lb_status lb_model_builder_own(lb_model *m, void *buf);

/* Call fn(p) in lb_model_free (after all buffers), in reverse order of
 * registration. On failure fn(p) is called at once and LB_ERR_NOMEM
 * returned. */
lb_status lb_model_builder_on_free(lb_model *m, void (*fn)(void *), void *p);

void lb_model_builder_set_dequant_row(lb_model *m, lb_dequant_row_fn fn);

struct lb_mapped_file;
/* Record that the model's tensors may view mf, a read-only file mapping
 * (lb_map_file; a private copy, mf->copy, is not recorded), so that
 * lb_model_release_layer may drop its pages. mf must outlive the model.
 * Errors: LB_ERR_NOMEM. */
lb_status lb_model_builder_add_mapping(lb_model *m,
                                       const struct lb_mapped_file *mf);

/* Give the resident pages of tensor t back to the kernel when t views a
 * recorded file mapping (lb_mapped_file_release): t stays valid, a later
 * read faults its pages in again from the file. A tensor elsewhere (owned
 * buffer, private copy, swapped-in replacement) is left alone. Advice:
 * never fails. */
void lb_model_release_tensor(const lb_model *m, const lb_tensor *t);
/* lb_model_release_tensor for every tensor of layer `layer` (nothing for
 * a layer out of range). */
void lb_model_release_layer(const lb_model *m, int layer);

/* Tie embeddings if configured, then check every required tensor is set
 * (LB_ERR_NOT_FOUND naming the layer and role). */
lb_status lb_model_builder_finish(lb_model *m);

/* Repack (lb_tensor_repack, in place) the weights lb_matmul streams: every
 * layer linear, shared expert and MoE expert (each expert view on its
 * own), and the output, those for which owned(u, t) is true (NULL: all;
 * the caller's private, writable copy). A tied tok_embd follows the
 * output's layout. Tensors of non-X16 types are left as they are. */
lb_status lb_model_repack_weights(lb_model *m, bool (*owned)(const void *u, const lb_tensor *t),
                                  const void *u);

/* Convert one embedding row to f32 (builtin F32/F16/BF16, else the hook). */
lb_status lb_model_dequant_row(const lb_model *m, const lb_tensor *t,
                               int64_t row, float *dst);

/* RoPE tables for positions [p0, p1): cos_out/sin_out[pos * half + i] =
 * cos/sin(inv_freq[i] * pos) in float32 (LlamaRotaryEmbedding; attention
 * scaling 1). inv_freq [half] from lb_model_rope_inv_freq. (forward.c) */
void lb_rope_tables(const float *inv_freq, int half, int32_t p0, int32_t p1,
                    float *cos_out, float *sin_out);

/* RoPE on one head vector x [hd] (hd <= 4096) with the tables c, s
 * [hd / 2] of its position, in place. LB_ROPE_NEOX: HF's rotate_half.
 * LB_ROPE_NORM (rows permuted by convert_hf_to_gguf): the adjacent pairs
 * rotate and the result is stored in HF's order, so later sums over the
 * vector (attention's q.k) run in the HF path's order. (forward.c) */
void lb_rope_apply(float *x, const float *c, const float *s, int hd,
                   lb_rope_mode mode);

/* One token's queries q [n_heads * head_dim] and keys k [n_kv_heads *
 * head_dim] of layer L, in place: Qwen3's per-head RMSNorm (q_norm,
 * k_norm) when c->qk_norm, then RoPE (c->rope_mode) with the tables cs, sn
 * [head_dim / 2] of the token's position. Shared by the single- and
 * multi-sequence forward passes (forward.c). */
void lb_qk_norm_rope(const lb_model_config *c, const lb_layer_weights *L,
                     float *q, float *k, const float *cs, const float *sn);

/* One attention unit (attention.c): the G query heads q [G, hd] sharing
 * one KV head, against its cached rows j0..p:
 *   out [G, hd] = softmax(softcap(scale * q K^T)) V
 * (softcap <= 0: none). k_cache, v_cache: the whole caches (f16 or f32
 * elements); row0: the element index of row 0 of this (layer, KV head)
 * (and sequence), rows of hd elements. Shared by forward.c, batch.c and
 * forward_ext.c. */
typedef struct lb_attn_unit {
    const float *q;
    float *out;
    const void *k_cache, *v_cache;
    size_t row0;
    bool f16;
    int32_t j0, p;
    int G, hd;
    float scale, softcap;
} lb_attn_unit;

/* Floats of scratch one lb_attn_unit_run call needs (a multiple of 16). */
size_t lb_attn_scratch_floats(int G, int hd);

struct lb_vec_kernels;
/* Run u with the kernel table's vector helpers; scratch:
 * lb_attn_scratch_floats(u->G, u->hd) floats, not shared with another
 * thread. */
void lb_attn_unit_run(const struct lb_vec_kernels *vec, const lb_attn_unit *u,
                      float *scratch);

/* The issue-13 architectures' decoder layers from a safetensors set
 * (load_hf_ext.c): norms, biases, routers from st; every linear weight
 * [out, in] from linear(user, prefix, out, in, &t) with its module name
 * ("model.layers.0.self_attn.qkv_proj", "...mlp.experts.3.down_proj"), or
 * from st's prefix.weight when linear is NULL (the HF loader; the GPTQ
 * loader converts prefix.qweight). */
struct lb_safetensors;
typedef lb_status (*lb_ext_linear_fn)(void *user, const char *prefix,
                                      int64_t out, int64_t in, lb_tensor *t);
lb_status lb_model_load_layers_ext(lb_model *m, const struct lb_safetensors *st,
                                   const char *dir,
                                   const lb_model_load_opts *opts,
                                   lb_ext_linear_fn linear, void *user);
lb_status lb_model_gemma_norms_plus_one(lb_model *m);

/* The body of a quantized-checkpoint loader's lb_ext_linear_fn (load_fp8.c,
 * load_bnb.c): st's prefix.weight, converted by conv(user, name, t, out, in,
 * d) when is_q(t), else taken as it is if F32/F16/BF16 (*n_dense counted);
 * errors name label and the tensor, `kinds` the dtypes accepted. */
typedef lb_status (*lb_qweight_fn)(void *user, const char *name, const lb_tensor *t,
                                   int64_t out, int64_t in, lb_tensor *d);
lb_status lb_model_ext_weight(const struct lb_safetensors *st, const char *label,
                              const char *prefix, int64_t out, int64_t in,
                              bool (*is_q)(const lb_tensor *t), lb_qweight_fn conv,
                              void *user, const char *kinds, int *n_dense, lb_tensor *d);

/* MoE routing of one token (forward_ext.c, transformers' order):
 * prob = softmax(logits[E]) in f32, idx[k] = top-k (ties to the lower
 * index, as torch.topk on CPU), w[k] = their probabilities, renormalised to
 * sum 1 when norm. prob [E] is scratch (left holding the softmax). */
void lb_moe_route(const float *logits, int E, int k, bool norm, int *idx,
                  float *w, float *prob);

/* g[i] = act(g[i]) * u[i], i < n: the gated MLPs' activation (SiLU through
 * the kernel table, or gelu_pytorch_tanh), as forward_ext.c runs it. */
void lb_glu_act_mul(lb_hidden_act a, float *g, const float *u, int64_t n);

/* Fill *cfg from a GGUF file's `<arch>.*` and `tokenizer.ggml.*` keys
 * (load_gguf.c; architectures llama, qwen2, qwen3). Checks key types and
 * ranges, per-layer arrays (must be uniform), key_length == value_length,
 * rope.dimension_count == head dim, vocabulary size consistency, special
 * ids; then lb_model_config_validate. Errors name the file and key. */
lb_status lb_model_config_from_gguf(const lb_gguf *g, lb_model_config *cfg);

/* lb_model_load_gguf on an open reader (e.g. lb_gguf_open_memory). take:
 * the model owns the reader (closed with it, and at once on failure);
 * otherwise the caller keeps the reader open until lb_model_free. */
lb_status lb_model_load_gguf_reader(lb_gguf *g, bool take,
                                    const lb_model_load_opts *opts,
                                    lb_model **out);

/* The Llama-family Hugging Face tensor walk shared by the dense, FP8 and
 * bitsandbytes loaders (model.c). set(user, name, role, layer, optional)
 * adds tensor `name` (transformers' name) to the model under `role`;
 * optional: a missing tensor is not an error. _globals: embed_tokens,
 * lm_head (optional when tied), the final norm; with tied embeddings the
 * separate lm_head is dropped as transformers' tie_weights does. _layers:
 * each layer's roles the config uses, in order, reporting "load" progress
 * (LB_ERR_CANCELLED when the callback cancels). */
/* lb_model_builder_new for a model whose tensors point into st: with
 * own_st the model closes st when freed, and st is closed here on failure
 * too (the loaders' *_build_model contract). */
struct lb_safetensors;
lb_status lb_model_builder_new_st(const lb_model_config *cfg, struct lb_safetensors *st,
                                  bool own_st, lb_model **out);
struct lb_safetensors;
typedef lb_status (*lb_hf_set_fn)(void *user, const char *name, lb_tensor_role role,
                                  int layer, bool optional);
lb_status lb_model_hf_walk_globals(lb_model *m, const struct lb_safetensors *st,
                                   lb_hf_set_fn set, void *user);
lb_status lb_model_hf_walk_layers(lb_model *m, const lb_model_load_opts *opts,
                                  lb_hf_set_fn set, void *user);
/* Every decoder layer, then lb_model_builder_finish: the Llama-layout walk
 * above (set) or, for the issue-13 architectures (arch >= Gemma 2),
 * lb_model_load_layers_ext (linear, NULL: st's prefix.weight as stored)
 * with Gemma's norms made 1 + w. The HF, FP8 and bitsandbytes loaders. */
lb_status lb_model_hf_load_layers(lb_model *m, const struct lb_safetensors *st,
                                  const char *label, const lb_model_load_opts *opts,
                                  lb_hf_set_fn set, lb_ext_linear_fn linear, void *user);

/* The GPTQ loader's tensor part (load_gptq.c), separated from the files so
 * that it can be fuzzed from memory: build a model for cfg from the tensors
 * of st under the quantization config qc. own_st: the model closes st when
 * freed (also on failure). label names the source in messages. */
struct lb_gptq_qconfig;
struct lb_safetensors;
lb_status lb_gptq_build_model(const lb_model_config *cfg,
                              const struct lb_gptq_qconfig *qc,
                              struct lb_safetensors *st, bool own_st,
                              const char *label,
                              const lb_model_load_opts *opts, lb_model **out);

/* The FP8 loader's tensor part (load_fp8.c; lowbit/fp8.h), from memory
 * for fuzzing: build a model for cfg from st under the FP8 scheme q; FP8
 * linears are checked against their scales and dequantized to F32. own_st:
 * the model closes st (also on failure). */
struct lb_fp8_qconfig;
lb_status lb_fp8_build_model(const lb_model_config *cfg,
                             const struct lb_fp8_qconfig *q,
                             struct lb_safetensors *st, bool own_st,
                             const char *label,
                             const lb_model_load_opts *opts, lb_model **out);
/* lb_model_load_hf's hook for a quantization_config with quant_method
 * "fp8" or "compressed-tensors" float-quantized (load_fp8.c): loads the
 * checkpoint; *handled false (LB_OK) when the config is not FP8. */
lb_status lb_model_load_fp8(const char *dir, const lb_model_config *cfg,
                            const lb_model_load_opts *opts, lb_model **out,
                            bool *handled);
/* Rows [r0, r0 + nr) of a 2-D tensor (slab < 0) or of slab `slab` of a
 * 3-D one (GGUF merged experts, transformers-5 fused experts) as a 2-D
 * view of the same data. Errors name t->name (load_hf_ext.c). */
lb_status lb_tensor_rows_view(const lb_tensor *t, int slab, int64_t r0,
                              int64_t nr, lb_tensor *v);

/* GGUF parts of the issue-13 architectures (load_gguf_ext.c): the keys
 * after the common ones, and every layer tensor. */
lb_status lb_gguf_config_ext(const lb_gguf *g, const char *arch,
                             lb_model_config *cfg);
lb_status lb_gguf_load_layers_ext(lb_model *m, const lb_gguf *g,
                                  const lb_model_load_opts *opts);

/* What forward_ext.c needs of a context (filled by forward.c). */
typedef struct lb_ext_ctx {
    const lb_model *m;
    lb_pool *pool;
    void *k_cache, *v_cache; /* forward.c's layout and kv_type          */
    lb_type kv_type;
    int32_t n_ctx;
    lb_forward_hook hook;
    /* batch.c: caches of several sequences back to back, seq_stride
     * elements apart (lb_ext_run_layers_multi); 0 for one sequence */
    size_t seq_stride;
} lb_ext_ctx;

/* Layers [l0, l1) of an lb_model_config_is_ext model on hidden [n, dim]
 * at positions pos.. (forward_ext.c). */
lb_status lb_ext_run_layers(const lb_ext_ctx *x, int l0, int l1,
                            float *hidden, int32_t n, int32_t pos);
/* The same with token t of sequence seq[t] at position pos[t] (batch.c's
 * multi-sequence forward; x->seq_stride apart caches, kv_type F32 or F16). */
lb_status lb_ext_run_layers_multi(const lb_ext_ctx *x, int l0, int l1,
                                  float *hidden, int32_t n,
                                  const int32_t *seq, const int32_t *pos);

/* The bitsandbytes loader (load_bnb.c; lowbit/bnb.h): NF4/FP4/INT8
 * linears checked and dequantized to F32; from memory for fuzzing. */
struct lb_bnb_qconfig;
lb_status lb_bnb_build_model(const lb_model_config *cfg,
                             const struct lb_bnb_qconfig *q,
                             struct lb_safetensors *st, bool own_st,
                             const char *label,
                             const lb_model_load_opts *opts, lb_model **out);
/* lb_model_load_hf's hook for quant_method "bitsandbytes"; *handled false
 * (LB_OK) for other configs. */
lb_status lb_model_load_bnb(const char *dir, const lb_model_config *cfg,
                            const lb_model_load_opts *opts, lb_model **out,
                            bool *handled);

#endif
