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

lb_status lb_generate(lb_context *ctx, const int32_t *prompt,
                      int32_t n_prompt, const lb_generate_params *params,
                      lb_generate_result *res) {
    memset(res, 0, sizeof *res);
    lb_generate_params defp = lb_generate_default_params();
    const lb_generate_params *p = params ? params : &defp;
    const lb_model *m = lb_context_model(ctx);
    const lb_model_config *c = &m->config;
    const int32_t n_ctx = lb_context_n_ctx(ctx);
    if (n_prompt <= 0)
        return lb_set_error(LB_ERR_INVALID_ARG, "generate: empty prompt");
    if (p->n_stop > 0 && !p->detok.fn)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "generate: stop strings need a detokenizer");
    if (n_prompt > n_ctx)
        return lb_set_error(LB_ERR_RANGE,
                            "generate: prompt of %d tokens does not fit n_ctx "
                            "%d",
                            (int)n_prompt, (int)n_ctx);
    const int32_t *eos = p->eos_ids ? p->eos_ids : c->eos_token_ids;
    int n_eos = p->eos_ids ? p->n_eos : c->n_eos;
    res->n_prompt = n_prompt;

    lb_sampler *smp = NULL;
    float *logits = malloc((size_t)c->vocab_size * sizeof *logits);
    gen_state g;
    memset(&g, 0, sizeof g);
    g.p = p;
    g.res = res;
    size_t cap_tok = 64;
    res->tokens = malloc(cap_tok * sizeof *res->tokens);
    lb_status s = lb_sampler_create(&p->sampling, c->vocab_size, &smp);
    if (s == LB_OK && (!logits || !res->tokens))
        s = lb_set_error(LB_ERR_NOMEM, "generate: out of memory");
    for (int32_t i = 0; s == LB_OK && i < n_prompt; i++)
        s = lb_sampler_accept(smp, prompt[i]);
    if (s == LB_OK && p->detok.fn) {
        g.n_tail = n_prompt < PROMPT_TAIL ? (size_t)n_prompt : PROMPT_TAIL;
        for (size_t i = 0; s == LB_OK && i < g.n_tail; i++)
            s = push_id(&g, prompt[n_prompt - (int32_t)g.n_tail + (int32_t)i]);
        if (s == LB_OK)
            s = p->detok.fn(p->detok.user, g.ids, g.n_ids, &g.base,
                            &g.base_len);
    }
    if (s != LB_OK) goto done;

    /* prefill (after the reusable cached prefix, if any) */
    int32_t keep = 0;
    if (p->cache_prompt) {
        const int32_t *cached;
        int32_t n_cached = lb_context_cached_tokens(ctx, &cached);
        while (keep < n_cached && keep < n_prompt - 1 &&
               cached[keep] == prompt[keep])
            keep++;
    }
    if ((s = lb_context_truncate(ctx, keep)) != LB_OK) goto done;
    res->n_reused = keep;
    double t0 = lb_time_s();
    s = lb_model_forward(ctx, prompt + keep, n_prompt - keep, keep, logits,
                         LB_LOGITS_LAST);
    res->prefill_s = lb_time_s() - t0;
    if (s != LB_OK) goto done;

    int32_t pos = n_prompt;
    t0 = lb_time_s();
    res->stop_reason = LB_STOP_LENGTH;
    for (;;) {
        if (p->n_predict >= 0 && res->n_tokens >= p->n_predict) {
            res->stop_reason = LB_STOP_LENGTH;
            break;
        }
        int32_t tok = lb_sampler_sample(smp, logits);
        bool is_eos = false;
        for (int i = 0; i < n_eos; i++) is_eos |= eos[i] == tok;
        if (is_eos && !p->ignore_eos) {
            res->stop_reason = LB_STOP_EOS;
            break;
        }
        if ((s = lb_sampler_accept(smp, tok)) != LB_OK) break;
        if ((size_t)res->n_tokens == cap_tok) {
            int32_t *nt = realloc(res->tokens, 2 * cap_tok * sizeof *nt);
            if (!nt) {
                s = lb_set_error(LB_ERR_NOMEM, "generate: out of memory");
                break;
            }
            res->tokens = nt;
            cap_tok *= 2;
        }
        res->tokens[res->n_tokens++] = tok;
        size_t release = 0;
        if (p->detok.fn) {
            if ((s = push_id(&g, tok)) != LB_OK) break;
            if ((s = update_text(&g, false, &release)) != LB_OK) break;
        }
        bool go_on = true;
        if (p->on_token)
            go_on = p->on_token(p->user, tok, g.gen ? g.gen + g.emitted : "",
                                release);
        g.emitted += release;
        if (p->detok.fn && !g.stopped_by_string &&
            (s = maybe_rebase(&g)) != LB_OK)
            break;
        if (g.stopped_by_string) {
            res->stop_reason = LB_STOP_STRING;
            break;
        }
        if (!go_on) {
            res->stop_reason = LB_STOP_CALLBACK;
            break;
        }
        if (p->n_predict >= 0 && res->n_tokens >= p->n_predict) {
            res->stop_reason = LB_STOP_LENGTH;
            break;
        }
        if (pos >= n_ctx) {
            res->stop_reason = LB_STOP_CTX;
            break;
        }
        s = lb_model_forward(ctx, &tok, 1, pos, logits, LB_LOGITS_LAST);
        res->n_decode++;
        pos++;
        if (s != LB_OK) break;
    }
    res->decode_s = lb_time_s() - t0;
    /* flush what was held back (incomplete characters, stop prefixes) */
    if (s == LB_OK && p->detok.fn && g.gen) {
        size_t release = g.gen_len - g.emitted;
        if (release && p->on_token)
            p->on_token(p->user, -1, g.gen + g.emitted, release);
        g.emitted += release;
    }
done:
    if (p->detok.fn) {
        if (!g.gen) {
            g.gen = calloc(1, 1);
            g.gen_len = 0;
        }
        res->text = g.gen;
        res->text_len = g.gen_len;
        g.gen = NULL;
    }
    free(g.gen);
    free(g.base);
    free(g.ids);
    free(logits);
    lb_sampler_free(smp);
    return s;
}
