/*
 * lowbit/quantize.h — whole-model post-training quantization: RTN and GPTQ
 * with layer-by-layer calibration on the CPU, GPTQ checkpoints written in
 * the AutoGPTQ layout (lowbit/gptq_ckpt.h), resumable runs.
 *
 * Sources followed:
 *  - AutoGPTQ @9f7d370 BaseGPTQForCausalLM.quantize() (auto_gptq/modeling/
 *    _base.py): layer-0 inputs captured once, one calibration sequence per
 *    forward (batch 1), per decoder layer the "true sequential" subsets
 *    [q,k,v] -> [o] -> [gate,up] -> [down] (llama's inside_layer_modules;
 *    all seven in one subset without true_sequential), each subset's
 *    Hessians collected while the layer — with the already-quantized
 *    subsets swapped in as fake-quant (dequantized f32) weights — runs on
 *    every sequence, then GPTQ.fasterquant per module; after all subsets
 *    the quantized layer's outputs become the next layer's inputs.
 *    AutoGPTQ's save_quantized / QuantLinear.pack for the checkpoint
 *    (qweight/qzeros/scales/g_idx, bias stored f16, quantize_config.json).
 *  - GPTQModel (ModelCloud) for damp auto-increment, checkpoint_format
 *    gptq_v2, quantization_config "meta", "lm_head" and "dynamic".
 *  - GPTQ's data loaders (IST-DASLab/gptq datautils.py get_wikitext2) for
 *    calibration windows: random window starts in one token stream.
 *  - ../shared/reference/gptq_model/meta.json for the exact protocol that
 *    lowbit reproduces (tinystories-656k: GPTQ 41.4751, RTN 43.0408).
 *
 * Hessians of modules that read the same input (q/k/v; gate/up) are
 * computed once and shared: AutoGPTQ computes identical copies.
 * Activation memory: nsamples x seqlen x hidden_size values (f32, or f16
 * with act_f16) plus one [seqlen] working copy; logged at the start
 * ("calibration activations: 128 x 2048 x 4096 f32 = 4.0 GiB"); with
 * act_spill_dir they are a file there instead, one sequence resident at a
 * time.
 */
#ifndef LOWBIT_QUANTIZE_H
#define LOWBIT_QUANTIZE_H

#include "lowbit/fp8.h"
#include "lowbit/gptq.h"
#include "lowbit/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Calibration data                                                          */
/* ------------------------------------------------------------------------ */

/* nsamples token sequences of seqlen ids each. */
typedef struct lb_calib {
    int32_t *ids;     /* [nsamples, seqlen] row-major (malloc'd, owned)   */
    int64_t nsamples, seqlen;
} lb_calib;

/* Read pre-tokenized ids: a raw little-endian int32 file of
 * [rows, seqlen] (row-major, rows = size / (4 * seqlen)), such as
 * ../shared/reference/gptq_model/calib_ids.i32 ([128, 128]). The first
 * nsamples rows are used (nsamples <= 0: all). Ids are checked against
 * the vocabulary later, by the forward. Errors: LB_ERR_IO/NOT_FOUND,
 * LB_ERR_FORMAT (size not a whole number of rows, naming both numbers),
 * LB_ERR_RANGE (fewer rows than nsamples), LB_ERR_INVALID_ARG. */
lb_status lb_calib_load_ids(const char *path, int64_t seqlen,
                            int64_t nsamples, lb_calib *out);

/* Tokenizer callback for text calibration: encode text[0..len) with the
 * model's special-token post-processing (add_special = true, e.g. BOS);
 * *ids is malloc'd (the caller frees it). */
typedef lb_status (*lb_tokenize_fn)(void *user, const char *text, size_t len,
                                    int32_t **ids, size_t *n);

/* Sample calibration windows from text files, documented sampling:
 *  1. Documents: a file named *.jsonl holds one JSON object per non-empty
 *     line whose string field "text" is one document (lines without it
 *     are an LB_ERR_FORMAT error naming file and line); any other file is
 *     one document (its bytes as they are).
 *  2. Each document is tokenized on its own with tok (so BOS starts each
 *     one when the tokenizer adds it) and the id lists are concatenated,
 *     in file and line order, into one stream of n ids.
 *  3. n must be >= seqlen, else LB_ERR_RANGE: "calibration text too short:
 *     N tokens in D documents, at least seqlen = M needed" (the message
 *     also gives nsamples*seqlen, the size without overlapping windows).
 *  4. Window k (k = 0..nsamples-1) starts at
 *     lb_rng_next(&rng) % (n - seqlen + 1), rng = lb_rng_seed(seed)
 *     (xoshiro256**, lowbit/sample.h) — windows may overlap (as GPTQ's
 *     loaders do); the ids of the window are copied as they are.
 * Same files, tokenizer and seed give the same ids on every machine.
 * Errors: file errors, tokenizer errors, LB_ERR_RANGE, LB_ERR_INVALID_ARG
 * (nsamples/seqlen < 1, no files). */
lb_status lb_calib_sample_text(const char *const *paths, int n_paths,
                               lb_tokenize_fn tok, void *tok_user,
                               int64_t nsamples, int64_t seqlen, uint64_t seed,
                               lb_calib *out);

void lb_calib_free(lb_calib *c);

/* ------------------------------------------------------------------------ */
/* Parameters                                                                */
/* ------------------------------------------------------------------------ */

typedef enum lb_quant_method {
    LB_QUANT_RTN = 0, /* the AutoGPTQ grid alone, no calibration          */
    LB_QUANT_GPTQ = 1,
    /* AWQ (Lin et al. 2023, AutoAWQ's AwqQuantizer): per scaling group an
     * activation-aware per-channel scale (20-ratio grid search), folded
     * into the previous RMSNorm / linear; then the clip search (unless
     * awq_no_clip); then AutoAWQ's grid (zero point unless sym). */
    LB_QUANT_AWQ = 2,
    /* AWQ's scales folded (no clip search), then GPTQ on the scaled
     * weights (llm-compressor's AWQ + GPTQ recipe) */
    LB_QUANT_AWQ_GPTQ = 3,
    /* GPTAQ (Li et al. 2025, GPTQModel's gptaq.py): GPTQ on the Hessian of
     * the replayed inputs X~ plus the asymmetric term built from the
     * native-minus-replayed cross statistics (X - X~) X~^T, so the
     * quantized module's output on X~ approaches the full-precision
     * module's on the native X (gptaq_alpha). Written as a plain GPTQ
     * checkpoint. */
    LB_QUANT_GPTAQ = 4
} lb_quant_method;

/* Rotation before quantization (--rotate). */
typedef enum lb_rotate_kind {
    LB_ROTATE_NONE = 0,
    /* QuaRot/SpinQuant's R1: RMSNorm weights folded into the linears that
     * read them, the residual stream rotated by a random orthogonal
     * Hadamard matrix (lb_model_rotate_hadamard). lb_quantize_model writes
     * the GPTQ layout with meta.rotation (docs/quantize.md); the AWQ
     * layout, a quantized lm_head and profiles are refused
     * (LB_ERR_UNSUPPORTED). */
    LB_ROTATE_HADAMARD = 1,
    /* R1 as above plus QuaRot's R4: down_proj's weight becomes W_down T^T
     * and its input T h at run time (lb_model_rotate_online_down; T of
     * order intermediate_size, lowbit/hadamard.h). The checkpoint lists
     * the transform in meta.rotation.online; lowbit's runtime applies it,
     * the GGUF export folds it back into down_proj (fallback route). */
    LB_ROTATE_HADAMARD_R4 = 2
} lb_rotate_kind;

typedef enum lb_quant_profile {
    LB_QUANT_PROFILE_NONE = 0,
    /* vLLM CPU W4A8 recipe: symmetric 4-bit only (zero fixed at 8),
     * per-group scale search minimising the squared error (the grid's MSE
     * search with norm 2), lm_head quantized and untied
     * (tie_word_embeddings false, model.embed_tokens.weight written in
     * BF16), quantization_report.json with per-tensor SNR. */
    LB_QUANT_PROFILE_VLLM_W4A8 = 1
} lb_quant_profile;

typedef enum lb_moe_coverage {
    LB_MOE_COVERAGE_ALL = 0,
    LB_MOE_COVERAGE_ROUTED = 1
} lb_moe_coverage;

/* Module rules ("--modules"): each rule is "REGEX" or "REGEX=SPEC".
 * REGEX (PCRE2 syntax) is searched (unanchored) in the full module name,
 * e.g. "model.layers.3.mlp.down_proj" or "lm_head"; the FIRST rule that
 * matches decides; modules no rule matches use the global settings.
 * SPEC is "skip" (keep the module dense) or ':'-separated items:
 *   2|3|4|8      bits          gN / g-1   group size (N >= 1)
 *   sym / asym   grid          act / noact  desc_act on / off
 * e.g. "mlp\.down_proj=8", "self_attn=4:g32:asym", "layers\.0\.=skip",
 * and a final catch-all ".*=skip" restricts quantization to the modules
 * matched before it. Candidates are the seven linears of every layer (Phi-3:
 * self_attn.qkv_proj, o_proj, mlp.gate_up_proj, down_proj; MoE layers:
 * q/k/v/o_proj, mlp.experts.E.{gate,up,down}_proj — Mixtral's
 * block_sparse_moe.experts.E.{w1,w3,w2} — and mlp.shared_expert.*), plus
 * lm_head with lm_head = true; rules never add candidates. In the
 * checkpoint the rules become quantization_config.dynamic entries
 * "-:.*(?:REGEX)" / "+:.*(?:REGEX)" (GPTQModel/vLLM match with re.match). */
typedef struct lb_quantize_params {
    lb_quant_method method;   /* GPTQ                                     */
    int bits;                 /* 4                                         */
    int group_size;           /* 128 (-1: one group per output row)        */
    bool sym;                 /* true                                      */
    bool desc_act;            /* false (GPTQ only)                         */
    bool static_groups;       /* false (GPTQ only)                         */
    double damp_percent;      /* 0.01                                      */
    double damp_auto_increment; /* 0.0025 (GPTQModel); 0: no retries      */
    bool mse;                 /* grid MSE search (AutoGPTQ Quantizer mse)  */
    float mse_norm;           /* 2.4 (AutoGPTQ); the vLLM profile uses 2  */
    bool true_sequential;     /* true                                      */
    bool lm_head;             /* quantize lm_head too (unties embeddings)  */
    bool hessian_f64;         /* accumulate H in double (default: float32
                                 as AutoGPTQ)                              */
    bool act_f16;             /* keep calibration activations in f16       */
    bool calib_bf16;          /* calibration forwards and replays in BF16 x
                                 BF16 with f32 accumulation (AVX512_BF16;
                                 lb_context_params.bf16_activations), and
                                 the Hessians' x x^T too (lb_gptq_hessian_
                                 use_bf16; not with hessian_f64): ~2x
                                 faster forwards, codes differ from the f32
                                 path (a few %: docs/quantize.md); f32
                                 products on CPUs without AVX512_BF16
                                 (report says)                            */
    int64_t calib_cache_mib;  /* -1 (auto): memory for keeping each
                                 layer's attention outputs and MLP
                                 activations between its true-sequential
                                 passes (T x (n_heads * head_dim +
                                 intermediate_size) per sequence, bf16
                                 with calib_bf16, else f32) instead of
                                 computing them again: at most a quarter
                                 of the machine's RAM; 0: off; N: at most
                                 N MiB. Sequences that do not fit are
                                 recomputed. Same bytes either way.       */
    const char *act_spill_dir; /* NULL (default): the calibration buffers
                                 are memory. A directory: the calibration
                                 activations ([nsamples, seqlen, hidden],
                                 f32 or f16), the calibration cache above
                                 and GPTQ-family native streams (GPTAQ,
                                 QEP: the unquantized model's layer inputs
                                 and the current layer's linear inputs)
                                 live in an unlinked temporary file there,
                                 its blocks reserved at the start (a full
                                 disk fails then, LB_ERR_IO), mapped
                                 shared; each sequence's pages leave the
                                 process's RSS as soon as a pass is done
                                 with them and stay in the page cache (or
                                 go to the disk when memory is short).
                                 Costs: disk space = report spill_bytes,
                                 page faults per pass, and disk reads where
                                 the page cache cannot hold them. Needs a
                                 disk file system (tmpfs keeps the pages in
                                 memory). Same output bytes. Not for AWQ's
                                 captured layer inputs (memory).           */
    const char *const *rules; /* module rules, see above (not owned)       */
    int n_rules;
    lb_gptq_format format;    /* LB_GPTQ_FORMAT_V1 ("gptq")                */
    lb_quant_profile profile;
    int n_threads;            /* <= 0: all CPUs                            */
    uint64_t max_shard_bytes; /* 4e9; 0: one model.safetensors            */
    bool resume;              /* continue a run left in OUT_DIR.tmp-*     */
    bool force;               /* replace a non-empty OUT_DIR               */
    bool write_report;        /* OUT_DIR/quantize_report.json              */
    uint64_t calib_seed;      /* recorded in the config's meta only        */
    double gptaq_alpha;       /* GPTAQ: weight of the asymmetric term
                                 (0.25, GPTQModel's default)               */
    bool qep;                 /* QEP (Arai and Ichikura 2025) before GPTQ
                                 or RTN: W* = W + qep_alpha W (X - X~) X~^T
                                 (X~ X~^T + damp)^-1 (--qep)               */
    double qep_alpha;         /* 0.5 (the QEP paper's / qwix's default)    */
    lb_rotate_kind rotate;    /* LB_ROTATE_NONE                            */
    uint64_t rotate_seed;     /* random signs of the Hadamard rotation (0) */
    bool awq_no_clip;         /* AWQ: skip the clip search (--no-clip)     */
    int64_t awq_min_tokens;   /* AWQ: fewer calibration tokens than this
                                 (0: 64) -> sparse coverage: no scale or
                                 clip search, the module is quantized
                                 plainly and its report says so           */
    /* MoE expert coverage (issue 13; Qwen3-MoE, Qwen2-MoE, Mixtral):
     * ALL (default, GPTQModel's routing override): every expert's
     * Hessians see every calibration token (gate/up: the MoE block's
     * input; down: act(gate x) * up x of that expert on all tokens) while
     * the replay that feeds the next layer uses the real routing; ROUTED:
     * only the tokens the router sends to the expert, and an expert with
     * fewer than moe_min_tokens of them is quantized by RTN (its report
     * note says so). The routers (mlp.gate / block_sparse_moe.gate) and
     * Qwen2-MoE's shared_expert_gate stay dense (AWQ multiplies their
     * columns by the MLP group's scales, so routing is unchanged). AWQ:
     * the experts' loss, down_proj input and clip statistics follow the
     * same coverage; under ROUTED an expert below moe_min_tokens gets no
     * up -> down scale and no clip search (report note). */
    lb_moe_coverage moe_coverage;
    int64_t moe_min_tokens;   /* ROUTED: RTN below this (0: 32 tokens)     */
    /* GPTQ onto the FP8 grid (NULL: integer codes): each module's scales
     * found first from its weight by fp8_rule in fp8's layout (as `lowbit
     * quantize --method fp8`), then GPTQ's error feedback with those
     * scales fixed (lb_gptq_fp8_grid); lb_quantize_model writes the FP8
     * checkpoint of fp8 (lowbit/fp8.h: weight + weight_scale_inv or
     * weight_scale, the same quantization_config) instead of a GPTQ one.
     * Method GPTQ only (desc_act allowed); any linear shape; not with
     * module rules, lm_head, a profile, rotation, QEP, static_groups,
     * mse, resume or force (LB_ERR_INVALID_ARG), nor MoE / fused-module
     * architectures (LB_ERR_UNSUPPORTED). bits/group_size/sym are not
     * used; one model.safetensors (and quantize_report.json when
     * write_report: bits 8, group_size null, an "fp8" object). */
    const lb_fp8_qconfig *fp8;
    lb_fp8_scale_rule fp8_rule; /* LB_FP8_RULE_MSE (0)                    */
    lb_progress progress;     /* stage text + done/total work units        */
} lb_quantize_params;

/* The defaults above (AutoGPTQ's: 4-bit sym g128, damp 0.01, true
 * sequential; GPTQ v1 checkpoint; 4 GB shards). */
void lb_quantize_default_params(lb_quantize_params *p);

/* ------------------------------------------------------------------------ */
/* Report                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct lb_quantize_module_report {
    char name[160];       /* "model.layers.0.self_attn.q_proj", "lm_head" */
    int layer;            /* -1 for lm_head                               */
    bool quantized;       /* false: kept dense (see note)                 */
    char note[128];       /* why it stayed dense; for a quantized module
                             whose in_features is not a multiple of its
                             group_size, "in_features N is not a multiple
                             of group_size G: the last group has R
                             columns"; "" otherwise                       */
    int bits, group_size;
    bool sym, desc_act;
    int64_t out_features, in_features;
    double loss;          /* GPTQ: sum over weights of (w-q)^2/Hinv_cc^2/2
                             (AutoGPTQ's Losses.sum()); RTN: 0            */
    double avg_loss;      /* loss / nsamples (AutoGPTQ's logged value)    */
    double damp_percent;  /* damp_percent used (after auto-increments)    */
    int n_damp_retries;
    int64_t n_dead;       /* columns with H[c,c] == 0                     */
    int64_t nsamples;     /* sequences in its Hessian (0 for RTN)         */
    double seconds;       /* solve time                                   */
    double snr_db;        /* 10 log10(sum w^2 / sum (w - w_q)^2), w_q as
                             stored (f16 scales in a checkpoint, f32 scales
                             in lb_quantize_model_inplace); inf if exact  */
    bool resumed;         /* taken from a previous run (--resume)         */
    /* AWQ: the scale ratio chosen for the module's scaling group (k/20;
     * -1: not scaled), the groups whose max the clip search shrank, and
     * whether the module was quantized plainly for sparse calibration
     * coverage (note says why) */
    double awq_ratio;
    int64_t awq_clipped;
    bool awq_plain;
} lb_quantize_module_report;

typedef struct lb_quantize_report {
    lb_quantize_module_report *modules; /* [n_modules] (owned)            */
    int n_modules;
    int n_layers, layers_resumed;
    int64_t nsamples, seqlen;
    uint64_t activation_bytes;  /* calibration activations held           */
    int64_t cache_sequences;    /* sequences in the calibration cache
                                   (calib_cache_mib)                       */
    uint64_t cache_bytes;       /* its size                               */
    uint64_t spill_bytes;       /* bytes placed in the act_spill_dir file
                                   (0 without it): activations, cache,
                                   native streams                          */
    bool calib_bf16;            /* the forwards ran in BF16 (calib_bf16
                                   asked and the CPU has AVX512_BF16)     */
    double seconds;             /* wall time of the whole run             */
    /* where this run's time went (s; resumed layers add only replays):
     * Hessian accumulation (lb_gptq_hessian_add_batch: the X^T X sgemm),
     * the calibration forwards feeding it (excluding the accumulation),
     * the per-module solves (GPTQ or RTN, as modules[].seconds), the
     * replays that make the next layer's inputs                          */
    double hessian_seconds, forward_seconds, solve_seconds, replay_seconds;
    int64_t quantized_params;   /* weights in quantized modules           */
    double bits_per_weight;     /* (qweight + qzeros + scales + g_idx bits)
                                   / quantized_params                      */
    double snr_min_db, snr_max_db, snr_mean_db; /* over quantized modules */
    int n_shards;               /* .safetensors files written             */
    uint64_t tensor_bytes;      /* bytes of tensor data written           */
} lb_quantize_report;

void lb_quantize_report_free(lb_quantize_report *r);

/* The report as JSON (malloc'd, NUL-terminated, pretty-printed):
 * {"method", "bits", "group_size", "sym", "desc_act", ..., "nsamples",
 *  "seqlen", "seconds", "timing": {"hessian_s", "forward_s", "solve_s",
 *  "replay_s"}, "bits_per_weight", "snr_db": {min, max, mean},
 *  "modules": [{"name", "quantized", "note", "bits", "group_size", "sym",
 *  "desc_act", "shape", "loss", "avg_loss", "damp_percent",
 *  "damp_retries", "dead_columns", "nsamples", "seconds", "snr_db",
 *  "resumed"}...]} (non-finite numbers as null). p may be NULL. */
char *lb_quantize_report_json(const lb_quantize_report *r,
                              const lb_quantize_params *p);

/* ------------------------------------------------------------------------ */
/* Running                                                                   */
/* ------------------------------------------------------------------------ */

/* Quantize the HF checkpoint in model_dir and write a GPTQ checkpoint to
 * out_dir (AWQ methods: the AutoAWQ GEMM layout when p->format resolves
 * to LB_GPTQ_FORMAT_AWQ — the default for 4-bit LB_QUANT_AWQ /
 * LB_QUANT_AWQ_GPTQ: NAME.qweight I32 [in, out/8], qzeros I32 [in/group,
 * out/8], scales F16 [in/group, out] (lowbit/gptq.h), config.json
 * quantization_config {quant_method "awq", version "gemm", bits,
 * group_size, zero_point, modules_to_not_convert, meta} and
 * quant_config.json instead of quantize_config.json; the RMSNorm weights
 * (and v_proj bias) AWQ scaled are written in F32 in place of the
 * source's. Other bits use the GPTQ v2 layout with meta.method "awq".
 * The AWQ layout refuses, before any work (LB_ERR_INVALID_ARG naming the
 * module): module rules other than skip, a group_size that does not
 * divide in_features, a quantized lm_head, bits other than 4).
 *
 * Output (built in "OUT_DIR.tmp-XXXXXX" beside OUT_DIR, renamed to OUT_DIR
 * only when complete; a non-empty OUT_DIR is refused unless p->force):
 *  - model.safetensors, or model-0000i-of-0000N.safetensors +
 *    model.safetensors.index.json above p->max_shard_bytes; metadata
 *    {"format": "pt", "quantizer": "lowbit:VERSION"}; for each quantized
 *    module NAME.qweight/qzeros/scales(f16)/g_idx (+ NAME.bias in f16, as
 *    AutoGPTQ); every other tensor copied in its dtype (embeddings, norms,
 *    dense lm_head); with a quantized lm_head on a tied model
 *    model.embed_tokens.weight is written (BF16 under the vLLM profile);
 *  - config.json: the model's plus "quantization_config" {quant_method
 *    "gptq", bits, group_size, desc_act, sym, damp_percent,
 *    damp_auto_increment, true_sequential, static_groups, lm_head,
 *    checkpoint_format, [dynamic], meta {quantizer "lowbit:VERSION", uri,
 *    method "gptq"|"rtn", mse, calibration}} and tie_word_embeddings false
 *    when lm_head is quantized; quantize_config.json (AutoGPTQ's
 *    BaseQuantizeConfig keys + the same extras);
 *  - tokenizer.json, tokenizer_config.json, special_tokens_map.json,
 *    generation_config.json, tokenizer.model, vocab.json, merges.txt,
 *    added_tokens.json, chat_template.jinja copied when present;
 *  - quantize_report.json (p->write_report), quantization_report.json
 *    (vLLM profile).
 *
 * Resume: after each decoder layer its results go to
 * OUT_DIR.tmp-XXXXXX/layers/layer-NNNNN.safetensors (packed codes, zero
 * points, float32 scales, g_idx, per-module report), written atomically,
 * beside lowbit-state.json (the settings, model path and a hash of the
 * calibration ids). With p->resume a temp directory of a previous run with
 * the same settings (checkpoint_format, shard size, threads and report
 * flags may differ) is reused: its finished layers are not quantized
 * again; their dequantized weights (float32 scales, so bit-identical to
 * the first run) are swapped in and replayed to recompute the next
 * layer's calibration inputs — the output is byte-identical to an
 * uninterrupted run. A failed or cancelled run keeps its temp directory
 * when at least one layer finished (and says so in the error message).
 * A killed run (SIGKILL, power loss) is resumable the same way: layer
 * files are committed by rename after fsync, and a resumed directory is
 * first cleared of everything but the state file and layers/ (files a
 * killed final assembly may have left); OUT_DIR itself only appears,
 * complete, by the final rename.
 *
 * calib: required for GPTQ (ignored for RTN). rep (optional) is filled on
 * success. Memory: the model is mmap'ed; one linear at a time is
 * converted to f32 (plus the solver's work space, lowbit/gptq.h); the
 * quantized layer's dequantized f32 weights are held until the layer has
 * been replayed, then freed; calibration activations as stated above.
 * Bad numbers (checked, never passed on):
 *  - NaN/Inf in any F32/F16/BF16 *.weight / *.bias tensor of model_dir:
 *    LB_ERR_FORMAT before any work, naming the file, the tensor and the
 *    element ("model.safetensors: tensor model.layers.1.mlp.up_proj.weight
 *    [5, 7] = nan is not finite: ..."); nothing is created;
 *  - a linear's calibration input that is not finite (the layer produced
 *    NaN/Inf: finite weights overflowing float32): LB_ERR_RANGE naming the
 *    layer, the calibration sequence and the module(s) reading it
 *    ("layer 0, calibration sequence 0: the input of
 *    model.layers.0.mlp.gate_proj/up_proj is not finite (token t, column c
 *    = nan) ..."); a replayed layer output (the next layer's input) that is
 *    not finite, or beyond 65504 with act_f16: LB_ERR_RANGE naming the
 *    layer and sequence;
 *  - a Hessian that damping cannot make positive definite (auto-increment
 *    0, or damp_percent reaching 1): LB_ERR_RANGE from lb_gptq_quantize
 *    prefixed with the module name, giving the damp tried; no RTN
 *    fallback. Retries that succeeded are in the module report
 *    (n_damp_retries, damp_percent) and quantize_report.json.
 * Group sizes: a module whose in_features is not a multiple of its
 * group_size (including group_size > in_features) is quantized in
 * AutoGPTQ's layout — ceil(in / group_size) groups, g_idx = c /
 * group_size, the last group shorter — with a note in its report and one
 * warning per run (AutoGPTQ and lowbit load it; vLLM, Marlin and ExLlama
 * kernels refuse it); under the vllm-w4a8 profile it is an
 * LB_ERR_INVALID_ARG error naming the module, before any work.
 * Errors: LB_ERR_INVALID_ARG (parameters, rules, out_dir not empty,
 * missing calibration), LB_ERR_FORMAT (non-finite weights, above),
 * LB_ERR_RANGE (non-finite activations or damping, above; a GPTQ v1
 * checkpoint cannot hold a zero point of 0 — asymmetric groups without
 * negative weights: the message names the module and suggests gptq_v2),
 * loader, forward, solver and I/O errors, LB_ERR_CANCELLED (progress
 * callback). */
lb_status lb_quantize_model(const char *model_dir, const char *out_dir,
                            const lb_quantize_params *p, const lb_calib *calib,
                            lb_quantize_report *rep);

/* The same algorithm on a loaded model, in memory: every quantized linear
 * (and lm_head) is replaced by its dequantized float32 weights
 * (fake-quant, float32 scales: the figures of
 * ../shared/reference/gptq_model "fakequant_fp32"); a quantized lm_head on
 * tied embeddings unties them. Nothing is written (out_dir options are
 * ignored); rep optional. Memory: the dequantized f32 weights stay in the
 * model. Errors as lb_quantize_model, except that non-finite weights are
 * found per quantized module (LB_ERR_INVALID_ARG naming the module and
 * "W[r, c] = nan is not finite"), or as non-finite activations. */
lb_status lb_quantize_model_inplace(lb_model *m, const lb_quantize_params *p,
                                    const lb_calib *calib,
                                    lb_quantize_report *rep);

/* Rotate m's residual stream in memory (QuaRot/SpinQuant R1; the function
 * is unchanged in exact arithmetic): every RMSNorm weight folded into the
 * linears that read it (q/k/v, gate/up, lm_head: W[:, c] *= g[c]) and set
 * to ones; Q = T diag(s) with T the orthogonal Hadamard transform of order
 * n = hidden_size of lowbit/hadamard.h (Sylvester / sqrt(n) for a power of
 * two, (H_m (x) H_p) / sqrt(n) with a Paley H_m otherwise, e.g. 896 =
 * 28 * 32) and s_c = -1 where bit 63 of the c-th splitmix64 draw from
 * `seed` is set; embedding rows and the readers' rows become
 * x Q, the writers (o_proj, down_proj) Q^T W; tied embeddings are untied.
 * Computed in double, stored F32 (the rotated tensors become F32).
 * Qwen3's q_norm/k_norm and q/k/v biases are unchanged. No online
 * transform is needed (QuaRot's R2/R4 are not applied). Phi-3: the fused
 * qkv/gate_up rows are readers. MoE layers: the router, every expert's and
 * the shared expert's gate/up and shared_expert_gate are readers (with
 * post_attention_layernorm folded), every expert's and the shared
 * expert's down_proj writers.
 * Errors: LB_ERR_UNSUPPORTED (hidden_size not an order lowbit/hadamard.h
 * builds, naming it; Gemma 2/3, whose post-sublayer norms do not commute
 * with the rotation), LB_ERR_INVALID_ARG (shapes, non-F32 norms), LB_ERR_NOMEM. On error
 * the model may be partly rotated: free it. */
lb_status lb_model_rotate_hadamard(lb_model *m, uint64_t seed);

/* QuaRot's R4 (online Hadamard on down_proj's input) on m in memory:
 * every layer's down_proj W [dim, ff] becomes W T^T (each row w -> T w, in
 * double, stored F32) and m->config.online_hadamard_down is set, so the
 * forward computes down_proj(T h) = W h: the function is unchanged in
 * exact arithmetic. T: lb_hadamard_init(intermediate_size) (the Paley /
 * Sylvester Kronecker construction of lowbit/hadamard.h). Errors:
 * LB_ERR_UNSUPPORTED (architecture other than Llama/Mistral/Qwen2/Qwen3,
 * or an intermediate_size without a supported factorisation, naming it),
 * LB_ERR_INVALID_ARG (already applied, shapes), LB_ERR_NOMEM. On error
 * the model may be partly rotated: free it. */
lb_status lb_model_rotate_online_down(lb_model *m);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_QUANTIZE_H */
