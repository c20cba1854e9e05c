/* Token sampling and the xoshiro256** PRNG. See lowbit/sample.h. */
#include "lowbit/sample.h"
#include "core/internal.h"

#include <math.h>
#include <stdlib.h>

/* ---- PRNG: splitmix64 seeding + xoshiro256** 1.0 (public domain refs) -- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

void lb_rng_seed(lb_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t lb_rng_next(lb_rng *r) {
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double lb_rng_uniform(lb_rng *r) {
    return (double)(lb_rng_next(r) >> 11) * 0x1.0p-53;
}

/* ---- sampler ------------------------------------------------------------ */

typedef struct cand {
    int32_t id;
    float logit;
    float p;
} cand;

struct lb_sampler {
    lb_sampler_params p;
    int32_t n_vocab;
    lb_rng rng;
    int32_t *hist;
    size_t n_hist, cap_hist;
    int32_t *count; /* [n_vocab] scratch, zero between calls */
    float *work;    /* [n_vocab] penalised logits            */
    cand *c;        /* [n_vocab]                              */
};

lb_sampler_params lb_sampler_default_params(void) {
    lb_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.penalty_last_n = 64;
    return p;
}

lb_status lb_sampler_create(const lb_sampler_params *params, int32_t n_vocab,
                            lb_sampler **out) {
    *out = NULL;
    lb_sampler_params p = params ? *params : lb_sampler_default_params();
    if (n_vocab <= 0)
        return lb_set_error(LB_ERR_INVALID_ARG, "sampler: n_vocab %d <= 0",
                            (int)n_vocab);
    if (isnan(p.temperature) || isnan(p.top_p) || isnan(p.min_p) ||
        isnan(p.presence_penalty) || isnan(p.frequency_penalty) ||
        !(p.repeat_penalty > 0) || p.top_p < 0 || p.min_p > 1 ||
        p.penalty_last_n < -1)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "sampler: invalid parameters (temperature %g, "
                            "top_p %g, min_p %g, repeat_penalty %g, "
                            "penalty_last_n %d)",
                            (double)p.temperature, (double)p.top_p,
                            (double)p.min_p, (double)p.repeat_penalty,
                            (int)p.penalty_last_n);
    lb_sampler *s = calloc(1, sizeof *s);
    if (!s) return lb_set_error(LB_ERR_NOMEM, "sampler: out of memory");
    s->p = p;
    s->n_vocab = n_vocab;
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    if (!s->count || !s->work || !s->c) {
        lb_sampler_free(s);
        return lb_set_error(LB_ERR_NOMEM, "sampler: out of memory");
    }
    lb_rng_seed(&s->rng, p.seed);
    *out = s;
    return LB_OK;
}

void lb_sampler_free(lb_sampler *s) {
    if (!s) return;
    free(s->hist);
    free(s->count);
    free(s->work);
    free(s->c);
    free(s);
}

void lb_sampler_reset(lb_sampler *s) {
    s->n_hist = 0;
    lb_rng_seed(&s->rng, s->p.seed);
}

lb_status lb_sampler_accept(lb_sampler *s, int32_t token) {
    if (token < 0 || token >= s->n_vocab)
        return lb_set_error(LB_ERR_RANGE, "sampler: token %d outside [0, %d)",
                            (int)token, (int)s->n_vocab);
    if (s->n_hist == s->cap_hist) {
        size_t nc = s->cap_hist ? s->cap_hist * 2 : 256;
        int32_t *nh = realloc(s->hist, nc * sizeof *nh);
        if (!nh) return lb_set_error(LB_ERR_NOMEM, "sampler: out of memory");
        s->hist = nh;
        s->cap_hist = nc;
    }
    s->hist[s->n_hist++] = token;
    return LB_OK;
}

int32_t lb_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best] || (isnan(x[best]) && !isnan(x[i]))) best = i;
    return best;
}

/* Descending logit, then ascending id: a total, deterministic order. */
static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static void cand_swap(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Reorder c[0..m) so that c[0..k) holds the k first candidates of the
 * cand_cmp order, sorted (the rest unordered): quickselect with a
 * median-of-three pivot, then a sort of the k. cand_cmp is a total order,
 * so c[0..k) is exactly the prefix a full sort would give — in O(m + k log
 * k) instead of O(m log m) (top-k of a 150k vocabulary per token). */
static void select_top(cand *c, int32_t m, int32_t k) {
    int32_t lo = 0, hi = m - 1;
    while (hi > lo) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (cand_cmp(&c[mid], &c[lo]) < 0) cand_swap(&c[mid], &c[lo]);
        if (cand_cmp(&c[hi], &c[lo]) < 0) cand_swap(&c[hi], &c[lo]);
        if (cand_cmp(&c[hi], &c[mid]) < 0) cand_swap(&c[hi], &c[mid]);
        cand_swap(&c[mid], &c[hi]); /* median of three as the pivot, at hi */
        int32_t st = lo;
        for (int32_t i = lo; i < hi; i++)
            if (cand_cmp(&c[i], &c[hi]) < 0) cand_swap(&c[i], &c[st++]);
        cand_swap(&c[st], &c[hi]); /* c[lo..st) < pivot = c[st] < c[st+1..] */
        if (st == k - 1 || st == k) break;
        if (st < k) lo = st + 1;
        else hi = st - 1;
    }
    qsort(c, (size_t)k, sizeof *c, cand_cmp);
}

int32_t lb_sampler_sample(lb_sampler *s, const float *logits) {
    const lb_sampler_params *p = &s->p;
    const int32_t n = s->n_vocab;
    float *w = s->work;
    memcpy(w, logits, (size_t)n * sizeof *w);
    for (int32_t i = 0; i < n; i++)
        if (isnan(w[i])) w[i] = -INFINITY;

    /* 1-2. penalties over the last penalty_last_n accepted tokens */
    bool pen = p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
               p->frequency_penalty != 0.0f;
    if (pen && p->penalty_last_n != 0 && s->n_hist) {
        size_t win = p->penalty_last_n < 0 ? s->n_hist
                     : (size_t)p->penalty_last_n < s->n_hist
                         ? (size_t)p->penalty_last_n
                         : s->n_hist;
        const int32_t *h = s->hist + s->n_hist - win;
        for (size_t i = 0; i < win; i++) s->count[h[i]]++;
        for (size_t i = 0; i < win; i++) {
            int32_t t = h[i];
            int32_t c = s->count[t];
            if (c == 0) continue; /* already applied */
            float l = w[t];
            if (p->repeat_penalty != 1.0f)
                l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
            l -= (float)c * p->frequency_penalty + p->presence_penalty;
            w[t] = l;
            s->count[t] = 0;
        }
    }

    /* 3. greedy */
    if (!(p->temperature > 0)) return lb_argmax(w, n);

    /* 4. temperature */
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        s->c[m].id = i;
        s->c[m].logit = w[i] / p->temperature;
        m++;
    }
    /* 5. top-k (needs the order), 6. top-p (needs the order) */
    bool sorted = false;
    if (p->top_k > 0 && p->top_k < m) {
        select_top(s->c, m, p->top_k);
        m = p->top_k;
        sorted = true;
    } else if (p->top_p < 1.0f) {
        qsort(s->c, (size_t)m, sizeof *s->c, cand_cmp);
        sorted = true;
    }
    float mx = -INFINITY;
    for (int32_t i = 0; i < m; i++)
        if (s->c[i].logit > mx) mx = s->c[i].logit;
    if (mx == -INFINITY) return lb_argmax(w, n); /* nothing finite */
    double sum = 0;
    for (int32_t i = 0; i < m; i++) {
        s->c[i].p = expf(s->c[i].logit - mx);
        sum += s->c[i].p;
    }
    if (sorted && p->top_p < 1.0f) {
        double cum = 0, target = (double)p->top_p * sum;
        int32_t keep = m;
        for (int32_t i = 0; i < m; i++) {
            cum += s->c[i].p;
            if (cum >= target) {
                keep = i + 1;
                break;
            }
        }
        m = keep;
    }
    /* 7. min-p relative to the most probable (p_max = exp(0) = 1 here) */
    if (p->min_p > 0.0f) {
        int32_t k = 0;
        for (int32_t i = 0; i < m; i++)
            if (s->c[i].p >= p->min_p) s->c[k++] = s->c[i];
        m = k; /* the max itself always survives (p = 1 >= min_p) */
    }
    /* 8. draw */
    sum = 0;
    for (int32_t i = 0; i < m; i++) sum += s->c[i].p;
    double r = lb_rng_uniform(&s->rng) * sum, acc = 0;
    for (int32_t i = 0; i < m; i++) {
        acc += s->c[i].p;
        if (r < acc) return s->c[i].id;
    }
    return s->c[m - 1].id;
}
