/*
 * ex_hf_internal.h — pieces of the GGUF -> Hugging Face exporter
 * (lowbit/export_hf.h) shared by ex_hf.c, ex_hf_tok.c and ex_hf_gptq.c.
 * Not installed.
 */
#ifndef LB_EX_HF_INTERNAL_H
#define LB_EX_HF_INTERNAL_H

#include "lowbit/config.h"
#include "lowbit/gguf.h"

#include <cjson/cJSON.h>

/* tokenizer.json (*tj) and tokenizer_config.json (*tc) from the GGUF
 * tokenizer.ggml.* keys (see lowbit/export_hf.h); both NULL when the file
 * has no tokenizer. Errors name the file and key/token at fault:
 * LB_ERR_FORMAT (a token with a NUL byte or invalid UTF-8, arrays of the
 * wrong length), LB_ERR_UNSUPPORTED (tokenizer model other than llama/gpt2,
 * an unknown pre-tokenizer), LB_ERR_NOMEM. */
lb_status ex_hf_tokenizer_json(const lb_gguf *g, const lb_model_config *cfg, cJSON **tj,
                               cJSON **tc);

/* config.json for cfg with weights of dtype (lb_type F32/F16/BF16); NULL
 * when out of memory. */
cJSON *ex_hf_config_json(const lb_model_config *cfg, int dtype);

/* cfg->rope_scaling etc. from the file's rope_freqs.weight (llama3). */
lb_status ex_hf_rope_from_freqs(const lb_gguf *g, lb_model_config *cfg);

/* HF name of GGUF tensor gguf_name; *qk = 1 for attn_q.*, 2 for attn_k.*,
 * else 0; *layer the block index or -1. LB_ERR_UNSUPPORTED when unknown. */
lb_status ex_hf_name(const char *gguf_name, int n_layers, char *out, size_t n, int *qk,
                     int *layer);

/* inverse of lb_export_qk_permutation: HF row h comes from GGUF row
 * (*out)[h] (malloc'd). */
lb_status ex_hf_unpermute_rows(int64_t rows, int n_head, int64_t **out);

/* Output directory handling: lowbit/file.h (lb_outdir_check, lb_tmpdir_*). */
/* dir/name <- pretty-printed j, atomically. */
lb_status ex_hf_write_json(const char *dir, const char *name, const cJSON *j);

/* The tokenizers' Split regexes llama.cpp names (ex_vocab.c). */
extern const char *const ex_re_llama3;
extern const char *const ex_re_qwen2;

#endif
