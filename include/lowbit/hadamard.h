/*
 * lowbit/hadamard.h — orthogonal Hadamard transforms of any order
 * n = m * p (p a power of two, m = 1 or a Paley order), used by the
 * QuaRot-style rotations (lowbit/quantize.h lb_model_rotate_*,
 * docs/quantize.md "Online Hadamard on down_proj's input").
 *
 * The transform:   T = (H_m (x) H_p) / sqrt(n)       (Kronecker product)
 *   H_p: the Sylvester-Hadamard matrix of order p (H_1 = [1],
 *        H_2k = [[H_k, H_k], [H_k, -H_k]]; symmetric);
 *   H_m: m = 1 (T is Sylvester's), or a Hadamard matrix of order m built by
 *        Paley's construction from a prime q:
 *          Paley I  (q = 3 mod 4, m = q + 1):  H = I + S,
 *             S = [[0, 1^T], [-1, Q]];
 *          Paley II (q = 1 mod 4, m = 2 (q + 1)): C = [[0, 1^T], [1, Q]],
 *             every entry c of C replaced by the 2x2 block
 *             c * [[1, 1], [1, -1]] (c = +-1) or [[1, -1], [-1, -1]] (c = 0);
 *        Q[i][j] = chi(j - i) (i, j in 0..q-1), chi the quadratic character
 *        mod q (chi(0) = 0, chi(a) = 1 when a is a non-zero square mod q,
 *        else -1). Rows/columns 0 are the bordered ones; Q's row i is
 *        matrix row i + 1.
 *   Element i of a vector is (a, b) = (i / p, i % p): (T x)[a p + b] =
 *   sum_{a', b'} H_m[a][a'] H_p[b][b'] x[a' p + b'] / sqrt(n).
 * The factorisation of n: write n = o * 2^e (o odd); m is the smallest
 * o * 2^j (j = 0..e) that is 1, or a Paley I order (m - 1 prime, = 3 mod
 * 4), or a Paley II order (m / 2 - 1 prime, = 1 mod 4), with m <= 1024;
 * p = n / m. Examples: 384 = 12 * 32 (Paley I, q = 11), 4864 = 76 * 64
 * (Paley II, q = 37), 14336 = 28 * 512 (Paley II, q = 13), 3072 = 12 *
 * 256, 8960 = 140 * 64 (Paley I, q = 139). Orders without such a factor
 * (e.g. 11008 = 43 * 256: 172 is not a Paley order from a prime) are
 * LB_ERR_UNSUPPORTED. QuaRot (Ashkboos et al. 2024, hadamard_utils.py)
 * uses the same Kronecker structure with stored matrices of order 12, 20,
 * 28, 36, 40, 52, 60, 108, 140, 156 and 172; lowbit computes its H_m, so
 * its matrices are Paley's and not byte-equal to QuaRot's tables.
 */
#ifndef LOWBIT_HADAMARD_H
#define LOWBIT_HADAMARD_H

#include "lowbit/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lb_hadamard {
    int64_t n;        /* the order, n = m * p                            */
    int64_t p;        /* the Sylvester (power-of-two) factor              */
    int m;            /* 1 or the Paley order                             */
    int paley_q;      /* Paley's prime q (0 when m == 1)                  */
    int paley_kind;   /* 1 or 2 (Paley I / II; 0 when m == 1)             */
    int8_t *hm;       /* H_m [m, m] row-major, entries +-1 (lb_alloc'd;
                         NULL when m == 1)                                */
    float scale;      /* (float)(1 / sqrt(n))                             */
} lb_hadamard;

/* Build the transform of order n (the factorisation above). On success
 * *h owns hm: free with lb_hadamard_free. Errors: LB_ERR_INVALID_ARG (n <
 * 1 or > 2^26), LB_ERR_UNSUPPORTED (no supported factor; names n),
 * LB_ERR_NOMEM. */
lb_status lb_hadamard_init(lb_hadamard *h, int64_t n);
void lb_hadamard_free(lb_hadamard *h);

/* Does lb_hadamard_init(n) succeed (no allocation)? *m_out (optional):
 * the m it would choose. */
bool lb_hadamard_supported(int64_t n, int *m_out);

/* x [n] <- T x (transpose false) or T^T x (true), in double (offline
 * rotations and folds). tmp: n doubles of scratch. */
void lb_hadamard_apply_f64(const lb_hadamard *h, double *x, bool transpose,
                           double *tmp);

/* Rows of x [rows, n] <- T x_row in float32 with the current kernel
 * variant (lb_kernels_variant(); LB_FORCE_REF / LB_KERNELS choose as for
 * the matmul kernels). tmp: n floats of scratch. Every variant gives the
 * same bits as the scalar reference (same butterfly and summation order;
 * products are by +-1 only, then one multiply by scale). */
void lb_hadamard_rows(const lb_hadamard *h, float *x, int64_t rows,
                      float *tmp);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_HADAMARD_H */
