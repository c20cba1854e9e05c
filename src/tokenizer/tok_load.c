/*
 * lb_tokenizer_load: one entry point for every place a tokenizer can live
 * (a Hugging Face model directory, a tokenizer.json file, a GGUF file with
 * tokenizer.ggml.* metadata — a full model or a vocabulary-only file). The
 * format is recognised by content (the GGUF magic), not by the name.
 */
#include "lowbit/file.h"
#include "lowbit/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

lb_status lb_tokenizer_load(const char *path, lb_tokenizer **out) {
    if (!path || !out)
        return lb_set_error(LB_ERR_INVALID_ARG, "lb_tokenizer_load: NULL argument");
    *out = NULL;
    if (lb_is_dir(path)) return lb_tokenizer_load_hf(path, out);
    lb_status cs = lb_check_regular_file(path);
    if (cs != LB_OK) return cs;
    FILE *f = fopen(path, "rb");
    if (!f) return lb_set_error(LB_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char magic[4];
    bool gguf = fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    fclose(f);
    return gguf ? lb_tokenizer_load_gguf(path, out) : lb_tokenizer_load_hf(path, out);
}
