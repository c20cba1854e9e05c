/*
 * bench_batch — decode throughput of lb_model_forward_multi (batched decode
 * across sequences, as `lowbit serve --parallel N` runs it) against one
 * sequence at a time through lb_model_forward, on a random-weight
 * Llama-shaped model big enough to be weight-bandwidth bound.
 *
 *   bench_batch [hidden 1024] [layers 8] [ff 2816] [vocab 16000] [threads 2]
 *
 * Weights F16 (lb_matmul's f32-arithmetic path), random in [-0.05, 0.05].
 * For B = 1, 2, 4, 8 sequences: prefill 16 tokens each, then 32 decode
 * steps of B tokens (one per sequence); prints tokens/s and the ratio to
 * the single-sequence lb_model_forward baseline measured in the same run.
 */
#include "lowbit/batch.h"
#include "lowbit/model.h"
#include "model/model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((float)(rng >> 40) / (float)(1u << 24) - 0.5f) * 0.1f;
}

static lb_status set_random(lb_model *m, lb_tensor_role role, int layer) {
    int nd;
    int64_t shape[2];
    lb_role_shape(&m->config, role, &nd, shape);
    size_t n = (size_t)shape[0] * (size_t)(nd == 2 ? shape[1] : 1);
    bool f32 = nd == 1; /* norms F32, matrices F16 */
    size_t bytes = n * (f32 ? 4 : 2);
    void *buf = lb_alloc(bytes);
    if (!buf) return LB_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        float v = f32 ? 1.0f + frand() : frand();
        if (f32)
            ((float *)buf)[i] = v;
        else
            ((uint16_t *)buf)[i] = lb_f32_to_f16(v);
    }
    lb_status s = lb_model_builder_own(m, buf);
    if (s != LB_OK) return s;
    lb_tensor t;
    memset(&t, 0, sizeof t);
    t.name = lb_role_name(role);
    t.type = f32 ? LB_TYPE_F32 : LB_TYPE_F16;
    t.n_dims = nd;
    t.shape[0] = shape[0];
    t.shape[1] = nd == 2 ? shape[1] : 0;
    t.data = buf;
    t.nbytes = bytes;
    return lb_model_builder_set(m, role, layer, &t);
}

int main(int argc, char **argv) {
    int hidden = argc > 1 ? atoi(argv[1]) : 1024;
    int layers = argc > 2 ? atoi(argv[2]) : 8;
    int ff = argc > 3 ? atoi(argv[3]) : 2816;
    int vocab = argc > 4 ? atoi(argv[4]) : 16000;
    int threads = argc > 5 ? atoi(argv[5]) : 2;
    char json[1024];
    snprintf(json, sizeof json,
             "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":%d,"
             "\"intermediate_size\":%d,\"num_hidden_layers\":%d,"
             "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,"
             "\"vocab_size\":%d,\"max_position_embeddings\":4096,"
             "\"rms_norm_eps\":1e-5,\"tie_word_embeddings\":false}",
             hidden, ff, layers, hidden / 64, hidden / 256 > 0 ? hidden / 256 : 1,
             vocab);
    lb_model_config cfg;
    lb_model *m = NULL;
    if (lb_model_config_parse(json, strlen(json), "bench", &cfg) != LB_OK ||
        lb_model_builder_new(&cfg, &m) != LB_OK) {
        fprintf(stderr, "bench_batch: %s\n", lb_last_error());
        return 1;
    }
    lb_model_config_clear(&cfg);
    lb_status s = LB_OK;
    s = set_random(m, LB_ROLE_TOK_EMBD, 0);
    if (s == LB_OK) s = set_random(m, LB_ROLE_OUTPUT, 0);
    if (s == LB_OK) s = set_random(m, LB_ROLE_OUTPUT_NORM, 0);
    static const lb_tensor_role roles[] = {
        LB_ROLE_ATTN_NORM, LB_ROLE_Q, LB_ROLE_K, LB_ROLE_V, LB_ROLE_O,
        LB_ROLE_FFN_NORM, LB_ROLE_GATE, LB_ROLE_UP, LB_ROLE_DOWN};
    for (int l = 0; s == LB_OK && l < layers; l++)
        for (size_t r = 0; s == LB_OK && r < sizeof roles / sizeof *roles; r++)
            s = set_random(m, roles[r], l);
    if (s == LB_OK) s = lb_model_builder_finish(m);
    if (s != LB_OK) {
        fprintf(stderr, "bench_batch: %s\n", lb_last_error());
        lb_model_free(m);
        return 1;
    }
    printf("bench_batch: random Llama hidden %d, %d layers, ff %d, vocab %d, "
           "F16 weights %.0f MiB, %d threads\n",
           hidden, layers, ff, vocab,
           (double)lb_model_weight_bytes(m) / (1 << 20), threads);
    enum { PRE = 16, STEPS = 32, BMAX = 8 };
    float *logits = malloc((size_t)BMAX * vocab * sizeof(float));
    int32_t prompt[PRE];
    for (int i = 0; i < PRE; i++) prompt[i] = (i * 37 + 11) % vocab;

    /* baseline: one sequence, lb_model_forward */
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = PRE + STEPS + 1;
    cp.n_threads = threads;
    lb_context *ctx = NULL;
    if (lb_context_create(m, &cp, &ctx) != LB_OK) return 1;
    lb_model_forward(ctx, prompt, PRE, 0, logits, LB_LOGITS_LAST);
    double t0 = lb_time_s();
    for (int k = 0; k < STEPS; k++) {
        int32_t tok = (k * 13 + 5) % vocab;
        lb_model_forward(ctx, &tok, 1, PRE + k, logits, LB_LOGITS_LAST);
    }
    double base = STEPS / (lb_time_s() - t0);
    lb_context_free(ctx);
    printf("  lb_model_forward, 1 sequence:   %8.1f tokens/s (baseline)\n", base);

    for (int B = 1; B <= BMAX; B *= 2) {
        lb_multi_params mp = lb_multi_default_params();
        mp.n_seq = B;
        mp.n_ctx = PRE + STEPS + 1;
        mp.n_threads = threads;
        lb_multi_ctx *mc = NULL;
        if (lb_multi_create(m, &mp, &mc) != LB_OK) return 1;
        int32_t tok[BMAX], seq[BMAX], pos[BMAX], pseq[PRE], ppos[PRE];
        for (int b = 0; b < B; b++) {
            for (int i = 0; i < PRE; i++) pseq[i] = b, ppos[i] = i;
            uint8_t want[PRE] = {0};
            lb_model_forward_multi(mc, prompt, pseq, ppos, PRE, want, NULL);
        }
        t0 = lb_time_s();
        for (int k = 0; k < STEPS; k++) {
            for (int b = 0; b < B; b++)
                tok[b] = (k * 13 + b * 7 + 5) % vocab, seq[b] = b, pos[b] = PRE + k;
            if (lb_model_forward_multi(mc, tok, seq, pos, B, NULL, logits) != LB_OK) {
                fprintf(stderr, "bench_batch: %s\n", lb_last_error());
                return 1;
            }
        }
        double tps = (double)B * STEPS / (lb_time_s() - t0);
        printf("  forward_multi, %d sequence(s):   %8.1f tokens/s  (x%.2f)\n", B,
               tps, tps / base);
        lb_multi_free(mc);
    }
    free(logits);
    lb_model_free(m);
    return 0;
}
