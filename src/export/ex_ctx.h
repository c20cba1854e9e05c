/*
 * ex_ctx.h — the exporter's working state (one export), shared by
 * ex_plan.c (planning), ex_write.c (GGUF output) and ex_gptq.c (GPTQ
 * modules). Not installed.
 */
#ifndef LB_EX_CTX_H
#define LB_EX_CTX_H

#include "export/export_internal.h"

typedef struct ex_rule {
    char *text;   /* the rule as given                           */
    void *code;   /* compiled PCRE2 regex                         */
    int type;     /* target type, -1 with keep                    */
    bool keep;
} ex_rule;

typedef struct ex_ctx {
    char *dir;            /* input directory                          */
    char *name;           /* general.name                             */
    char arch[16];        /* GGUF architecture                        */
    bool permute;         /* llama: q/k rows permuted                 */
    lb_model_config cfg;
    lb_safetensors *st;   /* NULL for vocab-only                      */
    ex_vocab vocab;
    ex_tensor *t;         /* GGUF order                               */
    size_t n, cap;
    ex_rule *rules;
    int n_rules;
    bool gptq;            /* a GPTQ checkpoint                         */
    void *gptq_state;     /* ex_gptq.c's parsed quantization config    */
    void *fp8_state;      /* ex_fp8.c: lb_fp8_qconfig of an FP8 input  */
    void *bnb_state;      /* ex_bnb.c: a bitsandbytes input            */
    lb_type default_float; /* dense default type (F16 / BF16)          */
    char tied_note[160];
    const char *const *meta_kv; /* opts->meta_kv (borrowed: the caller's
                                   options outlive the context)        */
    int n_meta_kv;
    lb_export_plan *plan; /* owned until handed out                   */
} ex_ctx;

/* ex_plan.c */
lb_status ex_ctx_open(const char *in_path, const lb_export_opts *opts, ex_ctx **out);
void ex_ctx_free(ex_ctx *c);

/* ex_write.c: a writer holding every key and tensor info of the plan (no
 * data yet); also sets plan->file_bytes. */
lb_status ex_build_writer(ex_ctx *c, bool vocab_only, lb_gguf_writer **out);
/* Set plan->file_bytes (builds and drops a writer). */
lb_status ex_plan_layout(ex_ctx *c, bool vocab_only);

/* ex_gptq.c */
/* Detect a GPTQ checkpoint (config.json quantization_config with
 * quant_method "gptq", or quantize_config.json) and parse its config. */
lb_status ex_gptq_detect(ex_ctx *c);
/* Fill a GPTQ tensor's views, shape, bits and direct-route decision from
 * module `module` ("model.layers.0.self_attn.q_proj"). */
lb_status ex_gptq_prepare(ex_ctx *c, ex_tensor *t, const char *module);
/* Dequantize a GPTQ tensor into W [out, in] f32, GGUF row order (the q/k
 * permutation applied). */
lb_status ex_gptq_dequantize(const ex_ctx *c, const ex_tensor *t, float *W);
/* Write the direct-route bytes of a GPTQ tensor (t->info.type) into dst
 * (t->info.nbytes), GGUF row order. */
lb_status ex_gptq_direct(const ex_ctx *c, const ex_tensor *t, void *dst);
void ex_gptq_free(ex_ctx *c);

/* ex_fp8.c: FP8 weight-only inputs (lowbit/fp8.h) */
/* Parse an FP8 quantization_config (quant_method fp8 / compressed-tensors
 * float-quantized) into c->fp8_state; nothing for other inputs. */
lb_status ex_fp8_detect(ex_ctx *c);
/* true for the scale tensors an FP8 input carries beside its weights
 * (suffix "weight_scale_inv" / "weight_scale" / "input_scale"). */
bool ex_fp8_is_aux(const ex_ctx *c, const char *suffix);
/* An F8 weight `name` of module `mod`: find and check its scale into
 * t->fp8_scale. */
lb_status ex_fp8_prepare(ex_ctx *c, ex_tensor *t, const char *mod, const lb_tensor *w);
/* Rows [r0, r0+nr) of an FP8 weight as f32 (src row sr for dst row i). */
lb_status ex_fp8_rows(const ex_tensor *t, const int64_t *perm, int64_t r0, int64_t nr,
                      float *dst);
void ex_fp8_free(ex_ctx *c);
/* ex_arch.c: the issue-13 architectures (Gemma 2/3, Phi-3, MoE) */
bool ex_arch_is_ext(const ex_ctx *c);
lb_status ex_arch_name(ex_ctx *c); /* sets arch (and permute) */
const char *ex_arch_vocab_arch(const ex_ctx *c);
bool ex_arch_map_module(const ex_ctx *c, const char *mod, char *out, size_t n,
                        int *layer, int *expert);
bool ex_arch_add_one(const ex_ctx *c, const char *gguf_base);
lb_status ex_arch_add_expert(ex_ctx *c, const char *base, int e,
                             const lb_tensor *st,
                             lb_status (*push)(ex_ctx *, ex_tensor **));
lb_status ex_arch_check(const ex_ctx *c);
/* GPTQ expert e (module `module`, prepared with ex_gptq_prepare) of the
 * stack `base` ("blk.N.ffn_gate_exps"): start or extend it. */
lb_status ex_arch_add_expert_gptq(ex_ctx *c, const char *base, int e, const char *module,
                                  lb_status (*push)(ex_ctx *, ex_tensor **));
lb_status ex_arch_generated(ex_ctx *c, lb_status (*push)(ex_ctx *, ex_tensor **));
void ex_arch_rope_factors(const ex_ctx *c, int kind, float *out, int64_t n);
lb_status ex_arch_write_kv(const ex_ctx *c, lb_gguf_writer *w);

/* ex_bnb.c: bitsandbytes NF4/FP4/INT8 inputs (lowbit/bnb.h) */
lb_status ex_bnb_detect(ex_ctx *c);
/* absmax, quant_map, nested_*, quant_state blob, SCB, weight_format */
bool ex_bnb_is_aux(const ex_ctx *c, const char *suffix);
/* Check and dequantize a U8/I8 weight; *st becomes its F32 tensor. */
lb_status ex_bnb_prepare(ex_ctx *c, ex_tensor *t, const char *mod, const lb_tensor **st);
void ex_bnb_free(ex_ctx *c);

#endif /* LB_EX_CTX_H */
