/*
 * quant_quality — the quality table of docs/quantize.md: RTN, GPTQ, GPTAQ,
 * GPTQ+QEP, RTN+QEP, AWQ,
 * AWQ without clipping and AWQ-then-GPTQ at 4, 3 and 2 bits (group 128,
 * zero points), each applied in memory (lb_quantize_model_inplace,
 * float32 scales) to a fresh copy of MODEL_DIR and evaluated with the full
 * perplexity protocol (every token of non-overlapping ctx-token windows).
 *
 *   quant_quality MODEL_DIR CALIB.i32 SEQLEN PPL_IDS.i32 [CTX] [GROUP] [ONLY] [rot]
 *
 * rot: the Hadamard rotation (lb_model_rotate_hadamard, seed 0) before
 * every method; rot4: the same plus the online Hadamard on down_proj's
 * input (QuaRot R4, lb_model_rotate_online_down). BITS (optional 9th
 * argument): a comma list of widths (default "4,3,2").
 *
 * ONLY: a list of the method names to run (default all: "RTN", "GPTQ",
 * "GPTAQ", "GPTQ+QEP", "RTN+QEP",
 * "AWQ", "AWQ --no-clip", "AWQ+GPTQ", "AWQ grid only" — AWQ with the scale
 * and clip searches off, AutoAWQ's grid alone).
 *
 * CALIB.i32: int32 [nsamples, SEQLEN] calibration ids (the GPTQ
 * reference's 128 x 128 for tinystories-656k); PPL_IDS.i32: the evaluation
 * ids. Prints one markdown row per method and width: perplexity, bits per
 * weight of the quantized linears (checkpoint layout: codes + f16 scales
 * + packed zeros [+ g_idx for the GPTQ layout]) and the seconds taken.
 */
#include "lowbit/core.h"
#include "lowbit/eval.h"
#include "lowbit/model.h"
#include "lowbit/quantize.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t *read_ids(const char *path, int64_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    int32_t *ids = malloc((size_t)sz);
    if (ids && fread(ids, 1, (size_t)sz, f) != (size_t)sz) {
        free(ids);
        ids = NULL;
    }
    fclose(f);
    *n = sz / 4;
    return ids;
}

static double ppl_of(lb_model *m, const int32_t *ids, int64_t n, int ctx) {
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = ctx;
    cp.n_threads = 2;
    lb_context *c = NULL;
    if (lb_context_create(m, &cp, &c) != LB_OK) return -1;
    lb_ppl_params p = lb_ppl_default_params();
    p.protocol = LB_PPL_FULL;
    p.n_ctx = ctx;
    lb_ppl_result r = {0};
    lb_status s = lb_perplexity(c, ids, n, &p, &r);
    lb_context_free(c);
    return s == LB_OK ? r.ppl : -1;
}

/* name is one of the comma-separated entries of list */
static bool listed(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && !strncmp(p, name, n)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: quant_quality MODEL_DIR CALIB.i32 SEQLEN PPL_IDS.i32 [CTX] "
                        "[GROUP]\n");
        return 2;
    }
    const char *dir = argv[1];
    const int64_t seqlen = atoll(argv[3]);
    const int ctx = argc > 5 ? atoi(argv[5]) : 256;
    const int group = argc > 6 ? atoi(argv[6]) : 128;
    lb_calib cal = {0};
    if (lb_calib_load_ids(argv[2], seqlen, 0, &cal) != LB_OK) {
        fprintf(stderr, "quant_quality: %s\n", lb_last_error());
        return 1;
    }
    int64_t n_ids = 0;
    int32_t *ids = read_ids(argv[4], &n_ids);
    if (!ids) {
        fprintf(stderr, "quant_quality: cannot read %s\n", argv[4]);
        return 1;
    }
    lb_model *m = NULL;
    if (lb_model_load(dir, NULL, &m) != LB_OK) {
        fprintf(stderr, "quant_quality: %s\n", lb_last_error());
        return 1;
    }
    printf("| method | bits | group | ppl | bits/weight | seconds |\n|---|---|---|---|---|---|\n");
    printf("| dense | 16/32 | - | %.4f | - | - |\n", ppl_of(m, ids, n_ids, ctx));
    lb_model_free(m);
    static const struct {
        const char *name;
        lb_quant_method method;
        bool no_clip, plain, qep;
    } methods[] = {{"RTN", LB_QUANT_RTN, false, false, false},
                   {"GPTQ", LB_QUANT_GPTQ, false, false, false},
                   {"GPTAQ", LB_QUANT_GPTAQ, false, false, false},
                   {"GPTQ+QEP", LB_QUANT_GPTQ, false, false, true},
                   {"RTN+QEP", LB_QUANT_RTN, false, false, true},
                   {"AWQ", LB_QUANT_AWQ, false, false, false},
                   {"AWQ --no-clip", LB_QUANT_AWQ, true, false, false},
                   {"AWQ+GPTQ", LB_QUANT_AWQ_GPTQ, false, false, false},
                   /* AutoAWQ's grid alone: no scale or clip search */
                   {"AWQ grid only", LB_QUANT_AWQ, false, true, false}};
    const char *only = argc > 7 && *argv[7] ? argv[7] : NULL; /* "RTN,AWQ grid only" */
    /* ROT "rot": every method after lb_model_rotate_hadamard (seed 0) */
    const bool rot4 = argc > 8 && !strcmp(argv[8], "rot4");
    const bool rot = rot4 || (argc > 8 && !strcmp(argv[8], "rot"));
    static const int bits[] = {4, 3, 2};
    const char *bsel = argc > 9 && *argv[9] ? argv[9] : "4,3,2";
    for (size_t b = 0; b < sizeof bits / sizeof bits[0]; b++)
        for (size_t k = 0; k < sizeof methods / sizeof methods[0]; k++) {
            if (!strchr(bsel, '0' + bits[b])) continue;
            if (only && !listed(only, methods[k].name)) continue;
            if (lb_model_load(dir, NULL, &m) != LB_OK) return 1;
            lb_quantize_params p;
            lb_quantize_default_params(&p);
            p.method = methods[k].method;
            p.bits = bits[b];
            p.group_size = group;
            p.sym = false;
            p.awq_no_clip = methods[k].no_clip;
            p.qep = methods[k].qep;
            if (rot) p.rotate = rot4 ? LB_ROTATE_HADAMARD_R4 : LB_ROTATE_HADAMARD;
            if (methods[k].plain) p.awq_min_tokens = INT64_MAX;
            p.n_threads = 2;
            lb_quantize_report rep;
            const double t0 = lb_time_s();
            lb_status s = lb_quantize_model_inplace(m, &p, &cal, &rep);
            const double dt = lb_time_s() - t0;
            if (s != LB_OK) {
                fprintf(stderr, "quant_quality: %s %d-bit: %s\n", methods[k].name, bits[b],
                        lb_last_error());
                return 1;
            }
            printf("| %s%s | %d | %d | %.4f | %.3f | %.2f |\n", methods[k].name,
                   rot4 ? " + rotation R1+R4" : rot ? " + rotation" : "", bits[b], group,
                   ppl_of(m, ids, n_ids, ctx), rep.bits_per_weight, dt);
            fflush(stdout);
            lb_quantize_report_free(&rep);
            lb_model_free(m);
        }
    free(ids);
    lb_calib_free(&cal);
    return 0;
}
