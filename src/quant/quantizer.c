/*
 * The AutoGPTQ quantizer grid (auto_gptq/quantization/quantizer.py @9f7d370,
 * Quantizer.find_params with perchannel=True, weight=True) and RTN on it.
 * Every float operation is float32 in the reference's order; see gptq.h.
 */
#include "lowbit/gptq.h"
#include "core/internal.h"
#include "quant/gptq_internal.h"

#include <math.h>

void lb_quant_grid_default(lb_quant_grid *g, int bits, bool sym) {
    g->bits = bits;
    g->sym = sym;
    g->mse = false;
    g->mse_norm = 2.4f;
    g->mse_grid = 100;
    g->mse_maxshrink = 0.8f;
}

lb_status lb_gptq_check_bits(int bits, const char *who) {
    if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: bits = %d (supported: 2, 3, 4, 8)", who, bits);
    return LB_OK;
}

/* Sum over the row of |q(x) - x|^norm for candidate (scale1, zero1). */
static double grid_err(const float *x, int64_t cols, float scale, float zero,
                       float maxq, double norm) {
    double e = 0.0;
    for (int64_t c = 0; c < cols; c++) {
        float q = rintf(x[c] / scale) + zero;
        if (q < 0.0f) q = 0.0f;
        if (q > maxq) q = maxq;
        float d = scale * (q - zero) - x[c];
        e += pow(fabs((double)d), norm);
    }
    return e;
}

lb_status lb_gptq_grid_row(const lb_quant_grid *g, const float *x,
                           int64_t cols, float *scale_out,
                           int32_t *zero_out) {
    const float maxq = (float)((1 << g->bits) - 1);
    float mn = x[0], mx = x[0];
    for (int64_t c = 1; c < cols; c++) {
        if (x[c] < mn) mn = x[c];
        if (x[c] > mx) mx = x[c];
    }
    float xmin = mn < 0.0f ? mn : 0.0f; /* torch.minimum(x.min(1), 0) */
    float xmax = mx > 0.0f ? mx : 0.0f;
    if (g->sym) {
        float a = fabsf(xmin);
        xmax = a > xmax ? a : xmax;
        if (xmin < 0.0f) xmin = -xmax;
    }
    if (xmin == 0.0f && xmax == 0.0f) {
        xmin = -1.0f;
        xmax = 1.0f;
    }
    float scale = (xmax - xmin) / maxq;
    float zero = g->sym ? (maxq + 1.0f) / 2.0f : rintf(-xmin / scale);
    if (g->mse) {
        double best = INFINITY;
        int n = (int)((double)g->mse_maxshrink * (double)g->mse_grid);
        for (int i = 0; i < n; i++) {
            /* p = 1 - i/grid in double, rounded to float32 when it
             * multiplies the float32 tensors (torch scalar semantics). */
            float p = (float)(1.0 - (double)i / (double)g->mse_grid);
            float xmin1 = p * xmin, xmax1 = p * xmax;
            float scale1 = (xmax1 - xmin1) / maxq;
            if (!(scale1 > 0.0f)) continue;
            float zero1 = g->sym ? zero : rintf(-xmin1 / scale1);
            double e = grid_err(x, cols, scale1, zero1, maxq,
                                (double)g->mse_norm);
            if (e < best) {
                best = e;
                scale = scale1;
                zero = zero1;
            }
        }
    }
    if (!(scale > 0.0f) || !isfinite(scale))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "quantizer: scale %g of range [%g, %g] is not a "
                            "positive finite number",
                            (double)scale, (double)xmin, (double)xmax);
    *scale_out = scale;
    *zero_out = (int32_t)zero;
    return LB_OK;
}

lb_status lb_gptq_check_finite(const float *x, int64_t rows, int64_t cols,
                               int64_t ld, const char *who, const char *what) {
    for (int64_t r = 0; r < rows; r++) {
        const float *p = x + r * ld;
        for (int64_t c = 0; c < cols; c++)
            if (!isfinite(p[c]))
                return lb_set_error(LB_ERR_INVALID_ARG,
                                    "%s: %s[%lld, %lld] = %g is not finite",
                                    who, what, (long long)r, (long long)c,
                                    (double)p[c]);
    }
    return LB_OK;
}

lb_status lb_quant_grid_find_params(const lb_quant_grid *g, const float *x,
                                    int64_t rows, int64_t cols, int64_t ld,
                                    float *scale, int32_t *zero) {
    if (!g || !x || !scale || !zero)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "lb_quant_grid_find_params: NULL argument");
    LB_TRY(lb_gptq_check_bits(g->bits, "lb_quant_grid_find_params"));
    if (rows < 1 || cols < 1 || ld < cols)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "lb_quant_grid_find_params: bad shape rows=%lld "
                            "cols=%lld ld=%lld",
                            (long long)rows, (long long)cols, (long long)ld);
    if (g->mse && (g->mse_grid < 1 || !(g->mse_maxshrink >= 0.0f) ||
                   !(g->mse_norm > 0.0f)))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "lb_quant_grid_find_params: bad MSE settings "
                            "(grid %d, maxshrink %g, norm %g)",
                            g->mse_grid, (double)g->mse_maxshrink,
                            (double)g->mse_norm);
    LB_TRY(lb_gptq_check_finite(x, rows, cols, ld,
                                "lb_quant_grid_find_params", "x"));
    for (int64_t r = 0; r < rows; r++) {
        lb_status st = lb_gptq_grid_row(g, x + r * ld, cols, &scale[r],
                                        &zero[r]);
        if (st != LB_OK)
            return lb_error_context(st, "row %lld", (long long)r);
    }
    return LB_OK;
}

/* ------------------------------------------------------------------------ */

void lb_gptq_result_free(lb_gptq_result *r) {
    if (!r) return;
    lb_free(r->codes);
    lb_free(r->scales);
    lb_free(r->zeros);
    lb_free(r->g_idx);
    lb_free(r->perm);
    lb_free(r->W_deq);
    lb_free(r->hinv_upper);
    lb_free(r->fp8_scales);
    memset(r, 0, sizeof *r);
}

lb_status lb_gptq_result_alloc(lb_gptq_result *r, int64_t out, int64_t in,
                               int64_t n_groups, bool perm, bool hinv) {
    /* n_w, n_h: bytes of an [out, in] f32 and an [in, in] f32 array */
    size_t n_w, n_g, n_h = 0;
    if (!lb_mul_ok((size_t)out, (size_t)in, &n_w) ||
        !lb_mul_ok(n_w, sizeof(float), &n_w) ||
        !lb_mul_ok((size_t)out, (size_t)n_groups, &n_g) ||
        (hinv && !lb_mul_ok((size_t)in, (size_t)in, &n_h)) ||
        !lb_mul_ok(n_h, sizeof(float), &n_h))
        return lb_set_error(LB_ERR_OVERFLOW,
                            "gptq: result size overflows (out %lld, in %lld)",
                            (long long)out, (long long)in);
    r->out_features = out;
    r->in_features = in;
    r->n_groups = n_groups;
    r->codes = lb_alloc(n_w / sizeof(float)); /* one byte a code */
    r->W_deq = lb_alloc(n_w);
    r->scales = lb_calloc(n_g, sizeof(float));
    r->zeros = lb_calloc(n_g, sizeof(int32_t));
    r->g_idx = lb_calloc((size_t)in, sizeof(int32_t));
    if (perm) r->perm = lb_calloc((size_t)in, sizeof(int32_t));
    if (hinv) r->hinv_upper = lb_alloc(n_h);
    if (!r->codes || !r->W_deq || !r->scales || !r->zeros || !r->g_idx ||
        (perm && !r->perm) || (hinv && !r->hinv_upper)) {
        lb_gptq_result_free(r);
        return lb_set_error(LB_ERR_NOMEM,
                            "gptq: cannot allocate the result (out %lld, in "
                            "%lld)",
                            (long long)out, (long long)in);
    }
    return LB_OK;
}

lb_status lb_gptq_result_groups_major(const lb_gptq_result *r,
                                      float *scales_go, int32_t *zeros_go) {
    if (!r || !r->scales || !r->zeros)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "lb_gptq_result_groups_major: empty result");
    const int64_t out = r->out_features, ng = r->n_groups;
    for (int64_t o = 0; o < out; o++)
        for (int64_t g = 0; g < ng; g++) {
            if (scales_go) scales_go[g * out + o] = r->scales[o * ng + g];
            if (zeros_go) zeros_go[g * out + o] = r->zeros[o * ng + g];
        }
    return LB_OK;
}

lb_status lb_gptq_check_group_size(int group_size, const char *who) {
    if (group_size == 0 || group_size < -1)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: group_size = %d (use -1 or a positive size)",
                            who, group_size);
    return LB_OK;
}

int64_t lb_gptq_n_groups(int64_t in, int group_size) {
    return group_size < 0 ? 1 : (in + group_size - 1) / group_size;
}

lb_status lb_rtn_quantize(const float *W, int64_t out, int64_t in, int bits,
                          int group_size, bool sym, bool mse,
                          lb_gptq_result *res) {
    static const char *who = "lb_rtn_quantize";
    if (!res) return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL result", who);
    memset(res, 0, sizeof *res);
    if (!W) return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL W", who);
    if (out < 1 || in < 1 || in > INT32_MAX)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: bad shape [%lld, %lld]",
                            who, (long long)out, (long long)in);
    LB_TRY(lb_gptq_check_bits(bits, who));
    LB_TRY(lb_gptq_check_group_size(group_size, who));
    LB_TRY(lb_gptq_check_finite(W, out, in, in, who, "W"));
    lb_quant_grid g;
    lb_quant_grid_default(&g, bits, sym);
    g.mse = mse;
    return lb_rtn_quantize_grid(&g, W, out, in, bits, group_size, who, res);
}

lb_status lb_rtn_quantize_grid(const lb_quant_grid *g, const float *W,
                               int64_t out, int64_t in, int bits,
                               int group_size, const char *who,
                               lb_gptq_result *res) {
    const int64_t gs = group_size < 0 ? in : group_size;
    const int64_t ng = lb_gptq_n_groups(in, group_size);
    LB_TRY(lb_gptq_result_alloc(res, out, in, ng, false, false));
    res->bits = bits;
    res->group_size = group_size;
    const int32_t maxq = (1 << bits) - 1;
    for (int64_t c = 0; c < in; c++) res->g_idx[c] = (int32_t)(c / gs);
    for (int64_t o = 0; o < out; o++) {
        const float *w = W + o * in;
        for (int64_t k = 0; k < ng; k++) {
            int64_t c0 = k * gs, c1 = LB_MIN(in, c0 + gs);
            float s;
            int32_t z;
            lb_status st = lb_gptq_grid_row(g, w + c0, c1 - c0, &s, &z);
            if (st != LB_OK) {
                lb_gptq_result_free(res);
                return lb_error_context(st, "%s: row %lld group %lld", who,
                                        (long long)o, (long long)k);
            }
            res->scales[o * ng + k] = s;
            res->zeros[o * ng + k] = z;
            for (int64_t c = c0; c < c1; c++) {
                int32_t q = lb_quant_grid_code(w[c], s, z, maxq);
                res->codes[o * in + c] = (uint8_t)q;
                res->W_deq[o * in + c] = lb_quant_grid_dequant(q, s, z);
            }
        }
    }
    return LB_OK;
}
