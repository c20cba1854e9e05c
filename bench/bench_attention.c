/*
 * bench_attention — the decode step's attention helpers (lb_vec_kernels
 * qk, exp_sum, pv, f16_to_f32) per kernel variant, as the forward pass
 * calls them for one token: for each of H (layer, KV head) pairs, the
 * f16 K and V rows of DEPTH cached positions in blocks of 64, converted,
 * scored against G queries, softmax-weighted and summed, the next block
 * prefetched (attn_unit in src/model/forward.c, without its online max /
 * rescale).
 *
 *   bench_attention [--depth 4096] [--heads 48] [--group 7] [--hd 64]
 *                   [--cached] [--min-time S]
 *
 * Defaults: Qwen2.5-0.5B's shape (24 layers x 2 KV heads, 7 queries per
 * KV head, head size 64) at depth 4096: ~50 MB of f16 cache per token,
 * read from memory as decode does; --cached reuses one head's 16 KB block
 * (the helpers' compute alone). Prints ms per token of thread CPU time
 * (the machine may be shared: CPU time is less disturbed than wall time)
 * for every usable variant, best of 3 passes, and the ratio to the AVX2
 * one measured in the same run.
 */
#include "kernels/kernels_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int depth = 4096, H = 48, G = 7, hd = 64, cached = 0;
    double min_time = 0.5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--depth") && i + 1 < argc) depth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--heads") && i + 1 < argc) H = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--group") && i + 1 < argc) G = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hd") && i + 1 < argc) hd = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-time") && i + 1 < argc) min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--cached")) cached = 1;
        else {
            fprintf(stderr, "usage: bench_attention [--depth N] [--heads H] [--group G] [--hd D] "
                            "[--cached] [--min-time S]\n");
            return 2;
        }
    }
    if (depth < 1 || H < 1 || G < 1 || G > 64 || hd < 1 || hd > 512) {
        fprintf(stderr, "bench_attention: bad shape\n");
        return 2;
    }
    enum { B = 64 };
    const size_t per = (size_t)depth * (size_t)hd, heads = cached ? 1 : (size_t)H;
    uint16_t *K16 = malloc(per * heads * 2), *V16 = malloc(per * heads * 2);
    float *q = malloc(sizeof(float) * (size_t)(G * hd)), *acc = malloc(sizeof(float) * (size_t)(G * hd)),
          *s = malloc(sizeof(float) * (size_t)(G * B)), *kf = malloc(sizeof(float) * B * (size_t)hd),
          *vf = malloc(sizeof(float) * B * (size_t)hd);
    if (!K16 || !V16 || !q || !acc || !s || !kf || !vf) {
        fprintf(stderr, "bench_attention: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < per * heads; i++) { /* finite f16 in [0.5, 2) */
        K16[i] = (uint16_t)(0x3800 | ((i * 7) & 0x7ff));
        V16[i] = (uint16_t)(0x3800 | ((i * 13) & 0x7ff));
    }
    for (int i = 0; i < G * hd; i++) q[i] = (float)(i % 17) * 0.01f;
    printf("attention per decode token: %d (layer, KV head) pairs x %d positions, %d queries each, "
           "head size %d, f16 cache %.1f MB%s\n",
           H, depth, G, hd, 4.0 * (double)per * H / 1e6, cached ? " (one block, cache-resident)" : "");
    double t_avx2 = 0;
    for (int v = 0; v < LB_KV_COUNT; v++) {
        if (!lb_kernels_usable(v)) continue;
        const lb_kernel_table *kt = lb_kernels_table(v);
        if (v > 0 && !memcmp(&kt->vec, &lb_kernels_table(v - 1)->vec, sizeof kt->vec)) continue;
        double best = 1e30, sink = 0;
        for (int pass = 0; pass < 3; pass++) {
            int iters = 0;
            const double t0 = cpu_s();
            do {
                for (int h = 0; h < H; h++) {
                    const uint16_t *Kh = K16 + (cached ? 0 : (size_t)h * per),
                                   *Vh = V16 + (cached ? 0 : (size_t)h * per);
                    memset(acc, 0, sizeof(float) * (size_t)(G * hd));
                    for (int j = 0; j < depth; j += B) {
                        const int nb = depth - j < B ? depth - j : B;
                        const size_t o = cached ? 0 : (size_t)j * hd;
                        kt->vec.f16_to_f32(Kh + o, kf, (int64_t)nb * hd);
                        kt->vec.f16_to_f32(Vh + o, vf, (int64_t)nb * hd);
                        if (!cached && j + B < depth) /* the next block, as attn_unit */
                            for (int off = 0; off < (depth - j - B < B ? depth - j - B : B) * hd * 2;
                                 off += 64) {
                                __builtin_prefetch((const char *)(Kh + o + (size_t)B * hd) + off);
                                __builtin_prefetch((const char *)(Vh + o + (size_t)B * hd) + off);
                            }
                        kt->vec.qk(G, hd, q, kf, nb, 0.125f, s, B);
                        for (int g = 0; g < G; g++) kt->vec.exp_sum(s + g * B, nb, 4.0f);
                        kt->vec.pv(G, hd, s, B, vf, nb, acc);
                    }
                    sink += acc[0];
                }
                iters++;
            } while (cpu_s() - t0 < min_time);
            const double ms = (cpu_s() - t0) / iters * 1e3;
            if (ms < best) best = ms;
        }
        if (v == LB_KV_AVX2) t_avx2 = best;
        printf("%-12s %8.3f ms per token", kt->name, best);
        if (t_avx2 > 0 && v != LB_KV_AVX2) printf("  (%.2fx the avx2 helpers)", t_avx2 / best);
        printf("%s\n", sink == sink ? "" : " (NaN)");
    }
    free(K16), free(V16), free(q), free(acc), free(s), free(kf), free(vf);
    return 0;
}
