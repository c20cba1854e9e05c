/*
 * fp8.c — FP8 E4M3/E5M2 codec, the BLOCK/CHANNEL/TENSOR scale conventions,
 * calibration-free quantization and the quantization_config reader
 * (lowbit/fp8.h).
 */
#include "lowbit/fp8.h"
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- codec ------------------------------------------------------------------ */

static float decode(uint8_t q, lb_fp8_format fmt) {
    int sign = q >> 7;
    float v;
    if (fmt == LB_FP8_E4M3) {
        int e = (q >> 3) & 15, m = q & 7;
        if (e == 15 && m == 7) return NAN;
        v = e == 0 ? ldexpf((float)m / 8.0f, -6) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    } else {
        int e = (q >> 2) & 31, m = q & 3;
        if (e == 31) return m ? NAN : (sign ? -INFINITY : INFINITY);
        v = e == 0 ? ldexpf((float)m / 4.0f, -14) : ldexpf(1.0f + (float)m / 4.0f, e - 15);
    }
    return sign ? -v : v;
}

static float g_tab[2][256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void tab_init(void) {
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < 256; i++) g_tab[f][i] = decode((uint8_t)i, (lb_fp8_format)f);
}

const float *lb_fp8_table(lb_fp8_format fmt) {
    pthread_once(&g_once, tab_init);
    return g_tab[fmt == LB_FP8_E5M2];
}

float lb_fp8_to_f32(uint8_t q, lb_fp8_format fmt) { return lb_fp8_table(fmt)[q]; }

float lb_fp8_max(lb_fp8_format fmt) { return fmt == LB_FP8_E5M2 ? 57344.0f : 448.0f; }

/* |x| (clamped to max) -> code without sign: mb mantissa bits, bias, the
 * subnormal unit 2^(1-bias-mb). */
uint8_t lb_f32_to_fp8(float x, lb_fp8_format fmt) {
    const int mb = fmt == LB_FP8_E5M2 ? 2 : 3, bias = fmt == LB_FP8_E5M2 ? 15 : 7;
    uint8_t sign = signbit(x) ? 0x80 : 0;
    if (isnan(x)) return fmt == LB_FP8_E5M2 ? 0x7f : 0x7f; /* NaN (E4M3 S.1111.111) */
    float a = fabsf(x);
    float mx = lb_fp8_max(fmt);
    if (a >= mx) return sign | (fmt == LB_FP8_E5M2 ? 0x7b : 0x7e);
    if (a < ldexpf(1.0f, 1 - bias)) {
        /* subnormal (or zero): q = round_half_even(a / 2^(1-bias-mb)); q ==
         * 2^mb is the smallest normal, whose code is the same number */
        float u = ldexpf(a, bias - 1 + mb);
        float r = nearbyintf(u); /* default rounding mode: ties to even */
        return sign | (uint8_t)r;
    }
    uint32_t bits = lb_fp32_to_bits(a);
    int e = (int)(bits >> 23) - 127 + bias;
    uint32_t mant = bits & 0x7fffff;
    int sh = 23 - mb;
    uint32_t r = mant >> sh, rem = mant & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    if (r == (1u << mb)) {
        r = 0;
        e++;
    }
    uint32_t code = ((uint32_t)e << mb) | r;
    uint32_t cmax = fmt == LB_FP8_E5M2 ? 0x7b : 0x7e;
    if (code > cmax) code = cmax;
    return sign | (uint8_t)code;
}

/* ---- scales ----------------------------------------------------------------- */

void lb_fp8_qconfig_default(lb_fp8_qconfig *q, bool channel) {
    memset(q, 0, sizeof *q);
    q->fmt = LB_FP8_E4M3;
    if (channel) {
        q->layout = LB_FP8_SCALE_CHANNEL;
        snprintf(q->scale_suffix, sizeof q->scale_suffix, "weight_scale");
        snprintf(q->method, sizeof q->method, "compressed-tensors");
    } else {
        q->layout = LB_FP8_SCALE_BLOCK;
        q->block_n = q->block_k = 128;
        snprintf(q->scale_suffix, sizeof q->scale_suffix, "weight_scale_inv");
        snprintf(q->method, sizeof q->method, "fp8");
    }
}

char *lb_fp8_settings_json(const lb_fp8_qconfig *q, lb_fp8_scale_rule rule) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "fmt", q->fmt == LB_FP8_E5M2 ? "e5m2" : "e4m3");
    cJSON_AddStringToObject(j, "scales", q->layout == LB_FP8_SCALE_BLOCK     ? "block"
                                         : q->layout == LB_FP8_SCALE_CHANNEL ? "channel"
                                                                             : "tensor");
    if (q->layout == LB_FP8_SCALE_BLOCK) cJSON_AddNumberToObject(j, "block", q->block_n);
    else cJSON_AddNullToObject(j, "block");
    cJSON_AddStringToObject(j, "quant_method", q->method);
    cJSON_AddStringToObject(j, "scale_rule", rule == LB_FP8_RULE_AMAX ? "amax" : "mse");
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

void lb_fp8_scale_shape(const lb_fp8_qconfig *q, int64_t out, int64_t in, int *n_dims,
                        int64_t shape[2]) {
    if (q->layout == LB_FP8_SCALE_BLOCK) {
        *n_dims = 2;
        shape[0] = (out + q->block_n - 1) / q->block_n;
        shape[1] = (in + q->block_k - 1) / q->block_k;
    } else if (q->layout == LB_FP8_SCALE_CHANNEL) {
        *n_dims = 2;
        shape[0] = out;
        shape[1] = 1;
    } else {
        *n_dims = 1;
        shape[0] = 1;
        shape[1] = 0;
    }
}

static void shape_str(const lb_tensor *t, char *buf, size_t n) {
    int o = snprintf(buf, n, "[");
    for (int i = 0; i < t->n_dims && o < (int)n; i++)
        o += snprintf(buf + o, n - (size_t)o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (o < (int)n) snprintf(buf + o, n - (size_t)o, "]");
}

static float scale_at(const lb_tensor *s, int64_t i) {
    const uint8_t *p = s->data;
    if (s->type == LB_TYPE_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return s->type == LB_TYPE_F16 ? lb_f16_to_f32(h) : lb_bf16_to_f32(h);
}

lb_status lb_fp8_check(const lb_fp8_qconfig *q, const char *name, const lb_tensor *w,
                       const lb_tensor *scale) {
    lb_type want = q->fmt == LB_FP8_E5M2 ? LB_TYPE_F8_E5M2 : LB_TYPE_F8_E4M3;
    if (w->type != want)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s.weight: dtype %s, the quantization_config "
                            "says %s", name, lb_type_name(w->type), lb_type_name(want));
    if (w->n_dims != 2 || w->shape[0] <= 0 || w->shape[1] <= 0)
        return lb_set_error(LB_ERR_FORMAT, "%s.weight: an FP8 weight must be 2-D", name);
    if (!scale)
        return lb_set_error(LB_ERR_NOT_FOUND, "%s.%s: missing (the scale of an FP8 weight)", name,
                            q->scale_suffix);
    if (scale->type != LB_TYPE_F32 && scale->type != LB_TYPE_F16 && scale->type != LB_TYPE_BF16)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s.%s: dtype %s (F32/F16/BF16 expected)", name,
                            q->scale_suffix, lb_type_name(scale->type));
    int nd;
    int64_t sh[2];
    lb_fp8_scale_shape(q, w->shape[0], w->shape[1], &nd, sh);
    bool ok = scale->n_dims == nd && scale->shape[0] == sh[0] && (nd == 1 || scale->shape[1] == sh[1]);
    if (q->layout == LB_FP8_SCALE_TENSOR)
        ok = lb_tensor_nelements(scale) == 1 && scale->n_dims <= 2;
    if (!ok) {
        char got[96], want_s[64];
        shape_str(scale, got, sizeof got);
        if (nd == 2)
            snprintf(want_s, sizeof want_s, "[%lld, %lld]", (long long)sh[0], (long long)sh[1]);
        else
            snprintf(want_s, sizeof want_s, "[1]");
        return lb_set_error(LB_ERR_FORMAT, "%s.%s: expected %s for a weight of [%lld, %lld], got %s",
                            name, q->scale_suffix, want_s, (long long)w->shape[0],
                            (long long)w->shape[1], got);
    }
    int64_t ns = lb_tensor_nelements(scale);
    for (int64_t i = 0; i < ns; i++) {
        float v = scale_at(scale, i);
        if (!isfinite(v))
            return lb_set_error(LB_ERR_FORMAT, "%s.%s[%lld] = %g is not finite", name,
                                q->scale_suffix, (long long)i, (double)v);
    }
    return LB_OK;
}

lb_status lb_fp8_dequantize_rows(const lb_fp8_qconfig *q, const lb_tensor *w,
                                 const lb_tensor *scale, int64_t r0, int64_t nr, float *dst) {
    if (!q || !w || !scale || !dst) return lb_set_error(LB_ERR_INVALID_ARG, "fp8 dequantize: NULL");
    const int64_t out = w->shape[0], in = w->shape[1];
    if (r0 < 0 || nr < 0 || r0 + nr > out)
        return lb_set_error(LB_ERR_RANGE, "fp8 dequantize: rows [%lld, %lld) of %lld",
                            (long long)r0, (long long)(r0 + nr), (long long)out);
    const float *tab = lb_fp8_table(q->fmt);
    const uint8_t *c = w->data;
    int64_t nbk = q->layout == LB_FP8_SCALE_BLOCK ? (in + q->block_k - 1) / q->block_k : 1;
    for (int64_t o = r0; o < r0 + nr; o++) {
        float *row = dst + (o - r0) * in;
        const uint8_t *cr = c + o * in;
        if (q->layout == LB_FP8_SCALE_BLOCK) {
            int64_t sr = o / q->block_n;
            for (int64_t b = 0; b < nbk; b++) {
                float s = scale_at(scale, sr * nbk + b);
                int64_t c0 = b * q->block_k, c1 = LB_MIN(in, c0 + q->block_k);
                for (int64_t k = c0; k < c1; k++) row[k] = tab[cr[k]] * s;
            }
        } else {
            float s = scale_at(scale, q->layout == LB_FP8_SCALE_CHANNEL ? o : 0);
            for (int64_t k = 0; k < in; k++) row[k] = tab[cr[k]] * s;
        }
    }
    return LB_OK;
}

void lb_dequantize_row_f8_b32(const lb_block_f8_b32 *x, float *y, int64_t n) {
    const float *tab = lb_fp8_table(LB_FP8_E4M3);
    for (int64_t b = 0; b < n / 32; b++) {
        float d;
        memcpy(&d, &x[b].d, sizeof d);
        for (int k = 0; k < 32; k++) y[b * 32 + k] = tab[x[b].qs[k]] * d;
    }
}

lb_status lb_fp8_to_b32(const lb_fp8_qconfig *q, const lb_tensor *w, const lb_tensor *scale,
                        lb_block_f8_b32 *dst) {
    const int64_t out = w->shape[0], in = w->shape[1];
    if (q->fmt != LB_FP8_E4M3 || in % 32 ||
        (q->layout == LB_FP8_SCALE_BLOCK && q->block_k % 32))
        return lb_set_error(LB_ERR_UNSUPPORTED, "fp8: no 32-block repack for this layout");
    const uint8_t *c = w->data;
    int64_t nbk = q->layout == LB_FP8_SCALE_BLOCK ? (in + q->block_k - 1) / q->block_k : 1;
    for (int64_t o = 0; o < out; o++)
        for (int64_t b = 0; b < in / 32; b++) {
            lb_block_f8_b32 *y = dst + o * (in / 32) + b;
            float d = q->layout == LB_FP8_SCALE_BLOCK
                          ? scale_at(scale, (o / q->block_n) * nbk + (b * 32) / q->block_k)
                      : q->layout == LB_FP8_SCALE_CHANNEL ? scale_at(scale, o)
                                                          : scale_at(scale, 0);
            memcpy(&y->d, &d, sizeof d);
            memcpy(y->qs, c + o * in + b * 32, 32);
        }
    return LB_OK;
}

lb_status lb_fp8_dequantize(const lb_fp8_qconfig *q, const lb_tensor *w, const lb_tensor *scale,
                            float *W) {
    if (!w) return lb_set_error(LB_ERR_INVALID_ARG, "fp8 dequantize: NULL");
    return lb_fp8_dequantize_rows(q, w, scale, 0, w->shape[0], W);
}

/* The value |lb_fp8_table(fmt)[lb_f32_to_fp8(a, fmt)]| for 0 <= a <= MAX,
 * computed in float without branches (so the loop below vectorizes):
 * normals keep mb mantissa bits, rounded to nearest even on the f32 bits
 * (a carry moves into the exponent); below the smallest normal 2^(1-bias)
 * the grid is uniform with step 2^(1-bias-mb), rounded to nearest even by
 * the 1.5 * 2^23 trick. Both exact; test_fp8's checkpoints are byte-identical to those of
 * the table lookup. */
static inline float fp8_round_abs(float a, int sh, float min_normal, float sub_step,
                                  float inv_sub_step) {
    uint32_t b = lb_fp32_to_bits(a);
    b += ((1u << (sh - 1)) - 1) + ((b >> sh) & 1);
    b &= ~((1u << sh) - 1);
    float rn = lb_fp32_from_bits(b);
    /* a / step < 2^mb here: adding and removing 1.5 * 2^23 rounds it to an
     * integer, to nearest even (the default rounding mode; no -ffast-math) */
    float rs = ((a * inv_sub_step + 0x1.8p23f) - 0x1.8p23f) * sub_step;
    return a < min_normal ? rs : rn;
}

/* Squared error of a group (rows r0..r1, columns c0..c1 of W [., in])
 * stored with scale sc (W ~ fp8(clamp(w / sc)) * sc); stops early once
 * above `stop`. Each row in 8 float partial sums, those added in double. */
static double group_err(const float *W, int64_t in, int64_t r0, int64_t r1, int64_t c0,
                        int64_t c1, float sc, lb_fp8_format fmt, double stop) {
    const float inv = 1.0f / sc, mx = lb_fp8_max(fmt);
    const int mb = fmt == LB_FP8_E5M2 ? 2 : 3, bias = fmt == LB_FP8_E5M2 ? 15 : 7;
    const float min_normal = ldexpf(1.0f, 1 - bias), sub_step = ldexpf(1.0f, 1 - bias - mb);
    const float inv_sub = 1.0f / sub_step;
    double e = 0;
    for (int64_t r = r0; r < r1 && e <= stop; r++) {
        const float *w = W + r * in;
        float er[8] = {0};
        int64_t k = c0;
        for (; k + 8 <= c1; k += 8) /* 8 partial sums: vectorizable */
            for (int j = 0; j < 8; j++) {
                float a = fminf(fabsf(w[k + j]) * inv, mx);
                float d = fabsf(w[k + j]) -
                          fp8_round_abs(a, 23 - mb, min_normal, sub_step, inv_sub) * sc;
                er[j] += d * d;
            }
        for (; k < c1; k++) {
            float a = fminf(fabsf(w[k]) * inv, mx);
            float d = fabsf(w[k]) - fp8_round_abs(a, 23 - mb, min_normal, sub_step, inv_sub) * sc;
            er[0] += d * d;
        }
        for (int j = 0; j < 8; j++) e += (double)er[j];
    }
    return e;
}

/* The MSE rule's scale of a group with max |w| amax: among sc = amax /
 * (MAX * f) for f = 1, 0.98, ..., 0.52 (amax lands lower in the top binade
 * or one below: a different alignment of the grid with the values) and
 * f = 1.04, 1.08 (the largest values clipped), the one with the smallest
 * squared error; f = 1 (the amax rule) on ties. */
static float mse_scale(const float *W, int64_t in, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                       float amax, lb_fp8_format fmt) {
    const float mx = lb_fp8_max(fmt);
    float best = amax / mx;
    double best_e = group_err(W, in, r0, r1, c0, c1, best, fmt, INFINITY);
    for (int k = 1; k < 27; k++) {
        float f = k < 25 ? 1.0f - 0.02f * (float)k : 1.0f + 0.04f * (float)(k - 24);
        float sc = amax / (mx * f);
        double e = group_err(W, in, r0, r1, c0, c1, sc, fmt, best_e);
        if (e < best_e) {
            best_e = e;
            best = sc;
        }
    }
    return best;
}

/* The MSE rule's search over every group of a tensor, split over a pool of
 * lb_cpu_count() threads (groups are independent: the result does not
 * depend on the split). BLOCK groups are the blocks in row-major order,
 * CHANNEL the rows, TENSOR the one whole matrix. found[g] receives the
 * searched scale (the amax/MAX one when amax is 0). */
typedef struct mse_job {
    const lb_fp8_qconfig *q;
    const float *W;
    int64_t out, in, nbk, groups;
    float *found;
} mse_job;

static void mse_worker(void *ctx, int ith, int nth) {
    const mse_job *j = ctx;
    const lb_fp8_qconfig *q = j->q;
    size_t b, e;
    lb_split_range((size_t)j->groups, ith, nth, &b, &e);
    for (size_t g = b; g < e; g++) {
        int64_t r0, r1, c0, c1;
        if (q->layout == LB_FP8_SCALE_BLOCK) {
            r0 = (int64_t)g / j->nbk * q->block_n;
            r1 = LB_MIN(j->out, r0 + q->block_n);
            c0 = (int64_t)g % j->nbk * q->block_k;
            c1 = LB_MIN(j->in, c0 + q->block_k);
        } else if (q->layout == LB_FP8_SCALE_CHANNEL) {
            r0 = (int64_t)g, r1 = r0 + 1, c0 = 0, c1 = j->in;
        } else {
            r0 = 0, r1 = j->out, c0 = 0, c1 = j->in;
        }
        float amax = 0.0f;
        for (int64_t r = r0; r < r1; r++)
            for (int64_t k = c0; k < c1; k++) amax = fmaxf(amax, fabsf(j->W[r * j->in + k]));
        j->found[g] = amax > 0.0f ? mse_scale(j->W, j->in, r0, r1, c0, c1, amax, q->fmt)
                                  : amax / lb_fp8_max(q->fmt);
    }
}

lb_status lb_fp8_quantize(const lb_fp8_qconfig *q, const float *W, int64_t out, int64_t in,
                          uint8_t *codes, float *scales) {
    return lb_fp8_quantize_rule(q, LB_FP8_RULE_AMAX, W, out, in, codes, scales);
}

lb_status lb_fp8_quantize_rule(const lb_fp8_qconfig *q, lb_fp8_scale_rule rule, const float *W,
                               int64_t out, int64_t in, uint8_t *codes, float *scales) {
    if (!q || !W || !scales || out <= 0 || in <= 0 ||
        (rule != LB_FP8_RULE_MSE && rule != LB_FP8_RULE_AMAX))
        return lb_set_error(LB_ERR_INVALID_ARG, "fp8 quantize: bad arguments");
    if (q->layout == LB_FP8_SCALE_BLOCK && (q->block_n <= 0 || q->block_k <= 0))
        return lb_set_error(LB_ERR_INVALID_ARG, "fp8 quantize: block size");
    for (int64_t i = 0; i < out * in; i++)
        if (!isfinite(W[i]))
            return lb_set_error(LB_ERR_FORMAT, "fp8 quantize: weight [%lld, %lld] is not finite",
                                (long long)(i / in), (long long)(i % in));
    const float mx = lb_fp8_max(q->fmt);
    float *found = NULL;
    if (rule == LB_FP8_RULE_MSE) {
        int64_t nbk = q->layout == LB_FP8_SCALE_BLOCK ? (in + q->block_k - 1) / q->block_k : 1;
        int64_t groups = q->layout == LB_FP8_SCALE_BLOCK
                             ? (out + q->block_n - 1) / q->block_n * nbk
                             : q->layout == LB_FP8_SCALE_CHANNEL ? out : 1;
        found = malloc((size_t)groups * sizeof *found);
        if (!found) return lb_set_error(LB_ERR_NOMEM, "fp8 quantize: out of memory");
        mse_job job = {.q = q, .W = W, .out = out, .in = in, .nbk = nbk, .groups = groups,
                       .found = found};
        int nth = (int)LB_MIN((int64_t)lb_cpu_count(), groups);
        lb_pool *pool = nth > 1 ? lb_pool_create(nth) : NULL; /* NULL: this thread alone */
        lb_pool_run(pool, mse_worker, &job);
        lb_pool_free(pool);
    }
    if (q->layout == LB_FP8_SCALE_BLOCK) {
        int64_t nbn = (out + q->block_n - 1) / q->block_n, nbk = (in + q->block_k - 1) / q->block_k;
        for (int64_t bi = 0; bi < nbn; bi++)
            for (int64_t bj = 0; bj < nbk; bj++) {
                int64_t r0 = bi * q->block_n, r1 = LB_MIN(out, r0 + q->block_n);
                int64_t c0 = bj * q->block_k, c1 = LB_MIN(in, c0 + q->block_k);
                float amax = 0.0f;
                for (int64_t r = r0; r < r1; r++)
                    for (int64_t k = c0; k < c1; k++) amax = fmaxf(amax, fabsf(W[r * in + k]));
                /* transformers Fp8Quantize: scales = MAX / amax, which torch
                 * evaluates (python scalar / tensor) as MAX * reciprocal(amax);
                 * stored 1 / scales. MSE rule: s = 1 / the searched scale. */
                float s = amax > 0.0f ? mx * (1.0f / amax) : 1.0f;
                if (found && amax > 0.0f) s = 1.0f / found[bi * nbk + bj];
                for (int64_t r = r0; r < r1 && codes; r++)
                    for (int64_t k = c0; k < c1; k++) {
                        float v = W[r * in + k] * s;
                        v = fminf(fmaxf(v, -mx), mx);
                        codes[r * in + k] = lb_f32_to_fp8(v, q->fmt);
                    }
                scales[bi * nbk + bj] = 1.0f / s;
            }
        free(found);
        return LB_OK;
    }
    int64_t groups = q->layout == LB_FP8_SCALE_CHANNEL ? out : 1;
    int64_t rows_per = q->layout == LB_FP8_SCALE_CHANNEL ? 1 : out;
    for (int64_t g = 0; g < groups; g++) {
        const float *w = W + g * rows_per * in;
        float amax = 0.0f;
        for (int64_t i = 0; i < rows_per * in; i++) amax = fmaxf(amax, fabsf(w[i]));
        /* compressed-tensors calculate_qparams, symmetric: scale = amax /
         * (bit_range / 2) = amax / MAX, clamped to >= float32 eps */
        float s = fmaxf(amax / mx, FLT_EPSILON);
        if (found && amax / mx > FLT_EPSILON) s = fmaxf(found[g], FLT_EPSILON);
        for (int64_t i = 0; i < rows_per * in && codes; i++) {
            float v = w[i] / s;
            v = fminf(fmaxf(v, -mx), mx);
            codes[g * rows_per * in + i] = lb_f32_to_fp8(v, q->fmt);
        }
        scales[g] = s;
    }
    free(found);
    return LB_OK;
}

/* ---- quantization_config ---------------------------------------------------- */

static const cJSON *jget(const cJSON *o, const char *k) {
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static lb_status parse_fmt(const char *s, const char *label, lb_fp8_format *f) {
    if (!strcmp(s, "e4m3") || !strcmp(s, "float8_e4m3fn") || !strcmp(s, "e4m3fn")) *f = LB_FP8_E4M3;
    else if (!strcmp(s, "e5m2") || !strcmp(s, "float8_e5m2")) *f = LB_FP8_E5M2;
    else
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: FP8 fmt '%.40s' (e4m3 or e5m2 expected)",
                            label, s);
    return LB_OK;
}

static lb_status block_pair(const cJSON *a, const char *label, const char *key, int *bn, int *bk) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 2)
        return lb_set_error(LB_ERR_FORMAT, "%s: %s must be [rows, cols]", label, key);
    double x = cJSON_GetArrayItem(a, 0)->valuedouble, y = cJSON_GetArrayItem(a, 1)->valuedouble;
    if (!cJSON_IsNumber(cJSON_GetArrayItem(a, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(a, 1)) ||
        !(x >= 1 && x <= 65536) || !(y >= 1 && y <= 65536) || x != (int)x || y != (int)y)
        return lb_set_error(LB_ERR_FORMAT, "%s: %s must hold two integers in [1, 65536]", label,
                            key);
    *bn = (int)x;
    *bk = (int)y;
    return LB_OK;
}

static lb_status parse_ct(const cJSON *j, const char *label, lb_fp8_qconfig *q, bool *is_fp8) {
    const cJSON *groups = jget(j, "config_groups");
    if (!cJSON_IsObject(groups) || !groups->child)
        return lb_set_error(LB_ERR_FORMAT, "%s: compressed-tensors without config_groups", label);
    bool first = true;
    for (const cJSON *g = groups->child; g; g = g->next) {
        const cJSON *w = jget(g, "weights");
        const cJSON *ty = jget(w, "type"), *nb = jget(w, "num_bits"), *stg = jget(w, "strategy");
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "float")) {
            *is_fp8 = false; /* int-quantized / pack-quantized: not ours */
            return LB_OK;
        }
        if (!cJSON_IsNumber(nb) || nb->valuedouble != 8)
            return lb_set_error(LB_ERR_UNSUPPORTED, "%s: config_groups.%s: float weights of %g bits "
                                "(8 supported)", label, g->string ? g->string : "?",
                                cJSON_IsNumber(nb) ? nb->valuedouble : -1.0);
        const cJSON *sym = jget(w, "symmetric");
        if (cJSON_IsFalse(sym))
            return lb_set_error(LB_ERR_UNSUPPORTED, "%s: asymmetric FP8 weights", label);
        lb_fp8_qconfig c;
        memset(&c, 0, sizeof c);
        c.fmt = LB_FP8_E4M3;
        snprintf(c.scale_suffix, sizeof c.scale_suffix, "weight_scale");
        snprintf(c.method, sizeof c.method, "compressed-tensors");
        const char *sv = cJSON_IsString(stg) ? stg->valuestring : "tensor";
        if (!strcmp(sv, "channel")) c.layout = LB_FP8_SCALE_CHANNEL;
        else if (!strcmp(sv, "tensor")) c.layout = LB_FP8_SCALE_TENSOR;
        else if (!strcmp(sv, "block")) {
            c.layout = LB_FP8_SCALE_BLOCK;
            LB_TRY(block_pair(jget(w, "block_structure"), label, "block_structure", &c.block_n,
                              &c.block_k));
        } else
            return lb_set_error(LB_ERR_UNSUPPORTED, "%s: FP8 weight strategy '%.32s' (channel, "
                                "tensor or block supported)", label, sv);
        if (!first && (c.layout != q->layout || c.block_n != q->block_n || c.block_k != q->block_k))
            return lb_set_error(LB_ERR_UNSUPPORTED, "%s: config groups with different FP8 "
                                "strategies", label);
        *q = c;
        first = false;
    }
    *is_fp8 = true;
    return LB_OK;
}

lb_status lb_fp8_qconfig_parse(const char *json, size_t len, const char *label, lb_fp8_qconfig *q,
                               bool *is_fp8) {
    *is_fp8 = false;
    memset(q, 0, sizeof *q);
    cJSON *j = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return lb_set_error(LB_ERR_FORMAT, "%s: quantization_config is not a JSON object", label);
    }
    lb_status s = LB_OK;
    const cJSON *m = jget(j, "quant_method");
    const char *method = cJSON_IsString(m) ? m->valuestring : "";
    if (!strcmp(method, "fp8")) {
        q->fmt = LB_FP8_E4M3;
        const cJSON *f = jget(j, "fmt");
        if (f && !cJSON_IsString(f)) s = lb_set_error(LB_ERR_FORMAT, "%s: fmt must be a string", label);
        else if (f) s = parse_fmt(f->valuestring, label, &q->fmt);
        const cJSON *b = jget(j, "weight_block_size");
        if (s == LB_OK && b && !cJSON_IsNull(b)) {
            q->layout = LB_FP8_SCALE_BLOCK;
            s = block_pair(b, label, "weight_block_size", &q->block_n, &q->block_k);
        } else if (s == LB_OK)
            q->layout = LB_FP8_SCALE_TENSOR;
        snprintf(q->scale_suffix, sizeof q->scale_suffix, "weight_scale_inv");
        snprintf(q->method, sizeof q->method, "fp8");
        if (s == LB_OK) *is_fp8 = true;
    } else if (!strcmp(method, "compressed-tensors")) {
        const cJSON *fm = jget(j, "format");
        const char *fs = cJSON_IsString(fm) ? fm->valuestring : "";
        if (strcmp(fs, "float-quantized") && strcmp(fs, "naive-quantized"))
            *is_fp8 = false;
        else
            s = parse_ct(j, label, q, is_fp8);
    }
    cJSON_Delete(j);
    return s;
}
