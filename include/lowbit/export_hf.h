/*
 * lowbit/export_hf.h — a GGUF file back to a Hugging Face checkpoint
 * directory (`lowbit export MODEL.gguf -o HF_DIR --format hf|gptq`).
 *
 * --format hf (lb_export_gguf_to_hf): every tensor is dequantized
 * (lb_dequantize_row: F32/F16/BF16, Q4_0..Q8_1, the K-quants) and written in
 * one float dtype to model.safetensors under transformers' names; llama's q/k
 * row permutation (convert_hf_to_gguf.py LlamaModel.permute, see
 * lowbit/export.h) is undone: HF row h*hd + j*hd/2 + i comes from GGUF row
 * h*hd + 2i + j. Files written:
 *   config.json            from the `<arch>.*` keys (lb_model_config_from_gguf:
 *                          llama -> LlamaForCausalLM, qwen2, qwen3), rope
 *                          linear scaling, llama3 scaling recovered from the
 *                          rope_freqs tensor (see below), tie_word_embeddings
 *                          when there is no output.weight;
 *   generation_config.json bos/eos ids;
 *   model.safetensors      the weights (rope_freqs is not a weight in HF);
 *   tokenizer.json         from tokenizer.ggml.*: "gpt2" -> byte-level BPE
 *                          with the file's merges and the pre-tokenizer its
 *                          tokenizer.ggml.pre names (gpt-2/default, llama-bpe,
 *                          smaug-bpe, qwen2; others refused); "llama"
 *                          (SentencePiece) -> BPE with byte_fallback whose
 *                          merges are rebuilt from the scores as transformers
 *                          5.12 does for GGUF files (integrations/ggml.py
 *                          GGUFTokenizerSkeleton: for every token every split
 *                          into two vocabulary pieces, ordered by the merged
 *                          token's score, ties by the pieces' scores, stably),
 *                          Prepend("▁") when add_space_prefix (default true),
 *                          the BOS/EOS post-processor of add_bos/add_eos;
 *                          tokenizer.ggml.normalizer.nfc/lowercase/
 *                          strip_accents (written by lowbit's HF -> GGUF
 *                          export) become the NFC/Lowercase/StripAccents
 *                          normalizers of a gpt2 vocabulary;
 *                          CONTROL/UNKNOWN tokens become special added tokens,
 *                          USER_DEFINED ones non-special added tokens;
 *   tokenizer_config.json  special token strings, add_bos/add_eos,
 *                          chat_template (tokenizer.chat_template).
 * A file without tokenizer (tokenizer.ggml.model absent or "none") gets no
 * tokenizer files. llama3 RoPE scaling exists in GGUF only as the rope_freqs
 * factors; the (factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings) that reproduce every factor exactly
 * (float32, as convert_hf_to_gguf.py computes them) are searched among
 * factor = max(rope_freqs), low in {0.5,1,2,4}, high in {1,2,4,8,16},
 * original = 2^1..2^24; other rope_freqs are LB_ERR_UNSUPPORTED.
 *
 * --format gptq (lb_export_gguf_to_gptq): the inverse of lowbit/export.h's
 * direct route. Every 32-column GGUF block becomes one GPTQ group of 32
 * (g_idx[c] = c / 32):
 *   Q4_0 {d, q}    -> 4-bit sym:  scale d, zero 8,   code q        (exact);
 *   Q8_0 {d, q}    -> 8-bit sym:  scale d, zero 128, code q + 128  (exact);
 *   Q4_1 {d, m, q} -> 4-bit asym: scale d, zero z, code q, when every block
 *                     has an integer z in [0, 15] with fp16(-(d*z)) == m
 *                     (what the direct export writes); a Q4_1 tensor made
 *                     otherwise (llama-quantize: m = the block minimum) is
 *                     not representable and is written dense.
 * Written in the AutoGPTQ layout (qweight/qzeros/scales/g_idx,
 * lowbit/gptq_ckpt.h; zeros v1 = zero - 1, or gptq_v2 when an asym zero of
 * 0 occurs) with quantize_config.json and config.json quantization_config
 * (group_size 32, desc_act false). A GPTQ config has one bits/sym: the
 * scheme most linears have; other linears, lm_head, embeddings, norms are
 * dequantized and written dense in the output dtype (stats.notes counts the
 * linears). GPTQ -> GGUF (direct) -> GPTQ of a group-32 checkpoint gives
 * byte-identical qweight/qzeros/scales/g_idx (test_export_hf). Memory: one
 * linear's codes at a time.
 *
 * The output directory is written atomically: everything goes into a temp
 * directory beside it, renamed into place at the end; OUT must not exist or
 * be an empty directory.
 */
#ifndef LOWBIT_EXPORT_HF_H
#define LOWBIT_EXPORT_HF_H

#include "lowbit/core.h"
#include "lowbit/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lb_export_hf_opts {
    /* Output dtype of the weights: LB_TYPE_F32, LB_TYPE_F16 or LB_TYPE_BF16;
     * -1 = auto: F16 (BF16) when every 2-D tensor of the file is F16 (BF16),
     * else F32 (dequantized block values are exact in F32). */
    int dtype;
    lb_progress progress; /* stage "export", done/total = tensors */
} lb_export_hf_opts;

/* dtype -1, no progress. */
void lb_export_hf_opts_default(lb_export_hf_opts *o);

typedef struct lb_export_hf_stats {
    size_t n_tensors;       /* tensors written to safetensors            */
    size_t n_dequantized;   /* of them, from block-quantized GGUF types  */
    size_t n_gptq;          /* --format gptq: linears written as codes   */
    int dtype;              /* resolved dtype                            */
    bool tokenizer;         /* tokenizer files written                   */
    bool permuted;          /* llama q/k permutation undone              */
    char notes[256];        /* what could not be carried over ("" if none) */
} lb_export_hf_stats;

/* GGUF file `gguf_path` -> HF checkpoint directory `out_dir` (see above).
 * opts may be NULL. stats (optional) is filled on success.
 * Errors: those of lb_gguf_open / lb_model_config_from_gguf,
 * LB_ERR_INVALID_ARG (bad dtype; out_dir exists and is not an empty
 * directory), LB_ERR_UNSUPPORTED (a tensor name lowbit does not map, an
 * unknown tokenizer model or pre-tokenizer, unrecoverable rope_freqs, a type
 * without a dequantizer), LB_ERR_FORMAT (a tensor's shape disagrees with the
 * config), LB_ERR_IO, LB_ERR_NOMEM, LB_ERR_CANCELLED. */
lb_status lb_export_gguf_to_hf(const char *gguf_path, const char *out_dir,
                               const lb_export_hf_opts *opts,
                               lb_export_hf_stats *stats);

/* GGUF file -> GPTQ checkpoint directory (--format gptq, see above); opts
 * and errors as lb_export_gguf_to_hf, plus LB_ERR_UNSUPPORTED when no
 * linear weight is Q4_0/Q4_1/Q8_0 (nothing to write as codes). */
lb_status lb_export_gguf_to_gptq(const char *gguf_path, const char *out_dir,
                                 const lb_export_hf_opts *opts,
                                 lb_export_hf_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_EXPORT_HF_H */
