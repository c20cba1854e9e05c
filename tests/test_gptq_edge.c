/*
 * GPTQ checkpoints at the edges (issue 11, lb_gptq_linear):
 *  - out_features not a multiple of 32 (GPTQModel, 2/3-bit): qzeros rows of
 *    ceil(out*bits/32) words, zero points one little-endian bit stream per
 *    row, packed here independently of lowbit's packer; the dequantized
 *    weights equal scale * (code - zero); a qzeros row too narrow is refused;
 *  - lb_gptq_linear_sanitize: a v1 symmetric module whose stored zeros are
 *    raw (2^(bits-1)) is read as v2; a g_idx that uses one group of several
 *    is dropped (desc_act false) or kept with a warning (desc_act true);
 *    a normal module is left alone. Warnings name the tensor.
 */
#include "th.h"
#include "lowbit/gptq_ckpt.h"
#include "lowbit/gptq.h"
#include "lowbit/core.h"

#include <stdlib.h>
#include <string.h>

static char g_log[4096];
static void log_cb(lb_log_level level, const char *msg, void *user) {
    (void)level;
    (void)user;
    size_t o = strlen(g_log);
    snprintf(g_log + o, sizeof g_log - o, "%s\n", msg);
}

static uint32_t rs = 12345;
static uint32_t urand(void) {
    rs = rs * 1664525u + 1013904223u;
    return rs >> 8;
}

/* set `bits` bits at bit offset `pos` of the little-endian word stream w */
static void put_bits(uint32_t *w, int64_t pos, int bits, uint32_t v) {
    for (int b = 0; b < bits; b++)
        if (v >> b & 1) w[(pos + b) / 32] |= 1u << ((pos + b) % 32);
}

static void test_out_not_multiple_of_32(void) {
    const int64_t out = 40, in = 64;
    const int gs = 32;
    for (int bits = 2; bits <= 4; bits++) {
        const int64_t ng = in / gs, qzc = (out * bits + 31) / 32, rows = in * bits / 32;
        int32_t *codes = malloc((size_t)(out * in) * 4), *zeros = malloc((size_t)(ng * out) * 4);
        uint32_t *qw = calloc((size_t)(rows * out), 4), *qz = calloc((size_t)(ng * qzc), 4);
        float *sc = malloc((size_t)(ng * out) * 4), *W = malloc((size_t)(out * in) * 4);
        const uint32_t maxq = (1u << bits) - 1;
        for (int64_t i = 0; i < out * in; i++) codes[i] = (int32_t)(urand() % (maxq + 1));
        for (int64_t i = 0; i < ng * out; i++) {
            zeros[i] = (int32_t)(urand() % (maxq + 1));
            sc[i] = (float)(1 + urand() % 100) / 64.0f;
        }
        /* qweight column o: codes[o, 0..in) as one bit stream down the rows
         * (word r of the stream is qweight[r, o]) */
        for (int64_t o = 0; o < out; o++) {
            uint32_t *col = calloc((size_t)rows, 4);
            for (int64_t c = 0; c < in; c++) put_bits(col, c * bits, bits, (uint32_t)codes[o * in + c]);
            for (int64_t r = 0; r < rows; r++) qw[r * out + o] = col[r];
            free(col);
        }
        for (int64_t g = 0; g < ng; g++)
            for (int64_t o = 0; o < out; o++)
                put_bits(qz + g * qzc, o * bits, bits, (uint32_t)zeros[g * out + o]);
        lb_gptq_linear l = {.out_features = out, .in_features = in, .bits = bits,
                            .n_groups = ng, .format = LB_GPTQ_FORMAT_V2, .qweight = qw,
                            .qzeros = qz, .scales = sc, .scales_type = LB_TYPE_F32,
                            .group_size = gs, .qzeros_cols = qzc};
        TH_CHECK_OK(lb_gptq_linear_check(&l, "m.down_proj"));
        TH_CHECK_OK(lb_gptq_linear_dequantize(&l, W));
        int64_t bad = 0;
        for (int64_t o = 0; o < out; o++)
            for (int64_t c = 0; c < in; c++) {
                int64_t g = c / gs;
                float want = sc[g * out + o] * (float)(codes[o * in + c] - zeros[g * out + o]);
                bad += W[o * in + c] != want;
            }
        TH_CHECK_MSG(bad == 0, "%d-bit out=40: %lld weights differ", bits, (long long)bad);
        /* without the width, or too narrow: refused */
        l.qzeros_cols = 0;
        TH_CHECK_FAILS(lb_gptq_linear_check(&l, "m.down_proj"), LB_ERR_FORMAT);
        l.qzeros_cols = qzc - 1;
        TH_CHECK_FAILS(lb_gptq_linear_check(&l, "m.down_proj"), LB_ERR_FORMAT);
        TH_CHECK(strstr(lb_last_error(), "cannot hold"));
        free(codes), free(zeros), free(qw), free(qz), free(sc), free(W);
    }
}

static void test_sanitize(void) {
    const int64_t out = 32, in = 64;
    const int bits = 4;
    uint32_t qw[8 * 32] = {0}, qz[2 * 4], gi[64];
    float sc[2 * 32];
    for (int i = 0; i < 64; i++) sc[i] = 0.5f;
    for (int i = 0; i < 8; i++) qz[i] = 0x88888888u; /* raw zero 8 in every field */
    lb_gptq_linear l = {.out_features = out, .in_features = in, .bits = bits, .n_groups = 2,
                        .format = LB_GPTQ_FORMAT_V1, .qweight = qw, .qzeros = qz,
                        .scales = sc, .scales_type = LB_TYPE_F32, .group_size = 32};
    TH_CHECK_OK(lb_gptq_linear_check(&l, "model.layers.0.mlp.up_proj"));
    TH_CHECK_INT(lb_gptq_linear_zero(&l, 0, 0), 9); /* as v1: one step off */
    g_log[0] = '\0';
    TH_CHECK_INT(lb_gptq_linear_sanitize(&l, "model.layers.0.mlp.up_proj", true, false), 1);
    TH_CHECK_INT(l.format, LB_GPTQ_FORMAT_V2);
    TH_CHECK_INT(lb_gptq_linear_zero(&l, 1, 31), 8);
    TH_CHECK(strstr(g_log, "model.layers.0.mlp.up_proj.qzeros") && strstr(g_log, "gptq_v2"));
    /* a real v1 symmetric module (stored 7): untouched; asym: not judged */
    for (int i = 0; i < 8; i++) qz[i] = 0x77777777u;
    l.format = LB_GPTQ_FORMAT_V1;
    TH_CHECK_INT(lb_gptq_linear_sanitize(&l, "m", true, false), 0);
    for (int i = 0; i < 8; i++) qz[i] = 0x88888888u;
    TH_CHECK_INT(lb_gptq_linear_sanitize(&l, "m", false, false), 0);
    TH_CHECK_INT(l.format, LB_GPTQ_FORMAT_V1);
    /* all-zero g_idx on a 2-group layer */
    memset(gi, 0, sizeof gi);
    l.g_idx = gi;
    l.format = LB_GPTQ_FORMAT_V2;
    g_log[0] = '\0';
    TH_CHECK_INT(lb_gptq_linear_sanitize(&l, "model.layers.1.self_attn.o_proj", true, false), 1);
    TH_CHECK(l.g_idx == NULL && lb_gptq_linear_group(&l, 40) == 1);
    TH_CHECK(strstr(g_log, "model.layers.1.self_attn.o_proj.g_idx") && strstr(g_log, "ignored"));
    l.g_idx = gi;
    g_log[0] = '\0';
    TH_CHECK_INT(lb_gptq_linear_sanitize(&l, "m2", true, true), 1); /* desc_act: kept */
    TH_CHECK(l.g_idx == gi && strstr(g_log, "m2.g_idx") && strstr(g_log, "kept as stored"));
    /* a proper g_idx: nothing */
    for (int c = 0; c < 64; c++) gi[c] = (uint32_t)(c / 32);
    TH_CHECK_INT(lb_gptq_linear_sanitize(&l, "m3", true, false), 0);
    TH_CHECK(l.g_idx == gi);
}

int main(void) {
    lb_log_set_callback(log_cb, NULL);
    TH_RUN(test_out_not_multiple_of_32);
    TH_RUN(test_sanitize);
    return th_report();
}
