/*
 * lowbit/gptq.h — GPTQ post-training quantization core: the AutoGPTQ
 * quantizer grid (also used alone as RTN), the Hessian accumulator, the
 * GPTQ solver and the AutoGPTQ checkpoint packing of qweight/qzeros.
 *
 * Sources followed:
 *  - Frantar, Ashkboos, Hoefler, Alistarh 2022, "GPTQ: Accurate Post-Training
 *    Quantization for Generative Pre-trained Transformers" (arXiv 2210.17323).
 *  - AutoGPTQ @ 9f7d37072917ab3a7545835f23e808294a542153:
 *    auto_gptq/quantization/quantizer.py (Quantizer.find_params/quantize),
 *    auto_gptq/quantization/gptq.py (GPTQ.add_batch, GPTQ.fasterquant),
 *    auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py (QuantLinear.pack and
 *    the torch dequantization path, incl. the 3-bit scheme).
 *  - GPTQModel (ModelCloud) for the damp auto-increment loop and the
 *    "v2" checkpoint format (qzeros stored without the v1 "-1").
 *
 * Conventions (see core.h): shapes outermost-first, row-major. A weight W is
 * [out, in] (rows = output channels, the nn.Linear layout); "column c" is
 * input feature c. Float arithmetic is IEEE float32 in AutoGPTQ's operation
 * order unless stated. The references in ../shared/reference/gptq were made
 * by torch on netlib's reference BLAS/LAPACK: with those libraries lowbit
 * reproduces them bit for bit (H, H^-1 factor, codes, scales, W_deq, loss);
 * with OpenBLAS the sgemm/spotrf/spotri summation orders differ, giving
 * ~1e-7 relative differences in floats and (on those references) 100%
 * identical codes. Results are deterministic for a given BLAS and OpenBLAS
 * thread count (OpenBLAS's threaded potrf/gemm round differently from its
 * single-threaded ones); lowbit's own row split (lb_gptq_options.pool)
 * never changes them.
 *
 * Thread-safety: all functions are reentrant; they only share OpenBLAS
 * (whose own thread count the caller controls with openblas_set_num_threads).
 */
#ifndef LOWBIT_GPTQ_H
#define LOWBIT_GPTQ_H

#include "lowbit/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Quantizer grid (AutoGPTQ Quantizer, perchannel=True, weight=True)         */
/* ------------------------------------------------------------------------ */

/* Settings of the uniform grid. maxq = 2^bits - 1. */
typedef struct lb_quant_grid {
    int bits;            /* 2, 3, 4 or 8                                     */
    bool sym;            /* symmetric grid (zero fixed at 2^(bits-1))         */
    bool mse;            /* search a shrunk range minimising |w-q|^norm       */
    float mse_norm;      /* exponent of the MSE search error (2.4)            */
    int mse_grid;        /* shrink steps per unit (100)                       */
    float mse_maxshrink; /* largest shrink fraction (0.8): int(0.8*100)=80
                            candidates p = 1 - i/grid, i = 0..79             */
} lb_quant_grid;

/* Fill *g with AutoGPTQ's Quantizer.configure defaults for `bits` and `sym`:
 * mse = false, norm 2.4, grid 100, maxshrink 0.8. */
void lb_quant_grid_default(lb_quant_grid *g, int bits, bool sym);

/* Grid parameters of each row of x, as Quantizer.find_params(x, weight=True):
 *   xmin = min(min(row), 0), xmax = max(max(row), 0)
 *   sym:  xmax = max(|xmin|, xmax); if xmin < 0: xmin = -xmax
 *         (so a row with no negative value keeps xmin = 0)
 *   xmin == xmax == 0 (all-zero row): xmin = -1, xmax = +1
 *   scale = (xmax - xmin) / maxq            (float32)
 *   zero  = sym ? (maxq + 1) / 2 : round_half_even(-xmin / scale)
 *   mse: for i = 0..int(maxshrink*grid)-1, p = 1 - i/grid (as float32):
 *        candidate (p*xmin, p*xmax) kept when its sum |q(x) - x|^norm is
 *        strictly smaller than the best so far (sym keeps zero fixed).
 *        The error sum is evaluated in double (AutoGPTQ: float32 torch sum);
 *        only near-ties can choose differently.
 * x: [rows, cols] with a row stride of ld floats (ld >= cols); values must be
 * finite. scale[rows], zero[rows] receive the parameters (zero is an exact
 * integer in [0, maxq]).
 * Errors: LB_ERR_INVALID_ARG (bits not 2/3/4/8, rows/cols < 1, ld < cols,
 * NULL pointers, non-finite x, a scale that underflows to 0). */
lb_status lb_quant_grid_find_params(const lb_quant_grid *g, const float *x,
                                    int64_t rows, int64_t cols, int64_t ld,
                                    float *scale, int32_t *zero);

/* The integer code of w on a grid: clamp(round_half_even(w / scale) + zero,
 * 0, maxq) (float32 division, as Quantizer.quantize). */
static inline int32_t lb_quant_grid_code(float w, float scale, int32_t zero,
                                         int32_t maxq) {
    float q = __builtin_rintf(w / scale) + (float)zero;
    if (q < 0.0f) q = 0.0f;
    if (q > (float)maxq) q = (float)maxq;
    return (int32_t)q;
}

/* The dequantized value scale * (code - zero) in float32. */
static inline float lb_quant_grid_dequant(int32_t code, float scale,
                                          int32_t zero) {
    return scale * (float)(code - zero);
}

/* ------------------------------------------------------------------------ */
/* Results (shared by RTN and GPTQ)                                          */
/* ------------------------------------------------------------------------ */

/* A quantized weight. All arrays are owned (lb_alloc) and freed by
 * lb_gptq_result_free. Group g of row o has parameters
 * scales[o * n_groups + g], zeros[o * n_groups + g]; column c uses group
 * g_idx[c], so W_deq[o, c] = scales[o, g_idx[c]] * (codes[o, c] -
 * zeros[o, g_idx[c]]) exactly (float32). NOTE the layout [out, n_groups]
 * (AutoGPTQ's fasterquant return value); AutoGPTQ checkpoints store the
 * transpose [n_groups, out] — see lb_gptq_result_groups_major. */
typedef struct lb_gptq_result {
    int64_t out_features, in_features;
    int64_t n_groups; /* ceil(in / group_size), 1 for group_size -1       */
    int bits;
    int group_size;   /* as requested (-1 = one group per row)            */
    uint8_t *codes;   /* [out, in] codes in [0, 2^bits-1] (bits <= 8: one
                         byte each), ORIGINAL column order                */
    float *scales;    /* [out, n_groups]                                  */
    int32_t *zeros;   /* [out, n_groups] integer zero points in [0, maxq] */
    int32_t *g_idx;   /* [in] group of each (original) column             */
    int32_t *perm;    /* [in] desc_act permutation (column perm[k] was
                         quantized k-th), NULL without desc_act           */
    float *W_deq;     /* [out, in] dequantized weight, original order     */
    float *hinv_upper; /* [in, in] upper Cholesky factor U of the inverse
                         of the damped (permuted) H, U^T U = H^-1; only
                         when lb_gptq_options.return_hinv, else NULL      */
    float loss;       /* sum over all (o, c) of (w - q)^2 / Hinv[c,c]^2 / 2,
                         summed in float32 in torch's order (AutoGPTQ logs
                         loss / nsamples as "avg loss"); 0 for RTN        */
    double damp_percent_used; /* damp_percent after auto-increments      */
    float damp_added;  /* damp_percent_used * mean(diag H), float32       */
    int n_damp_retries; /* Cholesky failures that raised the damping      */
    int64_t n_dead;    /* columns with H[c,c] == 0 (zeroed, H[c,c] = 1)   */
    float *fp8_scales; /* FP8 grid (lb_gptq_fp8_grid) when the caller
                          attached its scales for a sink; NULL otherwise
                          (lb_alloc'd, freed by lb_gptq_result_free)      */
} lb_gptq_result;

/* Free the arrays of *r and zero it (r may be NULL; safe on a zeroed or
 * already-freed result). */
void lb_gptq_result_free(lb_gptq_result *r);

/* Copy r's group parameters into checkpoint layout: scales_go and zeros_go
 * are [n_groups, out] (AutoGPTQ's `scales` / unpacked `qzeros`). Either
 * pointer may be NULL. Errors: LB_ERR_INVALID_ARG. */
lb_status lb_gptq_result_groups_major(const lb_gptq_result *r,
                                      float *scales_go, int32_t *zeros_go);

/* ------------------------------------------------------------------------ */
/* RTN                                                                       */
/* ------------------------------------------------------------------------ */

/* Round-to-nearest on the AutoGPTQ grid, no calibration: for every group of
 * group_size consecutive columns (the last one may be shorter; -1 = the
 * whole row), lb_quant_grid_find_params on W[:, group] then codes as
 * lb_quant_grid_code. This is the "RTN" baseline of
 * ../shared/reference/gptq_model (Quantizer.find_params + quantize per
 * 128-column group). W: [out, in] f32, finite. g_idx[c] = c / group_size.
 * mse uses lb_quant_grid_default's search settings. On success *res owns new
 * arrays (perm, hinv_upper NULL; loss 0); on failure *res is zeroed.
 * Errors: LB_ERR_INVALID_ARG (bad bits/sizes/group_size 0 or < -1,
 * non-finite W), LB_ERR_NOMEM, LB_ERR_OVERFLOW. */
lb_status lb_rtn_quantize(const float *W, int64_t out, int64_t in, int bits,
                          int group_size, bool sym, bool mse,
                          lb_gptq_result *res);

/* ------------------------------------------------------------------------ */
/* Hessian accumulator (GPTQ.add_batch)                                      */
/* ------------------------------------------------------------------------ */

typedef struct lb_gptq_hessian lb_gptq_hessian;

/* Create an [in, in] accumulator, H = 0, nsamples = 0.
 * f64_accum = false replicates AutoGPTQ (float32 H, float32 sgemm);
 * f64_accum = true keeps H in double (dsyrk) for a more accurate sum.
 * Errors: LB_ERR_INVALID_ARG (in < 1, NULL out), LB_ERR_NOMEM,
 * LB_ERR_OVERFLOW. */
lb_status lb_gptq_hessian_create(int64_t in, bool f64_accum,
                                 lb_gptq_hessian **out);
void lb_gptq_hessian_free(lb_gptq_hessian *h);

/* Add a batch, exactly as GPTQ.add_batch for nn.Linear:
 *   H *= nsamples / (nsamples + n_samples)
 *   nsamples += n_samples
 *   x = sqrt(2 / nsamples) * X^T          ([in, n_rows])
 *   H += x x^T
 * X: [n_rows, in] f32 row-major: all token rows of the batch (AutoGPTQ
 * reshapes a [batch, tokens, in] input to [batch*tokens, in]). n_samples is
 * what the batch counts for in the running average — AutoGPTQ counts
 * sequences (inp.shape[0]), so one add_batch per sequence of the references
 * passes n_samples = 1. The scalar factors are computed in double and
 * rounded to float32 (torch's Python-scalar * float tensor); the f32 mode
 * forms x x^T (cblas_ssyrk, the lower triangle of sgemm's product) then
 * adds it to H (two roundings, as torch), using a scaled copy of X (n_rows
 * * in floats) kept by the accumulator and no [in, in] scratch (x x^T is
 * formed in the triangle of the accumulator's buffer that H does not
 * use); the f64 mode scales X in bounded chunks.
 * Errors: LB_ERR_INVALID_ARG (n_rows < 1, n_samples < 1, non-finite X),
 * LB_ERR_NOMEM, LB_ERR_OVERFLOW. */
lb_status lb_gptq_hessian_add_batch(lb_gptq_hessian *h, const float *X,
                                    int64_t n_rows, int64_t n_samples);

/* Later batches form x x^T with bf16 products (lb_gram_bf16: x rounded to
 * bf16, products exact, f32 sums in element pairs) instead of f32 ssyrk;
 * the running average and scaling stay as above. For `quantize
 * --calib-dtype bf16`: about twice the f32 rate on AVX512_BF16, at the cost
 * of H's bf16 rounding of x (relative 2^-9 per element; docs/quantize.md
 * states what it does to GPTQ). pool: the workers of the product (NULL:
 * the caller's thread); not a pool whose job is running on the caller's
 * thread. Errors: LB_ERR_UNSUPPORTED (f64 mode, or a CPU without
 * AVX512_BF16; H stays in f32 mode), LB_ERR_INVALID_ARG. */
lb_status lb_gptq_hessian_use_bf16(lb_gptq_hessian *h, lb_pool *pool);

int64_t lb_gptq_hessian_in_features(const lb_gptq_hessian *h);
int64_t lb_gptq_hessian_nsamples(const lb_gptq_hessian *h);

/* Finish the accumulation and hand H over: *H_out = H [in, in] f32,
 * symmetric, the same bytes as lb_gptq_hessian_get gives; lb_alloc'd, the
 * caller frees it (lb_free). h is freed, also on failure. No [in, in]
 * copy is made: the f32 mode hands over its own accumulator (H's triangle
 * mirrored in place), the f64 mode its double accumulator rounded to
 * float in place (the buffer's second half released from the RSS with
 * madvise; freed with the rest). Errors: LB_ERR_INVALID_ARG (NULL). */
lb_status lb_gptq_hessian_take(lb_gptq_hessian *h, float **H_out);

/* Copy H into H_out [in, in] as float32 (rounded from double in f64 mode). */
void lb_gptq_hessian_get(const lb_gptq_hessian *h, float *H_out);
/* Copy H into H_out [in, in] as double (exact widening in f32 mode). */
void lb_gptq_hessian_get_f64(const lb_gptq_hessian *h, double *H_out);

/* ------------------------------------------------------------------------ */
/* GPTQ solver (GPTQ.fasterquant)                                            */
/* ------------------------------------------------------------------------ */

/* GPTQ onto the FP8 grid (lb_gptq_options.fp8) instead of the integer
 * one: every weight of a scale group shares the fixed float32 scale s of
 * its group, found before the solve (e.g. lb_fp8_quantize_rule on the
 * original W), and is quantized as code = fp8(clamp(w / s, -MAX, MAX))
 * (lb_f32_to_fp8, round to nearest even), q = fp8_value(code) * s; GPTQ's
 * error feedback is unchanged (err = (w - q) / U[c,c]). Groups: rows
 * o / block_n, ORIGINAL columns c / block_k (so desc_act permutes the
 * order of the solve, not the groups); FP8 block 128: 128 x 128, per
 * channel: 1 x in, per tensor: out x in. The codes of lb_gptq_result are
 * FP8 bytes; its scales/zeros/g_idx are not meaningful. The same idea as
 * torchao's MXFP8 GPTQ (pytorch/ao PR 3897: fixed block scales, per-column
 * error propagation). */
typedef struct lb_gptq_fp8_grid {
    int fmt;                  /* lb_fp8_format (lowbit/fp8.h): 0 E4M3, 1 E5M2 */
    int64_t block_n, block_k; /* >= 1                                     */
    const float *scales;      /* [ceil(out/block_n), ceil(in/block_k)],
                                 finite and > 0 (not owned)                */
} lb_gptq_fp8_grid;

typedef struct lb_gptq_options {
    int bits;            /* 2, 3, 4 or 8                                   */
    int group_size;      /* -1 (one group per row) or >= 1 (32, 64, 128..) */
    bool sym;
    bool desc_act;       /* act-order: columns by decreasing H[c,c]         */
    bool static_groups;  /* group params from the original W, up front      */
    bool mse;            /* grid MSE search (lb_quant_grid)                 */
    float mse_norm;      /* 2.4 */
    int mse_grid;        /* 100 */
    float mse_maxshrink; /* 0.8 */
    double damp_percent; /* 0.01: damp = damp_percent * mean(diag H)        */
    double damp_auto_increment; /* 0.0025 (GPTQModel): on a Cholesky failure
                            damp_percent += this and retry while
                            damp_percent < damp_max; 0 disables retries    */
    double damp_max;     /* 1.0 (GPTQModel's `while 1 > damp_percent > 0`)  */
    int blocksize;       /* 128 (columns per lazy-batch block)              */
    bool return_hinv;    /* fill lb_gptq_result.hinv_upper                  */
    lb_pool *pool;       /* optional: output rows split across the pool's
                            workers (results identical for any pool size)  */
    lb_progress progress; /* optional: stage "gptq", done/total = columns;
                             returning false cancels                       */
    const lb_gptq_fp8_grid *fp8; /* NULL: the integer grid (bits, group_size,
                             sym, mse, static_groups); else the FP8 grid
                             above, and those are ignored                  */
} lb_gptq_options;

/* AutoGPTQ's defaults: bits 4, group_size 128, sym, no desc_act, no
 * static_groups, mse off (2.4/100/0.8), damp_percent 0.01, auto-increment
 * 0.0025 up to 1.0, blocksize 128, no hinv, no pool, no progress. */
void lb_gptq_options_default(lb_gptq_options *o);

/* Quantize one linear layer with GPTQ (fasterquant), float32 throughout:
 *  1. Grid params for group_size -1: from the whole original W.
 *  2. Dead columns: H[c,c] == 0 -> H[c,c] = 1 and W[:, c] = 0.
 *  3. static_groups (group_size > 0): params of each original column group
 *     [k*gs, (k+1)*gs) computed now from W.
 *  4. desc_act: perm = argsort(diag H, descending); ties keep ascending
 *     column index (a stable sort); W and H permuted.
 *  5. damp = (float)damp_percent * mean(diag H) (mean summed in the order
 *     of torch's CPU cascade sum, AVX2 build, so damp_added matches), added
 *     to the diagonal AFTER the permutation; LAPACK spotrf(L), spotri(L),
 *     symmetrise, spotrf(U) (torch.linalg.cholesky, cholesky_inverse,
 *     cholesky(upper=True)) gives Hinv = U. A failure of any step raises
 *     damp_percent by damp_auto_increment (restarting from the undamped H)
 *     while damp_percent < damp_max; the value used is reported.
 *  6. Blocks of `blocksize` columns [i1, i2): for each column c = i1 + i,
 *     grouped non-static params are found at c % gs == 0 from W[:, c:c+gs]
 *     of the full matrix, which holds the updates of previous blocks but
 *     NOT the updates made inside the current block (AutoGPTQ's quirk);
 *     q = grid(w); err = (w - q) / U[c,c]; W1[:, c+1:i2] -= err U[c, c+1:i2];
 *     then W[:, i2:] -= Err1 @ U[i1:i2, i2:] (cblas_sgemm into a temporary,
 *     then subtracted, as torch).
 *  7. g_idx: static_groups or no desc_act: c / gs; desc_act without static
 *     groups: (position of c in perm) / gs, and the groups are numbered in
 *     permuted order. Codes and W_deq are returned in original order.
 * W: [out, in] f32 (finite); H: [in, in] f32 symmetric (finite), e.g. from
 * lb_gptq_hessian_get. Neither is modified. On success *res owns the
 * outputs; on failure *res is zeroed.
 * Memory: about in*in + 2*out*in floats of work space besides the outputs
 * (the per-weight losses are kept in the working copy of W).
 * Errors: LB_ERR_INVALID_ARG (options, sizes, non-finite W/H),
 * LB_ERR_RANGE (Cholesky still failing at damp_max, or with auto-increment
 * 0; the message names the damp tried), LB_ERR_NOMEM, LB_ERR_OVERFLOW,
 * LB_ERR_CANCELLED. */
lb_status lb_gptq_quantize(const float *W, int64_t out, int64_t in,
                           const float *H, const lb_gptq_options *opt,
                           lb_gptq_result *res);

/* The part of lb_gptq_quantize that depends only on H (steps 2, 4, 5: dead
 * columns, the desc_act permutation, damping with auto-increment and the
 * upper Cholesky factor U of the damped H^-1), made once and shared by the
 * modules that see the same input (q/k/v, gate/up: AutoGPTQ computes the
 * identical factor for each of them). lb_gptq_quantize(W, H) is exactly
 * lb_gptq_factor_make(H) then lb_gptq_quantize_factored(W, factor): the
 * results are bit-identical. Opaque; owned by the caller. */
typedef struct lb_gptq_factor lb_gptq_factor;

/* Make the factor of H [in, in] (f32, symmetric, finite) for opt's
 * desc_act, damp_percent, damp_auto_increment and damp_max (other options
 * are not used; a damping retry is logged as a warning, once per factor).
 * Only H's lower triangle after the permutation (H[perm[i]][perm[j]], j <=
 * i) is read, as by torch's LAPACK calls. H is not modified.
 * Memory: the factor's in * in floats (a copy of H, permuted, damped,
 * factored and inverted in place; no other [in, in] scratch) and O(in).
 * Errors: LB_ERR_INVALID_ARG (NULL, in < 1, options, non-finite H),
 * LB_ERR_RANGE (Cholesky still failing, as lb_gptq_quantize),
 * LB_ERR_NOMEM, LB_ERR_OVERFLOW. On failure *out is NULL. */
lb_status lb_gptq_factor_make(const float *H, int64_t in,
                              const lb_gptq_options *opt,
                              lb_gptq_factor **out);

/* lb_gptq_factor_make with H handed over: *H (lb_alloc'd, e.g. by
 * lb_gptq_hessian_take) becomes the factor's own buffer — permuted in
 * place (O(in) scratch), damped, factored and inverted there — so that
 * only one [in, in] buffer lives; a damping retry starts again from the
 * copy of the permuted H that the LAPACK calls leave in the triangle they
 * do not reference. The factor is bit-identical to lb_gptq_factor_make's
 * of the same H. *H is set to NULL in every case (the buffer then belongs
 * to the factor, or is freed on failure). Errors: those of
 * lb_gptq_factor_make (LB_ERR_INVALID_ARG also for a NULL H). */
lb_status lb_gptq_factor_make_inplace(float **H, int64_t in,
                                      const lb_gptq_options *opt,
                                      lb_gptq_factor **out);

/* Free a factor (NULL is fine). */
void lb_gptq_factor_free(lb_gptq_factor *f);

/* lb_gptq_quantize with a factor from lb_gptq_factor_make (steps 1, 3, 6,
 * 7 on W [out, in]); the result's n_dead, perm, damp_* and hinv_upper come
 * from the factor. Errors: those of lb_gptq_quantize, plus
 * LB_ERR_INVALID_ARG when the factor was made for another in_features,
 * desc_act or damping options. */
lb_status lb_gptq_quantize_factored(const float *W, int64_t out, int64_t in,
                                    const lb_gptq_factor *f,
                                    const lb_gptq_options *opt,
                                    lb_gptq_result *res);

/* lb_gptq_quantize_factored with W [out, in] itself as the solve's working
 * copy (permuted, compensated, then holding the per-weight losses) instead
 * of a copy of it: one [out, in] f32 array less, the same result bit for
 * bit. W's contents are unspecified on return, success or error. */
lb_status lb_gptq_quantize_factored_inplace(float *W, int64_t out, int64_t in,
                                            const lb_gptq_factor *f,
                                            const lb_gptq_options *opt,
                                            lb_gptq_result *res);

/* ------------------------------------------------------------------------ */
/* AutoGPTQ checkpoint packing (qweight / qzeros)                            */
/* ------------------------------------------------------------------------ */

/* qzeros conventions:
 *  V1 ("gptq", AutoGPTQ): each field stores zero - 1. AutoGPTQ's readers
 *     unpack field + 1 with no wrap, so fields 0..maxq mean zeros
 *     1..2^bits (a 4-bit field 15 is zero 16); a zero of 0 (possible with
 *     asym grids: a group with no negative weight) cannot be stored —
 *     AutoGPTQ's own packer writes -1 as 0xFFFFFFFF there, corrupting the
 *     neighbouring fields, and GPTQModel's v1<->v2 conversion adds or
 *     subtracts per-field 1s to whole words, carrying across fields.
 *  V2 ("gptq_v2", GPTQModel): each field stores the zero as is (0..maxq). */
typedef enum lb_gptq_format {
    LB_GPTQ_FORMAT_V1 = 1,
    LB_GPTQ_FORMAT_V2 = 2,
    /* AutoAWQ "gemm" layout (quant_method "awq", version "gemm"; AutoAWQ
     * awq/modules/linear/gemm.py WQLinear_GEMM.from_linear, read by vLLM's
     * awq.py and transformers' AWQ integration): 4-bit only;
     * qweight int32 [in, out/8] packed along the OUTPUT dimension,
     * qzeros int32 [G, out/8] likewise, zeros stored as they are; inside
     * each int32 the nibble at bits 4i..4i+3 holds column 8k + order[i],
     * order = {0, 2, 4, 6, 1, 3, 5, 7}; scales f16 [G, out]; no g_idx
     * (group of column c = c / group_size). The gptq_pack functions do not
     * take it; lb_awq_pack_* below do. */
    LB_GPTQ_FORMAT_AWQ = 3
} lb_gptq_format;

/* AutoAWQ GEMM packing (LB_GPTQ_FORMAT_AWQ), 4-bit: v [rows, cols] int32
 * values 0..15 (cols a multiple of 8) -> packed [rows, cols/8]:
 * packed[r, k] = OR_i v[r, 8k + order[i]] << 4i. Used for qweight
 * (v = codes transposed: [in, out]) and qzeros (v = zeros [G, out]).
 * Errors: LB_ERR_INVALID_ARG (NULL, cols % 8, value outside 0..15). */
lb_status lb_awq_pack(const int32_t *v, int64_t rows, int64_t cols,
                      int32_t *packed);
/* Field j (0..cols-1) of row r of an AutoAWQ-packed [rows, cols/8] array
 * (any bit pattern accepted; packed may be unaligned). */
int32_t lb_awq_field(const void *packed, int64_t cols, int64_t r, int64_t j);

/* Packed sizes: qweight has in*bits/32 rows of `out` int32; qzeros has
 * `n_groups` rows of out*bits/32 int32. The packed dimension must be a
 * multiple of 32 (AutoGPTQ allocates in // 32 * bits rows, so any other
 * size cannot be loaded by it). Return -1 when bits is not 2/3/4/8 or n is
 * not a positive multiple of 32. */
int64_t lb_gptq_packed_len(int64_t n, int bits);

/* codes [out, in] (values 0..2^bits-1) -> qweight [in*bits/32, out] int32,
 * packed along the input dimension, LSB first: for 2/4/8 bits, word
 * qweight[r, o] holds codes[o, r*(32/bits) + j] at bits j*bits..; for 3 bits
 * every 3 words hold 32 codes: word 0 codes 0..9 at 3j and the low 2 bits of
 * code 10 at 30; word 1 bit 2 of code 10 at 0, codes 11..20 at 3j+1, the low
 * bit of code 21 at 31; word 2 bits 1-2 of code 21 at 0, codes 22..31 at
 * 3j+2 (AutoGPTQ qlinear_cuda_old.QuantLinear.pack).
 * Errors: LB_ERR_INVALID_ARG (bits, sizes, in % 32, a code out of range). */
lb_status lb_gptq_pack_qweight(const int32_t *codes, int64_t out, int64_t in,
                               int bits, int32_t *qweight);
/* The same from one-byte codes (lb_gptq_result.codes): the same qweight
 * bytes for the same code values. Errors: as lb_gptq_pack_qweight. */
lb_status lb_gptq_pack_qweight_u8(const uint8_t *codes, int64_t out,
                                  int64_t in, int bits, int32_t *qweight);

/* Inverse of lb_gptq_pack_qweight: qweight [in*bits/32, out] -> codes
 * [out, in]. Any bit pattern is accepted. Errors: LB_ERR_INVALID_ARG. */
lb_status lb_gptq_unpack_qweight(const int32_t *qweight, int64_t out,
                                 int64_t in, int bits, int32_t *codes);

/* zeros [n_groups, out] -> qzeros [n_groups, out*bits/32], packed along the
 * output dimension with the same bit layout as qweight (incl. 3 bits).
 * V1 stores zero - 1 (zeros must be in 1..2^bits), V2 stores zero (0..maxq).
 * Errors: LB_ERR_INVALID_ARG (bits, sizes, out % 32, format),
 * LB_ERR_RANGE (a zero that the format cannot hold; the message names the
 * group and column — use V2 for asym layers with a zero of 0). */
lb_status lb_gptq_pack_qzeros(const int32_t *zeros, int64_t n_groups,
                              int64_t out, int bits, lb_gptq_format fmt,
                              int32_t *qzeros);

/* Inverse: qzeros [n_groups, out*bits/32] -> zeros [n_groups, out]. V1 adds
 * 1 to each field without wrapping (AutoGPTQ's readers): zeros in
 * 1..2^bits, e.g. a 4-bit field 15 gives 16. V2: the field as is.
 * Errors: LB_ERR_INVALID_ARG. */
lb_status lb_gptq_unpack_qzeros(const int32_t *qzeros, int64_t n_groups,
                                int64_t out, int bits, lb_gptq_format fmt,
                                int32_t *zeros);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_GPTQ_H */
