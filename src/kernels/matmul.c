/*
 * lb_matmul — placeholder reference implementation for F32/F16/BF16 weights
 * (f32 accumulation). The kernels work replaces this with the dispatching
 * implementation (quantized types, SIMD variants, threading).
 */
#include "lowbit/kernels.h"
#include "core/internal.h"

typedef struct mm_job {
    const lb_tensor *W;
    const float *X;
    float *Y;
    int64_t n_tokens, in, out;
    size_t row_bytes;
} mm_job;

static float dot_row(lb_type t, const uint8_t *w, const float *x, int64_t n) {
    float s = 0.0f;
    switch (t) {
    case LB_TYPE_F32: {
        const float *wf = (const float *)w;
        for (int64_t i = 0; i < n; i++) s += wf[i] * x[i];
        break;
    }
    case LB_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            s += lb_f16_to_f32_inline(lb_rd_u16(w + 2 * i)) * x[i];
        break;
    case LB_TYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            s += lb_bf16_to_f32_inline(lb_rd_u16(w + 2 * i)) * x[i];
        break;
    default:
        break;
    }
    return s;
}

static void mm_worker(void *p, int ith, int nth) {
    mm_job *j = p;
    size_t b, e;
    lb_split_range((size_t)j->out, ith, nth, &b, &e);
    const uint8_t *base = j->W->data;
    for (size_t o = b; o < e; o++)
        for (int64_t t = 0; t < j->n_tokens; t++)
            j->Y[t * j->out + (int64_t)o] =
                dot_row(j->W->type, base + o * j->row_bytes, j->X + t * j->in,
                        j->in);
}

lb_status lb_matmul(lb_pool *pool, const lb_tensor *W, const float *X,
                    float *Y, int64_t n_tokens) {
    if (W->n_dims != 2)
        return lb_set_error(LB_ERR_INVALID_ARG, "matmul: %s is not 2-D",
                            W->name ? W->name : "weight");
    if (W->type != LB_TYPE_F32 && W->type != LB_TYPE_F16 &&
        W->type != LB_TYPE_BF16)
        return lb_set_error(LB_ERR_UNSUPPORTED, "matmul: %s: type %s has no kernel",
                            W->name ? W->name : "weight", lb_type_name(W->type));
    mm_job j = {W, X, Y, n_tokens, W->shape[1], W->shape[0], 0};
    if (!lb_row_size(W->type, j.in, &j.row_bytes))
        return lb_set_error(LB_ERR_INVALID_ARG, "matmul: bad row size");
    lb_pool_run(pool, mm_worker, &j);
    return LB_OK;
}

const char *lb_kernels_variant(void) { return "ref"; }
