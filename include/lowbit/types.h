/*
 * lowbit/types.h — element/block types and the tensor view shared by every
 * module (safetensors, GGUF, kernels, model, quantizers, export).
 *
 * Type ids are ggml's `enum ggml_type` values (ggml/include/ggml.h, as
 * written into GGUF tensor infos, GGUF spec v3), so a GGUF type id can be
 * used directly. Types that GGUF has no id for (safetensors U8/BOOL) get ids
 * >= 200 and never appear in GGUF files.
 */
#ifndef LOWBIT_TYPES_H
#define LOWBIT_TYPES_H

#include "lowbit/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lb_type {
    LB_TYPE_F32 = 0,
    LB_TYPE_F16 = 1,
    LB_TYPE_Q4_0 = 2,
    LB_TYPE_Q4_1 = 3,
    LB_TYPE_Q5_0 = 6,
    LB_TYPE_Q5_1 = 7,
    LB_TYPE_Q8_0 = 8,
    LB_TYPE_Q8_1 = 9,
    LB_TYPE_Q2_K = 10,
    LB_TYPE_Q3_K = 11,
    LB_TYPE_Q4_K = 12,
    LB_TYPE_Q5_K = 13,
    LB_TYPE_Q6_K = 14,
    LB_TYPE_Q8_K = 15,
    LB_TYPE_I8 = 24,
    LB_TYPE_I16 = 25,
    LB_TYPE_I32 = 26,
    LB_TYPE_I64 = 27,
    LB_TYPE_F64 = 28,
    LB_TYPE_BF16 = 30,
    LB_TYPE_U8 = 200,   /* safetensors U8 (no GGUF id)   */
    LB_TYPE_BOOL = 201, /* safetensors BOOL (no GGUF id) */
    LB_TYPE_F8_E4M3 = 202, /* safetensors F8_E4M3 (lowbit/fp8.h; no GGUF id) */
    LB_TYPE_F8_E5M2 = 203, /* safetensors F8_E5M2 (lowbit/fp8.h; no GGUF id) */
    LB_TYPE_F8_E4M3_B32 = 204, /* lowbit's in-memory FP8 weight: blocks of 32
                                  E4M3 codes with one f32 scale
                                  (lb_block_f8_b32, lowbit/fp8.h); no file
                                  format stores it */
    LB_TYPE_NF4_B64 = 205, /* lowbit's in-memory bitsandbytes NF4 / FP4
                              weights: blocks of 64 4-bit codes with one
                              f32 absmax (lb_block_bnb4_b64, lowbit/bnb.h) */
    LB_TYPE_FP4_B64 = 206,
    LB_TYPE_I8_B32 = 207,  /* bitsandbytes INT8 rows in memory: blocks of 32
                              int8 codes with the row's f32 scale
                              (lb_block_i8_b32, lowbit/bnb.h) */
    LB_TYPE_COUNT_ = 208
} lb_type;

/* Static facts about a type. A "block" is the smallest unit of storage:
 * blck_size elements take type_size bytes (1 element for plain types). */
typedef struct lb_type_traits {
    const char *name; /* "F32", "Q4_0", "Q4_K", ... (ggml's names, upper case) */
    int blck_size;    /* elements per block                                  */
    int type_size;    /* bytes per block                                     */
    bool quantized;   /* a block-quantized type                              */
} lb_type_traits;

/* Traits of `t`, or NULL for an id lowbit does not know. */
const lb_type_traits *lb_type_get_traits(int t);
/* Name of `t` ("?" if unknown). */
const char *lb_type_name(int t);
/* Parse a type name (case-insensitive, e.g. "q4_0", "BF16"); -1 if unknown. */
int lb_type_from_name(const char *name);

/* Bytes of one row of n elements of type t. Fails (returns false) when t is
 * unknown, n is not a multiple of the block size, or the size overflows. */
bool lb_row_size(lb_type t, int64_t n, size_t *bytes_out);

#define LB_MAX_DIMS 4

/* A non-owning view of a tensor. Shapes are outermost-first (PyTorch order):
 * a 2-D weight has shape {rows, cols} = {out_features, in_features}; row r
 * starts at data + r * row_bytes and holds cols elements in `type`'s
 * encoding (cols/blck_size blocks). A GGUF tensor with ne = {ne0, ne1} has
 * shape {ne1, ne0}. */
typedef struct lb_tensor {
    const char *name; /* not owned; may be NULL                        */
    lb_type type;
    int n_dims;
    int64_t shape[LB_MAX_DIMS];
    const void *data; /* not owned (mmap'd file or a module's buffer)  */
    size_t nbytes;    /* total bytes                                   */
    int layout;       /* LB_LAYOUT_ROWS (0) unless a loader repacked   */
} lb_tensor;

/* lb_tensor.layout. LB_LAYOUT_ROWS: rows back to back as described above
 * (the file's form). LB_LAYOUT_X16: Q4_0/Q8_0/Q5_0/Q4_1/Q5_1/Q4_K/Q5_K/Q6_K weights repacked in place at
 * load for the matmul kernels: each group of 16 whole rows keeps its bytes
 * (rows 16g..16g+15 at data + 16g * row_bytes) but interleaved block by
 * block (src/kernels/kernels_internal.h describes it); rows after the last
 * whole group stay in row form. Only lb_matmul, lb_tensor_row_canonical and
 * lb_tensor_dequant_row (lowbit/kernels.h) read such a tensor. */
#define LB_LAYOUT_ROWS 0
#define LB_LAYOUT_X16 1

/* Number of elements (product of shape; 1 for 0-d). */
int64_t lb_tensor_nelements(const lb_tensor *t);
/* Rows = product of all dims but the last; cols = last dim. */
static inline int64_t lb_tensor_cols(const lb_tensor *t) {
    return t->n_dims > 0 ? t->shape[t->n_dims - 1] : 1;
}
static inline int64_t lb_tensor_rows(const lb_tensor *t) {
    int64_t r = 1;
    for (int i = 0; i + 1 < t->n_dims; i++) r *= t->shape[i];
    return r;
}

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_TYPES_H */
