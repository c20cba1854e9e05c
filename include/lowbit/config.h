/*
 * lowbit/config.h — model hyper-parameters (the decoder-only transformer
 * family lowbit runs) and their parsing from a Hugging Face config.json.
 *
 * Sources: transformers 5.12 configuration_llama.py, configuration_mistral.py,
 * configuration_qwen2.py, configuration_qwen3.py and modeling_rope_utils.py
 * (rope_parameters / rope_scaling). Both config styles are read:
 *   - transformers 5: "rope_parameters": {"rope_type", "rope_theta",
 *     "factor", "low_freq_factor", ...};
 *   - transformers 4 / most Hub checkpoints: top-level "rope_theta" and
 *     "rope_scaling": {"rope_type" (or legacy "type"), "factor", ...}.
 */
#ifndef LOWBIT_CONFIG_H
#define LOWBIT_CONFIG_H

#include "lowbit/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lb_arch {
    LB_ARCH_LLAMA = 0, /* LlamaForCausalLM                               */
    LB_ARCH_MISTRAL,   /* MistralForCausalLM (Llama + sliding window)     */
    LB_ARCH_QWEN2,     /* Qwen2ForCausalLM (q/k/v bias always)            */
    LB_ARCH_QWEN3,     /* Qwen3ForCausalLM (per-head q_norm/k_norm)       */
    /* issue 13 (forward_ext.c runs these; see docs/model.md): */
    LB_ARCH_GEMMA2,    /* Gemma2ForCausalLM                               */
    LB_ARCH_GEMMA3,    /* Gemma3ForCausalLM (model_type gemma3_text)      */
    LB_ARCH_PHI3,      /* Phi3ForCausalLM (fused qkv_proj, gate_up_proj)  */
    LB_ARCH_QWEN3_MOE, /* Qwen3MoeForCausalLM                             */
    LB_ARCH_QWEN2_MOE, /* Qwen2MoeForCausalLM (shared expert + its gate)  */
    LB_ARCH_MIXTRAL,   /* MixtralForCausalLM                              */
    LB_ARCH_COUNT_
} lb_arch;

/* RoPE frequency scaling (modeling_rope_utils.py ROPE_INIT_FUNCTIONS). */
typedef enum lb_rope_scaling {
    LB_ROPE_SCALING_NONE = 0, /* "default": inv_freq_i = theta^(-2i/d)    */
    LB_ROPE_SCALING_LINEAR,   /* "linear": inv_freq / factor              */
    LB_ROPE_SCALING_LLAMA3,   /* "llama3": _compute_llama3_parameters     */
    /* "longrope" (Phi-3): inv_freq_i = 1 / (ext_i * theta^(2i/d)), ext =
     * rope_long_factor when n_ctx > rope_original_max_position_embeddings
     * (llama.cpp's choice; transformers switches per call on the longest
     * position), else rope_short_factor; cos/sin scaled by
     * rope_attn_factor. */
    LB_ROPE_SCALING_LONGROPE
} lb_rope_scaling;

/* MLP activation: SwiGLU (silu) or GeGLU with the tanh approximation
 * (gelu_pytorch_tanh, Gemma). */
typedef enum lb_hidden_act {
    LB_ACT_SILU = 0,
    LB_ACT_GELU_TANH
} lb_hidden_act;

/* Most RoPE factors a longrope config may give (head_dim / 2). */
#define LB_MAX_ROPE_FACTORS 256
/* Most layers whose per-layer flags a config records (layer_flags). */
#define LB_MAX_LAYER_FLAGS 4096
/* layer_flags bits */
#define LB_LAYER_SWA 1u /* sliding-window attention (layer_types)       */
#define LB_LAYER_MOE 2u /* sparse MoE block (else the dense MLP)        */

/* Which elements RoPE rotates together. */
typedef enum lb_rope_mode {
    /* HF checkpoints (rotate_half): element i pairs with i + head_dim/2.
     * ggml calls this GGML_ROPE_TYPE_NEOX. */
    LB_ROPE_NEOX = 0,
    /* llama.cpp's GGUF llama files: adjacent elements (2i, 2i+1), because
     * convert_hf_to_gguf.py permutes the q/k rows. ggml's mode 0 ("norm"). */
    LB_ROPE_NORM = 1
} lb_rope_mode;

#define LB_MAX_EOS 8

typedef struct lb_model_config {
    lb_arch arch;
    char arch_name[64]; /* as in config.json "architectures"[0]          */

    int32_t vocab_size;
    int32_t hidden_size;        /* dim                                   */
    int32_t intermediate_size;  /* MLP hidden size                       */
    int32_t n_layers;           /* num_hidden_layers                     */
    int32_t n_heads;            /* num_attention_heads                   */
    int32_t n_kv_heads;         /* num_key_value_heads (default n_heads) */
    int32_t head_dim;           /* explicit, else hidden_size / n_heads  */
    int32_t max_position_embeddings;
    float rms_norm_eps;

    /* RoPE */
    lb_rope_mode rope_mode;     /* NEOX for HF; a GGUF loader sets NORM  */
    double rope_theta;          /* base, default 10000                   */
    lb_rope_scaling rope_scaling;
    double rope_factor;         /* linear / llama3 factor                */
    double rope_low_freq_factor, rope_high_freq_factor; /* llama3         */
    int32_t rope_original_max_position_embeddings;      /* llama3         */

    bool tie_word_embeddings;   /* lm_head shares the embedding matrix   */
    bool attention_bias;        /* q/k/v projections have a bias         */
    bool qk_norm;               /* Qwen3 per-head RMSNorm of q and k     */

    /* Sliding-window attention: a query at position p sees keys at
     * positions j with p - j < sliding_window, in layers >=
     * sliding_window_first_layer. 0 = full attention everywhere. */
    int32_t sliding_window;
    int32_t sliding_window_first_layer;

    int32_t bos_token_id;       /* -1 if none                            */
    int32_t eos_token_ids[LB_MAX_EOS]; /* config.json / generation_config */
    int n_eos;

    /* ---- issue 13 architectures (zero = off: Llama behaviour) ---- */
    lb_hidden_act hidden_act;
    float embed_scale;      /* hidden *= embed_scale after the lookup
                               (Gemma: sqrt(hidden_size) in f32); 0 = 1  */
    float attn_scale;       /* q.k scale; 0 = 1/sqrt(head_dim) (Gemma:
                               query_pre_attn_scalar^-0.5)               */
    float attn_softcap;     /* scores = cap * tanh(scores / cap); 0 off  */
    float final_softcap;    /* the same on the logits; 0 off             */
    bool post_norms;        /* Gemma 2/3: post_attention_layernorm on the
                               attention output, pre_feedforward_layernorm
                               before and post_feedforward_layernorm after
                               the MLP (the Gemma loaders store (1 + w))  */
    bool has_layer_flags;   /* layer_flags decides SWA/MoE per layer     */
    uint8_t layer_flags[LB_MAX_LAYER_FLAGS];
    double rope_local_theta; /* Gemma 3 sliding layers' base (default
                                rope); 0 = rope_theta                     */
    double rope_attn_factor; /* longrope cos/sin scale; 0 = 1            */
    int32_t rope_n_factors;  /* longrope: head_dim / 2                   */
    float rope_long_factor[LB_MAX_ROPE_FACTORS];
    float rope_short_factor[LB_MAX_ROPE_FACTORS];
    /* MoE (num_experts / num_local_experts, num_experts_per_tok,
     * moe_intermediate_size, shared_expert_intermediate_size): experts
     * [n_experts] of [moe_ff, dim] gate/up and [dim, moe_ff] down; the
     * router (mlp.gate) [n_experts, dim]; softmax over all experts, top
     * n_experts_used, renormalised when norm_topk_prob (Mixtral always). */
    int32_t n_experts, n_experts_used, moe_ff, shared_ff;
    bool norm_topk_prob;

    /* quantization_config from config.json (GPTQ etc.): has_ is true when
     * present; quant_method copied ("gptq", ...); the whole object is kept
     * as compact JSON text in quantization_config_json (owned, NULL when
     * absent) for the loader that understands it. */
    bool has_quantization_config;
    char quant_method[32];
    char *quantization_config_json;

    /* Online Hadamard on down_proj's input (QuaRot's R4; lowbit's rotated
     * checkpoints, quantization_config.meta.rotation.online, see
     * docs/quantize.md): down_proj's weight is stored as W_down T^T and
     * the forward pass computes down_proj(T h), T the orthogonal
     * transform of order intermediate_size (lowbit/hadamard.h). Set by
     * the GPTQ loader from the metadata and by lb_model_rotate_online;
     * never read from config.json itself. Llama/Mistral/Qwen2/Qwen3 only
     * (lb_model_config_validate). */
    bool online_hadamard_down;
} lb_model_config;

/* Name of an architecture ("LlamaForCausalLM", ...). */
/* true for the issue-13 architectures, which forward_ext.c runs (Gemma,
 * Phi-3 with longrope, MoE: anything the fused Llama pass cannot). */
bool lb_model_config_is_ext(const lb_model_config *cfg);
/* Does layer l use sliding-window attention / a sparse MoE block? */
bool lb_model_config_layer_swa(const lb_model_config *cfg, int l);
bool lb_model_config_layer_moe(const lb_model_config *cfg, int l);

const char *lb_arch_name(lb_arch arch);

/* Parse config.json text (len bytes) into *cfg (zeroed first).
 * `label` names the source in errors (e.g. the path). Errors:
 *   LB_ERR_FORMAT — invalid JSON, a required field missing or of the wrong
 *     type, values out of range (non-positive sizes, hidden_size not
 *     divisible by heads without head_dim, heads not a multiple of kv heads),
 *     naming the field;
 *   LB_ERR_UNSUPPORTED — an architecture other than the four above (named),
 *     hidden_act other than silu, mlp_bias, a rope type other than
 *     default/linear/llama3 (named).
 * Caller frees with lb_model_config_clear. */
lb_status lb_model_config_parse(const char *json, size_t len,
                                const char *label, lb_model_config *cfg);

/* Merge generation_config.json text: its bos_token_id / eos_token_id (int
 * or list) replace the config.json ones when present (transformers'
 * generate() uses generation_config). */
lb_status lb_model_config_merge_generation(lb_model_config *cfg,
                                           const char *json, size_t len,
                                           const char *label);

/* Read dir/config.json and (if present) dir/generation_config.json. */
lb_status lb_model_config_load_dir(const char *dir, lb_model_config *cfg);

/* Check the derived sizes (positive, bounded, divisible) — called by the
 * parsers; exposed for loaders that fill a config by hand (GGUF). */
lb_status lb_model_config_validate(const lb_model_config *cfg);

/* Deep copy (quantization_config_json duplicated). dst is overwritten. */
lb_status lb_model_config_copy(lb_model_config *dst,
                               const lb_model_config *src);

/* Free owned members; the struct is zeroed. */
void lb_model_config_clear(lb_model_config *cfg);

/* Is `id` one of the config's EOS ids? */
bool lb_model_config_is_eos(const lb_model_config *cfg, int32_t id);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_CONFIG_H */
