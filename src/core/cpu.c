/*
 * CPU feature detection: CPUID leaves 1 and 7 plus XGETBV for OS support
 * (Intel SDM Vol. 2A "CPUID", Vol. 1 13.2 "XSAVE-supported features"), and
 * Linux's arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) for AMX
 * (Documentation/arch/x86/xstate.rst).
 */
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define LB_X86 1
#endif

#if defined(__linux__) && defined(LB_X86)
#include <sys/syscall.h>
#define LB_ARCH_GET_XCOMP_PERM 0x1022
#define LB_ARCH_REQ_XCOMP_PERM 0x1023
#define LB_XFEATURE_XTILEDATA 18
#endif

static lb_cpu_features g_cpu;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

#ifdef LB_X86
static uint64_t read_xcr0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}
#endif

static void detect(void) {
    lb_cpu_features f;
    memset(&f, 0, sizeof f);
#ifdef LB_X86
    unsigned a, b, c, d;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf >= 1) {
        __cpuid(1, a, b, c, d);
        f.sse42 = (c >> 20) & 1;
        bool osxsave = (c >> 27) & 1;
        bool avx = (c >> 28) & 1;
        bool f16c = (c >> 29) & 1;
        bool fma = (c >> 12) & 1;
        uint64_t xcr0 = osxsave ? read_xcr0() : 0;
        f.os_avx = osxsave && (xcr0 & 0x6) == 0x6;
        f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;
        bool os_amx_state = osxsave && (xcr0 & 0x60000) == 0x60000;
        f.avx = avx && f.os_avx;
        f.f16c = f16c && f.os_avx;
        f.fma = fma && f.os_avx;
        if (max_leaf >= 7) {
            __cpuid_count(7, 0, a, b, c, d);
            f.avx2 = ((b >> 5) & 1) && f.os_avx;
            f.avx512f = ((b >> 16) & 1) && f.os_avx512;
            f.avx512dq = ((b >> 17) & 1) && f.os_avx512;
            f.avx512bw = ((b >> 30) & 1) && f.os_avx512;
            f.avx512vl = ((b >> 31) & 1) && f.os_avx512;
            f.avx512_vnni = ((c >> 11) & 1) && f.os_avx512;
            bool amx_bf16 = (d >> 22) & 1;
            bool amx_tile = (d >> 24) & 1;
            bool amx_int8 = (d >> 25) & 1;
            unsigned max_sub = a;
            if (max_sub >= 1) {
                __cpuid_count(7, 1, a, b, c, d);
                f.avx_vnni = ((a >> 4) & 1) && f.os_avx;
                f.avx512_bf16 = ((a >> 5) & 1) && f.os_avx512;
            }
            if (amx_tile && os_amx_state) {
#if defined(__linux__)
                /* Ask Linux for permission to use the tile data state. */
                long rc = syscall(SYS_arch_prctl, LB_ARCH_REQ_XCOMP_PERM,
                                  LB_XFEATURE_XTILEDATA);
                f.os_amx = rc == 0;
#else
                f.os_amx = false;
#endif
                f.amx_tile = f.os_amx;
                f.amx_int8 = amx_int8 && f.os_amx;
                f.amx_bf16 = amx_bf16 && f.os_amx;
            }
        }
    }
#endif
    g_cpu = f;
}

const lb_cpu_features *lb_cpu_get(void) {
    pthread_once(&g_cpu_once, detect);
    return &g_cpu;
}

char *lb_cpu_describe(char *buf, size_t size) {
    const lb_cpu_features *f = lb_cpu_get();
    struct {
        bool on;
        const char *name;
    } items[] = {
        {f->sse42, "SSE4.2"},        {f->avx, "AVX"},
        {f->f16c, "F16C"},           {f->fma, "FMA"},
        {f->avx2, "AVX2"},           {f->avx_vnni, "AVX_VNNI"},
        {f->avx512f, "AVX512F"},     {f->avx512bw, "AVX512BW"},
        {f->avx512vl, "AVX512VL"},   {f->avx512dq, "AVX512DQ"},
        {f->avx512_vnni, "AVX512_VNNI"}, {f->avx512_bf16, "AVX512_BF16"},
        {f->amx_tile, "AMX_TILE"},   {f->amx_int8, "AMX_INT8"},
        {f->amx_bf16, "AMX_BF16"},
    };
    size_t len = 0;
    if (size == 0) return buf;
    buf[0] = '\0';
    for (size_t i = 0; i < LB_ARRAY_LEN(items); i++) {
        if (!items[i].on) continue;
        int n = snprintf(buf + len, size - len, "%s%s", len ? " " : "",
                         items[i].name);
        if (n < 0 || (size_t)n >= size - len) break;
        len += (size_t)n;
    }
    return buf;
}

int lb_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

double lb_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
