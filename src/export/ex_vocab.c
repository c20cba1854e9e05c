/*
 * Tokenizer metadata for GGUF, as llama.cpp 0.7.0's convert_hf_to_gguf.py
 * writes it (conversion/base.py: _set_vocab_llama_hf, _set_vocab_gpt2,
 * get_vocab_base, get_vocab_base_pre; conversion/llama.py
 * LlamaModel.set_vocab; gguf-py vocab.py: LlamaHfVocab, SpecialVocab).
 *
 * Paths:
 *  - "llama" (LlamaHfVocab): Llama/Mistral checkpoints whose tokenizer.json
 *    is a BPE model with byte_fallback and a Sequence decoder (SentencePiece
 *    converted to tokenizers): tokens in id order, score -1000 each (the
 *    converter's placeholder), type BYTE for "<0xXX>", CONTROL for special
 *    ids, NORMAL otherwise; added tokens beyond the model vocabulary
 *    appended; tokenizer.ggml.pre "default"; no merges.
 *  - "gpt2" (get_vocab_base): every other BPE tokenizer.json (Llama-3,
 *    Qwen2/3...): config vocab_size entries, "[PAD<i>]" (UNUSED) for ids
 *    without a token, added tokens CONTROL when special or when they look
 *    special ("<|...|>"), else USER_DEFINED (with U+2581 -> ' '), merges.
 *    tokenizer.ggml.pre comes from the pre-tokenizer configuration (see
 *    detect_pre) instead of the converter's hash of a sample
 *    tokenization.
 * A tokenizer.model (SentencePiece protobuf) is NOT read: lowbit has no
 * SentencePiece parser, so such checkpoints take the tokenizer.json route
 * (the converter would prefer tokenizer.model and write its real scores);
 * this is reported in the plan notes.
 */
#include "export/export_internal.h"
#include "export/ex_hf_internal.h"
#include "lowbit/file.h"
#include "core/internal.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>

#define EX_JSON_MAX ((size_t)512 << 20)

/* ---- arena --------------------------------------------------------------- */

lb_status ex_arena_add(ex_arena *a, const char *s, size_t n, size_t *off_out) {
    size_t need;
    if (!lb_add_ok(a->len, n + 1, &need))
        return lb_set_error(LB_ERR_OVERFLOW, "export: string arena overflow");
    if (need > a->cap) {
        size_t nc = a->cap ? a->cap : 4096;
        while (nc < need) {
            if (nc > SIZE_MAX / 2)
                return lb_set_error(LB_ERR_OVERFLOW, "export: string arena overflow");
            nc *= 2;
        }
        char *nb = realloc(a->buf, nc);
        if (!nb) return lb_set_error(LB_ERR_NOMEM, "export: out of memory (strings)");
        a->buf = nb;
        a->cap = nc;
    }
    memcpy(a->buf + a->len, s, n);
    a->buf[a->len + n] = '\0';
    *off_out = a->len;
    a->len = need;
    return LB_OK;
}

void ex_arena_free(ex_arena *a) {
    free(a->buf);
    memset(a, 0, sizeof *a);
}

/* ---- JSON ---------------------------------------------------------------- */

lb_status ex_json_load(const char *dir, const char *name, size_t max,
                       cJSON **out) {
    *out = NULL;
    char *p = lb_path_join(dir, name);
    if (!p) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    if (!lb_is_file(p)) {
        free(p);
        return LB_OK;
    }
    char *text = NULL;
    size_t len = 0;
    lb_status s = lb_read_file(p, max, &text, &len);
    if (s == LB_OK) {
        *out = cJSON_ParseWithLength(text, len);
        if (!*out) s = lb_set_error(LB_ERR_FORMAT, "%s: invalid JSON", p);
    }
    free(text);
    free(p);
    return s;
}


/* A JSON integer (hostile input: checked before the conversion, which is
 * undefined for doubles outside int64_t): *out set, true; else false. */
static bool json_int(const cJSON *j, int64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    const double d = j->valuedouble;
    if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0) || d != floor(d))
        return false;
    *out = (int64_t)d;
    return true;
}

static const cJSON *jget(const cJSON *o, const char *k) {
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}
static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *j = jget(o, k);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}
/* -1 absent / not a bool, else 0/1 */
static int jbool(const cJSON *o, const char *k) {
    const cJSON *j = jget(o, k);
    return cJSON_IsBool(j) ? (cJSON_IsTrue(j) ? 1 : 0) : -1;
}

/* ---- the vocabulary under construction ------------------------------------ */

void ex_vocab_free(ex_vocab *v) {
    free(v->tok_off);
    free(v->tok_len);
    free(v->scores);
    free(v->types);
    free(v->merge_off);
    free(v->merge_len);
    ex_arena_free(&v->arena);
    free(v->chat_template);
    for (int i = 0; i < v->n_tmpl; i++) {
        free(v->tmpl_name[i]);
        free(v->tmpl_text[i]);
    }
    free(v->tmpl_name);
    free(v->tmpl_text);
    memset(v, 0, sizeof *v);
}

static lb_status vocab_alloc(ex_vocab *v, size_t n, bool scores) {
    v->n_tokens = n;
    v->tok_off = calloc(n ? n : 1, sizeof *v->tok_off);
    v->tok_len = calloc(n ? n : 1, sizeof *v->tok_len);
    v->types = calloc(n ? n : 1, sizeof *v->types);
    if (scores) v->scores = calloc(n ? n : 1, sizeof *v->scores);
    if (!v->tok_off || !v->tok_len || !v->types || (scores && !v->scores))
        return lb_set_error(LB_ERR_NOMEM, "export: out of memory (vocabulary of %zu)", n);
    return LB_OK;
}

static lb_status vocab_set(ex_vocab *v, size_t i, const char *s, size_t n) {
    LB_TRY(ex_arena_add(&v->arena, s, n, &v->tok_off[i]));
    v->tok_len[i] = n;
    return LB_OK;
}

/* An id-indexed view of the tokenizer.json vocabulary: model.vocab plus the
 * added tokens (which win for their id, as tokenizers' get_vocab). */
typedef struct added_ref {
    const char *content;
    const cJSON *entry;
    size_t pos; /* position in added_tokens */
} added_ref;

typedef struct tok_index {
    const char **str; /* [n] borrowed from the cJSON tree, NULL = hole */
    const cJSON **added; /* [n] the added_tokens entry of an id, or NULL */
    size_t n;          /* max id + 1 */
    size_t n_model;    /* entries of model.vocab (tokenizers' vocab_size) */
    added_ref *by_content; /* added_tokens sorted by (content, position) */
    size_t n_added;
} tok_index;

static void tok_index_free(tok_index *ti) {
    free(ti->str);
    free(ti->added);
    free(ti->by_content);
    memset(ti, 0, sizeof *ti);
}

static int added_cmp(const void *a, const void *b) {
    const added_ref *x = a, *y = b;
    int c = strcmp(x->content, y->content);
    if (c) return c;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* The first added_tokens entry (file order) whose content is s, or NULL. */
static const cJSON *ti_added_by_content(const tok_index *ti, const char *s) {
    size_t lo = 0, hi = ti->n_added;
    while (lo < hi) { /* lower bound of s */
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(ti->by_content[mid].content, s) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < ti->n_added && !strcmp(ti->by_content[lo].content, s)
               ? ti->by_content[lo].entry : NULL;
}

#define EX_MAX_VOCAB ((int64_t)1 << 24)

static lb_status tok_index_build(const cJSON *tj, const char *label,
                                 tok_index *ti) {
    memset(ti, 0, sizeof *ti);
    const cJSON *model = jget(tj, "model");
    const cJSON *vocab = jget(model, "vocab");
    if (!cJSON_IsObject(vocab))
        return lb_set_error(LB_ERR_FORMAT, "%s: model.vocab is not an object", label);
    const cJSON *added = jget(tj, "added_tokens");
    int64_t max_id = -1;
    size_t n_model = 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 ||
            e->valuedouble >= (double)EX_MAX_VOCAB ||
            e->valuedouble != (double)(int64_t)e->valuedouble)
            return lb_set_error(LB_ERR_FORMAT, "%s: model.vocab[\"%s\"] is not a valid id",
                                label, e->string ? e->string : "");
        if ((int64_t)e->valuedouble > max_id) max_id = (int64_t)e->valuedouble;
        n_model++;
    }
    if (cJSON_IsArray(added)) {
        for (const cJSON *a = added->child; a; a = a->next) {
            const cJSON *id = jget(a, "id");
            if (!cJSON_IsNumber(id) || id->valuedouble < 0 ||
                id->valuedouble >= (double)EX_MAX_VOCAB || !jstr(a, "content"))
                return lb_set_error(LB_ERR_FORMAT, "%s: bad added_tokens entry", label);
            if ((int64_t)id->valuedouble > max_id) max_id = (int64_t)id->valuedouble;
        }
    }
    ti->n = (size_t)(max_id + 1);
    ti->n_model = n_model;
    ti->str = calloc(ti->n ? ti->n : 1, sizeof *ti->str);
    ti->added = calloc(ti->n ? ti->n : 1, sizeof *ti->added);
    if (!ti->str || !ti->added) {
        tok_index_free(ti);
        return lb_set_error(LB_ERR_NOMEM, "export: out of memory (vocabulary)");
    }
    for (const cJSON *e = vocab->child; e; e = e->next)
        ti->str[(size_t)e->valuedouble] = e->string ? e->string : "";
    if (cJSON_IsArray(added)) {
        size_t na = (size_t)cJSON_GetArraySize(added);
        ti->by_content = calloc(na ? na : 1, sizeof *ti->by_content);
        if (!ti->by_content) {
            tok_index_free(ti);
            return lb_set_error(LB_ERR_NOMEM, "export: out of memory (vocabulary)");
        }
        for (const cJSON *a = added->child; a; a = a->next) {
            size_t id = (size_t)jget(a, "id")->valuedouble;
            ti->str[id] = jstr(a, "content");
            ti->added[id] = a;
            ti->by_content[ti->n_added] = (added_ref){jstr(a, "content"), a, ti->n_added};
            ti->n_added++;
        }
        qsort(ti->by_content, ti->n_added, sizeof *ti->by_content, added_cmp);
    }
    return LB_OK;
}

/* The added_tokens entry whose content is s (first one), or NULL. */
static const cJSON *added_by_content(const cJSON *tj, const char *s) {
    const cJSON *added = jget(tj, "added_tokens");
    if (!cJSON_IsArray(added) || !s) return NULL;
    for (const cJSON *a = added->child; a; a = a->next) {
        const char *c = jstr(a, "content");
        if (c && !strcmp(c, s)) return a;
    }
    return NULL;
}

/* TextModel.does_token_look_special */
static bool looks_special(const char *t) {
    size_t n = strlen(t);
    if (!strcmp(t, "<pad>") || !strcmp(t, "<mask>") || !strcmp(t, "<2mass>") ||
        !strcmp(t, "[@BOS@]"))
        return true;
    if (n >= 4 && !strncmp(t, "<|", 2) && !strcmp(t + n - 2, "|>")) return true;
    /* "<｜" ... "｜>" (U+FF5C FULLWIDTH VERTICAL LINE, deepseek-coder) */
    if (n >= 8 && !strncmp(t, "<\xef\xbd\x9c", 4) && !strcmp(t + n - 4, "\xef\xbd\x9c>"))
        return true;
    if (n >= 8 && !strncmp(t, "<unused", 7) && t[n - 1] == '>') return true;
    return false;
}

static bool is_byte_token(const char *t) {
    static const char hex[] = "0123456789abcdefABCDEF";
    return strlen(t) == 6 && !strncmp(t, "<0x", 3) && t[5] == '>' &&
           strchr(hex, t[3]) && strchr(hex, t[4]);
}

/* ---- pre-tokenizer name ------------------------------------------------------ */

/* The Split regexes of the Hugging Face tokenizers llama.cpp names (as
 * written in their tokenizer.json), and ByteLevel's built-in GPT-2 regex. */
static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* llama.cpp's tokenizer.ggml.pre for a byte-level BPE tokenizer.json,
 * recognised from its pre_tokenizer (convert_hf_to_gguf.py recognises the
 * same tokenizers by hashing a sample tokenization):
 *   ByteLevel (use_regex, no prefix space)              -> "gpt-2"
 *   Sequence[Split(Llama-3 regex, Isolated), ByteLevel] -> "llama-bpe" when
 *     the BPE model ignores merges (Llama 3), else "smaug-bpe"
 *   Sequence[Split(Qwen2 regex, Isolated), ByteLevel]   -> "qwen2"
 * Anything else is LB_ERR_UNSUPPORTED (the converter fails too). */
static lb_status detect_pre(const cJSON *tj, const char *label, char *out,
                            size_t n) {
    const cJSON *pt = jget(tj, "pre_tokenizer");
    const char *type = jstr(pt, "type");
    const cJSON *model = jget(tj, "model");
    if (type && !strcmp(type, "ByteLevel")) {
        if (jbool(pt, "add_prefix_space") != 1 && jbool(pt, "use_regex") != 0) {
            snprintf(out, n, "gpt-2");
            return LB_OK;
        }
    } else if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = jget(pt, "pretokenizers");
        if (cJSON_GetArraySize(list) == 2) {
            const cJSON *sp = cJSON_GetArrayItem(list, 0);
            const cJSON *bl = cJSON_GetArrayItem(list, 1);
            const char *re = jstr(jget(sp, "pattern"), "Regex");
            const char *beh = jstr(sp, "behavior");
            if (jstr(sp, "type") && !strcmp(jstr(sp, "type"), "Split") && re &&
                beh && !strcmp(beh, "Isolated") && jbool(sp, "invert") != 1 &&
                jstr(bl, "type") && !strcmp(jstr(bl, "type"), "ByteLevel") &&
                jbool(bl, "use_regex") == 0) {
                if (!strcmp(re, RE_LLAMA3)) {
                    snprintf(out, n, "%s",
                             jbool(model, "ignore_merges") == 1 ? "llama-bpe" : "smaug-bpe");
                    return LB_OK;
                }
                if (!strcmp(re, RE_QWEN2)) {
                    snprintf(out, n, "qwen2");
                    return LB_OK;
                }
            }
        }
    }
    char *txt = pt ? cJSON_PrintUnformatted(pt) : NULL;
    lb_status s = lb_set_error(
        LB_ERR_UNSUPPORTED,
        "%s: BPE pre-tokenizer not recognised (known: gpt-2, llama-bpe, "
        "smaug-bpe, qwen2): %.300s",
        label, txt ? txt : "null");
    free(txt);
    return s;
}

/* ---- SpecialVocab ------------------------------------------------------------ */

enum { SP_BOS, SP_EOS, SP_UNK, SP_SEP, SP_PAD, SP_CLS, SP_MASK, SP_EOT, SP_EOM, SP_N };
static const char *sp_name[SP_N] = {"bos", "eos", "unk", "sep", "pad",
                                    "cls", "mask", "eot", "eom"};
/* gguf-py key of each type's id (add_<typ>_token_id); NULL: no writer
 * method (the converter logs a warning and skips it) */
static const char *sp_id_key[SP_N] = {
    "tokenizer.ggml.bos_token_id",       "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",   "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.padding_token_id",   NULL,
    "tokenizer.ggml.mask_token_id",      "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id"};
static const char *sp_add_key[SP_N] = {
    "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", NULL,
    "tokenizer.ggml.add_sep_token", NULL, NULL, NULL, NULL, NULL};

/* A tokenizer_config.json special-token entry: a string, an AddedToken
 * dict (compared unequal to strings, as in Python), or nothing. */
typedef struct sp_entry {
    const char *str;     /* string value, or the dict's content          */
    bool is_dict;
} sp_entry;

static bool sp_is(const sp_entry *e) { return e->str != NULL; }
/* Python `s in (a, b)` where a, b are entries and s a string. */
static bool sp_eq(const sp_entry *e, const char *s) {
    return e->str && !e->is_dict && s && !strcmp(e->str, s);
}

typedef struct special_state {
    int types[SP_N]; /* special_token_types, in order */
    int n_types;
    int ids_order[SP_N];
    int64_t ids[SP_N]; /* -1 unset */
    int n_ids;
    int add_order[SP_N];
    int add[SP_N]; /* -1 unset */
    int n_add;
} special_state;

static void sp_set_id(special_state *st, int typ, int64_t id, int64_t n_vocab) {
    if (id < 0) return;
    if (n_vocab >= 0 && id >= n_vocab) return; /* out of range: skipped */
    if (st->ids[typ] >= 0) return;
    st->ids[typ] = id;
    st->ids_order[st->n_ids++] = typ;
}

static void sp_set_add(special_state *st, int typ, bool v, bool overwrite) {
    if (st->add[typ] < 0) st->add_order[st->n_add++] = typ;
    else if (!overwrite) return;
    st->add[typ] = v;
}

static sp_entry tc_entry(const cJSON *tc, const char *key) {
    sp_entry e = {NULL, false};
    const cJSON *j = jget(tc, key);
    if (cJSON_IsString(j)) e.str = j->valuestring;
    else if (cJSON_IsObject(j) && jstr(j, "content")) {
        e.str = jstr(j, "content");
        e.is_dict = true;
    }
    return e;
}

static const char *tmpl_special(const cJSON *item) {
    return jstr(jget(item, "SpecialToken"), "id");
}

/* SpecialVocab(dir, load_merges, n_vocab) without the merges (done by the
 * caller) and without the chat template (done separately). tj/tc/cfg may
 * be NULL (absent files). */
static void special_vocab(const cJSON *tj, const cJSON *tc, const cJSON *cfg,
                          int64_t n_vocab, special_state *st) {
    memset(st, 0, sizeof *st);
    for (int i = 0; i < SP_N; i++) {
        st->ids[i] = -1;
        st->add[i] = -1;
    }
    for (int i = 0; i <= SP_MASK; i++) st->types[st->n_types++] = i;
    /* the tokenizer_config entries this code may rewrite */
    sp_entry tce[SP_N];
    for (int i = 0; i < SP_N; i++) {
        char k[32];
        snprintf(k, sizeof k, "%s_token", sp_name[i]);
        tce[i] = tc_entry(tc, k);
    }
    if (tj) {
        sp_entry bos = tce[SP_BOS], cls = tce[SP_CLS], eos = tce[SP_EOS],
                 sep = tce[SP_SEP];
        if (!sp_is(&bos) && sp_is(&cls) && tc) tce[SP_BOS] = bos = cls;
        if (!sp_is(&eos) && sp_is(&sep) && tc) tce[SP_EOS] = eos = sep;
        const cJSON *pp = jget(tj, "post_processor");
        const cJSON *procs = jget(pp, "processors");
        const cJSON *one[1] = {pp};
        int n_procs = cJSON_IsArray(procs) ? cJSON_GetArraySize(procs) : (pp && cJSON_IsObject(pp) ? 1 : 0);
        for (int pi = 0; pi < n_procs; pi++) {
            const cJSON *p = cJSON_IsArray(procs) ? cJSON_GetArrayItem(procs, pi) : one[0];
            const char *ptype = jstr(p, "type");
            if (!ptype) continue;
            if (!strcmp(ptype, "ByteLevel")) {
                if (st->add[SP_BOS] < 0) sp_set_add(st, SP_BOS, false, false);
                if (st->add[SP_EOS] < 0) sp_set_add(st, SP_EOS, false, false);
            } else if (!strcmp(ptype, "RobertaProcessing")) {
                sp_set_add(st, SP_BOS, true, true);
                sp_set_add(st, SP_EOS, true, true);
                sp_set_add(st, SP_SEP, true, true);
                if (!sp_is(&cls) && tc) {
                    const cJSON *c = jget(p, "cls");
                    const cJSON *c0 = cJSON_GetArrayItem(c, 0);
                    if (cJSON_IsString(c0)) cls.str = c0->valuestring, cls.is_dict = false;
                    else cls = bos;
                    tce[SP_CLS] = cls;
                }
                if (!sp_is(&sep) && tc) {
                    const cJSON *c = jget(p, "sep");
                    const cJSON *c0 = cJSON_GetArrayItem(c, 0);
                    if (cJSON_IsString(c0)) sep.str = c0->valuestring, sep.is_dict = false;
                    else sep = eos;
                    tce[SP_SEP] = sep;
                }
            } else if (!strcmp(ptype, "TemplateProcessing")) {
                const cJSON *single = jget(p, "single");
                const cJSON *pair = jget(p, "pair");
                const char *first = NULL, *last = NULL;
                int ns = cJSON_GetArraySize(single);
                if (ns > 1) {
                    first = tmpl_special(cJSON_GetArrayItem(single, 0));
                    if (first && *first) {
                        if (!tc) {
                            bos.str = first, bos.is_dict = false;
                        } else if (!sp_eq(&bos, first) && !sp_eq(&cls, first)) {
                            if (!sp_is(&bos)) tce[SP_BOS] = bos = (sp_entry){first, false};
                            if (!sp_is(&cls)) tce[SP_CLS] = cls = (sp_entry){first, false};
                        }
                        sp_set_add(st, SP_BOS, sp_eq(&bos, first) || sp_eq(&cls, first), true);
                    } else
                        first = NULL;
                    last = tmpl_special(cJSON_GetArrayItem(single, ns - 1));
                    if (last && *last) {
                        if (!tc) {
                            eos.str = last, eos.is_dict = false;
                        } else if (!sp_eq(&eos, last)) {
                            bool has_eot = false, has_eom = false;
                            for (int i = 0; i < st->n_types; i++) {
                                has_eot |= st->types[i] == SP_EOT;
                                has_eom |= st->types[i] == SP_EOM;
                            }
                            if (!has_eot) {
                                st->types[st->n_types++] = SP_EOT;
                                tce[SP_EOT] = eos;
                            } else if (!has_eom) {
                                st->types[st->n_types++] = SP_EOM;
                                tce[SP_EOM] = eos;
                            }
                            tce[SP_EOS] = eos = (sp_entry){last, false};
                        }
                        sp_set_add(st, SP_EOS, sp_eq(&eos, last), true);
                    } else
                        last = NULL;
                }
                int np = cJSON_GetArraySize(pair);
                if (np > 0) {
                    int start = (first && tmpl_special(cJSON_GetArrayItem(pair, 0)) &&
                                 !strcmp(tmpl_special(cJSON_GetArrayItem(pair, 0)), first))
                                    ? 1 : 0;
                    int stop = np;
                    if (last && tmpl_special(cJSON_GetArrayItem(pair, np - 1)) &&
                        !strcmp(tmpl_special(cJSON_GetArrayItem(pair, np - 1)), last))
                        stop = np - 1;
                    if (stop > start) {
                        const char *a = jstr(jget(cJSON_GetArrayItem(pair, start), "Sequence"), "id");
                        const char *b = jstr(jget(cJSON_GetArrayItem(pair, stop - 1), "Sequence"), "id");
                        if (a && b && !strcmp(a, "A") && !strcmp(b, "B") &&
                            stop - 1 > start + 1) {
                            int ms = start + 1, me = stop - 1; /* middle [ms, me) */
                            bool add_sep = false;
                            const char *e0 = tmpl_special(cJSON_GetArrayItem(pair, ms));
                            if (e0 && *e0 && (sp_eq(&sep, e0) || sp_eq(&eos, e0)) && !last)
                                add_sep = true;
                            if (me - ms == 2) {
                                const char *e1 = tmpl_special(cJSON_GetArrayItem(pair, ms + 1));
                                if (e1 && *e1 && (sp_eq(&sep, e1) || sp_eq(&eos, e1)))
                                    add_sep = true;
                            }
                            sp_set_add(st, SP_SEP, add_sep, true);
                            if (add_sep && !sp_is(&sep) && tc) tce[SP_SEP] = eos;
                        }
                    }
                }
            }
        }
    }
    if (tc) {
        for (int i = 0; i < st->n_types; i++) {
            int typ = st->types[i];
            char k[32];
            snprintf(k, sizeof k, "add_%s_token", sp_name[typ]);
            int b = jbool(tc, k);
            if (b >= 0 && st->add[typ] < 0) sp_set_add(st, typ, b == 1, false);
            if (!tce[typ].str) continue;
            const cJSON *a = added_by_content(tj, tce[typ].str);
            const cJSON *id = jget(a, "id");
            int64_t v;
            if (json_int(id, &v)) sp_set_id(st, typ, v, n_vocab);
        }
    }
    if (cfg) {
        for (int i = 0; i < st->n_types; i++) {
            int typ = st->types[i];
            char k[32];
            snprintf(k, sizeof k, "%s_token_id", sp_name[typ]);
            const cJSON *id = jget(cfg, k);
            if (!id) id = jget(jget(cfg, "text_config"), k);
            /* Python isinstance(x, int): JSON integers (a list, e.g. several
             * eos ids, is skipped) */
            int64_t v;
            if (json_int(id, &v)) sp_set_id(st, typ, v, n_vocab);
        }
    }
}

static void parse_normalizer(const cJSON *n, ex_vocab *v) {
    const char *t = jstr(n, "type");
    if (!t) return;
    if (!strcmp(t, "Lowercase")) v->norm_lowercase = 1;
    else if (!strcmp(t, "NFC")) v->norm_nfc = 1;
    else if (!strcmp(t, "StripAccents")) v->norm_strip_accents = 1;
    else if (!strcmp(t, "BertNormalizer")) {
        if (jbool(n, "lowercase") >= 0) v->norm_lowercase = jbool(n, "lowercase");
        if (jbool(n, "strip_accents") >= 0) v->norm_strip_accents = jbool(n, "strip_accents");
    } else if (!strcmp(t, "Sequence")) {
        const cJSON *l = jget(n, "normalizers");
        for (const cJSON *e = cJSON_IsArray(l) ? l->child : NULL; e; e = e->next)
            parse_normalizer(e, v);
    }
}

/* chat template: tokenizer_config.json "chat_template" (string or list of
 * {name, template}), else chat_template.jinja, else chat_template.json */
static lb_status load_chat_template(const char *dir, const cJSON *tc, ex_vocab *v) {
    const cJSON *ct = jget(tc, "chat_template");
    cJSON *alt = NULL;
    char *jinja = NULL;
    lb_status s = LB_OK;
    if (!ct && dir) {
        char *p = lb_path_join(dir, "chat_template.jinja");
        if (!p) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
        if (lb_is_file(p)) {
            size_t len;
            s = lb_read_file(p, EX_JSON_MAX, &jinja, &len);
        } else {
            s = ex_json_load(dir, "chat_template.json", EX_JSON_MAX, &alt);
            if (s == LB_OK && alt) ct = jget(alt, "chat_template");
        }
        free(p);
        if (s != LB_OK) goto done;
    }
    if (jinja) {
        v->chat_template = jinja;
        jinja = NULL;
    } else if (cJSON_IsString(ct)) {
        v->chat_template = lb_strdup(ct->valuestring);
        if (!v->chat_template) s = lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    } else if (cJSON_IsArray(ct)) {
        int n = cJSON_GetArraySize(ct);
        v->tmpl_name = calloc((size_t)n + 1, sizeof *v->tmpl_name);
        v->tmpl_text = calloc((size_t)n + 1, sizeof *v->tmpl_text);
        if (!v->tmpl_name || !v->tmpl_text) {
            s = lb_set_error(LB_ERR_NOMEM, "export: out of memory");
            goto done;
        }
        for (const cJSON *e = ct->child; e; e = e->next) {
            const char *name = jstr(e, "name"), *text = jstr(e, "template");
            if (!name || !*name || !text) continue;
            /* gguf-py: characters outside [A-Za-z0-9] become '_' */
            char *nm = lb_strdup(name);
            if (!nm) {
                s = lb_set_error(LB_ERR_NOMEM, "export: out of memory");
                goto done;
            }
            for (char *c = nm; *c; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                      (*c >= '0' && *c <= '9')))
                    *c = '_';
            if (!strcmp(nm, "default")) {
                free(nm);
                free(v->chat_template);
                v->chat_template = lb_strdup(text);
                if (!v->chat_template) {
                    s = lb_set_error(LB_ERR_NOMEM, "export: out of memory");
                    goto done;
                }
                continue;
            }
            bool dup = false;
            for (int i = 0; i < v->n_tmpl; i++)
                if (!strcmp(v->tmpl_name[i], nm)) dup = true;
            if (dup) { /* a set in gguf-py; the last template written wins */
                for (int i = 0; i < v->n_tmpl; i++)
                    if (!strcmp(v->tmpl_name[i], nm)) {
                        free(v->tmpl_text[i]);
                        v->tmpl_text[i] = lb_strdup(text);
                        if (!v->tmpl_text[i]) s = lb_set_error(LB_ERR_NOMEM, "export: out of memory");
                    }
                free(nm);
                if (s != LB_OK) goto done;
                continue;
            }
            v->tmpl_name[v->n_tmpl] = nm;
            v->tmpl_text[v->n_tmpl] = lb_strdup(text);
            if (!v->tmpl_text[v->n_tmpl]) {
                v->n_tmpl++;
                s = lb_set_error(LB_ERR_NOMEM, "export: out of memory");
                goto done;
            }
            v->n_tmpl++;
        }
    }
done:
    free(jinja);
    cJSON_Delete(alt);
    return s;
}

/* Merges: "a b" strings, or ["a", "b"] pairs joined with ' ' after mapping
 * spaces inside the parts to U+0120 (gguf-py SpecialVocab). */
static lb_status load_merges(const cJSON *tj, const char *label, ex_vocab *v) {
    const cJSON *m = jget(jget(tj, "model"), "merges");
    if (!cJSON_IsArray(m)) return LB_OK;
    size_t n = (size_t)cJSON_GetArraySize(m);
    v->merge_off = calloc(n ? n : 1, sizeof *v->merge_off);
    v->merge_len = calloc(n ? n : 1, sizeof *v->merge_len);
    if (!v->merge_off || !v->merge_len)
        return lb_set_error(LB_ERR_NOMEM, "export: out of memory (merges)");
    char *tmp = NULL;
    size_t tcap = 0;
    size_t i = 0;
    for (const cJSON *e = m->child; e; e = e->next, i++) {
        if (cJSON_IsString(e)) {
            LB_TRY(ex_arena_add(&v->arena, e->valuestring, strlen(e->valuestring),
                                &v->merge_off[i]));
            v->merge_len[i] = strlen(e->valuestring);
            continue;
        }
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 ||
            !cJSON_IsString(e->child) || !cJSON_IsString(e->child->next)) {
            free(tmp);
            return lb_set_error(LB_ERR_FORMAT, "%s: model.merges[%zu] is not \"a b\" or [a, b]",
                                label, i);
        }
        const char *a = e->child->valuestring, *b = e->child->next->valuestring;
        size_t need = 2 * (strlen(a) + strlen(b)) + 2;
        if (need > tcap) {
            char *nt = realloc(tmp, need);
            if (!nt) {
                free(tmp);
                return lb_set_error(LB_ERR_NOMEM, "export: out of memory (merges)");
            }
            tmp = nt;
            tcap = need;
        }
        size_t o = 0;
        for (int part = 0; part < 2; part++) {
            for (const char *c = part ? b : a; *c; c++) {
                if (*c == ' ') { /* U+0120 */
                    tmp[o++] = (char)0xC4;
                    tmp[o++] = (char)0xA0;
                } else
                    tmp[o++] = *c;
            }
            if (!part) tmp[o++] = ' ';
        }
        lb_status s = ex_arena_add(&v->arena, tmp, o, &v->merge_off[i]);
        if (s != LB_OK) {
            free(tmp);
            return s;
        }
        v->merge_len[i] = o;
    }
    free(tmp);
    v->n_merges = n;
    return LB_OK;
}

static void copy_special(const special_state *st, ex_vocab *v) {
    for (int i = 0; i < st->n_ids; i++) {
        int typ = st->ids_order[i];
        if (!sp_id_key[typ] || v->n_special >= EX_MAX_SPECIAL) continue;
        snprintf(v->special_key[v->n_special], sizeof v->special_key[0], "%s", sp_id_key[typ]);
        v->special_id[v->n_special++] = (uint32_t)st->ids[typ];
    }
    for (int i = 0; i < st->n_add; i++) {
        int typ = st->add_order[i];
        if (!sp_add_key[typ] || v->n_add >= 4) continue;
        snprintf(v->add_key[v->n_add], sizeof v->add_key[0], "%s", sp_add_key[typ]);
        v->add_val[v->n_add++] = st->add[typ] == 1;
    }
}

/* transformers' all_special_tokens: the tokenizer_config special tokens
 * plus additional_special_tokens / extra_special_tokens. */
static bool is_special_text(const cJSON *tc, const char *t) {
    static const char *keys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                 "pad_token", "cls_token", "mask_token"};
    for (size_t i = 0; i < LB_ARRAY_LEN(keys); i++) {
        sp_entry e = tc_entry(tc, keys[i]);
        if (e.str && !strcmp(e.str, t)) return true;
    }
    static const char *lists[] = {"additional_special_tokens", "extra_special_tokens"};
    for (size_t i = 0; i < LB_ARRAY_LEN(lists); i++) {
        const cJSON *l = jget(tc, lists[i]);
        for (const cJSON *e = cJSON_IsArray(l) ? l->child : NULL; e; e = e->next) {
            const char *s = cJSON_IsString(e) ? e->valuestring : jstr(e, "content");
            if (s && !strcmp(s, t)) return true;
        }
    }
    return false;
}

/* Scores that make llama.cpp's SentencePiece tokenizer (llm_tokenizer_spm:
 * repeatedly merge the adjacent pair whose concatenation is a token with
 * the highest score, leftmost first) follow the BPE merges of
 * tokenizer.json (HF: repeatedly apply the adjacent pair with the lowest
 * merge rank, leftmost first): score(t) = -rank of the first merge "a b"
 * with a + b = t; 0 for tokens no merge produces (single characters, byte
 * tokens, added tokens; they are never the result of a merge in BPE, and
 * SPM starts from characters). LlamaHfVocab writes -1000 for every token,
 * which makes llama.cpp merge leftmost-first regardless of the merges:
 * tinystories-656k's GGUF then tokenized "little" as li|tt|le (perplexity
 * 168.6 instead of 55.4 on the same text). Returns the number of merges
 * applied; leaves the scores alone (-1000) when there are no merges. */
typedef struct str_id {
    const char *s;
    size_t id;
} str_id;

static int str_id_cmp(const void *a, const void *b) {
    return strcmp(((const str_id *)a)->s, ((const str_id *)b)->s);
}

static lb_status scores_from_merges(const cJSON *tj, const tok_index *ti, size_t base,
                                    float *scores, size_t *n_used) {
    *n_used = 0;
    const cJSON *m = jget(jget(tj, "model"), "merges");
    if (!cJSON_IsArray(m) || !m->child) return LB_OK;
    str_id *idx = malloc((base ? base : 1) * sizeof *idx);
    bool *set = calloc(base ? base : 1, sizeof *set);
    char *cat = NULL;
    size_t ccap = 0;
    lb_status s = LB_OK;
    if (!idx || !set) s = lb_set_error(LB_ERR_NOMEM, "export: out of memory (scores)");
    size_t n = 0;
    for (size_t id = 0; s == LB_OK && id < base; id++)
        if (ti->str[id]) idx[n++] = (str_id){ti->str[id], id};
    if (s == LB_OK) qsort(idx, n, sizeof *idx, str_id_cmp);
    size_t rank = 0;
    for (const cJSON *e = s == LB_OK ? m->child : NULL; e; e = e->next, rank++) {
        const char *a, *b;
        size_t la, lb;
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (!sp) continue;
            a = e->valuestring, la = (size_t)(sp - a);
            b = sp + 1, lb = strlen(b);
        } else if (cJSON_IsArray(e) && cJSON_IsString(e->child) && e->child->next &&
                   cJSON_IsString(e->child->next)) {
            a = e->child->valuestring, la = strlen(a);
            b = e->child->next->valuestring, lb = strlen(b);
        } else {
            continue; /* load_merges reports malformed entries */
        }
        if (la + lb + 1 > ccap) {
            char *nc = realloc(cat, la + lb + 1);
            if (!nc) {
                s = lb_set_error(LB_ERR_NOMEM, "export: out of memory (scores)");
                break;
            }
            cat = nc;
            ccap = la + lb + 1;
        }
        memcpy(cat, a, la);
        memcpy(cat + la, b, lb);
        cat[la + lb] = '\0';
        str_id key = {cat, 0};
        const str_id *hit = bsearch(&key, idx, n, sizeof *idx, str_id_cmp);
        if (!hit || set[hit->id]) continue;
        set[hit->id] = true;
        scores[hit->id] = -(float)rank;
        (*n_used)++;
    }
    if (s == LB_OK && *n_used)
        for (size_t id = 0; id < base; id++)
            if (!set[id]) scores[id] = 0.0f;
    free(idx);
    free(set);
    free(cat);
    return s;
}

/* LlamaHfVocab + SpecialVocab(n_vocab = len(tokens)). */
static lb_status vocab_llama_hf(const cJSON *tj, const cJSON *tc, const cJSON *cfg,
                                const char *label, int64_t cfg_vocab_size, ex_vocab *v) {
    tok_index ti;
    LB_TRY(tok_index_build(tj, label, &ti));
    lb_status s = LB_OK;
    size_t base = ti.n_model;
    /* added tokens at or beyond the base vocabulary, in id order */
    size_t n_added = 0;
    for (size_t id = base; id < ti.n; id++)
        if (ti.added[id]) n_added++;
    snprintf(v->model, sizeof v->model, "llama");
    snprintf(v->pre, sizeof v->pre, "default");
    /* config vocab_size beyond the tokenizer (padding rows of the
     * embedding): "[PAD1]".."[PADn]", score -1000, UNUSED, as
     * convert_hf_to_gguf's _create_vocab_sentencepiece pads; without them
     * llama.cpp refuses the file (token_embd rows != tokens) */
    size_t n_pad = cfg_vocab_size > (int64_t)(base + n_added)
                       ? (size_t)cfg_vocab_size - (base + n_added) : 0;
    s = vocab_alloc(v, base + n_added + n_pad, true);
    /* special ids: tokenizer_config special tokens looked up in get_vocab */
    size_t k = 0;
    for (size_t id = 0; s == LB_OK && id < base; id++) {
        if (id >= ti.n || !ti.str[id]) { /* a hole, or ids repeated in model.vocab */
            s = lb_set_error(LB_ERR_FORMAT, "%s: no token with id %zu (below the model "
                             "vocabulary size %zu)", label, id, base);
            break;
        }
        const char *t = ti.str[id];
        s = vocab_set(v, k, t, strlen(t));
        v->scores[k] = -1000.0f;
        v->types[k] = is_byte_token(t) ? 6 : (tc && is_special_text(tc, t)) ? 3 : 1;
        k++;
    }
    /* merge ranks as scores (ids below base are k == id here) */
    size_t n_scored = 0;
    if (s == LB_OK) s = scores_from_merges(tj, &ti, base, v->scores, &n_scored);
    v->n_scored = n_scored;
    for (size_t id = base; s == LB_OK && id < ti.n; id++) {
        if (!ti.added[id]) continue;
        const char *t = ti.str[id];
        s = vocab_set(v, k, t, strlen(t));
        v->scores[k] = n_scored ? 0.0f : -1000.0f;
        v->types[k] = (tc && is_special_text(tc, t)) ? 3 : 4;
        k++;
    }
    for (size_t i = 1; s == LB_OK && i <= n_pad; i++) {
        char pad[32];
        int m = snprintf(pad, sizeof pad, "[PAD%zu]", i);
        s = vocab_set(v, k, pad, (size_t)m);
        v->scores[k] = -1000.0f;
        v->types[k] = 5; /* UNUSED */
        k++;
    }
    if (s == LB_OK && n_pad) {
        size_t l = strlen(v->note);
        snprintf(v->note + l, sizeof v->note - l, "%sconfig vocab_size %lld > %zu tokens: "
                 "padded with [PAD1]..[PAD%zu] (convert_hf_to_gguf's sentencepiece padding)",
                 l ? "; " : "", (long long)cfg_vocab_size, base + n_added, n_pad);
    }
    if (s == LB_OK) {
        special_state st;
        special_vocab(tj, tc, cfg, (int64_t)v->n_tokens, &st);
        copy_special(&st, v);
    }
    /* what llama.cpp's SPM tokenizer cannot do as tokenizer.json does */
    if (s == LB_OK) {
        size_t n_bytes = 0;
        for (size_t i = 0; i < v->n_tokens; i++) n_bytes += v->types[i] == 6;
        const cJSON *model = jget(tj, "model");
        if (n_bytes < 256 && jbool(model, "fuse_unk") == 1)
            snprintf(v->warning, sizeof v->warning,
                     "tokenizer.json fuses a run of unknown characters into one <unk> "
                     "(fuse_unk) and has %zu of the 256 <0xXX> byte tokens; the GGUF \"llama\" "
                     "vocabulary cannot express that: llama.cpp gives one <unk> per unknown "
                     "character, so text outside the vocabulary tokenizes differently", n_bytes);
        if (!n_scored)
            snprintf(v->warning + strlen(v->warning), sizeof v->warning - strlen(v->warning),
                     "%sno merges in tokenizer.json: every score is -1000 and llama.cpp merges "
                     "leftmost-first, which may differ from the tokenizer", v->warning[0] ? "; " : "");
    }
    tok_index_free(&ti);
    return s;
}

/* get_vocab_base + SpecialVocab(load_merges=True) */
static lb_status vocab_gpt2(const cJSON *tj, const cJSON *tc, const cJSON *cfg,
                            const char *label, int64_t cfg_vocab, ex_vocab *v) {
    LB_TRY(detect_pre(tj, label, v->pre, sizeof v->pre));
    tok_index ti;
    LB_TRY(tok_index_build(tj, label, &ti));
    size_t n = cfg_vocab > 0 ? (size_t)cfg_vocab : ti.n;
    lb_status s = LB_OK;
    if (ti.n > n)
        s = lb_set_error(LB_ERR_FORMAT, "%s: token id %zu >= config vocab_size %zu",
                         label, ti.n - 1, n);
    snprintf(v->model, sizeof v->model, "gpt2");
    if (s == LB_OK) s = vocab_alloc(v, n, false);
    char pad[32];
    char *tmp = NULL;
    for (size_t i = 0; s == LB_OK && i < n; i++) {
        const char *t = i < ti.n ? ti.str[i] : NULL;
        if (!t) {
            int m = snprintf(pad, sizeof pad, "[PAD%zu]", i);
            s = vocab_set(v, i, pad, (size_t)m);
            v->types[i] = 5;
            continue;
        }
        const cJSON *a = ti_added_by_content(&ti, t);
        if (!a) {
            s = vocab_set(v, i, t, strlen(t));
            v->types[i] = 1;
            continue;
        }
        if (jbool(a, "special") == 1 || looks_special(t)) {
            s = vocab_set(v, i, t, strlen(t));
            v->types[i] = 3;
            continue;
        }
        /* user-defined: U+2581 -> ' ' */
        size_t tl = strlen(t);
        char *nt = realloc(tmp, tl + 1);
        if (!nt) {
            s = lb_set_error(LB_ERR_NOMEM, "export: out of memory");
            break;
        }
        tmp = nt;
        size_t o = 0;
        for (size_t j = 0; j < tl;) {
            if (j + 3 <= tl && !memcmp(t + j, "\xe2\x96\x81", 3)) {
                tmp[o++] = ' ';
                j += 3;
            } else
                tmp[o++] = t[j++];
        }
        s = vocab_set(v, i, tmp, o);
        v->types[i] = 4;
    }
    free(tmp);
    if (s == LB_OK) s = load_merges(tj, label, v);
    if (s == LB_OK) {
        special_state st;
        special_vocab(tj, tc, cfg, -1, &st);
        copy_special(&st, v);
    }
    tok_index_free(&ti);
    return s;
}

lb_status ex_vocab_from_json(const cJSON *tj, const cJSON *tc, const cJSON *cfg,
                             const char *dir, const char *label, bool has_spm_model,
                             const char *gguf_arch, int64_t cfg_vocab_size, ex_vocab *v) {
    memset(v, 0, sizeof *v);
    v->add_space_prefix = -1;
    v->norm_nfc = v->norm_lowercase = v->norm_strip_accents = -1;
    v->present = true;
    if (!tj) {
        snprintf(v->model, sizeof v->model, "none");
        snprintf(v->note, sizeof v->note, "no tokenizer.json: tokenizer.ggml.model \"none\"");
        return LB_OK;
    }
    if (cfg_vocab_size > EX_MAX_VOCAB)
        return lb_set_error(LB_ERR_RANGE, "%s: vocab_size %lld is beyond %lld", label,
                            (long long)cfg_vocab_size, (long long)EX_MAX_VOCAB);
    bool is_llama = !strcmp(gguf_arch, "llama");
    if (has_spm_model)
        snprintf(v->note, sizeof v->note,
                 "tokenizer.model not read (no SentencePiece reader): vocabulary from "
                 "tokenizer.json, scores -1000 (llama.cpp's converter writes the "
                 "SentencePiece scores)");
    if (is_llama && tc && jbool(tc, "add_prefix_space") >= 0)
        v->add_space_prefix = jbool(tc, "add_prefix_space");
    const cJSON *model = jget(tj, "model");
    const char *mtype = jstr(model, "type");
    lb_status s;
    if (!mtype || strcmp(mtype, "BPE")) {
        s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: model.type \"%s\" (only BPE tokenizers "
                         "are exported)", label, mtype ? mtype : "?");
        goto done;
    }
    bool byte_fallback = jbool(model, "byte_fallback") == 1;
    const char *dec = jstr(jget(tj, "decoder"), "type");
    bool llama_hf = is_llama && byte_fallback && dec && !strcmp(dec, "Sequence");
    if (llama_hf)
        s = vocab_llama_hf(tj, tc, cfg, label, cfg_vocab_size, v);
    else
        s = vocab_gpt2(tj, tc, cfg, label, cfg_vocab_size, v);
    if (s == LB_OK && tc) s = load_chat_template(dir, tc, v);
    if (s == LB_OK) parse_normalizer(jget(tj, "normalizer"), v);
done:
    if (s != LB_OK) ex_vocab_free(v);
    return s;
}

lb_status ex_vocab_load(const char *dir, const char *gguf_arch,
                        int64_t cfg_vocab_size, ex_vocab *v) {
    memset(v, 0, sizeof *v);
    cJSON *tj = NULL, *tc = NULL, *cfg = NULL;
    char *label = lb_path_join(dir, "tokenizer.json");
    char *spm = lb_path_join(dir, "tokenizer.model");
    lb_status s = label && spm ? LB_OK : lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    if (s == LB_OK) s = ex_json_load(dir, "tokenizer.json", EX_JSON_MAX, &tj);
    if (s == LB_OK) s = ex_json_load(dir, "tokenizer_config.json", EX_JSON_MAX, &tc);
    if (s == LB_OK) s = ex_json_load(dir, "config.json", EX_JSON_MAX, &cfg);
    if (s == LB_OK)
        s = ex_vocab_from_json(tj, tc, cfg, dir, label, lb_is_file(spm), gguf_arch,
                               cfg_vocab_size, v);
    cJSON_Delete(tj);
    cJSON_Delete(tc);
    cJSON_Delete(cfg);
    free(label);
    free(spm);
    return s;
}

lb_status ex_vocab_write(const ex_vocab *v, lb_gguf_writer *w) {
    if (!v->present) return LB_OK;
    if (v->add_space_prefix >= 0)
        LB_TRY(lb_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix",
                                       v->add_space_prefix == 1));
    LB_TRY(lb_gguf_writer_set_str(w, "tokenizer.ggml.model", v->model));
    if (!strcmp(v->model, "none")) return LB_OK;
    LB_TRY(lb_gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre));
    lb_gguf_str *strs = malloc((v->n_tokens > v->n_merges ? v->n_tokens : v->n_merges) *
                                   sizeof *strs + 1);
    if (!strs) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
    for (size_t i = 0; i < v->n_tokens; i++) {
        strs[i].data = v->arena.buf + v->tok_off[i];
        strs[i].len = v->tok_len[i];
    }
    lb_status s = lb_gguf_writer_set_arr_strn(w, "tokenizer.ggml.tokens", strs, v->n_tokens);
    if (s == LB_OK && v->scores)
        s = lb_gguf_writer_set_arr(w, "tokenizer.ggml.scores", LB_GGUF_TYPE_FLOAT32,
                                   v->scores, v->n_tokens);
    if (s == LB_OK)
        s = lb_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LB_GGUF_TYPE_INT32,
                                   v->types, v->n_tokens);
    if (s == LB_OK && v->n_merges) {
        for (size_t i = 0; i < v->n_merges; i++) {
            strs[i].data = v->arena.buf + v->merge_off[i];
            strs[i].len = v->merge_len[i];
        }
        s = lb_gguf_writer_set_arr_strn(w, "tokenizer.ggml.merges", strs, v->n_merges);
    }
    free(strs);
    LB_TRY(s);
    for (int i = 0; i < v->n_special; i++)
        LB_TRY(lb_gguf_writer_set_u32(w, v->special_key[i], v->special_id[i]));
    for (int i = 0; i < v->n_add; i++)
        LB_TRY(lb_gguf_writer_set_bool(w, v->add_key[i], v->add_val[i]));
    for (int i = 0; i < v->n_tmpl; i++) {
        char key[128];
        snprintf(key, sizeof key, "tokenizer.chat_template.%s", v->tmpl_name[i]);
        LB_TRY(lb_gguf_writer_set_str(w, key, v->tmpl_text[i]));
    }
    if (v->n_tmpl)
        LB_TRY(lb_gguf_writer_set_arr_str(w, "tokenizer.chat_templates",
                                          (const char *const *)v->tmpl_name,
                                          (uint64_t)v->n_tmpl));
    if (v->chat_template)
        LB_TRY(lb_gguf_writer_set_str(w, "tokenizer.chat_template", v->chat_template));
    if (v->norm_nfc >= 0)
        LB_TRY(lb_gguf_writer_set_bool(w, "tokenizer.ggml.normalizer.nfc", v->norm_nfc == 1));
    if (v->norm_lowercase >= 0)
        LB_TRY(lb_gguf_writer_set_bool(w, "tokenizer.ggml.normalizer.lowercase",
                                       v->norm_lowercase == 1));
    if (v->norm_strip_accents >= 0)
        LB_TRY(lb_gguf_writer_set_bool(w, "tokenizer.ggml.normalizer.strip_accents",
                                       v->norm_strip_accents == 1));
    return LB_OK;
}

/* The Split regexes for the GGUF -> HF tokenizer (ex_hf_internal.h). */
const char *const ex_re_llama3 = RE_LLAMA3;
const char *const ex_re_qwen2 = RE_QWEN2;
