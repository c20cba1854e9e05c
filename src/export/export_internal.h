/*
 * export_internal.h — pieces of the GGUF exporter shared by the src/export sources.
 * Not installed.
 */
#ifndef LB_EXPORT_INTERNAL_H
#define LB_EXPORT_INTERNAL_H

#include "lowbit/config.h"
#include "lowbit/export.h"
#include "lowbit/gguf.h"
#include "lowbit/gptq_ckpt.h"
#include "lowbit/safetensors.h"

#include <cjson/cJSON.h>

/* ---- string arena ------------------------------------------------------ */
/* Strings appended into one growing buffer; referenced by offset until the
 * arena is final (ex_arena_strs). */
typedef struct ex_arena {
    char *buf;
    size_t len, cap;
} ex_arena;

/* Append n bytes + NUL; *off_out gets the offset. */
lb_status ex_arena_add(ex_arena *a, const char *s, size_t n, size_t *off_out);
void ex_arena_free(ex_arena *a);

/* ---- tokenizer metadata (ex_vocab.c) ------------------------------------ */

#define EX_MAX_SPECIAL 12

typedef struct ex_vocab {
    bool present;              /* tokenizer keys are written              */
    int add_space_prefix;      /* -1: not written; else 0/1               */
    char model[16];            /* "llama", "gpt2", "none"                 */
    char pre[32];              /* "" = not written                        */
    size_t n_tokens;
    size_t *tok_off;           /* [n_tokens] offsets into arena           */
    size_t *tok_len;           /* [n_tokens]                              */
    float *scores;             /* [n_tokens] or NULL                      */
    size_t n_scored;           /* "llama" path: tokens scored by merge rank */
    int32_t *types;            /* [n_tokens]                              */
    size_t n_merges;
    size_t *merge_off, *merge_len;
    ex_arena arena;
    /* special ids in SpecialVocab's insertion order */
    char special_key[EX_MAX_SPECIAL][48];
    uint32_t special_id[EX_MAX_SPECIAL];
    int n_special;
    /* add_{bos,eos,sep}_token in insertion order */
    char add_key[4][48];
    bool add_val[4];
    int n_add;
    char *chat_template;       /* default template (owned) or NULL        */
    char **tmpl_name, **tmpl_text; /* named templates (owned)             */
    int n_tmpl;
    int norm_nfc, norm_lowercase, norm_strip_accents; /* -1 = not written  */
    char note[256];            /* deliberate differences for the plan     */
    char warning[320];         /* what the GGUF vocabulary model cannot
                                  express (tokenizes differently)          */
} ex_vocab;

/* Build the tokenizer metadata of HF directory `dir` the way
 * convert_hf_to_gguf.py's set_vocab does for architecture `gguf_arch`
 * ("llama" for Llama/Mistral, "qwen2", "qwen3"). cfg_vocab_size is
 * config.json's vocab_size. A directory without tokenizer.json gives
 * model "none" (tokenizer.ggml.model = "none", no other keys). */
lb_status ex_vocab_load(const char *dir, const char *gguf_arch,
                        int64_t cfg_vocab_size, ex_vocab *v);
/* The same from parsed documents (any may be NULL: absent file); dir (may
 * be NULL) is searched for chat_template.jinja/.json; label names the
 * tokenizer in errors. Hostile input: ids bounded by 2^24, vocab_size too
 * (LB_ERR_RANGE). This is the fuzzing entry point. */
lb_status ex_vocab_from_json(const cJSON *tj, const cJSON *tc, const cJSON *cfg,
                             const char *dir, const char *label, bool has_spm_model,
                             const char *gguf_arch, int64_t cfg_vocab_size, ex_vocab *v);
void ex_vocab_free(ex_vocab *v);
/* Write the tokenizer.* keys in the converter's order. */
lb_status ex_vocab_write(const ex_vocab *v, lb_gguf_writer *w);

/* ---- JSON helpers (ex_vocab.c) ----------------------------------------- */
/* Parse dir/name (at most max bytes); *out NULL when the file is absent
 * (not an error). */
lb_status ex_json_load(const char *dir, const char *name, size_t max,
                       cJSON **out);

/* ---- source tensors ---------------------------------------------------- */

typedef enum ex_src_kind {
    EX_SRC_DENSE = 0,  /* one safetensors tensor (F32/F16/BF16)           */
    EX_SRC_GPTQ = 1,   /* a GPTQ linear: qweight/qzeros/scales/g_idx      */
    EX_SRC_ROPE_FREQS = 2, /* generated llama3 rope factors               */
    EX_SRC_STACK = 3,  /* MoE experts stacked into one 3-D tensor
                          (parts[n_parts], dense, same shape)            */
    EX_SRC_ROPE_FACTORS = 4 /* Phi-3 longrope factors (rope_kind 0 long,
                          1 short) from the config                       */
} ex_src_kind;

typedef struct ex_tensor {
    lb_export_tensor info;       /* the public plan entry                 */
    ex_src_kind kind;
    const lb_tensor *dense;      /* EX_SRC_DENSE                          */
    const lb_tensor *qweight, *qzeros, *scales, *g_idx; /* EX_SRC_GPTQ    */
    lb_gptq_linear lin;          /* EX_SRC_GPTQ: checked view of the above */
    int perm_heads;              /* > 0: LlamaModel.permute with this many
                                    heads                                 */
    bool is_weight2d;            /* a 2-D ".weight" the mix may retype     */
    int forced_type;             /* rule / option type, -1 none            */
    bool rule_keep;              /* a rule said "keep"                    */
    int direct_type;             /* GPTQ: exact target or -1              */
    char direct_why[128];        /* GPTQ: why not direct                  */
    const lb_tensor *fp8_scale;  /* EX_SRC_DENSE FP8 weight: its scale
                                    (ex_fp8.c, lowbit/fp8.h)              */
    const void *fp8_q;           /* ... and its lb_fp8_qconfig            */
    /* issue-13 architectures (ex_arch.c) */
    const lb_tensor **parts;     /* EX_SRC_STACK: [n_parts] experts (owned
                                    array, freed with the context)        */
    int n_parts;
    /* EX_SRC_GPTQ experts of a MoE layer stacked into one 3-D weight:
     * [n_parts] prepared 2-D GPTQ modules (owned), written one after the
     * other (row-wise block types: the stacked bytes are the 3-D
     * tensor's); info / direct_type are the stack's, direct only when
     * every expert maps to the same type */
    struct ex_tensor *gparts;
    bool add_one;                /* Gemma norms: written as 1 + w         */
    int rope_kind;               /* EX_SRC_ROPE_FACTORS                   */
    bool bnb_deq;                /* dequantized bitsandbytes weight (ex_bnb.c) */
    /* GPTQ down_proj of a checkpoint with an online Hadamard on its input
     * (meta.rotation.online, ex_gptq.c): dequantized W T^T is multiplied
     * by T back to W and re-quantized (fallback route) */
    bool unrotate_down;
} ex_tensor;

#endif /* LB_EXPORT_INTERNAL_H */
