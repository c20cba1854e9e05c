/* lowbit ppl — perplexity of a model on a text (or token-id) file, with
 * llama-perplexity's protocol (default) or disjoint full windows. */
#include "cli.h"
#include "cli_lora.h"
#include "cli_text.h"

#include "lowbit/eval.h"
#include "lowbit/file.h"
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
            "\n"
            "Prints \"Final estimate: PPL = X +/- Y\"; --json prints {ppl, "
            "ppl_err,\n"
            "tokens_scored, chunks, protocol, ctx}.\n");
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

int cmd_ppl(int argc, char **argv) {
    const char *cmd = "ppl";
    const char *model = NULL, *text = NULL, *ids_path = NULL;
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
    if (!!text == !!ids_path)
        return cli_usage_error(cmd, "give exactly one of --text-file and "
                               "--ids");

    lb_model *m = NULL;
    cli_progress lp;
    lo.progress = cli_progress_make(&lp);
    lb_status st = lb_model_load(model, &lo, &m);
    cli_progress_done(&lp);
    if (st != LB_OK) return cli_fail(cmd, st);
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
    } else {
        /* llama.cpp: bytes as read, one trailing '\n' removed; full: the
         * file as it is */
        st = cli_tokenize_file(model, text, protocol == LB_PPL_LLAMA, &ids,
                               &n_ids);
    }
    if (st != LB_OK) {
        lb_model_free(m);
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
    if (st != LB_OK) return cli_fail(cmd, st);
    if (g_cli.json) {
        printf("{\"ppl\": %.10g, \"ppl_err\": %.10g, \"tokens_scored\": %lld, "
               "\"chunks\": %d, \"protocol\": \"%s\", \"ctx\": %ld}\n",
               r.ppl, r.ppl_err, (long long)r.tokens_scored, (int)r.chunks,
               lb_ppl_protocol_name(pp.protocol), ctx_len);
    } else {
        printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
    }
    return 0;
}
