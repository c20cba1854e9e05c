/* AVX-512 VNNI / AMX-INT8 kernels on any AVX2 machine, through
 * emulated intrinsics (tests/emu/emu_avx512.h, emu_amx.c; the kernel files
 * are compiled a second time with -DLB_EMULATE_SIMD, see CMakeLists.txt).
 *
 * 1. The emulation itself, so that an emulation bug cannot hide a kernel
 *    bug: every emulated intrinsic against the real AVX2 instruction on each
 *    256-bit half (random and extreme inputs), or against a scalar formula
 *    where AVX2 has no analogue (vpdpbusd, masks, casts, AMX tiles); the
 *    emulator's fault checks (tile use without a configuration in the
 *    thread, after release, bad shapes or config; misaligned aligned loads)
 *    in child processes.
 * 2. The emulated avx512_vnni and amx tables (each built like matmul.c's:
 *    a copy of the table below it plus the ISA's fill function) with every
 *    case of tests/kernel_cases.h, as test_kernels runs them on real
 *    variants.
 * 3. lb_matmul with the emulated VNNI and AMX tables against the AVX2
 *    kernels, bit for bit (the kernels claim it), on 1..70 tokens with token
 *    and row tails and odd row counts, 1/2/3 threads; every tile
 *    configuration loaded is released, and worker threads configure their
 *    own tiles (the emulation faults otherwise).
 * 4. Where the CPU really has AVX-512/VNNI/AMX: emulated and real kernels
 *    give the same bytes (the emulation checked against hardware).
 * Needs AVX2+FMA+F16C (the real AVX2 intrinsics run); skipped (77) without.
 * Standalone: ./build/test_kernels_emu (add -v for per-case lines). */
#include "th.h"
#include "kernel_cases.h"

#include "core/internal.h" /* LB_ARRAY_LEN */
#include "emu_avx512.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---------------------------------------------------------------------- */
/* Random inputs with extremes                                             */

static uint8_t rnd_byte(void) {
    static const uint8_t ext[] = {0x00, 0x01, 0x7F, 0x80, 0x81, 0xFF, 0xFE, 0x08, 0xF8};
    uint32_t r = rng_u32();
    return (r & 7) == 0 ? ext[(r >> 3) % sizeof ext] : (uint8_t)(r >> 8);
}
static void rnd_bytes(void *p, size_t n) {
    for (size_t i = 0; i < n; i++) ((uint8_t *)p)[i] = rnd_byte();
}
static __m512i rnd_m512i(void) {
    __m512i v;
    rnd_bytes(v.u8, 64);
    return v;
}
/* int16 lanes with -32768/32767 often (vpmaddwd's only wrapping case) */
static __m512i rnd_m512i_w16(void) {
    __m512i v = rnd_m512i();
    for (int i = 0; i < 32; i++) {
        uint32_t r = rng_u32() % 8;
        if (r == 0) v.i16[i] = INT16_MIN;
        if (r == 1) v.i16[i] = INT16_MAX;
    }
    return v;
}
/* float bits: mostly finite normals of all magnitudes, some zeros (+/-),
 * denormals, infinities and NaNs */
static float rnd_float_any(void) {
    uint32_t r = (rng_u32() << 1) ^ rng_u32(), b;
    switch (rng_u32() % 16) {
    case 0: b = r & 0x80000000u; break;                     /* +/-0 */
    case 1: b = (r & 0x807FFFFFu) | 1u; break;              /* denormal */
    case 2: b = (r & 0x80000000u) | 0x7F800000u; break;     /* +/-inf */
    case 3: b = r | 0x7F800001u; break;                     /* NaN */
    default: b = r; break;
    }
    float f;
    memcpy(&f, &b, 4);
    return f;
}
/* finite floats of moderate range (sums are order-sensitive, no overflow) */
static float rnd_float_fin(void) { return rng_f(-1, 1) * ldexpf(1.0f, rng_int(-20, 20)); }

/* Same bits, or both NaN (NaN payload choice between two NaN operands may
 * differ with operand order, which the compiler may commute; the kernels
 * never produce NaN from valid data). */
static int same_float(float a, float b) {
    return memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b));
}

static __m256i half_i(const __m512i *v, int h) { return _mm256_loadu_si256((const __m256i *)(v->u8 + 32 * h)); }
static __m256 half_f(const __m512 *v, int h) { return _mm256_loadu_ps(v->f + 8 * h); }
static int eq_half_i(const __m512i *v, int h, __m256i real) { return memcmp(v->u8 + 32 * h, &real, 32) == 0; }
static int eq_half_f(const __m512 *v, int h, __m256 real) {
    float r[8];
    _mm256_storeu_ps(r, real);
    for (int i = 0; i < 8; i++)
        if (!same_float(v->f[8 * h + i], r[i])) return 0;
    return 1;
}
/* 32 mask bits as a byte vector (0xFF where set), built without the emulation */
static __m256i mask_bytes(uint32_t k) {
    uint8_t b[32];
    for (int i = 0; i < 32; i++) b[i] = (k >> i) & 1 ? 0xFF : 0x00;
    return _mm256_loadu_si256((const __m256i *)b);
}

enum { ITERS = 3000 };

/* ---------------------------------------------------------------------- */
/* 1. The emulation                                                        */

static void test_emu_int_vs_avx2(void) {
    int bad[9] = {0};
    for (int it = 0; it < ITERS; it++) {
        const __m512i a = rnd_m512i(), b = rnd_m512i(), src = rnd_m512i();
        const __m512i wa = rnd_m512i_w16(), wb = rnd_m512i_w16();
        const __mmask64 k = ((uint64_t)rng_u32() << 32) | rng_u32();
        const __m512i sub8 = _mm512_sub_epi8(a, b), sub32 = _mm512_sub_epi32(a, b);
        const __m512i abs8 = _mm512_abs_epi8(a), mub = _mm512_maddubs_epi16(a, b);
        const __m512i mwd = _mm512_madd_epi16(wa, wb), msub = _mm512_mask_sub_epi8(src, k, a, b);
        const __m512i mz = _mm512_maskz_mov_epi8(k, a);
        const __mmask64 sgn = _mm512_movepi8_mask(a);
        for (int h = 0; h < 2; h++) {
            const __m256i ah = half_i(&a, h), bh = half_i(&b, h), sh = half_i(&src, h);
            const __m256i kb = mask_bytes((uint32_t)(k >> (32 * h)));
            bad[0] += !eq_half_i(&sub8, h, _mm256_sub_epi8(ah, bh));
            bad[1] += !eq_half_i(&sub32, h, _mm256_sub_epi32(ah, bh));
            bad[2] += !eq_half_i(&abs8, h, _mm256_abs_epi8(ah));
            bad[3] += !eq_half_i(&mub, h, _mm256_maddubs_epi16(ah, bh));
            bad[4] += !eq_half_i(&mwd, h, _mm256_madd_epi16(half_i(&wa, h), half_i(&wb, h)));
            bad[5] += !eq_half_i(&msub, h, _mm256_blendv_epi8(sh, _mm256_sub_epi8(ah, bh), kb));
            bad[6] += !eq_half_i(&mz, h, _mm256_and_si256(ah, kb));
            bad[7] += (uint32_t)(sgn >> (32 * h)) != (uint32_t)_mm256_movemask_epi8(ah);
        }
        /* set1 / setzero */
        const char c8 = (char)rnd_byte();
        const short c16 = (short)(rng_u32() & 0xFFFF);
        const __m512i s8 = _mm512_set1_epi8(c8), s16 = _mm512_set1_epi16(c16);
        const __m512i z = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++)
            bad[8] += !eq_half_i(&s8, h, _mm256_set1_epi8(c8)) ||
                      !eq_half_i(&s16, h, _mm256_set1_epi16(c16)) ||
                      !eq_half_i(&z, h, _mm256_setzero_si256());
    }
    static const char *const names[9] = {"sub_epi8", "sub_epi32", "abs_epi8", "maddubs_epi16",
                                         "madd_epi16", "mask_sub_epi8", "maskz_mov_epi8",
                                         "movepi8_mask", "set1_epi8/epi16, setzero_si512"};
    for (int i = 0; i < 9; i++) TH_CHECK_MSG(bad[i] == 0, "_mm512_%s: %d mismatches", names[i], bad[i]);
}

/* The intrinsics of the VNNI kernel's repack and sums: add/and/xor/srli/
 * set1_epi32 against AVX2 on each half, the dword gather against memcpy. */
static void test_emu_int32_ops(void) {
    int bad[10] = {0};
    uint8_t mem[4096];
    rnd_bytes(mem, sizeof mem);
    for (int it = 0; it < ITERS; it++) {
        const __m512i a = rnd_m512i(), b = rnd_m512i();
        const unsigned sh = rng_u32() % 40;
        const int c32 = (int)rng_u32();
        const __m512i add = _mm512_add_epi32(a, b), and = _mm512_and_si512(a, b);
        const __m512i xr = _mm512_xor_si512(a, b), sr = _mm512_srli_epi32(a, sh);
        const __m512i s32 = _mm512_set1_epi32(c32);
        const __m512i orr = _mm512_or_si512(a, b), sl = _mm512_slli_epi32(a, sh);
        const __m512i ml = _mm512_mullo_epi32(a, b);
        const __m512i ul32 = _mm512_unpacklo_epi32(a, b), uh32 = _mm512_unpackhi_epi32(a, b);
        const __m512i ul64 = _mm512_unpacklo_epi64(a, b), uh64 = _mm512_unpackhi_epi64(a, b);
        for (int h = 0; h < 2; h++) {
            const __m256i ah = half_i(&a, h), bh = half_i(&b, h);
            bad[0] += !eq_half_i(&add, h, _mm256_add_epi32(ah, bh));
            bad[1] += !eq_half_i(&and, h, _mm256_and_si256(ah, bh));
            bad[2] += !eq_half_i(&xr, h, _mm256_xor_si256(ah, bh));
            bad[3] += !eq_half_i(&sr, h, _mm256_srl_epi32(ah, _mm_cvtsi32_si128((int)sh)));
            bad[4] += !eq_half_i(&s32, h, _mm256_set1_epi32(c32));
            bad[7] += !eq_half_i(&orr, h, _mm256_or_si256(ah, bh));
            bad[8] += !eq_half_i(&sl, h, _mm256_sll_epi32(ah, _mm_cvtsi32_si128((int)sh)));
            bad[9] += !eq_half_i(&ml, h, _mm256_mullo_epi32(ah, bh));
            bad[6] += !eq_half_i(&ul32, h, _mm256_unpacklo_epi32(ah, bh)) ||
                      !eq_half_i(&uh32, h, _mm256_unpackhi_epi32(ah, bh)) ||
                      !eq_half_i(&ul64, h, _mm256_unpacklo_epi64(ah, bh)) ||
                      !eq_half_i(&uh64, h, _mm256_unpackhi_epi64(ah, bh));
        }
        __m512i idx;
        for (int j = 0; j < 16; j++) idx.i32[j] = rng_int(0, 1000);
        const int scale = 1 << (rng_u32() % 3);
        const __m512i g = _mm512_i32gather_epi32(idx, mem + 8, scale);
        for (int j = 0; j < 16; j++) {
            uint32_t want;
            memcpy(&want, mem + 8 + (size_t)idx.i32[j] * (size_t)scale, 4);
            bad[5] += g.u32[j] != want;
        }
    }
    static const char *const names[10] = {"add_epi32", "and_si512", "xor_si512", "srli_epi32",
                                          "set1_epi32", "i32gather_epi32", "unpack{lo,hi}_epi{32,64}",
                                          "or_si512", "slli_epi32", "mullo_epi32"};
    for (int i = 0; i < 10; i++) TH_CHECK_MSG(bad[i] == 0, "_mm512_%s: %d mismatches", names[i], bad[i]);
}

/* vpdpbusd: src + sum of 4 zero-extended(a) x sign-extended(b) products,
 * widened to 64 bits and wrapped to 32 (no saturation). */
static void test_emu_dpbusd_vs_scalar(void) {
    int bad = 0;
    for (int it = 0; it < ITERS; it++) {
        __m512i src = rnd_m512i();
        const __m512i a = rnd_m512i(), b = rnd_m512i();
        for (int j = 0; j < 16; j++) /* near the int32 limits: the wrap shows */
            if (rng_u32() % 4 == 0) src.i32[j] = (rng_u32() & 1) ? INT32_MAX - rng_int(0, 200000)
                                                                 : INT32_MIN + rng_int(0, 200000);
        const __m512i r = _mm512_dpbusd_epi32(src, a, b);
        for (int j = 0; j < 16; j++) {
            int64_t s = src.i32[j];
            for (int i = 0; i < 4; i++) s += (int64_t)a.u8[4 * j + i] * (int64_t)b.i8[4 * j + i];
            bad += r.u32[j] != (uint32_t)(uint64_t)s;
        }
    }
    /* saturation would differ here: INT32_MAX + 4 * 255 * 127 wraps */
    __m512i src = _mm512_set1_epi8(0), a = _mm512_set1_epi8((char)0xFF), b = _mm512_set1_epi8(127);
    for (int j = 0; j < 16; j++) src.i32[j] = INT32_MAX;
    const __m512i r = _mm512_dpbusd_epi32(src, a, b);
    TH_CHECK_INT(r.i32[0], (int32_t)(uint32_t)((uint64_t)INT32_MAX + 4 * 255 * 127));
    TH_CHECK_MSG(bad == 0, "_mm512_dpbusd_epi32: %d lanes differ from the scalar formula", bad);
    /* the 256-bit VEX form (AVX-VNNI), the same formula on 8 lanes */
    bad = 0;
    for (int it = 0; it < ITERS; it++) {
        uint8_t sb[32], ab[32], bb[32];
        rnd_bytes(sb, 32), rnd_bytes(ab, 32), rnd_bytes(bb, 32);
        __m256i s8, a8, b8;
        memcpy(&s8, sb, 32), memcpy(&a8, ab, 32), memcpy(&b8, bb, 32);
        const __m256i r8 = _mm256_dpbusd_avx_epi32(s8, a8, b8);
        int32_t src32[8], r32[8];
        memcpy(src32, sb, 32), memcpy(r32, &r8, 32);
        for (int j = 0; j < 8; j++) {
            int64_t v = src32[j];
            for (int i = 0; i < 4; i++) v += (int64_t)ab[4 * j + i] * (int64_t)(int8_t)bb[4 * j + i];
            bad += (uint32_t)r32[j] != (uint32_t)(uint64_t)v;
        }
    }
    TH_CHECK_MSG(bad == 0, "_mm256_dpbusd_avx_epi32: %d lanes differ from the scalar formula", bad);
}

static void test_emu_float_vs_avx2(void) {
    int bad[6] = {0};
    for (int it = 0; it < ITERS; it++) {
        __m512 a, b, c;
        __m512i n;
        for (int i = 0; i < 16; i++) {
            a.f[i] = rnd_float_any(), b.f[i] = rnd_float_any(), c.f[i] = rnd_float_any();
            n.u32[i] = rng_u32() ^ (rng_u32() << 16); /* full int32 range */
            if (i < 4) n.i32[i] = (int32_t[]){INT32_MIN, INT32_MAX, (1 << 24) + 1, -(1 << 25) - 3}[i];
        }
        if (it % 2) /* products near each other's magnitude: fma's single rounding shows */
            for (int i = 0; i < 16; i++) {
                a.f[i] = rnd_float_fin(), b.f[i] = rnd_float_fin();
                c.f[i] = -a.f[i] * b.f[i] * (1.0f + rng_f(-1e-6f, 1e-6f));
            }
        const __m512 add = _mm512_add_ps(a, b), mul = _mm512_mul_ps(a, b);
        const __m512 fma = _mm512_fmadd_ps(a, b, c), cvt = _mm512_cvtepi32_ps(n);
        const float f1 = rnd_float_any();
        const __m512 s1 = _mm512_set1_ps(f1), z = _mm512_setzero_ps();
        for (int h = 0; h < 2; h++) {
            const __m256 ah = half_f(&a, h), bh = half_f(&b, h), ch = half_f(&c, h);
            bad[0] += !eq_half_f(&add, h, _mm256_add_ps(ah, bh));
            bad[1] += !eq_half_f(&mul, h, _mm256_mul_ps(ah, bh));
            bad[2] += !eq_half_f(&fma, h, _mm256_fmadd_ps(ah, bh, ch));
            bad[3] += !eq_half_f(&cvt, h, _mm256_cvtepi32_ps(half_i(&n, h)));
            bad[4] += !eq_half_f(&s1, h, _mm256_set1_ps(f1));
            bad[5] += memcmp(z.f + 8 * h, (float[8]){0}, 32) != 0; /* +0.0f bits */
        }
    }
    static const char *const names[6] = {"add_ps", "mul_ps", "fmadd_ps", "cvtepi32_ps",
                                         "set1_ps", "setzero_ps"};
    for (int i = 0; i < 6; i++) TH_CHECK_MSG(bad[i] == 0, "_mm512_%s: %d mismatches", names[i], bad[i]);
}

/* _mm512_reduce_add_ps: the Guide's tree (16 -> 8 -> 4 -> 2 -> 1), done with
 * real AVX instructions; a left-to-right sum must differ somewhere (the
 * inputs are order-sensitive, so the check can tell orders apart). */
static void test_emu_reduce_add(void) {
    int bad = 0, order_differs = 0;
    for (int it = 0; it < ITERS; it++) {
        __m512 v;
        for (int i = 0; i < 16; i++) v.f[i] = rnd_float_fin();
        const float got = _mm512_reduce_add_ps(v);
        const __m256 s8 = _mm256_add_ps(half_f(&v, 0), half_f(&v, 1));
        __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
        s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));          /* [0]+[2], [1]+[3] */
        const float want = _mm_cvtss_f32(_mm_add_ss(s4, _mm_movehdup_ps(s4)));
        bad += memcmp(&got, &want, 4) != 0;
        float seq = 0;
        for (int i = 0; i < 16; i++) seq += v.f[i];
        order_differs += memcmp(&seq, &want, 4) != 0;
    }
    TH_CHECK_MSG(bad == 0, "_mm512_reduce_add_ps: %d sums differ from the tree order", bad);
    TH_CHECK_MSG(order_differs > ITERS / 10, "reduce_add inputs not order-sensitive (%d)",
                 order_differs);
}

static void test_emu_cast_insert_load_store(void) {
    int bad = 0;
    for (int it = 0; it < ITERS / 10; it++) {
        uint8_t lo[32], hi[32];
        rnd_bytes(lo, 32), rnd_bytes(hi, 32);
        const __m256i l = _mm256_loadu_si256((const __m256i *)lo), u = _mm256_loadu_si256((const __m256i *)hi);
        const __m512i c = _mm512_castsi256_si512(l);
        bad += memcmp(c.u8, lo, 32) != 0; /* upper half undefined: not checked */
        const __m512i i0 = _mm512_inserti64x4(c, u, 0), i1 = _mm512_inserti64x4(c, u, 1);
        bad += memcmp(i0.u8, hi, 32) != 0 || memcmp(i0.u8 + 32, c.u8 + 32, 32) != 0;
        bad += memcmp(i1.u8, lo, 32) != 0 || memcmp(i1.u8 + 32, hi, 32) != 0;
        float fl[8], fh[8];
        for (int i = 0; i < 8; i++) fl[i] = rnd_float_any(), fh[i] = rnd_float_any();
        const __m512 cf = _mm512_castps256_ps512(_mm256_loadu_ps(fl));
        bad += memcmp(cf.f, fl, 32) != 0;
        const __m512 f0 = _mm512_insertf32x8(cf, _mm256_loadu_ps(fh), 0);
        const __m512 f1 = _mm512_insertf32x8(cf, _mm256_loadu_ps(fh), 1);
        bad += memcmp(f0.f, fh, 32) != 0 || memcmp(f0.f + 8, cf.f + 8, 32) != 0;
        bad += memcmp(f1.f, fl, 32) != 0 || memcmp(f1.f + 8, fh, 32) != 0;
        /* aligned loads */
        _Alignas(64) uint8_t mem[128];
        rnd_bytes(mem, sizeof mem);
        const __m512i li = _mm512_load_si512(mem + 64);
        const __m512 lf = _mm512_load_ps(mem);
        bad += memcmp(li.u8, mem + 64, 64) != 0 || memcmp(lf.f, mem, 64) != 0;
        /* unaligned loads/store, vcvtph2ps vs F16C's on each half */
        const int o = rng_int(1, 63);
        const __m512i lu = _mm512_loadu_si512(mem + o);
        const __m512 lfu = _mm512_loadu_ps(mem + o);
        bad += memcmp(lu.u8, mem + o, 64) != 0 || memcmp(lfu.f, mem + o, 64) != 0;
        uint8_t st[72];
        memset(st, 0x5A, sizeof st);
        _mm512_storeu_ps(st + 3, lfu);
        bad += memcmp(st + 3, mem + o, 64) != 0 || st[2] != 0x5A || st[67] != 0x5A;
        const __m256i hv = _mm256_loadu_si256((const __m256i *)(mem + o));
        const __m512 cv = _mm512_cvtph_ps(hv);
        float cr[16];
        _mm256_storeu_ps(cr, _mm256_cvtph_ps(_mm256_castsi256_si128(hv)));
        _mm256_storeu_ps(cr + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(hv, 1)));
        bad += memcmp(cv.f, cr, 64) != 0;
        /* masked store vs AVX's vmaskmovps on each half; guards untouched */
        float out_e[20], out_r[20], val[16];
        for (int i = 0; i < 20; i++) out_e[i] = out_r[i] = (float)(1000 + i);
        for (int i = 0; i < 16; i++) val[i] = rnd_float_fin();
        const __mmask16 k = (__mmask16)rng_u32();
        __m512 vv;
        memcpy(vv.f, val, 64);
        _mm512_mask_storeu_ps(out_e + 2, k, vv);
        for (int h = 0; h < 2; h++) {
            int32_t m[8];
            for (int i = 0; i < 8; i++) m[i] = (k >> (8 * h + i)) & 1 ? -1 : 0;
            _mm256_maskstore_ps(out_r + 2 + 8 * h, _mm256_loadu_si256((const __m256i *)m),
                                _mm256_loadu_ps(val + 8 * h));
        }
        bad += memcmp(out_e, out_r, sizeof out_e) != 0;
    }
    TH_CHECK_MSG(bad == 0, "cast/insert/load/mask_storeu: %d mismatches", bad);
}

/* AMX: random shapes, tile numbers and strides; loadd/dpb*d/stored against
 * the scalar matrix formula C[m][n] += sum_k A[m][k] * B[k/4][4n + k%4]
 * (bytes of A and B sign- or zero-extended per instruction), rows padded
 * with guard bytes that must stay untouched; storeconfig round trip;
 * tilezero. */
static void test_emu_amx_vs_scalar(void) {
    int bad = 0;
    for (int it = 0; it < 400; it++) {
        const int M = rng_int(1, 16), N = rng_int(1, 16), K = 4 * rng_int(1, 16); /* K bytes */
        int tc = rng_int(0, 7), ta, tb;
        do ta = rng_int(0, 7); while (ta == tc);
        do tb = rng_int(0, 7); while (tb == tc || tb == ta);
        _Alignas(64) uint8_t cfg[64] = {0}, cfg2[64];
        cfg[0] = 1;
        const int colsb[3] = {4 * N, K, 4 * N}, rows[3] = {M, M, K / 4}, tiles[3] = {tc, ta, tb};
        for (int i = 0; i < 3; i++) {
            cfg[16 + 2 * tiles[i]] = (uint8_t)colsb[i];
            cfg[48 + tiles[i]] = (uint8_t)rows[i];
        }
        _tile_loadconfig(cfg);
        _tile_storeconfig(cfg2);
        bad += memcmp(cfg, cfg2, 64) != 0;
        const int sa = K + rng_int(0, 9), sb = 4 * N + rng_int(0, 9), sc = 4 * N + 4 * rng_int(0, 3);
        uint8_t *A = malloc((size_t)(sa * M)), *B = malloc((size_t)(sb * K / 4));
        uint8_t *C = malloc((size_t)(sc * M)), *C2 = malloc((size_t)(sc * M));
        rnd_bytes(A, (size_t)(sa * M)), rnd_bytes(B, (size_t)(sb * K / 4));
        rnd_bytes(C, (size_t)(sc * M));
        const int kind = rng_int(0, 3), as = kind & 2, bs = kind & 1;
        memcpy(C2, C, (size_t)(sc * M));
        _tile_loadd(tc, C, sc);
        _tile_loadd(ta, A, sa);
        _tile_loadd(tb, B, sb);
        lb_emu_tile_dpb(tc, ta, tb, as, bs);
        _tile_stored(tc, C2, sc);
        for (int m = 0; m < M; m++) {
            for (int n = 0; n < N; n++) {
                int32_t c0;
                memcpy(&c0, C + m * sc + 4 * n, 4);
                int64_t s = c0;
                for (int k = 0; k < K; k++) {
                    const uint8_t x = A[m * sa + k], y = B[(k / 4) * sb + 4 * n + k % 4];
                    s += (int64_t)(as ? (int8_t)x : x) * (int64_t)(bs ? (int8_t)y : y);
                }
                int32_t got;
                memcpy(&got, C2 + m * sc + 4 * n, 4);
                bad += (uint32_t)got != (uint32_t)(uint64_t)s;
            }
            bad += memcmp(C2 + m * sc + 4 * N, C + m * sc + 4 * N, (size_t)(sc - 4 * N)) != 0;
        }
        _tile_zero(tc);
        _tile_stored(tc, C2, sc);
        for (int m = 0; m < M; m++)
            for (int i = 0; i < 4 * N; i++) bad += C2[m * sc + i] != 0;
        _tile_release();
        bad += lb_emu_tile_configured() != 0;
        free(A), free(B), free(C), free(C2);
    }
    /* the named intrinsics map to the right signedness */
    _Alignas(64) uint8_t cfg[64] = {0};
    cfg[0] = 1;
    for (int t = 0; t < 3; t++) cfg[16 + 2 * t] = 4, cfg[48 + t] = 1;
    const uint8_t a4[4] = {0xFF, 1, 1, 1}, b4[4] = {0xFF, 1, 1, 1};
    const int32_t want[4] = {1 + 3, 255 * -1 + 3, -1 * 255 + 3, 255 * 255 + 3}; /* ss su us uu */
    for (int kind = 0; kind < 4; kind++) {
        _tile_loadconfig(cfg);
        _tile_loadd(1, a4, 4);
        _tile_loadd(2, b4, 4);
        if (kind == 0) _tile_dpbssd(0, 1, 2);
        if (kind == 1) _tile_dpbsud(0, 1, 2);
        if (kind == 2) _tile_dpbusd(0, 1, 2);
        if (kind == 3) _tile_dpbuud(0, 1, 2);
        int32_t c;
        _tile_stored(0, &c, 4);
        TH_CHECK_INT(c, want[kind]);
        _tile_release();
    }
    TH_CHECK_MSG(bad == 0, "AMX emulation: %d mismatches against the scalar formula", bad);
}

/* The emulator's fault checks, each in a child that must die of SIGABRT. */
static void *thread_tile_zero(void *p) {
    (void)p;
    _tile_zero(0); /* this thread never loaded a configuration */
    return NULL;
}
static void fault_tile_other_thread(void) {
    _Alignas(64) uint8_t cfg[64] = {0};
    cfg[0] = 1, cfg[16] = 64, cfg[48] = 16;
    _tile_loadconfig(cfg); /* main thread only */
    pthread_t th;
    pthread_create(&th, NULL, thread_tile_zero, NULL);
    pthread_join(th, NULL);
}
static void fault_tile_after_release(void) {
    _Alignas(64) uint8_t cfg[64] = {0};
    cfg[0] = 1, cfg[16] = 64, cfg[48] = 16;
    _tile_loadconfig(cfg);
    _tile_release();
    _tile_zero(0);
}
static void fault_tile_shape(void) {
    _Alignas(64) uint8_t cfg[64] = {0};
    cfg[0] = 1;
    cfg[16] = 64, cfg[48] = 16; /* C 16 x 64 */
    cfg[18] = 32, cfg[49] = 16; /* A 16 x 32: K = 8 dwords */
    cfg[20] = 64, cfg[50] = 16; /* B must have 8 rows, has 16 */
    _tile_loadconfig(cfg);
    _tile_dpbssd(0, 1, 2);
}
static void fault_tile_bad_config(void) {
    _Alignas(64) uint8_t cfg[64] = {0};
    cfg[0] = 1, cfg[16] = 64, cfg[48] = 17; /* 17 rows */
    _tile_loadconfig(cfg);
}
static void fault_tile_unconfigured_tile(void) {
    _Alignas(64) uint8_t cfg[64] = {0}, buf[64];
    cfg[0] = 1, cfg[16] = 64, cfg[48] = 1;
    _tile_loadconfig(cfg);
    _tile_loadd(3, buf, 64); /* tile 3 has no rows */
}
static void fault_misaligned_load(void) {
    _Alignas(64) float buf[32] = {0};
    volatile __m512 v = _mm512_load_ps(buf + 1);
    (void)v;
}
static int dies_of_abort(void (*fn)(void)) {
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        fn();
        _exit(0);
    }
    int status = 0;
    if (pid <= 0 || waitpid(pid, &status, 0) != pid) return 0;
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}
static void test_emu_faults(void) {
    TH_CHECK_MSG(dies_of_abort(fault_tile_other_thread), "tile use in an unconfigured thread");
    TH_CHECK_MSG(dies_of_abort(fault_tile_after_release), "tile use after _tile_release");
    TH_CHECK_MSG(dies_of_abort(fault_tile_shape), "dpbssd with inconsistent shapes");
    TH_CHECK_MSG(dies_of_abort(fault_tile_bad_config), "LDTILECFG with 17 rows");
    TH_CHECK_MSG(dies_of_abort(fault_tile_unconfigured_tile), "load into an unconfigured tile");
    TH_CHECK_MSG(dies_of_abort(fault_misaligned_load), "_mm512_load_ps misaligned");
}

/* ---------------------------------------------------------------------- */
/* 2. The emulated tables with the kernel cases                            */

enum { E_AVXVNNI, E_VNNI, E_AMX, E_COUNT };
static lb_kernel_table g_emu[E_COUNT];
static const int g_real_v[E_COUNT] = {LB_KV_AVX_VNNI, LB_KV_AVX512_VNNI, LB_KV_AMX};
static int n_cases[E_COUNT];

/* As matmul.c's init_tables: each table is its base plus the ISA's fill
 * function (here the emulated build's): avx2 for avx_vnni, avx2 for
 * avx512_vnni too (the avx512 table in between adds the FP8 / bitsandbytes /
 * F16 / F32 / attention kernels, emulated and tested further below),
 * avx512_vnni for amx. */
static void build_emu_tables(void) {
    g_emu[E_AVXVNNI] = *lb_kernels_table(LB_KV_AVX2);
    g_emu[E_AVXVNNI].name = "avx_vnni(emu)";
    lb_kernels_fill_avx_vnni_emu(&g_emu[E_AVXVNNI]);
    g_emu[E_VNNI] = *lb_kernels_table(LB_KV_AVX2);
    g_emu[E_VNNI].name = "avx512_vnni(emu)";
    lb_kernels_fill_avx512_vnni_emu(&g_emu[E_VNNI]);
    g_emu[E_AMX] = g_emu[E_VNNI];
    g_emu[E_AMX].name = "amx(emu)";
    lb_kernels_fill_amx_emu(&g_emu[E_AMX]);
}

static void test_emu_tables_wired(void) {
    /* the emulated kernels are in place (not the avx2 ones they replace) */
    const lb_kernel_table *avx2 = lb_kernels_table(LB_KV_AVX2);
    for (int e = 0; e < E_COUNT; e++)
        for (int k = 0; k < 2; k++) {
            const lb_type wt = k ? LB_TYPE_Q8_0 : LB_TYPE_Q4_0;
            /* AVX-VNNI replaces the X16 kernels only */
            TH_CHECK_MSG(e == E_AVXVNNI ? g_emu[e].w[wt].mm_x16 != avx2->w[wt].mm_x16
                                        : g_emu[e].w[wt].mm != avx2->w[wt].mm,
                         "%s %s", g_emu[e].name, lb_type_name(wt));
            TH_CHECK_INT(g_emu[e].w[wt].mm_batch != NULL, e == E_AMX);
        }
    TH_CHECK_INT(g_emu[E_AMX].w[LB_TYPE_Q4_0].batch_min, 16);
}

static void test_emu_kernel_cases(void) {
    for (int e = 0; e < E_COUNT; e++) n_cases[e] += kc_check_table(&g_emu[e]);
}

static void test_emu_qact_edges(void) {
    for (int e = 0; e < E_COUNT; e++) kc_qact_edges(&g_emu[e]);
}

static void test_emu_matmul_oracle_and_threads(void) {
    for (int e = 0; e < E_COUNT; e++) kc_matmul_oracle_and_threads(&g_emu[e]);
}

/* ---------------------------------------------------------------------- */
/* 3. lb_matmul through the emulated VNNI and AMX paths, bit for bit vs AVX2 */

static void test_emu_matmul_vs_avx2(void) {
    lb_pool *pools[3] = {NULL, lb_pool_create(2), lb_pool_create(3)};
    TH_CHECK(pools[1] && pools[2]);
    const lb_kernel_table *avx2 = lb_kernels_table(LB_KV_AVX2);
    const int64_t ins[] = {32, 96, 544}, outs[] = {1, 5, 16, 17, 33, 67, 130};
    const int64_t toks[] = {1, 3, 15, 16, 17, 31, 33, 70};
    long cfg0, rel0, cfg1, rel1;
    lb_emu_tile_counts(&cfg0, &rel0);
    int bad = 0, runs = 0;
    for (int e = 0; e < E_COUNT; e++)
    for (int k = 0; k < 2; k++) {
        const lb_type wt = k ? LB_TYPE_Q8_0 : LB_TYPE_Q4_0;
        for (size_t ii = 0; ii < LB_ARRAY_LEN(ins); ii++)
            for (size_t io = 0; io < LB_ARRAY_LEN(outs); io++)
                for (size_t it = 0; it < LB_ARRAY_LEN(toks); it++) {
                    if ((ii + io + it) % 3 == 2 && toks[it] != 16 && toks[it] != 17) continue; /* trim */
                    const int64_t in = ins[ii], out = outs[io], nt = toks[it];
                    size_t rb;
                    lb_row_size(wt, in, &rb);
                    uint8_t *w = malloc(rb * (size_t)out);
                    make_weights(wt, w, out, in, 0);
                    float *x = malloc(sizeof(float) * (size_t)(in * nt));
                    /* every other shape: block sums near their maximum (all
                     * codes of a row extreme and of one sign, activations
                     * positive), where a different float order rounds
                     * differently; otherwise random data */
                    const int big = (ii + io + it) % 2;
                    for (int64_t i = 0; i < in * nt; i++) x[i] = big ? rng_f(1.5f, 2) : rng_f(-2, 2);
                    for (int64_t o = 0; big && o < out; o++) {
                        const int neg = rng_u32() & 1;
                        for (int64_t b = 0; b < in / 32; b++) {
                            uint8_t *blk = w + (size_t)o * rb + (size_t)b * (k ? 34 : 18);
                            for (int j = 0; j < (k ? 32 : 16); j++)
                                blk[2 + j] = k ? (uint8_t)(int8_t)(neg ? -rng_int(120, 127) : rng_int(120, 127))
                                               : (neg ? 0x00 : 0xFF);
                        }
                    }
                    lb_tensor W = {"w_emu", wt, 2, {out, in}, w, rb * (size_t)out, LB_LAYOUT_ROWS};
                    float *y0 = malloc(sizeof(float) * (size_t)(out * nt));
                    float *y1 = malloc(sizeof(float) * (size_t)(out * nt));
                    TH_CHECK_OK(lb_matmul_table(avx2, NULL, &W, x, y0, nt));
                    for (int p = 0; p < 3; p++) {
                        memset(y1, 0xFF, sizeof(float) * (size_t)(out * nt));
                        TH_CHECK_OK(lb_matmul_table(&g_emu[e], pools[p], &W, x, y1, nt));
                        if (memcmp(y0, y1, sizeof(float) * (size_t)(out * nt)) != 0) {
                            if (bad < 5)
                                fprintf(stderr, "  %s %s in=%lld out=%lld nt=%lld threads=%d differs from avx2\n",
                                        g_emu[e].name, lb_type_name(wt), (long long)in,
                                        (long long)out, (long long)nt, p + 1);
                            bad++;
                        }
                        th_n_checks++;
                        runs++;
                    }
                    TH_CHECK(!lb_emu_tile_configured()); /* calling thread released its tiles */
                    free(w), free(x), free(y0), free(y1);
                }
    }
    /* more than 256 blocks per row: the K-chunk boundary */
    const int64_t big_in[] = {32 * 300}, big_toks[] = {16, 33};
    for (int e = 0; e < E_COUNT; e++) kc_same_bits_as_avx2(&g_emu[e], big_in, 1, big_toks, 2);
    /* X16 (repacked) weights: the emulated tables' row-form bits, which
     * are AVX2's (above) */
    for (int e = 0; e < E_COUNT; e++) kc_x16_same_bits(&g_emu[e]);
    /* X16 Q4_K / Q6_K: the reference's bits */
    for (int e = 0; e < E_COUNT; e++) kc_kx16_ref_bits(&g_emu[e]);
    lb_emu_tile_counts(&cfg1, &rel1);
    TH_CHECK_MSG(bad == 0, "%d of %d emulated lb_matmul runs differ from avx2", bad, runs);
    TH_CHECK_MSG(cfg1 - cfg0 > 0, "the AMX path never ran");
    TH_CHECK_MSG(cfg1 - cfg0 == rel1 - rel0, "%ld tile configurations loaded, %ld released",
                 cfg1 - cfg0, rel1 - rel0);
    lb_pool_free(pools[1]);
    lb_pool_free(pools[2]);
}

/* ---------------------------------------------------------------------- */
/* 4. Real hardware, where present: emulated == real, byte for byte        */

static void test_emu_vs_hardware(void) {
    int compared = 0;
    for (int e = 0; e < E_COUNT; e++) {
        if (!lb_kernels_usable(g_real_v[e])) continue;
        const lb_kernel_table *real = lb_kernels_table(g_real_v[e]);
        for (int k = 0; k < 2; k++) {
            const lb_type wt = k ? LB_TYPE_Q8_0 : LB_TYPE_Q4_0;
            const int64_t in = 32 * 13, out = 37, nt = 21;
            size_t wrb, arb;
            lb_row_size(wt, in, &wrb);
            lb_row_size(LB_TYPE_Q8_0, in, &arb);
            uint8_t *w = malloc(wrb * out), *a = malloc(arb * nt);
            float *x = malloc(sizeof(float) * in), *y0 = malloc(sizeof(float) * out * nt),
                  *y1 = malloc(sizeof(float) * out * nt);
            make_weights(wt, w, out, in, 0);
            for (int64_t t = 0; t < nt; t++) {
                for (int64_t i = 0; i < in; i++) x[i] = rng_f(-2, 2);
                lb_quantize_row(LB_TYPE_Q8_0, x, a + t * arb, in);
            }
            uint8_t *wx = kc_pack_x16(wt, w, out, in);
            /* mode 0: row form, 1: row-form batch kernel, 2: X16 */
            for (int mode = 0; mode < 3; mode++) {
                const lb_wkernel *ke = &g_emu[e].w[wt], *kr = &real->w[wt];
                lb_mm_fn fe = mode == 0 ? ke->mm : mode == 1 ? ke->mm_batch : ke->mm_x16;
                lb_mm_fn fr = mode == 0 ? kr->mm : mode == 1 ? kr->mm_batch : kr->mm_x16;
                if (!fe || !fr) continue;
                const uint8_t *wm = mode == 2 ? wx : w;
                /* nt tokens (prefill tiles) and one token (decode) */
                for (int one = 0; one < 2; one++) {
                    const int64_t k_nt = one ? 1 : nt;
                    fe(in, wm, wrb, out, a, arb, k_nt, y0, (size_t)out);
                    fr(in, wm, wrb, out, a, arb, k_nt, y1, (size_t)out);
                    TH_CHECK_MSG(memcmp(y0, y1, sizeof(float) * out * k_nt) == 0,
                                 "%s %s%s nt=%lld: emulated and real kernels differ",
                                 g_emu[e].name, lb_type_name(wt),
                                 mode == 1 ? " (batch)" : mode == 2 ? " (X16)" : "", (long long)k_nt);
                    compared++;
                }
            }
            free(w), free(wx), free(a), free(x), free(y0), free(y1);
        }
    }
    fprintf(stderr, "  emulated vs real hardware kernels compared: %d%s\n", compared,
            compared ? "" : " (this CPU has no AVX-VNNI/AVX-512/AMX)");
}

/* ---------------------------------------------------------------------- */
/* 4. The FP8 / bitsandbytes AVX-512 kernels (fp8_avx512.c, bnb_avx512.c)  */

/* Their intrinsics: widenings, vpslld, vpor, vpcmpeqd against AVX2 on each
 * half; vpermps, the casts and the masked move against scalar formulas. */
static void test_emu_fp8_bnb_intrinsics(void) {
    int bad[7] = {0};
    for (int it = 0; it < ITERS; it++) {
        uint8_t b16[16];
        rnd_bytes(b16, 16);
        __m128i x;
        memcpy(&x, b16, 16);
        const __m512i zu = _mm512_cvtepu8_epi32(x), zs = _mm512_cvtepi8_epi32(x);
        const __m512i a = rnd_m512i(), b = rnd_m512i();
        const unsigned n = rng_u32() % 34;
        const __m512i sl = _mm512_slli_epi32(a, n), o = _mm512_or_si512(a, b);
        __m512i c = b; /* about half the lanes equal */
        for (int i = 0; i < 16; i++)
            if (rng_u32() & 1) c.u32[i] = a.u32[i];
        const __mmask16 k = _mm512_cmpeq_epi32_mask(a, c);
        for (int h = 0; h < 2; h++) {
            __m128i xh;
            memcpy(&xh, b16 + 8 * h, 8);
            bad[0] += !eq_half_i(&zu, h, _mm256_cvtepu8_epi32(xh));
            bad[1] += !eq_half_i(&zs, h, _mm256_cvtepi8_epi32(xh));
            bad[2] += !eq_half_i(&sl, h, _mm256_sll_epi32(half_i(&a, h), _mm_cvtsi32_si128((int)n)));
            bad[3] += !eq_half_i(&o, h, _mm256_or_si256(half_i(&a, h), half_i(&b, h)));
            bad[4] += (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(
                          _mm256_cmpeq_epi32(half_i(&a, h), half_i(&c, h)))) != ((k >> (8 * h)) & 0xFFu);
        }
        __m512 t, src;
        for (int i = 0; i < 16; i++) {
            t.f[i] = rnd_float_any();
            src.f[i] = rnd_float_any();
        }
        const __m512 pv = _mm512_permutexvar_ps(a, t), mv = _mm512_mask_mov_ps(src, k, t);
        const __m512 cs = _mm512_castsi512_ps(a);
        const __m512i ci = _mm512_castps_si512(t);
        for (int i = 0; i < 16; i++) {
            bad[5] += pv.u32[i] != t.u32[a.u32[i] & 15] ||
                      mv.u32[i] != ((k >> i) & 1 ? t.u32[i] : src.u32[i]);
            bad[6] += cs.u32[i] != a.u32[i] || ci.u32[i] != t.u32[i];
        }
    }
    static const char *const names[7] = {"cvtepu8_epi32", "cvtepi8_epi32", "slli_epi32",
                                         "or_si512", "cmpeq_epi32_mask", "permutexvar_ps/mask_mov_ps",
                                         "castsi512_ps/castps_si512"};
    for (int i = 0; i < 7; i++) TH_CHECK_MSG(bad[i] == 0, "_mm512_%s: %d mismatches", names[i], bad[i]);
}

/* The emulated avx512 table (avx2 + the FP8 and bitsandbytes AVX-512
 * kernels) on F8_E4M3_B32, NF4_B64, FP4_B64 and I8_B32: within 1e-5 of the
 * reference relative to the sum of |terms| on awkward sizes, and bit for
 * bit the real AVX-512 kernels' results where the CPU has them. */
static void test_emu_fp8_bnb_kernels(void) {
    lb_kernel_table emu = *lb_kernels_table(LB_KV_AVX2);
    emu.name = "avx512(emu)";
    lb_kernels_fill_fp8_avx512_emu(&emu);
    lb_kernels_fill_bnb_avx512_emu(&emu);
    const lb_kernel_table *ref = lb_kernels_table(LB_KV_REF);
    const bool hw = lb_kernels_usable(LB_KV_AVX512);
    static const lb_type types[] = {LB_TYPE_F8_E4M3_B32, LB_TYPE_NF4_B64, LB_TYPE_FP4_B64,
                                    LB_TYPE_I8_B32};
    static const int64_t nrs[] = {1, 7, 33}, nts[] = {1, 5, 17};
    int worse = 0, differ = 0, runs = 0;
    for (size_t ti = 0; ti < LB_ARRAY_LEN(types); ti++) {
        const lb_type ty = types[ti];
        TH_CHECK_MSG(emu.w[ty].mm != lb_kernels_table(LB_KV_AVX2)->w[ty].mm, "%s not replaced",
                     lb_type_name(ty));
        const int64_t bl = lb_type_get_traits(ty)->blck_size;
        for (size_t a = 0; a < 3; a++) {
            const int64_t n = bl * (a == 0 ? 1 : a == 1 ? 3 : 67), nr = nrs[a], nt = nts[a];
            const int64_t nb = n / bl;
            uint8_t *w = malloc((size_t)(nr * nb) * 36);
            for (int64_t i = 0; i < nr * nb; i++) {
                const float d = rng_f(0.5f, 1.5f) * ldexpf(1.0f, rng_int(-10, 2));
                memcpy(w + i * 36, &d, 4);
                for (int k = 0; k < 32; k++) {
                    uint8_t q = rnd_byte();
                    if (ty == LB_TYPE_F8_E4M3_B32 && (q & 0x7f) == 0x7f) q = 0x7e; /* no NaN */
                    w[i * 36 + 4 + k] = q;
                }
            }
            float *x = malloc(sizeof(float) * (size_t)(n * nt)), *wd = malloc(sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < n * nt; i++) x[i] = rng_f(-1, 1);
            lb_tensor W = {.name = "w", .type = ty, .n_dims = 2, .shape = {nr, n}, .data = w,
                           .nbytes = (size_t)(nr * nb) * 36};
            float *ye = malloc(sizeof(float) * (size_t)(nr * nt)), *yr = malloc(sizeof(float) * (size_t)(nr * nt));
            float *yh = malloc(sizeof(float) * (size_t)(nr * nt));
            TH_CHECK_OK(lb_matmul_table(&emu, NULL, &W, x, ye, nt));
            TH_CHECK_OK(lb_matmul_table(ref, NULL, &W, x, yr, nt));
            if (hw) TH_CHECK_OK(lb_matmul_table(lb_kernels_table(LB_KV_AVX512), NULL, &W, x, yh, nt));
            for (int64_t i = 0; i < nr * nt; i++) {
                const int64_t r = i % nr, t = i / nr;
                lb_dequantize_row(ty, w + r * nb * 36, wd, n);
                double mag = 0;
                for (int64_t k = 0; k < n; k++) mag += fabs((double)wd[k] * x[t * n + k]);
                worse += fabs((double)ye[i] - yr[i]) > 1e-5 * (mag > 0 ? mag : 1);
                differ += hw && !same_float(ye[i], yh[i]);
            }
            runs++;
            free(w), free(x), free(wd), free(ye), free(yr), free(yh);
        }
    }
    TH_CHECK_MSG(worse == 0, "%d outputs off the reference", worse);
    TH_CHECK_MSG(differ == 0, "%d outputs differ from the real AVX-512 kernels", differ);
    fprintf(stderr, "  FP8/NF4/FP4/INT8 AVX-512 (emulated): %d shapes vs ref%s\n", runs,
            hw ? " and bit for bit vs the hardware" : " (no AVX-512 here: no hardware comparison)");
}

/* The F16/BF16 AVX-512 kernels (f16_avx512.c: AVX2/F16C intrinsics only,
 * built here with AVX2 flags) on any AVX2 machine: bit for bit the AVX2
 * kernels' results (the arithmetic they keep), and the real AVX-512
 * build's where the CPU has it, on awkward sizes (odd n, n < 8, tails of
 * the 32-element step, 8/4/1-row tiles, 1..70 tokens). */
static void test_emu_f16_kernels(void) {
    lb_kernel_table emu = *lb_kernels_table(LB_KV_AVX2);
    emu.name = "avx512(emu)";
    lb_kernels_fill_f16_avx512_emu(&emu);
    const lb_kernel_table *avx2 = lb_kernels_table(LB_KV_AVX2);
    const bool hw = lb_kernels_usable(LB_KV_AVX512);
    const int64_t ins[] = {3, 8, 37, 65, 896}, outs[] = {1, 9, 13, 21}, toks[] = {1, 2, 3, 7, 70};
    int differ = 0, differ_hw = 0, n = 0;
    for (int k = 0; k < 2; k++) {
        const lb_type wt = k ? LB_TYPE_BF16 : LB_TYPE_F16;
        TH_CHECK(emu.w[wt].mm != avx2->w[wt].mm);
        for (size_t ii = 0; ii < LB_ARRAY_LEN(ins); ii++)
            for (size_t io = 0; io < LB_ARRAY_LEN(outs); io++)
                for (size_t it = 0; it < LB_ARRAY_LEN(toks); it++) {
                    const int64_t in = ins[ii], out = outs[io], nt = toks[it];
                    uint8_t *w = malloc(2 * (size_t)(in * out));
                    float *x = malloc(sizeof(float) * (size_t)(in * nt));
                    float *y0 = malloc(sizeof(float) * (size_t)(out * nt));
                    float *y1 = malloc(sizeof(float) * (size_t)(out * nt));
                    float *y2 = malloc(sizeof(float) * (size_t)(out * nt));
                    make_weights(wt, w, out, in, 0);
                    for (int64_t i = 0; i < in * nt; i++) x[i] = rng_f(-2, 2);
                    avx2->w[wt].mm(in, w, 2 * (size_t)in, out, x, 4 * (size_t)in, nt, y0, (size_t)out);
                    emu.w[wt].mm(in, w, 2 * (size_t)in, out, x, 4 * (size_t)in, nt, y1, (size_t)out);
                    if (hw)
                        lb_kernels_table(LB_KV_AVX512)->w[wt].mm(in, w, 2 * (size_t)in, out, x,
                                                                 4 * (size_t)in, nt, y2, (size_t)out);
                    for (int64_t i = 0; i < out * nt; i++, n++) {
                        differ += !same_float(y0[i], y1[i]);
                        differ_hw += hw && !same_float(y1[i], y2[i]);
                    }
                    free(w), free(x), free(y0), free(y1), free(y2);
                }
    }
    TH_CHECK_MSG(differ == 0, "%d of %d F16/BF16 outputs differ from avx2", differ, n);
    TH_CHECK_MSG(differ_hw == 0, "%d of %d F16/BF16 outputs differ from the AVX-512 build", differ_hw, n);
    fprintf(stderr, "  F16/BF16 AVX-512 kernels built for AVX2: %d outputs bit for bit vs avx2%s\n", n,
            hw ? " and vs the AVX-512 build" : " (no AVX-512 here: no hardware comparison)");
}

/* The AVX-512 attention helpers (vec_avx512.c) on any AVX2 machine: qk /
 * pv within f32 rounding of the reference (relative to the sum of
 * |products|), f16_to_f32 exact, and bit for bit the real AVX-512 build's
 * where the CPU has it; head sizes 16..128 and 72 (the AVX2 fallback),
 * 1..8 queries, key counts around the 16-key step. */
static void test_emu_vec_kernels(void) {
    lb_kernel_table emu = *lb_kernels_table(LB_KV_AVX2);
    lb_vec_fill_avx512_emu(&emu);
    const lb_kernel_table *ref = lb_kernels_table(LB_KV_REF);
    const bool hw = lb_kernels_usable(LB_KV_AVX512);
    const lb_kernel_table *real = lb_kernels_table(LB_KV_AVX512);
    TH_CHECK(emu.vec.qk != lb_kernels_table(LB_KV_AVX2)->vec.qk);
    const int hds[] = {16, 32, 64, 72, 80, 128};
    const int64_t ns[] = {1, 15, 16, 17, 33, 64};
    double worst_qk = 0, worst_pv = 0;
    int differ_hw = 0, runs = 0;
    for (size_t a = 0; a < LB_ARRAY_LEN(hds); a++)
        for (int G = 1; G <= 8; G++)
            for (size_t b = 0; b < LB_ARRAY_LEN(ns); b++, runs++) {
                const int hd = hds[a];
                const int64_t n = ns[b], lds = 67;
                float *q = malloc(sizeof(float) * (size_t)(G * hd)),
                      *K = malloc(sizeof(float) * (size_t)(n * hd)),
                      *V = malloc(sizeof(float) * (size_t)(n * hd)),
                      *s0 = malloc(sizeof(float) * (size_t)(G * lds)),
                      *s1 = malloc(sizeof(float) * (size_t)(G * lds)),
                      *s2 = malloc(sizeof(float) * (size_t)(G * lds)),
                      *a0 = malloc(sizeof(float) * (size_t)(G * hd)),
                      *a1 = malloc(sizeof(float) * (size_t)(G * hd)),
                      *a2 = malloc(sizeof(float) * (size_t)(G * hd));
                for (int i = 0; i < G * hd; i++) q[i] = rng_f(-1, 1), a0[i] = a1[i] = a2[i] = rng_f(-1, 1);
                for (int64_t i = 0; i < n * hd; i++) K[i] = rng_f(-1, 1), V[i] = rng_f(-1, 1);
                ref->vec.qk(G, hd, q, K, n, 0.125f, s0, lds);
                emu.vec.qk(G, hd, q, K, n, 0.125f, s1, lds);
                if (hw) real->vec.qk(G, hd, q, K, n, 0.125f, s2, lds);
                for (int g = 0; g < G; g++)
                    for (int64_t j = 0; j < n; j++) {
                        double mag = 0;
                        for (int i = 0; i < hd; i++) mag += fabs(q[g * hd + i] * K[j * hd + i]);
                        const size_t o = (size_t)(g * lds + j);
                        worst_qk = fmax(worst_qk, fabs(s0[o] - s1[o]) / (0.125 * mag + 1e-30));
                        differ_hw += hw && !same_float(s1[o], s2[o]);
                    }
                ref->vec.pv(G, hd, s0, lds, V, n, a0);
                emu.vec.pv(G, hd, s0, lds, V, n, a1);
                if (hw) real->vec.pv(G, hd, s0, lds, V, n, a2);
                for (int g = 0; g < G; g++)
                    for (int i = 0; i < hd; i++) {
                        double mag = 1;
                        for (int64_t j = 0; j < n; j++) mag += fabs(s0[g * lds + j] * V[j * hd + i]);
                        worst_pv = fmax(worst_pv, fabs(a0[g * hd + i] - a1[g * hd + i]) / mag);
                        differ_hw += hw && !same_float(a1[g * hd + i], a2[g * hd + i]);
                    }
                free(q), free(K), free(V), free(s0), free(s1), free(s2), free(a0), free(a1), free(a2);
            }
    enum { NH = 4099 };
    uint16_t *h = malloc(NH * 2);
    float *f0 = malloc(NH * 4), *f1 = malloc(NH * 4);
    for (int i = 0; i < NH; i++) h[i] = (uint16_t)(i * 16 + (i >> 8));
    for (int len = 0; len <= NH; len += len < 40 ? 1 : 1013) {
        ref->vec.f16_to_f32(h, f0, len);
        emu.vec.f16_to_f32(h, f1, len);
        TH_CHECK(memcmp(f0, f1, (size_t)len * 4) == 0);
    }
    free(h), free(f0), free(f1);
    fprintf(stderr, "  vec AVX-512 (emulated): %d shapes, qk max rel err %.3g, pv %.3g%s\n", runs,
            worst_qk, worst_pv, hw ? ", bit for bit vs the hardware" : " (no AVX-512 here)");
    TH_CHECK(worst_qk < 1e-6);
    TH_CHECK(worst_pv < 1e-6);
    TH_CHECK_MSG(differ_hw == 0, "%d outputs differ from the real AVX-512 build", differ_hw);
}

int main(int argc, char **argv) {
    kc_verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    if (!lb_kernels_usable(LB_KV_AVX2))
        th_skip("needs AVX2+FMA+F16C (the emulation runs on the real AVX2 intrinsics)");
    char feats[256];
    fprintf(stderr, "cpu: %s\n", lb_cpu_describe(feats, sizeof feats));
    TH_RUN(test_emu_int_vs_avx2);
    TH_RUN(test_emu_int32_ops);
    TH_RUN(test_emu_dpbusd_vs_scalar);
    TH_RUN(test_emu_float_vs_avx2);
    TH_RUN(test_emu_reduce_add);
    TH_RUN(test_emu_cast_insert_load_store);
    TH_RUN(test_emu_amx_vs_scalar);
    TH_RUN(test_emu_faults);
    build_emu_tables();
    TH_RUN(test_emu_tables_wired);
    TH_RUN(test_emu_kernel_cases);
    TH_RUN(test_emu_qact_edges);
    TH_RUN(test_emu_matmul_oracle_and_threads);
    TH_RUN(test_emu_matmul_vs_avx2);
    TH_RUN(test_emu_vs_hardware);
    TH_RUN(test_emu_fp8_bnb_intrinsics);
    TH_RUN(test_emu_fp8_bnb_kernels);
    TH_RUN(test_emu_f16_kernels);
    TH_RUN(test_emu_vec_kernels);
    for (int e = 0; e < E_COUNT; e++)
        fprintf(stderr, "variant %-17s tested: %d kernel cases vs ref + oracle + threads\n",
                g_emu[e].name, n_cases[e]);
    lb_kernels_release_scratch();
    return th_report();
}
