/*
 * LoRA product, scalar reference (lowbit/lora.h lb_lora_apply_ref):
 *   tmp[j] = sum_i A[j, i] x[i]          j < rank   (A [rank, in])
 *   y[o]  += scale * sum_j B[o, j] tmp[j] o < out    (B [out, rank])
 * F32 or F16 factors (f16 widened exactly), f32 accumulation in index
 * order. The AVX2 twin (lora_avx2.c) sums in 8 lanes, so results agree to
 * f32 rounding, not bit for bit.
 */
#include "lowbit/lora.h"
#include "core/internal.h"

static float dot_row(lb_type t, const void *row, const float *x, int64_t n) {
    float s = 0.0f;
    if (t == LB_TYPE_F16) {
        const uint16_t *r = row;
        for (int64_t i = 0; i < n; i++) s += lb_f16_to_f32(r[i]) * x[i];
    } else {
        const float *r = row;
        for (int64_t i = 0; i < n; i++) s += r[i] * x[i];
    }
    return s;
}

void lb_lora_apply_ref(const lb_lora_linear *l, const float *x, float *y,
                       float scale, float *tmp) {
    const size_t es = l->type == LB_TYPE_F16 ? 2 : 4;
    const uint8_t *A = l->A, *B = l->B;
    for (int64_t j = 0; j < l->rank; j++)
        tmp[j] = dot_row(l->type, A + (size_t)j * (size_t)l->in * es, x, l->in);
    for (int64_t o = 0; o < l->out; o++)
        y[o] += scale * dot_row(l->type, B + (size_t)o * (size_t)l->rank * es,
                                tmp, l->rank);
}
