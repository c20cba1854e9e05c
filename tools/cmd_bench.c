/*
 * lowbit bench MODEL [-p 512] [-n 128] [-d DEPTH] [-t THREADS] [-r REPS]
 *                    [-b N_BATCH] [--kv-type f16|f32] [--no-pin] [--mmap] [--no-warmup]
 *                    [--roofline] [--json]
 *
 * Prefill and decode speed as llama-bench (llama.cpp 0.7.0
 * tools/llama-bench/llama-bench.cpp) measures them:
 *   ppP  — P random tokens (BOS first) forwarded from an empty cache in
 *          batches of N_BATCH, logits of the last token only;
 *   tgN  — N tokens decoded one at a time from an empty cache (BOS first,
 *          then random ids), logits every step.
 * With -d DEPTH (llama-bench's --n-depth) both tests start from a cache
 * already holding DEPTH random tokens (filled untimed before each
 * repetition): the speed deep into a long context, "ppP @ dD".
 * One untimed warm-up of each test, then REPS timed repetitions, each on a
 * cleared KV cache; tokens/s reported as mean ± sample stddev over the
 * repetitions (llama-bench's avg_ts / stddev_ts). The context is
 * D + max(P, N) tokens long: llama-bench runs ppP and tgN as separate
 * instances, each with n_ctx = n_depth + n_prompt + n_gen; the KV
 * cache is f16 by default, as llama-bench's type_k/type_v. Threads are
 * pinned to distinct CPUs unless --no-pin (lb_context_params.pin_threads).
 * A GGUF file is read into memory on huge pages (lb_model_load_opts
 * .mmap_weights false) unless --mmap.
 * --roofline: after every decoded token of the tgN test, one read pass of
 * a buffer as large as the weights one token reads
 * (lb_model_active_weight_bytes), in the same kind of memory, by the same
 * threads (lb_membw_pass); each token's fraction of the roofline is
 * (bytes / its decode time) / (buffer bytes / the read's time), the two
 * measured milliseconds apart, so the host's memory speed, which moves by
 * +-25% within minutes on a shared VM, moves both. Reported: the median
 * fraction over all tokens of all repetitions (and its quartiles) and the
 * median read bandwidth; t/s then counts the decode steps' time only. The
 * buffer adds its size to the peak RSS. Notes on stderr where the figure
 * is not a DRAM roofline: weights small enough for the caches (< 64 MiB),
 * the scalar reference read loop (LB_FORCE_REF=1), no decode test (-n 0).
 */
#include "cli.h"

#include "lowbit/kernels.h"
#include "lowbit/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void usage(FILE *fp) {
    fprintf(fp,
            "usage: lowbit bench MODEL [options]\n"
            "\n"
            "Prefill (ppP) and decode (tgN) tokens/s of MODEL (GGUF file or\n"
            "Hugging Face directory), measured as llama-bench does.\n"
            "\n"
            "  -p, --n-prompt P      prompt tokens for the prefill test (default\n"
            "                        512; 0 = skip)\n"
            "  -n, --n-gen N         tokens for the decode test (default 128;\n"
            "                        0 = skip)\n"
            "  -d, --n-depth D       tokens already in the cache when each test\n"
            "                        starts (default 0)\n"
            "  -t, --threads T       threads (default: all CPUs)\n"
            "  -r, --repetitions R   timed repetitions per test (default 5)\n"
            "  -b, --batch-size B    tokens per forward pass in prefill\n"
            "                        (default 512)\n"
            "      --kv-type TYPE    KV cache element type: f16 (default) or f32\n"
            "      --no-pin          do not pin the threads to distinct CPUs\n"
            "      --mmap            map a GGUF file instead of reading it into\n"
            "                        memory (huge pages)\n"
            "      --no-warmup       skip the untimed warm-up run of each test\n"
            "                        (a prompt pass / one decode, as llama-bench)\n"
            "      --roofline        after each decoded token, time a read of as\n"
            "                        many bytes as the token read (same threads,\n"
            "                        huge pages): report decode as a fraction of\n"
            "                        that read bandwidth, token by token\n"
            "global: --json (one JSON object), --quiet\n");
}

typedef struct bench_test {
    char name[32];
    int n_prompt, n_gen;
    double *samples; /* tokens/s per repetition */
    int n;
    double mean, sd;
    double *frac, *gbs; /* --roofline: per decoded token (n_frac of them) */
    int n_frac;
    double f_med, f_q1, f_q3, gbs_med; /* their median / quartiles */
} bench_test;

/* --roofline: the read buffer and the bytes one decoded token reads */
typedef struct roof {
    lb_membw *buf;
    lb_pool *pool;
    double bytes;
} roof;

static uint64_t g_rng = 88172645463325252ull;
static int32_t rand_token(int32_t n_vocab) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (int32_t)(g_rng % (uint64_t)n_vocab);
}

/* Prompt of p tokens after `depth` cached positions. */
static lb_status run_pp(lb_context *ctx, int32_t *toks, int p, int depth,
                        int n_batch, float *logits) {
    for (int i = 0; i < p; i += n_batch) {
        int nb = p - i < n_batch ? p - i : n_batch;
        lb_status s = lb_model_forward(ctx, toks + i, nb, depth + i, logits,
                                       LB_LOGITS_LAST);
        if (s != LB_OK) return s;
    }
    return LB_OK;
}

/* n decoded tokens; with rf (--roofline) each followed by a read pass, the
 * decode steps' seconds in *dt and each token's fraction of the roofline
 * and read GB/s appended to t->frac / t->gbs (NULL t: not recorded) */
static lb_status run_tg(lb_context *ctx, int n, int depth, int32_t bos,
                        int32_t V, float *logits, const roof *rf,
                        bench_test *t, double *dt) {
    int32_t tok = bos >= 0 && depth == 0 ? bos : rand_token(V);
    double busy = 0;
    for (int i = 0; i < n; i++) {
        const double t0 = lb_time_s();
        lb_status s = lb_model_forward(ctx, &tok, 1, depth + i, logits,
                                       LB_LOGITS_LAST);
        const double td = lb_time_s() - t0;
        if (s != LB_OK) return s;
        busy += td;
        tok = rand_token(V);
        if (!rf) continue;
        double tr;
        if ((s = lb_membw_pass(rf->buf, rf->pool, &tr)) != LB_OK) return s;
        if (t) {
            const double gbs = (double)lb_membw_bytes(rf->buf) / tr * 1e-9;
            t->gbs[t->n_frac] = gbs;
            t->frac[t->n_frac++] = rf->bytes / td * 1e-9 / gbs;
        }
    }
    if (dt) *dt = busy;
    return LB_OK;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* q-quantile (0..1) of the sorted v[0, n), nearest rank */
static double quantile(const double *v, int n, double q) {
    int i = (int)(q * (n - 1) + 0.5);
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* Reset the cache and fill `depth` random positions (untimed). */
static lb_status fill_depth(lb_context *ctx, int depth, int n_batch,
                            int32_t V, int32_t bos, int32_t *buf) {
    lb_context_reset(ctx);
    for (int i = 0; i < depth; i += n_batch) {
        int nb = depth - i < n_batch ? depth - i : n_batch;
        for (int k = 0; k < nb; k++) buf[k] = rand_token(V);
        if (i == 0 && bos >= 0) buf[0] = bos;
        lb_status s = lb_model_forward(ctx, buf, nb, i, NULL, LB_LOGITS_NONE);
        if (s != LB_OK) return s;
    }
    return LB_OK;
}

/* The type holding most bytes of the linear weights ("Q4_0"). */
static const char *main_type(const lb_model *m) {
    /* the type of most per-layer linears (ties: most bytes), so that a
     * Q4_0 file whose ffn_down stayed F16 (rows not a multiple of 32) is
     * called Q4_0, as its general.file_type says */
    size_t count[LB_TYPE_COUNT_] = {0}, by[LB_TYPE_COUNT_] = {0};
    for (int l = 0; l < m->config.n_layers; l++)
        for (int i = 0; i < LB_LINEAR_COUNT; i++) {
            const lb_tensor *t = &m->layers[l].w[i];
            if ((unsigned)t->type < LB_TYPE_COUNT_ && t->data) {
                count[t->type]++;
                by[t->type] += t->nbytes;
            }
        }
    int best = 0;
    for (int t = 1; t < LB_TYPE_COUNT_; t++)
        if (count[t] > count[best] || (count[t] == count[best] && by[t] > by[best])) best = t;
    return lb_type_name(best);
}

int cmd_bench(int argc, char **argv) {
    const char *cmd = "bench";
    const char *path = NULL;
    long p = 512, n = 128, depth = 0, threads = 0, reps = 5, n_batch = 512;
    bool warmup = true; /* --no-warmup (llama-bench's flag) skips it */
    bool roofline = false;
    roof rf = {0};
    lb_type kv_type = LB_TYPE_F16;
    bool pin = true;
    lb_model_load_opts lo = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
#define VAL() \
    do { if (!(v = cli_value(cmd, argc, argv, &i))) return 2; } while (0)
        if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 0, 1 << 20, &p)) return 2;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 0, 1 << 20, &n)) return 2;
        } else if (!strcmp(a, "-d") || !strcmp(a, "--n-depth")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 0, 1 << 24, &depth)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 1, 1024, &threads)) return 2;
        } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 1, 1000, &reps)) return 2;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 1, 1 << 20, &n_batch)) return 2;
        } else if (!strcmp(a, "--kv-type")) {
            VAL();
            if (!strcmp(v, "f16") || !strcmp(v, "F16")) kv_type = LB_TYPE_F16;
            else if (!strcmp(v, "f32") || !strcmp(v, "F32")) kv_type = LB_TYPE_F32;
            else return cli_usage_error(cmd, "--kv-type: f16 or f32, got '%s'", v);
        } else if (!strcmp(a, "--no-pin")) {
            pin = false;
        } else if (!strcmp(a, "--mmap")) {
            lo.mmap_weights = true;
        } else if (!strcmp(a, "--no-warmup")) {
            warmup = false;
        } else if (!strcmp(a, "--roofline")) {
            roofline = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error(cmd, "unknown option %s", a);
        } else if (!path) {
            path = a;
        } else {
            return cli_usage_error(cmd, "unexpected argument '%s'", a);
        }
#undef VAL
    }
    if (!path) return cli_usage_error(cmd, "missing MODEL");
    if (p == 0 && n == 0) return cli_usage_error(cmd, "nothing to do (-p 0 -n 0)");

    lb_model *m = NULL;
    lb_context *ctx = NULL;
    float *logits = NULL;
    int32_t *toks = NULL;
    bench_test tests[2];
    int n_tests = 0;
    memset(tests, 0, sizeof tests);
    int rc = 1;
    lb_status st = lb_model_load(path, &lo, &m);
    if (st != LB_OK) return cli_fail(cmd, st);
    const int32_t V = m->config.vocab_size;
    const long longest = p > n ? p : n; /* each test starts from an empty cache */
    if (depth + longest > m->config.max_position_embeddings) {
        fprintf(stderr, "lowbit bench: -d %ld + %s %ld exceeds the model's context "
                "length %d\n", depth, p > n ? "-p" : "-n", longest,
                (int)m->config.max_position_embeddings);
        goto out;
    }
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = (int32_t)(depth + longest);
    {
        long most = p > depth ? p : depth;
        cp.n_batch = (int32_t)(n_batch < most ? n_batch : (most > 0 ? most : 1));
    }
    cp.n_threads = (int)threads;
    cp.kv_type = kv_type;
    cp.pin_threads = pin ? LB_PIN_ON : LB_PIN_OFF;
    if ((st = lb_context_create(m, &cp, &ctx)) != LB_OK) {
        rc = cli_fail(cmd, st);
        goto out;
    }
    logits = malloc((size_t)V * sizeof(float));
    toks = malloc((size_t)(p > cp.n_batch ? p : cp.n_batch) * sizeof(int32_t));
    if (!logits || !toks) {
        fprintf(stderr, "lowbit bench: out of memory\n");
        goto out;
    }
    if (roofline && n == 0 && !g_cli.quiet)
        fprintf(stderr, "lowbit bench: note: --roofline measures the decode test; -n 0 has none\n");
    if (roofline && n > 0) {
        if (!g_cli.quiet && lb_model_active_weight_bytes(m) < ((size_t)64 << 20))
            fprintf(stderr, "lowbit bench: note: %.1f MiB of weights per token may stay in the CPU "
                    "caches: --roofline then compares cache reads, not DRAM\n",
                    (double)lb_model_active_weight_bytes(m) / 1048576.0);
        if (!g_cli.quiet && !strcmp(lb_kernels_variant(), "ref"))
            fprintf(stderr, "lowbit bench: note: the scalar reference kernels (LB_FORCE_REF): "
                    "--roofline's read loop is the scalar one, slower than memory\n");
        rf.bytes = (double)lb_model_active_weight_bytes(m);
        rf.pool = lb_context_pool(ctx);
        if ((st = lb_membw_create(lb_model_active_weight_bytes(m), true, &rf.buf)) != LB_OK) {
            rc = cli_fail(cmd, st);
            goto out;
        }
    }
    const int32_t bos = m->config.bos_token_id;
    if (p > 0) {
        bench_test *t = &tests[n_tests++];
        if (depth) snprintf(t->name, sizeof t->name, "pp%ld @ d%ld", p, depth);
        else snprintf(t->name, sizeof t->name, "pp%ld", p);
        t->n_prompt = (int)p;
    }
    if (n > 0) {
        bench_test *t = &tests[n_tests++];
        if (depth) snprintf(t->name, sizeof t->name, "tg%ld @ d%ld", n, depth);
        else snprintf(t->name, sizeof t->name, "tg%ld", n);
        t->n_gen = (int)n;
    }
    for (int k = 0; k < n_tests; k++) {
        bench_test *t = &tests[k];
        t->samples = calloc((size_t)reps, sizeof(double));
        if (!t->samples) goto out;
        if (rf.buf && t->n_gen) {
            t->frac = calloc((size_t)reps * (size_t)t->n_gen, sizeof(double));
            t->gbs = calloc((size_t)reps * (size_t)t->n_gen, sizeof(double));
            if (!t->frac || !t->gbs) goto out;
        }
        /* warm-up, untimed (llama-bench: a prompt pass / one decode) */
        st = fill_depth(ctx, (int)depth, (int)cp.n_batch, V, bos, toks);
        for (int32_t i = 0; i < p; i++) toks[i] = rand_token(V);
        if (p > 0 && bos >= 0 && depth == 0) toks[0] = bos;
        if (st == LB_OK && warmup)
            st = t->n_prompt ? run_pp(ctx, toks, t->n_prompt, (int)depth,
                                      (int)cp.n_batch, logits)
                             : run_tg(ctx, 1, (int)depth, bos, V, logits, NULL, NULL, NULL);
        if (st != LB_OK) {
            rc = cli_fail(cmd, st);
            goto out;
        }
        for (int r = 0; r < reps; r++) {
            st = fill_depth(ctx, (int)depth, (int)cp.n_batch, V, bos, toks);
            if (st != LB_OK) {
                rc = cli_fail(cmd, st);
                goto out;
            }
            for (int32_t i = 0; i < p; i++) toks[i] = rand_token(V);
            if (p > 0 && bos >= 0 && depth == 0) toks[0] = bos;
            double t0 = lb_time_s(), dt_tg = 0;
            st = t->n_prompt ? run_pp(ctx, toks, t->n_prompt, (int)depth,
                                      (int)cp.n_batch, logits)
                             : run_tg(ctx, t->n_gen, (int)depth, bos, V, logits,
                                      rf.buf ? &rf : NULL, t, &dt_tg);
            double dt = rf.buf && t->n_gen ? dt_tg : lb_time_s() - t0;
            if (st != LB_OK) {
                rc = cli_fail(cmd, st);
                goto out;
            }
            t->samples[t->n++] = (t->n_prompt + t->n_gen) / dt;
            if (!g_cli.quiet && !g_cli.json)
                fprintf(stderr, "  %s rep %d: %.2f t/s\n", t->name, r + 1,
                        t->samples[t->n - 1]);
        }
        double s = 0, ss = 0;
        for (int r = 0; r < t->n; r++) s += t->samples[r];
        t->mean = s / t->n;
        for (int r = 0; r < t->n; r++)
            ss += (t->samples[r] - t->mean) * (t->samples[r] - t->mean);
        t->sd = t->n > 1 ? sqrt(ss / (t->n - 1)) : 0;
        if (t->n_frac) {
            qsort(t->frac, (size_t)t->n_frac, sizeof *t->frac, cmp_double);
            qsort(t->gbs, (size_t)t->n_frac, sizeof *t->gbs, cmp_double);
            t->f_med = quantile(t->frac, t->n_frac, 0.5);
            t->f_q1 = quantile(t->frac, t->n_frac, 0.25);
            t->f_q3 = quantile(t->frac, t->n_frac, 0.75);
            t->gbs_med = quantile(t->gbs, t->n_frac, 0.5);
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const char *type = main_type(m);
    const size_t size = lb_model_weight_bytes(m);
    const int64_t params = lb_model_n_params(m);
    const int nth = lb_pool_size(lb_context_pool(ctx));
    const char *kv = lb_type_name(kv_type);
    if (g_cli.json) {
        printf("{\"model\": ");
        cli_json_string(stdout, path);
        printf(", \"arch\": ");
        cli_json_string(stdout, m->config.arch_name);
        printf(", \"model_type\": \"%s\", \"model_size\": %zu, "
               "\"model_n_params\": %lld, \"model_n_active_params\": %lld, "
               "\"active_bytes_per_token\": %zu, \"n_threads\": %d, \"kernels\": "
               "\"%s\", \"kv_type\": \"%s\", \"n_batch\": %d, "
               "\"n_ctx\": %d, \"kv_cache_bytes\": %zu, "
               "\"peak_rss_bytes\": %lld, \"warmup\": %s, ",
               type, size, (long long)params,
               (long long)lb_model_n_active_params(m), lb_model_active_weight_bytes(m),
               nth, lb_kernels_variant(), kv,
               (int)cp.n_batch, (int)lb_context_n_ctx(ctx),
               lb_context_kv_bytes(ctx), (long long)ru.ru_maxrss * 1024,
               warmup ? "true" : "false");
        /* the matmul kernel per weight type of the model's linears and
         * lm_head: decode (1 token) and prefill (n_batch tokens) */
        bool seen[LB_TYPE_COUNT_] = {false};
        for (int l = 0; l < m->config.n_layers; l++)
            for (int i = 0; i < LB_LINEAR_COUNT; i++)
                if ((unsigned)m->layers[l].w[i].type < LB_TYPE_COUNT_)
                    seen[m->layers[l].w[i].type] = true;
        if ((unsigned)m->output.type < LB_TYPE_COUNT_) seen[m->output.type] = true;
        printf("\"matmul\": {");
        for (int t = 0, first = 1; t < LB_TYPE_COUNT_; t++) {
            if (!seen[t]) continue;
            const char *d = lb_kernel_name((lb_type)t, 1);
            const char *pf = lb_kernel_name((lb_type)t, cp.n_batch);
            printf("%s\"%s\": {\"decode\": \"%s\", \"prefill\": \"%s\"}", first ? "" : ", ",
                   lb_type_name(t), d ? d : "", pf ? pf : "");
            first = 0;
        }
        printf("}, \"tests\": [");
        for (int k = 0; k < n_tests; k++) {
            const bench_test *t = &tests[k];
            printf("%s{\"name\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, "
                   "\"n_depth\": %ld, \"avg_ts\": %.4f, \"stddev_ts\": %.4f, "
                   "\"samples_ts\": [",
                   k ? ", " : "", t->name, t->n_prompt, t->n_gen, depth, t->mean,
                   t->sd);
            for (int r = 0; r < t->n; r++)
                printf("%s%.4f", r ? ", " : "", t->samples[r]);
            printf("]");
            if (t->n_frac)
                printf(", \"roofline\": {\"bytes_per_token\": %.0f, \"read_bytes\": %zu, "
                       "\"read_gbs\": %.2f, \"frac\": %.4f, \"frac_q1\": %.4f, "
                       "\"frac_q3\": %.4f, \"n_tokens\": %d}",
                       rf.bytes, lb_membw_bytes(rf.buf), t->gbs_med, t->f_med, t->f_q1,
                       t->f_q3, t->n_frac);
            printf("}");
        }
        printf("]}\n");
    } else {
        printf("| model | size | params | type | threads | kernels | kv | "
               "test | t/s |\n|---|---:|---:|---|---:|---|---|---:|---:|\n");
        for (int k = 0; k < n_tests; k++) {
            const bench_test *t = &tests[k];
            printf("| %s | %.2f MiB | %.2f M | %s | %d | %s | %s | %s | "
                   "%.2f ± %.2f |\n",
                   m->config.arch_name, (double)size / 1048576.0,
                   (double)params / 1e6, type, nth, lb_kernels_variant(), kv,
                   t->name, t->mean, t->sd);
        }
        for (int k = 0; k < n_tests; k++) {
            const bench_test *t = &tests[k];
            if (t->n_frac)
                printf("%s: decode %.3f of the roofline (median of %d token%s, quartiles "
                       "%.3f-%.3f; %.2f MiB read per token); read %.2f GB/s (median)\n",
                       t->name, t->f_med, t->n_frac, t->n_frac == 1 ? "" : "s", t->f_q1, t->f_q3,
                       rf.bytes / 1048576.0,
                       t->gbs_med);
        }
        if (!g_cli.quiet)
            fprintf(stderr, "peak RSS: %.1f MiB\n",
                    (double)ru.ru_maxrss / 1024.0);
        if (!g_cli.quiet && m->config.n_experts > 0)
            fprintf(stderr, "MoE: %d of %d experts per token: %.2f M active "
                    "parameters of %.2f M, %.2f MiB of weights read per "
                    "decoded token\n", m->config.n_experts_used,
                    m->config.n_experts, (double)lb_model_n_active_params(m) / 1e6,
                    (double)params / 1e6,
                    (double)lb_model_active_weight_bytes(m) / 1048576.0);
    }
    rc = 0;
out:
    for (int k = 0; k < n_tests; k++) {
        free(tests[k].samples);
        free(tests[k].frac);
        free(tests[k].gbs);
    }
    lb_membw_free(rf.buf);
    free(logits);
    free(toks);
    lb_context_free(ctx);
    lb_model_free(m);
    return rc;
}
