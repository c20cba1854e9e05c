/*
 * lb_matmul: kernel selection (once, from lb_cpu_get()), per-thread
 * activation scratch, and the work split over the thread pool.
 *
 * Flow of one call Y[n_tokens, out] = X[n_tokens, in] W[out, in]^T:
 *  1. the activations are quantized to the weight type's vec_dot_type into
 *     the calling thread's scratch (token rows split over the workers,
 *     then a barrier);
 *  2. outputs are split over the workers by weight rows. Decode (few
 *     tokens): rows are split evenly and each worker streams its rows once.
 *     Prefill: rows are cut into chunks whose weights fit in L2, and each
 *     chunk is multiplied against all tokens in tiles (weights are streamed
 *     from memory once per call, activations from cache).
 * Every output goes through the same per-(row, token) arithmetic whatever the
 * split, so results do not depend on the number of threads.
 */
#include "kernels_internal.h"
#include "core/internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* ---------------------------------------------------------------------- */
/* Variant tables                                                          */

static lb_kernel_table g_tables[LB_KV_COUNT];
static lb_kernel_table g_tuned; /* g_tables[g_current] + measured decode kernels */
static bool g_usable[LB_KV_COUNT];
static int g_current = LB_KV_REF;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const char *const g_names[LB_KV_COUNT] = {"ref", "avx2", "avx_vnni", "avx512",
                                                 "avx512_vnni", "amx"};
/* the table each family's fill functions start from: AVX-VNNI and AVX-512
 * (F/BW/VL/DQ) are both AVX2 plus their own kernels (Skylake-X has AVX-512
 * without AVX-VNNI, Alder Lake the reverse) */
static const int g_base[LB_KV_COUNT] = {LB_KV_REF, LB_KV_REF, LB_KV_AVX2, LB_KV_AVX2,
                                        LB_KV_AVX512, LB_KV_AVX512_VNNI};

static void init_tables(void) {
    const lb_cpu_features *f = lb_cpu_get();
    g_usable[LB_KV_REF] = true;
    g_usable[LB_KV_AVX2] = f->avx2 && f->fma && f->f16c;
    g_usable[LB_KV_AVX_VNNI] = g_usable[LB_KV_AVX2] && f->avx_vnni;
    g_usable[LB_KV_AVX512] = g_usable[LB_KV_AVX2] && f->avx512f && f->avx512bw &&
                             f->avx512vl && f->avx512dq;
    g_usable[LB_KV_AVX512_VNNI] = g_usable[LB_KV_AVX512] && f->avx512_vnni;
    g_usable[LB_KV_AMX] = g_usable[LB_KV_AVX512_VNNI] && f->amx_tile && f->amx_int8;
    /* Each table starts as a copy of its base (g_base); ISA-specific fill
     * functions run only when the CPU supports them. */
    for (int v = 0; v < LB_KV_COUNT; v++) {
        if (v > 0) g_tables[v] = g_tables[g_base[v]];
        g_tables[v].name = g_names[v];
        if (!g_usable[v]) continue;
        switch (v) {
        case LB_KV_REF:
            lb_kernels_fill_ref(&g_tables[v]);
            lb_vec_fill_ref(&g_tables[v]);
            lb_kernels_fill_fp8_ref(&g_tables[v]); /* fp8_ref.c */
            lb_kernels_fill_bnb_ref(&g_tables[v]); /* bnb_ref.c */
            break;
        case LB_KV_AVX2:
            lb_kernels_fill_avx2(&g_tables[v]);
            lb_vec_fill_avx2(&g_tables[v]);
            lb_kernels_fill_fp8_avx2(&g_tables[v]); /* fp8_avx2.c */
            lb_kernels_fill_bnb_avx2(&g_tables[v]); /* bnb_avx2.c */
            break;
        case LB_KV_AVX_VNNI: lb_kernels_fill_avx_vnni(&g_tables[v]); break;
        case LB_KV_AVX512: /* the AVX2 kernels (kernels_internal.h), but: */
            lb_kernels_fill_fp8_avx512(&g_tables[v]); /* fp8_avx512.c */
            lb_kernels_fill_bnb_avx512(&g_tables[v]); /* bnb_avx512.c */
            g_tables[v].vec.hadamard = lb_hadamard_f32_avx512; /* hadamard_avx512.c */
            lb_kernels_fill_f32_avx512(&g_tables[v]); /* f32_avx512.c: F32 retiled */
            lb_kernels_fill_f16_avx512(&g_tables[v]); /* f16_avx512.c: F16/BF16 */
            lb_vec_fill_avx512(&g_tables[v]);         /* vec_avx512.c: attention */
            break;
        case LB_KV_AVX512_VNNI: lb_kernels_fill_avx512_vnni(&g_tables[v]); break;
        case LB_KV_AMX: lb_kernels_fill_amx(&g_tables[v]); break;
        default: break;
        }
    }
    const char *force = getenv("LB_FORCE_REF");
    bool force_ref = force && force[0] && strcmp(force, "0") != 0;
    /* LB_KERNELS=<name> caps the choice at that family (e.g. "avx2" on an
     * AVX-512 machine); unknown names are ignored. */
    int cap = LB_KV_COUNT - 1;
    const char *want = getenv("LB_KERNELS");
    for (int v = 0; want && v < LB_KV_COUNT; v++)
        if (strcmp(want, g_names[v]) == 0) cap = v;
    g_current = LB_KV_REF;
    if (!force_ref)
        for (int v = cap; v > 0; v--)
            if (g_usable[v]) {
                g_current = v;
                break;
            }
    /* The X16 decode kernels of the usable SIMD families give the same
     * bits: pick the fastest by measurement (tune.c), unless LB_KERNELS
     * names the family to use */
    g_tuned = g_tables[g_current];
    if (!want && g_current != LB_KV_REF) {
        const lb_kernel_table *simd[LB_KV_COUNT];
        int n = 0;
        for (int v = 1; v <= g_current; v++)
            if (g_usable[v]) simd[n++] = &g_tables[v];
        lb_kernels_tune(&g_tuned, simd, n);
    }
}

const lb_kernel_table *lb_kernels_table(int v) {
    pthread_once(&g_once, init_tables);
    if (v < 0 || v >= LB_KV_COUNT) return NULL;
    return &g_tables[v];
}

bool lb_kernels_usable(int v) {
    pthread_once(&g_once, init_tables);
    return v >= 0 && v < LB_KV_COUNT && g_usable[v];
}

const lb_kernel_table *lb_kernels_current(void) {
    pthread_once(&g_once, init_tables);
    return &g_tuned;
}

const char *lb_kernels_variant(void) { return lb_kernels_current()->name; }

/* ---------------------------------------------------------------------- */
/* Per-thread scratch                                                      */

typedef struct scratch {
    void *p;
    size_t cap;
} scratch;

static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static bool g_scratch_key_ok;

static void scratch_destroy(void *p) {
    scratch *s = p;
    if (s) {
        lb_free(s->p);
        free(s);
    }
}
static void scratch_key_init(void) {
    g_scratch_key_ok = pthread_key_create(&g_scratch_key, scratch_destroy) == 0;
}

/* The calling thread's scratch of at least `size` bytes (grown as needed,
 * contents not kept), or NULL with the error set. */
static void *scratch_get(size_t size) {
    pthread_once(&g_scratch_once, scratch_key_init);
    if (!g_scratch_key_ok) {
        lb_set_error(LB_ERR_NOMEM, "matmul: cannot create the scratch key");
        return NULL;
    }
    scratch *s = pthread_getspecific(g_scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(g_scratch_key, s) != 0) {
            free(s);
            lb_set_error(LB_ERR_NOMEM, "matmul: out of memory for scratch");
            return NULL;
        }
    }
    if (s->cap < size) {
        size_t cap = size + size / 4 + 4096;
        void *p = lb_alloc(cap);
        if (!p) return NULL;
        lb_free(s->p);
        s->p = p;
        s->cap = cap;
    }
    return s->p;
}

void lb_kernels_release_scratch(void) {
    pthread_once(&g_scratch_once, scratch_key_init);
    if (!g_scratch_key_ok) return;
    scratch *s = pthread_getspecific(g_scratch_key);
    if (s) {
        pthread_setspecific(g_scratch_key, NULL);
        scratch_destroy(s);
    }
}

/* ---------------------------------------------------------------------- */
/* Plans: one product split into chunks                                    */

lb_status lb_mm_plan_make(lb_mm_plan *pl, const lb_kernel_table *kt, const lb_tensor *W,
                          int64_t n_tokens, int nth) {
    return lb_mm_plan_make_aligned(pl, kt, W, n_tokens, nth, 1);
}

lb_status lb_mm_plan_make_aligned(lb_mm_plan *pl, const lb_kernel_table *kt,
                                  const lb_tensor *W, int64_t n_tokens, int nth,
                                  int64_t row_align) {
    const char *name = W && W->name ? W->name : "weight";
    memset(pl, 0, sizeof *pl);
    if (!W || !kt)
        return lb_set_error(LB_ERR_INVALID_ARG, "matmul: NULL argument (%s)", name);
    if (W->n_dims != 2 || W->shape[0] <= 0 || W->shape[1] <= 0)
        return lb_set_error(LB_ERR_INVALID_ARG, "matmul: %s is not a non-empty 2-D tensor", name);
    if (n_tokens < 0)
        return lb_set_error(LB_ERR_INVALID_ARG, "matmul: %s: n_tokens %lld", name,
                            (long long)n_tokens);
    if ((int)W->type < 0 || W->type >= LB_TYPE_COUNT_ || !kt->w[W->type].mm)
        return lb_set_error(LB_ERR_UNSUPPORTED, "matmul: %s: type %s has no kernel", name,
                            lb_type_name((int)W->type));
    const lb_wkernel *wk = &kt->w[W->type];
    pl->in = W->shape[1];
    pl->out = W->shape[0];
    pl->n_tokens = n_tokens;
    size_t total;
    if (!lb_row_size(W->type, pl->in, &pl->w_stride))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "matmul: %s: %lld columns is not a multiple of the %s block size",
                            name, (long long)pl->in, lb_type_name((int)W->type));
    if (!lb_mul_ok(pl->w_stride, (size_t)pl->out, &total) || total > W->nbytes || !W->data)
        return lb_set_error(LB_ERR_INVALID_ARG, "matmul: %s: data too small for [%lld, %lld] %s",
                            name, (long long)pl->out, (long long)pl->in,
                            lb_type_name((int)W->type));
    pl->w = W->data;
    pl->w_type = W->type;
    pl->mm = wk->mm;
    pl->act_type = wk->act_type;
    if (wk->mm_batch && n_tokens >= wk->batch_min) pl->mm = wk->mm_batch;
    const bool x16 = W->layout == LB_LAYOUT_X16;
    if (x16) {
        if (!lb_x16_type(W->type) || !wk->mm_x16)
            return lb_set_error(LB_ERR_UNSUPPORTED, "matmul: %s: no kernel for repacked %s", name,
                                lb_type_name((int)W->type));
        pl->mm = wk->mm_x16;
        if (wk->mm_x16_dec && n_tokens < LB_X16_DEC_MAX) pl->mm = wk->mm_x16_dec;
        if (wk->mm_x16_batch && n_tokens >= wk->batch_min) pl->mm = wk->mm_x16_batch;
    } else if (W->layout != LB_LAYOUT_ROWS) {
        return lb_set_error(LB_ERR_INVALID_ARG, "matmul: %s: unknown layout %d", name, W->layout);
    }
    if (wk->act_type == LB_TYPE_F32) {
        pl->a_stride = (size_t)pl->in * sizeof(float);
    } else {
        pl->qact = kt->qact[wk->act_type];
        if (!pl->qact || !lb_row_size(wk->act_type, pl->in, &pl->a_stride))
            return lb_set_error(LB_ERR_INTERNAL, "matmul: %s: no activation quantizer", name);
        size_t bytes;
        if (!lb_mul_ok(pl->a_stride, (size_t)n_tokens, &bytes))
            return lb_set_error(LB_ERR_OVERFLOW, "matmul: %s: activation size overflows", name);
    }
    /* Work split (each worker takes its own contiguous range of chunks,
     * then helps the others: lb_steal_take, so a thread that is
     * descheduled does not hold the others back).
     * Decode (few tokens): chunks of a multiple of 4 rows, about 4 per
     * thread. Prefill: a multiple of 16 rows whose weights take about
     * 64 KiB (L2-resident while all token tiles pass over them), at least
     * 4 chunks per thread when the matrix allows. Token tiles of up to 64
     * rows of activations (all tokens for batch kernels, which repack the
     * weights once per call). */
    if (nth < 1) nth = 1;
    int64_t chunk;
    if (n_tokens < 4) {
        chunk = (pl->out + 4 * nth - 1) / (4 * nth);
        chunk = LB_MAX(16, (chunk + 3) / 4 * 4);
    } else {
        chunk = (int64_t)((64 * 1024) / (pl->w_stride ? pl->w_stride : 1));
        chunk = LB_MAX(16, chunk / 16 * 16);
        if ((pl->out + chunk - 1) / chunk < 4 * nth) {
            chunk = (pl->out + 4 * nth - 1) / (4 * nth);
            chunk = LB_MAX(4, (chunk + 3) / 4 * 4);
        }
    }
    /* X16 32-element-block types' prefill (Q4_0, Q8_0, Q5_0, Q4_1, Q5_1;
     * the K-quants' blocks are 256): at least 64 rows (4 groups) per
     * chunk where that leaves 2 chunks per thread: the kernels sum each
     * activation block once per call and share it over the chunk's groups,
     * and the AVX-512 VNNI Q4_0 / Q8_0 / Q5_0 ones pair the groups
     * (Q5_0 / Q4_1 / Q5_1 since 2026-12-05: measured on Zen 5 only, for
     * the AVX2 family too; docs/model.md) (ffn_down's 64 KiB chunk
     * was a single group of 16 rows; 64 rows of 8192 Q4_0 columns are 288
     * KiB, still L2-resident) */
    if (x16 && n_tokens >= LB_VNNI_MIN_TOKENS && chunk < 64 &&
        lb_type_get_traits((int)W->type)->blck_size == 32 && (pl->out + 63) / 64 >= 2 * nth)
        chunk = 64;
    /* X16: chunks start at whole groups of 16 rows */
    if (x16 && row_align % 16) row_align = row_align % 8 == 0 ? row_align * 2
                                         : row_align % 4 == 0 ? row_align * 4
                                         : row_align % 2 == 0 ? row_align * 8 : row_align * 16;
    if (row_align > 1) chunk = (chunk + row_align - 1) / row_align * row_align;
    pl->row_chunk = LB_MIN(chunk, pl->out);
    pl->n_chunks = (pl->out + pl->row_chunk - 1) / pl->row_chunk;
    const bool batch = x16 ? pl->mm == wk->mm_x16_batch : pl->mm == wk->mm_batch;
    pl->tok_tile = batch ? LB_MAX(n_tokens, 1) : LB_MIN(LB_MAX(n_tokens, 1), 64);
    return LB_OK;
}

size_t lb_mm_plan_act_bytes(const lb_mm_plan *pl) {
    return pl->qact ? pl->a_stride * (size_t)pl->n_tokens : 0;
}

void lb_mm_plan_quantize(const lb_mm_plan *pl, const float *X, void *A, int64_t t0, int64_t t1) {
    if (!pl->qact) return;
    for (int64_t t = t0; t < t1; t++)
        pl->qact(X + (size_t)t * (size_t)pl->in, (uint8_t *)A + (size_t)t * pl->a_stride, pl->in);
}

void lb_mm_plan_chunk_at(const lb_mm_plan *pl, const void *A, float *Yc, size_t ldy, int64_t c) {
    const int64_t r0 = c * pl->row_chunk;
    const int64_t nr = LB_MIN(pl->row_chunk, pl->out - r0);
    const uint8_t *a = A;
    for (int64_t t0 = 0; t0 < pl->n_tokens; t0 += pl->tok_tile) {
        const int64_t nt = LB_MIN(pl->tok_tile, pl->n_tokens - t0);
        pl->mm(pl->in, pl->w + (size_t)r0 * pl->w_stride, pl->w_stride, nr,
               a + (size_t)t0 * pl->a_stride, pl->a_stride, nt, Yc + (size_t)t0 * ldy, ldy);
    }
}

void lb_mm_plan_chunk(const lb_mm_plan *pl, const void *A, float *Y, size_t ldy, int64_t c) {
    lb_mm_plan_chunk_at(pl, A, Y + (size_t)(c * pl->row_chunk), ldy, c);
}

/* ---------------------------------------------------------------------- */
/* lb_matmul on top of a plan                                              */

typedef struct mm_job {
    const lb_mm_plan *pl;
    const float *X;
    const void *A;
    uint8_t *A_buf;
    float *Y;
    lb_pool *pool;
    lb_steal_ctr *ctr; /* [nth] work-split counters */
} mm_job;

static void mm_worker(void *p, int ith, int nth) {
    mm_job *j = p;
    if (j->pl->qact) {
        size_t b, e;
        lb_split_range((size_t)j->pl->n_tokens, ith, nth, &b, &e);
        lb_mm_plan_quantize(j->pl, j->X, j->A_buf, (int64_t)b, (int64_t)e);
        lb_pool_barrier(j->pool);
    }
    int64_t c;
    for (int k = 0; lb_steal_take(j->ctr, j->pl->n_chunks, ith, nth, &k, &c);)
        lb_mm_plan_chunk(j->pl, j->A, j->Y, (size_t)j->pl->out, c);
}

lb_status lb_matmul_table(const lb_kernel_table *kt, lb_pool *pool, const lb_tensor *W,
                          const float *X, float *Y, int64_t n_tokens) {
    const char *name = W && W->name ? W->name : "weight";
    if (!W || !X || !Y || !kt)
        return lb_set_error(LB_ERR_INVALID_ARG, "matmul: NULL argument (%s)", name);
    lb_mm_plan pl;
    LB_TRY(lb_mm_plan_make(&pl, kt, W, n_tokens, lb_pool_size(pool)));
    if (n_tokens == 0) return LB_OK;
    mm_job j;
    memset(&j, 0, sizeof j);
    j.pl = &pl;
    j.X = X;
    j.Y = Y;
    j.pool = pool;
    if (pl.qact) {
        j.A_buf = scratch_get(lb_mm_plan_act_bytes(&pl));
        if (!j.A_buf) return lb_error_context(LB_ERR_NOMEM, "matmul: %s", name);
        j.A = j.A_buf;
    } else {
        j.A = X;
    }
    lb_steal_ctr ctr_small[8];
    const int nth = lb_pool_size(pool);
    j.ctr = nth <= 8 ? ctr_small : lb_calloc((size_t)nth, sizeof *j.ctr);
    if (!j.ctr) return lb_error_context(LB_ERR_NOMEM, "matmul: %s", name);
    lb_steal_reset(j.ctr, (size_t)nth);
    lb_pool_run(pool, mm_worker, &j);
    if (j.ctr != ctr_small) lb_free(j.ctr);
    return LB_OK;
}

/* ---------------------------------------------------------------------- */
/* Repacking (LB_LAYOUT_X16)                                               */

/* lb_tensor_repack repacks weights of type t */
static bool repacks(lb_type t) {
    if (!lb_x16_type(t)) return false;
    const char *env = getenv("LB_REPACK");
    if (env && strcmp(env, "0") == 0) return false;
    const lb_wkernel *wk = &lb_kernels_current()->w[t];
    /* LB_REPACK=1: every type the family has an X16 kernel for */
    if (env && strcmp(env, "1") == 0) return wk->mm_x16 != NULL;
    return wk->x16_fast && wk->mm_x16;
}

const char *lb_kernel_name(lb_type type, int64_t n_tokens) {
    if ((int)type < 0 || type >= LB_TYPE_COUNT_) return NULL;
    const lb_wkernel *wk = &lb_kernels_current()->w[type];
    if (!wk->mm) return NULL;
    if (repacks(type)) {
        if (wk->mm_x16_batch && n_tokens >= wk->batch_min) return wk->x16_batch_name;
        return wk->mm_x16_dec && n_tokens < LB_X16_DEC_MAX ? wk->x16_dec_name : wk->x16_name;
    }
    return wk->mm_batch && n_tokens >= wk->batch_min ? wk->batch_name : wk->mm_name;
}

lb_status lb_tensor_repack(lb_tensor *W, void *data) {
    if (!W || !data || data != W->data)
        return lb_set_error(LB_ERR_INVALID_ARG, "repack: NULL argument or data is not W's");
    const char *name = W->name ? W->name : "weight";
    if (!lb_x16_type(W->type) || W->layout != LB_LAYOUT_ROWS) return LB_OK;
    if (W->n_dims != 2 || W->shape[0] <= 0 || W->shape[1] <= 0)
        return lb_set_error(LB_ERR_INVALID_ARG, "repack: %s is not a non-empty 2-D tensor", name);
    if (!repacks(W->type) || W->shape[0] < 16) return LB_OK;
    size_t ws, total, gbytes;
    if (!lb_row_size(W->type, W->shape[1], &ws) ||
        !lb_mul_ok(ws, (size_t)W->shape[0], &total) || total > W->nbytes ||
        !lb_mul_ok(ws, 16, &gbytes))
        return lb_set_error(LB_ERR_INVALID_ARG, "repack: %s: data too small for its shape", name);
    uint8_t *tmp = lb_alloc(gbytes);
    if (!tmp) return lb_set_error(LB_ERR_NOMEM, "repack: %s: out of memory", name);
    uint8_t *p = data;
    const int64_t nb = W->shape[1] / lb_type_get_traits((int)W->type)->blck_size;
    for (int64_t g = 0; g < W->shape[0] / 16; g++) {
        uint8_t *gp = p + (size_t)g * gbytes;
        memcpy(tmp, gp, gbytes);
        lb_x16_pack_group(W->type, tmp, ws, nb, gp);
    }
    lb_free(tmp);
    W->layout = LB_LAYOUT_X16;
    return LB_OK;
}

const void *lb_tensor_row_canonical(const lb_tensor *W, int64_t row, void *buf) {
    size_t ws = 0;
    (void)lb_row_size(W->type, lb_tensor_cols(W), &ws);
    const uint8_t *p = W->data;
    if (W->layout != LB_LAYOUT_X16 || row >= lb_tensor_rows(W) / 16 * 16)
        return p + (size_t)row * ws;
    const size_t bb = (size_t)lb_type_get_traits((int)W->type)->type_size;
    const int64_t nb = lb_tensor_cols(W) / lb_type_get_traits((int)W->type)->blck_size;
    for (int64_t b = 0; b < nb; b++)
        lb_x16_get_block(W->type, p + (size_t)(row / 16) * 16 * ws, b, (int)(row % 16),
                         (uint8_t *)buf + (size_t)b * bb);
    return buf;
}

lb_status lb_tensor_dequant_row(const lb_tensor *W, int64_t row, float *dst) {
    const char *name = W->name ? W->name : "weight";
    size_t ws;
    if (W->n_dims < 1 || row < 0 || row >= lb_tensor_rows(W) ||
        !lb_row_size(W->type, lb_tensor_cols(W), &ws))
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: no row %lld of a %s tensor", name,
                            (long long)row, lb_type_name(W->type));
    if (W->layout != LB_LAYOUT_X16)
        return lb_dequantize_row(W->type, (const uint8_t *)W->data + (size_t)row * ws, dst,
                                 lb_tensor_cols(W));
    uint8_t stack[8192]; /* an embedding row per token: no allocation for most rows */
    uint8_t *buf = ws <= sizeof stack ? stack : lb_alloc(ws);
    if (!buf) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory for a row", name);
    lb_status s = lb_dequantize_row(W->type, lb_tensor_row_canonical(W, row, buf), dst,
                                    lb_tensor_cols(W));
    if (buf != stack) lb_free(buf);
    return s;
}

lb_status lb_matmul(lb_pool *pool, const lb_tensor *W, const float *X, float *Y,
                    int64_t n_tokens) {
    return lb_matmul_table(lb_kernels_current(), pool, W, X, Y, n_tokens);
}
