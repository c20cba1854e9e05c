/*
 * th.h — lowbit's minimal test harness (header only).
 *
 *   static void test_foo(void) { TH_CHECK(1 + 1 == 2); ... }
 *   int main(void) { TH_RUN(test_foo); return th_report(); }
 *
 * Each failed check prints file:line and the expression; th_report() prints
 * "N cases, M checks, K failed" and returns 0 / 1. A whole test program that
 * cannot run (missing optional tool) calls th_skip("why"), which exits 77 so
 * CTest reports it as skipped, never as passed.
 */
#ifndef LB_TH_H
#define LB_TH_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lowbit/core.h"

static int th_n_checks, th_n_failed, th_n_cases, th_case_failed_flag,
    th_n_cases_failed;
static const char *th_current = "";

#define TH_CHECK(cond)                                                         \
    do {                                                                       \
        th_n_checks++;                                                         \
        if (!(cond)) {                                                         \
            th_n_failed++;                                                     \
            th_case_failed_flag = 1;                                           \
            fprintf(stderr, "  FAIL %s:%d [%s]: %s\n", __FILE__, __LINE__,    \
                    th_current, #cond);                                        \
        }                                                                      \
    } while (0)

#define TH_CHECK_MSG(cond, ...)                                                \
    do {                                                                       \
        th_n_checks++;                                                         \
        if (!(cond)) {                                                         \
            th_n_failed++;                                                     \
            th_case_failed_flag = 1;                                           \
            fprintf(stderr, "  FAIL %s:%d [%s]: %s: ", __FILE__, __LINE__,    \
                    th_current, #cond);                                        \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

#define TH_CHECK_INT(a, b)                                                     \
    do {                                                                       \
        long long th_a_ = (long long)(a), th_b_ = (long long)(b);              \
        TH_CHECK_MSG(th_a_ == th_b_, "%lld != %lld", th_a_, th_b_);            \
    } while (0)

#define TH_CHECK_NEAR(a, b, tol)                                               \
    do {                                                                       \
        double th_a_ = (double)(a), th_b_ = (double)(b);                       \
        TH_CHECK_MSG(fabs(th_a_ - th_b_) <= (tol), "%.9g vs %.9g (tol %g)",     \
                     th_a_, th_b_, (double)(tol));                             \
    } while (0)

#define TH_CHECK_STR(a, b)                                                     \
    do {                                                                       \
        const char *th_a_ = (a), *th_b_ = (b);                                 \
        TH_CHECK_MSG(th_a_ && th_b_ && strcmp(th_a_, th_b_) == 0,              \
                     "\"%s\" != \"%s\"", th_a_ ? th_a_ : "(null)",             \
                     th_b_ ? th_b_ : "(null)");                                \
    } while (0)

/* Check an lb_status is LB_OK, printing lb_last_error() otherwise. */
#define TH_CHECK_OK(expr)                                                      \
    do {                                                                       \
        lb_status th_st_ = (expr);                                             \
        TH_CHECK_MSG(th_st_ == LB_OK, "%s: %s", lb_status_name(th_st_),        \
                     lb_last_error());                                         \
    } while (0)

/* Check that expr fails with status `want` (LB_OK-vs-error is not enough:
 * the kind matters) and that an error message was set. */
#define TH_CHECK_FAILS(expr, want)                                             \
    do {                                                                       \
        lb_clear_error();                                                      \
        lb_status th_st_ = (expr);                                             \
        TH_CHECK_MSG(th_st_ == (want), "got %s, want %s (%s)",                 \
                     lb_status_name(th_st_), lb_status_name(want),             \
                     lb_last_error());                                         \
        TH_CHECK_MSG(lb_last_error()[0] != '\0', "no error message set");      \
    } while (0)

#define TH_RUN(fn)                                                             \
    do {                                                                       \
        th_current = #fn;                                                      \
        th_case_failed_flag = 0;                                               \
        th_n_cases++;                                                          \
        fn();                                                                  \
        if (th_case_failed_flag) th_n_cases_failed++;                          \
        fprintf(stderr, "%s %s\n", th_case_failed_flag ? "FAIL" : "ok  ", #fn); \
    } while (0)

static inline int th_report(void) {
    fprintf(stderr, "%d cases (%d failed), %d checks, %d failed\n", th_n_cases,
            th_n_cases_failed, th_n_checks, th_n_failed);
    return th_n_failed ? 1 : 0;
}

static inline void th_skip(const char *why) {
    fprintf(stderr, "SKIPPED: %s\n", why);
    exit(77);
}

/* Path of a file under the shared folder (default ../shared, or
 * $LB_SHARED). Returns a static buffer (one at a time per call site). */
static inline const char *th_shared(const char *rel) {
    static char buf[8][1024];
    static int slot;
    const char *root = getenv("LB_SHARED");
    if (!root) root = "../shared";
    char *b = buf[slot++ & 7];
    snprintf(b, sizeof buf[0], "%s/%s", root, rel);
    return b;
}

/* Read a whole binary file; *n gets its size. Returns NULL if absent. */
static inline void *th_read_bin(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(sz > 0 ? (size_t)sz : 1);
    if (p && sz > 0 && fread(p, 1, (size_t)sz, f) != (size_t)sz) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (n) *n = sz > 0 ? (size_t)sz : 0;
    return p;
}

/* A fresh scratch directory under $TMPDIR (or /tmp); static buffer. */
static inline const char *th_tmpdir(void) {
    static char dir[512];
    if (dir[0]) return dir;
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/lbtest.XXXXXX", t ? t : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(2);
    }
    return dir;
}

/* Resident pages of this process (/proc/self/statm), -1 if unknown. */
static inline long th_rss_pages(void) {
    long size = -1, rss = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &size, &rss) != 2) rss = -1;
    fclose(f);
    return rss;
}

/* Ai = A^-1 for a nonsingular A [n, n], by Gauss-Jordan with partial
 * pivoting in float64 (the independent inverse of the GPTQ-family tests). */
static inline void th_inv64(const double *A, double *Ai, int n) {
    double *M = calloc((size_t)n * 2 * n, sizeof(double));
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) M[i * 2 * n + j] = A[i * n + j];
        M[i * 2 * n + n + i] = 1.0;
    }
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(M[r * 2 * n + c]) > fabs(M[p * 2 * n + c])) p = r;
        for (int j = 0; j < 2 * n; j++) {
            double t = M[c * 2 * n + j];
            M[c * 2 * n + j] = M[p * 2 * n + j];
            M[p * 2 * n + j] = t;
        }
        double d = M[c * 2 * n + c];
        for (int j = 0; j < 2 * n; j++) M[c * 2 * n + j] /= d;
        for (int r = 0; r < n; r++) {
            if (r == c) continue;
            double f = M[r * 2 * n + c];
            for (int j = 0; j < 2 * n; j++) M[r * 2 * n + j] -= f * M[c * 2 * n + j];
        }
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) Ai[i * n + j] = M[i * 2 * n + n + j];
    free(M);
}

#endif /* LB_TH_H */
