/*
 * nocalib_ckpt.h — shared by the calibration-free checkpoint writers
 * (fp8_ckpt.c, bnb_ckpt.c). Not installed.
 */
#ifndef LB_NOCALIB_CKPT_H
#define LB_NOCALIB_CKPT_H

#include "lowbit/safetensors.h"

#include <cjson/cJSON.h>

/* Write OUT_DIR from model_dir: model.safetensors from w (its producers run
 * now), config.json = model_dir's with "quantization_config" replaced by qc
 * (ownership taken, also on failure), and the tokenizer / generation files
 * model_dir has, and quantize_report.json = report when not NULL (text
 * without its final newline, borrowed). Everything goes into
 * OUT_DIR.tmp-XXXXXX and is renamed into place at the end; on failure
 * nothing is left. OUT_DIR must have passed lb_outdir_check. Errors name
 * the file at fault. */
lb_status qz_nocalib_write_dir(const char *model_dir, const char *out_dir, lb_st_writer *w,
                               cJSON *qc, const char *report);

#endif
