/* lowbit ppl — perplexity of a model on a text (or token-id) file, with
 * llama-perplexity's protocol (default) or disjoint full windows. */
#include "cli.h"
#include "cli_lora.h"
#include "cli_text.h"

#include "lowbit/eval.h"
#include "lowbit/file.h"
#include "lowbit/kld.h"
#include "lowbit/model.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *fp) {
    fprintf(fp,
            "usage: lowbit ppl MODEL (--text-file FILE | --ids FILE.i32) "
            "[options]\n"
            "\n"
            "  MODEL               HF or GPTQ checkpoint directory (or GGUF)\n"
            "  --text-file FILE    text to evaluate; llama protocol: read as "
            "bytes, one\n"
            "                      trailing newline removed, tokenized once "
            "with BOS\n"
            "  --ids FILE.i32      pre-tokenized ids (raw little-endian "
            "int32)\n"
            "  --protocol P        llama (default): BOS over each chunk's "
            "first token,\n"
            "                      second half of each chunk scored "
            "(llama-perplexity);\n"
            "                      full: disjoint windows, every position "
            "scored\n"
            CLI_LORA_USAGE
            "  --ctx N             window / chunk length (default 512, at "
            "most the\n"
            "                      model's max_position_embeddings)\n"
            "  --batch N           tokens per forward call (default: ctx)\n"
            "  --chunks N          evaluate at most N chunks\n"
            "  --no-bos            llama protocol: keep each chunk's first "
            "token (default:\n"
            "                      replaced by BOS when the tokenizer adds "
            "one, as llama.cpp)\n"
            "  --gptq-mode M       GPTQ checkpoints: auto (exact Q4_0/Q8_0, "
            "else F32),\n"
            "                      f32, f16, fast (auto + approximate Q4_1)\n"
            "  -t, --threads N     threads (default: all CPUs)\n"
            "  --save-logits FILE  write the scored rows' log-probabilities "
            "in\n"
            "                      llama-perplexity's --kl-divergence-base "
            "format\n"
            "  --kl-base FILE      KL divergence against such a file (made by "
            "lowbit or\n"
            "                      llama-perplexity): ctx and chunks come "
            "from it; the text\n"
            "                      (optional) must give the same tokens\n"
            "\n"
            "Prints \"Final estimate: PPL = X +/- Y\"; --json prints {ppl, "
            "ppl_err,\n"
            "tokens_scored, chunks, protocol, ctx}. With --kl-base, "
            "llama-perplexity's\n"
            "statistics (mean KLD, percentiles, same top p, delta-p); --json "
            "adds \"kl\".\n");
}

typedef struct chunk_printer {
    bool show;
} chunk_printer;

static bool on_chunk(void *user, int32_t c, double ppl) {
    chunk_printer *p = user;
    if (p->show) {
        fprintf(stderr, "[%d]%.4f,", (int)c + 1, ppl);
        fflush(stderr);
    }
    return true;
}

/* --save-logits: llama-perplexity's --kl-divergence-base writer */
typedef struct save_state {
    lb_atomic_file af;
    uint16_t *row;
    int32_t nv;
} save_state;

static lb_status on_save_row(void *user, int64_t chunk, int32_t row,
                             const float *logits, int32_t n_vocab,
                             int32_t target) {
    save_state *ss = user;
    (void)chunk;
    (void)row;
    lb_kl_encode_row(logits, n_vocab, target, ss->row);
    return lb_atomic_write(&ss->af, ss->row, (size_t)ss->nv * 2);
}

/* --kl-base: statistics against a base file */
typedef struct kl_state {
    lb_kl_base base;
    lb_kl_stats stats;
} kl_state;

static lb_status on_kl_row(void *user, int64_t chunk, int32_t row,
                           const float *logits, int32_t n_vocab,
                           int32_t target) {
    kl_state *ks = user;
    int32_t first = ks->base.n_ctx / 2;
    int64_t r = chunk * ks->base.rows_per_chunk + (row - first);
    float scale, minlp;
    const uint8_t *codes;
    lb_kl_base_row(&ks->base, r, &scale, &minlp, &codes);
    return lb_kl_add(&ks->stats, logits, n_vocab, scale, minlp, codes, target);
}

/* llama-perplexity's kl_divergence() summary, same formats */
static void print_kl(const lb_kl_summary *o) {
    printf("====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6lf ± %10.6lf\n", o->ppl,
           o->ppl_unc);
    printf("Mean PPL(base)                : %10.6lf ± %10.6lf\n", o->ppl_base,
           o->ppl_base_unc);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2lf%%\n", 100.0 * o->log_ppl_cor);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6lf ± %10.6lf\n", o->log_ratio,
           o->log_ratio_unc);
    printf("Mean PPL(Q)/PPL(base)         : %10.6lf ± %10.6lf\n", o->ratio,
           o->ratio_unc);
    printf("Mean PPL(Q)-PPL(base)         : %10.6lf ± %10.6lf\n", o->diff,
           o->diff_unc);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6lf ± %10.6lf\n", o->kld, o->kld_unc);
    static const char *kn[11] = {"Maximum KLD", "99.9%   KLD", "99.0%   KLD",
                                 "95.0%   KLD", "90.0%   KLD", "Median  KLD",
                                 "10.0%   KLD", " 5.0%   KLD", " 1.0%   KLD",
                                 " 0.1%   KLD", "Minimum KLD"};
    for (int i = 0; i < 11; i++)
        printf("%s: %10.6f\n", kn[i], (double)o->kld_pct[i]);
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    Δp: %6.3lf ± %5.3lf %%\n", 100.0 * o->p_diff,
           100.0 * o->p_diff_unc);
    static const char *pn[13] = {"Maximum Δp", "99.9%   Δp", "99.0%   Δp",
                                 "95.0%   Δp", "90.0%   Δp", "75.0%   Δp",
                                 "Median  Δp", "25.0%   Δp", "10.0%   Δp",
                                 " 5.0%   Δp", " 1.0%   Δp", " 0.1%   Δp",
                                 "Minimum Δp"};
    for (int i = 0; i < 13; i++)
        printf("%s: %6.3lf%%\n", pn[i], 100.0 * (double)o->p_diff_pct[i]);
    printf("RMS Δp    : %6.3lf ± %5.3lf %%\n", 100.0 * o->rms_p_diff,
           100.0 * o->rms_p_diff_unc);
    printf("Same top p: %6.3lf ± %5.3lf %%\n", 100.0 * o->same_top,
           100.0 * o->same_top_unc);
}

static void print_kl_json(const lb_kl_summary *o) {
    printf(", \"kl\": {\"count\": %lld, \"ppl_q\": %.10g, \"ppl_q_unc\": "
           "%.10g, \"ppl_base\": %.10g, \"ppl_base_unc\": %.10g, "
           "\"cor_ln_ppl\": %.10g, \"ln_ppl_ratio\": %.10g, "
           "\"ln_ppl_ratio_unc\": %.10g, \"ppl_ratio\": %.10g, "
           "\"ppl_diff\": %.10g, \"kld_mean\": %.10g, \"kld_unc\": %.10g, "
           "\"kld_max\": %.10g, \"kld_p99\": %.10g, \"kld_median\": %.10g, "
           "\"kld_min\": %.10g, \"dp_mean\": %.10g, \"dp_unc\": %.10g, "
           "\"dp_median\": %.10g, \"dp_rms\": %.10g, \"same_top_p\": %.10g, "
           "\"same_top_p_unc\": %.10g}",
           (long long)o->count, o->ppl, o->ppl_unc, o->ppl_base,
           o->ppl_base_unc, o->log_ppl_cor, o->log_ratio, o->log_ratio_unc,
           o->ratio, o->diff, o->kld, o->kld_unc, (double)o->kld_pct[0],
           (double)o->kld_pct[2], (double)o->kld_pct[5],
           (double)o->kld_pct[10], o->p_diff, o->p_diff_unc,
           (double)o->p_diff_pct[6], o->rms_p_diff, o->same_top,
           o->same_top_unc);
}

int cmd_ppl(int argc, char **argv) {
    const char *cmd = "ppl";
    const char *model = NULL, *text = NULL, *ids_path = NULL;
    const char *save_path = NULL, *kl_path = NULL;
    long ctx_len = 0, batch = 0, chunks = 0, threads = 0;
    int protocol = LB_PPL_LLAMA;
    bool no_bos = false;
    lb_model_load_opts lo = {0};
    cli_lora lora = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        {
            const int lr = cli_lora_arg(&lora, cmd, argc, argv, &i);
            if (lr < 0) return 2;
            if (lr) continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--text-file") || !strcmp(a, "-f")) {
            if (!(text = cli_value(cmd, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--save-logits") ||
                   !strcmp(a, "--kl-divergence-base")) {
            if (!(save_path = cli_value(cmd, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--kl-base")) {
            if (!(kl_path = cli_value(cmd, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--ids")) {
            if (!(ids_path = cli_value(cmd, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--protocol")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
            protocol = lb_ppl_protocol_from_name(v);
            if (protocol < 0)
                return cli_usage_error(cmd, "--protocol: 'llama' or 'full', "
                                       "got '%s'", v);
        } else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) ||
                !cli_parse_int(cmd, a, v, 2, 1 << 24, &ctx_len))
                return 2;
        } else if (!strcmp(a, "--batch") || !strcmp(a, "-b")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) ||
                !cli_parse_int(cmd, a, v, 1, 1 << 24, &batch))
                return 2;
        } else if (!strcmp(a, "--chunks")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) ||
                !cli_parse_int(cmd, a, v, 1, 1L << 30, &chunks))
                return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) ||
                !cli_parse_int(cmd, a, v, 1, 1024, &threads))
                return 2;
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = true;
        } else if (!strcmp(a, "--gptq-mode")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
            if (!strcmp(v, "auto"))
                lo.gptq_mode = LB_GPTQ_LOAD_AUTO;
            else if (!strcmp(v, "f32"))
                lo.gptq_mode = LB_GPTQ_LOAD_F32;
            else if (!strcmp(v, "f16"))
                lo.gptq_mode = LB_GPTQ_LOAD_F16;
            else if (!strcmp(v, "fast"))
                lo.gptq_mode = LB_GPTQ_LOAD_FAST;
            else
                return cli_usage_error(cmd, "--gptq-mode: auto, f32, f16 or "
                                       "fast, got '%s'", v);
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error(cmd, "unknown option '%s'", a);
        } else if (!model) {
            model = a;
        } else {
            return cli_usage_error(cmd, "unexpected argument '%s'", a);
        }
    }
    if (!model) return cli_usage_error(cmd, "no model given");
    if (text && ids_path)
        return cli_usage_error(cmd, "give one of --text-file and --ids");
    if (!text && !ids_path && !kl_path)
        return cli_usage_error(cmd, "give --text-file or --ids (or --kl-base "
                               "FILE to use its tokens)");
    if ((save_path || kl_path) && protocol != LB_PPL_LLAMA)
        return cli_usage_error(cmd, "--save-logits / --kl-base use "
                               "llama-perplexity's protocol (--protocol "
                               "llama)");
    if (save_path && kl_path)
        return cli_usage_error(cmd, "give one of --save-logits and --kl-base");
    /* the KL base first: a bad file fails before the model loads */
    lb_mapped_file kmf = {0};
    kl_state ks;
    memset(&ks, 0, sizeof ks);
    if (kl_path) {
        lb_status kst = lb_check_regular_file(kl_path);
        if (kst == LB_OK) kst = lb_map_file(kl_path, &kmf);
        if (kst == LB_OK)
            kst = lb_kl_base_parse(kmf.data, kmf.size, kl_path, &ks.base);
        if (kst != LB_OK) {
            lb_unmap_file(&kmf);
            return cli_fail(cmd, kst);
        }
        if (ctx_len && ctx_len != ks.base.n_ctx) {
            int32_t fc = ks.base.n_ctx;
            lb_kl_base_close(&ks.base);
            lb_unmap_file(&kmf);
            return cli_usage_error(cmd, "--ctx %ld, but %s was made with "
                                   "n_ctx %d", ctx_len, kl_path, (int)fc);
        }
        ctx_len = ks.base.n_ctx;
        chunks = ks.base.n_chunk;
    }

    lb_model *m = NULL;
    cli_progress lp;
    lo.progress = cli_progress_make(&lp);
    lb_status st = lb_model_load(model, &lo, &m);
    cli_progress_done(&lp);
    if (st == LB_OK && kl_path && ks.base.n_vocab != m->config.vocab_size)
        st = lb_set_error(LB_ERR_FORMAT, "%s was made for a vocabulary of %d "
                          "tokens; this model has %d (a KL base must come "
                          "from the same vocabulary)", kl_path,
                          (int)ks.base.n_vocab, (int)m->config.vocab_size);
    if (st != LB_OK) {
        lb_model_free(m);
        lb_kl_base_close(&ks.base);
        lb_unmap_file(&kmf);
        return cli_fail(cmd, st);
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (ids_path) {
        char *raw = NULL;
        size_t n = 0;
        st = lb_read_file(ids_path, (size_t)1 << 34, &raw, &n);
        if (st == LB_OK && n % 4) {
            st = lb_set_error(LB_ERR_FORMAT, "%s: %zu bytes is not a whole "
                              "number of int32 ids", ids_path, n);
        }
        if (st == LB_OK) {
            ids = malloc(n ? n : 1);
            if (!ids) st = lb_set_error(LB_ERR_NOMEM, "out of memory");
            else memcpy(ids, raw, n);
            n_ids = n / 4;
        }
        free(raw);
    } else if (!text) {
        /* --kl-base without a text: the file's tokens, as llama.cpp */
        n_ids = (size_t)ks.base.n_ctx * (size_t)ks.base.n_chunk;
        ids = malloc(n_ids * sizeof(int32_t));
        if (!ids) st = lb_set_error(LB_ERR_NOMEM, "out of memory");
        else memcpy(ids, ks.base.tokens, n_ids * sizeof(int32_t));
    } else {
        /* llama.cpp: bytes as read, one trailing '\n' removed; full: the
         * file as it is */
        st = cli_tokenize_file(model, text, protocol == LB_PPL_LLAMA, &ids,
                               &n_ids);
    }
    if (st == LB_OK && kl_path) {
        /* the same text: the file's tokens must be the text's */
        size_t need = (size_t)ks.base.n_ctx * (size_t)ks.base.n_chunk;
        if (n_ids < need)
            st = lb_set_error(LB_ERR_FORMAT, "%s holds %zu tokens (%d chunks "
                              "of %d); the text has only %zu: it was made "
                              "from another text", kl_path, need,
                              (int)ks.base.n_chunk, (int)ks.base.n_ctx, n_ids);
        for (size_t i = 0; st == LB_OK && i < need; i++)
            if (ids[i] != ks.base.tokens[i])
                st = lb_set_error(LB_ERR_FORMAT, "%s: token %zu is %d, the "
                                  "text's is %d: the base was made from "
                                  "another text or tokenizer", kl_path, i,
                                  (int)ks.base.tokens[i], (int)ids[i]);
    }
    if (st != LB_OK) {
        lb_model_free(m);
        free(ids);
        lb_kl_base_close(&ks.base);
        lb_unmap_file(&kmf);
        return cli_fail(cmd, st);
    }
    int32_t max_pos = m->config.max_position_embeddings;
    if (!ctx_len) ctx_len = max_pos > 0 && max_pos < 512 ? max_pos : 512;
    if (max_pos > 0 && ctx_len > max_pos) {
        fprintf(stderr, "lowbit ppl: --ctx %lld exceeds the model's context "
                "length %d (max_position_embeddings)\n", (long long)ctx_len,
                (int)max_pos);
        free(ids);
        lb_model_free(m);
        lb_kl_base_close(&ks.base);
        lb_unmap_file(&kmf);
        return 2;
    }
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = (int32_t)ctx_len;
    cp.n_batch = (int32_t)(batch ? batch : ctx_len);
    cp.n_threads = (int)threads;
    lb_context *ctx = NULL;
    st = lb_context_create(m, &cp, &ctx);
    if (st == LB_OK && lora.n) {
        st = cli_lora_load(&lora, m);
        lb_lora_set ls = cli_lora_set(&lora);
        if (st == LB_OK) st = lb_context_set_loras(ctx, &ls);
    }
    lb_ppl_params pp = lb_ppl_default_params();
    pp.protocol = (lb_ppl_protocol)protocol;
    pp.n_ctx = (int32_t)ctx_len;
    pp.n_batch = (int32_t)batch;
    pp.max_chunks = (int32_t)chunks;
    /* llama.cpp replaces the first token only when the vocabulary adds
     * BOS; without a usable tokenizer, the config's bos_token_id */
    pp.bos_id = m->config.bos_token_id;
    if (protocol == LB_PPL_LLAMA && !no_bos) {
        int32_t b;
        if (cli_tokenizer_bos(model, &b) == LB_OK)
            pp.bos_id = b;
        else
            lb_clear_error();
    }
    if (no_bos) pp.bos_id = -1;
    chunk_printer cpr = {!g_cli.quiet && !g_cli.json};
    pp.on_chunk = on_chunk;
    pp.user = &cpr;
    save_state ss;
    memset(&ss, 0, sizeof ss);
    if (st == LB_OK && save_path) {
        /* header: magic, n_ctx, n_vocab, n_chunk, the chunks' tokens */
        int64_t nch = (int64_t)n_ids / ctx_len;
        if (chunks && nch > chunks) nch = chunks;
        int32_t hdr[3] = {(int32_t)ctx_len, m->config.vocab_size,
                          (int32_t)nch};
        ss.nv = 2 * ((m->config.vocab_size + 1) / 2) + 4;
        ss.row = malloc((size_t)ss.nv * 2);
        if (!ss.row) st = lb_set_error(LB_ERR_NOMEM, "out of memory");
        if (st == LB_OK && nch < 1)
            st = lb_set_error(LB_ERR_RANGE, "%zu tokens: not one chunk of %ld",
                              n_ids, ctx_len);
        if (st == LB_OK) st = lb_atomic_open(save_path, &ss.af);
        if (st == LB_OK) st = lb_atomic_write(&ss.af, "_logits_", 8);
        if (st == LB_OK) st = lb_atomic_write(&ss.af, hdr, sizeof hdr);
        if (st == LB_OK)
            st = lb_atomic_write(&ss.af, ids,
                                 (size_t)nch * (size_t)ctx_len * 4);
        pp.on_row = on_save_row;
        pp.row_user = &ss;
    }
    if (kl_path) {
        pp.on_row = on_kl_row;
        pp.row_user = &ks;
    }
    lb_ppl_result r;
    if (st == LB_OK) {
        if (cpr.show)
            fprintf(stderr, "perplexity: %zu tokens, %s protocol, ctx %ld, "
                    "%lld chunks\n",
                    n_ids, lb_ppl_protocol_name(pp.protocol), ctx_len,
                    (long long)(chunks && chunks < (long)(n_ids / ctx_len)
                                    ? chunks
                                    : (long)(n_ids / ctx_len)));
        st = lb_perplexity(ctx, ids, (int64_t)n_ids, &pp, &r);
        if (cpr.show) fputc('\n', stderr);
    }
    lb_context_free(ctx);
    cli_lora_free(&lora);
    lb_model_free(m);
    free(ids);
    if (save_path) {
        if (st == LB_OK) st = lb_atomic_commit(&ss.af);
        else lb_atomic_abort(&ss.af);
        free(ss.row);
    }
    lb_kl_summary ksum;
    if (st == LB_OK && kl_path) st = lb_kl_summarize(&ks.stats, &ksum);
    lb_kl_stats_free(&ks.stats);
    lb_kl_base_close(&ks.base);
    lb_unmap_file(&kmf);
    if (st != LB_OK) return cli_fail(cmd, st);
    if (g_cli.json) {
        printf("{\"ppl\": %.10g, \"ppl_err\": %.10g, \"tokens_scored\": %lld, "
               "\"chunks\": %d, \"protocol\": \"%s\", \"ctx\": %ld",
               r.ppl, r.ppl_err, (long long)r.tokens_scored, (int)r.chunks,
               lb_ppl_protocol_name(pp.protocol), ctx_len);
        if (kl_path) print_kl_json(&ksum);
        printf("}\n");
    } else {
        printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
        if (kl_path) {
            printf("\n");
            print_kl(&ksum);
        }
        if (save_path)
            fprintf(stderr, "lowbit ppl: saved the log-probabilities of %lld "
                    "tokens to %s\n", (long long)r.tokens_scored, save_path);
    }
    return 0;
}
