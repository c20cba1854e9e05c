/* libFuzzer harness: the exporter's tokenizer metadata (src/export/ex_vocab.c,
 * convert_hf_to_gguf.py's set_vocab + SpecialVocab logic) on hostile JSON.
 * Input: byte 0 picks the architecture (llama / qwen2) and whether a
 * tokenizer.model "exists", byte 1 a config vocab_size (0..255 * 8); the
 * rest is up to three documents separated by NUL bytes: tokenizer.json,
 * tokenizer_config.json, config.json (missing or invalid ones count as
 * absent files). A vocabulary that loads is written into a GGUF writer
 * (metadata only) to exercise the arrays. Seeds: fuzz/corpus/fuzz_export_vocab/. */
#include "export/export_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const char *arch = data[0] & 1 ? "qwen2" : "llama";
    const bool spm = data[0] & 2;
    const int64_t vocab = (int64_t)data[1] * 8;
    const char *p = (const char *)data + 2;
    size_t rest = size - 2;
    cJSON *doc[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3 && rest; i++) {
        const char *z = memchr(p, '\0', rest);
        size_t n = z ? (size_t)(z - p) : rest;
        doc[i] = cJSON_ParseWithLength(p, n);
        p += n + (z ? 1 : 0);
        rest -= n + (z ? 1 : 0);
    }
    ex_vocab v;
    if (ex_vocab_from_json(doc[0], doc[1], doc[2], NULL, "fuzz", spm, arch, vocab, &v) == LB_OK) {
        lb_gguf_writer *w = NULL;
        if (lb_gguf_writer_create(&w) == LB_OK) {
            (void)ex_vocab_write(&v, w);
            lb_gguf_writer_free(w);
        }
        ex_vocab_free(&v);
    }
    for (int i = 0; i < 3; i++) cJSON_Delete(doc[i]);
    return 0;
}
