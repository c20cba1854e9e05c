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

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_QUANTS_H */
