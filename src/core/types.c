/* Type traits (ggml's type table, ggml.c type_traits, llama.cpp 0.7.0). */
#include "lowbit/quants.h"
#include "internal.h"

#include <strings.h>

static const lb_type_traits traits[LB_TYPE_COUNT_] = {
    [LB_TYPE_F32] = {"F32", 1, 4, false},
    [LB_TYPE_F16] = {"F16", 1, 2, false},
    [LB_TYPE_Q4_0] = {"Q4_0", LB_QK4_0, sizeof(lb_block_q4_0), true},
    [LB_TYPE_Q4_1] = {"Q4_1", LB_QK4_1, sizeof(lb_block_q4_1), true},
    [LB_TYPE_Q5_0] = {"Q5_0", LB_QK5_0, sizeof(lb_block_q5_0), true},
    [LB_TYPE_Q5_1] = {"Q5_1", LB_QK5_1, sizeof(lb_block_q5_1), true},
    [LB_TYPE_Q8_0] = {"Q8_0", LB_QK8_0, sizeof(lb_block_q8_0), true},
    [LB_TYPE_Q8_1] = {"Q8_1", LB_QK8_1, sizeof(lb_block_q8_1), true},
    [LB_TYPE_Q2_K] = {"Q2_K", LB_QK_K, sizeof(lb_block_q2_K), true},
    [LB_TYPE_Q3_K] = {"Q3_K", LB_QK_K, sizeof(lb_block_q3_K), true},
    [LB_TYPE_Q4_K] = {"Q4_K", LB_QK_K, sizeof(lb_block_q4_K), true},
    [LB_TYPE_Q5_K] = {"Q5_K", LB_QK_K, sizeof(lb_block_q5_K), true},
    [LB_TYPE_Q6_K] = {"Q6_K", LB_QK_K, sizeof(lb_block_q6_K), true},
    [LB_TYPE_Q8_K] = {"Q8_K", LB_QK_K, sizeof(lb_block_q8_K), true},
    [LB_TYPE_I8] = {"I8", 1, 1, false},
    [LB_TYPE_I16] = {"I16", 1, 2, false},
    [LB_TYPE_I32] = {"I32", 1, 4, false},
    [LB_TYPE_I64] = {"I64", 1, 8, false},
    [LB_TYPE_F64] = {"F64", 1, 8, false},
    [LB_TYPE_BF16] = {"BF16", 1, 2, false},
    [LB_TYPE_U8] = {"U8", 1, 1, false},
    [LB_TYPE_BOOL] = {"BOOL", 1, 1, false},
    [LB_TYPE_F8_E4M3] = {"F8_E4M3", 1, 1, false},
    [LB_TYPE_F8_E5M2] = {"F8_E5M2", 1, 1, false},
    [LB_TYPE_F8_E4M3_B32] = {"F8_E4M3_B32", 32, 36, true},
    [LB_TYPE_NF4_B64] = {"NF4_B64", 64, 36, true},
    [LB_TYPE_FP4_B64] = {"FP4_B64", 64, 36, true},
    [LB_TYPE_I8_B32] = {"I8_B32", 32, 36, true},
};

const lb_type_traits *lb_type_get_traits(int t) {
    if (t < 0 || t >= LB_TYPE_COUNT_ || !traits[t].name) return NULL;
    return &traits[t];
}

const char *lb_type_name(int t) {
    const lb_type_traits *tr = lb_type_get_traits(t);
    return tr ? tr->name : "?";
}

int lb_type_from_name(const char *name) {
    for (int t = 0; t < LB_TYPE_COUNT_; t++)
        if (traits[t].name && strcasecmp(traits[t].name, name) == 0) return t;
    return -1;
}

bool lb_row_size(lb_type t, int64_t n, size_t *bytes_out) {
    const lb_type_traits *tr = lb_type_get_traits((int)t);
    if (!tr || n < 0 || n % tr->blck_size) return false;
    return lb_mul_ok((size_t)(n / tr->blck_size), (size_t)tr->type_size,
                     bytes_out);
}

int64_t lb_tensor_nelements(const lb_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= t->shape[i];
    return n;
}
