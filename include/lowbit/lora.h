/*
 * lowbit/lora.h — LoRA adapters applied beside the (packed) base weights,
 * never merged into them:
 *
 *   y = W^ x + sum_a s_a * B_a (A_a x)      for every adapted linear
 *
 * A [r, in] and B [out, r] are the adapter's factors (PEFT lora_A / lora_B,
 * PyTorch order), s_a = user_scale * alpha / r (alpha / sqrt(r) with
 * rsLoRA, PEFT LoraLayer.update_layer). Used for fine-tuned adapters and for
 * EoRA quantization-error compensation (lowbit/eora.h).
 *
 * Formats read:
 *  - PEFT directory (peft 0.x save_pretrained): adapter_config.json
 *    (peft_type "LORA", r, lora_alpha, target_modules as a list or a regex
 *    string, use_rslora, rank_pattern/alpha_pattern keyed by module-name
 *    suffix, fan_in_fan_out must be false) and adapter_model.safetensors with
 *    base_model.model.model.layers.N.{self_attn,mlp}.NAME.lora_{A,B}.weight
 *    (F32/F16/BF16). Factor ranks are read from the shapes; a rank that
 *    disagrees with r (and no rank_pattern entry) is an error.
 *  - llama.cpp LoRA GGUF (llama.cpp 0.7.0 src/llama-adapter.cpp,
 *    convert_lora_to_gguf.py): general.type = "adapter", adapter.type =
 *    "lora", adapter.lora.alpha (f32; 0 = scale 1), general.architecture
 *    equal to the base's GGUF architecture, tensors
 *    blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down}
 *    .weight.lora_a (ggml ne [in, r]) / .lora_b (ne [r, out]), F32/F16/BF16.
 *    For architecture llama the q/k lora_b rows are in llama.cpp's permuted
 *    (interleaved RoPE) order, as convert_hf_to_gguf.py's LlamaModel.permute
 *    writes the base rows.
 * Loading checks every tensor against the base model (shape, rank, layer,
 * target module, finite values) and names the tensor at fault. q/k B rows
 * are (un)permuted to the base model's row order (lb_model_config.rope_mode:
 * LB_ROPE_NORM = llama.cpp order).
 */
#ifndef LOWBIT_LORA_H
#define LOWBIT_LORA_H

#include "lowbit/core.h"
#include "lowbit/batch.h"
#include "lowbit/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest rank accepted per linear. */
#define LB_LORA_MAX_RANK 4096
/* Adapters applied to one context / sequence at most. */
#define LB_LORA_MAX_SET 8

/* One adapted linear: A [rank, in], B [out, rank] row-major, both of
 * `type` (LB_TYPE_F32 or LB_TYPE_F16); scale = alpha/r (or alpha/sqrt(r)). */
typedef struct lb_lora_linear {
    int64_t out, in, rank; /* rank 0: this linear is not adapted          */
    lb_type type;
    const void *A, *B;
    float scale;
} lb_lora_linear;

typedef struct lb_lora lb_lora;

/* Load an adapter for `base`: a PEFT directory (or its
 * adapter_config.json) or a llama.cpp LoRA GGUF file. Factors are kept in
 * their stored precision when F32/F16 (BF16 becomes F32). The adapter's
 * name (lb_lora_name) is the directory / file name without ".gguf".
 * Errors: LB_ERR_NOT_FOUND/IO (files), LB_ERR_FORMAT (malformed JSON /
 * safetensors / GGUF, shape or rank disagreeing with the base, a tensor
 * for a layer the base lacks, lora_A without lora_B, non-finite factor,
 * GGUF adapter for another architecture; messages name the tensor),
 * LB_ERR_UNSUPPORTED (embedding/lm_head adapters, DoRA, fan_in_fan_out,
 * alpha_pattern, bias, other peft_type, factor types), LB_ERR_NOMEM.
 * Free with lb_lora_free; the base model is not modified. */
lb_status lb_lora_load(const char *path, const lb_model *base, lb_lora **out);

/* The same from memory (fuzzing): a PEFT adapter given as its
 * adapter_config.json text and safetensors image (lb_lora_load_peft_mem),
 * or a GGUF image (lb_lora_load_gguf_mem). The images must outlive the
 * adapter only during the call (factors are copied). */
lb_status lb_lora_load_peft_mem(const char *config_json, size_t config_len,
                                const void *st, size_t st_size,
                                const char *name, const lb_model_config *base,
                                lb_lora **out);
lb_status lb_lora_load_gguf_mem(const void *gguf, size_t size,
                                const char *name, const lb_model_config *base,
                                lb_lora **out);
void lb_lora_free(lb_lora *a);

const char *lb_lora_name(const lb_lora *a);
/* The adapter's alpha and nominal rank r (adapter_config.json r; for GGUF
 * the largest rank), and whether it uses rsLoRA scaling. */
float lb_lora_alpha(const lb_lora *a);
int lb_lora_rank(const lb_lora *a);
bool lb_lora_rslora(const lb_lora *a);
int lb_lora_n_layers(const lb_lora *a);
/* Linear `which` of `layer` (rank 0 when not adapted); B rows in the
 * base model's q/k order. NULL when layer is out of range. */
const lb_lora_linear *lb_lora_get(const lb_lora *a, int layer,
                                  lb_linear_id which);
/* Bytes of all factors as held, and their element count. */
size_t lb_lora_bytes(const lb_lora *a);
int64_t lb_lora_n_params(const lb_lora *a);

/* A set of adapters with user scales (applied in order). */
typedef struct lb_lora_set {
    int n;
    const lb_lora *a[LB_LORA_MAX_SET];
    float scale[LB_LORA_MAX_SET];
} lb_lora_set;

/* Attach adapters to a context (copied set; the adapters must outlive the
 * context or the next call; NULL or n = 0 detaches). Every forward of ctx
 * (lb_model_forward, lb_layer_forward) adds s * B (A x) to each adapted
 * linear's output, before biases, norms and activations. Errors:
 * LB_ERR_INVALID_ARG (more than LB_LORA_MAX_SET, an adapter built for a
 * model of another shape), LB_ERR_UNSUPPORTED (a non-empty set on an
 * architecture whose forward does not apply adapters yet: Gemma 2/3,
 * Phi-3 and the MoE architectures — refused rather than ignored). */
lb_status lb_context_set_loras(lb_context *ctx, const lb_lora_set *set);

/* The same for one sequence of a multi-sequence context (lowbit/batch.h;
 * the server selects adapters per request this way). Errors:
 * LB_ERR_RANGE (seq), LB_ERR_INVALID_ARG, LB_ERR_NOMEM. */
lb_status lb_multi_set_loras(lb_multi_ctx *mc, int32_t seq,
                             const lb_lora_set *set);

/* y[out] += scale * B (A x) for one token x[in] (tmp: [rank] floats).
 * The kernel chosen at start-up (AVX2+FMA+F16C, else the reference;
 * LB_FORCE_REF=1 forces the reference). */
void lb_lora_apply(const lb_lora_linear *l, const float *x, float *y,
                   float scale, float *tmp);
/* The scalar reference of lb_lora_apply (always compiled). */
void lb_lora_apply_ref(const lb_lora_linear *l, const float *x, float *y,
                       float scale, float *tmp);

/* Add the deltas of every adapter of `set` for linear `which` of `layer`
 * to rows [t0, t1) of Y (row stride ldy) from inputs X (row stride ldx).
 * No-op for an empty set. (Used by the forward passes.) */
void lb_lora_set_apply_rows(const lb_lora_set *set, int layer,
                            lb_linear_id which, const float *X, size_t ldx,
                            float *Y, size_t ldy, size_t t0, size_t t1);
/* true when some adapter of the set adapts a linear of `layer`. */
bool lb_lora_set_layer_active(const lb_lora_set *set, int layer);

/* Write `a` as a llama.cpp LoRA GGUF (see the top of this file): F32
 * factors (F16 kept as F16), general.architecture from cfg ("llama" for
 * Llama/Mistral, "qwen2", "qwen3"), adapter.lora.alpha chosen so that
 * llama.cpp's scale alpha/rank equals the adapter's (rsLoRA: alpha*sqrt(r);
 * every linear must then have the same rank), q/k B rows permuted for
 * llama (from the order the adapter holds, cfg->rope_mode). Atomic write.
 * Errors: LB_ERR_UNSUPPORTED (rsLoRA with mixed ranks), LB_ERR_IO. */
lb_status lb_lora_write_gguf(const lb_lora *a, const lb_model_config *cfg,
                             const char *path);

/* Write `a` as a PEFT directory `dir` (created if missing):
 * adapter_config.json (peft_type LORA, r, lora_alpha, target_modules, the
 * given base_model_name_or_path, rank_pattern for ranks != r) and
 * adapter_model.safetensors (F32/F16 as held). B rows are written in HF
 * order (un-permuted when the adapter holds llama.cpp order). Files are
 * written atomically. */
lb_status lb_lora_write_peft(const lb_lora *a, const char *dir,
                             const char *base_model_name_or_path);

/* Build an adapter from factors in memory (used by EoRA): an empty
 * adapter for a model of config cfg (its n_layers, heads and rope_mode: the
 * q/k row order of the B factors later given), nominal rank r and alpha
 * (scale alpha/rank per linear); then lb_lora_set_linear copies one
 * linear's F32 factors A [rank, in], B [out, rank]. */
lb_status lb_lora_create(const char *name, const lb_model_config *cfg, int r,
                         float alpha, lb_lora **out);
/* Convert every factor to `type` (LB_TYPE_F32 or LB_TYPE_F16; F16 rounds
 * to nearest even, values beyond the f16 range are an LB_ERR_RANGE naming
 * the layer and linear, and leave the adapter unchanged there). */
lb_status lb_lora_convert(lb_lora *a, lb_type type);
lb_status lb_lora_set_linear(lb_lora *a, int layer, lb_linear_id which,
                             int64_t out, int64_t in, int64_t rank,
                             const float *A, const float *B);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_LORA_H */
