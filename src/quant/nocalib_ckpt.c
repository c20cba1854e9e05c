/*
 * nocalib_ckpt.c — the directory part of the calibration-free checkpoint
 * writers (fp8_ckpt.c, bnb_ckpt.c): config.json with the method's
 * quantization_config, the tensors, and the tokenizer files, written into
 * a temp directory beside OUT and renamed into place (nothing is left on
 * failure).
 */
#include "quant/nocalib_ckpt.h"

#include "lowbit/file.h"
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

static lb_status copy_file(const char *src, const char *dst) {
    char *data = NULL;
    size_t n = 0;
    LB_TRY(lb_read_file(src, (size_t)1 << 30, &data, &n));
    lb_atomic_file af;
    memset(&af, 0, sizeof af);
    lb_status s = lb_atomic_open(dst, &af);
    if (s == LB_OK) s = lb_atomic_write(&af, data, n);
    if (s == LB_OK) s = lb_atomic_commit(&af);
    else lb_atomic_abort(&af);
    free(data);
    return s;
}

lb_status qz_nocalib_write_dir(const char *model_dir, const char *out_dir, lb_st_writer *w,
                               cJSON *qc, const char *report) {
    char *cj = lb_path_join(model_dir, "config.json"), *js = NULL, *tmp = NULL;
    cJSON *cfgj = NULL;
    size_t jn = 0;
    lb_status s = cj ? lb_read_file(cj, (size_t)16 << 20, &js, &jn)
                     : lb_set_error(LB_ERR_NOMEM, "out of memory");
    if (s == LB_OK) {
        cfgj = cJSON_ParseWithLength(js, jn);
        if (!cJSON_IsObject(cfgj) || !qc) {
            s = lb_set_error(LB_ERR_FORMAT, "%s: not a JSON object", cj);
        } else {
            cJSON_DeleteItemFromObjectCaseSensitive(cfgj, "quantization_config");
            cJSON_AddItemToObject(cfgj, "quantization_config", qc);
            qc = NULL; /* owned by cfgj now */
        }
    }
    cJSON_Delete(qc);
    if (s == LB_OK) s = lb_tmpdir_make(out_dir, &tmp);
    if (s == LB_OK) {
        char *mp = lb_path_join(tmp, "model.safetensors");
        s = mp ? lb_st_writer_write_file(w, mp) : lb_set_error(LB_ERR_NOMEM, "out of memory");
        free(mp);
    }
    if (s == LB_OK) {
        char *txt = cJSON_Print(cfgj);
        if (!txt) {
            s = lb_set_error(LB_ERR_NOMEM, "out of memory (config.json)");
        } else {
            const size_t n = strlen(txt);
            txt[n] = '\n'; /* the terminator becomes the final newline */
            s = lb_write_file_in(tmp, "config.json", txt, n + 1);
        }
        free(txt);
    }
    if (s == LB_OK && report) {
        const size_t n = strlen(report);
        char *txt = malloc(n + 1);
        if (!txt) {
            s = lb_set_error(LB_ERR_NOMEM, "out of memory (quantize_report.json)");
        } else {
            memcpy(txt, report, n);
            txt[n] = '\n';
            s = lb_write_file_in(tmp, "quantize_report.json", txt, n + 1);
        }
        free(txt);
    }
    static const char *files[] = {"tokenizer.json", "tokenizer_config.json",
                                  "special_tokens_map.json", "generation_config.json",
                                  "tokenizer.model", "chat_template.jinja"};
    for (size_t i = 0; i < sizeof files / sizeof files[0] && s == LB_OK; i++) {
        char *a = lb_path_join(model_dir, files[i]), *b = lb_path_join(tmp, files[i]);
        if (!a || !b) s = lb_set_error(LB_ERR_NOMEM, "out of memory");
        else if (lb_is_file(a)) s = copy_file(a, b);
        free(a);
        free(b);
    }
    if (s == LB_OK) s = lb_tmpdir_commit(tmp, out_dir);
    if (s != LB_OK && tmp) lb_tmpdir_remove(tmp);
    free(tmp);
    cJSON_Delete(cfgj);
    free(js);
    free(cj);
    return s;
}
