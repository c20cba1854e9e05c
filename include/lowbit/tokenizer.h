/*
 * lowbit/tokenizer.h — text <-> token ids.
 *
 * Sources: Hugging Face `tokenizers` 0.23 tokenizer.json (BPE models with
 * ByteLevel or Metaspace/SentencePiece-style pre-tokenization, normalizers,
 * added tokens, TemplateProcessing post-processor, decoders) plus
 * tokenizer_config.json; and (GGUF work) llama.cpp's `tokenizer.ggml.*`
 * vocabularies. Behaviour matches those references id for id (tests:
 * ../shared/reference/tokenize).
 */
#ifndef LOWBIT_TOKENIZER_H
#define LOWBIT_TOKENIZER_H

#include "lowbit/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lb_tokenizer lb_tokenizer;

/* Load from a model directory (tokenizer.json + optional
 * tokenizer_config.json / special_tokens_map.json) or from a path to a
 * tokenizer.json file. Errors: LB_ERR_IO/LB_ERR_NOT_FOUND (missing file),
 * LB_ERR_FORMAT (invalid JSON or structure, naming the field),
 * LB_ERR_UNSUPPORTED (a model/normalizer/pre-tokenizer type lowbit lacks,
 * naming it). Free with lb_tokenizer_free. */
lb_status lb_tokenizer_load_hf(const char *path, lb_tokenizer **out);
void lb_tokenizer_free(lb_tokenizer *tok);

/* Encode UTF-8 text (len bytes; may contain NUL). add_special: apply the
 * post-processor (e.g. prepend BOS), as tokenizers' add_special_tokens.
 * Special/added tokens that appear in the text are always matched.
 * *ids_out is malloc'd (free with free()); *n_out its length. */
lb_status lb_tokenizer_encode(const lb_tokenizer *tok, const char *text,
                              size_t len, bool add_special, int32_t **ids_out,
                              size_t *n_out);

/* Decode ids to UTF-8 text (malloc'd, NUL-terminated; *len_out optional),
 * as tokenizers' decode(ids, skip_special_tokens). Invalid ids give
 * LB_ERR_RANGE. */
lb_status lb_tokenizer_decode(const lb_tokenizer *tok, const int32_t *ids,
                              size_t n, bool skip_special, char **text_out,
                              size_t *len_out);

/* The vocabulary string of one id (as tokenizers' id_to_token, e.g. "Ġthe",
 * "▁the", "<0x0A>"); NULL for an invalid id. Owned by tok. */
const char *lb_tokenizer_id_to_piece(const lb_tokenizer *tok, int32_t id);

/* Vocabulary size (including added tokens): valid ids are 0..n-1. */
int32_t lb_tokenizer_n_vocab(const lb_tokenizer *tok);
/* Special ids; -1 when the tokenizer has none. */
int32_t lb_tokenizer_bos(const lb_tokenizer *tok);
int32_t lb_tokenizer_eos(const lb_tokenizer *tok);
/* True if `id` is a special (control) token. */
bool lb_tokenizer_is_special(const lb_tokenizer *tok, int32_t id);

/* chat_template string from tokenizer_config.json (or GGUF), NULL if none.
 * Owned by tok. bos/eos token strings likewise (NULL if none). */
const char *lb_tokenizer_chat_template(const lb_tokenizer *tok);
const char *lb_tokenizer_bos_text(const lb_tokenizer *tok);
const char *lb_tokenizer_eos_text(const lb_tokenizer *tok);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_TOKENIZER_H */
