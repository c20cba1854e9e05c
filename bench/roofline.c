/*
 * roofline — this machine's DRAM read bandwidth, the ceiling of decode
 * speed: a decode step reads every weight once, so tokens/s <= bandwidth /
 * bytes of weights read per token.
 *
 *   roofline [--mib M] [--threads "1 2"] [--seconds S] [--reps R] [--4k] [--json]
 *
 * Each thread sums its own slice of a buffer of M MiB (default 1024, far
 * larger than any cache) with 256-bit loads, 4 independent accumulators
 * (lb_membw_pass, lowbit/kernels.h: a pool of the thread count, pinned as
 * `lowbit bench`'s when it takes every CPU); the buffer is in 2 MiB pages
 * as lowbit's weights are (lb_membw_create: MADV_HUGEPAGE; the figure
 * printed with "huge pages" says how much of it the kernel backed so),
 * --4k in 4 KiB pages (MADV_NOHUGEPAGE). Until
 * 2026-12-06 the tool read 4 KiB pages (aligned_alloc; transparent huge
 * pages are "madvise" only on the Zen 5 VM): a TLB miss every 4 KiB, which
 * lowbit's decode does not pay (4 alternated runs there: huge pages
 * 1.05-1.26x the 4 KiB figure at 1 thread, 0.96-1.27x at 2), so the
 * ceiling was too low and decode fractions of it too high (docs/model.md,
 * "K-quant prefetches kept where the line is read; the roofline in huge
 * pages");
 * passes are repeated for at least S seconds (default 2) and R passes
 * (default 5) per thread count in the list (default "1 2"), in the same run.
 * The figure is bytes read / wall time of the median pass ("read_gbs"), the
 * bandwidth a decode of a few seconds sees; the fastest pass is printed too
 * ("best_gbs"): on a shared host single passes vary (2-core Zen 5 VM,
 * 2026-12-06: 2-thread passes 33-63 GB/s within a minute, median ~57).
 * Before that day the tool printed the fastest of 5 passes, timed by the
 * main thread (now each worker times itself), and its 2-thread figures there were up to ~1.5x
 * too high (docs/model.md). Run it next to the decode it is compared with
 * (bench/vs_llamacpp.sh -R does).
 */
#include "lowbit/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Passes with nth threads for >= secs seconds and >= reps passes: the
 * median and the fastest pass's GB/s. */
static int measure(lb_membw *buf, int nth, int reps, double secs, double *median, double *best) {
    lb_pool *pool = nth > 1 ? lb_pool_create_ex(nth, LB_POOL_PIN_AUTO) : NULL;
    size_t cap = 64, np = 0;
    double *g = malloc(cap * sizeof *g);
    if (nth > 1 && !pool) {
        free(g);
        return -1;
    }
    const double t0 = lb_time_s();
    while (g && (np < (size_t)reps || lb_time_s() - t0 < secs)) {
        if (np == cap) {
            double *ng = realloc(g, 2 * cap * sizeof *g);
            if (!ng) break;
            g = ng;
            cap *= 2;
        }
        double s;
        if (lb_membw_pass(buf, pool, &s) != LB_OK) break;
        g[np++] = (double)lb_membw_bytes(buf) / s * 1e-9;
    }
    lb_pool_free(pool);
    if (!g || np == 0) {
        free(g);
        return -1;
    }
    qsort(g, np, sizeof *g, cmp_double);
    *median = np % 2 ? g[np / 2] : 0.5 * (g[np / 2 - 1] + g[np / 2]);
    *best = g[np - 1];
    free(g);
    return 0;
}

/* MiB of anonymous memory in huge pages (AnonHugePages of
 * /proc/self/smaps_rollup), -1 when unknown */
static long anon_huge_mib(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb / 1024;
}

static int usage(const char *why) {
    if (why) fprintf(stderr, "roofline: %s\n", why);
    fprintf(stderr, "usage: roofline [--mib M (16..16777216)] [--threads \"1 2\" (1..64 each)]"
                    " [--seconds S (0..3600)] [--reps R (1..1000000)] [--4k] [--json]\n");
    return 2;
}

/* the whole of s as a number in [lo, hi] */
static bool parse_num(const char *s, double lo, double hi, double *v) {
    char *end;
    *v = strtod(s, &end);
    return end != s && !*end && *v >= lo && *v <= hi;
}

int main(int argc, char **argv) {
    double mib = 1024, reps = 5, secs = 2.0;
    int json = 0, small = 0;
    const char *list = "1 2";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--4k")) small = 1;
        else if (strcmp(a, "--mib") && strcmp(a, "--reps") && strcmp(a, "--seconds") && strcmp(a, "--threads"))
            return usage("unknown option");
        else if (i + 1 >= argc) return usage("missing value");
        else if (!strcmp(a, "--mib")) {
            if (!parse_num(argv[++i], 16, 16777216, &mib) || mib != (double)(size_t)mib)
                return usage("--mib: a whole number of MiB, 16..16777216");
        } else if (!strcmp(a, "--reps")) {
            if (!parse_num(argv[++i], 1, 1e6, &reps) || reps != (double)(int)reps)
                return usage("--reps: a whole number, 1..1000000");
        } else if (!strcmp(a, "--seconds")) {
            if (!parse_num(argv[++i], 0, 3600, &secs)) return usage("--seconds: 0..3600");
        } else list = argv[++i]; /* --threads */
    }
    /* thread counts: 1..64 each, separated by spaces, each measured once */
    long tn[64];
    int nt = 0;
    for (const char *s = list;;) {
        while (*s == ' ') s++;
        if (!*s) break;
        char *end;
        const long t = strtol(s, &end, 10);
        if (end == s || (*end && *end != ' ') || t < 1 || t > 64)
            return usage("--threads: thread counts 1..64 separated by spaces");
        s = end;
        bool dup = false;
        for (int k = 0; k < nt; k++) dup = dup || tn[k] == t;
        if (!dup && nt < 64) tn[nt++] = t;
    }
    if (nt == 0) return usage("--threads: no thread count");
    lb_membw *buf = NULL;
    lb_status st = lb_membw_create((size_t)mib << 20, !small, &buf);
    if (st != LB_OK) {
        fprintf(stderr, "roofline: %s\n", lb_last_error());
        return 1;
    }
    /* per thread count: median and best GB/s */
    double med[64], best[64];
    for (int k = 0; k < nt; k++)
        if (measure(buf, (int)tn[k], (int)reps, secs, &med[k], &best[k])) {
            fprintf(stderr, "roofline: out of memory\n");
            lb_membw_free(buf);
            return 1;
        }
    const long huge = anon_huge_mib();
    if (json) {
        printf("{\"mib\": %zu, \"pages\": \"%s\", \"huge_mib\": %ld, \"seconds\": %.2f, \"read_gbs\": {", (size_t)mib,
               small ? "4k" : "huge", huge, secs);
        for (int i = 0; i < nt; i++) printf("%s\"%ld\": %.2f", i ? ", " : "", tn[i], med[i]);
        printf("}, \"best_gbs\": {");
        for (int i = 0; i < nt; i++) printf("%s\"%ld\": %.2f", i ? ", " : "", tn[i], best[i]);
        printf("}}\n");
    } else {
        printf("buffer: %zu MiB (%s), %ld MiB of it in huge pages\n", (size_t)mib,
               small ? "--4k" : "huge pages advised", huge);
        for (int i = 0; i < nt; i++)
            printf("read bandwidth, %ld thread%s: %.2f GB/s (median pass; fastest %.2f)\n", tn[i],
                   tn[i] > 1 ? "s" : "", med[i], best[i]);
    }
    lb_membw_free(buf);
    return 0;
}
