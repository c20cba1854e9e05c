/*
 * Private pieces shared by the GGUF reader and writer (src/io/gguf_*.c).
 */
#ifndef LB_GGUF_INTERNAL_H
#define LB_GGUF_INTERNAL_H

#include "lowbit/gguf.h"

#include <stddef.h>
#include <stdint.h>

/* Header: magic, u32 version, u64 n_tensors, u64 n_kv. */
#define GGUF_HEADER_SIZE 24
/* Smallest possible key-value pair: u64 key length, a 1-byte key, u32 type,
 * a 1-byte value. Bounds the count a file may claim. */
#define GGUF_MIN_KV_SIZE 14
/* Smallest possible tensor info: u64 name length (empty name), u32 n_dims
 * (0 dims), u32 type, u64 offset. */
#define GGUF_MIN_TI_SIZE 24

/* A string -> index hash table (open addressing, linear probing, FNV-1a).
 * It stores indices only; names are fetched through name_at so that the
 * names live once, in the reader's/writer's own arrays. */
typedef const char *(*gguf_name_at_fn)(const void *ctx, size_t idx);

typedef struct gguf_hash {
    uint32_t *slots; /* 0 = empty, else index + 1 */
    size_t cap;      /* power of two (0 before the first insert)          */
    size_t count;
} gguf_hash;

uint64_t gguf_hash_str(const char *s);
/* Index of `name` or -1. */
int64_t gguf_hash_find(const gguf_hash *h, const char *name,
                       gguf_name_at_fn name_at, const void *ctx);
/* Insert idx (whose name is name_at(ctx, idx)); the caller has checked that
 * the name is absent. Grows the table (load <= 1/2). Returns false on OOM
 * or when idx does not fit 32 bits. */
bool gguf_hash_insert(gguf_hash *h, size_t idx, gguf_name_at_fn name_at,
                      const void *ctx);
void gguf_hash_free(gguf_hash *h);

/* Name of a ggml type id that lowbit does not support (IQ*, TQ*, MXFP4...)
 * for messages, or NULL. */
const char *gguf_ggml_unsupported_type_name(uint32_t id);

/* Round up to a multiple of the power of two a; false on overflow. */
static inline bool gguf_align_up(size_t x, size_t a, size_t *out) {
    size_t r;
    if (__builtin_add_overflow(x, a - 1, &r)) return false;
    *out = r & ~(a - 1);
    return true;
}

#endif /* LB_GGUF_INTERNAL_H */
