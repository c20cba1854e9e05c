/*
 * lowbit/batch.h — multi-sequence forward: several independent sequences
 * (one per server slot) share every weight pass.
 *
 * An lb_multi_ctx holds n_seq separate KV caches, one per sequence id
 * 0..n_seq-1, each [n_layers][nkv][n_ctx][hd] f32 for K and for V. One call
 * of lb_model_forward_multi takes a batch of tokens from any mix of
 * sequences (one decode token from each of several sequences, a chunk of one
 * sequence's prompt, or both), stacks them into one activation matrix
 * [n_tokens, dim], and runs every linear (q/k/v/o, gate/up/down, lm_head)
 * once over all of them — one pass over the weights for the whole batch —
 * while RoPE, the K/V cache writes and attention use each token's own
 * sequence and position. This is continuous batching as in llama.cpp's
 * llama_decode with a multi-sequence llama_batch (tokens, pos, seq_id,
 * logits flags), restricted to one sequence per token and separate caches
 * (no shared prefixes between sequences).
 *
 * Arithmetic is the same per token as lb_model_forward (model.h):
 * transformers 5.12 eager attention in float32, RMSNorm as LlamaRMSNorm,
 * RoPE from lb_model_rope_inv_freq, SwiGLU; lb_matmul computes every output row
 * with the same arithmetic whatever the number of rows, so a token's logits
 * do not depend on what else is in the batch (tests/test_batch.c checks
 * batched against one-sequence-at-a-time results). Attention is the same
 * unit lb_model_forward runs (src/model/attention.c: the query heads of one
 * KV head together, online softmax over 64-key blocks), so with an f32 KV
 * cache one token per call gives lb_model_forward's bits at any depth.
 *
 * Thread safety: one lb_multi_ctx must be used by one thread at a time (a
 * server's scheduler thread). Several contexts may share a model.
 */
#ifndef LOWBIT_BATCH_H
#define LOWBIT_BATCH_H

#include "lowbit/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lb_multi_ctx lb_multi_ctx;

typedef struct lb_multi_params {
    int32_t n_seq;   /* number of sequences (>= 1)                          */
    int32_t n_ctx;   /* KV cache length of each sequence (<= 0:
                        min(max_position_embeddings, 4096))                 */
    int32_t n_batch; /* initial scratch capacity in tokens (<= 0: 512);
                        grows when a call passes more tokens              */
    int n_threads;   /* threads of the context's own pool (<= 0: all CPUs);
                        ignored when pool is set                           */
    lb_pool *pool;   /* optional shared pool (not owned)                    */
} lb_multi_params;

/* Defaults: n_seq 1, the rest automatic. */
lb_multi_params lb_multi_default_params(void);

/* Create the per-sequence KV caches (allocated but not touched, so memory is
 * only backed as positions are written), RoPE tables [n_ctx][hd/2], scratch
 * and a thread pool for `model` (which must outlive the context).
 * Errors: LB_ERR_INVALID_ARG (n_seq < 1, n_ctx > 2^24), LB_ERR_OVERFLOW,
 * LB_ERR_NOMEM (names the KV cache size). Free with lb_multi_free. */
lb_status lb_multi_create(const lb_model *model, const lb_multi_params *params,
                          lb_multi_ctx **out);
void lb_multi_free(lb_multi_ctx *mc);

int32_t lb_multi_n_seq(const lb_multi_ctx *mc);
int32_t lb_multi_n_ctx(const lb_multi_ctx *mc);
lb_pool *lb_multi_pool(lb_multi_ctx *mc);
const lb_model *lb_multi_model(const lb_multi_ctx *mc);

/* Positions held in sequence `seq`'s cache (0 for an invalid seq). */
int32_t lb_multi_n_past(const lb_multi_ctx *mc, int32_t seq);

/* Keep only positions [0, n) of sequence `seq` (n <= n_past; 0 empties it).
 * Errors: LB_ERR_RANGE (seq or n). */
lb_status lb_multi_truncate(lb_multi_ctx *mc, int32_t seq, int32_t n);

/* The token ids cached for `seq`: returns n_past and points *tokens
 * (optional) at the ids of positions 0..n_past-1 (owned by mc, valid until
 * the next call that changes seq). Used to reuse a shared prompt prefix.
 * Returns 0 (and *tokens NULL) for an invalid seq. */
int32_t lb_multi_cached_tokens(const lb_multi_ctx *mc, int32_t seq,
                               const int32_t **tokens);

/* Run a batch of n tokens: token i is tokens[i] of sequence seq_ids[i] at
 * position positions[i]. Within each sequence, its tokens must appear in
 * batch order at consecutive positions p0, p0+1, ..., with p0 <= that
 * sequence's n_past (p0 < n_past overwrites — truncates — the cache from
 * p0 on) and the last position < n_ctx; sequences may be interleaved.
 * Token i attends to positions [0, positions[i]] of its own sequence
 * (including earlier tokens of the same call). want_logits (optional, n
 * flags; NULL = every token) selects the tokens whose logits are computed:
 * logits_out receives one row of V floats per selected token, in batch
 * order ([n_selected, V]; may be NULL when none is selected). Row r
 * predicts the token after the r-th selected token.
 * Errors: LB_ERR_INVALID_ARG (n <= 0, NULL arrays, logits_out NULL with a
 * selected token), LB_ERR_RANGE (a token id outside [0, V), a seq outside
 * [0, n_seq), positions that are not consecutive, start beyond n_past or
 * reach n_ctx; nothing is changed then), LB_ERR_NOMEM, kernel errors
 * (LB_ERR_UNSUPPORTED weight type). After an error during the forward
 * itself, each sequence in the batch holds positions [0, p0). */
lb_status lb_model_forward_multi(lb_multi_ctx *mc, const int32_t *tokens,
                                 const int32_t *seq_ids,
                                 const int32_t *positions, int32_t n,
                                 const uint8_t *want_logits,
                                 float *logits_out);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_BATCH_H */
