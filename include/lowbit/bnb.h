/*
 * lowbit/bnb.h — bitsandbytes weight-only checkpoints: NF4 / FP4 (4-bit,
 * block-wise absmax, optional double quantization of the absmax) and INT8
 * row-wise (LLM.int8() weights: int8 codes + one absmax per output row),
 * serialised as transformers saves a bitsandbytes model
 * (`lowbit quantize --method nf4|fp4|int8`), and read back.
 *
 * 4-bit (bitsandbytes QuantState.as_dict(packed=True), quantize_4bit):
 *   NAME.weight        uint8 [ceil(out*in/2), 1]: codes of the row-major
 *                      flattened weight, two per byte, the FIRST in the
 *                      HIGH nibble;
 *   NAME.weight.absmax float32 [ceil(out*in/bs)] — or, double-quantized,
 *                      uint8 codes of (absmax - nested_offset) in the
 *                      256-entry dynamic map, blocks of nested_blocksize;
 *   NAME.weight.quant_map float32 [16] (the code table, below);
 *   NAME.weight.nested_absmax float32 [ceil(n_absmax/256)],
 *   NAME.weight.nested_quant_map float32 [256] (double-quantized only);
 *   NAME.weight.quant_state.bitsandbytes__nf4|fp4: uint8, the UTF-8 bytes
 *   of json.dumps({"quant_type", "blocksize", "dtype", "shape",
 *   ["nested_blocksize", "nested_dtype", "nested_offset"]}).
 *   Quantization: per block of bs values absmax = max|x|, s = clamp(x *
 *   (1/absmax), -1, 1), code = first argmin |s - table[c]| (bitsandbytes'
 *   default backend). Dequantization x = quant_map[c] * absmax, with
 *   absmax = nested_quant_map[a] * nested_absmax[i/256] + nested_offset
 *   when nested.
 * 8-bit: NAME.weight int8 [out, in], NAME.SCB float32 [out];
 *   q = round(x * (127 / SCB)) with SCB = max|row|, x = q * SCB / 127.
 * config.json quantization_config: BitsAndBytesConfig.to_dict()
 *   ({"quant_method": "bitsandbytes", "load_in_4bit"/"load_in_8bit",
 *   "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", ...}).
 */
#ifndef LOWBIT_BNB_H
#define LOWBIT_BNB_H

#include "lowbit/core.h"
#include "lowbit/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lb_bnb_kind { LB_BNB_NF4 = 0, LB_BNB_FP4 = 1, LB_BNB_INT8 = 2 } lb_bnb_kind;

/* The 16 code values of NF4 / FP4 (bitsandbytes get_4bit_type: FP4 is
 * [0, 0.0625, 8, 12, 4, 6, 2, 3, -0, ...] / 12), float32. */
const float *lb_bnb_4bit_table(lb_bnb_kind kind);
/* bitsandbytes create_dynamic_map(signed=True): 256 sorted float32. */
const float *lb_bnb_dynamic_map(void);

/* Block-wise 4-bit: x[n] -> packed[(n+1)/2], absmax[ceil(n/bs)]. */
lb_status lb_bnb_quantize_4bit(lb_bnb_kind kind, const float *x, int64_t n, int blocksize,
                               uint8_t *packed, float *absmax);
/* Block-wise 8-bit through a 256-entry code (the nested absmax). */
void lb_bnb_quantize_blockwise8(const float *x, int64_t n, int blocksize, const float *code,
                                uint8_t *q, float *absmax);
/* INT8 row-wise: W [out, in] -> codes, scb[out]. */
void lb_bnb_quantize_int8(const float *W, int64_t out, int64_t in, int8_t *codes, float *scb);

/* A bitsandbytes quantization_config. */
typedef struct lb_bnb_qconfig {
    lb_bnb_kind kind;
    bool double_quant;
    int blocksize; /* 4-bit writer: 64 default */
} lb_bnb_qconfig;

/* Parse a quantization_config: quant_method "bitsandbytes" -> *is_bnb.
 * LB_ERR_UNSUPPORTED: neither 4 nor 8 bit, unknown bnb_4bit_quant_type. */
lb_status lb_bnb_qconfig_parse(const char *json, size_t len, const char *label,
                               lb_bnb_qconfig *q, bool *is_bnb);

/* Parsed quant_state blob. */
typedef struct lb_bnb_qstate {
    lb_bnb_kind kind;
    int blocksize;
    int64_t shape[2];
    bool nested;
    int nested_blocksize;
    float nested_offset;
} lb_bnb_qstate;

/* Parse the uint8 JSON blob of NAME.weight.quant_state.bitsandbytes__*;
 * name names the tensor in errors (LB_ERR_FORMAT: not JSON, missing or
 * bad fields; LB_ERR_UNSUPPORTED: an unknown quant_type). */
lb_status lb_bnb_qstate_parse(const uint8_t *blob, size_t len, const char *name,
                              lb_bnb_qstate *qs);

/* The tensors of one 4-bit linear as read from a file. */
typedef struct lb_bnb_4bit_tensors {
    const lb_tensor *weight, *absmax, *quant_map, *nested_absmax, *nested_quant_map, *state;
} lb_bnb_4bit_tensors;

/* Check one 4-bit linear (prefix NAME, expected [out, in]) and dequantize
 * it to W [out, in] float32. Every size, dtype and the blob are checked
 * against each other; errors name the tensor. */
lb_status lb_bnb_dequantize_4bit(const char *name, const lb_bnb_4bit_tensors *t, int64_t out,
                                 int64_t in, float *W);
/* Check an INT8 linear (weight I8 [out, in], SCB F32 [out]) and
 * dequantize. */
lb_status lb_bnb_dequantize_int8(const char *name, const lb_tensor *w, const lb_tensor *scb,
                                 int64_t out, int64_t in, float *W);

/* ---- running 4-bit / 8-bit checkpoints natively ---------------------------
 * How a loaded NF4 / FP4 linear runs (LB_TYPE_NF4_B64 / LB_TYPE_FP4_B64):
 * rows of blocks of 64 codes with one float32 scale d (the block's absmax,
 * decoded from the double-quantized form at load), 36 bytes per 64 weights
 * (4.5 bits/weight); x[j] = table[code_j] * d with the kind's fixed table
 * (lb_bnb_4bit_table). Codes: element j (0..31) in the LOW nibble of qs[j],
 * element 32 + j in the HIGH nibble (ggml's Q4_0 order, not bitsandbytes'
 * high-nibble-first pairs: a load-time repack, so the SIMD kernels split a
 * byte vector into two runs of consecutive weights). */
typedef struct lb_block_bnb4_b64 {
    float d;
    uint8_t qs[32];
} lb_block_bnb4_b64;
_Static_assert(sizeof(lb_block_bnb4_b64) == 36, "bnb4_b64 size");

/* How a loaded INT8 linear runs (LB_TYPE_I8_B32): blocks of 32 int8 codes
 * with d = SCB[row] / 127 (7.874015718698502e-3f, as transformers'
 * dequantize_bnb_weight), x[j] = qs[j] * d; 9 bits/weight. */
typedef struct lb_block_i8_b32 {
    float d;
    int8_t qs[32];
} lb_block_i8_b32;
_Static_assert(sizeof(lb_block_i8_b32) == 36, "i8_b32 size");

/* Rows of n (multiple of 64 / 32) weights -> f32 (kind NF4 or FP4). */
void lb_dequantize_row_bnb4_b64(lb_bnb_kind kind, const lb_block_bnb4_b64 *x, float *y, int64_t n);
void lb_dequantize_row_i8_b32(const lb_block_i8_b32 *x, float *y, int64_t n);

/* Check one 4-bit linear exactly as lb_bnb_dequantize_4bit does, then
 * repack it into out * in/64 blocks of lb_block_bnb4_b64 (no f32 copy of
 * the weight). LB_ERR_UNSUPPORTED, with nothing else wrong, when the
 * tensor cannot be held that way: in not a multiple of 64, blocksize not a
 * multiple of 64, or a quant_map other than the kind's standard table (the
 * caller then dequantizes to F32). Other errors as lb_bnb_dequantize_4bit. */
lb_status lb_bnb_4bit_to_b64(const char *name, lb_bnb_kind kind, const lb_bnb_4bit_tensors *t,
                             int64_t out, int64_t in, lb_block_bnb4_b64 *dst);
/* Check an INT8 linear as lb_bnb_dequantize_int8 and repack it into out *
 * in/32 lb_block_i8_b32 blocks. LB_ERR_UNSUPPORTED when in % 32 != 0. */
lb_status lb_bnb_int8_to_b32(const char *name, const lb_tensor *w, const lb_tensor *scb,
                             int64_t out, int64_t in, lb_block_i8_b32 *dst);

typedef struct lb_bnb_quantize_opts {
    lb_bnb_qconfig q;
    lb_progress progress;
} lb_bnb_quantize_opts;

/* Dense HF checkpoint -> bitsandbytes checkpoint in out_dir (new or empty;
 * written in a temp dir and renamed). Decoder-layer linears quantized,
 * everything else copied; config.json gets the quantization_config. */
lb_status lb_bnb_quantize_checkpoint(const char *model_dir, const char *out_dir,
                                     const lb_bnb_quantize_opts *opts, int *n_linears);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_BNB_H */
