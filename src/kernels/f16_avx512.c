/*
 * F16 and BF16 weights x f32 activations for AVX-512 machines (compiled
 * with -mavx512f/bw/vl/dq, registered in the avx512 table and the tables
 * above it). The arithmetic is the AVX2 kernel's (kernels_avx2.c
 * mmf/tilef), bit for bit: per output y[t, r],
 *   acc (8 lanes) = 0; for i in steps of 8 while i + 8 <= n:
 *       acc = fma(w[r, i..i+8) converted to f32, a[t, i..i+8), acc)
 *   s = lb_hsum8_ps(acc) (simd_avx2.h: lo + hi, then pairs), then
 *   s += w[r, j] * a[t, j] for the tail j (the AVX2 kernel's expression),
 * with the conversions exact (F16: vcvtph2ps; BF16: the 16 bits shifted
 * into the top of an f32), so a model gives the same logits on AVX2 and
 * AVX-512 machines. What changes is the tile and the memory access:
 *  - decode (1-3 tokens): 8 weight rows x all tokens per pass (8 or more
 *    independent FMA chains: Zen 4's FMA latency is 4 cycles at 2 per
 *    cycle), the inner loop unrolled to one 64-byte line per row, with a
 *    software prefetch of each row PF_F16 bytes ahead, wrapping past the
 *    row's end into the same row of the next 8-row tile (short rows, e.g.
 *    896 wide = 28 lines, end before the hardware prefetchers have
 *    trained on the 8 streams);
 *  - 4 or more tokens: 4 weight rows x 6 tokens = 24 ymm accumulators
 *    (AVX-512VL's 32 ymm registers; f32_avx512.c's tile), each converted
 *    weight vector feeding 6 FMAs.
 * Only AVX2/F16C intrinsics are used (the 32 registers come from the
 * -mavx512vl code generation), so test_kernels_emu also builds this file
 * with AVX2 flags and checks the same bits on any AVX2 machine.
 */
#include "kernels_internal.h"
#include "simd_avx2.h"
#include "core/internal.h"

#include <immintrin.h>
#include <string.h>

#define LB_AI static inline __attribute__((always_inline))

typedef enum { H_F16, H_BF16 } hkind;

/* Prefetch distance of the decode tiles, in bytes ahead along each row
 * (measured with bench_kernels --cpu-time --dram on Zen 4, 896- and
 * 4864-wide rows: 512 was best of 256/512/768/1024/2048/4096, of a
 * prefetch of the next tile's rows at the same offset, of a sequential
 * prefetch of the next tile, and of none) */
#define PF_F16 512

LB_AI __m256 load8h(hkind k, const uint8_t *w, int64_t i) {
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(w + 2 * i));
    if (k == H_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
LB_AI float load1h(hkind k, const uint8_t *w, int64_t j) {
    uint16_t h;
    memcpy(&h, w + 2 * j, 2);
    if (k == H_F16) return _cvtsh_ss(h); /* exact, as kernels_avx2.c's h2f */
    return lb_bf16_to_f32_inline(h);
}

/* RM weight rows x RN tokens (RM <= 8, RN <= 6, RM * RN + RN + 1 <= 32
 * registers); pf: prefetch each row PF_F16 bytes ahead (past the row's
 * end: the same row of the next RM-row tile; prefetches never fault) */
LB_AI void tile_h(hkind k, const int RM, const int RN, const int pf, int64_t n,
                  const uint8_t *w, size_t ws, const float *a, size_t as, float *y,
                  size_t ldy) {
    __m256 acc[8][6];
#pragma GCC unroll 8
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 6
        for (int t = 0; t < RN; t++) acc[r][t] = _mm256_setzero_ps();
    int64_t i = 0;
    if (pf) {
        /* one 64-byte line (32 elements) of every row per iteration */
        for (; i + 32 <= n; i += 32) {
            size_t off = 2 * (size_t)i + PF_F16;
            if (off >= 2 * (size_t)n) off += (size_t)(RM - 1) * ws;
#pragma GCC unroll 8
            for (int r = 0; r < RM; r++)
                _mm_prefetch((const char *)(w + (size_t)r * ws + off), _MM_HINT_T0);
#pragma GCC unroll 4
            for (int u = 0; u < 32; u += 8) {
                __m256 av[6];
#pragma GCC unroll 6
                for (int t = 0; t < RN; t++) av[t] = _mm256_loadu_ps(a + (size_t)t * as + i + u);
#pragma GCC unroll 8
                for (int r = 0; r < RM; r++) {
                    const __m256 wv = load8h(k, w + (size_t)r * ws, i + u);
#pragma GCC unroll 6
                    for (int t = 0; t < RN; t++) acc[r][t] = _mm256_fmadd_ps(wv, av[t], acc[r][t]);
                }
            }
        }
    }
    for (; i + 8 <= n; i += 8) {
        __m256 av[6];
#pragma GCC unroll 6
        for (int t = 0; t < RN; t++) av[t] = _mm256_loadu_ps(a + (size_t)t * as + i);
#pragma GCC unroll 8
        for (int r = 0; r < RM; r++) {
            const __m256 wv = load8h(k, w + (size_t)r * ws, i);
#pragma GCC unroll 6
            for (int t = 0; t < RN; t++) acc[r][t] = _mm256_fmadd_ps(wv, av[t], acc[r][t]);
        }
    }
    for (int r = 0; r < RM; r++)
        for (int t = 0; t < RN; t++) {
            float s = lb_hsum8_ps(acc[r][t]);
            const float *ap = a + (size_t)t * as;
            for (int64_t j = i; j < n; j++) s += load1h(k, w + (size_t)r * ws, j) * ap[j];
            y[(size_t)t * ldy + (size_t)r] = s;
        }
}

/* decode: RN (1-3) tokens against all nr rows, 8-row tiles, then 4, then 1 */
LB_AI void rows_dec(hkind k, const int RN, int64_t n, const uint8_t *w, size_t ws, int64_t nr,
                    const float *a, size_t as, float *y, size_t ldy) {
    int64_t r = 0;
    for (; r + 8 <= nr; r += 8) tile_h(k, 8, RN, 1, n, w + (size_t)r * ws, ws, a, as, y + r, ldy);
    for (; r + 4 <= nr; r += 4) tile_h(k, 4, RN, 1, n, w + (size_t)r * ws, ws, a, as, y + r, ldy);
    for (; r < nr; r++) tile_h(k, 1, RN, 1, n, w + (size_t)r * ws, ws, a, as, y + r, ldy);
}

/* RN (1-6) tokens against all nr rows: 4-row tiles, then single rows */
LB_AI void rows_pre(hkind k, const int RN, int64_t n, const uint8_t *w, size_t ws, int64_t nr,
                    const float *a, size_t as, float *y, size_t ldy) {
    int64_t r = 0;
    for (; r + 4 <= nr; r += 4) tile_h(k, 4, RN, 0, n, w + (size_t)r * ws, ws, a, as, y + r, ldy);
    for (; r < nr; r++) tile_h(k, 1, RN, 0, n, w + (size_t)r * ws, ws, a, as, y + r, ldy);
}

LB_AI void mm_h(hkind k, int64_t n, const void *vw, size_t ws, int64_t nr, const void *va,
                size_t asb, int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw;
    const float *a = va;
    const size_t as = asb / sizeof(float);
    switch (nt) {
    case 1: rows_dec(k, 1, n, w, ws, nr, a, as, y, ldy); return;
    case 2: rows_dec(k, 2, n, w, ws, nr, a, as, y, ldy); return;
    case 3: rows_dec(k, 3, n, w, ws, nr, a, as, y, ldy); return;
    default: break;
    }
    int64_t t = 0;
    for (; t + 6 <= nt; t += 6) rows_pre(k, 6, n, w, ws, nr, a + (size_t)t * as, as, y + (size_t)t * ldy, ldy);
    const float *at = a + (size_t)t * as;
    float *yt = y + (size_t)t * ldy;
    switch (nt - t) {
    case 5: rows_pre(k, 5, n, w, ws, nr, at, as, yt, ldy); break;
    case 4: rows_pre(k, 4, n, w, ws, nr, at, as, yt, ldy); break;
    case 3: rows_pre(k, 3, n, w, ws, nr, at, as, yt, ldy); break;
    case 2: rows_pre(k, 2, n, w, ws, nr, at, as, yt, ldy); break;
    case 1: rows_pre(k, 1, n, w, ws, nr, at, as, yt, ldy); break;
    default: break;
    }
}

static void mm_f16_avx512(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                          size_t as, int64_t nt, float *y, size_t ldy) {
    mm_h(H_F16, n, w, ws, nr, a, as, nt, y, ldy);
}
static void mm_bf16_avx512(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                           size_t as, int64_t nt, float *y, size_t ldy) {
    mm_h(H_BF16, n, w, ws, nr, a, as, nt, y, ldy);
}

void LB_KSYM(lb_kernels_fill_f16_avx512)(lb_kernel_table *kt) {
    kt->w[LB_TYPE_F16].act_type = LB_TYPE_F32;
    kt->w[LB_TYPE_F16].mm = mm_f16_avx512;
    kt->w[LB_TYPE_F16].mm_name = "mm_f16_avx512";
    kt->w[LB_TYPE_BF16].act_type = LB_TYPE_F32;
    kt->w[LB_TYPE_BF16].mm = mm_bf16_avx512;
    kt->w[LB_TYPE_BF16].mm_name = "mm_bf16_avx512";
}
