/* Core: errors, allocation, fp16/bf16, CPU features, thread pool, files. */
#include "th.h"
#include "lowbit/file.h"
#include "core/internal.h"

#include <dirent.h>
#include <sys/stat.h>

#include <stdatomic.h>
#include <unistd.h>

static void test_errors(void) {
    lb_clear_error();
    TH_CHECK_STR(lb_last_error(), "");
    lb_status st = lb_set_error(LB_ERR_FORMAT, "bad %s at %d", "thing", 7);
    TH_CHECK(st == LB_ERR_FORMAT);
    TH_CHECK_STR(lb_last_error(), "bad thing at 7");
    lb_error_context(st, "file.bin");
    TH_CHECK_STR(lb_last_error(), "file.bin: bad thing at 7");
    TH_CHECK_STR(lb_status_name(LB_ERR_NOT_FOUND), "LB_ERR_NOT_FOUND");
    TH_CHECK_STR(lb_status_name((lb_status)99), "LB_ERR_UNKNOWN");
}

static void test_alloc(void) {
    for (size_t n = 0; n < 300; n += 37) {
        void *p = lb_alloc(n);
        TH_CHECK(p != NULL);
        TH_CHECK(((uintptr_t)p % 64) == 0);
        lb_free(p);
    }
    unsigned char *z = lb_calloc(100, 3);
    TH_CHECK(z != NULL);
    int nz = 0;
    for (int i = 0; i < 300; i++) nz += z[i] != 0;
    TH_CHECK_INT(nz, 0);
    lb_free(z);
    lb_clear_error();
    TH_CHECK(lb_calloc(SIZE_MAX / 2, 4) == NULL);
    TH_CHECK(strstr(lb_last_error(), "overflow") != NULL);
    size_t r;
    TH_CHECK(!lb_mul_ok(SIZE_MAX, 2, &r));
    TH_CHECK(lb_mul_ok(3, 5, &r) && r == 15);
    TH_CHECK(!lb_add_ok(SIZE_MAX, 1, &r));
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Reference f32 -> f16 by exhaustive nearest search with ties to even,
 * computed independently from the tested code: every f16 value is exactly
 * representable as f32, so compare distances in double. */
static uint16_t ref_f32_to_f16(float f) {
    if (isnan(f)) return 0x7e00;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a >= 65520.0) return sign | 0x7c00; /* rounds to Inf */
    uint16_t best = 0;
    double bestd = INFINITY;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double v = lb_f16_to_f32((uint16_t)h);
        double d = fabs(v - a);
        if (d < bestd || (d == bestd && (h & 1) == 0)) {
            bestd = d;
            best = (uint16_t)h;
        }
    }
    return sign | best;
}

static void test_fp16(void) {
    /* Known values. */
    TH_CHECK_INT(lb_f32_to_f16(1.0f), 0x3c00);
    TH_CHECK_INT(lb_f32_to_f16(-2.0f), 0xc000);
    TH_CHECK_INT(lb_f32_to_f16(65504.0f), 0x7bff);
    TH_CHECK_INT(lb_f32_to_f16(65520.0f), 0x7c00);   /* ties up to Inf */
    TH_CHECK_INT(lb_f32_to_f16(65519.99f), 0x7bff);
    TH_CHECK_INT(lb_f32_to_f16(INFINITY), 0x7c00);
    TH_CHECK_INT(lb_f32_to_f16(-INFINITY), 0xfc00);
    TH_CHECK_INT(lb_f32_to_f16(0x1p-24f), 0x0001);  /* smallest subnormal */
    TH_CHECK_INT(lb_f32_to_f16(0x1p-25f), 0x0000);  /* tie -> even (0) */
    TH_CHECK_INT(lb_f32_to_f16(0x1.8p-24f), 0x0002); /* 1.5 ulp tie -> 2 */
    TH_CHECK_INT(lb_f32_to_f16(-0.0f), 0x8000);
    /* 1 + 2^-11 is exactly halfway between 1 and 1+2^-10: ties to even. */
    TH_CHECK_INT(lb_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    TH_CHECK_INT(lb_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    uint16_t hn = lb_f32_to_f16(NAN);
    TH_CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0);
    TH_CHECK(isnan(lb_f16_to_f32(0x7e00)));
    TH_CHECK(isinf(lb_f16_to_f32(0xfc00)) && lb_f16_to_f32(0xfc00) < 0);
    /* Every f16 round-trips exactly through f32. */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = lb_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            if ((h & 0x7c00) != 0x7c00 || (h & 0x3ff) == 0) bad++;
            if (!isnan(lb_f16_to_f32(lb_f32_to_f16(f)))) bad++;
            continue;
        }
        if (lb_f32_to_f16(f) != h) bad++;
    }
    TH_CHECK_INT(bad, 0);
    /* Random f32 values against the brute-force reference. */
    uint32_t s = 12345;
    bad = 0;
    for (int i = 0; i < 300; i++) {
        s = s * 1664525u + 1013904223u;
        /* exponents in the f16 range and around it */
        uint32_t e = 100 + (s >> 24) % 50;
        uint32_t u = (s & 0x807fffffu) | (e << 23);
        float f = from_bits(u);
        if (lb_f32_to_f16(f) != ref_f32_to_f16(f)) bad++;
    }
    TH_CHECK_INT(bad, 0);
}

static void test_bf16(void) {
    TH_CHECK_INT(lb_f32_to_bf16(1.0f), 0x3f80);
    /* 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even. */
    TH_CHECK_INT(lb_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    TH_CHECK_INT(lb_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    TH_CHECK_INT(lb_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    TH_CHECK_INT(lb_f32_to_bf16(INFINITY), 0x7f80);
    TH_CHECK_INT(lb_f32_to_bf16(-INFINITY), 0xff80);
    TH_CHECK_INT(lb_f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80); /* overflow */
    uint16_t n = lb_f32_to_bf16(from_bits(0x7f800001u)); /* sNaN, tiny payload */
    TH_CHECK((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0);
    TH_CHECK(bits(lb_bf16_to_f32(0x3f80)) == 0x3f800000u);
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = lb_bf16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        if (lb_f32_to_bf16(f) != h) bad++;
    }
    TH_CHECK_INT(bad, 0);
    float src[5] = {1.0f, -3.5f, 0.1f, 1e30f, -0.0f};
    uint16_t mid[5];
    float back[5];
    lb_f32_to_bf16_row(src, mid, 5);
    lb_bf16_to_f32_row(mid, back, 5);
    TH_CHECK(back[0] == 1.0f && back[1] == -3.5f);
    TH_CHECK(fabsf(back[2] - 0.1f) < 1e-3f);
}

static void test_cpu(void) {
    const lb_cpu_features *f = lb_cpu_get();
    TH_CHECK(f == lb_cpu_get());
    /* Implications that must hold if detection is coherent. */
    if (f->avx2) TH_CHECK(f->avx && f->os_avx);
    if (f->avx512f) TH_CHECK(f->os_avx512 && f->os_avx);
    if (f->avx512_vnni) TH_CHECK(f->avx512f);
    if (f->amx_int8) TH_CHECK(f->os_amx && f->amx_tile);
    char buf[256];
    lb_cpu_describe(buf, sizeof buf);
    fprintf(stderr, "  cpu: %s\n", buf);
    TH_CHECK(strlen(buf) < sizeof buf);
    /* Cross-check AVX2 against /proc/cpuinfo (Linux x86-64). */
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (fp) {
        char line[8192];
        int has_avx2 = -1;
        while (fgets(line, sizeof line, fp))
            if (strncmp(line, "flags", 5) == 0) {
                has_avx2 = strstr(line, " avx2") != NULL;
                break;
            }
        fclose(fp);
        if (has_avx2 >= 0) TH_CHECK_INT(f->avx2, has_avx2);
    }
}

typedef struct {
    atomic_int hits[64];
    atomic_int phase_errors;
    atomic_int stage;
    long sum[16];
    int nth_seen;
} pool_ctx;

static void pool_job(void *p, int ith, int nth) {
    pool_ctx *c = p;
    c->nth_seen = nth;
    size_t b, e;
    lb_split_range(64, ith, nth, &b, &e);
    for (size_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
}

static lb_pool *g_pool;
static void pool_barrier_job(void *p, int ith, int nth) {
    pool_ctx *c = p;
    for (int round = 0; round < 50; round++) {
        atomic_fetch_add(&c->stage, 1);
        lb_pool_barrier(g_pool);
        /* After the barrier every worker has incremented for this round. */
        if (atomic_load(&c->stage) < (round + 1) * nth)
            atomic_fetch_add(&c->phase_errors, 1);
        lb_pool_barrier(g_pool);
    }
    c->sum[ith] = ith;
}

static void test_pool(void) {
    for (int n = 1; n <= 4; n++) {
        lb_pool *pool = lb_pool_create(n);
        TH_CHECK(pool != NULL);
        TH_CHECK_INT(lb_pool_size(pool), n);
        for (int rep = 0; rep < 200; rep++) {
            pool_ctx c;
            memset(&c, 0, sizeof c);
            lb_pool_run(pool, pool_job, &c);
            int bad = 0;
            for (int i = 0; i < 64; i++) bad += atomic_load(&c.hits[i]) != 1;
            TH_CHECK_INT(bad, 0);
            TH_CHECK_INT(c.nth_seen, n);
            if (rep % 50 == 0) usleep(2000); /* let workers fall asleep */
        }
        pool_ctx c;
        memset(&c, 0, sizeof c);
        g_pool = pool;
        lb_pool_run(pool, pool_barrier_job, &c);
        TH_CHECK_INT(atomic_load(&c.phase_errors), 0);
        TH_CHECK_INT(atomic_load(&c.stage), 50 * n);
        lb_pool_free(pool);
    }
    /* NULL pool runs inline. */
    pool_ctx c;
    memset(&c, 0, sizeof c);
    lb_pool_run(NULL, pool_job, &c);
    TH_CHECK_INT(c.nth_seen, 1);
    size_t b, e, total = 0;
    for (int i = 0; i < 7; i++) {
        lb_split_range(100, i, 7, &b, &e);
        total += e - b;
        TH_CHECK(e - b == 14 || e - b == 15);
    }
    TH_CHECK_INT(total, 100);
}

/* lb_steal_take: every chunk exactly once over a real pool (totals below,
 * equal to and above nth, with a worker that starts only when the others
 * have finished, so they must have taken its range); and, driven by hand
 * from one thread, the order the contract gives: a worker's own range
 * front to back, then the next ranges' fronts. */
typedef struct steal_ctx {
    lb_steal_ctr ctr[4];
    int64_t total;
    atomic_int hits[200];
    atomic_int own[4]; /* chunks a worker took from its own range */
    atomic_int finished;
} steal_ctx;

static void steal_job(void *p, int ith, int nth) {
    steal_ctx *c = p;
    if (nth > 1 && ith == nth - 1) /* the last worker starts last */
        while (atomic_load(&c->finished) < nth - 1) usleep(100);
    int k = 0;
    int64_t ch;
    while (lb_steal_take(c->ctr, c->total, ith, nth, &k, &ch)) {
        TH_CHECK(ch >= 0 && ch < c->total);
        if (ch >= 0 && ch < c->total) atomic_fetch_add(&c->hits[ch], 1);
        size_t b, e;
        lb_split_range((size_t)c->total, ith, nth, &b, &e);
        if ((size_t)ch >= b && (size_t)ch < e) atomic_fetch_add(&c->own[ith], 1);
    }
    atomic_fetch_add(&c->finished, 1);
}

static void test_steal(void) {
    static const int64_t totals[] = {0, 1, 3, 4, 7, 64, 200};
    for (int n = 1; n <= 4; n++) {
        lb_pool *pool = lb_pool_create(n);
        TH_CHECK(pool != NULL);
        for (size_t t = 0; t < LB_ARRAY_LEN(totals); t++) {
            steal_ctx *c = lb_calloc(1, sizeof *c); /* 64-byte aligned counters */
            TH_CHECK(c != NULL);
            if (!c) break;
            c->total = totals[t];
            lb_steal_reset(c->ctr, 4);
            lb_pool_run(pool, steal_job, c);
            int bad = 0;
            for (int64_t i = 0; i < c->total; i++) bad += atomic_load(&c->hits[i]) != 1;
            TH_CHECK_INT(bad, 0);
            /* the late worker's range was taken by the others */
            if (n > 1) TH_CHECK_INT(atomic_load(&c->own[n - 1]), 0);
            lb_free(c);
        }
        lb_pool_free(pool);
    }
    /* by hand, 3 workers, 10 chunks: ranges [0,4) [4,7) [7,10) */
    lb_steal_ctr ctr[3];
    lb_steal_reset(ctr, 3);
    int k1 = 0, k2 = 0;
    int64_t ch, got[10];
    int ng = 0;
    TH_CHECK(lb_steal_take(ctr, 10, 1, 3, &k1, &ch));
    TH_CHECK_INT(ch, 4);
    while (ng < 10 && lb_steal_take(ctr, 10, 1, 3, &k1, &ch)) got[ng++] = ch;
    /* worker 1: rest of its own range, then worker 2's, then worker 0's */
    static const int64_t want[9] = {5, 6, 7, 8, 9, 0, 1, 2, 3};
    TH_CHECK_INT(ng, 9);
    for (int i = 0; i < 9 && i < ng; i++) TH_CHECK_INT(got[i], want[i]);
    TH_CHECK(!lb_steal_take(ctr, 10, 2, 3, &k2, &ch));
    TH_CHECK_INT(k2, 3);
}

static void test_files(void) {
    const char *dir = th_tmpdir();
    char *path = lb_path_join(dir, "atomic.bin");
    lb_atomic_file af;
    TH_CHECK_OK(lb_atomic_open(path, &af));
    TH_CHECK_OK(lb_atomic_write(&af, "hello", 5));
    TH_CHECK_OK(lb_atomic_pad(&af, 3));
    TH_CHECK(!lb_is_file(path)); /* not visible before commit */
    TH_CHECK_OK(lb_atomic_commit(&af));
    TH_CHECK(lb_is_file(path));
    lb_mapped_file mf;
    TH_CHECK_OK(lb_map_file(path, &mf));
    TH_CHECK_INT(mf.size, 8);
    TH_CHECK(memcmp(mf.data, "hello\0\0\0", 8) == 0);
    lb_unmap_file(&mf);
    /* Abort leaves the old file untouched and no temp behind. */
    TH_CHECK_OK(lb_atomic_open(path, &af));
    char *tmp = strdup(af.tmp_path);
    TH_CHECK_OK(lb_atomic_write(&af, "XX", 2));
    lb_atomic_abort(&af);
    TH_CHECK(!lb_is_file(tmp));
    char *data;
    size_t n;
    TH_CHECK_OK(lb_read_file(path, 100, &data, &n));
    TH_CHECK_INT(n, 8);
    free(data);
    TH_CHECK_FAILS(lb_read_file(path, 4, &data, &n), LB_ERR_RANGE);
    TH_CHECK_FAILS(lb_map_file("/nonexistent/x", &mf), LB_ERR_IO);
    TH_CHECK(strstr(lb_last_error(), "/nonexistent/x") != NULL);
    TH_CHECK_FAILS(lb_map_file_ex("/nonexistent/x", LB_MAP_COPY, &mf), LB_ERR_IO);
    TH_CHECK_OK(lb_check_regular_file(path));
    TH_CHECK_FAILS(lb_check_regular_file("/nonexistent/x"), LB_ERR_NOT_FOUND);
    TH_CHECK_FAILS(lb_check_regular_file("/dev/null"), LB_ERR_IO);
    TH_CHECK(strstr(lb_last_error(), "not a regular file") != NULL);
    TH_CHECK_FAILS(lb_check_regular_file(dir), LB_ERR_IO);
    /* LB_MAP_COPY: the same bytes, in a 2 MiB-aligned private copy; a 3 MiB
     * file (more than one huge page, a partial last page) and an empty one */
    {
        char *big = lb_path_join(dir, "copy.bin");
        const size_t bn = (size_t)3 << 20 | 123;
        uint8_t *want = malloc(bn);
        for (size_t i = 0; i < bn; i++) want[i] = (uint8_t)(i * 2654435761u >> 13);
        TH_CHECK_OK(lb_atomic_open(big, &af));
        TH_CHECK_OK(lb_atomic_write(&af, want, bn));
        TH_CHECK_OK(lb_atomic_commit(&af));
        TH_CHECK_OK(lb_map_file_ex(big, LB_MAP_COPY, &mf));
        TH_CHECK_INT(mf.size, bn);
        TH_CHECK(mf.data && ((uintptr_t)mf.data & (((uintptr_t)2 << 20) - 1)) == 0);
        TH_CHECK(mf.data && memcmp(mf.data, want, bn) == 0);
        /* release leaves a copy alone (its pages would read back as
         * zeros) */
        lb_mapped_file_release(&mf, mf.data, mf.size);
        TH_CHECK(mf.data && memcmp(mf.data, want, bn) == 0);
        lb_unmap_file(&mf);
        /* a file mapping: the touched pages leave the RSS, the bytes stay
         * (read from the file again) */
        TH_CHECK_OK(lb_map_file(big, &mf));
        TH_CHECK(!mf.copy && memcmp(mf.data, want, bn) == 0);
        const long pages = (long)(bn / (size_t)sysconf(_SC_PAGESIZE));
        const long r0 = th_rss_pages();
        lb_mapped_file_release(&mf, want, bn); /* not inside: nothing */
        lb_mapped_file_release(&mf, mf.data, mf.size);
        const long r1 = th_rss_pages();
        TH_CHECK_MSG(r0 - r1 >= pages * 3 / 4, "RSS %ld -> %ld pages after "
                     "releasing a %ld-page mapping", r0, r1, pages);
        TH_CHECK(memcmp(mf.data, want, bn) == 0);
        TH_CHECK(th_rss_pages() - r1 >= pages * 3 / 4);
        lb_unmap_file(&mf);
        TH_CHECK_OK(lb_atomic_open(big, &af));
        TH_CHECK_OK(lb_atomic_commit(&af));
        TH_CHECK_OK(lb_map_file_ex(big, LB_MAP_COPY, &mf));
        TH_CHECK(mf.size == 0 && mf.data == NULL);
        lb_unmap_file(&mf);
        unlink(big);
        free(big);
        free(want);
    }
    free(tmp);
    unlink(path);
    free(path);
}

/* Spill space (lb_spill_map): a shared mapping of an unlinked file in the
 * directory, zero bytes at first, no name left in the directory; after
 * lb_drop_pages its pages leave the RSS and read back as last written;
 * errors name the directory. */
static void test_spill(void) {
    char *dir = lb_path_join(th_tmpdir(), "spill-core");
    TH_CHECK(dir && mkdir(dir, 0700) == 0);
    const size_t n = (size_t)5 << 20 | 4321;
    uint8_t *p = NULL;
    TH_CHECK_OK(lb_spill_map(dir, n, "test buffer", (void **)&p));
    if (p) {
        size_t nz = 0;
        for (size_t i = 0; i < n; i++) nz += p[i] != 0;
        TH_CHECK_INT(nz, 0);
        for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 2654435761u >> 13);
        DIR *d = opendir(dir);
        int names = 0;
        for (struct dirent *e; d && (e = readdir(d));)
            names += e->d_name[0] != '.';
        if (d) closedir(d);
        TH_CHECK_INT(names, 0);
        const long pages = (long)(n / (size_t)sysconf(_SC_PAGESIZE));
        const long r0 = th_rss_pages();
        lb_drop_pages(p, n);
        const long r1 = th_rss_pages();
        TH_CHECK_MSG(r0 - r1 >= pages * 3 / 4, "RSS %ld -> %ld pages after "
                     "dropping a %ld-page spill", r0, r1, pages);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += p[i] != (uint8_t)(i * 2654435761u >> 13);
        TH_CHECK_INT(bad, 0);
        lb_spill_unmap(p, n);
    }
    char *missing = lb_path_join(dir, "none");
    p = (uint8_t *)1;
    TH_CHECK_FAILS(lb_spill_map(missing, 4096, "x", (void **)&p),
                   LB_ERR_NOT_FOUND);
    TH_CHECK(p == NULL && strstr(lb_last_error(), missing));
    TH_CHECK_FAILS(lb_spill_map(dir, 0, "x", (void **)&p), LB_ERR_INVALID_ARG);
    free(missing);
    rmdir(dir);
    free(dir);
}

int main(void) {
    TH_RUN(test_errors);
    TH_RUN(test_alloc);
    TH_RUN(test_fp16);
    TH_RUN(test_bf16);
    TH_RUN(test_cpu);
    TH_RUN(test_pool);
    TH_RUN(test_steal);
    TH_RUN(test_files);
    TH_RUN(test_spill);
    return th_report();
}
