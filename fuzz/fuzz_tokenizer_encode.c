/* libFuzzer harness: encode arbitrary bytes (invalid UTF-8, NUL, special
 * token text) with real tokenizers from ../shared (TinyStories' SentencePiece
 * style BPE with byte_fallback, Qwen3's byte-level BPE with regex
 * pre-tokenization and added tokens, and the TinyStories vocabulary as a
 * llama.cpp "llama" (SPM) GGUF vocabulary), then decode the ids. The first
 * byte picks the tokenizer and the flags. Without ../shared it does
 * nothing. */
#include "lowbit/tokenizer.h"
#include "tokenizer/tok_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static lb_tokenizer *toks[3];

/* The TinyStories vocabulary as a GGUF "llama" vocabulary (scores -1000 and
 * control types for ids 0-2, as llama.cpp's converter writes it). */
static lb_tokenizer *spm_from(const lb_tokenizer *hf) {
    int32_t n = lb_tokenizer_n_vocab(hf);
    const char **t = calloc((size_t)n, sizeof *t);
    float *sc = calloc((size_t)n, sizeof *sc);
    int32_t *ty = calloc((size_t)n, sizeof *ty);
    lb_tokenizer *out = NULL;
    if (t && sc && ty) {
        for (int32_t i = 0; i < n; i++) {
            t[i] = hf->model_piece[i] ? hf->model_piece[i] : "";
            sc[i] = -1000.0f;
            ty[i] = i < 3 ? LB_TOKEN_TYPE_CONTROL : LB_TOKEN_TYPE_NORMAL;
        }
        lb_vocab_desc d;
        lb_vocab_desc_init(&d);
        d.model = "llama";
        d.n_tokens = (size_t)n;
        d.tokens = t;
        d.scores = sc;
        d.token_types = ty;
        if (lb_tokenizer_from_vocab(&d, &out) != LB_OK) out = NULL;
    }
    free(t);
    free(sc);
    free(ty);
    return out;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *root = getenv("LB_SHARED");
    if (!root) root = "../shared";
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tinystories-656k", root);
    if (lb_tokenizer_load_hf(path, &toks[0]) != LB_OK) toks[0] = NULL;
    snprintf(path, sizeof path, "%s/tokenizers/qwen3", root);
    if (lb_tokenizer_load_hf(path, &toks[1]) != LB_OK) toks[1] = NULL;
    if (toks[0]) toks[2] = spm_from(toks[0]);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    lb_tokenizer *tok = toks[(data[0] & 3) % 3];
    if (!tok) return 0;
    unsigned flags = (data[0] >> 2) & 3;
    int32_t *ids = NULL;
    size_t n = 0;
    if (lb_tokenizer_encode_ex(tok, (const char *)data + 1, size - 1, flags, &ids, NULL, &n) !=
        LB_OK)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= lb_tokenizer_n_vocab(tok)) abort();
    char *out = NULL;
    size_t len = 0;
    if (lb_tokenizer_decode(tok, ids, n, (flags & 1) != 0, &out, &len) != LB_OK) abort();
    free(out);
    free(ids);
    return 0;
}
