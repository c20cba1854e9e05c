/*
 * BF16 x BF16 products with f32 accumulation (the calibration forwards of
 * `lowbit quantize --calib-dtype bf16`): scalar references and the
 * selection of the variant (bf16x_avx512bf16.c when the CPU has
 * AVX512_BF16). Contract in kernels_internal.h ("BF16 activations").
 */
#include "kernels_internal.h"
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

void lb_qact_bf16_ref(const float *x, void *y, int64_t n) {
    uint16_t *d = y;
    for (int64_t i = 0; i < n; i++) d[i] = lb_f32_to_bf16(x[i]);
}

void lb_qact_t_bf16_ref(const float *x, size_t ldx, int64_t rows, int64_t cols, uint16_t *y,
                        size_t ldy) {
    for (int64_t c = 0; c < cols; c++)
        for (int64_t r = 0; r < rows; r++)
            y[(size_t)c * ldy + (size_t)r] = lb_f32_to_bf16(x[(size_t)r * ldx + (size_t)c]);
}

/* w_bf16(r, i): weight element as the bf16 value the product uses */
static float wval(bool f32w, const uint8_t *row, int64_t i) {
    if (f32w) {
        float f;
        memcpy(&f, row + 4 * i, 4);
        return lb_bf16_to_f32_inline(lb_f32_to_bf16(f));
    }
    return lb_bf16_to_f32_inline(lb_rd_u16(row + 2 * i));
}

static void mm_bf16x_ref(bool f32w, int64_t n, const void *w, size_t ws, int64_t nr,
                         const void *a, size_t as, int64_t nt, float *y, size_t ldy) {
    for (int64_t t = 0; t < nt; t++) {
        const uint8_t *ar = (const uint8_t *)a + (size_t)t * as;
        for (int64_t r = 0; r < nr; r++) {
            const uint8_t *wr = (const uint8_t *)w + (size_t)r * ws;
            /* pairs (2k, 2k+1) as vdpbf16ps: the odd element's product,
             * then the even one's, each exact in f32, added in turn */
            float s = 0.0f;
            for (int64_t i = 0; i < n; i += 2) {
                if (i + 1 < n) {
                    const float p1 = wval(f32w, wr, i + 1) *
                                     lb_bf16_to_f32_inline(lb_rd_u16(ar + 2 * (i + 1)));
                    s += p1;
                }
                const float p0 = wval(f32w, wr, i) * lb_bf16_to_f32_inline(lb_rd_u16(ar + 2 * i));
                s += p0;
            }
            y[(size_t)t * ldy + (size_t)r] = s;
        }
    }
}

void lb_mm_f32w_bf16a_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                          size_t as, int64_t nt, float *y, size_t ldy) {
    mm_bf16x_ref(true, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_bf16w_bf16a_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                           size_t as, int64_t nt, float *y, size_t ldy) {
    mm_bf16x_ref(false, n, w, ws, nr, a, as, nt, y, ldy);
}

bool lb_kernels_bf16x(bool ref, lb_bf16x_kernels *k) {
    const lb_cpu_features *f = lb_cpu_get();
    const char *force = getenv("LB_FORCE_REF");
    const bool force_ref = force && force[0] && strcmp(force, "0") != 0;
    memset(k, 0, sizeof *k);
    if (ref || force_ref) {
        k->qact = lb_qact_bf16_ref;
        k->qact_t = lb_qact_t_bf16_ref;
        k->mm_f32w = lb_mm_f32w_bf16a_ref;
        k->mm_bf16w = lb_mm_bf16w_bf16a_ref;
        k->name = "bf16x_ref";
        return true;
    }
    if (lb_kernels_usable(LB_KV_AVX512) && f->avx512_bf16) {
        lb_kernels_fill_bf16x_avx512bf16(k);
        return true;
    }
    return false;
}
