/*
 * test_export_hf — GGUF -> Hugging Face directory (lowbit/export_hf.h).
 *
 * Oracles from outside lowbit (tests/data/export_hf, made by make_refs.py
 * in the refenv with transformers 5.12 / gguf-py 0.7.0):
 *  - merges.json: transformers' own GGUF tokenizer conversion of
 *    ts656k-f32.gguf and stories260K.gguf (merges rebuilt from the
 *    SentencePiece scores): count and FNV-1a of every merge in order, and
 *    of the vocabulary;
 *  - ts656k_q4_0_hf.logits.f32: transformers' logits of the directory we
 *    write from ts656k-q4_0.gguf (make_refs.py first checks every tensor of
 *    it against gguf-py's dequantize + transformers' reverse_permute_weights);
 *  - ../shared/reference/logits (transformers on the original checkpoint):
 *    the F32 GGUF round trip gives those logits;
 *  - ../shared/models/random/llama-gqa-llama3rope-bf16-random: HF -> GGUF
 *    (lowbit export) -> HF gives back its config (llama3 rope scaling
 *    recovered from rope_freqs) and its transformers logits;
 *  - ../shared/reference/tokenize/{qwen3,llama3}.jsonl (tokenizers 0.23):
 *    tokenizer.json -> GGUF vocabulary -> tokenizer.json encodes every case
 *    with the reference ids.
 * The q/k permutation is checked against numpy's reshape/swapaxes formula
 * written out here (not lowbit's permutation function).
 */
#include "th.h"

#include "lowbit/config.h"
#include "lowbit/export.h"
#include "lowbit/export_hf.h"
#include "lowbit/file.h"
#include "lowbit/gguf.h"
#include "lowbit/model.h"
#include "lowbit/quants.h"
#include "lowbit/quantize.h"
#include "lowbit/safetensors.h"
#include "lowbit/tokenizer.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *tmp_path(const char *name) {
    static char buf[8][1024];
    static int slot;
    char *b = buf[slot++ & 7];
    snprintf(b, sizeof buf[0], "%s/%s", th_tmpdir(), name);
    return b;
}

static uint64_t fnv(const void *p, size_t n, uint64_t h) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static cJSON *load_json(const char *path) {
    char *t = NULL;
    size_t n;
    if (lb_read_file(path, 1 << 26, &t, &n) != LB_OK) return NULL;
    cJSON *j = cJSON_Parse(t);
    free(t);
    return j;
}

static float *logits_of(const char *model_path, const int32_t *ids, int n) {
    lb_model *m = NULL;
    TH_CHECK_OK(lb_model_load(model_path, NULL, &m));
    if (!m) return NULL;
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = n + 8;
    cp.n_threads = 2;
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    float *lg = NULL;
    if (ctx) {
        lg = malloc((size_t)n * (size_t)m->config.vocab_size * sizeof *lg);
        TH_CHECK_OK(lb_model_forward(ctx, ids, n, 0, lg, LB_LOGITS_ALL));
    }
    lb_context_free(ctx);
    lb_model_free(m);
    return lg;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

/* F32 GGUF (llama.cpp's conversion of tinystories-656k) -> HF: the weights
 * are the original checkpoint's, the logits transformers'. */
static void test_f32_round_trip(void) {
    const char *out = tmp_path("ts656k-f32-hf");
    lb_export_hf_stats st;
    TH_CHECK_OK(lb_export_gguf_to_hf(th_shared("models/tinystories-656k-gguf/ts656k-f32.gguf"), out,
                                     NULL, &st));
    TH_CHECK_INT(st.n_tensors, 20);
    TH_CHECK_INT(st.n_dequantized, 0);
    TH_CHECK(st.permuted);
    TH_CHECK(st.tokenizer);
    TH_CHECK_INT(st.dtype, LB_TYPE_F32);
    /* every tensor equals the original checkpoint's (embedding: lm_head) */
    lb_safetensors *a = NULL, *b = NULL;
    TH_CHECK_OK(lb_st_open(out, &a));
    TH_CHECK_OK(lb_st_open(th_shared("models/tinystories-656k"), &b));
    if (a && b) {
        size_t n_eq = 0;
        for (size_t i = 0; i < lb_st_count(a); i++) {
            const lb_tensor *t = lb_st_tensor_at(a, i);
            const char *name = strcmp(t->name, "model.embed_tokens.weight") ? t->name : "lm_head.weight";
            const lb_tensor *o = lb_st_find(b, name);
            TH_CHECK_MSG(o != NULL, "%s", name);
            if (!o) continue;
            bool eq = o->nbytes == t->nbytes && o->type == t->type && !memcmp(o->data, t->data, t->nbytes);
            TH_CHECK_MSG(eq, "%s differs from the original checkpoint", t->name);
            n_eq += eq;
        }
        TH_CHECK_INT(n_eq, 20);
    }
    lb_st_close(a);
    lb_st_close(b);
    cJSON *cfg = load_json(tmp_path("ts656k-f32-hf/config.json"));
    TH_CHECK(cJSON_IsTrue(cJSON_GetObjectItem(cfg, "tie_word_embeddings")));
    TH_CHECK_INT(cJSON_GetObjectItem(cfg, "num_key_value_heads")->valueint, 4);
    TH_CHECK_NEAR(cJSON_GetObjectItem(cfg, "rms_norm_eps")->valuedouble, 1e-6, 0);
    cJSON_Delete(cfg);
    /* logits: transformers' on the original checkpoint */
    size_t nb = 0, lb = 0;
    int32_t *ids = th_read_bin(th_shared("reference/logits/prompt1.ids.i32"), &nb);
    float *ref = th_read_bin(th_shared("reference/logits/prompt1.logits.f32"), &lb);
    int n = (int)(nb / 4);
    TH_CHECK(ids && ref && lb == (size_t)n * 2048 * 4);
    if (ids && ref) {
        float *hf = logits_of(out, ids, n);
        float *gg = logits_of(th_shared("models/tinystories-656k-gguf/ts656k-f32.gguf"), ids, n);
        if (hf && gg) {
            double d_ref = max_diff(hf, ref, (size_t)n * 2048);
            double d_gguf = max_diff(hf, gg, (size_t)n * 2048);
            fprintf(stderr, "  F32 round trip: max |logit diff| vs transformers %.3g, vs the GGUF "
                            "path %.3g\n", d_ref, d_gguf);
            TH_CHECK(d_ref <= 1e-4);
            TH_CHECK(d_gguf <= 1e-4);
        }
        free(hf);
        free(gg);
    }
    free(ids);
    free(ref);
}

/* numpy: reshape(n_head, 2, rows/n_head/2, cols).swapaxes(1, 2) — GGUF row
 * h*hd + 2i + j holds HF row h*hd + j*hd/2 + i */
static int64_t gguf_row_of_hf(int64_t hr, int64_t hd) {
    int64_t h = hr / hd, k = hr % hd, j = k / (hd / 2), i = k % (hd / 2);
    return h * hd + 2 * i + j;
}

/* Q4_0 GGUF (llama-quantize's) -> HF F32: every weight is d*(q-8) of its
 * block, rows un-permuted; transformers' logits of the directory. */
static void test_q4_0_dequantized(void) {
    const char *src = th_shared("models/tinystories-656k-gguf/ts656k-q4_0.gguf");
    const char *out = tmp_path("ts656k-q4_0-hf");
    lb_export_hf_stats st;
    TH_CHECK_OK(lb_export_gguf_to_hf(src, out, NULL, &st));
    TH_CHECK_INT(st.n_dequantized, 15);
    lb_gguf *g = NULL;
    lb_safetensors *a = NULL;
    TH_CHECK_OK(lb_gguf_open(src, &g));
    TH_CHECK_OK(lb_st_open(out, &a));
    if (g && a) {
        int n_checked = 0;
        for (int L = 0; L < 2; L++) {
            static const char *gn[] = {"attn_q", "attn_k", "ffn_down"};
            static const char *hn[] = {"self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj"};
            for (int w = 0; w < 3; w++) {
                char g_name[64], h_name[96];
                snprintf(g_name, sizeof g_name, "blk.%d.%s.weight", L, gn[w]);
                snprintf(h_name, sizeof h_name, "model.layers.%d.%s.weight", L, hn[w]);
                lb_tensor gt;
                TH_CHECK_OK(lb_gguf_get_tensor(g, g_name, &gt));
                const lb_tensor *ht = lb_st_find(a, h_name);
                TH_CHECK(ht && ht->type == LB_TYPE_F32 && gt.type == LB_TYPE_Q4_0);
                if (!ht || gt.type != LB_TYPE_Q4_0) continue;
                int64_t rows = gt.shape[0], cols = gt.shape[1], bad = 0;
                const float *hv = ht->data;
                for (int64_t r = 0; r < rows; r++) {
                    int64_t grow = w < 2 ? gguf_row_of_hf(r, 16) : r;
                    const uint8_t *blk = (const uint8_t *)gt.data + (size_t)grow * (size_t)(cols / 32) * 18;
                    for (int64_t c = 0; c < cols; c++) {
                        const uint8_t *b = blk + (c / 32) * 18;
                        float d = lb_f16_to_f32((uint16_t)(b[0] | b[1] << 8));
                        int k = (int)(c % 32);
                        int q = k < 16 ? (b[2 + k] & 15) : (b[2 + k - 16] >> 4);
                        float want = (float)(q - 8) * d;
                        bad += hv[r * cols + c] != want;
                    }
                }
                TH_CHECK_MSG(bad == 0, "%s: %lld weights differ from d*(q-8)", h_name, (long long)bad);
                n_checked++;
            }
        }
        TH_CHECK_INT(n_checked, 6);
    }
    lb_st_close(a);
    lb_gguf_close(g);
    size_t nb = 0, lb = 0;
    int32_t *ids = th_read_bin("tests/data/export_hf/ts656k_q4_0.ids.i32", &nb);
    float *ref = th_read_bin("tests/data/export_hf/ts656k_q4_0_hf.logits.f32", &lb);
    int n = (int)(nb / 4);
    TH_CHECK(ids && ref && lb == (size_t)n * 2048 * 4);
    if (ids && ref) {
        float *hf = logits_of(out, ids, n);
        if (hf) {
            double d = max_diff(hf, ref, (size_t)n * 2048);
            fprintf(stderr, "  Q4_0 -> HF: max |logit diff| lowbit HF path vs transformers %.3g\n", d);
            TH_CHECK(d <= 1e-4);
        }
        free(hf);
    }
    free(ids);
    free(ref);
}

/* tokenizer.json of a SentencePiece GGUF vocabulary: merges and vocabulary
 * as transformers' own GGUF conversion makes them. */
/* 77 of the 80: the other three put special tokens inside the text, which
 * the original tokenizer.json matches after normalization ("normalized":
 * true: "▁<unk>") and the rebuilt one, as transformers' GGUF converter,
 * before (normalized false). */
#define N_TS656K_EQUAL 77
static int count_equal_cases(const lb_tokenizer *tok, const char *jsonl, const char *tag, int *n_cases);
static void test_spm_merges_as_transformers(void) {
    cJSON *refs = load_json("tests/data/export_hf/merges.json");
    TH_CHECK(refs != NULL);
    static const struct {
        const char *name, *gguf;
    } cases[] = {{"ts656k", "models/tinystories-656k-gguf/ts656k-f32.gguf"},
                 {"stories260K", "models/stories260K/stories260K.gguf"}};
    for (size_t c = 0; refs && c < 2; c++) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s-tok", tmp_path(cases[c].name));
        TH_CHECK_OK(lb_export_gguf_to_hf(th_shared(cases[c].gguf), dir, NULL, NULL));
        char p[700];
        snprintf(p, sizeof p, "%s/tokenizer.json", dir);
        cJSON *tj = load_json(p);
        const cJSON *model = cJSON_GetObjectItem(tj, "model");
        const cJSON *merges = cJSON_GetObjectItem(model, "merges");
        uint64_t h = 0xcbf29ce484222325ull;
        const cJSON *m;
        cJSON_ArrayForEach(m, merges) {
            const char *l = cJSON_GetArrayItem(m, 0)->valuestring, *r = cJSON_GetArrayItem(m, 1)->valuestring;
            h = fnv(l, strlen(l), h);
            h = fnv(" ", 1, h);
            h = fnv(r, strlen(r), h);
            h = fnv("\n", 1, h);
        }
        /* vocabulary in id order */
        const cJSON *vocab = cJSON_GetObjectItem(model, "vocab");
        int nv = cJSON_GetArraySize(vocab);
        const char **by_id = calloc((size_t)nv + 1, sizeof *by_id);
        const cJSON *v;
        cJSON_ArrayForEach(v, vocab) {
            if (v->valueint >= 0 && v->valueint < nv) by_id[v->valueint] = v->string;
        }
        uint64_t hv = 0xcbf29ce484222325ull;
        for (int i = 0; i < nv; i++) {
            char num[24];
            snprintf(num, sizeof num, "\t%d\n", i);
            if (by_id[i]) hv = fnv(by_id[i], strlen(by_id[i]), hv);
            hv = fnv(num, strlen(num), hv);
        }
        free(by_id);
        const cJSON *r = cJSON_GetObjectItem(refs, cases[c].name);
        char hs[20], hvs[20];
        snprintf(hs, sizeof hs, "%016llx", (unsigned long long)h);
        snprintf(hvs, sizeof hvs, "%016llx", (unsigned long long)hv);
        TH_CHECK_INT(cJSON_GetArraySize(merges), cJSON_GetObjectItem(r, "n_merges")->valueint);
        TH_CHECK_STR(hs, cJSON_GetObjectItem(r, "merges_fnv1a64")->valuestring);
        TH_CHECK_STR(hvs, cJSON_GetObjectItem(r, "vocab_fnv1a64")->valuestring);
        if (c == 0) {
            /* the original checkpoint's tokenizer (tokenizers 0.23 ids):
             * the merges rebuilt from the scores tokenize as it does */
            lb_tokenizer *rt = NULL;
            TH_CHECK_OK(lb_tokenizer_load_hf(dir, &rt));
            int n_cases = 0;
            int n_eq = count_equal_cases(rt, "reference/tokenize/tinystories-656k.jsonl", "ts656k", &n_cases);
            fprintf(stderr, "  ts656k: tokenizer.json rebuilt from the GGUF vocabulary: %d/%d "
                            "reference cases of the original tokenizer identical\n", n_eq, n_cases);
            TH_CHECK(n_cases >= 70);
            TH_CHECK(n_eq >= N_TS656K_EQUAL);
            lb_tokenizer_free(rt);
        }
        /* lowbit reads it back: BOS added as the GGUF says */
        lb_tokenizer *tok = NULL;
        TH_CHECK_OK(lb_tokenizer_load_hf(dir, &tok));
        if (tok) {
            int32_t *ids = NULL;
            size_t n = 0;
            TH_CHECK_OK(lb_tokenizer_encode(tok, "Once upon a time", 16, true, &ids, &n));
            TH_CHECK(n >= 2 && ids && ids[0] == 1);
            free(ids);
        }
        lb_tokenizer_free(tok);
        cJSON_Delete(tj);
    }
    cJSON_Delete(refs);
}

/* reference cases of jsonl (tokenizers 0.23) that tok encodes identically */
static int count_equal_cases(const lb_tokenizer *tok, const char *jsonl, const char *tag, int *n_cases) {
    char *text = NULL;
    size_t len;
    TH_CHECK_OK(lb_read_file(th_shared(jsonl), 1 << 24, &text, &len));
    int n_eq = 0;
    *n_cases = 0;
    for (char *save = NULL, *line = text ? strtok_r(text, "\n", &save) : NULL; tok && line;
         line = strtok_r(NULL, "\n", &save)) {
        if (strstr(line, "\\u0000")) continue; /* cJSON strings end at NUL */
        cJSON *j = cJSON_Parse(line);
        const cJSON *t = cJSON_GetObjectItem(j, "text"), *ids = cJSON_GetObjectItem(j, "ids");
        bool add = cJSON_IsTrue(cJSON_GetObjectItem(j, "add_special_tokens"));
        if (!cJSON_IsString(t)) {
            cJSON_Delete(j);
            continue;
        }
        int32_t *got = NULL;
        size_t n = 0;
        bool eq = false;
        if (lb_tokenizer_encode(tok, t->valuestring, strlen(t->valuestring), add, &got, &n) == LB_OK) {
            eq = (int)n == cJSON_GetArraySize(ids);
            for (size_t k = 0; eq && k < n; k++) eq = got[k] == cJSON_GetArrayItem(ids, (int)k)->valueint;
        }
        if (!eq) fprintf(stderr, "    %s differs: %.80s\n", tag, t->valuestring);
        (*n_cases)++;
        n_eq += eq;
        free(got);
        cJSON_Delete(j);
    }
    free(text);
    return n_eq;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    TH_CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void link_shared(const char *dir, const char *rel, const char *name) {
    char abs_src[1024], dst[1024];
    TH_CHECK(realpath(th_shared(rel), abs_src) != NULL);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    TH_CHECK(symlink(abs_src, dst) == 0);
}

/* byte-level BPE: tokenizer.json -> GGUF vocabulary (lowbit export
 * --vocab-only) -> tokenizer.json encodes every reference case as
 * tokenizers 0.23 does; the chat template survives. */
static void test_bpe_tokenizer_round_trip(void) {
    static const struct {
        const char *tok, *jsonl, *arch, *type;
        int vocab;
    } cases[] = {{"qwen3", "reference/tokenize/qwen3.jsonl", "Qwen3ForCausalLM", "qwen3", 151936},
                 {"llama3", "reference/tokenize/llama3.jsonl", "LlamaForCausalLM", "llama", 128256}};
    for (size_t c = 0; c < 2; c++) {
        char dir[600], gguf[700], back[700];
        snprintf(dir, sizeof dir, "%s-src", tmp_path(cases[c].tok));
        snprintf(gguf, sizeof gguf, "%s.gguf", dir);
        snprintf(back, sizeof back, "%s-back", tmp_path(cases[c].tok));
        TH_CHECK(mkdir(dir, 0755) == 0);
        char cfg[1024], p[800];
        snprintf(cfg, sizeof cfg,
                 "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"vocab_size\": %d, "
                 "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 1, "
                 "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16, "
                 "\"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-06, "
                 "\"rope_theta\": 1000000.0, \"hidden_act\": \"silu\", \"tie_word_embeddings\": true}",
                 cases[c].arch, cases[c].type, cases[c].vocab);
        snprintf(p, sizeof p, "%s/config.json", dir);
        write_text(p, cfg);
        char rel[256];
        snprintf(rel, sizeof rel, "tokenizers/%s/tokenizer.json", cases[c].tok);
        link_shared(dir, rel, "tokenizer.json");
        snprintf(rel, sizeof rel, "tokenizers/%s/tokenizer_config.json", cases[c].tok);
        link_shared(dir, rel, "tokenizer_config.json");
        lb_export_opts o;
        lb_export_opts_default(&o);
        o.vocab_only = true;
        TH_CHECK_OK(lb_export_gguf(dir, gguf, &o, NULL, NULL));
        lb_export_hf_stats st;
        TH_CHECK_OK(lb_export_gguf_to_hf(gguf, back, NULL, &st));
        TH_CHECK(st.tokenizer);
        TH_CHECK_INT(st.n_tensors, 0);
        lb_tokenizer *orig = NULL, *tok = NULL;
        snprintf(rel, sizeof rel, "tokenizers/%s", cases[c].tok);
        TH_CHECK_OK(lb_tokenizer_load_hf(th_shared(rel), &orig));
        TH_CHECK_OK(lb_tokenizer_load_hf(back, &tok));
        /* chat template carried over */
        cJSON *a = load_json(th_shared(strcat(rel, "/tokenizer_config.json")));
        snprintf(p, sizeof p, "%s/tokenizer_config.json", back);
        cJSON *b = load_json(p);
        const cJSON *ta = cJSON_GetObjectItem(a, "chat_template"), *tb = cJSON_GetObjectItem(b, "chat_template");
        TH_CHECK(cJSON_IsString(ta) && cJSON_IsString(tb) && !strcmp(ta->valuestring, tb->valuestring));
        cJSON_Delete(a);
        cJSON_Delete(b);
        int n_cases = 0;
        int n_eq = count_equal_cases(tok, cases[c].jsonl, cases[c].tok, &n_cases);
        fprintf(stderr, "  %s: tokenizer.json -> GGUF -> tokenizer.json: %d/%d reference cases "
                        "identical\n", cases[c].tok, n_eq, n_cases);
        TH_CHECK(n_cases >= 70);
        TH_CHECK_INT(n_eq, n_cases);
        lb_tokenizer_free(orig);
        lb_tokenizer_free(tok);
    }
}

/* llama3 rope scaling: HF (BF16 random model) -> GGUF (rope_freqs) -> HF:
 * the same config values and the model's transformers logits. */
static void test_llama3_rope_round_trip(void) {
    const char *src = th_shared("models/random/llama-gqa-llama3rope-bf16-random");
    char gguf[600], back[600];
    snprintf(gguf, sizeof gguf, "%s", tmp_path("l3.gguf"));
    snprintf(back, sizeof back, "%s", tmp_path("l3-back"));
    lb_export_opts o;
    lb_export_opts_default(&o);
    TH_CHECK_OK(lb_export_gguf(src, gguf, &o, NULL, NULL));
    lb_export_hf_stats st;
    TH_CHECK_OK(lb_export_gguf_to_hf(gguf, back, NULL, &st));
    TH_CHECK_INT(st.dtype, LB_TYPE_BF16);
    lb_model *a = NULL, *b = NULL;
    TH_CHECK_OK(lb_model_load_hf(src, NULL, &a));
    TH_CHECK_OK(lb_model_load_hf(back, NULL, &b));
    if (a && b) {
        const lb_model_config *x = &a->config, *y = &b->config;
        TH_CHECK_INT(y->rope_scaling, LB_ROPE_SCALING_LLAMA3);
        TH_CHECK_NEAR(y->rope_factor, x->rope_factor, 0);
        TH_CHECK_NEAR(y->rope_low_freq_factor, x->rope_low_freq_factor, 0);
        TH_CHECK_NEAR(y->rope_high_freq_factor, x->rope_high_freq_factor, 0);
        TH_CHECK_INT(y->rope_original_max_position_embeddings,
                     x->rope_original_max_position_embeddings);
        TH_CHECK_NEAR(y->rope_theta, x->rope_theta, 0);
        TH_CHECK_INT(y->n_kv_heads, x->n_kv_heads);
        TH_CHECK_INT(y->tie_word_embeddings, x->tie_word_embeddings);
    }
    lb_model_free(a);
    lb_model_free(b);
    char p[700];
    size_t nb = 0, lb = 0;
    snprintf(p, sizeof p, "%s/seq16.ids.i32", src);
    int32_t *ids = th_read_bin(p, &nb);
    snprintf(p, sizeof p, "%s/seq16.logits.f32", src);
    float *ref = th_read_bin(p, &lb);
    int n = (int)(nb / 4);
    TH_CHECK(ids && ref && n > 0 && lb % ((size_t)n * 4) == 0);
    if (ids && ref && n > 0) {
        float *got = logits_of(back, ids, n);
        if (got) {
            double d = max_diff(got, ref, lb / 4);
            fprintf(stderr, "  llama3-rope BF16 HF -> GGUF -> HF: max |logit diff| vs transformers %.3g\n", d);
            TH_CHECK(d <= 1e-3);
        }
        free(got);
    }
    free(ids);
    free(ref);
}

static bool dir_empty_or_absent(const char *d) {
    DIR *dp = opendir(d);
    if (!dp) return true;
    struct dirent *e;
    bool empty = true;
    while ((e = readdir(dp)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = false;
    closedir(dp);
    return empty;
}

/* No temp directory left beside `out` */
static int leftovers(const char *parent, const char *base) {
    DIR *dp = opendir(parent);
    int n = 0;
    struct dirent *e;
    size_t bl = strlen(base);
    while (dp && (e = readdir(dp)))
        if (!strncmp(e->d_name, base, bl) && strstr(e->d_name, ".tmp-")) n++;
    if (dp) closedir(dp);
    return n;
}

static void test_bad_input(void) {
    const char *f32 = th_shared("models/tinystories-656k-gguf/ts656k-f32.gguf");
    /* a non-empty output directory is refused before any work */
    const char *full = tmp_path("full");
    TH_CHECK(mkdir(full, 0755) == 0);
    char p[700];
    snprintf(p, sizeof p, "%s/keep.txt", full);
    write_text(p, "x");
    TH_CHECK_FAILS(lb_export_gguf_to_hf(f32, full, NULL, NULL), LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "not empty") != NULL);
    TH_CHECK(lb_is_file(p));
    /* an empty one is fine */
    const char *empty = tmp_path("empty");
    TH_CHECK(mkdir(empty, 0755) == 0);
    TH_CHECK_OK(lb_export_gguf_to_hf(f32, empty, NULL, NULL));
    /* bad dtype */
    lb_export_hf_opts o;
    lb_export_hf_opts_default(&o);
    o.dtype = LB_TYPE_Q4_0;
    TH_CHECK_FAILS(lb_export_gguf_to_hf(f32, tmp_path("bad-dtype"), &o, NULL), LB_ERR_INVALID_ARG);
    /* a GGUF with a tensor lowbit does not map: rewrite ts656k with an extra
     * tensor; nothing is left behind */
    lb_gguf *g = NULL;
    TH_CHECK_OK(lb_gguf_open(f32, &g));
    const char *odd = tmp_path("odd.gguf");
    lb_gguf_writer *w = NULL;
    TH_CHECK_OK(lb_gguf_writer_create(&w));
    if (g && w) {
        TH_CHECK_OK(lb_gguf_writer_copy_kv(w, g));
        for (int64_t i = 0; i < lb_gguf_n_tensors(g); i++) {
            lb_tensor t;
            TH_CHECK_OK(lb_gguf_tensor_view(g, i, &t));
            TH_CHECK_OK(lb_gguf_writer_add_tensor(w, t.name, t.type, t.n_dims, t.shape));
        }
        static const float extra[4] = {1, 2, 3, 4};
        int64_t shp[1] = {4};
        TH_CHECK_OK(lb_gguf_writer_add_tensor(w, "blk.0.mystery.weight", LB_TYPE_F32, 1, shp));
        TH_CHECK_OK(lb_gguf_writer_open(w, odd));
        for (int64_t i = 0; i < lb_gguf_n_tensors(g); i++) {
            lb_tensor t;
            TH_CHECK_OK(lb_gguf_tensor_view(g, i, &t));
            TH_CHECK_OK(lb_gguf_writer_write_tensor(w, t.name, t.data, t.nbytes));
        }
        TH_CHECK_OK(lb_gguf_writer_write_tensor(w, NULL, extra, sizeof extra));
        TH_CHECK_OK(lb_gguf_writer_finish(w));
    }
    lb_gguf_writer_free(w);
    lb_gguf_close(g);
    const char *oddout = tmp_path("odd-hf");
    TH_CHECK_FAILS(lb_export_gguf_to_hf(odd, oddout, NULL, NULL), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "blk.0.mystery.weight") != NULL);
    TH_CHECK(dir_empty_or_absent(oddout));
    TH_CHECK_INT(leftovers(th_tmpdir(), "odd-hf"), 0);
    /* not a GGUF file */
    TH_CHECK_FAILS(lb_export_gguf_to_hf(p, tmp_path("nope"), NULL, NULL), LB_ERR_FORMAT);
}

/* GPTQ (group 32) -> GGUF (direct route) -> GPTQ: qweight, qzeros, scales
 * and g_idx byte-identical, for the three direct types. */
static void test_gptq_round_trip(void) {
    static const struct {
        const char *tag;
        int bits;
        bool sym;
        const char *scheme_type;
    } cases[] = {{"sym4", 4, true, "Q4_0"}, {"sym8", 8, true, "Q8_0"}, {"asym4", 4, false, "Q4_1"}};
    for (size_t c = 0; c < 3; c++) {
        char ck[600], gguf[700], back[700];
        snprintf(ck, sizeof ck, "%s", tmp_path(cases[c].tag));
        snprintf(gguf, sizeof gguf, "%s.gguf", ck);
        snprintf(back, sizeof back, "%s-back", ck);
        lb_quantize_params qp;
        lb_quantize_default_params(&qp);
        qp.method = LB_QUANT_RTN;
        qp.bits = cases[c].bits;
        qp.sym = cases[c].sym;
        qp.group_size = 32;
        qp.n_threads = 2;
        TH_CHECK_OK(lb_quantize_model(th_shared("models/tinystories-656k"), ck, &qp, NULL, NULL));
        lb_export_opts o;
        lb_export_opts_default(&o);
        o.mode = LB_EXPORT_MODE_DIRECT;
        lb_export_plan *plan = NULL;
        TH_CHECK_OK(lb_export_gguf(ck, gguf, &o, &plan, NULL));
        if (plan) {
            TH_CHECK_INT(plan->n_route[LB_EXPORT_ROUTE_DIRECT], 14);
            for (size_t i = 0; i < plan->n_tensors; i++)
                if (plan->tensors[i].route == LB_EXPORT_ROUTE_DIRECT)
                    TH_CHECK_STR(lb_type_name(plan->tensors[i].type), cases[c].scheme_type);
        }
        lb_export_plan_free(plan);
        lb_export_hf_stats st;
        TH_CHECK_OK(lb_export_gguf_to_gptq(gguf, back, NULL, &st));
        TH_CHECK_INT(st.n_gptq, 14);
        TH_CHECK(st.notes[0] == '\0');
        lb_safetensors *a = NULL, *b = NULL;
        TH_CHECK_OK(lb_st_open(ck, &a));
        TH_CHECK_OK(lb_st_open(back, &b));
        int n_same = 0, n_q = 0;
        for (size_t i = 0; a && b && i < lb_st_count(a); i++) {
            const lb_tensor *t = lb_st_tensor_at(a, i);
            const char *dot = strrchr(t->name, '.');
            if (!dot || (strcmp(dot, ".qweight") && strcmp(dot, ".qzeros") && strcmp(dot, ".scales") &&
                         strcmp(dot, ".g_idx")))
                continue;
            n_q++;
            const lb_tensor *u = lb_st_find(b, t->name);
            bool eq = u && u->type == t->type && u->nbytes == t->nbytes && !memcmp(u->data, t->data, t->nbytes);
            TH_CHECK_MSG(eq, "%s: %s differs after GPTQ -> GGUF -> GPTQ", cases[c].tag, t->name);
            n_same += eq;
        }
        TH_CHECK_INT(n_q, 56);
        TH_CHECK_INT(n_same, 56);
        fprintf(stderr, "  %s g32: GPTQ -> GGUF %s -> GPTQ: %d/%d code/zero/scale/g_idx tensors "
                        "byte-identical\n", cases[c].tag, cases[c].scheme_type, n_same, n_q);
        /* the checkpoint configs agree on what matters */
        char p1[800], p2[800];
        snprintf(p1, sizeof p1, "%s/quantize_config.json", ck);
        snprintf(p2, sizeof p2, "%s/quantize_config.json", back);
        cJSON *ja = load_json(p1), *jb = load_json(p2);
        static const char *keys[] = {"bits", "group_size", "sym", "desc_act", "checkpoint_format"};
        for (int k = 0; k < 5; k++) {
            char *x = cJSON_PrintUnformatted(cJSON_GetObjectItem(ja, keys[k]));
            char *y = cJSON_PrintUnformatted(cJSON_GetObjectItem(jb, keys[k]));
            TH_CHECK_MSG(x && y && !strcmp(x, y), "%s: %s %s vs %s", cases[c].tag, keys[k], x, y);
            free(x);
            free(y);
        }
        cJSON_Delete(ja);
        cJSON_Delete(jb);
        lb_st_close(a);
        lb_st_close(b);
    }
    /* llama-quantize's own Q4_0 file: every linear becomes codes */
    lb_export_hf_stats st;
    TH_CHECK_OK(lb_export_gguf_to_gptq(th_shared("models/tinystories-656k-gguf/ts656k-q4_0.gguf"),
                                       tmp_path("llq4-gptq"), NULL, &st));
    TH_CHECK_INT(st.n_gptq, 14);
    /* an F32 file has nothing to write as codes */
    TH_CHECK_FAILS(lb_export_gguf_to_gptq(th_shared("models/tinystories-656k-gguf/ts656k-f32.gguf"),
                                          tmp_path("f32-gptq"), NULL, NULL),
                   LB_ERR_UNSUPPORTED);
    TH_CHECK(dir_empty_or_absent(tmp_path("f32-gptq")));
}

int main(void) {
    if (!lb_is_file(th_shared("models/tinystories-656k-gguf/ts656k-f32.gguf")))
        th_skip("../shared models not found");
    TH_RUN(test_f32_round_trip);
    TH_RUN(test_q4_0_dequantized);
    TH_RUN(test_spm_merges_as_transformers);
    TH_RUN(test_bpe_tokenizer_round_trip);
    TH_RUN(test_llama3_rope_round_trip);
    TH_RUN(test_gptq_round_trip);
    TH_RUN(test_bad_input);
    return th_report();
}
