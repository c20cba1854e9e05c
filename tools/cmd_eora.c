/*
 * lowbit eora: EoRA adapter for a quantized checkpoint (lowbit/eora.h),
 * written as a PEFT LoRA directory (lowbit/lora.h).
 */
#include "cli.h"
#include "cli_text.h"

#include "lowbit/eora.h"
#include "lowbit/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *fp) {
    fprintf(fp,
            "usage: lowbit eora DENSE_DIR QUANT_DIR -o ADAPTER_DIR --rank R "
            "(--calib FILE... | --calib-ids FILE.i32 --seqlen N) [options]\n"
            "\n"
            "Fit a rank-R EoRA adapter (Liu et al. 2024) to the quantization\n"
            "error of every quantized linear: dW = W(DENSE) - W(QUANT) scaled\n"
            "into the eigenspace of the calibration inputs of QUANT, truncated\n"
            "SVD, written as a PEFT LoRA adapter (adapter_config.json +\n"
            "adapter_model.safetensors). Run it with --lora ADAPTER_DIR.\n"
            "\n"
            "  --rank R            adapter rank (per linear at most min(out, in))\n"
            "  --calib FILE        text or .jsonl calibration (repeatable)\n"
            "  --calib-ids FILE    pre-tokenized int32 [nsamples, seqlen]\n"
            "  --nsamples N        sequences (default 128)\n"
            "  --seqlen N          tokens per sequence (default min(2048, "
            "model max))\n"
            "  --seed S            text window sampling seed (default 0)\n"
            "  --dtype f32|f16     factor precision written (default f32)\n"
            "  -t, --threads N     threads (default: all CPUs)\n"
            "global: --quiet, --json\n");
}

/* quantize --eora-rank: fit the adapter to the checkpoint just written
 * (calibration `cal` of the quantization) and write it to qdir-eora-rR. */
lb_status cli_eora_write(const char *dense_dir, const char *qdir,
                         const lb_calib *cal, int rank, int threads);
lb_status cli_eora_write(const char *dense_dir, const char *qdir,
                         const lb_calib *cal, int rank, int threads) {
    lb_model *dense = NULL, *quant = NULL;
    lb_lora *ad = NULL;
    lb_model_load_opts lo = {0};
    char out[4200];
    snprintf(out, sizeof out, "%s-eora-r%d", qdir, rank);
    lb_status st = lb_model_load(dense_dir, &lo, &dense);
    lo.gptq_mode = LB_GPTQ_LOAD_F32;
    if (st == LB_OK) st = lb_model_load(qdir, &lo, &quant);
    lb_eora_report rep;
    cli_progress prog;
    if (st == LB_OK) {
        lb_eora_params p = {0};
        p.rank = rank;
        p.n_threads = threads;
        p.progress = cli_progress_make(&prog);
        const char *nm = strrchr(out, '/');
        st = lb_eora_generate(dense, quant, cal, &p, nm ? nm + 1 : out, &ad, &rep);
        cli_progress_done(&prog);
    }
    if (st == LB_OK) st = lb_lora_write_peft(ad, out, qdir);
    if (st == LB_OK && !g_cli.quiet && !g_cli.json)
        printf("eora: rank %d on %d linears (%.1f%% of the H-weighted residual "
               "removed) -> %s\n", rank, rep.n_linears,
               rep.err_before > 0 ? 100.0 * (1 - rep.err_after / rep.err_before) : 0.0,
               out);
    lb_lora_free(ad);
    lb_model_free(quant);
    lb_model_free(dense);
    return st;
}

int cmd_eora(int argc, char **argv) {
    const char *cmd = "eora";
    const char *dense_dir = NULL, *quant_dir = NULL, *out = NULL,
               *calib_ids = NULL;
    const char *calib[64];
    int n_calib = 0;
    long rank = 0, nsamples = 128, seqlen = 0, threads = 0, seed = 0;
    bool ns_given = false;
    lb_type dtype = LB_TYPE_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
#define VAL()                                                                  \
    do {                                                                       \
        if (!(v = cli_value(cmd, argc, argv, &i))) return 2;                   \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            VAL();
            out = v;
        } else if (!strcmp(a, "--rank")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 1, LB_LORA_MAX_RANK, &rank)) return 2;
        } else if (!strcmp(a, "--calib")) {
            VAL();
            if (n_calib >= 64) return cli_usage_error(cmd, "too many --calib");
            calib[n_calib++] = v;
        } else if (!strcmp(a, "--calib-ids")) {
            VAL();
            calib_ids = v;
        } else if (!strcmp(a, "--nsamples")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 1, 1 << 24, &nsamples)) return 2;
            ns_given = true;
        } else if (!strcmp(a, "--seqlen")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 1, 1 << 24, &seqlen)) return 2;
        } else if (!strcmp(a, "--seed")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 0, 0x7fffffffL, &seed)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 1, 1024, &threads)) return 2;
        } else if (!strcmp(a, "--dtype")) {
            VAL();
            if (!strcmp(v, "f32") || !strcmp(v, "F32")) dtype = LB_TYPE_F32;
            else if (!strcmp(v, "f16") || !strcmp(v, "F16")) dtype = LB_TYPE_F16;
            else return cli_usage_error(cmd, "--dtype: f32 or f16, got '%s'", v);
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error(cmd, "unknown option %s", a);
        } else if (!dense_dir) {
            dense_dir = a;
        } else if (!quant_dir) {
            quant_dir = a;
        } else {
            return cli_usage_error(cmd, "unexpected argument '%s'", a);
        }
#undef VAL
    }
    if (!dense_dir || !quant_dir) return cli_usage_error(cmd, "need DENSE_DIR and QUANT_DIR");
    if (!out) return cli_usage_error(cmd, "missing -o ADAPTER_DIR");
    if (!rank) return cli_usage_error(cmd, "missing --rank R");
    if (!n_calib && !calib_ids)
        return cli_usage_error(cmd, "EoRA needs calibration data: --calib FILE "
                               "or --calib-ids FILE.i32");
    if (n_calib && calib_ids) return cli_usage_error(cmd, "give --calib or --calib-ids, not both");
    if (calib_ids && !seqlen) return cli_usage_error(cmd, "--calib-ids needs --seqlen");

    lb_model *dense = NULL, *quant = NULL;
    lb_lora *ad = NULL;
    lb_calib cal = {0};
    lb_model_load_opts lo = {0};
    lb_status st = lb_model_load(dense_dir, &lo, &dense);
    lo.gptq_mode = LB_GPTQ_LOAD_F32; /* exact W^ (dequantized codes) */
    if (st == LB_OK) st = lb_model_load(quant_dir, &lo, &quant);
    if (st == LB_OK) {
        if (calib_ids) {
            st = lb_calib_load_ids(calib_ids, seqlen, ns_given ? nsamples : 0, &cal);
        } else {
            const int32_t mp = quant->config.max_position_embeddings;
            if (!seqlen) seqlen = mp > 0 && mp < 2048 ? mp : 2048;
            void *tok = NULL;
            st = cli_tokenizer_open(dense_dir, &tok);
            if (st == LB_OK)
                st = lb_calib_sample_text(calib, n_calib, cli_tokenize_cb, tok,
                                          nsamples, seqlen, (uint64_t)seed, &cal);
            cli_tokenizer_close(tok);
        }
    }
    lb_eora_report rep;
    memset(&rep, 0, sizeof rep);
    cli_progress prog;
    if (st == LB_OK) {
        lb_eora_params p = {0};
        p.rank = (int)rank;
        p.n_threads = (int)threads;
        p.progress = cli_progress_make(&prog);
        const char *nm = strrchr(out, '/');
        st = lb_eora_generate(dense, quant, &cal, &p, nm && nm[1] ? nm + 1 : out,
                              &ad, &rep);
        cli_progress_done(&prog);
    }
    if (st == LB_OK && dtype != LB_TYPE_F32) st = lb_lora_convert(ad, dtype);
    if (st == LB_OK) st = lb_lora_write_peft(ad, out, quant_dir);
    int rc = 0;
    if (st != LB_OK) {
        rc = cli_fail(cmd, st);
    } else {
        const double params = (double)lb_lora_n_params(ad);
        if (g_cli.json)
            printf("{\"adapter\": \"%s\", \"rank\": %ld, \"linears\": %d, "
                   "\"params\": %.0f, \"bytes\": %zu, \"err_before\": %.6g, "
                   "\"err_after\": %.6g, \"eig_clamped\": %lld, \"passes\": %d}\n",
                   out, rank, rep.n_linears, params, lb_lora_bytes(ad),
                   rep.err_before, rep.err_after, (long long)rep.n_clamped,
                   rep.n_passes);
        else if (!g_cli.quiet)
            printf("eora: rank %ld on %d linears, %.0f parameters (%zu bytes); "
                   "H-weighted residual %.4g -> %.4g (%.1f%% removed); %lld "
                   "eigenvalues clamped; wrote %s\n",
                   rank, rep.n_linears, params, lb_lora_bytes(ad), rep.err_before,
                   rep.err_after,
                   rep.err_before > 0 ? 100.0 * (1 - rep.err_after / rep.err_before) : 0.0,
                   (long long)rep.n_clamped, out);
    }
    lb_lora_free(ad);
    lb_calib_free(&cal);
    lb_model_free(quant);
    lb_model_free(dense);
    return rc;
}
