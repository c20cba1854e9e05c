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
};

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

lb_status lb_chat_prompt_apply(const lb_chat_prompt *cp,
                               const lb_tokenizer *tok,
                               const char *messages_json, char **text_out,
                               int32_t **ids_out, size_t *n_out) {
    if (text_out) *text_out = NULL;
    *ids_out = NULL;
    *n_out = 0;
    char *text = NULL;
    size_t len = 0;
    /* bounded render: a client controls the messages */
    lb_chat_limits lim = lb_chat_limits_default();
    lim.max_output_bytes = 16u << 20;
    lim.max_memory_bytes = 64u << 20;
    LB_TRY(lb_chat_template_render_ex(cp->tpl, messages_json, cp->extra_json,
                                      &lim, &text, &len));
    lb_status s = lb_tokenizer_encode(tok, text, len, false, ids_out, n_out);
    if (s == LB_OK && text_out)
        *text_out = text;
    else
        free(text);
    return s;
}
