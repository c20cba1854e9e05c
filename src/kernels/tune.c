/*
 * Measured kernel choice (issue 10: "kernel choice that holds on any
 * x86-64 machine").
 *
 * The family in use is picked from CPUID (matmul.c), but the fastest kernel
 * of a weight type is not always that family's: a 512-bit kernel can lose
 * to a 256-bit one on a CPU whose 512-bit path is narrow or down-clocks,
 * and the AMX batch kernels (kernels_amx.c) ran 2-5x slower than the
 * avx512_vnni ones on a 16-core Intel Xeon (family 6 model 207, a VM):
 * lowbit bench -p 64, one thread, Qwen2.5-0.5B Q4_0, 44 vs 217 tokens/s.
 * For Q4_0/Q8_0 every family's kernels give the AVX2 kernels' bits, for
 * the other X16 types the reference's (kernels_internal.h), so the choice
 * can be made by measurement without changing any output.
 *
 * Decode, per X16 type with two or more distinct candidates (the X16
 * kernels of the usable SIMD families up to the one in use, same
 * activation type): each multiplies a synthetic matrix of 1024 columns
 * and ~16 MiB (in huge pages, as a loaded model's weights) by one token,
 * streamed from memory as decode streams its weights: every line of the
 * matrix is flushed from the caches (clflush) before each timed call; one
 * call per sample, 7 samples in turns. From memory, not from L2/L3 (until
 * 2026-12-06: 256 x 4096, L2/L3-resident): on a Zen 5 VM the AVX-512 VNNI
 * Q4_K / Q5_K / Q6_K passes run faster from cache than the AVX2 ones but
 * slower from memory (bench_kernels --dram, 1 thread, 4096 x 1024: 32.0 /
 * 28.6 / 35.1 against 38.8 / 32.5 / 39.2 GB/s), and whole decodes follow
 * memory (Llama-3.2-1B Q4_K_M, per token: 0.87 -> 0.92 of the read
 * roofline at 1 thread, 0.84 -> 0.89 at 2). 1024 columns: the two Q4_0
 * kernels streamed alike at 4096 (36.5 / 36.8 GB/s) but the AVX-512 one
 * led by 10% at 896-2048 (Qwen2.5-0.5B, Llama-3.2-1B); the K-quant gaps
 * are widest at 1024. (Since the AVX2 Q4_0 pass prefetches further ahead,
 * 73d1ba5, the two Q4_0 passes stream within +-4% of each other at 896 to
 * 8192 columns on that VM: a near-tie the 5% bias below gives to the
 * family's own.) The result fills lb_wkernel.mm_x16_dec (used for
 * n_tokens < LB_X16_DEC_MAX).
 * Prefill, per type whose family has a batch kernel (mm_batch /
 * mm_x16_batch: AMX's Q4_0/Q8_0), in each layout: the batch kernel
 * against the kernel every other usable family uses at PRE_TOKENS tokens,
 * one call of PRE_TOKENS tokens on the same matrix per sample, 3 samples
 * in turns. The batch kernel stays only when it is at least 5% faster
 * than the fastest other; else the tuned table drops it (mm_batch /
 * mm_x16_batch NULL) when that other is the family's own non-batch
 * kernel, or takes it as its batch kernel. The bias is measured: on the
 * Xeon above, with the AMX kernels' X16 repack vectorized, the 128-token
 * measurement found avx512_vnni less than 5% faster than AMX (bench_kernels,
 * 512 tokens, 4864 x 896: 29.2 vs 31.6 ms on one thread), but lowbit bench
 * -p 256 ran 283 (avx512_vnni) vs 185 (AMX) tokens/s on one thread, 2153 vs
 * 2390 on 16: the kernel alone understates what AMX costs a one-thread
 * prefill, so near-ties go to the AVX-512 kernels.
 * Decode: the family's own kernel is replaced only by one at least 5%
 * faster.
 * The thread's CPU time is the measure (other processes' load does not
 * count) and the minimum per candidate is kept.
 *
 * Cache: the choice is kept in $LB_CACHE_DIR, else $XDG_CACHE_HOME/lowbit,
 * else $HOME/.cache/lowbit, file kernels-<hash>.txt, where the hash covers
 * the CPU brand string, the microcode revision (/proc/cpuinfo), the family,
 * lowbit's version and a hash of the candidate kernels' names (a build with
 * other candidates measures again); the file repeats them and is used only
 * when they match; one line "TYPE kernel" per decode choice, "TYPE:rows kernel" /
 * "TYPE:x16 kernel" per prefill choice. Written atomically
 * (lb_write_file_in); every failure to read or write it only means
 * measuring again. LB_TUNE=0 turns the
 * measured choice off (each family's own kernels), LB_TUNE=1 measures
 * again and rewrites the cache. Nothing is printed.
 */
#include "kernels_internal.h"
#include "core/internal.h"
#include "lowbit/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <emmintrin.h>
#endif
#include <sys/mman.h>

#define TUNE_ROWS 256
#define TUNE_COLS 4096
#define TUNE_DEC_COLS 1024
#define TUNE_DEC_BYTES (16u << 20) /* decode: weights streamed from memory */
#define TUNE_SAMPLES 7
#define PRE_TOKENS 128 /* prefill measurement: tokens per call */
#define PRE_SAMPLES 3

/* CPU brand string (CPUID 0x80000002..4), trimmed; "unknown" without it */
static void cpu_brand(char out[49]) {
    snprintf(out, 49, "unknown");
#if defined(__x86_64__) || defined(__i386__)
    unsigned r[12];
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x80000004u) return;
    for (unsigned i = 0; i < 3; i++) __cpuid(0x80000002u + i, r[4 * i], r[4 * i + 1], r[4 * i + 2], r[4 * i + 3]);
    char b[49];
    memcpy(b, r, 48);
    b[48] = 0;
    const char *s = b;
    while (*s == ' ') s++;
    size_t n = strlen(s);
    while (n && s[n - 1] == ' ') n--;
    if (n) snprintf(out, 49, "%.*s", (int)n, s);
#endif
}

/* microcode revision from /proc/cpuinfo ("0x..."), "-" when not found */
static void cpu_microcode(char out[32]) {
    snprintf(out, 32, "-");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "microcode", 9) != 0) continue;
        const char *c = strchr(line, ':');
        if (c) {
            c++;
            while (*c == ' ' || *c == '\t') c++;
            size_t n = strcspn(c, " \t\r\n");
            if (n && n < 31) snprintf(out, 32, "%.*s", (int)n, c);
        }
        break;
    }
    fclose(f);
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* the cache directory (created) into dir; false when none can be made */
static bool cache_dir(char *dir, size_t cap) {
    const char *e = getenv("LB_CACHE_DIR");
    int n;
    if (e && e[0]) n = snprintf(dir, cap, "%s", e);
    else if ((e = getenv("XDG_CACHE_HOME")) && e[0]) n = snprintf(dir, cap, "%s/lowbit", e);
    else if ((e = getenv("HOME")) && e[0]) n = snprintf(dir, cap, "%s/.cache/lowbit", e);
    else return false;
    if (n <= 0 || (size_t)n >= cap) return false;
    for (char *p = dir + 1; *p; p++) { /* mkdir -p */
        if (*p != '/') continue;
        *p = 0;
        const int r = mkdir(dir, 0755);
        *p = '/';
        if (r != 0 && errno != EEXIST) return false;
    }
    return mkdir(dir, 0755) == 0 || errno == EEXIST;
}

static double thread_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* type t is repacked (X16) and streamed in X16 by tuned's family: the
 * types with a decode choice and an X16 prefill choice */
static bool x16_tuned(const lb_kernel_table *tuned, lb_type t) {
    return lb_x16_type(t) && tuned->w[t].mm_x16 && tuned->w[t].x16_fast;
}

/* distinct decode candidates for type t: the X16 kernels of the usable SIMD
 * tables up to base's family with base's activation type */
static int candidates(const lb_kernel_table *base, const lb_kernel_table *const *tables, int ntab,
                      lb_type t, const lb_wkernel **out) {
    int n = 0;
    for (int v = 0; v < ntab; v++) {
        const lb_wkernel *wk = &tables[v]->w[t];
        if (!wk->mm_x16 || !wk->x16_fast || wk->act_type != base->w[t].act_type) continue;
        bool seen = false;
        for (int k = 0; k < n; k++) seen |= out[k]->mm_x16 == wk->mm_x16;
        if (!seen) out[n++] = wk;
    }
    return n;
}

/* Evict [p, p + n) from every cache level (the decode measurement's
 * weights then come from memory, whatever the size of this CPU's L3). */
static void flush_lines(const uint8_t *p, size_t n) {
#if defined(__x86_64__) || defined(__i386__)
    for (size_t i = 0; i < n; i += 64) _mm_clflush(p + i);
    _mm_mfence();
#else
    (void)p, (void)n;
#endif
}

/* Time each of fns[0..nc) (one activation type, act) on a synthetic weight
 * matrix of type t times nt tokens: best[c] = the fastest sample's seconds
 * per call. dram (decode): TUNE_DEC_COLS columns, ~TUNE_DEC_BYTES in huge
 * pages, flushed from the caches before each sample; else TUNE_ROWS x
 * TUNE_COLS (L2/L3-resident). One call per sample. */
static bool measure(lb_type t, lb_type act, const lb_kernel_table *base, lb_mm_fn const *fns,
                    int nc, int64_t nt, int samples, bool dram, double *best) {
    const int cols = dram ? TUNE_DEC_COLS : TUNE_COLS;
    size_t ws, as;
    if (!lb_row_size(t, cols, &ws) || !lb_row_size(act, cols, &as) || !base->qact[act])
        return false;
    /* rows: a multiple of 16 (X16 groups) */
    const int64_t rows = dram ? LB_MAX(16, (int64_t)(TUNE_DEC_BYTES / ws) / 16 * 16) : TUNE_ROWS;
    const size_t wbytes = ws * (size_t)rows;
    uint8_t *w = dram ? lb_map_huge(wbytes) : lb_alloc(wbytes), *a = lb_alloc(as * (size_t)nt);
    float *x = lb_alloc(sizeof(float) * (size_t)cols);
    float *y = lb_alloc(sizeof(float) * (size_t)rows * (size_t)nt);
    const bool ok = w && a && x && y;
    if (ok) {
        /* 0x31 in every byte: codes, and fp16 scales of 0.16 (normal), in
         * either layout */
        memset(w, 0x31, wbytes);
        for (int64_t k = 0; k < nt; k++) {
            for (int i = 0; i < cols; i++) x[i] = (float)((i * 37 + (int)k * 11) % 101 - 50) / 50.0f;
            base->qact[act](x, a + (size_t)k * as, cols);
        }
        for (int c = 0; c < nc; c++) {
            fns[c](cols, w, ws, rows, a, as, nt, y, rows); /* warm-up */
            best[c] = 1e30;
        }
        for (int s = 0; s < samples; s++)
            for (int c = 0; c < nc; c++) {
                if (dram) flush_lines(w, wbytes);
                const double t0 = thread_seconds();
                fns[c](cols, w, ws, rows, a, as, nt, y, rows);
                const double dt = thread_seconds() - t0;
                if (dt < best[c]) best[c] = dt;
            }
    }
    if (dram) {
        if (w) munmap(w, wbytes);
    } else {
        lb_free(w);
    }
    lb_free(a), lb_free(x), lb_free(y);
    return ok;
}

/* index of the candidate to use: own unless one is >= 5% faster */
static int fastest(const double *sec, int nc, int own) {
    int pick = own;
    for (int c = 0; c < nc; c++)
        if (sec[c] < 0.95 * sec[own] && sec[c] < sec[pick]) pick = c;
    return pick;
}

/* the cache's header line: what the choice depends on, the candidates'
 * names included (cand: candidates_hash), so a build that adds or renames
 * a kernel measures again (v4: since the avx_vnni family) */
static void cache_key(const lb_kernel_table *base, uint64_t cand, char *key, size_t cap) {
    char brand[49], mc[32];
    cpu_brand(brand);
    cpu_microcode(mc);
    snprintf(key, cap,
             "lowbit %d.%d.%d kernel choice v4 | cpu %s | microcode %s | family %s | candidates %016llx",
             LB_VERSION_MAJOR, LB_VERSION_MINOR, LB_VERSION_PATCH, brand, mc, base->name,
             (unsigned long long)cand);
}

/* Choices, per type: [0] decode, [1] prefill in row form, [2] prefill in
 * X16; "" when none. Cache lines "TYPE", "TYPE:rows", "TYPE:x16". */
enum { CH_DEC, CH_ROWS, CH_X16, CH_N };
static const char *const k_ch_suffix[CH_N] = {"", ":rows", ":x16"};

/* chosen: names read from the cache (or ""); true when the file matched.
 * A file that cannot be read is no cache (its error is not kept). */
static bool cache_read(const char *path, const char *key, char chosen[][CH_N][64]) {
    char *text = NULL;
    if (lb_read_file(path, 64 * 1024, &text, NULL) != LB_OK) {
        lb_clear_error();
        return false;
    }
    char *save = NULL, *line = strtok_r(text, "\n", &save);
    const bool ok = line && strcmp(line, key) == 0;
    while (ok && (line = strtok_r(NULL, "\n", &save))) {
        char tn[32], kn[64];
        if (sscanf(line, "%31s %63s", tn, kn) != 2) continue;
        for (int t = 0; t < LB_TYPE_COUNT_; t++)
            for (int c = 0; c < CH_N && lb_type_name(t); c++) {
                char want[40];
                snprintf(want, sizeof want, "%s%s", lb_type_name(t), k_ch_suffix[c]);
                if (strcmp(want, tn) == 0) snprintf(chosen[t][c], 64, "%s", kn);
            }
    }
    free(text);
    return ok;
}

/* dir/name <- the key line and one "TYPE kernel" line per choice,
 * atomically (lb_write_file_in); a failure only means measuring again */
static void cache_write(const char *dir, const char *name, const char *key, char chosen[][CH_N][64]) {
    char text[8192];
    size_t n = (size_t)snprintf(text, sizeof text, "%s\n", key);
    for (int t = 0; t < LB_TYPE_COUNT_ && n < sizeof text; t++)
        for (int c = 0; c < CH_N && n < sizeof text; c++)
            if (chosen[t][c][0])
                n += (size_t)snprintf(text + n, sizeof text - n, "%s%s %s\n", lb_type_name(t),
                                      k_ch_suffix[c], chosen[t][c]);
    if (n >= sizeof text || lb_write_file_in(dir, name, text, n) != LB_OK) lb_clear_error();
}

/* Prefill candidates for type t in one layout (x16): tuned's batch kernel
 * first, then the kernel each usable table uses at PRE_TOKENS tokens, same
 * activation type, distinct. 0 when tuned has no batch kernel there. */
static int pre_candidates(const lb_kernel_table *tuned, const lb_kernel_table *const *tables,
                          int ntab, lb_type t, bool x16, lb_mm_fn *fn, const char **nm) {
    const lb_wkernel *own = &tuned->w[t];
    if (!(x16 ? own->mm_x16_batch : own->mm_batch)) return 0;
    int n = 0;
    fn[n] = x16 ? own->mm_x16_batch : own->mm_batch;
    nm[n++] = x16 ? own->x16_batch_name : own->batch_name;
    for (int v = 0; v < ntab; v++) {
        const lb_wkernel *wk = &tables[v]->w[t];
        if (wk->act_type != own->act_type) continue;
        lb_mm_fn f = x16 ? wk->mm_x16 : wk->mm;
        const char *fname = x16 ? wk->x16_name : wk->mm_name;
        lb_mm_fn bf = x16 ? wk->mm_x16_batch : wk->mm_batch;
        if (bf && PRE_TOKENS >= wk->batch_min) f = bf, fname = x16 ? wk->x16_batch_name : wk->batch_name;
        if (!f || (x16 && !wk->x16_fast)) continue;
        bool seen = false;
        for (int k = 0; k < n; k++) seen |= fn[k] == f;
        if (!seen) fn[n] = f, nm[n++] = fname;
    }
    return n;
}

/* the prefill choice of type t in one layout, from the cache (chosen, when
 * it names a candidate) or measured (then chosen is set, *wrote true) */
static void tune_prefill(lb_kernel_table *tuned, const lb_kernel_table *const *tables, int ntab,
                         lb_type t, bool x16, char chosen[64], bool *wrote) {
    lb_mm_fn fn[LB_KV_COUNT + 1];
    const char *nm[LB_KV_COUNT + 1];
    const int nc = pre_candidates(tuned, tables, ntab, t, x16, fn, nm);
    if (nc < 2) return;
    int pick = -1;
    for (int c = 0; c < nc && chosen[0]; c++)
        if (nm[c] && strcmp(nm[c], chosen) == 0) pick = c;
    if (pick < 0) {
        double sec[LB_KV_COUNT + 1];
        if (!measure(t, tuned->w[t].act_type, tuned, fn, nc, PRE_TOKENS, PRE_SAMPLES, false, sec))
            return;
        /* the batch kernel only when clearly faster than the best other */
        int alt = 1;
        for (int c = 2; c < nc; c++)
            if (sec[c] < sec[alt]) alt = c;
        pick = sec[0] < 0.95 * sec[alt] ? 0 : alt;
        snprintf(chosen, 64, "%s", nm[pick] ? nm[pick] : "-");
        *wrote = true;
    }
    if (pick == 0) return;
    lb_wkernel *wk = &tuned->w[t];
    const bool plain = fn[pick] == (x16 ? wk->mm_x16 : wk->mm);
    if (x16) {
        wk->mm_x16_batch = plain ? NULL : fn[pick];
        wk->x16_batch_name = plain ? NULL : nm[pick];
    } else {
        wk->mm_batch = plain ? NULL : fn[pick];
        wk->batch_name = plain ? NULL : nm[pick];
    }
}

/* FNV-1a of every candidate's name, type by type (decode, then prefill in
 * row form and in X16), in candidate order */
static uint64_t candidates_hash(const lb_kernel_table *tuned, const lb_kernel_table *const *tables,
                                int ntab) {
    char names[8192];
    size_t n = 0;
    names[0] = 0;
    for (int t = 0; t < LB_TYPE_COUNT_; t++) {
        const lb_wkernel *cand[LB_KV_COUNT];
        lb_mm_fn fn[LB_KV_COUNT + 1];
        const char *nm[LB_KV_COUNT + 1];
        const int nd = x16_tuned(tuned, (lb_type)t) ? candidates(tuned, tables, ntab, (lb_type)t, cand) : 0;
        for (int c = 0; c < nd && n < sizeof names; c++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s ", cand[c]->x16_name);
        for (int x16 = 0; x16 < 2; x16++) {
            const int np = pre_candidates(tuned, tables, ntab, (lb_type)t, x16, fn, nm);
            for (int c = 0; c < np && n < sizeof names; c++)
                n += (size_t)snprintf(names + n, sizeof names - n, "%s ", nm[c] ? nm[c] : "-");
        }
    }
    return fnv1a(names);
}

void lb_kernels_tune(lb_kernel_table *tuned, const lb_kernel_table *const *tables, int ntab) {
    const char *env = getenv("LB_TUNE");
    if (env && strcmp(env, "0") == 0) return;
    const bool remeasure = env && strcmp(env, "1") == 0;
    const lb_wkernel *cand[LB_KV_COUNT];
    lb_mm_fn pfn[LB_KV_COUNT + 1];
    const char *pnm[LB_KV_COUNT + 1];
    bool any = false;
    for (int t = 0; t < LB_TYPE_COUNT_ && !any; t++)
        any = (x16_tuned(tuned, (lb_type)t) && candidates(tuned, tables, ntab, (lb_type)t, cand) >= 2) ||
              pre_candidates(tuned, tables, ntab, (lb_type)t, false, pfn, pnm) >= 2 ||
              pre_candidates(tuned, tables, ntab, (lb_type)t, true, pfn, pnm) >= 2;
    if (!any) return; /* one family's kernels only: nothing to choose */

    static char chosen[LB_TYPE_COUNT_][CH_N][64]; /* once, under matmul.c's pthread_once */
    memset(chosen, 0, sizeof chosen);
    char key[320], dir[4000], name[40], path[4100];
    cache_key(tuned, candidates_hash(tuned, tables, ntab), key, sizeof key);
    snprintf(name, sizeof name, "kernels-%016llx.txt", (unsigned long long)fnv1a(key));
    const bool have_dir = cache_dir(dir, sizeof dir) &&
                          snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path;
    if (!(have_dir && !remeasure && cache_read(path, key, chosen))) memset(chosen, 0, sizeof chosen);
    bool wrote = false;
    for (int t = 0; t < LB_TYPE_COUNT_; t++) {
        tune_prefill(tuned, tables, ntab, (lb_type)t, false, chosen[t][CH_ROWS], &wrote);
        lb_wkernel *wk = &tuned->w[t];
        if (!x16_tuned(tuned, (lb_type)t)) continue;
        tune_prefill(tuned, tables, ntab, (lb_type)t, true, chosen[t][CH_X16], &wrote);
        const int nc = candidates(tuned, tables, ntab, (lb_type)t, cand);
        if (nc < 2) continue;
        int pick = -1;
        for (int c = 0; c < nc; c++)
            if (strcmp(cand[c]->x16_name, chosen[t][CH_DEC]) == 0) pick = c;
        if (pick < 0) {
            lb_mm_fn fn[LB_KV_COUNT];
            double sec[LB_KV_COUNT];
            int own = 0;
            for (int c = 0; c < nc; c++) {
                fn[c] = cand[c]->mm_x16;
                if (fn[c] == wk->mm_x16) own = c;
            }
            if (!measure((lb_type)t, wk->act_type, tuned, fn, nc, 1, TUNE_SAMPLES, true, sec))
                continue;
            pick = fastest(sec, nc, own);
            snprintf(chosen[t][CH_DEC], 64, "%s", cand[pick]->x16_name);
            wrote = true;
        }
        if (cand[pick]->mm_x16 != wk->mm_x16) {
            wk->mm_x16_dec = cand[pick]->mm_x16;
            wk->x16_dec_name = cand[pick]->x16_name;
        }
    }
    if (wrote && have_dir) cache_write(dir, name, key, chosen);
}
