/*
 * attention.c — one attention unit of the decoder: the G query heads that
 * share one KV head, against cached positions [j0, p] of one sequence.
 * Used by the single-sequence forward (forward.c), the batched
 * multi-sequence forward (batch.c) and the issue-13 architectures
 * (forward_ext.c), so all three compute the same bits.
 *
 *   s   = scale * q K^T            [G, keys]   (keys in blocks of ATT_BLOCK)
 *   s   = cap * tanh(s / cap)      (Gemma 2 soft-capping, when cap > 0)
 *   out = softmax(s) V             [G, hd]     (online softmax over blocks:
 *                                               running max and sum, as
 *                                               FlashAttention, Dao et al.
 *                                               2022, Algorithm 1)
 *
 * An f16 cache is converted a block at a time into f32 scratch, and the
 * next block's lines are prefetched while the current one is scored
 * (decode at depth 4096 otherwise waited on them in the conversion).
 * Tried and not adopted (2026-12-05, Zen 3): converting 16 rows at a time
 * with each step prefetching its share of the next block measured 1.4x
 * faster in a variant of bench_attention (8.6-9.3 against 12.0-13.7 ms per
 * token for the same loop with the burst) but
 * not end to end (`lowbit bench qwen2.5-0.5b-q4_0.gguf -p 0 -n 128 -d 4096
 * -t 1`: 27-35 tokens/s against 31-34, f16_to_f32 10% -> 16% of the
 * decode samples).
 */
#include "model/model_internal.h"
#include "core/internal.h"
#include "kernels/kernels_internal.h"

#include <math.h>
#include <string.h>

#define ATT_BLOCK 64 /* keys per block (scores, converted K/V rows in L1) */

size_t lb_attn_scratch_floats(int G, int hd) {
    /* scores [G, ATT_BLOCK], K and V rows [ATT_BLOCK, hd], max and sum
     * [G]; a multiple of 16 floats (64 bytes) so per-thread slices stay
     * aligned */
    return ((size_t)G * ATT_BLOCK + 2 * (size_t)ATT_BLOCK * (size_t)hd +
            2 * (size_t)G + 15) / 16 * 16;
}

void lb_attn_unit_run(const lb_vec_kernels *vec, const lb_attn_unit *u,
                      float *scratch) {
    const int G = u->G, hd = u->hd;
    float *s = scratch, *kf = s + (size_t)G * ATT_BLOCK,
          *vf = kf + (size_t)ATT_BLOCK * hd, *mx = vf + (size_t)ATT_BLOCK * hd,
          *sum = mx + G;
    float *acc = u->out;
    memset(acc, 0, (size_t)G * (size_t)hd * sizeof(float));
    for (int g = 0; g < G; g++) {
        mx[g] = -INFINITY;
        sum[g] = 0.0f;
    }
    for (int32_t j = u->j0; j <= u->p; j += ATT_BLOCK) {
        const int64_t nb = LB_MIN(ATT_BLOCK, (int64_t)u->p + 1 - j);
        const size_t r0 = u->row0 + (size_t)j * (size_t)hd;
        const float *K = (const float *)u->k_cache + r0,
                    *V = (const float *)u->v_cache + r0;
        if (u->f16) {
            const uint16_t *k16 = (const uint16_t *)u->k_cache + r0,
                           *v16 = (const uint16_t *)u->v_cache + r0;
            vec->f16_to_f32(k16, kf, nb * hd);
            vec->f16_to_f32(v16, vf, nb * hd);
            K = kf;
            V = vf;
            /* the next block's lines, fetched while this one is scored
             * (two or four blocks ahead, or into L2, measured no better) */
            const int64_t nn = LB_MIN(ATT_BLOCK, (int64_t)u->p + 1 - (j + ATT_BLOCK));
            for (int64_t off = 0; off < nn * hd * 2; off += 64) {
                __builtin_prefetch((const char *)(k16 + (size_t)ATT_BLOCK * hd) + off);
                __builtin_prefetch((const char *)(v16 + (size_t)ATT_BLOCK * hd) + off);
            }
        }
        /* s = scale * q K^T; soft-capping; running max, rescale of what
         * was summed so far, exp; acc += p V */
        vec->qk(G, hd, u->q, K, nb, u->scale, s, ATT_BLOCK);
        for (int g = 0; g < G; g++) {
            float *sg = s + (size_t)g * ATT_BLOCK;
            if (u->softcap > 0)
                for (int64_t i = 0; i < nb; i++)
                    sg[i] = tanhf(sg[i] / u->softcap) * u->softcap;
            float bm = sg[0];
            for (int64_t i = 1; i < nb; i++) bm = sg[i] > bm ? sg[i] : bm;
            if (bm > mx[g]) {
                const float r = expf(mx[g] - bm); /* 0 on the first block */
                if (sum[g] != 0.0f) {
                    float *ag = acc + (size_t)g * hd;
                    for (int i = 0; i < hd; i++) ag[i] *= r;
                }
                sum[g] *= r;
                mx[g] = bm;
            }
            sum[g] += vec->exp_sum(sg, nb, mx[g]);
        }
        vec->pv(G, hd, s, ATT_BLOCK, V, nb, acc);
    }
    for (int g = 0; g < G; g++) {
        const float inv = 1.0f / sum[g];
        float *ag = acc + (size_t)g * hd;
        for (int i = 0; i < hd; i++) ag[i] *= inv;
    }
}
