/* lowbit quantize — RTN / GPTQ quantization of a Hugging Face checkpoint
 * into a GPTQ checkpoint (AutoGPTQ layout), with calibration on the CPU.
 * Thin wrapper over lb_quantize_model (lowbit/quantize.h). */
#include "cli.h"

struct lb_calib;
lb_status cli_eora_write(const char *dense, const char *qdir, const struct lb_calib *cal,
                         int rank, int threads);
#include "cli_text.h"

#include "lowbit/config.h"
#include "lowbit/file.h"
#include "lowbit/quantize.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void usage(FILE *fp) {
    fprintf(fp,
        "usage: lowbit quantize MODEL_DIR -o OUT_DIR [options]\n"
        "\n"
        "method and grid:\n"
        "  --method rtn|gptq|awq|awq-gptq  (default gptq; awq: AutoAWQ's "
        "scale + clip\n"
        "                          search, asym unless --sym; awq-gptq: AWQ "
        "scales, then GPTQ)\n"
        "  --no-clip               AWQ without the clip search\n"
        "  --moe-coverage all|routed  MoE experts' calibration tokens: all "
        "(every\n"
        "                          expert sees every token; default) or the "
        "routed ones\n"
        "  --moe-min-tokens N      routed: RTN for experts with fewer tokens "
        "(32;\n"
        "                          AWQ: no down scale / clip search for them)\n"
        "  --method gptaq          GPTAQ: GPTQ plus the asymmetric term from "
        "the native\n"
        "                          minus replayed inputs (plain GPTQ "
        "checkpoint)\n"
        "  --gptaq-alpha A         weight of GPTAQ's term (default 0.25)\n"
        "  --qep                   QEP weight correction before GPTQ or RTN\n"
        "  --qep-alpha A           QEP's correction factor (default 0.5)\n"
        "  --rotate hadamard|none  fold the norms, rotate the residual "
        "stream (QuaRot R1)\n"
        "  --rotate hadamard-r4    R1 + an online Hadamard on down_proj's "
        "input (R4)\n"
        "  --rotate-seed S         random signs of the rotation (default 0)\n"
        "  --method fp8 / nf4|fp4|int8  calibration-free (FP8, bitsandbytes):\n"
        "                          see lowbit quantize --method fp8 -h / --method nf4 -h\n"
        "  --bits 2|3|4|8          (default 4)\n"
        "  --group-size N          -1 (per row), 32, 64, 128 ... (default "
        "128)\n"
        "  --sym / --asym          grid (default sym)\n"
        "  --desc-act              act-order (GPTQ)\n"
        "  --static-groups         group parameters fixed up front (GPTQ)\n"
        "  --damp-percent X        (default 0.01; raised by 0.0025 on a "
        "Cholesky failure)\n"
        "  --mse                   search a shrunk grid range (norm 2.4)\n"
        "  --no-true-sequential    one Hessian pass per layer instead of "
        "q,k,v/o/gate,up/down\n"
        "  --lm-head               quantize lm_head too (unties embeddings)\n"
        "  --modules RULE          REGEX or REGEX=SPEC, first match wins; "
        "SPEC: skip or\n"
        "                          ':'-separated 2|3|4|8, gN, g-1, sym, "
        "asym, act, noact\n"
        "                          (e.g. 'mlp\\.down_proj=8'); repeatable; "
        "@FILE reads\n"
        "                          one rule per line (# comments)\n"
        "  --profile vllm-w4a8     sym 4-bit, MSE scale search, lm_head "
        "quantized,\n"
        "                          BF16 embedding, quantization_report.json "
        "(SNR)\n"
        "calibration (GPTQ):\n"
        "  --calib FILE            text or .jsonl (\"text\" field) "
        "files; repeatable\n"
        "  --calib-ids FILE.i32    pre-tokenized int32 [nsamples, seqlen] "
        "(needs --seqlen)\n"
        "  --nsamples N            sequences (default 128)\n"
        "  --seqlen N              tokens per sequence (default min(2048, "
        "max positions))\n"
        "  --seed S                window sampling seed (default 0)\n"
        "  --act-f16               keep calibration activations in f16\n"
        "  --act-spill DIR         keep the calibration activations (and the\n"
        "                          calibration cache) in a temporary file in DIR,\n"
        "                          one sequence resident at a time (disk space =\n"
        "                          their size; same output bytes)\n"
        "  --calib-dtype f32|bf16  calibration forwards and Hessian products in f32\n"
        "                          (default, AutoGPTQ's numerics) or BF16 x BF16\n"
        "                          (AVX512_BF16, ~2x faster forwards)\n"
        "  --calib-cache auto|off|MIB  memory for keeping each layer's attention\n"
        "                          outputs and MLP activations between its passes\n"
        "                          instead of recomputing them (default auto: up\n"
        "                          to a quarter of the RAM; same output bytes)\n"
        "  --eora-rank R           also fit a rank-R EoRA adapter to the result,\n"
        "                          written to OUT_DIR-eora-rR (docs/lora.md)\n"
        "  --hessian-f64           accumulate Hessians in double\n"
        "output:\n"
        "  -o, --output OUT_DIR    written atomically (OUT_DIR.tmp-* until "
        "complete)\n"
        "  --checkpoint-format F   gptq (v1, default) or gptq_v2; awq (the "
        "AutoAWQ GEMM\n"
        "                          layout: default for 4-bit --method awq*);\n"
        "                          fp8: GPTQ onto the FP8 grid (--method gptq),\n"
        "                          written as --method fp8 writes (its --fp8-block,\n"
        "                          --fp8-format, --fp8-scale; no --bits/--group-size;\n"
        "                          one pass into a new or empty OUT_DIR: no --force,\n"
        "                          --resume, --max-shard-size, --modules, --lm-head,\n"
        "                          --qep, --rotate, --mse, --static-groups, --eora-rank)\n"
        "  --max-shard-size SIZE   e.g. 4G (default), 500M; 0 = one file\n"
        "  --force                 replace a non-empty OUT_DIR\n"
        "  --resume                continue an interrupted run with the "
        "same settings\n"
        "  --report                write OUT_DIR/quantize_report.json (also "
        "with --json;\n"
        "                          not --method fp8/nf4/fp4/int8, which have no\n"
        "                          calibration to report)\n"
        "  -t, --threads N         threads (default: all CPUs)\n"
        "\n"
        "--json prints a summary object; --quiet hides progress.\n");
}

static bool parse_size(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return false;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1e3; end++; break;
    case 'M': mul = 1e6; end++; break;
    case 'G': mul = 1e9; end++; break;
    case 'T': mul = 1e12; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end || v * mul > 1.8e19) return false;
    *out = (uint64_t)(v * mul);
    return true;
}

typedef struct strlist {
    char **v;
    int n, cap;
} strlist;

static bool sl_push(strlist *l, const char *s) {
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 8;
        char **nv = realloc(l->v, (size_t)nc * sizeof *nv);
        if (!nv) return false;
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n] = strdup(s);
    return l->v[l->n++] != NULL;
}

static void sl_free(strlist *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
}

/* "@FILE": one rule per line, blank lines and '#' comments skipped. */
static lb_status read_rules_file(const char *path, strlist *rules) {
    char *txt = NULL;
    size_t n = 0;
    lb_status st = lb_read_file(path, (size_t)1 << 20, &txt, &n);
    if (st != LB_OK) return st;
    for (char *save = NULL, *line = strtok_r(txt, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        while (isspace((unsigned char)*line)) line++;
        size_t k = strlen(line);
        while (k && isspace((unsigned char)line[k - 1])) line[--k] = '\0';
        if (!*line || *line == '#') continue;
        if (!sl_push(rules, line)) {
            free(txt);
            return lb_set_error(LB_ERR_NOMEM, "out of memory");
        }
    }
    free(txt);
    return LB_OK;
}

int cmd_quantize(int argc, char **argv) {
    /* calibration-free methods (FP8, bitsandbytes): their own command file */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--method") && cmd_quantize_nocalib_method(argv[i + 1]))
            return cmd_quantize_nocalib(argc, argv);
    const char *cmd = "quantize";
    const char *model = NULL, *out = NULL, *calib_ids = NULL;
    strlist calib = {0}, rules = {0};
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    long nsamples = 128, seqlen = 0, threads = 0, eora_rank = 0;
    unsigned long long seed = 0;
    bool write_report = false;
    bool sym_given = false, gptaq_alpha_given = false, qep_alpha_given = false,
         rotate_seed_given = false, bits_given = false, gs_given = false,
         shard_given = false;
    /* --checkpoint-format fp8: GPTQ onto the FP8 grid */
    bool fp8_out = false, fp8_opt = false;
    lb_fp8_qconfig fq;
    lb_fp8_qconfig_default(&fq, false);
    int frule = LB_FP8_RULE_MSE, r8;
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        long iv;
        double dv;
#define VALUE()                                                                \
    do {                                                                       \
        if (!(v = cli_value(cmd, argc, argv, &i))) goto out;                   \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            rc = 0;
            goto out;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            VALUE();
            out = v;
        } else if (!strcmp(a, "--method")) {
            VALUE();
            if (!strcmp(v, "rtn"))
                p.method = LB_QUANT_RTN;
            else if (!strcmp(v, "gptq"))
                p.method = LB_QUANT_GPTQ;
            else if (!strcmp(v, "awq"))
                p.method = LB_QUANT_AWQ;
            else if (!strcmp(v, "awq-gptq"))
                p.method = LB_QUANT_AWQ_GPTQ;
            else if (!strcmp(v, "gptaq"))
                p.method = LB_QUANT_GPTAQ;
            else {
                cli_usage_error(cmd, "--method: rtn, gptq, gptaq, awq or "
                                "awq-gptq, got '%s'", v);
                goto out;
            }
        } else if (!strcmp(a, "--bits")) {
            VALUE();
            if (!cli_parse_int(cmd, a, v, 2, 8, &iv)) goto out;
            if (iv != 2 && iv != 3 && iv != 4 && iv != 8) {
                cli_usage_error(cmd, "--bits: 2, 3, 4 or 8, got %ld", iv);
                goto out;
            }
            p.bits = (int)iv;
            bits_given = true;
        } else if (!strcmp(a, "--group-size")) {
            VALUE();
            if (!cli_parse_int(cmd, a, v, -1, 1 << 24, &iv)) goto out;
            if (iv == 0) {
                cli_usage_error(cmd, "--group-size: -1 or >= 1");
                goto out;
            }
            p.group_size = (int)iv;
            gs_given = true;
        } else if (!strcmp(a, "--sym")) {
            p.sym = true;
            sym_given = true;
        } else if (!strcmp(a, "--asym")) {
            p.sym = false;
            sym_given = true;
        } else if (!strcmp(a, "--no-clip")) {
            p.awq_no_clip = true;
        } else if (!strcmp(a, "--moe-coverage")) {
            VALUE();
            if (!strcmp(v, "all"))
                p.moe_coverage = LB_MOE_COVERAGE_ALL;
            else if (!strcmp(v, "routed"))
                p.moe_coverage = LB_MOE_COVERAGE_ROUTED;
            else {
                cli_usage_error(cmd, "--moe-coverage: all or routed");
                goto out;
            }
        } else if (!strcmp(a, "--moe-min-tokens")) {
            VALUE();
            if (!cli_parse_int(cmd, a, v, 1, 1 << 30, &iv)) goto out;
            p.moe_min_tokens = iv;
        } else if (!strcmp(a, "--gptaq-alpha")) {
            VALUE();
            if (!cli_parse_float(cmd, a, v, -16.0, 16.0, &dv)) goto out;
            p.gptaq_alpha = dv;
            gptaq_alpha_given = true;
        } else if (!strcmp(a, "--rotate")) {
            VALUE();
            if (!strcmp(v, "hadamard"))
                p.rotate = LB_ROTATE_HADAMARD;
            else if (!strcmp(v, "hadamard-r4"))
                p.rotate = LB_ROTATE_HADAMARD_R4;
            else if (!strcmp(v, "none"))
                p.rotate = LB_ROTATE_NONE;
            else {
                cli_usage_error(cmd, "--rotate: unknown rotation kind '%s' "
                                "(hadamard, hadamard-r4 or none)", v);
                goto out;
            }
        } else if (!strcmp(a, "--rotate-seed")) {
            VALUE();
            char *end = NULL;
            errno = 0;
            unsigned long long sv = strtoull(v, &end, 0);
            if (!*v || *v == '-' || !end || *end || errno) {
                cli_usage_error(cmd, "--rotate-seed: '%s' is not an unsigned "
                                "64-bit integer", v);
                goto out;
            }
            p.rotate_seed = (uint64_t)sv;
            rotate_seed_given = true;
        } else if (!strcmp(a, "--qep")) {
            p.qep = true;
        } else if (!strcmp(a, "--qep-alpha")) {
            VALUE();
            if (!cli_parse_float(cmd, a, v, -16.0, 16.0, &dv)) goto out;
            p.qep_alpha = dv;
            qep_alpha_given = true;
        } else if (!strcmp(a, "--desc-act")) {
            p.desc_act = true;
        } else if (!strcmp(a, "--static-groups")) {
            p.static_groups = true;
        } else if (!strcmp(a, "--damp-percent")) {
            VALUE();
            if (!cli_parse_float(cmd, a, v, 1e-9, 0.999999, &dv)) goto out;
            p.damp_percent = dv;
        } else if (!strcmp(a, "--mse")) {
            p.mse = true;
        } else if (!strcmp(a, "--no-true-sequential")) {
            p.true_sequential = false;
        } else if (!strcmp(a, "--lm-head")) {
            p.lm_head = true;
        } else if (!strcmp(a, "--modules")) {
            VALUE();
            lb_status st = v[0] == '@' ? read_rules_file(v + 1, &rules)
                                       : (sl_push(&rules, v) ? LB_OK
                                                             : LB_ERR_NOMEM);
            if (st != LB_OK) {
                rc = cli_fail(cmd, st);
                goto out;
            }
        } else if (!strcmp(a, "--profile")) {
            VALUE();
            if (strcmp(v, "vllm-w4a8")) {
                cli_usage_error(cmd, "--profile: only vllm-w4a8, got '%s'", v);
                goto out;
            }
            p.profile = LB_QUANT_PROFILE_VLLM_W4A8;
        } else if (!strcmp(a, "--calib")) {
            VALUE();
            if (!sl_push(&calib, v)) goto out;
        } else if (!strcmp(a, "--calib-ids")) {
            VALUE();
            calib_ids = v;
        } else if (!strcmp(a, "--nsamples")) {
            VALUE();
            if (!cli_parse_int(cmd, a, v, 1, 1 << 24, &nsamples)) goto out;
        } else if (!strcmp(a, "--seqlen")) {
            VALUE();
            if (!cli_parse_int(cmd, a, v, 1, 1 << 24, &seqlen)) goto out;
        } else if (!strcmp(a, "--seed")) {
            VALUE();
            char *end;
            errno = 0;
            seed = strtoull(v, &end, 10);
            if (errno || end == v || *end) {
                cli_usage_error(cmd, "--seed: expected an unsigned integer");
                goto out;
            }
        } else if (!strcmp(a, "--eora-rank")) {
            VALUE();
            if (!cli_parse_int(cmd, a, v, 1, 4096, &eora_rank)) goto out;
        } else if (!strcmp(a, "--act-f16")) {
            p.act_f16 = true;
        } else if (!strcmp(a, "--act-spill")) {
            VALUE();
            p.act_spill_dir = v;
        } else if (!strcmp(a, "--calib-dtype")) {
            VALUE();
            if (!strcmp(v, "f32"))
                p.calib_bf16 = false;
            else if (!strcmp(v, "bf16"))
                p.calib_bf16 = true;
            else {
                cli_usage_error(cmd, "--calib-dtype: f32 or bf16");
                goto out;
            }
        } else if (!strcmp(a, "--calib-cache")) {
            VALUE();
            long mib = 0;
            if (!strcmp(v, "auto"))
                p.calib_cache_mib = -1;
            else if (!strcmp(v, "off"))
                p.calib_cache_mib = 0;
            else if (cli_parse_int(cmd, a, v, 1, 1L << 30, &mib))
                p.calib_cache_mib = mib;
            else
                goto out;
        } else if (!strcmp(a, "--hessian-f64")) {
            p.hessian_f64 = true;
        } else if (!strcmp(a, "--checkpoint-format")) {
            VALUE();
            if (!strcmp(v, "gptq"))
                p.format = LB_GPTQ_FORMAT_V1;
            else if (!strcmp(v, "gptq_v2"))
                p.format = LB_GPTQ_FORMAT_V2;
            else if (!strcmp(v, "awq"))
                p.format = LB_GPTQ_FORMAT_AWQ;
            else if (!strcmp(v, "fp8"))
                fp8_out = true;
            else {
                cli_usage_error(cmd, "--checkpoint-format: gptq, gptq_v2, "
                                "awq or fp8, got '%s'", v);
                goto out;
            }
        } else if (!strcmp(a, "--max-shard-size")) {
            VALUE();
            shard_given = true;
            if (!parse_size(v, &p.max_shard_bytes)) {
                cli_usage_error(cmd, "--max-shard-size: a size like 4G or "
                                "500M, got '%s'", v);
                goto out;
            }
        } else if (!strcmp(a, "--force")) {
            p.force = true;
        } else if (!strcmp(a, "--resume")) {
            p.resume = true;
        } else if (!strcmp(a, "--report")) {
            write_report = true;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VALUE();
            if (!cli_parse_int(cmd, a, v, 1, 1024, &threads)) goto out;
        } else if ((r8 = cli_fp8_option(cmd, argc, argv, &i, &fq, &frule)) != 0) {
            if (r8 < 0) goto out;
            fp8_opt = true;
        } else if (a[0] == '-' && a[1]) {
            cli_usage_error(cmd, "unknown option '%s'", a);
            goto out;
        } else if (!model) {
            model = a;
        } else {
            cli_usage_error(cmd, "unexpected argument '%s'", a);
            goto out;
        }
#undef VALUE
    }
    if (!model || !out) {
        cli_usage_error(cmd, "need MODEL_DIR and -o OUT_DIR");
        goto out;
    }
    if (!lb_is_dir(model)) {
        fprintf(stderr, "lowbit quantize: %s: not a directory (quantize reads a "
                "Hugging Face checkpoint directory: config.json + "
                "*.safetensors)\n", model);
        rc = 1;
        goto out;
    }
    if (p.profile == LB_QUANT_PROFILE_VLLM_W4A8 && (p.bits != 4 || !p.sym)) {
        cli_usage_error(cmd, "--profile vllm-w4a8 is symmetric 4-bit only");
        goto out;
    }
    const bool awq = p.method == LB_QUANT_AWQ || p.method == LB_QUANT_AWQ_GPTQ;
    if (awq && !sym_given) p.sym = false; /* AutoAWQ's zero_point default */
    if (p.awq_no_clip && p.method != LB_QUANT_AWQ) {
        cli_usage_error(cmd, "--no-clip is an option of --method awq");
        goto out;
    }
    if (gptaq_alpha_given && p.method != LB_QUANT_GPTAQ) {
        cli_usage_error(cmd, "--gptaq-alpha is an option of --method gptaq");
        goto out;
    }
    if (rotate_seed_given && p.rotate == LB_ROTATE_NONE) {
        cli_usage_error(cmd, "--rotate-seed needs --rotate hadamard or hadamard-r4");
        goto out;
    }
    if (qep_alpha_given && !p.qep) {
        cli_usage_error(cmd, "--qep-alpha needs --qep");
        goto out;
    }
    if (p.qep && p.method != LB_QUANT_GPTQ && p.method != LB_QUANT_RTN) {
        cli_usage_error(cmd, "--qep goes with --method gptq or rtn");
        goto out;
    }
    /* calibrated methods (named gptq below, as they share its inputs) */
    const bool gptq = p.method != LB_QUANT_RTN || p.qep;
    const char *method_name = p.qep && p.method == LB_QUANT_RTN ? "rtn+qep"
                              : p.qep                   ? "gptq+qep"
                              : p.method == LB_QUANT_RTN    ? "rtn"
                              : p.method == LB_QUANT_GPTAQ  ? "gptaq"
                              : p.method == LB_QUANT_GPTQ ? "gptq"
                              : p.method == LB_QUANT_AWQ  ? "awq"
                                                          : "awq+gptq";
    if (fp8_opt && !fp8_out) {
        cli_usage_error(cmd, "--fp8-block/--fp8-format/--fp8-scale go with "
                        "--checkpoint-format fp8 (or --method fp8)");
        goto out;
    }
    if (fp8_out && p.method != LB_QUANT_GPTQ) {
        cli_usage_error(cmd, "--checkpoint-format fp8 goes with --method gptq "
                        "(calibration-free FP8: --method fp8)");
        goto out;
    }
    if (fp8_out) {
        /* options of the integer checkpoint writer or of other methods */
        const char *bad = p.qep                ? "--qep"
                          : eora_rank            ? "--eora-rank"
                          : p.lm_head            ? "--lm-head"
                          : rules.n              ? "--modules"
                          : p.resume             ? "--resume"
                          : p.static_groups      ? "--static-groups"
                          : p.mse                ? "--mse"
                          : p.profile            ? "--profile"
                          : p.rotate             ? "--rotate"
                          : p.force              ? "--force"
                          : shard_given          ? "--max-shard-size"
                                                 : NULL;
        if (bad) {
            cli_usage_error(cmd, "--checkpoint-format fp8: %s is not supported "
                            "(GPTQ onto the FP8 grid quantizes every decoder-layer "
                            "linear in one pass and writes one model.safetensors "
                            "into a new or empty directory)", bad);
            goto out;
        }
    }
    if (fp8_out && (bits_given || gs_given || sym_given)) {
        cli_usage_error(cmd, "--checkpoint-format fp8: the FP8 grid has no "
                        "--bits/--group-size/--sym (its groups: --fp8-block)");
        goto out;
    }
    if (fp8_out) {
        p.fp8 = &fq;
        p.fp8_rule = (lb_fp8_scale_rule)frule;
    }
    if (eora_rank && p.method != LB_QUANT_GPTQ) {
        cli_usage_error(cmd, "--eora-rank needs --method gptq");
        goto out;
    }
    if (gptq && !calib.n && !calib_ids) {
        cli_usage_error(cmd, "%s needs calibration data: --calib FILE or "
                        "--calib-ids FILE.i32 (or use --method %s)",
                        p.qep ? "QEP"
                        : p.method == LB_QUANT_GPTQ  ? "GPTQ"
                        : p.method == LB_QUANT_GPTAQ ? "GPTAQ"
                                                     : "AWQ",
                        fp8_out ? "fp8" : "rtn");
        goto out;
    }
    if (calib.n && calib_ids) {
        cli_usage_error(cmd, "give --calib or --calib-ids, not both");
        goto out;
    }
    if (calib_ids && !seqlen) {
        cli_usage_error(cmd, "--calib-ids needs --seqlen (the file is raw "
                        "int32 [nsamples, seqlen])");
        goto out;
    }
    /* the output must not be, contain or lie inside an input (with --force
     * it replaces OUT, removing what is there): checked before any work,
     * the model again in lb_quantize_model */
    {
        const int n_in = 2 + calib.n;
        for (int i = 0; i < n_in; i++) {
            const char *in_i = i == 0 ? model : i == 1 ? calib_ids : calib.v[i - 2];
            if (!in_i) continue;
            lb_path_relation r = lb_path_relate(out, in_i);
            if (r == LB_PATH_UNRELATED) continue;
            fprintf(stderr, "lowbit %s: error: %s: the output %s the input %s%s; "
                    "choose an output directory outside it\n", cmd, out,
                    r == LB_PATH_SAME ? "is" : r == LB_PATH_A_INSIDE ? "would be inside"
                                                                     : "would contain",
                    i ? "file " : "checkpoint ", in_i);
            rc = 1;
            goto out;
        }
    }
    rc = 1;
    lb_calib cal = {0};
    lb_status st = LB_OK;
    if (gptq && calib_ids) {
        bool ns_given = false;
        for (int i = 1; i < argc; i++)
            if (argv[i] && !strcmp(argv[i], "--nsamples")) ns_given = true;
        st = lb_calib_load_ids(calib_ids, seqlen, ns_given ? nsamples : 0,
                               &cal);
    } else if (gptq) {
        if (!seqlen) {
            lb_model_config cfg;
            st = lb_model_config_load_dir(model, &cfg);
            if (st == LB_OK) {
                seqlen = cfg.max_position_embeddings > 0 &&
                                 cfg.max_position_embeddings < 2048
                             ? cfg.max_position_embeddings
                             : 2048;
                lb_model_config_clear(&cfg);
            }
        }
        void *tok = NULL;
        if (st == LB_OK) st = cli_tokenizer_open(model, &tok);
        if (st == LB_OK)
            st = lb_calib_sample_text((const char *const *)calib.v, calib.n,
                                      cli_tokenize_cb, tok, nsamples, seqlen,
                                      seed, &cal);
        cli_tokenizer_close(tok);
    }
    if (st != LB_OK) {
        rc = cli_fail(cmd, st);
        goto out;
    }
    cli_progress prog;
    p.progress = cli_progress_make(&prog);
    p.rules = (const char *const *)rules.v;
    p.n_rules = rules.n;
    p.n_threads = (int)threads;
    p.calib_seed = seed;
    p.write_report = write_report || g_cli.json;
    lb_quantize_report rep;
    st = lb_quantize_model(model, out, &p, gptq ? &cal : NULL, &rep);
    cli_progress_done(&prog);
    /* --eora-rank: an EoRA adapter beside the checkpoint (cmd_eora.c) */
    if (st == LB_OK && eora_rank)
        st = cli_eora_write(model, out, &cal, (int)eora_rank, (int)threads);
    lb_calib_free(&cal);
    if (st != LB_OK) {
        rc = cli_fail(cmd, st);
        goto out;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss_mib = (double)ru.ru_maxrss / 1024.0;
    int nq = 0;
    for (int i = 0; i < rep.n_modules; i++) nq += rep.modules[i].quantized;
    if (g_cli.json) {
        printf("{\"out_dir\": ");
        cli_json_string(stdout, out);
        if (fp8_out) /* the FP8 grid: 8-bit codes, groups as fp8.scales */
            printf(", \"method\": \"%s\", \"bits\": 8, \"group_size\": null, ", method_name);
        else
            printf(", \"method\": \"%s\", \"bits\": %d, \"group_size\": %d, ", method_name,
                   p.bits, p.group_size);
        printf("\"sym\": %s, \"desc_act\": %s, \"checkpoint_format\": \"%s\", "
               "\"modules\": %d, \"modules_quantized\": %d, "
               "\"quantized_params\": %lld, \"bits_per_weight\": %.6f, ",
               p.sym ? "true" : "false", p.desc_act ? "true" : "false",
               fp8_out ? "fp8"
               : p.format == LB_GPTQ_FORMAT_AWQ || (awq && p.bits == 4 &&
                                                  p.format == LB_GPTQ_FORMAT_V1)
                   ? "awq"
               : p.format == LB_GPTQ_FORMAT_V2 || awq ? "gptq_v2"
                                                      : "gptq",
               rep.n_modules, nq, (long long)rep.quantized_params,
               rep.bits_per_weight);
        if (fp8_out) {
            char *f = lb_fp8_settings_json(&fq, frule);
            printf("\"fp8\": %s, ", f ? f : "null");
            free(f);
        }
        if (isfinite(rep.snr_min_db))
            printf("\"snr_db\": {\"min\": %.4f, \"max\": %.4f, \"mean\": "
                   "%.4f}, ",
                   rep.snr_min_db, rep.snr_max_db, rep.snr_mean_db);
        printf("\"nsamples\": %lld, \"seqlen\": %lld, \"activation_bytes\": "
               "%llu, \"layers_resumed\": %d, \"shards\": %d, "
               "\"tensor_bytes\": %llu, \"seconds\": %.3f, \"peak_rss_mib\": "
               "%.1f, \"report\": ",
               (long long)rep.nsamples, (long long)rep.seqlen,
               (unsigned long long)rep.activation_bytes, rep.layers_resumed,
               rep.n_shards, (unsigned long long)rep.tensor_bytes,
               rep.seconds, rss_mib);
        char rp[4200];
        snprintf(rp, sizeof rp, "%s/quantize_report.json", out);
        cli_json_string(stdout, rp);
        printf("}\n");
    } else {
        printf("quantized %d of %d modules (%lld weights, %.3f bits/weight",
               nq, rep.n_modules, (long long)rep.quantized_params,
               rep.bits_per_weight);
        if (isfinite(rep.snr_mean_db))
            printf(", SNR %.2f..%.2f dB", rep.snr_min_db, rep.snr_max_db);
        printf(") in %.1f s, peak RSS %.0f MiB -> %s\n", rep.seconds, rss_mib,
               out);
        if (rep.layers_resumed)
            printf("resumed %d finished layer(s) of an earlier run\n",
                   rep.layers_resumed);
        for (int i = 0; i < rep.n_modules; i++)
            if (!rep.modules[i].quantized && !g_cli.quiet)
                printf("  kept dense: %s (%s)\n", rep.modules[i].name,
                       rep.modules[i].note);
        int n_plain = 0;
        for (int i = 0; i < rep.n_modules; i++)
            n_plain += rep.modules[i].awq_plain;
        if (n_plain)
            printf("AWQ: %d module(s) quantized without scaling/clipping "
                   "(sparse calibration coverage, or MoE experts with too "
                   "few routed tokens; see the report)\n",
                   n_plain);
    }
    lb_quantize_report_free(&rep);
    rc = 0;
out:
    sl_free(&calib);
    sl_free(&rules);
    return rc;
}
