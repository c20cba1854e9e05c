/*
 * lowbit/sample.h — choosing the next token from logits, with a
 * deterministic PRNG.
 *
 * Pipeline, in transformers' order (generation/utils.py
 * _get_logits_processor, transformers 5.12: penalties, then the warpers
 * temperature -> top-k -> top-p -> min-p), then a draw:
 *   1. repetition penalty (HF RepetitionPenaltyLogitsProcessor, also
 *      llama.cpp's --repeat-penalty): for every distinct token in the
 *      penalty window, logit > 0 -> logit / r, else logit * r;
 *   2. presence / frequency penalty (OpenAI API semantics):
 *      logit -= count * frequency_penalty + (count > 0) * presence_penalty,
 *      count = occurrences in the penalty window;
 *   3. temperature <= 0: greedy — the argmax (first index on ties); stop;
 *   4. logits / temperature;
 *   5. top-k: keep the k largest (ties broken by lower token id);
 *   6. top-p: softmax, keep the smallest prefix (by descending probability)
 *      whose cumulative probability reaches top_p (at least one token);
 *   7. min-p: drop tokens with p < min_p * p_max;
 *   8. draw from the renormalised remaining probabilities with the PRNG.
 * The penalty window is the last penalty_last_n tokens passed to
 * lb_sampler_accept (prompt and generated alike, as llama.cpp does);
 * -1 = all of them.
 *
 * PRNG: xoshiro256** 1.0 (Blackman & Vigna), state seeded from the 64-bit
 * seed with splitmix64; a draw uses the top 53 bits of one output as a
 * double in [0, 1). Same seed, same logits -> same tokens, on every
 * machine.
 */
#ifndef LOWBIT_SAMPLE_H
#define LOWBIT_SAMPLE_H

#include "lowbit/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- PRNG --------------------------------------------------------------- */
typedef struct lb_rng {
    uint64_t s[4];
} lb_rng;

void lb_rng_seed(lb_rng *rng, uint64_t seed);
uint64_t lb_rng_next(lb_rng *rng);
/* Uniform double in [0, 1) with 53 random bits. */
double lb_rng_uniform(lb_rng *rng);

/* ---- sampler ------------------------------------------------------------ */
typedef struct lb_sampler_params {
    float temperature;       /* <= 0: greedy (default 0)                    */
    int32_t top_k;           /* <= 0: off (default)                          */
    float top_p;             /* >= 1: off (default 1)                        */
    float min_p;             /* <= 0: off (default 0)                        */
    float repeat_penalty;    /* 1: off (default 1); must be > 0              */
    float presence_penalty;  /* 0: off (default)                             */
    float frequency_penalty; /* 0: off (default)                             */
    int32_t penalty_last_n;  /* window for penalties; -1 all; default 64     */
    uint64_t seed;           /* PRNG seed (default 0)                        */
} lb_sampler_params;

/* Defaults as documented above (greedy). */
lb_sampler_params lb_sampler_default_params(void);

typedef struct lb_sampler lb_sampler;

/* Sampler for a vocabulary of n_vocab logits. Errors: LB_ERR_INVALID_ARG
 * (n_vocab <= 0, NaN or negative parameters, repeat_penalty <= 0),
 * LB_ERR_NOMEM. Free with lb_sampler_free. */
lb_status lb_sampler_create(const lb_sampler_params *params, int32_t n_vocab,
                            lb_sampler **out);
void lb_sampler_free(lb_sampler *s);

/* Forget the token history and re-seed the PRNG with params.seed. */
void lb_sampler_reset(lb_sampler *s);

/* Append a token (prompt or generated) to the penalty history. */
lb_status lb_sampler_accept(lb_sampler *s, int32_t token);

/* Choose a token from logits[n_vocab] (not modified). Returns the id. */
int32_t lb_sampler_sample(lb_sampler *s, const float *logits);

/* Index of the largest logit, first on ties (NaN never wins). */
int32_t lb_argmax(const float *logits, int32_t n);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_SAMPLE_H */
