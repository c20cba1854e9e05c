/*
 * lowbit/gptq_ckpt.h — GPTQ checkpoints (the AutoGPTQ / GPTQModel layout):
 * the quantization config, per-module overrides ("dynamic"), and the
 * conversion of one quantized linear (qweight / qzeros / scales / g_idx)
 * into something lowbit's kernels run: dequantized F32/F16 rows, or an
 * exact repack into GGUF block types.
 *
 * Sources followed:
 *  - AutoGPTQ @9f7d370: auto_gptq/quantization/config.py
 *    (BaseQuantizeConfig: quantize_config.json, "checkpoint_format"),
 *    auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py (tensor layout and
 *    the torch dequantization path: zeros = unpacked qzeros + 1,
 *    W = scales[g_idx] * (codes - zeros[g_idx])).
 *  - GPTQModel (ModelCloud): "checkpoint_format"/"format" gptq_v2 (zeros
 *    stored as is), "meta" {"quantizer": ...}, "lm_head", and "dynamic"
 *    per-module overrides: an ordered object whose keys are Python regexes
 *    matched with re.match (anchored at the start of the module name) and
 *    prefixed "+:" (positive, the default) or "-:" (negative: the module is
 *    not quantized); the first matching key wins; a positive key's value
 *    overrides "bits", "group_size", "sym", "desc_act".
 *  - vLLM's GPTQ loader (vllm/model_executor/layers/quantization/gptq.py):
 *    reads bits, group_size, desc_act, lm_head, dynamic from
 *    quantization_config; expects v1 zeros.
 *
 * Tensor layout of a quantized linear NAME with in_features I, out_features
 * O, b bits, G groups (shapes outermost first):
 *   NAME.qweight int32 [I*b/32, O]  codes packed along the input dimension,
 *                                   LSB first (3 bits: 32 codes per 3 words)
 *   NAME.qzeros  int32 [G, O*b/32]  zero points packed along the output dim
 *                                   (v1: zero - 1; v2: zero)
 *   NAME.scales  f16   [G, O]       (F32/BF16 accepted when reading)
 *   NAME.g_idx   int32 [I]          group of each input column (optional
 *                                   when reading: then c / group_size)
 *   NAME.bias    [O]                optional (AutoGPTQ stores f16)
 * I and O must be multiples of 32. Dequantization (lowbit's definition,
 * float32): W[o, c] = float(scales[g, o]) * float(code[o, c] - zero[g, o])
 * with g = g_idx[c] — the product is computed in f32 from the f16 scale.
 * (AutoGPTQ's torch path multiplies in f16; ../shared/reference/gptq_model
 * evaluates the checkpoint with f32 dequantization: ppl 41.4763.)
 *
 * All data read from files is treated as hostile: shapes are checked
 * against the model config, every g_idx must lie in [0, G), scales must be
 * finite; tensors may be unaligned (read with memcpy).
 */
#ifndef LOWBIT_GPTQ_CKPT_H
#define LOWBIT_GPTQ_CKPT_H

#include "lowbit/gptq.h"
#include "lowbit/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Quantization config                                                       */
/* ------------------------------------------------------------------------ */

/* One "dynamic" entry (GPTQModel): an override or an exclusion. */
typedef struct lb_gptq_dynamic_rule {
    bool negative;      /* "-:" key: matching modules are not quantized    */
    char *pattern;      /* the regex without its "+:"/"-:" prefix (owned)  */
    int bits;           /* override, 0 = inherit                           */
    int group_size;     /* override, 0 = inherit                           */
    int sym;            /* override: 0/1, -1 = inherit                     */
    int desc_act;       /* override: 0/1, -1 = inherit                     */
    void *code;         /* compiled PCRE2 pattern (owned, opaque)          */
} lb_gptq_dynamic_rule;

typedef struct lb_gptq_qconfig {
    int bits;                 /* 2, 3, 4, 8                               */
    int group_size;           /* -1 or >= 1                               */
    bool desc_act, sym, static_groups, true_sequential;
    double damp_percent;      /* 0 when absent                            */
    lb_gptq_format format;    /* "checkpoint_format" (or GPTQModel's
                                 "format"): "gptq" -> V1 (default),
                                 "gptq_v2" -> V2                          */
    bool lm_head;             /* lm_head is quantized                     */
    char quantizer[64];       /* meta.quantizer (first entry), "" if none */
    lb_gptq_dynamic_rule *dynamic; /* [n_dynamic], in file order          */
    int n_dynamic;
    /* meta.rotation (lowbit's rotated checkpoints, docs/quantize.md): the
     * Hadamard order (the model's hidden_size), 0 when not rotated; kind
     * "hadamard" only; "seed" a decimal uint64 string. "online": at most
     * one entry, the online Hadamard on mlp.down_proj's input (QuaRot R4):
     * rotation_online_down_order is its order (the model's
     * intermediate_size; 0 when the list is empty), and its "m",
     * "construction" and "paley_q" must be what lb_hadamard_init chooses
     * for that order (so the reader rebuilds the writer's matrix). Unknown
     * kinds / modules: LB_ERR_UNSUPPORTED naming the key; malformed
     * values: LB_ERR_FORMAT naming the key. */
    int64_t rotation_order;
    uint64_t rotation_seed;
    int64_t rotation_online_down_order;
} lb_gptq_qconfig;

/* Parse a quantization_config object (config.json) or a
 * quantize_config.json file (same keys), `len` bytes of JSON. Required:
 * "bits" (2/3/4/8) and "group_size" (-1 or >= 1); "quant_method", when
 * present, must be "gptq" or "awq"; "checkpoint_format"/"format" must be
 * "gptq" or "gptq_v2" (marlin/bitblas formats are LB_ERR_UNSUPPORTED,
 * named). quant_method "awq" (transformers' AwqConfig, AutoAWQ): format
 * LB_GPTQ_FORMAT_AWQ (lowbit/gptq.h), "bits"/"w_bit" must be 4 and
 * "version" "gemm" (else LB_ERR_UNSUPPORTED naming it), sym = !"zero_point"
 * (default true), each "modules_to_not_convert" entry becomes a "-:" rule
 * matching any module name containing it (AutoAWQ's
 * exclude_layers_to_not_quantize); the views of such a checkpoint take
 * the AWQ layout (qweight [in, out/8], qzeros [G, out/8], no g_idx) and
 * every lb_gptq_linear_* function below reads them.
 * Booleans default to AutoGPTQ's defaults (desc_act false, sym true,
 * static_groups false, true_sequential true, lm_head false). Every
 * "dynamic" key is compiled with PCRE2 (anchored at the start, as
 * Python's re.match); a pattern that does not compile is LB_ERR_FORMAT
 * naming it. `label` names the source in errors. Free with
 * lb_gptq_qconfig_clear. */
lb_status lb_gptq_qconfig_parse(const char *json, size_t len,
                                const char *label, lb_gptq_qconfig *q);
void lb_gptq_qconfig_clear(lb_gptq_qconfig *q);

/* Effective settings of one module. */
typedef struct lb_gptq_module_cfg {
    bool quantized; /* false: a "-:" rule excludes it                       */
    int bits, group_size;
    bool sym, desc_act;
} lb_gptq_module_cfg;

/* Settings of module `name` (e.g. "model.layers.3.mlp.down_proj") under
 * q: the first "dynamic" rule whose pattern matches the start of the name
 * decides; otherwise the global settings. Never fails on a parsed q. */
lb_gptq_module_cfg lb_gptq_qconfig_module(const lb_gptq_qconfig *q,
                                          const char *name);

/* ------------------------------------------------------------------------ */
/* One quantized linear                                                      */
/* ------------------------------------------------------------------------ */

/* A view of a GPTQ linear's tensors (not owned; may be unaligned). */
typedef struct lb_gptq_linear {
    int64_t out_features, in_features;
    int bits;               /* 2, 3, 4, 8                                 */
    int64_t n_groups;       /* G: rows of qzeros/scales                   */
    lb_gptq_format format;  /* zero convention of qzeros                  */
    const void *qweight;    /* int32 [in*bits/32, out]                    */
    const void *qzeros;     /* int32 [G, out*bits/32]                     */
    const void *scales;     /* [G, out] of scales_type                    */
    lb_type scales_type;    /* F16, F32 or BF16                           */
    const void *g_idx;      /* int32 [in], or NULL: c / group_size        */
    int group_size;         /* used only when g_idx is NULL (-1: G == 1)  */
    int64_t qzeros_cols;    /* int32 words per qzeros row; 0 means
                               out*bits/32 (out a multiple of 32). An out
                               that is not a multiple of 32 (GPTQModel
                               checkpoints, e.g. 2/3-bit) needs at least
                               ceil(out*bits/32): zero points are one
                               little-endian bit stream per row (GPTQModel's
                               per-word 2/4/8-bit packing and its 3-bit
                               10|1|10|1|10 scheme are exactly that)      */
} lb_gptq_linear;

/* Validate a view: bits, in a multiple of 32, out >= 1 (a multiple of 32,
 * or qzeros_cols wide enough), G >= 1, scales type,
 * without g_idx G == ceil(in/group_size) (1 for -1); with g_idx every
 * entry in [0, G); every scale finite. `name` prefixes error messages
 * (e.g. "model.layers.0.mlp.down_proj"). Errors: LB_ERR_FORMAT,
 * LB_ERR_INVALID_ARG (NULL pointers), LB_ERR_UNSUPPORTED (bits, type). */
lb_status lb_gptq_linear_check(const lb_gptq_linear *l, const char *name);

/* What GPTQModel and vLLM correct or ignore in checkpoints, applied to a
 * checked view (after lb_gptq_linear_check), each logged through lb_log
 * (LB_LOG_WARN) naming the tensor:
 *  - a "gptq" (v1) module whose zero fields are all 2^(bits-1) with
 *    sym = true: v1 stores zero - 1 (7 for 4-bit), so these are raw
 *    (gptq_v2-style) zeros; reading them as v1 would shift every weight by
 *    one scale step. The view is switched to LB_GPTQ_FORMAT_V2.
 *  - a g_idx that uses a single group (e.g. all zeros) on a layer with
 *    G > 1 groups: with desc_act false and G == ceil(in/group_size) it is
 *    dropped (groups c / group_size, as vLLM does for desc_act = false);
 *    otherwise it is kept and the warning says so.
 * Returns the number of corrections/warnings (0: nothing found). */
int lb_gptq_linear_sanitize(lb_gptq_linear *l, const char *name, bool sym, bool desc_act);

/* Code of weight [o, c] (0..2^bits-1) and zero point of group g, column o
 * (v1: field + 1, without wrap, so 1..2^bits; v2: field). No checks. */
int32_t lb_gptq_linear_code(const lb_gptq_linear *l, int64_t o, int64_t c);
int32_t lb_gptq_linear_zero(const lb_gptq_linear *l, int64_t g, int64_t o);
/* Scale of group g, column o as f32; group of column c. No checks. */
float lb_gptq_linear_scale(const lb_gptq_linear *l, int64_t g, int64_t o);
int32_t lb_gptq_linear_group(const lb_gptq_linear *l, int64_t c);

/* Dequantize a checked view into W [out, in] f32 (definition above).
 * Errors: LB_ERR_INVALID_ARG (NULL). */
lb_status lb_gptq_linear_dequantize(const lb_gptq_linear *l, float *W);

/* The GGUF block type a checked view maps to WITHOUT any change of the
 * dequantized values, or -1:
 *   LB_TYPE_Q4_0 — 4 bits, every aligned 32-column block of a row in one
 *     group (g_idx constant on it: group_size a multiple of 32 or -1 with
 *     a trivial or block-constant g_idx), every zero used equal to 8, every
 *     scale exactly representable in f16 (d = that f16): Q4_0's
 *     d * (q - 8) is the same f32 product as the GPTQ dequantization.
 *   LB_TYPE_Q8_0 — 8 bits, same block condition, zeros 128 (d * (q-128)).
 * Asymmetric grids and 2/3-bit codes have no exact GGUF equivalent. */
int lb_gptq_linear_exact_type(const lb_gptq_linear *l);

/* Repack a checked view into `type` rows ([out] rows of in/32 blocks,
 * lb_row_size(type, in) bytes each) at dst (dst_size bytes):
 *   LB_TYPE_Q4_0 / LB_TYPE_Q8_0 — only when lb_gptq_linear_exact_type
 *     says so (else LB_ERR_UNSUPPORTED); exact.
 *   LB_TYPE_Q4_1 — 4 bits, block condition as above, any zero:
 *     d = f16(scale), m = f16(-scale * zero) rounded to nearest even,
 *     x = d * q + m: NOT exact (m is rounded to f16 and the sum is formed
 *     in another order); |x - W| <= ulp_f16(m)/2 + f32 rounding.
 *   LB_TYPE_F32 / LB_TYPE_F16 — dequantized (F16 rounds each weight).
 * Errors: LB_ERR_UNSUPPORTED (type, or the block condition fails),
 * LB_ERR_INVALID_ARG (dst too small). */
lb_status lb_gptq_linear_repack(const lb_gptq_linear *l, lb_type type,
                                void *dst, size_t dst_size);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_GPTQ_CKPT_H */
