/*
 * bench_tokenizer — load, encode and decode speed of the real tokenizers in
 * ../shared (or $LB_SHARED), with baselines measured in the same run:
 *  - load vs cJSON_Parse of the same tokenizer.json (the floor any JSON
 *    loader pays);
 *  - encode vs the pre-tokenization alone (regex split + byte-level map for
 *    byte-level tokenizers, the normalizer for SentencePiece-style ones),
 *    i.e. what BPE merging, added-token matching and the rest cost on top;
 *  - the word cache and chunked merging off (their speed-up).
 * Text: corpora/wikitext-2-raw/wiki.test.lf.txt (1.3 MB), and a 104-byte
 * chat prompt for per-call latency.
 *
 *   bench_tokenizer [--quick]
 */
#include "lowbit/tokenizer.h"
#include "tokenizer/tok_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long s = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(s > 0 ? (size_t)s + 1 : 1);
    *n = b && s > 0 ? fread(b, 1, (size_t)s, f) : 0;
    if (b) b[*n] = '\0';
    fclose(f);
    return b;
}

/* Pre-tokenization only: normalizer + pre-tokenizer over the text. */
static double pretok_only(const lb_tokenizer *tok, const char *text, size_t n) {
    double t0 = lb_time_s();
    tok_buf norm = {0};
    tok_pieces pcs = {0};
    const char *s = text;
    size_t len = n;
    if (tok->normalizer && tok_norm_apply(tok->normalizer, text, n, &norm) == LB_OK) {
        s = norm.p;
        len = norm.n;
    }
    if (tok_buf_put(&pcs.text, s, len) && tok_pieces_push(&pcs, 0, len, true) && tok->pre)
        (void)tok_pre_apply(tok->pre, &pcs);
    double dt = lb_time_s() - t0;
    tok_buf_free(&norm);
    tok_pieces_free(&pcs);
    return dt;
}

static double encode_time(const lb_tokenizer *tok, const char *text, size_t n, size_t *ntok) {
    int32_t *ids = NULL;
    double t0 = lb_time_s();
    lb_status st = lb_tokenizer_encode(tok, text, n, false, &ids, ntok);
    double dt = lb_time_s() - t0;
    free(ids);
    return st == LB_OK ? dt : -1;
}

int main(int argc, char **argv) {
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    const char *root = getenv("LB_SHARED");
    if (!root) root = "../shared";
    const char *dirs[] = {"tokenizers/qwen3", "tokenizers/llama3", "tokenizers/mistral-7b-v0.1",
                          "models/tinystories-656k"};
    char path[1024];
    snprintf(path, sizeof path, "%s/corpora/wikitext-2-raw/wiki.test.lf.txt", root);
    size_t tn = 0;
    char *text = read_all(path, &tn);
    if (!text) {
        fprintf(stderr, "bench_tokenizer: %s missing\n", path);
        return 1;
    }
    if (quick && tn > 200000) tn = 200000;
    while (tn && ((uint8_t)text[tn - 1] & 0xC0) == 0x80) tn--;
    static const char prompt[] = "<|im_start|>user\nWhat is the capital of France? Answer "
                                 "briefly, please.<|im_end|>\n<|im_start|>assistant\n";
    printf("text: %.2f MB of WikiText-2; prompt: %zu bytes\n", tn / 1e6, sizeof prompt - 1);
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        snprintf(path, sizeof path, "%s/%s/tokenizer.json", root, dirs[d]);
        size_t jn = 0;
        char *js = read_all(path, &jn);
        if (!js) continue;
        double t0 = lb_time_s();
        cJSON *j = cJSON_ParseWithLength(js, jn);
        double t_json = lb_time_s() - t0;
        cJSON_Delete(j);
        free(js);
        lb_tokenizer *tok = NULL;
        t0 = lb_time_s();
        if (lb_tokenizer_load_hf(path, &tok) != LB_OK) {
            fprintf(stderr, "%s: %s\n", dirs[d], lb_last_error());
            continue;
        }
        double t_load = lb_time_s() - t0;
        size_t ntok = 0;
        double t_enc = encode_time(tok, text, tn, &ntok);
        double t_pre = pretok_only(tok, text, tn);
        int32_t *ids = NULL;
        size_t n_ids = 0;
        lb_tokenizer_encode(tok, text, tn, false, &ids, &n_ids);
        char *out = NULL;
        t0 = lb_time_s();
        lb_tokenizer_decode(tok, ids, n_ids, false, &out, NULL);
        double t_dec = lb_time_s() - t0;
        free(out);
        free(ids);
        int reps = quick ? 200 : 2000;
        t0 = lb_time_s();
        for (int r = 0; r < reps; r++) {
            int32_t *p = NULL;
            size_t np = 0;
            lb_tokenizer_encode(tok, prompt, sizeof prompt - 1, true, &p, &np);
            free(p);
        }
        double t_prompt = (lb_time_s() - t0) / reps;
        /* the accelerations off */
        tok->no_word_cache = true;
        tok_mmap saved = tok->pairs;
        tok->pairs = (tok_mmap){0};
        size_t ntok2 = 0;
        double t_plain = encode_time(tok, text, tn, &ntok2);
        tok->pairs = saved;
        printf("%-27s load %.3f s (%.1fx cJSON parse %.3f s) | encode %6.2f MB/s, %zu tokens, "
               "%.1fx pre-tokenization alone, %.1fx faster than without cache/chunking%s | "
               "decode %6.1f MB/s | prompt %.1f us\n",
               dirs[d], t_load, t_load / t_json, t_json, tn / 1e6 / t_enc, ntok, t_enc / t_pre,
               t_plain / t_enc, ntok2 == ntok ? "" : " (MISMATCH)", tn / 1e6 / t_dec,
               t_prompt * 1e6);
        lb_tokenizer_free(tok);
    }
    free(text);
    return 0;
}
