/* lowbit parity — compare two models (A reference) on the same tokens. */
#include "cli.h"
#include "cli_lora.h"
#include "cli_text.h"

#include "lowbit/model.h"
#include "lowbit/parity.h"
#include "lowbit/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *fp) {
    fprintf(fp,
            "usage: lowbit parity A B --text-file FILE [options]\n"
            "\n"
            "Compare model B with model A (the reference; each a HF or GPTQ\n"
            "checkpoint directory or a GGUF file) on the tokens of FILE\n"
            "(tokenized once with A's tokenizer, or --tokenizer's, BOS added):\n"
            "teacher-forced top-1 agreement, Pearson correlation and MSE of the\n"
            "logits, mean/max KL(P_A || P_B), next-token perplexities, the first\n"
            "position where the top-1 tokens differ, and the first divergence of\n"
            "greedy continuations.\n"
            "\n"
            "  --text-file FILE     text to compare on (required)\n"
            "  --ctx N              window length (default 256, at most the\n"
            "                       models' max_position_embeddings)\n"
            "  --windows N          at most N windows (default: all)\n"
            "  --prompt N           greedy: prompt tokens (default 8)\n"
            "  --greedy N           greedy: tokens to generate (default 32, 0 = skip)\n"
            "  --tokenizer PATH     tokenize with PATH's tokenizer instead of A's\n"
            "  --gptq-mode M        GPTQ checkpoints: auto, f32, f16, fast\n"
            "  -t, --threads N      threads (default: all CPUs)\n"
            "  --lora ADAPTER       LoRA adapter applied to model B (repeatable;\n"
            "                       --lora-scale S after it sets its scale)\n"
            "global: --quiet, --json\n");
}

static void print_piece(FILE *fp, const lb_tokenizer *tok, int32_t id) {
    char buf[64];
    if (!tok || lb_tokenizer_token_to_piece(tok, id, buf, sizeof buf) < 0) {
        fprintf(fp, "#%d", id);
        lb_clear_error();
        return;
    }
    fputc('\'', fp);
    for (const char *c = buf; *c; c++) {
        if (*c == '\n') fputs("\\n", fp);
        else fputc(*c, fp);
    }
    fprintf(fp, "' (%d)", id);
}

int cmd_parity(int argc, char **argv) {
    const char *cmd = "parity";
    const char *pa = NULL, *pb = NULL, *text = NULL, *tok_path = NULL;
    long ctx_len = 0, windows = 0, threads = 0, prompt = 8, n_greedy = 32;
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
        }
#define VAL() \
    do { if (!(v = cli_value(cmd, argc, argv, &i))) return 2; } while (0)
        if (!strcmp(a, "--text-file") || !strcmp(a, "-f")) {
            VAL();
            text = v;
        } else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 2, 1 << 20, &ctx_len)) return 2;
        } else if (!strcmp(a, "--windows")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 1, 1L << 30, &windows)) return 2;
        } else if (!strcmp(a, "--prompt")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 1, 1 << 20, &prompt)) return 2;
        } else if (!strcmp(a, "--greedy")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 0, LB_PARITY_MAX_GREEDY, &n_greedy)) return 2;
        } else if (!strcmp(a, "--tokenizer")) {
            VAL();
            tok_path = v;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 1, 1024, &threads)) return 2;
        } else if (!strcmp(a, "--gptq-mode")) {
            VAL();
            if (!strcmp(v, "auto")) lo.gptq_mode = LB_GPTQ_LOAD_AUTO;
            else if (!strcmp(v, "f32")) lo.gptq_mode = LB_GPTQ_LOAD_F32;
            else if (!strcmp(v, "f16")) lo.gptq_mode = LB_GPTQ_LOAD_F16;
            else if (!strcmp(v, "fast")) lo.gptq_mode = LB_GPTQ_LOAD_FAST;
            else return cli_usage_error(cmd, "--gptq-mode: auto, f32, f16 or fast, got '%s'", v);
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error(cmd, "unknown option '%s'", a);
        } else if (!pa) {
            pa = a;
        } else if (!pb) {
            pb = a;
        } else {
            return cli_usage_error(cmd, "unexpected argument '%s'", a);
        }
#undef VAL
    }
    if (!pa || !pb) return cli_usage_error(cmd, "need two models, A and B");
    if (!text) return cli_usage_error(cmd, "missing --text-file");
    if (!tok_path) tok_path = pa;

    int32_t *ids = NULL;
    size_t n_ids = 0;
    lb_status st = cli_tokenize_file(tok_path, text, false, &ids, &n_ids);
    if (st != LB_OK) return cli_fail(cmd, st);
    lb_model *ma = NULL, *mb = NULL;
    st = lb_model_load(pa, &lo, &ma);
    if (st == LB_OK) st = lb_model_load(pb, &lo, &mb);
    if (st != LB_OK) {
        free(ids);
        lb_model_free(ma);
        return cli_fail(cmd, st);
    }
    int32_t maxpos = ma->config.max_position_embeddings < mb->config.max_position_embeddings ? ma->config.max_position_embeddings : mb->config.max_position_embeddings;
    if (!ctx_len) ctx_len = maxpos > 0 && maxpos < 256 ? maxpos : 256;
    if (maxpos > 0 && ctx_len > maxpos) {
        fprintf(stderr, "lowbit parity: --ctx %lld exceeds the models' "
                "context length %d (max_position_embeddings)\n",
                (long long)ctx_len, (int)maxpos);
        free(ids);
        lb_model_free(ma);
        lb_model_free(mb);
        return 2;
    }
    lb_parity_params pp = lb_parity_default_params();
    pp.n_ctx = (int32_t)ctx_len;
    pp.max_windows = (int32_t)windows;
    pp.n_prompt = (int32_t)prompt;
    pp.n_greedy = (int32_t)n_greedy;
    lb_context_params cp = lb_context_default_params();
    int32_t need = (int32_t)ctx_len;
    if (n_greedy && prompt + n_greedy > need) need = (int32_t)(prompt + n_greedy);
    cp.n_ctx = need;
    cp.n_batch = (int32_t)ctx_len;
    cp.n_threads = (int)threads;
    lb_context *ca = NULL, *cb = NULL;
    st = lb_context_create(ma, &cp, &ca);
    if (st == LB_OK) st = lb_context_create(mb, &cp, &cb);
    if (st == LB_OK && lora.n) { /* --lora: applied to model B */
        st = cli_lora_load(&lora, mb);
        lb_lora_set ls = cli_lora_set(&lora);
        if (st == LB_OK) st = lb_context_set_loras(cb, &ls);
    }
    cli_progress prog;
    pp.progress = cli_progress_make(&prog);
    lb_parity_result r;
    memset(&r, 0, sizeof r);
    if (st == LB_OK) st = lb_parity(ca, cb, ids, (int64_t)n_ids, &pp, &r);
    cli_progress_done(&prog);
    lb_context_free(ca);
    lb_context_free(cb);
    cli_lora_free(&lora);
    lb_model_free(ma);
    lb_model_free(mb);
    free(ids);
    if (st != LB_OK) return cli_fail(cmd, st);
    lb_tokenizer *tok = NULL;
    void *th = NULL;
    if (cli_tokenizer_open(tok_path, &th) == LB_OK) tok = th;
    else lb_clear_error();
    if (g_cli.json) {
        printf("{\"a\": ");
        cli_json_string(stdout, pa);
        printf(", \"b\": ");
        cli_json_string(stdout, pb);
        printf(", \"tokens\": %zu, \"ctx\": %ld, \"windows\": %d, \"positions\": %lld, "
               "\"top1_agreement\": %.6f, \"top1_agree\": %lld, \"pearson\": %.9f, "
               "\"mse\": %.6g, \"mean_kl\": %.6g, \"max_kl\": %.6g, \"ppl_a\": %.6f, "
               "\"ppl_b\": %.6f, \"first_divergence\": %lld, \"div_top1_a\": %d, "
               "\"div_top1_b\": %d, \"greedy\": %d, \"greedy_divergence\": %d, "
               "\"greedy_token_a\": %d, \"greedy_token_b\": %d}\n",
               n_ids, ctx_len, r.n_windows, (long long)r.n_positions, r.top1_agreement,
               (long long)r.n_top1_agree, r.pearson, r.mse, r.mean_kl, r.max_kl, exp(r.nll_a),
               exp(r.nll_b), (long long)r.first_divergence, r.div_top1_a, r.div_top1_b,
               r.n_greedy, r.greedy_divergence, r.greedy_token_a, r.greedy_token_b);
    } else {
        printf("A: %s\nB: %s\n", pa, pb);
        printf("tokens: %zu; %d windows of %ld (%lld positions)\n", n_ids, r.n_windows, ctx_len,
               (long long)r.n_positions);
        printf("top-1 agreement: %.4f%% (%lld/%lld)\n", 100.0 * r.top1_agreement,
               (long long)r.n_top1_agree, (long long)r.n_positions);
        printf("logits: Pearson r %.7f, MSE %.4g\n", r.pearson, r.mse);
        printf("KL(A||B): mean %.4g, max %.4g nats\n", r.mean_kl, r.max_kl);
        printf("next-token perplexity (full windows): A %.4f, B %.4f\n", exp(r.nll_a), exp(r.nll_b));
        if (r.first_divergence < 0) printf("top-1: identical at every position\n");
        else {
            printf("first top-1 divergence at position %lld: A ", (long long)r.first_divergence);
            print_piece(stdout, tok, r.div_top1_a);
            printf(", B ");
            print_piece(stdout, tok, r.div_top1_b);
            printf("\n");
        }
        if (r.n_greedy) {
            if (r.greedy_divergence < 0)
                printf("greedy (prompt %ld, %d tokens): identical\n", prompt, r.n_greedy);
            else {
                printf("greedy (prompt %ld, %d tokens): diverges at token %d: A ", prompt,
                       r.n_greedy, r.greedy_divergence);
                print_piece(stdout, tok, r.greedy_token_a);
                printf(", B ");
                print_piece(stdout, tok, r.greedy_token_b);
                printf("\n");
            }
        }
    }
    if (th) cli_tokenizer_close(th);
    lb_parity_result_free(&r);
    return 0;
}
