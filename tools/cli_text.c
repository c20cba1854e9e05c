/* Text -> token ids for the CLI (see cli_text.h): the model's tokenizer
 * (tokenizer.json of a checkpoint directory, or a .gguf vocabulary). */
#include "cli_text.h"

#include "lowbit/file.h"
#include "lowbit/tokenizer.h"

#include <stdlib.h>
#include <string.h>

lb_status cli_tokenizer_open(const char *model, void **tok) {
    *tok = NULL;
    lb_tokenizer *t = NULL;
    /* HF directory, tokenizer.json or GGUF (recognised by content) */
    lb_status st = lb_tokenizer_load(model, &t);
    if (st == LB_OK) *tok = t;
    return st;
}

lb_status cli_tokenize_cb(void *tok, const char *text, size_t len,
                          int32_t **ids, size_t *n) {
    return lb_tokenizer_encode(tok, text, len, true, ids, n);
}

void cli_tokenizer_close(void *tok) { lb_tokenizer_free(tok); }

lb_status cli_tokenize_file(const char *model, const char *file,
                            bool strip_one_newline, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    char *text = NULL;
    size_t len = 0;
    lb_status st = lb_read_file(file, (size_t)1 << 34, &text, &len);
    if (st != LB_OK) return st;
    if (strip_one_newline && len && text[len - 1] == '\n') len--;
    void *tok = NULL;
    st = cli_tokenizer_open(model, &tok);
    if (st == LB_OK) st = cli_tokenize_cb(tok, text, len, ids, n);
    cli_tokenizer_close(tok);
    free(text);
    return st;
}

lb_status cli_tokenizer_bos(const char *model, int32_t *bos) {
    *bos = -1;
    void *tok = NULL;
    lb_status st = cli_tokenizer_open(model, &tok);
    if (st != LB_OK) return st;
    int32_t *ids = NULL;
    size_t n = 0;
    /* what the post-processor puts around a text: BOS first or nothing */
    st = lb_tokenizer_encode(tok, "a", 1, true, &ids, &n);
    int32_t b = lb_tokenizer_bos(tok);
    if (st == LB_OK && n > 0 && b >= 0 && ids[0] == b) *bos = b;
    free(ids);
    cli_tokenizer_close(tok);
    return st;
}
