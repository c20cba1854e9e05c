/*
 * lowbit/fp8.h — FP8 weight-only checkpoints: the OCP FP8 formats, the two
 * scale conventions users meet on the Hub, quantization without
 * calibration, and the checkpoint writer (`lowbit quantize --method fp8`).
 *
 * Formats (OCP 8-bit floating point spec v1.0; torch.float8_e4m3fn /
 * float8_e5m2; safetensors dtypes "F8_E4M3" / "F8_E5M2"):
 *   E4M3 (fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinity,
 *              S.1111.111 is NaN; max 448; subnormals m/8 * 2^-6.
 *   E5M2:      1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-like
 *              inf/NaN at exponent 31; max 57344; subnormals m/4 * 2^-14.
 * Encoding (lb_f32_to_fp8) rounds to nearest, ties to even, after clamping
 * to +-max (torch's cast after transformers' / compressed-tensors' clamp);
 * NaN stays NaN.
 *
 * Scale conventions (both multiply: W = float(q) * s):
 *   BLOCK   — DeepSeek-V3 / Qwen3-FP8 / transformers FineGrainedFP8:
 *             config.json quantization_config {"quant_method": "fp8",
 *             "fmt": "e4m3", "activation_scheme": "dynamic",
 *             "weight_block_size": [128, 128]}; per linear NAME.weight (F8)
 *             and NAME.weight_scale_inv float32 [ceil(out/bn), ceil(in/bk)]
 *             (the last block of a row/column may be partial). Also
 *             compressed-tensors strategy "block" (NAME.weight_scale, same
 *             shape, block_structure [bn, bk]).
 *   CHANNEL — llm-compressor / compressed-tensors "float-quantized",
 *             weights {"num_bits": 8, "type": "float", "strategy":
 *             "channel", "symmetric": true}: NAME.weight_scale [out, 1];
 *   TENSOR  — the same with strategy "tensor": NAME.weight_scale [1] or [].
 * Quantization (no calibration): per scale group amax = max |w|;
 * BLOCK as transformers' Fp8Quantize: s = 448 * (1 / amax) in float32 (how
 * torch evaluates its 448 / amax; 1 when amax == 0),
 * q = fp8(clamp(w * s, -448, 448)), stored scale = 1 / s (float32);
 * CHANNEL/TENSOR as compressed-tensors' min-max observer: stored scale
 * s = max(amax / 448, FLT_EPSILON), q = fp8(clamp(w / s, -448, 448)).
 */
#ifndef LOWBIT_FP8_H
#define LOWBIT_FP8_H

#include "lowbit/core.h"
#include "lowbit/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lb_fp8_format { LB_FP8_E4M3 = 0, LB_FP8_E5M2 = 1 } lb_fp8_format;

/* How a loaded FP8 E4M3 linear runs (LB_TYPE_F8_E4M3_B32): rows of blocks
 * of 32 codes with one float32 scale each, x[i] = d * e4m3(qs[i]) — the
 * checkpoint's scale of that block (block layouts whose column block is a
 * multiple of 32), of the row (channel) or of the tensor. The matmul
 * kernels multiply f32 activations: per block s = sum_i e4m3(q_i) * a_i in
 * float, y = sum over blocks of d * s (src/kernels/fp8_ref.c decodes
 * through the 256-entry table; fp8_avx2.c / fp8_avx512.c decode the same
 * values arithmetically and differ only in the float summation order). */
typedef struct lb_block_f8_b32 {
    float d;
    uint8_t qs[32];
} lb_block_f8_b32;
_Static_assert(sizeof(lb_block_f8_b32) == 36, "f8_b32 size");

/* Row of n (multiple of 32) weights of LB_TYPE_F8_E4M3_B32 -> f32. */
void lb_dequantize_row_f8_b32(const lb_block_f8_b32 *x, float *y, int64_t n);

typedef enum lb_fp8_layout {
    LB_FP8_SCALE_BLOCK = 0,
    LB_FP8_SCALE_CHANNEL = 1,
    LB_FP8_SCALE_TENSOR = 2
} lb_fp8_layout;

/* The 256 values of a format (index = the byte), float32; NaN codes NaN. */
const float *lb_fp8_table(lb_fp8_format fmt);
/* One value. */
float lb_fp8_to_f32(uint8_t q, lb_fp8_format fmt);
/* Round-to-nearest-even encoding, saturating at +-max (448 / 57344). */
uint8_t lb_f32_to_fp8(float x, lb_fp8_format fmt);
/* Largest finite value: 448 or 57344. */
float lb_fp8_max(lb_fp8_format fmt);

/* The quantization scheme of a checkpoint (from quantization_config). */
typedef struct lb_fp8_qconfig {
    lb_fp8_format fmt;
    lb_fp8_layout layout;
    int block_n, block_k;   /* BLOCK: rows and columns per scale (128, 128) */
    char scale_suffix[24];  /* "weight_scale_inv" or "weight_scale"        */
    char method[32];        /* quant_method as written                     */
} lb_fp8_qconfig;

/* Parse a quantization_config object (len bytes of JSON): quant_method
 * "fp8" (fmt e4m3|e5m2, weight_block_size [bn, bk] — absent: one scale per
 * tensor, as transformers) or "compressed-tensors" with format
 * "float-quantized"/"naive-quantized" and one config group whose weights
 * are {"num_bits": 8, "type": "float", "strategy": "channel"|"tensor"|
 * "block"} (symmetric). *is_fp8 false (LB_OK) for other methods. Errors:
 * LB_ERR_UNSUPPORTED (an fmt other than e4m3/e5m2 — named —, other
 * strategies, num_bits, several differing groups), LB_ERR_FORMAT (bad JSON
 * or block sizes outside 1..65536). label names the source in messages. */
lb_status lb_fp8_qconfig_parse(const char *json, size_t len, const char *label,
                               lb_fp8_qconfig *q, bool *is_fp8);

/* Expected shape of the scale tensor of an [out, in] weight:
 * BLOCK [ceil(out/bn), ceil(in/bk)], CHANNEL [out, 1], TENSOR [1]. */
void lb_fp8_scale_shape(const lb_fp8_qconfig *q, int64_t out, int64_t in, int *n_dims,
                        int64_t shape[2]);

/* Check a weight/scale pair read from a file: weight dtype F8_E4M3/F8_E5M2
 * matching q->fmt, 2-D; scale F32/F16/BF16 of the expected shape (TENSOR
 * also accepts a 0-d or [1, 1] scale); every scale finite. Errors name the
 * tensor: LB_ERR_FORMAT ("NAME.weight_scale_inv: expected [a, b], got
 * [c, d]"), LB_ERR_UNSUPPORTED (dtype). */
lb_status lb_fp8_check(const lb_fp8_qconfig *q, const char *name, const lb_tensor *w,
                       const lb_tensor *scale);

/* W [out, in] f32 from checked codes and scales (any alignment). */
lb_status lb_fp8_dequantize(const lb_fp8_qconfig *q, const lb_tensor *w, const lb_tensor *scale,
                            float *W);

/* Rows [r0, r0 + nr) of the same: dst [nr, in]. No checks beyond NULLs
 * and the row range (LB_ERR_RANGE). */
lb_status lb_fp8_dequantize_rows(const lb_fp8_qconfig *q, const lb_tensor *w,
                                 const lb_tensor *scale, int64_t r0, int64_t nr, float *dst);

/* Repack checked codes and scales into LB_TYPE_F8_E4M3_B32 rows (dst:
 * out * in/32 blocks). LB_ERR_UNSUPPORTED when the format is not E4M3, in
 * is not a multiple of 32, or a BLOCK layout's column block is not a
 * multiple of 32 (the caller then keeps F32). */
lb_status lb_fp8_to_b32(const lb_fp8_qconfig *q, const lb_tensor *w, const lb_tensor *scale,
                        lb_block_f8_b32 *dst);

/* Quantize W [out, in] (float32) under q (see above): codes [out, in],
 * scales (float32, the lb_fp8_scale_shape count). Errors:
 * LB_ERR_INVALID_ARG, LB_ERR_FORMAT (a non-finite weight, naming row and
 * column). */
lb_status lb_fp8_quantize(const lb_fp8_qconfig *q, const float *W, int64_t out, int64_t in,
                          uint8_t *codes, float *scales);

/* How the writer chooses a group's scale (the format and every reader are
 * the same either way: W = float(q) * scale):
 *   LB_FP8_RULE_MSE  (lowbit's default) — the candidate with the smallest
 *     squared weight error among scale = amax / (MAX * f), f = 1, 0.98,
 *     ..., 0.52 (amax placed lower in the top binade or in the one below:
 *     another alignment of the FP8 grid with the weights) and f = 1.04,
 *     1.08 (the largest weights clipped); f = 1 on ties. 27 trial
 *     encodings of every weight;
 *   LB_FP8_RULE_AMAX — the amax rule above, byte-identical to transformers'
 *     Fp8Quantize / compressed-tensors' min-max observer. */
typedef enum lb_fp8_scale_rule { LB_FP8_RULE_MSE = 0, LB_FP8_RULE_AMAX = 1 } lb_fp8_scale_rule;

/* lb_fp8_quantize under a scale rule (lb_fp8_quantize is the AMAX rule).
 * The encoding of a weight, given its group's scale, is as above (BLOCK:
 * q = fp8(clamp(w * (1 / scale))); CHANNEL/TENSOR: fp8(clamp(w / scale))).
 * codes may be NULL: the scales alone (GPTQ onto the FP8 grid finds its
 * codes itself, lb_gptq_fp8_grid). */
lb_status lb_fp8_quantize_rule(const lb_fp8_qconfig *q, lb_fp8_scale_rule rule, const float *W,
                               int64_t out, int64_t in, uint8_t *codes, float *scales);

/* Default config: BLOCK 128x128 e4m3 ("fp8", weight_scale_inv) or, with
 * channel = true, compressed-tensors CHANNEL e4m3 (weight_scale). */
void lb_fp8_qconfig_default(lb_fp8_qconfig *q, bool channel);

/* The FP8 settings as `lowbit quantize --json` and quantize_report.json
 * print them: compact JSON text {"fmt": "e4m3" | "e5m2", "scales":
 * "block" | "channel" | "tensor", "block": block_n (null for channel /
 * tensor), "quant_method": q->method, "scale_rule": "mse" | "amax"};
 * malloc'd (the caller frees), NULL when out of memory. */
char *lb_fp8_settings_json(const lb_fp8_qconfig *q, lb_fp8_scale_rule rule);

typedef struct lb_fp8_quantize_opts {
    lb_fp8_qconfig q;
    lb_fp8_scale_rule rule; /* 0 = LB_FP8_RULE_MSE (default)              */
    lb_progress progress; /* stage "quantize", done/total = tensors */
} lb_fp8_quantize_opts;

/* Dense HF checkpoint (F32/F16/BF16) -> FP8 weight-only checkpoint in
 * out_dir (new or empty; written into OUT.tmp-XXXXXX and renamed): every
 * decoder-layer linear (q/k/v/o_proj, gate/up/down_proj) becomes NAME.weight
 * (F8) + its scale; embeddings, lm_head, norms and biases are copied as
 * stored; config.json gets the quantization_config of q (BLOCK: the "fp8"
 * form; CHANNEL/TENSOR: compressed-tensors with "ignore": ["lm_head"]);
 * tokenizer/generation files are copied. *n_linears (optional) counts the
 * FP8 linears. Errors: those of lb_st_open / lb_model_config_load_dir,
 * LB_ERR_INVALID_ARG (out_dir not empty), LB_ERR_FORMAT (non-finite
 * weights), LB_ERR_IO, LB_ERR_NOMEM, LB_ERR_CANCELLED. */
lb_status lb_fp8_quantize_checkpoint(const char *model_dir, const char *out_dir,
                                     const lb_fp8_quantize_opts *opts, int *n_linears);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_FP8_H */
