/*
 * lowbit/export.h — export a model to GGUF: a dense Hugging Face checkpoint
 * (F32/F16/BF16 safetensors) or a GPTQ checkpoint (AutoGPTQ / GPTQModel
 * layout), in one streaming pass, with a per-tensor plan.
 *
 * Sources followed (llama.cpp 0.7.0, Debian 1:0.7.0):
 *  - convert_hf_to_gguf.py (conversion/base.py TextModel, llama.py
 *    LlamaModel, qwen.py Qwen2Model/Qwen3Model) and gguf-py 0.7.0
 *    (constants.py key names, vocab.py SpecialVocab / LlamaHfVocab,
 *    gguf_writer.py): architecture keys, tensor names and order, the q/k
 *    row permutation, tokenizer metadata;
 *  - src/llama-quant.cpp (through lowbit/ftype.h): the per-tensor type mix
 *    of a file type, the row-size fallbacks;
 *  - ggml-quants.c (through lowbit/quants.h): every quantizer, so Q4_0,
 *    Q8_0 and the K-quants are byte-identical to llama-quantize's.
 *
 * Routes (one per output tensor, see lb_export_route):
 *   keep      written in a float type: copied, or converted between
 *             F32/F16/BF16 (norms, biases, embeddings, dense weights at
 *             --qtype F32/F16/BF16);
 *   direct    a GPTQ linear whose codes map onto a GGUF block type without
 *             changing its dequantized weights:
 *               4-bit, every zero 8          -> Q4_0, d = scale (fp16 as
 *                                               stored), q = code: exact;
 *               4-bit, other zeros           -> Q4_1, d = scale,
 *                                               m = fp16(-scale * zero):
 *                                               within fp16 rounding of m;
 *               8-bit, every zero 128        -> Q8_0, q = code - 128: exact;
 *             needs every aligned 32-column block of a row in one group
 *             (desc_act false, or a g_idx that is constant on 32-blocks,
 *             e.g. static groups; group_size a multiple of 32 or -1, where
 *             -1's single scale repeats in every block);
 *   mixed     a GPTQ linear that cannot go direct (2/3 bits, act-order
 *             g_idx, 8-bit asymmetric) or that a module rule retypes:
 *             dequantized exactly, then quantized by lowbit's quantizer to
 *             its own type: 2 -> Q2_K, 3 -> Q3_K, 4 -> Q4_K, 8 -> Q8_0
 *             (rows not a multiple of 256: llama.cpp's fallbacks Q4_0,
 *             Q4_0, Q5_0);
 *   fallback  a dense (or dequantized) tensor quantized by lowbit's
 *             quantizer to the type the --qtype mix gives it (llama.cpp's
 *             per-tensor rules: output Q6_K, attn_v/ffn_down raised on
 *             some layers for the _M mixes, ...).
 *
 * Llama-architecture q_proj/k_proj rows (weights, GPTQ codes, scales,
 * zeros, biases) are permuted the way convert_hf_to_gguf.py's
 * LlamaModel.permute does (reshape(n_head, 2, rows/n_head/2, cols)
 * .swapaxes(1, 2)): GGUF row h*hd + 2i + j comes from HF row
 * h*hd + j*hd/2 + i. Qwen2/Qwen3 (NEOX RoPE in llama.cpp) are not permuted.
 *
 * Memory: tensors are produced one at a time in GGUF order, each from its
 * source view in the mmap'd checkpoint into a buffer of its own size (plus
 * an f32 copy when it is converted or quantized); the source pages of a
 * finished tensor are released (madvise), so peak RSS stays near the
 * largest tensor's buffers. Output is written atomically (lb_atomic_*).
 */
#ifndef LOWBIT_EXPORT_H
#define LOWBIT_EXPORT_H

#include "lowbit/core.h"
#include "lowbit/ftype.h"
#include "lowbit/gguf.h"
#include "lowbit/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lb_export_route {
    LB_EXPORT_ROUTE_KEEP = 0,
    LB_EXPORT_ROUTE_DIRECT = 1,
    LB_EXPORT_ROUTE_MIXED = 2,
    LB_EXPORT_ROUTE_FALLBACK = 3,
    LB_EXPORT_ROUTE_COUNT_ = 4
} lb_export_route;

/* "keep", "direct", "mixed", "fallback" ("?" otherwise). */
const char *lb_export_route_name(lb_export_route r);

typedef enum lb_export_mode {
    /* GPTQ input: every quantized linear direct where it can, mixed where
     * it cannot; other tensors keep their type (or --qtype's mix when
     * given). Dense input: the same as DEQUANTIZE. */
    LB_EXPORT_MODE_AUTO = 0,
    /* GPTQ input only: every quantized linear must go direct; the plan
     * fails (LB_ERR_UNSUPPORTED, naming the module and why) otherwise. */
    LB_EXPORT_MODE_DIRECT = 1,
    /* As AUTO, and module rules (opts.rules) may retype any tensor; for a
     * GPTQ input the rules may also send direct-capable modules elsewhere. */
    LB_EXPORT_MODE_MIXED = 2,
    /* Every weight is dequantized (GPTQ) or read (dense) as f32 and written
     * as the --qtype mix says: the fallback route for everything. */
    LB_EXPORT_MODE_DEQUANTIZE = 3
} lb_export_mode;

/* "auto", "direct", "mixed", "dequantize"; parse returns -1 if unknown. */
const char *lb_export_mode_name(lb_export_mode m);
int lb_export_mode_from_name(const char *name);

/* A --qtype: a llama-quantize file type with its per-tensor mix, or a plain
 * K-quant type applied to every quantizable tensor. */
typedef struct lb_export_qtype {
    lb_ftype ftype; /* file type whose mix is applied                     */
    bool pure;      /* every quantizable tensor gets the base type        */
} lb_export_qtype;

/* Parse a --qtype name (case-insensitive):
 *   Q4_0 Q4_1 Q8_0 Q2_K Q6_K Q3_K_M Q4_K_M Q5_K_M F16 BF16 F32 — the
 *     llama-quantize file type of that name and its mix (e.g. Q4_0 puts
 *     output.weight in Q6_K, as llama-quantize does);
 *   Q3_K Q4_K Q5_K — every quantizable tensor of that type (llama-quantize
 *     --pure; NOTE llama-quantize itself reads these three names as
 *     aliases of the _M mixes).
 * Errors: LB_ERR_INVALID_ARG (NULL), LB_ERR_UNSUPPORTED (other names). */
lb_status lb_export_qtype_parse(const char *name, lb_export_qtype *out);
/* Name as accepted by lb_export_qtype_parse. Never NULL. */
const char *lb_export_qtype_name(lb_export_qtype q);

typedef struct lb_export_opts {
    lb_export_mode mode;
    const char *qtype;     /* --qtype name, NULL = default: GPTQ input: no
                              mix (unquantized tensors keep their type);
                              dense input: the highest-fidelity 16-bit type
                              of the checkpoint (convert_hf_to_gguf's
                              "auto": BF16 if the first 2-D tensor is BF16,
                              else F16)                                     */
    int output_type;       /* lb_type for output.weight, -1 = the mix's    */
    int embedding_type;    /* lb_type for token_embd.weight, -1 = the mix's */
    /* Module rules "REGEX=SPEC", first match wins; REGEX (PCRE2) is
     * searched unanchored in the HF tensor name without ".weight"
     * ("model.layers.3.mlp.down_proj", "lm_head", "model.embed_tokens");
     * SPEC is a GGUF type name (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K
     * Q5_K Q6_K F16 BF16 F32), a bit count (2 3 4 5 6 8 -> Q2_K Q3_K Q4_K
     * Q5_K Q6_K Q8_0; 16 -> F16) or "keep" (the route the mode would take
     * without rules). Only 2-D weights are retyped; a rule on a GPTQ
     * module makes it "mixed" unless SPEC is its direct type. */
    const char *const *rules;
    int n_rules;
    const char *name;      /* general.name, NULL = from the directory name  */
    bool vocab_only;       /* metadata only, no tensors (--vocab-only)     */
    int n_threads;         /* quantizer threads (<= 0: all CPUs) when pool
                              is NULL                                      */
    lb_pool *pool;         /* optional shared pool (not owned)             */
    lb_progress progress;  /* stage "export", done/total = bytes written   */
    /* Extra string metadata written after every key of the converter (the
     * GGUF cache's lowbit.source.* keys, see lb_export_cached_gguf):
     * n_meta_kv pairs, meta_kv[2i] = key, meta_kv[2i+1] = value (UTF-8).
     * Keys must start with "lowbit." (an application namespace the
     * converter never writes, so no key of the export is replaced) and be
     * at most LB_GGUF_MAX_KEY_LEN bytes; LB_ERR_INVALID_ARG otherwise. */
    const char *const *meta_kv;
    int n_meta_kv;
} lb_export_opts;

/* Defaults: AUTO, no qtype, output/embedding -1, no rules, no name,
 * all threads, no progress, no extra metadata. */
void lb_export_opts_default(lb_export_opts *o);

/* One output tensor of the plan. */
typedef struct lb_export_tensor {
    char name[LB_GGUF_MAX_TENSOR_NAME + 1]; /* GGUF name ("blk.0.attn_q.weight") */
    char source[192];     /* HF tensor or module ("model.layers.0.self_attn.q_proj"),
                             "(generated)" for rope_freqs                 */
    lb_export_route route;
    lb_type type;         /* GGUF type written                            */
    int src_type;         /* lb_type of a dense source, -1 for GPTQ/generated */
    int bits;             /* GPTQ source: 2/3/4/8; 0 otherwise            */
    int group_size;       /* GPTQ source (-1: per row)                    */
    bool sym, desc_act;   /* GPTQ source (as the config says)             */
    bool permuted;        /* llama q/k row permutation applied            */
    int n_dims;
    int64_t shape[LB_MAX_DIMS]; /* outermost first (lb_tensor order)      */
    size_t nbytes;        /* bytes in the GGUF file (without padding)     */
    char reason[160];     /* why this route/type                          */
    lb_type wanted_type;  /* the type the --qtype mix, a rule or the mixed
                             route asked for; differs from `type` when the
                             row length is not a multiple of its block
                             (llama.cpp's tensor_type_fallback: e.g. Q2_K
                             on 64-wide rows is written as Q4_0)          */
} lb_export_tensor;

/* What an export will do (lb_export_plan_make), and what it did. */
typedef struct lb_export_plan {
    char arch[16];          /* GGUF architecture: "llama", "qwen2", "qwen3" */
    char hf_arch[64];       /* config.json architectures[0]               */
    bool gptq;              /* the input is a GPTQ checkpoint             */
    lb_export_mode mode;    /* resolved (AUTO becomes MIXED for GPTQ,
                               DEQUANTIZE for dense input)               */
    bool has_qtype;
    lb_export_qtype qtype;  /* valid when has_qtype                       */
    lb_ftype file_type;     /* general.file_type written                  */
    char tokenizer_model[16]; /* tokenizer.ggml.model ("llama", "gpt2",
                                 "none")                                  */
    char tokenizer_pre[32]; /* tokenizer.ggml.pre ("" when not written)   */
    size_t n_tensors;
    lb_export_tensor *tensors; /* GGUF order                              */
    int n_route[LB_EXPORT_ROUTE_COUNT_];
    uint64_t n_params;      /* elements of all tensors                    */
    size_t data_bytes;      /* tensor bytes without padding               */
    size_t file_bytes;      /* size of the GGUF file                      */
    char notes[512];        /* deliberate differences / warnings ("" if none) */
    int n_substituted;      /* tensors written in another type than the one
                               asked for (type != wanted_type); when they
                               hold most of the quantized weights,
                               general.file_type names the type actually
                               predominant, not the --qtype              */
    char tokenizer_warning[320]; /* "" or what the GGUF vocabulary cannot
                               express of tokenizer.json, so that
                               llama.cpp tokenizes some text differently
                               (e.g. fuse_unk without byte tokens)       */
    bool awq;               /* the GPTQ-family input is in the AutoAWQ
                               GEMM layout (quant_method "awq")          */
} lb_export_plan;

/* Plan the export of `in_path` (a HF or GPTQ checkpoint directory): reads
 * config.json (+ quantize_config.json), the safetensors headers and the
 * tokenizer files; decides every tensor's route and type; reads no
 * weights. Errors: LB_ERR_NOT_FOUND (config, weights, a required tensor),
 * LB_ERR_FORMAT (mis-shaped tensors, bad JSON), LB_ERR_UNSUPPORTED
 * (architecture, a route impossible in DIRECT mode, an unrecognised BPE
 * pre-tokenizer, a type that cannot hold a tensor's rows),
 * LB_ERR_INVALID_ARG (options, rules), LB_ERR_NOMEM. Free with
 * lb_export_plan_free. */
lb_status lb_export_plan_make(const char *in_path, const lb_export_opts *opts,
                              lb_export_plan **out);
void lb_export_plan_free(lb_export_plan *plan);

typedef struct lb_export_stats {
    double seconds;         /* wall time of the whole export              */
    uint64_t bytes_in;      /* tensor bytes read from the checkpoint      */
    uint64_t bytes_out;     /* file size written                          */
    double mb_per_s;        /* bytes_in / seconds / 1e6                   */
    size_t peak_buffer_bytes; /* largest work buffers held at once        */
    int n_route[LB_EXPORT_ROUTE_COUNT_];
    size_t n_tensors;
    lb_ftype file_type;
} lb_export_stats;

/* Export `in_path` to `out_path` (a .gguf file, written atomically: on any
 * failure nothing is left at out_path). opts may be NULL (defaults).
 * plan_out (optional) receives the plan that was executed (free with
 * lb_export_plan_free); stats (optional) is filled on success.
 * Errors: those of lb_export_plan_make, plus LB_ERR_IO (also: out_path's
 * directory does not exist), LB_ERR_INVALID_ARG (out_path is a directory,
 * or an existing file of the input other than *.gguf — checked before any
 * work), LB_ERR_FORMAT (a GPTQ tensor that fails its checks, a non-finite
 * weight), LB_ERR_CANCELLED (progress callback). This is the function the server calls to turn a
 * GPTQ checkpoint into a cached GGUF. */
lb_status lb_export_gguf(const char *in_path, const char *out_path,
                         const lb_export_opts *opts, lb_export_plan **plan_out,
                         lb_export_stats *stats);

/* ------------------------------------------------------------------------ */
/* GGUF cache of a GPTQ checkpoint (what `lowbit serve CKPT_DIR` runs)        */
/* ------------------------------------------------------------------------ */

/* Bumped whenever the exporter's output for the same checkpoint changes, so
 * that older caches are rebuilt. Part of the manifest (below). */
#define LB_EXPORT_CACHE_VERSION 1
/* The cache beside a checkpoint: CKPT_DIR/lowbit-cache/model.gguf. */
#define LB_EXPORT_CACHE_SUBDIR "lowbit-cache"
#define LB_EXPORT_CACHE_FILE "model.gguf"

/* Is `dir` a GPTQ checkpoint, as lb_model_load decides: config.json with a
 * quantization_config whose quant_method is "gptq" (or absent), or no
 * quantization_config and a quantize_config.json beside it. *out false for
 * a dense checkpoint or another quantization method. Errors: those of
 * lb_model_config_load_dir (LB_ERR_NOT_FOUND without config.json,
 * LB_ERR_FORMAT, LB_ERR_UNSUPPORTED). */
lb_status lb_export_is_gptq_checkpoint(const char *dir, bool *out);

/* The invalidation key of a checkpoint (a text "manifest", one line per
 * item; malloc'd, free with free()):
 *   "lowbit-export-cache v<LB_EXPORT_CACHE_VERSION> lowbit <version> mode auto"
 *   then, sorted by name, every regular file (symlinks followed) directly in
 *   `dir` whose name ends in .json or .jinja (config.json,
 *   quantize_config.json, generation_config.json, the safetensors index,
 *   tokenizer.json, tokenizer_config.json, special_tokens_map.json,
 *   chat_template.jinja ...: the files the exporter reads), as
 *     "file NAME size N fnv1a64 H" (H: 64-bit FNV-1a of the contents),
 *   and every *.safetensors file, as
 *     "file NAME size N mtime S.NNNNNNNNN header-fnv1a64 H"
 *   (H over the safetensors header: dtypes, shapes, offsets; the tensor
 *   bytes are not read, so a rewrite that keeps size, mtime and header is
 *   not noticed — cp -p of a same-shaped file; touch the file to force a
 *   rebuild). Bytes < 0x20, '%' and 0x7f in names are written as %XX.
 * Errors: LB_ERR_INVALID_ARG (NULL), LB_ERR_IO (cannot list the directory
 * or read a listed file), LB_ERR_RANGE (more than 100000 listed files),
 * LB_ERR_NOMEM. */
lb_status lb_export_cache_manifest(const char *dir, char **manifest_out);

typedef struct lb_export_cache_opts {
    /* Where the cache goes when the checkpoint directory cannot hold
     * lowbit-cache/ (read-only or not ours): FALLBACK_DIR/NAME-H.gguf,
     * NAME the checkpoint directory's base name (bytes outside
     * [A-Za-z0-9._-] as '_', at most 64), H the FNV-1a 64 of its real path
     * (16 hex digits). NULL: $XDG_CACHE_HOME/lowbit, else
     * $HOME/.cache/lowbit (XDG Base Directory spec 0.8); created (0700) if
     * needed. */
    const char *fallback_dir;
    int n_threads;         /* export threads when pool is NULL (<= 0: all) */
    lb_pool *pool;         /* optional (not owned)                          */
    lb_progress progress;  /* the export's (stage "export"); returning false
                              cancels it: LB_ERR_CANCELLED, nothing left   */
} lb_export_cache_opts;

/* NULL fallback_dir, all threads, no pool, no progress. */
void lb_export_cache_opts_default(lb_export_cache_opts *o);

typedef struct lb_export_cache_result {
    char *path;          /* the GGUF to load (malloc'd)                    */
    bool rebuilt;        /* this call exported it                          */
    bool fallback;       /* it is in the fallback directory, not beside
                            the checkpoint                                  */
    char reason[320];    /* why it was (re)built: "no cache yet",
                            "config.json changed", "unreadable (...)" (for
                            a first fallback build: why the cache beside
                            the checkpoint was not used); "" when an
                            existing cache was used                        */
    lb_export_stats stats; /* the export's (zero when not rebuilt)          */
    int n_requantized;   /* GPTQ modules the auto plan could not copy
                            exactly (route mixed: 2/3-bit, act-order with a
                            shuffled g_idx, 8-bit asymmetric): their
                            weights in the GGUF differ from the checkpoint's */
    char *requantized;   /* their HF module names, ", "-separated (malloc'd;
                            "" when none); read back from the cache's
                            lowbit.source.requantized key on reuse          */
    int n_q4_1;          /* modules copied direct to Q4_1 (4-bit
                            asymmetric): m = fp16(-scale*zero) is rounded,
                            within half an fp16 ulp (the checkpoint loaded
                            as it is computes it exactly)                  */
} lb_export_cache_result;

/* Export GPTQ checkpoint `ckpt_dir` to a GGUF once and re-use it while the
 * checkpoint is unchanged. The export is lb_export_gguf in mode AUTO with
 * default options (every module direct where its codes map onto
 * Q4_0/Q4_1/Q8_0 exactly — Q4_1's m = fp16(-scale*zero) being within half
 * an fp16 ulp —, mixed otherwise; unquantized tensors as stored), plus the
 * string keys
 *   lowbit.source.manifest     lb_export_cache_manifest(ckpt_dir) at export
 *   lowbit.source.path         the checkpoint's real path (informational)
 *   lowbit.source.requantized  the modules not copied exactly ("" if none)
 * Steps:
 *  1. CKPT_DIR/lowbit-cache/model.gguf is used when lb_gguf_open accepts it
 *     (a truncated or corrupt file fails its checks) and its manifest key
 *     equals the checkpoint's manifest now;
 *  2. otherwise, when CKPT_DIR/lowbit-cache exists or can be created and
 *     is writable, the GGUF is exported there;
 *  3. otherwise the fallback file (see lb_export_cache_opts) is used if
 *     valid, else exported there.
 * Every export is written atomically (temp file + rename in the same
 * directory): a failed or cancelled export leaves the previous file (or
 * none) and no temp file; a process that has the old file mapped keeps
 * reading the old inode. Concurrent first starts on one checkpoint each
 * export to their own temp file and the last rename wins (the exporter is
 * deterministic, so both files are the same bytes); only SIGKILL or a crash
 * mid-export leaves a model.gguf.tmp.PID.N file behind.
 * The manifest is taken before the export: a checkpoint changed while it
 * runs gives a cache that the next call rebuilds.
 * Logs (lb_log INFO): "using cached GGUF X", "exported GPTQ checkpoint D to
 * cache X (N MB, S s)", the rebuild reason, the fallback directory.
 * *out is filled on success (free with lb_export_cache_result_free) and
 * zeroed on failure. Errors: LB_ERR_INVALID_ARG (NULL arguments, not a
 * GPTQ checkpoint), lb_export_cache_manifest's, lb_export_gguf's
 * (LB_ERR_UNSUPPORTED for a checkpoint the exporter cannot convert, e.g.
 * an unrecognised BPE pre-tokenizer), LB_ERR_IO (neither location
 * writable), LB_ERR_CANCELLED. */
lb_status lb_export_cached_gguf(const char *ckpt_dir,
                                const lb_export_cache_opts *opts,
                                lb_export_cache_result *out);
void lb_export_cache_result_free(lb_export_cache_result *r);

/* Row permutation of convert_hf_to_gguf.py's LlamaModel.permute for a
 * [rows, ...] q or k tensor with n_head heads (n_head_kv for k): fills
 * src_row[r] = the HF row that GGUF row r comes from. rows must be a
 * multiple of 2 * n_head. Errors: LB_ERR_INVALID_ARG. */
lb_status lb_export_qk_permutation(int64_t rows, int n_head, int64_t *src_row);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_EXPORT_H */
