/*
 * Multi-sequence forward (lowbit/batch.h) on tinystories-656k: logits of
 * sequences run together in mixed batches (chunked prefill of one while
 * others decode, interleaved tokens) equal those of lb_model_forward run on
 * each sequence alone; argument and range errors change nothing; and the
 * step-by-step generation API reproduces lb_generate.
 */
#include "th.h"

#include "lowbit/batch.h"
#include "lowbit/export.h"
#include "lowbit/generate.h"
#include "lowbit/model.h"

static lb_model *g_model;

#define NSEQ 3
#define STEPS 12
#define LB_MAX_D(a, b) ((a) > (b) ? (a) : (b))

/* Reference: each sequence alone through lb_model_forward; the logits after
 * the prompt and after each of STEPS greedy decode tokens. */
static void run_alone(const int32_t *prompt, int n_prompt, float *out,
                      int32_t *gen) {
    const int V = g_model->config.vocab_size;
    lb_context *ctx = NULL;
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = 128;
    cp.n_threads = 2;
    TH_CHECK_OK(lb_context_create(g_model, &cp, &ctx));
    if (!ctx) return;
    TH_CHECK_OK(lb_model_forward(ctx, prompt, n_prompt, 0, out,
                                 LB_LOGITS_LAST));
    for (int s = 0; s < STEPS; s++) {
        gen[s] = lb_argmax(out + (size_t)s * V, V);
        TH_CHECK_OK(lb_model_forward(ctx, &gen[s], 1, n_prompt + s,
                                     out + (size_t)(s + 1) * V,
                                     LB_LOGITS_LAST));
    }
    lb_context_free(ctx);
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || d != d) m = d != d ? INFINITY : d;
    }
    return m;
}

static void test_batched_equals_alone(void) {
    const int V = g_model->config.vocab_size;
    static const int32_t p0_[] = {1, 365, 1401, 261, 881, 11, 264, 1094};
    static const int32_t p1_[] = {1, 520, 287, 30, 1125};
    static const int32_t p2_[] = {1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49,
                                  50, 51, 52, 53, 54, 55, 56, 57, 58};
    /* the same ids modulo the vocabulary (the random model has 512) */
    int32_t p0[8], p1[5], p2[20];
    for (int i = 0; i < 8; i++) p0[i] = p0_[i] % V;
    for (int i = 0; i < 5; i++) p1[i] = p1_[i] % V;
    for (int i = 0; i < 20; i++) p2[i] = p2_[i] % V;
    const int32_t *prompts[NSEQ] = {p0, p1, p2};
    const int np[NSEQ] = {8, 5, 20};
    float *ref[NSEQ];
    int32_t gen[NSEQ][STEPS];
    for (int q = 0; q < NSEQ; q++) {
        ref[q] = malloc((size_t)(STEPS + 1) * V * sizeof(float));
        run_alone(prompts[q], np[q], ref[q], gen[q]);
    }
    lb_multi_params mp = lb_multi_default_params();
    mp.n_seq = NSEQ;
    mp.n_ctx = 64;
    mp.n_batch = 4; /* scratch must grow */
    mp.n_threads = 2;
    lb_multi_ctx *mc = NULL;
    TH_CHECK_OK(lb_multi_create(g_model, &mp, &mc));
    if (!mc) return;
    float *logits = malloc((size_t)NSEQ * 8 * V * sizeof(float));
    double worst = 0;
    /* step 1: whole prompt of seq 1, the first 6 tokens of seq 2's prompt
     * (no logits), the first 3 tokens of seq 0 interleaved */
    {
        int32_t tk[16], sq[16], ps[16];
        uint8_t want[16];
        int n = 0;
        for (int i = 0; i < 3; i++) {
            tk[n] = p0[i], sq[n] = 0, ps[n] = i, want[n] = 0, n++;
            tk[n] = p2[i], sq[n] = 2, ps[n] = i, want[n] = 0, n++;
        }
        for (int i = 0; i < 5; i++)
            tk[n] = p1[i], sq[n] = 1, ps[n] = i, want[n] = i == 4, n++;
        for (int i = 3; i < 6; i++)
            tk[n] = p2[i], sq[n] = 2, ps[n] = i, want[n] = 0, n++;
        TH_CHECK_OK(lb_model_forward_multi(mc, tk, sq, ps, n, want, logits));
        worst = LB_MAX_D(worst, max_diff(logits, ref[1], (size_t)V));
        TH_CHECK_INT(lb_multi_n_past(mc, 0), 3);
        TH_CHECK_INT(lb_multi_n_past(mc, 1), 5);
        TH_CHECK_INT(lb_multi_n_past(mc, 2), 6);
    }
    /* then: seq 1 decodes, seq 0 and 2 finish their prompts in chunks of
     * at most 5, each then decodes; all logits compared */
    int done_prompt[NSEQ] = {3, 5, 6}, step[NSEQ] = {0, 1, 0};
    for (int iter = 0; iter < 40; iter++) {
        int32_t tk[16], sq[16], ps[16];
        uint8_t want[16];
        int owner[16], n = 0;
        for (int q = 0; q < NSEQ; q++) {
            if (step[q] > STEPS) continue;
            if (done_prompt[q] < np[q]) {
                int k = np[q] - done_prompt[q] < 5 ? np[q] - done_prompt[q] : 5;
                for (int i = 0; i < k; i++) {
                    int p = done_prompt[q] + i;
                    tk[n] = prompts[q][p], sq[n] = q, ps[n] = p;
                    want[n] = p == np[q] - 1, owner[n] = q, n++;
                }
                done_prompt[q] += k;
            } else if (step[q] >= 1 && step[q] <= STEPS) {
                tk[n] = gen[q][step[q] - 1], sq[n] = q;
                ps[n] = np[q] + step[q] - 1, want[n] = 1, owner[n] = q, n++;
            }
        }
        if (n == 0) break;
        TH_CHECK_OK(lb_model_forward_multi(mc, tk, sq, ps, n, want, logits));
        int r = 0;
        for (int i = 0; i < n; i++) {
            if (!want[i]) continue;
            int q = owner[i];
            worst = LB_MAX_D(worst, max_diff(logits + (size_t)r * V,
                                             ref[q] + (size_t)step[q] * V,
                                             (size_t)V));
            TH_CHECK_INT(lb_argmax(logits + (size_t)r * V, V),
                         step[q] < STEPS ? gen[q][step[q]]
                                         : lb_argmax(ref[q] + (size_t)STEPS * V, V));
            step[q]++;
            r++;
        }
    }
    for (int q = 0; q < NSEQ; q++) TH_CHECK_INT(step[q], STEPS + 1);
    printf("  batched vs alone: max |logit diff| %.3g\n", worst);
    TH_CHECK(worst <= 1e-5);
    /* cached tokens and truncation */
    const int32_t *ct = NULL;
    TH_CHECK_INT(lb_multi_cached_tokens(mc, 1, &ct), 5 + STEPS);
    TH_CHECK(ct && ct[4] == p1[4] && ct[5] == gen[1][0]);
    TH_CHECK_OK(lb_multi_truncate(mc, 1, 2));
    TH_CHECK_INT(lb_multi_n_past(mc, 1), 2);
    TH_CHECK_INT(lb_multi_truncate(mc, 1, 3), LB_ERR_RANGE);
    TH_CHECK_INT(lb_multi_truncate(mc, 7, 0), LB_ERR_RANGE);
    /* re-running seq 1 from position 2 reproduces its prompt logits */
    {
        int32_t sq[3] = {1, 1, 1}, ps[3] = {2, 3, 4};
        TH_CHECK_OK(lb_model_forward_multi(mc, p1 + 2, sq, ps, 3, NULL,
                                           logits));
        TH_CHECK(max_diff(logits + 2 * (size_t)V, ref[1], (size_t)V) <= 1e-5);
    }
    free(logits);
    lb_multi_free(mc);
    for (int q = 0; q < NSEQ; q++) free(ref[q]);
}

/* Attention over several key blocks: one token per call through the
 * multi-sequence forward (two sequences taking turns, so their caches
 * interleave; one token per call, so the products run the same kernels at
 * any CPU's batch thresholds) and through lb_model_forward (f32 KV cache, as
 * the multi forward keeps) on sequence 0's tokens run the same attention
 * unit (attention.c) on the same products, so the logits are the
 * same bits at every position; the multi forward once had its own
 * attention (one head at a time, whole-row softmax) and drifted from it
 * (0.076 on a random Qwen2.5-0.5B-shaped model at depth 1024). */
static void test_multi_equals_single_at_depth(void) {
    const int V = g_model->config.vocab_size, N = 150, CHECK = 24;
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    cp.kv_type = LB_TYPE_F32;
    lb_multi_params mp = lb_multi_default_params();
    mp.n_seq = 2;
    mp.n_ctx = 256;
    mp.n_threads = 2;
    lb_context *ctx = NULL;
    lb_multi_ctx *mc = NULL;
    float *a = malloc(sizeof(float) * (size_t)V),
          *b = malloc(sizeof(float) * 2 * (size_t)V);
    TH_CHECK_OK(lb_context_create(g_model, &cp, &ctx));
    TH_CHECK_OK(lb_multi_create(g_model, &mp, &mc));
    if (!ctx || !mc || !a || !b) goto done;
    double worst = 0;
    for (int32_t p = 0; p < N; p++) {
        const int32_t t0 = (p * 37 + 11) % V, t1 = (p * 53 + 5) % V;
        const int32_t s0 = 0, s1 = 1;
        TH_CHECK_OK(lb_model_forward(ctx, &t0, 1, p, a, LB_LOGITS_LAST));
        TH_CHECK_OK(lb_model_forward_multi(mc, &t1, &s1, &p, 1, NULL, b + V));
        TH_CHECK_OK(lb_model_forward_multi(mc, &t0, &s0, &p, 1, NULL, b));
        if (p >= N - CHECK) worst = LB_MAX_D(worst, max_diff(a, b, (size_t)V));
    }
    printf("  multi vs single, positions %d..%d: max |logit diff| %.3g\n",
           N - CHECK, N - 1, worst);
    TH_CHECK(worst == 0);
done:
    lb_multi_free(mc);
    lb_context_free(ctx);
    free(a);
    free(b);
}

static void test_errors_change_nothing(void) {
    lb_multi_params mp = lb_multi_default_params();
    mp.n_seq = 2;
    mp.n_ctx = 8;
    mp.n_threads = 1;
    lb_multi_ctx *mc = NULL;
    TH_CHECK_INT(lb_multi_create(g_model, &(lb_multi_params){0, 8, 0, 1, NULL},
                                 &mc),
                 LB_ERR_INVALID_ARG);
    TH_CHECK(mc == NULL);
    TH_CHECK_OK(lb_multi_create(g_model, &mp, &mc));
    if (!mc) return;
    const int V = g_model->config.vocab_size;
    float *lg = malloc((size_t)4 * V * sizeof(float));
    int32_t tk[4] = {1, 2, 3, 4}, sq[4] = {0, 0, 1, 1}, ps[4] = {0, 1, 0, 1};
    TH_CHECK_OK(lb_model_forward_multi(mc, tk, sq, ps, 4, NULL, lg));
    /* gap in positions */
    int32_t ps_gap[2] = {2, 4}, sq0[2] = {0, 0};
    TH_CHECK_INT(lb_model_forward_multi(mc, tk, sq0, ps_gap, 2, NULL, lg),
                 LB_ERR_RANGE);
    /* start beyond n_past */
    int32_t ps_far[1] = {3};
    TH_CHECK_INT(lb_model_forward_multi(mc, tk, sq0, ps_far, 1, NULL, lg),
                 LB_ERR_RANGE);
    /* bad sequence, bad id, beyond n_ctx */
    int32_t sq_bad[1] = {2}, ps2[1] = {2}, bad_id[1] = {V};
    TH_CHECK_INT(lb_model_forward_multi(mc, tk, sq_bad, ps2, 1, NULL, lg),
                 LB_ERR_RANGE);
    TH_CHECK_INT(lb_model_forward_multi(mc, bad_id, sq0, ps2, 1, NULL, lg),
                 LB_ERR_RANGE);
    int32_t tk8[8] = {1, 1, 1, 1, 1, 1, 1, 1}, sq8[8] = {0}, ps8[8];
    for (int i = 0; i < 8; i++) ps8[i] = 2 + i;
    TH_CHECK_INT(lb_model_forward_multi(mc, tk8, sq8, ps8, 7, NULL, lg),
                 LB_ERR_RANGE);
    TH_CHECK_INT(lb_model_forward_multi(mc, tk, sq0, ps2, 0, NULL, lg),
                 LB_ERR_INVALID_ARG);
    TH_CHECK_INT(lb_model_forward_multi(mc, tk, sq0, ps2, 1, NULL, NULL),
                 LB_ERR_INVALID_ARG);
    /* nothing changed */
    TH_CHECK_INT(lb_multi_n_past(mc, 0), 2);
    TH_CHECK_INT(lb_multi_n_past(mc, 1), 2);
    /* filling exactly to n_ctx works; no logits wanted */
    uint8_t none[6] = {0};
    TH_CHECK_OK(lb_model_forward_multi(mc, tk8, sq8, ps8, 6, none, NULL));
    TH_CHECK_INT(lb_multi_n_past(mc, 0), 8);
    free(lg);
    lb_multi_free(mc);
}

/* lb_gen driven by hand over lb_model_forward equals lb_generate. */
static void test_gen_steps_equal_generate(void) {
    const int V = g_model->config.vocab_size;
    static const int32_t pr[] = {1, 365, 1401, 261};
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = 40;
    cp.n_threads = 1;
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(g_model, &cp, &ctx));
    if (!ctx) return;
    lb_generate_params gp = lb_generate_default_params();
    gp.n_predict = -1; /* until the context is full */
    gp.sampling.temperature = 0.8f;
    gp.sampling.seed = 7;
    gp.ignore_eos = true;
    lb_generate_result a;
    TH_CHECK_OK(lb_generate(ctx, pr, 4, &gp, &a));
    TH_CHECK_INT(a.stop_reason, LB_STOP_CTX);
    TH_CHECK_INT(a.n_tokens, 40 - 4 + 1);
    lb_gen *g = NULL;
    TH_CHECK_OK(lb_gen_create(g_model, pr, 4, 40, &gp, &g));
    float *lg = malloc((size_t)V * sizeof(float));
    TH_CHECK_OK(lb_model_forward(ctx, pr, 4, 0, lg, LB_LOGITS_LAST));
    int32_t next;
    for (;;) {
        TH_CHECK_OK(lb_gen_step(g, lg, &next));
        if (next < 0) break;
        TH_CHECK_OK(lb_model_forward(ctx, &next, 1, lb_gen_pos(g) - 1, lg,
                                     LB_LOGITS_LAST));
    }
    TH_CHECK(lb_gen_done(g));
    TH_CHECK_INT(lb_gen_step(g, lg, &next), LB_ERR_INVALID_ARG);
    lb_generate_result b;
    TH_CHECK_OK(lb_gen_finish(g, &b));
    lb_gen_free(g);
    TH_CHECK_INT(b.n_tokens, a.n_tokens);
    TH_CHECK(a.n_tokens == b.n_tokens &&
             memcmp(a.tokens, b.tokens, (size_t)a.n_tokens * 4) == 0);
    TH_CHECK_INT(b.stop_reason, LB_STOP_CTX);
    TH_CHECK_INT(lb_gen_create(g_model, pr, 4, 3, &gp, &g), LB_ERR_RANGE);
    TH_CHECK_INT(lb_gen_create(g_model, pr, 0, 3, &gp, &g), LB_ERR_INVALID_ARG);
    lb_generate_result_free(&a);
    lb_generate_result_free(&b);
    free(lg);
    lb_context_free(ctx);
}

/* The same on a GGUF that carries Llama-3 RoPE scaling as rope_freqs
 * (exported from the random llama3-rope model): the multi-sequence path
 * must apply the freq factors as lb_model_forward does. */
static void test_batched_rope_freqs(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/llama3rope.gguf", th_tmpdir());
    lb_export_opts eo;
    lb_export_opts_default(&eo);
    eo.qtype = "F32";
    TH_CHECK_OK(lb_export_gguf(th_shared("models/random/llama-gqa-llama3rope-bf16-random"),
                               path, &eo, NULL, NULL));
    lb_model *saved = g_model, *m = NULL;
    TH_CHECK_OK(lb_model_load(path, NULL, &m));
    if (!m) return;
    TH_CHECK(m->rope_freqs.data != NULL);
    g_model = m;
    test_batched_equals_alone();
    g_model = saved;
    lb_model_free(m);
    remove(path);
}

int main(void) {
    TH_CHECK_OK(lb_model_load(th_shared("models/tinystories-656k"), NULL,
                              &g_model));
    if (!g_model) return th_report();
    TH_RUN(test_batched_equals_alone);
    TH_RUN(test_batched_rope_freqs);
    TH_RUN(test_multi_equals_single_at_depth);
    TH_RUN(test_errors_change_nothing);
    TH_RUN(test_gen_steps_equal_generate);
    lb_model_free(g_model);
    return th_report();
}
