/*
 * tok_vocab.c — lb_tokenizer_from_vocab: a tokenizer from llama.cpp's GGUF
 * vocabulary arrays (tokenizer.ggml.*), following llama.cpp 0.7.0
 * llama_vocab::impl::load: model "llama" (SPM) / "gpt2" (BPE), the
 * pre-tokenizer table keyed by tokenizer.ggml.pre (regexes, ignore_merges,
 * add_bos, clean_spaces), default special ids, empty tokens renamed
 * "[EMPTY_i]", token types -> attributes, control-looking tokens (EOT/EOG/FIM
 * texts) forced to CONTROL, the special-token cache sorted longest first.
 */
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lb_status nomem(void) {
    return lb_set_error(LB_ERR_NOMEM, "tokenizer: out of memory (vocab)");
}

void lb_vocab_desc_init(lb_vocab_desc *d) {
    memset(d, 0, sizeof *d);
    d->bos_id = d->eos_id = d->unk_id = d->pad_id = LB_VOCAB_ID_DEFAULT;
    d->add_bos = d->add_eos = d->add_space_prefix = LB_VOCAB_FLAG_DEFAULT;
}

/* ---- pre-tokenizer table (llm_tokenizer_bpe constructor) ----------------- */

#define RE_LLAMA3                                                              \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}" \
    "\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"  \
    "\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                               \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}" \
    "\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"      \
    "\\s+(?!\\S)|\\s+"
#define RE_GPT2                                                                \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"       \
    "\\s+(?!\\S)"
#define RE_PORO " ?[^(\\s|.,!?\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81" \
                "\xE0\xA5\xA4\xDB\x94\xD8\x8C)]+"

typedef struct pre_def {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *re[6];
    int ignore_merges, add_bos, clean_spaces; /* -1 = unchanged */
} pre_def;

static const pre_def pre_table[] = {
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, -1, -1, -1},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2", {RE_LLAMA3}, 1, 1, -1},
    {"dbrx|smaug-bpe", {RE_LLAMA3}, -1, -1, -1},
    {"glm4|chatglm-bpe", {RE_LLAMA3}, -1, -1, -1},
    {"deepseek-coder",
     {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
      "[\xE4\xB8\x80-\xE9\xBE\xA5\xE0\xA0\x80-\xE4\xB8\x80\xEA\xB0\x80-\xED\x9F\xBF]+",
      "\\p{N}"},
     -1, -1, 0},
    {"deepseek-v3",
     {"\\p{N}{1,3}",
      "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
      "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
     -1, -1, 0},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, -1, -1, -1},
    {"starcoder|refact|codeshell|exaone|minerva-7b", {"\\p{N}", RE_GPT2}, -1, -1, -1},
    {"command-r|smollm", {"\\p{N}", RE_GPT2}, -1, -1, 0},
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|mellum|"
     "jina-v1-en|jina-v2-code|roberta-bpe|mpt|olmo|jais|exaone4",
     {RE_GPT2}, -1, -1, -1},
    {"trillion|granite-docling", {RE_GPT2}, -1, -1, 0},
    {"qwen2|deepseek-r1-qwen|kormo", {RE_QWEN2}, -1, -1, 0},
    {"stablelm2|megrez", {RE_QWEN2}, -1, -1, -1},
    {"hunyuan", {RE_QWEN2}, -1, -1, 0},
    {"poro-chat", {RE_PORO}, -1, -1, 0},
    {"bloom|gpt3-finnish", {RE_PORO}, -1, -1, -1},
    {"viking", {RE_PORO, "\\p{N}"}, -1, -1, 0},
    {"tekken",
     {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n"
      "\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s"
      "\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     1, 1, 0},
    {"gpt-4o|llama4|minimax-m2",
     {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|"
      "'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=["
      "\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|"
      "'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+"
      "|\\s+(?!\\S)|\\s+"},
     -1, -1, 0},
    {"seed-coder",
     {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
      "\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     -1, -1, 0},
    {"grok-2", {RE_QWEN2}, -1, -1, 0},
    {"bailingmoe|bailingmoe2|llada-moe",
     {"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
      " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"},
     -1, -1, 0},
};

static bool name_in(const char *list, const char *name) {
    size_t n = strlen(name);
    const char *p = list;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == n && !memcmp(p, name, n)) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

/* ---- token types / control-looking texts --------------------------------- */

static const char *const control_texts[] = {
    /* EOT, EOM, EOG, FIM lists of llama_vocab::impl::load */
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81"
    "sentence\xEF\xBD\x9C>", "<end_of_utterance>", "<|eom_id|>", "<|return|>",
    "<|call|>", "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>", "\xE2\x96\x81<PRE>",
    "<|code_prefix|>", "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>", "<SUF>", "\xE2\x96\x81<SUF>",
    "<|code_suffix|>", "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>", "\xE2\x96\x81<MID>",
    "<|code_middle|>", "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
    "<|file_sep|>",
};

static uint8_t attr_of_type(int32_t t) {
    switch (t) {
    case LB_TOKEN_TYPE_NORMAL: return TOK_ATTR_NORMAL;
    case LB_TOKEN_TYPE_UNKNOWN: return TOK_ATTR_UNKNOWN;
    case LB_TOKEN_TYPE_CONTROL: return TOK_ATTR_CONTROL;
    case LB_TOKEN_TYPE_USER_DEFINED: return TOK_ATTR_USER_DEFINED;
    case LB_TOKEN_TYPE_UNUSED: return TOK_ATTR_UNUSED;
    case LB_TOKEN_TYPE_BYTE: return TOK_ATTR_BYTE;
    default: return 0; /* undefined */
    }
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const lb_tokenizer *tok = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = tok->piece_len[x], ly = tok->piece_len[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int32_t resolve_id(int32_t v, int32_t def, int32_t n, const char *key,
                          lb_status *st) {
    if (def >= n) def = -1; /* a default outside a small vocabulary: none */
    if (v == LB_VOCAB_ID_DEFAULT) return def;
    if (v < -1) {
        *st = lb_set_error(LB_ERR_FORMAT, "tokenizer.ggml.%s: invalid id %d", key, v);
        return -1;
    }
    if (v >= n) {
        /* llama.cpp warns "bad special token" and keeps its default */
        lb_log(LB_LOG_WARN, "tokenizer.ggml.%s: id %d >= vocabulary size %d, using "
               "the default", key, v, n);
        return def;
    }
    return v;
}

static lb_status build(lb_tokenizer *tok, const lb_vocab_desc *d) {
    bool spm;
    if (!d->model) return lb_set_error(LB_ERR_INVALID_ARG, "tokenizer.ggml.model: missing");
    if (!strcmp(d->model, "llama")) spm = true;
    else if (!strcmp(d->model, "gpt2")) spm = false;
    else
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "tokenizer.ggml.model: '%s' is not supported (llama, gpt2)",
                            d->model);
    if (!d->tokens || !d->n_tokens)
        return lb_set_error(LB_ERR_FORMAT, "tokenizer.ggml.tokens: missing or empty");
    if (d->n_tokens > TOK_MAX_VOCAB)
        return lb_set_error(LB_ERR_FORMAT, "tokenizer.ggml.tokens: %zu tokens (max %d)",
                            d->n_tokens, TOK_MAX_VOCAB);
    if (!spm && d->n_merges && !d->merges)
        return lb_set_error(LB_ERR_INVALID_ARG, "tokenizer.ggml.merges: NULL array");
    if (!spm && !d->merges)
        return lb_set_error(LB_ERR_FORMAT, "tokenizer.ggml.merges: missing (needed by gpt2)");
    tok->kind = spm ? TOK_LLAMA_SPM : TOK_LLAMA_BPE;
    int32_t n = (int32_t)d->n_tokens;
    lb_status st = tok_alloc_vocab(tok, n);
    if (st != LB_OK) return st;
    tok->n_vocab = n;
    tok->score = calloc((size_t)n, sizeof *tok->score);
    if (!tok->score || !tok_hmap_init(&tok->vocab, (size_t)n)) return nomem();

    /* defaults per model type */
    tok->add_space_prefix = false;
    tok->clean_spaces = false;
    tok->add_bos = tok->add_eos = false;
    const pre_def *pre = NULL;
    if (spm) {
        tok->add_space_prefix = true;
        tok->add_bos = true;
    } else {
        const char *pname = d->pre ? d->pre : "default";
        for (size_t i = 0; i < sizeof pre_table / sizeof pre_table[0]; i++)
            if (name_in(pre_table[i].names, pname)) pre = &pre_table[i];
        if (!pre)
            return lb_set_error(LB_ERR_UNSUPPORTED,
                                "tokenizer.ggml.pre: '%s' is not supported", pname);
        tok->clean_spaces = pre->clean_spaces != 0;
        if (pre->ignore_merges == 1) tok->ignore_merges = true;
        if (pre->add_bos == 1) tok->add_bos = true;
    }
    if (d->add_space_prefix != LB_VOCAB_FLAG_DEFAULT) tok->add_space_prefix = d->add_space_prefix != 0;

    /* tokens */
    for (int32_t i = 0; i < n; i++) {
        const char *t = d->tokens[i];
        if (!t) return lb_set_error(LB_ERR_INVALID_ARG, "tokenizer.ggml.tokens[%d]: NULL", i);
        size_t len = d->token_lens ? d->token_lens[i] : strlen(t);
        char empty[32];
        if (len == 0) { /* llama.cpp renames empty tokens */
            snprintf(empty, sizeof empty, "[EMPTY_%d]", i);
            t = empty;
            len = strlen(empty);
        }
        if (len > UINT32_MAX) return lb_set_error(LB_ERR_FORMAT, "tokenizer.ggml.tokens[%d]: too long", i);
        char *s = tok_arena_strndup(&tok->arena, t, len);
        if (!s) return nomem();
        tok->piece[i] = tok->model_piece[i] = s;
        tok->piece_len[i] = tok->model_piece_len[i] = (uint32_t)len;
        tok->score[i] = d->scores ? d->scores[i] : 0.0f;
        tok->attr[i] = d->token_types ? attr_of_type(d->token_types[i]) : TOK_ATTR_NORMAL;
        if (!tok_hmap_put(&tok->vocab, s, len, i)) return nomem();
    }
    for (size_t c = 0; c < sizeof control_texts / sizeof control_texts[0]; c++) {
        int32_t id = tok_hmap_get(&tok->vocab, control_texts[c], strlen(control_texts[c]));
        if (id >= 0) tok->attr[id] = TOK_ATTR_CONTROL;
    }
    {
        static const char *const ud[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
        for (size_t c = 0; c < sizeof ud / sizeof ud[0]; c++) {
            int32_t id = tok_hmap_get(&tok->vocab, ud[c], strlen(ud[c]));
            if (id >= 0) tok->attr[id] = TOK_ATTR_USER_DEFINED;
        }
    }
    /* byte tokens "<0xXX>" (SPM byte_to_token looks them up by text) */
    for (int b = 0; b < 256; b++) {
        char s[7];
        snprintf(s, sizeof s, "<0x%02X>", b);
        tok->byte_id[b] = spm ? tok_hmap_get(&tok->vocab, s, 6) : -1;
    }

    /* special ids */
    tok->bos_id = resolve_id(d->bos_id, spm ? 1 : 11, n, "bos_token_id", &st);
    if (st == LB_OK) tok->eos_id = resolve_id(d->eos_id, spm ? 2 : 11, n, "eos_token_id", &st);
    if (st == LB_OK) tok->unk_id = resolve_id(d->unk_id, spm ? 0 : -1, n, "unknown_token_id", &st);
    if (st == LB_OK) tok->pad_id = resolve_id(d->pad_id, -1, n, "padding_token_id", &st);
    if (st != LB_OK) return st;
    if (pre && name_in("glm4|chatglm-bpe", d->pre ? d->pre : "") && d->bos_id == LB_VOCAB_ID_DEFAULT)
        tok->bos_id = -1;
    if (!spm) tok->unk_id = -1; /* llm_tokenizer_bpe never emits unk */
    if (d->add_bos != LB_VOCAB_FLAG_DEFAULT) tok->add_bos = d->add_bos != 0;
    if (d->add_eos != LB_VOCAB_FLAG_DEFAULT) tok->add_eos = d->add_eos != 0;
    if (tok->bos_id >= 0) {
        if (!(tok->bos_text = tok_arena_strndup(&tok->arena, tok->piece[tok->bos_id],
                                                tok->piece_len[tok->bos_id])))
            return nomem();
    }
    if (tok->eos_id >= 0) {
        if (!(tok->eos_text = tok_arena_strndup(&tok->arena, tok->piece[tok->eos_id],
                                                tok->piece_len[tok->eos_id])))
            return nomem();
    }
    if (d->chat_template &&
        !(tok->chat_template = tok_arena_strndup(&tok->arena, d->chat_template,
                                                 strlen(d->chat_template))))
        return nomem();

    /* merges: "a b" split at the first space after position 0; the first
     * occurrence of a pair keeps its rank (std::unordered_map::emplace) */
    if (!spm) {
        if (!tok_mmap_init(&tok->merges, d->n_merges)) return nomem();
        tok_buf cat = {0};
        for (size_t i = 0; i < d->n_merges; i++) {
            const char *m = d->merges[i];
            if (!m) {
                tok_buf_free(&cat);
                return lb_set_error(LB_ERR_INVALID_ARG, "tokenizer.ggml.merges[%zu]: NULL", i);
            }
            size_t len = d->merge_lens ? d->merge_lens[i] : strlen(m);
            const char *sp = len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
            if (!sp) continue; /* llama.cpp inserts ("", "") : never matches */
            size_t al = (size_t)(sp - m), bl = len - al - 1;
            int32_t a = tok_hmap_get(&tok->vocab, m, al);
            int32_t b = tok_hmap_get(&tok->vocab, sp + 1, bl);
            cat.n = 0;
            if (!tok_buf_put(&cat, m, al) || !tok_buf_put(&cat, sp + 1, bl)) {
                tok_buf_free(&cat);
                return nomem();
            }
            int32_t c = tok_hmap_get(&tok->vocab, cat.p, cat.n);
            if (a < 0 || b < 0 || c < 0) continue;
            if (tok_mmap_get(&tok->merges, a, b)) continue;
            if (i > UINT32_MAX || !tok_mmap_put(&tok->merges, a, b, (uint32_t)i, c)) {
                tok_buf_free(&cat);
                return nomem();
            }
        }
        tok_buf_free(&cat);
        size_t nre = 0;
        while (nre < 6 && pre->re[nre]) nre++;
        tok->llama_re = calloc(nre, sizeof *tok->llama_re);
        if (!tok->llama_re) return nomem();
        for (size_t r = 0; r < nre; r++) {
            char what[96];
            snprintf(what, sizeof what, "tokenizer.ggml.pre '%s' regex %zu",
                     d->pre ? d->pre : "default", r);
            st = tok_regex_compile(&tok->llama_re[r], pre->re[r], strlen(pre->re[r]), what);
            if (st != LB_OK) return st;
            tok->n_llama_re++;
        }
    }

    if (spm && (st = tok_build_pairs(tok)) != LB_OK) return st;

    /* special-token cache: CONTROL | USER_DEFINED | UNKNOWN, longest first */
    size_t ns = 0;
    for (int32_t i = 0; i < n; i++)
        if (tok->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN)) ns++;
    tok->special_cache = malloc((ns ? ns : 1) * sizeof *tok->special_cache);
    if (!tok->special_cache) return nomem();
    for (int32_t i = 0; i < n; i++)
        if (tok->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN))
            tok->special_cache[tok->n_special_cache++] = i;
    qsort_r(tok->special_cache, tok->n_special_cache, sizeof *tok->special_cache,
            cmp_special, tok);
    return LB_OK;
}

lb_status lb_tokenizer_from_vocab(const lb_vocab_desc *desc, lb_tokenizer **out) {
    if (!desc || !out) return lb_set_error(LB_ERR_INVALID_ARG, "lb_tokenizer_from_vocab: NULL argument");
    *out = NULL;
    lb_tokenizer *tok = tok_new();
    if (!tok) return nomem();
    lb_status st = build(tok, desc);
    if (st != LB_OK) {
        lb_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return LB_OK;
}
