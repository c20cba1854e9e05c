/*
 * libFuzzer harness for the safetensors header parser (lb_st_parse): any
 * byte string must either parse into views that lie inside the input, or
 * fail with a status and a message — never crash, leak or read outside.
 */
#include "lowbit/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lb_safetensors *st = NULL;
    if (lb_st_parse(data, size, "fuzz", &st) != LB_OK) {
        if (st != NULL || lb_last_error()[0] == '\0') abort();
        return 0;
    }
    /* Touch every view: bytes must be inside the input. */
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < lb_st_count(st); i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        const uint8_t *p = t->data;
        if (t->nbytes && (p < data || p + t->nbytes > data + size)) abort();
        if (t->nbytes) sink ^= p[0] ^ p[t->nbytes - 1];
        if (lb_st_find(st, t->name) != t) abort();
    }
    for (size_t i = 0; i < lb_st_metadata_count(st); i++) {
        const char *k, *v;
        if (!lb_st_metadata_at(st, i, &k, &v) || !k || !v) abort();
    }
    (void)sink;
    lb_st_close(st);
    return 0;
}
