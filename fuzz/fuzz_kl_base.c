/*
 * fuzz_kl_base.c — libFuzzer harness for llama-perplexity
 * --kl-divergence-base files (src/eval/kld.c lb_kl_base_parse, the format in
 * lowbit/kld.h). Checks: no crash/leak/hang; a refused file sets a message;
 * an accepted one has a size that matches its header exactly, and every row
 * can be read and fed to the KL statistics (with a fixed logits row for
 * vocabularies up to 4096) without reading out of bounds.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lowbit/kld.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20)) return 0;
    /* a copy of exactly `size` bytes so ASan sees over-reads */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    lb_kl_base b;
    lb_status st = lb_kl_base_parse(buf, size, "fuzz.bin", &b);
    if (st != LB_OK) {
        if (!lb_last_error()[0]) abort();
        free(buf);
        return 0;
    }
    size_t want = 20 + 4 * (size_t)b.n_ctx * (size_t)b.n_chunk +
                  (size_t)b.n_chunk * (size_t)b.rows_per_chunk *
                      (size_t)b.nv * 2;
    if (want != size || b.rows_per_chunk != b.n_ctx - 1 - b.n_ctx / 2) abort();
    int64_t rows = (int64_t)b.n_chunk * b.rows_per_chunk;
    if (b.n_vocab <= 4096 && rows <= 4096) {
        float *logits = malloc((size_t)b.n_vocab * sizeof(float));
        uint16_t *enc = malloc(((size_t)b.nv) * sizeof(uint16_t));
        lb_kl_stats ks;
        memset(&ks, 0, sizeof ks);
        if (logits && enc) {
            for (int32_t i = 0; i < b.n_vocab; i++)
                logits[i] = (float)((i * 37) % 11) - 5.0f;
            for (int64_t r = 0; r < rows; r++) {
                float scale, minlp;
                const uint8_t *codes;
                lb_kl_base_row(&b, r, &scale, &minlp, &codes);
                int32_t tok = (int32_t)(r % b.n_vocab);
                if (lb_kl_add(&ks, logits, b.n_vocab, scale, minlp, codes,
                              tok) != LB_OK)
                    abort();
            }
            if (lb_kl_encode_row(logits, b.n_vocab, 0, enc) < 0) abort();
            lb_kl_summary sum;
            if (rows >= 2 && lb_kl_summarize(&ks, &sum) != LB_OK) abort();
        }
        lb_kl_stats_free(&ks);
        free(logits);
        free(enc);
    }
    lb_kl_base_close(&b);
    free(buf);
    return 0;
}
