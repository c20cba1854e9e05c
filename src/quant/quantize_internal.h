/*
 * Private pieces of the whole-model quantizer (quantize*.c): module rules,
 * the module plan, and the engine that runs calibration layer by layer and
 * hands every quantized module to a sink (the checkpoint writer, or the
 * in-memory fake-quant of lb_quantize_model_inplace).
 */
#ifndef LB_QUANTIZE_INTERNAL_H
#define LB_QUANTIZE_INTERNAL_H

#include "lowbit/quantize.h"

/* A parsed module rule (see lowbit/quantize.h). */
typedef struct qz_rule {
    char *text;    /* the rule as given (owned)                        */
    char *pattern; /* REGEX part (owned)                               */
    void *code;    /* PCRE2 code (owned)                               */
    bool skip;
    int bits;      /* 0 = inherit                                      */
    int group_size; /* 0 = inherit                                     */
    int sym;       /* -1 inherit                                       */
    int desc_act;  /* -1 inherit                                       */
} qz_rule;

/* Parse rule strings; errors (LB_ERR_INVALID_ARG) quote the rule. */
lb_status qz_rules_parse(const char *const *rules, int n, qz_rule **out);
void qz_rules_free(qz_rule *r, int n);
/* Index of the first rule whose pattern occurs in name, or -1. */
int qz_rules_match(const qz_rule *r, int n, const char *name);

#define QZ_LM_HEAD (-1)

/* One candidate module. */
typedef struct qz_module {
    char name[160];
    int layer;      /* decoder layer, or n_layers for lm_head          */
    int which;      /* lb_linear_id, or QZ_LM_HEAD                     */
    bool quantize;
    char note[128]; /* why not quantized, or a short last group         */
    int bits, group_size;
    bool sym, desc_act;
    int64_t out, in;
} qz_module;

/* Build the plan: 7 linears per layer (+ lm_head when p->lm_head), with
 * rules applied and shapes checked (in/out multiples of 32). *mods is
 * malloc'd; modules are in layer order, lm_head last. */
lb_status qz_plan(const lb_model *m, const lb_quantize_params *p,
                  const qz_rule *rules, int n_rules, qz_module **mods,
                  int *n_mods);

/* Output of the engine. */
typedef struct qz_sink {
    void *user;
    /* A module was quantized; res holds codes/scales/zeros/g_idx/W_deq
     * (the engine frees it afterwards); W is the original f32 weight.
     * The sink fills rep->snr_db and anything else it wants. */
    lb_status (*module_done)(void *user, const qz_module *mod, const float *W,
                             const lb_gptq_result *res,
                             lb_quantize_module_report *rep);
    /* Before `layer` (n_layers = lm_head) is processed: the sink may supply
     * the results of a previous run: W_deq[i] (malloc'd f32 [out, in],
     * taken over by the engine) for each of the layer's quantized modules
     * mods[0..n) and their reports; sets *found. */
    lb_status (*layer_cached)(void *user, int layer, const qz_module *mods,
                              int n, float **W_deq,
                              lb_quantize_module_report *reps, bool *found);
    /* After `layer` has been quantized and replayed. */
    lb_status (*layer_done)(void *user, int layer);
    /* true: the dequantized weights stay in the model (in-place mode);
     * false: the original weights are restored after each layer. */
    bool keep_in_model;
} qz_sink;

/* Run the whole quantization on m. rep->modules is allocated (one entry
 * per plan module) and filled; the caller frees with
 * lb_quantize_report_free. */
lb_status qz_run(lb_model *m, const lb_quantize_params *p,
                 const lb_calib *calib, const qz_module *mods, int n_mods,
                 qz_sink *sink, lb_quantize_report *rep);

/* Validate parameters (and apply the vLLM profile's fixed settings to a
 * copy): *eff receives the parameters actually used. */
lb_status qz_effective_params(const lb_quantize_params *p,
                              lb_quantize_params *eff);

/* 10 log10(sum w^2 / sum (w - q)^2) over n values; +inf when equal. */
double qz_snr_db(const float *w, const float *q, int64_t n);

#endif
