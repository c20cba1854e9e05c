/*
 * test_tokenizer.c — tokenizer tests: golden cases against Hugging Face
 * tokenizers 0.23 (../shared/reference/tokenize/NAME.jsonl: ids, tokens,
 * decoded, decoded_skip_special for every case of every tokenizer), unit
 * tests (byte-level map, merges and ranks, added-token matching, decoders),
 * hostile tokenizer.json files, and the GGUF-vocabulary path against
 * llama.cpp's ids (llamacpp_crosscheck.json).
 */
#include "th.h"
#include "test_tokenizer_golden.h"

#include "lowbit/file.h"
#include "lowbit/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Golden cases                                                              */
/* ------------------------------------------------------------------------ */

typedef struct golden_set {
    const char *name;  /* reference/tokenize/<name>.jsonl */
    const char *path;  /* tokenizer dir or file under ../shared */
} golden_set;

static const golden_set golden_sets[] = {
    {"qwen3", "tokenizers/qwen3"},
    {"llama3", "tokenizers/llama3"},
    {"mistral-v0.1", "tokenizers/mistral-7b-v0.1"},
    {"tinystories-656k", "models/tinystories-656k"},
};

static bool ids_equal(const int32_t *a, size_t na, const cJSON *arr) {
    if (!cJSON_IsArray(arr) || (size_t)cJSON_GetArraySize(arr) != na) return false;
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsNumber(it) || (int32_t)it->valuedouble != a[i]) return false;
        i++;
    }
    return true;
}

static bool tokens_equal(char **t, size_t n, const cJSON *arr) {
    if (!cJSON_IsArray(arr) || (size_t)cJSON_GetArraySize(arr) != n) return false;
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsString(it) || strcmp(it->valuestring, t[i]) != 0) return false;
        i++;
    }
    return true;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "    %s:", what);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "%s\n", n > 40 ? " ..." : "");
}

static void run_golden(const golden_set *gs) {
    char rel[256];
    snprintf(rel, sizeof rel, "reference/tokenize/%s.jsonl", gs->name);
    size_t size = 0;
    char *data = th_read_bin(th_shared(rel), &size);
    if (!data) th_skip("reference jsonl missing (../shared)");
    lb_tokenizer *tok = NULL;
    double t0 = lb_time_s();
    lb_status st = lb_tokenizer_load_hf(th_shared(gs->path), &tok);
    double t_load = lb_time_s() - t0;
    TH_CHECK_OK(st);
    if (st != LB_OK) {
        free(data);
        return;
    }
    char *buf = realloc(data, size + 1);
    TH_CHECK(buf != NULL);
    if (!buf) {
        free(data);
        lb_tokenizer_free(tok);
        return;
    }
    buf[size] = '\0';
    int n_cases = 0, ok_ids = 0, ok_tok = 0, ok_dec = 0, ok_skip = 0;
    char *line = buf;
    while (line && *line) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (*line) {
            cJSON *j = cJSON_Parse(line);
            gs_str text = {0}, dec = {0}, skip = {0};
            bool parsed = j && gs_get_string(line, "text", &text) &&
                          gs_get_string(line, "decoded", &dec) &&
                          gs_get_string(line, "decoded_skip_special", &skip);
            TH_CHECK(parsed);
            if (parsed) {
                n_cases++;
                bool add = cJSON_IsTrue(cJSON_GetObjectItem(j, "add_special_tokens"));
                int32_t *ids = NULL;
                char **toks = NULL;
                size_t n = 0;
                TH_CHECK_OK(lb_tokenizer_encode_ex(tok, text.p, text.n,
                                                   add ? LB_TOK_ADD_SPECIAL : 0, &ids,
                                                   &toks, &n));
                const cJSON *want = cJSON_GetObjectItem(j, "ids");
                if (ids && ids_equal(ids, n, want)) {
                    ok_ids++;
                } else {
                    fprintf(stderr, "  %s case %d ids differ (text %.60s)\n", gs->name,
                            n_cases - 1, text.p);
                    if (ids) print_ids("got ", ids, n);
                }
                if (toks && tokens_equal(toks, n, cJSON_GetObjectItem(j, "tokens"))) ok_tok++;
                else
                    fprintf(stderr, "  %s case %d tokens differ\n", gs->name, n_cases - 1);
                /* decode the reference ids (not ours) */
                int32_t *ref = NULL;
                size_t nref = (size_t)cJSON_GetArraySize(want);
                ref = malloc((nref + 1) * sizeof *ref);
                for (size_t i = 0; ref && i < nref; i++)
                    ref[i] = (int32_t)cJSON_GetArrayItem(want, (int)i)->valuedouble;
                char *out = NULL;
                size_t outn = 0;
                TH_CHECK_OK(lb_tokenizer_decode(tok, ref, nref, false, &out, &outn));
                if (out && outn == dec.n && !memcmp(out, dec.p, dec.n)) ok_dec++;
                else
                    fprintf(stderr, "  %s case %d decoded differs: got '%.80s' want '%.80s'\n",
                            gs->name, n_cases - 1, out ? out : "(null)", dec.p);
                free(out);
                out = NULL;
                TH_CHECK_OK(lb_tokenizer_decode(tok, ref, nref, true, &out, &outn));
                if (out && outn == skip.n && !memcmp(out, skip.p, skip.n)) ok_skip++;
                else
                    fprintf(stderr, "  %s case %d skip-special differs: got '%.80s' want '%.80s'\n",
                            gs->name, n_cases - 1, out ? out : "(null)", skip.p);
                free(out);
                free(ref);
                free(ids);
                free(toks);
            }
            free(text.p);
            free(dec.p);
            free(skip.p);
            cJSON_Delete(j);
        }
        line = nl ? nl + 1 : NULL;
    }
    fprintf(stderr, "  %-17s load %.3fs  ids %d/%d  tokens %d/%d  decoded %d/%d  "
            "decoded_skip_special %d/%d\n", gs->name, t_load, ok_ids, n_cases, ok_tok,
            n_cases, ok_dec, n_cases, ok_skip, n_cases);
    TH_CHECK_INT(n_cases, 81);
    TH_CHECK_INT(ok_ids, n_cases);
    TH_CHECK_INT(ok_tok, n_cases);
    TH_CHECK_INT(ok_dec, n_cases);
    TH_CHECK_INT(ok_skip, n_cases);
    free(buf);
    lb_tokenizer_free(tok);
}

static void test_golden_qwen3(void) { run_golden(&golden_sets[0]); }
static void test_golden_llama3(void) { run_golden(&golden_sets[1]); }
static void test_golden_mistral(void) { run_golden(&golden_sets[2]); }
static void test_golden_tinystories(void) { run_golden(&golden_sets[3]); }

int main(void) {
    TH_RUN(test_golden_qwen3);
    TH_RUN(test_golden_llama3);
    TH_RUN(test_golden_mistral);
    TH_RUN(test_golden_tinystories);
    return th_report();
}
