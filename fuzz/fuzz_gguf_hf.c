/*
 * libFuzzer harness for the GGUF -> Hugging Face conversion of metadata
 * (lowbit/export_hf.h): the input is a GGUF image (lb_gguf_open_memory);
 * its config (lb_model_config_from_gguf), llama3 rope scaling from
 * rope_freqs (ex_hf_rope_from_freqs), tensor names (ex_hf_name) and the
 * tokenizer.json / tokenizer_config.json built from tokenizer.ggml.*
 * (ex_hf_tokenizer_json: SentencePiece merges rebuilt from the scores,
 * byte-level BPE merges split) must succeed or fail with a message — never
 * crash, leak or read outside the image. Seeds: fuzz/corpus/fuzz_gguf_hf
 * (vocabulary-only GGUF files written by lowbit export --vocab-only).
 */
#include "export/ex_hf_internal.h"
#include "lowbit/gguf.h"
#include "model/model_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lb_gguf *g = NULL;
    if (lb_gguf_open_memory(data, size, "fuzz", &g) != LB_OK) return 0;
    lb_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    lb_status s = lb_model_config_from_gguf(g, &cfg);
    if (s == LB_OK) s = ex_hf_rope_from_freqs(g, &cfg);
    if (s == LB_OK) {
        for (int64_t i = 0; i < lb_gguf_n_tensors(g); i++) {
            char name[200];
            int qk, layer;
            if (ex_hf_name(lb_gguf_tensor_at(g, i)->name, cfg.n_layers, name, sizeof name, &qk,
                           &layer) != LB_OK &&
                lb_last_error()[0] == '\0')
                abort();
        }
        cJSON *tj = NULL, *tc = NULL;
        s = ex_hf_tokenizer_json(g, &cfg, &tj, &tc);
        if (s == LB_OK) {
            char *txt = tj ? cJSON_PrintUnformatted(tj) : NULL;
            free(txt);
        } else if (lb_last_error()[0] == '\0' || tj || tc)
            abort();
        cJSON_Delete(tj);
        cJSON_Delete(tc);
        cJSON *c = ex_hf_config_json(&cfg, 0);
        cJSON_Delete(c);
    } else if (lb_last_error()[0] == '\0')
        abort();
    lb_model_config_clear(&cfg);
    lb_gguf_close(g);
    return 0;
}
