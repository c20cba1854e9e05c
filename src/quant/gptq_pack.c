/*
 * AutoGPTQ checkpoint packing of qweight / qzeros (qlinear_cuda_old.py
 * QuantLinear.pack and its torch dequantization path, AutoGPTQ @9f7d370;
 * qlinear_exllama's pack is the same for 4 bits). See gptq.h for layouts.
 *
 * Both tensors pack a sequence of b-bit fields v[0..n) into 32-bit words,
 * LSB first. For 2/4/8 bits word k holds v[k*(32/b) + j] at bit j*b. For
 * 3 bits each group of 32 fields takes 3 words (96 bits) and field j simply
 * sits at bit 3j of the 96-bit little-endian concatenation, which is what
 * AutoGPTQ's "10 + 2|1 + 10 + 1|2 + 10" construction produces.
 */
#include "lowbit/gptq.h"
#include "core/internal.h"
#include "quant/gptq_internal.h"

int64_t lb_gptq_packed_len(int64_t n, int bits) {
    if (bits != 2 && bits != 3 && bits != 4 && bits != 8) return -1;
    if (n < 32 || n % 32 != 0 || n > INT64_MAX / 8) return -1;
    return n / 32 * bits;
}

/* Field j (b bits) of a sequence packed in words w[] (stride `ws` between
 * consecutive words). */
static inline uint32_t get_field(const int32_t *w, int64_t ws, int64_t j,
                                 int bits) {
    const int64_t bit = j * bits;
    const int64_t k = bit >> 5;
    const int sh = (int)(bit & 31);
    uint64_t lo = (uint32_t)w[k * ws];
    if (sh + bits > 32) lo |= (uint64_t)(uint32_t)w[(k + 1) * ws] << 32;
    return (uint32_t)(lo >> sh) & ((1u << bits) - 1u);
}

static inline void put_field(uint32_t *w, int64_t ws, int64_t j, int bits,
                             uint32_t v) {
    const int64_t bit = j * bits;
    const int64_t k = bit >> 5;
    const int sh = (int)(bit & 31);
    const uint64_t x = (uint64_t)v << sh;
    w[k * ws] |= (uint32_t)x;
    if (sh + bits > 32) w[(k + 1) * ws] |= (uint32_t)(x >> 32);
}

static lb_status check_pack_args(const void *a, const void *b, int64_t n_pack,
                                 int64_t n_other, int bits, const char *who,
                                 const char *dim) {
    if (!a || !b) return lb_set_error(LB_ERR_INVALID_ARG, "%s: NULL", who);
    LB_TRY(lb_gptq_check_bits(bits, who));
    if (n_other < 1)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: bad size %lld", who,
                            (long long)n_other);
    if (lb_gptq_packed_len(n_pack, bits) < 0)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: %s = %lld is not a positive multiple of 32 "
                            "(AutoGPTQ layout)",
                            who, dim, (long long)n_pack);
    size_t t;
    if (!lb_mul_ok((size_t)n_pack, (size_t)n_other, &t))
        return lb_set_error(LB_ERR_OVERFLOW, "%s: size overflows", who);
    return LB_OK;
}

/* codes [out, in] (int32_t, or uint8_t when u8) -> qweight: the packers
 * below, one for each code width */
static lb_status pack_qweight(const void *codes, bool u8, int64_t out,
                              int64_t in, int bits, int32_t *qweight) {
    static const char *who = "lb_gptq_pack_qweight";
    LB_TRY(check_pack_args(codes, qweight, in, out, bits, who, "in_features"));
    const int32_t *c32 = codes;
    const uint8_t *c8 = codes;
    const int64_t rows = lb_gptq_packed_len(in, bits);
    const int32_t maxq = (1 << bits) - 1;
    for (int64_t o = 0; o < out; o++)
        for (int64_t c = 0; c < in; c++) {
            int32_t v = u8 ? c8[o * in + c] : c32[o * in + c];
            if (v < 0 || v > maxq)
                return lb_set_error(LB_ERR_INVALID_ARG,
                                    "%s: code %d at [%lld, %lld] is outside "
                                    "0..%d",
                                    who, v, (long long)o, (long long)c, maxq);
        }
    uint32_t *q = (uint32_t *)qweight;
    memset(q, 0, (size_t)rows * (size_t)out * sizeof(uint32_t));
    /* column o of qweight packs codes[o, 0..in) along the rows */
    for (int64_t o = 0; o < out; o++)
        for (int64_t c = 0; c < in; c++)
            put_field(q + o, out, c, bits,
                      u8 ? c8[o * in + c] : (uint32_t)c32[o * in + c]);
    return LB_OK;
}

lb_status lb_gptq_pack_qweight(const int32_t *codes, int64_t out, int64_t in,
                               int bits, int32_t *qweight) {
    return pack_qweight(codes, false, out, in, bits, qweight);
}

lb_status lb_gptq_pack_qweight_u8(const uint8_t *codes, int64_t out,
                                  int64_t in, int bits, int32_t *qweight) {
    return pack_qweight(codes, true, out, in, bits, qweight);
}

lb_status lb_gptq_unpack_qweight(const int32_t *qweight, int64_t out,
                                 int64_t in, int bits, int32_t *codes) {
    static const char *who = "lb_gptq_unpack_qweight";
    LB_TRY(check_pack_args(qweight, codes, in, out, bits, who, "in_features"));
    for (int64_t o = 0; o < out; o++)
        for (int64_t c = 0; c < in; c++)
            codes[o * in + c] = (int32_t)get_field(qweight + o, out, c, bits);
    return LB_OK;
}

/* check_pack_args for qzeros [n_groups, out], and the format's zero
 * offset: v1 stores zero - 1, v2 the zero itself. */
static lb_status check_qzeros_args(const int32_t *src, const int32_t *dst,
                                   int64_t out, int64_t n_groups, int bits,
                                   lb_gptq_format fmt, const char *who,
                                   int32_t *off) {
    LB_TRY(check_pack_args(src, dst, out, n_groups, bits, who, "out_features"));
    if (fmt != LB_GPTQ_FORMAT_V1 && fmt != LB_GPTQ_FORMAT_V2)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: format %d", who,
                            (int)fmt);
    *off = fmt == LB_GPTQ_FORMAT_V1 ? 1 : 0;
    return LB_OK;
}

lb_status lb_gptq_pack_qzeros(const int32_t *zeros, int64_t n_groups,
                              int64_t out, int bits, lb_gptq_format fmt,
                              int32_t *qzeros) {
    static const char *who = "lb_gptq_pack_qzeros";
    int32_t off = 0;
    LB_TRY(check_qzeros_args(zeros, qzeros, out, n_groups, bits, fmt, who,
                             &off));
    const int64_t cols = lb_gptq_packed_len(out, bits);
    const int32_t maxq = (1 << bits) - 1;
    for (int64_t g = 0; g < n_groups; g++)
        for (int64_t o = 0; o < out; o++) {
            int32_t z = zeros[g * out + o];
            if (z - off < 0 || z - off > maxq)
                return lb_set_error(
                    LB_ERR_RANGE,
                    "%s: zero %d at [group %lld, column %lld] cannot be "
                    "stored in GPTQ %s (allowed %d..%d)%s",
                    who, z, (long long)g, (long long)o,
                    off ? "v1" : "v2", off, maxq + off,
                    off && z == 0 ? "; use the v2 format" : "");
        }
    uint32_t *q = (uint32_t *)qzeros;
    memset(q, 0, (size_t)n_groups * (size_t)cols * sizeof(uint32_t));
    for (int64_t g = 0; g < n_groups; g++)
        for (int64_t o = 0; o < out; o++)
            put_field(q + g * cols, 1, o, bits,
                      (uint32_t)(zeros[g * out + o] - off));
    return LB_OK;
}

lb_status lb_gptq_unpack_qzeros(const int32_t *qzeros, int64_t n_groups,
                                int64_t out, int bits, lb_gptq_format fmt,
                                int32_t *zeros) {
    static const char *who = "lb_gptq_unpack_qzeros";
    int32_t off = 0;
    LB_TRY(check_qzeros_args(qzeros, zeros, out, n_groups, bits, fmt, who,
                             &off));
    const int64_t cols = lb_gptq_packed_len(out, bits);
    for (int64_t g = 0; g < n_groups; g++)
        for (int64_t o = 0; o < out; o++)
            zeros[g * out + o] =
                (int32_t)get_field(qzeros + g * cols, 1, o, bits) + off;
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* AutoAWQ GEMM packing (lowbit/gptq.h LB_GPTQ_FORMAT_AWQ)                   */
/* ------------------------------------------------------------------------ */

/* Nibble i of a packed word holds column 8k + awq_order[i] (AutoAWQ
 * WQLinear_GEMM.from_linear's order_map). */
static const int awq_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};

lb_status lb_awq_pack(const int32_t *v, int64_t rows, int64_t cols,
                      int32_t *packed) {
    static const char *who = "lb_awq_pack";
    if (!v || !packed || rows < 0 || cols <= 0 || cols % 8)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: bad arguments (cols %lld "
                            "must be a positive multiple of 8)", who,
                            (long long)cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols / 8; k++) {
            uint32_t w = 0;
            for (int i = 0; i < 8; i++) {
                int32_t x = v[r * cols + 8 * k + awq_order[i]];
                if (x < 0 || x > 15)
                    return lb_set_error(LB_ERR_INVALID_ARG,
                                        "%s: value %d at [%lld, %lld] is "
                                        "not a 4-bit code", who, x,
                                        (long long)r,
                                        (long long)(8 * k + awq_order[i]));
                w |= (uint32_t)x << (4 * i);
            }
            packed[r * (cols / 8) + k] = (int32_t)w;
        }
    return LB_OK;
}

int32_t lb_awq_field(const void *packed, int64_t cols, int64_t r, int64_t j) {
    /* inverse of awq_order: column 8k + m sits in nibble awq_nibble[m] */
    static const int awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    const uint32_t w = lb_rd_u32((const uint8_t *)packed +
                                 4 * (size_t)(r * (cols / 8) + j / 8));
    return (int32_t)((w >> (4 * awq_nibble[j % 8])) & 15u);
}
