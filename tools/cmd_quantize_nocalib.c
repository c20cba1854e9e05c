/* lowbit quantize --method fp8: calibration-free formats (lowbit/fp8.h).
 * Reached from cmd_quantize through a two-line dispatch, so that the
 * calibration pipeline's option parser stays untouched. */
#include "cli.h"

#include "lowbit/bnb.h"
#include "lowbit/fp8.h"

#include <stdlib.h>
#include <string.h>

bool cmd_quantize_nocalib_method(const char *m) {
    return !strcmp(m, "fp8") || !strcmp(m, "nf4") || !strcmp(m, "fp4") || !strcmp(m, "int8");
}

static int cmd_quantize_bnb(int argc, char **argv);

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
            "  --fp8-scale R           mse (default): each group's scale the one of 27\n"
            "                          candidates below amax/MAX (and two above) with the\n"
            "                          smallest squared weight error; amax: amax/MAX, as\n"
            "                          transformers / llm-compressor (byte-identical)\n"
            "  -o, --output OUT_DIR    new or empty; written atomically\n"
            "global: --quiet, --json\n");
}

int cli_fp8_option(const char *cmd, int argc, char **argv, int *i, lb_fp8_qconfig *q,
                   int *rule) {
    const char *a = argv[*i], *v;
    if (strcmp(a, "--fp8-block") && strcmp(a, "--fp8-format") && strcmp(a, "--fp8-scale"))
        return 0;
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    if (!strcmp(a, "--fp8-block")) {
        lb_fp8_format f = q->fmt;
        if (!strcmp(v, "channel")) lb_fp8_qconfig_default(q, true);
        else if (!strcmp(v, "tensor")) {
            lb_fp8_qconfig_default(q, true);
            q->layout = LB_FP8_SCALE_TENSOR;
        } else {
            long b;
            if (!cli_parse_int(cmd, a, v, 1, 65536, &b)) return -1;
            lb_fp8_qconfig_default(q, false);
            q->block_n = q->block_k = (int)b;
        }
        q->fmt = f;
    } else if (!strcmp(a, "--fp8-format")) {
        if (!strcmp(v, "e4m3")) q->fmt = LB_FP8_E4M3;
        else if (!strcmp(v, "e5m2")) q->fmt = LB_FP8_E5M2;
        else {
            cli_usage_error(cmd, "--fp8-format: e4m3 or e5m2, got '%s'", v);
            return -1;
        }
    } else {
        if (!strcmp(v, "mse")) *rule = LB_FP8_RULE_MSE;
        else if (!strcmp(v, "amax")) *rule = LB_FP8_RULE_AMAX;
        else {
            cli_usage_error(cmd, "--fp8-scale: mse or amax, got '%s'", v);
            return -1;
        }
    }
    return 1;
}

int cmd_quantize_nocalib(int argc, char **argv) {
    const char *cmd = "quantize";
    const char *model = NULL, *out = NULL, *method = NULL;
    lb_fp8_quantize_opts o;
    memset(&o, 0, sizeof o);
    lb_fp8_qconfig_default(&o.q, false);
    for (int i = 1; i + 1 < argc; i++) /* bitsandbytes methods */
        if (!strcmp(argv[i], "--method") && strcmp(argv[i + 1], "fp8"))
            return cmd_quantize_bnb(argc, argv);
    int rule = (int)o.rule, r8;
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
        } else if ((r8 = cli_fp8_option(cmd, argc, argv, &i, &o.q, &rule)) != 0) {
            if (r8 < 0) return 2;
            o.rule = (lb_fp8_scale_rule)rule;
        } else if (a[0] == '-' && a[1]) {
            if (!strncmp(a, "--calib", 7))
                return cli_usage_error(cmd, "%s: --method fp8 needs no calibration; GPTQ onto "
                                       "the FP8 grid is --method gptq --checkpoint-format fp8", a);
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
        /* the calibrated quantize's keys (cmd_quantize.c) */
        printf("{\"out_dir\": ");
        cli_json_string(stdout, out);
        char *f = lb_fp8_settings_json(&o.q, o.rule);
        printf(", \"method\": \"fp8\", \"bits\": 8, \"group_size\": null, "
               "\"checkpoint_format\": \"fp8\", \"modules_quantized\": %d, \"fp8\": %s}\n",
               n, f ? f : "null");
        free(f);
    } else if (!g_cli.quiet) {
        fprintf(stderr, "lowbit quantize: wrote %s: %d linears in FP8 %s (%s scales%s%s), "
                        "quant_method %s\n", out, n, o.q.fmt == LB_FP8_E5M2 ? "E5M2" : "E4M3", lay,
                o.q.layout == LB_FP8_SCALE_BLOCK ? ", block " : "",
                o.q.layout == LB_FP8_SCALE_BLOCK ? (o.q.block_n == 128 ? "128" : "custom") : "",
                o.q.method);
    }
    return 0;
}

/* lowbit quantize --method nf4|fp4|int8 (lowbit/bnb.h) */
static void usage_bnb(FILE *fp) {
    fprintf(fp,
            "usage: lowbit quantize MODEL_DIR -o OUT_DIR --method nf4|fp4|int8 [options]\n"
            "\n"
            "bitsandbytes weight-only quantization, no calibration, written as transformers\n"
            "saves a bitsandbytes model (quantization_config quant_method bitsandbytes):\n"
            "  nf4, fp4   4-bit codes, one absmax per block (weight, weight.absmax,\n"
            "             weight.quant_map, weight.quant_state.bitsandbytes__nf4|fp4)\n"
            "  int8       LLM.int8() weights: int8 codes + SCB (absmax per output row)\n"
            "\n"
            "  --bnb-block N           4-bit block size (default 64; even, 16..4096)\n"
            "  --double-quant          4-bit: quantize the absmax again (8-bit dynamic map,\n"
            "                          blocks of 256, mean offset: bnb_4bit_use_double_quant)\n"
            "  -o, --output OUT_DIR    new or empty; written atomically\n"
            "global: --quiet, --json\n");
}

static int cmd_quantize_bnb(int argc, char **argv) {
    const char *cmd = "quantize";
    const char *model = NULL, *out = NULL, *method = NULL;
    lb_bnb_quantize_opts o;
    memset(&o, 0, sizeof o);
    o.q.blocksize = 64;
    bool block_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_bnb(stdout);
            return 0;
        }
#define VAL() do { if (!(v = cli_value(cmd, argc, argv, &i))) return 2; } while (0)
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            VAL();
            out = v;
        } else if (!strcmp(a, "--method")) {
            VAL();
            method = v;
        } else if (!strcmp(a, "--bnb-block")) {
            VAL();
            long b;
            if (!cli_parse_int(cmd, a, v, 16, 4096, &b)) return 2;
            if (b % 2) return cli_usage_error(cmd, "--bnb-block: even, got %ld", b);
            o.q.blocksize = (int)b;
            block_given = true;
        } else if (!strcmp(a, "--double-quant")) {
            o.q.double_quant = true;
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
    o.q.kind = !strcmp(method, "nf4") ? LB_BNB_NF4 : !strcmp(method, "fp4") ? LB_BNB_FP4
                                                                           : LB_BNB_INT8;
    if (o.q.kind == LB_BNB_INT8 && (o.q.double_quant || block_given))
        return cli_usage_error(cmd, "%s applies to nf4/fp4 only (LLM.int8() has one scale "
                               "per row)", o.q.double_quant ? "--double-quant" : "--bnb-block");
    if (!model) return cli_usage_error(cmd, "missing MODEL_DIR");
    if (!out) return cli_usage_error(cmd, "missing -o OUT_DIR");
    cli_progress prog;
    o.progress = cli_progress_make(&prog);
    int n = 0;
    lb_status s = lb_bnb_quantize_checkpoint(model, out, &o, &n);
    cli_progress_done(&prog);
    if (s != LB_OK) return cli_fail(cmd, s);
    if (g_cli.json) {
        /* the calibrated quantize's keys (cmd_quantize.c); LLM.int8() has
         * one scale per row, no blocks */
        printf("{\"out_dir\": ");
        cli_json_string(stdout, out);
        printf(", \"method\": \"%s\", \"bits\": %d, \"group_size\": null, "
               "\"checkpoint_format\": \"bitsandbytes\", \"modules_quantized\": %d, "
               "\"bnb\": {\"blocksize\": ",
               method, o.q.kind == LB_BNB_INT8 ? 8 : 4, n);
        if (o.q.kind == LB_BNB_INT8) printf("null");
        else printf("%d", o.q.blocksize);
        printf(", \"double_quant\": %s, \"quant_method\": \"bitsandbytes\"}}\n",
               o.q.double_quant ? "true" : "false");
    } else if (!g_cli.quiet) {
        fprintf(stderr, "lowbit quantize: wrote %s: %d linears in bitsandbytes %s%s\n", out, n,
                method, o.q.double_quant ? " (double-quantized absmax)" : "");
    }
    return 0;
}
