/*
 * make_random_gguf — write a random-weight GGUF with the exact shapes of a
 * real model, for speed and memory benchmarks (no real weights of that
 * size can be obtained on the development machines).
 *
 *   make_random_gguf --shape NAME --type TYPE -o OUT.gguf [--seed N]
 *                    [--threads N]
 *
 * Shapes (hyper-parameters of the published configs):
 *   qwen2.5-0.5b  qwen2: 24 layers, dim 896, 14 heads / 2 KV heads (hd 64),
 *                 ffn 4864, vocab 151936, tied embeddings, q/k/v bias,
 *                 rope theta 1e6, eps 1e-6, context 32768
 *   llama3.2-1b   llama: 16 layers, dim 2048, 32 / 8 heads (hd 64), ffn 8192,
 *                 vocab 128256, tied, rope theta 500000 with llama3 scaling
 *                 (factor 32, low 1, high 4, original 8192) as the
 *                 rope_freqs tensor convert_hf_to_gguf.py writes, eps 1e-5,
 *                 context 131072
 *   tiny          llama: 2 layers, dim 64, 4 / 2 heads, ffn 128, vocab 512
 *                 (for tests of the tools)
 *   qwen3-30b-a3b-8l  qwen3moe: Qwen3-30B-A3B's layer (dim 2048, 32 / 4
 *                 heads, hd 128, q/k norm, 128 experts of ffn 768, top 8,
 *                 router F32) with 8 of its 48 layers, vocab 151936,
 *                 untied, rope theta 1e6, eps 1e-6, context 40960
 *   tiny-moe      qwen3moe: 2 layers, dim 64, 4 / 2 heads (hd 16), 8 experts
 *                 of ffn 32, top 2, vocab 512 (tests)
 * Types: Q4_0, Q8_0, F16, F32 for every 2-D weight (token_embd included);
 * norms and biases are F32 as llama.cpp stores them.
 *
 * Vocabulary: llama-bench and llama.cpp need one to load a model, so a
 * minimal SentencePiece-style ("llama") vocabulary is written:
 * <unk> (id 0, UNKNOWN), <s> (1, CONTROL, BOS), </s> (2, CONTROL, EOS), the
 * 256 byte tokens <0x00>..<0xFF> (ids 3..258, BYTE) and "tNNN" filler
 * tokens (NORMAL) up to the vocabulary size; scores 0 (byte tokens, which
 * would make text encode byte by byte, get -1000).
 *
 * Weights are generated, quantized and written one row block at a time
 * through lb_gguf_writer's streaming interface, so memory stays small
 * whatever the model size. Values: uniform in [-a, a] with a = sqrt(3 / in)
 * (unit-variance outputs for unit-variance inputs), norms 1 + U(-0.1, 0.1),
 * biases U(-0.1, 0.1); xoshiro-style generator seeded by --seed.
 */
#include "lowbit/gguf.h"
#include "lowbit/quants.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    const char *name, *arch;
    int n_layers, dim, n_heads, n_kv, ff, vocab, ctx;
    double theta, eps;
    bool bias, llama3_rope;
    int n_exp, n_used, moe_ff, hd; /* qwen3moe (hd 0: dim / heads) */
} shape;

static const shape k_shapes[] = {
    {"qwen2.5-0.5b", "qwen2", 24, 896, 14, 2, 4864, 151936, 32768, 1e6, 1e-6,
     true, false, 0, 0, 0, 0},
    {"llama3.2-1b", "llama", 16, 2048, 32, 8, 8192, 128256, 131072, 500000.0,
     1e-5, false, true, 0, 0, 0, 0},
    {"tiny", "llama", 2, 64, 4, 2, 128, 512, 2048, 10000.0, 1e-5, false,
     false, 0, 0, 0, 0},
    {"qwen3-30b-a3b-8l", "qwen3moe", 8, 2048, 32, 4, 6144, 151936, 40960, 1e6,
     1e-6, false, false, 128, 8, 768, 128},
    {"tiny-moe", "qwen3moe", 2, 64, 4, 2, 128, 512, 2048, 1e6, 1e-6, false,
     false, 8, 2, 32, 16},
};

static uint64_t g_rs[4];
static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static uint64_t next_u64(void) { /* xoshiro256+ */
    const uint64_t r = g_rs[0] + g_rs[3], t = g_rs[1] << 17;
    g_rs[2] ^= g_rs[0];
    g_rs[3] ^= g_rs[1];
    g_rs[1] ^= g_rs[2];
    g_rs[0] ^= g_rs[3];
    g_rs[2] ^= t;
    g_rs[3] = rotl(g_rs[3], 45);
    return r;
}
static void seed_rng(uint64_t s) {
    for (int i = 0; i < 4; i++) { /* splitmix64 */
        s += 0x9E3779B97F4A7C15ull;
        uint64_t z = s;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        g_rs[i] = z ^ (z >> 31);
    }
}
/* uniform in [-1, 1) */
static float unif(void) {
    return (float)(next_u64() >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

typedef struct tdesc {
    char name[64];
    int n_dims;
    int64_t shape[3]; /* outermost first */
    lb_type type;
    int kind; /* 0 = matrix, 1 = norm, 2 = bias, 3 = rope_freqs */
} tdesc;

static int fail(const char *what) {
    fprintf(stderr, "make_random_gguf: %s: %s\n", what, lb_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *shape_name = NULL, *type_name = NULL, *out = NULL;
    uint64_t seed = 1;
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--shape") && i + 1 < argc) shape_name = argv[++i];
        else if (!strcmp(a, "--type") && i + 1 < argc) type_name = argv[++i];
        else if (!strcmp(a, "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(a, "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: make_random_gguf --shape qwen2.5-0.5b|llama3.2-1b|qwen3-30b-a3b-8l|tiny-moe|"
                    "tiny --type q4_0|q8_0|f16|f32 -o OUT.gguf [--seed N] "
                    "[--threads N]\n");
            return 2;
        }
    }
    const shape *S = NULL;
    for (size_t i = 0; shape_name && i < sizeof k_shapes / sizeof *k_shapes; i++)
        if (!strcmp(shape_name, k_shapes[i].name)) S = &k_shapes[i];
    int t = type_name ? lb_type_from_name(type_name) : -1;
    if (!S || !out ||
        (t != LB_TYPE_Q4_0 && t != LB_TYPE_Q8_0 && t != LB_TYPE_F16 &&
         t != LB_TYPE_F32)) {
        fprintf(stderr, "make_random_gguf: need --shape (qwen2.5-0.5b, "
                        "llama3.2-1b, qwen3-30b-a3b-8l, tiny, tiny-moe), --type (q4_0, q8_0, f16, f32) "
                        "and -o\n");
        return 2;
    }
    const lb_type wt = (lb_type)t;
    seed_rng(seed);
    const int hd = S->hd ? S->hd : S->dim / S->n_heads;
    const bool moe = S->n_exp > 0;
    const int64_t qd = (int64_t)S->n_heads * hd, kvd = (int64_t)S->n_kv * hd;

    /* ---- tensor list (convert_hf_to_gguf.py order) ------------------- */
    int n_t = 0, cap = 16 + S->n_layers * 16;
    tdesc *td = calloc((size_t)cap, sizeof *td);
#define ADD(nm, nd, s0, s1, ty, kd)                                            \
    do {                                                                       \
        tdesc *d_ = &td[n_t++];                                                \
        snprintf(d_->name, sizeof d_->name, "%s", nm);                         \
        d_->n_dims = nd;                                                       \
        d_->shape[0] = s0;                                                     \
        d_->shape[1] = s1;                                                     \
        d_->shape[2] = 0;                                                      \
        d_->type = ty;                                                         \
        d_->kind = kd;                                                         \
    } while (0)
    ADD("token_embd.weight", 2, S->vocab, S->dim, wt, 0);
    if (S->llama3_rope) ADD("rope_freqs.weight", 1, hd / 2, 0, LB_TYPE_F32, 3);
    for (int l = 0; l < S->n_layers; l++) {
        char nm[64];
#define L(suffix, nd, s0, s1, ty, kd)                                          \
    do {                                                                       \
        snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix);                       \
        ADD(nm, nd, s0, s1, ty, kd);                                           \
    } while (0)
        L("attn_norm.weight", 1, S->dim, 0, LB_TYPE_F32, 1);
        L("attn_q.weight", 2, qd, S->dim, wt, 0);
        L("attn_k.weight", 2, kvd, S->dim, wt, 0);
        L("attn_v.weight", 2, kvd, S->dim, wt, 0);
        if (S->bias) {
            L("attn_q.bias", 1, qd, 0, LB_TYPE_F32, 2);
            L("attn_k.bias", 1, kvd, 0, LB_TYPE_F32, 2);
            L("attn_v.bias", 1, kvd, 0, LB_TYPE_F32, 2);
        }
        if (moe) {
            L("attn_q_norm.weight", 1, hd, 0, LB_TYPE_F32, 1);
            L("attn_k_norm.weight", 1, hd, 0, LB_TYPE_F32, 1);
        }
        L("attn_output.weight", 2, S->dim, qd, wt, 0);
        L("ffn_norm.weight", 1, S->dim, 0, LB_TYPE_F32, 1);
        if (moe) {
            /* router F32 (llama-quantize keeps it), merged 3-D experts */
            L("ffn_gate_inp.weight", 2, S->n_exp, S->dim, LB_TYPE_F32, 0);
            L("ffn_gate_exps.weight", 3, S->n_exp, S->moe_ff, wt, 0);
            td[n_t - 1].shape[2] = S->dim;
            L("ffn_up_exps.weight", 3, S->n_exp, S->moe_ff, wt, 0);
            td[n_t - 1].shape[2] = S->dim;
            L("ffn_down_exps.weight", 3, S->n_exp, S->dim, wt, 0);
            td[n_t - 1].shape[2] = S->moe_ff;
        } else {
            L("ffn_gate.weight", 2, S->ff, S->dim, wt, 0);
            L("ffn_up.weight", 2, S->ff, S->dim, wt, 0);
            L("ffn_down.weight", 2, S->dim, S->ff, wt, 0);
        }
#undef L
    }
    ADD("output_norm.weight", 1, S->dim, 0, LB_TYPE_F32, 1);
    if (moe) ADD("output.weight", 2, S->vocab, S->dim, wt, 0);
#undef ADD

    /* ---- metadata ----------------------------------------------------- */
    lb_gguf_writer *w = NULL;
    if (lb_gguf_writer_create(&w) != LB_OK) return fail("create");
    char k[128];
    const char *a = S->arch;
    uint32_t ftype = wt == LB_TYPE_Q4_0   ? LB_GGUF_FTYPE_MOSTLY_Q4_0
                     : wt == LB_TYPE_Q8_0 ? LB_GGUF_FTYPE_MOSTLY_Q8_0
                     : wt == LB_TYPE_F16  ? LB_GGUF_FTYPE_MOSTLY_F16
                                          : LB_GGUF_FTYPE_ALL_F32;
    char gname[96];
    snprintf(gname, sizeof gname, "random %s %s", S->name, lb_type_name(wt));
    lb_status st = lb_gguf_writer_set_architecture(w, a);
#define KU32(suffix, v)                                                        \
    if (st == LB_OK) {                                                         \
        snprintf(k, sizeof k, "%s.%s", a, suffix);                             \
        st = lb_gguf_writer_set_u32(w, k, (uint32_t)(v));                      \
    }
#define KF32(suffix, v)                                                        \
    if (st == LB_OK) {                                                         \
        snprintf(k, sizeof k, "%s.%s", a, suffix);                             \
        st = lb_gguf_writer_set_f32(w, k, (float)(v));                         \
    }
    if (st == LB_OK) st = lb_gguf_writer_set_name(w, gname);
    KU32("block_count", S->n_layers);
    KU32("context_length", S->ctx);
    KU32("embedding_length", S->dim);
    KU32("feed_forward_length", S->ff);
    KU32("attention.head_count", S->n_heads);
    KU32("attention.head_count_kv", S->n_kv);
    KF32("rope.freq_base", S->theta);
    KF32("attention.layer_norm_rms_epsilon", S->eps);
    KU32("attention.key_length", hd);
    KU32("attention.value_length", hd);
    KU32("vocab_size", S->vocab);
    KU32("rope.dimension_count", hd);
    if (moe) {
        KU32("expert_count", S->n_exp);
        KU32("expert_used_count", S->n_used);
        KU32("expert_feed_forward_length", S->moe_ff);
    }
#undef KU32
#undef KF32
    if (st == LB_OK) st = lb_gguf_writer_set_file_type(w, ftype);
    if (st == LB_OK)
        st = lb_gguf_writer_set_quantization_version(w, LB_GGUF_QNT_VERSION);
    /* vocabulary */
    lb_gguf_str *toks = calloc((size_t)S->vocab, sizeof *toks);
    char *tokbuf = malloc((size_t)S->vocab * 16);
    float *scores = calloc((size_t)S->vocab, sizeof *scores);
    int32_t *types = calloc((size_t)S->vocab, sizeof *types);
    if (!toks || !tokbuf || !scores || !types) {
        fprintf(stderr, "make_random_gguf: out of memory\n");
        return 1;
    }
    for (int i = 0; i < S->vocab; i++) {
        char *p = tokbuf + (size_t)i * 16;
        if (i == 0) strcpy(p, "<unk>"), types[i] = 2;
        else if (i == 1) strcpy(p, "<s>"), types[i] = 3;
        else if (i == 2) strcpy(p, "</s>"), types[i] = 3;
        else if (i < 259) snprintf(p, 16, "<0x%02X>", i - 3), types[i] = 6,
                          scores[i] = -1000.0f;
        else snprintf(p, 16, "t%d", i), types[i] = 1;
        toks[i].data = p;
        toks[i].len = strlen(p);
    }
    if (st == LB_OK) st = lb_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (st == LB_OK)
        st = lb_gguf_writer_set_arr_strn(w, "tokenizer.ggml.tokens", toks,
                                         (uint64_t)S->vocab);
    if (st == LB_OK)
        st = lb_gguf_writer_set_arr(w, "tokenizer.ggml.scores",
                                    LB_GGUF_TYPE_FLOAT32, scores,
                                    (uint64_t)S->vocab);
    if (st == LB_OK)
        st = lb_gguf_writer_set_arr(w, "tokenizer.ggml.token_type",
                                    LB_GGUF_TYPE_INT32, types,
                                    (uint64_t)S->vocab);
    if (st == LB_OK) st = lb_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (st == LB_OK) st = lb_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (st == LB_OK) st = lb_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (st == LB_OK) st = lb_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    free(toks);
    free(tokbuf);
    free(scores);
    free(types);
    for (int i = 0; st == LB_OK && i < n_t; i++)
        st = lb_gguf_writer_add_tensor(w, td[i].name, td[i].type, td[i].n_dims,
                                       td[i].shape);
    if (st != LB_OK) return fail("metadata");
    if (lb_gguf_writer_open(w, out) != LB_OK) return fail(out);

    /* ---- data, a block of rows at a time ------------------------------ */
    lb_pool *pool = lb_pool_create(threads);
    const int64_t ROWS = 64;
    int64_t maxc = 0;
    for (int i = 0; i < n_t; i++)
        if (td[i].shape[td[i].n_dims - 1] > maxc) maxc = td[i].shape[td[i].n_dims - 1];
    if (maxc < 1) maxc = 1;
    float *f = malloc((size_t)(ROWS * maxc) * sizeof(float));
    void *q = malloc((size_t)(ROWS * maxc) * sizeof(float));
    double t0 = lb_time_s();
    for (int i = 0; i < n_t && st == LB_OK; i++) {
        const tdesc *d = &td[i];
        if (d->kind != 0) {
            int64_t n = d->shape[0];
            for (int64_t j = 0; j < n; j++) {
                if (d->kind == 1) f[j] = 1.0f + 0.1f * unif();
                else if (d->kind == 2) f[j] = 0.1f * unif();
                else { /* llama3 rope factors (convert_hf_to_gguf.py) */
                    double base = S->theta, factor = 32, lo = 1, hi = 4,
                           old = 8192;
                    double freq = 1.0 / pow(base, (double)(2 * j) / hd);
                    double wl = 2 * M_PI / freq, lw = old / lo, hw = old / hi;
                    if (wl < hw) f[j] = 1.0f;
                    else if (wl > lw) f[j] = (float)factor;
                    else {
                        double sm = (old / wl - lo) / (hi - lo);
                        f[j] = (float)(1.0 / ((1 - sm) / factor + sm));
                    }
                }
            }
            st = lb_gguf_writer_write_data(w, f, (size_t)n * sizeof(float));
            continue;
        }
        const int64_t rows = d->n_dims == 3 ? d->shape[0] * d->shape[1] : d->shape[0],
                      cols = d->shape[d->n_dims - 1];
        const float amp = sqrtf(3.0f / (float)cols);
        size_t rb;
        lb_row_size(d->type, cols, &rb);
        for (int64_t r0 = 0; r0 < rows && st == LB_OK; r0 += ROWS) {
            int64_t nr = rows - r0 < ROWS ? rows - r0 : ROWS;
            for (int64_t j = 0; j < nr * cols; j++) f[j] = amp * unif();
            st = lb_quantize_rows(pool, d->type, f, q, nr, cols);
            if (st == LB_OK) st = lb_gguf_writer_write_data(w, q, rb * (size_t)nr);
        }
    }
    if (st == LB_OK) st = lb_gguf_writer_finish(w);
    if (st != LB_OK) return fail(out);
    size_t fsz = 0;
    lb_gguf_writer_file_size(w, &fsz);
    fprintf(stderr, "make_random_gguf: wrote %s (%s %s, %d tensors, %.1f MiB) "
                    "in %.1f s\n",
            out, S->name, lb_type_name(wt), n_t, (double)fsz / 1048576.0,
            lb_time_s() - t0);
    lb_gguf_writer_free(w);
    lb_pool_free(pool);
    free(f);
    free(q);
    free(td);
    return 0;
}
