/* The generation loop. See lowbit/generate.h. */
#include "lowbit/generate.h"
#include "core/internal.h"

#include <stdlib.h>

#define PROMPT_TAIL 4 /* prompt tokens decoded before the continuation */

const char *lb_stop_reason_name(lb_stop_reason r) {
    switch (r) {
    case LB_STOP_LENGTH: return "length";
    case LB_STOP_EOS: return "eos";
    case LB_STOP_STRING: return "stop";
    case LB_STOP_CALLBACK: return "callback";
    case LB_STOP_CTX: return "ctx";
    }
    return "?";
}

lb_generate_params lb_generate_default_params(void) {
    lb_generate_params p;
    memset(&p, 0, sizeof p);
    p.n_predict = 128;
    p.sampling = lb_sampler_default_params();
    return p;
}

void lb_generate_result_free(lb_generate_result *res) {
    if (!res) return;
    free(res->tokens);
    free(res->text);
    memset(res, 0, sizeof *res);
}

/* Bytes at the end of s[0..n) that are an incomplete UTF-8 sequence or a
 * U+FFFD replacement character (EF BF BD) — not yet safe to release. */
static size_t unstable_tail(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    if (n >= 3 && u[n - 3] == 0xEF && u[n - 2] == 0xBF && u[n - 1] == 0xBD)
        return 3;
    /* find the start of the last character */
    size_t i = n, k = 0;
    while (i > 0 && k < 4 && (u[i - 1] & 0xC0) == 0x80) {
        i--;
        k++;
    }
    if (i == 0) return k; /* only continuation bytes: hold them */
    unsigned char lead = u[i - 1];
    size_t need = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3
                                  : (lead >> 3) == 30                      ? 4
                                                                           : 1;
    return k + 1 < need ? k + 1 : 0;
}

/* Longest suffix of s[0..n) that is a proper prefix of some stop string. */
static size_t stop_prefix_tail(const char *s, size_t n,
                               const char *const *stop, int n_stop) {
    size_t best = 0;
    for (int i = 0; i < n_stop; i++) {
        size_t L = strlen(stop[i]);
        for (size_t k = L > 0 ? L - 1 : 0; k > best; k--)
            if (k <= n && memcmp(s + n - k, stop[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

typedef struct gen_state {
    const lb_generate_params *p;
    lb_generate_result *res;
    int32_t *ids;        /* prompt tail + generated */
    size_t n_tail, n_ids, cap_ids;
    char *base;          /* decode(prompt tail) */
    size_t base_len;
    char *gen;           /* current continuation text */
    size_t gen_len;
    size_t committed;    /* gen[0..committed) is final (see rebase)   */
    size_t emitted;      /* bytes of gen released to the callback */
    bool stopped_by_string;
} gen_state;

static lb_status push_id(gen_state *g, int32_t id) {
    if (g->n_ids == g->cap_ids) {
        size_t nc = g->cap_ids ? g->cap_ids * 2 : 64;
        int32_t *n = realloc(g->ids, nc * sizeof *n);
        if (!n) return lb_set_error(LB_ERR_NOMEM, "generate: out of memory");
        g->ids = n;
        g->cap_ids = nc;
    }
    g->ids[g->n_ids++] = id;
    return LB_OK;
}

/* Recompute the continuation text after a new token; find stop strings.
 * *release gets how many bytes (from g->emitted) may be released now. */
static lb_status update_text(gen_state *g, bool final, size_t *release) {
    const lb_generate_params *p = g->p;
    char *full = NULL;
    size_t flen = 0;
    LB_TRY(p->detok.fn(p->detok.user, g->ids, g->n_ids, &full, &flen));
    size_t off = 0;
    if (flen >= g->base_len && memcmp(full, g->base, g->base_len) == 0)
        off = g->base_len;
    else /* the tail's text changed (rare): keep the common prefix */
        while (off < flen && off < g->base_len && full[off] == g->base[off])
            off++;
    /* gen = committed text + decode(tail + ids since the last rebase) */
    size_t nl = g->committed + (flen - off);
    char *ng = realloc(g->gen, nl + 1);
    if (!ng) {
        free(full);
        return lb_set_error(LB_ERR_NOMEM, "generate: out of memory");
    }
    g->gen = ng;
    memcpy(g->gen + g->committed, full + off, flen - off);
    g->gen_len = nl;
    g->gen[nl] = '\0';
    free(full);
    if (g->emitted > g->gen_len) g->emitted = g->gen_len; /* text shrank */
    /* stop strings: earliest match that may include new text */
    size_t cut = g->gen_len;
    for (int i = 0; i < p->n_stop; i++) {
        size_t L = strlen(p->stop[i]);
        if (L == 0 || L > g->gen_len) continue;
        size_t from = g->emitted > L ? g->emitted - L : 0;
        for (size_t j = from; j + L <= g->gen_len && j < cut; j++)
            if (memcmp(g->gen + j, p->stop[i], L) == 0) {
                cut = j;
                break;
            }
    }
    if (cut < g->gen_len) {
        g->gen_len = cut;
        g->gen[cut] = '\0';
        g->stopped_by_string = true;
        final = true;
    }
    size_t avail = g->gen_len - g->emitted;
    if (!final) {
        size_t hold = unstable_tail(g->gen + g->emitted, avail);
        size_t hs = stop_prefix_tail(g->gen + g->emitted, avail, p->stop,
                                     p->n_stop);
        if (hs > hold) hold = hs;
        avail -= hold < avail ? hold : avail;
    }
    *release = avail;
    return LB_OK;
}

/* Keep decoding cost per token bounded: once everything generated so far
 * has been released (complete characters, no pending stop prefix), freeze
 * that text and restart from a short tail of recent tokens, so each step
 * decodes O(REBASE_EVERY) tokens instead of the whole continuation. */
#define REBASE_EVERY 64
static lb_status maybe_rebase(gen_state *g) {
    if (g->emitted != g->gen_len || g->n_ids < g->n_tail + REBASE_EVERY)
        return LB_OK;
    size_t keep = PROMPT_TAIL;
    memmove(g->ids, g->ids + g->n_ids - keep, keep * sizeof *g->ids);
    g->n_ids = g->n_tail = keep;
    free(g->base);
    g->base = NULL;
    LB_TRY(g->p->detok.fn(g->p->detok.user, g->ids, g->n_ids, &g->base,
                          &g->base_len));
    g->committed = g->gen_len;
    return LB_OK;
}

struct lb_gen {
    lb_generate_params p;
    const int32_t *eos;
    int n_eos;
    int32_t n_ctx, n_prompt;
    lb_sampler *smp;
    gen_state g;
    lb_generate_result res; /* tokens, text (at finish), stop_reason */
    size_t cap_tok;
    bool done, failed;
};

lb_status lb_gen_create(const lb_model *m, const int32_t *prompt,
                        int32_t n_prompt, int32_t n_ctx,
                        const lb_generate_params *params, lb_gen **out) {
    *out = NULL;
    lb_generate_params defp = lb_generate_default_params();
    const lb_generate_params *p = params ? params : &defp;
    const lb_model_config *c = &m->config;
    if (n_prompt <= 0 || !prompt)
        return lb_set_error(LB_ERR_INVALID_ARG, "generate: empty prompt");
    if (p->n_stop > 0 && !p->detok.fn)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "generate: stop strings need a detokenizer");
    if (n_prompt > n_ctx)
        return lb_set_error(LB_ERR_RANGE,
                            "generate: prompt of %d tokens does not fit n_ctx "
                            "%d",
                            (int)n_prompt, (int)n_ctx);
    lb_gen *g = calloc(1, sizeof *g);
    if (!g) return lb_set_error(LB_ERR_NOMEM, "generate: out of memory");
    g->p = *p;
    g->eos = p->eos_ids ? p->eos_ids : c->eos_token_ids;
    g->n_eos = p->eos_ids ? p->n_eos : c->n_eos;
    g->n_ctx = n_ctx;
    g->n_prompt = n_prompt;
    g->res.n_prompt = n_prompt;
    g->g.p = &g->p;
    g->g.res = &g->res;
    g->cap_tok = 64;
    g->res.tokens = malloc(g->cap_tok * sizeof *g->res.tokens);
    lb_status s = lb_sampler_create(&p->sampling, c->vocab_size, &g->smp);
    if (s == LB_OK && !g->res.tokens)
        s = lb_set_error(LB_ERR_NOMEM, "generate: out of memory");
    for (int32_t i = 0; s == LB_OK && i < n_prompt; i++)
        s = lb_sampler_accept(g->smp, prompt[i]);
    if (s == LB_OK && p->detok.fn) {
        gen_state *gs = &g->g;
        gs->n_tail = n_prompt < PROMPT_TAIL ? (size_t)n_prompt : PROMPT_TAIL;
        for (size_t i = 0; s == LB_OK && i < gs->n_tail; i++)
            s = push_id(gs, prompt[n_prompt - (int32_t)gs->n_tail + (int32_t)i]);
        if (s == LB_OK)
            s = p->detok.fn(p->detok.user, gs->ids, gs->n_ids, &gs->base,
                            &gs->base_len);
    }
    if (s != LB_OK) {
        lb_gen_free(g);
        return s;
    }
    g->res.stop_reason = LB_STOP_LENGTH;
    *out = g;
    return LB_OK;
}

static void gen_end(lb_gen *g, lb_stop_reason r) {
    g->done = true;
    g->res.stop_reason = r;
}

lb_status lb_gen_step(lb_gen *g, const float *logits, int32_t *next) {
    *next = -1;
    if (g->done || g->failed)
        return lb_set_error(LB_ERR_INVALID_ARG, "generate: step after the end");
    const lb_generate_params *p = &g->p;
    lb_generate_result *res = &g->res;
    gen_state *gs = &g->g;
    if (p->n_predict >= 0 && res->n_tokens >= p->n_predict) {
        gen_end(g, LB_STOP_LENGTH);
        return LB_OK;
    }
    int32_t tok = lb_sampler_sample(g->smp, logits);
    bool is_eos = false;
    for (int i = 0; i < g->n_eos; i++) is_eos |= g->eos[i] == tok;
    if (is_eos && !p->ignore_eos) {
        gen_end(g, LB_STOP_EOS);
        return LB_OK;
    }
    lb_status s = lb_sampler_accept(g->smp, tok);
    if (s == LB_OK && (size_t)res->n_tokens == g->cap_tok) {
        int32_t *nt = realloc(res->tokens, 2 * g->cap_tok * sizeof *nt);
        if (!nt)
            s = lb_set_error(LB_ERR_NOMEM, "generate: out of memory");
        else {
            res->tokens = nt;
            g->cap_tok *= 2;
        }
    }
    if (s != LB_OK) {
        g->failed = true;
        return s;
    }
    res->tokens[res->n_tokens++] = tok;
    size_t release = 0;
    if (p->detok.fn) {
        if ((s = push_id(gs, tok)) != LB_OK ||
            (s = update_text(gs, false, &release)) != LB_OK) {
            g->failed = true;
            return s;
        }
    }
    bool go_on = true;
    if (p->on_token)
        go_on = p->on_token(p->user, tok, gs->gen ? gs->gen + gs->emitted : "",
                            release);
    gs->emitted += release;
    if (p->detok.fn && !gs->stopped_by_string &&
        (s = maybe_rebase(gs)) != LB_OK) {
        g->failed = true;
        return s;
    }
    if (gs->stopped_by_string)
        gen_end(g, LB_STOP_STRING);
    else if (!go_on)
        gen_end(g, LB_STOP_CALLBACK);
    else if (p->n_predict >= 0 && res->n_tokens >= p->n_predict)
        gen_end(g, LB_STOP_LENGTH);
    else if (g->n_prompt + res->n_tokens - 1 >= g->n_ctx)
        gen_end(g, LB_STOP_CTX);
    else
        *next = tok;
    return LB_OK;
}

bool lb_gen_done(const lb_gen *g) { return g->done; }
lb_stop_reason lb_gen_stop_reason(const lb_gen *g) {
    return g->res.stop_reason;
}
int32_t lb_gen_n_tokens(const lb_gen *g) { return g->res.n_tokens; }
int32_t lb_gen_pos(const lb_gen *g) { return g->n_prompt + g->res.n_tokens; }

lb_status lb_gen_finish(lb_gen *g, lb_generate_result *res) {
    const lb_generate_params *p = &g->p;
    gen_state *gs = &g->g;
    /* flush what was held back (incomplete characters, stop prefixes) */
    if (g->done && !g->failed && p->detok.fn && gs->gen) {
        size_t release = gs->gen_len - gs->emitted;
        if (release && p->on_token)
            p->on_token(p->user, -1, gs->gen + gs->emitted, release);
        gs->emitted += release;
    }
    if (p->detok.fn) {
        if (!gs->gen) {
            gs->gen = calloc(1, 1);
            gs->gen_len = 0;
            if (!gs->gen)
                return lb_set_error(LB_ERR_NOMEM, "generate: out of memory");
        }
        g->res.text = gs->gen;
        g->res.text_len = gs->gen_len;
        gs->gen = NULL;
    }
    *res = g->res;
    memset(&g->res, 0, sizeof g->res);
    return LB_OK;
}

void lb_gen_free(lb_gen *g) {
    if (!g) return;
    free(g->g.gen);
    free(g->g.base);
    free(g->g.ids);
    lb_generate_result_free(&g->res);
    lb_sampler_free(g->smp);
    free(g);
}

lb_status lb_generate(lb_context *ctx, const int32_t *prompt,
                      int32_t n_prompt, const lb_generate_params *params,
                      lb_generate_result *res) {
    memset(res, 0, sizeof *res);
    const lb_model *m = lb_context_model(ctx);
    lb_gen *g = NULL;
    LB_TRY(lb_gen_create(m, prompt, n_prompt, lb_context_n_ctx(ctx), params,
                         &g));
    const lb_generate_params *p = &g->p;
    lb_status s = LB_OK;
    float *logits = malloc((size_t)m->config.vocab_size * sizeof *logits);
    if (!logits) s = lb_set_error(LB_ERR_NOMEM, "generate: out of memory");
    /* prefill (after the reusable cached prefix, if any) */
    int32_t keep = 0;
    if (s == LB_OK && p->cache_prompt) {
        const int32_t *cached;
        int32_t n_cached = lb_context_cached_tokens(ctx, &cached);
        while (keep < n_cached && keep < n_prompt - 1 &&
               cached[keep] == prompt[keep])
            keep++;
    }
    if (s == LB_OK) s = lb_context_truncate(ctx, keep);
    double prefill_s = 0, decode_s = 0;
    int32_t n_decode = 0;
    if (s == LB_OK) {
        double t0 = lb_time_s();
        s = lb_model_forward(ctx, prompt + keep, n_prompt - keep, keep, logits,
                             LB_LOGITS_LAST);
        prefill_s = lb_time_s() - t0;
    }
    if (s == LB_OK) {
        double t0 = lb_time_s();
        for (;;) {
            int32_t next;
            if ((s = lb_gen_step(g, logits, &next)) != LB_OK || next < 0)
                break;
            s = lb_model_forward(ctx, &next, 1, lb_gen_pos(g) - 1, logits,
                                 LB_LOGITS_LAST);
            n_decode++;
            if (s != LB_OK) break;
        }
        decode_s = lb_time_s() - t0;
    }
    lb_status fs = lb_gen_finish(g, res);
    if (s == LB_OK) s = fs;
    res->n_reused = keep;
    res->prefill_s = prefill_s;
    res->decode_s = decode_s;
    res->n_decode = n_decode;
    lb_gen_free(g);
    free(logits);
    return s;
}
