/* Text -> token ids for the CLI (see cli_text.h).
 * Until the tokenizer branch is merged this build has no tokenizer: the
 * functions fail with LB_ERR_UNSUPPORTED and the commands take ids. */
#include "cli_text.h"

lb_status cli_tokenizer_open(const char *model, void **tok) {
    *tok = NULL;
    return lb_set_error(LB_ERR_UNSUPPORTED,
                        "%s: this build has no tokenizer; give token ids "
                        "(--ids / --calib-ids)",
                        model);
}

lb_status cli_tokenize_cb(void *tok, const char *text, size_t len,
                          int32_t **ids, size_t *n) {
    (void)tok;
    (void)text;
    (void)len;
    *ids = NULL;
    *n = 0;
    return lb_set_error(LB_ERR_UNSUPPORTED, "no tokenizer in this build");
}

void cli_tokenizer_close(void *tok) { (void)tok; }

lb_status cli_tokenize_file(const char *model, const char *file,
                            bool strip_one_newline, int32_t **ids, size_t *n) {
    (void)file;
    (void)strip_one_newline;
    *ids = NULL;
    *n = 0;
    void *tok;
    return cli_tokenizer_open(model, &tok);
}
