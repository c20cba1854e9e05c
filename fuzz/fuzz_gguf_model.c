/*
 * fuzz_gguf_model — libFuzzer harness for the GGUF model loader
 * (hyper-parameters and tensors treated as hostile) and the forward pass on
 * whatever it accepts.
 *
 * The input is parsed with lb_gguf_open_memory; when the reader accepts it,
 * lb_model_load_gguf_reader builds a model. A model that loads is run: a
 * context of 8 positions (f16 KV cache on every other input), a 3-token
 * prefill and one decode step with all logits. Invariants (abort when
 * broken): a loaded model's tensors have the shapes its config implies and
 * their data lies inside the input; the forward of a loaded model
 * succeeds.
 *
 * Seeds (fuzz/corpus/fuzz_gguf_model/, `test_gguf_model --write-fuzz-seeds
 * DIR`): tiny llama (F32, Q4_0 with rope_freqs, tied), qwen2 (Q8_0, q/k/v
 * biases) and qwen3 (F16, q/k norms, explicit head dim) models; Q8_0
 * exports of tests/data/arch's gemma3, phi3-longrope, qwen2moe (shared
 * expert) and mixtral random models (issue 13).
 */
#include "lowbit/gguf.h"
#include "lowbit/model.h"
#include "model/model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(c)                                                             \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "invariant failed: %s (line %d)\n", #c, __LINE__); \
            abort();                                                           \
        }                                                                      \
    } while (0)

static void check_tensor(const lb_tensor *t, const uint8_t *lo, size_t n) {
    if (!t->data) return;
    const uint8_t *p = t->data;
    /* in the input, or an owned copy (norms, misaligned data): either way
     * nbytes must match the shape */
    size_t rb;
    REQUIRE(lb_row_size(t->type, lb_tensor_cols(t), &rb));
    REQUIRE(rb * (size_t)lb_tensor_rows(t) == t->nbytes);
    if (p >= lo && p < lo + n) REQUIRE(t->nbytes <= (size_t)(lo + n - p));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lb_gguf *g = NULL;
    if (lb_gguf_open_memory(data, size, "fuzz", &g) != LB_OK) return 0;
    lb_model *m = NULL;
    if (lb_model_load_gguf_reader(g, false, NULL, &m) == LB_OK) {
        const lb_model_config *c = &m->config;
        check_tensor(&m->tok_embd, data, size);
        check_tensor(&m->output, data, size);
        REQUIRE(m->tok_embd.shape[0] == c->vocab_size);
        REQUIRE(m->output.shape[1] == c->hidden_size);
        for (int l = 0; l < c->n_layers; l++)
            for (int i = 0; i < LB_LINEAR_COUNT; i++) {
                const lb_tensor *w = &m->layers[l].w[i];
                const lb_tensor_role role = (lb_tensor_role)(LB_ROLE_Q + i);
                /* a MoE layer has experts instead of the dense MLP */
                if (!lb_role_used_in(c, role, l)) {
                    REQUIRE(!w->data);
                    continue;
                }
                check_tensor(w, data, size);
                int nd;
                int64_t sh[2];
                lb_role_shape(c, role, &nd, sh);
                REQUIRE(w->n_dims == 2 && w->shape[0] == sh[0] && w->shape[1] == sh[1]);
            }
        for (int l = 0; l < c->n_layers; l++) {
            const lb_layer_weights *L = &m->layers[l];
            REQUIRE(!L->exp == !lb_model_config_layer_moe(c, l));
            for (int e = 0; L->exp && e < 3 * c->n_experts; e++) {
                const lb_tensor *w = &L->exp[e];
                check_tensor(w, data, size);
                int nd;
                int64_t sh[2];
                lb_role_shape(c, (lb_tensor_role)(LB_ROLE_EXP_GATE + e % 3), &nd, sh);
                REQUIRE(w->n_dims == 2 && w->shape[0] == sh[0] && w->shape[1] == sh[1]);
            }
        }
        lb_context_params p = lb_context_default_params();
        p.n_ctx = 8;
        p.n_threads = 1;
        p.kv_type = (size & 1) ? LB_TYPE_F16 : LB_TYPE_F32;
        lb_context *ctx = NULL;
        if (lb_context_create(m, &p, &ctx) == LB_OK) {
            int32_t ids[3] = {0, (int32_t)(size % (size_t)c->vocab_size),
                              c->vocab_size - 1};
            float *lg = malloc(3 * sizeof(float) * (size_t)c->vocab_size);
            REQUIRE(lg);
            REQUIRE(lb_model_forward(ctx, ids, 3, 0, lg, LB_LOGITS_ALL) == LB_OK);
            REQUIRE(lb_model_forward(ctx, ids + 1, 1, 3, lg, LB_LOGITS_LAST) == LB_OK);
            free(lg);
            lb_context_free(ctx);
        }
        lb_model_free(m);
    }
    lb_gguf_close(g);
    return 0;
}
