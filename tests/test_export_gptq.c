/*
 * test_export_gptq — GPTQ checkpoint -> GGUF (lowbit/export.h): the direct
 * (lossless) route, the mixed route, dequantize mode, dynamic per-module
 * bits, the llama q/k row permutation, bad checkpoints.
 *
 * Oracles:
 *  - ../shared/reference/gptq_model/quant_tensors.safetensors: AutoGPTQ's
 *    own codes and scales for every linear of the reference checkpoint
 *    (independent of lowbit's reader): the Q4_0 blocks we write must hold
 *    exactly those codes and fp16(scale), rows permuted as
 *    convert_hf_to_gguf.py's LlamaModel.permute does (numpy reshape /
 *    swapaxes, computed independently below);
 *  - synthetic checkpoints whose codes/zeros/scales the test draws itself
 *    and packs with lb_gptq_pack_* (AutoGPTQ's layout, tested against
 *    AutoGPTQ's packer in test_gptq_pack): the dequantized GGUF tensors
 *    must equal the test's own scale * (code - zero) exactly for Q4_0 and
 *    Q8_0, within half an fp16 ulp of m (plus f32 rounding) for Q4_1.
 */
#include "th.h"

#include "lowbit/export.h"
#include "lowbit/file.h"
#include "lowbit/gguf.h"
#include "lowbit/gptq.h"
#include "lowbit/quants.h"
#include "lowbit/safetensors.h"

#include <cjson/cJSON.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#define NLIN 7
static const char *lin_names[NLIN] = {"self_attn.q_proj", "self_attn.k_proj",
                                      "self_attn.v_proj", "self_attn.o_proj",
                                      "mlp.gate_proj",    "mlp.up_proj",
                                      "mlp.down_proj"};
static const char *gguf_names[NLIN] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                       "ffn_gate", "ffn_up", "ffn_down"};

static const char *tmp_path(const char *name) {
    static char buf[8][1024];
    static int slot;
    char *b = buf[slot++ & 7];
    snprintf(b, sizeof buf[0], "%s/%s", th_tmpdir(), name);
    return b;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* convert_hf_to_gguf LlamaModel.permute, written from the numpy
 * definition: w.reshape(nh, 2, R/nh/2, C).swapaxes(1, 2).reshape(R, C):
 * out[h][i][j] = in[h][j][i] with out indexed (h, i, j) over (nh, R/nh/2, 2). */
static int64_t hf_row(int64_t r, int64_t rows, int nh) {
    const int64_t half = rows / nh / 2;
    const int64_t h = r / (2 * half), rem = r % (2 * half), i = rem / 2, j = rem % 2;
    return h * 2 * half + j * half + i;
}

/* ---- the reference AutoGPTQ checkpoint --------------------------------------- */

static void test_reference_checkpoint_direct(void) {
    const char *out = tmp_path("ref-direct.gguf");
    lb_export_plan *plan = NULL;
    lb_export_opts eo;
    lb_export_opts_default(&eo);
    eo.mode = LB_EXPORT_MODE_DIRECT;
    TH_CHECK_OK(lb_export_gguf(th_shared("reference/gptq_model/gptq_checkpoint"), out, &eo,
                               &plan, NULL));
    if (!plan) return;
    TH_CHECK(plan->gptq);
    TH_CHECK_INT(plan->n_route[LB_EXPORT_ROUTE_DIRECT], 14);
    TH_CHECK_INT(plan->n_route[LB_EXPORT_ROUTE_KEEP], 6);
    TH_CHECK_INT(plan->file_type, LB_FTYPE_MOSTLY_Q4_0);
    lb_export_plan_free(plan);
    lb_gguf *g = NULL;
    lb_safetensors *ref = NULL, *ck = NULL;
    TH_CHECK_OK(lb_gguf_open(out, &g));
    TH_CHECK_OK(lb_st_open(th_shared("reference/gptq_model/quant_tensors.safetensors"), &ref));
    TH_CHECK_OK(lb_st_open(th_shared("reference/gptq_model/gptq_checkpoint/"
                                     "gptq_model-4bit-128g.safetensors"), &ck));
    if (!g || !ref || !ck) goto done;
    int64_t n_blocks = 0, bad_codes = 0, bad_scales = 0, bad_deq = 0;
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < NLIN; k++) {
            char nm[160];
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, gguf_names[k]);
            lb_tensor t;
            TH_CHECK_OK(lb_gguf_get_tensor(g, nm, &t));
            TH_CHECK(t.type == LB_TYPE_Q4_0);
            snprintf(nm, sizeof nm, "gptq.model.layers.%d.%s.codes", l, lin_names[k]);
            const lb_tensor *codes = lb_st_find(ref, nm);
            snprintf(nm, sizeof nm, "gptq.model.layers.%d.%s.scale", l, lin_names[k]);
            const lb_tensor *scale = lb_st_find(ref, nm);
            snprintf(nm, sizeof nm, "model.layers.%d.%s.scales", l, lin_names[k]);
            const lb_tensor *ck_scales = lb_st_find(ck, nm);
            TH_CHECK(codes && scale && ck_scales);
            if (!codes || !scale || !ck_scales) continue;
            const int64_t rows = t.shape[0], cols = t.shape[1], ng = scale->shape[1];
            const int perm = k == 0 ? 8 : k == 1 ? 4 : 0; /* 8 heads, 4 kv heads */
            const int32_t *C = codes->data;
            const float *S = scale->data;
            float *deq = malloc((size_t)cols * sizeof *deq);
            for (int64_t r = 0; r < rows; r++) {
                int64_t o = perm ? hf_row(r, rows, perm) : r;
                const lb_block_q4_0 *b = (const lb_block_q4_0 *)((const uint8_t *)t.data +
                                                                 (size_t)r * (size_t)cols / 32 * 18);
                TH_CHECK_OK(lb_dequantize_row(LB_TYPE_Q4_0, b, deq, cols));
                for (int64_t bi = 0; bi < cols / 32; bi++, n_blocks++) {
                    int64_t gidx = bi * 32 / (cols / ng); /* g128, g_idx = c / 128 */
                    /* AutoGPTQ computed scale in f32; the checkpoint (and the
                     * block) hold it as fp16 */
                    uint16_t want_d = lb_f32_to_f16(S[o * ng + gidx]);
                    uint16_t ck_d;
                    memcpy(&ck_d, (const uint8_t *)ck_scales->data +
                                      2 * (size_t)(gidx * ck_scales->shape[1] + o), 2);
                    bad_scales += b[bi].d != want_d || b[bi].d != ck_d;
                    for (int j = 0; j < 32; j++) {
                        int q = j < 16 ? (b[bi].qs[j] & 15) : (b[bi].qs[j - 16] >> 4);
                        int32_t c = C[o * cols + bi * 32 + j];
                        bad_codes += q != c;
                        /* dequantized exactly as GPTQ: fp16 scale * (code - 8) */
                        float w = lb_f16_to_f32(ck_d) * (float)(c - 8);
                        bad_deq += memcmp(&w, &deq[bi * 32 + j], 4) != 0;
                    }
                }
            }
            free(deq);
        }
    TH_CHECK_INT(n_blocks, 2 * (128 * 4 + 64 * 4 * 2 + 128 * 4 + 384 * 4 * 2 + 128 * 12));
    TH_CHECK_INT(bad_codes, 0);
    TH_CHECK_INT(bad_scales, 0);
    TH_CHECK_INT(bad_deq, 0);
    /* dense tensors as stored */
    lb_tensor te;
    TH_CHECK_OK(lb_gguf_get_tensor(g, "token_embd.weight", &te));
    const lb_tensor *emb = lb_st_find(ck, "model.embed_tokens.weight");
    TH_CHECK(emb && te.type == LB_TYPE_F32 && te.nbytes == emb->nbytes &&
             !memcmp(te.data, emb->data, te.nbytes));
    TH_CHECK(lb_gguf_find_tensor(g, "output.weight") < 0); /* tied */
done:
    lb_gguf_close(g);
    lb_st_close(ref);
    lb_st_close(ck);
}

/* ---- synthetic checkpoints ------------------------------------------------------ */

typedef struct syn_linear {
    int bits, gs;
    bool sym, desc_act, static_groups, no_gidx, f32_scales, dense;
    lb_gptq_format fmt;
    int64_t out, in, ng;
    int32_t *codes;  /* [out, in]  */
    int32_t *zeros;  /* [ng, out]  */
    float *scales;   /* [ng, out]  */
    int32_t *g_idx;  /* [in]       */
    int32_t *qweight, *qzeros;
    uint16_t *scales16;
    float *bias;     /* [out] or NULL */
} syn_linear;

static void syn_make(syn_linear *s, int64_t out, int64_t in) {
    s->out = out;
    s->in = in;
    int maxq = (1 << s->bits) - 1;
    s->ng = s->gs < 0 ? 1 : (in + s->gs - 1) / s->gs;
    s->codes = malloc((size_t)(out * in) * 4);
    s->zeros = malloc((size_t)(s->ng * out) * 4);
    s->scales = malloc((size_t)(s->ng * out) * 4);
    s->g_idx = malloc((size_t)in * 4);
    for (int64_t i = 0; i < out * in; i++) s->codes[i] = (int32_t)(urand() % (uint32_t)(maxq + 1));
    for (int64_t i = 0; i < s->ng * out; i++) {
        if (s->sym) s->zeros[i] = (maxq + 1) / 2;
        else if (s->fmt == LB_GPTQ_FORMAT_V1) s->zeros[i] = 1 + (int32_t)(urand() % (uint32_t)(maxq + 1));
        else s->zeros[i] = (int32_t)(urand() % (uint32_t)(maxq + 1));
        float sc = (float)(1 + urand() % 1000) / 7919.0f;
        s->scales[i] = s->f32_scales ? sc : lb_f16_to_f32(lb_f32_to_f16(sc));
    }
    for (int64_t c = 0; c < in; c++) s->g_idx[c] = s->gs < 0 ? 0 : (int32_t)(c / s->gs);
    if (s->desc_act && !s->static_groups)
        for (int64_t c = in - 1; c > 0; c--) {
            int64_t j = urand() % (uint64_t)(c + 1);
            int32_t t = s->g_idx[c];
            s->g_idx[c] = s->g_idx[j];
            s->g_idx[j] = t;
        }
    s->qweight = malloc((size_t)(in * s->bits / 32 * out) * 4);
    s->qzeros = malloc((size_t)(s->ng * out * s->bits / 32) * 4);
    s->scales16 = malloc((size_t)(s->ng * out) * 2);
    TH_CHECK_OK(lb_gptq_pack_qweight(s->codes, out, in, s->bits, s->qweight));
    TH_CHECK_OK(lb_gptq_pack_qzeros(s->zeros, s->ng, out, s->bits, s->fmt, s->qzeros));
    for (int64_t i = 0; i < s->ng * out; i++) s->scales16[i] = lb_f32_to_f16(s->scales[i]);
}

static void syn_free(syn_linear *s) {
    free(s->codes), free(s->zeros), free(s->scales), free(s->g_idx);
    free(s->qweight), free(s->qzeros), free(s->scales16), free(s->bias);
    memset(s, 0, sizeof *s);
}

/* the test's own dequantization */
static float syn_w(const syn_linear *s, int64_t o, int64_t c) {
    int32_t g = s->g_idx[c];
    return s->scales[g * s->out + o] * (float)(s->codes[o * s->in + c] - s->zeros[g * s->out + o]);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

typedef struct ckpt {
    const char *base;    /* shared random model                            */
    int n_layers;
    syn_linear lin[2 * NLIN];
} ckpt;

/* Write dir: base's config.json + quantization_config qcfg (NULL: a
 * quantize_config.json file with qcfg_file), its dense tensors, and the
 * synthetic linears (dense ones copied). */
static void write_ckpt(const char *dir, ckpt *ck, const char *qcfg, const char *qcfg_file) {
    mkdir(dir, 0755);
    const char *src = th_shared(ck->base);
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(src, &st));
    if (!st) return;
    size_t n = 0;
    char p[1200];
    snprintf(p, sizeof p, "%s/config.json", src);
    char *cfg = th_read_bin(p, &n);
    cJSON *cj = cJSON_ParseWithLength(cfg, n);
    free(cfg);
    if (qcfg) cJSON_AddItemToObject(cj, "quantization_config", cJSON_Parse(qcfg));
    char *txt = cJSON_Print(cj);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, txt);
    free(txt);
    cJSON_Delete(cj);
    if (qcfg_file) {
        snprintf(p, sizeof p, "%s/quantize_config.json", dir);
        write_text(p, qcfg_file);
    }
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_writer_create(&w));
    static char names[2 * NLIN * 5][160];
    int nn = 0;
    for (size_t i = 0; i < lb_st_count(st); i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        int L = -1, k = -1;
        for (int l = 0; l < ck->n_layers; l++)
            for (int j = 0; j < NLIN; j++) {
                char nm[128];
                snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, lin_names[j]);
                if (!strcmp(nm, t->name)) L = l, k = j;
            }
        if (L < 0 || ck->lin[L * NLIN + k].dense) {
            TH_CHECK_OK(lb_st_writer_add(w, t->name, t->type, t->n_dims, t->shape, t->data));
            continue;
        }
        syn_linear *s = &ck->lin[L * NLIN + k];
        int64_t sh[2];
        char *nm;
        nm = names[nn++];
        snprintf(nm, 160, "model.layers.%d.%s.qweight", L, lin_names[k]);
        sh[0] = s->in * s->bits / 32, sh[1] = s->out;
        TH_CHECK_OK(lb_st_writer_add(w, nm, LB_TYPE_I32, 2, sh, s->qweight));
        nm = names[nn++];
        snprintf(nm, 160, "model.layers.%d.%s.qzeros", L, lin_names[k]);
        sh[0] = s->ng, sh[1] = s->out * s->bits / 32;
        TH_CHECK_OK(lb_st_writer_add(w, nm, LB_TYPE_I32, 2, sh, s->qzeros));
        nm = names[nn++];
        snprintf(nm, 160, "model.layers.%d.%s.scales", L, lin_names[k]);
        sh[0] = s->ng, sh[1] = s->out;
        TH_CHECK_OK(lb_st_writer_add(w, nm, s->f32_scales ? LB_TYPE_F32 : LB_TYPE_F16, 2, sh,
                                     s->f32_scales ? (void *)s->scales : (void *)s->scales16));
        if (!s->no_gidx) {
            nm = names[nn++];
            snprintf(nm, 160, "model.layers.%d.%s.g_idx", L, lin_names[k]);
            TH_CHECK_OK(lb_st_writer_add(w, nm, LB_TYPE_I32, 1, &s->in, s->g_idx));
        }
        if (s->bias) {
            nm = names[nn++];
            snprintf(nm, 160, "model.layers.%d.%s.bias", L, lin_names[k]);
            TH_CHECK_OK(lb_st_writer_add(w, nm, LB_TYPE_F32, 1, &s->out, s->bias));
        }
    }
    snprintf(p, sizeof p, "%s/gptq_model-test.safetensors", dir);
    TH_CHECK_OK(lb_st_writer_write_file(w, p));
    lb_st_writer_free(w);
    lb_st_close(st);
}

/* Shapes [out, in] of the seven linears of a shared random model. */
static void base_shapes(const char *base, int64_t sh[NLIN][2]) {
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(th_shared(base), &st));
    for (int k = 0; k < NLIN; k++) {
        char nm[128];
        snprintf(nm, sizeof nm, "model.layers.0.%s.weight", lin_names[k]);
        const lb_tensor *t = st ? lb_st_find(st, nm) : NULL;
        sh[k][0] = t ? t->shape[0] : 32;
        sh[k][1] = t ? t->shape[1] : 32;
    }
    lb_st_close(st);
}

static void ckpt_init(ckpt *ck, const char *base, int bits, int gs, bool sym, bool desc_act,
                      lb_gptq_format fmt) {
    memset(ck, 0, sizeof *ck);
    ck->base = base;
    ck->n_layers = 2;
    int64_t sh[NLIN][2];
    base_shapes(base, sh);
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < NLIN; k++) {
            syn_linear *s = &ck->lin[l * NLIN + k];
            s->bits = bits;
            s->gs = gs;
            s->sym = sym;
            s->desc_act = desc_act;
            s->fmt = fmt;
        }
}

static void ckpt_make(ckpt *ck) {
    int64_t sh[NLIN][2];
    base_shapes(ck->base, sh);
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < NLIN; k++) {
            syn_linear *s = &ck->lin[l * NLIN + k];
            if (!s->dense) syn_make(s, sh[k][0], sh[k][1]);
        }
}

static void ckpt_free(ckpt *ck) {
    for (int i = 0; i < 2 * NLIN; i++) syn_free(&ck->lin[i]);
}

static char *qcfg_json(int bits, int gs, bool sym, bool desc_act, const char *fmt,
                       const char *dynamic) {
    char *b = malloc(1024);
    snprintf(b, 1024,
             "{\"quant_method\": \"gptq\", \"bits\": %d, \"group_size\": %d, \"sym\": %s, "
             "\"desc_act\": %s, \"checkpoint_format\": \"%s\"%s%s}",
             bits, gs, sym ? "true" : "false", desc_act ? "true" : "false", fmt,
             dynamic ? ", \"dynamic\": " : "", dynamic ? dynamic : "");
    return b;
}

typedef struct check_stats {
    int64_t n, n_exact;
    double max_abs, max_tol_ratio;
} check_stats;

/* Dequantize GGUF tensor blk.L.NAME and compare with the test's
 * dequantization of lin (rows through the permutation for llama q/k).
 * exact: bitwise; else |x - w| <= tol_abs(o, g) supplied by the type. */
static void check_tensor(lb_gguf *g, const ckpt *ck, int l, int k, int n_head, lb_type want,
                         check_stats *cs) {
    char nm[128];
    snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, gguf_names[k]);
    lb_tensor t;
    TH_CHECK_OK(lb_gguf_get_tensor(g, nm, &t));
    TH_CHECK_MSG(t.type == want, "%s is %s, want %s", nm, lb_type_name(t.type), lb_type_name(want));
    if (t.type != want) return;
    const syn_linear *s = &ck->lin[l * NLIN + k];
    const int64_t rows = t.shape[0], cols = t.shape[1];
    size_t rb;
    TH_CHECK(lb_row_size(t.type, cols, &rb));
    float *x = malloc((size_t)cols * sizeof *x);
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = n_head ? hf_row(r, rows, n_head) : r;
        TH_CHECK_OK(lb_dequantize_row(t.type, (const uint8_t *)t.data + (size_t)r * rb, x, cols));
        for (int64_t c = 0; c < cols; c++) {
            float w = syn_w(s, o, c);
            cs->n++;
            if (!memcmp(&w, &x[c], 4)) {
                cs->n_exact++;
                continue;
            }
            double d = fabs((double)x[c] - (double)w);
            if (d > cs->max_abs) cs->max_abs = d;
            if (want == LB_TYPE_Q4_1) {
                /* m = fp16(-s*z): half an fp16 ulp of m, plus f32 rounding of
                 * the product and the sum */
                int32_t gi = s->g_idx[c];
                float sc = s->scales[gi * s->out + o];
                float m = -sc * (float)s->zeros[gi * s->out + o];
                double ulp = fabs((double)m) >= 6.103515625e-05
                                 ? ldexp(1.0, ilogb(m) - 10) : ldexp(1.0, -24);
                double tol = ulp / 2 + 4 * ldexp(fabs((double)w) + fabs((double)m) + 1e-30, -24);
                if (d / tol > cs->max_tol_ratio) cs->max_tol_ratio = d / tol;
            }
        }
    }
    free(x);
}

static lb_export_plan *do_export(const char *dir, const char *out, lb_export_mode mode,
                                 const char *qtype, const char *const *rules, int n_rules) {
    lb_export_opts o;
    lb_export_opts_default(&o);
    o.mode = mode;
    o.qtype = qtype;
    o.rules = rules;
    o.n_rules = n_rules;
    o.n_threads = 2;
    lb_export_plan *p = NULL;
    TH_CHECK_OK(lb_export_gguf(dir, out, &o, &p, NULL));
    return p;
}

static const lb_export_tensor *plan_find(const lb_export_plan *p, const char *name) {
    for (size_t i = 0; p && i < p->n_tensors; i++)
        if (!strcmp(p->tensors[i].name, name)) return &p->tensors[i];
    return NULL;
}

/* 4-bit sym (v1, g32) / asym (v2, g64) / 8-bit sym per-row without g_idx:
 * direct Q4_0 / Q4_1 / Q8_0 on Qwen2 (no permutation). */
static void test_direct_formats(void) {
    static const struct {
        int bits, gs;
        bool sym, no_gidx, f32_scales;
        lb_gptq_format fmt;
        const char *fmt_name;
        lb_type want;
    } cases[] = {
        {4, 32, true, false, false, LB_GPTQ_FORMAT_V1, "gptq", LB_TYPE_Q4_0},
        {4, 64, false, false, false, LB_GPTQ_FORMAT_V2, "gptq_v2", LB_TYPE_Q4_1},
        {4, 32, false, false, false, LB_GPTQ_FORMAT_V1, "gptq", LB_TYPE_Q4_1},
        {8, -1, true, true, false, LB_GPTQ_FORMAT_V1, "gptq", LB_TYPE_Q8_0},
        {8, 32, true, false, true, LB_GPTQ_FORMAT_V2, "gptq_v2", LB_TYPE_Q8_0},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        ckpt ck;
        ckpt_init(&ck, "models/random/qwen2-random", cases[ci].bits, cases[ci].gs, cases[ci].sym,
                  false, cases[ci].fmt);
        for (int i = 0; i < 2 * NLIN; i++) {
            ck.lin[i].no_gidx = cases[ci].no_gidx;
            ck.lin[i].f32_scales = cases[ci].f32_scales;
        }
        ckpt_make(&ck);
        /* f32 scales that happen to be fp16 values keep the exact route */
        for (int i = 0; cases[ci].f32_scales && i < 2 * NLIN; i++)
            for (int64_t j = 0; j < ck.lin[i].ng * ck.lin[i].out; j++)
                ck.lin[i].scales[j] = lb_f16_to_f32(lb_f32_to_f16(ck.lin[i].scales[j]));
        char dir[64];
        snprintf(dir, sizeof dir, "direct-%zu", ci);
        char *q = qcfg_json(cases[ci].bits, cases[ci].gs, cases[ci].sym, false,
                            cases[ci].fmt_name, NULL);
        write_ckpt(tmp_path(dir), &ck, q, NULL);
        free(q);
        char out[128];
        snprintf(out, sizeof out, "%s.gguf", dir);
        lb_export_plan *p = do_export(tmp_path(dir), tmp_path(out), LB_EXPORT_MODE_DIRECT, NULL,
                                      NULL, 0);
        if (p) TH_CHECK_INT(p->n_route[LB_EXPORT_ROUTE_DIRECT], 14);
        lb_export_plan_free(p);
        lb_gguf *g = NULL;
        TH_CHECK_OK(lb_gguf_open(tmp_path(out), &g));
        check_stats cs = {0};
        for (int l = 0; g && l < 2; l++)
            for (int k = 0; k < NLIN; k++) check_tensor(g, &ck, l, k, 0, cases[ci].want, &cs);
        if (cases[ci].want == LB_TYPE_Q4_1) {
            TH_CHECK_MSG(cs.max_tol_ratio <= 1.0, "case %zu: Q4_1 error %.3g x tolerance", ci,
                         cs.max_tol_ratio);
            TH_CHECK(cs.n_exact > cs.n / 10); /* zero 0 and representable m: exact */
        } else {
            TH_CHECK_MSG(cs.n_exact == cs.n, "case %zu: %lld of %lld weights differ (max %.3g)", ci,
                         (long long)(cs.n - cs.n_exact), (long long)cs.n, cs.max_abs);
        }
        TH_CHECK(cs.n > 0);
        fprintf(stderr, "  %d-bit %s g%d %s -> %s: %lld/%lld weights bit-exact, max |diff| %.3g\n",
                cases[ci].bits, cases[ci].sym ? "sym" : "asym", cases[ci].gs, cases[ci].fmt_name,
                lb_type_name(cases[ci].want), (long long)cs.n_exact, (long long)cs.n, cs.max_abs);
        lb_gguf_close(g);
        ckpt_free(&ck);
    }
}

/* Llama: q/k rows (codes, scales, zeros, biases) permuted like the
 * converter; static-groups act-order stays direct; shuffled act-order goes
 * mixed (and fails in direct mode); 2/3-bit and 8-bit asym go mixed. */
static void test_llama_permutation_and_mixed(void) {
    const char *base = "models/random/llama-gqa-llama3rope-bf16-random";
    /* 4-bit sym g128 + biases on q/k/v */
    ckpt ck;
    ckpt_init(&ck, base, 4, 128, true, false, LB_GPTQ_FORMAT_V1);
    ckpt_make(&ck);
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 3; k++) {
            syn_linear *s = &ck.lin[l * NLIN + k];
            s->bias = malloc((size_t)s->out * sizeof(float));
            for (int64_t o = 0; o < s->out; o++) s->bias[o] = (float)(l * 1000 + k * 100) + (float)o;
        }
    char *q = qcfg_json(4, 128, true, false, "gptq", NULL);
    write_ckpt(tmp_path("llama-4"), &ck, q, NULL);
    free(q);
    lb_export_plan *p = do_export(tmp_path("llama-4"), tmp_path("llama-4.gguf"),
                                  LB_EXPORT_MODE_DIRECT, NULL, NULL, 0);
    if (p) {
        TH_CHECK_INT(p->n_route[LB_EXPORT_ROUTE_DIRECT], 14);
        const lb_export_tensor *e = plan_find(p, "blk.0.attn_q.weight");
        TH_CHECK(e && e->permuted && e->bits == 4 && e->group_size == 128 && e->sym);
        e = plan_find(p, "blk.0.attn_v.weight");
        TH_CHECK(e && !e->permuted);
        TH_CHECK(plan_find(p, "rope_freqs.weight") != NULL);
    }
    lb_export_plan_free(p);
    lb_gguf *g = NULL;
    TH_CHECK_OK(lb_gguf_open(tmp_path("llama-4.gguf"), &g));
    check_stats cs = {0};
    for (int l = 0; g && l < 2; l++)
        for (int k = 0; k < NLIN; k++)
            check_tensor(g, &ck, l, k, k == 0 ? 8 : k == 1 ? 2 : 0, LB_TYPE_Q4_0, &cs);
    TH_CHECK_MSG(cs.n_exact == cs.n, "%lld of %lld differ", (long long)(cs.n - cs.n_exact),
                 (long long)cs.n);
    /* biases: q/k permuted with the rows, v not */
    for (int l = 0; g && l < 2; l++)
        for (int k = 0; k < 3; k++) {
            char nm[64];
            snprintf(nm, sizeof nm, "blk.%d.%s.bias", l, gguf_names[k]);
            lb_tensor t;
            TH_CHECK_OK(lb_gguf_get_tensor(g, nm, &t));
            const syn_linear *s = &ck.lin[l * NLIN + k];
            int nh = k == 0 ? 8 : k == 1 ? 2 : 0;
            int bad = 0;
            for (int64_t r = 0; r < t.shape[0]; r++) {
                float v;
                memcpy(&v, (const uint8_t *)t.data + 4 * r, 4);
                bad += v != s->bias[nh ? hf_row(r, t.shape[0], nh) : r];
            }
            TH_CHECK_MSG(bad == 0, "%s: %d values", nm, bad);
        }
    lb_gguf_close(g);
    ckpt_free(&ck);

    /* act-order: static groups (g_idx = c / gs) direct; shuffled mixed */
    ckpt_init(&ck, base, 4, 32, true, true, LB_GPTQ_FORMAT_V1);
    for (int i = 0; i < 2 * NLIN; i++) ck.lin[i].static_groups = i % 2 == 0;
    ckpt_make(&ck);
    q = qcfg_json(4, 32, true, true, "gptq", NULL);
    write_ckpt(tmp_path("llama-act"), &ck, q, NULL);
    free(q);
    lb_export_opts o;
    lb_export_opts_default(&o);
    o.mode = LB_EXPORT_MODE_DIRECT;
    lb_export_plan *pp = NULL;
    TH_CHECK_FAILS(lb_export_plan_make(tmp_path("llama-act"), &o, &pp), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "act-order") != NULL);
    p = do_export(tmp_path("llama-act"), tmp_path("llama-act.gguf"), LB_EXPORT_MODE_AUTO, NULL,
                  NULL, 0);
    if (p) {
        TH_CHECK_INT(p->mode, LB_EXPORT_MODE_MIXED);
        TH_CHECK_INT(p->n_route[LB_EXPORT_ROUTE_DIRECT], 7);
        TH_CHECK_INT(p->n_route[LB_EXPORT_ROUTE_MIXED], 7);
        for (int l = 0; l < 2; l++)
            for (int k = 0; k < NLIN; k++) {
                char nm[64];
                snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, gguf_names[k]);
                const lb_export_tensor *e = plan_find(p, nm);
                bool stat = (l * NLIN + k) % 2 == 0;
                /* Q4_K needs rows of 256: only ffn_down (in 256) keeps it */
                lb_type mixed = k == 6 ? LB_TYPE_Q4_K : LB_TYPE_Q5_0;
                TH_CHECK_MSG(e && e->route == (stat ? LB_EXPORT_ROUTE_DIRECT : LB_EXPORT_ROUTE_MIXED) &&
                                 e->type == (stat ? LB_TYPE_Q4_0 : mixed) && e->desc_act,
                             "%s: %s %s", nm, e ? lb_export_route_name(e->route) : "?",
                             e ? lb_type_name(e->type) : "?");
            }
    }
    lb_export_plan_free(p);
    /* mixed tensors: lowbit's quantizer applied to the exact dequantized
     * weights in GGUF row order */
    g = NULL;
    TH_CHECK_OK(lb_gguf_open(tmp_path("llama-act.gguf"), &g));
    for (int l = 0; g && l < 2; l++)
        for (int k = 0; k < NLIN; k++) {
            if ((l * NLIN + k) % 2 == 0) continue;
            char nm[64];
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, gguf_names[k]);
            lb_tensor t;
            TH_CHECK_OK(lb_gguf_get_tensor(g, nm, &t));
            const syn_linear *s = &ck.lin[l * NLIN + k];
            int nh = k == 0 ? 8 : k == 1 ? 2 : 0;
            float *W = malloc((size_t)(s->out * s->in) * 4);
            for (int64_t r = 0; r < s->out; r++)
                for (int64_t c = 0; c < s->in; c++)
                    W[r * s->in + c] = syn_w(s, nh ? hf_row(r, s->out, nh) : r, c);
            void *want = malloc(t.nbytes);
            TH_CHECK_OK(lb_quantize_rows(NULL, t.type, W, want, s->out, s->in));
            TH_CHECK_MSG(!memcmp(want, t.data, t.nbytes), "%s bytes differ", nm);
            free(want);
            free(W);
        }
    lb_gguf_close(g);
    ckpt_free(&ck);

    /* 2-bit, 3-bit, 8-bit asym: mixed by bits */
    static const struct {
        int bits;
        bool sym;
        lb_type down, other;
    } mb[] = {{2, false, LB_TYPE_Q2_K, LB_TYPE_Q4_0},
              {3, false, LB_TYPE_Q3_K, LB_TYPE_Q4_0},
              {8, false, LB_TYPE_Q8_0, LB_TYPE_Q8_0}};
    for (size_t i = 0; i < sizeof mb / sizeof mb[0]; i++) {
        ckpt_init(&ck, base, mb[i].bits, 64, mb[i].sym, false, LB_GPTQ_FORMAT_V2);
        ckpt_make(&ck);
        q = qcfg_json(mb[i].bits, 64, mb[i].sym, false, "gptq_v2", NULL);
        char dir[32];
        snprintf(dir, sizeof dir, "llama-b%d", mb[i].bits);
        write_ckpt(tmp_path(dir), &ck, q, NULL);
        free(q);
        char out[48];
        snprintf(out, sizeof out, "%s.gguf", dir);
        p = do_export(tmp_path(dir), tmp_path(out), LB_EXPORT_MODE_AUTO, NULL, NULL, 0);
        if (p) {
            TH_CHECK_INT(p->n_route[LB_EXPORT_ROUTE_MIXED], 14);
            const lb_export_tensor *e = plan_find(p, "blk.1.ffn_down.weight");
            TH_CHECK(e && e->type == mb[i].down);
            e = plan_find(p, "blk.1.attn_q.weight");
            TH_CHECK(e && e->type == mb[i].other);
            /* general.file_type from the predominant type */
        }
        lb_export_plan_free(p);
        /* error of the requantization: bounded by the K-quant's own step */
        g = NULL;
        TH_CHECK_OK(lb_gguf_open(tmp_path(out), &g));
        check_stats cs2 = {0};
        if (g) check_tensor(g, &ck, 1, 6, 0, mb[i].down, &cs2);
        TH_CHECK(cs2.n == 128 * 256);
        lb_gguf_close(g);
        ckpt_free(&ck);
    }
}

/* GPTQModel "dynamic": per-module bits and exclusions; quantize_config.json. */
static void test_dynamic_and_rules(void) {
    const char *base = "models/random/llama-gqa-llama3rope-bf16-random";
    ckpt ck;
    ckpt_init(&ck, base, 4, 32, true, false, LB_GPTQ_FORMAT_V1);
    for (int l = 0; l < 2; l++) {
        ck.lin[l * NLIN + 6].bits = 8;      /* down_proj: 8-bit */
        ck.lin[l * NLIN + 3].dense = true;  /* o_proj: not quantized */
    }
    ck.lin[NLIN + 0].bits = 3;              /* layer 1 q_proj: 3-bit */
    ck.lin[NLIN + 0].sym = false;
    ckpt_make(&ck);
    const char *dyn = "{\"+:.*down_proj\": {\"bits\": 8}, \"-:.*o_proj\": {}, "
                      "\"+:model\\\\.layers\\\\.1\\\\.self_attn\\\\.q_proj\": {\"bits\": 3, \"sym\": false}}";
    char *q = qcfg_json(4, 32, true, false, "gptq", dyn);
    write_ckpt(tmp_path("dyn"), &ck, NULL, q); /* quantize_config.json */
    free(q);
    lb_export_plan *p = do_export(tmp_path("dyn"), tmp_path("dyn.gguf"), LB_EXPORT_MODE_AUTO, NULL,
                                  NULL, 0);
    if (p) {
        static const struct {
            const char *name;
            lb_type t;
            lb_export_route r;
            int bits;
        } want[] = {
            {"blk.0.ffn_down.weight", LB_TYPE_Q8_0, LB_EXPORT_ROUTE_DIRECT, 8},
            {"blk.0.attn_output.weight", LB_TYPE_BF16, LB_EXPORT_ROUTE_KEEP, 0},
            {"blk.0.attn_q.weight", LB_TYPE_Q4_0, LB_EXPORT_ROUTE_DIRECT, 4},
            {"blk.1.attn_q.weight", LB_TYPE_Q4_0, LB_EXPORT_ROUTE_MIXED, 3}, /* Q3_K fallback */
            {"token_embd.weight", LB_TYPE_BF16, LB_EXPORT_ROUTE_KEEP, 0},
            {"output.weight", LB_TYPE_BF16, LB_EXPORT_ROUTE_KEEP, 0},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const lb_export_tensor *e = plan_find(p, want[i].name);
            TH_CHECK_MSG(e && e->type == want[i].t && e->route == want[i].r && e->bits == want[i].bits,
                         "%s: %s %s %d", want[i].name, e ? lb_type_name(e->type) : "?",
                         e ? lb_export_route_name(e->route) : "?", e ? e->bits : -1);
        }
        TH_CHECK_INT(p->file_type, LB_FTYPE_MOSTLY_Q4_0);
    }
    lb_export_plan_free(p);
    lb_gguf *g = NULL;
    TH_CHECK_OK(lb_gguf_open(tmp_path("dyn.gguf"), &g));
    check_stats cs = {0};
    if (g) {
        check_tensor(g, &ck, 0, 6, 0, LB_TYPE_Q8_0, &cs);
        check_tensor(g, &ck, 1, 6, 0, LB_TYPE_Q8_0, &cs);
        check_tensor(g, &ck, 0, 0, 8, LB_TYPE_Q4_0, &cs);
        TH_CHECK(cs.n_exact == cs.n);
    }
    lb_gguf_close(g);

    /* rules and qtype on a GPTQ input: rules retype modules (mixed),
     * --qtype gives the unquantized tensors their mix types */
    const char *rules[] = {"layers\\.0\\.mlp\\.down_proj=Q6_K", "embed_tokens=Q8_0"};
    p = do_export(tmp_path("dyn"), tmp_path("dyn2.gguf"), LB_EXPORT_MODE_MIXED, "Q4_K_M", rules, 2);
    if (p) {
        const lb_export_tensor *e = plan_find(p, "blk.0.ffn_down.weight");
        TH_CHECK(e && e->route == LB_EXPORT_ROUTE_MIXED && e->type == LB_TYPE_Q6_K);
        e = plan_find(p, "blk.1.ffn_down.weight");
        TH_CHECK(e && e->route == LB_EXPORT_ROUTE_DIRECT && e->type == LB_TYPE_Q8_0);
        e = plan_find(p, "token_embd.weight");
        TH_CHECK(e && e->route == LB_EXPORT_ROUTE_FALLBACK && e->type == LB_TYPE_Q8_0);
        e = plan_find(p, "output.weight"); /* Q4_K_M: output Q6_K (row 128: Q8_0) */
        TH_CHECK(e && e->route == LB_EXPORT_ROUTE_FALLBACK && e->type == LB_TYPE_Q8_0);
        e = plan_find(p, "blk.0.attn_output.weight"); /* dense module: the mix */
        TH_CHECK(e && e->route == LB_EXPORT_ROUTE_FALLBACK && e->type == LB_TYPE_Q5_0);
        TH_CHECK_INT(p->file_type, LB_FTYPE_MOSTLY_Q4_K_M);
    }
    lb_export_plan_free(p);

    /* dequantize mode: every weight through the mix (fallback route) */
    p = do_export(tmp_path("dyn"), tmp_path("dyn3.gguf"), LB_EXPORT_MODE_DEQUANTIZE, "Q8_0", NULL, 0);
    if (p) {
        TH_CHECK_INT(p->n_route[LB_EXPORT_ROUTE_DIRECT], 0);
        TH_CHECK_INT(p->n_route[LB_EXPORT_ROUTE_MIXED], 0);
        const lb_export_tensor *e = plan_find(p, "blk.0.ffn_gate.weight");
        TH_CHECK(e && e->route == LB_EXPORT_ROUTE_FALLBACK && e->type == LB_TYPE_Q8_0);
    }
    lb_export_plan_free(p);
    g = NULL;
    TH_CHECK_OK(lb_gguf_open(tmp_path("dyn3.gguf"), &g));
    if (g) { /* Q8_0 of the exact dequantized 4-bit weights */
        lb_tensor t;
        TH_CHECK_OK(lb_gguf_get_tensor(g, "blk.0.ffn_gate.weight", &t));
        const syn_linear *s = &ck.lin[4];
        float *W = malloc((size_t)(s->out * s->in) * 4);
        for (int64_t r = 0; r < s->out; r++)
            for (int64_t c = 0; c < s->in; c++) W[r * s->in + c] = syn_w(s, r, c);
        void *want = malloc(t.nbytes);
        TH_CHECK_OK(lb_quantize_rows(NULL, LB_TYPE_Q8_0, W, want, s->out, s->in));
        TH_CHECK(!memcmp(want, t.data, t.nbytes));
        free(want);
        free(W);
    }
    lb_gguf_close(g);
    ckpt_free(&ck);
}

static void test_bad_checkpoints(void) {
    const char *base = "models/random/qwen2-random";
    lb_export_plan *p = NULL;
    ckpt ck;
    /* config says 8 bits, qweight packs 4 */
    ckpt_init(&ck, base, 4, 32, true, false, LB_GPTQ_FORMAT_V1);
    ckpt_make(&ck);
    char *q = qcfg_json(8, 32, true, false, "gptq", NULL);
    write_ckpt(tmp_path("bad-bits"), &ck, q, NULL);
    free(q);
    TH_CHECK_FAILS(lb_export_plan_make(tmp_path("bad-bits"), NULL, &p), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "qweight") != NULL);
    /* g_idx out of range */
    ck.lin[3].g_idx[5] = 99;
    q = qcfg_json(4, 32, true, false, "gptq", NULL);
    write_ckpt(tmp_path("bad-gidx"), &ck, q, NULL);
    TH_CHECK_FAILS(lb_export_plan_make(tmp_path("bad-gidx"), NULL, &p), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "g_idx") != NULL);
    ck.lin[3].g_idx[5] = 5 / 32;
    /* non-finite scale */
    ck.lin[2].scales16[7] = 0x7C00; /* +inf */
    write_ckpt(tmp_path("bad-scale"), &ck, q, NULL);
    TH_CHECK_FAILS(lb_export_plan_make(tmp_path("bad-scale"), NULL, &p), LB_ERR_FORMAT);
    ck.lin[2].scales16[7] = 0x3C00;
    /* another quant method */
    write_ckpt(tmp_path("bad-awq"), &ck, "{\"quant_method\": \"awq\", \"bits\": 4, "
                                         "\"group_size\": 128, \"version\": \"gemv\"}", NULL);
    TH_CHECK_FAILS(lb_export_plan_make(tmp_path("bad-awq"), NULL, &p), LB_ERR_UNSUPPORTED);
    /* packed tensors in a checkpoint without a GPTQ config */
    write_ckpt(tmp_path("bad-noconfig"), &ck, NULL, NULL);
    TH_CHECK_FAILS(lb_export_plan_make(tmp_path("bad-noconfig"), NULL, &p), LB_ERR_FORMAT);
    /* excluded by a dynamic rule but stored quantized */
    char *qd = qcfg_json(4, 32, true, false, "gptq", "{\"-:.*v_proj\": {}}");
    write_ckpt(tmp_path("bad-excl"), &ck, qd, NULL);
    free(qd);
    TH_CHECK_FAILS(lb_export_plan_make(tmp_path("bad-excl"), NULL, &p), LB_ERR_FORMAT);
    free(q);
    TH_CHECK(p == NULL);
    ckpt_free(&ck);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(void) {
    TH_RUN(test_reference_checkpoint_direct);
    TH_RUN(test_direct_formats);
    TH_RUN(test_llama_permutation_and_mixed);
    TH_RUN(test_dynamic_and_rules);
    TH_RUN(test_bad_checkpoints);
    nftw(th_tmpdir(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return th_report();
}
