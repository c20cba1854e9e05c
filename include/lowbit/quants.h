/*
 * lowbit/quants.h — block-quantized formats (one definition per block type),
 * bit-compatible with ggml's (ggml/src/ggml-common.h, ggml-quants.c at
 * llama.cpp b4000..0.7.0; GGUF spec v3).
 *
 * Notation: d, dmin, m are fp16 unless stated; q are unsigned codes, x the
 * dequantized f32 values; a block of QK elements is x[0..QK-1].
 */
#ifndef LOWBIT_QUANTS_H
#define LOWBIT_QUANTS_H

#include <assert.h>

#include "lowbit/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t lb_half; /* IEEE binary16 bits */

#define LB_QK4_0 32
#define LB_QK4_1 32
#define LB_QK5_0 32
#define LB_QK5_1 32
#define LB_QK8_0 32
#define LB_QK8_1 32
#define LB_QK_K 256
#define LB_K_SCALE_SIZE 12

/* Q4_0: x[j] = d * ((qs[j] & 0xF) - 8), x[j+16] = d * ((qs[j] >> 4) - 8),
 * j = 0..15. 4.5 bits/weight. */
typedef struct {
    lb_half d;
    uint8_t qs[LB_QK4_0 / 2];
} lb_block_q4_0;
static_assert(sizeof(lb_block_q4_0) == 2 + LB_QK4_0 / 2, "q4_0 size");

/* Q4_1: x[j] = d * (qs[j] & 0xF) + m, x[j+16] = d * (qs[j] >> 4) + m.
 * 5 bits/weight. */
typedef struct {
    lb_half d;
    lb_half m;
    uint8_t qs[LB_QK4_1 / 2];
} lb_block_q4_1;
static_assert(sizeof(lb_block_q4_1) == 4 + LB_QK4_1 / 2, "q4_1 size");

/* Q5_0: 5th bit of element j in bit j of qh (little-endian u32);
 * x[j] = d * ((qs[j] & 0xF | bit_j << 4) - 16),
 * x[j+16] = d * ((qs[j] >> 4 | bit_{j+16} << 4) - 16). 5.5 bits/weight. */
typedef struct {
    lb_half d;
    uint8_t qh[4];
    uint8_t qs[LB_QK5_0 / 2];
} lb_block_q5_0;
static_assert(sizeof(lb_block_q5_0) == 2 + 4 + LB_QK5_0 / 2, "q5_0 size");

/* Q5_1: as Q5_0 without the -16 offset, plus m: x = d * q + m. 6 bits/w. */
typedef struct {
    lb_half d;
    lb_half m;
    uint8_t qh[4];
    uint8_t qs[LB_QK5_1 / 2];
} lb_block_q5_1;
static_assert(sizeof(lb_block_q5_1) == 4 + 4 + LB_QK5_1 / 2, "q5_1 size");

/* Q8_0: x[j] = d * qs[j]. 8.5 bits/weight. Also the activation format
 * paired with Q4_0/Q5_0/Q8_0 weights in dot products. */
typedef struct {
    lb_half d;
    int8_t qs[LB_QK8_0];
} lb_block_q8_0;
static_assert(sizeof(lb_block_q8_0) == 2 + LB_QK8_0, "q8_0 size");

/* Q8_1: x[j] = d * qs[j]; s = d * sum(qs) (fp16). Activation format paired
 * with Q4_1/Q5_1 weights. */
typedef struct {
    lb_half d;
    lb_half s;
    int8_t qs[LB_QK8_1];
} lb_block_q8_1;
static_assert(sizeof(lb_block_q8_1) == 4 + LB_QK8_1, "q8_1 size");

/* Q2_K: 16 sub-blocks of 16; scales[i] = sc (low 4 bits) | mn << 4;
 * x = d * sc * q - dmin * mn, q in 0..3 (2 bits in qs). 2.625 bits/w. */
typedef struct {
    uint8_t scales[LB_QK_K / 16];
    uint8_t qs[LB_QK_K / 4];
    lb_half d;
    lb_half dmin;
} lb_block_q2_K;
static_assert(sizeof(lb_block_q2_K) == 2 * 2 + LB_QK_K / 16 + LB_QK_K / 4, "q2_K size");

/* Q3_K: 16 sub-blocks of 16; 6-bit signed scales packed in scales[12];
 * x = d * (sc - 32) * (q - (hmask bit ? 0 : 4)), q = 2 low bits from qs.
 * 3.4375 bits/weight. */
typedef struct {
    uint8_t hmask[LB_QK_K / 8];
    uint8_t qs[LB_QK_K / 4];
    uint8_t scales[12];
    lb_half d;
} lb_block_q3_K;
static_assert(sizeof(lb_block_q3_K) == 2 + LB_QK_K / 4 + LB_QK_K / 8 + 12, "q3_K size");

/* Q4_K: 8 sub-blocks of 32; 6-bit scale sc and min mn per sub-block packed in
 * scales[12] (get_scale_min_k4); x = d * sc * q - dmin * mn, q 4 bits.
 * 4.5 bits/weight. */
typedef struct {
    lb_half d;
    lb_half dmin;
    uint8_t scales[LB_K_SCALE_SIZE];
    uint8_t qs[LB_QK_K / 2];
} lb_block_q4_K;
static_assert(sizeof(lb_block_q4_K) == 2 * 2 + LB_K_SCALE_SIZE + LB_QK_K / 2, "q4_K size");

/* Q5_K: as Q4_K with a 5th bit per element in qh. 5.5 bits/weight. */
typedef struct {
    lb_half d;
    lb_half dmin;
    uint8_t scales[LB_K_SCALE_SIZE];
    uint8_t qh[LB_QK_K / 8];
    uint8_t qs[LB_QK_K / 2];
} lb_block_q5_K;
static_assert(sizeof(lb_block_q5_K) == 2 * 2 + LB_K_SCALE_SIZE + LB_QK_K / 2 + LB_QK_K / 8, "q5_K size");

/* Q6_K: 16 sub-blocks of 16 with int8 scales; q = ql (4 low bits) | qh (2
 * high bits) << 4; x = d * scales[i] * (q - 32). 6.5625 bits/weight. */
typedef struct {
    uint8_t ql[LB_QK_K / 2];
    uint8_t qh[LB_QK_K / 4];
    int8_t scales[LB_QK_K / 16];
    lb_half d;
} lb_block_q6_K;
static_assert(sizeof(lb_block_q6_K) == 2 + LB_QK_K / 16 + 3 * LB_QK_K / 4, "q6_K size");

/* Q8_K: activation format for K-quant dot products (not stored in files by
 * lowbit): x = d * qs (d is f32); bsums[i] = sum of qs[16i..16i+15]. */
typedef struct {
    float d;
    int8_t qs[LB_QK_K];
    int16_t bsums[LB_QK_K / 16];
} lb_block_q8_K;
static_assert(sizeof(lb_block_q8_K) == 4 + LB_QK_K + LB_QK_K / 16 * 2, "q8_K size");


/* ------------------------------------------------------------------------ */
/* Row (de)quantization                                                      */
/* ------------------------------------------------------------------------ */
/*
 * A "row" of n elements of a block type holds n / blck_size consecutive
 * blocks (n must be a multiple of the block size: 32 for Q4_0..Q8_1, 256 for
 * the K-quants). Pointers need no alignment beyond the block struct's
 * natural alignment (2 bytes for fp16 fields, 4 for Q8_K).
 *
 * Dequantization follows ggml's dequantize_row_* (ggml/src/ggml-quants.c,
 * llama.cpp 0.7.0) operation by operation, so the f32 output is identical
 * to llama.cpp's. Quantization follows ggml's quantize_row_*_ref (same
 * float operations in the same order, fp16 stores rounded to nearest even),
 * so the bytes are identical to what llama-quantize writes for Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0 and the K-quants Q2_K..Q6_K without an importance matrix
 * (llama-quantize's quantize_q{2..6}_K call quantize_row_q{2..6}_K_ref when
 * no imatrix is given; checked byte for byte in tests/test_kquants.c).
 */

/* Generic entry points. dst/src hold n elements of `type` (a row as above).
 *   lb_dequantize_row: every type of quants.h plus F32, F16, BF16.
 *   lb_quantize_row:   F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
 *                      Q8_K, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
 * Errors: LB_ERR_UNSUPPORTED for another type, LB_ERR_INVALID_ARG when n is
 * negative or not a multiple of the block size (message names the type). */
lb_status lb_dequantize_row(lb_type type, const void *src, float *dst, int64_t n);
lb_status lb_quantize_row(lb_type type, const float *src, void *dst, int64_t n);

/* True when lb_quantize_row / lb_dequantize_row support `type`. */
bool lb_type_can_quantize(lb_type type);
bool lb_type_can_dequantize(lb_type type);

/* Quantize a row-major f32 matrix src [rows, cols] into dst (rows rows of
 * lb_row_size(type, cols) bytes each, back to back). Rows are split over the
 * pool's threads (pool may be NULL); the bytes do not depend on the thread
 * count. Errors as lb_quantize_row, plus LB_ERR_OVERFLOW. */
lb_status lb_quantize_rows(lb_pool *pool, lb_type type, const float *src,
                           void *dst, int64_t rows, int64_t cols);

/* Per-type reference quantizers (k elements, k a multiple of the block size;
 * not checked). Each matches ggml's quantize_row_<type>_ref:
 *  q4_0: per block amax = max|x| with its signed value max, d = max / -8,
 *        id = d ? 1/d : 0, q = MIN(15, (int8_t)(x*id + 8.5f)).
 *  q4_1: min/max, d = (max - min) / 15, id = d ? 1/d : 0, m = min,
 *        q = MIN(15, (int8_t)((x - min)*id + 0.5f)).
 *  q5_0: as q4_0 with d = max / -16, q = MIN(31, (int8_t)(x*id + 16.5f)).
 *  q5_1: as q4_1 with d = (max - min) / 31, q = (uint8_t)((x - min)*id + 0.5f).
 *  q8_0: d = amax / 127, id = d ? 1/d : 0, q = roundf(x*id).
 *  q8_1: as q8_0, plus s = fp16(d * sum(q)).
 *  q8_K: amax with signed max; all-zero block gives d = 0, q = 0, bsums = 0
 *        (ggml leaves bsums unset there); else iscale = -127/max,
 *        q = MIN(127, nearest_int(iscale*x)), bsums[j] = sum q[16j..16j+15],
 *        d = 1/iscale. */
void lb_quantize_row_q4_0_ref(const float *x, lb_block_q4_0 *y, int64_t k);
void lb_quantize_row_q4_1_ref(const float *x, lb_block_q4_1 *y, int64_t k);
void lb_quantize_row_q5_0_ref(const float *x, lb_block_q5_0 *y, int64_t k);
void lb_quantize_row_q5_1_ref(const float *x, lb_block_q5_1 *y, int64_t k);
void lb_quantize_row_q8_0_ref(const float *x, lb_block_q8_0 *y, int64_t k);
void lb_quantize_row_q8_1_ref(const float *x, lb_block_q8_1 *y, int64_t k);
void lb_quantize_row_q8_K_ref(const float *x, lb_block_q8_K *y, int64_t k);

/*
 * K-quant weight quantizers (src/quant/kquants.c): k elements, a multiple
 * of 256 (not checked), written as k/256 blocks. Each follows ggml's
 * quantize_row_<type>_ref (ggml/src/ggml-quants.c, llama.cpp 0.7.0 /
 * ggml 0.27.0) operation by operation, no importance matrix; the output is
 * deterministic and byte-identical to llama-quantize's for these types.
 * Per 256-element super-block:
 *  q2_K: 16 sub-blocks of 16, each fitted x ~ s*q - m (q 0..3) by
 *        make_qkx2_quants (weights |x|, absolute error, 16 candidate
 *        scales (-0.5 + 0.1*i + 3) / (max - min)); s and m coded in 4 bits
 *        against d = max s / 15, dmin = max m / 15.
 *  q3_K: 16 sub-blocks of 16, x ~ s*(q - 4) (q 0..7) by make_q3_quants
 *        (weights x^2, 5 sweeps of coordinate descent); s coded in 6 signed
 *        bits against d = -S / 32 (S: the scale of largest |s|).
 *  q4_K: 8 sub-blocks of 32, x ~ s*q - m (q 0..15) by make_qkx2_quants
 *        (weights sqrt(mean x^2) + |x|, squared error, 21 candidate scales
 *        (-1 + 0.1*i + 15) / (max - min)); s, m in 6 bits against
 *        d = max s / 63, dmin = max m / 63.
 *  q5_K: as q4_K with q 0..31 and candidates (-0.5 + 0.1*i + 31) / (max -
 *        min), i = 0..15.
 *  q6_K: 16 sub-blocks of 16, x ~ s*(q - 32) (q 0..63) by make_qx_quants
 *        (weights x^2, scales -(32 + 0.1*i) / max, i = -9..9); s coded as
 *        int8 against d = -S / 128.
 * After the scales are coded, every element is re-quantized with the scale
 * (and min) it decodes with. An all-zero super-block gives d = 0 and codes
 * that dequantize to 0. */
void lb_quantize_row_q2_K_ref(const float *x, lb_block_q2_K *y, int64_t k);
void lb_quantize_row_q3_K_ref(const float *x, lb_block_q3_K *y, int64_t k);
void lb_quantize_row_q4_K_ref(const float *x, lb_block_q4_K *y, int64_t k);
void lb_quantize_row_q5_K_ref(const float *x, lb_block_q5_K *y, int64_t k);
void lb_quantize_row_q6_K_ref(const float *x, lb_block_q6_K *y, int64_t k);

/* Per-type dequantizers (k elements, a multiple of the block size; not
 * checked), each matching ggml's dequantize_row_<type>. */
void lb_dequantize_row_q4_0(const lb_block_q4_0 *x, float *y, int64_t k);
void lb_dequantize_row_q4_1(const lb_block_q4_1 *x, float *y, int64_t k);
void lb_dequantize_row_q5_0(const lb_block_q5_0 *x, float *y, int64_t k);
void lb_dequantize_row_q5_1(const lb_block_q5_1 *x, float *y, int64_t k);
void lb_dequantize_row_q8_0(const lb_block_q8_0 *x, float *y, int64_t k);
void lb_dequantize_row_q8_1(const lb_block_q8_1 *x, float *y, int64_t k);
void lb_dequantize_row_q2_K(const lb_block_q2_K *x, float *y, int64_t k);
void lb_dequantize_row_q3_K(const lb_block_q3_K *x, float *y, int64_t k);
void lb_dequantize_row_q4_K(const lb_block_q4_K *x, float *y, int64_t k);
void lb_dequantize_row_q5_K(const lb_block_q5_K *x, float *y, int64_t k);
void lb_dequantize_row_q6_K(const lb_block_q6_K *x, float *y, int64_t k);
void lb_dequantize_row_q8_K(const lb_block_q8_K *x, float *y, int64_t k);

/* Unpack the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K
 * scales[12] array (ggml's get_scale_min_k4). */
static inline void lb_get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc,
                                       uint8_t *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Unpack the sixteen 6-bit Q3_K scales (as stored, 0..63; the signed scale
 * is value - 32) from scales[12] (the layout ggml's dequantize_row_q3_K
 * decodes with kmask1/kmask2). */
static inline void lb_q3_K_scales(const uint8_t *s12, int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? (s12[j] & 0xF) : (s12[j - 8] >> 4);
        int hi = (s12[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
        out[j] = (int8_t)(lo | (hi << 4));
    }
}

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_QUANTS_H */
