/*
 * bnb.c — bitsandbytes NF4 / FP4 / INT8 codec, quantization_config and
 * quant_state parsing, checked dequantization (lowbit/bnb.h).
 */
#include "lowbit/bnb.h"
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* bitsandbytes backends/utils.py _NF4_QUANT_TABLE (csrc/kernels.cu) */
static const float nf4_table[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
/* functional.get_4bit_type("fp4"): [0, 0.0625, 8, 12, 4, 6, 2, 3, -0, -0.0625,
 * -8, -12, -4, -6, -2, -3] divided by 12 (its absolute maximum), float32 */
static const float fp4_table[16] = {
    0.0f / 12.0f,  0.0625f / 12.0f,  8.0f / 12.0f,  12.0f / 12.0f,
    4.0f / 12.0f,  6.0f / 12.0f,     2.0f / 12.0f,  3.0f / 12.0f,
    -0.0f / 12.0f, -0.0625f / 12.0f, -8.0f / 12.0f, -12.0f / 12.0f,
    -4.0f / 12.0f, -6.0f / 12.0f,    -2.0f / 12.0f, -3.0f / 12.0f};
/* functional.create_dynamic_map(signed=True, max_exponent_bits=7,
 * total_bits=8) as bitsandbytes computes it in torch (float32
 * torch.linspace(0.1, 1, 2^i + 1) midpoints times +-10^(i-6), 0 and 1,
 * sorted): the 256 values torch gives, emitted by tests/data/bnb/
 * make_refs.py (dynamic_map.f32; a C evaluation of the same formula
 * differs from torch's vectorised linspace in the last bit of 42 entries) */
static const float dyn_map[256] = {
    -0x1.fc66660000000p-1f, -0x1.f533340000000p-1f, -0x1.ee00000000000p-1f, -0x1.e6cccc0000000p-1f,
    -0x1.df999a0000000p-1f, -0x1.d866660000000p-1f, -0x1.d133340000000p-1f, -0x1.ca00000000000p-1f,
    -0x1.c2cccc0000000p-1f, -0x1.bb999a0000000p-1f, -0x1.b466660000000p-1f, -0x1.ad33340000000p-1f,
    -0x1.a600000000000p-1f, -0x1.9ecccc0000000p-1f, -0x1.97999a0000000p-1f, -0x1.9066660000000p-1f,
    -0x1.8933340000000p-1f, -0x1.8200000000000p-1f, -0x1.7acccc0000000p-1f, -0x1.73999a0000000p-1f,
    -0x1.6c66680000000p-1f, -0x1.6533340000000p-1f, -0x1.5e00000000000p-1f, -0x1.56cccc0000000p-1f,
    -0x1.4f999a0000000p-1f, -0x1.4866680000000p-1f, -0x1.4133340000000p-1f, -0x1.3a00000000000p-1f,
    -0x1.32cccc0000000p-1f, -0x1.2b999a0000000p-1f, -0x1.2466680000000p-1f, -0x1.1d33340000000p-1f,
    -0x1.1600000000000p-1f, -0x1.0ecccc0000000p-1f, -0x1.0799980000000p-1f, -0x1.0066660000000p-1f,
    -0x1.f266640000000p-2f, -0x1.e400000000000p-2f, -0x1.d599980000000p-2f, -0x1.c733340000000p-2f,
    -0x1.b8cccc0000000p-2f, -0x1.aa66660000000p-2f, -0x1.9c00000000000p-2f, -0x1.8d99980000000p-2f,
    -0x1.7f33340000000p-2f, -0x1.70cccc0000000p-2f, -0x1.6266660000000p-2f, -0x1.5400000000000p-2f,
    -0x1.4599980000000p-2f, -0x1.3733340000000p-2f, -0x1.28cccc0000000p-2f, -0x1.1a66680000000p-2f,
    -0x1.0c00000000000p-2f, -0x1.fb33320000000p-3f, -0x1.de66660000000p-3f, -0x1.c1999a0000000p-3f,
    -0x1.a4cccc0000000p-3f, -0x1.8800000000000p-3f, -0x1.6b33340000000p-3f, -0x1.4e66660000000p-3f,
    -0x1.31999a0000000p-3f, -0x1.14cccc0000000p-3f, -0x1.f000000000000p-4f, -0x1.b666680000000p-4f,
    -0x1.93d70a0000000p-4f, -0x1.8851ee0000000p-4f, -0x1.7cccce0000000p-4f, -0x1.7147ae0000000p-4f,
    -0x1.65c2900000000p-4f, -0x1.5a3d700000000p-4f, -0x1.4eb8540000000p-4f, -0x1.4333340000000p-4f,
    -0x1.37ae140000000p-4f, -0x1.2c28f60000000p-4f, -0x1.20a3d60000000p-4f, -0x1.151eba0000000p-4f,
    -0x1.09999a0000000p-4f, -0x1.fc28f60000000p-5f, -0x1.e51eba0000000p-5f, -0x1.ce147a0000000p-5f,
    -0x1.b70a3e0000000p-5f, -0x1.a000000000000p-5f, -0x1.88f5c20000000p-5f, -0x1.71eb860000000p-5f,
    -0x1.5ae1460000000p-5f, -0x1.43d70a0000000p-5f, -0x1.2cccce0000000p-5f, -0x1.15c2900000000p-5f,
    -0x1.fd70a40000000p-6f, -0x1.cf5c2a0000000p-6f, -0x1.a147ae0000000p-6f, -0x1.7333340000000p-6f,
    -0x1.451eba0000000p-6f, -0x1.170a3e0000000p-6f, -0x1.d1eb860000000p-7f, -0x1.75c2900000000p-7f,
    -0x1.3e76c80000000p-7f, -0x1.2c08300000000p-7f, -0x1.19999a0000000p-7f, -0x1.072b020000000p-7f,
    -0x1.e978d40000000p-8f, -0x1.c49ba60000000p-8f, -0x1.9fbe760000000p-8f, -0x1.7ae1480000000p-8f,
    -0x1.56041a0000000p-8f, -0x1.3126e80000000p-8f, -0x1.0c49ba0000000p-8f, -0x1.ced9140000000p-9f,
    -0x1.851eb80000000p-9f, -0x1.3b645a0000000p-9f, -0x1.e353f80000000p-10f, -0x1.4fdf3a0000000p-10f,
    -0x1.eecbfe0000000p-11f, -0x1.b3d07c0000000p-11f, -0x1.78d5000000000p-11f, -0x1.3dd9820000000p-11f,
    -0x1.02de020000000p-11f, -0x1.8fc5060000000p-12f, -0x1.19ce0a0000000p-12f, -0x1.47ae160000000p-13f,
    -0x1.743e960000000p-14f, -0x1.15df660000000p-14f, -0x1.6f00680000000p-15f, -0x1.64840c0000000p-16f,
    -0x1.040bfe0000000p-17f, -0x1.b435280000000p-19f, -0x1.27476e0000000p-21f, 0x0.0p+0f,
    0x1.27476e0000000p-21f, 0x1.b435280000000p-19f, 0x1.040bfe0000000p-17f, 0x1.64840c0000000p-16f,
    0x1.6f00680000000p-15f, 0x1.15df660000000p-14f, 0x1.743e960000000p-14f, 0x1.47ae160000000p-13f,
    0x1.19ce0a0000000p-12f, 0x1.8fc5060000000p-12f, 0x1.02de020000000p-11f, 0x1.3dd9820000000p-11f,
    0x1.78d5000000000p-11f, 0x1.b3d07c0000000p-11f, 0x1.eecbfe0000000p-11f, 0x1.4fdf3a0000000p-10f,
    0x1.e353f80000000p-10f, 0x1.3b645a0000000p-9f, 0x1.851eb80000000p-9f, 0x1.ced9140000000p-9f,
    0x1.0c49ba0000000p-8f, 0x1.3126e80000000p-8f, 0x1.56041a0000000p-8f, 0x1.7ae1480000000p-8f,
    0x1.9fbe760000000p-8f, 0x1.c49ba60000000p-8f, 0x1.e978d40000000p-8f, 0x1.072b020000000p-7f,
    0x1.19999a0000000p-7f, 0x1.2c08300000000p-7f, 0x1.3e76c80000000p-7f, 0x1.75c2900000000p-7f,
    0x1.d1eb860000000p-7f, 0x1.170a3e0000000p-6f, 0x1.451eba0000000p-6f, 0x1.7333340000000p-6f,
    0x1.a147ae0000000p-6f, 0x1.cf5c2a0000000p-6f, 0x1.fd70a40000000p-6f, 0x1.15c2900000000p-5f,
    0x1.2cccce0000000p-5f, 0x1.43d70a0000000p-5f, 0x1.5ae1460000000p-5f, 0x1.71eb860000000p-5f,
    0x1.88f5c20000000p-5f, 0x1.a000000000000p-5f, 0x1.b70a3e0000000p-5f, 0x1.ce147a0000000p-5f,
    0x1.e51eba0000000p-5f, 0x1.fc28f60000000p-5f, 0x1.09999a0000000p-4f, 0x1.151eba0000000p-4f,
    0x1.20a3d60000000p-4f, 0x1.2c28f60000000p-4f, 0x1.37ae140000000p-4f, 0x1.4333340000000p-4f,
    0x1.4eb8540000000p-4f, 0x1.5a3d700000000p-4f, 0x1.65c2900000000p-4f, 0x1.7147ae0000000p-4f,
    0x1.7cccce0000000p-4f, 0x1.8851ee0000000p-4f, 0x1.93d70a0000000p-4f, 0x1.b666680000000p-4f,
    0x1.f000000000000p-4f, 0x1.14cccc0000000p-3f, 0x1.31999a0000000p-3f, 0x1.4e66660000000p-3f,
    0x1.6b33340000000p-3f, 0x1.8800000000000p-3f, 0x1.a4cccc0000000p-3f, 0x1.c1999a0000000p-3f,
    0x1.de66660000000p-3f, 0x1.fb33320000000p-3f, 0x1.0c00000000000p-2f, 0x1.1a66680000000p-2f,
    0x1.28cccc0000000p-2f, 0x1.3733340000000p-2f, 0x1.4599980000000p-2f, 0x1.5400000000000p-2f,
    0x1.6266660000000p-2f, 0x1.70cccc0000000p-2f, 0x1.7f33340000000p-2f, 0x1.8d99980000000p-2f,
    0x1.9c00000000000p-2f, 0x1.aa66660000000p-2f, 0x1.b8cccc0000000p-2f, 0x1.c733340000000p-2f,
    0x1.d599980000000p-2f, 0x1.e400000000000p-2f, 0x1.f266640000000p-2f, 0x1.0066660000000p-1f,
    0x1.0799980000000p-1f, 0x1.0ecccc0000000p-1f, 0x1.1600000000000p-1f, 0x1.1d33340000000p-1f,
    0x1.2466680000000p-1f, 0x1.2b999a0000000p-1f, 0x1.32cccc0000000p-1f, 0x1.3a00000000000p-1f,
    0x1.4133340000000p-1f, 0x1.4866680000000p-1f, 0x1.4f999a0000000p-1f, 0x1.56cccc0000000p-1f,
    0x1.5e00000000000p-1f, 0x1.6533340000000p-1f, 0x1.6c66680000000p-1f, 0x1.73999a0000000p-1f,
    0x1.7acccc0000000p-1f, 0x1.8200000000000p-1f, 0x1.8933340000000p-1f, 0x1.9066660000000p-1f,
    0x1.97999a0000000p-1f, 0x1.9ecccc0000000p-1f, 0x1.a600000000000p-1f, 0x1.ad33340000000p-1f,
    0x1.b466660000000p-1f, 0x1.bb999a0000000p-1f, 0x1.c2cccc0000000p-1f, 0x1.ca00000000000p-1f,
    0x1.d133340000000p-1f, 0x1.d866660000000p-1f, 0x1.df999a0000000p-1f, 0x1.e6cccc0000000p-1f,
    0x1.ee00000000000p-1f, 0x1.f533340000000p-1f, 0x1.fc66660000000p-1f, 0x1.0000000000000p+0f,
};

const float *lb_bnb_4bit_table(lb_bnb_kind kind) {
    return kind == LB_BNB_FP4 ? fp4_table : nf4_table;
}

const float *lb_bnb_dynamic_map(void) {
    return dyn_map;
}

/* first index of the minimum of |s - code[c]| (torch.argmin); NaN s: 0 */
static int nearest(float s, const float *code, int nc) {
    if (s != s) return 0;
    int best = 0;
    float bd = fabsf(s - code[0]);
    for (int c = 1; c < nc; c++) {
        float d = fabsf(s - code[c]);
        if (d < bd) {
            bd = d;
            best = c;
        }
    }
    return best;
}

static float clamp1(float v) { return v < -1.0f ? -1.0f : v > 1.0f ? 1.0f : v; }

static void blockwise(const float *x, int64_t n, int bs, const float *code, int nc,
                      uint8_t *q, float *absmax, bool pack4) {
    int64_t nb = (n + bs - 1) / bs;
    for (int64_t b = 0; b < nb; b++) {
        int64_t i0 = b * bs, i1 = i0 + bs < n ? i0 + bs : n;
        float am = 0.0f;
        for (int64_t i = i0; i < i1; i++) am = fmaxf(am, fabsf(x[i]));
        absmax[b] = am;
        float r = 1.0f / am;
        for (int64_t i = i0; i < i1; i++) {
            int c = nearest(clamp1(x[i] * r), code, nc);
            if (!pack4) q[i] = (uint8_t)c;
            else if (i % 2 == 0) q[i / 2] = (uint8_t)(c << 4);
            else q[i / 2] |= (uint8_t)c;
        }
    }
    if (pack4 && n % 2) q[n / 2] |= (uint8_t)nearest(0.0f, code, nc); /* padding 0.0 */
}

lb_status lb_bnb_quantize_4bit(lb_bnb_kind kind, const float *x, int64_t n, int blocksize,
                               uint8_t *packed, float *absmax) {
    if (!x || !packed || !absmax || n <= 0 || blocksize <= 0 || kind == LB_BNB_INT8)
        return lb_set_error(LB_ERR_INVALID_ARG, "bnb quantize_4bit: bad arguments");
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return lb_set_error(LB_ERR_FORMAT, "non-finite weight at index %lld", (long long)i);
    blockwise(x, n, blocksize, lb_bnb_4bit_table(kind), 16, packed, absmax, true);
    return LB_OK;
}

void lb_bnb_quantize_blockwise8(const float *x, int64_t n, int blocksize, const float *code,
                                uint8_t *q, float *absmax) {
    blockwise(x, n, blocksize, code, 256, q, absmax, false);
}

void lb_bnb_quantize_int8(const float *W, int64_t out, int64_t in, int8_t *codes, float *scb) {
    for (int64_t r = 0; r < out; r++) {
        const float *w = W + r * in;
        float am = 0.0f;
        for (int64_t i = 0; i < in; i++) am = fmaxf(am, fabsf(w[i]));
        scb[r] = am;
        float f = 127.0f / am;
        for (int64_t i = 0; i < in; i++) {
            float v = nearbyintf(w[i] * f); /* torch.round: half to even */
            codes[r * in + i] = (int8_t)(v != v ? 0 : v > 127.0f ? 127 : v < -128.0f ? -128 : v);
        }
    }
}

lb_status lb_bnb_qconfig_parse(const char *json, size_t len, const char *label,
                               lb_bnb_qconfig *q, bool *is_bnb) {
    *is_bnb = false;
    memset(q, 0, sizeof *q);
    q->blocksize = 64;
    cJSON *o = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return lb_set_error(LB_ERR_FORMAT, "%s: not a JSON object", label);
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "quant_method");
    if (!cJSON_IsString(m) || strcmp(m->valuestring, "bitsandbytes")) {
        cJSON_Delete(o);
        return LB_OK;
    }
    *is_bnb = true;
    bool b4 = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "load_in_4bit")) ||
              cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "_load_in_4bit"));
    bool b8 = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "load_in_8bit")) ||
              cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "_load_in_8bit"));
    lb_status s = LB_OK;
    if (b4 == b8) {
        s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: bitsandbytes config with %s of load_in_4bit / "
                         "load_in_8bit", label, b4 ? "both" : "neither");
    } else if (b8) {
        q->kind = LB_BNB_INT8;
    } else {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "bnb_4bit_quant_type");
        const char *ts = cJSON_IsString(t) ? t->valuestring : "fp4"; /* transformers' default */
        if (!strcmp(ts, "nf4")) q->kind = LB_BNB_NF4;
        else if (!strcmp(ts, "fp4")) q->kind = LB_BNB_FP4;
        else s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: unknown bnb_4bit_quant_type '%s' (nf4 or "
                              "fp4)", label, ts);
        q->double_quant = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "bnb_4bit_use_double_quant"));
    }
    cJSON_Delete(o);
    return s;
}

static bool json_int(const cJSON *o, const char *k, int64_t lo, int64_t hi, int64_t *v) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble) || j->valuedouble < (double)lo ||
        j->valuedouble > (double)hi)
        return false;
    *v = (int64_t)j->valuedouble;
    return true;
}

lb_status lb_bnb_qstate_parse(const uint8_t *blob, size_t len, const char *name,
                              lb_bnb_qstate *qs) {
    memset(qs, 0, sizeof *qs);
    cJSON *o = cJSON_ParseWithLength((const char *)blob, len);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return lb_set_error(LB_ERR_FORMAT, "%s: quant_state blob is not a JSON object", name);
    }
    lb_status s = LB_OK;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "quant_type");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shape");
    int64_t bs = 0, nbs = 0;
    if (!cJSON_IsString(t)) s = lb_set_error(LB_ERR_FORMAT, "%s: quant_state has no quant_type", name);
    else if (!strcmp(t->valuestring, "nf4")) qs->kind = LB_BNB_NF4;
    else if (!strcmp(t->valuestring, "fp4")) qs->kind = LB_BNB_FP4;
    else s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: quant_state: unknown quant_type '%s' (nf4 or "
                          "fp4)", name, t->valuestring);
    if (s == LB_OK && !json_int(o, "blocksize", 1, 1 << 20, &bs))
        s = lb_set_error(LB_ERR_FORMAT, "%s: quant_state: blocksize missing or outside 1..2^20", name);
    if (s == LB_OK && (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) != 2))
        s = lb_set_error(LB_ERR_FORMAT, "%s: quant_state: shape is not [out, in]", name);
    for (int i = 0; i < 2 && s == LB_OK; i++) {
        const cJSON *d = cJSON_GetArrayItem(sh, i);
        if (!cJSON_IsNumber(d) || d->valuedouble < 1 || d->valuedouble > (double)(1 << 30) ||
            d->valuedouble != floor(d->valuedouble))
            s = lb_set_error(LB_ERR_FORMAT, "%s: quant_state: bad shape dimension", name);
        else qs->shape[i] = (int64_t)d->valuedouble;
    }
    qs->blocksize = (int)bs;
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(o, "nested_offset");
    if (s == LB_OK && (off || cJSON_GetObjectItemCaseSensitive(o, "nested_blocksize"))) {
        qs->nested = true;
        if (!json_int(o, "nested_blocksize", 1, 1 << 20, &nbs))
            s = lb_set_error(LB_ERR_FORMAT, "%s: quant_state: nested_blocksize missing or bad", name);
        else if (!cJSON_IsNumber(off) || !isfinite(off->valuedouble))
            s = lb_set_error(LB_ERR_FORMAT, "%s: quant_state: nested_offset missing or not finite",
                             name);
        else {
            qs->nested_blocksize = (int)nbs;
            qs->nested_offset = (float)off->valuedouble;
        }
    }
    cJSON_Delete(o);
    return s;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static lb_status want(const char *name, const char *what, const lb_tensor *t, lb_type ty,
                      int64_t n) {
    if (!t) return lb_set_error(LB_ERR_NOT_FOUND, "%s.%s: tensor missing", name, what);
    int64_t ne = 1;
    for (int i = 0; i < t->n_dims; i++) ne *= t->shape[i];
    if (t->type != ty)
        return lb_set_error(LB_ERR_FORMAT, "%s.%s: dtype %s, expected %s", name, what,
                            lb_type_name(t->type), lb_type_name(ty));
    if (ne != n)
        return lb_set_error(LB_ERR_FORMAT, "%s.%s: %lld elements, expected %lld", name, what,
                            (long long)ne, (long long)n);
    return LB_OK;
}

/* The checks shared by lb_bnb_dequantize_4bit and lb_bnb_4bit_to_b64:
 * every size, dtype and the blob against each other; *am (malloc'd,
 * nabs entries) receives the decoded per-block absmax, qm the quant_map. */
static lb_status check_4bit(const char *name, const lb_bnb_4bit_tensors *t, int64_t out,
                            int64_t in, lb_bnb_qstate *qs, float qm[16], float **am_out) {
    *am_out = NULL;
    if (!t->state) return lb_set_error(LB_ERR_NOT_FOUND, "%s.weight: quant_state tensor missing", name);
    if (t->state->type != LB_TYPE_U8 || t->state->n_dims != 1)
        return lb_set_error(LB_ERR_FORMAT, "%s.weight.quant_state: not a 1-D uint8 tensor", name);
    char tn[300];
    snprintf(tn, sizeof tn, "%s.weight.quant_state", name);
    LB_TRY(lb_bnb_qstate_parse(t->state->data, (size_t)t->state->shape[0], tn, qs));
    if (qs->shape[0] != out || qs->shape[1] != in)
        return lb_set_error(LB_ERR_FORMAT, "%s: quant_state shape [%lld, %lld], expected [%lld, "
                            "%lld]", tn, (long long)qs->shape[0], (long long)qs->shape[1],
                            (long long)out, (long long)in);
    int64_t n = out * in, nabs = ceil_div(n, qs->blocksize);
    LB_TRY(want(name, "weight", t->weight, LB_TYPE_U8, (n + 1) / 2));
    LB_TRY(want(name, "weight.quant_map", t->quant_map, LB_TYPE_F32, 16));
    LB_TRY(want(name, "weight.absmax", t->absmax, qs->nested ? LB_TYPE_U8 : LB_TYPE_F32, nabs));
    if (qs->nested) {
        LB_TRY(want(name, "weight.nested_absmax", t->nested_absmax, LB_TYPE_F32,
                    ceil_div(nabs, qs->nested_blocksize)));
        LB_TRY(want(name, "weight.nested_quant_map", t->nested_quant_map, LB_TYPE_F32, 256));
    }
    float nm[256];
    memcpy(qm, t->quant_map->data, 16 * sizeof *qm); /* tensor data may be unaligned */
    for (int i = 0; i < 16; i++)
        if (!isfinite(qm[i]))
            return lb_set_error(LB_ERR_FORMAT, "%s.weight.quant_map: non-finite entry", name);
    float *am = malloc((size_t)nabs * sizeof *am);
    if (!am) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", name);
    if (qs->nested) {
        const uint8_t *qa = t->absmax->data, *na = t->nested_absmax->data;
        memcpy(nm, t->nested_quant_map->data, sizeof nm);
        for (int64_t i = 0; i < nabs; i++) {
            float a2;
            memcpy(&a2, na + (size_t)(i / qs->nested_blocksize) * 4, 4);
            am[i] = nm[qa[i]] * a2 + qs->nested_offset;
        }
    } else {
        memcpy(am, t->absmax->data, (size_t)nabs * sizeof *am);
    }
    for (int64_t i = 0; i < nabs; i++)
        if (!isfinite(am[i])) {
            free(am);
            return lb_set_error(LB_ERR_FORMAT, "%s.weight.absmax: non-finite block scale %lld", name,
                                (long long)i);
        }
    *am_out = am;
    return LB_OK;
}

lb_status lb_bnb_dequantize_4bit(const char *name, const lb_bnb_4bit_tensors *t, int64_t out,
                                 int64_t in, float *W) {
    lb_bnb_qstate qs;
    float qm[16], *am;
    LB_TRY(check_4bit(name, t, out, in, &qs, qm, &am));
    const uint8_t *p = t->weight->data;
    for (int64_t i = 0, n = out * in; i < n; i++) {
        uint8_t c = i % 2 ? p[i / 2] & 15 : p[i / 2] >> 4;
        W[i] = qm[c] * am[i / qs.blocksize];
    }
    free(am);
    return LB_OK;
}

lb_status lb_bnb_4bit_to_b64(const char *name, lb_bnb_kind kind, const lb_bnb_4bit_tensors *t,
                             int64_t out, int64_t in, lb_block_bnb4_b64 *dst) {
    if (kind != LB_BNB_NF4 && kind != LB_BNB_FP4)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: not a 4-bit kind", name);
    lb_bnb_qstate qs;
    float qm[16], *am;
    LB_TRY(check_4bit(name, t, out, in, &qs, qm, &am));
    const char *why = NULL;
    if (qs.kind != kind) why = "quant_state's quant_type differs from the requested kind";
    else if (in % 64) why = "in_features is not a multiple of 64";
    else if (qs.blocksize % 64) why = "blocksize is not a multiple of 64";
    else if (memcmp(qm, lb_bnb_4bit_table(kind), sizeof qm))
        why = "weight.quant_map differs from the standard table";
    if (why) {
        free(am);
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: not held as 64-blocks: %s", name, why);
    }
    /* bitsandbytes: flat element i in byte i/2, high nibble first; here
     * element j of a 64-block in the low nibble of qs[j % 32] (j < 32) or
     * the high nibble (j >= 32) */
    const uint8_t *p = t->weight->data;
    for (int64_t b = 0, nb = out * in / 64; b < nb; b++) {
        const uint8_t *src = p + b * 32;
        lb_block_bnb4_b64 *o = &dst[b];
        float d = am[b * 64 / qs.blocksize];
        memcpy(&o->d, &d, sizeof d);
        uint8_t c[64];
        for (int k = 0; k < 32; k++) {
            c[2 * k] = src[k] >> 4;
            c[2 * k + 1] = src[k] & 15;
        }
        for (int j = 0; j < 32; j++) o->qs[j] = (uint8_t)(c[j] | c[j + 32] << 4);
    }
    free(am);
    return LB_OK;
}

void lb_dequantize_row_bnb4_b64(lb_bnb_kind kind, const lb_block_bnb4_b64 *x, float *y,
                                int64_t n) {
    const float *tab = lb_bnb_4bit_table(kind);
    for (int64_t b = 0; b < n / 64; b++) {
        float d;
        memcpy(&d, &x[b].d, sizeof d);
        for (int j = 0; j < 32; j++) {
            y[b * 64 + j] = tab[x[b].qs[j] & 15] * d;
            y[b * 64 + 32 + j] = tab[x[b].qs[j] >> 4] * d;
        }
    }
}

void lb_dequantize_row_i8_b32(const lb_block_i8_b32 *x, float *y, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        float d;
        memcpy(&d, &x[b].d, sizeof d);
        for (int j = 0; j < 32; j++) y[b * 32 + j] = (float)x[b].qs[j] * d;
    }
}

lb_status lb_bnb_dequantize_int8(const char *name, const lb_tensor *w, const lb_tensor *scb,
                                 int64_t out, int64_t in, float *W) {
    LB_TRY(want(name, "weight", w, LB_TYPE_I8, out * in));
    if (w->n_dims != 2 || w->shape[0] != out)
        return lb_set_error(LB_ERR_FORMAT, "%s.weight: expected [%lld, %lld]", name,
                            (long long)out, (long long)in);
    LB_TRY(want(name, "SCB", scb, LB_TYPE_F32, out));
    const int8_t *q = w->data;
    const uint8_t *sb = scb->data;
    for (int64_t r = 0; r < out; r++) {
        float sr;
        memcpy(&sr, sb + (size_t)r * 4, 4);
        if (!isfinite(sr))
            return lb_set_error(LB_ERR_FORMAT, "%s.SCB: non-finite scale of row %lld", name,
                                (long long)r);
        /* transformers' dequantize_bnb_weight: weight * SCB * 7.874015718698502e-3 */
        for (int64_t i = 0; i < in; i++)
            W[r * in + i] = (float)q[r * in + i] * sr * 7.874015718698502e-3f;
    }
    return LB_OK;
}

lb_status lb_bnb_int8_to_b32(const char *name, const lb_tensor *w, const lb_tensor *scb,
                             int64_t out, int64_t in, lb_block_i8_b32 *dst) {
    LB_TRY(want(name, "weight", w, LB_TYPE_I8, out * in));
    if (w->n_dims != 2 || w->shape[0] != out)
        return lb_set_error(LB_ERR_FORMAT, "%s.weight: expected [%lld, %lld]", name,
                            (long long)out, (long long)in);
    LB_TRY(want(name, "SCB", scb, LB_TYPE_F32, out));
    if (in % 32)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: not held as 32-blocks: in_features is not a "
                            "multiple of 32", name);
    const int8_t *q = w->data;
    const uint8_t *sb = scb->data;
    for (int64_t r = 0; r < out; r++) {
        float sr;
        memcpy(&sr, sb + (size_t)r * 4, 4);
        if (!isfinite(sr))
            return lb_set_error(LB_ERR_FORMAT, "%s.SCB: non-finite scale of row %lld", name,
                                (long long)r);
        float d = sr * 7.874015718698502e-3f;
        for (int64_t b = 0; b < in / 32; b++) {
            lb_block_i8_b32 *o = &dst[r * (in / 32) + b];
            memcpy(&o->d, &d, sizeof d);
            memcpy(o->qs, q + r * in + b * 32, 32);
        }
    }
    return LB_OK;
}
