/*
 * lowbit/gguf.h — GGUF reader (mmap, zero-copy) and streaming writer.
 *
 * Sources followed:
 *  - the GGUF specification, ggml/docs/gguf.md (file format v3);
 *  - ggml/src/gguf.cpp of llama.cpp 0.7.0 (what llama.cpp actually accepts
 *    and the exact byte layout its writer produces);
 *  - gguf-py (GGUFReader / GGUFWriter) for the names of the value types.
 *
 * File layout (all integers little-endian):
 *
 *   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv   x { string key | u32 value_type | value }
 *   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type
 *                 | u64 offset }
 *   zero padding to general.alignment (default 32)
 *   data section: tensor i at data + offset_i, each tensor followed by zero
 *   padding to the alignment (llama.cpp pads the last tensor too)
 *
 *   string = u64 length | bytes (UTF-8, not NUL-terminated)
 *   array  = u32 element type | u64 count | elements (arrays may nest)
 *
 * Dimension order: GGUF/ggml store ne[] innermost-first (ne[0] = elements
 * per row). lowbit's lb_tensor uses outermost-first shapes, so a GGUF tensor
 * with ne = {ne0, ne1} is the lb_tensor of shape {ne1, ne0} (types.h).
 *
 * Versions: v3 and v2 are read (they have the same little-endian layout);
 * v1 (32-bit counts and lengths) and big-endian files are rejected with
 * LB_ERR_UNSUPPORTED. The writer writes v3.
 *
 * Thread-safety: a reader (lb_gguf) is immutable after lb_gguf_open and may
 * be used from several threads at once. A writer is used by one thread.
 */
#ifndef LOWBIT_GGUF_H
#define LOWBIT_GGUF_H

#include "lowbit/core.h"
#include "lowbit/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LB_GGUF_MAGIC "GGUF"
#define LB_GGUF_VERSION 3              /* the version lowbit writes        */
#define LB_GGUF_DEFAULT_ALIGNMENT 32   /* when general.alignment is absent */
#define LB_GGUF_MAX_TENSOR_NAME 63     /* ggml's GGML_MAX_NAME (64) - NUL  */
#define LB_GGUF_MAX_KEY_LEN 65535      /* spec: keys are at most 2^16-1 B  */
#define LB_GGUF_MAX_NESTING 8          /* arrays of arrays: depth limit    */

/* Standard keys (spec "Standardized key-value pairs"). */
#define LB_GGUF_KEY_ALIGNMENT "general.alignment"
#define LB_GGUF_KEY_ARCHITECTURE "general.architecture"
#define LB_GGUF_KEY_NAME "general.name"
#define LB_GGUF_KEY_FILE_TYPE "general.file_type"
#define LB_GGUF_KEY_QUANTIZATION_VERSION "general.quantization_version"

/* ggml's GGML_QNT_VERSION: the block layout generation written by current
 * llama.cpp (value of general.quantization_version). */
#define LB_GGUF_QNT_VERSION 2

/* Metadata value types (spec gguf_metadata_value_type; ids as in the file). */
typedef enum lb_gguf_type {
    LB_GGUF_TYPE_UINT8 = 0,
    LB_GGUF_TYPE_INT8 = 1,
    LB_GGUF_TYPE_UINT16 = 2,
    LB_GGUF_TYPE_INT16 = 3,
    LB_GGUF_TYPE_UINT32 = 4,
    LB_GGUF_TYPE_INT32 = 5,
    LB_GGUF_TYPE_FLOAT32 = 6,
    LB_GGUF_TYPE_BOOL = 7,
    LB_GGUF_TYPE_STRING = 8,
    LB_GGUF_TYPE_ARRAY = 9,
    LB_GGUF_TYPE_UINT64 = 10,
    LB_GGUF_TYPE_INT64 = 11,
    LB_GGUF_TYPE_FLOAT64 = 12,
    LB_GGUF_TYPE_COUNT_ = 13
} lb_gguf_type;

/* llama.cpp's `enum llama_ftype` (value of general.file_type): the
 * predominant tensor type of a model. Only the values lowbit writes. */
typedef enum lb_gguf_file_type {
    LB_GGUF_FTYPE_ALL_F32 = 0,
    LB_GGUF_FTYPE_MOSTLY_F16 = 1,
    LB_GGUF_FTYPE_MOSTLY_Q4_0 = 2,
    LB_GGUF_FTYPE_MOSTLY_Q4_1 = 3,
    LB_GGUF_FTYPE_MOSTLY_Q8_0 = 7,
    LB_GGUF_FTYPE_MOSTLY_Q5_0 = 8,
    LB_GGUF_FTYPE_MOSTLY_Q5_1 = 9,
    LB_GGUF_FTYPE_MOSTLY_Q2_K = 10,
    LB_GGUF_FTYPE_MOSTLY_Q3_K_S = 11,
    LB_GGUF_FTYPE_MOSTLY_Q3_K_M = 12,
    LB_GGUF_FTYPE_MOSTLY_Q3_K_L = 13,
    LB_GGUF_FTYPE_MOSTLY_Q4_K_S = 14,
    LB_GGUF_FTYPE_MOSTLY_Q4_K_M = 15,
    LB_GGUF_FTYPE_MOSTLY_Q5_K_S = 16,
    LB_GGUF_FTYPE_MOSTLY_Q5_K_M = 17,
    LB_GGUF_FTYPE_MOSTLY_Q6_K = 18,
    LB_GGUF_FTYPE_MOSTLY_BF16 = 32
} lb_gguf_file_type;

/* Name of a value type as gguf-py prints it ("UINT32", "STRING", "ARRAY"...);
 * "?" for an unknown id. Never NULL. */
const char *lb_gguf_type_name(int type);

/* Size in bytes of one value of a fixed-size type (UINT8..INT64, FLOAT32/64,
 * BOOL); 0 for STRING, ARRAY and unknown ids. */
size_t lb_gguf_type_size(int type);

/* A GGUF string: `len` bytes at `data`, NOT NUL-terminated (GGUF strings may
 * contain any byte). Points into the reader's file; valid until
 * lb_gguf_close. */
typedef struct lb_gguf_str {
    const char *data;
    size_t len;
} lb_gguf_str;

/* A non-owning view of one metadata value (a top-level value, or an element
 * of an array). Valid until lb_gguf_close of the reader it came from.
 *
 * raw/raw_size are the value's bytes exactly as serialized in the file,
 * after the value-type tag: for a scalar its little-endian bytes; for a
 * string the u64 length and the bytes; for an array the u32 element type,
 * the u64 count and the elements. (The writer copies them verbatim, see
 * lb_gguf_writer_set_value.) The remaining fields are decoded from raw. */
typedef struct lb_gguf_value {
    lb_gguf_type type;      /* the value's type (LB_GGUF_TYPE_ARRAY...)     */
    lb_gguf_type elem_type; /* arrays: type of the elements; else == type   */
    uint64_t n;             /* arrays: number of elements; scalars: 1       */
    const uint8_t *raw;     /* serialized bytes (see above), unaligned      */
    size_t raw_size;
    /* private: offsets (from raw + 12) of each element of a top-level array
     * of strings or arrays, for O(1) element access; NULL otherwise. */
    const uint64_t *elem_off_;
} lb_gguf_value;

/* One tensor info as stored in the file (ggml order). */
typedef struct lb_gguf_tensor_info {
    const char *name;   /* NUL-terminated copy owned by the reader         */
    lb_type type;       /* ggml type id (a type lowbit knows)              */
    uint32_t n_dims;    /* 0..4 as stored (gguf.cpp writes >= 1)           */
    int64_t ne[LB_MAX_DIMS]; /* ggml order, ne[0] innermost; unused dims 1 */
    int64_t n_elements; /* product of ne                                   */
    uint64_t offset;    /* from the start of the data section; aligned     */
    size_t nbytes;      /* ne[0]/blck*type_size * ne[1]*ne[2]*ne[3]        */
} lb_gguf_tensor_info;

/* ======================================================================== */
/* Reader                                                                    */
/* ======================================================================== */

typedef struct lb_gguf lb_gguf;

/* Map and parse the GGUF file `path`. Everything is validated before
 * LB_OK is returned, so the accessors below never read outside the file:
 *  - magic "GGUF"; version 2 or 3 (1 and big-endian: LB_ERR_UNSUPPORTED);
 *  - every string and array length against the bytes that remain;
 *    tensor and kv counts are bounded by the remaining bytes and memory is
 *    only allocated for entries actually present (a tiny file cannot make
 *    the reader allocate much);
 *  - value-type tags known, BOOL values 0 or 1, arrays nested at most
 *    LB_GGUF_MAX_NESTING deep, keys non-empty, at most LB_GGUF_MAX_KEY_LEN
 *    bytes, without NUL bytes, and unique;
 *  - general.alignment, if present, is UINT32, non-zero and a power of two
 *    (as gguf.cpp; 1..4 are accepted for reading even though the spec asks
 *    for a multiple of 8 — the writer enforces that);
 *  - tensor names at most LB_GGUF_MAX_TENSOR_NAME bytes (gguf.cpp's limit),
 *    without NUL bytes, unique; n_dims <= 4; every ne >= 0; the product
 *    of the ne (zeros counted as 1, so that partial products such as
 *    lb_tensor_rows of a zero-element tensor fit too) fits int64; the type is one lowbit knows (lb_type_get_traits;
 *    else LB_ERR_UNSUPPORTED naming the tensor and the type id); ne[0] is a
 *    multiple of the block size; the byte size does not overflow;
 *  - the data section starts at the tensor-info end rounded up to the
 *    alignment, inside the file; every tensor offset is a multiple of the
 *    alignment and the tensor lies inside the file; tensors do not overlap.
 *    (gguf.cpp additionally requires tensors to be packed in info order;
 *    lowbit only requires non-overlap, as the spec does.)
 * Errors: LB_ERR_IO (cannot open/map), LB_ERR_FORMAT (malformed; the
 * message names the path, the byte offset and the key/tensor at fault),
 * LB_ERR_UNSUPPORTED (v1, big-endian, unknown tensor type, deep nesting),
 * LB_ERR_OVERFLOW (size arithmetic), LB_ERR_NOMEM.
 * On success *out owns the mapping; free it with lb_gguf_close. */
lb_status lb_gguf_open(const char *path, lb_gguf **out);
/* lb_gguf_open with lb_map_file_ex flags (LB_MAP_COPY: the file read into
 * huge-page-advised memory, lowbit/file.h). */
lb_status lb_gguf_open_ex(const char *path, unsigned map_flags, lb_gguf **out);

/* Tensor data of a reader opened with LB_MAP_COPY (when the copy took
 * effect) made writable (true) or read-only again (false), for repacking
 * weights in place at load (lb_tensor_repack). LB_ERR_UNSUPPORTED for a
 * file mapping or an lb_gguf_open_memory reader (never written). */
lb_status lb_gguf_set_writable(lb_gguf *g, bool writable);
/* True if [p, p + n) lies inside the reader's image. */
bool lb_gguf_contains(const lb_gguf *g, const void *p, size_t n);

/* Parse a GGUF image already in memory (same checks as lb_gguf_open). The
 * buffer is NOT copied: it must stay valid and unchanged until
 * lb_gguf_close. `name` (may be NULL: "<memory>") is used in messages. */
lb_status lb_gguf_open_memory(const void *data, size_t size, const char *name,
                              lb_gguf **out);

/* Free a reader (NULL is fine). Every pointer obtained from it dies. */
void lb_gguf_close(lb_gguf *g);

/* File facts. */
const char *lb_gguf_path(const lb_gguf *g);   /* path or memory name       */
uint32_t lb_gguf_version(const lb_gguf *g);   /* 2 or 3                    */
size_t lb_gguf_alignment(const lb_gguf *g);   /* general.alignment or 32   */
const uint8_t *lb_gguf_file_data(const lb_gguf *g); /* whole file          */
size_t lb_gguf_file_size(const lb_gguf *g);
/* Offset of the data section from the start of the file (== the size of
 * header + kv + tensor infos + padding). */
size_t lb_gguf_data_offset(const lb_gguf *g);
/* The data section: file_data + data_offset, file_size - data_offset bytes
 * (includes the padding after each tensor). NULL when empty. */
const uint8_t *lb_gguf_data(const lb_gguf *g);
size_t lb_gguf_data_size(const lb_gguf *g);

/* ---- metadata ---------------------------------------------------------- */

/* Number of key-value pairs; keys are numbered 0..n-1 in file order. */
int64_t lb_gguf_n_kv(const lb_gguf *g);
/* Index of `key`, or -1 when absent (hash lookup, O(1) expected). */
int64_t lb_gguf_find_key(const lb_gguf *g, const char *key);
/* Key name of pair i (NUL-terminated, owned by the reader), NULL when i is
 * out of range. */
const char *lb_gguf_kv_key(const lb_gguf *g, int64_t i);
/* Value of pair i, NULL when i is out of range. */
const lb_gguf_value *lb_gguf_kv_value(const lb_gguf *g, int64_t i);

/* Value of `key`. LB_ERR_NOT_FOUND (naming the key and file) when absent. */
lb_status lb_gguf_get(const lb_gguf *g, const char *key,
                      const lb_gguf_value **out);

/* Typed getters by key. Coercion rules:
 *  - integer getters (u32, i32, u64, i64) accept any integer value type
 *    (UINT8..INT64) whose value fits the requested type; BOOL, floats,
 *    strings and arrays are type errors;
 *  - f32/f64 accept FLOAT32, FLOAT64 and every integer type (converted,
 *    rounding to nearest); a finite FLOAT64 beyond the f32 range is an
 *    LB_ERR_RANGE for get_f32;
 *  - bool accepts BOOL only; str accepts STRING only.
 * Errors: LB_ERR_NOT_FOUND (absent), LB_ERR_FORMAT (wrong type: "key 'k' is
 * STRING, expected an integer"), LB_ERR_RANGE (does not fit). On error *out
 * is unchanged. */
lb_status lb_gguf_get_u32(const lb_gguf *g, const char *key, uint32_t *out);
lb_status lb_gguf_get_i32(const lb_gguf *g, const char *key, int32_t *out);
lb_status lb_gguf_get_u64(const lb_gguf *g, const char *key, uint64_t *out);
lb_status lb_gguf_get_i64(const lb_gguf *g, const char *key, int64_t *out);
lb_status lb_gguf_get_f32(const lb_gguf *g, const char *key, float *out);
lb_status lb_gguf_get_f64(const lb_gguf *g, const char *key, double *out);
lb_status lb_gguf_get_bool(const lb_gguf *g, const char *key, bool *out);
/* The string points into the file (not NUL-terminated). */
lb_status lb_gguf_get_str(const lb_gguf *g, const char *key, lb_gguf_str *out);
/* A malloc'd NUL-terminated copy of a STRING value (free with free()).
 * A string containing a NUL byte is an LB_ERR_FORMAT. */
lb_status lb_gguf_get_str_dup(const lb_gguf *g, const char *key, char **out);

/* The ARRAY value of `key`. elem_type < 0 accepts any element type; else the
 * elements must have that type (LB_ERR_FORMAT naming the key otherwise).
 * *n_out (optional) receives the element count. */
lb_status lb_gguf_get_arr(const lb_gguf *g, const char *key, int elem_type,
                          const lb_gguf_value **out, uint64_t *n_out);
/* Element i of the STRING array `key` (O(1)). LB_ERR_RANGE when i >= n. */
lb_status lb_gguf_get_arr_str(const lb_gguf *g, const char *key, uint64_t i,
                              lb_gguf_str *out);

/* ---- values (no key context: messages say "value") -------------------- */

/* Conversions of a scalar value, same coercion rules as the getters. */
lb_status lb_gguf_value_u64(const lb_gguf_value *v, uint64_t *out);
lb_status lb_gguf_value_i64(const lb_gguf_value *v, int64_t *out);
lb_status lb_gguf_value_f64(const lb_gguf_value *v, double *out);
lb_status lb_gguf_value_bool(const lb_gguf_value *v, bool *out);
lb_status lb_gguf_value_str(const lb_gguf_value *v, lb_gguf_str *out);

/* Element i of an array value as a value view (scalar, string or nested
 * array). O(1) for fixed-size elements and for top-level arrays of strings
 * or arrays; O(i) inside nested arrays of variable-size elements.
 * LB_ERR_INVALID_ARG if arr is not an array, LB_ERR_RANGE if i >= n. */
lb_status lb_gguf_arr_elem(const lb_gguf_value *arr, uint64_t i,
                           lb_gguf_value *out);
/* Raw elements of an array of a fixed-size type: arr->n elements of
 * lb_gguf_type_size(arr->elem_type) bytes each, little-endian, NOT aligned
 * (memcpy them). NULL for arrays of strings/arrays and for non-arrays. */
const void *lb_gguf_arr_raw(const lb_gguf_value *arr);

/* ---- tensors ------------------------------------------------------------ */

int64_t lb_gguf_n_tensors(const lb_gguf *g);
/* Index of tensor `name`, or -1 when absent (hash lookup). */
int64_t lb_gguf_find_tensor(const lb_gguf *g, const char *name);
/* Info of tensor i (file order), NULL when out of range. */
const lb_gguf_tensor_info *lb_gguf_tensor_at(const lb_gguf *g, int64_t i);
/* A view of tensor i: name, type, shape outermost-first (shape[k] =
 * ne[n_dims-1-k]), data in the file, nbytes. LB_ERR_RANGE if i is out of
 * range. */
lb_status lb_gguf_tensor_view(const lb_gguf *g, int64_t i, lb_tensor *out);
/* The same by name; LB_ERR_NOT_FOUND naming the tensor and file. */
lb_status lb_gguf_get_tensor(const lb_gguf *g, const char *name,
                             lb_tensor *out);

/* ======================================================================== */
/* Writer                                                                    */
/* ======================================================================== */

/* A streaming GGUF writer with llama.cpp's exact layout (gguf.cpp
 * gguf_write_out): header (v3, u64 counts), key-value pairs in the order they
 * were first set, tensor infos in the order they were added (offsets packed
 * in that order, each tensor padded to the alignment), zero padding to the
 * alignment, then the tensor data, each tensor followed by zero padding to
 * the alignment (the last one included).
 *
 * Use:
 *   lb_gguf_writer *w; lb_gguf_writer_create(&w);
 *   lb_gguf_writer_set_architecture(w, "llama"); ... set_* ...
 *   lb_gguf_writer_add_tensor(w, "token_embd.weight", LB_TYPE_Q4_0, 2, shape);
 *   ... (all tensors: names, types, shapes; no data yet)
 *   lb_gguf_writer_open(w, "out.gguf");     writes header, kv, infos
 *   lb_gguf_writer_write_tensor(w, "token_embd.weight", bytes, nbytes);
 *   ... (one tensor at a time, in add order; or in pieces with
 *        lb_gguf_writer_write_data)
 *   lb_gguf_writer_finish(w);               fsync + rename into place
 *   lb_gguf_writer_free(w);
 * Only the current piece of tensor data is ever in memory. The output is
 * written through lb_atomic_* (file.h): until lb_gguf_writer_finish
 * succeeds, the final path is untouched; lb_gguf_writer_free of an
 * unfinished writer removes the temp file.
 *
 * Any failure puts the writer in a failed state: later calls return
 * LB_ERR_INVALID_ARG ("writer failed earlier: ...") and finish refuses to
 * commit. */
typedef struct lb_gguf_writer lb_gguf_writer;

lb_status lb_gguf_writer_create(lb_gguf_writer **out);
/* Free the writer; an unfinished output's temp file is removed. NULL ok. */
void lb_gguf_writer_free(lb_gguf_writer *w);

/* ---- metadata (only before lb_gguf_writer_open) ------------------------- */
/* Setting a key that is already set replaces its value in place (the key
 * keeps its position). Keys must be non-empty, at most LB_GGUF_MAX_KEY_LEN
 * bytes. "general.alignment" must be UINT32, a power of two and a multiple
 * of 8 (spec and gguf.cpp): it sets the alignment (LB_ERR_INVALID_ARG
 * otherwise). Errors: LB_ERR_INVALID_ARG, LB_ERR_NOMEM. */
lb_status lb_gguf_writer_set_u8(lb_gguf_writer *w, const char *key, uint8_t v);
lb_status lb_gguf_writer_set_i8(lb_gguf_writer *w, const char *key, int8_t v);
lb_status lb_gguf_writer_set_u16(lb_gguf_writer *w, const char *key, uint16_t v);
lb_status lb_gguf_writer_set_i16(lb_gguf_writer *w, const char *key, int16_t v);
lb_status lb_gguf_writer_set_u32(lb_gguf_writer *w, const char *key, uint32_t v);
lb_status lb_gguf_writer_set_i32(lb_gguf_writer *w, const char *key, int32_t v);
lb_status lb_gguf_writer_set_u64(lb_gguf_writer *w, const char *key, uint64_t v);
lb_status lb_gguf_writer_set_i64(lb_gguf_writer *w, const char *key, int64_t v);
lb_status lb_gguf_writer_set_f32(lb_gguf_writer *w, const char *key, float v);
lb_status lb_gguf_writer_set_f64(lb_gguf_writer *w, const char *key, double v);
lb_status lb_gguf_writer_set_bool(lb_gguf_writer *w, const char *key, bool v);
/* NUL-terminated string value. */
lb_status lb_gguf_writer_set_str(lb_gguf_writer *w, const char *key,
                                 const char *v);
/* String value of len bytes (may contain NUL bytes). */
lb_status lb_gguf_writer_set_strn(lb_gguf_writer *w, const char *key,
                                  const char *v, size_t len);
/* Array of n elements of the fixed-size type elem_type (UINT8..FLOAT64 or
 * BOOL; not STRING/ARRAY), read from `data` as n * lb_gguf_type_size bytes
 * in host (= little-endian) order. BOOL bytes must be 0 or 1. */
lb_status lb_gguf_writer_set_arr(lb_gguf_writer *w, const char *key,
                                 lb_gguf_type elem_type, const void *data,
                                 uint64_t n);
/* Array of n NUL-terminated strings. */
lb_status lb_gguf_writer_set_arr_str(lb_gguf_writer *w, const char *key,
                                     const char *const *strs, uint64_t n);
/* Array of n counted strings. */
lb_status lb_gguf_writer_set_arr_strn(lb_gguf_writer *w, const char *key,
                                      const lb_gguf_str *strs, uint64_t n);
/* Any value (incl. nested arrays) copied verbatim from a reader's value
 * view; `v` is only read during the call. */
lb_status lb_gguf_writer_set_value(lb_gguf_writer *w, const char *key,
                                   const lb_gguf_value *v);
/* Copy every key-value pair of `g` in file order (set_value for each). */
lb_status lb_gguf_writer_copy_kv(lb_gguf_writer *w, const lb_gguf *g);

/* Conveniences for the general.* keys (spec "General metadata"). */
lb_status lb_gguf_writer_set_architecture(lb_gguf_writer *w, const char *arch);
lb_status lb_gguf_writer_set_name(lb_gguf_writer *w, const char *name);
lb_status lb_gguf_writer_set_file_type(lb_gguf_writer *w, uint32_t ftype);
lb_status lb_gguf_writer_set_quantization_version(lb_gguf_writer *w,
                                                  uint32_t version);
/* Set the alignment (power of two, multiple of 8). general.alignment is
 * written when the value differs from 32 or the key was already set. */
lb_status lb_gguf_writer_set_alignment(lb_gguf_writer *w, uint32_t alignment);
size_t lb_gguf_writer_alignment(const lb_gguf_writer *w);

/* ---- tensors (only before lb_gguf_writer_open) ------------------------- */
/* Declare the next tensor: name (1..LB_GGUF_MAX_TENSOR_NAME bytes, unique),
 * type (a type lowbit knows with a GGUF id), n_dims 1..4, shape
 * OUTERMOST-FIRST (lb_tensor order; written to the file reversed as ne[]);
 * the last dim (ne[0]) must be a multiple of the type's block size; every
 * dim >= 0 and their product (zeros counted as 1) fits int64. n_dims is written as given (gguf.cpp writes ggml_n_dims, which
 * drops trailing ne of 1: pass the shape without leading 1s to match).
 * Its offset is the previous tensor's offset plus its size padded to the
 * alignment. Errors: LB_ERR_INVALID_ARG (naming the tensor),
 * LB_ERR_OVERFLOW, LB_ERR_NOMEM. */
lb_status lb_gguf_writer_add_tensor(lb_gguf_writer *w, const char *name,
                                    lb_type type, int n_dims,
                                    const int64_t *shape);
int64_t lb_gguf_writer_n_tensors(const lb_gguf_writer *w);
/* Bytes of tensor i's data (without padding); 0 if out of range. */
size_t lb_gguf_writer_tensor_nbytes(const lb_gguf_writer *w, int64_t i);
/* Size of header + kv + tensor infos + padding, i.e. where the data section
 * will start (available before open). */
size_t lb_gguf_writer_data_offset(const lb_gguf_writer *w);
/* Total file size that will be written (data offset + padded tensors). */
lb_status lb_gguf_writer_file_size(const lb_gguf_writer *w, size_t *out);

/* ---- output ------------------------------------------------------------ */
/* Create the temp output for `path` and write header, kv and tensor infos.
 * After this, metadata and tensors can no longer be changed. */
lb_status lb_gguf_writer_open(lb_gguf_writer *w, const char *path);
/* Write the whole data of the next tensor (in add order). `name` (may be
 * NULL) must match that tensor's name; nbytes must equal its size
 * (LB_ERR_INVALID_ARG naming the tensor otherwise). Writes the padding. */
lb_status lb_gguf_writer_write_tensor(lb_gguf_writer *w, const char *name,
                                      const void *data, size_t nbytes);
/* Append n bytes of tensor data; pieces may be of any size but may not run
 * past the end of the current tensor. When a tensor is complete its padding
 * is written and the next tensor becomes current. */
lb_status lb_gguf_writer_write_data(lb_gguf_writer *w, const void *data,
                                    size_t n);
/* Index of the tensor whose data is expected next (== n_tensors when all
 * data has been written). */
int64_t lb_gguf_writer_next_tensor(const lb_gguf_writer *w);
/* Check all tensor data was written, flush, fsync and rename into place.
 * On failure the output path is untouched and the temp file removed. */
lb_status lb_gguf_writer_finish(lb_gguf_writer *w);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_GGUF_H */
