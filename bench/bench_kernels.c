/*
 * bench_kernels — GEMV (decode, n_tokens = 1) and GEMM (prefill, n_tokens =
 * 512) throughput of lb_matmul per kernel variant, for Q4_0, Q8_0, Q4_K, Q6_K
 * and F16 weights at realistic shapes, with 1 and 2 threads. Prints GB/s of
 * weights streamed (GEMV), GFLOP/s (both), and each variant's speed relative
 * to the scalar reference measured in the same run.
 *
 *   bench_kernels [--quick] [--min-time SECONDS] [--dram]
 *
 * Q4_0/Q8_0/Q4_K/Q6_K are also timed in LB_LAYOUT_X16 (the layout the loader repacks
 * them into where the family asks for it; with LB_REPACK=1 every type a SIMD
 * family has an X16 kernel for, e.g. Q4_1), as "<variant>+x16". --dram: the
 * GEMVs cycle over copies of the weights totalling >= 512 MiB (one arena in
 * huge pages, as a loaded model's weights), so they stream from memory as
 * decode does (without it a matrix stays in L2/L3).
 * --cpu-time: 1-thread timings in process CPU time instead of wall time
 * (less disturbed on a shared machine: time the process spends descheduled
 * does not count). --only TYPE: one weight type; F8_E4M3_B32, NF4_B64,
 * FP4_B64 and I8_B32 (the FP8 / bitsandbytes in-memory types, random
 * codes) and Q4_1 / Q5_1 / Q5_K / Q3_K / Q2_K (X16 too) run only when named so.
 *
 * The reference GEMM is timed at 16 tokens (its cost per token is constant:
 * it is a loop of dot products) so that the run stays short; every other
 * GEMM uses 512 tokens.
 *
 * --shape OUTxIN (repeatable): these shapes instead of the default three
 * (e.g. --shape 896x896 --shape 151936x896 for Qwen2.5-0.5B's square
 * projections and lm_head). --tokens LIST: the decode-side token counts,
 * comma-separated (default 1; e.g. 1,2,4,8,15 for the server's small
 * tiles): each is timed like the GEMV (weights cycled with --dram) and
 * reported in GB/s of weights as "tok<N>". --prefill N: the GEMM's token
 * count (default 512; 0 skips the GEMM). BF16 runs only with --only bf16.
 */
#include "kernels/kernels_internal.h"
#include "lowbit/quants.h"
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Weight copies in one lb_map_huge arena, one after another (64-byte
 * aligned), as the loader holds a model's tensors (lb_map_file_ex with
 * LB_MAP_COPY): with 4 KiB pages the streaming GEMVs read DRAM more slowly
 * than decode does. */
static void *hp_alloc(size_t n) {
    void *p = lb_map_huge(n);
    if (!p) {
        fprintf(stderr, "bench_kernels: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static uint64_t rs = 0x1234567887654321ull;
static uint32_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 11);
}
static float rndf(void) { return (float)(rnd() & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f; }

/* Random weights: quantize random floats per row (valid scales). */
static uint8_t *make_weights(lb_type t, int64_t out, int64_t in, size_t *bytes) {
    size_t rb;
    lb_row_size(t, in, &rb);
    *bytes = rb * (size_t)out;
    uint8_t *w = malloc(*bytes);
    float *row = malloc(sizeof(float) * (size_t)in);
    for (int64_t o = 0; o < out; o++) {
        for (int64_t i = 0; i < in; i++) row[i] = rndf() * 0.05f;
        if (t == LB_TYPE_F8_E4M3_B32 || t == LB_TYPE_NF4_B64 || t == LB_TYPE_FP4_B64 ||
            t == LB_TYPE_I8_B32) {
            /* FP8 / bitsandbytes in-memory blocks: f32 d + 32 code bytes;
             * random codes (FP8: no NaN), d = 0.001 */
            for (size_t k = 0; k < rb; k++) {
                uint8_t c = (uint8_t)rnd();
                w[(size_t)o * rb + k] = (t == LB_TYPE_F8_E4M3_B32 && (c & 0x7f) == 0x7f) ? 0x7e : c;
            }
            for (size_t b = 0; b < rb / 36; b++) {
                const float d = 0.001f;
                memcpy(w + (size_t)o * rb + b * 36, &d, 4);
            }
        } else if (lb_type_can_quantize(t)) {
            lb_quantize_row(t, row, w + (size_t)o * rb, in);
        } else { /* K-quants: random codes and scales, sane fp16 d/dmin */
            for (size_t k = 0; k < rb; k++) w[(size_t)o * rb + k] = (uint8_t)rnd();
            if (t == LB_TYPE_Q6_K)
                for (size_t b = 0; b < rb / sizeof(lb_block_q6_K); b++)
                    ((lb_block_q6_K *)(w + (size_t)o * rb))[b].d = lb_f32_to_f16(0.001f);
            else
                for (size_t b = 0; b < rb / sizeof(lb_block_q4_K); b++) {
                    lb_block_q4_K *blk = (lb_block_q4_K *)(w + (size_t)o * rb) + b;
                    blk->d = lb_f32_to_f16(0.001f);
                    blk->dmin = lb_f32_to_f16(0.0005f);
                }
        }
    }
    free(row);
    return w;
}

#include <time.h>
static int g_cpu_time;
static double now_s(int th) {
    if (!g_cpu_time || th > 1) return lb_time_s();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* W[0..nw) are copies of one matrix; calls cycle over them. */
static double time_it(const lb_kernel_table *kt, lb_pool *pool, const lb_tensor *W, int nw,
                      const float *X, float *Y, int64_t nt, double min_time) {
    for (int k = 0; k < nw; k++) lb_matmul_table(kt, pool, &W[k], X, Y, nt); /* warm-up */
    int iters = 0;
    const int th = pool ? lb_pool_size(pool) : 1;
    double t0 = now_s(th), el;
    do {
        lb_matmul_table(kt, pool, &W[iters % nw], X, Y, nt);
        iters++;
        el = now_s(th) - t0;
    } while (el < min_time || iters < nw);
    return el / iters;
}

/* Copy of row-form weights w in LB_LAYOUT_X16 (the lb_x16_type types) at p. */
static void pack_x16(lb_type t, const uint8_t *w, int64_t out, int64_t in, size_t bytes, uint8_t *p) {
    size_t rb;
    lb_row_size(t, in, &rb);
    memcpy(p, w, bytes);
    for (int64_t g = 0; g < out / 16; g++)
        lb_x16_pack_group(t, w + (size_t)g * 16 * rb, rb, in / lb_type_get_traits((int)t)->blck_size,
                          p + (size_t)g * 16 * rb);
}

int main(int argc, char **argv) {
    int quick = 0, dram = 0, only = -1;
    double min_time = 0.25;
    int64_t user_shapes[16][2];
    int n_user_shapes = 0;
    int64_t toks[16] = {1};
    int n_toks = 1;
    int64_t NT = 512;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--dram")) dram = 1;
        else if (!strcmp(argv[i], "--cpu-time")) g_cpu_time = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = lb_type_from_name(argv[++i]);
        else if (!strcmp(argv[i], "--min-time") && i + 1 < argc) min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) NT = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            long long o, n;
            if (sscanf(argv[++i], "%lldx%lld", &o, &n) != 2 || o <= 0 || n <= 0 ||
                n_user_shapes >= 16) {
                fprintf(stderr, "bench_kernels: bad --shape %s (OUTxIN, at most 16)\n", argv[i]);
                return 2;
            }
            user_shapes[n_user_shapes][0] = o;
            user_shapes[n_user_shapes++][1] = n;
        } else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
            n_toks = 0;
            for (char *p = argv[++i]; *p && n_toks < 16;) {
                char *e;
                long long v = strtoll(p, &e, 10);
                if (e == p || v < 1 || v > 64) {
                    fprintf(stderr, "bench_kernels: bad --tokens %s (1..64, comma-separated)\n",
                            argv[i]);
                    return 2;
                }
                toks[n_toks++] = v;
                p = *e == ',' ? e + 1 : e;
            }
        }
    }
    if (NT < 0 || NT > 4096) NT = 512;
    const char *rp = getenv("LB_REPACK");
    const bool repack_all = rp && strcmp(rp, "1") == 0;
    char feats[256];
    printf("cpu: %s\nlb_matmul default variant: %s\n", lb_cpu_describe(feats, sizeof feats),
           lb_kernels_variant());
    const lb_type types[] = {LB_TYPE_Q4_0,        LB_TYPE_Q8_0,    LB_TYPE_Q5_0,
                             LB_TYPE_Q4_K,        LB_TYPE_Q6_K,    LB_TYPE_F16,
                             LB_TYPE_F8_E4M3_B32, LB_TYPE_NF4_B64, LB_TYPE_FP4_B64,
                             LB_TYPE_I8_B32,      LB_TYPE_Q4_1,    LB_TYPE_Q5_1,
                             LB_TYPE_BF16,        LB_TYPE_Q5_K,    LB_TYPE_Q3_K,
                             LB_TYPE_Q2_K};
    const size_t n_default = 6; /* the rest only with --only */
    const int64_t def_shapes[][2] = {{4864, 896}, {896, 4864}, {8192, 2048}}; /* [out, in] */
    const int64_t(*shapes)[2] = n_user_shapes ? (const int64_t(*)[2])user_shapes : def_shapes;
    const int n_shapes = n_user_shapes ? n_user_shapes : quick ? 2 : 3;
    const int64_t NT_REF = 16;
    int64_t maxt = NT;
    for (int k = 0; k < n_toks; k++) maxt = LB_MAX(maxt, toks[k]);
    printf("%-5s %-11s %-6s %2s %-12s %10s %8s %9s %9s\n", "type", "[out,in]", "mode", "th",
           "variant", "ms/call", "GB/s", "GFLOP/s", "x ref");
    for (int th = 1; th <= 2; th++) {
        lb_pool *pool = th > 1 ? lb_pool_create(th) : NULL;
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            if (only >= 0 ? (int)types[ti] != only : ti >= n_default) continue;
            for (int s = 0; s < n_shapes; s++) {
                const int64_t out = shapes[s][0], in = shapes[s][1];
                size_t wbytes;
                if (in % lb_type_get_traits(types[ti])->blck_size) {
                    if (th == 1)
                        printf("%-5s %lldx%lld: skipped (in is not a multiple of the block size)\n",
                               lb_type_name(types[ti]), (long long)out, (long long)in);
                    continue;
                }
                uint8_t *w = make_weights(types[ti], out, in, &wbytes);
                const bool xq = lb_x16_type(types[ti]);
                const int ncopy = dram ? (int)((512u << 20) / wbytes + 1) : 1;
                lb_tensor *Ws = calloc((size_t)ncopy, sizeof *Ws), *Wx = calloc((size_t)ncopy, sizeof *Wx);
                const size_t stride = (wbytes + 63) / 64 * 64, arena = stride * (size_t)ncopy;
                uint8_t *aw = hp_alloc(arena), *ax = xq ? hp_alloc(arena) : NULL;
                for (int k = 0; k < ncopy; k++) {
                    uint8_t *c = aw + (size_t)k * stride;
                    memcpy(c, w, wbytes);
                    Ws[k] = (lb_tensor){.name = "bench", .type = types[ti], .n_dims = 2,
                                        .shape = {out, in}, .data = c, .nbytes = wbytes};
                    Wx[k] = Ws[k];
                    if (xq) {
                        pack_x16(types[ti], w, out, in, wbytes, ax + (size_t)k * stride);
                        Wx[k].data = ax + (size_t)k * stride;
                        Wx[k].layout = LB_LAYOUT_X16;
                    }
                }
                float *X = malloc(sizeof(float) * (size_t)(maxt * in));
                float *Y = malloc(sizeof(float) * (size_t)(maxt * out));
                for (int64_t i = 0; i < maxt * in; i++) X[i] = rndf();
                /* modes 0..n_toks-1: decode-side token counts; n_toks: GEMM */
                for (int mode = 0; mode <= n_toks; mode++) {
                    if (mode == n_toks && NT == 0) break;
                    const bool dec = mode < n_toks;
                    double ref_gflops = 0;
                    for (int vx = 0; vx < 2 * LB_KV_COUNT; vx++) {
                        const int v = vx / 2, x16 = vx % 2;
                        if (!lb_kernels_usable(v)) continue;
                        const lb_kernel_table *kt = lb_kernels_table(v);
                        /* X16 where the family repacks (x16_fast), or with
                         * LB_REPACK=1 every SIMD family's X16 kernel (Q4_1) */
                        if (x16 && (!xq || !(kt->w[types[ti]].x16_fast ||
                                             (repack_all && v > 0 && kt->w[types[ti]].mm_x16))))
                            continue;
                        const lb_tensor *W = x16 ? Wx : Ws;
                        const int nw = dec ? ncopy : 1;
                        /* skip variants identical to the one below for this type */
                        if (v > 0 && !x16) {
                            const lb_wkernel *a = &kt->w[types[ti]], *b = &lb_kernels_table(v - 1)->w[types[ti]];
                            if (a->mm == b->mm && a->mm_batch == b->mm_batch &&
                                kt->qact[a->act_type] == lb_kernels_table(v - 1)->qact[a->act_type])
                                continue;
                        }
                        int64_t nt = dec ? toks[mode] : (v == LB_KV_REF ? LB_MIN(NT_REF, NT) : NT);
                        double sec = time_it(kt, pool, W, nw, X, Y, nt, v == LB_KV_REF ? min_time / 2 : min_time);
                        double gflops = 2.0 * (double)out * (double)in * (double)nt / sec * 1e-9;
                        double gbs = (double)wbytes / sec * 1e-9;
                        if (v == LB_KV_REF) ref_gflops = gflops;
                        char shape[32], vname[32];
                        snprintf(vname, sizeof vname, "%s%s", kt->name, x16 ? "+x16" : "");
                        snprintf(shape, sizeof shape, "%lldx%lld", (long long)out, (long long)in);
                        char mname[16];
                        if (!dec) snprintf(mname, sizeof mname, "gemm");
                        else if (toks[mode] == 1) snprintf(mname, sizeof mname, "gemv");
                        else snprintf(mname, sizeof mname, "tok%lld", (long long)toks[mode]);
                        printf("%-5s %-11s %-6s %2d %-12s %10.3f %8.2f %9.2f %9.2f%s\n",
                               lb_type_name(types[ti]), shape, mname, th,
                               vname, sec * 1e3, dec ? gbs : 0.0, gflops,
                               ref_gflops > 0 ? gflops / ref_gflops : 0.0,
                               (!dec && v == LB_KV_REF) ? "  (ref at 16 tokens)" : "");
                        fflush(stdout);
                    }
                }
                munmap(aw, arena);
                if (xq) munmap(ax, arena);
                free(w);
                free(Ws), free(Wx), free(X), free(Y);
            }
        }
        lb_pool_free(pool);
    }
    lb_kernels_release_scratch();
    return 0;
}
