/*
 * lowbit/safetensors.h — read and write Hugging Face safetensors checkpoints.
 *
 * Format (huggingface/safetensors, docs/README "Format", safetensors 0.8):
 *   bytes 0..7   u64 little-endian N = header length in bytes
 *   bytes 8..8+N UTF-8 JSON object: { "__metadata__": {str: str, ...},
 *                "NAME": {"dtype": "F32", "shape": [d0, d1, ...],
 *                         "data_offsets": [begin, end]}, ... }
 *                (may be padded at the end with spaces)
 *   bytes 8+N..  the data area; a tensor occupies data[begin, end), row-major,
 *                little-endian, end - begin == nelements * element size.
 * Sharded checkpoints (transformers' save_pretrained) add
 * "model.safetensors.index.json": {"metadata": {"total_size": ...},
 * "weight_map": {"NAME": "model-00001-of-00002.safetensors", ...}}.
 *
 * Reading: files are memory-mapped (lb_map_file) and every tensor is an
 * lb_tensor view into the mapping — nothing is copied. Views stay valid until
 * lb_st_close. The data of a tensor is only as aligned as the file makes it
 * (8+N+begin); lowbit's writer keeps the data area 8-byte aligned, but other
 * writers may not, so callers that need aligned rows must check or copy.
 * Every header field is treated as hostile: lengths, offsets and size
 * products are overflow-checked and bad input fails with LB_ERR_FORMAT and a
 * message naming the file and tensor.
 *
 * dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL (mapped to lb_type);
 * other safetensors dtypes (U16, U32, U64, F8_*) give LB_ERR_UNSUPPORTED.
 */
#ifndef LOWBIT_SAFETENSORS_H
#define LOWBIT_SAFETENSORS_H

#include "lowbit/core.h"
#include "lowbit/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest header accepted (same limit as the Rust reference: 100 MB). */
#define LB_ST_MAX_HEADER ((size_t)100 * 1000 * 1000)

/* An opened checkpoint: one file or all shards of an index. */
typedef struct lb_safetensors lb_safetensors;

/* Open `path`, which may be:
 *   - a .safetensors file;
 *   - a model.safetensors.index.json (all shards named in weight_map are
 *     opened from the index's directory);
 *   - a directory: its model.safetensors.index.json if present, else its
 *     model.safetensors.
 * Errors: LB_ERR_IO / LB_ERR_NOT_FOUND (missing file or shard, named),
 * LB_ERR_FORMAT (malformed header or index, naming file and tensor),
 * LB_ERR_UNSUPPORTED (dtype lowbit has no type for), LB_ERR_NOMEM.
 * Validation: header length within the file and <= LB_ST_MAX_HEADER, header
 * is a JSON object (trailing spaces allowed), numbers are non-negative
 * integers < 2^53, at most LB_MAX_DIMS dims, data_offsets inside the data
 * area, no two tensors overlap, end - begin == nelements * element size, no
 * duplicate names (also across shards), every weight_map entry names a shard
 * that exists and contains that tensor. Free with lb_st_close. */
lb_status lb_st_open(const char *path, lb_safetensors **out);

/* Parse a safetensors image already in memory (data[0..size), the whole
 * file). The result refers to `data` without copying: data must outlive it.
 * `label` names the image in error messages (e.g. a file name; NULL =
 * "<memory>"). Same validation and errors as lb_st_open. This is the
 * fuzzing entry point. Free with lb_st_close. */
lb_status lb_st_parse(const void *data, size_t size, const char *label,
                      lb_safetensors **out);

/* Close: unmap the files and free everything (NULL is fine). */
void lb_st_close(lb_safetensors *st);

/* Number of tensors (all shards together). */
size_t lb_st_count(const lb_safetensors *st);

/* Tensor i (0 <= i < count) in name order (strcmp). NULL if out of range.
 * The view (name, shape, data) is owned by st. */
const lb_tensor *lb_st_tensor_at(const lb_safetensors *st, size_t i);

/* Find a tensor by exact name (binary search). NULL if absent (does not set
 * an error: absence is often normal, e.g. optional biases). */
const lb_tensor *lb_st_find(const lb_safetensors *st, const char *name);

/* Path of the file holding tensor t (a pointer from lb_st_find/_at), or the
 * parse label. Owned by st. */
const char *lb_st_tensor_file(const lb_safetensors *st, const lb_tensor *t);

/* __metadata__ lookup: the value of `key`, NULL if absent. For shards, the
 * metadata of all shards is merged (the first shard in file-name order wins
 * on conflicts). Owned by st. */
const char *lb_st_metadata(const lb_safetensors *st, const char *key);
/* Number of metadata entries and entry i (sorted by key). */
size_t lb_st_metadata_count(const lb_safetensors *st);
bool lb_st_metadata_at(const lb_safetensors *st, size_t i, const char **key,
                       const char **value);

/* Number of shard files (1 for a single file, 0 for lb_st_parse). */
size_t lb_st_shard_count(const lb_safetensors *st);
/* lb_mapped_file_release of tensor t's bytes (a pointer from
 * lb_st_find/_at) in its shard's mapping: its pages leave the process's
 * RSS and are read from the file again on the next access. */
void lb_st_release(const lb_safetensors *st, const lb_tensor *t);
struct lb_mapped_file; /* lowbit/file.h */
/* The read-only file mapping (lb_map_file) of shard i < lb_st_shard_count,
 * in the order the shards were opened; NULL when i is out of range. Owned
 * by st. */
const struct lb_mapped_file *lb_st_shard_mapping(const lb_safetensors *st,
                                                 size_t i);

/* The safetensors dtype string of an lb_type ("F32", "BF16", "BOOL"...), or
 * NULL for a type safetensors cannot store (block-quantized types). */
const char *lb_st_dtype_name(lb_type t);
/* The lb_type of a safetensors dtype string; -1 if unknown/unsupported. */
int lb_st_dtype_from_name(const char *dtype);

/* ------------------------------------------------------------------------ */
/* Writer                                                                    */
/* ------------------------------------------------------------------------ */

/* Plan-then-write: add entries (name, type, shape, and either a data
 * pointer or a producer callback), then write. Nothing is read or produced
 * until the write call, and tensors are produced one at a time in the order
 * they were added, so a caller can stream a model far larger than memory
 * (e.g. quantize layer by layer inside the producer).
 *
 * Output layout: header JSON in insertion order ("__metadata__" first when
 * set), offsets assigned in insertion order with no gaps (as the reference
 * implementation requires), header padded with spaces so that the data area
 * starts at a multiple of 8 bytes. The bytes are a pure function of the
 * entries: same entries, same file. */
typedef struct lb_st_writer lb_st_writer;

/* Sink handed to a producer: append bytes of the tensor being produced. */
typedef struct lb_st_sink lb_st_sink;

/* Append n bytes to the current tensor. Writing more than the tensor's
 * size fails with LB_ERR_INVALID_ARG; I/O failure gives LB_ERR_IO. */
lb_status lb_st_sink_write(lb_st_sink *sink, const void *data, size_t n);

/* Producer callback: must write exactly the tensor's byte size (nbytes =
 * nelements * element size) through lb_st_sink_write, in row-major order,
 * in any number of calls. Returning an error aborts the whole write. */
typedef lb_status (*lb_st_produce_fn)(void *user, const char *name,
                                      lb_st_sink *sink, size_t nbytes);

/* New empty writer. Free with lb_st_writer_free. */
lb_status lb_st_writer_create(lb_st_writer **out);
void lb_st_writer_free(lb_st_writer *w);

/* Set a __metadata__ entry (strings copied; setting a key again replaces
 * its value). */
lb_status lb_st_writer_set_metadata(lb_st_writer *w, const char *key,
                                    const char *value);

/* Add a tensor whose bytes are at `data` (borrowed: must stay valid until
 * the write call returns). shape: n_dims (0..LB_MAX_DIMS) dims, outermost
 * first. type must have a safetensors dtype (lb_st_dtype_name != NULL).
 * Errors: LB_ERR_INVALID_ARG (duplicate name, "__metadata__", bad type,
 * negative dim), LB_ERR_OVERFLOW. */
lb_status lb_st_writer_add(lb_st_writer *w, const char *name, lb_type type,
                           int n_dims, const int64_t *shape, const void *data);

/* Add a tensor produced by fn(user, ...) at write time. */
lb_status lb_st_writer_add_fn(lb_st_writer *w, const char *name, lb_type type,
                              int n_dims, const int64_t *shape,
                              lb_st_produce_fn fn, void *user);

/* Write everything to one file at `path`, atomically (lb_atomic_*): on
 * failure nothing is left at `path` (a previous file there is untouched). */
lb_status lb_st_writer_write_file(lb_st_writer *w, const char *path);

/* Write into directory `dir` (must exist) as transformers' save_pretrained
 * does: if max_shard_bytes == 0 or all tensor data fits in one shard,
 * "model.safetensors"; otherwise "model-00001-of-0000N.safetensors" ...
 * (tensors assigned to shards greedily in insertion order; a shard holds at
 * least one tensor, so a tensor larger than max_shard_bytes gets its own)
 * plus "model.safetensors.index.json" with metadata.total_size (sum of
 * tensor bytes) and weight_map. Every file is written to a temp file first;
 * they are renamed into place only when all were written, the index last;
 * on failure, files already renamed are removed. *n_shards_out (optional)
 * receives the number of .safetensors files written. */
lb_status lb_st_writer_write_dir(lb_st_writer *w, const char *dir,
                                 uint64_t max_shard_bytes, int *n_shards_out);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_SAFETENSORS_H */
