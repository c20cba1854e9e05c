/*
 * Private pieces of the whole-model quantizer (quantize*.c): module rules,
 * the module plan, and the engine that runs calibration layer by layer and
 * hands every quantized module to a sink (the checkpoint writer, or the
 * in-memory fake-quant of lb_quantize_model_inplace).
 */
#ifndef LB_QUANTIZE_INTERNAL_H
#define LB_QUANTIZE_INTERNAL_H

#include "lowbit/quantize.h"
#include "lowbit/model.h"

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
/* qz_module.which beyond lb_linear_id (issue 13): Phi-3's fused
 * self_attn.qkv_proj ([q; k; v] rows) and mlp.gate_up_proj ([gate; up]),
 * quantized as one module each (GPTQModel / vLLM); Qwen2-MoE's shared
 * expert gate/up/down (QZ_SHEXP + k); MoE expert e's gate/up/down
 * (QZ_EXP + 3 e + k, k = 0 gate, 1 up, 2 down, as lb_layer_weights.exp). */
enum { QZ_QKV = 16, QZ_GATE_UP = 17, QZ_SHEXP = 32, QZ_EXP = 64 };

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

/* Build the plan: the linears of every layer (7 for the Llama layout;
 * Phi-3: qkv_proj, o_proj, gate_up_proj, down_proj; MoE layers: q, k, v,
 * o, then every expert's gate/up/down and Qwen2-MoE's shared expert; the
 * routers stay dense) (+ lm_head when p->lm_head), with rules applied and
 * shapes checked (in/out multiples of 32). *mods is malloc'd; modules are
 * in layer order, lm_head last. */
lb_status qz_plan(const lb_model *m, const lb_quantize_params *p,
                  const qz_rule *rules, int n_rules, qz_module **mods,
                  int *n_mods);

/* ------------------------------------------------------------------------ */
/* Model definition (per architecture)                                       */
/* ------------------------------------------------------------------------ */

/* The model tensors module q covers, in row order (1; Phi-3's fused
 * modules 3 / 2 row views); returns the count. */
int qz_module_parts(lb_model *m, const qz_module *q, lb_tensor *parts[3]);

/* The distinct inputs of a decoder layer's linears. */
enum { QZ_IN_ATTN = 0, /* input_layernorm(x): q, k, v                    */
       QZ_IN_O,        /* attention output: o_proj                        */
       QZ_IN_MLP,      /* post_attention_layernorm(h): gate, up           */
       QZ_IN_DOWN,     /* act(gate) * up: down_proj                       */
       QZ_IN_COUNT };

enum { QZ_NORM_ATTN = 0, QZ_NORM_FFN = 1 };

/* An AWQ scaling group: per-input-channel scales s multiply the columns of
 * `members` and divide the previous operation's output channels (an
 * RMSNorm weight or the rows of a previous linear), which leaves the
 * layer's function unchanged in exact arithmetic. */
typedef struct qz_scale_group {
    const char *name;    /* "input_layernorm -> q,k,v" (messages, report)  */
    int prev_norm;       /* QZ_NORM_ATTN / QZ_NORM_FFN, or -1              */
    int prev_linear;     /* lb_linear_id, or -1                            */
    int members[3];      /* lb_linear_id                                   */
    int n_members;
    int input;           /* QZ_IN_*: the members' shared input             */
} qz_scale_group;

/* Which modules form each subset (solved together, in order: GPTQ's
 * true-sequential [q,k,v] -> [o] -> [gate,up] -> [down]), which share an
 * input, and the AWQ scaling groups. */
typedef struct qz_arch {
    /* subsets hold qz_module.which codes (lb_linear_id, QZ_QKV, ...); a
     * MoE layer runs the subsets up to o_proj, then the MoE block
     * (quantize_moe.c) */
    int n_subsets;
    int subsets[LB_LINEAR_COUNT][LB_LINEAR_COUNT];
    int subset_n[LB_LINEAR_COUNT];
    int input_of[LB_LINEAR_COUNT];   /* QZ_IN_* of each linear            */
    int n_scale;
    qz_scale_group scale[4];
} qz_arch;

/* The definition for a model (Llama, Mistral, Qwen2, Qwen3 share the
 * decoder layout): subsets per true_sequential; scaling groups as
 * AutoAWQ's get_layers_for_scaling for these models — (input_layernorm ->
 * q,k,v), (v_proj -> o_proj) only when v_proj's output width equals
 * o_proj's input width (no grouped-query attention), (post_attention_
 * layernorm -> gate,up), (up_proj -> down_proj). */
void qz_arch_get(const lb_model_config *cfg, bool true_sequential,
                 qz_arch *a);

/* ------------------------------------------------------------------------ */
/* Engine (looper) and processors                                            */
/* ------------------------------------------------------------------------ */

typedef struct qz_engine qz_engine;

enum { QZ_NEED_CALIB = 1,   /* calibration inputs per layer (forwards)  */
       QZ_NEED_HESSIAN = 2, /* per-subset Hessians, solved with them    */
       QZ_NEED_NATIVE = 4,  /* a full-precision copy of the layer inputs
                               (the native stream, f32) runs beside the
                               replayed one; each subset's solve sees the
                               cross statistics qz_engine.dxxt          */
       QZ_READS_H = 8       /* solve reads H for every module (QEP's
                               correction), not only to make the factor
                               of the first module of an input with its
                               desc_act (qz_engine_factor)              */
};

/* A quantization method on the layer pipeline. For each decoder layer the
 * looper (quantize.c) calls layer_begin (if any), then solves every
 * quantized module with `solve` — per true-sequential subset after
 * capturing the subset's Hessians when needs has QZ_NEED_HESSIAN, module
 * by module otherwise — hands each result to the sink, swaps the
 * dequantized weights in, and (QZ_NEED_CALIB) replays the quantized layer
 * to make the next layer's inputs. A calibration-free method (RTN and the
 * like) only needs `solve`. */
typedef struct qz_processor {
    const char *name;   /* "rtn", "gptq", "awq", "awq+gptq"              */
    unsigned needs;     /* QZ_NEED_*                                     */
    /* Before the layer's modules are solved: may capture the layer's
     * inputs (qz_engine_capture) and swap transformed weights and dense
     * tensors into the model (qz_engine_swap_in, qz_engine_set_dense). */
    lb_status (*layer_begin)(qz_engine *e, int layer);
    /* Work units layer_begin reports through qz_engine_progress. */
    uint64_t (*layer_begin_units)(const qz_engine *e, int layer);
    /* Quantize one module: W [out, in] as the model holds it now; H and
     * fac as lb_gptq_factor_make / lb_gptq_quantize_factored (NULL unless
     * QZ_NEED_HESSIAN); *res zeroed on entry. */
    lb_status (*solve)(qz_engine *e, const qz_module *q, const float *W,
                       const float *H, lb_gptq_factor **fac,
                       lb_gptq_result *res);
} qz_processor;

/* The processor of a method (NULL for an unknown one). */
const qz_processor *qz_processor_for(lb_quant_method m);

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
    /* A dense tensor of the source that the method changed (AWQ: scaled
     * RMSNorm weights, a scaled v_proj bias), float32 [n], for `layer`'s
     * state; the checkpoint takes it in place of the source's. Optional. */
    lb_status (*tensor_done)(void *user, int layer, const char *name,
                             const float *data, int64_t n);
    /* On resume: such a tensor of a cached layer into dst [n]; *found
     * false when the layer state has none. Optional. */
    lb_status (*cached_tensor)(void *user, int layer, const char *name,
                               float *dst, int64_t n, bool *found);
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

/* The engine's state, for processors. */
struct qz_engine {
    lb_model *m;
    const lb_quantize_params *p;
    const lb_calib *cal;
    const qz_module *mods;
    int n_mods;
    qz_sink *sink;
    lb_quantize_report *rep;
    lb_context *ctx;
    const qz_processor *proc;
    qz_arch arch;
    int64_t ns, T, dim; /* samples, tokens per sample, hidden size */
    float *act32;       /* [ns, T, dim] or NULL                       */
    uint16_t *act16;    /* [ns, T, dim] f16 or NULL                   */
    float *x;           /* [T, dim] working copy                      */
    /* tensors swapped in the current layer: slot, its original view, the
     * dequantized buffer (owned; NULL for the later parts of a fused
     * module) */
    struct qz_swap { lb_tensor *slot; lb_tensor orig; float *buf; } *sw;
    int n_sw, cap_sw;
    /* the plan's modules of layer l: mods[lfirst[l] .. + lcount[l]) */
    int *lfirst, *lcount;
    /* dense tensors replaced in the current layer (checkpoint mode), by
     * QZ_DENSE_*: attn_norm, ffn_norm, v bias, router, shared_expert_gate */
    float *dense_buf[5];
    lb_tensor dense_orig[5];
    uint64_t done, total;
    char stage[160];
    /* QZ_NEED_NATIVE: the native stream [ns, T, dim] f32 (layer inputs of
     * the unquantized model), the native inputs of the current layer's
     * linears [ns * T, width] per QZ_IN_*, and, while a module is solved,
     * dxxt = 2/ns sum_t (x_t - x~_t) x~_t^T [in, in] of its input (NULL
     * for lm_head: no native cross statistics there) */
    float *nat;
    float *Xn[QZ_IN_COUNT];
    const float *dxxt;
    /* while the last module of an input that reads its H is solved
     * (the last to make a factor, or with QZ_READS_H the input's last
     * module): where the looper keeps that H (lb_alloc'd); the factor is
     * made in H's own buffer then (qz_engine_factor), or a solve that
     * needs H no more frees it there (qz_engine_h_spent), so that H, the
     * factor and the solve's work space do not live at once; NULL
     * otherwise */
    float **h_last;
    /* while quantize_module solves a module: its F32 weight copy (made
     * for that solve and nothing else), which a GPTQ/GPTAQ solve given
     * exactly this W may use as its working copy
     * (lb_gptq_quantize_factored_inplace) and then sets w_spent: the
     * copy is made again from the model for what reads W afterwards (the
     * SNR, the sink), so that W and a working copy of it do not live at
     * once; NULL otherwise */
    float *w_own;
    bool w_spent;
    /* act32 holds the current layer's post-attention residuals h = x +
     * o_proj(att) instead of its inputs x: a pass that ran with the
     * layer's attention in its final form kept them, and later passes and
     * the replay start from h (lb_layer_forward_mlp) instead of computing
     * q/k/v, the attention and o_proj again. f32 activations and
     * Llama-layout layers only (quantize.c); false at each layer start. */
    bool h_kept;
    /* --calib-dtype bf16 on an AVX512_BF16 CPU: the workers of the
     * Hessians' bf16 products (lb_gptq_hessian_use_bf16; not the context's
     * pool, whose forward job runs the capture hook); NULL: f32 ssyrk */
    lb_pool *hpool;
    /* --calib-cache (quantize.c): per calibration sequence s < nc the
     * current layer's attention output (o_proj's input) [T, n_heads *
     * head_dim] in attc and MLP activation (down_proj's input) [T,
     * intermediate_size] in actc, bf16 (cache_bf16) or f32; att_ok/act_ok:
     * filled in this layer; cx: a [T, max of both widths] f32 copy */
    uint8_t *attc, *actc;
    int64_t nc;
    bool cache_bf16, att_ok, act_ok;
    float *cx;
    /* act_spill_dir: act32/act16, nat, Xn and attc/actc are lb_spill_map
     * mappings of these sizes (for the unmap), and each sequence's pages
     * leave the RSS once a pass is done with them (quantize.c
     * seq_release); xn_counted: Xn's bytes are in rep->spill_bytes */
    bool spill, xn_counted;
    size_t act_bytes, nat_bytes, attc_bytes, actc_bytes;
    size_t xn_bytes[QZ_IN_COUNT];
};

/* A Hessian accumulator for inputs of width in: f32 or f64 as the
 * parameters say, with bf16 products when e->hpool is set. */
lb_status qz_engine_hessian_create(const qz_engine *e, int64_t in,
                                   lb_gptq_hessian **h);

/* The solve of q made its factor and reads H no more: free the looper's
 * H when q is its last module (e->h_last), else nothing. */
void qz_engine_h_spent(qz_engine *e);

/* *fac unless made already: GPTQ's inverse-Hessian factor of H for q's
 * options o, in H's own buffer when H is the looper's and q its last
 * reader (e->h_last: lb_gptq_factor_make_inplace, the looper's pointer
 * set to NULL), else from a copy (lb_gptq_factor_make). */
lb_status qz_engine_factor(qz_engine *e, const qz_module *q, const float *H,
                           const lb_gptq_options *o, lb_gptq_factor **fac);

/* Solve one module and hand it to the sink, swap it in (GPTQ with the
 * inverse-Hessian factor *fac, made from H first when *fac is NULL; the
 * processor's solve without a Hessian when fac is NULL). */
lb_status qz_engine_quantize_module(qz_engine *e, const qz_module *q,
                                    const float *H, lb_gptq_factor **fac,
                                    int64_t nsamples);
/* A GPTQ/RTN result for q by the processor's Hessian-free fallback (RTN
 * on the AutoGPTQ grid), reported with note. */
lb_status qz_engine_quantize_rtn(qz_engine *e, const qz_module *q,
                                 const char *note);

/* The MoE block of layer l (quantize_moe.c): router on the captured MLP
 * input, expert coverage per p->moe_coverage, Hessians per expert, one
 * expert's buffers at a time; the shared expert (Qwen2-MoE) on all tokens.
 * Modules mods[0..n) of the layer. */
lb_status qz_run_moe(qz_engine *e, int l, const qz_module *lm, int n);

/* Work units of qz_run_moe for layer l. */
uint64_t qz_moe_units(const qz_engine *e, int l, const qz_module *lm, int n);

/* Dense tensors a method may change (AWQ folds): the RMSNorms before the
 * attention and the MLP (Gemma: pre_feedforward_layernorm; held as 1 + w,
 * written as w), v_proj's bias, the MoE router [n_experts, dim] and
 * Qwen2-MoE's shared_expert_gate [dim]. */
enum { QZ_DENSE_ATTN_NORM = 0, QZ_DENSE_FFN_NORM = 1, QZ_DENSE_V_BIAS = 2,
       QZ_DENSE_ROUTER = 3, QZ_DENSE_SHEXP_GATE = 4, QZ_DENSE_COUNT = 5 };

/* Progress: add work units (LB_ERR_CANCELLED when the callback says so). */
lb_status qz_engine_progress(qz_engine *e, uint64_t add);
/* Calibration sequence s of the current layer's inputs into dst [T, dim]. */
void qz_engine_act_load(const qz_engine *e, int64_t s, float *dst);
/* The weight of a module as f32 [out, in] (lb_alloc'd). */
lb_status qz_engine_weight_f32(qz_engine *e, const qz_module *q, float **W);
/* Put f32 weights [out, in] (lb_alloc'd, taken over) into the model in
 * place of module q's for the rest of the layer (in-place mode: for
 * good). */
lb_status qz_engine_swap_in(qz_engine *e, const qz_module *q, float *W);
/* Replace a dense tensor of `layer` (QZ_DENSE_*) by data [n] f32
 * (lb_alloc'd, taken over; the tensor becomes F32, keeping its shape);
 * reported to the sink's tensor_done unless from_cache (Gemma norms as the
 * checkpoint stores them: data - 1). */
lb_status qz_engine_set_dense(qz_engine *e, int layer, int which,
                              float *data, int64_t n, bool from_cache);
/* Source tensor name of a QZ_DENSE_* tensor of `layer`. */
void qz_dense_name(const lb_model_config *c, int layer, int which, char *buf,
                   size_t n);
/* Run every calibration sequence through `layer` and copy the inputs of
 * the linears in want[QZ_IN_*] into X[QZ_IN_*] ([ns * T, width] f32 each,
 * allocated here with lb_alloc, NULL where not wanted); the forward stops
 * after the last wanted input. Non-finite inputs: LB_ERR_RANGE naming the
 * layer, sequence and modules. */
lb_status qz_engine_capture(qz_engine *e, int layer,
                            const bool want[QZ_IN_COUNT],
                            float *X[QZ_IN_COUNT]);

/* The GPTQ processor's solve (AWQ+GPTQ reuses it). */
lb_status qz_solve_gptq(qz_engine *e, const qz_module *q, const float *W,
                        const float *H, lb_gptq_factor **fac,
                        lb_gptq_result *res);

/* AWQ processors (quantize_awq.c). */
extern const qz_processor qz_proc_awq, qz_proc_awq_gptq;

/* Validate parameters (and apply the vLLM profile's fixed settings to a
 * copy): *eff receives the parameters actually used. */
lb_status qz_effective_params(const lb_quantize_params *p,
                              lb_quantize_params *eff);

/* The architecture allows the method: --rotate hadamard-r4 on the Llama
 * layout only, --rotate hadamard not on Gemma 2/3 (LB_ERR_UNSUPPORTED
 * naming the architecture and why); AWQ (quantize_awq.c's scaling groups)
 * and GPTAQ/QEP (MoE: per-expert cross statistics, quantize_moe.c) on
 * every layout. */
lb_status qz_check_arch(const lb_model *m, const lb_quantize_params *p);

/* lb_quantize_model with p->fp8 (fp8_ckpt.c): GPTQ onto the FP8 grid over
 * the whole model (qz_run, a sink that keeps each module's FP8 codes and
 * scales), then the FP8 checkpoint of p->fp8 written as `lowbit quantize
 * --method fp8` writes it (temp directory renamed into place). p has
 * passed qz_effective_params (no force) and out_dir lb_quantize_model's
 * checks (not the source, absent or an empty directory). */
lb_status qz_fp8_gptq_checkpoint(const char *model_dir, const char *out_dir,
                                 const lb_quantize_params *p, const lb_calib *calib,
                                 lb_quantize_report *rep);

/* "rtn", "gptq", "awq", "awq+gptq". */
const char *qz_method_name(lb_quant_method m);

/* 10 log10(sum w^2 / sum (w - q)^2) over n values; +inf when equal. */
double qz_snr_db(const float *w, const float *q, int64_t n);

#endif
