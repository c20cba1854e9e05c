/* Sampler and PRNG: values worked out by hand, distributions by counting. */
#include "th.h"

#include "lowbit/sample.h"

static void test_rng(void) {
    /* splitmix64 from seed 0 gives the published sequence
     * e220a8397b1dcdaf 6e789e6aa1b965f4 06c45d188009454f f88bb8a8724c81ec
     * (Vigna, splitmix64.c); that is the seeded xoshiro state. */
    lb_rng r;
    lb_rng_seed(&r, 0);
    TH_CHECK(r.s[0] == UINT64_C(0xe220a8397b1dcdaf));
    TH_CHECK(r.s[1] == UINT64_C(0x6e789e6aa1b965f4));
    TH_CHECK(r.s[2] == UINT64_C(0x06c45d188009454f));
    TH_CHECK(r.s[3] == UINT64_C(0xf88bb8a8724c81ec));
    /* xoshiro256** first output: rotl(s1 * 5, 7) * 9 */
    uint64_t s1 = r.s[1] * 5;
    uint64_t want = ((s1 << 7) | (s1 >> 57)) * 9;
    TH_CHECK(lb_rng_next(&r) == want);
    /* determinism and a sane uniform mean */
    lb_rng a, b;
    lb_rng_seed(&a, 42);
    lb_rng_seed(&b, 42);
    double sum = 0;
    bool same = true;
    for (int i = 0; i < 100000; i++) {
        double u = lb_rng_uniform(&a);
        same &= u == lb_rng_uniform(&b);
        TH_CHECK(u >= 0 && u < 1);
        sum += u;
    }
    TH_CHECK(same);
    TH_CHECK_NEAR(sum / 100000, 0.5, 0.01);
}

static void test_argmax(void) {
    float x[5] = {1, 3, 3, -1, 2};
    TH_CHECK_INT(lb_argmax(x, 5), 1); /* first of the tie */
    float y[3] = {NAN, -5, -4};
    TH_CHECK_INT(lb_argmax(y, 3), 2);
}

static lb_sampler *mk(lb_sampler_params p, int32_t n) {
    lb_sampler *s = NULL;
    TH_CHECK_OK(lb_sampler_create(&p, n, &s));
    return s;
}

static void test_penalties(void) {
    lb_sampler_params p = lb_sampler_default_params();
    /* repetition penalty 2: 2 -> 1 (divide), -2 -> -4 (multiply) */
    p.repeat_penalty = 2.0f;
    lb_sampler *s = mk(p, 3);
    float l[3] = {2.0f, -2.0f, 1.5f};
    TH_CHECK_INT(lb_sampler_sample(s, l), 0); /* no history yet */
    TH_CHECK_OK(lb_sampler_accept(s, 0));
    TH_CHECK_OK(lb_sampler_accept(s, 1));
    TH_CHECK_OK(lb_sampler_accept(s, 0)); /* counted once: 2/2 = 1 < 1.5 */
    TH_CHECK_INT(lb_sampler_sample(s, l), 2);
    TH_CHECK_FAILS(lb_sampler_accept(s, 3), LB_ERR_RANGE);
    lb_sampler_free(s);

    /* frequency 0.5 + presence 1; history 1,1,2:
     * token1 1.9 - (2*0.5 + 1) = -0.1; token2 1.4 - 1.5 = -0.1; token0 0 */
    p = lb_sampler_default_params();
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 1.0f;
    s = mk(p, 3);
    float m[3] = {0.0f, 1.9f, 1.4f};
    lb_sampler_accept(s, 1);
    lb_sampler_accept(s, 1);
    lb_sampler_accept(s, 2);
    TH_CHECK_INT(lb_sampler_sample(s, m), 0);
    lb_sampler_free(s);
    /* presence only: 0.9, 0.4, 0 -> token 1 */
    p.frequency_penalty = 0;
    s = mk(p, 3);
    lb_sampler_accept(s, 1);
    lb_sampler_accept(s, 1);
    lb_sampler_accept(s, 2);
    TH_CHECK_INT(lb_sampler_sample(s, m), 1);
    lb_sampler_free(s);
    /* window: only the last token counts with penalty_last_n = 1 */
    p.presence_penalty = 1.0f;
    p.penalty_last_n = 1;
    s = mk(p, 3);
    lb_sampler_accept(s, 1);
    lb_sampler_accept(s, 2); /* token1 unpenalised 1.9 wins */
    TH_CHECK_INT(lb_sampler_sample(s, m), 1);
    lb_sampler_free(s);

    p = lb_sampler_default_params();
    p.repeat_penalty = 0;
    lb_sampler *bad = NULL;
    TH_CHECK_FAILS(lb_sampler_create(&p, 3, &bad), LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_sampler_create(NULL, 0, &bad), LB_ERR_INVALID_ARG);
}

/* Draw n times and compare frequencies with probabilities want[3]. */
static void check_freq(lb_sampler_params p, const double *want, double tol) {
    float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    lb_sampler *s = mk(p, 3);
    int cnt[3] = {0, 0, 0};
    const int n = 40000;
    for (int i = 0; i < n; i++) cnt[lb_sampler_sample(s, l)]++;
    for (int k = 0; k < 3; k++) TH_CHECK_NEAR((double)cnt[k] / n, want[k], tol);
    lb_sampler_free(s);
}

static void test_distributions(void) {
    lb_sampler_params p = lb_sampler_default_params();
    p.temperature = 1.0f;
    p.seed = 7;
    const double plain[3] = {0.5, 0.3, 0.2};
    check_freq(p, plain, 0.012);
    /* temperature 2: p ~ sqrt(p) */
    p.temperature = 2.0f;
    double z = sqrt(0.5) + sqrt(0.3) + sqrt(0.2);
    const double t2[3] = {sqrt(0.5) / z, sqrt(0.3) / z, sqrt(0.2) / z};
    check_freq(p, t2, 0.012);
    p.temperature = 1.0f;
    /* top-k 2: 0.5/0.8, 0.3/0.8 */
    p.top_k = 2;
    const double k2[3] = {0.625, 0.375, 0};
    check_freq(p, k2, 0.012);
    p.top_k = 0;
    /* top-p 0.75: 0.5 + 0.3 >= 0.75 -> the same two */
    p.top_p = 0.75f;
    check_freq(p, k2, 0.012);
    /* top-p 0.4: the first alone */
    p.top_p = 0.4f;
    const double only0[3] = {1, 0, 0};
    check_freq(p, only0, 0);
    p.top_p = 1.0f;
    /* min-p 0.5: keep p >= 0.25 -> {0.5, 0.3} */
    p.min_p = 0.5f;
    check_freq(p, k2, 0.012);
    p.min_p = 1.0f;
    check_freq(p, only0, 0);
    /* same seed -> same draws; another seed -> other draws */
    p = lb_sampler_default_params();
    p.temperature = 1.0f;
    p.seed = 123;
    float l[3] = {0, 0, 0};
    lb_sampler *a = mk(p, 3), *b = mk(p, 3);
    p.seed = 124;
    lb_sampler *c = mk(p, 3);
    bool same = true, differ = false;
    for (int i = 0; i < 200; i++) {
        int32_t x = lb_sampler_sample(a, l);
        same &= x == lb_sampler_sample(b, l);
        differ |= x != lb_sampler_sample(c, l);
    }
    TH_CHECK(same);
    TH_CHECK(differ);
    /* reset re-seeds */
    int32_t first[20];
    lb_sampler_reset(a);
    for (int i = 0; i < 20; i++) first[i] = lb_sampler_sample(a, l);
    lb_sampler_reset(a);
    for (int i = 0; i < 20; i++) TH_CHECK_INT(lb_sampler_sample(a, l), first[i]);
    lb_sampler_free(a);
    lb_sampler_free(b);
    lb_sampler_free(c);
}

/* top-k on a large vocabulary with many tied logits draws exactly what
 * the same sampler draws over the k best candidates alone, laid out in
 * the full sort's order (descending logit, ascending id): the partial
 * selection picks the same k in the same order as a full sort. */
typedef struct tk_entry {
    float l;
    int32_t id;
} tk_entry;
static int tk_cmp(const void *a, const void *b) {
    const tk_entry *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}
static void test_top_k_large_vocab(void) {
    const int32_t V = 50021;
    float *l = malloc(sizeof(float) * V);
    tk_entry *e = malloc(sizeof(tk_entry) * V);
    uint64_t r = 12345;
    for (int32_t i = 0; i < V; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        l[i] = (float)((int)(r >> 59) - 16) * 0.25f; /* 32 values: many ties */
        e[i].l = l[i];
        e[i].id = i;
    }
    qsort(e, (size_t)V, sizeof *e, tk_cmp);
    const int32_t ks[] = {1, 7, 40, 1000, 3000};
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
        const int32_t k = ks[t];
        float *lk = malloc(sizeof(float) * (size_t)k);
        for (int32_t i = 0; i < k; i++) lk[i] = e[i].l;
        lb_sampler_params p = lb_sampler_default_params();
        p.temperature = 0.7f;
        p.seed = 99 + (uint64_t)k;
        p.top_k = k;
        lb_sampler *a = mk(p, V);
        p.top_k = 0;
        lb_sampler *b = mk(p, k);
        int bad = 0;
        for (int i = 0; i < 300; i++) {
            int32_t x = lb_sampler_sample(a, l), y = lb_sampler_sample(b, lk);
            bad += y < 0 || y >= k || x != e[y].id;
        }
        TH_CHECK_INT(bad, 0);
        lb_sampler_free(a);
        lb_sampler_free(b);
        free(lk);
    }
    free(l);
    free(e);
}

int main(void) {
    TH_RUN(test_rng);
    TH_RUN(test_argmax);
    TH_RUN(test_penalties);
    TH_RUN(test_distributions);
    TH_RUN(test_top_k_large_vocab);
    return th_report();
}
