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
#include "tokenizer/tok_internal.h"

#include <cjson/cJSON.h>
#include <pthread.h>
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


/* ------------------------------------------------------------------------ */
/* Unit tests                                                                */
/* ------------------------------------------------------------------------ */

/* Write `json` to a fresh file in the scratch dir; returns its path. */
static const char *write_json(const char *name, const char *json) {
    static char path[8][1024];
    static int slot;
    char *p = path[slot++ & 7];
    snprintf(p, sizeof path[0], "%s/%s", th_tmpdir(), name);
    FILE *f = fopen(p, "wb");
    if (!f) return p;
    fputs(json, f);
    fclose(f);
    return p;
}

static void test_bytelevel_map(void) {
    /* GPT-2 bytes_to_unicode: a bijection; printable bytes map to
     * themselves; ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ', 0xAD -> U+0143. */
    int seen[400] = {0};
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tok_byte_to_cp((uint8_t)b);
        if (cp >= 400 || seen[cp]++) bad++;
        if (tok_cp_to_byte(cp) != b) bad++;
    }
    TH_CHECK_INT(bad, 0);
    TH_CHECK_INT(tok_byte_to_cp(' '), 0x120);
    TH_CHECK_INT(tok_byte_to_cp('\n'), 0x10A);
    TH_CHECK_INT(tok_byte_to_cp('a'), 'a');
    TH_CHECK_INT(tok_byte_to_cp(0xAD), 0x143);
    TH_CHECK_INT(tok_byte_to_cp(0xFF), 0xFF);
    TH_CHECK_INT(tok_cp_to_byte(0x100), 0);
    TH_CHECK_INT(tok_cp_to_byte(0x144), -1);
    TH_CHECK_INT(tok_cp_to_byte(' '), -1);
}

static void test_utf8_lossy(void) {
    /* Rust from_utf8_lossy: one U+FFFD per maximal invalid subpart */
    tok_buf b = {0};
    TH_CHECK(tok_utf8_lossy(&b, "a\xF0\x9F\x98" "b\xFF\xC3", 7));
    TH_CHECK_INT(b.n, 1 + 3 + 1 + 3 + 3);
    TH_CHECK(b.p && !memcmp(b.p, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD", b.n));
    tok_buf_free(&b);
    TH_CHECK(tok_utf8_valid("\xED\x9F\xBF", 3));  /* U+D7FF */
    TH_CHECK(!tok_utf8_valid("\xED\xA0\x80", 3)); /* surrogate */
    TH_CHECK(!tok_utf8_valid("\xC0\x80", 2));     /* overlong */
    TH_CHECK(tok_utf8_valid("\xF4\x8F\xBF\xBF", 4));
    TH_CHECK(!tok_utf8_valid("\xF4\x90\x80\x80", 4));
}

static const char *tiny_bpe(const char *merges, const char *extra) {
    static char json[4096];
    snprintf(json, sizeof json,
             "{\"version\":\"1.0\",\"added_tokens\":[%s],\"normalizer\":null,"
             "\"pre_tokenizer\":null,\"post_processor\":null,\"decoder\":null,"
             "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,"
             "\"vocab\":{\"<unk>\":0,\"a\":1,\"b\":2,\"c\":3,\"ab\":4,\"bc\":5,\"abc\":6,"
             "\" \":7,\"<X>\":8},\"merges\":%s}}",
             extra, merges);
    return json;
}

static void encode_expect(lb_tokenizer *tok, const char *text, unsigned flags,
                          const int32_t *want, size_t nwant) {
    int32_t *ids = NULL;
    size_t n = 0;
    TH_CHECK_OK(lb_tokenizer_encode_ex(tok, text, strlen(text), flags, &ids, NULL, &n));
    bool eq = ids && n == nwant && (n == 0 || !memcmp(ids, want, n * sizeof *ids));
    TH_CHECK_MSG(eq, "encode('%s') gave %zu ids (first %d), want %zu", text, n,
                 n ? ids[0] : -1, nwant);
    free(ids);
}

static void test_merge_ranks(void) {
    lb_tokenizer *tok = NULL;
    /* "b c" outranks "a b": abc -> a bc -> abc */
    TH_CHECK_OK(lb_tokenizer_load_hf(write_json("r1.json", tiny_bpe("[\"b c\",\"a b\",\"a bc\"]", "")), &tok));
    encode_expect(tok, "abc", 0, (int32_t[]){6}, 1);
    encode_expect(tok, "abcab", 0, (int32_t[]){6, 4}, 2);
    lb_tokenizer_free(tok);
    /* "a b" first and no "ab c" merge: abc -> ab c (stuck) */
    TH_CHECK_OK(lb_tokenizer_load_hf(write_json("r2.json", tiny_bpe("[[\"a\",\"b\"],[\"b\",\"c\"],[\"a\",\"bc\"]]", "")), &tok));
    encode_expect(tok, "abc", 0, (int32_t[]){4, 3}, 2);
    /* unknown characters fuse into one <unk> (fuse_unk) */
    encode_expect(tok, "axyb", 0, (int32_t[]){1, 0, 2}, 3);
    /* no decoder: tokens joined with spaces */
    char *txt = NULL;
    TH_CHECK_OK(lb_tokenizer_decode(tok, (int32_t[]){4, 3}, 2, false, &txt, NULL));
    TH_CHECK_STR(txt, "ab c");
    free(txt);
    TH_CHECK_FAILS(lb_tokenizer_decode(tok, (int32_t[]){4, 99}, 2, false, &txt, NULL), LB_ERR_RANGE);
    TH_CHECK_STR(lb_tokenizer_id_to_piece(tok, 5), "bc");
    TH_CHECK(lb_tokenizer_id_to_piece(tok, 9) == NULL);
    TH_CHECK_INT(lb_tokenizer_token_to_id(tok, "abc"), 6);
    TH_CHECK_INT(lb_tokenizer_token_to_id(tok, "zz"), -1);
    lb_tokenizer_free(tok);
}

static void test_added_tokens(void) {
    lb_tokenizer *tok = NULL;
    const char *added =
        "{\"id\":8,\"content\":\"<X>\",\"single_word\":false,\"lstrip\":true,"
        "\"rstrip\":true,\"normalized\":false,\"special\":true},"
        "{\"id\":9,\"content\":\"ab\",\"single_word\":true,\"lstrip\":false,"
        "\"rstrip\":false,\"normalized\":false,\"special\":false},"
        "{\"id\":10,\"content\":\"<X><X>\",\"single_word\":false,\"lstrip\":false,"
        "\"rstrip\":false,\"normalized\":false,\"special\":true},"
        "{\"id\":11,\"content\":\"ca\",\"single_word\":true,\"lstrip\":false,"
        "\"rstrip\":false,\"normalized\":false,\"special\":false}";
    TH_CHECK_OK(lb_tokenizer_load_hf(write_json("a1.json", tiny_bpe("[\"a b\",\"b c\",\"a bc\"]", added)), &tok));
    if (!tok) return;
    /* "<X>" is already in the model vocab (id 8); "ab" too (4: the model
     * id wins over the file's id, as AddedVocabulary assigns it); "<X><X>"
     * and "ca" get the next ids (9, 10) */
    TH_CHECK_INT(lb_tokenizer_n_vocab(tok), 11);
    TH_CHECK_INT(lb_tokenizer_token_to_id(tok, "ca"), 10);
    /* lstrip/rstrip swallow the spaces around <X> */
    encode_expect(tok, "a <X> b", 0, (int32_t[]){1, 8, 2}, 3);
    /* longest match: <X><X> is one token */
    encode_expect(tok, "a<X><X>b", 0, (int32_t[]){1, 9, 2}, 3);
    /* single_word: "ca" followed by a word character is not matched */
    encode_expect(tok, "ca", 0, (int32_t[]){10}, 1);
    encode_expect(tok, "ca b", 0, (int32_t[]){10, 7, 2}, 3);
    encode_expect(tok, "cab", 0, (int32_t[]){3, 4}, 2);
    encode_expect(tok, "bca", 0, (int32_t[]){5, 1}, 2);
    /* special tokens as plain text: <X> goes through the model (<unk>) */
    encode_expect(tok, "<X>", LB_TOK_PLAIN_SPECIAL, (int32_t[]){0}, 1);
    encode_expect(tok, "<X>", 0, (int32_t[]){8}, 1);
    TH_CHECK(lb_tokenizer_is_special(tok, 8));
    TH_CHECK(!lb_tokenizer_is_special(tok, 4));
    /* skip_special drops the special added token strings */
    char *txt = NULL;
    TH_CHECK_OK(lb_tokenizer_decode(tok, (int32_t[]){1, 8, 2}, 3, true, &txt, NULL));
    TH_CHECK_STR(txt, "a b");
    free(txt);
    lb_tokenizer_free(tok);
}

static lb_tokenizer *load_shared(const char *rel) {
    lb_tokenizer *tok = NULL;
    lb_status st = lb_tokenizer_load_hf(th_shared(rel), &tok);
    if (st != LB_OK) th_skip("shared tokenizer missing");
    return tok;
}

static void test_config_and_pieces(void) {
    lb_tokenizer *ts = load_shared("models/tinystories-656k");
    TH_CHECK_INT(lb_tokenizer_bos(ts), 1);
    TH_CHECK_INT(lb_tokenizer_eos(ts), 2);
    TH_CHECK_STR(lb_tokenizer_bos_text(ts), "<|start_story|>");
    TH_CHECK(lb_tokenizer_add_bos(ts));
    TH_CHECK(lb_tokenizer_chat_template(ts) == NULL);
    /* a normalized added token reports its normalized form, as tokenizers */
    TH_CHECK_STR(lb_tokenizer_id_to_piece(ts, 0), "\xE2\x96\x81<unk>");
    lb_tokenizer_free(ts);

    lb_tokenizer *q = load_shared("tokenizers/qwen3");
    TH_CHECK_INT(lb_tokenizer_bos(q), -1);
    TH_CHECK_INT(lb_tokenizer_eos(q), 151645);
    TH_CHECK_INT(lb_tokenizer_n_vocab(q), 151669);
    TH_CHECK(lb_tokenizer_chat_template(q) &&
             !strncmp(lb_tokenizer_chat_template(q), "{%- if tools %}", 15));
    char buf[64];
    TH_CHECK_INT(lb_tokenizer_token_to_piece(q, 1879, buf, sizeof buf), 6);
    TH_CHECK_STR(buf, " world");
    TH_CHECK_INT(lb_tokenizer_token_to_piece(q, 151644, buf, sizeof buf), 12);
    TH_CHECK_STR(buf, "<|im_start|>");
    TH_CHECK_INT(lb_tokenizer_token_to_piece(q, 999999, buf, sizeof buf), -1);
    /* invalid UTF-8 input is replaced by U+FFFD before tokenizing */
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    TH_CHECK_OK(lb_tokenizer_encode(q, "x\xFFy", 3, false, &a, &na));
    TH_CHECK_OK(lb_tokenizer_encode(q, "x\xEF\xBF\xBDy", 5, false, &b, &nb));
    TH_CHECK(na == nb && na > 0 && !memcmp(a, b, na * sizeof *a));
    free(a);
    free(b);
    lb_tokenizer_free(q);

    lb_tokenizer *l = load_shared("tokenizers/llama3");
    TH_CHECK_INT(lb_tokenizer_bos(l), 128000);
    TH_CHECK_INT(lb_tokenizer_eos(l), 128001);
    TH_CHECK(lb_tokenizer_chat_template(l) != NULL);
    lb_tokenizer_free(l);

    lb_tokenizer *m = load_shared("tokenizers/mistral-7b-v0.1");
    TH_CHECK_INT(lb_tokenizer_token_to_piece(m, 22557, buf, sizeof buf), 6);
    TH_CHECK_STR(buf, " Hello");
    TH_CHECK_INT(lb_tokenizer_token_to_piece(m, 13, buf, sizeof buf), 1);
    TH_CHECK_STR(buf, "\n");
    /* ByteFallback: an invalid byte run gives one U+FFFD per byte, then
     * Strip removes one leading space (checked against tokenizers 0.23) */
    char *txt = NULL;
    TH_CHECK_OK(lb_tokenizer_decode(m, (int32_t[]){28705, 242, 28705}, 3, false, &txt, NULL));
    TH_CHECK_STR(txt, "\xEF\xBF\xBD ");
    free(txt);
    TH_CHECK_OK(lb_tokenizer_decode(m, (int32_t[]){232, 188, 131}, 3, false, &txt, NULL));
    TH_CHECK_STR(txt, "\xE5\xB9\x80"); /* <0xE5><0xB9><0x80> */
    free(txt);
    lb_tokenizer_free(m);

    lb_tokenizer *z = load_shared("tokenizers/mistral-minueza");
    TH_CHECK_INT(lb_tokenizer_eos(z), 32000);
    TH_CHECK_STR(lb_tokenizer_eos_text(z), "<|im_end|>");
    TH_CHECK(!lb_tokenizer_add_bos(z));
    TH_CHECK(lb_tokenizer_chat_template(z) != NULL);
    lb_tokenizer_free(z);
}

/* Long unsplit SentencePiece-style text is merged chunk by chunk at
 * boundaries no vocabulary token spans (tok_build_pairs); the ids must be
 * those of merging the whole text at once. Also checks the per-call word
 * cache of byte-level encoders against cache-free encoding. */
static void check_chunking(const char *tok_rel, const char *text_rel, size_t max) {
    lb_tokenizer *tok = load_shared(tok_rel);
    size_t n = 0;
    char *text = th_read_bin(th_shared(text_rel), &n);
    if (!text) th_skip("corpus missing");
    if (n > max) n = max;
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    TH_CHECK(tok->pairs.n > 0);
    TH_CHECK_OK(lb_tokenizer_encode(tok, text, n, true, &a, &na));
    tok_mmap_free(&tok->pairs); /* no chunking from here on */
    TH_CHECK_OK(lb_tokenizer_encode(tok, text, n, true, &b, &nb));
    TH_CHECK_MSG(na == nb && na > 1000 && !memcmp(a, b, na * sizeof *a),
                 "%s: chunked %zu ids vs whole %zu ids", tok_rel, na, nb);
    free(a);
    free(b);
    free(text);
    lb_tokenizer_free(tok);
}

static void test_chunking_equivalence(void) {
    check_chunking("tokenizers/mistral-7b-v0.1", "corpora/wikitext-2-raw/wiki.test.raw", 300000);
    check_chunking("models/tinystories-656k", "corpora/tinystories/TinyStories-valid-head30k.txt", 1u << 20);
}

static void test_word_cache(void) {
    /* the per-call word cache must not change ids: whole corpus with and
     * without it */
    lb_tokenizer *tok = load_shared("tokenizers/qwen3");
    size_t n = 0;
    char *text = th_read_bin(th_shared("corpora/wikitext-2-raw/wiki.test.raw"), &n);
    if (!text) th_skip("corpus missing");
    if (n > 300000) n = 300000;
    while (n && ((uint8_t)text[n - 1] & 0xC0) == 0x80) n--;
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    TH_CHECK_OK(lb_tokenizer_encode(tok, text, n, false, &a, &na));
    tok->no_word_cache = true;
    TH_CHECK_OK(lb_tokenizer_encode(tok, text, n, false, &b, &nb));
    TH_CHECK(na == nb && na > 10000 && !memcmp(a, b, na * sizeof *a));
    free(a);
    free(b);
    free(text);
    lb_tokenizer_free(tok);
}

/* One tokenizer, several threads encoding and decoding at once (the header
 * promises an immutable tokenizer): every thread must get the ids of a
 * single-threaded run. */
typedef struct mt_job {
    const lb_tokenizer *tok;
    const char *text;
    size_t len;
    const int32_t *want;
    size_t nwant;
    int bad;
} mt_job;

static void *mt_worker(void *arg) {
    mt_job *j = arg;
    for (int r = 0; r < 4; r++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (lb_tokenizer_encode(j->tok, j->text, j->len, true, &ids, &n) != LB_OK ||
            n != j->nwant || memcmp(ids, j->want, n * sizeof *ids))
            j->bad++;
        char *out = NULL;
        size_t on = 0;
        if (lb_tokenizer_decode(j->tok, ids, n, false, &out, &on) != LB_OK) j->bad++;
        free(out);
        free(ids);
    }
    return NULL;
}

static void test_threads(void) {
    lb_tokenizer *tok = load_shared("tokenizers/qwen3");
    size_t n = 0;
    char *text = th_read_bin(th_shared("corpora/wikitext-2-raw/wiki.test.lf.txt"), &n);
    if (!text) th_skip("corpus missing");
    if (n > 60000) n = 60000;
    while (n && ((uint8_t)text[n - 1] & 0xC0) == 0x80) n--;
    int32_t *want = NULL;
    size_t nwant = 0;
    TH_CHECK_OK(lb_tokenizer_encode(tok, text, n, true, &want, &nwant));
    mt_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (mt_job){tok, text, n, want, nwant, 0};
        TH_CHECK(pthread_create(&th[i], NULL, mt_worker, &jobs[i]) == 0);
    }
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        bad += jobs[i].bad;
    }
    TH_CHECK_INT(bad, 0);
    free(want);
    free(text);
    lb_tokenizer_free(tok);
}

static void test_bad_json(void) {
    lb_tokenizer *tok = NULL;
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b0.json", "{not json"), &tok), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "b0.json") != NULL);
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b1.json", "[1,2]"), &tok), LB_ERR_FORMAT);
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b2.json", "{\"added_tokens\":[]}"), &tok),
                   LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "model") != NULL);
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b3.json",
                   "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}"), &tok), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "Unigram") != NULL);
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b4.json",
                   "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"x\"},\"merges\":[]}}"), &tok),
                   LB_ERR_FORMAT);
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b5.json",
                   "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a zz\"]}}"),
                   &tok), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "merges[0]") && strstr(lb_last_error(), "zz"));
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b6.json",
                   "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}"),
                   &tok), LB_ERR_FORMAT); /* merged "ab" missing */
    TH_CHECK(strstr(lb_last_error(), "ab") != NULL);
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b7.json",
                   "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b c\"]}}"),
                   &tok), LB_ERR_FORMAT);
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b8.json",
                   "{\"normalizer\":{\"type\":\"BertNormalizer\"},\"model\":{\"type\":\"BPE\","
                   "\"vocab\":{\"a\":0},\"merges\":[]}}"), &tok), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "BertNormalizer") != NULL);
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b9.json",
                   "{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},"
                   "\"behavior\":\"Isolated\",\"invert\":false},\"model\":{\"type\":\"BPE\","
                   "\"vocab\":{\"a\":0},\"merges\":[]}}"), &tok), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "pre_tokenizer.pattern.Regex") != NULL);
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b10.json",
                   "{\"added_tokens\":{},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},"
                   "\"merges\":[]}}"), &tok), LB_ERR_FORMAT);
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b11.json",
                   "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999999},\"merges\":[]}}"),
                   &tok), LB_ERR_FORMAT);
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b12.json",
                   "{\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":"
                   "[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}}],\"special_tokens\":{}},"
                   "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}"), &tok),
                   LB_ERR_FORMAT);
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b13.json",
                   "{\"decoder\":{\"type\":\"Strip\",\"content\":\"ab\",\"start\":1,\"stop\":0},"
                   "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}"), &tok),
                   LB_ERR_FORMAT);
    /* an id far outside any integer type (found by fuzz_tokenizer_json) */
    TH_CHECK_FAILS(lb_tokenizer_load_hf(write_json("b14.json",
                   "{\"added_tokens\":[{\"id\":4e55,\"content\":\"x\"}],\"model\":{\"type\":"
                   "\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}"), &tok), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "added_tokens[0].id") != NULL);
    /* an empty vocabulary loads; text it cannot represent gives no ids */
    TH_CHECK_OK(lb_tokenizer_load_hf(write_json("b15.json",
                "{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}"), &tok));
    if (tok) {
        encode_expect(tok, "abc", 0, NULL, 0);
        lb_tokenizer_free(tok);
        tok = NULL;
    }
    char missing[1100];
    snprintf(missing, sizeof missing, "%s/nope", th_tmpdir());
    TH_CHECK_FAILS(lb_tokenizer_load_hf(missing, &tok), LB_ERR_NOT_FOUND);
    TH_CHECK(tok == NULL);
    TH_CHECK_FAILS(lb_tokenizer_load_hf(NULL, &tok), LB_ERR_INVALID_ARG);
}

static void test_bad_vocab_desc(void) {
    lb_tokenizer *tok = NULL;
    const char *toks[] = {"<unk>", "<s>", "</s>", "a", "b", "ab"};
    lb_vocab_desc d;
    lb_vocab_desc_init(&d);
    d.model = "bert";
    d.tokens = toks;
    d.n_tokens = 6;
    TH_CHECK_FAILS(lb_tokenizer_from_vocab(&d, &tok), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "bert") != NULL);
    d.model = "gpt2";
    d.pre = "no-such-pre";
    const char *merges[] = {"a b"};
    d.merges = merges;
    d.n_merges = 1;
    TH_CHECK_FAILS(lb_tokenizer_from_vocab(&d, &tok), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "no-such-pre") != NULL);
    d.pre = "gpt-2";
    d.merges = NULL;
    TH_CHECK_FAILS(lb_tokenizer_from_vocab(&d, &tok), LB_ERR_INVALID_ARG);
    d.merges = merges;
    d.bos_id = -5;
    TH_CHECK_FAILS(lb_tokenizer_from_vocab(&d, &tok), LB_ERR_FORMAT);
    d.bos_id = 1;
    TH_CHECK_OK(lb_tokenizer_from_vocab(&d, &tok));
    if (tok) {
        /* "a b" merges to "ab" (id 5) after the byte-level map */
        encode_expect(tok, "ab", 0, (int32_t[]){5}, 1);
        char *txt = NULL;
        TH_CHECK_OK(lb_tokenizer_decode(tok, (int32_t[]){5, 3}, 2, false, &txt, NULL));
        TH_CHECK_STR(txt, "aba");
        free(txt);
        lb_tokenizer_free(tok);
    }
}

/* Components the four real tokenizers do not use, against tokenizers 0.23.1
 * (tests/data/tokenizer_components.json, made by gen_tokenizer_components.py
 * in the reference environment). */
static void test_components_oracle(void) {
    size_t size = 0;
    char *data = th_read_bin("tests/data/tokenizer_components.json", &size);
    TH_CHECK(data != NULL);
    if (!data) return;
    cJSON *root = cJSON_ParseWithLength(data, size);
    free(data);
    TH_CHECK(root != NULL);
    const cJSON *cfg;
    int n_cfg = 0;
    cJSON_ArrayForEach(cfg, cJSON_GetObjectItem(root, "configs")) {
        const char *name = cJSON_GetObjectItem(cfg, "name")->valuestring;
        char *js = cJSON_PrintUnformatted(cJSON_GetObjectItem(cfg, "tokenizer"));
        lb_tokenizer *tok = NULL;
        lb_status st = lb_tokenizer_load_hf_json(js, strlen(js), &tok);
        free(js);
        TH_CHECK_MSG(st == LB_OK, "%s: %s", name, lb_last_error());
        if (st != LB_OK) continue;
        n_cfg++;
        int n = 0, ok = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(cfg, "cases")) {
            const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
            bool add = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_special_tokens"));
            const cJSON *want = cJSON_GetObjectItem(c, "ids");
            int32_t *ids = NULL;
            char **toks = NULL;
            size_t m = 0;
            n++;
            st = lb_tokenizer_encode_ex(tok, text, strlen(text), add ? LB_TOK_ADD_SPECIAL : 0,
                                        &ids, &toks, &m);
            bool good = st == LB_OK && ids_equal(ids, m, want) &&
                        tokens_equal(toks, m, cJSON_GetObjectItem(c, "tokens"));
            size_t nref = (size_t)cJSON_GetArraySize(want);
            int32_t *ref = malloc((nref + 1) * sizeof *ref);
            for (size_t i = 0; ref && i < nref; i++)
                ref[i] = (int32_t)cJSON_GetArrayItem(want, (int)i)->valuedouble;
            for (int skip = 0; skip < 2 && ref; skip++) {
                char *out = NULL;
                const char *exp = cJSON_GetObjectItem(c, skip ? "decoded_skip_special" : "decoded")
                                      ->valuestring;
                if (lb_tokenizer_decode(tok, ref, nref, skip, &out, NULL) != LB_OK ||
                    strcmp(out, exp) != 0) {
                    good = false;
                    fprintf(stderr, "  %s: decode(skip=%d) '%s' -> '%s', want '%s'\n", name, skip,
                            text, out ? out : "(error)", exp);
                }
                free(out);
            }
            if (!good && ids) {
                fprintf(stderr, "  %s: '%s' (add=%d)\n", name, text, add);
                print_ids("got ", ids, m);
            }
            ok += good;
            free(ref);
            free(ids);
            free(toks);
        }
        TH_CHECK_MSG(ok == n, "%s: %d/%d cases agree", name, ok, n);
        lb_tokenizer_free(tok);
    }
    TH_CHECK_INT(n_cfg, 17);
    /* extra texts (unusual whitespace, rare letters) for the real tokenizers */
    const cJSON *rt;
    int n_real = 0;
    cJSON_ArrayForEach(rt, cJSON_GetObjectItem(root, "real_extra")) {
        lb_tokenizer *tok = NULL;
        TH_CHECK_OK(lb_tokenizer_load_hf(th_shared(cJSON_GetObjectItem(rt, "path")->valuestring), &tok));
        if (!tok) continue;
        int n = 0, ok = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(rt, "cases")) {
            const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
            int32_t *ids = NULL;
            size_t m = 0;
            n++;
            if (lb_tokenizer_encode(tok, text, strlen(text), false, &ids, &m) == LB_OK &&
                ids_equal(ids, m, cJSON_GetObjectItem(c, "ids")))
                ok++;
            else
                fprintf(stderr, "  %s: extra text '%s' differs\n", rt->string, text);
            free(ids);
        }
        TH_CHECK_MSG(ok == n && n == 30, "%s: %d/%d extra texts agree", rt->string, ok, n);
        n_real++;
        lb_tokenizer_free(tok);
    }
    TH_CHECK_INT(n_real, 4);
    cJSON_Delete(root);
}

/* A Sequence of Replace normalizers whose pattern matches the empty string
 * grows the text geometrically (a libFuzzer timeout, kept as
 * fuzz/corpus/fuzz_tokenizer_json/regress-replace-growth.json): encoding is
 * refused with LB_ERR_RANGE naming the normalizer, instead of running for
 * minutes; one such step on its own still works. The bound (16 n + 4 KiB)
 * holds for the whole pipeline, not per step: Replace "a" -> 10 "a"s grows
 * each step's own input 10x, so 2 steps on a 20-byte text pass (2000 bytes)
 * and 3 are refused (20000 > 16 * 20 + 4096). */
static void test_replace_growth(void) {
    static const char pre[] =
        "{\"version\": \"1.0\", \"added_tokens\": [], \"normalizer\": {\"type\": \"Sequence\", "
        "\"normalizers\": [";
    static const char step[] =
        "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"\\\\s*\"}, \"content\": "
        "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}";
    static const char post[] =
        "]}, \"pre_tokenizer\": null, \"post_processor\": null, \"decoder\": null, "
        "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"vocab\": {\"<unk>\": 0, "
        "\"x\": 1, \"a\": 2}, \"merges\": []}}";
    static const char step10[] =
        "{\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": "
        "\"aaaaaaaaaa\"}";
    for (int steps = 2; steps <= 3; steps++) {
        char js[2048];
        size_t k = (size_t)snprintf(js, sizeof js, "%s", pre);
        for (int i = 0; i < steps; i++)
            k += (size_t)snprintf(js + k, sizeof js - k, "%s%s", i ? ", " : "", step10);
        snprintf(js + k, sizeof js - k, "%s", post);
        lb_tokenizer *tok = NULL;
        TH_CHECK_OK(lb_tokenizer_load_hf_json(js, strlen(js), &tok));
        if (!tok) continue;
        int32_t *ids = NULL;
        char **toks = NULL;
        size_t n = 0;
        lb_status st = lb_tokenizer_encode_ex(tok, "aaaaaaaaaaaaaaaaaaaa", 20, 0, &ids, &toks, &n);
        if (steps == 2) {
            TH_CHECK_OK(st);
            TH_CHECK_INT(n, 2000);
            free(ids);
            free(toks);
        } else {
            TH_CHECK_INT(st, LB_ERR_RANGE);
        }
        lb_tokenizer_free(tok);
    }
    for (int steps = 1; steps <= 4; steps += 3) {
        char js[2048];
        size_t k = (size_t)snprintf(js, sizeof js, "%s", pre);
        for (int i = 0; i < steps; i++)
            k += (size_t)snprintf(js + k, sizeof js - k, "%s%s", i ? ", " : "", step);
        snprintf(js + k, sizeof js - k, "%s", post);
        lb_tokenizer *tok = NULL;
        TH_CHECK_OK(lb_tokenizer_load_hf_json(js, strlen(js), &tok));
        if (!tok) continue;
        static const char text[] = "aaaaaaaaaaaaaaaaaaaa";
        int32_t *ids = NULL;
        char **toks = NULL;
        size_t n = 0;
        lb_status st = lb_tokenizer_encode_ex(tok, text, sizeof text - 1, 0, &ids, &toks, &n);
        if (steps == 1) {
            TH_CHECK_OK(st);
            TH_CHECK(n > 20 * 90); /* content inserted at every position */
        } else {
            TH_CHECK_INT(st, LB_ERR_RANGE);
            TH_CHECK(strstr(lb_last_error(), "normalizer would grow") != NULL);
        }
        if (st == LB_OK) {
            free(ids);
            free(toks);
        }
        lb_tokenizer_free(tok);
    }
}

int main(void) {
    TH_RUN(test_bytelevel_map);
    TH_RUN(test_utf8_lossy);
    TH_RUN(test_merge_ranks);
    TH_RUN(test_added_tokens);
    TH_RUN(test_config_and_pieces);
    TH_RUN(test_chunking_equivalence);
    TH_RUN(test_word_cache);
    TH_RUN(test_threads);
    TH_RUN(test_bad_json);
    TH_RUN(test_bad_vocab_desc);
    TH_RUN(test_replace_growth);
    TH_RUN(test_components_oracle);
    TH_RUN(test_golden_qwen3);
    TH_RUN(test_golden_llama3);
    TH_RUN(test_golden_mistral);
    TH_RUN(test_golden_tinystories);
    return th_report();
}
