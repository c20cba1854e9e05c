/*
 * QuaRot-style rotations of float models (lowbit/quantize.h
 * lb_model_rotate_hadamard = R1, lb_model_rotate_online_down = R4 with the
 * online Hadamard on down_proj's input applied by the forward):
 *   - R1 + R4 leave the logits of tinystories-656k (Llama, ff 384 = 12 *
 *     32), the random Qwen2 (q/k/v bias) and Qwen3 (q/k norm) models (ff
 *     192 = 12 * 16) and the random Llama-3 GQA model (ff 256, Sylvester
 *     only) within 1e-4 of the unrotated model's, through the single-
 *     sequence forward (lb_model_forward) and the multi-sequence one
 *     (lb_model_forward_multi);
 *   - the transform is really applied: the same rotated weights without
 *     config.online_hadamard_down give logits far away;
 *   - Qwen3's q_norm / k_norm are left as they were; down_proj became
 *     W T^T (checked against the f64 transform on one row);
 *   - refusals: R4 twice, an unsupported intermediate_size;
 *   - a hidden size that is not a power of two (96 = 12 * 8, a random Qwen2
 *     written here): R1 with the Paley-Kronecker transform, same bound;
 *     R1 really moved the embedding rows and kept their norms.
 */
#include "th.h"
#include "lowbit/batch.h"
#include "lowbit/hadamard.h"
#include "lowbit/model.h"
#include "lowbit/quantize.h"
#include "lowbit/quants.h"
#include "lowbit/safetensors.h"

#include <sys/stat.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 48 };

static lb_status logits(const lb_model *m, const int32_t *ids, float *out) {
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = N;
    cp.n_threads = 2;
    lb_context *c = NULL;
    lb_status s = lb_context_create(m, &cp, &c);
    if (s == LB_OK) s = lb_model_forward(c, ids, N, 0, out, LB_LOGITS_ALL);
    lb_context_free(c);
    return s;
}

/* two sequences: ids[0..N/2) as seq 0 and ids[N/2..N) as seq 1, both from
 * position 0; compared with the single-sequence logits of each half */
static lb_status logits_multi(const lb_model *m, const int32_t *ids, float *out) {
    lb_multi_params mp = lb_multi_default_params();
    mp.n_seq = 2;
    mp.n_ctx = N;
    mp.n_threads = 2;
    lb_multi_ctx *mc = NULL;
    lb_status s = lb_multi_create(m, &mp, &mc);
    int32_t seq[N], pos[N];
    for (int i = 0; i < N; i++) {
        seq[i] = i < N / 2 ? 0 : 1;
        pos[i] = i % (N / 2);
    }
    if (s == LB_OK) s = lb_model_forward_multi(mc, ids, seq, pos, N, NULL, out);
    lb_multi_free(mc);
    return s;
}

static double maxdiff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static void check_dir(const char *dir, const char *rel, uint64_t seed) {
    lb_model *a = NULL, *b = NULL;
    TH_CHECK_OK(lb_model_load(dir, NULL, &a));
    TH_CHECK_OK(lb_model_load(dir, NULL, &b));
    if (!a || !b) {
        lb_model_free(a);
        lb_model_free(b);
        return;
    }
    const int V = a->config.vocab_size, ff = a->config.intermediate_size;
    const int dim = a->config.hidden_size;
    double *row = calloc((size_t)ff, sizeof(double)), *tmp = calloc((size_t)ff, sizeof(double));
    TH_CHECK_OK(lb_model_rotate_hadamard(b, seed));
    { /* R1 moved the embedding (rows became e Q), norms are ones */
        const lb_tensor *ea = &a->tok_embd, *eb = &b->tok_embd;
        float ra[1024], rb[1024];
        TH_CHECK(dim <= 1024 && eb->type == LB_TYPE_F32);
        TH_CHECK_OK(lb_dequantize_row(ea->type, ea->data, ra, dim));
        TH_CHECK_OK(lb_dequantize_row(eb->type, eb->data, rb, dim));
        double moved = 0, na = 0, nb = 0;
        for (int i = 0; i < dim; i++) {
            moved = fmax(moved, fabs((double)ra[i] - rb[i]));
            na += (double)ra[i] * ra[i];
            nb += (double)rb[i] * rb[i];
        }
        TH_CHECK(moved > 1e-3);
        TH_CHECK(fabs(sqrt(na) - sqrt(nb)) <= 1e-5 * sqrt(na)); /* orthogonal */
        TH_CHECK(((const float *)b->output_norm.data)[0] == 1.0f);
    }
    /* R1 rotated down_proj's rows (its output side): take the rotated row */
    const lb_tensor *wr1 = &b->layers[1].w[LB_LINEAR_DOWN];
    TH_CHECK(wr1->type == LB_TYPE_F32);
    for (int i = 0; i < ff; i++) row[i] = ((const float *)wr1->data)[i];
    TH_CHECK_OK(lb_model_rotate_online_down(b));
    TH_CHECK(b->config.online_hadamard_down);
    TH_CHECK_INT(lb_model_rotate_online_down(b), LB_ERR_INVALID_ARG);
    lb_hadamard h;
    TH_CHECK_OK(lb_hadamard_init(&h, ff));
    lb_hadamard_apply_f64(&h, row, false, tmp);
    double dw = 0;
    const float *wr4 = b->layers[1].w[LB_LINEAR_DOWN].data;
    for (int i = 0; i < ff; i++) dw = fmax(dw, fabs(row[i] - wr4[i]));
    TH_CHECK(dw < 1e-6);
    lb_hadamard_free(&h);
    if (a->config.qk_norm) /* Qwen3's q/k norms stay where they are */
        TH_CHECK(memcmp(a->layers[0].q_norm.data, b->layers[0].q_norm.data,
                        (size_t)a->config.head_dim * sizeof(float)) == 0 &&
                 memcmp(a->layers[1].k_norm.data, b->layers[1].k_norm.data,
                        (size_t)a->config.head_dim * sizeof(float)) == 0);
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 37 + 11) % V;
    float *la = malloc(sizeof(float) * N * V), *lb = malloc(sizeof(float) * N * V);
    float *lm = malloc(sizeof(float) * N * V), *lr = malloc(sizeof(float) * N * V);
    float *lh = malloc(sizeof(float) * N * V);
    TH_CHECK_OK(logits(a, ids, la));
    TH_CHECK_OK(logits(b, ids, lb));
    TH_CHECK_OK(logits_multi(b, ids, lm));
    /* reference for the multi-sequence run: each half alone, unrotated */
    int32_t half[N];
    memcpy(half, ids, sizeof half);
    TH_CHECK_OK(logits(a, ids, lh)); /* first half = rows 0..N/2 of la */
    memmove(half, ids + N / 2, sizeof(int32_t) * (N / 2));
    memcpy(half + N / 2, ids, sizeof(int32_t) * (N / 2));
    TH_CHECK_OK(logits(a, half, lr));
    double mx = 0;
    for (size_t i = 0; i < (size_t)N * V; i++) mx = fmax(mx, fabs((double)la[i]));
    const double d = maxdiff(la, lb, (size_t)N * V);
    const double dm0 = maxdiff(la, lm, (size_t)(N / 2) * V);
    const double dm1 = maxdiff(lr, lm + (size_t)(N / 2) * V, (size_t)(N / 2) * V);
    /* without the online transform the rotated weights are wrong */
    b->config.online_hadamard_down = false;
    TH_CHECK_OK(logits(b, ids, lh));
    b->config.online_hadamard_down = true;
    const double doff = maxdiff(la, lh, (size_t)N * V);
    printf("  %s (dim %d, ff %d): R1+R4 float logits max |diff| %.3g "
           "(multi-seq %.3g, %.3g), max |logit| %.3g; without the online "
           "transform %.3g\n", rel, dim, ff, d, dm0, dm1, mx, doff);
    TH_CHECK(d <= 1e-4);
    TH_CHECK(dm0 <= 1e-4 && dm1 <= 1e-4);
    TH_CHECK(doff > 1e-2);
    free(la); free(lb); free(lm); free(lr); free(lh);
    free(row); free(tmp);
    lb_model_free(a);
    lb_model_free(b);
}

static void check_model(const char *rel, uint64_t seed) {
    check_dir(th_shared(rel), rel, seed);
}

/* A random Qwen2 model (q/k/v biases, GQA) whose hidden size is not a
 * power of two: 96 = 12 * 8 (Paley I, q = 11), as Qwen2.5-0.5B's 896 =
 * 28 * 32; ff 192 = 12 * 16. F32 weights in a temp directory. */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float urand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / (double)(1ull << 52) - 1.0);
}

static const char *make_dim96_model(void) {
    static char dir[600];
    snprintf(dir, sizeof dir, "%s/qwen2-dim96", th_tmpdir());
    mkdir(dir, 0755);
    char p[700];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    if (!f) return NULL;
    fprintf(f, "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\", "
               "\"hidden_size\": 96, \"intermediate_size\": 192, \"num_attention_heads\": 4, "
               "\"num_key_value_heads\": 2, \"num_hidden_layers\": 2, \"vocab_size\": 256, "
               "\"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
               "\"tie_word_embeddings\": true, \"torch_dtype\": \"float32\"}\n");
    fclose(f);
    enum { D = 96, F = 192, KV = 48, V = 256 };
    static struct { const char *name; int d0, d1; float scale, base; } spec[] = {
        {"model.embed_tokens.weight", V, D, 1.0f, 0.0f},
        {"model.norm.weight", D, 0, 0.3f, 1.0f},
        {"input_layernorm.weight", D, 0, 0.3f, 1.0f},
        {"post_attention_layernorm.weight", D, 0, 0.3f, 1.0f},
        {"self_attn.q_proj.weight", D, D, 0.2f, 0.0f},
        {"self_attn.q_proj.bias", D, 0, 0.1f, 0.0f},
        {"self_attn.k_proj.weight", KV, D, 0.2f, 0.0f},
        {"self_attn.k_proj.bias", KV, 0, 0.1f, 0.0f},
        {"self_attn.v_proj.weight", KV, D, 0.2f, 0.0f},
        {"self_attn.v_proj.bias", KV, 0, 0.1f, 0.0f},
        {"self_attn.o_proj.weight", D, D, 0.2f, 0.0f},
        {"mlp.gate_proj.weight", F, D, 0.2f, 0.0f},
        {"mlp.up_proj.weight", F, D, 0.2f, 0.0f},
        {"mlp.down_proj.weight", D, F, 0.15f, 0.0f},
    };
    enum { NSPEC = sizeof spec / sizeof spec[0] };
    static float buf[2 * NSPEC][V * D];
    static char names[2 * NSPEC][96];
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_writer_create(&w));
    int nb = 0;
    for (int l = -1; l < 2 && w; l++)
        for (int k = 0; k < NSPEC; k++) {
            if ((l < 0) != (k < 2)) continue; /* two globals, then per layer */
            const int64_t sh[2] = {spec[k].d0, spec[k].d1};
            const int64_t ne = (int64_t)spec[k].d0 * (spec[k].d1 > 0 ? spec[k].d1 : 1);
            for (int64_t i = 0; i < ne; i++) buf[nb][i] = spec[k].base + spec[k].scale * urand();
            if (l < 0)
                snprintf(names[nb], sizeof names[nb], "%s", spec[k].name);
            else
                snprintf(names[nb], sizeof names[nb], "model.layers.%d.%s", l, spec[k].name);
            TH_CHECK_OK(lb_st_writer_add(w, names[nb], LB_TYPE_F32, spec[k].d1 > 0 ? 2 : 1,
                                         sh, buf[nb]));
            nb++;
        }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    TH_CHECK_OK(lb_st_writer_write_file(w, p));
    lb_st_writer_free(w);
    return dir;
}

static void test_hidden_not_pow2(void) {
    const char *dir = make_dim96_model();
    TH_CHECK(dir != NULL);
    if (dir) check_dir(dir, "qwen2 dim 96 (random, written here)", 5);
}

static void test_tinystories(void) { check_model("models/tinystories-656k", 0); }
static void test_qwen2(void) { check_model("models/random/qwen2-random", 7); }
static void test_qwen3(void) { check_model("models/random/qwen3-random", 12345); }
static void test_llama_gqa(void) {
    check_model("models/random/llama-gqa-llama3rope-bf16-random", 3);
}

int main(void) {
    TH_RUN(test_tinystories);
    TH_RUN(test_qwen2);
    TH_RUN(test_qwen3);
    TH_RUN(test_llama_gqa);
    TH_RUN(test_hidden_not_pow2);
    return th_report();
}
