/*
 * GPTQ checkpoint packing: qweight/qzeros pack/unpack round trips for 2/3/4/8
 * bits, a literal transcription of AutoGPTQ's pack loop (incl. the 3-bit
 * scheme) as a second implementation, v1/v2 zero conventions, and
 * byte-equality with the checkpoint AutoGPTQ's own packer wrote
 * (../shared/reference/gptq_model/gptq_checkpoint) from the codes/zeros in
 * quant_tensors.safetensors.
 */
#include "lowbit/gptq.h"
#include "test_gptq_st.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

/* AutoGPTQ qlinear_cuda_old.QuantLinear.pack, transcribed literally: the
 * sequence v[0..n) (uint32, already in range) packed into words w. */
static void autogptq_pack_seq(const uint32_t *v, int64_t n, int bits,
                              uint32_t *w) {
    int64_t i = 0, row = 0, rows = n / 32 * bits;
    memset(w, 0, sizeof(uint32_t) * rows);
    while (row < rows) {
        if (bits != 3) {
            for (int64_t j = i; j < i + 32 / bits; j++)
                w[row] |= v[j] << (bits * (j - i));
            i += 32 / bits;
            row++;
        } else {
            for (int64_t j = i; j < i + 10; j++) w[row] |= v[j] << (3 * (j - i));
            i += 10;
            w[row] |= v[i] << 30;
            row++;
            w[row] |= (v[i] >> 2) & 1;
            i++;
            for (int64_t j = i; j < i + 10; j++)
                w[row] |= v[j] << (3 * (j - i) + 1);
            i += 10;
            w[row] |= v[i] << 31;
            row++;
            w[row] |= (v[i] >> 1) & 0x3;
            i++;
            for (int64_t j = i; j < i + 10; j++)
                w[row] |= v[j] << (3 * (j - i) + 2);
            i += 10;
            row++;
        }
    }
}

static void test_sizes(void) {
    TH_CHECK_INT(lb_gptq_packed_len(128, 4), 16);
    TH_CHECK_INT(lb_gptq_packed_len(128, 3), 12);
    TH_CHECK_INT(lb_gptq_packed_len(384, 2), 24);
    TH_CHECK_INT(lb_gptq_packed_len(64, 8), 16);
    TH_CHECK_INT(lb_gptq_packed_len(40, 4), -1);
    TH_CHECK_INT(lb_gptq_packed_len(0, 4), -1);
    TH_CHECK_INT(lb_gptq_packed_len(128, 5), -1);
}

static void test_known_words(void) {
    /* 4-bit: codes 0..7 of column 0 -> 0x76543210 (LSB first) */
    int32_t codes[32 * 2], qw[4 * 2];
    for (int c = 0; c < 32; c++) {
        codes[c] = c & 15;         /* row 0 */
        codes[32 + c] = 15 - (c & 15); /* row 1 */
    }
    TH_CHECK_OK(lb_gptq_pack_qweight(codes, 2, 32, 4, qw));
    TH_CHECK((uint32_t)qw[0 * 2 + 0] == 0x76543210u);
    TH_CHECK((uint32_t)qw[1 * 2 + 0] == 0xFEDCBA98u);
    TH_CHECK((uint32_t)qw[0 * 2 + 1] == 0x89ABCDEFu);
    /* 3-bit: code 10 straddles words 0/1 and code 21 words 1/2 */
    int32_t c3[32] = {0}, q3[3];
    c3[10] = 5; /* 0b101: bits 0-1 -> word0 bits 30-31, bit 2 -> word1 bit 0 */
    c3[21] = 6; /* 0b110: bit 0 -> word1 bit 31, bits 1-2 -> word2 bits 0-1 */
    c3[31] = 7; /* word2 bits 29..31 */
    TH_CHECK_OK(lb_gptq_pack_qweight(c3, 1, 32, 3, q3));
    TH_CHECK((uint32_t)q3[0] == 0x40000000u);
    TH_CHECK((uint32_t)q3[1] == 0x00000001u);
    TH_CHECK((uint32_t)q3[2] == 0xE0000003u);
}

static void test_roundtrip_vs_autogptq(void) {
    const int bits[] = {2, 3, 4, 8};
    for (int b = 0; b < 4; b++) {
        const int64_t out = 64, in = 96 * 2; /* multiples of 32 */
        const int32_t maxq = (1 << bits[b]) - 1;
        const int64_t rows = lb_gptq_packed_len(in, bits[b]);
        int32_t *codes = malloc(sizeof(int32_t) * out * in);
        int32_t *back = malloc(sizeof(int32_t) * out * in);
        int32_t *qw = malloc(sizeof(int32_t) * rows * out);
        uint32_t *seq = malloc(sizeof(uint32_t) * in);
        uint32_t *words = malloc(sizeof(uint32_t) * rows);
        for (int64_t i = 0; i < out * in; i++)
            codes[i] = (int32_t)(urand() % (uint32_t)(maxq + 1));
        TH_CHECK_OK(lb_gptq_pack_qweight(codes, out, in, bits[b], qw));
        TH_CHECK_OK(lb_gptq_unpack_qweight(qw, out, in, bits[b], back));
        TH_CHECK(memcmp(codes, back, sizeof(int32_t) * out * in) == 0);
        /* AutoGPTQ packs intweight.t() = [in, out] column by column */
        int64_t bad = 0;
        for (int64_t o = 0; o < out; o++) {
            for (int64_t c = 0; c < in; c++) seq[c] = (uint32_t)codes[o * in + c];
            autogptq_pack_seq(seq, in, bits[b], words);
            for (int64_t r = 0; r < rows; r++)
                bad += (uint32_t)qw[r * out + o] != words[r];
        }
        TH_CHECK_MSG(bad == 0, "bits %d: %lld words differ from AutoGPTQ's",
                     bits[b], (long long)bad);

        /* qzeros: [n_groups, out], v1 and v2 */
        const int64_t ng = 3, zc = lb_gptq_packed_len(out, bits[b]);
        int32_t z[3 * 64], zb[3 * 64], qz[3 * 64];
        uint32_t zs[64], zw[64];
        for (int64_t i = 0; i < ng * out; i++)
            z[i] = 1 + (int32_t)(urand() % (uint32_t)maxq); /* 1..maxq */
        for (int f = 1; f <= 2; f++) {
            TH_CHECK_OK(lb_gptq_pack_qzeros(z, ng, out, bits[b],
                                            (lb_gptq_format)f, qz));
            TH_CHECK_OK(lb_gptq_unpack_qzeros(qz, ng, out, bits[b],
                                              (lb_gptq_format)f, zb));
            TH_CHECK(memcmp(z, zb, sizeof(int32_t) * ng * out) == 0);
            for (int64_t g = 0; g < ng; g++) {
                for (int64_t o = 0; o < out; o++)
                    zs[o] = (uint32_t)(z[g * out + o] - (f == 1));
                autogptq_pack_seq(zs, out, bits[b], zw);
                TH_CHECK(memcmp(zw, qz + g * zc, sizeof(uint32_t) * zc) == 0);
            }
        }
        /* zero 0: v2 only; a v1 field of maxq reads back as 2^bits */
        z[5] = 0;
        TH_CHECK_FAILS(lb_gptq_pack_qzeros(z, ng, out, bits[b],
                                           LB_GPTQ_FORMAT_V1, qz),
                       LB_ERR_RANGE);
        TH_CHECK(strstr(lb_last_error(), "v2") != NULL);
        TH_CHECK_OK(lb_gptq_pack_qzeros(z, ng, out, bits[b], LB_GPTQ_FORMAT_V2,
                                        qz));
        TH_CHECK_OK(lb_gptq_unpack_qzeros(qz, ng, out, bits[b],
                                          LB_GPTQ_FORMAT_V1, zb));
        TH_CHECK_INT(zb[5], 1); /* field 0 + 1 */
        z[5] = maxq + 1;        /* v1 can store 2^bits (field maxq) */
        TH_CHECK_FAILS(lb_gptq_pack_qzeros(z, ng, out, bits[b],
                                           LB_GPTQ_FORMAT_V2, qz),
                       LB_ERR_RANGE);
        TH_CHECK_OK(lb_gptq_pack_qzeros(z, ng, out, bits[b], LB_GPTQ_FORMAT_V1,
                                        qz));
        TH_CHECK_OK(lb_gptq_unpack_qzeros(qz, ng, out, bits[b],
                                          LB_GPTQ_FORMAT_V1, zb));
        TH_CHECK_INT(zb[5], maxq + 1);
        TH_CHECK_OK(lb_gptq_unpack_qzeros(qz, ng, out, bits[b],
                                          LB_GPTQ_FORMAT_V2, zb));
        TH_CHECK_INT(zb[5], maxq);
        free(codes), free(back), free(qw), free(seq), free(words);
    }
}

static void test_bad_args(void) {
    int32_t codes[64 * 2] = {0}, qw[64] = {0}, z[64] = {0};
    TH_CHECK_FAILS(lb_gptq_pack_qweight(codes, 2, 40, 4, qw),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "multiple of 32") != NULL);
    TH_CHECK_FAILS(lb_gptq_pack_qweight(codes, 2, 32, 5, qw),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gptq_pack_qweight(codes, 0, 32, 4, qw),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gptq_pack_qweight(NULL, 2, 32, 4, qw),
                   LB_ERR_INVALID_ARG);
    codes[33] = 16;
    TH_CHECK_FAILS(lb_gptq_pack_qweight(codes, 2, 32, 4, qw),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "[1, 1]") != NULL);
    codes[33] = -1;
    TH_CHECK_FAILS(lb_gptq_pack_qweight(codes, 2, 32, 4, qw),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gptq_unpack_qweight(qw, 2, 48, 2, codes),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gptq_pack_qzeros(z, 1, 32, 4, (lb_gptq_format)3, qw),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gptq_unpack_qzeros(qw, 1, 36, 4, LB_GPTQ_FORMAT_V2, z),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gptq_unpack_qzeros(qw, 0, 32, 4, LB_GPTQ_FORMAT_V2, z),
                   LB_ERR_INVALID_ARG);
}

/* A GPTQ/RTN result to checkpoint layout and back. */
static void test_result_to_checkpoint(void) {
    enum { NO = 64, NI = 96 };
    float *W = malloc(sizeof(float) * NO * NI);
    for (int i = 0; i < NO * NI; i++) W[i] = (float)((int)(urand() % 2001) - 1000) / 997.0f;
    lb_gptq_result r;
    TH_CHECK_OK(lb_rtn_quantize(W, NO, NI, 3, 32, false, false, &r));
    if (!r.codes) {
        free(W);
        return;
    }
    const int64_t ng = r.n_groups;
    float *sg = malloc(sizeof(float) * ng * NO);
    int32_t *zg = malloc(sizeof(int32_t) * ng * NO), *zb = malloc(sizeof(int32_t) * ng * NO);
    int32_t *qw = malloc(sizeof(int32_t) * NI * 3 / 32 * NO), *cb = malloc(sizeof(int32_t) * NO * NI);
    int32_t *qz = malloc(sizeof(int32_t) * ng * NO * 3 / 32);
    TH_CHECK_OK(lb_gptq_result_groups_major(&r, sg, zg));
    for (int64_t o = 0; o < NO; o++)
        for (int64_t g = 0; g < ng; g++) {
            TH_CHECK(sg[g * NO + o] == r.scales[o * ng + g]);
            TH_CHECK_INT(zg[g * NO + o], r.zeros[o * ng + g]);
        }
    TH_CHECK_OK(lb_gptq_pack_qweight_u8(r.codes, NO, NI, 3, qw));
    TH_CHECK_OK(lb_gptq_pack_qzeros(zg, ng, NO, 3, LB_GPTQ_FORMAT_V2, qz));
    TH_CHECK_OK(lb_gptq_unpack_qweight(qw, NO, NI, 3, cb));
    TH_CHECK_OK(lb_gptq_unpack_qzeros(qz, ng, NO, 3, LB_GPTQ_FORMAT_V2, zb));
    /* dequantize from the packed form == W_deq */
    int64_t bad = 0;
    for (int64_t o = 0; o < NO; o++)
        for (int64_t c = 0; c < NI; c++) {
            int32_t g = r.g_idx[c];
            float v = sg[g * NO + o] * (float)(cb[o * NI + c] - zb[g * NO + o]);
            bad += v != r.W_deq[o * NI + c];
        }
    TH_CHECK_INT(bad, 0);
    /* the one-byte codes unpack to themselves, and the int32 packer gives
     * the same qweight words from the same values */
    int64_t nc = 0;
    for (int64_t i = 0; i < NO * NI; i++) nc += cb[i] != (int32_t)r.codes[i];
    TH_CHECK_INT(nc, 0);
    int32_t *qw2 = malloc(sizeof(int32_t) * NI * 3 / 32 * NO);
    TH_CHECK_OK(lb_gptq_pack_qweight(cb, NO, NI, 3, qw2));
    TH_CHECK(memcmp(qw, qw2, sizeof(int32_t) * NI * 3 / 32 * NO) == 0);
    free(qw2);
    r.codes[5] = 8; /* outside 0..7 */
    TH_CHECK_FAILS(lb_gptq_pack_qweight_u8(r.codes, NO, NI, 3, qw),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gptq_pack_qweight_u8(r.codes, NO, 48, 3, qw),
                   LB_ERR_INVALID_ARG); /* in % 32 */
    lb_gptq_result_free(&r);
    free(W), free(sg), free(zg), free(zb), free(qw), free(cb), free(qz);
}

/* lowbit's packer == AutoGPTQ's packer on the real checkpoint; lowbit's
 * unpacker reads it back to the solver's codes/zeros. */
static void test_autogptq_checkpoint(void) {
    tst_file ck, qt;
    if (!tst_open(&ck, th_shared("reference/gptq_model/gptq_checkpoint/"
                                 "gptq_model-4bit-128g.safetensors")) ||
        !tst_open(&qt, th_shared("reference/gptq_model/quant_tensors.safetensors"))) {
        TH_CHECK_MSG(0, "cannot read the gptq_model reference files");
        return;
    }
    static const char *mods[] = {"self_attn.k_proj", "self_attn.v_proj",
                                 "self_attn.q_proj", "self_attn.o_proj",
                                 "mlp.up_proj",      "mlp.gate_proj",
                                 "mlp.down_proj"};
    int n_linear = 0;
    int64_t n_words = 0, n_word_diff = 0, n_zero_diff = 0, n_code_diff = 0,
            n_scale_diff = 0, n_gidx_diff = 0;
    for (int layer = 0; layer < 2; layer++)
        for (int m = 0; m < 7; m++) {
            char base[128], name[192];
            snprintf(base, sizeof base, "model.layers.%d.%s", layer, mods[m]);
            int64_t sq[4], ss[4], sz[4], sg[4], cq[4], cz[4], cs[4], cg[4];
            int nd;
#define GET(var, f, type, dt, suffix, shape)                                   \
    snprintf(name, sizeof name, suffix, base);                                 \
    const type *var = tst_get(&f, name, dt, shape, &nd);
            GET(codes, qt, int32_t, "I32", "gptq.%s.codes", sq);
            GET(scale, qt, float, "F32", "gptq.%s.scale", ss);
            GET(zero, qt, int32_t, "I32", "gptq.%s.zero", sz);
            GET(gidx, qt, int32_t, "I32", "gptq.%s.g_idx", sg);
            GET(qweight, ck, int32_t, "I32", "%s.qweight", cq);
            GET(qzeros, ck, int32_t, "I32", "%s.qzeros", cz);
            GET(scales, ck, uint16_t, "F16", "%s.scales", cs);
            GET(ck_gidx, ck, int32_t, "I32", "%s.g_idx", cg);
#undef GET
            TH_CHECK_MSG(codes && scale && zero && gidx && qweight && qzeros &&
                             scales && ck_gidx,
                         "tensors of %s", base);
            if (!(codes && scale && zero && gidx && qweight && qzeros &&
                  scales && ck_gidx))
                continue;
            const int64_t out = sq[0], in = sq[1], ng = ss[1];
            TH_CHECK_INT(cq[0], lb_gptq_packed_len(in, 4));
            TH_CHECK_INT(cq[1], out);
            TH_CHECK_INT(cz[0], ng);
            TH_CHECK_INT(cz[1], lb_gptq_packed_len(out, 4));
            TH_CHECK_INT(cs[0], ng);
            TH_CHECK_INT(cs[1], out);
            const int64_t nqw = cq[0] * cq[1], nqz = cz[0] * cz[1];
            int32_t *qw = malloc(sizeof(int32_t) * nqw);
            int32_t *qz = malloc(sizeof(int32_t) * nqz);
            int32_t *zgo = malloc(sizeof(int32_t) * ng * out);
            int32_t *cb = malloc(sizeof(int32_t) * out * in);
            int32_t *zb = malloc(sizeof(int32_t) * ng * out);
            for (int64_t o = 0; o < out; o++)
                for (int64_t g = 0; g < ng; g++)
                    zgo[g * out + o] = zero[o * ng + g];
            TH_CHECK_OK(lb_gptq_pack_qweight(codes, out, in, 4, qw));
            TH_CHECK_OK(lb_gptq_pack_qzeros(zgo, ng, out, 4, LB_GPTQ_FORMAT_V1,
                                            qz));
            for (int64_t i = 0; i < nqw; i++) n_word_diff += qw[i] != qweight[i];
            for (int64_t i = 0; i < nqz; i++) n_word_diff += qz[i] != qzeros[i];
            n_words += nqw + nqz;
            TH_CHECK_OK(lb_gptq_unpack_qweight(qweight, out, in, 4, cb));
            TH_CHECK_OK(lb_gptq_unpack_qzeros(qzeros, ng, out, 4,
                                              LB_GPTQ_FORMAT_V1, zb));
            for (int64_t i = 0; i < out * in; i++) n_code_diff += cb[i] != codes[i];
            for (int64_t i = 0; i < ng * out; i++) n_zero_diff += zb[i] != zgo[i];
            /* scales: fp16 of the float32 scale (torch .half(), RNE) */
            for (int64_t o = 0; o < out; o++)
                for (int64_t g = 0; g < ng; g++)
                    n_scale_diff += scales[g * out + o] !=
                                    lb_f32_to_f16(scale[o * ng + g]);
            for (int64_t c = 0; c < in; c++) n_gidx_diff += ck_gidx[c] != gidx[c];
            n_linear++;
            free(qw), free(qz), free(zgo), free(cb), free(zb);
        }
    fprintf(stderr,
            "  checkpoint: %d linears, %lld qweight+qzeros words, %lld differ "
            "from AutoGPTQ's packer; unpack: %lld codes, %lld zeros differ; "
            "%lld fp16 scales, %lld g_idx differ\n",
            n_linear, (long long)n_words, (long long)n_word_diff,
            (long long)n_code_diff, (long long)n_zero_diff,
            (long long)n_scale_diff, (long long)n_gidx_diff);
    TH_CHECK_INT(n_linear, 14);
    TH_CHECK_INT(n_word_diff, 0);
    TH_CHECK_INT(n_code_diff, 0);
    TH_CHECK_INT(n_zero_diff, 0);
    TH_CHECK_INT(n_scale_diff, 0);
    TH_CHECK_INT(n_gidx_diff, 0);
    tst_close(&ck);
    tst_close(&qt);
}

int main(void) {
    TH_RUN(test_sizes);
    TH_RUN(test_known_words);
    TH_RUN(test_roundtrip_vs_autogptq);
    TH_RUN(test_bad_args);
    TH_RUN(test_result_to_checkpoint);
    TH_RUN(test_autogptq_checkpoint);
    return th_report();
}
