/*
 * Model + tokenizer loading for the server and `lowbit run --chat`, and the
 * chat-prompt step (template render + tokenize) they share.
 */
#include "lowbit/chat.h"
#include "lowbit/config.h"
#include "lowbit/export.h"
#include "lowbit/file.h"
#include "lowbit/server.h"
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static bool is_gguf_file(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return false;
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char magic[4];
    bool ok = fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    fclose(f);
    return ok;
}

lb_status lb_server_load_model(const char *path,
                               const lb_model_load_opts *opts,
                               lb_model **model_out, lb_tokenizer **tok_out) {
    *model_out = NULL;
    *tok_out = NULL;
    if (!path) return lb_set_error(LB_ERR_INVALID_ARG, "load: NULL path");
    lb_model *m = NULL;
    lb_tokenizer *t = NULL;
    LB_TRY(lb_model_load(path, opts, &m));
    lb_status s = is_gguf_file(path) ? lb_tokenizer_load_gguf(path, &t)
                                     : lb_tokenizer_load_hf(path, &t);
    if (s != LB_OK) {
        lb_model_free(m);
        return s;
    }
    *model_out = m;
    *tok_out = t;
    return LB_OK;
}

void lb_server_load_opts_default(lb_server_load_opts *o) {
    memset(o, 0, sizeof *o);
    o->gguf_cache = true;
}

/* Log the requantized modules (at most 6 named). */
static void warn_requantized(const lb_export_cache_result *r) {
    if (r->n_requantized <= 0) return;
    const char *list = r->requantized ? r->requantized : "";
    /* cut at the 6th ", " (after the 6th name), if any */
    const char *cut = NULL, *p = list;
    for (int k = 0; k < 6 && (p = strstr(p, ", ")); k++) {
        if (k == 5) cut = p;
        p += 2;
    }
    int shown = cut ? (int)(cut - list) : (int)strlen(list);
    lb_log(LB_LOG_WARN,
           "%d GPTQ module(s) could not be copied exactly into the GGUF cache and "
           "were requantized (%.*s%s): served outputs can differ slightly from "
           "the checkpoint's; turn the cache off (lowbit serve --no-cache) to "
           "serve the checkpoint's own weights",
           r->n_requantized, shown, list, cut ? ", ..." : "");
}

/* The model of GPTQ checkpoint `dir` from its GGUF cache, with the
 * directory's token ids and sliding window. LB_ERR_* of the cache or the
 * GGUF load: the caller falls back to the checkpoint. */
static lb_status load_cached(const char *dir, const lb_server_load_opts *o,
                             lb_model **out) {
    *out = NULL;
    lb_export_cache_opts co;
    lb_export_cache_opts_default(&co);
    co.fallback_dir = o->cache_fallback_dir;
    co.n_threads = o->n_threads;
    co.progress = o->model.progress;
    lb_export_cache_result r;
    LB_TRY(lb_export_cached_gguf(dir, &co, &r));
    warn_requantized(&r);
    if (r.n_q4_1 > 0)
        lb_log(LB_LOG_INFO,
               "%d 4-bit asymmetric module(s) are Q4_1 in the GGUF cache: their "
               "zero offsets m = -scale*zero are rounded to fp16 (within half "
               "an ulp), the checkpoint as it is computes them exactly",
               r.n_q4_1);
    lb_model_config cfg;
    lb_model *m = NULL;
    lb_status s = lb_model_config_load_dir(dir, &cfg);
    if (s == LB_OK) {
        s = lb_model_load(r.path, &o->model, &m);
        if (s != LB_OK) s = lb_error_context(s, "cached GGUF %s", r.path);
        if (s == LB_OK) {
            lb_model_config *c = &m->config;
            c->bos_token_id = cfg.bos_token_id;
            memcpy(c->eos_token_ids, cfg.eos_token_ids, sizeof c->eos_token_ids);
            c->n_eos = cfg.n_eos;
            c->sliding_window = cfg.sliding_window;
            c->sliding_window_first_layer = cfg.sliding_window_first_layer;
        }
        lb_model_config_clear(&cfg);
    }
    lb_export_cache_result_free(&r);
    if (s != LB_OK) return s;
    *out = m;
    return LB_OK;
}

lb_status lb_server_load_model_ex(const char *path,
                                  const lb_server_load_opts *opts,
                                  lb_model **model_out,
                                  lb_tokenizer **tok_out) {
    *model_out = NULL;
    *tok_out = NULL;
    if (!path) return lb_set_error(LB_ERR_INVALID_ARG, "load: NULL path");
    lb_server_load_opts def;
    lb_server_load_opts_default(&def);
    const lb_server_load_opts *o = opts ? opts : &def;
    bool gptq = false;
    if (o->gguf_cache && lb_is_dir(path) &&
        lb_export_is_gptq_checkpoint(path, &gptq) != LB_OK) {
        gptq = false; /* lb_model_load reports the config's error */
        lb_clear_error();
    }
    if (!gptq) return lb_server_load_model(path, &o->model, model_out, tok_out);
    lb_model *m = NULL;
    lb_tokenizer *t = NULL;
    lb_status s = load_cached(path, o, &m);
    if (s == LB_ERR_CANCELLED || s == LB_ERR_NOMEM) return s;
    if (s != LB_OK) {
        lb_log(LB_LOG_WARN, "no GGUF cache for %s (%s): loading the checkpoint as it is",
               path, lb_last_error());
        lb_clear_error();
        LB_TRY(lb_model_load(path, &o->model, &m));
    }
    s = lb_tokenizer_load_hf(path, &t);
    if (s != LB_OK) {
        lb_model_free(m);
        return s;
    }
    *model_out = m;
    *tok_out = t;
    return LB_OK;
}

struct lb_chat_prompt {
    lb_chat_template *tpl;
    bool fallback;
    char *extra_json; /* {"bos_token":..., "eos_token":...,
                         "add_generation_prompt":true} */
    const char *stops[2];
    /* special-token texts of the vocabulary (for the content scan) */
    char **special;
    size_t *special_len, n_special;
    uint8_t first_byte[32]; /* bitmap: bytes that start a special text */
    uint32_t ph_base;       /* placeholder plane (U+F0000 or U+100000);
                               0: the template uses both */
};

/* ---- message content as plain text ----------------------------------------
 * The template renders messages whose content has every special-token text
 * (and every code point of the placeholder plane) replaced by a placeholder
 * code point ph_base + k of a Unicode private-use plane; the rendering is
 * then scanned, each placeholder put back as the text it stands for and its
 * byte range given to lb_tokenizer_encode_spans as "plain". So only the
 * template's own text can produce special tokens, while text without special
 * texts gives the ids it always gave (no spans). */

/* Does s[0..n) contain a code point of plane U+X0000 (X = 15 or 16)? */
static bool has_plane(const char *s, size_t n, uint32_t base) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned char b0 = base == 0xF0000 ? 0xF3 : 0xF4,
                  lo = base == 0xF0000 ? 0xB0 : 0x80,
                  hi = base == 0xF0000 ? 0xBF : 0x8F;
    for (size_t i = 0; i + 1 < n; i++)
        if (u[i] == b0 && u[i + 1] >= lo && u[i + 1] <= hi) return true;
    return false;
}

/* The vocabulary's special-token texts, longest first (leftmost-longest
 * scan), and the placeholder plane the template does not use. */
static bool collect_specials(lb_chat_prompt *cp, const lb_tokenizer *tok,
                             const char *src) {
    const char *tpl = cp->fallback ? lb_chat_chatml_template : src;
    size_t tl = strlen(tpl);
    const char *bos = lb_tokenizer_bos_text(tok), *eos = lb_tokenizer_eos_text(tok);
    cp->ph_base = 0;
    for (uint32_t base = 0xF0000; base <= 0x100000 && !cp->ph_base; base += 0x10000)
        if (!has_plane(tpl, tl, base) && !(bos && has_plane(bos, strlen(bos), base)) &&
            !(eos && has_plane(eos, strlen(eos), base)))
            cp->ph_base = base;
    int32_t nv = lb_tokenizer_n_vocab(tok);
    size_t cap = 0;
    for (int32_t id = 0; id < nv; id++) {
        const char *p = lb_tokenizer_special_text(tok, id);
        if (!p || !p[0]) continue;
        if (cp->n_special == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **a = realloc(cp->special, nc * sizeof *a);
            if (!a) return false;
            cp->special = a;
            size_t *b = realloc(cp->special_len, nc * sizeof *b);
            if (!b) return false;
            cp->special_len = b;
            cap = nc;
        }
        if (!(cp->special[cp->n_special] = lb_strdup(p))) return false;
        cp->special_len[cp->n_special++] = strlen(p);
    }
    /* longest first (insertion sort: a few hundred at most) */
    for (size_t i = 1; i < cp->n_special; i++)
        for (size_t j = i; j > 0 && cp->special_len[j] > cp->special_len[j - 1]; j--) {
            char *t = cp->special[j];
            cp->special[j] = cp->special[j - 1];
            cp->special[j - 1] = t;
            size_t l = cp->special_len[j];
            cp->special_len[j] = cp->special_len[j - 1];
            cp->special_len[j - 1] = l;
        }
    for (size_t i = 0; i < cp->n_special; i++) {
        unsigned char c = (unsigned char)cp->special[i][0];
        cp->first_byte[c >> 3] |= (uint8_t)(1u << (c & 7));
    }
    unsigned char pb = cp->ph_base == 0x100000 ? 0xF4 : 0xF3;
    cp->first_byte[pb >> 3] |= (uint8_t)(1u << (pb & 7));
    return true;
}

/* What each placeholder stands for (copies). */
typedef struct ph_table {
    char **text;
    size_t *len, n, cap;
} ph_table;

static void ph_free(ph_table *t) {
    for (size_t i = 0; i < t->n; i++) free(t->text[i]);
    free(t->text);
    free(t->len);
}

#define PH_MAX 65534u /* code points per plane usable as placeholders */

static int ph_add(ph_table *t, const char *s, size_t len) {
    for (size_t i = 0; i < t->n; i++) /* reuse: the same text, the same k */
        if (t->len[i] == len && !memcmp(t->text[i], s, len)) return (int)i;
    if (t->n >= PH_MAX) return -2;
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 8;
        char **a = realloc(t->text, nc * sizeof *a);
        if (!a) return -1;
        t->text = a;
        size_t *b = realloc(t->len, nc * sizeof *b);
        if (!b) return -1;
        t->len = b;
        t->cap = nc;
    }
    if (!(t->text[t->n] = malloc(len + 1))) return -1;
    memcpy(t->text[t->n], s, len);
    t->text[t->n][len] = '\0';
    t->len[t->n] = len;
    return (int)t->n++;
}

static void put_cp(char *o, uint32_t cp) { /* 4-byte UTF-8 */
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
}

/* content with its special texts / plane code points replaced: malloc'd
 * string, or NULL with *st set (NOMEM, RANGE); *changed when any. */
static char *mask_content(const lb_chat_prompt *cp, const char *s, ph_table *t,
                          bool *changed, lb_status *st) {
    size_t n = strlen(s), cap = n + 1, o = 0;
    char *out = malloc(cap);
    if (!out) {
        *st = lb_set_error(LB_ERR_NOMEM, "chat prompt: out of memory");
        return NULL;
    }
    unsigned char pb = cp->ph_base == 0x100000 ? 0xF4 : 0xF3,
                  lo = cp->ph_base == 0x100000 ? 0x80 : 0xB0,
                  hi = cp->ph_base == 0x100000 ? 0x8F : 0xBF;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t ml = 0;
        if (cp->first_byte[c >> 3] & (1u << (c & 7))) {
            if (c == pb && i + 3 < n && (unsigned char)s[i + 1] >= lo &&
                (unsigned char)s[i + 1] <= hi && ((unsigned char)s[i + 2] & 0xC0) == 0x80 &&
                ((unsigned char)s[i + 3] & 0xC0) == 0x80)
                ml = 4; /* a plane code point of the client's: escaped too
                           (only a valid one: invalid UTF-8 stays as it is,
                           for the template to judge) */
            for (size_t k = 0; !ml && k < cp->n_special; k++)
                if (cp->special_len[k] <= n - i &&
                    !memcmp(s + i, cp->special[k], cp->special_len[k]))
                    ml = cp->special_len[k];
        }
        if (!ml) {
            out[o++] = s[i++];
            continue;
        }
        int k = ph_add(t, s + i, ml);
        if (k < 0) {
            free(out);
            *st = k == -2 ? lb_set_error(LB_ERR_RANGE,
                                         "chat prompt: more than %u different "
                                         "special-token texts in message content",
                                         PH_MAX)
                          : lb_set_error(LB_ERR_NOMEM, "chat prompt: out of memory");
            return NULL;
        }
        /* a placeholder is 4 bytes; the text it replaces is >= 1 */
        if (o + 4 + (n - i) + 1 > cap) {
            cap = (o + 4 + (n - i) + 1) * 2;
            char *q = realloc(out, cap);
            if (!q) {
                free(out);
                *st = lb_set_error(LB_ERR_NOMEM, "chat prompt: out of memory");
                return NULL;
            }
            out = q;
        }
        put_cp(out + o, cp->ph_base + (uint32_t)k);
        o += 4;
        i += ml;
        *changed = true;
    }
    out[o] = '\0';
    return out;
}

/* Rendering with placeholders -> the real text (malloc'd, *len) and the
 * spans of the texts put back. */
static lb_status unmask(const lb_chat_prompt *cp, const char *r, size_t rn,
                        const ph_table *t, char **text, size_t *len,
                        lb_text_span **spans, size_t *n_spans) {
    *text = NULL;
    *spans = NULL;
    *n_spans = 0;
    size_t cap = rn + 1, o = 0, ns = 0, scap = 0;
    char *out = malloc(cap);
    lb_text_span *sp = NULL;
    if (!out) return lb_set_error(LB_ERR_NOMEM, "chat prompt: out of memory");
    for (size_t i = 0; i < rn;) {
        const unsigned char *u = (const unsigned char *)r + i;
        uint32_t k = UINT32_MAX;
        if (i + 4 <= rn && (u[0] & 0xF8) == 0xF0 && (u[1] & 0xC0) == 0x80 &&
            (u[2] & 0xC0) == 0x80 && (u[3] & 0xC0) == 0x80) {
            uint32_t c = ((uint32_t)(u[0] & 7) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
                         ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
            if (c >= cp->ph_base && c - cp->ph_base < t->n) k = c - cp->ph_base;
        }
        if (k == UINT32_MAX) {
            if (o + 1 >= cap) {
                char *q = realloc(out, cap *= 2);
                if (!q) goto nomem;
                out = q;
            }
            out[o++] = r[i++];
            continue;
        }
        size_t l = t->len[k];
        if (o + l + (rn - i) + 1 > cap) {
            cap = (o + l + (rn - i) + 1) * 2;
            char *q = realloc(out, cap);
            if (!q) goto nomem;
            out = q;
        }
        if (ns == scap) {
            scap = scap ? scap * 2 : 8;
            lb_text_span *q = realloc(sp, scap * sizeof *q);
            if (!q) goto nomem;
            sp = q;
        }
        sp[ns++] = (lb_text_span){o, o + l};
        memcpy(out + o, t->text[k], l);
        o += l;
        i += 4;
    }
    out[o] = '\0';
    *text = out;
    *len = o;
    *spans = sp;
    *n_spans = ns;
    return LB_OK;
nomem:
    free(out);
    free(sp);
    return lb_set_error(LB_ERR_NOMEM, "chat prompt: out of memory");
}

lb_status lb_chat_prompt_create(const lb_tokenizer *tok,
                                lb_chat_prompt **out) {
    *out = NULL;
    lb_chat_prompt *cp = calloc(1, sizeof *cp);
    if (!cp) return lb_set_error(LB_ERR_NOMEM, "chat prompt: out of memory");
    const char *src = lb_tokenizer_chat_template(tok);
    cp->fallback = !src || !src[0];
    lb_status s = lb_chat_template_compile(
        cp->fallback ? lb_chat_chatml_template : src, &cp->tpl);
    if (s != LB_OK) {
        free(cp);
        return lb_error_context(s, "the model's chat template");
    }
    /* bos_token / eos_token as transformers passes them (none when unset) */
    cJSON *x = cJSON_CreateObject();
    const char *bos = lb_tokenizer_bos_text(tok), *eos = lb_tokenizer_eos_text(tok);
    if (x) {
        if (bos) cJSON_AddStringToObject(x, "bos_token", bos);
        else cJSON_AddNullToObject(x, "bos_token");
        if (eos) cJSON_AddStringToObject(x, "eos_token", eos);
        else cJSON_AddNullToObject(x, "eos_token");
        cJSON_AddTrueToObject(x, "add_generation_prompt");
        cp->extra_json = cJSON_PrintUnformatted(x);
        cJSON_Delete(x);
    }
    if (!cp->extra_json) {
        lb_chat_prompt_free(cp);
        return lb_set_error(LB_ERR_NOMEM, "chat prompt: out of memory");
    }
    if (!collect_specials(cp, tok, src)) {
        lb_chat_prompt_free(cp);
        return lb_set_error(LB_ERR_NOMEM, "chat prompt: out of memory");
    }
    /* ChatML on a vocabulary without <|im_end|>: the model can only write
     * the marker as text, so it ends the reply as a stop string */
    if (cp->fallback) {
        int32_t id = lb_tokenizer_token_to_id(tok, "<|im_end|>");
        if (id < 0 || !lb_tokenizer_is_special(tok, id))
            cp->stops[0] = "<|im_end|>";
    }
    *out = cp;
    return LB_OK;
}

void lb_chat_prompt_free(lb_chat_prompt *cp) {
    if (!cp) return;
    for (size_t i = 0; i < cp->n_special; i++) free(cp->special[i]);
    free(cp->special);
    free(cp->special_len);
    lb_chat_template_free(cp->tpl);
    free(cp->extra_json);
    free(cp);
}

bool lb_chat_prompt_is_fallback(const lb_chat_prompt *cp) {
    return cp->fallback;
}

const char *const *lb_chat_prompt_stops(const lb_chat_prompt *cp) {
    return cp->stops;
}

/* messages_json with every message's string content masked (NULL with
 * *st = LB_OK when nothing needed masking). */
static char *mask_messages(const lb_chat_prompt *cp, const char *messages_json,
                           ph_table *t, lb_status *st) {
    *st = LB_OK;
    cJSON *root = cJSON_Parse(messages_json);
    if (!root) return NULL; /* the renderer reports the malformed JSON */
    bool changed = false;
    cJSON *m;
    if (cJSON_IsArray(root))
        cJSON_ArrayForEach(m, root) {
            cJSON *c = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "content")
                                         : NULL;
            if (!cJSON_IsString(c)) continue;
            bool ch = false;
            char *masked = mask_content(cp, c->valuestring, t, &ch, st);
            if (!masked) break;
            if (ch) {
                cJSON *nc = cJSON_CreateString(masked);
                if (!nc || !cJSON_ReplaceItemInObjectCaseSensitive(m, "content", nc)) {
                    cJSON_Delete(nc);
                    free(masked);
                    *st = lb_set_error(LB_ERR_NOMEM, "chat prompt: out of memory");
                    break;
                }
                changed = true;
            }
            free(masked);
        }
    char *j = NULL;
    if (*st == LB_OK && changed) {
        j = cJSON_PrintUnformatted(root);
        if (!j) *st = lb_set_error(LB_ERR_NOMEM, "chat prompt: out of memory");
    }
    cJSON_Delete(root);
    return j;
}

lb_status lb_chat_prompt_apply_ex(const lb_chat_prompt *cp,
                                  const lb_tokenizer *tok,
                                  const char *messages_json, unsigned flags,
                                  char **text_out, int32_t **ids_out,
                                  size_t *n_out) {
    if (text_out) *text_out = NULL;
    *ids_out = NULL;
    *n_out = 0;
    char *text = NULL;
    size_t len = 0;
    /* bounded render: a client controls the messages */
    lb_chat_limits lim = lb_chat_limits_default();
    lim.max_output_bytes = 16u << 20;
    lim.max_memory_bytes = 64u << 20;
    ph_table t = {0};
    char *masked = NULL;
    lb_status s = LB_OK;
    if (!(flags & LB_CHAT_SPECIAL_IN_CONTENT) && messages_json) {
        masked = mask_messages(cp, messages_json, &t, &s);
        if (s == LB_OK && masked && !cp->ph_base)
            s = lb_set_error(LB_ERR_UNSUPPORTED,
                             "chat prompt: message content holds special-token "
                             "text and the chat template uses both private-use "
                             "planes lowbit marks content with");
    }
    if (s == LB_OK)
        s = lb_chat_template_render_ex(cp->tpl, masked ? masked : messages_json,
                                       cp->extra_json, &lim, &text, &len);
    lb_text_span *spans = NULL;
    size_t n_spans = 0;
    if (s == LB_OK && masked) {
        char *real = NULL;
        s = unmask(cp, text, len, &t, &real, &len, &spans, &n_spans);
        free(text);
        text = real;
    }
    if (s == LB_OK)
        s = lb_tokenizer_encode_spans(tok, text, len, 0, spans, n_spans, ids_out,
                                      n_out);
    free(spans);
    free(masked);
    ph_free(&t);
    if (s == LB_OK && text_out)
        *text_out = text;
    else
        free(text);
    return s;
}

lb_status lb_chat_prompt_apply(const lb_chat_prompt *cp,
                               const lb_tokenizer *tok,
                               const char *messages_json, char **text_out,
                               int32_t **ids_out, size_t *n_out) {
    return lb_chat_prompt_apply_ex(cp, tok, messages_json, 0, text_out, ids_out,
                                   n_out);
}
