/*
 * lowbit/ftype.h — GGUF file types ("Q4_K_M", ...) and the per-tensor type
 * mix each one implies.
 *
 * Source followed: llama.cpp 0.7.0 (Debian 1:0.7.0, upstream b11669),
 * src/llama-quant.cpp: llama_ftype_get_default_type, tensor_get_category,
 * tensor_allows_quantization, llama_tensor_get_type(_impl),
 * tensor_type_fallback, init_quantize_state_counters; the tensor order of
 * llama_model_loader's weights_map (weight_name_comparer). Checked against
 * files and --dry-run listings written by llama-quantize 0.7.0
 * (tests/data/kquants/README.md). Only file types without an importance
 * matrix are covered (no IQ*, no Q2_K_S).
 */
#ifndef LOWBIT_FTYPE_H
#define LOWBIT_FTYPE_H

#include "lowbit/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* File types; values are llama.cpp's LLAMA_FTYPE_* (include/llama.h), the
 * number written to the GGUF key general.file_type (the same values as
 * gguf.h's lb_gguf_file_type, checked at compile time in ftype.c). */
typedef enum lb_ftype {
    LB_FTYPE_ALL_F32 = 0,
    LB_FTYPE_MOSTLY_F16 = 1,
    LB_FTYPE_MOSTLY_Q4_0 = 2,
    LB_FTYPE_MOSTLY_Q4_1 = 3,
    LB_FTYPE_MOSTLY_Q8_0 = 7,
    LB_FTYPE_MOSTLY_Q5_0 = 8,
    LB_FTYPE_MOSTLY_Q5_1 = 9,
    LB_FTYPE_MOSTLY_Q2_K = 10,
    LB_FTYPE_MOSTLY_Q3_K_S = 11,
    LB_FTYPE_MOSTLY_Q3_K_M = 12,
    LB_FTYPE_MOSTLY_Q3_K_L = 13,
    LB_FTYPE_MOSTLY_Q4_K_S = 14,
    LB_FTYPE_MOSTLY_Q4_K_M = 15,
    LB_FTYPE_MOSTLY_Q5_K_S = 16,
    LB_FTYPE_MOSTLY_Q5_K_M = 17,
    LB_FTYPE_MOSTLY_Q6_K = 18,
    LB_FTYPE_MOSTLY_BF16 = 32
} lb_ftype;

/* True when `v` is one of the lb_ftype values above. */
bool lb_ftype_is_valid(int v);

/* llama-quantize's name of a file type: "F32", "F16", "BF16", "Q4_0",
 * "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L",
 * "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K"; "?" for an invalid one. */
const char *lb_ftype_name(lb_ftype ft);

/* Parse a file type name as llama-quantize accepts it (case-insensitive):
 * the names above, the aliases "Q3_K" = Q3_K_M, "Q4_K" = Q4_K_M and
 * "Q5_K" = Q5_K_M (llama-quantize 0.7.0's --help: "alias for Q4_K_M"), or
 * the decimal ftype number. Errors: LB_ERR_INVALID_ARG (NULL), and
 * LB_ERR_UNSUPPORTED for anything else (message names the input). */
lb_status lb_ftype_from_name(const char *name, lb_ftype *out);

/* The base tensor type of a file type (llama_ftype_get_default_type):
 * Q2_K -> Q2_K, Q3_K_* -> Q3_K, Q4_K_* -> Q4_K, Q5_K_* -> Q5_K,
 * Q6_K -> Q6_K, Q4_0 -> Q4_0, ..., F16 -> F16, BF16 -> BF16, ALL_F32 ->
 * F32. Returns -1 for an invalid file type. */
int lb_ftype_default_type(lb_ftype ft);

/* What the mix needs to know about the model (GGUF metadata). */
typedef struct lb_ftype_model {
    const char *arch; /* general.architecture: "llama", "qwen2", "falcon"...
                       * ("falcon" has its own rules); NULL = "llama"     */
    int n_layer;      /* {arch}.block_count                               */
    int n_head;       /* {arch}.attention.head_count (layer 0)            */
    int n_head_kv;    /* {arch}.attention.head_count_kv (layer 0); the
                       * GQA ratio is n_head / n_head_kv, 0 if n_head_kv
                       * is 0 (as llama_hparams::n_gqa)                   */
    int n_expert;     /* {arch}.expert_count, 0 for a dense model         */
} lb_ftype_model;

/* llama-quantize options that change the mix; NULL means all defaults. */
typedef struct lb_ftype_params {
    bool pure;         /* --pure: every quantizable tensor gets the base
                        * type (still subject to the row-size fallback)   */
    bool keep_output;  /* --leave-output-tensor: output.weight keeps its
                        * source type                                     */
    int output_type;   /* --output-tensor-type: an lb_type, or -1 (auto)  */
    int token_embd_type; /* --token-embedding-type: an lb_type, or -1     */
} lb_ftype_params;

/*
 * Per-tensor types of a file of type `ftype`, as llama-quantize 0.7.0
 * chooses them without an importance matrix.
 *
 * tensors[0..n-1]: the model's tensors (name as in GGUF, e.g.
 * "blk.3.attn_v.weight", "output.weight", "token_embd.weight"; shape
 * outermost-first as in lb_tensor, so the row length is the last dim; type
 * = the type the tensor has now; data is not read). types_out[i] receives
 * the type of tensors[i]. n_fallback_out (may be NULL) receives the number
 * of tensors that took the row-size fallback.
 *
 * Rules, in brief (see ftype.c for all of them):
 *  - Only tensors of 2+ dims (counting like ggml_n_dims: trailing size-1
 *    dims do not count) whose name ends in "weight", and not a norm
 *    ("_norm.weight") or one of llama.cpp's small special tensors, are
 *    converted; every other tensor keeps its type (1-D norms stay F32).
 *  - F32/F16/BF16 file types convert those tensors to that type.
 *  - Quantized file types start from the base type; unless `pure`:
 *    output.weight (and token_embd.weight when the model has no
 *    output.weight, i.e. tied embeddings) -> Q6_K (Q8_0 if the row is not
 *    a multiple of the base type's block); attn_v (and attn_qkv) and
 *    ffn_down are raised on some layers: Q4_K_M / Q5_K_M -> Q6_K on the
 *    layers where use_more_bits(i, n) = i < n/8 || i >= 7n/8 ||
 *    (i - n/8) % 3 == 2; Q3_K_M -> Q5_K for the first two attn_v and the
 *    first n/16 ffn_down, else Q4_K; Q2_K -> Q3_K (Q4_K for attn_v when
 *    the GQA ratio is >= 4); attn_output -> Q3_K (Q2_K), Q4_K (Q3_K_M),
 *    Q5_K (Q3_K_L); plus the 70B, 8-expert and falcon special cases.
 *    Layer indices count the tensors of each kind in llama.cpp's order
 *    (non-layer tensors first, then by layer number, then by name).
 *  - Fallback when the row length (last dim) is not a multiple of the
 *    chosen type's block: Q2_K, Q3_K -> Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1;
 *    Q6_K -> Q8_0; and F16 if the row is not a multiple of 32 either.
 *
 * Errors: LB_ERR_INVALID_ARG (NULL pointers, a tensor without a name,
 * n_dims outside 1..4 or a negative dim), LB_ERR_UNSUPPORTED (unknown
 * ftype), LB_ERR_FORMAT (a MoE model's ffn tensor name without a valid
 * "blk.N." layer, as llama.cpp), LB_ERR_NOMEM.
 */
lb_status lb_ftype_tensor_types(lb_ftype ftype, const lb_ftype_model *model,
                                const lb_ftype_params *params, const lb_tensor *tensors,
                                size_t n, lb_type *types_out, int *n_fallback_out);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_FTYPE_H */
