/*
 * GPTQ solver: AutoGPTQ GPTQ.fasterquant (auto_gptq/quantization/gptq.py
 * @9f7d370), Frantar et al. 2022 Algorithm 1 with lazy batch updates.
 * Float32 with the reference's operation order; the contract is in gptq.h.
 *
 * Work layout (all row-major):
 *   Wp   [out, in]   W with dead columns zeroed, columns permuted (desc_act);
 *                    receives only the cross-block updates (as AutoGPTQ's W)
 *   U    [in, in]    damped permuted H -> Cholesky -> inverse -> U (Hinv),
 *                    in the lb_gptq_factor shared by modules with one H
 *                    (in H's own buffer with lb_gptq_factor_make_inplace)
 *   W1   [out, bs]   the current block, receiving the in-block updates
 *   Err1 [out, bs]   (w - q) / U[c,c] of the current block
 *   T    [out, in-bs] Err1 @ U[i1:i2, i2:] before it is subtracted from Wp
 *   Loss [out, in]   per-weight losses in permuted column order: in Wp
 *                    itself (column c of a row is read no more once it is
 *                    quantized: its block was copied to W1, and group
 *                    parameters read the columns from c on)
 */
#include "lowbit/gptq.h"
#include "lowbit/fp8.h"
#include "core/internal.h"
#include "quant/gptq_internal.h"

#include <cblas.h>
#include <float.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* torch's float32 cascade sum (for mean(diag H) and sum(Losses))            */
/* ------------------------------------------------------------------------ */

#define TS_LANES 8 /* Vectorized<float>::size() in torch's AVX2 build */
#define TS_ILP 4
#define TS_LEVELS 4

static int ts_ceil_log2(int64_t x) {
    int r = 0;
    while (r < 62 && ((int64_t)1 << r) < x) r++;
    return x <= 2 ? 1 : r;
}

/* multi_row_sum<Vectorized<float>, 4>: `size` rows, row i = 4 vectors of
 * 8 lanes starting at in + i * 32. */
static void ts_multi_row_sum(const float *in, int64_t size,
                             float out[TS_ILP][TS_LANES]) {
    float acc[TS_LEVELS][TS_ILP][TS_LANES];
    memset(acc, 0, sizeof acc);
    int64_t lp = ts_ceil_log2(size) / TS_LEVELS;
    if (lp < 4) lp = 4;
    const int64_t step = (int64_t)1 << lp, mask = step - 1;
    const int64_t row = TS_ILP * TS_LANES;
    int64_t i = 0;
    while (i + step <= size) {
        for (int64_t j = 0; j < step; j++, i++)
            for (int k = 0; k < TS_ILP; k++)
                for (int l = 0; l < TS_LANES; l++)
                    acc[0][k][l] += in[i * row + k * TS_LANES + l];
        for (int j = 1; j < TS_LEVELS; j++) {
            for (int k = 0; k < TS_ILP; k++)
                for (int l = 0; l < TS_LANES; l++) {
                    acc[j][k][l] += acc[j - 1][k][l];
                    acc[j - 1][k][l] = 0.0f;
                }
            if ((i & (mask << (j * lp))) != 0) break;
        }
    }
    for (; i < size; i++)
        for (int k = 0; k < TS_ILP; k++)
            for (int l = 0; l < TS_LANES; l++)
                acc[0][k][l] += in[i * row + k * TS_LANES + l];
    for (int j = 1; j < TS_LEVELS; j++)
        for (int k = 0; k < TS_ILP; k++)
            for (int l = 0; l < TS_LANES; l++) acc[0][k][l] += acc[j][k][l];
    memcpy(out, acc[0], sizeof(float) * TS_ILP * TS_LANES);
}

float lb_gptq_torch_sum_f32(const float *x, int64_t n) {
    const int64_t n_vec = n / TS_LANES, n_ilp = n_vec / TS_ILP;
    float part[TS_ILP][TS_LANES];
    ts_multi_row_sum(x, n_ilp, part);
    for (int64_t i = n_ilp * TS_ILP; i < n_vec; i++)
        for (int l = 0; l < TS_LANES; l++) part[0][l] += x[i * TS_LANES + l];
    for (int k = 1; k < TS_ILP; k++)
        for (int l = 0; l < TS_LANES; l++) part[0][l] += part[k][l];
    float acc = 0.0f;
    if (n_vec == 0) { /* size0 < vector size: torch's scalar loop */
        for (int64_t i = 0; i < n; i++) acc += x[i];
        return acc;
    }
    for (int64_t i = n_vec * TS_LANES; i < n; i++) acc += x[i];
    for (int l = 0; l < TS_LANES; l++) acc += part[0][l];
    return acc;
}

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

void lb_gptq_options_default(lb_gptq_options *o) {
    memset(o, 0, sizeof *o);
    o->bits = 4;
    o->group_size = 128;
    o->sym = true;
    o->mse_norm = 2.4f;
    o->mse_grid = 100;
    o->mse_maxshrink = 0.8f;
    o->damp_percent = 0.01;
    o->damp_auto_increment = 0.0025;
    o->damp_max = 1.0;
    o->blocksize = 128;
}

static lb_status check_options(const lb_gptq_options *o) {
    static const char *who = "lb_gptq_quantize";
    LB_TRY(lb_gptq_check_bits(o->bits, who));
    LB_TRY(lb_gptq_check_group_size(o->group_size, who));
    if (o->blocksize < 1)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: blocksize = %d", who,
                            o->blocksize);
    if (!(o->damp_percent > 0.0) || !(o->damp_percent < o->damp_max) ||
        !(o->damp_auto_increment >= 0.0) || !isfinite(o->damp_max))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: damping needs 0 < damp_percent (%g) < "
                            "damp_max (%g) and damp_auto_increment (%g) >= 0",
                            who, o->damp_percent, o->damp_max,
                            o->damp_auto_increment);
    if (o->fp8 && ((o->fp8->fmt != 0 && o->fp8->fmt != 1) ||
                   o->fp8->block_n < 1 || o->fp8->block_k < 1 ||
                   !o->fp8->scales))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: bad FP8 grid (fmt %d, block %lld x %lld%s)",
                            who, o->fp8->fmt, (long long)o->fp8->block_n,
                            (long long)o->fp8->block_k,
                            o->fp8->scales ? "" : ", no scales");
    if (o->mse && (o->mse_grid < 1 || !(o->mse_maxshrink >= 0.0f) ||
                   !(o->mse_norm > 0.0f)))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: bad MSE settings (grid %d, maxshrink %g, "
                            "norm %g)",
                            who, o->mse_grid, (double)o->mse_maxshrink,
                            (double)o->mse_norm);
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* Permutation and inverse Hessian                                           */
/* ------------------------------------------------------------------------ */

typedef struct diag_key {
    float d;
    int32_t idx;
} diag_key;

/* Descending by value; ties by ascending column (a stable descending sort,
 * which is what torch's CPU sort gives; no NaN here). */
static int cmp_diag_desc(const void *a, const void *b) {
    const diag_key *x = a, *y = b;
    if (x->d > y->d) return -1;
    if (x->d < y->d) return 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Strict triangles of the row-major [n, n] A copied onto each other in
 * place, in cache tiles: from_lower: A[j*n + i] = A[i*n + j] for j < i;
 * otherwise the other way round. */
static void mirror(float *A, int64_t n, bool from_lower) {
    enum { TILE = 32 };
    for (int64_t i0 = 0; i0 < n; i0 += TILE)
        for (int64_t j0 = 0; j0 <= i0; j0 += TILE) {
            const int64_t i1 = LB_MIN(i0 + TILE, n), j1 = LB_MIN(j0 + TILE, n);
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1 && j < i; j++) {
                    if (from_lower)
                        A[j * n + i] = A[i * n + j];
                    else
                        A[i * n + j] = A[j * n + i];
                }
        }
}

void lb_gptq_mirror_lower(float *A, int64_t n) { mirror(A, n, true); }
void lb_gptq_mirror_upper(float *A, int64_t n) { mirror(A, n, false); }

/* The strict triangles of the row-major [n, n] A exchanged in place
 * (A := A^T but for the diagonal), in cache tiles. */
static void swap_triangles(float *A, int64_t n) {
    enum { TILE = 32 };
    for (int64_t i0 = 0; i0 < n; i0 += TILE)
        for (int64_t j0 = 0; j0 <= i0; j0 += TILE) {
            const int64_t i1 = LB_MIN(i0 + TILE, n), j1 = LB_MIN(j0 + TILE, n);
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1 && j < i; j++) {
                    const float t = A[j * n + i];
                    A[j * n + i] = A[i * n + j];
                    A[i * n + j] = t;
                }
        }
}

/* B[i][j] = B[perm[i]][perm[j]] in place (the row-major [n, n] B's rows
 * and columns permuted, perm a permutation of 0..n-1): the rows by their
 * cycles, then each row's columns, with two rows of scratch. */
static lb_status permute_in_place(float *B, const int32_t *perm, int64_t n) {
    float *row = lb_alloc((size_t)n * sizeof(float));
    uint8_t *done = lb_calloc((size_t)n, 1);
    if (!row || !done) {
        lb_free(row);
        lb_free(done);
        return LB_ERR_NOMEM;
    }
    const size_t rb = (size_t)n * sizeof(float);
    for (int64_t s = 0; s < n; s++) {
        if (done[s] || perm[s] == s) continue;
        memcpy(row, B + s * n, rb); /* row s, needed by the row ending the cycle */
        int64_t i = s;
        for (;;) {
            done[i] = 1;
            const int64_t from = perm[i];
            if (from == s) {
                memcpy(B + i * n, row, rb);
                break;
            }
            memcpy(B + i * n, B + from * n, rb);
            i = from;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        float *r = B + i * n;
        memcpy(row, r, rb);
        for (int64_t j = 0; j < n; j++) r[j] = row[perm[j]];
    }
    lb_free(row);
    lb_free(done);
    return LB_OK;
}

int lb_gptq_test_fail_step, lb_gptq_test_fail_count;

/* A test's forced failure of step `step` (gptq_internal.h). */
static bool test_fails(int step) {
    if (lb_gptq_test_fail_step != step || lb_gptq_test_fail_count <= 0)
        return false;
    lb_gptq_test_fail_count--;
    return true;
}

/* The damped inverse factor in B, in place. On entry B (row-major) holds
 * Hp + damp I in its upper triangle (column-major: the lower one, where
 * torch's LAPACK calls read) and Hp's strict lower triangle in its strict
 * lower one (LAPACK's 'L' routines do not reference it: it is the copy a
 * damping retry starts from), Hp = the permuted H with dead diagonals 1.
 * Steps: Cholesky, inverse, upper Cholesky of the inverse (torch's
 * linalg.cholesky -> cholesky_inverse -> linalg.cholesky(upper=True));
 * the symmetrised inverse goes where spotrf('U') reads it (column-major
 * upper = row-major lower) by exchanging the strict triangles, so the
 * copy of Hp moves to the strict upper triangle, which spotrf('U') does
 * not reference either. On success B is the row-major upper factor U
 * (zero below the diagonal) and NULL is returned; on failure a
 * description of the failing step, and B holds Hp in both strict
 * triangles again (its diagonal is the caller's to set). */
static const char *invert_factor(float *B, int64_t n) {
    const char *why = NULL;
    bool copy_upper = false; /* Hp's copy: in the strict upper triangle */
    lapack_int info = LAPACKE_spotrf(LAPACK_COL_MAJOR, 'L', (lapack_int)n, B,
                                     (lapack_int)n);
    if (info != 0 || test_fails(1)) {
        why = "Cholesky of the damped H failed (spotrf)";
        goto fail;
    }
    info = LAPACKE_spotri(LAPACK_COL_MAJOR, 'L', (lapack_int)n, B,
                          (lapack_int)n);
    if (info != 0 || test_fails(2)) {
        why = "inverting the Cholesky factor failed (spotri)";
        goto fail;
    }
    /* symmetrise: the column-major upper := lower, as torch's tril +
     * tril(-1)^H; the column-major lower gets Hp's copy, which
     * spotrf('U') does not read */
    swap_triangles(B, n);
    copy_upper = true;
    info = LAPACKE_spotrf(LAPACK_COL_MAJOR, 'U', (lapack_int)n, B,
                          (lapack_int)n);
    if (info != 0 || test_fails(3)) {
        why = "Cholesky of the inverse failed (spotrf upper)";
        goto fail;
    }
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(B[i * n + i]) || !(B[i * n + i] > 0.0f) ||
            (i == n - 1 && test_fails(4))) {
            why = "the inverse Hessian factor has a non-positive diagonal";
            goto fail;
        }
    /* U(i, j), i <= j, is at B[i + j*n], the row-major lower triangle:
     * mirror it onto the row-major upper one, zero the strictly lower. */
    mirror(B, n, true);
    for (int64_t i = 0; i < n; i++)
        memset(B + i * n, 0, (size_t)i * sizeof(float));
    return NULL;
fail:
    mirror(B, n, !copy_upper); /* Hp back in the triangle LAPACK works on */
    return why;
}

/* ------------------------------------------------------------------------ */
/* The blocked column loop, split by output rows                             */
/* ------------------------------------------------------------------------ */

typedef struct solve_ctx {
    const lb_gptq_options *opt;
    lb_quant_grid grid;
    int64_t out, in, ng, gs; /* gs: group size, -1 = whole row */
    int32_t maxq;
    float *Wp;               /* [out, in] */
    const float *U;          /* [in, in] row-major upper */
    const float *P;          /* GPTAQ: [in, in] strictly upper, or NULL   */
    float *W1, *Err1;        /* [out, bs] */
    float *W0;               /* GPTAQ: [out, bs] each column just before
                                it was quantized                          */
    const float *T;          /* [out, in - i2_prev] pending update or NULL */
    int64_t T_col0;          /* first column of T                          */
    float *Loss;             /* [out, in] permuted order (= Wp) */
    float *cur_scale;        /* [out] current group params */
    int32_t *cur_zero;
    const int32_t *perm;
    lb_gptq_result *res;
    int64_t i1, i2;
    /* per-worker failure, [n_workers] (thread-local error messages cannot
     * cross threads, so workers record and the caller reports) */
    int n_workers;
    int *fail_kind; /* 0 ok, 1 grid failed, 2 non-finite weight */
    int64_t *fail_row, *fail_col;
    const lb_gptq_fp8_grid *fp8; /* FP8 grid, or NULL                      */
    const float *fp8_tab;        /* its 256 values (lb_fp8_table)          */
    float fp8_max;               /* its largest value (lb_fp8_max)         */
    int64_t fp8_nbk;             /* scale groups per row of groups         */
} solve_ctx;

/* The FP8 grid (lb_gptq_fp8_grid): the code of w in row o, original
 * column oc, and its value *q = fp8_value(code) * s. */
static int32_t fp8_code(const solve_ctx *s, int64_t o, int64_t oc, float w,
                        float *q) {
    const lb_gptq_fp8_grid *g = s->fp8;
    const float sc = g->scales[(o / g->block_n) * s->fp8_nbk + oc / g->block_k];
    float v = w / sc;
    v = fminf(fmaxf(v, -s->fp8_max), s->fp8_max);
    const uint8_t code = lb_f32_to_fp8(v, (lb_fp8_format)g->fmt);
    *q = s->fp8_tab[code] * sc;
    return code;
}

/* w[j] -= e * u[j], j < n: the in-block update W1[:, i+1:] -= err U[i, i+1:]
 * of one row. Each element is one float32 product then one subtraction (no
 * FMA: the default build has no -mfma, and C11 mode keeps -ffp-contract=off
 * in GCC), so the generic 4-lane vectors give the scalar loop's bits. */
typedef float lb_v4f __attribute__((vector_size(16)));
static void row_update(float *restrict w, const float *restrict u, float e,
                       int64_t n) {
    const lb_v4f ev = {e, e, e, e};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        lb_v4f a, b, c, d;
        memcpy(&a, w + j, 16);
        memcpy(&b, u + j, 16);
        memcpy(&c, w + j + 4, 16);
        memcpy(&d, u + j + 4, 16);
        a -= ev * b;
        c -= ev * d;
        memcpy(w + j, &a, 16);
        memcpy(w + j + 4, &c, 16);
    }
    for (; j < n; j++) w[j] -= e * u[j];
}

/* The integer grid's (scale, zero) of row o at permuted column c (original
 * column oc): grouped non-static params are found at c % gs == 0 from the
 * full W row wrow (no in-block updates: AutoGPTQ), static ones and those
 * of group_size -1 were found before. false when the grid fails. */
static bool grid_params(solve_ctx *s, int64_t o, int64_t c, int64_t oc,
                        const float *wrow, float *scale, int32_t *zero) {
    const int64_t gs = s->gs, ng = s->ng;
    lb_gptq_result *res = s->res;
    if (gs > 0 && !s->opt->static_groups) {
        if (c % gs == 0) {
            if (lb_gptq_grid_row(&s->grid, wrow + c, LB_MIN(gs, s->in - c),
                                 &s->cur_scale[o], &s->cur_zero[o]) != LB_OK)
                return false;
            res->scales[o * ng + c / gs] = s->cur_scale[o];
            res->zeros[o * ng + c / gs] = s->cur_zero[o];
        }
        *scale = s->cur_scale[o];
        *zero = s->cur_zero[o];
    } else if (gs > 0) { /* static groups, original numbering */
        *scale = res->scales[o * ng + oc / gs];
        *zero = res->zeros[o * ng + oc / gs];
    } else {
        *scale = res->scales[o];
        *zero = res->zeros[o];
    }
    return true;
}

static void solve_rows(void *p, int ith, int nth) {
    solve_ctx *s = p;
    size_t r0, r1;
    lb_split_range((size_t)s->out, ith, nth, &r0, &r1);
    const int64_t in = s->in, i1 = s->i1, i2 = s->i2, count = i2 - i1;
    const int64_t bs = s->opt->blocksize;
    lb_gptq_result *res = s->res;
    const int slot = ith;
    for (size_t ro = r0; ro < r1; ro++) {
        const int64_t o = (int64_t)ro;
        float *wrow = s->Wp + o * in;
        /* pending cross-block update W[:, i2prev:] -= T (torch: W -= T) */
        if (s->T) {
            const int64_t w = in - s->T_col0;
            const float *t = s->T + o * w;
            for (int64_t c = 0; c < w; c++) wrow[s->T_col0 + c] -= t[c];
        }
        float *w1 = s->W1 + o * bs, *e1 = s->Err1 + o * bs;
        memcpy(w1, wrow + i1, (size_t)count * sizeof(float));
        for (int64_t i = 0; i < count; i++) {
            const int64_t c = i1 + i;
            const int64_t oc = s->perm[c]; /* original column */
            float scale = 0.0f;
            int32_t zero = 0;
            if (!s->fp8 && !grid_params(s, o, c, oc, wrow, &scale, &zero)) {
                s->fail_kind[slot] = 1;
                s->fail_row[slot] = o;
                s->fail_col[slot] = c;
                return;
            }
            const float w = w1[i];
            if (!(fabsf(w) <= FLT_MAX)) {
                s->fail_kind[slot] = 2;
                s->fail_row[slot] = o;
                s->fail_col[slot] = c;
                return;
            }
            float q;
            int32_t code;
            if (s->fp8) {
                code = fp8_code(s, o, oc, w, &q);
            } else {
                code = lb_quant_grid_code(w, scale, zero, s->maxq);
                q = lb_quant_grid_dequant(code, scale, zero);
            }
            res->codes[o * in + oc] = (uint8_t)code;
            res->W_deq[o * in + oc] = q;
            const float *urow = s->U + c * in + i1; /* U[c, i1:i2] */
            const float d = urow[i];
            const float diff = w - q;
            s->Loss[o * in + c] = (diff * diff) / (d * d) / 2.0f;
            const float err = diff / d;
            e1[i] = err;
            if (s->P) {
                /* GPTAQ: W1[:, c+1:i2] -= err U[c, .] - w P[c, .] */
                const float *prow = s->P + c * in + i1;
                s->W0[o * bs + i] = w;
                for (int64_t j = i + 1; j < count; j++)
                    w1[j] -= err * urow[j] - w * prow[j];
            } else {
                row_update(w1 + i + 1, urow + i + 1, err, count - i - 1);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* The inverse-Hessian factor (steps 2, 4, 5)                                */
/* ------------------------------------------------------------------------ */

struct lb_gptq_factor {
    int64_t in;
    /* the options it was made for */
    bool desc_act;
    double damp_percent, damp_auto_increment, damp_max;
    uint8_t *dead;  /* [in] H[c,c] == 0                                   */
    int64_t n_dead;
    int32_t *perm;  /* [in] column quantized k-th (identity without desc_act) */
    float *U;       /* [in, in] row-major upper factor of the damped Hinv */
    double damp_percent_used;
    float damp_added;
    int n_damp_retries;
};

void lb_gptq_factor_free(lb_gptq_factor *f) {
    if (!f) return;
    lb_free(f->dead);
    lb_free(f->perm);
    lb_free(f->U);
    free(f);
}

/* The factor of H in H's own buffer B ([in, in], lb_alloc'd, finite,
 * options checked), which the factor owns from here (freed on failure). */
static lb_status factor_in_place(float *B, int64_t in,
                                 const lb_gptq_options *opt,
                                 lb_gptq_factor **out) {
    static const char *who = "lb_gptq_factor_make";
    lb_gptq_factor *f = calloc(1, sizeof *f);
    float *dg = lb_alloc((size_t)in * sizeof(float));
    float *dp = lb_alloc((size_t)in * sizeof(float)); /* diag, permuted */
    diag_key *keys = NULL;
    lb_status st = LB_OK;
    if (f) {
        f->U = B;
        f->dead = lb_calloc((size_t)in, 1);
        f->perm = lb_alloc((size_t)in * sizeof(int32_t));
    } else {
        lb_free(B);
    }
    if (!f || !dg || !dp || !f->dead || !f->perm) {
        st = lb_set_error(LB_ERR_NOMEM, "%s: cannot allocate [%lld]", who,
                          (long long)in);
        goto done;
    }
    f->in = in;
    f->desc_act = opt->desc_act;
    f->damp_percent = opt->damp_percent;
    f->damp_auto_increment = opt->damp_auto_increment;
    f->damp_max = opt->damp_max;

    /* 2. dead columns */
    for (int64_t c = 0; c < in; c++) {
        f->dead[c] = B[c * in + c] == 0.0f;
        f->n_dead += f->dead[c];
        dg[c] = f->dead[c] ? 1.0f : B[c * in + c];
    }

    /* 4. act-order permutation */
    for (int64_t c = 0; c < in; c++) f->perm[c] = (int32_t)c;
    if (opt->desc_act) {
        keys = malloc((size_t)in * sizeof *keys);
        if (!keys) {
            st = lb_set_error(LB_ERR_NOMEM, "%s: cannot allocate", who);
            goto done;
        }
        for (int64_t c = 0; c < in; c++) {
            keys[c].d = dg[c];
            keys[c].idx = (int32_t)c;
        }
        qsort(keys, (size_t)in, sizeof *keys, cmp_diag_desc);
        for (int64_t c = 0; c < in; c++) f->perm[c] = keys[c].idx;
        /* Hp = H[perm][:, perm], in place */
        if (permute_in_place(B, f->perm, in) != LB_OK) {
            st = lb_set_error(LB_ERR_NOMEM, "%s: cannot allocate", who);
            goto done;
        }
    }
    /* LAPACK reads Hp's row-major lower triangle (torch hands it the
     * column-major lower of Hp's row-major storage, i.e. Hp[i][j], j <=
     * i); the upper one is made its copy (for a symmetric H, as the
     * accumulator's, this changes nothing) */
    mirror(B, in, true);

    /* 5. damping (after the permutation), inverse Hessian factor; a
     * retry starts again from Hp, which a failed attempt leaves in B */
    for (int64_t c = 0; c < in; c++) dp[c] = dg[f->perm[c]];
    const float mean = lb_gptq_torch_sum_f32(dp, in) / (float)in;
    double damp_percent = opt->damp_percent;
    for (;;) {
        const float damp = (float)damp_percent * mean;
        for (int64_t i = 0; i < in; i++) B[i * in + i] = dp[i] + damp;
        const char *why = invert_factor(B, in);
        if (!why) {
            f->damp_percent_used = damp_percent;
            f->damp_added = damp;
            break;
        }
        double next = damp_percent + opt->damp_auto_increment;
        if (opt->damp_auto_increment <= 0.0 || !(next < opt->damp_max)) {
            st = lb_set_error(LB_ERR_RANGE,
                              "%s: %s with damp_percent %g (damp %g, mean "
                              "diag H %g); auto-increment %g, bound %g: H is "
                              "not positive definite enough (more "
                              "calibration data or a larger damp_percent)",
                              who, why, damp_percent, (double)damp,
                              (double)mean, opt->damp_auto_increment,
                              opt->damp_max);
            goto done;
        }
        lb_log(LB_LOG_WARN, "gptq: %s at damp_percent %g; retrying with %g",
               why, damp_percent, next);
        damp_percent = next;
        f->n_damp_retries++;
    }

done:
    lb_free(dg);
    lb_free(dp);
    free(keys);
    if (st != LB_OK) {
        lb_gptq_factor_free(f);
        return st;
    }
    *out = f;
    return LB_OK;
}

/* Arguments of both entry points; *n_bytes = in * in * sizeof(float). */
static lb_status factor_args(const float *H, int64_t in,
                             const lb_gptq_options *opt, lb_gptq_factor **out,
                             size_t *n_bytes) {
    static const char *who = "lb_gptq_factor_make";
    if (!out) return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL output", who);
    *out = NULL;
    if (!H || !opt)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL argument", who);
    if (in < 1 || in > INT32_MAX)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: bad in_features %lld",
                            who, (long long)in);
    LB_TRY(check_options(opt));
    if (!lb_mul_ok((size_t)in, (size_t)in, n_bytes) ||
        !lb_mul_ok(*n_bytes, sizeof(float), n_bytes))
        return lb_set_error(LB_ERR_OVERFLOW, "%s: sizes overflow", who);
    return lb_gptq_check_finite(H, in, in, in, who, "H");
}

lb_status lb_gptq_factor_make(const float *H, int64_t in,
                              const lb_gptq_options *opt,
                              lb_gptq_factor **out) {
    size_t n_ii;
    LB_TRY(factor_args(H, in, opt, out, &n_ii));
    float *B = lb_alloc(n_ii);
    if (!B)
        return lb_set_error(LB_ERR_NOMEM, "lb_gptq_factor_make: cannot "
                            "allocate [%lld, %lld]", (long long)in,
                            (long long)in);
    memcpy(B, H, n_ii);
    return factor_in_place(B, in, opt, out);
}

lb_status lb_gptq_factor_make_inplace(float **H, int64_t in,
                                      const lb_gptq_options *opt,
                                      lb_gptq_factor **out) {
    if (!H) {
        if (out) *out = NULL;
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "lb_gptq_factor_make_inplace: NULL H");
    }
    float *B = *H;
    *H = NULL;
    size_t n_ii;
    lb_status st = factor_args(B, in, opt, out, &n_ii);
    if (st != LB_OK) {
        lb_free(B);
        return st;
    }
    return factor_in_place(B, in, opt, out);
}

/* ------------------------------------------------------------------------ */
/* The solve (steps 1, 3, 6, 7)                                              */
/* ------------------------------------------------------------------------ */

lb_status lb_gptq_quantize(const float *W, int64_t out, int64_t in,
                           const float *H, const lb_gptq_options *opt,
                           lb_gptq_result *res) {
    if (!res)
        return lb_set_error(LB_ERR_INVALID_ARG, "lb_gptq_quantize: NULL result");
    memset(res, 0, sizeof *res);
    if (!W || !H || !opt)
        return lb_set_error(LB_ERR_INVALID_ARG, "lb_gptq_quantize: NULL argument");
    if (out < 1 || in < 1 || in > INT32_MAX || out > INT32_MAX)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "lb_gptq_quantize: bad shape [%lld, %lld]",
                            (long long)out, (long long)in);
    LB_TRY(check_options(opt));
    LB_TRY(lb_gptq_check_finite(W, out, in, in, "lb_gptq_quantize", "W"));
    lb_gptq_factor *f = NULL;
    lb_status st = lb_gptq_factor_make(H, in, opt, &f);
    if (st == LB_OK) st = lb_gptq_quantize_factored(W, out, in, f, opt, res);
    lb_gptq_factor_free(f);
    return st;
}

static lb_status quantize_factored(const float *W, int64_t out, int64_t in,
                                   const lb_gptq_factor *f,
                                   const lb_gptq_options *opt,
                                   const float *P, float *Ww,
                                   lb_gptq_result *res);

lb_status lb_gptq_quantize_factored(const float *W, int64_t out, int64_t in,
                                    const lb_gptq_factor *f,
                                    const lb_gptq_options *opt,
                                    lb_gptq_result *res) {
    return quantize_factored(W, out, in, f, opt, NULL, NULL, res);
}

lb_status lb_gptq_quantize_factored_inplace(float *W, int64_t out, int64_t in,
                                            const lb_gptq_factor *f,
                                            const lb_gptq_options *opt,
                                            lb_gptq_result *res) {
    return quantize_factored(W, out, in, f, opt, NULL, W, res);
}

lb_status lb_gptaq_quantize_factored(const float *W, int64_t out, int64_t in,
                                     const lb_gptq_factor *f,
                                     const lb_gptq_options *opt,
                                     const float *P, lb_gptq_result *res) {
    if (!P) {
        if (res) memset(res, 0, sizeof *res);
        return lb_set_error(LB_ERR_INVALID_ARG, "lb_gptaq_quantize: NULL P");
    }
    return quantize_factored(W, out, in, f, opt, P, NULL, res);
}

lb_status lb_gptaq_quantize_factored_inplace(float *W, int64_t out,
                                             int64_t in,
                                             const lb_gptq_factor *f,
                                             const lb_gptq_options *opt,
                                             const float *P,
                                             lb_gptq_result *res) {
    if (!P) {
        if (res) memset(res, 0, sizeof *res);
        return lb_set_error(LB_ERR_INVALID_ARG, "lb_gptaq_quantize: NULL P");
    }
    return quantize_factored(W, out, in, f, opt, P, W, res);
}

/* Ww: NULL, or W itself (the _inplace entry points): the working copy
 * is then W's own buffer, which step 1 reads before anything is written
 * to it. */
static lb_status quantize_factored(const float *W, int64_t out, int64_t in,
                                   const lb_gptq_factor *f,
                                   const lb_gptq_options *opt,
                                   const float *P, float *Ww,
                                   lb_gptq_result *res) {
    static const char *who = "lb_gptq_quantize";
    if (!res) return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL result", who);
    memset(res, 0, sizeof *res);
    if (!W || !f || !opt)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL argument", who);
    if (out < 1 || in < 1 || in > INT32_MAX || out > INT32_MAX)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: bad shape [%lld, %lld]",
                            who, (long long)out, (long long)in);
    LB_TRY(check_options(opt));
    if (f->in != in || f->desc_act != opt->desc_act ||
        f->damp_percent != opt->damp_percent ||
        f->damp_auto_increment != opt->damp_auto_increment ||
        f->damp_max != opt->damp_max)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: the factor was made for other in_features "
                            "(%lld vs %lld), desc_act or damping options",
                            who, (long long)f->in, (long long)in);
    LB_TRY(lb_gptq_check_finite(W, out, in, in, who, "W"));

    const int64_t bs = LB_MIN((int64_t)opt->blocksize, in);
    const int64_t gs = opt->group_size > 0 ? opt->group_size : -1;
    const int64_t ng = lb_gptq_n_groups(in, opt->group_size);
    const bool stat = opt->static_groups && gs > 0;
    const int32_t *perm = f->perm;
    const uint8_t *dead = f->dead;
    size_t n_ow, n_ii, n_ob;
    if (!lb_mul_ok((size_t)out, (size_t)in, &n_ow) ||
        !lb_mul_ok((size_t)in, (size_t)in, &n_ii) ||
        !lb_mul_ok((size_t)out, (size_t)bs, &n_ob) ||
        !lb_mul_ok(n_ii, sizeof(float), &n_ii) ||
        !lb_mul_ok(n_ow, sizeof(float), &n_ow) ||
        !lb_mul_ok(n_ob, sizeof(float), &n_ob))
        return lb_set_error(LB_ERR_OVERFLOW, "%s: sizes overflow", who);

    lb_status st = lb_gptq_result_alloc(res, out, in, ng, opt->desc_act,
                                        opt->return_hinv);
    if (st != LB_OK) return st;
    res->bits = opt->bits;
    res->group_size = opt->group_size;
    res->n_dead = f->n_dead;
    res->damp_percent_used = f->damp_percent_used;
    res->damp_added = f->damp_added;
    res->n_damp_retries = f->n_damp_retries;
    if (opt->desc_act) memcpy(res->perm, perm, (size_t)in * sizeof(int32_t));
    if (res->hinv_upper) memcpy(res->hinv_upper, f->U, n_ii);

    solve_ctx s;
    memset(&s, 0, sizeof s);
    float *Wp = Ww ? Ww : lb_alloc(n_ow), *Loss = Wp;
    float *W1 = lb_alloc(n_ob), *Err1 = lb_alloc(n_ob);
    float *W0 = P ? lb_alloc(n_ob) : NULL;
    float *T = lb_alloc(n_ow), *cur_scale = lb_calloc((size_t)out, 4);
    int32_t *cur_zero = lb_calloc((size_t)out, 4);
    s.n_workers = opt->pool ? lb_pool_size(opt->pool) : 1;
    s.fail_kind = lb_calloc((size_t)s.n_workers, sizeof(int));
    s.fail_row = lb_calloc((size_t)s.n_workers, sizeof(int64_t));
    s.fail_col = lb_calloc((size_t)s.n_workers, sizeof(int64_t));
    if (!Wp || !W1 || !Err1 || !T || !cur_scale || !cur_zero ||
        (P && !W0) ||
        !s.fail_kind || !s.fail_row || !s.fail_col) {
        st = lb_set_error(LB_ERR_NOMEM,
                          "%s: cannot allocate work space for [%lld, %lld]",
                          who, (long long)out, (long long)in);
        goto done;
    }
    if (opt->fp8) {
        const lb_gptq_fp8_grid *g = opt->fp8;
        s.fp8 = g;
        s.fp8_tab = lb_fp8_table((lb_fp8_format)g->fmt);
        s.fp8_max = lb_fp8_max((lb_fp8_format)g->fmt);
        s.fp8_nbk = (in + g->block_k - 1) / g->block_k;
        const int64_t n_sc = (out + g->block_n - 1) / g->block_n * s.fp8_nbk;
        for (int64_t k = 0; k < n_sc; k++)
            if (!(g->scales[k] > 0.0f && g->scales[k] <= FLT_MAX)) {
                st = lb_set_error(LB_ERR_INVALID_ARG,
                                  "%s: FP8 scale %lld = %g (finite and > 0 "
                                  "expected)", who, (long long)k,
                                  (double)g->scales[k]);
                goto done;
            }
    }
    lb_quant_grid_default(&s.grid, opt->bits, opt->sym);
    s.grid.mse = opt->mse;
    s.grid.mse_norm = opt->mse_norm;
    s.grid.mse_grid = opt->mse_grid;
    s.grid.mse_maxshrink = opt->mse_maxshrink;

    /* 1. group_size -1: params of the whole original row (before the dead
     *    columns are zeroed: AutoGPTQ calls find_params(W) first). */
    if (gs < 0 && !opt->fp8)
        for (int64_t o = 0; o < out; o++) {
            st = lb_gptq_grid_row(&s.grid, W + o * in, in, &res->scales[o],
                                  &res->zeros[o]);
            if (st != LB_OK) {
                lb_error_context(st, "%s: row %lld", who, (long long)o);
                goto done;
            }
        }

    /* 3. static groups from the original (dead-zeroed) columns; Wp holds W
     *    unpermuted for the moment. */
    if (Wp != W) memcpy(Wp, W, n_ow);
    for (int64_t o = 0; o < out; o++)
        for (int64_t c = 0; c < in; c++)
            if (dead[c]) Wp[o * in + c] = 0.0f;
    if (stat && !opt->fp8)
        for (int64_t o = 0; o < out; o++)
            for (int64_t k = 0; k < ng; k++) {
                int64_t c0 = k * gs;
                st = lb_gptq_grid_row(&s.grid, Wp + o * in + c0,
                                      LB_MIN(gs, in - c0),
                                      &res->scales[o * ng + k],
                                      &res->zeros[o * ng + k]);
                if (st != LB_OK) {
                    lb_error_context(st, "%s: row %lld group %lld", who,
                                     (long long)o, (long long)k);
                    goto done;
                }
            }

    /* 4. act-order: Wp := W[:, perm] (row by row through T as scratch) */
    if (opt->desc_act)
        for (int64_t o = 0; o < out; o++) {
            float *row = Wp + o * in;
            memcpy(T, row, (size_t)in * sizeof(float));
            for (int64_t c = 0; c < in; c++) row[c] = T[perm[c]];
        }

    /* 6. blocked column loop */
    s.out = out;
    s.in = in;
    s.ng = ng;
    s.gs = gs;
    s.maxq = (1 << opt->bits) - 1;
    s.Wp = Wp;
    s.U = f->U;
    s.W1 = W1;
    s.Err1 = Err1;
    s.P = P;
    s.W0 = W0;
    s.Loss = Loss;
    s.cur_scale = cur_scale;
    s.cur_zero = cur_zero;
    s.perm = perm;
    s.res = res;
    lb_gptq_options bopt = *opt; /* blocksize clamped to in */
    bopt.blocksize = (int)bs;
    s.opt = &bopt;
    for (int64_t i1 = 0; i1 < in; i1 += bs) {
        const int64_t i2 = LB_MIN(i1 + bs, in);
        s.i1 = i1;
        s.i2 = i2;
        lb_pool_run(opt->pool, solve_rows, &s);
        for (int k = 0; k < s.n_workers; k++)
            if (s.fail_kind[k]) {
                st = lb_set_error(
                    LB_ERR_INVALID_ARG,
                    s.fail_kind[k] == 1
                        ? "%s: grid parameters failed (scale underflow or "
                          "overflow) at row %lld, permuted column %lld"
                        : "%s: the compensated weight became non-finite at "
                          "row %lld, permuted column %lld (H badly "
                          "conditioned?)",
                    who, (long long)s.fail_row[k], (long long)s.fail_col[k]);
                goto done;
            }
        s.T = NULL;
        if (i2 < in) {
            /* T = Err1 @ U[i1:i2, i2:]; the next block's workers subtract
             * it from W[:, i2:] row by row before copying their block. */
            const int64_t w = in - i2;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)out,
                        (int)w, (int)(i2 - i1), 1.0f, Err1, (int)bs,
                        f->U + i1 * in + i2, (int)in, 0.0f, T, (int)w);
            /* GPTAQ: T -= W0 @ P[i1:i2, i2:] (the block's columns as
             * they were just before quantization: the unrolled rule) */
            if (P)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                            (int)out, (int)w, (int)(i2 - i1), -1.0f, W0,
                            (int)bs, P + i1 * in + i2, (int)in, 1.0f, T,
                            (int)w);
            s.T = T;
            s.T_col0 = i2;
        }
        if (!lb_progress_report(&opt->progress, "gptq", (uint64_t)i2,
                                (uint64_t)in)) {
            st = lb_set_error(LB_ERR_CANCELLED, "%s: cancelled", who);
            goto done;
        }
    }

    /* 7. g_idx, loss */
    {
        const int64_t g = gs > 0 ? gs : in;
        for (int64_t c = 0; c < in; c++) {
            if (opt->desc_act && !stat)
                res->g_idx[perm[c]] = (int32_t)(c / g);
            else
                res->g_idx[c] = (int32_t)(c / g);
        }
    }
    res->loss = lb_gptq_torch_sum_f32(Loss, out * in);
    st = LB_OK;

done:
    if (Wp != Ww) lb_free(Wp);
    lb_free(W1);
    lb_free(W0);
    lb_free(Err1);
    lb_free(T);
    lb_free(cur_scale);
    lb_free(cur_zero);
    lb_free(s.fail_kind);
    lb_free(s.fail_row);
    lb_free(s.fail_col);
    if (st != LB_OK) lb_gptq_result_free(res);
    return st;
}

/* ------------------------------------------------------------------------ */
/* GPTAQ: the asymmetric-calibration term                                    */
/* ------------------------------------------------------------------------ */

lb_status lb_gptaq_make_P(const lb_gptq_factor *f, const float *dXXT,
                          float alpha, float **P_out) {
    static const char *who = "lb_gptaq_make_P";
    if (!P_out) return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL out", who);
    *P_out = NULL;
    if (!f || !dXXT)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL argument", who);
    if (!isfinite(alpha))
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: alpha %g", who,
                            (double)alpha);
    const int64_t n = f->in;
    LB_TRY(lb_gptq_check_finite(dXXT, n, n, n, who, "dXXT"));
    size_t nn;
    if (!lb_mul_ok((size_t)n, (size_t)n, &nn) ||
        !lb_mul_ok(nn, sizeof(float), &nn))
        return lb_set_error(LB_ERR_OVERFLOW, "%s: sizes overflow", who);
    float *D = lb_alloc(nn), *A = lb_alloc(nn), *P = lb_alloc(nn);
    if (!D || !A || !P) {
        lb_free(D);
        lb_free(A);
        lb_free(P);
        return lb_set_error(LB_ERR_NOMEM, "%s: cannot allocate [%lld, %lld]",
                            who, (long long)n, (long long)n);
    }
    /* D = dXXT[perm][:, perm] with the dead columns zeroed */
    for (int64_t i = 0; i < n; i++) {
        const float *src = dXXT + (int64_t)f->perm[i] * n;
        for (int64_t j = 0; j < n; j++)
            D[i * n + j] = f->dead[f->perm[j]] ? 0.0f : src[f->perm[j]];
    }
    /* A = triu(D U^T, 1); P = alpha * A U */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n,
                (int)n, 1.0f, D, (int)n, f->U, (int)n, 0.0f, A, (int)n);
    for (int64_t i = 0; i < n; i++)
        memset(A + i * n, 0, (size_t)(i + 1) * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n,
                (int)n, alpha, A, (int)n, f->U, (int)n, 0.0f, P, (int)n);
    lb_free(D);
    lb_free(A);
    *P_out = P;
    return LB_OK;
}
