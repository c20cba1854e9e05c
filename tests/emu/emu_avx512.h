/*
 * emu_avx512.h — portable C emulation of the AVX-512 (F/BW/VL/DQ), AVX-512
 * VNNI, AVX-VNNI and AMX-INT8 intrinsics that src/kernels/kernels_avx512vnni.c,
 * kernels_amx.c, kernels_avx_vnni.c, fp8_avx512.c and bnb_avx512.c use, so the same kernel source runs (in tests only) on a CPU
 * without those instructions. Test code: never part of the library.
 *
 * Use: a translation unit compiled with -mavx2 -mfma -mf16c (no -mavx512*,
 * no -mamx*) and -DLB_EMULATE_SIMD includes <immintrin.h> and then this
 * header. The kernel files do exactly that under LB_EMULATE_SIMD; see
 * tests/emu/kernels_*_emu.c and the test_kernels_emu block in CMakeLists.txt.
 *
 * How the names are taken over. GCC and clang declare every _mm512_* /
 * _tile_* intrinsic and the __m512* types in <immintrin.h> whatever the -m
 * flags (the bodies carry target attributes), so they cannot simply be
 * defined again. Instead this header, included after <immintrin.h>, defines
 * its own lb_emu_* types and functions and then macros
 *     #define __m512i        lb_emu_m512i
 *     #define _mm512_add_ps  lb_emu_mm512_add_ps      (and so on)
 * so every later use in the including file names the emulation; the real
 * AVX2/SSE/F16C intrinsics (_mm256_*, _mm_*, _cvtsh_ss) stay the real ones.
 * An AVX-512/AMX intrinsic a kernel uses that is not emulated here does not
 * compile in the emulated build (it is still the real one: its argument
 * types do not match the emulated vector types, or GCC/clang refuse to
 * inline it without the target feature); add it here, with a check in
 * tests/test_kernels_emu.c.
 *
 * Semantics follow the Intel Intrinsics Guide / SDM pseudo-code:
 *  - vectors are unions of lanes, lane 0 at the lowest address (x86 is
 *    little-endian, so the byte/word/dword views alias as in a register);
 *  - integer arithmetic wraps (computed in unsigned types: no C overflow)
 *    unless the instruction saturates (vpmaddubsw: signed 16-bit saturation);
 *    vpdpbusd does NOT saturate (the "s" form would);
 *  - float lanes use exactly one IEEE single operation each (+, *, fmaf for
 *    the fused multiply-add, C's int->float conversion which rounds in the
 *    current mode = MXCSR's round-to-nearest-even), so results are the
 *    hardware's bits; _mm512_reduce_add_ps adds in the Guide's tree order;
 *  - "undefined" upper lanes (_mm512_cast*256*512) are filled with a poison
 *    pattern (bytes 0xA5 / float NaN 0xFFA5A5A5) so a kernel that relies on
 *    them shows;
 *  - aligned loads (_mm512_load_*) fault (abort with a message, as #GP
 *    would) on an address not 64-byte aligned; masked stores write only the
 *    selected lanes (masked-off lanes are never touched, as on hardware);
 *  - AMX: per-thread tile configuration and tile registers (thread-local,
 *    tests/emu/emu_amx.c), LDTILECFG validity checks (#GP), tile
 *    instructions fault (#UD) when the thread has no configuration (e.g. a
 *    worker thread that never ran _tile_loadconfig, or after
 *    _tile_release) or the shapes are inconsistent.
 * Every emulated intrinsic is checked in tests/test_kernels_emu.c against
 * the real AVX2 instruction on each 256-bit half, or against a scalar
 * formula where AVX2 has no analogue (vpdpbusd, AMX tiles, masks, casts).
 */
#ifndef LB_EMU_AVX512_H
#define LB_EMU_AVX512_H

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "emu_avx512.h: compile with -mavx2 -mfma -mf16c (the real AVX2 intrinsics are used)"
#endif
#if defined(__AVX512F__) || defined(__AMX_TILE__)
#error "emu_avx512.h: compile WITHOUT -mavx512* / -mamx-* (the emulation replaces them)"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- types ------------------------------------------------------------- */
typedef union lb_emu_m512i {
    _Alignas(64) uint8_t u8[64];
    int8_t i8[64];
    uint16_t u16[32];
    int16_t i16[32];
    uint32_t u32[16];
    int32_t i32[16];
    uint64_t u64[8];
    int64_t i64[8];
} lb_emu_m512i;

typedef union lb_emu_m512 {
    _Alignas(64) float f[16];
    uint32_t u32[16];
} lb_emu_m512;

typedef uint16_t lb_emu_mmask16;
typedef uint32_t lb_emu_mmask32;
typedef uint64_t lb_emu_mmask64;

/* Report a fault the hardware would raise (#GP/#UD) and abort. */
void lb_emu_fault(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

#define LB_EMU_FN static inline __attribute__((always_inline, unused))
#define LB_EMU_POISON_I8 0xA5u
#define LB_EMU_POISON_F32 0xFFA5A5A5u

/* ---- set / cast / insert (AVX-512F, DQ) --------------------------------- */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_setzero_si512(void) {
    lb_emu_m512i r;
    memset(&r, 0, sizeof r);
    return r;
}
LB_EMU_FN lb_emu_m512 lb_emu_mm512_setzero_ps(void) {
    lb_emu_m512 r;
    memset(&r, 0, sizeof r); /* +0.0f: all bits zero */
    return r;
}
LB_EMU_FN lb_emu_m512i lb_emu_mm512_set1_epi8(char a) {
    lb_emu_m512i r;
    for (int i = 0; i < 64; i++) r.u8[i] = (uint8_t)a;
    return r;
}
LB_EMU_FN lb_emu_m512i lb_emu_mm512_set1_epi16(short a) {
    lb_emu_m512i r;
    for (int i = 0; i < 32; i++) r.u16[i] = (uint16_t)a;
    return r;
}
LB_EMU_FN lb_emu_m512 lb_emu_mm512_set1_ps(float a) {
    lb_emu_m512 r;
    for (int i = 0; i < 16; i++) r.f[i] = a;
    return r;
}
/* Upper 256 bits undefined (poisoned here). */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_castsi256_si512(__m256i a) {
    lb_emu_m512i r;
    memcpy(r.u8, &a, 32);
    memset(r.u8 + 32, (int)LB_EMU_POISON_I8, 32);
    return r;
}
LB_EMU_FN lb_emu_m512 lb_emu_mm512_castps256_ps512(__m256 a) {
    lb_emu_m512 r;
    memcpy(r.f, &a, 32);
    for (int i = 8; i < 16; i++) r.u32[i] = LB_EMU_POISON_F32;
    return r;
}
/* vinserti64x4: dst = a; dst[256*(imm&1) +: 256] = b */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_inserti64x4(lb_emu_m512i a, __m256i b, int imm) {
    memcpy(a.u8 + 32 * (imm & 1), &b, 32);
    return a;
}
/* vinsertf32x8 (AVX512DQ): dst = a; dst[256*(imm&1) +: 256] = b */
LB_EMU_FN lb_emu_m512 lb_emu_mm512_insertf32x8(lb_emu_m512 a, __m256 b, int imm) {
    memcpy(a.f + 8 * (imm & 1), &b, 32);
    return a;
}

/* ---- loads / stores ------------------------------------------------------ */
LB_EMU_FN void lb_emu_check_align64(const void *p, const char *what) {
    if ((uintptr_t)p & 63) lb_emu_fault("#GP: %s on %p, not 64-byte aligned", what, p);
}
LB_EMU_FN lb_emu_m512 lb_emu_mm512_load_ps(void const *p) {
    lb_emu_check_align64(p, "_mm512_load_ps");
    lb_emu_m512 r;
    memcpy(r.f, p, 64);
    return r;
}
LB_EMU_FN lb_emu_m512i lb_emu_mm512_load_si512(void const *p) {
    lb_emu_check_align64(p, "_mm512_load_si512");
    lb_emu_m512i r;
    memcpy(r.u8, p, 64);
    return r;
}
/* unaligned loads / store: any address */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_loadu_si512(void const *p) {
    lb_emu_m512i r;
    memcpy(r.u8, p, 64);
    return r;
}
LB_EMU_FN lb_emu_m512 lb_emu_mm512_loadu_ps(void const *p) {
    lb_emu_m512 r;
    memcpy(r.f, p, 64);
    return r;
}
LB_EMU_FN void lb_emu_mm512_storeu_ps(void *p, lb_emu_m512 a) { memcpy(p, a.f, 64); }
LB_EMU_FN void lb_emu_mm512_storeu_si512(void *p, lb_emu_m512i a) { memcpy(p, a.u8, 64); }
/* vcvtph2ps zmm: 16 binary16 -> binary32 (exact), lane i from bits 16i. */
LB_EMU_FN lb_emu_m512 lb_emu_mm512_cvtph_ps(__m256i h) {
    uint16_t u[16];
    memcpy(u, &h, 32);
    lb_emu_m512 r;
    for (int i = 0; i < 16; i++) r.f[i] = _cvtsh_ss(u[i]);
    return r;
}
/* vmovups with a writemask: lanes with k bit clear are not written. */
LB_EMU_FN void lb_emu_mm512_mask_storeu_ps(void *p, lb_emu_mmask16 k, lb_emu_m512 a) {
    for (int i = 0; i < 16; i++)
        if ((k >> i) & 1) memcpy((char *)p + 4 * i, &a.f[i], 4);
}

/* ---- integer (AVX-512F/BW) ------------------------------------------------ */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_sub_epi8(lb_emu_m512i a, lb_emu_m512i b) {
    lb_emu_m512i r;
    for (int i = 0; i < 64; i++) r.u8[i] = (uint8_t)(a.u8[i] - b.u8[i]);
    return r;
}
LB_EMU_FN lb_emu_m512i lb_emu_mm512_sub_epi32(lb_emu_m512i a, lb_emu_m512i b) {
    lb_emu_m512i r;
    for (int i = 0; i < 16; i++) r.u32[i] = a.u32[i] - b.u32[i];
    return r;
}
/* vpbroadcastd */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_set1_epi32(int a) {
    lb_emu_m512i r;
    for (int i = 0; i < 16; i++) r.u32[i] = (uint32_t)a;
    return r;
}
LB_EMU_FN lb_emu_m512i lb_emu_mm512_add_epi32(lb_emu_m512i a, lb_emu_m512i b) {
    lb_emu_m512i r;
    for (int i = 0; i < 16; i++) r.u32[i] = a.u32[i] + b.u32[i];
    return r;
}
LB_EMU_FN lb_emu_m512i lb_emu_mm512_and_si512(lb_emu_m512i a, lb_emu_m512i b) {
    lb_emu_m512i r;
    for (int i = 0; i < 8; i++) r.u64[i] = a.u64[i] & b.u64[i];
    return r;
}
LB_EMU_FN lb_emu_m512i lb_emu_mm512_xor_si512(lb_emu_m512i a, lb_emu_m512i b) {
    lb_emu_m512i r;
    for (int i = 0; i < 8; i++) r.u64[i] = a.u64[i] ^ b.u64[i];
    return r;
}
/* vpsrld by an immediate (>= 32 gives 0) */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_srli_epi32(lb_emu_m512i a, unsigned int n) {
    lb_emu_m512i r;
    for (int i = 0; i < 16; i++) r.u32[i] = n > 31 ? 0 : a.u32[i] >> n;
    return r;
}
/* vpord */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_or_si512(lb_emu_m512i a, lb_emu_m512i b) {
    lb_emu_m512i r;
    for (int i = 0; i < 8; i++) r.u64[i] = a.u64[i] | b.u64[i];
    return r;
}
/* vpslld by an immediate (>= 32 gives 0) */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_slli_epi32(lb_emu_m512i a, unsigned int n) {
    lb_emu_m512i r;
    for (int i = 0; i < 16; i++) r.u32[i] = n > 31 ? 0 : a.u32[i] << n;
    return r;
}
/* vpmulld: the low 32 bits of each 64-bit product */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_mullo_epi32(lb_emu_m512i a, lb_emu_m512i b) {
    lb_emu_m512i r;
    for (int i = 0; i < 16; i++) r.u32[i] = a.u32[i] * b.u32[i];
    return r;
}
/* vpgatherdd: lane i = the dword at base + idx[i] * scale (sign-extended
 * 32-bit index; unaligned reads are fine). */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_i32gather_epi32(lb_emu_m512i idx, void const *base, int scale) {
    lb_emu_m512i r;
    for (int i = 0; i < 16; i++)
        memcpy(&r.u32[i], (const char *)base + (ptrdiff_t)idx.i32[i] * scale, 4);
    return r;
}
/* vpunpck{l,h}{dq,qdq}: per 128-bit lane, interleave the low (high) halves */
LB_EMU_FN lb_emu_m512i lb_emu_unpack32(lb_emu_m512i a, lb_emu_m512i b, int hi) {
    lb_emu_m512i r;
    for (int l = 0; l < 4; l++)
        for (int i = 0; i < 2; i++) {
            r.u32[4 * l + 2 * i] = a.u32[4 * l + 2 * hi + i];
            r.u32[4 * l + 2 * i + 1] = b.u32[4 * l + 2 * hi + i];
        }
    return r;
}
LB_EMU_FN lb_emu_m512i lb_emu_unpack64(lb_emu_m512i a, lb_emu_m512i b, int hi) {
    lb_emu_m512i r;
    for (int l = 0; l < 4; l++) {
        r.u64[2 * l] = a.u64[2 * l + hi];
        r.u64[2 * l + 1] = b.u64[2 * l + hi];
    }
    return r;
}
LB_EMU_FN lb_emu_m512i lb_emu_mm512_unpacklo_epi32(lb_emu_m512i a, lb_emu_m512i b) { return lb_emu_unpack32(a, b, 0); }
LB_EMU_FN lb_emu_m512i lb_emu_mm512_unpackhi_epi32(lb_emu_m512i a, lb_emu_m512i b) { return lb_emu_unpack32(a, b, 1); }
LB_EMU_FN lb_emu_m512i lb_emu_mm512_unpacklo_epi64(lb_emu_m512i a, lb_emu_m512i b) { return lb_emu_unpack64(a, b, 0); }
LB_EMU_FN lb_emu_m512i lb_emu_mm512_unpackhi_epi64(lb_emu_m512i a, lb_emu_m512i b) { return lb_emu_unpack64(a, b, 1); }
/* vpabsb: |a| as an unsigned byte (|-128| = 0x80). */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_abs_epi8(lb_emu_m512i a) {
    lb_emu_m512i r;
    for (int i = 0; i < 64; i++)
        r.u8[i] = (uint8_t)(a.i8[i] < 0 ? -(int)a.i8[i] : (int)a.i8[i]);
    return r;
}
/* vpsubb with writemask: dst = k ? a - b : src */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_mask_sub_epi8(lb_emu_m512i src, lb_emu_mmask64 k,
                                                  lb_emu_m512i a, lb_emu_m512i b) {
    lb_emu_m512i r;
    for (int i = 0; i < 64; i++)
        r.u8[i] = ((k >> i) & 1) ? (uint8_t)(a.u8[i] - b.u8[i]) : src.u8[i];
    return r;
}
/* vmovdqu8 with zeromask: dst = k ? a : 0 */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_maskz_mov_epi8(lb_emu_mmask64 k, lb_emu_m512i a) {
    lb_emu_m512i r;
    for (int i = 0; i < 64; i++) r.u8[i] = ((k >> i) & 1) ? a.u8[i] : 0;
    return r;
}
/* vpmovb2m: bit i = sign bit of byte i */
LB_EMU_FN lb_emu_mmask64 lb_emu_mm512_movepi8_mask(lb_emu_m512i a) {
    lb_emu_mmask64 k = 0;
    for (int i = 0; i < 64; i++) k |= (uint64_t)(a.u8[i] >> 7) << i;
    return k;
}
/* vpmaddubsw: dst.i16[i] = SatS16(u8(a[2i]) * s8(b[2i]) + u8(a[2i+1]) * s8(b[2i+1])) */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_maddubs_epi16(lb_emu_m512i a, lb_emu_m512i b) {
    lb_emu_m512i r;
    for (int i = 0; i < 32; i++) {
        int32_t s = (int32_t)a.u8[2 * i] * b.i8[2 * i] + (int32_t)a.u8[2 * i + 1] * b.i8[2 * i + 1];
        r.i16[i] = (int16_t)(s > INT16_MAX ? INT16_MAX : s < INT16_MIN ? INT16_MIN : s);
    }
    return r;
}
/* vpmaddwd: dst.i32[i] = a16[2i]*b16[2i] + a16[2i+1]*b16[2i+1], wrapping
 * (only -32768^2 * 2 = 2^31 wraps, to INT32_MIN). */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_madd_epi16(lb_emu_m512i a, lb_emu_m512i b) {
    lb_emu_m512i r;
    for (int i = 0; i < 16; i++) {
        int64_t s = (int64_t)a.i16[2 * i] * b.i16[2 * i] + (int64_t)a.i16[2 * i + 1] * b.i16[2 * i + 1];
        r.u32[i] = (uint32_t)s;
    }
    return r;
}

/* ---- AVX-VNNI (VEX, 256-bit; kernels_avx_vnni.c) ------------------------------ */
/* vpdpbusd ymm ({vex}): as the 512-bit form on 8 dword lanes. The vectors
 * are real __m256i (AVX2 types), copied through byte arrays. */
LB_EMU_FN __m256i lb_emu_mm256_dpbusd_avx_epi32(__m256i src, __m256i a, __m256i b) {
    uint32_t s[8];
    uint8_t ua[32];
    int8_t sb[32];
    memcpy(s, &src, 32);
    memcpy(ua, &a, 32);
    memcpy(sb, &b, 32);
    for (int j = 0; j < 8; j++)
        for (int i = 0; i < 4; i++) s[j] += (uint32_t)((int32_t)ua[4 * j + i] * (int32_t)sb[4 * j + i]);
    __m256i r;
    memcpy(&r, s, 32);
    return r;
}

/* ---- AVX-512 VNNI ---------------------------------------------------------- */
/* vpdpbusd: dst.i32[j] = src[j] + sum_{i<4} u8(a[4j+i]) * s8(b[4j+i]),
 * wrapping (no saturation; that is vpdpbusds). */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_dpbusd_epi32(lb_emu_m512i src, lb_emu_m512i a,
                                                 lb_emu_m512i b) {
    lb_emu_m512i r;
    for (int j = 0; j < 16; j++) {
        uint32_t s = src.u32[j];
        for (int i = 0; i < 4; i++)
            s += (uint32_t)((int32_t)a.u8[4 * j + i] * (int32_t)b.i8[4 * j + i]);
        r.u32[j] = s;
    }
    return r;
}

/* ---- float (AVX-512F) -------------------------------------------------------- */
/* vcvtdq2ps: rounded per MXCSR (default round-to-nearest-even), as C's
 * int -> float conversion in the current rounding mode. */
LB_EMU_FN lb_emu_m512 lb_emu_mm512_cvtepi32_ps(lb_emu_m512i a) {
    lb_emu_m512 r;
    for (int i = 0; i < 16; i++) r.f[i] = (float)a.i32[i];
    return r;
}
LB_EMU_FN lb_emu_m512 lb_emu_mm512_add_ps(lb_emu_m512 a, lb_emu_m512 b) {
    lb_emu_m512 r;
    for (int i = 0; i < 16; i++) r.f[i] = a.f[i] + b.f[i];
    return r;
}
LB_EMU_FN lb_emu_m512 lb_emu_mm512_mul_ps(lb_emu_m512 a, lb_emu_m512 b) {
    lb_emu_m512 r;
    for (int i = 0; i < 16; i++) r.f[i] = a.f[i] * b.f[i];
    return r;
}
/* vfmadd: a * b + c with a single rounding */
LB_EMU_FN lb_emu_m512 lb_emu_mm512_fmadd_ps(lb_emu_m512 a, lb_emu_m512 b, lb_emu_m512 c) {
    lb_emu_m512 r;
    for (int i = 0; i < 16; i++) r.f[i] = fmaf(a.f[i], b.f[i], c.f[i]);
    return r;
}
/* Intrinsics Guide REDUCE_ADD: fold halves lane-wise, 16 -> 8 -> 4 -> 2,
 * then src[0] + src[1] (GCC's and clang's sequences add in this order). */
LB_EMU_FN float lb_emu_mm512_reduce_add_ps(lb_emu_m512 a) {
    float v[16];
    memcpy(v, a.f, sizeof v);
    for (int len = 8; len >= 2; len /= 2)
        for (int j = 0; j < len; j++) v[j] = v[j] + v[j + len];
    return v[0] + v[1];
}

/* ---- the FP8 / bitsandbytes kernels (src/kernels/fp8_avx512.c,
 * bnb_avx512.c) ------------------------------------------------------------ */
/* vpmovzxbd / vpmovsxbd zmm, xmm: 16 bytes widened to dwords */
LB_EMU_FN lb_emu_m512i lb_emu_mm512_cvtepu8_epi32(__m128i a) {
    uint8_t b[16];
    memcpy(b, &a, 16);
    lb_emu_m512i r;
    for (int i = 0; i < 16; i++) r.u32[i] = b[i];
    return r;
}
LB_EMU_FN lb_emu_m512i lb_emu_mm512_cvtepi8_epi32(__m128i a) {
    int8_t b[16];
    memcpy(b, &a, 16);
    lb_emu_m512i r;
    for (int i = 0; i < 16; i++) r.i32[i] = b[i];
    return r;
}
/* vpermps zmm: dst[i] = a[idx[i] & 15] */
LB_EMU_FN lb_emu_m512 lb_emu_mm512_permutexvar_ps(lb_emu_m512i idx, lb_emu_m512 a) {
    lb_emu_m512 r;
    for (int i = 0; i < 16; i++) r.u32[i] = a.u32[idx.u32[i] & 15];
    return r;
}
LB_EMU_FN lb_emu_m512 lb_emu_mm512_castsi512_ps(lb_emu_m512i a) {
    lb_emu_m512 r;
    memcpy(r.u32, a.u32, 64);
    return r;
}
LB_EMU_FN lb_emu_m512i lb_emu_mm512_castps_si512(lb_emu_m512 a) {
    lb_emu_m512i r;
    memcpy(r.u32, a.u32, 64);
    return r;
}
/* vpcmpeqd k, zmm, zmm */
LB_EMU_FN lb_emu_mmask16 lb_emu_mm512_cmpeq_epi32_mask(lb_emu_m512i a, lb_emu_m512i b) {
    lb_emu_mmask16 k = 0;
    for (int i = 0; i < 16; i++) k |= (lb_emu_mmask16)((a.u32[i] == b.u32[i]) << i);
    return k;
}
/* vmovaps zmm {k}: lanes with k set from a, the others from src */
LB_EMU_FN lb_emu_m512 lb_emu_mm512_mask_mov_ps(lb_emu_m512 src, lb_emu_mmask16 k, lb_emu_m512 a) {
    for (int i = 0; i < 16; i++)
        if ((k >> i) & 1) src.u32[i] = a.u32[i];
    return src;
}

/* ---- AMX-TILE / AMX-INT8 (state per thread, tests/emu/emu_amx.c) ----------- */
void lb_emu_tile_loadconfig(const void *cfg);
void lb_emu_tile_storeconfig(void *cfg);
void lb_emu_tile_release(void);
void lb_emu_tile_loadd(int dst, const void *base, long long stride);
void lb_emu_tile_stored(int src, void *base, long long stride);
void lb_emu_tile_zero(int dst);
/* TDPB{S,U}{S,U}D: a_signed/b_signed select the extension of src1/src2 bytes */
void lb_emu_tile_dpb(int dst, int src1, int src2, int a_signed, int b_signed);
/* Test hooks: whether the calling thread holds a tile configuration, and
 * process-wide counts of configurations loaded and released. */
int lb_emu_tile_configured(void);
void lb_emu_tile_counts(long *n_loadconfig, long *n_release);

/* ---- take over the names -------------------------------------------------- */
/* #undef first: some are macros in <immintrin.h> (the ones taking an
 * immediate, e.g. _mm512_inserti64x4 in clang, and many in GCC at -O0). */
#undef __m512i
#define __m512i lb_emu_m512i
#undef __m512
#define __m512 lb_emu_m512
#undef __mmask16
#define __mmask16 lb_emu_mmask16
#undef __mmask32
#define __mmask32 lb_emu_mmask32
#undef __mmask64
#define __mmask64 lb_emu_mmask64

#undef _mm512_setzero_si512
#define _mm512_setzero_si512 lb_emu_mm512_setzero_si512
#undef _mm512_setzero_ps
#define _mm512_setzero_ps lb_emu_mm512_setzero_ps
#undef _mm512_set1_epi8
#define _mm512_set1_epi8 lb_emu_mm512_set1_epi8
#undef _mm512_set1_epi16
#define _mm512_set1_epi16 lb_emu_mm512_set1_epi16
#undef _mm512_set1_ps
#define _mm512_set1_ps lb_emu_mm512_set1_ps
#undef _mm512_castsi256_si512
#define _mm512_castsi256_si512 lb_emu_mm512_castsi256_si512
#undef _mm512_castps256_ps512
#define _mm512_castps256_ps512 lb_emu_mm512_castps256_ps512
#undef _mm512_inserti64x4
#define _mm512_inserti64x4 lb_emu_mm512_inserti64x4
#undef _mm512_insertf32x8
#define _mm512_insertf32x8 lb_emu_mm512_insertf32x8
#undef _mm512_load_ps
#define _mm512_load_ps lb_emu_mm512_load_ps
#undef _mm512_load_si512
#define _mm512_load_si512 lb_emu_mm512_load_si512
#undef _mm512_loadu_si512
#define _mm512_loadu_si512 lb_emu_mm512_loadu_si512
#undef _mm512_loadu_ps
#define _mm512_loadu_ps lb_emu_mm512_loadu_ps
#undef _mm512_storeu_ps
#define _mm512_storeu_ps lb_emu_mm512_storeu_ps
#undef _mm512_storeu_si512
#define _mm512_storeu_si512 lb_emu_mm512_storeu_si512
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps lb_emu_mm512_cvtph_ps
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps lb_emu_mm512_mask_storeu_ps
#undef _mm512_sub_epi8
#define _mm512_sub_epi8 lb_emu_mm512_sub_epi8
#undef _mm512_sub_epi32
#define _mm512_sub_epi32 lb_emu_mm512_sub_epi32
#undef _mm512_set1_epi32
#define _mm512_set1_epi32 lb_emu_mm512_set1_epi32
#undef _mm512_add_epi32
#define _mm512_add_epi32 lb_emu_mm512_add_epi32
#undef _mm512_and_si512
#define _mm512_and_si512 lb_emu_mm512_and_si512
#undef _mm512_xor_si512
#define _mm512_xor_si512 lb_emu_mm512_xor_si512
#undef _mm512_srli_epi32
#define _mm512_srli_epi32 lb_emu_mm512_srli_epi32
#undef _mm512_or_si512
#define _mm512_or_si512 lb_emu_mm512_or_si512
#undef _mm512_slli_epi32
#define _mm512_slli_epi32 lb_emu_mm512_slli_epi32
#undef _mm512_mullo_epi32
#define _mm512_mullo_epi32 lb_emu_mm512_mullo_epi32
#undef _mm512_i32gather_epi32
#define _mm512_i32gather_epi32 lb_emu_mm512_i32gather_epi32
#undef _mm512_unpacklo_epi32
#define _mm512_unpacklo_epi32 lb_emu_mm512_unpacklo_epi32
#undef _mm512_unpackhi_epi32
#define _mm512_unpackhi_epi32 lb_emu_mm512_unpackhi_epi32
#undef _mm512_unpacklo_epi64
#define _mm512_unpacklo_epi64 lb_emu_mm512_unpacklo_epi64
#undef _mm512_unpackhi_epi64
#define _mm512_unpackhi_epi64 lb_emu_mm512_unpackhi_epi64
#undef _mm512_abs_epi8
#define _mm512_abs_epi8 lb_emu_mm512_abs_epi8
#undef _mm512_mask_sub_epi8
#define _mm512_mask_sub_epi8 lb_emu_mm512_mask_sub_epi8
#undef _mm512_maskz_mov_epi8
#define _mm512_maskz_mov_epi8 lb_emu_mm512_maskz_mov_epi8
#undef _mm512_movepi8_mask
#define _mm512_movepi8_mask lb_emu_mm512_movepi8_mask
#undef _mm512_maddubs_epi16
#define _mm512_maddubs_epi16 lb_emu_mm512_maddubs_epi16
#undef _mm512_madd_epi16
#define _mm512_madd_epi16 lb_emu_mm512_madd_epi16
#undef _mm512_dpbusd_epi32
#define _mm512_dpbusd_epi32 lb_emu_mm512_dpbusd_epi32
#undef _mm256_dpbusd_avx_epi32
#define _mm256_dpbusd_avx_epi32 lb_emu_mm256_dpbusd_avx_epi32
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps lb_emu_mm512_cvtepi32_ps
#undef _mm512_add_ps
#define _mm512_add_ps lb_emu_mm512_add_ps
#undef _mm512_mul_ps
#define _mm512_mul_ps lb_emu_mm512_mul_ps
#undef _mm512_fmadd_ps
#define _mm512_fmadd_ps lb_emu_mm512_fmadd_ps
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps lb_emu_mm512_reduce_add_ps

#undef _mm512_cvtepu8_epi32
#define _mm512_cvtepu8_epi32 lb_emu_mm512_cvtepu8_epi32
#undef _mm512_cvtepi8_epi32
#define _mm512_cvtepi8_epi32 lb_emu_mm512_cvtepi8_epi32
#undef _mm512_permutexvar_ps
#define _mm512_permutexvar_ps lb_emu_mm512_permutexvar_ps
#undef _mm512_castsi512_ps
#define _mm512_castsi512_ps lb_emu_mm512_castsi512_ps
#undef _mm512_castps_si512
#define _mm512_castps_si512 lb_emu_mm512_castps_si512
#undef _mm512_cmpeq_epi32_mask
#define _mm512_cmpeq_epi32_mask lb_emu_mm512_cmpeq_epi32_mask
#undef _mm512_mask_mov_ps
#define _mm512_mask_mov_ps lb_emu_mm512_mask_mov_ps

/* AMX: macros (taking tile numbers) or functions in GCC and clang. */
#undef _tile_loadconfig
#undef _tile_storeconfig
#undef _tile_release
#undef _tile_loadd
#undef _tile_stream_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbssd
#undef _tile_dpbsud
#undef _tile_dpbusd
#undef _tile_dpbuud
#define _tile_loadconfig(cfg) lb_emu_tile_loadconfig(cfg)
#define _tile_storeconfig(cfg) lb_emu_tile_storeconfig(cfg)
#define _tile_release() lb_emu_tile_release()
#define _tile_loadd(dst, base, stride) lb_emu_tile_loadd((dst), (base), (long long)(stride))
#define _tile_stream_loadd(dst, base, stride) lb_emu_tile_loadd((dst), (base), (long long)(stride))
#define _tile_stored(src, base, stride) lb_emu_tile_stored((src), (base), (long long)(stride))
#define _tile_zero(dst) lb_emu_tile_zero(dst)
#define _tile_dpbssd(dst, src1, src2) lb_emu_tile_dpb((dst), (src1), (src2), 1, 1)
#define _tile_dpbsud(dst, src1, src2) lb_emu_tile_dpb((dst), (src1), (src2), 1, 0)
#define _tile_dpbusd(dst, src1, src2) lb_emu_tile_dpb((dst), (src1), (src2), 0, 1)
#define _tile_dpbuud(dst, src1, src2) lb_emu_tile_dpb((dst), (src1), (src2), 0, 0)

#ifdef __cplusplus
}
#endif
#endif /* LB_EMU_AVX512_H */
