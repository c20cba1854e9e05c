/*
 * Measured decode-kernel choice (issue 10: "kernel choice that holds on
 * any x86-64 machine").
 *
 * The family in use is picked from CPUID (matmul.c), but the fastest decode
 * kernel of a weight type is not always that family's: a 512-bit kernel
 * can lose to a 256-bit one on a CPU whose 512-bit path is narrow or
 * down-clocks. For the repacked (X16) types every usable family's decode
 * kernel reads the same layout and gives the same bits (kernels_internal.h:
 * Q4_0/Q8_0 the AVX2 kernels' bits, the others the reference's), so the
 * choice can be made by measurement without changing any output.
 *
 * Per X16 type with two or more distinct candidate kernels (the decode
 * kernels of the usable SIMD families up to the one in use, same
 * activation type): each candidate multiplies a synthetic 256 x 4096
 * matrix (0.6-1.1 MB: from L2/L3, so the figure is the kernel's own rate,
 * not this moment's DRAM contention) by one token, 4 calls per sample,
 * 5 samples in turns; the thread's CPU time is the measure (other
 * processes' load does not count), the minimum per candidate is kept, and
 * a candidate replaces the family's own kernel only when it is at least
 * 5% faster. The result fills lb_wkernel.mm_x16_dec (used for n_tokens <
 * LB_X16_DEC_MAX; prefill keeps the family's kernels).
 *
 * Cache: the choice is kept in $LB_CACHE_DIR, else $XDG_CACHE_HOME/lowbit,
 * else $HOME/.cache/lowbit, file kernels-<hash>.txt, where the hash covers
 * the CPU brand string, the microcode revision (/proc/cpuinfo), the family
 * and lowbit's version; the file repeats them and is used only when they
 * match. Written atomically (lb_write_file_in); every failure to read or
 * write it only means measuring again. LB_TUNE=0 turns the
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
#endif

#define TUNE_ROWS 256
#define TUNE_COLS 4096
#define TUNE_CALLS 4
#define TUNE_SAMPLES 5

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

/* seconds per call of the fastest sample of each candidate */
static bool measure(lb_type t, const lb_kernel_table *base, const lb_wkernel **cand, int nc,
                    double *best) {
    size_t ws, as;
    if (!lb_row_size(t, TUNE_COLS, &ws) || !lb_row_size(base->w[t].act_type, TUNE_COLS, &as) ||
        !base->qact[base->w[t].act_type])
        return false;
    uint8_t *w = lb_alloc(ws * TUNE_ROWS), *a = lb_alloc(as);
    float *x = lb_alloc(sizeof(float) * TUNE_COLS), *y = lb_alloc(sizeof(float) * TUNE_ROWS);
    const bool ok = w && a && x && y;
    if (ok) {
        /* 0x31 in every byte: codes, and fp16 scales of 0.16 (normal) */
        memset(w, 0x31, ws * TUNE_ROWS);
        for (int i = 0; i < TUNE_COLS; i++) x[i] = (float)((i * 37) % 101 - 50) / 50.0f;
        base->qact[base->w[t].act_type](x, a, TUNE_COLS);
        for (int c = 0; c < nc; c++) {
            cand[c]->mm_x16(TUNE_COLS, w, ws, TUNE_ROWS, a, as, 1, y, TUNE_ROWS); /* warm-up */
            best[c] = 1e30;
        }
        for (int s = 0; s < TUNE_SAMPLES; s++)
            for (int c = 0; c < nc; c++) {
                const double t0 = thread_seconds();
                for (int k = 0; k < TUNE_CALLS; k++)
                    cand[c]->mm_x16(TUNE_COLS, w, ws, TUNE_ROWS, a, as, 1, y, TUNE_ROWS);
                const double dt = (thread_seconds() - t0) / TUNE_CALLS;
                if (dt < best[c]) best[c] = dt;
            }
    }
    lb_free(w), lb_free(a), lb_free(x), lb_free(y);
    return ok;
}

/* the cache's header line: what the choice depends on */
static void cache_key(const lb_kernel_table *base, char *key, size_t cap) {
    char brand[49], mc[32];
    cpu_brand(brand);
    cpu_microcode(mc);
    snprintf(key, cap, "lowbit %d.%d.%d kernel choice v1 | cpu %s | microcode %s | family %s",
             LB_VERSION_MAJOR, LB_VERSION_MINOR, LB_VERSION_PATCH, brand, mc, base->name);
}

/* chosen[t]: name read from the cache (or ""); true when the file matched.
 * A file that cannot be read is no cache (its error is not kept). */
static bool cache_read(const char *path, const char *key, char chosen[][64]) {
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
            if (lb_type_name(t) && strcmp(lb_type_name(t), tn) == 0) snprintf(chosen[t], 64, "%s", kn);
    }
    free(text);
    return ok;
}

/* dir/name <- the key line and one "TYPE kernel" line per choice,
 * atomically (lb_write_file_in); a failure only means measuring again */
static void cache_write(const char *dir, const char *name, const char *key, char chosen[][64]) {
    char text[4096];
    size_t n = (size_t)snprintf(text, sizeof text, "%s\n", key);
    for (int t = 0; t < LB_TYPE_COUNT_ && n < sizeof text; t++)
        if (chosen[t][0]) n += (size_t)snprintf(text + n, sizeof text - n, "%s %s\n", lb_type_name(t), chosen[t]);
    if (n >= sizeof text || lb_write_file_in(dir, name, text, n) != LB_OK) lb_clear_error();
}

void lb_kernels_tune(lb_kernel_table *tuned, const lb_kernel_table *const *tables, int ntab) {
    const char *env = getenv("LB_TUNE");
    if (env && strcmp(env, "0") == 0) return;
    const bool remeasure = env && strcmp(env, "1") == 0;
    const lb_wkernel *cand[LB_KV_COUNT];
    bool any = false;
    for (int t = 0; t < LB_TYPE_COUNT_ && !any; t++)
        any = lb_x16_type((lb_type)t) && tuned->w[t].mm_x16 && tuned->w[t].x16_fast &&
              candidates(tuned, tables, ntab, (lb_type)t, cand) >= 2;
    if (!any) return; /* one family's kernels only: nothing to choose */

    static char chosen[LB_TYPE_COUNT_][64]; /* once, under matmul.c's pthread_once */
    memset(chosen, 0, sizeof chosen);
    char key[256], dir[4000], name[40], path[4100];
    cache_key(tuned, key, sizeof key);
    snprintf(name, sizeof name, "kernels-%016llx.txt", (unsigned long long)fnv1a(key));
    const bool have_dir = cache_dir(dir, sizeof dir) &&
                          snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path;
    const bool cached = have_dir && !remeasure && cache_read(path, key, chosen);
    bool wrote = false;
    for (int t = 0; t < LB_TYPE_COUNT_; t++) {
        lb_wkernel *wk = &tuned->w[t];
        if (!lb_x16_type((lb_type)t) || !wk->mm_x16 || !wk->x16_fast) continue;
        const int nc = candidates(tuned, tables, ntab, (lb_type)t, cand);
        if (nc < 2) continue;
        int pick = -1;
        for (int c = 0; c < nc && cached; c++)
            if (strcmp(cand[c]->x16_name, chosen[t]) == 0) pick = c;
        if (pick < 0) {
            double sec[LB_KV_COUNT];
            if (!measure((lb_type)t, tuned, cand, nc, sec)) continue;
            int own = 0;
            for (int c = 0; c < nc; c++)
                if (cand[c]->mm_x16 == wk->mm_x16) own = c;
            pick = own;
            for (int c = 0; c < nc; c++)
                if (sec[c] < 0.95 * sec[own] && sec[c] < sec[pick]) pick = c;
            snprintf(chosen[t], 64, "%s", cand[pick]->x16_name);
            wrote = true;
        }
        if (cand[pick]->mm_x16 != wk->mm_x16) {
            wk->mm_x16_dec = cand[pick]->mm_x16;
            wk->x16_dec_name = cand[pick]->x16_name;
        }
    }
    if (wrote && have_dir) cache_write(dir, name, key, chosen);
}
