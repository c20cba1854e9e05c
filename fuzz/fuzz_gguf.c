/*
 * fuzz_gguf — libFuzzer harness for the GGUF reader (lb_gguf_open_memory).
 *
 * Parses the input; when it is accepted, walks every accessor (keys, typed
 * getters, array elements down the nesting, tensor views) and aborts if an
 * invariant promised by lowbit/gguf.h does not hold (tensor data inside the
 * buffer and aligned, lookups consistent, sizes consistent), so logic bugs
 * surface as crashes, not only memory errors.
 *
 * Seeds (fuzz/corpus/fuzz_gguf/, all < 4 KiB): lowbit's all-types sample
 * (`test_gguf --write-sample`), a hand-made v2 and v3 file with a string
 * array and two tensors, nested arrays, alignment 64, a header-only file,
 * and stories260K's first keys with one tensor.
 */
#include "lowbit/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(c)                                                             \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "invariant failed: %s (line %d)\n", #c, __LINE__); \
            abort();                                                           \
        }                                                                      \
    } while (0)

static void walk_value(const lb_gguf_value *v, int depth) {
    uint64_t u;
    int64_t s;
    double d;
    bool b;
    lb_gguf_str str;
    (void)lb_gguf_value_u64(v, &u);
    (void)lb_gguf_value_i64(v, &s);
    (void)lb_gguf_value_f64(v, &d);
    (void)lb_gguf_value_bool(v, &b);
    if (lb_gguf_value_str(v, &str) == LB_OK) {
        REQUIRE(str.len + 8 == v->raw_size);
        volatile char sink = 0;
        for (size_t i = 0; i < str.len; i++) sink ^= str.data[i];
        (void)sink;
    }
    if (v->type != LB_GGUF_TYPE_ARRAY) return;
    REQUIRE(depth < LB_GGUF_MAX_NESTING);
    /* first and last few elements (arrays can be long) */
    for (uint64_t i = 0; i < v->n; i++) {
        if (i == 4 && v->n > 8) i = v->n - 4;
        lb_gguf_value el;
        REQUIRE(lb_gguf_arr_elem(v, i, &el) == LB_OK);
        REQUIRE(el.raw >= v->raw + 12 && el.raw + el.raw_size <= v->raw + v->raw_size);
        REQUIRE(el.type == v->elem_type);
        walk_value(&el, depth + 1);
    }
    lb_gguf_value el;
    REQUIRE(lb_gguf_arr_elem(v, v->n, &el) == LB_ERR_RANGE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lb_gguf *g = NULL;
    if (lb_gguf_open_memory(data, size, "fuzz", &g) != LB_OK) {
        REQUIRE(g == NULL);
        return 0;
    }
    const uint8_t *end = data + size;
    size_t align = lb_gguf_alignment(g);
    REQUIRE(align && (align & (align - 1)) == 0);
    REQUIRE(lb_gguf_data_offset(g) <= size);
    for (int64_t i = 0; i < lb_gguf_n_kv(g); i++) {
        const char *key = lb_gguf_kv_key(g, i);
        const lb_gguf_value *v = lb_gguf_kv_value(g, i);
        REQUIRE(key && v && key[0]);
        REQUIRE(lb_gguf_find_key(g, key) == i);
        REQUIRE(v->raw >= data && v->raw + v->raw_size <= end);
        walk_value(v, 0);
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f;
        double d;
        bool b;
        lb_gguf_str s;
        char *dup = NULL;
        const lb_gguf_value *arr;
        uint64_t n;
        (void)lb_gguf_get_u32(g, key, &u32);
        (void)lb_gguf_get_i32(g, key, &i32);
        (void)lb_gguf_get_u64(g, key, &u64);
        (void)lb_gguf_get_i64(g, key, &i64);
        (void)lb_gguf_get_f32(g, key, &f);
        (void)lb_gguf_get_f64(g, key, &d);
        (void)lb_gguf_get_bool(g, key, &b);
        (void)lb_gguf_get_str(g, key, &s);
        if (lb_gguf_get_str_dup(g, key, &dup) == LB_OK) free(dup);
        if (lb_gguf_get_arr(g, key, -1, &arr, &n) == LB_OK) {
            REQUIRE(arr == v && n == v->n);
            if (n && v->elem_type == LB_GGUF_TYPE_STRING)
                REQUIRE(lb_gguf_get_arr_str(g, key, n - 1, &s) == LB_OK);
        }
    }
    size_t sum = 0;
    for (int64_t i = 0; i < lb_gguf_n_tensors(g); i++) {
        const lb_gguf_tensor_info *ti = lb_gguf_tensor_at(g, i);
        lb_tensor t;
        REQUIRE(ti && lb_gguf_tensor_view(g, i, &t) == LB_OK);
        REQUIRE(lb_gguf_find_tensor(g, ti->name) == i);
        REQUIRE(ti->offset % align == 0);
        REQUIRE((const uint8_t *)t.data >= data + lb_gguf_data_offset(g));
        REQUIRE(t.nbytes <= (size_t)(end - (const uint8_t *)t.data));
        REQUIRE(lb_tensor_nelements(&t) == ti->n_elements);
        size_t row;
        REQUIRE(lb_row_size(t.type, lb_tensor_cols(&t), &row));
        REQUIRE(t.n_dims == 0 || (uint64_t)row * (uint64_t)lb_tensor_rows(&t) == t.nbytes ||
                lb_tensor_rows(&t) == 0);
        sum += t.nbytes; /* non-overlapping: fits the data section */
        REQUIRE(sum <= lb_gguf_data_size(g));
        volatile uint8_t sink = 0;
        if (t.nbytes) sink ^= ((const uint8_t *)t.data)[t.nbytes - 1];
        (void)sink;
    }
    lb_gguf_close(g);
    return 0;
}
