/* libFuzzer harness: a tokenizer from a GGUF image's tokenizer.ggml.*
 * metadata (lb_gguf_open_memory + lb_tokenizer_from_gguf), then an
 * encode/decode round with and without special-token parsing. Seeds:
 * fuzz/corpus/fuzz_tokenizer_gguf/ (tiny "llama" and "gpt2" vocabularies). */
#include "lowbit/gguf.h"
#include "lowbit/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lb_gguf *g = NULL;
    if (lb_gguf_open_memory(data, size, "fuzz.gguf", &g) != LB_OK) return 0;
    lb_tokenizer *tok = NULL;
    lb_status st = lb_tokenizer_from_gguf(g, &tok);
    lb_gguf_close(g); /* the tokenizer must not point into the image */
    if (st != LB_OK) return 0;
    static const char text[] = "ab a\n\xC3\xA9<s><|x|> abc\xFF<|endoftext|>  c";
    for (unsigned flags = 0; flags < 4; flags++) {
        int32_t *ids = NULL;
        char **toks = NULL;
        size_t n = 0;
        if (lb_tokenizer_encode_ex(tok, text, sizeof text - 1, flags, &ids, &toks, &n) != LB_OK)
            continue;
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= lb_tokenizer_n_vocab(tok)) abort();
        char *out = NULL;
        if (lb_tokenizer_decode(tok, ids, n, flags & 1, &out, NULL) == LB_OK) free(out);
        free(ids);
        free(toks);
    }
    char buf[8];
    for (int32_t id = 0; id < lb_tokenizer_n_vocab(tok) && id < 32; id++)
        (void)lb_tokenizer_token_to_piece(tok, id, buf, sizeof buf);
    lb_tokenizer_free(tok);
    return 0;
}
