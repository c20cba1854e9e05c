/*
 * GPTQ Hessian accumulator: AutoGPTQ GPTQ.add_batch (gptq.py @9f7d370) for
 * nn.Linear inputs, H = 2/N * sum_j X_j^T X_j as a running average.
 *
 * float32 mode (the reference): H *= (float)(n / (n + k)); n += k;
 * x = (float)sqrt(2 / n) * X^T; T = x x^T; H += T. T is a symmetric
 * rank-k update (cblas_ssyrk, lower triangle: half of sgemm's FLOPs). One
 * [in, in] buffer A holds both: H's strict lower triangle transposed in
 * A's strict upper one (H[i][j], j < i, at A[j*in + i]), H's diagonal in
 * an [in] array, and T in A's lower triangle (ssyrk with uplo = lower
 * does not reference the strict upper one, as BLAS specifies), so no
 * [in, in] scratch is needed. OpenBLAS's ssyrk runs the sgemm kernel with
 * the same summation over rows, so T's lower triangle is bit-identical to
 * the full sgemm x x^T torch computes (checked by test_gptq_hessian
 * against cblas_sgemm on awkward sizes).
 * float64 mode: the same formula in double with cblas_dsyrk (upper), then
 * mirrored on read.
 * bf16 products (lb_gptq_hessian_use_bf16): T = bf16(x) bf16(x)^T by
 * lb_gram_bf16 (f32 accumulation; it too writes only the lower triangle),
 * then the same H update.
 */
#include "lowbit/gptq.h"
#include "lowbit/kernels.h"
#include "core/internal.h"
#include "quant/gptq_internal.h"

#include <cblas.h>
#include <math.h>

struct lb_gptq_hessian {
    int64_t in;
    int64_t nsamples;
    bool f64;
    float *H32;  /* [in, in] (f32 mode): H's strict lower triangle
                    transposed in the strict upper one, x x^T of the
                    current batch in the lower one              */
    float *hd;   /* [in] H's diagonal (f32 mode)                */
    float *xs;   /* [xs_rows, in] scaled copy of X (f32)   */
    int64_t xs_rows;
    double *H64; /* [in, in] upper triangle valid (f64)   */
    double *xd;  /* scaled copy of a chunk of X (f64 mode) */
    int64_t chunk_rows;
    bool bf16;       /* T by lb_gram_bf16 (f32 mode)            */
    lb_pool *pool;   /* its workers                             */
    uint16_t *xt;    /* [in, xs_rows] its bf16 scratch           */
    int64_t xt_rows;
};

/* A's strict upper triangle (H[i][j] at A[j*n + i], j < i) and the
 * diagonal hd: H = ratio H + T with T = A's lower triangle, in cache
 * tiles. */
static void update_upper(float *A, float *hd, int64_t n, float ratio) {
    enum { TILE = 64 };
    for (int64_t i0 = 0; i0 < n; i0 += TILE)
        for (int64_t j0 = 0; j0 <= i0; j0 += TILE) {
            const int64_t i1 = LB_MIN(i0 + TILE, n), j1 = LB_MIN(j0 + TILE, n);
            for (int64_t j = j0; j < j1; j++) {
                float *hr = A + (size_t)j * (size_t)n; /* H[., j], T[j, .]^T */
                for (int64_t i = LB_MAX(i0, j + 1); i < i1; i++)
                    hr[i] = hr[i] * ratio + A[(size_t)i * (size_t)n + (size_t)j];
            }
        }
    for (int64_t i = 0; i < n; i++)
        hd[i] = hd[i] * ratio + A[(size_t)i * (size_t)n + (size_t)i];
}

/* Rows of X scaled per call into the scratch copy (bounded memory). */
#define HESS_CHUNK_ELEMS (1 << 22)

lb_status lb_gptq_hessian_create(int64_t in, bool f64_accum,
                                 lb_gptq_hessian **out) {
    if (!out)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "lb_gptq_hessian_create: NULL out");
    *out = NULL;
    if (in < 1 || in > INT32_MAX)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "lb_gptq_hessian_create: in_features = %lld",
                            (long long)in);
    size_t nn;
    if (!lb_mul_ok((size_t)in, (size_t)in, &nn) ||
        !lb_mul_ok(nn, sizeof(double), &nn))
        return lb_set_error(LB_ERR_OVERFLOW,
                            "lb_gptq_hessian_create: [%lld, %lld] overflows",
                            (long long)in, (long long)in);
    lb_gptq_hessian *h = lb_calloc(1, sizeof *h);
    if (!h) return LB_ERR_NOMEM;
    h->in = in;
    h->f64 = f64_accum;
    h->chunk_rows = LB_MAX(1, HESS_CHUNK_ELEMS / in);
    if (f64_accum) {
        h->H64 = lb_calloc((size_t)(in * in), sizeof(double));
        h->xd = lb_alloc((size_t)(h->chunk_rows * in) * sizeof(double));
        if (!h->H64 || !h->xd) goto nomem;
    } else {
        h->H32 = lb_calloc((size_t)(in * in), sizeof(float));
        h->hd = lb_calloc((size_t)in, sizeof(float));
        if (!h->H32 || !h->hd) goto nomem;
    }
    *out = h;
    return LB_OK;
nomem:
    lb_gptq_hessian_free(h);
    return lb_set_error(LB_ERR_NOMEM,
                        "lb_gptq_hessian_create: cannot allocate [%lld, %lld]",
                        (long long)in, (long long)in);
}

void lb_gptq_hessian_free(lb_gptq_hessian *h) {
    if (!h) return;
    lb_free(h->H32);
    lb_free(h->hd);
    lb_free(h->xs);
    lb_free(h->H64);
    lb_free(h->xd);
    lb_free(h->xt);
    lb_free(h);
}

lb_status lb_gptq_hessian_use_bf16(lb_gptq_hessian *h, lb_pool *pool) {
    if (!h) return lb_set_error(LB_ERR_INVALID_ARG, "lb_gptq_hessian_use_bf16: NULL");
    if (h->f64)
        return lb_set_error(LB_ERR_UNSUPPORTED, "lb_gptq_hessian_use_bf16: "
                            "the f64 accumulator has no bf16 mode");
    if (!lb_gram_bf16_available())
        return lb_set_error(LB_ERR_UNSUPPORTED, "lb_gptq_hessian_use_bf16: "
                            "this CPU has no AVX512_BF16");
    h->bf16 = true;
    h->pool = pool;
    return LB_OK;
}

int64_t lb_gptq_hessian_in_features(const lb_gptq_hessian *h) {
    return h ? h->in : 0;
}
int64_t lb_gptq_hessian_nsamples(const lb_gptq_hessian *h) {
    return h ? h->nsamples : 0;
}

lb_status lb_gptq_hessian_add_batch(lb_gptq_hessian *h, const float *X,
                                    int64_t n_rows, int64_t n_samples) {
    static const char *who = "lb_gptq_hessian_add_batch";
    if (!h || !X) return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL", who);
    if (n_rows < 1 || n_samples < 1 || n_rows > INT32_MAX)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: n_rows = %lld, n_samples = %lld", who,
                            (long long)n_rows, (long long)n_samples);
    const int64_t in = h->in;
    size_t nx;
    if (!lb_mul_ok((size_t)n_rows, (size_t)in, &nx) ||
        !lb_mul_ok(nx, sizeof(double), &nx))
        return lb_set_error(LB_ERR_OVERFLOW, "%s: X [%lld, %lld] overflows",
                            who, (long long)n_rows, (long long)in);
    LB_TRY(lb_gptq_check_finite(X, n_rows, in, in, who, "X"));

    const double n0 = (double)h->nsamples, n1 = n0 + (double)n_samples;
    const size_t nn = (size_t)in * (size_t)in;
    if (!h->f64) {
        /* torch: X^T X of the whole batch in one product, so the f32 mode
         * scales a full copy of X (the summation over rows must not be
         * split, or the rounding would differ from the reference). The copy
         * is kept between calls (calibration batches have one size). */
        if (n_rows > h->xs_rows) {
            lb_free(h->xs);
            h->xs_rows = 0;
            h->xs = lb_alloc((size_t)n_rows * (size_t)in * sizeof(float));
            if (!h->xs)
                return lb_set_error(LB_ERR_NOMEM,
                                    "%s: cannot allocate X copy", who);
            h->xs_rows = n_rows;
        }
        float *xs = h->xs;
        const float ratio = (float)(n0 / n1);
        const float f = (float)sqrt(2.0 / n1);
        for (size_t i = 0; i < (size_t)n_rows * (size_t)in; i++)
            xs[i] = f * X[i];
        /* T[in, in] (lower) = xs^T xs : xs is [n_rows, in] row-major. */
        if (h->bf16) {
            if (n_rows > h->xt_rows) {
                lb_free(h->xt);
                h->xt_rows = 0;
                const size_t xb = lb_gram_bf16_scratch(n_rows, in);
                h->xt = xb ? lb_alloc(xb) : NULL;
                if (!h->xt)
                    return lb_set_error(LB_ERR_NOMEM,
                                        "%s: cannot allocate the bf16 copy", who);
                h->xt_rows = n_rows;
            }
            LB_TRY(lb_gram_bf16(h->pool, xs, n_rows, in, h->xt, h->H32, false));
        } else {
            cblas_ssyrk(CblasRowMajor, CblasLower, CblasTrans, (int)in,
                        (int)n_rows, 1.0f, xs, (int)in, 0.0f, h->H32, (int)in);
        }
        /* H = ratio H + T (the same two roundings per element as torch's
         * H *= ratio; H += T), T read from A's lower triangle */
        update_upper(h->H32, h->hd, in, ratio);
    } else {
        const double ratio = n0 / n1, f = sqrt(2.0 / n1);
        for (size_t i = 0; i < nn; i++) h->H64[i] *= ratio;
        for (int64_t r0 = 0; r0 < n_rows; r0 += h->chunk_rows) {
            int64_t nr = LB_MIN(h->chunk_rows, n_rows - r0);
            const float *src = X + r0 * in;
            for (int64_t i = 0; i < nr * in; i++)
                h->xd[i] = f * (double)src[i];
            /* H (upper, row-major) += xd^T xd */
            cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, (int)in,
                        (int)nr, 1.0, h->xd, (int)in, 1.0, h->H64, (int)in);
        }
    }
    h->nsamples += n_samples;
    return LB_OK;
}

lb_status lb_gptq_hessian_take(lb_gptq_hessian *h, float **H_out) {
    static const char *who = "lb_gptq_hessian_take";
    if (!H_out) {
        lb_gptq_hessian_free(h);
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL out", who);
    }
    *H_out = NULL;
    if (!h) return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL", who);
    const int64_t in = h->in;
    const size_t nn = (size_t)in * (size_t)in;
    /* the scratch goes first */
    lb_free(h->xs);
    h->xs = NULL;
    lb_free(h->xt);
    h->xt = NULL;
    lb_free(h->xd);
    h->xd = NULL;
    float *H;
    if (!h->f64) {
        /* the accumulator itself: its strict upper triangle (H's lower one
         * transposed) copied onto the lower one, the diagonal put in */
        H = h->H32;
        h->H32 = NULL;
        lb_gptq_mirror_upper(H, in);
        for (int64_t i = 0; i < in; i++)
            H[(size_t)i * (size_t)in + (size_t)i] = h->hd[i];
    } else {
        /* the double accumulator, mirrored, then rounded to float in place
         * front to back (float k overwrites bytes [4k, 4k + 4) of double
         * k / 2, read already); its second half leaves the RSS */
        double *D = h->H64;
        h->H64 = NULL;
        enum { TILE = 32 };
        for (int64_t i0 = 0; i0 < in; i0 += TILE)
            for (int64_t j0 = 0; j0 <= i0; j0 += TILE) {
                const int64_t i1 = LB_MIN(i0 + TILE, in), j1 = LB_MIN(j0 + TILE, in);
                for (int64_t i = i0; i < i1; i++)
                    for (int64_t j = j0; j < j1 && j < i; j++)
                        D[(size_t)i * (size_t)in + (size_t)j] =
                            D[(size_t)j * (size_t)in + (size_t)i];
            }
        unsigned char *b = (unsigned char *)D;
        for (size_t k = 0; k < nn; k++) {
            double d;
            memcpy(&d, b + k * sizeof(double), sizeof d);
            const float v = (float)d;
            memcpy(b + k * sizeof(float), &v, sizeof v);
        }
        lb_drop_pages(b + nn * sizeof(float), nn * sizeof(float));
        H = (float *)(void *)b;
    }
    lb_gptq_hessian_free(h);
    *H_out = H;
    return LB_OK;
}

void lb_gptq_hessian_get(const lb_gptq_hessian *h, float *H_out) {
    const int64_t in = h->in;
    if (!h->f64) {
        for (int64_t i = 0; i < in; i++)
            for (int64_t j = 0; j < in; j++)
                H_out[i * in + j] = i == j ? h->hd[i]
                                    : j < i ? h->H32[j * in + i]
                                            : h->H32[i * in + j];
        return;
    }
    for (int64_t i = 0; i < in; i++)
        for (int64_t j = 0; j < in; j++)
            H_out[i * in + j] =
                (float)(j >= i ? h->H64[i * in + j] : h->H64[j * in + i]);
}

void lb_gptq_hessian_get_f64(const lb_gptq_hessian *h, double *H_out) {
    const int64_t in = h->in;
    for (int64_t i = 0; i < in; i++)
        for (int64_t j = 0; j < in; j++) {
            if (!h->f64)
                H_out[i * in + j] = (double)(i == j ? h->hd[i]
                                             : j < i ? h->H32[j * in + i]
                                                     : h->H32[i * in + j]);
            else
                H_out[i * in + j] =
                    j >= i ? h->H64[i * in + j] : h->H64[j * in + i];
        }
}
