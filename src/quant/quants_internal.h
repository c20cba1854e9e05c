/*
 * Private helpers shared by the block-format quantizers (formats.c,
 * kquants.c). Not installed.
 */
#ifndef LB_QUANTS_INTERNAL_H
#define LB_QUANTS_INTERNAL_H

#include "lowbit/quants.h"
#include "core/internal.h"

static inline float lb_q_h2f(lb_half h) { return lb_f16_to_f32_inline(h); }
static inline lb_half lb_q_f2h(float f) { return lb_f32_to_f16(f); }

/* ggml's nearest_int (ggml-quants.c): round half to even via the
 * 1.5*2^23 trick. Exact for |v| <= 4194303; outside that range the result
 * is meaningless but deterministic and free of undefined behaviour (ggml
 * only asserts the range in debug builds), so callers clamp it. */
static inline int lb_nearest_int(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

#endif /* LB_QUANTS_INTERNAL_H */
