/*
 * test_gguf — GGUF reader/writer.
 *
 * Expected values come from outside lowbit:
 *  - facts about the shared models printed by gguf-py (GGUFReader, the
 *    python3-gguf package of the reference chroot, llama.cpp 0.7.0) and
 *    gguf-dump: file sizes, data offsets, tensor offsets/sizes/first bytes,
 *    key counts, token strings;
 *  - the models' published hyper-parameters (shared/README.md);
 *  - block sizes of ggml's block structs (ggml-common.h), e.g. Q4_0 = 18
 *    bytes per 32 weights, Q4_K = 144 bytes per 256;
 *  - byte images built by hand below (tb_*), independently of the writer.
 *
 * Usage: test_gguf                      run the tests
 *        test_gguf --write-sample PATH  write the all-types sample (used by
 *                                       tests/cli_gguf_interop.sh)
 *        test_gguf --rewrite SRC DST    copy a GGUF through lowbit's writer
 */
#include "th.h"

#include "lowbit/file.h"
#include "lowbit/gguf.h"

#include <dirent.h>
#include <float.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* A hand-made GGUF byte builder (independent of src/io/gguf_write.c).      */
/* ------------------------------------------------------------------------ */

typedef struct tb {
    uint8_t *p;
    size_t n, cap;
} tb;

static void tb_put(tb *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n) c *= 2;
        b->p = realloc(b->p, c);
        if (!b->p) abort();
        b->cap = c;
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void tb_u8(tb *b, uint8_t v) { tb_put(b, &v, 1); }
static void tb_u32(tb *b, uint32_t v) { tb_put(b, &v, 4); }
static void tb_u64(tb *b, uint64_t v) { tb_put(b, &v, 8); }
static void tb_strn(tb *b, const char *s, size_t n) {
    tb_u64(b, n);
    tb_put(b, s, n);
}
static void tb_str(tb *b, const char *s) { tb_strn(b, s, strlen(s)); }
static void tb_zeros(tb *b, size_t n) {
    for (size_t i = 0; i < n; i++) tb_u8(b, 0);
}
static void tb_pad(tb *b, size_t a) {
    while (b->n % a) tb_u8(b, 0);
}
static void tb_header(tb *b, uint32_t version, uint64_t nt, uint64_t nkv) {
    tb_put(b, "GGUF", 4);
    tb_u32(b, version);
    tb_u64(b, nt);
    tb_u64(b, nkv);
}
static void tb_kv_u32(tb *b, const char *k, uint32_t v) {
    tb_str(b, k);
    tb_u32(b, 4 /* UINT32 */);
    tb_u32(b, v);
}
static void tb_kv_str(tb *b, const char *k, const char *v) {
    tb_str(b, k);
    tb_u32(b, 8 /* STRING */);
    tb_str(b, v);
}
/* Tensor info with ne in ggml order. */
static void tb_ti(tb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                  uint32_t type, uint64_t off) {
    tb_str(b, name);
    tb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) tb_u64(b, ne[i]);
    tb_u32(b, type);
    tb_u64(b, off);
}
static void tb_free(tb *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static lb_status open_tb(const tb *b, lb_gguf **g) {
    return lb_gguf_open_memory(b->p, b->n, "test.gguf", g);
}

static bool contains(const char *hay, const char *needle) {
    return hay && strstr(hay, needle) != NULL;
}

/* Open must fail with `want` and a message containing `substr`. */
#define CHECK_BAD(b, want, substr)                                             \
    do {                                                                       \
        lb_gguf *g_ = (lb_gguf *)1;                                            \
        TH_CHECK_FAILS(open_tb(b, &g_), want);                                 \
        TH_CHECK(g_ == NULL);                                                  \
        TH_CHECK_MSG(contains(lb_last_error(), substr),                        \
                     "message \"%s\" lacks \"%s\"", lb_last_error(), substr);  \
        if (g_ != (lb_gguf *)1) lb_gguf_close(g_);                             \
    } while (0)

/* A valid file: 3 kv, 2 F32 tensors of 8 elements (32 bytes: no padding
 * after the last tensor, so every truncation is detectable). */
static void tb_valid(tb *b, uint32_t version) {
    tb_header(b, version, 2, 3);
    tb_kv_str(b, "general.architecture", "llama");
    tb_str(b, "tokenizer.ggml.tokens");
    tb_u32(b, 9 /* ARRAY */);
    tb_u32(b, 8 /* STRING */);
    tb_u64(b, 3);
    tb_str(b, "a");
    tb_str(b, "");
    tb_str(b, "ccc");
    tb_kv_u32(b, "llama.block_count", 5);
    uint64_t ne[1] = {8};
    tb_ti(b, "a.weight", 1, ne, 0, 0);
    tb_ti(b, "b.weight", 1, ne, 0, 32);
    tb_pad(b, 32);
    for (int i = 0; i < 16; i++) {
        float f = (float)i;
        tb_put(b, &f, 4);
    }
}

/* ------------------------------------------------------------------------ */
/* Shared models                                                             */
/* ------------------------------------------------------------------------ */

typedef struct tensor_fact {
    const char *name;
    lb_type type;
    int64_t ne0, ne1; /* ggml order; ne1 = 1 for 1-D */
    int n_dims;
    uint64_t offset; /* relative to the data section */
    size_t nbytes;
    uint8_t first8[8];
} tensor_fact;

typedef struct file_fact {
    const char *rel;
    size_t size, data_offset;
    int64_t n_kv, n_tensors;
    int file_type; /* general.file_type, -1 = absent */
    tensor_fact t[4];
} file_fact;

/* From gguf-py GGUFReader (see header comment). */
static const file_fact FILES[] = {
    {"models/stories260K/stories260K.gguf", 1185376, 14176, 19, 48, -1,
     {{"token_embd.weight", LB_TYPE_F32, 64, 512, 2, 0, 131072,
       {80, 233, 150, 190, 100, 216, 15, 63}},
      {"output_norm.weight", LB_TYPE_F32, 64, 1, 1, 131072, 256,
       {239, 84, 29, 64, 110, 4, 175, 63}},
      {"blk.0.ffn_down.weight", LB_TYPE_F32, 172, 64, 2, 355840, 44032,
       {76, 57, 10, 62, 105, 117, 137, 61}},
      {"blk.4.ffn_up.weight", LB_TYPE_F32, 64, 172, 2, 1126912, 44032,
       {118, 193, 76, 60, 165, 74, 103, 60}}}},
    {"models/stories260K/stories260K-Q8_0.gguf", 379168, 14240, 21, 48, 7,
     {{"token_embd.weight", LB_TYPE_Q8_0, 64, 512, 2, 35072, 34816,
       {26, 31, 214, 81, 25, 49, 239, 33}},
      {"output_norm.weight", LB_TYPE_F32, 64, 1, 1, 34816, 256,
       {239, 84, 29, 64, 110, 4, 175, 63}},
      {"blk.0.ffn_down.weight", LB_TYPE_F16, 172, 64, 2, 83200, 22016,
       {82, 48, 76, 44, 51, 47, 111, 46}},
      {"blk.4.ffn_up.weight", LB_TYPE_Q8_0, 64, 172, 2, 353216, 11696,
       {60, 24, 6, 7, 202, 63, 31, 235}}}},
    {"models/stories260K/stories260K-Q4_0.gguf", 277024, 14240, 21, 48, 2,
     {{"token_embd.weight", LB_TYPE_Q4_0, 64, 512, 2, 35072, 18432,
       {12, 47, 101, 173, 10, 187, 231, 42}},
      {"output_norm.weight", LB_TYPE_F32, 64, 1, 1, 34816, 256,
       {239, 84, 29, 64, 110, 4, 175, 63}},
      {"blk.0.ffn_down.weight", LB_TYPE_F16, 172, 64, 2, 60672, 22016,
       {82, 48, 76, 44, 51, 47, 111, 46}},
      {"blk.4.ffn_up.weight", LB_TYPE_Q4_0, 64, 172, 2, 256576, 6192,
       {52, 168, 216, 136, 187, 20, 70, 249}}}},
    {"models/tinystories-656k-gguf/ts656k-f32.gguf", 2674656, 50656, 32, 20, 0,
     {{"token_embd.weight", LB_TYPE_F32, 128, 2048, 2, 0, 1048576,
       {0, 0, 47, 191, 0, 0, 212, 188}},
      {"output_norm.weight", LB_TYPE_F32, 128, 1, 1, 2623488, 512,
       {0, 0, 36, 63, 0, 0, 51, 63}},
      {"blk.0.ffn_down.weight", LB_TYPE_F32, 384, 128, 2, 1049088, 196608,
       {0, 0, 10, 189, 0, 0, 109, 62}},
      {"blk.1.ffn_up.weight", LB_TYPE_F32, 128, 384, 2, 2229760, 196608,
       {0, 0, 54, 190, 0, 0, 205, 61}}}},
    {"models/tinystories-656k-gguf/ts656k-q4_0.gguf", 552928, 50656, 32, 20, 2,
     {{"token_embd.weight", LB_TYPE_Q8_0, 128, 2048, 2, 512, 278528,
       {200, 31, 166, 253, 78, 234, 46, 108}},
      {"output_norm.weight", LB_TYPE_F32, 128, 1, 1, 0, 512,
       {0, 0, 36, 63, 0, 0, 51, 63}},
      {"blk.0.ffn_down.weight", LB_TYPE_Q4_0, 384, 128, 2, 307200, 27648,
       {48, 175, 72, 182, 184, 67, 116, 152}},
      {"blk.1.ffn_up.weight", LB_TYPE_Q4_0, 128, 384, 2, 474624, 27648,
       {64, 49, 199, 57, 28, 154, 169, 54}}}},
};
#define N_FILES (sizeof FILES / sizeof FILES[0])

static bool have_shared(void) {
    return lb_is_file(th_shared(FILES[0].rel));
}

static void test_shared_files_layout(void) {
    for (size_t f = 0; f < N_FILES; f++) {
        const file_fact *ff = &FILES[f];
        lb_gguf *g = NULL;
        TH_CHECK_OK(lb_gguf_open(th_shared(ff->rel), &g));
        if (!g) continue;
        TH_CHECK_INT(lb_gguf_version(g), 3);
        TH_CHECK_INT(lb_gguf_alignment(g), 32);
        TH_CHECK_INT(lb_gguf_file_size(g), ff->size);
        TH_CHECK_INT(lb_gguf_data_offset(g), ff->data_offset);
        TH_CHECK_INT(lb_gguf_data_size(g), ff->size - ff->data_offset);
        TH_CHECK_INT(lb_gguf_n_kv(g), ff->n_kv);
        TH_CHECK_INT(lb_gguf_n_tensors(g), ff->n_tensors);
        uint32_t ft = 0;
        if (ff->file_type < 0) {
            TH_CHECK_FAILS(lb_gguf_get_u32(g, "general.file_type", &ft),
                           LB_ERR_NOT_FOUND);
            TH_CHECK(contains(lb_last_error(), "general.file_type"));
        } else {
            TH_CHECK_OK(lb_gguf_get_u32(g, "general.file_type", &ft));
            TH_CHECK_INT(ft, ff->file_type);
        }
        for (int k = 0; k < 4; k++) {
            const tensor_fact *tf = &ff->t[k];
            lb_tensor t;
            TH_CHECK_OK(lb_gguf_get_tensor(g, tf->name, &t));
            TH_CHECK_STR(t.name, tf->name);
            TH_CHECK_INT(t.type, tf->type);
            TH_CHECK_INT(t.n_dims, tf->n_dims);
            if (tf->n_dims == 2) { /* outermost-first */
                TH_CHECK_INT(t.shape[0], tf->ne1);
                TH_CHECK_INT(t.shape[1], tf->ne0);
            } else {
                TH_CHECK_INT(t.shape[0], tf->ne0);
            }
            TH_CHECK_INT(t.nbytes, tf->nbytes);
            TH_CHECK((const uint8_t *)t.data ==
                     lb_gguf_data(g) + tf->offset);
            TH_CHECK_MSG(memcmp(t.data, tf->first8, 8) == 0, "%s first bytes",
                         tf->name);
            int64_t i = lb_gguf_find_tensor(g, tf->name);
            const lb_gguf_tensor_info *ti = lb_gguf_tensor_at(g, i);
            TH_CHECK(ti != NULL);
            if (ti) {
                TH_CHECK_INT(ti->ne[0], tf->ne0);
                TH_CHECK_INT(ti->ne[1], tf->ne1);
                TH_CHECK_INT(ti->ne[2], 1);
                TH_CHECK_INT(ti->offset, tf->offset);
                TH_CHECK_INT(ti->n_elements, tf->ne0 * tf->ne1);
            }
        }
        /* Data sizes add up: data offset + every tensor padded to 32 bytes
         * = the file size (llama.cpp pads each tensor, the last included),
         * and tensors are packed in info order. */
        size_t total = lb_gguf_data_offset(g);
        uint64_t expect_off = 0;
        for (int64_t i = 0; i < lb_gguf_n_tensors(g); i++) {
            const lb_gguf_tensor_info *ti = lb_gguf_tensor_at(g, i);
            TH_CHECK_INT(ti->offset, expect_off);
            size_t padded = (ti->nbytes + 31) / 32 * 32;
            total += padded;
            expect_off += padded;
        }
        TH_CHECK_INT(total, ff->size);
        TH_CHECK(lb_gguf_find_tensor(g, "no.such.tensor") == -1);
        lb_tensor t;
        TH_CHECK_FAILS(lb_gguf_get_tensor(g, "no.such.tensor", &t),
                       LB_ERR_NOT_FOUND);
        TH_CHECK(contains(lb_last_error(), "no.such.tensor"));
        TH_CHECK(lb_gguf_tensor_at(g, -1) == NULL);
        TH_CHECK(lb_gguf_tensor_at(g, lb_gguf_n_tensors(g)) == NULL);
        TH_CHECK_FAILS(lb_gguf_tensor_view(g, 1000, &t), LB_ERR_RANGE);
        lb_gguf_close(g);
    }
}

/* Tensor types per file (gguf-dump): which tensors llama-quantize kept. */
static void test_shared_tensor_types(void) {
    static const struct {
        const char *rel;
        lb_type output, embd, attn, ffn_down, norm;
    } want[] = {
        {"models/stories260K/stories260K.gguf", LB_TYPE_F32, LB_TYPE_F32,
         LB_TYPE_F32, LB_TYPE_F32, LB_TYPE_F32},
        {"models/stories260K/stories260K-Q8_0.gguf", LB_TYPE_Q8_0, LB_TYPE_Q8_0,
         LB_TYPE_Q8_0, LB_TYPE_F16, LB_TYPE_F32},
        {"models/stories260K/stories260K-Q4_0.gguf", LB_TYPE_Q8_0, LB_TYPE_Q4_0,
         LB_TYPE_Q4_0, LB_TYPE_F16, LB_TYPE_F32},
        {"models/tinystories-656k-gguf/ts656k-f32.gguf", -1, LB_TYPE_F32,
         LB_TYPE_F32, LB_TYPE_F32, LB_TYPE_F32},
        {"models/tinystories-656k-gguf/ts656k-q4_0.gguf", -1, LB_TYPE_Q8_0,
         LB_TYPE_Q4_0, LB_TYPE_Q4_0, LB_TYPE_F32},
    };
    for (size_t f = 0; f < sizeof want / sizeof want[0]; f++) {
        lb_gguf *g = NULL;
        TH_CHECK_OK(lb_gguf_open(th_shared(want[f].rel), &g));
        if (!g) continue;
        lb_tensor t;
        if ((int)want[f].output < 0) { /* tied embeddings: no output.weight */
            TH_CHECK(lb_gguf_find_tensor(g, "output.weight") < 0);
        } else {
            TH_CHECK_OK(lb_gguf_get_tensor(g, "output.weight", &t));
            TH_CHECK_INT(t.type, want[f].output);
        }
        TH_CHECK_OK(lb_gguf_get_tensor(g, "token_embd.weight", &t));
        TH_CHECK_INT(t.type, want[f].embd);
        TH_CHECK_OK(lb_gguf_get_tensor(g, "blk.1.attn_q.weight", &t));
        TH_CHECK_INT(t.type, want[f].attn);
        TH_CHECK_OK(lb_gguf_get_tensor(g, "blk.1.attn_k.weight", &t));
        TH_CHECK_INT(t.type, want[f].attn);
        TH_CHECK_OK(lb_gguf_get_tensor(g, "blk.1.ffn_down.weight", &t));
        TH_CHECK_INT(t.type, want[f].ffn_down);
        TH_CHECK_OK(lb_gguf_get_tensor(g, "blk.1.ffn_norm.weight", &t));
        TH_CHECK_INT(t.type, want[f].norm);
        TH_CHECK_INT(t.n_dims, 1);
        lb_gguf_close(g);
    }
}

/* stories260K hyper-parameters: dim 64, 5 layers, 8 heads / 4 kv heads,
 * ffn 172, vocab 512 (llama2.c's stories260K; shared/README.md). */
static void test_stories260k_metadata(void) {
    for (int f = 0; f < 3; f++) {
        lb_gguf *g = NULL;
        TH_CHECK_OK(lb_gguf_open(th_shared(FILES[f].rel), &g));
        if (!g) continue;
        uint32_t u;
        TH_CHECK_OK(lb_gguf_get_u32(g, "llama.embedding_length", &u));
        TH_CHECK_INT(u, 64);
        TH_CHECK_OK(lb_gguf_get_u32(g, "llama.block_count", &u));
        TH_CHECK_INT(u, 5);
        TH_CHECK_OK(lb_gguf_get_u32(g, "llama.attention.head_count", &u));
        TH_CHECK_INT(u, 8);
        TH_CHECK_OK(lb_gguf_get_u32(g, "llama.attention.head_count_kv", &u));
        TH_CHECK_INT(u, 4);
        TH_CHECK_OK(lb_gguf_get_u32(g, "llama.feed_forward_length", &u));
        TH_CHECK_INT(u, 172);
        TH_CHECK_OK(lb_gguf_get_u32(g, "llama.context_length", &u));
        TH_CHECK_INT(u, 2048);
        /* 0xFFFFFFFF "no token" ids: u32 ok, i32 out of range */
        TH_CHECK_OK(lb_gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &u));
        TH_CHECK_INT(u, 4294967295u);
        int32_t i32;
        TH_CHECK_FAILS(lb_gguf_get_i32(g, "tokenizer.ggml.padding_token_id", &i32),
                       LB_ERR_RANGE);
        TH_CHECK(contains(lb_last_error(), "tokenizer.ggml.padding_token_id"));
        int64_t i64;
        TH_CHECK_OK(lb_gguf_get_i64(g, "llama.block_count", &i64));
        TH_CHECK_INT(i64, 5);
        float eps;
        TH_CHECK_OK(lb_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps));
        TH_CHECK(eps == 1e-5f);
        char *s = NULL;
        TH_CHECK_OK(lb_gguf_get_str_dup(g, "general.architecture", &s));
        TH_CHECK_STR(s, "llama");
        free(s);
        lb_gguf_str ms;
        TH_CHECK_OK(lb_gguf_get_str(g, "tokenizer.ggml.model", &ms));
        TH_CHECK(ms.len == 5 && memcmp(ms.data, "llama", 5) == 0);

        const lb_gguf_value *toks;
        uint64_t n = 0;
        TH_CHECK_OK(lb_gguf_get_arr(g, "tokenizer.ggml.tokens", LB_GGUF_TYPE_STRING,
                                    &toks, &n));
        TH_CHECK_INT(n, 512);
        static const char *first[] = {"<unk>", "<s>", "</s>", "<0x00>", "<0x01>"};
        for (int i = 0; i < 5; i++) {
            lb_gguf_str t;
            TH_CHECK_OK(lb_gguf_get_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)i, &t));
            TH_CHECK(t.len == strlen(first[i]) && memcmp(t.data, first[i], t.len) == 0);
        }
        lb_gguf_str last;
        TH_CHECK_OK(lb_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 511, &last));
        TH_CHECK(last.len == 3 && memcmp(last.data, "\xe2\x80\x8a", 3) == 0); /* U+200A */
        size_t sum = 0;
        for (uint64_t i = 0; i < n; i++) {
            lb_gguf_str t;
            lb_gguf_value el;
            TH_CHECK_OK(lb_gguf_arr_elem(toks, i, &el));
            TH_CHECK_OK(lb_gguf_value_str(&el, &t));
            sum += t.len;
        }
        TH_CHECK_INT(sum, 2305); /* gguf-py: total UTF-8 bytes of the vocab */
        lb_gguf_str t;
        TH_CHECK_FAILS(lb_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 512, &t),
                       LB_ERR_RANGE);
        TH_CHECK(contains(lb_last_error(), "tokenizer.ggml.tokens"));

        const lb_gguf_value *scores, *ttype;
        TH_CHECK_OK(lb_gguf_get_arr(g, "tokenizer.ggml.scores", LB_GGUF_TYPE_FLOAT32,
                                    &scores, &n));
        TH_CHECK_INT(n, 512);
        float last_score;
        memcpy(&last_score, (const uint8_t *)lb_gguf_arr_raw(scores) + 511 * 4, 4);
        TH_CHECK(last_score == -252.0f);
        TH_CHECK_OK(lb_gguf_get_arr(g, "tokenizer.ggml.token_type", LB_GGUF_TYPE_INT32,
                                    &ttype, &n));
        static const int32_t tt[6] = {2, 3, 3, 6, 6, 6};
        for (int i = 0; i < 6; i++) {
            lb_gguf_value el;
            int64_t v = -99;
            TH_CHECK_OK(lb_gguf_arr_elem(ttype, (uint64_t)i, &el));
            TH_CHECK_OK(lb_gguf_value_i64(&el, &v));
            TH_CHECK_INT(v, tt[i]);
        }
        TH_CHECK_FAILS(lb_gguf_get_arr(g, "tokenizer.ggml.scores", LB_GGUF_TYPE_INT32,
                                       &ttype, NULL),
                       LB_ERR_FORMAT);
        TH_CHECK(contains(lb_last_error(), "tokenizer.ggml.scores"));
        /* iteration covers every key once, in file order */
        TH_CHECK_STR(lb_gguf_kv_key(g, 0), "tokenizer.ggml.tokens");
        for (int64_t i = 0; i < lb_gguf_n_kv(g); i++)
            TH_CHECK_INT(lb_gguf_find_key(g, lb_gguf_kv_key(g, i)), i);
        TH_CHECK(lb_gguf_kv_key(g, lb_gguf_n_kv(g)) == NULL);
        TH_CHECK(lb_gguf_kv_value(g, -1) == NULL);
        lb_gguf_close(g);
    }
}

/* tinystories-656k: hidden 128, 2 layers, 8/4 heads, MLP 384, vocab 2048. */
static void test_ts656k_metadata(void) {
    for (int f = 3; f < 5; f++) {
        lb_gguf *g = NULL;
        TH_CHECK_OK(lb_gguf_open(th_shared(FILES[f].rel), &g));
        if (!g) continue;
        uint32_t u;
        TH_CHECK_OK(lb_gguf_get_u32(g, "llama.embedding_length", &u));
        TH_CHECK_INT(u, 128);
        TH_CHECK_OK(lb_gguf_get_u32(g, "llama.block_count", &u));
        TH_CHECK_INT(u, 2);
        TH_CHECK_OK(lb_gguf_get_u32(g, "llama.feed_forward_length", &u));
        TH_CHECK_INT(u, 384);
        TH_CHECK_OK(lb_gguf_get_u32(g, "llama.vocab_size", &u));
        TH_CHECK_INT(u, 2048);
        bool b = false;
        TH_CHECK_OK(lb_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b));
        TH_CHECK(b == true);
        TH_CHECK_OK(lb_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b));
        TH_CHECK(b == false);
        double d;
        TH_CHECK_OK(lb_gguf_get_f64(g, "llama.rope.freq_base", &d));
        TH_CHECK(d == 10000.0);
        char *name = NULL;
        TH_CHECK_OK(lb_gguf_get_str_dup(g, "general.name", &name));
        TH_CHECK_STR(name, "Tinystories 656k Hf Embedfix");
        free(name);
        uint64_t n;
        const lb_gguf_value *toks;
        TH_CHECK_OK(lb_gguf_get_arr(g, "tokenizer.ggml.tokens", -1, &toks, &n));
        TH_CHECK_INT(n, 2048);
        lb_gguf_str t;
        TH_CHECK_OK(lb_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 1, &t));
        TH_CHECK(t.len == 15 && memcmp(t.data, "<|start_story|>", 15) == 0);
        TH_CHECK_OK(lb_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 2047, &t));
        TH_CHECK(t.len == 17 &&
                 memcmp(t.data, "dog\xe2\x96\x81named\xe2\x96\x81Max", 17) == 0);
        /* type errors name the key */
        TH_CHECK_FAILS(lb_gguf_get_u32(g, "general.name", &u), LB_ERR_FORMAT);
        TH_CHECK(contains(lb_last_error(), "general.name"));
        TH_CHECK(contains(lb_last_error(), "STRING"));
        TH_CHECK_FAILS(lb_gguf_get_bool(g, "llama.block_count", &b), LB_ERR_FORMAT);
        TH_CHECK_FAILS(lb_gguf_get_str(g, "tokenizer.ggml.tokens", &t), LB_ERR_FORMAT);
        TH_CHECK(contains(lb_last_error(), "ARRAY"));
        lb_gguf_close(g);
    }
}

/* ------------------------------------------------------------------------ */
/* Writer                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct sample_tensor {
    const char *name;
    lb_type type;
    int n_dims;
    int64_t shape[4]; /* outermost-first */
    size_t nbytes;    /* from ggml's block sizes, computed by hand */
} sample_tensor;

static const sample_tensor SAMPLE_T[] = {
    {"f32", LB_TYPE_F32, 2, {3, 4}, 48},
    {"f16", LB_TYPE_F16, 1, {5}, 10},
    {"bf16", LB_TYPE_BF16, 2, {2, 2}, 8},
    {"f64", LB_TYPE_F64, 1, {2}, 16},
    {"i8", LB_TYPE_I8, 1, {3}, 3},
    {"i16", LB_TYPE_I16, 1, {3}, 6},
    {"i32", LB_TYPE_I32, 1, {4}, 16},
    {"i64", LB_TYPE_I64, 1, {1}, 8},
    {"q4_0", LB_TYPE_Q4_0, 2, {3, 64}, 3 * 2 * 18},
    {"q4_1", LB_TYPE_Q4_1, 2, {1, 32}, 20},
    {"q5_0", LB_TYPE_Q5_0, 2, {1, 32}, 22},
    {"q5_1", LB_TYPE_Q5_1, 2, {1, 32}, 24},
    {"q8_0", LB_TYPE_Q8_0, 2, {2, 32}, 2 * 34},
    {"q2_k", LB_TYPE_Q2_K, 2, {1, 256}, 84},
    {"q3_k", LB_TYPE_Q3_K, 2, {1, 256}, 110},
    {"q4_k", LB_TYPE_Q4_K, 2, {2, 256}, 2 * 144},
    {"q5_k", LB_TYPE_Q5_K, 2, {1, 256}, 176},
    {"q6_k", LB_TYPE_Q6_K, 3, {2, 1, 256}, 2 * 210},
    {"blk.0.attn_q.weight", LB_TYPE_Q4_0, 4, {1, 2, 1, 32}, 2 * 18},
};
#define N_SAMPLE_T (sizeof SAMPLE_T / sizeof SAMPLE_T[0])

static uint8_t pattern(size_t t, size_t i) { return (uint8_t)(i * 7 + t * 13 + 1); }

static lb_status write_sample(const char *path, uint32_t alignment) {
    lb_gguf_writer *w = NULL;
    lb_status st = lb_gguf_writer_create(&w);
    if (st != LB_OK) return st;
#define S(x)                                                                   \
    do {                                                                       \
        if (st == LB_OK) st = (x);                                             \
    } while (0)
    S(lb_gguf_writer_set_architecture(w, "llama"));
    S(lb_gguf_writer_set_name(w, "lowbit sample"));
    if (alignment != 32) S(lb_gguf_writer_set_alignment(w, alignment));
    S(lb_gguf_writer_set_u8(w, "t.u8", 255));
    S(lb_gguf_writer_set_i8(w, "t.i8", -128));
    S(lb_gguf_writer_set_u16(w, "t.u16", 65535));
    S(lb_gguf_writer_set_i16(w, "t.i16", -32768));
    S(lb_gguf_writer_set_u32(w, "t.u32", 4294967295u));
    S(lb_gguf_writer_set_i32(w, "t.i32", INT32_MIN));
    S(lb_gguf_writer_set_u64(w, "t.u64", UINT64_MAX));
    S(lb_gguf_writer_set_i64(w, "t.i64", INT64_MIN));
    S(lb_gguf_writer_set_f32(w, "t.f32", 1.5f));
    S(lb_gguf_writer_set_f64(w, "t.f64", -2.25e300));
    S(lb_gguf_writer_set_bool(w, "t.bool_t", true));
    S(lb_gguf_writer_set_bool(w, "t.bool_f", false));
    S(lb_gguf_writer_set_str(w, "t.str", "h\xc3\xa9llo w\xc3\xb6rld"));
    S(lb_gguf_writer_set_strn(w, "t.str_nul", "a\0b", 3));
    S(lb_gguf_writer_set_str(w, "t.str_empty", ""));
    static const uint8_t au8[3] = {0, 1, 255};
    static const int8_t ai8[3] = {-128, 0, 127};
    static const uint16_t au16[3] = {0, 1, 65535};
    static const int16_t ai16[3] = {-32768, 0, 32767};
    static const uint32_t au32[3] = {0, 1, 4294967295u};
    static const int32_t ai32[3] = {-1, 0, 7};
    static const uint64_t au64[3] = {0, 1, UINT64_MAX};
    static const int64_t ai64[3] = {INT64_MIN, 0, INT64_MAX};
    static const float af32[3] = {0.5f, -1.0f, 3.25f};
    static const double af64[3] = {0.125, -1e300, 3.0};
    static const uint8_t abool[3] = {1, 0, 1};
    S(lb_gguf_writer_set_arr(w, "t.arr_u8", LB_GGUF_TYPE_UINT8, au8, 3));
    S(lb_gguf_writer_set_arr(w, "t.arr_i8", LB_GGUF_TYPE_INT8, ai8, 3));
    S(lb_gguf_writer_set_arr(w, "t.arr_u16", LB_GGUF_TYPE_UINT16, au16, 3));
    S(lb_gguf_writer_set_arr(w, "t.arr_i16", LB_GGUF_TYPE_INT16, ai16, 3));
    S(lb_gguf_writer_set_arr(w, "t.arr_u32", LB_GGUF_TYPE_UINT32, au32, 3));
    S(lb_gguf_writer_set_arr(w, "t.arr_i32", LB_GGUF_TYPE_INT32, ai32, 3));
    S(lb_gguf_writer_set_arr(w, "t.arr_u64", LB_GGUF_TYPE_UINT64, au64, 3));
    S(lb_gguf_writer_set_arr(w, "t.arr_i64", LB_GGUF_TYPE_INT64, ai64, 3));
    S(lb_gguf_writer_set_arr(w, "t.arr_f32", LB_GGUF_TYPE_FLOAT32, af32, 3));
    S(lb_gguf_writer_set_arr(w, "t.arr_f64", LB_GGUF_TYPE_FLOAT64, af64, 3));
    S(lb_gguf_writer_set_arr(w, "t.arr_bool", LB_GGUF_TYPE_BOOL, abool, 3));
    static const char *const astr[3] = {"a", "", "ccc"};
    S(lb_gguf_writer_set_arr_str(w, "t.arr_str", astr, 3));
    S(lb_gguf_writer_set_arr(w, "t.arr_empty", LB_GGUF_TYPE_INT32, NULL, 0));
    S(lb_gguf_writer_set_file_type(w, LB_GGUF_FTYPE_MOSTLY_Q4_0));
    S(lb_gguf_writer_set_quantization_version(w, LB_GGUF_QNT_VERSION));
    for (size_t i = 0; i < N_SAMPLE_T; i++)
        S(lb_gguf_writer_add_tensor(w, SAMPLE_T[i].name, SAMPLE_T[i].type,
                                    SAMPLE_T[i].n_dims, SAMPLE_T[i].shape));
    S(lb_gguf_writer_open(w, path));
    for (size_t i = 0; i < N_SAMPLE_T && st == LB_OK; i++) {
        size_t n = lb_gguf_writer_tensor_nbytes(w, (int64_t)i);
        uint8_t *d = malloc(n);
        for (size_t k = 0; k < n; k++) d[k] = pattern(i, k);
        S(lb_gguf_writer_write_tensor(w, SAMPLE_T[i].name, d, n));
        free(d);
    }
    S(lb_gguf_writer_finish(w));
#undef S
    lb_gguf_writer_free(w);
    return st;
}

static const char *tmp_path(const char *name) {
    static char buf[4][1024];
    static int slot;
    char *b = buf[slot++ & 3];
    snprintf(b, sizeof buf[0], "%s/%s", th_tmpdir(), name);
    return b;
}

static void check_scalar_i64(lb_gguf *g, const char *key, lb_gguf_type type,
                             int64_t want) {
    const lb_gguf_value *v = NULL;
    TH_CHECK_OK(lb_gguf_get(g, key, &v));
    if (!v) return;
    TH_CHECK_MSG(v->type == type, "%s type %s", key, lb_gguf_type_name(v->type));
    int64_t x = 0;
    TH_CHECK_OK(lb_gguf_get_i64(g, key, &x));
    TH_CHECK_MSG(x == want, "%s: %lld != %lld", key, (long long)x, (long long)want);
}

static void test_roundtrip_all_types(void) {
    const char *path = tmp_path("sample.gguf");
    TH_CHECK_OK(write_sample(path, 32));
    lb_gguf *g = NULL;
    TH_CHECK_OK(lb_gguf_open(path, &g));
    if (!g) return;
    TH_CHECK_INT(lb_gguf_version(g), 3);
    TH_CHECK_INT(lb_gguf_alignment(g), 32);
    TH_CHECK(lb_gguf_find_key(g, "general.alignment") < 0); /* default: not written */
    TH_CHECK_INT(lb_gguf_n_kv(g), 32);
    TH_CHECK_STR(lb_gguf_kv_key(g, 0), "general.architecture");
    TH_CHECK_STR(lb_gguf_kv_key(g, 31), "general.quantization_version");
    check_scalar_i64(g, "t.u8", LB_GGUF_TYPE_UINT8, 255);
    check_scalar_i64(g, "t.i8", LB_GGUF_TYPE_INT8, -128);
    check_scalar_i64(g, "t.u16", LB_GGUF_TYPE_UINT16, 65535);
    check_scalar_i64(g, "t.i16", LB_GGUF_TYPE_INT16, -32768);
    check_scalar_i64(g, "t.u32", LB_GGUF_TYPE_UINT32, 4294967295LL);
    check_scalar_i64(g, "t.i32", LB_GGUF_TYPE_INT32, INT32_MIN);
    check_scalar_i64(g, "t.i64", LB_GGUF_TYPE_INT64, INT64_MIN);
    uint64_t u64 = 0;
    TH_CHECK_OK(lb_gguf_get_u64(g, "t.u64", &u64));
    TH_CHECK(u64 == UINT64_MAX);
    int64_t i64;
    TH_CHECK_FAILS(lb_gguf_get_i64(g, "t.u64", &i64), LB_ERR_RANGE);
    TH_CHECK(contains(lb_last_error(), "t.u64"));
    TH_CHECK_FAILS(lb_gguf_get_u64(g, "t.i8", &u64), LB_ERR_RANGE);
    uint32_t u32;
    TH_CHECK_FAILS(lb_gguf_get_u32(g, "t.u64", &u32), LB_ERR_RANGE);
    TH_CHECK_OK(lb_gguf_get_u32(g, "t.u8", &u32)); /* any integer that fits */
    TH_CHECK_INT(u32, 255);
    int32_t i32;
    TH_CHECK_OK(lb_gguf_get_i32(g, "t.i16", &i32));
    TH_CHECK_INT(i32, -32768);
    TH_CHECK_FAILS(lb_gguf_get_i32(g, "t.u32", &i32), LB_ERR_RANGE);
    TH_CHECK_FAILS(lb_gguf_get_i32(g, "t.i64", &i32), LB_ERR_RANGE);
    TH_CHECK_FAILS(lb_gguf_get_u32(g, "t.f32", &u32), LB_ERR_FORMAT);
    TH_CHECK_FAILS(lb_gguf_get_u32(g, "t.bool_t", &u32), LB_ERR_FORMAT);
    float f;
    double d;
    TH_CHECK_OK(lb_gguf_get_f32(g, "t.f32", &f));
    TH_CHECK(f == 1.5f);
    TH_CHECK_OK(lb_gguf_get_f64(g, "t.f64", &d));
    TH_CHECK(d == -2.25e300);
    TH_CHECK_FAILS(lb_gguf_get_f32(g, "t.f64", &f), LB_ERR_RANGE);
    TH_CHECK_OK(lb_gguf_get_f32(g, "t.i16", &f)); /* integers convert */
    TH_CHECK(f == -32768.0f);
    TH_CHECK_FAILS(lb_gguf_get_f64(g, "t.str", &d), LB_ERR_FORMAT);
    bool b = false;
    TH_CHECK_OK(lb_gguf_get_bool(g, "t.bool_t", &b));
    TH_CHECK(b);
    TH_CHECK_OK(lb_gguf_get_bool(g, "t.bool_f", &b));
    TH_CHECK(!b);
    lb_gguf_str s;
    TH_CHECK_OK(lb_gguf_get_str(g, "t.str", &s));
    TH_CHECK(s.len == 13 && memcmp(s.data, "h\xc3\xa9llo w\xc3\xb6rld", 13) == 0);
    TH_CHECK_OK(lb_gguf_get_str(g, "t.str_nul", &s));
    TH_CHECK(s.len == 3 && memcmp(s.data, "a\0b", 3) == 0);
    char *dup = NULL;
    TH_CHECK_FAILS(lb_gguf_get_str_dup(g, "t.str_nul", &dup), LB_ERR_FORMAT);
    TH_CHECK(dup == NULL);
    TH_CHECK_OK(lb_gguf_get_str_dup(g, "t.str_empty", &dup));
    TH_CHECK_STR(dup, "");
    free(dup);
    TH_CHECK_FAILS(lb_gguf_get_u32(g, "t.missing", &u32), LB_ERR_NOT_FOUND);
    TH_CHECK(contains(lb_last_error(), "t.missing"));
    TH_CHECK(contains(lb_last_error(), path));

    static const struct {
        const char *key;
        lb_gguf_type et;
        int64_t v[3];
    } arrs[] = {
        {"t.arr_u8", LB_GGUF_TYPE_UINT8, {0, 1, 255}},
        {"t.arr_i8", LB_GGUF_TYPE_INT8, {-128, 0, 127}},
        {"t.arr_u16", LB_GGUF_TYPE_UINT16, {0, 1, 65535}},
        {"t.arr_i16", LB_GGUF_TYPE_INT16, {-32768, 0, 32767}},
        {"t.arr_u32", LB_GGUF_TYPE_UINT32, {0, 1, 4294967295LL}},
        {"t.arr_i32", LB_GGUF_TYPE_INT32, {-1, 0, 7}},
        {"t.arr_i64", LB_GGUF_TYPE_INT64, {INT64_MIN, 0, INT64_MAX}},
    };
    for (size_t k = 0; k < sizeof arrs / sizeof arrs[0]; k++) {
        const lb_gguf_value *a = NULL;
        uint64_t n = 0;
        TH_CHECK_OK(lb_gguf_get_arr(g, arrs[k].key, arrs[k].et, &a, &n));
        TH_CHECK_INT(n, 3);
        if (!a) continue;
        TH_CHECK(lb_gguf_arr_raw(a) != NULL);
        for (uint64_t i = 0; i < 3; i++) {
            lb_gguf_value el;
            int64_t x = 0;
            TH_CHECK_OK(lb_gguf_arr_elem(a, i, &el));
            TH_CHECK_OK(lb_gguf_value_i64(&el, &x));
            TH_CHECK_MSG(x == arrs[k].v[i], "%s[%d]", arrs[k].key, (int)i);
        }
        lb_gguf_value el;
        TH_CHECK_FAILS(lb_gguf_arr_elem(a, 3, &el), LB_ERR_RANGE);
    }
    const lb_gguf_value *a = NULL;
    uint64_t n = 0;
    TH_CHECK_OK(lb_gguf_get_arr(g, "t.arr_u64", LB_GGUF_TYPE_UINT64, &a, &n));
    lb_gguf_value el;
    TH_CHECK_OK(lb_gguf_arr_elem(a, 2, &el));
    TH_CHECK_OK(lb_gguf_value_u64(&el, &u64));
    TH_CHECK(u64 == UINT64_MAX);
    TH_CHECK_OK(lb_gguf_get_arr(g, "t.arr_f32", LB_GGUF_TYPE_FLOAT32, &a, &n));
    TH_CHECK_OK(lb_gguf_arr_elem(a, 2, &el));
    TH_CHECK_OK(lb_gguf_value_f64(&el, &d));
    TH_CHECK(d == 3.25);
    TH_CHECK_OK(lb_gguf_get_arr(g, "t.arr_f64", LB_GGUF_TYPE_FLOAT64, &a, &n));
    TH_CHECK_OK(lb_gguf_arr_elem(a, 1, &el));
    TH_CHECK_OK(lb_gguf_value_f64(&el, &d));
    TH_CHECK(d == -1e300);
    TH_CHECK_OK(lb_gguf_get_arr(g, "t.arr_bool", LB_GGUF_TYPE_BOOL, &a, &n));
    TH_CHECK_OK(lb_gguf_arr_elem(a, 0, &el));
    TH_CHECK_OK(lb_gguf_value_bool(&el, &b));
    TH_CHECK(b);
    TH_CHECK_OK(lb_gguf_arr_elem(a, 1, &el));
    TH_CHECK_OK(lb_gguf_value_bool(&el, &b));
    TH_CHECK(!b);
    TH_CHECK_OK(lb_gguf_get_arr(g, "t.arr_str", LB_GGUF_TYPE_STRING, &a, &n));
    TH_CHECK_INT(n, 3);
    TH_CHECK(lb_gguf_arr_raw(a) == NULL);
    TH_CHECK_OK(lb_gguf_get_arr_str(g, "t.arr_str", 1, &s));
    TH_CHECK(s.len == 0);
    TH_CHECK_OK(lb_gguf_get_arr_str(g, "t.arr_str", 2, &s));
    TH_CHECK(s.len == 3 && memcmp(s.data, "ccc", 3) == 0);
    TH_CHECK_OK(lb_gguf_get_arr(g, "t.arr_empty", LB_GGUF_TYPE_INT32, &a, &n));
    TH_CHECK_INT(n, 0);
    TH_CHECK_FAILS(lb_gguf_arr_elem(a, 0, &el), LB_ERR_RANGE);
    uint32_t ft;
    TH_CHECK_OK(lb_gguf_get_u32(g, "general.file_type", &ft));
    TH_CHECK_INT(ft, 2);
    TH_CHECK_OK(lb_gguf_get_u32(g, "general.quantization_version", &ft));
    TH_CHECK_INT(ft, 2);

    /* tensors: types, shapes, sizes (ggml block sizes), aligned offsets,
     * data bytes */
    TH_CHECK_INT(lb_gguf_n_tensors(g), N_SAMPLE_T);
    uint64_t off = 0;
    for (size_t i = 0; i < N_SAMPLE_T; i++) {
        const sample_tensor *st = &SAMPLE_T[i];
        lb_tensor t;
        TH_CHECK_OK(lb_gguf_get_tensor(g, st->name, &t));
        TH_CHECK_INT(t.type, st->type);
        TH_CHECK_INT(t.n_dims, st->n_dims);
        for (int k = 0; k < st->n_dims; k++) TH_CHECK_INT(t.shape[k], st->shape[k]);
        TH_CHECK_MSG(t.nbytes == st->nbytes, "%s: %zu bytes, want %zu", st->name,
                     t.nbytes, st->nbytes);
        const lb_gguf_tensor_info *ti = lb_gguf_tensor_at(g, (int64_t)i);
        TH_CHECK_INT(ti->offset, off);
        TH_CHECK_INT(ti->n_dims, st->n_dims);
        TH_CHECK_INT(ti->ne[0], st->shape[st->n_dims - 1]); /* reversed */
        off += (st->nbytes + 31) / 32 * 32;
        bool ok = true;
        for (size_t k = 0; k < t.nbytes; k++)
            ok &= ((const uint8_t *)t.data)[k] == pattern(i, k);
        TH_CHECK_MSG(ok, "%s data", st->name);
    }
    TH_CHECK_INT(lb_gguf_data_size(g), off); /* last tensor padded too */
    lb_gguf_close(g);
}

/* The exact bytes of a tiny file, built by hand from the spec + gguf.cpp. */
static void test_writer_exact_bytes(void) {
    tb want = {0};
    tb_header(&want, 3, 1, 1);
    tb_kv_u32(&want, "a.b", 7);
    uint64_t ne[2] = {3, 1};
    tb_ti(&want, "t", 2, ne, 0 /* F32 */, 0);
    tb_pad(&want, 32);
    TH_CHECK_INT(want.n, 96); /* 24 + 19 + 41 = 84 -> 96 */
    float data[3] = {1, 2, 3};
    tb_put(&want, data, 12);
    tb_pad(&want, 32);
    TH_CHECK_INT(want.n, 128);

    const char *path = tmp_path("exact.gguf");
    lb_gguf_writer *w = NULL;
    TH_CHECK_OK(lb_gguf_writer_create(&w));
    TH_CHECK_OK(lb_gguf_writer_set_u32(w, "a.b", 7));
    int64_t shape[2] = {1, 3};
    TH_CHECK_OK(lb_gguf_writer_add_tensor(w, "t", LB_TYPE_F32, 2, shape));
    TH_CHECK_INT(lb_gguf_writer_data_offset(w), 96);
    size_t fsz = 0;
    TH_CHECK_OK(lb_gguf_writer_file_size(w, &fsz));
    TH_CHECK_INT(fsz, 128);
    TH_CHECK_OK(lb_gguf_writer_open(w, path));
    TH_CHECK(!lb_is_file(path)); /* atomic: nothing at the path yet */
    TH_CHECK_OK(lb_gguf_writer_write_tensor(w, "t", data, sizeof data));
    TH_CHECK_OK(lb_gguf_writer_finish(w));
    lb_gguf_writer_free(w);
    size_t n = 0;
    uint8_t *got = th_read_bin(path, &n);
    TH_CHECK_INT(n, want.n);
    TH_CHECK(got && n == want.n && memcmp(got, want.p, n) == 0);
    free(got);
    tb_free(&want);
}

static void test_writer_alignment(void) {
    /* 64: general.alignment is written, offsets and data start are 64-aligned */
    const char *path = tmp_path("align64.gguf");
    TH_CHECK_OK(write_sample(path, 64));
    lb_gguf *g = NULL;
    TH_CHECK_OK(lb_gguf_open(path, &g));
    if (g) {
        TH_CHECK_INT(lb_gguf_alignment(g), 64);
        uint32_t a = 0;
        TH_CHECK_OK(lb_gguf_get_u32(g, "general.alignment", &a));
        TH_CHECK_INT(a, 64);
        TH_CHECK_INT(lb_gguf_data_offset(g) % 64, 0);
        uint64_t off = 0;
        for (int64_t i = 0; i < lb_gguf_n_tensors(g); i++) {
            TH_CHECK_INT(lb_gguf_tensor_at(g, i)->offset, off);
            off += (SAMPLE_T[i].nbytes + 63) / 64 * 64;
        }
        TH_CHECK_INT(lb_gguf_data_size(g), off);
        lb_gguf_close(g);
    }
    /* 1, 0, 48 (not a power of two), 4 (not a multiple of 8: spec) refused */
    lb_gguf_writer *w = NULL;
    TH_CHECK_OK(lb_gguf_writer_create(&w));
    TH_CHECK_FAILS(lb_gguf_writer_set_alignment(w, 1), LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gguf_writer_set_alignment(w, 0), LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gguf_writer_set_alignment(w, 48), LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gguf_writer_set_alignment(w, 4), LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gguf_writer_set_u32(w, "general.alignment", 24),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gguf_writer_set_u64(w, "general.alignment", 64),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(contains(lb_last_error(), "general.alignment"));
    TH_CHECK_INT(lb_gguf_writer_alignment(w), 32);
    TH_CHECK_OK(lb_gguf_writer_set_alignment(w, 32)); /* default: no key */
    TH_CHECK_INT(lb_gguf_writer_data_offset(w), 32);   /* 24 -> 32 */
    TH_CHECK_OK(lb_gguf_writer_set_u32(w, "general.alignment", 128));
    TH_CHECK_INT(lb_gguf_writer_alignment(w), 128);
    int64_t shape[1] = {8};
    TH_CHECK_OK(lb_gguf_writer_add_tensor(w, "x", LB_TYPE_F32, 1, shape));
    /* offsets are computed: alignment is frozen once tensors exist */
    TH_CHECK_FAILS(lb_gguf_writer_set_alignment(w, 64), LB_ERR_INVALID_ARG);
    lb_gguf_writer_free(w);

    /* reader: alignment 1 (a power of two, accepted as by gguf.cpp) */
    tb b = {0};
    tb_header(&b, 3, 1, 1);
    tb_kv_u32(&b, "general.alignment", 1);
    uint64_t ne[1] = {3};
    tb_ti(&b, "x", 1, ne, 0, 0);
    size_t doff = b.n; /* no padding with alignment 1 */
    tb_zeros(&b, 12);
    g = NULL;
    TH_CHECK_OK(open_tb(&b, &g));
    if (g) {
        TH_CHECK_INT(lb_gguf_alignment(g), 1);
        TH_CHECK_INT(lb_gguf_data_offset(g), doff);
        lb_gguf_close(g);
    }
    tb_free(&b);
}

/* Several tensors streamed in odd-sized pieces, a zero-size tensor, and the
 * misuse errors; the output only appears at finish. */
static void test_writer_streaming(void) {
    const char *path = tmp_path("stream.gguf");
    lb_gguf_writer *w = NULL;
    TH_CHECK_OK(lb_gguf_writer_create(&w));
    TH_CHECK_OK(lb_gguf_writer_set_architecture(w, "llama"));
    int64_t s1[2] = {7, 64}, s0[2] = {0, 32}, s2[1] = {100};
    TH_CHECK_OK(lb_gguf_writer_add_tensor(w, "a", LB_TYPE_Q8_0, 2, s1));
    TH_CHECK_OK(lb_gguf_writer_add_tensor(w, "empty", LB_TYPE_Q4_0, 2, s0));
    TH_CHECK_OK(lb_gguf_writer_add_tensor(w, "c", LB_TYPE_F16, 1, s2));
    TH_CHECK_FAILS(lb_gguf_writer_add_tensor(w, "a", LB_TYPE_F32, 1, s2),
                   LB_ERR_INVALID_ARG); /* duplicate */
    TH_CHECK(contains(lb_last_error(), "'a'"));
    int64_t bad[2] = {2, 33};
    TH_CHECK_FAILS(lb_gguf_writer_add_tensor(w, "d", LB_TYPE_Q4_0, 2, bad),
                   LB_ERR_INVALID_ARG); /* 33 not a multiple of 32 */
    TH_CHECK(contains(lb_last_error(), "'d'"));
    int64_t neg[1] = {-1};
    TH_CHECK_FAILS(lb_gguf_writer_add_tensor(w, "e", LB_TYPE_F32, 1, neg),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gguf_writer_add_tensor(w, "f", LB_TYPE_F32, 5, s1),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gguf_writer_add_tensor(w, "g", LB_TYPE_U8, 1, s2),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gguf_writer_add_tensor(w, "", LB_TYPE_F32, 1, s2),
                   LB_ERR_INVALID_ARG);
    char longname[80];
    memset(longname, 'n', 64);
    longname[64] = '\0';
    TH_CHECK_FAILS(lb_gguf_writer_add_tensor(w, longname, LB_TYPE_F32, 1, s2),
                   LB_ERR_INVALID_ARG);
    longname[63] = '\0'; /* 63 bytes: ggml's limit */
    TH_CHECK_OK(lb_gguf_writer_add_tensor(w, longname, LB_TYPE_F32, 1, s2));
    TH_CHECK_INT(lb_gguf_writer_n_tensors(w), 4);
    TH_CHECK_INT(lb_gguf_writer_tensor_nbytes(w, 0), 7 * 2 * 34);
    TH_CHECK_INT(lb_gguf_writer_tensor_nbytes(w, 1), 0);
    TH_CHECK_INT(lb_gguf_writer_tensor_nbytes(w, 2), 200);
    TH_CHECK_FAILS(lb_gguf_writer_write_data(w, "x", 1), LB_ERR_INVALID_ARG); /* not open */
    TH_CHECK_OK(lb_gguf_writer_open(w, path));
    TH_CHECK_FAILS(lb_gguf_writer_set_u32(w, "late", 1), LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gguf_writer_add_tensor(w, "late", LB_TYPE_F32, 1, s2),
                   LB_ERR_INVALID_ARG);
    size_t total = 476 + 200 + 400;
    uint8_t *d = malloc(total);
    for (size_t i = 0; i < total; i++) d[i] = (uint8_t)(i * 31 + 5);
    TH_CHECK_INT(lb_gguf_writer_next_tensor(w), 0);
    /* pieces of 1, 100, 375 bytes for "a"; then "c" and the last in 3 calls
     * that cross the tensor boundary; "empty" needs no data */
    TH_CHECK_OK(lb_gguf_writer_write_data(w, d, 1));
    TH_CHECK_OK(lb_gguf_writer_write_data(w, d + 1, 100));
    TH_CHECK_OK(lb_gguf_writer_write_data(w, d + 101, 375));
    TH_CHECK_INT(lb_gguf_writer_next_tensor(w), 2);
    TH_CHECK_OK(lb_gguf_writer_write_data(w, d + 476, 150));
    TH_CHECK_OK(lb_gguf_writer_write_data(w, d + 626, 250));
    TH_CHECK_OK(lb_gguf_writer_write_data(w, d + 876, 200));
    TH_CHECK_INT(lb_gguf_writer_next_tensor(w), 4);
    TH_CHECK(!lb_is_file(path));
    TH_CHECK_OK(lb_gguf_writer_finish(w));
    lb_gguf_writer_free(w);
    lb_gguf *g = NULL;
    TH_CHECK_OK(lb_gguf_open(path, &g));
    if (g) {
        lb_tensor t;
        TH_CHECK_OK(lb_gguf_get_tensor(g, "a", &t));
        TH_CHECK(t.nbytes == 476 && memcmp(t.data, d, 476) == 0);
        TH_CHECK_OK(lb_gguf_get_tensor(g, "empty", &t));
        TH_CHECK_INT(t.nbytes, 0);
        TH_CHECK_INT(t.shape[0], 0);
        TH_CHECK_INT(t.shape[1], 32);
        TH_CHECK_OK(lb_gguf_get_tensor(g, "c", &t));
        TH_CHECK(t.nbytes == 200 && memcmp(t.data, d + 476, 200) == 0);
        TH_CHECK_OK(lb_gguf_get_tensor(g, longname, &t));
        TH_CHECK(t.nbytes == 400 && memcmp(t.data, d + 676, 400) == 0);
        /* offsets: 0, 480 (476 padded; "empty" also at 480), 480, 704 */
        TH_CHECK_INT(lb_gguf_tensor_at(g, 1)->offset, 480);
        TH_CHECK_INT(lb_gguf_tensor_at(g, 2)->offset, 480);
        TH_CHECK_INT(lb_gguf_tensor_at(g, 3)->offset, 704);
        TH_CHECK_INT(lb_gguf_data_size(g), 704 + 416);
        lb_gguf_close(g);
    }

    /* misuse: wrong order, wrong size, too much data, unfinished output */
    const char *path2 = tmp_path("stream_bad.gguf");
    for (int mode = 0; mode < 4; mode++) {
        TH_CHECK_OK(lb_gguf_writer_create(&w));
        TH_CHECK_OK(lb_gguf_writer_add_tensor(w, "a", LB_TYPE_F32, 1, s2));
        TH_CHECK_OK(lb_gguf_writer_add_tensor(w, "b", LB_TYPE_F32, 1, s2));
        TH_CHECK_OK(lb_gguf_writer_open(w, path2));
        if (mode == 0) {
            TH_CHECK_FAILS(lb_gguf_writer_write_tensor(w, "b", d, 400),
                           LB_ERR_INVALID_ARG);
            TH_CHECK(contains(lb_last_error(), "'a' is next"));
        } else if (mode == 1) {
            TH_CHECK_FAILS(lb_gguf_writer_write_tensor(w, "a", d, 399),
                           LB_ERR_INVALID_ARG);
            TH_CHECK(contains(lb_last_error(), "'a'"));
        } else if (mode == 2) {
            TH_CHECK_FAILS(lb_gguf_writer_write_data(w, d, 801), LB_ERR_INVALID_ARG);
        } else {
            TH_CHECK_OK(lb_gguf_writer_write_tensor(w, "a", d, 400));
            TH_CHECK_FAILS(lb_gguf_writer_finish(w), LB_ERR_INVALID_ARG);
            TH_CHECK(contains(lb_last_error(), "'b'"));
        }
        /* a failed writer refuses further work and leaves nothing behind */
        TH_CHECK_FAILS(lb_gguf_writer_finish(w), LB_ERR_INVALID_ARG);
        lb_gguf_writer_free(w);
        TH_CHECK(!lb_is_file(path2));
    }
    /* freeing an unfinished writer leaves neither output nor temp file */
    TH_CHECK_OK(lb_gguf_writer_create(&w));
    TH_CHECK_OK(lb_gguf_writer_add_tensor(w, "a", LB_TYPE_F32, 1, s2));
    TH_CHECK_OK(lb_gguf_writer_open(w, path2));
    TH_CHECK_OK(lb_gguf_writer_write_data(w, d, 10));
    lb_gguf_writer_free(w);
    TH_CHECK(!lb_is_file(path2));
    DIR *dir = opendir(th_tmpdir());
    struct dirent *de;
    int leftovers = 0;
    while (dir && (de = readdir(dir)))
        if (strstr(de->d_name, ".tmp.")) leftovers++;
    if (dir) closedir(dir);
    TH_CHECK_INT(leftovers, 0);
    free(d);
}

static void test_writer_kv_rules(void) {
    lb_gguf_writer *w = NULL;
    TH_CHECK_OK(lb_gguf_writer_create(&w));
    TH_CHECK_FAILS(lb_gguf_writer_set_u32(w, "", 1), LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gguf_writer_set_u32(w, NULL, 1), LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gguf_writer_set_str(w, "k", NULL), LB_ERR_INVALID_ARG);
    static const uint8_t badbool[2] = {0, 2};
    TH_CHECK_FAILS(lb_gguf_writer_set_arr(w, "k", LB_GGUF_TYPE_BOOL, badbool, 2),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_gguf_writer_set_arr(w, "k", LB_GGUF_TYPE_STRING, badbool, 2),
                   LB_ERR_INVALID_ARG);
    /* replacing keeps the position */
    TH_CHECK_OK(lb_gguf_writer_set_u32(w, "first", 1));
    TH_CHECK_OK(lb_gguf_writer_set_u32(w, "second", 2));
    TH_CHECK_OK(lb_gguf_writer_set_str(w, "first", "one"));
    const char *path = tmp_path("kv.gguf");
    TH_CHECK_OK(lb_gguf_writer_open(w, path));
    TH_CHECK_OK(lb_gguf_writer_finish(w));
    lb_gguf_writer_free(w);
    lb_gguf *g = NULL;
    TH_CHECK_OK(lb_gguf_open(path, &g));
    if (g) {
        TH_CHECK_INT(lb_gguf_n_kv(g), 2);
        TH_CHECK_STR(lb_gguf_kv_key(g, 0), "first");
        TH_CHECK_INT(lb_gguf_kv_value(g, 0)->type, LB_GGUF_TYPE_STRING);
        TH_CHECK_INT(lb_gguf_n_tensors(g), 0);
        TH_CHECK_INT(lb_gguf_file_size(g) % 32, 0);
        lb_gguf_close(g);
    }
}

/* Nested arrays (spec allows them; llama.cpp does not read them): read,
 * element access at two levels, verbatim copy through the writer. */
static void tb_nested(tb *b, int levels) {
    /* levels x ARRAY of 1 element, innermost ARRAY of 0 UINT8 */
    for (int i = 0; i < levels - 1; i++) {
        tb_u32(b, 9);
        tb_u64(b, 1);
    }
    tb_u32(b, 0);
    tb_u64(b, 0);
}

static void test_nested_arrays(void) {
    tb b = {0};
    tb_header(&b, 3, 0, 2);
    tb_str(&b, "nested");
    tb_u32(&b, 9);  /* ARRAY */
    tb_u32(&b, 9);  /* of ARRAY */
    tb_u64(&b, 3);
    tb_u32(&b, 0);  /* [0] = ARRAY of UINT8 {1, 2} */
    tb_u64(&b, 2);
    tb_u8(&b, 1);
    tb_u8(&b, 2);
    tb_u32(&b, 8);  /* [1] = ARRAY of STRING {"a", "bc"} */
    tb_u64(&b, 2);
    tb_str(&b, "a");
    tb_str(&b, "bc");
    tb_u32(&b, 5);  /* [2] = ARRAY of INT32 {} */
    tb_u64(&b, 0);
    tb_str(&b, "deep8");
    tb_u32(&b, 9);
    tb_nested(&b, 8);
    lb_gguf *g = NULL;
    TH_CHECK_OK(open_tb(&b, &g));
    if (g) {
        const lb_gguf_value *a = NULL;
        uint64_t n = 0;
        TH_CHECK_OK(lb_gguf_get_arr(g, "nested", LB_GGUF_TYPE_ARRAY, &a, &n));
        TH_CHECK_INT(n, 3);
        lb_gguf_value e1, e2, e3;
        TH_CHECK_OK(lb_gguf_arr_elem(a, 1, &e1));
        TH_CHECK_INT(e1.type, LB_GGUF_TYPE_ARRAY);
        TH_CHECK_INT(e1.elem_type, LB_GGUF_TYPE_STRING);
        TH_CHECK_INT(e1.n, 2);
        TH_CHECK_OK(lb_gguf_arr_elem(&e1, 1, &e2));
        lb_gguf_str s;
        TH_CHECK_OK(lb_gguf_value_str(&e2, &s));
        TH_CHECK(s.len == 2 && memcmp(s.data, "bc", 2) == 0);
        TH_CHECK_OK(lb_gguf_arr_elem(a, 0, &e3));
        TH_CHECK_OK(lb_gguf_arr_elem(&e3, 1, &e2));
        int64_t v = 0;
        TH_CHECK_OK(lb_gguf_value_i64(&e2, &v));
        TH_CHECK_INT(v, 2);
        TH_CHECK_OK(lb_gguf_arr_elem(a, 2, &e3));
        TH_CHECK_INT(e3.n, 0);
        TH_CHECK_INT(e3.elem_type, LB_GGUF_TYPE_INT32);
        /* copy through the writer: identical bytes */
        const char *path = tmp_path("nested.gguf");
        lb_gguf_writer *w = NULL;
        TH_CHECK_OK(lb_gguf_writer_create(&w));
        TH_CHECK_OK(lb_gguf_writer_copy_kv(w, g));
        TH_CHECK_OK(lb_gguf_writer_open(w, path));
        TH_CHECK_OK(lb_gguf_writer_finish(w));
        lb_gguf_writer_free(w);
        size_t n2 = 0;
        uint8_t *got = th_read_bin(path, &n2);
        tb_pad(&b, 32);
        TH_CHECK(got && n2 == b.n && memcmp(got, b.p, n2) == 0);
        free(got);
        lb_gguf_close(g);
    }
    tb_free(&b);
    /* 9 levels: refused */
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "deep9");
    tb_u32(&b, 9);
    tb_nested(&b, 9);
    CHECK_BAD(&b, LB_ERR_UNSUPPORTED, "deep9");
    tb_free(&b);
}

/* Re-writing a llama.cpp-made file (all kv + tensors, in file order) gives
 * the identical bytes: lowbit's layout is gguf.cpp's. */
static lb_status rewrite_file(const char *src, const char *dst) {
    lb_gguf *g = NULL;
    lb_status st0 = lb_gguf_open(src, &g);
    if (st0 != LB_OK) return st0;
    lb_gguf_writer *w = NULL;
    lb_status st = lb_gguf_writer_create(&w);
    if (st == LB_OK) st = lb_gguf_writer_copy_kv(w, g);
    for (int64_t i = 0; st == LB_OK && i < lb_gguf_n_tensors(g); i++) {
        lb_tensor t;
        st = lb_gguf_tensor_view(g, i, &t);
        if (st == LB_OK)
            st = lb_gguf_writer_add_tensor(w, t.name, t.type, t.n_dims, t.shape);
    }
    if (st == LB_OK) st = lb_gguf_writer_open(w, dst);
    for (int64_t i = 0; st == LB_OK && i < lb_gguf_n_tensors(g); i++) {
        lb_tensor t;
        st = lb_gguf_tensor_view(g, i, &t);
        if (st == LB_OK) st = lb_gguf_writer_write_tensor(w, t.name, t.data, t.nbytes);
    }
    if (st == LB_OK) st = lb_gguf_writer_finish(w);
    lb_gguf_writer_free(w);
    lb_gguf_close(g);
    return st;
}

static void test_rewrite_identical(void) {
    for (size_t f = 0; f < N_FILES; f++) {
        const char *src = th_shared(FILES[f].rel);
        const char *dst = tmp_path("rewrite.gguf");
        TH_CHECK_OK(rewrite_file(src, dst));
        size_t na = 0, nb = 0;
        uint8_t *a = th_read_bin(src, &na), *b = th_read_bin(dst, &nb);
        TH_CHECK_MSG(a && b && na == nb, "%s: %zu vs %zu bytes", src, na, nb);
        if (a && b && na == nb) {
            size_t i = 0;
            while (i < na && a[i] == b[i]) i++;
            TH_CHECK_MSG(i == na, "%s: first difference at byte %zu", src, i);
        }
        free(a);
        free(b);
        unlink(dst);
    }
}

/* ------------------------------------------------------------------------ */
/* Hostile input: one case per kind of damage                                */
/* ------------------------------------------------------------------------ */

static void test_valid_base_and_v2(void) {
    tb b = {0};
    tb_valid(&b, 3);
    lb_gguf *g = NULL;
    TH_CHECK_OK(open_tb(&b, &g));
    if (g) {
        TH_CHECK_INT(lb_gguf_n_tensors(g), 2);
        TH_CHECK_INT(lb_gguf_data_size(g), 64);
        TH_CHECK_STR(lb_gguf_path(g), "test.gguf");
        lb_gguf_close(g);
    }
    tb_free(&b);
    tb_valid(&b, 2); /* GGUF v2: same layout */
    TH_CHECK_OK(open_tb(&b, &g));
    if (g) {
        TH_CHECK_INT(lb_gguf_version(g), 2);
        lb_tensor t;
        TH_CHECK_OK(lb_gguf_get_tensor(g, "b.weight", &t));
        float f;
        memcpy(&f, t.data, 4);
        TH_CHECK(f == 8.0f);
        lb_gguf_close(g);
    }
    tb_free(&b);
}

static void test_bad_truncated(void) {
    tb b = {0};
    tb_valid(&b, 3);
    int wrong = 0;
    for (size_t n = 0; n < b.n; n++) {
        lb_gguf *g = NULL;
        lb_clear_error();
        lb_status st = lb_gguf_open_memory(b.p, n, "cut.gguf", &g);
        if (st != LB_ERR_FORMAT || g != NULL || !contains(lb_last_error(), "cut.gguf")) {
            if (wrong++ < 5)
                fprintf(stderr, "  truncated at %zu: %s %s\n", n, lb_status_name(st),
                        lb_last_error());
        }
        lb_gguf_close(g);
    }
    TH_CHECK_INT(wrong, 0);
    tb_free(&b);

    /* a real file cut inside the vocabulary, the tensor infos and the data */
    if (!have_shared()) return;
    size_t n = 0;
    uint8_t *img = th_read_bin(th_shared(FILES[2].rel), &n);
    TH_CHECK(img != NULL);
    if (!img) return;
    static const struct {
        size_t cut;
        const char *substr;
    } cuts[] = {
        {3, "magic"},
        {12, "tensor count"},
        {20, "key-value count"},
        {40, "21 key-value pairs"},       /* counts checked against size */
        {2000, "tokenizer.ggml.tokens"}, /* inside the vocabulary */
        {13000, "tensor info 27"},        /* inside tensor infos */
        {14230, "data section"},         /* in the padding before the data */
        {276000, "blk.4.ffn_up.weight"}, /* inside the last tensor */
    };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        lb_gguf *g = NULL;
        lb_clear_error();
        lb_status st = lb_gguf_open_memory(img, cuts[i].cut, "q4.gguf", &g);
        TH_CHECK_MSG(st == LB_ERR_FORMAT, "cut %zu: %s", cuts[i].cut, lb_status_name(st));
        TH_CHECK_MSG(contains(lb_last_error(), cuts[i].substr),
                     "cut %zu: \"%s\" lacks \"%s\"", cuts[i].cut, lb_last_error(),
                     cuts[i].substr);
        lb_gguf_close(g);
    }
    /* dropping only the padding after the last tensor is fine */
    lb_gguf *g = NULL;
    TH_CHECK_OK(lb_gguf_open_memory(img, 277008, "q4.gguf", &g));
    lb_gguf_close(g);
    free(img);

    /* an empty file through the mmap path */
    const char *p = tmp_path("empty.gguf");
    FILE *fp = fopen(p, "wb");
    if (fp) fclose(fp);
    TH_CHECK_FAILS(lb_gguf_open(p, &g), LB_ERR_FORMAT);
    TH_CHECK(contains(lb_last_error(), p));
    TH_CHECK_FAILS(lb_gguf_open(tmp_path("missing.gguf"), &g), LB_ERR_IO);
}

static void test_bad_magic_version(void) {
    tb b = {0};
    tb_valid(&b, 3);
    memcpy(b.p, "GGML", 4);
    CHECK_BAD(&b, LB_ERR_FORMAT, "magic");
    memcpy(b.p, "GGUF", 4);
    uint32_t v = 1;
    memcpy(b.p + 4, &v, 4);
    CHECK_BAD(&b, LB_ERR_UNSUPPORTED, "version 1");
    v = 4;
    memcpy(b.p + 4, &v, 4);
    CHECK_BAD(&b, LB_ERR_UNSUPPORTED, "version 4");
    v = 0;
    memcpy(b.p + 4, &v, 4);
    CHECK_BAD(&b, LB_ERR_FORMAT, "version 0");
    v = 0x03000000; /* a big-endian v3 file read as little-endian */
    memcpy(b.p + 4, &v, 4);
    CHECK_BAD(&b, LB_ERR_UNSUPPORTED, "big-endian");
    tb_free(&b);
}

static void test_bad_lengths_counts(void) {
    tb b = {0};
    /* string value length beyond the file */
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "general.name");
    tb_u32(&b, 8);
    tb_u64(&b, 1000);
    tb_put(&b, "abc", 3);
    CHECK_BAD(&b, LB_ERR_FORMAT, "general.name");
    TH_CHECK(contains(lb_last_error(), "1000"));
    tb_free(&b);
    /* key length beyond the file */
    tb_header(&b, 3, 0, 1);
    tb_u64(&b, UINT64_MAX);
    tb_put(&b, "abcdefghijklmnop", 16);
    CHECK_BAD(&b, LB_ERR_FORMAT, "key");
    tb_free(&b);
    /* array count huge (2^60 UINT32): refused before any allocation */
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "tokenizer.ggml.scores");
    tb_u32(&b, 9);
    tb_u32(&b, 4);
    tb_u64(&b, UINT64_C(1) << 60);
    tb_zeros(&b, 64);
    CHECK_BAD(&b, LB_ERR_FORMAT, "tokenizer.ggml.scores");
    tb_free(&b);
    /* array of strings, count huge */
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "tokenizer.ggml.tokens");
    tb_u32(&b, 9);
    tb_u32(&b, 8);
    tb_u64(&b, UINT64_C(0xFFFFFFFFFFFF));
    tb_str(&b, "a");
    CHECK_BAD(&b, LB_ERR_FORMAT, "tokenizer.ggml.tokens");
    tb_free(&b);
    /* kv / tensor counts larger than the file could hold */
    tb_header(&b, 3, 0, UINT64_MAX);
    tb_zeros(&b, 100);
    CHECK_BAD(&b, LB_ERR_FORMAT, "key-value pairs");
    tb_free(&b);
    tb_header(&b, 3, UINT64_C(1) << 40, 0);
    tb_zeros(&b, 100);
    CHECK_BAD(&b, LB_ERR_FORMAT, "tensors");
    tb_free(&b);
    /* unknown value type */
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "weird.key");
    tb_u32(&b, 13);
    tb_zeros(&b, 8);
    CHECK_BAD(&b, LB_ERR_FORMAT, "weird.key");
    tb_free(&b);
    /* unknown array element type */
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "weird.arr");
    tb_u32(&b, 9);
    tb_u32(&b, 77);
    tb_u64(&b, 1);
    tb_zeros(&b, 8);
    CHECK_BAD(&b, LB_ERR_FORMAT, "weird.arr");
    tb_free(&b);
    /* BOOL 2, scalar and in an array */
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "tokenizer.ggml.add_bos_token");
    tb_u32(&b, 7);
    tb_u8(&b, 2);
    CHECK_BAD(&b, LB_ERR_FORMAT, "tokenizer.ggml.add_bos_token");
    tb_free(&b);
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "flags");
    tb_u32(&b, 9);
    tb_u32(&b, 7);
    tb_u64(&b, 3);
    tb_u8(&b, 1);
    tb_u8(&b, 0);
    tb_u8(&b, 255);
    CHECK_BAD(&b, LB_ERR_FORMAT, "flags");
    tb_free(&b);
    /* empty key; key with a NUL byte */
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "");
    tb_u32(&b, 4);
    tb_u32(&b, 1);
    CHECK_BAD(&b, LB_ERR_FORMAT, "empty key");
    tb_free(&b);
    tb_header(&b, 3, 0, 1);
    tb_strn(&b, "a\0b", 3);
    tb_u32(&b, 4);
    tb_u32(&b, 1);
    CHECK_BAD(&b, LB_ERR_FORMAT, "NUL");
    tb_free(&b);
}

static void test_bad_duplicates(void) {
    tb b = {0};
    tb_header(&b, 3, 0, 3);
    tb_kv_u32(&b, "llama.block_count", 5);
    tb_kv_str(&b, "general.name", "x");
    tb_kv_u32(&b, "llama.block_count", 6);
    CHECK_BAD(&b, LB_ERR_FORMAT, "duplicate key 'llama.block_count'");
    tb_free(&b);
    uint64_t ne[1] = {8};
    tb_header(&b, 3, 2, 0);
    tb_ti(&b, "blk.0.attn_q.weight", 1, ne, 0, 0);
    tb_ti(&b, "blk.0.attn_q.weight", 1, ne, 0, 32);
    tb_pad(&b, 32);
    tb_zeros(&b, 64);
    CHECK_BAD(&b, LB_ERR_FORMAT, "duplicate tensor name 'blk.0.attn_q.weight'");
    tb_free(&b);
}

/* One file with a single tensor info (ggml order ne) and enough data. */
static void tb_one_tensor(tb *b, const char *name, uint32_t n_dims,
                          const uint64_t *ne, uint32_t type, uint64_t off,
                          size_t data) {
    tb_header(b, 3, 1, 0);
    tb_ti(b, name, n_dims, ne, type, off);
    tb_pad(b, 32);
    tb_zeros(b, data);
}

static void test_bad_tensor_infos(void) {
    tb b = {0};
    uint64_t ne5[5] = {1, 1, 1, 1, 1};
    tb_one_tensor(&b, "five.d", 5, ne5, 0, 0, 32);
    CHECK_BAD(&b, LB_ERR_FORMAT, "five.d");
    TH_CHECK(contains(lb_last_error(), "5 dimensions"));
    tb_free(&b);
    uint64_t neg[2] = {8, (uint64_t)-3};
    tb_one_tensor(&b, "neg.dim", 2, neg, 0, 0, 32);
    CHECK_BAD(&b, LB_ERR_FORMAT, "neg.dim");
    tb_free(&b);
    uint64_t huge[3] = {UINT64_C(1) << 32, UINT64_C(1) << 32, 4};
    tb_one_tensor(&b, "huge", 3, huge, 0, 0, 32);
    CHECK_BAD(&b, LB_ERR_OVERFLOW, "huge");
    tb_free(&b);
    /* zero elements, but the other dims overflow: rows would overflow */
    uint64_t zero_huge[4] = {0, UINT64_C(1) << 32, UINT64_C(1) << 32, 4};
    tb_one_tensor(&b, "zero.huge", 4, zero_huge, 0, 0, 32);
    CHECK_BAD(&b, LB_ERR_OVERFLOW, "zero.huge");
    tb_free(&b);
    uint64_t bytes_ovf[2] = {UINT64_C(1) << 40, UINT64_C(1) << 22}; /* 2^62 F32 */
    tb_one_tensor(&b, "bytes.ovf", 2, bytes_ovf, 0, 0, 32);
    CHECK_BAD(&b, LB_ERR_OVERFLOW, "bytes.ovf");
    tb_free(&b);
    uint64_t ne[2] = {32, 2};
    tb_one_tensor(&b, "iq2.weight", 2, ne, 16, 0, 256);
    CHECK_BAD(&b, LB_ERR_UNSUPPORTED, "iq2.weight");
    TH_CHECK(contains(lb_last_error(), "16"));
    TH_CHECK(contains(lb_last_error(), "IQ2_XXS"));
    tb_free(&b);
    tb_one_tensor(&b, "t99", 2, ne, 99, 0, 256);
    CHECK_BAD(&b, LB_ERR_UNSUPPORTED, "t99");
    TH_CHECK(contains(lb_last_error(), "99"));
    tb_free(&b);
    tb_one_tensor(&b, "u8", 2, ne, 200 /* lowbit's own U8 id: not GGUF */, 0, 256);
    CHECK_BAD(&b, LB_ERR_UNSUPPORTED, "u8");
    tb_free(&b);
    uint64_t ne33[2] = {33, 2};
    tb_one_tensor(&b, "q4.odd", 2, ne33, 2 /* Q4_0 */, 0, 256);
    CHECK_BAD(&b, LB_ERR_FORMAT, "q4.odd");
    TH_CHECK(contains(lb_last_error(), "block size"));
    tb_free(&b);
    char longname[70];
    memset(longname, 'x', 64);
    longname[64] = '\0';
    tb_one_tensor(&b, longname, 2, ne, 0, 0, 256);
    CHECK_BAD(&b, LB_ERR_FORMAT, "longer than");
    tb_free(&b);
    tb_header(&b, 3, 1, 0);
    tb_strn(&b, "a\0b", 3);
    tb_u32(&b, 1);
    tb_u64(&b, 8);
    tb_u32(&b, 0);
    tb_u64(&b, 0);
    tb_pad(&b, 32);
    tb_zeros(&b, 32);
    CHECK_BAD(&b, LB_ERR_FORMAT, "NUL");
    tb_free(&b);
}

static void test_bad_offsets(void) {
    tb b = {0};
    uint64_t ne[1] = {8}; /* 32 bytes of F32 */
    /* offset outside the data section */
    tb_one_tensor(&b, "far.away", 1, ne, 0, 4096, 64);
    CHECK_BAD(&b, LB_ERR_FORMAT, "far.away");
    TH_CHECK(contains(lb_last_error(), "outside"));
    tb_free(&b);
    /* data runs past the end (offset inside, size not) */
    tb_one_tensor(&b, "too.long", 1, ne, 0, 32, 48);
    CHECK_BAD(&b, LB_ERR_FORMAT, "too.long");
    tb_free(&b);
    /* offset + size overflows */
    tb_one_tensor(&b, "wrap", 1, ne, 0, UINT64_MAX - 31, 64);
    CHECK_BAD(&b, LB_ERR_FORMAT, "wrap");
    tb_free(&b);
    /* misaligned */
    tb_one_tensor(&b, "odd.offset", 1, ne, 0, 16, 64);
    CHECK_BAD(&b, LB_ERR_FORMAT, "odd.offset");
    TH_CHECK(contains(lb_last_error(), "alignment"));
    tb_free(&b);
    /* overlapping: b starts inside a */
    uint64_t ne16[1] = {16}; /* 64 bytes */
    tb_header(&b, 3, 2, 0);
    tb_ti(&b, "tensor.a", 1, ne16, 0, 0);
    tb_ti(&b, "tensor.b", 1, ne, 0, 32);
    tb_pad(&b, 32);
    tb_zeros(&b, 128);
    CHECK_BAD(&b, LB_ERR_FORMAT, "overlaps");
    TH_CHECK(contains(lb_last_error(), "tensor.a"));
    TH_CHECK(contains(lb_last_error(), "tensor.b"));
    tb_free(&b);
    /* out of order but disjoint: accepted (spec), unlike gguf.cpp */
    tb_header(&b, 3, 2, 0);
    tb_ti(&b, "late", 1, ne, 0, 32);
    tb_ti(&b, "early", 1, ne, 0, 0);
    tb_pad(&b, 32);
    tb_zeros(&b, 64);
    lb_gguf *g = NULL;
    TH_CHECK_OK(open_tb(&b, &g));
    lb_gguf_close(g);
    tb_free(&b);
    /* data section would start beyond the end of the file */
    tb_header(&b, 3, 1, 0);
    tb_ti(&b, "x", 1, ne, 0, 0);
    CHECK_BAD(&b, LB_ERR_FORMAT, "data section");
    tb_free(&b);
}

static void test_bad_alignment(void) {
    static const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tb b = {0};
        tb_header(&b, 3, 0, 1);
        tb_kv_u32(&b, "general.alignment", bad[i]);
        CHECK_BAD(&b, LB_ERR_FORMAT, "general.alignment");
        TH_CHECK(contains(lb_last_error(), "power of two"));
        tb_free(&b);
    }
    tb b = {0};
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "general.alignment");
    tb_u32(&b, 10); /* UINT64 */
    tb_u64(&b, 64);
    CHECK_BAD(&b, LB_ERR_FORMAT, "UINT32");
    tb_free(&b);
}

/* Remove the scratch directory and what the tests left in it. */
static void cleanup_tmpdir(void) {
    DIR *dir = opendir(th_tmpdir());
    struct dirent *de;
    while (dir && (de = readdir(dir))) {
        if (de->d_name[0] == '.') continue;
        unlink(tmp_path(de->d_name));
    }
    if (dir) closedir(dir);
    rmdir(th_tmpdir());
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-sample") == 0) {
        lb_status st = write_sample(argv[2], 32);
        if (st != LB_OK) fprintf(stderr, "%s\n", lb_last_error());
        return st == LB_OK ? 0 : 1;
    }
    if (argc == 4 && strcmp(argv[1], "--rewrite") == 0) {
        lb_status st = rewrite_file(argv[2], argv[3]);
        if (st != LB_OK) fprintf(stderr, "%s\n", lb_last_error());
        return st == LB_OK ? 0 : 1;
    }
    TH_RUN(test_valid_base_and_v2);
    TH_RUN(test_bad_truncated);
    TH_RUN(test_bad_magic_version);
    TH_RUN(test_bad_lengths_counts);
    TH_RUN(test_bad_duplicates);
    TH_RUN(test_bad_tensor_infos);
    TH_RUN(test_bad_offsets);
    TH_RUN(test_bad_alignment);
    TH_RUN(test_nested_arrays);
    TH_RUN(test_writer_exact_bytes);
    TH_RUN(test_roundtrip_all_types);
    TH_RUN(test_writer_alignment);
    TH_RUN(test_writer_streaming);
    TH_RUN(test_writer_kv_rules);
    if (!have_shared()) {
        fprintf(stderr, "shared models not found (%s): tests on them not run\n",
                th_shared(FILES[0].rel));
        cleanup_tmpdir();
        int rc = th_report();
        return rc ? rc : 77;
    }
    TH_RUN(test_shared_files_layout);
    TH_RUN(test_shared_tensor_types);
    TH_RUN(test_stories260k_metadata);
    TH_RUN(test_ts656k_metadata);
    TH_RUN(test_rewrite_identical);
    cleanup_tmpdir();
    return th_report();
}
