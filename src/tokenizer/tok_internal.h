/*
 * tok_internal.h — private types of lowbit's tokenizer (src/tokenizer/).
 *
 * One lb_tokenizer serves two families:
 *  - TOK_HF: a Hugging Face tokenizer.json pipeline (tokenizers 0.23):
 *    added-token split -> normalizer -> pre-tokenizer -> BPE model ->
 *    post-processor; decode = id -> token string -> decoder chain.
 *  - TOK_LLAMA_SPM / TOK_LLAMA_BPE: llama.cpp's GGUF vocabularies
 *    (llama-vocab.cpp: llm_tokenizer_spm / llm_tokenizer_bpe), built from
 *    plain arrays by lb_tokenizer_from_vocab.
 * The vocabulary, the BPE merge engine, the regex splitter and the
 * byte-level map are shared.
 */
#ifndef LB_TOK_INTERNAL_H
#define LB_TOK_INTERNAL_H

#include "lowbit/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Largest vocabulary accepted from a file (ids 0..TOK_MAX_VOCAB-1): far above
 * any real model, low enough that a hostile id cannot make us allocate
 * gigabytes. */
#define TOK_MAX_VOCAB (1 << 22)

/* ------------------------------------------------------------------------ */
/* Growable arrays and byte buffer, arena                                    */
/* ------------------------------------------------------------------------ */

/* Room for element n of the array v (*cap elements of `size` bytes): v
 * itself when n < *cap; else v reallocated to twice *cap elements (`first`
 * when *cap is 0) and *cap updated, or NULL when out of memory (v is then
 * still valid and unchanged). */
static inline void *tok_grow(void *v, size_t n, size_t *cap, size_t size,
                             size_t first) {
    if (n < *cap) return v;
    size_t c = *cap ? *cap * 2 : first;
    if (c > SIZE_MAX / size) return NULL;
    void *nv = realloc(v, c * size);
    if (nv) *cap = c;
    return nv;
}

typedef struct tok_buf {
    char *p;
    size_t n, cap;
} tok_buf;

bool tok_buf_reserve(tok_buf *b, size_t extra);
bool tok_buf_put(tok_buf *b, const void *data, size_t n);
bool tok_buf_putc(tok_buf *b, char c);
/* Append the UTF-8 encoding of code point cp. */
bool tok_buf_put_cp(tok_buf *b, uint32_t cp);
void tok_buf_free(tok_buf *b);

typedef struct tok_arena_blk tok_arena_blk;
typedef struct tok_arena {
    tok_arena_blk *head;
} tok_arena;

void *tok_arena_alloc(tok_arena *a, size_t n);
/* Copy n bytes and add a NUL (so embedded NULs survive, length kept apart). */
char *tok_arena_strndup(tok_arena *a, const char *s, size_t n);
void tok_arena_free(tok_arena *a);

/* ------------------------------------------------------------------------ */
/* Hash maps                                                                 */
/* ------------------------------------------------------------------------ */

/* bytes -> int32 (values >= 0). Keys are borrowed: they must outlive the map
 * (they point into the tokenizer's arena or the caller's text). */
typedef struct tok_hent {
    const char *key; /* NULL = empty slot */
    uint32_t len;
    uint32_t hash;
    int32_t val;
} tok_hent;

typedef struct tok_hmap {
    tok_hent *e;
    size_t cap, n;
} tok_hmap;

bool tok_hmap_init(tok_hmap *m, size_t expected);
/* Insert or overwrite. false on allocation failure. */
bool tok_hmap_put(tok_hmap *m, const char *key, size_t len, int32_t val);
/* Value or -1. */
int32_t tok_hmap_get(const tok_hmap *m, const char *key, size_t len);
void tok_hmap_free(tok_hmap *m);

/* (left id, right id) -> (rank, merged id): the BPE merge table. */
typedef struct tok_ment {
    uint64_t key; /* UINT64_MAX = empty */
    uint32_t rank;
    int32_t new_id;
} tok_ment;

typedef struct tok_mmap {
    tok_ment *e;
    size_t cap, n;
} tok_mmap;

bool tok_mmap_init(tok_mmap *m, size_t expected);
bool tok_mmap_put(tok_mmap *m, int32_t a, int32_t b, uint32_t rank,
                  int32_t new_id);
/* Entry or NULL. */
const tok_ment *tok_mmap_get(const tok_mmap *m, int32_t a, int32_t b);
void tok_mmap_free(tok_mmap *m);

/* ------------------------------------------------------------------------ */
/* UTF-8                                                                     */
/* ------------------------------------------------------------------------ */

/* Length of the valid UTF-8 character at s (1..4, *cp set), or minus the
 * length of the maximal invalid subpart (-1..-3) as Rust's
 * String::from_utf8_lossy / the Unicode "maximal subpart" practice counts
 * it. n must be >= 1. */
int tok_utf8_step(const uint8_t *s, size_t n, uint32_t *cp);
/* Rust char::is_whitespace (and Rust regex \s): Unicode White_Space. */
bool tok_is_ws(uint32_t cp);
/* True if the whole buffer is valid UTF-8. */
bool tok_utf8_valid(const char *s, size_t n);
/* Append s to out with each maximal invalid subpart replaced by U+FFFD. */
bool tok_utf8_lossy(tok_buf *out, const char *s, size_t n);
/* Byte length of the UTF-8 sequence starting with lead byte c (1 for
 * continuation/invalid bytes), as llama.cpp's unicode_len_utf8. */
int tok_utf8_len(uint8_t c);

/* GPT-2 byte-level map (bytes_to_unicode): byte -> code point, and its
 * inverse (code point < 324 -> byte, or -1). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);

/* ------------------------------------------------------------------------ */
/* Regex (PCRE2, UTF + UCP, JIT when available)                              */
/* ------------------------------------------------------------------------ */

typedef struct tok_regex {
    pcre2_code *code;
} tok_regex;

/* Compile; `what` names the JSON field for the error message. */
lb_status tok_regex_compile(tok_regex *re, const char *pat, size_t len,
                            const char *what);
void tok_regex_free(tok_regex *re);

typedef struct tok_span {
    size_t start, end;
} tok_span;

typedef struct tok_spans {
    tok_span *v;
    size_t n, cap;
} tok_spans;

/* All non-overlapping matches of re in s[0..n) left to right (an empty match
 * advances one character), appended to out. s must be valid UTF-8. */
lb_status tok_regex_find_all(const tok_regex *re, const char *s, size_t n,
                             tok_spans *out);
/* Literal (non-regex) occurrences of pat (patlen > 0). */
lb_status tok_literal_find_all(const char *pat, size_t patlen, const char *s,
                               size_t n, tok_spans *out);
bool tok_spans_push(tok_spans *sp, size_t start, size_t end);
void tok_spans_free(tok_spans *sp);

/* ------------------------------------------------------------------------ */
/* Pieces: the pre-tokenized string                                          */
/* ------------------------------------------------------------------------ */

typedef struct tok_piece {
    size_t off, len; /* into tok_pieces.text */
    bool origin;     /* starts at offset 0 of the original input */
} tok_piece;

typedef struct tok_pieces {
    tok_buf text;
    tok_piece *v;
    size_t n, cap;
} tok_pieces;

bool tok_pieces_push(tok_pieces *p, size_t off, size_t len, bool origin);
void tok_pieces_free(tok_pieces *p);

/* ------------------------------------------------------------------------ */
/* Normalizers (tokenizers normalizers/)                                 */
/* ------------------------------------------------------------------------ */

typedef enum tok_norm_type {
    TOK_NORM_SEQUENCE,
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE,
    TOK_NORM_PREPEND,
    TOK_NORM_REPLACE, /* string pattern (a) or regex (re) -> content (b) */
    TOK_NORM_STRIP,   /* strip_left / strip_right whitespace */
} tok_norm_type;

typedef struct tok_norm {
    tok_norm_type type;
    char *a, *b; /* arena strings */
    size_t alen, blen;
    bool has_re;
    tok_regex re;
    bool strip_left, strip_right;
    struct tok_norm **kids;
    size_t n_kids;
} tok_norm;

/* Normalize s[0..n) (valid UTF-8) into out (cleared first). */
lb_status tok_norm_apply(const tok_norm *nm, const char *s, size_t n,
                         tok_buf *out);
void tok_norm_free(tok_norm *nm);

/* ------------------------------------------------------------------------ */
/* Pre-tokenizers (tokenizers pre_tokenizers/)                           */
/* ------------------------------------------------------------------------ */

typedef enum tok_split_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;

typedef enum tok_pre_type {
    TOK_PRE_SEQUENCE,
    TOK_PRE_SPLIT,      /* regex or literal pattern + behavior + invert */
    TOK_PRE_BYTELEVEL,  /* add_prefix_space, use_regex (GPT-2 regex) */
    TOK_PRE_METASPACE,  /* replacement, prepend_scheme, split */
    TOK_PRE_WHITESPACE_SPLIT,
    TOK_PRE_DIGITS,
} tok_pre_type;

typedef enum tok_prepend_scheme {
    TOK_PREPEND_ALWAYS,
    TOK_PREPEND_FIRST,
    TOK_PREPEND_NEVER,
} tok_prepend_scheme;

typedef struct tok_pre {
    tok_pre_type type;
    /* Split */
    bool is_regex;
    tok_regex re;
    char *lit;
    size_t litlen;
    tok_split_behavior behavior;
    bool invert;
    /* ByteLevel */
    bool add_prefix_space, use_regex;
    /* Metaspace */
    char repl[8];
    size_t repl_len;
    tok_prepend_scheme scheme;
    bool split;
    /* Sequence */
    struct tok_pre **kids;
    size_t n_kids;
} tok_pre;

/* Run the pre-tokenizer over every piece of io (replaced in place). */
lb_status tok_pre_apply(const tok_pre *pt, tok_pieces *io);
/* Split every piece of io with a regex/literal and a behavior. */
lb_status tok_split_pieces(tok_pieces *io, const tok_regex *re,
                           const char *lit, size_t litlen,
                           tok_split_behavior behavior, bool invert);
/* Replace each piece by its GPT-2 byte-level encoding. */
lb_status tok_bytelevel_pieces(tok_pieces *io);
void tok_pre_free(tok_pre *pt);

/* The GPT-2 pattern used by ByteLevel(use_regex=true). */
extern const char tok_gpt2_regex[];

/* ------------------------------------------------------------------------ */
/* Decoders (tokenizers decoders/)                                       */
/* ------------------------------------------------------------------------ */

typedef enum tok_dec_type {
    TOK_DEC_SEQUENCE,
    TOK_DEC_BYTELEVEL,
    TOK_DEC_REPLACE, /* literal a -> b */
    TOK_DEC_BYTEFALLBACK,
    TOK_DEC_FUSE,
    TOK_DEC_STRIP, /* content cp, start, stop */
    TOK_DEC_METASPACE,
    TOK_DEC_BPE, /* suffix a */
} tok_dec_type;

typedef struct tok_dec {
    tok_dec_type type;
    char *a, *b;
    size_t alen, blen;
    uint32_t strip_cp;
    size_t strip_start, strip_stop;
    uint32_t repl_cp;
    tok_prepend_scheme scheme;
    struct tok_dec **kids;
    size_t n_kids;
} tok_dec;

/* A list of strings for the decoder chain. */
typedef struct tok_strs {
    tok_buf buf;
    size_t *off, *len;
    size_t n, cap;
} tok_strs;

bool tok_strs_push(tok_strs *s, const char *p, size_t n);
void tok_strs_clear(tok_strs *s);
void tok_strs_free(tok_strs *s);

/* decode_chain of one decoder: in -> out (out cleared first). */
lb_status tok_dec_chain(const tok_dec *d, const tok_strs *in, tok_strs *out);
void tok_dec_free(tok_dec *d);
/* One token through the chain without first-token rules, raw bytes. */
lb_status tok_dec_piece(const tok_dec *d, tok_buf *io);

/* ------------------------------------------------------------------------ */
/* Added tokens                                                              */
/* ------------------------------------------------------------------------ */

typedef struct tok_added {
    int32_t id;
    char *content; /* arena */
    size_t len;
    char *norm; /* normalized content (== content when !normalized) */
    size_t norm_len;
    bool special, lstrip, rstrip, normalized, single_word;
} tok_added;

/* A byte trie over a set of patterns for leftmost-longest matching (the
 * semantics of tokenizers' aho-corasick MatchKind::LeftmostLongest). */
typedef struct tok_trie_node {
    int32_t child; /* first child node, -1 */
    int32_t next;  /* next sibling, -1 */
    int32_t value; /* index into tok->added, -1 */
    uint8_t byte;
} tok_trie_node;

typedef struct tok_trie {
    tok_trie_node *v;
    size_t n, cap;
    uint8_t first[32]; /* bitset of first bytes */
} tok_trie;

bool tok_trie_add(tok_trie *t, const char *s, size_t n, int32_t value);
/* Longest pattern starting at s[0..n): its value, *mlen its length; -1. */
int32_t tok_trie_longest(const tok_trie *t, const char *s, size_t n,
                         size_t *mlen);
void tok_trie_free(tok_trie *t);

/* ------------------------------------------------------------------------ */
/* The tokenizer                                                             */
/* ------------------------------------------------------------------------ */

typedef enum tok_kind {
    TOK_HF = 0,
    TOK_LLAMA_SPM = 1,
    TOK_LLAMA_BPE = 2,
} tok_kind;

/* Per-id attributes. */
enum {
    TOK_ATTR_NORMAL = 1 << 0,
    TOK_ATTR_UNKNOWN = 1 << 1,
    TOK_ATTR_CONTROL = 1 << 2, /* special / control */
    TOK_ATTR_USER_DEFINED = 1 << 3,
    TOK_ATTR_UNUSED = 1 << 4,
    TOK_ATTR_BYTE = 1 << 5,
    TOK_ATTR_ADDED = 1 << 6, /* HF added token */
};

typedef struct tok_template_item {
    bool is_seq;       /* $A; otherwise special-token ids below */
    int32_t *ids;      /* arena */
    char **tokens;     /* arena */
    size_t n;
} tok_template_item;

struct lb_tokenizer {
    tok_kind kind;
    tok_arena arena;

    /* Vocabulary: ids 0..n_vocab-1 (model + added). piece = the string
     * tokenizers' id_to_token returns (added tokens: their normalized
     * content), model_piece = the model's own vocabulary string. */
    int32_t n_vocab;
    char **piece;
    uint32_t *piece_len;
    char **model_piece;
    uint32_t *model_piece_len;
    uint8_t *attr;
    float *score;
    tok_hmap vocab; /* model vocabulary: string -> id */
    int32_t n_model_entries; /* entries in the model vocabulary */

    /* BPE model */
    tok_mmap merges;
    int32_t unk_id; /* model unk (-1) */
    bool fuse_unk, byte_fallback, ignore_merges;
    char *cont_prefix, *eow_suffix; /* NULL when absent */
    size_t cont_prefix_len, eow_suffix_len;
    int32_t byte_id[256]; /* <0xNN> token per byte, -1 */
    tok_mmap pairs;       /* adjacent code points inside tokens (see
                             tok_build_pairs); empty = never split */
    bool no_word_cache;   /* tests: disable the per-call word cache */

    /* Added tokens (HF) */
    tok_added *added;
    size_t n_added;
    tok_trie trie_raw, trie_norm;
    tok_hmap special_set; /* contents of special added tokens */

    /* Pipeline (HF) */
    tok_norm *normalizer;
    tok_pre *pre;
    tok_dec *decoder;
    bool has_template;
    tok_template_item *tmpl;
    size_t n_tmpl;

    /* llama.cpp (GGUF) */
    tok_regex *llama_re;
    size_t n_llama_re;
    bool add_space_prefix, clean_spaces;
    int32_t *special_cache; /* CONTROL|USER_DEFINED|UNKNOWN ids, longest first */
    size_t n_special_cache;

    /* Config */
    int32_t bos_id, eos_id, pad_id;
    bool add_bos, add_eos;
    char *bos_text, *eos_text, *chat_template;
};

/* Allocate an empty tokenizer (all ids -1). */
lb_tokenizer *tok_new(void);
/* Allocate the per-id arrays for n ids. */
lb_status tok_alloc_vocab(lb_tokenizer *tok, int32_t n);
/* Look a string up: added tokens first (by content), then the model. */
int32_t tok_token_to_id(const lb_tokenizer *tok, const char *s, size_t n);

/* Encoder output. */
typedef struct tok_out {
    int32_t *ids;
    size_t n, cap;
    bool want_tokens;
    tok_buf tstr;
    size_t *toff, *tlen;
} tok_out;

bool tok_out_push(tok_out *o, int32_t id, const char *t, size_t tlen);

/* Reusable buffers of the merge engines (one per encode call). */
typedef struct tok_scratch {
    void *sym;   /* symbols */
    size_t sym_cap;
    void *heap;  /* merge / bigram queue */
    size_t heap_cap;
    tok_buf tmp;
    /* per-call word cache (tokenizers keeps one per model): word -> a run
     * of ids in cache_ids; keys live in cache_keys */
    tok_hmap cache;
    tok_arena cache_keys;
    int32_t *cache_ids;
    size_t cache_n, cache_cap;
    int32_t *ent_off, *ent_len; /* per cache entry */
    size_t n_ent, ent_cap;
} tok_scratch;

void tok_scratch_free(tok_scratch *sc);

/* Build tok->pairs: every pair of adjacent characters inside a vocabulary
 * token. A boundary between two characters that form no such pair can never
 * be crossed by a merge, so long words are split there and merged piece by
 * piece (same result, far less work on unsplit SentencePiece-style text).
 * Left empty (no splitting) when a merge involves the unk or a byte token
 * or the model uses continuing_subword_prefix / end_of_word_suffix. */
lb_status tok_build_pairs(lb_tokenizer *tok);

/* BPE over one pre-token (tokenizers models/bpe: merge_word + merge_all).
 * Appends ids (and model vocabulary strings as tokens) to out. */
lb_status tok_bpe_word(const lb_tokenizer *tok, const char *w, size_t n,
                       tok_out *out, tok_scratch *sc);
/* llama.cpp llm_tokenizer_spm_session::tokenize over one fragment. */
lb_status tok_spm_fragment(const lb_tokenizer *tok, const char *w, size_t n,
                           tok_out *out, tok_scratch *sc);

/* Byte ranges of the text in which no special token may match
 * (lb_tokenizer_encode_spans): sorted, disjoint. NULL = none. */
typedef struct tok_plain {
    const lb_text_span *v;
    size_t n;
} tok_plain;

/* Encoders / decoders per family (out->ids appended). */
lb_status tok_hf_encode(const lb_tokenizer *tok, const char *text, size_t len,
                        unsigned flags, const tok_plain *plain, tok_out *out);
lb_status tok_hf_decode(const lb_tokenizer *tok, const int32_t *ids, size_t n,
                        bool skip_special, tok_buf *out);
lb_status tok_llama_encode(const lb_tokenizer *tok, const char *text,
                           size_t len, unsigned flags, const tok_plain *plain,
                           tok_out *out);
lb_status tok_llama_decode(const lb_tokenizer *tok, const int32_t *ids,
                           size_t n, bool skip_special, tok_buf *out);
/* One token's text as llama.cpp's token_to_piece (special = true) would
 * give it / as the HF decoder chain gives a lone token. */
lb_status tok_llama_piece(const lb_tokenizer *tok, int32_t id, bool special,
                          tok_buf *out);

#endif /* LB_TOK_INTERNAL_H */
