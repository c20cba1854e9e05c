/*
 * lowbit/tokenizer.h — text <-> token ids.
 *
 * Sources followed (behaviour matches them id for id; tests:
 * ../shared/reference/tokenize):
 *  - Hugging Face `tokenizers` 0.23 for tokenizer.json: BPE model (vocab,
 *    merges as "a b" strings or ["a", "b"] pairs, unk_token, fuse_unk,
 *    byte_fallback, ignore_merges, continuing_subword_prefix,
 *    end_of_word_suffix); normalizers Sequence, NFC, NFD, NFKC, NFKD,
 *    Lowercase, Prepend, Replace (string or regex), Strip; pre-tokenizers
 *    Sequence, Split (regex via PCRE2, behaviors Removed / Isolated /
 *    MergedWithPrevious / MergedWithNext / Contiguous, invert), ByteLevel,
 *    Metaspace, Whitespace, WhitespaceSplit, Digits; added tokens (special,
 *    lstrip, rstrip, normalized, single_word; leftmost-longest matching as
 *    AddedVocabulary does, in the raw text for normalized=false tokens and in
 *    the normalized text for the others); post-processors TemplateProcessing
 *    (single), ByteLevel, Roberta/BertProcessing, Sequence; decoders
 *    Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace,
 *    BPEDecoder. Plus tokenizer_config.json / special_tokens_map.json
 *    (bos_token, eos_token as strings or {content}, add_bos_token,
 *    add_eos_token, chat_template as a string or a list of {name, template}
 *    of which "default" is taken).
 *  - llama.cpp 0.7.0 llama-vocab.cpp for GGUF vocabularies
 *    (tokenizer.ggml.*): "llama" = SentencePiece score-based merging
 *    (llm_tokenizer_spm), "gpt2" = byte-level BPE with merge ranks and the
 *    pre-tokenizer regexes selected by tokenizer.ggml.pre
 *    (llm_tokenizer_bpe), special-token partitioning
 *    (tokenizer_st_partition), detokenize / token_to_piece.
 *
 * Text is UTF-8 with an explicit length (NUL bytes allowed). Invalid UTF-8
 * in the input is replaced by U+FFFD (one per maximal invalid subpart, as
 * Rust's String::from_utf8_lossy) before tokenization: Python's tokenizers
 * cannot receive such input at all.
 *
 * A tokenizer is immutable after loading: encode/decode may be called from
 * several threads at once.
 *
 * Known differences from tokenizers 0.23 (none shows in the reference
 * cases): BPE dropout is ignored (encoding is deterministic); an unk_token
 * missing from model.vocab drops unknown characters (tokenizers fails the
 * encode); Lowercase uses utf8proc's simple case mapping (Rust's
 * to_lowercase maps e.g. U+0130 to two code points); regexes run on PCRE2
 * (Oniguruma in tokenizers) and normalization on utf8proc, whose Unicode
 * versions may differ on recently added characters; Metaspace
 * prepend_scheme "first" treats a piece as first when it starts at byte 0
 * of the input; only the "single" template of TemplateProcessing is used
 * (no pair encoding); a Regex pattern in the Replace *decoder* is rejected
 * (LB_ERR_UNSUPPORTED); models other than BPE (WordPiece, Unigram,
 * WordLevel) are rejected.
 *
 * Speed (idle 2-core x86-64, -O2; bench/bench_tokenizer): loading Qwen3's 151k-token tokenizer.json
 * takes about 0.4 s (a third of it cJSON parsing); encoding runs at
 * 5-10 MB/s of text (byte-level BPE with a per-call word cache; long
 * unsplit SentencePiece-style text is merged chunk by chunk at boundaries
 * no token spans, which gives the same ids).
 */
#ifndef LOWBIT_TOKENIZER_H
#define LOWBIT_TOKENIZER_H

#include "lowbit/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lb_tokenizer lb_tokenizer;

/* Load from a model directory (tokenizer.json + optional
 * tokenizer_config.json / special_tokens_map.json) or from a path to a
 * tokenizer.json file (the config files are then looked up beside it).
 * Errors: LB_ERR_NOT_FOUND (no tokenizer.json), LB_ERR_IO (unreadable),
 * LB_ERR_FORMAT (invalid JSON or structure, naming the file and field, e.g.
 * a merge that references a token missing from model.vocab),
 * LB_ERR_UNSUPPORTED (a model / normalizer / pre-tokenizer / decoder /
 * post-processor type lowbit lacks, naming it; e.g. model.type "Unigram").
 * On success *out owns the tokenizer; free with lb_tokenizer_free. */
lb_status lb_tokenizer_load_hf(const char *path, lb_tokenizer **out);

/* Load from the text of a tokenizer.json held in memory (len bytes; e.g.
 * GGUF's tokenizer.huggingface.json). No tokenizer_config.json: bos/eos
 * ids are -1 and there is no chat template. Errors as lb_tokenizer_load_hf
 * (messages say "tokenizer.json"). */
lb_status lb_tokenizer_load_hf_json(const char *json, size_t len, lb_tokenizer **out);

/* Free a tokenizer (NULL is fine). */
void lb_tokenizer_free(lb_tokenizer *tok);

/* ---- GGUF-style vocabularies ------------------------------------------- */

/* llama.cpp token types (tokenizer.ggml.token_type). */
typedef enum lb_token_type {
    LB_TOKEN_TYPE_UNDEFINED = 0,
    LB_TOKEN_TYPE_NORMAL = 1,
    LB_TOKEN_TYPE_UNKNOWN = 2,
    LB_TOKEN_TYPE_CONTROL = 3,
    LB_TOKEN_TYPE_USER_DEFINED = 4,
    LB_TOKEN_TYPE_UNUSED = 5,
    LB_TOKEN_TYPE_BYTE = 6
} lb_token_type;

/* Special-id value meaning "the GGUF key is absent: use llama.cpp's default
 * for this model" (llama: bos 1, eos 2, unk 0; gpt2: bos 11, eos 11). */
#define LB_VOCAB_ID_DEFAULT (-2)
/* Flag value meaning "the GGUF key is absent: use llama.cpp's default". */
#define LB_VOCAB_FLAG_DEFAULT (-1)

/* A vocabulary as plain arrays, as stored under tokenizer.ggml.* in GGUF.
 * All arrays are borrowed for the duration of lb_tokenizer_from_vocab only
 * (everything is copied). */
typedef struct lb_vocab_desc {
    const char *model;  /* tokenizer.ggml.model: "llama" or "gpt2" */
    const char *pre;    /* tokenizer.ggml.pre (gpt2 only; NULL = "default") */
    size_t n_tokens;    /* tokenizer.ggml.tokens: n_tokens strings */
    const char *const *tokens;
    const size_t *token_lens; /* byte lengths; NULL = NUL-terminated */
    const float *scores;      /* tokenizer.ggml.scores [n_tokens] or NULL */
    const int32_t *token_types; /* tokenizer.ggml.token_type [n_tokens] or
                                   NULL (all normal) */
    size_t n_merges;          /* tokenizer.ggml.merges ("a b"), gpt2 only */
    const char *const *merges;
    const size_t *merge_lens; /* NULL = NUL-terminated */
    /* tokenizer.ggml.{bos,eos,unknown,padding}_token_id: an id, -1 (none)
     * or LB_VOCAB_ID_DEFAULT. */
    int32_t bos_id, eos_id, unk_id, pad_id;
    /* tokenizer.ggml.add_bos_token / add_eos_token / add_space_prefix:
     * 0, 1 or LB_VOCAB_FLAG_DEFAULT. */
    int add_bos, add_eos, add_space_prefix;
    const char *chat_template; /* tokenizer.chat_template or NULL */
} lb_vocab_desc;

/* Initialise a descriptor with every id/flag set to its "absent" default. */
void lb_vocab_desc_init(lb_vocab_desc *desc);

/* Build a tokenizer from a GGUF-style vocabulary, behaving as llama.cpp
 * 0.7.0 does for that vocabulary (see the file comment). tokenizer.ggml.pre
 * values: "default", "llama3"/"llama-v3"/"llama-bpe"/"falcon3"/... (the
 * Llama-3 regex, ignore_merges, add_bos), "qwen2"/"deepseek-r1-qwen",
 * "gpt-2"/"phi-2"/..., "starcoder"/"refact"/"command-r"/"smollm"/...,
 * "falcon", "mpt", "olmo", "dbrx", "smaug-bpe", "stablelm2",
 * "deepseek-coder", "deepseek-v3", "poro-chat", "bloom", "gpt3-finnish",
 * "viking", "chatglm-bpe"/"glm4", "tekken", "gpt-4o", "seed-coder".
 * Deviations from llama.cpp: the regexes run on PCRE2 (llama.cpp uses
 * hand-written matchers for some and std::regex over collapsed Unicode
 * categories for others, which can differ on rare characters); a character
 * without any byte token in a "llama" vocabulary gives the unknown token
 * (llama.cpp aborts with std::out_of_range); merges whose tokens are not in
 * the vocabulary are ignored.
 * Errors: LB_ERR_INVALID_ARG (NULL arrays), LB_ERR_UNSUPPORTED (unknown
 * model or pre name, naming it), LB_ERR_FORMAT (bad token type, special id
 * out of range, invalid merge line, naming the field).
 * Free with lb_tokenizer_free. */
lb_status lb_tokenizer_from_vocab(const lb_vocab_desc *desc, lb_tokenizer **out);

/* A GGUF reader (lowbit/gguf.h). */
typedef struct lb_gguf lb_gguf;

/* Build a tokenizer from the tokenizer.ggml.* metadata of an open GGUF
 * reader: model, pre, tokens, scores, token_type (any integer element type),
 * merges, bos/eos/unknown/padding_token_id (an id outside the vocabulary
 * keeps llama.cpp's default, as llama.cpp does), add_bos_token,
 * add_eos_token, add_space_prefix, and tokenizer.chat_template; see
 * lb_tokenizer_from_vocab for the behaviour. The tokenizer copies what it
 * needs: the reader may be closed afterwards. Errors: LB_ERR_NOT_FOUND
 * (tokenizer.ggml.model or .tokens missing), LB_ERR_FORMAT (a key of the
 * wrong type, array lengths that disagree), LB_ERR_UNSUPPORTED (model or pre
 * lowbit lacks); messages name the file and key. */
lb_status lb_tokenizer_from_gguf(const lb_gguf *g, lb_tokenizer **out);

/* Open a .gguf file, build its tokenizer (lb_tokenizer_from_gguf), close it.
 * Errors: those of lb_gguf_open and lb_tokenizer_from_gguf. */
lb_status lb_tokenizer_load_gguf(const char *path, lb_tokenizer **out);

/* Load a tokenizer from whatever `path` is: a directory (Hugging Face
 * checkpoint: lb_tokenizer_load_hf), a file starting with the GGUF magic
 * (a model or a vocabulary-only GGUF: lb_tokenizer_load_gguf), any other
 * file (a tokenizer.json: lb_tokenizer_load_hf). Recognised by content, not
 * by the file name. Errors: LB_ERR_NOT_FOUND (no such path), those of the
 * loader chosen. */
lb_status lb_tokenizer_load(const char *path, lb_tokenizer **out);

/* ---- encoding ------------------------------------------------------------ */

/* Flags for lb_tokenizer_encode_ex. */
#define LB_TOK_ADD_SPECIAL 1u   /* post-processor / BOS as add_special_tokens */
#define LB_TOK_PLAIN_SPECIAL 2u /* special tokens in the text are plain text
                                   (tokenizers' encode_special_tokens=true,
                                   llama.cpp parse_special=false); non-special
                                   added / user-defined tokens still match */

/* Encode UTF-8 text (len bytes; may contain NUL). add_special: apply the
 * post-processor (e.g. prepend BOS), as tokenizers' add_special_tokens /
 * llama.cpp's add_special. Special/added tokens that appear in the text are
 * always matched. *ids_out is malloc'd (free with free(); a valid pointer
 * even when *n_out is 0); *n_out its length.
 * Errors: LB_ERR_INVALID_ARG, LB_ERR_NOMEM, LB_ERR_RANGE (a regex hit a
 * PCRE2 resource limit). */
lb_status lb_tokenizer_encode(const lb_tokenizer *tok, const char *text,
                              size_t len, bool add_special, int32_t **ids_out,
                              size_t *n_out);

/* Like lb_tokenizer_encode with LB_TOK_* flags. If tokens_out is not NULL it
 * receives one malloc'd block (free with free()) holding *n_out
 * NUL-terminated token strings as tokenizers' Encoding.tokens reports them
 * (model vocabulary strings such as "Ġthe" / "▁the" / "<0x0A>", the matched
 * text for an added token, the template's strings for post-processor
 * tokens); for GGUF vocabularies the vocabulary strings. */
lb_status lb_tokenizer_encode_ex(const lb_tokenizer *tok, const char *text,
                                 size_t len, unsigned flags, int32_t **ids_out,
                                 char ***tokens_out, size_t *n_out);

/* A byte range [begin, end) of a text. */
typedef struct lb_text_span {
    size_t begin, end;
} lb_text_span;

/* Like lb_tokenizer_encode_ex (no token strings), for a text assembled from
 * trusted and untrusted parts, e.g. a chat template's rendering (trusted)
 * around message content (untrusted): no special token is matched where its
 * match would overlap one of the n_plain `plain` spans (sorted, disjoint,
 * byte offsets into text); those bytes are tokenized as ordinary text with
 * the text around them, as LB_TOK_PLAIN_SPECIAL does for a whole text.
 * Non-special added tokens still match. Special tokens elsewhere match as
 * usual, so with n_plain = 0 the ids equal lb_tokenizer_encode_ex's. For
 * added tokens matched after normalization (tokenizer.json normalized =
 * true) the spans are moved onto the normalized text (a span's range is
 * that of normalize(prefix) .. normalize(prefix + span), checked to be
 * prefixes of the normalized segment); where that check fails, or beyond
 * 64 spans in one segment, the segment between two raw-matched added
 * tokens that holds a span matches no special token. Invalid UTF-8 is replaced as in lb_tokenizer_encode (the
 * spans follow). Errors: those of lb_tokenizer_encode_ex, and
 * LB_ERR_INVALID_ARG for spans out of order or outside the text. */
lb_status lb_tokenizer_encode_spans(const lb_tokenizer *tok, const char *text,
                                    size_t len, unsigned flags,
                                    const lb_text_span *plain, size_t n_plain,
                                    int32_t **ids_out, size_t *n_out);

/* ---- decoding ------------------------------------------------------------ */

/* Decode ids to UTF-8 text (malloc'd, NUL-terminated; *len_out optional),
 * as tokenizers' decode(ids, skip_special_tokens) — including its decoder
 * chain (e.g. Strip removing one leading space) and its rule that
 * skip_special drops exactly the strings that are contents of special added
 * tokens. For GGUF vocabularies: llama.cpp detokenize(remove_special =
 * skip_special, unparse_special = !skip_special). Ids outside 0..n_vocab-1
 * give LB_ERR_RANGE (tokenizers silently skips them). */
lb_status lb_tokenizer_decode(const lb_tokenizer *tok, const int32_t *ids,
                              size_t n, bool skip_special, char **text_out,
                              size_t *len_out);

/* The bytes one token contributes to a text, for streaming output and for
 * printing (like llama.cpp's token_to_piece with special = true): the
 * decoder chain applied to this token alone, without the chain's
 * first-token rules (no Strip of the leading space, Metaspace replacement
 * always a space) and without UTF-8 repair, so a byte-level token that holds
 * part of a character gives those raw bytes. Writes at most size-1 bytes and
 * a NUL into buf; returns the full length (like snprintf), or -1 for an
 * invalid id (error set). */
int lb_tokenizer_token_to_piece(const lb_tokenizer *tok, int32_t id, char *buf,
                                size_t size);

/* ---- vocabulary ---------------------------------------------------------- */

/* The vocabulary string of one id (as tokenizers' id_to_token, e.g. "Ġthe",
 * "▁the", "<0x0A>"; an added token with normalized=true gives its
 * normalized content); NULL for an invalid id. Owned by tok. */
const char *lb_tokenizer_id_to_piece(const lb_tokenizer *tok, int32_t id);

/* The id of a vocabulary string (added tokens by content first, then the
 * model vocabulary), or -1. */
int32_t lb_tokenizer_token_to_id(const lb_tokenizer *tok, const char *piece);

/* Vocabulary size (including added tokens): valid ids are 0..n-1. */
int32_t lb_tokenizer_n_vocab(const lb_tokenizer *tok);
/* Special ids; -1 when the tokenizer has none. For tokenizer.json these come
 * from tokenizer_config.json / special_tokens_map.json. */
int32_t lb_tokenizer_bos(const lb_tokenizer *tok);
int32_t lb_tokenizer_eos(const lb_tokenizer *tok);
/* add_bos_token from tokenizer_config.json / GGUF (what llama.cpp would do
 * at the start of a prompt). Note: for tokenizer.json, encoding with
 * add_special follows the post-processor, not this flag (as tokenizers). */
bool lb_tokenizer_add_bos(const lb_tokenizer *tok);
/* True if `id` is a special (control) token. */
bool lb_tokenizer_is_special(const lb_tokenizer *tok, int32_t id);

/* The text that, written in an input, encodes to special token `id` and
 * that LB_TOK_PLAIN_SPECIAL turns into ordinary text: a tokenizer.json
 * added token's "content" (as written, before normalization) when it is
 * special; for GGUF vocabularies the piece of a control or unknown token.
 * NULL for any other id. Owned by tok. */
const char *lb_tokenizer_special_text(const lb_tokenizer *tok, int32_t id);

/* chat_template string from tokenizer_config.json (or GGUF), NULL if none.
 * Owned by tok. bos/eos token strings likewise (NULL if none). */
const char *lb_tokenizer_chat_template(const lb_tokenizer *tok);
const char *lb_tokenizer_bos_text(const lb_tokenizer *tok);
const char *lb_tokenizer_eos_text(const lb_tokenizer *tok);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_TOKENIZER_H */
