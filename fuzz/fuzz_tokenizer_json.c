/* libFuzzer harness: tokenizer.json loading (lb_tokenizer_load_hf_json) and,
 * when the input loads, a short encode/decode round through the pipeline it
 * describes. Seeds: fuzz/corpus/fuzz_tokenizer_json/ (small hand-written
 * tokenizer.json files). */
#include "lowbit/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lb_tokenizer *tok = NULL;
    if (lb_tokenizer_load_hf_json((const char *)data, size, &tok) != LB_OK) return 0;
    static const char text[] = "Hello <s> world\n  abc\xC3\xA9 123 \xF0\x9F\x98\x80<|x|>";
    int32_t *ids = NULL;
    char **toks = NULL;
    size_t n = 0;
    for (unsigned flags = 0; flags < 4; flags++) {
        if (lb_tokenizer_encode_ex(tok, text, sizeof text - 1, flags, &ids, &toks, &n) == LB_OK) {
            char *out = NULL;
            if (lb_tokenizer_decode(tok, ids, n, flags & 1, &out, NULL) == LB_OK) free(out);
            free(ids);
            free(toks);
        }
    }
    int32_t nv = lb_tokenizer_n_vocab(tok);
    char buf[16];
    for (int32_t id = 0; id < nv && id < 64; id++) {
        (void)lb_tokenizer_id_to_piece(tok, id);
        (void)lb_tokenizer_token_to_piece(tok, id, buf, sizeof buf);
    }
    int32_t some[4] = {0, nv - 1, nv / 2, nv + 5};
    char *out = NULL;
    if (lb_tokenizer_decode(tok, some, 3, false, &out, NULL) == LB_OK) free(out);
    if (lb_tokenizer_decode(tok, some, 4, true, &out, NULL) == LB_OK) free(out);
    lb_tokenizer_free(tok);
    return 0;
}
