/*
 * QEP weight correction (Arai and Ichikura 2025, "Quantization Error
 * Propagation: Revisiting Layer-Wise Post-Training Quantization", arXiv
 * 2504.09629; the correction of FujitsuResearch/qep's
 * Helper.run_weight_correct): before a module is quantized, its weights are
 * moved towards the least-squares solution of ||W* X~ - W X|| (X native,
 * X~ replayed inputs), W* = W + alpha W (X - X~) X~^T (X~ X~^T)^-1.
 * See gptq_internal.h.
 */
#include "quant/gptq_internal.h"
#include "core/internal.h"

#include <lapacke.h>
#include <math.h>

lb_status lb_qep_correct(const float *W, int64_t out, int64_t in,
                         const float *H, const float *dXXT, double alpha,
                         double damp_percent, float *W_out) {
    static const char *who = "qep";
    if (!W || !H || !dXXT || !W_out)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL argument", who);
    if (out < 1 || in < 1 || in > INT32_MAX || out > INT32_MAX)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: bad shape [%lld, %lld]",
                            who, (long long)out, (long long)in);
    if (!isfinite(alpha) || !(damp_percent >= 0.0))
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: alpha %g, damp %g", who,
                            alpha, damp_percent);
    LB_TRY(lb_gptq_check_finite(H, in, in, in, who, "H"));
    LB_TRY(lb_gptq_check_finite(dXXT, in, in, in, who, "dXXT"));
    LB_TRY(lb_gptq_check_finite(W, out, in, in, who, "W"));
    size_t n_ii, n_oi;
    if (!lb_mul_ok((size_t)in, (size_t)in, &n_ii) ||
        !lb_mul_ok(n_ii, sizeof(double), &n_ii) ||
        !lb_mul_ok((size_t)out, (size_t)in, &n_oi) ||
        !lb_mul_ok(n_oi, sizeof(double), &n_oi))
        return lb_set_error(LB_ERR_OVERFLOW, "%s: sizes overflow", who);
    double *Hd = lb_alloc(n_ii), *A = lb_alloc(n_oi), *W0 = lb_alloc(n_oi);
    lb_status st = LB_OK;
    if (!Hd || !A || !W0) {
        st = lb_set_error(LB_ERR_NOMEM, "%s: cannot allocate [%lld, %lld]",
                          who, (long long)out, (long long)in);
        goto done;
    }
    double mean = 0.0;
    for (int64_t c = 0; c < in; c++) mean += H[c * in + c];
    mean /= (double)in;
    for (int64_t i = 0; i < in * in; i++) Hd[i] = H[i];
    for (int64_t c = 0; c < in; c++) {
        if (H[c * in + c] == 0.0f) Hd[c * in + c] = 1.0;
        Hd[c * in + c] += damp_percent * mean;
    }
    for (int64_t o = 0; o < out; o++)
        for (int64_t c = 0; c < in; c++)
            W0[o * in + c] = H[c * in + c] == 0.0f ? 0.0 : W[o * in + c];
    /* A = W0 dXXT */
    for (int64_t o = 0; o < out; o++) {
        double *a = A + o * in;
        for (int64_t j = 0; j < in; j++) a[j] = 0.0;
        for (int64_t i = 0; i < in; i++) {
            const double w = W0[o * in + i];
            if (w == 0.0) continue;
            const float *d = dXXT + i * in;
            for (int64_t j = 0; j < in; j++) a[j] += w * (double)d[j];
        }
    }
    /* Y Hd = A  <=>  Hd Y^T = A^T: A row-major [out, in] is A^T
     * column-major [in, out] */
    lapack_int info = LAPACKE_dposv(LAPACK_COL_MAJOR, 'L', (lapack_int)in,
                                    (lapack_int)out, Hd, (lapack_int)in, A,
                                    (lapack_int)in);
    if (info != 0) {
        st = lb_set_error(LB_ERR_RANGE, "%s: the damped Hessian is not "
                          "positive definite (dposv info %d, damp_percent "
                          "%g)", who, (int)info, damp_percent);
        goto done;
    }
    for (int64_t i = 0; i < out * in; i++) {
        const double v = W0[i] + alpha * A[i];
        if (!isfinite(v)) {
            st = lb_set_error(LB_ERR_RANGE, "%s: the corrected weight [%lld, "
                              "%lld] is not finite", who,
                              (long long)(i / in), (long long)(i % in));
            goto done;
        }
        W_out[i] = (float)v;
    }
done:
    lb_free(Hd);
    lb_free(A);
    lb_free(W0);
    return st;
}
