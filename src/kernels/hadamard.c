/*
 * Hadamard transforms of order m * 2^k (lowbit/hadamard.h): Paley's
 * construction of H_m, the double-precision transform for offline
 * rotations and folds, and the scalar float32 reference kernel
 * (lb_hadamard_f32_ref) that the SIMD variants (hadamard_avx2.c,
 * hadamard_avx512.c) reproduce bit for bit.
 *
 * Reference kernel, per row x [n] (n = m * p):
 *   1. each of the m blocks x[a p .. a p + p) gets the in-place fast
 *      Walsh-Hadamard transform, stages h = 1, 2, 4, .., p/2, butterfly
 *      (u, v) -> (u + v, u - v);
 *   2. (m > 1) y[a p + b] = sum over a' = 0..m-1 in order of
 *      H_m[a][a'] * x[a' p + b], the first term as +-x, then adds or
 *      subtracts;
 *   3. every element times scale = (float)(1 / sqrt(n)).
 */
#include "lowbit/hadamard.h"
#include "kernels_internal.h"
#include "core/internal.h"

#include <math.h>
#include <string.h>

#define HAD_MAX_M 1024

static bool is_prime(int64_t q) {
    if (q < 2) return false;
    for (int64_t d = 2; d * d <= q; d++)
        if (q % d == 0) return false;
    return true;
}

/* Paley kind of order m (1 or 2, 0 when none), *q its prime. */
static int paley_kind(int64_t m, int *q) {
    if (m % 4 != 0) return 0;
    if (is_prime(m - 1) && (m - 1) % 4 == 3) {
        *q = (int)(m - 1);
        return 1;
    }
    if (m % 2 == 0 && is_prime(m / 2 - 1) && (m / 2 - 1) % 4 == 1) {
        *q = (int)(m / 2 - 1);
        return 2;
    }
    return 0;
}

static bool factor(int64_t n, int *m_out, int *kind, int *q) {
    if (n < 1 || n > ((int64_t)1 << 26)) return false;
    int64_t o = n;
    while (o % 2 == 0) o /= 2;
    *kind = 0;
    *q = 0;
    if (o == 1) {
        *m_out = 1;
        return true;
    }
    for (int64_t m = o; m <= HAD_MAX_M && n % m == 0; m *= 2) {
        int k = paley_kind(m, q);
        if (k) {
            *m_out = (int)m;
            *kind = k;
            return true;
        }
    }
    return false;
}

bool lb_hadamard_supported(int64_t n, int *m_out) {
    int m = 0, k, q;
    const bool ok = factor(n, &m, &k, &q);
    if (m_out) *m_out = ok ? m : 0;
    return ok;
}

/* chi(a) mod q, a in [0, q); sq[a] = 1 for the non-zero squares */
static int chi(int a, const int8_t *sq) { return a == 0 ? 0 : sq[a] ? 1 : -1; }

lb_status lb_hadamard_init(lb_hadamard *h, int64_t n) {
    if (!h) return lb_set_error(LB_ERR_INVALID_ARG, "hadamard: NULL");
    memset(h, 0, sizeof *h);
    if (n < 1 || n > ((int64_t)1 << 26))
        return lb_set_error(LB_ERR_INVALID_ARG, "hadamard: order %lld outside "
                            "[1, 2^26]", (long long)n);
    int m, kind, q;
    if (!factor(n, &m, &kind, &q))
        return lb_set_error(LB_ERR_UNSUPPORTED, "hadamard: order %lld is not "
                            "m * 2^k with m = 1 or a Paley order <= %d (from "
                            "a prime q: m = q + 1, q = 3 mod 4; m = 2(q + 1), "
                            "q = 1 mod 4)", (long long)n, HAD_MAX_M);
    h->n = n;
    h->m = m;
    h->p = n / m;
    h->paley_q = q;
    h->paley_kind = kind;
    h->scale = (float)(1.0 / sqrt((double)n));
    if (m == 1) return LB_OK;
    h->hm = lb_alloc((size_t)m * (size_t)m);
    int8_t *sq = lb_alloc((size_t)q);
    if (!h->hm || !sq) {
        lb_free(sq);
        lb_hadamard_free(h);
        return lb_set_error(LB_ERR_NOMEM, "hadamard: out of memory");
    }
    memset(sq, 0, (size_t)q);
    for (int64_t x = 1; x < q; x++) sq[(x * x) % q] = 1;
    const int c1 = q + 1; /* order of S / C */
    int8_t *H = h->hm;
    if (kind == 1) {
        /* H = I + S, S = [[0, 1^T], [-1, Q]] */
        for (int i = 0; i < c1; i++)
            for (int j = 0; j < c1; j++) {
                int s;
                if (i == 0) s = j == 0 ? 0 : 1;
                else if (j == 0) s = -1;
                else s = chi(((j - 1) - (i - 1) + q) % q, sq);
                H[i * m + j] = (int8_t)(s + (i == j ? 1 : 0));
            }
    } else {
        /* C = [[0, 1^T], [1, Q]]; 0 -> [[1,-1],[-1,-1]], c -> c[[1,1],[1,-1]] */
        for (int i = 0; i < c1; i++)
            for (int j = 0; j < c1; j++) {
                int c;
                if (i == 0) c = j == 0 ? 0 : 1;
                else if (j == 0) c = 1;
                else c = chi(((j - 1) - (i - 1) + q) % q, sq);
                int b[4];
                if (c == 0) {
                    b[0] = 1; b[1] = -1; b[2] = -1; b[3] = -1;
                } else {
                    b[0] = c; b[1] = c; b[2] = c; b[3] = -c;
                }
                H[(2 * i) * m + 2 * j] = (int8_t)b[0];
                H[(2 * i) * m + 2 * j + 1] = (int8_t)b[1];
                H[(2 * i + 1) * m + 2 * j] = (int8_t)b[2];
                H[(2 * i + 1) * m + 2 * j + 1] = (int8_t)b[3];
            }
    }
    lb_free(sq);
    return LB_OK;
}

void lb_hadamard_free(lb_hadamard *h) {
    if (!h) return;
    lb_free(h->hm);
    h->hm = NULL;
}

void lb_hadamard_apply_f64(const lb_hadamard *h, double *x, bool transpose,
                           double *tmp) {
    const int64_t p = h->p, m = h->m, n = h->n;
    for (int64_t a = 0; a < m; a++) {
        double *v = x + a * p;
        for (int64_t s = 1; s < p; s *= 2)
            for (int64_t i = 0; i < p; i += 2 * s)
                for (int64_t j = i; j < i + s; j++) {
                    const double u = v[j], w = v[j + s];
                    v[j] = u + w;
                    v[j + s] = u - w;
                }
    }
    if (m > 1) {
        for (int64_t a = 0; a < m; a++)
            for (int64_t b = 0; b < p; b++) {
                double acc = 0.0;
                for (int64_t k = 0; k < m; k++) {
                    const int e = transpose ? h->hm[k * m + a] : h->hm[a * m + k];
                    acc += e > 0 ? x[k * p + b] : -x[k * p + b];
                }
                tmp[a * p + b] = acc;
            }
        memcpy(x, tmp, (size_t)n * sizeof(double));
    }
    const double sc = 1.0 / sqrt((double)n);
    for (int64_t i = 0; i < n; i++) x[i] *= sc;
}

void lb_hadamard_f32_ref(const lb_hadamard *h, float *x, int64_t rows,
                         float *tmp) {
    const int64_t p = h->p, m = h->m, n = h->n;
    for (int64_t r = 0; r < rows; r++, x += n) {
        for (int64_t a = 0; a < m; a++) {
            float *v = x + a * p;
            for (int64_t s = 1; s < p; s *= 2)
                for (int64_t i = 0; i < p; i += 2 * s)
                    for (int64_t j = i; j < i + s; j++) {
                        const float u = v[j], w = v[j + s];
                        v[j] = u + w;
                        v[j + s] = u - w;
                    }
        }
        if (m > 1) {
            for (int64_t a = 0; a < m; a++) {
                const int8_t *e = h->hm + a * m;
                float *y = tmp + a * p;
                for (int64_t b = 0; b < p; b++) {
                    float acc = e[0] > 0 ? x[b] : -x[b];
                    for (int64_t k = 1; k < m; k++)
                        acc = e[k] > 0 ? acc + x[k * p + b] : acc - x[k * p + b];
                    y[b] = acc;
                }
            }
            memcpy(x, tmp, (size_t)n * sizeof(float));
        }
        for (int64_t i = 0; i < n; i++) x[i] *= h->scale;
    }
}

void lb_hadamard_rows(const lb_hadamard *h, float *x, int64_t rows,
                      float *tmp) {
    lb_kernels_current()->vec.hadamard(h, x, rows, tmp);
}
