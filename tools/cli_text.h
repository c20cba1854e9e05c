/*
 * cli_text.h — text -> token ids for the CLI commands that read text
 * (ppl, quantize --calib) with the model's own tokenizer.
 */
#ifndef LB_CLI_TEXT_H
#define LB_CLI_TEXT_H

#include "lowbit/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Tokenize `file` (read as bytes) with the tokenizer of `model` (a
 * checkpoint directory with tokenizer.json, or a .gguf file), special
 * tokens added (BOS). strip_one_newline: remove one trailing '\n' first,
 * as llama-perplexity does. *ids is malloc'd. */
lb_status cli_tokenize_file(const char *model, const char *file,
                            bool strip_one_newline, int32_t **ids, size_t *n);

/* Does the model's tokenizer add BOS (llama.cpp's add_bos: llama-perplexity
 * replaces each chunk's first token only then)? *bos gets the BOS id, or -1
 * when the tokenizer adds none. Fails when there is no tokenizer. */
lb_status cli_tokenizer_bos(const char *model, int32_t *bos);

/* A tokenizer handle usable as an lb_tokenize_fn (lowbit/quantize.h). */
lb_status cli_tokenizer_open(const char *model, void **tok);
lb_status cli_tokenize_cb(void *tok, const char *text, size_t len,
                          int32_t **ids, size_t *n);
void cli_tokenizer_close(void *tok);

#endif
