/* 64-byte aligned allocation. */
#include "internal.h"

#include <stdlib.h>

void *lb_alloc(size_t size) {
    size_t rounded;
    if (!lb_add_ok(size, LB_ALIGN - 1, &rounded)) {
        lb_set_error(LB_ERR_OVERFLOW, "allocation of %zu bytes overflows",
                     size);
        return NULL;
    }
    rounded &= ~(size_t)(LB_ALIGN - 1);
    if (rounded == 0) rounded = LB_ALIGN;
    void *p = aligned_alloc(LB_ALIGN, rounded);
    if (!p) lb_set_error(LB_ERR_NOMEM, "out of memory allocating %zu bytes", size);
    return p;
}

void *lb_calloc(size_t count, size_t size) {
    size_t total;
    if (!lb_mul_ok(count, size, &total)) {
        lb_set_error(LB_ERR_OVERFLOW, "allocation of %zu x %zu bytes overflows",
                     count, size);
        return NULL;
    }
    void *p = lb_alloc(total);
    if (p) memset(p, 0, total);
    return p;
}

void lb_free(void *p) { free(p); }
