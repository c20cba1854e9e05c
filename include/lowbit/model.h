/*
 * lowbit/model.h — the decoder-only transformer (Llama / Mistral / Qwen2 /
 * Qwen3): weights, loading, and the f32 forward pass with a KV cache.
 *
 * Reference: transformers 5.12 modeling_llama.py, modeling_mistral.py,
 * modeling_qwen2.py, modeling_qwen3.py (eager attention, float32), checked
 * against ../shared/reference logits. Structure of one layer (pre-norm):
 *
 *   h   = x + o_proj(attention(rope(q_norm?(q_proj(rms(x)))),
 *                               rope(k_norm?(k_proj(rms(x)))),
 *                               v_proj(rms(x))))
 *   out = h + down_proj(silu(gate_proj(rms(h))) * up_proj(rms(h)))
 *
 * Every linear goes through lb_matmul (lowbit/kernels.h), so a weight may
 * be any type a kernel exists for (F32/F16/BF16 today from safetensors;
 * block-quantized types from GGUF or GPTQ conversion). All activations are
 * f32.
 *
 * Shapes are outermost-first (PyTorch order): a linear weight is
 * [out_features, in_features]; activations are [n_tokens, features].
 * Notation: dim = hidden_size, hd = head_dim, nh = n_heads, nkv =
 * n_kv_heads, ff = intermediate_size, V = vocab_size.
 */
#ifndef LOWBIT_MODEL_H
#define LOWBIT_MODEL_H

#include "lowbit/config.h"
#include "lowbit/core.h"
#include "lowbit/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The seven linears of a layer, in forward order. */
typedef enum lb_linear_id {
    LB_LINEAR_Q = 0, /* q_proj    [nh*hd, dim]  (+ bias [nh*hd] if any)   */
    LB_LINEAR_K,     /* k_proj    [nkv*hd, dim] (+ bias [nkv*hd])         */
    LB_LINEAR_V,     /* v_proj    [nkv*hd, dim] (+ bias [nkv*hd])         */
    LB_LINEAR_O,     /* o_proj    [dim, nh*hd]                            */
    LB_LINEAR_GATE,  /* gate_proj [ff, dim]                               */
    LB_LINEAR_UP,    /* up_proj   [ff, dim]                               */
    LB_LINEAR_DOWN,  /* down_proj [dim, ff]                               */
    LB_LINEAR_COUNT
} lb_linear_id;

/* HF module name of a linear ("self_attn.q_proj", "mlp.down_proj", ...). */
const char *lb_linear_name(lb_linear_id id);

/* Weights of one decoder layer. Norm weights and biases are always F32
 * (loaders convert them); linear weights may be any type lb_matmul
 * supports. A tensor with data == NULL is absent (bias without
 * attention_bias, q_norm/k_norm outside Qwen3). */
typedef struct lb_layer_weights {
    lb_tensor attn_norm;             /* input_layernorm.weight [dim]        */
    lb_tensor w[LB_LINEAR_COUNT];    /* the linears, see lb_linear_id       */
    lb_tensor bq, bk, bv;            /* q/k/v_proj.bias (F32) or absent      */
    lb_tensor q_norm, k_norm;        /* self_attn.q_norm/k_norm [hd] (F32)   */
    lb_tensor ffn_norm;              /* post_attention_layernorm [dim]
                                        (Gemma: pre_feedforward_layernorm) */
    /* Issue-13 architectures; absent (data NULL / exp NULL) otherwise.
     * Gemma norms hold (1 + w) as llama.cpp's converter writes them. */
    lb_tensor post_attn_norm;        /* Gemma post_attention_layernorm [dim] */
    lb_tensor post_ffn_norm;         /* Gemma post_feedforward_layernorm     */
    lb_tensor ffn_gate_inp;          /* MoE router mlp.gate [n_experts, dim] */
    /* MoE experts: exp[3 * e + k], k = 0 gate_proj [moe_ff, dim], 1
     * up_proj [moe_ff, dim], 2 down_proj [dim, moe_ff] (views into
     * llama.cpp's merged 3-D tensors when loaded from GGUF). NULL for a
     * dense layer. */
    lb_tensor *exp;
    lb_tensor shexp[3];              /* Qwen2-MoE shared_expert gate/up/down */
    lb_tensor shexp_gate_inp;        /* shared_expert_gate [dim] (F32)       */
} lb_layer_weights;

typedef struct lb_model_private lb_model_private;

/* A loaded model. The struct is public so that quantizers can read and
 * swap weights (use lb_model_set_linear, which checks the shape and takes
 * ownership of replacement buffers); everything else is read-only. */
typedef struct lb_model {
    lb_model_config config;
    lb_tensor tok_embd;        /* embed_tokens [V, dim]                      */
    lb_tensor output_norm;     /* model.norm.weight [dim] (F32)              */
    lb_tensor output;          /* lm_head [V, dim] (same data as tok_embd
                                  when the embeddings are tied)             */
    lb_layer_weights *layers;  /* [n_layers]                                 */
    /* Optional RoPE frequency divisors, F32 [hd/2] (GGUF
     * rope_freqs.weight: llama3-style scaling baked in by
     * convert_hf_to_gguf.py): theta_i = pos * inv_freq_i / rope_freqs[i],
     * as ggml's rope with freq_factors. data == NULL when absent. */
    lb_tensor rope_freqs;
    lb_model_private *priv;    /* owned buffers, mappings (opaque)          */
} lb_model;

/* How the linears of a GPTQ checkpoint are held after loading (see
 * lowbit/gptq_ckpt.h and docs/quantize.md). */
typedef enum lb_gptq_load_mode {
    /* Exact repack where one exists (4-bit zero-8 codes -> Q4_0, 8-bit
     * zero-128 codes -> Q8_0, d = the f16 scale: same dequantized weights),
     * otherwise dequantized F32. The default. */
    LB_GPTQ_LOAD_AUTO = 0,
    /* Everything dequantized to F32: exact fake-quant evaluation (the
     * products run in f32, no activation quantization). */
    LB_GPTQ_LOAD_F32,
    /* Everything dequantized to F16 (each weight rounded to f16). */
    LB_GPTQ_LOAD_F16,
    /* AUTO plus 4-bit asymmetric -> Q4_1 with m = f16(-scale*zero): smaller
     * and faster than F32 but NOT exact (m is rounded). */
    LB_GPTQ_LOAD_FAST
} lb_gptq_load_mode;

typedef struct lb_model_load_opts {
    lb_progress progress;         /* optional                             */
    lb_gptq_load_mode gptq_mode;  /* GPTQ checkpoints only; 0 = AUTO      */
    /* GGUF files: false (the default) reads the file into memory on
     * transparent huge pages (lb_map_file_ex LB_MAP_COPY; decode of a
     * Llama-3.2-1B-shape Q4_0 ran ~15% faster on a 2-core AVX-512 VM);
     * true maps it (faster start, pages shared with other processes). */
    bool mmap_weights;
} lb_model_load_opts;

/* Load a Hugging Face checkpoint directory: config.json (+
 * generation_config.json), model.safetensors or a sharded index. Weights
 * are mmap'ed views when their type (F32/F16/BF16) and alignment allow,
 * otherwise converted/copied into owned aligned buffers (norms and biases
 * always become F32). Tensor names follow transformers (model.embed_tokens,
 * model.layers.N.self_attn.{q,k,v,o}_proj.{weight,bias},
 * self_attn.{q,k}_norm, mlp.{gate,up,down}_proj, input_layernorm,
 * post_attention_layernorm, model.norm, lm_head). Tied embeddings may be
 * stored only as lm_head.weight or only as model.embed_tokens.weight.
 * Extra tensors (e.g. rotary_emb.inv_freq) are ignored. A GPTQ checkpoint
 * (quantization_config.quant_method "gptq", or a quantize_config.json) is
 * handed to lb_model_load_gptq; other quantization methods are
 * LB_ERR_UNSUPPORTED.
 * Errors: LB_ERR_NOT_FOUND (config or a required tensor, named),
 * LB_ERR_FORMAT (mis-shaped tensor: "NAME: expected [a, b], got [c, d]";
 * bad JSON/safetensors), LB_ERR_UNSUPPORTED (architecture, dtype),
 * LB_ERR_IO, LB_ERR_NOMEM. opts may be NULL. Free with lb_model_free. */
lb_status lb_model_load_hf(const char *dir, const lb_model_load_opts *opts,
                           lb_model **out);

/* Load a GGUF model file (llama.cpp layout; GGUF spec v3, llama.cpp 0.7.0
 * src/llama-model.cpp). Architectures (general.architecture): "llama"
 * (also Mistral files), "qwen2", "qwen3". Hyper-parameters come from the
 * `<arch>.*` keys: context_length, embedding_length, block_count,
 * feed_forward_length and attention.head_count(_kv) (scalars, or per-layer
 * arrays with equal values), attention.key_length/value_length (default
 * embedding_length / head_count; must be equal), rope.dimension_count
 * (must equal the head dim), attention.layer_norm_rms_epsilon,
 * rope.freq_base (default 10000), rope.scaling.type none/linear with
 * rope.scaling.factor, vocab_size (else the length of
 * tokenizer.ggml.tokens, else token_embd rows; sources must agree); BOS/EOS
 * ids from tokenizer.ggml.{bos,eos,eot,eom}_token_id. Tensors by GGUF name
 * (token_embd, output_norm, output — absent means tied to token_embd —,
 * blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, attn_{q,k,v}.bias,
 * attn_q_norm, attn_k_norm, ffn_norm, ffn_gate, ffn_up, ffn_down},
 * rope_freqs). The file is read into memory on huge pages, or mapped with
 * opts->mmap_weights (lb_model_load_opts); linear weights are used in
 * place from that read-only image in their stored type (anything lb_matmul has a kernel for: F32, F16,
 * BF16, Q4_0 ... Q8_0, Q2_K ... Q6_K; checked at load); token embedding
 * rows are converted to f32 per lookup. When the file was read into memory
 * (not mapped), Q4_0/Q8_0 linear weights and lm_head (also when tied to
 * the embeddings) are repacked in place in that copy (lb_tensor_repack,
 * lowbit/kernels.h; their layout is then LB_LAYOUT_X16: read their rows
 * with lb_tensor_row_canonical); LB_REPACK=0 turns this off. The file is
 * never written. RoPE: llama -> LB_ROPE_NORM
 * (convert_hf_to_gguf.py permuted the q/k rows), qwen2/qwen3 ->
 * LB_ROPE_NEOX.
 * Errors: LB_ERR_IO, LB_ERR_FORMAT (malformed file, a key of the wrong type
 * or out of range, a tensor shape inconsistent with the hyper-parameters:
 * messages name the file, key or tensor), LB_ERR_NOT_FOUND (a required key
 * or tensor; a vocabulary-only file), LB_ERR_UNSUPPORTED (architecture,
 * MoE, partial RoPE, yarn scaling, non-uniform layers, a tensor type
 * without a kernel), LB_ERR_NOMEM. Free with lb_model_free. */
lb_status lb_model_load_gguf(const char *path, const lb_model_load_opts *opts,
                             lb_model **out);

/* Load a GPTQ checkpoint directory (AutoGPTQ / GPTQModel layout, see
 * lowbit/gptq_ckpt.h): config.json with a quantization_config (or a
 * quantize_config.json beside it), weights in model.safetensors, a sharded
 * index, or the directory's single *.safetensors file (AutoGPTQ's
 * gptq_model-4bit-128g.safetensors). Linears with NAME.qweight are
 * converted as opts->gptq_mode says; NAME.weight linears load as in
 * lb_model_load_hf (mixed checkpoints, e.g. "dynamic" exclusions); a
 * quantized lm_head (lm_head.qweight) is used as the output layer.
 * Each qweight's bit width is inferred from its shape and must agree with
 * the config (after "dynamic" overrides). Errors as lb_model_load_hf, plus
 * LB_ERR_FORMAT naming the tensor for a mis-shaped/mistyped qweight,
 * qzeros, scales or g_idx, a g_idx outside [0, groups), a non-finite scale;
 * LB_ERR_UNSUPPORTED for quant methods/formats other than GPTQ v1/v2, or a
 * non-zero bias on a linear that lowbit's model has no bias for. */
lb_status lb_model_load_gptq(const char *dir, const lb_model_load_opts *opts,
                             lb_model **out);

/* Load whatever `path` is: a directory with config.json -> HF loader (GPTQ
 * checkpoints, recognised by quantization_config.quant_method "gptq" or a
 * quantize_config.json, go to lb_model_load_gptq); a file starting with the
 * GGUF magic -> lb_model_load_gguf (a *.gguf file without the magic is an
 * LB_ERR_FORMAT). Other paths: LB_ERR_NOT_FOUND /
 * LB_ERR_UNSUPPORTED naming the path. */
lb_status lb_model_load(const char *path, const lb_model_load_opts *opts,
                        lb_model **out);

void lb_model_free(lb_model *model);

/* Replace linear `which` of layer `layer` by `w` (any type lb_matmul
 * supports; shape must equal the current one, [out, in]). The tensor view
 * is copied, w->layout included (a copy of a loaded weight's view keeps
 * its LB_LAYOUT_X16: set LB_LAYOUT_ROWS for new row-form data); its data
 * must stay valid for the model's lifetime. If
 * `owned` is non-NULL it is a buffer from lb_alloc that the model frees
 * (typically the one w->data points into). Any context created from this
 * model sees the new weight at its next forward.
 * Errors: LB_ERR_RANGE (layer), LB_ERR_INVALID_ARG (shape differs or row
 * size not a whole number of blocks; `owned` is NOT taken then). */
lb_status lb_model_set_linear(lb_model *model, int layer, lb_linear_id which,
                              const lb_tensor *w, void *owned);

/* Bytes of all weights as stored (for reports). */
size_t lb_model_weight_bytes(const lb_model *model);

/* Number of parameters (elements of every weight, tied matrices counted
 * once), as llama.cpp's llama_model_n_params. */
int64_t lb_model_n_params(const lb_model *model);

/* Mixture-of-experts: parameters one token uses (every parameter minus the
 * (n_experts - n_experts_used) unselected experts of each MoE layer; equal
 * to lb_model_n_params for dense models), and the weight bytes one decoded
 * token reads (the same, with one row of the token embedding instead of the
 * whole table; tied lm_head counted once). */
int64_t lb_model_n_active_params(const lb_model *model);
size_t lb_model_active_weight_bytes(const lb_model *model);

/* ------------------------------------------------------------------------ */
/* Inference context                                                         */
/* ------------------------------------------------------------------------ */

typedef struct lb_context lb_context;

/* lb_context_params.pin_threads */
enum { LB_PIN_AUTO = 0, LB_PIN_ON = 1, LB_PIN_OFF = -1 };

typedef struct lb_context_params {
    int32_t n_ctx;     /* KV cache length in tokens (<= 0: min(max_position
                          _embeddings, 4096))                                */
    int32_t n_batch;   /* tokens per forward pass (<= 0: 512): longer
                          lb_model_forward calls run in passes of n_batch
                          tokens, so scratch memory is bounded by it
                          (lb_layer_forward grows the scratch to its n)   */
    int n_threads;     /* threads of the context's own pool (<= 0: all CPUs);
                          ignored when pool is set                         */
    lb_pool *pool;     /* optional shared pool (not owned)                  */
    lb_type kv_type;   /* KV cache elements: LB_TYPE_F32 (default) or
                          LB_TYPE_F16 (half the memory; llama.cpp's default;
                          K/V rounded to f16, attention in f32)             */
    int pin_threads;   /* the context's own pool pins its threads to
                          distinct CPUs: LB_PIN_AUTO (0, default: when the
                          pool takes every CPU the process may use,
                          LB_POOL_PIN_AUTO in core.h), LB_PIN_ON, LB_PIN_OFF */
    bool f16_activations; /* round the inputs of F16 weights to f16 before
                          the product, as ggml does (its F16 weights meet
                          F16 activations); default off: lowbit multiplies
                          F16 weights by f32 activations (one rounding
                          less). On for llama.cpp-identical numerics, e.g.
                          perplexity comparisons                          */
    bool bf16_activations; /* decoder-layer products of F32 and BF16 weights
                          in BF16 x BF16 with f32 accumulation: inputs
                          rounded to bf16 (nearest even), F32 weights
                          rounded to bf16 as they are read, products by
                          AVX512_BF16 vdpbf16ps (~2x the f32 rate). For the
                          calibration forwards of `quantize --calib-dtype
                          bf16`, not for inference. Ignored (f32 products)
                          on CPUs without AVX512_BF16; LB_FORCE_REF=1 runs
                          the scalar reference. lm_head is not affected. */
} lb_context_params;

/* Defaults (all zero = automatic). */
lb_context_params lb_context_default_params(void);

/* Create a context for `model`: KV cache [n_layers][nkv][n_ctx][hd] of
 * kv_type for K and V (allocated, not touched: pages are only backed by
 * memory as positions are written), RoPE cos/sin tables [n_ctx][hd/2]
 * (filled as positions are first used), scratch for n_batch tokens
 * (activations, [n_batch, ff] MLP buffers), per-thread attention scratch
 * independent of n_ctx, and a thread pool. The model must outlive the
 * context. Errors: LB_ERR_NOMEM (names the KV cache size),
 * LB_ERR_INVALID_ARG (kv_type, n_ctx). Free with lb_context_free. */
lb_status lb_context_create(const lb_model *model,
                            const lb_context_params *params,
                            lb_context **out);
void lb_context_free(lb_context *ctx);

const lb_model *lb_context_model(const lb_context *ctx);
int32_t lb_context_n_ctx(const lb_context *ctx);
lb_pool *lb_context_pool(lb_context *ctx);

/* Give the pages of layer `layer`'s K and V cache back to the kernel
 * (the whole pages of its [nkv][n_ctx][hd] slabs): they leave the RSS and
 * the layer's cached positions read as zeros afterwards, so only for a
 * caller that writes them again before reading them, e.g. a layer-by-layer
 * pipeline (lb_layer_forward from position 0, GPTQ calibration) once the
 * layer is done. Nothing for a layer out of range. */
void lb_context_release_kv(lb_context *ctx, int layer);

/* Give the pages of the forward's scratch back to the kernel: the
 * activation buffers ([n_batch, hidden] and [n_batch, n_heads * head_dim]
 * f32), the MLP's ([n_batch, intermediate_size] f32 where a layer does not
 * stream its MLP, e.g. with a hook set) and the quantized-activation rows.
 * They stay allocated and come back (as zero pages) when the next forward
 * writes them: every forward writes its scratch before reading it, so
 * results are unchanged. For a caller that holds a context idle between
 * forwards, e.g. GPTQ calibration while a subset is solved. */
void lb_context_release_scratch(lb_context *ctx);

/* The KV cache element type, and its size in bytes (K and V, all layers,
 * n_ctx positions). */
lb_type lb_context_kv_type(const lb_context *ctx);
size_t lb_context_kv_bytes(const lb_context *ctx);

/* Number of positions currently held in the KV cache. */
int32_t lb_context_n_past(const lb_context *ctx);
/* Forget everything (n_past = 0). */
void lb_context_reset(lb_context *ctx);
/* Keep only positions [0, n) (n <= n_past), e.g. to re-run a suffix or
 * start a new perplexity window on a shared prefix. */
lb_status lb_context_truncate(lb_context *ctx, int32_t n);

/* The token ids held in the cache: returns n_past and points *tokens
 * (optional) at the ids of positions 0..n_past-1 (owned by ctx, valid
 * until the next call on ctx); an id is -1 where the cache was filled by
 * lb_layer_forward rather than lb_model_forward. Used to reuse a shared
 * prompt prefix. */
int32_t lb_context_cached_tokens(const lb_context *ctx,
                                 const int32_t **tokens);

typedef enum lb_logits_mode {
    LB_LOGITS_NONE = 0, /* prefill only: logits_out may be NULL            */
    LB_LOGITS_LAST,     /* logits_out [V]: the last token's               */
    LB_LOGITS_ALL       /* logits_out [n_tokens, V]: every token's         */
} lb_logits_mode;

/* Run n_tokens tokens at positions pos .. pos+n_tokens-1 through the model,
 * appending their K/V to the cache (in passes of n_batch tokens). pos must be <= n_past (pos < n_past
 * overwrites — truncates — the cache from pos on) and pos + n_tokens <=
 * n_ctx; tokens must be in [0, V). A batch (prefill) and one token per call
 * (decode) give the same logits up to f32 rounding. Row t of the logits
 * predicts the token after tokens[t]. Errors: LB_ERR_RANGE (ids,
 * positions), LB_ERR_NOMEM, kernel errors (LB_ERR_UNSUPPORTED weight type);
 * on error the cache holds positions [0, pos). */
lb_status lb_model_forward(lb_context *ctx, const int32_t *tokens,
                           int32_t n_tokens, int32_t pos, float *logits_out,
                           lb_logits_mode mode);

/* ------------------------------------------------------------------------ */
/* Step-by-step forward (calibration, layer-wise replay)                     */
/* ------------------------------------------------------------------------ */

/* Called with the input of every linear just before it is applied:
 * X is [n_tokens, in_features] f32 (row-major), valid during the call only.
 * For q/k/v the same X is passed three times (once per linear). Return
 * LB_OK to continue; an error aborts the forward with that status. */
typedef lb_status (*lb_linear_input_fn)(void *user, int layer,
                                        lb_linear_id which, const float *X,
                                        int64_t n_tokens, int64_t in_features);

typedef struct lb_forward_hook {
    lb_linear_input_fn linear_input; /* NULL = none */
    void *user;
} lb_forward_hook;

/* Install (or with NULL remove) a hook on this context. */
void lb_context_set_hook(lb_context *ctx, const lb_forward_hook *hook);

/* True when the context runs its decoder-layer products in BF16
 * (lb_context_params.bf16_activations asked for it and a kernel exists on
 * this CPU, or LB_FORCE_REF=1 selected the reference). */
bool lb_context_bf16_active(const lb_context *ctx);

/* Embedding lookup: hidden[t, :] = embed_tokens[tokens[t], :] as f32
 * (F32/F16/BF16 rows converted; other types through the model's
 * dequantize-row hook). hidden: [n_tokens, dim]. Errors: LB_ERR_RANGE. */
lb_status lb_model_embed(lb_context *ctx, const int32_t *tokens,
                         int32_t n_tokens, float *hidden);

/* One decoder layer in place on hidden [n_tokens, dim] for positions
 * pos .. pos+n_tokens-1: writes that layer's K/V cache entries and attends
 * to cached positions [0, pos+n_tokens) of the same layer. To run a whole
 * model this way call it for layers 0..n_layers-1 with the same pos, then
 * lb_context_set_n_past(ctx, pos + n_tokens). Calibration can instead run
 * every layer over many samples (pos = 0 each time), capturing linear
 * inputs with the hook and swapping weights in between. Errors:
 * LB_ERR_RANGE (layer, pos + n_tokens > n_ctx, pos > n_past), kernel
 * errors, hook errors. */
lb_status lb_layer_forward(lb_context *ctx, int layer, float *hidden,
                           int32_t n_tokens, int32_t pos);

/* The MLP half of one decoder layer in place on hidden [n_tokens, dim],
 * which holds the layer's post-attention residual h = x + o_proj(att)
 * (what lb_layer_forward leaves in hidden when the hook stops it at
 * gate_proj's input): hidden = h + down(act(gate(xn)) * up(xn)), xn =
 * RMSNorm(h) * post_attention_layernorm — the same floats as the second
 * half of lb_layer_forward (the same kernels and order; the KV cache is
 * not touched). Lets calibration keep h instead of recomputing the
 * attention in every later pass. Llama/Mistral/Qwen2/Qwen3 layouts only
 * (LB_ERR_UNSUPPORTED for Gemma, Phi-3 longrope and MoE). Errors: as
 * lb_layer_forward. */
lb_status lb_layer_forward_mlp(lb_context *ctx, int layer, float *hidden,
                               int32_t n_tokens, int32_t pos);

/* Where lb_layer_forward_from starts a decoder layer (in the order of the
 * forward: each entry skips everything before it). */
typedef enum lb_layer_entry {
    LB_LAYER_ENTRY_INPUT = 0, /* the layer input (= lb_layer_forward)      */
    LB_LAYER_ENTRY_O = 1,     /* o_proj's input: src = att [n_tokens,
                                 n_heads * head_dim], the attention output
                                 for these positions; hidden holds the
                                 layer input x                             */
    LB_LAYER_ENTRY_MLP = 2,   /* the MLP: hidden holds h = x + o_proj(att)
                                 (= lb_layer_forward_mlp); src unused      */
    LB_LAYER_ENTRY_DOWN = 3,  /* down_proj's input: src = act(gate(xn)) *
                                 up(xn) [n_tokens, intermediate_size] (after
                                 the online Hadamard of a rotated model, as
                                 the hook sees it); hidden holds h         */
} lb_layer_entry;

/* One decoder layer from inside it, in place on hidden [n_tokens, dim]:
 * the steps of lb_layer_forward from `entry` on, with the same kernels and
 * float order, so given the src the layer itself would compute there the
 * result is bit-identical to lb_layer_forward (ENTRY_O: hidden = x +
 * o_proj(src), then the MLP; ENTRY_DOWN: hidden = h + down_proj(src)).
 * The hook is called for the linears from the entry on (ENTRY_O: with src
 * for o_proj; ENTRY_DOWN: with src for down_proj). The KV cache is not
 * touched (the attention is not run). Calibration uses it to keep a
 * layer's attention output or MLP activation between its true-sequential
 * passes instead of computing them again (quantize.c, --calib-cache).
 * Llama/Mistral/Qwen2/Qwen3 layouts only (LB_ERR_UNSUPPORTED for Gemma,
 * Phi-3 longrope and MoE). Errors: LB_ERR_INVALID_ARG (unknown entry, src
 * NULL where needed), as lb_layer_forward otherwise. src is not modified
 * and must not alias hidden or the context's buffers. */
lb_status lb_layer_forward_from(lb_context *ctx, int layer,
                                lb_layer_entry entry, const float *src,
                                float *hidden, int32_t n_tokens, int32_t pos);

/* Set n_past after driving layers by hand (n <= n_ctx). */
lb_status lb_context_set_n_past(lb_context *ctx, int32_t n);

/* Final RMSNorm + lm_head: logits [n_tokens, V] from hidden [n_tokens,
 * dim] (hidden is not modified). */
lb_status lb_model_output_logits(lb_context *ctx, const float *hidden,
                                 int32_t n_tokens, float *logits);

/* ------------------------------------------------------------------------ */
/* Building blocks (exposed for tests, kernels and other engines)            */
/* ------------------------------------------------------------------------ */

/* RMSNorm (transformers LlamaRMSNorm, float32):
 *   y[i] = x[i] / sqrt(mean(x^2) + eps) * w[i], i < n.  y may alias x. */
void lb_rmsnorm(float *y, const float *x, const float *w, int64_t n,
                float eps);

/* RoPE inverse frequencies inv_freq[i], i < head_dim/2, for the config's
 * theta and scaling (modeling_rope_utils.py: _compute_default /
 * _compute_linear_scaling / _compute_llama3_parameters), float32 as
 * transformers computes them. */
void lb_rope_inv_freq(const lb_model_config *cfg, float *inv_freq);

/* The RoPE inverse frequencies a loaded model uses, inv_freq[head_dim/2]:
 * lb_rope_inv_freq of its config, each divided by the GGUF file's
 * rope_freqs.weight factor when the file has one (llama.cpp 0.7.0 ggml
 * rope freq_factors: how converted Llama-3 files carry llama3 scaling).
 * Every forward path (lb_model_forward, lb_model_forward_multi) uses it. */
void lb_model_rope_inv_freq(const lb_model *m, float *inv_freq);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_MODEL_H */
