/*
 * tok_gguf.c — a tokenizer from a GGUF file's tokenizer.ggml.* metadata
 * (keys as llama.cpp 0.7.0 reads them in llama_vocab::impl::load), built
 * through lb_tokenizer_from_vocab.
 */
#include "tokenizer/tok_internal.h"

#include "lowbit/gguf.h"

#include <stdlib.h>
#include <string.h>

static lb_status nomem(void) {
    return lb_set_error(LB_ERR_NOMEM, "tokenizer: out of memory (GGUF vocabulary)");
}

/* Optional u32 id key: absent or >= n_tokens -> LB_VOCAB_ID_DEFAULT (llama.cpp
 * keeps its default for a bad special id). */
static lb_status opt_id(const lb_gguf *g, const char *key, size_t n_tokens, int32_t *out) {
    *out = LB_VOCAB_ID_DEFAULT;
    if (lb_gguf_find_key(g, key) < 0) return LB_OK;
    uint64_t v;
    const lb_gguf_value *val;
    lb_status st = lb_gguf_get(g, key, &val);
    if (st == LB_OK) st = lb_gguf_value_u64(val, &v);
    if (st != LB_OK) return st;
    if (v >= n_tokens) {
        /* 0xFFFFFFFF is the usual "none"; anything else is worth a warning */
        lb_log(v == UINT32_MAX ? LB_LOG_DEBUG : LB_LOG_WARN, "%s: %s = %llu is outside the vocabulary (%zu tokens); "
               "using the default", lb_gguf_path(g), key, (unsigned long long)v, n_tokens);
        return LB_OK;
    }
    *out = (int32_t)v;
    return LB_OK;
}

static lb_status opt_flag(const lb_gguf *g, const char *key, int *out) {
    *out = LB_VOCAB_FLAG_DEFAULT;
    if (lb_gguf_find_key(g, key) < 0) return LB_OK;
    bool b;
    lb_status st = lb_gguf_get_bool(g, key, &b);
    if (st == LB_OK) *out = b ? 1 : 0;
    return st;
}

/* A STRING array as pointer/length arrays pointing into the file. */
static lb_status str_array(const lb_gguf *g, const char *key, const char ***strs,
                           size_t **lens, size_t *n) {
    const lb_gguf_value *v;
    uint64_t count;
    lb_status st = lb_gguf_get_arr(g, key, LB_GGUF_TYPE_STRING, &v, &count);
    if (st != LB_OK) return st;
    if (count > TOK_MAX_VOCAB * (uint64_t)8)
        return lb_set_error(LB_ERR_FORMAT, "%s: %s has %llu entries (too many)", lb_gguf_path(g),
                            key, (unsigned long long)count);
    *strs = calloc(count ? count : 1, sizeof **strs);
    *lens = calloc(count ? count : 1, sizeof **lens);
    if (!*strs || !*lens) return nomem();
    for (uint64_t i = 0; i < count; i++) {
        lb_gguf_str s;
        if ((st = lb_gguf_get_arr_str(g, key, i, &s)) != LB_OK) return st;
        (*strs)[i] = s.data ? s.data : "";
        (*lens)[i] = s.len;
    }
    *n = (size_t)count;
    return LB_OK;
}

static lb_status build(const lb_gguf *g, lb_tokenizer **out) {
    lb_vocab_desc d;
    lb_vocab_desc_init(&d);
    char *model = NULL, *pre = NULL, *tmpl = NULL;
    const char **tokens = NULL, **merges = NULL;
    size_t *tlens = NULL, *mlens = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    lb_status st = lb_gguf_get_str_dup(g, "tokenizer.ggml.model", &model);
    if (st == LB_OK && lb_gguf_find_key(g, "tokenizer.ggml.pre") >= 0)
        st = lb_gguf_get_str_dup(g, "tokenizer.ggml.pre", &pre);
    if (st == LB_OK) st = str_array(g, "tokenizer.ggml.tokens", &tokens, &tlens, &d.n_tokens);
    if (st == LB_OK && lb_gguf_find_key(g, "tokenizer.ggml.scores") >= 0) {
        const lb_gguf_value *v;
        uint64_t n;
        st = lb_gguf_get_arr(g, "tokenizer.ggml.scores", LB_GGUF_TYPE_FLOAT32, &v, &n);
        if (st == LB_OK && n != d.n_tokens)
            st = lb_set_error(LB_ERR_FORMAT, "tokenizer.ggml.scores: %llu entries for %zu tokens",
                              (unsigned long long)n, d.n_tokens);
        if (st == LB_OK && !(scores = malloc((d.n_tokens ? d.n_tokens : 1) * sizeof *scores)))
            st = nomem();
        if (st == LB_OK && d.n_tokens) memcpy(scores, lb_gguf_arr_raw(v), d.n_tokens * sizeof *scores);
    }
    if (st == LB_OK && lb_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        const lb_gguf_value *v;
        uint64_t n;
        st = lb_gguf_get_arr(g, "tokenizer.ggml.token_type", -1, &v, &n);
        if (st == LB_OK && n != d.n_tokens)
            st = lb_set_error(LB_ERR_FORMAT, "tokenizer.ggml.token_type: %llu entries for %zu tokens",
                              (unsigned long long)n, d.n_tokens);
        if (st == LB_OK && !(types = malloc((d.n_tokens ? d.n_tokens : 1) * sizeof *types)))
            st = nomem();
        for (uint64_t i = 0; st == LB_OK && i < n; i++) {
            lb_gguf_value e;
            int64_t t;
            st = lb_gguf_arr_elem(v, i, &e);
            if (st == LB_OK) st = lb_gguf_value_i64(&e, &t);
            if (st != LB_OK)
                st = lb_set_error(LB_ERR_FORMAT, "tokenizer.ggml.token_type[%llu]: not an integer",
                                  (unsigned long long)i);
            else
                types[i] = t < 0 || t > 255 ? 0 : (int32_t)t; /* unknown -> undefined */
        }
    }
    if (st == LB_OK && lb_gguf_find_key(g, "tokenizer.ggml.merges") >= 0)
        st = str_array(g, "tokenizer.ggml.merges", &merges, &mlens, &d.n_merges);
    if (st == LB_OK) st = opt_id(g, "tokenizer.ggml.bos_token_id", d.n_tokens, &d.bos_id);
    if (st == LB_OK) st = opt_id(g, "tokenizer.ggml.eos_token_id", d.n_tokens, &d.eos_id);
    if (st == LB_OK) st = opt_id(g, "tokenizer.ggml.unknown_token_id", d.n_tokens, &d.unk_id);
    if (st == LB_OK) st = opt_id(g, "tokenizer.ggml.padding_token_id", d.n_tokens, &d.pad_id);
    if (st == LB_OK) st = opt_flag(g, "tokenizer.ggml.add_bos_token", &d.add_bos);
    if (st == LB_OK) st = opt_flag(g, "tokenizer.ggml.add_eos_token", &d.add_eos);
    if (st == LB_OK) st = opt_flag(g, "tokenizer.ggml.add_space_prefix", &d.add_space_prefix);
    if (st == LB_OK && lb_gguf_find_key(g, "tokenizer.chat_template") >= 0)
        st = lb_gguf_get_str_dup(g, "tokenizer.chat_template", &tmpl);
    if (st == LB_OK) {
        d.model = model;
        d.pre = pre;
        d.tokens = tokens;
        d.token_lens = tlens;
        d.scores = scores;
        d.token_types = types;
        d.merges = merges;
        d.merge_lens = mlens;
        d.chat_template = tmpl;
        st = lb_tokenizer_from_vocab(&d, out);
    }
    free(model);
    free(pre);
    free(tmpl);
    free(tokens);
    free(tlens);
    free(merges);
    free(mlens);
    free(scores);
    free(types);
    return st;
}

lb_status lb_tokenizer_from_gguf(const lb_gguf *g, lb_tokenizer **out) {
    if (!g || !out) return lb_set_error(LB_ERR_INVALID_ARG, "lb_tokenizer_from_gguf: NULL argument");
    *out = NULL;
    lb_status st = build(g, out);
    const char *path = lb_gguf_path(g);
    if (st != LB_OK && path && !strstr(lb_last_error(), path))
        return lb_error_context(st, "%s", path);
    return st;
}

lb_status lb_tokenizer_load_gguf(const char *path, lb_tokenizer **out) {
    if (!path || !out) return lb_set_error(LB_ERR_INVALID_ARG, "lb_tokenizer_load_gguf: NULL argument");
    *out = NULL;
    lb_gguf *g = NULL;
    lb_status st = lb_gguf_open(path, &g);
    if (st != LB_OK) return st;
    st = lb_tokenizer_from_gguf(g, out);
    lb_gguf_close(g);
    return st;
}
