/*
 * kernels_internal.h — the kernel function tables behind lb_matmul (not
 * installed; tests and benchmarks include it to run a specific variant).
 *
 * Model (ggml's CPU backend, llama.cpp 0.7.0): activations X [n_tokens, in]
 * are quantized row by row to the weight type's vec_dot_type; then every
 * output Y[t, o] is the dot product of weight row o with activation row t.
 *
 *   weight type          vec_dot_type   per-block math
 *   F32, F16, BF16       F32            sum w_i * x_i (w converted exactly)
 *   Q4_0, Q5_0, Q8_0     Q8_0           isum * dw * da
 *   Q4_1, Q5_1           Q8_1           isum * dw * da + mw * sa
 *   Q2_K..Q6_K           Q8_K           d * isum - dmin * isum_min
 *
 * ggml pairs F16 weights with F16 activations; lowbit keeps activations in
 * f32 and converts the weights exactly (one less rounding, documented
 * difference).
 *
 * A micro-kernel `lb_mm_fn` computes a tile of outputs; every variant's
 * result for output (r, t) depends only on weight row r and activation row t,
 * never on the tile shape or position (so results do not depend on the
 * thread count). Integer block sums are exact in every variant; variants
 * differ from the scalar reference only in the float order in which block
 * results are scaled and summed.
 */
#ifndef LB_KERNELS_INTERNAL_H
#define LB_KERNELS_INTERNAL_H

#include "lowbit/kernels.h"
#include "lowbit/quants.h"
#include "lowbit/hadamard.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Software prefetch distance of the AVX2 K-quant X16 kernels (kx16_avx2.c):
 * bytes ahead of the line being read. Each kernel prefetches every line of
 * its stream once, where it first reads the line, so the prefetches are
 * spread over the compute; a burst of a whole super-block's prefetches (36-53
 * lines) at once fills the core's miss buffers and the loads behind it wait
 * for DRAM (Zen 3, AVX2 Q6_K X16 GEMV from DRAM at 1 thread: 10.6-12.0 GB/s
 * with the burst one super-block ahead, 14-17 spread 13-80 KB ahead). The
 * small-block kernels (Q4_0/Q8_0/Q5_0/Q4_1/Q5_1: 5-9 lines per block) keep
 * their per-block prefetches (on the Zen 3 VM no distance from 4 to 32 KB
 * measured better than 8 blocks for Q4_0/Q8_0; on a Zen 5 VM, with twice its
 * bandwidth, Q4_0 24 blocks and Q5_0/Q4_1/Q5_1 16: x16_b32_avx2.h). */
#define LB_PF_AHEAD 16384

/* Quantize one activation row of n f32 values into the vec_dot_type. */
typedef void (*lb_qact_fn)(const float *x, void *y, int64_t n);

/* Tile kernel: for r < nr, t < nt:
 *   y[t * ldy + r] = dot(weight row r, activation row t),
 * weight row r at (const uint8_t *)w + r * w_stride (n elements of the
 * weight type), activation row t at (const uint8_t *)a + t * a_stride
 * (n elements of the vec_dot_type; f32 for float weights). */
typedef void (*lb_mm_fn)(int64_t n, const void *w, size_t w_stride, int64_t nr,
                         const void *a, size_t a_stride, int64_t nt, float *y,
                         size_t ldy);

typedef struct lb_wkernel {
    lb_type act_type;   /* vec_dot_type                                    */
    lb_mm_fn mm;        /* NULL: no kernel for this weight type            */
    lb_mm_fn mm_batch;  /* optional kernel for n_tokens >= batch_min       */
    int batch_min;      /* (e.g. AMX tiles); 0 when mm_batch is NULL       */
    const char *mm_name, *batch_name; /* for test/benchmark output         */
    /* Kernels for LB_LAYOUT_X16 weights (Q4_0/Q8_0/Q5_0/Q4_1/Q5_1/Q2_K..Q6_K; layout
     * below): same contract as mm with w at a row that is a multiple of 16
     * in the tensor; the nr / 16 whole groups from there are interleaved,
     * the nr % 16 rows after them in row form (only a tensor's last chunk
     * has such rows). Q4_0/Q8_0: same bits as mm on the row-form tensor;
     * Q5_0/Q4_1/Q5_1/Q2_K..Q6_K: the scalar reference's bits (lb_vec_dot_q*_K_q8_K_ref) in
     * every variant (integer sums, the reference's float order). mm_x16_batch for n_tokens >=
     * batch_min when set. x16_fast: this family streams X16 faster than row
     * form, so lb_tensor_repack repacks (false in the ref table). */
    lb_mm_fn mm_x16, mm_x16_batch;
    const char *x16_name, *x16_batch_name;
    bool x16_fast;
    /* Decode kernel for X16 weights (n_tokens < LB_X16_DEC_MAX) chosen by
     * measurement among the usable families' mm_x16 (tune.c; same bits);
     * NULL: mm_x16. Set only in the table lb_kernels_current() returns. */
    lb_mm_fn mm_x16_dec;
    const char *x16_dec_name;
} lb_wkernel;
#define LB_X16_DEC_MAX 16


/* ---- LB_LAYOUT_X16 ---------------------------------------------------------
 * Types: Q4_0, Q5_0, Q4_1, Q5_1, Q8_0 (blocks of 32 elements), Q2_K..Q6_K (super-blocks of
 * 256). The rows 16g..16g+15 of a matrix with nb blocks per row (block
 * bytes BB) occupy the same 16 * nb * BB bytes as in row form, block by
 * block: block b of the group is at offset b * 16 * BB and holds the
 * block's fields one after the other, each field as the 16 rows' copies
 * interleaved: a 2-byte (fp16) field as 16 halves (row n at 2n, 32 bytes),
 * a field of 4k bytes as k vectors of 64 bytes, vector j bytes 4n..4n+3 =
 * the field's bytes 4j..4j+3 of row n. Fields in X16 order:
 *   Q4_0: d, qs[16]                      (4 code vectors)
 *   Q8_0: d, qs[32] each byte XOR 0x80   (w + 128 as unsigned bytes, for
 *         vpdpbusd: sum u * a = sum w * a + 128 * sum a)
 *   Q5_0: d, qh (one vector: the 32 high bits of row n bit-transposed
 *         in its dword, bit 8b + k = element 4k + b's, so that one shift
 *         and mask put the high bits of elements 4k..4k+3 at bit 4 of
 *         bytes 0..3: the fifth bit merged with vector ops), qs[16]
 *   Q4_1: d, m, qs[16]                   (4 code vectors, read as Q4_0's)
 *   Q5_1: d, m, qh (bit-transposed as Q5_0's), qs[16]
 *   Q4_K: d, dmin, scales[12] (3 vectors: the 6-bit scales and mins stay
 *         packed -- 16 x 6 bits fill the 12 bytes, there is no room to
 *         store them decoded in place -- and are decoded for 16 rows at
 *         once with 8 vector ops), qs[128] (32 vectors)
 *   Q5_K: d, dmin, scales[12] (3 vectors, as Q4_K's), then qh[32] and
 *         qs[128] merged into whole 5-bit codes (40 vectors): with u(s) =
 *         (qs[32(s/2) + l] >> 4(s%2) & 15) | (qh[l] >> s & 1) << 4 the code
 *         of element 32s + l (sub-block s < 8), byte b of row n's dword in
 *         vector W(c, m) (l = 4m + b; W(c, m) = 16(c/2) + 2m + c%2 for c <
 *         4, 32 + m for c = 4) holds
 *           c < 4: u(c) | (u(4+c) & 7) << 5
 *           c = 4: u(4) >> 3 | (u(5) >> 3) << 2 | (u(6) >> 3) << 4 | (u(7) >> 3) << 6
 *         so a code of sub-blocks 0-3 costs one vector op, of 4-7 five
 *         (the file's nibble + bit plane: 4-5 each); the pass over
 *         sub-blocks 2g, 2g + 1 reads vectors 16(g%2) + 0..15 in order
 *         (and W(4, m) for g >= 2)
 *   Q3_K: d, scales[12] (3 vectors: the 16 six-bit scales decoded for 16
 *         rows at once with 12 vector ops), then hmask[32] and qs[64]
 *         merged into whole 3-bit codes (24 vectors, 3 per dword m < 8):
 *         with u(k,j) = (qs[32k + l] >> 2j & 3) | (hmask[l] >> (4k + j) &
 *         1) << 2 the code (value u - 4) of element 128k + 32j + l, byte
 *         b of row n's dword in vector 3m + c (l = 4m + b) holds
 *           c = 0, 1 (k = c): u(k,0) | u(k,1) << 3 | (u(k,2) & 3) << 6
 *           c = 2: u(0,3) | u(1,3) << 3 | (u(0,2) >> 2) << 6 | (u(1,2) >> 2) << 7
 *         so each code is 1-5 vector ops away (and, shift + and; the
 *         split u(k,2) five) instead of the file's 2-bit plane + bit plane
 *         (5); the same 96 bytes a row
 *   Q2_K: d, dmin, scales[16] (4 vectors: scale | min << 4 per byte),
 *         qs[64] (16 vectors)
 *   Q6_K: d, scales[16] (4 vectors), then 48 code vectors in the order
 *         the kernels use them: for k = 8h + m (h < 2, m < 8) three
 *         vectors, the dwords ql[64h+4m], ql[64h+32+4m], qh[32h+4m] (one
 *         monotonic stream: three separate ql/ql/qh streams halved the
 *         speed from DRAM)
 * One 512-bit load puts 4 bytes of row n in int32 lane n (a 256-bit load:
 * rows 0-7 or 8-15), and a group is one sequential stream. */
bool lb_x16_type(lb_type t);
static inline size_t lb_x16_block_bytes(lb_type t) {
    return t == LB_TYPE_Q4_0 ? 16 * 18 : t == LB_TYPE_Q8_0 ? 16 * 34
         : 16 * (size_t)lb_type_get_traits((int)t)->type_size;
}
/* Rebuild row n (< 16) of block b of group gp (X16) into the row-form
 * block blk (the type's block bytes). Q4_0/Q8_0 inline (the AMX and AVX2
 * X16 paths call it per block), the others through kernels_ref.c. */
void lb_x16_get_block_k(lb_type t, const uint8_t *gp, int64_t b, int n, uint8_t *blk);
static inline void lb_x16_get_block(lb_type t, const uint8_t *gp, int64_t b, int n,
                                    uint8_t *blk) {
    if (t != LB_TYPE_Q4_0 && t != LB_TYPE_Q8_0) {
        lb_x16_get_block_k(t, gp, b, n, blk);
        return;
    }
    const uint8_t *p = gp + (size_t)b * lb_x16_block_bytes(t);
    blk[0] = p[2 * n];
    blk[1] = p[2 * n + 1];
    const int nv = t == LB_TYPE_Q4_0 ? 4 : 8;
    const uint8_t x = t == LB_TYPE_Q4_0 ? 0 : 0x80;
    for (int j = 0; j < nv; j++)
        for (int k = 0; k < 4; k++) blk[2 + 4 * j + k] = p[32 + 64 * j + 4 * n + k] ^ x;
}
/* Row-form bytes of 16 rows (row n at src + n * ws, nb blocks) -> one X16
 * group at dst (no overlap). */
void lb_x16_pack_group(lb_type t, const uint8_t *src, size_t ws, int64_t nb, uint8_t *dst);

/* Vector helpers of the forward pass (attention, elementwise), one set per
 * variant like the matmul kernels (vec_ref.c, vec_avx2.c). Variants agree
 * with the reference up to f32 rounding (summation order, and an exp
 * polynomial within 2 ulp of expf). */
typedef struct lb_vec_kernels {
    /* Attention scores of G query vectors against n key rows (f32, row
     * length hd, rows back to back):
     *   s[g * lds + j] = scale * dot(q[g*hd .. g*hd+hd), K[j*hd .. j*hd+hd))
     * for g < G, j < n. */
    void (*qk)(int G, int hd, const float *q, const float *K, int64_t n,
               float scale, float *s, int64_t lds);
    /* Weighted sum of n value rows into G accumulators:
     *   acc[g*hd + i] += sum_{j<n} p[g*ldp + j] * V[j*hd + i]. */
    void (*pv)(int G, int hd, const float *p, int64_t ldp, const float *V,
               int64_t n, float *acc);
    /* x[i] = exp(x[i] - m) for i < n; returns the sum of the new x. */
    float (*exp_sum)(float *x, int64_t n, float m);
    /* SwiGLU: g[i] = g[i] / (1 + exp(-g[i])) * u[i]. */
    void (*silu_mul)(float *g, const float *u, int64_t n);
    /* y[i] += x[i]. */
    void (*add)(float *y, const float *x, int64_t n);
    /* binary16 <-> binary32 rows (f32 -> f16 rounds to nearest even, as
     * lb_f32_to_f16). */
    void (*f16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    void (*f32_to_f16)(const float *src, uint16_t *dst, int64_t n);
    /* Rows of x [rows, h->n] <- T x_row, T the orthogonal Hadamard
     * transform of lowbit/hadamard.h; tmp: h->n floats. Every variant
     * gives the reference's bits (hadamard.c). */
    void (*hadamard)(const lb_hadamard *h, float *x, int64_t rows,
                     float *tmp);
    /* Read p[0, n) once, front to back: the wrapping sum of its
     * little-endian 64-bit words, plus its last n % 8 bytes one by one
     * (lb_membw_pass's memory read; the sum keeps the loads alive). */
    uint64_t (*read_sum)(const uint8_t *p, size_t n);
} lb_vec_kernels;

typedef struct lb_kernel_table {
    const char *name;                   /* "ref", "avx2", ...            */
    lb_vec_kernels vec;                 /* attention / elementwise       */
    lb_qact_fn qact[LB_TYPE_COUNT_];    /* by vec_dot_type (Q8_0/Q8_1/Q8_K) */
    lb_wkernel w[LB_TYPE_COUNT_];       /* by weight type                */
} lb_kernel_table;

enum {
    LB_KV_REF = 0,
    LB_KV_AVX2,
    LB_KV_AVX_VNNI, /* AVX2 + VEX vpdpbusd (kernels_avx_vnni.c) */
    LB_KV_AVX512,
    LB_KV_AVX512_VNNI,
    LB_KV_AMX,
    LB_KV_COUNT
};

/* Table of variant v (LB_KV_*), built once; never NULL for a valid v.
 * lb_kernels_usable(v): the running CPU supports it (lb_cpu_get()). */
const lb_kernel_table *lb_kernels_table(int v);
bool lb_kernels_usable(int v);
/* The table lb_matmul uses (best usable, or ref under LB_FORCE_REF=1),
 * with the measured kernel choice of lb_kernels_tune. */
const lb_kernel_table *lb_kernels_current(void);
/* Measured kernel choice (tune.c): fills tuned->w[t].mm_x16_dec for the
 * X16 types where a kernel of tables[0..ntab) (the usable SIMD tables up to
 * tuned's family) is measurably faster than tuned's own, and drops or
 * replaces tuned's batch kernels (mm_batch / mm_x16_batch, AMX's) where
 * they are not clearly faster than the others' at 128 tokens; every
 * candidate gives the same bits. Cached per CPU model, microcode, family
 * and version in the user's cache directory. LB_TUNE=0: no change;
 * LB_TUNE=1: measure again. Never fails (a kernel it cannot measure keeps
 * the family's). */
void lb_kernels_tune(lb_kernel_table *tuned, const lb_kernel_table *const *tables, int ntab);

/* lb_matmul with an explicit table (tests/benchmarks). The table must be
 * usable on this CPU. */
lb_status lb_matmul_table(const lb_kernel_table *kt, lb_pool *pool,
                          const lb_tensor *W, const float *X, float *Y,
                          int64_t n_tokens);

/* ---- plans: one product cut into independent chunks --------------------- */
/* A plan for Y[n_tokens, out] = X W^T (the work lb_matmul does), exposed so
 * that the model forward can run several products inside one thread-pool
 * job and split the chunks over threads (lb_steal_take). Flow: quantize
 * activation rows (lb_mm_plan_quantize, rows split over threads; skipped
 * for f32 activations, where A is X itself), then run chunks
 * 0..n_chunks-1 in any order on any threads (each writes rows
 * [c*row_chunk, ...) of every token). Results do not depend on the split. */
typedef struct lb_mm_plan {
    lb_mm_fn mm;
    lb_qact_fn qact;   /* NULL: f32 activations, pass X as A            */
    lb_type act_type;  /* vec_dot_type                                   */
    lb_type w_type;    /* the weight's type                              */
    const uint8_t *w;
    size_t w_stride;   /* bytes per weight row                           */
    size_t a_stride;   /* bytes per activation row                       */
    int64_t in, out, n_tokens;
    int64_t row_chunk, n_chunks, tok_tile;
} lb_mm_plan;

/* Check W (as lb_matmul does) and plan the product for n_tokens tokens on
 * nth threads. Errors as lb_matmul. */
lb_status lb_mm_plan_make(lb_mm_plan *pl, const lb_kernel_table *kt,
                          const lb_tensor *W, int64_t n_tokens, int nth);
/* The same with chunks of a multiple of row_align rows (>= 1; e.g. so that
 * a chunk of outputs covers whole blocks of the next product's quantized
 * input). */
lb_status lb_mm_plan_make_aligned(lb_mm_plan *pl, const lb_kernel_table *kt,
                                  const lb_tensor *W, int64_t n_tokens, int nth,
                                  int64_t row_align);
/* Bytes of the quantized activations (0 for f32 activations). */
size_t lb_mm_plan_act_bytes(const lb_mm_plan *pl);
/* Quantize activation rows [t0, t1) of X [n_tokens, in] into A. */
void lb_mm_plan_quantize(const lb_mm_plan *pl, const float *X, void *A,
                         int64_t t0, int64_t t1);
/* Chunk c: Y[t * ldy + r] for every token t and rows r of chunk c. */
void lb_mm_plan_chunk(const lb_mm_plan *pl, const void *A, float *Y,
                      size_t ldy, int64_t c);
/* The same into a buffer holding only the chunk's rows: Yc[t * ldy + (r -
 * c * row_chunk)]. */
void lb_mm_plan_chunk_at(const lb_mm_plan *pl, const void *A, float *Yc,
                         size_t ldy, int64_t c);

/* ---- scalar reference kernels (kernels_ref.c) --------------------------- */
/* Single dot products over n elements: weight row vx, activation row vy.
 * Integer sums per block, then float scaling in ggml's generic order:
 *   q4_0: sumf += isum * dw * da          q8_0, q5_0: sumf += isum * (dw * da)
 *   q4_1, q5_1: sumf += (dw * da) * isum + mw * sa
 *   q2_K: sumf += dall * isum - dmin * isum_min     (ggml order)
 *   q3_K, q6_K: sumf += (d * da) * isum
 *   q4_K, q5_K: sumf += (d * da) * isum; sumf -= (dmin * da) * isum_min
 *     (ggml's generic code spreads d * isum over 8 lanes; same integers,
 *     float summation order differs at rounding level)
 *   f32/f16/bf16: double accumulation of f32 products (ggml's scalar path) */
float lb_vec_dot_q4_0_q8_0_ref(int64_t n, const void *vx, const void *vy);
float lb_vec_dot_q4_1_q8_1_ref(int64_t n, const void *vx, const void *vy);
float lb_vec_dot_q5_0_q8_0_ref(int64_t n, const void *vx, const void *vy);
float lb_vec_dot_q5_1_q8_1_ref(int64_t n, const void *vx, const void *vy);
float lb_vec_dot_q8_0_q8_0_ref(int64_t n, const void *vx, const void *vy);
float lb_vec_dot_q2_K_q8_K_ref(int64_t n, const void *vx, const void *vy);
float lb_vec_dot_q3_K_q8_K_ref(int64_t n, const void *vx, const void *vy);
float lb_vec_dot_q4_K_q8_K_ref(int64_t n, const void *vx, const void *vy);
float lb_vec_dot_q5_K_q8_K_ref(int64_t n, const void *vx, const void *vy);
float lb_vec_dot_q6_K_q8_K_ref(int64_t n, const void *vx, const void *vy);
float lb_vec_dot_f32_f32_ref(int64_t n, const void *vx, const void *vy);
float lb_vec_dot_f16_f32_ref(int64_t n, const void *vx, const void *vy);
float lb_vec_dot_bf16_f32_ref(int64_t n, const void *vx, const void *vy);
void lb_kernels_fill_ref(lb_kernel_table *kt);
/* X16 twins of mm_q4_0_ref / mm_q8_0_ref (same bits: each block rebuilt
 * and dotted with the reference, block results added in its order). */
void lb_mm_q4_0_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q8_0_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q5_0_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q4_1_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q5_1_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy);
/* X16 twins of mm_q5_0_ref, mm_q4_1_ref, mm_q5_1_ref, mm_q4_K_ref / mm_q6_K_ref (the reference's bits: each row
 * rebuilt and dotted with lb_vec_dot_q{4,6}_K_q8_K_ref). */
void lb_mm_q4_K_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q6_K_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q5_K_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q3_K_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q2_K_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy);
void lb_vec_fill_ref(lb_kernel_table *kt);  /* vec_ref.c */
/* Hadamard transform kernels (hadamard.c, hadamard_avx2.c,
 * hadamard_avx512.c; lb_vec_kernels.hadamard). */
void lb_hadamard_f32_ref(const lb_hadamard *h, float *x, int64_t rows,
                         float *tmp);
void lb_hadamard_f32_avx2(const lb_hadamard *h, float *x, int64_t rows,
                          float *tmp);
void lb_hadamard_f32_avx512(const lb_hadamard *h, float *x,
                            int64_t rows, float *tmp);

/* ---- AVX2 + FMA + F16C (kernels_avx2.c) --------------------------------- */
void lb_quantize_q8_0_avx2(const float *x, void *y, int64_t n);
void lb_quantize_q8_1_avx2(const float *x, void *y, int64_t n);
void lb_quantize_q8_K_avx2(const float *x, void *y, int64_t n);
void lb_kernels_fill_avx2(lb_kernel_table *kt);
/* The AVX2 Q4_0 / Q8_0 tile kernels (lb_mm_fn). Their per-output arithmetic
 * is the one every SIMD variant of these two types reproduces bit for bit
 * (avx512_vnni, amx): exact integer block sums; blocks in chunks of 256,
 * part = fma(dw * da, (float)isum, part) block by block from 0, and
 * y = part for the first chunk, y + part for the others. */
void lb_mm_q4_0_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                     size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q8_0_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                     size_t as, int64_t nt, float *y, size_t ldy);
/* X16 twins of the two above (same bits): one sequential stream per
 * 16-row group, 1-4 tokens per pass, decode and prefill (x16_b32_avx2.h,
 * instantiated in kernels_avx2.c with its Q5_0 / Q4_1 / Q5_1 kernels below). */
void lb_mm_q4_0_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                         size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q8_0_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                         size_t as, int64_t nt, float *y, size_t ldy);
/* X16 Q4_K / Q5_K / Q6_K / Q3_K / Q2_K (kx16_avx2.c) and Q5_0 / Q4_1 /
 * Q5_1 (x16_b32_avx2.h, kernels_avx2.c) on AVX2: the reference's bits, any
 * n_tokens (4-token tiles), rows after the last whole group by the
 * reference dot. */
void lb_mm_q4_K_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                         size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q5_K_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                         size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q6_K_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                         size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q5_0_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                         size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q3_K_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                         size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q2_K_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                         size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q4_1_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                         size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_q5_1_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                         size_t as, int64_t nt, float *y, size_t ldy);
void lb_vec_fill_avx2(lb_kernel_table *kt); /* vec_avx2.c */
/* vec_avx2.c's attention kernels (lb_vec_kernels.qk / .pv), also the
 * fallback of vec_avx512.c for head sizes that are not a multiple of 16 */
void lb_vec_qk_avx2(int G, int hd, const float *q, const float *K, int64_t n,
                    float scale, float *s, int64_t lds);
void lb_vec_pv_avx2(int G, int hd, const float *p, int64_t ldp, const float *V,
                    int64_t n, float *acc);

/* LB_KSYM(name): exported name of a function defined in kernels_avx512vnni.c
 * or kernels_amx.c. Tests compile those two files a second time against
 * emulated intrinsics (-DLB_EMULATE_SIMD, tests/emu/emu_avx512.h) so they
 * run on CPUs without AVX-512/AMX; that build's names get an _emu suffix so
 * both builds link into one test program. The library never defines it. */
#ifdef LB_EMULATE_SIMD
#define LB_KSYM(name) name##_emu
#else
#define LB_KSYM(name) name
#endif

/* LB_UNROLL(n): "#pragma GCC unroll n" before a loop; LB_KINLINE: a static
 * function the compiler must inline (static inline always_inline). Both are
 * speed hints for the real kernels. The emulated build (LB_EMULATE_SIMD,
 * tests only) turns them off: there every intrinsic is a C loop over lanes,
 * and forced inlining plus unrolling made single functions so large that
 * compiling kernels_avx512vnni.c under ASan+UBSan took over half an hour.
 * Results do not depend on either (same operations in the same order). */
#define LB_PRAGMA_(x) _Pragma(#x)
#ifdef LB_EMULATE_SIMD
#define LB_UNROLL(n)
#define LB_KINLINE static inline
#else
#define LB_UNROLL(n) LB_PRAGMA_(GCC unroll n)
#define LB_KINLINE static inline __attribute__((always_inline))
#endif

/* ---- AVX-VNNI (kernels_avx_vnni.c) -------------------------------------- */
/* The AVX2 table with X16 Q4_0 / Q8_0 / Q5_0 / Q4_1 / Q5_1 kernels (any
 * n_tokens; rows after the last whole group in row form) whose int32 block
 * sums come from VEX vpdpbusd: the AVX2 X16 kernels' bits (x16_b32_avx2.h). */
void LB_KSYM(lb_mm_q4_0_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy);
void LB_KSYM(lb_mm_q8_0_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy);
void LB_KSYM(lb_mm_q5_0_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy);
void LB_KSYM(lb_mm_q4_1_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy);
void LB_KSYM(lb_mm_q5_1_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy);
/* Q6_K / Q5_K / Q3_K (kx16_avx2.c built with X16_VNNI): prefill tiles
 * (>= 16 tokens) with vpdpbusd + vpmulld by the sub-block scale, the
 * reference's bits; fewer tokens run the AVX2 kernels */
void LB_KSYM(lb_mm_q6_K_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy);
void LB_KSYM(lb_mm_q5_K_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy);
void LB_KSYM(lb_mm_q3_K_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy);
void LB_KSYM(lb_kernels_fill_avx_vnni)(lb_kernel_table *kt);

/* ---- AVX-512 VNNI (kernels_avx512vnni.c) --------------------------------- */
/* The avx512 (F/BW/VL/DQ, no VNNI) table keeps the AVX2 kernels: without
 * vpdpbusd the u8 x s8 products would go through vpmaddubsw, which saturates.
 * The VNNI kernels repack weights for tiles of at least LB_VNNI_MIN_TOKENS
 * tokens; Q4_0 decode (1-3 tokens) has its own kernel; other small tiles
 * run the AVX2 kernels. */
#define LB_VNNI_MIN_TOKENS 16
void LB_KSYM(lb_kernels_fill_avx512_vnni)(lb_kernel_table *kt);

/* ---- F32 weights on AVX-512 (f32_avx512.c) ------------------------------ */
/* The AVX2 F32 kernel's bits with a 4 x 6 tile (24 ymm accumulators). */
void lb_kernels_fill_f32_avx512(lb_kernel_table *kt);

/* ---- F16 / BF16 weights on AVX-512 (f16_avx512.c) ----------------------- */
/* The AVX2 F16/BF16 kernels' bits (kernels_avx2.c mmf) with 8-row
 * prefetching decode tiles (1-3 tokens) and 4 x 6 tiles (more tokens).
 * Only AVX2/F16C intrinsics: test_kernels_emu builds it with AVX2 flags
 * (the _emu name) and checks it on any AVX2 machine. */
void LB_KSYM(lb_kernels_fill_f16_avx512)(lb_kernel_table *kt);
/* vec_avx512.c: AVX-512 qk / pv / f16_to_f32 (the rest of vec stays AVX2) */
void LB_KSYM(lb_vec_fill_avx512)(lb_kernel_table *kt);

/* ---- BF16 activations (bf16x_ref.c, bf16x_avx512bf16.c) ----------------- */
/* Products of bf16 weights and bf16 activations with f32 accumulation, for
 * the calibration forwards of `quantize --calib-dtype bf16` (not for
 * inference: a context uses them only with
 * lb_context_params.bf16_activations). Activation rows are bf16 (qact:
 * f32 -> bf16 round to nearest even, NaN quieted: lb_f32_to_bf16's bytes
 * in every variant). Weights: mm_f32w reads F32 rows and rounds each
 * element to bf16 (as lb_f32_to_bf16) before the product; mm_bf16w reads
 * BF16 rows. y[t, r] = sum over element pairs of the two exact products,
 * accumulated in f32 (vdpbf16ps); variants differ from the reference in
 * the order of the f32 additions only (and flush bf16 subnormals to zero,
 * as vdpbf16ps does). lb_mm_fn contract otherwise. */
/* qact_t: the converter transposing, y[c * ldy + r] = bf16(x[r * ldx + c])
 * for r < rows, c < cols (lb_f32_to_bf16's bytes; lb_gram_bf16's x^T). */
typedef void (*lb_qact_t_fn)(const float *x, size_t ldx, int64_t rows, int64_t cols,
                             uint16_t *y, size_t ldy);
typedef struct lb_bf16x_kernels {
    lb_qact_fn qact;
    lb_qact_t_fn qact_t;
    lb_mm_fn mm_f32w, mm_bf16w;
    const char *name;
} lb_bf16x_kernels;
void lb_qact_bf16_ref(const float *x, void *y, int64_t n);
void lb_qact_t_bf16_ref(const float *x, size_t ldx, int64_t rows, int64_t cols, uint16_t *y,
                        size_t ldy);
void lb_mm_f32w_bf16a_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                          size_t as, int64_t nt, float *y, size_t ldy);
void lb_mm_bf16w_bf16a_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                           size_t as, int64_t nt, float *y, size_t ldy);
void lb_kernels_fill_bf16x_avx512bf16(lb_bf16x_kernels *k);
/* The kernels to use: ref = true (or LB_FORCE_REF=1) gives the scalar
 * references; otherwise the AVX512_BF16 ones when the CPU has them.
 * Returns false (k zeroed) when there is no fast variant: the caller then
 * keeps f32 products. */
bool lb_kernels_bf16x(bool ref, lb_bf16x_kernels *k);

/* ---- AMX-INT8 (kernels_amx.c) ------------------------------------------- */
void LB_KSYM(lb_kernels_fill_amx)(lb_kernel_table *kt);

/* ---- FP8 E4M3 32-blocks (LB_TYPE_F8_E4M3_B32, lowbit/fp8.h) -------------- */
/* fp8_ref.c / fp8_avx2.c: register the tile kernels in a table (matmul.c). */
float lb_vec_dot_f8b32_f32_ref(int64_t n, const void *vx, const void *vy);
void lb_kernels_fill_fp8_ref(lb_kernel_table *kt);
void lb_kernels_fill_fp8_avx2(lb_kernel_table *kt);
/* fp8_avx512.c (AVX-512 F/BW/VL/DQ; also built for test_kernels_emu) */
void LB_KSYM(lb_kernels_fill_fp8_avx512)(lb_kernel_table *kt);

/* ---- bitsandbytes NF4/FP4 64-blocks and INT8 32-blocks (lowbit/bnb.h) ----- */
/* bnb_ref.c / bnb_avx2.c / bnb_avx512.c: LB_TYPE_NF4_B64, LB_TYPE_FP4_B64,
 * LB_TYPE_I8_B32 tile kernels with f32 activations. */
float lb_vec_dot_nf4b64_f32_ref(int64_t n, const void *vx, const void *vy);
float lb_vec_dot_fp4b64_f32_ref(int64_t n, const void *vx, const void *vy);
float lb_vec_dot_i8b32_f32_ref(int64_t n, const void *vx, const void *vy);
void lb_kernels_fill_bnb_ref(lb_kernel_table *kt);
void lb_kernels_fill_bnb_avx2(lb_kernel_table *kt);
void LB_KSYM(lb_kernels_fill_bnb_avx512)(lb_kernel_table *kt);

#ifdef __cplusplus
}
#endif
#endif /* LB_KERNELS_INTERNAL_H */
