/*
 * ex_hf_gptq.c — a GGUF file to a GPTQ checkpoint (lowbit/export_hf.h).
 */
#include "export/ex_hf_internal.h"
#include "lowbit/export_hf.h"
#include "core/internal.h"

lb_status lb_export_gguf_to_gptq(const char *gguf_path, const char *out_dir,
                                 const lb_export_hf_opts *opts, lb_export_hf_stats *stats) {
    (void)gguf_path;
    (void)out_dir;
    (void)opts;
    (void)stats;
    return lb_set_error(LB_ERR_UNSUPPORTED, "export --format gptq: not implemented yet");
}
