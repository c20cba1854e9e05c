/*
 * IEEE binary16 and bfloat16 conversions.
 * f16 -> f32 is exact (see internal.h). f32 -> f16 follows the branch-free
 * rounding scheme of Maratea's FP16 library (also used by ggml), which rounds
 * to nearest-even, overflows to Inf and keeps NaN.
 */
#include "internal.h"

float lb_f16_to_f32(uint16_t h) { return lb_f16_to_f32_inline(h); }

uint16_t lb_f32_to_f16(float f) {
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (__builtin_fabsf(f) * scale_to_inf) * scale_to_zero;
    const uint32_t w = lb_fp32_to_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & UINT32_C(0x80000000);
    uint32_t bias = shl1_w & UINT32_C(0xFF000000);
    if (bias < UINT32_C(0x71000000)) bias = UINT32_C(0x71000000);
    base = lb_fp32_from_bits((bias >> 1) + UINT32_C(0x07800000)) + base;
    const uint32_t bits = lb_fp32_to_bits(base);
    const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
    const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
    const uint32_t nonsign = exp_bits + mantissa_bits;
    if (shl1_w > UINT32_C(0xFF000000)) {
        /* NaN: keep sign and the top mantissa bits, force quiet. */
        return (uint16_t)((sign >> 16) | 0x7E00u | ((w >> 13) & 0x01FFu));
    }
    return (uint16_t)((sign >> 16) | nonsign);
}

float lb_bf16_to_f32(uint16_t h) { return lb_bf16_to_f32_inline(h); }

uint16_t lb_f32_to_bf16(float f) {
    uint32_t u = lb_fp32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet it, keep sign */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

void lb_f16_to_f32_row(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = lb_f16_to_f32_inline(src[i]);
}
void lb_f32_to_f16_row(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = lb_f32_to_f16(src[i]);
}
void lb_bf16_to_f32_row(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = lb_bf16_to_f32_inline(src[i]);
}
void lb_f32_to_bf16_row(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = lb_f32_to_bf16(src[i]);
}
