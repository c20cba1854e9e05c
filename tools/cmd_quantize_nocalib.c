/* lowbit quantize --method fp8: calibration-free formats (lowbit/fp8.h).
 * Reached from cmd_quantize through a two-line dispatch, so that the
 * calibration pipeline's option parser stays untouched. */
#include "cli.h"

#include "lowbit/fp8.h"

#include <stdlib.h>
#include <string.h>

bool cmd_quantize_nocalib_method(const char *m) { return !strcmp(m, "fp8"); }

static void usage(FILE *fp) {
    fprintf(fp,
            "usage: lowbit quantize MODEL_DIR -o OUT_DIR --method fp8 [options]\n"
            "\n"
            "FP8 weight-only quantization, no calibration: every decoder-layer linear\n"
            "becomes FP8 codes + scales; embeddings, lm_head, norms stay as stored.\n"
            "\n"
            "  --fp8-block B           128 (default): block-wise scales [ceil(out/B),\n"
            "                          ceil(in/B)] as weight_scale_inv, quantization_config\n"
            "                          {quant_method fp8, fmt, weight_block_size [B, B]}\n"
            "                          (DeepSeek-V3 / Qwen3-FP8 / transformers); any B in\n"
            "                          1..65536; channel: one scale per output row as\n"
            "                          weight_scale, compressed-tensors float-quantized\n"
            "                          (llm-compressor); tensor: one scale per weight\n"
            "  --fp8-format F          e4m3 (default) | e5m2\n"
            "  -o, --output OUT_DIR    new or empty; written atomically\n"
            "global: --quiet, --json\n");
}

int cmd_quantize_nocalib(int argc, char **argv) {
    const char *cmd = "quantize";
    const char *model = NULL, *out = NULL, *method = NULL;
    lb_fp8_quantize_opts o;
    memset(&o, 0, sizeof o);
    lb_fp8_qconfig_default(&o.q, false);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
#define VAL() do { if (!(v = cli_value(cmd, argc, argv, &i))) return 2; } while (0)
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            VAL();
            out = v;
        } else if (!strcmp(a, "--method")) {
            VAL();
            method = v;
        } else if (!strcmp(a, "--fp8-block")) {
            VAL();
            lb_fp8_format f = o.q.fmt;
            if (!strcmp(v, "channel")) lb_fp8_qconfig_default(&o.q, true);
            else if (!strcmp(v, "tensor")) {
                lb_fp8_qconfig_default(&o.q, true);
                o.q.layout = LB_FP8_SCALE_TENSOR;
            } else {
                long b;
                if (!cli_parse_int(cmd, a, v, 1, 65536, &b)) return 2;
                lb_fp8_qconfig_default(&o.q, false);
                o.q.block_n = o.q.block_k = (int)b;
            }
            o.q.fmt = f;
        } else if (!strcmp(a, "--fp8-format")) {
            VAL();
            if (!strcmp(v, "e4m3")) o.q.fmt = LB_FP8_E4M3;
            else if (!strcmp(v, "e5m2")) o.q.fmt = LB_FP8_E5M2;
            else return cli_usage_error(cmd, "--fp8-format: e4m3 or e5m2, got '%s'", v);
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error(cmd, "unknown option %s (with --method %s)", a,
                                   method ? method : "?");
        } else if (!model) {
            model = a;
        } else {
            return cli_usage_error(cmd, "unexpected argument '%s'", a);
        }
#undef VAL
    }
    if (!model) return cli_usage_error(cmd, "missing MODEL_DIR");
    if (!out) return cli_usage_error(cmd, "missing -o OUT_DIR");
    cli_progress prog;
    o.progress = cli_progress_make(&prog);
    int n = 0;
    lb_status s = lb_fp8_quantize_checkpoint(model, out, &o, &n);
    cli_progress_done(&prog);
    if (s != LB_OK) return cli_fail(cmd, s);
    const char *lay = o.q.layout == LB_FP8_SCALE_BLOCK     ? "block"
                      : o.q.layout == LB_FP8_SCALE_CHANNEL ? "channel"
                                                           : "tensor";
    if (g_cli.json) {
        printf("{\"output\": ");
        cli_json_string(stdout, out);
        printf(", \"method\": \"fp8\", \"fmt\": \"%s\", \"scales\": \"%s\", \"block\": %d, "
               "\"quant_method\": \"%s\", \"linears\": %d}\n",
               o.q.fmt == LB_FP8_E5M2 ? "e5m2" : "e4m3", lay, o.q.block_n, o.q.method, n);
    } else if (!g_cli.quiet) {
        fprintf(stderr, "lowbit quantize: wrote %s: %d linears in FP8 %s (%s scales%s%s), "
                        "quant_method %s\n", out, n, o.q.fmt == LB_FP8_E5M2 ? "E5M2" : "E4M3", lay,
                o.q.layout == LB_FP8_SCALE_BLOCK ? ", block " : "",
                o.q.layout == LB_FP8_SCALE_BLOCK ? (o.q.block_n == 128 ? "128" : "custom") : "",
                o.q.method);
    }
    return 0;
}
