/*
 * make_random_hf — write a random-weight Hugging Face checkpoint and/or a
 * GPTQ checkpoint (AutoGPTQ layout) with the exact shapes of a real model,
 * for speed and memory benchmarks of the exporter (no real weights of that
 * size can be obtained on the development machines).
 *
 *   make_random_hf --shape NAME [--hf DIR] [--gptq DIR] [--tokenizer DIR]
 *                  [--seed N] [--layers N] [--vocab N]
 *
 * Shapes (hyper-parameters of the published configs):
 *   qwen2.5-0.5b  Qwen2ForCausalLM: 24 layers, dim 896, 14 heads / 2 KV
 *                 heads (hd 64), ffn 4864, vocab 151936, tied embeddings,
 *                 q/k/v bias, rope theta 1e6, eps 1e-6, context 32768;
 *                 BF16 weights (as published)
 *   tiny          LlamaForCausalLM: 2 layers, dim 256, 4 / 2 heads, ffn 512,
 *                 vocab 512 (for tests of the tool)
 *   llama3.2-1b   LlamaForCausalLM: 16 layers, dim 2048, 32 heads / 8 KV
 *                 heads (hd 64), ffn 8192, vocab 128256, tied embeddings,
 *                 rope theta 5e5, eps 1e-5 (its llama3 rope_scaling left
 *                 out: the same work per token)
 *   llama2-7b     LlamaForCausalLM (Llama-2-7B): 32 layers, dim 4096, 32
 *                 heads (MHA, hd 128), ffn 11008, vocab 32000, untied,
 *                 rope theta 1e4, eps 1e-5, context 4096
 *   qwen2.5-7b    Qwen2ForCausalLM (Qwen2.5-7B): 28 layers, dim 3584, 28
 *                 heads / 4 KV heads (hd 128), ffn 18944, vocab 152064,
 *                 untied, q/k/v bias, rope theta 1e6, eps 1e-6, context
 *                 131072 (the 7B shapes with --layers 1..2 and a small
 *                 --vocab for the quantizer's per-layer memory)
 *   qwen3-30b-a3b Qwen3MoeForCausalLM: 48 layers, dim 2048, 32 / 4 heads
 *                 (hd 128, q/k norm), 128 experts of ffn 768, top 8
 *                 (norm_topk_prob), vocab 151936, rope theta 1e6, eps 1e-6,
 *                 untied; per-expert tensors mlp.experts.E.*, router
 *                 mlp.gate (--hf only; with --layers 2..8 for the
 *                 quantizer's per-layer memory and time)
 * --layers / --vocab / --experts override the shape's layer count,
 * vocabulary size and expert count (a few layers of a big shape are enough
 * to measure per-layer costs).
 * --hf writes config.json + model.safetensors (every tensor BF16, as
 * transformers saves a bf16 model); --gptq writes the
 * same model with the seven linears of every layer as GPTQ 4-bit sym g128
 * v1 (qweight random nibbles, zeros 8, fp16 scales of the weight range /
 * 7, g_idx = c / 128; biases F16, embeddings BF16), config.json with
 * quantization_config and quantize_config.json. --tokenizer DIR copies
 * DIR/tokenizer.json and tokenizer_config.json into the outputs (e.g.
 * ../shared/tokenizers/qwen3 for the Qwen2.5 vocabulary).
 *
 * Everything is generated inside lb_st_writer producers, one chunk at a
 * time: memory stays small whatever the model size. Values: uniform in
 * [-a, a], a = sqrt(3 / in_features); norms 1 + U(-0.1, 0.1); biases
 * U(-0.1, 0.1); xorshift generator seeded by --seed and the tensor index.
 */
#include "lowbit/core.h"
#include "lowbit/file.h"
#include "lowbit/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct shape {
    const char *name, *arch, *model_type;
    int layers, dim, heads, kv_heads, ffn, vocab, ctx;
    double theta, eps;
    bool tied, qkv_bias;
    int head_dim, experts, top_k, moe_ff; /* MoE (0: dense; hd 0: dim / heads) */
} shape;

static const shape k_shapes[] = {
    {"qwen2.5-0.5b", "Qwen2ForCausalLM", "qwen2", 24, 896, 14, 2, 4864, 151936, 32768, 1e6,
     1e-6, true, true, 0, 0, 0, 0},
    {"tiny", "LlamaForCausalLM", "llama", 2, 256, 4, 2, 512, 512, 2048, 10000, 1e-5, false,
     false, 0, 0, 0, 0},
    /* Llama-3.2-1B without its llama3 rope_scaling (same cost per token) */
    {"llama3.2-1b", "LlamaForCausalLM", "llama", 16, 2048, 32, 8, 8192, 128256, 131072,
     500000, 1e-5, true, false, 0, 0, 0, 0},
    {"llama2-7b", "LlamaForCausalLM", "llama", 32, 4096, 32, 32, 11008, 32000, 4096, 10000,
     1e-5, false, false, 0, 0, 0, 0},
    {"qwen2.5-7b", "Qwen2ForCausalLM", "qwen2", 28, 3584, 28, 4, 18944, 152064, 131072, 1e6,
     1e-6, false, true, 0, 0, 0, 0},
    {"qwen3-30b-a3b", "Qwen3MoeForCausalLM", "qwen3_moe", 48, 2048, 32, 4, 6144, 151936, 40960,
     1e6, 1e-6, false, false, 128, 128, 8, 768},
};

typedef struct gen {
    uint64_t s;
} gen;
static uint32_t next(gen *g) {
    g->s ^= g->s << 13;
    g->s ^= g->s >> 7;
    g->s ^= g->s << 17;
    return (uint32_t)(g->s >> 32);
}
static float unif(gen *g, float a) { return ((float)next(g) / 4294967296.0f * 2.0f - 1.0f) * a; }

typedef enum { K_WEIGHT, K_NORM, K_BIAS, K_QWEIGHT, K_QZEROS, K_SCALES, K_GIDX } kind;

typedef struct prod {
    kind k;
    int64_t rows, cols; /* tensor shape (2-D; 1-D: rows 1)              */
    int64_t in;         /* in_features of the linear (scales, weights)  */
    lb_type type;       /* BF16 / F16 / F32 / I32                       */
    uint64_t seed;
} prod;

#define CHUNK (1 << 20) /* elements per write */

static lb_status produce(void *user, const char *name, lb_st_sink *sink, size_t nbytes) {
    (void)name;
    const prod *p = user;
    gen g = {p->seed * 0x9E3779B97F4A7C15ull + 12345};
    for (int i = 0; i < 4; i++) next(&g);
    const int64_t n = p->rows * p->cols;
    const size_t es = p->type == LB_TYPE_F32 || p->type == LB_TYPE_I32 ? 4 : 2;
    if ((size_t)n * es != nbytes)
        return lb_set_error(LB_ERR_INTERNAL, "make_random_hf: size mismatch for %s", name);
    uint8_t *buf = malloc((size_t)CHUNK * 4);
    float *f = malloc((size_t)CHUNK * 4);
    if (!buf || !f) {
        free(buf);
        free(f);
        return lb_set_error(LB_ERR_NOMEM, "make_random_hf: out of memory");
    }
    const float a = p->in > 0 ? sqrtf(3.0f / (float)p->in) : 0.1f;
    lb_status s = LB_OK;
    for (int64_t o = 0; o < n && s == LB_OK; o += CHUNK) {
        int64_t m = n - o < CHUNK ? n - o : CHUNK;
        switch (p->k) {
        case K_WEIGHT: for (int64_t i = 0; i < m; i++) f[i] = unif(&g, a); break;
        case K_NORM: for (int64_t i = 0; i < m; i++) f[i] = 1.0f + unif(&g, 0.1f); break;
        case K_BIAS: for (int64_t i = 0; i < m; i++) f[i] = unif(&g, 0.1f); break;
        case K_SCALES: for (int64_t i = 0; i < m; i++) f[i] = a / 7.0f * (1.0f + unif(&g, 0.2f)); break;
        case K_QWEIGHT: for (int64_t i = 0; i < m; i++) ((uint32_t *)buf)[i] = next(&g); break;
        case K_QZEROS: for (int64_t i = 0; i < m; i++) ((uint32_t *)buf)[i] = 0x77777777u; break;
        case K_GIDX:
            for (int64_t i = 0; i < m; i++) ((int32_t *)buf)[i] = (int32_t)((o + i) / 128);
            break;
        }
        if (p->type == LB_TYPE_BF16) lb_f32_to_bf16_row(f, (uint16_t *)buf, (size_t)m);
        else if (p->type == LB_TYPE_F16) lb_f32_to_f16_row(f, (uint16_t *)buf, (size_t)m);
        else if (p->type == LB_TYPE_F32) memcpy(buf, f, (size_t)m * 4);
        s = lb_st_sink_write(sink, buf, (size_t)m * es);
    }
    free(buf);
    free(f);
    return s;
}

static int write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "wb");
    if (!fp || fputs(text, fp) < 0 || fclose(fp)) {
        fprintf(stderr, "make_random_hf: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

static int copy_file(const char *src, const char *dst) {
    char *data = NULL;
    size_t n = 0;
    if (lb_read_file(src, (size_t)1 << 30, &data, &n) != LB_OK) {
        fprintf(stderr, "make_random_hf: %s\n", lb_last_error());
        return 1;
    }
    FILE *fp = fopen(dst, "wb");
    int rc = !fp || fwrite(data, 1, n, fp) != n;
    if (fp && fclose(fp)) rc = 1;
    free(data);
    if (rc) fprintf(stderr, "make_random_hf: cannot write %s\n", dst);
    return rc;
}

static const char *lin_name[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                  "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                  "mlp.down_proj"};

static int write_model(const shape *sh, const char *dir, bool gptq, const char *tok_dir,
                       uint64_t seed) {
    mkdir(dir, 0755);
    const int hd = sh->head_dim ? sh->head_dim : sh->dim / sh->heads;
    char cfg[4096], qcfg[512], path[4096], moe[512] = "";
    if (sh->experts && gptq) {
        fprintf(stderr, "make_random_hf: %s: --hf only\n", sh->name);
        return 1;
    }
    if (sh->experts)
        snprintf(moe, sizeof moe,
                 ", \"head_dim\": %d, \"num_experts\": %d, \"num_experts_per_tok\": %d, "
                 "\"moe_intermediate_size\": %d, \"norm_topk_prob\": true, "
                 "\"decoder_sparse_step\": 1, \"mlp_only_layers\": []",
                 hd, sh->experts, sh->top_k, sh->moe_ff);
    snprintf(qcfg, sizeof qcfg,
             "{\"bits\": 4, \"group_size\": 128, \"damp_percent\": 0.01, \"desc_act\": false, "
             "\"static_groups\": false, \"sym\": true, \"true_sequential\": true, "
             "\"quant_method\": \"gptq\", \"checkpoint_format\": \"gptq\"}");
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"hidden_size\": %d, "
             "\"intermediate_size\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
             "\"num_hidden_layers\": %d, \"vocab_size\": %d, \"max_position_embeddings\": %d, "
             "\"rms_norm_eps\": %g, \"rope_theta\": %.1f, \"tie_word_embeddings\": %s, "
             "\"hidden_act\": \"silu\", \"torch_dtype\": \"bfloat16\", \"bos_token_id\": 1, "
             "\"eos_token_id\": 2, \"use_sliding_window\": false%s%s%s}\n",
             sh->arch, sh->model_type, sh->dim, sh->ffn, sh->heads, sh->kv_heads, sh->layers,
             sh->vocab, sh->ctx, sh->eps, sh->theta, sh->tied ? "true" : "false",
             gptq ? ", \"quantization_config\": " : "", gptq ? qcfg : "", moe);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (write_text(path, cfg)) return 1;
    if (gptq) {
        snprintf(path, sizeof path, "%s/quantize_config.json", dir);
        if (write_text(path, qcfg)) return 1;
    }
    if (tok_dir) {
        static const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
        for (int i = 0; i < 2; i++) {
            char src[4096];
            snprintf(src, sizeof src, "%s/%s", tok_dir, files[i]);
            snprintf(path, sizeof path, "%s/%s", dir, files[i]);
            if (copy_file(src, path)) return 1;
        }
    }
    /* tensors: every name with its producer */
    int max_t = 8 + sh->layers * (40 + 3 * sh->experts);
    prod *ps = calloc((size_t)max_t, sizeof *ps);
    char (*names)[96] = calloc((size_t)max_t, sizeof *names);
    lb_st_writer *w = NULL;
    if (!ps || !names || lb_st_writer_create(&w) != LB_OK) {
        fprintf(stderr, "make_random_hf: out of memory\n");
        return 1;
    }
    int n = 0;
    lb_status s = LB_OK;
#define ADD(NAME, KIND, R, C, IN, TYPE)                                                    \
    do {                                                                                   \
        snprintf(names[n], sizeof names[n], "%s", NAME);                                    \
        ps[n] = (prod){KIND, (R), (C), (IN), (TYPE), seed * 1000003u + (uint64_t)n};        \
        int64_t shp[2] = {(R), (C)};                                                        \
        int nd = (R) == 1 && (KIND == K_NORM || KIND == K_BIAS || KIND == K_GIDX) ? 1 : 2;   \
        if (nd == 1) shp[0] = (C);                                                          \
        if (s == LB_OK) s = lb_st_writer_add_fn(w, names[n], TYPE, nd, shp, produce, &ps[n]); \
        n++;                                                                               \
    } while (0)
    ADD("model.embed_tokens.weight", K_WEIGHT, sh->vocab, sh->dim, sh->dim, LB_TYPE_BF16);
    if (!sh->tied) ADD("lm_head.weight", K_WEIGHT, sh->vocab, sh->dim, sh->dim, LB_TYPE_BF16);
    ADD("model.norm.weight", K_NORM, 1, sh->dim, 0, LB_TYPE_BF16);
    const int64_t q = (int64_t)sh->heads * hd, kv = (int64_t)sh->kv_heads * hd;
    const int64_t outs[7] = {q, kv, kv, sh->dim, sh->ffn, sh->ffn, sh->dim};
    const int64_t ins[7] = {sh->dim, sh->dim, sh->dim, q, sh->dim, sh->dim, sh->ffn};
    for (int l = 0; l < sh->layers && s == LB_OK; l++) {
        char nm[96];
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        ADD(nm, K_NORM, 1, sh->dim, 0, LB_TYPE_BF16);
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        ADD(nm, K_NORM, 1, sh->dim, 0, LB_TYPE_BF16);
        if (sh->experts) {
            /* q/k norm, attention, router, experts */
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_norm.weight", l);
            ADD(nm, K_NORM, 1, hd, 0, LB_TYPE_BF16);
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_norm.weight", l);
            ADD(nm, K_NORM, 1, hd, 0, LB_TYPE_BF16);
            for (int k = 0; k < 4; k++) {
                snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, lin_name[k]);
                ADD(nm, K_WEIGHT, outs[k], ins[k], ins[k], LB_TYPE_BF16);
            }
            snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate.weight", l);
            ADD(nm, K_WEIGHT, sh->experts, sh->dim, 1, LB_TYPE_BF16);
            for (int e = 0; e < sh->experts; e++)
                for (int k = 4; k < 7; k++) {
                    const int64_t o = k == 6 ? sh->dim : sh->moe_ff,
                                  i = k == 6 ? sh->moe_ff : sh->dim;
                    snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.%s.weight", l, e,
                             lin_name[k] + 4);
                    ADD(nm, K_WEIGHT, o, i, i, LB_TYPE_BF16);
                }
            continue;
        }
        for (int k = 0; k < 7; k++) {
            if (sh->qkv_bias && k < 3) {
                snprintf(nm, sizeof nm, "model.layers.%d.%s.bias", l, lin_name[k]);
                ADD(nm, K_BIAS, 1, outs[k], 0, gptq ? LB_TYPE_F16 : LB_TYPE_BF16);
            }
            if (!gptq) {
                snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, lin_name[k]);
                ADD(nm, K_WEIGHT, outs[k], ins[k], ins[k], LB_TYPE_BF16);
                continue;
            }
            const int64_t groups = (ins[k] + 127) / 128;
            snprintf(nm, sizeof nm, "model.layers.%d.%s.qweight", l, lin_name[k]);
            ADD(nm, K_QWEIGHT, ins[k] / 8, outs[k], ins[k], LB_TYPE_I32);
            snprintf(nm, sizeof nm, "model.layers.%d.%s.qzeros", l, lin_name[k]);
            ADD(nm, K_QZEROS, groups, outs[k] / 8, ins[k], LB_TYPE_I32);
            snprintf(nm, sizeof nm, "model.layers.%d.%s.scales", l, lin_name[k]);
            ADD(nm, K_SCALES, groups, outs[k], ins[k], LB_TYPE_F16);
            snprintf(nm, sizeof nm, "model.layers.%d.%s.g_idx", l, lin_name[k]);
            ADD(nm, K_GIDX, 1, ins[k], ins[k], LB_TYPE_I32);
        }
    }
#undef ADD
    if (s == LB_OK) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        s = lb_st_writer_write_file(w, path);
    }
    lb_st_writer_free(w);
    free(ps);
    free(names);
    if (s != LB_OK) {
        fprintf(stderr, "make_random_hf: %s\n", lb_last_error());
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *shape_name = NULL, *hf = NULL, *gq = NULL, *tok = NULL;
    unsigned long long seed = 1;
    long layers = 0, vocab = 0, experts = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shape") && i + 1 < argc) shape_name = argv[++i];
        else if (!strcmp(argv[i], "--hf") && i + 1 < argc) hf = argv[++i];
        else if (!strcmp(argv[i], "--gptq") && i + 1 < argc) gq = argv[++i];
        else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--vocab") && i + 1 < argc) vocab = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--experts") && i + 1 < argc)
            experts = strtol(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: make_random_hf --shape qwen2.5-0.5b|llama3.2-1b|llama2-7b|qwen2.5-7b|tiny|qwen3-30b-a3b [--hf DIR] "
                            "[--gptq DIR] [--tokenizer DIR] [--seed N] [--layers N] "
                            "[--vocab N] [--experts N]\n");
            return 2;
        }
    }
    const shape *sh = NULL;
    shape custom;
    for (size_t i = 0; shape_name && i < sizeof k_shapes / sizeof k_shapes[0]; i++)
        if (!strcmp(k_shapes[i].name, shape_name)) sh = &k_shapes[i];
    if (!sh || (!hf && !gq)) {
        fprintf(stderr, "make_random_hf: need a known --shape and --hf and/or --gptq\n");
        return 2;
    }
    if (layers < 0 || layers > 1000 || vocab < 0 || vocab > 10000000) {
        fprintf(stderr, "make_random_hf: --layers must be in 1..1000, --vocab in 1..10000000\n");
        return 2;
    }
    custom = *sh;
    if (layers) custom.layers = (int)layers;
    if (vocab) custom.vocab = (int)vocab;
    if (experts) {
        if (!custom.experts || experts < custom.top_k || experts > 4096) {
            fprintf(stderr, "make_random_hf: --experts: a MoE shape, top-k..4096\n");
            return 2;
        }
        custom.experts = (int)experts;
    }
    sh = &custom;
    if (hf && write_model(sh, hf, false, tok, seed)) return 1;
    if (gq && write_model(sh, gq, true, tok, seed)) return 1;
    return 0;
}
